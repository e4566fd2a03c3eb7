/*
 * The rebalancer's planner: pure arithmetic over per-shard loads, kept
 * apart from measuring so that it can be tested without a server. See
 * shard_rebalance_plan(3) for the rules it follows.
 */
#ifndef LIBSHARD_REBALANCE_H
#define LIBSHARD_REBALANCE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct rebal_input {
    size_t npairs;          /* pairs of the map */
    const bool *considered; /* [npairs]: the plan may move from and to this pair */
    const bool *drained;    /* [npairs]: the plan empties this pair (considered too) */
    unsigned nshards;       /* ID shards 0..nshards-1 */
    const long *pair_of;    /* [nshards]: serving pair, -1 when unmapped */
    const double *load;     /* [nshards]: bytes or writes per second */
    double threshold;       /* fraction of the mean */
    unsigned max_moves;     /* 0: no limit */
} rebal_input;

typedef struct rebal_step {
    unsigned first, last;
    size_t from, to;
    bool drain;
} rebal_step;

/*
 * The moves, in order: first every drained pair emptied onto the emptiest
 * other pairs, then moves from the fullest pair to the emptiest while a
 * pair lies outside threshold x mean of the mean and the move narrows the
 * gap between its two pairs by more than threshold x mean. *steps is
 * shard__malloc'd (free() it), *nsteps its length. SHARD_EINVAL when a pair
 * is drained and no considered pair is left to take its shards.
 */
int rebal_compute(const rebal_input *in, rebal_step **steps, size_t *nsteps);

/* The loads of every pair under an assignment (pair_of, -1 unmapped). */
void rebal_pair_loads(size_t npairs, unsigned nshards, const long *pair_of, const double *load,
                      double *pair_load);

#endif
