/*
 * The helpers every file of the move uses (move.h): the pairs, database
 * names and connections of a move, statements, progress and the copy's
 * counters, positions. They use nothing of the other files of lib/move/.
 */
#include "move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const shard_pairdef *move_pair(const mv *m, int side)
{
    return &m->map->pairs[m->sides[side].pi];
}

const shard_pairdef *move_sp(const mv *m)
{
    return move_pair(m, m->dir);
}

const shard_pairdef *move_dp(const mv *m)
{
    return move_pair(m, !m->dir);
}

int move_open_masters(mv *m)
{
    int rc = 0;

    for (int s = 0; s < 2 && rc == 0; s++)
        if (!m->sides[s].c)
            rc = move_conn(m, &move_pair(m, s)->master, &m->sides[s].c);
    return rc;
}

void move_close_masters(mv *m)
{
    move_close(&m->sides[0].c);
    move_close(&m->sides[1].c);
}

void move_turn(mv *m)
{
    m->dir = 1;
    move_set_str(&m->fence, "");
    move_set_str(&m->flip, "");
    m->fence_t0 = 0;
    m->listed = false;
    snprintf(m->r->source, sizeof m->r->source, "%s", move_sp(m)->name);
    snprintf(m->r->target, sizeof m->r->target, "%s", move_dp(m)->name);
}

int move_public_phase(const mv *m)
{
    if (!m->dir)
        return (int)m->phase;
    if (m->phase == MOVE_DONE)
        return MOVE_REVERTED;
    return move_over((int)m->phase) ? (int)m->phase : MOVE_REVERTING;
}

void move_db(const mv *m, unsigned shard, char *db)
{
    shard__dbfmt_name(&m->map->dbfmt, shard, db);
}

int move_conn(mv *m, const shard_endpoint *ep, shard_conn **out)
{
    shard_server *s = ctx_server_at(m->ctx, ep);
    int rc;

    *out = NULL;
    rc = s ? conn_get(m->ctx, s, out) : shard__fail(SHARD_ENOMEM, "out of memory");
    /* Some sit idle through an hours-long copy: the server must not drop
     * them (the journal's lock lives on one). Never pooled, so no leak. */
    if (rc == 0 && (rc = conn_query_str(*out, "SET SESSION wait_timeout = 604800"))) {
        conn_put(*out, false);
        *out = NULL;
    }
    return rc;
}

void move_close(shard_conn **c)
{
    if (*c)
        conn_put(*c, false);
    *c = NULL;
}

int move_wsrc(mv *m, unsigned w, shard_conn **out)
{
    int rc = 0;

    if (!move_wsrcs(m)[w])
        rc = move_conn(m, &move_sp(m)->master, &move_wsrcs(m)[w]);
    *out = move_wsrcs(m)[w];
    return rc;
}

int move_wdst(mv *m, unsigned w, shard_conn **out)
{
    int rc = 0;

    if (!move_wdsts(m)[w])
        rc = move_conn(m, &move_dp(m)->master, &move_wdsts(m)[w]);
    *out = move_wdsts(m)[w];
    return rc;
}

void move_close_workers(mv *m)
{
    for (unsigned w = 0; w < MOVE_MAX_WORKERS; w++) {
        move_close(&m->sides[0].w[w]);
        move_close(&m->sides[1].w[w]);
    }
}

unsigned move_threads(const mv *m)
{
    unsigned n = m->o.copy_threads ? m->o.copy_threads : 1, pool = m->ctx->opts.pool_size;

    if (n > MOVE_MAX_WORKERS)
        n = MOVE_MAX_WORKERS;
    /* Each worker holds a connection to a server next to the mover's own
     * (journal, source, target, snapshot control): stay inside pool_size. */
    if (pool <= 4)
        n = 1;
    else if (n > pool - 4)
        n = pool - 4;
    return n;
}

/* A statement of move_runf's or move_ddlf's, into sql. */
static int format_sql(char *sql, size_t size, const char *fmt, va_list ap)
{
    int n = vsnprintf(sql, size, fmt, ap);

    return n < 0 || (size_t)n >= size ? shard__fail(SHARD_EINTERNAL, "statement too long") : 0;
}

int move_runf(shard_conn *c, const char *fmt, ...)
{
    char sql[4096];
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = format_sql(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return rc ? rc : conn_query_str(c, sql);
}

void move_progress(mv *m, int phase, uint64_t done, uint64_t total)
{
    if (!m->o.progress)
        return;
    pthread_mutex_lock(&m->lock);
    m->o.progress(phase, done, total, m->o.payload);
    pthread_mutex_unlock(&m->lock);
}

void move_step(mv *m, double *t0, const char *step)
{
    double t = now_seconds();
    ctx_log(m->ctx, SHARD_LOG_DEBUG, "move %llu: %s in %.3f s", (unsigned long long)m->id,
            step, t - *t0);
    *t0 = t;
}

int move_db_list(const mv *m, sqlbuf *q, bool quoted)
{
    for (unsigned s = m->first; s <= m->last; s++) {
        char db[SHARD_DBNAME_MAX];
        move_db(m, s, db);
        sql_addf(q, quoted ? "%s'%s'" : "%s%s", s == m->first ? "" : ",", db);
    }
    return sql_check(q);
}

bool move_name_ok(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

static void link_name(char *out, size_t size, const char *prefix, const char *pair)
{
    size_t n = (size_t)snprintf(out, size, "%s", prefix);

    for (; *pair && n + 1 < size; pair++) {
        char c = *pair >= 'A' && *pair <= 'Z' ? (char)(*pair - 'A' + 'a') : *pair;
        out[n++] = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ? c : '_';
    }
    out[n] = '\0';
}

void move_link_names(mv *m)
{
    link_name(m->sides[1].link, sizeof m->sides[1].link, "libshard_from_", move_pair(m, 0)->name);
    link_name(m->sides[0].link, sizeof m->sides[0].link, "libshard_revert_",
              move_pair(m, 1)->name);
}

int move_set_str(char **slot, const char *s)
{
    char *c = shard__strdup(s ? s : "");
    if (!c)
        return shard__fail(SHARD_ENOMEM, "out of memory");
    free(*slot);
    *slot = c;
    return 0;
}

int move_read_pos(shard_conn *c, char **slot)
{
    char *pos = NULL;
    int rc = repl_value(c, "SELECT @@gtid_binlog_pos", &pos);

    if (rc == 0 && (rc = repl_gtid_check(pos)) == 0) {
        free(*slot);
        *slot = pos;
        return 0;
    }
    free(pos);
    return rc;
}

int move_holds(shard_conn *c, const char *pos, const unsigned long *skip, size_t nskip,
               bool *yes)
{
    char *have = NULL;
    int rc = repl_value(c, "SELECT CONCAT(@@gtid_binlog_pos, ',', @@gtid_slave_pos)", &have);

    *yes = rc == 0 && repl_gtid_covers(have, pos, skip, nskip);
    free(have);
    return rc;
}

/* Long enough for a queue of movers' statements on a loaded server. */
#define MOVE_DDL_WAIT_S 120

/* Half the connection's read timeout (1-5 s): a wait on the server that
 * the client gives up on first would break the connection, not report. */
static unsigned lock_step_s(const shard_conn *c)
{
    unsigned s = c->read_timeout_ms ? c->read_timeout_ms / 2000 : 5;
    return s < 1 ? 1 : s > 5 ? 5 : s;
}

int move_get_lock(shard_conn *c, const char *name, unsigned wait_s, const char *what)
{
    double t0 = now_seconds();
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT GET_LOCK(");
    sql_str(&q, c->my, name, strlen(name));
    sql_addf(&q, ", %u)", lock_step_s(c));
    for (rc = sql_check(&q); rc == 0;) {
        uint64_t got = 0;
        if ((rc = repl_value_u64(c, q.s, &got)) || got == 1)
            break;
        if (now_seconds() - t0 >= wait_s)
            rc = shard__fail(SHARD_EBUSY, "%s: %s held the lock '%s' for %.0f s", c->srv->label,
                            what, name, now_seconds() - t0);
    }
    sql_free(&q);
    return rc;
}

int move_ddl_then(shard_conn *c, const char *sql, bool (*then)(shard_conn *), bool *said)
{
    shard_errsave saved;
    char *v = NULL;
    sqlbuf q;
    int rc;

    if ((rc = move_get_lock(c, "libshard ddl", MOVE_DDL_WAIT_S, "other movers' schema changes")))
        return rc;
    /* Its wait for table locks (an application's transaction open on a
     * table it drops) bounded within the read timeout: the server would
     * otherwise go on waiting, the lock held, after the client gave up. */
    sql_init(&q);
    sql_addf(&q, "SET STATEMENT lock_wait_timeout = %u FOR ", lock_step_s(c));
    sql_add(&q, sql);
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(c, &q);
    sql_free(&q);
    /* Asked before the lock's release replaces the statement's warnings. */
    if (rc == 0 && then)
        *said = then(c);
    shard__error_save(&saved, rc);
    /* A connection that cannot release it is closed by the caller's error,
     * and the server releases it with the session. */
    if (repl_value(c, "SELECT RELEASE_LOCK('libshard ddl')", &v) && rc == 0)
        rc = SHARD_ESERVER;
    else
        rc = shard__error_restore(&saved);
    free(v);
    return rc;
}

int move_ddl(shard_conn *c, const char *sql)
{
    return move_ddl_then(c, sql, NULL, NULL);
}

int move_ddlf(shard_conn *c, const char *fmt, ...)
{
    char sql[512];
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = format_sql(sql, sizeof sql, fmt, ap);
    va_end(ap);
    return rc ? rc : move_ddl(c, sql);
}

typedef struct drop_arg {
    mv *m;
    move_side side;
} drop_arg;

static int drop_db_fn(void *arg, size_t i, unsigned w)
{
    drop_arg *a = arg;
    char db[SHARD_DBNAME_MAX];
    shard_conn *c;
    int rc = a->side == MOVE_SOURCE ? move_wsrc(a->m, w, &c) : move_wdst(a->m, w, &c);

    move_db(a->m, a->m->first + (unsigned)i, db);
    /* Logged, so the side's standby drops them too. */
    return rc ? rc : move_ddlf(c, "DROP DATABASE IF EXISTS `%s`", db);
}

int move_drop_dbs(mv *m, move_side side)
{
    drop_arg a = {m, side};

    return fanout_run((size_t)(m->last - m->first) + 1, move_threads(m), drop_db_fn, &a);
}

/* ---- a test hook ------------------------------------------------------------------ */

int (*shard__move_hook)(uint64_t move_id, const char *point);

/* Tests (tests/server_review.c) stop a move at a named point, leaving the
 * journal and the servers as a mover killed there would. */
int move_hook(mv *m, const char *point)
{
    int rc = shard__move_hook ? shard__move_hook(m->id, point) : 0;
    return rc ? shard__fail(rc, "move %llu: stopped by a test hook at \"%s\"",
                           (unsigned long long)m->id, point)
              : 0;
}

int move_lock_tables(mv *m, shard_conn *c)
{
    unsigned wait = m->o.fence_timeout_s ? m->o.fence_timeout_s : 1;
    sqlbuf q;
    int rc;

    if (!m->ntables)
        return 0;
    if ((rc = move_runf(c, "SET SESSION lock_wait_timeout = %u", wait)))
        return rc;
    sql_init(&q);
    sql_add(&q, "LOCK TABLES ");
    for (size_t i = 0; i < m->ntables; i++) {
        if (i)
            sql_add(&q, ", ");
        sql_table(&q, m->tables[i].db, m->tables[i].name); /* both checked when listed */
        sql_add(&q, " READ");
    }
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(c, &q);
    sql_free(&q);
    return rc ? shard__fail_prefix(rc, "locking the moved tables against writes: ") : 0;
}
