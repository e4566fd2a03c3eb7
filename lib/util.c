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

int fanout_run(size_t n, unsigned threads, fanout_fn fn, void *arg)
{
    fanout_worker w[FANOUT_MAX];
    bool started[FANOUT_MAX] = {false};
    fanout f;
    unsigned k = fanout_workers(n, threads);

    memset(&f, 0, sizeof f);
    f.fn = fn;
    f.arg = arg;
    f.n = n;
    atomic_init(&f.next, 0);
    atomic_init(&f.failed, false);
    pthread_mutex_init(&f.lock, NULL);
    for (unsigned i = 0; i < k; i++) {
        w[i].f = &f;
        w[i].id = i;
    }
    for (unsigned i = 1; i < k; i++)
        started[i] = pthread_create(&w[i].thread, NULL, fanout_main, &w[i]) == 0;
    fanout_main(&w[0]);
    for (unsigned i = 1; i < k; i++)
        if (started[i])
            pthread_join(w[i].thread, NULL);
    pthread_mutex_destroy(&f.lock);
    return atomic_load(&f.failed) ? shard__error_restore(&f.first) : 0;
}
