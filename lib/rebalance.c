/*
 * The rebalancer (shard_rebalance_plan(3), libshard-move(7)): measure every
 * shard database on the master that serves it, plan moves of contiguous
 * shard ranges from the fullest pair to the emptiest, and run them one
 * after another with the public shard_move().
 */
#include "control.h"
#include "ctx.h"
#include "move/face.h"
#include "rebalance.h"
#include "report.h"

#include <stdlib.h>
#include <string.h>

/* ---- the planner (no server) ------------------------------------------------- */

/* Without libm, which the library does not link. */
static double dist(double a, double b)
{
    return a > b ? a - b : b - a;
}

void rebal_pair_loads(size_t npairs, unsigned nshards, const long *pair_of, const double *load,
                      double *pair_load)
{
    for (size_t p = 0; p < npairs; p++)
        pair_load[p] = 0;
    for (unsigned s = 0; s < nshards; s++)
        if (pair_of[s] >= 0)
            pair_load[pair_of[s]] += load[s];
}

typedef struct planner {
    const rebal_input *in;
    long *assign;       /* [nshards]: the pair of each shard after the steps so far */
    double *pair_load;  /* [npairs] */
    rebal_step *steps;
    size_t nsteps, cap;
    double mean;        /* of the pairs that keep shards */
} planner;

static bool active(const planner *pl, size_t p)
{
    return pl->in->considered[p] && !pl->in->drained[p];
}

static bool full(const planner *pl)
{
    return pl->in->max_moves && pl->nsteps >= pl->in->max_moves;
}

static int add_step(planner *pl, unsigned first, unsigned last, size_t to, bool drain)
{
    size_t from = (size_t)pl->assign[first];

    if (pl->nsteps == pl->cap) {
        size_t cap = pl->cap ? 2 * pl->cap : 16;
        rebal_step *n = shard__realloc(pl->steps, cap * sizeof *n);
        if (!n)
            return shard__fail(SHARD_ENOMEM, "out of memory planning moves");
        pl->steps = n;
        pl->cap = cap;
    }
    pl->steps[pl->nsteps++] = (rebal_step){first, last, from, to, drain};
    for (unsigned s = first; s <= last; s++) {
        pl->pair_load[from] -= pl->in->load[s];
        pl->pair_load[to] += pl->in->load[s];
        pl->assign[s] = (long)to;
    }
    return 0;
}

/* The active pair with the least (emptiest) or most load; ties: the first. */
static long extreme_pair(const planner *pl, bool most)
{
    long best = -1;
    for (size_t p = 0; p < pl->in->npairs; p++)
        if (active(pl, p) && (best < 0 || (most ? pl->pair_load[p] > pl->pair_load[best]
                                                : pl->pair_load[p] < pl->pair_load[best])))
            best = (long)p;
    return best;
}

/* Empty pair d: each run of its shards goes, piece by piece, to the
 * emptiest pair, a piece filling that pair up to the mean. */
static int drain_pair(planner *pl, size_t d)
{
    const rebal_input *in = pl->in;
    unsigned s = 0;

    while (!full(pl)) {
        unsigned b, e;
        double need, cum = 0;
        long dst;

        while (s < in->nshards && pl->assign[s] != (long)d)
            s++;
        if (s >= in->nshards)
            return 0;
        for (b = s; b + 1 < in->nshards && pl->assign[b + 1] == (long)d; b++)
            ;
        if ((dst = extreme_pair(pl, false)) < 0)
            return shard__fail(SHARD_EINVAL, "no pair is left to take the shards of the "
                              "drained pair %ld", (long)d);
        need = pl->mean - pl->pair_load[dst];
        /* Every pair is at the mean already (or nothing weighs anything):
         * splitting the run would only make more moves. */
        for (e = need > 0 ? s : b;; e++) {
            bool enough = cum + in->load[e] >= need;
            if (enough || e == b) {
                /* Stop here or just before, whichever lands nearer the mean. */
                if (enough && e > s && need - cum < cum + in->load[e] - need)
                    e--;
                break;
            }
            cum += in->load[e];
        }
        int rc = add_step(pl, s, e, (size_t)dst, true);
        if (rc)
            return rc;
        s = e + 1;
    }
    return 0;
}

/* Lowest index k in [lo, hi] with P[k] >= v (hi + 1 when none). */
static size_t lower_bound(const double *P, size_t lo, size_t hi, double v)
{
    size_t a = lo, b = hi + 1;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (P[m] < v)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

typedef struct candidate {
    bool found;
    unsigned first, last;
    double x;
} candidate;

static void consider(candidate *c, unsigned first, unsigned last, double x, double goal,
                     double gap)
{
    double d = dist(x, goal), cd = dist(c->x, goal);
    if (!(x > 0) || !(x < gap))
        return;
    if (!c->found || d < cd || (d == cd && last - first < c->last - c->first)) {
        c->found = true;
        c->first = first;
        c->last = last;
        c->x = x;
    }
}

/* The contiguous range of src's shards whose load is nearest goal, within
 * (0, gap). P is scratch of nshards + 1. */
static candidate best_range(const planner *pl, long src, double goal, double gap, double *P)
{
    const rebal_input *in = pl->in;
    candidate c = {false, 0, 0, 0};

    for (unsigned a = 0; a < in->nshards;) {
        unsigned b, m;
        if (pl->assign[a] != src) {
            a++;
            continue;
        }
        for (b = a; b + 1 < in->nshards && pl->assign[b + 1] == src; b++)
            ;
        m = b - a + 1; /* the run a..b; P[k] = load of its first k shards */
        P[0] = 0;
        for (unsigned k = 0; k < m; k++)
            P[k + 1] = P[k] + in->load[a + k];
        for (unsigned i = 0; i < m; i++) {
            size_t k = lower_bound(P, i + 1, m, P[i] + goal);
            if (k <= m)
                consider(&c, a + i, a + (unsigned)k - 1, P[k] - P[i], goal, gap);
            if (k - 1 > i) { /* the longest sum below goal, with the fewest shards */
                size_t j = lower_bound(P, i + 1, k - 1, P[k - 1]);
                consider(&c, a + i, a + (unsigned)j - 1, P[j] - P[i], goal, gap);
            }
        }
        a = b + 1;
    }
    return c;
}

static int balance(planner *pl, double *P)
{
    double band = pl->in->threshold * pl->mean;

    while (!full(pl) && pl->mean > 0) {
        long src = extreme_pair(pl, true), dst = extreme_pair(pl, false);
        double S, D, gap;
        candidate c;

        if (src < 0 || src == dst)
            return 0;
        S = pl->pair_load[src];
        D = pl->pair_load[dst];
        if (S - pl->mean <= band && pl->mean - D <= band)
            return 0; /* every pair within the band: balanced */
        gap = S - D;
        c = best_range(pl, src, S - pl->mean < pl->mean - D ? S - pl->mean : pl->mean - D, gap,
                       P);
        /* The move must narrow the gap between its two pairs by more than
         * the band, or it is not worth a move (and could flap). */
        if (!c.found || gap - dist(gap, 2 * c.x) <= band)
            return 0;
        int rc = add_step(pl, c.first, c.last, (size_t)dst, false);
        if (rc)
            return rc;
    }
    return 0;
}

int rebal_compute(const rebal_input *in, rebal_step **steps, size_t *nsteps)
{
    planner pl = {in, NULL, NULL, NULL, 0, 0, 0};
    double total = 0, *P = NULL;
    size_t nactive = 0;
    int rc = 0;

    *steps = NULL;
    *nsteps = 0;
    pl.assign = shard__malloc((in->nshards ? in->nshards : 1) * sizeof *pl.assign);
    pl.pair_load = shard__calloc(in->npairs ? in->npairs : 1, sizeof *pl.pair_load);
    P = shard__malloc(((size_t)in->nshards + 1) * sizeof *P);
    if (!pl.assign || !pl.pair_load || !P) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory planning moves");
        goto out;
    }
    if (in->nshards)
        memcpy(pl.assign, in->pair_of, in->nshards * sizeof *pl.assign);
    rebal_pair_loads(in->npairs, in->nshards, pl.assign, in->load, pl.pair_load);
    for (size_t p = 0; p < in->npairs; p++) {
        if (in->considered[p])
            total += pl.pair_load[p];
        nactive += active(&pl, p);
    }
    pl.mean = nactive ? total / (double)nactive : 0;
    for (size_t p = 0; p < in->npairs && !rc; p++)
        if (in->considered[p] && in->drained[p])
            rc = drain_pair(&pl, p);
    if (!rc)
        rc = balance(&pl, P);
out:
    if (rc) {
        free(pl.steps);
    } else {
        *steps = pl.steps;
        *nsteps = pl.nsteps;
    }
    free(pl.assign);
    free(pl.pair_load);
    free(P);
    return rc;
}

/* ---- the plan object ------------------------------------------------------------ */

struct shard_rebalance {
    uint64_t map_version;
    shard_rebalance_move *moves;
    size_t nmoves;
    shard_rebalance_pair *pairs;
    size_t npairs;
    double spread_before, spread_after;
};

void shard_rebalance_free(shard_rebalance *plan)
{
    if (!plan)
        return;
    free(plan->moves);
    free(plan->pairs);
    free(plan);
}

const shard_rebalance_move *shard_rebalance_moves(const shard_rebalance *plan, size_t *count)
{
    if (count)
        *count = plan ? plan->nmoves : 0;
    return plan ? plan->moves : NULL;
}

const shard_rebalance_pair *shard_rebalance_pairs(const shard_rebalance *plan, size_t *count)
{
    if (count)
        *count = plan ? plan->npairs : 0;
    return plan ? plan->pairs : NULL;
}

void shard_rebalance_spread(const shard_rebalance *plan, double *before,
                                 double *after)
{
    if (before)
        *before = plan ? plan->spread_before : 0;
    if (after)
        *after = plan ? plan->spread_after : 0;
}

uint64_t shard_rebalance_map_version(const shard_rebalance *plan)
{
    return plan ? plan->map_version : 0;
}

/* ---- options -------------------------------------------------------------------- */

static int copy_options(const shard_rebalance_options *in, shard_rebalance_options *o)
{
    static const shard_rebalance_options defaults = SHARD_REBALANCE_OPTIONS_INIT;

    *o = defaults;
    if (!in)
        return 0;
    if (in->version < 1 || in->version > SHARD_REBALANCE_OPTIONS_VERSION)
        return shard__fail(SHARD_EINVAL, "shard_rebalance_options.version %u is not one this "
                          "library knows (1..%d)", in->version, SHARD_REBALANCE_OPTIONS_VERSION);
    *o = *in; /* the caller's version stays: it says which report its step reads */
    if (o->by != SHARD_REBALANCE_BY_BYTES && o->by != SHARD_REBALANCE_BY_WRITES)
        return shard__fail(SHARD_EINVAL, "shard_rebalance_options.by %d is neither "
                          "SHARD_REBALANCE_BY_BYTES nor SHARD_REBALANCE_BY_WRITES", o->by);
    if (!(o->threshold > 0 && o->threshold <= 10))
        return shard__fail(SHARD_EINVAL, "the rebalance threshold %g is not in (0, 10] (a "
                          "fraction of the mean load, e.g. 0.1)", o->threshold);
    if (o->by == SHARD_REBALANCE_BY_WRITES && (o->sample_ms < 100 || o->sample_ms > 3600000))
        return shard__fail(SHARD_EINVAL, "the write sampling interval %u ms is not in "
                          "100..3600000", o->sample_ms);
    if (o->move && (o->move->flags & SHARD_MOVE_DRY_RUN))
        return shard__fail(SHARD_EINVAL, "the rebalance's move options ask for a dry run: a "
                          "plan is the rebalance's dry run");
    return 0;
}

/* Mark every pair of a "P1,P2,..." list in set[]; SHARD_EINVAL naming an
 * unknown pair or an empty item. */
static int pair_list(const shard_map *map, const char *list, const char *what, bool *set)
{
    const char *p = list;

    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[SHARD_DBNAME_MAX];
        long i;

        if (len == 0 || len >= sizeof name)
            return shard__fail(SHARD_EINVAL, "%s \"%.200s\": expected pair names separated by "
                              "commas", what, list);
        memcpy(name, p, len);
        name[len] = '\0';
        if ((i = shard__map_find_pair(map, name)) < 0)
            return shard__fail(SHARD_EINVAL, "%s: no pair named \"%s\" in the map", what, name);
        if (set[i])
            return shard__fail(SHARD_EINVAL, "%s \"%.200s\": pair %s is named twice", what,
                              list, name);
        set[i] = true;
        if (!end)
            return 0;
        p = end + 1;
    }
}

/* ---- measuring ------------------------------------------------------------------ */

typedef struct measure {
    shard_ctx *ctx;
    const shard_map *map;
    unsigned nshards;
    long *pair_of;      /* [nshards] */
    uint64_t *bytes;    /* [nshards] */
    double *writes;     /* [nshards]: rows changed per second */
    uint64_t *changed;  /* [nshards]: the first sample of ROWS_CHANGED */
    bool *seen;         /* [nshards]: its database was found on its master */
    shard_conn **conns; /* [npairs]: masters of the considered pairs */
    int *conn_rc;       /* [npairs]: the last failure on each, for conn_release */
} measure;

/* The ID shard a database name stands for, or -1 when it names none. */
static long shard_of_db(const shard_map *map, const char *db)
{
    const shard_dbfmt *f = &map->dbfmt;
    size_t lp = strlen(f->prefix), ls = strlen(f->suffix), ld = strlen(db);
    char again[SHARD_DBNAME_MAX];
    unsigned long n = 0;

    if (ld <= lp + ls || strncmp(db, f->prefix, lp) != 0 || strcmp(db + ld - ls, f->suffix))
        return -1;
    for (size_t i = lp; i < ld - ls; i++) {
        if (db[i] < '0' || db[i] > '9' || n > SHARD_MAX_SHARD)
            return -1;
        n = n * 10 + (unsigned long)(db[i] - '0');
    }
    if (n > SHARD_MAX_SHARD)
        return -1;
    shard__dbfmt_name(f, (unsigned)n, again);
    return strcmp(again, db) == 0 ? (long)n : -1;
}

/* Rows of (database, number) from a master; fn gets each shard's number. */
typedef void (*row_fn)(measure *m, unsigned shard, uint64_t value);

static int read_rows(measure *m, size_t pair, const char *sql, row_fn fn)
{
    shard_conn *c = m->conns[pair];
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, sql);
    if (!(rc = sql_check(&q)))
        rc = conn_select(c, &q, &res);
    sql_free(&q);
    if (rc) {
        m->conn_rc[pair] = rc;
        return rc;
    }
    while ((row = mysql_fetch_row(res))) {
        long s = row[0] ? shard_of_db(m->map, row[0]) : -1;
        if (s >= 0 && (unsigned)s < m->nshards && m->pair_of[s] == (long)pair)
            fn(m, (unsigned)s, row[1] ? strtoull(row[1], NULL, 10) : 0);
    }
    mysql_free_result(res);
    return 0;
}

static void got_bytes(measure *m, unsigned shard, uint64_t v)
{
    m->bytes[shard] = v;
    m->seen[shard] = true;
}

static void got_changed(measure *m, unsigned shard, uint64_t v)
{
    m->changed[shard] = v;
}

static void got_changed_again(measure *m, unsigned shard, uint64_t v)
{
    /* A counter that went down was flushed (FLUSH TABLE_STATISTICS). */
    m->writes[shard] = (double)(v >= m->changed[shard] ? v - m->changed[shard] : v);
}

#define SYSTEM_SCHEMAS \
    "('mysql', 'information_schema', 'performance_schema', 'sys', '" CONTROL_DB "')"

/*
 * Size on disk: a table's own tablespace file (innodb_file_per_table, the
 * default) as allocated now; InnoDB's DATA_LENGTH and INDEX_LENGTH are
 * statistics refreshed only now and then (at most every 10 s per table),
 * so right after a move they would show a target's new copies as nearly
 * empty and the next plan would move them again.
 */
static const char sql_sizes[] =
    "SELECT t.TABLE_SCHEMA, SUM(COALESCE(s.ALLOCATED_SIZE,"
    " t.DATA_LENGTH + t.INDEX_LENGTH, 0))"
    " FROM information_schema.TABLES t LEFT JOIN information_schema.INNODB_SYS_TABLESPACES s"
    " ON s.NAME = CONCAT(t.TABLE_SCHEMA, '/', t.TABLE_NAME)"
    " WHERE t.TABLE_SCHEMA NOT IN " SYSTEM_SCHEMAS " GROUP BY t.TABLE_SCHEMA";
/* Without the PROCESS privilege, which INNODB_SYS_TABLESPACES needs. */
static const char sql_sizes_stats[] =
    "SELECT TABLE_SCHEMA, SUM(COALESCE(DATA_LENGTH + INDEX_LENGTH, 0))"
    " FROM information_schema.TABLES WHERE TABLE_SCHEMA NOT IN " SYSTEM_SCHEMAS
    " GROUP BY TABLE_SCHEMA";
static const char sql_changed[] =
    "SELECT TABLE_SCHEMA, SUM(ROWS_CHANGED) FROM information_schema.TABLE_STATISTICS"
    " WHERE TABLE_SCHEMA NOT IN " SYSTEM_SCHEMAS " GROUP BY TABLE_SCHEMA";

#define ER_SPECIFIC_ACCESS_DENIED 1227

static int measure_sizes(measure *m, size_t pair)
{
    const char *name = m->map->pairs[pair].name;
    int rc = read_rows(m, pair, sql_sizes, got_bytes);

    if (rc && m->conns[pair]->last_errno == ER_SPECIFIC_ACCESS_DENIED) {
        ctx_log(m->ctx, SHARD_LOG_WARN, "pair %s: cannot read "
                "information_schema.INNODB_SYS_TABLESPACES (the PROCESS privilege): sizes "
                "come from InnoDB's statistics, which lag behind recent writes", name);
        rc = read_rows(m, pair, sql_sizes_stats, got_bytes);
    }
    if (rc)
        return shard__fail_prefix(rc, "pair %s: cannot read the shard databases' sizes: ", name);
    for (unsigned s = 0; s < m->nshards; s++)
        if (m->pair_of[s] == (long)pair && !m->seen[s]) {
            char db[SHARD_DBNAME_MAX];
            shard__dbfmt_name(&m->map->dbfmt, s, db);
            return shard__fail(SHARD_ENOTFOUND, "pair %s serves shard %u, but its master has "
                              "no tables in %s: run shardctl schema apply first", name, s, db);
        }
    return 0;
}

static int userstat_on(measure *m, size_t pair)
{
    char v[16];
    int rc = conn_value(m->conns[pair], "SELECT @@userstat", v, sizeof v);

    if (rc) {
        m->conn_rc[pair] = rc;
        return shard__fail_prefix(rc, "pair %s: ", m->map->pairs[pair].name);
    }
    if (strcmp(v, "1") != 0)
        return shard__fail(SHARD_ESERVER, "pair %s: the master %s runs with userstat off, so "
                          "it counts no writes per table (information_schema.TABLE_STATISTICS)"
                          ": turn it on (SET GLOBAL userstat = 1, and userstat = 1 in its "
                          "option file), or rebalance by bytes", m->map->pairs[pair].name,
                          m->map->pairs[pair].master.text);
    return 0;
}

/* Rows changed per second: TABLE_STATISTICS read twice, sample_ms apart. */
static int measure_writes(measure *m, const bool *considered, unsigned sample_ms)
{
    size_t np = m->map->npairs;
    double *t0 = shard__calloc(np, sizeof *t0);
    int rc = t0 ? 0 : shard__fail(SHARD_ENOMEM, "out of memory");

    for (size_t p = 0; p < np && !rc; p++)
        if (considered[p] && !(rc = userstat_on(m, p)) &&
            !(rc = read_rows(m, p, sql_changed, got_changed)))
            t0[p] = now_seconds();
    if (!rc)
        sleep_ms(sample_ms);
    for (size_t p = 0; p < np && !rc; p++) {
        double el;
        if (!considered[p] || (rc = read_rows(m, p, sql_changed, got_changed_again)))
            continue;
        el = now_seconds() - t0[p];
        for (unsigned s = 0; s < m->nshards; s++)
            if (m->pair_of[s] == (long)p)
                m->writes[s] = el > 0 ? m->writes[s] / el : 0;
    }
    if (rc)
        rc = shard__fail_prefix(rc, "measuring the write rate: ");
    free(t0);
    return rc;
}

/* ---- planning ------------------------------------------------------------------- */

static double spread_of(const double *pair_load, const bool *considered, const bool *drained,
                        size_t np)
{
    double total = 0, lo = 0, hi = 0;
    size_t nactive = 0;

    for (size_t p = 0; p < np; p++) {
        if (!considered[p])
            continue;
        total += pair_load[p];
        if (drained[p])
            continue;
        if (!nactive++ || pair_load[p] < lo)
            lo = pair_load[p];
        if (nactive == 1 || pair_load[p] > hi)
            hi = pair_load[p];
    }
    return nactive && total > 0 ? (hi - lo) / (total / (double)nactive) : 0;
}

static int unfinished_moves(shard_ctx *ctx, const shard_map *map, const bool *considered)
{
    for (size_t p = 0; p < map->npairs; p++) {
        int rc;
        if (considered[p] && (rc = move_refuse_unfinished(ctx, map, map->pairs[p].name,
                                                          "rebalancing refused", NULL)))
            return rc;
    }
    return 0;
}

static int build_plan(const shard_map *map, const measure *m, const shard_rebalance_options *o,
                      const bool *considered, const bool *drained, const double *load,
                      const rebal_step *steps, size_t nsteps, shard_rebalance **out)
{
    size_t np = map->npairs, k = 0;
    shard_rebalance *pl = shard__calloc(1, sizeof *pl);
    long *after = shard__malloc((m->nshards ? m->nshards : 1) * sizeof *after);
    double *lb = shard__calloc(np, sizeof *lb), *la = shard__calloc(np, sizeof *la);
    int rc = 0;

    if (!pl || !after || !lb || !la || !(pl->moves = shard__calloc(nsteps, sizeof *pl->moves)) ||
        !(pl->pairs = shard__calloc(np, sizeof *pl->pairs))) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
        goto out;
    }
    pl->map_version = map->version;
    memcpy(after, m->pair_of, m->nshards * sizeof *after);
    for (size_t i = 0; i < nsteps; i++) {
        shard_rebalance_move *mv = &pl->moves[i];
        mv->first = steps[i].first;
        mv->last = steps[i].last;
        snprintf(mv->from, sizeof mv->from, "%s", map->pairs[steps[i].from].name);
        snprintf(mv->to, sizeof mv->to, "%s", map->pairs[steps[i].to].name);
        mv->drain = steps[i].drain;
        for (unsigned s = mv->first; s <= mv->last; s++) {
            mv->bytes += m->bytes[s];
            mv->writes += m->writes[s];
            after[s] = (long)steps[i].to;
        }
    }
    pl->nmoves = nsteps;
    for (size_t p = 0; p < np; p++) {
        shard_rebalance_pair *pp;
        if (!considered[p])
            continue;
        pp = &pl->pairs[k++];
        snprintf(pp->name, sizeof pp->name, "%s", map->pairs[p].name);
        pp->drained = drained[p];
        for (unsigned s = 0; s < m->nshards; s++) {
            if (m->pair_of[s] == (long)p) {
                pp->shards_before++;
                pp->bytes_before += m->bytes[s];
                pp->writes_before += m->writes[s];
                pp->load_before += load[s];
            }
            if (after[s] == (long)p) {
                pp->shards_after++;
                pp->bytes_after += m->bytes[s];
                pp->writes_after += m->writes[s];
                pp->load_after += load[s];
            }
        }
    }
    pl->npairs = k;
    rebal_pair_loads(np, m->nshards, m->pair_of, load, lb);
    rebal_pair_loads(np, m->nshards, after, load, la);
    pl->spread_before = spread_of(lb, considered, drained, np);
    pl->spread_after = spread_of(la, considered, drained, np);
    (void)o;
out:
    if (rc)
        shard_rebalance_free(pl);
    else
        *out = pl;
    free(after);
    free(lb);
    free(la);
    return rc;
}

static int plan_measured(shard_ctx *ctx, const shard_map *map, const shard_rebalance_options *o,
                         const bool *considered, const bool *drained,
                         shard_rebalance **out)
{
    size_t np = map->npairs;
    measure m = {ctx, map, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    double *load = NULL;
    rebal_step *steps = NULL;
    size_t nsteps = 0;
    int rc = 0;

    for (size_t i = 0; i < map->nranges; i++)
        if (map->ranges[i].hi + 1 > m.nshards)
            m.nshards = map->ranges[i].hi + 1;
    m.pair_of = shard__malloc((m.nshards ? m.nshards : 1) * sizeof *m.pair_of);
    m.bytes = shard__calloc(m.nshards, sizeof *m.bytes);
    m.writes = shard__calloc(m.nshards, sizeof *m.writes);
    m.changed = shard__calloc(m.nshards, sizeof *m.changed);
    m.seen = shard__calloc(m.nshards, sizeof *m.seen);
    m.conns = shard__calloc(np, sizeof *m.conns);
    m.conn_rc = shard__calloc(np, sizeof *m.conn_rc);
    load = shard__calloc(m.nshards, sizeof *load);
    if (!m.pair_of || !m.bytes || !m.writes || !m.changed || !m.seen || !m.conns ||
        !m.conn_rc || !load) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
        goto out;
    }
    for (unsigned s = 0; s < m.nshards; s++)
        m.pair_of[s] = shard__map_pair_index(map, s);
    for (size_t p = 0; p < np && !rc; p++) {
        shard_server *srv;
        if (!considered[p])
            continue;
        if (!(srv = ctx_server(ctx, map, p)))
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
        else if ((rc = conn_get(ctx, srv, &m.conns[p])))
            rc = shard__fail_prefix(rc, "pair %s: ", map->pairs[p].name);
        else
            rc = measure_sizes(&m, p);
    }
    if (!rc && o->by == SHARD_REBALANCE_BY_WRITES)
        rc = measure_writes(&m, considered, o->sample_ms);
    if (rc)
        goto out;
    for (unsigned s = 0; s < m.nshards; s++) {
        /* Shards of pairs outside the plan stay where they are. */
        if (m.pair_of[s] >= 0 && !considered[m.pair_of[s]])
            m.pair_of[s] = -1;
        load[s] = o->by == SHARD_REBALANCE_BY_WRITES ? m.writes[s] : (double)m.bytes[s];
    }
    {
        rebal_input in = {np, considered, drained, m.nshards, m.pair_of, load, o->threshold,
                          o->max_moves};
        rc = rebal_compute(&in, &steps, &nsteps);
    }
    if (!rc)
        rc = build_plan(map, &m, o, considered, drained, load, steps, nsteps, out);
out:
    for (size_t p = 0; m.conns && m.conn_rc && p < np; p++)
        conn_release(m.conns[p], m.conn_rc[p]);
    free(m.pair_of);
    free(m.bytes);
    free(m.writes);
    free(m.changed);
    free(m.seen);
    free(m.conns);
    free(m.conn_rc);
    free(load);
    free(steps);
    return rc;
}

int shard_rebalance_plan(shard_ctx *ctx, const shard_rebalance_options *opts,
                         shard_rebalance **out)
{
    shard_rebalance_options o;
    shard_map *map = NULL;
    bool *considered = NULL, *drained = NULL;
    size_t nactive = 0, nconsidered = 0;
    int rc;

    if (!ctx || !out)
        return shard__fail(SHARD_EINVAL, "shard_rebalance_plan: NULL argument");
    *out = NULL;
    if ((rc = copy_options(opts, &o)))
        return rc;
    if ((rc = shard_ctx_reload(ctx)))
        return rc;
    if (!(map = ctx_map(ctx)))
        return shard__fail(SHARD_EINTERNAL, "the context has no map");
    considered = shard__calloc(map->npairs, sizeof *considered);
    drained = shard__calloc(map->npairs, sizeof *drained);
    if (!considered || !drained) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
        goto out;
    }
    if (o.pairs)
        rc = pair_list(map, o.pairs, "the pairs to rebalance", considered);
    else
        for (size_t p = 0; p < map->npairs; p++)
            considered[p] = true;
    if (!rc && o.drain)
        rc = pair_list(map, o.drain, "the pairs to drain", drained);
    if (rc)
        goto out;
    for (size_t p = 0; p < map->npairs; p++) {
        considered[p] = considered[p] || drained[p]; /* a drained pair is always considered */
        nactive += considered[p] && !drained[p];
        nconsidered += considered[p];
    }
    if (o.pairs && nconsidered < 2) {
        /* One pair has nobody to give shards to: a plan of nothing. */
        rc = shard__fail(SHARD_EINVAL, "the pairs to rebalance \"%.200s\": a rebalance moves "
                        "shards between two pairs or more, and this names one", o.pairs);
        goto out;
    }
    if (!nactive) {
        rc = shard__fail(SHARD_EINVAL, "every pair considered is to be drained: no pair is "
                        "left to take their shards");
        goto out;
    }
    if (!(rc = unfinished_moves(ctx, map, considered)))
        rc = plan_measured(ctx, map, &o, considered, drained, out);
out:
    free(considered);
    free(drained);
    shard_map_free(map);
    return rc;
}

/* ---- running -------------------------------------------------------------------- */

/* Whether every shard of the move is still served by its source. */
static int still_on_source(shard_ctx *ctx, const shard_rebalance_move *mv)
{
    shard_map *map = ctx_map(ctx);
    int rc = map ? 0 : shard__fail(SHARD_EINTERNAL, "the context has no map");

    for (unsigned s = mv->first; !rc && s <= mv->last; s++) {
        long p = shard__map_pair_index(map, s);
        if (p < 0 || strcmp(map->pairs[p].name, mv->from) != 0)
            rc = shard__fail(SHARD_ECONFLICT, "shard %u is no longer on pair %s (the map "
                            "changed since the plan): plan again", s, mv->from);
    }
    shard_map_free(map);
    return rc;
}

int shard_rebalance_run(shard_ctx *ctx, const shard_rebalance *plan,
                        const shard_rebalance_options *opts, size_t *done)
{
    shard_rebalance_options o;
    shard_map *map;
    uint64_t version;
    int rc;

    if (done)
        *done = 0;
    if (!ctx || !plan)
        return shard__fail(SHARD_EINVAL, "shard_rebalance_run: NULL argument");
    if ((rc = copy_options(opts, &o)) || (rc = shard_ctx_reload(ctx)))
        return rc;
    if (!(map = ctx_map(ctx)))
        return shard__fail(SHARD_EINTERNAL, "the context has no map");
    version = map->version;
    shard_map_free(map);
    if (version != plan->map_version)
        return shard__fail(SHARD_ECONFLICT, "the map is at version %llu, the plan was made on "
                          "version %llu: plan again", (unsigned long long)version,
                          (unsigned long long)plan->map_version);
    /* A rebalance built against 0.1.0 (options version 1): its moves'
     * progress callback never sees a phase 0.1.0 did not have. */
    report_progress_first w;
    const shard_move_options *mopts = o.version < 2 ? report_opts_first(o.move, &w) : o.move;

    for (size_t i = 0; i < plan->nmoves; i++) {
        const shard_rebalance_move *mv = &plan->moves[i];
        shard_move_report report = SHARD_MOVE_REPORT_INIT, first_layout;
        shard_errsave saved;
        int stop;

        if (o.step && o.step(mv, i, plan->nmoves, 0, NULL, o.payload))
            return 0;
        if ((rc = still_on_source(ctx, mv)))
            return rc;
        rc = shard_move(ctx, mv->first, mv->last, mv->to, mopts, &report, NULL);
        /* Done, its source's copies left to drop: dropped before the next
         * move, so that a stopped rebalance leaves none behind. */
        if (rc == 0 && report.phase == SHARD_MOVE_DONE && !report.source_dropped &&
            !(o.move && (o.move->flags & SHARD_MOVE_KEEP_SOURCE))) {
            shard_move_report dropped = SHARD_MOVE_REPORT_INIT;
            if ((rc = shard_move_resume(ctx, report.move_id, mopts, &dropped)) == 0)
                report.source_dropped = dropped.source_dropped;
        }
        if (rc)
            rc = shard__fail_prefix(rc, "move %zu of %zu (shards %u-%u from %s to %s): ", i + 1,
                                   plan->nmoves, mv->first, mv->last, mv->from, mv->to);
        shard__error_save(&saved, rc);
        if (o.step && o.version < 2) { /* a step built before reports had a version */
            report_move_first(&first_layout, &report);
        }
        stop = o.step ? o.step(mv, i, plan->nmoves, rc, o.version < 2 ? &first_layout : &report,
                               o.payload)
                      : 0;
        if (rc)
            return shard__error_restore(&saved);
        if (done)
            (*done)++;
        if (stop)
            return 0;
    }
    return 0;
}
