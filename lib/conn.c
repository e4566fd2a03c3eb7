/*
 * Connections: one bounded pool per server, shared by every thread; one
 * connection serves every shard database on its server (qualified names).
 */
#include "conn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <errmsg.h>
#include <mysqld_error.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A pooled connection idle longer than this is pinged before use, so that a
 * restarted server is noticed before a statement is sent, not after. */
#define IDLE_PING_SECONDS 1.0

/* A pooled connection released less than this ago is reused without the
 * poll for a close: its last statement's answer came moments ago, and a
 * thread that calls in a loop takes its connection back within
 * microseconds. The poll is a system call (here 1.2 of the ~25 us of
 * client CPU a create costs; a raw INSERT with it added ran 3-8% slower),
 * and it narrows a race it cannot close (the server may close the socket
 * just after it): a close in the last millisecond fails the statement,
 * retried as a read or answered "may or may not have been applied" as a
 * write, as a close during the statement is. HikariCP skips its check for
 * 500 ms. */
#define IDLE_FRESH_SECONDS 0.001

/* Map a server or client error number to a libshard code. */
static int code_of(unsigned e)
{
    switch (e) {
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_SERVER_LOST_EXTENDED:
    case CR_UNKNOWN_HOST:
    case ER_SERVER_SHUTDOWN:
    case ER_CONNECTION_KILLED:
    case ER_CON_COUNT_ERROR:
    case ER_TOO_MANY_USER_CONNECTIONS:
        return SHARD_ECONNECT;
    case ER_OPTION_PREVENTS_STATEMENT:
        /* Read-only: a master fenced by a failover. The write was refused,
         * so it is safe to retry where the reloaded map points. */
        return SHARD_EMOVED;
    case ER_LOCK_WAIT_TIMEOUT:
    case ER_LOCK_DEADLOCK:
        return SHARD_EBUSY;
    case ER_DUP_ENTRY:
        return SHARD_EEXISTS;
    case ER_DBACCESS_DENIED_ERROR:
    case ER_ACCESS_DENIED_ERROR:
    case ER_TABLEACCESS_DENIED_ERROR:
    case ER_COLUMNACCESS_DENIED_ERROR:
    case ER_SPECIFIC_ACCESS_DENIED_ERROR:
    case ER_PROCACCESS_DENIED_ERROR:
        return SHARD_EPRIV;
    case CR_SSL_CONNECTION_ERROR:
        return SHARD_ETLS;
    case ER_NET_PACKET_TOO_LARGE:
        return SHARD_ETOOBIG;
    default:
        return SHARD_ESERVER;
    }
}

/* Fail with the connection's error; a slow loss is a timeout. */
static int conn_fail(MYSQL *my, const char *label, double started, unsigned timeout_ms,
                     unsigned *errno_out)
{
    unsigned e = mysql_errno(my);
    int code = code_of(e);
    double took = now_seconds() - started;

    if (errno_out)
        *errno_out = e;
    if (code == SHARD_ECONNECT && timeout_ms && took * 1000.0 >= timeout_ms * 0.9) {
        return shard__fail(SHARD_ETIMEOUT, "%s: no answer within %u ms (error %u: %s)",
                          label, timeout_ms, e, mysql_error(my));
    }
    return shard__fail(code, "%s: error %u (%s): %s", label, e, mysql_sqlstate(my),
                      mysql_error(my));
}

static unsigned to_seconds(unsigned ms)
{
    return ms ? (ms + 999) / 1000 : 0;
}

/* A file the map names must be readable: say so rather than let the TLS
 * library fall back to other CAs and fail vaguely. */
static int tls_file(const char *what, const char *path)
{
    if (path && access(path, R_OK) != 0)
        return shard__fail(SHARD_ETLS, "credentials.tls.%s %s cannot be read: %s", what, path,
                          strerror(errno));
    return 0;
}

/* The TLS options of a config, set while its lock is held. */
static int set_tls(MYSQL *my, const conn_config *cf, const char *label)
{
    my_bool yes = 1, verify = cf->tls_verify;
    int rc;

    if (!cf->tls)
        return 0;
    if ((rc = tls_file("ca", cf->tls_ca)) || (rc = tls_file("cert", cf->tls_cert)) ||
        (rc = tls_file("key", cf->tls_key)))
        return shard__fail_prefix(rc, "%s: ", label);
    /* verify: false means no verification at all: the CA is not given, as
     * the client library checks the chain whenever it has one. The client
     * library copies the option strings. */
    if ((cf->tls_key && mysql_optionsv(my, MYSQL_OPT_SSL_KEY, cf->tls_key)) ||
        (cf->tls_cert && mysql_optionsv(my, MYSQL_OPT_SSL_CERT, cf->tls_cert)) ||
        (cf->tls_ca && cf->tls_verify && mysql_optionsv(my, MYSQL_OPT_SSL_CA, cf->tls_ca)) ||
        mysql_optionsv(my, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify) ||
        mysql_optionsv(my, MYSQL_OPT_SSL_ENFORCE, &yes))
        return shard__fail(SHARD_ETLS, "%s: cannot set TLS options", label);
    return 0;
}

static int read_max_packet(shard_conn *c)
{
    MYSQL_RES *res;
    MYSQL_ROW row;

    if (mysql_real_query(c->my, "SELECT @@max_allowed_packet", 27) ||
        !(res = mysql_store_result(c->my)))
        return conn_fail(c->my, c->srv->label, now_seconds(), 0, &c->last_errno);
    row = mysql_fetch_row(res);
    c->max_packet = row && row[0] ? strtoul(row[0], NULL, 10) : 1048576;
    mysql_free_result(res);
    return 0;
}

/* ---- configuration ------------------------------------------------------- */

void conn_config_init(conn_config *cf, unsigned connect_ms, unsigned read_ms,
                      unsigned write_ms, unsigned pool_size)
{
    memset(cf, 0, sizeof *cf);
    cf->connect_timeout_ms = connect_ms;
    cf->read_timeout_ms = read_ms;
    cf->write_timeout_ms = write_ms;
    cf->pool_size = pool_size;
    pthread_mutex_init(&cf->lock, NULL);
}

/* Never fails for NULL; leaves *out NULL when it fails. */
static bool dup_or_null(const char *s, char **out)
{
    *out = s ? shard__strdup(s) : NULL;
    return !s || *out;
}

int conn_config_set(conn_config *cf, const char *user, const char *password,
                    const shard_tlsdef *tls)
{
    char *u = NULL, *pw = NULL, *ca = NULL, *cert = NULL, *key = NULL;

    if (!dup_or_null(user, &u) || !dup_or_null(password, &pw) ||
        !dup_or_null(tls->ca, &ca) || !dup_or_null(tls->cert, &cert) ||
        !dup_or_null(tls->key, &key)) {
        free(u);
        shard__wipe_free(pw);
        free(ca);
        free(cert);
        free(key);
        return shard__fail(SHARD_ENOMEM, "out of memory for connection settings");
    }
    pthread_mutex_lock(&cf->lock);
    /* Swap: the old values are freed below, outside the lock. */
    { char *t = cf->user; cf->user = u; u = t; }
    { char *t = cf->password; cf->password = pw; pw = t; }
    { char *t = cf->tls_ca; cf->tls_ca = ca; ca = t; }
    { char *t = cf->tls_cert; cf->tls_cert = cert; cert = t; }
    { char *t = cf->tls_key; cf->tls_key = key; key = t; }
    cf->tls = tls->enabled;
    cf->tls_verify = tls->verify;
    pthread_mutex_unlock(&cf->lock);
    free(u);
    shard__wipe_free(pw);
    free(ca);
    free(cert);
    free(key);
    return 0;
}

int conn_config_password(conn_config *cf, char **out)
{
    int rc = 0;

    *out = NULL;
    pthread_mutex_lock(&cf->lock);
    if (cf->password && !(*out = shard__strdup(cf->password)))
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
    pthread_mutex_unlock(&cf->lock);
    return rc;
}

void conn_config_free(conn_config *cf)
{
    free(cf->user);
    shard__wipe_free(cf->password);
    free(cf->tls_ca);
    free(cf->tls_cert);
    free(cf->tls_key);
    pthread_mutex_destroy(&cf->lock);
    memset(cf, 0, sizeof *cf);
}

/* ---- opening ----------------------------------------------------------------- */

/* The account, password and TLS options, copied (or set on my) under the
 * config's lock: a reload may replace them at any time. */
static int take_credentials(conn_config *cf, MYSQL *my, const char *label, char **user,
                            char **pw)
{
    int rc = 0;

    pthread_mutex_lock(&cf->lock);
    if (!dup_or_null(cf->user, user) || !dup_or_null(cf->password, pw))
        rc = shard__fail(SHARD_ENOMEM, "%s: out of memory for a connection", label);
    else
        rc = set_tls(my, cf, label);
    pthread_mutex_unlock(&cf->lock);
    return rc;
}


/* The local-infile handler of every connection: no file is ever sent. */
static int refuse_infile_init(void **ptr, const char *name, void *payload)
{
    (void)name;
    (void)payload;
    *ptr = NULL;
    return 1;
}

static int refuse_infile_read(void *ptr, char *buf, unsigned int len)
{
    (void)ptr;
    (void)buf;
    (void)len;
    return -1;
}

static void refuse_infile_end(void *ptr)
{
    (void)ptr;
}

static int refuse_infile_error(void *ptr, char *msg, unsigned int len)
{
    (void)ptr;
    snprintf(msg, len, "libshard sends no local file to a server that asks for one");
    return 2000; /* CR_UNKNOWN_ERROR */
}

static int conn_open(shard_server *srv, shard_conn **out)
{
    conn_config *cf = srv->conf;
    unsigned ct = to_seconds(cf->connect_timeout_ms);
    unsigned rt = to_seconds(cf->read_timeout_ms);
    unsigned wt = to_seconds(cf->write_timeout_ms);
    unsigned long client_max = 1024UL * 1024 * 1024;
    my_bool no = 0;
    const shard_endpoint *ep = &srv->ep;
    shard_conn *c;
    char *user = NULL, *pw = NULL;
    double t0;
    int rc;

    c = shard__calloc(1, sizeof *c);
    if (!c || !(c->my = mysql_init(NULL))) {
        free(c);
        return shard__fail(SHARD_ENOMEM, "%s: out of memory for a connection", srv->label);
    }
    c->srv = srv;
    c->read_timeout_ms = cf->read_timeout_ms;
    mysql_optionsv(c->my, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    mysql_optionsv(c->my, MYSQL_OPT_READ_TIMEOUT, &rt);
    mysql_optionsv(c->my, MYSQL_OPT_WRITE_TIMEOUT, &wt);
    mysql_optionsv(c->my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    mysql_optionsv(c->my, MYSQL_OPT_MAX_ALLOWED_PACKET, &client_max);
    mysql_optionsv(c->my, MYSQL_OPT_RECONNECT, &no);
    /* A server may answer any statement with a request for a local file;
     * the library's default handler would read it from disk. Only a move's
     * copy feeds LOAD DATA LOCAL, through a handler of its own (its
     * lib/move/infile.c); every other request is refused. */
    mysql_set_local_infile_handler(c->my, refuse_infile_init, refuse_infile_read,
                                   refuse_infile_end, refuse_infile_error, NULL);
    mysql_optionsv(c->my, MYSQL_INIT_COMMAND,
                   "SET SESSION sql_mode='STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,"
                   "NO_AUTO_VALUE_ON_ZERO'");
    /* The fence (libshard-move(7), "The fence") holds a write through the
     * lock its check takes on the shard's fence row, and, where the row is
     * missing, through REPEATABLE READ's gap lock, which the mover's
     * INSERT of the row waits for. A server whose default is READ
     * COMMITTED takes no gap lock: never depend on it. */
    mysql_optionsv(c->my, MYSQL_INIT_COMMAND,
                   "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    if ((rc = take_credentials(cf, c->my, srv->label, &user, &pw)))
        goto fail;
    t0 = now_seconds();
    if (!mysql_real_connect(c->my, ep->socket[0] ? NULL : ep->host, user, pw, NULL, ep->port,
                            ep->socket[0] ? ep->socket : NULL, 0)) {
        rc = conn_fail(c->my, srv->label, t0, cf->connect_timeout_ms, &c->last_errno);
        shard__fail_prefix(rc, "cannot connect: ");
        goto fail;
    }
    if ((rc = read_max_packet(c)))
        goto fail;
    free(user);
    shard__wipe_free(pw);
    *out = c;
    return 0;
fail:
    free(user);
    shard__wipe_free(pw);
    mysql_close(c->my);
    free(c);
    return rc;
}

static void conn_close(shard_conn *c)
{
    for (int i = 0; i < CONN_STMTS; i++)
        if (c->stmts[i].st)
            mysql_stmt_close(c->stmts[i].st);
    mysql_close(c->my);
    free(c);
}

/* An idle connection has nothing to read: anything readable is the server
 * closing it (restart, KILL, wait_timeout). One poll(), no round trip. */
static bool closed_by_server(shard_conn *c)
{
    struct pollfd p = {.fd = (int)mysql_get_socket(c->my), .events = POLLIN};
    return p.fd < 0 || poll(&p, 1, 0) != 0;
}

static void timed_deadline(struct timespec *ts, unsigned ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* The calling thread, as the pool tells threads apart: the address of a
 * thread-local byte (unique among live threads; a dead thread's may be
 * reused, which only makes a stale preference). */
static uintptr_t thread_token(void)
{
    static _Thread_local char anchor;
    return (uintptr_t)&anchor;
}

/*
 * An idle connection for the calling thread, under srv->lock: the one this
 * thread released last if it is idle, else the one idle longest. A thread
 * that gets back its own connection finds it warm (its socket, its
 * statements, the server thread behind it); handing each thread the
 * connection another just released, as a plain stack does, made threads
 * that share a context wait on each other's connections (libshard-threads(3)).
 */
static shard_conn *take_idle(shard_server *srv)
{
    uintptr_t me = thread_token();
    shard_conn **pick = NULL, **p;

    for (p = &srv->idle; *p; p = &(*p)->next) {
        if ((*p)->owner == me) {
            pick = p;
            break;
        }
        pick = p; /* the last: released longest ago */
    }
    if (!pick)
        return NULL;
    shard_conn *c = *pick;
    *pick = c->next;
    c->next = NULL;
    return c;
}

int conn_acquire(shard_server *srv, shard_conn **out, bool *connect_failed)
{
    unsigned pool_size = srv->conf->pool_size;
    unsigned wait_ms = srv->conf->connect_timeout_ms + srv->conf->read_timeout_ms;
    struct timespec deadline;
    shard_conn *c;
    int rc;

    if (connect_failed)
        *connect_failed = false;
    timed_deadline(&deadline, wait_ms);
    pthread_mutex_lock(&srv->lock);
    for (bool waited = false;;) {
        if ((c = take_idle(srv)) != NULL) {
            pthread_mutex_unlock(&srv->lock);
            double idle = now_seconds() - c->idle_since;
            if ((idle < IDLE_FRESH_SECONDS || !closed_by_server(c)) &&
                (idle < IDLE_PING_SECONDS || mysql_ping(c->my) == 0)) {
                c->last_errno = 0;
                *out = c;
                return 0;
            }
            /* Stale (server restarted or connection killed): replace it. */
            conn_close(c);
            pthread_mutex_lock(&srv->lock);
            srv->total--;
            continue;
        }
        if (srv->total < pool_size) {
            srv->total++;
            pthread_mutex_unlock(&srv->lock);
            rc = conn_open(srv, out);
            if (connect_failed)
                *connect_failed = rc != 0;
            if (rc) {
                pthread_mutex_lock(&srv->lock);
                srv->total--;
                pthread_cond_signal(&srv->cond);
                pthread_mutex_unlock(&srv->lock);
            }
            return rc;
        }
        if (!waited) { /* once per caller, however often it wakes */
            srv->waits++;
            waited = true;
        }
        if (pthread_cond_timedwait(&srv->cond, &srv->lock, &deadline) == ETIMEDOUT) {
            pthread_mutex_unlock(&srv->lock);
            return shard__fail(SHARD_ETIMEOUT, "%s: all %u pooled connections stayed busy "
                              "for %u ms", srv->label, pool_size, wait_ms);
        }
    }
}

int conn_acquire_idle(shard_server *srv, shard_conn **out)
{
    shard_conn *c;

    pthread_mutex_lock(&srv->lock);
    c = take_idle(srv);
    if (c && now_seconds() - c->idle_since >= IDLE_PING_SECONDS) {
        /* Idle long enough to need a ping: not for a quick poll. Back
         * where it was, its idle time kept. */
        c->next = srv->idle;
        srv->idle = c;
        c = NULL;
    }
    pthread_mutex_unlock(&srv->lock);
    if (!c)
        return SHARD_EBUSY;
    if (closed_by_server(c)) {
        conn_put(c, false);
        return SHARD_EBUSY;
    }
    c->last_errno = 0;
    *out = c;
    return 0;
}

bool conn_reusable(const shard_conn *c, int code)
{
    if (c->broken)
        return false;
    switch (code) {
    case SHARD_ECONNECT:
    case SHARD_ETIMEOUT:
    case SHARD_ETLS:
    case SHARD_ETOOBIG:
    case SHARD_ENOMEM:
    case SHARD_EINTERNAL:
        return false;
    default:
        return true;
    }
}

void conn_release(shard_conn *c, int code)
{
    if (c)
        conn_put(c, conn_reusable(c, code));
}

void conn_put(shard_conn *c, bool healthy)
{
    shard_server *srv;

    if (!c)
        return;
    srv = c->srv;
    if (!healthy || c->broken) {
        conn_close(c);
        pthread_mutex_lock(&srv->lock);
        srv->total--;
    } else {
        c->idle_since = now_seconds();
        c->owner = thread_token();
        pthread_mutex_lock(&srv->lock);
        c->next = srv->idle;
        srv->idle = c;
    }
    pthread_cond_signal(&srv->cond);
    pthread_mutex_unlock(&srv->lock);
}

void server_close_all(shard_server *srv)
{
    shard_conn *c, *next;

    pthread_mutex_lock(&srv->lock);
    for (c = srv->idle; c; c = next) {
        next = c->next;
        conn_close(c);
        srv->total--;
    }
    srv->idle = NULL;
    pthread_mutex_unlock(&srv->lock);
}

int conn_fits(shard_conn *c, size_t len)
{
    /* The server counts the command byte and some framing as well. */
    if (len + 1024 > c->max_packet)
        return shard__fail(SHARD_ETOOBIG, "%s: statement of %zu bytes exceeds the "
                          "server's max_allowed_packet (%lu bytes)", c->srv->label, len,
                          c->max_packet);
    return 0;
}

/* Whether the statement about to go out may (c->send_by): else it is not sent. */
static int send_in_time(shard_conn *c, double now)
{
    if (!c->send_by)
        return 0;
    if (now >= c->send_by) {
        c->late = true;
        return shard__fail(SHARD_EBUSY, "%s: the map lease ended before the write went out "
                          "(not sent)", c->srv->label);
    }
    c->send_by = 0;
    return 0;
}

static int query_n(shard_conn *c, const char *sql, size_t len)
{
    double t0 = now_seconds();
    int rc;

    if ((rc = conn_fits(c, len)) || (rc = send_in_time(c, t0)))
        return rc;
    if (mysql_real_query(c->my, sql, (unsigned long)len) == 0)
        return 0;
    return conn_fail(c->my, c->srv->label, t0, c->read_timeout_ms, &c->last_errno);
}

int conn_send(shard_conn *c, const sqlbuf *sql)
{
    double t0 = now_seconds();
    int rc;

    if ((rc = sql_check(sql)) || (rc = conn_fits(c, sql->len)))
        return rc;
    c->sent_at = t0;
    if (mysql_send_query(c->my, sql->s, (unsigned long)sql->len) == 0)
        return 0;
    return conn_fail(c->my, c->srv->label, t0, c->read_timeout_ms, &c->last_errno);
}

int conn_read(shard_conn *c)
{
    if (mysql_read_query_result(c->my) == 0)
        return 0;
    return conn_fail(c->my, c->srv->label, c->sent_at, c->read_timeout_ms, &c->last_errno);
}

int conn_wait_any(shard_conn *const *cs, size_t n, size_t *ready)
{
    struct pollfd p[CONN_WAIT_MAX];
    size_t first = 0;
    double until = 0;

    *ready = 0;
    if (n == 0 || n > CONN_WAIT_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        double end = cs[i]->sent_at + cs[i]->read_timeout_ms / 1000.0;
        /* TLS may hold part of an answer in its own buffer, where poll()
         * does not see it: read in order, each read waiting by itself. */
        if (mysql_get_ssl_cipher(cs[i]->my) || mysql_get_socket(cs[i]->my) < 0)
            return 0;
        p[i] = (struct pollfd){.fd = (int)mysql_get_socket(cs[i]->my), .events = POLLIN};
        if (cs[i]->read_timeout_ms && (!until || end < until)) {
            until = end;
            first = i;
        }
    }
    for (;;) {
        double left = until ? (until - now_seconds()) * 1000.0 : -1;
        int k = poll(p, (nfds_t)n, !until ? -1 : left > 0 ? (int)left + 1 : 0);
        if (k > 0) {
            for (size_t i = 0; i < n; i++)
                if (p[i].revents) {
                    *ready = i;
                    return 0;
                }
        }
        if (k < 0 && errno != EINTR)
            return 0; /* read in order */
        if (k == 0) {
            *ready = first;
            return shard__fail(SHARD_ETIMEOUT, "%s: no answer within %u ms",
                              cs[first]->srv->label, cs[first]->read_timeout_ms);
        }
    }
}

int conn_read_result(shard_conn *c, MYSQL_RES **res)
{
    int rc = conn_read(c);
    if (rc)
        return rc;
    *res = mysql_store_result(c->my);
    if (!*res)
        return conn_fail(c->my, c->srv->label, c->sent_at, c->read_timeout_ms, &c->last_errno);
    return 0;
}

int conn_query(shard_conn *c, const sqlbuf *sql)
{
    int rc = sql_check(sql);
    return rc ? rc : query_n(c, sql->s, sql->len);
}

int conn_query_str(shard_conn *c, const char *sql)
{
    return query_n(c, sql, strlen(sql));
}

int conn_select(shard_conn *c, const sqlbuf *sql, MYSQL_RES **res)
{
    int rc = conn_query(c, sql);
    if (rc)
        return rc;
    *res = mysql_store_result(c->my);
    if (!*res)
        return conn_fail(c->my, c->srv->label, now_seconds(), 0, &c->last_errno);
    return 0;
}

int conn_value(shard_conn *c, const char *sql, char *out, size_t size)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    int rc = conn_query_str(c, sql);

    if (rc)
        return rc;
    if (!(res = mysql_store_result(c->my)))
        return shard__fail(SHARD_ESERVER, "%s: %s", c->srv->label, mysql_error(c->my));
    row = mysql_fetch_row(res);
    snprintf(out, size, "%s", row && row[0] ? row[0] : "");
    mysql_free_result(res);
    return 0;
}

/* ---- prepared statements ---------------------------------------------------- */

static void stmt_drop(conn_stmt *cs)
{
    if (cs->st)
        mysql_stmt_close(cs->st);
    memset(cs, 0, sizeof *cs);
}

static int stmt_fail(shard_conn *c, MYSQL_STMT *st, double t0)
{
    unsigned e = mysql_stmt_errno(st);
    int code = code_of(e);

    c->last_errno = e;
    if (code == SHARD_ECONNECT && c->read_timeout_ms &&
        (now_seconds() - t0) * 1000.0 >= c->read_timeout_ms * 0.9)
        return shard__fail(SHARD_ETIMEOUT, "%s: no answer within %u ms (error %u: %s)",
                          c->srv->label, c->read_timeout_ms, e, mysql_stmt_error(st));
    return shard__fail(code, "%s: error %u (%s): %s", c->srv->label, e,
                      mysql_stmt_sqlstate(st), mysql_stmt_error(st));
}

/* The cached statement for key, prepared now if need be: from sql, or (sql
 * NULL) from what build(q, barg) writes, which costs nothing when cached. */
static int stmt_for(shard_conn *c, const char *key, const sqlbuf *sql, conn_sql_fn build,
                    const void *barg, conn_stmt **out)
{
    sqlbuf built;
    conn_stmt *slot = &c->stmts[0];
    double t0 = now_seconds();
    int rc;

    for (int i = 0; i < CONN_STMTS; i++) {
        conn_stmt *cs = &c->stmts[i];
        if (cs->st && strcmp(cs->key, key) == 0) {
            cs->used = ++c->stmt_clock;
            *out = cs;
            return 0;
        }
        if (!cs->st || (slot->st && cs->used < slot->used))
            slot = cs;
    }
    sql_init(&built);
    if (!sql) {
        build(&built, barg);
        sql = &built;
    }
    if ((rc = sql_check(sql))) {
        sql_free(&built);
        return rc;
    }
    stmt_drop(slot);
    if (!(slot->st = mysql_stmt_init(c->my))) {
        sql_free(&built);
        return shard__fail(SHARD_ENOMEM, "%s: out of memory for a statement", c->srv->label);
    }
    if (mysql_stmt_prepare(slot->st, sql->s, (unsigned long)sql->len)) {
        rc = stmt_fail(c, slot->st, t0);
        stmt_drop(slot);
        sql_free(&built);
        return rc;
    }
    sql_free(&built);
    snprintf(slot->key, sizeof slot->key, "%s", key);
    slot->used = ++c->stmt_clock;
    *out = slot;
    return 0;
}

int conn_stmt_get(shard_conn *c, const char *key, conn_sql_fn build, const void *barg,
                  uint64_t arg, bool *fenced, char **out, size_t *len)
{
    unsigned long long param = arg;
    char small[8192];
    unsigned long length = 0;
    long long fence = 0;
    my_bool is_null = 0, error = 0, fence_null = 1;
    MYSQL_BIND p, r[2], *v = fenced ? &r[1] : &r[0];
    unsigned col = fenced ? 1 : 0;
    conn_stmt *cs = NULL;
    double t0 = now_seconds();
    int rc, f;

    if ((rc = stmt_for(c, key, NULL, build, barg, &cs)))
        return rc;
    memset(&p, 0, sizeof p);
    p.buffer_type = MYSQL_TYPE_LONGLONG;
    p.buffer = &param;
    p.is_unsigned = 1;
    memset(r, 0, sizeof r);
    r[0].buffer_type = MYSQL_TYPE_LONGLONG;
    r[0].buffer = &fence;
    r[0].is_null = &fence_null;
    v->buffer_type = MYSQL_TYPE_STRING;
    v->buffer = small;
    v->buffer_length = sizeof small;
    v->length = &length;
    v->is_null = &is_null;
    v->error = &error;
    if (mysql_stmt_bind_param(cs->st, &p) || mysql_stmt_execute(cs->st) ||
        mysql_stmt_bind_result(cs->st, r)) {
        rc = stmt_fail(c, cs->st, t0);
        stmt_drop(cs); /* e.g. its table was renamed away: prepare afresh */
        return rc;
    }
    f = mysql_stmt_fetch(cs->st);
    if (fenced)
        *fenced = (f == 0 || f == MYSQL_DATA_TRUNCATED) && !fence_null && fence != 0;
    if (f == MYSQL_NO_DATA || (f == 0 && is_null)) {
        rc = shard__fail(SHARD_ENOTFOUND, "no row");
    } else if (f == 0) {
        rc = copy_out(small, length, out, len);
    } else if (f == MYSQL_DATA_TRUNCATED) {
        /* Larger than the stack buffer: fetch the column again, whole. */
        char *big = shard__malloc(length + 1);
        if (!big) {
            rc = shard__fail(SHARD_ENOMEM, "out of memory for a %lu-byte result", length);
        } else {
            v->buffer = big;
            v->buffer_length = length;
            if (mysql_stmt_fetch_column(cs->st, v, col, 0)) {
                free(big);
                rc = stmt_fail(c, cs->st, t0);
            } else {
                big[length] = '\0';
                *out = big;
                if (len)
                    *len = length;
                rc = 0;
            }
        }
    } else {
        rc = stmt_fail(c, cs->st, t0);
    }
    if (mysql_stmt_free_result(cs->st) && rc == 0)
        rc = stmt_fail(c, cs->st, t0);
    if (rc && rc != SHARD_ENOTFOUND && rc != SHARD_ENOMEM)
        stmt_drop(cs);
    return rc;
}

int conn_stmt_run(shard_conn *c, const char *key, const sqlbuf *sql, const conn_param *params,
                  unsigned n)
{
    MYSQL_BIND b[CONN_PARAMS_MAX];
    unsigned long lens[CONN_PARAMS_MAX];
    unsigned long long nums[CONN_PARAMS_MAX];
    conn_stmt *cs = NULL;
    size_t bytes = sql->len;
    double t0 = now_seconds();
    int rc;

    if (n > CONN_PARAMS_MAX)
        return shard__fail(SHARD_EINTERNAL, "statement with %u parameters", n);
    memset(b, 0, sizeof b);
    for (unsigned i = 0; i < n; i++) {
        if (params[i].data) {
            /* Bytes travel as they are (no hex): the server's limit applies
             * to the value itself. */
            b[i].buffer_type = MYSQL_TYPE_LONG_BLOB;
            b[i].buffer = (void *)params[i].data;
            b[i].buffer_length = lens[i] = (unsigned long)params[i].len;
            b[i].length = &lens[i];
            bytes += params[i].len;
        } else {
            nums[i] = params[i].u64;
            b[i].buffer_type = MYSQL_TYPE_LONGLONG;
            b[i].buffer = &nums[i];
            b[i].is_unsigned = 1;
            bytes += 8;
        }
    }
    if ((rc = conn_fits(c, bytes)) || (rc = stmt_for(c, key, sql, NULL, NULL, &cs)))
        return rc;
    if (mysql_stmt_bind_param(cs->st, b))
        return stmt_fail(c, cs->st, t0);
    if (c->send_by && (rc = send_in_time(c, now_seconds())))
        return rc;
    c->executing = true;
    if (mysql_stmt_execute(cs->st)) {
        rc = stmt_fail(c, cs->st, t0);
        stmt_drop(cs); /* prepared afresh next time: the table may have changed */
        return rc;
    }
    c->executing = false;
    c->affected = mysql_stmt_affected_rows(cs->st);
    c->insert_id = mysql_stmt_insert_id(cs->st);
    return 0;
}
