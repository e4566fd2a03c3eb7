/*
 * tests/server_throttle.c: the copy's --max-rows-per-second
 * (shard_move_options.max_rows_per_second, libshard-move(7)) over a move of
 * 24 tables, half of them empty, against real servers: the copy's rate,
 * its rows over the time from the first rows copied to the copy's last
 * report (when the rows are paid for) as the test sees them in the progress
 * callbacks, holds within 10% of the limit; and the progress's total is
 * the tables' estimate from the first rows on. Before, every table
 * (an empty one too) and every table's last partial batch cost a quarter
 * of a second's rows: this move copied at about a third of the limit.
 *
 * Starts 2 pairs (8 ID shards); moves shards 0-3 (4 databases of 3 object
 * and 3 mapping tables) from MySQL001 to MySQL002.
 */
#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "harness.h"

#define NPAIRS 2
#define ID_SHARDS 8
#define MOD_SHARDS 2
#define RATE 800      /* rows per second: batches of 200 */
#define PER_TABLE 300 /* rows in each of the 12 object tables: a 4.5 s copy */

static harness *H;

typedef struct pace {
    pthread_mutex_t lock;
    double copy_start, copy_end; /* the first and the last rows copied */
    uint64_t low_total;          /* calls whose total was below the rows to copy */
} pace;

static void pace_seen(int phase, uint64_t done, uint64_t total, void *payload)
{
    pace *p = payload;
    double t = now_s();

    pthread_mutex_lock(&p->lock);
    if (phase == SHARD_MOVE_COPYING && done > 0 && total < 12 * PER_TABLE)
        p->low_total++;
    if (phase == SHARD_MOVE_COPYING && done > 0 && p->copy_start == 0)
        p->copy_start = t;
    if (phase == SHARD_MOVE_COPYING && done > 0)
        p->copy_end = t;
    pthread_mutex_unlock(&p->lock);
}

START_TEST(rate_holds_over_24_tables)
{
    static pace p = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_options co = SHARD_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_ctx *ctx = NULL;
    shard_map *map = NULL;
    double seconds, rate;

    co.refresh_interval_ms = 0;
    ck_assert_int_eq(harness_open_admin(H, &ctx, &co), 0);
    ck_assert_int_eq(shard_ctx_map(ctx, &map), 0);
    /* Objects of the 3 types on shards 0-3 (MySQL001, master s1): 12
     * tables with rows; the 12 mapping tables stay empty. */
    for (unsigned s = 0; s < 4; s++) {
        char db[64], sql[500];
        ck_assert_int_eq(shard_map_database(map, s, db, sizeof db), 0);
        snprintf(sql, sizeof sql, "USE `%s`;"
                 "INSERT INTO pins (data) SELECT '{}' FROM seq_1_to_%d;"
                 "INSERT INTO boards (data) SELECT '{}' FROM seq_1_to_%d;"
                 "INSERT INTO users (data) SELECT '{}' FROM seq_1_to_%d;"
                 "ANALYZE TABLE pins, boards, users",
                 db, PER_TABLE, PER_TABLE, PER_TABLE);
        ck_assert_int_eq(harness_sql(H, "s1", sql, NULL), 0);
    }
    shard_map_free(map);
    o.max_rows_per_second = RATE;
    o.progress = pace_seen;
    o.payload = &p;
    ck_assert_msg(shard_move(ctx, 0, 3, "MySQL002", &o, &r, NULL) == 0, "move: %s",
                  shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_int_eq(r.tables, 24);
    ck_assert_uint_eq(r.rows_copied, 12 * PER_TABLE);
    seconds = p.copy_end - p.copy_start;
    rate = (double)r.rows_copied / seconds;
    printf("rate_holds_over_24_tables: %llu rows in %.2f s: %.0f rows/s for a limit of %d\n",
           (unsigned long long)r.rows_copied, seconds, rate, RATE);
    ck_assert_msg(p.copy_start > 0 && p.copy_end > p.copy_start, "no copy phase seen");
    /* The progress's total is the estimate of every table from the start
     * (their statistics are current), not what was copied so far. */
    ck_assert_msg(p.low_total == 0, "%llu progress calls with a total below the %d rows",
                  (unsigned long long)p.low_total, 12 * PER_TABLE);
    ck_assert_msg(rate >= 0.9 * RATE && rate <= 1.1 * RATE,
                  "%.0f rows/s: not within 10%% of --max-rows-per-second %d", rate, RATE);
    shard_ctx_free(ctx);
}
END_TEST

static Suite *throttle_suite(void)
{
    Suite *s = suite_create("server_throttle");
    TCase *tc = tcase_create("throttle");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rate_holds_over_24_tables);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return server_test_main("server_throttle", &H, NPAIRS, ID_SHARDS, MOD_SHARDS, 1,
                            throttle_suite);
}
