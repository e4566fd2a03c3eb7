/*
 * The context: the current map snapshot (swapped whole on reload, so a
 * reload never disturbs operations in flight), the server pools, the
 * jittered periodic refresh, and routed execution with bounded retries.
 */
#include "ctx.h"

#include <mysqld_error.h>

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
    m = shard_map_ref(ctx->map);
    pthread_mutex_unlock(&ctx->map_lock);
    return m;
}

int shard_ctx_map(shard_ctx *ctx, shard_map **out)
{
    if (!ctx || !out)
        return shard_fail(SHARD_EINVAL, "shard_ctx_map: NULL argument");
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
        return shard_fail(SHARD_EINVAL, "%s names %s, which is not set in the environment",
                          ctx->user ? "shard_options.password_env" :
                                      "credentials.password_env", env);
    *out = shard_strdup(v);
    return *out ? 0 : shard_fail(SHARD_ENOMEM, "out of memory");
}

void shard_wipe_free(char *s)
{
    if (s) {
        volatile char *p = s;
        while (*p)
            *p++ = 0;
        free(s);
    }
}

/* The password, copied under the lock a reload swaps (and wipes) it under:
 * a connection being opened keeps a copy of its own. */
int ctx_password_copy(shard_ctx *ctx, char **out)
{
    int rc = 0;

    *out = NULL;
    pthread_mutex_lock(&ctx->map_lock);
    if (ctx->password && !(*out = shard_strdup(ctx->password)))
        rc = SHARD_ENOMEM;
    pthread_mutex_unlock(&ctx->map_lock);
    return rc;
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
    if (!s && (s = shard_calloc(1, sizeof *s))) {
        s->ep = *ep;
        snprintf(s->label, sizeof s->label, "server %s", ep->text);
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        s->next = ctx->servers;
        ctx->servers = s;
    }
    pthread_mutex_unlock(&ctx->servers_lock);
    return s;
}

static uint64_t current_version(shard_ctx *ctx)
{
    uint64_t v;
    pthread_mutex_lock(&ctx->map_lock);
    v = ctx->map ? ctx->map->version : 0;
    pthread_mutex_unlock(&ctx->map_lock);
    return v;
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

static int swap_map(shard_ctx *ctx, shard_map *fresh)
{
    char *password = NULL;
    shard_map *old;
    int rc;

    if (fresh->version <= current_version(ctx)) { /* nothing new: the usual case */
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
    pthread_mutex_lock(&ctx->map_lock);
    if (ctx->map && fresh->version <= ctx->map->version) {
        pthread_mutex_unlock(&ctx->map_lock);
        shard_map_free(fresh);
        shard_wipe_free(password);
        return 0;
    }
    old = ctx->map;
    ctx->map = fresh;
    /* Connections being opened hold copies (ctx_password_copy). */
    {
        char *oldpw = ctx->password;
        ctx->password = password;
        password = oldpw;
    }
    pthread_mutex_unlock(&ctx->map_lock);
    if (old)
        ctx_log(ctx, SHARD_LOG_INFO, "shard map version %llu replaces version %llu",
                (unsigned long long)fresh->version, (unsigned long long)old->version);
    shard_map_free(old);
    shard_wipe_free(password);
    return 0;
}

int shard_ctx_reload(shard_ctx *ctx)
{
    shard_map *fresh = NULL;
    int rc;

    if (!ctx)
        return shard_fail(SHARD_EINVAL, "shard_ctx_reload: NULL context");
    if ((rc = shard_store_load(ctx->store, &fresh))) {
        ctx_log(ctx, SHARD_LOG_WARN, "map reload failed, keeping version %llu: %s",
                (unsigned long long)current_version(ctx), shard_errmsg());
        return rc;
    }
    return swap_map(ctx, fresh);
}

static void *refresh_main(void *arg)
{
    shard_ctx *ctx = arg;
    unsigned base = ctx->opts.refresh_interval_ms;

    pthread_mutex_lock(&ctx->stop_lock);
    while (!ctx->stopping) {
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
        return shard_fail(SHARD_EINVAL, "shard_options.version %u is not supported "
                          "(this library knows 1..%d)", o->version, SHARD_OPTIONS_VERSION);
    if (o->pool_size < 1)
        return shard_fail(SHARD_EINVAL, "shard_options.pool_size must be at least 1");
    if (o->retry_max < 1)
        return shard_fail(SHARD_EINVAL, "shard_options.retry_max must be at least 1");
    if (o->connect_timeout_ms < 1 || o->read_timeout_ms < 1 || o->write_timeout_ms < 1)
        return shard_fail(SHARD_EINVAL, "shard_options: timeouts must be at least 1 ms");
    if (o->version >= 2 && o->user && (!o->user[0] || strlen(o->user) > 80))
        return shard_fail(SHARD_EINVAL, "shard_options.user must be 1..80 characters");
    return 0;
}

int shard_ctx_open(shard_ctx **out, const char *location, const shard_options *opts)
{
    static const shard_options defaults = SHARD_OPTIONS_INIT;
    shard_ctx *ctx;
    shard_map *map = NULL;
    int rc;

    if (!out || !location)
        return shard_fail(SHARD_EINVAL, "shard_ctx_open: NULL argument");
    if (!opts)
        opts = &defaults;
    if ((rc = check_options(opts)) || (rc = shard_global_init()))
        return rc;
    ctx = shard_calloc(1, sizeof *ctx);
    if (!ctx)
        return shard_fail(SHARD_ENOMEM, "out of memory opening a context");
    /* Only the fields of the caller's version: an older caller's struct is
     * shorter, and the newer fields keep their defaults. */
    ctx->opts = defaults;
    memcpy(&ctx->opts, opts, opts->version >= 2 ? sizeof *opts
                                                : offsetof(shard_options, user));
    ctx->opts.user = ctx->opts.password_env = NULL; /* the copies below are used */
    pthread_mutex_init(&ctx->map_lock, NULL);
    if (opts->version >= 2 &&
        ((opts->user && !(ctx->user = shard_strdup(opts->user))) ||
         (opts->password_env && !(ctx->password_env = shard_strdup(opts->password_env))))) {
        shard_ctx_free(ctx);
        return shard_fail(SHARD_ENOMEM, "out of memory opening a context");
    }
    pthread_mutex_init(&ctx->servers_lock, NULL);
    pthread_mutex_init(&ctx->stop_lock, NULL);
    pthread_cond_init(&ctx->stop_cond, NULL);
    if ((rc = shard_store_open(&ctx->store, location)) ||
        (rc = shard_store_load(ctx->store, &map)) || (rc = swap_map(ctx, map))) {
        shard_ctx_free(ctx);
        return rc;
    }
    if (opts->refresh_interval_ms) {
        if (pthread_create(&ctx->refresher, NULL, refresh_main, ctx) != 0) {
            shard_ctx_free(ctx);
            return shard_fail(SHARD_EIO, "cannot start the map refresh thread");
        }
        ctx->refreshing = true;
    }
    *out = ctx;
    return 0;
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
    for (s = ctx->servers; s; s = next) {
        next = s->next;
        server_close_all(s);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
    }
    shard_map_free(ctx->map);
    shard_store_free(ctx->store);
    shard_wipe_free(ctx->password);
    free(ctx->user);
    free(ctx->password_env);
    pthread_mutex_destroy(&ctx->map_lock);
    pthread_mutex_destroy(&ctx->servers_lock);
    pthread_mutex_destroy(&ctx->stop_lock);
    pthread_cond_destroy(&ctx->stop_cond);
    free(ctx);
}

bool error_transient(int code)
{
    return code == SHARD_ECONNECT || code == SHARD_EBUSY || code == SHARD_EMOVED;
}

/* Whether the connection may go back to the pool after fn failed with code. */
static bool conn_reusable(int code)
{
    return code != SHARD_ECONNECT && code != SHARD_ETIMEOUT && code != SHARD_ETLS &&
           code != SHARD_ENOMEM && code != SHARD_EINTERNAL;
}

static void backoff(unsigned attempt, double deadline)
{
    /* 10, 20, 40 ... ms, at most 250: a move's fence lasts well under a
     * second, and the retry budget, not the count, is what bounds a call. */
    double ms = 10.0 * (double)(1u << (attempt < 5 ? attempt : 5));
    double left = (deadline - now_seconds()) * 1000.0;
    struct timespec ts;

    if (ms > 250)
        ms = 250;
    ms = ms / 2 + (double)(rnd() % 1000) / 1000.0 * ms / 2; /* jitter */
    if (ms > left)
        ms = left > 0 ? left : 0;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)((ms - (double)ts.tv_sec * 1000) * 1e6);
    nanosleep(&ts, NULL);
}

/* Reload unless another thread did within 100 ms (force: always). Keeps
 * the caller's error message. Returns whether this call reloaded. */
bool ctx_reload_soon(shard_ctx *ctx, bool force)
{
    char saved[1024];
    double t = now_seconds();

    pthread_mutex_lock(&ctx->stop_lock);
    /* At most every 100 ms per context (force: always), so failing calls
     * cannot turn into a stream of map-store reads. */
    if (!force && t - ctx->last_error_reload < 0.1) {
        pthread_mutex_unlock(&ctx->stop_lock);
        return false;
    }
    ctx->last_error_reload = t;
    pthread_mutex_unlock(&ctx->stop_lock);
    snprintf(saved, sizeof saved, "%s", shard_errmsg()); /* keep the real error */
    shard_ctx_reload(ctx);
    shard_fail(0, "%s", saved);
    return true;
}

/* The pair now serving a shard differs from old_pair? (message set) */
static bool route_changed(shard_ctx *ctx, unsigned shard, bool mod, const char *old_pair)
{
    shard_map *map = ctx_map(ctx);
    long pi = mod ? shard_map_mod_pair_index(map, shard) : shard_map_pair_index(map, shard);
    bool changed = pi >= 0 && strcmp(map->pairs[pi].name, old_pair) != 0;

    if (changed)
        shard_fail(SHARD_EMOVED, "shard %u moved from %s to %s", shard, old_pair,
                   map->pairs[pi].name);
    shard_map_free(map);
    return changed;
}

/*
 * A table or database that is not there: moved (a fence on the source, or a
 * map that now routes the shard elsewhere) or genuinely missing? Moved is
 * SHARD_EMOVED, retried after a map reload; missing stays an error.
 */
int ctx_check_moved(shard_ctx *ctx, shard_conn *c, const char *db, unsigned shard,
                    bool mod, const char *old_pair, int rc)
{
    char sql[300];
    MYSQL_RES *res;
    MYSQL_ROW row;
    bool fenced = false;
    bool reloaded;

    if (rc != SHARD_ESERVER || (c->last_errno != ER_NO_SUCH_TABLE &&
                                c->last_errno != ER_BAD_DB_ERROR))
        return rc;
    reloaded = ctx_reload_soon(ctx, false);
    if (route_changed(ctx, shard, mod, old_pair))
        return SHARD_EMOVED;
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.TABLES WHERE"
             " TABLE_SCHEMA = '%s' AND TABLE_NAME LIKE '\\_moved\\_%%'", db);
    if (mysql_real_query(c->my, sql, (unsigned long)strlen(sql)) == 0 &&
        (res = mysql_store_result(c->my))) {
        row = mysql_fetch_row(res);
        fenced = row && row[0] && strcmp(row[0], "0") != 0;
        mysql_free_result(res);
    }
    if (fenced)
        return shard_fail(SHARD_EMOVED, "shard %u on %s is fenced by a move in progress",
                          shard, old_pair);
    /* Not fenced: dropped after a move whose map this context has not read
     * yet (the rate limit skipped the reload), or really missing. Without a
     * fresh map we cannot tell: try again (a retry reloads, rate-limited),
     * so a missing table costs the retry budget, never a wrong answer. */
    if (!reloaded)
        return shard_fail(SHARD_EMOVED, "shard %u: %s is missing on %s; checking whether the "
                          "shard moved", shard, db, old_pair);
    return rc;
}

int ctx_exec(shard_ctx *ctx, unsigned shard, int flags, exec_fn fn, void *arg)
{
    double deadline = now_seconds() + ctx->opts.retry_budget_ms / 1000.0;
    unsigned attempt = 0;
    int rc;

    for (;;) {
        shard_map *map = ctx_map(ctx);
        long pi = (flags & EXEC_MOD) ? shard_map_mod_pair_index(map, shard)
                                     : shard_map_pair_index(map, shard);
        char db[SHARD_DBNAME_MAX];
        shard_server *srv;
        shard_conn *c = NULL;
        bool ambiguous = false, connect_failed = false;

        if (pi < 0) {
            rc = shard_fail(SHARD_ENOSHARD, "%sshard %u is not in any range of map "
                            "version %llu", (flags & EXEC_MOD) ? "mod " : "", shard,
                            (unsigned long long)map->version);
            shard_map_free(map);
            return rc;
        }
        shard_dbfmt_name((flags & EXEC_MOD) ? &map->mod_dbfmt : &map->dbfmt, shard, db);
        srv = ctx_server(ctx, map, (size_t)pi);
        if (!srv) {
            shard_map_free(map);
            return shard_fail(SHARD_ENOMEM, "out of memory");
        }
        rc = conn_get_ex(ctx, srv, &c, &connect_failed);
        /* A connect that timed out sent nothing, and the server may be gone
         * for good (a failover): retry it, after a map reload. A wait for a
         * busy pool is not retried. */
        if (rc == SHARD_ETIMEOUT && connect_failed)
            rc = SHARD_ECONNECT;
        if (rc == 0) {
            exec_env env = {c, map, db, shard, false, false};
            rc = fn(&env, arg);
            ambiguous = env.ambiguous;
            rc = ctx_check_moved(ctx, c, db, shard, flags & EXEC_MOD, map->pairs[pi].name, rc);
            conn_put(c, (rc == 0 || conn_reusable(rc)) && !env.discard);
        }
        if (rc == 0) {
            shard_map_free(map);
            return 0;
        }
        if (rc != SHARD_EINVAL && rc != SHARD_ENOTFOUND && rc != SHARD_EEXISTS)
            shard_fail_prefix(rc, "pair %s, %s: ", map->pairs[pi].name, db);
        shard_map_free(map);
        if (ambiguous && (rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT))
            return shard_fail_prefix(rc, "the write may or may not have been applied: ");
        if (!error_transient(rc))
            return rc;
        if (++attempt >= ctx->opts.retry_max || now_seconds() >= deadline)
            return shard_fail_prefix(rc, "gave up after %u attempts: ", attempt);
        ctx_log(ctx, SHARD_LOG_DEBUG, "retrying after: %s", shard_errmsg());
        /* Moved, or a server that does not answer: maybe the map changed
         * (a move, a failover). Reload, at most every 100 ms per context. */
        if (rc == SHARD_EMOVED || rc == SHARD_ECONNECT)
            ctx_reload_soon(ctx, false);
        backoff(attempt, deadline);
    }
}
