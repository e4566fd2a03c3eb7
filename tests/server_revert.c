/*
 * Reverting a move after its flip, and many moves at once, against real
 * pairs (libshard-move(7), "Revert" and "Many moves at once"): a revert
 * under writers loses nothing and finds the target's writes on the source,
 * a new move flips forward again; a broken reverse stream makes revert
 * refuse and move status say so; moves from two sources into one target,
 * from one source into two targets, and two between the same pairs (taking
 * turns on their one connection) run at once under writers and lose nothing.
 */
/* The writers may outrun the ledger: what it cannot hold is not checked. */
#define LEDGER_MAX 40000
#define LEDGER_DROP_WHEN_FULL
#include "check_util.h"
#include "harness.h"
#include "move_util.h"
#include "run_cmd.h"

#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static harness *h;
static shard_ctx *ctx;   /* the application's context (the map's account) */
static shard_ctx *admin; /* the operator's (shardadmin): schema apply, moves, reverts */

/* ---- movers in threads ------------------------------------------------------------ */

typedef struct mover {
    unsigned first, last;
    const char *to;
    shard_move_report r;
    int rc;
    char err[600];
    pthread_t t;
} mover;

static void *run_move(void *arg)
{
    mover *mv = arg;
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;

    mv->r = (shard_move_report)SHARD_MOVE_REPORT_INIT;
    mv->rc = shard_move(admin, mv->first, mv->last, mv->to, &o, &mv->r, NULL);
    if (mv->rc)
        snprintf(mv->err, sizeof mv->err, "%s", shard_errmsg());
    return NULL;
}

static void moves_at_once(mover *mv, int n)
{
    for (int i = 0; i < n; i++)
        pthread_create(&mv[i].t, NULL, run_move, &mv[i]);
    for (int i = 0; i < n; i++)
        pthread_join(mv[i].t, NULL);
}

static void move_ok(mover *mv)
{
    ck_assert_msg(mv->rc == 0, "move %u-%u to %s: %d %s", mv->first, mv->last, mv->to, mv->rc,
                  mv->err);
    ck_assert_int_eq(mv->r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(mv->r.mismatches, 0);
    drop_rest(admin, &mv->r);
    ck_assert_int_eq(mv->r.source_dropped, 1);
    for (unsigned s = mv->first; s <= mv->last; s++)
        ck_assert_str_eq(pair_of(ctx, s), mv->to);
}

/* The two moves mv at once, under 4 writers on shards: both done, and
 * no writer saw an error. */
static void two_moves_under_writers(mover mv[2], const unsigned shards[4][2])
{
    static load l;

    load_start(&l, ctx, shards, 2000, 200000);
    moves_at_once(mv, 2);
    load_stop(&l, 200000);
    move_ok(&mv[0]);
    move_ok(&mv[1]);
}

/* ---- tests -------------------------------------------------------------------------- */

/* Flip 0-1 to MySQL002 with a reverse window, revert under 4 writers, then
 * flip forward again with a new move: nothing lost, no writer error. */
START_TEST(revert_under_writers_then_forward_again)
{
    static const unsigned shards[4][2] = {{0, 1}, {1, 0}, {0, 2}, {1, 3}};
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, rr = SHARD_MOVE_REPORT_INIT;
    char *st = NULL, *out, json[64], sql[200], during[65] = "";
    uint64_t marker = 0;
    int rc, rrc = -1, mrc, kept = -1, streams = -1, status_ok = 0;
    static load l;

    ledger_fill(ctx, 0, 1, 100);
    ck_assert_str_eq(pair_of(ctx, 0), "MySQL001");
    o.reverse_window_s = 3600;
    rr = (shard_move_report)SHARD_MOVE_REPORT_INIT;
    /* Under the writers nothing may end the test: what is seen is kept
     * and checked once they have stopped. */
    load_start(&l, ctx, shards, 2000, 200000);
    rc = shard_move(admin, 0, 1, "MySQL002", &o, &r, NULL);
    if (rc == 0 && r.phase == SHARD_MOVE_REVERSIBLE) {
        snprintf(during, sizeof during, "%s", pair_of(ctx, 0));
        kept = db_exists(h, "s1", 0);
        streams = repl_connections(h, "s1", "libshard_revert_mysql002");
        if (shard_move_status(admin, &st) == 0)
            status_ok = strstr(st, "\"phase\":\"reversible\"") &&
                        strstr(st, "\"reverse_stream\":\"running\"");
        shard_free(st);
        /* A write on the target between the flip and the revert. */
        snprintf(json, sizeof json, "{\"between\":1}");
        mrc = shard_object_create(ctx, 1, 0, json, strlen(json), &marker);
        if (mrc == 0)
            ledger_add(marker, json);
        usleep(300000);
        rrc = shard_move_revert(admin, r.move_id, NULL, &rr);
        if (rrc)
            snprintf(sql, sizeof sql, "%s", shard_errmsg());
    }
    load_stop(&l, 200000);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_REVERSIBLE);
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_int_eq(r.source_dropped, 0);
    ck_assert_str_eq(during, "MySQL002");
    /* The source was kept, fenced, and followed by the reverse stream. */
    ck_assert_int_eq(kept, 1);
    ck_assert_int_eq(streams, 1);
    ck_assert_int_eq(status_ok, 1);
    ck_assert_uint_ne(marker, 0);
    ck_assert_msg(rrc == 0, "revert: %d %s", rrc, sql);
    printf("revert of shards 0-1 under 4 writers: pause %.1f ms, %u fence attempt(s), "
           "%llu rows verified, %d writes in all\n", rr.pause_ms, rr.fence_attempts,
           (unsigned long long)rr.rows_verified, nw);
    ck_assert_int_eq(rr.phase, SHARD_MOVE_REVERTED);
    ck_assert_uint_eq(rr.mismatches, 0);
    ck_assert_uint_gt(rr.rows_verified, 0);
    ck_assert_str_eq(rr.target, "MySQL001");
    ck_assert_str_eq(pair_of(ctx, 0), "MySQL001");
    ck_assert_str_eq(pair_of(ctx, 1), "MySQL001");
    /* The target's write is on the source, on both halves. */
    snprintf(sql, sizeof sql, "SELECT data FROM db00000.pins WHERE local_id = %llu",
             (unsigned long long)shard_id_local(marker));
    out = sql_ok(h, "s1", sql);
    ck_assert_str_eq(out, "{\"between\":1}\n");
    free(out);
    ledger_check_all(ctx);
    check_both_halves(h, ctx, 0);
    check_both_halves(h, ctx, 1);
    out = sql_ok(h, "s2", sql);
    ck_assert_str_eq(out, "{\"between\":1}\n");
    free(out);
    /* The revert ended the move: target copies and the stream are gone. */
    ck_assert_int_eq(db_exists_settled(h, "s3", 0, 0), 0);
    ck_assert_int_eq(db_exists_settled(h, "s4", 1, 0), 0);
    ck_assert_int_eq(repl_connections(h, "s1", "libshard_revert_"), 0);
    ck_assert_int_eq(shard_move_revert(admin, r.move_id, NULL, NULL), SHARD_ENOTFOUND);

    /* And forward again: a new move, under writers. */
    load_start(&l, ctx, shards, 2000, 200000);
    rc = shard_move(admin, 0, 1, "MySQL002", NULL, &r, NULL);
    load_stop(&l, 200000);
    ck_assert_msg(rc == 0, "forward again: %s", shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    drop_rest(admin, &r);
    ck_assert_int_eq(r.source_dropped, 1);
    ck_assert_str_eq(pair_of(ctx, 0), "MySQL002");
    ledger_check_all(ctx);
    check_both_halves(h, ctx, 0);
    check_both_halves(h, ctx, 1);
    ck_assert_int_eq(db_exists(h, "s1", 0), 0);
}
END_TEST

/* A broken reverse stream: move status says so, revert refuses; a resume
 * starts it again and finish ends the window. */
START_TEST(broken_reverse_stream_refuses_revert)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT, rr = SHARD_MOVE_REPORT_INIT;
    char *st = NULL;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 8), "MySQL003");
    ledger_fill(ctx, 8, 9, 30);
    move_reversible(admin, 8, 9, "MySQL001", 3600, &r);
    free(sql_ok(h, "s5", "STOP SLAVE 'libshard_revert_mysql001'"));
    ck_assert_int_eq(shard_move_status(admin, &st), 0);
    ck_assert_msg(strstr(st, "\"reverse_stream\":\"broken: "), "%s", st);
    shard_free(st);
    rc = shard_move_revert(admin, r.move_id, NULL, &rr);
    ck_assert_int_eq(rc, SHARD_EBUSY);
    ck_assert_msg(strstr(shard_errmsg(), "cannot be reverted") &&
                  strstr(shard_errmsg(), "libshard_revert_mysql001"), "%s", shard_errmsg());
    ck_assert_str_eq(pair_of(ctx, 8), "MySQL001"); /* nothing changed */
    ledger_fill(ctx, 8, 9, 2);
    /* As an operator would: the command says the same. */
    {
        char id[32];
        const char *argv[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "move",
                              "revert", id, NULL};
        run_spec sp = {NULL, NULL, 0, 60};
        run_result res;
        snprintf(id, sizeof id, "%llu", (unsigned long long)r.move_id);
        res = run_cmd(&sp, argv);
        ck_assert_msg(res.status != 0 && strstr(res.err, "cannot be reverted"), "exit %d: %s",
                      res.status, res.err);
        run_free(&res);
    }
    /* A resume starts the stream again; within the window it stays reversible. */
    rc = shard_move_resume(admin, r.move_id, NULL, &rr);
    ck_assert_msg(rc == 0, "resume: %s", shard_errmsg());
    ck_assert_int_eq(rr.phase, SHARD_MOVE_REVERSIBLE);
    ck_assert_int_eq(shard_move_status(admin, &st), 0);
    ck_assert_msg(strstr(st, "\"reverse_stream\":\"running\""), "%s", st);
    shard_free(st);
    /* finish: the stream stops, the source goes. */
    rc = shard_move_finish(admin, r.move_id, NULL, &rr);
    ck_assert_msg(rc == 0, "finish: %s", shard_errmsg());
    ck_assert_int_eq(rr.phase, SHARD_MOVE_DONE);
    ck_assert_int_eq(rr.source_dropped, 1);
    ck_assert_int_eq(db_exists(h, "s5", 8), 0);
    ck_assert_int_eq(repl_connections(h, "s5", "libshard_revert_"), 0);
    ledger_check_all(ctx);
    check_both_halves(h, ctx, 8);
    check_both_halves(h, ctx, 9);
}
END_TEST

/* Two sources into one target at once (merging pairs), under writers. */
START_TEST(two_sources_into_one_target)
{
    static const unsigned shards[4][2] = {{2, 3}, {4, 5}, {3, 4}, {2, 5}};
    mover mv[2] = {{2, 3, "MySQL003", {0}, 0, "", 0}, {4, 5, "MySQL003", {0}, 0, "", 0}};

    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    ck_assert_str_eq(pair_of(ctx, 4), "MySQL002");
    ledger_fill(ctx, 2, 5, 40);
    two_moves_under_writers(mv, shards);
    ck_assert_int_eq(repl_connections(h, "s5", "libshard_from_"), 0);
    ledger_check_all(ctx);
    for (unsigned s = 2; s <= 5; s++)
        check_both_halves(h, ctx, s);
}
END_TEST

/* One source into two targets at once (splitting), under writers. */
START_TEST(one_source_into_two_targets)
{
    static const unsigned shards[4][2] = {{2, 10}, {3, 11}, {2, 11}, {3, 10}};
    mover mv[2] = {{2, 3, "MySQL001", {0}, 0, "", 0}, {10, 11, "MySQL002", {0}, 0, "", 0}};

    ck_assert_str_eq(pair_of(ctx, 2), "MySQL003");
    ck_assert_str_eq(pair_of(ctx, 10), "MySQL003");
    ledger_fill(ctx, 10, 11, 40);
    two_moves_under_writers(mv, shards);
    ledger_check_all(ctx);
    for (unsigned s = 2; s <= 3; s++)
        check_both_halves(h, ctx, s);
    for (unsigned s = 10; s <= 11; s++)
        check_both_halves(h, ctx, s);
}
END_TEST

/* Two moves between the same two pairs at once: they share the target's
 * one connection from the source, the later taking its turn once the
 * earlier has flipped; both complete under writers. */
START_TEST(two_moves_share_one_connection)
{
    static const unsigned shards[4][2] = {{4, 5}, {6, 7}, {4, 7}, {5, 6}};
    mover mv[2] = {{4, 5, "MySQL002", {0}, 0, "", 0}, {6, 7, "MySQL002", {0}, 0, "", 0}};

    ck_assert_str_eq(pair_of(ctx, 4), "MySQL003");
    /* 6-7 to MySQL003 first, so that both ranges come from there. */
    {
        mover pre = {6, 7, "MySQL003", SHARD_MOVE_REPORT_INIT, 0, "", 0};
        run_move(&pre);
        move_ok(&pre);
    }
    ledger_fill(ctx, 4, 7, 40);
    two_moves_under_writers(mv, shards);
    ck_assert_int_eq(repl_connections(h, "s3", "libshard_from_"), 0);
    ledger_check_all(ctx);
    for (unsigned s = 4; s <= 7; s++)
        check_both_halves(h, ctx, s);
}
END_TEST

/* A revert in a child process, SIGKILLed at its nth entry into phase
 * reverting (1: the target fenced, 2: flipped back). */
static int kill_at, kill_seen;

static void stop_here(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)total;
    (void)payload;
    if (phase == SHARD_MOVE_REVERTING && ++kill_seen == kill_at)
        child_stop_here(); /* the parent SIGKILLs us here */
}

typedef struct revert_args {
    uint64_t id;
    int nth;
} revert_args;

static int revert_body(shard_ctx *mc, void *arg)
{
    revert_args *a = arg;
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    kill_at = a->nth;
    kill_seen = 0;
    o.progress = stop_here;
    return shard_move_revert(mc, a->id, &o, NULL) == 0 ? 1 : 2;
}

static void revert_killed_at(uint64_t id, int nth)
{
    revert_args a = {id, nth};
    int status;

    ck_assert_int_eq(child_killed(h, revert_body, &a, &status), 1);
}

/* A revert killed before and after its flip back is completed by a resume. */
START_TEST(killed_revert_resumed)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, rr = SHARD_MOVE_REPORT_INIT;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 8), "MySQL001");
    ledger_fill(ctx, 8, 9, 20);
    o.reverse_window_s = 600;
    for (int nth = 1; nth <= 2; nth++) {
        rc = shard_move(admin, 8, 9, "MySQL003", &o, &r, NULL);
        ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
        ck_assert_int_eq(r.phase, SHARD_MOVE_REVERSIBLE);
        ledger_fill(ctx, 8, 9, 3); /* on the target: the revert must bring them back */
        revert_killed_at(r.move_id, nth);
        rc = shard_move_resume(admin, r.move_id, NULL, &rr);
        ck_assert_msg(rc == 0, "resume after a kill at %d: %s", nth, shard_errmsg());
        ck_assert_int_eq(rr.phase, SHARD_MOVE_REVERTED);
        ck_assert_str_eq(pair_of(ctx, 8), "MySQL001");
        ck_assert_str_eq(pair_of(ctx, 9), "MySQL001");
        ledger_fill(ctx, 8, 9, 2); /* the source takes writes again */
        ledger_check_all(ctx);
        check_both_halves(h, ctx, 8);
        check_both_halves(h, ctx, 9);
        ck_assert_int_eq(db_exists_settled(h, "s5", 8, 0), 0);
        ck_assert_int_eq(repl_connections(h, "s1", "libshard_revert_"), 0);
    }
}
END_TEST

/* shardctl: --reverse-window leaves the move reversible; the first resume
 * after the window cleans up as a move without one does. */
START_TEST(window_end_cleans_up_on_resume)
{
    const char *bad[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "move", "--shards",
                         "8-9", "--to", "MySQL003", "--yes", "--reverse-window", "5x", NULL};
    const char *mv[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "move", "--shards",
                        "8-9", "--to", "MySQL003", "--yes", "--reverse-window", "6s", NULL};
    const char *resume[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "move", "resume",
                            NULL};
    run_spec sp = {NULL, NULL, 0, 120};
    run_result res;

    ck_assert_str_eq(pair_of(ctx, 8), "MySQL001");
    res = run_cmd(&sp, bad);
    ck_assert_msg(res.status == 2 && strstr(res.err, "--reverse-window"), "exit %d: %s",
                  res.status, res.err);
    run_free(&res);
    res = run_cmd(&sp, mv);
    ck_assert_msg(res.status == 0 && strstr(res.out, ": reversible\n") &&
                  strstr(res.out, "shardctl move revert "), "exit %d: %s %s", res.status,
                  res.out, res.err);
    run_free(&res);
    ck_assert_str_eq(pair_of(ctx, 8), "MySQL003");
    ck_assert_int_eq(db_exists(h, "s1", 8), 1);
    ledger_fill(ctx, 8, 9, 2);
    /* Past the window (long enough that the move parks before it ends,
     * even on a loaded machine where starting the reverse stream takes
     * seconds). */
    sleep(7);
    res = run_cmd(&sp, resume);
    /* Done, then the source dropped by the same process. */
    ck_assert_msg(res.status == 0 && strstr(res.out, ": done\n") &&
                  strstr(res.out, "source MySQL001: shards 8-9 dropped in "), "exit %d: %s %s",
                  res.status, res.out, res.err);
    run_free(&res);
    ck_assert_int_eq(db_exists(h, "s1", 8), 0);
    ck_assert_int_eq(repl_connections(h, "s1", "libshard_revert_"), 0);
    ledger_check_all(ctx);
    check_both_halves(h, ctx, 8);
    check_both_halves(h, ctx, 9);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_revert");
    TCase *tc = tcase_create("revert");
    int failed;

    if (move_test_start(&h, &ctx, &admin))
        return 1;
    /* Later tests build on the map earlier ones published: in order. */
    tcase_set_timeout(tc, 300);
    tcase_add_tests(tc, TESTS(revert_under_writers_then_forward_again,
                              broken_reverse_stream_refuses_revert, two_sources_into_one_target,
                              one_source_into_two_targets, two_moves_share_one_connection,
                              killed_revert_resumed, window_end_cleans_up_on_resume));
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(admin);
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
