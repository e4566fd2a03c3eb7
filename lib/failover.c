/*
 * Failover, as shard_pair_failover(3) describes it: promote a pair's
 * standby. Refuse what cannot be done safely (an unfinished move, halves
 * that could hand out the same local ids, an application account that
 * writes through read_only), fence the old master read-only if it answers,
 * let the standby apply everything it can, swap the roles in a new map
 * version, and say how far behind it was. Asynchronous replication's known
 * risk stays: writes the master committed but never sent are lost when it
 * is dead (SHARD_FAILOVER_FORCE); their IDs are never handed out again.
 */
#include "move/face.h"
#include "publish.h"
#include "repl.h"
#include "report.h"

#include <mysqld_error.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A forced promotion raises every object table's AUTO_INCREMENT this far
 * past the highest local id the promoted server knows of
 * (shard_pair_failover(3), "Local ids"). */
#define ID_MARGIN UINT64_C(10000000)
#define RAISE_WORKERS 4
#define MAX_ROLES 32

/* ---- local ids: the halves of a pair hand out disjoint values ---------- */

typedef struct id_settings {
    unsigned long inc, off; /* auto_increment_increment, auto_increment_offset */
} id_settings;

static int id_settings_of(shard_conn *c, id_settings *out)
{
    char v[64];
    int rc = conn_value(c, "SELECT CONCAT(@@global.auto_increment_increment, ' ',"
                           " @@global.auto_increment_offset)", v, sizeof v);
    if (rc)
        return rc;
    if (sscanf(v, "%lu %lu", &out->inc, &out->off) != 2)
        return shard__fail(SHARD_ESERVER, "%s: unexpected auto_increment settings \"%s\"",
                          c->srv->label, v);
    return 0;
}

/* A server on its own steps by 2 or more with an offset within the step. */
static bool id_step_ok(const id_settings *s)
{
    return s->inc >= 2 && s->off >= 1 && s->off <= s->inc;
}

static int check_ids_disjoint(const shard_pairdef *p, shard_conn *ms, shard_conn *sb)
{
    id_settings m, s;
    int rc;

    if ((rc = id_settings_of(ms, &m)) || (rc = id_settings_of(sb, &s)))
        return rc;
    if (id_step_ok(&m) && id_step_ok(&s) && m.inc == s.inc && m.off != s.off)
        return 0;
    return shard__fail(SHARD_EINVAL, "pair %s could hand out the same local ids twice: "
                      "master %s has auto_increment_increment=%lu, auto_increment_offset=%lu; "
                      "standby %s has auto_increment_increment=%lu, auto_increment_offset=%lu. "
                      "Give both the same increment (2 or more) and different offsets within "
                      "it, then fail over again (see shard_pair_failover(3))",
                      p->name, p->master.text, m.inc, m.off, p->standby.text, s.inc, s.off);
}

/* ---- the fence: can the application's account write through read_only? -- */

typedef struct grant_scan {
    shard_conn *c;
    bool super_bypasses;  /* SUPER writes through read_only (before MariaDB 10.11, MySQL) */
    bool mysql;           /* MySQL: CONNECTION_ADMIN does too */
    char seen[MAX_ROLES][200]; /* roles already looked at */
    int nseen;
    char priv[64];        /* what was found ("" none) */
    char via[200];        /* the role that carries it ("" directly) */
} grant_scan;

/* `name` with backticks doubled. */
static void sql_quoted(sqlbuf *q, const char *name)
{
    sql_add(q, "`");
    for (const char *s = name; *s; s++) {
        char ch[3] = {*s, *s == '`' ? '`' : '\0', '\0'};
        sql_add(q, ch);
    }
    sql_add(q, "`");
}

static bool bypass_priv(const grant_scan *g, const char *p, size_t n)
{
#define IS(s) (n == sizeof s - 1 && strncasecmp(p, s, n) == 0)
    return IS("ALL PRIVILEGES") || IS("ALL") || IS("READ_ONLY ADMIN") ||
           (g->super_bypasses && IS("SUPER")) || (g->mysql && IS("CONNECTION_ADMIN"));
#undef IS
}

/* A global grant ("GRANT a, b ON *.* TO ..."): sets g->priv to the privilege
 * in it that writes through read_only. */
static void scan_priv_line(grant_scan *g, const char *line, const char *via)
{
    const char *end = strstr(line, " ON *.* TO ");
    const char *p = line + 6;

    if (!end)
        return;
    while (p < end && !g->priv[0]) {
        const char *e = memchr(p, ',', (size_t)(end - p));
        const char *stop = e ? e : end;
        while (p < stop && *p == ' ')
            p++;
        if (bypass_priv(g, p, (size_t)(stop - p))) {
            snprintf(g->priv, sizeof g->priv, "%.*s", (int)(stop - p), p);
            snprintf(g->via, sizeof g->via, "%s", via);
        }
        p = stop + 1;
    }
}

/* A backtick-quoted name at *p into out; *p moves past it. */
static bool take_quoted(const char **p, char *out, size_t size)
{
    const char *s = *p;
    size_t n = 0;

    if (*s++ != '`')
        return false;
    for (; *s; s++) {
        if (*s == '`' && s[1] == '`')
            s++;
        else if (*s == '`')
            break;
        if (n + 1 < size)
            out[n++] = *s;
    }
    out[n] = '\0';
    if (*s != '`')
        return false;
    *p = s + 1;
    return true;
}

static int scan_account(grant_scan *g, const char *user, const char *host, const char *via);

/* A role grant ("GRANT `r`[@`h`][,`r2`...] TO ..."): scan each role once.
 * Whatever cannot be read fails: an unread grant could be the one. */
static int scan_role_line(grant_scan *g, const char *line)
{
    const char *p = line + 6;
    int rc;

    while (*p == '`' && !g->priv[0]) {
        char role[200], host[256] = "";
        bool seen = false, ok = take_quoted(&p, role, sizeof role);
        if (ok && *p == '@') { /* MySQL: role@host */
            p++;
            ok = take_quoted(&p, host, sizeof host);
        }
        if (!ok)
            return shard__fail(SHARD_ESERVER, "unexpected grant \"%.200s\"", line);
        for (int i = 0; i < g->nseen; i++)
            seen = seen || strcmp(g->seen[i], role) == 0;
        if (!seen) {
            if (g->nseen == MAX_ROLES)
                return shard__fail(SHARD_ESERVER, "more than %d roles to check", MAX_ROLES);
            snprintf(g->seen[g->nseen++], sizeof g->seen[0], "%s", role);
            if ((rc = scan_account(g, role, host[0] ? host : NULL, role)))
                return rc;
        }
        if (*p != ',')
            break;
        p++;
    }
    return 0;
}

/* SHOW GRANTS FOR user[@host] (host NULL: a role), following its roles. */
static int scan_account(grant_scan *g, const char *user, const char *host, const char *via)
{
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SHOW GRANTS FOR ");
    sql_quoted(&q, user);
    if (host) {
        sql_add(&q, "@");
        sql_quoted(&q, host);
    }
    rc = conn_select(g->c, &q, &res);
    sql_free(&q);
    if (rc)
        return shard__fail_prefix(rc, "cannot read the grants of %s%s%s (the failover's "
                                 "account needs to read the mysql schema): ", user,
                                 host ? "@" : "", host ? host : "");
    while (!g->priv[0] && (row = mysql_fetch_row(res)) && row[0]) {
        if (strncmp(row[0], "GRANT `", 7) == 0)
            rc = scan_role_line(g, row[0]);
        else if (strncmp(row[0], "GRANT ", 6) == 0)
            scan_priv_line(g, row[0], via);
        if (rc)
            break;
    }
    mysql_free_result(res);
    return rc;
}

/*
 * The fence is read_only on the old master: refuse when the map's
 * application account (any of its host entries, a role granted to it, or
 * PUBLIC) holds a privilege that writes through it.
 */
static int check_fence_holds(const shard_map *map, const shard_pairdef *p, shard_conn *ms)
{
    grant_scan g;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    char version[128];
    unsigned major = 0, minor = 0;
    sqlbuf q;
    int rc;

    memset(&g, 0, sizeof g);
    g.c = ms;
    if ((rc = conn_value(ms, "SELECT VERSION()", version, sizeof version)))
        return rc;
    sscanf(version, "%u.%u", &major, &minor);
    g.mysql = !strstr(version, "MariaDB");
    /* MariaDB 10.11 took READ_ONLY ADMIN out of SUPER. */
    g.super_bypasses = g.mysql || major < 10 || (major == 10 && minor < 11);
    sql_init(&q);
    sql_add(&q, "SELECT User, Host FROM mysql.user WHERE User = ");
    sql_hex(&q, map->user, strlen(map->user));
    sql_add(&q, " OR (User = 'PUBLIC' AND Host = '') ORDER BY User = 'PUBLIC', Host");
    rc = conn_select(ms, &q, &res);
    sql_free(&q);
    if (rc)
        return shard__fail_prefix(rc, "pair %s: cannot check that the fence holds (whether "
                                 "the application's account %s may write through read_only "
                                 "on %s): ", p->name, map->user, p->master.text);
    while (!g.priv[0] && (row = mysql_fetch_row(res))) {
        bool public = strcmp(row[0], "PUBLIC") == 0 && row[1][0] == '\0';
        if ((rc = scan_account(&g, row[0], public ? NULL : row[1], public ? "PUBLIC" : "")))
            break;
        if (g.priv[0]) {
            rc = shard__fail(SHARD_EPRIV, "pair %s cannot be fenced: the application's account "
                            "%s@%s holds %s on master %s%s%s, which writes through read_only. "
                            "Revoke it (ALL PRIVILEGES includes READ_ONLY ADMIN on MariaDB "
                            "10.11 and later, SUPER before), then fail over again (see "
                            "shard_pair_failover(3))", p->name, map->user,
                            public ? "(any host)" : row[1], g.priv, p->master.text,
                            g.via[0] ? " through role " : "", g.via);
        }
    }
    mysql_free_result(res);
    return rc;
}

/* ---- a forced promotion: counters past what the dead master used -------- */

typedef struct raise_job {
    shard_ctx *ctx;
    const shard_map *map;
    size_t pair;
    shard_server *srv;
    id_settings ids;
    size_t nshards;
    shard_conn *conns[RAISE_WORKERS];
    atomic_uint_fast64_t raised;
} raise_job;

/* The i-th ID shard of the pair. */
static unsigned nth_shard(const raise_job *j, size_t i)
{
    for (size_t r = 0; r < j->map->nranges; r++) {
        const shard_rangedef *rg = &j->map->ranges[r];
        size_t n = (size_t)(rg->hi - rg->lo) + 1;
        if (rg->pair != j->pair)
            continue;
        if (i < n)
            return rg->lo + (unsigned)i;
        i -= n;
    }
    return 0; /* not reached: i < nshards */
}

/* The smallest value >= v that this server's offset can produce. */
static uint64_t align_up(uint64_t v, const id_settings *s)
{
    uint64_t r;
    if (!id_step_ok(s))
        return v;
    r = s->off % s->inc;
    return v + (r + s->inc - v % s->inc) % s->inc;
}

static int raise_one(void *arg, size_t i, unsigned worker)
{
    raise_job *j = arg;
    const shard_objdef *o = &j->map->objects[i % j->map->nobjects];
    shard_conn **c = &j->conns[worker];
    char db[SHARD_DBNAME_MAX];
    uint64_t maxl, next, base, target;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    shard__dbfmt_name(&j->map->dbfmt, nth_shard(j, i / j->map->nobjects), db);
    if (!*c && (rc = conn_get(j->ctx, j->srv, c)))
        return rc;
    sql_init(&q);
    sql_add(&q, "SELECT COALESCE(MAX(local_id), 0), COALESCE((SELECT AUTO_INCREMENT FROM"
                " information_schema.TABLES WHERE TABLE_SCHEMA = ");
    sql_hex(&q, db, strlen(db));
    sql_add(&q, " AND TABLE_NAME = ");
    sql_hex(&q, o->name, strlen(o->name));
    sql_add(&q, "), 0) FROM ");
    sql_table(&q, db, o->name);
    rc = conn_select(*c, &q, &res);
    if (rc) {
        sql_free(&q);
        /* No table, no ids handed out from it. */
        if (rc == SHARD_ESERVER && ((*c)->last_errno == ER_NO_SUCH_TABLE ||
                                    (*c)->last_errno == ER_BAD_DB_ERROR))
            return 0;
        return rc;
    }
    row = mysql_fetch_row(res);
    maxl = row && row[0] ? strtoull(row[0], NULL, 10) : 0;
    next = row && row[1] ? strtoull(row[1], NULL, 10) : 0;
    mysql_free_result(res);
    /* The highest id this server knows was used: its rows, or its counter
     * (which also remembers rows since deleted). */
    base = next > maxl + 1 ? next - 1 : maxl;
    target = align_up(base + ID_MARGIN, &j->ids);
    if (target > SHARD_MAX_LOCAL + 1)
        target = SHARD_MAX_LOCAL + 1; /* creates fail from now on: nothing is reused */
    sql_reset(&q);
    sql_add(&q, "ALTER TABLE ");
    sql_table(&q, db, o->name);
    sql_addf(&q, " AUTO_INCREMENT = %llu", (unsigned long long)target);
    rc = conn_query(*c, &q);
    sql_free(&q);
    if (rc == 0)
        atomic_fetch_add(&j->raised, 1);
    return rc;
}

static int raise_counters(shard_ctx *ctx, const shard_map *map, size_t pair, shard_conn *sb,
                          const id_settings *ids, uint64_t *raised)
{
    raise_job j;
    unsigned workers = ctx->opts.pool_size ? ctx->opts.pool_size : 1;
    int rc;

    memset(&j, 0, sizeof j);
    j.ctx = ctx;
    j.map = map;
    j.pair = pair;
    j.srv = sb->srv;
    j.ids = *ids;
    atomic_init(&j.raised, 0);
    for (size_t r = 0; r < map->nranges; r++)
        if (map->ranges[r].pair == pair)
            j.nshards += (size_t)(map->ranges[r].hi - map->ranges[r].lo) + 1;
    if (workers > RAISE_WORKERS)
        workers = RAISE_WORKERS;
    j.conns[0] = sb; /* worker 0 is this thread: the failover's own connection */
    rc = fanout_run(j.nshards * map->nobjects, workers, raise_one, &j);
    for (unsigned w = 1; w < RAISE_WORKERS; w++)
        conn_put(j.conns[w], rc == 0);
    *raised = atomic_load(&j.raised);
    return rc;
}

/* ---- the flip ---------------------------------------------------------- */

typedef struct swap_arg {
    const char *pair, *old_master;
} swap_arg;

/* The new map: the pair's roles swapped, if its master is still the one
 * fenced. */
static int swap_edit(const shard_map *cur, shard_map **next, void *arg)
{
    const swap_arg *a = arg;
    long pi = shard__map_find_pair(cur, a->pair);

    if (pi < 0 || !cur->pairs[pi].has_standby)
        return shard__fail(SHARD_ECONFLICT, "the stored map changed pair %s meanwhile", a->pair);
    if (strcmp(cur->pairs[pi].master.text, a->old_master) != 0)
        return shard__fail(SHARD_ECONFLICT, "pair %s's master changed meanwhile (now %s)",
                          a->pair, cur->pairs[pi].master.text);
    return map_swap_roles(cur, a->pair, cur->version + 1, next);
}

static int publish_swap(shard_ctx *ctx, const char *pair, const char *old_master,
                        uint64_t *version)
{
    swap_arg a = {pair, old_master};

    return publish_edit(ctx->store, swap_edit, &a, version);
}

static bool promoted_in_store(shard_ctx *ctx, const char *pair, const char *standby)
{
    shard_map *cur = NULL;
    bool yes = false;
    long pi;

    if (shard_store_load(ctx->store, &cur))
        return true; /* cannot tell: keep the old master fenced, the safe side */
    pi = shard__map_find_pair(cur, pair);
    yes = pi >= 0 && strcmp(cur->pairs[pi].master.text, standby) == 0;
    shard_map_free(cur);
    return yes;
}

/* Refuse while a move from or to the pair is unfinished, or when that
 * cannot be known (a master that could not be asked). */
static int check_no_move(shard_ctx *ctx, const shard_map *map, const char *pair)
{
    char what[120];

    snprintf(what, sizeof what, "failover of %s refused", pair);
    return move_refuse_unfinished(ctx, map, pair, what,
                                  "or --force, and check the move afterwards");
}

/* A move (forced past) that involves the pair: say which, and what now
 * (its next steps, as every refusal names them: resume goes on from the
 * promoted master). */
static void warn_moves(shard_ctx *ctx, const char *pair, const char *promoted)
{
    shard_map *now = ctx_map(ctx);
    shard_errsave saved;
    char what[120], besides[400];

    shard__error_save(&saved, 0);
    snprintf(what, sizeof what, "failover of %s", pair);
    snprintf(besides, sizeof besides, "a resume goes on from %s, pair %s's master now",
             promoted, pair);
    if (now && move_refuse_unfinished(ctx, now, pair, what, besides) != 0)
        ctx_log(ctx, SHARD_LOG_WARN, "%s", shard_errmsg());
    shard_map_free(now);
    shard__error_restore(&saved);
}

/* The standby of a dead master: say when its own settings cannot keep its
 * ids apart from the old master's (the raised counters still do). */
static void warn_ids_forced(shard_ctx *ctx, const shard_pairdef *p, const id_settings *s)
{
    if (!id_step_ok(s))
        ctx_log(ctx, SHARD_LOG_WARN, "failover of %s: standby %s has auto_increment_increment"
                "=%lu, auto_increment_offset=%lu, and the dead master's cannot be checked: "
                "only the raised AUTO_INCREMENT counters keep new ids apart from the ones "
                "the old master handed out", p->name, p->standby.text, s->inc, s->off);
}

/* The failover itself, into the library's own report r (the newest layout). */
static int failover(shard_ctx *ctx, const char *pair, const shard_failover_options *o,
                    shard_failover_report *r)
{
    int flags = o->flags;
    shard_map *map = NULL;
    shard_conn *sb = NULL, *ms = NULL;
    shard_server *s;
    const shard_pairdef *p;
    id_settings sbids = {0, 0};
    uint64_t raised = 0;
    char *pos = NULL, *sbpos = NULL;
    repl_status st = {NULL, 0};
    const repl_link *own;
    double t0 = now_seconds(), tw;
    bool reached = false;
    long pi;
    int rc;

    /* The store, not our snapshot: failover acts on the current truth. */
    if ((rc = shard_store_load(ctx->store, &map)))
        return rc;
    pi = shard__map_find_pair(map, pair);
    if (pi < 0) {
        rc = shard__fail(SHARD_EINVAL, "no pair named \"%.64s\" in the map", pair);
        goto out;
    }
    p = &map->pairs[pi];
    if (!p->has_standby) {
        rc = shard__fail(SHARD_EINVAL, "pair %s has no standby to promote", pair);
        goto out;
    }
    snprintf(r->pair, sizeof r->pair, "%s", pair);
    snprintf(r->old_master, sizeof r->old_master, "%s", p->master.text);
    snprintf(r->new_master, sizeof r->new_master, "%s", p->standby.text);
    if (!(s = ctx_server_at(ctx, &p->standby)) || (rc = conn_get(ctx, s, &sb))) {
        rc = shard__fail_prefix(rc ? rc : SHARD_ENOMEM, "standby %s of %s cannot be promoted: ",
                               p->standby.text, pair);
        goto out;
    }
    /* The pair's own (unnamed) replication connection. */
    if ((rc = repl_status_read(sb, &st)))
        goto out;
    own = repl_status_find(&st, "");
    if (own && own->seconds_behind >= 0)
        r->lag_seconds = (double)own->seconds_behind;
    s = ctx_server_at(ctx, &p->master);
    rc = s ? conn_get(ctx, s, &ms) : SHARD_ENOMEM;
    if (rc == 0) {
        /* Nothing has changed yet: refuse here what the fence or the ids
         * could not survive. (A dead master is reported above all: --force
         * is the way past it.) */
        if ((!(flags & SHARD_FAILOVER_FORCE) && (rc = check_no_move(ctx, map, pair))) ||
            (rc = check_ids_disjoint(p, ms, sb)) || (rc = check_fence_holds(map, p, ms)))
            goto out;
        /* Fence: from now on the old master takes no more application writes,
         * so the standby can catch up with everything there is. */
        if ((rc = conn_query_str(ms, "SET GLOBAL read_only = 1")))
            goto out;
        if ((rc = repl_value(ms, "SELECT @@gtid_binlog_pos", &pos)) ||
            (rc = repl_value(sb, "SELECT @@gtid_current_pos", &sbpos))) {
            conn_query_str(ms, "SET GLOBAL read_only = 0"); /* give the master back */
            goto out;
        }
        r->old_master_fenced = 1;
        r->lag_transactions = repl_gtid_behind(pos, sbpos);
    } else if ((flags & SHARD_FAILOVER_FORCE) && (rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT)) {
        ctx_log(ctx, SHARD_LOG_WARN, "failover of %s: master %s does not answer (%s); "
                "promoting the standby: writes it never sent are lost", pair, p->master.text,
                shard_errmsg());
        if ((rc = id_settings_of(sb, &sbids)))
            goto out;
        warn_ids_forced(ctx, p, &sbids);
        /* Apply everything the standby received. */
        pos = shard__strdup(own ? own->gtid_io_pos : "");
        if (!pos) {
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
            goto out;
        }
    } else if (rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT) {
        rc = shard__fail_prefix(rc, "failover of %s refused, nothing promoted: its master %s "
                               "does not answer (--force would promote the standby anyway, "
                               "losing the writes the master never sent): ",
                               pair, p->master.text);
        goto out;
    } else { /* it answered, but refused us (privileges, TLS): it is not dead */
        rc = shard__fail_prefix(rc, "master %s of %s: ", p->master.text, pair);
        goto out;
    }
    tw = now_seconds();
    if (pos[0] && (rc = repl_wait_pos(sb, pos, o->wait_ms / 1000.0, &reached))) {
        if (ms)
            conn_query_str(ms, "SET GLOBAL read_only = 0"); /* give the master back */
        goto out;
    }
    r->wait_ms = (now_seconds() - tw) * 1000.0;
    if (pos[0] && !reached) {
        if (ms)
            conn_query_str(ms, "SET GLOBAL read_only = 0"); /* give the master back */
        rc = shard__fail(SHARD_ETIMEOUT, "standby %s did not apply %.300s within %.3g s "
                        "(the failover's wait); the master was left in charge",
                        p->standby.text, pos, o->wait_ms / 1000.0);
        goto out;
    }
    if (!ms) {
        /* A dead master may come back with transactions it never sent: the
         * promoted server must not take them (they would overwrite newer,
         * acknowledged writes). Its link from the old master stops here; the
         * pair is not redundant again until an operator rebuilds that server. */
        if ((rc = conn_query_str(sb, "STOP SLAVE")))
            goto out;
        /* Those unsent rows had ids too, acknowledged to clients: none may
         * name another object. */
        rc = raise_counters(ctx, map, (size_t)pi, sb, &sbids, &raised);
        if (rc) {
            rc = shard__fail_prefix(rc, "failover of %s: raising the AUTO_INCREMENT counters "
                                   "on %s failed, nothing was published: ", pair,
                                   p->standby.text);
            goto out;
        }
        ctx_log(ctx, SHARD_LOG_WARN, "failover of %s: raised the AUTO_INCREMENT of %llu object "
                "tables on %s by %llu past the highest local id it knew", pair,
                (unsigned long long)raised, p->standby.text,
                (unsigned long long)ID_MARGIN);
    }
    if ((rc = conn_query_str(sb, "SET GLOBAL read_only = 0")) ||
        (rc = publish_swap(ctx, pair, p->master.text, &r->map_version))) {
        /* Not promoted after all? Only then does the old master take writes
         * again: a publish may have landed though its answer was lost. */
        if (ms && !promoted_in_store(ctx, pair, p->standby.text))
            conn_query_str(ms, "SET GLOBAL read_only = 0");
        goto out;
    }
    shard_ctx_reload(ctx);
    r->total_ms = (now_seconds() - t0) * 1000.0;
    ctx_log(ctx, SHARD_LOG_WARN, "failover of %s: %s promoted (map version %llu)", pair,
            p->standby.text, (unsigned long long)r->map_version);
    warn_moves(ctx, pair, p->standby.text);
out:
    free(pos);
    free(sbpos);
    repl_status_free(&st);
    conn_put(sb, false);
    conn_put(ms, false);
    shard_map_free(map);
    return rc;
}

/* The options in the caller's version (only version 1 exists so far). */
static int failover_options(const shard_failover_options *in, shard_failover_options *o)
{
    static const shard_failover_options defaults = SHARD_FAILOVER_OPTIONS_INIT;

    *o = defaults;
    if (!in)
        return 0;
    if (in->version < 1 || in->version > SHARD_FAILOVER_OPTIONS_VERSION)
        return shard__fail(SHARD_EINVAL, "shard_failover_options.version %u is not one this "
                          "library knows (1..%d)", in->version, SHARD_FAILOVER_OPTIONS_VERSION);
    if (in->flags & ~SHARD_FAILOVER_FORCE)
        return shard__fail(SHARD_EINVAL, "shard_failover_options.flags: unknown flags 0x%x",
                          (unsigned)(in->flags & ~SHARD_FAILOVER_FORCE));
    *o = *in;
    return 0;
}

int shard_pair_failover(shard_ctx *ctx, const char *pair, int flags,
                        shard_failover_report *report)
{
    shard_failover_options o = SHARD_FAILOVER_OPTIONS_INIT;

    if (flags & ~SHARD_FAILOVER_FORCE)
        return shard__fail(SHARD_EINVAL, "shard_pair_failover: unknown flags 0x%x", flags);
    o.flags = flags;
    return shard_pair_failover_opts(ctx, pair, &o, report);
}

int shard_pair_failover_opts(shard_ctx *ctx, const char *pair,
                             const shard_failover_options *opts, shard_failover_report *report)
{
    shard_failover_options o;
    shard_failover_report full;
    int rc;

    if (!ctx || !pair)
        return shard__fail(SHARD_EINVAL, "shard_pair_failover: NULL argument");
    if ((rc = failover_options(opts, &o)) || (rc = report_failover_check(report)))
        return rc;
    memset(&full, 0, sizeof full);
    full.lag_transactions = -1;
    full.lag_seconds = -1;
    rc = failover(ctx, pair, &o, &full);
    report_failover_out(report, &full);
    return rc;
}
