/*
 * tests/server_kv_txn.c: the calls over many keys, rows and shards against
 * real MariaDB pairs: key-value (binary keys and values, put_new, delete,
 * the key limit, a 1 MB value), one-shard transactions (commit, rollback, a
 * statement that fails), scatter scan and count, and multi-get (per-item
 * status, more IDs than one statement takes, duplicates).
 *
 * The tests are independent: one test case each, over one fleet per program
 * (tests/data_util.h), which ends with standbys_hold_every_write. Only the
 * scatter test creates "users" objects, because it counts every one of
 * them.
 */
#include <check.h>
#include <jansson.h> /* before libshard.h: declares the jansson calls */
#include <libshard.h>

#include <mysql.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "admin_util.h"
#include "data_util.h"

/* ------------------------------------------------------------ key-value */

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

START_TEST(test_mget_large)
{
    /* rows written straight into shard 2 (pair 1) and shard 10 (pair 2) */
    bulk_rows();

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

typedef struct mget_call {
    shard_ctx *ctx;
    const uint64_t *ids;
    size_t n;
    shard_item *items;
    int rc;
    char err[512];
} mget_call;

static void *mget_thread(void *arg)
{
    mget_call *m = arg;
    m->rc = shard_object_mget(m->ctx, m->ids, m->n, &m->items);
    snprintf(m->err, sizeof m->err, "%s", m->rc ? shard_errmsg() : "");
    return NULL;
}

static void mget_expect(const uint64_t *ids, size_t n, shard_item *items, const char *when)
{
    for (size_t i = 0; i < n; i++) {
        char *want = fmt("{\"n\":%zu}", i);
        ck_assert_msg(items[i].status == 0 && items[i].data &&
                          strcmp(items[i].data, want) == 0,
                      "%s: item %zu (ID %llu): status %d, data %s, want %s", when, i,
                      (unsigned long long)ids[i], items[i].status,
                      items[i].data ? items[i].data : "NULL", want);
        free(want);
    }
}

/*
 * A multi-get over pairs whose pools hold idle connections sends every
 * pair's statement from the calling thread before it reads any answer.
 * What a fault there must not do: use a connection the server closed while
 * it was idle, or lose a pair's items when its answer is lost.
 */
START_TEST(test_mget_faults_on_ready_connections)
{
    const unsigned sa = 3, sb = 12; /* one shard on each pair */
    uint64_t ids[40];
    shard_item *items = NULL;
    long long conns[16];
    char db[64];
    double t0;

    ck_assert_str_ne(master_of(sa), master_of(sb));
    for (size_t i = 0; i < 40; i++) {
        char *json = fmt("{\"n\":%zu}", i);
        ids[i] = create(PINS, i % 2 ? sb : sa, json);
        free(json);
    }
    /* Warm: both pools hold an idle connection after this. */
    OK(shard_object_mget(C, ids, 40, &items));
    mget_expect(ids, 40, items, "warm-up");
    shard_items_free(items, 40);

    /* 1. The server closes pair A's idle connections: the multi-get must
     * see that before it sends, and not count a retry. */
    MYSQL *admin = admin_on(H, master_of(sa));
    int n = app_connections(admin, NULL, conns, 16);
    ck_assert_int_ge(n, 1);
    for (int i = 0; i < n; i++) {
        char q[64];
        snprintf(q, sizeof q, "KILL CONNECTION %lld", conns[i]);
        mysql_query(admin, q); /* it may have gone meanwhile */
    }
    for (t0 = now_s(); app_connections(admin, NULL, conns, 16) > 0; nap_ms(10))
        ck_assert_msg(now_s() - t0 < WAIT_SECS, "killed connections still listed");
    nap_ms(50); /* the close reaches the client's socket */
    long long before = retries_of(C);
    OK(shard_object_mget(C, ids, 40, &items));
    mget_expect(ids, 40, items, "after the idle connections were killed");
    shard_items_free(items, 40);
    ck_assert_int_eq(retries_of(C), before);

    /* 2. Pair A's statement waits on a table lock, and its connection is
     * killed while it waits: the answer is lost after both statements went
     * out. The multi-get asks pair A again and returns every item. */
    OK(shard_object_mget(C, ids, 40, &items)); /* both pools ready again */
    shard_items_free(items, 40);
    db_of(sa, db, sizeof db);
    char *lock = fmt("LOCK TABLES `%s`.`pins` WRITE", db);
    ck_assert_msg(mysql_query(admin, lock) == 0, "%s: %s", lock, mysql_error(admin));
    free(lock);
    mget_call m = {C, ids, 40, NULL, -1, ""};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, mget_thread, &m), 0);
    for (t0 = now_s(); app_connections(admin, "Waiting for table metadata lock", conns, 1) < 1;
         nap_ms(5))
        ck_assert_msg(now_s() - t0 < WAIT_SECS, "the multi-get never waited on the lock");
    char kill[64];
    snprintf(kill, sizeof kill, "KILL CONNECTION %lld", conns[0]);
    ck_assert_msg(mysql_query(admin, kill) == 0, "%s: %s", kill, mysql_error(admin));
    nap_ms(200); /* the retry waits on the lock too */
    ck_assert_msg(mysql_query(admin, "UNLOCK TABLES") == 0, "UNLOCK TABLES: %s",
                  mysql_error(admin));
    pthread_join(t, NULL);
    ck_assert_msg(m.rc == 0, "multi-get with a lost answer: %d (%s): %s", m.rc,
                  shard_strerror(m.rc), m.err);
    mget_expect(ids, 40, m.items, "after a lost answer");
    shard_items_free(m.items, 40);
    ck_assert_int_gt(retries_of(C), before);

    /* 3. Pair A's answer does not come within the read timeout (1 s, the
     * lock held until the call returns): the call ends at that timeout, not
     * later, with pair B's items and pair A's marked timed out (a timeout
     * is not retried). */
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *c2 = NULL;
    o.read_timeout_ms = 1000;
    OK(shard_ctx_open(&c2, harness_map_path(H), &o));
    OK(shard_object_mget(c2, ids, 40, &items)); /* both pools ready */
    shard_items_free(items, 40);
    lock = fmt("LOCK TABLES `%s`.`pins` WRITE", db);
    ck_assert_msg(mysql_query(admin, lock) == 0, "%s: %s", lock, mysql_error(admin));
    free(lock);
    t0 = now_s();
    int rc = shard_object_mget(c2, ids, 40, &items);
    double took = now_s() - t0;
    char *msg = strdup(shard_errmsg());
    ck_assert_msg(mysql_query(admin, "UNLOCK TABLES") == 0, "UNLOCK TABLES: %s",
                  mysql_error(admin));
    ck_assert_msg(rc == SHARD_EPARTIAL, "multi-get past its read timeout: %d (%s): %s", rc,
                  shard_strerror(rc), msg);
    ck_assert_msg(strstr(msg, "no answer within 1000 ms"), "message: %s", msg);
    ck_assert_msg(took >= 0.95 && took < 1.8,
                  "the call took %.2f s, its read timeout 1 s (twice that: waited again)", took);
    for (size_t i = 0; i < 40; i++)
        if (i % 2) {
            char *want = fmt("{\"n\":%zu}", i);
            ck_assert_msg(items[i].status == 0 && items[i].data &&
                              strcmp(items[i].data, want) == 0,
                          "pair B's item %zu: status %d", i, items[i].status);
            free(want);
        } else {
            ck_assert_msg(items[i].status == SHARD_ETIMEOUT && !items[i].data,
                          "pair A's item %zu: status %d, want SHARD_ETIMEOUT", i,
                          items[i].status);
        }
    shard_items_free(items, 40);
    free(msg);
    /* and the pool serves again */
    OK(shard_object_mget(c2, ids, 40, &items));
    mget_expect(ids, 40, items, "after the timeout");
    shard_items_free(items, 40);
    shard_ctx_free(c2);
    mysql_close(admin);
}
END_TEST

int main(void)
{
    return data_main("server_kv_txn", TESTS(test_kv, test_txn, test_scatter, test_mget,
                                            test_mget_large,
                                            test_mget_faults_on_ready_connections));
}
