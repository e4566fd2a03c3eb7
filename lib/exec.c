/*
 * Routed execution and the retry policy: which pair serves a shard, what a
 * failure means (transient, moved, fenced, final), how long to back off,
 * and how a call waits for the map that a move or a failover publishes.
 */
#include "exec.h"

#include <mysqld_error.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Error reloads after a lost server, at most this often per context. */
#define RELOAD_MIN_MS 100.0
/* While a shard is fenced, the store is polled every FENCE_POLL_MIN_MS at
 * first, growing to an eighth of the time already waited (so a long fence
 * costs the store little), at most FENCE_POLL_MAX_MS. */
#define FENCE_POLL_MIN_MS 3.0
#define FENCE_POLL_MAX_MS 25.0
/* A fence that stays up this long without its row saying "flipped" (a
 * mover stopped between its publish and marking the rows) sends a fenced
 * context to the store all the same, at most once per this interval. */
#define FENCE_STORE_MS 250.0

bool error_transient(int code)
{
    return code == SHARD_ECONNECT || code == SHARD_EBUSY || code == SHARD_EMOVED;
}

double exec_backoff_ms(unsigned attempt, double deadline)
{
    /* 10, 20, 40 ... ms, at most 250: the retry budget, not the count, is
     * what bounds a call. Half of it jittered, so that threads that failed
     * together do not retry together. */
    double ms = 10.0 * (double)(1u << (attempt < 5 ? attempt : 5));
    double left = (deadline - now_seconds()) * 1000.0;

    if (ms > 250)
        ms = 250;
    ms = ms / 2 + (double)(ctx_random() % 1000) / 1000.0 * ms / 2;
    if (ms > left)
        ms = left > 0 ? left : 0;
    return ms;
}

void exec_backoff(unsigned attempt, double deadline)
{
    sleep_ms(exec_backoff_ms(attempt, deadline));
}

int exec_retry(shard_ctx *ctx, exec_try_fn try, exec_between_fn between, void *arg)
{
    double deadline = now_seconds() + ctx->opts.retry_budget_ms / 1000.0;
    int rc;

    for (unsigned attempt = 1;; attempt++) {
        rc = try(arg, deadline);
        if (rc == 0 || !error_transient(rc) || attempt >= ctx->opts.retry_max ||
            now_seconds() >= deadline || (between && !between(arg, rc, deadline)))
            return rc;
        stats_add(&ctx->stats.retries);
        exec_backoff(attempt, deadline);
    }
}

static void deadline_ts(struct timespec *ts, double at_monotonic)
{
    double ms = (at_monotonic - now_seconds()) * 1000.0;
    long long ns;

    clock_gettime(CLOCK_REALTIME, ts);
    if (ms < 0)
        ms = 0;
    ns = (long long)ts->tv_nsec + (long long)(ms * 1e6);
    ts->tv_sec += (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

/* Under reload_lock: a read of the store starts, on the reader thread (or
 * on this one, unlocked, if that thread cannot be started). */
static void reload_start(shard_ctx *ctx)
{
    stats_add(&ctx->stats.map_reloads_asked);
    ctx->reloading = true;
    ctx->reload_started = now_seconds();
    if (ctx_reader_ask(ctx))
        return;
    pthread_mutex_unlock(&ctx->reload_lock);
    {
        shard_errsave saved;
        shard__error_save(&saved, 0);
        shard_ctx_reload(ctx);
        shard__error_restore(&saved);
    }
    pthread_mutex_lock(&ctx->reload_lock);
    ctx_reload_done(ctx);
}

/* Under reload_lock: wait for reload_cond, until deadline (0: no end).
 * false once the deadline has passed. */
static bool reload_wait(shard_ctx *ctx, double deadline)
{
    struct timespec ts;

    if (!deadline) {
        pthread_cond_wait(&ctx->reload_cond, &ctx->reload_lock);
        return true;
    }
    if (now_seconds() >= deadline)
        return false;
    deadline_ts(&ts, deadline);
    pthread_cond_timedwait(&ctx->reload_cond, &ctx->reload_lock, &ts);
    return true;
}

bool exec_reload(shard_ctx *ctx, double min_ms, bool wait, double deadline)
{
    double asked = now_seconds();
    bool fresh = false;

    pthread_mutex_lock(&ctx->reload_lock);
    for (;;) {
        double since_ms;
        if (ctx->reloading) {
            /* One read in flight: its result is ours too if it started
             * after we asked; else another read follows it. */
            if (!reload_wait(ctx, deadline))
                break;
            continue;
        }
        if (ctx->reloads_done && ctx->reload_started >= asked) {
            fresh = true;
            break;
        }
        since_ms = (now_seconds() - ctx->reload_started) * 1000.0;
        if (ctx->reloads_done && since_ms < min_ms) {
            struct timespec ts;
            if (!wait || (deadline && now_seconds() >= deadline))
                break;
            deadline_ts(&ts, ctx->reload_started + min_ms / 1000.0);
            pthread_cond_timedwait(&ctx->reload_cond, &ctx->reload_lock, &ts);
            continue;
        }
        reload_start(ctx);
    }
    pthread_mutex_unlock(&ctx->reload_lock);
    return fresh;
}

bool ctx_reload_soon(shard_ctx *ctx, bool force)
{
    return exec_reload(ctx, force ? 0 : RELOAD_MIN_MS, false, now_seconds());
}

bool exec_wait_map(shard_ctx *ctx, uint64_t version, double waited_ms, double deadline)
{
    double ms = waited_ms / 8;

    if (ms < FENCE_POLL_MIN_MS)
        ms = FENCE_POLL_MIN_MS;
    if (ms > FENCE_POLL_MAX_MS)
        ms = FENCE_POLL_MAX_MS;
    /* +-25%: processes waiting on one fence do not poll in lockstep. */
    ms = ms * 0.75 + (double)(ctx_random() % 1000) / 1000.0 * ms / 2;
    if (ctx_map_version(ctx) > version)
        return true;
    if (now_seconds() + ms / 1000.0 > deadline) {
        /* No time for another poll: sleep out the budget, not spin in it. */
        sleep_ms((deadline - now_seconds()) * 1000.0);
        return false;
    }
    exec_reload(ctx, ms, true, deadline);
    return ctx_map_version(ctx) > version;
}

/* The fence row of db on srv's master: 0 open, FENCE_ON, FENCE_FLIPPED
 * (or another nonzero value); -1 when there is no row or no answer. */
static int fence_row(shard_server *srv, const char *db)
{
    shard_errsave saved;
    shard_conn *c = NULL;
    char v[8] = "";
    sqlbuf q;
    int rc;

    shard__error_save(&saved, 0);
    sql_init(&q);
    /* db comes from the map's validated database_format: [a-z0-9_] only. */
    sql_add(&q, "SELECT fenced FROM " FENCE_TABLE " WHERE db = '");
    sql_add(&q, db);
    sql_add(&q, "'");
    /* Only a connection at hand: a poll must not overrun the caller's
     * deadline by a connect or a wait for the pool (no answer: the store). */
    if ((rc = sql_check(&q)) == 0 && (rc = conn_acquire_idle(srv, &c)) == 0) {
        rc = conn_value(c, q.s, v, sizeof v);
        conn_release(c, rc);
    }
    sql_free(&q);
    shard__error_restore(&saved); /* the caller's error stays the fence's */
    return rc || !v[0] ? -1 : atoi(v);
}

/*
 * Wait out a fence that a statement on db (on srv) found: poll the fence
 * row there, not the store, until it lifts (run again) or says the map
 * that routes db elsewhere is out (FENCE_FLIPPED: one store read). So a
 * cut-over costs each fenced context one store read, however long it
 * holds; a row that is gone or a server that does not answer sends it to
 * the store as before, and so does every FENCE_STORE_MS of waiting.
 * *store_at: when this call last read the store (for the interval).
 */
bool exec_wait_fence(shard_ctx *ctx, shard_server *srv, const char *db, uint64_t version,
                     double started, double *store_at, double deadline)
{
    for (;;) {
        double ms = (now_seconds() - started) * 1000.0 / 8;
        int v;

        if (ctx_map_version(ctx) > version)
            return true;
        if (ms < FENCE_POLL_MIN_MS)
            ms = FENCE_POLL_MIN_MS;
        if (ms > FENCE_POLL_MAX_MS)
            ms = FENCE_POLL_MAX_MS;
        ms = ms * 0.75 + (double)(ctx_random() % 1000) / 1000.0 * ms / 2;
        if (now_seconds() + ms / 1000.0 > deadline) {
            sleep_ms((deadline - now_seconds()) * 1000.0);
            return false;
        }
        sleep_ms(ms);
        v = fence_row(srv, db);
        if ((v == 0 || v == FENCE_ON) &&
            (now_seconds() - *store_at) * 1000.0 < FENCE_STORE_MS) {
            if (v == 0)
                return false; /* lifted (an aborted cut-over): run again */
            continue;
        }
        /* Flipped, no row or no answer; or FENCE_STORE_MS without a store
         * read (also what ends the loop when what held the statement back
         * was not this row: a read-only master after a failover). */
        *store_at = now_seconds();
        exec_reload(ctx, FENCE_POLL_MIN_MS, true, deadline);
        return ctx_map_version(ctx) > version;
    }
}

/* The pair now serving a shard differs from old_pair? (message set) */
static bool route_changed(shard_ctx *ctx, unsigned shard, bool mod, const char *old_pair)
{
    shard_map *map = ctx_map(ctx);
    long pi = mod ? shard__map_mod_pair_index(map, shard) : shard__map_pair_index(map, shard);
    bool changed = pi >= 0 && strcmp(map->pairs[pi].name, old_pair) != 0;

    if (changed)
        shard__fail(SHARD_EMOVED, "shard %u moved from %s to %s", shard, old_pair,
                   map->pairs[pi].name);
    shard_map_free(map);
    return changed;
}

/* Asked only after a "no such table": is it the fence table that is missing? */
static bool fence_table_missing(shard_conn *c)
{
    static const char probe[] = "SELECT 1 FROM " FENCE_TABLE " LIMIT 0";
    MYSQL_RES *res;
    unsigned e;

    if (mysql_real_query(c->my, probe, sizeof probe - 1) == 0) {
        if ((res = mysql_store_result(c->my)))
            mysql_free_result(res);
        return false;
    }
    e = mysql_errno(c->my);
    return e == ER_NO_SUCH_TABLE || e == ER_BAD_DB_ERROR;
}

int ctx_check_moved(shard_ctx *ctx, shard_conn *c, const char *db, unsigned shard,
                    bool mod, const char *old_pair, int rc, double deadline)
{
    (void)db;
    if (rc != SHARD_ESERVER || (c->last_errno != ER_NO_SUCH_TABLE &&
                                c->last_errno != ER_BAD_DB_ERROR))
        return rc;
    if (!mod && fence_table_missing(c))
        return shard__fail(SHARD_ESERVER, "%s has no table " FENCE_TABLE ", which libshard "
                          "checks on every statement for a shard: run `shardctl schema "
                          "apply` (it creates the table on every server)", c->srv->label);
    /* Moved away and dropped, with a map this context has not read yet?
     * One fresh read of the store (shared with other threads) tells. */
    exec_reload(ctx, FENCE_POLL_MIN_MS, true, deadline);
    if (route_changed(ctx, shard, mod, old_pair))
        return SHARD_EMOVED;
    return rc;
}

/* ---- the fence ---------------------------------------------------------------- */

bool exec_fence_skip(shard_ctx *ctx, const shard_map *map, unsigned shard, double *until)
{
    double end;

    if (map_shard_moving(map, shard) || !(end = ctx_lease_until(ctx, map)) ||
        now_seconds() >= end)
        return false;
    *until = end;
    return true;
}

bool exec_answer_late(const exec_env *env)
{
    return env->fence_skip && now_seconds() >= env->lease_until;
}

int exec_fenced(exec_env *env)
{
    env->fenced = true;
    return shard__fail(SHARD_EMOVED, "shard %u on pair %s is fenced by a move in progress",
                      env->shard, env->pair);
}

void sql_fence_value(sqlbuf *q, const char *db)
{
    /* db comes from the map's validated database_format: [a-z0-9_] only. */
    sql_add(q, "(SELECT fenced FROM " FENCE_TABLE " WHERE db = '");
    sql_add(q, db);
    sql_add(q, "')");
}

void sql_fence_column(sqlbuf *q, const exec_env *env)
{
    if (env->fence_skip)
        sql_add(q, "0");
    else
        sql_fence_value(q, env->db);
}

void sql_write_bound(sqlbuf *q, unsigned bound_ms)
{
    if (bound_ms)
        sql_addf(q, "SET STATEMENT max_statement_time=%u.%03u FOR ", bound_ms / 1000,
                 bound_ms % 1000);
}

void sql_fence_lock_column(sqlbuf *q, const char *db)
{
    sql_add(q, "(SELECT fenced FROM " FENCE_TABLE " WHERE db = '");
    sql_add(q, db);
    sql_add(q, "' LOCK IN SHARE MODE)");
}

void sql_fence_clear(sqlbuf *q, const char *db)
{
    sql_add(q, "NOT EXISTS (SELECT 1 FROM " FENCE_TABLE " WHERE db = '");
    sql_add(q, db);
    sql_add(q, "' AND fenced <> 0)");
}

int exec_fence_lock(exec_env *env)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    bool fenced;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT fenced FROM " FENCE_TABLE " WHERE db = '");
    sql_add(&q, env->db);
    /* A shared lock, kept to the end of the transaction: the mover's fence
     * UPDATE waits for this write, and under REPEATABLE READ a missing row's
     * gap lock holds back the mover's INSERT of it. */
    sql_add(&q, "' LOCK IN SHARE MODE");
    rc = conn_select(env->conn, &q, &res);
    sql_free(&q);
    if (rc)
        return rc;
    row = mysql_fetch_row(res);
    fenced = row && row[0] && strcmp(row[0], "0") != 0;
    mysql_free_result(res);
    return fenced ? exec_fenced(env) : 0;
}

/* ---- running ------------------------------------------------------------------ */

/* fn inside a transaction that checked the fence first; committed after it. */
static int run_write(exec_env *env, exec_fn fn, void *arg, bool idempotent, bool fn_fences)
{
    int rc;

    if ((rc = conn_query_str(env->conn, "START TRANSACTION")))
        return rc;
    if ((fn_fences || (rc = exec_fence_lock(env)) == 0) && (rc = fn(env, arg)) == 0) {
        env->ambiguous = !idempotent; /* a lost COMMIT may have committed */
        if ((rc = conn_query_str(env->conn, "COMMIT")) == 0)
            env->ambiguous = false;
        return rc;
    }
    /* A failed ROLLBACK leaves the connection unusable (the server rolls
     * back when it closes), but the outcome stays fn's: a callback that
     * aborted must not be retried and run again. */
    if (conn_reusable(env->conn, rc) && conn_query_str(env->conn, "ROLLBACK") != 0)
        env->conn->broken = true;
    return rc;
}

/*
 * fn as flags say: alone (a read), in the write transaction, or (EXEC_ONE)
 * as one autocommit statement that checks the fence itself, falling back to
 * the transaction when fn asks. A statement sent on its own commits when
 * the server runs it: if its answer is lost, whether it was applied is
 * unknown unless it is idempotent.
 */
static int run(exec_env *env, int flags, exec_fn fn, void *arg)
{
    bool idempotent = flags & EXEC_IDEMPOTENT;
    int rc;

    if (!(flags & EXEC_WRITE))
        return fn(env, arg);
    if (flags & EXEC_ONE) {
        /* Under the lease the statement leaves the fence out, bounded by
         * the map's lease_ms on the server (the mover waits that out too). */
        env->bound_ms = env->fence_skip ? env->map->lease_ms : 0;
        env->fence_inline = !env->bound_ms;
        env->conn->executing = false;
        env->conn->last_errno = 0;
        env->conn->send_by = env->bound_ms ? env->lease_until : 0;
        env->conn->late = false;
        rc = fn(env, arg);
        env->conn->send_by = 0;
        /* Not sent, the lease having ended (after a prepare, say), or aborted
         * at its bound and rolled back: nothing applied either way. */
        if (rc && env->bound_ms &&
            (env->conn->late || env->conn->last_errno == ER_STATEMENT_TIMEOUT))
            return EXEC_STALE;
        if (rc != EXEC_TXN) {
            if (rc && !idempotent && env->conn->executing)
                env->ambiguous = true;
            return rc;
        }
        env->fence_inline = false;
    }
    /* The transaction checks the fence itself, lease or not. */
    env->fence_skip = false;
    env->bound_ms = 0;
    return run_write(env, fn, arg, idempotent, (flags & EXEC_FENCE_FN) != 0);
}

static int exec_run(shard_ctx *ctx, unsigned shard, int flags, exec_fn fn, void *arg,
                    double started)
{
    double deadline = started + ctx->opts.retry_budget_ms / 1000.0;
    unsigned attempt = 0, tries = 0; /* attempts counted against retry_max; all */
    bool waited = false, recheck = false, lost = false;
    double store_at = started; /* the last store read of a fence wait */
    int rc;

    for (;;) {
        shard_map *map = ctx_map(ctx);
        long pi = (flags & EXEC_MOD) ? shard__map_mod_pair_index(map, shard)
                                     : shard__map_pair_index(map, shard);
        char db[SHARD_DBNAME_MAX];
        uint64_t version = map->version;
        shard_server *srv;
        shard_conn *c = NULL;
        bool ambiguous = false, connect_failed = false, fenced = false;

        if (pi < 0) {
            rc = shard__fail(SHARD_ENOSHARD, "%sshard %u is not in any range of map "
                            "version %llu", (flags & EXEC_MOD) ? "mod " : "", shard,
                            (unsigned long long)map->version);
            shard_map_free(map);
            return rc;
        }
        shard__dbfmt_name((flags & EXEC_MOD) ? &map->mod_dbfmt : &map->dbfmt, shard, db);
        srv = ctx_server(ctx, map, (size_t)pi);
        if (!srv) {
            shard_map_free(map);
            return shard__fail(SHARD_ENOMEM, "out of memory");
        }
        rc = conn_acquire(srv, &c, &connect_failed);
        /* A connect that timed out sent nothing, and the server may be gone
         * for good (a failover): retry it, after a map reload. A wait for a
         * busy pool is not retried. */
        if (rc == SHARD_ETIMEOUT && connect_failed)
            rc = SHARD_ECONNECT;
        if (rc == 0) {
            exec_env env = {c, map, db, shard, map->pairs[pi].name, false, false, false,
                            false, 0, 0, lost, false};
            /* A read, or a write of one statement (bounded then) where the
             * map says "lease_writes", may skip the check; a write
             * transaction checks it. */
            bool may_skip = !(flags & EXEC_MOD) &&
                            (!(flags & EXEC_WRITE) || ((flags & EXEC_ONE) && map->lease_writes));
            env.fence_skip = may_skip && !recheck &&
                             exec_fence_skip(ctx, map, shard, &env.lease_until);
            rc = run(&env, flags, fn, arg);
            if (rc == EXEC_STALE) {
                /* Answered after the lease, or a bounded write aborted at
                 * its bound: that answer never counts, nothing was written. */
                conn_release(c, 0);
                shard_map_free(map);
                recheck = true;
                continue;
            }
            ambiguous = env.ambiguous;
            fenced = env.fenced && rc == SHARD_EMOVED;
            /* Lost in flight: the statement may have been applied, which a
             * retry of an idempotent write must allow for. */
            lost = lost || rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT;
            rc = ctx_check_moved(ctx, c, db, shard, flags & EXEC_MOD, map->pairs[pi].name, rc,
                                 deadline);
            if (!(rc == 0 && env.keep))
                conn_release(c, rc);
        }
        if (rc == 0) {
            shard_map_free(map);
            return 0;
        }
        if (rc != SHARD_EINVAL && rc != SHARD_ENOTFOUND && rc != SHARD_EEXISTS &&
            rc != SHARD_ENOSHARD)
            shard__fail_prefix(rc, "pair %s, %s: ", map->pairs[pi].name, db);
        shard_map_free(map);
        if (ambiguous && (rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT))
            return shard__fail_prefix(rc, "the write may or may not have been applied: ");
        if (!error_transient(rc))
            return rc;
        tries++;
        if (now_seconds() >= deadline ||
            (rc != SHARD_EMOVED && ++attempt >= ctx->opts.retry_max))
            return shard__fail_prefix(rc, "gave up after %u attempts (%.0f ms): ", tries,
                                     (now_seconds() - started) * 1000.0);
        ctx_log(ctx, SHARD_LOG_DEBUG, "retrying after: %s", shard_errmsg());
        stats_add(&ctx->stats.retries);
        if (rc == SHARD_EMOVED) {
            /* Fenced, or moved (a missing table, a read-only master): wait
             * for the map that routes the shard anew, polling the store at a
             * short interval, and run again as soon as it is there (or after
             * one poll: a move that was aborted lifts its fence without a new
             * map). A route that is already newer retries at once. */
            if (!waited) {
                waited = true;
                stats_add(&ctx->stats.fence_waits);
            }
            if (fenced)
                exec_wait_fence(ctx, srv, db, version, started, &store_at, deadline);
            else
                exec_wait_map(ctx, version, (now_seconds() - started) * 1000.0, deadline);
            continue;
        }
        /* A server that does not answer: maybe a failover replaced it. */
        if (rc == SHARD_ECONNECT)
            exec_reload(ctx, RELOAD_MIN_MS, false, deadline);
        exec_backoff(attempt, deadline);
    }
}

int ctx_exec(shard_ctx *ctx, unsigned shard, int flags, exec_fn fn, void *arg)
{
    double started = now_seconds();
    int rc = exec_run(ctx, shard, flags, fn, arg, started);

    stats_call(&ctx->stats, (stats_op)(flags >> 8), started, rc);
    return rc;
}
