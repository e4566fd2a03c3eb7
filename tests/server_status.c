/*
 * tests/server_status.c: shardctl status (shard_fleet_status(3)) against
 * real servers: healthy pairs, a broken pair link, a move journaled in
 * flight (interrupted, then with a live mover's lock), a paused and a
 * killed standby; and the small things of shardctl(1): --version, help
 * CMD, CMD --help, the summary of move --dry-run.
 *
 * Starts 2 pairs (8 ID shards, 4 mod shards) once and runs the shardctl
 * binary ($SHARDCTL, default build/shardctl) as a separate process.
 */
#include <check.h>
#include <jansson.h>
#include <libshard.h>
#include <mysql.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_util.h"
#include "harness.h"
#include "run_cmd.h"

#define NPAIRS 2
#define ID_SHARDS 8  /* 0-3 on MySQL001 (s1, s2), 4-7 on MySQL002 (s3, s4) */
#define MOD_SHARDS 4

static harness *H;

static run_result run_argv(const char *const *argv)
{
    run_spec s = {.map_env = harness_map_path(H), .timeout_s = 60};
    return run_cmd(&s, argv);
}

#define RUN(...) run_argv(ARGV(__VA_ARGS__))
/* As the operators' account: status, schema apply and moves are theirs. */
#define RUN_ADMIN(...) run_argv(ARGV(HARNESS_ADMIN_ARGS, __VA_ARGS__))

/* shardctl status --json: the document (a new reference) and the exit status. */
static json_t *status_json(int *status)
{
    run_result r = RUN_ADMIN("status", "--json");
    json_error_t e;
    json_t *doc = json_loads(r.out, 0, &e);

    ck_assert_msg(doc, "status --json is not JSON (%s): %s; stderr: %s", e.text, r.out, r.err);
    ck_assert_str_eq(r.err, "");
    *status = r.status;
    run_free(&r);
    return doc;
}

static json_t *server_of(json_t *doc, size_t pair, size_t k)
{
    json_t *s = json_array_get(json_object_get(json_array_get(json_object_get(doc, "pairs"),
                                                              pair), "servers"), k);
    ck_assert_ptr_nonnull(s);
    return s;
}

static char *address(const char *server)
{
    static char buf[4][64];
    static int next;
    char *b = buf[next++ % 4];
    snprintf(b, sizeof buf[0], "127.0.0.1:%d", harness_port(H, server));
    return b;
}

/* The problem lines ("  ! ...") come first, before the first pair's line. */
static void assert_problems_first(const char *out, const char *mention)
{
    const char *bang = strstr(out, "\n  ! "), *pair = strstr(out, "\nMySQL001:");

    ck_assert_msg(strncmp(out, "status: UNHEALTHY", 17) == 0, "first line: %s", out);
    ck_assert_msg(bang && pair && bang < pair, "problems not first: %s", out);
    ck_assert_msg(strstr(out, mention) && strstr(out, mention) < pair,
                  "no problem line mentions \"%s\": %s", mention, out);
}

/* Wait (bounded) until status says healthy again after a repair. */
static void wait_healthy(void)
{
    int status = -1;
    for (int i = 0; i < 60 && status != 0; i++) {
        json_t *doc = status_json(&status);
        json_decref(doc);
        if (status)
            usleep(250 * 1000);
    }
    ck_assert_int_eq(status, 0);
}

/* The standby has applied everything its master had (what schema apply
 * created there reaches it by replication). */
static void sync_standby(const char *master, const char *standby)
{
    char *pos = NULL, sql[300], *out = NULL;

    ck_assert_int_eq(harness_sql(H, master, "SELECT @@gtid_binlog_pos", &pos), 0);
    pos[strcspn(pos, "\n")] = '\0';
    ck_assert(strspn(pos, "0123456789-,") == strlen(pos));
    snprintf(sql, sizeof sql, "SELECT MASTER_GTID_WAIT('%s', 30)", pos);
    ck_assert_int_eq(harness_sql(H, standby, sql, &out), 0);
    ck_assert_msg(strcmp(out, "0\n") == 0, "%s did not apply %s: %s", standby, pos, out);
    free(pos);
    free(out);
}

START_TEST(healthy_pairs)
{
    run_result r = RUN_ADMIN("schema", "apply");
    json_t *doc;
    int status;

    ck_assert_msg(r.status == 0, "schema apply: %s", r.err);
    run_free(&r);
    sync_standby("s1", "s2");
    sync_standby("s3", "s4");
    r = RUN_ADMIN("status");
    ck_assert_msg(r.status == 0, "status exits %d: %s%s", r.status, r.out, r.err);
    ck_assert_msg(strncmp(r.out, "status: healthy (map version 1, 8 open shards, 2 pairs",
                          54) == 0, "%s", r.out);
    ck_assert_ptr_null(strstr(r.out, "  ! "));
    ck_assert_ptr_nonnull(strstr(r.out, address("s4")));
    run_free(&r);

    doc = status_json(&status);
    ck_assert_int_eq(status, 0);
    ck_assert(json_is_true(json_object_get(doc, "healthy")));
    ck_assert_int_eq(json_array_size(json_object_get(doc, "problems")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(doc, "map_version")), 1);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "pairs")), 2);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "moves")), 0);
    for (size_t p = 0; p < 2; p++) {
        for (size_t k = 0; k < 2; k++) {
            json_t *s = server_of(doc, p, k), *l;
            const char *name = k ? (p ? "s4" : "s2") : (p ? "s3" : "s1");
            ck_assert_str_eq(json_string_value(json_object_get(s, "address")), address(name));
            ck_assert(json_is_true(json_object_get(s, "reachable")));
            ck_assert(json_is_false(json_object_get(s, "read_only")));
            /* 4 ID shard databases and 2 mod shard databases on each server */
            ck_assert_int_eq(json_integer_value(json_object_get(s, "databases")), 6);
            ck_assert_int_eq(json_integer_value(json_object_get(s, "databases_missing")), 0);
            ck_assert_int_gt(json_integer_value(json_object_get(s, "bytes")), 0);
            ck_assert_int_eq(json_array_size(json_object_get(s, "links")), 1);
            l = json_array_get(json_object_get(s, "links"), 0);
            ck_assert_str_eq(json_string_value(json_object_get(l, "io_running")), "Yes");
            ck_assert_str_eq(json_string_value(json_object_get(l, "sql_running")), "Yes");
            ck_assert(strlen(json_string_value(json_object_get(s, "gtid_binlog_pos"))) > 0);
        }
    }
    json_decref(doc);
}
END_TEST

/* The application's account (the map's credentials, no --user) lacks SLAVE
 * MONITOR: the healthy fleet is reported healthy as far as it sees, the
 * links it cannot read are named with the way to see them, never as a
 * broken cluster. A bad --password-env is worded as the option. */
START_TEST(app_account_view)
{
    run_result r = RUN("status");
    json_t *doc;

    ck_assert_msg(r.status == 0, "status as the app account exits %d: %s%s", r.status, r.out,
                  r.err);
    ck_assert_msg(strncmp(r.out, "status: no problems seen, view INCOMPLETE", 41) == 0, "%s",
                  r.out);
    ck_assert_msg(!strstr(r.out, "UNHEALTHY") && !strstr(r.out, "link NONE") &&
                      !strstr(r.out, "  ! "), "%s", r.out);
    ck_assert_msg(strstr(r.out, "SLAVE MONITOR") && strstr(r.out, "--user"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "link not visible to this account"), "%s", r.out);
    run_free(&r);

    r = RUN("status", "--json");
    ck_assert_int_eq(r.status, 0);
    doc = json_loads(r.out, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    ck_assert(json_is_true(json_object_get(doc, "healthy")));
    ck_assert(json_is_false(json_object_get(doc, "complete")));
    ck_assert_int_eq(json_array_size(json_object_get(doc, "unseen")), 4);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "problems")), 0);
    ck_assert(json_is_false(json_object_get(server_of(doc, 0, 0), "links_visible")));
    json_decref(doc);
    run_free(&r);

    /* The operator's account sees it all. */
    r = RUN_ADMIN("status", "--json", "--connect-timeout", "2");
    ck_assert_int_eq(r.status, 0);
    doc = json_loads(r.out, 0, NULL);
    ck_assert(json_is_true(json_object_get(doc, "complete")));
    ck_assert(json_is_true(json_object_get(server_of(doc, 0, 0), "links_visible")));
    json_decref(doc);
    run_free(&r);

    r = RUN("--user", "shardadmin", "--password-env", "LIBSHARD_NO_SUCH_VARIABLE", "status");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "--password-env names LIBSHARD_NO_SUCH_VARIABLE") &&
                      !strstr(r.err, "shard_options"), "%s", r.err);
    run_free(&r);
    r = RUN("status", "--connect-timeout", "0");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "--connect-timeout"), "%s", r.err);
    run_free(&r);
}
END_TEST

START_TEST(broken_pair_link)
{
    run_result r;
    json_t *doc;
    int status;
    char want[200];

    ck_assert_int_eq(harness_sql(H, "s2", "STOP SLAVE", NULL), 0);
    r = RUN_ADMIN("status");
    ck_assert_int_eq(r.status, 1);
    snprintf(want, sizeof want, "MySQL001 standby %s: pair link from %s is broken",
             address("s2"), address("s1"));
    assert_problems_first(r.out, want);
    run_free(&r);
    doc = status_json(&status);
    ck_assert_int_eq(status, 1);
    ck_assert(json_is_false(json_object_get(doc, "healthy")));
    ck_assert_int_eq(json_array_size(json_object_get(doc, "problems")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(
                         server_of(doc, 0, 1), "links"), 0), "io_running")), "No");
    json_decref(doc);
    ck_assert_int_eq(harness_sql(H, "s2", "START SLAVE", NULL), 0);
    wait_healthy();
}
END_TEST

/* The journal as the mover creates it on the target's master. */
static const char journal_sql[] =
    "CREATE DATABASE IF NOT EXISTS libshard_control;"
    "CREATE TABLE IF NOT EXISTS libshard_control.moves ("
    " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
    " source_pair VARCHAR(64) NOT NULL, target_pair VARCHAR(64) NOT NULL,"
    " first_shard INT UNSIGNED NOT NULL, last_shard INT UNSIGNED NOT NULL,"
    " phase TINYINT NOT NULL, flags INT NOT NULL,"
    " snapshot_gtid VARCHAR(1024) NOT NULL DEFAULT '',"
    " fence_gtid VARCHAR(1024) NOT NULL DEFAULT '',"
    " map_version_from BIGINT UNSIGNED NOT NULL,"
    " map_version_to BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " rows_copied BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " bytes_copied BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " rows_verified BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " mismatches BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " copy_seconds DOUBLE NOT NULL DEFAULT 0, catchup_seconds DOUBLE NOT NULL DEFAULT 0,"
    " cutover_seconds DOUBLE NOT NULL DEFAULT 0, verify_seconds DOUBLE NOT NULL DEFAULT 0,"
    " pause_ms DOUBLE NOT NULL DEFAULT 0, fence_attempts INT UNSIGNED NOT NULL DEFAULT 0,"
    " source_dropped TINYINT NOT NULL DEFAULT 0,"
    " message VARCHAR(1024) NOT NULL DEFAULT '',"
    " created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
    " ON UPDATE CURRENT_TIMESTAMP(6)) ENGINE=InnoDB;"
    "ALTER TABLE libshard_control.moves AUTO_INCREMENT = 3000000001;"
    "INSERT INTO libshard_control.moves (source_pair, target_pair, first_shard, last_shard,"
    " phase, flags, map_version_from) VALUES ('MySQL001', 'MySQL002', 2, 3, 1, 0, 1);"
    "SELECT LAST_INSERT_ID()";

START_TEST(move_in_flight)
{
    char *id = NULL, want[400], lock[100];
    json_t *doc, *m;
    run_result r;
    MYSQL *my;
    int status;

    ck_assert_int_eq(harness_sql(H, "s3", journal_sql, &id), 0);
    id[strcspn(id, "\n")] = '\0';
    ck_assert_str_eq(id, "3000000001");

    /* Nobody runs it: interrupted, and unhealthy. */
    r = RUN_ADMIN("status");
    ck_assert_int_eq(r.status, 1);
    snprintf(want, sizeof want, "move %s (shards 2-3, MySQL001 -> MySQL002): was interrupted "
             "in phase copying, before its flip: resume it (shardctl move resume %s) or abort "
             "it (shardctl move abort %s)", id, id, id);
    assert_problems_first(r.out, want);
    ck_assert_ptr_nonnull(strstr(r.out, "1 unfinished move)"));
    run_free(&r);
    doc = status_json(&status);
    ck_assert_int_eq(status, 1);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "moves")), 1);
    m = json_array_get(json_object_get(doc, "moves"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(m, "phase")), "copying");
    ck_assert_str_eq(json_string_value(json_object_get(m, "journal")), "MySQL002");
    ck_assert(json_is_false(json_object_get(m, "running")));
    json_decref(doc);

    /* A mover holds the move's lock on the journal's server: it runs. */
    my = mysql_init(NULL);
    ck_assert_ptr_nonnull(my);
    ck_assert_msg(mysql_real_connect(my, "127.0.0.1", "shard", getenv("LIBSHARD_PASSWORD"),
                                     NULL, (unsigned)harness_port(H, "s3"), NULL, 0),
                  "connect: %s", mysql_error(my));
    snprintf(lock, sizeof lock, "SELECT GET_LOCK('libshard move %s', 0)", id);
    ck_assert_int_eq(mysql_query(my, lock), 0);
    mysql_free_result(mysql_store_result(my));
    doc = status_json(&status);
    ck_assert_int_eq(status, 0);
    m = json_array_get(json_object_get(doc, "moves"), 0);
    ck_assert(json_is_true(json_object_get(m, "running")));
    json_decref(doc);
    r = RUN_ADMIN("status");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "copying, running"));
    run_free(&r);
    mysql_close(my);

    /* Keeping its reverse window, nobody running it: listed, no problem
     * (it waits for the operators' finish or revert by design). */
    ck_assert_int_eq(harness_sql(H, "s3", "UPDATE libshard_control.moves SET phase = 9", NULL),
                     0);
    doc = status_json(&status);
    ck_assert_int_eq(status, 0);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "problems")), 0);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "moves")), 1);
    m = json_array_get(json_object_get(doc, "moves"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(m, "phase")), "reversible");
    json_decref(doc);
    r = RUN_ADMIN("status");
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "reversible, reverse window open"), "%s", r.out);
    run_free(&r);

    /* Done but its source's copies left to drop, nobody dropping them: a
     * problem, with the command that drops them. */
    ck_assert_int_eq(harness_sql(H, "s3", "UPDATE libshard_control.moves SET phase = 12", NULL),
                     0);
    r = RUN_ADMIN("status");
    ck_assert_int_eq(r.status, 1);
    snprintf(want, sizeof want, "move %s (shards 2-3, MySQL001 -> MySQL002): is done and left "
             "its source's copies to drop: resume it to drop them (shardctl move resume %s)",
             id, id);
    assert_problems_first(r.out, want);
    ck_assert_msg(strstr(r.out, "dropping, INTERRUPTED"), "%s", r.out);
    run_free(&r);

    /* More unfinished moves than a report lists: the rest are counted, not
     * dropped without a word. */
    for (int k = 0; k < 16; k++)
        ck_assert_int_eq(harness_sql(H, "s3", "INSERT INTO libshard_control.moves (source_pair,"
                                     " target_pair, first_shard, last_shard, phase, flags,"
                                     " map_version_from) VALUES ('MySQL001', 'MySQL002', 0, 1,"
                                     " 9, 0, 1)", NULL), 0);
    doc = status_json(&status);
    ck_assert_int_eq(status, 1);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "moves")), 16);
    {
        json_t *pr = json_object_get(doc, "problems");
        bool said = false;
        for (size_t k = 0; k < json_array_size(pr); k++)
            said |= strstr(json_string_value(json_array_get(pr, k)),
                           "the move journal holds 17 unfinished moves; the first 16 are "
                           "listed") != NULL;
        ck_assert_msg(said, "no problem counts the moves left out");
    }
    json_decref(doc);

    /* Aborted: no longer unfinished. */
    ck_assert_int_eq(harness_sql(H, "s3", "UPDATE libshard_control.moves SET phase = 8", NULL),
                     0);
    doc = status_json(&status);
    ck_assert_int_eq(status, 0);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "moves")), 0);
    json_decref(doc);
    free(id);
}
END_TEST

/* A server that accepts connections but never answers: reported within the
 * connect timeout, and the other three are still reported. */
START_TEST(paused_standby)
{
    run_spec spec = {.map_env = harness_map_path(H), .timeout_s = 30};
    run_result r;
    json_t *doc;
    char want[200];

    ck_assert_int_eq(harness_pause(H, "s2"), 0);
    r = run_cmd(&spec, ARGV(HARNESS_ADMIN_ARGS, "status", "--json"));
    ck_assert_int_eq(harness_resume(H, "s2"), 0);
    ck_assert_int_eq(r.status, 1);
    doc = json_loads(r.out, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    ck_assert(json_is_false(json_object_get(server_of(doc, 0, 1), "reachable")));
    ck_assert(json_is_true(json_object_get(server_of(doc, 0, 0), "reachable")));
    ck_assert(json_is_true(json_object_get(server_of(doc, 1, 0), "reachable")));
    ck_assert(json_is_true(json_object_get(server_of(doc, 1, 1), "reachable")));
    snprintf(want, sizeof want, "MySQL001 standby %s: unreachable", address("s2"));
    {
        json_t *p;
        size_t i;
        int named = 0;
        json_array_foreach(json_object_get(doc, "problems"), i, p)
            named |= strstr(json_string_value(p), want) != NULL;
        ck_assert_msg(named, "no problem names the paused standby: %s", r.out);
    }
    json_decref(doc);
    run_free(&r);
    wait_healthy();
}
END_TEST

/* Last: the standby of MySQL002 is killed. */
START_TEST(killed_standby)
{
    run_spec spec = {.map_env = harness_map_path(H), .timeout_s = 30};
    run_result r;
    char want[200];

    ck_assert_int_eq(harness_kill(H, "s4"), 0);
    r = run_cmd(&spec, ARGV(HARNESS_ADMIN_ARGS, "status"));
    ck_assert_int_eq(r.status, 1);
    snprintf(want, sizeof want, "MySQL002 standby %s: unreachable", address("s4"));
    assert_problems_first(r.out, want);
    /* Its master's link from it is what a dead standby breaks, eventually;
     * the other pair is untouched. */
    ck_assert_ptr_null(strstr(r.out, "! MySQL001"));
    run_free(&r);
}
END_TEST

/* move --dry-run sums the plan up per range of databases. */
START_TEST(dry_run_summary)
{
    run_result r = RUN_ADMIN("move", "--shards", "0-3", "--to", "MySQL002", "--dry-run");
    json_t *doc;

    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "\ndatabases db00000: 1 database, 6 tables, "));
    ck_assert_ptr_nonnull(strstr(r.out, "\ndatabases db00003: 1 database, 6 tables, "));
    ck_assert_ptr_null(strstr(r.out, "\ntable "));
    ck_assert_ptr_nonnull(strstr(r.out, "\nphases: "));
    run_free(&r);
    r = RUN_ADMIN("move", "--shards", "0-3", "--to", "MySQL002", "--dry-run", "--verbose");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "\ntable db00002.pins: "));
    ck_assert_ptr_nonnull(strstr(r.out, "\ndatabases db00002: "));
    run_free(&r);
    r = RUN_ADMIN("move", "--shards", "0-3", "--to", "MySQL002", "--dry-run", "--json");
    ck_assert_int_eq(r.status, 0);
    doc = json_loads(r.out, 0, NULL);
    ck_assert_msg(doc, "not JSON: %s", r.out);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "ranges")), 4);
    ck_assert_int_eq(json_array_size(json_object_get(doc, "checks")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(doc, "total"),
                                                        "tables")), 24);
    ck_assert_ptr_null(json_object_get(doc, "tables"));
    json_decref(doc);
    run_free(&r);
}
END_TEST

START_TEST(version_and_help)
{
    run_result r = RUN("--version");
    char want[100];

    snprintf(want, sizeof want, "shardctl (libshard) %s\n", SHARD_VERSION_STRING);
    expect_ok(r, want);
    r = RUN("help", "move");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "  move status"));
    ck_assert_ptr_nonnull(strstr(r.out, "  move --shards A-B --to PAIR"));
    ck_assert_ptr_null(strstr(r.out, "obj get"));
    {
        run_result r2 = RUN("move", "--help");
        ck_assert_str_eq(r2.out, r.out);
        ck_assert_int_eq(r2.status, 0);
        run_free(&r2);
    }
    run_free(&r);
    r = RUN("status", "--help");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "  status [--json]"));
    ck_assert_ptr_null(strstr(r.out, "  move"));
    run_free(&r);
    r = RUN("help", "nosuch");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "nosuch"));
    run_free(&r);
    r = RUN("status", "extra");
    ck_assert_int_eq(r.status, 2);
    run_free(&r);
}
END_TEST

static Suite *status_suite(void)
{
    Suite *s = suite_create("server_status");
    TCase *tc = tcase_create("status");

    tcase_set_timeout(tc, 120);
    /* healthy_pairs first: it applies the schema; killed_standby last: it
     * kills a server. */
    tcase_add_tests(tc, TESTS(healthy_pairs, app_account_view, broken_pair_link, move_in_flight, paused_standby,
                              version_and_help, dry_run_summary, killed_standby));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return server_test_main("server_status", &H, NPAIRS, ID_SHARDS, MOD_SHARDS, 0, status_suite);
}
