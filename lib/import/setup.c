/*
 * Setting an import run up (libshard-import(7)): the options, the map's
 * lookups, the legacy table's columns and key, and the run's end.
 */
#include "import.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void import_progress(import_run *r, const char *phase, bool force)
{
    char what[160];
    double t = now_seconds();

    if (!r->o->progress || (!force && t - r->last_progress < 0.5))
        return;
    r->last_progress = t;
    snprintf(what, sizeof what, "import %s: %s", r->name, phase);
    r->o->progress(what, r->rep.rows_read, r->estimate, r->o->payload);
}

int import_check_options(const shard_import_options *o)
{
    if (!o)
        return shard__fail(SHARD_EINVAL, "shard_import: NULL options");
    if (o->version < 1 || o->version > SHARD_IMPORT_OPTIONS_VERSION)
        return shard__fail(SHARD_EINVAL, "shard_import_options.version %u is not supported "
                          "(this library knows 1..%d)", o->version,
                          SHARD_IMPORT_OPTIONS_VERSION);
    if (o->flags & ~SHARD_IMPORT_DRY_RUN)
        return shard__fail(SHARD_EINVAL, "shard_import_options.flags: unknown flags 0x%x",
                          (unsigned)o->flags);
    if (!o->source)
        return shard__fail(SHARD_EINVAL, "shard_import_options.source is NULL");
    if (o->threads > IMPORT_MAX_THREADS)
        return shard__fail(SHARD_EINVAL, "shard_import_options.threads: %u is over %d",
                          o->threads, IMPORT_MAX_THREADS);
    if (o->batch_rows > IMPORT_MAX_BATCH)
        return shard__fail(SHARD_EINVAL, "shard_import_options.batch_rows: %u is over %d",
                          o->batch_rows, IMPORT_MAX_BATCH);
    return import_check_name("legacy table", o->table);
}

void import_run_init(import_run *r, shard_ctx *ctx, const shard_import_options *o)
{
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->o = o;
    r->threads = o->threads ? o->threads : 4;
    r->fixed_batch = o->batch_rows != 0;
    r->batch = o->batch_rows ? o->batch_rows : IMPORT_BATCH_FIRST;
    r->dry = (o->flags & SHARD_IMPORT_DRY_RUN) != 0;
    r->t0 = now_seconds();
    snprintf(r->table, sizeof r->table, "%s", o->table);
}

void import_adapt_batch(import_run *r, size_t bytes, size_t rows)
{
    size_t next;

    if (r->fixed_batch || !rows)
        return;
    next = IMPORT_BATCH_BYTES / (bytes / rows ? bytes / rows : 1);
    if (next < IMPORT_BATCH_MIN)
        next = IMPORT_BATCH_MIN;
    if (next > IMPORT_BATCH_MAX)
        next = IMPORT_BATCH_MAX;
    r->batch = (unsigned)next;
}

void import_hook(const char *point)
{
    if (shard__import_hook)
        shard__import_hook(point);
}

void import_run_end(import_run *r, shard_import_report *report, int rc)
{
    r->rep.seconds = now_seconds() - r->t0;
    if (rc == 0)
        import_progress(r, "done", true);
    if (r->collisions)
        ctx_log(r->ctx, SHARD_LOG_WARN, "import %s: %" PRIu64 " rows went to another shard "
                "than planned: a native object held their legacy id there", r->name,
                r->collisions);
    import_source_close(&r->src);
    report_import_out(report, &r->rep);
}

int import_probe(import_run *r, MYSQL_RES **res)
{
    return import_read_rows(r, " LIMIT 0", res);
}

const MYSQL_FIELD *import_field_named(MYSQL_RES *res, const char *name)
{
    MYSQL_FIELD *f = mysql_fetch_fields(res);
    for (unsigned i = 0; name && i < mysql_num_fields(res); i++)
        if (strcasecmp(f[i].name, name) == 0)
            return &f[i];
    return NULL;
}

/* The id column must be a key of its own (keyset reads and lookups by it). */
static int check_unique(import_run *r, const char *col)
{
    char sql[600], v[80];
    int rc;

    snprintf(sql, sizeof sql, "SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE "
             "TABLE_SCHEMA = '%s' AND TABLE_NAME = '%s' GROUP BY INDEX_NAME HAVING COUNT(*) "
             "= 1 AND MAX(NON_UNIQUE) = 0 AND MAX(COLUMN_NAME) = '%s' LIMIT 1", r->src.db,
             r->table, col);
    if ((rc = import_source_value(&r->src, sql, v, sizeof v)))
        return rc;
    if (!v[0]) {
        /* A view has no index of its own: its base table's key serves it. */
        snprintf(sql, sizeof sql, "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE "
                 "TABLE_SCHEMA = '%s' AND TABLE_NAME = '%s'", r->src.db, r->table);
        if ((rc = import_source_value(&r->src, sql, v, sizeof v)))
            return rc;
        if (strcmp(v, "VIEW") == 0)
            return 0;
        v[0] = '\0';
    }
    if (!v[0])
        return shard__fail(SHARD_EINVAL, "%s: column %s.%s is not the primary key or a unique "
                          "key of its own: the import reads in its order and finds rows by it",
                          r->src.label, r->table, col);
    return 0;
}

static void estimate(import_run *r)
{
    char sql[400], v[32];
    snprintf(sql, sizeof sql, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE "
             "TABLE_SCHEMA = '%s' AND TABLE_NAME = '%s'", r->src.db, r->table);
    if (import_source_value(&r->src, sql, v, sizeof v) == 0)
        r->estimate = strtoull(v, NULL, 10);
    shard__clear_error();
}

int import_table_setup(import_run *r)
{
    const shard_import_options *o = r->o;
    const shard_legacydef *def;
    const MYSQL_FIELD *f;
    shard_map *map = ctx_map(r->ctx);
    MYSQL_RES *res = NULL;
    char lock[80];
    int rc = 0;

    snprintf(r->id_col, sizeof r->id_col, "%s", o->id_column ? o->id_column : "id");
    const char *tname;
    if ((rc = object_table(map, o->type, &tname)))
        goto out;
    snprintf(r->name, sizeof r->name, "%s", tname);
    r->type = o->type;
    if (!(def = map_legacy_of_type(map, o->type))) {
        rc = shard__fail(SHARD_EINVAL, "the map has no legacy lookup for %s: add \"legacy\": "
                        "{\"%s\": {}} and \"legacy_%s\" to mod_shards.tables, publish the "
                        "map, run shardctl schema apply", r->name, r->name, r->name);
        goto out;
    }
    snprintf(r->lookup, sizeof r->lookup, "%s", def->table);
    r->open_shards = map->open_shards;
    if (o->near_column && !map_legacy_of_type(map, o->near_type)) {
        rc = shard__fail(SHARD_EINVAL, "near: type %u has no legacy lookup in the map",
                        o->near_type);
        goto out;
    }
    if ((rc = import_check_name("id column", r->id_col)) ||
        (o->json_column && (rc = import_check_name("JSON column", o->json_column))) ||
        (o->near_column && (rc = import_check_name("near column", o->near_column))))
        goto out;
    import_lock_name(r->name, lock);
    if ((rc = import_source_open(r->ctx, o, r->dry ? NULL : lock, &r->src)) || (rc = import_probe(r, &res)))
        goto out;
    f = import_field_named(res, r->id_col);
    if (f) /* the column's own spelling names the object's field */
        snprintf(r->id_col, sizeof r->id_col, "%s", f->name);
    if (!f || !import_kind_integer(import_kind_of(f)))
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is %s", r->src.label, r->table, r->id_col,
                        f ? "not an integer column" : "not a column");
    else if (o->json_column && !((f = import_field_named(res, o->json_column)) &&
                                 import_kind_of(f) == COL_TEXT))
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is %s", r->src.label, r->table,
                        o->json_column, f ? "not a text column" : "not a column");
    else if (o->near_column && !((f = import_field_named(res, o->near_column)) &&
                                 import_kind_integer(import_kind_of(f))))
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is %s", r->src.label, r->table,
                        o->near_column, f ? "not an integer column" : "not a column");
    else
        rc = check_unique(r, r->id_col);
    if (rc == 0)
        estimate(r);
out:
    mysql_free_result(res);
    shard_map_free(map);
    return rc;
}

int import_mapping_setup(import_run *r)
{
    const shard_import_options *o = r->o;
    const shard_mapdef *md;
    const shard_legacydef *def;
    const MYSQL_FIELD *f;
    shard_map *map = ctx_map(r->ctx);
    MYSQL_RES *res = NULL;
    char lock[80];
    int rc = 0;

    if (!o->mapping || !(md = shard__map_find_mapping(map, o->mapping))) {
        rc = shard__fail(SHARD_EINVAL, "no mapping named \"%.64s\" in the map (a reverse "
                        "mapping is written through its forward one)",
                        o->mapping ? o->mapping : "(null)");
        goto out;
    }
    snprintf(r->name, sizeof r->name, "%s", md->name);
    if (!(def = map_legacy_of(map, md->name))) {
        rc = shard__fail(SHARD_EINVAL, "the map has no legacy record for mapping %s: add "
                        "\"legacy\": {\"%s\": {}} and \"legacy_%s\" to mod_shards.tables, "
                        "publish the map, run shardctl schema apply", md->name, md->name,
                        md->name);
        goto out;
    }
    snprintf(r->lookup, sizeof r->lookup, "%s", def->table);
    if (!map_legacy_of_type(map, o->from_type) || !map_legacy_of_type(map, o->to_type)) {
        rc = shard__fail(SHARD_EINVAL, "both ends need a legacy lookup: type %u has none",
                        map_legacy_of_type(map, o->from_type) ? o->to_type : o->from_type);
        goto out;
    }
    snprintf(r->id_col, sizeof r->id_col, "%s", o->from_column ? o->from_column : "");
    if ((rc = import_check_name("from column", o->from_column)) ||
        (rc = import_check_name("to column", o->to_column)) ||
        (o->seq_column && (rc = import_check_name("sequence column", o->seq_column))))
        goto out;
    import_lock_name(r->name, lock);
    if ((rc = import_source_open(r->ctx, o, r->dry ? NULL : lock, &r->src)) || (rc = import_probe(r, &res)))
        goto out;
    const char *bad = NULL;
    if (!(f = import_field_named(res, o->from_column)) || !import_kind_integer(import_kind_of(f)))
        bad = o->from_column;
    else if (!(f = import_field_named(res, o->to_column)) || !import_kind_integer(import_kind_of(f)))
        bad = o->to_column;
    if (bad) {
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is not an integer column", r->src.label,
                        r->table, bad);
        goto out;
    }
    if (!o->seq_column) {
        snprintf(r->seq_expr, sizeof r->seq_expr, "NULL");
    } else if (!(f = import_field_named(res, o->seq_column))) {
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is not a column", r->src.label, r->table,
                        o->seq_column);
    } else if (import_kind_integer(import_kind_of(f))) {
        snprintf(r->seq_expr, sizeof r->seq_expr, "`%s`", o->seq_column);
    } else if (import_kind_of(f) == COL_TEMPORAL) {
        /* Microseconds since the epoch, like SHARD_SEQ_NOW (the session is UTC). */
        snprintf(r->seq_expr, sizeof r->seq_expr,
                 "CAST(ROUND(UNIX_TIMESTAMP(`%s`) * 1000000) AS SIGNED)", o->seq_column);
    } else {
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is neither an integer nor a date and time",
                        r->src.label, r->table, o->seq_column);
    }
    if (rc == 0)
        estimate(r);
out:
    mysql_free_result(res);
    shard_map_free(map);
    return rc;
}
