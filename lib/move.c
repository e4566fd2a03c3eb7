/*
 * Online shard moves (DESIGN.md section 6): plan and check, snapshot copy
 * in primary-key order, catch-up through a filtered named replication
 * connection, a fence on the source, the new map published, every row
 * verified, the source dropped. Each phase is journaled on the target
 * master (libshard_control.moves) so that a killed mover can be resumed or
 * aborted, and the source stays complete and authoritative until the map
 * flips.
 */
#include "object.h"
#include "repl.h"

#include <errno.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CONTROL_DB "libshard_control"
#define FENCE_WAIT_S 30 /* target applying up to the fence, at most */
#define PUBLISH_TRIES 5
#define PAIR_WAIT_S 30 /* both halves of the target applying up to the flip, at most */

typedef struct mtable {
    char db[SHARD_DBNAME_MAX];
    char name[65];
    uint64_t rows;
} mtable;

typedef struct mv {
    shard_ctx *ctx;
    shard_move_options o;
    shard_move_report *r;
    shard_map *map;
    long src, dst; /* pair indices in map */
    unsigned first, last;
    uint64_t id;
    int phase;
    uint64_t version_from;
    shard_conn *ctl; /* target master: journal and the move's lock */
    char name[64];   /* the replication connection */
    char snap[1024], fence[1024];
    char *flip; /* the target master's GTID position at the flip (NULL: unknown) */
    mtable *tables;
    size_t ntables;
    pthread_mutex_t lock;
    size_t next_table; /* copy work queue */
    uint64_t done, total;
    size_t next_count; /* counting work queue */
    bool resumed; /* target copies in this range are this move's own */
} mv;

static const char *const phase_names[] = {"planned", "copying", "catchup", "fenced",
                                          "flipped", "verifying", "cleaning", "done",
                                          "aborted"};

const char *shard_move_phase_name(int phase)
{
    if (phase < 0 || phase > SHARD_MOVE_ABORTED)
        return "unknown";
    return phase_names[phase];
}

/* ---- small helpers -------------------------------------------------------- */

static const shard_pairdef *SP(const mv *m)
{
    return &m->map->pairs[m->src];
}

static const shard_pairdef *DP(const mv *m)
{
    return &m->map->pairs[m->dst];
}

static void progress(mv *m, int phase, uint64_t done, uint64_t total)
{
    if (!m->o.progress)
        return;
    pthread_mutex_lock(&m->lock);
    m->o.progress(phase, done, total, m->o.payload);
    pthread_mutex_unlock(&m->lock);
}

/* A connection of the mover's own: its session settings never reach the pool. */
static int dconn(mv *m, const shard_endpoint *ep, shard_conn **out)
{
    shard_server *s = ctx_server_at(m->ctx, ep);
    int rc = s ? conn_get(m->ctx, s, out) : shard_fail(SHARD_ENOMEM, "out of memory");

    /* Some sit idle through an hours-long copy: the server must not drop
     * them (the journal's lock lives on one). Never pooled, so no leak. */
    if (rc == 0 && (rc = conn_query_str(*out, "SET SESSION wait_timeout = 604800"))) {
        conn_put(*out, false);
        *out = NULL;
    }
    return rc;
}

static void dclose(shard_conn *c)
{
    if (c)
        conn_put(c, false);
}

static int run(shard_conn *c, const sqlbuf *q)
{
    return conn_query(c, q);
}

static int runf(shard_conn *c, const char *fmt, ...) SHARD_PRINTF(2, 3);
static int runf(shard_conn *c, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof sql)
        return shard_fail(SHARD_EINTERNAL, "statement too long");
    return conn_query_str(c, sql);
}


/* GTID positions come from the servers; check before putting them in SQL. */
static int gtid_check(const char *pos)
{
    for (const char *p = pos; *p; p++)
        if (!((*p >= '0' && *p <= '9') || *p == '-' || *p == ','))
            return shard_fail(SHARD_ESERVER, "unexpected GTID position \"%.100s\"", pos);
    return 0;
}

static double now(void)
{
    return now_seconds();
}

/* ---- the journal ---------------------------------------------------------- */

static int journal_open(mv *m)
{
    int rc;

    if ((rc = dconn(m, &DP(m)->master, &m->ctl)))
        return shard_fail_prefix(rc, "target %s: ", DP(m)->name);
    if ((rc = runf(m->ctl, "CREATE DATABASE IF NOT EXISTS " CONTROL_DB)) ||
        (rc = runf(m->ctl,
                   "CREATE TABLE IF NOT EXISTS " CONTROL_DB ".moves ("
                   " id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,"
                   " source_pair VARCHAR(64) NOT NULL, target_pair VARCHAR(64) NOT NULL,"
                   " first_shard INT UNSIGNED NOT NULL, last_shard INT UNSIGNED NOT NULL,"
                   " phase TINYINT NOT NULL, flags INT NOT NULL,"
                   " snapshot_gtid VARCHAR(1024) NOT NULL DEFAULT '',"
                   " fence_gtid VARCHAR(1024) NOT NULL DEFAULT '',"
                   " flip_gtid TEXT NOT NULL DEFAULT '',"
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
                   " source_dropped TINYINT NOT NULL DEFAULT 0,"
                   " message VARCHAR(1024) NOT NULL DEFAULT '',"
                   " created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
                   " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
                   " ON UPDATE CURRENT_TIMESTAMP(6)) ENGINE=InnoDB")))
        return shard_fail_prefix(rc, "move journal on %s: ", DP(m)->name);
    {
        /* A journal made by an earlier version lacks the flip position. */
        uint64_t has = 0;
        if ((rc = repl_value_u64(m->ctl, "SELECT COUNT(*) FROM information_schema.COLUMNS"
                                 " WHERE TABLE_SCHEMA = '" CONTROL_DB "' AND TABLE_NAME ="
                                 " 'moves' AND COLUMN_NAME = 'flip_gtid'", &has)) ||
            (!has && (rc = runf(m->ctl, "ALTER TABLE " CONTROL_DB ".moves ADD COLUMN"
                                " flip_gtid TEXT NOT NULL DEFAULT '' AFTER fence_gtid"))))
            return shard_fail_prefix(rc, "move journal on %s: ", DP(m)->name);
    }
    {
        /* Move IDs are unique across targets: each journal counts from its
         * server_id * 10^9 (ALTER only raises the counter, never lowers it). */
        char id[32];
        if ((rc = conn_value(m->ctl, "SELECT @@server_id", id, sizeof id)) ||
            (rc = runf(m->ctl, "ALTER TABLE " CONTROL_DB ".moves AUTO_INCREMENT = %llu",
                       strtoull(id, NULL, 10) * 1000000000ULL + 1)))
            return shard_fail_prefix(rc, "move journal on %s: ", DP(m)->name);
    }
    return 0;
}

/* Only one mover per move: a named lock held by the journal connection. */
static int journal_lock(mv *m)
{
    char got[8];
    int rc;

    if (!m->id)
        return 0;
    {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT GET_LOCK('libshard move %llu', 0)",
                 (unsigned long long)m->id);
        rc = conn_value(m->ctl, sql, got, sizeof got);
    }
    if (rc)
        return rc;
    if (strcmp(got, "1") != 0)
        return shard_fail(SHARD_EBUSY, "move %llu is being run by another mover right now",
                          (unsigned long long)m->id);
    return 0;
}

static int journal_save(mv *m, int phase, const char *message)
{
    shard_move_report *r = m->r;
    sqlbuf q;
    int rc;

    m->phase = phase;
    r->phase = phase;
    sql_init(&q);
    sql_addf(&q, "UPDATE " CONTROL_DB ".moves SET phase = %d, snapshot_gtid = '%s',"
                 " fence_gtid = ",
             phase, m->snap);
    sql_hex(&q, m->fence, strlen(m->fence));
    sql_add(&q, ", flip_gtid = ");
    sql_hex(&q, m->flip ? m->flip : "", m->flip ? strlen(m->flip) : 0);
    sql_addf(&q, ", map_version_to = %llu, rows_copied = %llu, bytes_copied = %llu,"
                 " rows_verified = %llu, mismatches = %llu, fence_attempts = %u,"
                 " source_dropped = %d,",
             (unsigned long long)r->map_version, (unsigned long long)r->rows_copied,
             (unsigned long long)r->bytes_copied, (unsigned long long)r->rows_verified,
             (unsigned long long)r->mismatches, r->fence_attempts, r->source_dropped);
    sql_addf(&q, " copy_seconds = %.3f, catchup_seconds = %.3f, cutover_seconds = %.3f,"
                 " verify_seconds = %.3f, pause_ms = %.1f, message = ",
             r->copy_seconds, r->catchup_seconds, r->cutover_seconds, r->verify_seconds,
             r->pause_ms);
    message = message ? message : "";
    sql_hex(&q, message, strlen(message) > 1000 ? 1000 : strlen(message));
    sql_addf(&q, " WHERE id = %llu", (unsigned long long)m->id);
    rc = run(m->ctl, &q);
    sql_free(&q);
    if (rc)
        return shard_fail_prefix(rc, "move %llu journal: ", (unsigned long long)m->id);
    progress(m, phase, 0, 0);
    ctx_log(m->ctx, SHARD_LOG_INFO, "move %llu: %s", (unsigned long long)m->id,
            shard_move_phase_name(phase));
    return 0;
}

static int journal_insert(mv *m)
{
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "INSERT INTO " CONTROL_DB ".moves (source_pair, target_pair, first_shard,"
                " last_shard, phase, flags, map_version_from) VALUES (");
    sql_hex(&q, SP(m)->name, strlen(SP(m)->name));
    sql_add(&q, ", ");
    sql_hex(&q, DP(m)->name, strlen(DP(m)->name));
    sql_addf(&q, ", %u, %u, %d, %d, %llu)", m->first, m->last, SHARD_MOVE_PLANNED,
             m->o.flags, (unsigned long long)m->version_from);
    rc = run(m->ctl, &q);
    sql_free(&q);
    if (rc)
        return rc;
    m->id = mysql_insert_id(m->ctl->my);
    m->r->move_id = m->id;
    snprintf(m->name, sizeof m->name, "libshard_move_%llu", (unsigned long long)m->id);
    return journal_lock(m);
}

/* ---- planning and checks -------------------------------------------------- */

static void db_of(const mv *m, unsigned shard, char *db)
{
    shard_dbfmt_name(&m->map->dbfmt, shard, db);
}

static int resolve_pairs(mv *m, const char *target)
{
    const shard_map *map = m->map;
    long pi = -1;

    if (m->first > m->last || m->last > SHARD_MAX_SHARD)
        return shard_fail(SHARD_EINVAL, "bad shard range %u-%u", m->first, m->last);
    for (unsigned s = m->first; s <= m->last; s++) {
        long p = shard_map_pair_index(map, s);
        if (p < 0)
            return shard_fail(SHARD_EINVAL, "shard %u is not in any range of map version "
                              "%llu", s, (unsigned long long)map->version);
        if (pi >= 0 && p != pi)
            return shard_fail(SHARD_EINVAL, "shards %u-%u span pairs %s and %s: move each "
                              "pair's part separately", m->first, m->last,
                              map->pairs[pi].name, map->pairs[p].name);
        pi = p;
    }
    m->src = pi;
    m->dst = shard_map_find_pair(map, target);
    if (m->dst < 0)
        return shard_fail(SHARD_EINVAL, "no pair named \"%.64s\" in the map", target);
    if (m->dst == m->src)
        return shard_fail(SHARD_EINVAL, "shards %u-%u are already on %s", m->first, m->last,
                          target);
    if (SP(m)->master.socket[0])
        return shard_fail(SHARD_EINVAL, "source %s's master %s is a unix socket: the "
                          "target replicates from it, so it needs a host:port address",
                          SP(m)->name, SP(m)->master.text);
    snprintf(m->r->source, sizeof m->r->source, "%s", SP(m)->name);
    snprintf(m->r->target, sizeof m->r->target, "%s", DP(m)->name);
    m->r->first = m->first;
    m->r->last = m->last;
    return 0;
}

typedef struct srvinfo {
    char label[400];
    unsigned long server_id, domain;
    int log_bin, row, ignore_dups;
} srvinfo;

static int probe(mv *m, const shard_endpoint *ep, const char *label, srvinfo *si)
{
    shard_conn *c = NULL;
    MYSQL_RES *res;
    MYSQL_ROW row;
    int rc;

    snprintf(si->label, sizeof si->label, "%s", label);
    if ((rc = dconn(m, ep, &c)))
        return shard_fail_prefix(rc, "%s: ", label);
    rc = conn_query_str(c, "SELECT @@server_id, @@gtid_domain_id, @@log_bin,"
                           " @@binlog_format = 'ROW', @@gtid_ignore_duplicates");
    if (rc == 0 && (res = mysql_store_result(c->my))) {
        row = mysql_fetch_row(res);
        si->server_id = strtoul(row[0], NULL, 10);
        si->domain = strtoul(row[1], NULL, 10);
        si->log_bin = atoi(row[2]);
        si->row = atoi(row[3]);
        si->ignore_dups = atoi(row[4]);
        mysql_free_result(res);
    } else if (rc == 0) {
        rc = shard_fail(SHARD_ESERVER, "%s: %s", label, mysql_error(c->my));
    }
    dclose(c);
    return rc ? shard_fail_prefix(rc, "%s: ", label) : 0;
}

/* Both pairs must be able to take part: DESIGN.md section 6, phase 1. */
static int preflight(mv *m, sqlbuf *plan)
{
    srvinfo s[4];
    size_t n = 0;
    char label[400];
    int rc;

    snprintf(label, sizeof label, "source %s master %s", SP(m)->name, SP(m)->master.text);
    if ((rc = probe(m, &SP(m)->master, label, &s[n++])))
        return rc;
    if (!s[0].log_bin || !s[0].row)
        return shard_fail(SHARD_EINVAL, "%s: needs log_bin=ON and binlog_format=ROW", label);
    if (SP(m)->has_standby) {
        snprintf(label, sizeof label, "source %s standby %s", SP(m)->name,
                 SP(m)->standby.text);
        if ((rc = probe(m, &SP(m)->standby, label, &s[n++])))
            return rc;
    }
    snprintf(label, sizeof label, "target %s master %s", DP(m)->name, DP(m)->master.text);
    if ((rc = probe(m, &DP(m)->master, label, &s[n])))
        return rc;
    /* It must also run with skip-slave-start, which no variable shows:
     * replication filters are not kept across a restart (repl_health
     * notices a connection that came back without its filter). */
    if (DP(m)->has_standby && !s[n].ignore_dups)
        return shard_fail(SHARD_EINVAL, "%s: needs gtid_ignore_duplicates=ON, or the moved "
                          "rows coming back through its standby break the pair", label);
    n++;
    if (DP(m)->has_standby) {
        snprintf(label, sizeof label, "target %s standby %s", DP(m)->name,
                 DP(m)->standby.text);
        if ((rc = probe(m, &DP(m)->standby, label, &s[n])))
            return rc;
        if (!s[n].ignore_dups)
            return shard_fail(SHARD_EINVAL, "%s: needs gtid_ignore_duplicates=ON", label);
        n++;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            if (s[i].server_id == s[j].server_id)
                return shard_fail(SHARD_EINVAL, "%s and %s share server_id %lu",
                                  s[i].label, s[j].label, s[i].server_id);
            if (s[i].domain == s[j].domain)
                return shard_fail(SHARD_EINVAL, "%s and %s share gtid_domain_id %lu",
                                  s[i].label, s[j].label, s[i].domain);
        }
    if (plan)
        for (size_t i = 0; i < n; i++)
            sql_addf(plan, "check %s: server_id %lu, gtid_domain_id %lu, log_bin %d, "
                           "row format %d, gtid_ignore_duplicates %d: ok\n",
                     s[i].label, s[i].server_id, s[i].domain, s[i].log_bin, s[i].row,
                     s[i].ignore_dups);
    return 0;
}

static bool name_ok(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

/* The tables of every moved database on the source (fenced ones by their
 * real name). A missing database is an error: apply the schema first. */
static int list_tables(mv *m, shard_conn *src)
{
    size_t cap = 0;

    free(m->tables);
    m->tables = NULL;
    m->ntables = 0;
    for (unsigned s = m->first; s <= m->last; s++) {
        char db[SHARD_DBNAME_MAX];
        MYSQL_RES *res;
        MYSQL_ROW row;
        int rc;

        db_of(m, s, db);
        rc = runf(src, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE"
                       " TABLE_SCHEMA = '%s' ORDER BY TABLE_NAME", db);
        if (rc)
            return rc;
        if (!(res = mysql_store_result(src->my)))
            return shard_fail(SHARD_ESERVER, "%s", mysql_error(src->my));
        if (mysql_num_rows(res) == 0) {
            mysql_free_result(res);
            return shard_fail(SHARD_ENOTFOUND, "source %s has no tables in %s (was the "
                              "schema applied?)", SP(m)->name, db);
        }
        while ((row = mysql_fetch_row(res))) {
            const char *name = row[0];
            if (strncmp(name, SHARD_FENCE_PREFIX, strlen(SHARD_FENCE_PREFIX)) == 0)
                name += strlen(SHARD_FENCE_PREFIX);
            if (!name[0] || name[0] == '_' || !name_ok(name))
                continue; /* not ours: never put into a statement */
            if (m->ntables && strcmp(m->tables[m->ntables - 1].name, name) == 0 &&
                strcmp(m->tables[m->ntables - 1].db, db) == 0) {
                mysql_free_result(res);
                return shard_fail(SHARD_ESERVER, "%s holds both %s and %s%s: a table was "
                                  "created under the fence; resolve it by hand", db, name,
                                  SHARD_FENCE_PREFIX, name);
            }
            if (m->ntables == cap) {
                mtable *t = shard_realloc(m->tables, (cap = cap ? cap * 2 : 64) * sizeof *t);
                if (!t) {
                    mysql_free_result(res);
                    return shard_fail(SHARD_ENOMEM, "out of memory");
                }
                m->tables = t;
            }
            memset(&m->tables[m->ntables], 0, sizeof *m->tables);
            snprintf(m->tables[m->ntables].db, SHARD_DBNAME_MAX, "%s", db);
            snprintf(m->tables[m->ntables].name, 65, "%s", name);
            m->ntables++;
        }
        mysql_free_result(res);
    }
    m->r->tables = m->ntables;
    return 0;
}

/* ---- target schema -------------------------------------------------------- */

static int drop_target(mv *m)
{
    shard_conn *t = NULL;
    int rc;

    if ((rc = dconn(m, &DP(m)->master, &t)))
        return rc;
    for (unsigned s = m->first; rc == 0 && s <= m->last; s++) {
        char db[SHARD_DBNAME_MAX];
        db_of(m, s, db);
        rc = runf(t, "DROP DATABASE IF EXISTS `%s`", db);
    }
    dclose(t);
    return rc;
}

/* Tables created on the target from the source's own definitions. */
static int create_target(mv *m, shard_conn *src)
{
    shard_conn *t = NULL;
    int rc;

    if ((rc = dconn(m, &DP(m)->master, &t)))
        return rc;
    for (unsigned s = m->first; rc == 0 && s <= m->last; s++) {
        char db[SHARD_DBNAME_MAX], exists[8];
        char sql[256];
        db_of(m, s, db);
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.TABLES WHERE"
                 " TABLE_SCHEMA = '%s'", db);
        if ((rc = conn_value(t, sql, exists, sizeof exists)))
            break;
        if (strcmp(exists, "0") != 0)
            rc = shard_fail(SHARD_EEXISTS, "target %s already has tables in %s: drop them "
                            "(or abort the move that left them) first", DP(m)->name, db);
        else
            rc = runf(t, "CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4", db);
    }
    for (size_t i = 0; rc == 0 && i < m->ntables; i++) {
        mtable *tb = &m->tables[i];
        MYSQL_RES *res;
        MYSQL_ROW row;
        if ((rc = runf(src, "SHOW CREATE TABLE `%s`.`%s`", tb->db, tb->name)))
            break;
        if (!(res = mysql_store_result(src->my)) || !(row = mysql_fetch_row(res))) {
            if (res)
                mysql_free_result(res);
            rc = shard_fail(SHARD_ESERVER, "SHOW CREATE TABLE %s.%s gave nothing", tb->db,
                            tb->name);
            break;
        }
        rc = runf(t, "USE `%s`", tb->db);
        if (rc == 0)
            rc = conn_query_str(t, row[1]); /* the server's own text */
        mysql_free_result(res);
    }
    dclose(t);
    return rc;
}

/* ---- snapshot copy -------------------------------------------------------- */

typedef struct worker {
    mv *m;
    shard_conn *src, *dst;
    int rc;
    char err[512];
    pthread_t thread;
} worker;

static bool numeric_text(const char *s, unsigned long len)
{
    if (len == 0)
        return false;
    for (unsigned long i = 0; i < len; i++)
        if (!strchr("0123456789.-+eE", s[i]))
            return false;
    return true;
}

/* One row's values: numbers as they are, everything else as hex. */
static int add_row(sqlbuf *q, MYSQL_ROW row, unsigned long *lens, MYSQL_FIELD *f, unsigned n)
{
    sql_add(q, "(");
    for (unsigned i = 0; i < n; i++) {
        if (i)
            sql_add(q, ",");
        if (!row[i])
            sql_add(q, "NULL");
        else if (IS_NUM(f[i].type) && f[i].type != MYSQL_TYPE_TIMESTAMP) {
            if (!numeric_text(row[i], lens[i]))
                return shard_fail(SHARD_ESERVER, "column %s: unexpected numeric text",
                                  f[i].name);
            sql_add(q, row[i]);
        } else {
            sql_hex(q, row[i], lens[i]);
        }
    }
    sql_add(q, ")");
    return 0;
}

static int insert_head(sqlbuf *q, const mtable *t, MYSQL_FIELD *f, unsigned n)
{
    sql_reset(q);
    sql_add(q, "INSERT INTO ");
    sql_table(q, t->db, t->name);
    sql_add(q, " (");
    for (unsigned i = 0; i < n; i++) {
        if (!name_ok(f[i].name))
            return shard_fail(SHARD_ESERVER, "%s.%s: unexpected column name", t->db, t->name);
        sql_addf(q, "%s`%s`", i ? "," : "", f[i].name);
    }
    sql_add(q, ") VALUES ");
    return 0;
}

/* Send the batch of *rows rows, count them, and start the next batch. */
static int flush_batch(worker *w, sqlbuf *q, size_t head, unsigned *rows)
{
    mv *m = w->m;
    int rc = conn_query(w->dst, q);

    if (rc)
        return rc;
    pthread_mutex_lock(&m->lock);
    m->done += *rows;
    m->r->rows_copied += *rows;
    pthread_mutex_unlock(&m->lock);
    progress(m, SHARD_MOVE_COPYING, m->done, m->total);
    q->len = head;
    *rows = 0;
    return 0;
}

static int copy_table(worker *w, mtable *t)
{
    mv *m = w->m;
    size_t limit = w->dst->max_packet / 2;
    MYSQL_RES *res;
    MYSQL_FIELD *f;
    MYSQL_ROW row;
    unsigned n, rows = 0;
    size_t head;
    sqlbuf q;
    int rc;

    /* The clustered index is the primary key: a plain scan is PK order. */
    if ((rc = runf(w->src, "SELECT * FROM `%s`.`%s` ORDER BY 1", t->db, t->name)))
        return rc;
    if (!(res = mysql_use_result(w->src->my)))
        return shard_fail(SHARD_ESERVER, "%s", mysql_error(w->src->my));
    n = mysql_num_fields(res);
    f = mysql_fetch_fields(res);
    sql_init(&q);
    rc = insert_head(&q, t, f, n);
    head = q.len;
    while (rc == 0 && (row = mysql_fetch_row(res))) {
        unsigned long *lens = mysql_fetch_lengths(res);
        uint64_t bytes = 0;
        for (unsigned i = 0; i < n; i++)
            bytes += lens[i];
        /* Flush first when this row (hex doubles it) would not fit. */
        if (rows && q.len + 2 * bytes + 8 * n + 16 >= limit &&
            (rc = flush_batch(w, &q, head, &rows)))
            break;
        if (rows)
            sql_add(&q, ",");
        if ((rc = add_row(&q, row, lens, f, n)) || (rc = sql_check(&q)))
            break;
        rows++;
        pthread_mutex_lock(&m->lock);
        m->r->bytes_copied += bytes;
        pthread_mutex_unlock(&m->lock);
        if ((rows >= m->o.batch_rows || q.len >= limit) &&
            (rc = flush_batch(w, &q, head, &rows)))
            break;
    }
    if (rc == 0 && mysql_errno(w->src->my))
        rc = shard_fail(SHARD_ECONNECT, "reading %s.%s: %s", t->db, t->name,
                        mysql_error(w->src->my));
    if (rc == 0 && rows)
        rc = flush_batch(w, &q, head, &rows);
    mysql_free_result(res);
    sql_free(&q);
    return rc ? shard_fail_prefix(rc, "copying %s.%s: ", t->db, t->name) : 0;
}

static int count_table(shard_conn *src, mtable *t)
{
    char sql[300], n[32];
    int rc;
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM `%s`.`%s`", t->db, t->name);
    if ((rc = conn_value(src, sql, n, sizeof n)))
        return rc;
    t->rows = strtoull(n, NULL, 10);
    return 0;
}

/* Exact totals for the progress, counted by every worker in parallel in
 * its own snapshot (all of one commit point), before anything is copied. */
static void count_part(worker *w)
{
    mv *m = w->m;

    for (;;) {
        size_t i;
        pthread_mutex_lock(&m->lock);
        i = m->next_count++;
        pthread_mutex_unlock(&m->lock);
        if (i >= m->ntables || w->rc)
            break;
        if ((w->rc = count_table(w->src, &m->tables[i])))
            snprintf(w->err, sizeof w->err, "%s", shard_errmsg());
        else {
            pthread_mutex_lock(&m->lock);
            m->total += m->tables[i].rows;
            pthread_mutex_unlock(&m->lock);
        }
    }
}

static void *count_main(void *arg)
{
    count_part(arg);
    return NULL;
}

static void *copy_main(void *arg)
{
    worker *w = arg;
    mv *m = w->m;

    for (;;) {
        size_t i;
        pthread_mutex_lock(&m->lock);
        i = m->next_table++;
        pthread_mutex_unlock(&m->lock);
        if (i >= m->ntables)
            break;
        if ((w->rc = copy_table(w, &m->tables[i]))) {
            snprintf(w->err, sizeof w->err, "%s", shard_errmsg());
            pthread_mutex_lock(&m->lock);
            m->next_table = m->ntables; /* stop the others too */
            pthread_mutex_unlock(&m->lock);
            break;
        }
    }
    return NULL;
}

/* Run fn on every worker, the first on this thread; a thread that cannot
 * be created leaves its share to the others (the queues are shared). */
static void run_workers(worker *w, unsigned n, void *(*fn)(void *))
{
    bool started[64] = {false};

    for (unsigned i = 1; i < n && i < 64; i++)
        started[i] = pthread_create(&w[i].thread, NULL, fn, &w[i]) == 0;
    fn(&w[0]);
    for (unsigned i = 1; i < n && i < 64; i++)
        if (started[i])
            pthread_join(w[i].thread, NULL);
}

/* Open n snapshots of one commit point, and learn its GTID position. */
static int open_snapshots(mv *m, worker *w, unsigned n)
{
    shard_conn *ctl = NULL;
    char file[256], pos[32], sql[400];
    int rc;

    if ((rc = dconn(m, &SP(m)->master, &ctl)))
        return rc;
    /* Commits wait while the snapshots open: every one sees the same point. */
    if ((rc = runf(ctl, "BACKUP STAGE START")) ||
        (rc = runf(ctl, "BACKUP STAGE BLOCK_COMMIT")))
        goto out;
    for (unsigned i = 0; rc == 0 && i < n; i++)
        if ((rc = runf(w[i].src, "SET SESSION net_write_timeout = 3600, time_zone = '+00:00'")) == 0)
            rc = runf(w[i].src, "START TRANSACTION WITH CONSISTENT SNAPSHOT");
    if (rc == 0)
        rc = conn_value(w[0].src, "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS"
                             " WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_FILE'", file, sizeof file);
    if (rc == 0)
        rc = conn_value(w[0].src, "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS"
                             " WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_POSITION'", pos, sizeof pos);
    if (rc == 0 && (!name_ok(pos) || strpbrk(file, "'\\"))) /* both server-made */
        rc = shard_fail(SHARD_ESERVER, "unexpected binlog snapshot %s:%s", file, pos);
    if (rc == 0) {
        snprintf(sql, sizeof sql, "SELECT BINLOG_GTID_POS('%s', %s)", file, pos);
        rc = conn_value(w[0].src, sql, m->snap, sizeof m->snap);
    }
    if (rc == 0)
        rc = gtid_check(m->snap);
    runf(ctl, "BACKUP STAGE END");
out:
    dclose(ctl);
    return rc ? shard_fail_prefix(rc, "source snapshot: ") : 0;
}

static int count_rows(mv *m, shard_conn *src)
{
    m->total = 0;
    for (size_t i = 0; i < m->ntables; i++) {
        int rc = count_table(src, &m->tables[i]);
        if (rc)
            return rc;
        m->total += m->tables[i].rows;
    }
    return 0;
}

static int copy_phase(mv *m)
{
    unsigned n = m->o.copy_threads ? m->o.copy_threads : 1;
    worker *w;
    double t0 = now();
    int rc = 0;

    if (n > 64)
        n = 64;
    /* Each worker holds a source and a target connection from the pools,
     * next to the mover's own three: stay inside pool_size. */
    if (m->ctx->opts.pool_size > 4 && n > m->ctx->opts.pool_size - 4)
        n = m->ctx->opts.pool_size - 4;
    if (m->ctx->opts.pool_size <= 4)
        n = 1;
    if (n > m->ntables)
        n = m->ntables ? (unsigned)m->ntables : 1;
    w = shard_calloc(n, sizeof *w);
    if (!w)
        return shard_fail(SHARD_ENOMEM, "out of memory");
    for (unsigned i = 0; rc == 0 && i < n; i++) {
        w[i].m = m;
        if ((rc = dconn(m, &SP(m)->master, &w[i].src)) == 0 &&
            (rc = dconn(m, &DP(m)->master, &w[i].dst)) == 0)
            rc = runf(w[i].dst, "SET SESSION time_zone = '+00:00'");
    }
    if (rc == 0)
        rc = open_snapshots(m, w, n);
    if (rc == 0)
        rc = journal_save(m, SHARD_MOVE_COPYING, NULL);
    if (rc == 0) {
        m->next_table = m->next_count = 0;
        m->done = m->total = 0;
        m->r->rows_copied = m->r->bytes_copied = 0;
        run_workers(w, n, count_main);
        for (unsigned i = 0; i < n && rc == 0; i++)
            if (w[i].rc)
                rc = shard_fail(w[i].rc, "counting rows: %s", w[i].err);
    }
    if (rc == 0) {
        run_workers(w, n, copy_main);
        for (unsigned i = 0; i < n && rc == 0; i++)
            if (w[i].rc)
                rc = shard_fail(w[i].rc, "%s", w[i].err);
    }
    {
        char saved[1024];
        snprintf(saved, sizeof saved, "%s", shard_errmsg());
        for (unsigned i = 0; i < n; i++)
            if (w[i].src)
                runf(w[i].src, "COMMIT"); /* ends the snapshot; may fail on a dead source */
        if (rc)
            shard_fail(rc, "%s", saved);
    }
    for (unsigned i = 0; i < n; i++) {
        dclose(w[i].src);
        dclose(w[i].dst);
    }
    free(w);
    m->r->copy_seconds = now() - t0;
    return rc;
}

/* ---- catch-up: a filtered named replication connection --------------------- */

/* gtid_slave_pos for the target: its own, with the source's snapshot domains
 * taken from the snapshot (except the target pair's own domains). */
static int merge_gtid(const char *cur, const char *snap, const unsigned long *keep,
                      size_t nkeep, char *out, size_t size)
{
    char buf[2048];
    size_t len = 0;
    const char *p;

    buf[0] = '\0';
    for (p = snap; *p;) { /* the snapshot's domains, but not the target's own */
        unsigned long d = strtoul(p, NULL, 10);
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        bool own = false;
        for (size_t i = 0; i < nkeep; i++)
            own |= keep[i] == d;
        if (!own && len + n + 2 < sizeof buf) {
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%.*s", len ? "," : "",
                                    (int)n, p);
        }
        p = end ? end + 1 : p + n;
    }
    for (p = cur; *p;) { /* the target's positions for every other domain */
        unsigned long d = strtoul(p, NULL, 10);
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        bool in_snap = false;
        for (const char *s = buf; *s;) {
            in_snap |= strtoul(s, NULL, 10) == d;
            s = strchr(s, ',') ? strchr(s, ',') + 1 : s + strlen(s);
        }
        if (!in_snap && len + n + 2 < sizeof buf)
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%.*s", len ? "," : "",
                                    (int)n, p);
        p = end ? end + 1 : p + n;
    }
    if (len >= size)
        return shard_fail(SHARD_EINTERNAL, "GTID position too long");
    memcpy(out, buf, len + 1);
    return gtid_check(out);
}

static int do_db_list(mv *m, sqlbuf *q)
{
    for (unsigned s = m->first; s <= m->last; s++) {
        char db[SHARD_DBNAME_MAX];
        db_of(m, s, db);
        sql_addf(q, "%s%s", s == m->first ? "" : ",", db);
    }
    return sql_check(q);
}

/* Running connections, so that exactly those are started again. */
static int running_connections(shard_conn *t, char names[][64], size_t *n, bool *ours,
                               const char *ourname)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    MYSQL_FIELD *f;
    int ci = -1, io = -1, sq = -1, rc;

    *n = 0;
    *ours = false;
    if ((rc = conn_query_str(t, "SHOW ALL SLAVES STATUS")))
        return rc;
    if (!(res = mysql_store_result(t->my)))
        return 0;
    f = mysql_fetch_fields(res);
    for (unsigned i = 0; i < mysql_num_fields(res); i++) {
        if (strcmp(f[i].name, "Connection_name") == 0)
            ci = (int)i;
        else if (strcmp(f[i].name, "Slave_IO_Running") == 0)
            io = (int)i;
        else if (strcmp(f[i].name, "Slave_SQL_Running") == 0)
            sq = (int)i;
    }
    while ((row = mysql_fetch_row(res)) && *n < 16) {
        if (ci < 0 || io < 0 || sq < 0)
            break;
        if (strcmp(row[ci], ourname) == 0) {
            *ours = true;
            continue;
        }
        if (strcmp(row[io], "No") != 0 || strcmp(row[sq], "No") != 0)
            snprintf(names[(*n)++], 64, "%s", row[ci]);
    }
    mysql_free_result(res);
    return 0;
}

static int start_connection(shard_conn *t, const char *name)
{
    if (!*name)
        return runf(t, "START SLAVE");
    if (!name_ok(name))
        return shard_fail(SHARD_ESERVER, "unexpected replication connection name");
    return runf(t, "START SLAVE '%s'", name);
}

/* Set the filter (it is not kept across restarts), then start. The filter
 * is checked before the connection runs: an unfiltered start would apply
 * the source's other databases. */
static int start_filtered(mv *m, shard_conn *t)
{
    sqlbuf q;
    char *have = NULL;
    int rc;

    runf(t, "STOP SLAVE '%s'", m->name);
    sql_init(&q);
    sql_addf(&q, "SET GLOBAL %s.replicate_do_db = '", m->name);
    do_db_list(m, &q);
    sql_add(&q, "'");
    rc = run(t, &q);
    sql_free(&q);
    sql_init(&q);
    do_db_list(m, &q);
    if (rc == 0 && !(have = shard_malloc(q.len + 2)))
        rc = shard_fail(SHARD_ENOMEM, "out of memory");
    if (rc == 0) {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT @@%s.replicate_do_db", m->name);
        /* One byte more than expected: a longer filter does not fit and differs. */
        rc = conn_value(t, sql, have, q.len + 2);
    }
    if (rc == 0 && strcmp(have, q.s) != 0)
        rc = shard_fail(SHARD_EINTERNAL, "replication filter is \"%.200s\", expected "
                        "\"%.200s\"", have, q.s);
    sql_free(&q);
    free(have);
    return rc ? rc : runf(t, "START SLAVE '%s'", m->name);
}

/* MASTER_SSL options of CHANGE MASTER from the map's credentials.tls. */
static int add_tls(shard_conn *t, sqlbuf *q, const shard_tlsdef *tls)
{
    const char *names[] = {"master_ssl_ca", "master_ssl_cert", "master_ssl_key"};
    const char *vals[] = {tls->ca, tls->cert, tls->key};

    sql_add(q, ", master_ssl = 1");
    for (int i = 0; i < 3; i++) {
        char *esc;
        if (!vals[i])
            continue;
        esc = shard_malloc(strlen(vals[i]) * 2 + 1);
        if (!esc)
            return shard_fail(SHARD_ENOMEM, "out of memory");
        mysql_real_escape_string(t->my, esc, vals[i], (unsigned long)strlen(vals[i]));
        sql_addf(q, ", %s = '", names[i]);
        sql_add(q, esc);
        sql_add(q, "'");
        free(esc);
    }
    sql_addf(q, ", master_ssl_verify_server_cert = %d", tls->verify ? 1 : 0);
    return 0;
}

static int repl_setup(mv *m)
{
    shard_conn *t = NULL;
    char cur[2048], merged[2048], names[16][64];
    unsigned long keep[2];
    size_t nrun = 0, nkeep = 0;
    bool ours;
    sqlbuf q;
    int rc;

    if ((rc = dconn(m, &DP(m)->master, &t)))
        return rc;
    if ((rc = running_connections(t, names, &nrun, &ours, m->name)))
        goto out;
    {
        char d[32];
        if ((rc = conn_value(t, "SELECT @@gtid_domain_id", d, sizeof d)))
            goto out;
        keep[nkeep++] = strtoul(d, NULL, 10);
    }
    if (DP(m)->has_standby) {
        shard_conn *sb = NULL;
        char d[32];
        if ((rc = dconn(m, &DP(m)->standby, &sb)) == 0)
            rc = conn_value(sb, "SELECT @@gtid_domain_id", d, sizeof d);
        dclose(sb);
        if (rc)
            goto out;
        keep[nkeep++] = strtoul(d, NULL, 10);
    }
    /* gtid_slave_pos can only change with every connection stopped,
     * including the pair's own link: stopped for as short as possible. */
    if ((rc = runf(t, "STOP ALL SLAVES")) ||
        (rc = conn_value(t, "SELECT @@gtid_slave_pos", cur, sizeof cur)) ||
        (rc = merge_gtid(cur, m->snap, keep, nkeep, merged, sizeof merged)) ||
        (rc = runf(t, "SET GLOBAL gtid_slave_pos = '%s'", merged)))
        goto restart;
    if (ours)
        runf(t, "RESET SLAVE '%s' ALL", m->name);
    sql_init(&q);
    sql_addf(&q, "CHANGE MASTER '%s' TO master_host = '%s', master_port = %u,"
                 " master_user = ", m->name, SP(m)->master.host, SP(m)->master.port);
    {
        const char *user = ctx_user(m->ctx, m->map);
        char *esc = shard_malloc(strlen(user) * 2 + 1), *pwcopy = NULL;
        const char *pw;
        char *pesc;
        if (ctx_password_copy(m->ctx, &pwcopy)) {
            free(esc);
            esc = NULL;
        }
        pw = pwcopy ? pwcopy : "";
        pesc = shard_malloc(strlen(pw) * 2 + 1);
        if (!esc || !pesc) {
            free(esc);
            free(pesc);
            shard_wipe_free(pwcopy);
            sql_free(&q);
            rc = shard_fail(SHARD_ENOMEM, "out of memory");
            goto restart;
        }
        mysql_real_escape_string(t->my, esc, user, (unsigned long)strlen(user));
        mysql_real_escape_string(t->my, pesc, pw, (unsigned long)strlen(pw));
        sql_addf(&q, "'%s', master_password = '", esc);
        sql_add(&q, pesc);
        sql_add(&q, "', master_use_gtid = slave_pos, master_connect_retry = 1");
        /* The map's TLS settings apply to the moved rows' trip too (the
         * paths must be valid on the target server). */
        if (m->map->tls.enabled && (rc = add_tls(t, &q, &m->map->tls))) {
            shard_wipe_free(pesc);
            shard_wipe_free(pwcopy);
            free(esc);
            memset(q.s, 0, q.len);
            sql_free(&q);
            goto restart;
        }
        shard_wipe_free(pesc);
        shard_wipe_free(pwcopy);
        free(esc);
    }
    rc = run(t, &q);
    memset(q.s, 0, q.len); /* it held the password */
    sql_free(&q);
    if (rc == 0)
        rc = start_filtered(m, t);
restart:
    for (size_t i = 0; i < nrun; i++) {
        int src = start_connection(t, names[i]);
        if (!rc)
            rc = src;
    }
out:
    dclose(t);
    return rc ? shard_fail_prefix(rc, "replication to target %s: ", DP(m)->name) : 0;
}

static int repl_remove(mv *m)
{
    shard_conn *t = NULL;
    char names[16][64];
    size_t n;
    bool ours;
    int rc;

    if ((rc = dconn(m, &DP(m)->master, &t)))
        return rc;
    rc = running_connections(t, names, &n, &ours, m->name);
    if (rc == 0 && ours && (rc = runf(t, "STOP SLAVE '%s'", m->name)) == 0)
        rc = runf(t, "RESET SLAVE '%s' ALL", m->name);
    dclose(t);
    return rc;
}

/* Replication healthy? A stopped SQL thread with an error ends the move. */
static int repl_health(mv *m, shard_conn *t)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    MYSQL_FIELD *f;
    int rc;

    if ((rc = runf(t, "SHOW SLAVE '%s' STATUS", m->name)))
        return rc;
    if (!(res = mysql_store_result(t->my)))
        return 0;
    f = mysql_fetch_fields(res);
    row = mysql_fetch_row(res);
    for (unsigned i = 0; row && i < mysql_num_fields(res); i++) {
        if (strcmp(f[i].name, "Replicate_Do_DB") == 0 && (!row[i] || !row[i][0])) {
            rc = shard_fail(SHARD_EINTERNAL, "replication connection %s runs without its "
                            "filter (was the target restarted without skip-slave-start?): "
                            "stop it and abort the move", m->name);
            break;
        }
        /* Reconnecting is normal (a restarted source); refused credentials
         * are not, and would otherwise only show as a catch-up timeout. */
        if ((strcmp(f[i].name, "Last_SQL_Error") == 0 ||
             strcmp(f[i].name, "Last_IO_Error") == 0) && row[i] && row[i][0] &&
            ((!strstr(row[i], "error reconnecting") && !strstr(row[i], "error connecting")) ||
             strstr(row[i], "Access denied"))) {
            rc = shard_fail(SHARD_ESERVER, "replication connection %s: %s", m->name, row[i]);
            break;
        }
    }
    mysql_free_result(res);
    return rc;
}

/* Whether the target reached the source's position `pos` within `s` seconds. */
static int wait_for(shard_conn *t, const char *pos, double s, bool *reached)
{
    char sql[1200], out[16];
    int rc;

    if ((rc = gtid_check(pos)))
        return rc;
    snprintf(sql, sizeof sql, "SELECT MASTER_GTID_WAIT('%s', %.3f)", pos, s);
    if ((rc = conn_value(t, sql, out, sizeof out)))
        return rc;
    *reached = strcmp(out, "0") == 0;
    return 0;
}

static int source_pos(shard_conn *src, char *pos, size_t size)
{
    int rc = conn_value(src, "SELECT @@gtid_binlog_pos", pos, size);
    return rc ? rc : gtid_check(pos);
}

/* Until the target is within max_lag_ms of the source. */
static int catch_up(mv *m, shard_conn *src, shard_conn *t)
{
    double t0 = now(), lag = m->o.max_lag_ms / 1000.0;
    char pos[1024];
    int rc;

    for (;;) {
        bool reached = false;
        if ((rc = source_pos(src, pos, sizeof pos)) || (rc = wait_for(t, pos, lag, &reached)))
            return rc;
        if (reached)
            break;
        if ((rc = repl_health(m, t)))
            return rc;
        if (now() - t0 > m->o.catchup_timeout_s)
            return shard_fail(SHARD_ETIMEOUT, "the target did not catch up within %u s",
                              m->o.catchup_timeout_s);
        progress(m, SHARD_MOVE_CATCHUP, 0, 0);
    }
    m->r->catchup_seconds += now() - t0;
    return 0;
}

/* ---- cut-over ------------------------------------------------------------- */

/* Rename every moved table away (or back), in one atomic statement, kept
 * out of the binary log so the target never sees it. */
static int fence_set(mv *m, shard_conn *src, bool on)
{
    sqlbuf q;
    int rc;

    if ((rc = runf(src, "SET SESSION sql_log_bin = 0, lock_wait_timeout = %u",
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
    rc = run(src, &q);
    sql_free(&q);
    return rc;
}

/* Is the source fenced right now? (1 yes, 0 no) */
static int fenced(mv *m, shard_conn *src, int *yes)
{
    char sql[300], n[16];
    int rc;

    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.TABLES WHERE"
             " TABLE_SCHEMA = '%s' AND TABLE_NAME = '" SHARD_FENCE_PREFIX "%s'",
             m->tables[0].db, m->tables[0].name);
    if ((rc = conn_value(src, sql, n, sizeof n)))
        return rc;
    *yes = strcmp(n, "0") != 0;
    return 0;
}

/* Publish the map with the moved range on the target (compare-and-swap). */
static int publish(mv *m)
{
    int rc = 0;

    for (int attempt = 0; attempt < PUBLISH_TRIES; attempt++) {
        shard_map *cur = NULL, *next = NULL;
        long owner_src = -1;
        bool all_target = true;

        if ((rc = shard_store_load(m->ctx->store, &cur)))
            return shard_fail_prefix(rc, "publishing the map: ");
        for (unsigned s = m->first; s <= m->last; s++) {
            long p = shard_map_pair_index(cur, s);
            const char *pn = p >= 0 ? cur->pairs[p].name : "";
            all_target &= strcmp(pn, DP(m)->name) == 0;
            if (strcmp(pn, SP(m)->name) == 0)
                owner_src = p;
        }
        if (all_target) { /* a resumed move whose flip already happened */
            m->r->map_version = cur->version;
            shard_map_free(cur);
            return 0;
        }
        if (owner_src < 0 || shard_map_find_pair(cur, DP(m)->name) < 0) {
            shard_map_free(cur);
            return shard_fail(SHARD_ECONFLICT, "the stored map no longer has shards %u-%u on "
                              "%s: another change moved them", m->first, m->last,
                              SP(m)->name);
        }
        rc = map_reassign(cur, m->first, m->last, DP(m)->name, cur->version + 1, &next);
        if (rc == 0)
            rc = shard_store_publish(m->ctx->store, next, cur->version);
        if (rc == 0)
            m->r->map_version = next->version;
        shard_map_free(next);
        shard_map_free(cur);
        if (rc != SHARD_ECONFLICT)
            break;
    }
    return rc;
}

/* Fence, let the target apply up to the fence, open the verification
 * snapshot, flip the map. Returns 0 once flipped, SHARD_EBUSY when the
 * fence could not be taken in time (traffic continues as it was). */
/* MASTER_GTID_WAIT in steps shorter than any read timeout. */
static int wait_steps(shard_conn *t, const char *pos, unsigned seconds, bool *reached)
{
    int rc = 0;
    *reached = false;
    for (unsigned waited = 0; rc == 0 && !*reached && waited < seconds; waited += 2)
        rc = wait_for(t, pos, 2.0, reached);
    return rc;
}

/* Does the stored map already route the moved range to the target? */
static bool flipped_in_store(mv *m)
{
    shard_map *cur = NULL;
    bool all = true;

    if (shard_store_load(m->ctx->store, &cur))
        return false;
    for (unsigned s = m->first; s <= m->last && all; s++) {
        long p = shard_map_pair_index(cur, s);
        all = p >= 0 && strcmp(cur->pairs[p].name, DP(m)->name) == 0;
    }
    shard_map_free(cur);
    return all;
}

/* Cut-over failed before the flip: traffic goes back to the source. */
static int lift_fence(mv *m, shard_conn *src, int rc)
{
    char msg[600];
    int urc;

    snprintf(msg, sizeof msg, "%s", shard_errmsg());
    urc = fence_set(m, src, false);
    m->fence[0] = '\0';
    journal_save(m, SHARD_MOVE_CATCHUP, urc ? "the fence could not be lifted" :
                                              "cut-over failed: fence lifted");
    if (urc)
        return shard_fail(urc, "cut-over failed (%s) and the fence could not be lifted: %s; "
                          "resume or abort the move", msg, shard_errmsg());
    return shard_fail(rc == SHARD_EBUSY ? SHARD_EBUSY : rc, "%s (fence lifted)", msg);
}

/* The target master's position just after the flip: everything moved is
 * in it, and cleanup waits until the target's standby has it too. */
static int read_flip(mv *m, shard_conn *t)
{
    char *pos = NULL;
    int rc = repl_value(t, "SELECT @@gtid_binlog_pos", &pos);

    if (rc == 0 && (rc = repl_gtid_check(pos)) == 0) {
        free(m->flip);
        m->flip = pos;
        return 0;
    }
    free(pos);
    return rc;
}

static int cut_over(mv *m, shard_conn *src, shard_conn *t, shard_conn *v)
{
    double t0;
    bool reached = false;
    int rc;

    if ((rc = catch_up(m, src, t)))
        return rc;
    t0 = now(); /* from here until the new map is out, the moved shards are unwritable */
    m->r->fence_attempts++;
    rc = fence_set(m, src, true);
    if (rc == SHARD_EBUSY) /* lock wait timeout: a long transaction holds a table */
        return shard_fail(SHARD_EBUSY, "fence attempt %u: a transaction held a moved table "
                          "longer than %u s", m->r->fence_attempts, m->o.fence_timeout_s);
    if (rc)
        return rc;
    if ((rc = source_pos(src, m->fence, sizeof m->fence)) == 0 &&
        (rc = journal_save(m, SHARD_MOVE_FENCED, NULL)) == 0)
        rc = wait_steps(t, m->fence, FENCE_WAIT_S, &reached);
    if (rc == 0 && !reached)
        rc = shard_fail(SHARD_EBUSY, "the target did not apply up to the fence within %d s",
                        FENCE_WAIT_S);
    /* The target now holds exactly the source's final state: snapshot it
     * for verification before any client can write there. */
    if (rc == 0 && ((rc = runf(v, "SET SESSION time_zone = '+00:00'")) == 0))
        rc = runf(v, "START TRANSACTION WITH CONSISTENT SNAPSHOT");
    if (rc == 0)
        rc = publish(m);
    if (rc && !flipped_in_store(m))
        return lift_fence(m, src, rc);
    if (rc) /* the map did flip (an ambiguous publish answer): carry on */
        rc = 0;
    m->r->pause_ms = (now() - t0) * 1000.0;
    m->r->cutover_seconds = now() - t0;
    if ((rc = read_flip(m, t)) || (rc = journal_save(m, SHARD_MOVE_FLIPPED, NULL)))
        return rc;
    shard_ctx_reload(m->ctx);
    return 0;
}

/* ---- verification --------------------------------------------------------- */

/* Compare two rows' primary keys: the first column (numeric or bytes),
 * then the second when the key has two (mapping tables). */
static int key_cmp(MYSQL_ROW a, unsigned long *la, MYSQL_ROW b, unsigned long *lb,
                   MYSQL_FIELD *f, unsigned nkey)
{
    for (unsigned i = 0; i < nkey; i++) {
        int c;
        if (IS_NUM(f[i].type)) {
            unsigned long long x = strtoull(a[i], NULL, 10), y = strtoull(b[i], NULL, 10);
            c = x < y ? -1 : x > y;
        } else {
            size_t n = la[i] < lb[i] ? la[i] : lb[i];
            c = memcmp(a[i], b[i], n);
            if (c == 0)
                c = la[i] < lb[i] ? -1 : la[i] > lb[i];
        }
        if (c)
            return c;
    }
    return 0;
}

static bool row_eq(MYSQL_ROW a, unsigned long *la, MYSQL_ROW b, unsigned long *lb,
                   unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (!a[i] != !b[i])
            return false;
        if (a[i] && (la[i] != lb[i] || memcmp(a[i], b[i], la[i]) != 0))
            return false;
    }
    return true;
}

static unsigned key_columns(MYSQL_FIELD *f, unsigned n)
{
    unsigned k = 0;
    while (k < n && (f[k].flags & PRI_KEY_FLAG))
        k++;
    return k ? k : 1;
}

static int verify_table(mv *m, shard_conn *src, shard_conn *v, const mtable *t)
{
    MYSQL_RES *rs = NULL, *rt = NULL;
    MYSQL_ROW a, b;
    unsigned long *la = NULL, *lb = NULL;
    unsigned n, nkey;
    int rc;

    if ((rc = runf(src, "SELECT * FROM `%s`.`" SHARD_FENCE_PREFIX "%s` ORDER BY 1%s", t->db,
                   t->name, "")) ||
        !(rs = mysql_use_result(src->my)))
        return rc ? rc : shard_fail(SHARD_ESERVER, "%s", mysql_error(src->my));
    n = mysql_num_fields(rs);
    nkey = key_columns(mysql_fetch_fields(rs), n);
    if (nkey == 2) { /* ORDER BY 1 is not enough for a two-column key */
        mysql_free_result(rs);
        if ((rc = runf(src, "SELECT * FROM `%s`.`" SHARD_FENCE_PREFIX "%s` ORDER BY 1, 2",
                       t->db, t->name)) ||
            !(rs = mysql_use_result(src->my)))
            return rc ? rc : shard_fail(SHARD_ESERVER, "%s", mysql_error(src->my));
    }
    if ((rc = runf(v, "SELECT * FROM `%s`.`%s` ORDER BY 1%s", t->db, t->name,
                   nkey == 2 ? ", 2" : "")) ||
        !(rt = mysql_use_result(v->my))) {
        mysql_free_result(rs);
        return rc ? rc : shard_fail(SHARD_ESERVER, "%s", mysql_error(v->my));
    }
    if (mysql_num_fields(rt) != n) {
        mysql_free_result(rs);
        mysql_free_result(rt);
        return shard_fail(SHARD_EVERIFY, "%s.%s: the target has %u columns, the source %u",
                          t->db, t->name, mysql_num_fields(rt), n);
    }
    a = mysql_fetch_row(rs);
    la = a ? mysql_fetch_lengths(rs) : NULL;
    b = mysql_fetch_row(rt);
    lb = b ? mysql_fetch_lengths(rt) : NULL;
    while (a || b) {
        int c = !a ? 1 : !b ? -1 : key_cmp(a, la, b, lb, mysql_fetch_fields(rs), nkey);
        if (c == 0 && !row_eq(a, la, b, lb, n))
            m->r->mismatches++;
        else if (c != 0)
            m->r->mismatches++; /* a row on one side only */
        if (c <= 0) {
            m->r->rows_verified++;
            a = mysql_fetch_row(rs);
            la = a ? mysql_fetch_lengths(rs) : NULL;
        }
        if (c >= 0) {
            b = mysql_fetch_row(rt);
            lb = b ? mysql_fetch_lengths(rt) : NULL;
        }
        if (m->r->rows_verified % 1000 == 0)
            progress(m, SHARD_MOVE_VERIFYING, m->r->rows_verified, m->total);
    }
    if (mysql_errno(src->my) || mysql_errno(v->my))
        rc = shard_fail(SHARD_ECONNECT, "verifying %s.%s: %s%s", t->db, t->name,
                        mysql_error(src->my), mysql_error(v->my));
    mysql_free_result(rs);
    mysql_free_result(rt);
    return rc;
}

static int verify(mv *m, shard_conn *src, shard_conn *v)
{
    double t0 = now();
    int rc = journal_save(m, SHARD_MOVE_VERIFYING, NULL);

    m->r->rows_verified = m->r->mismatches = 0;
    if (!m->total) /* resumed: the totals are the source's rows */
        for (size_t i = 0; rc == 0 && i < m->ntables; i++) {
            char sql[300], n[32];
            snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM `%s`.`" SHARD_FENCE_PREFIX "%s`",
                     m->tables[i].db, m->tables[i].name);
            if ((rc = conn_value(src, sql, n, sizeof n)) == 0)
                m->total += strtoull(n, NULL, 10);
        }
    if (rc == 0)
        rc = runf(src, "SET SESSION time_zone = '+00:00'");
    for (size_t i = 0; rc == 0 && i < m->ntables; i++)
        rc = verify_table(m, src, v, &m->tables[i]);
    runf(v, "COMMIT");
    m->r->verify_seconds = now() - t0;
    progress(m, SHARD_MOVE_VERIFYING, m->r->rows_verified, m->total);
    return rc;
}

/* ---- the target pair's own links ------------------------------------------ */

/* Is the unnamed (pair) replication connection of this server running
 * without error? Appends what is wrong to msg. */
static bool link_ok(mv *m, const shard_endpoint *ep, char *msg, size_t size)
{
    shard_conn *c = NULL;
    MYSQL_RES *res;
    MYSQL_ROW row;
    MYSQL_FIELD *f;
    bool ok = true;

    if (dconn(m, ep, &c) || conn_query_str(c, "SHOW SLAVE STATUS") ||
        !(res = mysql_store_result(c->my))) {
        snprintf(msg + strlen(msg), size - strlen(msg), "%s: cannot read its replication "
                 "status; ", ep->text);
        dclose(c);
        return false;
    }
    f = mysql_fetch_fields(res);
    row = mysql_fetch_row(res);
    for (unsigned i = 0; row && i < mysql_num_fields(res); i++) {
        const char *v = row[i] ? row[i] : "";
        if ((strcmp(f[i].name, "Slave_IO_Running") == 0 ||
             strcmp(f[i].name, "Slave_SQL_Running") == 0) && strcmp(v, "Yes") != 0) {
            snprintf(msg + strlen(msg), size - strlen(msg), "%s: %s is %s; ", ep->text,
                     f[i].name, v);
            ok = false;
        } else if (strcmp(f[i].name, "Last_Error") == 0 && v[0]) {
            snprintf(msg + strlen(msg), size - strlen(msg), "%s: %.200s; ", ep->text, v);
            ok = false;
        }
    }
    mysql_free_result(res);
    dclose(c);
    return ok;
}

/* DESIGN.md: the moved rows come back through the target's standby; check
 * the pair is still a pair at the end (both links running, no error). */
static void check_target_pair(mv *m)
{
    char msg[1024] = "";
    bool ok;

    if (!DP(m)->has_standby) {
        m->r->target_pair_healthy = 1;
        return;
    }
    ok = link_ok(m, &DP(m)->master, msg, sizeof msg);
    ok = link_ok(m, &DP(m)->standby, msg, sizeof msg) && ok;
    m->r->target_pair_healthy = ok;
    if (!ok)
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: target pair %s is not healthy: %s",
                (unsigned long long)m->id, DP(m)->name, msg);
}

/* ---- cleanup -------------------------------------------------------------- */
/*
 * The source may only go once both halves of the target pair hold every
 * moved row: the standby has applied the target master's position at the
 * flip, and both of the pair's links run. Waits (bounded, in short polls)
 * while a link is only reconnecting; a stopped link fails at once. On
 * failure the source stays, and a resume waits again (libshard-move(7)).
 */
static int target_pair_ready(mv *m)
{
    shard_conn *t = NULL, *sb = NULL;
    double end = now() + PAIR_WAIT_S;
    int rc;

    m->r->target_pair_healthy = 0;
    if (!DP(m)->has_standby) {
        m->r->target_pair_healthy = 1;
        return 0;
    }
    if ((rc = dconn(m, &DP(m)->master, &t)) || (rc = dconn(m, &DP(m)->standby, &sb)))
        goto out;
    if ((!m->flip || !m->flip[0]) && (rc = read_flip(m, t)))
        goto out;
    for (;;) {
        repl_status ms, ss;
        const repl_link *lm, *ls;
        char *have = NULL, dm[400], ds[400];
        bool caught;

        if ((rc = repl_status_read(t, &ms)))
            goto out;
        if ((rc = repl_status_read(sb, &ss))) {
            repl_status_free(&ms);
            goto out;
        }
        /* Applied there: in its binary log (log_slave_updates) or its
         * replication position, whichever is further. */
        rc = repl_value(sb, "SELECT CONCAT(@@gtid_binlog_pos, ',', @@gtid_slave_pos)", &have);
        caught = rc == 0 && repl_gtid_covers(have, m->flip, NULL, 0);
        free(have);
        lm = repl_status_find(&ms, "");
        ls = repl_status_find(&ss, "");
        snprintf(dm, sizeof dm, "no replication link");
        snprintf(ds, sizeof ds, "no replication link");
        if (lm)
            repl_link_describe(lm, dm, sizeof dm);
        if (ls)
            repl_link_describe(ls, ds, sizeof ds);
        if (rc == 0 && caught && lm && ls && repl_link_running(lm) && repl_link_running(ls)) {
            repl_status_free(&ms);
            repl_status_free(&ss);
            m->r->target_pair_healthy = 1;
            break;
        }
        if (rc == 0 && (!lm || !ls || repl_link_stopped(lm) || repl_link_stopped(ls) ||
                        now() > end))
            rc = shard_fail(SHARD_EBUSY, "target %s is not a healthy pair: standby %s %s "
                            "everything up to the flip (its link: %s; master %s's link: %s); "
                            "the source copy is kept: repair the pair's replication, then "
                            "resume move %llu", DP(m)->name, DP(m)->standby.text,
                            caught ? "has" : "has not applied", ds, DP(m)->master.text, dm,
                            (unsigned long long)m->id);
        repl_status_free(&ms);
        repl_status_free(&ss);
        if (rc)
            goto out;
        sleep_ms(200);
    }
out:
    dclose(sb);
    dclose(t);
    if (rc)
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: %s", (unsigned long long)m->id,
                shard_errmsg());
    return rc;
}


static int cleanup(mv *m, shard_conn *src)
{
    int rc = 0;

    /* Mismatches first: a move recorded as cleaning drops the source when
     * it is resumed, so a failed verification must never get there. */
    if (m->r->mismatches) {
        char msg[200];
        snprintf(msg, sizeof msg, "verification found %llu mismatched rows: the source "
                 "copy is kept (fenced) for inspection", (unsigned long long)m->r->mismatches);
        /* The move is over (the map points at the target); the source stays. */
        check_target_pair(m);
        journal_save(m, SHARD_MOVE_DONE, msg);
        return shard_fail(SHARD_EVERIFY, "move %llu: %s", (unsigned long long)m->id, msg);
    }
    rc = journal_save(m, SHARD_MOVE_CLEANING, NULL);
    if (rc == 0 && (m->o.flags & SHARD_MOVE_KEEP_SOURCE))
        check_target_pair(m); /* nothing is dropped: a warning is enough */
    else if (rc == 0)
        rc = target_pair_ready(m);
    if (rc == 0 && !(m->o.flags & SHARD_MOVE_KEEP_SOURCE)) {
        /* Logged, so the source's standby drops them too. */
        for (unsigned s = m->first; rc == 0 && s <= m->last; s++) {
            char db[SHARD_DBNAME_MAX], sql[300], live[16];
            db_of(m, s, db);
            /* A table that is not fenced was created after the fence: it may
             * hold writes the target never saw. Keep the database. */
            snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.TABLES WHERE"
                     " TABLE_SCHEMA = '%s' AND TABLE_NAME NOT LIKE '\\_moved\\_%%'", db);
            if ((rc = conn_value(src, sql, live, sizeof live)))
                break;
            if (strcmp(live, "0") != 0) {
                rc = shard_fail(SHARD_EBUSY, "source %s still has %s unfenced table(s) in %s "
                                "(created after the fence?): not dropped; check and drop it "
                                "by hand, then resume", SP(m)->name, live, db);
                break;
            }
            rc = runf(src, "SET SESSION sql_log_bin = 1");
            if (rc == 0)
                rc = runf(src, "DROP DATABASE IF EXISTS `%s`", db);
        }
        m->r->source_dropped = rc == 0;
    }
    return rc ? rc : journal_save(m, SHARD_MOVE_DONE, NULL);
}

/* ---- the phases, run from wherever the journal says ------------------------ */

static int drive(mv *m)
{
    shard_conn *src = NULL, *t = NULL, *v = NULL;
    int rc;

    if ((rc = dconn(m, &SP(m)->master, &src)) || (rc = dconn(m, &DP(m)->master, &t)) ||
        (rc = dconn(m, &DP(m)->master, &v)))
        goto out;
    if (m->resumed) {
        /* Killed between STOP ALL SLAVES and the restart, the target pair's
         * own link stayed stopped: start it (a running one is left alone;
         * a server without one says so, which is fine). */
        runf(t, "START SLAVE");
    }
    if (m->phase <= SHARD_MOVE_COPYING) {
        /* A resumed copy starts again from a new snapshot; a fresh move
         * never drops anything on the target (create_target refuses a
         * target that already has these databases). */
        if ((rc = list_tables(m, src)) || (m->resumed && (rc = repl_remove(m))) ||
            (m->resumed && (rc = drop_target(m))))
            goto out;
        if ((rc = create_target(m, src)) == SHARD_EEXISTS && !m->resumed) {
            /* Not ours: end the move here, so that no resume ever drops it. */
            char msg[600];
            snprintf(msg, sizeof msg, "%s", shard_errmsg());
            journal_save(m, SHARD_MOVE_ABORTED, msg);
            rc = shard_fail(SHARD_EEXISTS, "%s", msg);
            m->id = 0; /* recorded: nothing more to journal */
            goto out;
        }
        if (rc || (rc = copy_phase(m)) || (rc = repl_setup(m)) ||
            (rc = journal_save(m, SHARD_MOVE_CATCHUP, NULL)))
            goto out;
    } else if (m->phase < SHARD_MOVE_CLEANING && (rc = list_tables(m, src))) {
        goto out; /* (cleaning only drops databases, some maybe already gone) */
    }
    if (m->phase == SHARD_MOVE_CATCHUP || m->phase == SHARD_MOVE_FENCED) {
        int is_fenced = 0;
        if ((rc = start_filtered(m, t)) || (rc = fenced(m, src, &is_fenced)))
            goto out;
        if (is_fenced && m->phase == SHARD_MOVE_FENCED && m->fence[0]) {
            /* Killed after fencing: finish this cut-over. */
            bool reached = false;
            double t0 = now();
            if ((rc = wait_steps(t, m->fence, FENCE_WAIT_S, &reached)))
                goto out;
            if (!reached) {
                rc = shard_fail(SHARD_ETIMEOUT, "the target did not reach the fence");
                goto out;
            }
            if ((rc = runf(v, "SET SESSION time_zone = '+00:00'")) ||
                (rc = runf(v, "START TRANSACTION WITH CONSISTENT SNAPSHOT")) ||
                (rc = publish(m)) || (rc = read_flip(m, t)) ||
                (rc = journal_save(m, SHARD_MOVE_FLIPPED, NULL)))
                goto out;
            m->r->cutover_seconds = now() - t0;
            shard_ctx_reload(m->ctx);
        } else {
            if (is_fenced && (rc = fence_set(m, src, false))) /* fenced, position lost */
                goto out;
            for (;;) {
                rc = cut_over(m, src, t, v);
                if (rc != SHARD_EBUSY || m->r->fence_attempts >= m->o.cutover_attempts)
                    break;
                ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: %s; retrying",
                        (unsigned long long)m->id, shard_errmsg());
                sleep_ms(200u * m->r->fence_attempts);
            }
            if (rc)
                goto out;
        }
        if ((rc = repl_remove(m)))
            goto out;
    } else if (m->phase == SHARD_MOVE_FLIPPED || m->phase == SHARD_MOVE_VERIFYING) {
        /* Resumed after the flip: compare with the target as it is now. */
        if ((rc = repl_remove(m)) || (rc = runf(v, "SET SESSION time_zone = '+00:00'")) ||
            (rc = runf(v, "START TRANSACTION WITH CONSISTENT SNAPSHOT")))
            goto out;
    }
    if (m->phase < SHARD_MOVE_CLEANING && (rc = verify(m, src, v)))
        goto out;
    rc = cleanup(m, src);
out:
    if (rc && m->ctl && m->id) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s", shard_errmsg());
        journal_save(m, m->phase, msg);
        shard_fail(rc, "%s", msg);
    }
    dclose(v);
    dclose(t);
    dclose(src);
    return rc;
}

static int options(mv *m, const shard_move_options *opts)
{
    static const shard_move_options defaults = SHARD_MOVE_OPTIONS_INIT;

    m->o = opts ? *opts : defaults;
    if (m->o.version < 1 || m->o.version > SHARD_MOVE_OPTIONS_VERSION)
        return shard_fail(SHARD_EINVAL, "shard_move_options.version %u is not supported",
                          m->o.version);
    if (!m->o.batch_rows)
        m->o.batch_rows = defaults.batch_rows;
    if (!m->o.copy_threads)
        m->o.copy_threads = 1;
    if (!m->o.cutover_attempts)
        m->o.cutover_attempts = 1;
    if (!m->o.catchup_timeout_s)
        m->o.catchup_timeout_s = defaults.catchup_timeout_s;
    return 0;
}

static void mv_free(mv *m)
{
    if (m->ctl)
        dclose(m->ctl);
    free(m->tables);
    free(m->flip);
    shard_map_free(m->map);
    pthread_mutex_destroy(&m->lock);
}

static int plan_text(mv *m, char **plan)
{
    shard_conn *src = NULL;
    sqlbuf p;
    int rc;

    sql_init(&p);
    sql_addf(&p, "move ID shards %u-%u from %s (master %s) to %s (master %s)\n", m->first,
             m->last, SP(m)->name, SP(m)->master.text, DP(m)->name, DP(m)->master.text);
    if ((rc = preflight(m, &p)) || (rc = dconn(m, &SP(m)->master, &src)) ||
        (rc = list_tables(m, src)) || (rc = count_rows(m, src)))
        goto out;
    for (size_t i = 0; i < m->ntables; i++) {
        char sql[300], bytes[32];
        snprintf(sql, sizeof sql, "SELECT DATA_LENGTH + INDEX_LENGTH FROM"
                 " information_schema.TABLES WHERE TABLE_SCHEMA = '%s' AND TABLE_NAME = '%s'",
                 m->tables[i].db, m->tables[i].name);
        if ((rc = conn_value(src, sql, bytes, sizeof bytes)))
            goto out;
        sql_addf(&p, "table %s.%s: %llu rows, %s bytes on disk\n", m->tables[i].db,
                 m->tables[i].name, (unsigned long long)m->tables[i].rows, bytes);
    }
    sql_addf(&p, "total: %zu tables, %llu rows\n", m->ntables, (unsigned long long)m->total);
    sql_add(&p, "phases: create tables on the target from the source's definitions; copy a "
                "consistent snapshot in primary-key order; replicate the moved databases "
                "from the snapshot's GTID position; fence the source (rename, not logged); "
                "wait for the target; publish the map; verify every row; drop the source "
                "copy\n");
    if ((rc = sql_check(&p)) == 0)
        rc = copy_out(p.s, p.len, plan, NULL);
out:
    dclose(src);
    sql_free(&p);
    return rc;
}

int shard_move(shard_ctx *ctx, unsigned first, unsigned last, const char *target,
               const shard_move_options *opts, shard_move_report *report, char **plan)
{
    shard_move_report scratch;
    mv m;
    int rc;

    if (!ctx || !target)
        return shard_fail(SHARD_EINVAL, "shard_move: NULL argument");
    memset(&m, 0, sizeof m);
    memset(report ? report : &scratch, 0, sizeof scratch);
    pthread_mutex_init(&m.lock, NULL);
    m.ctx = ctx;
    m.r = report ? report : &scratch;
    m.first = first;
    m.last = last;
    m.map = ctx_map(ctx);
    m.version_from = m.map->version;
    if ((rc = options(&m, opts)) || (rc = resolve_pairs(&m, target)))
        goto out;
    if (m.o.flags & SHARD_MOVE_DRY_RUN) {
        if (!plan) {
            rc = shard_fail(SHARD_EINVAL, "a dry run needs somewhere to put the plan");
            goto out;
        }
        rc = plan_text(&m, plan);
        goto out;
    }
    if ((rc = preflight(&m, NULL)) || (rc = journal_open(&m)))
        goto out;
    {
        /* One move at a time per pair of pairs: they would share the
         * source's one replication connection on the target. */
        char sql[400], busy[32];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM " CONTROL_DB ".moves WHERE phase < %d"
                 " AND source_pair = '%s' AND target_pair = '%s'", SHARD_MOVE_DONE,
                 SP(&m)->name, DP(&m)->name);
        if ((rc = conn_value(m.ctl, sql, busy, sizeof busy)))
            goto out;
        if (strcmp(busy, "0") != 0) {
            rc = shard_fail(SHARD_EBUSY, "an unfinished move from %s to %s exists: resume "
                            "or abort it first (shardctl move status)", SP(&m)->name,
                            DP(&m)->name);
            goto out;
        }
    }
    if ((rc = journal_insert(&m)) || (rc = journal_save(&m, SHARD_MOVE_PLANNED, NULL)))
        goto out;
    rc = drive(&m);
out:
    mv_free(&m);
    return rc;
}

/* ---- journal lookups: resume, abort, status ---------------------------------- */

typedef struct jrow {
    uint64_t id;
    char source[65], target[65];
    unsigned first, last;
    int phase, flags;
    char snap[1024], fence[1024];
    uint64_t version_from;
} jrow;

/* Unfinished moves on every master of the map (the journal lives on the
 * target's master). */
static int find_moves(shard_ctx *ctx, const shard_map *map, uint64_t id, jrow *out,
                      size_t *n)
{
    *n = 0;
    for (size_t p = 0; p < map->npairs; p++) {
        shard_server *s = ctx_server(ctx, map, p);
        shard_conn *c = NULL;
        MYSQL_RES *res;
        MYSQL_ROW row;
        char sql[400];
        int rc;

        if (!s || conn_get(ctx, s, &c))
            continue; /* a dead pair holds no journal we can act on now */
        snprintf(sql, sizeof sql, "SELECT id, source_pair, target_pair, first_shard,"
                 " last_shard, phase, flags, snapshot_gtid, fence_gtid, map_version_from"
                 " FROM " CONTROL_DB ".moves WHERE phase < %d AND (%llu = 0 OR id = %llu)"
                 " ORDER BY id", SHARD_MOVE_DONE, (unsigned long long)id,
                 (unsigned long long)id);
        rc = conn_query_str(c, sql);
        if (rc == 0 && (res = mysql_store_result(c->my))) {
            while ((row = mysql_fetch_row(res)) && *n < 16) {
                jrow *j = &out[(*n)++];
                j->id = strtoull(row[0], NULL, 10);
                snprintf(j->source, sizeof j->source, "%s", row[1]);
                snprintf(j->target, sizeof j->target, "%s", row[2]);
                j->first = (unsigned)atoi(row[3]);
                j->last = (unsigned)atoi(row[4]);
                j->phase = atoi(row[5]);
                j->flags = atoi(row[6]);
                snprintf(j->snap, sizeof j->snap, "%s", row[7]);
                snprintf(j->fence, sizeof j->fence, "%s", row[8]);
                j->version_from = strtoull(row[9], NULL, 10);
            }
            mysql_free_result(res);
        }
        conn_put(c, true);
    }
    return 0;
}

int move_unfinished_on(shard_ctx *ctx, const shard_map *map, const char *pair,
                       uint64_t *id)
{
    jrow rows[16];
    size_t n = 0;

    *id = 0;
    find_moves(ctx, map, 0, rows, &n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].source, pair) == 0 || strcmp(rows[i].target, pair) == 0) {
            *id = rows[i].id;
            return 1;
        }
    return 0;
}

static int load_move(shard_ctx *ctx, uint64_t id, mv *m, const shard_move_options *opts)
{
    jrow rows[16];
    size_t n = 0;
    jrow *j;
    int rc;

    m->map = ctx_map(ctx);
    if ((rc = options(m, opts)) || (rc = find_moves(ctx, m->map, id, rows, &n)))
        return rc;
    if (n == 0)
        return shard_fail(SHARD_ENOTFOUND, id ? "no unfinished move %llu" :
                          "no unfinished move%.0llu", (unsigned long long)id);
    if (n > 1)
        return shard_fail(SHARD_EINVAL, "%zu unfinished moves: name one (shardctl move "
                          "status)", n);
    j = &rows[0];
    m->id = j->id;
    m->resumed = true;
    m->first = j->first;
    m->last = j->last;
    m->phase = j->phase;
    m->version_from = j->version_from;
    m->o.flags |= j->flags & SHARD_MOVE_KEEP_SOURCE;
    snprintf(m->snap, sizeof m->snap, "%s", j->snap);
    snprintf(m->fence, sizeof m->fence, "%s", j->fence);
    snprintf(m->name, sizeof m->name, "libshard_move_%llu", (unsigned long long)m->id);
    m->src = shard_map_find_pair(m->map, j->source);
    m->dst = shard_map_find_pair(m->map, j->target);
    if (m->src < 0 || m->dst < 0)
        return shard_fail(SHARD_EINVAL, "move %llu names pairs %s and %s; the map lacks one",
                          (unsigned long long)m->id, j->source, j->target);
    snprintf(m->r->source, sizeof m->r->source, "%s", j->source);
    snprintf(m->r->target, sizeof m->r->target, "%s", j->target);
    m->r->move_id = m->id;
    m->r->first = m->first;
    m->r->last = m->last;
    m->r->phase = m->phase;
    if ((rc = journal_open(m)) || (rc = journal_lock(m)))
        return rc;
    {
        char sql[128];
        snprintf(sql, sizeof sql, "SELECT flip_gtid FROM " CONTROL_DB ".moves WHERE id = %llu",
                 (unsigned long long)m->id);
        if ((rc = repl_value(m->ctl, sql, &m->flip)) || (rc = repl_gtid_check(m->flip)))
            return rc;
    }
    return 0;
}

int shard_move_resume(shard_ctx *ctx, uint64_t move_id, const shard_move_options *opts,
                      shard_move_report *report)
{
    shard_move_report scratch;
    mv m;
    int rc;

    if (!ctx)
        return shard_fail(SHARD_EINVAL, "shard_move_resume: NULL context");
    memset(&m, 0, sizeof m);
    memset(report ? report : &scratch, 0, sizeof scratch);
    pthread_mutex_init(&m.lock, NULL);
    m.ctx = ctx;
    m.r = report ? report : &scratch;
    rc = load_move(ctx, move_id, &m, opts);
    if (rc == 0) {
        ctx_log(ctx, SHARD_LOG_INFO, "move %llu: resuming in phase %s",
                (unsigned long long)m.id, shard_move_phase_name(m.phase));
        rc = drive(&m);
    }
    mv_free(&m);
    return rc;
}

int shard_move_abort(shard_ctx *ctx, uint64_t move_id)
{
    shard_move_report r;
    shard_conn *src = NULL;
    mv m;
    int rc, is_fenced = 0;

    if (!ctx)
        return shard_fail(SHARD_EINVAL, "shard_move_abort: NULL context");
    memset(&m, 0, sizeof m);
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&m.lock, NULL);
    m.ctx = ctx;
    m.r = &r;
    if ((rc = load_move(ctx, move_id, &m, NULL)))
        goto out;
    if (m.phase >= SHARD_MOVE_FLIPPED || flipped_in_store(&m)) {
        rc = shard_fail(SHARD_EBUSY, "move %llu already switched the map to %s: it can only "
                        "be resumed", (unsigned long long)m.id, DP(&m)->name);
        goto out;
    }
    if ((rc = dconn(&m, &SP(&m)->master, &src)) || (rc = list_tables(&m, src)) ||
        (rc = fenced(&m, src, &is_fenced)))
        goto out;
    /* Traffic first: lift the fence, then take the copy apart. */
    if (is_fenced && (rc = fence_set(&m, src, false)))
        goto out;
    if ((rc = repl_remove(&m)) || (rc = drop_target(&m)))
        goto out;
    m.fence[0] = '\0';
    rc = journal_save(&m, SHARD_MOVE_ABORTED, "aborted");
out:
    dclose(src);
    mv_free(&m);
    return rc;
}

/* One JSON object as a line of out; takes the reference (NULL: skipped). */
static void add_json_line(sqlbuf *out, json_t *o)
{
    char *line = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                       JSON_REAL_PRECISION(6))
                   : NULL;
    json_malloc_t jm;
    json_free_t jf;

    if (line) {
        sql_add(out, line);
        sql_add(out, "\n");
        json_get_alloc_funcs(&jm, &jf);
        jf(line);
    }
    json_decref(o);
}

int shard_move_status(shard_ctx *ctx, char **text)
{
    shard_map *map;
    sqlbuf out;
    int rc = 0, qrc;
    bool partial = false;

    if (!ctx || !text)
        return shard_fail(SHARD_EINVAL, "shard_move_status: NULL argument");
    map = ctx_map(ctx);
    sql_init(&out);
    for (size_t p = 0; p < map->npairs; p++) {
        shard_server *s = ctx_server(ctx, map, p);
        shard_conn *c = NULL;
        MYSQL_RES *res;
        MYSQL_ROW row;

        if (!s || conn_get(ctx, s, &c)) {
            /* Say which master could not be asked, rather than nothing. */
            add_json_line(&out, json_pack("{s:s,s:s}", "pair", map->pairs[p].name, "error",
                                          shard_errmsg()));
            partial = true;
            continue;
        }
        qrc = conn_query_str(c, "SELECT id, source_pair, target_pair, first_shard,"
                                " last_shard, phase, rows_copied, rows_verified, mismatches,"
                                " pause_ms, message, updated_at FROM " CONTROL_DB ".moves"
                                " ORDER BY id");
        if (qrc && c->last_errno != ER_NO_SUCH_TABLE && c->last_errno != ER_BAD_DB_ERROR) {
            /* Not "no journal here": e.g. no right to read it. Say so. */
            add_json_line(&out, json_pack("{s:s,s:s}", "pair", map->pairs[p].name, "error",
                                          shard_errmsg()));
            partial = true;
        }
        if (qrc == 0 && (res = mysql_store_result(c->my))) {
            while ((row = mysql_fetch_row(res))) {
                add_json_line(&out, json_pack(
                    "{s:I,s:s,s:s,s:i,s:i,s:s,s:I,s:I,s:I,s:f,s:s,s:s}",
                    "id", (json_int_t)strtoll(row[0], NULL, 10), "source", row[1],
                    "target", row[2], "first", atoi(row[3]), "last", atoi(row[4]),
                    "phase", shard_move_phase_name(atoi(row[5])),
                    "rows_copied", (json_int_t)strtoll(row[6], NULL, 10),
                    "rows_verified", (json_int_t)strtoll(row[7], NULL, 10),
                    "mismatches", (json_int_t)strtoll(row[8], NULL, 10),
                    "pause_ms", strtod(row[9], NULL), "message", row[10],
                    "updated_at", row[11]));
            }
            mysql_free_result(res);
        }
        conn_put(c, true);
    }
    shard_map_free(map);
    if ((rc = sql_check(&out)) == 0)
        rc = copy_out(out.s ? out.s : "", out.len, text, NULL);
    sql_free(&out);
    if (rc == 0 && partial)
        rc = shard_fail(SHARD_EPARTIAL, "some masters could not be asked: see their "
                        "\"error\" lines");
    return rc;
}
