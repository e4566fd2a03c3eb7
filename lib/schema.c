/*
 * Schema: every shard database and table the map needs, created on each
 * pair's master (replication carries it to the standby), idempotently,
 * pairs in parallel.
 */
#include "schema.h"

#include <stdlib.h>
#include <string.h>

typedef struct schema_job {
    shard_ctx *ctx;
    const shard_map *map;
    size_t pair;
    uint64_t total, done;
    int rc;
    char errmsg[512];
    pthread_t thread;
    bool threaded;
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

/* One statement, retried on transient failures (DDL here is idempotent). */
static int run(schema_job *j, shard_conn **c, const sqlbuf *q)
{
    shard_server *srv = (*c)->srv;
    int rc;

    for (unsigned attempt = 1;; attempt++) {
        rc = conn_query(*c, q);
        if (rc == 0 || !error_transient(rc) || attempt >= j->ctx->opts.retry_max)
            break;
        conn_put(*c, rc != SHARD_ECONNECT);
        *c = NULL;
        if ((rc = conn_get(j->ctx, srv, c)))
            break;
    }
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

    shard_dbfmt_name(&m->dbfmt, shard, db);
    {
        /* A database fenced by a move must stay as the move left it: new
         * tables there would take writes the target never sees. */
        char sql[300], fenced[16];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.TABLES WHERE"
                 " TABLE_SCHEMA = '%s' AND TABLE_NAME LIKE '\\_moved\\_%%'", db);
        if ((rc = conn_value(*c, sql, fenced, sizeof fenced)))
            return rc;
        if (strcmp(fenced, "0") != 0) {
            ctx_log(j->ctx, SHARD_LOG_WARN, "schema: %s is fenced by a move: left as it is",
                    db);
            j->done += tables_per_db(m);
            return 0;
        }
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

    shard_dbfmt_name(&m->mod_dbfmt, shard, db);
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
        return shard_fail(SHARD_ENOMEM, "out of memory");
    if ((rc = conn_get(j->ctx, srv, &c)))
        return rc;
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
    conn_put(c, rc == 0 || rc == SHARD_ESERVER || rc == SHARD_EPRIV);
    return rc;
}

static void *job_main(void *arg)
{
    schema_job *j = arg;
    j->rc = apply_pair(j);
    if (j->rc) {
        shard_fail_prefix(j->rc, "schema on pair %s: ", j->map->pairs[j->pair].name);
        snprintf(j->errmsg, sizeof j->errmsg, "%s", shard_errmsg());
    }
    return NULL;
}

int shard_schema_apply(shard_ctx *ctx, shard_progress_fn progress, void *payload)
{
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    shard_map *map;
    schema_job *jobs;
    int rc = 0;

    if (!ctx)
        return shard_fail(SHARD_EINVAL, "shard_schema_apply: NULL context");
    map = ctx_map(ctx);
    jobs = shard_calloc(map->npairs, sizeof *jobs);
    if (!jobs) {
        shard_map_free(map);
        return shard_fail(SHARD_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < map->npairs; i++) {
        jobs[i] = (schema_job){.ctx = ctx, .map = map, .pair = i,
                               .total = count_statements(map, i), .progress_lock = &lock,
                               .progress = progress, .payload = payload};
        if (jobs[i].total == 0)
            continue;
        jobs[i].threaded = pthread_create(&jobs[i].thread, NULL, job_main, &jobs[i]) == 0;
        if (!jobs[i].threaded)
            job_main(&jobs[i]);
    }
    for (size_t i = 0; i < map->npairs; i++) {
        if (jobs[i].threaded)
            pthread_join(jobs[i].thread, NULL);
        if (jobs[i].rc && !rc) {
            rc = jobs[i].rc;
            shard_fail(rc, "%s", jobs[i].errmsg);
        }
    }
    free(jobs);
    shard_map_free(map);
    return rc;
}
