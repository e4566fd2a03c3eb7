/*
 * Verification (libshard-move(7), phase verifying): every row of every
 * moved table on the frozen source, compared column by column with the
 * target's snapshot taken at the fence, both read in primary-key order.
 * Tables are handed out over the workers; worker w reads the target
 * through snapshot w.
 */
#include "move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Compare two rows' primary keys: numerically or as bytes, column by column. */
static int key_cmp(MYSQL_ROW a, unsigned long *la, MYSQL_ROW b, unsigned long *lb,
                   MYSQL_FIELD *f, unsigned nkey)
{
    for (unsigned i = 0; i < nkey; i++) {
        int c;
        if (IS_NUM(f[i].type)) {
            unsigned long long x = strtoull(a[i], NULL, 10), y = strtoull(b[i], NULL, 10);
            c = x < y ? -1 : x > y;
        } else {
            size_t n = la[i] < lb[i] ? la[i] : lb[i];
            c = memcmp(a[i], b[i], n);
            if (c == 0)
                c = la[i] < lb[i] ? -1 : la[i] > lb[i];
        }
        if (c)
            return c;
    }
    return 0;
}

static bool row_eq(MYSQL_ROW a, unsigned long *la, MYSQL_ROW b, unsigned long *lb,
                   unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        if (!a[i] != !b[i])
            return false;
        if (a[i] && (la[i] != lb[i] || memcmp(a[i], b[i], la[i]) != 0))
            return false;
    }
    return true;
}

/* How many leading columns form the primary key, read from an empty result
 * (nothing is streamed twice). */
static int key_columns(shard_conn *c, const char *db, const char *table, unsigned *nkey)
{
    MYSQL_RES *res;
    MYSQL_FIELD *f;
    unsigned n, k = 0;
    int rc;

    if ((rc = move_runf(c, "SELECT * FROM `%s`.`%s` LIMIT 0", db, table)))
        return rc;
    if (!(res = mysql_store_result(c->my)))
        return shard_fail(SHARD_ESERVER, "%s", mysql_error(c->my));
    n = mysql_num_fields(res);
    f = mysql_fetch_fields(res);
    while (k < n && (f[k].flags & PRI_KEY_FLAG))
        k++;
    mysql_free_result(res);
    *nkey = k ? k : 1;
    return 0;
}

/* SELECT * ... ORDER BY the key's columns, streamed. */
static int stream(shard_conn *c, const char *db, const char *table, unsigned nkey,
                  MYSQL_RES **res)
{
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT * FROM ");
    sql_table(&q, db, table);
    sql_add(&q, " ORDER BY 1");
    for (unsigned i = 2; i <= nkey; i++)
        sql_addf(&q, ", %u", i);
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(c, &q);
    sql_free(&q);
    if (rc)
        return rc;
    if (!(*res = mysql_use_result(c->my)))
        return shard_fail(SHARD_ESERVER, "%s", mysql_error(c->my));
    return 0;
}

static int verify_table(mv *m, shard_conn *src, shard_conn *v, const mtable *t)
{
    MYSQL_RES *rs = NULL, *rt = NULL;
    MYSQL_ROW a, b;
    unsigned long *la = NULL, *lb = NULL;
    uint64_t verified = 0, mismatches = 0;
    unsigned n, nkey = 1;
    int rc;

    /* The source's tables keep their names: the fence is a row, not a rename. */
    if ((rc = key_columns(src, t->db, t->name, &nkey)) ||
        (rc = stream(src, t->db, t->name, nkey, &rs)))
        return rc;
    if ((rc = stream(v, t->db, t->name, nkey, &rt))) {
        mysql_free_result(rs);
        return rc;
    }
    n = mysql_num_fields(rs);
    if (mysql_num_fields(rt) != n) {
        mysql_free_result(rs);
        mysql_free_result(rt);
        return shard_fail(SHARD_EVERIFY, "%s.%s: the target has %u columns, the source %u",
                          t->db, t->name, mysql_num_fields(rt), n);
    }
    a = mysql_fetch_row(rs);
    la = a ? mysql_fetch_lengths(rs) : NULL;
    b = mysql_fetch_row(rt);
    lb = b ? mysql_fetch_lengths(rt) : NULL;
    while (a || b) {
        int c = !a ? 1 : !b ? -1 : key_cmp(a, la, b, lb, mysql_fetch_fields(rs), nkey);
        if (c != 0 || !row_eq(a, la, b, lb, n))
            mismatches++; /* different, or on one side only */
        if (c <= 0) {
            verified++;
            a = mysql_fetch_row(rs);
            la = a ? mysql_fetch_lengths(rs) : NULL;
        }
        if (c >= 0) {
            b = mysql_fetch_row(rt);
            lb = b ? mysql_fetch_lengths(rt) : NULL;
        }
        if (verified % 1000 == 0 && c <= 0) {
            uint64_t done, total;
            pthread_mutex_lock(&m->lock);
            done = m->done + verified;
            total = m->total;
            pthread_mutex_unlock(&m->lock);
            move_progress(m, SHARD_MOVE_VERIFYING, done, total);
        }
    }
    if (mysql_errno(src->my) || mysql_errno(v->my))
        rc = shard_fail(SHARD_ECONNECT, "verifying %s.%s: %s%s", t->db, t->name,
                        mysql_error(src->my), mysql_error(v->my));
    mysql_free_result(rs);
    mysql_free_result(rt);
    pthread_mutex_lock(&m->lock);
    m->done += verified;
    m->r->rows_verified += verified;
    m->r->mismatches += mismatches;
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static int verify_fn(void *arg, size_t i, unsigned w)
{
    mv *m = arg;
    shard_conn *src;
    int rc = move_wsrc(m, w, &src);

    return rc ? rc : verify_table(m, src, m->vsnap[w], &m->tables[i]);
}

/* The source's rows, for the progress (a resumed move has no copy totals). */
static int count_source(mv *m)
{
    sqlbuf q;
    int rc;

    m->total = 0;
    sql_init(&q);
    sql_add(&q, "SELECT SUM(TABLE_ROWS) FROM information_schema.TABLES WHERE TABLE_SCHEMA IN (");
    move_db_list(m, &q, true);
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) == 0)
        rc = repl_value_u64(m->src, q.s, &m->total); /* an estimate is enough here */
    sql_free(&q);
    return rc;
}

int move_verify(mv *m)
{
    double t0 = now_seconds();
    int rc = 0;

    m->r->rows_verified = m->r->mismatches = 0;
    m->done = 0;
    if (!m->total)
        rc = count_source(m);
    if (rc == 0 && !m->nvsnap)
        rc = move_open_vsnaps(m); /* resumed after the flip: the target as it is now */
    for (unsigned w = 0; rc == 0 && w < m->nvsnap; w++) {
        shard_conn *c;
        if ((rc = move_wsrc(m, w, &c)) == 0)
            rc = move_runf(c, "SET SESSION time_zone = '+00:00'");
    }
    if (rc == 0)
        rc = fanout_run(m->ntables, m->nvsnap, verify_fn, m);
    move_close_vsnaps(m);
    move_close_workers(m);
    m->r->verify_seconds = now_seconds() - t0;
    move_progress(m, SHARD_MOVE_VERIFYING, m->r->rows_verified, m->total);
    return rc;
}
