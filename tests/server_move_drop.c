/*
 * The source's drop, off the move's critical path (libshard-move(7),
 * "Dropping the source"): a move returns done before its source's copies
 * are dropped, with writers running; move status says what is left to
 * drop; a mover killed (SIGKILL) between two drops leaves a move that a
 * resume finishes; a move back onto the old source pair while drops are
 * pending finishes them first and drops nothing of its own; every
 * acknowledged write stays readable; a revert drops the target's copies
 * the same way, one at a time; a resume
 * finishes a revert stopped between two drops (status counts what is
 * left; a finish is refused).
 */
#include "harness.h"
#include "move_util.h"
#include "run_cmd.h"

#include <check.h>
#include <jansson.h>
#include <libshard.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern int (*shard__move_hook)(uint64_t move_id, const char *point);

static harness *h;
static shard_ctx *ctx;   /* the application's context, in this process */
static shard_ctx *admin; /* the operator's: moves */

/* The move's line of shard_move_status, as a new JSON reference. */
static json_t *status_of(uint64_t id)
{
    char *text = NULL;
    json_t *found = NULL;

    ck_assert_msg(shard_move_status(admin, &text) == 0, "%s", shard_errmsg());
    for (char *line = text; line && *line && !found;) {
        char *nl = strchr(line, '\n');
        json_t *o;
        if (nl)
            *nl = '\0';
        o = json_loads(line, 0, NULL);
        if (o && (uint64_t)json_integer_value(json_object_get(o, "id")) == id)
            found = json_incref(o);
        json_decref(o);
        line = nl ? nl + 1 : NULL;
    }
    shard_free(text);
    ck_assert_msg(found, "move %llu is not in move status", (unsigned long long)id);
    return found;
}

static void assert_status(uint64_t id, const char *phase, const char *pending)
{
    json_t *o = status_of(id);
    const char *got = json_string_value(json_object_get(o, "drop_pending"));

    ck_assert_str_eq(json_string_value(json_object_get(o, "phase")), phase);
    if (pending)
        ck_assert_msg(got && strcmp(got, pending) == 0, "drop_pending %s, not %s",
                      got ? got : "(none)", pending);
    else
        ck_assert_msg(!got, "drop_pending %s", got);
    json_decref(o);
}

/* Rows of shard's pins on server (-1: no such database). */
static int rows_on(const char *server, unsigned shard)
{
    char sql[120], *out;
    int n;

    if (!db_exists(h, server, shard))
        return -1;
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05u.pins", shard);
    out = sql_ok(h, server, sql);
    n = atoi(out);
    free(out);
    return n;
}

/* ---- a resume killed between two drops ---------------------------------------- */

static long drops_before = -1; /* in the child: dropped when its run began */

static void stop_after_one_drop(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)total;
    (void)payload;
    if (phase != SHARD_MOVE_DROPPING)
        return;
    if (drops_before < 0)
        drops_before = (long)done; /* the run's first report: what it found dropped */
    else if ((long)done == drops_before + 1)
        child_stop_here(); /* one more dropped, the next not yet: SIGKILLed here */
}

static int resume_body(shard_ctx *mc, void *arg)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    uint64_t id = *(uint64_t *)arg;

    o.progress = stop_after_one_drop;
    return shard_move_resume(mc, id, &o, NULL) == 0 ? 1 : 2;
}

/* The hook, failing the second database's drop point once: the state a
 * kill there leaves, made certain. */
static int hook_calls;

static int fail_second_drop(uint64_t move_id, const char *point)
{
    (void)move_id;
    if (strcmp(point, "source database dropped") == 0 && ++hook_calls == 2)
        return SHARD_ESERVER;
    return 0;
}

/* A revert's drops of the target's copies: at each database's point, how
 * many of the range's databases the target master (s5) still has. */
static int revert_left_at[8], revert_points;
static int revert_fail_at; /* fail the nth point (0: none) */
static unsigned revert_first, revert_last;
static uint64_t revert_drop_total;

static int watch_revert_drops(uint64_t move_id, const char *point)
{
    int left = 0;

    (void)move_id;
    if (strcmp(point, "source database dropped") != 0)
        return 0;
    for (unsigned s = revert_first; s <= revert_last; s++)
        left += db_exists(h, "s5", s);
    if (revert_points < 8)
        revert_left_at[revert_points] = left;
    revert_points++;
    return revert_points == revert_fail_at ? SHARD_ESERVER : 0;
}

static void revert_progress(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)payload;
    if (phase == SHARD_MOVE_DROPPING)
        revert_drop_total = total;
}

/* ---- tests ---------------------------------------------------------------------- */

/* The move returns done with the source whole; status shows the drops
 * pending; a resume drops them (standby too); writers never fail. */
START_TEST(done_before_the_drops)
{
    static const unsigned shards[4][2] = {{0, 1}, {1, 2}, {0, 4}, {1, 8}};
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, d = SHARD_MOVE_REPORT_INIT;
    static load l;
    int rc;

    ledger_fill(ctx, 0, 1, 200);
    ck_assert_str_eq(pair_of(ctx, 0), "MySQL001");
    load_start(&l, ctx, shards, 1000, 200000);
    rc = shard_move(admin, 0, 1, "MySQL002", &o, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_int_eq(r.source_dropped, 0);
    ck_assert_int_eq(r.target_pair_healthy, 1);
    ck_assert_str_eq(pair_of(ctx, 0), "MySQL002");
    /* Returned before the drops: both databases still on both halves. */
    ck_assert_int_eq(db_exists(h, "s1", 0), 1);
    ck_assert_int_eq(db_exists(h, "s1", 1), 1);
    ck_assert_int_eq(db_exists(h, "s2", 1), 1);
    assert_status(r.move_id, "dropping", "2 of 2 databases on MySQL001");
    rc = shard_move_resume(admin, r.move_id, &o, &d);
    load_stop(&l, 200000);
    ck_assert_msg(rc == 0, "resume: %s", shard_errmsg());
    ck_assert_int_eq(d.phase, SHARD_MOVE_DONE);
    ck_assert_int_eq(d.source_dropped, 1);
    assert_status(r.move_id, "done", NULL);
    ck_assert_int_eq(db_exists(h, "s1", 0), 0);
    ck_assert_int_eq(db_exists(h, "s1", 1), 0);
    ck_assert_int_eq(db_exists_settled(h, "s2", 0, 0), 0);
    ck_assert_int_eq(db_exists_settled(h, "s2", 1, 0), 0);
    ledger_check_all(ctx);
    check_both_halves(h, ctx, 0);
    check_both_halves(h, ctx, 1);
}
END_TEST

/* A drop run stopped between two databases (a failure injected there,
 * then a real SIGKILL) leaves some dropped, some not; status counts them;
 * a resume drops the rest and nothing else. */
START_TEST(killed_between_drops_then_resumed)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, d = SHARD_MOVE_REPORT_INIT;
    uint64_t id;
    int status, rc;

    ledger_fill(ctx, 8, 11, 50);
    ck_assert_str_eq(pair_of(ctx, 8), "MySQL003");
    rc = shard_move(admin, 8, 11, "MySQL001", &o, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_eq(r.source_dropped, 0);
    id = r.move_id;
    assert_status(id, "dropping", "4 of 4 databases on MySQL003");

    /* Injected: the second drop's point fails: two databases dropped. */
    hook_calls = 0;
    shard__move_hook = fail_second_drop;
    rc = shard_move_resume(admin, id, &o, &d);
    shard__move_hook = NULL;
    ck_assert_int_ne(rc, 0);
    ck_assert_int_eq(d.source_dropped, 0);
    ck_assert_int_eq(db_exists(h, "s5", 8), 0);
    ck_assert_int_eq(db_exists(h, "s5", 9), 0); /* dropped, then its point failed */
    ck_assert_int_eq(db_exists(h, "s5", 10), 1);
    assert_status(id, "dropping", "2 of 4 databases on MySQL003");

    /* SIGKILLed after one more drop. */
    ck_assert_int_eq(child_killed(h, resume_body, &id, &status), 1);
    ck_assert_int_eq(db_exists(h, "s5", 10), 0);
    ck_assert_int_eq(db_exists(h, "s5", 11), 1);
    assert_status(id, "dropping", "1 of 4 databases on MySQL003");

    /* Resumed (the only unfinished move): the rest goes, the target stays. */
    rc = shard_move_resume(admin, 0, &o, &d);
    ck_assert_msg(rc == 0, "resume: %s", shard_errmsg());
    ck_assert_int_eq(d.source_dropped, 1);
    assert_status(id, "done", NULL);
    for (unsigned s = 8; s <= 11; s++) {
        ck_assert_int_eq(db_exists(h, "s5", s), 0);
        ck_assert_int_eq(db_exists_settled(h, "s6", s, 0), 0);
        ck_assert_str_eq(pair_of(ctx, s), "MySQL001");
        check_both_halves(h, ctx, s);
    }
    ledger_check_all(ctx);
}
END_TEST

/* Moved away and straight back while the drops are pending (and one
 * dropped already): the move back finishes them first, then copies;
 * nothing of its copy is dropped, nothing acknowledged is lost. */
START_TEST(move_back_while_drops_pending)
{
    static const unsigned shards[4][2] = {{4, 5}, {5, 6}, {4, 7}, {5, 0}};
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, back = SHARD_MOVE_REPORT_INIT,
                      d = SHARD_MOVE_REPORT_INIT;
    static load l;
    uint64_t first_id;
    int rc;

    ledger_fill(ctx, 4, 5, 100);
    ck_assert_str_eq(pair_of(ctx, 4), "MySQL002");
    rc = shard_move(admin, 4, 5, "MySQL003", &o, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    first_id = r.move_id;
    ck_assert_int_eq(r.source_dropped, 0);
    /* One of the two dropped, the other left (an interrupted drop run). */
    hook_calls = 1;
    shard__move_hook = fail_second_drop;
    rc = shard_move_resume(admin, first_id, &o, &d);
    shard__move_hook = NULL;
    ck_assert_int_ne(rc, 0);
    ck_assert_int_eq(db_exists(h, "s3", 4), 0);
    ck_assert_int_eq(db_exists(h, "s3", 5), 1);

    load_start(&l, ctx, shards, 1000, 200000);
    ledger_fill(ctx, 4, 5, 20); /* on the target now */
    rc = shard_move(admin, 4, 5, "MySQL002", &o, &back, NULL);
    ck_assert_msg(rc == 0, "move back: %s", shard_errmsg());
    ck_assert_int_eq(back.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(back.mismatches, 0);
    assert_status(first_id, "done", NULL);
    ck_assert_str_eq(pair_of(ctx, 4), "MySQL002");
    ck_assert_str_eq(pair_of(ctx, 5), "MySQL002");
    assert_status(back.move_id, "dropping", "2 of 2 databases on MySQL003");
    drop_rest(admin, &back);
    load_stop(&l, 200000);
    ck_assert_int_eq(db_exists(h, "s5", 4), 0);
    ck_assert_int_eq(db_exists(h, "s5", 5), 0);
    /* The copies it made on the old source pair are whole. */
    ck_assert_int_eq(rows_on("s3", 4), ledger_rows(4));
    ck_assert_int_eq(rows_on("s3", 5), ledger_rows(5));
    ledger_check_all(ctx);
    check_both_halves(h, ctx, 4);
    check_both_halves(h, ctx, 5);
}
END_TEST

/* shardctl move prints done, then drops the source in the same process. */
START_TEST(shardctl_move_drops_after_done)
{
    const char *argv[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "move",
                          "--shards", "6-6", "--to", "MySQL003", "--yes", NULL};
    run_spec spec = {NULL, NULL, 0, 120};
    run_result res;

    ledger_fill(ctx, 6, 6, 20);
    ck_assert_str_eq(pair_of(ctx, 6), "MySQL002");
    res = run_cmd(&spec, argv);
    ck_assert_msg(res.status == 0, "%s%s", res.out, res.err);
    ck_assert_msg(strstr(res.out, ": done\n") &&
                      strstr(res.out, "source left to drop (dropping it now)") &&
                      strstr(res.out, "source MySQL002: shards 6-6 dropped in "),
                  "%s", res.out);
    ck_assert_msg(strstr(res.err, "move: dropping"), "%s", res.err);
    run_free(&res);
    ck_assert_int_eq(db_exists(h, "s3", 6), 0);
    ck_assert_str_eq(pair_of(ctx, 6), "MySQL003");
    ledger_check_all(ctx);
}
END_TEST

/*
 * A revert drops the target's copies as a move drops its source: one
 * database at a time, paced (the target pair may serve other shards'
 * writers), each only while the target master still has it; a revert
 * stopped between two drops is completed by a resume, which drops the
 * rest. The revert returns reverted once they are gone.
 */
START_TEST(revert_drops_the_copies_one_at_a_time)
{
    static const unsigned shards[4][2] = {{6, 6}, {6, 6}, {0, 1}, {8, 9}};
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, rr = SHARD_MOVE_REPORT_INIT;
    static load l;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    ck_assert_str_eq(pair_of(ctx, 3), "MySQL001");
    ck_assert_str_eq(pair_of(ctx, 6), "MySQL003");
    ledger_fill(ctx, 2, 3, 40);
    move_reversible(admin, 2, 3, "MySQL003", 600, &r);
    ledger_fill(ctx, 2, 3, 10); /* on the target: the revert brings them back */

    /* Writers on MySQL003's own shard (6) while its copies go. */
    load_start(&l, ctx, shards, 1000, 200000);
    revert_first = 2;
    revert_last = 3;
    revert_points = 0;
    revert_fail_at = 0;
    revert_drop_total = 0;
    o.progress = revert_progress;
    shard__move_hook = watch_revert_drops;
    rc = shard_move_revert(admin, r.move_id, &o, &rr);
    shard__move_hook = NULL;
    load_stop(&l, 200000);
    ck_assert_msg(rc == 0, "revert: %s", shard_errmsg());
    ck_assert_int_eq(rr.phase, SHARD_MOVE_REVERTED);
    ck_assert_int_eq(rr.source_dropped, 1);
    /* One point per database, the other still there at the first. */
    ck_assert_int_eq(revert_points, 2);
    ck_assert_int_eq(revert_left_at[0], 1);
    ck_assert_int_eq(revert_left_at[1], 0);
    ck_assert_uint_eq(revert_drop_total, 2);
    for (unsigned s = 2; s <= 3; s++) {
        ck_assert_int_eq(db_exists(h, "s5", s), 0);
        ck_assert_int_eq(db_exists_settled(h, "s6", s, 0), 0);
        ck_assert_str_eq(pair_of(ctx, s), "MySQL001");
        check_both_halves(h, ctx, s);
    }

    /* Again, stopped after the first drop: a resume drops the other. */
    move_reversible(admin, 2, 3, "MySQL003", 600, &r);
    ledger_fill(ctx, 2, 3, 5);
    revert_points = 0;
    revert_fail_at = 1;
    shard__move_hook = watch_revert_drops;
    rc = shard_move_revert(admin, r.move_id, &o, &rr);
    shard__move_hook = NULL;
    ck_assert_int_ne(rc, 0);
    ck_assert_int_eq(revert_points, 1);
    ck_assert_int_eq(revert_left_at[0], 1);
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001"); /* flipped back before the drops */
    /* Status counts what is left on the target; a finish is refused (a
     * revert is resumed, never finished forward). */
    assert_status(r.move_id, "reverting", "1 of 2 databases on MySQL003");
    rc = shard_move_finish(admin, r.move_id, NULL, &rr);
    ck_assert_msg(rc == SHARD_EBUSY, "shard_move_finish of a revert stopped between two "
                  "drops: %d, phase %s", rc, shard_move_phase_name(rr.phase));
    ck_assert_int_eq(db_exists(h, "s5", 3), 1);
    rc = shard_move_resume(admin, r.move_id, NULL, &rr);
    ck_assert_msg(rc == 0, "resume of the revert: %s", shard_errmsg());
    ck_assert_int_eq(rr.phase, SHARD_MOVE_REVERTED);
    ck_assert_int_eq(rr.source_dropped, 1);
    for (unsigned s = 2; s <= 3; s++) {
        ck_assert_int_eq(db_exists(h, "s5", s), 0);
        ck_assert_int_eq(db_exists_settled(h, "s6", s, 0), 0);
        check_both_halves(h, ctx, s);
    }
    ledger_check_all(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_move_drop");
    TCase *tc = tcase_create("drop");
    int failed;

    if (move_test_start(&h, &ctx, &admin))
        return 1;
    /* In order, in this process: later tests move from where earlier ones left. */
    tcase_set_timeout(tc, 300);
    tcase_add_tests(tc, TESTS(done_before_the_drops, killed_between_drops_then_resumed,
                              move_back_while_drops_pending, shardctl_move_drops_after_done,
                              revert_drops_the_copies_one_at_a_time));
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(admin);
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
