/*
 * What a refusal that an unfinished move causes tells the operator to do
 * next (libshard-move(7), "Commands an unfinished move refuses"): the
 * commands that unblock it in the move's phase, never an abort after the
 * flip, finish or revert for a reversible move, and "wait" for a move a
 * live mover runs right now.
 *
 *   reversible_move_names_finish_and_revert
 *       a move parked in its reverse window: failover of either pair and an
 *       abort are refused naming `move finish` and `move revert` (not
 *       resume, which changes nothing there, nor abort).
 *   interrupted_after_the_flip_names_resume
 *       a mover killed (SIGKILL) in verifying: rebalancing is refused
 *       naming `move resume`, never `move abort`.
 *   running_move_is_not_called_interrupted
 *       a move a mover runs right now: rebalancing and failover say so and
 *       name no command that would fail (resume: "being run by another
 *       mover"), then the move finishes.
 *   next_mover_lifts_a_dead_movers_fence
 *       a mover killed (SIGKILL) fenced, right before its publish: the next
 *       move (of other shards) lifts that fence, the killed move is back in
 *       catchup, and a resume finishes it.
 */
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

/* The library's test hook (lib/move/driver.c). */
extern int (*shard__move_hook)(uint64_t move_id, const char *point);

static harness *h;
static shard_ctx *app, *admin;

/* The message of a refusal that must be SHARD_EBUSY, copied. */
static void refused(int rc, char *msg, size_t n)
{
    snprintf(msg, n, "%s", shard_errmsg());
    ck_assert_msg(rc == SHARD_EBUSY, "want SHARD_EBUSY, got %d: %s", rc, msg);
}

static void names(const char *msg, const char *want)
{
    ck_assert_msg(strstr(msg, want), "\"%s\" is not named in: %s", want, msg);
}

static void never(const char *msg, const char *bad)
{
    ck_assert_msg(!strstr(msg, bad), "\"%s\" would not work, but is named in: %s", bad, msg);
}

static int rebalance_refusal(char *msg, size_t n)
{
    shard_rebalance_options o = SHARD_REBALANCE_OPTIONS_INIT;
    shard_rebalance *p = NULL;
    int rc = shard_rebalance_plan(admin, &o, &p);

    shard_rebalance_free(p);
    refused(rc, msg, n);
    return rc;
}

START_TEST(reversible_move_names_finish_and_revert)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_failover_report fr = SHARD_FAILOVER_REPORT_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char msg[1200], cmd[80];

    ledger_fill(app, 1, 1, 5);
    o.reverse_window_s = 3600;
    OK(shard_move(admin, 1, 1, "MySQL003", &o, &r, NULL));
    ck_assert_int_eq(r.phase, SHARD_MOVE_REVERSIBLE);
    for (int i = 0; i < 3; i++) {
        if (i < 2)
            refused(shard_pair_failover(admin, i ? "MySQL003" : "MySQL001", 0, &fr), msg,
                    sizeof msg);
        else
            refused(shard_move_abort(admin, r.move_id), msg, sizeof msg);
        snprintf(cmd, sizeof cmd, "shardctl move finish %llu", (unsigned long long)r.move_id);
        names(msg, cmd);
        snprintf(cmd, sizeof cmd, "shardctl move revert %llu", (unsigned long long)r.move_id);
        names(msg, cmd);
        never(msg, "move abort");
        never(msg, "move resume");
        never(msg, "abort it");
    }
    OK(shard_move_finish(admin, r.move_id, &o, &r));
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ledger_check_all(app);
}
END_TEST

static void stop_in_verifying(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done, (void)total, (void)payload;
    if (phase == SHARD_MOVE_VERIFYING)
        child_stop_here();
}

static int move_body(shard_ctx *mc, void *arg)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;

    (void)arg;
    o.progress = stop_in_verifying;
    return shard_move(mc, 5, 5, "MySQL003", &o, &r, NULL) ? 1 : 0;
}

START_TEST(interrupted_after_the_flip_names_resume)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char msg[1200], cmd[80];
    int status;

    ledger_fill(app, 5, 5, 5);
    ck_assert_int_eq(child_killed(h, move_body, NULL, &status), 1);
    rebalance_refusal(msg, sizeof msg);
    names(msg, "interrupted");
    never(msg, "move abort");
    never(msg, "abort it");
    OK(shard_move_resume(admin, 0, &o, &r));
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    snprintf(cmd, sizeof cmd, "shardctl move resume %llu", (unsigned long long)r.move_id);
    names(msg, cmd);
    ledger_check_all(app);
}
END_TEST

/* The mover waits at its "marked" point until the test has asked. */
static atomic_int at_marked, go_on;

static int hold_hook(uint64_t id, const char *point)
{
    (void)id;
    if (strcmp(point, "marked") == 0) {
        atomic_store(&at_marked, 1);
        while (!atomic_load(&go_on))
            usleep(20000);
    }
    return 0;
}

START_TEST(running_move_is_not_called_interrupted)
{
    move_thread mv = {.h = h, .first = 2, .last = 2, .target = "MySQL002"};
    shard_failover_report fr = SHARD_FAILOVER_REPORT_INIT;
    char msg[1200], msg2[1200];
    pthread_t t;

    ledger_fill(app, 2, 2, 5);
    mv.o = (shard_move_options)SHARD_MOVE_OPTIONS_INIT;
    atomic_store(&at_marked, 0);
    atomic_store(&go_on, 0);
    shard__move_hook = hold_hook;
    ck_assert_int_eq(pthread_create(&t, NULL, run_move_thread, &mv), 0);
    while (!atomic_load(&at_marked))
        usleep(20000);
    rebalance_refusal(msg, sizeof msg);
    refused(shard_pair_failover(admin, "MySQL001", 0, &fr), msg2, sizeof msg2);
    atomic_store(&go_on, 1);
    pthread_join(t, NULL);
    shard__move_hook = NULL;
    ck_assert_msg(mv.rc == 0, "move: %s", mv.err);
    for (int i = 0; i < 2; i++) {
        const char *m = i ? msg2 : msg;
        names(m, "being run by a mover right now");
        never(m, "interrupted");
        never(m, "move abort");
        never(m, "move resume");
    }
    ledger_check_all(app);
}
END_TEST

static int kill_at_publish(uint64_t id, const char *point)
{
    (void)id;
    if (strcmp(point, "publishing") == 0)
        child_stop_here();
    return 0;
}

static int move3_body(shard_ctx *mc, void *arg)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;

    (void)arg;
    return shard_move(mc, 3, 3, "MySQL002", &o, &r, NULL) ? 1 : 0;
}

static int fenced_on(const char *server, unsigned shard)
{
    char *out = sql_okf(h, server, "SELECT COUNT(*) FROM libshard_control.fence WHERE"
                        " db = 'db%05u' AND fenced <> 0", shard);
    int n = atoi(out);
    free(out);
    return n;
}

START_TEST(next_mover_lifts_a_dead_movers_fence)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char *phase;
    int status;

    ledger_fill(app, 3, 3, 5);
    shard__move_hook = kill_at_publish;
    ck_assert_int_eq(child_killed(h, move3_body, NULL, &status), 1);
    shard__move_hook = NULL;
    ck_assert_int_eq(fenced_on("s1", 3), 1); /* what a dead mover leaves */
    /* The next move, of other shards between other pairs. */
    ledger_fill(app, 9, 9, 5);
    OK(shard_move(admin, 9, 9, "MySQL002", &o, &r, NULL));
    ck_assert_msg(fenced_on("s1", 3) == 0, "shard 3 stays fenced by its dead mover after the "
                  "next move ran");
    phase = sql_ok(h, "s3", "SELECT phase FROM libshard_control.moves WHERE first_shard = 3"
                            " ORDER BY id DESC LIMIT 1");
    ck_assert_int_eq(atoi(phase), SHARD_MOVE_CATCHUP);
    free(phase);
    OK(shard_move_resume(admin, 0, &o, &r));
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ledger_check_all(app);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_next_steps");
    TCase *tc = tcase_create("next_steps");
    int failed;

    if (move_test_start(&h, &app, &admin))
        return 1;
    tcase_set_timeout(tc, 300);
    tcase_add_tests(tc, TESTS(reversible_move_names_finish_and_revert,
                              interrupted_after_the_flip_names_resume,
                              running_move_is_not_called_interrupted,
                              next_mover_lifts_a_dead_movers_fence));
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_FORK_GETENV);
    shard_ctx_free(app);
    shard_ctx_free(admin);
    harness_stop(h);
    shard_global_cleanup();
    return failed ? 1 : 0;
}
