/* Transactions bound to one shard: several writes that commit together. */
#include "object.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct shard_txn {
    shard_ctx *ctx;
    shard_map *map;
    shard_conn *conn;
    unsigned shard;
    char db[SHARD_DBNAME_MAX];
    int failed; /* the first error: the transaction can only roll back */
};

static int txn_fail(shard_txn *t, int rc)
{
    if (rc == SHARD_ESERVER) {
        long pi = shard__map_pair_index(t->map, t->shard);
        /* the store's answer awaited no longer than a call's budget */
        rc = ctx_check_moved(t->ctx, t->conn, t->db, t->shard, false,
                             pi >= 0 ? t->map->pairs[pi].name : "", rc,
                             now_seconds() + t->ctx->opts.retry_budget_ms / 1000.0);
    }
    /* Read-only (a failover's fence) or gone: the caller begins again, and
     * that must go where the map now points. */
    if (rc == SHARD_EMOVED || rc == SHARD_ECONNECT)
        ctx_reload_soon(t->ctx, false);
    if (rc && !t->failed)
        t->failed = rc;
    return rc;
}

static void txn_end(shard_txn *t, bool rollback)
{
    if (t->conn && rollback && conn_reusable(t->conn, t->failed) &&
        conn_query_str(t->conn, "ROLLBACK") != 0)
        t->conn->broken = true;
    conn_release(t->conn, t->failed);
    shard_map_free(t->map);
    free(t);
}

/* Opens the transaction on the routed connection and checks the fence under
 * a shared lock, which the transaction keeps to its end: a move's fence
 * waits for it, and no write commits after the fence. */
static int begin_fn(exec_env *env, void *arg)
{
    shard_txn *t = arg;
    int rc = conn_query_str(env->conn, "START TRANSACTION");

    if (rc == 0 && (rc = exec_fence_lock(env)) != 0 && conn_reusable(env->conn, rc) &&
        conn_query_str(env->conn, "ROLLBACK") != 0)
        env->conn->broken = true;
    if (rc)
        return rc;
    t->conn = env->conn;
    t->map = shard__map_ref((shard_map *)env->map);
    snprintf(t->db, sizeof t->db, "%s", env->db);
    env->keep = true;
    return 0;
}

int shard_txn_begin(shard_ctx *ctx, unsigned shard, shard_txn **out)
{
    shard_txn *t;
    int rc;

    if (!ctx || !out)
        return shard__fail(SHARD_EINVAL, "shard_txn_begin: NULL argument");
    if (shard > SHARD_MAX_SHARD)
        return shard__fail(SHARD_EINVAL, "shard %u out of range (0..65535)", shard);
    t = shard__calloc(1, sizeof *t);
    if (!t)
        return shard__fail(SHARD_ENOMEM, "out of memory");
    t->ctx = ctx;
    t->shard = shard;
    /* Routed like any call: a fenced shard waits for the new map, a lost
     * server is retried, before anything is written. */
    if ((rc = ctx_exec(ctx, shard, EXEC_OP(STATS_TXN_BEGIN), begin_fn, t))) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* Counts a call on a transaction (shard_ctx_stats(3)); returns rc. */
static int txn_counted(shard_ctx *ctx, stats_op op, double started, int rc)
{
    if (ctx)
        stats_call(&ctx->stats, op, started, rc);
    return rc;
}

static int check_usable(shard_txn *t, const char *what)
{
    if (!t)
        return shard__fail(SHARD_EINVAL, "%s: NULL transaction", what);
    if (t->failed)
        return shard__fail(t->failed, "%s: the transaction already failed (%s); roll it back",
                          what, shard_strerror(t->failed));
    return 0;
}

static int check_on_shard(shard_txn *t, uint64_t id, const char *what)
{
    if (!shard_id_valid(id))
        return shard__fail(SHARD_EINVAL, "%s: invalid ID %llu", what, (unsigned long long)id);
    if (shard_id_shard(id) != t->shard)
        return shard__fail(SHARD_EINVAL, "%s: ID %llu is on shard %u, the transaction on "
                          "shard %u", what, (unsigned long long)id, shard_id_shard(id),
                          t->shard);
    return 0;
}

static int txn_object_create(shard_txn *t, unsigned type, const char *json, size_t len,
                             uint64_t *id)
{
    const char *table = NULL;
    json_t *v;
    int rc;

    if ((rc = check_usable(t, "shard_txn_object_create")))
        return rc;
    if (!id)
        return shard__fail(SHARD_EINVAL, "shard_txn_object_create: NULL id output");
    if ((rc = object_table(t->map, type, &table)) || (rc = object_parse(json, len, &v)))
        return rc;
    json_decref(v);
    return txn_fail(t, object_insert(t->conn, t->db, table, t->shard, type, json, len, false,
                                     0, id));
}

static int create_many(shard_txn *t, unsigned type, const char *const *json,
                       const size_t *len, size_t n, uint64_t *ids, size_t *statements)
{
    const char *table = NULL;
    json_t *v;
    int rc;

    if (statements)
        *statements = 0;
    if ((rc = check_usable(t, "txn_object_create_many")))
        return rc;
    if (n && (!json || !len || !ids))
        return shard__fail(SHARD_EINVAL, "txn_object_create_many: NULL argument");
    if ((rc = object_table(t->map, type, &table)))
        return rc;
    for (size_t i = 0; i < n; i++) {
        if ((rc = object_parse(json[i], len[i], &v)))
            return shard__fail_prefix(rc, "object %zu of %zu: ", i + 1, n);
        json_decref(v);
    }
    /* Refused before anything is written: the transaction stays usable. */
    if (n == 0 || (rc = object_check_sizes(t->conn, len, n)))
        return rc;
    return txn_fail(t, object_insert_many(t->conn, t->db, table, t->shard, type, json, len, n,
                                          ids, statements));
}

int txn_object_create_many(shard_txn *t, unsigned type, const char *const *json,
                           const size_t *len, size_t n, uint64_t *ids, size_t *statements)
{
    double started = now_seconds();
    int rc = create_many(t, type, json, len, n, ids, statements);
    return txn_counted(t ? t->ctx : NULL, STATS_TXN_OBJECT_CREATE, started, rc);
}

static int txn_object_get(shard_txn *t, uint64_t id, char **json, size_t *len)
{
    const char *table = NULL;
    int rc;

    if ((rc = check_usable(t, "shard_txn_object_get")))
        return rc;
    if (!json)
        return shard__fail(SHARD_EINVAL, "shard_txn_object_get: NULL output");
    if ((rc = check_on_shard(t, id, "shard_txn_object_get")) ||
        (rc = object_check_id(t->map, id, &table)))
        return rc;
    rc = object_select(t->conn, t->db, table, id, true, NULL, json, len);
    return rc == SHARD_ENOTFOUND ? rc : txn_fail(t, rc);
}

static int txn_object_put(shard_txn *t, uint64_t id, const char *json, size_t len)
{
    const char *table = NULL;
    json_t *v;
    int rc;

    if ((rc = check_usable(t, "shard_txn_object_put")))
        return rc;
    if ((rc = check_on_shard(t, id, "shard_txn_object_put")) ||
        (rc = object_check_id(t->map, id, &table)) || (rc = object_parse(json, len, &v)))
        return rc;
    json_decref(v);
    if ((rc = txn_fail(t, object_write(t->conn, t->db, table, id, json, len))))
        return rc;
    if (t->conn->affected == 0) {
        /* 0 rows: absent, or unchanged; tell them apart without failing the txn. */
        char *cur = NULL;
        rc = object_select(t->conn, t->db, table, id, false, NULL, &cur, NULL);
        free(cur);
        if (rc)
            return rc == SHARD_ENOTFOUND ? rc : txn_fail(t, rc);
    }
    return 0;
}

static int txn_mapping_add(shard_txn *t, const char *name, uint64_t from, uint64_t to,
                           int64_t seq)
{
    const shard_mapdef *def;
    sqlbuf q;
    int rc;

    if ((rc = check_usable(t, "shard_txn_mapping_add")))
        return rc;
    if (!name)
        return shard__fail(SHARD_EINVAL, "shard_txn_mapping_add: NULL name");
    def = shard__map_find_mapping(t->map, name);
    if (!def)
        return shard__fail(SHARD_EINVAL, "no mapping named \"%.64s\" in map version %llu "
                          "(reverse mappings are written through their forward name)",
                          name, (unsigned long long)t->map->version);
    if ((rc = check_on_shard(t, from, "mapping from")))
        return rc;
    if (!shard_id_valid(to))
        return shard__fail(SHARD_EINVAL, "invalid to ID %llu", (unsigned long long)to);
    if (def->reverse && (rc = check_on_shard(t, to, "reverse mapping: to")))
        return rc;
    if (seq == SHARD_SEQ_NOW)
        seq = mapping_now();
    sql_init(&q);
    mapping_upsert_sql(&q, t->db, def->name, from, to, seq);
    rc = conn_query(t->conn, &q);
    if (rc == 0 && def->reverse) {
        sql_reset(&q);
        mapping_upsert_sql(&q, t->db, def->reverse, to, from, seq);
        rc = conn_query(t->conn, &q);
    }
    sql_free(&q);
    return txn_fail(t, rc);
}

int shard_txn_object_create(shard_txn *t, unsigned type, const char *json, size_t len,
                            uint64_t *id)
{
    double started = now_seconds();
    int rc = txn_object_create(t, type, json, len, id);
    return txn_counted(t ? t->ctx : NULL, STATS_TXN_OBJECT_CREATE, started, rc);
}

int shard_txn_object_get(shard_txn *t, uint64_t id, char **json, size_t *len)
{
    double started = now_seconds();
    int rc = txn_object_get(t, id, json, len);
    return txn_counted(t ? t->ctx : NULL, STATS_TXN_OBJECT_GET, started, rc);
}

int shard_txn_object_put(shard_txn *t, uint64_t id, const char *json, size_t len)
{
    double started = now_seconds();
    int rc = txn_object_put(t, id, json, len);
    return txn_counted(t ? t->ctx : NULL, STATS_TXN_OBJECT_PUT, started, rc);
}

int shard_txn_mapping_add(shard_txn *t, const char *name, uint64_t from, uint64_t to,
                          int64_t seq)
{
    double started = now_seconds();
    int rc = txn_mapping_add(t, name, from, to, seq);
    return txn_counted(t ? t->ctx : NULL, STATS_TXN_MAPPING_ADD, started, rc);
}

static int txn_commit(shard_txn *t)
{
    int rc;

    if (!t)
        return shard__fail(SHARD_EINVAL, "shard_txn_commit: NULL transaction");
    if (t->failed) {
        rc = shard__fail(t->failed, "commit: the transaction failed earlier (%s) and was "
                        "rolled back", shard_strerror(t->failed));
        txn_end(t, true);
        return rc;
    }
    rc = conn_query_str(t->conn, "COMMIT");
    if (rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT)
        shard__fail_prefix(rc, "commit outcome unknown: ");
    txn_fail(t, rc);
    txn_end(t, rc != 0);
    return rc;
}

int shard_txn_commit(shard_txn *t)
{
    shard_ctx *ctx = t ? t->ctx : NULL; /* t is freed by the commit */
    double started = now_seconds();
    int rc = txn_commit(t);
    return txn_counted(ctx, STATS_TXN_COMMIT, started, rc);
}

void shard_txn_rollback(shard_txn *t)
{
    if (t)
        txn_end(t, true);
}
