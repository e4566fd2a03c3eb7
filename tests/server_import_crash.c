/*
 * tests/server_import_crash.c: an import killed (SIGKILL) at every write
 * step of a first pass and of a later pass, then run again
 * (libshard-import(7), "Interrupted passes"), against real servers.
 *
 * Two pairs (8 ID shards, 4 mod shards); the legacy table `legacy.items`
 * on s1. Each trial starts from a known state, forks an import whose test
 * hook (shard__import_hook) raises SIGKILL at the Nth call of one named
 * point (the marker written, one shard's objects committed, a batch's
 * objects written, its entries written, rewrites, soft deletes), or that
 * the parent kills after a random delay; then runs the import again and
 * checks what users rely on: every legacy row has exactly one object,
 * equal to the row, that its legacy id resolves to; no other object is
 * visible to reads; every lookup entry is there and no marker is left; a
 * further pass finds nothing to do. A last test puts native objects at
 * the local ids the import would use and checks they are never touched.
 *
 * IMPORT_CRASH_TRIALS=40 runs 40 random-moment kills (20 of a first pass,
 * 20 of a later one) instead of 2; IMPORT_CRASH_SEED repeats a run.
 */
#include <check.h>
#include <inttypes.h>
#include <jansson.h>
#include <libshard.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"
#include "harness.h"
#include "legacy.h" /* shard__import_hook */

#define NPAIRS 2
#define ID_SHARDS 8  /* 0-3 on MySQL001 (s1), 4-7 on MySQL002 (s3) */
#define MOD_SHARDS 4 /* 0-1 on MySQL001, 2-3 on MySQL002 */
#define NROWS 600
#define BATCH 100

static harness *H;
static char map_path[512];
static char url[200];

static char *sql_out(const char *server, const char *sql)
{
    char *out = NULL;
    int rc = harness_sql(H, server, sql, &out);
    ck_assert_msg(rc == 0, "SQL on %s failed (%d): %s", server, rc, sql);
    return out;
}

static void sql_do(const char *server, const char *sql)
{
    free(sql_out(server, sql));
}

static uint64_t sql_count(const char *server, const char *sql)
{
    char *out = sql_out(server, sql);
    uint64_t n = strtoull(out, NULL, 10);
    free(out);
    return n;
}

static shard_ctx *open_ctx(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    o.refresh_interval_ms = 0;
    harness_admin_options(&o);
    ck_assert_msg(shard_ctx_open(&ctx, map_path, &o) == 0, "%s", shard_errmsg());
    return ctx;
}

static unsigned items_type(shard_ctx *ctx)
{
    shard_map *map;
    unsigned t = 0;
    ck_assert_int_eq(shard_ctx_map(ctx, &map), 0);
    ck_assert_int_eq(shard_map_type_of(map, "items", &t), 0);
    shard_map_free(map);
    return t;
}

static shard_import_options opts(shard_ctx *ctx)
{
    shard_import_options o = SHARD_IMPORT_OPTIONS_INIT;
    o.source = url;
    o.table = "items";
    o.type = items_type(ctx);
    o.batch_rows = BATCH;
    o.threads = 2;
    return o;
}

static shard_import_report import_ok(shard_ctx *ctx)
{
    shard_import_options o = opts(ctx);
    shard_import_report r = SHARD_IMPORT_REPORT_INIT;
    int rc = shard_import_table(ctx, &o, &r);
    ck_assert_msg(rc == 0, "import: %s", shard_errmsg());
    return r;
}

static const char *server_of(int shard)
{
    return shard < ID_SHARDS / 2 ? "s1" : "s3";
}

/* Empty objects and lookup; the legacy table as a first pass finds it. */
static void reset(void)
{
    char sql[2][600];
    size_t n[2] = {0, 0};
    for (int s = 0; s < ID_SHARDS; s++) {
        int k = s >= ID_SHARDS / 2;
        n[k] += (size_t)snprintf(sql[k] + n[k], sizeof sql[k] - n[k],
                                 "DELETE FROM db%05d.items;", s);
    }
    for (int m = 0; m < MOD_SHARDS; m++) {
        int k = m >= MOD_SHARDS / 2;
        n[k] += (size_t)snprintf(sql[k] + n[k], sizeof sql[k] - n[k],
                                 "DELETE FROM modshard%05d.legacy_items;", m);
    }
    sql_do("s1", sql[0]);
    sql_do("s3", sql[1]);
    sql_do("s1", "DELETE FROM legacy.items; INSERT INTO legacy.items SELECT seq, "
                 "CONCAT('item ', seq), seq * 3 FROM legacy.seq_1_to_600");
}

/* What a later pass finds: 40 rows changed, 30 gone, 25 new. */
static void change_legacy(void)
{
    sql_do("s1", "UPDATE legacy.items SET name = CONCAT(name, ' v2') WHERE id BETWEEN 101 AND 140;"
                 "DELETE FROM legacy.items WHERE id BETWEEN 301 AND 330;"
                 "INSERT INTO legacy.items SELECT 600 + seq, CONCAT('new ', seq), seq"
                 " FROM legacy.seq_1_to_25");
}

/* ---- killing an import --------------------------------------------------------- */

static const char *kill_point;
static int kill_at;
static atomic_int calls;

static void hook(const char *point)
{
    if (strcmp(point, kill_point) == 0 && atomic_fetch_add(&calls, 1) + 1 == kill_at)
        raise(SIGKILL);
}

/* A pass in a child, killed at the kill_at-th call of `point` (NULL: by the
 * parent, after delay_ms). Whether it was killed: a pass with fewer such
 * points ends normally. */
static bool killed_pass(const char *point, int at, int delay_ms)
{
    pid_t pid = fork();
    int st;

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        shard_ctx *c = open_ctx();
        shard_import_options o = opts(c);
        kill_point = point;
        kill_at = at;
        if (point)
            shard__import_hook = hook;
        _exit(shard_import_table(c, &o, NULL) == 0 ? 0 : 3);
    }
    if (!point) {
        struct timespec ts = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) == 0),
                  "the import failed (exit %d) before it was killed", WEXITSTATUS(st));
    return WIFSIGNALED(st);
}

/* ---- what must hold after the next pass --------------------------------------- */

static unsigned char unhex1(char c)
{
    return (unsigned char)(c <= '9' ? c - '0' : c - 'A' + 10);
}

/* Every legacy row resolves to an object equal to it; exactly as many
 * objects are visible to reads as there are rows; the entries are all
 * there, the marker gone; a further pass is clean. */
static void expect_exact(shard_ctx *ctx, const char *trial)
{
    char *out = sql_out("s1", "SELECT id, HEX(JSON_OBJECT('id', id, 'name', name, 'n', n)) "
                              "FROM legacy.items ORDER BY id");
    uint64_t rows = sql_count("s1", "SELECT COUNT(*) FROM legacy.items"), visible = 0, live = 0;
    uint64_t *legacy = calloc(rows, sizeof *legacy), *ids = calloc(rows, sizeof *ids);
    char **want = calloc(rows, sizeof *want), *line = out, sql[300];
    shard_item *items;
    shard_import_report r = SHARD_IMPORT_REPORT_INIT;

    for (uint64_t i = 0; i < rows; i++) {
        char *tab = strchr(line, '\t'), *nl = strchr(line, '\n');
        size_t hl = nl ? (size_t)(nl - tab - 1) : strlen(tab + 1);
        legacy[i] = strtoull(line, NULL, 10);
        want[i] = malloc(hl / 2 + 1);
        for (size_t k = 0; k < hl / 2; k++)
            want[i][k] = (char)(unhex1(tab[1 + 2 * k]) << 4 | unhex1(tab[2 + 2 * k]));
        want[i][hl / 2] = '\0';
        line = nl ? nl + 1 : line;
    }
    ck_assert_msg(shard_legacy_resolve_many(ctx, items_type(ctx), legacy, rows, ids) == 0,
                  "%s: %s", trial, shard_errmsg());
    for (uint64_t i = 0; i < rows; i++)
        ck_assert_msg(ids[i], "%s: legacy id %" PRIu64 " has no entry", trial, legacy[i]);
    ck_assert_int_eq(shard_object_mget(ctx, ids, rows, &items), 0);
    for (uint64_t i = 0; i < rows; i++) {
        json_t *w = json_loads(want[i], 0, NULL);
        json_t *g = items[i].status == 0 ? json_loadb(items[i].data, items[i].len, 0, NULL)
                                         : NULL;
        ck_assert_msg(items[i].status == 0, "%s: legacy id %" PRIu64 ": object %" PRIu64
                      " status %d", trial, legacy[i], ids[i], items[i].status);
        ck_assert_msg(json_equal(w, g), "%s: legacy id %" PRIu64 ": object %.200s, row %s",
                      trial, legacy[i], items[i].data, want[i]);
        json_decref(w);
        json_decref(g);
        free(want[i]);
    }
    shard_items_free(items, rows);
    /* No other object is visible: active objects, one per distinct id. */
    for (int s = 0; s < ID_SHARDS; s++) {
        snprintf(sql, sizeof sql, "SELECT COUNT(*), COUNT(DISTINCT JSON_VALUE(data, '$.id')) "
                 "FROM db%05d.items WHERE JSON_EXTRACT(data, '$.active') IS NULL", s);
        char *o = sql_out(server_of(s), sql);
        uint64_t all = strtoull(o, NULL, 10), distinct = strtoull(strchr(o, '\t') + 1, NULL, 10);
        ck_assert_msg(all == distinct, "%s: shard %d holds %" PRIu64 " active objects for %"
                      PRIu64 " ids", trial, s, all, distinct);
        visible += all;
        free(o);
    }
    ck_assert_msg(visible == rows, "%s: %" PRIu64 " objects visible, %" PRIu64 " legacy rows",
                  trial, visible, rows);
    for (int m = 0; m < MOD_SHARDS; m++) {
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM modshard%05d.legacy_items WHERE "
                 "v NOT LIKE '%% deleted' OR k = '~import'", m);
        live += sql_count(m < MOD_SHARDS / 2 ? "s1" : "s3", sql);
    }
    ck_assert_msg(live == rows, "%s: %" PRIu64 " live entries (or a marker), %" PRIu64 " rows",
                  trial, live, rows);
    r = import_ok(ctx);
    ck_assert_msg(r.created == 0 && r.changed == 0 && r.deleted == 0 && r.unchanged == rows,
                  "%s: the pass after the repair: %" PRIu64 " new, %" PRIu64 " changed, %"
                  PRIu64 " deleted, %" PRIu64 " unchanged", trial, r.created, r.changed,
                  r.deleted, r.unchanged);
    free(legacy);
    free(ids);
    free(want);
    free(out);
}

/* ---- the trials ----------------------------------------------------------------- */

typedef struct point {
    const char *name;
    int at;
} point;

/* 6 batches of 100 rows, 8 shards: ~48 shard commits, 6 of each other. */
static const point first_points[] = {
    {"marked", 1}, {"shard", 1}, {"shard", 13}, {"created", 1}, {"created", 6},
    {"entries", 3},
};

START_TEST(first_pass_killed_at_each_step)
{
    for (size_t i = 0; i < sizeof first_points / sizeof first_points[0]; i++) {
        char trial[80];
        shard_ctx *ctx;
        shard_import_report r = SHARD_IMPORT_REPORT_INIT;
        reset();
        snprintf(trial, sizeof trial, "first pass killed at %s #%d", first_points[i].name,
                 first_points[i].at);
        ck_assert_msg(killed_pass(first_points[i].name, first_points[i].at, 0), "%s: not "
                      "killed", trial);
        ctx = open_ctx();
        r = import_ok(ctx);
        ck_assert_msg(r.created + r.unchanged == NROWS, "%s: %" PRIu64 " new + %" PRIu64
                      " unchanged", trial, r.created, r.unchanged);
        expect_exact(ctx, trial);
        shard_ctx_free(ctx);
    }
}
END_TEST

/* One batch of the later pass has all kinds: changes in 101..140, new rows
 * 601..625 in the last batch, deletions found by the lookup scan. */
static const point later_points[] = {
    {"marked", 1}, {"changed", 1}, {"shard", 1}, {"created", 1}, {"entries", 1},
    {"deleted", 1},
};

START_TEST(later_pass_killed_at_each_step)
{
    for (size_t i = 0; i < sizeof later_points / sizeof later_points[0]; i++) {
        char trial[80];
        shard_ctx *ctx;
        reset();
        ctx = open_ctx();
        import_ok(ctx);
        shard_ctx_free(ctx);
        change_legacy();
        snprintf(trial, sizeof trial, "later pass killed at %s #%d", later_points[i].name,
                 later_points[i].at);
        bool killed = killed_pass(later_points[i].name, later_points[i].at, 0);
        ck_assert_msg(killed || strcmp(later_points[i].name, "deleted") == 0,
                      "%s: not killed", trial);
        ctx = open_ctx();
        import_ok(ctx);
        expect_exact(ctx, trial);
        shard_ctx_free(ctx);
    }
}
END_TEST

/* Kills at a random moment (seeded, printed): wherever they land, the same
 * must hold. */
START_TEST(killed_at_random_moments)
{
    unsigned seed = getenv("IMPORT_CRASH_SEED") ? (unsigned)atoi(getenv("IMPORT_CRASH_SEED"))
                                               : (unsigned)time(NULL);
    int trials = getenv("IMPORT_CRASH_TRIALS") ? atoi(getenv("IMPORT_CRASH_TRIALS")) : 2;

    fprintf(stderr, "server_import_crash: random kills, IMPORT_CRASH_SEED=%u\n", seed);
    srand(seed);
    for (int i = 0; i < trials; i++) {
        bool later = i % 2 == 1;
        int delay = 20 + rand() % 400;
        char trial[80];
        shard_ctx *ctx;
        reset();
        if (later) {
            ctx = open_ctx();
            import_ok(ctx);
            shard_ctx_free(ctx);
            change_legacy();
        }
        snprintf(trial, sizeof trial, "%s pass killed after %d ms (seed %u)",
                 later ? "later" : "first", delay, seed);
        killed_pass(NULL, 0, delay);
        ctx = open_ctx();
        import_ok(ctx);
        expect_exact(ctx, trial);
        shard_ctx_free(ctx);
    }
}
END_TEST

/* Native objects at the local ids the import will use are never touched:
 * their rows go to other shards. The natives are on pair MySQL001's shards
 * only, so that every legacy id has a free shard. */
#define NATIVE_SHARDS (ID_SHARDS / 2)
START_TEST(native_objects_in_the_id_range)
{
    shard_ctx *ctx;
    uint64_t native[NATIVE_SHARDS][5];
    char sql[200];

    reset();
    for (int s = 0; s < NATIVE_SHARDS; s++) { /* local ids from 1 again */
        snprintf(sql, sizeof sql, "TRUNCATE TABLE db%05d.items", s);
        sql_do(server_of(s), sql);
    }
    ctx = open_ctx();
    for (int s = 0; s < NATIVE_SHARDS; s++)
        for (int k = 0; k < 5; k++) {
            char json[64];
            snprintf(json, sizeof json, "{\"native\": %d, \"shard\": %d}", k, s);
            OK(shard_object_create(ctx, items_type(ctx), (unsigned)s, json, strlen(json),
                                   &native[s][k]));
            /* by the pair's auto_increment_increment and offset */
            ck_assert_uint_le(shard_id_local(native[s][k]), 10);
        }
    /* Killed once on the way, to collide on the repair pass too. */
    ck_assert(killed_pass("created", 2, 0));
    import_ok(ctx);
    for (int s = 0; s < NATIVE_SHARDS; s++)
        for (int k = 0; k < 5; k++) {
            char *json = NULL, want[64];
            snprintf(want, sizeof want, "{\"native\": %d, \"shard\": %d}", k, s);
            OK(shard_object_get(ctx, native[s][k], &json, NULL));
            ck_assert_str_eq(json, want);
            shard_free(json);
        }
    /* The legacy rows of the natives' local ids went elsewhere... */
    for (int s = 0; s < NATIVE_SHARDS; s++)
        for (int k = 0; k < 5; k++) {
            uint64_t id, l = shard_id_local(native[s][k]);
            OK(shard_legacy_resolve(ctx, items_type(ctx), l, &id));
            ck_assert_uint_eq(shard_id_local(id), l);
            ck_assert_uint_ne(shard_id_shard(id), (unsigned)s);
        }
    /* ...and native creates go on above the legacy ids of their shard. */
    {
        uint64_t id, top = sql_count(server_of(3), "SELECT MAX(local_id) FROM db00003.items");
        OK(shard_object_create(ctx, items_type(ctx), 3, "{}", 2, &id));
        ck_assert_uint_gt(shard_id_local(id), top);
        snprintf(sql, sizeof sql, "DELETE FROM db00003.items WHERE local_id = %" PRIu64,
                 shard_id_local(id));
        sql_do(server_of(3), sql);
    }
    /* Every row exactly once (the natives are active objects too). */
    for (int s = 0; s < ID_SHARDS; s++) {
        snprintf(sql, sizeof sql, "DELETE FROM db%05d.items WHERE JSON_EXISTS(data, "
                 "'$.native')", s);
        sql_do(server_of(s), sql);
    }
    expect_exact(ctx, "native objects");
    shard_ctx_free(ctx);
}
END_TEST

/* ---- set-up --------------------------------------------------------------------- */

static int write_map(void)
{
    json_t *m = json_load_file(harness_map_path(H), 0, NULL), *legacy;
    int rc;

    if (!m)
        return -1;
    json_object_set_new(json_object_get(m, "objects"), "items", json_integer(7));
    json_array_append_new(json_object_get(json_object_get(m, "mod_shards"), "tables"),
                          json_string("legacy_items"));
    legacy = json_object();
    json_object_set_new(legacy, "items", json_object());
    json_object_set_new(m, "legacy", legacy);
    snprintf(map_path, sizeof map_path, "%s/import-map.json", harness_dir(H));
    rc = json_dump_file(m, map_path, JSON_INDENT(2));
    json_decref(m);
    return rc;
}

static Suite *crash_suite(void)
{
    Suite *s = suite_create("import_crash");
    TCase *tc = tcase_create("import_crash");
    const char *trials = getenv("IMPORT_CRASH_TRIALS");

    tcase_set_timeout(tc, 300 + 20 * (trials ? atoi(trials) : 0));
    tcase_add_tests(tc, TESTS(first_pass_killed_at_each_step, later_pass_killed_at_each_step,
                              killed_at_random_moments, native_objects_in_the_id_range));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    int failed;

    harness_admin_options(&o);
    H = harness_start_ex(NPAIRS, ID_SHARDS, MOD_SHARDS);
    if (!H) {
        fprintf(stderr, "server_import_crash: could not start the test servers\n");
        return EXIT_FAILURE;
    }
    snprintf(url, sizeof url, "mysql://shardadmin@127.0.0.1:%d/legacy", harness_port(H, "s1"));
    if (write_map() != 0 ||
        harness_sql(H, "s1", "CREATE DATABASE legacy; CREATE TABLE legacy.items (id INT "
                             "PRIMARY KEY, name VARCHAR(50) NOT NULL, n INT NOT NULL)",
                    NULL) != 0 ||
        shard_ctx_open(&ctx, map_path, &o) != 0 || shard_schema_apply(ctx, NULL, NULL) != 0) {
        fprintf(stderr, "server_import_crash: set-up failed: %s\n", shard_errmsg());
        shard_ctx_free(ctx);
        harness_stop(H);
        return EXIT_FAILURE;
    }
    shard_ctx_free(ctx);
    failed = run_suite(crash_suite(), CK_FORK_GETENV);
    harness_stop(H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
