/*
 * The context's counters (shard_ctx_stats(3)): calls, errors and durations
 * per public call, retries, fence waits and map reads. The hot path pays a
 * few relaxed atomic increments and no lock; the text is built from them
 * when asked.
 */
#ifndef LIBSHARD_STATS_H
#define LIBSHARD_STATS_H

#include <stdatomic.h>
#include <stdint.h>

/* The calls counted, named after the public function minus "shard_". */
typedef enum stats_op {
    STATS_NONE = 0, /* not counted (an inner step of a counted call) */
    STATS_OBJECT_CREATE,
    STATS_OBJECT_GET,
    STATS_OBJECT_UPDATE,
    STATS_OBJECT_PATCH,
    STATS_OBJECT_DELETE,
    STATS_OBJECT_MGET,
    STATS_MAPPING_ADD,
    STATS_MAPPING_REMOVE,
    STATS_MAPPING_LIST,
    STATS_MAPPING_COUNT,
    STATS_KV_PUT,
    STATS_KV_PUT_NEW,
    STATS_KV_GET,
    STATS_KV_DELETE,
    STATS_TXN_BEGIN,
    STATS_TXN_OBJECT_CREATE,
    STATS_TXN_OBJECT_GET,
    STATS_TXN_OBJECT_PUT,
    STATS_TXN_MAPPING_ADD,
    STATS_TXN_COMMIT,
    STATS_SCATTER_SCAN,
    STATS_SCATTER_COUNT,
    STATS_NOPS
} stats_op;

/* Duration buckets: 14 upper bounds (seconds) and +Inf. */
#define STATS_BUCKETS 15
/* Error codes 0..-19 by their negation; anything else counts in the last slot. */
#define STATS_CODES 21

/* The per-call counters are kept in this many stripes, a thread adding to
 * one of them (by a hash of its address), so that threads calling at once
 * seldom share a cache line; the text adds the stripes up. */
#define STATS_STRIPE_BITS 3
#define STATS_STRIPES (1u << STATS_STRIPE_BITS)

typedef _Atomic uint64_t stats_counter;

/* One op's calls by duration bucket (not cumulative; their sum is the
 * op's call count, so calls_total and the histogram always agree) and
 * their total duration: 128 bytes, two cache lines. */
typedef struct stats_timing {
    stats_counter buckets[STATS_BUCKETS];
    stats_counter sum_ns;
} stats_timing;

typedef struct shard_stats {
    stats_timing timing[STATS_STRIPES][STATS_NOPS];
    stats_counter errors[STATS_NOPS][STATS_CODES]; /* rare: not striped */
    stats_counter retries;     /* attempts run again after a transient failure */
    stats_counter fence_waits; /* calls that waited for a new map (fenced/moved shard) */
    stats_counter map_reloads; /* reads of the map store */
    stats_counter map_reloads_asked; /* of those, asked for by a call (exec_reload) */
} shard_stats;

static inline void stats_add(stats_counter *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/*
 * Count one call of `op` that started at `started` (now_seconds()) and
 * returned rc: one clock read and two or three relaxed increments.
 * STATS_NONE does nothing.
 */
void stats_call(shard_stats *st, stats_op op, double started, int rc);

#endif
