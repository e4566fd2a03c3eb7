/*
 * Planning a move (libshard-move(7), "Before you start" and phase
 * planned): the pairs, the checks on all four servers, the moved tables,
 * and the target's databases (their tables, from the source's own
 * definitions, are made by the copy: copy.c).
 */
#include "move.h"

#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int move_resolve_pairs(mv *m, const char *target)
{
    const shard_map *map = m->map;
    long pi = -1;

    if (m->first > m->last || m->last > SHARD_MAX_SHARD)
        return shard__fail(SHARD_EINVAL, "bad shard range %u-%u", m->first, m->last);
    for (unsigned s = m->first; s <= m->last; s++) {
        long p = shard__map_pair_index(map, s);
        if (p < 0)
            return shard__fail(SHARD_EINVAL, "shard %u is not in any range of map version "
                              "%llu", s, (unsigned long long)map->version);
        if (pi >= 0 && p != pi)
            return shard__fail(SHARD_EINVAL, "shards %u-%u span pairs %s and %s: move each "
                              "pair's part separately", m->first, m->last,
                              map->pairs[pi].name, map->pairs[p].name);
        pi = p;
    }
    m->sides[0].pi = pi;
    m->sides[1].pi = shard__map_find_pair(map, target);
    if (m->sides[1].pi < 0)
        return shard__fail(SHARD_EINVAL, "no pair named \"%.64s\" in the map", target);
    if (m->sides[1].pi == m->sides[0].pi)
        return shard__fail(SHARD_EINVAL, "shards %u-%u are already on %s", m->first, m->last,
                          target);
    if (move_sp(m)->master.socket[0])
        return shard__fail(SHARD_EINVAL, "source %s's master %s is a unix socket: the "
                          "target replicates from it, so it needs a host:port address",
                          move_sp(m)->name, move_sp(m)->master.text);
    snprintf(m->r->source, sizeof m->r->source, "%s", move_sp(m)->name);
    snprintf(m->r->target, sizeof m->r->target, "%s", move_dp(m)->name);
    m->r->first = m->first;
    m->r->last = m->last;
    return 0;
}

typedef struct srvinfo {
    char label[400];
    unsigned long server_id, domain, inc, offset;
    int log_bin, row, ignore_dups, log_slave_updates;
} srvinfo;

static int probe(mv *m, const shard_endpoint *ep, const char *label, srvinfo *si)
{
    shard_conn *c = NULL;
    MYSQL_RES *res;
    MYSQL_ROW row;
    int rc;

    snprintf(si->label, sizeof si->label, "%s", label);
    if ((rc = move_conn(m, ep, &c)))
        return shard__fail_prefix(rc, "%s: ", label);
    rc = conn_query_str(c, "SELECT @@server_id, @@gtid_domain_id, @@log_bin,"
                           " @@binlog_format = 'ROW', @@gtid_ignore_duplicates,"
                           " @@auto_increment_increment, @@auto_increment_offset,"
                           " @@log_slave_updates");
    if (rc == 0 && (res = mysql_store_result(c->my)) && (row = mysql_fetch_row(res))) {
        si->server_id = strtoul(row[0], NULL, 10);
        si->domain = strtoul(row[1], NULL, 10);
        si->log_bin = atoi(row[2]);
        si->row = atoi(row[3]);
        si->ignore_dups = atoi(row[4]);
        si->inc = strtoul(row[5], NULL, 10);
        si->offset = strtoul(row[6], NULL, 10);
        si->log_slave_updates = atoi(row[7]);
        mysql_free_result(res);
    } else if (rc == 0) {
        rc = shard__fail(SHARD_ESERVER, "%s", mysql_error(c->my));
    }
    move_close(&c);
    return rc ? shard__fail_prefix(rc, "%s: ", label) : 0;
}

/* The target pair's halves hand out disjoint local ids: the moved rows and
 * the writes after the flip may land on either (shard_pair_failover(3)). */
static int disjoint_ids(const srvinfo *a, const srvinfo *b)
{
    if (a->inc < 2 || a->inc != b->inc || a->offset == b->offset)
        return shard__fail(SHARD_EINVAL, "%s (auto_increment_increment %lu, offset %lu) and %s "
                          "(%lu, %lu) could hand out the same local ids: give both halves "
                          "of the pair the same auto_increment_increment (2 or more) and "
                          "different auto_increment_offset values",
                          a->label, a->inc, a->offset, b->label, b->inc, b->offset);
    return 0;
}

/* Both pairs must be able to take part: libshard-move(7), "Before you start". */
int move_preflight(mv *m, sqlbuf *plan)
{
    const shard_pairdef *sp = move_sp(m), *dp = move_dp(m);
    srvinfo s[4];
    size_t n = 0, tm;
    char label[400];
    int rc;

    snprintf(label, sizeof label, "source %s master %s", sp->name, sp->master.text);
    if ((rc = probe(m, &sp->master, label, &s[n++])))
        return rc;
    if (!s[0].log_bin || !s[0].row)
        return shard__fail(SHARD_EINVAL, "%s: needs log_bin=ON and binlog_format=ROW", label);
    /* A reverse window replicates into the source: the same rule as for a
     * target (the reverse-applied rows come back through its standby). */
    if (m->window_s && sp->has_standby && !s[0].ignore_dups)
        return shard__fail(SHARD_EINVAL, "%s: a reverse window needs gtid_ignore_duplicates=ON "
                          "on both halves of the source", label);
    if (m->window_s && sp->has_standby && !s[0].log_slave_updates)
        return shard__fail(SHARD_EINVAL, "%s: a reverse window needs log_slave_updates=ON, or "
                          "the rows it replicates back never reach standby %s", label,
                          sp->standby.text);
    if (sp->has_standby) {
        snprintf(label, sizeof label, "source %s standby %s", sp->name, sp->standby.text);
        if ((rc = probe(m, &sp->standby, label, &s[n++])))
            return rc;
        if (m->window_s && !s[n - 1].ignore_dups)
            return shard__fail(SHARD_EINVAL, "%s: a reverse window needs "
                              "gtid_ignore_duplicates=ON", label);
    }
    snprintf(label, sizeof label, "target %s master %s", dp->name, dp->master.text);
    tm = n;
    if ((rc = probe(m, &dp->master, label, &s[n])))
        return rc;
    /* It must also run with skip-slave-start, which no variable shows:
     * replication filters are not kept across a restart (the catch-up
     * notices a connection that came back without its filter). */
    if (dp->has_standby && !s[n].ignore_dups)
        return shard__fail(SHARD_EINVAL, "%s: needs gtid_ignore_duplicates=ON, or the moved "
                          "rows coming back through its standby break the pair", label);
    /* The catch-up's rows reach the target's standby only through the
     * master's binary log, and the flip position cleanup waits for is
     * read from it: unlogged, they would live on one server only. */
    if (dp->has_standby && !s[n].log_slave_updates)
        return shard__fail(SHARD_EINVAL, "%s: needs log_slave_updates=ON, or the rows the move "
                          "replicates never reach standby %s", label, dp->standby.text);
    n++;
    if (dp->has_standby) {
        snprintf(label, sizeof label, "target %s standby %s", dp->name, dp->standby.text);
        if ((rc = probe(m, &dp->standby, label, &s[n])))
            return rc;
        if (!s[n].ignore_dups)
            return shard__fail(SHARD_EINVAL, "%s: needs gtid_ignore_duplicates=ON", label);
        n++;
        if ((rc = disjoint_ids(&s[tm], &s[tm + 1])))
            return rc;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            if (s[i].server_id == s[j].server_id)
                return shard__fail(SHARD_EINVAL, "%s and %s share server_id %lu",
                                  s[i].label, s[j].label, s[i].server_id);
            if (s[i].domain == s[j].domain)
                return shard__fail(SHARD_EINVAL, "%s and %s share gtid_domain_id %lu",
                                  s[i].label, s[j].label, s[i].domain);
        }
    if (plan)
        for (size_t i = 0; i < n; i++)
            sql_addf(plan, "check %s: server_id %lu, gtid_domain_id %lu, log_bin %d, "
                           "row format %d, auto_increment offset %lu of %lu, "
                           "log_slave_updates %d, gtid_ignore_duplicates %d: ok\n",
                     s[i].label, s[i].server_id, s[i].domain, s[i].log_bin, s[i].row,
                     s[i].offset, s[i].inc, s[i].log_slave_updates, s[i].ignore_dups);
    return 0;
}

/*
 * A resumed move checks again what a server restart can change (the
 * servers a move needs were restarted, often, which is why it stopped):
 * the target master logs what it replicates and ignores duplicates, and
 * with a reverse window the source master too. The halves that are only
 * waited for are not asked: one that is down must not keep a fenced move
 * from going on.
 */
int move_recheck(mv *m)
{
    const shard_pairdef *sp = move_sp(m), *dp = move_dp(m);
    char label[400];
    srvinfo si;
    int rc;

    if (dp->has_standby) {
        snprintf(label, sizeof label, "target %s master %s", dp->name, dp->master.text);
        if ((rc = probe(m, &dp->master, label, &si)))
            return rc;
        if (!si.ignore_dups || !si.log_slave_updates)
            return shard__fail(SHARD_EINVAL, "%s: needs gtid_ignore_duplicates=ON and "
                              "log_slave_updates=ON (it has %d and %d since the move began: "
                              "restarted with other settings?); set them, then resume move %llu",
                              label, si.ignore_dups, si.log_slave_updates,
                              (unsigned long long)m->id);
    }
    if (m->window_s && sp->has_standby && m->phase <= MOVE_REVERTING) {
        snprintf(label, sizeof label, "source %s master %s", sp->name, sp->master.text);
        if ((rc = probe(m, &sp->master, label, &si)))
            return rc;
        if (!si.ignore_dups || !si.log_slave_updates)
            return shard__fail(SHARD_EINVAL, "%s: a reverse window needs gtid_ignore_duplicates=ON "
                              "and log_slave_updates=ON (it has %d and %d); set them, then "
                              "resume move %llu", label, si.ignore_dups, si.log_slave_updates,
                              (unsigned long long)m->id);
    }
    return 0;
}

static int tables_add(mv *m, size_t *cap, const char *db, const char *name)
{
    if (m->ntables == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        mtable *t = shard__realloc(m->tables, nc * sizeof *t);
        if (!t)
            return shard__fail(SHARD_ENOMEM, "out of memory");
        m->tables = t;
        *cap = nc;
    }
    memset(&m->tables[m->ntables], 0, sizeof *m->tables);
    snprintf(m->tables[m->ntables].db, SHARD_DBNAME_MAX, "%s", db);
    snprintf(m->tables[m->ntables].name, 65, "%s", name);
    m->ntables++;
    return 0;
}

/*
 * The tables of every moved database on the source, in one query. A
 * database without tables is an error: apply the schema first.
 */
int move_list_tables(mv *m)
{
    size_t cap = 0;
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    free(m->tables);
    m->tables = NULL;
    m->ntables = 0;
    sql_init(&q);
    sql_add(&q, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE"
                " TABLE_SCHEMA IN (");
    move_db_list(m, &q, true);
    sql_add(&q, ") ORDER BY TABLE_SCHEMA, TABLE_NAME");
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(move_src(m), &q);
    sql_free(&q);
    if (rc)
        return rc;
    if (!(res = mysql_store_result(move_src(m)->my)))
        return shard__fail(SHARD_ESERVER, "%s", mysql_error(move_src(m)->my));
    while (rc == 0 && (row = mysql_fetch_row(res))) {
        if (!row[1][0] || row[1][0] == '_' || !move_name_ok(row[1]) || !move_name_ok(row[0]))
            continue; /* not ours: never put into a statement */
        rc = tables_add(m, &cap, row[0], row[1]);
    }
    mysql_free_result(res);
    if (rc)
        return rc;
    /* Every moved database must have tables. */
    for (unsigned s = m->first; s <= m->last; s++) {
        char db[SHARD_DBNAME_MAX];
        bool found = false;
        move_db(m, s, db);
        for (size_t i = 0; i < m->ntables && !found; i++)
            found = strcmp(m->tables[i].db, db) == 0;
        if (!found)
            return shard__fail(SHARD_ENOTFOUND, "source %s has no tables in %s (was the schema "
                              "applied?)", move_sp(m)->name, db);
    }
    m->r->tables = m->ntables;
    m->listed = true;
    return 0;
}

/* ---- the fence's table and rows (libshard-move(7), "The fence") -------------------- */

/* Run an unlogged statement about the moved databases' fence rows:
 * head + "'db1','db2',...)" + tail. *matched (may be NULL): the rows an
 * UPDATE found, from the server's "Rows matched: N  Changed: M" (rows
 * already as wanted count too, unlike ROW_COUNT()). */
static int fence_rows(mv *m, shard_conn *c, const char *head, const char *tail,
                      uint64_t *matched)
{
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, head);
    move_db_list(m, &q, true);
    sql_add(&q, tail);
    if (matched)
        *matched = 0;
    if ((rc = sql_check(&q)) == 0 && (rc = move_runf(c, "SET SESSION sql_log_bin = 0")) == 0) {
        shard_errsave saved;
        rc = conn_query(c, &q);
        if (rc == 0 && matched) {
            const char *info = mysql_info(c->my);
            const char *at = info ? strstr(info, "matched: ") : NULL;
            *matched = at ? strtoull(at + 9, NULL, 10) : 0;
        }
        shard__error_save(&saved, rc);
        if (move_runf(c, "SET SESSION sql_log_bin = 1") && rc == 0)
            rc = SHARD_ESERVER; /* the session must not stay unlogged */
        else
            rc = shard__error_restore(&saved);
    }
    sql_free(&q);
    return rc;
}

/* Each server keeps its own: nothing about the fence is ever logged. A
 * table that is there already is left alone (without a statement that a
 * read-only standby would refuse). */
static int control_table(shard_conn *c)
{
    uint64_t have = 0;
    int rc;

    if ((rc = repl_value_u64(c, "SELECT COUNT(*) FROM information_schema.TABLES WHERE"
                             " TABLE_SCHEMA = '" CONTROL_DB "' AND TABLE_NAME = 'fence'",
                             &have)) || have)
        return rc;
    if ((rc = move_runf(c, "SET SESSION sql_log_bin = 0")) == 0 &&
        (rc = move_runf(c, "CREATE DATABASE IF NOT EXISTS " CONTROL_DB)) == 0)
        rc = move_runf(c, "CREATE TABLE IF NOT EXISTS " FENCE_TABLE " ("
                          " db VARCHAR(64) NOT NULL PRIMARY KEY,"
                          " fenced TINYINT NOT NULL DEFAULT 0,"
                          " move_id BIGINT UNSIGNED NOT NULL DEFAULT 0,"
                          " changed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
                          " ON UPDATE CURRENT_TIMESTAMP(6)) ENGINE=InnoDB");
    return rc;
}

/* Stale fence rows of the moved databases on a server of the target: a
 * database that moved away from it once must not be fenced when it comes
 * back (deleted only when there are some). */
static int delete_stale(mv *m, shard_conn *c)
{
    uint64_t n = 0;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT COUNT(*) FROM " FENCE_TABLE " WHERE db IN (");
    move_db_list(m, &q, true);
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) == 0)
        rc = repl_value_u64(c, q.s, &n);
    sql_free(&q);
    if (rc == 0 && n)
        rc = fence_rows(m, c, "DELETE FROM " FENCE_TABLE " WHERE db IN (", ")", NULL);
    return rc;
}

/*
 * The moved databases fenced on the target master until the flip: the
 * copies made there serve nobody yet, and a client whose map is older
 * than an earlier move of the same shards (which left it routed here)
 * must not write into them (move_fence_target_lift after the publish).
 */
static int fence_target_rows(mv *m, shard_conn *c)
{
    sqlbuf ins;
    char tail[160];
    int rc;

    sql_init(&ins);
    sql_add(&ins, "INSERT INTO " FENCE_TABLE " (db, fenced, move_id) VALUES ");
    for (unsigned s = m->first; s <= m->last; s++) {
        char db[SHARD_DBNAME_MAX];
        move_db(m, s, db);
        sql_addf(&ins, "%s('%s', 1, %llu)", s == m->first ? "" : ",", db,
                 (unsigned long long)m->id);
    }
    snprintf(tail, sizeof tail, " ON DUPLICATE KEY UPDATE fenced = 1, move_id = %llu",
             (unsigned long long)m->id);
    sql_add(&ins, tail);
    if ((rc = sql_check(&ins)) == 0 && (rc = move_runf(c, "SET SESSION sql_log_bin = 0")) == 0) {
        shard_errsave saved;
        rc = conn_query(c, &ins);
        shard__error_save(&saved, rc);
        if (move_runf(c, "SET SESSION sql_log_bin = 1") && rc == 0)
            rc = SHARD_ESERVER;
        else
            rc = shard__error_restore(&saved);
    }
    sql_free(&ins);
    return rc;
}

int move_fence_target_lift(mv *m)
{
    uint64_t matched = 0;
    char head[200];
    int rc;

    snprintf(head, sizeof head, "UPDATE " FENCE_TABLE " SET fenced = 0, move_id = %llu"
             " WHERE db IN (", (unsigned long long)m->id);
    rc = fence_rows(m, move_tgt(m), head, ")", &matched);
    return rc ? shard__fail_prefix(rc, "lifting the fence on target %s: ", move_dp(m)->name) : 0;
}

int move_fence_target_delete(mv *m)
{
    int rc = fence_rows(m, move_tgt(m), "DELETE FROM " FENCE_TABLE " WHERE db IN (", ")", NULL);
    return rc ? shard__fail_prefix(rc, "fence rows on target %s: ", move_dp(m)->name) : 0;
}

/*
 * One server's part of the fence's preparation. A master must take it; a
 * standby that refuses (read-only, for an account without READ_ONLY
 * ADMIN) only gets a warning: the move needs nothing there, but should it
 * become master, its shards need the table (shardctl schema apply) and no
 * stale rows.
 */
static int prepare_server(mv *m, const shard_endpoint *ep, const char *label, bool target,
                          bool standby)
{
    shard_conn *c = NULL;
    int rc;

    /* The target's master fenced until the flip; its standby without
     * stale rows (should it become master after the flip, it serves). */
    if ((rc = move_conn(m, ep, &c)) == 0 && (rc = control_table(c)) == 0 && target)
        rc = standby ? delete_stale(m, c) : fence_target_rows(m, c);
    if (rc && standby && c && c->last_errno == ER_OPTION_PREVENTS_STATEMENT) {
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: fence table on %s %s left as it is: %s",
                (unsigned long long)m->id, label, ep->text, shard_errmsg());
        rc = 0;
    }
    move_close(&c); /* and its session's sql_log_bin with it */
    return rc ? shard__fail_prefix(rc, "fence table on %s %s: ", label, ep->text) : 0;
}

int move_fence_rows_source(mv *m)
{
    sqlbuf ins;
    int rc;

    /* One row per moved database, unfenced: a missing row also means "not
     * fenced", but a fence UPDATE can only fence rows that exist. */
    sql_init(&ins);
    for (unsigned s = m->first; s <= m->last; s++) {
        char db[SHARD_DBNAME_MAX];
        move_db(m, s, db);
        sql_addf(&ins, "%s('%s')", s == m->first ? "" : ",", db);
    }
    if ((rc = sql_check(&ins)) == 0 && (rc = move_runf(move_src(m), "SET SESSION sql_log_bin = 0")) == 0) {
        sqlbuf q;
        sql_init(&q);
        sql_add(&q, "INSERT IGNORE INTO " FENCE_TABLE " (db) VALUES ");
        sql_add(&q, ins.s);
        if ((rc = sql_check(&q)) == 0)
            rc = conn_query(move_src(m), &q);
        sql_free(&q);
        if (move_runf(move_src(m), "SET SESSION sql_log_bin = 1") && rc == 0)
            rc = SHARD_ESERVER;
    }
    sql_free(&ins);
    return rc ? shard__fail_prefix(rc, "fence rows on source %s: ", move_sp(m)->name) : 0;
}

int move_fence_prepare(mv *m)
{
    const shard_pairdef *sp = move_sp(m), *dp = move_dp(m);
    int rc;

    if ((rc = prepare_server(m, &sp->master, "source master", false, false)) ||
        (sp->has_standby &&
         (rc = prepare_server(m, &sp->standby, "source standby", false, true))) ||
        (rc = prepare_server(m, &dp->master, "target master", true, false)) ||
        (dp->has_standby &&
         (rc = prepare_server(m, &dp->standby, "target standby", true, true))))
        return rc;
    return move_fence_rows_source(m);
}

int move_fence_update(mv *m, shard_conn *c, bool on, uint64_t *matched)
{
    char head[200];

    snprintf(head, sizeof head, "UPDATE " FENCE_TABLE " SET fenced = %d, move_id = %llu"
             " WHERE db IN (", on ? 1 : 0, (unsigned long long)m->id);
    return fence_rows(m, c, head, ")", matched);
}

int move_fence_mark_flipped(mv *m)
{
    char head[200];

    snprintf(head, sizeof head, "UPDATE " FENCE_TABLE " SET fenced = %d WHERE fenced <> 0 AND "
             "move_id = %llu AND db IN (", FENCE_FLIPPED, (unsigned long long)m->id);
    return fence_rows(m, move_src(m), head, ")", NULL);
}

int move_fence_delete(mv *m)
{
    int rc = fence_rows(m, move_src(m), "DELETE FROM " FENCE_TABLE " WHERE db IN (", ")", NULL);
    return rc ? shard__fail_prefix(rc, "fence rows on source %s: ", move_sp(m)->name) : 0;
}

/* ---- the target's schema ---------------------------------------------------------- */

/* Per-database DDL runs over the move's workers: creating or dropping
 * 1536 tables one statement after another would take most of a move of
 * small shards. */
int move_drop_target(mv *m)
{
    m->target_made = false;
    return move_drop_dbs(m, MOVE_TARGET);
}

static int create_db_fn(void *arg, size_t i, unsigned w)
{
    mv *m = arg;
    char db[SHARD_DBNAME_MAX];
    shard_conn *c, *sb;
    int rc = move_wdst(m, w, &c);

    move_db(m, m->first + (unsigned)i, db);
    /* The standby's first (unlogged): the master's then reaches it as nothing. */
    if (rc == 0 && m->ddl_direct && (rc = move_wtsb(m, w, &sb)) == 0 &&
        (rc = move_runf(sb, "CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4", db)))
        shard__fail_prefix(rc, "target standby %s: ", move_dp(m)->standby.text);
    return rc ? rc : move_ddlf(c, "CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4",
                               db);
}

/*
 * Whether the target's standby gets the moved databases' DDL straight from
 * the mover (m->ddl_direct), unlogged, several statements at a time, just
 * before the master's logged statements (IF NOT EXISTS) reach it through
 * the pair's link and find everything made: that link applies on one
 * thread, and 1536 CREATE TABLEs applied one after another there (40 ms
 * each under load) kept the standby tens of seconds behind its master,
 * which the move's done waits for. The master's binary log still has
 * every statement. Only once the standby holds everything its master had
 * logged: a drop of these databases still on its way (an abort's, or an
 * earlier move's) would remove what the mover made there. A standby that
 * cannot be reached in time, or refuses (read-only for this account),
 * gets the DDL through the link, as before: a warning, not a failure.
 */
static void standby_direct(mv *m)
{
    double end = now_seconds() + MOVE_PAIR_WAIT_S;
    char db[SHARD_DBNAME_MAX], *pos = NULL;
    bool yes = false;
    shard_conn *sb;
    int rc;

    m->ddl_direct = false;
    if (!move_dp(m)->has_standby || m->dir)
        return;
    move_db(m, m->first, db);
    if ((rc = move_wtsb(m, 0, &sb)) == 0 && (rc = move_read_pos(move_tgt(m), &pos)) == 0)
        while ((rc = move_holds(sb, pos, NULL, 0, &yes)) == 0 && !yes && now_seconds() < end)
            sleep_ms(50);
    free(pos);
    if (rc == 0 && !yes)
        rc = shard__fail(SHARD_ETIMEOUT, "it had not applied what its master logged within "
                        "%d s", MOVE_PAIR_WAIT_S);
    /* A refusal (read-only) shows here, before anything is made there. */
    if (rc == 0)
        rc = move_runf(sb, "CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4", db);
    if (rc == 0) {
        m->ddl_direct = true;
        return;
    }
    ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: the target's standby %s gets the new tables "
            "through its link from the master, one after another, and the move waits for "
            "it: %s", (unsigned long long)m->id, move_dp(m)->standby.text, shard_errmsg());
    move_close_wtsb(m);
}

int move_create_target(mv *m)
{
    double t0 = now_seconds();
    uint64_t exists = 0;
    sqlbuf q;
    int rc;

    /* A fresh move never overwrites: the target must have none of them. */
    sql_init(&q);
    sql_add(&q, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA IN (");
    move_db_list(m, &q, true);
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) == 0)
        rc = repl_value_u64(move_tgt(m), q.s, &exists);
    sql_free(&q);
    if (rc)
        return rc;
    if (exists)
        return shard__fail(SHARD_EEXISTS, "target %s already has %llu table(s) in shards %u-%u: "
                          "drop them (or abort the move that left them) first",
                          move_dp(m)->name, (unsigned long long)exists, m->first, m->last);
    /* Journaled before the first is made: a resume (or a retry) drops only
     * copies of this move's. */
    m->target_ours = true;
    if ((rc = move_journal_save(m, NULL)))
        return rc;
    standby_direct(m);
    move_step(m, &t0, "waiting for the target's standby");
    rc = fanout_run((size_t)(m->last - m->first) + 1, move_threads(m), create_db_fn, m);
    move_close_wtsb(m);
    if (rc)
        return rc;
    move_step(m, &t0, "creating the target's databases");
    /* Their tables are the copy's (copy.c): each made just before it is
     * filled, so that the DDL overlaps the other workers' rows. */
    m->target_made = true;
    return 0;
}

/* ---- dry run ------------------------------------------------------------------------- */

int move_plan_text(mv *m, char **plan)
{
    sqlbuf p;
    int rc;

    sql_init(&p);
    sql_addf(&p, "move ID shards %u-%u from %s (master %s) to %s (master %s)\n", m->first,
             m->last, move_sp(m)->name, move_sp(m)->master.text, move_dp(m)->name,
             move_dp(m)->master.text);
    if ((rc = move_preflight(m, &p)) || (rc = move_open_masters(m)) ||
        (rc = move_list_tables(m)) || (rc = move_count_rows(m, move_src(m))))
        goto out;
    for (size_t i = 0; i < m->ntables; i++) {
        char sql[300];
        uint64_t bytes = 0;
        snprintf(sql, sizeof sql, "SELECT DATA_LENGTH + INDEX_LENGTH FROM"
                 " information_schema.TABLES WHERE TABLE_SCHEMA = '%s' AND TABLE_NAME = '%s'",
                 m->tables[i].db, m->tables[i].name);
        if ((rc = repl_value_u64(move_src(m), sql, &bytes)))
            goto out;
        sql_addf(&p, "table %s.%s: %llu rows, %llu bytes on disk\n", m->tables[i].db,
                 m->tables[i].name, (unsigned long long)m->tables[i].rows,
                 (unsigned long long)bytes);
    }
    sql_addf(&p, "total: %zu tables, %llu rows\n", m->ntables, (unsigned long long)m->total);
    sql_addf(&p, "phases: create tables on the target from the source's definitions; copy a "
                "consistent snapshot in primary-key order; replicate the moved databases "
                "from the snapshot's GTID position; fence the source (one statement, not "
                "logged); wait for the target; publish the map; verify every row; %s\n",
             m->window_s ? "keep the source in sync from the target by a reverse stream "
                           "until the reverse window ends (or move finish; move revert "
                           "flips back); then wait for both halves of the target; drop the "
                           "source copy"
                         : "wait for both halves of the target; drop the source copy");
    if ((rc = sql_check(&p)) == 0)
        rc = copy_out(p.s, p.len, plan, NULL);
out:
    sql_free(&p);
    return rc;
}
