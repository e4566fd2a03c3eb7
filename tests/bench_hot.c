/*
 * tests/bench_hot.c: the hot path against the best an application could do
 * itself with raw libmariadb (prepared statements, a connection per thread,
 * the library's timeouts), on one throwaway pair started here.
 *
 *   bench get-vs-raw                shard_object_get, one context shared by the
 *                                   threads / a prepared SELECT without the
 *                                   fence, a connection per thread (1, 2, 4 threads)
 *   bench get-shared-vs-per-thread  one shared context / a context per thread
 *                                   (1, 2, 4, 16 threads)
 *   bench create-vs-raw-insert      shard_object_create / an autocommit prepared
 *                                   INSERT of the same JSON (1, 2 threads)
 *   bench patch-vs-raw-rmw          shard_object_patch / SELECT ... FOR UPDATE,
 *                                   merge, UPDATE, COMMIT (2 threads)
 *
 * Sides alternate in rounds of ROUND_SECONDS (A B B A ...), so that a drift
 * in the machine's load falls on both alike; every figure is a median, and a
 * ratio is the median of the rounds' ratios; a write round starts with the
 * standby caught up. Figures only: nothing here is a timed assertion. Exit
 * status 1 means something failed outright.
 * BENCH_VERBOSE=1 prints every round; names as arguments (or BENCH_ONLY)
 * select benchmarks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <libshard.h>
#include <mysql.h>
#include <jansson.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define BENCH_NAME "bench_hot"
#include "bench_util.h"

#define SHARDS 4
#define PINS_PER_SHARD 5000
#define PIN_TYPE 1
#define INSERT_BATCH 500
#define MAX_THREADS 16
#define ROUNDS 9        /* reads' rounds per side */
#define WRITE_ROUNDS 25 /* writes': a commit's cost swings with the server's flushing
                           (1 s rounds of one side ranged 3.4k-11k creates/s), so
                           9 rounds' median of ratios moved by 0.2 between runs */
#define ROUND_SECONDS 1.0
/* libshard's default timeouts (shard_ctx_open(3)), on the raw side too. */
#define CONNECT_S 3
#define READ_S 10
#define WRITE_S 10
#define LEASE_MS 10000 /* the map's lease: reads skip the fence (libshard(3)) */

static harness *H;
static bool Verbose;

enum side { LIB_SHARED, LIB_PER_THREAD, RAW };
enum op { OP_GET, OP_CREATE, OP_PATCH };

/* A raw connection of one thread with its prepared statements per shard. */
typedef struct rawconn {
    MYSQL *my;
    MYSQL_STMT *get[SHARDS], *ins[SHARDS], *lock[SHARDS], *upd[SHARDS];
} rawconn;

typedef struct phase {
    enum side side;
    enum op op;
    shard_ctx *ctx;                 /* LIB_SHARED */
    shard_ctx *ctxs[MAX_THREADS];   /* LIB_PER_THREAD */
    rawconn *raw;                   /* RAW: [MAX_THREADS] */
    const uint64_t *ids;
    size_t nids;
} phase;

typedef struct crew crew;

typedef struct worker {
    crew *crew;
    int idx;
    pthread_t thread;
    uint64_t ops;
    char err[512];
} worker;

struct crew {
    int n;
    phase *cur;
    uint64_t seed;
    bool quit;
    atomic_bool stop;
    pthread_barrier_t go, done;
    worker w[MAX_THREADS];
};

static char Dbs[SHARDS][32];

/* ------------------------------------------------------------ raw side */

static MYSQL_STMT *prepare(MYSQL *my, const char *fmt, const char *db)
{
    char q[256];
    int n = snprintf(q, sizeof q, fmt, db);
    MYSQL_STMT *st = mysql_stmt_init(my);

    if (!st || mysql_stmt_prepare(st, q, (unsigned long)n))
        die("prepare %s: %s", q, st ? mysql_stmt_error(st) : "out of memory");
    return st;
}

static void raw_open(rawconn *r, int port)
{
    unsigned ct = CONNECT_S, rt = READ_S, wt = WRITE_S;

    memset(r, 0, sizeof *r);
    if (!(r->my = mysql_init(NULL)))
        die("mysql_init failed");
    mysql_optionsv(r->my, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    mysql_optionsv(r->my, MYSQL_OPT_READ_TIMEOUT, &rt);
    mysql_optionsv(r->my, MYSQL_OPT_WRITE_TIMEOUT, &wt);
    mysql_optionsv(r->my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (!mysql_real_connect(r->my, "127.0.0.1", "shard", getenv("LIBSHARD_PASSWORD"), NULL,
                            (unsigned)port, NULL, 0))
        die("connect to 127.0.0.1:%d: %s", port, mysql_error(r->my));
    for (int s = 0; s < SHARDS; s++) {
        r->get[s] = prepare(r->my, "SELECT data FROM `%s`.`pins` WHERE local_id = ?", Dbs[s]);
        r->ins[s] = prepare(r->my, "INSERT INTO `%s`.`pins` (data) VALUES (?)", Dbs[s]);
        r->lock[s] = prepare(r->my, "SELECT data FROM `%s`.`pins` WHERE local_id = ? "
                                    "FOR UPDATE", Dbs[s]);
        r->upd[s] = prepare(r->my, "UPDATE `%s`.`pins` SET data = ? WHERE local_id = ?",
                            Dbs[s]);
    }
}

static void raw_close(rawconn *r)
{
    for (int s = 0; s < SHARDS; s++) {
        mysql_stmt_close(r->get[s]);
        mysql_stmt_close(r->ins[s]);
        mysql_stmt_close(r->lock[s]);
        mysql_stmt_close(r->upd[s]);
    }
    mysql_close(r->my);
}

static void bind_u64(MYSQL_BIND *b, unsigned long long *v)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_LONGLONG;
    b->buffer = v;
    b->is_unsigned = 1;
}

static void bind_text(MYSQL_BIND *b, const char *s, unsigned long *len)
{
    memset(b, 0, sizeof *b);
    b->buffer_type = MYSQL_TYPE_STRING;
    b->buffer = (void *)s;
    b->buffer_length = *len;
    b->length = len;
}

/* One row of one column into buf (as an application would read it). */
static int raw_select(MYSQL_STMT *st, uint64_t local, char *buf, size_t size,
                      unsigned long *len)
{
    unsigned long long key = local;
    MYSQL_BIND p, r;
    my_bool is_null = 0;
    int f;

    bind_u64(&p, &key);
    memset(&r, 0, sizeof r);
    r.buffer_type = MYSQL_TYPE_STRING;
    r.buffer = buf;
    r.buffer_length = size;
    r.length = len;
    r.is_null = &is_null;
    if (mysql_stmt_bind_param(st, &p) || mysql_stmt_execute(st) ||
        mysql_stmt_bind_result(st, &r))
        return -1;
    f = mysql_stmt_fetch(st);
    mysql_stmt_free_result(st);
    return f == 0 && !is_null ? 0 : -2;
}

static int raw_get(rawconn *r, uint64_t id)
{
    char buf[8192];
    unsigned long len = 0;
    return raw_select(r->get[shard_id_shard(id)], shard_id_local(id), buf, sizeof buf, &len);
}

static int raw_insert(rawconn *r, unsigned shard, const char *json, size_t n)
{
    unsigned long len = (unsigned long)n;
    MYSQL_BIND p;

    bind_text(&p, json, &len);
    if (mysql_stmt_bind_param(r->ins[shard], &p) || mysql_stmt_execute(r->ins[shard]))
        return -1;
    return mysql_stmt_insert_id(r->ins[shard]) ? 0 : -2;
}

/* What an application writes for a read-modify-write without libshard:
 * lock the row, merge the patch into it, write it back, commit. */
static int raw_patch(rawconn *r, uint64_t id, const char *patch)
{
    unsigned s = shard_id_shard(id);
    unsigned long long local = shard_id_local(id);
    char buf[8192], *text;
    unsigned long len = 0;
    MYSQL_BIND p[2];
    json_t *obj, *pt;
    int rc = -1;

    if (mysql_query(r->my, "START TRANSACTION"))
        return -1;
    if (raw_select(r->lock[s], local, buf, sizeof buf, &len) != 0)
        goto rollback;
    if (!(obj = json_loadb(buf, len, 0, NULL)))
        goto rollback;
    pt = json_loads(patch, 0, NULL);
    json_object_update(obj, pt);
    json_decref(pt);
    text = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    len = (unsigned long)strlen(text);
    bind_text(&p[0], text, &len);
    bind_u64(&p[1], &local);
    rc = mysql_stmt_bind_param(r->upd[s], p) || mysql_stmt_execute(r->upd[s]) ? -1 : 0;
    free(text);
    if (rc == 0)
        return mysql_query(r->my, "COMMIT") ? -1 : 0;
rollback:
    mysql_query(r->my, "ROLLBACK");
    return rc;
}

/* ------------------------------------------------------------ one call */

static int lib_call(shard_ctx *ctx, enum op op, uint64_t id, const char *json, size_t n,
                    const char *patch)
{
    char *out = NULL;
    size_t len;
    uint64_t nid;
    int rc;

    switch (op) {
    case OP_GET:
        rc = shard_object_get(ctx, id, &out, &len);
        break;
    case OP_CREATE:
        rc = shard_object_create(ctx, PIN_TYPE, shard_id_shard(id), json, n, &nid);
        break;
    default:
        rc = shard_object_patch(ctx, id, patch, strlen(patch), NULL, NULL);
        break;
    }
    shard_free(out);
    return rc;
}

static int raw_call(rawconn *r, enum op op, uint64_t id, const char *json, size_t n,
                    const char *patch)
{
    switch (op) {
    case OP_GET:
        return raw_get(r, id);
    case OP_CREATE:
        return raw_insert(r, shard_id_shard(id), json, n);
    default:
        return raw_patch(r, id, patch);
    }
}

static void run_until_stopped(worker *w, const phase *ph, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + (uint64_t)w->idx * 7919 + 1;
    char json[512], patch[64];
    int n = 0;

    while (!w->err[0] && !atomic_load_explicit(&w->crew->stop, memory_order_relaxed)) {
        uint64_t id = ph->ids[xorshift(&x) % ph->nids];
        int rc;

        if (ph->op == OP_CREATE)
            n = pin_json(json, sizeof json, shard_id_shard(id), (unsigned)(x % 100000));
        if (ph->op == OP_PATCH)
            snprintf(patch, sizeof patch, "{\"views\":%u}", (unsigned)(x % 100000));
        if (ph->side == RAW)
            rc = raw_call(&ph->raw[w->idx], ph->op, id, json, (size_t)n, patch);
        else
            rc = lib_call(ph->side == LIB_SHARED ? ph->ctx : ph->ctxs[w->idx], ph->op, id,
                          json, (size_t)n, patch);
        if (rc == 0)
            w->ops++;
        else if (ph->side == RAW)
            snprintf(w->err, sizeof w->err, "raw call on %llu: %s", (unsigned long long)id,
                     rc == -2 ? "no row" : mysql_error(ph->raw[w->idx].my));
        else
            snprintf(w->err, sizeof w->err, "libshard call on %llu: %s",
                     (unsigned long long)id, shard_errmsg());
    }
}

static void *work(void *arg)
{
    worker *w = arg;
    crew *c = w->crew;

    for (;;) {
        pthread_barrier_wait(&c->go);
        if (c->quit)
            return NULL;
        run_until_stopped(w, c->cur, c->seed);
        pthread_barrier_wait(&c->done);
    }
}

static void crew_start(crew *c, int n)
{
    c->n = n;
    c->quit = false;
    pthread_barrier_init(&c->go, NULL, (unsigned)n + 1);
    pthread_barrier_init(&c->done, NULL, (unsigned)n + 1);
    for (int i = 0; i < n; i++) {
        c->w[i] = (worker){.crew = c, .idx = i};
        if (pthread_create(&c->w[i].thread, NULL, work, &c->w[i]) != 0)
            die("pthread_create failed");
    }
}

static void crew_stop(crew *c)
{
    c->quit = true;
    pthread_barrier_wait(&c->go);
    for (int i = 0; i < c->n; i++)
        pthread_join(c->w[i].thread, NULL);
    pthread_barrier_destroy(&c->go);
    pthread_barrier_destroy(&c->done);
}

/* One round of side ph: calls per second. */
static double run_round(crew *c, phase *ph, uint64_t seed)
{
    double t0, t1;
    uint64_t ops = 0;

    /* A write round starts with the standby caught up: the rows of the
     * round before, still being applied there, would take CPU from this
     * one (the servers and the client share the machine's cores). */
    if (ph->op != OP_GET)
        bench_sync_standby(harness_port(H, "s1"), harness_port(H, "s2"), 120);
    c->cur = ph;
    c->seed = seed;
    atomic_store(&c->stop, false);
    for (int i = 0; i < c->n; i++)
        c->w[i].ops = 0;
    t0 = now();
    pthread_barrier_wait(&c->go);
    sleep_s(ROUND_SECONDS);
    atomic_store(&c->stop, true);
    pthread_barrier_wait(&c->done);
    t1 = now();
    for (int i = 0; i < c->n; i++) {
        if (c->w[i].err[0])
            die("%s", c->w[i].err);
        ops += c->w[i].ops;
    }
    return (double)ops / (t1 - t0);
}

typedef struct duel {
    double ratio, a, b;
} duel;

/* Rounds A B B A A B ... of a against b with `threads` threads. */
static duel interleave(phase *a, phase *b, int threads, int rounds, const char *label)
{
    double ra[WRITE_ROUNDS], rb[WRITE_ROUNDS], r[WRITE_ROUNDS];
    crew c;

    crew_start(&c, threads);
    run_round(&c, a, 1); /* warm-up: pools, statement caches, buffer pool */
    run_round(&c, b, 1);
    for (int k = 0; k < rounds; k++) {
        /* Every round its own seed: a patch that writes the value the round
         * before wrote changes nothing, and the server skips the write. */
        uint64_t seed = ((uint64_t)threads * 1000 + (uint64_t)k) * 2 + 2;
        if (k % 4 == 0 || k % 4 == 3) {
            ra[k] = run_round(&c, a, seed);
            rb[k] = run_round(&c, b, seed + 1);
        } else {
            rb[k] = run_round(&c, b, seed + 1);
            ra[k] = run_round(&c, a, seed);
        }
        r[k] = ra[k] / rb[k];
        if (Verbose)
            fprintf(stderr, "%s %d threads round %d: %.0f vs %.0f (%.2f)\n", label, threads,
                    k, ra[k], rb[k], r[k]);
    }
    crew_stop(&c);
    return (duel){median(r, rounds), median(ra, rounds), median(rb, rounds)};
}

/* "N threads: ratio R (A vs B/s)" for each thread count, worst ratio first. */
static void report(const char *name, phase *a, phase *b, const int *threads, int nt,
                   int rounds, const char *what, const char *target)
{
    char detail[1024];
    size_t len = 0;
    double worst = 1e9;

    if (!bench_selected(name))
        return;
    for (int i = 0; i < nt; i++) {
        duel d = interleave(a, b, threads[i], rounds, name);
        if (d.ratio < worst)
            worst = d.ratio;
        len += (size_t)snprintf(detail + len, sizeof detail - len,
                                "%s%d thread%s: %.2f (%.0f vs %.0f/s)", i ? "; " : "",
                                threads[i], threads[i] > 1 ? "s" : "", d.ratio, d.a, d.b);
    }
    printf("bench %s ratio=%.2f (the lowest over thread counts; %s; %s; medians of %d "
           "interleaved %.0f s rounds per side; target %s)\n",
           name, worst, detail, what, rounds, ROUND_SECONDS, target);
    fflush(stdout);
}

/* ------------------------------------------------------------ setup */


static size_t load(const shard_map *map, int port, uint64_t *ids)
{
    MYSQL *my = raw_connect_admin(port, 10, false);
    size_t nids = 0;

    for (unsigned s = 0; s < SHARDS; s++) {
        if (shard_map_database(map, s, Dbs[s], sizeof Dbs[s]))
            die("shard_map_database(%u): %s", s, shard_errmsg());
        load_pins(my, Dbs[s], s, PINS_PER_SHARD, INSERT_BATCH);
        for (unsigned l = 1; l <= PINS_PER_SHARD; l++)
            if (shard_id_make(s, PIN_TYPE, l, &ids[nids++]))
                die("shard_id_make(%u, %u, %u) failed", s, PIN_TYPE, l);
    }
    wait_standby(H, "s1", 1, "s2");
    mysql_close(my);
    return nids;
}

int main(int argc, char **argv)
{
    static uint64_t ids[SHARDS * PINS_PER_SHARD];
    static rawconn raw[MAX_THREADS];
    static const int get_threads[] = {1, 2, 4}, share_threads[] = {1, 2, 4, 16},
                     create_threads[] = {1, 2}, patch_threads[] = {2};
    shard_ctx *ctx = NULL;
    shard_map *map = NULL;
    phase lib = {0}, per = {0}, rawp = {0};
    size_t nids;
    int port;

    bench_select(argc, argv);
    Verbose = getenv("BENCH_VERBOSE") && *getenv("BENCH_VERBOSE") == '1';
    if (!(H = harness_start_ex(1, SHARDS, 4)))
        die("cannot start the servers");
    port = harness_port(H, "s1");
    bench_map_lease(H, LEASE_MS);
    if (harness_schema_apply(H) || shard_ctx_open(&ctx, harness_map_path(H), NULL) ||
        shard_ctx_map(ctx, &map))
        die("setting up libshard: %s", shard_errmsg());
    nids = load(map, port, ids);
    for (int i = 0; i < MAX_THREADS; i++) {
        raw_open(&raw[i], port);
        if (shard_ctx_open(&per.ctxs[i], harness_map_path(H), NULL))
            die("shard_ctx_open: %s", shard_errmsg());
    }
    lib = (phase){.side = LIB_SHARED, .ctx = ctx, .ids = ids, .nids = nids};
    per.side = LIB_PER_THREAD;
    per.ids = ids;
    per.nids = nids;
    rawp = (phase){.side = RAW, .raw = raw, .ids = ids, .nids = nids};

    report("get-vs-raw", &lib, &rawp, get_threads, 3, ROUNDS,
           "shard_object_get with one shared context (map lease_ms 10000: the fence "
           "skipped) against a prepared SELECT without the fence, a connection per thread; "
           "pins of ~200 B on 4 shards of one server",
           ">= 0.90");
    report("get-shared-vs-per-thread", &lib, &per, share_threads, 4, ROUNDS,
           "shard_object_get with one context shared by the threads against a context "
           "per thread",
           ">= 0.90");
    lib.op = rawp.op = OP_CREATE;
    report("create-vs-raw-insert", &lib, &rawp, create_threads, 2, WRITE_ROUNDS,
           "shard_object_create with one shared context against an autocommit prepared "
           "INSERT of the same JSON",
           ">= 0.85");
    lib.op = rawp.op = OP_PATCH;
    report("patch-vs-raw-rmw", &lib, &rawp, patch_threads, 1, WRITE_ROUNDS,
           "shard_object_patch against START TRANSACTION, a prepared SELECT ... FOR "
           "UPDATE, the merge, a prepared UPDATE and COMMIT",
           ">= 0.85");

    for (int i = 0; i < MAX_THREADS; i++) {
        raw_close(&raw[i]);
        shard_ctx_free(per.ctxs[i]);
    }
    shard_map_free(map);
    shard_ctx_free(ctx);
    harness_stop(H);
    return 0;
}
