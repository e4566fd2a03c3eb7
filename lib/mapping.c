/* Mappings: (from, to, sequence) rows on the shard of `from`, newest first. */
#include "object.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The table a mapping name reads from: a forward or a reverse mapping. */
static int mapping_table(const shard_map *map, const char *name, bool write,
                         const shard_mapdef **def)
{
    for (size_t i = 0; i < map->nmappings; i++) {
        const shard_mapdef *m = &map->mappings[i];
        if (strcmp(m->name, name) == 0) {
            *def = m;
            return 0;
        }
        if (m->reverse && strcmp(m->reverse, name) == 0) {
            if (write)
                return shard__fail(SHARD_EINVAL, "mapping \"%.64s\" is the reverse of \"%s\": "
                                  "write to \"%s\" and both rows are kept", name, m->name,
                                  m->name);
            *def = m;
            return 0;
        }
    }
    return shard__fail(SHARD_EINVAL, "no mapping named \"%.64s\" in map version %llu", name,
                      (unsigned long long)map->version);
}

static int check_ids(uint64_t from, uint64_t to)
{
    if (!shard_id_valid(from))
        return shard__fail(SHARD_EINVAL, "invalid from ID %llu", (unsigned long long)from);
    if (!shard_id_valid(to))
        return shard__fail(SHARD_EINVAL, "invalid to ID %llu", (unsigned long long)to);
    return 0;
}

/* An ID whose shard no range serves: SHARD_ENOSHARD, before anything is written. */
static int check_mapped(const shard_map *map, const char *what, uint64_t id)
{
    if (shard__map_pair_index(map, shard_id_shard(id)) >= 0)
        return 0;
    return shard__fail(SHARD_ENOSHARD, "%s ID %llu: shard %u is not in any range of map "
                      "version %llu", what, (unsigned long long)id, shard_id_shard(id),
                      (unsigned long long)map->version);
}

int64_t mapping_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

typedef struct row_args {
    const char *name; /* the table written: forward or reverse */
    uint64_t from, to;
    int64_t seq;
    bool remove;
    uint64_t affected;
    bool after_loss; /* the statement ran again after an attempt's answer was lost */
} row_args;

void mapping_upsert_sql(sqlbuf *q, const char *db, const char *table, uint64_t from,
                        uint64_t to, int64_t seq)
{
    sql_add(q, "INSERT INTO ");
    sql_table(q, db, table);
    sql_add(q, " (from_id, to_id, sequence) VALUES (");
    sql_u64(q, from);
    sql_add(q, ", ");
    sql_u64(q, to);
    sql_add(q, ", ");
    sql_i64(q, seq);
    sql_add(q, ") ON DUPLICATE KEY UPDATE sequence = VALUES(sequence)");
}

void mapping_write_sql(sqlbuf *q, const char *db, const char *table, uint64_t from,
                       uint64_t to, int64_t seq, bool remove, bool fence)
{
    if (remove) {
        sql_add(q, "DELETE FROM ");
        sql_table(q, db, table);
        sql_add(q, " WHERE from_id = ");
        sql_u64(q, from);
        sql_add(q, " AND to_id = ");
        sql_u64(q, to);
        if (fence) {
            sql_add(q, " AND ");
            sql_fence_clear(q, db);
        }
        return;
    }
    if (!fence) {
        mapping_upsert_sql(q, db, table, from, to, seq);
        return;
    }
    sql_add(q, "INSERT INTO ");
    sql_table(q, db, table);
    sql_add(q, " (from_id, to_id, sequence) SELECT ");
    sql_u64(q, from);
    sql_add(q, ", ");
    sql_u64(q, to);
    sql_add(q, ", ");
    sql_i64(q, seq);
    sql_add(q, " FROM DUAL WHERE ");
    sql_fence_clear(q, db);
    sql_add(q, " ON DUPLICATE KEY UPDATE sequence = VALUES(sequence)");
}

static int row_fn(exec_env *env, void *arg)
{
    row_args *a = arg;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_write_bound(&q, env->bound_ms);
    mapping_write_sql(&q, env->db, a->name, a->from, a->to, a->seq, a->remove,
                      env->fence_inline);
    rc = conn_query(env->conn, &q); /* both statements are idempotent */
    sql_free(&q);
    if (rc == 0)
        a->affected = mysql_affected_rows(env->conn->my);
    a->after_loss = env->after_loss;
    /* No row changed: no such row, the same sequence already, or a fence
     * held the statement back; the transaction tells which. */
    if (rc == 0 && a->affected == 0 && env->fence_inline)
        return EXEC_TXN;
    return rc;
}

static int write_rows(shard_ctx *ctx, const char *name, uint64_t from, uint64_t to,
                      int64_t seq, bool remove, double *started)
{
    char reverse[SHARD_DBNAME_MAX] = "";
    const char *rev = NULL;
    row_args a = {name, from, to, seq, remove, 0, false};
    int rc;

    if (!ctx || !name)
        return shard__fail(SHARD_EINVAL, "mapping: NULL argument");
    if ((rc = check_ids(from, to)))
        return rc;
    {
        /* Every argument is checked before the first write: a failure after
         * the forward row would leave half a mapping. */
        shard_map *map = ctx_map(ctx);
        const shard_mapdef *def = NULL;
        rc = mapping_table(map, name, true, &def);
        if (rc == 0 && def->reverse)
            snprintf(reverse, sizeof reverse, "%s", def->reverse);
        if (rc == 0)
            rc = check_mapped(map, "from", from);
        if (rc == 0)
            rc = check_mapped(map, "to", to);
        shard_map_free(map);
        if (rc)
            return rc;
        rev = reverse[0] ? reverse : NULL;
    }
    *started = now_seconds(); /* counted from here: routed (shard_ctx_stats(3)) */
    /* Both statements are idempotent: retried even after a lost COMMIT. */
    if ((rc = ctx_exec(ctx, shard_id_shard(from), EXEC_WRITE | EXEC_ONE | EXEC_IDEMPOTENT,
                       row_fn, &a)))
        return rc;
    /* Gone after an attempt whose answer was lost: maybe that attempt's
     * doing; the row is gone, as asked. */
    if (remove && a.affected == 0 && !a.after_loss)
        rc = shard__fail(SHARD_ENOTFOUND, "mapping %s has no row (%llu, %llu)", name,
                        (unsigned long long)from, (unsigned long long)to);
    if (rev) {
        /* The reverse row lives on the shard of `to`, maybe another pair:
         * written second, and idempotent, so a failed call can be repeated. */
        row_args r = {rev, to, from, seq, remove, 0, false};
        int rrc = ctx_exec(ctx, shard_id_shard(to), EXEC_WRITE | EXEC_ONE | EXEC_IDEMPOTENT,
                           row_fn, &r);
        if (rrc)
            return shard__fail_prefix(rrc, "reverse mapping %s: ", rev);
    }
    return rc;
}

int shard_mapping_add(shard_ctx *ctx, const char *name, uint64_t from, uint64_t to,
                      int64_t seq)
{
    double started = 0;
    int rc = write_rows(ctx, name, from, to, seq == SHARD_SEQ_NOW ? mapping_now() : seq,
                        false, &started);
    if (started)
        stats_call(&ctx->stats, STATS_MAPPING_ADD, started, rc);
    return rc;
}

int shard_mapping_remove(shard_ctx *ctx, const char *name, uint64_t from, uint64_t to)
{
    double started = 0;
    int rc = write_rows(ctx, name, from, to, 0, true, &started);
    if (started)
        stats_call(&ctx->stats, STATS_MAPPING_REMOVE, started, rc);
    return rc;
}

typedef struct list_args {
    const char *name;
    uint64_t from;
    int64_t before;
    size_t limit;
    shard_edge *edges;
    size_t n;
    uint64_t count;
} list_args;

/* The mapping's rows for from: "FROM db.table WHERE from_id = from" into q,
 * after checking the name against this map (forward or reverse). */
static int rows_of(exec_env *env, const list_args *a, sqlbuf *q)
{
    const shard_mapdef *def = NULL;
    int rc = mapping_table(env->map, a->name, false, &def);

    if (rc)
        return rc;
    sql_add(q, " FROM ");
    sql_table(q, env->db, a->name);
    sql_add(q, " WHERE from_id = ");
    sql_u64(q, a->from);
    return 0;
}

/*
 * The rows, with the fence in the same statement: a column of every row
 * (the uncorrelated subquery is read once, in the statement's view). An
 * empty list says nothing about the fence, so it is asked again in a form
 * that returns one row always (the fence's, joined to the rows, none of
 * which has a NULL to_id): sorting nothing costs nothing.
 */
static int list_query(exec_env *env, const list_args *a, bool joined, MYSQL_RES **res)
{
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT ");
    if (joined)
        sql_add(&q, "f.v, m.to_id, m.sequence FROM (SELECT ");
    sql_fence_column(&q, env);
    sql_add(&q, joined ? " AS v) AS f LEFT JOIN (SELECT to_id, sequence" : ", to_id, sequence");
    if ((rc = rows_of(env, a, &q))) {
        sql_free(&q);
        return rc;
    }
    if (a->before != SHARD_SEQ_NONE) {
        sql_add(&q, " AND sequence < ");
        sql_i64(&q, a->before);
    }
    sql_add(&q, " ORDER BY sequence DESC, to_id DESC");
    if (a->limit) {
        sql_add(&q, " LIMIT ");
        sql_u64(&q, a->limit);
    }
    if (joined)
        sql_add(&q, ") AS m ON TRUE ORDER BY m.sequence DESC, m.to_id DESC");
    rc = conn_select(env->conn, &q, res);
    sql_free(&q);
    return rc;
}

static int list_fn(exec_env *env, void *arg)
{
    list_args *a = arg;
    MYSQL_RES *res;
    MYSQL_ROW row;
    bool fenced = false;
    int rc = list_query(env, a, false, &res);

    if (rc)
        return rc;
    if (mysql_num_rows(res) == 0 && !env->fence_skip) {
        mysql_free_result(res);
        if ((rc = list_query(env, a, true, &res)))
            return rc;
    }
    if (exec_answer_late(env)) {
        mysql_free_result(res);
        return EXEC_STALE;
    }
    free(a->edges);
    a->n = 0;
    a->edges = shard__calloc(mysql_num_rows(res) ? mysql_num_rows(res) : 1, sizeof *a->edges);
    if (!a->edges) {
        mysql_free_result(res);
        return shard__fail(SHARD_ENOMEM, "out of memory for a mapping list");
    }
    while ((row = mysql_fetch_row(res))) {
        fenced = fenced || (row[0] && strcmp(row[0], "0") != 0);
        if (!row[1])
            continue; /* the fence's row, joined to no mapping row */
        a->edges[a->n].to = strtoull(row[1], NULL, 10);
        a->edges[a->n++].seq = strtoll(row[2], NULL, 10);
    }
    mysql_free_result(res);
    return fenced ? exec_fenced(env) : 0;
}

int shard_mapping_list(shard_ctx *ctx, const char *name, uint64_t from, int64_t before,
                       size_t limit, shard_edge **edges, size_t *n)
{
    list_args a = {name, from, before, limit, NULL, 0, 0};
    int rc;

    if (!ctx || !name || !edges || !n)
        return shard__fail(SHARD_EINVAL, "shard_mapping_list: NULL argument");
    if (!shard_id_valid(from))
        return shard__fail(SHARD_EINVAL, "invalid from ID %llu", (unsigned long long)from);
    if ((rc = ctx_exec(ctx, shard_id_shard(from), EXEC_OP(STATS_MAPPING_LIST), list_fn, &a))) {
        free(a.edges);
        return rc;
    }
    *edges = a.edges;
    *n = a.n;
    return 0;
}

static int count_fn(exec_env *env, void *arg)
{
    list_args *a = arg;
    MYSQL_RES *res;
    MYSQL_ROW row;
    bool fenced;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT ");
    sql_fence_column(&q, env);
    sql_add(&q, ", (SELECT COUNT(*)");
    if ((rc = rows_of(env, a, &q))) {
        sql_free(&q);
        return rc;
    }
    sql_add(&q, ")");
    rc = conn_select(env->conn, &q, &res);
    sql_free(&q);
    if (rc)
        return rc;
    if (exec_answer_late(env)) {
        mysql_free_result(res);
        return EXEC_STALE;
    }
    row = mysql_fetch_row(res);
    fenced = row && row[0] && strcmp(row[0], "0") != 0;
    a->count = row && row[1] ? strtoull(row[1], NULL, 10) : 0;
    mysql_free_result(res);
    return fenced ? exec_fenced(env) : 0;
}

int shard_mapping_count(shard_ctx *ctx, const char *name, uint64_t from, uint64_t *count)
{
    list_args a = {name, from, SHARD_SEQ_NONE, 0, NULL, 0, 0};
    int rc;

    if (!ctx || !name || !count)
        return shard__fail(SHARD_EINVAL, "shard_mapping_count: NULL argument");
    if (!shard_id_valid(from))
        return shard__fail(SHARD_EINVAL, "invalid from ID %llu", (unsigned long long)from);
    if ((rc = ctx_exec(ctx, shard_id_shard(from), EXEC_OP(STATS_MAPPING_COUNT), count_fn, &a)))
        return rc;
    *count = a.count;
    return 0;
}
