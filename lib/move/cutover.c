/*
 * The cut-over (libshard-move(7), phases fenced and flipped): the fence on
 * the source, the target's snapshots for verification, the new map
 * published with compare-and-swap, the flip-time position. A revert runs
 * the same in the other direction (mv.dir).
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

    if ((rc = move_runf(move_src(m), "SET SESSION lock_wait_timeout = %u,"
                        " innodb_lock_wait_timeout = %u", wait, wait)))
        return rc;
    rc = move_fence_update(m, move_src(m), on, &matched);
    m->fence_statements = 1;
    shard__error_save(&saved, rc);
    urc = move_runf(move_src(m), "SET SESSION lock_wait_timeout = DEFAULT,"
                    " innodb_lock_wait_timeout = DEFAULT");
    if (rc)
        return shard__error_restore(&saved);
    if (urc)
        return urc;
    if (on && matched != want) {
        /* Rows missing: the fence would not hold for every shard (a
         * missing row is unfenced, so lifting needs no such check). */
        move_fence_update(m, move_src(m), false, &matched);
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
    sql_add(&q, "SELECT COUNT(*) FROM " FENCE_TABLE " WHERE fenced <> 0 AND db IN (");
    move_db_list(m, &q, true);
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) == 0)
        rc = repl_value_u64(move_src(m), q.s, &n);
    sql_free(&q);
    if (rc && move_src(m)->last_errno == ER_NO_SUCH_TABLE) /* never fenced here */
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
    /* The clock of the target, whose rows' updated_at it is compared with
     * (in a revert the journal's server is the source). */
    if ((rc = move_vsnaps_open(m, false)) == 0 && m->id) {
        char *now = NULL;
        if ((rc = repl_value(move_tgt(m), "SELECT UNIX_TIMESTAMP(NOW(6))", &now)) == 0 &&
            strspn(now, "0123456789.") != strlen(now))
            rc = shard__fail(SHARD_ESERVER, "the target's clock reads \"%.40s\"", now);
        if (rc == 0)
            rc = move_runf(m->ctl, "UPDATE " MOVES_TABLE " SET flip_at = FROM_UNIXTIME(%s)"
                           " WHERE id = %llu", now, (unsigned long long)m->id);
        free(now);
        if (rc)
            move_close_vsnaps(m);
    }
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
