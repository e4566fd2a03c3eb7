/*
 * Connections: one bounded pool per server address. A pool knows nothing of
 * the context: what it needs to log in (account, password, TLS, timeouts)
 * comes from a conn_config that the context fills in and refreshes when a
 * new map names other credentials.
 */
#ifndef LIBSHARD_CONN_H
#define LIBSHARD_CONN_H

#include "map.h"
#include "sql.h"

#include <mysql.h>
#include <pthread.h>

/*
 * How connections are opened. The timeouts and the pool size are fixed for
 * the config's life; the account, password and TLS files change with the
 * map and are read (copied) under `lock` when a connection opens.
 */
typedef struct conn_config {
    unsigned connect_timeout_ms, read_timeout_ms, write_timeout_ms;
    unsigned pool_size;
    pthread_mutex_t lock;
    char *user;     /* NULL: none (the server's default) */
    char *password; /* NULL: none; wiped when replaced */
    bool tls, tls_verify;
    char *tls_ca, *tls_cert, *tls_key; /* NULL when not set */
} conn_config;

void conn_config_init(conn_config *cf, unsigned connect_ms, unsigned read_ms,
                      unsigned write_ms, unsigned pool_size);
/* Replace the credentials (copies; password may be NULL). SHARD_ENOMEM
 * leaves the old ones in place. */
int conn_config_set(conn_config *cf, const char *user, const char *password,
                    const shard_tlsdef *tls);
/* A copy of the current password (NULL: none): shard__wipe_free() it. */
int conn_config_password(conn_config *cf, char **out);
void conn_config_free(conn_config *cf);

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
    uintptr_t owner;            /* the thread that released it last (conn.c) */
    unsigned long max_packet;   /* the server's max_allowed_packet */
    double idle_since;          /* monotonic seconds */
    double sent_at;             /* when conn_send sent the statement in flight */
    unsigned last_errno;        /* server/client error number of the last failure */
    unsigned read_timeout_ms;
    uint64_t affected;          /* rows the last conn_stmt_run changed */
    uint64_t insert_id;         /* and the AUTO_INCREMENT value it used */
    bool broken;                /* must not serve again (e.g. a ROLLBACK failed) */
    bool executing;             /* conn_stmt_run sent its statement and has no answer
                                 * yet (true after a failure in flight) */
    /* 0, or when the lease of a write that skipped the fence check ends
     * (monotonic seconds): the next statement (conn_query, conn_stmt_run)
     * goes out only before then, checked after any prepare, and otherwise
     * is not sent at all (SHARD_EBUSY, late set). Cleared once one is sent. */
    double send_by;
    bool late;
} shard_conn;

/* One pool per server address, shared by every thread of the context. */
struct shard_server {
    shard_endpoint ep;
    char label[400]; /* "server ADDR" for messages */
    conn_config *conf; /* the context's; outlives the pool */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    shard_conn *idle;
    unsigned total; /* connections open, idle or in use */
    uint64_t waits; /* callers that waited for a busy pool (shard_ctx_stats(3)) */
    struct shard_server *next;
};

/*
 * A connection of srv's pool, opened if the pool has room, else waited for
 * (up to connect + read timeout). *connect_failed (may be NULL) tells a
 * failure to open a new connection (nothing was sent) from a wait for a
 * busy pool.
 */
int conn_acquire(shard_server *srv, shard_conn **out, bool *connect_failed);
/* An idle connection of srv's pool that was in use moments ago (no ping,
 * no connect, no wait), else SHARD_EBUSY: for a poll that must not overrun
 * its caller's deadline by a timeout. */
int conn_acquire_idle(shard_server *srv, shard_conn **out);
/* Back to the pool; a connection that failed (healthy false) is closed instead. */
void conn_put(shard_conn *c, bool healthy);
/*
 * The one policy for a connection after a call on it returned `code`: may
 * it serve another statement? Errors the server answered (SQL errors,
 * privileges, lock waits, not found...) leave it usable; a lost or timed-out
 * connection, a TLS failure, a statement over the packet limit (the server
 * closes the connection), a failed allocation mid-result or an internal
 * error do not, nor does anything on a connection marked broken.
 */
bool conn_reusable(const shard_conn *c, int code);
/* conn_put(c, conn_reusable(c, code)); NULL is fine. */
void conn_release(shard_conn *c, int code);
void server_close_all(shard_server *srv);

/* Run one statement; on failure the message names the server and error. */
int conn_query(shard_conn *c, const sqlbuf *sql);
int conn_query_str(shard_conn *c, const char *sql);
/* One statement in two halves, so that several servers work on theirs at
 * once: conn_send sends it, conn_read waits for its outcome (then read the
 * result as after conn_query). */
int conn_send(shard_conn *c, const sqlbuf *sql);
int conn_read(shard_conn *c);
/*
 * Of n connections (at most CONN_WAIT_MAX), each with a statement sent by
 * conn_send, which has its answer arriving first: *ready. It is the first
 * (0) when poll() cannot tell (TLS, where part of an answer can wait in
 * the TLS library's buffer). SHARD_ETIMEOUT, *ready the one: a statement
 * got no answer within its read timeout (counted from its conn_send).
 */
#define CONN_WAIT_MAX 256
int conn_wait_any(shard_conn *const *cs, size_t n, size_t *ready);
/* conn_read, then the whole result stored (*res: mysql_free_result). */
int conn_read_result(shard_conn *c, MYSQL_RES **res);
/* Run a statement and store its whole result (*res: mysql_free_result). */
int conn_select(shard_conn *c, const sqlbuf *sql, MYSQL_RES **res);
/* Writes a statement's text into q (called only when it must be prepared). */
typedef void (*conn_sql_fn)(sqlbuf *q, const void *arg);
/*
 * A prepared statement (cached under `key`; its text from build(q, barg)
 * when it is not cached yet) with one unsigned integer
 * parameter `arg`, returning one row of two columns: the shard's fence
 * (NULL: no row, not fenced) into *fenced, and a value into a caller-owned
 * NUL-terminated *out (shard_free). SHARD_ENOTFOUND: the value is NULL
 * (*fenced is still set).
 */
int conn_stmt_get(shard_conn *c, const char *key, conn_sql_fn build, const void *barg,
                  uint64_t arg, bool *fenced, char **out, size_t *len);

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

#endif
