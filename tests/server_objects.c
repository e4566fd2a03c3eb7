/*
 * tests/server_objects.c: objects against real MariaDB pairs: create, get,
 * patch (RFC 7386), update (read-modify-write), soft and hard delete, hostile
 * JSON, 1 MB and too-big values, and the data-safety defects found in them
 * (soft deletion read from the parsed JSON, patches that are not objects, an
 * update whose ROLLBACK fails, values larger than half max_allowed_packet).
 *
 * The tests are independent: one test case each, over one fleet per program
 * (tests/data_util.h), which ends with standbys_hold_every_write.
 */
#include <check.h>
#include <jansson.h> /* before libshard.h: declares the jansson calls */
#include <libshard.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "data_util.h"

/* ------------------------------------------------------------ create and get */

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

int main(void)
{
    return data_main("server_objects",
                     TESTS(test_object_create_get, test_object_patch, test_object_update,
                           test_object_delete, test_hostile_json, test_hostile_big,
                           test_soft_delete_parsed, test_patch_not_object,
                           test_rmw_rollback_fails, test_large_values));
}
