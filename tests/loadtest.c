/*
 * make loadtest: N threads of mixed operations on one context for a fixed
 * time against two local pairs, then every write verified. Prints
 * throughput, latency percentiles per operation and the error count
 * (expected: 0). Not part of make check.
 *
 *   loadtest [THREADS [SECONDS]]      (defaults: 8 threads, 20 seconds)
 */
#define BENCH_NAME "loadtest"
#include "bench_util.h" /* now() */
#include "harness.h"

#include <libshard.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OP_CREATE, OP_GET, OP_PATCH, OP_MGET, OP_MAP_ADD, OP_MAP_LIST, OP_KV_PUT, OP_KV_GET, NOPS };
static const char *const op_names[NOPS] = {"create", "get", "patch", "mget", "mapping add",
                                            "mapping list", "kv put", "kv get"};

#define MAX_SAMPLES 400000

typedef struct obj {
    uint64_t id;
    int version; /* the last acknowledged patch */
    int mapped;  /* a board_has_pins row points at it */
} obj;

typedef struct worker {
    int n;
    shard_ctx *ctx;
    double end;
    uint64_t seed;
    obj *objs;
    size_t nobjs, cap;
    uint64_t board;      /* mapping rows written from this board */
    int nmaps;
    int nkeys;
    long errors;
    char lasterr[300];
    float *lat[NOPS];    /* microseconds */
    size_t nlat[NOPS];
} worker;

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void record(worker *w, int op, double t0, int rc)
{
    if (w->nlat[op] < MAX_SAMPLES)
        w->lat[op][w->nlat[op]++] = (float)((now() - t0) * 1e6);
    if (rc && rc != SHARD_ENOTFOUND) {
        w->errors++;
        snprintf(w->lasterr, sizeof w->lasterr, "%s: %s", op_names[op], shard_errmsg());
    }
}

static void one_op(worker *w)
{
    int op = (int)(rnd(&w->seed) % 100);
    double t0 = now();
    char buf[128];
    int rc;

    if (w->nobjs == 0 || op < 15) {
        uint64_t id;
        snprintf(buf, sizeof buf, "{\"w\":%d,\"v\":0}", w->n);
        rc = shard_object_create(w->ctx, 1, SHARD_ANY, buf, strlen(buf), &id);
        record(w, OP_CREATE, t0, rc);
        if (rc == 0 && w->nobjs < w->cap)
            w->objs[w->nobjs++] = (obj){id, 0, 0};
    } else if (op < 50) {
        char *json = NULL;
        rc = shard_object_get(w->ctx, w->objs[rnd(&w->seed) % w->nobjs].id, &json, NULL);
        record(w, OP_GET, t0, rc);
        shard_free(json);
    } else if (op < 62) {
        obj *o = &w->objs[rnd(&w->seed) % w->nobjs];
        snprintf(buf, sizeof buf, "{\"v\":%d}", o->version + 1);
        rc = shard_object_patch(w->ctx, o->id, buf, strlen(buf), NULL, NULL);
        record(w, OP_PATCH, t0, rc);
        if (rc == 0)
            o->version++;
    } else if (op < 72) {
        uint64_t ids[50];
        shard_item *items = NULL;
        for (int i = 0; i < 50; i++)
            ids[i] = w->objs[rnd(&w->seed) % w->nobjs].id;
        rc = shard_object_mget(w->ctx, ids, 50, &items);
        record(w, OP_MGET, t0, rc);
        shard_items_free(items, 50);
    } else if (op < 82) {
        obj *o = &w->objs[(size_t)w->nmaps % w->nobjs];
        rc = shard_mapping_add(w->ctx, "board_has_pins", w->board, o->id, w->nmaps);
        record(w, OP_MAP_ADD, t0, rc);
        if (rc == 0) {
            w->nmaps++;
            o->mapped = 1;
        }
    } else if (op < 90) {
        shard_edge *e = NULL;
        size_t n = 0;
        rc = shard_mapping_list(w->ctx, "board_has_pins", w->board, SHARD_SEQ_NONE, 20, &e, &n);
        record(w, OP_MAP_LIST, t0, rc);
        shard_free(e);
    } else if (op < 95) {
        snprintf(buf, sizeof buf, "w%d-k%d", w->n, w->nkeys);
        rc = shard_kv_put(w->ctx, "users_by_name", buf, strlen(buf), buf, strlen(buf));
        record(w, OP_KV_PUT, t0, rc);
        if (rc == 0)
            w->nkeys++;
    } else {
        char *v = NULL;
        snprintf(buf, sizeof buf, "w%d-k%d", w->n, w->nkeys ? (int)(rnd(&w->seed) % (uint64_t)w->nkeys) : 0);
        rc = shard_kv_get(w->ctx, "users_by_name", buf, strlen(buf), &v, NULL);
        record(w, OP_KV_GET, t0, rc);
        shard_free(v);
    }
}

static void *run(void *arg)
{
    worker *w = arg;
    while (now() < w->end)
        one_op(w);
    return NULL;
}

/* Every acknowledged write is there with its last acknowledged content. */
static long verify(worker *w)
{
    long bad = 0;
    for (size_t i = 0; i < w->nobjs; i++) {
        char *json = NULL, want[64];
        snprintf(want, sizeof want, "\"v\":%d", w->objs[i].version);
        if (shard_object_get(w->ctx, w->objs[i].id, &json, NULL) || !strstr(json, want))
            bad++;
        shard_free(json);
    }
    {
        uint64_t count = 0, want = 0;
        for (size_t i = 0; i < w->nobjs; i++)
            want += (uint64_t)w->objs[i].mapped;
        if (shard_mapping_count(w->ctx, "board_has_pins", w->board, &count) || count != want)
            bad++;
    }
    for (int k = 0; k < w->nkeys; k++) {
        char key[64], *v = NULL;
        snprintf(key, sizeof key, "w%d-k%d", w->n, k);
        if (shard_kv_get(w->ctx, "users_by_name", key, strlen(key), &v, NULL) || strcmp(v, key))
            bad++;
        shard_free(v);
    }
    return bad;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int nthreads = argc > 1 ? atoi(argv[1]) : 8;
    double seconds = argc > 2 ? atof(argv[2]) : 20;
    shard_ctx *ctx = NULL;
    worker *w;
    pthread_t *t;
    harness *h;
    long errors = 0, bad = 0, total = 0;
    double t0;

    if (nthreads < 1 || nthreads > 256 || seconds <= 0) {
        fprintf(stderr, "usage: loadtest [THREADS [SECONDS]]\n");
        return 2;
    }
    h = harness_start_ex(2, 16, 8);
    if (!h)
        return 1;
    if (harness_schema_apply(h) || shard_ctx_open(&ctx, harness_map_path(h), NULL)) {
        fprintf(stderr, "loadtest: setup: %s\n", shard_errmsg());
        harness_stop(h);
        return 1;
    }
    w = calloc((size_t)nthreads, sizeof *w);
    t = calloc((size_t)nthreads, sizeof *t);
    t0 = now();
    for (int i = 0; i < nthreads; i++) {
        w[i].n = i;
        w[i].ctx = ctx;
        w[i].end = t0 + seconds;
        w[i].seed = (uint64_t)i * 7919 + 1;
        w[i].cap = 200000;
        w[i].objs = calloc(w[i].cap, sizeof *w[i].objs);
        for (int k = 0; k < NOPS; k++)
            w[i].lat[k] = calloc(MAX_SAMPLES, sizeof(float));
        if (shard_object_create(ctx, 2, SHARD_ANY, "{\"board\":1}", 11, &w[i].board)) {
            fprintf(stderr, "loadtest: %s\n", shard_errmsg());
            return 1;
        }
        pthread_create(&t[i], NULL, run, &w[i]);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    printf("loadtest: %d threads, %.0f s, two pairs\n", nthreads, seconds);
    for (int k = 0; k < NOPS; k++) {
        size_t n = 0, at = 0;
        float *all;
        for (int i = 0; i < nthreads; i++)
            n += w[i].nlat[k];
        if (!n)
            continue;
        all = malloc(n * sizeof *all);
        for (int i = 0; i < nthreads; i++) {
            memcpy(all + at, w[i].lat[k], w[i].nlat[k] * sizeof *all);
            at += w[i].nlat[k];
        }
        qsort(all, n, sizeof *all, cmp_float);
        printf("  %-13s %8zu ops %8.0f ops/s  p50 %7.0f us  p99 %7.0f us  p99.9 %7.0f us  "
               "max %7.0f us\n", op_names[k], n, (double)n / seconds, all[n / 2],
               all[(size_t)((double)n * 0.99)], all[(size_t)((double)n * 0.999)], all[n - 1]);
        total += (long)n;
        free(all);
    }
    for (int i = 0; i < nthreads; i++) {
        errors += w[i].errors;
        if (w[i].errors)
            fprintf(stderr, "  worker %d: %ld errors, last: %s\n", i, w[i].errors,
                    w[i].lasterr);
        bad += verify(&w[i]);
    }
    printf("loadtest: %ld operations, %.0f ops/s, %ld errors, %ld writes missing or wrong "
           "after verification\n", total, (double)total / seconds, errors, bad);
    for (int i = 0; i < nthreads; i++) {
        free(w[i].objs);
        for (int k = 0; k < NOPS; k++)
            free(w[i].lat[k]);
    }
    free(w);
    free(t);
    shard_ctx_free(ctx);
    harness_stop(h);
    return errors || bad ? 1 : 0;
}
