/*
 * tests/data_util.h: what the data-layer test programs share (server_objects,
 * server_mappings, server_kv_txn, server_data_faults): the fleet each starts
 * (two master-master pairs, 16 ID shards, 8 mod shards, the schema applied),
 * the context every test opens, helpers that check what the library says
 * against what the servers hold (harness_sql), so a test fails when either
 * is wrong, and the test that ends every such program: both standbys hold
 * every write its tests made. Every function is static (each test program
 * is built on its own from its one .c file).
 *
 * Check forks every test: each test opens its own context (setup), and the
 * servers' contents carry over from test to test of a program.
 */
#ifndef LIBSHARD_TESTS_DATA_UTIL_H
#define LIBSHARD_TESTS_DATA_UTIL_H

#include <check.h>
#include <jansson.h> /* before libshard.h: declares the jansson calls */
#include <libshard.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "harness.h"

#define NPAIRS 2
#define NSHARDS 16
#define NMOD 8
#define PINS 1
#define BOARDS 2
#define USERS 3
#define WAIT_SECS 30.0
#define BULK 1200 /* rows per pair: more than one 1000-ID statement each */

static harness *H;
static shard_ctx *C; /* this test's context */
static shard_map *M; /* its map */

/* ------------------------------------------------------------ helpers */


/* Run SQL as root on a server; its batch output without its trailing
 * newlines (caller frees). */
#define sql_on(server, ...) chomp(sql_okf(H, server, __VA_ARGS__))

CHECK_UTIL long long sql_num(const char *server, const char *f, ...)
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

CHECK_UTIL const char *server_name(int k)
{
    static const char *const names[] = {"", "s1", "s2", "s3", "s4"};
    ck_assert(k >= 1 && k <= 2 * NPAIRS);
    return names[k];
}

/* "MySQL002" -> 2 */
CHECK_UTIL int pair_number(const char *pair)
{
    ck_assert(strncmp(pair, "MySQL", 5) == 0);
    return atoi(pair + 5);
}

CHECK_UTIL const char *master_of(unsigned shard)
{
    const char *p = NULL;
    OK(shard_map_pair_of(M, shard, &p));
    return server_name(2 * pair_number(p) - 1);
}

CHECK_UTIL const char *master_of_mod(uint32_t ms)
{
    const char *p = NULL;
    OK(shard_map_mod_pair_of(M, ms, &p));
    return server_name(2 * pair_number(p) - 1);
}

CHECK_UTIL void db_of(unsigned shard, char *buf, size_t size)
{
    OK(shard_map_database(M, shard, buf, size));
}

CHECK_UTIL const char *table_of(uint64_t id)
{
    const char *t = NULL;
    OK(shard_map_type_name(M, shard_id_type(id), &t));
    return t;
}

CHECK_UTIL char *hex(const void *data, size_t len)
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

CHECK_UTIL uint64_t make_id(unsigned shard, unsigned type, uint64_t local)
{
    uint64_t id = 0;
    OK(shard_id_make(shard, type, local, &id));
    return id;
}

CHECK_UTIL uint64_t create(unsigned type, unsigned shard, const char *json)
{
    uint64_t id = 0;
    int rc = shard_object_create(C, type, shard, json, strlen(json), &id);
    ck_assert_msg(rc == 0, "create type %u on shard %u: %d (%s): %s", type, shard, rc,
                  shard_strerror(rc), shard_errmsg());
    return id;
}

/* The object's text through the API (caller frees with shard_free). */
CHECK_UTIL char *get(uint64_t id)
{
    char *json = NULL;
    size_t len = 0;
    int rc = shard_object_get(C, id, &json, &len);
    ck_assert_msg(rc == 0, "get %llu: %d (%s): %s", (unsigned long long)id, rc,
                  shard_strerror(rc), shard_errmsg());
    ck_assert_uint_eq(len, strlen(json));
    return json;
}

CHECK_UTIL void assert_get_is(uint64_t id, const char *want)
{
    char *got = get(id);
    ck_assert_str_eq(got, want);
    shard_free(got);
}

CHECK_UTIL int get_rc(uint64_t id)
{
    char *json = NULL;
    size_t len;
    int rc = shard_object_get(C, id, &json, &len);
    shard_free(json);
    return rc;
}

/* How many rows the object's table holds for id, on its pair's master. */
CHECK_UTIL long long rows_of(uint64_t id)
{
    char db[64];
    db_of(shard_id_shard(id), db, sizeof db);
    return sql_num(master_of(shard_id_shard(id)),
                   "SELECT COUNT(*) FROM `%s`.`%s` WHERE local_id = %llu", db,
                   table_of(id), (unsigned long long)shard_id_local(id));
}

/* HEX(data) of the object's row on its master ("" when there is none). */
CHECK_UTIL char *stored_hex(uint64_t id)
{
    char db[64];
    db_of(shard_id_shard(id), db, sizeof db);
    return sql_on(master_of(shard_id_shard(id)),
                  "SELECT HEX(data) FROM `%s`.`%s` WHERE local_id = %llu", db,
                  table_of(id), (unsigned long long)shard_id_local(id));
}

CHECK_UTIL void assert_stored_is(uint64_t id, const char *json, size_t len)
{
    char *want = hex(json, len), *got = stored_hex(id);
    ck_assert_msg(strcmp(want, got) == 0, "row of %llu holds %.200s, want %.200s",
                  (unsigned long long)id, got, want);
    free(want);
    free(got);
}

CHECK_UTIL json_t *parse(const char *text, size_t len)
{
    json_error_t e;
    json_t *v = json_loadb(text, len, JSON_ALLOW_NUL, &e);
    ck_assert_msg(v != NULL, "not JSON (%s): %.200s", e.text, text);
    return v;
}

CHECK_UTIL void assert_json_eq(const char *got, const char *want)
{
    json_t *g = parse(got, strlen(got)), *w = parse(want, strlen(want));
    ck_assert_msg(json_equal(g, w), "got %.300s, want %.300s", got, want);
    json_decref(g);
    json_decref(w);
}

/* RFC 7386, written independently of lib/patch.c. New reference. */
CHECK_UTIL json_t *merge(json_t *target, json_t *patch)
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
CHECK_UTIL char *pair_checksum_sql(int pair)
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

CHECK_UTIL char *pair_checksum(int pair, int k)
{
    char *q = pair_checksum_sql(pair);
    char *out = sql_on(server_name(k), "%s", q);
    free(q);
    return out;
}

/* Both masters' checksums, to prove a set of calls changed nothing. */
CHECK_UTIL void snapshot(char *out[NPAIRS])
{
    for (int p = 1; p <= NPAIRS; p++)
        out[p - 1] = pair_checksum(p, 2 * p - 1);
}

CHECK_UTIL void assert_unchanged(char *before[NPAIRS], const char *what)
{
    for (int p = 1; p <= NPAIRS; p++) {
        char *now = pair_checksum(p, 2 * p - 1);
        ck_assert_msg(strcmp(before[p - 1], now) == 0, "%s changed tables on pair %d",
                      what, p);
        free(now);
        free(before[p - 1]);
    }
}

/* ------------------------------------------------------------ key-value */

CHECK_UTIL void kv_assert(const char *table, const void *key, size_t klen, const void *val,
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

CHECK_UTIL int kv_get_rc(const char *table, const void *key, size_t klen)
{
    char *v = NULL;
    size_t n;
    int rc = shard_kv_get(C, table, key, klen, &v, &n);
    shard_free(v);
    return rc;
}


/* ------------------------------------------------------------ mappings */

CHECK_UTIL uint64_t count_of(const char *name, uint64_t from)
{
    uint64_t c = 12345;
    OK(shard_mapping_count(C, name, from, &c));
    return c;
}

/* The sequence of row (from, to) of mapping table `table`, read on the
 * master of `shard`'s database; -1 when absent. */
CHECK_UTIL long long row_seq(const char *table, unsigned shard, uint64_t from, uint64_t to)
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

/* ------------------------------------------------------------ fixture */

CHECK_UTIL shard_ctx *open_ctx(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    o.connect_timeout_ms = 2000;
    o.retry_budget_ms = 2000;
    OK(shard_ctx_open(&ctx, harness_map_path(H), &o));
    return ctx;
}

CHECK_UTIL void setup(void)
{
    C = open_ctx();
    OK(shard_ctx_map(C, &M));
}

CHECK_UTIL void teardown(void)
{
    shard_map_free(M);
    shard_ctx_free(C);
    M = NULL;
    C = NULL;
}

/* BULK rows written straight into shard 2's pins (pair 1) and shard 10's
 * boards (pair 2), local IDs 500001 .. 500000 + BULK, data
 * {"p":<pair>,"n":<i>}. Once is enough: again writes nothing. */
CHECK_UTIL void bulk_rows(void)
{
    free(sql_on("s1", "INSERT IGNORE INTO db00002.pins (local_id, data) SELECT 500000 + seq, "
                      "CONCAT('{\"p\":1,\"n\":', seq, '}') FROM db00002.seq_1_to_%d", BULK));
    free(sql_on("s3", "INSERT IGNORE INTO db00010.boards (local_id, data) SELECT 500000 + seq, "
                      "CONCAT('{\"p\":2,\"n\":', seq, '}') FROM db00010.seq_1_to_%d", BULK));
}

/* ------------------------------------------------------------ standbys */

/* The last case of every data program: whatever its tests wrote (and the
 * bulk rows, its fixture) reached both standbys. */
START_TEST(test_standbys_hold_every_write)
{
    /* a master an earlier test killed must be back first */
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
    /* the comparison covered real data (at least the bulk rows) */
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

/* ------------------------------------------------------------ main */

static const char *data_name;
static const TTest *const *data_tests;

CHECK_UTIL Suite *data_suite(void)
{
    Suite *s = suite_create(data_name);
    TCase *tc;

    for (size_t i = 0; data_tests[i]; i++) {
        const char *name = data_tests[i]->name;
        tc = tcase_of(s, strncmp(name, "test_", 5) ? name : name + 5,
                      TESTS(data_tests[i]));
        tcase_set_timeout(tc, 120);
        tcase_add_checked_fixture(tc, setup, teardown);
    }
    tc = tcase_of(s, "standbys_hold_every_write", TESTS(test_standbys_hold_every_write));
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, bulk_rows, NULL);
    tcase_add_checked_fixture(tc, setup, teardown);
    return s;
}

/* The main of the data test program `name`: starts the fleet, applies the
 * schema, runs one test case per test of `tests` (a NULL-terminated list,
 * in its order), named for the test without its "test_" (make check
 * T=server_objects CK_RUN_CASE=object_patch), then the case
 * standbys_hold_every_write, and stops the fleet. EXIT_SUCCESS when every
 * test passed. */
CHECK_UTIL int data_main(const char *name, const TTest *const tests[])
{
    data_name = name;
    data_tests = tests;
    return server_test_main(name, &H, NPAIRS, NSHARDS, NMOD, 1, data_suite);
}

#endif /* LIBSHARD_TESTS_DATA_UTIL_H */
