/*
 * tests/server_pool.c: threads sharing one context's connection pools
 * (libshard-threads(3)) against a real pair.
 *
 *   own_connection_back     a thread gets back the connection it released
 *                           last, even when another thread released one after
 *                           it (a plain idle stack hands it the other's)
 *   sixteen_threads_pool_of_four
 *                           16 threads, pool_size 4, while the server kills
 *                           the pool's connections: every call succeeds and
 *                           the server never sees more than 4 of them
 *   killed_idle_connection_replaced
 *                           a pooled connection the server killed while it
 *                           was idle is noticed before a statement is sent on
 *                           it: a create and a get succeed at once, with no
 *                           retry and no "may or may not have been applied"
 */
#include <check.h>
#include <libshard.h>
#include <mysql.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "ctx.h" /* private: the pool itself (tests link libshard_internal.a) */
#include "harness.h"

static harness *H;

/* The pool of the server that serves shard 0. */
static shard_server *pool_of(shard_ctx *ctx)
{
    shard_map *map = NULL;
    shard_server *srv;

    OK(shard_ctx_map(ctx, &map));
    srv = ctx_server(ctx, map, (size_t)shard__map_pair_index(map, 0));
    shard_map_free(map);
    ck_assert_ptr_nonnull(srv);
    return srv;
}

typedef struct other {
    shard_server *srv;
    pthread_barrier_t took, release, released;
    unsigned long id; /* the server's id of the connection it holds */
} other;

static void *other_thread(void *arg)
{
    other *o = arg;
    shard_conn *c = NULL;

    if (conn_acquire(o->srv, &c, NULL) == 0)
        o->id = mysql_thread_id(c->my);
    pthread_barrier_wait(&o->took);
    pthread_barrier_wait(&o->release);
    conn_put(c, c != NULL);
    pthread_barrier_wait(&o->released);
    return NULL;
}

START_TEST(test_own_connection_back)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    shard_conn *mine = NULL, *again = NULL;
    unsigned long my_id;
    pthread_t t;
    other ot;

    o.pool_size = 4;
    OK(shard_ctx_open(&ctx, harness_map_path(H), &o));
    ot.srv = pool_of(ctx);
    pthread_barrier_init(&ot.took, NULL, 2);
    pthread_barrier_init(&ot.release, NULL, 2);
    pthread_barrier_init(&ot.released, NULL, 2);
    OK(conn_acquire(ot.srv, &mine, NULL));
    my_id = mysql_thread_id(mine->my);
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread, &ot), 0);
    pthread_barrier_wait(&ot.took); /* the other thread holds a second connection */
    ck_assert_uint_ne(ot.id, 0);
    ck_assert_uint_ne(ot.id, my_id);
    conn_put(mine, true);           /* mine goes idle first ... */
    pthread_barrier_wait(&ot.release);
    pthread_barrier_wait(&ot.released); /* ... the other's after it */
    OK(conn_acquire(ot.srv, &again, NULL));
    ck_assert_msg(mysql_thread_id(again->my) == my_id,
                  "got connection %lu, the other thread's (%lu), not the one this thread "
                  "released (%lu)", mysql_thread_id(again->my), ot.id, my_id);
    conn_put(again, true);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&ot.took);
    pthread_barrier_destroy(&ot.release);
    pthread_barrier_destroy(&ot.released);
    shard_ctx_free(ctx);
}
END_TEST

#define READERS 16
#define POOL 4

typedef struct reader {
    shard_ctx *ctx;
    const uint64_t *ids;
    int nids;
    atomic_bool *stop;
    unsigned ok, failed;
    char err[400];
} reader;

static void *read_loop(void *arg)
{
    reader *r = arg;
    unsigned k = 0;

    while (!atomic_load(r->stop)) {
        char *json = NULL;
        int rc = shard_object_get(r->ctx, r->ids[k++ % (unsigned)r->nids], &json, NULL);
        shard_free(json);
        if (rc == 0) {
            r->ok++;
        } else if (r->failed++ == 0) {
            snprintf(r->err, sizeof r->err, "%s", shard_errmsg());
        }
    }
    return NULL;
}

/* Connections the application's account holds on s1 right now, and kills
 * them when kill is set. */
static int shard_connections(MYSQL *admin, bool kill)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    int n = 0;

    ck_assert_msg(mysql_query(admin, "SELECT id FROM information_schema.PROCESSLIST "
                                     "WHERE user = 'shard'") == 0 &&
                      (res = mysql_store_result(admin)),
                  "processlist: %s", mysql_error(admin));
    while ((row = mysql_fetch_row(res))) {
        char q[64];
        n++;
        if (kill) {
            snprintf(q, sizeof q, "KILL CONNECTION %s", row[0]);
            mysql_query(admin, q); /* it may have gone meanwhile */
        }
    }
    mysql_free_result(res);
    return n;
}

START_TEST(test_sixteen_threads_pool_of_four)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    uint64_t ids[32];
    reader r[READERS];
    pthread_t t[READERS];
    atomic_bool stop = false;
    unsigned ok = 0, failed = 0;
    int most = 0;
    MYSQL *admin = mysql_init(NULL);

    o.pool_size = POOL;
    OK(shard_ctx_open(&ctx, harness_map_path(H), &o));
    for (int i = 0; i < 32; i++)
        OK(shard_object_create(ctx, 1, (unsigned)(i % 4), LIT("{\"n\":1}"), &ids[i]));
    ck_assert_ptr_nonnull(mysql_real_connect(admin, "127.0.0.1", HARNESS_ADMIN_USER,
                                             getenv("LIBSHARD_PASSWORD"), NULL,
                                             (unsigned)harness_port(H, "s1"), NULL, 0));
    for (int i = 0; i < READERS; i++) {
        r[i] = (reader){ctx, ids, 32, &stop, 0, 0, ""};
        ck_assert_int_eq(pthread_create(&t[i], NULL, read_loop, &r[i]), 0);
    }
    /* 3 s: every 100 ms count the pool's connections, every 300 ms kill them
     * all (idle ones and ones in the middle of a statement). */
    for (int tick = 0; tick < 30; tick++) {
        int n = shard_connections(admin, tick % 3 == 2);
        if (n > most)
            most = n;
        nap_ms(100);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < READERS; i++) {
        pthread_join(t[i], NULL);
        ok += r[i].ok;
        failed += r[i].failed;
        ck_assert_msg(r[i].failed == 0, "reader %d: %u of %u calls failed, the first: %s", i,
                      r[i].failed, r[i].ok + r[i].failed, r[i].err);
        ck_assert_msg(r[i].ok > 0, "reader %d made no call in 3 s", i);
    }
    ck_assert_msg(most <= POOL, "the server saw %d connections of a pool of %d", most, POOL);
    ck_assert_uint_le(pool_of(ctx)->total, POOL);
    fprintf(stderr, "server_pool: 16 threads, pool of 4, kills every 300 ms: %u calls, %u "
                    "failed, at most %d connections\n", ok, failed, most);
    mysql_close(admin);
    shard_ctx_free(ctx);
}
END_TEST

/* Wait until the server has no connection of the application's account
 * (a killed one lingers until its thread ends), then 50 ms more: the
 * close has reached the client's socket. */
static void wait_no_connections(MYSQL *admin)
{
    for (int i = 0; i < 300 && shard_connections(admin, false) > 0; i++)
        nap_ms(10);
    ck_assert_int_eq(shard_connections(admin, false), 0);
    nap_ms(50);
}

START_TEST(test_killed_idle_connection_replaced)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    MYSQL *admin = mysql_init(NULL);
    uint64_t id = 0, id2 = 0, retries;
    char *json = NULL;

    o.pool_size = 1;
    OK(shard_ctx_open(&ctx, harness_map_path(H), &o));
    ck_assert_ptr_nonnull(mysql_real_connect(admin, "127.0.0.1", HARNESS_ADMIN_USER,
                                             getenv("LIBSHARD_PASSWORD"), NULL,
                                             (unsigned)harness_port(H, "s1"), NULL, 0));
    OK(shard_object_create(ctx, 1, 0, LIT("{\"n\":1}"), &id)); /* pools the connection */
    ck_assert_int_eq(shard_connections(admin, true), 1);
    wait_no_connections(admin);
    retries = atomic_load(&ctx->stats.retries);
    /* A write whose outcome would be unknown had it been sent on the dead
     * connection: it must go out on a new one. */
    ck_assert_msg(shard_object_create(ctx, 1, 0, LIT("{\"n\":2}"), &id2) == 0,
                  "create on a pool whose idle connection the server killed: %s",
                  shard_errmsg());
    ck_assert_uint_ne(id2, id);
    OK(shard_object_get(ctx, id2, &json, NULL));
    ck_assert_str_eq(json, "{\"n\":2}");
    shard_free(json);
    json = NULL;
    ck_assert_int_eq(shard_connections(admin, true), 1);
    wait_no_connections(admin);
    OK(shard_object_get(ctx, id, &json, NULL));
    ck_assert_str_eq(json, "{\"n\":1}");
    shard_free(json);
    ck_assert_msg(atomic_load(&ctx->stats.retries) == retries,
                  "%llu call(s) were retried: a statement went out on a killed connection",
                  (unsigned long long)(atomic_load(&ctx->stats.retries) - retries));
    mysql_close(admin);
    shard_ctx_free(ctx);
}
END_TEST

static Suite *pool_suite(void)
{
    Suite *s = suite_create("server_pool");
    TCase *tc = tcase_of(s, "pool", TESTS(test_own_connection_back,
                                          test_sixteen_threads_pool_of_four,
                                          test_killed_idle_connection_replaced));
    tcase_set_timeout(tc, 60);
    return s;
}

int main(void)
{
    return server_test_main("server_pool", &H, 1, 4, 1, 1, pool_suite);
}
