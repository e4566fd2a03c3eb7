/*
 * The context's counters (stats.c) as Prometheus text (exposition format
 * 0.0.4), see shard_ctx_stats(3); the pool gauges are read here, under
 * each pool's lock.
 */
#include "ctx.h"

#include <stdio.h>
#include <string.h>

static const char *const op_names[STATS_NOPS] = {
    [STATS_NONE] = NULL,
    [STATS_OBJECT_CREATE] = "object_create",
    [STATS_OBJECT_GET] = "object_get",
    [STATS_OBJECT_UPDATE] = "object_update",
    [STATS_OBJECT_PATCH] = "object_patch",
    [STATS_OBJECT_DELETE] = "object_delete",
    [STATS_OBJECT_MGET] = "object_mget",
    [STATS_MAPPING_ADD] = "mapping_add",
    [STATS_MAPPING_REMOVE] = "mapping_remove",
    [STATS_MAPPING_LIST] = "mapping_list",
    [STATS_MAPPING_COUNT] = "mapping_count",
    [STATS_KV_PUT] = "kv_put",
    [STATS_KV_PUT_NEW] = "kv_put_new",
    [STATS_KV_GET] = "kv_get",
    [STATS_KV_DELETE] = "kv_delete",
    [STATS_TXN_BEGIN] = "txn_begin",
    [STATS_TXN_OBJECT_CREATE] = "txn_object_create",
    [STATS_TXN_OBJECT_GET] = "txn_object_get",
    [STATS_TXN_OBJECT_PUT] = "txn_object_put",
    [STATS_TXN_MAPPING_ADD] = "txn_mapping_add",
    [STATS_TXN_COMMIT] = "txn_commit",
    [STATS_SCATTER_SCAN] = "scatter_scan",
    [STATS_SCATTER_COUNT] = "scatter_count",
};

/* By -code; the last slot holds codes this table does not know. */
static const char *const code_names[STATS_CODES] = {
    "0",               "SHARD_EINVAL",   "SHARD_ENOMEM",    "SHARD_EMAP",
    "SHARD_EIO",       "SHARD_ENOTFOUND", "SHARD_EEXISTS",  "SHARD_ECONNECT",
    "SHARD_ESERVER",   "SHARD_ETIMEOUT", "SHARD_EMOVED",    "SHARD_ECONFLICT",
    "SHARD_EBUSY",     "SHARD_ETOOBIG",  "SHARD_ENOSHARD",  "SHARD_EVERIFY",
    "SHARD_EPRIV",     "SHARD_ETLS",     "SHARD_EPARTIAL",  "SHARD_EINTERNAL",
    "other",
};

/* The duration buckets' upper bounds (stats.c) as printed. */
static const char *const bound_text[STATS_BUCKETS] = {
    "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
    "0.25",   "0.5",   "1",      "2.5",   "5",    "10",    "+Inf",
};

static uint64_t get(const stats_counter *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

static void head(sqlbuf *b, const char *name, const char *type, const char *help)
{
    sql_addf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value: backslash, double quote and newline escaped. */
static void label_value(sqlbuf *b, const char *v)
{
    char one[2] = {0, 0};

    for (; *v; v++) {
        if (*v == '\\')
            sql_add(b, "\\\\");
        else if (*v == '"')
            sql_add(b, "\\\"");
        else if (*v == '\n')
            sql_add(b, "\\n");
        else {
            one[0] = *v;
            sql_add(b, one);
        }
    }
}

static void calls(sqlbuf *b, const shard_stats *st, uint64_t counts[STATS_NOPS][STATS_BUCKETS])
{
    head(b, "libshard_calls_total", "counter",
         "Calls of libshard's data functions, by function (its name without shard_).");
    for (unsigned op = 1; op < STATS_NOPS; op++) {
        uint64_t n = 0;
        for (unsigned k = 0; k < STATS_BUCKETS; k++) {
            counts[op][k] = 0;
            for (unsigned s = 0; s < STATS_STRIPES; s++)
                counts[op][k] += get(&st->timing[s][op].buckets[k]);
            n += counts[op][k];
        }
        sql_addf(b, "libshard_calls_total{op=\"%s\"} %llu\n", op_names[op],
                 (unsigned long long)n);
    }
    head(b, "libshard_errors_total", "counter",
         "Calls that failed, by function and error code (codes that occurred).");
    for (unsigned op = 1; op < STATS_NOPS; op++)
        for (unsigned k = 1; k < STATS_CODES; k++) {
            uint64_t n = get(&st->errors[op][k]);
            if (n)
                sql_addf(b, "libshard_errors_total{op=\"%s\",code=\"%s\"} %llu\n",
                         op_names[op], code_names[k], (unsigned long long)n);
        }
}

static void counter(sqlbuf *b, const char *name, const char *help, uint64_t v)
{
    head(b, name, "counter", help);
    sql_addf(b, "%s %llu\n", name, (unsigned long long)v);
}

static void pools(sqlbuf *b, shard_ctx *ctx)
{
    shard_server *s;

    head(b, "libshard_pool_connections", "gauge",
         "Pooled connections to each server, idle or busy (in use or opening).");
    pthread_mutex_lock(&ctx->servers_lock);
    for (s = ctx->servers; s; s = s->next) {
        unsigned idle = 0, total;
        pthread_mutex_lock(&s->lock);
        for (const shard_conn *c = s->idle; c; c = c->next)
            idle++;
        total = s->total;
        pthread_mutex_unlock(&s->lock);
        sql_add(b, "libshard_pool_connections{server=\"");
        label_value(b, s->ep.text);
        sql_addf(b, "\",state=\"idle\"} %u\n", idle);
        sql_add(b, "libshard_pool_connections{server=\"");
        label_value(b, s->ep.text);
        sql_addf(b, "\",state=\"busy\"} %u\n", total > idle ? total - idle : 0);
    }
    head(b, "libshard_pool_waits_total", "counter",
         "Times a caller waited for a connection because the server's pool was all busy.");
    for (s = ctx->servers; s; s = s->next) {
        uint64_t waits;
        pthread_mutex_lock(&s->lock);
        waits = s->waits;
        pthread_mutex_unlock(&s->lock);
        sql_add(b, "libshard_pool_waits_total{server=\"");
        label_value(b, s->ep.text);
        sql_addf(b, "\"} %llu\n", (unsigned long long)waits);
    }
    pthread_mutex_unlock(&ctx->servers_lock);
}

static void durations(sqlbuf *b, const shard_stats *st,
                      uint64_t counts[STATS_NOPS][STATS_BUCKETS])
{
    static const char name[] = "libshard_call_duration_seconds";

    head(b, name, "histogram",
         "Time from a call's routing to its return, retries and waits included, by "
         "function (functions called at least once).");
    for (unsigned op = 1; op < STATS_NOPS; op++) {
        uint64_t cum = 0;
        for (unsigned k = 0; k < STATS_BUCKETS; k++)
            cum += counts[op][k];
        if (!cum)
            continue;
        cum = 0;
        for (unsigned k = 0; k < STATS_BUCKETS; k++) {
            cum += counts[op][k];
            sql_addf(b, "%s_bucket{op=\"%s\",le=\"%s\"} %llu\n", name, op_names[op],
                     bound_text[k], (unsigned long long)cum);
        }
        uint64_t ns = 0;
        for (unsigned s = 0; s < STATS_STRIPES; s++)
            ns += get(&st->timing[s][op].sum_ns);
        sql_addf(b, "%s_sum{op=\"%s\"} %.9f\n", name, op_names[op], (double)ns / 1e9);
        sql_addf(b, "%s_count{op=\"%s\"} %llu\n", name, op_names[op],
                 (unsigned long long)cum);
    }
}

int shard_ctx_stats(shard_ctx *ctx, char **text)
{
    /* One reading of the buckets serves calls_total and the histogram, so
     * the two agree even while other threads count. */
    uint64_t counts[STATS_NOPS][STATS_BUCKETS];
    shard_stats *st;
    sqlbuf b;
    int rc;

    if (!ctx || !text)
        return shard__fail(SHARD_EINVAL, "shard_ctx_stats: NULL argument");
    *text = NULL;
    st = &ctx->stats;
    sql_init(&b);
    calls(&b, st, counts);
    counter(&b, "libshard_retries_total",
            "Attempts run again after a transient failure (lost server, busy, moved shard).",
            get(&st->retries));
    counter(&b, "libshard_fence_waits_total",
            "Calls that found their shard fenced by a move (or moved) and waited for a "
            "new map.", get(&st->fence_waits));
    counter(&b, "libshard_map_reloads_total", "Reads of the shard map store.",
            get(&st->map_reloads));
    counter(&b, "libshard_map_reloads_asked_total",
            "Reads of the shard map store that calls asked for (a fenced or moved shard, a "
            "server that does not answer), not the periodic refresh.",
            get(&st->map_reloads_asked));
    head(&b, "libshard_map_version", "gauge", "Version of the shard map in use.");
    sql_addf(&b, "libshard_map_version %llu\n", (unsigned long long)ctx_map_version(ctx));
    pools(&b, ctx);
    durations(&b, st, counts);
    if ((rc = sql_check(&b))) {
        sql_free(&b);
        return rc;
    }
    *text = b.s;
    return 0;
}
