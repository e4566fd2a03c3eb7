/*
 * tests/check_util.h: what the Check test programs share: running a suite,
 * assertions on a libshard call's return code, clocks, formatted strings,
 * and (for server tests, through tests/harness.h) the fence rows, maps and
 * mains of the tests that route shards by hand. Every function is static
 * (each test program is built on its own from its one .c file).
 */
#ifndef LIBSHARD_TESTS_CHECK_UTIL_H
#define LIBSHARD_TESTS_CHECK_UTIL_H

#include <check.h>
#include <jansson.h>
#include <libshard.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* Not every test program uses every helper. */
#define CHECK_UTIL static __attribute__((unused))

/* A libshard call that must succeed, or fail with `code`: the message names
 * the call, the code and shard_errmsg(). */
#define OK(call)                                                              \
    do {                                                                      \
        int rc_ = (call);                                                     \
        ck_assert_msg(rc_ == 0, "%s = %d (%s): %s", #call, rc_,               \
                      shard_strerror(rc_), shard_errmsg());                   \
    } while (0)

#define FAILS(code, call)                                                     \
    do {                                                                      \
        int rc_ = (call), want_ = (code);                                     \
        ck_assert_msg(rc_ == want_, "%s = %d (%s), want %d (%s): %s", #call,  \
                      rc_, shard_strerror(rc_), want_, shard_strerror(want_), \
                      shard_errmsg());                                        \
    } while (0)

/* A string literal and its length. */
#define LIT(s) s, (sizeof(s) - 1)

/* A NULL-terminated list of tests (START_TEST names), for tcase_add_tests
 * and tcase_of. */
#define TESTS(...) ((const TTest *const[]){__VA_ARGS__, NULL})

/* Adds the tests (a NULL-terminated list, run in its order) to tc. */
CHECK_UTIL void tcase_add_tests(TCase *tc, const TTest *const tests[])
{
    for (size_t i = 0; tests[i]; i++)
        tcase_add_test(tc, tests[i]);
}

/* Adds a test case `name` holding the tests (a NULL-terminated list, run in
 * its order) to s; returns it, for its timeout and fixtures. */
CHECK_UTIL TCase *tcase_of(Suite *s, const char *name, const TTest *const tests[])
{
    TCase *tc = tcase_create(name);

    tcase_add_tests(tc, tests);
    suite_add_tcase(s, tc);
    return tc;
}

/* Runs suite s with Check's normal output and fork mode `fork`
 * (CK_FORK_GETENV: Check's default, from $CK_FORK; CK_NOFORK: the tests
 * run in order in this process and build on each other), frees it.
 * Returns the number of tests that failed. */
CHECK_UTIL int run_suite(Suite *s, enum fork_status fork)
{
    SRunner *sr = srunner_create(s);
    int failed;

    srunner_set_fork_status(sr, fork);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed;
}

/* Seconds on the monotonic clock. */
CHECK_UTIL double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

CHECK_UTIL void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A malloc'd string, printf-style (the caller frees it). */
CHECK_UTIL char *vfmt(const char *f, va_list ap)
{
    char *s = NULL;
    ck_assert(vasprintf(&s, f, ap) >= 0);
    return s;
}

CHECK_UTIL char *fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *s = vfmt(f, ap);
    va_end(ap);
    return s;
}

/* ---- server tests: SQL as root, where the map puts a shard ---------------- */

/* sql's batch output on server (harness_sql), which must succeed; free() it. */
CHECK_UTIL char *sql_ok(harness *h, const char *server, const char *sql)
{
    char *out = NULL;
    int st = harness_sql(h, server, sql, &out);
    ck_assert_msg(st == 0, "SQL on %s failed (status %d): %.400s", server, st, sql);
    return out;
}

/* The same, the statement printf-style. */
CHECK_UTIL char *sql_okf(harness *h, const char *server, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *q = vfmt(f, ap);
    va_end(ap);
    char *out = sql_ok(h, server, q);
    free(q);
    return out;
}

/* s without its trailing newlines, in place; returns s. */
CHECK_UTIL char *chomp(char *s)
{
    size_t n = strlen(s);
    while (n && s[n - 1] == '\n')
        s[--n] = '\0';
    return s;
}

/* The pair serving shard in ctx's map, reloaded first (a buffer of this
 * thread's, reused by the next call). */
CHECK_UTIL const char *pair_of(shard_ctx *ctx, unsigned shard)
{
    static __thread char name[65];
    shard_map *m = NULL;
    const char *p = "?";
    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    shard_map_pair_of(m, shard, &p);
    snprintf(name, sizeof name, "%s", p);
    shard_map_free(m);
    return name;
}

/* ---- map stores ----------------------------------------------------------- */

/* A file store's folder: it leaves its map and the lock file publishers
 * take turns on, and nothing else. */
CHECK_UTIL void remove_store_dir(const char *dir)
{
    char f[160];
    snprintf(f, sizeof f, "%s/map.json", dir);
    unlink(f);
    snprintf(f, sizeof f, "%s/map.json.lock", dir);
    unlink(f);
    ck_assert_int_eq(rmdir(dir), 0);
}

/* n child processes publish m through st at once, each expecting the
 * stored version to be `expected`; returns how many succeeded. A child
 * tells (on stderr) of an error other than SHARD_ECONFLICT, and frees st, m
 * and, through cleanup(arg) if set, the rest of the caller's before it
 * exits, so that a valgrind run of it stays clean. */
CHECK_UTIL int publish_race(shard_store *st, shard_map *m, uint64_t expected, int n,
                            void (*cleanup)(void *), void *arg)
{
    int wins = 0;

    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            int prc = shard_store_publish(st, m, expected);
            if (prc && prc != SHARD_ECONFLICT)
                fprintf(stderr, "publisher: %s\n", shard_errmsg());
            shard_store_free(st);
            shard_map_free(m);
            if (cleanup)
                cleanup(arg);
            _exit(prc == 0 ? 0 : 1);
        }
    }
    for (int i = 0; i < n; i++) {
        int status;
        ck_assert_int_gt(wait(&status), 0);
        wins += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    return wins;
}

/* The rows of db<shard>.pins on a server of h. */
CHECK_UTIL uint64_t count_on(harness *h, const char *server, unsigned shard)
{
    char sql[100], *out;
    uint64_t n;

    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05u.pins", shard);
    out = sql_ok(h, server, sql);
    n = strtoull(out, NULL, 10);
    free(out);
    return n;
}

/* A move's progress callback that keeps the phase it was told last. */
CHECK_UTIL atomic_int move_last_phase = -1;

CHECK_UTIL void move_note_phase(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)total;
    (void)payload;
    atomic_store(&move_last_phase, phase);
}

/* ---- server tests: fences and maps set by hand ------------------------- */

/* The fence row of a shard (its database named by map) on a server,
 * written as a move writes it: unlogged, each server keeps its own. */
CHECK_UTIL void fence_set(harness *h, const shard_map *map, const char *server, unsigned shard,
                          int fenced)
{
    char db[64], *q, *out = NULL;

    OK(shard_map_database(map, shard, db, sizeof db));
    q = fmt("SET SESSION sql_log_bin = 0; INSERT INTO libshard_control.fence "
            "(db, fenced, move_id) VALUES ('%s', %d, 77) ON DUPLICATE KEY "
            "UPDATE fenced = VALUES(fenced)", db, fenced);
    ck_assert_msg(harness_sql(h, server, q, &out) == 0, "SQL failed on %s: %s", server, q);
    free(q);
    free(out);
}

/* map (of nshards id shards) with id shard `shard` served by `pair`, the
 * shards below it by MySQL001 and those above by MySQL002 (the harness's
 * halves), at `version`: malloc'd JSON. */
CHECK_UTIL char *map_routing(const shard_map *map, unsigned nshards, unsigned shard,
                             const char *pair, uint64_t version)
{
    char *text = NULL;
    json_error_t e;
    OK(shard_map_to_json(map, &text));
    json_t *doc = json_loads(text, 0, &e);
    ck_assert_msg(doc != NULL, "not JSON (%s): %.200s", e.text, text);
    shard_free(text);
    json_t *ranges = json_pack("[{s:[i,i],s:s},{s:[i,i],s:s},{s:[i,i],s:s}]",
                               "range", 0, shard - 1, "pair", "MySQL001",
                               "range", shard, shard, "pair", pair,
                               "range", shard + 1, nshards - 1, "pair", "MySQL002");
    ck_assert_ptr_nonnull(ranges);
    json_object_set_new(doc, "id_shards", ranges);
    json_object_set_new(doc, "version", json_integer((json_int_t)version));
    char *out = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return out;
}

/* Publish the map json (its version one above the stored one) to the
 * harness's map store. */
CHECK_UTIL void map_publish(const harness *h, const char *json)
{
    shard_store *st = NULL;
    shard_map *m = NULL;
    OK(shard_map_parse(&m, json, strlen(json)));
    OK(shard_store_open(&st, harness_map_path(h)));
    OK(shard_store_publish(st, m, shard_map_version(m) - 1));
    shard_store_free(st);
    shard_map_free(m);
}

/* The map json written to DIR/moved.json, whose path is returned
 * (malloc'd: the caller unlinks and frees it), and the schema applied
 * through it as the operators: the tables of the shards it routes
 * elsewhere are made there, as a move makes them before its cut-over. */
CHECK_UTIL char *map_schema_apply(const harness *h, const char *json)
{
    char *path = fmt("%s/moved.json", harness_dir(h));
    FILE *f = fopen(path, "w");
    shard_options ao = SHARD_OPTIONS_INIT; /* the schema is the operators' */
    shard_ctx *target = NULL;

    ck_assert_ptr_nonnull(f);
    fputs(json, f);
    fclose(f);
    harness_admin_options(&ao);
    OK(shard_ctx_open(&target, path, &ao));
    OK(shard_schema_apply(target, NULL, NULL));
    shard_ctx_free(target);
    return path;
}

/* Undoes a hand-made move of id shard `shard` (database db) from MySQL001
 * to MySQL002: the map at `version` routes it to MySQL001 again, its fence
 * row on s1 is cleared and its copy on s3 dropped. */
CHECK_UTIL void route_back(harness *h, const shard_map *map, unsigned nshards, unsigned shard,
                           uint64_t version, const char *db)
{
    char *back = map_routing(map, nshards, shard, "MySQL001", version), *q, *out = NULL;

    map_publish(h, back);
    fence_set(h, map, "s1", shard, 0);
    q = fmt("DROP DATABASE `%s`", db);
    ck_assert_msg(harness_sql(h, "s3", q, &out) == 0, "SQL failed on s3: %s", q);
    free(q);
    free(out);
    free(back);
}

/* A create of an object of type 1 in a thread of its own, that may wait
 * (on a fence): its code, id and how long it took. */
typedef struct waiter {
    shard_ctx *ctx;
    unsigned shard;
    int rc;
    uint64_t id;
    double took;
    atomic_int started; /* 1 once the thread runs */
} waiter;

CHECK_UTIL void *create_waiting(void *arg)
{
    waiter *w = arg;
    double t0 = now_s();
    atomic_store(&w->started, 1);
    w->rc = shard_object_create(w->ctx, 1, w->shard, LIT("{\"waited\":1}"), &w->id);
    w->took = now_s() - t0;
    return NULL;
}

/* A shard_move in a thread of its own (pthread_create(..., run_move_thread, &mv)):
 * its arguments, its report, code and message. ctx NULL: the thread opens
 * an operator's context of harness h for the move, and frees it after. */
typedef struct move_thread {
    harness *h;
    shard_ctx *ctx;
    unsigned first, last;
    const char *target;
    shard_move_options o;
    shard_move_report r;
    int rc;
    char err[600];
} move_thread;

CHECK_UTIL void *run_move_thread(void *arg)
{
    move_thread *mv = arg;
    shard_ctx *admin = mv->ctx;

    mv->r = (shard_move_report)SHARD_MOVE_REPORT_INIT;
    mv->rc = admin ? 0 : harness_open_admin(mv->h, &admin, NULL);
    if (mv->rc == 0)
        mv->rc = shard_move(admin, mv->first, mv->last, mv->target, &mv->o, &mv->r, NULL);
    snprintf(mv->err, sizeof mv->err, "%s", mv->rc ? shard_errmsg() : "");
    if (!mv->ctx)
        shard_ctx_free(admin);
    return NULL;
}

/* ---- server tests: main ------------------------------------------------- */

/* The main of a server test `name`: starts npairs pairs of the given
 * shards (harness_start_ex) into *hp, applies the schema if `schema`, runs
 * the suite make_suite() makes (Check's default fork mode) and stops the
 * servers. EXIT_SUCCESS when every test passed. */
CHECK_UTIL int server_test_main(const char *name, harness **hp, int npairs, int shards,
                                int mod_shards, int schema, Suite *(*make_suite)(void))
{
    double t0 = now_s();
    int failed;

    *hp = harness_start_ex(npairs, shards, mod_shards);
    if (!*hp) {
        fprintf(stderr, "%s: could not start the test servers\n", name);
        return EXIT_FAILURE;
    }
    if (schema) {
        if (harness_schema_apply(*hp)) {
            fprintf(stderr, "%s: schema apply: %s\n", name, shard_errmsg());
            harness_stop(*hp);
            return EXIT_FAILURE;
        }
        fprintf(stderr, "%s: %d pairs up with schema in %.2fs (%s)\n", name, npairs,
                now_s() - t0, harness_dir(*hp));
    }
    failed = run_suite(make_suite(), CK_FORK_GETENV);
    harness_stop(*hp);
    *hp = NULL;
    if (schema) {
        shard_global_cleanup();
        fprintf(stderr, "%s: %.1fs in all\n", name, now_s() - t0);
    }
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif /* LIBSHARD_TESTS_CHECK_UTIL_H */
