/*
 * The map lease, the mover's side (libshard-move(7), "The lease"): a move
 * marks its shards "moving" in the map when it plans, and fences only once
 * every context that might still skip the fence check on them (its lease
 * on an older, unmarked map) has run out of lease.
 */
#include "move.h"

/* Beyond the lease itself: clocks that run up to 10% apart; the bound of a
 * write sent under the lease (its map's lease_ms: the server aborts it
 * that long after it started, sql_write_bound); and this much for a
 * statement sent just before a lease ended to reach the server, and for
 * the commit of a write that was past its last abort check at its bound. */
#define LEASE_DRIFT 1.1
#define LEASE_MARGIN_MS 500.0

/* How long after a marking publish the fence may go up, for a longest
 * lease (and write bound) of lease_ms. */
static double lease_wait_ms(unsigned lease_ms)
{
    return lease_ms ? lease_ms * LEASE_DRIFT + lease_ms + LEASE_MARGIN_MS : 0;
}

static bool all_marked(const shard_map *map, unsigned first, unsigned last)
{
    for (unsigned s = first; s <= last; s++)
        if (!map_shard_moving(map, s))
            return false;
    return true;
}

static bool any_marked(const shard_map *map, unsigned first, unsigned last)
{
    for (size_t i = 0; i < map->nmoving; i++)
        if (map->moving[i].lo >= first && map->moving[i].hi <= last)
            return true;
    return false;
}

typedef struct mark_edit {
    const mv *m;
    bool on;
    unsigned lease_ms; /* the longest lease of the maps the edit saw */
    bool changed;      /* the last try published a new map */
} mark_edit;

static int mark_fn(const shard_map *cur, shard_map **next, void *arg)
{
    mark_edit *e = arg;
    unsigned l = cur->lease_max_ms > cur->lease_ms ? cur->lease_max_ms : cur->lease_ms;

    if (l > e->lease_ms)
        e->lease_ms = l;
    /* A map without a lease (none now, none that a context may still hold:
     * lease_max_ms) has no context skipping the check: nothing to mark.
     * Should one be published before the flip, the flip refuses to go
     * without the mark (move_publish) and the cut-over is tried again. */
    e->changed = !(e->on ? !l || all_marked(cur, e->m->first, e->m->last)
                         : !any_marked(cur, e->m->first, e->m->last));
    if (!e->changed)
        return PUBLISH_UNCHANGED;
    return map_mark_moving(cur, e->m->first, e->m->last, e->on, cur->version + 1, next);
}

int move_mark(mv *m, bool on)
{
    mark_edit e = {m, on, 0, false};
    uint64_t version = 0;
    int rc = publish_edit(m->ctx->store, mark_fn, &e, &version);

    if (rc)
        return shard__fail_prefix(rc, "%s shards %u-%u as moving in the map: ",
                                 on ? "marking" : "unmarking", m->first, m->last);
    if (on && (e.changed || !m->lease_ready)) {
        /* From here, a context that reads the store sees the mark: the
         * ones that did not may skip the check for one more lease. A run
         * that finds the mark already there (resumed) cannot tell when it
         * was published, and counts from now. */
        double ready = now_seconds() + lease_wait_ms(e.lease_ms) / 1000.0;
        if (ready > m->lease_ready)
            m->lease_ready = ready;
        if (e.lease_ms > m->lease_ms)
            m->lease_ms = e.lease_ms;
    }
    return 0;
}

int move_lease_wait(mv *m)
{
    double ms;
    int rc;

    /* The mark is checked again (a resumed run, or a map published by hand
     * without it, is marked anew): the wait counts from the latest marking. */
    if ((rc = move_mark(m, true)))
        return rc;
    ms = (m->lease_ready - now_seconds()) * 1000.0;
    if (ms <= 0)
        return 0;
    ctx_log(m->ctx, SHARD_LOG_INFO, "move %llu: waiting %.0f ms before the fence, for the "
            "map leases of contexts that have not read the mark yet (lease %u ms x %.1f) "
            "and the writes they sent bounded (%u ms), + %.0f ms",
            (unsigned long long)m->id, ms, m->lease_ms, LEASE_DRIFT, m->lease_ms,
            LEASE_MARGIN_MS);
    sleep_ms(ms);
    return 0;
}

void move_unmark(mv *m)
{
    shard_errsave saved;

    shard__error_save(&saved, 0);
    if (move_mark(m, false))
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: %s (calls on those shards keep checking "
                "the fence until shardctl move resume %llu, or a later move of them, clears "
                "the mark)",
                (unsigned long long)m->id, shard_errmsg(), (unsigned long long)m->id);
    shard__error_restore(&saved);
}

/* An unfinished move, of rows[0..n), that may still fence a shard of
 * lo..hi (any but one left dropping, and but self, the sweeping move,
 * which marks its own range right after): its id, or 0. */
static uint64_t carrier_of(const move_row *rows, size_t n, unsigned lo, unsigned hi,
                           uint64_t self)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].phase != MOVE_DROPPING && rows[i].id != self && rows[i].first <= hi &&
            rows[i].last >= lo)
            return rows[i].id;
    return 0;
}

typedef struct stale_edit {
    shard_ctx *ctx;
    unsigned first, last; /* the marks within this range; all when first > last */
    uint64_t self;        /* the move sweeping (0: none), not a carrier */
    uint64_t carrier;     /* an unfinished move that may still fence there */
    bool changed;         /* the last try published a map without the mark */
    char swept[200];      /* the ranges cleared, for the log */
} stale_edit;

/*
 * Marks that no unfinished move carries go: those within first..last,
 * unless an unfinished move that may still fence overlaps that range
 * (*carrier), or (first > last) every one that no such move overlaps.
 * The journals are read after cur was: a move marks only once it is
 * journaled, so a move whose mark cur holds is seen here (or is over);
 * one that marks later publishes a newer map, and this edit is tried
 * again on it. A mark goes with every mark inside its range (what
 * map_mark_moving clears), none of which any such move overlaps either.
 */
static int stale_fn(const shard_map *cur, shard_map **next, void *arg)
{
    stale_edit *e = arg;
    bool all = e->first > e->last;
    shard_map *work = NULL;
    move_row *rows = NULL;
    size_t n = 0, len = 0;
    int rc = 0;

    e->carrier = 0;
    e->changed = false;
    e->swept[0] = '\0';
    if (all ? !cur->nmoving : !any_marked(cur, e->first, e->last))
        return PUBLISH_UNCHANGED;
    if ((rc = move_find(e->ctx, cur, 0, &rows, &n)))
        return rc;
    if (!all && (e->carrier = carrier_of(rows, n, e->first, e->last, e->self)) == 0)
        rc = map_mark_moving(cur, e->first, e->last, false, cur->version + 1, &work);
    for (size_t i = 0; all && rc == 0 && i < cur->nmoving; i++) {
        const shard_rangedef *r = &cur->moving[i];
        shard_map *w = NULL;
        if (carrier_of(rows, n, r->lo, r->hi, e->self) ||
            (work && !any_marked(work, r->lo, r->hi))) /* carried, or gone already */
            continue;
        if ((rc = map_mark_moving(work ? work : cur, r->lo, r->hi, false, cur->version + 1,
                                  &w)) == 0) {
            shard_map_free(work);
            work = w;
            if (len < sizeof e->swept)
                len += (size_t)snprintf(e->swept + len, sizeof e->swept - len, "%s%u-%u",
                                        len ? ", " : "", r->lo, r->hi);
        }
    }
    free(rows);
    if (rc || !work) {
        shard_map_free(work);
        return rc ? rc : PUBLISH_UNCHANGED;
    }
    e->changed = true;
    *next = work;
    return 0;
}

int move_clear_stale_mark(shard_ctx *ctx, unsigned first, unsigned last, uint64_t *carrier,
                          bool *cleared)
{
    stale_edit e = {ctx, first, last, 0, 0, false, ""};
    uint64_t version = 0;
    int rc = publish_edit(ctx->store, stale_fn, &e, &version);

    *carrier = e.carrier;
    *cleared = rc == 0 && e.changed;
    return rc;
}

void move_sweep_marks(mv *m)
{
    stale_edit e = {m->ctx, 1, 0, m->id, 0, false, ""};
    uint64_t version = 0;
    shard_errsave saved;

    shard__error_save(&saved, 0);
    if (publish_edit(m->ctx->store, stale_fn, &e, &version))
        ctx_log(m->ctx, SHARD_LOG_INFO, "move %llu: marks of earlier moves in the map not "
                "looked at: %s", (unsigned long long)m->id, shard_errmsg());
    else if (e.changed)
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: cleared the map's moving mark of shards %s, "
                "which no unfinished move carried (a mover stopped before clearing it)",
                (unsigned long long)m->id, e.swept);
    shard__error_restore(&saved);
}
