/*
 * The cut-over (libshard-move(7), phases fenced and flipped): the fence on
 * the source, the target's snapshots for verification, the new map
 * published with compare-and-swap, the flip-time position.
 */
#include "move.h"

#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The fence (libshard-move(7), "The fence"): one unlogged UPDATE of the
 * moved databases' rows in libshard_control.fence on the source master,
 * whatever the number of tables. Writers check their row under a shared
 * lock in their own transaction, so the UPDATE waits for writes in flight
 * and none commits after it; a writer holding its lock longer than
 * fence_timeout_s makes the attempt fail (SHARD_EBUSY), to be retried.
 */
int move_fence_set(mv *m, bool on)
{
    unsigned wait = m->o.fence_timeout_s ? m->o.fence_timeout_s : 1;
    uint64_t matched = 0, want = (uint64_t)(m->last - m->first) + 1;
    shard_errsave saved;
    int rc, urc;

    if ((rc = move_runf(m->src, "SET SESSION lock_wait_timeout = %u,"
                        " innodb_lock_wait_timeout = %u", wait, wait)))
        return rc;
    rc = move_fence_update(m, m->src, on, &matched);
    m->fence_statements = 1;
    shard__error_save(&saved, rc);
    urc = move_runf(m->src, "SET SESSION lock_wait_timeout = DEFAULT,"
                    " innodb_lock_wait_timeout = DEFAULT");
    if (rc)
        return shard__error_restore(&saved);
    if (urc)
        return urc;
    if (on && matched != want) {
        /* Rows missing: the fence would not hold for every shard (a
         * missing row is unfenced, so lifting needs no such check). */
        move_fence_update(m, m->src, false, &matched);
        return shard__fail(SHARD_EINTERNAL, "the fence found %llu of the %llu fence rows of "
                          "shards %u-%u on source %s; a resume creates them again",
                          (unsigned long long)matched, (unsigned long long)want, m->first,
                          m->last, move_sp(m)->name);
    }
    return 0;
}

int move_fence_state(mv *m, bool *on)
{
    uint64_t n = 0;
    sqlbuf q;
    int rc;

    *on = false;
    sql_init(&q);
    sql_add(&q, "SELECT COUNT(*) FROM " FENCE_TABLE " WHERE fenced = 1 AND db IN (");
    move_db_list(m, &q, true);
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) == 0)
        rc = repl_value_u64(m->src, q.s, &n);
    sql_free(&q);
    if (rc && m->src->last_errno == ER_NO_SUCH_TABLE) /* never fenced here */
        return 0;
    *on = n != 0;
    return rc;
}

int move_flipped_in_store(mv *m)
{
    shard_map *cur = NULL;
    bool all = true;
    int rc;

    if ((rc = shard_store_load(m->ctx->store, &cur)))
        return shard__fail_prefix(rc, "reading the map store: ");
    for (unsigned s = m->first; s <= m->last && all; s++) {
        long p = shard__map_pair_index(cur, s);
        all = p >= 0 && strcmp(cur->pairs[p].name, move_dp(m)->name) == 0;
    }
    shard_map_free(cur);
    return all ? 1 : 0;
}

int move_store_answers(mv *m)
{
    shard_map *cur = NULL;
    int rc = shard_store_load(m->ctx->store, &cur);

    shard_map_free(cur);
    return rc ? shard__fail_prefix(rc, "not fencing while the map store does not answer: ")
              : 0;
}

/* The new map: the moved range on the target. */
static int flip_edit(const shard_map *cur, shard_map **next, void *arg)
{
    mv *m = arg;
    bool all_target = true, some_source = false;

    for (unsigned s = m->first; s <= m->last; s++) {
        long p = shard__map_pair_index(cur, s);
        const char *pn = p >= 0 ? cur->pairs[p].name : "";
        all_target &= strcmp(pn, move_dp(m)->name) == 0;
        some_source |= strcmp(pn, move_sp(m)->name) == 0;
    }
    if (all_target) /* a resumed move whose flip already happened */
        return PUBLISH_UNCHANGED;
    /* A mover that lost its lock may have had its move settled by another
     * (the fence lifted after a version published over the flip): it must
     * not flip now. Checked at each try, so a try that lost the compare-
     * and-swap to that version never builds on it. */
    if (move_journal_lock_held(m))
        return SHARD_ECONFLICT;
    for (unsigned s = m->first; s <= m->last && (cur->lease_ms || cur->lease_max_ms); s++)
        if (!map_shard_moving(cur, s))
            /* A lease turned on while the move ran, unmarked: contexts may
             * skip the fence on these shards. Lifted, marked, waited out,
             * and tried again (libshard-move(7), "The lease"). */
            return shard__fail(SHARD_EBUSY, "the map got a lease (lease_ms) during the "
                               "cut-over and shards %u-%u are not marked moving: cutting "
                               "over again after marking them", m->first, m->last);
    if (!some_source || shard__map_find_pair(cur, move_dp(m)->name) < 0)
        return shard__fail(SHARD_ECONFLICT, "the stored map no longer has shards %u-%u on %s: "
                          "another change moved them", m->first, m->last, move_sp(m)->name);
    return map_reassign(cur, m->first, m->last, move_dp(m)->name, cur->version + 1, next);
}

int move_publish(mv *m)
{
    int rc = publish_edit_outcome(m->ctx->store, flip_edit, m, &m->r->map_version,
                                  &m->publish_unknown);
    m->published = rc != 0; /* what move_publish_landed is to settle */
    return rc ? shard__fail_prefix(rc, "publishing the map: ") : 0;
}

/* The stored map after a flip whose answer was lost: the flip (landed), or
 * a version published over the map without it, so that the lost write can
 * never land later (its compare-and-swap expects the version this takes). */
typedef struct settle {
    mv *m;
    bool landed;
} settle;

static int settle_edit(const shard_map *cur, shard_map **next, void *arg)
{
    settle *st = arg;
    mv *m = st->m;
    bool all_target = true, all_source = true;

    for (unsigned s = m->first; s <= m->last; s++) {
        long p = shard__map_pair_index(cur, s);
        const char *pn = p >= 0 ? cur->pairs[p].name : "";
        all_target &= strcmp(pn, move_dp(m)->name) == 0;
        all_source &= strcmp(pn, move_sp(m)->name) == 0;
    }
    if ((st->landed = all_target))
        return PUBLISH_UNCHANGED;
    if (!all_source)
        return shard__fail(SHARD_ECONFLICT, "the stored map has shards %u-%u neither all on "
                          "%s nor all on %s", m->first, m->last, move_sp(m)->name,
                          move_dp(m)->name);
    return map_reassign(cur, m->first, m->last, move_sp(m)->name, cur->version + 1, next);
}

int move_settle_flip(mv *m, bool *unknown)
{
    settle st = {m, false};
    int rc = publish_edit_outcome(m->ctx->store, settle_edit, &st, NULL, unknown);

    return rc ? rc : st.landed ? 1 : 0;
}

/* move_settle_flip until the store answers, at most catchup_timeout_s. */
static int settle_lost_flip(mv *m)
{
    double t0 = now_seconds();
    bool unknown = false;
    int rc;

    for (;;) {
        if ((rc = move_settle_flip(m, &unknown)) >= 0)
            return rc;
        if (rc != SHARD_ECONNECT && rc != SHARD_ETIMEOUT && rc != SHARD_EBUSY && !unknown)
            return rc;
        if (now_seconds() - t0 > m->o.catchup_timeout_s)
            return rc;
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: the map store's answer to the flip was "
                "lost and it does not answer yet (%s): asking again", (unsigned long long)m->id,
                shard_errmsg());
        sleep_ms(1000);
    }
}

int move_publish_landed(mv *m, int rc, int (*lift)(mv *m, int rc), const char *flipped,
                        const char *fence)
{
    bool published = m->published, unknown = m->publish_unknown;
    shard_errsave why;
    int landed;

    m->published = m->publish_unknown = false;
    shard__error_save(&why, rc);
    if (published && !unknown) {
        /* Nothing reached the store, or it said no: not flipped. */
        shard__error_restore(&why);
        return lift(m, rc);
    }
    if (!published && !m->resumed) {
        /* Failed before this run's publish, and no earlier run's exists. */
        shard__error_restore(&why);
        return lift(m, rc);
    }
    landed = published ? settle_lost_flip(m) : move_flipped_in_store(m);
    if (landed == 0) {
        shard__error_restore(&why);
        return lift(m, rc);
    }
    if (landed < 0) {
        move_close_vsnaps(m);
        return shard__fail(rc, "%.400s; and whether the map %s is unknown (%.400s): %s stays "
                          "on; resume the move", why.msg, flipped, shard_errmsg(), fence);
    }
    return 0;
}

/*
 * At the fence, before the flip: the target holds exactly the source's
 * final state and no client writes there yet. The snapshots verification
 * compares against, and the target's clock, journaled: every client write
 * on the target after the flip carries a later updated_at, which is how a
 * verification resumed after the flip tells them from copied rows
 * (libshard-move(7), "Verification"). A resumed run whose map already
 * flipped (its publish answered too late) has clients on the target: no
 * snapshot then, and the earlier run's clock stays.
 */
int move_open_vsnaps(mv *m)
{
    int rc;

    if (m->resumed && (rc = move_flipped_in_store(m)) != 0)
        return rc < 0 ? rc : 0;
    if ((rc = move_vsnaps_open(m, false)) == 0 && m->id &&
        (rc = move_runf(m->ctl, "UPDATE " MOVES_TABLE " SET flip_at = NOW(6) WHERE"
                        " id = %llu", (unsigned long long)m->id)))
        move_close_vsnaps(m);
    return rc;
}

/*
 * --postpone-cutover FILE (libshard-move(7), "Cut-over controls"): caught
 * up, the move keeps replicating (its lag stays within max_lag_ms, and a
 * broken connection still ends it) and looks for the file every
 * MOVE_POSTPONE_POLL_MS; once it is gone, the cut-over goes on.
 */
int move_postpone(mv *m)
{
    const char *file = m->o.postpone_cutover_file;
    bool logged = false;
    int rc;

    if (!file || !file[0])
        return 0;
    while (access(file, F_OK) == 0) {
        if (!logged) {
            ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: caught up; the cut-over is postponed "
                    "while %s exists", (unsigned long long)m->id, file);
            logged = true;
        }
        move_progress(m, SHARD_MOVE_CATCHUP, 0, 0);
        sleep_ms(MOVE_POSTPONE_POLL_MS);
        if ((rc = move_catch_up(m)))
            return rc;
    }
    if (logged)
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: %s is gone: cutting over",
                (unsigned long long)m->id, file);
    return 0;
}
/* ---- the revert: the same cut-over in the other direction -------------------------- */

/*
 * The move seen from the other side: the target is the source now, the
 * reverse stream its catch-up connection. It shares m's journal, its
 * connections (exchanged) and map; everything else is its own. The
 * fence, the wait, the publish, the verification and the cleanup then
 * run as they do forward.
 */
static void swap_view(mv *m, mv *rv)
{
    *rv = *m;
    rv->spi = m->dpi;
    rv->dpi = m->spi;
    rv->src = m->t;
    rv->t = m->src;
    rv->swapped = true;
    snprintf(rv->name, sizeof rv->name, "%s", m->rname);
    rv->snap = rv->fence = rv->flip = NULL;
    rv->rev = m->rev ? shard__strdup(m->rev) : NULL;
    rv->tables = NULL;
    rv->ntables = 0;
    rv->listed = false;
    rv->nworkers = 0;
    memset(rv->wsrc, 0, sizeof rv->wsrc);
    memset(rv->wdst, 0, sizeof rv->wdst);
    memset(rv->vsnap, 0, sizeof rv->vsnap);
    rv->nvsnap = 0;
    rv->done = rv->total = 0;
    rv->fence_t0 = 0;
    if (m->phase == MOVE_REVERTING) { /* an interrupted revert's positions */
        rv->fence = m->fence ? shard__strdup(m->fence) : NULL;
        rv->flip = m->flip ? shard__strdup(m->flip) : NULL;
    }
    snprintf(rv->r->source, sizeof rv->r->source, "%s", move_sp(rv)->name);
    snprintf(rv->r->target, sizeof rv->r->target, "%s", move_dp(rv)->name);
}

static void swap_done(mv *m, mv *rv)
{
    move_close_vsnaps(rv);
    move_close_workers(rv);
    m->phase = rv->phase;
    m->reverse_state = rv->reverse_state;
    free(rv->tables);
    free(rv->snap);
    free(rv->fence);
    free(rv->flip);
    free(rv->rev);
}

/* Not flipped back: the target takes its traffic again. */
static int revert_lift(mv *rv, int rc)
{
    shard_errsave why;
    char msg[1100];
    int urc;

    shard__error_save(&why, rc);
    move_close_vsnaps(rv);
    if ((urc = move_fence_set(rv, false))) {
        snprintf(msg, sizeof msg, "revert failed (%.500s) and the fence on the target could "
                 "not be lifted: %.500s; resume the move", why.msg, shard_errmsg());
        move_note(rv, msg);
        return shard__fail(urc, "%s", msg);
    }
    move_set_str(&rv->fence, "");
    snprintf(msg, sizeof msg, "revert failed: the target's fence lifted (%.1000s)", why.msg);
    if ((urc = move_enter(rv, MOVE_REVERSIBLE, msg)))
        return urc;
    return shard__fail(rc, "%s (the target's fence lifted; the move stays reversible)",
                      why.msg);
}

/* Fence the target, wait for the source, publish the map back, unfence the
 * source. On success the map points at the source again. */
static int revert_cutover(mv *m, mv *rv)
{
    bool reached = false;
    double t0;
    int rc;

    if ((rc = move_list_tables(rv)) || (rc = move_fence_rows_source(rv)) ||
        (rc = move_lease_wait(rv)) || (rc = move_catch_up(rv)))
        return rc;
    for (;;) {
        rv->r->fence_attempts++;
        t0 = now_seconds();
        rc = move_fence_set(rv, true);
        if (rc != SHARD_EBUSY || rv->r->fence_attempts >= rv->o.cutover_attempts)
            break;
        ctx_log(rv->ctx, SHARD_LOG_WARN, "move %llu: revert: %s; retrying",
                (unsigned long long)rv->id, shard_errmsg());
        sleep_ms(200.0 * rv->r->fence_attempts);
        if ((rc = move_catch_up(rv)))
            return rc;
    }
    if (rc == SHARD_EBUSY)
        return shard__fail(rc, "revert: a transaction held a moved shard on the target longer "
                          "than %u s, %u times", rv->o.fence_timeout_s, rv->r->fence_attempts);
    if (rc)
        return rc;
    if ((rc = move_read_pos(rv->src, &rv->fence)))
        return revert_lift(rv, rc);
    if ((rc = move_enter(rv, MOVE_REVERTING, "the target is fenced")))
        return revert_lift(rv, rc);
    rc = move_wait_applied(rv, rv->fence, MOVE_FENCE_WAIT_S, &reached);
    if (rc == 0 && !reached)
        rc = shard__fail(SHARD_EBUSY, "the source did not apply up to the target's fence "
                        "within %d s", MOVE_FENCE_WAIT_S);
    if (rc == 0)
        rc = move_open_vsnaps(rv); /* the source as the target left it */
    if (rc == 0)
        rc = move_publish(rv);
    if (rc && (rc = move_publish_landed(rv, rc, revert_lift, "flipped back",
                                        "the target's fence")))
        return rc;
    /* Back on the source: its fence comes off, the reverse stream has
     * nothing more to bring (the target is fenced). */
    rc = move_fence_set(m, false);
    rv->r->pause_ms = (now_seconds() - t0) * 1000.0;
    rv->r->cutover_seconds = now_seconds() - t0;
    if (rc)
        return shard__fail_prefix(rc, "the map is back on %s but its fence could not be "
                                 "lifted (resume the move): ", move_dp(rv)->name);
    if ((rc = move_read_pos(rv->t, &rv->flip)) ||
        (rc = move_enter(rv, MOVE_REVERTING, "flipped back")))
        return rc;
    shard_ctx_reload(rv->ctx);
    return 0;
}

/* An interrupted revert: did its flip back land? */
static int revert_resumed(mv *m, mv *rv)
{
    bool on = false;
    int rc, flipped = move_flipped_in_store(rv);

    if (flipped < 0)
        return flipped;
    if (flipped == 0) {
        /* Not flipped back: the target serves; its fence comes off, and
         * the revert starts over. */
        if ((rc = move_fence_state(rv, &on)) || (on && (rc = move_fence_set(rv, false))))
            return rc;
        move_set_str(&rv->fence, "");
        if ((rc = move_enter(rv, MOVE_REVERSIBLE, "interrupted revert: the target's fence "
                             "lifted")))
            return rc;
        return revert_cutover(m, rv);
    }
    /* Flipped back: make sure the source is unfenced. */
    if ((rc = move_list_tables(rv)) || (rc = move_fence_set(m, false)))
        return rc;
    if (!rv->flip || !rv->flip[0])
        rc = move_read_pos(rv->t, &rv->flip);
    return rc;
}

int move_revert(mv *m)
{
    mv rv;
    char why[600];
    int rc, bad;

    if (m->phase == MOVE_REVERSIBLE) {
        move_link l;
        move_link_reverse(m, &l);
        bad = move_link_health(m, &l, why, sizeof why);
        if (bad < 0)
            return bad;
        if (bad) {
            m->final = true;
            return shard__fail(SHARD_EBUSY, "move %llu cannot be reverted: %s; a revert now "
                              "would lose the writes made on %s since the flip. Repair the "
                              "stream (or resume the move to start it again), or finish "
                              "the move", (unsigned long long)m->id, why, move_dp(m)->name);
        }
    }
    swap_view(m, &rv);
    rc = m->phase == MOVE_REVERSIBLE ? revert_cutover(m, &rv) : revert_resumed(m, &rv);
    /* The reverse stream carries nothing of this move any more. */
    if (rc == 0 && (rc = move_reverse_remove(m)) == 0)
        rv.reverse_state = 0;
    if (rc == 0 && rv.nvsnap) {
        rc = move_verify(&rv);
    } else if (rc == 0) {
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: revert resumed after its flip back: not "
                "verified again", (unsigned long long)m->id);
    }
    if (rc == 0 && rv.r->mismatches) {
        snprintf(why, sizeof why, "revert: verification found %llu mismatched rows: the "
                 "target's copy is kept (fenced) for inspection",
                 (unsigned long long)rv.r->mismatches);
        if ((rc = move_enter(&rv, MOVE_REVERTED, why)) == 0)
            rc = shard__fail(SHARD_EVERIFY, "move %llu: %s", (unsigned long long)m->id, why);
    } else if (rc == 0) {
        /* The target's copies go once both halves of the source hold
         * everything (the same rule as forward). */
        if (rv.o.flags & SHARD_MOVE_KEEP_SOURCE)
            move_check_target_pair(&rv);
        else if ((rc = move_target_pair_ready(&rv)) == 0)
            rc = move_drop_source(&rv);
        if (rc == 0)
            rc = move_enter(&rv, MOVE_REVERTED, "reverted");
    }
    swap_done(m, &rv);
    return rc;
}
