/*
 * Scatter: the only calls that visit every shard. Each reads shard by
 * shard in primary-key batches; the caller's callback runs with no
 * connection held, so it may call libshard itself.
 */
#include "object.h"

#include <stdlib.h>
#include <string.h>

#define SCAN_BATCH 1000

typedef struct scan_args {
    unsigned type;
    uint64_t after; /* last local id seen */
    MYSQL_RES *res;
    uint64_t count;
} scan_args;

/* Whether the first row's fence column says fenced (the cursor is rewound). */
static bool fence_first(MYSQL_RES *res)
{
    MYSQL_ROW row = mysql_fetch_row(res);
    bool fenced = row && row[0] && strcmp(row[0], "0") != 0;

    mysql_data_seek(res, 0);
    return fenced;
}

/*
 * One batch, with the fence in the same statement: as a column of every
 * row (the uncorrelated subquery is read once, in the statement's view).
 * An empty batch says nothing about the fence, so it is asked again in a
 * form that returns one row always (the fence's, joined to the batch,
 * whose local ids are never NULL): sorting nothing costs nothing.
 */
static int scan_batch(exec_env *env, scan_args *a, const char *table, bool joined)
{
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT ");
    if (joined)
        sql_add(&q, "f.v, m.local_id, m.data FROM (SELECT ");
    sql_fence_value(&q, env->db);
    sql_add(&q, joined ? " AS v) AS f LEFT JOIN (SELECT local_id, data FROM "
                       : ", local_id, data FROM ");
    sql_table(&q, env->db, table);
    sql_add(&q, " WHERE local_id > ");
    sql_u64(&q, a->after);
    sql_addf(&q, " ORDER BY local_id LIMIT %d", SCAN_BATCH);
    if (joined)
        sql_add(&q, ") AS m ON TRUE ORDER BY m.local_id");
    rc = conn_select(env->conn, &q, &a->res);
    sql_free(&q);
    return rc;
}

static int scan_fn(exec_env *env, void *arg)
{
    scan_args *a = arg;
    const char *table = NULL;
    int rc = object_table(env->map, a->type, &table);

    if (rc || (rc = scan_batch(env, a, table, false)))
        return rc;
    if (mysql_num_rows(a->res) == 0) {
        mysql_free_result(a->res);
        a->res = NULL;
        if ((rc = scan_batch(env, a, table, true)))
            return rc;
    }
    if (fence_first(a->res)) {
        mysql_free_result(a->res);
        a->res = NULL;
        return exec_fenced(env);
    }
    return 0;
}

/* Every shard any range covers, in order. */
static int each_shard(shard_ctx *ctx, int (*visit)(shard_ctx *, unsigned, void *), void *arg)
{
    shard_map *map = ctx_map(ctx);
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < map->nranges; i++)
        for (unsigned s = map->ranges[i].lo; rc == 0 && s <= map->ranges[i].hi; s++)
            rc = visit(ctx, s, arg);
    shard_map_free(map);
    return rc;
}

typedef struct scan_job {
    unsigned type;
    shard_scan_fn fn;
    void *payload;
} scan_job;

static int scan_shard(shard_ctx *ctx, unsigned shard, void *arg)
{
    scan_job *j = arg;
    scan_args a = {j->type, 0, NULL, 0};

    for (;;) {
        MYSQL_ROW row;
        size_t rows;
        int rc = ctx_exec(ctx, shard, 0, scan_fn, &a);
        if (rc)
            return rc;
        rows = 0;
        while ((row = mysql_fetch_row(a.res))) {
            unsigned long *lens = mysql_fetch_lengths(a.res);
            uint64_t id;
            if (!row[1])
                continue; /* the fence's row, joined to no object */
            rows++;
            a.after = strtoull(row[1], NULL, 10);
            if (object_deleted(row[2], lens[2]) ||
                shard_id_make(shard, j->type, a.after, &id))
                continue;
            if ((rc = j->fn(id, row[2], lens[2], j->payload))) {
                mysql_free_result(a.res);
                return rc;
            }
        }
        mysql_free_result(a.res);
        a.res = NULL;
        if (rows < SCAN_BATCH)
            return 0;
    }
}

int shard_scatter_scan(shard_ctx *ctx, unsigned type, shard_scan_fn fn, void *payload)
{
    scan_job j = {type, fn, payload};
    double started;
    int rc;

    if (!ctx || !fn)
        return shard__fail(SHARD_EINVAL, "shard_scatter_scan: NULL argument");
    started = now_seconds();
    rc = each_shard(ctx, scan_shard, &j);
    stats_call(&ctx->stats, STATS_SCATTER_SCAN, started, rc);
    return rc;
}

static int count_fn(exec_env *env, void *arg)
{
    scan_args *a = arg;
    const char *table = NULL;
    MYSQL_RES *res;
    MYSQL_ROW row;
    uint64_t live, unread;
    sqlbuf q;
    int rc = object_table(env->map, a->type, &table);

    if (rc)
        return rc;
    sql_init(&q);
    /* Live objects: not soft-deleted ("active" is JSON false). The server
     * cannot read documents nested deeper than its JSON parser's limit (32
     * levels; JSON_VALID() is 0 for exactly those): count them apart and
     * judge them below as get and scan do, so that all three agree. */
    sql_add(&q, "SELECT ");
    sql_fence_value(&q, env->db);
    sql_add(&q, ", COUNT(*), SUM(NOT JSON_VALID(data)) FROM ");
    sql_table(&q, env->db, table);
    sql_add(&q, " WHERE NOT (JSON_TYPE(JSON_EXTRACT(data, '$.active')) <=> 'BOOLEAN'"
                " AND JSON_EXTRACT(data, '$.active') = 'false')");
    rc = conn_select(env->conn, &q, &res);
    if (rc) {
        sql_free(&q);
        return rc;
    }
    row = mysql_fetch_row(res);
    if (row && row[0] && strcmp(row[0], "0") != 0) {
        mysql_free_result(res);
        sql_free(&q);
        return exec_fenced(env);
    }
    live = row && row[1] ? strtoull(row[1], NULL, 10) : 0;
    unread = row && row[2] ? strtoull(row[2], NULL, 10) : 0;
    mysql_free_result(res);
    if (unread) {
        sql_reset(&q);
        sql_add(&q, "SELECT data FROM ");
        sql_table(&q, env->db, table);
        sql_add(&q, " WHERE NOT JSON_VALID(data)");
        rc = conn_select(env->conn, &q, &res);
        if (rc) {
            sql_free(&q);
            return rc;
        }
        while ((row = mysql_fetch_row(res)))
            if (object_deleted(row[0], mysql_fetch_lengths(res)[0]))
                live--;
        mysql_free_result(res);
    }
    sql_free(&q);
    a->count += live;
    return 0;
}

static int count_shard(shard_ctx *ctx, unsigned shard, void *arg)
{
    return ctx_exec(ctx, shard, 0, count_fn, arg);
}

int shard_scatter_count(shard_ctx *ctx, unsigned type, uint64_t *count)
{
    scan_args a = {type, 0, NULL, 0};
    double started;
    int rc;

    if (!ctx || !count)
        return shard__fail(SHARD_EINVAL, "shard_scatter_count: NULL argument");
    started = now_seconds();
    rc = each_shard(ctx, count_shard, &a);
    stats_call(&ctx->stats, STATS_SCATTER_COUNT, started, rc);
    if (rc)
        return rc;
    *count = a.count;
    return 0;
}
