/* Clocks, copies to the caller, and running work over threads. */
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sleep_ms(double ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000) * 1e6);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    nanosleep(&ts, NULL);
}

int copy_out(const char *data, size_t len, char **out, size_t *outlen)
{
    char *buf = shard__malloc(len + 1);
    if (!buf)
        return shard__fail(SHARD_ENOMEM, "out of memory for a %zu-byte result", len);
    if (len)
        memcpy(buf, data, len);
    buf[len] = '\0';
    *out = buf;
    if (outlen)
        *outlen = len;
    return 0;
}

void shard__error_save(shard_errsave *s, int code)
{
    s->code = code;
    snprintf(s->msg, sizeof s->msg, "%s", shard_errmsg());
}

int shard__error_restore(const shard_errsave *s)
{
    return shard__fail(s->code, "%s", s->msg);
}

/* ---- fan-out ---------------------------------------------------------------- */

#define FANOUT_MAX 64
#define FANOUT_POOL_MAX 16 /* helpers a pool keeps; more at once get threads of their own */

typedef struct fanout {
    fanout_fn fn;
    void *arg;
    size_t n;
    atomic_size_t next;
    atomic_bool failed;
    pthread_mutex_t lock;
    shard_errsave first; /* under lock */
} fanout;

typedef struct fanout_worker {
    fanout *f;
    unsigned id;
    pthread_t thread;
} fanout_worker;

static void *fanout_main(void *p)
{
    fanout_worker *w = p;
    fanout *f = w->f;

    while (!atomic_load(&f->failed)) {
        size_t i = atomic_fetch_add(&f->next, 1);
        int rc;
        if (i >= f->n)
            break;
        if ((rc = f->fn(f->arg, i, w->id))) {
            pthread_mutex_lock(&f->lock);
            if (!atomic_load(&f->failed)) {
                shard__error_save(&f->first, rc);
                atomic_store(&f->failed, true);
            }
            pthread_mutex_unlock(&f->lock);
        }
    }
    return NULL;
}

unsigned fanout_workers(size_t n, unsigned threads)
{
    if (threads < 1)
        threads = 1;
    if (threads > FANOUT_MAX)
        threads = FANOUT_MAX;
    if (n < threads)
        threads = n ? (unsigned)n : 1;
    return threads;
}

static void fanout_init(fanout *f, fanout_worker *w, unsigned k, size_t n, fanout_fn fn,
                        void *arg)
{
    memset(f, 0, sizeof *f);
    f->fn = fn;
    f->arg = arg;
    f->n = n;
    atomic_init(&f->next, 0);
    atomic_init(&f->failed, false);
    pthread_mutex_init(&f->lock, NULL);
    for (unsigned i = 0; i < k; i++) {
        w[i].f = f;
        w[i].id = i;
    }
}

static int fanout_result(fanout *f)
{
    pthread_mutex_destroy(&f->lock);
    return atomic_load(&f->failed) ? shard__error_restore(&f->first) : 0;
}

/* Workers from..k-1 on threads of their own; started[i] whether it runs. */
static void fanout_spawn(fanout_worker *w, unsigned from, unsigned k, bool *started)
{
    for (unsigned i = from; i < k; i++)
        started[i] = pthread_create(&w[i].thread, NULL, fanout_main, &w[i]) == 0;
}

static void fanout_join(fanout_worker *w, unsigned from, unsigned k, const bool *started)
{
    for (unsigned i = from; i < k; i++)
        if (started[i])
            pthread_join(w[i].thread, NULL);
}

int fanout_run(size_t n, unsigned threads, fanout_fn fn, void *arg)
{
    fanout_worker w[FANOUT_MAX];
    bool started[FANOUT_MAX] = {false};
    fanout f;
    unsigned k = fanout_workers(n, threads);

    fanout_init(&f, w, k, n, fn, arg);
    fanout_spawn(w, 1, k, started);
    fanout_main(&w[0]);
    fanout_join(w, 1, k, started);
    return fanout_result(&f);
}

/*
 * The kept helpers: each waits on its own condition for a worker to run,
 * and goes back on the idle list when it is done. Everything below is
 * under the pool's lock; a run's count of busy helpers too, so that the
 * run (on its caller's stack) lives until its last helper has let go.
 */
typedef struct fanout_helper {
    struct fanout_pool *pool;
    pthread_t thread;
    pthread_cond_t wake;
    fanout_worker *job;       /* NULL while idle */
    unsigned *busy;           /* the job's run's count of busy helpers */
    struct fanout_helper *next; /* in the idle list */
} fanout_helper;

struct fanout_pool {
    pthread_mutex_t lock;
    pthread_cond_t done;      /* a run's last helper finished */
    fanout_helper *idle;
    fanout_helper *all[FANOUT_POOL_MAX];
    unsigned nall;
    bool quit;
};

static void *helper_main(void *p)
{
    fanout_helper *h = p;
    fanout_pool *pool = h->pool;

    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!h->job && !pool->quit)
            pthread_cond_wait(&h->wake, &pool->lock);
        if (!h->job)
            break;
        pthread_mutex_unlock(&pool->lock);
        fanout_main(h->job);
        pthread_mutex_lock(&pool->lock);
        h->job = NULL;
        h->next = pool->idle;
        pool->idle = h;
        if (--*h->busy == 0)
            pthread_cond_broadcast(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

fanout_pool *fanout_pool_new(void)
{
    fanout_pool *p = shard__calloc(1, sizeof *p);

    if (p) {
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->done, NULL);
    }
    return p;
}

/* An idle helper, or a new one while the pool has room (under lock). */
static fanout_helper *helper_take(fanout_pool *p)
{
    fanout_helper *h = p->idle;

    if (h) {
        p->idle = h->next;
        return h;
    }
    if (p->nall >= FANOUT_POOL_MAX || !(h = shard__calloc(1, sizeof *h)))
        return NULL;
    h->pool = p;
    pthread_cond_init(&h->wake, NULL);
    if (pthread_create(&h->thread, NULL, helper_main, h) != 0) {
        pthread_cond_destroy(&h->wake);
        free(h);
        return NULL;
    }
    p->all[p->nall++] = h;
    return h;
}

int fanout_pool_run(fanout_pool *p, size_t n, unsigned threads, fanout_fn fn, void *arg)
{
    fanout_worker w[FANOUT_MAX];
    bool started[FANOUT_MAX] = {false};
    unsigned k = fanout_workers(n, threads), kept = 1, busy = 0;
    fanout f;

    if (!p)
        return fanout_run(n, threads, fn, arg);
    fanout_init(&f, w, k, n, fn, arg);
    pthread_mutex_lock(&p->lock);
    for (fanout_helper *h; kept < k && (h = helper_take(p)); kept++) {
        h->job = &w[kept];
        h->busy = &busy;
        busy++;
        pthread_cond_signal(&h->wake);
    }
    pthread_mutex_unlock(&p->lock);
    /* More at once than the pool keeps: the rest on threads of their own. */
    fanout_spawn(w, kept, k, started);
    fanout_main(&w[0]);
    fanout_join(w, kept, k, started);
    pthread_mutex_lock(&p->lock);
    while (busy)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return fanout_result(&f);
}

void fanout_pool_free(fanout_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->quit = true;
    for (unsigned i = 0; i < p->nall; i++)
        pthread_cond_signal(&p->all[i]->wake);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->nall; i++) {
        pthread_join(p->all[i]->thread, NULL);
        pthread_cond_destroy(&p->all[i]->wake);
        free(p->all[i]);
    }
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
