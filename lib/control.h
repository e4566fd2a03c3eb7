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
