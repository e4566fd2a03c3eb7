/*
 * Writing objects (libshard-import(7)). A new row's object is written at
 * the ID chosen for it before anything was written (local id = legacy
 * id), so the write is an upsert: one transaction per shard and batch,
 * behind the shard's fence like any write (ctx_exec), in multi-row
 * statements in primary-key order sized under max_allowed_packet, shards
 * in parallel. Being idempotent, it is retried by the library's policy
 * even when a COMMIT is lost in flight. Its lookup entries follow, in bulk
 * (import_entries), while the next batch's objects are written.
 */
#include "import.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows per statement: ~1000 in primary-key order is where a client's
 * insert rate levels off (libshard-move(7)). */
#define UPSERT_ROWS 1000

typedef struct upsert_arg {
    import_run *r;
    import_item **its; /* one shard's, in local id order */
    size_t n;
} upsert_arg;

static int too_big(exec_env *env, upsert_arg *a)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->its[i]->len + 1024 > env->conn->max_packet)
            return shard__fail(SHARD_ETOOBIG, "legacy row %s.%s=%" PRIu64 " (%zu bytes as "
                              "JSON): more than one statement can carry under %s's "
                              "max_allowed_packet (%lu bytes); nothing written for its shard's "
                              "rows of the batch", a->r->table, a->r->id_col,
                              a->its[i]->legacy, a->its[i]->len, env->conn->srv->label,
                              env->conn->max_packet);
    return 0;
}

/*
 * Which of the batch's local ids hold an object that is not this import's,
 * after the upsert (asked only when it met duplicates; its locks hold them
 * to the end of the transaction). An object of this import (its id field
 * is the row's legacy id: an interrupted pass wrote it, or the row came
 * back) was written over; any other is a native object, which the upsert
 * left as it was: the row is marked collided and placed elsewhere by the
 * caller.
 */
static int find_collided(exec_env *env, upsert_arg *a)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_addf(&q, "SELECT local_id, JSON_VALUE(data, '$.\"%s\"') FROM ", a->r->id_col);
    sql_table(&q, env->db, a->r->name);
    sql_add(&q, " WHERE local_id IN (");
    for (size_t i = 0; i < a->n; i++) {
        sql_add(&q, i ? "," : "");
        sql_u64(&q, shard_id_local(a->its[i]->id));
    }
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) == 0)
        rc = conn_select(env->conn, &q, &res);
    sql_free(&q);
    if (rc)
        return rc;
    while ((row = mysql_fetch_row(res))) {
        uint64_t local = strtoull(row[0], NULL, 10);
        for (size_t i = 0; i < a->n; i++) {
            char want[24];
            if (shard_id_local(a->its[i]->id) != local)
                continue;
            snprintf(want, sizeof want, "%" PRIu64, a->its[i]->legacy);
            a->its[i]->collided = !row[1] || strcmp(row[1], want) != 0;
        }
    }
    mysql_free_result(res);
    return 0;
}

/* An existing row is written over only when it holds the same legacy id
 * (this import's object): a native object is left as it is. */
static void upsert_tail(sqlbuf *q, const char *id_col)
{
    sql_addf(q, " ON DUPLICATE KEY UPDATE data = IF(JSON_VALUE(data, '$.\"%s\"') <=> "
             "JSON_VALUE(VALUES(data), '$.\"%s\"'), VALUES(data), data)", id_col, id_col);
}

/*
 * Sends the statement of `rows` rows; *met becomes true unless every row
 * was a plain insert. Affected rows count 1 per insert, 2 per row written
 * over and 0 per row left as it was (a native object), so "as many as
 * the rows, and no duplicates reported" means none met an existing row.
 */
static int upsert_send(exec_env *env, sqlbuf *q, const char *id_col, size_t rows, bool *met)
{
    const char *info, *d;
    int rc;

    upsert_tail(q, id_col);
    if ((rc = sql_check(q)) || (rc = conn_fits(env->conn, q->len)) ||
        (rc = legacy_bulk_query(env->conn, q)))
        return rc;
    info = mysql_info(env->conn->my); /* "Records: N  Duplicates: D  Warnings: W" */
    d = info ? strstr(info, "Duplicates: ") : NULL;
    if (!d || strtoul(d + 12, NULL, 10) != 0 ||
        mysql_affected_rows(env->conn->my) != (my_ulonglong)rows)
        *met = true;
    return 0;
}

/* A text too big as an escaped literal, not as bytes: alone, as a
 * prepared statement's binary parameter. */
static int upsert_alone(exec_env *env, upsert_arg *a, const import_item *it)
{
    conn_param p[2] = {CONN_U64(shard_id_local(it->id)), CONN_BYTES(it->text, it->len)};
    char key[160];
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "INSERT INTO ");
    sql_table(&q, env->db, a->r->name);
    sql_add(&q, " (local_id, data) VALUES (?, ?)");
    upsert_tail(&q, a->r->id_col);
    snprintf(key, sizeof key, "import-upsert %s.%s", env->db, a->r->name);
    rc = conn_stmt_run(env->conn, key, &q, p, 2);
    sql_free(&q);
    return rc;
}

static int upsert_fn(exec_env *env, void *arg)
{
    upsert_arg *a = arg;
    size_t limit = env->conn->max_packet > 1024 ? env->conn->max_packet - 1024 : 0;
    size_t head, rows = 0;
    bool met = false;
    sqlbuf q;
    int rc;

    for (size_t i = 0; i < a->n; i++)
        a->its[i]->collided = false; /* a retry asks again */
    for (size_t i = 0; i < a->n; i++)
        met |= a->its[i]->fixed; /* a row that comes back meets its object */
    met |= a->r->repair;
    if ((rc = too_big(env, a)))
        return rc;
    sql_init(&q);
    sql_add(&q, "INSERT INTO ");
    sql_table(&q, env->db, a->r->name);
    sql_add(&q, " (local_id, data) VALUES ");
    head = q.len;
    for (size_t i = 0; rc == 0 && i < a->n; i++) {
        const import_item *it = a->its[i];
        size_t row = 2 * it->len + 32; /* ",(LOCAL,'...')", every byte escaped at worst */
        if (head + row + 200 > limit) {
            rc = upsert_alone(env, a, it);
            met = true;
            continue;
        }
        if (rows && (rows == UPSERT_ROWS || q.len + row + 200 > limit)) {
            if ((rc = upsert_send(env, &q, a->r->id_col, rows, &met)))
                break;
            q.len = head;
            rows = 0;
        }
        sql_add(&q, rows ? ",(" : "(");
        sql_u64(&q, shard_id_local(it->id));
        sql_add(&q, ",");
        sql_str(&q, env->conn->my, it->text, it->len); /* valid UTF-8: convert.c checked */
        sql_add(&q, ")");
        rows++;
    }
    if (rc == 0 && rows)
        rc = upsert_send(env, &q, a->r->id_col, rows, &met);
    sql_free(&q);
    /* The common case (a first pass): no row met another, none collided. */
    if (rc == 0 && met)
        rc = find_collided(env, a);
    return rc;
}

typedef struct group_job {
    import_run *r;
    import_item **its; /* sorted by (shard, local id) */
    size_t *group;     /* start of each shard's run; group[ngroups] = n */
} group_job;

static int write_group(void *arg, size_t g, unsigned worker)
{
    group_job *j = arg;
    size_t lo = j->group[g], hi = j->group[g + 1];
    upsert_arg a = {j->r, j->its + lo, hi - lo};
    int rc = ctx_exec(j->r->ctx, j->its[lo]->shard, EXEC_WRITE | EXEC_IDEMPOTENT, upsert_fn,
                      &a);

    (void)worker;
    for (size_t i = lo; rc == 0 && i < hi; i++)
        j->its[i]->written = !j->its[i]->collided;
    if (rc == 0)
        import_hook("shard"); /* one shard's objects committed, maybe not the others' */
    return rc;
}

static int cmp_shard_local(const void *a, const void *b)
{
    const import_item *x = *(import_item *const *)a, *y = *(import_item *const *)b;
    uint64_t lx = shard_id_local(x->id), ly = shard_id_local(y->id);

    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return lx < ly ? -1 : lx > ly;
}

/* A row whose local id a native object holds on its shard goes to another
 * open shard (at random), the native object untouched. */
static int replace_collided(import_run *r, import_item *it)
{
    if (it->fixed)
        return shard__fail(SHARD_EEXISTS, "legacy row %s.%s=%" PRIu64 ": its object %" PRIu64
                          " was replaced by an object that is not this row's (its \"%s\" "
                          "field differs): refused, nothing written for it", r->table,
                          r->id_col, it->legacy, it->id, r->id_col);
    if (r->open_shards < 2)
        return shard__fail(SHARD_EEXISTS, "legacy row %s.%s=%" PRIu64 ": shard %u holds a "
                          "native object at local id %" PRIu64 " and there is no other open "
                          "shard: refused, nothing written for it", r->table, r->id_col,
                          it->legacy, it->shard, it->legacy);
    it->shard = (unsigned)((it->shard + 1 + ctx_random() % (r->open_shards - 1)) %
                           r->open_shards);
    r->collisions++;
    return shard_id_make(it->shard, r->type, it->legacy, &it->id);
}

/* Every object of its[0..n) written, shards in parallel; collided rows
 * placed again until none is left. */
static int write_objects(import_run *r, import_item **its, size_t n)
{
    import_item **todo = shard__calloc(n ? n : 1, sizeof *todo);
    size_t *group = shard__calloc(n + 1, sizeof *group), nt = n;
    int rc = 0;

    if (!todo || !group) {
        free(todo);
        free(group);
        return shard__fail(SHARD_ENOMEM, "out of memory writing %zu objects", n);
    }
    memcpy(todo, its, n * sizeof *its);
    for (unsigned round = 0; rc == 0 && nt; round++) {
        size_t ng = 0, k = 0;
        group_job j = {r, todo, group};
        if (round > r->open_shards * 4) {
            rc = shard__fail(SHARD_EEXISTS, "legacy row %s.%s=%" PRIu64 ": every open shard "
                            "tried holds a native object at local id %" PRIu64, r->table,
                            r->id_col, todo[0]->legacy, todo[0]->legacy);
            break;
        }
        qsort(todo, nt, sizeof *todo, cmp_shard_local);
        for (size_t i = 0; i < nt; i++)
            if (i == 0 || todo[i]->shard != todo[i - 1]->shard)
                group[ng++] = i;
        group[ng] = nt;
        rc = fanout_run(ng, r->threads, write_group, &j);
        for (size_t i = 0; rc == 0 && i < nt; i++)
            if (todo[i]->collided && (rc = replace_collided(r, todo[i])) == 0)
                todo[k++] = todo[i];
        nt = k;
    }
    free(todo);
    free(group);
    return rc;
}

int import_create(import_run *r, import_item **its, size_t n)
{
    int rc = write_objects(r, its, n);

    if (n)
        import_hook("created"); /* objects written, their entries not yet */
    return rc;
}

/*
 * The entries of a batch's written objects: new ones (even when another
 * shard's write failed) and rewritten ones, in one bulk upsert. It may run
 * while the next batch's objects are written: only objects committed
 * before get an entry, so a pass that dies leaves objects without one
 * (found by the next pass), never an entry without its object.
 */
int import_entries(import_run *r, import_item **nw, size_t nn, import_item **ch, size_t nc,
                   uint64_t *made, uint64_t *changed)
{
    import_item **done = shard__calloc(nn + nc ? nn + nc : 1, sizeof *done);
    size_t k = 0, kn;
    int rc = 0;

    *made = *changed = 0;
    if (!done)
        return shard__fail(SHARD_ENOMEM, "out of memory");
    for (size_t i = 0; i < nn && rc == 0; i++) {
        if (!nw[i]->written)
            continue;
        rc = import_set_val(nw[i], "%" PRIu64 " %s", nw[i]->id, nw[i]->md5);
        done[k++] = nw[i];
    }
    kn = k;
    /* A changed row whose object was deleted through libshard gets the new
     * checksum too: the next pass finds it unchanged, and clean. */
    for (size_t i = 0; i < nc && rc == 0; i++) {
        rc = import_set_val(ch[i], "%" PRIu64 " %s", ch[i]->id, ch[i]->md5);
        done[k++] = ch[i];
        *changed += ch[i]->act == ACT_CHANGED;
    }
    if (rc == 0)
        rc = import_put_vals(r, done, k);
    if (rc)
        *changed = 0;
    if (rc == 0) {
        for (size_t i = 0; i < kn; i++) {
            legacy_cache_put(r->ctx, r->type, done[i]->legacy, done[i]->id);
            r->rep.adopted += done[i]->adopted;
        }
        *made = kn;
        if (kn)
            import_hook("entries");
    }
    free(done);
    return rc;
}

/* ---- rewrites and deletions ------------------------------------------------------ */

typedef struct item_job {
    import_run *r;
    import_item **its;
} item_job;

typedef struct replace_arg {
    const char *text;
    size_t len;
} replace_arg;

/* The object becomes the row's JSON, whatever it held. */
static int replace_with(json_t *obj, void *payload)
{
    replace_arg *a = payload;
    json_t *v = json_loadb(a->text, a->len, JSON_ALLOW_NUL, NULL);
    int rc = v && json_object_clear(obj) == 0 && json_object_update(obj, v) == 0;
    json_decref(v);
    return rc ? 0 : SHARD_ENOMEM;
}

static int update_one(void *arg, size_t i, unsigned worker)
{
    item_job *j = arg;
    import_item *it = j->its[i];
    replace_arg a = {it->text, it->len};
    int rc = shard_object_update(j->r->ctx, it->id, replace_with, &a);

    (void)worker;
    if (rc == SHARD_ENOTFOUND) {
        /* Deleted through libshard since: it stays deleted (the library's
         * side wins once the application writes there). */
        it->act = ACT_UNCHANGED;
        ctx_log(j->r->ctx, SHARD_LOG_WARN, "import %s: legacy row %s changed, but object "
                "%" PRIu64 " was deleted through libshard: left deleted", j->r->name, it->key,
                it->id);
        rc = 0;
    }
    return rc;
}

int import_change(import_run *r, import_item **its, size_t n)
{
    item_job j = {r, its};
    int rc = fanout_run(n, r->threads, update_one, &j);

    if (rc == 0 && n)
        import_hook("changed"); /* objects rewritten, their entries not yet */
    return rc;
}

static int delete_one(void *arg, size_t i, unsigned worker)
{
    item_job *j = arg;
    int rc = shard_object_delete(j->r->ctx, j->its[i]->id, 0);

    (void)worker;
    return rc == SHARD_ENOTFOUND ? 0 : rc; /* already deleted */
}

int import_delete(import_run *r, import_item **its, size_t n)
{
    item_job j = {r, its};
    int rc = fanout_run(n, r->threads, delete_one, &j);

    if (rc)
        return rc;
    if (n)
        import_hook("deleted"); /* objects soft-deleted, their entries not yet */
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = import_set_val(its[i], "%" PRIu64 " deleted", its[i]->id);
    return rc ? rc : import_put_vals(r, its, n);
}
