/*
 * Verification (libshard-move(7), "Verification"): every row of every
 * moved table on the frozen source against the target's snapshot taken at
 * the flip, compared as checksums of primary-key chunks computed on both
 * servers, the way pt-table-checksum does; only a chunk whose checksums
 * differ is streamed from both sides and compared row by row, to name its
 * differing rows.
 *
 * Chunks: the source's primary key is walked once, keys only, a boundary
 * every MOVE_VERIFY_CHUNK_ROWS rows; the first chunk is open below and the
 * last open above, so every row of either side falls in exactly one chunk,
 * and both sides run the same WHERE text. A table smaller than a chunk is
 * one chunk, and small chunks share statements (MOVE_VERIFY_GROUP), so
 * that thousands of small tables cost tens of round trips, not thousands.
 * Work is handed out over the workers; worker w reads the target through
 * snapshot w (all of one point).
 *
 * The checksum of a chunk is COUNT(*) and the exact (DECIMAL) SUM of a
 * 64-bit hash of each row, the first 64 bits of the MD5 of the row's key
 * and every column, separated by ',', each as its length, ':' and its
 * bytes, NULL as 'N' (so ('a','bc') != ('ab','c') and NULL != ''); a NOT
 * NULL number or time, which never prints a ',', as it prints. Why a sum: an XOR cancels
 * any hash that appears twice and CRC32 collides at this volume; a sum
 * does not wrap and has no such pairs. Because the key is in the hash,
 * swapping two rows' contents changes both rows' hashes to unrelated
 * values; a set of changed rows goes unseen only if the changes of their
 * hashes add up to exactly zero, which for data not built to collide MD5
 * is a chance of about 2^-64 per chunk.
 */
#include "move.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One moved table as verification sees it. */
typedef struct vtable {
    const mtable *t;
    unsigned ncols, nkey;
    bool key_num[MOVE_VERIFY_MAX_KEY]; /* numeric key column: compared as a number */
    char key[MOVE_VERIFY_MAX_KEY][65]; /* key column names */
    bool whole;                        /* no primary key: one chunk, ordered by column 1 */
    unsigned pk;                       /* columns in the primary key */
    bool first_num;                    /* column 1: numeric? and its name */
    char first[65];
    int updated_at;                    /* the TIMESTAMP column updated_at, or -1 */
    sqlbuf hash;                       /* the row hash expression (SQL) */
    sqlbuf cols, tcols;                /* column names on the source, the target */
    uint64_t rows;                     /* on the source, exactly */
} vtable;

/* One chunk: a WHERE condition both sides run, and its source row count. */
typedef struct vchunk {
    size_t table;
    char *where;
    uint64_t rows;
} vchunk;

/* Consecutive chunks checksummed in one statement per side. */
typedef struct vgroup {
    size_t first, n;
} vgroup;

typedef struct vrun {
    mv *m;
    vtable *tables;
    vchunk *chunks;
    size_t nchunks, cap;
    vgroup *groups;
    size_t ngroups;
} vrun;

/* ---- row comparison (a chunk that differs) ------------------------------------ */

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

/*
 * Did a client write this target row after the flip? Only a resumed
 * verification asks (it has no snapshot of the flip point). Clients'
 * writes on the target after the flip carry the target's clock in
 * updated_at, later than the clock read at the fence (flip_at); rows
 * copied or replicated before carry the source's. A table without
 * updated_at, or a move whose fence time is unknown, cannot tell: true,
 * so that such a row is never counted as a mismatch.
 */
static bool written_after_flip(const mv *m, const vtable *vt, MYSQL_ROW b, unsigned long *lb)
{
    size_t n;

    if (vt->updated_at < 0 || !m->flip_at[0] || !b[vt->updated_at])
        return true;
    n = lb[vt->updated_at];
    if (n > strlen(m->flip_at))
        n = strlen(m->flip_at); /* a TIMESTAMP(0) compares by its seconds */
    return strncmp(b[vt->updated_at], m->flip_at, n) >= 0;
}

/* Counts of one chunk's row-by-row comparison. */
typedef struct vcount {
    uint64_t verified, mismatches, unchecked, missing;
} vcount;

/*
 * One pair of rows (either may be NULL: on one side only), counted. With a
 * snapshot of the flip point every difference is a mismatch. Without one
 * (resumed after the flip), a target row written after the flip is a
 * client's write: neither compared nor a mismatch; a source row missing on
 * the target was deleted after the flip or never arrived, which nothing
 * left can tell apart: not compared, and counted as missing.
 */
static void count_pair(const mv *m, const vtable *vt, MYSQL_ROW a, unsigned long *la,
                       MYSQL_ROW b, unsigned long *lb, vcount *n)
{
    bool same = a && b && row_eq(a, la, b, lb, vt->ncols);

    if (same) {
        n->verified++;
    } else if (!m->verify_live) {
        n->mismatches++;
        n->verified += a != NULL;
    } else if (!b) {
        n->unchecked++;
        n->missing++;
    } else if (written_after_flip(m, vt, b, lb)) {
        n->unchecked += a != NULL; /* a target-only row is no source row at all */
    } else {
        n->mismatches++;
        n->verified += a != NULL;
    }
}

/* SELECT * of one chunk, ORDER BY the key's columns, streamed. */
static int stream(shard_conn *c, const vtable *vt, const char *where, MYSQL_RES **res)
{
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT * FROM ");
    sql_table(&q, vt->t->db, vt->t->name);
    sql_add(&q, " WHERE ");
    sql_add(&q, where);
    sql_add(&q, " ORDER BY 1");
    for (unsigned i = 2; i <= vt->nkey; i++)
        sql_addf(&q, ", %u", i);
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(c, &q);
    sql_free(&q);
    if (rc)
        return rc;
    if (!(*res = mysql_use_result(c->my)))
        return shard__fail(SHARD_ESERVER, "%s", mysql_error(c->my));
    return 0;
}

/* A chunk whose checksums differ: both sides row by row, in key order. */
static int compare_rows(mv *m, shard_conn *src, shard_conn *v, const vtable *vt,
                        const char *where, vcount *n)
{
    MYSQL_RES *rs = NULL, *rt = NULL;
    MYSQL_ROW a, b;
    unsigned long *la, *lb;
    int rc;

    if ((rc = stream(src, vt, where, &rs)))
        return rc;
    if ((rc = stream(v, vt, where, &rt))) {
        mysql_free_result(rs);
        return rc;
    }
    a = mysql_fetch_row(rs);
    la = a ? mysql_fetch_lengths(rs) : NULL;
    b = mysql_fetch_row(rt);
    lb = b ? mysql_fetch_lengths(rt) : NULL;
    while (a || b) {
        int c = !a ? 1 : !b ? -1 : key_cmp(a, la, b, lb, mysql_fetch_fields(rs), vt->nkey);
        count_pair(m, vt, c <= 0 ? a : NULL, la, c >= 0 ? b : NULL, lb, n);
        if (c <= 0) {
            a = mysql_fetch_row(rs);
            la = a ? mysql_fetch_lengths(rs) : NULL;
        }
        if (c >= 0) {
            b = mysql_fetch_row(rt);
            lb = b ? mysql_fetch_lengths(rt) : NULL;
        }
    }
    if (mysql_errno(src->my) || mysql_errno(v->my))
        rc = shard__fail(SHARD_ECONNECT, "verifying %s.%s: %s%s", vt->t->db, vt->t->name,
                        mysql_error(src->my), mysql_error(v->my));
    mysql_free_result(rs);
    mysql_free_result(rt);
    return rc;
}

/* ---- chunk checksums ------------------------------------------------------------ */

/* One chunk's part of a checksum statement: its index, COUNT(*) and the
 * sum of its row hashes. */
static void add_checksum(sqlbuf *q, const vtable *vt, const vchunk *ch, size_t k)
{
    sql_addf(q, "%sSELECT %zu, COUNT(*), SUM(CAST(CONV(LEFT(", k ? " UNION ALL " : "", k);
    sql_add(q, vt->hash.s);
    sql_add(q, ", 16), 16, 10) AS UNSIGNED)) FROM ");
    sql_table(q, vt->t->db, vt->t->name);
    sql_add(q, " WHERE ");
    sql_add(q, ch->where);
}

/* The checksum statement of a group's chunks: the same text on both sides. */
static void checksum_sql(sqlbuf *q, const vrun *vr, const vgroup *g)
{
    for (size_t k = 0; k < g->n; k++) {
        const vchunk *ch = &vr->chunks[g->first + k];
        add_checksum(q, &vr->tables[ch->table], ch, k);
    }
}

/* The checksums of a group's chunks on c, whose statement was sent, as
 * the server prints them: "count sum" per chunk, in sums[k]. */
static int checksums(shard_conn *c, const vgroup *g, char (*sums)[112])
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    int rc;

    for (size_t k = 0; k < g->n; k++)
        sums[k][0] = '\0';
    if ((rc = conn_read(c)))
        return rc;
    if (!(res = mysql_store_result(c->my)))
        return shard__fail(SHARD_ESERVER, "%s", mysql_error(c->my));
    while ((row = mysql_fetch_row(res))) {
        size_t k = row[0] ? strtoull(row[0], NULL, 10) : g->n;
        if (k < g->n)
            snprintf(sums[k], sizeof sums[k], "%.40s %.60s", row[1] ? row[1] : "",
                     row[2] ? row[2] : "0");
    }
    mysql_free_result(res);
    return 0;
}

static int group_fn(void *arg, size_t i, unsigned w)
{
    vrun *vr = arg;
    mv *m = vr->m;
    const vgroup *g = &vr->groups[i];
    char (*ss)[112] = NULL, (*ts)[112] = NULL;
    vcount n = {0, 0, 0, 0};
    uint64_t rows = 0, done, total;
    shard_conn *src;
    sqlbuf q;
    int rc;

    ss = shard__calloc(g->n, sizeof *ss);
    ts = shard__calloc(g->n, sizeof *ts);
    sql_init(&q);
    checksum_sql(&q, vr, g);
    /* Both servers compute their sums at once: sent to both, then read. */
    if (!ss || !ts)
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
    else if ((rc = move_wsrc(m, w, &src)) == 0 && (rc = conn_send(src, &q)) == 0) {
        if ((rc = conn_send(m->vsnap[w], &q)) == 0) {
            shard_errsave why;
            shard__error_save(&why, checksums(src, g, ss));
            rc = checksums(m->vsnap[w], g, ts); /* read even after a failure */
            if (why.code)
                rc = shard__error_restore(&why);
        } else {
            shard_errsave why;
            shard__error_save(&why, rc);
            checksums(src, g, ss); /* the source's answer is read, never left */
            rc = shard__error_restore(&why);
        }
    }
    sql_free(&q);
    for (size_t k = 0; rc == 0 && k < g->n; k++) {
        const vchunk *ch = &vr->chunks[g->first + k];
        const vtable *vt = &vr->tables[ch->table];
        rows += ch->rows;
        if (ss[k][0] && strcmp(ss[k], ts[k]) == 0)
            n.verified += ch->rows;
        else if ((rc = compare_rows(m, src, m->vsnap[w], vt, ch->where, &n)))
            shard__fail_prefix(rc, "verifying %s.%s: ", vt->t->db, vt->t->name);
    }
    free(ss);
    free(ts);
    if (rc)
        return rc;
    pthread_mutex_lock(&m->lock);
    m->r->rows_verified += n.verified;
    m->r->mismatches += n.mismatches;
    m->verify_unchecked += n.unchecked;
    m->verify_missing += n.missing;
    m->done += rows; /* the source's rows, so never past the total */
    done = m->done;
    total = m->total;
    pthread_mutex_unlock(&m->lock);
    move_progress(m, SHARD_MOVE_VERIFYING, done, total);
    return 0;
}

/* Small chunks (small tables) share statements: a move of many small
 * shards pays a round trip per MOVE_VERIFY_CHUNK_ROWS rows, not per table. */
static int make_groups(vrun *vr)
{
    size_t cap = vr->nchunks ? vr->nchunks : 1;

    if (!(vr->groups = shard__calloc(cap, sizeof *vr->groups)))
        return shard__fail(SHARD_ENOMEM, "out of memory");
    for (size_t i = 0; i < vr->nchunks;) {
        uint64_t rows = vr->chunks[i].rows;
        size_t n = 1;
        while (i + n < vr->nchunks && n < MOVE_VERIFY_GROUP &&
               rows + vr->chunks[i + n].rows <= MOVE_VERIFY_CHUNK_ROWS)
            rows += vr->chunks[i + n++].rows;
        vr->groups[vr->ngroups++] = (vgroup){i, n};
        i += n;
    }
    return 0;
}

/* ---- chunks: walking the source's primary key ------------------------------------ */

/* One key value as a literal: a number as it is, anything else as hex. */
static int add_value(sqlbuf *q, const char *v, unsigned long len, bool num)
{
    if (!num) {
        sql_hex(q, v, len);
        return 0;
    }
    if (len == 0 || strspn(v, "0123456789.-+eE") != len)
        return shard__fail(SHARD_ESERVER, "unexpected numeric key text");
    sql_add(q, v);
    return 0;
}

/*
 * key > b (above) or key <= b, for a key of several columns, written out
 * so that the range optimiser reads only the chunk: (k1 > b1 OR (k1 = b1
 * AND (k2 > b2 OR ...))).
 */
static int add_bound(sqlbuf *q, const vtable *vt, MYSQL_ROW b, unsigned long *lb, bool above)
{
    int rc = 0;

    for (unsigned i = 0; rc == 0 && i < vt->nkey; i++) {
        bool last = i + 1 == vt->nkey;
        sql_addf(q, "(`%s` %s ", vt->key[i], above ? ">" : last ? "<=" : "<");
        rc = add_value(q, b[i], lb[i], vt->key_num[i]);
        if (!last) {
            sql_addf(q, " OR (`%s` = ", vt->key[i]);
            rc = rc ? rc : add_value(q, b[i], lb[i], vt->key_num[i]);
            sql_add(q, " AND ");
        }
    }
    for (unsigned i = 0; i < vt->nkey; i++)
        sql_add(q, i + 1 == vt->nkey ? ")" : "))");
    return rc ? rc : sql_check(q);
}

static int add_chunk(vrun *vr, size_t table, sqlbuf *where, uint64_t rows)
{
    mv *m = vr->m;
    char *w = shard__strdup(where->len ? where->s : "1");
    int rc = 0;

    if (!w)
        return shard__fail(SHARD_ENOMEM, "out of memory");
    pthread_mutex_lock(&m->lock);
    if (vr->nchunks == vr->cap) {
        size_t nc = vr->cap ? vr->cap * 2 : 256;
        vchunk *c = shard__realloc(vr->chunks, nc * sizeof *c);
        if (c) {
            vr->chunks = c;
            vr->cap = nc;
        }
    }
    if (vr->nchunks < vr->cap) {
        vr->chunks[vr->nchunks++] = (vchunk){table, w, rows};
        vr->tables[table].rows += rows;
        m->total += rows;
    } else {
        free(w);
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

/*
 * The table's chunks: the source's keys read in order, MOVE_VERIFY_CHUNK_ROWS
 * at a time (keys only, never rows), so each chunk's row count is exact;
 * the last chunk read is open above. prev holds "key > the last boundary".
 */
static int walk_table(vrun *vr, size_t ti, shard_conn *src)
{
    const vtable *vt = &vr->tables[ti];
    sqlbuf q, prev, where;
    int rc = 0;

    sql_init(&q);
    sql_init(&prev);
    sql_init(&where);
    for (;;) {
        MYSQL_RES *res;
        MYSQL_ROW last = NULL;
        unsigned long *lens = NULL;
        uint64_t rows = 0;
        sql_reset(&q);
        sql_add(&q, "SELECT ");
        for (unsigned i = 0; i < vt->nkey; i++)
            sql_addf(&q, "%s`%s`", i ? ", " : "", vt->key[i]);
        sql_add(&q, " FROM ");
        sql_table(&q, vt->t->db, vt->t->name);
        if (prev.len) {
            sql_add(&q, " WHERE ");
            sql_add(&q, prev.s);
        }
        sql_add(&q, " ORDER BY ");
        for (unsigned i = 0; i < vt->nkey; i++)
            sql_addf(&q, "%s`%s`", i ? ", " : "", vt->key[i]);
        sql_addf(&q, " LIMIT %u", MOVE_VERIFY_CHUNK_ROWS);
        if ((rc = sql_check(&q)) || (rc = conn_query(src, &q)))
            break;
        if (!(res = mysql_store_result(src->my))) {
            rc = shard__fail(SHARD_ESERVER, "%s", mysql_error(src->my));
            break;
        }
        rows = mysql_num_rows(res);
        if (rows == MOVE_VERIFY_CHUNK_ROWS) {
            mysql_data_seek(res, rows - 1);
            last = mysql_fetch_row(res);
            lens = mysql_fetch_lengths(res);
        }
        if (!last) { /* the rest of the table: open above */
            mysql_free_result(res);
            rc = add_chunk(vr, ti, &prev, rows);
            break;
        }
        sql_reset(&where);
        if (prev.len) {
            sql_add(&where, prev.s);
            sql_add(&where, " AND ");
        }
        rc = add_bound(&where, vt, last, lens, false);
        sql_reset(&prev);
        if (rc == 0)
            rc = add_bound(&prev, vt, last, lens, true);
        mysql_free_result(res);
        if (rc || (rc = add_chunk(vr, ti, &where, rows)))
            break;
    }
    sql_free(&q);
    sql_free(&prev);
    sql_free(&where);
    return rc;
}

static bool numeric_type(const char *t)
{
    static const char *const num[] = {"tinyint", "smallint", "mediumint", "int", "bigint",
                                      "decimal", "float", "double", "year"};
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++)
        if (strcmp(t, num[i]) == 0)
            return true;
    return false;
}

/* The moved table db.name, or NULL; *hint: where the last one was (the
 * columns come in table order). */
static vtable *find_table(vrun *vr, const char *db, const char *name, size_t *hint)
{
    size_t n = vr->m->ntables;

    for (size_t k = 0; k < n; k++) {
        size_t i = (*hint + k) % n;
        if (strcmp(vr->tables[i].t->db, db) == 0 && strcmp(vr->tables[i].t->name, name) == 0) {
            *hint = i;
            return &vr->tables[i];
        }
    }
    return NULL;
}

/* A NOT NULL column whose text never holds the separator ',': hashed as
 * it prints, without a length (the cheaper part of the row hash). */
static bool plain_type(const char *type, const char *nullable)
{
    return strcmp(nullable, "NO") == 0 &&
           (numeric_type(type) || strcmp(type, "timestamp") == 0 ||
            strcmp(type, "datetime") == 0 || strcmp(type, "date") == 0);
}

/* One source column: its name, its part of the row hash, the key. */
static int add_column(vtable *vt, const char *name, const char *type, const char *key,
                      const char *nullable)
{
    if (!move_name_ok(name))
        return shard__fail(SHARD_ESERVER, "%s.%s: unexpected column name", vt->t->db,
                          vt->t->name);
    if (vt->ncols == vt->nkey && strcmp(key, "PRI") == 0 && vt->nkey < MOVE_VERIFY_MAX_KEY) {
        vt->key_num[vt->nkey] = numeric_type(type);
        snprintf(vt->key[vt->nkey++], sizeof vt->key[0], "%s", name);
    }
    vt->pk += strcmp(key, "PRI") == 0;
    if (strcmp(name, "updated_at") == 0 && strcmp(type, "timestamp") == 0)
        vt->updated_at = (int)vt->ncols;
    if (vt->ncols == 0) {
        vt->first_num = numeric_type(type);
        snprintf(vt->first, sizeof vt->first, "%s", name);
    }
    sql_addf(&vt->cols, "%s%s", vt->ncols ? "," : "", name);
    if (plain_type(type, nullable))
        sql_addf(&vt->hash, ", `%s`", name);
    else
        sql_addf(&vt->hash, ", COALESCE(CONCAT(LENGTH(CAST(`%s` AS BINARY)), ':', CAST(`%s` AS"
                 " BINARY)), 'N')", name, name);
    vt->ncols++;
    return 0;
}

/*
 * Every moved table's columns, from one information_schema query per side
 * (not a statement per table): on the source the key and the row hash, on
 * the target the names, which must be the same.
 */
static int describe_tables(vrun *vr, shard_conn *c, bool target)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    size_t hint = 0;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_KEY,"
                " IS_NULLABLE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN (");
    move_db_list(vr->m, &q, true);
    sql_add(&q, ") ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION");
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(c, &q);
    sql_free(&q);
    if (rc)
        return rc;
    if (!(res = mysql_store_result(c->my)))
        return shard__fail(SHARD_ESERVER, "%s", mysql_error(c->my));
    while (rc == 0 && (row = mysql_fetch_row(res))) {
        vtable *vt = find_table(vr, row[0], row[1], &hint);
        if (!vt || !row[2] || !row[3] || !row[4] || !row[5])
            continue;
        if (target)
            sql_addf(&vt->tcols, "%s%s", vt->tcols.len ? "," : "", row[2]);
        else
            rc = add_column(vt, row[2], row[3], row[4], row[5]);
    }
    mysql_free_result(res);
    return rc;
}

/* The tables' row hashes complete, the target's columns checked. */
static int finish_tables(vrun *vr)
{
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < vr->m->ntables; i++) {
        vtable *vt = &vr->tables[i];
        sql_add(&vt->hash, "))");
        /* Chunks need a unique key leading the columns (libshard's tables
         * have one); any other table is one chunk, ordered by column 1. */
        if ((vt->whole = vt->nkey == 0 || vt->nkey != vt->pk)) {
            vt->key_num[0] = vt->first_num;
            snprintf(vt->key[0], sizeof vt->key[0], "%s", vt->first);
            vt->nkey = 1;
        }
        if ((rc = sql_check(&vt->hash)) || (rc = sql_check(&vt->cols)) ||
            (rc = sql_check(&vt->tcols)))
            break;
        if (!vt->ncols)
            rc = shard__fail(SHARD_ESERVER, "%s.%s: no columns on the source", vt->t->db,
                            vt->t->name);
        else if (!vt->tcols.len)
            rc = shard__fail(SHARD_EVERIFY, "%s.%s is missing on the target", vt->t->db,
                            vt->t->name);
        else if (strcmp(vt->cols.s, vt->tcols.s) != 0)
            rc = shard__fail(SHARD_EVERIFY, "%s.%s: the target's columns (%.200s) are not the "
                            "source's (%.200s)", vt->t->db, vt->t->name, vt->tcols.s,
                            vt->cols.s);
    }
    return rc;
}

/*
 * Tables MOVE_VERIFY_GROUP at a time: one statement counts up to a chunk's
 * rows of each; a table with fewer is one chunk (its count exact), and
 * only a larger one has its keys walked.
 */
static int table_group_fn(void *arg, size_t gi, unsigned w)
{
    vrun *vr = arg;
    size_t first = gi * MOVE_VERIFY_GROUP, n = vr->m->ntables - first;
    MYSQL_RES *res;
    MYSQL_ROW row;
    shard_conn *src;
    sqlbuf q, all;
    int rc;

    if (n > MOVE_VERIFY_GROUP)
        n = MOVE_VERIFY_GROUP;
    if ((rc = move_wsrc(vr->m, w, &src)))
        return rc;
    sql_init(&q);
    sql_init(&all);
    for (size_t k = 0; k < n; k++) {
        const vtable *vt = &vr->tables[first + k];
        sql_addf(&q, "%sSELECT %zu, COUNT(*) FROM ", k ? " UNION ALL " : "", k);
        if (vt->whole) {
            sql_table(&q, vt->t->db, vt->t->name);
        } else {
            sql_add(&q, "(SELECT 1 FROM ");
            sql_table(&q, vt->t->db, vt->t->name);
            sql_addf(&q, " LIMIT %u) x%zu", MOVE_VERIFY_CHUNK_ROWS, k);
        }
    }
    if ((rc = sql_check(&q)) == 0)
        rc = conn_query(src, &q);
    sql_free(&q);
    if (rc)
        return rc;
    if (!(res = mysql_store_result(src->my)))
        return shard__fail(SHARD_ESERVER, "%s", mysql_error(src->my));
    while (rc == 0 && (row = mysql_fetch_row(res))) {
        size_t k = row[0] ? strtoull(row[0], NULL, 10) : n;
        uint64_t rows = row[1] ? strtoull(row[1], NULL, 10) : 0;
        const vtable *vt = &vr->tables[first + (k < n ? k : 0)];
        if (k >= n)
            continue;
        if (vt->whole || rows < MOVE_VERIFY_CHUNK_ROWS)
            rc = add_chunk(vr, first + k, &all, rows);
        else
            rc = walk_table(vr, first + k, src); /* src's result is stored: free to use */
        if (rc)
            shard__fail_prefix(rc, "verifying %s.%s: ", vt->t->db, vt->t->name);
    }
    mysql_free_result(res);
    sql_free(&all);
    return rc;
}

/* ---- the phase --------------------------------------------------------------------- */

/*
 * Resumed after the flip, with no snapshot of the flip point: snapshots of
 * the target as it is now, all opened while commits wait (one point for
 * every worker), and the target's clock at the fence from the journal.
 */
static int open_live(mv *m)
{
    char *at = NULL;
    char sql[200];
    int rc;

    m->verify_live = true;
    m->flip_at[0] = '\0';
    snprintf(sql, sizeof sql, "SELECT IFNULL(UNIX_TIMESTAMP(flip_at), '') FROM "
             MOVES_TABLE " WHERE id = %llu", (unsigned long long)m->id);
    if ((rc = repl_value(m->ctl, sql, &at)))
        return rc;
    if (at[0]) {
        /* As the target prints updated_at in a '+00:00' session. */
        double t = strtod(at, NULL);
        time_t sec = (time_t)t;
        struct tm tm;
        long us = (long)((t - (double)sec) * 1e6 + 0.5);
        if (us > 999999)
            us = 999999;
        gmtime_r(&sec, &tm);
        snprintf(m->flip_at, sizeof m->flip_at, "%04d-%02d-%02d %02d:%02d:%02d.%06ld",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                 tm.tm_sec, us);
    }
    free(at);
    return move_vsnaps_open(m, true);
}

/*
 * Source rows a resumed verification could not find on the target: a
 * client deleted them after the flip, or they never arrived, and nothing
 * left can tell which. The source is kept (journaled, so that a later
 * resume keeps it too) for the operator to compare by hand.
 */
static int keep_source_for_missing(mv *m)
{
    char msg[600];

    if (!m->verify_missing)
        return 0;
    m->o.flags |= SHARD_MOVE_KEEP_SOURCE;
    snprintf(msg, sizeof msg, "move %llu: %llu source rows are not on the target: deleted "
             "there after the flip, or never copied; a verification resumed after the flip "
             "cannot tell (libshard-move(7), \"Verification\"): the source is kept",
             (unsigned long long)m->id, (unsigned long long)m->verify_missing);
    ctx_log(m->ctx, SHARD_LOG_WARN, "%s", msg);
    return move_runf(m->ctl, "UPDATE " MOVES_TABLE " SET flags = flags | %d WHERE"
                     " id = %llu", SHARD_MOVE_KEEP_SOURCE, (unsigned long long)m->id);
}

int move_verify(mv *m)
{
    double t0 = now_seconds(), t1 = t0;
    vrun vr = {m, NULL, NULL, 0, 0, NULL, 0};
    unsigned n;
    int rc = 0;

    m->r->rows_verified = m->r->mismatches = 0;
    m->verify_unchecked = m->verify_missing = 0;
    m->done = m->total = 0; /* counted exactly below, from the frozen source */
    m->verify_live = false;
    if (!m->nvsnap)
        rc = open_live(m);
    n = m->nvsnap;
    /* Fresh source connections (no transaction left open by an earlier
     * phase), in the same time zone as the snapshots. */
    for (unsigned w = 0; rc == 0 && w < n; w++) {
        shard_conn *c;
        move_close(&move_wsrcs(m)[w]);
        if ((rc = move_wsrc(m, w, &c)) == 0)
            rc = move_runf(c, "SET SESSION time_zone = '+00:00'");
    }
    if (rc == 0 && !(vr.tables = shard__calloc(m->ntables ? m->ntables : 1, sizeof *vr.tables)))
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
    for (size_t i = 0; vr.tables && i < m->ntables; i++) {
        vtable *vt = &vr.tables[i];
        vt->t = &m->tables[i];
        vt->updated_at = -1;
        sql_init(&vt->hash);
        sql_init(&vt->cols);
        sql_init(&vt->tcols);
        sql_add(&vt->hash, "MD5(CONCAT_WS(','");
    }
    move_step(m, &t1, "opening the verification's connections");
    if (rc == 0 && (rc = describe_tables(&vr, move_wsrcs(m)[0], false)) == 0 &&
        (rc = describe_tables(&vr, m->vsnap[0], true)) == 0)
        rc = finish_tables(&vr);
    move_step(m, &t1, "reading the tables' columns");
    if (rc == 0)
        rc = fanout_run((m->ntables + MOVE_VERIFY_GROUP - 1) / MOVE_VERIFY_GROUP, n,
                        table_group_fn, &vr);
    move_step(m, &t1, "cutting the tables into chunks");
    if (rc == 0 && (rc = make_groups(&vr)) == 0) {
        move_progress(m, SHARD_MOVE_VERIFYING, 0, m->total);
        rc = fanout_run(vr.ngroups, n, group_fn, &vr);
    }
    move_step(m, &t1, "comparing the chunks' checksums");
    /* Kept after a failure: a retry verifies again against them while
     * they last (reconnect() in driver.c). */
    if (rc == 0)
        move_close_vsnaps(m);
    move_close_workers(m);
    for (size_t i = 0; vr.tables && i < m->ntables; i++) {
        sql_free(&vr.tables[i].hash);
        sql_free(&vr.tables[i].cols);
        sql_free(&vr.tables[i].tcols);
    }
    for (size_t i = 0; i < vr.nchunks; i++)
        free(vr.chunks[i].where);
    free(vr.tables);
    free(vr.chunks);
    free(vr.groups);
    m->r->verify_seconds = now_seconds() - t0;
    if (rc)
        return rc;
    move_progress(m, SHARD_MOVE_VERIFYING, m->done, m->total);
    if (m->verify_unchecked > m->verify_missing)
        ctx_log(m->ctx, SHARD_LOG_WARN, "move %llu: %llu rows written on the target after the "
                "flip were not compared (a verification resumed after the flip has no "
                "snapshot of it)", (unsigned long long)m->id,
                (unsigned long long)(m->verify_unchecked - m->verify_missing));
    return keep_source_for_missing(m);
}

/* ---- the target's snapshots ------------------------------------------------------ */

/* One snapshot per verifying worker, of the target as it is now; with
 * one_point, all opened while the moved tables are locked against writes
 * (move_lock_tables: the target's other writers go on), so that every
 * worker sees the same moved rows even while clients write them. */
int move_vsnaps_open(mv *m, bool one_point)
{
    unsigned n = move_threads(m);
    shard_conn *lk = NULL;
    int rc = 0;

    move_close_vsnaps(m);
    for (unsigned w = 0; rc == 0 && w < n; w++) {
        if ((rc = move_conn(m, &move_dp(m)->master, &m->vsnap[w])))
            break;
        m->nvsnap = w + 1;
        rc = move_runf(m->vsnap[w], "SET SESSION time_zone = '+00:00'");
    }
    if (rc == 0 && one_point && (rc = move_conn(m, &move_dp(m)->master, &lk)) == 0)
        rc = move_lock_tables(m, lk);
    for (unsigned w = 0; rc == 0 && w < n; w++)
        rc = move_runf(m->vsnap[w], "START TRANSACTION WITH CONSISTENT SNAPSHOT");
    if (lk)
        move_runf(lk, "UNLOCK TABLES");
    move_close(&lk);
    if (rc)
        move_close_vsnaps(m);
    return rc;
}

void move_close_vsnaps(mv *m)
{
    for (unsigned w = 0; w < m->nvsnap; w++)
        move_close(&m->vsnap[w]);
    m->nvsnap = 0;
}
