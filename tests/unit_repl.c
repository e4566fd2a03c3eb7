/*
 * Unit tests (no server) for lib/repl.c: GTID positions checked, compared
 * and merged, of any length (a server with many GTID domains prints
 * positions far longer than 512 characters), and publishing a map with
 * compare-and-swap on a file store.
 */
#include "publish.h"
#include "repl.h" /* private: tests link libshard.a */
#include "check_util.h"
#include "map.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(gtid_valid_and_check)
{
    ck_assert(repl_gtid_valid(""));
    ck_assert(repl_gtid_valid("0-1-5"));
    ck_assert(repl_gtid_valid("0-1-5,3-3-100"));
    ck_assert(!repl_gtid_valid("0-1-5'; DROP DATABASE x; --"));
    ck_assert(!repl_gtid_valid("0-1-5 "));
    ck_assert_int_eq(repl_gtid_check("1-2-3"), 0);
    ck_assert_int_eq(repl_gtid_check("1-2-x"), SHARD_ESERVER);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "1-2-x"));
}
END_TEST

START_TEST(gtid_seq_and_covers)
{
    bool found = true;

    ck_assert_uint_eq(repl_gtid_seq("0-1-5,3-3-100", 3, &found), 100);
    ck_assert(found);
    ck_assert_uint_eq(repl_gtid_seq("0-1-5,3-3-100", 7, &found), 0);
    ck_assert(!found);
    /* Two positions joined: the higher sequence number of a domain counts. */
    ck_assert_uint_eq(repl_gtid_seq("3-3-90,0-1-5,3-5-120", 3, NULL), 120);
    ck_assert(repl_gtid_covers("0-1-5,3-3-100", "3-3-100", NULL, 0));
    ck_assert(repl_gtid_covers("0-1-5,3-3-101", "0-1-5,3-3-100", NULL, 0));
    ck_assert(!repl_gtid_covers("0-1-5,3-3-99", "0-1-5,3-3-100", NULL, 0));
    ck_assert(!repl_gtid_covers("0-1-5", "0-1-5,4-4-1", NULL, 0)); /* a domain missing */
    {
        unsigned long skip[] = {4};
        ck_assert(repl_gtid_covers("0-1-5", "0-1-5,4-4-1", skip, 1));
    }
    ck_assert(repl_gtid_covers("", "", NULL, 0));
    ck_assert(repl_gtid_covers("1-1-1", "", NULL, 0));
    ck_assert_int_eq(repl_gtid_behind("0-1-10,3-3-100", "0-1-7,3-3-100"), 3);
    ck_assert_int_eq(repl_gtid_behind("0-1-10,3-3-100", ""), 110);
    ck_assert_int_eq(repl_gtid_behind("0-1-10", "0-1-12"), 0);
}
END_TEST

START_TEST(gtid_merge_keeps_own_domains)
{
    unsigned long keep[] = {3, 4};
    char *out = NULL;

    /* The snapshot's domains except the target pair's own (3, 4), then the
     * target's positions for every other domain. */
    ck_assert_int_eq(repl_gtid_merge("0-1-5,3-3-100,4-4-7", "1-1-50,2-2-9,3-3-90", keep, 2,
                                     &out), 0);
    ck_assert_str_eq(out, "1-1-50,2-2-9,0-1-5,3-3-100,4-4-7");
    free(out);
    ck_assert_int_eq(repl_gtid_merge("", "1-1-50", keep, 2, &out), 0);
    ck_assert_str_eq(out, "1-1-50");
    free(out);
    ck_assert_int_eq(repl_gtid_merge("3-3-1", "", keep, 2, &out), 0);
    ck_assert_str_eq(out, "3-3-1");
    free(out);
    /* The snapshot's position wins over the target's for a moved domain. */
    ck_assert_int_eq(repl_gtid_merge("1-1-70", "1-1-50", keep, 2, &out), 0);
    ck_assert_str_eq(out, "1-1-50");
    free(out);
    out = (char *)1;
    ck_assert_int_eq(repl_gtid_merge("1-1-70", "1-1-5'", keep, 2, &out), SHARD_ESERVER);
    ck_assert_ptr_null(out);
}
END_TEST

/* A connection's start: the source pair's domains (1, 2) from the source's
 * position, the replicating pair's (3, 4) kept, relayed domains (5, 6) the
 * further of the two; where a rewound connection must go again; one
 * position's entries in some domains. */
START_TEST(gtid_start_ahead_only)
{
    unsigned long from[] = {1, 2}, keep[] = {3, 4};
    char *out = NULL;

    ck_assert_int_eq(repl_gtid_start("1-1-70,3-3-100,5-5-40,6-6-9",
                                     "1-1-50,2-2-9,3-3-90,5-5-30,6-6-12", from, 2, keep, 2,
                                     &out), 0);
    ck_assert_str_eq(out, "1-1-50,2-2-9,6-6-12,3-3-100,5-5-40");
    free(out);
    ck_assert_int_eq(repl_gtid_start("", "1-1-50,3-3-1", from, 2, keep, 2, &out), 0);
    ck_assert_str_eq(out, "1-1-50");
    free(out);
    ck_assert_int_eq(repl_gtid_ahead("1-1-70,2-2-9,3-3-100,5-5-40", "1-1-50,2-2-9,5-5-30",
                                     from, 2, &out), 0);
    ck_assert_str_eq(out, "1-1-70");
    free(out);
    ck_assert_int_eq(repl_gtid_ahead("1-1-50", "1-1-50", from, 2, &out), 0);
    ck_assert_str_eq(out, "");
    free(out);
    ck_assert_int_eq(repl_gtid_only("1-1-50,3-3-1,2-2-4", from, 2, &out), 0);
    ck_assert_str_eq(out, "1-1-50,2-2-4");
    free(out);
    out = (char *)1;
    ck_assert_int_eq(repl_gtid_only("1-1-5'", from, 2, &out), SHARD_ESERVER);
    ck_assert_ptr_null(out);
}
END_TEST

/* A position of 200 domains, each "D-S-N" about 25 characters long. */
static void long_pos(char *buf, size_t size, unsigned first, unsigned n, unsigned long long seq)
{
    size_t len = 0;
    buf[0] = '\0';
    for (unsigned d = first; d < first + n; d++)
        len += (size_t)snprintf(buf + len, size - len, "%s%u-%u-%llu", len ? "," : "", d,
                                1000000 + d, seq + d);
}

START_TEST(gtid_long_positions)
{
    static char snap[16384], cur[16384], want[16384];
    unsigned long keep[] = {5000};
    char *out = NULL;

    long_pos(snap, sizeof snap, 10, 200, 9000000000000ULL);
    long_pos(cur, sizeof cur, 300, 200, 1000000000000ULL);
    ck_assert_uint_gt(strlen(snap), 4000);
    ck_assert(repl_gtid_valid(snap));
    ck_assert_int_eq(repl_gtid_merge(cur, snap, keep, 1, &out), 0);
    snprintf(want, sizeof want, "%s,%s", snap, cur);
    ck_assert_str_eq(out, want);
    /* Every domain of both is there, with its own sequence number. */
    for (unsigned d = 10; d < 210; d++)
        ck_assert_uint_eq(repl_gtid_seq(out, d, NULL), 9000000000000ULL + d);
    for (unsigned d = 300; d < 500; d++)
        ck_assert_uint_eq(repl_gtid_seq(out, d, NULL), 1000000000000ULL + d);
    ck_assert(repl_gtid_covers(out, snap, NULL, 0));
    ck_assert(repl_gtid_covers(out, cur, NULL, 0));
    ck_assert(!repl_gtid_covers(snap, out, NULL, 0));
    ck_assert_int_eq(repl_gtid_behind(snap, out), 0);
    free(out);
}
END_TEST

/* ---- publishing with compare-and-swap, on a file store ------------------------ */

static const char map_text[] =
    "{\"version\": 7, \"open_shards\": 64, \"database_format\": \"db%05d\","
    " \"credentials\": {\"user\": \"app\"},"
    " \"objects\": {\"pins\": 1},"
    " \"pairs\": {"
    "   \"MySQL001\": {\"master\": \"127.0.0.1:1\"},"
    "   \"MySQL002\": {\"master\": \"127.0.0.1:2\"}},"
    " \"id_shards\": [{\"range\": [0, 31], \"pair\": \"MySQL001\"},"
    "                {\"range\": [32, 63], \"pair\": \"MySQL002\"}]}";

typedef struct edit_arg {
    int calls;
    int answer; /* 0: reassign shard 0; else returned as is */
    shard_store *rival; /* publishes a version first, once: a lost race */
} edit_arg;

static int edit(const shard_map *cur, shard_map **next, void *arg)
{
    edit_arg *e = arg;

    e->calls++;
    if (e->answer)
        return e->answer == SHARD_ECONFLICT ? shard__fail(SHARD_ECONFLICT, "refused") : e->answer;
    if (e->rival) {
        shard_map *r = NULL;
        ck_assert_int_eq(map_reassign(cur, 1, 1, "MySQL002", cur->version + 1, &r), 0);
        ck_assert_int_eq(shard_store_publish(e->rival, r, cur->version), 0);
        shard_map_free(r);
        e->rival = NULL;
    }
    if (shard__map_pair_index(cur, 0) == shard__map_find_pair(cur, "MySQL002"))
        return PUBLISH_UNCHANGED;
    return map_reassign(cur, 0, 0, "MySQL002", cur->version + 1, next);
}

START_TEST(publish_compare_and_swap)
{
    char dir[] = "/tmp/libshard-repl-XXXXXX", path[128], lock[160];
    shard_options o = SHARD_OPTIONS_INIT;
    shard_store *st = NULL;
    shard_ctx *ctx = NULL;
    shard_map *m = NULL;
    edit_arg e = {0, 0, NULL};
    uint64_t v = 0;
    FILE *f;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/map.json", dir);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs(map_text, f);
    fclose(f);
    o.refresh_interval_ms = 0;
    ck_assert_msg(shard_ctx_open(&ctx, path, &o) == 0, "%s", shard_errmsg());
    ck_assert_int_eq(shard_store_open(&st, path), 0);
    /* A rival publishes between our load and our swap: we load again and win. */
    e.rival = st;
    ck_assert_msg(publish_edit(ctx->store, edit, &e, &v) == 0, "%s", shard_errmsg());
    ck_assert_int_eq(e.calls, 2);
    ck_assert_uint_eq(v, 9);
    ck_assert_int_eq(shard_store_load(st, &m), 0);
    ck_assert_uint_eq(shard_map_version(m), 9);
    ck_assert_int_eq(shard__map_pair_index(m, 0), shard__map_find_pair(m, "MySQL002"));
    ck_assert_int_eq(shard__map_pair_index(m, 1), shard__map_find_pair(m, "MySQL002"));
    shard_map_free(m);
    /* Already as wanted: nothing published, the stored version reported. */
    e.calls = 0;
    ck_assert_int_eq(publish_edit(ctx->store, edit, &e, &v), 0);
    ck_assert_int_eq(e.calls, 1);
    ck_assert_uint_eq(v, 9);
    /* The edit's own refusal is final, even a conflict: no retry. */
    e.calls = 0;
    e.answer = SHARD_ECONFLICT;
    ck_assert_int_eq(publish_edit(ctx->store, edit, &e, &v), SHARD_ECONFLICT);
    ck_assert_int_eq(e.calls, 1);
    shard_store_free(st);
    shard_ctx_free(ctx);
    unlink(path);
    snprintf(lock, sizeof lock, "%s.lock", path);
    unlink(lock);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("repl");

    tcase_of(s, "gtid", TESTS(gtid_valid_and_check, gtid_seq_and_covers,
                              gtid_merge_keeps_own_domains, gtid_start_ahead_only,
                              gtid_long_positions, publish_compare_and_swap));
    return run_suite(s, CK_FORK_GETENV) ? 1 : 0;
}
