/*
 * tests/bench_multiget.c: multi-get over 4 throwaway pairs started here.
 *
 *   bench multiget-vs-loop          a loop of 1000 shard_object_get / one
 *                                   shard_object_mget of the same 1000 IDs
 *   bench multiget-vs-slowest-host  the 1000-ID multi-get / the multi-get of
 *                                   only the slowest server's share of them
 *   bench multiget-vs-raw-fanout    libshard's statements for the same 1000
 *                                   IDs sent with raw libmariadb to every
 *                                   server at once (the faster of a thread
 *                                   per server and all sent from one thread
 *                                   before any answer is read) / the
 *                                   multi-get
 *
 * Every round draws 1000 new IDs and times every contender on them, in an
 * order that flips every round, so that noise on a shared machine falls on
 * all of them; medians are reported. The detail also gives what the machine
 * itself allows: libshard's own statements sent with raw libmariadb, one
 * thread per server, all at once and one by one, and the CPU time a
 * multi-get costs the client and the servers (4 servers and the client
 * share this machine's cores; separate hosts would not).
 *
 * Figures only: nothing here is a timed assertion. Exit status 1 means
 * something failed outright. BENCH_VERBOSE=1 prints every round on stderr;
 * arguments or BENCH_ONLY choose the lines to produce (see bench_util.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <libshard.h>
#include <mysql.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define BENCH_NAME "bench_multiget"
#include "bench_util.h"

#define PAIRS 4
#define SHARDS 16         /* 4 per pair */
#define PINS_PER_SHARD 1250
#define PIN_TYPE 1        /* "pins" in the harness map */
#define INSERT_BATCH 500  /* rows per multi-row INSERT while loading */
#define CONNECT_TIMEOUT 10 /* seconds, raw libmariadb connections */
#define BATCH 1000        /* IDs per multi-get */
#define ROUNDS 30
#define CPU_REPEAT 100    /* back-to-back multi-gets for the CPU figures */

static harness *H;
static bool Verbose; /* BENCH_VERBOSE=1: every round's figures on stderr */
static pid_t Master_pid[PAIRS];

/* ------------------------------------------------------------ helpers */

static double cpu_masters(void)
{
    double sum = 0;
    for (int p = 0; p < PAIRS; p++)
        sum += cpu_of(Master_pid[p]);
    return sum;
}

/* ------------------------------------------------------------ contenders */

static void check_items(const shard_item *items, const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (items[i].status != 0 || items[i].len == 0)
            die("multi-get: ID %llu: %s", (unsigned long long)ids[i],
                shard_strerror(items[i].status));
}

/* Milliseconds of one multi-get of ids[0..n). */
static double time_mget(shard_ctx *ctx, const uint64_t *ids, size_t n)
{
    shard_item *items = NULL;
    double t0 = now(), t;
    int rc = shard_object_mget(ctx, ids, n, &items);

    t = (now() - t0) * 1000;
    if (rc)
        die("shard_object_mget of %zu IDs: %s", n, shard_errmsg());
    check_items(items, ids, n);
    shard_items_free(items, n);
    return t;
}

/* Milliseconds of a loop of single gets of ids[0..n). */
static double time_loop(shard_ctx *ctx, const uint64_t *ids, size_t n)
{
    double t0 = now();

    for (size_t i = 0; i < n; i++) {
        char *json;
        size_t len;
        if (shard_object_get(ctx, ids[i], &json, &len))
            die("shard_object_get(%llu): %s", (unsigned long long)ids[i], shard_errmsg());
        shard_free(json);
    }
    return (now() - t0) * 1000;
}

/* BATCH distinct IDs drawn from all (partial Fisher-Yates), and each pair's share. */
static void draw(uint64_t *all, size_t nall, uint64_t *x, uint64_t *batch,
                 uint64_t share[PAIRS][BATCH], size_t nshare[PAIRS], const long *pair_of)
{
    memset(nshare, 0, PAIRS * sizeof *nshare);
    for (size_t i = 0; i < BATCH; i++) {
        size_t j = i + (size_t)(xorshift(x) % (nall - i));
        uint64_t t = all[i];
        long p;
        all[i] = all[j];
        all[j] = t;
        batch[i] = all[i];
        p = pair_of[shard_id_shard(batch[i])];
        share[p][nshare[p]++] = batch[i];
    }
}

/* ------------------------------------------------------------ raw baseline */

/*
 * The statements libshard sends (one per server: a UNION ALL of one IN-list
 * per shard table), sent with raw libmariadb by one thread per server at
 * once, or by one alone: what the machine itself allows, without libshard.
 * Each server's statement is built from its share of the IDs inside the
 * timed part, as an application must build it; the IDs' grouping by server
 * (draw) is outside it, as it is for libshard, which groups them again.
 *
 * share_sql() must build what build_batch() in lib/multiget.c builds (the
 * select list, the IN-lists by (shard, type), at most MGET_BATCH IDs a
 * statement): when the library's statement changes (a fence check, say),
 * change it here too, or the comparison stops being like for like.
 */
typedef struct raw_crew {
    const shard_map *map;
    const uint64_t *ids[PAIRS]; /* the round's share of each server */
    size_t nids[PAIRS];
    MYSQL *my[PAIRS];
    char *sql[PAIRS];
    size_t len[PAIRS];
    bool active[PAIRS];
    bool quit;
    pthread_barrier_t go, done;
    pthread_t thread[PAIRS];
    char err[PAIRS][256];
} raw_crew;

typedef struct raw_arg {
    raw_crew *c;
    int p;
} raw_arg;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* libshard's statement for ids (one pair's share), into *sql (malloc'd). */
static size_t share_sql(const shard_map *map, const uint64_t *ids, size_t n, char **sql)
{
    uint64_t *v = malloc(n * sizeof *v);
    size_t cap = 256 + n * 64, len = 0;
    char *q = malloc(cap);

    if (!v || !q)
        die("out of memory");
    memcpy(v, ids, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_u64);
    for (size_t i = 0; i < n;) {
        unsigned shard = shard_id_shard(v[i]), type = shard_id_type(v[i]);
        char db[32];
        if (shard_map_database(map, shard, db, sizeof db))
            die("shard_map_database(%u): %s", shard, shard_errmsg());
        len += (size_t)snprintf(q + len, cap - len,
                                "%sSELECT %u, %u, local_id, data FROM `%s`.`pins` WHERE "
                                "local_id IN (", len ? " UNION ALL " : "", shard, type, db);
        for (size_t j = i; i < n && shard_id_shard(v[i]) == shard; i++)
            len += (size_t)snprintf(q + len, cap - len, "%s%llu", i > j ? "," : "",
                                    (unsigned long long)shard_id_local(v[i]));
        len += (size_t)snprintf(q + len, cap - len, ")");
    }
    free(v);
    *sql = q;
    return len;
}

static void *raw_work(void *arg)
{
    raw_arg *a = arg;
    raw_crew *c = a->c;
    MYSQL *my = c->my[a->p];

    for (;;) {
        pthread_barrier_wait(&c->go);
        if (c->quit)
            return NULL;
        if (c->active[a->p]) {
            MYSQL_RES *res;
            MYSQL_ROW row;
            size_t bytes = 0;
            free(c->sql[a->p]);
            c->len[a->p] = share_sql(c->map, c->ids[a->p], c->nids[a->p], &c->sql[a->p]);
            if (mysql_real_query(my, c->sql[a->p], (unsigned long)c->len[a->p]) ||
                !(res = mysql_store_result(my))) {
                snprintf(c->err[a->p], sizeof c->err[a->p], "%s", mysql_error(my));
            } else {
                while ((row = mysql_fetch_row(res)))
                    bytes += mysql_fetch_lengths(res)[3];
                if (!bytes)
                    snprintf(c->err[a->p], sizeof c->err[a->p], "no rows");
                mysql_free_result(res);
            }
        }
        pthread_barrier_wait(&c->done);
    }
}

/* Milliseconds until every active statement has been answered. */
static double raw_round(raw_crew *c)
{
    double t0 = now(), t;

    pthread_barrier_wait(&c->go);
    pthread_barrier_wait(&c->done);
    t = (now() - t0) * 1000;
    for (int p = 0; p < PAIRS; p++)
        if (c->err[p][0])
            die("raw multi-row SELECT on pair %d: %s", p + 1, c->err[p]);
    return t;
}

static void raw_start(raw_crew *c)
{
    static raw_arg args[PAIRS];

    pthread_barrier_init(&c->go, NULL, PAIRS + 1);
    pthread_barrier_init(&c->done, NULL, PAIRS + 1);
    for (int p = 0; p < PAIRS; p++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", 2 * p + 1);
        c->my[p] = raw_connect(harness_port(H, name), CONNECT_TIMEOUT, false);
        args[p] = (raw_arg){c, p};
        if (pthread_create(&c->thread[p], NULL, raw_work, &args[p]) != 0)
            die("pthread_create failed");
    }
}

static void raw_stop(raw_crew *c)
{
    c->quit = true;
    pthread_barrier_wait(&c->go);
    for (int p = 0; p < PAIRS; p++) {
        pthread_join(c->thread[p], NULL);
        mysql_close(c->my[p]);
        free(c->sql[p]);
    }
    pthread_barrier_destroy(&c->go);
    pthread_barrier_destroy(&c->done);
}

/*
 * Milliseconds until every statement has been answered, sent the other way
 * an application can: all from this thread (the crew waits at its barrier),
 * each sent before any answer is read, then the answers read in turn.
 */
static double raw_piped(raw_crew *c)
{
    double t0 = now();

    for (int p = 0; p < PAIRS; p++) {
        free(c->sql[p]);
        c->len[p] = share_sql(c->map, c->ids[p], c->nids[p], &c->sql[p]);
        if (mysql_send_query(c->my[p], c->sql[p], (unsigned long)c->len[p]))
            die("raw pipelined SELECT on pair %d: %s", p + 1, mysql_error(c->my[p]));
    }
    for (int p = 0; p < PAIRS; p++) {
        MYSQL_RES *res;
        MYSQL_ROW row;
        size_t bytes = 0;
        if (mysql_read_query_result(c->my[p]) || !(res = mysql_store_result(c->my[p])))
            die("raw pipelined SELECT on pair %d: %s", p + 1, mysql_error(c->my[p]));
        while ((row = mysql_fetch_row(res)))
            bytes += mysql_fetch_lengths(res)[3];
        mysql_free_result(res);
        if (!bytes)
            die("raw pipelined SELECT on pair %d: no rows", p + 1);
    }
    return (now() - t0) * 1000;
}

/* Times of the round's statements: all servers at once, a thread each
 * (*all) and from one thread (*piped), in an order that flips with k; then
 * each server alone. */
static void raw_times(raw_crew *c, const shard_map *map, uint64_t share[PAIRS][BATCH],
                      const size_t nshare[PAIRS], int k, double *all, double *piped,
                      double alone[PAIRS])
{
    c->map = map;
    for (int p = 0; p < PAIRS; p++) {
        c->ids[p] = share[p];
        c->nids[p] = nshare[p];
        c->active[p] = true;
    }
    if (k % 2 == 0) {
        *all = raw_round(c);
        *piped = raw_piped(c);
    } else {
        *piped = raw_piped(c);
        *all = raw_round(c);
    }
    for (int p = 0; p < PAIRS; p++) {
        for (int q = 0; q < PAIRS; q++)
            c->active[q] = q == p;
        alone[p] = raw_round(c);
    }
}

/* ------------------------------------------------------------ the run */

/* Every round's figures, in milliseconds. */
typedef struct rounds {
    double mget[ROUNDS], loop[ROUNDS], share[PAIRS][ROUNDS], sum[ROUNDS];
    double raw[ROUNDS], piped[ROUNDS], raw_alone[PAIRS][ROUNDS];
    double r_loop[ROUNDS], r_vs_raw[ROUNDS], r_raw_vs[ROUNDS], r_piped_vs[ROUNDS];
} rounds;

/*
 * The slowest server: the pair whose share alone has the highest median time.
 * (Not each round's slowest share: that would be whichever share a burst of
 * noise hit in that round.) Its median, and its index in *which.
 */
static double slowest(double share[PAIRS][ROUNDS], int *which)
{
    double worst = 0;

    for (int p = 0; p < PAIRS; p++) {
        double m = median(share[p], ROUNDS);
        if (m > worst) {
            worst = m;
            *which = p;
        }
    }
    return worst;
}

/* Pins on every shard, loaded on each master straight into its tables; the
 * IDs into all, and which pair (index in the map) serves each shard. */
static size_t load(const shard_map *map, uint64_t *all, long pair_of[SHARDS])
{
    size_t nall = 0;

    for (int p = 0; p < PAIRS; p++) {
        char master[16], standby[16], path[600];
        MYSQL *my;

        snprintf(master, sizeof master, "s%d", 2 * p + 1);
        snprintf(standby, sizeof standby, "s%d", 2 * p + 2);
        snprintf(path, sizeof path, "%s/%s/mariadbd.pid", harness_dir(H), master);
        Master_pid[p] = read_pid(path);
        my = raw_connect(harness_port(H, master), CONNECT_TIMEOUT, false);
        for (unsigned s = 0; s < SHARDS; s++) {
            const char *pname = NULL;
            char db[32], q[128];
            int n;

            if (shard_map_pair_of(map, s, &pname))
                die("shard_map_pair_of(%u): %s", s, shard_errmsg());
            if (strcmp(pname, shard_map_pair_name(map, (size_t)p)) != 0)
                continue;
            pair_of[s] = p;
            if (shard_map_database(map, s, db, sizeof db))
                die("shard_map_database(%u): %s", s, shard_errmsg());
            load_pins(my, db, s, PINS_PER_SHARD, INSERT_BATCH);
            for (unsigned l = 1; l <= PINS_PER_SHARD; l++)
                if (shard_id_make(s, PIN_TYPE, l, &all[nall++]))
                    die("shard_id_make(%u, %u, %u) failed", s, PIN_TYPE, l);
            /* Warm the buffer pool. */
            n = snprintf(q, sizeof q, "SELECT SUM(LENGTH(data)) FROM `%s`.`pins`", db);
            raw_exec(my, q, (size_t)n);
        }
        mysql_close(my);
        wait_standby(H, master, 2 * p + 1, standby);
    }
    if (nall != SHARDS * PINS_PER_SHARD)
        die("the map does not spread %d shards over %d pairs", SHARDS, PAIRS);
    return nall;
}

/* Round k: new IDs, and every contender on them, in an order that flips. */
static void run_round(rounds *r, int k, shard_ctx *ctx, const shard_map *map, raw_crew *rc,
                      uint64_t *all, size_t nall, uint64_t *x, const long *pair_of)
{
    static uint64_t batch[BATCH], share[PAIRS][BATCH];
    size_t nshare[PAIRS];
    double raw_alone[PAIRS];

    draw(all, nall, x, batch, share, nshare, pair_of);
    if (k % 2 == 0) {
        r->mget[k] = time_mget(ctx, batch, BATCH);
        for (int p = 0; p < PAIRS; p++)
            r->share[p][k] = time_mget(ctx, share[p], nshare[p]);
        raw_times(rc, map, share, nshare, k, &r->raw[k], &r->piped[k], raw_alone);
        r->loop[k] = time_loop(ctx, batch, BATCH);
    } else {
        r->loop[k] = time_loop(ctx, batch, BATCH);
        raw_times(rc, map, share, nshare, k, &r->raw[k], &r->piped[k], raw_alone);
        for (int p = PAIRS - 1; p >= 0; p--)
            r->share[p][k] = time_mget(ctx, share[p], nshare[p]);
        r->mget[k] = time_mget(ctx, batch, BATCH);
    }
    r->sum[k] = 0;
    for (int p = 0; p < PAIRS; p++)
        r->sum[k] += r->share[p][k];
    r->r_loop[k] = r->loop[k] / r->mget[k];
    r->r_vs_raw[k] = r->mget[k] / r->raw[k];
    r->r_raw_vs[k] = r->raw[k] / r->mget[k];
    r->r_piped_vs[k] = r->piped[k] / r->mget[k];
    for (int p = 0; p < PAIRS; p++)
        r->raw_alone[p][k] = raw_alone[p];
    if (Verbose)
        fprintf(stderr, "round %d: mget %.2f ms, loop %.2f ms, shares %.2f %.2f %.2f %.2f ms "
                "(%zu %zu %zu %zu IDs); raw all %.2f ms (one thread %.2f ms), alone %.2f %.2f %.2f "
                "%.2f ms\n", k,
                r->mget[k], r->loop[k], r->share[0][k], r->share[1][k], r->share[2][k],
                r->share[3][k], nshare[0], nshare[1], nshare[2], nshare[3], r->raw[k], r->piped[k],
                raw_alone[0], raw_alone[1], raw_alone[2], raw_alone[3]);
}

/* CPU milliseconds (this process, the masters) per multi-get of BATCH IDs
 * (all pairs) or of one pair's share of them, over CPU_REPEAT runs. */
static void cpu_per_mget(shard_ctx *ctx, uint64_t *all, size_t nall, uint64_t *x,
                         const long *pair_of, bool one_share, double *client, double *servers)
{
    static uint64_t batch[BATCH], share[PAIRS][BATCH];
    size_t nshare[PAIRS];
    double c0 = cpu_self(), s0 = cpu_masters();

    for (int k = 0; k < CPU_REPEAT; k++) {
        draw(all, nall, x, batch, share, nshare, pair_of);
        if (one_share)
            time_mget(ctx, share[0], nshare[0]);
        else
            time_mget(ctx, batch, BATCH);
    }
    *client = (cpu_self() - c0) * 1000 / CPU_REPEAT;
    *servers = (cpu_masters() - s0) * 1000 / CPU_REPEAT;
}

int main(int argc, char **argv)
{
    static uint64_t all[SHARDS * PINS_PER_SHARD];
    static rounds r;
    static raw_crew rc;
    long pair_of[SHARDS];
    shard_ctx *ctx = NULL;
    shard_map *map = NULL;
    uint64_t x = 88172645463325252ULL;
    double c_all, s_all, c_one, s_one;
    size_t nall;

    Verbose = getenv("BENCH_VERBOSE") && *getenv("BENCH_VERBOSE") == '1';
    bench_select(argc, argv);
    if (!bench_selected("multiget-vs-loop") && !bench_selected("multiget-vs-slowest-host") &&
        !bench_selected("multiget-vs-raw-fanout"))
        return 0;
    if (!(H = harness_start_ex(PAIRS, SHARDS, 4)))
        die("cannot start the servers");
    bench_map_lease(H, 10000); /* reads skip the fence: the raw side has none */
    if (harness_schema_apply(H) || shard_ctx_open(&ctx, harness_map_path(H), NULL) ||
        shard_ctx_map(ctx, &map))
        die("setting up libshard: %s", shard_errmsg());
    nall = load(map, all, pair_of);

    /* Warm-up: code paths and every pool. */
    cpu_per_mget(ctx, all, nall, &x, pair_of, false, &c_all, &s_all);
    raw_start(&rc);
    for (int k = 0; k < ROUNDS; k++)
        run_round(&r, k, ctx, map, &rc, all, nall, &x, pair_of);
    raw_stop(&rc);
    /* What the wall times are made of, against what 2 cores allow. */
    cpu_per_mget(ctx, all, nall, &x, pair_of, false, &c_all, &s_all);
    cpu_per_mget(ctx, all, nall, &x, pair_of, true, &c_one, &s_one);

    int sp = 0, rp = 0;
    double t_mget = median(r.mget, ROUNDS), t_slow = slowest(r.share, &sp);
    double t_raw = median(r.raw, ROUNDS), t_raw_slow = slowest(r.raw_alone, &rp);

    if (bench_selected("multiget-vs-loop"))
        printf("bench multiget-vs-loop ratio=%.1f (%d IDs over %d pairs: loop of gets %.1f ms "
               "= %.0f gets/s, one multi-get %.2f ms; medians of %d rounds; target >= 20)\n",
               median(r.r_loop, ROUNDS), BATCH, PAIRS, median(r.loop, ROUNDS),
               BATCH * 1000 / median(r.loop, ROUNDS), t_mget, ROUNDS);
    if (bench_selected("multiget-vs-slowest-host"))
        printf("bench multiget-vs-slowest-host ratio=%.2f (%d IDs over %d pairs in %.2f ms; "
               "the slowest server's share alone (%s, ~%d IDs) %.2f ms; shares alone "
               "%.2f/%.2f/%.2f/%.2f ms, sum %.2f ms; libshard's statements through raw "
               "libmariadb, a thread per server: all at once %.2f ms (the multi-get takes %.2fx "
               "that), slowest alone %.2f ms, ratio %.2f; CPU per multi-get, client+servers: "
               "all %.2f+%.2f ms, one share %.2f+%.2f ms, on %ld cores; medians of %d rounds; "
               "target <= 1.5)\n",
               t_mget / t_slow, BATCH, PAIRS, t_mget, shard_map_pair_name(map, (size_t)sp),
               BATCH / PAIRS, t_slow, median(r.share[0], ROUNDS), median(r.share[1], ROUNDS),
               median(r.share[2], ROUNDS), median(r.share[3], ROUNDS), median(r.sum, ROUNDS),
               t_raw, median(r.r_vs_raw, ROUNDS), t_raw_slow, t_raw / t_raw_slow, c_all, s_all,
               c_one, s_one, sysconf(_SC_NPROCESSORS_ONLN), ROUNDS);
    /* The baseline is the faster of the two ways an application could send
     * the statements itself (by their medians). */
    double t_piped = median(r.piped, ROUNDS);
    bool piped_best = t_piped < t_raw;
    if (bench_selected("multiget-vs-raw-fanout"))
        printf("bench multiget-vs-raw-fanout ratio=%.2f (%d IDs over %d pairs: libshard's "
               "statements (one per server, as lib/multiget.c builds them) through raw "
               "libmariadb, all at once, the faster of a thread per server %.2f ms and all "
               "sent from one thread before any answer is read %.2f ms / shard_object_mget "
               "%.2f ms; medians of %d interleaved rounds (ratio of the medians %.2f); CPU per "
               "multi-get, client+servers %.2f+%.2f ms, on %ld cores; target >= 0.95)\n",
               median(piped_best ? r.r_piped_vs : r.r_raw_vs, ROUNDS), BATCH, PAIRS, t_raw,
               t_piped, t_mget, ROUNDS, (piped_best ? t_piped : t_raw) / t_mget, c_all, s_all,
               sysconf(_SC_NPROCESSORS_ONLN));
    fflush(stdout);

    shard_map_free(map);
    shard_ctx_free(ctx);
    harness_stop(H);
    return 0;
}
