/*
 * Faults against real pairs: a master killed (SIGKILL) under gets, patches,
 * transactions and multi-gets; multi-get, schema apply and a move with a dead
 * server; a forced failover the application follows by itself; connections
 * killed by the server (KILL CONNECTION) between and in the middle of
 * statements; a server that accepts connections but never answers (SIGSTOP).
 *
 * Every call must succeed or fail with a clear error (which pair or server,
 * and "may or may not have been applied" when a write's outcome is unknown);
 * never a wrong answer, an existing object reported missing, or an
 * acknowledged write lost. A ledger records every acknowledged write (and the
 * writes whose outcome is unknown) and is checked after each fault.
 */
#include "harness.h"
#include "check_util.h"

#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static harness *h;
static shard_ctx *ctx; /* the application's context: map refresh off */
static char addr[5][32]; /* "127.0.0.1:PORT" of s1..s4 */

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* For callbacks and code that runs while threads do (no assertion may
 * unwind there): "" when the statement fails. */
static char *sql_try(const char *server, const char *sql)
{
    char *out = NULL;
    if (harness_sql(h, server, sql, &out) != 0 && out)
        out[0] = '\0';
    return out ? out : calloc(1, 1);
}

static long sql_long(const char *server, const char *sql)
{
    char *out = sql_ok(h, server, sql);
    long v = atol(out);
    free(out);
    return v;
}

/* The operator's context (schema apply, moves, failover: the application's
 * account may do none of them); retry_budget_ms 0: the default. */
static shard_ctx *open_admin(unsigned retry_budget_ms)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *a = NULL;
    o.refresh_interval_ms = 0;
    o.connect_timeout_ms = 1000;
    if (retry_budget_ms)
        o.retry_budget_ms = retry_budget_ms;
    ck_assert_msg(harness_open_admin(h, &a, &o) == 0, "%s", shard_errmsg());
    return a;
}

static void master_is(const char *pair, int server)
{
    shard_map *m = NULL;
    const char *master = NULL, *standby = NULL;

    shard_ctx_reload(ctx);
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    ck_assert_int_eq(shard_map_pair_addrs(m, pair, &master, &standby), 0);
    ck_assert_str_eq(master, addr[server]);
    shard_map_free(m);
}

/* A clear error: a connection or timeout code whose message names the pair
 * or one of the servers involved. */
static int clear_error(int rc, const char *msg, const char *const *names)
{
    if (rc != SHARD_ECONNECT && rc != SHARD_ETIMEOUT)
        return 0;
    for (; *names; names++)
        if (strstr(msg, *names))
            return 1;
    return 0;
}

static int unknown_outcome(int rc, const char *msg)
{
    return (rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT) &&
           (strstr(msg, "may or may not have been applied") ||
            strstr(msg, "outcome unknown"));
}

/* Kill the application's connections on a server (cond: an extra SQL
 * condition on PROCESSLIST, or NULL). Returns how many were killed. */
static int kill_app_connections(const char *server, const char *cond)
{
    char sql[512], *out, *line, *save = NULL;
    int n = 0;

    snprintf(sql, sizeof sql, "SELECT ID FROM information_schema.PROCESSLIST WHERE "
             "USER = 'shard'%s%s", cond ? " AND " : "", cond ? cond : "");
    out = sql_try(server, sql);
    for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *o = NULL;
        snprintf(sql, sizeof sql, "KILL CONNECTION %ld", atol(line));
        if (harness_sql(h, server, sql, &o) == 0) /* it may have gone meanwhile */
            n++;
        free(o);
    }
    free(out);
    return n;
}

/* Wait (at most 10 s) until both servers' pair links run (Slave_running:
 * both threads, connected): after a fault, a pair must be redundant again. */
static void pair_links_run(const char *a, const char *b)
{
    const char *servers[2] = {a, b};

    for (int k = 0; k < 2; k++) {
        char *st = NULL, *e;
        int i;
        for (i = 0; i < 200; i++) {
            int on;
            st = sql_ok(h, servers[k], "SHOW GLOBAL STATUS LIKE 'Slave_running'");
            on = strstr(st, "\tON") != NULL;
            free(st);
            if (on)
                break;
            usleep(50000);
        }
        if (i < 200)
            continue;
        st = sql_ok(h, servers[k], "SHOW SLAVE STATUS");
        e = strstr(st, "rror");
        ck_assert_msg(0, "%s's pair link is down: %.400s", servers[k], e ? e - 1 : st);
    }
}

/* ---- the ledger: what each object must hold --------------------------------- */

/* Objects that never change (but for the last two tests), read back by the
 * reader threads: 6 on each of shards 0..6 (shard 7 stays empty for the
 * schema test). */
#define NSTATIC 42
static struct stat_obj {
    uint64_t id;
    char json[64];
} statics[NSTATIC];

#define MAXALT 8
typedef struct entry {
    uint64_t id;
    char ack[128];            /* the last acknowledged content */
    char alt[MAXALT][128];    /* later writes whose outcome is unknown */
    int nalt;
    double at;                /* when the last write was acknowledged */
    int gone;                 /* lost to the known risk: no longer checked */
} entry;

static entry *ledger;
static size_t nledger, capledger;
static pthread_mutex_t llock = PTHREAD_MUTEX_INITIALIZER;

static size_t ledger_add(uint64_t id, const char *json)
{
    size_t i;
    pthread_mutex_lock(&llock);
    if (nledger == capledger) {
        capledger = capledger ? 2 * capledger : 1024;
        ledger = realloc(ledger, capledger * sizeof *ledger);
        if (!ledger)
            abort();
    }
    i = nledger++;
    memset(&ledger[i], 0, sizeof ledger[i]);
    ledger[i].id = id;
    snprintf(ledger[i].ack, sizeof ledger[i].ack, "%s", json);
    ledger[i].at = now_s();
    pthread_mutex_unlock(&llock);
    return i;
}

static void ledger_ack(size_t i, const char *json)
{
    pthread_mutex_lock(&llock);
    snprintf(ledger[i].ack, sizeof ledger[i].ack, "%s", json);
    ledger[i].nalt = 0;
    ledger[i].at = now_s();
    pthread_mutex_unlock(&llock);
}

/* A write whose outcome is unknown. Returns 0 when there is no room left
 * to remember it (the caller stops writing that object). */
static int ledger_maybe(size_t i, const char *json)
{
    int ok;
    pthread_mutex_lock(&llock);
    ok = ledger[i].nalt < MAXALT;
    if (ok)
        snprintf(ledger[i].alt[ledger[i].nalt++], sizeof ledger[i].alt[0], "%s", json);
    pthread_mutex_unlock(&llock);
    return ok;
}

static double ledger_at(size_t i)
{
    double t;
    pthread_mutex_lock(&llock);
    t = ledger[i].at;
    pthread_mutex_unlock(&llock);
    return t;
}

/* Whether text is a content the object may hold now. */
static int ledger_allows(size_t i, const char *text)
{
    int ok;
    pthread_mutex_lock(&llock);
    ok = strcmp(ledger[i].ack, text) == 0;
    for (int k = 0; !ok && k < ledger[i].nalt; k++)
        ok = strcmp(ledger[i].alt[k], text) == 0;
    pthread_mutex_unlock(&llock);
    return ok;
}

/*
 * Read every ledger object through the library and compare. Objects on
 * shards first..last whose last write was acknowledged before risk_before
 * may differ, at most risk_budget of them (writes a killed master committed
 * but never sent: the known risk of asynchronous replication); such an
 * entry takes the content found. Returns how many objects were checked.
 */
static size_t ledger_check_risk(double risk_before, unsigned first, unsigned last,
                                long risk_budget)
{
    shard_item *items = NULL;
    uint64_t *ids;
    size_t n;
    int rc;

    pthread_mutex_lock(&llock);
    n = nledger;
    ids = calloc(n ? n : 1, sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = ledger[i].gone ? statics[0].id : ledger[i].id;
    pthread_mutex_unlock(&llock);
    rc = shard_object_mget(ctx, ids, n, &items);
    ck_assert_msg(rc == 0, "ledger check: mget of %zu objects: %d %s", n, rc, shard_errmsg());
    for (size_t i = 0; i < n; i++) {
        unsigned s = shard_id_shard(ids[i]);
        int risky = risk_budget > 0 && s >= first && s <= last && ledger[i].at < risk_before;
        if (ledger[i].gone)
            continue;
        if (items[i].status == SHARD_ENOTFOUND && risky) {
            printf("  object %llu: acknowledged %s, now absent: a write the killed master "
                   "never sent (the known risk)\n", (unsigned long long)ids[i],
                   ledger[i].ack);
            risk_budget--;
            ledger[i].gone = 1;
            continue;
        }
        ck_assert_msg(items[i].status == 0, "object %llu (shard %u) lost: status %d, "
                      "acknowledged content %s", (unsigned long long)ids[i], s,
                      items[i].status, ledger[i].ack);
        if (ledger_allows(i, items[i].data))
            continue;
        if (risky) {
            printf("  object %llu: acknowledged %s, found %s: a write the killed master "
                   "never sent (the known risk)\n", (unsigned long long)ids[i],
                   ledger[i].ack, items[i].data);
            risk_budget--;
            ledger_ack(i, items[i].data);
            continue;
        }
        ck_assert_msg(0, "object %llu (shard %u): found %s, acknowledged %s (%d writes of "
                      "unknown outcome after it)", (unsigned long long)ids[i], s,
                      items[i].data, ledger[i].ack, ledger[i].nalt);
    }
    shard_items_free(items, n);
    free(ids);
    return n;
}

static size_t ledger_check(void)
{
    return ledger_check_risk(0, 0, 0, 0);
}

static void create_statics(void)
{
    for (int i = 0; i < NSTATIC; i++) {
        unsigned s = (unsigned)(i / 6);
        snprintf(statics[i].json, sizeof statics[i].json, "{\"static\":%d,\"shard\":%u}", i,
                 s);
        ck_assert_msg(shard_object_create(ctx, 1, s, statics[i].json,
                                          strlen(statics[i].json), &statics[i].id) == 0,
                      "%s", shard_errmsg());
        ledger_add(statics[i].id, statics[i].json);
    }
}

/* ---- worker threads -------------------------------------------------------- */

static pthread_mutex_t mark_lock = PTHREAD_MUTEX_INITIALIZER;
static double win_from = 1e300, win_to = 1e300; /* the outage window */
static double mark = 1e300;                      /* "the fault is over" */

static void set_window(double from, double to)
{
    pthread_mutex_lock(&mark_lock);
    win_from = from;
    win_to = to;
    pthread_mutex_unlock(&mark_lock);
}

static void set_mark(double t)
{
    pthread_mutex_lock(&mark_lock);
    mark = t;
    pthread_mutex_unlock(&mark_lock);
}

static double get_mark(void)
{
    double t;
    pthread_mutex_lock(&mark_lock);
    t = mark;
    pthread_mutex_unlock(&mark_lock);
    return t;
}

typedef struct worker {
    const char *name;
    void *(*fn)(void *);
    unsigned shard;     /* own object's shard */
    int w;              /* own object's number */
    size_t entry;       /* own object's ledger entry */
    uint64_t id;        /* own object's ID */
    const char *const *names; /* what a clear error names */
    unsigned lo, hi;    /* static objects on these shards (readers) */
    atomic_int *stop;
    long ok, errors, unknown, bugs;
    int failover;       /* the pair fails over: writes acknowledged before `mark`
                           (the kill) may be lost, the known risk */
    long lost;          /* such writes found missing */
    double worst, worst_before, worst_in_window; /* before, during the window */
    double first_ok_after_mark; /* when the first success of a call begun after
                                   `mark` ended */
    char err[300], bug[500];
} worker;

static void note_call(worker *wk, double t0, int ok)
{
    double t1 = now_s(), took = t1 - t0;

    if (took > wk->worst)
        wk->worst = took;
    pthread_mutex_lock(&mark_lock);
    if (t0 >= win_from && t0 <= win_to && took > wk->worst_in_window)
        wk->worst_in_window = took;
    if (t0 < win_from && took > wk->worst_before)
        wk->worst_before = took;
    if (ok && t0 >= mark && wk->first_ok_after_mark == 0)
        wk->first_ok_after_mark = t1;
    pthread_mutex_unlock(&mark_lock);
    if (ok)
        wk->ok++;
}

static void bug(worker *wk, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bug(worker *wk, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(wk->bug, sizeof wk->bug, fmt, ap);
    va_end(ap);
    wk->bugs++;
}

/* A failure that must be clear; counts it, or records a bug. */
static void failed(worker *wk, const char *what, int rc)
{
    if (clear_error(rc, shard_errmsg(), wk->names)) {
        wk->errors++;
        snprintf(wk->err, sizeof wk->err, "%s: %s", what, shard_errmsg());
        usleep(5000); /* a dead server refuses at once: do not spin */
    } else {
        bug(wk, "%s: unclear error %d: %s", what, rc, shard_errmsg());
    }
}

static int static_in(const worker *wk, int i)
{
    unsigned s = shard_id_shard(statics[i].id);
    return s >= wk->lo && s <= wk->hi;
}

/* Gets of static objects: the right content or a clear error. */
static void *get_loop(void *arg)
{
    worker *wk = arg;
    for (int i = 0; !atomic_load(wk->stop); i = (i + 1) % NSTATIC) {
        char *json = NULL;
        double t0;
        int rc;
        if (!static_in(wk, i))
            continue;
        t0 = now_s();
        rc = shard_object_get(ctx, statics[i].id, &json, NULL);
        note_call(wk, t0, rc == 0);
        if (rc == 0 && strcmp(json, statics[i].json) != 0)
            bug(wk, "get %llu: wrong answer %s, want %s", (unsigned long long)statics[i].id,
                json, statics[i].json);
        else if (rc == SHARD_ENOTFOUND)
            bug(wk, "get %llu: reported missing: %s", (unsigned long long)statics[i].id,
                shard_errmsg());
        else if (rc)
            failed(wk, "get", rc);
        shard_free(json);
    }
    return NULL;
}

/* Merge patches of the worker's own object, {"w":W,"n":k} for k = 1, 2, ... */
static void *patch_loop(void *arg)
{
    worker *wk = arg;
    uint64_t id = wk->id;

    for (int k = 1; !atomic_load(wk->stop); k++) {
        char patch[64], want[128], *res = NULL;
        double t0 = now_s();
        int rc;
        snprintf(patch, sizeof patch, "{\"n\":%d}", k);
        snprintf(want, sizeof want, "{\"w\":%d,\"n\":%d}", wk->w, k);
        rc = shard_object_patch(ctx, id, patch, strlen(patch), &res, NULL);
        note_call(wk, t0, rc == 0);
        if (rc == 0) {
            if (strcmp(res, want) != 0)
                bug(wk, "patch: result %s, want %s", res, want);
            ledger_ack(wk->entry, want);
        } else if (unknown_outcome(rc, shard_errmsg()) || rc == SHARD_ETIMEOUT) {
            wk->unknown++;
            snprintf(wk->err, sizeof wk->err, "patch: %s", shard_errmsg());
            if (!ledger_maybe(wk->entry, want))
                break;
        } else {
            failed(wk, "patch", rc);
        }
        shard_free(res);
    }
    return NULL;
}

/* begin; get FOR UPDATE (must be a content the ledger allows); put; commit. */
static void *txn_loop(void *arg)
{
    worker *wk = arg;
    uint64_t id = wk->id;

    for (int k = 1; !atomic_load(wk->stop); k++) {
        char want[128], *cur = NULL;
        shard_txn *t = NULL;
        double t0 = now_s();
        int rc;
        snprintf(want, sizeof want, "{\"w\":%d,\"n\":%d}", wk->w, k);
        if ((rc = shard_txn_begin(ctx, wk->shard, &t))) {
            note_call(wk, t0, 0);
            failed(wk, "txn begin", rc);
            continue;
        }
        /* The begin is retried across a failover: what matters is when the
         * read ran, not when the call started. */
        double t_read = now_s();
        rc = shard_txn_object_get(t, id, &cur, NULL);
        if (rc == 0 && !ledger_allows(wk->entry, cur) && wk->failover &&
            ledger_at(wk->entry) < get_mark() && t_read >= get_mark()) {
            /* A commit the old master acknowledged but never sent. */
            wk->lost++;
            snprintf(wk->err, sizeof wk->err, "txn get %llu: %s instead of the acknowledged "
                     "content (lost with the old master)", (unsigned long long)id, cur);
            ledger_ack(wk->entry, cur);
        } else if (rc == 0) {
            if (!ledger_allows(wk->entry, cur))
                bug(wk, "txn get %llu: wrong answer %s", (unsigned long long)id, cur);
            else
                ledger_ack(wk->entry, cur); /* the outcome of earlier unknowns, now known */
        }
        shard_free(cur);
        if (rc == 0)
            rc = shard_txn_object_put(t, id, want, strlen(want));
        if (rc) {
            note_call(wk, t0, 0);
            shard_txn_rollback(t);
            if (rc == SHARD_ENOTFOUND)
                bug(wk, "txn get %llu: reported missing: %s", (unsigned long long)id,
                    shard_errmsg());
            else
                failed(wk, "txn get/put", rc);
            continue;
        }
        rc = shard_txn_commit(t);
        note_call(wk, t0, rc == 0);
        if (rc == 0) {
            ledger_ack(wk->entry, want);
        } else if (unknown_outcome(rc, shard_errmsg())) {
            wk->unknown++;
            snprintf(wk->err, sizeof wk->err, "commit: %s", shard_errmsg());
            if (!ledger_maybe(wk->entry, want))
                break;
        } else {
            bug(wk, "commit failed without saying its outcome is unknown: %d %s", rc,
                shard_errmsg());
            if (!ledger_maybe(wk->entry, want))
                break;
        }
    }
    return NULL;
}

/* Multi-gets of every static object plus absent IDs on both pairs: pair 2
 * always answers right; pair 1 answers right or reports per-item errors. */
static void *mget_loop(void *arg)
{
    worker *wk = arg;
    uint64_t ids[NSTATIC + 4];
    size_t n = 0;

    for (int i = 0; i < NSTATIC; i++)
        ids[n++] = statics[i].id;
    shard_id_make(0, 1, 999999999, &ids[n++]); /* absent, pair 1 */
    shard_id_make(5, 1, 999999999, &ids[n++]); /* absent, pair 2 */
    ids[n++] = statics[0].id;                  /* duplicates */
    ids[n++] = statics[NSTATIC - 1].id;
    while (!atomic_load(wk->stop)) {
        shard_item *items = NULL;
        double t0 = now_s();
        int rc = shard_object_mget(ctx, ids, n, &items), errs = 0;
        note_call(wk, t0, rc == 0);
        if (rc != 0 && rc != SHARD_EPARTIAL) {
            bug(wk, "mget: %d %s", rc, shard_errmsg());
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            unsigned s = shard_id_shard(ids[i]);
            int absent = shard_id_local(ids[i]) == 999999999;
            const char *want = NULL;
            for (int k = 0; k < NSTATIC && !absent && !want; k++)
                if (statics[k].id == ids[i])
                    want = statics[k].json;
            if (items[i].status == 0 && (absent || strcmp(items[i].data, want) != 0))
                bug(wk, "mget item %zu (%llu): wrong answer %s", i,
                    (unsigned long long)ids[i], items[i].data);
            else if (items[i].status == SHARD_ENOTFOUND && !absent)
                bug(wk, "mget item %zu (%llu): reported missing", i,
                    (unsigned long long)ids[i]);
            else if (items[i].status != 0 && items[i].status != SHARD_ENOTFOUND) {
                errs++;
                if (s >= 4)
                    bug(wk, "mget item %zu (%llu) on the live pair: status %d", i,
                        (unsigned long long)ids[i], items[i].status);
                else if (items[i].status != SHARD_ECONNECT && items[i].status != SHARD_ETIMEOUT)
                    bug(wk, "mget item %zu: status %d", i, items[i].status);
            }
        }
        if ((errs > 0) != (rc == SHARD_EPARTIAL))
            bug(wk, "mget returned %d with %d failed items", rc, errs);
        if (rc == SHARD_EPARTIAL) {
            if (!strstr(shard_errmsg(), "MySQL001"))
                bug(wk, "mget: the message does not name the pair: %s", shard_errmsg());
            wk->errors++;
            snprintf(wk->err, sizeof wk->err, "mget: %s", shard_errmsg());
            usleep(5000);
        }
        shard_items_free(items, n);
    }
    return NULL;
}

/* Pair 2 during pair 1's outage: gets and patches that must all succeed. */
static void *live_loop(void *arg)
{
    worker *wk = arg;
    uint64_t id = wk->id;
    int i = 0;

    for (int k = 1; !atomic_load(wk->stop); k++) {
        char patch[64], want[128], *res = NULL, *json = NULL;
        double t0;
        int rc;
        while (!static_in(wk, i))
            i = (i + 1) % NSTATIC;
        t0 = now_s();
        rc = shard_object_get(ctx, statics[i].id, &json, NULL);
        note_call(wk, t0, rc == 0);
        if (rc)
            bug(wk, "get on the live pair: %d %s", rc, shard_errmsg());
        else if (strcmp(json, statics[i].json) != 0)
            bug(wk, "get on the live pair: wrong answer %s", json);
        shard_free(json);
        i = (i + 1) % NSTATIC;
        snprintf(patch, sizeof patch, "{\"n\":%d}", k);
        snprintf(want, sizeof want, "{\"w\":%d,\"n\":%d}", wk->w, k);
        t0 = now_s();
        rc = shard_object_patch(ctx, id, patch, strlen(patch), &res, NULL);
        note_call(wk, t0, rc == 0);
        if (rc == 0)
            ledger_ack(wk->entry, want);
        else {
            bug(wk, "patch on the live pair: %d %s", rc, shard_errmsg());
            ledger_maybe(wk->entry, want);
        }
        shard_free(res);
    }
    return NULL;
}

/* An object of the worker's own, {"w":W,"n":0}, on its shard. */
static void own_object(worker *wk)
{
    char json[64];
    uint64_t id;
    snprintf(json, sizeof json, "{\"w\":%d,\"n\":0}", wk->w);
    ck_assert_msg(shard_object_create(ctx, 1, wk->shard, json, strlen(json), &id) == 0, "%s",
                  shard_errmsg());
    wk->entry = ledger_add(id, json);
    wk->id = id;
}

static void run_workers(worker *wk, int n, pthread_t *t)
{
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, wk[i].fn, &wk[i]), 0);
}

static void join_workers(worker *wk, int n, pthread_t *t)
{
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < n; i++)
        printf("  %-8s ok %5ld  errors %4ld  unknown outcome %2ld  worst %6.1f ms"
               "%s%s\n", wk[i].name, wk[i].ok, wk[i].errors, wk[i].unknown,
               wk[i].worst * 1000, wk[i].err[0] ? "  last: " : "", wk[i].err);
    for (int i = 0; i < n; i++)
        ck_assert_msg(wk[i].bugs == 0, "%s: %ld bad results, last: %s", wk[i].name,
                      wk[i].bugs, wk[i].bug);
}

/* ---- tests ------------------------------------------------------------------ */

static const char *const names_p1_s1[] = {"MySQL001", addr[1], NULL};

/* SIGKILL of pair 1's master under gets, patches, transactions and multi-gets. */
START_TEST(master_killed_under_load)
{
    atomic_int stop = 0;
    worker wk[] = {
        {.name = "get", .fn = get_loop, .lo = 0, .hi = 3},
        {.name = "patch0", .fn = patch_loop, .shard = 0, .w = 1},
        {.name = "patch1", .fn = patch_loop, .shard = 1, .w = 2},
        {.name = "txn2", .fn = txn_loop, .shard = 2, .w = 3},
        {.name = "txn3", .fn = txn_loop, .shard = 3, .w = 4},
        {.name = "mget", .fn = mget_loop},
        {.name = "live", .fn = live_loop, .shard = 4, .w = 5, .lo = 4, .hi = 6},
    };
    const int n = (int)(sizeof wk / sizeof wk[0]);
    pthread_t t[sizeof wk / sizeof wk[0]];
    double t_kill, t_up;
    int rc_kill, rc_up;

    create_statics();
    set_mark(1e300);
    set_window(1e300, 1e300);
    for (int i = 0; i < n; i++) {
        wk[i].stop = &stop;
        wk[i].names = names_p1_s1;
        if (wk[i].fn != get_loop && wk[i].fn != mget_loop)
            own_object(&wk[i]);
    }
    run_workers(wk, n, t);
    sleep_s(0.4);
    t_kill = now_s();
    set_window(t_kill, 1e300);
    rc_kill = harness_kill(h, "s1");
    sleep_s(1.5);
    rc_up = harness_restart(h, "s1");
    t_up = now_s();
    set_window(t_kill, t_up);
    set_mark(t_up);
    sleep_s(1.2);
    atomic_store(&stop, 1);
    join_workers(wk, n, t);
    ck_assert_int_eq(rc_kill, 0);
    ck_assert_int_eq(rc_up, 0);
    printf("master killed under load: s1 down %.2f s; the live pair's worst call %.1f ms "
           "during the outage (%.1f ms before it)\n", t_up - t_kill,
           wk[6].worst_in_window * 1000, wk[6].worst_before * 1000);
    for (int i = 0; i < n; i++) {
        if (wk[i].fn != live_loop)
            ck_assert_msg(wk[i].errors + wk[i].unknown > 0, "%s saw no failure at all "
                          "while s1 was dead", wk[i].name);
        ck_assert_msg(wk[i].first_ok_after_mark > 0, "%s: no successful call after s1 "
                      "came back", wk[i].name);
    }
    printf("  %zu acknowledged writes checked\n", ledger_check());
    pair_links_run("s1", "s2");
}
END_TEST

/* A multi-get across both pairs with pair 1's master dead. */
START_TEST(mget_with_dead_master)
{
    enum { DEAD, FOUND, ABSENT }; /* on pair 1; on pair 2 and there; absent on pair 2 */
    uint64_t absent1, absent2;
    shard_item *items = NULL;
    char *json = NULL;
    double t0;
    int rc;

    shard_id_make(1, 1, 999999999, &absent1);
    shard_id_make(6, 1, 999999999, &absent2);
    /* statics 0 and 7 on pair 1, 24 and 41 on pair 2, duplicates, absent IDs */
    const uint64_t ids[] = {statics[0].id, statics[24].id, statics[7].id, absent1,
                            absent2, statics[41].id, statics[24].id, statics[0].id};
    const int expect[] = {DEAD, FOUND, DEAD, DEAD, ABSENT, FOUND, FOUND, DEAD};
    const size_t n = sizeof ids / sizeof ids[0];

    ck_assert_int_eq(harness_kill(h, "s1"), 0);
    t0 = now_s();
    rc = shard_object_mget(ctx, ids, n, &items);
    printf("multi-get with s1 dead: %.1f ms: %s\n", (now_s() - t0) * 1000, shard_errmsg());
    ck_assert_int_eq(rc, SHARD_EPARTIAL);
    ck_assert_msg(strstr(shard_errmsg(), "MySQL001") && strstr(shard_errmsg(), addr[1]),
                  "the message names neither the pair nor the server: %s", shard_errmsg());
    for (size_t i = 0; i < n; i++) {
        if (expect[i] == DEAD) { /* an error of its own, never "not found" */
            ck_assert_msg(items[i].status == SHARD_ECONNECT, "item %zu: status %d", i,
                          items[i].status);
            ck_assert_ptr_null(items[i].data);
        } else if (expect[i] == ABSENT) {
            ck_assert_int_eq(items[i].status, SHARD_ENOTFOUND);
        } else {
            ck_assert_int_eq(items[i].status, 0);
            ck_assert_str_eq(items[i].data, i == 5 ? statics[41].json : statics[24].json);
        }
    }
    shard_items_free(items, n);
    /* A single get names the pair, the shard's database and the server. */
    t0 = now_s();
    rc = shard_object_get(ctx, statics[0].id, &json, NULL);
    printf("get with s1 dead: %.1f ms: %s\n", (now_s() - t0) * 1000, shard_errmsg());
    ck_assert_int_eq(rc, SHARD_ECONNECT);
    ck_assert_ptr_null(json);
    ck_assert_msg(strstr(shard_errmsg(), "MySQL001") && strstr(shard_errmsg(), "db00000") &&
                  strstr(shard_errmsg(), addr[1]), "%s", shard_errmsg());
    /* A create that could not even connect was not sent: a plain error. */
    {
        uint64_t id = 0;
        rc = shard_object_create(ctx, 1, 1, "{\"never\":1}", 11, &id);
        ck_assert_int_eq(rc, SHARD_ECONNECT);
        ck_assert_msg(!strstr(shard_errmsg(), "may or may not"), "%s", shard_errmsg());
    }
    ck_assert_int_eq(harness_restart(h, "s1"), 0);
    rc = shard_object_mget(ctx, ids, n, &items);
    ck_assert_msg(rc == 0, "%s", shard_errmsg());
    ck_assert_str_eq(items[0].data, statics[0].json);
    ck_assert_int_eq(items[3].status, SHARD_ENOTFOUND);
    shard_items_free(items, n);
    ck_assert_int_eq(sql_long("s1", "SELECT COUNT(*) FROM db00001.pins WHERE data LIKE "
                                    "'%never%'"), 0);
    pair_links_run("s1", "s2");
}
END_TEST

typedef struct schema_kill {
    int killed, rc;
    uint64_t at;
} schema_kill;

static void kill_s3_in_apply(const char *what, uint64_t done, uint64_t total, void *payload)
{
    schema_kill *k = payload;
    (void)total;
    if (!k->killed && strstr(what, "MySQL002") && done >= 1) {
        k->killed = 1;
        k->at = done;
        k->rc = harness_kill(h, "s3");
    }
}

static long tables_in(const char *server, const char *like)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.TABLES WHERE "
             "TABLE_SCHEMA LIKE '%s'", like);
    return sql_long(server, sql);
}

/* Schema apply while pair 2's master dies part-way; after its restart the
 * apply completes and is idempotent. */
START_TEST(schema_apply_with_dead_master)
{
    schema_kill k = {0, 0, 0};
    shard_ctx *admin = open_admin(1000); /* the application's budget */
    long before;
    int rc;

    /* Something left to do on pair 2: one shard database is gone. */
    free(sql_ok(h, "s3", "DROP DATABASE db00007"));
    before = tables_in("s3", "db0000%");
    rc = shard_schema_apply(admin, kill_s3_in_apply, &k);
    printf("schema apply, s3 killed after %llu statements: %d %s\n",
           (unsigned long long)k.at, rc, shard_errmsg());
    ck_assert_int_eq(k.killed, 1);
    ck_assert_int_eq(k.rc, 0);
    ck_assert_msg(rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT, "%d %s", rc, shard_errmsg());
    ck_assert_msg(strstr(shard_errmsg(), "MySQL002") && strstr(shard_errmsg(), addr[3]),
                  "%s", shard_errmsg());
    /* Pair 1 was done regardless. */
    ck_assert_int_eq(tables_in("s1", "db0000%"), 4 * 6);
    ck_assert_int_eq(harness_restart(h, "s3"), 0);
    ck_assert_int_eq(tables_in("s3", "db00007"), 0);
    ck_assert_msg(shard_schema_apply(admin, NULL, NULL) == 0, "%s", shard_errmsg());
    ck_assert_int_eq(tables_in("s3", "db0000%"), before + 6);
    ck_assert_msg(shard_schema_apply(admin, NULL, NULL) == 0, "%s", shard_errmsg());
    shard_ctx_free(admin);
    ck_assert_int_eq(tables_in("s3", "db0000%"), 4 * 6);
    ck_assert_int_eq(tables_in("s3", "modshard%"), 2 * 2);
    /* The standby got it too, through replication. */
    for (int i = 0; i < 100 && tables_in("s4", "db00007") != 6; i++)
        usleep(50000);
    ck_assert_int_eq(tables_in("s4", "db00007"), 6);
    ledger_check();
    {
        uint64_t id;
        ck_assert_msg(shard_object_create(ctx, 1, 7, "{\"after\":\"schema\"}", 18, &id) == 0,
                      "%s", shard_errmsg());
        ledger_add(id, "{\"after\":\"schema\"}");
    }
    pair_links_run("s3", "s4");
}
END_TEST

typedef struct move_kill {
    int killed, rc;
    uint64_t done, total;
} move_kill;

static void kill_source_mid_copy(int phase, uint64_t done, uint64_t total, void *payload)
{
    move_kill *k = payload;
    if (phase == SHARD_MOVE_COPYING && done > 0 && !k->killed) {
        k->killed = 1;
        k->done = done;
        k->total = total;
        k->rc = harness_kill(h, "s1");
    }
}

/* The source master killed mid-copy: the move fails clearly, the map is
 * unchanged, and after the restart it resumes to completion. */
START_TEST(move_source_killed_mid_copy)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    move_kill k = {0, 0, 0, 0};
    shard_ctx *mover;
    char sql[200];
    double t0;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    for (unsigned s = 2; s <= 3; s++)
        for (int i = 0; i < 150; i++) {
            char json[64];
            uint64_t id;
            snprintf(json, sizeof json, "{\"m\":%d,\"s\":%u}", i, s);
            ck_assert_msg(shard_object_create(ctx, 1, s, json, strlen(json), &id) == 0, "%s",
                          shard_errmsg());
            ledger_add(id, json);
            if (i % 3 == 0)
                ck_assert_msg(shard_mapping_add(ctx, "user_likes_pins", id, statics[0].id,
                                                i) == 0, "%s", shard_errmsg());
        }
    o.batch_rows = 20;
    o.copy_threads = 2;
    o.progress = kill_source_mid_copy;
    o.payload = &k;
    mover = open_admin(1000);
    t0 = now_s();
    rc = shard_move(mover, 2, 3, "MySQL002", &o, &r, NULL);
    printf("move 2-3, source killed after %llu of %llu rows: %d after %.2f s: %s\n",
           (unsigned long long)k.done, (unsigned long long)k.total, rc, now_s() - t0,
           shard_errmsg());
    ck_assert_int_eq(k.killed, 1);
    ck_assert_int_eq(k.rc, 0);
    ck_assert_msg(rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT, "%d %s", rc, shard_errmsg());
    ck_assert_msg(strstr(shard_errmsg(), addr[1]), "the message does not name the source: %s",
                  shard_errmsg());
    ck_assert_int_lt(r.phase, SHARD_MOVE_FLIPPED);
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    ck_assert_int_eq(harness_restart(h, "s1"), 0);
    /* The source serves as before while the move waits. */
    ledger_check();
    o.progress = NULL;
    o.payload = NULL;
    t0 = now_s();
    rc = shard_move_resume(mover, 0, &o, &r);
    ck_assert_msg(rc == 0, "resume: %d %s", rc, shard_errmsg());
    if (rc == 0 && !r.source_dropped) { /* done: the source's drop follows */
        shard_move_report d = SHARD_MOVE_REPORT_INIT;
        rc = shard_move_resume(mover, r.move_id, &o, &d);
        ck_assert_msg(rc == 0 && d.source_dropped, "drop: %d %s", rc, shard_errmsg());
    }
    shard_ctx_free(mover);
    printf("  resumed in %.2f s: %llu rows copied, %llu verified, pause %.1f ms\n",
           now_s() - t0, (unsigned long long)r.rows_copied, (unsigned long long)r.rows_verified,
           r.pause_ms);
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL002");
    ck_assert_str_eq(pair_of(ctx, 3), "MySQL002");
    ck_assert_str_eq(pair_of(ctx, 1), "MySQL001");
    ledger_check();
    for (unsigned s = 2; s <= 3; s++) {
        long want = 0;
        for (size_t i = 0; i < nledger; i++)
            want += shard_id_shard(ledger[i].id) == s && shard_id_type(ledger[i].id) == 1;
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05u.pins", s);
        /* txn2/txn3 may have made no other rows; ambiguous creates none here */
        ck_assert_int_eq(sql_long("s3", sql), want);
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE "
                 "SCHEMA_NAME = 'db%05u'", s);
        ck_assert_int_eq(sql_long("s1", sql), 0);
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05u.user_likes_pins", s);
        ck_assert_int_eq(sql_long("s3", sql), 50);
    }
    {
        char *st = sql_ok(h, "s3", "SHOW ALL SLAVES STATUS");
        ck_assert_msg(!strstr(st, "libshard_move_"), "the move's replication remains");
        free(st);
    }
    pair_links_run("s1", "s2");
    pair_links_run("s3", "s4");
}
END_TEST

static shard_ctx *admin_ctx(void)
{
    return open_admin(0);
}

static const char *const names_p1[] = {"MySQL001", addr[1], addr[2], NULL};

/* Creates, then a patch of each, on the worker's shard; every acknowledged
 * write goes to the ledger. */
static void *create_loop(void *arg)
{
    worker *wk = arg;
    for (int i = 0; !atomic_load(wk->stop); i++) {
        char json[64], want[96], *res = NULL;
        uint64_t id;
        size_t e;
        double t0 = now_s();
        int rc;
        snprintf(json, sizeof json, "{\"f\":%d,\"i\":%d}", wk->w, i);
        rc = shard_object_create(ctx, 1, wk->shard, json, strlen(json), &id);
        note_call(wk, t0, rc == 0);
        if (rc) {
            if (unknown_outcome(rc, shard_errmsg())) {
                wk->unknown++;
                snprintf(wk->err, sizeof wk->err, "create: %s", shard_errmsg());
            } else {
                failed(wk, "create", rc);
            }
            continue;
        }
        e = ledger_add(id, json);
        snprintf(want, sizeof want, "{\"f\":%d,\"i\":%d,\"p\":1}", wk->w, i);
        t0 = now_s();
        rc = shard_object_patch(ctx, id, "{\"p\":1}", 7, &res, NULL);
        note_call(wk, t0, rc == 0);
        if (rc == 0) {
            if (strcmp(res, want) != 0)
                bug(wk, "patch: result %s, want %s", res, want);
            ledger_ack(e, want);
        } else if (unknown_outcome(rc, shard_errmsg()) || rc == SHARD_ETIMEOUT) {
            wk->unknown++;
            ledger_maybe(e, want);
        } else if (rc == SHARD_ENOTFOUND && wk->failover && ledger_at(e) < get_mark()) {
            /* Created on the old master just before it died, never sent to
             * the standby: the forced failover's known risk (counted, and
             * checked against what the old master committed). */
            wk->lost++;
            snprintf(wk->err, sizeof wk->err, "patch of %llu: %s", (unsigned long long)id,
                     shard_errmsg());
        } else {
            failed(wk, "patch", rc);
        }
        shard_free(res);
    }
    return NULL;
}

/* "D-1-N,..." -> N for domain d; 0 when absent. */
static unsigned long long gtid_seq(const char *pos, unsigned d)
{
    for (const char *p = pos; p && *p;) {
        char *end;
        unsigned long dom = strtoul(p, &end, 10);
        const char *dash = *end == '-' ? strchr(end + 1, '-') : NULL;
        if (dash && dom == d)
            return strtoull(dash + 1, NULL, 10);
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    return 0;
}

/* An application context of its own (map refresh off) that has served
 * pair 1 before the failover; used only through one kind of call after it. */
static shard_ctx *app_ctx(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *c = NULL;
    char *json = NULL;
    o.refresh_interval_ms = 0;
    o.connect_timeout_ms = 1000;
    ck_assert_msg(shard_ctx_open(&c, harness_map_path(h), &o) == 0, "%s", shard_errmsg());
    ck_assert_int_eq(shard_object_get(c, statics[0].id, &json, NULL), 0);
    shard_free(json);
    return c;
}

/* Seconds until a call kind (0: transaction, 1: multi-get) on shard 0
 * succeeds through c, trying for at most `limit` seconds; -1 if it never did,
 * -2 if a call failed otherwise than "cannot connect" (err says how). */
static double follows(shard_ctx *c, int kind, double limit, char *err, size_t errsize)
{
    double t0 = now_s();
    err[0] = '\0';
    while (now_s() - t0 < limit) {
        int rc;
        if (kind == 0) {
            shard_txn *t = NULL;
            char *json = NULL;
            rc = shard_txn_begin(c, 0, &t);
            if (rc == 0)
                rc = shard_txn_object_get(t, statics[0].id, &json, NULL);
            shard_free(json);
            if (rc == 0)
                rc = shard_txn_commit(t);
            else
                shard_txn_rollback(t); /* NULL is fine */
        } else {
            shard_item *items = NULL;
            uint64_t ids[2] = {statics[0].id, statics[30].id};
            rc = shard_object_mget(c, ids, 2, &items);
            if (rc == SHARD_EPARTIAL && (items[0].status != SHARD_ECONNECT ||
                                         items[1].status != 0)) {
                snprintf(err, errsize, "item statuses %d (pair 1) and %d (pair 2)",
                         items[0].status, items[1].status);
                rc = -2;
            }
            shard_items_free(items, rc == 0 || rc == SHARD_EPARTIAL || rc == -2 ? 2 : 0);
            if (rc == -2)
                return -2;
        }
        if (rc == 0)
            return now_s() - t0;
        if (rc != SHARD_ECONNECT && rc != SHARD_EPARTIAL) {
            snprintf(err, errsize, "%d: %s", rc, shard_errmsg());
            return -2;
        }
        if (!err[0])
            snprintf(err, errsize, "%d after %.1f ms: %s", rc, (now_s() - t0) * 1000,
                     shard_errmsg());
        usleep(50000);
    }
    return -1;
}

/* Print a server's pair link error, if it stopped with one. */
static void pair_link_report(const char *server)
{
    char *st = sql_ok(h, server, "SHOW SLAVE STATUS");
    char *e = strstr(st, "Error_code");

    if (e) {
        e[strcspn(e, "\t\n")] = '\0';
        printf("  %s's pair link stopped: %.300s\n", server, e);
    }
    free(st);
}

/* Kill pair 1's master under writes, force the failover to its standby; the
 * application (map refresh off) follows through its own reloads. */
START_TEST(forced_failover_under_writes)
{
    shard_ctx *admin = admin_ctx(), *txn_app = app_ctx(), *mget_app = app_ctx();
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    atomic_int stop = 0;
    worker wk[3] = {
        {.name = "create0", .fn = create_loop, .shard = 0, .w = 10},
        {.name = "create1", .fn = create_loop, .shard = 1, .w = 11},
        {.name = "txn0", .fn = txn_loop, .shard = 0, .w = 12},
    };
    pthread_t t[3];
    double t_kill, t_dead, t_fo0, t_fo, follow = 0, first = 1e300, txn_follow, mget_follow;
    unsigned long long applied, committed;
    char *out, txn_err[300], mget_err[300];
    int rc, rc_kill, rc_plain = 0;
    long lost = 0;

    master_is("MySQL001", 1);
    pair_links_run("s1", "s2"); /* the standby is current: nothing is lost but in flight */
    set_mark(1e300);
    set_window(1e300, 1e300);
    for (int i = 0; i < 3; i++) {
        wk[i].stop = &stop;
        wk[i].names = names_p1;
        wk[i].failover = 1;
    }
    own_object(&wk[2]);
    run_workers(wk, 3, t);
    sleep_s(0.4);
    t_kill = now_s();
    rc = rc_kill = harness_kill(h, "s1");
    t_dead = now_s(); /* from now on nothing on pair 1 can succeed until the failover */
    set_mark(t_dead);
    sleep_s(0.2);
    if (rc == 0)
        rc_plain = shard_pair_failover(admin, "MySQL001", 0, &r);
    t_fo0 = now_s();
    if (rc == 0)
        rc = shard_pair_failover(admin, "MySQL001", SHARD_FAILOVER_FORCE, &r);
    t_fo = now_s();
    if (rc == 0)
        sleep_s(1.0);
    atomic_store(&stop, 1);
    shard_ctx_free(admin);
    join_workers(wk, 3, t);
    ck_assert_int_eq(rc_kill, 0);
    ck_assert_int_eq(rc_plain, SHARD_ECONNECT);
    ck_assert_msg(rc == 0, "failover: %d %s", rc, shard_errmsg());
    for (int i = 0; i < 3; i++) {
        double ok = wk[i].first_ok_after_mark;
        ck_assert_msg(ok > 0, "%s: no success after the failover", wk[i].name);
        /* No call begun once s1 was dead can succeed before the failover. */
        ck_assert_msg(ok >= t_fo0, "%s: a call succeeded %.1f ms before the failover began",
                      wk[i].name, (t_fo0 - ok) * 1000);
        if (ok - t_fo > follow)
            follow = ok - t_fo;
        if (ok < first)
            first = ok;
    }
    printf("forced failover %.1f ms after the kill, took %.1f ms (lag unknown: %lld); "
           "writers resumed %.1f to %.1f ms after it returned\n", (t_fo0 - t_kill) * 1000,
           r.total_ms, (long long)r.lag_transactions, (first - t_fo) * 1000, follow * 1000);
    ck_assert_int_eq(r.old_master_fenced, 0);
    master_is("MySQL001", 2);
    for (int i = 0; i < 3; i++)
        lost += wk[i].lost;
    /* Contexts that only run transactions, or only multi-gets, follow too. */
    txn_follow = follows(txn_app, 0, 2.0, txn_err, sizeof txn_err);
    mget_follow = follows(mget_app, 1, 2.0, mget_err, sizeof mget_err);
    printf("  a transaction-only context followed after %.1f ms%s%s; a multi-get-only one "
           "after %.1f ms%s%s\n", txn_follow * 1000, txn_err[0] ? ", first: " : "", txn_err,
           mget_follow * 1000, mget_err[0] ? ", first: " : "", mget_err);
    shard_ctx_free(txn_app);
    shard_ctx_free(mget_app);
    ck_assert_msg(txn_follow >= 0, "shard_txn_begin does not follow the failover: %s",
                  txn_err);
    ck_assert_msg(mget_follow >= 0, "shard_object_mget does not follow the failover: %s",
                  mget_err);
    /* The new master's link from the old one must not replay, when the old
     * master returns, what it committed but never sent over the writes
     * acknowledged since (old_master_returns_after_forced_failover shows
     * that the failover leaves the link running): cut it, as an operator. */
    free(sql_ok(h, "s2", "STOP SLAVE"));
    out = sql_ok(h, "s2", "SELECT @@gtid_slave_pos");
    applied = gtid_seq(out, 1);
    free(out);
    /* The old master returns; it is no longer in charge of anything. */
    ck_assert_int_eq(harness_restart(h, "s1"), 0);
    out = sql_ok(h, "s1", "SELECT @@gtid_binlog_pos");
    committed = gtid_seq(out, 1);
    free(out);
    printf("  s1 committed %llu transactions of its own, s2 had applied %llu of them; "
           "%ld acknowledged writes seen lost by the writers\n", committed, applied, lost);
    pair_link_report("s1");
    ck_assert_msg(lost <= (long)(committed - applied), "%ld objects vanished, but s1 had "
                  "only %llu transactions s2 lacked", lost, committed - applied);
    /* An ID whose create the old master acknowledged but never sent is
     * handed out again by the new master. */
    for (size_t i = 0; i < nledger; i++)
        for (size_t j = i + 1; j < nledger; j++)
            if (ledger[i].id == ledger[j].id)
                printf("  ID %llu was handed out twice: for %s (by s1, lost) and for %s "
                       "(by s2)\n", (unsigned long long)ledger[i].id, ledger[i].ack,
                       ledger[j].ack);
    /* Writes acknowledged before s1 died may be missing, no more of them than
     * s1 committed and s2 lacks; every later one is there. */
    printf("  %zu acknowledged writes checked\n",
           ledger_check_risk(t_dead, 0, 1, committed > applied ? (long)(committed - applied)
                                                               : 0));
}
END_TEST

typedef struct scan_state {
    uint64_t *ids;
    size_t n, cap;
    int killed, kill_rounds;
    unsigned last_shard;
} scan_state;

static int scan_cb(uint64_t id, const char *json, size_t len, void *payload)
{
    scan_state *st = payload;
    unsigned s = shard_id_shard(id);
    (void)json;
    (void)len;
    if (st->n == st->cap) {
        st->cap = st->cap ? 2 * st->cap : 1024;
        st->ids = realloc(st->ids, st->cap * sizeof *st->ids);
        if (!st->ids)
            return -1;
    }
    st->ids[st->n++] = id;
    /* Entering a new shard: kill every pooled connection on both masters. */
    if (s != st->last_shard && (s == 1 || s == 4 || s == 6)) {
        st->killed += kill_app_connections("s2", NULL);
        st->killed += kill_app_connections("s3", NULL);
        st->kill_rounds++;
    }
    st->last_shard = s;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct bg_call {
    shard_ctx *c; /* its context (NULL: ctx) */
    int kind; /* 0: patch, 1: create */
    uint64_t id;
    unsigned shard;
    const char *json;
    int rc;
    char msg[512];
    uint64_t out_id;
    double took;
} bg_call;

static void *bg_main(void *arg)
{
    bg_call *b = arg;
    shard_ctx *c = b->c ? b->c : ctx;
    double t0 = now_s();
    if (b->kind == 0)
        b->rc = shard_object_patch(c, b->id, b->json, strlen(b->json), NULL, NULL);
    else
        b->rc = shard_object_create(c, 1, b->shard, b->json, strlen(b->json), &b->out_id);
    snprintf(b->msg, sizeof b->msg, "%s", shard_errmsg());
    b->took = now_s() - t0;
    return NULL;
}

/*
 * The application's context with a retry budget that outlasts finding and
 * killing a call's statement (each look at the processlist runs the
 * client: over a second on a loaded machine under ASan, longer than ctx's
 * budget of 1 s, after which a killed call is rightly not retried).
 */
static shard_ctx *open_patient(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *c = NULL;

    o.refresh_interval_ms = 0;
    o.connect_timeout_ms = 1000;
    o.retry_budget_ms = 60000;
    ck_assert_msg(shard_ctx_open(&c, harness_map_path(h), &o) == 0, "%s", shard_errmsg());
    return c;
}

/* Wait (at most 3 s) until an application statement matching cond runs on
 * s3. No assertions: a thread of the test is running. */
static int wait_running(const char *cond)
{
    for (int i = 0; i < 150; i++) {
        char sql[400], *out;
        long n;
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                 "WHERE USER = 'shard' AND COMMAND IN ('Query', 'Execute') AND %s", cond);
        out = sql_try("s3", sql);
        n = atol(out);
        free(out);
        if (n > 0)
            return 1;
        usleep(20000);
    }
    return 0;
}

/* ... then kill it. Returns how many were killed. */
static int kill_running(const char *cond)
{
    char full[300];
    if (!wait_running(cond))
        return 0;
    /* Text statements are 'Query', prepared ones 'Execute'. */
    snprintf(full, sizeof full, "COMMAND IN ('Query', 'Execute') AND %s", cond);
    return kill_app_connections("s3", full);
}

static long count_marker(const char *marker)
{
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db00005.pins WHERE data LIKE '%%\"%s\"%%'",
             marker);
    return sql_long("s3", sql);
}

/* Connections killed by the server between and during statements. */
START_TEST(connections_killed)
{
    scan_state st = {NULL, 0, 0, 0, 0, 99};
    uint64_t count = 0, id, victim = statics[30].id; /* on shard 5, pair 2 */
    char *json = NULL;
    size_t e_victim = 0;
    int rc;

    /* 1. A scatter scan whose callback kills the pool's connections: the
     * scan carries on transparently, every object once. */
    rc = shard_scatter_scan(ctx, 1, scan_cb, &st);
    ck_assert_msg(rc == 0, "scan: %d %s", rc, shard_errmsg());
    ck_assert_msg(shard_scatter_count(ctx, 1, &count) == 0, "%s", shard_errmsg());
    printf("scatter scan: %zu objects, %d connections killed in %d rounds mid-scan\n", st.n,
           st.killed, st.kill_rounds);
    ck_assert_int_eq(st.kill_rounds, 3);
    ck_assert_int_gt(st.killed, 0);
    ck_assert_uint_eq(st.n, count);
    qsort(st.ids, st.n, sizeof *st.ids, cmp_u64);
    for (size_t i = 1; i < st.n; i++)
        ck_assert_msg(st.ids[i] != st.ids[i - 1], "object %llu seen twice",
                      (unsigned long long)st.ids[i]);
    for (size_t i = 0; i < nledger; i++)
        if (shard_id_type(ledger[i].id) == 1 && !ledger[i].gone) /* gone: lost to a
                                                                    forced failover */
            ck_assert_msg(bsearch(&ledger[i].id, st.ids, st.n, sizeof *st.ids, cmp_u64),
                          "object %llu missing from the scan",
                          (unsigned long long)ledger[i].id);
    free(st.ids);

    /* 2. Idle pooled connections killed right before a get, a patch and a
     * create: the reads and the patch retry; the create succeeds or says its
     * outcome is unknown, and never makes two rows. */
    ck_assert_int_eq(shard_object_get(ctx, victim, &json, NULL), 0); /* pool one */
    shard_free(json);
    ck_assert_int_gt(kill_app_connections("s3", NULL), 0);
    json = NULL;
    ck_assert_msg(shard_object_get(ctx, victim, &json, NULL) == 0, "%s", shard_errmsg());
    ck_assert_str_eq(json, statics[30].json);
    shard_free(json);
    kill_app_connections("s3", NULL);
    ck_assert_msg(shard_object_patch(ctx, victim, "{\"k\":1}", 7, NULL, NULL) == 0, "%s",
                  shard_errmsg());
    for (size_t i = 0; i < nledger; i++)
        if (ledger[i].id == victim)
            e_victim = i;
    ck_assert_uint_eq(ledger[e_victim].id, victim);
    snprintf(statics[30].json, sizeof statics[30].json, "{\"static\":30,\"shard\":5,"
             "\"k\":1}");
    ledger_ack(e_victim, statics[30].json);
    kill_app_connections("s3", NULL);
    rc = shard_object_create(ctx, 1, 5, "{\"marker\":\"kc-1\"}", 17, &id);
    ck_assert_msg(rc == 0 || unknown_outcome(rc, shard_errmsg()), "%d %s", rc, shard_errmsg());
    printf("create right after its pooled connection was killed: %d %s\n", rc,
           rc ? shard_errmsg() : "");
    if (rc == 0)
        ck_assert_int_eq(count_marker("kc-1"), 1);
    else
        ck_assert_int_le(count_marker("kc-1"), 1);
    if (rc == 0)
        ledger_add(id, "{\"marker\":\"kc-1\"}");

    /* 3. A patch killed while it waits for a row lock: retried on a new
     * connection, it applies once, after the lock holder. */
    {
        shard_txn *t = NULL;
        char *cur = NULL;
        const char *held = "{\"static\":30,\"shard\":5,\"k\":1,\"holder\":1}";
        bg_call b = {.c = open_patient(), .kind = 0, .id = victim, .json = "{\"k\":2}"};
        pthread_t th;
        int killed, again;

        ck_assert_int_eq(shard_txn_begin(ctx, 5, &t), 0);
        ck_assert_int_eq(shard_txn_object_get(t, victim, &cur, NULL), 0);
        shard_free(cur);
        ck_assert_int_eq(pthread_create(&th, NULL, bg_main, &b), 0);
        killed = kill_running("INFO LIKE 'SELECT%SELECT data FROM%FOR UPDATE%'");
        /* The retry waits for the lock again, on a new connection. */
        again = killed > 0 && wait_running("INFO LIKE 'SELECT%SELECT data FROM%FOR UPDATE%'");
        rc = shard_txn_object_put(t, victim, held, strlen(held));
        if (rc == 0)
            rc = shard_txn_commit(t);
        else
            shard_txn_rollback(t);
        pthread_join(th, NULL);
        shard_ctx_free(b.c);
        printf("patch killed in a lock wait: %d killed; patch %d after %.1f ms: %s\n", killed,
               b.rc, b.took * 1000, b.msg);
        ck_assert_int_eq(rc, 0);
        ck_assert_int_ge(killed, 1);
        ck_assert(again);
        ck_assert_msg(b.rc == 0, "the killed patch was not retried: %d %s", b.rc, b.msg);
        snprintf(statics[30].json, sizeof statics[30].json, "{\"static\":30,\"shard\":5,"
                 "\"k\":2,\"holder\":1}");
        ledger_ack(e_victim, statics[30].json);
        ck_assert_int_eq(shard_object_get(ctx, victim, &cur, NULL), 0);
        ck_assert_str_eq(cur, statics[30].json);
        shard_free(cur);
    }

    /* 4. A create killed while its INSERT waits (a gap lock held at the end
     * of the table): the create is one autocommit statement (it checks the
     * move fence itself), so a lost answer leaves its outcome unknown to
     * the client: it is reported as such, never retried, and the row
     * exists at most once (here not at all: the kill came before it
     * committed). */
    {
        shard_txn *t = NULL;
        char *cur = NULL;
        uint64_t far;
        bg_call b = {.c = open_patient(), .kind = 1, .shard = 5,
                     .json = "{\"marker\":\"kc-2\"}"};
        pthread_t th;
        int killed;

        shard_id_make(5, 1, 999999999, &far);
        ck_assert_int_eq(shard_txn_begin(ctx, 5, &t), 0);
        ck_assert_int_eq(shard_txn_object_get(t, far, &cur, NULL), SHARD_ENOTFOUND);
        ck_assert_int_eq(pthread_create(&th, NULL, bg_main, &b), 0);
        killed = kill_running("INFO LIKE 'INSERT INTO%'");
        shard_txn_rollback(t);
        pthread_join(th, NULL);
        shard_ctx_free(b.c);
        printf("create killed in its INSERT: %d killed; create %d after %.1f ms: %s\n",
               killed, b.rc, b.took * 1000, b.msg);
        ck_assert_int_ge(killed, 1);
        ck_assert_msg(unknown_outcome(b.rc, b.msg),
                      "the killed create was not reported as of unknown outcome: %d %s",
                      b.rc, b.msg);
        ck_assert_int_eq(count_marker("kc-2"), 0);
    }

    /* 5. A transaction whose connection is killed between its statements:
     * it fails clearly and changes nothing; the next one works. */
    {
        shard_txn *t = NULL;
        char *cur = NULL;
        const char *lost = "{\"lost\":1}";

        ck_assert_int_eq(shard_txn_begin(ctx, 5, &t), 0);
        ck_assert_int_eq(shard_txn_object_get(t, victim, &cur, NULL), 0);
        shard_free(cur);
        ck_assert_int_gt(kill_app_connections("s3", NULL), 0);
        rc = shard_txn_object_put(t, victim, lost, strlen(lost));
        ck_assert_msg(rc == SHARD_ECONNECT, "%d %s", rc, shard_errmsg());
        ck_assert_msg(strstr(shard_errmsg(), addr[3]), "%s", shard_errmsg());
        rc = shard_txn_commit(t);
        ck_assert_int_eq(rc, SHARD_ECONNECT);
        ck_assert_msg(strstr(shard_errmsg(), "failed earlier"), "%s", shard_errmsg());
        cur = NULL;
        ck_assert_int_eq(shard_object_get(ctx, victim, &cur, NULL), 0);
        ck_assert_str_eq(cur, statics[30].json);
        shard_free(cur);
        ck_assert_int_eq(shard_txn_begin(ctx, 5, &t), 0);
        ck_assert_int_eq(shard_txn_object_get(t, victim, &cur, NULL), 0);
        shard_free(cur);
        ck_assert_int_eq(shard_txn_commit(t), 0);
    }
    ledger_check();
    pair_links_run("s3", "s4");
}
END_TEST

typedef struct reader {
    shard_ctx *c;
    uint64_t id;
    const char *want;
    atomic_int *stop;
    long ok, bad;
    double worst;
    char err[300];
} reader;

static void *read_loop(void *arg)
{
    reader *rd = arg;
    while (!atomic_load(rd->stop)) {
        char *json = NULL;
        double t0 = now_s(), took;
        int rc = shard_object_get(rd->c, rd->id, &json, NULL);
        took = now_s() - t0;
        if (took > rd->worst)
            rd->worst = took;
        if (rc == 0 && strcmp(json, rd->want) == 0) {
            rd->ok++;
        } else {
            rd->bad++;
            snprintf(rd->err, sizeof rd->err, "%d %s", rc, shard_errmsg());
        }
        shard_free(json);
        usleep(2000);
    }
    return NULL;
}

static int paused; /* s3 is stopped: resume it whatever happens */

/* A master that accepts connections but never answers (SIGSTOP). */
START_TEST(stopped_master_times_out)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *c = NULL;
    uint64_t p2 = statics[24].id, p1 = statics[0].id; /* shard 4 (s3), shard 0 (s2) */
    uint64_t ids[4] = {p1, p2, statics[6].id, statics[36].id};
    const double bound = 2 * (2.0 + 1.0) + 2;
    atomic_int stop = 0;
    reader rd;
    pthread_t th;
    shard_item *items = NULL;
    char *json = NULL;
    double t0, t_first, t_second, t_mget, t_patch, t_back, t_warm, idle;
    int rc, rc_first, rc2, rc_mget, rc_patch;
    char first_msg[1024];
    size_t e = 0;

    o.refresh_interval_ms = 0;
    o.read_timeout_ms = 2000;
    o.connect_timeout_ms = 1000;
    ck_assert_msg(shard_ctx_open(&c, harness_map_path(h), &o) == 0, "%s", shard_errmsg());
    ck_assert_int_eq(shard_object_get(c, p2, &json, NULL), 0); /* a pooled connection */
    t_warm = now_s();
    shard_free(json);
    json = NULL;
    rd = (reader){.c = c, .id = p1, .want = statics[0].json, .stop = &stop};
    ck_assert_int_eq(harness_pause(h, "s3"), 0);
    paused = 1;
    ck_assert_int_eq(pthread_create(&th, NULL, read_loop, &rd), 0);
    /* On the pooled connection: the read timeout. */
    t0 = now_s();
    idle = t0 - t_warm;
    rc = shard_object_get(c, p2, &json, NULL);
    t_first = now_s() - t0;
    rc_first = rc;
    snprintf(first_msg, sizeof first_msg, "%s", shard_errmsg());
    printf("get on a stopped master, pooled connection: %d after %.2f s: %s\n", rc, t_first,
           first_msg);
    /* On a new connection: it connects, and the greeting never comes. */
    t0 = now_s();
    rc2 = shard_object_get(c, p2, &json, NULL);
    t_second = now_s() - t0;
    printf("get on a stopped master, new connection: %d after %.2f s: %s\n", rc2, t_second,
           shard_errmsg());
    /* A multi-get spanning both pairs: pair 1 answers, pair 2 times out. */
    t0 = now_s();
    rc_mget = shard_object_mget(c, ids, 4, &items);
    t_mget = now_s() - t0;
    printf("multi-get with a stopped master: %d after %.2f s: %s\n", rc_mget, t_mget,
           shard_errmsg());
    /* A write: a timeout whose outcome the ledger treats as unknown. */
    for (size_t i = 0; i < nledger; i++)
        if (ledger[i].id == p2)
            e = i;
    ledger_maybe(e, "{\"static\":24,\"shard\":4,\"paused\":1}");
    t0 = now_s();
    rc_patch = shard_object_patch(c, p2, "{\"paused\":1}", 12, NULL, NULL);
    t_patch = now_s() - t0;
    printf("patch on a stopped master: %d after %.2f s: %s\n", rc_patch, t_patch,
           shard_errmsg());
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    rc = harness_resume(h, "s3");
    paused = rc != 0;
    ck_assert_int_eq(rc, 0);
    printf("  the other pair meanwhile: %ld gets, %ld failed, worst %.1f ms\n", rd.ok, rd.bad,
           rd.worst * 1000);

    /* A connection idle for over a second is pinged before use (lib/conn.c):
     * on a loaded machine the pause may take that long, and then the ping
     * times out, the connection is replaced and the new one cannot connect. */
    ck_assert_msg(rc_first == SHARD_ETIMEOUT || (idle >= 1.0 && rc_first == SHARD_ECONNECT),
                  "%d after %.2f s idle: %s", rc_first, idle, first_msg);
    ck_assert_msg(strstr(first_msg, "MySQL002") && strstr(first_msg, addr[3]), "%s",
                  first_msg);
    ck_assert_msg(rc2 == SHARD_ETIMEOUT || rc2 == SHARD_ECONNECT, "%d", rc2);
    ck_assert_msg(t_first < bound && t_second < bound && t_mget < bound && t_patch < bound,
                  "a call took longer than %.1f s", bound);
    ck_assert_int_eq(rc_mget, SHARD_EPARTIAL);
    ck_assert_int_eq(items[0].status, 0);
    ck_assert_str_eq(items[0].data, statics[0].json);
    ck_assert_int_eq(items[2].status, 0);
    ck_assert_str_eq(items[2].data, statics[6].json);
    ck_assert_msg(items[1].status == SHARD_ETIMEOUT || items[1].status == SHARD_ECONNECT,
                  "%d", items[1].status);
    ck_assert_int_eq(items[1].status, items[3].status);
    shard_items_free(items, 4);
    ck_assert_msg(rc_patch == SHARD_ETIMEOUT || rc_patch == SHARD_ECONNECT, "%d", rc_patch);
    ck_assert_msg(rd.bad == 0, "the other pair failed: %s", rd.err);
    ck_assert_int_gt(rd.ok, 0);

    /* Resumed: calls work again at once. */
    t0 = now_s();
    rc = shard_object_get(c, p2, &json, NULL);
    t_back = now_s() - t0;
    printf("get after SIGCONT: %d after %.1f ms\n", rc, t_back * 1000);
    ck_assert_msg(rc == 0, "%s", shard_errmsg());
    ck_assert_msg(ledger_allows(e, json), "%s", json);
    ledger_ack(e, json);
    shard_free(json);
    shard_ctx_free(c);
    ledger_check();
    pair_links_run("s3", "s4");
}
END_TEST

/* Wait (at most 5 s) until sql's single value on server is want. */
static int settles(const char *server, const char *sql, const char *want)
{
    for (int i = 0; i < 100; i++) {
        char *out = sql_ok(h, server, sql);
        int ok = strcmp(out, want) == 0;
        free(out);
        if (ok)
            return 1;
        usleep(50000);
    }
    return 0;
}

/*
 * A forced failover, then the old master comes back. A write it
 * acknowledged but had not sent when it died (here: its standby's I/O
 * thread held back for that one write, then restarted, as if the write had
 * lost the race with the SIGKILL, which the test above sees now and then)
 * must not reach the new master later and overwrite a write the new
 * master acknowledged since.
 */
START_TEST(old_master_returns_after_forced_failover)
{
    shard_ctx *admin = admin_ctx();
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    char sql[300], found[64], *res = NULL, *out, *json = NULL;
    unsigned long long s3_seq;
    uint64_t x;
    int rc;

    master_is("MySQL002", 3);
    ck_assert_msg(shard_object_create(ctx, 1, 4, "{\"v\":\"before\"}", 14, &x) == 0, "%s",
                  shard_errmsg());
    snprintf(sql, sizeof sql, "SELECT data FROM db00004.pins WHERE local_id = %llu",
             (unsigned long long)shard_id_local(x));
    ck_assert(settles("s4", sql, "{\"v\":\"before\"}\n"));
    free(sql_ok(h, "s4", "STOP SLAVE IO_THREAD"));
    ck_assert_int_eq(shard_object_patch(ctx, x, "{\"v\":\"old\"}", 11, NULL, NULL), 0);
    ck_assert_int_eq(harness_kill(h, "s3"), 0);
    free(sql_ok(h, "s4", "START SLAVE IO_THREAD")); /* retries the dead master */
    rc = shard_pair_failover(admin, "MySQL002", SHARD_FAILOVER_FORCE, &r);
    shard_ctx_free(admin);
    ck_assert_msg(rc == 0, "failover: %s", shard_errmsg());
    master_is("MySQL002", 4);
    /* The new master has the write from before; the application overwrites
     * the lost one, and is told so. */
    rc = shard_object_patch(ctx, x, "{\"v\":\"new\"}", 11, &res, NULL);
    ck_assert_msg(rc == 0, "%s", shard_errmsg());
    ck_assert_str_eq(res, "{\"v\":\"new\"}");
    shard_free(res);
    ck_assert_int_eq(harness_restart(h, "s3"), 0);
    out = sql_ok(h, "s3", "SELECT @@gtid_binlog_pos");
    s3_seq = gtid_seq(out, 3);
    free(out);
    snprintf(sql, sizeof sql, "SELECT MASTER_GTID_WAIT('3-3-%llu', 3)", s3_seq);
    out = sql_ok(h, "s4", sql); /* 0: the old master's last write reached the new one */
    printf("old master back after a forced failover: the new master %s its unsent write\n",
           strcmp(out, "0\n") == 0 ? "applied" : "did not apply");
    free(out);
    pair_link_report("s4");
    ck_assert_int_eq(shard_object_get(ctx, x, &json, NULL), 0);
    snprintf(found, sizeof found, "%s", json);
    shard_free(json);
    snprintf(sql, sizeof sql, "SELECT data FROM db00004.pins WHERE local_id = %llu",
             (unsigned long long)shard_id_local(x));
    usleep(300000); /* and the old master, now the standby, applies the new master's */
    out = sql_ok(h, "s3", sql);
    printf("  the object on the new master: %s; on the old one: %s", found, out);
    free(out);
    ck_assert_msg(strcmp(found, "{\"v\":\"new\"}") == 0, "the write the new master "
                  "acknowledged was overwritten by the old master's unsent one: %s", found);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_faults");
    TCase *tc = tcase_create("faults");
    shard_options o = SHARD_OPTIONS_INIT;
    double t0 = now_s();
    int failed;

    h = harness_start_ex(2, 8, 4);
    if (!h)
        return 1;
    for (int i = 1; i <= 4; i++)
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d",
                 harness_port(h, (const char *[]){"s1", "s2", "s3", "s4"}[i - 1]));
    o.refresh_interval_ms = 0; /* follow failures through reloads alone */
    o.connect_timeout_ms = 1000;
    /* Shorter than the outages below, so that calls do fail during them
     * (the default budget rides out a quick restart). */
    o.retry_budget_ms = 1000;
    if (harness_schema_apply(h) || shard_ctx_open(&ctx, harness_map_path(h), &o)) {
        fprintf(stderr, "setup: %s\n", shard_errmsg());
        harness_stop(h);
        return 1;
    }
    printf("servers up and schema applied in %.1f s\n", now_s() - t0);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, master_killed_under_load);
    tcase_add_test(tc, mget_with_dead_master);
    tcase_add_test(tc, schema_apply_with_dead_master);
    tcase_add_test(tc, move_source_killed_mid_copy);
    tcase_add_test(tc, forced_failover_under_writes);
    tcase_add_test(tc, connections_killed);
    tcase_add_test(tc, stopped_master_times_out);
    tcase_add_test(tc, old_master_returns_after_forced_failover);
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_NOFORK); /* the tests build on each other */
    if (paused)
        harness_resume(h, "s3");
    shard_ctx_free(ctx);
    harness_stop(h);
    free(ledger);
    printf("server_faults: %.1f s in all\n", now_s() - t0);
    return failed ? 1 : 0;
}
