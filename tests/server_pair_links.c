/*
 * The pair's own link on a move's target master survives another move's
 * replication setup. Two moves into one target pair: the first is caught
 * up (its cut-over postponed) and streams the writes of its source's
 * domain into the target master, while the target's standby, delayed
 * (MASTER_DELAY), has not logged any of them yet; the second move's setup
 * stops every connection on the target master and starts them again
 * (libshard-move(7), "Many moves at once").
 *
 * Restarted, the pair's link asks the standby for the master's
 * gtid_slave_pos, which holds the first move's position in a domain the
 * standby has never logged. MariaDB checks such a position again at the
 * first event of that domain the standby sends, against what the standby
 * has logged by then: ahead of it, the link stops with error 1236 ("...
 * which is not in the master's binlog"). The mover waits for the standby
 * to hold what its master logged before it restarts the link.
 *
 * Checked: both moves complete with a healthy target pair, and both links
 * of the target pair run without an error afterwards.
 */
#include "harness.h"
#include "check_util.h"

#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHARDS 8
#define DELAY_S 15 /* the target standby's MASTER_DELAY */

static harness *h;
static shard_ctx *app;

static void set_delay(const char *server, int seconds)
{
    char sql[200];

    snprintf(sql, sizeof sql, "STOP SLAVE; CHANGE MASTER TO master_delay = %d; START SLAVE",
             seconds);
    free(sql_ok(h, server, sql));
}

/* The pair's own link of a server: both threads running, and no error
 * (the row of SHOW SLAVE STATUS, tab-separated, without the names). */
static void link_ok(const char *server)
{
    char *out = sql_ok(h, server, "SHOW SLAVE STATUS");

    ck_assert_msg(strstr(out, "\tYes\tYes\t") && !strstr(out, "rror"), "%s's pair link: %s",
                  server, out);
    free(out);
}

START_TEST(second_move_setup_keeps_the_pair_link)
{
    static move_thread m1, m2;
    char path[600], *pos;
    pthread_t t;
    FILE *f;

    /* Shard 4 (MySQL002) and shard 0 (MySQL001) have rows. */
    for (int i = 0; i < 5; i++) {
        uint64_t id;
        ck_assert_msg(shard_object_create(app, 1, 4, "{\"a\":1}", 7, &id) == 0, "%s",
                      shard_errmsg());
        ck_assert_msg(shard_object_create(app, 1, 0, "{\"a\":1}", 7, &id) == 0, "%s",
                      shard_errmsg());
    }
    set_delay("s6", DELAY_S);

    /* The first move, MySQL002 -> MySQL003, stays caught up. */
    snprintf(path, sizeof path, "%s/postpone-cutover", harness_dir(h));
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fclose(f);
    m1 = (move_thread){.h = h, .first = 4, .last = 4, .target = "MySQL003",
                 .o = (shard_move_options)SHARD_MOVE_OPTIONS_INIT};
    m1.o.postpone_cutover_file = path;
    m1.o.progress = move_note_phase;
    ck_assert_int_eq(pthread_create(&t, NULL, run_move_thread, &m1), 0);
    for (int i = 0; i < 1200 && atomic_load(&move_last_phase) != SHARD_MOVE_CATCHUP; i++)
        usleep(50000);
    ck_assert_int_eq(atomic_load(&move_last_phase), SHARD_MOVE_CATCHUP);

    /* Writes at its source reach the target master through its connection;
     * the delayed standby has not applied them. */
    for (int i = 0; i < 20; i++) { /* apart: the standby logs them apart too */
        uint64_t id;
        ck_assert_msg(shard_object_create(app, 1, 4, "{\"b\":2}", 7, &id) == 0, "%s",
                      shard_errmsg());
        usleep(100000);
    }
    for (int i = 0; i < 600 && count_on(h, "s5", 4) != count_on(h, "s3", 4); i++)
        usleep(50000);
    ck_assert_uint_eq(count_on(h, "s5", 4), count_on(h, "s3", 4));
    pos = sql_ok(h, "s6", "SELECT @@gtid_binlog_pos");
    pos[strcspn(pos, "\n")] = '\0';
    printf("target standby s6 at \"%s\" (MySQL002's master is domain 3)%s\n", pos,
           strstr(pos, "3-3-") ? ": it already has that domain, the race is not set up" : "");
    free(pos);

    /* The second move, MySQL001 -> MySQL003, sets up its connection. */
    m2 = (move_thread){.h = h, .first = 0, .last = 0, .target = "MySQL003",
                 .o = (shard_move_options)SHARD_MOVE_OPTIONS_INIT};
    run_move_thread(&m2);
    printf("second move: rc %d %s, target pair healthy %d\n", m2.rc, m2.err,
           m2.r.target_pair_healthy);

    set_delay("s6", 0); /* the first move's cleanup need not wait for it */
    ck_assert_int_eq(unlink(path), 0);
    pthread_join(t, NULL);
    printf("first move: rc %d %s, target pair healthy %d\n", m1.rc, m1.err,
           m1.r.target_pair_healthy);
    ck_assert_msg(m2.rc == 0, "second move: %s", m2.err);
    ck_assert_int_eq(m2.r.target_pair_healthy, 1);
    ck_assert_msg(m1.rc == 0, "first move: %s", m1.err);
    ck_assert_int_eq(m1.r.target_pair_healthy, 1);
    ck_assert_int_eq(harness_sync_standby(h, 3, 120), 0);
    link_ok("s5");
    link_ok("s6");
    ck_assert_uint_eq(count_on(h, "s6", 4), count_on(h, "s5", 4));
    ck_assert_uint_eq(count_on(h, "s6", 0), count_on(h, "s5", 0));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_pair_links");
    TCase *tc = tcase_create("links");
    shard_options so = SHARD_OPTIONS_INIT;
    int failed;

    /* Pairs 1 and 2 serve the shards; pair 3 is empty, the target. */
    h = harness_start_serving(3, 2, SHARDS, 3);
    if (!h)
        return 1;
    so.refresh_interval_ms = 0;
    if (harness_schema_apply(h) || shard_ctx_open(&app, harness_map_path(h), &so)) {
        fprintf(stderr, "setup: %s\n", shard_errmsg());
        shard_ctx_free(app);
        harness_stop(h);
        return 1;
    }
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, second_move_setup_keeps_the_pair_link);
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(app);
    harness_stop(h);
    return failed ? 1 : 0;
}
