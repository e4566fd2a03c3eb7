/*
 * Cleanup (libshard-move(7), phase cleaning): the source copy is dropped
 * only once both halves of the target pair hold every moved row.
 */
#include "move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pair's own link on both halves, and whether the standby has applied
 * the flip position. */
typedef struct pair_look {
    bool caught, master_ok, standby_ok, master_stopped, standby_stopped;
    char master[400], standby[400];
} pair_look;

static void describe(const repl_status *st, bool *ok, bool *stopped, char *buf, size_t size)
{
    const repl_link *l = repl_status_find(st, "");

    *ok = l && repl_link_running(l);
    *stopped = !l || repl_link_stopped(l);
    if (l)
        repl_link_describe(l, buf, size);
    else
        snprintf(buf, size, "no replication link");
}

static int look(mv *m, shard_conn *t, shard_conn *sb, pair_look *pl)
{
    repl_status ms, ss;
    char *have = NULL;
    int rc;

    memset(pl, 0, sizeof *pl);
    if ((rc = repl_status_read(t, &ms)))
        return rc;
    if ((rc = repl_status_read(sb, &ss))) {
        repl_status_free(&ms);
        return rc;
    }
    describe(&ms, &pl->master_ok, &pl->master_stopped, pl->master, sizeof pl->master);
    describe(&ss, &pl->standby_ok, &pl->standby_stopped, pl->standby, sizeof pl->standby);
    repl_status_free(&ms);
    repl_status_free(&ss);
    /* Applied there: in its binary log (log_slave_updates) or its
     * replication position, whichever is further. */
    if ((rc = repl_value(sb, "SELECT CONCAT(@@gtid_binlog_pos, ',', @@gtid_slave_pos)",
                         &have)))
        return rc;
    pl->caught = repl_gtid_covers(have, m->flip, NULL, 0);
    free(have);
    return 0;
}

/*
 * The source may only go once both halves of the target pair hold every
 * moved row: the standby has applied the target master's position at the
 * flip, and both of the pair's links run. Waits (bounded, in short polls)
 * while a link is only reconnecting; a stopped link fails at once. On
 * failure the source stays, and a resume waits again.
 */
int move_target_pair_ready(mv *m)
{
    const shard_pairdef *dp = move_dp(m);
    shard_conn *sb = NULL;
    double end = now_seconds() + MOVE_PAIR_WAIT_S;
    pair_look pl;
    int rc;

    m->r->target_pair_healthy = 0;
    if (!dp->has_standby) {
        m->r->target_pair_healthy = 1;
        return 0;
    }
    if ((rc = move_conn(m, &dp->standby, &sb)))
        goto out;
    if ((!m->flip || !m->flip[0]) && (rc = move_read_pos(m->t, &m->flip)))
        goto out;
    for (;;) {
        if ((rc = look(m, m->t, sb, &pl)))
            goto out;
        if (pl.caught && pl.master_ok && pl.standby_ok) {
            m->r->target_pair_healthy = 1;
            break;
        }
        if (pl.master_stopped || pl.standby_stopped || now_seconds() > end) {
            rc = shard__fail(SHARD_EBUSY, "target %s is not a healthy pair: standby %s %s "
                            "everything up to the flip (its link: %s; master %s's link: %s); "
                            "the source copy is kept: repair the pair's replication, then "
                            "resume move %llu", dp->name, dp->standby.text,
                            pl.caught ? "has" : "has not applied", pl.standby,
                            dp->master.text, pl.master, (unsigned long long)m->id);
            goto out;
        }
        sleep_ms(200);
    }
out:
    move_close(&sb);
    if (rc)
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: %s", (unsigned long long)m->id,
                shard_errmsg());
    return rc;
}

void move_check_target_pair(mv *m)
{
    const shard_pairdef *dp = move_dp(m);
    shard_conn *sb = NULL;
    shard_errsave saved;
    pair_look pl;

    m->r->target_pair_healthy = 1;
    if (!dp->has_standby)
        return;
    shard__error_save(&saved, 0);
    if (move_conn(m, &dp->standby, &sb) ||
        ((!m->flip || !m->flip[0]) && move_read_pos(m->t, &m->flip)) || look(m, m->t, sb, &pl)) {
        m->r->target_pair_healthy = 0;
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: the health of target pair %s is "
                "unknown: %s", (unsigned long long)m->id, dp->name, shard_errmsg());
    } else if (!pl.caught || !pl.master_ok || !pl.standby_ok) {
        m->r->target_pair_healthy = 0;
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: target pair %s is not healthy: standby "
                "%s %s everything up to the flip (its link: %s; master %s's link: %s)",
                (unsigned long long)m->id, dp->name, dp->standby.text,
                pl.caught ? "has" : "has not applied", pl.standby, dp->master.text,
                pl.master);
    }
    move_close(&sb);
    shard__error_restore(&saved);
}

int move_drop_source(mv *m)
{
    int rc;

    /*
     * No check for writes after the fence is needed here: every libshard
     * write checks the fence row under a shared lock inside its own
     * transaction, the fence UPDATE waited for those in flight, and any
     * write after it saw fenced = 1 and wrote nothing. Verification then
     * compared every row of the frozen source with the target. (Writes
     * that bypass libshard are outside what a fence can stop.)
     */
    rc = move_drop_dbs(m, MOVE_SOURCE);
    move_close_workers(m);
    /* The rows go last: until the databases are gone they stay fenced. */
    if (rc == 0)
        rc = move_fence_delete(m);
    m->r->source_dropped = rc == 0;
    return rc;
}
