/*
 * Unit tests (no server) for the retry and connection policies of
 * lib/exec.c and lib/conn.c: which errors are retried, how long a retry
 * backs off, and which errors leave a connection fit for the pool.
 */
#include "exec.h" /* private: tests link libshard.a */

#include <check.h>
#include <stdlib.h>

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

int main(void)
{
    Suite *s = suite_create("exec");
    TCase *tc = tcase_create("policy");
    SRunner *sr;
    int failed;

    tcase_add_test(tc, transient_errors);
    tcase_add_test(tc, backoff_grows_jittered_and_capped);
    tcase_add_test(tc, connection_reuse);
    tcase_add_test(tc, fence_sql);
    suite_add_tcase(s, tc);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
