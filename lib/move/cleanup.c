/*
 * Cleanup (libshard-move(7), phase cleaning): the source copy is dropped
 * only once both halves of the target pair hold every moved row.
 */
#include "move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pair's own link on both halves, whether both have applied the flip
 * position, and whether a stopped link's server is in another mover's
 * replication setup (which stops every link there for a moment). */
typedef struct pair_look {
    bool caught, master_ok, standby_ok, master_stopped, standby_stopped;
    bool master_setup, standby_setup;
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

/* Another mover changes the replication setup of c's server right now. */
static bool in_setup(shard_conn *c)
{
    uint64_t used = 0;
    return repl_value_u64(c, "SELECT IS_USED_LOCK('libshard replication') IS NOT NULL",
                          &used) == 0 && used == 1;
}

static int look(mv *m, shard_conn *t, shard_conn *sb, pair_look *pl)
{
    repl_status ms, ss;
    bool on_master = false, on_standby = false;
    int rc;

    memset(pl, 0, sizeof *pl);
    /* The setup lock is looked at before the status and after it: a setup
     * holds it from before it stops a link until after it starts it again,
     * so a link it had stopped when the status was read shows it held at
     * one of the two, even when the setup ends in between. */
    pl->master_setup = in_setup(t);
    pl->standby_setup = in_setup(sb);
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
    pl->master_setup = pl->master_stopped && (pl->master_setup || in_setup(t));
    pl->standby_setup = pl->standby_stopped && (pl->standby_setup || in_setup(sb));
    /* Both halves: the flip position was read on the master of its time,
     * and after a forced failover of the pair the master is the promoted
     * standby, which may lack what the old one had not sent it. */
    if ((rc = move_holds(sb, m->flip, NULL, 0, &on_standby)) ||
        (rc = move_holds(t, m->flip, NULL, 0, &on_master)))
        return rc;
    pl->caught = on_standby && on_master;
    return 0;
}

/*
 * The source may only go once both halves of the target pair hold every
 * moved row: both hold the target master's position at the flip, and both
 * of the pair's links run. Waits (bounded, in short polls) while a link is
 * only reconnecting, or stopped by another mover's replication setup (it
 * holds the setup lock while it has them stopped); a link stopped
 * otherwise fails at once. On failure the source stays, and a resume waits
 * again.
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
    if ((!m->flip || !m->flip[0]) && (rc = move_read_pos(move_tgt(m), &m->flip)))
        goto out;
    for (;;) {
        if ((rc = look(m, move_tgt(m), sb, &pl)))
            goto out;
        if (pl.caught && pl.master_ok && pl.standby_ok) {
            m->r->target_pair_healthy = 1;
            break;
        }
        if ((pl.master_stopped && !pl.master_setup) || (pl.standby_stopped && !pl.standby_setup) ||
            now_seconds() > end) {
            rc = shard__fail(SHARD_EBUSY, "target %s is not a healthy pair: %s everything "
                            "up to the flip (standby %s's link: %s; master %s's link: %s); "
                            "the source copy is kept: repair the pair's replication, then "
                            "resume move %llu", dp->name,
                            pl.caught ? "both halves hold" : "not both halves hold",
                            dp->standby.text, pl.standby, dp->master.text, pl.master,
                            (unsigned long long)m->id);
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
        ((!m->flip || !m->flip[0]) && move_read_pos(move_tgt(m), &m->flip)) || look(m, move_tgt(m), sb, &pl)) {
        m->r->target_pair_healthy = 0;
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: the health of target pair %s is "
                "unknown: %s", (unsigned long long)m->id, dp->name, shard_errmsg());
    } else if (!pl.caught || !pl.master_ok || !pl.standby_ok) {
        m->r->target_pair_healthy = 0;
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: target pair %s is not healthy: %s "
                "everything up to the flip (standby %s's link: %s; master %s's link: %s)",
                (unsigned long long)m->id, dp->name,
                pl.caught ? "both halves hold" : "not both halves hold", dp->standby.text,
                pl.standby, dp->master.text, pl.master);
    }
    move_close(&sb);
    shard__error_restore(&saved);
}

/* ---- the source's drop: a forward move's after it reported done, a revert's -------- */

int move_source_left(mv *m, shard_conn *c, uint64_t *left)
{
    sqlbuf q;
    int rc;

    *left = 0;
    sql_init(&q);
    sql_add(&q, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN (");
    if ((rc = move_db_list(m, &q, true)) == 0) { /* names from the map's checked format */
        sql_add(&q, ")");
        if ((rc = sql_check(&q)) == 0)
            rc = repl_value_u64(c, q.s, left);
    }
    sql_free(&q);
    return rc;
}

/*
 * The map never routes to a database being dropped here: the flip
 * published the moved range on the target before verification, and
 * only another move of these shards could route one back to the source;
 * such a move finishes this one's drops before it starts (driver.c,
 * finish_drops), and cannot start while they run. Checked all the same
 * against the stored map before the first drop: a shard it routes to the
 * source keeps its database, and nothing is dropped.
 */
static int source_unrouted(mv *m)
{
    shard_map *cur = NULL;
    int rc;

    if ((rc = shard_store_load(m->ctx->store, &cur)))
        return shard__fail_prefix(rc, "move %llu: not dropping the source while the map store "
                                 "does not answer: ", (unsigned long long)m->id);
    for (unsigned s = m->first; s <= m->last && rc == 0; s++) {
        long p = shard__map_pair_index(cur, s);
        if (p >= 0 && strcmp(cur->pairs[p].name, move_sp(m)->name) == 0)
            rc = shard__fail(SHARD_ECONFLICT, "move %llu: the map (version %llu) routes shard "
                            "%u to %s again: its database there is not this move's to drop; "
                            "nothing dropped", (unsigned long long)m->id,
                            (unsigned long long)cur->version, s, move_sp(m)->name);
    }
    shard_map_free(cur);
    return rc;
}

/* One database, when the source still has it: dropped (logged, so the
 * standby drops it too), and *busy the seconds it took (0: gone already). */
static int drop_one(mv *m, unsigned shard, double *busy)
{
    char db[SHARD_DBNAME_MAX], sql[200];
    uint64_t has = 0;
    double t0 = now_seconds();
    int rc;

    *busy = 0;
    move_db(m, shard, db);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE "
             "SCHEMA_NAME = '%s'", db);
    if ((rc = repl_value_u64(move_src(m), sql, &has)) || !has)
        return rc;
    if ((rc = move_ddlf(move_src(m), "DROP DATABASE IF EXISTS `%s`", db)))
        return shard__fail_prefix(rc, "dropping %s on %s: ", db, move_sp(m)->name);
    *busy = now_seconds() - t0;
    return 0;
}

/*
 * No check for writes after the fence is needed before a drop: every
 * libshard write checks the fence row under a shared lock inside its own
 * transaction, the fence UPDATE waited for those in flight, and any write
 * after it saw fenced = 1 and wrote nothing. Verification then compared
 * every row of the frozen source with the target. (Writes that bypass
 * libshard are outside what a fence can stop.) The same holds for a
 * revert, whose source is the journal's target, fenced the same way.
 */
int move_drop_paced(mv *m)
{
    move_throttle th;
    uint64_t left = 0, total = (uint64_t)(m->last - m->first) + 1, done;
    int rc;

    m->r->source_dropped = 0;
    if ((rc = source_unrouted(m)) || (rc = move_source_left(m, move_src(m), &left)))
        return rc;
    done = total - (left < total ? left : total);
    /* The copy's throttle: its max_load pauses the drops too. */
    if ((rc = move_throttle_start(m, &th))) {
        move_throttle_stop(&th);
        return rc;
    }
    move_progress(m, SHARD_MOVE_DROPPING, done, total);
    for (unsigned s = m->first; s <= m->last && rc == 0 && left; s++) {
        double busy = 0;
        if ((rc = drop_one(m, s, &busy)) || busy == 0)
            continue;
        left--;
        move_progress(m, SHARD_MOVE_DROPPING, ++done, total);
        /* Between two drops: a kill here leaves some dropped, some not. */
        if ((rc = move_hook(m, "source database dropped")) == 0 && left)
            rc = move_throttle_rest(&th, busy);
    }
    move_throttle_stop(&th);
    /* The rows go last: until the databases are gone they stay fenced. */
    if (rc == 0)
        rc = move_fence_delete(m);
    m->r->source_dropped = rc == 0;
    return rc;
}
