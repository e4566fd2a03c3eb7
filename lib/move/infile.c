/*
 * Feeding the snapshot copy to the target as LOAD DATA LOCAL INFILE
 * (libshard-move(7), "The copy"): the cheapest way MariaDB takes rows. The
 * "file" is the source's result set itself, read row by row through
 * Connector/C's local-infile handler while the statement runs: no file, no
 * buffer beyond one row. Each statement carries a bounded number of rows
 * and bytes and is its own transaction, so the target's standby applies
 * the copy as it goes and a failed statement leaves nothing behind.
 *
 * The format: fields end in a tab, lines in a newline, and the escape is a
 * backslash; in a value, backslash, tab, newline and NUL are escaped
 * (\\, \t, \n, \0) and NULL is \N. The statement reads the bytes as
 * CHARACTER SET binary, so nothing is converted: every value lands with the
 * bytes the source has. A LOCAL load is IGNORE (the server cannot stop the
 * stream): a value the column refuses becomes a warning and a changed row,
 * a duplicate a skipped one. So every statement runs in its own
 * transaction, and unless the server counts every row sent as a record,
 * nothing skipped and no warning, it is rolled back and the copy fails.
 * (REPLACE would keep the server strict, but needs the DELETE privilege.)
 */
#include "move.h"

#include <errmsg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One statement's share of a table, at most. */
#define STMT_BYTES (16UL * 1024 * 1024)
#define STMT_ROWS 100000
/* A throttled batch due later than this ends the statement first: the
 * target gives up on a statement whose data stops (net_read_timeout). */
#define WAIT_IN_STMT_S 1.0

typedef struct feed {
    mv *m;
    move_throttle *th;
    shard_conn *src;
    MYSQL_RES *res;   /* NULL: no rows (the probe) */
    unsigned n;       /* columns */
    char *buf;        /* the next row, escaped, from pos to len */
    size_t cap, len, pos;
    uint64_t stmt_rows, stmt_bytes, max_rows, max_bytes;
    uint64_t left;    /* rows the bucket granted, not yet read */
    double go_at;     /* when they may go (0: they may) */
    uint64_t un_rows, un_bytes; /* read, not yet counted */
    bool eof;
    int rc;           /* why the feed failed (with msg) */
    char msg[600];
} feed;

static void feed_count(feed *f)
{
    if (f->un_rows)
        move_copied(f->m, f->un_rows, f->un_bytes);
    f->un_rows = f->un_bytes = 0;
}

static int feed_fail(feed *f, int rc)
{
    f->rc = rc;
    snprintf(f->msg, sizeof f->msg, "%s", shard_errmsg());
    return rc;
}

/* One row into buf, escaped. */
static int feed_put(feed *f, MYSQL_ROW row, const unsigned long *lens)
{
    size_t need = 1;
    uint64_t bytes = 0;
    char *o;

    for (unsigned i = 0; i < f->n; i++)
        need += row[i] ? 2 * (size_t)lens[i] + 1 : 3;
    if (need > f->cap) {
        char *nb = realloc(f->buf, need);
        if (!nb)
            return feed_fail(f, shard__fail(SHARD_ENOMEM, "out of memory for a row of %zu "
                                           "bytes", need / 2));
        f->buf = nb;
        f->cap = need;
    }
    o = f->buf;
    for (unsigned i = 0; i < f->n; i++) {
        if (i)
            *o++ = '\t';
        if (!row[i]) {
            *o++ = '\\';
            *o++ = 'N';
            continue;
        }
        bytes += lens[i];
        for (const char *s = row[i], *e = s + lens[i]; s < e; s++) {
            switch (*s) {
            case '\\': *o++ = '\\'; *o++ = '\\'; break;
            case '\t': *o++ = '\\'; *o++ = 't'; break;
            case '\n': *o++ = '\\'; *o++ = 'n'; break;
            case '\0': *o++ = '\\'; *o++ = '0'; break;
            default: *o++ = *s;
            }
        }
    }
    *o++ = '\n';
    f->pos = 0;
    f->len = (size_t)(o - f->buf);
    f->stmt_rows++;
    f->stmt_bytes += f->len;
    f->un_rows++;
    f->un_bytes += bytes;
    return 0;
}

/*
 * The next row into buf. 1: there is one; 0: nothing more in this
 * statement (f->eof: nor in the table); <0: failed. Inside a statement
 * a pause, a long wait for the bucket or the statement's limits end it;
 * outside, a pause or the bucket is waited for.
 */
static int feed_row(feed *f, bool inside)
{
    MYSQL_ROW row;
    int rc;

    if (f->eof)
        return 0;
    if (inside && (f->stmt_rows >= f->max_rows || f->stmt_bytes >= f->max_bytes))
        return 0;
    if (f->left == 0) { /* a batch: count it, and ask the throttle for the next */
        feed_count(f);
        if (inside && move_throttle_paused(f->th))
            return 0;
        if (!inside && (rc = move_throttle_wait(f->th)))
            return feed_fail(f, rc);
        f->left = move_throttle_batch(f->th, f->m->o.batch_rows);
        f->go_at = move_throttle_take(f->th, f->left);
    }
    if (f->go_at > 0) {
        double wait = f->go_at - now_seconds();
        if (inside && wait > WAIT_IN_STMT_S)
            return 0;
        sleep_ms(wait > 0 ? wait * 1000 : 0);
        f->go_at = 0;
    }
    if (!f->res || !(row = mysql_fetch_row(f->res))) {
        f->eof = true;
        /* A source that fails mid-table must not end the statement as if
         * the table were complete: the statement fails and rolls back. */
        if (f->src && mysql_errno(f->src->my))
            return feed_fail(f, shard__fail(SHARD_ECONNECT, "reading from the source: %s",
                                           mysql_error(f->src->my)));
        return 0;
    }
    f->left--;
    return (rc = feed_put(f, row, mysql_fetch_lengths(f->res))) ? rc : 1;
}

/* ---- Connector/C's local-infile handler, the feed as its "file" ---------------- */

static int li_init(void **ptr, const char *name, void *userdata)
{
    (void)name; /* only ever the feed: whatever file a server asks for */
    *ptr = userdata;
    return userdata ? 0 : 1; /* no feed: no file */
}

static int li_read(void *ptr, char *out, unsigned size)
{
    feed *f = ptr;
    unsigned got = 0;

    while (got < size) {
        size_t k;
        if (f->pos == f->len) {
            int r = feed_row(f, true);
            if (r < 0)
                return -1;
            if (r == 0)
                break;
        }
        k = f->len - f->pos;
        if (k > size - got)
            k = size - got;
        memcpy(out + got, f->buf + f->pos, k);
        f->pos += k;
        got += (unsigned)k;
    }
    return (int)got;
}

static void li_end(void *ptr)
{
    (void)ptr;
}

static int li_error(void *ptr, char *msg, unsigned size)
{
    feed *f = ptr;
    snprintf(msg, size, "%s", !f ? "LOAD DATA LOCAL INFILE outside the copy" : f->msg[0] ? f->msg
                                 : "the copy's row stream failed");
    return CR_UNKNOWN_ERROR;
}

static void statement(sqlbuf *q, const mtable *t, MYSQL_FIELD *fields, unsigned n)
{
    sql_add(q, "LOAD DATA LOCAL INFILE 'libshard-copy' INTO TABLE ");
    sql_table(q, t->db, t->name);
    sql_add(q, " CHARACTER SET binary FIELDS TERMINATED BY '\\t' ESCAPED BY '\\\\'"
               " LINES TERMINATED BY '\\n'");
    if (n) {
        sql_add(q, " (");
        for (unsigned i = 0; i < n; i++) /* checked names */
            sql_addf(q, "%s`%s`", i ? "," : "", fields[i].name);
        sql_add(q, ")");
    }
}

/* f NULL: the feed is gone, and a server that asks for a file anyway (it
 * may, after any statement) gets none. */
static void handler(shard_conn *dst, feed *f)
{
    unsigned one = 1;

    /* The client side of the capability; the handler serves only the feed. */
    mysql_optionsv(dst->my, MYSQL_OPT_LOCAL_INFILE, &one);
    mysql_set_local_infile_handler(dst->my, li_init, li_read, li_end, li_error, f);
}

int move_infile_probe(mv *m, shard_conn *dst, const mtable *t)
{
    feed f;
    sqlbuf q;
    int rc;

    memset(&f, 0, sizeof f);
    f.m = m;
    f.eof = true;
    handler(dst, &f);
    sql_init(&q);
    statement(&q, t, NULL, 0);
    rc = conn_query(dst, &q);
    sql_free(&q);
    handler(dst, NULL);
    if (rc == 0)
        return 1;
    switch (dst->last_errno) {
    case 1148: /* ER_NOT_ALLOWED_COMMAND: local_infile=OFF */
    case 4166: /* ER_LOAD_INFILE_CAPABILITY_DISABLED */
    case 2068: /* CR_LOAD_DATA_LOCAL_INFILE_REJECTED */
        return 0;
    default:
        return rc;
    }
}

/* "Records: 3  Deleted: 0  Skipped: 0  Warnings: 0" says every row went in as sent. */
static int check_info(shard_conn *dst, const mtable *t, uint64_t rows)
{
    const char *info = mysql_info(dst->my);
    unsigned long long rec, del, skip, warn;

    char what[400] = "";
    MYSQL_RES *res;
    MYSQL_ROW row;

    if (info && sscanf(info, "Records: %llu Deleted: %llu Skipped: %llu Warnings: %llu", &rec,
                       &del, &skip, &warn) == 4 &&
        rec == rows && del == 0 && skip == 0 && warn == 0)
        return 0;
    char said[120];

    snprintf(said, sizeof said, "%s", info ? info : "nothing");
    snprintf(what, sizeof what, "\"%s\"", said);
    /* The first warning says which row and why (info is gone after it). */
    if (mysql_query(dst->my, "SHOW WARNINGS LIMIT 1") == 0 && (res = mysql_store_result(dst->my))) {
        if ((row = mysql_fetch_row(res)) && row[1] && row[2])
            snprintf(what, sizeof what, "\"%s\", first warning: %.5s %.200s", said, row[1],
                     row[2]);
        mysql_free_result(res);
    }
    return shard__fail(SHARD_ESERVER, "LOAD DATA of %llu rows into %s.%s: the server says %s "
                      "(expected every row, no warnings)", (unsigned long long)rows, t->db,
                      t->name, what);
}

int move_infile_copy(mv *m, move_throttle *th, shard_conn *src, shard_conn *dst,
                     const mtable *t, MYSQL_RES *res)
{
    MYSQL_FIELD *fields = mysql_fetch_fields(res);
    feed f;
    sqlbuf q;
    int rc = 0, r;

    memset(&f, 0, sizeof f);
    f.m = m;
    f.th = th;
    f.src = src;
    f.res = res;
    f.n = mysql_num_fields(res);
    f.max_rows = STMT_ROWS;
    f.max_bytes = STMT_BYTES;
    sql_init(&q);
    statement(&q, t, fields, f.n);
    if ((rc = sql_check(&q)))
        goto out;
    handler(dst, &f);
    /* A statement per share: the first row is read outside it, so that a
     * pause or the bucket is waited for with no statement open. */
    while (rc == 0) {
        f.stmt_rows = f.stmt_bytes = 0;
        if ((r = feed_row(&f, false)) <= 0) {
            rc = r;
            break;
        }
        if ((rc = conn_query_str(dst, "START TRANSACTION")))
            break;
        rc = conn_query(dst, &q);
        if (f.rc) /* the feed failed, not the target: its reason */
            rc = shard__fail(f.rc, "%s", f.msg);
        if (rc == 0)
            rc = check_info(dst, t, f.stmt_rows);
        if (rc == 0)
            rc = conn_query_str(dst, "COMMIT");
        if (rc) {
            shard_errsave why;
            shard__error_save(&why, rc);
            conn_query_str(dst, "ROLLBACK"); /* may fail on a lost connection */
            shard__error_restore(&why);
            break;
        }
        feed_count(&f);
    }
    if (rc == 0)
        feed_count(&f);
out:
    handler(dst, NULL);
    sql_free(&q);
    free(f.buf);
    return rc;
}
