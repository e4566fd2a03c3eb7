/*
 * The cut-over (libshard-move(7), phases fenced and flipped): the fence on
 * the source, the target's snapshots for verification, the new map
 * published with compare-and-swap, the flip-time position.
 */
#include "move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rename every moved table away (or back), in one atomic statement, kept
 * out of the binary log so the target never sees it. */
int move_fence_set(mv *m, bool on)
{
    sqlbuf q;
    int rc;

    if ((rc = move_runf(m->src, "SET SESSION sql_log_bin = 0, lock_wait_timeout = %u",
                        m->o.fence_timeout_s ? m->o.fence_timeout_s : 1)))
        return rc;
    sql_init(&q);
    sql_add(&q, "RENAME TABLE ");
    for (size_t i = 0; i < m->ntables; i++) {
        const mtable *t = &m->tables[i];
        sql_addf(&q, "%s`%s`.`%s%s` TO `%s`.`%s%s`", i ? ", " : "", t->db,
                 on ? "" : SHARD_FENCE_PREFIX, t->name, t->db, on ? SHARD_FENCE_PREFIX : "",
                 t->name);
    }
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(m->src, &q);
    sql_free(&q);
    m->fence_statements = 1;
    {
        shard_errsave saved;
        shard_error_save(&saved, rc);
        if (move_runf(m->src, "SET SESSION sql_log_bin = 1") && rc == 0)
            return SHARD_ESERVER;
        return shard_error_restore(&saved);
    }
}

int move_fence_state(mv *m, bool *on)
{
    char sql[300];
    uint64_t n = 0;
    int rc;

    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.TABLES WHERE"
             " TABLE_SCHEMA = '%s' AND TABLE_NAME = '" SHARD_FENCE_PREFIX "%s'",
             m->tables[0].db, m->tables[0].name);
    rc = repl_value_u64(m->src, sql, &n);
    *on = n != 0;
    return rc;
}

bool move_flipped_in_store(mv *m)
{
    shard_map *cur = NULL;
    bool all = true;

    if (shard_store_load(m->ctx->store, &cur))
        return false;
    for (unsigned s = m->first; s <= m->last && all; s++) {
        long p = shard_map_pair_index(cur, s);
        all = p >= 0 && strcmp(cur->pairs[p].name, move_dp(m)->name) == 0;
    }
    shard_map_free(cur);
    return all;
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
