/*
 * The move's driver (libshard-move(7), "What a move does, phase by
 * phase"): one function per phase, a switch that calls the one for the
 * phase the move is in, and move_enter() as the only way to another
 * phase. A fresh move and a resumed one run the same functions: state
 * that a run keeps in memory (tables listed, the target made, the
 * replication filter checked) is what tells them apart. A revert is the
 * same machine in the other direction (mv.dir = 1: the sides exchanged,
 * the reverse stream its catch-up connection), from catchup to done,
 * journaled as phase reverting and its step.
 */
#include "move.h"
#include "../report.h"

#include <stddef.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the phases ------------------------------------------------------------------- */

/* A revert's cut-over that will not be tried again (rc): the move is
 * reversible again, its reverse stream running, traffic on the target. */
static int revert_gives_up(mv *m, int rc)
{
    shard_errsave why;
    char msg[1100];
    int urc;

    if (rc == 0)
        return 0;
    shard__error_save(&why, rc);
    m->dir = 0;
    move_set_str(&m->fence, "");
    snprintf(msg, sizeof msg, "revert failed: the target's fence lifted (%.1000s)", why.msg);
    if ((urc = move_enter(m, MOVE_REVERSIBLE, msg)))
        return urc;
    return shard__fail(rc, "%s (the move stays reversible)", why.msg);
}

/* A cut-over attempt that could not finish: try again later, while
 * attempts remain (the move stays in catchup, traffic as it was; a revert
 * that runs out of them is reversible again). */
static int retry_later(mv *m, int rc)
{
    if (rc != SHARD_EBUSY || m->r->fence_attempts >= m->o.cutover_attempts)
        return m->dir ? revert_gives_up(m, rc) : rc;
    ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: %s; retrying", (unsigned long long)m->id,
            shard_errmsg());
    sleep_ms(200.0 * m->r->fence_attempts);
    return 0;
}

/* The cut-over failed before the flip: traffic goes back to the source. */
static int lift_fence(mv *m, int rc)
{
    shard_errsave why;
    char msg[1100];
    int urc;

    shard__error_save(&why, rc);
    move_close_vsnaps(m);
    urc = move_fence_set(m, false);
    if (urc) {
        snprintf(msg, sizeof msg, "cut-over failed (%.500s) and the fence could not be lifted: %.500s; "
                 "resume or abort the move", why.msg, shard_errmsg());
        move_note(m, msg);
        return shard__fail(urc, "%s", msg);
    }
    move_set_str(&m->fence, "");
    snprintf(msg, sizeof msg, "cut-over failed: fence lifted (%.1000s)", why.msg);
    if ((urc = move_enter(m, MOVE_CATCHUP, msg)))
        return urc;
    shard__fail(rc, "%s (fence lifted)", why.msg);
    return retry_later(m, rc);
}

/* planned: the target's databases and tables, from the source's definitions. */
static int state_planned(mv *m)
{
    shard_errsave why;
    double t0 = now_seconds();
    int rc;

    if ((rc = move_list_tables(m)))
        return rc;
    move_step(m, &t0, "listing the tables");
    /* Marked now, so that the lease wait runs out during the copy; marks
     * that earlier movers left behind go first. */
    move_sweep_marks(m);
    if ((rc = move_mark(m, true)) || (rc = move_hook(m, "marked")))
        return rc;
    move_step(m, &t0, "marking the shards moving in the map");
    /* A resumed copy starts again; the earlier runs' copies are dropped
     * when the journal says they are this move's own. Nothing else on the
     * target is ever dropped (a fresh move, or a resumed one that stopped
     * before making any, finds it and ends). */
    if (m->resumed && m->target_ours &&
        ((rc = move_repl_remove(m)) || (rc = move_drop_target(m))))
        return rc;
    if ((rc = move_fence_prepare(m)) || (rc = move_hook(m, "fence prepared")))
        return rc;
    move_step(m, &t0, "preparing the fence");
    rc = move_create_target(m);
    if (rc == SHARD_EEXISTS && !m->target_ours) {
        /* Not ours: end the move here, so that no resume ever drops it. */
        shard__error_save(&why, rc);
        move_enter(m, MOVE_ABORTED, why.msg);
        return shard__error_restore(&why);
    }
    return rc ? rc : move_enter(m, MOVE_COPYING, NULL);
}

/*
 * Moves between the same two pairs share the target's one connection from
 * the source, and a connection cannot take a new move's databases from an
 * earlier point than it has reached (the pair's standby would skip the
 * rows logged again under old GTIDs): the later move copies once the
 * earlier ones have flipped and left it. Moves between other pairs do not
 * wait (libshard-move(7), "Many moves at once").
 */
static int turn_timeout(mv *m, uint64_t before)
{
    move_row *rows = NULL;
    size_t n = 0;
    char steps[400] = "is unfinished";
    int rc = move_find(m->ctx, m->map, before, &rows, &n);

    if (rc == 0 && n == 1)
        move_next_steps(rows[0].id, rows[0].phase, rows[0].running, steps, sizeof steps);
    free(rows);
    return shard__fail(SHARD_ETIMEOUT, "move %llu between the same pairs did not flip within "
                      "%u s: it %s", (unsigned long long)before, m->o.catchup_timeout_s, steps);
}

static int wait_turn(mv *m)
{
    double t0 = now_seconds();
    uint64_t before = 0, last = 0;
    sqlbuf q;
    int rc;

    for (;;) {
        sql_init(&q);
        sql_addf(&q, "SELECT COALESCE(MIN(id), 0) FROM " MOVES_TABLE " WHERE id < %llu"
                     " AND phase <= %d AND source_pair = ", (unsigned long long)m->id,
                 MOVE_FLIPPED);
        sql_hex(&q, move_sp(m)->name, strlen(move_sp(m)->name));
        sql_add(&q, " AND target_pair = ");
        sql_hex(&q, move_dp(m)->name, strlen(move_dp(m)->name));
        if ((rc = sql_check(&q)) == 0)
            rc = repl_value_u64(m->ctl, q.s, &before);
        sql_free(&q);
        if (rc || !before)
            return rc;
        if (before != last) {
            char msg[200];
            snprintf(msg, sizeof msg, "waiting for move %llu (the same pairs) to flip",
                     (unsigned long long)before);
            move_note(m, msg);
            ctx_log(m->ctx, SHARD_LOG_INFO, "move %llu: %s", (unsigned long long)m->id, msg);
            last = before;
        }
        if (now_seconds() - t0 > m->o.catchup_timeout_s && (m->final = true))
            return turn_timeout(m, before);
        move_progress(m, SHARD_MOVE_COPYING, 0, 0);
        sleep_ms(250);
    }
}

/* copying: the snapshot copy, then the catch-up connection from its position. */
static int state_copying(mv *m)
{
    int rc;

    if (!m->target_made) /* resumed: the target's copies are incomplete */
        return move_enter(m, MOVE_PLANNED, "copying again from a new snapshot");
    if ((rc = wait_turn(m)) || (rc = move_copy(m)) || (rc = move_repl_setup(m)))
        return rc;
    return move_enter(m, MOVE_CATCHUP, NULL);
}

/* catchup: until the target is close to the source, then the fence. */
static int state_catchup(mv *m)
{
    bool on = false;
    int rc;

    if (!m->listed && (rc = move_list_tables(m)))
        return rc;
    if (!m->repl_checked) {
        /* Resumed: the filter again, and a fence whose position an earlier
         * run never journaled comes off first. */
        if ((rc = move_fence_state(m, &on)) || (on && (rc = move_fence_set(m, false))) ||
            (rc = move_fence_rows_source(m)) || (rc = move_repl_start(m)))
            return rc;
    }
    if ((rc = move_catch_up(m)) || (rc = move_postpone(m)))
        return rc;
    /* No context may still skip the fence check on these shards, and no
     * other mover restarts the target's connections between the fence
     * and the flip; caught up again after waiting for those. */
    if ((rc = move_lease_wait(m)))
        return rc;
    if ((rc = move_cut_lock(m, true)) || (rc = move_catch_up(m)) || (rc = move_store_answers(m))) {
        move_cut_lock(m, false);
        return rc;
    }
    if ((rc = move_hook(m, "fencing"))) {
        move_cut_lock(m, false);
        return rc;
    }
    m->r->fence_attempts++;
    m->fence_t0 = now_seconds(); /* from here until the new map is out: the pause */
    rc = move_fence_set(m, true);
    if (rc)
        move_cut_lock(m, false);
    if (rc == SHARD_EBUSY) { /* lock wait timeout: a long transaction */
        shard__fail(SHARD_EBUSY, "fence attempt %u: a transaction held a moved shard longer "
                   "than %u s", m->r->fence_attempts, m->o.fence_timeout_s);
        return retry_later(m, SHARD_EBUSY);
    }
    if (rc)
        return rc;
    if ((rc = move_hook(m, "fence set")) == 0 && (rc = move_read_pos(move_src(m), &m->fence)) == 0)
        rc = move_enter(m, MOVE_FENCED, NULL);
    if (rc) {
        rc = lift_fence(m, rc);
        move_cut_lock(m, false);
    }
    return rc;
}

/* fenced: the target applies up to the fence, its snapshots for the
 * verification are opened, the map flips. */
static int fenced_flip(mv *m);

static int state_fenced(mv *m)
{
    int rc = fenced_flip(m);
    move_cut_lock(m, false); /* flipped or the fence lifted: others may set up */
    return rc;
}

/* The reverse stream's start position, read under the fence before the
 * flip (libshard-move(7), "Revert"), and journaled. */
static int reverse_start(mv *m)
{
    int flipped = m->resumed ? move_flipped_in_store(m) : 0;

    if (flipped < 0)
        return flipped;
    if (flipped == 0) {
        int rc = move_read_pos(move_tgt(m), &m->rev);
        return rc ? rc : move_journal_save(m, "reverse stream start read under the fence");
    }
    if (m->rev && m->rev[0])
        return 0; /* journaled before the publish that landed */
    /* Flipped by a run that journaled no start (an older library): the
     * target took writes since, and no position is known to be before
     * them. A reverse stream from now would miss them: no window. */
    ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: the map flipped before the reverse stream's "
            "start was journaled: the move goes on without a reverse window",
            (unsigned long long)m->id);
    m->window_s = 0;
    return 0;
}

static int fenced_flip(mv *m)
{
    double t0 = m->fence_t0 ? m->fence_t0 : now_seconds();
    bool reached = false, on = false;
    int rc;

    if (!m->listed && (rc = move_list_tables(m)))
        return rc;
    if (!m->repl_checked) { /* resumed */
        if ((rc = move_fence_state(m, &on)))
            return rc;
        if (!on || !m->fence || !m->fence[0])
            return move_enter(m, MOVE_CATCHUP, "the fence was not in place: cutting over again");
        if ((rc = move_repl_start(m)))
            return rc;
    }
    rc = move_wait_applied(m, m->fence, MOVE_FENCE_WAIT_S, &reached);
    if (rc == 0 && !reached)
        rc = shard__fail(SHARD_EBUSY, "the target did not apply up to the fence within %d s",
                        MOVE_FENCE_WAIT_S);
    /* The target now holds exactly the source's final state: snapshot it
     * for verification before any client can write there. */
    if (rc == 0)
        rc = move_open_vsnaps(m);
    /* The reverse stream's start: the target's position while the fence
     * holds, before the flip, so no write made there after it is missed.
     * Journaled before the publish: a run that stops after the flip
     * landed (clients write on the target from then on) leaves it to the
     * resume, which must not read it again. */
    if (rc == 0 && m->window_s && !m->dir)
        rc = reverse_start(m);
    if (rc == 0 && (rc = move_hook(m, "publishing")) == 0)
        rc = move_publish(m);
    if (rc == 0)
        rc = move_hook(m, "published");
    /* Not flipped: traffic back to the source (lift_fence). */
    if (rc && (rc = move_publish_landed(m, rc, lift_fence, "flipped", "the fence")))
        return rc;
    /* Flipped (also when the publish's answer was lost but the store shows it). */
    m->r->pause_ms = (now_seconds() - t0) * 1000.0;
    m->r->cutover_seconds = now_seconds() - t0;
    /* The target serves from here: its fence (since planning) comes off.
     * Contexts fenced on the source learn from its rows that the new map
     * is out; should that fail they find it in the store all the same (a
     * slower poll), so it is only a warning. */
    if (move_fence_mark_flipped(m))
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: marking the source's fence rows flipped: "
                "%s", (unsigned long long)m->id, shard_errmsg());
    if ((rc = move_fence_target_lift(m)) || (rc = move_hook(m, "flipped")) ||
        (rc = move_read_pos(move_tgt(m), &m->flip)) ||
        (rc = move_enter(m, MOVE_FLIPPED, NULL)))
        return rc;
    shard_ctx_reload(m->ctx);
    return 0;
}

/* flipped: the catch-up connection goes (a revert's: the reverse stream). */
static int state_flipped(mv *m)
{
    int rc = move_repl_remove(m);

    if (rc)
        return rc;
    if (m->dir)
        m->reverse_state = 0;
    return move_enter(m, MOVE_VERIFYING, NULL);
}

/* verifying: every row; mismatches end the move with the source kept. */
static int state_verifying(mv *m)
{
    char msg[200];
    int rc;

    if (!m->listed && (rc = move_list_tables(m)))
        return rc;
    if ((rc = move_verify(m)))
        return rc;
    if (!m->r->mismatches && !m->dir && m->window_s && m->rev && m->rev[0]) {
        uint64_t now = 0;
        if ((rc = repl_value_u64(m->ctl, "SELECT UNIX_TIMESTAMP()", &now)))
            return rc;
        m->reverse_until = now + m->window_s;
        m->reverse_state = 0;
        return move_enter(m, MOVE_REVERSIBLE, NULL);
    }
    if (!m->r->mismatches)
        return move_enter(m, MOVE_CLEANING, NULL);
    /* A move recorded as cleaning drops the source when it is resumed, so
     * a failed verification must never get there. The map points at the
     * target: the move is over, and the source stays. */
    snprintf(msg, sizeof msg, "%sverification found %llu mismatched rows: the copy on %s is "
             "kept (fenced) for inspection", m->dir ? "revert: " : "",
             (unsigned long long)m->r->mismatches, move_sp(m)->name);
    move_check_target_pair(m);
    if ((rc = move_enter(m, MOVE_DONE, msg)))
        return rc;
    return shard__fail(SHARD_EVERIFY, "move %llu: %s", (unsigned long long)m->id, msg);
}

/*
 * cleaning: once both halves of the target hold everything, the move is
 * done for its user. A revert drops its source (the journal's target)
 * here; a forward move leaves its source's copies to drop (dropping),
 * off the path its caller waits on.
 */
static int state_cleaning(mv *m)
{
    double t0 = now_seconds();
    char msg[300];
    int rc;

    if (m->o.flags & SHARD_MOVE_KEEP_SOURCE) {
        move_check_target_pair(m); /* nothing is dropped: a warning is enough */
        return move_enter(m, MOVE_DONE, m->dir ? "reverted" : NULL);
    }
    if ((rc = move_target_pair_ready(m)))
        return rc;
    move_step(m, &t0, "waiting for both halves of the target");
    if (m->dir) {
        /* The target's copies, one database at a time and paced, as a
         * forward move drops its source: the pair they are on may serve
         * other shards' writers. The caller waits for them: a revert
         * reports reverted once they are gone. Its mark goes first, as a
         * forward move's goes before its drops: no fence is set from here
         * on, and calls on those shards need not check one meanwhile. */
        move_unmark(m);
        move_close_workers(m);
        if ((rc = move_drop_paced(m)))
            return rc;
        move_step(m, &t0, "dropping the source");
        return move_enter(m, MOVE_DONE, "reverted");
    }
    m->reported = true;
    snprintf(msg, sizeof msg, "done: the source's %u databases on %s are left to drop "
             "(shardctl move resume %llu drops them)", m->last - m->first + 1,
             move_sp(m)->name, (unsigned long long)m->id);
    return move_enter(m, MOVE_DROPPING, msg);
}

/*
 * dropping: the move is done; the source's copies go one database at a
 * time, paced (cleanup.c). The run that got here reports done and
 * returns (a finish goes on); a run that starts here drops them.
 */
static int state_dropping(mv *m)
{
    double t0 = now_seconds();
    int rc;

    if (m->reported && !m->finish) {
        m->parked = true;
        m->r->phase = SHARD_MOVE_DONE;
        move_progress(m, SHARD_MOVE_DONE, 0, 0);
        return 0;
    }
    if (!m->reported)
        move_check_target_pair(m); /* for the report: its pair was ready before */
    if ((rc = move_drop_paced(m)))
        return rc;
    move_step(m, &t0, "dropping the source");
    return move_enter(m, MOVE_DONE, "source dropped");
}

/*
 * A revert begins: the reverse stream must carry everything written on
 * the target since the flip, or the revert would lose it. Then the same
 * phases in the other direction, from catchup, the stream as their
 * catch-up connection (checked just now).
 */
static int revert_begin(mv *m)
{
    char why[600];
    move_link l;
    int bad;

    move_link_reverse(m, &l);
    if ((bad = move_link_health(m, &l, why, sizeof why)) < 0)
        return bad;
    if (bad) {
        m->final = true;
        return shard__fail(SHARD_EBUSY, "move %llu cannot be reverted: %s; a revert now "
                          "would lose the writes made on %s since the flip. Repair the "
                          "stream (or resume the move to start it again), or finish "
                          "the move", (unsigned long long)m->id, why, move_dp(m)->name);
    }
    move_turn(m);
    m->repl_checked = true;
    return move_enter(m, MOVE_CATCHUP, "the reverse stream catches up");
}

/*
 * reversible: the source kept in sync from the target by the reverse
 * stream, until the window ends, a finish, or a revert. A run that is
 * neither parks here (the call returns with the move in this phase).
 */
static int state_reversible(mv *m)
{
    uint64_t now = 0;
    int rc;

    if (m->reverse_state == 0) {
        /* Joined from the position read under the fence: whenever it
         * starts, it misses nothing. */
        if ((rc = move_reverse_setup(m)) || (rc = move_hook(m, "reverse stream joined")))
            return rc;
        m->reverse_state = 1;
        if ((rc = move_enter(m, MOVE_REVERSIBLE, "reverse stream started")))
            return rc;
    } else if (!m->revert && !m->finish && !m->repl_checked) {
        /* Resumed: its filter again (a restarted source forgot it). */
        if ((rc = move_reverse_start(m)))
            return rc;
        m->repl_checked = true;
    }
    if (m->revert)
        return revert_begin(m);
    if (!m->finish) {
        if ((rc = repl_value_u64(m->ctl, "SELECT UNIX_TIMESTAMP()", &now)))
            return rc;
        if (now < m->reverse_until) {
            m->parked = true;
            return 0;
        }
    }
    /* The window is over: the source stops following and goes. */
    if ((rc = move_reverse_remove(m)))
        return rc;
    m->reverse_state = 0;
    return move_enter(m, MOVE_CLEANING, m->finish ? "finished: reverse stream stopped"
                                                  : "reverse window over: reverse stream "
                                                    "stopped");
}

/*
 * A read timeout, a lost connection, a restarted server: worth another
 * try of the same phase, entered as a resume enters it. Verification too:
 * it starts over with the target's snapshots of the flip point when they
 * are still open (it was the source, or one statement, that failed), or
 * else as a resumed verification does (libshard-move(7), "Verification").
 */
static bool retryable(const mv *m, int rc)
{
    return (rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT) && !m->final &&
           m->retries < MOVE_RETRIES;
}

/* Whether every snapshot of the target is still open and in step. */
static bool vsnaps_alive(mv *m)
{
    for (unsigned w = 0; w < m->nvsnap; w++) {
        uint64_t one = 0;
        if (!m->vsnap[w] || repl_value_u64(m->vsnap[w], "SELECT 1", &one) != 0 || one != 1)
            return false;
    }
    return m->nvsnap > 0;
}

/* Every connection anew (the journal's only if it is gone: it holds the
 * move's lock), and the run's memory of what is set up forgotten. */
static int reconnect(mv *m)
{
    uint64_t one = 0;
    int rc;

    if (m->phase != MOVE_VERIFYING) {
        move_close_vsnaps(m);
    } else if (vsnaps_alive(m)) {
        ctx_log(m->ctx, SHARD_LOG_INFO, "move %llu: verifying again against the target's "
                "snapshots of the flip point", (unsigned long long)m->id);
    } else {
        move_close_vsnaps(m);
        ctx_log(m->ctx, SHARD_LOG_INFO, "move %llu: verifying again as a resumed verification "
                "does (the target's snapshots of the flip point are gone)",
                (unsigned long long)m->id);
    }
    move_close_workers(m);
    move_close_masters(m);
    m->resumed = true;
    m->target_made = false;
    m->repl_checked = false;
    if (m->ctl && repl_value_u64(m->ctl, "SELECT 1", &one) != 0) { /* its result read */
        char sql[128];
        uint64_t got = 0;
        move_close(&m->ctl);
        if ((rc = move_conn(m, &move_dp(m)->master, &m->ctl)))
            return rc;
        /* The old connection's lock goes when the server notices it gone. */
        snprintf(sql, sizeof sql, "SELECT GET_LOCK('libshard move %llu', 10)",
                 (unsigned long long)m->id);
        if ((rc = repl_value_u64(m->ctl, sql, &got)))
            return rc;
        if (got != 1)
            return shard__fail(SHARD_EBUSY, "move %llu is being run by another mover right "
                              "now", (unsigned long long)m->id);
    }
    if ((rc = move_open_masters(m)))
        return rc;
    move_pair_link_start(m);
    return 0;
}

/* The phases from where the move is, until it is over or one fails. */
static int run_phases(mv *m)
{
    int rc = 0;

    while (rc == 0 && !move_over((int)m->phase) && !m->parked) {
        switch (m->phase) {
        case MOVE_PLANNED:
            rc = state_planned(m);
            break;
        case MOVE_COPYING:
            rc = state_copying(m);
            break;
        case MOVE_CATCHUP:
            rc = state_catchup(m);
            break;
        case MOVE_FENCED:
            rc = state_fenced(m);
            break;
        case MOVE_FLIPPED:
            rc = state_flipped(m);
            break;
        case MOVE_VERIFYING:
            rc = state_verifying(m);
            break;
        case MOVE_CLEANING:
            rc = state_cleaning(m);
            break;
        case MOVE_REVERSIBLE:
            rc = state_reversible(m);
            break;
        case MOVE_DROPPING:
            rc = state_dropping(m);
            break;
        default:
            rc = shard__fail(SHARD_EINTERNAL, "move %llu: unknown phase %d",
                            (unsigned long long)m->id, (int)m->phase);
        }
    }
    return rc;
}

static int drive(mv *m)
{
    shard_errsave why;
    int rc;

    if ((rc = move_open_masters(m)) == 0) {
        if (m->resumed)
            move_pair_link_start(m);
        rc = run_phases(m);
    }
    while (retryable(m, rc)) {
        m->retries++;
        shard__error_save(&why, rc);
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: %s: %s; trying again (%u of %u)",
                (unsigned long long)m->id, shard_move_phase_name((int)m->phase), why.msg,
                m->retries, MOVE_RETRIES);
        move_note(m, why.msg);
        sleep_ms(1000.0 * (1u << (m->retries - 1))); /* a restarting server takes seconds */
        if ((rc = reconnect(m)) == 0)
            rc = run_phases(m);
    }
    if (rc) {
        shard__error_save(&why, rc);
        move_note(m, why.msg);
        shard__error_restore(&why);
    } else if (move_over((int)m->phase) || m->phase == MOVE_DROPPING) {
        move_unmark(m);
    }
    return rc;
}

/* ---- the calls ---------------------------------------------------------------------- */

static int options(mv *m, const shard_move_options *opts)
{
    static const shard_move_options defaults = SHARD_MOVE_OPTIONS_INIT;

    m->o = defaults;
    if (opts && (opts->version < 1 || opts->version > SHARD_MOVE_OPTIONS_VERSION))
        return shard__fail(SHARD_EINVAL, "shard_move_options.version %u is not supported "
                          "(this library knows 1..%d)", opts->version,
                          SHARD_MOVE_OPTIONS_VERSION);
    /* Only the caller's version's fields: an older caller's struct is shorter. */
    if (opts)
        memcpy(&m->o, opts, opts->version >= 2 ? sizeof *opts
                                               : offsetof(shard_move_options,
                                                          reverse_window_s));
    if (!m->o.batch_rows)
        m->o.batch_rows = defaults.batch_rows;
    if (!m->o.copy_threads)
        m->o.copy_threads = 1;
    if (!m->o.cutover_attempts)
        m->o.cutover_attempts = 1;
    if (!m->o.catchup_timeout_s)
        m->o.catchup_timeout_s = defaults.catchup_timeout_s;
    m->window_s = m->o.reverse_window_s;
    return move_load_parse(m->o.max_load, NULL, NULL); /* refused before anything starts */
}

static void mv_init(mv *m, shard_ctx *ctx, shard_move_report *r)
{
    memset(m, 0, sizeof *m);
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&m->lock, NULL);
    m->ctx = ctx;
    m->r = r;
    m->map = ctx_map(ctx);
    m->version_from = m->map->version;
}

static void mv_free(mv *m)
{
    move_close_vsnaps(m);
    move_close_workers(m);
    move_close_masters(m);
    move_close(&m->ctl);
    free(m->tables);
    free(m->snap);
    free(m->fence);
    free(m->flip);
    free(m->rev);
    shard_map_free(m->map);
    pthread_mutex_destroy(&m->lock);
}

/*
 * A move interrupted in fenced (its mover killed, or stopped while the map
 * store did not answer) keeps its shards fenced; the next mover settles it
 * (libshard-move(7), "When the map store does not answer"): under the
 * move's lock, a flip that did not land is made unable to land, the fence
 * comes off and the move goes back to catchup, to be resumed when it
 * suits. A flip that landed is left as it is (the map routes the shards to
 * the target; a resume finishes it).
 */
static int settle_fenced(shard_ctx *ctx, uint64_t id)
{
    shard_move_report r;
    bool on = false, unknown = false;
    mv m;
    int rc;

    mv_init(&m, ctx, &r);
    if ((rc = options(&m, NULL)) || (rc = move_load(ctx, id, &m)) || m.phase != MOVE_FENCED ||
        (rc = move_conn(&m, &move_sp(&m)->master, &move_half_of(&m, MOVE_SOURCE)->c)) || (rc = move_fence_state(&m, &on)) ||
        !on || (rc = move_settle_flip(&m, &unknown)) != 0)
        goto out;
    if ((rc = move_fence_set(&m, false)) == 0) {
        move_set_str(&m.fence, "");
        rc = move_enter(&m, MOVE_CATCHUP, "interrupted while fenced, and the map had not "
                        "flipped: the next mover lifted the fence (resume to cut over)");
    }
out:
    mv_free(&m);
    return rc < 0 ? rc : 0;
}

static void settle_interrupted(mv *m)
{
    move_row *rows = NULL;
    size_t n = 0;
    shard_errsave saved;

    shard__error_save(&saved, 0);
    if (move_find(m->ctx, m->map, 0, &rows, &n) == 0)
        for (size_t i = 0; i < n; i++)
            if (rows[i].phase == MOVE_FENCED && !rows[i].running &&
                settle_fenced(m->ctx, rows[i].id))
                ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu, interrupted while fenced, stays "
                        "fenced: %s", (unsigned long long)rows[i].id, shard_errmsg());
    free(rows);
    shard__error_restore(&saved);
}

/*
 * A move left dropping whose shards this one moves (a move back onto the
 * pair they left, say) has its drops finished first, or waited for while
 * its mover runs them: they must never meet this move's copies, and a
 * move that nobody resumes must not keep refusing this one. Until it is
 * over, no_overlap refuses.
 */
static int finish_drops(mv *m)
{
    double end = now_seconds() + m->o.catchup_timeout_s;

    for (;;) {
        shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
        shard_move_report r = SHARD_MOVE_REPORT_INIT;
        move_row *rows = NULL;
        size_t n = 0;
        uint64_t id = 0;
        unsigned first = 0, last = 0;
        bool running = false;
        int rc = move_find(m->ctx, m->map, 0, &rows, &n);

        if (rc)
            return rc;
        for (size_t i = 0; i < n && !id; i++)
            if (rows[i].phase == MOVE_DROPPING && rows[i].first <= m->last &&
                m->first <= rows[i].last) {
                id = rows[i].id;
                first = rows[i].first;
                last = rows[i].last;
                running = rows[i].running;
            }
        free(rows);
        if (!id)
            return 0;
        if (!running) {
            ctx_log(m->ctx, SHARD_LOG_INFO, "dropping what move %llu left of shards %u-%u on "
                    "its source first", (unsigned long long)id, first, last);
            o.max_load = m->o.max_load;
            rc = shard_move_resume(m->ctx, id, &o, &r);
            if (rc == 0)
                continue;
            if (rc != SHARD_EBUSY) /* EBUSY: its mover came back meanwhile */
                return shard__fail_prefix(rc, "move %llu left its source's copies of shards "
                                         "%u-%u to drop, and dropping them first failed: ",
                                         (unsigned long long)id, first, last);
        }
        if (now_seconds() > end)
            return shard__fail(SHARD_ETIMEOUT, "move %llu is still dropping its source's "
                              "copies of shards %u-%u after %u s", (unsigned long long)id,
                              first, last, m->o.catchup_timeout_s);
        sleep_ms(500);
    }
}

/* Moves of other ranges run concurrently (libshard-move(7), "Many moves at
 * once"); one that shares a shard with an unfinished move is refused, and
 * so is a reverse window while another move between the same pairs keeps
 * one (the source's one connection from the target is its stream). */
static int no_overlap(mv *m)
{
    move_row *rows = NULL;
    size_t n = 0;
    int rc;

    if ((rc = move_find(m->ctx, m->map, 0, &rows, &n)))
        return rc;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char steps[400];
        move_next_steps(rows[i].id, rows[i].phase, rows[i].running, steps, sizeof steps);
        if (m->window_s && (rows[i].phase == MOVE_REVERSIBLE || rows[i].phase == MOVE_REVERTING ||
                            (rows[i].window_s && rows[i].phase < MOVE_CLEANING)) &&
            strcmp(rows[i].source, move_sp(m)->name) == 0 &&
            strcmp(rows[i].target, move_dp(m)->name) == 0)
            rc = shard__fail(SHARD_EBUSY, "move %llu from %s to %s keeps a reverse window, "
                            "and another move between the same pairs cannot take one (move "
                            "without --reverse-window, or wait): it %s",
                            (unsigned long long)rows[i].id, rows[i].source, rows[i].target,
                            steps);
        else if (strcmp(rows[i].source, move_dp(m)->name) == 0 &&
                 strcmp(rows[i].target, move_sp(m)->name) == 0 &&
                 (rows[i].phase == MOVE_REVERSIBLE || rows[i].phase == MOVE_REVERTING ||
                  (m->window_s && rows[i].phase <= MOVE_FLIPPED)))
            /* Its reverse stream, or its catch-up, would be this move's
             * connection from the same master. */
            rc = shard__fail(SHARD_EBUSY, "move %llu from %s to %s replicates between the "
                            "same two masters until it %s: it %s", (unsigned long long)rows[i].id,
                            rows[i].source, rows[i].target,
                            rows[i].phase >= MOVE_REVERSIBLE ? "is finished or reverted"
                                                             : "flips", steps);
        else if (rows[i].first <= m->last && m->first <= rows[i].last)
            rc = shard__fail(SHARD_EBUSY, "shards %u-%u overlap unfinished move %llu (shards "
                            "%u-%u, %s to %s), which %s", m->first, m->last,
                            (unsigned long long)rows[i].id, rows[i].first, rows[i].last,
                            rows[i].source, rows[i].target, steps);
    }
    free(rows);
    return rc;
}

int shard_move(shard_ctx *ctx, unsigned first, unsigned last, const char *target,
               const shard_move_options *opts, shard_move_report *report, char **plan)
{
    shard_move_report full;
    mv m;
    int rc;

    if (!ctx || !target)
        return shard__fail(SHARD_EINVAL, "shard_move: NULL argument");
    if ((rc = report_move_check(report)))
        return rc;
    mv_init(&m, ctx, &full);
    m.first = first;
    m.last = last;
    if ((rc = options(&m, opts)) || (rc = move_resolve_pairs(&m, target)))
        goto out;
    if (m.o.flags & SHARD_MOVE_DRY_RUN) {
        rc = plan ? move_plan_text(&m, plan)
                  : shard__fail(SHARD_EINVAL, "a dry run needs somewhere to put the plan");
        goto out;
    }
    settle_interrupted(&m);
    if ((rc = finish_drops(&m)) || (rc = move_preflight(&m, NULL)) ||
        (rc = move_journal_open(&m)) || (rc = no_overlap(&m)) || (rc = move_journal_insert(&m)) ||
        (rc = move_enter(&m, MOVE_PLANNED, NULL)))
        goto out;
    rc = drive(&m);
out:
    mv_free(&m);
    report_move_out(report, &full);
    return rc;
}

/*
 * A resume of a move that is over: nothing of it is left to run, but a
 * mover that stopped once it was over, before its last step (move_unmark),
 * left its shards marked moving in the map, where every call checks the
 * fence as during a move: the resume clears that mark (shard_fleet_status
 * names this call for it). With no such mark, refused as before.
 */
static int resume_over(shard_ctx *ctx, mv *m, uint64_t id)
{
    shard_errsave none;
    move_row row;
    uint64_t carrier = 0;
    bool found = false, cleared = false;
    int rc;

    shard__error_save(&none, SHARD_ENOTFOUND);
    if ((rc = move_find_over(ctx, m->map, id, &row, &found)))
        return rc;
    if (!found)
        return shard__error_restore(&none);
    if ((rc = move_clear_stale_mark(ctx, row.first, row.last, &carrier, &cleared)))
        return shard__fail_prefix(rc, "move %llu is %s; clearing the mark of its shards "
                                  "%u-%u in the map: ", (unsigned long long)id,
                                  shard_move_phase_name(row.phase), row.first, row.last);
    if (!cleared)
        return carrier ? shard__fail(SHARD_ENOTFOUND, "move %llu is %s: nothing to resume (its "
                                     "shards' mark in the map is unfinished move %llu's)",
                                     (unsigned long long)id, shard_move_phase_name(row.phase),
                                     (unsigned long long)carrier)
                       : shard__fail(SHARD_ENOTFOUND, "move %llu is %s: nothing to resume",
                                     (unsigned long long)id, shard_move_phase_name(row.phase));
    ctx_log(ctx, SHARD_LOG_INFO, "move %llu is %s: cleared the mark of its shards %u-%u in the "
            "map, which its mover had left", (unsigned long long)id,
            shard_move_phase_name(row.phase), row.first, row.last);
    m->r->move_id = id;
    m->r->first = row.first;
    m->r->last = row.last;
    m->r->phase = row.phase;
    snprintf(m->r->source, sizeof m->r->source, "%s", row.source);
    snprintf(m->r->target, sizeof m->r->target, "%s", row.target);
    return 0;
}

int shard_move_resume(shard_ctx *ctx, uint64_t move_id, const shard_move_options *opts,
                      shard_move_report *report)
{
    shard_move_report full;
    mv m;
    int rc;

    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_move_resume: NULL context");
    if ((rc = report_move_check(report)))
        return rc;
    mv_init(&m, ctx, &full);
    if ((rc = options(&m, opts)) == 0 && (rc = move_load(ctx, move_id, &m)) == 0 &&
        (rc = move_recheck(&m)) == 0) {
        ctx_log(ctx, SHARD_LOG_INFO, "move %llu: resuming in phase %s",
                (unsigned long long)m.id, shard_move_phase_name((int)m.phase));
        rc = drive(&m);
    } else if (rc == SHARD_ENOTFOUND && move_id && !m.id) {
        rc = resume_over(ctx, &m, move_id);
    }
    mv_free(&m);
    report_move_out(report, &full);
    return rc;
}

int shard_move_abort(shard_ctx *ctx, uint64_t move_id)
{
    shard_move_report r;
    bool on = false, unknown = false;
    mv m;
    int rc;

    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_move_abort: NULL context");
    mv_init(&m, ctx, &r);
    if ((rc = options(&m, NULL)) || (rc = move_load(ctx, move_id, &m)))
        goto out;
    if (m.dir) {
        rc = shard__fail(SHARD_EBUSY, "move %llu is being reverted (phase reverting, step %s): "
                        "resume it to complete the revert", (unsigned long long)m.id,
                        shard_move_phase_name((int)m.phase));
        goto out;
    }
    /* Cannot tell: never give the source back after a flip. Fenced, a flip
     * may still be in flight: settled so that it cannot land after the
     * fence is lifted. */
    if (m.phase == MOVE_FENCED ? (rc = move_settle_flip(&m, &unknown)) < 0
                               : m.phase < MOVE_FLIPPED && (rc = move_flipped_in_store(&m)) < 0)
        goto out;
    if (m.phase >= MOVE_FLIPPED || rc == 1) {
        char steps[400];
        move_next_steps(m.id, m.phase >= MOVE_FLIPPED ? (int)m.phase : MOVE_FLIPPED, false,
                        steps, sizeof steps);
        rc = shard__fail(SHARD_EBUSY, "move %llu already switched the map to %s and cannot be "
                        "aborted: it %s", (unsigned long long)m.id, move_dp(&m)->name, steps);
        goto out;
    }
    if ((rc = move_open_masters(&m)) || (rc = move_fence_state(&m, &on)))
        goto out;
    /* Traffic first: lift the fence, then take the copy apart, and leave
     * the target pair's own link running. */
    if (on && (rc = move_fence_set(&m, false)))
        goto out;
    /* Only copies the journal says are this move's: a move stopped in
     * planning before it made any leaves what was there. */
    if ((rc = move_repl_remove(&m)) ||
        (m.target_ours && ((rc = move_drop_target(&m)) || (rc = move_fence_target_delete(&m)))))
        goto out;
    move_pair_link_start(&m);
    move_set_str(&m.fence, "");
    if ((rc = move_enter(&m, MOVE_ABORTED, "aborted")) == 0)
        move_unmark(&m);
out:
    mv_free(&m);
    return rc;
}

/* A reversible move's revert or finish: the one named, in its phase. */
static int reversible_call(shard_ctx *ctx, uint64_t move_id, const shard_move_options *opts,
                           shard_move_report *report, bool revert)
{
    const char *what = revert ? "shard_move_revert" : "shard_move_finish";
    shard_move_report full;
    mv m;
    int rc;

    if (!ctx)
        return shard__fail(SHARD_EINVAL, "%s: NULL context", what);
    if ((rc = report_move_check(report)))
        return rc;
    mv_init(&m, ctx, &full);
    if ((rc = options(&m, opts)) || (rc = move_load(ctx, move_id, &m)) ||
        (rc = move_recheck(&m)))
        goto out;
    if (!revert && !m.dir && (m.phase == MOVE_CLEANING || m.phase == MOVE_DROPPING)) {
        m.finish = true; /* the drops now, in this call */
        rc = drive(&m);  /* finished already: only the cleanup was left */
        goto out;
    }
    if (m.phase != MOVE_REVERSIBLE && !(revert && m.dir)) {
        rc = shard__fail(m.dir ? SHARD_EBUSY : SHARD_EINVAL,
                        "move %llu is in phase %s: only a reversible move (run with a "
                        "reverse window, flipped and verified) can be %s",
                        (unsigned long long)m.id, shard_move_phase_name(m.r->phase),
                        revert ? "reverted" : "finished (an interrupted revert is resumed)");
        goto out;
    }
    m.revert = revert;
    m.finish = !revert;
    ctx_log(ctx, SHARD_LOG_INFO, "move %llu: %s", (unsigned long long)m.id,
            revert ? "reverting" : "finishing");
    rc = drive(&m);
out:
    mv_free(&m);
    report_move_out(report, &full);
    return rc;
}

int shard_move_revert(shard_ctx *ctx, uint64_t move_id, const shard_move_options *opts,
                      shard_move_report *report)
{
    return reversible_call(ctx, move_id, opts, report, true);
}

int shard_move_finish(shard_ctx *ctx, uint64_t move_id, const shard_move_options *opts,
                      shard_move_report *report)
{
    return reversible_call(ctx, move_id, opts, report, false);
}
