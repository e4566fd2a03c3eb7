/*
 * The move family's face to the rest of lib/: what failover and
 * rebalancing need to know about moves (libshard-move(7)). The family's
 * own header is move.h.
 */
#ifndef LIBSHARD_MOVE_FACE_H
#define LIBSHARD_MOVE_FACE_H

#include "../ctx.h"

/* journal.c: 1 (and the move's id in *id) when an unfinished move has
 * `pair` as source or target, 0 when none has, or a negative code when a
 * journal could not be read. */
int move_unfinished_on(shard_ctx *ctx, const shard_map *map, const char *pair,
                       uint64_t *id);

#endif
