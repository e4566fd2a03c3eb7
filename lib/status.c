/*
 * The fleet view (shard_fleet_status(3)): every server of every pair asked
 * at once, what each says about itself, its replication links and the
 * shard databases it holds, the unfinished moves, and one list of what is
 * wrong, as a JSON document.
 */
#include "fleet.h"
#include "move/face.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A replication link further behind than this is a problem. */
#define STATUS_MAX_LAG_S 60

typedef struct st_server {
    size_t pair;
    bool standby;
    const shard_endpoint *ep;
    bool reachable;
    char error[600];
    fleet_server probe;
    int inv_rc;
    char inv_error[600];
    fleet_inventory inv;
    int moves_rc;
    char moves_error[600];
    fleet_move moves[FLEET_MOVES];
    size_t nmoves, moves_total; /* listed; in the journal */
} st_server;

typedef struct st_job {
    shard_ctx *ctx;
    const shard_map *map;
    st_server *s;
} st_job;

static void keep_error(char *buf, size_t size)
{
    snprintf(buf, size, "%s", shard_errmsg());
}

/* One server, on one of fanout_run's threads. Never fails: a server that
 * cannot be asked is a finding of the report. */
static int ask_server(void *arg, size_t i, unsigned worker)
{
    st_job *j = arg;
    st_server *s = &j->s[i];
    shard_conn *c = NULL;

    (void)worker;
    if (fleet_connect(j->ctx, s->ep, &c) || fleet_probe(c, &s->probe)) {
        keep_error(s->error, sizeof s->error);
        conn_put(c, false);
        return 0;
    }
    s->reachable = true;
    if ((s->inv_rc = fleet_inventory_get(c, j->map, s->pair, &s->inv)))
        keep_error(s->inv_error, sizeof s->inv_error);
    if (!s->standby &&
        (s->moves_rc = fleet_moves_get(c, NULL, s->moves, FLEET_MOVES, &s->nmoves,
                                        &s->moves_total, true)))
        keep_error(s->moves_error, sizeof s->moves_error);
    conn_put(c, s->inv_rc == 0 && s->moves_rc == 0);
    return 0;
}

/* ---- the report ----------------------------------------------------------- */

static void problem(json_t *problems, const char *fmt, ...) SHARD_PRINTF(2, 3);
static void problem(json_t *problems, const char *fmt, ...)
{
    char line[1500];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    json_array_append_new(problems, json_string(line));
}

static const char *role(const st_server *s)
{
    return s->standby ? "standby" : "master";
}

static void label(const shard_map *map, const st_server *s, char *buf, size_t size)
{
    snprintf(buf, size, "%s %s %s", map->pairs[s->pair].name, role(s), s->ep->text);
}

static json_t *link_json(const fleet_link *l)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:s,s:s}", "name", l->name, "source",
                     l->source, "source_server_id", (json_int_t)l->source_id, "io_running",
                     l->io, "sql_running", l->sql, "seconds_behind_master",
                     l->lag < 0 ? json_null() : json_integer(l->lag), "last_io_error",
                     l->io_error, "last_sql_error", l->sql_error);
}

static void check_link(json_t *problems, const char *who, const fleet_link *l,
                       const char *from)
{
    char name[100];

    if (l->name[0])
        snprintf(name, sizeof name, "replication link '%s'", l->name);
    else
        snprintf(name, sizeof name, "pair link");
    if (!fleet_link_ok(l))
        problem(problems, "%s: %s from %s is broken: io %s, sql %s%s%s%s%s", who, name, from,
                l->io[0] ? l->io : "?", l->sql[0] ? l->sql : "?",
                l->io_error[0] ? "; io error: " : "", l->io_error,
                l->sql_error[0] ? "; sql error: " : "", l->sql_error);
    else if (l->lag > STATUS_MAX_LAG_S)
        problem(problems, "%s: %s from %s is %lld s behind", who, name, from, l->lag);
}

/* The links of s: the pair link from its partner must be there and run;
 * every other link must run too. */
static void check_links(json_t *problems, json_t *unseen, const st_server *s,
                        const st_server *partner, const char *who)
{
    const fleet_link *pl = NULL;

    if (s->probe.links_denied) { /* not a fault of the fleet: of the view */
        problem(unseen, "%s: replication links: %s", who, s->probe.links_error);
        return;
    }
    if (s->probe.links_rc) {
        problem(problems, "%s: cannot read its replication links: %s", who,
                s->probe.links_error);
        return;
    }
    if (partner) {
        if (partner->reachable)
            pl = fleet_link_from(&s->probe, partner->probe.server_id);
        if (!pl)
            pl = fleet_link_from(&s->probe, 0);
        if (!pl)
            problem(problems, "%s: no pair link: it does not replicate from its %s %s", who,
                    role(partner), partner->ep->text);
    }
    for (size_t i = 0; i < s->probe.nlinks; i++) {
        const fleet_link *l = &s->probe.links[i];
        check_link(problems, who, l, l == pl ? partner->ep->text : l->source);
    }
}

static void check_inventory(json_t *problems, const st_server *s, const char *who)
{
    const fleet_inventory *v = &s->inv;
    char names[800] = "", what[64];
    uint64_t bad = v->missing + v->incomplete;

    if (s->inv_rc) {
        problem(problems, "%s: cannot list its databases: %s", who, s->inv_error);
        return;
    }
    if (!bad)
        return;
    for (size_t i = 0; i < v->nnamed; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 v->named[i]);
    if (v->missing && v->incomplete)
        snprintf(what, sizeof what, "missing, %llu lacking tables",
                 (unsigned long long)v->incomplete);
    else
        snprintf(what, sizeof what, "%s", v->missing ? "missing" : "lacking tables");
    problem(problems, "%s: %llu of %llu shard databases %s: %s%s", who,
            (unsigned long long)(v->missing ? v->missing : v->incomplete),
            (unsigned long long)v->databases, what, names, bad > v->nnamed ? ", ..." : "");
}

static json_t *server_json(const shard_map *map, const st_server *s, const st_server *partner,
                           json_t *problems, json_t *unseen)
{
    char who[500];
    json_t *o, *links, *named;

    label(map, s, who, sizeof who);
    if (!s->reachable) {
        problem(problems, "%s: unreachable: %s", who, s->error);
        return json_pack("{s:s,s:s,s:b,s:s}", "role", role(s), "address", s->ep->text,
                         "reachable", 0, "error", s->error);
    }
    if (!s->standby && s->probe.read_only)
        problem(problems, "%s: the master is read-only: writes to its shards fail", who);
    if (partner && partner->reachable && partner->probe.server_id == s->probe.server_id &&
        !s->standby)
        problem(problems, "%s: master and standby share server_id %lu", who,
                s->probe.server_id);
    check_links(problems, unseen, s, partner, who);
    check_inventory(problems, s, who);
    links = json_array();
    for (size_t i = 0; i < s->probe.nlinks; i++)
        json_array_append_new(links, link_json(&s->probe.links[i]));
    named = json_array();
    for (size_t i = 0; i < s->inv.nnamed; i++)
        json_array_append_new(named, json_string(s->inv.named[i]));
    o = json_pack("{s:s,s:s,s:b,s:s,s:b,s:I,s:I,s:s,s:s}", "role", role(s), "address",
                  s->ep->text, "reachable", 1, "version", s->probe.version, "read_only",
                  s->probe.read_only, "server_id", (json_int_t)s->probe.server_id,
                  "gtid_domain_id", (json_int_t)s->probe.domain, "gtid_binlog_pos",
                  s->probe.binlog_pos, "gtid_slave_pos", s->probe.slave_pos);
    if (o && s->inv_rc == 0)
        json_object_update_new(
            o, json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "databases",
                         (json_int_t)s->inv.databases, "databases_missing",
                         (json_int_t)s->inv.missing, "databases_lacking_tables",
                         (json_int_t)s->inv.incomplete, "bytes", (json_int_t)s->inv.bytes,
                         "id_shards", (json_int_t)s->inv.id_shards, "mod_shards",
                         (json_int_t)s->inv.mod_shards));
    json_object_set_new(o, "missing", named);
    json_object_set_new(o, "links", links);
    json_object_set_new(o, "links_visible", json_boolean(!s->probe.links_denied));
    return o;
}

static json_t *ranges_json(const shard_rangedef *r, size_t n, size_t pair)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        if (r[i].pair == pair)
            json_array_append_new(a, json_pack("[I,I]", (json_int_t)r[i].lo,
                                               (json_int_t)r[i].hi));
    return a;
}

static json_int_t open_shards_of(const shard_map *map, size_t pair)
{
    json_int_t n = 0;
    for (size_t i = 0; i < map->nranges; i++) {
        const shard_rangedef *r = &map->ranges[i];
        if (r->pair == pair && r->lo < map->open_shards)
            n += (r->hi < map->open_shards ? r->hi : map->open_shards - 1) - r->lo + 1;
    }
    return n;
}

static json_int_t mod_shards_of(const shard_map *map, size_t pair)
{
    json_int_t n = 0;
    for (size_t i = 0; i < map->nmod_ranges; i++)
        if (map->mod_ranges[i].pair == pair)
            n += map->mod_ranges[i].hi - map->mod_ranges[i].lo + 1;
    return n;
}

static json_t *moves_json(const shard_map *map, const st_server *s, size_t n, json_t *problems)
{
    json_t *a = json_array();

    for (size_t i = 0; i < n; i++) {
        char who[500];
        if (s[i].standby || !s[i].reachable)
            continue;
        label(map, &s[i], who, sizeof who);
        if (s[i].moves_rc)
            problem(problems, "%s: cannot read the move journal: %s", who, s[i].moves_error);
        if (s[i].moves_total > s[i].nmoves)
            problem(problems, "%s: the move journal holds %zu unfinished moves; the first %zu "
                    "are listed (shardctl move status ID shows any of them)", who,
                    s[i].moves_total, s[i].nmoves);
        for (size_t k = 0; k < s[i].nmoves; k++) {
            const fleet_move *m = &s[i].moves[k];
            /* Nobody runs it: a problem, with what to do, unless it keeps a
             * reverse window, which waits for the operators by design. */
            if (!m->running && m->phase != SHARD_MOVE_REVERSIBLE) {
                char steps[400];
                move_next_steps(m->id, m->phase, false, steps, sizeof steps);
                problem(problems, "move %llu (shards %u-%u, %s -> %s): %s (journal updated %s)",
                        (unsigned long long)m->id, m->first, m->last, m->source, m->target,
                        steps, m->updated_at);
            }
            json_array_append_new(
                a, json_pack("{s:I,s:s,s:s,s:i,s:i,s:s,s:b,s:s,s:s,s:s}", "id",
                             (json_int_t)m->id, "source", m->source, "target", m->target,
                             "first", (int)m->first, "last", (int)m->last, "phase",
                             shard_move_phase_name(m->phase), "running", m->running,
                             "updated_at", m->updated_at, "message", m->message, "journal",
                             map->pairs[s[i].pair].name));
        }
    }
    return a;
}

/*
 * A shard the map marks moving has its fence checked by every read and
 * write (the lease does not apply there): right while a move that may
 * still fence it is unfinished, a cost for nothing once it is over. A
 * mark that no such move carries (its mover stopped after the move was
 * over and before it cleared the mark, or the store did not answer then)
 * is a problem, with the call that clears it. Said only when every
 * journal was read whole: otherwise the move carrying it may be unseen.
 * A move left dropping its source fences nothing any more.
 */
static void check_marks(const shard_map *map, const st_server *s, size_t n, json_t *problems)
{
    for (size_t i = 0; i < n; i++)
        if (!s[i].standby &&
            (!s[i].reachable || s[i].moves_rc || s[i].moves_total > s[i].nmoves))
            return;
    for (size_t k = 0; k < map->nmoving; k++) {
        const shard_rangedef *r = &map->moving[k];
        const fleet_move *dropping = NULL;
        bool carried = false;
        for (size_t i = 0; i < n && !carried; i++)
            for (size_t j = 0; !s[i].standby && j < s[i].nmoves && !carried; j++) {
                const fleet_move *m = &s[i].moves[j];
                /* Overlap, as a resume or a sweep decides (lib/move/lease.c):
                 * a move that shares a shard with the mark keeps it. */
                if (m->last < r->lo || m->first > r->hi)
                    continue;
                if (m->phase == SHARD_MOVE_DROPPING)
                    dropping = m;
                else
                    carried = true;
            }
        if (carried)
            continue;
        if (dropping)
            problem(problems, "shards %u-%u are still marked moving in the map although "
                    "move %llu is over (its source is left to drop): every read and write "
                    "there checks the fence, as during a move; shardctl move resume %llu "
                    "drops the source and clears the mark", r->lo, r->hi,
                    (unsigned long long)dropping->id, (unsigned long long)dropping->id);
        else
            problem(problems, "shards %u-%u are marked moving in the map but no unfinished "
                    "move carries them (a mover stopped after its move was over, before "
                    "clearing the mark): every read and write there checks the fence, as "
                    "during a move; shardctl move resume ID of the move that last carried "
                    "them (shardctl move status lists every move) clears the mark, and so "
                    "does the next move of those shards", r->lo, r->hi);
    }
}

static json_t *build(const shard_map *map, const st_server *s, size_t n, const char *user)
{
    json_t *problems = json_array(), *unseen = json_array(), *pairs = json_array(), *moves;
    json_t *doc;

    for (size_t i = 0; i < n; i++) {
        const shard_pairdef *p = &map->pairs[s[i].pair];
        json_t *pair, *servers;
        if (s[i].standby)
            continue;
        servers = json_array();
        /* The standby, when there is one, is the next entry. */
        json_array_append_new(servers, server_json(map, &s[i], p->has_standby ? &s[i + 1]
                                                                              : NULL,
                                                   problems, unseen));
        if (p->has_standby)
            json_array_append_new(servers,
                                  server_json(map, &s[i + 1], &s[i], problems, unseen));
        pair = json_pack("{s:s,s:I,s:o,s:I,s:o,s:o}", "name", p->name, "id_shards",
                         open_shards_of(map, s[i].pair), "ranges",
                         ranges_json(map->ranges, map->nranges, s[i].pair), "mod_shards",
                         mod_shards_of(map, s[i].pair), "mod_ranges",
                         ranges_json(map->mod_ranges, map->nmod_ranges, s[i].pair),
                         "servers", servers);
        json_array_append_new(pairs, pair);
    }
    moves = moves_json(map, s, n, problems);
    check_marks(map, s, n, problems);
    doc = json_pack("{s:b,s:I,s:I,s:I,s:o,s:o,s:o}", "healthy",
                    json_array_size(problems) == 0, "map_version", (json_int_t)map->version,
                    "open_shards", (json_int_t)map->open_shards, "max_lag_seconds",
                    (json_int_t)STATUS_MAX_LAG_S, "problems", problems, "pairs", pairs,
                    "moves", moves);
    /* What this account could not see: the report is incomplete, not the
     * fleet unhealthy (an operator's account sees it). */
    json_object_set_new(doc, "complete", json_boolean(json_array_size(unseen) == 0));
    json_object_set_new(doc, "account", json_string(user ? user : ""));
    json_object_set_new(doc, "unseen", unseen);
    return doc;
}

int shard_fleet_status(shard_ctx *ctx, char **json)
{
    shard_map *map;
    st_server *s;
    st_job job;
    size_t n = 0;
    json_t *doc = NULL;
    char *text = NULL;
    int rc = 0;

    if (!ctx || !json)
        return shard__fail(SHARD_EINVAL, "shard_fleet_status: NULL argument");
    *json = NULL;
    map = ctx_map(ctx);
    if (!(s = shard__calloc(2 * map->npairs, sizeof *s))) {
        shard_map_free(map);
        return shard__fail(SHARD_ENOMEM, "out of memory");
    }
    for (size_t p = 0; p < map->npairs; p++) {
        s[n++] = (st_server){.pair = p, .ep = &map->pairs[p].master};
        if (map->pairs[p].has_standby)
            s[n++] = (st_server){.pair = p, .standby = true, .ep = &map->pairs[p].standby};
    }
    job = (st_job){ctx, map, s};
    /* Every server at once: a dead one costs the connect timeout, once. */
    fanout_run(n, (unsigned)n, ask_server, &job);
    doc = build(map, s, n, ctx_user(ctx, map));
    if (!doc || !(text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER)))
        rc = shard__fail(SHARD_ENOMEM, "out of memory building the status report");
    else
        rc = copy_out(text, strlen(text), json, NULL);
    if (text) {
        json_malloc_t jm;
        json_free_t jf;
        json_get_alloc_funcs(&jm, &jf);
        jf(text);
    }
    json_decref(doc);
    free(s);
    shard_map_free(map);
    return rc;
}
