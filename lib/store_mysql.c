/*
 * The MySQL map store: one row per map version in a table, so a fleet of
 * application servers shares one map. Publishing is a compare-and-swap on
 * the highest version, under a named lock that publishers take in turn.
 *
 * Location: mysql://USER@HOST:PORT/DATABASE/TABLE[?OPTIONS], OPTIONS being
 * password_env=VAR, socket=/path (HOST is then ignored), tls_ca=/path,
 * tls_verify=0|1. The password only ever comes from the environment.
 */
#include "store.h"
#include "sql.h"

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STORE_TIMEOUT_S 5u

typedef struct store_mysql {
    char user[81];
    char host[256];
    unsigned port;
    char socket[108];
    char db[65];
    char table[65];
    char password_env[128];
    char tls_ca[512];
    bool tls_verify;
    char label[700]; /* for messages: no password in it */
} store_mysql;

static int bad(const char *uri, const char *why)
{
    /* Quote only what follows USER@: a location that (wrongly) carries a
     * password there must not put it in a message. */
    const char *at = strchr(uri, '@');
    return shard__fail(SHARD_EINVAL, "map store \"mysql://%s%.200s\": %s (expected "
                      "mysql://USER@HOST:PORT/DATABASE/TABLE?password_env=VAR)",
                      at ? "...@" : "", at ? at + 1 : "", why);
}

/* Copy [s, s+n) into dst (size cap), checking each byte against ok. */
static bool take(char *dst, size_t cap, const char *s, size_t n, const char *ok)
{
    if (n == 0 || n >= cap)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!strchr(ok, s[i]) || s[i] == '\0')
            return false;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return true;
}

#define ALNUM "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

static int parse_option(store_mysql *m, const char *uri, const char *opt, size_t n)
{
    const char *eq = memchr(opt, '=', n);
    size_t klen, vlen;

    if (!eq)
        return bad(uri, "an option is not KEY=VALUE");
    klen = (size_t)(eq - opt);
    vlen = n - klen - 1;
    eq++;
    if (klen == 12 && strncmp(opt, "password_env", 12) == 0) {
        if (!take(m->password_env, sizeof m->password_env, eq, vlen, ALNUM "_"))
            return bad(uri, "password_env is not an environment variable name");
    } else if (klen == 6 && strncmp(opt, "socket", 6) == 0) {
        if (eq[0] != '/' || !take(m->socket, sizeof m->socket, eq, vlen, ALNUM "/._-"))
            return bad(uri, "socket must be an absolute path");
    } else if (klen == 6 && strncmp(opt, "tls_ca", 6) == 0) {
        if (eq[0] != '/' || !take(m->tls_ca, sizeof m->tls_ca, eq, vlen, ALNUM "/._-"))
            return bad(uri, "tls_ca must be an absolute path");
    } else if (klen == 10 && strncmp(opt, "tls_verify", 10) == 0) {
        if (vlen != 1 || (eq[0] != '0' && eq[0] != '1'))
            return bad(uri, "tls_verify must be 0 or 1");
        m->tls_verify = eq[0] == '1';
    } else {
        return bad(uri, "unknown option");
    }
    return 0;
}

static int parse_uri(store_mysql *m, const char *uri)
{
    const char *p = uri + 8, *at, *slash, *colon, *q, *end;
    char *endp;
    unsigned long port;

    m->tls_verify = true;
    if (!(at = strchr(p, '@')) || !take(m->user, sizeof m->user, p, (size_t)(at - p),
                                         ALNUM "_.-"))
        return bad(uri, "missing or invalid USER@");
    p = at + 1;
    if (!(slash = strchr(p, '/')))
        return bad(uri, "missing /DATABASE/TABLE");
    colon = memchr(p, ':', (size_t)(slash - p));
    if (!take(m->host, sizeof m->host, p, (size_t)((colon ? colon : slash) - p),
              ALNUM ".-_"))
        return bad(uri, "invalid host");
    m->port = 3306;
    if (colon) {
        port = strtoul(colon + 1, &endp, 10);
        if (endp != slash || port < 1 || port > 65535)
            return bad(uri, "port must be 1..65535");
        m->port = (unsigned)port;
    }
    p = slash + 1;
    if (!(slash = strchr(p, '/')) ||
        !take(m->db, sizeof m->db, p, (size_t)(slash - p), ALNUM "_") ||
        !shard__ident_valid(m->db))
        return bad(uri, "DATABASE must be [a-z][a-z0-9_]*");
    p = slash + 1;
    q = strchr(p, '?');
    end = q ? q : p + strlen(p);
    if (!take(m->table, sizeof m->table, p, (size_t)(end - p), ALNUM "_") ||
        !shard__ident_valid(m->table))
        return bad(uri, "TABLE must be [a-z][a-z0-9_]*");
    while (q && *q) {
        const char *opt = q + 1, *amp = strchr(opt, '&');
        size_t n = amp ? (size_t)(amp - opt) : strlen(opt);
        int rc = parse_option(m, uri, opt, n);
        if (rc)
            return rc;
        q = amp;
    }
    if (m->socket[0])
        snprintf(m->label, sizeof m->label, "map store %s@unix:%s/%s/%s", m->user,
                 m->socket, m->db, m->table);
    else
        snprintf(m->label, sizeof m->label, "map store %s@%s:%u/%s/%s", m->user, m->host,
                 m->port, m->db, m->table);
    return 0;
}

static int mysql_open(const char *uri, void **out)
{
    store_mysql *m = shard__calloc(1, sizeof *m);
    int rc;

    if (!m)
        return shard__fail(SHARD_ENOMEM, "out of memory opening the map store");
    if ((rc = parse_uri(m, uri))) {
        free(m);
        return rc;
    }
    *out = m;
    return 0;
}

static void mysql_free(void *impl)
{
    free(impl);
}

static int fail_my(store_mysql *m, MYSQL *my)
{
    unsigned e = mysql_errno(my);
    int code = e == ER_LOCK_DEADLOCK || e == ER_LOCK_WAIT_TIMEOUT ? SHARD_ECONFLICT
             : e == CR_SSL_CONNECTION_ERROR                      ? SHARD_ETLS
             : e >= 2000 && e < 3000                             ? SHARD_ECONNECT
             : e == ER_ACCESS_DENIED_ERROR || e == ER_DBACCESS_DENIED_ERROR ||
                       e == ER_TABLEACCESS_DENIED_ERROR
                 ? SHARD_EPRIV
                 : SHARD_ESERVER;
    return shard__fail(code, "%s: error %u: %s", m->label, e, mysql_error(my));
}

static int connect_store(store_mysql *m, MYSQL **out)
{
    unsigned t = STORE_TIMEOUT_S;
    const char *pw = NULL;
    MYSQL *my;

    if (m->password_env[0] && !(pw = getenv(m->password_env)))
        return shard__fail(SHARD_EINVAL, "%s: password_env names %s, which is not set",
                          m->label, m->password_env);
    if (!(my = mysql_init(NULL)))
        return shard__fail(SHARD_ENOMEM, "out of memory connecting to the map store");
    mysql_optionsv(my, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    mysql_optionsv(my, MYSQL_OPT_READ_TIMEOUT, &t);
    mysql_optionsv(my, MYSQL_OPT_WRITE_TIMEOUT, &t);
    mysql_optionsv(my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (m->tls_ca[0]) {
        my_bool yes = 1, verify = m->tls_verify;
        mysql_optionsv(my, MYSQL_OPT_SSL_CA, m->tls_ca);
        mysql_optionsv(my, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
        mysql_optionsv(my, MYSQL_OPT_SSL_ENFORCE, &yes);
    }
    if (!mysql_real_connect(my, m->socket[0] ? NULL : m->host, m->user, pw, NULL, m->port,
                            m->socket[0] ? m->socket : NULL, 0)) {
        int rc = fail_my(m, my);
        mysql_close(my);
        return rc;
    }
    *out = my;
    return 0;
}

static int run(store_mysql *m, MYSQL *my, const char *sql, size_t len)
{
    return mysql_real_query(my, sql, (unsigned long)len) ? fail_my(m, my) : 0;
}

/* The newest version (version 0), or the one given. */
static int load_row(store_mysql *m, uint64_t version, shard_map **out)
{
    MYSQL *my = NULL;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    if ((rc = connect_store(m, &my)))
        return rc;
    sql_init(&q);
    sql_add(&q, "SELECT map FROM ");
    sql_table(&q, m->db, m->table);
    if (version) {
        sql_add(&q, " WHERE version = ");
        sql_u64(&q, version);
    } else {
        sql_add(&q, " ORDER BY version DESC LIMIT 1");
    }
    if (!(rc = sql_check(&q)) && !(rc = run(m, my, q.s, q.len)) &&
        !(res = mysql_store_result(my)))
        rc = fail_my(m, my);
    if (rc == 0) {
        row = mysql_fetch_row(res);
        if (!row && version)
            rc = shard__fail(SHARD_ENOTFOUND, "%s: no version %llu was published",
                            m->label, (unsigned long long)version);
        else if (!row)
            rc = shard__fail(SHARD_ENOTFOUND, "%s: no map has been published", m->label);
        else if ((rc = shard_map_parse(out, row[0], mysql_fetch_lengths(res)[0])))
            shard__fail_prefix(rc, "%s: ", m->label);
    }
    if (res)
        mysql_free_result(res);
    sql_free(&q);
    mysql_close(my);
    return rc;
}

static int mysql_load(void *impl, shard_map **out)
{
    return load_row(impl, 0, out);
}

static int mysql_load_version(void *impl, uint64_t version, shard_map **out)
{
    return load_row(impl, version, out);
}

static int current_version(store_mysql *m, MYSQL *my, uint64_t *version)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_add(&q, "SELECT MAX(version) FROM ");
    sql_table(&q, m->db, m->table);
    rc = sql_check(&q);
    if (!rc)
        rc = run(m, my, q.s, q.len);
    sql_free(&q);
    if (rc)
        return rc;
    if (!(res = mysql_store_result(my)))
        return fail_my(m, my);
    row = mysql_fetch_row(res);
    *version = row && row[0] ? strtoull(row[0], NULL, 10) : 0;
    mysql_free_result(res);
    return 0;
}

/* Publishers of one store take turns under a named lock: no deadlocks, and
 * the version read under it is the one the insert follows. */
static int lock_store(store_mysql *m, MYSQL *my, bool take)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc, got;

    sql_init(&q);
    sql_addf(&q, take ? "SELECT GET_LOCK('libshard map store %s.%s', %u)"
                      : "SELECT RELEASE_LOCK('libshard map store %s.%s')",
             m->db, m->table, STORE_TIMEOUT_S);
    rc = sql_check(&q);
    if (!rc)
        rc = run(m, my, q.s, q.len);
    sql_free(&q);
    if (rc)
        return rc;
    if (!(res = mysql_store_result(my)))
        return fail_my(m, my);
    row = mysql_fetch_row(res);
    got = row && row[0] && row[0][0] == '1';
    mysql_free_result(res);
    if (take && !got)
        return shard__fail(SHARD_EBUSY, "%s: another publisher held the store for %u s",
                          m->label, STORE_TIMEOUT_S);
    return 0;
}

static int mysql_publish(void *impl, const shard_map *map, uint64_t expected_version,
                         bool *unknown)
{
    store_mysql *m = impl;
    MYSQL *my = NULL;
    char *text = NULL;
    uint64_t cur = 0;
    bool locked = false;
    sqlbuf q;
    int rc;

    if ((rc = shard_map_to_json(map, &text)) || (rc = connect_store(m, &my))) {
        free(text);
        return rc;
    }
    sql_init(&q);
    sql_addf(&q, "CREATE DATABASE IF NOT EXISTS `%s`", m->db);
    if ((rc = sql_check(&q)) || (rc = run(m, my, q.s, q.len)))
        goto out;
    sql_reset(&q);
    sql_add(&q, "CREATE TABLE IF NOT EXISTS ");
    sql_table(&q, m->db, m->table);
    sql_add(&q, " (version BIGINT UNSIGNED NOT NULL PRIMARY KEY,"
                " map LONGTEXT CHARACTER SET utf8mb4 NOT NULL,"
                " published_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))"
                " ENGINE=InnoDB");
    if ((rc = sql_check(&q)) || (rc = run(m, my, q.s, q.len)) ||
        (rc = lock_store(m, my, true)))
        goto out;
    locked = true;
    if ((rc = current_version(m, my, &cur)))
        goto out;
    if (cur != expected_version) {
        rc = shard__fail(SHARD_ECONFLICT, "%s: version is %llu, expected %llu", m->label,
                        (unsigned long long)cur, (unsigned long long)expected_version);
        goto out;
    }
    sql_reset(&q);
    sql_add(&q, "INSERT INTO ");
    sql_table(&q, m->db, m->table);
    sql_add(&q, " (version, map) VALUES (");
    sql_u64(&q, map->version);
    sql_add(&q, ", ");
    sql_hex(&q, text, strlen(text));
    sql_add(&q, ")");
    rc = sql_check(&q);
    /* The only statement that stores the map: sent, and its answer lost
     * (a client error), it may have been applied. */
    if (!rc && (rc = run(m, my, q.s, q.len)) == SHARD_ECONNECT)
        *unknown = true;
out:
    if (rc == SHARD_ESERVER && mysql_errno(my) == ER_DUP_ENTRY)
        rc = shard__fail(SHARD_ECONFLICT, "%s: version %llu was published concurrently",
                        m->label, (unsigned long long)map->version);
    if (locked && rc != SHARD_ECONNECT)
        lock_store(m, my, false); /* closing the connection would release it too */
    sql_free(&q);
    free(text);
    mysql_close(my);
    return rc;
}

const store_ops store_mysql_ops = {
    .name = "mysql",
    .scheme = "mysql://",
    .open = mysql_open,
    .free = mysql_free,
    .load = mysql_load,
    .load_version = mysql_load_version,
    .publish = mysql_publish,
};
