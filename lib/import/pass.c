/*
 * A pass over a legacy table (libshard-import(7)): the table read in
 * primary-key order, one bounded batch per statement (keyset pagination),
 * so memory stays bounded and no statement runs long on the legacy
 * server; each batch classified against its lookup entries in bulk, new
 * rows written, changed ones rewritten; then the lookup scanned for rows
 * that are gone. An unchanged pass writes nothing.
 */
#include "import.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Without batch_rows, the next read's rows follow the bytes seen so far. */
static void adapt_batch(import_run *r, const import_item *it, size_t n)
{
    size_t bytes = 0, rows;

    if (r->fixed_batch || !n)
        return;
    for (size_t i = 0; i < n; i++)
        bytes += it[i].len + 64;
    rows = IMPORT_BATCH_BYTES / (bytes / n ? bytes / n : 1);
    if (rows < IMPORT_BATCH_MIN)
        rows = IMPORT_BATCH_MIN;
    if (rows > IMPORT_BATCH_MAX)
        rows = IMPORT_BATCH_MAX;
    r->batch = (unsigned)rows;
}

static int process_batch(import_run *r, import_item *it, size_t n)
{
    import_item **nw = shard__calloc(n, sizeof *nw), **ch = shard__calloc(n, sizeof *ch);
    size_t nn = 0, nc = 0;
    uint64_t made = 0, changed = 0;
    int rc;

    if (!nw || !ch) {
        free(nw);
        free(ch);
        return shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", n);
    }
    rc = import_classify(r, it, n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (it[i].act == ACT_NEW)
            nw[nn++] = &it[i];
        else if (it[i].act == ACT_CHANGED)
            ch[nc++] = &it[i];
        else if (it[i].act == ACT_UNCHANGED)
            r->rep.unchanged++;
        r->seen_live += it[i].act == ACT_CHANGED || it[i].act == ACT_UNCHANGED;
    }
    if (rc == 0 && r->dry) {
        r->rep.created += nn;
        r->rep.changed += nc;
    } else if (rc == 0 && (nn || nc)) {
        if ((rc = import_mark(r)) == 0 && (rc = import_create(r, nw, nn, &made)) == 0)
            rc = import_change(r, ch, nc, &changed);
        r->rep.created += made;
        r->rep.changed += changed;
        r->rep.unchanged += nc - changed;
    }
    free(nw);
    free(ch);
    return rc;
}

/* One batch read and converted: the rows after `after` (first: from the
 * start, so that ids below 1 are seen, and refused, never skipped). */
typedef struct batch {
    import_item *it;
    size_t n;
    unsigned asked;
} batch;

static int read_batch(import_run *r, bool first, uint64_t after, batch *b)
{
    MYSQL_RES *res;
    char where[200];
    int rc;

    b->it = NULL;
    b->n = 0;
    b->asked = r->batch;
    if (first)
        snprintf(where, sizeof where, " ORDER BY `%s` LIMIT %u", r->id_col, b->asked);
    else
        snprintf(where, sizeof where, " WHERE `%s` > %" PRIu64 " ORDER BY `%s` LIMIT %u",
                 r->id_col, after, r->id_col, b->asked);
    if ((rc = import_read_rows(r, where, &res)))
        return rc;
    rc = import_res_items(r, res, &b->it, &b->n);
    mysql_free_result(res);
    return rc;
}

/* A batch processed while the next one is read: the legacy server's read
 * and the conversion overlap the lookups and writes (fanout_run: two
 * items, two threads; only the reader uses the source connection). */
typedef struct step {
    import_run *r;
    batch *cur, *next;
    bool more;
} step;

static int step_fn(void *arg, size_t i, unsigned worker)
{
    step *s = arg;

    (void)worker;
    if (i == 0)
        return process_batch(s->r, s->cur->it, s->cur->n);
    return read_batch(s->r, false, s->cur->it[s->cur->n - 1].legacy, s->next);
}

static int forward_scan(import_run *r)
{
    batch b[2];
    int rc, cur = 0;

    if ((rc = read_batch(r, true, 0, &b[0])))
        return rc;
    for (;;) {
        batch *c = &b[cur], *nx = &b[!cur];
        step s = {r, c, nx, c->n == c->asked && c->n > 0};
        r->rep.rows_read += c->n;
        adapt_batch(r, c->it, c->n);
        nx->it = NULL;
        nx->n = 0;
        if (c->n)
            rc = fanout_run(s.more ? 2 : 1, 2, step_fn, &s);
        import_items_free(c->it, c->n);
        if (rc) {
            import_items_free(nx->it, nx->n);
            return rc;
        }
        import_progress(r, "rows", false);
        if (!s.more)
            return 0;
        cur = !cur;
    }
}

/* ---- the lookup scan: rows that are gone ------------------------------------- */

/* Which of ids[0..n) exist in the legacy table: present[i]. */
static int rows_present(import_run *r, const uint64_t *ids, size_t n, bool *present)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    for (size_t i = 0; i < n; i++)
        present[i] = false;
    if (!n)
        return 0;
    sql_init(&q);
    sql_addf(&q, "SELECT `%s` FROM `%s`.`%s` WHERE `%s` IN (", r->id_col, r->src.db, r->table,
             r->id_col);
    for (size_t i = 0; i < n; i++) {
        sql_add(&q, i ? "," : "");
        sql_u64(&q, ids[i]);
    }
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) == 0)
        rc = import_source_query(&r->src, q.s, q.len, &res);
    sql_free(&q);
    if (rc)
        return rc;
    while ((row = mysql_fetch_row(res))) {
        uint64_t v = row[0] ? strtoull(row[0], NULL, 10) : 0;
        for (size_t i = 0; i < n; i++) /* ids are in key order, not numeric: scan */
            if (ids[i] == v)
                present[i] = true;
    }
    mysql_free_result(res);
    return 0;
}

static int gone_batch(void *payload, size_t n, char **keys, char **vals)
{
    import_run *r = payload;
    uint64_t *ids = shard__calloc(n, sizeof *ids);
    import_item *it = shard__calloc(n, sizeof *it);
    import_item **del = shard__calloc(n, sizeof *del);
    bool *present = shard__calloc(n, sizeof *present);
    size_t nl = 0, nd = 0;
    int rc = 0;

    if (!ids || !it || !del || !present) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory scanning %s", r->lookup);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        legacy_entry e;
        if (keys[i][0] < '0' || keys[i][0] > '9')
            continue; /* the pass marker */
        legacy_entry_parse(vals[i], &e);
        if (e.state != LEGACY_LIVE)
            continue;
        it[nl].legacy = ids[nl] = strtoull(keys[i], NULL, 10);
        it[nl].id = e.id;
        snprintf(it[nl].key, sizeof it[nl].key, "%s", keys[i]);
        nl++;
    }
    if ((rc = rows_present(r, ids, nl, present)))
        goto out;
    for (size_t i = 0; i < nl; i++)
        if (!present[i])
            del[nd++] = &it[i];
    if (nd && !r->dry && (rc = import_mark(r)) == 0)
        rc = import_delete(r, del, nd);
    if (rc == 0)
        r->rep.deleted += nd;
    import_progress(r, "looking for deleted rows", false);
out:
    for (size_t i = 0; it && i < n; i++)
        free(it[i].val);
    free(ids);
    free(it);
    free(del);
    free(present);
    return rc;
}

/*
 * Rows that are gone: the lookup's live entries, all read and checked
 * against the legacy table. Unless their number is what the forward scan
 * accounted for (entries it found live, entries it wrote): then each of
 * them names a row the scan saw, and none is gone. (A row deleted during
 * the pass, after the scan read it, is found by the next pass, whose scan
 * misses it.)
 */
static int gone_scan(import_run *r)
{
    uint64_t live = 0, expected = r->seen_live + r->rep.created;
    int rc = legacy_kv_count(r->ctx, r->lookup, " WHERE k <> '" IMPORT_MARKER_KEY "' AND v NOT "
                             "LIKE '% deleted'", r->threads, &live);

    if (rc || live == expected)
        return rc;
    return legacy_kv_scan(r->ctx, r->lookup, gone_batch, r);
}

int shard_import_table(shard_ctx *ctx, const shard_import_options *opts,
                       shard_import_report *report)
{
    import_run r;
    int rc;

    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_import_table: NULL context");
    if ((rc = report_import_check(report)) || (rc = import_check_options(opts)))
        return rc;
    import_run_init(&r, ctx, opts);
    if ((rc = import_table_setup(&r)) == 0 && (rc = import_marker_read(&r)) == 0 &&
        (rc = forward_scan(&r)) == 0 &&
        (rc = gone_scan(&r)) == 0)
        rc = import_unmark(&r);
    import_run_end(&r, report, rc);
    return rc;
}
