/*
 * tests/bench_fence.c: what a cut-over costs the map store. 200 contexts in
 * this process (a fleet's processes, shrunk) keep reading objects on the
 * shards that a move takes from one pair to the other; each reads the map
 * store when the fence sends it there (libshard-move(7), "The fence").
 *
 *   bench fenced-store-reads value=MAX mean=... peak_per_s=...
 *       store reads per context that the move caused, from its start to
 *       its end (shard_ctx_stats' libshard_map_reloads_asked_total: the
 *       reads calls asked for, the periodic refresh left out): the most
 *       any context made (value), the mean; beside them all reads (the
 *       refresh included: with a lease, one a second per context whether
 *       anything moves or not), the idle reads in a window as long after
 *       the move, and the peak store reads per second over all contexts (a
 *       sliding one-second window sampled every 50 ms). With the map's
 *       lease on (lease_ms 2000: the move marks, waits, fences) and, as a
 *       second line, with it off (fenced-store-reads-no-lease).
 *       Target: at most 3 per context.
 *
 * Figures only: exit status 1 means something failed outright (a read that
 * failed, a move that did not finish).
 */
#define BENCH_NAME "bench_fence"
#include "bench_util.h"

#include <pthread.h>
#include <stdatomic.h>

#define NCTX 200
#define THREADS 8
#define SHARDS 8
#define MOVED_FIRST 0
#define MOVED_LAST 3
#define LEASE_MS 2000
/* The store reads calls asked for (not the refresh thread's). */
#define ASKED "libshard_map_reloads_asked_total"

static harness *H;
static shard_ctx *Ctx[NCTX];
static uint64_t Ids[MOVED_LAST - MOVED_FIRST + 1];
static atomic_int Stop, Failed;
static char Failure[512];

/* Thread t reads through contexts t, t + THREADS, ... in turn, one object
 * of a moving shard each call. */
static void *reader(void *arg)
{
    unsigned t = (unsigned)(uintptr_t)arg, k = 0;

    while (!atomic_load(&Stop)) {
        for (unsigned c = t; c < NCTX && !atomic_load(&Stop); c += THREADS) {
            char *json = NULL;
            int rc = shard_object_get(Ctx[c], Ids[k++ % (sizeof Ids / sizeof *Ids)], &json, NULL);
            if (rc && !atomic_exchange(&Failed, 1))
                snprintf(Failure, sizeof Failure, "%s", shard_errmsg());
            shard_free(json);
        }
        sleep_s(0.002); /* a fleet's request rate, not a tight loop */
    }
    return NULL;
}

typedef struct sampler {
    pthread_t thread;
    double peak;       /* store reads in the busiest second */
    uint64_t at_start; /* the sum when sampling began */
} sampler;

static uint64_t total_reloads(void)
{
    uint64_t n = 0;
    for (int i = 0; i < NCTX; i++)
        n += bench_map_reloads(Ctx[i]);
    return n;
}

static void *sample(void *arg)
{
    sampler *s = arg;
    enum { WINDOW = 20 }; /* 20 samples of 50 ms: one second */
    uint64_t ring[WINDOW];
    unsigned n = 0;

    while (!atomic_load(&Stop)) {
        uint64_t cur = total_reloads();
        if (n >= WINDOW && (double)(cur - ring[n % WINDOW]) > s->peak)
            s->peak = (double)(cur - ring[n % WINDOW]);
        ring[n++ % WINDOW] = cur;
        sleep_s(0.05);
    }
    return NULL;
}

static void one_move(const char *name, const char *target, const char *how)
{
    shard_move_options mo = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_ctx *mover = NULL;
    pthread_t th[THREADS];
    uint64_t before[NCTX], asked[NCTX], idle1 = 0, max = 0, sum = 0, all = 0, allmax = 0;
    sampler s = {0};
    double t0, took;
    int rc;

    if (harness_open_admin(H, &mover, NULL))
        die("open: %s", shard_errmsg());
    atomic_store(&Stop, 0);
    for (unsigned t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, reader, (void *)(uintptr_t)t);
    sleep_s(1.0); /* every context has read, connected, settled */
    pthread_create(&s.thread, NULL, sample, &s);
    for (int i = 0; i < NCTX; i++) {
        before[i] = bench_map_reloads(Ctx[i]);
        asked[i] = bench_counter(Ctx[i], ASKED);
    }
    t0 = now();
    r = (shard_move_report)SHARD_MOVE_REPORT_INIT;
    rc = shard_move(mover, MOVED_FIRST, MOVED_LAST, target, &mo, &r, NULL);
    took = now() - t0;
    for (int i = 0; i < NCTX; i++) {
        uint64_t d = bench_counter(Ctx[i], ASKED) - asked[i];
        uint64_t a = bench_map_reloads(Ctx[i]) - before[i];
        sum += d;
        if (d > max)
            max = d;
        all += a;
        if (a > allmax)
            allmax = a;
    }
    /* The same length of time again, the move over: the idle reads. */
    idle1 = total_reloads();
    sleep_s(took);
    idle1 = total_reloads() - idle1;
    atomic_store(&Stop, 1);
    for (unsigned t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    pthread_join(s.thread, NULL);
    if (rc)
        die("move %d-%d -> %s: %s", MOVED_FIRST, MOVED_LAST, target, shard_errmsg());
    if (atomic_load(&Failed))
        die("a read failed during the move: %s", Failure);
    printf("bench %s value=%llu mean=%.2f peak_per_s=%.0f all_max=%llu all_mean=%.2f "
           "(store reads per context that one move of shards %d-%d to %s caused, with %d "
           "contexts in one process reading them (%s): the most any context made, the "
           "mean; peak store reads per second over all contexts; all reads, the periodic "
           "refresh included: the most, the mean; the move took %.1f s, pause %.1f ms; idle "
           "reads in as long after it: %.2f per context; target <= 3 per context)\n",
           name, (unsigned long long)max, (double)sum / NCTX, s.peak,
           (unsigned long long)allmax, (double)all / NCTX, MOVED_FIRST, MOVED_LAST, target,
           NCTX, how, took, r.pause_ms, (double)idle1 / NCTX);
    fflush(stdout);
    shard_ctx_free(mover);
}

int main(int argc, char **argv)
{
    shard_ctx *ctx = NULL;
    bool lease = false, plain = false;

    bench_select(argc, argv);
    lease = bench_selected("fenced-store-reads");
    plain = bench_selected("fenced-store-reads-no-lease");
    if (!lease && !plain)
        return 0;
    if (!(H = harness_start_ex(2, SHARDS, 4)))
        die("cannot start the servers");
    if (harness_schema_apply(H) || shard_ctx_open(&ctx, harness_map_path(H), NULL))
        die("setting up libshard: %s", shard_errmsg());
    for (unsigned sh = MOVED_FIRST; sh <= MOVED_LAST; sh++) {
        char js[256];
        int n = pin_json(js, sizeof js, sh, 1);
        if (shard_object_create(ctx, 1, sh, js, (size_t)n, &Ids[sh - MOVED_FIRST]))
            die("create: %s", shard_errmsg());
    }
    shard_ctx_free(ctx);
    /* The first move without the lease, the map as it starts; the second
     * back with it (a move marks only when the map has one). The shards
     * start on MySQL001. */
    for (int round = 0, on = 1; round < 2; round++) {
        bool with = round == 1;
        const char *target = on == 1 ? "MySQL002" : "MySQL001";
        if (with ? !lease : !plain)
            continue;
        if (with)
            bench_map_lease(H, LEASE_MS);
        for (int i = 0; i < NCTX; i++)
            if (shard_ctx_open(&Ctx[i], harness_map_path(H), NULL))
                die("shard_ctx_open: %s", shard_errmsg());
        if (with)
            one_move("fenced-store-reads", target,
                     "map lease_ms 2000: the move marks, waits the lease out, fences");
        else
            one_move("fenced-store-reads-no-lease", target,
                     "no lease: every read checks the fence");
        on = 3 - on; /* where the shards are now */
        for (int i = 0; i < NCTX; i++)
            shard_ctx_free(Ctx[i]);
    }
    return 0;
}
