/*
 * Online moves against real pairs: concurrent writers see no error and lose
 * nothing; a mover killed (SIGKILL) in every phase resumes to completion or
 * aborts to a source that serves as if nothing happened; a long transaction
 * delays the fence without stalling traffic; a target restart during
 * catch-up applies nothing outside the moved databases; verification finds
 * a row changed behind the mover's back; two pairs merge onto a third.
 */
#include "first_reports.h"
#include "harness.h"
#include "move/face.h" /* private: move_refuse_unfinished, as failover calls it */
#include "move_util.h"
#include "report.h" /* the 0.1.0 entry point, shard__move_v0 */
#include "run_cmd.h"

#include <check.h>
#include <libshard.h>
#include <mysql.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static harness *h;
static shard_ctx *ctx;   /* the application's context, in this process */
static shard_ctx *admin; /* the operator's (shardadmin): schema apply and moves */

static int move_connections(const char *server)
{
    char *out = sql_ok(h, server, "SHOW ALL SLAVES STATUS");
    int n = 0;
    for (char *p = out; (p = strstr(p, "\nlibshard_from_")); p++)
        n++;
    free(out);
    return n;
}

/* Both threads of a server's own (unnamed) replication link run (waiting,
 * bounded, for a link that is still connecting). */
static int pair_link_running(const char *server)
{
    int yes = 0;
    for (int i = 0; i < 100 && !yes; i++) {
        char *out = sql_ok(h, server, "SELECT VARIABLE_VALUE FROM"
                                      " information_schema.GLOBAL_STATUS"
                                      " WHERE VARIABLE_NAME = 'SLAVE_RUNNING'");
        yes = strcmp(out, "ON\n") == 0;
        free(out);
        if (!yes)
            usleep(50000);
    }
    return yes;
}

/* ---- checking that what was written is all there --------------------------- */

/* Each moved row sits on the master of the pair the map names. */
static void check_rows_on_master(unsigned shard)
{
    char sql[200], *out;
    int expect = ledger_rows(shard);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05u.pins", shard);
    out = sql_ok(h, master_of(pair_of(ctx, shard)), sql);
    ck_assert_int_eq(atoi(out), expect);
    free(out);
}

/* ---- a mover in a child process, stopped at a phase, then killed ------------ */

static int stop_phase;

static void stop_here(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)total;
    (void)payload;
    if (phase == stop_phase)
        child_stop_here(); /* the parent SIGKILLs us here, mid-phase */
}

typedef struct move_args {
    unsigned first, last;
    const char *target;
    int phase;
} move_args;

static int move_body(shard_ctx *mc, void *arg)
{
    move_args *a = arg;
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    stop_phase = a->phase;
    o.progress = stop_here;
    return shard_move(mc, a->first, a->last, a->target, &o, NULL, NULL) == 0 ? 1 : 2;
}

/* Run shard_move in a child; SIGKILL it when it reaches phase. Returns 0
 * when it was killed there, 1 when it finished before reaching it. */
static int move_killed_at(unsigned first, unsigned last, const char *target, int phase)
{
    move_args a = {first, last, target, phase};
    int status;

    if (child_killed(h, move_body, &a, &status))
        return 0;
    ck_assert_msg(0, "the mover exited with %d before reaching phase %s", status,
                  shard_move_phase_name(phase));
    return 1;
}

static void resume_ok(shard_move_report *r)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    int rc = shard_move_resume(admin, 0, &o, r);
    ck_assert_msg(rc == 0, "resume: %d %s", rc, shard_errmsg());
    ck_assert_int_eq(r->phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r->mismatches, 0);
    drop_rest(admin, r);
}

/* ---- tests ------------------------------------------------------------------ */

START_TEST(move_under_concurrent_writes)
{
    static const unsigned shards[4][2] = {{0, 1}, {1, 2}, {0, 6}, {1, 7}};
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    static load l;
    double worst = 0;
    int rc;

    ledger_fill(ctx, 0, 1, 300);
    ck_assert_str_eq(pair_of(ctx, 0), "MySQL001");
    load_start(&l, ctx, shards, 0, 300000);
    rc = shard_move(admin, 0, 1, "MySQL002", &o, &r, NULL);
    load_stop(&l, 300000); /* all of them before any assertion ends the test */
    for (int i = 0; i < 4; i++)
        if (l.wr[i].worst > worst)
            worst = l.wr[i].worst;
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    printf("move 0-1 under load: %llu rows copied in %.3f s, pause %.1f ms, "
           "%u fence attempts, %llu rows verified; worst writer call %.1f ms\n",
           (unsigned long long)r.rows_copied, r.copy_seconds, r.pause_ms, r.fence_attempts,
           (unsigned long long)r.rows_verified, worst * 1000);
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r.mismatches, 0);
    /* Done before the drops: the source's copies are still there. */
    ck_assert_int_eq(r.source_dropped, 0);
    ck_assert_int_eq(db_exists(h, "s1", 0), 1);
    drop_rest(admin, &r);
    ck_assert_str_eq(pair_of(ctx, 0), "MySQL002");
    ck_assert_str_eq(pair_of(ctx, 1), "MySQL002");
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    ledger_check_all(ctx);
    check_rows_on_master(0);
    check_rows_on_master(1);
    /* The source is clean on both halves; no replication connection is left. */
    ck_assert_int_eq(db_exists(h, "s1", 0), 0);
    ck_assert_int_eq(db_exists_settled(h, "s2", 1, 0), 0);
    ck_assert_int_eq(move_connections("s3"), 0);
    /* The target pair is still a healthy pair: its standby has the rows too. */
    usleep(500000);
    {
        char *a = sql_ok(h, "s3", "SELECT COUNT(*), SUM(CRC32(data)) FROM db00000.pins");
        char *b = sql_ok(h, "s4", "SELECT COUNT(*), SUM(CRC32(data)) FROM db00000.pins");
        ck_assert_str_eq(a, b);
        free(a);
        free(b);
    }
}
END_TEST

START_TEST(dry_run_changes_nothing)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    char *plan = NULL;

    o.flags = SHARD_MOVE_DRY_RUN;
    ck_assert_int_eq(shard_move(admin, 2, 3, "MySQL003", &o, NULL, &plan), 0);
    ck_assert_ptr_nonnull(strstr(plan, "db00002.pins"));
    ck_assert_ptr_nonnull(strstr(plan, "gtid_ignore_duplicates 1: ok"));
    shard_free(plan);
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    ck_assert_int_eq(db_exists(h, "s5", 2), 0);
    /* Bad requests are refused before anything happens. */
    ck_assert_int_eq(shard_move(admin, 2, 3, "MySQL001", &o, NULL, &plan), SHARD_EINVAL);
    ck_assert_int_eq(shard_move(admin, 2, 3, "MySQL009", &o, NULL, &plan), SHARD_EINVAL);
    ck_assert_int_eq(shard_move(admin, 3, 4, "MySQL003", &o, NULL, &plan), SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "span pairs"), "%s", shard_errmsg());
    /* A target pair whose halves could hand out the same local ids. */
    free(sql_ok(h, "s6", "SET GLOBAL auto_increment_offset = 1"));
    ck_assert_int_eq(shard_move(admin, 2, 3, "MySQL003", &o, NULL, &plan), SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "auto_increment_offset"), "%s", shard_errmsg());
    free(sql_ok(h, "s6", "SET GLOBAL auto_increment_offset = 2"));
}
END_TEST

/* SIGKILL in each phase, then resume: completes with every row right. */
START_TEST(killed_in_each_phase_then_resumed)
{
    static const int phases[] = {SHARD_MOVE_COPYING, SHARD_MOVE_CATCHUP, SHARD_MOVE_FENCED,
                                 SHARD_MOVE_FLIPPED, SHARD_MOVE_VERIFYING,
                                 SHARD_MOVE_CLEANING};
    const char *targets[] = {"MySQL003", "MySQL001"};

    ledger_fill(ctx, 2, 3, 100);
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
        const char *target = targets[i % 2];
        shard_move_report r = SHARD_MOVE_REPORT_INIT;
        move_killed_at(2, 3, target, phases[i]);
        resume_ok(&r);
        ck_assert_str_eq(pair_of(ctx, 2), target);
        ck_assert_str_eq(pair_of(ctx, 3), target);
        ledger_check_all(ctx);
        check_rows_on_master(2);
        ck_assert_int_eq(db_exists(h, master_of(targets[(i + 1) % 2]), 2), 0);
        ck_assert_int_eq(move_connections(master_of(target)), 0);
        ledger_fill(ctx, 2, 3, 5); /* and the shards take writes where they are now */
    }
}
END_TEST

/* Abort from each phase before the flip: the source serves as before. */
START_TEST(aborted_before_flip)
{
    static const int phases[] = {SHARD_MOVE_COPYING, SHARD_MOVE_CATCHUP, SHARD_MOVE_FENCED};
    const char *home = pair_of(ctx, 4);

    ledger_fill(ctx, 4, 4, 50);
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
        move_killed_at(4, 4, "MySQL003", phases[i]);
        /* As a mover killed between STOP ALL SLAVES and the restart leaves
         * it: the target pair's own link stopped. Abort starts it again. */
        free(sql_ok(h, "s5", "STOP SLAVE"));
        ck_assert_msg(shard_move_abort(admin, 0) == 0, "abort: %s", shard_errmsg());
        ck_assert_int_eq(pair_link_running("s5"), 1);
        ck_assert_str_eq(pair_of(ctx, 4), home);
        ck_assert_int_eq(db_exists(h, "s5", 4), 0);
        ck_assert_int_eq(db_exists_settled(h, "s6", 4, 0), 0);
        ck_assert_int_eq(move_connections("s5"), 0);
        ledger_fill(ctx, 4, 4, 3); /* writes land on the source again at once */
        ledger_check_all(ctx);
        check_rows_on_master(4);
    }
    ck_assert_int_eq(shard_move_abort(admin, 0), SHARD_ENOTFOUND);
}
END_TEST

typedef struct holder {
    unsigned shard;
    uint64_t id;
    double seconds;
    int rc;
    atomic_int locked; /* 1: in its transaction, 2: gave up */
    int started;
    pthread_t thread;
} holder;

static void *hold_lock(void *arg)
{
    holder *hd = arg;
    shard_txn *t = NULL;
    char *json = NULL;
    if ((hd->rc = shard_txn_begin(ctx, hd->shard, &t))) {
        atomic_store(&hd->locked, 2);
        return NULL;
    }
    hd->rc = shard_txn_object_get(t, hd->id, &json, NULL);
    atomic_store(&hd->locked, hd->rc ? 2 : 1);
    shard_free(json);
    usleep((useconds_t)(hd->seconds * 1e6));
    if (hd->rc == 0)
        hd->rc = shard_txn_commit(t);
    else
        shard_txn_rollback(t);
    return NULL;
}

/* Once the move catches up (its fence rows exist), a transaction opens on
 * the shard: it holds the fence row's shared lock until it commits. */
static void hold_at_catchup(int phase, uint64_t done, uint64_t total, void *payload)
{
    holder *hd = payload;
    (void)done;
    (void)total;
    if (phase != SHARD_MOVE_CATCHUP || hd->started)
        return;
    hd->started = 1;
    pthread_create(&hd->thread, NULL, hold_lock, hd);
    for (int i = 0; i < 500 && !atomic_load(&hd->locked); i++)
        usleep(10000);
}

/* A long transaction on a moved shard: the fence backs off and wins later. */
START_TEST(long_transaction_delays_fence)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    static holder hd;
    double t0, worst = 0;

    ledger_fill(ctx, 5, 5, 20);
    memset(&hd, 0, sizeof hd);
    hd.shard = 5;
    hd.seconds = 3.5;
    hd.id = w[nw - 1].id;
    o.fence_timeout_s = 1;
    o.progress = hold_at_catchup;
    o.payload = &hd;
    ck_assert_msg(shard_move(admin, 5, 5, "MySQL003", &o, &r, NULL) == 0, "%s", shard_errmsg());
    ck_assert_int_eq(hd.started, 1);
    pthread_join(hd.thread, NULL);
    ck_assert_int_eq(atomic_load(&hd.locked), 1);
    ck_assert_int_eq(hd.rc, 0);
    ck_assert_uint_ge(r.fence_attempts, 2);
    /* Traffic on the shard stalled at most about the lock timeout. */
    t0 = now_s();
    ledger_fill(ctx, 5, 5, 1);
    worst = now_s() - t0;
    ck_assert_msg(worst < 2.0, "a write took %.2f s after the move", worst);
    ck_assert_str_eq(pair_of(ctx, 5), "MySQL003");
    ledger_check_all(ctx);
}
END_TEST

/* The target restarted during catch-up: nothing else is applied there. */
START_TEST(target_restart_during_catchup)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT;

    ledger_fill(ctx, 6, 7, 30);
    ck_assert_str_eq(pair_of(ctx, 6), "MySQL002");
    move_killed_at(6, 7, "MySQL003", SHARD_MOVE_CATCHUP);
    ck_assert_int_eq(harness_kill(h, "s5"), 0);
    ck_assert_int_eq(harness_restart(h, "s5"), 0);
    /* Writes on the source's other databases meanwhile must stay there. */
    ck_assert_str_eq(pair_of(ctx, 4), "MySQL002");
    ledger_fill(ctx, 4, 4, 10);
    ledger_fill(ctx, 6, 7, 10);
    resume_ok(&r);
    ck_assert_str_eq(pair_of(ctx, 6), "MySQL003");
    ledger_check_all(ctx);
    check_rows_on_master(6);
    check_rows_on_master(7);
    ck_assert_int_eq(db_exists(h, "s5", 4), 0);
    ck_assert_int_eq(move_connections("s5"), 0);
}
END_TEST

static const char *tamper_server = "s5";
static int verify_progress_seen, verify_progress_over; /* done > total ever */

static void tamper(int phase, uint64_t done, uint64_t total, void *payload)
{
    if (phase == SHARD_MOVE_VERIFYING && total) {
        verify_progress_seen = 1;
        verify_progress_over |= done > total;
    }
    if (phase == SHARD_MOVE_CATCHUP) {
        char *out = NULL;
        harness_sql(h, tamper_server, (const char *)payload, &out);
        free(out);
    }
}

/* A row changed on the target behind the mover's back is found. */
START_TEST(verification_finds_tampering)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char sql[300];
    int rc, victim = -1;

    ck_assert_str_eq(pair_of(ctx, 4), "MySQL002");
    for (int i = 0; i < nw && victim < 0; i++)
        if (shard_id_shard(w[i].id) == 4)
            victim = i;
    ck_assert_int_ge(victim, 0);
    snprintf(sql, sizeof sql, "SET sql_log_bin = 0; UPDATE db00004.pins SET data = "
             "'{\"evil\":1}' WHERE local_id = %llu",
             (unsigned long long)shard_id_local(w[victim].id));
    o.progress = tamper;
    o.payload = sql;
    rc = shard_move(admin, 4, 4, "MySQL003", &o, &r, NULL);
    ck_assert_int_eq(rc, SHARD_EVERIFY);
    ck_assert_uint_eq(r.mismatches, 1);
    ck_assert_int_eq(r.source_dropped, 0);
    ck_assert_msg(strstr(shard_errmsg(), "mismatch"), "%s", shard_errmsg());
    /* The source's copy is kept for the operator, under its own name, and
     * stays fenced: no client reads or writes it there. */
    {
        char *out = sql_ok(h, "s3", "SELECT COUNT(*) FROM db00004.pins");
        ck_assert_int_gt(atoi(out), 0);
        free(out);
        out = sql_ok(h, "s3", "SELECT fenced <> 0 FROM libshard_control.fence"
                              " WHERE db = 'db00004'");
        ck_assert_str_eq(out, "1\n");
        free(out);
    }
    /* Put the row right again, as an operator would, and drop the source's
     * copy by hand, for the tests after. */
    snprintf(sql, sizeof sql, "UPDATE db00004.pins SET data = '%s' WHERE local_id = %llu",
             w[victim].json, (unsigned long long)shard_id_local(w[victim].id));
    free(sql_ok(h, "s5", sql));
    free(sql_ok(h, "s3", "DROP DATABASE db00004"));
}
END_TEST

/* The highest phase a progress callback was told of. */
static void max_phase(int phase, uint64_t done, uint64_t total, void *payload)
{
    int *max = payload;

    (void)done;
    (void)total;
    if (phase > *max)
        *max = phase;
}

/* Merge: two pairs' ranges onto a third; both sources empty of them. */
START_TEST(merge_two_pairs_onto_one)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;

    ck_assert_str_eq(pair_of(ctx, 0), "MySQL002");
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    /* The target's journal as an earlier version made it: positions of at
     * most 1024 characters, no flip position, no fence count. */
    free(sql_ok(h, "s5", "ALTER TABLE libshard_control.moves"
                         " MODIFY snapshot_gtid VARCHAR(1024) NOT NULL DEFAULT '',"
                         " MODIFY fence_gtid VARCHAR(1024) NOT NULL DEFAULT '',"
                         " DROP COLUMN flip_gtid, DROP COLUMN fence_statements"));
    ledger_fill(ctx, 0, 3, 5);
    ck_assert_msg(shard_move(admin, 0, 1, "MySQL003", &o, &r, NULL) == 0, "%s", shard_errmsg());
    drop_rest(admin, &r);
    /* The second as a program built against libshard 0.1.0 calls it: its
     * report has the first layout (no version), filled without a byte past
     * its end (a heap struct of exactly that size: ASan). */
    {
        old_move_report *old = malloc(sizeof *old);
        ck_assert_ptr_nonnull(old);
        shard_move_options o1 = SHARD_MOVE_OPTIONS_INIT;
        int seen = -1;
        memset(old, 0xA5, sizeof *old);
        /* Its callback is told only phases 0.1.0 had: the drops as cleaning. */
        o1.version = 1;
        o1.progress = max_phase;
        o1.payload = &seen;
        ck_assert_msg(shard__move_v0(admin, 2, 3, "MySQL003", &o1, old, NULL) == 0, "%s",
                      shard_errmsg());
        ck_assert_int_eq(seen, SHARD_MOVE_DONE);
        ck_assert_int_eq(old->phase, SHARD_MOVE_DONE);
        ck_assert_str_eq(old->source, "MySQL001");
        ck_assert_str_eq(old->target, "MySQL003");
        ck_assert_uint_eq(old->first, 2);
        ck_assert_uint_eq(old->last, 3);
        ck_assert_uint_gt(old->move_id, r.move_id);
        ck_assert_uint_gt(old->rows_copied, 0);
        ck_assert_uint_eq(old->rows_verified, old->rows_copied);
        ck_assert_uint_eq(old->mismatches, 0);
        ck_assert_uint_gt(old->map_version, r.map_version);
        /* As 0.1.0 did, it returns once its source is dropped. */
        ck_assert_int_eq(old->source_dropped, 1);
        ck_assert_int_eq(old->target_pair_healthy, 1);
        free(old);
    }
    {
        char *out = sql_ok(h, "s5", "SELECT GROUP_CONCAT(COLUMN_NAME, ' ', DATA_TYPE ORDER BY"
                                    " COLUMN_NAME) FROM information_schema.COLUMNS WHERE"
                                    " TABLE_SCHEMA = 'libshard_control' AND TABLE_NAME = 'moves'"
                                    " AND (COLUMN_NAME LIKE '%gtid' OR COLUMN_NAME ="
                                    " 'fence_statements')");
        ck_assert_str_eq(out, "fence_gtid text,fence_statements int,flip_gtid text,"
                              "reverse_gtid text,snapshot_gtid text\n");
        free(out);
    }
    for (unsigned s = 0; s <= 3; s++) {
        ck_assert_str_eq(pair_of(ctx, s), "MySQL003");
        ck_assert_int_eq(db_exists(h, "s1", s), 0);
        ck_assert_int_eq(db_exists(h, "s3", s), 0);
        check_rows_on_master(s);
    }
    ledger_check_all(ctx);
    {
        char *st = NULL;
        ck_assert_int_eq(shard_move_status(admin, &st), 0);
        ck_assert_ptr_nonnull(strstr(st, "\"phase\":\"done\""));
        shard_free(st);
    }
}
END_TEST

/* Cleanup waits for both halves of the target pair: with the standby's
 * SQL thread stopped the source is kept, the error says why, and a resume
 * after the standby runs again drops it with every row on both halves. */
START_TEST(standby_behind_keeps_source)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char *a, *b;

    ck_assert_str_eq(pair_of(ctx, 8), "MySQL003");
    ledger_fill(ctx, 8, 9, 40);
    free(sql_ok(h, "s2", "STOP SLAVE SQL_THREAD"));
    {
        /* As an operator runs it: shardctl says why, the pair's health and
         * the command that goes on. */
        const char *argv[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "move",
                              "--shards", "8-9", "--to", "MySQL001", "--yes", NULL};
        run_spec sp = {NULL, NULL, 0, 120};
        run_result res = run_cmd(&sp, argv);
        ck_assert_msg(res.status == 1, "exit %d: %s", res.status, res.err);
        ck_assert_msg(strstr(res.out, ": cleaning\n") &&
                      strstr(res.out, "target pair MySQL001: NOT healthy") &&
                      strstr(res.out, "source kept"), "%s", res.out);
        ck_assert_msg(strstr(res.err, "shardctl: warning: move ") &&
                      strstr(res.err, "SQL thread No") &&
                      strstr(res.err, "stopped in phase cleaning") &&
                      strstr(res.err, "to continue it: shardctl move resume "), "%s", res.err);
        ck_assert_msg(!strstr(res.err, "move abort"), "%s", res.err); /* after the flip */
        run_free(&res);
    }
    ck_assert_int_eq(db_exists(h, "s5", 8), 1);
    ck_assert_int_eq(db_exists(h, "s5", 9), 1);
    ck_assert_str_eq(pair_of(ctx, 8), "MySQL001"); /* flipped: served by the target */
    ledger_check_all(ctx);

    free(sql_ok(h, "s2", "START SLAVE"));
    resume_ok(&r);
    ck_assert_int_eq(r.source_dropped, 1);
    ck_assert_int_eq(r.target_pair_healthy, 1);
    ck_assert_int_eq(db_exists(h, "s5", 8), 0);
    /* Cleanup waited for the standby: it holds every moved row now. */
    a = sql_ok(h, "s1", "SELECT COUNT(*), SUM(CRC32(data)) FROM db00008.pins");
    b = sql_ok(h, "s2", "SELECT COUNT(*), SUM(CRC32(data)) FROM db00008.pins");
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    a = sql_ok(h, "s1", "SELECT COUNT(*), SUM(CRC32(data)) FROM db00009.pins");
    b = sql_ok(h, "s2", "SELECT COUNT(*), SUM(CRC32(data)) FROM db00009.pins");
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    check_rows_on_master(8);
    check_rows_on_master(9);
    ledger_check_all(ctx);
}
END_TEST

/* The fence is one statement whatever the number of tables: 8 shards of 6
 * tables each, fenced by one UPDATE of 8 rows; the tables keep their names. */
START_TEST(fence_is_one_statement)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char sql[300], *out;
    int rc;

    for (unsigned s = 0; s <= 7; s++)
        ck_assert_str_eq(pair_of(ctx, s), "MySQL003");
    ledger_fill(ctx, 0, 7, 3);
    o.flags = SHARD_MOVE_KEEP_SOURCE;
    rc = shard_move(admin, 0, 7, "MySQL002", &o, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_uint_eq(r.tables, 48);
    ck_assert_uint_eq(r.fence_attempts, 1);
    snprintf(sql, sizeof sql, "SELECT fence_statements FROM libshard_control.moves WHERE id = "
             "%llu", (unsigned long long)r.move_id);
    out = sql_ok(h, "s3", sql);
    ck_assert_str_eq(out, "1\n");
    free(out);
    /* The source keeps its copy (--keep-source) with every table under its
     * own name, and all 8 rows fenced by this move. */
    out = sql_ok(h, "s5", "SELECT COUNT(*), SUM(TABLE_NAME LIKE '\\_%') FROM"
                    " information_schema.TABLES"
                    " WHERE TABLE_SCHEMA BETWEEN 'db00000' AND 'db00007'");
    ck_assert_str_eq(out, "48\t0\n");
    free(out);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM libshard_control.fence WHERE fenced <> 0"
             " AND move_id = %llu", (unsigned long long)r.move_id);
    out = sql_ok(h, "s5", sql);
    ck_assert_str_eq(out, "8\n");
    free(out);
    for (unsigned s = 0; s <= 7; s++) {
        ck_assert_str_eq(pair_of(ctx, s), "MySQL002");
        check_rows_on_master(s);
    }
    ledger_check_all(ctx);
}
END_TEST

/* The target master killed and restarted while the move catches up: the
 * move reconnects, enters the phase again and completes in the same run. */
static int restarts;

static void restart_target(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)total;
    if (phase == SHARD_MOVE_CATCHUP && !restarts++) {
        ck_assert_int_eq(harness_kill(h, (const char *)payload), 0);
        ck_assert_int_eq(harness_restart(h, (const char *)payload), 0);
    }
}

START_TEST(transient_failure_retried_in_phase)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 10), "MySQL003");
    ledger_fill(ctx, 10, 11, 30);
    o.progress = restart_target;
    o.payload = (void *)"s3";
    rc = shard_move(admin, 10, 11, "MySQL002", &o, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_eq(restarts, 1);
    drop_rest(admin, &r);
    ck_assert_int_eq(r.source_dropped, 1);
    ck_assert_str_eq(pair_of(ctx, 10), "MySQL002");
    ck_assert_int_eq(pair_link_running("s3"), 1);
    ck_assert_int_eq(move_connections("s3"), 0);
    check_rows_on_master(10);
    check_rows_on_master(11);
    ledger_check_all(ctx);
}
END_TEST

/* Looking for unfinished moves fails closed: a master that cannot be asked
 * is an error naming it, never "no move" (failover relies on this). */
START_TEST(unfinished_moves_fail_closed)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_map *m = NULL;
    int rc;

    ck_assert_int_eq(shard_ctx_map(admin, &m), 0);
    ck_assert_int_eq(move_refuse_unfinished(admin, m, "MySQL001", "test", NULL), 0);
    ck_assert_int_eq(harness_kill(h, "s1"), 0);
    rc = move_refuse_unfinished(admin, m, "MySQL002", "test", NULL);
    ck_assert_msg(rc < 0 && rc != SHARD_EBUSY, "rc %d", rc);
    ck_assert_msg(strstr(shard_errmsg(), "MySQL001") &&
                      strstr(shard_errmsg(), "cannot tell whether a move"), "%s", shard_errmsg());
    rc = shard_move_resume(admin, 0, NULL, &r);
    ck_assert_msg(rc < 0 && rc != SHARD_ENOTFOUND, "rc %d", rc);
    ck_assert_msg(strstr(shard_errmsg(), "MySQL001"), "%s", shard_errmsg());
    ck_assert_int_eq(harness_restart(h, "s1"), 0);
    shard_map_free(m);
}
END_TEST


/* ---- verification by chunk checksums, cut-over controls -------------------- */

/* Some pair other than the one serving shard s. */
static const char *other_pair(unsigned s)
{
    static char name[65];
    const char *p = pair_of(ctx, s);
    snprintf(name, sizeof name, "%s", strcmp(p, "MySQL003") == 0 ? "MySQL001"
                                      : strcmp(p, "MySQL001") == 0 ? "MySQL002" : "MySQL003");
    return name;
}

/* The i-th and j-th remembered objects of shard s (type 1), as indices into w. */
static void two_on_shard(unsigned s, int *a, int *b)
{
    *a = *b = -1;
    for (int i = 0; i < nw && *b < 0; i++)
        if (shard_id_shard(w[i].id) == s && shard_id_type(w[i].id) == 1) {
            if (*a < 0)
                *a = i;
            else
                *b = i;
        }
    ck_assert_int_ge(*b, 0);
}

static void forget(uint64_t id)
{
    pthread_mutex_lock(&wlock);
    for (int k = 0; k < nw; k++)
        if (w[k].id == id) {
            w[k] = w[--nw];
            break;
        }
    pthread_mutex_unlock(&wlock);
}

/* Two rows of one chunk swap their contents on the target: each row's
 * hash covers its key, so the chunk's sum changes and both are named. */
START_TEST(verification_finds_swapped_rows)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char sql[600], target[65], source[65];
    unsigned s = 9;
    int a, b, rc;

    ledger_fill(ctx, s, s, 10);
    snprintf(source, sizeof source, "%s", pair_of(ctx, s));
    snprintf(target, sizeof target, "%s", other_pair(s));
    two_on_shard(s, &a, &b);
    /* Idempotent (the callback runs more than once in catch-up). */
    snprintf(sql, sizeof sql, "SET sql_log_bin = 0; UPDATE db%05u.pins SET data = CASE"
             " local_id WHEN %llu THEN '%s' ELSE '%s' END WHERE local_id IN (%llu, %llu)", s,
             (unsigned long long)shard_id_local(w[a].id), w[b].json, w[a].json,
             (unsigned long long)shard_id_local(w[a].id),
             (unsigned long long)shard_id_local(w[b].id));
    o.progress = tamper;
    o.payload = sql;
    tamper_server = master_of(target);
    rc = shard_move(admin, s, s, target, &o, &r, NULL);
    tamper_server = "s5";
    ck_assert_int_eq(rc, SHARD_EVERIFY);
    ck_assert_uint_eq(r.mismatches, 2);
    ck_assert_int_eq(r.source_dropped, 0);
    ck_assert_uint_ge(r.rows_verified, 10);
    /* As an operator would: the target's rows put right, the kept source
     * copy dropped. */
    snprintf(sql, sizeof sql, "UPDATE db%05u.pins SET data = CASE local_id WHEN %llu THEN"
             " '%s' ELSE '%s' END WHERE local_id IN (%llu, %llu)", s,
             (unsigned long long)shard_id_local(w[a].id), w[a].json, w[b].json,
             (unsigned long long)shard_id_local(w[a].id),
             (unsigned long long)shard_id_local(w[b].id));
    free(sql_ok(h, master_of(target), sql));
    snprintf(sql, sizeof sql, "DROP DATABASE db%05u", s);
    free(sql_ok(h, master_of(source), sql));
    ledger_check_all(ctx);
}
END_TEST

/* Many chunks (the move's chunk is 1000 rows): one changed row deep in a
 * table is named, and every row is counted once. */
START_TEST(verification_chunks_a_large_table)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char sql[600], target[65], source[65], *out;
    unsigned s = 10;
    uint64_t rows;
    int rc;

    snprintf(source, sizeof source, "%s", pair_of(ctx, s));
    snprintf(target, sizeof target, "%s", other_pair(s));
    /* 2500 rows straight into the source (three chunks and a bit). */
    snprintf(sql, sizeof sql, "INSERT INTO db%05u.pins (data) SELECT CONCAT('{\"bulk\":', seq,"
             " '}') FROM db%05u.seq_1_to_2500", s, s);
    free(sql_ok(h, master_of(source), sql));
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05u.pins", s);
    out = sql_ok(h, master_of(source), sql);
    rows = strtoull(out, NULL, 10);
    free(out);
    snprintf(sql, sizeof sql, "SET sql_log_bin = 0; UPDATE db%05u.pins SET data ="
             " '{\"bulk\":-1}' WHERE data = '{\"bulk\":2100}'", s);
    o.progress = tamper;
    o.payload = sql;
    tamper_server = master_of(target);
    o.copy_threads = 3;
    rc = shard_move(admin, s, s, target, &o, &r, NULL);
    tamper_server = "s5";
    ck_assert_int_eq(rc, SHARD_EVERIFY);
    ck_assert_uint_eq(r.mismatches, 1);
    /* The progress never read more than its total. */
    ck_assert_int_eq(verify_progress_seen, 1);
    ck_assert_int_eq(verify_progress_over, 0);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05u.pins", s);
    out = sql_ok(h, master_of(source), sql);
    ck_assert_uint_eq(strtoull(out, NULL, 10), rows);
    free(out);
    /* Every row of the shard's tables counted once: pins and the rest. */
    snprintf(sql, sizeof sql, "SELECT SUM(n) FROM (SELECT COUNT(*) n FROM db%05u.pins UNION"
             " ALL SELECT COUNT(*) FROM db%05u.user_likes_pins) x", s, s);
    out = sql_ok(h, master_of(source), sql);
    ck_assert_uint_le(strtoull(out, NULL, 10), r.rows_verified);
    free(out);
    /* The bulk rows were never remembered: gone from the target with the
     * changed one, and the kept copy dropped. */
    snprintf(sql, sizeof sql, "DELETE FROM db%05u.pins WHERE data LIKE '{\"bulk\":%%'", s);
    free(sql_ok(h, master_of(target), sql));
    snprintf(sql, sizeof sql, "DROP DATABASE db%05u", s);
    free(sql_ok(h, master_of(source), sql));
    ledger_check_all(ctx);
}
END_TEST


/* --postpone-cutover: caught up, the move waits while the file exists,
 * replicating the writes the source keeps taking; once it is gone, the
 * move cuts over with every write on the target. */
START_TEST(postponed_cutover_waits_for_the_file)
{
    static move_thread mv;
    char path[600], target[65], source[65], sql[200], *out;
    unsigned s = 11;
    pthread_t t;
    FILE *f;

    ledger_fill(ctx, s, s, 10);
    snprintf(source, sizeof source, "%s", pair_of(ctx, s));
    snprintf(target, sizeof target, "%s", other_pair(s));
    snprintf(path, sizeof path, "%s/postpone-cutover", harness_dir(h));
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fclose(f);
    memset(&mv, 0, sizeof mv);
    mv.ctx = admin;
    mv.first = mv.last = s;
    mv.target = target;
    mv.o = (shard_move_options)SHARD_MOVE_OPTIONS_INIT;
    mv.o.postpone_cutover_file = path;
    mv.o.progress = move_note_phase;
    atomic_store(&move_last_phase, -1);
    ck_assert_int_eq(pthread_create(&t, NULL, run_move_thread, &mv), 0);
    for (int i = 0; i < 1200 && atomic_load(&move_last_phase) != SHARD_MOVE_CATCHUP; i++)
        usleep(50000);
    ck_assert_int_eq(atomic_load(&move_last_phase), SHARD_MOVE_CATCHUP);
    /* Writes go on at the source and reach the target by replication,
     * round after round, while the move stays in catch-up, unfenced. */
    for (int round = 0; round < 3; round++) {
        uint64_t want;
        ledger_fill(ctx, s, s, 10);
        ck_assert_str_eq(pair_of(ctx, s), source);
        want = count_on(h, master_of(source), s);
        for (int i = 0; i < 200 && count_on(h, master_of(target), s) != want; i++)
            usleep(50000);
        ck_assert_uint_eq(count_on(h, master_of(target), s), want);
        ck_assert_int_eq(atomic_load(&move_last_phase), SHARD_MOVE_CATCHUP);
        out = sql_ok(h, master_of(target), "SELECT phase FROM libshard_control.moves ORDER BY id"
                                           " DESC LIMIT 1");
        ck_assert_int_eq(atoi(out), SHARD_MOVE_CATCHUP);
        free(out);
        snprintf(sql, sizeof sql, "SELECT fenced FROM libshard_control.fence WHERE db ="
                 " 'db%05u'", s);
        out = sql_ok(h, master_of(source), sql);
        ck_assert_str_eq(out, "0\n");
        free(out);
    }
    ck_assert_int_eq(unlink(path), 0);
    pthread_join(t, NULL);
    ck_assert_msg(mv.rc == 0, "move: %s", mv.err);
    ck_assert_int_eq(mv.r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(mv.r.mismatches, 0);
    drop_rest(admin, &mv.r);
    ck_assert_int_eq(mv.r.source_dropped, 1);
    ck_assert_str_eq(pair_of(ctx, s), target);
    ledger_check_all(ctx);
    check_rows_on_master(s);
}
END_TEST

/* Resumed after its flip, a move's verification has no snapshot of the
 * flip point: clients' writes on the target since (creates, updates,
 * mapping rows) are not mismatches, and a row changed behind the mover's
 * back before the flip still is. */
START_TEST(resumed_after_flip_ignores_later_writes)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char target[65], source[65], sql[600], *res = NULL;
    unsigned s = 9;
    int a, b, rc;

    ledger_fill(ctx, s, s, 20);
    snprintf(target, sizeof target, "%s", other_pair(s));
    move_killed_at(s, s, target, SHARD_MOVE_FLIPPED);
    ck_assert_str_eq(pair_of(ctx, s), target);
    /* After the flip: new objects, a patch, a mapping row, on the target. */
    ledger_fill(ctx, s, s, 10);
    two_on_shard(s, &a, &b);
    ck_assert_int_eq(shard_object_patch(ctx, w[a].id, "{\"after\":1}", 11, &res, NULL), 0);
    snprintf(w[a].json, sizeof w[a].json, "%s", res);
    shard_free(res);
    ck_assert_int_eq(shard_mapping_add(ctx, "user_likes_pins", w[b].id, w[a].id, 5), 0);
    rc = shard_move_resume(admin, 0, &o, &r);
    ck_assert_msg(rc == 0, "resume: %d %s", rc, shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r.mismatches, 0);
    drop_rest(admin, &r);
    ck_assert_int_eq(r.source_dropped, 1);
    ledger_check_all(ctx);
    check_rows_on_master(s);

    /* Back the other way, an object deleted after the flip: the source's
     * row is missing on the target, which a verification without a
     * snapshot of the flip point cannot tell from a lost row. No
     * mismatch, and the source is kept (and stays kept on a resume). */
    snprintf(source, sizeof source, "%s", pair_of(ctx, s));
    snprintf(target, sizeof target, "%s", other_pair(s));
    two_on_shard(s, &a, &b);
    move_killed_at(s, s, target, SHARD_MOVE_FLIPPED);
    ck_assert_int_eq(shard_object_delete(ctx, w[b].id, SHARD_DELETE_HARD), 0);
    forget(w[b].id);
    rc = shard_move_resume(admin, 0, &o, &r);
    ck_assert_msg(rc == 0, "resume: %d %s", rc, shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_int_eq(r.source_dropped, 0);
    ck_assert_int_eq(db_exists(h, master_of(source), s), 1);
    snprintf(sql, sizeof sql, "SELECT flags & %d FROM libshard_control.moves WHERE id = %llu",
             SHARD_MOVE_KEEP_SOURCE, (unsigned long long)r.move_id);
    res = sql_ok(h, master_of(target), sql);
    ck_assert_int_eq(atoi(res), SHARD_MOVE_KEEP_SOURCE);
    free(res);
    snprintf(sql, sizeof sql, "DROP DATABASE db%05u", s);
    free(sql_ok(h, master_of(source), sql));
    ledger_check_all(ctx);

    /* And again, with a row changed behind the mover's back before the
     * flip (it keeps its old updated_at: not a client's write): found. */
    snprintf(source, sizeof source, "%s", pair_of(ctx, s));
    snprintf(target, sizeof target, "%s", other_pair(s));
    two_on_shard(s, &a, &b);
    move_killed_at(s, s, target, SHARD_MOVE_FLIPPED);
    snprintf(sql, sizeof sql, "SET sql_log_bin = 0; UPDATE db%05u.pins SET data ="
             " '{\"evil\":1}', updated_at = updated_at WHERE local_id = %llu", s,
             (unsigned long long)shard_id_local(w[a].id));
    free(sql_ok(h, master_of(target), sql));
    ledger_fill(ctx, s, s, 5); /* and clients' writes after the flip, not counted */
    rc = shard_move_resume(admin, 0, &o, &r);
    ck_assert_int_eq(rc, SHARD_EVERIFY);
    ck_assert_uint_eq(r.mismatches, 1);
    ck_assert_int_eq(r.source_dropped, 0);
    snprintf(sql, sizeof sql, "UPDATE db%05u.pins SET data = '%s' WHERE local_id = %llu", s,
             w[a].json, (unsigned long long)shard_id_local(w[a].id));
    free(sql_ok(h, master_of(target), sql));
    snprintf(sql, sizeof sql, "DROP DATABASE db%05u", s);
    free(sql_ok(h, master_of(source), sql));
    ledger_check_all(ctx);
}
END_TEST


typedef struct cli_move {
    const char **argv;
    run_result res;
} cli_move;

static void *run_cli(void *arg)
{
    cli_move *c = arg;
    run_spec sp = {NULL, NULL, 0, 300};
    c->res = run_cmd(&sp, c->argv);
    return NULL;
}

/* The newest move's journaled phase on a target master (-1: none yet). */
static int newest_phase(const char *server)
{
    char *out = sql_ok(h, server, "SELECT IFNULL(MAX(id), 0) FROM libshard_control.moves");
    char sql[200];
    int phase = -1;
    if (strtoull(out, NULL, 10) != 0) {
        snprintf(sql, sizeof sql, "SELECT phase FROM libshard_control.moves WHERE id = %s", out);
        free(out);
        out = sql_ok(h, server, sql);
        phase = atoi(out);
    }
    free(out);
    return phase;
}

/* shardctl move --postpone-cutover FILE, with the other cut-over options:
 * the move holds in catch-up (said once on standard error) until the file
 * goes, then finishes. */
START_TEST(shardctl_postpone_cutover)
{
    char path[600], target[65], range[32], tm[16], *out;
    unsigned s = 11;
    cli_move c;
    pthread_t t;
    FILE *f;
    int phase = -1;

    ledger_fill(ctx, s, s, 5);
    snprintf(target, sizeof target, "%s", other_pair(s));
    snprintf(tm, sizeof tm, "%s", master_of(target)); /* master_of's buffer is reused */
    snprintf(range, sizeof range, "%u-%u", s, s);
    snprintf(path, sizeof path, "%s/postpone-cli", harness_dir(h));
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fclose(f);
    /* The journal may hold earlier moves: wait for a new one. */
    out = sql_ok(h, tm, "SELECT IFNULL(MAX(id), 0) FROM libshard_control.moves");
    {
        const char *argv[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "move",
                              "--shards", range, "--to", target, "--yes", "--max-lag-ms", "200",
                              "--fence-timeout", "1",
                              "--cutover-attempts", "3", "--postpone-cutover", path, NULL};
        uint64_t before = strtoull(out, NULL, 10);
        free(out);
        c.argv = argv;
        ck_assert_int_eq(pthread_create(&t, NULL, run_cli, &c), 0);
        for (int i = 0; i < 1200 && phase != SHARD_MOVE_CATCHUP; i++) {
            char sql[200];
            usleep(50000);
            snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM libshard_control.moves WHERE id >"
                     " %llu AND phase = %d", (unsigned long long)before, SHARD_MOVE_CATCHUP);
            out = sql_ok(h, tm, sql);
            phase = atoi(out) ? SHARD_MOVE_CATCHUP : -1;
            free(out);
        }
        ck_assert_int_eq(phase, SHARD_MOVE_CATCHUP);
        /* Caught up and holding: writes reach the target, the phase stays. */
        ledger_fill(ctx, s, s, 5);
        {
            uint64_t want = count_on(h, master_of(pair_of(ctx, s)), s);
            for (int i = 0; i < 200 && count_on(h, tm, s) != want; i++)
                usleep(50000);
            ck_assert_uint_eq(count_on(h, tm, s), want);
        }
        phase = newest_phase(tm);
        ck_assert_int_eq(unlink(path), 0);
        pthread_join(t, NULL);
    }
    ck_assert_msg(phase == SHARD_MOVE_CATCHUP, "phase %d while postponed: %s", phase,
                  c.res.err);
    ck_assert_msg(c.res.status == 0, "exit %d: %s", c.res.status, c.res.err);
    ck_assert_msg(strstr(c.res.out, ": done\n"), "%s", c.res.out);
    {
        const char *p = strstr(c.res.err, "the cut-over is postponed while");
        ck_assert_msg(p && !strstr(p + 1, "the cut-over is postponed while"), "%s", c.res.err);
    }
    run_free(&c.res);
    ck_assert_str_eq(pair_of(ctx, s), target);
    ledger_check_all(ctx);
    check_rows_on_master(s);
}
END_TEST

/* ---- the copy: how rows reach the target, exactly, and its throttle -------- */

/* The copy's tests start from settled pairs even when a test before them
 * failed part way: its unfinished moves aborted (or, after their flip,
 * finished) and every replication link started. */
static void copy_settle(void)
{
    static const char *const servers[] = {"s1", "s2", "s3", "s4", "s5", "s6"};
    static const char *const masters[] = {"s1", "s3", "s5"};

    for (size_t i = 0; i < sizeof servers / sizeof servers[0]; i++) {
        char *out = NULL;
        harness_sql(h, servers[i], "START ALL SLAVES", &out);
        free(out);
    }
    for (size_t i = 0; i < sizeof masters / sizeof masters[0]; i++) {
        char *out = NULL, *p;
        if (harness_sql(h, masters[i], "SELECT COUNT(*) FROM information_schema.TABLES WHERE"
                        " TABLE_SCHEMA = 'libshard_control' AND TABLE_NAME = 'moves'",
                        &out) != 0 || atoi(out) == 0) {
            free(out);
            continue;
        }
        free(out);
        out = NULL;
        if (harness_sql(h, masters[i], "SELECT id FROM libshard_control.moves WHERE phase < 7",
                        &out) != 0) {
            free(out);
            continue;
        }
        for (p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
            uint64_t id = strtoull(p, NULL, 10);
            if (id && shard_move_abort(admin, id) == SHARD_EBUSY)
                shard_move_resume(admin, id, NULL, NULL);
        }
        free(out);
    }
}

/* A context of its own whose log the test reads. */
static char copy_log[16384];
static pthread_mutex_t copy_log_lock = PTHREAD_MUTEX_INITIALIZER;

static void copy_log_fn(int level, const char *message, void *payload)
{
    size_t len;
    (void)level;
    (void)payload;
    pthread_mutex_lock(&copy_log_lock);
    len = strlen(copy_log);
    if (len + strlen(message) + 2 < sizeof copy_log)
        snprintf(copy_log + len, sizeof copy_log - len, "%s\n", message);
    pthread_mutex_unlock(&copy_log_lock);
}

static int copy_log_has(const char *what)
{
    int yes;
    pthread_mutex_lock(&copy_log_lock);
    yes = strstr(copy_log, what) != NULL;
    pthread_mutex_unlock(&copy_log_lock);
    return yes;
}

static shard_ctx *copy_ctx_open(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *c = NULL;
    harness_admin_options(&o); /* moves are the operators' */
    o.refresh_interval_ms = 0;
    o.log_level = SHARD_LOG_INFO;
    o.log = copy_log_fn;
    pthread_mutex_lock(&copy_log_lock);
    copy_log[0] = '\0';
    pthread_mutex_unlock(&copy_log_lock);
    ck_assert_msg(shard_ctx_open(&c, harness_map_path(h), &o) == 0, "%s", shard_errmsg());
    return c;
}

/* Another pair than the one shard s is on, whose master has no database
 * of s (a copy a failed test left behind). */
static const char *copy_other_pair(unsigned s)
{
    static char name[65];
    int p = atoi(pair_of(ctx, s) + 5) % 3 + 1; /* the next pair, else the one after */

    snprintf(name, sizeof name, "MySQL%03d", p);
    if (db_exists(h, master_of(name), s))
        snprintf(name, sizeof name, "MySQL%03d", p % 3 + 1);
    return name;
}

/* Every row of a shard's pins and user_likes_pins: ids, lengths and digests
 * of the bytes (what the server holds, not what a client shows). */
static char *shard_digest(const char *server, unsigned s)
{
    char sql[1200];
    snprintf(sql, sizeof sql,
             "SET SESSION group_concat_max_len = 1048576;"
             " SELECT CONCAT((SELECT COUNT(*) FROM db%05u.pins), ' ',"
             " IFNULL((SELECT GROUP_CONCAT(local_id, ':', LENGTH(data), ':', SHA2(data, 256),"
             " ':', updated_at ORDER BY local_id) FROM db%05u.pins), ''), ' ',"
             " IFNULL((SELECT GROUP_CONCAT(from_id, ':', to_id, ':', sequence ORDER BY from_id,"
             " to_id) FROM db%05u.user_likes_pins), ''))",
             s, s, s);
    return sql_ok(h, server, sql);
}

static const char *standby_of(const char *pair)
{
    static char sb[16];
    snprintf(sb, sizeof sb, "s%d", 2 * atoi(pair + 5));
    return sb;
}

/* Rows no text format takes lightly, written on shard s's source master. */
static void hostile_rows(unsigned s, size_t big)
{
    char sql[1600];
    const char *m = master_of(pair_of(ctx, s));

    snprintf(sql, sizeof sql,
             "INSERT INTO db%05u.pins (data) VALUES"
             /* NUL, tab, newline, CR, backslash, quotes, ^Z, \\N, 4-byte UTF-8 */
             " (CONCAT('{\"s\":\"', X'00090A0D5C22271A', '\\\\N', X'F09F9880', '\"}')),"
             " ('\\\\N'), (''), ('\\t\\n\\\\'), (X'5C'), (X'5C5C4E09'),"
             " ('{\"k\":\"a\\\\u0000b\\\\\"c\\\\\\\\d\\\\n\", \"e\":\"\xC3\xA9\"}'),"
             " (CONCAT(X'F0908080', REPEAT(X'5C0900', 100), X'0A'))",
             s);
    free(sql_ok(h, m, sql));
    if (big) {
        snprintf(sql, sizeof sql, "INSERT INTO db%05u.pins (data) VALUES (CONCAT('{\"b\":\"',"
                 " REPEAT(CONCAT('ab', X'5C09', 'cdefgh\\n'), %zu), '\"}'))", s, big / 11);
        free(sql_ok(h, m, sql));
    }
    snprintf(sql, sizeof sql, "INSERT INTO db%05u.user_likes_pins (from_id, to_id, sequence)"
             " VALUES (1, 2, -9223372036854775808), (1, 3, 0), (18446744073709551615, 1,"
             " 9223372036854775807)", s);
    free(sql_ok(h, m, sql));
    ck_assert_int_eq(harness_sync_standby(h, atoi(pair_of(ctx, s) + 5), 60), 0);
}

/* The copy's digests on both halves of the target are the source's. */
static void move_exact(unsigned s, const char *must_log, size_t big)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_ctx *mc;
    const char *to = copy_other_pair(s);
    char *before, *after, *after_sb;
    int rc;

    ledger_fill(ctx, s, s, 5);
    hostile_rows(s, big);
    before = shard_digest(master_of(pair_of(ctx, s)), s);
    mc = copy_ctx_open();
    rc = shard_move(mc, s, s, to, &o, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_int_eq(r.target_pair_healthy, 1);
    ck_assert_msg(copy_log_has(must_log), "log lacks \"%s\":\n%s", must_log, copy_log);
    shard_ctx_free(mc);
    ck_assert_str_eq(pair_of(ctx, s), to);
    ck_assert_int_eq(harness_sync_standby(h, atoi(to + 5), 60), 0);
    after = shard_digest(master_of(to), s);
    after_sb = shard_digest(standby_of(to), s);
    ck_assert_str_eq(after, before);
    ck_assert_str_eq(after_sb, before);
    free(before);
    free(after);
    free(after_sb);
    ck_assert_uint_ge(r.bytes_copied, big);
}

START_TEST(copy_hostile_bytes_exact)
{
    char *mp = sql_ok(h, master_of(copy_other_pair(5)), "SELECT @@max_allowed_packet");
    size_t big = (size_t)atol(mp) / 2 - 64 * 1024;
    free(mp);
    move_exact(5, "copying with LOAD DATA LOCAL INFILE", big);
}
END_TEST

/* local_infile OFF on the target: a warning that says so, the copy done
 * with array-bound INSERTs instead, every byte the same. */
START_TEST(copy_without_local_infile)
{
    const char *tm = master_of(copy_other_pair(6));
    char *mp = sql_ok(h, tm, "SELECT @@max_allowed_packet");
    size_t big = (size_t)atol(mp) / 2 - 64 * 1024;
    free(mp);
    free(sql_ok(h, tm, "SET GLOBAL local_infile = 0"));
    move_exact(6, "refuses LOAD DATA LOCAL INFILE", big);
    free(sql_ok(h, tm, "SET GLOBAL local_infile = 1"));
    ck_assert_msg(copy_log_has("copying with array-bound prepared INSERTs"), "%s", copy_log);
    ck_assert_int_eq(copy_log_has("copying with LOAD DATA"), 0);
}
END_TEST

/* Option strings are refused before anything starts. */
START_TEST(copy_throttle_options_checked)
{
    static const char *const bad[] = {"Threads_running", "Threads_running=0", "Thr-eads=5",
                                      "Threads_running=5x", "=5", "A=1,", "A=1,,B=2",
                                      "Threads_running=-1"};
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.max_load = bad[i];
        ck_assert_int_eq(shard_move(admin, 7, 7, copy_other_pair(7), &o, &r, NULL), SHARD_EINVAL);
        ck_assert_msg(strstr(shard_errmsg(), "max_load"), "%s", shard_errmsg());
    }
    /* A variable the server does not have: refused at the copy's start. */
    o.max_load = "No_such_status_variable=5";
    ck_assert_int_eq(shard_move(admin, 7, 7, copy_other_pair(7), &o, &r, NULL), SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "No_such_status_variable"), "%s", shard_errmsg());
    ck_assert_int_eq(shard_move_abort(admin, 0), 0);
}
END_TEST

typedef struct pace {
    pthread_mutex_t lock;
    double t0;            /* the copy phase's first call */
    uint64_t done, total; /* the copy's last call */
    uint64_t rate, batch; /* max_rows_per_second and its batch */
    int over;             /* calls that saw more rows than the rate allows */
    int phase;
} pace;

static void pace_seen(int phase, uint64_t done, uint64_t total, void *payload)
{
    pace *p = payload;
    pthread_mutex_lock(&p->lock);
    p->phase = phase;
    if (phase == SHARD_MOVE_COPYING) {
        if (p->t0 == 0)
            p->t0 = now_s();
        if (p->rate && (double)done > (now_s() - p->t0) * (double)p->rate + (double)p->batch)
            p->over++;
        p->done = done;
        p->total = total;
    }
    pthread_mutex_unlock(&p->lock);
}

typedef struct bg_move {
    shard_ctx *c;
    unsigned s;
    const char *to;
    shard_move_options o;
    shard_move_report r;
    int rc;
    char err[512];
    pthread_t thread;
} bg_move;

static void *bg_move_main(void *arg)
{
    bg_move *b = arg;

    b->r = (shard_move_report)SHARD_MOVE_REPORT_INIT;
    b->rc = shard_move(b->c, b->s, b->s, b->to, &b->o, &b->r, NULL);
    snprintf(b->err, sizeof b->err, "%s", shard_errmsg());
    return NULL;
}

/* --max-load: a source above the limit copies nothing until it is below. */
START_TEST(copy_paused_by_max_load)
{
    enum { IDLE = 32 };
    static pace p = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, 0, 0};
    static bg_move b;
    static char spec[64];
    const char *from = pair_of(ctx, 8), *src = master_of(from);
    MYSQL *idle[IDLE];
    char *out;
    long base;
    uint64_t seen;

    ledger_fill(ctx, 8, 8, 30);
    out = sql_ok(h, src, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE"
                         " VARIABLE_NAME = 'THREADS_CONNECTED'");
    base = atol(out);
    free(out);
    /* The mover's own source connections (about copy_threads + 4) stay
     * well below base + 20; the idle ones take it above. */
    snprintf(spec, sizeof spec, "Threads_connected=%ld", base + 20);
    for (int i = 0; i < IDLE; i++) {
        idle[i] = mysql_init(NULL);
        ck_assert_ptr_nonnull(mysql_real_connect(idle[i], "127.0.0.1", "shard",
                                                 getenv("LIBSHARD_PASSWORD"), NULL,
                                                 (unsigned)harness_port(h, src), NULL, 0));
    }
    memset(&b, 0, sizeof b);
    b.c = copy_ctx_open();
    b.s = 8;
    b.to = copy_other_pair(8);
    b.o = (shard_move_options)SHARD_MOVE_OPTIONS_INIT;
    b.o.max_load = spec;
    b.o.progress = pace_seen;
    b.o.payload = &p;
    ck_assert_int_eq(pthread_create(&b.thread, NULL, bg_move_main, &b), 0);
    for (int i = 0; i < 600 && !copy_log_has("copy paused"); i++)
        usleep(50000);
    ck_assert_msg(copy_log_has("copy paused"), "%s", copy_log);
    ck_assert_msg(copy_log_has("Threads_connected="), "%s", copy_log);
    /* Paused: the copy stays where it is while the source is above. */
    pthread_mutex_lock(&p.lock);
    seen = p.done;
    ck_assert_int_le(p.phase, SHARD_MOVE_COPYING);
    pthread_mutex_unlock(&p.lock);
    sleep(2);
    pthread_mutex_lock(&p.lock);
    ck_assert_uint_eq(p.done, seen);
    ck_assert_int_le(p.phase, SHARD_MOVE_COPYING);
    pthread_mutex_unlock(&p.lock);
    ck_assert_int_eq(copy_log_has("copy resumed"), 0);
    for (int i = 0; i < IDLE; i++)
        mysql_close(idle[i]);
    pthread_join(b.thread, NULL);
    ck_assert_msg(b.rc == 0, "move: %s", b.err);
    ck_assert_msg(copy_log_has("copy resumed"), "%s", copy_log);
    ck_assert_int_eq(b.r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(b.r.rows_copied, p.total);
    ck_assert_uint_eq(p.done, p.total);
    shard_ctx_free(b.c);
    ck_assert_str_eq(pair_of(ctx, 8), b.to);
    check_rows_on_master(8);
}
END_TEST

/* --max-rows-per-second: the progress never runs ahead of the rate by more
 * than one batch, and the copy completes. */
START_TEST(copy_rate_limited)
{
    static pace p = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, 0, 0};
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    int rc;

    ledger_fill(ctx, 9, 9, 200);
    o.max_rows_per_second = p.rate = 400;
    p.batch = 100; /* a quarter of a second's rows (libshard-move(7)) */
    o.progress = pace_seen;
    o.payload = &p;
    rc = shard_move(admin, 9, 9, copy_other_pair(9), &o, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_int_eq(p.over, 0);
    ck_assert_uint_eq(p.done, p.total);
    ck_assert_uint_ge(r.rows_copied, 200);
    check_rows_on_master(9);
}
END_TEST

/* shardctl's throttle options: bad ones are usage errors before anything
 * starts; good ones reach the move, which completes. */
START_TEST(copy_throttle_from_shardctl)
{
    static const char *const bad[] = {"--max-load=Threads_running", "--max-load=Threads_running=0",
                                      "--max-load=a-b=1", "--max-rows-per-second=0",
                                      "--max-rows-per-second=x"};
    char to[65];
    run_spec sp = {NULL, NULL, 0, 120};

    ledger_fill(ctx, 10, 10, 20);
    snprintf(to, sizeof to, "%s", copy_other_pair(10));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "move", "--shards", "10-10", "--to",
                              to, "--yes", bad[i], NULL};
        run_result res = run_cmd(&sp, argv);
        ck_assert_msg(res.status == 2, "%s: exit %d: %s", bad[i], res.status, res.err);
        ck_assert_msg(strstr(res.err, bad[i] + 2) || strstr(res.err, "--max"), "%s", res.err);
        run_free(&res);
    }
    ck_assert_int_eq(db_exists(h, master_of(to), 10), 0); /* nothing started */
    {
        const char *argv[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "move", "--shards", "10-10", "--to",
                              to, "--yes", "--max-rows-per-second", "100000", "--max-load",
                              "Threads_running=100000,Threads_connected=100000", NULL};
        run_result res = run_cmd(&sp, argv);
        ck_assert_msg(res.status == 0, "exit %d: %s", res.status, res.err);
        run_free(&res);
    }
    ck_assert_str_eq(pair_of(ctx, 10), to);
    check_rows_on_master(10);
}
END_TEST

/* A master killed and restarted while verification compares checksums
 * (both servers have a statement in flight): the move reconnects, verifies
 * again and completes in the same run, every row right. The source going
 * leaves the target's snapshots of the flip point open, and verification
 * compares with them again; the target going takes them, and verification
 * starts over as a resumed one does. */
static int verify_restarts;
static uint64_t verify_left; /* rows still to verify when the server went */

static void restart_verifying(int phase, uint64_t done, uint64_t total, void *payload)
{
    if (phase == SHARD_MOVE_VERIFYING && done > 0 && !verify_restarts) {
        verify_restarts++;
        verify_left = total - done;
        ck_assert_int_eq(harness_kill(h, (const char *)payload), 0);
        ck_assert_int_eq(harness_restart(h, (const char *)payload), 0);
    }
}

static void restarted_mid_verification(unsigned s, bool kill_source, const char *logged)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_ctx *vmover;
    char source[65], target[65], smaster[16], killed[16];
    int rc;

    snprintf(source, sizeof source, "%s", pair_of(ctx, s));
    snprintf(target, sizeof target, "%s", other_pair(s));
    snprintf(smaster, sizeof smaster, "%s", master_of(source));
    snprintf(killed, sizeof killed, "%s", kill_source ? smaster : master_of(target));
    ledger_fill(ctx, s, s, 2500); /* three chunks and a half: several checksum statements */
    verify_restarts = 0;
    verify_left = 0;
    o.progress = restart_verifying;
    o.payload = killed;
    o.copy_threads = 2;
    vmover = copy_ctx_open();
    rc = shard_move(vmover, s, s, target, &o, &r, NULL);
    shard_ctx_free(vmover);
    shard_ctx_reload(admin); /* the later tests move with it */
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_eq(verify_restarts, 1);
    ck_assert_uint_gt(verify_left, 0); /* killed with chunks still to compare */
    ck_assert_msg(copy_log_has(logged), "%s", copy_log);
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_uint_ge(r.rows_verified, 2500);
    drop_rest(admin, &r);
    ck_assert_int_eq(r.source_dropped, 1);
    ck_assert_str_eq(pair_of(ctx, s), target);
    ck_assert_int_eq(db_exists(h, smaster, s), 0);
    ck_assert_int_eq(pair_link_running(killed), 1);
    check_rows_on_master(s);
    ledger_check_all(ctx);
}

START_TEST(source_restarted_mid_verification)
{
    restarted_mid_verification(11, true, "verifying again against the target's snapshots of "
                               "the flip point");
}
END_TEST

START_TEST(target_restarted_mid_verification)
{
    restarted_mid_verification(11, false, "verifying again as a resumed verification does");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_move");
    TCase *tc = tcase_create("move"), *tcc;
    int failed;

    if (move_test_start(&h, &ctx, &admin))
        return 1;
    /* Later tests build on the map earlier ones published: run in order,
     * in this process. */
    tcase_set_timeout(tc, 300);
    tcase_add_tests(tc, TESTS(move_under_concurrent_writes, dry_run_changes_nothing,
                              killed_in_each_phase_then_resumed, aborted_before_flip,
                              long_transaction_delays_fence, target_restart_during_catchup,
                              verification_finds_tampering, merge_two_pairs_onto_one,
                              standby_behind_keeps_source, fence_is_one_statement,
                              transient_failure_retried_in_phase, unfinished_moves_fail_closed,
                              verification_finds_swapped_rows, verification_chunks_a_large_table,
                              source_restarted_mid_verification,
                              target_restarted_mid_verification,
                              postponed_cutover_waits_for_the_file,
                              resumed_after_flip_ignores_later_writes, shardctl_postpone_cutover));
    suite_add_tcase(s, tc);
    /* The copy's own: each picks its shard's current pair, any map will do. */
    tcc = tcase_create("copy");
    tcase_set_timeout(tcc, 300);
    tcase_add_unchecked_fixture(tcc, copy_settle, NULL);
    tcase_add_tests(tcc, TESTS(copy_hostile_bytes_exact, copy_without_local_infile,
                               copy_throttle_options_checked, copy_paused_by_max_load,
                               copy_rate_limited, copy_throttle_from_shardctl));
    suite_add_tcase(s, tcc);
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(admin);
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
