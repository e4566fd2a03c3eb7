/*
 * A forced failover of a move's source pair while the move waits in
 * catch-up (libshard-move(7), "Failover during a move";
 * shard_pair_failover(3)): the mover is killed there, the source master
 * is killed, `shardctl failover --force` names the unfinished move and
 * what to do, and `shardctl move resume` goes on from the promoted master
 * the map names: the move ends on the target with every acknowledged write,
 * those made on the promoted master before the resume included.
 */
#include "check_util.h"
#include "harness.h"
#include "move_util.h"
#include "run_cmd.h"

#include <check.h>
#include <libshard.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static harness *h;
static shard_ctx *ctx;   /* the application's context (the map's account) */
static shard_ctx *admin; /* the operators' */
static char postpone[300];

/* In the mover's child: stopped (and killed) once it waits in catch-up. */
static void stop_in_catchup(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)total;
    (void)payload;
    if (phase == SHARD_MOVE_CATCHUP)
        child_stop_here();
}

static int parked_move(shard_ctx *mc, void *arg)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;

    (void)arg;
    o.postpone_cutover_file = postpone;
    o.progress = stop_in_catchup;
    return shard_move(mc, 2, 3, "MySQL003", &o, &r, NULL) == 0 ? 0 : 1;
}

START_TEST(resume_after_forced_failover_of_the_source)
{
    const char *fo[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "failover", "MySQL001",
                        "--force", NULL};
    const char *resume[] = {"--map", harness_map_path(h), HARNESS_ADMIN_ARGS, "move", "resume",
                            NULL};
    run_spec sp = {NULL, NULL, 0, 300};
    run_result res;
    char *st = NULL, id[32] = "", want[64];
    const char *at;
    FILE *f;
    int status = -1;

    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    ledger_fill(ctx, 2, 3, 40);
    snprintf(postpone, sizeof postpone, "%s/postpone", harness_dir(h));
    ck_assert_ptr_nonnull(f = fopen(postpone, "w"));
    fclose(f);
    ck_assert_msg(child_killed(h, parked_move, NULL, &status) == 1,
                  "the mover exited (%d) before it caught up", status);
    /* The move's id, from its journal. */
    shard_move_status(admin, &st); /* SHARD_EPARTIAL, should a master not answer */
    ck_assert_ptr_nonnull(st);
    ck_assert_ptr_nonnull(at = strstr(st, "\"id\":"));
    snprintf(id, sizeof id, "%llu", strtoull(at + 5, NULL, 10));
    shard_free(st);
    ledger_fill(ctx, 2, 3, 10); /* on the source, carried to the target */
    ck_assert_int_eq(harness_sync_standby(h, 1, 60), 0);
    ck_assert_int_eq(harness_kill(h, "s1"), 0);

    res = run_cmd(&sp, fo);
    snprintf(want, sizeof want, "unfinished move %s", id);
    ck_assert_msg(res.status == 0 && strstr(res.err, want) &&
                  strstr(res.err, "shardctl move resume") && strstr(res.err, "shardctl move abort"),
                  "exit %d: %s%s", res.status, res.out, res.err);
    run_free(&res);
    /* Writes on the promoted master before the resume: the copy must get them. */
    ledger_fill(ctx, 2, 3, 10);
    unlink(postpone);
    res = run_cmd(&sp, resume);
    ck_assert_msg(res.status == 0 && strstr(res.out, ": done"), "exit %d: %s%s", res.status,
                  res.out, res.err);
    run_free(&res);
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL003");
    ck_assert_str_eq(pair_of(ctx, 3), "MySQL003");
    ledger_check_all(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_move_failover");
    int failed;

    if (move_test_start(&h, &ctx, &admin))
        return 1;
    tcase_set_timeout(tcase_of(s, "failover", TESTS(resume_after_forced_failover_of_the_source)),
                      600);
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(admin);
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
