/*
 * tests/server_stats.c: shard_ctx_stats(3) against real MariaDB pairs.
 *
 * Starts two pairs (8 ID shards, 4 mod shards) once. Every test reads the
 * metrics text back through a parser that checks the exposition format
 * (HELP and TYPE once per metric, before its samples, one group per metric,
 * `name{labels} value` lines, escaped label values) and then checks the
 * numbers against what the test did: every public call counted once, exact
 * totals under 8 threads, errors by code, histograms whose buckets are
 * cumulative and whose _count is the call count, a caller waiting for a
 * busy pool, and a call waiting on a fenced shard until a new map routes it
 * elsewhere (fence waits and map reads).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <check.h>
#include <jansson.h>
#include <libshard.h>

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"
#include "harness.h"

#define NPAIRS 2
#define NSHARDS 8 /* 0-3 on MySQL001 (s1, s2), 4-7 on MySQL002 (s3, s4) */
#define NMOD 4
#define PINS 1
#define BOARDS 2
#define THREADS 8
#define WAIT_SECS 60.0

static harness *H;

static shard_ctx *open_ctx_with(const char *location, unsigned pool, unsigned budget_ms)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    o.pool_size = pool;
    o.retry_budget_ms = budget_ms;
    o.retry_max = 1000;
    o.refresh_interval_ms = 0; /* map reads only when the library needs one */
    OK(shard_ctx_open(&ctx, location, &o));
    return ctx;
}

static shard_ctx *open_ctx(void)
{
    return open_ctx_with(harness_map_path(H), 16, 5000);
}

/* ------------------------------------------------ the exposition format */

typedef struct sample {
    char name[128];
    char labels[512]; /* between the braces, as written */
    double value;
} sample;

typedef struct family {
    char name[128];
    char type[16];
    int helps, types;
    bool grouped; /* its samples came, and another metric's followed */
} family;

typedef struct metrics {
    sample *s;
    size_t n, cap;
    family f[64];
    size_t nf;
} metrics;

static family *family_of(metrics *m, const char *name, bool add)
{
    for (size_t i = 0; i < m->nf; i++)
        if (strcmp(m->f[i].name, name) == 0)
            return &m->f[i];
    if (!add)
        return NULL;
    ck_assert_uint_lt(m->nf, 64);
    family *f = &m->f[m->nf++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    return f;
}

static bool name_char(char c, bool first)
{
    return isalpha((unsigned char)c) || c == '_' || c == ':' ||
           (!first && isdigit((unsigned char)c));
}

/* A metric or label name at *p; returns its length (0: none). */
static size_t name_len(const char *p, bool colons)
{
    size_t n = 0;
    while (name_char(p[n], n == 0) && (colons || p[n] != ':'))
        n++;
    return n;
}

/* The family a sample belongs to: its own name, or a histogram's base. */
static family *sample_family(metrics *m, const char *name)
{
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    family *f = family_of(m, name, false);
    if (f)
        return f;
    for (size_t k = 0; k < 3; k++) {
        size_t n = strlen(name), sl = strlen(suffixes[k]);
        if (n > sl && strcmp(name + n - sl, suffixes[k]) == 0) {
            char base[128];
            snprintf(base, sizeof base, "%.*s", (int)(n - sl), name);
            if ((f = family_of(m, base, false)) && strcmp(f->type, "histogram") == 0)
                return f;
        }
    }
    return NULL;
}

/* `{a="x",b="y\"z"}`: label names, quoted values with only \\, \" and \n
 * escaped. Returns the length of the braces and what they hold. */
static size_t parse_labels(const char *p, const char *line)
{
    size_t i = 1;
    ck_assert_msg(p[0] == '{', "line %s", line);
    while (p[i] != '}') {
        size_t n = name_len(p + i, false);
        ck_assert_msg(n > 0, "no label name at \"%s\" in %s", p + i, line);
        i += n;
        ck_assert_msg(p[i] == '=' && p[i + 1] == '"', "no =\" after a label name in %s", line);
        i += 2;
        while (p[i] != '"') {
            ck_assert_msg(p[i] && p[i] != '\n', "unterminated label value in %s", line);
            if (p[i] == '\\') {
                ck_assert_msg(p[i + 1] == '\\' || p[i + 1] == '"' || p[i + 1] == 'n',
                              "bad escape in %s", line);
                i++;
            }
            i++;
        }
        i++;
        if (p[i] == ',')
            i++;
        else
            ck_assert_msg(p[i] == '}', "expected , or } in %s", line);
    }
    return i + 1;
}

static void parse_sample(metrics *m, const char *line, family **last)
{
    size_t n = name_len(line, true), l = 0;
    sample s;
    char *end;

    ck_assert_msg(n > 0 && n < sizeof s.name, "not a sample line: %s", line);
    memset(&s, 0, sizeof s);
    memcpy(s.name, line, n);
    if (line[n] == '{') {
        l = parse_labels(line + n, line);
        ck_assert_uint_lt(l - 2, sizeof s.labels);
        memcpy(s.labels, line + n + 1, l - 2);
    }
    ck_assert_msg(line[n + l] == ' ', "no space before the value: %s", line);
    s.value = strtod(line + n + l + 1, &end);
    ck_assert_msg(end != line + n + l + 1 && *end == '\0', "bad value in %s", line);
    family *f = sample_family(m, s.name);
    ck_assert_msg(f && f->types == 1, "sample before its # TYPE: %s", line);
    ck_assert_msg(!f->grouped || *last == f, "%s: its metric's lines are not one group", line);
    if (*last && *last != f)
        (*last)->grouped = true;
    *last = f;
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 256;
        m->s = realloc(m->s, m->cap * sizeof *m->s);
        ck_assert_ptr_nonnull(m->s);
    }
    m->s[m->n++] = s;
}

static void parse_comment(metrics *m, const char *line, family **last)
{
    bool help = strncmp(line, "# HELP ", 7) == 0;
    size_t n;
    family *f;

    ck_assert_msg(help || strncmp(line, "# TYPE ", 7) == 0, "unexpected comment: %s", line);
    n = name_len(line + 7, true);
    ck_assert_msg(n > 0 && line[7 + n] == ' ' && line[8 + n], "bad %s", line);
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)n, line + 7);
    f = family_of(m, name, true);
    if (help) {
        ck_assert_msg(++f->helps == 1, "a second # HELP for %s", name);
        return;
    }
    ck_assert_msg(++f->types == 1, "a second # TYPE for %s", name);
    ck_assert_msg(*last != f, "# TYPE %s after its samples", name);
    snprintf(f->type, sizeof f->type, "%s", line + 8 + n);
    ck_assert_msg(strcmp(f->type, "counter") == 0 || strcmp(f->type, "gauge") == 0 ||
                  strcmp(f->type, "histogram") == 0, "type %s", f->type);
}

/* The context's metrics, parsed and checked for form. */
static metrics read_metrics(shard_ctx *ctx)
{
    metrics m;
    family *last = NULL;
    char *text = NULL, *line, *save = NULL;

    memset(&m, 0, sizeof m);
    OK(shard_ctx_stats(ctx, &text));
    ck_assert_ptr_nonnull(text);
    size_t len = strlen(text);
    ck_assert_msg(len > 0 && text[len - 1] == '\n', "the text does not end in a newline");
    ck_assert_msg(strstr(text, "\n\n") == NULL, "an empty line in the text");
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#')
            parse_comment(&m, line, &last);
        else
            parse_sample(&m, line, &last);
    }
    for (size_t i = 0; i < m.nf; i++)
        ck_assert_msg(m.f[i].helps == 1 && m.f[i].types == 1, "%s: # HELP %d, # TYPE %d",
                      m.f[i].name, m.f[i].helps, m.f[i].types);
    shard_free(text);
    return m;
}

static void metrics_free(metrics *m)
{
    free(m->s);
    m->s = NULL;
}

/* A sample's value; -1 when there is none. labels "" for none. */
static double value(const metrics *m, const char *name, const char *labels)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->s[i].name, name) == 0 && strcmp(m->s[i].labels, labels) == 0)
            return m->s[i].value;
    return -1;
}

static double must(const metrics *m, const char *name, const char *labels)
{
    double v = value(m, name, labels);
    ck_assert_msg(v >= 0, "no sample %s{%s}", name, labels);
    return v;
}

static double calls(const metrics *m, const char *op)
{
    char *l = fmt("op=\"%s\"", op);
    double v = must(m, "libshard_calls_total", l);
    free(l);
    return v;
}

static double errors(const metrics *m, const char *op, const char *code)
{
    char *l = fmt("op=\"%s\",code=\"%s\"", op, code);
    double v = value(m, "libshard_errors_total", l);
    free(l);
    return v < 0 ? 0 : v;
}

static size_t count_of(const metrics *m, const char *name)
{
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++)
        k += strcmp(m->s[i].name, name) == 0;
    return k;
}

/* Every op's histogram: buckets cumulative with the fixed bounds, +Inf and
 * _count equal to calls_total, and no histogram for an op never called. */
static void check_histograms(const metrics *m)
{
    static const char *const le[] = {"0.0005", "0.001", "0.0025", "0.005", "0.01",
                                     "0.025",  "0.05",  "0.1",    "0.25",  "0.5",
                                     "1",      "2.5",   "5",      "10",    "+Inf"};
    size_t ops = 0;

    for (size_t i = 0; i < m->n; i++) {
        const sample *s = &m->s[i];
        char op[64];
        if (strcmp(s->name, "libshard_calls_total") != 0)
            continue;
        ck_assert_int_eq(sscanf(s->labels, "op=\"%63[a-z_]\"", op), 1);
        char *l = fmt("op=\"%s\"", op);
        double count = value(m, "libshard_call_duration_seconds_count", l);
        if (s->value == 0) {
            ck_assert_msg(count < 0, "a histogram for %s, never called", op);
            free(l);
            continue;
        }
        ops++;
        ck_assert_msg(count == s->value, "%s: _count %.0f, calls_total %.0f", op, count,
                      s->value);
        ck_assert(must(m, "libshard_call_duration_seconds_sum", l) > 0);
        double prev = 0;
        for (size_t k = 0; k < sizeof le / sizeof le[0]; k++) {
            char *bl = fmt("op=\"%s\",le=\"%s\"", op, le[k]);
            double b = must(m, "libshard_call_duration_seconds_bucket", bl);
            ck_assert_msg(b >= prev, "%s: bucket le=%s (%.0f) below the one before (%.0f)",
                          op, le[k], b, prev);
            prev = b;
            free(bl);
        }
        ck_assert_msg(prev == count, "%s: +Inf bucket %.0f, _count %.0f", op, prev, count);
        free(l);
    }
    ck_assert_uint_eq(count_of(m, "libshard_call_duration_seconds_count"), ops);
    ck_assert_uint_eq(count_of(m, "libshard_call_duration_seconds_bucket"), ops * 15);
}

static char *server_label(const char *server, const char *state)
{
    return state ? fmt("server=\"127.0.0.1:%d\",state=\"%s\"", harness_port(H, server), state)
                 : fmt("server=\"127.0.0.1:%d\"", harness_port(H, server));
}

static double pool(const metrics *m, const char *server, const char *state)
{
    char *l = server_label(server, state);
    double v = state ? must(m, "libshard_pool_connections", l)
                     : must(m, "libshard_pool_waits_total", l);
    free(l);
    return v;
}

static uint64_t create(shard_ctx *ctx, unsigned type, unsigned shard, const char *json)
{
    uint64_t id = 0;
    OK(shard_object_create(ctx, type, shard, json, strlen(json), &id));
    return id;
}

/* ------------------------------------------------------------ tests */

static int touch(json_t *obj, void *payload)
{
    (void)payload;
    return json_object_set_new(obj, "touched", json_true());
}

static int scanned(uint64_t id, const char *json, size_t len, void *payload)
{
    (void)id, (void)json, (void)len;
    ++*(size_t *)payload;
    return 0;
}

/* Each public call routed through the library counts once under its name,
 * however many statements (a mapping and its reverse row) or shards
 * (scatter) it takes. */
START_TEST(test_every_call_once)
{
    static const char *const ops[] = {
        "object_create", "object_get",      "object_update",     "object_patch",
        "object_delete", "object_mget",     "mapping_add",       "mapping_remove",
        "mapping_list",  "mapping_count",   "kv_put",            "kv_put_new",
        "kv_get",        "kv_delete",       "txn_begin",         "txn_object_create",
        "txn_object_get", "txn_object_put", "txn_mapping_add",   "txn_commit",
        "scatter_scan",  "scatter_count"};
    shard_ctx *ctx = open_ctx();
    metrics m = read_metrics(ctx);
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        ck_assert_msg(calls(&m, ops[i]) == 0, "%s counted before any call", ops[i]);
    ck_assert_uint_eq(count_of(&m, "libshard_errors_total"), 0);
    ck_assert_uint_eq(count_of(&m, "libshard_call_duration_seconds_count"), 0);
    metrics_free(&m);

    uint64_t pin = create(ctx, PINS, 2, "{\"a\":1}");
    uint64_t board = create(ctx, BOARDS, 5, "{\"b\":1}");
    char *json = NULL;
    OK(shard_object_get(ctx, pin, &json, NULL));
    shard_free(json);
    OK(shard_object_update(ctx, pin, touch, NULL));
    OK(shard_object_patch(ctx, pin, LIT("{\"p\":2}"), NULL, NULL));
    uint64_t ids[2] = {pin, board};
    shard_item *items = NULL;
    OK(shard_object_mget(ctx, ids, 2, &items));
    shard_items_free(items, 2);
    OK(shard_mapping_add(ctx, "board_has_pins", board, pin, 1)); /* and its reverse row */
    shard_edge *edges = NULL;
    size_t n = 0;
    uint64_t count = 0;
    OK(shard_mapping_list(ctx, "board_has_pins", board, SHARD_SEQ_NONE, 10, &edges, &n));
    ck_assert_uint_eq(n, 1);
    shard_free(edges);
    OK(shard_mapping_count(ctx, "board_has_pins", board, &count));
    OK(shard_mapping_remove(ctx, "board_has_pins", board, pin));
    OK(shard_kv_put(ctx, "users_by_email", LIT("once@example.com"), LIT("1")));
    OK(shard_kv_put_new(ctx, "users_by_email", LIT("new@example.com"), LIT("2")));
    char *v = NULL;
    OK(shard_kv_get(ctx, "users_by_email", LIT("once@example.com"), &v, NULL));
    shard_free(v);
    OK(shard_kv_delete(ctx, "users_by_email", LIT("once@example.com")));
    OK(shard_kv_delete(ctx, "users_by_email", LIT("new@example.com")));
    shard_txn *t = NULL;
    uint64_t tid = 0;
    OK(shard_txn_begin(ctx, 2, &t));
    OK(shard_txn_object_create(t, PINS, LIT("{\"t\":1}"), &tid));
    OK(shard_txn_object_get(t, tid, &json, NULL));
    shard_free(json);
    OK(shard_txn_object_put(t, tid, LIT("{\"t\":2}")));
    OK(shard_txn_mapping_add(t, "user_likes_pins", tid, pin, 1));
    OK(shard_txn_commit(t));
    size_t seen = 0;
    OK(shard_scatter_scan(ctx, PINS, scanned, &seen));
    ck_assert_uint_ge(seen, 2);
    OK(shard_scatter_count(ctx, PINS, &count));
    OK(shard_object_delete(ctx, pin, 0));
    OK(shard_object_delete(ctx, tid, SHARD_DELETE_HARD));

    m = read_metrics(ctx);
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        double want = strcmp(ops[i], "object_create") == 0   ? 2
                      : strcmp(ops[i], "object_delete") == 0 ? 2
                      : strcmp(ops[i], "kv_delete") == 0     ? 2
                                                             : 1;
        ck_assert_msg(calls(&m, ops[i]) == want, "%s: %.0f calls, want %.0f", ops[i],
                      calls(&m, ops[i]), want);
    }
    ck_assert_uint_eq(count_of(&m, "libshard_errors_total"), 0);
    check_histograms(&m);
    /* The context read the store once, at open; nothing failed. */
    ck_assert(must(&m, "libshard_map_reloads_total", "") == 1);
    ck_assert(must(&m, "libshard_retries_total", "") == 0);
    ck_assert(must(&m, "libshard_fence_waits_total", "") == 0);
    ck_assert(must(&m, "libshard_map_version", "") >= 1);
    metrics_free(&m);
    shard_ctx_free(ctx);
}
END_TEST

#define CREATES 25
#define GETS 40
#define ADDS 15

typedef struct worker {
    shard_ctx *ctx;
    unsigned k;
    int rc;
    char err[256];
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    uint64_t ids[CREATES];
    int rc = 0;

    for (unsigned i = 0; rc == 0 && i < CREATES; i++)
        rc = shard_object_create(w->ctx, PINS, SHARD_ANY, LIT("{\"w\":1}"), &ids[i]);
    for (unsigned i = 0; rc == 0 && i < GETS; i++) {
        char *json = NULL;
        rc = shard_object_get(w->ctx, ids[(i * 7 + w->k) % CREATES], &json, NULL);
        shard_free(json);
    }
    /* With a reverse mapping: two rows, often on two pairs, one call. */
    for (unsigned i = 0; rc == 0 && i < ADDS; i++)
        rc = shard_mapping_add(w->ctx, "board_has_pins", ids[i], ids[CREATES - 1 - i],
                               (int64_t)i + 1);
    w->rc = rc;
    if (rc)
        snprintf(w->err, sizeof w->err, "%s", shard_errmsg());
    return NULL;
}

/* One context, 8 threads: the totals are the sums of what each did. */
START_TEST(test_threads_exact)
{
    shard_ctx *ctx = open_ctx();
    worker w[THREADS];
    pthread_t th[THREADS];

    for (unsigned k = 0; k < THREADS; k++) {
        w[k] = (worker){.ctx = ctx, .k = k};
        ck_assert_int_eq(pthread_create(&th[k], NULL, work, &w[k]), 0);
    }
    for (unsigned k = 0; k < THREADS; k++) {
        pthread_join(th[k], NULL);
        ck_assert_msg(w[k].rc == 0, "thread %u: %s: %s", k, shard_strerror(w[k].rc),
                      w[k].err);
    }
    metrics m = read_metrics(ctx);
    ck_assert_msg(calls(&m, "object_create") == THREADS * CREATES, "creates %.0f",
                  calls(&m, "object_create"));
    ck_assert_msg(calls(&m, "object_get") == THREADS * GETS, "gets %.0f",
                  calls(&m, "object_get"));
    ck_assert_msg(calls(&m, "mapping_add") == THREADS * ADDS, "mapping adds %.0f",
                  calls(&m, "mapping_add"));
    ck_assert(calls(&m, "object_update") == 0);
    ck_assert_uint_eq(count_of(&m, "libshard_errors_total"), 0);
    check_histograms(&m);
    /* Both masters served (SHARD_ANY), and every connection is back. */
    const char *masters[] = {"s1", "s3"};
    for (size_t i = 0; i < 2; i++) {
        ck_assert(pool(&m, masters[i], "idle") >= 1);
        ck_assert(pool(&m, masters[i], "busy") == 0);
        ck_assert(pool(&m, masters[i], NULL) == 0); /* 8 threads, pools of 16 */
    }
    ck_assert_uint_eq(count_of(&m, "libshard_pool_connections"), 4);
    metrics_free(&m);
    shard_ctx_free(ctx);
}
END_TEST

/* Failed calls count under their op and code, only codes that occurred. */
START_TEST(test_errors_by_code)
{
    shard_ctx *ctx = open_ctx();
    uint64_t id = create(ctx, PINS, 1, "{\"e\":1}"), missing = 0;
    char *json = NULL;

    OK(shard_id_make(1, PINS, shard_id_local(id) + 1000000, &missing));
    FAILS(SHARD_ENOTFOUND, shard_object_get(ctx, missing, &json, NULL));
    FAILS(SHARD_ENOTFOUND, shard_object_get(ctx, missing, &json, NULL));
    OK(shard_object_get(ctx, id, &json, NULL));
    shard_free(json);
    OK(shard_kv_put_new(ctx, "users_by_name", LIT("err-test"), LIT("1")));
    FAILS(SHARD_EEXISTS, shard_kv_put_new(ctx, "users_by_name", LIT("err-test"), LIT("2")));
    OK(shard_kv_delete(ctx, "users_by_name", LIT("err-test")));
    FAILS(SHARD_ENOTFOUND, shard_kv_delete(ctx, "users_by_name", LIT("err-test")));
    FAILS(SHARD_ENOTFOUND, shard_object_delete(ctx, missing, SHARD_DELETE_HARD));

    metrics m = read_metrics(ctx);
    ck_assert(errors(&m, "object_get", "SHARD_ENOTFOUND") == 2);
    ck_assert(calls(&m, "object_get") == 3);
    ck_assert(errors(&m, "kv_put_new", "SHARD_EEXISTS") == 1);
    ck_assert(errors(&m, "kv_delete", "SHARD_ENOTFOUND") == 1);
    ck_assert(errors(&m, "object_delete", "SHARD_ENOTFOUND") == 1);
    ck_assert_uint_eq(count_of(&m, "libshard_errors_total"), 4);
    check_histograms(&m);
    metrics_free(&m);
    shard_ctx_free(ctx);
}
END_TEST

static void *get_waiting(void *arg)
{
    waiter *w = arg;
    char *json = NULL;
    w->rc = shard_object_get(w->ctx, w->id, &json, NULL);
    shard_free(json);
    return NULL;
}

/* Poll the metrics until name{labels} reaches at least `want`. */
static metrics wait_for(shard_ctx *ctx, const char *name, const char *labels, double want)
{
    double until = now_s() + WAIT_SECS;
    for (;;) {
        metrics m = read_metrics(ctx);
        if (value(&m, name, labels) >= want)
            return m;
        metrics_free(&m);
        ck_assert_msg(now_s() < until, "%s{%s} never reached %.0f", name, labels, want);
        nap_ms(2);
    }
}

/* A pool of one connection, held by a transaction: a get on the same server
 * waits for it, and the gauges show the pool busy, then idle. */
START_TEST(test_pool_wait)
{
    shard_ctx *ctx = open_ctx_with(harness_map_path(H), 1, 5000);
    uint64_t id = create(ctx, PINS, 1, "{\"pool\":1}");
    shard_txn *t = NULL;
    metrics m = read_metrics(ctx);

    ck_assert(pool(&m, "s1", "idle") == 1 && pool(&m, "s1", "busy") == 0);
    ck_assert(pool(&m, "s1", NULL) == 0);
    metrics_free(&m);
    OK(shard_txn_begin(ctx, 0, &t)); /* the pool's one connection to s1 */
    waiter w = {.ctx = ctx, .id = id};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, get_waiting, &w), 0);
    char *l = server_label("s1", NULL);
    m = wait_for(ctx, "libshard_pool_waits_total", l, 1);
    free(l);
    ck_assert(pool(&m, "s1", "idle") == 0 && pool(&m, "s1", "busy") == 1);
    metrics_free(&m);
    OK(shard_txn_commit(t));
    pthread_join(th, NULL);
    ck_assert_msg(w.rc == 0, "the waiting get: %s", shard_strerror(w.rc));
    m = read_metrics(ctx);
    ck_assert(pool(&m, "s1", NULL) == 1);
    ck_assert(pool(&m, "s1", "idle") == 1 && pool(&m, "s1", "busy") == 0);
    ck_assert(calls(&m, "object_get") == 1 && calls(&m, "txn_commit") == 1);
    metrics_free(&m);
    shard_ctx_free(ctx);
}
END_TEST

/* A create on a fenced shard waits for the map that routes the shard
 * elsewhere (as after a move's cut-over), reading the store until it comes. */
START_TEST(test_fence_wait)
{
    const unsigned F = 3; /* the last shard of MySQL001 */
    shard_ctx *ctx = open_ctx_with(harness_map_path(H), 16, 60000);
    shard_map *map = NULL;
    char db[64];

    OK(shard_ctx_map(ctx, &map));
    OK(shard_map_database(map, F, db, sizeof db));
    create(ctx, PINS, F, "{\"before\":1}");
    uint64_t v = shard_map_version(map);
    /* The shard's copy on MySQL002, as a move leaves it before cut-over. */
    char *moved = map_routing(map, NSHARDS, F, "MySQL002", v + 1);
    char *path = map_schema_apply(H, moved);

    metrics m = read_metrics(ctx);
    double reloads0 = must(&m, "libshard_map_reloads_total", "");
    ck_assert(must(&m, "libshard_fence_waits_total", "") == 0);
    metrics_free(&m);

    fence_set(H, map, "s1", F, 1);
    waiter w = {.ctx = ctx, .shard = F};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, create_waiting, &w), 0);
    m = wait_for(ctx, "libshard_fence_waits_total", "", 1);
    double reloads1 = must(&m, "libshard_map_reloads_total", "");
    metrics_free(&m);
    map_publish(H, moved);
    pthread_join(th, NULL);
    ck_assert_msg(w.rc == 0, "the waiting create: %s", shard_strerror(w.rc));
    char *n = sql_okf(H, "s3", "SELECT COUNT(*) FROM `%s`.pins WHERE local_id = %llu", db,
                     (unsigned long long)shard_id_local(w.id));
    ck_assert_str_eq(n, "1\n"); /* it ran on MySQL002 */
    free(n);

    m = read_metrics(ctx);
    ck_assert(must(&m, "libshard_fence_waits_total", "") == 1);
    /* It read the store while it waited, and again after the new map came. */
    double reloads2 = must(&m, "libshard_map_reloads_total", "");
    ck_assert_msg(reloads1 >= reloads0 && reloads2 > reloads1, "map reads %.0f, %.0f, %.0f",
                  reloads0, reloads1, reloads2);
    ck_assert(must(&m, "libshard_map_version", "") == (double)(v + 1));
    ck_assert(must(&m, "libshard_retries_total", "") >= 1);
    ck_assert(calls(&m, "object_create") == 2);
    ck_assert_uint_eq(count_of(&m, "libshard_errors_total"), 0);
    check_histograms(&m);
    /* The pools of both masters it used. */
    ck_assert(pool(&m, "s1", "idle") >= 1 && pool(&m, "s3", "idle") >= 1);
    metrics_free(&m);
    fprintf(stderr, "  (fence waits 1, map reads %.0f -> %.0f -> %.0f)\n", reloads0,
            reloads1, reloads2);

    /* Back: the shard on MySQL001, unfenced, no copy on MySQL002. */
    route_back(H, map, NSHARDS, F, v + 2, db);
    free(moved);
    unlink(path);
    free(path);
    shard_map_free(map);
    shard_ctx_free(ctx);
}
END_TEST

/* A call that waits on a fence polls the fence row, not the store: a
 * fence held 1 s costs its context a store read every 250 ms at most, and
 * the row's "flipped" mark (fenced = 2, as a mover writes it once its
 * publish landed) sends it to the store once. Polling the store instead
 * (every 3-25 ms) makes dozens of reads in that second. */
static void *mget_waiting(void *arg)
{
    waiter *w = arg;
    shard_item *items = NULL;

    w->rc = shard_object_mget(w->ctx, &w->id, 1, &items);
    shard_items_free(items, 1);
    return NULL;
}

START_TEST(test_fence_wait_polls_row)
{
    const unsigned F = 3; /* the last shard of MySQL001 */
    shard_ctx *ctx = open_ctx_with(harness_map_path(H), 16, 60000);
    shard_ctx *mctx = open_ctx_with(harness_map_path(H), 16, 60000); /* the multi-get's */
    shard_map *map = NULL;
    char db[64];

    OK(shard_ctx_map(ctx, &map));
    OK(shard_map_database(map, F, db, sizeof db));
    uint64_t before = create(ctx, PINS, F, "{\"before\":1}");
    uint64_t v = shard_map_version(map);
    char *moved = map_routing(map, NSHARDS, F, "MySQL002", v + 1);
    char *path = map_schema_apply(H, moved);

    metrics m = read_metrics(ctx);
    double asked0 = must(&m, "libshard_map_reloads_asked_total", "");
    metrics_free(&m);
    m = read_metrics(mctx);
    double masked0 = must(&m, "libshard_map_reloads_asked_total", "");
    metrics_free(&m);
    fence_set(H, map, "s1", F, 1);
    waiter w = {.ctx = ctx, .shard = F}, mw = {.ctx = mctx, .id = before};
    pthread_t th, mth;
    ck_assert_int_eq(pthread_create(&th, NULL, create_waiting, &w), 0);
    ck_assert_int_eq(pthread_create(&mth, NULL, mget_waiting, &mw), 0);
    m = wait_for(ctx, "libshard_fence_waits_total", "", 1);
    metrics_free(&m);
    m = wait_for(mctx, "libshard_fence_waits_total", "", 1);
    metrics_free(&m);
    nap_ms(1000); /* the fence holds */
    m = read_metrics(ctx);
    double asked1 = must(&m, "libshard_map_reloads_asked_total", "");
    metrics_free(&m);
    m = read_metrics(mctx);
    double masked1 = must(&m, "libshard_map_reloads_asked_total", "");
    metrics_free(&m);
    map_publish(H, moved);
    fence_set(H, map, "s1", F, 2); /* the mover's mark: the new map is out */
    pthread_join(th, NULL);
    pthread_join(mth, NULL);
    ck_assert_msg(w.rc == 0, "the waiting create: %s", shard_strerror(w.rc));
    /* The hand-made move copied nothing: on MySQL002 the object is not
     * there, and the multi-get says so once the map routes it there. */
    ck_assert_msg(mw.rc == 0, "the waiting multi-get: %s", shard_strerror(mw.rc));
    char *n = sql_okf(H, "s3", "SELECT COUNT(*) FROM `%s`.pins WHERE local_id = %llu", db,
                     (unsigned long long)shard_id_local(w.id));
    ck_assert_str_eq(n, "1\n"); /* it ran on MySQL002 */
    free(n);
    m = read_metrics(ctx);
    double asked2 = must(&m, "libshard_map_reloads_asked_total", "");
    ck_assert(must(&m, "libshard_map_version", "") == (double)(v + 1));
    metrics_free(&m);
    m = read_metrics(mctx);
    double masked2 = must(&m, "libshard_map_reloads_asked_total", "");
    ck_assert(must(&m, "libshard_map_version", "") == (double)(v + 1));
    metrics_free(&m);
    fprintf(stderr, "  (store reads asked: create %.0f while fenced 1 s, %.0f in all; "
            "multi-get %.0f, %.0f)\n", asked1 - asked0, asked2 - asked0, masked1 - masked0,
            masked2 - masked0);
    ck_assert_msg(masked1 - masked0 <= 6, "multi-get: %.0f store reads while the fence "
                  "held 1 s", masked1 - masked0);
    ck_assert_msg(masked2 - masked1 <= 3, "multi-get: %.0f store reads after the flip's "
                  "mark", masked2 - masked1);
    ck_assert_msg(asked1 - asked0 <= 6, "%.0f store reads while the fence held 1 s",
                  asked1 - asked0);
    ck_assert_msg(asked2 - asked1 <= 3, "%.0f store reads after the flip's mark",
                  asked2 - asked1);

    route_back(H, map, NSHARDS, F, v + 2, db);
    free(moved);
    unlink(path);
    free(path);
    shard_map_free(map);
    shard_ctx_free(mctx);
    shard_ctx_free(ctx);
}
END_TEST

START_TEST(test_arguments)
{
    char *text = (char *)"x";
    shard_ctx *ctx = open_ctx();
    FAILS(SHARD_EINVAL, shard_ctx_stats(NULL, &text));
    FAILS(SHARD_EINVAL, shard_ctx_stats(ctx, NULL));
    shard_ctx_free(ctx);
}
END_TEST

static Suite *stats_suite(void)
{
    Suite *s = suite_create("server_stats");
    TCase *tc = tcase_create("stats");
    tcase_set_timeout(tc, 120);
    tcase_add_tests(tc, TESTS(test_arguments, test_every_call_once, test_threads_exact,
                              test_errors_by_code, test_pool_wait, test_fence_wait,
                              test_fence_wait_polls_row));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return server_test_main("server_stats", &H, NPAIRS, NSHARDS, NMOD, 1, stats_suite);
}
