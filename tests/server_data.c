/*
 * tests/server_data.c: the data layer against real MariaDB pairs.
 *
 * Starts two master-master pairs once (16 ID shards, 8 mod shards), applies
 * the schema, then checks what a user relies on: objects, multi-get,
 * mappings, key-value, one-shard transactions, scatter, hostile input, one
 * context shared by 8 threads, a master killed mid-operation, and standbys
 * that hold every write. What the library says is checked against what the
 * servers hold (harness_sql), so a test fails when either is wrong.
 *
 * Check forks every test: each test opens its own context (setup), and the
 * servers' contents carry over from test to test. Only the scatter test
 * creates "users" objects, because it counts every one of them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <check.h>
#include <jansson.h> /* before libshard.h: declares the jansson calls */
#include <libshard.h>
#include "ctx.h" /* private: a connection of the pool itself (tests link libshard_internal.a) */
#include <mysql.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"
#include "harness.h"

#define NPAIRS 2
#define NSHARDS 16
#define NMOD 8
#define PINS 1
#define BOARDS 2
#define USERS 3
#define WAIT_SECS 30.0

static harness *H;
static shard_ctx *C; /* this test's context */
static shard_map *M; /* its map */

/* ------------------------------------------------------------ helpers */

#define DOWN(rc) ((rc) == SHARD_ECONNECT || (rc) == SHARD_ETIMEOUT)

/* Run SQL as root on a server; its batch output without its trailing
 * newlines (caller frees). */
#define sql_on(server, ...) chomp(sql_okf(H, server, __VA_ARGS__))

static long long sql_num(const char *server, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *q = vfmt(f, ap);
    va_end(ap);
    char *out = sql_on(server, "%s", q);
    char *end;
    long long v = strtoll(out, &end, 10);
    ck_assert_msg(end != out && *end == '\0', "%s on %s: not a number: '%s'", q,
                  server, out);
    free(out);
    free(q);
    return v;
}

static const char *server_name(int k)
{
    static const char *const names[] = {"", "s1", "s2", "s3", "s4"};
    ck_assert(k >= 1 && k <= 2 * NPAIRS);
    return names[k];
}

/* "MySQL002" -> 2 */
static int pair_number(const char *pair)
{
    ck_assert(strncmp(pair, "MySQL", 5) == 0);
    return atoi(pair + 5);
}

static const char *master_of(unsigned shard)
{
    const char *p = NULL;
    OK(shard_map_pair_of(M, shard, &p));
    return server_name(2 * pair_number(p) - 1);
}

static const char *master_of_mod(uint32_t ms)
{
    const char *p = NULL;
    OK(shard_map_mod_pair_of(M, ms, &p));
    return server_name(2 * pair_number(p) - 1);
}

static void db_of(unsigned shard, char *buf, size_t size)
{
    OK(shard_map_database(M, shard, buf, size));
}

static const char *table_of(uint64_t id)
{
    const char *t = NULL;
    OK(shard_map_type_name(M, shard_id_type(id), &t));
    return t;
}

static char *hex(const void *data, size_t len)
{
    static const char digits[] = "0123456789ABCDEF";
    const unsigned char *p = data;
    char *s = malloc(2 * len + 1);
    ck_assert_ptr_nonnull(s);
    for (size_t i = 0; i < len; i++) {
        s[2 * i] = digits[p[i] >> 4];
        s[2 * i + 1] = digits[p[i] & 15];
    }
    s[2 * len] = '\0';
    return s;
}

static uint64_t make_id(unsigned shard, unsigned type, uint64_t local)
{
    uint64_t id = 0;
    OK(shard_id_make(shard, type, local, &id));
    return id;
}

static uint64_t create(unsigned type, unsigned shard, const char *json)
{
    uint64_t id = 0;
    int rc = shard_object_create(C, type, shard, json, strlen(json), &id);
    ck_assert_msg(rc == 0, "create type %u on shard %u: %d (%s): %s", type, shard, rc,
                  shard_strerror(rc), shard_errmsg());
    return id;
}

/* The object's text through the API (caller frees with shard_free). */
static char *get(uint64_t id)
{
    char *json = NULL;
    size_t len = 0;
    int rc = shard_object_get(C, id, &json, &len);
    ck_assert_msg(rc == 0, "get %llu: %d (%s): %s", (unsigned long long)id, rc,
                  shard_strerror(rc), shard_errmsg());
    ck_assert_uint_eq(len, strlen(json));
    return json;
}

static void assert_get_is(uint64_t id, const char *want)
{
    char *got = get(id);
    ck_assert_str_eq(got, want);
    shard_free(got);
}

static int get_rc(uint64_t id)
{
    char *json = NULL;
    size_t len;
    int rc = shard_object_get(C, id, &json, &len);
    shard_free(json);
    return rc;
}

/* How many rows the object's table holds for id, on its pair's master. */
static long long rows_of(uint64_t id)
{
    char db[64];
    db_of(shard_id_shard(id), db, sizeof db);
    return sql_num(master_of(shard_id_shard(id)),
                   "SELECT COUNT(*) FROM `%s`.`%s` WHERE local_id = %llu", db,
                   table_of(id), (unsigned long long)shard_id_local(id));
}

/* HEX(data) of the object's row on its master ("" when there is none). */
static char *stored_hex(uint64_t id)
{
    char db[64];
    db_of(shard_id_shard(id), db, sizeof db);
    return sql_on(master_of(shard_id_shard(id)),
                  "SELECT HEX(data) FROM `%s`.`%s` WHERE local_id = %llu", db,
                  table_of(id), (unsigned long long)shard_id_local(id));
}

static void assert_stored_is(uint64_t id, const char *json, size_t len)
{
    char *want = hex(json, len), *got = stored_hex(id);
    ck_assert_msg(strcmp(want, got) == 0, "row of %llu holds %.200s, want %.200s",
                  (unsigned long long)id, got, want);
    free(want);
    free(got);
}

static json_t *parse(const char *text, size_t len)
{
    json_error_t e;
    json_t *v = json_loadb(text, len, JSON_ALLOW_NUL, &e);
    ck_assert_msg(v != NULL, "not JSON (%s): %.200s", e.text, text);
    return v;
}

static void assert_json_eq(const char *got, const char *want)
{
    json_t *g = parse(got, strlen(got)), *w = parse(want, strlen(want));
    ck_assert_msg(json_equal(g, w), "got %.300s, want %.300s", got, want);
    json_decref(g);
    json_decref(w);
}

/* RFC 7386, written independently of lib/patch.c. New reference. */
static json_t *merge(json_t *target, json_t *patch)
{
    const char *k;
    json_t *v;
    json_t *r;

    if (!json_is_object(patch))
        return json_deep_copy(patch);
    r = json_is_object(target) ? json_deep_copy(target) : json_object();
    json_object_foreach(patch, k, v) {
        if (json_is_null(v))
            json_object_del(r, k);
        else
            json_object_set_new(r, k, merge(json_object_get(r, k), v));
    }
    return r;
}

/* CHECKSUM TABLE over every shard table a pair serves: any change shows. */
static char *pair_checksum_sql(int pair)
{
    size_t cap = 1 << 14, len = 0;
    char *q = malloc(cap);
    static const char *const id_tables[] = {"pins", "boards", "users",
                                            "board_has_pins", "pin_owned_by_board",
                                            "user_likes_pins"};
    static const char *const kv_tables[] = {"users_by_email", "users_by_name"};
    char db[64];

    ck_assert_ptr_nonnull(q);
    len += (size_t)snprintf(q, cap, "CHECKSUM TABLE ");
    for (unsigned s = 0; s < NSHARDS; s++) {
        if (strcmp(master_of(s), server_name(2 * pair - 1)) != 0)
            continue;
        db_of(s, db, sizeof db);
        for (size_t t = 0; t < sizeof id_tables / sizeof *id_tables; t++)
            len += (size_t)snprintf(q + len, cap - len, "`%s`.`%s`, ", db, id_tables[t]);
    }
    for (uint32_t s = 0; s < NMOD; s++) {
        if (strcmp(master_of_mod(s), server_name(2 * pair - 1)) != 0)
            continue;
        OK(shard_map_mod_database(M, s, db, sizeof db));
        for (size_t t = 0; t < sizeof kv_tables / sizeof *kv_tables; t++)
            len += (size_t)snprintf(q + len, cap - len, "`%s`.`%s`, ", db, kv_tables[t]);
    }
    ck_assert(len + 2 < cap);
    q[len - 2] = '\0'; /* the last ", " */
    return q;
}

static char *pair_checksum(int pair, int k)
{
    char *q = pair_checksum_sql(pair);
    char *out = sql_on(server_name(k), "%s", q);
    free(q);
    return out;
}

/* Both masters' checksums, to prove a set of calls changed nothing. */
static void snapshot(char *out[NPAIRS])
{
    for (int p = 1; p <= NPAIRS; p++)
        out[p - 1] = pair_checksum(p, 2 * p - 1);
}

static void assert_unchanged(char *before[NPAIRS], const char *what)
{
    for (int p = 1; p <= NPAIRS; p++) {
        char *now = pair_checksum(p, 2 * p - 1);
        ck_assert_msg(strcmp(before[p - 1], now) == 0, "%s changed tables on pair %d",
                      what, p);
        free(now);
        free(before[p - 1]);
    }
}

/* ------------------------------------------------------------ fixture */

static shard_ctx *open_ctx(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    o.connect_timeout_ms = 2000;
    o.retry_budget_ms = 2000;
    OK(shard_ctx_open(&ctx, harness_map_path(H), &o));
    return ctx;
}

static void setup(void)
{
    C = open_ctx();
    OK(shard_ctx_map(C, &M));
}

static void teardown(void)
{
    shard_map_free(M);
    shard_ctx_free(C);
    M = NULL;
    C = NULL;
}

/* ------------------------------------------------------------ objects */

START_TEST(test_object_create_get)
{
    const char *j = "{\"name\":\"first\",\"n\":1,\"tags\":[\"a\",\"b\"]}";
    uint64_t id = create(PINS, 3, j), id2, x = 0;
    char db[64];

    ck_assert_uint_eq(shard_id_shard(id), 3);
    ck_assert_uint_eq(shard_id_type(id), PINS);
    ck_assert(shard_id_local(id) >= 1);
    assert_get_is(id, j);
    /* in db00003.pins on pair 1's master, and the database is on no other pair */
    assert_stored_is(id, j, strlen(j));
    db_of(3, db, sizeof db);
    ck_assert_str_eq(db, "db00003");
    ck_assert_int_eq(sql_num("s3", "SELECT COUNT(*) FROM information_schema.schemata "
                                   "WHERE schema_name = 'db00003'"), 0);

    id2 = create(BOARDS, 12, "{}");
    ck_assert_uint_eq(shard_id_shard(id2), 12);
    ck_assert_uint_eq(shard_id_type(id2), BOARDS);
    ck_assert_str_eq(master_of(12), "s3");
    assert_stored_is(id2, "{}", 2);
    assert_get_is(id2, "{}");

    /* two objects never share an ID */
    uint64_t id3 = create(PINS, 3, "{\"n\":2}");
    ck_assert(id3 != id);
    assert_get_is(id, j);
    assert_get_is(id3, "{\"n\":2}");

    /* SHARD_ANY: only open shards, spread over them */
    int seen[NSHARDS] = {0}, distinct = 0;
    for (int i = 0; i < 160; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"any\":%d}", i);
        uint64_t a = create(PINS, SHARD_ANY, body);
        unsigned s = shard_id_shard(a);
        ck_assert_uint_lt(s, shard_map_open_shards(M));
        distinct += !seen[s]++;
        if (i % 16 == 0)
            assert_get_is(a, body);
    }
    ck_assert_msg(distinct >= 8, "160 SHARD_ANY creates used only %d shards", distinct);

    /* near: the same shard as another object */
    uint64_t near = create(PINS, shard_id_shard(id2), "{\"near\":true}");
    ck_assert_uint_eq(shard_id_shard(near), 12);
    assert_get_is(near, "{\"near\":true}");

    /* bad arguments write nothing */
    char *before[NPAIRS];
    snapshot(before);
    FAILS(SHARD_EINVAL, shard_object_create(C, 0, 3, "{}", 2, &x));
    FAILS(SHARD_EINVAL, shard_object_create(C, 99, 3, "{}", 2, &x));
    FAILS(SHARD_EINVAL, shard_object_create(C, 1024, 3, "{}", 2, &x));
    FAILS(SHARD_EINVAL, shard_object_create(C, PINS, 70000, "{}", 2, &x));
    FAILS(SHARD_ENOSHARD, shard_object_create(C, PINS, NSHARDS, "{}", 2, &x));
    FAILS(SHARD_EINVAL, shard_object_create(C, PINS, 3, "{}", 2, NULL));
    FAILS(SHARD_EINVAL, shard_object_create(NULL, PINS, 3, "{}", 2, &x));
    ck_assert_uint_eq(x, 0);
    assert_unchanged(before, "rejected creates");

    /* get: invalid IDs, unknown types, absent objects */
    char *out = NULL;
    size_t len;
    FAILS(SHARD_EINVAL, shard_object_get(C, 0, &out, &len));
    FAILS(SHARD_EINVAL, shard_object_get(C, id | (UINT64_C(1) << 63), &out, &len));
    FAILS(SHARD_EINVAL, shard_object_get(C, id | (UINT64_C(1) << 62), &out, &len));
    FAILS(SHARD_EINVAL, shard_object_get(C, make_id(3, 99, 1), &out, &len));
    FAILS(SHARD_ENOTFOUND, shard_object_get(C, make_id(3, PINS, SHARD_MAX_LOCAL), &out, &len));
    FAILS(SHARD_ENOSHARD, shard_object_get(C, make_id(NSHARDS + 1, PINS, 1), &out, &len));
    FAILS(SHARD_EINVAL, shard_object_get(C, id, NULL, &len));
    ck_assert_ptr_null(out);
    ck_assert_str_ne(shard_errmsg(), "");

    /* jansson conveniences */
    json_t *o = json_pack("{s:s, s:i, s:[i,f]}", "k", "v\"'\\", "n", 5, "a", 1, 2.5);
    json_t *back = NULL;
    uint64_t jid = 0;
    OK(shard_object_create_json(C, PINS, 14, o, &jid));
    ck_assert_uint_eq(shard_id_shard(jid), 14);
    OK(shard_object_get_json(C, jid, &back));
    ck_assert(json_equal(o, back));
    json_decref(back);
    json_decref(o);
    o = json_pack("[i]", 1);
    FAILS(SHARD_EINVAL, shard_object_create_json(C, PINS, 14, o, &jid));
    json_decref(o);
}
END_TEST

/* RFC 7386 appendix A cases whose target and patch are objects. */
static const char *const rfc7386[][3] = {
    {"{\"a\":\"b\"}", "{\"a\":\"c\"}", "{\"a\":\"c\"}"},
    {"{\"a\":\"b\"}", "{\"b\":\"c\"}", "{\"a\":\"b\",\"b\":\"c\"}"},
    {"{\"a\":\"b\"}", "{\"a\":null}", "{}"},
    {"{\"a\":\"b\",\"b\":\"c\"}", "{\"a\":null}", "{\"b\":\"c\"}"},
    {"{\"a\":[\"b\"]}", "{\"a\":\"c\"}", "{\"a\":\"c\"}"},
    {"{\"a\":\"c\"}", "{\"a\":[\"b\"]}", "{\"a\":[\"b\"]}"},
    {"{\"a\":{\"b\":\"c\"}}", "{\"a\":{\"b\":\"d\",\"c\":null}}", "{\"a\":{\"b\":\"d\"}}"},
    {"{\"a\":[{\"b\":\"c\"}]}", "{\"a\":[1]}", "{\"a\":[1]}"},
    {"{\"e\":null}", "{\"a\":1}", "{\"e\":null,\"a\":1}"},
    {"{}", "{\"a\":{\"bb\":{\"ccc\":null}}}", "{\"a\":{\"bb\":{}}}"},
    {"{\"a\":\"foo\"}", "{\"a\":{\"b\":\"c\"}}", "{\"a\":{\"b\":\"c\"}}"},
    {"{\"title\":\"Goodbye!\",\"author\":{\"givenName\":\"John\",\"familyName\":\"Doe\"},"
     "\"tags\":[\"example\",\"sample\"],\"content\":\"This will be unchanged\"}",
     "{\"title\":\"Hello!\",\"phoneNumber\":\"+01-123-456-7890\","
     "\"author\":{\"familyName\":null},\"tags\":[\"example\"]}",
     "{\"title\":\"Hello!\",\"author\":{\"givenName\":\"John\"},\"tags\":[\"example\"],"
     "\"content\":\"This will be unchanged\",\"phoneNumber\":\"+01-123-456-7890\"}"},
    /* deeper nesting: merge two levels down, keep siblings */
    {"{\"a\":{\"b\":{\"c\":1,\"d\":2},\"e\":3},\"f\":4}",
     "{\"a\":{\"b\":{\"c\":null,\"x\":{\"y\":null,\"z\":5}}}}",
     "{\"a\":{\"b\":{\"d\":2,\"x\":{\"z\":5}},\"e\":3},\"f\":4}"},
};

START_TEST(test_object_patch)
{
    for (size_t i = 0; i < sizeof rfc7386 / sizeof *rfc7386; i++) {
        const char *target = rfc7386[i][0], *patch = rfc7386[i][1], *want = rfc7386[i][2];
        uint64_t id = create(PINS, (unsigned)i % NSHARDS, target);
        char *res = NULL;
        size_t rlen = 0;
        OK(shard_object_patch(C, id, patch, strlen(patch), &res, &rlen));
        ck_assert_uint_eq(rlen, strlen(res));
        assert_json_eq(res, want);
        char *now = get(id);
        ck_assert_str_eq(now, res); /* the result is what was stored */
        assert_stored_is(id, res, rlen);
        shard_free(now);
        shard_free(res);
    }

    /* result is optional; patches apply one after another */
    uint64_t id = create(BOARDS, 9, "{\"n\":1,\"keep\":\"x\"}");
    OK(shard_object_patch(C, id, "{\"n\":2}", 7, NULL, NULL));
    OK(shard_object_patch(C, id, "{\"m\":{\"a\":1}}", 13, NULL, NULL));
    char *now = get(id);
    assert_json_eq(now, "{\"n\":2,\"keep\":\"x\",\"m\":{\"a\":1}}");

    /* rejected patches change nothing */
    static const char *const bad[] = {"[1]", "\"x\"", "1", "null", "", "{", "{\"a\":1,\"a\":2}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        FAILS(SHARD_EINVAL, shard_object_patch(C, id, bad[i], strlen(bad[i]), NULL, NULL));
    FAILS(SHARD_EINVAL, shard_object_patch(C, id, NULL, 0, NULL, NULL));
    assert_get_is(id, now);
    shard_free(now);

    FAILS(SHARD_ENOTFOUND, shard_object_patch(C, make_id(9, BOARDS, SHARD_MAX_LOCAL),
                                              "{}", 2, NULL, NULL));
    FAILS(SHARD_EINVAL, shard_object_patch(C, 0, "{}", 2, NULL, NULL));
    FAILS(SHARD_EINVAL, shard_object_patch(C, make_id(9, 99, 1), "{}", 2, NULL, NULL));
}
END_TEST

typedef struct upd {
    int calls;
    int code;
} upd;

static int cb_incr(json_t *obj, void *payload)
{
    upd *u = payload;
    json_int_t n = json_integer_value(json_object_get(obj, "n"));
    u->calls++;
    json_object_set_new(obj, "n", json_integer(n + 1));
    json_object_del(obj, "gone");
    return 0;
}

/* Changes the object, then aborts: nothing may be written. */
static int cb_abort(json_t *obj, void *payload)
{
    upd *u = payload;
    u->calls++;
    json_object_set_new(obj, "n", json_integer(-1));
    json_object_clear(obj);
    return u->code;
}

START_TEST(test_object_update)
{
    const char *start = "{\"n\":41,\"gone\":true,\"s\":\"x\"}";
    uint64_t id = create(PINS, 4, start);
    upd u = {0, 0};

    OK(shard_object_update(C, id, cb_incr, &u));
    ck_assert_int_eq(u.calls, 1);
    char *now = get(id);
    assert_json_eq(now, "{\"n\":42,\"s\":\"x\"}");

    /* abort: the callback's code comes back, called once, nothing changes */
    static const int codes[] = {42, -12345, SHARD_ECONFLICT, SHARD_EBUSY, SHARD_ECONNECT};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
        upd a = {0, codes[i]};
        int rc = shard_object_update(C, id, cb_abort, &a);
        ck_assert_msg(rc == codes[i], "abort with %d returned %d (%s)", codes[i], rc,
                      shard_errmsg());
        ck_assert_msg(a.calls == 1, "callback aborting with %d was called %d times",
                      codes[i], a.calls);
        assert_get_is(id, now);
    }

    /* the aborted transactions released the row: another session can lock it */
    char db[64];
    db_of(4, db, sizeof db);
    free(sql_on(master_of(4), "SET SESSION innodb_lock_wait_timeout = 1; "
                              "SELECT data FROM `%s`.pins WHERE local_id = %llu FOR UPDATE",
                db, (unsigned long long)shard_id_local(id)));
    shard_free(now);

    /* absent objects: the callback never runs */
    upd none = {0, 0};
    FAILS(SHARD_ENOTFOUND, shard_object_update(C, make_id(4, PINS, SHARD_MAX_LOCAL),
                                               cb_incr, &none));
    FAILS(SHARD_EINVAL, shard_object_update(C, 0, cb_incr, &none));
    FAILS(SHARD_EINVAL, shard_object_update(C, id, NULL, &none));
    ck_assert_int_eq(none.calls, 0);
}
END_TEST

START_TEST(test_object_delete)
{
    /* soft: hidden from every read, row kept with "active": false */
    const char *j = "{\"x\":1,\"active\":true}";
    uint64_t id = create(PINS, 5, j);
    OK(shard_object_delete(C, id, 0));
    FAILS(SHARD_ENOTFOUND, get_rc(id));
    ck_assert_int_eq(rows_of(id), 1);
    char db[64];
    db_of(5, db, sizeof db);
    ck_assert_int_eq(sql_num("s1", "SELECT JSON_EXTRACT(data, '$.active') = false AND "
                                   "JSON_EXTRACT(data, '$.x') = 1 FROM `%s`.pins "
                                   "WHERE local_id = %llu", db,
                             (unsigned long long)shard_id_local(id)), 1);
    FAILS(SHARD_ENOTFOUND, shard_object_delete(C, id, 0));
    FAILS(SHARD_ENOTFOUND, shard_object_patch(C, id, "{\"active\":true}", 15, NULL, NULL));
    upd u = {0, 0};
    FAILS(SHARD_ENOTFOUND, shard_object_update(C, id, cb_incr, &u));
    ck_assert_int_eq(u.calls, 0);
    shard_item *items = NULL;
    FAILS(0, shard_object_mget(C, &id, 1, &items));
    ck_assert_int_eq(items[0].status, SHARD_ENOTFOUND);
    ck_assert_ptr_null(items[0].data);
    shard_items_free(items, 1);
    /* a soft-deleted object can still be removed for good */
    OK(shard_object_delete(C, id, SHARD_DELETE_HARD));
    ck_assert_int_eq(rows_of(id), 0);

    /* hard: the row is gone */
    uint64_t h = create(BOARDS, 13, "{\"y\":2}");
    ck_assert_int_eq(rows_of(h), 1);
    OK(shard_object_delete(C, h, SHARD_DELETE_HARD));
    ck_assert_int_eq(rows_of(h), 0);
    FAILS(SHARD_ENOTFOUND, get_rc(h));
    FAILS(SHARD_ENOTFOUND, shard_object_delete(C, h, SHARD_DELETE_HARD));
    FAILS(SHARD_ENOTFOUND, shard_object_delete(C, h, 0));

    /* bad arguments touch nothing */
    uint64_t k = create(PINS, 5, "{\"k\":3}");
    FAILS(SHARD_EINVAL, shard_object_delete(C, k, 2));
    FAILS(SHARD_EINVAL, shard_object_delete(C, k, -1));
    FAILS(SHARD_EINVAL, shard_object_delete(C, 0, 0));
    FAILS(SHARD_EINVAL, shard_object_delete(C, make_id(5, 99, 1), SHARD_DELETE_HARD));
    assert_get_is(k, "{\"k\":3}");
}
END_TEST

/* ------------------------------------------------------------ multi-get */

START_TEST(test_mget)
{
    uint64_t a = create(PINS, 1, "{\"k\":\"a\"}");
    uint64_t b = create(BOARDS, 1, "{\"k\":\"b\"}");
    uint64_t c = create(PINS, 9, "{\"k\":\"c\"}");
    uint64_t d = create(PINS, 14, "{\"k\":\"d\"}");
    uint64_t e = create(PINS, 9, "{\"k\":\"e\"}");
    uint64_t f = create(BOARDS, 2, "{\"k\":\"f\"}");
    OK(shard_object_delete(C, e, 0));
    OK(shard_object_delete(C, f, SHARD_DELETE_HARD));
    uint64_t missing = make_id(9, PINS, SHARD_MAX_LOCAL);
    uint64_t badtype = make_id(1, 99, 5);
    uint64_t reserved = a | (UINT64_C(1) << 62);
    uint64_t unmapped = make_id(NSHARDS + 3, PINS, 1);

    const uint64_t ids[] = {d, a, 0, c, a, missing, b, e, badtype, d, reserved, f, unmapped, c};
    const char *const want[] = {"{\"k\":\"d\"}", "{\"k\":\"a\"}", NULL, "{\"k\":\"c\"}",
                                "{\"k\":\"a\"}", NULL, "{\"k\":\"b\"}", NULL, NULL,
                                "{\"k\":\"d\"}", NULL, NULL, NULL, "{\"k\":\"c\"}"};
    const int status[] = {0, 0, SHARD_EINVAL, 0, 0, SHARD_ENOTFOUND, 0, SHARD_ENOTFOUND,
                          SHARD_EINVAL, 0, SHARD_EINVAL, SHARD_ENOTFOUND, SHARD_ENOSHARD, 0};
    const size_t n = sizeof ids / sizeof *ids;
    shard_item *items = NULL;

    FAILS(SHARD_EPARTIAL, shard_object_mget(C, ids, n, &items));
    ck_assert_str_ne(shard_errmsg(), "");
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(items[i].status == status[i], "item %zu (ID %llu): status %d, want %d",
                      i, (unsigned long long)ids[i], items[i].status, status[i]);
        if (want[i]) {
            ck_assert_ptr_nonnull(items[i].data);
            ck_assert_str_eq(items[i].data, want[i]);
            ck_assert_uint_eq(items[i].len, strlen(want[i]));
        } else {
            ck_assert_ptr_null(items[i].data);
        }
    }
    shard_items_free(items, n);

    /* found and not found only: success */
    const uint64_t ok_ids[] = {missing, c, e, a};
    OK(shard_object_mget(C, ok_ids, 4, &items));
    ck_assert_int_eq(items[0].status, SHARD_ENOTFOUND);
    ck_assert_str_eq(items[1].data, "{\"k\":\"c\"}");
    ck_assert_int_eq(items[2].status, SHARD_ENOTFOUND);
    ck_assert_str_eq(items[3].data, "{\"k\":\"a\"}");
    shard_items_free(items, 4);

    /* empty input */
    items = NULL;
    OK(shard_object_mget(C, ids, 0, &items));
    shard_items_free(items, 0);
    FAILS(SHARD_EINVAL, shard_object_mget(C, NULL, 3, &items));
    FAILS(SHARD_EINVAL, shard_object_mget(C, ids, 3, NULL));
}
END_TEST

#define BULK 1200 /* rows per pair: more than one 1000-ID statement each */

START_TEST(test_mget_large)
{
    /* rows written straight into shard 2 (pair 1) and shard 10 (pair 2) */
    free(sql_on("s1", "INSERT INTO db00002.pins (local_id, data) SELECT 500000 + seq, "
                      "CONCAT('{\"p\":1,\"n\":', seq, '}') FROM db00002.seq_1_to_%d", BULK));
    free(sql_on("s3", "INSERT INTO db00010.boards (local_id, data) SELECT 500000 + seq, "
                      "CONCAT('{\"p\":2,\"n\":', seq, '}') FROM db00010.seq_1_to_%d", BULK));

    size_t n = 0, cap = 2 * BULK + 64;
    uint64_t *ids = calloc(cap, sizeof *ids);
    char **want = calloc(cap, sizeof *want);
    ck_assert(ids && want);
    for (int i = BULK; i >= 1; i--) { /* descending: the library must sort */
        ids[n] = make_id(2, PINS, 500000 + (uint64_t)i);
        want[n++] = fmt("{\"p\":1,\"n\":%d}", i);
        ids[n] = make_id(10, BOARDS, 500000 + (uint64_t)i);
        want[n++] = fmt("{\"p\":2,\"n\":%d}", i);
        if (i % 100 == 0) { /* absent neighbours */
            ids[n++] = make_id(2, PINS, 700000 + (uint64_t)i);
        }
    }
    /* Duplicates. Each pair's IDs are asked in sorted statements of 1000:
     * pair 1's sorted list is 500001 twice, 500002 .. 500998, then 500999
     * at positions 999 and 1000, and pair 2's has 501000 at 999 and 1000,
     * so both straddle a statement boundary. */
    uint64_t dups[] = {make_id(2, PINS, 500999), make_id(2, PINS, 500001),
                       make_id(10, BOARDS, 501000), make_id(10, BOARDS, 501100)};
    int dupn[] = {999, 1, 1000, 1100};
    for (size_t i = 0; i < 4; i++) {
        ids[n] = dups[i];
        want[n++] = fmt("{\"p\":%d,\"n\":%d}", i < 2 ? 1 : 2, dupn[i]);
    }
    ck_assert_uint_le(n, cap);

    shard_item *items = NULL;
    double t0 = now_s();
    OK(shard_object_mget(C, ids, n, &items));
    double took = now_s() - t0;
    for (size_t i = 0; i < n; i++) {
        if (want[i]) {
            ck_assert_msg(items[i].status == 0 && items[i].data &&
                              strcmp(items[i].data, want[i]) == 0,
                          "item %zu (ID %llu): status %d data %s, want %s", i,
                          (unsigned long long)ids[i], items[i].status,
                          items[i].data ? items[i].data : "NULL", want[i]);
        } else {
            ck_assert_int_eq(items[i].status, SHARD_ENOTFOUND);
            ck_assert_ptr_null(items[i].data);
        }
        free(want[i]);
    }
    fprintf(stderr, "  (mget of %zu IDs over 2 pairs: %.3fs)\n", n, took);
    shard_items_free(items, n);
    free(ids);
    free(want);
}
END_TEST

/* ------------------------------------------------------------ mappings */

static void assert_list(const char *name, uint64_t from, int64_t before, size_t limit,
                        const uint64_t *to, const int64_t *seq, size_t n)
{
    shard_edge *e = NULL;
    size_t got = 99;
    int rc = shard_mapping_list(C, name, from, before, limit, &e, &got);
    ck_assert_msg(rc == 0, "list %s %llu: %d %s", name, (unsigned long long)from, rc,
                  shard_errmsg());
    ck_assert_msg(got == n, "list %s %llu before %lld limit %zu: %zu rows, want %zu", name,
                  (unsigned long long)from, (long long)before, limit, got, n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(e[i].to == to[i] && e[i].seq == seq[i],
                      "list %s row %zu: (%llu, %lld), want (%llu, %lld)", name, i,
                      (unsigned long long)e[i].to, (long long)e[i].seq,
                      (unsigned long long)to[i], (long long)seq[i]);
    }
    shard_free(e);
}

static uint64_t count_of(const char *name, uint64_t from)
{
    uint64_t c = 12345;
    OK(shard_mapping_count(C, name, from, &c));
    return c;
}

/* The sequence of row (from, to) of mapping table `table`, read on the
 * master of `shard`'s database; -1 when absent. */
static long long row_seq(const char *table, unsigned shard, uint64_t from, uint64_t to)
{
    char db[64];
    db_of(shard, db, sizeof db);
    char *out = sql_on(master_of(shard),
                       "SELECT sequence FROM `%s`.`%s` WHERE from_id = %llu AND to_id = %llu",
                       db, table, (unsigned long long)from, (unsigned long long)to);
    long long v = out[0] ? strtoll(out, NULL, 10) : -1;
    free(out);
    return v;
}

START_TEST(test_mapping)
{
    uint64_t b = create(BOARDS, 2, "{\"board\":1}");
    uint64_t p1 = create(PINS, 2, "{}"), p2 = create(PINS, 5, "{}");
    uint64_t p3 = create(PINS, 9, "{}"), p4 = create(PINS, 13, "{}");
    uint64_t p5 = create(PINS, 2, "{}");

    OK(shard_mapping_add(C, "board_has_pins", b, p1, 100));
    OK(shard_mapping_add(C, "board_has_pins", b, p2, 100));
    OK(shard_mapping_add(C, "board_has_pins", b, p3, 100));
    OK(shard_mapping_add(C, "board_has_pins", b, p4, 200));
    OK(shard_mapping_add(C, "board_has_pins", b, p5, 50));

    /* forward rows on the board's shard, reverse rows on each pin's shard */
    const uint64_t pins[] = {p1, p2, p3, p4, p5};
    const long long seqs[] = {100, 100, 100, 200, 50};
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(row_seq("board_has_pins", 2, b, pins[i]), seqs[i]);
        ck_assert_int_eq(row_seq("pin_owned_by_board", shard_id_shard(pins[i]), pins[i], b),
                         seqs[i]);
    }
    /* and nowhere else: no reverse row on the board's shard for a remote pin */
    ck_assert_int_eq(row_seq("pin_owned_by_board", 2, p3, b), -1);
    ck_assert_int_eq(row_seq("board_has_pins", shard_id_shard(p3), b, p3), -1);

    /* newest first; ties by higher `to` first (p3 > p2 > p1: shard bits) */
    ck_assert(p3 > p2 && p2 > p1);
    {
        const uint64_t to[] = {p4, p3, p2, p1, p5};
        const int64_t sq[] = {200, 100, 100, 100, 50};
        assert_list("board_has_pins", b, SHARD_SEQ_NONE, 0, to, sq, 5);
        assert_list("board_has_pins", b, SHARD_SEQ_NONE, 100, to, sq, 5);
        assert_list("board_has_pins", b, SHARD_SEQ_NONE, 2, to, sq, 2);
        assert_list("board_has_pins", b, SHARD_SEQ_NONE, 1, to, sq, 1);
        /* before: strictly below */
        assert_list("board_has_pins", b, 200, 0, to + 1, sq + 1, 4);
        assert_list("board_has_pins", b, 201, 0, to, sq, 5);
        assert_list("board_has_pins", b, 101, 2, to + 1, sq + 1, 2);
        assert_list("board_has_pins", b, 100, 0, to + 4, sq + 4, 1);
        assert_list("board_has_pins", b, 50, 0, NULL, NULL, 0);
    }
    ck_assert_uint_eq(count_of("board_has_pins", b), 5);

    /* the reverse name lists and counts */
    {
        const uint64_t to[] = {b};
        const int64_t sq[] = {200};
        assert_list("pin_owned_by_board", p4, SHARD_SEQ_NONE, 10, to, sq, 1);
        ck_assert_uint_eq(count_of("pin_owned_by_board", p4), 1);
    }

    /* re-add: a new sequence on both rows, no new row */
    OK(shard_mapping_add(C, "board_has_pins", b, p5, 300));
    ck_assert_uint_eq(count_of("board_has_pins", b), 5);
    ck_assert_int_eq(row_seq("board_has_pins", 2, b, p5), 300);
    ck_assert_int_eq(row_seq("pin_owned_by_board", 2, p5, b), 300);
    {
        const uint64_t to[] = {p5, p4};
        const int64_t sq[] = {300, 200};
        assert_list("board_has_pins", b, SHARD_SEQ_NONE, 2, to, sq, 2);
    }

    /* remove: both rows go; absent is SHARD_ENOTFOUND */
    OK(shard_mapping_remove(C, "board_has_pins", b, p2));
    OK(shard_mapping_remove(C, "board_has_pins", b, p3));
    ck_assert_int_eq(row_seq("board_has_pins", 2, b, p2), -1);
    ck_assert_int_eq(row_seq("pin_owned_by_board", 5, p2, b), -1);
    ck_assert_int_eq(row_seq("pin_owned_by_board", 9, p3, b), -1);
    FAILS(SHARD_ENOTFOUND, shard_mapping_remove(C, "board_has_pins", b, p2));
    FAILS(SHARD_ENOTFOUND, shard_mapping_remove(C, "board_has_pins", p1, b));
    ck_assert_uint_eq(count_of("board_has_pins", b), 3);
    ck_assert_uint_eq(count_of("pin_owned_by_board", p2), 0);
    {
        const uint64_t to[] = {p5, p4, p1};
        const int64_t sq[] = {300, 200, 100};
        assert_list("board_has_pins", b, SHARD_SEQ_NONE, 0, to, sq, 3);
    }

    /* writing through the reverse name is refused, and writes nothing */
    char *before[NPAIRS];
    snapshot(before);
    FAILS(SHARD_EINVAL, shard_mapping_add(C, "pin_owned_by_board", p1, b, 7));
    FAILS(SHARD_EINVAL, shard_mapping_add(C, "pin_owned_by_board", p2, b, 7));
    FAILS(SHARD_EINVAL, shard_mapping_remove(C, "pin_owned_by_board", p1, b));
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "board_has_pins"));
    /* unknown names, bad IDs */
    FAILS(SHARD_EINVAL, shard_mapping_add(C, "nope", b, p1, 7));
    FAILS(SHARD_EINVAL, shard_mapping_add(C, NULL, b, p1, 7));
    FAILS(SHARD_EINVAL, shard_mapping_add(C, "board_has_pins", 0, p1, 7));
    FAILS(SHARD_EINVAL, shard_mapping_add(C, "board_has_pins", b, 0, 7));
    FAILS(SHARD_EINVAL, shard_mapping_add(C, "board_has_pins", b, p1 | (UINT64_C(1) << 63), 7));
    assert_unchanged(before, "refused mapping writes");
    shard_edge *e = NULL;
    size_t n = 0;
    uint64_t cnt;
    FAILS(SHARD_EINVAL, shard_mapping_list(C, "nope", b, SHARD_SEQ_NONE, 0, &e, &n));
    FAILS(SHARD_EINVAL, shard_mapping_list(C, "board_has_pins", 0, SHARD_SEQ_NONE, 0, &e, &n));
    FAILS(SHARD_EINVAL, shard_mapping_count(C, "nope", b, &cnt));
    ck_assert_ptr_null(e);

    /* unknown from: empty */
    ck_assert_uint_eq(count_of("board_has_pins", make_id(2, BOARDS, SHARD_MAX_LOCAL)), 0);
    assert_list("board_has_pins", make_id(2, BOARDS, SHARD_MAX_LOCAL), SHARD_SEQ_NONE, 0,
                NULL, NULL, 0);

    /* a mapping without a reverse writes one row only */
    uint64_t user = make_id(4, USERS, 777);
    OK(shard_mapping_add(C, "user_likes_pins", user, p3, -5));
    ck_assert_int_eq(row_seq("user_likes_pins", 4, user, p3), -5);
    ck_assert_int_eq(sql_num("s3", "SELECT COUNT(*) FROM db00009.pin_owned_by_board "
                                   "WHERE to_id = %llu", (unsigned long long)user), 0);
    {
        const uint64_t to[] = {p3};
        const int64_t sq[] = {-5};
        assert_list("user_likes_pins", user, SHARD_SEQ_NONE, 0, to, sq, 1);
    }

    /* SHARD_SEQ_NOW: the time in microseconds */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t t0 = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    OK(shard_mapping_add(C, "user_likes_pins", user, p1, SHARD_SEQ_NOW));
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t t1 = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    long long s = row_seq("user_likes_pins", 4, user, p1);
    ck_assert_msg(s >= t0 && s <= t1, "SHARD_SEQ_NOW gave %lld, not in [%lld, %lld]", s,
                  (long long)t0, (long long)t1);
}
END_TEST

/* Every statement of the general log that lists mapping rows. */
START_TEST(test_mapping_list_index_only)
{
    uint64_t b = create(BOARDS, 3, "{}");
    for (int i = 1; i <= 40; i++)
        OK(shard_mapping_add(C, "board_has_pins", b, make_id(3, PINS, 900000 + (uint64_t)i),
                             i % 7));
    free(sql_on("s1", "TRUNCATE mysql.general_log; SET GLOBAL log_output = 'TABLE'; "
                      "SET GLOBAL general_log = ON"));
    shard_edge *e = NULL;
    size_t n = 0;
    int rc1 = shard_mapping_list(C, "board_has_pins", b, SHARD_SEQ_NONE, 10, &e, &n);
    shard_free(e);
    int rc2 = shard_mapping_list(C, "board_has_pins", b, 5, 10, &e, &n);
    shard_free(e);
    int rc3 = shard_mapping_list(C, "board_has_pins", b, SHARD_SEQ_NONE, 0, &e, &n);
    shard_free(e);
    int rc4 = shard_mapping_list(C, "pin_owned_by_board", make_id(3, PINS, 900001),
                                 SHARD_SEQ_NONE, 10, &e, &n);
    shard_free(e);
    char *log = sql_on("s1", "SET GLOBAL general_log = OFF; "
                             "SELECT REPLACE(argument, '\\n', ' ') FROM mysql.general_log "
                             "WHERE command_type = 'Query' AND argument LIKE "
                             "'SELECT %%to_id%%' ORDER BY event_time");
    free(sql_on("s1", "TRUNCATE mysql.general_log"));
    OK(rc1);
    OK(rc2);
    OK(rc3);
    OK(rc4);

    int seen = 0;
    for (char *save = NULL, *line = strtok_r(log, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (!strstr(line, "board_has_pins") && !strstr(line, "pin_owned_by_board"))
            continue;
        char *plan = sql_on("s1", "EXPLAIN %s", line);
        /* id select_type table type possible_keys key key_len ref rows Extra,
         * one line per table: the mapping table's (the fence's own lookup
         * and the join that carries it are rows of their own) must be an
         * index-only scan of `newest`, never sorted. */
        bool found = false;
        char *plan_copy = strdup(plan), *save3 = NULL;
        for (char *pl = strtok_r(plan_copy, "\n", &save3); pl && !found;
             pl = strtok_r(NULL, "\n", &save3)) {
            char *f[10] = {0}, *save2 = NULL;
            int k = 0;
            for (char *t = strtok_r(pl, "\t", &save2); t && k < 10;
                 t = strtok_r(NULL, "\t", &save2))
                f[k++] = t;
            if (k < 10 || (strcmp(f[2], "board_has_pins") != 0 &&
                           strcmp(f[2], "pin_owned_by_board") != 0))
                continue;
            found = true;
            ck_assert_msg(strcmp(f[5], "newest") == 0 && strstr(f[9], "Using index") &&
                              !strstr(f[9], "filesort"),
                          "list query is not an index-only scan of `newest`:\n  %s\n  plan: %s",
                          line, plan);
        }
        ck_assert_msg(found, "no mapping table in the plan of %s:\n%s", line, plan);
        free(plan_copy);
        free(plan);
        seen++;
    }
    ck_assert_msg(seen == 4, "found %d list statements in the general log:\n%s", seen, log);
    free(log);
}
END_TEST

/* ------------------------------------------------------------ key-value */

static void kv_assert(const char *table, const void *key, size_t klen, const void *val,
                      size_t vlen)
{
    char *v = NULL;
    size_t n = 999;
    int rc = shard_kv_get(C, table, key, klen, &v, &n);
    ck_assert_msg(rc == 0, "kv get (%zu-byte key): %d %s", klen, rc, shard_errmsg());
    ck_assert_uint_eq(n, vlen);
    ck_assert(memcmp(v, val, vlen) == 0);
    ck_assert_int_eq(v[vlen], '\0');
    shard_free(v);
}

static int kv_get_rc(const char *table, const void *key, size_t klen)
{
    char *v = NULL;
    size_t n;
    int rc = shard_kv_get(C, table, key, klen, &v, &n);
    shard_free(v);
    return rc;
}

/* HEX(v) of the key's row in its mod shard's database, on its master. */
static char *kv_stored_hex(const char *table, const void *key, size_t klen)
{
    uint32_t ms;
    char db[64];
    OK(shard_mod(key, klen, NMOD, &ms));
    OK(shard_map_mod_database(M, ms, db, sizeof db));
    char *k = hex(key, klen);
    char *out = sql_on(master_of_mod(ms), "SELECT HEX(v) FROM `%s`.`%s` WHERE k = X'%s'", db,
                       table, k);
    free(k);
    return out;
}

/* "v\0_<i>": a value with a NUL inside. */
static size_t kv_val(char *buf, size_t size, size_t i)
{
    int n = snprintf(buf, size, "v__%zu", i);
    buf[1] = '\0';
    return (size_t)n;
}

START_TEST(test_kv)
{
    const char *T = "users_by_name";
    struct {
        const char *k;
        size_t klen;
    } keys[] = {{"", 0},    {"a", 1},        {"a\0", 2},   {"a ", 2},  {"\0", 1},
                {"\0\0", 2}, {"\xff\xfe", 2}, {"k\0\0\0", 4}, {"A", 1}, {"'; DROP TABLE x; --", 19}};
    const size_t nk = sizeof keys / sizeof *keys;
    unsigned char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;

    /* every key distinct, every value exact: NUL bytes, all 256 byte values */
    for (size_t i = 0; i < nk; i++) {
        char val[64];
        size_t vl = kv_val(val, sizeof val, i);
        OK(shard_kv_put(C, T, keys[i].k, keys[i].klen, val, vl));
    }
    for (size_t i = 0; i < nk; i++) {
        char val[64];
        size_t vl = kv_val(val, sizeof val, i);
        kv_assert(T, keys[i].k, keys[i].klen, val, vl);
        char *want = hex(val, vl), *got = kv_stored_hex(T, keys[i].k, keys[i].klen);
        ck_assert_str_eq(got, want);
        free(want);
        free(got);
    }
    OK(shard_kv_put(C, T, "bytes", 5, all, sizeof all));
    kv_assert(T, "bytes", 5, all, sizeof all);
    OK(shard_kv_put(C, T, "empty", 5, NULL, 0));
    kv_assert(T, "empty", 5, "", 0);

    /* put overwrites; put_new refuses and keeps the value */
    OK(shard_kv_put(C, T, "a", 1, "second", 6));
    kv_assert(T, "a", 1, "second", 6);
    FAILS(SHARD_EEXISTS, shard_kv_put_new(C, T, "a", 1, "third", 5));
    kv_assert(T, "a", 1, "second", 6);
    FAILS(SHARD_EEXISTS, shard_kv_put_new(C, T, "", 0, "x", 1));
    kv_assert(T, "", 0, "v\0_0", 4);
    OK(shard_kv_put_new(C, T, "fresh", 5, "1", 1));
    kv_assert(T, "fresh", 5, "1", 1);
    /* tables are separate */
    FAILS(SHARD_ENOTFOUND, kv_get_rc("users_by_email", "fresh", 5));
    OK(shard_kv_put_new(C, "users_by_email", "fresh", 5, "2", 1));
    kv_assert("users_by_email", "fresh", 5, "2", 1);
    kv_assert(T, "fresh", 5, "1", 1);

    /* delete */
    OK(shard_kv_delete(C, T, "a\0", 2));
    FAILS(SHARD_ENOTFOUND, kv_get_rc(T, "a\0", 2));
    kv_assert(T, "a", 1, "second", 6); /* its neighbour stays */
    FAILS(SHARD_ENOTFOUND, shard_kv_delete(C, T, "a\0", 2));
    OK(shard_kv_put_new(C, T, "a\0", 2, "back", 4));
    kv_assert(T, "a\0", 2, "back", 4);

    /* 1024-byte keys work; 1025 bytes are refused, nothing truncated or written */
    char key[SHARD_KEY_MAX + 1];
    memset(key, 0xAB, sizeof key);
    OK(shard_kv_put(C, T, key, SHARD_KEY_MAX, "max", 3));
    kv_assert(T, key, SHARD_KEY_MAX, "max", 3);
    FAILS(SHARD_EEXISTS, shard_kv_put_new(C, T, key, SHARD_KEY_MAX, "new", 3));
    OK(shard_kv_delete(C, T, key, SHARD_KEY_MAX));
    char *before[NPAIRS];
    snapshot(before);
    FAILS(SHARD_EINVAL, shard_kv_put(C, T, key, SHARD_KEY_MAX + 1, "long", 4));
    FAILS(SHARD_EINVAL, shard_kv_put_new(C, T, key, SHARD_KEY_MAX + 1, "long", 4));
    FAILS(SHARD_EINVAL, kv_get_rc(T, key, SHARD_KEY_MAX + 1));
    FAILS(SHARD_EINVAL, shard_kv_delete(C, T, key, SHARD_KEY_MAX + 1));
    /* unknown tables and bad arguments */
    static const char *const bad_tables[] = {
        "nope", "pins", "board_has_pins", "users_by_name`; DROP TABLE x; --",
        "users_by_name; DROP DATABASE modshard00000", "USERS_BY_NAME", "users_by_name ",
        "", "modshard00000.users_by_name"};
    for (size_t i = 0; i < sizeof bad_tables / sizeof *bad_tables; i++) {
        FAILS(SHARD_EINVAL, shard_kv_put(C, bad_tables[i], "a", 1, "x", 1));
        FAILS(SHARD_EINVAL, shard_kv_put_new(C, bad_tables[i], "zz", 2, "x", 1));
        FAILS(SHARD_EINVAL, kv_get_rc(bad_tables[i], "a", 1));
        FAILS(SHARD_EINVAL, shard_kv_delete(C, bad_tables[i], "a", 1));
    }
    FAILS(SHARD_EINVAL, shard_kv_put(C, NULL, "a", 1, "x", 1));
    FAILS(SHARD_EINVAL, shard_kv_put(C, T, NULL, 1, "x", 1));
    FAILS(SHARD_EINVAL, shard_kv_put(C, T, "a", 1, NULL, 1));
    FAILS(SHARD_EINVAL, shard_kv_get(C, T, "a", 1, NULL, NULL));
    assert_unchanged(before, "refused key-value calls");
    FAILS(SHARD_ENOTFOUND, kv_get_rc(T, key, SHARD_KEY_MAX));
    kv_assert(T, "a", 1, "second", 6);

    /* a 1 MB value */
    size_t big = 1 << 20;
    unsigned char *v = malloc(big);
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < big; i++)
        v[i] = (unsigned char)(i * 7 + (i >> 9));
    OK(shard_kv_put(C, T, "big", 3, v, big));
    kv_assert(T, "big", 3, v, big);
    free(v);
}
END_TEST

/* ------------------------------------------------------------ transactions */

START_TEST(test_txn)
{
    shard_txn *t = NULL;
    uint64_t board = 0, pin = 0, x = 0;

    /* an object and its mapping rows commit together */
    OK(shard_txn_begin(C, 5, &t));
    OK(shard_txn_object_create(t, BOARDS, "{\"t\":\"board\"}", 13, &board));
    OK(shard_txn_object_create(t, PINS, "{\"t\":\"pin\"}", 11, &pin));
    ck_assert_uint_eq(shard_id_shard(board), 5);
    ck_assert_uint_eq(shard_id_shard(pin), 5);
    OK(shard_txn_mapping_add(t, "board_has_pins", board, pin, 77));
    /* the transaction reads its own writes; others see nothing yet */
    char *j = NULL;
    size_t len = 0;
    OK(shard_txn_object_get(t, pin, &j, &len));
    ck_assert_str_eq(j, "{\"t\":\"pin\"}");
    shard_free(j);
    OK(shard_txn_object_put(t, pin, "{\"t\":\"pin\",\"v\":2}", 17));
    ck_assert_int_eq(rows_of(pin), 0);
    ck_assert_int_eq(rows_of(board), 0);
    ck_assert_int_eq(row_seq("board_has_pins", 5, board, pin), -1);
    FAILS(SHARD_ENOTFOUND, get_rc(pin));
    /* IDs of another shard: refused */
    uint64_t other = create(PINS, 6, "{}");
    FAILS(SHARD_EINVAL, shard_txn_object_get(t, other, &j, &len));
    FAILS(SHARD_EINVAL, shard_txn_object_put(t, other, "{}", 2));
    FAILS(SHARD_EINVAL, shard_txn_mapping_add(t, "board_has_pins", board, other, 1));
    FAILS(SHARD_EINVAL, shard_txn_mapping_add(t, "board_has_pins", other, pin, 1));
    FAILS(SHARD_EINVAL, shard_txn_mapping_add(t, "pin_owned_by_board", pin, board, 1));
    FAILS(SHARD_EINVAL, shard_txn_mapping_add(t, "nope", board, pin, 1));
    FAILS(SHARD_EINVAL, shard_txn_object_create(t, PINS, "[1]", 3, &x));
    FAILS(SHARD_EINVAL, shard_txn_object_create(t, 99, "{}", 2, &x));
    FAILS(SHARD_EINVAL, shard_txn_object_put(t, pin, "\"s\"", 3));
    FAILS(SHARD_ENOTFOUND, shard_txn_object_get(t, make_id(5, PINS, SHARD_MAX_LOCAL), &j, &len));
    FAILS(SHARD_ENOTFOUND, shard_txn_object_put(t, make_id(5, PINS, SHARD_MAX_LOCAL), "{}", 2));
    /* a mapping without a reverse may point anywhere */
    uint64_t liker = make_id(5, USERS, 4242);
    OK(shard_txn_mapping_add(t, "user_likes_pins", liker, other, 9));
    OK(shard_txn_commit(t));

    assert_get_is(board, "{\"t\":\"board\"}");
    assert_get_is(pin, "{\"t\":\"pin\",\"v\":2}");
    ck_assert_int_eq(row_seq("board_has_pins", 5, board, pin), 77);
    ck_assert_int_eq(row_seq("pin_owned_by_board", 5, pin, board), 77);
    ck_assert_int_eq(row_seq("user_likes_pins", 5, liker, other), 9);
    assert_get_is(other, "{}");

    /* rollback leaves nothing */
    uint64_t rb = 0, rp = 0;
    OK(shard_txn_begin(C, 11, &t));
    OK(shard_txn_object_create(t, BOARDS, "{}", 2, &rb));
    OK(shard_txn_object_create(t, PINS, "{}", 2, &rp));
    OK(shard_txn_mapping_add(t, "board_has_pins", rb, rp, 1));
    FAILS(SHARD_EINVAL, shard_txn_object_put(t, pin, "{}", 2)); /* shard 5, not 11 */
    shard_txn_rollback(t);
    ck_assert_int_eq(rows_of(rb), 0);
    ck_assert_int_eq(rows_of(rp), 0);
    ck_assert_int_eq(row_seq("board_has_pins", 11, rb, rp), -1);
    ck_assert_int_eq(row_seq("pin_owned_by_board", 11, rp, rb), -1);
    FAILS(SHARD_ENOTFOUND, get_rc(rp));
    ck_assert_uint_eq(count_of("board_has_pins", rb), 0);
    shard_txn_rollback(NULL);

    /* A statement that fails on the server: commit fails, nothing lands.
     * (A table no other test uses on that shard, in case this one fails.) */
    free(sql_on("s1", "DROP TABLE db00006.user_likes_pins"));
    uint64_t fp = 0, fp2 = 0;
    OK(shard_txn_begin(C, 6, &t));
    OK(shard_txn_object_create(t, PINS, LIT("{\"f\":1}"), &fp));
    int rc = shard_txn_mapping_add(t, "user_likes_pins", make_id(6, USERS, 1), fp, 1);
    ck_assert_msg(rc == SHARD_ESERVER, "insert into a dropped table: %d %s", rc,
                  shard_errmsg());
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "user_likes_pins"));
    FAILS(SHARD_ESERVER, shard_txn_object_create(t, PINS, "{}", 2, &fp2));
    rc = shard_txn_commit(t);
    ck_assert_msg(rc != 0, "commit after a failed statement succeeded");
    ck_assert_int_eq(rows_of(fp), 0);
    FAILS(SHARD_ENOTFOUND, get_rc(fp));
    OK(harness_schema_apply(H)); /* brings the table back */
    ck_assert_int_eq(sql_num("s1", "SELECT COUNT(*) FROM db00006.user_likes_pins"), 0);

    /* begin: bad shards */
    FAILS(SHARD_ENOSHARD, shard_txn_begin(C, NSHARDS, &t));
    FAILS(SHARD_EINVAL, shard_txn_begin(C, 70000, &t));
    FAILS(SHARD_EINVAL, shard_txn_begin(C, 1, NULL));
    FAILS(SHARD_EINVAL, shard_txn_commit(NULL));
}
END_TEST

/* ------------------------------------------------------------ scatter */

typedef struct scan_rec {
    uint64_t id;
    char *json;
} scan_rec;

typedef struct scan_state {
    scan_rec *v;
    size_t n, cap;
    size_t stop_after; /* 0: never */
    int nested_errors;
} scan_state;

static int scan_cb(uint64_t id, const char *json, size_t len, void *payload)
{
    scan_state *s = payload;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v)
            abort();
    }
    s->v[s->n].id = id;
    s->v[s->n].json = strndup(json, len);
    s->n++;
    /* the callback may call libshard itself */
    if (s->n <= 20) {
        char *j = NULL;
        size_t l;
        if (shard_object_get(C, id, &j, &l) != 0 || l != len || memcmp(j, json, len) != 0)
            s->nested_errors++;
        shard_free(j);
    }
    return s->stop_after && s->n >= s->stop_after ? 7 : 0;
}

static void scan_free(scan_state *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->v[i].json);
    free(s->v);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static char *deep(int depth, const char *head)
{
    size_t n = strlen(head);
    char *s = malloc(n + 2 * (size_t)depth + 16);
    ck_assert_ptr_nonnull(s);
    memcpy(s, head, n);
    memcpy(s + n, ",\"d\":", 5);
    n += 5;
    memset(s + n, '[', (size_t)depth);
    memset(s + n + (size_t)depth, ']', (size_t)depth);
    n += 2 * (size_t)depth;
    strcpy(s + n, "}");
    return s;
}

START_TEST(test_scatter)
{
    /* live: the ID and its text; everything else is deleted */
    size_t nlive = 0, cap = 2048;
    uint64_t *live = calloc(cap, sizeof *live);
    char **text = calloc(cap, sizeof *text);
    uint64_t dead[64];
    size_t ndead = 0;
    ck_assert(live && text);

    /* bulk rows on shard 4, every tenth soft-deleted: two scan batches */
    free(sql_on("s1", "INSERT INTO db00004.users (local_id, data) SELECT 1000 + seq, "
                      "IF(seq %% 10 = 0, CONCAT('{\"active\":false,\"n\":', seq, '}'), "
                      "CONCAT('{\"n\":', seq, '}')) FROM db00004.seq_1_to_1100"));
    for (int i = 1; i <= 1100; i++) {
        if (i % 10 == 0)
            continue;
        live[nlive] = make_id(4, USERS, 1000 + (uint64_t)i);
        text[nlive++] = fmt("{\"n\":%d}", i);
    }
    /* objects on every shard; "active" other than JSON false is not a deletion */
    static const char *const alive[] = {
        "{\"active\":\"false\"}", "{\"active\":0}", "{\"active\":null}", "{\"active\":true}",
        "{\"x\":{\"active\":false}}", "{\"active\":[false]}", "{\"note\":\"\\\"active\\\":false\"}",
        "{\"active\":\"\"}"};
    for (unsigned s = 0; s < NSHARDS; s++) {
        for (int k = 0; k < 3; k++) {
            const char *j = k == 0 ? alive[s % 8] : k == 1 ? "{\"plain\":true}" : "{\"del\":1}";
            uint64_t id = create(USERS, s, j);
            if (k == 2) {
                OK(shard_object_delete(C, id, (s % 2) ? SHARD_DELETE_HARD : 0));
                dead[ndead++] = id;
            } else {
                live[nlive] = id;
                text[nlive++] = strdup(j);
            }
        }
    }
    /* deeply nested documents, one live and one soft-deleted */
    char *dl = deep(40, "{\"active\":true"), *dd = deep(40, "{\"active\":true");
    live[nlive] = create(USERS, 7, dl);
    text[nlive++] = dl;
    uint64_t did = create(USERS, 12, dd);
    OK(shard_object_delete(C, did, 0));
    FAILS(SHARD_ENOTFOUND, get_rc(did));
    dead[ndead++] = did;
    free(dd);
    ck_assert_uint_le(nlive, cap);

    /* scan: every live object once, shard by shard, PK order within a shard */
    scan_state st = {0};
    OK(shard_scatter_scan(C, USERS, scan_cb, &st));
    ck_assert_int_eq(st.nested_errors, 0);
    ck_assert_msg(st.n == nlive, "scan saw %zu objects, %zu are live", st.n, nlive);
    for (size_t i = 0; i < st.n; i++) {
        ck_assert_uint_eq(shard_id_type(st.v[i].id), USERS);
        if (i == 0)
            continue;
        uint64_t p = st.v[i - 1].id, q = st.v[i].id;
        ck_assert_msg(shard_id_shard(p) < shard_id_shard(q) ||
                          (shard_id_shard(p) == shard_id_shard(q) &&
                           shard_id_local(p) < shard_id_local(q)),
                      "scan order: %llu then %llu", (unsigned long long)p,
                      (unsigned long long)q);
    }
    /* the same IDs, each with its own text */
    uint64_t *seen = malloc(st.n * sizeof *seen);
    ck_assert_ptr_nonnull(seen);
    for (size_t i = 0; i < st.n; i++)
        seen[i] = st.v[i].id;
    qsort(seen, st.n, sizeof *seen, cmp_u64);
    for (size_t i = 0; i < nlive; i++) {
        ck_assert_msg(bsearch(&live[i], seen, st.n, sizeof *seen, cmp_u64),
                      "live object %llu (%.60s) not scanned", (unsigned long long)live[i],
                      text[i]);
    }
    for (size_t i = 0; i < ndead; i++)
        ck_assert_msg(!bsearch(&dead[i], seen, st.n, sizeof *seen, cmp_u64),
                      "deleted object %llu scanned", (unsigned long long)dead[i]);
    for (size_t i = 0; i < st.n; i++) {
        for (size_t k = 0; k < nlive; k++) {
            if (live[k] == st.v[i].id) {
                ck_assert_str_eq(st.v[i].json, text[k]);
                break;
            }
        }
    }
    free(seen);
    scan_free(&st);

    /* the callback stops the scan: its code comes back, no more calls */
    scan_state stop = {.stop_after = 5};
    FAILS(7, shard_scatter_scan(C, USERS, scan_cb, &stop));
    ck_assert_uint_eq(stop.n, 5);
    scan_free(&stop);

    /* count agrees with the scan */
    uint64_t count = 0;
    OK(shard_scatter_count(C, USERS, &count));
    ck_assert_msg(count == nlive, "scatter count %llu, %zu live objects",
                  (unsigned long long)count, nlive);

    FAILS(SHARD_EINVAL, shard_scatter_count(C, 99, &count));
    FAILS(SHARD_EINVAL, shard_scatter_scan(C, 99, scan_cb, &stop));
    FAILS(SHARD_EINVAL, shard_scatter_scan(C, USERS, NULL, NULL));
    FAILS(SHARD_EINVAL, shard_scatter_count(C, USERS, NULL));

    for (size_t i = 0; i < nlive; i++)
        free(text[i]);
    free(text);
    free(live);
}
END_TEST

/* ------------------------------------------------------------ hostile input */

static const char *const accepted[] = {
    "{\"q\":\"it's \\\"quoted\\\" ''\"}",
    "{\"b\":\"back\\\\slash\\\\\",\"c\":\"\\\\'\",\"\\\\\":\"\\\\\\\\\"}",
    "{\"nul\":\"a\\u0000b\\u0000\",\"z\":\"\\u0000\"}",
    "{\"fmt\":\"%s%s%n%d%%\",\"%s\":\"%n\"}",
    "{\"sql\":\"'; DROP TABLE x; --\",\"'; DROP TABLE pins; --\":\"\\\"; DELETE FROM pins; #\"}",
    "{\"hex\":\"X'00' 0x00 \\\\x00 \\\\0 `db00007`.`pins` /* */ -- \"}",
    "{\"emoji\":\"\xF0\x9F\x98\x80 caf\xC3\xA9 \xE2\x82\xAC\",\"esc\":\"\\ud83d\\ude00\\u00e9\"}",
    "{\"ctl\":\"\\n\\t\\r\\b\\f\\/\",\"\\n\":1}",
    "  {\"ws\" : [ 1 , 2.5e3 , -0.0 , true , false , null ] , \"o\" : { } }  \n",
    "{\"n\":-9223372036854775808,\"m\":9223372036854775807,\"f\":1.7976931348623157e308}",
    "{\"\":\"empty key\",\"u\":\"\\uFFFF\\uFEFF\"}",
};

static const struct {
    const char *s;
    size_t len; /* 0: strlen */
} rejected[] = {
    {"{\"a\":\"\xff\"}", 0},          /* not UTF-8 */
    {"{\"a\":\"\xc0\xaf\"}", 0},      /* overlong */
    {"{\"a\":\"\xe2\x82\"}", 0},      /* truncated sequence */
    {"{\"a\":\"\xed\xa0\x80\"}", 0},  /* a surrogate in UTF-8 */
    {"{\"a\":\"\xf4\x90\x80\x80\"}", 0}, /* beyond U+10FFFF */
    {"{\"\xfe\":1}", 0},              /* in a key */
    {"{\"a\":\"\\ud800\"}", 0},       /* lone surrogate escape */
    {"{\"k\\u0000ey\":1}", 0},        /* NUL in a key */
    {"{\"a\":\"x\0y\"}", 9},          /* a raw NUL */
    {"{}\0{}", 5},                    /* bytes after a NUL */
    {"[1,2]", 0}, {"[]", 0}, {"\"str\"", 0}, {"42", 0}, {"null", 0}, {"true", 0},
    {"", 0}, {"   ", 0}, {"{", 0}, {"{}}", 0}, {"{} {}", 0}, {"{'a':1}", 0},
    {"{\"a\":01}", 0}, {"{\"a\":NaN}", 0}, {"{\"a\":1e999}", 0}, {"{\"a\":\"\t\"}", 0},
    {"{\"a\":1,\"a\":2}", 0},         /* duplicate keys */
    {"{\"a\":{\"c\":1,\"c\":1}}", 0}, /* nested duplicate */
    {"{\"a\":1} -- ", 0},
};

START_TEST(test_hostile_json)
{
    /* accepted: stored byte for byte, read back byte for byte */
    for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) {
        const char *j = accepted[i];
        uint64_t id = create(PINS, i % 2 ? 7 : 15, j);
        assert_get_is(id, j);
        assert_stored_is(id, j, strlen(j));
        shard_item *items = NULL;
        OK(shard_object_mget(C, &id, 1, &items));
        ck_assert_str_eq(items[0].data, j);
        shard_items_free(items, 1);
        /* patched: merged like RFC 7386 says, hostile keys and values kept */
        const char *patch = "{\"patched\":\"'; DROP TABLE pins; -- %s \\\\ \\u0000\"}";
        char *res = NULL;
        size_t rlen;
        OK(shard_object_patch(C, id, patch, strlen(patch), &res, &rlen));
        json_t *o = parse(j, strlen(j)), *p = parse(patch, strlen(patch));
        json_t *want = merge(o, p), *got = parse(res, rlen);
        ck_assert_msg(json_equal(want, got), "patch of %s gave %s", j, res);
        json_decref(o);
        json_decref(p);
        json_decref(want);
        json_decref(got);
        char *now = get(id);
        ck_assert_str_eq(now, res);
        shard_free(now);
        shard_free(res);
    }

    /* rejected: SHARD_EINVAL, and not one row anywhere changes */
    uint64_t target = create(PINS, 7, "{\"target\":1}");
    char *before[NPAIRS];
    snapshot(before);
    for (size_t i = 0; i < sizeof rejected / sizeof *rejected; i++) {
        const char *j = rejected[i].s;
        size_t len = rejected[i].len ? rejected[i].len : strlen(j);
        uint64_t id = 0;
        int rc = shard_object_create(C, PINS, 7, j, len, &id);
        ck_assert_msg(rc == SHARD_EINVAL, "create of rejected #%zu: %d", i, rc);
        ck_assert_str_ne(shard_errmsg(), "");
        rc = shard_object_create(C, PINS, SHARD_ANY, j, len, &id);
        ck_assert_msg(rc == SHARD_EINVAL, "create (any) of rejected #%zu: %d", i, rc);
        rc = shard_object_patch(C, target, j, len, NULL, NULL);
        ck_assert_msg(rc == SHARD_EINVAL, "patch with rejected #%zu: %d", i, rc);
        shard_txn *t = NULL;
        OK(shard_txn_begin(C, 7, &t));
        rc = shard_txn_object_create(t, PINS, j, len, &id);
        ck_assert_msg(rc == SHARD_EINVAL, "txn create of rejected #%zu: %d", i, rc);
        rc = shard_txn_object_put(t, target, j, len);
        ck_assert_msg(rc == SHARD_EINVAL, "txn put of rejected #%zu: %d", i, rc);
        OK(shard_txn_commit(t));
        ck_assert_uint_eq(id, 0);
    }
    uint64_t id = 0;
    FAILS(SHARD_EINVAL, shard_object_create(C, PINS, 7, NULL, 0, &id));
    FAILS(SHARD_EINVAL, shard_object_create(C, PINS, 7, NULL, 5, &id));
    assert_unchanged(before, "rejected JSON");
    assert_get_is(target, "{\"target\":1}");
}
END_TEST

START_TEST(test_hostile_big)
{
    /* 1 MB round-trips: create, get, multi-get, patch */
    size_t n1 = (1 << 20) + 17;
    char *big = malloc(n1 + 32);
    ck_assert_ptr_nonnull(big);
    size_t o = (size_t)sprintf(big, "{\"big\":\"");
    for (size_t i = 0; i < n1; i++)
        big[o++] = (char)('a' + i % 26);
    memcpy(big + o, "\\\"\\u0000\"}", 11);
    uint64_t id = create(BOARDS, 8, big);
    assert_get_is(id, big);
    shard_item *items = NULL;
    OK(shard_object_mget(C, &id, 1, &items));
    ck_assert_str_eq(items[0].data, big);
    shard_items_free(items, 1);
    char *res = NULL;
    size_t rlen;
    OK(shard_object_patch(C, id, "{\"small\":1}", 11, &res, &rlen));
    ck_assert_uint_gt(rlen, n1);
    json_t *r = parse(res, rlen), *b = parse(big, strlen(big));
    json_object_set_new(b, "small", json_integer(1));
    ck_assert(json_equal(r, b));
    json_decref(r);
    json_decref(b);
    shard_free(res);
    free(big);

    /* beyond max_allowed_packet (64 MB): SHARD_ETOOBIG, a clear message,
     * nothing written, and the same connections keep working */
    size_t huge = 70u << 20;
    char *h = malloc(huge + 32);
    ck_assert_ptr_nonnull(h);
    o = (size_t)sprintf(h, "{\"huge\":\"");
    memset(h + o, 'x', huge);
    o += huge;
    strcpy(h + o, "\"}");
    size_t hlen = o + 2;
    uint64_t small = create(PINS, 8, "{\"s\":1}");
    char *before[NPAIRS];
    snapshot(before);
    uint64_t hid = 0;
    FAILS(SHARD_ETOOBIG, shard_object_create(C, PINS, 8, h, hlen, &hid));
    ck_assert_msg(strstr(shard_errmsg(), "max_allowed_packet") != NULL, "message: %s",
                  shard_errmsg());
    ck_assert_uint_eq(hid, 0);
    FAILS(SHARD_ETOOBIG, shard_kv_put(C, "users_by_name", "huge", 4, h, huge));
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "max_allowed_packet"));
    /* Values travel as binary parameters, so the limit is the value's own
     * size: a patch that grows an object past it fails inside its
     * transaction, which rolls back; and a transaction with a statement that
     * failed cannot commit. */
    size_t mid = o - huge + (65u << 20);
    strcpy(h + mid, "\"}");
    FAILS(SHARD_ETOOBIG, shard_object_patch(C, small, h, mid + 2, NULL, NULL));
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "max_allowed_packet"));
    shard_txn *t = NULL;
    uint64_t tid = 0;
    OK(shard_txn_begin(C, 8, &t));
    OK(shard_txn_object_create(t, PINS, LIT("{\"in\":\"txn\"}"), &tid));
    FAILS(SHARD_ETOOBIG, shard_txn_object_create(t, PINS, h, mid + 2, &hid));
    ck_assert_int_ne(shard_txn_commit(t), 0);
    assert_unchanged(before, "too-big writes");
    FAILS(SHARD_ENOTFOUND, get_rc(tid));
    free(h);
    assert_get_is(small, "{\"s\":1}");
    OK(shard_object_patch(C, small, "{\"s\":2}", 7, NULL, NULL));
    assert_get_is(small, "{\"s\":2}");
    uint64_t after = create(PINS, 8, "{\"after\":true}");
    assert_get_is(after, "{\"after\":true}");
    OK(shard_kv_put(C, "users_by_name", "huge", 4, "ok", 2));
    kv_assert("users_by_name", "huge", 4, "ok", 2);
}
END_TEST

static const char *const evil_names[] = {
    "board_has_pins`; DROP TABLE x; --",
    "board_has_pins; DROP DATABASE db00002",
    "board_has_pins' OR '1'='1",
    "board_has_pins\" OR \"1\"=\"1",
    "board_has_pins/*",
    "board_has_pins\\",
    "db00002.board_has_pins",
    "`board_has_pins`",
    "Board_Has_Pins",
    "board_has_pins ",
    "board_has_pins\n",
    "%s%s%s%n",
    "",
};

START_TEST(test_hostile_names)
{
    uint64_t b = create(BOARDS, 2, "{}"), p = create(PINS, 10, "{}");
    OK(shard_mapping_add(C, "board_has_pins", b, p, 1));
    char *before[NPAIRS];
    snapshot(before);
    for (size_t i = 0; i < sizeof evil_names / sizeof *evil_names; i++) {
        const char *name = evil_names[i];
        shard_edge *e = NULL;
        size_t n = 0;
        uint64_t c = 0;
        FAILS(SHARD_EINVAL, shard_mapping_add(C, name, b, p, 2));
        FAILS(SHARD_EINVAL, shard_mapping_remove(C, name, b, p));
        FAILS(SHARD_EINVAL, shard_mapping_list(C, name, b, SHARD_SEQ_NONE, 0, &e, &n));
        FAILS(SHARD_EINVAL, shard_mapping_count(C, name, b, &c));
        FAILS(SHARD_EINVAL, shard_kv_put(C, name, "k", 1, "v", 1));
        FAILS(SHARD_EINVAL, shard_kv_put_new(C, name, "k", 1, "v", 1));
        FAILS(SHARD_EINVAL, kv_get_rc(name, "k", 1));
        FAILS(SHARD_EINVAL, shard_kv_delete(C, name, "k", 1));
        shard_txn *t = NULL;
        OK(shard_txn_begin(C, 2, &t));
        FAILS(SHARD_EINVAL, shard_txn_mapping_add(t, name, b, make_id(2, PINS, 1), 2));
        shard_txn_rollback(t);
    }
    assert_unchanged(before, "names with SQL metacharacters");
    ck_assert_int_eq(row_seq("board_has_pins", 2, b, p), 1);
    ck_assert_uint_eq(count_of("board_has_pins", b), 1);
}
END_TEST

/* ------------------------------------------------------------ concurrency */

#define NTHREADS 8
#define KV_KEYS 16
#define RUN_SECS 5.0

typedef struct owned {
    uint64_t id;
    json_t *want;
    int64_t seq; /* its board_has_pins row from the thread's board; 0: none */
} owned;

typedef struct worker {
    int t;
    unsigned seed;
    uint64_t board, counter, shared;
    owned *objs;
    size_t n, cap;
    unsigned char kv[KV_KEYS][40];
    size_t kvlen[KV_KEYS]; /* 0: never written */
    long incs;             /* successful increments of the shared counter */
    long last_shared;      /* the last value this thread wrote into "shared" */
    long ops[7];
    int errors;
    char err[600];
} worker;

static double g_deadline;

static void werr(worker *w, const char *what, int rc)
{
    if (!w->errors++)
        snprintf(w->err, sizeof w->err, "thread %d: %s: %d (%s): %s", w->t, what, rc,
                 shard_strerror(rc), shard_errmsg());
}

static int cb_counter(json_t *obj, void *payload)
{
    (void)payload;
    json_int_t n = json_integer_value(json_object_get(obj, "n"));
    return json_object_set_new(obj, "n", json_integer(n + 1));
}

static void w_create(worker *w, long k)
{
    char body[160];
    uint64_t id = 0;
    /* a hostile-ish payload: quotes, a NUL escape, a format directive */
    snprintf(body, sizeof body, "{\"t\":%d,\"k\":%ld,\"s\":\"'\\\"%%s\\u0000\\\\\"}", w->t, k);
    int rc = shard_object_create(C, PINS, SHARD_ANY, body, strlen(body), &id);
    if (rc) {
        werr(w, "create", rc);
        return;
    }
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 256;
        w->objs = realloc(w->objs, w->cap * sizeof *w->objs);
        if (!w->objs)
            abort();
    }
    json_error_t e;
    w->objs[w->n++] = (owned){id, json_loadb(body, strlen(body), JSON_ALLOW_NUL, &e), 0};
}

static void w_patch(worker *w, long k)
{
    owned *o = &w->objs[(size_t)rand_r(&w->seed) % w->n];
    char patch[128], *res = NULL;
    size_t rlen;
    snprintf(patch, sizeof patch, "{\"p\":%ld,\"k\":null,\"m\":{\"t%d\":%ld}}", k, w->t, k);
    int rc = shard_object_patch(C, o->id, patch, strlen(patch), &res, &rlen);
    if (rc) {
        werr(w, "patch", rc);
        return;
    }
    json_t *p = json_loads(patch, 0, NULL), *next = merge(o->want, p);
    json_t *got = json_loadb(res, rlen, JSON_ALLOW_NUL, NULL);
    if (!json_equal(next, got))
        werr(w, "patch result differs", 0);
    json_decref(got);
    json_decref(p);
    json_decref(o->want);
    o->want = next;
    shard_free(res);
}

static void w_map(worker *w, long k)
{
    owned *o = &w->objs[(size_t)rand_r(&w->seed) % w->n];
    int rc = shard_mapping_add(C, "board_has_pins", w->board, o->id, k);
    if (rc)
        werr(w, "mapping add", rc);
    else
        o->seq = k;
}

/* "w<t>\0k<key>": keys with a NUL inside. */
static size_t kv_name(char *buf, size_t size, int t, int key)
{
    int n = snprintf(buf, size, "w%d", t);
    buf[n++] = '\0';
    return (size_t)n + (size_t)snprintf(buf + n, size - (size_t)n, "k%d", key);
}

static void w_kv(worker *w, long k)
{
    int key = rand_r(&w->seed) % KV_KEYS;
    char name[32];
    size_t kl = kv_name(name, sizeof name, w->t, key);
    unsigned char val[40];
    int vl = snprintf((char *)val, sizeof val, "%d:%ld", w->t, k);
    val[0] = 0; /* binary */
    int rc = shard_kv_put(C, "users_by_email", name, kl, val, (size_t)vl);
    if (rc) {
        werr(w, "kv put", rc);
        return;
    }
    memcpy(w->kv[key], val, (size_t)vl);
    w->kvlen[key] = (size_t)vl;
}

static void w_mget(worker *w)
{
    uint64_t ids[32];
    size_t idx[32], n = 1 + (size_t)rand_r(&w->seed) % 32;
    shard_item *items = NULL;
    for (size_t i = 0; i < n; i++) {
        idx[i] = (size_t)rand_r(&w->seed) % w->n;
        ids[i] = w->objs[idx[i]].id;
    }
    int rc = shard_object_mget(C, ids, n, &items);
    if (rc) {
        werr(w, "mget", rc);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *got = items[i].status ? NULL
                                      : json_loadb(items[i].data, items[i].len,
                                                   JSON_ALLOW_NUL, NULL);
        if (!got || !json_equal(got, w->objs[idx[i]].want))
            werr(w, "mget returned other data", items[i].status);
        json_decref(got);
    }
    shard_items_free(items, n);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    long k = 0;
    while (now_s() < g_deadline) {
        int op = w->n == 0 ? 0 : rand_r(&w->seed) % 7;
        k++;
        w->ops[op]++;
        switch (op) {
        case 0: w_create(w, k); break;
        case 1: w_patch(w, k); break;
        case 2: w_map(w, k); break;
        case 3: w_kv(w, k); break;
        case 4: w_mget(w); break;
        case 5: {
            int rc = shard_object_update(C, w->counter, cb_counter, NULL);
            if (rc)
                werr(w, "update counter", rc);
            else
                w->incs++;
            break;
        }
        default: {
            char patch[64];
            snprintf(patch, sizeof patch, "{\"t%d\":%ld}", w->t, k);
            int rc = shard_object_patch(C, w->shared, patch, strlen(patch), NULL, NULL);
            if (rc)
                werr(w, "patch shared", rc);
            else
                w->last_shared = k;
            break;
        }
        }
    }
    return NULL;
}

START_TEST(test_concurrency)
{
    static worker w[NTHREADS];
    pthread_t th[NTHREADS];
    uint64_t counter = create(BOARDS, 0, "{\"n\":0}");
    uint64_t shared = create(BOARDS, 15, "{}");

    memset(w, 0, sizeof w);
    for (int i = 0; i < NTHREADS; i++) {
        w[i].t = i;
        w[i].seed = 0x5eed + (unsigned)i;
        w[i].counter = counter;
        w[i].shared = shared;
        w[i].board = create(BOARDS, SHARD_ANY, "{\"worker\":true}");
    }
    g_deadline = now_s() + RUN_SECS;
    for (int i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);

    long total = 0, incs = 0;
    for (int i = 0; i < NTHREADS; i++) {
        ck_assert_msg(w[i].errors == 0, "%d errors; first: %s", w[i].errors, w[i].err);
        for (int k = 0; k < 7; k++)
            total += w[i].ops[k];
        incs += w[i].incs;
    }
    fprintf(stderr, "  (%d threads, one context: %ld operations in %.0fs)\n", NTHREADS, total,
            RUN_SECS);

    /* every write, read back through the API */
    for (int i = 0; i < NTHREADS; i++) {
        worker *x = &w[i];
        size_t nmapped = 0;
        for (size_t k = 0; k < x->n; k++) {
            char *j = get(x->objs[k].id);
            json_t *got = parse(j, strlen(j));
            ck_assert_msg(json_equal(got, x->objs[k].want), "object %llu: %s",
                          (unsigned long long)x->objs[k].id, j);
            json_decref(got);
            shard_free(j);
            if (x->objs[k].seq) {
                nmapped++;
                shard_edge *e = NULL;
                size_t n = 0;
                OK(shard_mapping_list(C, "pin_owned_by_board", x->objs[k].id,
                                      SHARD_SEQ_NONE, 0, &e, &n));
                ck_assert_uint_eq(n, 1);
                ck_assert_uint_eq(e[0].to, x->board);
                ck_assert_int_eq(e[0].seq, x->objs[k].seq);
                shard_free(e);
            }
        }
        /* the board lists exactly the mapped pins, newest first */
        shard_edge *e = NULL;
        size_t n = 0;
        OK(shard_mapping_list(C, "board_has_pins", x->board, SHARD_SEQ_NONE, 0, &e, &n));
        ck_assert_uint_eq(n, nmapped);
        ck_assert_uint_eq(count_of("board_has_pins", x->board), nmapped);
        for (size_t r = 0; r < n; r++) {
            if (r)
                ck_assert(e[r - 1].seq > e[r].seq);
            size_t k = 0;
            while (k < x->n && x->objs[k].id != e[r].to)
                k++;
            ck_assert_msg(k < x->n && x->objs[k].seq == e[r].seq,
                          "board %llu lists %llu seq %lld", (unsigned long long)x->board,
                          (unsigned long long)e[r].to, (long long)e[r].seq);
        }
        shard_free(e);
        for (int key = 0; key < KV_KEYS; key++) {
            char name[32];
            size_t kl = kv_name(name, sizeof name, x->t, key);
            if (x->kvlen[key])
                kv_assert("users_by_email", name, kl, x->kv[key], x->kvlen[key]);
            else
                FAILS(SHARD_ENOTFOUND, kv_get_rc("users_by_email", name, kl));
        }
    }
    /* no lost update on the shared objects */
    json_t *o = NULL;
    OK(shard_object_get_json(C, counter, &o));
    ck_assert_int_eq(json_integer_value(json_object_get(o, "n")), incs);
    json_decref(o);
    OK(shard_object_get_json(C, shared, &o));
    for (int i = 0; i < NTHREADS; i++) {
        char key[16];
        snprintf(key, sizeof key, "t%d", i);
        json_t *v = json_object_get(o, key);
        if (w[i].last_shared)
            ck_assert_int_eq(json_integer_value(v), w[i].last_shared);
        else
            ck_assert_ptr_null(v);
    }
    json_decref(o);
    for (int i = 0; i < NTHREADS; i++) {
        for (size_t k = 0; k < w[i].n; k++)
            json_decref(w[i].objs[k].want);
        free(w[i].objs);
    }
}
END_TEST

/* ------------------------------------------------------------ faults */

/* Phases of the fault test; a call counts for a phase only when it both
 * started and ended in it. */
enum { UP, KILLING, DEAD, RESTARTING, BACK, STOP, NPHASES };

typedef struct pounder {
    unsigned shard;
    uint64_t id;
    const char *want;
    atomic_int *phase;
    long ok[NPHASES], fail[NPHASES];
    int first_rc[NPHASES];
    char first_err[NPHASES][600];
} pounder;

static void *pound(void *arg)
{
    pounder *p = arg;
    for (long i = 0;; i++) {
        int ph = atomic_load(p->phase);
        if (ph == STOP)
            break;
        char *j = NULL;
        size_t len;
        uint64_t id = 0;
        int rc = (i % 2) ? shard_object_get(C, p->id, &j, &len)
                         : shard_object_create(C, PINS, p->shard, LIT("{\"pound\":1}"), &id);
        if (rc == 0 && j && strcmp(j, p->want) != 0)
            rc = -1000;
        shard_free(j);
        if (atomic_load(p->phase) != ph) /* straddles a change: no verdict */
            continue;
        if (rc == 0) {
            p->ok[ph]++;
        } else if (!p->fail[ph]++) {
            p->first_rc[ph] = rc;
            snprintf(p->first_err[ph], sizeof p->first_err[ph], "%s", shard_errmsg());
        }
        nap_ms(5);
    }
    return NULL;
}

/* A key of table users_by_name whose mod shard is on pair `pair`. */
static void key_on_pair(int pair, char *key, size_t size)
{
    for (int i = 0;; i++) {
        uint32_t ms;
        snprintf(key, size, "key%d", i);
        OK(shard_mod(key, strlen(key), NMOD, &ms));
        if (strcmp(master_of_mod(ms), server_name(2 * pair - 1)) == 0)
            return;
    }
}

static void assert_names_s1(const char *msg)
{
    char port[32];
    snprintf(port, sizeof port, "127.0.0.1:%d", harness_port(H, "s1"));
    ck_assert_msg(strstr(msg, "MySQL001") || strstr(msg, port),
                  "message names neither the pair nor the server: %s", msg);
}

START_TEST(test_master_killed)
{
    uint64_t a = create(PINS, 1, "{\"k\":\"a\"}"), b = create(PINS, 9, "{\"k\":\"b\"}");
    uint64_t a2 = create(BOARDS, 6, "{\"k\":\"a2\"}"), b2 = create(BOARDS, 14, "{\"k\":\"b2\"}");
    uint64_t board2 = create(BOARDS, 10, "{}");
    char k1[32], k2[32];
    key_on_pair(1, k1, sizeof k1);
    key_on_pair(2, k2, sizeof k2);
    OK(shard_kv_put(C, "users_by_name", k1, strlen(k1), "one", 3));

    atomic_int phase = UP;
    pounder p1 = {.shard = 1, .id = a, .want = "{\"k\":\"a\"}", .phase = &phase};
    pounder p2 = {.shard = 9, .id = b, .want = "{\"k\":\"b\"}", .phase = &phase};
    pthread_t t1, t2;
    ck_assert_int_eq(pthread_create(&t1, NULL, pound, &p1), 0);
    ck_assert_int_eq(pthread_create(&t2, NULL, pound, &p2), 0);
    nap_ms(300);

    atomic_store(&phase, KILLING);
    ck_assert_int_eq(harness_kill(H, "s1"), 0);
    atomic_store(&phase, DEAD);
    double t0 = now_s();
    int rc;

    /* pair 1 fails, clearly */
    char *j = NULL;
    size_t len;
    rc = shard_object_get(C, a, &j, &len);
    ck_assert_msg(DOWN(rc), "get on a dead master: %d %s", rc, shard_errmsg());
    assert_names_s1(shard_errmsg());
    uint64_t id = 0;
    rc = shard_object_create(C, PINS, 1, "{}", 2, &id);
    ck_assert_msg(DOWN(rc), "create on a dead master: %d %s", rc, shard_errmsg());
    assert_names_s1(shard_errmsg());
    rc = shard_object_patch(C, a2, "{\"x\":1}", 7, NULL, NULL);
    ck_assert_msg(DOWN(rc), "patch on a dead master: %d %s", rc, shard_errmsg());
    rc = shard_kv_put(C, "users_by_name", k1, strlen(k1), "two", 3);
    ck_assert_msg(DOWN(rc), "kv on a dead master: %d %s", rc, shard_errmsg());
    assert_names_s1(shard_errmsg());
    shard_txn *t = NULL;
    rc = shard_txn_begin(C, 1, &t);
    ck_assert_msg(DOWN(rc), "txn on a dead master: %d %s", rc, shard_errmsg());
    assert_names_s1(shard_errmsg());
    uint64_t cnt;
    rc = shard_scatter_count(C, PINS, &cnt);
    ck_assert_msg(DOWN(rc), "scatter count with a dead master: %d %s", rc, shard_errmsg());
    /* the reverse row's shard is down: the call fails and says which part */
    rc = shard_mapping_add(C, "board_has_pins", board2, a, 5);
    ck_assert_msg(DOWN(rc), "mapping add with a dead reverse side: %d %s", rc, shard_errmsg());
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "pin_owned_by_board"));

    /* pair 2 works */
    assert_get_is(b, "{\"k\":\"b\"}");
    uint64_t nb = create(PINS, 12, "{\"while\":\"down\"}");
    OK(shard_kv_put(C, "users_by_name", k2, strlen(k2), "two", 3));
    kv_assert("users_by_name", k2, strlen(k2), "two", 3);
    OK(shard_txn_begin(C, 9, &t));
    OK(shard_txn_commit(t));

    /* multi-get across both pairs: per-item errors for pair 1 only */
    const uint64_t ids[] = {a, b, a2, b2, a, nb};
    shard_item *items = NULL;
    FAILS(SHARD_EPARTIAL, shard_object_mget(C, ids, 6, &items));
    assert_names_s1(shard_errmsg());
    ck_assert_msg(DOWN(items[0].status), "status %d", items[0].status);
    ck_assert_msg(DOWN(items[2].status), "status %d", items[2].status);
    ck_assert_msg(DOWN(items[4].status), "status %d", items[4].status);
    ck_assert_ptr_null(items[0].data);
    ck_assert_int_eq(items[1].status, 0);
    ck_assert_str_eq(items[1].data, "{\"k\":\"b\"}");
    ck_assert_str_eq(items[3].data, "{\"k\":\"b2\"}");
    ck_assert_str_eq(items[5].data, "{\"while\":\"down\"}");
    shard_items_free(items, 6);
    fprintf(stderr, "  (calls with s1 dead took %.2fs)\n", now_s() - t0);

    /* back: the same context recovers */
    t0 = now_s();
    atomic_store(&phase, RESTARTING);
    ck_assert_int_eq(harness_restart(H, "s1"), 0);
    atomic_store(&phase, BACK);
    fprintf(stderr, "  (s1 restarted in %.2fs)\n", now_s() - t0);
    assert_get_is(a, "{\"k\":\"a\"}");
    uint64_t na = create(PINS, 1, "{\"after\":\"restart\"}");
    assert_get_is(na, "{\"after\":\"restart\"}");
    OK(shard_object_patch(C, a2, "{\"x\":1}", 7, NULL, NULL));
    assert_get_is(a2, "{\"k\":\"a2\",\"x\":1}");
    kv_assert("users_by_name", k1, strlen(k1), "one", 3);
    OK(shard_mapping_add(C, "board_has_pins", board2, a, 5)); /* repeat the failed call */
    ck_assert_int_eq(row_seq("board_has_pins", 10, board2, a), 5);
    ck_assert_int_eq(row_seq("pin_owned_by_board", 1, a, board2), 5);
    items = NULL;
    OK(shard_object_mget(C, ids, 6, &items));
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(items[i].status, 0);
    ck_assert_str_eq(items[2].data, "{\"k\":\"a2\",\"x\":1}");
    shard_items_free(items, 6);
    OK(shard_txn_begin(C, 1, &t));
    OK(shard_txn_object_create(t, PINS, "{}", 2, &id));
    OK(shard_txn_commit(t));
    assert_get_is(id, "{}");
    nap_ms(200);
    atomic_store(&phase, STOP);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);

    fprintf(stderr, "  (pounders ok/fail, pair 1: up %ld/%ld, dead %ld/%ld, back %ld/%ld; "
                    "pair 2: up %ld/%ld, dead %ld/%ld, back %ld/%ld)\n",
            p1.ok[UP], p1.fail[UP], p1.ok[DEAD], p1.fail[DEAD], p1.ok[BACK], p1.fail[BACK],
            p2.ok[UP], p2.fail[UP], p2.ok[DEAD], p2.fail[DEAD], p2.ok[BACK], p2.fail[BACK]);
    ck_assert_msg(p1.ok[UP] > 0 && p1.fail[UP] == 0, "pair 1 before the kill: %d %s",
                  p1.first_rc[UP], p1.first_err[UP]);
    ck_assert_msg(p1.fail[DEAD] > 0 && p1.ok[DEAD] == 0, "pair 1 while dead: %ld ok",
                  p1.ok[DEAD]);
    ck_assert_msg(DOWN(p1.first_rc[DEAD]), "pair 1 while dead: %d %s", p1.first_rc[DEAD],
                  p1.first_err[DEAD]);
    assert_names_s1(p1.first_err[DEAD]);
    ck_assert_msg(p1.ok[BACK] > 0 && p1.fail[BACK] == 0, "pair 1 after the restart: %d %s",
                  p1.first_rc[BACK], p1.first_err[BACK]);
    for (int ph = 0; ph < STOP; ph++)
        ck_assert_msg(p2.fail[ph] == 0, "pair 2 in phase %d: %d %s", ph, p2.first_rc[ph],
                      p2.first_err[ph]);
    ck_assert(p2.ok[UP] > 0 && p2.ok[DEAD] > 0 && p2.ok[BACK] > 0);
}
END_TEST

/* ------------------------------------------------------------ standbys */

START_TEST(test_standbys_hold_every_write)
{
    /* a restarted master (previous test) must be back first */
    if (harness_sql(H, "s1", "SELECT 1", NULL) != 0)
        ck_assert_int_eq(harness_restart(H, "s1"), 0);
    long long rows = 0;
    for (int p = 1; p <= NPAIRS; p++) {
        char *m = NULL, *s = NULL;
        double t0 = now_s();
        for (;;) {
            free(m);
            free(s);
            m = pair_checksum(p, 2 * p - 1);
            s = pair_checksum(p, 2 * p);
            if (strcmp(m, s) == 0 || now_s() - t0 > WAIT_SECS)
                break;
            nap_ms(200);
        }
        ck_assert_msg(strcmp(m, s) == 0,
                      "pair %d: standby %s differs from master %s after %.0fs:\n%s\n--\n%s", p,
                      server_name(2 * p), server_name(2 * p - 1), WAIT_SECS, m, s);
        ck_assert_msg(!strstr(m, "NULL"), "pair %d: a shard table is missing:\n%s", p, m);
        fprintf(stderr, "  (pair %d: standby matched after %.2fs)\n", p, now_s() - t0);
        free(m);
        free(s);
    }
    /* the comparison covered real data */
    rows += sql_num("s2", "SELECT COUNT(*) FROM db00002.pins");
    rows += sql_num("s4", "SELECT COUNT(*) FROM db00010.boards");
    ck_assert_int_ge(rows, 2 * BULK);
    /* and a new write still reaches both standbys */
    uint64_t x = create(PINS, 0, "{\"last\":1}"), y = create(PINS, 8, "{\"last\":2}");
    double t0 = now_s();
    long long got = 0;
    while (now_s() - t0 < WAIT_SECS) {
        got = sql_num("s2", "SELECT COUNT(*) FROM db00000.pins WHERE local_id = %llu",
                      (unsigned long long)shard_id_local(x)) +
              sql_num("s4", "SELECT COUNT(*) FROM db00008.pins WHERE local_id = %llu",
                      (unsigned long long)shard_id_local(y));
        if (got == 2)
            break;
        nap_ms(100);
    }
    ck_assert_int_eq(got, 2);
}
END_TEST


/* ------------------------------------------------------------ data-safety defects */

/* Soft deletion is read from the parsed JSON: a key spelt with escapes is
 * the same key. */
START_TEST(test_soft_delete_parsed)
{
    uint64_t id = create(PINS, 6, "{\"\\u0061ctive\":false,\"n\":1}");
    uint64_t live = create(PINS, 6, "{\"s\":\"\\\"active\\\":false\",\"active\":true}");
    shard_item *items = NULL;
    uint64_t both[2] = {id, live};

    ck_assert_int_eq(rows_of(id), 1);
    FAILS(SHARD_ENOTFOUND, get_rc(id));
    OK(shard_object_mget(C, both, 2, &items));
    ck_assert_int_eq(items[0].status, SHARD_ENOTFOUND);
    ck_assert_int_eq(items[1].status, 0);
    shard_items_free(items, 2);
    FAILS(SHARD_ENOTFOUND, shard_object_patch(C, id, "{\"m\":2}", 7, NULL, NULL));
    FAILS(SHARD_ENOTFOUND, shard_object_delete(C, id, 0));
    assert_get_is(live, "{\"s\":\"\\\"active\\\":false\",\"active\":true}");
}
END_TEST

/* A patch that is not an object is refused, naming what it is. */
START_TEST(test_patch_not_object)
{
    uint64_t id = create(PINS, 6, "{\"keep\":1}");
    static const char *const bad[][2] = {{"null", "null"}, {"[1]", "an array"},
                                         {"\"s\"", "a string"}, {"3", "a number"},
                                         {"true", "true"}};

    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FAILS(SHARD_EINVAL, shard_object_patch(C, id, bad[i][0], strlen(bad[i][0]), NULL,
                                               NULL));
        ck_assert_msg(strstr(shard_errmsg(), "a patch must be a JSON object") &&
                          strstr(shard_errmsg(), bad[i][1]),
                      "patch %s: %s", bad[i][0], shard_errmsg());
    }
    assert_get_is(id, "{\"keep\":1}");
}
END_TEST

typedef struct killer {
    const char *server;
    int calls;
} killer;

/* Kills every application connection on the master, then aborts: the
 * ROLLBACK that follows fails. */
static int cb_kill_abort(json_t *obj, void *payload)
{
    killer *k = payload;
    char *ids;

    (void)obj;
    k->calls++;
    ids = sql_on(k->server, "SELECT GROUP_CONCAT(CONCAT('KILL ', id) SEPARATOR '; ') FROM "
                            "information_schema.PROCESSLIST WHERE user = 'shard'");
    if (ids[0] && strcmp(ids, "NULL") != 0)
        free(sql_on(k->server, "%s", ids));
    free(ids);
    return 42;
}

/* An update whose callback aborted is not run again when its ROLLBACK fails. */
START_TEST(test_rmw_rollback_fails)
{
    uint64_t id = create(PINS, 3, "{\"n\":1}");
    killer k = {master_of(3), 0};

    FAILS(42, shard_object_update(C, id, cb_kill_abort, &k));
    ck_assert_int_eq(k.calls, 1);
    assert_get_is(id, "{\"n\":1}");
}
END_TEST

/* Values travel as binary parameters: a value larger than half the server's
 * max_allowed_packet (what hex text allowed) is written and read back. */
START_TEST(test_large_values)
{
    size_t n = 12u << 20;
    char *big = malloc(n + 32), *got = NULL;
    size_t o, glen = 0;
    uint64_t id;

    ck_assert_ptr_nonnull(big);
    o = (size_t)sprintf(big, "{\"v\":\"");
    for (size_t i = 0; i < n; i++)
        big[o++] = (char)('a' + i % 26);
    strcpy(big + o, "\"}");
    o += 2;
    /* 16 MB: the 12 MB value fits, its 24 MB of hex would not. New
     * connections (a new context) see the new limit. */
    for (int k = 1; k <= 2 * NPAIRS; k += 2)
        free(sql_on(server_name(k), "SET GLOBAL max_allowed_packet = 16777216"));
    shard_ctx_free(C);
    C = open_ctx();
    id = 0;
    int rc = shard_object_create(C, PINS, 9, big, o, &id);
    int krc = rc ? rc : shard_kv_put(C, "users_by_name", "big", 3, big, o);
    if (krc == 0)
        krc = shard_kv_get(C, "users_by_name", "big", 3, &got, &glen);
    for (int k = 1; k <= 2 * NPAIRS; k += 2)
        free(sql_on(server_name(k), "SET GLOBAL max_allowed_packet = 67108864"));
    ck_assert_msg(rc == 0, "create of %zu bytes: %s", o, shard_errmsg());
    ck_assert_msg(krc == 0, "kv of %zu bytes: %s", o, shard_errmsg());
    ck_assert_uint_eq(glen, o);
    ck_assert(memcmp(got, big, o) == 0);
    shard_free(got);
    got = get(id);
    ck_assert(strcmp(got, big) == 0);
    shard_free(got);
    free(big);
}
END_TEST

/* mapping add checks both IDs' shards before writing anything. */
START_TEST(test_mapping_add_validates_first)
{
    uint64_t board = create(BOARDS, 2, "{}");
    uint64_t far = make_id(100, PINS, 1);
    char db[64];

    db_of(2, db, sizeof db);
    FAILS(SHARD_ENOSHARD, shard_mapping_add(C, "board_has_pins", board, far, 5));
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "100"));
    FAILS(SHARD_ENOSHARD, shard_mapping_add(C, "board_has_pins", far, board, 5));
    FAILS(SHARD_ENOSHARD, shard_mapping_add(C, "user_likes_pins", board, far, 5));
    ck_assert_int_eq(sql_num(master_of(2), "SELECT COUNT(*) FROM `%s`.board_has_pins "
                                           "WHERE from_id = %llu", db,
                             (unsigned long long)board), 0);
}
END_TEST


/* ------------------------------------------------------------ the fence */

static shard_ctx *open_ctx_budget(const char *location, unsigned budget_ms)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    o.connect_timeout_ms = 2000;
    o.retry_budget_ms = budget_ms;
    o.retry_max = 1000;
    OK(shard_ctx_open(&ctx, location, &o));
    return ctx;
}

static int count_scanned(uint64_t id, const char *json, size_t len, void *payload)
{
    (void)id;
    (void)json;
    (void)len;
    ++*(size_t *)payload;
    return 0;
}

/*
 * A fence row set by hand (as a move sets it): every read and write of the
 * shard answers SHARD_EMOVED, other shards are untouched; a write in flight
 * holds the fence UPDATE back until it commits; and a call waiting on the
 * fence succeeds where a newly published map routes the shard.
 */
START_TEST(test_fence)
{
    const unsigned F = 7; /* the last shard of MySQL001 */
    uint64_t id = create(PINS, F, "{\"f\":1}");
    uint64_t other = create(PINS, 6, "{\"o\":1}");
    char db[64];
    db_of(F, db, sizeof db);
    OK(shard_mapping_add(C, "board_has_pins", id, other, 3)); /* a list that is not empty */

    /* A write in flight (a transaction holding the fence row's shared
     * lock) makes the fencing UPDATE wait; once it commits, the UPDATE
     * goes through. */
    fence_set(H, M, "s1", F, 0);
    shard_txn *t = NULL;
    uint64_t tid = 0;
    OK(shard_txn_begin(C, F, &t));
    OK(shard_txn_object_create(t, PINS, LIT("{\"in\":\"flight\"}"), &tid));
    char *q = fmt("SET SESSION sql_log_bin = 0; SET SESSION innodb_lock_wait_timeout = 1; "
                  "SET SESSION lock_wait_timeout = 1; UPDATE libshard_control.fence SET "
                  "fenced = 1 WHERE db = '%s'", db);
    char *out = NULL;
    ck_assert_msg(harness_sql(H, "s1", q, &out) != 0, "the fence UPDATE did not wait for "
                  "a write in flight");
    free(out);
    OK(shard_txn_commit(t));
    ck_assert_int_eq(harness_sql(H, "s1", q, &out), 0);
    free(out);
    free(q);
    ck_assert_int_eq(rows_of(tid), 1); /* committed before the fence */

    /* Fenced: every call on the shard, reads and writes, is SHARD_EMOVED
     * once its (short) retry budget is spent; the shard's rows stay. */
    shard_ctx *c2 = open_ctx_budget(harness_map_path(H), 300);
    char *json = NULL;
    uint64_t nid = 0;
    FAILS(SHARD_EMOVED, shard_object_get(c2, id, &json, NULL));
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "fenced"));
    FAILS(SHARD_EMOVED, shard_object_create(c2, PINS, F, LIT("{}"), &nid));
    FAILS(SHARD_EMOVED, shard_object_patch(c2, id, LIT("{\"g\":2}"), NULL, NULL));
    FAILS(SHARD_EMOVED, shard_object_delete(c2, id, SHARD_DELETE_HARD));
    FAILS(SHARD_EMOVED, shard_mapping_add(c2, "board_has_pins", id, other, 1));
    FAILS(SHARD_EMOVED, shard_mapping_remove(c2, "board_has_pins", id, other));
    shard_edge *edges = NULL;
    size_t n = 0;
    uint64_t count = 0;
    FAILS(SHARD_EMOVED, shard_mapping_list(c2, "board_has_pins", id, SHARD_SEQ_NONE, 0,
                                           &edges, &n));
    FAILS(SHARD_EMOVED, shard_mapping_list(c2, "board_has_pins", tid, SHARD_SEQ_NONE, 0,
                                           &edges, &n)); /* an empty one */
    ck_assert_ptr_null(edges);
    size_t seen = 0;
    FAILS(SHARD_EMOVED, shard_scatter_scan(c2, PINS, count_scanned, &seen));
    FAILS(SHARD_EMOVED, shard_mapping_count(c2, "board_has_pins", id, &count));
    t = NULL;
    FAILS(SHARD_EMOVED, shard_txn_begin(c2, F, &t));
    ck_assert_ptr_null(t);
    FAILS(SHARD_EMOVED, shard_scatter_count(c2, PINS, &count));
    uint64_t both[2] = {other, id};
    shard_item *items = NULL;
    FAILS(SHARD_EPARTIAL, shard_object_mget(c2, both, 2, &items));
    ck_assert_int_eq(items[0].status, 0);
    ck_assert_int_eq(items[1].status, SHARD_EMOVED);
    ck_assert_ptr_null(items[1].data);
    shard_items_free(items, 2);
    assert_get_is(other, "{\"o\":1}");
    ck_assert_int_eq(rows_of(id), 1);

    /* A call waiting on the fence succeeds where the newly published map
     * routes the shard (MySQL002, which gets the shard's tables first). */
    uint64_t v = shard_map_version(M);
    char *moved = map_routing(M, NSHARDS, F, "MySQL002", v + 1);
    char *path = map_schema_apply(H, moved);
    shard_ctx *c3 = open_ctx_budget(harness_map_path(H), 60000);
    waiter w = {.ctx = c3, .shard = F};
    atomic_init(&w.started, 0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, create_waiting, &w), 0);
    while (!atomic_load(&w.started))
        nap_ms(1);
    nap_ms(200); /* let it meet the fence: not an assertion, it may be later */
    map_publish(H, moved);
    pthread_join(th, NULL);
    ck_assert_msg(w.rc == 0, "the waiting create: %s", shard_strerror(w.rc));
    fprintf(stderr, "  (a create waited %.0f ms on the fence, then ran on MySQL002)\n",
            w.took * 1000);
    ck_assert_int_eq(sql_num("s3", "SELECT COUNT(*) FROM `%s`.pins WHERE local_id = %llu",
                             db, (unsigned long long)shard_id_local(w.id)), 1);
    ck_assert_int_eq(sql_num("s1", "SELECT COUNT(*) FROM `%s`.pins WHERE data = "
                                   "'{\"waited\":1}'", db), 0);
    shard_ctx_free(c3);
    shard_ctx_free(c2);

    /* Put everything back: the shard on MySQL001, unfenced, and no copy of
     * its database on MySQL002. */
    route_back(H, M, NSHARDS, F, v + 2, db);
    free(moved);
    unlink(path);
    free(path);
    shard_ctx_free(C);
    C = open_ctx();
    assert_get_is(id, "{\"f\":1}");
}
END_TEST

/* Without the fence table, a clear error naming the command that makes it. */
START_TEST(test_fence_table_missing)
{
    uint64_t id = create(PINS, 12, "{\"m\":1}");
    /* Gone from the master and its standby (each has its own). */
    free(sql_on("s3", "SET SESSION sql_log_bin = 0; DROP TABLE libshard_control.fence"));
    free(sql_on("s4", "SET SESSION sql_log_bin = 0; DROP TABLE libshard_control.fence"));
    int rc = get_rc(id);
    char *msg = strdup(shard_errmsg());
    uint64_t nid = 0;
    int wrc = shard_object_create(C, PINS, 12, LIT("{}"), &nid);
    char *wmsg = strdup(shard_errmsg());
    OK(harness_schema_apply(H));
    /* schema apply makes it again, on the standby too. */
    for (int k = 3; k <= 4; k++)
        ck_assert_int_eq(sql_num(server_name(k), "SELECT COUNT(*) FROM information_schema."
                                 "TABLES WHERE TABLE_SCHEMA = 'libshard_control' AND "
                                 "TABLE_NAME = 'fence'"), 1);
    ck_assert_int_eq(rc, SHARD_ESERVER);
    ck_assert_msg(strstr(msg, "libshard_control.fence") && strstr(msg, "schema apply"),
                  "message: %s", msg);
    ck_assert_int_eq(wrc, SHARD_ESERVER);
    ck_assert_msg(strstr(wmsg, "schema apply"), "message: %s", wmsg);
    free(msg);
    free(wmsg);
    assert_get_is(id, "{\"m\":1}");
}
END_TEST

/* A server that answers with a request for a local file gets none: a
 * connection of the pool runs LOAD DATA LOCAL of a readable client file,
 * and nothing of it reaches the table. */
START_TEST(test_no_local_file_sent)
{
    shard_map *map = NULL;
    shard_server *srv;
    shard_conn *c = NULL;
    int rc;

    free(sql_on("s3", "CREATE TABLE IF NOT EXISTS db00012.li (t LONGTEXT)"));
    OK(shard_ctx_map(C, &map));
    srv = ctx_server(C, map, (size_t)shard__map_pair_index(map, 12));
    ck_assert_ptr_nonnull(srv);
    OK(conn_get(C, srv, &c));
    rc = conn_query_str(c, "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE db00012.li");
    conn_put(c, false);
    shard_map_free(map);
    ck_assert_int_ne(rc, 0);
    ck_assert_int_eq(sql_num("s3", "SELECT COUNT(*) FROM db00012.li"), 0);
    free(sql_on("s3", "DROP TABLE db00012.li"));
}
END_TEST

/* ------------------------------------------------------------ main */

static Suite *data_suite(void)
{
    Suite *s = suite_create("server_data");
    TCase *tc = tcase_create("data");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_tests(tc, TESTS(test_object_create_get, test_object_patch, test_object_update,
                              test_object_delete, test_mget, test_mget_large, test_mapping,
                              test_mapping_list_index_only, test_kv, test_txn, test_scatter,
                              test_hostile_json, test_hostile_big, test_hostile_names,
                              test_concurrency, test_master_killed, test_soft_delete_parsed,
                              test_patch_not_object, test_rmw_rollback_fails, test_large_values,
                              test_mapping_add_validates_first, test_fence,
                              test_fence_table_missing, test_no_local_file_sent,
                              test_standbys_hold_every_write));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return server_test_main("server_data", &H, NPAIRS, NSHARDS, NMOD, 1, data_suite);
}
