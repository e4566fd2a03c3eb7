/*
 * tests/move_util.h: what the server tests that move shards share
 * (server_move, server_revert, server_rebalance): raw SQL on a test server,
 * where the map puts a shard, a ledger of the writes the library
 * acknowledged and the checks that they are all there, writer threads that
 * fill it under a move, and a mover run in a child process that is
 * SIGKILLed where its progress callback stops it. Every function is static
 * (each test program is built on its own from its one .c file).
 *
 * The ledger holds LEDGER_MAX writes (define it before including this file;
 * default 20000). A write past that fails the test, unless
 * LEDGER_DROP_WHEN_FULL is defined: then it is not remembered (nor checked).
 */
#ifndef LIBSHARD_TESTS_MOVE_UTIL_H
#define LIBSHARD_TESTS_MOVE_UTIL_H

#include <check.h>
#include <libshard.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"
#include "harness.h"

/* Not every test program uses every helper. */
#define MOVE_UTIL static __attribute__((unused))

/* ---- raw SQL on a test server ---------------------------------------------- */

/* 1 if server holds shard's database, 0 if not. */
MOVE_UTIL int db_exists(harness *h, const char *server, unsigned shard)
{
    char sql[200], *out;
    int yes;
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE "
             "SCHEMA_NAME = 'db%05u'", shard);
    out = sql_ok(h, server, sql);
    yes = strcmp(out, "0\n") != 0;
    free(out);
    return yes;
}

/* Replication to a standby is asynchronous: wait (bounded) for it. */
MOVE_UTIL int db_exists_settled(harness *h, const char *server, unsigned shard, int want)
{
    int have = db_exists(h, server, shard);
    for (int i = 0; i < 100 && have != want; i++) {
        usleep(50000);
        have = db_exists(h, server, shard);
    }
    return have;
}

/* How many replication connections of a server are named prefix... (the
 * first column of SHOW ALL SLAVES STATUS). */
MOVE_UTIL int repl_connections(harness *h, const char *server, const char *prefix)
{
    char *out = sql_ok(h, server, "SHOW ALL SLAVES STATUS");
    size_t len = strlen(prefix);
    int n = 0;
    for (char *line = out; line && *line;) {
        char *nl = strchr(line, '\n');
        n += strncmp(line, prefix, len) == 0;
        line = nl ? nl + 1 : NULL;
    }
    free(out);
    return n;
}

/* ---- where the map puts a shard --------------------------------------------- */

/* "MySQL00N" -> N */
MOVE_UTIL int pair_no(const char *pair)
{
    return atoi(pair + 5);
}

/* The master's server name ("s1", "s3", ...) of a pair "MySQL00N" (a
 * static buffer, reused by the next call). */
MOVE_UTIL const char *master_of(const char *pair)
{
    static char s[16];
    snprintf(s, sizeof s, "s%d", 2 * pair_no(pair) - 1);
    return s;
}

/* ---- the ledger: what was written, and checking it is all there ------------- */

#ifndef LEDGER_MAX
#define LEDGER_MAX 20000
#endif

static struct written {
    uint64_t id;
    char json[64];
} w[LEDGER_MAX];
static int nw;
static pthread_mutex_t wlock = PTHREAD_MUTEX_INITIALIZER;

/* Remember an acknowledged write: object id now holds json. */
MOVE_UTIL void ledger_add(uint64_t id, const char *json)
{
    pthread_mutex_lock(&wlock);
#ifdef LEDGER_DROP_WHEN_FULL
    if (nw < LEDGER_MAX) {
        w[nw].id = id;
        snprintf(w[nw].json, sizeof w[nw].json, "%s", json);
        nw++;
    }
#else
    ck_assert_int_lt(nw, LEDGER_MAX);
    w[nw].id = id;
    snprintf(w[nw].json, sizeof w[nw].json, "%s", json);
    nw++;
#endif
    pthread_mutex_unlock(&wlock);
}

/* A remembered object's new content (the latest entry of id). */
MOVE_UTIL void ledger_update(uint64_t id, const char *json)
{
    pthread_mutex_lock(&wlock);
    for (int k = nw - 1; k >= 0; k--)
        if (w[k].id == id) {
            snprintf(w[k].json, sizeof w[k].json, "%s", json);
            break;
        }
    pthread_mutex_unlock(&wlock);
}

/* per_shard objects of type 1 on each shard first..last, remembered. */
MOVE_UTIL void ledger_fill(shard_ctx *ctx, unsigned first, unsigned last, int per_shard)
{
    for (unsigned s = first; s <= last; s++)
        for (int i = 0; i < per_shard; i++) {
            char json[64];
            uint64_t id;
            snprintf(json, sizeof json, "{\"shard\":%u,\"n\":%d}", s, i);
            ck_assert_msg(shard_object_create(ctx, 1, s, json, strlen(json), &id) == 0, "%s",
                          shard_errmsg());
            ledger_add(id, json);
        }
}

/* Every acknowledged write is there, read through the library (ctx). */
MOVE_UTIL void ledger_check_all(shard_ctx *ctx)
{
    shard_item *items = NULL;
    uint64_t *ids = calloc((size_t)nw, sizeof *ids);
    int rc;

    for (int i = 0; i < nw; i++)
        ids[i] = w[i].id;
    rc = shard_object_mget(ctx, ids, (size_t)nw, &items);
    ck_assert_msg(rc == 0, "mget: %d %s", rc, shard_errmsg());
    for (int i = 0; i < nw; i++) {
        ck_assert_msg(items[i].status == 0, "object %llu: status %d",
                      (unsigned long long)w[i].id, items[i].status);
        ck_assert_str_eq(items[i].data, w[i].json);
    }
    shard_items_free(items, (size_t)nw);
    free(ids);
}

/* How many remembered objects of type 1 live on shard. */
MOVE_UTIL int ledger_rows(unsigned shard)
{
    int n = 0;
    for (int i = 0; i < nw; i++)
        n += shard_id_shard(w[i].id) == shard && shard_id_type(w[i].id) == 1;
    return n;
}

/* Each remembered row of the shard on both halves of the pair the map
 * names (the standby synced first), with equal checksums. */
MOVE_UTIL void check_both_halves(harness *h, shard_ctx *ctx, unsigned shard)
{
    const char *pair = pair_of(ctx, shard);
    int p = pair_no(pair), expect = ledger_rows(shard);
    char sql[200], sb[16], *a, *b;

    ck_assert_int_eq(harness_sync_standby(h, p, 60), 0);
    snprintf(sql, sizeof sql, "SELECT COUNT(*), SUM(CRC32(data)) FROM db%05u.pins", shard);
    snprintf(sb, sizeof sb, "s%d", 2 * p);
    a = sql_ok(h, master_of(pair), sql);
    b = sql_ok(h, sb, sql);
    ck_assert_int_eq(atoi(a), expect);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
}

/* ---- writers ------------------------------------------------------------------ */

/* A thread of writes on two shards by turns, each one acknowledged into
 * the ledger: a create, a read-modify-write and a mapping row on the same
 * object, and a read of it through the prepared-statement path (across the
 * fence), until *stop. */
typedef struct writer {
    shard_ctx *ctx;
    unsigned shards[2];
    atomic_int *stop;
    useconds_t pause_us; /* between two rounds */
    int errors;
    char err[256];
    double worst; /* the longest single round, seconds */
    long ops;
} writer;

MOVE_UTIL void *write_loop(void *arg)
{
    writer *wr = arg;
    for (long i = 0; !atomic_load(wr->stop); i++) {
        unsigned s = wr->shards[i % 2];
        char json[64], *res = NULL, *got = NULL;
        uint64_t id;
        double t0 = now_s();
        int rc;
        snprintf(json, sizeof json, "{\"w\":%ld,\"s\":%u}", i, s);
        rc = shard_object_create(wr->ctx, 1, s, json, strlen(json), &id);
        if (rc == 0) {
            ledger_add(id, json);
            rc = shard_object_patch(wr->ctx, id, "{\"p\":1}", 7, &res, NULL);
            if (rc == 0) {
                ledger_update(id, res);
                rc = shard_mapping_add(wr->ctx, "user_likes_pins", id, id, i);
            }
            if (rc == 0 && (rc = shard_object_get(wr->ctx, id, &got, NULL)) == 0 &&
                strcmp(got, res) != 0)
                rc = SHARD_EINTERNAL;
            shard_free(got);
            shard_free(res);
        }
        if (now_s() - t0 > wr->worst)
            wr->worst = now_s() - t0;
        if (rc) {
            wr->errors++;
            snprintf(wr->err, sizeof wr->err, "%s", shard_errmsg());
        }
        wr->ops++;
        if (wr->pause_us)
            usleep(wr->pause_us);
    }
    return NULL;
}

/* Four writers, on shards[i][0] and shards[i][1] each. */
typedef struct load {
    atomic_int stop;
    writer wr[4];
    pthread_t t[4];
} load;

/* Start them, then let them run settle_us before the caller goes on. */
MOVE_UTIL void load_start(load *l, shard_ctx *ctx, const unsigned shards[4][2],
                          useconds_t pause_us, useconds_t settle_us)
{
    atomic_store(&l->stop, 0);
    for (int i = 0; i < 4; i++) {
        memset(&l->wr[i], 0, sizeof l->wr[i]);
        l->wr[i].ctx = ctx;
        l->wr[i].shards[0] = shards[i][0];
        l->wr[i].shards[1] = shards[i][1];
        l->wr[i].stop = &l->stop;
        l->wr[i].pause_us = pause_us;
        pthread_create(&l->t[i], NULL, write_loop, &l->wr[i]);
    }
    usleep(settle_us);
}

/* After settle_us more, stop them all before any assertion can end the
 * test; then every writer wrote, without one error. */
MOVE_UTIL void load_stop(load *l, useconds_t settle_us)
{
    usleep(settle_us);
    atomic_store(&l->stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(l->t[i], NULL);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(l->wr[i].errors == 0, "writer %d: %d errors, last: %s", i,
                      l->wr[i].errors, l->wr[i].err);
        ck_assert_int_gt(l->wr[i].ops, 0);
    }
}

/* Move first..last to pair to with a reverse window of window_s: flipped,
 * verified and reversible (the test fails otherwise). */
MOVE_UTIL void move_reversible(shard_ctx *admin, unsigned first, unsigned last, const char *to,
                               unsigned window_s, shard_move_report *r)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    int rc;

    o.reverse_window_s = window_s;
    rc = shard_move(admin, first, last, to, &o, r, NULL);
    ck_assert_msg(rc == 0, "move %u-%u to %s: %s", first, last, to, shard_errmsg());
    ck_assert_int_eq(r->phase, SHARD_MOVE_REVERSIBLE);
    ck_assert_uint_eq(r->mismatches, 0);
}

/* A move that returned done leaves its source's copies to drop (phase
 * dropping): drop them now, as shardctl does right after, and say so in
 * *r. One that kept its source (over already) is left as it is. */
MOVE_UTIL void drop_rest(shard_ctx *admin, shard_move_report *r)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report d = SHARD_MOVE_REPORT_INIT;
    int rc;

    ck_assert_int_eq(r->phase, SHARD_MOVE_DONE);
    if (r->source_dropped)
        return;
    rc = shard_move_resume(admin, r->move_id, &o, &d);
    if (rc == SHARD_ENOTFOUND)
        return;
    ck_assert_msg(rc == 0, "dropping what move %llu left: %d %s",
                  (unsigned long long)r->move_id, rc, shard_errmsg());
    ck_assert_int_eq(d.phase, SHARD_MOVE_DONE);
    ck_assert_int_eq(d.source_dropped, 1);
    r->source_dropped = 1;
}

/* ---- a mover in a child process, stopped, then SIGKILLed --------------------- */

static int child_stop_fd; /* in the child: tells the parent where it stopped */

/* Called in the child (from a progress callback) where it is to die: tells
 * the parent and stops; the parent SIGKILLs it there, mid-phase. */
MOVE_UTIL void child_stop_here(void)
{
    char c = 1;
    if (write(child_stop_fd, &c, 1) != 1)
        _exit(3);
    raise(SIGSTOP);
}

/* Runs body(mc, arg) in a forked child, mc an operators' context of its
 * own (exit status 2 if it cannot be opened), the child exiting with what
 * body returns. Returns 1 when the child reached child_stop_here() and was
 * SIGKILLed there; 0 when it exited first, its exit status in *status (-1
 * if it did not exit normally). */
MOVE_UTIL int child_killed(harness *h, int (*body)(shard_ctx *mc, void *arg), void *arg,
                           int *status)
{
    int fds[2], st;
    pid_t pid;
    char c;

    ck_assert_int_eq(pipe(fds), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        shard_ctx *mc = NULL;
        close(fds[0]);
        child_stop_fd = fds[1];
        if (harness_open_admin(h, &mc, NULL))
            _exit(2);
        _exit(body(mc, arg));
    }
    close(fds[1]);
    if (read(fds[0], &c, 1) == 1) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        close(fds[0]);
        return 1;
    }
    waitpid(pid, &st, 0);
    close(fds[0]);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return 0;
}

/* ---- set-up ------------------------------------------------------------------ */

/* Starts 3 pairs (12 ID shards, 3 mod shards) into *hp, opens the
 * application's context *app and the operators' *admin (moves are followed
 * through the fence alone: no map refresh) and applies the schema. 0, or -1
 * with the reason on stderr and the servers stopped. */
MOVE_UTIL int move_test_start_opts(harness **hp, shard_ctx **app, shard_ctx **admin,
                                   const shard_options *app_opts,
                                   const shard_options *admin_opts);

MOVE_UTIL int move_test_start(harness **hp, shard_ctx **app, shard_ctx **admin)
{
    return move_test_start_opts(hp, app, admin, NULL, NULL);
}

/* The same with the contexts' options (NULL: the defaults; the map
 * refresh is off either way). */
MOVE_UTIL int move_test_start_opts(harness **hp, shard_ctx **app, shard_ctx **admin,
                                   const shard_options *app_opts,
                                   const shard_options *admin_opts)
{
    shard_options o = SHARD_OPTIONS_INIT, oa;

    if (app_opts)
        o = *app_opts;
    oa = admin_opts ? *admin_opts : o;
    *hp = harness_start_ex(3, 12, 3);
    if (!*hp)
        return -1;
    o.refresh_interval_ms = 0;
    oa.refresh_interval_ms = 0;
    if (shard_ctx_open(app, harness_map_path(*hp), &o) || harness_open_admin(*hp, admin, &oa)) {
        fprintf(stderr, "open: %s\n", shard_errmsg());
        harness_stop(*hp);
        return -1;
    }
    if (shard_schema_apply(*admin, NULL, NULL)) {
        fprintf(stderr, "schema: %s\n", shard_errmsg());
        harness_stop(*hp);
        return -1;
    }
    return 0;
}

#endif /* LIBSHARD_TESTS_MOVE_UTIL_H */
