/* The context: the map snapshot, its reload, and the server pools. */
#ifndef LIBSHARD_CTX_H
#define LIBSHARD_CTX_H

#include "conn.h"
#include "stats.h"

struct shard_ctx {
    shard_options opts;
    shard_store *store;
    pthread_mutex_t map_lock;
    pthread_mutex_t swap_lock; /* serialises swaps of map and credentials */
    shard_map *map;          /* current snapshot; swapped whole */
    conn_config conf;        /* what every pool logs in with */
    pthread_mutex_t servers_lock;
    shard_server *servers;   /* grows, never shrinks, while the context lives */
    pthread_t refresher;
    bool refreshing;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stopping;
    char *user;               /* opts.user, copied; NULL: the map's */
    char *password_env;       /* opts.password_env, copied */
    /* Reloads after errors (exec.c): one in flight per context, the others
     * wait for its result; never more often than a minimum interval. */
    pthread_mutex_t reload_lock;
    pthread_cond_t reload_cond;
    bool reloading;           /* under reload_lock */
    double reload_started;    /* monotonic start of the latest error reload */
    uint64_t reloads_done;    /* error reloads finished */
    /* Their store reads run on a thread of the context's (exec.c), so a
     * store that hangs holds no call past its retry budget. */
    pthread_cond_t reader_cond;
    pthread_t reader;
    bool reader_started, reader_wanted, reader_stop; /* under reload_lock */
    /* One other file's cache (legacy.c's resolutions), made on first use
     * through ctx_cache(), freed with the context by the function given there. */
    _Atomic(void *) cache;
    void (*cache_free)(void *); /* set by the thread whose cache won */
    shard_stats stats;        /* stats.c: counters, shard_ctx_stats(3) */
    /* The lease (libshard-move(7), "The lease"): monotonic ns at which the
     * latest store read that found the held map current started; 0: none. */
    _Atomic uint64_t lease_from_ns;
};

/* A store read that started at `started` (monotonic seconds) found map
 * `version`: if that is the map held, the lease runs from then. */
void ctx_lease_confirm(shard_ctx *ctx, double started, uint64_t version);
/* Until when (monotonic seconds) the lease on `map` holds; 0: no lease (the
 * map has none, it is not the context's current map, or never confirmed). */
double ctx_lease_until(shard_ctx *ctx, const shard_map *map);

/*
 * The context's cache (made on first use): make() builds one (NULL: out of
 * memory, and NULL is returned), and of threads racing, one's is kept and
 * freed with the context by free_fn; the others' are freed at once.
 */
void *ctx_cache(shard_ctx *ctx, void *(*make)(void), void (*free_fn)(void *));

/* A copy of the current password (NULL: none): shard__wipe_free() it. */
int ctx_password_copy(shard_ctx *ctx, char **out);
/* The account connections use: the options' override, else the map's. */
const char *ctx_user(const shard_ctx *ctx, const shard_map *map);

shard_map *ctx_map(shard_ctx *ctx);            /* a reference: shard_map_free it */
/* The context's reader thread, which reads the store for exec_reload.
 * Both under reload_lock: the read in flight is over (its waiters look);
 * hand the next read to the thread, started if need be (false: it cannot
 * be, and the caller reads itself). */
void ctx_reload_done(shard_ctx *ctx);
bool ctx_reader_ask(shard_ctx *ctx);
uint64_t ctx_map_version(shard_ctx *ctx);
void ctx_log(shard_ctx *ctx, int level, const char *fmt, ...) SHARD_PRINTF(3, 4);
shard_server *ctx_server(shard_ctx *ctx, const shard_map *map, size_t pair);
/* The pool of any server, e.g. a standby (created on first use). */
shard_server *ctx_server_at(shard_ctx *ctx, const shard_endpoint *ep);
/* A connection from srv's pool (conn_acquire, for callers holding a context). */
int conn_get(shard_ctx *ctx, shard_server *srv, shard_conn **out);
uint64_t ctx_random(void);

#endif
