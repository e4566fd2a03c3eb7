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

/* The next read's rows follow this batch's bytes (import_adapt_batch). */
static void adapt_batch(import_run *r, const import_item *it, size_t n)
{
    size_t bytes = 0;

    for (size_t i = 0; i < n; i++)
        bytes += it[i].len + 64;
    import_adapt_batch(r, bytes, n);
}

/* One batch read and converted: the rows after `after` (first: from the
 * start, so that ids below 1 are seen, and refused, never skipped); then
 * what its write stage left for the entries stage. */
typedef struct batch {
    import_item *it;
    size_t n;
    unsigned asked;
    MYSQL_RES *res;      /* the rows the items point into */
    unsigned long *lens;
    import_item **nw, **ch; /* new rows, changed rows */
    size_t nn, nc;
    /* The entries stage's counts, added to the report by the pipeline's
     * own thread once the stages of a step are done (the write stage
     * counts into the report at the same time). */
    uint64_t made, changed, unchanged;
} batch;

/* The entries stage's counts of b into the report (the pipeline's thread). */
static void batch_count(import_run *r, batch *b)
{
    r->rep.created += b->made;
    r->rep.changed += b->changed;
    r->rep.unchanged += b->unchanged;
    b->made = b->changed = b->unchanged = 0;
}

static void batch_free(batch *b)
{
    import_items_free(b->it, b->n);
    if (b->res)
        mysql_free_result(b->res);
    free(b->lens);
    free(b->nw);
    free(b->ch);
    memset(b, 0, sizeof *b);
}

/* The batch classified against its entries, its new objects written and
 * its changed ones rewritten: everything but the entries. */
static int write_stage(import_run *r, batch *b)
{
    import_item *it = b->it;
    int rc;

    b->nw = shard__calloc(b->n, sizeof *b->nw);
    b->ch = shard__calloc(b->n, sizeof *b->ch);
    if (!b->nw || !b->ch)
        return shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", b->n);
    rc = import_classify(r, it, b->n);
    for (size_t i = 0; rc == 0 && i < b->n; i++) {
        if (it[i].act == ACT_NEW)
            b->nw[b->nn++] = &it[i];
        else if (it[i].act == ACT_CHANGED)
            b->ch[b->nc++] = &it[i];
        else if (it[i].act == ACT_UNCHANGED)
            r->rep.unchanged++;
        r->seen_live += it[i].act == ACT_CHANGED || it[i].act == ACT_UNCHANGED;
    }
    if (rc == 0 && r->dry) {
        r->rep.created += b->nn;
        r->rep.changed += b->nc;
        b->nn = b->nc = 0; /* nothing for the entries stage */
    } else if (rc == 0 && (b->nn || b->nc)) {
        if ((rc = import_items_text(r, b->res, b->nw, b->nn)) == 0 &&
            (rc = import_items_text(r, b->res, b->ch, b->nc)) == 0 &&
            (rc = import_mark(r)) == 0 && (rc = import_create(r, b->nw, b->nn)) == 0)
            rc = import_change(r, b->ch, b->nc);
    }
    return rc;
}

/* The entries of what the write stage wrote (also after it failed: the
 * objects that did commit get theirs). */
static int entries_stage(import_run *r, batch *b)
{
    uint64_t made = 0, changed = 0;
    int rc;

    if (!b->nn && !b->nc)
        return 0;
    rc = import_entries(r, b->nw, b->nn, b->ch, b->nc, &made, &changed);
    b->made += made;
    b->changed += changed;
    if (rc == 0)
        b->unchanged += b->nc - changed;
    b->nn = b->nc = 0;
    return rc;
}

static int read_batch(import_run *r, bool first, uint64_t after, batch *b)
{
    MYSQL_RES *res;
    char where[200];
    int rc;

    memset(b, 0, sizeof *b);
    b->asked = r->batch;
    if (first)
        snprintf(where, sizeof where, " ORDER BY `%s` LIMIT %u", r->id_col, b->asked);
    else
        snprintf(where, sizeof where, " WHERE `%s` > %" PRIu64 " ORDER BY `%s` LIMIT %u",
                 r->id_col, after, r->id_col, b->asked);
    if ((rc = import_read_rows(r, where, &res)))
        return rc;
    /* A first pass (an empty lookup) writes every row: texts at once. */
    rc = import_res_items(r, res, r->empty, &b->it, &b->n, &b->lens);
    if (rc)
        mysql_free_result(res);
    else
        b->res = res;
    return rc;
}

/*
 * A pipeline of three stages over consecutive batches, run at once
 * (fanout_run, one thread each): the entries of batch N-1, the objects of
 * batch N, the read and conversion of batch N+1 (only the reader uses the
 * source connection). A batch's entries are written only after its
 * objects committed, so an interruption anywhere leaves objects without
 * entries at most, which the next pass finds (the marker). Three batches
 * in memory at most.
 */
typedef struct step {
    import_run *r;
    batch *prev, *cur, *next;
    int rc[3];
} step;

static int step_fn(void *arg, size_t i, unsigned worker)
{
    step *s = arg;

    (void)worker;
    if (i == 0)
        s->rc[0] = entries_stage(s->r, s->prev);
    else if (i == 1)
        s->rc[1] = s->cur->n ? write_stage(s->r, s->cur) : 0;
    else
        s->rc[2] = read_batch(s->r, false, s->cur->it[s->cur->n - 1].legacy, s->next);
    return s->rc[i];
}

static int forward_scan(import_run *r)
{
    batch b[3];
    int rc, k = 0; /* b[k]: the current batch, b[(k+2)%3] the previous */

    memset(b, 0, sizeof b);
    if ((rc = read_batch(r, true, 0, &b[0])))
        return rc;
    for (;;) {
        step s = {r, &b[(k + 2) % 3], &b[k], &b[(k + 1) % 3], {0, 0, 0}};
        bool more = s.cur->n == s.cur->asked && s.cur->n > 0;
        r->rep.rows_read += s.cur->n;
        adapt_batch(r, s.cur->it, s.cur->n);
        rc = fanout_run(more ? 3 : 2, 3, step_fn, &s);
        batch_count(r, s.prev);
        if (rc || !more) {
            /* The current batch's written objects get their entries before
             * the pass ends (the first error is the one reported). */
            shard_errsave saved;
            int rc2;
            shard__error_save(&saved, rc);
            rc2 = entries_stage(r, s.cur);
            batch_count(r, s.cur);
            if (rc)
                shard__error_restore(&saved);
            else
                rc = rc2;
        }
        batch_free(s.prev);
        if (rc || !more) {
            batch_free(s.cur);
            batch_free(s.next);
            return rc;
        }
        import_progress(r, "rows", false);
        k = (k + 1) % 3;
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
