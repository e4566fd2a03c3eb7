/*
 * Failover against real pairs: a planned failover under concurrent writes
 * (clients follow the read-only fence to the new master, nothing is lost),
 * a forced failover of a killed master, and the refusals.
 */
#include "harness.h"

#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <stdatomic.h>
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

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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
        double t0 = now();
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
        if (now() - t0 > w->worst)
            w->worst = now() - t0;
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

/* The operator's context: an account that may set read_only. */
static shard_ctx *admin_ctx(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *a = NULL;
    o.refresh_interval_ms = 0;
    o.connect_timeout_ms = 1000;
    o.user = "shardadmin";
    o.password_env = "LIBSHARD_PASSWORD";
    ck_assert_msg(shard_ctx_open(&a, harness_map_path(h), &o) == 0, "%s", shard_errmsg());
    return a;
}

START_TEST(planned_failover_under_writes)
{
    shard_ctx *admin = admin_ctx();
    shard_failover_report r;
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
    shard_failover_report r;
    uint64_t id;
    double t0;

    /* After the planned failover MySQL001's master is s2: kill it. */
    master_is("MySQL001", harness_port(h, "s2"));
    ck_assert_int_eq(harness_kill(h, "s2"), 0);
    ck_assert_int_eq(shard_pair_failover(admin, "MySQL001", 0, &r), SHARD_ECONNECT);
    ck_assert_msg(strstr(shard_errmsg(), "--force"), "%s", shard_errmsg());
    master_is("MySQL001", harness_port(h, "s2"));
    t0 = now();
    ck_assert_msg(shard_pair_failover(admin, "MySQL001", SHARD_FAILOVER_FORCE, &r) == 0, "%s",
                  shard_errmsg());
    shard_ctx_free(admin);
    printf("forced failover: %.1f ms (lag unknown: %lld)\n", (now() - t0) * 1000,
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

START_TEST(failover_refusals)
{
    shard_failover_report r;
    ck_assert_int_eq(shard_pair_failover(ctx, "MySQL009", 0, &r), SHARD_EINVAL);
    ck_assert_int_eq(shard_pair_failover(ctx, "MySQL001", 8, &r), SHARD_EINVAL);
    ck_assert_int_eq(shard_pair_failover(NULL, "MySQL001", 0, &r), SHARD_EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_failover");
    TCase *tc = tcase_create("failover");
    shard_options o = SHARD_OPTIONS_INIT;
    SRunner *sr;
    int failed;

    h = harness_start_ex(2, 4, 2);
    if (!h)
        return 1;
    o.refresh_interval_ms = 0; /* follow the failover through errors alone */
    o.connect_timeout_ms = 1000;
    if (shard_ctx_open(&ctx, harness_map_path(h), &o) || shard_schema_apply(ctx, NULL, NULL)) {
        fprintf(stderr, "setup: %s\n", shard_errmsg());
        harness_stop(h);
        return 1;
    }
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, planned_failover_under_writes);
    tcase_add_test(tc, forced_failover_of_dead_master);
    tcase_add_test(tc, failover_refusals);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK); /* the tests build on each other */
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
