/*
 * Shard map: parsing, validation (a corpus of broken maps, one per rule,
 * each error naming the entry), lookups, the file store's atomic
 * compare-and-swap publish, and allocation failures in the parser.
 */
#include <check.h>
#include <jansson.h>
#include <libshard.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc_budget.h" /* shard__alloc_budget, budget_malloc */
#include "base_map.h"
#include "check_util.h"
#include "map.h"          /* the parsed legacy section */

static const char base_map[] = BASE_MAP_HEAD
    " \"credentials\": {\"user\": \"app\", \"password_env\": \"LIBSHARD_PASSWORD\"},"
    BASE_MAP_TAIL;

static shard_map *parse_ok(const char *text)
{
    shard_map *m = NULL;
    int rc = shard_map_parse(&m, text, strlen(text));
    ck_assert_msg(rc == 0, "valid map rejected: %s", shard_errmsg());
    return m;
}

START_TEST(valid_map_lookups)
{
    shard_map *m = parse_ok(base_map);
    const char *pair, *master, *standby;
    char db[65];

    assert_base_map_lookups(m);
    ck_assert_int_eq(shard_map_pair_of(m, 0, &pair), 0);
    ck_assert_str_eq(pair, "MySQL001");
    ck_assert_int_eq(shard_map_pair_of(m, 63, &pair), 0);
    ck_assert_str_eq(pair, "MySQL002");
    ck_assert_int_eq(shard_map_pair_addrs(m, "MySQL009", &master, &standby),
                     SHARD_ENOTFOUND);
    ck_assert_int_eq(shard_map_database(m, 3429, db, 7), SHARD_EINVAL);
    shard_map_free(m);
}
END_TEST

/* Many ranges: every shard resolves to the pair whose range holds it. */
START_TEST(lookup_many_ranges)
{
    json_t *doc = json_loads(base_map, 0, NULL), *ranges = json_array();
    shard_map *m;
    char *text;

    json_object_set_new(doc, "open_shards", json_integer(4096));
    for (int i = 0; i < 1024; i++)
        json_array_append_new(ranges, json_pack("{s:[i,i],s:s}", "range", i * 4, i * 4 + 3,
                                                "pair", i % 3 == 0 ? "MySQL001" : "MySQL002"));
    json_object_set_new(doc, "id_shards", ranges);
    text = json_dumps(doc, 0);
    m = parse_ok(text);
    for (unsigned s = 0; s < 4096; s++) {
        const char *pair;
        ck_assert_int_eq(shard_map_pair_of(m, s, &pair), 0);
        ck_assert_str_eq(pair, (s / 4) % 3 == 0 ? "MySQL001" : "MySQL002");
    }
    shard_map_free(m);
    free(text);
    json_decref(doc);
}
END_TEST

/* ---- the corpus of broken maps ----------------------------------------- */

typedef struct broken {
    const char *path;   /* slash-separated; last part is the key/index to set */
    const char *value;  /* JSON text, or NULL to delete the entry */
    const char *expect; /* substring the error message must contain */
} broken;

static const broken corpus[] = {
    {"version", NULL, "version: missing"},
    {"version", "\"7\"", "version: must be an integer"},
    {"version", "0", "version: 0 out of range"},
    {"version", "-3", "version"},
    {"open_shards", "0", "open_shards: 0 out of range"},
    {"open_shards", "65537", "open_shards: 65537 out of range"},
    {"open_shards", "1.5", "open_shards: must be an integer"},
    {"open_shards", "65", "open shards 64..64 are not covered"},
    {"open_shard", "64", "unknown key \"open_shard\""},
    {"database_format", "\"db%s\"", "database_format"},
    {"database_format", "\"db\"", "database_format: \"db\" has no %d"},
    {"database_format", "\"Db%05d\"", "database_format"},
    {"database_format", "\"db%05d%d\"", "database_format"},
    {"database_format", "\"db-%05d\"", "database_format"},
    {"database_format", "\"%05d\"", "database_format"},
    {"database_format", "\"db%05d`x\"", "database_format"},
    {"database_format", "5", "database_format: must be a string"},
    {"database_format", "\"db%5d\"", "needs the 0 flag"},
    {"credentials", NULL, "credentials: missing"},
    {"credentials/user", NULL, "credentials.user: missing"},
    {"credentials/user", "\"\"", "credentials.user"},
    {"credentials/password", "\"hunter2\"", "credentials.password: passwords never"},
    {"credentials/password_env", "\"1BAD\"", "credentials.password_env"},
    {"credentials/password_env", "\"A B\"", "credentials.password_env"},
    {"credentials/tls", "{\"verify\": true}", "credentials.tls: verify needs a ca"},
    {"credentials/tls", "{\"ca\": \"/c\", \"cert\": \"/x\"}", "cert and key go together"},
    {"credentials/tls", "{\"ca\": \"/c\", \"verify\": 1}", "credentials.tls.verify"},
    {"credentials/tls", "{\"ca\": \"/c\", \"pin\": 1}", "credentials.tls: unknown key"},
    {"objects", NULL, "objects: missing"},
    {"objects", "[]", "objects: must be an object"},
    {"objects/pins", "0", "objects.pins: type 0 out of range"},
    {"objects/pins", "1024", "objects.pins: type 1024 out of range"},
    {"objects/pins", "\"1\"", "objects.pins: type must be an integer"},
    {"objects/boards", "1", "objects.boards: type 1 is already used by \"pins\""},
    {"objects/Pins", "9", "objects.Pins: \"Pins\" is not a valid name"},
    {"objects/pins;drop", "9", "is not a valid name"},
    {"objects/9pins", "9", "objects.9pins"},
    {"objects/pin_owned_by_board", "9", "mappings.board_has_pins.reverse"},
    {"mappings/board_has_pins/reverse", "\"user_likes_pins\"",
     "mappings.board_has_pins.reverse: \"user_likes_pins\" is already the name of a mapping"},
    {"mappings/board_has_pins/reverse", "\"board_has_pins\"", "its own reverse"},
    {"mappings/board_has_pins/reverse", "\"pins\"", "already the name of an object type"},
    {"mappings/board_has_pins/reverse", "\"Bad\"", "mappings.board_has_pins.reverse"},
    {"mappings/board_has_pins/reverse", "3", "mappings.board_has_pins.reverse: must be a string"},
    {"mappings/user_likes_pins", "[]", "mappings.user_likes_pins: must be an object"},
    {"mappings/user_likes_pins/order", "\"x\"", "mappings.user_likes_pins: unknown key"},
    {"mappings/users", "{}", "mappings.users: \"users\" is already the name of an object"},
    {"pairs", NULL, "pairs: missing"},
    {"pairs", "{}", "pairs: must be a non-empty object"},
    {"pairs/MySQL001/master", NULL, "pairs.MySQL001.master: missing"},
    {"pairs/MySQL001/master", "\"127.0.0.1\"", "pairs.MySQL001.master"},
    {"pairs/MySQL001/master", "\"127.0.0.1:0\"", "pairs.MySQL001.master"},
    {"pairs/MySQL001/master", "\"127.0.0.1:65536\"", "pairs.MySQL001.master"},
    {"pairs/MySQL001/master", "\"127.0.0.1:33x\"", "pairs.MySQL001.master"},
    {"pairs/MySQL001/master", "\":3306\"", "pairs.MySQL001.master"},
    {"pairs/MySQL001/master", "\"ho st:3306\"", "pairs.MySQL001.master"},
    {"pairs/MySQL001/master", "\"unix:relative.sock\"", "pairs.MySQL001.master"},
    {"pairs/MySQL001/master", "\"[::1:3306\"", "pairs.MySQL001.master"},
    {"pairs/MySQL001/standby", "\"127.0.0.1:33061\"", "pairs.MySQL001.standby: same address"},
    {"pairs/MySQL001/standby", "\"x:\"", "pairs.MySQL001.standby"},
    {"pairs/MySQL001/weight", "1", "pairs.MySQL001: unknown key"},
    {"pairs/My SQL", "{\"master\": \"h:1\"}", "pairs.My SQL"},
    {"id_shards", NULL, "id_shards: missing"},
    {"id_shards", "[]", "id_shards: must be a non-empty array"},
    {"id_shards/0/range", "[31, 0]", "id_shards[0].range: [31, 0] is reversed"},
    {"id_shards/0/range", "[0, 40]", "overlaps"},
    {"id_shards/0/range", "[0, 30]", "shards 31..31 are not covered"},
    {"id_shards/0/range", "[1, 31]", "shards 0..0 are not covered"},
    {"id_shards/0/range", "[0]", "id_shards[0].range: must be [first, last]"},
    {"id_shards/0/range", "[0, \"31\"]", "id_shards[0].range: must be [first, last]"},
    {"id_shards/1/range", "[32, 65536]", "id_shards[1].range: [32, 65536] outside"},
    {"id_shards/1/range", "[-1, 63]", "id_shards[1].range"},
    {"id_shards/1/pair", "\"MySQL003\"", "id_shards[1].pair: unknown pair \"MySQL003\""},
    {"id_shards/1/pair", NULL, "id_shards[1].pair: missing"},
    {"id_shards/1", "7", "id_shards[1]: must be an object"},
    {"mod_shards/count", "0", "mod_shards.count: 0 out of range"},
    {"mod_shards/count", "65537", "mod_shards.count: 65537 out of range"},
    {"mod_shards/count", "20", "mod_shards.ranges: mod shards 16..19 are not covered"},
    {"mod_shards/count", "8", "mod_shards.ranges[0].range: [0, 15] outside 0..7"},
    {"mod_shards/database_format", "\"db%05d\"", "names the same databases"},
    {"mod_shards/database_format", "\"db0%04d\"", "names the same databases"},
    {"mod_shards/database_format", "\"db%d\"", "names the same databases"},
    {"mod_shards/database_format", "\"mod%x\"", "mod_shards.database_format"},
    {"mod_shards/tables", "[\"ok\", \"Bad\"]", "mod_shards.tables[1]"},
    {"mod_shards/tables", "[\"a\", \"a\"]", "mod_shards.tables[1]: \"a\" is listed twice"},
    {"mod_shards/tables", "\"users\"", "mod_shards.tables: must be an array"},
    {"mod_shards/ranges/0/pair", "\"nope\"", "mod_shards.ranges[0].pair: unknown pair"},
    {"mod_shards/ranges", NULL, "mod_shards.ranges: missing"},
    {"lease_ms", "\"2000\"", "top level.lease_ms: must be an integer"},
    {"lease_ms", "600001", "top level.lease_ms: 600001 out of range"},
    {"lease_ms", "-5", "top level.lease_ms: -5 out of range"},
    {"lease_max_ms", "true", "top level.lease_max_ms: must be an integer"},
    {"lease_writes", "1", "lease_writes: must be true or false"},
    {"moving", "{}", "moving: must be an array of [first, last] shard ranges"},
    {"moving", "[[5, 3]]", "moving[0]: must be [first, last] with 0 <= first <= last"},
    {"moving", "[[0, 1], [0, 65536]]", "moving[1]: must be [first, last]"},
    {"moving", "[7]", "moving[0]: must be [first, last]"},
    {"legacy", "[]", "legacy: must be an object"},
    {"legacy", "{\"pinz\": {}}",
     "legacy.pinz: no object type or mapping named \"pinz\" in objects or mappings"},
    {"legacy", "{\"pins\": {}}",
     "legacy.pins: its lookup table \"legacy_pins\" is not in mod_shards.tables: add it"},
    {"legacy", "{\"pins\": 1}", "legacy.pins: must be an object"},
    {"legacy", "{\"pins\": {\"tabel\": \"users_by_name\"}}",
     "legacy.pins: unknown key \"tabel\""},
    {"legacy", "{\"pins\": {\"table\": \"Bad\"}}", "legacy.pins.table: \"Bad\""},
    {"legacy", "{\"pins\": {\"table\": 7}}", "legacy.pins.table: must be a string"},
    {"legacy", "{\"pin_owned_by_board\": {\"table\": \"users_by_name\"}}",
     "legacy.pin_owned_by_board: \"pin_owned_by_board\" is the reverse of mapping"},
    {"legacy", "{\"pins\": {\"table\": \"users_by_name\"},"
               " \"boards\": {\"table\": \"users_by_name\"}}",
     "legacy.boards: table \"users_by_name\" is already the lookup of legacy.pins"},
};

/* Set (or delete, value NULL) the member named by path in doc. */
static void apply(json_t *doc, const char *path, const char *value)
{
    char buf[256], *part, *save = NULL, *next;
    json_t *cur = doc;

    snprintf(buf, sizeof buf, "%s", path);
    part = strtok_r(buf, "/", &save);
    while ((next = strtok_r(NULL, "/", &save))) {
        cur = json_is_array(cur) ? json_array_get(cur, (size_t)atoi(part))
                                 : json_object_get(cur, part);
        ck_assert_msg(cur != NULL, "bad corpus path %s", path);
        part = next;
    }
    if (json_is_array(cur)) {
        ck_assert_ptr_nonnull(value);
        json_array_set_new(cur, (size_t)atoi(part), json_loads(value, JSON_DECODE_ANY, NULL));
    } else if (value) {
        json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
        ck_assert_msg(v != NULL, "bad corpus value %s", value);
        json_object_set_new(cur, part, v);
    } else {
        json_object_del(cur, part);
    }
}

START_TEST(broken_map_rejected)
{
    const broken *b = &corpus[_i];
    json_t *doc = json_loads(base_map, 0, NULL);
    shard_map *m = (shard_map *)0x1;
    char *text;
    int rc;

    apply(doc, b->path, b->value);
    text = json_dumps(doc, 0);
    rc = shard_map_parse(&m, text, strlen(text));
    ck_assert_msg(rc == SHARD_EMAP, "case %d (%s = %s): expected SHARD_EMAP, got %d (%s)",
                  _i, b->path, b->value ? b->value : "deleted", rc, shard_errmsg());
    ck_assert_msg(m == (shard_map *)0x1, "output touched on failure");
    ck_assert_msg(strstr(shard_errmsg(), b->expect) != NULL,
                  "case %d (%s): message \"%s\" does not contain \"%s\"", _i, b->path,
                  shard_errmsg(), b->expect);
    ck_assert_msg(strncmp(shard_errmsg(), "shard map: ", 11) == 0, "message: %s",
                  shard_errmsg());
    free(text);
    json_decref(doc);
}
END_TEST

/* "legacy" names object types and mappings, each with a lookup table that
 * mod_shards.tables declares (default legacy_NAME). */
START_TEST(legacy_section)
{
    json_t *doc = json_loads(base_map, 0, NULL);
    json_t *tables = json_object_get(json_object_get(doc, "mod_shards"), "tables");
    const shard_legacydef *d;
    shard_map *m;
    char *text;

    json_array_append_new(tables, json_string("legacy_pins"));
    json_array_append_new(tables, json_string("old_boards"));
    json_array_append_new(tables, json_string("legacy_board_has_pins"));
    json_object_set_new(doc, "legacy",
                        json_pack("{s:{},s:{s:s},s:{}}", "pins", "boards", "table",
                                  "old_boards", "board_has_pins"));
    text = json_dumps(doc, 0);
    m = parse_ok(text);
    ck_assert_ptr_nonnull(d = map_legacy_of_type(m, 1));
    ck_assert_str_eq(d->table, "legacy_pins");
    ck_assert_str_eq(d->name, "pins");
    ck_assert_ptr_nonnull(d = map_legacy_of(m, "boards"));
    ck_assert_str_eq(d->table, "old_boards");
    ck_assert_uint_eq(d->type, 2);
    ck_assert_ptr_nonnull(d = map_legacy_of(m, "board_has_pins"));
    ck_assert_str_eq(d->table, "legacy_board_has_pins");
    ck_assert_uint_eq(d->type, 0);
    ck_assert_ptr_null(map_legacy_of_type(m, 3));
    ck_assert_ptr_null(map_legacy_of(m, "users"));
    shard_map_free(m);
    free(text);
    json_decref(doc);
}
END_TEST

START_TEST(broken_json_rejected)
{
    static const char *const texts[] = {
        "", "{", "[]", "7", "{\"version\": 1,}", "{\"version\": 1, \"version\": 2}",
        "nul\0l"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        shard_map *m = NULL;
        size_t len = i == 6 ? 6 : strlen(texts[i]);
        ck_assert_int_eq(shard_map_parse(&m, texts[i], len), SHARD_EMAP);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(shard_errmsg(), "shard map:"), "%s", shard_errmsg());
    }
    ck_assert_int_eq(shard_map_parse(NULL, "{}", 2), SHARD_EINVAL);
}
END_TEST

/* A map without mod_shards and with only a master per pair is fine. */
START_TEST(minimal_map)
{
    const char *text = "{\"version\":1,\"open_shards\":1,\"credentials\":{\"user\":\"u\"},"
                       "\"objects\":{},\"pairs\":{\"p\":{\"master\":\"[::1]:3306\"}},"
                       "\"id_shards\":[{\"range\":[0,0],\"pair\":\"p\"}]}";
    shard_map *m = parse_ok(text);
    const char *master, *standby = "x";
    char db[65];

    ck_assert_uint_eq(shard_map_mod_count(m), 0);
    ck_assert_int_eq(shard_map_pair_addrs(m, "p", &master, &standby), 0);
    ck_assert_str_eq(master, "[::1]:3306");
    ck_assert_ptr_null(standby);
    ck_assert_int_eq(shard_map_database(m, 12, db, sizeof db), 0);
    ck_assert_str_eq(db, "db00012");
    shard_map_free(m);
}
END_TEST

/* to_json then parse gives the same map; the reference count keeps it alive. */
START_TEST(json_round_trip)
{
    shard_map *m = parse_ok(base_map), *m2;
    char *text = NULL, *text2 = NULL, *sum = NULL;

    ck_assert_int_eq(shard_map_to_json(m, &text), 0);
    m2 = parse_ok(text);
    ck_assert_int_eq(shard_map_to_json(m2, &text2), 0);
    ck_assert_str_eq(text, text2);
    ck_assert_int_eq(shard_map_summary(m2, &sum), 0);
    ck_assert_msg(strstr(sum, "version 7") && strstr(sum, "64 open shards"), "%s", sum);
    shard_free(text);
    shard_free(text2);
    shard_free(sum);
    shard_map_free(m);
    shard_map_free(m2);
    shard_map_free(NULL);
}
END_TEST

static char *map_with_version(int version)
{
    json_t *doc = json_loads(base_map, 0, NULL);
    char *text;
    json_object_set_new(doc, "version", json_integer(version));
    text = json_dumps(doc, 0);
    json_decref(doc);
    return text;
}

START_TEST(file_store_publish_cas)
{
    char dir[] = "/tmp/libshard-store-XXXXXX", path[128];
    shard_store *st = NULL;
    shard_map *m8, *m9, *cur = NULL;
    char *t8 = map_with_version(8), *t9 = map_with_version(9);

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/map.json", dir);
    m8 = parse_ok(t8);
    m9 = parse_ok(t9);
    ck_assert_int_eq(shard_store_open(&st, path), 0);
    ck_assert_int_eq(shard_store_load(st, &cur), SHARD_EIO);
    /* Empty store: expected version 0. */
    ck_assert_int_eq(shard_store_publish(st, m8, 3), SHARD_ECONFLICT);
    ck_assert_int_eq(shard_store_publish(st, m8, 0), 0);
    ck_assert_int_eq(shard_store_load(st, &cur), 0);
    ck_assert_uint_eq(shard_map_version(cur), 8);
    shard_map_free(cur);
    /* A stale writer loses; a version that does not grow is refused. */
    ck_assert_int_eq(shard_store_publish(st, m9, 7), SHARD_ECONFLICT);
    ck_assert_msg(strstr(shard_errmsg(), "version is 8"), "%s", shard_errmsg());
    ck_assert_int_eq(shard_store_publish(st, m8, 8), SHARD_EINVAL);
    ck_assert_int_eq(shard_store_publish(st, m9, 8), 0);
    ck_assert_int_eq(shard_store_load(st, &cur), 0);
    ck_assert_uint_eq(shard_map_version(cur), 9);
    shard_map_free(cur);
    /* No temporary files are left behind. */
    {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", dir);
        ck_assert_int_ne(system(cmd), 0);
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
    shard_store_free(st);
    shard_store_free(NULL);
    shard_map_free(m8);
    shard_map_free(m9);
    free(t8);
    free(t9);
}
END_TEST

/* A corrupt stored map is never replaced blindly. */
START_TEST(file_store_refuses_corrupt_current)
{
    char dir[] = "/tmp/libshard-store-XXXXXX", path[128];
    shard_store *st = NULL;
    shard_map *m = parse_ok(base_map);
    FILE *f;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/map.json", dir);
    f = fopen(path, "w");
    fputs("{\"version\": 3, trunc", f);
    fclose(f);
    ck_assert_int_eq(shard_store_open(&st, path), 0);
    ck_assert_int_eq(shard_store_publish(st, m, 3), SHARD_EMAP);
    ck_assert_msg(strstr(shard_errmsg(), "refusing to replace"), "%s", shard_errmsg());
    ck_assert_int_eq(shard_store_open(&st, "mysql://x"), SHARD_EINVAL);
    shard_store_free(st);
    shard_map_free(m);
    remove_store_dir(dir);
}
END_TEST

/* What a publisher child frees of its parent's: two map texts. */
static void free_texts(void *arg)
{
    char **texts = arg;
    free(texts[0]);
    free(texts[1]);
}

/* Concurrent publishers: exactly one of those expecting the same version wins. */
START_TEST(file_store_concurrent_publishers)
{
    char dir[] = "/tmp/libshard-store-XXXXXX", path[128];
    shard_store *st = NULL;
    shard_map *m = NULL;
    char *t2 = map_with_version(2), *t1 = map_with_version(1);
    int wins = 0;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/map.json", dir);
    ck_assert_int_eq(shard_store_open(&st, path), 0);
    m = parse_ok(t1);
    ck_assert_int_eq(shard_store_publish(st, m, 0), 0);
    shard_map_free(m);
    m = parse_ok(t2);
    {
        char *texts[] = {t1, t2};
        wins = publish_race(st, m, 1, 8, free_texts, texts);
    }
    ck_assert_int_eq(wins, 1);
    shard_map_free(m);
    shard_store_free(st);
    free(t1);
    free(t2);
    {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
}
END_TEST

/* Fail the Nth allocation for every N: a clean error, never a crash or leak. */
START_TEST(parser_allocation_failures)
{
    json_malloc_t om;
    json_free_t of;
    int failures = 0;

    json_get_alloc_funcs(&om, &of);
    json_set_alloc_funcs(budget_malloc, free); /* tests/alloc_budget.h */
    for (long n = 0;; n++) {
        shard_map *m = NULL;
        char *sum = NULL;
        int rc;
        atomic_store(&shard__alloc_budget, n);
        rc = shard_map_parse(&m, base_map, strlen(base_map));
        if (rc == 0)
            rc = shard_map_summary(m, &sum);
        atomic_store(&shard__alloc_budget, -1);
        shard_free(sum);
        shard_map_free(m);
        if (rc == 0)
            break;
        /* jansson turns some of its own allocation failures into syntax
         * errors; either way the error is clean and nothing leaks. */
        ck_assert_msg(rc == SHARD_ENOMEM || rc == SHARD_EMAP, "n=%ld: got %d (%s)", n, rc,
                      shard_errmsg());
        failures++;
        ck_assert_int_lt(n, 100000);
    }
    json_set_alloc_funcs(om, of);
    ck_assert_int_gt(failures, 10);
}
END_TEST

/* The lease's keys (libshard-move(7), "The lease"): lease_max_ms is never
 * below lease_ms; the moving marks are found, set and cleared one move's
 * range at a time, and survive a round trip. */
START_TEST(lease_and_marks)
{
    json_t *doc = json_loads(base_map, 0, NULL);
    shard_map *m = NULL, *on = NULL, *off = NULL;
    char *text;

    json_object_set_new(doc, "lease_ms", json_integer(2000));
    json_object_set_new(doc, "lease_max_ms", json_integer(1000));
    text = json_dumps(doc, 0);
    FAILS(SHARD_EMAP, shard_map_parse(&m, text, strlen(text)));
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "lease_max_ms: 1000 is below lease_ms (2000)"));
    free(text);

    json_object_del(doc, "lease_max_ms");
    json_object_set_new(doc, "moving", json_pack("[[i,i]]", 40, 41));
    text = json_dumps(doc, 0);
    m = parse_ok(text);
    free(text);
    ck_assert_uint_eq(m->lease_ms, 2000);
    ck_assert_uint_eq(m->lease_max_ms, 2000); /* defaults to lease_ms */
    ck_assert(map_shard_moving(m, 40) && map_shard_moving(m, 41));
    ck_assert(!map_shard_moving(m, 39) && !map_shard_moving(m, 42));

    OK(map_mark_moving(m, 2, 3, true, 8, &on));
    ck_assert_uint_eq(shard_map_version(on), 8);
    ck_assert(map_shard_moving(on, 2) && map_shard_moving(on, 3) && map_shard_moving(on, 40));
    ck_assert(!map_shard_moving(on, 4));
    OK(map_mark_moving(on, 2, 3, false, 9, &off));
    ck_assert(!map_shard_moving(off, 2) && !map_shard_moving(off, 3));
    ck_assert(map_shard_moving(off, 40)); /* another move's mark stays */
    shard_map_free(off);
    OK(map_mark_moving(on, 40, 41, false, 9, &off));
    shard_map_free(on);
    OK(shard_map_to_json(off, &text));
    ck_assert_ptr_nonnull(strstr(text, "\"lease_ms\": 2000"));
    ck_assert_ptr_nonnull(strstr(text, "\"moving\""));
    shard_free(text);
    ck_assert(map_shard_moving(off, 2) && !map_shard_moving(off, 40) && off->nmoving == 1);
    shard_map_free(m);
    OK(map_mark_moving(off, 2, 3, false, 10, &m)); /* the last mark: the key goes */
    ck_assert(!map_shard_moving(m, 2) && !map_shard_moving(m, 40));
    OK(shard_map_to_json(m, &text));
    ck_assert_ptr_null(strstr(text, "moving"));
    shard_free(text);
    shard_map_free(off);
    shard_map_free(m);
    json_decref(doc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("map");
    TCase *tc = tcase_create("map");

    tcase_add_test(tc, valid_map_lookups);
    tcase_add_test(tc, lookup_many_ranges);
    tcase_add_loop_test(tc, broken_map_rejected, 0, (int)(sizeof corpus / sizeof corpus[0]));
    tcase_add_tests(tc, TESTS(broken_json_rejected, legacy_section, minimal_map, json_round_trip,
                              file_store_publish_cas, file_store_refuses_corrupt_current,
                              file_store_concurrent_publishers, parser_allocation_failures,
                              lease_and_marks));
    suite_add_tcase(s, tc);
    return run_suite(s, CK_FORK_GETENV) ? 1 : 0;
}
