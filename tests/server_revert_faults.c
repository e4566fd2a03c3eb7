/*
 * A revert and its reverse stream under kill -9 (libshard-move(7),
 * "Revert"): a mover killed between starting the reverse stream and
 * journaling it leaves a move whose resume adopts the running stream and
 * whose revert then succeeds; a revert killed at each of its steps in
 * turn (N = 1, 2, ...) is completed by a resume, and no acknowledged row
 * is lost, both halves of the source pair hold every row, the map names
 * the source again and nothing of the move is left on the target. And
 * another mover's replication setup on the target master, which a finish's
 * cleanup and a move's own setup wait out (the latter past the read
 * timeout, without retrying its phases).
 */
#define LEDGER_MAX 40000
#define LEDGER_DROP_WHEN_FULL
#include "check_util.h"
#include "harness.h"
#include "move_util.h"

#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The library's test hook (lib/move/mv.c). */
extern int (*shard__move_hook)(uint64_t move_id, const char *point);

static harness *h;
static shard_ctx *ctx;   /* the application's context (the map's account) */
static shard_ctx *admin; /* the operator's: moves and reverts */

/* ---- a mover killed at a hook point ----------------------------------------------- */

static const char *kill_point; /* the point's name (NULL: any point) */
static int kill_nth;           /* killed at the nth point that matches */
static int kill_seen;

static int kill_hook(uint64_t id, const char *point)
{
    (void)id;
    if ((!kill_point || strcmp(point, kill_point) == 0) && ++kill_seen == kill_nth) {
        fprintf(stderr, "mover killed at step %d: \"%s\"\n", kill_nth, point);
        child_stop_here(); /* SIGKILLed here by the parent */
    }
    return 0;
}

typedef struct job {
    uint64_t id;        /* revert this move (0: move first..last to to) */
    unsigned first, last;
    const char *to;
} job;

static int job_body(shard_ctx *mc, void *arg)
{
    job *j = arg;
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    int rc;

    kill_seen = 0;
    shard__move_hook = kill_hook;
    o.reverse_window_s = 600;
    rc = j->id ? shard_move_revert(mc, j->id, NULL, &r)
               : shard_move(mc, j->first, j->last, j->to, &o, &r, NULL);
    return rc == 0 ? 1 : 2;
}

/* Run j in a child killed at the nth point named point (NULL: any): 1 if
 * it was killed, 0 if it ended first (*status: 1 done, 2 failed). */
static int run_killed(job *j, const char *point, int nth, int *status)
{
    kill_point = point;
    kill_nth = nth;
    return child_killed(h, job_body, j, status);
}

static uint64_t only_move_id(void)
{
    char *st = NULL, *p;
    uint64_t id;

    ck_assert_int_eq(shard_move_status(admin, &st), 0);
    p = strstr(st, "\"id\":");
    ck_assert_msg(p != NULL, "no move in %s", st);
    id = strtoull(p + 5, NULL, 10);
    shard_free(st);
    return id;
}

/* The move is over and left nothing behind: the map on the source pair
 * src (master msrv), the target tsrv without the moved databases or a
 * stream, every row on both halves of the source. */
static void reverted_clean(uint64_t id, unsigned first, unsigned last, const char *src,
                           const char *msrv, const char *tsrv)
{
    for (unsigned s = first; s <= last; s++)
        ck_assert_str_eq(pair_of(ctx, s), src);
    ledger_fill(ctx, first, last, 1); /* the source takes writes again */
    ledger_check_all(ctx);
    for (unsigned s = first; s <= last; s++) {
        check_both_halves(h, ctx, s);
        ck_assert_int_eq(db_exists_settled(h, tsrv, s, 0), 0);
    }
    ck_assert_int_eq(repl_connections(h, msrv, "libshard_revert_"), 0);
    ck_assert_int_eq(shard_move_resume(admin, id, NULL, NULL), SHARD_ENOTFOUND);
}

/* ---- what the revert's cut-over holds ----------------------------------------------- */

static const char *lock_server; /* where the hook looks at "fencing" */
static int lock_held = -1;      /* what it saw: 1 held, 0 free, -1 never looked */

/* At the fence: is the replication-setup lock (the cut-over lock) held on
 * the revert's target? Another mover's setup there would stop the stream
 * the revert waits on, between its fence and its flip. */
static int lock_hook(uint64_t id, const char *point)
{
    char *out = NULL;
    (void)id;
    if (strcmp(point, "fencing") == 0 && lock_server) {
        harness_sql(h, lock_server, "SELECT IS_USED_LOCK('libshard replication') IS NOT NULL",
                    &out);
        lock_held = out && strcmp(out, "1\n") == 0;
        free(out);
    }
    return 0;
}

/* ---- tests -------------------------------------------------------------------------- */

/*
 * Killed after the reverse stream started on the source master and before
 * the journal says so (libshard_revert_* runs; the journal says "not
 * started"). Writers go on through the target; move status says the
 * stream runs; the resume adopts it (started again from the journaled
 * position it would apply again what the source has: 1062/1032, a broken
 * stream, a revert refused), and the revert brings every write back.
 */
START_TEST(killed_between_starting_the_reverse_stream_and_journaling_it)
{
    static const unsigned shards[4][2] = {{2, 3}, {3, 2}, {2, 0}, {3, 1}};
    job j = {0, 2, 3, "MySQL002"};
    shard_move_report r = SHARD_MOVE_REPORT_INIT, rr = SHARD_MOVE_REPORT_INIT;
    char *st = NULL, err[600] = "", st_killed[1000] = "", st_after[1000] = "";
    int status = -1, rc, rrc = -1;
    uint64_t id;
    static load l;

    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    ck_assert_str_eq(pair_of(ctx, 4), "MySQL002");
    ledger_fill(ctx, 0, 3, 50);
    ck_assert_int_eq(run_killed(&j, "reverse stream joined", 1, &status), 1);
    id = only_move_id();
    shard_ctx_reload(ctx);
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL002");
    ck_assert_int_eq(repl_connections(h, "s1", "libshard_revert_mysql002"), 1);
    ck_assert_int_eq(shard_move_status(admin, &st), 0);
    snprintf(st_killed, sizeof st_killed, "%s", st);
    shard_free(st);
    /* Writes on the target, which the running stream applies on the source. */
    load_start(&l, ctx, shards, 2000, 300000);
    rc = shard_move_resume(admin, id, NULL, &r);
    if (rc)
        snprintf(err, sizeof err, "resume: %s", shard_errmsg());
    usleep(300000);
    if (rc == 0 && shard_move_status(admin, &st) == 0) {
        snprintf(st_after, sizeof st_after, "%s", st);
        shard_free(st);
    }
    lock_server = "s1";
    shard__move_hook = lock_hook;
    if (rc == 0 && (rrc = shard_move_revert(admin, id, NULL, &rr)) != 0)
        snprintf(err, sizeof err, "revert: %s", shard_errmsg());
    shard__move_hook = NULL;
    load_stop(&l, 200000);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(rrc == 0, "%s", err);
    /* The stream that ran unjournaled was shown as running. */
    ck_assert_msg(strstr(st_killed, "\"reverse_stream\":\"running"), "status: %s", st_killed);
    ck_assert_int_eq(r.phase, SHARD_MOVE_REVERSIBLE);
    ck_assert_msg(strstr(st_after, "\"reverse_stream\":\"running\""), "status: %s", st_after);
    ck_assert_msg(rrc == 0, "%s", err);
    ck_assert_int_eq(rr.phase, SHARD_MOVE_REVERTED);
    ck_assert_uint_eq(rr.mismatches, 0);
    /* The revert's fence went up under the cut-over lock of its target. */
    ck_assert_int_eq(lock_held, 1);
    reverted_clean(id, 2, 3, "MySQL001", "s1", "s3");
}
END_TEST

/*
 * A revert killed at its nth step (every hook point: each phase it
 * journals and the statements between), for n = 1, 2, ... until a revert
 * runs through: each time a resume completes it (or, killed before it
 * journaled anything, the move is still reversible and reverts), writes
 * made on the target after the flip are on both halves of the source,
 * and the target keeps nothing.
 */
START_TEST(revert_killed_at_every_step)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT, rr = SHARD_MOVE_REPORT_INIT;
    int n, status = -1, killed = 1;

    ck_assert_str_eq(pair_of(ctx, 4), "MySQL002");
    ledger_fill(ctx, 4, 5, 30);
    for (n = 1; killed && n <= 80; n++) {
        job j = {0, 0, 0, NULL};
        int rc;

        shard_ctx_reload(admin); /* the map as the last step's processes left it */
        move_reversible(admin, 4, 5, "MySQL003", 600, &r);
        ledger_fill(ctx, 4, 5, 3); /* on the target: the revert must bring them back */
        j.id = r.move_id;
        killed = run_killed(&j, NULL, n, &status);
        if (killed) {
            rc = shard_move_resume(admin, r.move_id, NULL, &rr);
            if (rc == SHARD_ENOTFOUND) { /* killed once the journal said reverted */
                reverted_clean(r.move_id, 4, 5, "MySQL002", "s3", "s5");
                continue;
            }
            ck_assert_msg(rc == 0, "revert killed at step %d: resume: %s", n, shard_errmsg());
            if (rr.phase == SHARD_MOVE_REVERSIBLE) {
                ledger_fill(ctx, 4, 5, 1); /* the target serves: nothing was left fenced */
                rc = shard_move_revert(admin, r.move_id, NULL, &rr);
                ck_assert_msg(rc == 0, "revert killed at step %d: revert: %s", n,
                              shard_errmsg());
            }
            ck_assert_msg(rr.phase == SHARD_MOVE_REVERTED, "revert killed at step %d: "
                          "phase %d", n, rr.phase);
        } else {
            ck_assert_msg(status == 1, "revert (no kill at step %d) failed", n);
        }
        reverted_clean(r.move_id, 4, 5, "MySQL002", "s3", "s5");
    }
    printf("revert killed at each of its %d steps, each resumed to completion\n", n - 2);
    ck_assert_int_gt(n - 2, 8); /* the hook points are there */
    ck_assert_int_eq(killed, 0);
}
END_TEST

/* Another mover's replication setup on the target master, as it does it:
 * the setup lock held, the pair's link stopped for a moment (longer here,
 * so that the cleanup surely sees it), then started again. */
static void *setup_elsewhere(void *arg)
{
    (void)arg;
    harness_sql(h, "s1", "SELECT GET_LOCK('libshard replication', 60); STOP SLAVE;"
                " SELECT SLEEP(4); START SLAVE; SELECT RELEASE_LOCK('libshard replication')",
                NULL);
    return NULL;
}

static pthread_t setup_thread;
static int setup_started;

/* Entering cleaning (after the finish's own start of the pair's links):
 * another mover's setup begins on the target master, and cleanup runs
 * once the link is stopped under its lock. */
static void setup_at_cleaning(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)total;
    (void)payload;
    if (phase != SHARD_MOVE_CLEANING || setup_started)
        return;
    setup_started = 1;
    pthread_create(&setup_thread, NULL, setup_elsewhere, NULL);
    for (int i = 0; i < 250; i++) {
        char *out = NULL;
        int stopped;
        harness_sql(h, "s1", "SELECT IS_USED_LOCK('libshard replication') IS NOT NULL AND"
                    " VARIABLE_VALUE = 'OFF' FROM information_schema.GLOBAL_STATUS WHERE"
                    " VARIABLE_NAME = 'Slave_running'", &out);
        stopped = out && strcmp(out, "1\n") == 0;
        free(out);
        if (stopped)
            return;
        usleep(20000);
    }
}

/*
 * Cleanup (here a finish's) while another mover sets up a connection on
 * the target master: the pair's own link is stopped for a moment under
 * the setup lock. Cleanup waits for it (within its bound) instead of
 * failing at once with "not a healthy pair".
 */
START_TEST(cleanup_waits_out_another_movers_setup)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, fr = SHARD_MOVE_REPORT_INIT;
    char err[1000];
    int rc;

    ck_assert_str_eq(pair_of(ctx, 6), "MySQL002");
    ledger_fill(ctx, 6, 7, 20);
    move_reversible(admin, 6, 7, "MySQL001", 600, &r);
    ledger_fill(ctx, 6, 7, 2);
    o.progress = setup_at_cleaning;
    rc = shard_move_finish(admin, r.move_id, &o, &fr);
    ck_assert_int_eq(setup_started, 1);
    pthread_join(setup_thread, NULL);
    snprintf(err, sizeof err, "%s", rc ? shard_errmsg() : "");
    if (rc && shard_move_resume(admin, r.move_id, NULL, NULL)) /* the next tests move too */
        fprintf(stderr, "resume after the failed finish: %s\n", shard_errmsg());
    ck_assert_msg(rc == 0, "finish: %s", err);
    ck_assert_int_eq(fr.phase, SHARD_MOVE_DONE);
    ck_assert_int_eq(fr.source_dropped, 1);
    ck_assert_int_eq(fr.target_pair_healthy, 1);
    ledger_check_all(ctx);
    check_both_halves(h, ctx, 6);
    check_both_halves(h, ctx, 7);
}
END_TEST

/* ---- another mover's setup held past the read timeout ------------------------------ */

#define HOLD_S 14 /* longer than the mover's read timeout (the default 10 s) */

static double log_start;
static atomic_int log_watch;             /* the case below is running */
static char retried[2000];               /* the admin log's "trying again" warnings */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

/* The admin context's log: warnings on stderr (info too while watched)
 * with the seconds since the watch began, and every retry of a move's
 * phases remembered. */
static void admin_log(int level, const char *message, void *payload)
{
    (void)payload;
    if (level > SHARD_LOG_WARN && !log_watch)
        return;
    fprintf(stderr, "server_revert_faults: [%.1f s] %s: %s\n", now_s() - log_start,
            level <= SHARD_LOG_WARN ? "warning" : "info", message);
    if (level > SHARD_LOG_WARN || !strstr(message, "trying again"))
        return;
    pthread_mutex_lock(&log_mu);
    snprintf(retried + strlen(retried), sizeof retried - strlen(retried), "%s; ", message);
    pthread_mutex_unlock(&log_mu);
}

static atomic_int hold_done;
static atomic_int waiters_seen; /* the most sessions seen waiting for the lock */

/* Another mover's setup on s3 (MySQL002's master), as long as HOLD_S. */
static void *hold_setup_lock(void *arg)
{
    char sql[200];
    (void)arg;
    snprintf(sql, sizeof sql, "SELECT GET_LOCK('libshard replication', 0); SELECT SLEEP(%d);"
             " SELECT RELEASE_LOCK('libshard replication')", HOLD_S);
    harness_sql(h, "s3", sql, NULL);
    atomic_store(&hold_done, 1);
    return NULL;
}

/* While it holds: how many sessions wait for the lock. */
static void *watch_waiters(void *arg)
{
    (void)arg;
    while (!atomic_load(&hold_done)) {
        char *out = NULL;
        int n;
        harness_sql(h, "s3", "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE"
                    " STATE = 'User lock' AND INFO LIKE '%GET_LOCK(''libshard replication''%'",
                    &out);
        n = out ? atoi(out) : 0;
        free(out);
        if (n > atomic_load(&waiters_seen))
            atomic_store(&waiters_seen, n);
        usleep(200000);
    }
    return NULL;
}

/*
 * A move whose target master's replication setup lock another mover holds
 * longer than the read timeout: the move waits for it within the timeout,
 * in steps (one statement waiting all along would break the connection,
 * and only the phases' retry would carry the move on, leaving the server
 * a lock request of a dead session), and succeeds without a retry.
 */
START_TEST(move_waits_out_another_movers_setup_past_the_read_timeout)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    pthread_t holder, watcher;
    double t0, took;
    char err[1000] = "";
    int rc, held = 0;

    ck_assert_str_eq(pair_of(ctx, 8), "MySQL003");
    ledger_fill(ctx, 8, 9, 20);
    log_start = now_s();
    retried[0] = '\0';
    log_watch = 1;
    t0 = now_s(); /* the hold starts after this, so the move ends >= HOLD_S after it */
    pthread_create(&holder, NULL, hold_setup_lock, NULL);
    for (int i = 0; i < 250 && !held; i++) {
        char *out = NULL;
        harness_sql(h, "s3", "SELECT IS_USED_LOCK('libshard replication') IS NOT NULL", &out);
        held = out && strcmp(out, "1\n") == 0;
        free(out);
        if (!held)
            usleep(20000);
    }
    ck_assert_msg(held, "the setup lock on s3 was never taken");
    pthread_create(&watcher, NULL, watch_waiters, NULL);
    rc = shard_move(admin, 8, 9, "MySQL002", NULL, &r, NULL);
    took = now_s() - t0;
    if (rc)
        snprintf(err, sizeof err, "%s", shard_errmsg());
    pthread_join(holder, NULL);
    pthread_join(watcher, NULL);
    log_watch = 0;
    fprintf(stderr, "server_revert_faults: move of shards 8-9 returned %d after %.1f s of the "
            "%d s hold, %d session(s) seen waiting for the lock\n", rc, took, HOLD_S,
            atomic_load(&waiters_seen));
    ck_assert_msg(rc == 0, "move: %s", err);
    ck_assert_msg(!retried[0], "the move retried its phases: %s", retried);
    ck_assert_int_ge(atomic_load(&waiters_seen), 1); /* it did wait for the lock */
    ck_assert_msg(took >= HOLD_S, "the move took %.1f s, less than the %d s hold", took,
                  HOLD_S);
    drop_rest(admin, &r);
    shard_ctx_reload(ctx);
    ck_assert_str_eq(pair_of(ctx, 8), "MySQL002");
    ledger_check_all(ctx);
    check_both_halves(h, ctx, 8);
    check_both_halves(h, ctx, 9);
}
END_TEST

/* Each test on shards of its own, in a case of its own (CK_RUN_CASE=name
 * runs one). */
static void add_case(Suite *s, const char *name, const TTest *t)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, 1800);
    tcase_add_test(tc, t);
    suite_add_tcase(s, tc);
}

int main(void)
{
    Suite *s = suite_create("server_revert_faults");
    shard_options ao = SHARD_OPTIONS_INIT;
    int failed;

    ao.log = admin_log;
    ao.log_level = SHARD_LOG_INFO;
    if (move_test_start_opts(&h, &ctx, &admin, NULL, &ao))
        return 1;
    add_case(s, "stream_start", killed_between_starting_the_reverse_stream_and_journaling_it);
    add_case(s, "every_step", revert_killed_at_every_step);
    add_case(s, "cleanup_setup", cleanup_waits_out_another_movers_setup);
    add_case(s, "setup_lock_held", move_waits_out_another_movers_setup_past_the_read_timeout);
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(admin);
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
