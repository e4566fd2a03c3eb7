/*
 * The legacy server (libshard-import(7)): its URL (never with a password),
 * the connection (UTC, text as the columns store it), the import's lock,
 * and the queries of a pass.
 */
#include "import.h"

#include <errmsg.h>
#include <mysqld_error.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Legacy schema names are quoted with backticks: letters, digits, _ and $. */
static bool legacy_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '$'))
            return false;
    return true;
}

int import_check_name(const char *what, const char *s)
{
    if (legacy_name_ok(s))
        return 0;
    return shard__fail(SHARD_EINVAL, "%s \"%.64s\" is not a plain name (1..64 of A-Z a-z "
                      "0-9 _ $)", what, s ? s : "(null)");
}

/* mysql://USER@HOST[:PORT]/DB, HOST a name, an IPv4 address or [IPv6]. */
int import_parse_url(const char *url, source_url *u)
{
    const char *p, *at, *slash, *hend, *colon = NULL;
    size_t n;

    memset(u, 0, sizeof *u);
    u->port = 3306;
    if (!url || strncmp(url, "mysql://", 8) != 0)
        return shard__fail(SHARD_EINVAL, "source: give mysql://USER@HOST[:PORT]/DB");
    p = url + 8;
    at = strchr(p, '@');
    if (!at)
        return shard__fail(SHARD_EINVAL, "source: the user is missing (mysql://USER@HOST/DB)");
    /* Never echo what is before '@': it may be a password. */
    if (memchr(p, ':', (size_t)(at - p)))
        return shard__fail(SHARD_EINVAL, "source: a password in the URL is refused (it would "
                          "show in process lists and logs): name an environment variable "
                          "holding it instead");
    n = (size_t)(at - p);
    if (n == 0 || n >= sizeof u->user)
        return shard__fail(SHARD_EINVAL, "source: the user must be 1..80 characters");
    memcpy(u->user, p, n);
    p = at + 1;
    slash = strchr(p, '/');
    if (!slash)
        return shard__fail(SHARD_EINVAL, "source: the database is missing "
                          "(mysql://USER@HOST[:PORT]/DB)");
    if (*p == '[') {
        const char *close = memchr(p, ']', (size_t)(slash - p));
        if (!close)
            return shard__fail(SHARD_EINVAL, "source: bad [IPv6] address");
        hend = close + 1;
        p++;
        n = (size_t)(close - p);
    } else {
        colon = memchr(p, ':', (size_t)(slash - p));
        hend = colon ? colon : slash;
        n = (size_t)(hend - p);
    }
    if (n == 0 || n >= sizeof u->host)
        return shard__fail(SHARD_EINVAL, "source: the host is missing or too long");
    memcpy(u->host, p, n);
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:",
                    u->host[i]))
            return shard__fail(SHARD_EINVAL, "source: bad character in host \"%.64s\"",
                              u->host);
    if (*hend == ':') {
        char *end;
        unsigned long port = strtoul(hend + 1, &end, 10);
        if (end == hend + 1 || end != slash || port < 1 || port > 65535)
            return shard__fail(SHARD_EINVAL, "source: the port must be 1..65535");
        u->port = (unsigned)port;
    } else if (hend != slash) {
        return shard__fail(SHARD_EINVAL, "source: bad address");
    }
    if (strlen(slash + 1) >= sizeof u->db || !legacy_name_ok(slash + 1))
        return shard__fail(SHARD_EINVAL, "source: database \"%.64s\" is not a plain name "
                          "(1..64 of A-Z a-z 0-9 _ $)", slash + 1);
    strcpy(u->db, slash + 1);
    return 0;
}

static int source_fail(import_source *s, const char *what)
{
    unsigned e = mysql_errno(s->my);
    int code = SHARD_ESERVER;

    if (e == CR_SERVER_GONE_ERROR || e == CR_SERVER_LOST || e == CR_CONNECTION_ERROR ||
        e == CR_CONN_HOST_ERROR || e == CR_UNKNOWN_HOST || e == ER_SERVER_SHUTDOWN)
        code = SHARD_ECONNECT;
    else if (e == ER_ACCESS_DENIED_ERROR || e == ER_DBACCESS_DENIED_ERROR ||
             e == ER_TABLEACCESS_DENIED_ERROR)
        code = SHARD_EPRIV;
    else if (e == ER_NO_SUCH_TABLE || e == ER_BAD_DB_ERROR || e == ER_BAD_FIELD_ERROR)
        code = SHARD_ENOTFOUND;
    return shard__fail(code, "%s: %s: error %u: %s", s->label, what, e, mysql_error(s->my));
}

int import_source_query(import_source *s, const char *sql, size_t len, MYSQL_RES **res)
{
    if (mysql_real_query(s->my, sql, (unsigned long)len) != 0)
        return source_fail(s, "query");
    if (!res)
        return 0;
    if (!(*res = mysql_store_result(s->my)))
        return source_fail(s, "reading a result");
    return 0;
}

int import_source_value(import_source *s, const char *sql, char *out, size_t size)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    int rc = import_source_query(s, sql, strlen(sql), &res);

    if (rc)
        return rc;
    row = mysql_fetch_row(res);
    snprintf(out, size, "%s", row && row[0] ? row[0] : "");
    mysql_free_result(res);
    return 0;
}

void import_source_close(import_source *s)
{
    if (s->my)
        mysql_close(s->my);
    s->my = NULL;
}

int import_md5_hex(const char *data, size_t len, char hex[33])
{
    unsigned char md[16];
    int rc = shard__md5(data, len, md);

    if (rc)
        return rc;
    /* Not snprintf: a pass computes one per row. */
    for (unsigned i = 0; i < 16; i++) {
        hex[2 * i] = "0123456789abcdef"[md[i] >> 4];
        hex[2 * i + 1] = "0123456789abcdef"[md[i] & 15];
    }
    hex[32] = '\0';
    return 0;
}

/*
 * Connect, read UTC timestamps, and take the import's lock (GET_LOCK on the
 * source: released by the server when the connection ends, so a killed
 * import never leaves it behind).
 */
int import_source_open(shard_ctx *ctx, const shard_import_options *o, const char *lockname,
                       import_source *s)
{
    shard_map *map = ctx_map(ctx);
    const char *env = o->password_env ? o->password_env : map->password_env;
    const char *pw = NULL;
    unsigned t;
    source_url u;
    char sql[200], v[32];
    int rc;

    memset(s, 0, sizeof *s);
    if ((rc = import_parse_url(o->source, &u))) {
        shard_map_free(map);
        return rc;
    }
    snprintf(s->label, sizeof s->label, "source %s:%u/%s", u.host, u.port, u.db);
    snprintf(s->db, sizeof s->db, "%s", u.db);
    if (env && !(pw = getenv(env))) {
        rc = shard__fail(SHARD_EINVAL, "%s: the password variable %s is not set", s->label,
                        env);
        shard_map_free(map);
        return rc;
    }
    shard_map_free(map);
    if (!(s->my = mysql_init(NULL)))
        return shard__fail(SHARD_ENOMEM, "out of memory connecting to the source");
    t = (ctx->opts.connect_timeout_ms + 999) / 1000;
    mysql_options(s->my, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    t = (ctx->opts.read_timeout_ms + 999) / 1000;
    mysql_options(s->my, MYSQL_OPT_READ_TIMEOUT, &t);
    t = (ctx->opts.write_timeout_ms + 999) / 1000;
    mysql_options(s->my, MYSQL_OPT_WRITE_TIMEOUT, &t);
    mysql_options(s->my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (!mysql_real_connect(s->my, u.host, u.user, pw, u.db, u.port, NULL, 0)) {
        rc = source_fail(s, "connect");
        import_source_close(s);
        return rc;
    }
    /* Text as the columns store it, never converted by the server: a column
     * declared latin1 that holds UTF-8 (a common legacy mistake) is imported
     * as it is, and one that holds real latin1 accents is refused, not
     * double-encoded (libshard-import(7)). */
    static const char session[] = "SET SESSION time_zone = '+00:00', "
                                  "character_set_results = NULL";
    if ((rc = import_source_query(s, session, strlen(session), NULL)))
        goto fail;
    if (!lockname)
        return 0;
    /* A few seconds' wait: a pass run again right after one was killed
     * finds the lock free once the server has seen that connection end
     * (a statement it was running finishes first). */
    snprintf(sql, sizeof sql, "SELECT GET_LOCK('%s', %d)", lockname, IMPORT_LOCK_WAIT_S);
    if ((rc = import_source_value(s, sql, v, sizeof v)))
        goto fail;
    if (strcmp(v, "1") != 0) {
        rc = shard__fail(SHARD_EBUSY, "%s: another import holds the lock %s (waited %d s): "
                        "one import of a type or mapping at a time", s->label, lockname,
                        IMPORT_LOCK_WAIT_S);
        goto fail;
    }
    return 0;
fail:
    import_source_close(s);
    return rc;
}

/* "shard_import:NAME", or a digest of NAME where that is over 64 characters. */
void import_lock_name(const char *name, char out[80])
{
    char hex[33];
    if (strlen(name) + 13 <= 64 || import_md5_hex(name, strlen(name), hex) != 0)
        snprintf(out, 80, "shard_import:%.51s", name);
    else
        snprintf(out, 80, "shard_import:%s", hex);
}
