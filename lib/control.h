/*
 * The control schema: the database libshard keeps on every master for its
 * own rows (libshard-move(7)): the fence table the hot path reads, and the
 * move journal. Every statement names them through these macros.
 */
#ifndef LIBSHARD_CONTROL_H
#define LIBSHARD_CONTROL_H

#include "internal.h"

#define CONTROL_DB "libshard_control"
/* The fence rows (one per moved database), on every server, unlogged. */
#define FENCE_TABLE CONTROL_DB ".fence"
/* A fence row's `fenced`: 0 open; FENCE_ON fenced by a move; FENCE_FLIPPED
 * still fenced, and the map that routes the database elsewhere is in the
 * store (the mover writes it after the flip's publish landed), so a fenced
 * context reads the store once instead of polling it (libshard-move(7),
 * "The fence"). Every other nonzero value means fenced too. */
#define FENCE_ON 1
#define FENCE_FLIPPED 2
/* The move journal, on a move's target master. */
#define MOVES_TABLE CONTROL_DB ".moves"

/* The phases in which a move is over (nothing of it runs any more), as a
 * test and as the journal's numbers for "phase IN ..." / "NOT IN ...",
 * both from the public SHARD_MOVE_* numbers. */
#define CONTROL_STR_(x) #x
#define CONTROL_STR(x) CONTROL_STR_(x)
#define MOVE_OVER_SQL                                                              \
    "(" CONTROL_STR(SHARD_MOVE_DONE) ", " CONTROL_STR(SHARD_MOVE_ABORTED) ", "     \
        CONTROL_STR(SHARD_MOVE_REVERTED) ")"

static inline bool move_over(int phase)
{
    return phase == SHARD_MOVE_DONE || phase == SHARD_MOVE_ABORTED ||
           phase == SHARD_MOVE_REVERTED;
}

#endif
