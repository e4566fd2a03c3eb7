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
    shard_error_save(&saved, rc);
    urc = move_runf(m->src, "SET SESSION lock_wait_timeout = DEFAULT,"
                    " innodb_lock_wait_timeout = DEFAULT");
    if (rc)
        return shard_error_restore(&saved);
    if (urc)
        return urc;
    if (on && matched != want) {
        /* Rows missing: the fence would not hold for every shard (a
         * missing row is unfenced, so lifting needs no such check). */
        move_fence_update(m, m->src, false, &matched);
        return shard_fail(SHARD_EINTERNAL, "the fence found %llu of the %llu fence rows of "
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
    sql_add(&q, "SELECT COUNT(*) FROM " MOVE_FENCE_TABLE " WHERE fenced = 1 AND db IN (");
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
        return shard_fail_prefix(rc, "reading the map store: ");
    for (unsigned s = m->first; s <= m->last && all; s++) {
        long p = shard_map_pair_index(cur, s);
        all = p >= 0 && strcmp(cur->pairs[p].name, move_dp(m)->name) == 0;
    }
    shard_map_free(cur);
    return all ? 1 : 0;
}

/* The new map: the moved range on the target. */
static int flip_edit(const shard_map *cur, shard_map **next, void *arg)
{
    mv *m = arg;
    bool all_target = true, some_source = false;

    for (unsigned s = m->first; s <= m->last; s++) {
        long p = shard_map_pair_index(cur, s);
        const char *pn = p >= 0 ? cur->pairs[p].name : "";
        all_target &= strcmp(pn, move_dp(m)->name) == 0;
        some_source |= strcmp(pn, move_sp(m)->name) == 0;
    }
    if (all_target) /* a resumed move whose flip already happened */
        return REPL_UNCHANGED;
    if (!some_source || shard_map_find_pair(cur, move_dp(m)->name) < 0)
        return shard_fail(SHARD_ECONFLICT, "the stored map no longer has shards %u-%u on %s: "
                          "another change moved them", m->first, m->last, move_sp(m)->name);
    return map_reassign(cur, m->first, m->last, move_dp(m)->name, cur->version + 1, next);
}

int move_publish(mv *m)
{
    int rc = repl_publish(m->ctx, flip_edit, m, &m->r->map_version);
    return rc ? shard_fail_prefix(rc, "publishing the map: ") : 0;
}

/* The target master's position just after the flip: everything moved is
 * in it, and cleanup waits until the target's standby has it too. */
int move_read_flip(mv *m)
{
    char *pos = NULL;
    int rc = repl_value(m->t, "SELECT @@gtid_binlog_pos", &pos);

    if (rc == 0 && (rc = repl_gtid_check(pos)) == 0) {
        free(m->flip);
        m->flip = pos;
        return 0;
    }
    free(pos);
    return rc;
}

/* One snapshot per verifying worker, all of the target as it is now. */
int move_open_vsnaps(mv *m)
{
    unsigned n = fanout_workers(m->ntables, move_threads(m));
    int rc = 0;

    move_close_vsnaps(m);
    for (unsigned w = 0; rc == 0 && w < n; w++) {
        if ((rc = move_conn(m, &move_dp(m)->master, &m->vsnap[w])))
            break;
        m->nvsnap = w + 1;
        if ((rc = move_runf(m->vsnap[w], "SET SESSION time_zone = '+00:00'")) == 0)
            rc = move_runf(m->vsnap[w], "START TRANSACTION WITH CONSISTENT SNAPSHOT");
    }
    return rc;
}

void move_close_vsnaps(mv *m)
{
    for (unsigned w = 0; w < m->nvsnap; w++)
        move_close(&m->vsnap[w]);
    m->nvsnap = 0;
}
