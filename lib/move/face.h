/*
 * The move family's face to the rest of lib/: what failover and
 * rebalancing need to know about moves (libshard-move(7)). The family's
 * own header is move.h.
 */
#ifndef LIBSHARD_MOVE_FACE_H
#define LIBSHARD_MOVE_FACE_H

#include "../ctx.h"

/* journal.c: what unblocks a command that an unfinished move stands in the
 * way of, from its phase and whether a mover runs it right now (its lock
 * is held): "was interrupted ...: resume it (shardctl move resume N) or
 * abort it (...)", never abort after the flip, finish or revert for a
 * reversible move, "wait for it" for a running one. Into buf. */
void move_next_steps(uint64_t id, int phase, bool running, char *buf, size_t size);
/* journal.c: 0 when no unfinished move has `pair` as source or target;
 * else SHARD_EBUSY, "WHAT: move N (...) " and its next steps (then
 * "; BESIDES" unless NULL); a journal that cannot be read refuses too. */
int move_refuse_unfinished(shard_ctx *ctx, const shard_map *map, const char *pair,
                           const char *what, const char *besides);

#endif
