/*
 * Multi-get: IDs grouped by server, one statement per server covering all
 * of its shards (UNION ALL of one IN-list per shard table), every server
 * asked concurrently (from one thread where the pool has a connection
 * ready, see pipeline()), answers put back in the input's order.
 */
#include "object.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MGET_BATCH 1000 /* IDs per statement: keeps statements far below any packet limit */

typedef struct slot {
    uint64_t id;
    size_t idx;   /* position in the input */
    long pair;    /* pair index in the map snapshot */
} slot;

typedef struct group {
    shard_ctx *ctx;
    const shard_map *map;
    long pair;
    slot *slots;  /* sorted by id */
    size_t n;
    shard_item *items;
    int rc;
    shard_errsave err; /* the failure's message, when rc */
    double deadline;   /* the group's retry budget ends (monotonic seconds) */
    bool reloaded;     /* the map was reloaded after a pair did not answer */
    bool fenced;       /* a shard of it was fenced: fenced_shard, the last */
    unsigned fenced_shard;
    /* pipeline's try: */
    bool done;         /* answered */
    shard_conn *pc;    /* its idle pooled connection, while it tries */
    size_t from;       /* its next statement starts at slots[from] */
    unsigned *shards;  /* the statement's shards (room for n) */
    size_t nshards;
    double until;      /* build_batch's lease end */
} group;

/* Where a round found a fence, for the wait that follows (exec_wait_fence). */
typedef struct fence_seen {
    shard_server *srv; /* NULL: none */
    char db[SHARD_DBNAME_MAX];
} fence_seen;

static int cmp_slot(const void *a, const void *b)
{
    const slot *x = a, *y = b;
    if (x->pair != y->pair)
        return x->pair < y->pair ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_uint(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

static int cmp_id_key(const void *key, const void *elem)
{
    uint64_t k = *(const uint64_t *)key, id = ((const slot *)elem)->id;
    return k < id ? -1 : k > id;
}

/*
 * One statement for slots[from..to): SELECT shard, type, local_id, data for
 * each (shard, type) run, then the fence rows of every shard in it, in the
 * same statement so that no row is read from a fenced shard: a fence row
 * has type 0 (no object type is 0) and, first, the 1-based position of its
 * shard in shards[] (*nshards of them, ascending).
 */
static void build_batch(const group *g, size_t from, size_t to, sqlbuf *q, unsigned *shards,
                        size_t *nshards, bool lease, double *until)
{
    /* Slots are sorted by id, so equal (shard, type) runs are contiguous. */
    size_t i = from, nchecked = 0;
    bool first_part = true;
    unsigned checked[MGET_BATCH];

    *nshards = 0;
    *until = 0;
    while (i < to) {
        uint64_t id = g->slots[i].id;
        unsigned shard = shard_id_shard(id), type = shard_id_type(id);
        char db[SHARD_DBNAME_MAX];
        uint64_t prev = 0;

        if (!*nshards || shards[*nshards - 1] != shard) {
            double end = 0;
            shards[(*nshards)++] = shard;
            /* The one rule (exec_fence_skip): a shard's fence row is read
             * unless the lease lets this shard skip it. */
            if (lease && exec_fence_skip(g->ctx, g->map, shard, &end))
                *until = end;
            else
                checked[nchecked++] = shard;
        }
        shard__dbfmt_name(&g->map->dbfmt, shard, db);
        sql_add(q, first_part ? "" : " UNION ALL ");
        sql_addf(q, "SELECT %u, %u, local_id, data FROM ", shard, type);
        sql_table(q, db, g->map->type_names[type]);
        sql_add(q, " WHERE local_id IN (");
        for (bool first = true; i < to && shard_id_shard(g->slots[i].id) == shard &&
                                shard_id_type(g->slots[i].id) == type; i++) {
            if (!first && g->slots[i].id == prev)
                continue; /* duplicates in the input are asked once */
            if (!first)
                sql_add(q, ",");
            sql_u64(q, shard_id_local(g->slots[i].id));
            prev = g->slots[i].id;
            first = false;
        }
        sql_add(q, ")");
        first_part = false;
    }
    for (int part = 0; part < 2 && nchecked; part++) {
        /* FIELD(db, 'a', 'b') names the position in shards[] (every shard is
         * named, checked or not); db IN ('a', 'b') finds the rows of the
         * shards checked. */
        size_t n = part == 0 ? *nshards : nchecked;
        sql_add(q, part == 0 ? " UNION ALL SELECT FIELD(db" : ", 0, 0, NULL FROM "
                FENCE_TABLE " WHERE fenced <> 0 AND db IN (");
        for (size_t k = 0; k < n; k++) {
            char db[SHARD_DBNAME_MAX];
            shard__dbfmt_name(&g->map->dbfmt, part == 0 ? shards[k] : checked[k], db);
            sql_add(q, part == 0 || k ? ", '" : "'");
            sql_add(q, db);
            sql_add(q, "'");
        }
        sql_add(q, part == 0 ? ")" : ")");
    }
}

/* Items of a fenced shard are left for the next round (after the new map). */
static void leave_fenced(group *g, size_t from, size_t to, unsigned shard)
{
    for (size_t i = from; i < to; i++) {
        shard_item *it = &g->items[g->slots[i].idx];
        if (shard_id_shard(g->slots[i].id) != shard)
            continue;
        free(it->data);
        it->data = NULL;
        it->len = 0;
        it->status = SHARD_EMOVED;
    }
}

/* Fill every input position holding this id. */
static int deliver(group *g, uint64_t id, const char *data, size_t len)
{
    slot *s = bsearch(&id, g->slots, g->n, sizeof *g->slots, cmp_id_key);
    if (!s)
        return 0;
    while (s > g->slots && (s - 1)->id == id)
        s--;
    for (; s < g->slots + g->n && s->id == id; s++) {
        shard_item *it = &g->items[s->idx];
        /* Already answered: a duplicate ID asked again by the next
         * statement of the group, or by a retry of the group. */
        if (it->data || object_deleted(data, len))
            continue;
        if (copy_out(data, len, &it->data, &it->len))
            return SHARD_ENOMEM;
        it->status = 0;
    }
    return 0;
}

/*
 * The answer to build_batch's statement for slots[from..to), whose shards
 * it listed in shards[]: rows delivered, those of a fenced shard left for
 * the next round. Frees res.
 */
static int take_answer(group *g, MYSQL_RES *res, size_t from, size_t to, const unsigned *shards,
                       size_t nshards)
{
    bool fenced[MGET_BATCH] = {false};
    MYSQL_ROW row;
    bool any = false;
    int rc = 0;

    /* The fence rows first (wherever they come in the result), so that no
     * row of a fenced shard is delivered. */
    while ((row = mysql_fetch_row(res))) {
        unsigned long k = strtoul(row[0], NULL, 10);
        if (strcmp(row[1], "0") == 0 && k >= 1 && k <= nshards)
            any = fenced[k - 1] = true;
    }
    mysql_data_seek(res, 0);
    while (rc == 0 && (row = mysql_fetch_row(res))) {
        unsigned long *lens = mysql_fetch_lengths(res);
        unsigned shard = (unsigned)strtoul(row[0], NULL, 10);
        const unsigned *at;
        uint64_t id;
        if (strcmp(row[1], "0") == 0)
            continue;
        at = bsearch(&shard, shards, nshards, sizeof *shards, cmp_uint);
        if (at && fenced[at - shards])
            continue;
        if (shard_id_make(shard, (unsigned)strtoul(row[1], NULL, 10),
                          strtoull(row[2], NULL, 10), &id) == 0)
            rc = deliver(g, id, row[3], lens[3]);
    }
    mysql_free_result(res);
    for (size_t k = 0; rc == 0 && any && k < nshards; k++)
        if (fenced[k]) {
            leave_fenced(g, from, to, shards[k]);
            g->fenced = true;
            g->fenced_shard = shards[k];
        }
    return rc;
}

static int run_batch(group *g, shard_conn *c, size_t from, size_t to)
{
    unsigned shards[MGET_BATCH];
    size_t nshards = 0;
    MYSQL_RES *res;
    double until = 0;
    sqlbuf q;
    int rc;

    for (bool lease = true;; lease = false) {
        sql_init(&q);
        build_batch(g, from, to, &q, shards, &nshards, lease, &until);
        rc = conn_select(c, &q, &res);
        sql_free(&q);
        if (rc)
            return rc;
        /* A shard that skipped its fence row counts only if the answer came
         * within the lease: else ask again, checking every shard. */
        if (!until || now_seconds() < until)
            break;
        mysql_free_result(res);
    }
    return take_answer(g, res, from, to, shards, nshards);
}

/*
 * The pipeline: the first try of every group that found an idle pooled
 * connection, from one thread. Each group's statement is sent before any
 * answer is read, so the servers work on theirs at once, without a thread
 * per server (creating and joining one costs about 40 us here, against
 * 2-3 ms for 1000 IDs on four servers). A try that fails, or whose lease
 * ended before its answer, leaves the group to the retrying path (done
 * false), as its first attempt: a failure the retry policy would not retry
 * is the group's outcome, except a server error (a missing table), which
 * the retrying path examines for a moved shard.
 */
static void piped_failed(group *g, int rc)
{
    shard_conn *c = g->pc;

    g->pc = NULL;
    conn_release(c, rc);
    if (rc != SHARD_ESERVER && (!error_transient(rc) || g->ctx->opts.retry_max <= 1)) {
        g->rc = rc;
        g->done = true;
        shard__fail_prefix(rc, "pair %s: ", g->map->pairs[g->pair].name);
        shard__error_save(&g->err, rc);
    } else {
        stats_add(&g->ctx->stats.retries);
    }
}

/* Sends the group's next statement (from g->from). */
static void piped_send(group *g)
{
    size_t to = g->from + MGET_BATCH < g->n ? g->from + MGET_BATCH : g->n;
    sqlbuf q;
    int rc;

    sql_init(&q);
    build_batch(g, g->from, to, &q, g->shards, &g->nshards, true, &g->until);
    rc = conn_send(g->pc, &q);
    sql_free(&q);
    if (rc)
        piped_failed(g, rc);
}

/* Reads the answer to piped_send's statement; done once all are read. */
static void piped_read(group *g)
{
    size_t to = g->from + MGET_BATCH < g->n ? g->from + MGET_BATCH : g->n;
    MYSQL_RES *res;
    int rc;

    if ((rc = conn_read_result(g->pc, &res)) != 0) {
        piped_failed(g, rc);
        return;
    }
    /* A shard that skipped its fence row counts only if the answer came
     * within the lease: else the retrying path asks again. */
    if (g->until && now_seconds() >= g->until) {
        mysql_free_result(res);
        rc = SHARD_EBUSY;
    } else if ((rc = take_answer(g, res, g->from, to, g->shards, g->nshards)) == 0 &&
               (g->from = to) < g->n) {
        return; /* its next statement goes out at once (pipeline) */
    }
    g->done = rc == 0;
    conn_release(g->pc, rc);
    g->pc = NULL;
}

/* Every group holding a connection (g->pc): each one's statement sent,
 * then the answers read as they arrive, each group's next statement sent
 * as soon as its answer is in. */
static void pipeline(group **piped, size_t np)
{
    shard_conn *cs[CONN_WAIT_MAX];
    group *wait[CONN_WAIT_MAX];
    shard_errsave saved;

    shard__error_save(&saved, 0);
    for (size_t i = 0; i < np; i++)
        if (piped[i]->pc)
            piped_send(piped[i]);
    for (;;) {
        size_t n = 0, k = 0;
        int rc;
        for (size_t i = 0; i < np && n < CONN_WAIT_MAX; i++)
            if (piped[i]->pc) {
                wait[n] = piped[i];
                cs[n++] = piped[i]->pc;
            }
        if (n == 0)
            break;
        if ((rc = conn_wait_any(cs, n, &k)) != 0) {
            piped_failed(wait[k], rc);
            continue;
        }
        piped_read(wait[k]);
        if (wait[k]->pc)
            piped_send(wait[k]);
    }
    shard__error_restore(&saved);
}

static int group_once(group *g)
{
    shard_server *srv = ctx_server(g->ctx, g->map, (size_t)g->pair);
    shard_conn *c;
    int rc;

    if (!srv)
        return shard__fail(SHARD_ENOMEM, "out of memory");
    if ((rc = conn_get(g->ctx, srv, &c)))
        return rc;
    for (size_t from = 0; rc == 0 && from < g->n; from += MGET_BATCH)
        rc = run_batch(g, c, from, from + MGET_BATCH < g->n ? from + MGET_BATCH : g->n);
    /* A missing table: did one of this group's shards move? */
    for (size_t i = 0; rc == SHARD_ESERVER && i < g->n; i++) {
        unsigned shard = shard_id_shard(g->slots[i].id);
        char db[SHARD_DBNAME_MAX];
        if (i && shard == shard_id_shard(g->slots[i - 1].id))
            continue;
        shard__dbfmt_name(&g->map->dbfmt, shard, db);
        rc = ctx_check_moved(g->ctx, c, db, shard, false, g->map->pairs[g->pair].name, rc,
                             g->deadline);
    }
    conn_release(c, rc);
    return rc;
}

/* Whether the context's map is newer than the snapshot the group uses. */
static bool map_changed(const group *g)
{
    return ctx_map_version(g->ctx) != g->map->version;
}

/* Reads are idempotent: retry transient failures within the budget. A
 * master that cannot be reached may have been replaced by a failover: the
 * map is reloaded once, and when it changed the group stops, for the next
 * round to ask the pair's new master. Moved shards are left to the next
 * round too. Always 0: the outcome is the group's. */
static int group_try(void *arg, double deadline)
{
    group *g = arg;

    g->deadline = deadline;
    return g->rc = group_once(g);
}

/* A moved shard waits for the round's map (not a retry here); a pair that
 * does not answer reloads the map once, and one that a failover replaced
 * is asked on the next round. */
static bool group_between(void *arg, int rc, double deadline)
{
    group *g = arg;

    if (rc == SHARD_EMOVED)
        return false;
    if (rc == SHARD_ECONNECT && !g->reloaded) {
        g->reloaded = true;
        exec_reload(g->ctx, 0, false, deadline); /* a hung store: no longer than that */
    }
    return !(rc == SHARD_ECONNECT && map_changed(g));
}

static int group_run(void *arg, size_t i, unsigned worker)
{
    group *g = ((group **)arg)[i];

    (void)worker;
    g->rc = exec_retry(g->ctx, group_try, group_between, g);
    if (g->rc) {
        shard__fail_prefix(g->rc, "pair %s: ", g->map->pairs[g->pair].name);
        shard__error_save(&g->err, g->rc);
    }
    return 0;
}

/* The pipelined groups (piped: on one thread) and the others (left: a
 * thread each), all at once; the first job on this thread. */
typedef struct jobs {
    group **piped;
    size_t np;
    group **left;
    size_t nleft;
} jobs;

static int job_run(void *arg, size_t i, unsigned worker)
{
    jobs *j = arg;

    if (j->np && i-- == 0) {
        pipeline(j->piped, j->np);
        return 0;
    }
    return group_run(j->left, i, worker);
}

static void run_jobs(jobs *j)
{
    size_t n = j->nleft + (j->np > 0);

    fanout_run(n, (unsigned)n, job_run, j);
}

/* Items still pending (status SHARD_EMOVED) are asked again; returns how many. */
static int mget_round(shard_ctx *ctx, const uint64_t *ids, size_t n, shard_item *items,
                      size_t *pending, uint64_t *version, fence_seen *fs)
{
    shard_map *map = ctx_map(ctx);
    slot *slots = shard__calloc(n, sizeof *slots);
    group *groups = NULL, **left = NULL, **piped;
    unsigned *shardbuf = NULL;
    size_t ns = 0, ng = 0, nleft = 0, np = 0;
    const shard_errsave *first = NULL;

    if (!slots) {
        shard_map_free(map);
        return shard__fail(SHARD_ENOMEM, "out of memory for a %zu-ID multi-get", n);
    }
    *version = map->version;
    for (size_t i = 0; i < n; i++) {
        const char *table = NULL;
        long pi;
        if (items[i].status != SHARD_EMOVED)
            continue;
        if (object_check_id(map, ids[i], &table)) {
            items[i].status = SHARD_EINVAL;
            continue;
        }
        pi = shard__map_pair_index(map, shard_id_shard(ids[i]));
        if (pi < 0) {
            items[i].status = SHARD_ENOSHARD;
            if (!shard_errmsg()[0])
                shard__fail(SHARD_EPARTIAL, "ID %llu: shard %u is not in any range of map "
                           "version %llu", (unsigned long long)ids[i],
                           shard_id_shard(ids[i]), (unsigned long long)map->version);
            continue;
        }
        items[i].status = SHARD_ENOTFOUND;
        slots[ns++] = (slot){ids[i], i, pi};
    }
    qsort(slots, ns, sizeof *slots, cmp_slot);
    groups = shard__calloc(map->npairs ? map->npairs : 1, sizeof *groups);
    left = shard__calloc(map->npairs ? 2 * map->npairs : 2, sizeof *left);
    shardbuf = shard__calloc(ns ? ns : 1, sizeof *shardbuf);
    if (!groups || !left || !shardbuf) {
        free(shardbuf);
        free(left);
        free(groups);
        free(slots);
        shard_map_free(map);
        return shard__fail(SHARD_ENOMEM, "out of memory for a %zu-ID multi-get", n);
    }
    for (size_t i = 0; i < ns;) {
        group *g = &groups[ng++];
        size_t j = i;
        while (j < ns && slots[j].pair == slots[i].pair)
            j++;
        *g = (group){.ctx = ctx, .map = map, .pair = slots[i].pair, .slots = slots + i,
                     .n = j - i, .items = items};
        i = j;
    }
    piped = left + (map->npairs ? map->npairs : 1);
    /* Every pair at once: those with an idle pooled connection sent from
     * one thread (pipeline), each other on a thread of its own (opening a
     * connection can take the connect timeout); then each pipelined pair
     * whose try failed, through the retry policy. */
    for (size_t i = 0, at = 0; i < ng; i++) {
        group *g = &groups[i];
        shard_server *srv = ng > 1 ? ctx_server(ctx, map, (size_t)g->pair) : NULL;
        g->shards = shardbuf + at;
        at += g->n;
        if (srv && conn_acquire_idle(srv, &g->pc) == 0)
            piped[np++] = g;
        else
            left[nleft++] = g;
    }
    run_jobs(&(jobs){piped, np, left, nleft});
    nleft = 0;
    for (size_t i = 0; i < np; i++)
        if (!piped[i]->done)
            left[nleft++] = piped[i];
    run_jobs(&(jobs){NULL, 0, left, nleft});
    *pending = 0;
    for (size_t i = 0; i < ng; i++) {
        group *g = &groups[i];
        if (!g->rc)
            continue;
        if (!first)
            first = &g->err;
        for (size_t k = 0; k < g->n; k++) {
            shard_item *it = &items[g->slots[k].idx];
            free(it->data);
            it->data = NULL;
            it->len = 0;
            it->status = g->rc;
        }
    }
    fs->srv = NULL;
    for (size_t i = 0; i < ng && !fs->srv; i++)
        if (groups[i].fenced && !groups[i].rc) {
            fs->srv = ctx_server(ctx, map, (size_t)groups[i].pair);
            shard__dbfmt_name(&map->dbfmt, groups[i].fenced_shard, fs->db);
        }
    /* Still to ask: a group that found its shard moved, or a fenced shard's items. */
    for (size_t i = 0; i < ns; i++)
        *pending += items[slots[i].idx].status == SHARD_EMOVED;
    if (first)
        shard__fail(SHARD_EPARTIAL, "%s", first->msg);
    free(shardbuf);
    free(left);
    free(groups);
    free(slots);
    shard_map_free(map);
    return 0;
}

/*
 * Items whose pair could not be reached are asked again when the map (which
 * their group reloaded) is newer than the one the round used: a failover
 * may have promoted the pair's standby. Returns how many.
 */
static size_t reask_unreachable(shard_ctx *ctx, shard_item *items, size_t n,
                                uint64_t used)
{
    shard_map *map;
    size_t k = 0;
    bool any = false;

    for (size_t i = 0; i < n && !any; i++)
        any = items[i].status == SHARD_ECONNECT;
    if (!any)
        return 0;
    map = ctx_map(ctx);
    if (map->version != used)
        for (size_t i = 0; i < n; i++)
            if (items[i].status == SHARD_ECONNECT) {
                items[i].status = SHARD_EMOVED; /* "still to ask" */
                k++;
            }
    shard_map_free(map);
    return k;
}

static int mget(shard_ctx *ctx, const uint64_t *ids, size_t n, shard_item **out,
                double started)
{
    shard_item *items;
    size_t pending = 0;
    int rc = 0;

    items = shard__calloc(n ? n : 1, sizeof *items);
    if (!items)
        return shard__fail(SHARD_ENOMEM, "out of memory for a %zu-ID multi-get", n);
    for (size_t i = 0; i < n; i++)
        items[i].status = SHARD_EMOVED; /* "still to ask" */
    shard__clear_error();
    /* Items on a moving shard are asked again, after the map flips, within
     * the retry budget; so are those of a pair whose master a failover
     * replaced. */
    double deadline = started + ctx->opts.retry_budget_ms / 1000.0;
    double store_at = started; /* the last store read of a fence wait */
    bool waited = false;
    for (unsigned round = 0;; round++) {
        fence_seen fs = {NULL, ""};
        uint64_t used = 0;
        bool more;
        if ((rc = mget_round(ctx, ids, n, items, &pending, &used, &fs)))
            break;
        more = now_seconds() < deadline;
        if (pending && more && !waited) { /* fenced or moved, not a failover's re-ask */
            waited = true;
            stats_add(&ctx->stats.fence_waits);
        }
        if (!pending && more)
            pending = reask_unreachable(ctx, items, n, used);
        if (!pending || !more)
            break;
        /* Fenced or moved shards: wait for the map that routes them anew
         * (on a fence row, or one poll of the store), as single calls do. */
        stats_add(&ctx->stats.retries);
        if (fs.srv)
            exec_wait_fence(ctx, fs.srv, fs.db, used, started, &store_at, deadline);
        else
            exec_wait_map(ctx, used, (now_seconds() - started) * 1000.0, deadline);
    }
    if (rc) {
        shard_items_free(items, n);
        return rc;
    }
    for (size_t i = 0; i < n; i++)
        if (items[i].status != 0 && items[i].status != SHARD_ENOTFOUND) {
            if (!shard_errmsg()[0] && items[i].status == SHARD_EMOVED)
                shard__fail(SHARD_EPARTIAL, "ID %llu: shard %u stayed fenced by a move (or "
                           "moved) through the retry budget", (unsigned long long)ids[i],
                           shard_id_shard(ids[i]));
            else if (!shard_errmsg()[0])
                shard__fail(SHARD_EPARTIAL, "ID %llu: %s", (unsigned long long)ids[i],
                           shard_strerror(items[i].status));
            rc = SHARD_EPARTIAL;
        }
    *out = items;
    return rc;
}

int shard_object_mget(shard_ctx *ctx, const uint64_t *ids, size_t n, shard_item **out)
{
    double started;
    int rc;

    if (!ctx || !out || (!ids && n))
        return shard__fail(SHARD_EINVAL, "shard_object_mget: NULL argument");
    started = now_seconds();
    rc = mget(ctx, ids, n, out, started);
    stats_call(&ctx->stats, STATS_OBJECT_MGET, started, rc);
    return rc;
}

void shard_items_free(shard_item *items, size_t n)
{
    if (!items)
        return;
    for (size_t i = 0; i < n; i++)
        free(items[i].data);
    free(items);
}
