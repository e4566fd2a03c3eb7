/*
 * The move journal (libshard-move(7), "The journal"): one row per move in
 * libshard_control.moves on the target master, written each time the move
 * enters a phase, so that a killed mover can be resumed or aborted.
 */
#include "move.h"

#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const journal_columns[][2] = {
    /* added after the first release: created when missing */
    {"flip_gtid", "TEXT NOT NULL DEFAULT '' AFTER fence_gtid"},
    {"fence_statements", "INT UNSIGNED NOT NULL DEFAULT 0 AFTER fence_attempts"},
    {"flip_at", "TIMESTAMP(6) NULL DEFAULT NULL AFTER flip_gtid"}, /* verify.c */
    {"reverse_gtid", "TEXT NOT NULL DEFAULT '' AFTER flip_gtid"},
    {"reverse_window_s", "INT UNSIGNED NOT NULL DEFAULT 0 AFTER reverse_gtid"},
    {"reverse_until", "BIGINT UNSIGNED NOT NULL DEFAULT 0 AFTER reverse_window_s"},
    {"reverse_state", "TINYINT NOT NULL DEFAULT 0 AFTER reverse_until"},
    {"target_made", "TINYINT NOT NULL DEFAULT 0 AFTER reverse_state"},
    {"revert_step", "TINYINT NOT NULL DEFAULT 0 AFTER target_made"},
};

int move_journal_open(mv *m)
{
    const char *label = move_dp(m)->name;
    uint64_t id = 0;
    int rc;

    if ((rc = move_conn(m, &move_dp(m)->master, &m->ctl)))
        return shard__fail_prefix(rc, "target %s: ", label);
    if ((rc = move_runf(m->ctl, "CREATE DATABASE IF NOT EXISTS " CONTROL_DB)) ||
        (rc = move_runf(m->ctl,
                   "CREATE TABLE IF NOT EXISTS " MOVES_TABLE " ("
                   " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
                   " source_pair VARCHAR(64) NOT NULL, target_pair VARCHAR(64) NOT NULL,"
                   " first_shard INT UNSIGNED NOT NULL, last_shard INT UNSIGNED NOT NULL,"
                   " phase TINYINT NOT NULL, flags INT NOT NULL,"
                   " snapshot_gtid TEXT NOT NULL DEFAULT '',"
                   " fence_gtid TEXT NOT NULL DEFAULT '',"
                   " flip_gtid TEXT NOT NULL DEFAULT '',"
                   " reverse_gtid TEXT NOT NULL DEFAULT '',"
                   " reverse_window_s INT UNSIGNED NOT NULL DEFAULT 0,"
                   " reverse_until BIGINT UNSIGNED NOT NULL DEFAULT 0,"
                   " reverse_state TINYINT NOT NULL DEFAULT 0,"
                   " target_made TINYINT NOT NULL DEFAULT 0,"
                   " revert_step TINYINT NOT NULL DEFAULT 0,"
                   " map_version_from BIGINT UNSIGNED NOT NULL,"
                   " map_version_to BIGINT UNSIGNED NOT NULL DEFAULT 0,"
                   " rows_copied BIGINT UNSIGNED NOT NULL DEFAULT 0,"
                   " bytes_copied BIGINT UNSIGNED NOT NULL DEFAULT 0,"
                   " rows_verified BIGINT UNSIGNED NOT NULL DEFAULT 0,"
                   " mismatches BIGINT UNSIGNED NOT NULL DEFAULT 0,"
                   " copy_seconds DOUBLE NOT NULL DEFAULT 0,"
                   " catchup_seconds DOUBLE NOT NULL DEFAULT 0,"
                   " cutover_seconds DOUBLE NOT NULL DEFAULT 0,"
                   " verify_seconds DOUBLE NOT NULL DEFAULT 0,"
                   " pause_ms DOUBLE NOT NULL DEFAULT 0,"
                   " fence_attempts INT UNSIGNED NOT NULL DEFAULT 0,"
                   " fence_statements INT UNSIGNED NOT NULL DEFAULT 0,"
                   " source_dropped TINYINT NOT NULL DEFAULT 0,"
                   " message VARCHAR(1024) NOT NULL DEFAULT '',"
                   " created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
                   " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
                   " ON UPDATE CURRENT_TIMESTAMP(6)) ENGINE=InnoDB")))
        return shard__fail_prefix(rc, "move journal on %s: ", label);
    for (size_t i = 0; i < sizeof journal_columns / sizeof journal_columns[0]; i++) {
        char sql[300];
        uint64_t has = 0;
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE"
                 " TABLE_SCHEMA = '" CONTROL_DB "' AND TABLE_NAME = 'moves' AND"
                 " COLUMN_NAME = '%s'", journal_columns[i][0]);
        if ((rc = repl_value_u64(m->ctl, sql, &has)) ||
            (!has && (rc = move_runf(m->ctl, "ALTER TABLE " MOVES_TABLE " ADD"
                                     " COLUMN IF NOT EXISTS %s %s", journal_columns[i][0],
                                     journal_columns[i][1]))))
            return shard__fail_prefix(rc, "move journal on %s: ", label);
    }
    {
        /* Journals made when positions were VARCHAR(1024): a source with
         * many GTID domains has longer ones. */
        uint64_t narrow = 0;
        if ((rc = repl_value_u64(m->ctl, "SELECT COUNT(*) FROM information_schema.COLUMNS"
                                 " WHERE TABLE_SCHEMA = '" CONTROL_DB "' AND TABLE_NAME ="
                                 " 'moves' AND COLUMN_NAME IN ('snapshot_gtid', 'fence_gtid')"
                                 " AND DATA_TYPE = 'varchar'", &narrow)) ||
            (narrow && (rc = move_runf(m->ctl, "ALTER TABLE " MOVES_TABLE " MODIFY"
                                       " snapshot_gtid TEXT NOT NULL DEFAULT '', MODIFY"
                                       " fence_gtid TEXT NOT NULL DEFAULT ''"))))
            return shard__fail_prefix(rc, "move journal on %s: ", label);
    }
    /* Move IDs are unique across targets: each journal counts from its
     * server_id * 10^9 (ALTER only raises the counter, never lowers it).
     * A journal with a move of that range counts from there already: no
     * ALTER, which is DDL on a server that serves writes (move_ddl). */
    if ((rc = repl_value_u64(m->ctl, "SELECT @@server_id", &id)) == 0) {
        char sql[160];
        uint64_t have = 0;
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM " MOVES_TABLE " WHERE id > %llu",
                 (unsigned long long)(id * 1000000000ULL));
        if ((rc = repl_value_u64(m->ctl, sql, &have)) == 0 && !have)
            rc = move_ddlf(m->ctl, "ALTER TABLE " MOVES_TABLE " AUTO_INCREMENT = %llu",
                           (unsigned long long)(id * 1000000000ULL + 1));
    }
    if (rc)
        return shard__fail_prefix(rc, "move journal on %s: ", label);
    return 0;
}

/* Only one mover per move: a named lock held by the journal connection. */
int move_journal_lock(mv *m)
{
    char sql[128];
    uint64_t got = 0;
    int rc;

    if (!m->id)
        return 0;
    snprintf(sql, sizeof sql, "SELECT GET_LOCK('libshard move %llu', 0)",
             (unsigned long long)m->id);
    if ((rc = repl_value_u64(m->ctl, sql, &got)))
        return rc;
    if (got != 1)
        return shard__fail(SHARD_EBUSY, "move %llu is being run by another mover right now",
                          (unsigned long long)m->id);
    return 0;
}

int move_journal_lock_held(mv *m)
{
    char sql[128];
    uint64_t mine = 0;

    if (!m->id)
        return 0;
    snprintf(sql, sizeof sql, "SELECT COALESCE(IS_USED_LOCK('libshard move %llu') ="
             " CONNECTION_ID(), 0)", (unsigned long long)m->id);
    if (repl_value_u64(m->ctl, sql, &mine) == 0 && mine == 1)
        return 0;
    return shard__fail(SHARD_ECONFLICT, "move %llu no longer holds its lock on the target "
                      "master (its journal connection was lost): not publishing",
                      (unsigned long long)m->id);
}

/* A GTID position (checked: digits, '-' and ',') as a quoted literal, of
 * any length. */
static void add_gtid(sqlbuf *q, const char *pos)
{
    pos = pos && repl_gtid_valid(pos) ? pos : "";
    sql_add(q, "'");
    sql_add(q, pos);
    sql_add(q, "'");
}

static int journal_write(mv *m, const char *message)
{
    shard_move_report *r = m->r;
    sqlbuf q;
    int rc;

    sql_init(&q);
    /* A revert's phases are one public phase, reverting; the step is the
     * phase of the machine it runs in the other direction. */
    sql_addf(&q, "UPDATE " MOVES_TABLE " SET phase = %d, revert_step = %d, snapshot_gtid = ",
             move_public_phase(m), m->dir && !move_over((int)m->phase) ? (int)m->phase : 0);
    add_gtid(&q, m->snap);
    sql_add(&q, ", fence_gtid = ");
    add_gtid(&q, m->fence);
    sql_add(&q, ", flip_gtid = ");
    add_gtid(&q, m->flip);
    sql_add(&q, ", reverse_gtid = ");
    add_gtid(&q, m->rev);
    sql_addf(&q, ", reverse_window_s = %u, reverse_until = %llu, reverse_state = %d,"
                 " target_made = %d", m->window_s, (unsigned long long)m->reverse_until,
             m->reverse_state, m->target_ours ? 1 : 0);
    sql_addf(&q, ", map_version_to = %llu, rows_copied = %llu, bytes_copied = %llu,"
                 " rows_verified = %llu, mismatches = %llu, fence_attempts = %u,"
                 " fence_statements = %u, source_dropped = %d,",
             (unsigned long long)r->map_version, (unsigned long long)r->rows_copied,
             (unsigned long long)r->bytes_copied, (unsigned long long)r->rows_verified,
             (unsigned long long)r->mismatches, r->fence_attempts, m->fence_statements,
             r->source_dropped);
    sql_addf(&q, " copy_seconds = %.3f, catchup_seconds = %.3f, cutover_seconds = %.3f,"
                 " verify_seconds = %.3f, pause_ms = %.1f, message = ",
             r->copy_seconds, r->catchup_seconds, r->cutover_seconds, r->verify_seconds,
             r->pause_ms);
    message = message ? message : "";
    sql_hex(&q, message, strlen(message) > 1000 ? 1000 : strlen(message));
    sql_addf(&q, " WHERE id = %llu", (unsigned long long)m->id);
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(m->ctl, &q);
    sql_free(&q);
    if (rc)
        return shard__fail_prefix(rc, "move %llu journal: ", (unsigned long long)m->id);
    return 0;
}

int move_enter(mv *m, move_phase phase, const char *msg)
{
    int rc;

    m->phase = phase;
    m->r->phase = move_public_phase(m);
    if (m->id && (rc = journal_write(m, msg)))
        return rc;
    /* The run that reports done there tells its caller done instead. */
    if (!(phase == MOVE_DROPPING && m->reported))
        move_progress(m, m->r->phase, 0, 0);
    ctx_log(m->ctx, SHARD_LOG_INFO, "move %llu: %s%s%s%s%s", (unsigned long long)m->id,
            shard_move_phase_name(m->r->phase), m->r->phase == MOVE_REVERTING ? " " : "",
            m->r->phase == MOVE_REVERTING ? shard_move_phase_name((int)phase) : "",
            msg && *msg ? ": " : "", msg ? msg : "");
    return move_hook(m, "entered");
}

int move_journal_save(mv *m, const char *msg)
{
    return m->id ? journal_write(m, msg) : 0;
}

void move_note(mv *m, const char *msg)
{
    shard_errsave saved;

    if (!m->ctl || !m->id)
        return;
    shard__error_save(&saved, 0);
    journal_write(m, msg); /* best effort: the failure being noted matters more */
    shard__error_restore(&saved);
}

int move_journal_insert(mv *m)
{
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "INSERT INTO " MOVES_TABLE " (source_pair, target_pair, first_shard,"
                " last_shard, phase, flags, map_version_from) VALUES (");
    sql_hex(&q, move_sp(m)->name, strlen(move_sp(m)->name));
    sql_add(&q, ", ");
    sql_hex(&q, move_dp(m)->name, strlen(move_dp(m)->name));
    sql_addf(&q, ", %u, %u, %d, %d, %llu)", m->first, m->last, SHARD_MOVE_PLANNED,
             m->o.flags & ~SHARD_MOVE_DRY_RUN, (unsigned long long)m->version_from);
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(m->ctl, &q);
    sql_free(&q);
    if (rc)
        return rc;
    m->id = mysql_insert_id(m->ctl->my);
    m->r->move_id = m->id;
    move_link_names(m);
    return move_journal_lock(m);
}

/* ---- finding moves: resume, abort, failover's check ------------------------------ */

/* A live mover holds its move's named lock on the journal's server, on the
 * connection that writes the journal (move_journal_lock). */
#define MOVE_RUNNING_SQL "IS_USED_LOCK(CONCAT('libshard move ', id)) IS NOT NULL"

static int rows_add(move_row **rows, size_t *n, size_t *cap, MYSQL_ROW row)
{
    move_row *j;

    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        move_row *nr = shard__realloc(*rows, nc * sizeof *nr);
        if (!nr)
            return shard__fail(SHARD_ENOMEM, "out of memory");
        *rows = nr;
        *cap = nc;
    }
    j = &(*rows)[(*n)++];
    memset(j, 0, sizeof *j);
    j->id = strtoull(row[0], NULL, 10);
    snprintf(j->source, sizeof j->source, "%s", row[1]);
    snprintf(j->target, sizeof j->target, "%s", row[2]);
    j->first = (unsigned)strtoul(row[3], NULL, 10);
    j->last = (unsigned)strtoul(row[4], NULL, 10);
    j->phase = atoi(row[5]);
    j->flags = atoi(row[6]);
    j->version_from = strtoull(row[7], NULL, 10);
    j->reverse_until = strtoull(row[8], NULL, 10);
    j->window_s = (unsigned)strtoul(row[9], NULL, 10);
    j->reverse_state = atoi(row[10]);
    j->running = atoi(row[11]) != 0;
    return 0;
}

/* Moves on every master of map: unfinished ones, or (over) ones over. */
static int find_moves(shard_ctx *ctx, const shard_map *map, uint64_t id, bool over,
                      move_row **rows, size_t *n)
{
    const char *which = over ? "phase IN " MOVE_OVER_SQL : "phase NOT IN " MOVE_OVER_SQL;

    size_t cap = 0;
    int rc = 0;

    *rows = NULL;
    *n = 0;
    for (size_t p = 0; rc == 0 && p < map->npairs; p++) {
        shard_server *s = ctx_server(ctx, map, p);
        shard_conn *c = NULL;
        MYSQL_RES *res;
        MYSQL_ROW row;
        char sql[500];

        if (!s) {
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
            break;
        }
        if ((rc = conn_get(ctx, s, &c))) {
            rc = shard__fail_prefix(rc, "pair %s's master %s holds a move journal that cannot "
                                   "be read: ", map->pairs[p].name,
                                   map->pairs[p].master.text);
            break;
        }
        snprintf(sql, sizeof sql, "SELECT id, source_pair, target_pair, first_shard,"
                 " last_shard, phase, flags, map_version_from, reverse_until,"
                 " reverse_window_s, reverse_state, " MOVE_RUNNING_SQL " FROM " MOVES_TABLE
                 " WHERE %s AND (%llu = 0 OR id = %llu) ORDER BY id", which,
                 (unsigned long long)id, (unsigned long long)id);
        rc = conn_query_str(c, sql);
        if (rc && c->last_errno == ER_BAD_FIELD_ERROR) {
            /* A journal from before reverse windows: nothing of it is reversible. */
            snprintf(sql, sizeof sql, "SELECT id, source_pair, target_pair, first_shard,"
                     " last_shard, phase, flags, map_version_from, 0, 0, 0, " MOVE_RUNNING_SQL
                     " FROM "
                     MOVES_TABLE " WHERE %s AND (%llu = 0 OR id = %llu) ORDER BY id", which,
                     (unsigned long long)id, (unsigned long long)id);
            rc = conn_query_str(c, sql);
        }
        if (rc && (c->last_errno == ER_NO_SUCH_TABLE || c->last_errno == ER_BAD_DB_ERROR)) {
            conn_put(c, true); /* no journal here: no move has had this target */
            rc = 0;
            continue;
        }
        if (rc) {
            conn_put(c, false);
            rc = shard__fail_prefix(rc, "move journal on pair %s's master %s: ",
                                   map->pairs[p].name, map->pairs[p].master.text);
            break;
        }
        if (!(res = mysql_store_result(c->my))) {
            rc = shard__fail(SHARD_ESERVER, "move journal on %s: %s", map->pairs[p].master.text,
                            mysql_error(c->my));
            conn_put(c, false);
            break;
        }
        while (rc == 0 && (row = mysql_fetch_row(res)))
            rc = rows_add(rows, n, &cap, row);
        mysql_free_result(res);
        conn_put(c, true);
    }
    if (rc) {
        free(*rows);
        *rows = NULL;
        *n = 0;
    }
    return rc;
}

int move_find(shard_ctx *ctx, const shard_map *map, uint64_t id, move_row **rows,
              size_t *n)
{
    return find_moves(ctx, map, id, false, rows, n);
}

int move_find_over(shard_ctx *ctx, const shard_map *map, uint64_t id, move_row *row,
                   bool *found)
{
    move_row *rows = NULL;
    size_t n = 0;
    int rc = find_moves(ctx, map, id, true, &rows, &n);

    *found = rc == 0 && n > 0;
    if (*found)
        *row = rows[0];
    free(rows);
    return rc;
}

void move_next_steps(uint64_t id, int phase, bool running, char *buf, size_t size)
{
    unsigned long long n = (unsigned long long)id;

    if (running)
        snprintf(buf, size, "is being run by a mover right now (phase %s): wait for it to "
                 "end (shardctl move status %llu)", shard_move_phase_name(phase), n);
    else if (phase < MOVE_FLIPPED)
        snprintf(buf, size, "was interrupted in phase %s, before its flip: resume it "
                 "(shardctl move resume %llu) or abort it (shardctl move abort %llu)",
                 shard_move_phase_name(phase), n, n);
    else if (phase == MOVE_REVERSIBLE)
        snprintf(buf, size, "is flipped and keeps its reverse window: finish it (shardctl "
                 "move finish %llu) or revert it (shardctl move revert %llu)", n, n);
    else if (phase == MOVE_DROPPING)
        snprintf(buf, size, "is done and left its source's copies to drop: resume it to drop "
                 "them (shardctl move resume %llu)", n);
    else if (phase == MOVE_REVERTING)
        snprintf(buf, size, "was interrupted reverting: resume the revert (shardctl move "
                 "revert %llu)", n);
    else
        snprintf(buf, size, "was interrupted in phase %s, after its flip: resume it "
                 "(shardctl move resume %llu)", shard_move_phase_name(phase), n);
}

int move_refuse_unfinished(shard_ctx *ctx, const shard_map *map, const char *pair,
                           const char *what, const char *besides)
{
    move_row *rows = NULL;
    size_t n = 0;
    int rc;

    if ((rc = move_find(ctx, map, 0, &rows, &n)))
        /* could not look everywhere: never "no move" */
        return shard__fail_prefix(rc, "%s: cannot tell whether a move involving %s is "
                                 "unfinished: ", what, pair);
    for (size_t i = 0; i < n && rc == 0; i++)
        /* A move left dropping is flipped and verified, its replication
         * gone: it holds nothing a failover or a rebalance must wait for
         * (its drops follow the map's master; a move of its shards
         * finishes them first). */
        if (rows[i].phase != MOVE_DROPPING &&
            (strcmp(rows[i].source, pair) == 0 || strcmp(rows[i].target, pair) == 0)) {
            char steps[400];
            move_next_steps(rows[i].id, rows[i].phase, rows[i].running, steps, sizeof steps);
            rc = shard__fail(SHARD_EBUSY, "%s: unfinished move %llu (shards %u-%u, %s to %s) %s%s%s", what,
                            (unsigned long long)rows[i].id, rows[i].first, rows[i].last,
                            rows[i].source, rows[i].target, steps, besides ? "; " : "",
                            besides ? besides : "");
        }
    free(rows);
    return rc;
}

/* The positions a run left in the journal. */
static int load_positions(mv *m)
{
    static const char *const cols[] = {"snapshot_gtid", "fence_gtid", "flip_gtid",
                                       "reverse_gtid"};
    char **slots[] = {&m->snap, &m->fence, &m->flip, &m->rev};
    int rc;

    for (size_t i = 0; i < 4; i++) {
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT %s FROM " MOVES_TABLE " WHERE id = %llu",
                 cols[i], (unsigned long long)m->id);
        free(*slots[i]);
        *slots[i] = NULL;
        if ((rc = repl_value(m->ctl, sql, slots[i])) || (rc = repl_gtid_check(*slots[i])))
            return shard__fail_prefix(rc, "move %llu journal: ", (unsigned long long)m->id);
    }
    return 0;
}

/* One number of the move's journal row. */
static int journal_u64(mv *m, const char *column, uint64_t *v)
{
    char sql[160];
    int rc;

    *v = 0;
    snprintf(sql, sizeof sql, "SELECT %s FROM " MOVES_TABLE " WHERE id = %llu", column,
             (unsigned long long)m->id);
    if ((rc = repl_value_u64(m->ctl, sql, v)))
        return shard__fail_prefix(rc, "move %llu journal: ", (unsigned long long)m->id);
    return 0;
}

int move_load(shard_ctx *ctx, uint64_t id, mv *m)
{
    move_row *rows = NULL, *j;
    uint64_t made = 0, step = 0;
    size_t n = 0;
    int rc;

    if ((rc = move_find(ctx, m->map, id, &rows, &n)))
        return rc;
    if (n == 0) {
        free(rows);
        return id ? shard__fail(SHARD_ENOTFOUND, "no unfinished move %llu",
                               (unsigned long long)id)
                  : shard__fail(SHARD_ENOTFOUND, "no unfinished move");
    }
    if (n > 1 && !id) {
        /* A move left dropping is done for its user: "the only unfinished
         * one" is the other one, when there is just one other. */
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (rows[i].phase != MOVE_DROPPING)
                rows[k++] = rows[i];
        n = k ? k : n;
    }
    if (n > 1) {
        sqlbuf ids;
        sql_init(&ids);
        for (size_t i = 0; i < n && i < 20; i++)
            sql_addf(&ids, "%s%llu", i ? ", " : "", (unsigned long long)rows[i].id);
        rc = shard__fail(SHARD_EINVAL, "%zu unfinished moves (%s%s): name one (shardctl move "
                        "status)", n, ids.s ? ids.s : "", n > 20 ? ", ..." : "");
        sql_free(&ids);
        free(rows);
        return rc;
    }
    j = &rows[0];
    m->id = j->id;
    m->resumed = true;
    m->first = j->first;
    m->last = j->last;
    m->phase = (move_phase)j->phase;
    m->version_from = j->version_from;
    m->o.flags |= j->flags & SHARD_MOVE_KEEP_SOURCE;
    m->window_s = j->window_s;
    m->reverse_until = j->reverse_until;
    m->reverse_state = j->reverse_state;
    m->sides[0].pi = shard__map_find_pair(m->map, j->source);
    m->sides[1].pi = shard__map_find_pair(m->map, j->target);
    if (m->sides[0].pi < 0 || m->sides[1].pi < 0) {
        rc = shard__fail(SHARD_EINVAL, "move %llu names pairs %s and %s; the map lacks one",
                        (unsigned long long)m->id, j->source, j->target);
        free(rows);
        return rc;
    }
    move_link_names(m);
    snprintf(m->r->source, sizeof m->r->source, "%s", j->source);
    snprintf(m->r->target, sizeof m->r->target, "%s", j->target);
    free(rows);
    m->r->move_id = m->id;
    m->r->first = m->first;
    m->r->last = m->last;
    m->r->phase = (int)m->phase;
    if ((rc = move_journal_open(m)) || (rc = move_journal_lock(m)) || (rc = load_positions(m)))
        return rc;
    /* Whether the target's copies are this move's: a move that got past
     * planning made them; one in planning says so before it makes them
     * (what was there before is never dropped). */
    if ((rc = journal_u64(m, "target_made", &made)))
        return rc;
    m->target_ours = made != 0 || m->phase != MOVE_PLANNED;
    if (m->phase == MOVE_REVERTING) {
        /* A revert's step; a journal from before the steps knew none: from
         * the fence, whose resume finds out whether the flip back landed. */
        if ((rc = journal_u64(m, "revert_step", &step)))
            return rc;
        m->dir = 1;
        m->phase = step >= MOVE_CATCHUP && step <= MOVE_CLEANING ? (move_phase)step
                                                                   : MOVE_FENCED;
        snprintf(m->r->source, sizeof m->r->source, "%s", move_sp(m)->name);
        snprintf(m->r->target, sizeof m->r->target, "%s", move_dp(m)->name);
    }
    return 0;
}
