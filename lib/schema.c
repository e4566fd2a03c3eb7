/*
 * Schema: every shard database and table the map needs, created on each
 * pair's master (replication carries it to the standby), idempotently,
 * pairs in parallel; and the fence table (libshard-move(7)) on every
 * server of every pair, unlogged, since each server keeps its own.
 */
#include "control.h"
#include "exec.h"
#include "schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct schema_job {
    shard_ctx *ctx;
    const shard_map *map;
    size_t pair;
    const shard_endpoint *standby; /* a standby's fence table only, or NULL */
    uint64_t total, done;
    char (*fenced)[SHARD_DBNAME_MAX]; /* databases fenced on the master, sorted */
    size_t nfenced;
    /* shared by every job: progress calls are serialised */
    pthread_mutex_t *progress_lock;
    shard_progress_fn progress;
    void *payload;
} schema_job;

void schema_object_table(sqlbuf *q, const char *db, const char *table)
{
    sql_add(q, "CREATE TABLE IF NOT EXISTS ");
    sql_table(q, db, table);
    sql_add(q, " (local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
               " data LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,"
               " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
               " ON UPDATE CURRENT_TIMESTAMP(6),"
               " PRIMARY KEY (local_id)) ENGINE=InnoDB");
}

void schema_mapping_table(sqlbuf *q, const char *db, const char *table)
{
    sql_add(q, "CREATE TABLE IF NOT EXISTS ");
    sql_table(q, db, table);
    /* (from_id, sequence, to_id) serves "newest N of from_id" index-only. */
    sql_add(q, " (from_id BIGINT UNSIGNED NOT NULL, to_id BIGINT UNSIGNED NOT NULL,"
               " sequence BIGINT NOT NULL, PRIMARY KEY (from_id, to_id),"
               " KEY newest (from_id, sequence, to_id)) ENGINE=InnoDB");
}

static void schema_kv_table(sqlbuf *q, const char *db, const char *table)
{
    sql_add(q, "CREATE TABLE IF NOT EXISTS ");
    sql_table(q, db, table);
    sql_addf(q, " (k VARBINARY(%d) NOT NULL, v LONGBLOB NOT NULL,"
                " updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
                " ON UPDATE CURRENT_TIMESTAMP(6), PRIMARY KEY (k)) ENGINE=InnoDB",
             SHARD_KEY_MAX);
}

static uint64_t tables_per_db(const shard_map *m)
{
    uint64_t n = 1 + m->nobjects; /* the database itself, then its tables */
    for (size_t i = 0; i < m->nmappings; i++)
        n += m->mappings[i].reverse ? 2 : 1;
    return n;
}

static uint64_t count_statements(const shard_map *m, size_t pair)
{
    uint64_t n = 0;
    for (size_t i = 0; i < m->nranges; i++)
        if (m->ranges[i].pair == pair)
            n += (uint64_t)(m->ranges[i].hi - m->ranges[i].lo + 1) * tables_per_db(m);
    for (size_t i = 0; i < m->nmod_ranges; i++)
        if (m->mod_ranges[i].pair == pair)
            n += (uint64_t)(m->mod_ranges[i].hi - m->mod_ranges[i].lo + 1) *
                 (1 + m->nmod_tables);
    return n;
}

/* One statement, retried by the library's policy (exec_retry; DDL here is
 * idempotent), on a connection taken anew after each failure. */
typedef struct stmt_try {
    shard_ctx *ctx;
    shard_server *srv;
    shard_conn **c;
    const sqlbuf *q;
} stmt_try;

static int stmt_once(void *arg, double deadline)
{
    stmt_try *t = arg;

    (void)deadline;
    if (!*t->c) {
        int rc = conn_get(t->ctx, t->srv, t->c);
        if (rc)
            return rc;
    }
    return conn_query(*t->c, t->q);
}

static bool stmt_between(void *arg, int rc, double deadline)
{
    stmt_try *t = arg;

    (void)deadline;
    conn_release(*t->c, rc);
    *t->c = NULL;
    return true;
}

static int run_stmt(shard_ctx *ctx, shard_conn **c, const sqlbuf *q)
{
    stmt_try t = {ctx, (*c)->srv, c, q};

    return exec_retry(ctx, stmt_once, stmt_between, &t);
}

static int run(schema_job *j, shard_conn **c, const sqlbuf *q)
{
    int rc = run_stmt(j->ctx, c, q);

    if (rc == 0) {
        j->done++;
        if (j->progress) {
            char what[100];
            snprintf(what, sizeof what, "schema %s", j->map->pairs[j->pair].name);
            pthread_mutex_lock(j->progress_lock);
            j->progress(what, j->done, j->total, j->payload);
            pthread_mutex_unlock(j->progress_lock);
        }
    }
    return rc;
}

/*
 * The fence table, on one server, unlogged: each server keeps its own rows,
 * so neither the pair's replication nor a move's ever carries them. The
 * connection is closed after (it had binary logging off).
 */
static const char *const FENCE_DDL[] = {
    "SET SESSION sql_log_bin = 0",
    "CREATE DATABASE IF NOT EXISTS " CONTROL_DB,
    "CREATE TABLE IF NOT EXISTS " FENCE_TABLE " ("
    " db VARCHAR(64) NOT NULL PRIMARY KEY,"
    " fenced TINYINT NOT NULL DEFAULT 0,"
    " move_id BIGINT UNSIGNED NOT NULL DEFAULT 0,"
    " changed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)"
    " ON UPDATE CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
};

int schema_fence_table(shard_ctx *ctx, shard_server *srv)
{
    shard_conn *c = NULL;
    sqlbuf q;
    int rc = conn_get(ctx, srv, &c);

    sql_init(&q);
    for (size_t i = 0; rc == 0 && i < sizeof FENCE_DDL / sizeof *FENCE_DDL; i++) {
        sql_reset(&q);
        sql_add(&q, FENCE_DDL[i]);
        rc = run_stmt(ctx, &c, &q);
        if (rc == 0 || !c)
            continue;
        if (i == 0 && rc == SHARD_EPRIV)
            shard__fail_prefix(rc, "the schema account needs BINLOG ADMIN to create "
                              FENCE_TABLE " unlogged: ");
    }
    sql_free(&q);
    if (c)
        c->broken = true; /* sql_log_bin = 0 must not serve the application */
    conn_release(c, rc);
    if (rc)
        shard__fail_prefix(rc, "%s: ", srv->label);
    return rc;
}

static int cmp_db(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* The databases the master's fence rows say are fenced by a move. */
static int read_fenced(schema_job *j, shard_conn *c)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT db FROM " FENCE_TABLE " WHERE fenced <> 0");
    rc = conn_select(c, &q, &res);
    sql_free(&q);
    if (rc)
        return rc;
    j->fenced = shard__calloc(mysql_num_rows(res) + 1, sizeof *j->fenced);
    if (!j->fenced) {
        mysql_free_result(res);
        return shard__fail(SHARD_ENOMEM, "out of memory");
    }
    while ((row = mysql_fetch_row(res)))
        if (row[0] && strlen(row[0]) < SHARD_DBNAME_MAX)
            snprintf(j->fenced[j->nfenced++], SHARD_DBNAME_MAX, "%s", row[0]);
    mysql_free_result(res);
    qsort(j->fenced, j->nfenced, sizeof *j->fenced, cmp_db);
    return 0;
}

static int create_db(schema_job *j, shard_conn **c, sqlbuf *q, const char *db)
{
    sql_reset(q);
    sql_addf(q, "CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4", db);
    return run(j, c, q);
}

static int apply_id_shard(schema_job *j, shard_conn **c, sqlbuf *q, unsigned shard)
{
    const shard_map *m = j->map;
    char db[SHARD_DBNAME_MAX];
    int rc;

    shard__dbfmt_name(&m->dbfmt, shard, db);
    /* A database fenced by a move must stay as the move left it: new
     * tables there would take writes the target never sees. */
    if (j->nfenced && bsearch(db, j->fenced, j->nfenced, sizeof *j->fenced, cmp_db)) {
        ctx_log(j->ctx, SHARD_LOG_WARN, "schema: %s is fenced by a move: left as it is", db);
        j->done += tables_per_db(m);
        return 0;
    }
    if ((rc = create_db(j, c, q, db)))
        return rc;
    for (size_t i = 0; i < m->nobjects; i++) {
        sql_reset(q);
        schema_object_table(q, db, m->objects[i].name);
        if ((rc = run(j, c, q)))
            return rc;
    }
    for (size_t i = 0; i < m->nmappings; i++) {
        sql_reset(q);
        schema_mapping_table(q, db, m->mappings[i].name);
        if ((rc = run(j, c, q)))
            return rc;
        if (!m->mappings[i].reverse)
            continue;
        sql_reset(q);
        schema_mapping_table(q, db, m->mappings[i].reverse);
        if ((rc = run(j, c, q)))
            return rc;
    }
    return 0;
}

static int apply_mod_shard(schema_job *j, shard_conn **c, sqlbuf *q, unsigned shard)
{
    const shard_map *m = j->map;
    char db[SHARD_DBNAME_MAX];
    int rc;

    shard__dbfmt_name(&m->mod_dbfmt, shard, db);
    if ((rc = create_db(j, c, q, db)))
        return rc;
    for (size_t i = 0; i < m->nmod_tables; i++) {
        sql_reset(q);
        schema_kv_table(q, db, m->mod_tables[i]);
        if ((rc = run(j, c, q)))
            return rc;
    }
    return 0;
}

static int apply_pair(schema_job *j)
{
    const shard_map *m = j->map;
    shard_server *srv = ctx_server(j->ctx, m, j->pair);
    shard_conn *c = NULL;
    sqlbuf q;
    int rc;

    if (!srv)
        return shard__fail(SHARD_ENOMEM, "out of memory");
    if ((rc = schema_fence_table(j->ctx, srv)) || (rc = conn_get(j->ctx, srv, &c)))
        return rc;
    if ((rc = read_fenced(j, c))) {
        conn_release(c, rc);
        return rc;
    }
    sql_init(&q);
    for (size_t i = 0; rc == 0 && i < m->nranges; i++)
        if (m->ranges[i].pair == j->pair)
            for (unsigned s = m->ranges[i].lo; rc == 0 && s <= m->ranges[i].hi; s++)
                rc = apply_id_shard(j, &c, &q, s);
    for (size_t i = 0; rc == 0 && i < m->nmod_ranges; i++)
        if (m->mod_ranges[i].pair == j->pair)
            for (unsigned s = m->mod_ranges[i].lo; rc == 0 && s <= m->mod_ranges[i].hi; s++)
                rc = apply_mod_shard(j, &c, &q, s);
    sql_free(&q);
    conn_release(c, rc);
    return rc;
}

static int job_run(void *arg, size_t i, unsigned worker)
{
    schema_job *j = (schema_job *)arg + i;
    int rc;

    (void)worker;
    if (j->standby) {
        shard_server *srv = ctx_server_at(j->ctx, j->standby);
        rc = srv ? schema_fence_table(j->ctx, srv) : shard__fail(SHARD_ENOMEM, "out of memory");
        if (rc)
            shard__fail_prefix(rc, "schema on pair %s (standby): ",
                              j->map->pairs[j->pair].name);
        return rc;
    }
    if ((rc = apply_pair(j)))
        shard__fail_prefix(rc, "schema on pair %s: ", j->map->pairs[j->pair].name);
    return rc;
}

int shard_schema_apply(shard_ctx *ctx, shard_progress_fn progress, void *payload)
{
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    shard_map *map;
    schema_job *jobs;
    size_t n = 0;
    int rc;

    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_schema_apply: NULL context");
    map = ctx_map(ctx);
    /* One job per pair (its master's fence table, databases and tables),
     * and one per standby (its fence table): a standby becomes the master
     * at failover, and must have one by then. */
    jobs = shard__calloc(2 * map->npairs + 1, sizeof *jobs);
    if (!jobs) {
        shard_map_free(map);
        return shard__fail(SHARD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < map->npairs; i++) {
        schema_job base = {.ctx = ctx, .map = map, .pair = i, .progress_lock = &lock,
                           .progress = progress, .payload = payload};
        jobs[n] = base;
        jobs[n++].total = count_statements(map, i);
        if (map->pairs[i].has_standby) {
            jobs[n] = base;
            jobs[n++].standby = &map->pairs[i].standby;
        }
    }
    rc = fanout_run(n, (unsigned)n, job_run, jobs);
    for (size_t i = 0; i < n; i++)
        free(jobs[i].fenced);
    free(jobs);
    shard_map_free(map);
    return rc;
}
