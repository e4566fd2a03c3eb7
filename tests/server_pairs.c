/*
 * tests/server_pairs.c: the test servers themselves work.
 *
 * Starts 2 master-master pairs with the harness once and proves that each
 * pair replicates both ways, that the shard map written for them is right,
 * and that a standby killed and restarted catches up with the master.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <check.h>
#include <jansson.h>
#include <mysql.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"
#include "harness.h"

#define NPAIRS 2
#define WAIT_SECS 30

static harness *H;

/* ------------------------------------------------------------ helpers */

static const char *sname(int k)
{
    static char names[16][16];
    snprintf(names[k % 16], sizeof names[0], "s%d", k);
    return names[k % 16];
}

/* Connect as user (the password in $LIBSHARD_PASSWORD) over TCP to server
 * sK; NULL on failure. */
static MYSQL *try_connect_as(int k, const char *user, char *err, size_t errlen)
{
    int port = harness_port(H, sname(k));
    const char *pw = getenv("LIBSHARD_PASSWORD");
    MYSQL *m = mysql_init(NULL);
    if (!m) {
        snprintf(err, errlen, "mysql_init failed");
        return NULL;
    }
    unsigned int t = 5;
    mysql_optionsv(m, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    unsigned int rw = 20;
    mysql_optionsv(m, MYSQL_OPT_READ_TIMEOUT, &rw);
    mysql_optionsv(m, MYSQL_OPT_WRITE_TIMEOUT, &rw);
    if (!mysql_real_connect(m, "127.0.0.1", user, pw, NULL,
                            (unsigned int)port, NULL, 0)) {
        snprintf(err, errlen, "connect to %s (127.0.0.1:%d): %s", sname(k),
                 port, mysql_error(m));
        mysql_close(m);
        return NULL;
    }
    return m;
}

/* As the operators' account: these tests make databases of their own and
 * read the replication status, which the application's account may not. */
static MYSQL *try_connect(int k, char *err, size_t errlen)
{
    return try_connect_as(k, HARNESS_ADMIN_USER, err, errlen);
}

static MYSQL *connect_to(int k)
{
    char err[512];
    MYSQL *m = try_connect(k, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    return m;
}

static void exec_sql(MYSQL *m, const char *fmt, ...)
{
    char q[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q, sizeof q, fmt, ap);
    va_end(ap);
    ck_assert_msg(mysql_query(m, q) == 0, "%s: %s", q, mysql_error(m));
}

/* First column of the first row as a long; -1 on any error or no row. */
static long query_long(MYSQL *m, const char *fmt, ...)
{
    char q[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q, sizeof q, fmt, ap);
    va_end(ap);
    if (mysql_query(m, q) != 0)
        return -1;
    MYSQL_RES *r = mysql_store_result(m);
    if (!r)
        return -1;
    long v = -1;
    MYSQL_ROW row = mysql_fetch_row(r);
    if (row && row[0])
        v = strtol(row[0], NULL, 10);
    mysql_free_result(r);
    return v;
}

/* Wait until `SELECT COUNT(*) FROM tbl WHERE cond` on server k returns want
 * (errors such as "unknown database" count as not yet). */
static int wait_count(int k, const char *tbl, const char *cond, long want,
                      double *took)
{
    double t0 = now_s();
    MYSQL *m = NULL;
    long got = -1;
    while (now_s() - t0 < WAIT_SECS) {
        if (!m) {
            char err[512];
            m = try_connect(k, err, sizeof err);
        }
        if (m) {
            got = query_long(m, "SELECT COUNT(*) FROM %s WHERE %s", tbl, cond);
            if (got == want)
                break;
            if (got < 0 && mysql_errno(m) >= 2000) { /* client error: reconnect */
                mysql_close(m);
                m = NULL;
            }
        }
        nap_ms(50);
    }
    if (m)
        mysql_close(m);
    if (took)
        *took = now_s() - t0;
    return got == want;
}

/* SHOW SLAVE STATUS of server k, as a field -> value lookup. */
struct slave_status {
    char io[32], sql[32];
    long last_errno, last_io_errno, last_sql_errno;
    char last_io_error[512];
    int found;
};

static int get_slave_status(MYSQL *m, struct slave_status *s)
{
    memset(s, 0, sizeof *s);
    if (mysql_query(m, "SHOW SLAVE STATUS") != 0)
        return -1;
    MYSQL_RES *r = mysql_store_result(m);
    if (!r)
        return -1;
    MYSQL_ROW row = mysql_fetch_row(r);
    if (row) {
        s->found = 1;
        unsigned int nf = mysql_num_fields(r);
        MYSQL_FIELD *f = mysql_fetch_fields(r);
        for (unsigned int i = 0; i < nf; i++) {
            const char *v = row[i] ? row[i] : "";
            if (!strcmp(f[i].name, "Slave_IO_Running"))
                snprintf(s->io, sizeof s->io, "%s", v);
            else if (!strcmp(f[i].name, "Slave_SQL_Running"))
                snprintf(s->sql, sizeof s->sql, "%s", v);
            else if (!strcmp(f[i].name, "Last_Errno"))
                s->last_errno = strtol(v, NULL, 10);
            else if (!strcmp(f[i].name, "Last_IO_Errno"))
                s->last_io_errno = strtol(v, NULL, 10);
            else if (!strcmp(f[i].name, "Last_SQL_Errno"))
                s->last_sql_errno = strtol(v, NULL, 10);
            else if (!strcmp(f[i].name, "Last_IO_Error"))
                snprintf(s->last_io_error, sizeof s->last_io_error, "%s", v);
        }
    }
    mysql_free_result(r);
    return 0;
}

/* Both threads running and no error, within a bounded wait (an IO thread
 * may still be reconnecting after its master came back). */
static void assert_link_healthy(int k)
{
    struct slave_status s;
    double t0 = now_s();
    int ok = 0;
    while (now_s() - t0 < WAIT_SECS) {
        char err[512];
        MYSQL *m = try_connect(k, err, sizeof err);
        if (m) {
            int rc = get_slave_status(m, &s);
            mysql_close(m);
            if (rc == 0 && s.found && !strcmp(s.io, "Yes") &&
                !strcmp(s.sql, "Yes") && s.last_errno == 0 &&
                s.last_io_errno == 0 && s.last_sql_errno == 0) {
                ok = 1;
                break;
            }
        }
        nap_ms(100);
    }
    ck_assert_msg(ok,
                  "%s replication link unhealthy: found=%d IO=%s SQL=%s "
                  "Last_Errno=%ld Last_IO_Errno=%ld Last_SQL_Errno=%ld (%s)",
                  sname(k), s.found, s.io, s.sql, s.last_errno,
                  s.last_io_errno, s.last_sql_errno, s.last_io_error);
}

/* ------------------------------------------------------------ tests */

START_TEST(test_map_json)
{
    json_error_t jerr;
    json_t *map = json_load_file(harness_map_path(H), 0, &jerr);
    ck_assert_msg(map != NULL, "%s: line %d: %s", harness_map_path(H),
                  jerr.line, jerr.text);

    ck_assert_int_eq(json_integer_value(json_object_get(map, "version")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(map, "open_shards")),
                     64);
    ck_assert_str_eq(
        json_string_value(json_object_get(map, "database_format")), "db%05d");
    json_t *cred = json_object_get(map, "credentials");
    ck_assert_ptr_nonnull(cred);
    ck_assert_str_eq(json_string_value(json_object_get(cred, "user")),
                     "shard");
    ck_assert_str_eq(json_string_value(json_object_get(cred, "password_env")),
                     "LIBSHARD_PASSWORD");
    json_t *objs = json_object_get(map, "objects");
    ck_assert_int_eq(json_integer_value(json_object_get(objs, "pins")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(objs, "boards")), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(objs, "users")), 3);
    json_t *maps = json_object_get(map, "mappings");
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(maps, "board_has_pins"), "reverse")),
                     "pin_owned_by_board");
    ck_assert(json_is_object(json_object_get(maps, "user_likes_pins")));

    json_t *pairs = json_object_get(map, "pairs");
    ck_assert(json_is_object(pairs));
    ck_assert_int_eq(json_object_size(pairs), NPAIRS);
    for (int p = 1; p <= NPAIRS; p++) {
        char name[24], want[64];
        snprintf(name, sizeof name, "MySQL%03d", p);
        json_t *pair = json_object_get(pairs, name);
        ck_assert_msg(pair != NULL, "pair %s missing", name);
        snprintf(want, sizeof want, "127.0.0.1:%d",
                 harness_port(H, sname(2 * p - 1)));
        ck_assert_str_eq(json_string_value(json_object_get(pair, "master")),
                         want);
        snprintf(want, sizeof want, "127.0.0.1:%d",
                 harness_port(H, sname(2 * p)));
        ck_assert_str_eq(json_string_value(json_object_get(pair, "standby")),
                         want);
    }

    /* id_shards: contiguous, cover [0, 63], one range per pair */
    json_t *ids = json_object_get(map, "id_shards");
    ck_assert(json_is_array(ids));
    ck_assert_int_eq(json_array_size(ids), NPAIRS);
    long next = 0;
    for (size_t i = 0; i < json_array_size(ids); i++) {
        json_t *e = json_array_get(ids, i);
        json_t *rg = json_object_get(e, "range");
        ck_assert_int_eq(json_integer_value(json_array_get(rg, 0)), next);
        next = (long)json_integer_value(json_array_get(rg, 1)) + 1;
        char name[24];
        snprintf(name, sizeof name, "MySQL%03d", (int)i + 1);
        ck_assert_str_eq(json_string_value(json_object_get(e, "pair")), name);
    }
    ck_assert_int_eq(next, 64);
    ck_assert_int_eq(json_integer_value(json_array_get(
                         json_object_get(json_array_get(ids, 0), "range"), 1)),
                     31);

    json_t *mod = json_object_get(map, "mod_shards");
    ck_assert_int_eq(json_integer_value(json_object_get(mod, "count")), 16);
    ck_assert_str_eq(json_string_value(json_object_get(mod, "database_format")),
                     "modshard%05d");
    json_t *tables = json_object_get(mod, "tables");
    ck_assert_int_eq(json_array_size(tables), 2);
    ck_assert_str_eq(json_string_value(json_array_get(tables, 0)),
                     "users_by_email");
    ck_assert_str_eq(json_string_value(json_array_get(tables, 1)),
                     "users_by_name");
    json_t *mr = json_object_get(mod, "ranges");
    ck_assert_int_eq(json_array_size(mr), NPAIRS);
    next = 0;
    for (size_t i = 0; i < json_array_size(mr); i++) {
        json_t *rg = json_object_get(json_array_get(mr, i), "range");
        ck_assert_int_eq(json_integer_value(json_array_get(rg, 0)), next);
        next = (long)json_integer_value(json_array_get(rg, 1)) + 1;
    }
    ck_assert_int_eq(next, 16);
    json_decref(map);
}
END_TEST

START_TEST(test_server_identity)
{
    /* distinct server_id and gtid_domain_id, binlog on, loopback only */
    for (int k = 1; k <= 2 * NPAIRS; k++) {
        MYSQL *m = connect_to(k);
        ck_assert_int_eq(query_long(m, "SELECT @@server_id"), k);
        ck_assert_int_eq(query_long(m, "SELECT @@gtid_domain_id"), k);
        ck_assert_int_eq(query_long(m, "SELECT @@log_bin"), 1);
        ck_assert_int_eq(query_long(m, "SELECT @@log_slave_updates"), 1);
        ck_assert_int_eq(query_long(m, "SELECT @@gtid_ignore_duplicates"), 1);
        ck_assert_int_eq(
            query_long(m, "SELECT @@binlog_format = 'ROW'"), 1);
        ck_assert_int_eq(
            query_long(m, "SELECT @@bind_address = '127.0.0.1'"), 1);
        ck_assert_int_eq(query_long(m, "SELECT @@port"),
                         harness_port(H, sname(k)));
        mysql_close(m);
    }
    /* root over the socket through the script */
    char *out = NULL;
    ck_assert_int_eq(harness_sql(H, "s3", "SELECT @@server_id;", &out), 0);
    ck_assert_str_eq(out, "3\n");
    free(out);
}
END_TEST

/* _i = pair index 0..NPAIRS-1 */
START_TEST(test_pair_replicates_both_ways)
{
    int master = 2 * _i + 1, standby = 2 * _i + 2;
    double took;
    char db[32], tbl[64];
    snprintf(db, sizeof db, "repl_pair%d", _i + 1);
    snprintf(tbl, sizeof tbl, "%s.t", db);

    MYSQL *m = connect_to(master);
    exec_sql(m, "CREATE DATABASE %s", db);
    exec_sql(m, "CREATE TABLE %s (id INT PRIMARY KEY, who VARCHAR(16)) "
                "ENGINE=InnoDB", tbl);
    exec_sql(m, "INSERT INTO %s VALUES (1, 'master')", tbl);
    mysql_close(m);
    ck_assert_msg(wait_count(standby, tbl, "id = 1 AND who = 'master'", 1,
                             &took),
                  "row written on %s not on %s after %.1fs", sname(master),
                  sname(standby), took);

    MYSQL *s = connect_to(standby);
    exec_sql(s, "INSERT INTO %s VALUES (2, 'standby')", tbl);
    mysql_close(s);
    ck_assert_msg(wait_count(master, tbl, "id = 2 AND who = 'standby'", 1,
                             &took),
                  "row written on %s not on %s after %.1fs", sname(standby),
                  sname(master), took);

    /* and no echo duplicates: exactly 2 rows on both */
    ck_assert(wait_count(master, tbl, "1", 2, NULL));
    ck_assert(wait_count(standby, tbl, "1", 2, NULL));

    assert_link_healthy(master);
    assert_link_healthy(standby);
}
END_TEST

START_TEST(test_pairs_are_separate)
{
    /* a write on pair 1 never reaches pair 2 */
    MYSQL *m = connect_to(1);
    exec_sql(m, "CREATE DATABASE only_pair1");
    exec_sql(m, "CREATE TABLE only_pair1.t (id INT PRIMARY KEY)");
    exec_sql(m, "INSERT INTO only_pair1.t VALUES (1)");
    mysql_close(m);
    ck_assert(wait_count(2, "only_pair1.t", "1", 1, NULL));
    for (int k = 3; k <= 4; k++) {
        MYSQL *o = connect_to(k);
        ck_assert_int_eq(query_long(o, "SELECT COUNT(*) FROM "
                                       "information_schema.schemata WHERE "
                                       "schema_name = 'only_pair1'"),
                         0);
        mysql_close(o);
    }
}
END_TEST

START_TEST(test_standby_kill_restart)
{
    const int master = 1, standby = 2;
    MYSQL *m = connect_to(master);
    exec_sql(m, "CREATE DATABASE kr");
    exec_sql(m, "CREATE TABLE kr.t (id INT PRIMARY KEY)");
    exec_sql(m, "INSERT INTO kr.t VALUES (1)");
    ck_assert(wait_count(standby, "kr.t", "1", 1, NULL));

    ck_assert_int_eq(harness_kill(H, "s2"), 0);
    char err[512];
    MYSQL *dead = try_connect(standby, err, sizeof err);
    ck_assert_msg(dead == NULL, "s2 still answers after kill");
    ck_assert_int_ne(harness_kill(H, "s2"), 0); /* not running any more */

    /* writes on the master while the standby is down */
    for (int i = 2; i <= 100; i++)
        exec_sql(m, "INSERT INTO kr.t VALUES (%d)", i);
    exec_sql(m, "CREATE TABLE kr.later (id INT PRIMARY KEY)");
    exec_sql(m, "INSERT INTO kr.later VALUES (7)");
    mysql_close(m);

    double t0 = now_s();
    ck_assert_int_eq(harness_restart(H, "s2"), 0);
    double took_restart = now_s() - t0, took;
    ck_assert_msg(wait_count(standby, "kr.t", "1", 100, &took),
                  "s2 did not catch up within %ds", WAIT_SECS);
    ck_assert(wait_count(standby, "kr.later", "id = 7", 1, NULL));
    fprintf(stderr, "  (restart of s2: %.2fs, caught up %.2fs later)\n",
            took_restart, took);

    /* and the way back: the master's link reconnects to the restarted s2 */
    MYSQL *s = connect_to(standby);
    exec_sql(s, "INSERT INTO kr.t VALUES (1000)");
    mysql_close(s);
    ck_assert(wait_count(master, "kr.t", "id = 1000", 1, NULL));
    assert_link_healthy(master);
    assert_link_healthy(standby);
}
END_TEST

START_TEST(test_standby_pause_resume)
{
    const int master = 3, standby = 4;
    MYSQL *m = connect_to(master);
    exec_sql(m, "CREATE DATABASE pr");
    exec_sql(m, "CREATE TABLE pr.t (id INT PRIMARY KEY)");
    ck_assert(wait_count(standby, "pr.t", "1", 0, NULL));

    ck_assert_int_eq(harness_pause(H, "s4"), 0);
    /* the master keeps taking writes while its standby is frozen */
    for (int i = 1; i <= 20; i++)
        exec_sql(m, "INSERT INTO pr.t VALUES (%d)", i);
    mysql_close(m);
    ck_assert_int_eq(harness_resume(H, "s4"), 0);
    ck_assert(wait_count(standby, "pr.t", "1", 20, NULL));
    assert_link_healthy(master);
    assert_link_healthy(standby);
}
END_TEST

START_TEST(test_master_stop_restart)
{
    /* clean shutdown of a master; its standby takes writes meanwhile */
    const int master = 3, standby = 4;
    MYSQL *s = connect_to(standby);
    exec_sql(s, "CREATE DATABASE sr");
    exec_sql(s, "CREATE TABLE sr.t (id INT PRIMARY KEY)");
    ck_assert(wait_count(master, "sr.t", "1", 0, NULL));

    ck_assert_int_eq(harness_stop_server(H, "s3"), 0);
    char err[512];
    MYSQL *dead = try_connect(master, err, sizeof err);
    ck_assert_msg(dead == NULL, "s3 still answers after stop");
    for (int i = 1; i <= 50; i++)
        exec_sql(s, "INSERT INTO sr.t VALUES (%d)", i);
    mysql_close(s);

    ck_assert_int_eq(harness_restart(H, "s3"), 0);
    ck_assert(wait_count(master, "sr.t", "1", 50, NULL));
    MYSQL *m = connect_to(master);
    exec_sql(m, "INSERT INTO sr.t VALUES (51)");
    mysql_close(m);
    ck_assert(wait_count(standby, "sr.t", "1", 51, NULL));
    assert_link_healthy(master);
    assert_link_healthy(standby);
}
END_TEST

/* The grants of an account, one line each, sorted ("" on error). */
static char *grants_of(MYSQL *m, const char *account)
{
    char q[200], *lines[32], *out;
    size_t n = 0, len = 1;
    MYSQL_RES *r;
    MYSQL_ROW row;

    snprintf(q, sizeof q, "SHOW GRANTS FOR %s", account);
    ck_assert_msg(mysql_query(m, q) == 0, "%s: %s", q, mysql_error(m));
    ck_assert_ptr_nonnull(r = mysql_store_result(m));
    while ((row = mysql_fetch_row(r)) && n < 32) {
        /* The USAGE line carries the password hash: only its start. */
        const char *v = strncmp(row[0], "GRANT USAGE ON *.*", 18) ? row[0] : "GRANT USAGE ON *.*";
        ck_assert_ptr_nonnull(lines[n] = strdup(v));
        len += strlen(v) + 1;
        n++;
    }
    mysql_free_result(r);
    for (size_t i = 1; i < n; i++) /* a few lines: insertion sort */
        for (size_t j = i; j > 0 && strcmp(lines[j - 1], lines[j]) > 0; j--) {
            char *t = lines[j];
            lines[j] = lines[j - 1];
            lines[j - 1] = t;
        }
    ck_assert_ptr_nonnull(out = malloc(len));
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        strcat(strcat(out, lines[i]), "\n");
        free(lines[i]);
    }
    return out;
}

/* The application's account holds the application's privileges and nothing
 * else (the README's "Accounts and privileges"; the operations they refuse
 * are in server_security.c); the operators' holds them all. */
START_TEST(test_accounts)
{
    static const char *const hosts[] = {"127.0.0.1", "localhost"};
    for (int k = 1; k <= 2 * NPAIRS; k++) {
        MYSQL *m = connect_to(k), *app;
        char err[512], want[1024], account[64], *got;

        for (size_t i = 0; i < 2; i++) {
            snprintf(account, sizeof account, "'shard'@'%s'", hosts[i]);
            snprintf(want, sizeof want,
                     "GRANT SELECT ON `libshard\\_control`.* TO `shard`@`%s`\n"
                     "GRANT SELECT ON `libshard\\_maps`.* TO `shard`@`%s`\n"
                     "GRANT SELECT, INSERT, UPDATE, DELETE ON `db%%`.* TO `shard`@`%s`\n"
                     "GRANT SELECT, INSERT, UPDATE, DELETE ON `modshard%%`.* TO `shard`@`%s`\n"
                     "GRANT USAGE ON *.*\n",
                     hosts[i], hosts[i], hosts[i], hosts[i]);
            got = grants_of(m, account);
            ck_assert_msg(strcmp(got, want) == 0, "%s on %s:\n%s", account, sname(k), got);
            free(got);
            snprintf(account, sizeof account, "'shardadmin'@'%s'", hosts[i]);
            got = grants_of(m, account);
            ck_assert_msg(strncmp(got, "GRANT ALL PRIVILEGES ON *.* TO `shardadmin`", 43) == 0,
                          "%s on %s:\n%s", account, sname(k), got);
            free(got);
        }
        mysql_close(m);
        /* It connects, and rows are all it may touch. */
        app = try_connect_as(k, "shard", err, sizeof err);
        ck_assert_msg(app != NULL, "%s", err);
        ck_assert_int_ne(mysql_query(app, "CREATE DATABASE db99999"), 0);
        ck_assert_int_ne(mysql_query(app, "SHOW SLAVE STATUS"), 0);
        ck_assert_int_ne(mysql_query(app, "SET GLOBAL read_only = 1"), 0);
        ck_assert_int_ne(mysql_query(app, "SET SESSION sql_log_bin = 0"), 0);
        mysql_close(app);
    }
}
END_TEST

START_TEST(test_all_servers_still_up)
{
    /* s2 and s3 were restarted from inside forked tests: they must survive
     * Check's killpg() of that test's process group */
    for (int k = 1; k <= 2 * NPAIRS; k++) {
        MYSQL *m = connect_to(k);
        ck_assert_int_eq(query_long(m, "SELECT 1"), 1);
        mysql_close(m);
        assert_link_healthy(k);
    }
}
END_TEST

static Suite *pairs_suite(void)
{
    Suite *s = suite_create("server_pairs");
    TCase *tc = tcase_create("pairs");
    tcase_set_timeout(tc, 120);
    tcase_add_tests(tc, TESTS(test_map_json, test_server_identity, test_accounts));
    tcase_add_loop_test(tc, test_pair_replicates_both_ways, 0, NPAIRS);
    tcase_add_tests(tc, TESTS(test_pairs_are_separate, test_standby_kill_restart,
                              test_standby_pause_resume, test_master_stop_restart,
                              test_all_servers_still_up));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    double t0 = now_s();
    H = harness_start(NPAIRS);
    if (!H) {
        fprintf(stderr, "server_pairs: could not start the test servers\n");
        return EXIT_FAILURE;
    }
    fprintf(stderr, "server_pairs: %d pairs up in %.2fs (%s)\n", NPAIRS,
            now_s() - t0, harness_dir(H));

    int failed = run_suite(pairs_suite(), CK_FORK_GETENV);

    t0 = now_s();
    harness_stop(H);
    fprintf(stderr, "server_pairs: servers stopped in %.2fs\n", now_s() - t0);
    mysql_library_end();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
