/*
 * The context: the current map snapshot (swapped whole on reload, so a
 * reload never disturbs operations in flight), the credentials its pools
 * log in with, the server pools and the jittered periodic refresh. Routed
 * execution and its retry policy are in exec.c.
 */
#include "ctx.h"
#include "store.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Per-thread PRNG for jitter and random shard choice (splitmix64). */
static uint64_t rnd(void)
{
    static _Thread_local uint64_t state;
    uint64_t z;

    if (!state) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&state;
    }
    z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t ctx_random(void)
{
    return rnd();
}

void ctx_log(shard_ctx *ctx, int level, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    if (!ctx->opts.log || level > ctx->opts.log_level)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->opts.log(level, msg, ctx->opts.log_payload);
}

shard_map *ctx_map(shard_ctx *ctx)
{
    shard_map *m;
    pthread_mutex_lock(&ctx->map_lock);
    m = shard__map_ref(ctx->map);
    pthread_mutex_unlock(&ctx->map_lock);
    return m;
}

int shard_ctx_map(shard_ctx *ctx, shard_map **out)
{
    if (!ctx || !out)
        return shard__fail(SHARD_EINVAL, "shard_ctx_map: NULL argument");
    *out = ctx_map(ctx);
    return 0;
}

const char *ctx_user(const shard_ctx *ctx, const shard_map *map)
{
    return ctx->user ? ctx->user : map->user;
}

/* The password named by the options or the map, copied out of the environment. */
static int read_password(const shard_ctx *ctx, const shard_map *map, char **out)
{
    const char *env = ctx->user ? ctx->password_env : map->password_env;
    const char *v;

    *out = NULL;
    if (!env)
        return 0;
    v = getenv(env);
    if (!v)
        return shard__fail(SHARD_EINVAL, "%s names %s, which is not set in the environment",
                          ctx->user ? "shard_options.password_env" :
                                      "credentials.password_env", env);
    *out = shard__strdup(v);
    return *out ? 0 : shard__fail(SHARD_ENOMEM, "out of memory");
}

/* The password, copied under the lock a reload swaps (and wipes) it under:
 * a connection being opened keeps a copy of its own. */
int ctx_password_copy(shard_ctx *ctx, char **out)
{
    return conn_config_password(&ctx->conf, out);
}

int conn_get(shard_ctx *ctx, shard_server *srv, shard_conn **out)
{
    (void)ctx; /* the pool carries the context's connection settings */
    return conn_acquire(srv, out, NULL);
}

uint64_t ctx_map_version(shard_ctx *ctx)
{
    uint64_t v;
    pthread_mutex_lock(&ctx->map_lock);
    v = ctx->map ? ctx->map->version : 0;
    pthread_mutex_unlock(&ctx->map_lock);
    return v;
}

shard_server *ctx_server(shard_ctx *ctx, const shard_map *map, size_t pair)
{
    return ctx_server_at(ctx, &map->pairs[pair].master);
}

shard_server *ctx_server_at(shard_ctx *ctx, const shard_endpoint *ep)
{
    shard_server *s;

    pthread_mutex_lock(&ctx->servers_lock);
    for (s = ctx->servers; s; s = s->next)
        if (strcmp(s->ep.text, ep->text) == 0)
            break;
    if (!s && (s = shard__calloc(1, sizeof *s))) {
        s->ep = *ep;
        s->conf = &ctx->conf;
        snprintf(s->label, sizeof s->label, "server %s", ep->text);
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        s->next = ctx->servers;
        ctx->servers = s;
    }
    pthread_mutex_unlock(&ctx->servers_lock);
    return s;
}

/* Does the new map name the same password variable as the current one? */
static bool same_password_env(shard_ctx *ctx, const shard_map *fresh)
{
    bool same;

    pthread_mutex_lock(&ctx->map_lock);
    /* Never at open (no map yet): a missing variable then is an error. The
     * options' account keeps its variable across map versions. */
    same = ctx->map && (ctx->user || (ctx->map->password_env && fresh->password_env &&
                                      strcmp(ctx->map->password_env, fresh->password_env) == 0));
    pthread_mutex_unlock(&ctx->map_lock);
    return same;
}

static int swap_map_locked(shard_ctx *ctx, shard_map *fresh);

/* Swaps are serialised, so that the credentials set are those of the map
 * that wins. */
static int swap_map(shard_ctx *ctx, shard_map *fresh)
{
    int rc;
    pthread_mutex_lock(&ctx->swap_lock);
    rc = swap_map_locked(ctx, fresh);
    pthread_mutex_unlock(&ctx->swap_lock);
    return rc;
}

static int swap_map_locked(shard_ctx *ctx, shard_map *fresh)
{
    char *password = NULL;
    shard_map *old;
    int rc;

    if (fresh->version <= ctx_map_version(ctx)) { /* nothing new: the usual case */
        shard_map_free(fresh);
        return 0;
    }
    if ((rc = read_password(ctx, fresh, &password)) && same_password_env(ctx, fresh)) {
        /* Applications often clear secrets from their environment after
         * start-up: the same variable, gone now, still means the password
         * read then. */
        rc = ctx_password_copy(ctx, &password);
    }
    if (rc) {
        shard_map_free(fresh);
        return rc;
    }
    /* The credentials first: a connection opened for the new map must log
     * in with the new map's account. */
    rc = conn_config_set(&ctx->conf, ctx_user(ctx, fresh), password, &fresh->tls);
    shard__wipe_free(password);
    if (rc) {
        shard_map_free(fresh);
        return rc;
    }
    pthread_mutex_lock(&ctx->map_lock);
    if (ctx->map && fresh->version <= ctx->map->version) {
        pthread_mutex_unlock(&ctx->map_lock);
        shard_map_free(fresh);
        return 0;
    }
    old = ctx->map;
    ctx->map = fresh;
    pthread_mutex_unlock(&ctx->map_lock);
    if (old)
        ctx_log(ctx, SHARD_LOG_INFO, "shard map version %llu replaces version %llu",
                (unsigned long long)fresh->version, (unsigned long long)old->version);
    shard_map_free(old);
    return 0;
}

int shard_ctx_reload(shard_ctx *ctx)
{
    shard_map *fresh = NULL;
    int rc;

    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_ctx_reload: NULL context");
    stats_add(&ctx->stats.map_reloads);
    double t0 = now_seconds();
    if ((rc = shard_store_load(ctx->store, &fresh))) {
        ctx_log(ctx, SHARD_LOG_WARN, "map reload failed, keeping version %llu: %s",
                (unsigned long long)ctx_map_version(ctx), shard_errmsg());
        return rc;
    }
    uint64_t version = fresh->version;
    if ((rc = swap_map(ctx, fresh)) == 0)
        ctx_lease_confirm(ctx, t0, version);
    return rc;
}

void ctx_lease_confirm(shard_ctx *ctx, double started, uint64_t version)
{
    uint64_t ns = (uint64_t)(started * 1e9), cur;

    /* A ZooKeeper read may be answered by a follower that lags the leader
     * (there is no sync before it): it does not prove the map current at
     * its start, so a watched store confirms no lease (every statement
     * checks the fence). */
    if (store_can_watch(ctx->store))
        return;
    if (ctx_map_version(ctx) != version)
        return; /* the store's map is not the one held */
    cur = atomic_load(&ctx->lease_from_ns);
    while (cur < ns && !atomic_compare_exchange_weak(&ctx->lease_from_ns, &cur, ns))
        ;
}

double ctx_lease_until(shard_ctx *ctx, const shard_map *map)
{
    uint64_t from = atomic_load_explicit(&ctx->lease_from_ns, memory_order_acquire);

    if (!map->lease_ms || !from || ctx_map_version(ctx) != map->version)
        return 0;
    return (double)from / 1e9 + map->lease_ms / 1000.0;
}

/* The refresh interval, or half the map's lease when that is shorter: a
 * context keeps its lease while the store answers (libshard-move(7)). */
static unsigned refresh_period(shard_ctx *ctx)
{
    unsigned base = ctx->opts.refresh_interval_ms;
    shard_map *map = ctx_map(ctx);

    if (map->lease_ms && map->lease_ms / 2 < base)
        base = map->lease_ms / 2 ? map->lease_ms / 2 : 1;
    shard_map_free(map);
    return base;
}

/* A store that pushes (ZooKeeper) hands each new version here, on its own
 * thread: the swap happens off every caller's path. */
static void watch_delivered(shard_map *fresh, void *payload)
{
    shard_ctx *ctx = payload;

    stats_add(&ctx->stats.map_reloads);
    if (swap_map(ctx, fresh))
        ctx_log(ctx, SHARD_LOG_WARN, "pushed map not taken, keeping version %llu: %s",
                (unsigned long long)ctx_map_version(ctx), shard_errmsg());
}

static void *refresh_main(void *arg)
{
    shard_ctx *ctx = arg;

    pthread_mutex_lock(&ctx->stop_lock);
    while (!ctx->stopping) {
        unsigned base = refresh_period(ctx);
        /* +-25% jitter keeps a fleet of processes from reading in lockstep. */
        unsigned ms = base - base / 4 + (unsigned)(rnd() % (base / 2 + 1));
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!ctx->stopping &&
               pthread_cond_timedwait(&ctx->stop_cond, &ctx->stop_lock, &ts) != ETIMEDOUT)
            ;
        if (ctx->stopping)
            break;
        pthread_mutex_unlock(&ctx->stop_lock);
        shard_ctx_reload(ctx);
        pthread_mutex_lock(&ctx->stop_lock);
    }
    pthread_mutex_unlock(&ctx->stop_lock);
    return NULL;
}

static int check_options(const shard_options *o)
{
    if (o->version < 1 || o->version > SHARD_OPTIONS_VERSION)
        return shard__fail(SHARD_EINVAL, "shard_options.version %u is not supported "
                          "(this library knows 1..%d)", o->version, SHARD_OPTIONS_VERSION);
    if (o->pool_size < 1)
        return shard__fail(SHARD_EINVAL, "shard_options.pool_size must be at least 1");
    if (o->retry_max < 1)
        return shard__fail(SHARD_EINVAL, "shard_options.retry_max must be at least 1");
    if (o->connect_timeout_ms < 1 || o->read_timeout_ms < 1 || o->write_timeout_ms < 1)
        return shard__fail(SHARD_EINVAL, "shard_options: timeouts must be at least 1 ms");
    if (o->version >= 2 && o->user && (!o->user[0] || strlen(o->user) > 80))
        return shard__fail(SHARD_EINVAL, "shard_options.user must be 1..80 characters");
    return 0;
}

int shard_ctx_open(shard_ctx **out, const char *location, const shard_options *opts)
{
    static const shard_options defaults = SHARD_OPTIONS_INIT;
    shard_ctx *ctx;
    shard_map *map = NULL;
    int rc;

    if (!out || !location)
        return shard__fail(SHARD_EINVAL, "shard_ctx_open: NULL argument");
    if (!opts)
        opts = &defaults;
    if ((rc = check_options(opts)) || (rc = shard_global_init()))
        return rc;
    ctx = shard__calloc(1, sizeof *ctx);
    if (!ctx)
        return shard__fail(SHARD_ENOMEM, "out of memory opening a context");
    /* Only the fields of the caller's version: an older caller's struct is
     * shorter, and the newer fields keep their defaults. */
    ctx->opts = defaults;
    memcpy(&ctx->opts, opts, opts->version >= 2 ? sizeof *opts
                                                : offsetof(shard_options, user));
    ctx->opts.user = ctx->opts.password_env = NULL; /* the copies below are used */
    pthread_mutex_init(&ctx->map_lock, NULL);
    pthread_mutex_init(&ctx->reload_lock, NULL);
    pthread_mutex_init(&ctx->swap_lock, NULL);
    pthread_cond_init(&ctx->reload_cond, NULL);
    pthread_cond_init(&ctx->reader_cond, NULL);
    conn_config_init(&ctx->conf, ctx->opts.connect_timeout_ms, ctx->opts.read_timeout_ms,
                     ctx->opts.write_timeout_ms, ctx->opts.pool_size);
    if (opts->version >= 2 &&
        ((opts->user && !(ctx->user = shard__strdup(opts->user))) ||
         (opts->password_env && !(ctx->password_env = shard__strdup(opts->password_env))))) {
        shard_ctx_free(ctx);
        return shard__fail(SHARD_ENOMEM, "out of memory opening a context");
    }
    pthread_mutex_init(&ctx->servers_lock, NULL);
    pthread_mutex_init(&ctx->stop_lock, NULL);
    pthread_cond_init(&ctx->stop_cond, NULL);
    stats_add(&ctx->stats.map_reloads); /* the first read of the store */
    double t0 = now_seconds();
    if ((rc = shard_store_open(&ctx->store, location)) ||
        (rc = shard_store_load(ctx->store, &map))) {
        shard_ctx_free(ctx);
        return rc;
    }
    uint64_t version = map->version;
    if ((rc = swap_map(ctx, map))) {
        shard_ctx_free(ctx);
        return rc;
    }
    ctx_lease_confirm(ctx, t0, version);
    if (store_can_watch(ctx->store)) {
        /* Pushed, not polled: no refresh thread, and no lease (a watch or a
         * read there does not confirm the map current: ctx_lease_confirm),
         * so every statement checks the fence. */
        if ((rc = store_watch(ctx->store, watch_delivered, ctx))) {
            shard_ctx_free(ctx);
            return rc;
        }
    } else if (opts->refresh_interval_ms) {
        if (pthread_create(&ctx->refresher, NULL, refresh_main, ctx) != 0) {
            shard_ctx_free(ctx);
            return shard__fail(SHARD_EIO, "cannot start the map refresh thread");
        }
        ctx->refreshing = true;
    }
    *out = ctx;
    return 0;
}

void *ctx_cache(shard_ctx *ctx, void *(*make)(void), void (*free_fn)(void *))
{
    void *c = atomic_load(&ctx->cache), *fresh, *expected = NULL;

    if (c)
        return c;
    if (!(fresh = make()))
        return NULL;
    if (atomic_compare_exchange_strong(&ctx->cache, &expected, fresh)) {
        ctx->cache_free = free_fn; /* read only when the context is freed */
        return fresh;
    }
    free_fn(fresh); /* another thread's won */
    return expected;
}

/* ---- the reader thread ------------------------------------------------------------- */

/* Under reload_lock: the read in flight is over; its waiters look. */
void ctx_reload_done(shard_ctx *ctx)
{
    ctx->reloading = false;
    ctx->reloads_done++;
    pthread_cond_broadcast(&ctx->reload_cond);
}

/* The context's reader: the store reads that exec_reload asks for, one at
 * a time, off the callers' threads. It belongs to the context, which
 * stops it when it is freed. */
static void *reader_main(void *arg)
{
    shard_ctx *ctx = arg;

    pthread_mutex_lock(&ctx->reload_lock);
    for (;;) {
        while (!ctx->reader_wanted && !ctx->reader_stop)
            pthread_cond_wait(&ctx->reader_cond, &ctx->reload_lock);
        if (ctx->reader_stop)
            break;
        ctx->reader_wanted = false;
        pthread_mutex_unlock(&ctx->reload_lock);
        shard_ctx_reload(ctx); /* its message is this thread's own */
        pthread_mutex_lock(&ctx->reload_lock);
        ctx_reload_done(ctx);
    }
    pthread_mutex_unlock(&ctx->reload_lock);
    return NULL;
}

bool ctx_reader_ask(shard_ctx *ctx)
{
    if (!ctx->reader_started && !ctx->reader_stop &&
        pthread_create(&ctx->reader, NULL, reader_main, ctx) == 0)
        ctx->reader_started = true;
    if (!ctx->reader_started)
        return false;
    ctx->reader_wanted = true;
    pthread_cond_signal(&ctx->reader_cond);
    return true;
}

static void reader_stop(shard_ctx *ctx)
{
    pthread_mutex_lock(&ctx->reload_lock);
    ctx->reader_stop = true;
    pthread_cond_signal(&ctx->reader_cond);
    pthread_mutex_unlock(&ctx->reload_lock);
    if (ctx->reader_started)
        pthread_join(ctx->reader, NULL); /* within the store's own timeout */
}

void shard_ctx_free(shard_ctx *ctx)
{
    shard_server *s, *next;

    if (!ctx)
        return;
    if (ctx->refreshing) {
        pthread_mutex_lock(&ctx->stop_lock);
        ctx->stopping = true;
        pthread_cond_signal(&ctx->stop_cond);
        pthread_mutex_unlock(&ctx->stop_lock);
        pthread_join(ctx->refresher, NULL);
    }
    reader_stop(ctx);
    /* First: it stops the store's watch, whose thread swaps maps in. */
    shard_store_free(ctx->store);
    for (s = ctx->servers; s; s = next) {
        next = s->next;
        server_close_all(s);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
    }
    shard_map_free(ctx->map);
    conn_config_free(&ctx->conf);
    if (ctx->cache_free)
        ctx->cache_free(atomic_load(&ctx->cache));
    free(ctx->user);
    free(ctx->password_env);
    pthread_mutex_destroy(&ctx->map_lock);
    pthread_mutex_destroy(&ctx->reload_lock);
    pthread_mutex_destroy(&ctx->swap_lock);
    pthread_cond_destroy(&ctx->reload_cond);
    pthread_cond_destroy(&ctx->reader_cond);
    pthread_mutex_destroy(&ctx->servers_lock);
    pthread_mutex_destroy(&ctx->stop_lock);
    pthread_cond_destroy(&ctx->stop_cond);
    free(ctx);
}

