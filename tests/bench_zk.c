/*
 * tests/bench_zk.c: the ZooKeeper map store against a real ZooKeeper server
 * (tests/zk.sh). Prints
 *
 *   bench zk-publish-to-swap-ms value=WORST median=... worst=...
 *       200 contexts in this process on one zk:// store; each of ROUNDS
 *       publishes (shard_store_publish, its session already up) is timed from
 *       the call to each context's swap, which its log callback sees on the
 *       ZooKeeper client's thread. value is the worst delay of all.
 *   bench store-reads-per-context-per-hour store=zk value=...
 *   bench store-reads-per-context-per-hour store=file value=...
 *       reads of the store per context (shard_ctx_stats' map reloads, the
 *       first read at open not counted) while nothing is published, over
 *       WINDOW seconds, per hour: the ZooKeeper store at its default (a
 *       watch), the file store at its default refresh_interval_ms (30000),
 *       measured with a 300 ms interval and scaled to 30000 ms.
 *
 * The contexts need no database server: they load and swap maps, and never
 * connect to the pairs the map names.
 */
#define BENCH_NAME "bench_zk"
#include "bench_util.h"
#include "zk_util.h"

#include <jansson.h>
#include <libshard.h>
#include <pthread.h>
#include <stdatomic.h>

#define NCTX 200
#define ROUNDS 10
#define WINDOW 5.0

typedef struct seen {
    _Atomic unsigned long long version;
    _Atomic double at;
} seen;

static seen seen_by[NCTX];

static void on_log(int level, const char *message, void *payload)
{
    seen *s = payload;
    unsigned long long v;

    (void)level;
    if (sscanf(message, "shard map version %llu replaces", &v) == 1) {
        atomic_store(&s->at, now());
        atomic_store(&s->version, v);
    }
}

static shard_map *make_map(uint64_t version)
{
    char text[1024];
    shard_map *m = NULL;

    snprintf(text, sizeof text,
             "{\"version\": %llu, \"open_shards\": 64, \"database_format\": \"db%%05d\","
             " \"credentials\": {\"user\": \"app\", \"password_env\": \"BENCH_ZK_PASSWORD\"},"
             " \"objects\": {\"pins\": 1}, \"mappings\": {},"
             " \"pairs\": {\"MySQL001\": {\"master\": \"127.0.0.1:1\", \"standby\": \"127.0.0.1:2\"},"
             "            \"MySQL002\": {\"master\": \"127.0.0.1:3\", \"standby\": \"127.0.0.1:4\"}},"
             " \"id_shards\": [{\"range\": [0, 31], \"pair\": \"MySQL001\"},"
             "               {\"range\": [32, 63], \"pair\": \"MySQL002\"}]}",
             (unsigned long long)version);
    if (shard_map_parse(&m, text, strlen(text)))
        die("map: %s", shard_errmsg());
    return m;
}

static shard_ctx *open_ctx(const char *loc, unsigned refresh_ms, seen *s)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;

    o.log = on_log;
    o.log_payload = s;
    o.log_level = SHARD_LOG_INFO;
    if (refresh_ms)
        o.refresh_interval_ms = refresh_ms;
    if (shard_ctx_open(&ctx, loc, &o))
        die("shard_ctx_open %s: %s", loc, shard_errmsg());
    return ctx;
}

/* Reads per context per hour over WINDOW idle seconds, scaled by `scale`. */
static double idle_reads(shard_ctx **ctx, int n, double scale)
{
    uint64_t before = 0, after = 0;

    for (int i = 0; i < n; i++)
        before += bench_map_reloads(ctx[i]);
    sleep_s(WINDOW);
    for (int i = 0; i < n; i++)
        after += bench_map_reloads(ctx[i]);
    return (double)(after - before) / n * (3600.0 / WINDOW) * scale;
}

static void publish_to_swap(zk_servers *zk)
{
    char *loc = zk_location(zk, "/bench/maps", NULL);
    shard_ctx **ctx = calloc(NCTX, sizeof *ctx);
    double *delay = calloc((size_t)NCTX * ROUNDS, sizeof *delay), pub[ROUNDS], worst = 0;
    shard_store *st = NULL;
    shard_map *m;
    int nd = 0;

    if (shard_store_open(&st, loc))
        die("store: %s", shard_errmsg());
    m = make_map(1);
    if (shard_store_publish(st, m, 0))
        die("publish: %s", shard_errmsg());
    shard_map_free(m);
    for (int i = 0; i < NCTX; i++)
        ctx[i] = open_ctx(loc, 0, &seen_by[i]);
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t v = (uint64_t)r + 2;
        double t0, t1, give_up;

        m = make_map(v);
        sleep_s(0.2); /* the previous round's reads are over */
        t0 = now();
        if (shard_store_publish(st, m, v - 1))
            die("publish: %s", shard_errmsg());
        t1 = now();
        shard_map_free(m);
        pub[r] = (t1 - t0) * 1000;
        give_up = t0 + 60;
        for (int i = 0; i < NCTX; i++) {
            while (atomic_load(&seen_by[i].version) < v) {
                if (now() > give_up)
                    die("context %d did not take version %llu in 60 s", i,
                        (unsigned long long)v);
                sleep_s(0.0005);
            }
            delay[nd] = (atomic_load(&seen_by[i].at) - t0) * 1000;
            if (delay[nd] > worst)
                worst = delay[nd];
            nd++;
        }
    }
    if (bench_selected("zk-publish-to-swap-ms"))
        printf("bench zk-publish-to-swap-ms value=%.1f median=%.1f worst=%.1f (%d contexts in "
               "one process, %d publishes through shard_store_publish: from the call to each "
               "context's swap on its ZooKeeper thread; the publish itself, ZooKeeper's "
               "commit, took %.1f ms median)\n",
               worst, median(delay, nd), worst, NCTX, ROUNDS, median(pub, ROUNDS));
    if (bench_selected("store-reads-per-context-per-hour"))
        printf("bench store-reads-per-context-per-hour store=zk value=%.1f (%d contexts "
               "watching, nothing published for %.0f s: reads per context, per hour)\n",
               idle_reads(ctx, NCTX, 1.0), NCTX, WINDOW);
    fflush(stdout);
    for (int i = 0; i < NCTX; i++)
        shard_ctx_free(ctx[i]);
    shard_store_free(st);
    free(ctx);
    free(delay);
    free(loc);
}

static void file_reads(void)
{
    enum { N = 20, MS = 300 };
    char dir[] = "/tmp/libshard-bench-zk.XXXXXX", path[64];
    shard_ctx *ctx[N];
    shard_store *st = NULL;
    shard_map *m = make_map(1);
    static seen unused[N];

    if (!mkdtemp(dir))
        die("mkdtemp: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/map.json", dir);
    if (shard_store_open(&st, path) || shard_store_publish(st, m, 0))
        die("file store: %s", shard_errmsg());
    for (int i = 0; i < N; i++)
        ctx[i] = open_ctx(path, MS, &unused[i]);
    printf("bench store-reads-per-context-per-hour store=file value=%.1f (%d contexts, "
           "measured over %.0f s at refresh_interval_ms=%d and scaled to the default 30000)\n",
           idle_reads(ctx, N, MS / 30000.0), N, WINDOW, MS);
    for (int i = 0; i < N; i++)
        shard_ctx_free(ctx[i]);
    shard_store_free(st);
    shard_map_free(m);
    bench_rm_tree(dir);
}

int main(int argc, char **argv)
{
    zk_servers *zk;

    bench_select(argc, argv);
    if (!bench_selected("zk-publish-to-swap-ms") &&
        !bench_selected("store-reads-per-context-per-hour"))
        return 0;
    setenv("BENCH_ZK_PASSWORD", "unused", 1);
    if (!(zk = zk_start(1)))
        die("ZooKeeper did not start");
    publish_to_swap(zk);
    zk_stop(zk);
    if (bench_selected("store-reads-per-context-per-hour"))
        file_reads();
    shard_global_cleanup();
    return 0;
}
