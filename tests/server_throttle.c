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
 * And the catch-up's pace: a catch-up that makes no headway (here a session
 * on the target holds a row lock its applier needs) says so in the log,
 * with how far behind the target is and what its applier does, instead of
 * waiting catchup_timeout_s in silence; the move completes once the lock
 * goes.
 *
 * Starts 2 pairs (8 ID shards); moves shards 0-3 (4 databases of 3 object
 * and 3 mapping tables) from MySQL001 to MySQL002, and shards 6-7 from
 * MySQL002 to MySQL001.
 */
#include <check.h>
#include <libshard.h>
#include <mysql.h>
#include <pthread.h>
#include <stdbool.h>
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

/* ---------------------------------------------------------- the catch-up */

typedef struct stall {
    pthread_mutex_t lock;
    MYSQL *holder;        /* on the target master: the row lock's transaction */
    char db[64];
    uint64_t local;       /* the row it locks */
    int setup_rc;         /* 0, or why the lock could not be set up */
    char setup_err[300];
    bool caught;          /* the first catch-up call was seen */
    char said[2000];      /* the first "not catching up" warning */
    bool trying_again;    /* a phase ran again */
} stall;

static stall St = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void stall_log(int level, const char *msg, void *payload)
{
    stall *st = payload;

    pthread_mutex_lock(&st->lock);
    if (level == SHARD_LOG_WARN && strstr(msg, "is not catching up") && !st->said[0])
        snprintf(st->said, sizeof st->said, "%s", msg);
    if (strstr(msg, "trying again"))
        st->trying_again = true;
    pthread_mutex_unlock(&st->lock);
    fprintf(stderr, "[%.3f] admin: %s\n", now_s(), msg);
}

/* On the first catch-up call (the move's connection runs, the copy is
 * done): lock the row on the target master, then change it on the source,
 * so that the target's applier waits for the lock. In the mover's thread,
 * before its catch-up starts. */
static void stall_progress(int phase, uint64_t done, uint64_t total, void *payload)
{
    stall *st = payload;
    char sql[300];
    MYSQL *my;

    (void)done, (void)total;
    if (phase != SHARD_MOVE_CATCHUP || st->caught)
        return;
    st->caught = true;
    my = mysql_init(NULL);
    snprintf(sql, sizeof sql, "SELECT data FROM `%s`.pins WHERE local_id = %llu FOR UPDATE",
             st->db, (unsigned long long)st->local);
    if (!my || !mysql_real_connect(my, "127.0.0.1", HARNESS_ADMIN_USER,
                                   getenv(HARNESS_ADMIN_PASSWORD_ENV), NULL,
                                   (unsigned)harness_port(H, "s1"), NULL, 0) ||
        mysql_query(my, "START TRANSACTION") || mysql_query(my, sql)) {
        snprintf(st->setup_err, sizeof st->setup_err, "locking the row on s1: %s",
                 my ? mysql_error(my) : "out of memory");
        st->setup_rc = -1;
    } else {
        mysql_free_result(mysql_store_result(my));
        snprintf(sql, sizeof sql, "UPDATE `%s`.pins SET data = '{\"stalled\":1}' "
                 "WHERE local_id = %llu", st->db, (unsigned long long)st->local);
        if ((st->setup_rc = harness_sql(H, "s3", sql, NULL)))
            snprintf(st->setup_err, sizeof st->setup_err, "the update on s3 failed");
    }
    pthread_mutex_lock(&st->lock); /* the test's thread rolls it back */
    st->holder = my;
    pthread_mutex_unlock(&st->lock);
}

START_TEST(catchup_without_headway_says_why)
{
    shard_options co = SHARD_OPTIONS_INIT;
    static move_thread mv = {.first = 6, .last = 7, .target = "MySQL001",
                             .o = SHARD_MOVE_OPTIONS_INIT};
    shard_map *map = NULL;
    pthread_t t;
    uint64_t id = 0;
    char *data = NULL;
    size_t len = 0;
    double t0, waited;
    bool said = false;

    harness_admin_options(&co);
    co.refresh_interval_ms = 0;
    co.log = stall_log;
    co.log_payload = &St;
    co.log_level = SHARD_LOG_WARN;
    ck_assert_int_eq(harness_open_admin(H, &mv.ctx, &co), 0);
    ck_assert_int_eq(shard_ctx_map(mv.ctx, &map), 0);
    ck_assert_int_eq(shard_map_database(map, 6, St.db, sizeof St.db), 0);
    shard_map_free(map);
    ck_assert_int_eq(shard_object_create(mv.ctx, 1, 6, "{\"v\":0}", 7, &id), 0);
    St.local = shard_id_local(id);

    /* A quarter of 40 s: the stall is said after 10 s. */
    mv.o.catchup_timeout_s = 40;
    mv.o.progress = stall_progress;
    mv.o.payload = &St;
    t0 = now_s();
    ck_assert_int_eq(pthread_create(&t, NULL, run_move_thread, &mv), 0);
    while (now_s() - t0 < 35 && !said) {
        nap_ms(100);
        pthread_mutex_lock(&St.lock);
        said = St.said[0] != 0;
        pthread_mutex_unlock(&St.lock);
    }
    waited = now_s() - t0;
    pthread_mutex_lock(&St.lock);
    if (St.holder) { /* the applier goes on */
        mysql_query(St.holder, "ROLLBACK");
        mysql_close(St.holder);
        St.holder = NULL;
    }
    pthread_mutex_unlock(&St.lock);
    pthread_join(t, NULL);
    printf("catchup_without_headway_says_why: said after %.1f s: %s\n", waited, St.said);
    ck_assert_msg(St.caught, "the move never reported its catch-up");
    ck_assert_msg(St.setup_rc == 0, "%s", St.setup_err);
    ck_assert_msg(mv.rc == 0, "move: %s", mv.err);
    ck_assert_int_eq(mv.r.phase, SHARD_MOVE_DONE);
    ck_assert_msg(said, "no \"not catching up\" warning in %.0f s of a stalled catch-up", waited);
    /* How far behind, the rates, the connection and what its applier does. */
    ck_assert_msg(strstr(St.said, "it is 1 transaction behind the source, and was 1 behind"), "%s", St.said);
    ck_assert_msg(strstr(St.said, "applied 0/s") && strstr(St.said, "it applied nothing"),
                  "%s", St.said);
    ck_assert_msg(strstr(St.said, "replication connection libshard_"), "%s", St.said);
    ck_assert_msg(strstr(St.said, "its applier: \""), "%s", St.said);
    ck_assert_msg(!St.trying_again, "a phase of the move ran again");
    /* The change made during the stall is on the new pair. */
    ck_assert_int_eq(shard_object_get(mv.ctx, id, &data, &len), 0);
    ck_assert_msg(len == 13 && memcmp(data, "{\"stalled\":1}", 13) == 0, "%.*s", (int)len, data);
    shard_free(data);
    shard_ctx_free(mv.ctx);
}
END_TEST

static Suite *throttle_suite(void)
{
    Suite *s = suite_create("server_throttle");
    TCase *tc = tcase_create("throttle");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rate_holds_over_24_tables);
    suite_add_tcase(s, tc);
    tc = tcase_create("catchup");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, catchup_without_headway_says_why);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return server_test_main("server_throttle", &H, NPAIRS, ID_SHARDS, MOD_SHARDS, 1,
                            throttle_suite);
}
