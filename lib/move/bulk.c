/*
 * The copy's fallback where the target refuses LOAD DATA LOCAL INFILE
 * (libshard-move(7), "The copy"): MariaDB's array binding of one prepared
 * INSERT (STMT_ATTR_ARRAY_SIZE), a batch of rows per execution. Every value
 * is bound as a binary string, the way a hex literal would be: the column
 * gets the source's bytes, unconverted, and the server turns numbers and
 * times from their text.
 */
#include "move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct batch {
    unsigned n;           /* columns */
    char *arena;          /* the rows' bytes, copied (a fetched row dies at the next fetch) */
    size_t used, cap;
    size_t *off;          /* [row * n + col] into arena */
    unsigned long *len;   /* [col * rows_max + row] */
    char *ind;            /* [col * rows_max + row]: STMT_INDICATOR_NULL or _NONE */
    char **ptr;           /* [col * rows_max + row] */
    unsigned rows, rows_max;
    uint64_t bytes;
} batch;

static int batch_init(batch *b, unsigned n, unsigned rows_max)
{
    size_t cells = (size_t)n * rows_max;

    memset(b, 0, sizeof *b);
    b->n = n;
    b->rows_max = rows_max;
    b->off = calloc(cells ? cells : 1, sizeof *b->off);
    b->len = calloc(cells ? cells : 1, sizeof *b->len);
    b->ind = calloc(cells ? cells : 1, 1);
    b->ptr = calloc(cells ? cells : 1, sizeof *b->ptr);
    if (!b->off || !b->len || !b->ind || !b->ptr)
        return shard__fail(SHARD_ENOMEM, "out of memory for a batch of %u rows", rows_max);
    return 0;
}

static void batch_free(batch *b)
{
    free(b->arena);
    free(b->off);
    free(b->len);
    free(b->ind);
    free(b->ptr);
}

static int batch_add(batch *b, MYSQL_ROW row, const unsigned long *lens)
{
    size_t need = 0;
    unsigned r = b->rows;

    for (unsigned i = 0; i < b->n; i++)
        need += row[i] ? lens[i] : 0;
    if (b->used + need + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        char *na;
        while (cap < b->used + need + 1)
            cap *= 2;
        if (!(na = realloc(b->arena, cap)))
            return shard__fail(SHARD_ENOMEM, "out of memory for a batch of %zu bytes", cap);
        b->arena = na;
        b->cap = cap;
    }
    for (unsigned i = 0; i < b->n; i++) {
        size_t cell = (size_t)i * b->rows_max + r;
        b->off[(size_t)r * b->n + i] = b->used;
        b->ind[cell] = row[i] ? STMT_INDICATOR_NONE : STMT_INDICATOR_NULL;
        b->len[cell] = row[i] ? lens[i] : 0;
        if (row[i] && lens[i]) {
            memcpy(b->arena + b->used, row[i], lens[i]);
            b->used += lens[i];
        }
    }
    b->bytes += need;
    b->rows++;
    return 0;
}

/* Execute the batch and start the next. */
static int batch_send(mv *m, shard_conn *dst, MYSQL_STMT *st, MYSQL_BIND *bind, batch *b)
{
    unsigned rows = b->rows;

    /* Pointers only now: the arena may have moved while it grew. */
    for (unsigned r = 0; r < rows; r++)
        for (unsigned i = 0; i < b->n; i++)
            b->ptr[(size_t)i * b->rows_max + r] = b->arena + b->off[(size_t)r * b->n + i];
    for (unsigned i = 0; i < b->n; i++) {
        memset(&bind[i], 0, sizeof bind[i]);
        bind[i].buffer_type = MYSQL_TYPE_BLOB; /* binary: no conversion */
        bind[i].buffer = &b->ptr[(size_t)i * b->rows_max];
        bind[i].length = &b->len[(size_t)i * b->rows_max];
        bind[i].u.indicator = &b->ind[(size_t)i * b->rows_max];
    }
    if (mysql_stmt_attr_set(st, STMT_ATTR_ARRAY_SIZE, &rows) || mysql_stmt_bind_param(st, bind) ||
        mysql_stmt_execute(st))
        return shard__fail(SHARD_ESERVER, "%s: error %u: %s", dst->srv->label,
                          mysql_stmt_errno(st), mysql_stmt_error(st));
    if (mysql_stmt_affected_rows(st) != rows)
        return shard__fail(SHARD_ESERVER, "%s: a batch of %u rows inserted %llu",
                          dst->srv->label, rows,
                          (unsigned long long)mysql_stmt_affected_rows(st));
    move_copied(m, rows, b->bytes);
    b->rows = 0;
    b->used = 0;
    b->bytes = 0;
    return 0;
}

bool move_bulk_supported(shard_conn *dst)
{
    unsigned long ext = 0;

    if (mariadb_get_infov(dst->my, MARIADB_CONNECTION_EXTENDED_SERVER_CAPABILITIES, &ext))
        return false;
    return (ext & (MARIADB_CLIENT_STMT_BULK_OPERATIONS >> 32)) != 0;
}

int move_bulk_copy(mv *m, move_throttle *th, shard_conn *src, shard_conn *dst,
                   const mtable *t, MYSQL_RES *res)
{
    MYSQL_FIELD *f = mysql_fetch_fields(res);
    unsigned n = mysql_num_fields(res);
    unsigned want = (unsigned)move_throttle_batch(th, m->o.batch_rows);
    size_t limit = dst->max_packet / 2;
    MYSQL_BIND *bind = calloc(n ? n : 1, sizeof *bind);
    MYSQL_STMT *st = NULL;
    MYSQL_ROW row;
    batch b;
    sqlbuf q;
    int rc;

    sql_init(&q);
    rc = batch_init(&b, n, want);
    if (rc == 0 && !bind)
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
    sql_add(&q, "INSERT INTO ");
    sql_table(&q, t->db, t->name);
    sql_add(&q, " (");
    for (unsigned i = 0; i < n; i++) /* checked names */
        sql_addf(&q, "%s`%s`", i ? "," : "", f[i].name);
    sql_add(&q, ") VALUES (");
    for (unsigned i = 0; i < n; i++)
        sql_add(&q, i ? ",?" : "?");
    sql_add(&q, ")");
    if (rc == 0 && (rc = sql_check(&q)) == 0) {
        if (!(st = mysql_stmt_init(dst->my)))
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
        else if (mysql_stmt_prepare(st, q.s, (unsigned long)q.len))
            rc = shard__fail(SHARD_ESERVER, "%s: %s", dst->srv->label, mysql_stmt_error(st));
    }
    while (rc == 0 && (rc = b.rows ? 0 : move_throttle_gate(th, want)) == 0 &&
           (row = mysql_fetch_row(res))) {
        unsigned long *lens = mysql_fetch_lengths(res);
        uint64_t len = 0;
        for (unsigned i = 0; i < n; i++)
            len += lens[i];
        /* Send first when this row would take the batch past the packet. */
        if (b.rows && b.bytes + len + 16 * n >= limit &&
            (rc = batch_send(m, dst, st, bind, &b)))
            break;
        if ((rc = batch_add(&b, row, lens)))
            break;
        if ((b.rows >= want || b.bytes >= limit) && (rc = batch_send(m, dst, st, bind, &b)))
            break;
    }
    if (rc == 0 && mysql_errno(src->my))
        rc = shard__fail(SHARD_ECONNECT, "reading from the source: %s", mysql_error(src->my));
    if (rc == 0 && b.rows)
        rc = batch_send(m, dst, st, bind, &b);
    if (st)
        mysql_stmt_close(st);
    sql_free(&q);
    batch_free(&b);
    free(bind);
    return rc;
}
