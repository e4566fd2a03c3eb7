/* Key-value tables in the mod-shard space: routed by shard_mod(key, count). */
#include "object.h"

#include <stdio.h>
#include <string.h>

typedef enum kv_op { KV_PUT, KV_PUT_NEW, KV_GET, KV_DELETE } kv_op;

typedef struct kv_args {
    kv_op op;
    const char *table;
    const void *key;
    size_t klen;
    const void *value;
    size_t vlen;
    char *out;
    size_t outlen;
} kv_args;

static void where_key(sqlbuf *q, const kv_args *a)
{
    sql_add(q, " WHERE k = ");
    sql_hex(q, a->key, a->klen);
}

static int kv_fn(exec_env *env, void *arg)
{
    kv_args *a = arg;
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    if (!shard__map_has_mod_table(env->map, a->table))
        return shard__fail(SHARD_EINVAL, "no key-value table \"%.64s\" in mod_shards.tables "
                          "of map version %llu", a->table,
                          (unsigned long long)env->map->version);
    sql_init(&q);
    switch (a->op) {
    case KV_PUT:
    case KV_PUT_NEW: {
        conn_param p[2] = {CONN_BYTES(a->key, a->klen), CONN_BYTES(a->value, a->vlen)};
        char key[160];
        sql_add(&q, "INSERT INTO ");
        sql_table(&q, env->db, a->table);
        sql_add(&q, " (k, v) VALUES (?, ?)");
        if (a->op == KV_PUT)
            sql_add(&q, " ON DUPLICATE KEY UPDATE v = VALUES(v)");
        else
            env->ambiguous = true; /* a lost claim may have been made */
        snprintf(key, sizeof key, "%s %s.%s", a->op == KV_PUT ? "kvput" : "kvnew", env->db,
                 a->table);
        rc = conn_stmt_run(env->conn, key, &q, p, 2);
        if (rc == SHARD_EEXISTS)
            rc = shard__fail(SHARD_EEXISTS, "key already exists in %s", a->table);
        break;
    }
    case KV_GET:
        sql_add(&q, "SELECT v FROM ");
        sql_table(&q, env->db, a->table);
        where_key(&q, a);
        rc = conn_select(env->conn, &q, &res);
        if (rc)
            break;
        row = mysql_fetch_row(res);
        if (!row)
            rc = shard__fail(SHARD_ENOTFOUND, "key not found in %s", a->table);
        else
            rc = copy_out(row[0], mysql_fetch_lengths(res)[0], &a->out, &a->outlen);
        mysql_free_result(res);
        break;
    case KV_DELETE:
    default:
        sql_add(&q, "DELETE FROM ");
        sql_table(&q, env->db, a->table);
        where_key(&q, a);
        rc = conn_query(env->conn, &q);
        if (rc == 0 && mysql_affected_rows(env->conn->my) == 0)
            rc = shard__fail(SHARD_ENOTFOUND, "key not found in %s", a->table);
        break;
    }
    sql_free(&q);
    return rc;
}

static int kv_run(shard_ctx *ctx, kv_args *a)
{
    static const stats_op ops[] = {[KV_PUT] = STATS_KV_PUT, [KV_PUT_NEW] = STATS_KV_PUT_NEW,
                                   [KV_GET] = STATS_KV_GET, [KV_DELETE] = STATS_KV_DELETE};
    shard_map *map;
    uint32_t count, modshard;
    int rc;

    if (!ctx || !a->table || (!a->key && a->klen))
        return shard__fail(SHARD_EINVAL, "key-value: NULL argument");
    if (!a->value && a->vlen)
        return shard__fail(SHARD_EINVAL, "key-value: NULL value with length %zu", a->vlen);
    if (a->klen > SHARD_KEY_MAX)
        return shard__fail(SHARD_EINVAL, "key of %zu bytes is longer than %d bytes", a->klen,
                          SHARD_KEY_MAX);
    map = ctx_map(ctx);
    count = map->mod_count;
    shard_map_free(map);
    if (!count)
        return shard__fail(SHARD_EINVAL, "the shard map has no mod_shards section");
    if ((rc = shard_mod(a->key, a->klen, count, &modshard)))
        return rc;
    return ctx_exec(ctx, modshard, EXEC_MOD | EXEC_OP(ops[a->op]), kv_fn, a);
}

int shard_kv_put(shard_ctx *ctx, const char *table, const void *key, size_t klen,
                 const void *value, size_t vlen)
{
    kv_args a = {KV_PUT, table, key, klen, value, vlen, NULL, 0};
    return kv_run(ctx, &a);
}

int shard_kv_put_new(shard_ctx *ctx, const char *table, const void *key, size_t klen,
                     const void *value, size_t vlen)
{
    kv_args a = {KV_PUT_NEW, table, key, klen, value, vlen, NULL, 0};
    return kv_run(ctx, &a);
}

int shard_kv_get(shard_ctx *ctx, const char *table, const void *key, size_t klen,
                 char **value, size_t *vlen)
{
    kv_args a = {KV_GET, table, key, klen, NULL, 0, NULL, 0};
    int rc;

    if (!value)
        return shard__fail(SHARD_EINVAL, "shard_kv_get: NULL value output");
    if ((rc = kv_run(ctx, &a)))
        return rc;
    *value = a.out;
    if (vlen)
        *vlen = a.outlen;
    return 0;
}

int shard_kv_delete(shard_ctx *ctx, const char *table, const void *key, size_t klen)
{
    kv_args a = {KV_DELETE, table, key, klen, NULL, 0, NULL, 0};
    return kv_run(ctx, &a);
}
