/*
 * tests/server_data_faults.c: the data layer under threads, faults and
 * fences, against real MariaDB pairs: one context shared by 8 threads of
 * mixed calls (every write read back, no lost update), a master killed
 * mid-operation and restarted (the other pair unaffected, clear errors, the
 * same context recovers), a fence row set by hand, the fence table missing,
 * and a server asking for a local file.
 *
 * The tests are independent: one test case each, over one fleet per program
 * (tests/data_util.h). Its last case, standbys_hold_every_write, runs after
 * the master's kill and restart and the 8 threads' writes, and checks that
 * both standbys hold them all.
 */
#include <check.h>
#include <jansson.h> /* before libshard.h: declares the jansson calls */
#include <libshard.h>
#include "ctx.h" /* private: a connection of the pool itself (tests link libshard_internal.a) */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_util.h"
#include "data_util.h"

#define DOWN(rc) ((rc) == SHARD_ECONNECT || (rc) == SHARD_ETIMEOUT)

/* ------------------------------------------------------------ concurrency */

#define NTHREADS 8
#define KV_KEYS 16
#define RUN_SECS 5.0

typedef struct owned {
    uint64_t id;
    json_t *want;
    int64_t seq; /* its board_has_pins row from the thread's board; 0: none */
} owned;

typedef struct worker {
    int t;
    unsigned seed;
    uint64_t board, counter, shared;
    owned *objs;
    size_t n, cap;
    unsigned char kv[KV_KEYS][40];
    size_t kvlen[KV_KEYS]; /* 0: never written */
    long incs;             /* successful increments of the shared counter */
    long last_shared;      /* the last value this thread wrote into "shared" */
    long ops[7];
    int errors;
    char err[600];
} worker;

static double g_deadline;

static void werr(worker *w, const char *what, int rc)
{
    if (!w->errors++)
        snprintf(w->err, sizeof w->err, "thread %d: %s: %d (%s): %s", w->t, what, rc,
                 shard_strerror(rc), shard_errmsg());
}

static int cb_counter(json_t *obj, void *payload)
{
    (void)payload;
    json_int_t n = json_integer_value(json_object_get(obj, "n"));
    return json_object_set_new(obj, "n", json_integer(n + 1));
}

static void w_create(worker *w, long k)
{
    char body[160];
    uint64_t id = 0;
    /* a hostile-ish payload: quotes, a NUL escape, a format directive */
    snprintf(body, sizeof body, "{\"t\":%d,\"k\":%ld,\"s\":\"'\\\"%%s\\u0000\\\\\"}", w->t, k);
    int rc = shard_object_create(C, PINS, SHARD_ANY, body, strlen(body), &id);
    if (rc) {
        werr(w, "create", rc);
        return;
    }
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 256;
        w->objs = realloc(w->objs, w->cap * sizeof *w->objs);
        if (!w->objs)
            abort();
    }
    json_error_t e;
    w->objs[w->n++] = (owned){id, json_loadb(body, strlen(body), JSON_ALLOW_NUL, &e), 0};
}

static void w_patch(worker *w, long k)
{
    owned *o = &w->objs[(size_t)rand_r(&w->seed) % w->n];
    char patch[128], *res = NULL;
    size_t rlen;
    snprintf(patch, sizeof patch, "{\"p\":%ld,\"k\":null,\"m\":{\"t%d\":%ld}}", k, w->t, k);
    int rc = shard_object_patch(C, o->id, patch, strlen(patch), &res, &rlen);
    if (rc) {
        werr(w, "patch", rc);
        return;
    }
    json_t *p = json_loads(patch, 0, NULL), *next = merge(o->want, p);
    json_t *got = json_loadb(res, rlen, JSON_ALLOW_NUL, NULL);
    if (!json_equal(next, got))
        werr(w, "patch result differs", 0);
    json_decref(got);
    json_decref(p);
    json_decref(o->want);
    o->want = next;
    shard_free(res);
}

static void w_map(worker *w, long k)
{
    owned *o = &w->objs[(size_t)rand_r(&w->seed) % w->n];
    int rc = shard_mapping_add(C, "board_has_pins", w->board, o->id, k);
    if (rc)
        werr(w, "mapping add", rc);
    else
        o->seq = k;
}

/* "w<t>\0k<key>": keys with a NUL inside. */
static size_t kv_name(char *buf, size_t size, int t, int key)
{
    int n = snprintf(buf, size, "w%d", t);
    buf[n++] = '\0';
    return (size_t)n + (size_t)snprintf(buf + n, size - (size_t)n, "k%d", key);
}

static void w_kv(worker *w, long k)
{
    int key = rand_r(&w->seed) % KV_KEYS;
    char name[32];
    size_t kl = kv_name(name, sizeof name, w->t, key);
    unsigned char val[40];
    int vl = snprintf((char *)val, sizeof val, "%d:%ld", w->t, k);
    val[0] = 0; /* binary */
    int rc = shard_kv_put(C, "users_by_email", name, kl, val, (size_t)vl);
    if (rc) {
        werr(w, "kv put", rc);
        return;
    }
    memcpy(w->kv[key], val, (size_t)vl);
    w->kvlen[key] = (size_t)vl;
}

static void w_mget(worker *w)
{
    uint64_t ids[32];
    size_t idx[32], n = 1 + (size_t)rand_r(&w->seed) % 32;
    shard_item *items = NULL;
    for (size_t i = 0; i < n; i++) {
        idx[i] = (size_t)rand_r(&w->seed) % w->n;
        ids[i] = w->objs[idx[i]].id;
    }
    int rc = shard_object_mget(C, ids, n, &items);
    if (rc) {
        werr(w, "mget", rc);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *got = items[i].status ? NULL
                                      : json_loadb(items[i].data, items[i].len,
                                                   JSON_ALLOW_NUL, NULL);
        if (!got || !json_equal(got, w->objs[idx[i]].want))
            werr(w, "mget returned other data", items[i].status);
        json_decref(got);
    }
    shard_items_free(items, n);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    long k = 0;
    while (now_s() < g_deadline) {
        int op = w->n == 0 ? 0 : rand_r(&w->seed) % 7;
        k++;
        w->ops[op]++;
        switch (op) {
        case 0: w_create(w, k); break;
        case 1: w_patch(w, k); break;
        case 2: w_map(w, k); break;
        case 3: w_kv(w, k); break;
        case 4: w_mget(w); break;
        case 5: {
            int rc = shard_object_update(C, w->counter, cb_counter, NULL);
            if (rc)
                werr(w, "update counter", rc);
            else
                w->incs++;
            break;
        }
        default: {
            char patch[64];
            snprintf(patch, sizeof patch, "{\"t%d\":%ld}", w->t, k);
            int rc = shard_object_patch(C, w->shared, patch, strlen(patch), NULL, NULL);
            if (rc)
                werr(w, "patch shared", rc);
            else
                w->last_shared = k;
            break;
        }
        }
    }
    return NULL;
}

START_TEST(test_concurrency)
{
    static worker w[NTHREADS];
    pthread_t th[NTHREADS];
    uint64_t counter = create(BOARDS, 0, "{\"n\":0}");
    uint64_t shared = create(BOARDS, 15, "{}");

    memset(w, 0, sizeof w);
    for (int i = 0; i < NTHREADS; i++) {
        w[i].t = i;
        w[i].seed = 0x5eed + (unsigned)i;
        w[i].counter = counter;
        w[i].shared = shared;
        w[i].board = create(BOARDS, SHARD_ANY, "{\"worker\":true}");
    }
    g_deadline = now_s() + RUN_SECS;
    for (int i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);

    long total = 0, incs = 0;
    for (int i = 0; i < NTHREADS; i++) {
        ck_assert_msg(w[i].errors == 0, "%d errors; first: %s", w[i].errors, w[i].err);
        for (int k = 0; k < 7; k++)
            total += w[i].ops[k];
        incs += w[i].incs;
    }
    fprintf(stderr, "  (%d threads, one context: %ld operations in %.0fs)\n", NTHREADS, total,
            RUN_SECS);

    /* every write, read back through the API */
    for (int i = 0; i < NTHREADS; i++) {
        worker *x = &w[i];
        size_t nmapped = 0;
        for (size_t k = 0; k < x->n; k++) {
            char *j = get(x->objs[k].id);
            json_t *got = parse(j, strlen(j));
            ck_assert_msg(json_equal(got, x->objs[k].want), "object %llu: %s",
                          (unsigned long long)x->objs[k].id, j);
            json_decref(got);
            shard_free(j);
            if (x->objs[k].seq) {
                nmapped++;
                shard_edge *e = NULL;
                size_t n = 0;
                OK(shard_mapping_list(C, "pin_owned_by_board", x->objs[k].id,
                                      SHARD_SEQ_NONE, 0, &e, &n));
                ck_assert_uint_eq(n, 1);
                ck_assert_uint_eq(e[0].to, x->board);
                ck_assert_int_eq(e[0].seq, x->objs[k].seq);
                shard_free(e);
            }
        }
        /* the board lists exactly the mapped pins, newest first */
        shard_edge *e = NULL;
        size_t n = 0;
        OK(shard_mapping_list(C, "board_has_pins", x->board, SHARD_SEQ_NONE, 0, &e, &n));
        ck_assert_uint_eq(n, nmapped);
        ck_assert_uint_eq(count_of("board_has_pins", x->board), nmapped);
        for (size_t r = 0; r < n; r++) {
            if (r)
                ck_assert(e[r - 1].seq > e[r].seq);
            size_t k = 0;
            while (k < x->n && x->objs[k].id != e[r].to)
                k++;
            ck_assert_msg(k < x->n && x->objs[k].seq == e[r].seq,
                          "board %llu lists %llu seq %lld", (unsigned long long)x->board,
                          (unsigned long long)e[r].to, (long long)e[r].seq);
        }
        shard_free(e);
        for (int key = 0; key < KV_KEYS; key++) {
            char name[32];
            size_t kl = kv_name(name, sizeof name, x->t, key);
            if (x->kvlen[key])
                kv_assert("users_by_email", name, kl, x->kv[key], x->kvlen[key]);
            else
                FAILS(SHARD_ENOTFOUND, kv_get_rc("users_by_email", name, kl));
        }
    }
    /* no lost update on the shared objects */
    json_t *o = NULL;
    OK(shard_object_get_json(C, counter, &o));
    ck_assert_int_eq(json_integer_value(json_object_get(o, "n")), incs);
    json_decref(o);
    OK(shard_object_get_json(C, shared, &o));
    for (int i = 0; i < NTHREADS; i++) {
        char key[16];
        snprintf(key, sizeof key, "t%d", i);
        json_t *v = json_object_get(o, key);
        if (w[i].last_shared)
            ck_assert_int_eq(json_integer_value(v), w[i].last_shared);
        else
            ck_assert_ptr_null(v);
    }
    json_decref(o);
    for (int i = 0; i < NTHREADS; i++) {
        for (size_t k = 0; k < w[i].n; k++)
            json_decref(w[i].objs[k].want);
        free(w[i].objs);
    }
}
END_TEST

/* ------------------------------------------------------------ faults */

/* Phases of the fault test; a call counts for a phase only when it both
 * started and ended in it. */
enum { UP, KILLING, DEAD, RESTARTING, BACK, STOP, NPHASES };

typedef struct pounder {
    unsigned shard;
    uint64_t id;
    const char *want;
    atomic_int *phase;
    long ok[NPHASES], fail[NPHASES];
    int first_rc[NPHASES];
    char first_err[NPHASES][600];
} pounder;

static void *pound(void *arg)
{
    pounder *p = arg;
    for (long i = 0;; i++) {
        int ph = atomic_load(p->phase);
        if (ph == STOP)
            break;
        char *j = NULL;
        size_t len;
        uint64_t id = 0;
        int rc = (i % 2) ? shard_object_get(C, p->id, &j, &len)
                         : shard_object_create(C, PINS, p->shard, LIT("{\"pound\":1}"), &id);
        if (rc == 0 && j && strcmp(j, p->want) != 0)
            rc = -1000;
        shard_free(j);
        if (atomic_load(p->phase) != ph) /* straddles a change: no verdict */
            continue;
        if (rc == 0) {
            p->ok[ph]++;
        } else if (!p->fail[ph]++) {
            p->first_rc[ph] = rc;
            snprintf(p->first_err[ph], sizeof p->first_err[ph], "%s", shard_errmsg());
        }
        nap_ms(5);
    }
    return NULL;
}

/* A key of table users_by_name whose mod shard is on pair `pair`. */
static void key_on_pair(int pair, char *key, size_t size)
{
    for (int i = 0;; i++) {
        uint32_t ms;
        snprintf(key, size, "key%d", i);
        OK(shard_mod(key, strlen(key), NMOD, &ms));
        if (strcmp(master_of_mod(ms), server_name(2 * pair - 1)) == 0)
            return;
    }
}

static void assert_names_s1(const char *msg)
{
    char port[32];
    snprintf(port, sizeof port, "127.0.0.1:%d", harness_port(H, "s1"));
    ck_assert_msg(strstr(msg, "MySQL001") || strstr(msg, port),
                  "message names neither the pair nor the server: %s", msg);
}

START_TEST(test_master_killed)
{
    uint64_t a = create(PINS, 1, "{\"k\":\"a\"}"), b = create(PINS, 9, "{\"k\":\"b\"}");
    uint64_t a2 = create(BOARDS, 6, "{\"k\":\"a2\"}"), b2 = create(BOARDS, 14, "{\"k\":\"b2\"}");
    uint64_t board2 = create(BOARDS, 10, "{}");
    char k1[32], k2[32];
    key_on_pair(1, k1, sizeof k1);
    key_on_pair(2, k2, sizeof k2);
    OK(shard_kv_put(C, "users_by_name", k1, strlen(k1), "one", 3));

    atomic_int phase = UP;
    pounder p1 = {.shard = 1, .id = a, .want = "{\"k\":\"a\"}", .phase = &phase};
    pounder p2 = {.shard = 9, .id = b, .want = "{\"k\":\"b\"}", .phase = &phase};
    pthread_t t1, t2;
    ck_assert_int_eq(pthread_create(&t1, NULL, pound, &p1), 0);
    ck_assert_int_eq(pthread_create(&t2, NULL, pound, &p2), 0);
    nap_ms(300);

    atomic_store(&phase, KILLING);
    ck_assert_int_eq(harness_kill(H, "s1"), 0);
    atomic_store(&phase, DEAD);
    double t0 = now_s();
    int rc;

    /* pair 1 fails, clearly */
    char *j = NULL;
    size_t len;
    rc = shard_object_get(C, a, &j, &len);
    ck_assert_msg(DOWN(rc), "get on a dead master: %d %s", rc, shard_errmsg());
    assert_names_s1(shard_errmsg());
    uint64_t id = 0;
    rc = shard_object_create(C, PINS, 1, "{}", 2, &id);
    ck_assert_msg(DOWN(rc), "create on a dead master: %d %s", rc, shard_errmsg());
    assert_names_s1(shard_errmsg());
    rc = shard_object_patch(C, a2, "{\"x\":1}", 7, NULL, NULL);
    ck_assert_msg(DOWN(rc), "patch on a dead master: %d %s", rc, shard_errmsg());
    rc = shard_kv_put(C, "users_by_name", k1, strlen(k1), "two", 3);
    ck_assert_msg(DOWN(rc), "kv on a dead master: %d %s", rc, shard_errmsg());
    assert_names_s1(shard_errmsg());
    shard_txn *t = NULL;
    rc = shard_txn_begin(C, 1, &t);
    ck_assert_msg(DOWN(rc), "txn on a dead master: %d %s", rc, shard_errmsg());
    assert_names_s1(shard_errmsg());
    uint64_t cnt;
    rc = shard_scatter_count(C, PINS, &cnt);
    ck_assert_msg(DOWN(rc), "scatter count with a dead master: %d %s", rc, shard_errmsg());
    /* the reverse row's shard is down: the call fails and says which part */
    rc = shard_mapping_add(C, "board_has_pins", board2, a, 5);
    ck_assert_msg(DOWN(rc), "mapping add with a dead reverse side: %d %s", rc, shard_errmsg());
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "pin_owned_by_board"));

    /* pair 2 works */
    assert_get_is(b, "{\"k\":\"b\"}");
    uint64_t nb = create(PINS, 12, "{\"while\":\"down\"}");
    OK(shard_kv_put(C, "users_by_name", k2, strlen(k2), "two", 3));
    kv_assert("users_by_name", k2, strlen(k2), "two", 3);
    OK(shard_txn_begin(C, 9, &t));
    OK(shard_txn_commit(t));

    /* multi-get across both pairs: per-item errors for pair 1 only */
    const uint64_t ids[] = {a, b, a2, b2, a, nb};
    shard_item *items = NULL;
    FAILS(SHARD_EPARTIAL, shard_object_mget(C, ids, 6, &items));
    assert_names_s1(shard_errmsg());
    ck_assert_msg(DOWN(items[0].status), "status %d", items[0].status);
    ck_assert_msg(DOWN(items[2].status), "status %d", items[2].status);
    ck_assert_msg(DOWN(items[4].status), "status %d", items[4].status);
    ck_assert_ptr_null(items[0].data);
    ck_assert_int_eq(items[1].status, 0);
    ck_assert_str_eq(items[1].data, "{\"k\":\"b\"}");
    ck_assert_str_eq(items[3].data, "{\"k\":\"b2\"}");
    ck_assert_str_eq(items[5].data, "{\"while\":\"down\"}");
    shard_items_free(items, 6);
    fprintf(stderr, "  (calls with s1 dead took %.2fs)\n", now_s() - t0);

    /* back: the same context recovers */
    t0 = now_s();
    atomic_store(&phase, RESTARTING);
    ck_assert_int_eq(harness_restart(H, "s1"), 0);
    atomic_store(&phase, BACK);
    fprintf(stderr, "  (s1 restarted in %.2fs)\n", now_s() - t0);
    assert_get_is(a, "{\"k\":\"a\"}");
    uint64_t na = create(PINS, 1, "{\"after\":\"restart\"}");
    assert_get_is(na, "{\"after\":\"restart\"}");
    OK(shard_object_patch(C, a2, "{\"x\":1}", 7, NULL, NULL));
    assert_get_is(a2, "{\"k\":\"a2\",\"x\":1}");
    kv_assert("users_by_name", k1, strlen(k1), "one", 3);
    OK(shard_mapping_add(C, "board_has_pins", board2, a, 5)); /* repeat the failed call */
    ck_assert_int_eq(row_seq("board_has_pins", 10, board2, a), 5);
    ck_assert_int_eq(row_seq("pin_owned_by_board", 1, a, board2), 5);
    items = NULL;
    OK(shard_object_mget(C, ids, 6, &items));
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(items[i].status, 0);
    ck_assert_str_eq(items[2].data, "{\"k\":\"a2\",\"x\":1}");
    shard_items_free(items, 6);
    OK(shard_txn_begin(C, 1, &t));
    OK(shard_txn_object_create(t, PINS, "{}", 2, &id));
    OK(shard_txn_commit(t));
    assert_get_is(id, "{}");
    nap_ms(200);
    atomic_store(&phase, STOP);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);

    fprintf(stderr, "  (pounders ok/fail, pair 1: up %ld/%ld, dead %ld/%ld, back %ld/%ld; "
                    "pair 2: up %ld/%ld, dead %ld/%ld, back %ld/%ld)\n",
            p1.ok[UP], p1.fail[UP], p1.ok[DEAD], p1.fail[DEAD], p1.ok[BACK], p1.fail[BACK],
            p2.ok[UP], p2.fail[UP], p2.ok[DEAD], p2.fail[DEAD], p2.ok[BACK], p2.fail[BACK]);
    ck_assert_msg(p1.ok[UP] > 0 && p1.fail[UP] == 0, "pair 1 before the kill: %d %s",
                  p1.first_rc[UP], p1.first_err[UP]);
    ck_assert_msg(p1.fail[DEAD] > 0 && p1.ok[DEAD] == 0, "pair 1 while dead: %ld ok",
                  p1.ok[DEAD]);
    ck_assert_msg(DOWN(p1.first_rc[DEAD]), "pair 1 while dead: %d %s", p1.first_rc[DEAD],
                  p1.first_err[DEAD]);
    assert_names_s1(p1.first_err[DEAD]);
    ck_assert_msg(p1.ok[BACK] > 0 && p1.fail[BACK] == 0, "pair 1 after the restart: %d %s",
                  p1.first_rc[BACK], p1.first_err[BACK]);
    for (int ph = 0; ph < STOP; ph++)
        ck_assert_msg(p2.fail[ph] == 0, "pair 2 in phase %d: %d %s", ph, p2.first_rc[ph],
                      p2.first_err[ph]);
    ck_assert(p2.ok[UP] > 0 && p2.ok[DEAD] > 0 && p2.ok[BACK] > 0);
}
END_TEST

/* ------------------------------------------------------------ the fence */

static shard_ctx *open_ctx_budget(const char *location, unsigned budget_ms)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    o.connect_timeout_ms = 2000;
    o.retry_budget_ms = budget_ms;
    o.retry_max = 1000;
    OK(shard_ctx_open(&ctx, location, &o));
    return ctx;
}

static int count_scanned(uint64_t id, const char *json, size_t len, void *payload)
{
    (void)id;
    (void)json;
    (void)len;
    ++*(size_t *)payload;
    return 0;
}

/*
 * A fence row set by hand (as a move sets it): every read and write of the
 * shard answers SHARD_EMOVED, other shards are untouched; a write in flight
 * holds the fence UPDATE back until it commits; and a call waiting on the
 * fence succeeds where a newly published map routes the shard.
 */
START_TEST(test_fence)
{
    const unsigned F = 7; /* the last shard of MySQL001 */
    uint64_t id = create(PINS, F, "{\"f\":1}");
    uint64_t other = create(PINS, 6, "{\"o\":1}");
    char db[64];
    db_of(F, db, sizeof db);
    OK(shard_mapping_add(C, "board_has_pins", id, other, 3)); /* a list that is not empty */

    /* A write in flight (a transaction holding the fence row's shared
     * lock) makes the fencing UPDATE wait; once it commits, the UPDATE
     * goes through. */
    fence_set(H, M, "s1", F, 0);
    shard_txn *t = NULL;
    uint64_t tid = 0;
    OK(shard_txn_begin(C, F, &t));
    OK(shard_txn_object_create(t, PINS, LIT("{\"in\":\"flight\"}"), &tid));
    char *q = fmt("SET SESSION sql_log_bin = 0; SET SESSION innodb_lock_wait_timeout = 1; "
                  "SET SESSION lock_wait_timeout = 1; UPDATE libshard_control.fence SET "
                  "fenced = 1 WHERE db = '%s'", db);
    char *out = NULL;
    ck_assert_msg(harness_sql(H, "s1", q, &out) != 0, "the fence UPDATE did not wait for "
                  "a write in flight");
    free(out);
    OK(shard_txn_commit(t));
    ck_assert_int_eq(harness_sql(H, "s1", q, &out), 0);
    free(out);
    free(q);
    ck_assert_int_eq(rows_of(tid), 1); /* committed before the fence */

    /* Fenced: every call on the shard, reads and writes, is SHARD_EMOVED
     * once its (short) retry budget is spent; the shard's rows stay. */
    shard_ctx *c2 = open_ctx_budget(harness_map_path(H), 300);
    char *json = NULL;
    uint64_t nid = 0;
    FAILS(SHARD_EMOVED, shard_object_get(c2, id, &json, NULL));
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "fenced"));
    FAILS(SHARD_EMOVED, shard_object_create(c2, PINS, F, LIT("{}"), &nid));
    FAILS(SHARD_EMOVED, shard_object_patch(c2, id, LIT("{\"g\":2}"), NULL, NULL));
    FAILS(SHARD_EMOVED, shard_object_delete(c2, id, SHARD_DELETE_HARD));
    FAILS(SHARD_EMOVED, shard_mapping_add(c2, "board_has_pins", id, other, 1));
    FAILS(SHARD_EMOVED, shard_mapping_remove(c2, "board_has_pins", id, other));
    shard_edge *edges = NULL;
    size_t n = 0;
    uint64_t count = 0;
    FAILS(SHARD_EMOVED, shard_mapping_list(c2, "board_has_pins", id, SHARD_SEQ_NONE, 0,
                                           &edges, &n));
    FAILS(SHARD_EMOVED, shard_mapping_list(c2, "board_has_pins", tid, SHARD_SEQ_NONE, 0,
                                           &edges, &n)); /* an empty one */
    ck_assert_ptr_null(edges);
    size_t seen = 0;
    FAILS(SHARD_EMOVED, shard_scatter_scan(c2, PINS, count_scanned, &seen));
    FAILS(SHARD_EMOVED, shard_mapping_count(c2, "board_has_pins", id, &count));
    t = NULL;
    FAILS(SHARD_EMOVED, shard_txn_begin(c2, F, &t));
    ck_assert_ptr_null(t);
    FAILS(SHARD_EMOVED, shard_scatter_count(c2, PINS, &count));
    uint64_t both[2] = {other, id};
    shard_item *items = NULL;
    FAILS(SHARD_EPARTIAL, shard_object_mget(c2, both, 2, &items));
    ck_assert_int_eq(items[0].status, 0);
    ck_assert_int_eq(items[1].status, SHARD_EMOVED);
    ck_assert_ptr_null(items[1].data);
    shard_items_free(items, 2);
    assert_get_is(other, "{\"o\":1}");
    ck_assert_int_eq(rows_of(id), 1);

    /* A call waiting on the fence succeeds where the newly published map
     * routes the shard (MySQL002, which gets the shard's tables first). */
    uint64_t v = shard_map_version(M);
    char *moved = map_routing(M, NSHARDS, F, "MySQL002", v + 1);
    char *path = map_schema_apply(H, moved);
    shard_ctx *c3 = open_ctx_budget(harness_map_path(H), 60000);
    waiter w = {.ctx = c3, .shard = F};
    atomic_init(&w.started, 0);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, create_waiting, &w), 0);
    while (!atomic_load(&w.started))
        nap_ms(1);
    nap_ms(200); /* let it meet the fence: not an assertion, it may be later */
    map_publish(H, moved);
    pthread_join(th, NULL);
    ck_assert_msg(w.rc == 0, "the waiting create: %s", shard_strerror(w.rc));
    fprintf(stderr, "  (a create waited %.0f ms on the fence, then ran on MySQL002)\n",
            w.took * 1000);
    ck_assert_int_eq(sql_num("s3", "SELECT COUNT(*) FROM `%s`.pins WHERE local_id = %llu",
                             db, (unsigned long long)shard_id_local(w.id)), 1);
    ck_assert_int_eq(sql_num("s1", "SELECT COUNT(*) FROM `%s`.pins WHERE data = "
                                   "'{\"waited\":1}'", db), 0);
    shard_ctx_free(c3);
    shard_ctx_free(c2);

    /* Put everything back: the shard on MySQL001, unfenced, and no copy of
     * its database on MySQL002. */
    route_back(H, M, NSHARDS, F, v + 2, db);
    free(moved);
    unlink(path);
    free(path);
    shard_ctx_free(C);
    C = open_ctx();
    assert_get_is(id, "{\"f\":1}");
}
END_TEST

/* Without the fence table, a clear error naming the command that makes it. */
START_TEST(test_fence_table_missing)
{
    uint64_t id = create(PINS, 12, "{\"m\":1}");
    /* Gone from the master and its standby (each has its own). */
    free(sql_on("s3", "SET SESSION sql_log_bin = 0; DROP TABLE libshard_control.fence"));
    free(sql_on("s4", "SET SESSION sql_log_bin = 0; DROP TABLE libshard_control.fence"));
    int rc = get_rc(id);
    char *msg = strdup(shard_errmsg());
    uint64_t nid = 0;
    int wrc = shard_object_create(C, PINS, 12, LIT("{}"), &nid);
    char *wmsg = strdup(shard_errmsg());
    OK(harness_schema_apply(H));
    /* schema apply makes it again, on the standby too. */
    for (int k = 3; k <= 4; k++)
        ck_assert_int_eq(sql_num(server_name(k), "SELECT COUNT(*) FROM information_schema."
                                 "TABLES WHERE TABLE_SCHEMA = 'libshard_control' AND "
                                 "TABLE_NAME = 'fence'"), 1);
    ck_assert_int_eq(rc, SHARD_ESERVER);
    ck_assert_msg(strstr(msg, "libshard_control.fence") && strstr(msg, "schema apply"),
                  "message: %s", msg);
    ck_assert_int_eq(wrc, SHARD_ESERVER);
    ck_assert_msg(strstr(wmsg, "schema apply"), "message: %s", wmsg);
    free(msg);
    free(wmsg);
    assert_get_is(id, "{\"m\":1}");
}
END_TEST

/* A server that answers with a request for a local file gets none: a
 * connection of the pool runs LOAD DATA LOCAL of a readable client file,
 * and nothing of it reaches the table. */
START_TEST(test_no_local_file_sent)
{
    shard_map *map = NULL;
    shard_server *srv;
    shard_conn *c = NULL;
    int rc;

    free(sql_on("s3", "CREATE TABLE IF NOT EXISTS db00012.li (t LONGTEXT)"));
    OK(shard_ctx_map(C, &map));
    srv = ctx_server(C, map, (size_t)shard__map_pair_index(map, 12));
    ck_assert_ptr_nonnull(srv);
    OK(conn_get(C, srv, &c));
    rc = conn_query_str(c, "LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE db00012.li");
    conn_put(c, false);
    shard_map_free(map);
    ck_assert_int_ne(rc, 0);
    ck_assert_int_eq(sql_num("s3", "SELECT COUNT(*) FROM db00012.li"), 0);
    free(sql_on("s3", "DROP TABLE db00012.li"));
}
END_TEST

int main(void)
{
    return data_main("server_data_faults",
                     TESTS(test_concurrency, test_master_killed, test_fence,
                           test_fence_table_missing, test_no_local_file_sent));
}
