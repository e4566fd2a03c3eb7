/*
 * tests/admin_util.h: what server tests do as root beside the library:
 * a connection of their own (to hold a lock, kill a session), the
 * application's sessions in the processlist, and the context's retry
 * counter. Static, like check_util.h; include it after check_util.h.
 */
#ifndef LIBSHARD_TESTS_ADMIN_UTIL_H
#define LIBSHARD_TESTS_ADMIN_UTIL_H

#include <mysql.h>

#include "check_util.h"

/* Root's connection to a server of h, for what sql_on cannot do: hold a lock. */
CHECK_UTIL MYSQL *admin_on(harness *h, const char *server)
{
    MYSQL *my = mysql_init(NULL);
    ck_assert_ptr_nonnull(my);
    ck_assert_msg(mysql_real_connect(my, "127.0.0.1", HARNESS_ADMIN_USER,
                                     getenv("LIBSHARD_PASSWORD"), NULL,
                                     (unsigned)harness_port(h, server), NULL, 0),
                  "connect to %s: %s", server, mysql_error(my));
    return my;
}

/* Processlist ids of the application's connections on a server, in `state`
 * (NULL: any), up to max of them; how many. */
CHECK_UTIL int app_connections(MYSQL *admin, const char *state, long long *ids, int max)
{
    char q[256];
    MYSQL_RES *res;
    MYSQL_ROW row;
    int n = 0;
    snprintf(q, sizeof q, "SELECT id FROM information_schema.PROCESSLIST WHERE user = "
             "'shard'%s%s%s", state ? " AND state = '" : "", state ? state : "",
             state ? "'" : "");
    ck_assert_msg(mysql_query(admin, q) == 0 && (res = mysql_store_result(admin)),
                  "processlist: %s", mysql_error(admin));
    while ((row = mysql_fetch_row(res)) && n < max)
        ids[n++] = strtoll(row[0], NULL, 10);
    mysql_free_result(res);
    return n;
}

/* The context's libshard_retries_total. */
CHECK_UTIL long long retries_of(shard_ctx *ctx)
{
    char *text = NULL, *at;
    long long v;
    OK(shard_ctx_stats(ctx, &text));
    at = strstr(text, "\nlibshard_retries_total ");
    ck_assert_msg(at, "no libshard_retries_total in the stats");
    v = strtoll(at + strlen("\nlibshard_retries_total "), NULL, 10);
    shard_free(text);
    return v;
}

#endif
