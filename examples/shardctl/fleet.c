/*
 * shardctl: the fleet: status, the topology (pair add, pair remove, shards
 * open) and the schema (schema apply).
 */
#include "shardctl.h"

#include <jansson.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- schema apply and shards open: progress summed over the pairs ------- */

typedef struct schema_progress {
    progress bar;
    size_t npairs, nseen;
    struct pair_progress {
        char what[128];
        uint64_t done, total;
        int finished;
    } *pairs;
} schema_progress;

static void schema_sums(const schema_progress *p, uint64_t *done, uint64_t *total)
{
    *done = *total = 0;
    for (size_t i = 0; i < p->nseen; i++) {
        *done += p->pairs[i].done;
        *total += p->pairs[i].total;
    }
}

/* The library reports each pair (calls are serialised); the display shows
 * the sum. */
static void on_schema_progress(const char *what, uint64_t done, uint64_t total, void *payload)
{
    schema_progress *p = payload;
    struct pair_progress *pp = NULL;

    for (size_t i = 0; i < p->nseen; i++)
        if (strcmp(p->pairs[i].what, what) == 0)
            pp = &p->pairs[i];
    if (!pp && p->nseen < p->npairs) {
        pp = &p->pairs[p->nseen++];
        snprintf(pp->what, sizeof pp->what, "%s", what);
    }
    if (!pp)
        return;
    pp->done = done;
    pp->total = total;
    /* Without a terminal, a line for each pair that is done, as it is. */
    if (!p->bar.tty && done == total && !pp->finished) {
        pp->finished = 1;
        fprintf(stderr, "%s: done, %" PRIu64 " databases and tables\n", what, total);
    }
    schema_sums(p, &done, &total);
    progress_update(&p->bar, done, total);
}

static int schema_progress_init(schema_progress *p, size_t npairs)
{
    memset(p, 0, sizeof *p);
    progress_init(&p->bar);
    progress_begin(&p->bar, "schema", "databases and tables");
    p->npairs = npairs;
    p->pairs = calloc(npairs ? npairs : 1, sizeof *p->pairs);
    return p->pairs ? 0 : usage_error("out of memory");
}

static void schema_progress_end(schema_progress *p, int rc)
{
    if (rc)
        progress_stop(&p->bar);
    else
        progress_end(&p->bar);
    free(p->pairs);
}

int cmd_schema_apply(const args *a, shard_ctx *ctx, shard_map *map)
{
    schema_progress p;
    uint64_t done, total;
    int rc;

    (void)a;
    if ((rc = schema_progress_init(&p, shard_map_pair_count(map))))
        return rc;
    rc = shard_schema_apply(ctx, on_schema_progress, &p);
    schema_sums(&p, &done, &total);
    schema_progress_end(&p, rc);
    if (rc)
        return lib_error(rc);
    printf("schema applied: %" PRIu64 " databases and tables on %zu pairs (map version %" PRIu64
           ")\n", done, p.nseen, shard_map_version(map));
    return 0;
}

/* "8-11 on MySQL002, 12-15 on MySQL003": where shards [from, to) live in map. */
static void print_placement(const shard_map *map, unsigned from, unsigned to)
{
    unsigned run = from;

    for (unsigned s = from; s < to; s++) {
        const char *p = "?", *q = "?";
        shard_map_pair_of(map, s, &p);
        if (s + 1 < to)
            shard_map_pair_of(map, s + 1, &q);
        if (s + 1 < to && strcmp(p, q) == 0)
            continue;
        printf("%s%u", run == from ? "" : ", ", run);
        if (s > run)
            printf("-%u", s);
        printf(" on %s", p);
        run = s + 1;
    }
}

int cmd_shards_open(const args *a, shard_ctx *ctx, shard_map *before)
{
    unsigned long long n;
    schema_progress p;
    shard_map *after = NULL;
    uint64_t version;
    unsigned from = shard_map_open_shards(before);
    int rc;

    if (parse_num("N", a->pos[2], 1, SHARD_MAX_SHARD + 1, &n))
        return EXIT_USAGE;
    /* The pair a new range goes to is counted too. */
    if ((rc = schema_progress_init(&p, shard_map_pair_count(before) + 1)))
        return rc;
    rc = shard_shards_open(ctx, (unsigned)n, a->val[OPT_PAIR], on_schema_progress, &p,
                           &version);
    schema_progress_end(&p, rc);
    if (rc == 0 && (rc = shard_ctx_map(ctx, &after)) == 0) {
        unsigned first = from < shard_map_open_shards(after) ? from : 0;
        printf("opened shards ");
        print_placement(after, first, shard_map_open_shards(after));
        printf(": open_shards %u, map version %" PRIu64 "\n", shard_map_open_shards(after),
               version);
    }
    shard_map_free(after);
    return rc ? lib_error(rc) : 0;
}

/* ---- status ---------------------------------------------------------------- */

static const char *jstr(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

static json_int_t jint(const json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

/* "0-31, 64-95" from [[0,31],[64,95]]. */
static void ranges_text(const json_t *ranges, char *buf, size_t size)
{
    const json_t *r;
    size_t i, len = 0;

    buf[0] = '\0';
    json_array_foreach(ranges, i, r) {
        json_int_t lo = json_integer_value(json_array_get(r, 0));
        json_int_t hi = json_integer_value(json_array_get(r, 1));
        int n = lo == hi ? snprintf(buf + len, size - len, "%s%lld", i ? ", " : "",
                                    (long long)lo)
                         : snprintf(buf + len, size - len, "%s%lld-%lld", i ? ", " : "",
                                    (long long)lo, (long long)hi);
        if (n < 0 || (size_t)n >= size - len)
            break;
        len += (size_t)n;
    }
}

/* The state of one replication link, in a few words. */
static void link_text(const json_t *l, char *buf, size_t size)
{
    const json_t *lag = json_object_get(l, "seconds_behind_master");
    int ok = strcmp(jstr(l, "io_running"), "Yes") == 0 &&
             strcmp(jstr(l, "sql_running"), "Yes") == 0 && !*jstr(l, "last_io_error") &&
             !*jstr(l, "last_sql_error");

    if (!ok)
        snprintf(buf, size, "BROKEN (io %s, sql %s)", jstr(l, "io_running"),
                 jstr(l, "sql_running"));
    else if (json_is_integer(lag))
        snprintf(buf, size, "ok, %lld s behind", (long long)json_integer_value(lag));
    else
        snprintf(buf, size, "ok");
}

/* One server line: role, address, state, and what it serves. */
static void print_server(const json_t *srv, const json_t *partner, int addr_width)
{
    const json_t *links = json_object_get(srv, "links"), *l, *pair_link = NULL;
    json_int_t dbs = jint(srv, "databases"), bad;
    const char *version, *dash;
    char bytes[32], text[200];
    size_t i;

    printf("  %-8s %-*s ", jstr(srv, "role"), addr_width, jstr(srv, "address"));
    if (!json_is_true(json_object_get(srv, "reachable"))) {
        printf("DOWN\n");
        return;
    }
    bad = jint(srv, "databases_missing") + jint(srv, "databases_lacking_tables");
    human_bytes(jint(srv, "bytes"), bytes, sizeof bytes);
    /* "10.11.19-MariaDB", without the distribution's suffixes */
    version = jstr(srv, "version");
    dash = strchr(version, '-');
    dash = dash ? strchr(dash + 1, '-') : NULL;
    printf("up    %s  %-16.*s  ", json_is_true(json_object_get(srv, "read_only")) ? "ro" : "rw",
           dash ? (int)(dash - version) : (int)strlen(version), version);
    if (bad)
        printf("%lld/%lld dbs ", (long long)(dbs - bad), (long long)dbs);
    else
        printf("%lld dbs ", (long long)dbs);
    printf("%9s", bytes);
    /* The pair link: the one from the partner's server_id, else the unnamed one. */
    json_array_foreach(links, i, l)
        if (partner && json_is_true(json_object_get(partner, "reachable")) &&
            jint(l, "source_server_id") == jint(partner, "server_id"))
            pair_link = l;
    json_array_foreach(links, i, l)
        if (!pair_link && !*jstr(l, "name"))
            pair_link = l;
    if (json_is_false(json_object_get(srv, "links_visible"))) {
        printf("  link not visible to this account");
    } else if (pair_link) {
        link_text(pair_link, text, sizeof text);
        printf("  link %s", text);
    } else if (partner) {
        printf("  link NONE");
    }
    json_array_foreach(links, i, l) {
        if (l == pair_link)
            continue;
        link_text(l, text, sizeof text);
        printf("; %s %s", *jstr(l, "name") ? jstr(l, "name") : "link", text);
    }
    printf("  gtid %.60s%s\n", jstr(srv, "gtid_binlog_pos"),
           strlen(jstr(srv, "gtid_binlog_pos")) > 60 ? "..." : "");
}

/* The headline: what is wrong, or that nothing is, as far as the account sees. */
static void print_headline(const json_t *doc)
{
    const json_t *pairs = json_object_get(doc, "pairs"), *moves = json_object_get(doc, "moves");
    size_t nproblems = json_array_size(json_object_get(doc, "problems"));
    size_t nunseen = json_array_size(json_object_get(doc, "unseen"));

    if (nproblems)
        printf("status: UNHEALTHY, %zu problem%s", nproblems, nproblems == 1 ? "" : "s");
    else if (nunseen)
        printf("status: no problems seen, view INCOMPLETE");
    else
        printf("status: healthy");
    printf(" (map version %lld, %lld open shards, %zu pairs, %zu unfinished move%s)\n",
           (long long)jint(doc, "map_version"), (long long)jint(doc, "open_shards"),
           json_array_size(pairs), json_array_size(moves), json_array_size(moves) == 1 ? "" : "s");
}

/* The screen of shardctl status: what is wrong first, what this account
 * cannot see, then every pair. */
static void print_status(const json_t *doc)
{
    const json_t *pairs = json_object_get(doc, "pairs"), *moves = json_object_get(doc, "moves");
    const json_t *unseen = json_object_get(doc, "unseen");
    const json_t *p, *m, *e;
    size_t i, k;
    int width = 0;

    print_headline(doc);
    json_array_foreach(json_object_get(doc, "problems"), i, e)
        printf("  ! %s\n", json_string_value(e));
    if (json_array_size(unseen)) {
        /* "WHO: WHAT: the server's error": WHO and WHAT a line each, the
         * error (the same for all, as a rule) once. */
        const char *first = json_string_value(json_array_get(unseen, 0));
        const char *why = first ? strstr(first, ": ") : NULL;
        why = why ? strstr(why + 2, ": ") : NULL;
        printf("  ? account %s cannot see %zu part%s of the view (not a fault of the fleet):\n",
               jstr(doc, "account"), json_array_size(unseen),
               json_array_size(unseen) == 1 ? "" : "s");
        json_array_foreach(unseen, i, e) {
            const char *t = json_string_value(e), *w = strstr(t, ": ");
            w = w ? strstr(w + 2, ": ") : NULL;
            printf("  ?   %.*s\n", w ? (int)(w - t) : (int)strlen(t), t);
        }
        if (why)
            printf("  ?   (%s)\n", why + 2);
        printf("  ? an account with SLAVE MONITOR (or SUPER) sees it all: shardctl --user "
               "ADMIN --password-env VAR status\n");
    }
    json_array_foreach(pairs, i, p)
        json_array_foreach(json_object_get(p, "servers"), k, e)
            if ((int)strlen(jstr(e, "address")) > width)
                width = (int)strlen(jstr(e, "address"));
    json_array_foreach(pairs, i, p) {
        const json_t *servers = json_object_get(p, "servers");
        char ids[200], mods[200];
        ranges_text(json_object_get(p, "ranges"), ids, sizeof ids);
        ranges_text(json_object_get(p, "mod_ranges"), mods, sizeof mods);
        printf("%s: %lld ID shards%s%s, %lld mod shards%s%s\n", jstr(p, "name"),
               (long long)jint(p, "id_shards"), *ids ? " " : "", ids,
               (long long)jint(p, "mod_shards"), *mods ? " " : "", mods);
        json_array_foreach(servers, k, e)
            print_server(e, json_array_get(servers, json_array_size(servers) - 1 - k) == e
                                ? NULL : json_array_get(servers, 1 - k), width);
    }
    json_array_foreach(moves, i, m)
        printf("move %lld: shards %lld-%lld %s -> %s, %s, %s (journal updated %s)\n",
               (long long)jint(m, "id"), (long long)jint(m, "first"),
               (long long)jint(m, "last"), jstr(m, "source"), jstr(m, "target"),
               jstr(m, "phase"),
               json_is_true(json_object_get(m, "running"))
                   ? "running"
                   : strcmp(jstr(m, "phase"), "reversible") == 0 ? "reverse window open"
                                                                 : "INTERRUPTED",
               jstr(m, "updated_at"));
}

/* Exit 1 only for problems: what the account cannot see is said, and is
 * not a broken cluster. */
int cmd_status(const args *a, shard_ctx *ctx, shard_map *map)
{
    char *text = NULL;
    json_t *doc;
    int rc;

    (void)map;
    if ((rc = shard_fleet_status(ctx, &text)))
        return lib_error(rc);
    if (!(doc = json_loads(text, 0, NULL))) {
        shard_free(text);
        fprintf(stderr, "shardctl: the status report is not JSON\n");
        return EXIT_FAIL;
    }
    if (a->seen & O(OPT_JSON))
        printf("%s\n", text);
    else
        print_status(doc);
    rc = json_is_true(json_object_get(doc, "healthy")) ? 0 : EXIT_FAIL;
    json_decref(doc);
    shard_free(text);
    return rc;
}

/* ---- pairs ------------------------------------------------------------------ */

int cmd_pair_add(const args *a, shard_ctx *ctx, shard_map *map)
{
    uint64_t version;
    int rc;

    (void)map;
    if (!a->val[OPT_MASTER] || !a->val[OPT_STANDBY])
        return usage_error("pair add needs --master ADDR and --standby ADDR");
    rc = shard_pair_add(ctx, a->pos[2], a->val[OPT_MASTER], a->val[OPT_STANDBY], &version);
    if (rc) {
        int status = lib_error(rc);
        /* A name already in the map is bad input, as an address already used is. */
        return rc == SHARD_EEXISTS ? EXIT_USAGE : status;
    }
    printf("pair %s added: master %s, standby %s (map version %" PRIu64 "); it serves "
           "nothing yet: shards open N --pair %s, or move shards to it\n", a->pos[2],
           a->val[OPT_MASTER], a->val[OPT_STANDBY], version, a->pos[2]);
    return 0;
}

int cmd_pair_remove(const args *a, shard_ctx *ctx, shard_map *map)
{
    uint64_t version;
    int rc;

    (void)map;
    if ((rc = shard_pair_remove(ctx, a->pos[2], &version)))
        return lib_error(rc);
    printf("pair %s removed (map version %" PRIu64 ")\n", a->pos[2], version);
    return 0;
}
