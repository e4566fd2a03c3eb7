/*
 * Catch-up (libshard-move(7), phase catchup, and "Many moves at once"): a
 * named replication connection on the target master, from the source
 * master, filtered to the moved databases. Moves from one source pair to
 * one target pair share it (MariaDB allows one connection per master), and
 * the reverse stream of reversible moves (libshard-move(7), "Revert") is the
 * same kind of connection the other way round.
 */
#include "move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- sets of database names ------------------------------------------------------- */

typedef struct dbset {
    char (*v)[SHARD_DBNAME_MAX];
    size_t n, cap;
} dbset;

static int dbset_add(dbset *s, const char *db, size_t len)
{
    char name[SHARD_DBNAME_MAX];

    if (len == 0 || len >= sizeof name)
        return 0;
    memcpy(name, db, len);
    name[len] = '\0';
    if (!move_name_ok(name)) /* not one of ours: never put into a statement */
        return 0;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return 0;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        void *nv = shard__realloc(s->v, nc * sizeof *s->v);
        if (!nv)
            return shard__fail(SHARD_ENOMEM, "out of memory");
        s->v = nv;
        s->cap = nc;
    }
    memcpy(s->v[s->n++], name, len + 1);
    return 0;
}

static int dbset_add_csv(dbset *s, const char *csv)
{
    int rc = 0;

    while (rc == 0 && csv && *csv) {
        const char *comma = strchr(csv, ',');
        size_t len = comma ? (size_t)(comma - csv) : strlen(csv);
        rc = dbset_add(s, csv, len);
        csv = comma ? comma + 1 : NULL;
    }
    return rc;
}

static int dbset_add_range(dbset *s, const mv *m, unsigned first, unsigned last)
{
    int rc = 0;

    for (unsigned sh = first; rc == 0 && sh <= last; sh++) {
        char db[SHARD_DBNAME_MAX];
        move_db(m, sh, db);
        rc = dbset_add(s, db, strlen(db));
    }
    return rc;
}

static void dbset_del_range(dbset *s, const mv *m)
{
    for (unsigned sh = m->first; sh <= m->last; sh++) {
        char db[SHARD_DBNAME_MAX];
        move_db(m, sh, db);
        for (size_t i = 0; i < s->n; i++)
            if (strcmp(s->v[i], db) == 0) {
                memmove(s->v[i], s->v[s->n - 1], sizeof s->v[i]);
                s->n--;
                break;
            }
    }
}

static bool dbset_has(const dbset *s, const char *db)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], db) == 0)
            return true;
    return false;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* "a,b,c", sorted (the server gives a filter back as it was set). */
static int dbset_text(dbset *s, sqlbuf *out)
{
    sql_init(out);
    sql_add(out, "");
    if (s->n)
        qsort(s->v, s->n, sizeof *s->v, name_cmp);
    for (size_t i = 0; i < s->n; i++) {
        sql_add(out, i ? "," : "");
        sql_add(out, s->v[i]);
    }
    return sql_check(out);
}

static void dbset_free(dbset *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* ---- the connections ------------------------------------------------------------- */

/* The connection on side's master (of the journal's two) reading the other. */
static void link_on(mv *m, int side, move_link *l)
{
    l->c = m->sides[side].c;
    l->pair = move_pair(m, side);
    l->from = move_pair(m, !side);
    l->name = m->sides[side].link;
    l->reverse = side == 0;
}

void move_link_forward(mv *m, move_link *l)
{
    link_on(m, !m->dir, l);
}

void move_link_reverse(mv *m, move_link *l)
{
    link_on(m, m->dir, l);
}

/*
 * The domain of the server master's pair link reads from (its standby),
 * when that server does not answer (a master a forced failover replaced):
 * the one whose last transaction in master's binary log that server wrote
 * (the link's Master_Server_Id). None found: *n unchanged.
 */
static int dead_standby_domain(shard_conn *c, unsigned long *d, size_t *n)
{
    repl_status st;
    const repl_link *own;
    char *pos = NULL;
    int rc;

    if ((rc = repl_status_read(c, &st)))
        return rc;
    own = repl_status_find(&st, "");
    if (own && own->master_server_id && (rc = repl_value(c, "SELECT @@gtid_binlog_pos", &pos)) == 0)
        for (const char *g = pos; *g;) {
            char *end;
            unsigned long dom = strtoul(g, &end, 10), sid = 0;
            if (*end == '-')
                sid = strtoul(end + 1, &end, 10);
            if (sid == own->master_server_id && (*n == 0 || d[0] != dom)) {
                d[(*n)++] = dom;
                break;
            }
            g = strchr(end, ',');
            if (!g++)
                break;
        }
    free(pos);
    repl_status_free(&st);
    return rc;
}

int move_pair_domains(mv *m, const shard_pairdef *p, unsigned long *d, size_t *n)
{
    shard_conn *c = NULL, *sb = NULL;
    uint64_t v = 0;
    int rc;

    *n = 0;
    if ((rc = move_conn(m, &p->master, &c)) == 0 &&
        (rc = repl_value_u64(c, "SELECT @@gtid_domain_id", &v)) == 0)
        d[(*n)++] = (unsigned long)v;
    if (rc == 0 && p->has_standby) {
        if ((rc = move_conn(m, &p->standby, &sb)) == 0 &&
            (rc = repl_value_u64(sb, "SELECT @@gtid_domain_id", &v)) == 0)
            d[(*n)++] = (unsigned long)v;
        else if (rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT)
            rc = dead_standby_domain(c, d, n); /* failed over: the old master's */
        move_close(&sb);
    }
    move_close(&c);
    return rc;
}

/* Changing a shared connection is one mover at a time per server: STOP ALL
 * SLAVES by one and the restart of "what ran" by another must not mix.
 * Another's setup takes seconds; a cut-over holds it up to its flip. */
#define MOVE_SETUP_WAIT_S 120

static int link_lock(shard_conn *c)
{
    return move_get_lock(c, "libshard replication", MOVE_SETUP_WAIT_S,
                         "another mover's replication setup");
}

static void link_unlock(shard_conn *c)
{
    char *v = NULL;
    shard_errsave saved;

    shard__error_save(&saved, 0);
    repl_value(c, "SELECT RELEASE_LOCK('libshard replication')", &v);
    free(v);
    shard__error_restore(&saved);
}

int move_cut_lock(mv *m, bool on)
{
    int rc;

    if (on == m->cut_locked)
        return 0;
    if (!on) {
        link_unlock(move_tgt(m));
        m->cut_locked = false;
        return 0;
    }
    if ((rc = link_lock(move_tgt(m))))
        return rc;
    m->cut_locked = true;
    return 0;
}

/* Who else uses the connection, as the journal says. */
static int registry(mv *m, const move_link *l, dbset *s)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT first_shard, last_shard FROM " MOVES_TABLE " WHERE"
                " source_pair = ");
    sql_hex(&q, move_pair(m, 0)->name, strlen(move_pair(m, 0)->name));
    sql_add(&q, " AND target_pair = ");
    sql_hex(&q, move_pair(m, 1)->name, strlen(move_pair(m, 1)->name));
    sql_addf(&q, " AND id <> %llu AND ", (unsigned long long)m->id);
    if (l->reverse)
        sql_addf(&q, "phase IN (%d, %d) AND reverse_state = 1", MOVE_REVERSIBLE,
                 MOVE_REVERTING);
    else
        sql_addf(&q, "phase IN (%d, %d)", MOVE_CATCHUP, MOVE_FENCED);
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(m->ctl, &q);
    sql_free(&q);
    if (rc)
        return rc;
    if (!(res = mysql_store_result(m->ctl->my)))
        return shard__fail(SHARD_ESERVER, "move journal: %s", mysql_error(m->ctl->my));
    while (rc == 0 && (row = mysql_fetch_row(res)))
        rc = dbset_add_range(s, m, (unsigned)strtoul(row[0], NULL, 10),
                             (unsigned)strtoul(row[1], NULL, 10));
    mysql_free_result(res);
    return rc;
}

/* What the connection carries now (live) and for the other moves of the
 * journal: a restarted server forgot the live filter, the journal not. */
static int others(mv *m, const move_link *l, bool exists, dbset *s)
{
    char sql[160], *live = NULL;
    int rc = 0;

    if (exists) {
        snprintf(sql, sizeof sql, "SELECT @@%s.replicate_do_db", l->name);
        if ((rc = repl_value(l->c, sql, &live)) == 0)
            rc = dbset_add_csv(s, live);
        free(live);
    }
    if (rc == 0)
        rc = registry(m, l, s);
    dbset_del_range(s, m);
    return rc;
}

/* The filter (the connection stopped), checked: an unfiltered start would
 * apply the master's other databases. Never empty. */
static int set_filter(shard_conn *c, const char *name, dbset *s)
{
    char sql[160], *have = NULL;
    sqlbuf want, q;
    int rc;

    if (!s->n)
        return shard__fail(SHARD_EINTERNAL, "replication connection %s: empty filter", name);
    if ((rc = dbset_text(s, &want))) {
        sql_free(&want);
        return rc;
    }
    sql_init(&q);
    sql_addf(&q, "SET GLOBAL %s.replicate_do_db = '", name);
    sql_add(&q, want.s);
    sql_add(&q, "'");
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(c, &q);
    snprintf(sql, sizeof sql, "SELECT @@%s.replicate_do_db", name);
    if (rc == 0)
        rc = repl_value(c, sql, &have);
    if (rc == 0 && strcmp(have, want.s) != 0)
        rc = shard__fail(SHARD_EINTERNAL, "replication filter of %s is \"%.200s\", expected "
                        "\"%.200s\"", name, have, want.s);
    free(have);
    sql_free(&q);
    sql_free(&want);
    return rc;
}

/* Start again what ran of a connection: both threads, or only the one. */
static int start_connection(shard_conn *t, const repl_link *l)
{
    bool io = strcmp(l->io_running, "No") != 0, sql = strcmp(l->sql_running, "No") != 0;
    const char *which = io && sql ? "" : io ? " IO_THREAD" : " SQL_THREAD";

    if (!io && !sql)
        return 0;
    if (!move_name_ok(l->name))
        return shard__fail(SHARD_ESERVER, "unexpected replication connection name");
    return move_runf(t, "START SLAVE '%s'%s", l->name, which);
}

/* MASTER_SSL options of CHANGE MASTER from the map's credentials.tls. */
static int add_tls(shard_conn *t, sqlbuf *q, const shard_tlsdef *tls)
{
    const char *names[] = {"master_ssl_ca", "master_ssl_cert", "master_ssl_key"};
    const char *vals[] = {tls->ca, tls->cert, tls->key};

    sql_add(q, ", master_ssl = 1");
    for (int i = 0; i < 3; i++) {
        char *esc;
        if (!vals[i])
            continue;
        esc = shard__malloc(strlen(vals[i]) * 2 + 1);
        if (!esc)
            return shard__fail(SHARD_ENOMEM, "out of memory");
        mysql_real_escape_string(t->my, esc, vals[i], (unsigned long)strlen(vals[i]));
        sql_addf(q, ", %s = '", names[i]);
        sql_add(q, esc);
        sql_add(q, "'");
        free(esc);
    }
    sql_addf(q, ", master_ssl_verify_server_cert = %d", tls->verify ? 1 : 0);
    return 0;
}

/* CHANGE MASTER for a connection; the statement holds the password and is
 * wiped after use. */
static int change_master(mv *m, const move_link *l)
{
    const char *user = ctx_user(m->ctx, m->map);
    char *esc = NULL, *pesc = NULL, *pw = NULL;
    sqlbuf q;
    int rc;

    if ((rc = ctx_password_copy(m->ctx, &pw)))
        return rc;
    esc = shard__malloc(strlen(user) * 2 + 1);
    pesc = shard__malloc((pw ? strlen(pw) : 0) * 2 + 1);
    if (!esc || !pesc) {
        free(esc);
        free(pesc);
        shard__wipe_free(pw);
        return shard__fail(SHARD_ENOMEM, "out of memory");
    }
    mysql_real_escape_string(l->c->my, esc, user, (unsigned long)strlen(user));
    mysql_real_escape_string(l->c->my, pesc, pw ? pw : "", pw ? (unsigned long)strlen(pw) : 0);
    shard__wipe_free(pw);
    sql_init(&q);
    sql_addf(&q, "CHANGE MASTER '%s' TO master_host = '%s', master_port = %u,"
                 " master_user = '", l->name, l->from->master.host, l->from->master.port);
    sql_add(&q, esc);
    sql_add(&q, "', master_password = '");
    sql_add(&q, pesc);
    sql_add(&q, "', master_use_gtid = slave_pos, master_connect_retry = 1");
    shard__wipe_free(pesc);
    free(esc);
    /* The map's TLS settings apply to the moved rows' trip too (the paths
     * must be valid on the replicating server). */
    if (m->map->tls.enabled)
        rc = add_tls(l->c, &q, &m->map->tls);
    if (rc == 0 && (rc = sql_check(&q)) == 0)
        rc = conn_query(l->c, &q);
    if (q.s)
        memset(q.s, 0, q.len); /* it held the password */
    sql_free(&q);
    return rc;
}

static int set_slave_pos(shard_conn *c, const char *pos)
{
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SET GLOBAL gtid_slave_pos = '");
    sql_add(&q, pos); /* checked by the merge */
    sql_add(&q, "'");
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(c, &q);
    sql_free(&q);
    return rc;
}

/* Another connection of the server reading the same master: MariaDB
 * allows one, and a second with other filters would skip what the first
 * applied (one gtid_slave_pos per domain). */
static int same_master_elsewhere(const repl_status *st, const move_link *l)
{
    for (size_t i = 0; i < st->n; i++) {
        const repl_link *k = &st->links[i];
        if (strcasecmp(k->name, l->name) != 0 && k->master_port == l->from->master.port &&
            strcmp(k->master_host, l->from->master.host) == 0)
            return shard__fail(SHARD_EBUSY, "%s's master already replicates from %s through "
                              "connection \"%s\": finish (or revert) the move that uses it "
                              "first", l->pair->name, l->from->name, k->name);
    }
    return 0;
}

/* Until a connection's master has accepted its start and streams events
 * (bounded: a standby that is down only reconnects later, its own
 * business). */
static void wait_streaming(shard_conn *c, const char *name)
{
    for (int i = 0; i < 100; i++) {
        repl_status st;
        const repl_link *k;
        bool done;

        if (repl_status_read(c, &st))
            return;
        k = repl_status_find(&st, name);
        done = !k || strcmp(k->io_running, "No") == 0 ||
               strstr(k->io_state, "Waiting for master to send event") != NULL;
        repl_status_free(&st);
        if (done)
            return;
        sleep_ms(20);
    }
}

/* The pair's own link was running (its IO thread): it restarts. */
static bool own_link_ran(const repl_status *st)
{
    const repl_link *own = repl_status_find(st, "");
    return own && strcmp(own->io_running, "No") != 0;
}

/*
 * Until the pair's standby holds every event its master has logged so far
 * in the domains of other pairs (bounded; a standby that is down or far
 * behind only delays its own link). Restarted, the pair's own link on the master
 * asks the standby for the master's gtid_slave_pos. For a domain the
 * standby has never logged, MariaDB checks that position again at the
 * first event of the domain it sends, against what it has logged by then:
 * a position the master reached through another connection (another
 * move's catch-up or reverse stream) ahead of the standby fails there,
 * error 1236 ("... which is not in the master's binlog"), and the pair's
 * link stops. Once the standby holds everything the master logged, a
 * domain it lacks is one the master never logged an event of, and every
 * later event of it comes after the position asked for.
 */
#define STANDBY_WAIT_S 30.0

static bool wait_standby_has(mv *m, const move_link *l, const unsigned long *own, size_t nown,
                             double seconds)
{
    double end = now_seconds() + seconds;
    shard_conn *sb = NULL;
    shard_errsave saved;
    char *want = NULL;
    bool done = false;

    if (!l->pair->has_standby)
        return true;
    shard__error_save(&saved, 0);
    /* The master's position now: under a steady stream the standby is
     * always a little behind the latest one. */
    if (repl_value(l->c, "SELECT @@gtid_binlog_pos", &want) == 0 &&
        move_conn(m, &l->pair->standby, &sb) == 0) {
        for (;;) {
            int rc = move_holds(sb, want, own, nown, &done);
            if (done || rc || now_seconds() > end)
                break;
            sleep_ms(20);
        }
    }
    free(want);
    if (!done)
        ctx_log(m->ctx, SHARD_LOG_WARN, "%s: the standby %s did not hold everything its "
                "master logged within %.0f s: the master's own link, restarted now, may "
                "stop with error 1236 (then START SLAVE on %s again)", l->pair->name,
                l->pair->standby.text, seconds, l->pair->master.text);
    move_close(&sb);
    shard__error_restore(&saved);
    return done;
}

/* The map's pair one of whose servers is at host:port (-1: none). */
static long pair_at(const shard_map *map, const char *host, unsigned port)
{
    for (size_t p = 0; p < map->npairs; p++) {
        const shard_pairdef *d = &map->pairs[p];
        if ((d->master.port == port && strcmp(d->master.host, host) == 0) ||
            (d->has_standby && d->standby.port == port && strcmp(d->standby.host, host) == 0))
            return (long)p;
    }
    return -1;
}

/*
 * A server has one gtid_slave_pos per domain, shared by its connections.
 * The start this connection needs may be ahead, in a domain of another
 * connection's source pair, of what that connection has applied there (a
 * move's catch-up that lags): setting it would make that connection skip
 * those events for good, and its move lose the rows in them. So the
 * others get there first: a running one is waited for (bounded), a
 * stopped one refuses the join.
 */
static int others_reached(mv *m, const move_link *l, const repl_status *st, const char *pos,
                          const unsigned long *from, size_t nfrom, const unsigned long *keep,
                          size_t nkeep)
{
    char *cur = NULL;
    int rc;

    if ((rc = repl_value(l->c, "SELECT @@gtid_slave_pos", &cur)) || (rc = repl_gtid_check(cur)))
        goto out;
    for (size_t i = 0; rc == 0 && i < st->n; i++) {
        const repl_link *k = &st->links[i];
        unsigned long d[2];
        size_t nd = 0;
        long pi;

        if (!k->name[0] || strcasecmp(k->name, l->name) == 0 ||
            (pi = pair_at(m->map, k->master_host, k->master_port)) < 0)
            continue;
        if ((rc = move_pair_domains(m, &m->map->pairs[pi], d, &nd)))
            break;
        for (size_t j = 0; rc == 0 && j < nd; j++) {
            bool given = false, have = false;
            uint64_t want = repl_gtid_seq(pos, d[j], &given), now = repl_gtid_seq(cur, d[j], &have);
            char *one = NULL;
            bool reached = false, skip = false;

            for (size_t x = 0; x < nfrom; x++)
                skip |= from[x] == d[j];
            for (size_t x = 0; x < nkeep; x++)
                skip |= keep[x] == d[j];
            if (skip || !given || !have || now >= want)
                continue;
            if ((rc = repl_gtid_only(pos, &d[j], 1, &one)))
                break;
            if (!repl_link_stopped(k))
                rc = repl_wait_pos(l->c, one, MOVE_PAIR_WAIT_S, &reached);
            if (rc == 0 && !reached)
                rc = shard__fail(SHARD_EBUSY, "replication connection %s on %s (%s, from %s) has "
                                "applied domain %lu up to %llu only, and this move's start "
                                "(%s) would make it skip what lies before it: let it catch up "
                                "(resume its move), then try again", k->name, l->pair->name,
                                repl_link_stopped(k) ? "stopped" : "behind",
                                m->map->pairs[pi].name, d[j], (unsigned long long)now, one);
            free(one);
        }
    }
out:
    free(cur);
    return rc;
}

int move_link_join(mv *m, const move_link *l, const char *pos)
{
    unsigned long keep[2], orig[2];
    size_t nkeep = 0, norig = 0;
    dbset other = {0}, mine = {0};
    repl_status st = {0};
    char *cur = NULL, *merged = NULL;
    bool exists, standby_ok;
    int rc;

    if ((rc = link_lock(l->c)))
        return rc;
    if ((rc = move_pair_domains(m, l->pair, keep, &nkeep)) ||
        (rc = move_pair_domains(m, l->from, orig, &norig)) || (rc = repl_status_read(l->c, &st)))
        goto out;
    exists = repl_status_find(&st, l->name) != NULL;
    if ((rc = others(m, l, exists, &other)) || (rc = dbset_add_range(&mine, m, m->first, m->last)))
        goto out;
    /*
     * Joining a connection that carries other moves would need it at this
     * move's start: it is further, and going back would log the moved rows
     * under GTIDs the pair's standby already has (and skips). The mover
     * takes turns instead (libshard-move(7), "Many moves at once").
     */
    if (exists && other.n) {
        rc = shard__fail(SHARD_EBUSY, "replication connection %s carries other moves' "
                        "databases (%s...)", l->name, other.v[0]);
        goto out;
    }
    if ((rc = same_master_elsewhere(&st, l)) ||
        (rc = others_reached(m, l, &st, pos, orig, norig, keep, nkeep)))
        goto out;
    /*
     * gtid_slave_pos can only change with every connection stopped,
     * including the pair's own link: stopped for as short as possible.
     * Its standby first gets what the master applied from elsewhere
     * (wait_standby_has), once while everything runs and once more for
     * what came in before the stop.
     */
    standby_ok = own_link_ran(&st) && wait_standby_has(m, l, keep, nkeep, STANDBY_WAIT_S);
    if ((rc = move_runf(l->c, "STOP ALL SLAVES")) ||
        (rc = repl_value(l->c, "SELECT @@gtid_slave_pos", &cur)))
        goto restart;
    if (standby_ok)
        wait_standby_has(m, l, keep, nkeep, STANDBY_WAIT_S);
    if ((rc = repl_gtid_start(cur, pos, orig, norig, keep, nkeep, &merged)) ||
        (rc = set_slave_pos(l->c, merged)))
        goto restart;
    if (exists)
        move_runf(l->c, "RESET SLAVE '%s' ALL", l->name);
    if ((rc = change_master(m, l)) == 0)
        rc = set_filter(l->c, l->name, &mine);
restart:
    /*
     * Exactly the connections that ran before, however many, the pair's
     * own link first: it asks the standby for gtid_slave_pos, whose entry
     * for the source's domain (the snapshot's) the standby may not have;
     * that is fine until the standby logs later ones of that domain, which
     * it does as soon as this move's rows arrive. So the link connects
     * before the new connection runs.
     */
    {
        const repl_link *own = repl_status_find(&st, "");
        int src = own ? start_connection(l->c, own) : 0;
        if (own && src == 0 && strcmp(own->io_running, "No") != 0)
            wait_streaming(l->c, "");
        if (!rc)
            rc = src;
    }
    if (rc == 0)
        rc = move_runf(l->c, "START SLAVE '%s'", l->name);
    for (size_t i = 0; i < st.n; i++) {
        int src;
        if (strcmp(st.links[i].name, l->name) == 0 || !st.links[i].name[0])
            continue;
        src = start_connection(l->c, &st.links[i]);
        if (!rc)
            rc = src;
    }
out:
    link_unlock(l->c);
    repl_status_free(&st);
    dbset_free(&other);
    dbset_free(&mine);
    free(cur);
    free(merged);
    return rc ? shard__fail_prefix(rc, "replication connection %s on %s: ", l->name,
                                  l->pair->name) : 0;
}

int move_link_leave(mv *m, const move_link *l)
{
    dbset other = {0};
    repl_status st;
    int rc;

    if ((rc = link_lock(l->c)))
        return rc;
    if ((rc = repl_status_read(l->c, &st)))
        goto out;
    if (!repl_status_find(&st, l->name))
        goto out;
    if ((rc = others(m, l, true, &other)) || (rc = move_runf(l->c, "STOP SLAVE '%s'", l->name)))
        goto out;
    if (!other.n)
        rc = move_runf(l->c, "RESET SLAVE '%s' ALL", l->name);
    else if ((rc = set_filter(l->c, l->name, &other)) == 0)
        rc = move_runf(l->c, "START SLAVE '%s'", l->name);
out:
    link_unlock(l->c);
    repl_status_free(&st);
    dbset_free(&other);
    return rc ? shard__fail_prefix(rc, "replication connection %s on %s: ", l->name,
                                  l->pair->name) : 0;
}

/*
 * A connection still reading from a master the map no longer names (its
 * pair failed over) reads from the map's master from where it stopped,
 * which holds the same transactions under the same GTIDs, provided it
 * received every one the connection applied; otherwise the copy is ahead
 * of the source and the move cannot go on (libshard-move(7), "Failover
 * during a move"). k: the connection, stopped.
 */
static int follow_master(mv *m, const move_link *l, const repl_link *k)
{
    const shard_endpoint *ep = &l->from->master;
    shard_conn *from = m->sides[l->reverse ? 1 : 0].c; /* the master l reads */
    unsigned long dom[2];
    size_t ndom = 0;
    char *applied = NULL, *mine = NULL, *has = NULL;
    int rc;

    if (!k || (k->master_port == ep->port && strcmp(k->master_host, ep->host) == 0))
        return 0;
    if ((rc = move_pair_domains(m, l->from, dom, &ndom)) ||
        (rc = repl_value(l->c, "SELECT @@gtid_slave_pos", &applied)) ||
        (rc = repl_gtid_only(applied, dom, ndom, &mine)) ||
        (rc = repl_value(from, "SELECT @@gtid_binlog_pos", &has)))
        goto out;
    if (!repl_gtid_covers(has, mine, NULL, 0)) {
        m->final = true;
        rc = shard__fail(SHARD_ECONFLICT, "pair %s's master is %s now, which lacks transactions "
                        "%s applied from %s:%u (it has %.200s, %s applied %.200s): the copy is "
                        "ahead of the source and cannot go on; abort the move (shardctl move "
                        "abort %llu) and move again", l->from->name, ep->text, l->pair->name,
                        k->master_host, k->master_port, has, l->pair->name, mine,
                        (unsigned long long)m->id);
        goto out;
    }
    ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: replication connection %s on %s reads from %s "
            "(pair %s's master now) instead of %s:%u", (unsigned long long)m->id, l->name,
            l->pair->name, ep->text, l->from->name, k->master_host, k->master_port);
    rc = change_master(m, l);
out:
    free(applied);
    free(mine);
    free(has);
    return rc;
}

int move_link_ensure(mv *m, const move_link *l)
{
    dbset all = {0};
    repl_status st;
    int rc;

    if ((rc = link_lock(l->c)))
        return rc;
    if ((rc = repl_status_read(l->c, &st)))
        goto out;
    if (!repl_status_find(&st, l->name)) {
        rc = shard__fail(SHARD_EINTERNAL, "replication connection %s is gone from %s",
                        l->name, l->pair->name);
        goto out;
    }
    if ((rc = others(m, l, true, &all)) || (rc = dbset_add_range(&all, m, m->first, m->last)))
        goto out;
    move_runf(l->c, "STOP SLAVE '%s'", l->name);
    if ((rc = follow_master(m, l, repl_status_find(&st, l->name))) == 0 &&
        (rc = set_filter(l->c, l->name, &all)) == 0)
        rc = move_runf(l->c, "START SLAVE '%s'", l->name);
out:
    link_unlock(l->c);
    repl_status_free(&st);
    dbset_free(&all);
    return rc;
}

/* An error that reconnecting does not cure (a restarted master is normal;
 * refused credentials are not). */
static bool lasting_error(const char *e)
{
    return e[0] && ((!strstr(e, "error reconnecting") && !strstr(e, "error connecting")) ||
                    strstr(e, "Access denied"));
}

/* move_link_health, and whether the connection exists with the move's
 * databases in its filter (*carries), running or not. */
static int link_look(mv *m, const move_link *l, char *why, size_t size, bool *carries)
{
    repl_status st;
    const repl_link *k;
    dbset have = {0};
    char desc[400];
    int rc, bad = 0;

    *carries = false;
    if ((rc = repl_status_read(l->c, &st)))
        return rc;
    if (!(k = repl_status_find(&st, l->name))) {
        snprintf(why, size, "replication connection %s is gone from %s's master", l->name,
                 l->pair->name);
        bad = 1;
        goto out;
    }
    repl_link_describe(k, desc, sizeof desc);
    if ((rc = dbset_add_csv(&have, k->do_db)))
        goto out;
    for (unsigned s = m->first; s <= m->last && !bad; s++) {
        char db[SHARD_DBNAME_MAX];
        move_db(m, s, db);
        if (!dbset_has(&have, db)) {
            snprintf(why, size, "replication connection %s on %s does not carry %s (its "
                     "filter is \"%.200s\"; %s)", l->name, l->pair->name, db, k->do_db, desc);
            bad = 1;
        }
    }
    *carries = !bad;
    if (!bad && (repl_link_stopped(k) || lasting_error(k->last_sql_error) ||
                 lasting_error(k->last_io_error))) {
        snprintf(why, size, "replication connection %s on %s is broken: %s", l->name,
                 l->pair->name, desc);
        bad = 1;
    }
out:
    repl_status_free(&st);
    dbset_free(&have);
    return rc ? rc : bad;
}

int move_link_health(mv *m, const move_link *l, char *why, size_t size)
{
    bool carries;

    return link_look(m, l, why, size, &carries);
}

int move_link_carries(mv *m, const move_link *l)
{
    char why[600];
    bool carries = false;
    int rc = link_look(m, l, why, sizeof why, &carries);

    return rc < 0 ? rc : carries;
}

/* ---- the catch-up connection and the reverse stream ------------------------------ */

int move_repl_setup(mv *m)
{
    move_link l;
    int rc;

    move_link_forward(m, &l);
    if ((rc = move_link_join(m, &l, m->snap)) == 0)
        m->repl_checked = true;
    return rc ? shard__fail_prefix(rc, "replication to target %s: ", move_dp(m)->name) : 0;
}

int move_repl_start(mv *m)
{
    move_link l;
    int rc;

    move_link_forward(m, &l);
    if ((rc = move_link_ensure(m, &l)) == 0)
        m->repl_checked = true;
    return rc;
}

int move_repl_remove(mv *m)
{
    move_link l;

    move_link_forward(m, &l);
    m->repl_checked = false;
    return move_link_leave(m, &l);
}

/*
 * A resumed move whose journal says the stream was not started may have
 * started it: killed between the join and the journal. Such a stream has
 * applied events since m->rev; joined again from there it would apply
 * them a second time (1062, 1032: a broken stream, an unrevertable move).
 * It carries this move's databases, which no other move's stream does
 * (one reversible move per pair of pairs): adopted as it is, from where
 * it has got to. Its filter set and never started, it starts from m->rev,
 * which the join set.
 */
int move_reverse_setup(mv *m)
{
    move_link l;
    int has;

    move_link_reverse(m, &l);
    has = m->resumed ? move_link_carries(m, &l) : 0;
    if (has < 0)
        return has;
    if (has) {
        ctx_log(m->ctx, SHARD_LOG_INFO, "move %llu: the reverse stream %s was started by an "
                "earlier run: going on from where it is", (unsigned long long)m->id, l.name);
        return move_link_ensure(m, &l);
    }
    return move_link_join(m, &l, m->rev);
}

int move_reverse_start(mv *m)
{
    move_link l;

    move_link_reverse(m, &l);
    return move_link_ensure(m, &l);
}

int move_reverse_remove(mv *m)
{
    move_link l;

    move_link_reverse(m, &l);
    return move_link_leave(m, &l);
}

static void pair_link_start(mv *m, const move_link *l)
{
    unsigned long own[2];
    size_t nown = 0;
    shard_errsave saved;
    repl_status st;
    const repl_link *k;

    if (!l->c || repl_status_read(l->c, &st))
        return;
    /* Killed between STOP ALL SLAVES and the restart, the pair's link stays
     * stopped: start it (a server without one is fine), once its standby
     * holds what the master applied from elsewhere (wait_standby_has). */
    if ((k = repl_status_find(&st, "")) && !repl_link_running(k)) {
        shard_conn *sb = NULL;
        int answers = !l->pair->has_standby || move_conn(m, &l->pair->standby, &sb) == 0;
        move_close(&sb);
        if (!answers) {
            /* A master a forced failover replaced: started, the link would
             * take what it never sent once it is back. */
            ctx_log(m->ctx, SHARD_LOG_WARN, "%s: the link of %s from %s is left stopped: %s",
                    l->pair->name, l->pair->master.text, l->pair->standby.text, shard_errmsg());
            repl_status_free(&st);
            return;
        }
        shard__error_save(&saved, 0);
        /* Both threads stopped: START SLAVE asks from gtid_slave_pos again. */
        if (strcmp(k->io_running, "No") == 0 && strcmp(k->sql_running, "No") == 0 &&
            move_pair_domains(m, l->pair, own, &nown) == 0)
            wait_standby_has(m, l, own, nown, STANDBY_WAIT_S);
        shard__error_restore(&saved);
        move_runf(l->c, "START SLAVE");
    }
    repl_status_free(&st);
}

void move_pair_link_start(mv *m)
{
    move_link l;

    move_link_forward(m, &l);
    pair_link_start(m, &l);
    move_link_reverse(m, &l); /* the reverse stream's server */
    pair_link_start(m, &l);
}

/*
 * The catch-up's connection stopped with error 1236 ("connecting slave
 * requested to start from GTID D-S-N, which is not in the master's
 * binlog") in a domain of the replicating pair's own? It asks its master
 * for its own domains at its gtid_slave_pos, and needs nothing of them.
 * MariaDB checks a position in a domain its master has never logged only
 * at the first event of that domain it sends, and that check, unlike the
 * one at connect, ignores gtid_ignore_duplicates: another move's catch-up
 * into this connection's master (from this very pair, at once) can log
 * older events of the domain after the connect (seen in server_unmoved,
 * three moves at once between three pairs). Reconnected, the connection
 * passes the check at connect (the domain is no longer empty there).
 */
#define OWN_DOMAIN_RESTARTS 5

static bool own_domain_start_missing(mv *m, const move_link *l, const repl_link *k)
{
    static const char start[] = "requested to start from GTID ";
    const char *e = k->last_io_error, *at;
    unsigned long own[2], domain;
    size_t nown = 0;
    shard_errsave saved;
    bool mine = false;

    if (strcmp(k->io_running, "No") != 0 || !strstr(e, "1236") ||
        !strstr(e, "which is not in the master's binlog") || !(at = strstr(e, start)) ||
        sscanf(at + sizeof start - 1, "%lu-", &domain) != 1)
        return false;
    shard__error_save(&saved, 0);
    if (move_pair_domains(m, l->pair, own, &nown) == 0)
        for (size_t i = 0; i < nown; i++)
            mine |= own[i] == domain;
    shard__error_restore(&saved);
    return mine;
}

/* Start it again under the replication setup lock (another mover's join
 * or leave may have every connection stopped), if it still stands so. */
static int restart_own_domain(mv *m, const move_link *l)
{
    repl_status st;
    const repl_link *k;
    int rc;

    if ((rc = link_lock(l->c)))
        return rc;
    if ((rc = repl_status_read(l->c, &st)) == 0) {
        if ((k = repl_status_find(&st, l->name)) && own_domain_start_missing(m, l, k))
            rc = move_runf(l->c, "START SLAVE '%s'", l->name);
        repl_status_free(&st);
    }
    link_unlock(l->c);
    return rc;
}

/* Replication healthy? A stopped SQL thread with an error ends the move. */
static int repl_health(mv *m)
{
    repl_status st;
    const repl_link *l;
    move_link fw;
    int rc;

    move_link_forward(m, &fw);
    if ((rc = repl_status_read(fw.c, &st)))
        return rc;
    if (!(l = repl_status_find(&st, fw.name)))
        rc = shard__fail(SHARD_EINTERNAL, "replication connection %s is gone from the target",
                        fw.name);
    else if (!l->do_db[0])
        rc = shard__fail(SHARD_EINTERNAL, "replication connection %s runs without its "
                        "filter (was the target restarted without skip-slave-start?): "
                        "stop it and abort the move", fw.name);
    else if (!lasting_error(l->last_sql_error) && own_domain_start_missing(m, &fw, l) &&
             m->own_domain_restarts < OWN_DOMAIN_RESTARTS) {
        m->own_domain_restarts++;
        ctx_log(m->ctx, SHARD_LOG_WARN, "replication connection %s on %s: %s; it needs nothing "
                "of that domain (its own pair's): reconnecting it (%u of %d)", fw.name,
                fw.pair->name, l->last_io_error, m->own_domain_restarts, OWN_DOMAIN_RESTARTS);
        rc = restart_own_domain(m, &fw);
    } else {
        const char *errs[] = {l->last_sql_error, l->last_io_error};
        for (int i = 0; i < 2 && rc == 0; i++)
            if (lasting_error(errs[i]))
                rc = shard__fail(SHARD_ESERVER, "replication connection %s: %s", fw.name,
                                errs[i]);
    }
    repl_status_free(&st);
    return rc;
}

int move_wait_applied(mv *m, const char *pos, double seconds, bool *reached)
{
    unsigned long own[2];
    size_t nown = 0;
    char *want = NULL;
    int rc;

    /* The moved rows' writes are in the source pair's own domains. */
    *reached = false;
    if ((rc = move_pair_domains(m, move_sp(m), own, &nown)) ||
        (rc = repl_gtid_only(pos, own, nown, &want)))
        return rc;
    rc = repl_wait_pos(move_tgt(m), want, seconds, reached);
    free(want);
    return rc;
}

/*
 * A catch-up without headway (as many transactions behind as a window ago)
 * is said in the log once a window, with the rates and what the target's
 * applier does: a move can otherwise wait catchup_timeout_s in silence, as
 * when the writers outpace the target's one applier or a session on the
 * target holds a lock the applier needs. The window: a quarter of
 * catchup_timeout_s, 5 to 30 s.
 */
typedef struct headway {
    double t0; /* the window's start; 0: none yet */
    int64_t wrote, applied, behind; /* then: the source's and the target's sums, the gap */
} headway;

static void headway_say(mv *m, const headway *h, double s, int64_t wrote, int64_t applied,
                        int64_t behind)
{
    char state[300] = "", advice[400];
    double wrate = (double)(wrote - h->wrote) / s, arate = (double)(applied - h->applied) / s;
    uint64_t threads = 1;
    repl_status st;
    const repl_link *l;
    move_link fw;

    move_link_forward(m, &fw);
    if (repl_status_read(fw.c, &st) == 0) {
        if ((l = repl_status_find(&st, fw.name)) && l->sql_state[0])
            snprintf(state, sizeof state, "; its applier: \"%.200s\"", l->sql_state);
        repl_status_free(&st);
    }
    if (applied == h->applied)
        snprintf(advice, sizeof advice, "it applied nothing: see what it waits for (SHOW "
                 "PROCESSLIST on %.100s: a session holding a lock on a moving table?)",
                 fw.c->srv->label);
    else if (repl_value_u64(fw.c, "SELECT @@slave_parallel_threads", &threads) == 0 &&
             threads == 0)
        snprintf(advice, sizeof advice, "the source writes faster than the target applies: "
                 "lighten the writes to the moving shards, or let the target apply in "
                 "parallel (slave_parallel_threads is 0 on %.100s)", fw.c->srv->label);
    else
        snprintf(advice, sizeof advice, "the source writes faster than the target applies: "
                 "lighten the writes to the moving shards");
    ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: the target %s is not catching up: it is "
            "%lld transaction%s behind the source, and was %lld behind %.0f s ago (meanwhile "
            "the source wrote "
            "%.0f/s, replication connection %s on %s applied %.0f/s%s); %s. The cut-over "
            "waits until the target is within max_lag_ms (%u ms); the move gives up after "
            "catchup_timeout_s (%u s)",
            (unsigned long long)m->id, move_dp(m)->name, (long long)behind,
            behind == 1 ? "" : "s", (long long)h->behind, s, wrate, fw.name, fw.pair->name,
            arate, state, advice, m->o.max_lag_ms, m->o.catchup_timeout_s);
}

/* want: the source's position in its own domains (own). */
static void headway_check(mv *m, headway *h, const char *want, const unsigned long *own,
                          size_t nown)
{
    double now = now_seconds(), window = m->o.catchup_timeout_s / 4.0;
    char *have = NULL, *mine = NULL;
    shard_errsave saved;

    window = window < 5 ? 5 : window > 30 ? 30 : window;
    if (h->t0 && now - h->t0 < window)
        return;
    /* Only words in the log: a failure here is the next statement's to report. */
    shard__error_save(&saved, 0);
    if (repl_value(move_tgt(m), "SELECT @@gtid_slave_pos", &have) == 0 &&
        repl_gtid_only(have, own, nown, &mine) == 0) {
        int64_t wrote = repl_gtid_behind(want, ""), applied = repl_gtid_behind(mine, ""),
                behind = repl_gtid_behind(want, mine);
        if (h->t0 && behind > 0 && behind >= h->behind)
            headway_say(m, h, now - h->t0, wrote, applied, behind);
        *h = (headway){now, wrote, applied, behind};
    }
    free(have);
    free(mine);
    shard__error_restore(&saved);
}

/* Until the target is within max_lag_ms of the source. */
int move_catch_up(mv *m)
{
    double t0 = now_seconds(), lag = m->o.max_lag_ms / 1000.0;
    headway h = {0, 0, 0, 0};
    unsigned long own[2];
    size_t nown = 0;
    int rc;

    if ((rc = move_pair_domains(m, move_sp(m), own, &nown)))
        return rc;
    for (;;) {
        char *pos = NULL, *want = NULL;
        bool reached = false;
        /* The moved rows' writes are in the source pair's own domains. */
        if ((rc = repl_value(move_src(m), "SELECT @@gtid_binlog_pos", &pos)) == 0 &&
            (rc = repl_gtid_only(pos, own, nown, &want)) == 0)
            rc = repl_wait_pos(move_tgt(m), want, lag, &reached);
        free(pos);
        if (rc == 0 && !reached && (rc = repl_health(m)) == 0)
            headway_check(m, &h, want, own, nown);
        free(want);
        if (rc)
            return rc;
        if (reached)
            break;
        if (now_seconds() - t0 > m->o.catchup_timeout_s && (m->final = true))
            return shard__fail(SHARD_ETIMEOUT, "the target did not catch up within %u s",
                              m->o.catchup_timeout_s);
        move_progress(m, m->dir ? SHARD_MOVE_REVERTING : SHARD_MOVE_CATCHUP, 0, 0);
    }
    m->r->catchup_seconds += now_seconds() - t0;
    return 0;
}
