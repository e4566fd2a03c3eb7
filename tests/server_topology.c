/*
 * tests/server_topology.c: topology commands of shardctl(1) against real
 * servers: pair add and pair remove (shard_pair_add(3),
 * shard_pair_remove(3)), shards open on a running cluster
 * (shard_shards_open(3)), and map publish refusing a map whose open shards
 * lack their databases (shard_schema_check(3)).
 *
 * Starts 3 pairs; the map is rewritten before anything runs so that
 * MySQL001 serves ID shards 0-3, MySQL002 4-7 (8 open shards) and every
 * mod shard, and MySQL003 (s5, s6) serves nothing.
 */
#include <check.h>
#include <jansson.h>
#include <libshard.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_util.h"
#include "harness.h"
#include "run_cmd.h"

static harness *H;

static run_result run_argv(const char *const *argv)
{
    run_spec s = {.map_env = harness_map_path(H), .timeout_s = 60};
    return run_cmd(&s, argv);
}

/* Every command here is an operator's: run as the operators' account. */
#define RUN(...) run_argv(ARGV(HARNESS_ADMIN_ARGS, __VA_ARGS__))

static const char *address(const char *server)
{
    static char buf[4][64];
    static int next;
    char *b = buf[next++ % 4];
    snprintf(b, sizeof buf[0], "127.0.0.1:%d", harness_port(H, server));
    return b;
}

/* The stored map, read afresh (caller frees). */
static shard_map *stored(void)
{
    shard_map *m = NULL;
    ck_assert_int_eq(shard_map_load(&m, harness_map_path(H)), 0);
    return m;
}

static uint64_t stored_version(void)
{
    shard_map *m = stored();
    uint64_t v = shard_map_version(m);
    shard_map_free(m);
    return v;
}

/* Exit status `want`, stderr one line naming every `mention` (NULL-ended). */
static void expect_refused(run_result r, int want, const char *const *mention)
{
    ck_assert_msg(r.status == want, "exit %d (want %d): %s%s", r.status, want, r.out, r.err);
    ck_assert_msg(count_lines(r.err) == 1, "stderr is not one line: %s", r.err);
    for (; *mention; mention++)
        ck_assert_msg(strstr(r.err, *mention), "stderr does not name \"%s\": %s", *mention,
                      r.err);
    run_free(&r);
}

#define REFUSED(want, r, ...) expect_refused((r), (want), ARGV(__VA_ARGS__))

static void ok_run(run_result r)
{
    ck_assert_msg(r.status == 0, "exit %d: %s%s", r.status, r.out, r.err);
    run_free(&r);
}

/* The pair link of `server` runs again (a bounded wait after a START SLAVE). */
static void wait_link(const char *server)
{
    for (int i = 0; i < 100; i++) {
        char *out = NULL;
        int ok;
        ck_assert_int_eq(harness_sql(H, server, "SHOW STATUS LIKE 'Slave_running'", &out), 0);
        ok = strstr(out, "ON") != NULL;
        free(out);
        if (ok)
            return;
        usleep(100 * 1000);
    }
    ck_abort_msg("the replication link of %s did not run again", server);
}

START_TEST(pair_round_trip)
{
    char master[64], standby[64];
    shard_map *m;
    const char *ma, *sa;
    uint64_t v0 = stored_version();

    snprintf(master, sizeof master, "%s", address("s5"));
    snprintf(standby, sizeof standby, "%s", address("s6"));
    REFUSED(2, RUN("pair", "remove", "MySQL001"), "MySQL001", "serves ID shards 0-3");
    /* A move journal that cannot be read might name the pair: refused. */
    ck_assert_int_eq(harness_pause(H, "s3"), 0);
    {
        run_result r = RUN("pair", "remove", "MySQL003");
        ck_assert_int_eq(harness_resume(H, "s3"), 0);
        REFUSED(1, r, "cannot tell whether a move", "MySQL002");
    }
    ck_assert_int_eq(stored_version(), v0);
    /* A move naming the pair behind more unfinished moves than a report
     * lists (16) still counts. */
    ck_assert_int_eq(harness_sql(H, "s5", "CREATE DATABASE IF NOT EXISTS libshard_control;"
                                 "CREATE TABLE libshard_control.moves (id BIGINT UNSIGNED"
                                 " NOT NULL AUTO_INCREMENT PRIMARY KEY, source_pair VARCHAR(64)"
                                 " NOT NULL, target_pair VARCHAR(64) NOT NULL, first_shard INT"
                                 " UNSIGNED NOT NULL, last_shard INT UNSIGNED NOT NULL, phase"
                                 " TINYINT NOT NULL, message VARCHAR(1024) NOT NULL DEFAULT '',"
                                 " updated_at TIMESTAMP(6) NOT NULL DEFAULT"
                                 " CURRENT_TIMESTAMP(6))", NULL), 0);
    for (int k = 0; k < 17; k++)
        ck_assert_int_eq(harness_sql(H, "s5", k < 16 ?
                                     "INSERT INTO libshard_control.moves (source_pair,"
                                     " target_pair, first_shard, last_shard, phase) VALUES"
                                     " ('MySQL001', 'MySQL002', 0, 1, 1)" :
                                     "INSERT INTO libshard_control.moves (source_pair,"
                                     " target_pair, first_shard, last_shard, phase) VALUES"
                                     " ('MySQL002', 'MySQL003', 4, 5, 9)", NULL), 0);
    REFUSED(1, RUN("pair", "remove", "MySQL003"), "MySQL003", "(shards 4-5, MySQL002 to MySQL003)");
    ck_assert_int_eq(harness_sql(H, "s5", "DROP TABLE libshard_control.moves", NULL), 0);
    ck_assert_int_eq(stored_version(), v0);
    ok_run(RUN("pair", "remove", "MySQL003"));
    m = stored();
    ck_assert_int_eq(shard_map_version(m), v0 + 1);
    ck_assert_int_eq(shard_map_pair_count(m), 2);
    ck_assert_int_eq(shard_map_pair_addrs(m, "MySQL003", &ma, &sa), SHARD_ENOTFOUND);
    shard_map_free(m);
    REFUSED(2, RUN("pair", "remove", "MySQL003"), "MySQL003");

    /* A broken link on one side: refused, naming the link. */
    ck_assert_int_eq(harness_sql(H, "s6", "STOP SLAVE", NULL), 0);
    REFUSED(2, RUN("pair", "add", "MySQL003", "--master", master, "--standby", standby),
            "pair link", master, standby);
    ck_assert_int_eq(stored_version(), v0 + 1);
    ck_assert_int_eq(harness_sql(H, "s6", "START SLAVE", NULL), 0);
    wait_link("s6");
    /* A server that another pair has, a missing standby, a dead server. */
    REFUSED(2, RUN("pair", "add", "MySQL009", "--master", master, "--standby", address("s1")),
            "already the master of pair MySQL001");
    REFUSED(2, RUN("pair", "add", "MySQL009", "--master", master), "--standby");
    REFUSED(1, RUN("pair", "add", "MySQL009", "--master", master, "--standby",
                   "127.0.0.1:1"), "127.0.0.1:1");
    ck_assert_int_eq(stored_version(), v0 + 1);

    ok_run(RUN("pair", "add", "MySQL003", "--master", master, "--standby", standby));
    m = stored();
    ck_assert_int_eq(shard_map_version(m), v0 + 2);
    ck_assert_int_eq(shard_map_pair_addrs(m, "MySQL003", &ma, &sa), 0);
    ck_assert_str_eq(ma, master);
    ck_assert_str_eq(sa, standby);
    shard_map_free(m);
    /* Bad input, as an address already used is: exit 2, nothing published. */
    REFUSED(2, RUN("pair", "add", "MySQL003", "--master", master, "--standby", standby),
            "MySQL003", "already in the map");
    ck_assert_int_eq(stored_version(), v0 + 2);
}
END_TEST

/* Creates on every shard in [from, to) through an application's context
 * that was open before the shards were. */
static void create_on(shard_ctx *ctx, unsigned from, unsigned to)
{
    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    for (unsigned s = from; s < to; s++) {
        uint64_t id;
        int rc = shard_object_create(ctx, 1, s, "{\"new\":1}", 9, &id);
        ck_assert_msg(rc == 0, "create on shard %u: %s", s, shard_errmsg());
        ck_assert_uint_eq(shard_id_shard(id), s);
    }
}

static void expect_tables(const char *server, const char *db, const char *want)
{
    char sql[200], *out = NULL;
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.TABLES WHERE"
             " TABLE_SCHEMA = '%s'", db);
    ck_assert_int_eq(harness_sql(H, server, sql, &out), 0);
    ck_assert_msg(strcmp(out, want) == 0, "%s on %s has %s tables", db, server, out);
    free(out);
}

START_TEST(shards_open_running)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    run_result r;
    shard_map *m;
    const char *pair;
    char want[200];
    uint64_t v0 = stored_version();

    o.refresh_interval_ms = 0;
    ck_assert_int_eq(shard_ctx_open(&ctx, harness_map_path(H), &o), 0);
    create_on(ctx, 0, 8);

    /* No --pair: the last range (MySQL002's) grows. */
    r = RUN("shards", "open", "12");
    ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
    snprintf(want, sizeof want, "opened shards 8-11 on MySQL002: open_shards 12, map version "
             "%llu\n", (unsigned long long)v0 + 1);
    ck_assert_str_eq(r.out, want);
    run_free(&r);
    expect_tables("s3", "db00011", "6\n");
    create_on(ctx, 8, 12);

    /* A new range on the pair that served nothing. */
    r = RUN("shards", "open", "16", "--pair", "MySQL003");
    ck_assert_msg(r.status == 0, "%s%s", r.out, r.err);
    snprintf(want, sizeof want, "opened shards 12-15 on MySQL003: open_shards 16, map version "
             "%llu\n", (unsigned long long)v0 + 2);
    ck_assert_str_eq(r.out, want);
    run_free(&r);
    expect_tables("s5", "db00012", "6\n");
    create_on(ctx, 12, 16);
    m = stored();
    ck_assert_int_eq(shard_map_version(m), v0 + 2);
    ck_assert_int_eq(shard_map_open_shards(m), 16);
    ck_assert_int_eq(shard_map_pair_of(m, 11, &pair), 0);
    ck_assert_str_eq(pair, "MySQL002");
    ck_assert_int_eq(shard_map_pair_of(m, 15, &pair), 0);
    ck_assert_str_eq(pair, "MySQL003");
    shard_map_free(m);
    /* Objects on any open shard: none of them lacks its tables. */
    for (int i = 0; i < 200; i++) {
        uint64_t id;
        ck_assert_msg(shard_object_create(ctx, 2, SHARD_ANY, "{}", 2, &id) == 0, "%s",
                      shard_errmsg());
    }
    shard_ctx_free(ctx);

    REFUSED(2, RUN("shards", "open", "16"), "open already");
    REFUSED(2, RUN("shards", "open", "20", "--pair", "NoSuch"), "NoSuch");
    REFUSED(2, RUN("shards", "open", "65537"), "65537");
    /* Now MySQL003 serves something. */
    REFUSED(2, RUN("pair", "remove", "MySQL003"), "serves ID shards 12-15");
    ck_assert_int_eq(stored_version(), v0 + 2);
}
END_TEST

/* The stored map with open_shards raised to n and [first, n-1] on pair, at
 * the next version, written to DIR/name; the path in a static buffer. */
static const char *raised_map(unsigned first, unsigned n, const char *pair, const char *name)
{
    static char path[600];
    json_t *doc = json_load_file(harness_map_path(H), 0, NULL);

    ck_assert_ptr_nonnull(doc);
    json_object_set_new(doc, "version",
                        json_integer(json_integer_value(json_object_get(doc, "version")) + 1));
    if (pair) {
        json_object_set_new(doc, "open_shards", json_integer(n));
        json_array_append_new(json_object_get(doc, "id_shards"),
                              json_pack("{s:[i,i],s:s}", "range", first, n - 1, "pair", pair));
    }
    snprintf(path, sizeof path, "%s/%s", harness_dir(H), name);
    ck_assert_int_eq(json_dump_file(doc, path, JSON_INDENT(2)), 0);
    json_decref(doc);
    return path;
}

START_TEST(premature_publish_refused)
{
    uint64_t v0 = stored_version();
    const char *path = raised_map(16, 20, "MySQL001", "raised.json");

    /* Its new shards have no databases yet: refused, nothing published. */
    REFUSED(2, RUN("map", "publish", path), "open shard 16 of pair MySQL001", "db00016");
    ck_assert_int_eq(stored_version(), v0);
    /* A table missing is as bad as a database missing. */
    ck_assert_int_eq(harness_sql(H, "s1", "SET sql_log_bin = 0; DROP TABLE db00002.boards",
                                 NULL), 0);
    path = raised_map(0, 0, NULL, "same.json");
    REFUSED(2, RUN("map", "publish", path), "open shard 2 of pair MySQL001", "db00002.boards");
    ck_assert_int_eq(harness_sql(H, "s1", "SET sql_log_bin = 0;"
                                          " CREATE TABLE db00002.boards LIKE db00002.pins",
                                 NULL), 0);
    /* A map whose shards are all there is published. */
    ok_run(RUN("map", "publish", path));
    ck_assert_int_eq(stored_version(), v0 + 1);
    /* The way that works: schema first, then the map. */
    ok_run(RUN("shards", "open", "20", "--pair", "MySQL001"));
    ck_assert_int_eq(stored_version(), v0 + 2);
    expect_tables("s1", "db00019", "6\n");
}
END_TEST

/* MySQL003 serves nothing: ID shards 0-3 on MySQL001, 4-7 on MySQL002. */
static int spare_third_pair(void)
{
    json_t *doc = json_load_file(harness_map_path(H), 0, NULL), *mod;
    int rc;

    if (!doc)
        return -1;
    json_object_set_new(doc, "open_shards", json_integer(8));
    json_object_set_new(doc, "id_shards",
                        json_pack("[{s:[i,i],s:s},{s:[i,i],s:s}]", "range", 0, 3, "pair",
                                  "MySQL001", "range", 4, 7, "pair", "MySQL002"));
    mod = json_object_get(doc, "mod_shards");
    json_object_set_new(mod, "ranges",
                        json_pack("[{s:[i,i],s:s},{s:[i,i],s:s}]", "range", 0, 2, "pair",
                                  "MySQL001", "range", 3, 5, "pair", "MySQL002"));
    rc = json_dump_file(doc, harness_map_path(H), JSON_INDENT(2));
    json_decref(doc);
    return rc;
}

START_TEST(schema_first)
{
    run_result r = RUN("schema", "apply");
    ck_assert_msg(r.status == 0, "%s", r.err);
    run_free(&r);
}
END_TEST

static Suite *topology_suite(void)
{
    Suite *s = suite_create("server_topology");
    TCase *tc = tcase_create("topology");

    tcase_set_timeout(tc, 120);
    /* shards_open_running after pair_round_trip: it opens shards on MySQL003. */
    tcase_add_tests(tc, TESTS(schema_first, pair_round_trip, shards_open_running,
                              premature_publish_refused));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    int failed;

    H = harness_start_ex(3, 12, 6);
    if (!H || spare_third_pair() != 0) {
        fprintf(stderr, "server_topology: could not start the test servers\n");
        harness_stop(H);
        return EXIT_FAILURE;
    }
    failed = run_suite(topology_suite(), CK_FORK_GETENV);
    harness_stop(H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
