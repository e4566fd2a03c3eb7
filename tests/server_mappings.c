/*
 * tests/server_mappings.c: mappings against real MariaDB pairs: add (both
 * rows, on the shards of their two IDs), list (newest first, before, limit;
 * an index-only scan), count, remove, the reverse name, SHARD_SEQ_NOW, both
 * shards checked before anything is written, and names with SQL
 * metacharacters refused by every call that takes a table's name.
 *
 * The tests are independent: one test case each, over one fleet per program
 * (tests/data_util.h), which ends with standbys_hold_every_write.
 */
#include <check.h>
#include <jansson.h> /* before libshard.h: declares the jansson calls */
#include <libshard.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_util.h"
#include "data_util.h"

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

/* ------------------------------------------------------------ hostile names */

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

int main(void)
{
    return data_main("server_mappings",
                     TESTS(test_mapping, test_mapping_list_index_only,
                           test_mapping_add_validates_first, test_hostile_names));
}
