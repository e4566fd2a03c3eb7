/* The context, its connection pools and the routed-execution core. */
#ifndef LIBSHARD_CTX_H
#define LIBSHARD_CTX_H

#include "map.h"
#include "sql.h"

#include <mysql.h>
#include <pthread.h>

typedef struct shard_server shard_server;

/* Prepared statements kept per connection, least recently used replaced:
 * bounded, as a server allows only so many (max_prepared_stmt_count). */
#define CONN_STMTS 32

typedef struct conn_stmt {
    char key[160]; /* what the statement does, and its db.table */
    MYSQL_STMT *st;
    uint64_t used;
} conn_stmt;

typedef struct shard_conn {
    MYSQL *my;
    conn_stmt stmts[CONN_STMTS];
    uint64_t stmt_clock;
    shard_server *srv;
    struct shard_conn *next;    /* in the idle list */
    unsigned long max_packet;   /* the server's max_allowed_packet */
    double idle_since;          /* monotonic seconds */
    unsigned last_errno;        /* server/client error number of the last failure */
    unsigned read_timeout_ms;
    uint64_t affected;          /* rows the last conn_stmt_run changed */
    uint64_t insert_id;         /* and the AUTO_INCREMENT value it used */
} shard_conn;

/* One pool per server address, shared by every thread of the context. */
struct shard_server {
    shard_endpoint ep;
    char label[400]; /* "pair P master ADDR" for messages */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    shard_conn *idle;
    unsigned total; /* connections open, idle or in use */
    struct shard_server *next;
};

struct shard_ctx {
    shard_options opts;
    shard_store *store;
    pthread_mutex_t map_lock;
    shard_map *map;          /* current snapshot; swapped whole */
    char *password;          /* from the environment; NULL: none */
    pthread_mutex_t servers_lock;
    shard_server *servers;   /* grows, never shrinks, while the context lives */
    pthread_t refresher;
    bool refreshing;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    bool stopping;
    double last_error_reload; /* under stop_lock */
    char *user;               /* opts.user, copied; NULL: the map's */
    char *password_env;       /* opts.password_env, copied */
};

/* A copy of the current password (NULL: none): shard_wipe_free() it. */
int ctx_password_copy(shard_ctx *ctx, char **out);
/* The account connections use: the options' override, else the map's. */
const char *ctx_user(const shard_ctx *ctx, const shard_map *map);

/* ctx.c */
shard_map *ctx_map(shard_ctx *ctx);            /* a reference: shard_map_free it */
void ctx_log(shard_ctx *ctx, int level, const char *fmt, ...) SHARD_PRINTF(3, 4);
shard_server *ctx_server(shard_ctx *ctx, const shard_map *map, size_t pair);
/* The pool of any server, e.g. a standby (created on first use). */
shard_server *ctx_server_at(shard_ctx *ctx, const shard_endpoint *ep);
uint64_t ctx_random(void);

/* conn.c */
int conn_get(shard_ctx *ctx, shard_server *srv, shard_conn **out);
/* The same; *connect_failed (may be NULL) tells a failure to open a new
 * connection (nothing was sent) from a wait for a busy pool. */
int conn_get_ex(shard_ctx *ctx, shard_server *srv, shard_conn **out, bool *connect_failed);
/* Back to the pool; a connection that failed is closed instead. */
void conn_put(shard_conn *c, bool healthy);
void server_close_all(shard_server *srv);
/* Run one statement; on failure the message names the server and error. */
int conn_query(shard_conn *c, const sqlbuf *sql);
int conn_query_str(shard_conn *c, const char *sql);
/* Run a statement and store its whole result (*res: mysql_free_result). */
int conn_select(shard_conn *c, const sqlbuf *sql, MYSQL_RES **res);
/*
 * The single column of the single row a prepared statement `sql` (cached
 * under `key`) returns for the unsigned integer parameter `arg`, in a
 * caller-owned NUL-terminated *out (shard_free). SHARD_ENOTFOUND: no row.
 */
int conn_stmt_get(shard_conn *c, const char *key, const sqlbuf *sql, uint64_t arg,
                  char **out, size_t *len);
/* A parameter of a prepared statement: bytes (data non-NULL) or an unsigned integer. */
typedef struct conn_param {
    const void *data;
    size_t len;
    uint64_t u64;
} conn_param;
#define CONN_PARAMS_MAX 4
#define CONN_BYTES(p, n) ((conn_param){(p) ? (const void *)(p) : (const void *)"", (n), 0})
#define CONN_U64(v) ((conn_param){NULL, 0, (v)})
/*
 * Run the prepared statement `sql` (cached under `key`) with its parameters;
 * c->affected and c->insert_id tell what it did. Values go as binary
 * parameters, so the limit is the server's max_allowed_packet for the value
 * itself (SHARD_ETOOBIG beyond it, before anything is sent).
 */
int conn_stmt_run(shard_conn *c, const char *key, const sqlbuf *sql, const conn_param *params,
                  unsigned n);
/* Run a query; the first column of its first row into out ("" for NULL/none). */
int conn_value(shard_conn *c, const char *sql, char *out, size_t size);
/* Fail with SHARD_ETOOBIG when the statement exceeds the server's packet limit. */
int conn_fits(shard_conn *c, size_t len);

/*
 * Routed execution: run fn on a connection to the master of the pair
 * serving `shard` (a mod shard with EXEC_MOD), with `db` its database.
 * Transient failures are retried within the context's retry budget;
 * SHARD_EMOVED reloads the map and retries.
 */
#define EXEC_MOD 1 /* shard is a mod shard */

typedef struct exec_env {
    shard_conn *conn;
    const shard_map *map;
    const char *db;
    unsigned shard;
    /* fn sets this before sending a write whose loss in flight would leave
     * its outcome unknown (not idempotent, not inside an open transaction):
     * such a failure is reported, never retried. */
    bool ambiguous;
    /* fn sets this when the connection must not go back to the pool
     * whatever fn returns (e.g. a ROLLBACK that failed). */
    bool discard;
} exec_env;

typedef int (*exec_fn)(exec_env *env, void *arg);
int ctx_exec(shard_ctx *ctx, unsigned shard, int flags, exec_fn fn, void *arg);
/* Reload the map unless one was read within 100 ms (force: always); keeps the
 * thread's error message. Returns whether it reloaded. */
bool ctx_reload_soon(shard_ctx *ctx, bool force);
/* Turn "no such table/database" into SHARD_EMOVED when the shard moved or
 * is fenced; any other rc comes back unchanged. */
int ctx_check_moved(shard_ctx *ctx, shard_conn *c, const char *db, unsigned shard,
                    bool mod, const char *old_pair, int rc);
/* move.c: 1 (and its id) when an unfinished move has `pair` as source or target. */
int move_unfinished_on(shard_ctx *ctx, const shard_map *map, const char *pair,
                       uint64_t *id);
/* Whether an error may go away on retry, and how to treat the connection. */
bool error_transient(int code);

#endif
