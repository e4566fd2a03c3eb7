/*
 * Lookup entries of an import (libshard-import(7)): a batch's entries read
 * in bulk (one statement per server, servers concurrently) decide what
 * each row needs; new rows get their shard and their ID here, before
 * anything is written. The pass marker tells a pass that the one before
 * it was interrupted, and so that objects may exist without their entry.
 */
#include "import.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int import_set_val(import_item *it, const char *fmt, ...)
{
    char buf[80];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(it->val);
    it->val = shard__strdup(buf);
    return it->val ? 0 : shard__fail(SHARD_ENOMEM, "out of memory");
}

int import_put_vals(import_run *r, import_item **its, size_t n)
{
    char **keys = shard__calloc(n ? n : 1, sizeof *keys);
    char **vals = shard__calloc(n ? n : 1, sizeof *vals);
    int rc = 0;

    if (!keys || !vals)
        rc = shard__fail(SHARD_ENOMEM, "out of memory writing lookup entries");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        keys[i] = its[i]->key;
        vals[i] = its[i]->val;
    }
    if (rc == 0)
        rc = legacy_kv_put_many(r->ctx, r->lookup, keys, vals, n, r->threads);
    free(keys);
    free(vals);
    return rc;
}

/* ---- the pass marker ------------------------------------------------------- */

int import_marker_read(import_run *r)
{
    char *keys[1] = {IMPORT_MARKER_KEY}, *vals[1] = {NULL};
    uint64_t entries = 0;
    int rc = legacy_kv_get_many(r->ctx, r->lookup, keys, 1, vals);

    if (rc == 0)
        r->repair = r->marked = vals[0] != NULL;
    free(vals[0]);
    /* A first pass into an empty lookup need not ask for entries: one
     * import at a time (the lock), and a pass sees each row once. */
    if (rc == 0 && !r->repair &&
        (rc = legacy_kv_count(r->ctx, r->lookup, "", r->threads, &entries)) == 0)
        r->empty = entries == 0;
    return rc;
}

int import_mark(import_run *r)
{
    char *keys[1] = {IMPORT_MARKER_KEY}, *vals[1] = {"interrupted pass"};
    int rc;

    if (r->marked || r->dry)
        return 0;
    /* Before the pass's first write: a pass that dies after it leaves the
     * marker, and the next one looks for objects without an entry. */
    if ((rc = legacy_kv_put_many(r->ctx, r->lookup, keys, vals, 1, 1)) == 0)
        r->marked = true;
    import_hook("marked");
    return rc;
}

int import_unmark(import_run *r)
{
    char *keys[1] = {IMPORT_MARKER_KEY};
    int rc;

    if (!r->marked || r->dry)
        return 0;
    if ((rc = legacy_kv_delete_many(r->ctx, r->lookup, keys, 1, 1)) == 0)
        r->marked = false;
    return rc;
}

/* ---- objects an interrupted pass wrote -------------------------------------- */

typedef struct find_job {
    import_run *r;
    import_item **its;
    size_t n;
    unsigned *shards; /* the map's ID shards */
    uint64_t *found;  /* per item: 1 + the shard holding its object, 0: none */
    pthread_mutex_t lock;
} find_job;

typedef struct find_arg {
    find_job *j;
    unsigned shard;
} find_arg;

/* An object written by an import for legacy id L holds L as its local id
 * and in its id field; a native object at local id L does not. */
static int find_fn(exec_env *env, void *arg)
{
    find_arg *a = arg;
    find_job *j = a->j;
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_addf(&q, "SELECT local_id, JSON_VALUE(data, '$.\"%s\"') FROM ", j->r->id_col);
    sql_table(&q, env->db, j->r->name);
    sql_add(&q, " WHERE local_id IN (");
    for (size_t i = 0; i < j->n; i++) {
        sql_add(&q, i ? "," : "");
        sql_u64(&q, j->its[i]->legacy);
    }
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) == 0)
        rc = conn_select(env->conn, &q, &res);
    sql_free(&q);
    if (rc)
        return rc;
    pthread_mutex_lock(&j->lock);
    while ((row = mysql_fetch_row(res))) {
        uint64_t local = strtoull(row[0], NULL, 10);
        char want[24];
        snprintf(want, sizeof want, "%" PRIu64, local);
        if (!row[1] || strcmp(row[1], want) != 0)
            continue; /* a native object */
        for (size_t i = 0; i < j->n; i++)
            if (j->its[i]->legacy == local) {
                if (j->found[i])
                    ctx_log(j->r->ctx, SHARD_LOG_WARN, "import %s: legacy id %" PRIu64
                            " has objects on shards %" PRIu64 " and %u; keeping the first",
                            j->r->name, local, j->found[i] - 1, a->shard);
                else
                    j->found[i] = (uint64_t)a->shard + 1;
            }
    }
    pthread_mutex_unlock(&j->lock);
    mysql_free_result(res);
    return 0;
}

static int find_shard(void *arg, size_t i, unsigned worker)
{
    find_job *j = arg;
    find_arg a = {j, j->shards[i]};

    (void)worker;
    return ctx_exec(j->r->ctx, j->shards[i], 0, find_fn, &a);
}

int import_find_written(import_run *r, import_item **its, size_t n)
{
    shard_map *map;
    find_job j = {r, its, n, NULL, NULL, PTHREAD_MUTEX_INITIALIZER};
    size_t ns = 0;
    int rc = 0;

    if (!n)
        return 0;
    map = ctx_map(r->ctx);
    for (size_t k = 0; k < map->nranges; k++)
        ns += map->ranges[k].hi - map->ranges[k].lo + 1;
    j.shards = shard__calloc(ns, sizeof *j.shards);
    j.found = shard__calloc(n, sizeof *j.found);
    if (!j.shards || !j.found)
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
    ns = 0;
    for (size_t k = 0; rc == 0 && k < map->nranges; k++)
        for (unsigned s = map->ranges[k].lo; s <= map->ranges[k].hi; s++)
            j.shards[ns++] = s;
    shard_map_free(map);
    if (rc == 0)
        rc = fanout_run(ns, r->threads, find_shard, &j);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!j.found[i])
            continue;
        its[i]->shard = (unsigned)(j.found[i] - 1);
        its[i]->fixed = its[i]->adopted = true;
        rc = shard_id_make(its[i]->shard, r->type, its[i]->legacy, &its[i]->id);
    }
    pthread_mutex_destroy(&j.lock);
    free(j.shards);
    free(j.found);
    return rc;
}

/* ---- classifying a batch ------------------------------------------------------- */

/* Place the batch's new rows near their parents: one resolution for all. */
static int place_near(import_run *r, import_item *it, size_t n)
{
    uint64_t *parents = shard__calloc(n, sizeof *parents), *pids = shard__calloc(n, sizeof *pids);
    size_t np = 0;
    int rc = 0;

    if (!parents || !pids) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (it[i].act == ACT_NEW && !it[i].fixed && it[i].parent)
            parents[np++] = it[i].parent;
    if ((rc = shard_legacy_resolve_many(r->ctx, r->o->near_type, parents, np, pids)))
        goto out;
    np = 0;
    for (size_t i = 0; i < n; i++) {
        if (it[i].act != ACT_NEW || it[i].fixed || !it[i].parent)
            continue;
        if (!pids[np]) {
            rc = shard__fail(SHARD_ENOTFOUND, "legacy row %s.%s=%" PRIu64 ": its %s %" PRIu64
                            " has no lookup entry: import that parent first", r->table,
                            r->id_col, it[i].legacy, r->o->near_column, it[i].parent);
            goto out;
        }
        it[i].shard = shard_id_shard(pids[np++]);
    }
out:
    free(parents);
    free(pids);
    return rc;
}

static int entry_action(import_run *r, import_item *it, const char *val)
{
    legacy_entry_parse(val, &it->e);
    switch (it->e.state) {
    case LEGACY_ABSENT:
        it->act = ACT_NEW;
        it->shard = (unsigned)(ctx_random() % r->open_shards);
        return 0;
    case LEGACY_DELETED:
        /* The row came back: its object is revived at its ID, so a legacy
         * id names one object for good. */
        it->act = ACT_NEW;
        it->fixed = true;
        it->id = it->e.id;
        it->shard = shard_id_shard(it->e.id);
        return 0;
    case LEGACY_LIVE:
        /* An object never moves: a row whose parent changed keeps its
         * object where it is (its ID names the shard). */
        it->id = it->e.id;
        it->act = strcmp(it->e.md5, it->md5) ? ACT_CHANGED : ACT_UNCHANGED;
        return 0;
    case LEGACY_PENDING:
        return shard__fail(SHARD_EINVAL, "lookup %s, key %s: \"%.60s\" was left by an "
                          "interrupted pass of an earlier libshard, whose objects this one "
                          "cannot find: finish that pass with the libshard that began it",
                          r->lookup, it->key, val);
    default:
        return shard__fail(SHARD_EINVAL, "lookup %s, key %s: \"%.60s\" is not an entry "
                          "libshard wrote", r->lookup, it->key, val);
    }
}

int import_classify(import_run *r, import_item *it, size_t n)
{
    char **keys = shard__calloc(n, sizeof *keys), **vals = shard__calloc(n, sizeof *vals);
    import_item **fresh = shard__calloc(n, sizeof *fresh);
    size_t nf = 0;
    int rc = 0;

    if (!keys || !vals || !fresh) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = it[i].key;
    if (!r->empty && (rc = legacy_kv_get_many(r->ctx, r->lookup, keys, n, vals)))
        goto out;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = entry_action(r, &it[i], vals[i]);
    if (rc == 0 && r->o->near_column)
        rc = place_near(r, it, n);
    for (size_t i = 0; i < n; i++)
        if (it[i].act == ACT_NEW && !it[i].fixed)
            fresh[nf++] = &it[i];
    /* After an interrupted pass, a row without an entry may have its
     * object already (written, the entry not yet): find it, wherever the
     * placement put it then, and keep it. */
    if (rc == 0 && r->repair)
        rc = import_find_written(r, fresh, nf);
    for (size_t i = 0; rc == 0 && i < nf; i++)
        if (!fresh[i]->fixed)
            rc = shard_id_make(fresh[i]->shard, r->type, fresh[i]->legacy, &fresh[i]->id);
out:
    for (size_t i = 0; vals && i < n; i++)
        free(vals[i]);
    free(keys);
    free(vals);
    free(fresh);
    return rc;
}
