/*
 * Utilities every part of lib/ shares: clocks and sleeps, handing bytes to
 * the caller, and running work over threads. They depend on nothing but
 * error.c, so that no file needs the context to use them.
 */
#ifndef LIBSHARD_UTIL_H
#define LIBSHARD_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Monotonic seconds. */
double now_seconds(void);
/* Sleep this long (0: return at once). */
void sleep_ms(double ms);

/* Copy bytes into a NUL-terminated caller-owned buffer (*out: shard_free). */
int copy_out(const char *data, size_t len, char **out, size_t *outlen);

/*
 * The thread's error message, kept while other calls run and put back after:
 * the one way to carry a failure's detail past cleanup that may fail too.
 */
typedef struct shard_errsave {
    int code;
    char msg[1024];
} shard_errsave;

void shard__error_save(shard_errsave *s, int code);
/* Put the saved message back on this thread; returns the saved code. */
int shard__error_restore(const shard_errsave *s);

/*
 * Run fn(arg, i, worker) for every item i in [0, n), over at most `threads`
 * threads (the calling thread is worker 0; workers are 0..threads-1, so fn
 * may keep per-worker state such as connections in an array). Items are
 * handed out in order. After the first failure no new item starts; the
 * first failure's code comes back with its message on the calling thread.
 * A thread that cannot be created leaves its share to the others.
 */
typedef int (*fanout_fn)(void *arg, size_t i, unsigned worker);
int fanout_run(size_t n, unsigned threads, fanout_fn fn, void *arg);
/* The number of workers fanout_run will use for n items (at least 1). */
unsigned fanout_workers(size_t n, unsigned threads);

#endif
