/*
 * Unit tests (no server) for the retry and connection policies of
 * lib/exec.c and lib/conn.c: which errors are retried, how long a retry
 * backs off, and which errors leave a connection fit for the pool.
 */
#include "exec.h" /* private: tests link libshard.a */
#include "check_util.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(transient_errors)
{
    ck_assert(error_transient(SHARD_ECONNECT));
    ck_assert(error_transient(SHARD_EBUSY));
    ck_assert(error_transient(SHARD_EMOVED));
    ck_assert(!error_transient(SHARD_ETIMEOUT)); /* the outcome may be unknown */
    ck_assert(!error_transient(SHARD_EINVAL));
    ck_assert(!error_transient(SHARD_ESERVER));
    ck_assert(!error_transient(SHARD_ENOSHARD));
    ck_assert(!error_transient(SHARD_EPRIV));
}
END_TEST

START_TEST(backoff_grows_jittered_and_capped)
{
    double far = now_seconds() + 3600;

    for (int k = 0; k < 200; k++) {
        /* attempt 1: 10-20 ms; doubling; at most 250 ms, at least half of it */
        double a1 = exec_backoff_ms(1, far), a3 = exec_backoff_ms(3, far);
        double a9 = exec_backoff_ms(9, far);
        ck_assert_msg(a1 >= 10 && a1 <= 20, "attempt 1: %.1f ms", a1);
        ck_assert_msg(a3 >= 40 && a3 <= 80, "attempt 3: %.1f ms", a3);
        ck_assert_msg(a9 >= 125 && a9 <= 250, "attempt 9: %.1f ms", a9);
    }
    /* Never past the deadline. */
    ck_assert(exec_backoff_ms(5, now_seconds() + 0.005) <= 5.0 + 0.5);
    ck_assert(exec_backoff_ms(5, now_seconds() - 1) == 0);
}
END_TEST

START_TEST(connection_reuse)
{
    shard_conn c = {0};

    /* Answers of a healthy server keep the connection. */
    static const int keep[] = {0,           SHARD_EINVAL, SHARD_ENOTFOUND, SHARD_EEXISTS,
                               SHARD_ESERVER, SHARD_EPRIV, SHARD_EBUSY,   SHARD_EMOVED};
    /* A lost, slow or half-read connection does not. */
    static const int drop[] = {SHARD_ECONNECT, SHARD_ETIMEOUT, SHARD_ETLS, SHARD_ETOOBIG,
                               SHARD_ENOMEM, SHARD_EINTERNAL};

    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
        ck_assert_msg(conn_reusable(&c, keep[i]), "code %d", keep[i]);
    for (size_t i = 0; i < sizeof drop / sizeof *drop; i++)
        ck_assert_msg(!conn_reusable(&c, drop[i]), "code %d", drop[i]);
    c.broken = true; /* e.g. a ROLLBACK that failed */
    ck_assert(!conn_reusable(&c, 0));
    ck_assert(!conn_reusable(&c, SHARD_ENOTFOUND));
}
END_TEST

START_TEST(fence_sql)
{
    sqlbuf q;
    sql_init(&q);
    sql_fence_value(&q, "db00042");
    ck_assert_str_eq(q.s, "(SELECT fenced FROM libshard_control.fence WHERE db = 'db00042')");
    sql_free(&q);
}
END_TEST

/* A write under the lease is bounded by the map's lease_ms, in seconds to
 * the millisecond: never a value the server would read as 0 (no limit). */
START_TEST(write_bound_sql)
{
    static const struct {
        unsigned ms;
        const char *want;
    } cases[] = {
        {0, ""},
        {1, "SET STATEMENT max_statement_time=0.001 FOR "},
        {2000, "SET STATEMENT max_statement_time=2.000 FOR "},
        {10250, "SET STATEMENT max_statement_time=10.250 FOR "},
        {600000, "SET STATEMENT max_statement_time=600.000 FOR "},
    };

    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sqlbuf q;
        sql_init(&q);
        sql_write_bound(&q, cases[i].ms);
        ck_assert_str_eq(q.s ? q.s : "", cases[i].want);
        sql_free(&q);
    }
}
END_TEST

/* An import's text goes as a string literal escaped for its connection:
 * quotes, backslashes, NUL and line ends cannot end the literal early. */
START_TEST(string_literal)
{
    static const char text[] = "{\"t\": \"it's \\\"q\\\" \\\\ \xf0\x9f\x98\x80\"}\0\n\r\x1a'";
    MYSQL *my = mysql_init(NULL);
    sqlbuf q;

    ck_assert_ptr_nonnull(my);
    sql_init(&q);
    sql_add(&q, "(");
    sql_str(&q, my, text, sizeof text - 1);
    sql_add(&q, ",");
    sql_str(&q, my, "", 0);
    sql_add(&q, ")");
    ck_assert_int_eq(sql_check(&q), 0);
    ck_assert_str_eq(q.s, "('{\\\"t\\\": \\\"it\\'s \\\\\\\"q\\\\\\\" \\\\\\\\ "
                          "\xf0\x9f\x98\x80\\\"}\\0\\n\\r\\Z\\'','')");
    sql_free(&q);
    mysql_close(my);
}
END_TEST

/* A context on a map file: opening one talks to no server. */
static shard_ctx *file_ctx(char *path, size_t size)
{
    static const char text[] =
        "{\"version\":1,\"open_shards\":1,\"credentials\":{\"user\":\"u\"},"
        "\"objects\":{\"pins\":1},\"pairs\":{\"p\":{\"master\":\"127.0.0.1:1\"}},"
        "\"id_shards\":[{\"range\":[0,0],\"pair\":\"p\"}]}";
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    FILE *f;
    int fd;

    snprintf(path, size, "/tmp/unit_exec-XXXXXX");
    ck_assert_int_ge(fd = mkstemp(path), 0);
    ck_assert_ptr_nonnull(f = fdopen(fd, "w"));
    fputs(text, f);
    fclose(f);
    o.refresh_interval_ms = 0;
    ck_assert_int_eq(shard_ctx_open(&ctx, path, &o), 0);
    return ctx;
}

typedef struct asker {
    shard_ctx *ctx;
    atomic_int *asked;
    bool fresh;
} asker;

static void *ask(void *arg)
{
    asker *a = arg;
    atomic_fetch_add(a->asked, 1);
    a->fresh = exec_reload(a->ctx, 0, true, 0);
    return NULL;
}

/* Threads that ask while a read of the store is in flight share the one
 * read that follows it: one read in flight per context, the others wait. */
START_TEST(reload_single_flight)
{
    char path[64];
    shard_ctx *ctx = file_ctx(path, sizeof path);
    atomic_int asked = 0;
    asker a[8];
    pthread_t th[8];
    uint64_t before;

    /* As if a read were in flight: every asker waits for it. */
    pthread_mutex_lock(&ctx->reload_lock);
    ctx->reloading = true;
    before = ctx->reloads_done;
    pthread_mutex_unlock(&ctx->reload_lock);
    for (int i = 0; i < 8; i++) {
        a[i] = (asker){ctx, &asked, false};
        ck_assert_int_eq(pthread_create(&th[i], NULL, ask, &a[i]), 0);
    }
    while (atomic_load(&asked) < 8)
        sleep_ms(1);
    sleep_ms(200); /* into their wait (not an assertion: a late one only waits less) */
    /* The read in flight ends; having started before they asked, it does
     * not count for them: one more read, shared by all eight. */
    pthread_mutex_lock(&ctx->reload_lock);
    ctx->reloading = false;
    ctx->reloads_done++;
    pthread_cond_broadcast(&ctx->reload_cond);
    pthread_mutex_unlock(&ctx->reload_lock);
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        ck_assert(a[i].fresh);
    }
    ck_assert_uint_eq(ctx->reloads_done - before, 2);

    /* Within the minimum interval, a caller that will not wait reads nothing. */
    before = ctx->reloads_done;
    ck_assert(!exec_reload(ctx, 60000, false, 0));
    ck_assert_uint_eq(ctx->reloads_done, before);
    /* One that waits for a fresh read past a short interval gets one. */
    ck_assert(exec_reload(ctx, 1, true, 0));
    ck_assert_uint_eq(ctx->reloads_done, before + 1);

    /* A read that never ends (a store that hangs) holds a caller only
     * until its deadline; it comes back without a fresh map. */
    pthread_mutex_lock(&ctx->reload_lock);
    ctx->reloading = true;
    pthread_mutex_unlock(&ctx->reload_lock);
    ck_assert(!exec_reload(ctx, 0, true, now_seconds() + 0.2));
    pthread_mutex_lock(&ctx->reload_lock);
    ctx->reloading = false;
    pthread_mutex_unlock(&ctx->reload_lock);
    shard_ctx_free(ctx);
    unlink(path);
}
END_TEST

/* Waiting for a map newer than the current one returns at once when it is
 * already there, and gives up at the deadline when none comes. */
START_TEST(wait_map)
{
    char path[64];
    shard_ctx *ctx = file_ctx(path, sizeof path);

    ck_assert(exec_wait_map(ctx, 0, 0, now_seconds() + 10));
    ck_assert(!exec_wait_map(ctx, 1, 0, now_seconds() + 10)); /* one poll, no newer map */
    ck_assert(!exec_wait_map(ctx, 1, 0, now_seconds() - 1));
    shard_ctx_free(ctx);
    unlink(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec");

    tcase_of(s, "policy", TESTS(transient_errors, backoff_grows_jittered_and_capped,
                                connection_reuse, fence_sql, write_bound_sql, string_literal,
                                reload_single_flight, wait_map));
    return run_suite(s, CK_FORK_GETENV) ? EXIT_FAILURE : EXIT_SUCCESS;
}
