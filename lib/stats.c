/*
 * The context's counters (shard_ctx_stats(3)): a few relaxed atomic
 * increments per call, no lock. Their text is built in stats_text.c.
 */
#include "internal.h"
#include "stats.h"

/* Upper bounds of the duration buckets, seconds (stats_text.c prints them);
 * the last bucket is +Inf. */
static const double bounds[STATS_BUCKETS - 1] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};

static unsigned code_slot(int rc)
{
    return rc < 0 && rc > -(STATS_CODES - 1) ? (unsigned)-rc : STATS_CODES - 1;
}

/* The calling thread's stripe: a multiplicative hash of a thread-local
 * address, whose top bits depend on all of its bits (threads' TLS blocks
 * lie a stack apart, so the low bits alone would collide). */
static unsigned stripe(void)
{
    static _Thread_local char anchor;
    uint64_t a = (uint64_t)(uintptr_t)&anchor;

    return (unsigned)((a * 0x9E3779B97F4A7C15ULL) >> (64 - STATS_STRIPE_BITS));
}

void stats_call(shard_stats *st, stats_op op, double started, int rc)
{
    stats_timing *t;
    double d;
    unsigned b = 0;

    if (op == STATS_NONE)
        return;
    d = now_seconds() - started;
    if (d < 0)
        d = 0;
    while (b < STATS_BUCKETS - 1 && d > bounds[b])
        b++;
    t = &st->timing[stripe()][op];
    stats_add(&t->buckets[b]);
    atomic_fetch_add_explicit(&t->sum_ns, (uint64_t)(d * 1e9), memory_order_relaxed);
    if (rc)
        stats_add(&st->errors[op][code_slot(rc)]);
}
