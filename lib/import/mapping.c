/*
 * Join tables (libshard-import(7)): each join row becomes a mapping row
 * between the two resolved IDs (and its reverse), recorded in the
 * mapping's lookup table as "FROMID TOID SEQ" under "FROM:TO"; a changed
 * sequence rewrites it, a join row that is gone removes it. Mapping rows
 * are upserts: a pass that dies anywhere is repeated harmlessly.
 */
#include "import.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct edge {
    uint64_t f, t;    /* legacy ids */
    int64_t seq;
    uint64_t fid, tid; /* native IDs */
    char key[48];      /* "F:T" */
    char *val;         /* "FROMID TOID SEQ" */
    bool write;
} edge;

typedef struct edge_job {
    import_run *r;
    edge **e;
} edge_job;

static int add_edge(void *arg, size_t i, unsigned worker)
{
    edge_job *j = arg;
    (void)worker;
    return shard_mapping_add(j->r->ctx, j->r->name, j->e[i]->fid, j->e[i]->tid,
                             j->e[i]->seq);
}

static int remove_edge(void *arg, size_t i, unsigned worker)
{
    edge_job *j = arg;
    int rc = shard_mapping_remove(j->r->ctx, j->r->name, j->e[i]->fid, j->e[i]->tid);
    (void)worker;
    return rc == SHARD_ENOTFOUND ? 0 : rc;
}

static int edge_fail(import_run *r, const edge *e, const char *fmt, ...) SHARD_PRINTF(3, 4);

static int edge_fail(import_run *r, const edge *e, const char *fmt, ...)
{
    char detail[300];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return shard__fail(SHARD_ENOTFOUND, "legacy row %s (%s=%" PRIu64 ", %s=%" PRIu64 "): %s; "
                      "refused", r->table, r->o->from_column, e->f, r->o->to_column, e->t,
                      detail);
}

/* Resolve both ends, compare with the record, write what differs. */
static int edge_batch(import_run *r, edge *e, size_t n)
{
    uint64_t *in = shard__calloc(n, sizeof *in), *out = shard__calloc(n, sizeof *out);
    char **keys = shard__calloc(n, sizeof *keys), **vals = shard__calloc(n, sizeof *vals);
    edge **w = shard__calloc(n, sizeof *w);
    size_t nw = 0, nnew = 0;
    int rc = 0;

    if (!in || !out || !keys || !vals || !w) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        in[i] = e[i].f;
    if ((rc = shard_legacy_resolve_many(r->ctx, r->o->from_type, in, n, out)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (!(e[i].fid = out[i])) {
            rc = edge_fail(r, &e[i], "%s %" PRIu64 " has no lookup entry (import it first)",
                           r->o->from_column, e[i].f);
            goto out;
        }
        in[i] = e[i].t;
    }
    if ((rc = shard_legacy_resolve_many(r->ctx, r->o->to_type, in, n, out)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        char v[80];
        if (!(e[i].tid = out[i])) {
            rc = edge_fail(r, &e[i], "%s %" PRIu64 " has no lookup entry (import it first)",
                           r->o->to_column, e[i].t);
            goto out;
        }
        snprintf(v, sizeof v, "%" PRIu64 " %" PRIu64 " %" PRId64, e[i].fid, e[i].tid, e[i].seq);
        if (!(e[i].val = shard__strdup(v))) {
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
            goto out;
        }
        keys[i] = e[i].key;
    }
    if ((rc = legacy_kv_get_many(r->ctx, r->lookup, keys, n, vals)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (vals[i] && strcmp(vals[i], e[i].val) == 0) {
            r->rep.unchanged++;
            continue;
        }
        nnew += !vals[i];
        w[nw++] = &e[i];
    }
    if (!r->dry && nw) {
        edge_job j = {r, w};
        if ((rc = fanout_run(nw, r->threads, add_edge, &j)))
            goto out;
        for (size_t i = 0; i < nw; i++) {
            keys[i] = w[i]->key;
            free(vals[i]);
            vals[i] = NULL;
        }
        char **wv = shard__calloc(nw, sizeof *wv);
        if (!wv) {
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < nw; i++)
            wv[i] = w[i]->val;
        rc = legacy_kv_put_many(r->ctx, r->lookup, keys, wv, nw, r->threads);
        free(wv);
        if (rc)
            goto out;
    }
    r->rep.created += nnew;
    r->rep.changed += nw - nnew;
out:
    for (size_t i = 0; vals && i < n; i++)
        free(vals[i]);
    free(in);
    free(out);
    free(keys);
    free(vals);
    free(w);
    return rc;
}

static int edge_forward(import_run *r)
{
    const shard_import_options *o = r->o;
    uint64_t lf = 0, lt = 0;
    bool first = true, full = false;

    for (;;) {
        MYSQL_RES *res;
        MYSQL_ROW row;
        edge *e = NULL;
        size_t n = 0;
        sqlbuf q;
        int rc;

        full = false;
        sql_init(&q);
        sql_addf(&q, "SELECT `%s`, `%s`, %s FROM `%s`.`%s`", o->from_column, o->to_column,
                 r->seq_expr, r->src.db, r->table);
        if (!first) {
            sql_addf(&q, " WHERE `%s` > ", o->from_column);
            sql_u64(&q, lf);
            sql_addf(&q, " OR (`%s` = ", o->from_column);
            sql_u64(&q, lf);
            sql_addf(&q, " AND `%s` > ", o->to_column);
            sql_u64(&q, lt);
            sql_add(&q, ")");
        }
        sql_addf(&q, " ORDER BY `%s`, `%s` LIMIT %u", o->from_column, o->to_column, r->batch);
        first = false;
        rc = sql_check(&q);
        if (rc == 0)
            rc = import_source_query(&r->src, q.s, q.len, &res);
        sql_free(&q);
        if (rc)
            return rc;
        if (!(e = shard__calloc(mysql_num_rows(res) + 1, sizeof *e)))
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
        while (rc == 0 && (row = mysql_fetch_row(res))) {
            int64_t f, t, s = 0;
            if (!row[0] || !row[1] || import_parse_i64(row[0], &f) || import_parse_i64(row[1], &t) ||
                f < 1 || t < 1 || (uint64_t)f > SHARD_MAX_LOCAL ||
                (uint64_t)t > SHARD_MAX_LOCAL) {
                rc = shard__fail(SHARD_EINVAL, "legacy row %s (%s=%s, %s=%s): both ends must "
                                "be legacy ids (1..2^36-1); refused", r->table,
                                o->from_column, row[0] ? row[0] : "NULL", o->to_column,
                                row[1] ? row[1] : "NULL");
                break;
            }
            if (row[2] && import_parse_i64(row[2], &s)) {
                rc = shard__fail(SHARD_EINVAL, "legacy row %s (%s=%s, %s=%s): sequence \"%.40s\""
                                " is not a 64-bit integer; refused", r->table, o->from_column,
                                row[0], o->to_column, row[1], row[2]);
                break;
            }
            e[n].f = (uint64_t)f;
            e[n].t = (uint64_t)t;
            e[n].seq = o->seq_column ? s : t;
            snprintf(e[n].key, sizeof e[n].key, "%" PRIu64 ":%" PRIu64, e[n].f, e[n].t);
            n++;
        }
        mysql_free_result(res);
        r->rep.rows_read += n;
        if (rc == 0 && n) {
            size_t asked = r->batch, bytes = 0;
            lf = e[n - 1].f;
            lt = e[n - 1].t;
            rc = edge_batch(r, e, n);
            /* sized in bytes, as objects are: a record is its key and value */
            for (size_t i = 0; rc == 0 && i < n; i++)
                bytes += strlen(e[i].key) + (e[i].val ? strlen(e[i].val) : 0) + 64;
            import_adapt_batch(r, bytes, n);
            full = n == asked;
        }
        for (size_t i = 0; e && i < n; i++)
            free(e[i].val);
        free(e);
        if (rc)
            return rc;
        import_progress(r, "rows", false);
        if (!full)
            return 0;
    }
}

/* Recorded rows whose join row is gone: remove them (and their reverse). */
static int edge_gone(void *payload, size_t n, char **keys, char **vals)
{
    import_run *r = payload;
    const shard_import_options *o = r->o;
    edge *e = shard__calloc(n, sizeof *e);
    edge **gone = shard__calloc(n, sizeof *gone);
    char **gk = shard__calloc(n, sizeof *gk);
    size_t ng = 0;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    sqlbuf q;
    int rc = 0;

    sql_init(&q);
    if (!e || !gone || !gk) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (sscanf(keys[i], "%" SCNu64 ":%" SCNu64, &e[i].f, &e[i].t) != 2 ||
            sscanf(vals[i], "%" SCNu64 " %" SCNu64, &e[i].fid, &e[i].tid) != 2) {
            rc = shard__fail(SHARD_EINVAL, "record %s, key %.40s: not an entry libshard wrote",
                            r->lookup, keys[i]);
            goto out;
        }
        snprintf(e[i].key, sizeof e[i].key, "%s", keys[i]);
    }
    sql_addf(&q, "SELECT `%s`, `%s` FROM `%s`.`%s` WHERE (`%s`, `%s`) IN (", o->from_column,
             o->to_column, r->src.db, r->table, o->from_column, o->to_column);
    for (size_t i = 0; i < n; i++) {
        sql_add(&q, i ? ",(" : "(");
        sql_u64(&q, e[i].f);
        sql_add(&q, ",");
        sql_u64(&q, e[i].t);
        sql_add(&q, ")");
    }
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) || (rc = import_source_query(&r->src, q.s, q.len, &res)))
        goto out;
    while ((row = mysql_fetch_row(res))) {
        uint64_t f = strtoull(row[0], NULL, 10), t = strtoull(row[1], NULL, 10);
        for (size_t i = 0; i < n; i++)
            if (e[i].f == f && e[i].t == t)
                e[i].write = true; /* present */
    }
    for (size_t i = 0; i < n; i++)
        if (!e[i].write) {
            gone[ng] = &e[i];
            gk[ng++] = e[i].key;
        }
    if (ng && !r->dry) {
        edge_job j = {r, gone};
        if ((rc = fanout_run(ng, r->threads, remove_edge, &j)) == 0)
            rc = legacy_kv_delete_many(r->ctx, r->lookup, gk, ng, r->threads);
    }
    if (rc == 0)
        r->rep.deleted += ng;
out:
    mysql_free_result(res);
    sql_free(&q);
    free(e);
    free(gone);
    free(gk);
    return rc;
}

int shard_import_mapping(shard_ctx *ctx, const shard_import_options *opts,
                         shard_import_report *report)
{
    import_run r;
    int rc;

    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_import_mapping: NULL context");
    if ((rc = report_import_check(report)) || (rc = import_check_options(opts)))
        return rc;
    import_run_init(&r, ctx, opts);
    if ((rc = import_mapping_setup(&r)) == 0 && (rc = edge_forward(&r)) == 0)
        rc = legacy_kv_scan(ctx, r.lookup, edge_gone, &r);
    import_run_end(&r, report, rc);
    return rc;
}
