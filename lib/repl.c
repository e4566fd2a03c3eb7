/*
 * Replication helpers shared by moves and failover (libshard-move(7),
 * shard_pair_failover(3)). GTID arithmetic has no length limit: a server
 * with many domains prints positions of any size.
 */
#include "repl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- GTID positions ----------------------------------------------------------- */

bool repl_gtid_valid(const char *pos)
{
    for (const char *p = pos; *p; p++)
        if (!((*p >= '0' && *p <= '9') || *p == '-' || *p == ','))
            return false;
    return true;
}

int repl_gtid_check(const char *pos)
{
    if (!repl_gtid_valid(pos))
        return shard__fail(SHARD_ESERVER, "unexpected GTID position \"%.100s\"", pos);
    return 0;
}

/* One entry D-S-N of a position: its domain, sequence number, text and
 * length; returns the next entry (NULL at the end). */
typedef struct gtid_ent {
    unsigned long domain;
    uint64_t seq;
    const char *text;
    size_t len;
} gtid_ent;

static const char *gtid_next(const char *p, gtid_ent *e)
{
    const char *comma, *dash;

    while (*p == ',' || *p == ' ')
        p++;
    if (!*p)
        return NULL;
    comma = strchr(p, ',');
    e->text = p;
    e->len = comma ? (size_t)(comma - p) : strlen(p);
    e->domain = strtoul(p, NULL, 10);
    dash = memchr(p, '-', e->len);
    dash = dash ? memchr(dash + 1, '-', e->len - (size_t)(dash + 1 - p)) : NULL;
    e->seq = dash ? strtoull(dash + 1, NULL, 10) : 0;
    return p + e->len;
}

uint64_t repl_gtid_seq(const char *pos, unsigned long domain, bool *found)
{
    uint64_t seq = 0;
    gtid_ent e;

    if (found)
        *found = false;
    for (const char *p = pos; (p = gtid_next(p, &e));)
        if (e.domain == domain) {
            if (found)
                *found = true;
            if (e.seq > seq)
                seq = e.seq;
        }
    return seq;
}

static bool in_list(const unsigned long *list, size_t n, unsigned long d)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == d)
            return true;
    return false;
}

bool repl_gtid_covers(const char *have, const char *want, const unsigned long *skip,
                      size_t nskip)
{
    gtid_ent e;

    for (const char *p = want; (p = gtid_next(p, &e));)
        if (!in_list(skip, nskip, e.domain) && repl_gtid_seq(have, e.domain, NULL) < e.seq)
            return false;
    return true;
}

int64_t repl_gtid_behind(const char *want, const char *have)
{
    int64_t n = 0;
    gtid_ent e;

    for (const char *p = want; (p = gtid_next(p, &e));) {
        uint64_t h = repl_gtid_seq(have, e.domain, NULL);
        if (e.seq > h)
            n += (int64_t)(e.seq - h);
    }
    return n;
}

int repl_gtid_merge(const char *cur, const char *snap, const unsigned long *keep,
                    size_t nkeep, char **out)
{
    sqlbuf b;
    gtid_ent e;
    int rc;

    *out = NULL;
    if ((rc = repl_gtid_check(cur)) || (rc = repl_gtid_check(snap)))
        return rc;
    sql_init(&b);
    sql_add(&b, "");
    /* The snapshot's domains, but not the target pair's own. */
    for (const char *p = snap; (p = gtid_next(p, &e));) {
        char piece[64];
        if (in_list(keep, nkeep, e.domain))
            continue;
        if (e.len >= sizeof piece)
            return sql_free(&b), repl_gtid_check("?"); /* not D-S-N */
        snprintf(piece, sizeof piece, "%s%.*s", b.len ? "," : "", (int)e.len, e.text);
        sql_add(&b, piece);
    }
    /* The current positions of every domain the snapshot did not give. */
    for (const char *p = cur; (p = gtid_next(p, &e));) {
        char piece[64];
        bool given = false;
        repl_gtid_seq(snap, e.domain, &given);
        if (given && !in_list(keep, nkeep, e.domain))
            continue;
        if (e.len >= sizeof piece)
            return sql_free(&b), repl_gtid_check("?");
        snprintf(piece, sizeof piece, "%s%.*s", b.len ? "," : "", (int)e.len, e.text);
        sql_add(&b, piece);
    }
    if ((rc = sql_check(&b))) {
        sql_free(&b);
        return rc;
    }
    *out = b.s ? b.s : shard__strdup("");
    return *out ? 0 : shard__fail(SHARD_ENOMEM, "out of memory");
}

/* Append entry e to b, comma-separated. */
static int add_entry(sqlbuf *b, const gtid_ent *e)
{
    char piece[64];

    if (e->len >= sizeof piece)
        return repl_gtid_check("?"); /* not D-S-N */
    snprintf(piece, sizeof piece, "%s%.*s", b->len ? "," : "", (int)e->len, e->text);
    sql_add(b, piece);
    return 0;
}

static int finish(sqlbuf *b, int rc, char **out)
{
    if (rc == 0)
        rc = sql_check(b);
    if (rc) {
        sql_free(b);
        return rc;
    }
    *out = b->s ? b->s : shard__strdup("");
    return *out ? 0 : shard__fail(SHARD_ENOMEM, "out of memory");
}

int repl_gtid_start(const char *cur, const char *pos, const unsigned long *from, size_t nfrom,
                    const unsigned long *keep, size_t nkeep, char **out)
{
    sqlbuf b;
    gtid_ent e;
    int rc;

    *out = NULL;
    if ((rc = repl_gtid_check(cur)) || (rc = repl_gtid_check(pos)))
        return rc;
    sql_init(&b);
    sql_add(&b, "");
    for (const char *p = pos; rc == 0 && (p = gtid_next(p, &e));) {
        bool have = false;
        uint64_t c = repl_gtid_seq(cur, e.domain, &have);
        if (in_list(keep, nkeep, e.domain))
            continue;
        if (in_list(from, nfrom, e.domain) || !have || c < e.seq)
            rc = add_entry(&b, &e);
    }
    for (const char *p = cur; rc == 0 && (p = gtid_next(p, &e));) {
        bool given = false;
        uint64_t v = repl_gtid_seq(pos, e.domain, &given);
        if (!given || in_list(keep, nkeep, e.domain) ||
            (!in_list(from, nfrom, e.domain) && e.seq >= v))
            rc = add_entry(&b, &e);
    }
    return finish(&b, rc, out);
}

int repl_gtid_only(const char *pos, const unsigned long *only, size_t nonly, char **out)
{
    sqlbuf b;
    gtid_ent e;
    int rc;

    *out = NULL;
    if ((rc = repl_gtid_check(pos)))
        return rc;
    sql_init(&b);
    sql_add(&b, "");
    for (const char *p = pos; rc == 0 && (p = gtid_next(p, &e));)
        if (in_list(only, nonly, e.domain))
            rc = add_entry(&b, &e);
    return finish(&b, rc, out);
}

int repl_gtid_ahead(const char *cur, const char *from, const unsigned long *only,
                    size_t nonly, char **out)
{
    sqlbuf b;
    gtid_ent e;
    int rc;

    *out = NULL;
    if ((rc = repl_gtid_check(cur)) || (rc = repl_gtid_check(from)))
        return rc;
    sql_init(&b);
    sql_add(&b, "");
    for (const char *p = cur; rc == 0 && (p = gtid_next(p, &e));) {
        bool given = false;
        uint64_t f = repl_gtid_seq(from, e.domain, &given);
        if (given && in_list(only, nonly, e.domain) && e.seq > f)
            rc = add_entry(&b, &e);
    }
    return finish(&b, rc, out);
}

/* ---- values ---------------------------------------------------------------------- */

int repl_value(shard_conn *c, const char *sql, char **out)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    unsigned long *len;
    int rc;

    *out = NULL;
    if ((rc = conn_query_str(c, sql)))
        return rc;
    if (!(res = mysql_store_result(c->my)))
        return shard__fail(SHARD_ESERVER, "%s: %s", c->srv->label, mysql_error(c->my));
    row = mysql_fetch_row(res);
    len = row ? mysql_fetch_lengths(res) : NULL;
    *out = row && row[0] ? shard__strndup(row[0], len[0]) : shard__strdup("");
    mysql_free_result(res);
    return *out ? 0 : shard__fail(SHARD_ENOMEM, "out of memory");
}

int repl_value_u64(shard_conn *c, const char *sql, uint64_t *out)
{
    char *v = NULL;
    int rc = repl_value(c, sql, &v);

    *out = rc ? 0 : strtoull(v, NULL, 10);
    free(v);
    return rc;
}

int repl_wait_pos(shard_conn *c, const char *pos, double seconds, bool *reached)
{
    /* Half the read timeout, at most 5 s, per step. */
    double step = c->read_timeout_ms ? c->read_timeout_ms / 2000.0 : 5.0;
    double end = now_seconds() + seconds;
    int rc;

    *reached = false;
    if ((rc = repl_gtid_check(pos)))
        return rc;
    if (step > 5.0)
        step = 5.0;
    if (step < 0.2)
        step = 0.2;
    for (;;) {
        double left = end - now_seconds();
        char num[32], *v = NULL;
        sqlbuf q;

        if (left < 0)
            left = 0;
        snprintf(num, sizeof num, "%.3f", left < step ? left : step);
        sql_init(&q);
        sql_add(&q, "SELECT MASTER_GTID_WAIT('");
        sql_add(&q, pos); /* checked: digits, '-' and ',' only */
        sql_add(&q, "', ");
        sql_add(&q, num);
        sql_add(&q, ")");
        rc = sql_check(&q);
        if (rc == 0)
            rc = repl_value(c, q.s, &v);
        sql_free(&q);
        if (rc)
            return rc;
        *reached = strcmp(v, "0") == 0;
        free(v);
        if (*reached || left <= step)
            return 0;
    }
}

/* ---- replication status ------------------------------------------------------------ */

static char *field_dup(MYSQL_ROW row, unsigned long *len, int i)
{
    if (i < 0 || !row[i])
        return shard__strdup("");
    return shard__strndup(row[i], len[i]);
}

static void link_free(repl_link *l)
{
    free(l->name);
    free(l->io_running);
    free(l->sql_running);
    free(l->last_io_error);
    free(l->last_sql_error);
    free(l->do_db);
    free(l->gtid_io_pos);
    free(l->master_host);
    free(l->io_state);
    free(l->sql_state);
}

int repl_status_read(shard_conn *c, repl_status *st)
{
    enum { NAME, IO, SQL, IOERR, SQLERR, DODB, IOPOS, HOST, PORT, BEHIND, IOSTATE, SRVID, SQLSTATE,
           NCOLS };
    static const char *const cols[NCOLS] = {
        "Connection_name", "Slave_IO_Running", "Slave_SQL_Running", "Last_IO_Error",
        "Last_SQL_Error", "Replicate_Do_DB", "Gtid_IO_Pos", "Master_Host", "Master_Port",
        "Seconds_Behind_Master", "Slave_IO_State", "Master_Server_Id", "Slave_SQL_State"};
    int at[NCOLS];
    MYSQL_RES *res;
    MYSQL_FIELD *f;
    MYSQL_ROW row;
    size_t cap;
    int rc;

    memset(st, 0, sizeof *st);
    if ((rc = conn_query_str(c, "SHOW ALL SLAVES STATUS")))
        return rc;
    if (!(res = mysql_store_result(c->my)))
        return mysql_errno(c->my) ? shard__fail(SHARD_ESERVER, "%s: %s", c->srv->label,
                                               mysql_error(c->my))
                                  : 0;
    f = mysql_fetch_fields(res);
    for (int k = 0; k < NCOLS; k++) {
        at[k] = -1;
        for (unsigned i = 0; i < mysql_num_fields(res); i++)
            if (strcmp(f[i].name, cols[k]) == 0)
                at[k] = (int)i;
    }
    if (at[NAME] < 0 || at[IO] < 0 || at[SQL] < 0) {
        mysql_free_result(res);
        return shard__fail(SHARD_ESERVER, "%s: SHOW ALL SLAVES STATUS lacks the columns "
                          "libshard reads", c->srv->label);
    }
    cap = (size_t)mysql_num_rows(res);
    st->links = shard__calloc(cap ? cap : 1, sizeof *st->links);
    if (!st->links) {
        mysql_free_result(res);
        return shard__fail(SHARD_ENOMEM, "out of memory");
    }
    while ((row = mysql_fetch_row(res)) && st->n < cap) {
        unsigned long *len = mysql_fetch_lengths(res);
        repl_link *l = &st->links[st->n++];
        l->name = field_dup(row, len, at[NAME]);
        l->io_running = field_dup(row, len, at[IO]);
        l->sql_running = field_dup(row, len, at[SQL]);
        l->last_io_error = field_dup(row, len, at[IOERR]);
        l->last_sql_error = field_dup(row, len, at[SQLERR]);
        l->do_db = field_dup(row, len, at[DODB]);
        l->gtid_io_pos = field_dup(row, len, at[IOPOS]);
        l->master_host = field_dup(row, len, at[HOST]);
        l->io_state = field_dup(row, len, at[IOSTATE]);
        l->sql_state = field_dup(row, len, at[SQLSTATE]);
        l->master_port = at[PORT] >= 0 && row[at[PORT]] ? (unsigned)atoi(row[at[PORT]]) : 0;
        l->master_server_id = at[SRVID] >= 0 && row[at[SRVID]] ? strtoul(row[at[SRVID]], NULL, 10)
                                                              : 0;
        l->seconds_behind = at[BEHIND] >= 0 && row[at[BEHIND]] ? atol(row[at[BEHIND]]) : -1;
        if (!l->name || !l->io_running || !l->sql_running || !l->last_io_error ||
            !l->last_sql_error || !l->do_db || !l->gtid_io_pos || !l->master_host ||
            !l->io_state || !l->sql_state) {
            mysql_free_result(res);
            repl_status_free(st);
            return shard__fail(SHARD_ENOMEM, "out of memory");
        }
    }
    mysql_free_result(res);
    return 0;
}

void repl_status_free(repl_status *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n; i++)
        link_free(&st->links[i]);
    free(st->links);
    memset(st, 0, sizeof *st);
}

const repl_link *repl_status_find(const repl_status *st, const char *name)
{
    for (size_t i = 0; i < st->n; i++)
        if (strcasecmp(st->links[i].name, name) == 0)
            return &st->links[i];
    return NULL;
}

bool repl_link_running(const repl_link *l)
{
    return strcmp(l->io_running, "Yes") == 0 && strcmp(l->sql_running, "Yes") == 0;
}

bool repl_link_stopped(const repl_link *l)
{
    return strcmp(l->io_running, "No") == 0 || strcmp(l->sql_running, "No") == 0;
}

void repl_link_describe(const repl_link *l, char *buf, size_t size)
{
    const char *err = l->last_sql_error[0] ? l->last_sql_error : l->last_io_error;

    snprintf(buf, size, "IO thread %s, SQL thread %s%s%.300s%s",
             l->io_running[0] ? l->io_running : "?", l->sql_running[0] ? l->sql_running : "?",
             err[0] ? " (" : "", err, err[0] ? ")" : "");
}
