/*
 * Routed execution: a call is run on the master of the pair serving its
 * shard, and the retry policy decides what happens when it fails: which
 * errors are retried, how long to back off, how a fenced shard is waited
 * out (libshard-move(7)), and when the map is read again.
 */
#ifndef LIBSHARD_EXEC_H
#define LIBSHARD_EXEC_H

#include "control.h"
#include "ctx.h"

#define EXEC_MOD 1   /* shard is a mod shard: never moved, no fence */
#define EXEC_WRITE 2 /* run fn in a transaction that first checks the fence under a
                      * shared lock, and commit it after fn */
#define EXEC_IDEMPOTENT 4 /* with EXEC_WRITE: running fn twice does no harm, so even
                           * a COMMIT lost in flight is retried */
#define EXEC_ONE 8 /* with EXEC_WRITE: fn writes in one autocommit statement that
                    * checks the fence itself (env->fence_inline, sql_fence_clear),
                    * or, under the lease (exec_fence_skip), leaves the check out and
                    * is bounded server-side instead (env->bound_ms, sql_write_bound);
                    * when that statement cannot tell what happened (it changed no
                    * row), fn returns EXEC_TXN and runs again inside the write
                    * transaction, as without EXEC_ONE */
#define EXEC_FENCE_FN 16 /* with EXEC_WRITE: the transaction's first statement, fn's own,
                         * locks the fence row itself (exec_fence_sql_lock), so the
                         * check costs no round trip of its own */
#define EXEC_TXN 1 /* fn's return under EXEC_ONE: run me in the write transaction */
#define EXEC_STALE 2 /* a read's return when it skipped the fence check and its answer
                      * came after the lease ended (exec_answer_late), and run's for a
                      * bounded write that the server aborted at its bound (nothing
                      * applied): it runs again, checking the fence */
/* The public call to count (a stats_op, shard_ctx_stats(3)) in the bits above
 * the flags: calls, errors and duration, timed from ctx_exec's own clock
 * read. Without it nothing is counted (a step of a call counted elsewhere). */
#define EXEC_OP(op) ((int)(op) << 8)

typedef struct exec_env {
    shard_conn *conn;
    const shard_map *map;
    const char *db;
    unsigned shard;
    const char *pair; /* the pair's name, for messages */
    /* fn sets this before sending a write whose loss in flight would leave
     * its outcome unknown (not idempotent, not inside an open transaction):
     * such a failure is reported, never retried. */
    bool ambiguous;
    /* fn sets this to keep the connection (and its open transaction) past
     * a successful return: it then owns env->conn (shard_txn_begin). */
    bool keep;
    /* Under EXEC_ONE, outside a transaction: fn's statement must itself
     * write nothing on a fenced shard (sql_fence_clear). False inside the
     * write transaction, whose fence check ran already, and under the
     * lease (bound_ms instead). */
    bool fence_inline;
    /* A read (no EXEC_WRITE, no EXEC_MOD) or an EXEC_ONE write may leave
     * the fence out of its statement: exec_fence_skip said so (the
     * context's lease holds and the shard is not marked moving). A read's
     * answer counts only if it came before lease_until: else fn frees what
     * it read and returns EXEC_STALE. A write is bounded (bound_ms). */
    bool fence_skip;
    double lease_until;
    /* Under EXEC_ONE with fence_skip: the write leaves the fence out and is
     * sent bounded instead, "SET STATEMENT max_statement_time=B FOR ..."
     * (sql_write_bound), B = bound_ms, the map's lease_ms: the server
     * aborts it (error 1969, nothing applied) before a move's fence can go
     * up, and it runs again checking the fence. 0: not bounded. */
    unsigned bound_ms;
    /* An earlier attempt of this call lost its connection after it had one:
     * what it sent may have been applied (an idempotent write's retry may
     * find its own work done). */
    bool after_loss;
    /* Set by exec_fenced: the shard's fence row said fenced. */
    bool fenced;
} exec_env;

typedef int (*exec_fn)(exec_env *env, void *arg);

/*
 * Run fn on a connection to the master of the pair serving `shard`, with
 * env->db its database. Transient failures are retried within the
 * context's retry budget; a fenced or moved shard waits for the new map
 * (exec_wait_map) and runs again where it routes. Retries and fence waits
 * are counted in ctx->stats, and the call itself with EXEC_OP in flags.
 */
int ctx_exec(shard_ctx *ctx, unsigned shard, int flags, exec_fn fn, void *arg);

/*
 * The one rule for "check the fence on this shard now?" (libshard-move(7),
 * "The lease"): a read, or a write of one autocommit statement (EXEC_ONE,
 * then bounded: sql_write_bound), may skip the check only while the
 * context holds a lease on `map` (a store read that started less than
 * lease_ms ago found it current) and the map does not mark the shard
 * moving. *until gets the lease's end (monotonic seconds) when it returns
 * true.
 */
bool exec_fence_skip(shard_ctx *ctx, const shard_map *map, unsigned shard, double *until);
/* After a read that skipped the check: whether its answer came too late to
 * count (at or after the lease's end). */
bool exec_answer_late(const exec_env *env);

/* SHARD_EMOVED for a statement that found the shard fenced (env->fenced:
 * the wait that follows polls the fence row, not the store). */
int exec_fenced(exec_env *env);
/* A read's fence column: " (SELECT fenced FROM libshard_control.fence WHERE db = 'DB')". */
void sql_fence_value(sqlbuf *q, const char *db);
/* A condition true while DB is not fenced: "NOT EXISTS (SELECT 1 FROM
 * libshard_control.fence WHERE db = 'DB' AND fenced <> 0)". In a write
 * (INSERT ... SELECT ... WHERE, UPDATE or DELETE ... WHERE) it reads the
 * fence row with a shared lock, or a gap lock where the row is missing,
 * kept until the write commits: a move's fence UPDATE or INSERT waits for
 * the write, and nothing commits on the shard after the fence
 * (libshard-move(7), "The fence"). */
void sql_fence_clear(sqlbuf *q, const char *db);
/* A read's fence column: sql_fence_value, or 0 when env skips the check. */
void sql_fence_column(sqlbuf *q, const exec_env *env);
/* The start of a write that skipped the fence check: "SET STATEMENT
 * max_statement_time=S FOR " with S = bound_ms in seconds (to the
 * millisecond: the server counts microseconds, and a value that rounded to
 * 0 would mean no limit); nothing when bound_ms is 0. */
void sql_write_bound(sqlbuf *q, unsigned bound_ms);
/* The fence check as a column of a write transaction's first statement:
 * "(SELECT fenced FROM libshard_control.fence WHERE db = 'DB' LOCK IN SHARE
 * MODE)", the same shared lock (or gap lock) as exec_fence_lock takes. */
void sql_fence_lock_column(sqlbuf *q, const char *db);
/* The write's fence check, inside its open transaction, under a shared lock
 * (a move's fence UPDATE waits for it): SHARD_EMOVED when fenced. */
int exec_fence_lock(exec_env *env);

/* Whether an error may go away on retry. */
bool error_transient(int code);
/* How long to wait before attempt number `attempt` (1, 2, ...) of a
 * transient failure, jittered; at most what is left until `deadline`. */
double exec_backoff_ms(unsigned attempt, double deadline);
void exec_backoff(unsigned attempt, double deadline);

/*
 * The library's retry policy for work that ctx_exec does not route (a
 * schema statement on a given server, a multi-get's statement per pair):
 * try(arg, deadline) runs until it returns 0, a failure that is not
 * transient, or the context's retry_max attempts or retry_budget_ms are
 * spent (deadline: when they are). Between attempts, `between` (may be
 * NULL) sees the failure first and may end the retries (false), and the
 * backoff follows. Returns the last attempt's code, its message on this
 * thread.
 */
typedef int (*exec_try_fn)(void *arg, double deadline);
typedef bool (*exec_between_fn)(void *arg, int rc, double deadline);
int exec_retry(shard_ctx *ctx, exec_try_fn try, exec_between_fn between, void *arg);

/*
 * Read the map store again for a call that failed: one read in flight per
 * context (other threads wait for its result), and none sooner than
 * min_ms after the previous one started (wait: sleep until then and read;
 * else return). Keeps the thread's error message. The read runs on the
 * context's reader thread; the caller waits for it until `deadline`
 * (monotonic seconds; 0: until it ends), so that a store that hangs holds
 * no call past its budget. Returns whether a read that started after this
 * call finished.
 */
bool exec_reload(shard_ctx *ctx, double min_ms, bool wait, double deadline);
/* Reload the map soon after an error (force: regardless of the interval):
 * the read starts, on the context's reader thread, and the caller does not
 * wait for it (a store that hangs holds nobody). */
bool ctx_reload_soon(shard_ctx *ctx, bool force);
/*
 * Wait for the map to change from `version` while a shard is fenced: polls
 * the store (exec_reload) at a short interval that grows with the time
 * already waited (`waited_ms`), never past `deadline`. Returns whether the
 * context's map is now newer than `version`.
 */
bool exec_wait_map(shard_ctx *ctx, uint64_t version, double waited_ms, double deadline);
/*
 * The same wait for a statement that found db fenced on srv (the master
 * that answered): the fence row there is polled, not the store, until it
 * lifts or says the new map is out (FENCE_FLIPPED, control.h), then the
 * store is read once; every 250 ms of waiting reads it all the same.
 * started: when the call began; *store_at: when its wait last read the
 * store (started before the first). Returns whether the map is now newer.
 */
bool exec_wait_fence(shard_ctx *ctx, shard_server *srv, const char *db, uint64_t version,
                     double started, double *store_at, double deadline);

/*
 * What a failed statement on (db, shard) means: a missing fence table is a
 * clear error naming `shardctl schema apply`; a missing shard table or
 * database after a move is SHARD_EMOVED (retried after a reload); any other
 * rc comes back unchanged. The store read that tells waits until deadline
 * (monotonic seconds) at most: unanswered by then, rc comes back.
 */
int ctx_check_moved(shard_ctx *ctx, shard_conn *c, const char *db, unsigned shard,
                    bool mod, const char *old_pair, int rc, double deadline);

#endif
