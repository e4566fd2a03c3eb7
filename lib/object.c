/* Objects: create, get, read-modify-write, soft and hard delete. */
#include "object.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a JSON value is, for messages: "null", "an array", "a string"... */
static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    default: return "null";
    }
}

/* Parse any JSON value (scalars too, so that a message can name them). */
static int parse_any(const char *json, size_t len, const char *what, json_t **out)
{
    json_error_t err;

    if (!json)
        return shard__fail(SHARD_EINVAL, "%s: NULL JSON text", what);
    *out = json_loadb(json, len, OBJECT_JSON_FLAGS | JSON_DECODE_ANY, &err);
    if (!*out)
        return shard__fail(SHARD_EINVAL, "%s: invalid JSON at line %d, column %d: %s", what,
                          err.line, err.column, err.text);
    return 0;
}

int object_parse(const char *json, size_t len, json_t **out)
{
    json_t *v;
    int rc = parse_any(json, len, "object", &v);

    if (rc)
        return rc;
    if (!json_is_object(v)) {
        rc = shard__fail(SHARD_EINVAL, "object JSON must be an object {...}, not %s",
                        json_kind(v));
        json_decref(v);
        return rc;
    }
    *out = v;
    return 0;
}

/*
 * A merge patch that is not an object would, by RFC 7386, replace the whole
 * target with itself: null would leave no object at all, and anything else
 * would make the object a non-object. Neither is an object store's update.
 */
int object_parse_patch(const char *json, size_t len, json_t **out)
{
    json_t *v;
    int rc = parse_any(json, len, "merge patch", &v);

    if (rc)
        return rc;
    if (!json_is_object(v)) {
        rc = shard__fail(SHARD_EINVAL, "a patch must be a JSON object {...}, not %s (a "
                        "merge patch that is not an object would replace the whole object)",
                        json_kind(v));
        json_decref(v);
        return rc;
    }
    *out = v;
    return 0;
}

bool object_deleted(const char *text, size_t len)
{
    json_t *v;
    bool deleted;

    /* Judged on the parsed document: a key may be spelt with escapes
     * ("\u0061ctive"). Parsing is most of a read's client-side cost, so it
     * is skipped only when the text provably has no key "active": a key is
     * spelt either with those six letters or with a backslash escape. */
    if (!memchr(text, '\\', len) && !memmem(text, len, "active", 6))
        return false;
    v = json_loadb(text, len, JSON_ALLOW_NUL, NULL);
    deleted = v && object_deleted_json(v);
    json_decref(v);
    return deleted;
}

bool object_deleted_json(const json_t *obj)
{
    return json_is_false(json_object_get(obj, "active"));
}

int object_table(const shard_map *map, unsigned type, const char **table)
{
    if (type < 1 || type > SHARD_MAX_TYPE || !map->type_names[type])
        return shard__fail(SHARD_EINVAL, "object type %u is not registered in map version "
                          "%llu", type, (unsigned long long)map->version);
    *table = map->type_names[type];
    return 0;
}

int object_check_id(const shard_map *map, uint64_t id, const char **table)
{
    if (!shard_id_valid(id))
        return shard__fail(SHARD_EINVAL, "invalid ID %llu", (unsigned long long)id);
    return object_table(map, shard_id_type(id), table);
}

int object_dump(const json_t *obj, char **text, size_t *len)
{
    char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_malloc_t jmalloc;
    json_free_t jfree;
    int rc;

    if (!s)
        return shard__fail(SHARD_ENOMEM, "out of memory serialising an object");
    /* Hand out libshard memory (free()), whatever allocator jansson uses. */
    rc = copy_out(s, strlen(s), text, len);
    json_get_alloc_funcs(&jmalloc, &jfree);
    jfree(s);
    return rc;
}

/* The cache key of a statement: its kind and its table. */
static void stmt_key(char *key, size_t size, const char *kind, const char *db, const char *table)
{
    snprintf(key, size, "%s %s.%s", kind, db, table);
}

void object_insert_sql(sqlbuf *q, const char *db, const char *table, bool fence,
                       unsigned bound_ms)
{
    sql_write_bound(q, bound_ms);
    sql_add(q, "INSERT INTO ");
    sql_table(q, db, table);
    if (!fence) {
        sql_add(q, " (data) VALUES (?)");
        return;
    }
    sql_add(q, " (data) SELECT ? FROM DUAL WHERE ");
    sql_fence_clear(q, db);
}

int object_insert(shard_conn *c, const char *db, const char *table, unsigned shard,
                  unsigned type, const char *json, size_t len, bool fence, unsigned bound_ms,
                  uint64_t *id)
{
    conn_param p = CONN_BYTES(json, len);
    char key[160], kind[32];
    sqlbuf q;
    uint64_t local;
    int rc;

    sql_init(&q);
    object_insert_sql(&q, db, table, fence, bound_ms);
    /* The bound is in the text: a map whose lease_ms changed prepares anew. */
    if (bound_ms)
        snprintf(kind, sizeof kind, "insert-bounded-%u", bound_ms);
    else
        snprintf(kind, sizeof kind, "%s", fence ? "insert-fenced" : "insert");
    stmt_key(key, sizeof key, kind, db, table);
    rc = conn_stmt_run(c, key, &q, &p, 1);
    sql_free(&q);
    if (rc)
        return rc;
    if (fence && c->affected == 0) /* the statement's fence check held it back */
        return shard__fail(SHARD_EMOVED, "%s is fenced by a move in progress", db);
    local = c->insert_id;
    if (local < 1 || local > SHARD_MAX_LOCAL) {
        /* The row cannot be named by an ID: take it back. */
        sqlbuf d;
        sql_init(&d);
        sql_add(&d, "DELETE FROM ");
        sql_table(&d, db, table);
        sql_add(&d, " WHERE local_id = ");
        sql_u64(&d, local);
        conn_query(c, &d);
        sql_free(&d);
        return shard__fail(SHARD_ESERVER, "table %s.%s: local id %llu exceeds 36 bits; "
                          "this shard is full for type %u", db, table,
                          (unsigned long long)local, type);
    }
    return shard_id_make(shard, type, local, id);
}

/* Rows per multi-row INSERT: ~1000 in primary-key order is where a
 * client's insert rate levels off (libshard-move(7) copies in such
 * batches); larger statements only hold more memory. */
#define INSERT_MANY_ROWS 1000

/* One multi-row INSERT ... RETURNING (q) of the n texts whose lengths are
 * len[0..n): the new IDs, in the order sent, into ids[0..n). */
static int insert_returning(shard_conn *c, const sqlbuf *q, const char *db, const char *table,
                            unsigned shard, unsigned type, const size_t *len, size_t n,
                            uint64_t *ids)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    size_t k = 0;
    int rc;

    if ((rc = conn_select(c, q, &res)))
        return rc;
    if (mysql_num_fields(res) != 2 || mysql_num_rows(res) != n) {
        rc = shard__fail(SHARD_ESERVER, "table %s.%s: an INSERT of %zu rows returned %llu",
                        db, table, n, (unsigned long long)mysql_num_rows(res));
        mysql_free_result(res);
        return rc;
    }
    while (rc == 0 && (row = mysql_fetch_row(res))) {
        uint64_t local = row[0] ? strtoull(row[0], NULL, 10) : 0;
        uint64_t stored = row[1] ? strtoull(row[1], NULL, 10) : UINT64_MAX;
        if (local < 1 || local > SHARD_MAX_LOCAL)
            rc = shard__fail(SHARD_ESERVER, "table %s.%s: local id %llu exceeds 36 bits; this "
                            "shard is full for type %u", db, table, (unsigned long long)local,
                            type);
        else if (stored != len[k])
            /* RETURNING gives the rows in the order they were inserted;
             * were it ever otherwise, IDs would name the wrong objects. */
            rc = shard__fail(SHARD_ESERVER, "table %s.%s: row %zu of a multi-row INSERT came "
                            "back with %llu bytes of data, %zu were sent: the rows returned are "
                            "not in the order sent", db, table, k + 1,
                            (unsigned long long)stored, len[k]);
        else
            rc = shard_id_make(shard, type, local, &ids[k++]);
    }
    mysql_free_result(res);
    return rc;
}

int object_check_sizes(const shard_conn *c, const size_t *len, size_t n)
{
    /* conn_fits() for a prepared statement's one value */
    for (size_t i = 0; i < n; i++)
        if (len[i] + 1024 > c->max_packet)
            return shard__fail(SHARD_ETOOBIG, "object %zu of %zu is %zu bytes: more than one "
                              "statement can carry under %s's max_allowed_packet (%lu bytes); "
                              "nothing written", i + 1, n, len[i], c->srv->label,
                              c->max_packet);
    return 0;
}

int object_insert_many(shard_conn *c, const char *db, const char *table, unsigned shard,
                       unsigned type, const char *const *json, const size_t *len, size_t n,
                       uint64_t *ids, size_t *statements)
{
    static const char tail[] = " RETURNING local_id, LENGTH(data)";
    /* conn_fits(): a statement may have max_allowed_packet - 1024 bytes. */
    size_t limit = c->max_packet > 1024 ? c->max_packet - 1024 : 0, head, first = 0;
    size_t stmts = 0;
    sqlbuf q;
    int rc = 0;

    if ((rc = object_check_sizes(c, len, n)))
        return rc;
    sql_init(&q);
    sql_add(&q, "INSERT INTO ");
    sql_table(&q, db, table);
    sql_add(&q, " (data) VALUES ");
    head = q.len;
    for (size_t i = 0; rc == 0 && i <= n; i++) {
        /* ",(X'...')" */
        size_t row = i < n ? 2 * len[i] + 6 : 0;
        bool alone = i < n && head + row + sizeof tail > limit;
        if (i > first && (i == n || alone || i - first == INSERT_MANY_ROWS ||
                          q.len + row + sizeof tail > limit)) {
            sql_add(&q, tail);
            if ((rc = sql_check(&q)) == 0 && (rc = conn_fits(c, q.len)) == 0)
                rc = insert_returning(c, &q, db, table, shard, type, len + first, i - first,
                                      ids + first);
            stmts++;
            q.len = head;
            first = i;
        }
        if (rc || i == n)
            break;
        if (alone) {
            /* Too big as a hex literal, not as bytes: on its own, a binary
             * parameter of a prepared statement. */
            rc = object_insert(c, db, table, shard, type, json[i], len[i], false, 0,
                               &ids[i]);
            stmts++;
            first = i + 1;
            continue;
        }
        sql_add(&q, i > first ? ",(" : "(");
        sql_hex(&q, json[i], len[i]);
        sql_add(&q, ")");
    }
    sql_free(&q);
    if (statements)
        *statements = stmts;
    if (rc)
        memset(ids, 0, n * sizeof *ids);
    return rc;
}

/* The hot path: one prepared statement per table, kept on the connection
 * (binary protocol, parsed once), returning the shard's fence and the
 * object in one row, so that nobody reads a fenced shard (libshard-move(7)).
 * Both are primary-key lookups. */
typedef struct get_sql {
    const char *db, *table;
    bool locked; /* a read-modify-write's: the fence shared, the row for update */
} get_sql;

static void build_get(sqlbuf *q, const void *arg)
{
    const get_sql *g = arg;
    sql_add(q, "SELECT ");
    if (g->locked)
        sql_fence_lock_column(q, g->db);
    else
        sql_fence_value(q, g->db);
    sql_add(q, ", (SELECT data FROM ");
    sql_table(q, g->db, g->table);
    sql_add(q, g->locked ? " WHERE local_id = ? FOR UPDATE)" : " WHERE local_id = ?)");
}

/* Under a lease (exec_fence_skip): the object alone. */
static void build_get_unfenced(sqlbuf *q, const void *arg)
{
    const get_sql *g = arg;
    sql_add(q, "SELECT data FROM ");
    sql_table(q, g->db, g->table);
    sql_add(q, " WHERE local_id = ?");
}

/* fenced NULL: the statement without the fence (the caller may skip it). */
static int select_fenced(shard_conn *c, const char *db, const char *table, uint64_t id,
                         bool *fenced, char **json, size_t *len)
{
    get_sql g = {db, table, false};
    char key[160];
    int rc;

    stmt_key(key, sizeof key, fenced ? "get" : "get-leased", db, table);
    rc = conn_stmt_get(c, key, fenced ? build_get : build_get_unfenced, &g,
                       shard_id_local(id), fenced, json, len);
    if (fenced && rc == 0 && *fenced) {
        free(*json);
        *json = NULL;
    }
    return fenced && *fenced ? 0 : rc;
}

int object_get(shard_conn *c, const char *db, const char *table, uint64_t id, bool check,
               bool *fenced, char **json, size_t *len)
{
    bool f = false;
    int rc = select_fenced(c, db, table, id, check ? &f : NULL, json, len);

    if (fenced)
        *fenced = f;
    if (f)
        return 0;
    if (rc == 0 && object_deleted(*json, len ? *len : strlen(*json))) {
        free(*json);
        *json = NULL;
        rc = SHARD_ENOTFOUND;
    }
    if (rc == SHARD_ENOTFOUND)
        rc = shard__fail(SHARD_ENOTFOUND, "object %llu not found", (unsigned long long)id);
    return rc;
}

int object_select(shard_conn *c, const char *db, const char *table, uint64_t id,
                  bool for_update, bool *fenced, char **json, size_t *len)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    unsigned long *lens;
    sqlbuf q;
    int rc;

    if (!for_update)
        return object_get(c, db, table, id, true, fenced, json, len);
    /* FOR UPDATE runs in a transaction that checked the fence already. */
    if (fenced)
        *fenced = false;
    sql_init(&q);
    sql_add(&q, "SELECT data FROM ");
    sql_table(&q, db, table);
    sql_add(&q, " WHERE local_id = ");
    sql_u64(&q, shard_id_local(id));
    sql_add(&q, " FOR UPDATE");
    rc = conn_select(c, &q, &res);
    sql_free(&q);
    if (rc)
        return rc;
    row = mysql_fetch_row(res);
    lens = mysql_fetch_lengths(res);
    if (!row || !row[0] || object_deleted(row[0], lens[0]))
        rc = shard__fail(SHARD_ENOTFOUND, "object %llu not found",
                        (unsigned long long)id);
    else
        rc = copy_out(row[0], lens[0], json, len);
    mysql_free_result(res);
    return rc;
}

int object_write(shard_conn *c, const char *db, const char *table, uint64_t id,
                 const char *json, size_t len)
{
    conn_param p[2] = {CONN_BYTES(json, len), CONN_U64(shard_id_local(id))};
    char key[160];
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "UPDATE ");
    sql_table(&q, db, table);
    sql_add(&q, " SET data = ? WHERE local_id = ?");
    stmt_key(key, sizeof key, "update", db, table);
    rc = conn_stmt_run(c, key, &q, p, 2);
    sql_free(&q);
    return rc;
}

/* ---- create --------------------------------------------------------------- */

typedef struct create_args {
    unsigned type;
    const char *json;
    size_t len;
    uint64_t id;
} create_args;

static int create_fn(exec_env *env, void *arg)
{
    create_args *a = arg;
    const char *table = NULL;
    int rc = object_table(env->map, a->type, &table);
    if (rc)
        return rc;
    rc = object_insert(env->conn, env->db, table, env->shard, a->type, a->json, a->len,
                       env->fence_inline, env->bound_ms, &a->id);
    /* Its own fence check held it back: the statement ran (no server
     * error, such as a read-only master after a failover) and wrote nothing. */
    if (rc == SHARD_EMOVED && env->fence_inline && env->conn->last_errno == 0)
        env->fenced = true;
    return rc;
}

int shard_object_create(shard_ctx *ctx, unsigned type, unsigned shard, const char *json,
                        size_t len, uint64_t *id)
{
    create_args a = {type, json, len, 0};
    json_t *v;
    int rc;

    if (!ctx || !id)
        return shard__fail(SHARD_EINVAL, "shard_object_create: NULL argument");
    if (type < 1 || type > SHARD_MAX_TYPE)
        return shard__fail(SHARD_EINVAL, "type %u out of range (1..1023)", type);
    if (shard != SHARD_ANY && shard > SHARD_MAX_SHARD)
        return shard__fail(SHARD_EINVAL, "shard %u out of range (0..65535)", shard);
    if ((rc = object_parse(json, len, &v)))
        return rc;
    json_decref(v);
    if (shard == SHARD_ANY) {
        shard_map *map = ctx_map(ctx);
        shard = (unsigned)(ctx_random() % map->open_shards);
        shard_map_free(map);
    }
    /* One round trip: the INSERT checks the fence itself, or under the
     * lease is bounded instead (EXEC_ONE). */
    if ((rc = ctx_exec(ctx, shard, EXEC_WRITE | EXEC_ONE | EXEC_OP(STATS_OBJECT_CREATE),
                       create_fn, &a)))
        return rc;
    *id = a.id;
    return 0;
}

/* ---- get ------------------------------------------------------------------ */

typedef struct get_args {
    uint64_t id;
    char *json;
    size_t len;
} get_args;

static int get_fn(exec_env *env, void *arg)
{
    get_args *a = arg;
    const char *table = NULL;
    int rc = object_check_id(env->map, a->id, &table);
    if (rc)
        return rc;
    bool fenced = false;
    rc = object_get(env->conn, env->db, table, a->id, !env->fence_skip, &fenced, &a->json,
                    &a->len);
    if ((rc == 0 || rc == SHARD_ENOTFOUND) && exec_answer_late(env)) {
        free(a->json);
        a->json = NULL;
        return EXEC_STALE;
    }
    if (rc)
        return rc;
    return fenced ? exec_fenced(env) : 0;
}

int shard_object_get(shard_ctx *ctx, uint64_t id, char **json, size_t *len)
{
    get_args a = {id, NULL, 0};
    int rc;

    if (!ctx || !json)
        return shard__fail(SHARD_EINVAL, "shard_object_get: NULL argument");
    if (!shard_id_valid(id))
        return shard__fail(SHARD_EINVAL, "invalid ID %llu", (unsigned long long)id);
    if ((rc = ctx_exec(ctx, shard_id_shard(id), EXEC_OP(STATS_OBJECT_GET), get_fn, &a)))
        return rc;
    *json = a.json;
    if (len)
        *len = a.len;
    return 0;
}

/* ---- read-modify-write ---------------------------------------------------- */

/* Turns the current object into the new one; 0 to write, else abort. */
typedef int (*transform_fn)(json_t **obj, void *arg);

typedef struct rmw_args {
    uint64_t id;
    transform_fn transform;
    void *arg;
    char *result;
    size_t result_len;
} rmw_args;

/* The read of a read-modify-write (EXEC_FENCE_FN): the fence row under a
 * shared lock and the object's row under an exclusive one, in the
 * transaction's first statement, prepared once per table as the get's is.
 * One row always, whether or not either exists. */
static int select_locked(exec_env *env, const char *table, uint64_t id, char **json,
                         size_t *len)
{
    get_sql g = {env->db, table, true};
    bool fenced = false;
    char key[160];
    int rc;

    stmt_key(key, sizeof key, "locked", env->db, table);
    rc = conn_stmt_get(env->conn, key, build_get, &g, shard_id_local(id), &fenced, json, len);
    if (rc == 0 && (fenced || object_deleted(*json, *len))) {
        free(*json);
        *json = NULL;
        rc = SHARD_ENOTFOUND;
    }
    if (fenced)
        return exec_fenced(env);
    if (rc == SHARD_ENOTFOUND)
        return shard__fail(SHARD_ENOTFOUND, "object %llu not found", (unsigned long long)id);
    return rc;
}

static int rmw_body(exec_env *env, rmw_args *a, const char *table)
{
    char *old = NULL, *text = NULL;
    size_t oldlen, len;
    json_t *obj = NULL;
    int rc;

    if ((rc = select_locked(env, table, a->id, &old, &oldlen)))
        return rc;
    obj = json_loadb(old, oldlen, JSON_ALLOW_NUL, NULL);
    free(old);
    if (!obj)
        return shard__fail(SHARD_ESERVER, "object %llu holds invalid JSON",
                          (unsigned long long)a->id);
    if ((rc = a->transform(&obj, a->arg)))
        goto out;
    if (!json_is_object(obj)) {
        rc = shard__fail(SHARD_EINVAL, "the update would make object %llu a non-object",
                        (unsigned long long)a->id);
        goto out;
    }
    if ((rc = object_dump(obj, &text, &len)) ||
        (rc = object_write(env->conn, env->db, table, a->id, text, len)))
        goto out;
    free(a->result); /* ctx_exec commits; a retry starts again */
    a->result = text;
    a->result_len = len;
    text = NULL;
out:
    free(text);
    json_decref(obj);
    return rc;
}

/* Runs in ctx_exec's write transaction (EXEC_WRITE): the fence checked
 * under a shared lock and the row locked in one statement (EXEC_FENCE_FN),
 * then committed by ctx_exec. */
static int rmw_fn(exec_env *env, void *arg)
{
    rmw_args *a = arg;
    const char *table = NULL;
    int rc = object_check_id(env->map, a->id, &table);

    return rc ? rc : rmw_body(env, a, table);
}

static int rmw(shard_ctx *ctx, stats_op op, uint64_t id, transform_fn t, void *arg,
               char **result, size_t *result_len)
{
    rmw_args a = {id, t, arg, NULL, 0};
    int rc;

    if (!shard_id_valid(id))
        return shard__fail(SHARD_EINVAL, "invalid ID %llu", (unsigned long long)id);
    rc = ctx_exec(ctx, shard_id_shard(id), EXEC_WRITE | EXEC_FENCE_FN | EXEC_OP(op), rmw_fn,
                  &a);
    if (rc == 0 && result) {
        rc = copy_out(a.result, a.result_len, result, result_len);
    }
    free(a.result);
    return rc;
}

static int apply_patch(json_t **obj, void *arg)
{
    json_t *merged = merge_patch(*obj, arg);
    if (!merged)
        return shard__fail(SHARD_ENOMEM, "out of memory applying a merge patch");
    json_decref(*obj);
    *obj = merged;
    return 0;
}

int shard_object_patch(shard_ctx *ctx, uint64_t id, const char *patch, size_t len,
                       char **result, size_t *result_len)
{
    json_t *p;
    int rc;

    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_object_patch: NULL context");
    if ((rc = object_parse_patch(patch, len, &p)))
        return rc;
    rc = rmw(ctx, STATS_OBJECT_PATCH, id, apply_patch, p, result, result_len);
    json_decref(p);
    return rc;
}

typedef struct update_args {
    shard_update_fn fn;
    void *payload;
    int aborted; /* the callback's non-zero return, if it aborted */
} update_args;

static int call_update(json_t **obj, void *arg)
{
    update_args *u = arg;
    int rc = u->fn(*obj, u->payload);
    if (!rc)
        return 0;
    /* Whatever the code (even a transient one such as SHARD_EBUSY), an
     * abort is final: report it as a non-retried failure, and hand the
     * callback's own code back once the transaction has rolled back. */
    u->aborted = rc;
    return SHARD_EINVAL;
}

int shard_object_update(shard_ctx *ctx, uint64_t id, shard_update_fn fn, void *payload)
{
    update_args u = {fn, payload, 0};
    int rc;

    if (!ctx || !fn)
        return shard__fail(SHARD_EINVAL, "shard_object_update: NULL argument");
    rc = rmw(ctx, STATS_OBJECT_UPDATE, id, call_update, &u, NULL, NULL);
    if (u.aborted)
        return shard__fail(u.aborted, "the update callback aborted with %d", u.aborted);
    return rc;
}

/* ---- delete --------------------------------------------------------------- */

static int soft_delete(json_t **obj, void *arg)
{
    (void)arg;
    return json_object_set_new(*obj, "active", json_false())
               ? shard__fail(SHARD_ENOMEM, "out of memory")
               : 0;
}

void object_delete_sql(sqlbuf *q, const char *db, const char *table, uint64_t id, bool fence)
{
    sql_add(q, "DELETE FROM ");
    sql_table(q, db, table);
    sql_add(q, " WHERE local_id = ");
    sql_u64(q, shard_id_local(id));
    if (fence) {
        sql_add(q, " AND ");
        sql_fence_clear(q, db);
    }
}

static int hard_delete_fn(exec_env *env, void *arg)
{
    uint64_t id = *(uint64_t *)arg;
    const char *table = NULL;
    sqlbuf q;
    int rc = object_check_id(env->map, id, &table);

    if (rc)
        return rc;
    sql_init(&q);
    sql_write_bound(&q, env->bound_ms);
    object_delete_sql(&q, env->db, table, id, env->fence_inline);
    rc = conn_query(env->conn, &q);
    sql_free(&q);
    if (rc == 0 && mysql_affected_rows(env->conn->my) == 0) {
        /* No row, or a fence held the DELETE back: the transaction tells. */
        if (env->fence_inline)
            return EXEC_TXN;
        /* Gone, after an attempt whose answer was lost: that attempt may
         * well have deleted it. Either way the object is gone, as asked. */
        if (env->after_loss)
            return 0;
        rc = shard__fail(SHARD_ENOTFOUND, "object %llu not found", (unsigned long long)id);
    }
    return rc;
}

int shard_object_delete(shard_ctx *ctx, uint64_t id, int flags)
{
    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_object_delete: NULL context");
    if (flags & ~SHARD_DELETE_HARD)
        return shard__fail(SHARD_EINVAL, "shard_object_delete: unknown flags 0x%x", flags);
    if (!shard_id_valid(id))
        return shard__fail(SHARD_EINVAL, "invalid ID %llu", (unsigned long long)id);
    if (flags & SHARD_DELETE_HARD)
        return ctx_exec(ctx, shard_id_shard(id),
                        EXEC_WRITE | EXEC_ONE | EXEC_IDEMPOTENT |
                            EXEC_OP(STATS_OBJECT_DELETE),
                        hard_delete_fn, &id);
    return rmw(ctx, STATS_OBJECT_DELETE, id, soft_delete, NULL, NULL, NULL);
}

/* ---- jansson conveniences ------------------------------------------------- */

int shard_object_create_json(shard_ctx *ctx, unsigned type, unsigned shard,
                             const json_t *obj, uint64_t *id)
{
    char *text;
    size_t len;
    int rc;

    if (!json_is_object(obj))
        return shard__fail(SHARD_EINVAL, "shard_object_create_json: not a JSON object");
    if ((rc = object_dump(obj, &text, &len)))
        return rc;
    rc = shard_object_create(ctx, type, shard, text, len, id);
    free(text);
    return rc;
}

int shard_object_get_json(shard_ctx *ctx, uint64_t id, json_t **out)
{
    char *text;
    size_t len;
    int rc;

    if (!out)
        return shard__fail(SHARD_EINVAL, "shard_object_get_json: NULL argument");
    if ((rc = shard_object_get(ctx, id, &text, &len)))
        return rc;
    *out = json_loadb(text, len, JSON_ALLOW_NUL, NULL);
    free(text);
    return *out ? 0 : shard__fail(SHARD_ESERVER, "object %llu holds invalid JSON",
                                 (unsigned long long)id);
}
