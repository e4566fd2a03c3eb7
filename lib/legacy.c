/*
 * Legacy ids (libshard-import(7)): an integer id from the database an
 * application had before libshard resolves to the native ID of the object
 * the import made of its row, through a key-value lookup table in the
 * mod-shard space (the map's "legacy" section names it). Etsy's hybrid
 * lookup in libshard's terms: a native ID always has a non-zero type field,
 * a legacy id is below 2^36 and so has none, and the two never collide.
 *
 * Resolutions are cached in the context: once written, an entry never
 * changes (libshard-import(7) names the one exception), so a hot legacy id
 * costs no round trip after its first use.
 */
#include "exec.h"
#include "legacy.h"

#include <mysqld_error.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void (*shard__import_hook)(const char *point);

#define KV_BATCH 1000 /* keys per statement: far below any packet limit */
#define KV_GET_THREADS 4 /* statements of one multi-key read in flight at once */

/* ---- lookup values ------------------------------------------------------ */

void legacy_entry_parse(const char *v, legacy_entry *e)
{
    const char *sp;
    char idtext[24];
    size_t n;

    memset(e, 0, sizeof *e);
    if (!v) {
        e->state = LEGACY_ABSENT;
        return;
    }
    e->state = LEGACY_BAD;
    if (strncmp(v, "pending ", 8) == 0) {
        char *end;
        unsigned long s = strtoul(v + 8, &end, 10);
        if (end != v + 8 && *end == '\0' && s <= SHARD_MAX_SHARD) {
            e->state = LEGACY_PENDING;
            e->shard = (unsigned)s;
        }
        return;
    }
    sp = strchr(v, ' ');
    n = sp ? (size_t)(sp - v) : 0;
    if (!n || n >= sizeof idtext)
        return;
    memcpy(idtext, v, n);
    idtext[n] = '\0';
    if (shard_id_parse(idtext, &e->id) != 0) {
        shard__clear_error();
        return;
    }
    if (strcmp(sp + 1, "deleted") == 0) {
        e->state = LEGACY_DELETED;
    } else if (strlen(sp + 1) == 32 && strspn(sp + 1, "0123456789abcdef") == 32) {
        memcpy(e->md5, sp + 1, 33);
        e->state = LEGACY_LIVE;
    }
}

/* ---- many keys at once ---------------------------------------------------- */

typedef struct kv_slot {
    size_t idx;        /* position in the caller's arrays */
    uint32_t modshard;
    long pair;
    const char *key;
} kv_slot;

static int cmp_kv_slot(const void *a, const void *b)
{
    const kv_slot *x = a, *y = b;
    if (x->pair != y->pair)
        return x->pair < y->pair ? -1 : 1;
    if (x->modshard != y->modshard)
        return x->modshard < y->modshard ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* Slots for n keys, sorted by (pair, mod shard, key), from the current map. */
static int kv_slots(shard_ctx *ctx, const char *table, char *const *keys, size_t n,
                    kv_slot **out)
{
    shard_map *map = ctx_map(ctx);
    shard_md5 *md5 = NULL;
    kv_slot *s = NULL;
    int rc = 0;

    if (!map->mod_count)
        rc = shard__fail(SHARD_EINVAL, "the shard map has no mod_shards section");
    else if (!shard__map_has_mod_table(map, table))
        rc = shard__fail(SHARD_EINVAL, "no key-value table \"%.64s\" in mod_shards.tables of "
                        "map version %llu", table, (unsigned long long)map->version);
    else if (!(s = shard__calloc(n ? n : 1, sizeof *s)))
        rc = shard__fail(SHARD_ENOMEM, "out of memory for %zu lookup keys", n);
    if (rc == 0 && n > 1)
        md5 = shard__md5_new();
    for (size_t i = 0; rc == 0 && i < n; i++) {
        s[i].idx = i;
        s[i].key = keys[i];
        if ((rc = shard__mod_with(md5, keys[i], strlen(keys[i]), map->mod_count,
                                  &s[i].modshard)))
            break;
        s[i].pair = shard__map_mod_pair_index(map, s[i].modshard);
    }
    shard__md5_free(md5);
    shard_map_free(map);
    if (rc) {
        free(s);
        return rc;
    }
    qsort(s, n, sizeof *s, cmp_kv_slot);
    *out = s;
    return 0;
}

typedef struct kv_group {
    const char *table;
    kv_slot *slots; /* this pair's, sorted */
    size_t n;
    char **vals;
    uint64_t *ids; /* instead of vals: the ID an entry names (resolution) */
} kv_group;

/* The ID a lookup value names for a resolution: imported or deleted (the
 * object stays, soft-deleted); 0 when absent, pending or not libshard's. */
static uint64_t entry_id(const char *v, size_t vlen)
{
    char text[80];
    legacy_entry e;

    if (vlen >= sizeof text) /* longer than any entry libshard writes */
        return 0;
    memcpy(text, v, vlen);
    text[vlen] = '\0';
    legacy_entry_parse(text, &e);
    return e.state == LEGACY_LIVE || e.state == LEGACY_DELETED ? e.id : 0;
}

/* Every slot of the run [lo, hi) of one mod shard holding this key. */
static int deliver(kv_group *g, size_t lo, size_t end, const char *k, size_t klen,
                   const char *v, size_t vlen)
{
    size_t hi = end;
    uint64_t id = g->ids ? entry_id(v, vlen) : 0;

    while (lo < hi) { /* binary search for the first equal key */
        size_t mid = lo + (hi - lo) / 2;
        int c = strncmp(g->slots[mid].key, k, klen);
        if (c == 0 && strlen(g->slots[mid].key) > klen)
            c = 1;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < end && strlen(g->slots[i].key) == klen &&
                        memcmp(g->slots[i].key, k, klen) == 0; i++) {
        char **dst;
        if (g->ids) { /* parsed here, in the server's thread: no copy */
            g->ids[g->slots[i].idx] = id;
            continue;
        }
        dst = &g->vals[g->slots[i].idx];
        free(*dst); /* a retried statement answers again */
        *dst = NULL;
        if (copy_out(v, vlen, dst, NULL))
            return SHARD_ENOMEM;
    }
    return 0;
}

/* The import's keys and values are ASCII (ids, checksums, "deleted"): an
 * escaped literal, half a hex literal's size; anything else as hex. */
static void put_text(sqlbuf *q, MYSQL *my, const char *s)
{
    size_t n = strlen(s);

    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) {
            sql_hex(q, s, n);
            return;
        }
    sql_str(q, my, s, n);
}

/* The keys of the mod shard run starting at slots[i] as the rows of a
 * table value constructor, each key once; the index after the run. */
static size_t put_keys(sqlbuf *q, MYSQL *my, const kv_slot *slots, size_t i, size_t to)
{
    uint32_t ms = slots[i].modshard;

    for (bool first = true; i < to && slots[i].modshard == ms; i++) {
        if (!first && strcmp(slots[i].key, slots[i - 1].key) == 0)
            continue;
        sql_add(q, first ? "(" : "),(");
        put_text(q, my, slots[i].key);
        first = false;
    }
    sql_add(q, ")");
    return i;
}

/*
 * One statement for slots [from, to) of the group, into q: a UNION ALL of
 * one join per mod shard, of its keys (a table value constructor, x<N>)
 * with its table by primary key, each row tagged with its mod shard. Not
 * an IN-list: for a list of hundreds of keys the range optimizer's work
 * (each key a range, copied at the key column's full width) cost the
 * server more than the lookups (libshard-import(7)).
 */
static int build_get(const shard_map *map, MYSQL *my, const kv_group *g, size_t from,
                     size_t to, sqlbuf *q)
{
    sql_init(q);
    for (size_t i = from; i < to;) {
        if (shard__map_mod_pair_index(map, g->slots[i].modshard) !=
            shard__map_mod_pair_index(map, g->slots[from].modshard)) {
            sql_free(q);
            return shard__fail(SHARD_EMOVED, "mod shard %u changed pairs",
                              g->slots[i].modshard);
        }
        sql_addf(q, "%sx%u(k) AS (VALUES ", i == from ? "WITH " : ", ", g->slots[i].modshard);
        i = put_keys(q, my, g->slots, i, to);
        sql_add(q, ")");
    }
    for (size_t i = from; i < to;) {
        uint32_t ms = g->slots[i].modshard;
        char db[SHARD_DBNAME_MAX];
        shard__dbfmt_name(&map->mod_dbfmt, ms, db);
        sql_addf(q, "%sSELECT %u, t.k, t.v FROM x%u JOIN ", i == from ? " " : " UNION ALL ",
                 ms, ms);
        sql_table(q, db, g->table);
        sql_addf(q, " t ON t.k = x%u.k", ms);
        while (i < to && g->slots[i].modshard == ms)
            i++;
    }
    int rc = sql_check(q);
    if (rc)
        sql_free(q);
    return rc;
}

/* build_get's answer for slots [from, to), delivered; res freed. */
static int take_get(kv_group *g, MYSQL_RES *res, size_t from, size_t to)
{
    MYSQL_ROW row;
    int rc = 0;

    /* Rows come one mod shard's run after another: its slots are found
     * once per run, not once per row. */
    size_t lo = from, hi = from;
    uint32_t cur = UINT32_MAX;
    while (rc == 0 && (row = mysql_fetch_row(res))) {
        unsigned long *len = mysql_fetch_lengths(res);
        uint32_t ms = (uint32_t)strtoul(row[0], NULL, 10);
        if (ms != cur) {
            for (lo = from; lo < to && g->slots[lo].modshard != ms; lo++)
                ;
            for (hi = lo; hi < to && g->slots[hi].modshard == ms; hi++)
                ;
            cur = ms;
        }
        rc = deliver(g, lo, hi, row[1], len[1], row[2], len[2]);
    }
    mysql_free_result(res);
    return rc;
}

static int get_batch(exec_env *env, kv_group *g, size_t from, size_t to)
{
    MYSQL_RES *res;
    sqlbuf q;
    int rc;

    if ((rc = build_get(env->map, env->conn->my, g, from, to, &q)))
        return rc;
    rc = conn_select(env->conn, &q, &res);
    sql_free(&q);
    return rc ? rc : take_get(g, res, from, to);
}

static int get_fn(exec_env *env, void *arg)
{
    kv_group *g = arg;
    int rc = 0;

    for (size_t from = 0; rc == 0 && from < g->n; from += KV_BATCH)
        rc = get_batch(env, g, from, from + KV_BATCH < g->n ? from + KV_BATCH : g->n);
    return rc;
}

/*
 * The first try of a multi-key read, pipelined (as multi-get's, see
 * lib/multiget.c): every chunk whose pair has an idle pooled connection
 * sent from this thread before any answer is read, so the servers work
 * at once with no thread per server (a thread's creation and join cost
 * about 40 us here, against about 2 ms for 1000 keys). A chunk whose try
 * fails in a way the retry policy retries is left (done false) to
 * ctx_exec, this try counted as a retry; any other failure is final.
 */
typedef struct kv_piped {
    kv_group *g;
    shard_conn *c;
    const char *pair; /* its name, for a final error (the pipeline's map's) */
    double started;
    bool done;
} kv_piped;

static void piped_end(shard_ctx *ctx, kv_piped *p, int rc, int *final, shard_errsave *err)
{
    conn_release(p->c, rc);
    p->c = NULL;
    if (rc && rc != SHARD_ESERVER && error_transient(rc) && ctx->opts.retry_max > 1) {
        stats_add(&ctx->stats.retries);
        return;
    }
    p->done = true;
    stats_call(&ctx->stats, (stats_op)0, p->started, rc);
    if (rc && !*final) {
        *final = rc;
        shard__fail_prefix(rc, "pair %s: ", p->pair); /* as on the threads' path */
        shard__error_save(err, rc);
    }
}

static int kv_pipeline(shard_ctx *ctx, kv_group *chunks, size_t nc, bool *done)
{
    kv_piped *ps = shard__calloc(nc, sizeof *ps);
    shard_conn *cs[CONN_WAIT_MAX];
    size_t wait[CONN_WAIT_MAX];
    shard_map *map = ctx_map(ctx);
    shard_errsave saved, err;
    int final = 0;

    if (!ps) {
        shard_map_free(map);
        return 0; /* the threads' path asks them all */
    }
    shard__error_save(&saved, 0);
    for (size_t i = 0; i < nc && i < CONN_WAIT_MAX; i++) {
        kv_group *g = &chunks[i];
        long pair = shard__map_mod_pair_index(map, g->slots[0].modshard);
        shard_server *srv = pair == g->slots[0].pair ? ctx_server(ctx, map, (size_t)pair) : NULL;
        sqlbuf q;
        int rc;
        ps[i].g = g;
        ps[i].pair = pair >= 0 ? map->pairs[pair].name : "?";
        ps[i].started = now_seconds();
        if (!srv || conn_acquire_idle(srv, &ps[i].c) != 0) {
            ps[i].c = NULL;
            continue;
        }
        if ((rc = build_get(map, ps[i].c->my, g, 0, g->n, &q)) == 0) {
            rc = conn_send(ps[i].c, &q);
            sql_free(&q);
        }
        if (rc)
            piped_end(ctx, &ps[i], rc, &final, &err);
    }
    for (;;) {
        size_t n = 0, k = 0;
        MYSQL_RES *res;
        int rc;
        for (size_t i = 0; i < nc && i < CONN_WAIT_MAX; i++)
            if (ps[i].c) {
                wait[n] = i;
                cs[n++] = ps[i].c;
            }
        if (n == 0)
            break;
        rc = conn_wait_any(cs, n, &k);
        kv_piped *p = &ps[wait[k]];
        if (rc == 0 && (rc = conn_read_result(p->c, &res)) == 0)
            rc = take_get(p->g, res, 0, p->g->n);
        piped_end(ctx, p, rc, &final, &err);
    }
    for (size_t i = 0; i < nc; i++)
        done[i] = ps[i].done;
    free(ps);
    shard_map_free(map);
    shard__error_restore(&saved);
    return final ? shard__error_restore(&err) : 0;
}

typedef struct kv_job {
    shard_ctx *ctx;
    kv_group *groups;
    char *const *vals; /* put: the values */
    bool remove;
} kv_job;

static int get_group(void *arg, size_t i, unsigned worker)
{
    kv_job *j = arg;
    (void)worker;
    return ctx_exec(j->ctx, j->groups[i].slots[0].modshard, EXEC_MOD, get_fn, &j->groups[i]);
}

/*
 * The keys' slots (kv_slots) cut into groups of one pair each (by_pair) or
 * of one mod shard each: *slots and *groups are the caller's to free.
 */
static int kv_groups(shard_ctx *ctx, const char *table, char *const *keys, size_t n,
                     bool by_pair, char **vals, uint64_t *ids, kv_slot **slots,
                     kv_group **groups, size_t *ng)
{
    int rc;

    *ng = 0;
    if ((rc = kv_slots(ctx, table, keys, n, slots)))
        return rc;
    if (!(*groups = shard__calloc(n, sizeof **groups))) {
        free(*slots);
        return shard__fail(SHARD_ENOMEM, "out of memory for %zu lookup keys", n);
    }
    for (size_t i = 0; i < n;) {
        kv_slot *sl = *slots;
        size_t k = i;
        while (k < n && (by_pair ? sl[k].pair == sl[i].pair
                                 : sl[k].modshard == sl[i].modshard))
            k++;
        (*groups)[(*ng)++] = (kv_group){table, sl + i, k - i, vals, ids};
        i = k;
    }
    return 0;
}

/* legacy_kv_get_many, the values into vals, or (vals NULL) the IDs they
 * name into ids (entry_id). */
static int kv_get(shard_ctx *ctx, const char *table, char *const *keys, size_t n, char **vals,
                  uint64_t *ids)
{
    kv_slot *slots;
    kv_group *groups;
    size_t ng = 0;
    int rc;

    for (size_t i = 0; i < n; i++) {
        if (vals)
            vals[i] = NULL;
        else
            ids[i] = 0;
    }
    if (n == 0)
        return 0;
    if ((rc = kv_groups(ctx, table, keys, n, true, vals, ids, &slots, &groups, &ng)))
        return rc;
    /* Every server at once, and a server's statements of KV_BATCH keys
     * each (many keys: an import's batch) at once too. */
    size_t nc = 0;
    kv_group *chunks = shard__calloc(n / KV_BATCH + ng + 1, sizeof *chunks);
    if (!chunks) {
        free(groups);
        free(slots);
        return shard__fail(SHARD_ENOMEM, "out of memory for %zu lookup keys", n);
    }
    for (size_t from = 0; from < n; from += KV_BATCH) /* the servers' in turn */
        for (size_t g = 0; g < ng; g++) {
            if (from >= groups[g].n)
                continue;
            chunks[nc] = groups[g];
            chunks[nc].slots += from;
            chunks[nc++].n = groups[g].n - from < KV_BATCH ? groups[g].n - from : KV_BATCH;
        }
    /* The chunks whose pipelined try did not settle them, through ctx_exec
     * (its retry policy), KV_GET_THREADS at a time. */
    bool *done = nc > 1 ? shard__calloc(nc, sizeof *done) : NULL;
    size_t left = nc;
    if (done && (rc = kv_pipeline(ctx, chunks, nc, done)) == 0) {
        left = 0;
        for (size_t i = 0; i < nc; i++)
            if (!done[i])
                chunks[left++] = chunks[i];
    }
    free(done);
    kv_job j = {ctx, chunks, NULL, false};
    if (rc == 0 && left)
        rc = fanout_run(left, (unsigned)(left < KV_GET_THREADS ? left : KV_GET_THREADS),
                        get_group, &j);
    free(chunks);
    free(groups);
    free(slots);
    for (size_t i = 0; rc && i < n; i++) {
        if (vals) {
            free(vals[i]);
            vals[i] = NULL;
        } else {
            ids[i] = 0;
        }
    }
    return rc;
}

int legacy_kv_get_many(shard_ctx *ctx, const char *table, char *const *keys, size_t n,
                       char **vals)
{
    return kv_get(ctx, table, keys, n, vals, NULL);
}

/* ---- writes, one multi-row statement per mod shard -------------------------- */

typedef struct put_arg {
    kv_job *j;
    kv_group *g;
} put_arg;

static int put_fn(exec_env *env, void *arg)
{
    kv_job *j = ((put_arg *)arg)->j;
    kv_group *g = ((put_arg *)arg)->g;
    sqlbuf q;
    int rc = 0;

    sql_init(&q);
    for (size_t from = 0; rc == 0 && from < g->n; from += KV_BATCH) {
        size_t to = from + KV_BATCH < g->n ? from + KV_BATCH : g->n;
        sql_reset(&q);
        sql_add(&q, j->remove ? "DELETE FROM " : "INSERT INTO ");
        sql_table(&q, env->db, g->table);
        sql_add(&q, j->remove ? " WHERE k IN (" : " (k, v) VALUES ");
        for (size_t i = from; i < to; i++) {
            const kv_slot *s = &g->slots[i];
            sql_add(&q, i == from ? "" : ",");
            if (j->remove) {
                sql_hex(&q, s->key, strlen(s->key));
                continue;
            }
            sql_add(&q, "(");
            put_text(&q, env->conn->my, s->key);
            sql_add(&q, ",");
            put_text(&q, env->conn->my, j->vals[s->idx]);
            sql_add(&q, ")");
        }
        /* Upserts and deletes are idempotent: a retry after a lost
         * connection writes the same thing again. */
        sql_add(&q, j->remove ? ")" : " ON DUPLICATE KEY UPDATE v = VALUES(v)");
        if ((rc = sql_check(&q)) == 0 && (rc = conn_fits(env->conn, q.len)) == 0)
            rc = legacy_bulk_query(env->conn, &q);
    }
    sql_free(&q);
    return rc;
}

int legacy_bulk_query(shard_conn *c, const sqlbuf *q)
{
    sqlbuf b;
    int rc;

    sql_init(&b);
    sql_add(&b, LEGACY_BULK_WRITE);
    sql_add(&b, q->s); /* escaped literals: no NUL byte inside */
    if ((rc = sql_check(&b)) == 0)
        rc = conn_query(c, &b);
    sql_free(&b);
    if (rc == SHARD_EPRIV && c->last_errno == ER_SPECIFIC_ACCESS_DENIED_ERROR) {
        shard__clear_error();
        rc = conn_query(c, q);
    }
    return rc;
}

static int put_group(void *arg, size_t i, unsigned worker)
{
    kv_job *j = arg;
    put_arg pa = {j, &j->groups[i]};
    (void)worker;
    return ctx_exec(j->ctx, j->groups[i].slots[0].modshard, EXEC_MOD, put_fn, &pa);
}

static int write_many(shard_ctx *ctx, const char *table, char *const *keys,
                      char *const *vals, size_t n, unsigned threads, bool remove)
{
    kv_slot *slots;
    kv_group *groups;
    size_t ng = 0;
    int rc;

    if (n == 0)
        return 0;
    if ((rc = kv_groups(ctx, table, keys, n, false, NULL, NULL, &slots, &groups, &ng)))
        return rc;
    kv_job j = {ctx, groups, vals, remove};
    rc = fanout_run(ng, threads, put_group, &j);
    free(groups);
    free(slots);
    return rc;
}

int legacy_kv_put_many(shard_ctx *ctx, const char *table, char *const *keys,
                       char *const *vals, size_t n, unsigned threads)
{
    return write_many(ctx, table, keys, vals, n, threads, false);
}

int legacy_kv_delete_many(shard_ctx *ctx, const char *table, char *const *keys, size_t n,
                          unsigned threads)
{
    return write_many(ctx, table, keys, NULL, n, threads, true);
}

/* ---- scan ------------------------------------------------------------------ */

typedef struct scan_args {
    const char *table;
    char *after;       /* last key seen; NULL: from the start */
    MYSQL_RES *res;
} scan_args;

static int scan_fn(exec_env *env, void *arg)
{
    scan_args *a = arg;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT k, v FROM ");
    sql_table(&q, env->db, a->table);
    if (a->after) {
        sql_add(&q, " WHERE k > ");
        sql_hex(&q, a->after, strlen(a->after));
    }
    sql_addf(&q, " ORDER BY k LIMIT %d", KV_BATCH);
    rc = sql_check(&q);
    if (rc == 0)
        rc = conn_select(env->conn, &q, &a->res);
    sql_free(&q);
    return rc;
}

static void free_strings(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i]);
}

int legacy_kv_scan(shard_ctx *ctx, const char *table, legacy_scan_fn fn, void *payload)
{
    shard_map *map = ctx_map(ctx);
    uint32_t count = map->mod_count;
    bool known = shard__map_has_mod_table(map, table);
    char **keys = NULL, **vals = NULL;
    int rc = 0;

    shard_map_free(map);
    if (!count || !known)
        return shard__fail(SHARD_EINVAL, "no key-value table \"%.64s\" in mod_shards.tables",
                          table);
    keys = shard__calloc(KV_BATCH, sizeof *keys);
    vals = shard__calloc(KV_BATCH, sizeof *vals);
    if (!keys || !vals)
        rc = shard__fail(SHARD_ENOMEM, "out of memory scanning %s", table);
    for (uint32_t ms = 0; rc == 0 && ms < count; ms++) {
        scan_args a = {table, NULL, NULL};
        for (;;) {
            MYSQL_ROW row;
            size_t n = 0;
            if ((rc = ctx_exec(ctx, ms, EXEC_MOD, scan_fn, &a)))
                break;
            while (rc == 0 && (row = mysql_fetch_row(a.res))) {
                unsigned long *len = mysql_fetch_lengths(a.res);
                if ((rc = copy_out(row[0], len[0], &keys[n], NULL)) == 0 &&
                    (rc = copy_out(row[1], len[1], &vals[n], NULL)) != 0)
                    free(keys[n]);
                n += rc == 0;
            }
            mysql_free_result(a.res);
            a.res = NULL;
            free(a.after);
            a.after = NULL;
            if (rc == 0 && n)
                rc = fn(payload, n, keys, vals);
            if (rc == 0 && n == KV_BATCH && !(a.after = shard__strdup(keys[n - 1])))
                rc = shard__fail(SHARD_ENOMEM, "out of memory scanning %s", table);
            free_strings(keys, n);
            free_strings(vals, n);
            if (rc || n < KV_BATCH)
                break;
        }
        free(a.after);
    }
    free(keys);
    free(vals);
    return rc;
}

/* ---- counting -------------------------------------------------------------- */

typedef struct count_job {
    shard_ctx *ctx;
    const char *table;
    const char *where;
    uint64_t *counts; /* per mod shard */
} count_job;

typedef struct count_arg {
    count_job *j;
    uint32_t ms;
} count_arg;

static int count_fn(exec_env *env, void *arg)
{
    count_arg *a = arg;
    char out[32];
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT COUNT(*) FROM ");
    sql_table(&q, env->db, a->j->table);
    sql_add(&q, a->j->where);
    if ((rc = sql_check(&q)) == 0)
        rc = conn_value(env->conn, q.s, out, sizeof out);
    sql_free(&q);
    if (rc == 0)
        a->j->counts[a->ms] = strtoull(out, NULL, 10);
    return rc;
}

static int count_one(void *arg, size_t i, unsigned worker)
{
    count_job *j = arg;
    count_arg a = {j, (uint32_t)i};
    (void)worker;
    return ctx_exec(j->ctx, (unsigned)i, EXEC_MOD, count_fn, &a);
}

int legacy_kv_count(shard_ctx *ctx, const char *table, const char *where, unsigned threads,
                    uint64_t *n)
{
    shard_map *map = ctx_map(ctx);
    uint32_t count = map->mod_count;
    bool known = shard__map_has_mod_table(map, table);
    count_job j = {ctx, table, where, NULL};
    int rc;

    shard_map_free(map);
    *n = 0;
    if (!count || !known)
        return shard__fail(SHARD_EINVAL, "no key-value table \"%.64s\" in mod_shards.tables",
                          table);
    if (!(j.counts = shard__calloc(count, sizeof *j.counts)))
        return shard__fail(SHARD_ENOMEM, "out of memory");
    if ((rc = fanout_run(count, threads, count_one, &j)) == 0)
        for (uint32_t ms = 0; ms < count; ms++)
            *n += j.counts[ms];
    free(j.counts);
    return rc;
}

/* ---- the resolution cache ----------------------------------------------------- */

/* 16384 sets of 4: at most 65536 resolutions, about 1.5 MB per context,
 * least recently used replaced within a set. */
#define LC_SETS 16384
#define LC_WAYS 4
#define LC_LOCKS 64

typedef struct lc_entry {
    uint64_t legacy, id; /* id 0: empty */
    unsigned type;
} lc_entry;

struct legacy_cache {
    pthread_mutex_t locks[LC_LOCKS];
    lc_entry sets[LC_SETS][LC_WAYS]; /* way 0 is the most recently used */
};

static void *cache_make(void)
{
    struct legacy_cache *c = shard__calloc(1, sizeof *c);

    if (!c)
        return NULL; /* no cache: every resolution asks the server */
    for (int i = 0; i < LC_LOCKS; i++)
        pthread_mutex_init(&c->locks[i], NULL);
    return c;
}

static void cache_free(void *p)
{
    struct legacy_cache *c = p;

    if (!c)
        return;
    for (int i = 0; i < LC_LOCKS; i++)
        pthread_mutex_destroy(&c->locks[i]);
    free(c);
}

/* The context's resolution cache, registered with it on first use. */
static struct legacy_cache *cache_of(shard_ctx *ctx)
{
    return ctx_cache(ctx, cache_make, cache_free);
}

static size_t cache_set(unsigned type, uint64_t legacy)
{
    uint64_t h = (legacy ^ ((uint64_t)type << 40)) * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 40) % LC_SETS;
}

static uint64_t cache_get(struct legacy_cache *c, unsigned type, uint64_t legacy)
{
    size_t s = cache_set(type, legacy);
    pthread_mutex_t *lock = &c->locks[s % LC_LOCKS];
    lc_entry *set = c->sets[s];
    uint64_t id = 0;

    pthread_mutex_lock(lock);
    for (int w = 0; w < LC_WAYS; w++)
        if (set[w].id && set[w].legacy == legacy && set[w].type == type) {
            lc_entry hit = set[w];
            memmove(&set[1], &set[0], (size_t)w * sizeof *set);
            set[0] = hit;
            id = hit.id;
            break;
        }
    pthread_mutex_unlock(lock);
    return id;
}

void legacy_cache_put(shard_ctx *ctx, unsigned type, uint64_t legacy, uint64_t id)
{
    struct legacy_cache *c = cache_of(ctx);
    size_t s = cache_set(type, legacy);
    lc_entry *set;
    int w;

    if (!c)
        return;
    set = c->sets[s];
    pthread_mutex_lock(&c->locks[s % LC_LOCKS]);
    for (w = 0; w < LC_WAYS - 1; w++) /* an entry already there moves up */
        if (set[w].id && set[w].legacy == legacy && set[w].type == type)
            break;
    memmove(&set[1], &set[0], (size_t)w * sizeof *set);
    set[0] = (lc_entry){legacy, id, type};
    pthread_mutex_unlock(&c->locks[s % LC_LOCKS]);
}

/* ---- resolution -------------------------------------------------------------- */

int shard_legacy_resolve_many(shard_ctx *ctx, unsigned type, const uint64_t *legacy,
                              size_t n, uint64_t *ids)
{
    struct legacy_cache *c;
    const shard_legacydef *def;
    shard_map *map;
    char table[SHARD_DBNAME_MAX];
    char **keys = NULL, *text = NULL;
    uint64_t *found = NULL;
    size_t *pos = NULL, nmiss = 0;
    int rc = 0;

    if (!ctx || (n && (!legacy || !ids)))
        return shard__fail(SHARD_EINVAL, "shard_legacy_resolve_many: NULL argument");
    for (size_t i = 0; i < n; i++)
        ids[i] = 0;
    map = ctx_map(ctx);
    def = map_legacy_of_type(map, type);
    if (!def) {
        const char *name = type <= SHARD_MAX_TYPE ? map->type_names[type] : NULL;
        rc = name ? shard__fail(SHARD_EINVAL, "object type %s has no legacy lookup: the "
                               "map's \"legacy\" section does not name it", name)
                  : shard__fail(SHARD_EINVAL, "object type %u is not registered in map "
                               "version %llu", type, (unsigned long long)map->version);
        shard_map_free(map);
        return rc;
    }
    snprintf(table, sizeof table, "%s", def->table);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint64_t x = legacy[i];
        if (shard_id_valid(x) && shard_id_type(x) != type)
            rc = shard__fail(SHARD_EINVAL, "ID %" PRIu64 " is of type %u, not %s", x,
                            shard_id_type(x), def->name);
        else if (!shard_id_valid(x) && (x < 1 || x > SHARD_MAX_LOCAL))
            rc = shard__fail(SHARD_EINVAL, "%" PRIu64 " is neither a libshard ID nor a "
                            "legacy id (legacy ids are 1..2^36-1)", x);
    }
    shard_map_free(map);
    if (rc)
        return rc;
    c = cache_of(ctx);
    /* Native IDs pass through; cached legacy ids are answered here. */
    for (size_t i = 0; i < n; i++) {
        if (shard_id_valid(legacy[i]))
            ids[i] = legacy[i];
        else if (c && (ids[i] = cache_get(c, type, legacy[i])) != 0)
            ;
        else
            nmiss++;
    }
    if (!nmiss)
        return 0;
    /* The keys in one block; the entries parsed where they arrive (kv_get
     * with ids): no allocation per id. */
    keys = shard__calloc(nmiss, sizeof *keys);
    text = shard__malloc(nmiss * 24);
    found = shard__calloc(nmiss, sizeof *found);
    pos = shard__calloc(nmiss, sizeof *pos);
    if (!keys || !text || !found || !pos) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory resolving %zu legacy ids", n);
        goto out;
    }
    nmiss = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i])
            continue;
        keys[nmiss] = text + nmiss * 24;
        snprintf(keys[nmiss], 24, "%" PRIu64, legacy[i]);
        pos[nmiss++] = i;
    }
    if ((rc = kv_get(ctx, table, keys, nmiss, NULL, found)))
        goto out;
    for (size_t k = 0; k < nmiss; k++) {
        if (!found[k])
            continue; /* absent or pending: not (yet) imported */
        ids[pos[k]] = found[k];
        legacy_cache_put(ctx, type, legacy[pos[k]], found[k]);
    }
out:
    free(keys);
    free(text);
    free(found);
    free(pos);
    if (rc)
        for (size_t i = 0; i < n; i++)
            ids[i] = 0;
    return rc;
}

int shard_legacy_resolve(shard_ctx *ctx, unsigned type, uint64_t legacy_id, uint64_t *id)
{
    uint64_t out;
    int rc;

    if (!id)
        return shard__fail(SHARD_EINVAL, "shard_legacy_resolve: NULL argument");
    if ((rc = shard_legacy_resolve_many(ctx, type, &legacy_id, 1, &out)))
        return rc;
    if (!out) {
        shard_map *map = ctx_map(ctx);
        rc = shard__fail(SHARD_ENOTFOUND, "no %s with legacy id %" PRIu64 " has been imported",
                        map->type_names[type], legacy_id);
        shard_map_free(map);
        return rc;
    }
    *id = out;
    return 0;
}
