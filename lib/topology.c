/*
 * Topology edits without hand-edited JSON (shard_pair_add(3),
 * shard_pair_remove(3), shard_shards_open(3)) and the check that a map's
 * open shards have their databases (shard_schema_check(3)). Each edit
 * checks the servers first, then builds the new map from the stored one
 * and publishes it with a compare-and-swap on its version, again from the
 * start when another change won.
 */
#include "fleet.h"
#include "move/face.h"
#include "publish.h"
#include "schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The map of an edited document at `version` (parsed and validated whole). */
static int doc_map(json_t *doc, uint64_t version, shard_map **out)
{
    char *text;
    int rc;

    if (json_object_set_new(doc, "version", json_integer((json_int_t)version)) ||
        !(text = json_dumps(doc, JSON_SORT_KEYS)))
        return shard__fail(SHARD_ENOMEM, "out of memory editing the shard map");
    rc = shard_map_parse(out, text, strlen(text));
    map_json_text_free(text);
    return rc;
}

/* Publish the edit (publish.h), then reload the context. */
static int topology_publish(shard_ctx *ctx, publish_edit_fn edit, void *arg, uint64_t *version)
{
    int rc = publish_edit(ctx->store, edit, arg, version);

    if (rc == 0) {
        shard_errsave keep;
        shard__error_save(&keep, 0);
        shard_ctx_reload(ctx); /* the context's own next call sees the new map */
        shard__error_restore(&keep);
    }
    return rc;
}

/* ---- the schema check ------------------------------------------------------ */

typedef struct check_job {
    shard_ctx *ctx;
    const shard_map *map;
    const bool *only; /* NULL: every pair */
    fleet_inventory *inv;
    int *rc;
    char (*err)[600];
} check_job;

static int check_pair(void *arg, size_t i, unsigned worker)
{
    check_job *j = arg;
    shard_conn *c = NULL;

    (void)worker;
    if (j->only && !j->only[i])
        return 0;
    if ((j->rc[i] = fleet_connect(j->ctx, &j->map->pairs[i].master, &c)) == 0)
        j->rc[i] = fleet_inventory_get(c, j->map, i, &j->inv[i]);
    if (j->rc[i])
        snprintf(j->err[i], sizeof j->err[i], "%s", shard_errmsg());
    conn_put(c, j->rc[i] == 0);
    return 0;
}

static int missing_fail(const shard_map *map, size_t pair, const fleet_inventory *v)
{
    const shard_pairdef *p = &map->pairs[pair];
    uint64_t bad = v->missing + v->incomplete;
    const char *dot = strchr(v->first_what, '.');

    char more[100] = "";

    if (bad > 1)
        snprintf(more, sizeof more, " (%llu of its %llu databases are missing or incomplete)",
                 (unsigned long long)bad, (unsigned long long)v->databases);
    return shard__fail(SHARD_EMAP, "%s shard %u of pair %s %s %s on its master %s%s",
                      v->first_mod ? "mod" : "open", v->first_shard, p->name,
                      dot ? "lacks table" : "has no database", v->first_what, p->master.text,
                      more);
}

/* The masters of the pairs in `only` (NULL: all) have every database and
 * table of their open shards and mod shards. */
static int check_pairs(shard_ctx *ctx, const shard_map *map, const bool *only)
{
    size_t n = map->npairs;
    fleet_inventory *inv = shard__calloc(n, sizeof *inv);
    int *rcs = shard__calloc(n, sizeof *rcs);
    char (*err)[600] = shard__calloc(n, sizeof *err);
    check_job j = {ctx, map, only, inv, rcs, err};
    int rc = 0;

    if (!inv || !rcs || !err) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
        goto out;
    }
    fanout_run(n, (unsigned)n, check_pair, &j);
    /* A shard without its database first: that is the map's fault. */
    for (size_t i = 0; i < n && !rc; i++)
        if ((!only || only[i]) && !rcs[i] && inv[i].has_first)
            rc = missing_fail(map, i, &inv[i]);
    for (size_t i = 0; i < n && !rc; i++)
        if ((!only || only[i]) && rcs[i])
            rc = shard__fail(rcs[i], "cannot check the databases of pair %s: %s",
                            map->pairs[i].name, err[i]);
out:
    free(inv);
    free(rcs);
    free(err);
    return rc;
}

int shard_schema_check(shard_ctx *ctx, const shard_map *map)
{
    shard_map *own = NULL;
    int rc;

    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_schema_check: NULL context");
    if (!map)
        map = own = ctx_map(ctx);
    rc = check_pairs(ctx, map, NULL);
    shard_map_free(own);
    return rc;
}

/* ---- pair add ------------------------------------------------------------- */

static bool same_endpoint(const shard_endpoint *a, const shard_endpoint *b)
{
    if (strcmp(a->text, b->text) == 0)
        return true;
    if (a->socket[0] || b->socket[0])
        return strcmp(a->socket, b->socket) == 0;
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

typedef struct add_arg {
    const char *name, *master, *standby;
} add_arg;

/* Neither address may already be a server of another pair. */
static int check_addresses(const shard_map *m, size_t pi)
{
    const shard_pairdef *p = &m->pairs[pi];

    for (size_t i = 0; i < m->npairs; i++) {
        const shard_pairdef *q = &m->pairs[i];
        const shard_endpoint *mine[2] = {&p->master, &p->standby};
        if (i == pi)
            continue;
        for (int k = 0; k < 2; k++) {
            if (same_endpoint(mine[k], &q->master))
                return shard__fail(SHARD_EINVAL, "%s is already the master of pair %s",
                                  mine[k]->text, q->name);
            if (q->has_standby && same_endpoint(mine[k], &q->standby))
                return shard__fail(SHARD_EINVAL, "%s is already the standby of pair %s",
                                  mine[k]->text, q->name);
        }
    }
    return 0;
}

static int edit_add(const shard_map *cur, shard_map **next, void *arg)
{
    add_arg *a = arg;
    json_t *doc, *pairs, *pair;
    int rc;

    if (shard__map_find_pair(cur, a->name) >= 0)
        return shard__fail(SHARD_EEXISTS, "pair %.64s is already in the map", a->name);
    /* NULL only for text that is not UTF-8 (or out of memory). */
    if (!(pair = json_pack("{s:s,s:s}", "master", a->master, "standby", a->standby)))
        return shard__fail(SHARD_EINVAL, "the addresses must be UTF-8 text");
    doc = json_deep_copy(cur->doc);
    pairs = doc ? json_object_get(doc, "pairs") : NULL;
    if (!pairs || json_object_set_new(pairs, a->name, pair)) {
        if (!pairs)
            json_decref(pair);
        json_decref(doc);
        return shard__fail(SHARD_EINVAL, "pair %.64s: the name must be UTF-8 text", a->name);
    }
    rc = doc_map(doc, cur->version + 1, next);
    json_decref(doc);
    if (rc == 0 && (rc = check_addresses(*next, (size_t)shard__map_find_pair(*next, a->name)))) {
        shard_map_free(*next);
        *next = NULL;
    }
    return rc;
}

/* What a pair's server must be: the settings a pair and a move rely on. */
static int check_settings(const fleet_server *s, const char *who, bool master)
{
    if (!s->log_bin || !s->row_format)
        return shard__fail(SHARD_EINVAL, "%s: needs log_bin=ON and binlog_format=ROW", who);
    if (!s->log_slave_updates)
        return shard__fail(SHARD_EINVAL, "%s: needs log_slave_updates=ON", who);
    if (!s->ignore_dups)
        return shard__fail(SHARD_EINVAL, "%s: needs gtid_ignore_duplicates=ON", who);
    if (master && s->read_only)
        return shard__fail(SHARD_EINVAL, "%s: is read-only: the master of a pair takes writes",
                          who);
    return 0;
}

/* The link on `to` that replicates from `from` runs without error. */
static int check_link(const fleet_server *to, const char *to_addr, const fleet_server *from,
                      const char *from_addr)
{
    const fleet_link *l;

    if (to->links_rc)
        return shard__fail(SHARD_ESERVER, "%s: cannot read its replication links: %s", to_addr,
                          to->links_error);
    if (!(l = fleet_link_from(to, from->server_id)))
        return shard__fail(SHARD_EINVAL, "the pair link %s -> %s is missing: %s does not "
                          "replicate from %s (server_id %lu)", from_addr, to_addr, to_addr,
                          from_addr, from->server_id);
    if (!fleet_link_ok(l))
        return shard__fail(SHARD_EINVAL, "the pair link %s -> %s is broken: io %s, sql %s%s%s%s%s",
                          from_addr, to_addr, l->io, l->sql, l->io_error[0] ? "; " : "",
                          l->io_error, l->sql_error[0] ? "; " : "", l->sql_error);
    return 0;
}

typedef struct probe_job {
    shard_ctx *ctx;
    const shard_endpoint **eps;
    fleet_server *s;
    int *rc;
    char (*err)[600];
} probe_job;

static int probe_one(void *arg, size_t i, unsigned worker)
{
    probe_job *j = arg;
    shard_conn *c = NULL;

    (void)worker;
    if ((j->rc[i] = fleet_connect(j->ctx, j->eps[i], &c)) == 0)
        j->rc[i] = fleet_probe(c, &j->s[i]);
    if (j->rc[i])
        snprintf(j->err[i], sizeof j->err[i], "%s", shard_errmsg());
    conn_put(c, j->rc[i] == 0);
    return 0;
}

/* The new pair's two servers first, then every server of the current map. */
static int check_new_pair(shard_ctx *ctx, const shard_map *cur, const shard_pairdef *p)
{
    size_t n = 2 + 2 * cur->npairs, k = 2;
    const shard_endpoint **eps = shard__calloc(n, sizeof *eps);
    const char **owner = shard__calloc(n, sizeof *owner);
    fleet_server *s = shard__calloc(n, sizeof *s);
    int *rcs = shard__calloc(n, sizeof *rcs);
    char (*err)[600] = shard__calloc(n, sizeof *err);
    probe_job j = {ctx, eps, s, rcs, err};
    char mw[400], sw[400];
    int rc = 0;

    if (!eps || !owner || !s || !rcs || !err) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
        goto out;
    }
    eps[0] = &p->master;
    eps[1] = &p->standby;
    for (size_t i = 0; i < cur->npairs; i++) {
        owner[k] = cur->pairs[i].name;
        eps[k++] = &cur->pairs[i].master;
        if (cur->pairs[i].has_standby) {
            owner[k] = cur->pairs[i].name;
            eps[k++] = &cur->pairs[i].standby;
        }
    }
    fanout_run(k, (unsigned)k, probe_one, &j);
    snprintf(mw, sizeof mw, "master %s", p->master.text);
    snprintf(sw, sizeof sw, "standby %s", p->standby.text);
    if (rcs[0] || rcs[1]) {
        rc = shard__fail(rcs[0] ? rcs[0] : rcs[1], "%s: %s", rcs[0] ? mw : sw,
                        err[rcs[0] ? 0 : 1]);
        goto out;
    }
    if ((rc = check_settings(&s[0], mw, true)) || (rc = check_settings(&s[1], sw, false)))
        goto out;
    if (s[0].server_id == s[1].server_id || s[0].domain == s[1].domain) {
        rc = shard__fail(SHARD_EINVAL, "%s and %s share %s %lu: each server needs its own",
                        mw, sw, s[0].server_id == s[1].server_id ? "server_id" :
                                                                     "gtid_domain_id",
                        s[0].server_id == s[1].server_id ? s[0].server_id : s[0].domain);
        goto out;
    }
    if ((rc = check_link(&s[0], p->master.text, &s[1], p->standby.text)) ||
        (rc = check_link(&s[1], p->standby.text, &s[0], p->master.text)))
        goto out;
    for (size_t i = 2; i < k; i++) {
        if (rcs[i]) {
            ctx_log(ctx, SHARD_LOG_WARN, "pair add: %s of pair %s does not answer (%s): its "
                    "server_id is not compared", eps[i]->text, owner[i], err[i]);
            continue;
        }
        for (int x = 0; x < 2; x++) {
            if (s[i].server_id == s[x].server_id || s[i].domain == s[x].domain) {
                rc = shard__fail(SHARD_EINVAL, "%s shares its %s with %s of pair %s",
                                x ? sw : mw, s[i].server_id == s[x].server_id ?
                                                 "server_id" : "gtid_domain_id",
                                eps[i]->text, owner[i]);
                goto out;
            }
        }
    }
out:
    free(eps);
    free(owner);
    free(s);
    free(rcs);
    free(err);
    return rc;
}

int shard_pair_add(shard_ctx *ctx, const char *name, const char *master, const char *standby,
                   uint64_t *version)
{
    add_arg a = {name, master, standby};
    shard_map *cur = NULL, *next = NULL;
    int rc;

    if (!ctx || !name || !master || !standby)
        return shard__fail(SHARD_EINVAL, "shard_pair_add: NULL argument");
    /* Check against the stored map as it is now; the publish below builds
     * on whatever it holds by then. */
    if ((rc = shard_store_load(ctx->store, &cur)))
        return shard__fail_prefix(rc, "reading the stored map: ");
    if ((rc = edit_add(cur, &next, &a)) == 0)
        rc = check_new_pair(ctx, cur, &next->pairs[shard__map_find_pair(next, name)]);
    shard_map_free(next);
    shard_map_free(cur);
    if (rc)
        return shard__fail_prefix(rc, "pair add %.64s: ", name);
    rc = topology_publish(ctx, edit_add, &a, version);
    return rc ? shard__fail_prefix(rc, "pair add %.64s: ", name) : 0;
}

/* ---- pair remove ---------------------------------------------------------- */

static int edit_remove(const shard_map *cur, shard_map **next, void *arg)
{
    const char *name = arg;
    long pi = shard__map_find_pair(cur, name);
    json_t *doc;
    int rc;

    if (pi < 0)
        return shard__fail(SHARD_EINVAL, "no pair named \"%.64s\" in the map", name);
    for (size_t i = 0; i < cur->nranges; i++)
        if (cur->ranges[i].pair == (size_t)pi)
            return shard__fail(SHARD_EINVAL, "pair %s still serves ID shards %u-%u: move them "
                              "to another pair first", name, cur->ranges[i].lo,
                              cur->ranges[i].hi);
    for (size_t i = 0; i < cur->nmod_ranges; i++)
        if (cur->mod_ranges[i].pair == (size_t)pi)
            return shard__fail(SHARD_EINVAL, "pair %s still serves mod shards %u-%u", name,
                              cur->mod_ranges[i].lo, cur->mod_ranges[i].hi);
    if (!(doc = json_deep_copy(cur->doc)) ||
        json_object_del(json_object_get(doc, "pairs"), name)) {
        json_decref(doc);
        return shard__fail(SHARD_ENOMEM, "out of memory editing the shard map");
    }
    rc = doc_map(doc, cur->version + 1, next);
    json_decref(doc);
    return rc;
}

typedef struct moves_job {
    shard_ctx *ctx;
    const shard_map *map;
    const char *pair;
    fleet_move *found; /* per master: a move naming pair (id 0: none) */
    int *rc;         /* per master: its journal could not be read */
    char (*err)[600];
} moves_job;

static int moves_on(void *arg, size_t i, unsigned worker)
{
    moves_job *j = arg;
    fleet_move m[1];
    shard_conn *c = NULL;
    size_t n = 0;

    (void)worker;
    if ((j->rc[i] = fleet_connect(j->ctx, &j->map->pairs[i].master, &c)) ||
        (j->rc[i] = fleet_moves_get(c, j->pair, m, 1, &n, NULL, true))) {
        snprintf(j->err[i], sizeof j->err[i], "%s", shard_errmsg());
        conn_put(c, false);
        return 0;
    }
    conn_put(c, true);
    for (size_t k = 0; k < n && !j->found[i].id; k++)
        if (strcmp(m[k].source, j->pair) == 0 || strcmp(m[k].target, j->pair) == 0)
            j->found[i] = m[k];
    return 0;
}

/* An unfinished move naming the pair still needs its servers; a journal
 * that cannot be read might hold one, so that refuses too. */
static int check_no_moves(shard_ctx *ctx, const shard_map *cur, const char *name)
{
    fleet_move *found = shard__calloc(cur->npairs, sizeof *found);
    int *rcs = shard__calloc(cur->npairs, sizeof *rcs);
    char (*err)[600] = shard__calloc(cur->npairs, sizeof *err);
    moves_job j = {ctx, cur, name, found, rcs, err};
    int rc = 0;

    if (!found || !rcs || !err) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
        goto out;
    }
    fanout_run(cur->npairs, (unsigned)cur->npairs, moves_on, &j);
    for (size_t i = 0; i < cur->npairs && !rc; i++)
        if (found[i].id) {
            char steps[400];
            move_next_steps(found[i].id, found[i].phase, found[i].running, steps, sizeof steps);
            rc = shard__fail(SHARD_EBUSY, "unfinished move %llu involving %s (shards %u-%u, %s to %s) %s",
                            (unsigned long long)found[i].id, name, found[i].first,
                            found[i].last, found[i].source, found[i].target, steps);
        }
    for (size_t i = 0; i < cur->npairs && !rc; i++)
        if (rcs[i])
            rc = shard__fail(rcs[i], "cannot tell whether a move involving %s is unfinished: "
                            "the move journal on pair %s cannot be read: %s", name,
                            cur->pairs[i].name, err[i]);
out:
    free(found);
    free(rcs);
    free(err);
    return rc;
}

int shard_pair_remove(shard_ctx *ctx, const char *name, uint64_t *version)
{
    shard_map *cur = NULL, *next = NULL;
    int rc;

    if (!ctx || !name)
        return shard__fail(SHARD_EINVAL, "shard_pair_remove: NULL argument");
    if ((rc = shard_store_load(ctx->store, &cur)))
        return shard__fail_prefix(rc, "reading the stored map: ");
    if ((rc = edit_remove(cur, &next, (void *)name)) == 0)
        rc = check_no_moves(ctx, cur, name);
    shard_map_free(next);
    shard_map_free(cur);
    if (rc == 0)
        rc = topology_publish(ctx, edit_remove, (void *)name, version);
    return rc ? shard__fail_prefix(rc, "pair remove %.64s: ", name) : 0;
}

/* ---- shards open ---------------------------------------------------------- */

typedef struct open_arg {
    shard_ctx *ctx;
    unsigned n;
    const char *pair;
    shard_progress_fn progress;
    void *payload;
} open_arg;

/* The range of the document's id_shards whose last shard is `hi`. */
static json_t *doc_range_ending(json_t *doc, unsigned hi)
{
    json_t *e;
    size_t i;

    json_array_foreach(json_object_get(doc, "id_shards"), i, e) {
        json_t *r = json_object_get(e, "range");
        if (json_integer_value(json_array_get(r, 1)) == (json_int_t)hi)
            return r;
    }
    return NULL;
}

/* cur with open_shards = n: shards no range covers go to `pair`, or extend
 * the last range. */
static int open_map(const shard_map *cur, const open_arg *a, shard_map **next)
{
    const shard_rangedef *last = &cur->ranges[cur->nranges - 1];
    const char *last_pair = cur->pairs[last->pair].name;
    json_t *doc;
    int rc = 0;

    if (a->n <= cur->open_shards)
        return shard__fail(SHARD_EINVAL, "shards 0-%u are open already: give a number above %u",
                          cur->open_shards - 1, cur->open_shards);
    if (a->n > SHARD_MAX_SHARD + 1)
        return shard__fail(SHARD_EINVAL, "at most %u shards", SHARD_MAX_SHARD + 1);
    if (a->pair && shard__map_find_pair(cur, a->pair) < 0)
        return shard__fail(SHARD_EINVAL, "no pair named \"%.64s\" in the map", a->pair);
    for (unsigned s = cur->open_shards; a->pair && s < a->n && s <= last->hi; s++) {
        long p = shard__map_pair_index(cur, s);
        if (strcmp(cur->pairs[p].name, a->pair) != 0)
            return shard__fail(SHARD_EINVAL, "shard %u is in a range of pair %s already, not "
                              "of %s", s, cur->pairs[p].name, a->pair);
    }
    if (!(doc = json_deep_copy(cur->doc)) ||
        json_object_set_new(doc, "open_shards", json_integer(a->n)))
        rc = SHARD_ENOMEM;
    if (rc == 0 && a->n - 1 > last->hi) {
        const char *to = a->pair ? a->pair : last_pair;
        json_t *r = strcmp(to, last_pair) == 0 ? doc_range_ending(doc, last->hi) : NULL;
        if (r)
            rc = json_array_set_new(r, 1, json_integer(a->n - 1)) ? SHARD_ENOMEM : 0;
        else
            rc = json_array_append_new(json_object_get(doc, "id_shards"),
                                       json_pack("{s:[I,I],s:s}", "range",
                                                 (json_int_t)last->hi + 1,
                                                 (json_int_t)a->n - 1, "pair", to))
                     ? SHARD_ENOMEM : 0;
    }
    if (rc == 0)
        rc = doc_map(doc, cur->version + 1, next);
    else
        rc = shard__fail(SHARD_ENOMEM, "out of memory editing the shard map");
    json_decref(doc);
    return rc;
}

typedef struct create_job {
    shard_ctx *ctx;
    const shard_map *map;
    unsigned from, to; /* shards [from, to) */
    uint64_t *total, *done;
    pthread_mutex_t lock;
    shard_progress_fn progress;
    void *payload;
} create_job;

static int create_run(create_job *j, size_t pair, shard_conn *c, sqlbuf *q)
{
    int rc = conn_query(c, q);

    sql_reset(q);
    if (rc == 0 && j->progress) {
        char what[100];
        snprintf(what, sizeof what, "schema %s", j->map->pairs[pair].name);
        pthread_mutex_lock(&j->lock);
        j->progress(what, ++j->done[pair], j->total[pair], j->payload);
        pthread_mutex_unlock(&j->lock);
    }
    return rc;
}

static int create_shard(create_job *j, size_t pair, shard_conn *c, sqlbuf *q, unsigned s)
{
    const shard_map *m = j->map;
    char db[SHARD_DBNAME_MAX];
    int rc;

    shard__dbfmt_name(&m->dbfmt, s, db);
    sql_addf(q, "CREATE DATABASE IF NOT EXISTS `%s` CHARACTER SET utf8mb4", db);
    if ((rc = create_run(j, pair, c, q)))
        return rc;
    for (size_t i = 0; i < m->nobjects; i++) {
        schema_object_table(q, db, m->objects[i].name);
        if ((rc = create_run(j, pair, c, q)))
            return rc;
    }
    for (size_t i = 0; i < m->nmappings; i++) {
        schema_mapping_table(q, db, m->mappings[i].name);
        if ((rc = create_run(j, pair, c, q)))
            return rc;
        if (m->mappings[i].reverse) {
            schema_mapping_table(q, db, m->mappings[i].reverse);
            if ((rc = create_run(j, pair, c, q)))
                return rc;
        }
    }
    return 0;
}

static int pair_fence_tables(shard_ctx *ctx, const shard_pairdef *p)
{
    shard_server *srv = ctx_server_at(ctx, &p->master);
    int rc = srv ? schema_fence_table(ctx, srv) : shard__fail(SHARD_ENOMEM, "out of memory");

    if (rc == 0 && p->has_standby) {
        srv = ctx_server_at(ctx, &p->standby);
        rc = srv ? schema_fence_table(ctx, srv) : shard__fail(SHARD_ENOMEM, "out of memory");
    }
    return rc;
}

static int create_on_pair(void *arg, size_t pair, unsigned worker)
{
    create_job *j = arg;
    shard_conn *c = NULL;
    sqlbuf q;
    int rc;

    (void)worker;
    if (!j->total[pair])
        return 0;
    /* Clients check the move fence on every server of the pair. */
    if ((rc = pair_fence_tables(j->ctx, &j->map->pairs[pair])))
        return shard__fail_prefix(rc, "pair %s: ", j->map->pairs[pair].name);
    if ((rc = fleet_connect(j->ctx, &j->map->pairs[pair].master, &c)))
        return shard__fail_prefix(rc, "pair %s: ", j->map->pairs[pair].name);
    sql_init(&q);
    for (unsigned s = j->from; rc == 0 && s < j->to; s++)
        if (shard__map_pair_index(j->map, s) == (long)pair)
            rc = create_shard(j, pair, c, &q, s);
    sql_free(&q);
    conn_put(c, rc == 0);
    return rc ? shard__fail_prefix(rc, "creating the schema of pair %s: ",
                                  j->map->pairs[pair].name) : 0;
}

/* Every database and table of shards [from, to) on their pairs' masters,
 * then the check that they are there. */
static int create_range(shard_ctx *ctx, const shard_map *next, unsigned from,
                        const open_arg *a)
{
    size_t n = next->npairs;
    uint64_t per_db = 1 + next->nobjects;
    create_job j = {ctx, next, from, a->n, shard__calloc(n, sizeof(uint64_t)),
                    shard__calloc(n, sizeof(uint64_t)), PTHREAD_MUTEX_INITIALIZER,
                    a->progress, a->payload};
    bool *only = shard__calloc(n, sizeof *only);
    int rc;

    for (size_t i = 0; i < next->nmappings; i++)
        per_db += next->mappings[i].reverse ? 2 : 1;
    if (!j.total || !j.done || !only) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
        goto out;
    }
    for (unsigned s = from; s < a->n; s++) {
        long p = shard__map_pair_index(next, s);
        j.total[p] += per_db;
        only[p] = true;
    }
    if ((rc = fanout_run(n, (unsigned)n, create_on_pair, &j)) == 0)
        rc = check_pairs(ctx, next, only);
out:
    free(j.total);
    free(j.done);
    free(only);
    return rc;
}

static int edit_open(const shard_map *cur, shard_map **next, void *arg)
{
    open_arg *a = arg;
    int rc = open_map(cur, a, next);

    if (rc == 0 && (rc = create_range(a->ctx, *next, cur->open_shards, a))) {
        shard_map_free(*next);
        *next = NULL;
    }
    return rc;
}

int shard_shards_open(shard_ctx *ctx, unsigned n, const char *pair,
                      shard_progress_fn progress, void *payload, uint64_t *version)
{
    open_arg a = {ctx, n, pair, progress, payload};
    int rc;

    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_shards_open: NULL context");
    rc = topology_publish(ctx, edit_open, &a, version);
    return rc ? shard__fail_prefix(rc, "shards open %u: ", n) : 0;
}
