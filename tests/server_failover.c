/*
 * Failover against real pairs: a planned failover under concurrent writes
 * (clients follow the read-only fence to the new master, nothing is lost),
 * a forced failover of a killed master, and the refusals: halves that could
 * hand out the same local ids, an application account that writes through
 * read_only, masters that cannot be asked about moves. A standby that lags
 * past the read timeout still completes a planned failover, and a forced
 * failover over unsent writes never hands out an acknowledged ID again
 * (shard_pair_failover(3)).
 *
 * Pairs: MySQL001 (s1, s2; shards 0-1) for the first two tests, MySQL002
 * (s3, s4; shards 2-3) for the refusals, the slow standby, the wait option
 * and a report of libshard 0.1.0's layout, MySQL003 (s5,
 * s6; shards 4-5) for the forced failovers over unsent writes.
 */
#include "check_util.h"
#include "first_reports.h"
#include "harness.h"
#include "report.h" /* the 0.1.0 entry point: tests link the internal archive */

#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static harness *h;
static shard_ctx *ctx;

#define MAXW 20000
static uint64_t ids[MAXW];
static int nids;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void master_is(const char *pair, int port)
{
    shard_map *m = NULL;
    const char *master = NULL, *standby = NULL;
    char want[32];

    shard_ctx_reload(ctx);
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    ck_assert_int_eq(shard_map_pair_addrs(m, pair, &master, &standby), 0);
    snprintf(want, sizeof want, "127.0.0.1:%d", port);
    ck_assert_str_eq(master, want);
    shard_map_free(m);
}

typedef struct writer {
    unsigned shard;
    atomic_int *stop;
    int errors;
    char err[300];
    double worst;
} writer;

static void *write_loop(void *arg)
{
    writer *w = arg;
    for (int i = 0; !atomic_load(w->stop); i++) {
        char json[64];
        uint64_t id;
        double t0 = now_s();
        int rc;
        snprintf(json, sizeof json, "{\"i\":%d}", i);
        rc = shard_object_create(ctx, 1, w->shard, json, strlen(json), &id);
        if (rc == 0) {
            pthread_mutex_lock(&lock);
            if (nids < MAXW)
                ids[nids++] = id;
            pthread_mutex_unlock(&lock);
            rc = shard_object_patch(ctx, id, "{\"p\":1}", 7, NULL, NULL);
        }
        if (now_s() - t0 > w->worst)
            w->worst = now_s() - t0;
        if (rc) {
            w->errors++;
            snprintf(w->err, sizeof w->err, "%s", shard_errmsg());
        }
    }
    return NULL;
}

static void check_all_present(void)
{
    shard_item *items = NULL;
    int rc = shard_object_mget(ctx, ids, (size_t)nids, &items);
    ck_assert_msg(rc == 0, "mget: %s", shard_errmsg());
    for (int i = 0; i < nids; i++) {
        ck_assert_msg(items[i].status == 0, "object %llu lost (%d)",
                      (unsigned long long)ids[i], items[i].status);
        ck_assert_ptr_nonnull(strstr(items[i].data, "\"p\":1"));
    }
    shard_items_free(items, (size_t)nids);
}

/* Warnings the library logged through an admin context. */
static char logged[8192];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void log_keep(int level, const char *message, void *payload)
{
    (void)level;
    (void)payload;
    pthread_mutex_lock(&log_lock);
    if (strlen(logged) + strlen(message) + 2 < sizeof logged) {
        strcat(logged, message);
        strcat(logged, "\n");
    }
    pthread_mutex_unlock(&log_lock);
}

/* The operator's context: an account that may set read_only. read_timeout_ms
 * 0: the default. */
static shard_ctx *admin_ctx_ex(unsigned read_timeout_ms)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *a = NULL;
    o.refresh_interval_ms = 0;
    o.connect_timeout_ms = 1000;
    if (read_timeout_ms)
        o.read_timeout_ms = read_timeout_ms;
    harness_admin_options(&o);
    o.log = log_keep;
    ck_assert_msg(shard_ctx_open(&a, harness_map_path(h), &o) == 0, "%s", shard_errmsg());
    return a;
}

static shard_ctx *admin_ctx(void)
{
    return admin_ctx_ex(0);
}

/* SQL as root on a server; the output without its trailing newlines (free it). */
#define sql_out(server, sql) chomp(sql_ok(h, server, sql))

static void sql_do(const char *server, const char *sql)
{
    free(sql_out(server, sql));
}

static int read_only_of(const char *server)
{
    char *v = sql_out(server, "SELECT @@global.read_only");
    int ro = atoi(v);
    free(v);
    return ro;
}

static uint64_t stored_version(void)
{
    shard_map *m = NULL;
    uint64_t v;
    shard_ctx_reload(ctx);
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    v = shard_map_version(m);
    shard_map_free(m);
    return v;
}

/* The standby has applied everything its master wrote (up to 30 s), however
 * long the master's position. */
static void caught_up(const char *standby, const char *master)
{
    char *pos = sql_out(master, "SELECT @@gtid_binlog_pos"), *sql, *r;
    size_t n = strlen(pos) + 64;
    sql = malloc(n);
    ck_assert_ptr_nonnull(sql);
    snprintf(sql, n, "SELECT MASTER_GTID_WAIT('%s', 30)", pos);
    r = sql_out(standby, sql);
    free(sql);
    ck_assert_msg(strcmp(r, "0") == 0, "%s did not catch up with %s (%s)", standby, master,
                  pos);
    free(r);
    free(pos);
}

/* A refused failover changed nothing: same map, the master still writable
 * and taking the application's writes. */
static void nothing_changed(const char *pair, const char *master, uint64_t version,
                            unsigned shard)
{
    uint64_t id;
    ck_assert_uint_eq(stored_version(), version);
    master_is(pair, harness_port(h, master));
    ck_assert_int_eq(read_only_of(master), 0);
    ck_assert_msg(shard_object_create(ctx, 1, shard, "{\"still\":1}", 11, &id) == 0, "%s",
                  shard_errmsg());
}

START_TEST(planned_failover_under_writes)
{
    shard_ctx *admin = admin_ctx();
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    atomic_int stop = 0;
    writer w[2] = {{0, &stop, 0, "", 0}, {1, &stop, 0, "", 0}};
    pthread_t t[2];
    char *out = NULL;
    int rc;

    master_is("MySQL001", harness_port(h, "s1"));
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, write_loop, &w[i]);
    usleep(500000);
    /* The application's account cannot fence: it lacks READ_ONLY ADMIN. */
    ck_assert_int_eq(shard_pair_failover(ctx, "MySQL001", 0, &r), SHARD_EPRIV);
    rc = shard_pair_failover(admin, "MySQL001", 0, &r);
    shard_ctx_free(admin);
    usleep(500000);
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        ck_assert_msg(w[i].errors == 0, "writer %d: %d errors: %s", i, w[i].errors, w[i].err);
    }
    ck_assert_msg(rc == 0, "failover: %s", shard_errmsg());
    printf("planned failover: lag %lld transactions, waited %.1f ms, total %.1f ms; worst "
           "writer call %.1f ms\n", (long long)r.lag_transactions, r.wait_ms, r.total_ms,
           (w[0].worst > w[1].worst ? w[0].worst : w[1].worst) * 1000);
    ck_assert_int_eq(r.old_master_fenced, 1);
    ck_assert_int_ge(r.lag_transactions, 0);
    master_is("MySQL001", harness_port(h, "s2"));
    ck_assert_int_eq(harness_sql(h, "s1", "SELECT @@read_only", &out), 0);
    ck_assert_str_eq(out, "1\n");
    free(out);
    check_all_present();
    /* Writes go to the new master and still reach the old one, now standby. */
    {
        uint64_t id;
        char sql[200];
        ck_assert_int_eq(shard_object_create(ctx, 1, 0, "{\"after\":1}", 11, &id), 0);
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db00000.pins WHERE local_id = %llu",
                 (unsigned long long)shard_id_local(id));
        for (int i = 0; i < 100; i++) {
            ck_assert_int_eq(harness_sql(h, "s1", sql, &out), 0);
            if (strcmp(out, "1\n") == 0)
                break;
            free(out);
            out = NULL;
            usleep(50000);
        }
        ck_assert_str_eq(out, "1\n");
        free(out);
    }
}
END_TEST

START_TEST(forced_failover_of_dead_master)
{
    shard_ctx *admin = admin_ctx();
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    uint64_t id;
    double t0;

    /* After the planned failover MySQL001's master is s2: kill it. */
    master_is("MySQL001", harness_port(h, "s2"));
    ck_assert_int_eq(harness_kill(h, "s2"), 0);
    ck_assert_int_eq(shard_pair_failover(admin, "MySQL001", 0, &r), SHARD_ECONNECT);
    ck_assert_msg(strstr(shard_errmsg(), "--force"), "%s", shard_errmsg());
    /* Refused: it says so, and never reads as if it promoted. */
    ck_assert_msg(strstr(shard_errmsg(), "refused, nothing promoted") &&
                      !strstr(shard_errmsg(), "promoting"), "%s", shard_errmsg());
    master_is("MySQL001", harness_port(h, "s2"));
    t0 = now_s();
    ck_assert_msg(shard_pair_failover(admin, "MySQL001", SHARD_FAILOVER_FORCE, &r) == 0, "%s",
                  shard_errmsg());
    shard_ctx_free(admin);
    printf("forced failover: %.1f ms (lag unknown: %lld)\n", (now_s() - t0) * 1000,
           (long long)r.lag_transactions);
    ck_assert_int_eq(r.old_master_fenced, 0);
    ck_assert_int_eq(r.lag_transactions, -1);
    master_is("MySQL001", harness_port(h, "s1"));
    /* Clients continue on the promoted server. */
    ck_assert_int_eq(shard_object_create(ctx, 1, 1, "{\"forced\":1}", 12, &id), 0);
    ck_assert_int_eq(shard_object_patch(ctx, id, "{\"p\":1}", 7, NULL, NULL), 0);
    ids[nids++] = id;
    check_all_present();
    /* The old master comes back as the standby and catches up. */
    ck_assert_int_eq(harness_restart(h, "s2"), 0);
}
END_TEST

/* Issue 9 item 2: a planned failover of a pair whose halves could hand out
 * the same local ids is refused, naming the servers and their settings. */
START_TEST(failover_refuses_overlapping_ids)
{
    shard_ctx *admin = admin_ctx();
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    uint64_t v0 = stored_version();
    char s3[32], s4[32];
    const char *msg;

    snprintf(s3, sizeof s3, "127.0.0.1:%d", harness_port(h, "s3"));
    snprintf(s4, sizeof s4, "127.0.0.1:%d", harness_port(h, "s4"));
    master_is("MySQL002", harness_port(h, "s3"));
    sql_do("s4", "SET GLOBAL auto_increment_offset = 1"); /* as the master's */
    ck_assert_int_eq(shard_pair_failover(admin, "MySQL002", 0, &r), SHARD_EINVAL);
    msg = shard_errmsg();
    ck_assert_msg(strstr(msg, s3) && strstr(msg, s4) &&
                  strstr(msg, "auto_increment_increment=2, auto_increment_offset=1; standby"),
                  "%s", msg);
    nothing_changed("MySQL002", "s3", v0, 2);
    /* A master that answers: --force is the planned failover. */
    ck_assert_int_eq(shard_pair_failover(admin, "MySQL002", SHARD_FAILOVER_FORCE, &r),
                     SHARD_EINVAL);
    nothing_changed("MySQL002", "s3", v0, 2);
    sql_do("s4", "SET GLOBAL auto_increment_increment = 1; SET GLOBAL auto_increment_offset = 2");
    ck_assert_int_eq(shard_pair_failover(admin, "MySQL002", 0, &r), SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "auto_increment_increment=1"), "%s", shard_errmsg());
    nothing_changed("MySQL002", "s3", v0, 2);
    sql_do("s4", "SET GLOBAL auto_increment_increment = 2; SET GLOBAL auto_increment_offset = 2");
    shard_ctx_free(admin);
}
END_TEST

/* Issue 9 item 3: when the application's account writes through read_only
 * (directly, through ALL PRIVILEGES, a role or PUBLIC), failover refuses
 * before changing anything; without it, it proceeds. */
START_TEST(failover_refuses_unfenceable_account)
{
    static const struct {
        const char *grant, *revoke, *says;
    } cases[] = {
        {"GRANT READ_ONLY ADMIN ON *.* TO 'shard'@'127.0.0.1'",
         "REVOKE READ_ONLY ADMIN ON *.* FROM 'shard'@'127.0.0.1'",
         "shard@127.0.0.1 holds READ_ONLY ADMIN"},
        /* (REVOKE ALL PRIVILEGES ON *.* leaves the database grants) */
        {"GRANT ALL PRIVILEGES ON *.* TO 'shard'@'localhost'",
         "REVOKE ALL PRIVILEGES ON *.* FROM 'shard'@'localhost'",
         "shard@localhost holds ALL PRIVILEGES"},
        {"CREATE ROLE fo_writer; GRANT READ_ONLY ADMIN ON *.* TO fo_writer;"
         " GRANT fo_writer TO 'shard'@'127.0.0.1'",
         "DROP ROLE fo_writer", "through role fo_writer"},
        {"GRANT READ_ONLY ADMIN ON *.* TO PUBLIC", "REVOKE READ_ONLY ADMIN ON *.* FROM PUBLIC",
         "through role PUBLIC"},
    };
    shard_ctx *admin = admin_ctx();
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    uint64_t v0 = stored_version();
    char msg0[1024];
    int rc0;

    master_is("MySQL002", harness_port(h, "s3"));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char sql[400], msg[1024];
        int rc;
        snprintf(sql, sizeof sql, "SET sql_log_bin = 0; %s", cases[i].grant);
        sql_do("s3", sql);
        rc = shard_pair_failover(admin, "MySQL002", 0, &r);
        snprintf(msg, sizeof msg, "%s", shard_errmsg());
        nothing_changed("MySQL002", "s3", v0, 2);
        snprintf(sql, sizeof sql, "SET sql_log_bin = 0; %s", cases[i].revoke);
        sql_do("s3", sql);
        ck_assert_msg(rc == SHARD_EPRIV, "case %zu: rc %d: %s", i, rc, msg);
        ck_assert_msg(strstr(msg, cases[i].says) && strstr(msg, "cannot be fenced"),
                      "case %zu: %s", i, msg);
        ck_assert_int_eq(r.old_master_fenced, 0);
    }
    /* The application's account as servers.sh makes it is fine, and so is
     * SUPER, which no longer writes through read_only on MariaDB 10.11. */
    sql_do("s3", "SET sql_log_bin = 0; GRANT SUPER ON *.* TO 'shard'@'127.0.0.1'");
    rc0 = shard_pair_failover(admin, "MySQL002", 0, &r);
    snprintf(msg0, sizeof msg0, "%s", shard_errmsg());
    sql_do("s3", "SET sql_log_bin = 0; REVOKE SUPER ON *.* FROM 'shard'@'127.0.0.1'");
    ck_assert_msg(rc0 == 0, "%s", msg0);
    ck_assert_int_eq(r.old_master_fenced, 1);
    ck_assert_uint_eq(r.map_version, v0 + 1);
    master_is("MySQL002", harness_port(h, "s4"));
    shard_ctx_free(admin);
}
END_TEST

typedef struct failover_call {
    shard_ctx *ctx;
    const char *pair;
    int rc;
    char err[600];
    shard_failover_report r;
} failover_call;

static void *failover_thread(void *arg)
{
    failover_call *f = arg;
    f->rc = shard_pair_failover(f->ctx, f->pair, 0, &f->r);
    snprintf(f->err, sizeof f->err, "%s", shard_errmsg());
    return NULL;
}

/* Issue 9 item 5: the wait for the standby outlasts the connection's read
 * timeout (2 s here) because it is made in steps. */
START_TEST(failover_waits_past_the_read_timeout)
{
    failover_call f;
    pthread_t t;
    int i;

    memset(&f, 0, sizeof f);
    f.r = (shard_failover_report)SHARD_FAILOVER_REPORT_INIT;
    f.ctx = admin_ctx_ex(2000);
    f.pair = "MySQL002";
    master_is("MySQL002", harness_port(h, "s4"));
    caught_up("s3", "s4");
    sql_do("s3", "STOP SLAVE SQL_THREAD");
    nids = 0;
    for (i = 0; i < 20; i++) {
        uint64_t id;
        ck_assert_int_eq(shard_object_create(ctx, 1, 2 + (unsigned)i % 2, "{\"p\":1}", 7, &id),
                         0);
        ids[nids++] = id;
    }
    pthread_create(&t, NULL, failover_thread, &f);
    for (i = 0; i < 600 && read_only_of("s4") == 0; i++)
        usleep(50000); /* until the fence is up and the wait has begun */
    ck_assert_int_eq(read_only_of("s4"), 1);
    sleep(3); /* longer than the read timeout */
    sql_do("s3", "START SLAVE SQL_THREAD");
    pthread_join(t, NULL);
    shard_ctx_free(f.ctx);
    ck_assert_msg(f.rc == 0, "failover: %s", f.err);
    ck_assert_int_gt(f.r.lag_transactions, 0);
    master_is("MySQL002", harness_port(h, "s3"));
    check_all_present();
}
END_TEST

/* The failover's wait option (shard_pair_failover_opts(3)): a standby that
 * cannot apply what it has within wait_ms gives SHARD_ETIMEOUT after about
 * that long, not the default 30 s, and the master stays in charge. */
START_TEST(failover_wait_option_bounds_the_wait)
{
    shard_ctx *admin = admin_ctx_ex(2000);
    shard_failover_options o = SHARD_FAILOVER_OPTIONS_INIT;
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    uint64_t v0 = stored_version(), id;
    double t0, took;
    int rc;

    master_is("MySQL002", harness_port(h, "s3"));
    caught_up("s4", "s3");
    sql_do("s4", "STOP SLAVE SQL_THREAD");
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(shard_object_create(ctx, 1, 2, "{\"p\":1}", 7, &id), 0);
    o.wait_ms = 1000;
    t0 = now_s();
    rc = shard_pair_failover_opts(admin, "MySQL002", &o, &r);
    took = now_s() - t0;
    sql_do("s4", "START SLAVE SQL_THREAD");
    ck_assert_msg(rc == SHARD_ETIMEOUT, "rc %d: %s", rc, shard_errmsg());
    ck_assert_msg(strstr(shard_errmsg(), "within 1 s (the failover's wait)"), "%s",
                  shard_errmsg());
    ck_assert_msg(took >= 0.9 && took < 8, "the failover took %.1f s for a 1 s wait", took);
    ck_assert_uint_eq(r.version, SHARD_FAILOVER_REPORT_VERSION);
    ck_assert_str_eq(r.pair, "MySQL002");
    ck_assert_int_eq(r.old_master_fenced, 1);
    ck_assert_msg(r.wait_ms >= 900 && r.wait_ms < 8000, "wait_ms %.0f", r.wait_ms);
    ck_assert_uint_eq(r.map_version, 0);
    caught_up("s4", "s3");
    nothing_changed("MySQL002", "s3", v0, 2);
    shard_ctx_free(admin);
}
END_TEST

/* A program built against libshard 0.1.0 calls shard_pair_failover@LIBSHARD_0
 * with the first layout of the report: filled, and nothing written past its
 * end (a heap struct of exactly that size: ASan). Then back, with a wait
 * option long enough. */
START_TEST(failover_fills_a_first_layout_report)
{
    shard_ctx *admin = admin_ctx();
    old_failover_report *old = malloc(sizeof *old);
    shard_failover_options o = SHARD_FAILOVER_OPTIONS_INIT;
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    char s3[32], s4[32];
    int rc;

    ck_assert_ptr_nonnull(old);
    memset(old, 0xA5, sizeof *old); /* a 0.1.0 program need not zero it */
    snprintf(s3, sizeof s3, "127.0.0.1:%d", harness_port(h, "s3"));
    snprintf(s4, sizeof s4, "127.0.0.1:%d", harness_port(h, "s4"));
    master_is("MySQL002", harness_port(h, "s3"));
    caught_up("s4", "s3");
    rc = shard__pair_failover_v0(admin, "MySQL002", 0, old);
    ck_assert_msg(rc == 0, "failover: %s", shard_errmsg());
    ck_assert_str_eq(old->pair, "MySQL002");
    ck_assert_str_eq(old->old_master, s3);
    ck_assert_str_eq(old->new_master, s4);
    ck_assert_int_eq(old->old_master_fenced, 1);
    ck_assert_int_ge(old->lag_transactions, 0);
    ck_assert(old->total_ms > 0 && old->wait_ms >= 0);
    ck_assert_uint_eq(old->map_version, stored_version());
    master_is("MySQL002", harness_port(h, "s4"));
    free(old);

    caught_up("s3", "s4");
    o.wait_ms = 20000;
    rc = shard_pair_failover_opts(admin, "MySQL002", &o, &r);
    ck_assert_msg(rc == 0, "failover back: %s", shard_errmsg());
    ck_assert_str_eq(r.new_master, s3);
    ck_assert_uint_eq(r.map_version, stored_version());
    master_is("MySQL002", harness_port(h, "s3"));
    check_all_present();
    shard_ctx_free(admin);
}
END_TEST

/* Issue 9 item 5: a master that cannot be asked about unfinished moves
 * makes failover refuse (it would otherwise proceed without looking). */
START_TEST(failover_refuses_unchecked_moves)
{
    shard_ctx *admin = admin_ctx_ex(2000);
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    uint64_t v0 = stored_version();
    int rc;

    master_is("MySQL001", harness_port(h, "s1"));
    master_is("MySQL002", harness_port(h, "s3"));
    ck_assert_int_eq(harness_pause(h, "s1"), 0); /* another pair's master */
    rc = shard_pair_failover(admin, "MySQL002", 0, &r);
    ck_assert_int_eq(harness_resume(h, "s1"), 0);
    shard_ctx_free(admin);
    ck_assert_msg(rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT, "rc %d: %s", rc,
                  shard_errmsg());
    ck_assert_msg(strstr(shard_errmsg(), "cannot tell whether a move"), "%s", shard_errmsg());
    nothing_changed("MySQL002", "s3", v0, 2);
}
END_TEST

typedef struct long_call {
    shard_ctx *ctx;
    int rc;
    char err[600];
    atomic_int done;
} long_call;

static void *long_failover_thread(void *arg)
{
    long_call *f = arg;
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    f->rc = shard_pair_failover(f->ctx, "MySQL002", 0, &r);
    snprintf(f->err, sizeof f->err, "%s", shard_errmsg());
    atomic_store(&f->done, 1);
    return NULL;
}

#define LONG_DOMAINS 200
#define LONG_TAIL_AT 1200 /* entries that start this far into the position */

/*
 * A master whose GTID position is longer than 1023 bytes (a transaction in
 * each of 200 domains): a planned failover waits for the whole position.
 * The standby lacks only the domains printed last in the position (past
 * byte 1200) and its SQL thread is stopped, so the failover cannot finish
 * until it runs again; a wait for a truncated position would not wait.
 */
START_TEST(failover_waits_for_a_long_position)
{
    long_call f;
    pthread_t t;
    char *pos, *got, *save = NULL, stmt[160];
    bool tail[LONG_DOMAINS] = {false};
    size_t ntail = 0, len, at = 0;
    char *sql;
    int i;

    memset(&f, 0, sizeof f);
    atomic_init(&f.done, 0);
    master_is("MySQL002", harness_port(h, "s3"));
    len = (size_t)LONG_DOMAINS * sizeof stmt + 200;
    sql = malloc(len);
    ck_assert_ptr_nonnull(sql);
    snprintf(sql, len, "CREATE DATABASE fo_long; CREATE TABLE fo_long.t (d INT, round INT,"
             " PRIMARY KEY (d, round));");
    for (i = 0; i < LONG_DOMAINS; i++) {
        snprintf(stmt, sizeof stmt, " SET SESSION gtid_domain_id = %d;"
                 " INSERT INTO fo_long.t VALUES (%d, 1);", 100000 + i, i);
        strcat(sql, stmt);
    }
    sql_do("s3", sql);
    caught_up("s4", "s3");
    pos = sql_out("s3", "SELECT @@gtid_binlog_pos");
    ck_assert_msg(strlen(pos) > 1023 + 200, "position of %zu bytes", strlen(pos));
    /* The domains of the entries printed past LONG_TAIL_AT. */
    for (char *e = strtok_r(pos, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
        long d = strtol(e, NULL, 10) - 100000;
        if (at >= LONG_TAIL_AT && d >= 0 && d < LONG_DOMAINS) {
            tail[d] = true;
            ntail++;
        }
        at += strlen(e) + 1;
    }
    free(pos);
    ck_assert_uint_gt(ntail, 0);
    sql_do("s4", "STOP SLAVE SQL_THREAD");
    snprintf(sql, len, "SELECT 1;");
    for (i = 0; i < LONG_DOMAINS; i++)
        if (tail[i]) {
            snprintf(stmt, sizeof stmt, " SET SESSION gtid_domain_id = %d;"
                     " INSERT INTO fo_long.t VALUES (%d, 2);", 100000 + i, i);
            strcat(sql, stmt);
        }
    sql_do("s3", sql);
    free(sql);

    f.ctx = admin_ctx();
    pthread_create(&t, NULL, long_failover_thread, &f);
    for (i = 0; i < 600 && !atomic_load(&f.done) && read_only_of("s3") == 0; i++)
        usleep(50000); /* until the fence is up and the wait has begun */
    usleep(500000);
    ck_assert_msg(!atomic_load(&f.done), "failover returned (%d: %s) while the standby "
                  "lacked the end of the position", f.rc, f.err);
    sql_do("s4", "START SLAVE SQL_THREAD");
    pthread_join(t, NULL);
    shard_ctx_free(f.ctx);
    ck_assert_msg(f.rc == 0, "failover: %s", f.err);
    master_is("MySQL002", harness_port(h, "s4"));
    got = sql_out("s4", "SELECT COUNT(*) FROM fo_long.t WHERE round = 2");
    ck_assert_uint_eq(strtoul(got, NULL, 10), ntail);
    free(got);
}
END_TEST

/* What writers were told, across the forced failovers of MySQL003. */
typedef struct ack {
    uint64_t id;
    int writer, n;
    bool after; /* acknowledged after the failover returned */
} ack;

#define MAXACK 60000
static ack acks[MAXACK];
static atomic_int nacks;
static atomic_int phase_after; /* 1 once the failover returned */

typedef struct id_writer {
    int k;
    atomic_int *stop;
    atomic_int done_after; /* acks since the failover */
} id_writer;

static void *id_write_loop(void *arg)
{
    id_writer *w = arg;
    for (int i = 0; !atomic_load(w->stop); i++) {
        char json[64];
        uint64_t id;
        bool after = atomic_load(&phase_after);
        snprintf(json, sizeof json, "{\"tag\":\"w%d-%d\"}", w->k, i);
        if (shard_object_create(ctx, 1, 4 + (unsigned)w->k % 2, json, strlen(json), &id))
            continue;
        pthread_mutex_lock(&lock);
        if (nacks < MAXACK)
            acks[atomic_fetch_add(&nacks, 1)] = (ack){id, w->k, i, after};
        pthread_mutex_unlock(&lock);
        if (after)
            atomic_fetch_add(&w->done_after, 1);
        if (atomic_load(&nacks) >= MAXACK)
            break;
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * Issue 9 item 2's repro on MySQL003: the standby stops receiving while
 * writers go on, the master is killed, and a forced failover promotes the
 * standby. Then no acknowledged ID names another object: every one that
 * reached the new master reads back its own content, no ID was
 * acknowledged twice, and new creates get IDs no writer was ever given.
 */
static uint64_t forced_over_unsent_writes(const char *master, const char *standby,
                                          shard_ctx *admin)
{
    enum { WRITERS = 2 };
    id_writer w[WRITERS];
    pthread_t t[WRITERS];
    atomic_int stop = 0;
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    static int generation;
    unsigned long long raised = 0;
    const char *said;
    uint64_t *sorted;
    int n, lost = 0, before = atomic_load(&nacks), rc;

    atomic_store(&phase_after, 0);
    generation++;
    for (int k = 0; k < WRITERS; k++) {
        w[k].k = k + WRITERS * generation; /* tags stay unique */
        w[k].stop = &stop;
        atomic_init(&w[k].done_after, 0);
        pthread_create(&t[k], NULL, id_write_loop, &w[k]);
    }
    while (atomic_load(&nacks) < before + 100)
        usleep(10000);
    sql_do(standby, "STOP SLAVE IO_THREAD");
    before = atomic_load(&nacks);
    while (atomic_load(&nacks) < before + 200)
        usleep(10000); /* acknowledged by the master alone */
    ck_assert_int_eq(harness_kill(h, master), 0);
    pthread_mutex_lock(&log_lock);
    logged[0] = '\0';
    pthread_mutex_unlock(&log_lock);
    rc = shard_pair_failover(admin, "MySQL003", SHARD_FAILOVER_FORCE, &r);
    ck_assert_msg(rc == 0, "forced failover: %s", shard_errmsg());
    ck_assert_int_eq(r.old_master_fenced, 0);
    said = strstr(logged, "raised the AUTO_INCREMENT of ");
    ck_assert_msg(said && sscanf(said, "raised the AUTO_INCREMENT of %llu", &raised) == 1, "%s",
                  logged);
    atomic_store(&phase_after, 1);
    master_is("MySQL003", harness_port(h, standby));
    for (int k = 0; k < WRITERS; k++)
        while (atomic_load(&w[k].done_after) < 50)
            usleep(10000);
    atomic_store(&stop, 1);
    for (int k = 0; k < WRITERS; k++)
        pthread_join(t[k], NULL);

    n = atomic_load(&nacks);
    sorted = malloc(sizeof *sorted * (size_t)(n + 1));
    ck_assert_ptr_nonnull(sorted);
    for (int i = 0; i < n; i++)
        sorted[i] = acks[i].id;
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_u64);
    for (int i = 1; i < n; i++)
        ck_assert_msg(sorted[i] != sorted[i - 1], "ID %llu acknowledged twice",
                      (unsigned long long)sorted[i]);
    for (int i = 0; i < n; i++) {
        shard_item *items = NULL;
        char want[64];
        int got = shard_object_mget(ctx, &acks[i].id, 1, &items);
        ck_assert_msg(got == 0, "mget: %s", shard_errmsg());
        snprintf(want, sizeof want, "\"w%d-%d\"", acks[i].writer, acks[i].n);
        if (items[0].status == SHARD_ENOTFOUND) {
            ck_assert_msg(!acks[i].after, "object %llu (%s), created after the failover, "
                          "is lost", (unsigned long long)acks[i].id, want);
            lost++;
        } else {
            ck_assert_int_eq(items[0].status, 0);
            ck_assert_msg(strstr(items[0].data, want), "ID %llu names %s, not %s",
                          (unsigned long long)acks[i].id, items[0].data, want);
        }
        shard_items_free(items, 1);
    }
    /* The unsent writes were really lost: the scenario happened. */
    ck_assert_int_gt(lost, 0);
    for (int i = 0; i < 300; i++) {
        uint64_t id;
        ck_assert_int_eq(shard_object_create(ctx, 1, 4 + (unsigned)i % 2, "{\"new\":1}", 9,
                                             &id), 0);
        ck_assert_msg(!bsearch(&id, sorted, (size_t)n, sizeof *sorted, cmp_u64),
                      "new object got ID %llu, acknowledged before", (unsigned long long)id);
    }
    printf("forced failover over unsent writes: %d acknowledged, %d lost with %s, "
           "%llu counters raised\n", n, lost, master, raised);
    free(sorted);
    return raised;
}

START_TEST(forced_failover_never_reuses_ids)
{
    shard_ctx *admin = admin_ctx();
    uint64_t raised;
    master_is("MySQL003", harness_port(h, "s5"));
    caught_up("s6", "s5");
    raised = forced_over_unsent_writes("s5", "s6", admin);
    shard_ctx_free(admin);
    /* The old master comes back as the standby (its unsent rows stay
     * there, and nothing it has flows to the new master). */
    ck_assert_int_eq(harness_restart(h, "s5"), 0);
    ck_assert_uint_eq(raised, 2 * 3); /* shards 4 and 5, three object types */
}
END_TEST

/* The same over a misconfigured pair: the standby steps by 1, as a default
 * server does. The forced failover warns and goes on, and the raised
 * counters alone keep the IDs apart. */
START_TEST(forced_failover_raises_counters)
{
    shard_ctx *admin = admin_ctx();
    master_is("MySQL003", harness_port(h, "s6"));
    caught_up("s5", "s6");
    sql_do("s5", "SET GLOBAL auto_increment_increment = 1; SET GLOBAL auto_increment_offset = 1");
    ck_assert_uint_eq(forced_over_unsent_writes("s6", "s5", admin), 2 * 3);
    ck_assert_msg(strstr(logged, "auto_increment_increment=1, auto_increment_offset=1"), "%s",
                  logged);
    shard_ctx_free(admin);
}
END_TEST

START_TEST(failover_refusals)
{
    shard_ctx *admin = admin_ctx();
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    uint64_t v0 = stored_version();
    ck_assert_int_eq(shard_pair_failover(admin, "MySQL009", 0, &r), SHARD_EINVAL);
    ck_assert_int_eq(shard_pair_failover(admin, "MySQL001", 8, &r), SHARD_EINVAL);
    ck_assert_int_eq(shard_pair_failover(NULL, "MySQL001", 0, &r), SHARD_EINVAL);
    r.version = 5; /* an unknown report version: refused, naming it, nothing done */
    ck_assert_int_eq(shard_pair_failover(admin, "MySQL001", 0, &r), SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "shard_failover_report.version 5"), "%s",
                  shard_errmsg());
    ck_assert_str_eq(r.pair, "");
    ck_assert_uint_eq(stored_version(), v0);
    shard_ctx_free(admin);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_failover");
    TCase *tc = tcase_create("failover");
    shard_options o = SHARD_OPTIONS_INIT;
    int failed;

    h = harness_start_ex(3, 6, 3);
    if (!h)
        return 1;
    o.refresh_interval_ms = 0; /* follow the failover through errors alone */
    o.connect_timeout_ms = 1000;
    if (harness_schema_apply(h) || shard_ctx_open(&ctx, harness_map_path(h), &o)) {
        fprintf(stderr, "setup: %s\n", shard_errmsg());
        harness_stop(h);
        return 1;
    }
    tcase_set_timeout(tc, 120);
    tcase_add_tests(tc, TESTS(planned_failover_under_writes, forced_failover_of_dead_master,
                              failover_refusals, failover_refuses_overlapping_ids,
                              failover_refuses_unfenceable_account,
                              failover_waits_past_the_read_timeout,
                              failover_wait_option_bounds_the_wait,
                              failover_fills_a_first_layout_report,
                              failover_refuses_unchecked_moves,
                              failover_waits_for_a_long_position, forced_failover_never_reuses_ids,
                              forced_failover_raises_counters));
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_NOFORK); /* the tests build on each other */
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
