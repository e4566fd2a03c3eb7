/*
 * Publishing a new map version as an edit of the stored one, with a
 * compare-and-swap on its version: the one loop that moves, failover and
 * the topology edits share (libshard(3), "The shard map").
 */
#ifndef LIBSHARD_PUBLISH_H
#define LIBSHARD_PUBLISH_H

#include "map.h"

/* An edit's answer (positive): the stored map needs no change. */
#define PUBLISH_UNCHANGED 1

/*
 * edit builds *next from the stored map cur (next->version must be
 * cur->version + 1), or returns PUBLISH_UNCHANGED, or fails with a
 * negative code: SHARD_ECONFLICT when the stored map changed in a way the
 * edit cannot build on. An edit's failure is final. The edit may run more
 * than once: a publish that loses the compare-and-swap (another change was
 * published first) loads the store again and edits again.
 */
typedef int (*publish_edit_fn)(const shard_map *cur, shard_map **next, void *arg);

/* *version (may be NULL): the version published, or the stored one when
 * edit said PUBLISH_UNCHANGED. A failure to read the store says so. */
int publish_edit(shard_store *store, publish_edit_fn edit, void *arg, uint64_t *version);
/* The same, saying in *unknown whether a failure may still have stored the
 * new map (its write sent, the answer lost); false: the stored map is not
 * the edit's (a failed read, a refusal, a write the store answered). */
int publish_edit_outcome(shard_store *store, publish_edit_fn edit, void *arg,
                         uint64_t *version, bool *unknown);

#endif
