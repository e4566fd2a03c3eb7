/*
 * Imports from an unsharded database (libshard-import(7)): a legacy table
 * becomes objects, a legacy join table becomes mapping rows, in passes that
 * can be run again and again until nothing differs.
 *
 * The source is read in primary-key order, one bounded batch per statement
 * (keyset pagination), so memory stays bounded and a slow pass never holds
 * a long-running statement on the legacy server. Objects and mapping rows
 * are written through the public calls (shard_object_*, shard_txn_*,
 * shard_mapping_*), so every write on an ID shard takes the same path, and
 * the same fence, as the application's. Lookup entries live in mod-shard
 * key-value tables (legacy.h).
 *
 * Crash safety: a new row's lookup entry is written first, as "pending S"
 * (S: the shard its object goes to); then the object is created; then the
 * entry becomes "ID MD5". An interrupted pass leaves pending entries; the
 * next one finds the objects they may name by their legacy id field (the id
 * column is always a field of the object) on shard S, and adopts them
 * instead of creating them again.
 */
#include "legacy.h"
#include "object.h"

#include <errmsg.h>
#include <mysqld_error.h>
#include <openssl/evp.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_BATCH 1000
#define MAX_BATCH 100000
#define MAX_THREADS 64

/* ---- the source database ------------------------------------------------- */

typedef struct source {
    MYSQL *my;
    char db[65];
    char label[400]; /* "source HOST:PORT/DB", for messages */
} source;

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

static int check_name(const char *what, const char *s)
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

static int source_fail(source *s, const char *what)
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

static int source_query(source *s, const char *sql, size_t len, MYSQL_RES **res)
{
    if (mysql_real_query(s->my, sql, (unsigned long)len) != 0)
        return source_fail(s, "query");
    if (!res)
        return 0;
    if (!(*res = mysql_store_result(s->my)))
        return source_fail(s, "reading a result");
    return 0;
}

static int source_value(source *s, const char *sql, char *out, size_t size)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    int rc = source_query(s, sql, strlen(sql), &res);

    if (rc)
        return rc;
    row = mysql_fetch_row(res);
    snprintf(out, size, "%s", row && row[0] ? row[0] : "");
    mysql_free_result(res);
    return 0;
}

static void source_close(source *s)
{
    if (s->my)
        mysql_close(s->my);
    s->my = NULL;
}

static int md5_hex(const char *data, size_t len, char hex[33])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;

    if (!EVP_Digest(len ? data : "", len, md, &mdlen, EVP_md5(), NULL) || mdlen != 16)
        return shard__fail(SHARD_ENOMEM, "computing MD5 failed");
    for (unsigned i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return 0;
}

/*
 * Connect, read UTC timestamps, and take the import's lock (GET_LOCK on the
 * source: released by the server when the connection ends, so a killed
 * import never leaves it behind).
 */
static int source_open(shard_ctx *ctx, const shard_import_options *o, const char *lockname,
                       source *s)
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
        source_close(s);
        return rc;
    }
    /* Text as the columns store it, never converted by the server: a column
     * declared latin1 that holds UTF-8 (a common legacy mistake) is imported
     * as it is, and one that holds real latin1 accents is refused, not
     * double-encoded (libshard-import(7)). */
    static const char session[] = "SET SESSION time_zone = '+00:00', "
                                  "character_set_results = NULL";
    if ((rc = source_query(s, session, strlen(session), NULL)))
        goto fail;
    if (!lockname)
        return 0;
    snprintf(sql, sizeof sql, "SELECT GET_LOCK('%s', 0)", lockname);
    if ((rc = source_value(s, sql, v, sizeof v)))
        goto fail;
    if (strcmp(v, "1") != 0) {
        rc = shard__fail(SHARD_EBUSY, "%s: another import holds the lock %s: one import of "
                        "a type or mapping at a time", s->label, lockname);
        goto fail;
    }
    return 0;
fail:
    source_close(s);
    return rc;
}

/* "shard_import:NAME", or a digest of NAME where that is over 64 characters. */
static void lock_name(const char *name, char out[80])
{
    char hex[33];
    if (strlen(name) + 13 <= 64 || md5_hex(name, strlen(name), hex) != 0)
        snprintf(out, 80, "shard_import:%.51s", name);
    else
        snprintf(out, 80, "shard_import:%s", hex);
}

/* ---- the legacy table's columns -------------------------------------------- */

typedef enum col_kind {
    COL_INT, COL_UINT, COL_BIT, COL_DECIMAL, COL_REAL, COL_TEMPORAL, COL_TEXT,
    COL_BINARY, COL_NULL, COL_OTHER
} col_kind;

static col_kind kind_of(const MYSQL_FIELD *f)
{
    switch (f->type) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_YEAR:
        return (f->flags & UNSIGNED_FLAG) ? COL_UINT : COL_INT;
    case MYSQL_TYPE_BIT:
        return COL_BIT;
    case MYSQL_TYPE_DECIMAL:
    case MYSQL_TYPE_NEWDECIMAL:
        return COL_DECIMAL;
    case MYSQL_TYPE_FLOAT:
    case MYSQL_TYPE_DOUBLE:
        return COL_REAL;
    case MYSQL_TYPE_DATE:
    case MYSQL_TYPE_NEWDATE:
    case MYSQL_TYPE_TIME:
    case MYSQL_TYPE_DATETIME:
    case MYSQL_TYPE_TIMESTAMP:
        return COL_TEMPORAL;
    case MYSQL_TYPE_VARCHAR:
    case MYSQL_TYPE_VAR_STRING:
    case MYSQL_TYPE_STRING:
    case MYSQL_TYPE_TINY_BLOB:
    case MYSQL_TYPE_MEDIUM_BLOB:
    case MYSQL_TYPE_LONG_BLOB:
    case MYSQL_TYPE_BLOB:
    case MYSQL_TYPE_ENUM:
    case MYSQL_TYPE_SET:
    case MYSQL_TYPE_JSON:
        return f->charsetnr == 63 ? COL_BINARY : COL_TEXT; /* 63: the binary charset */
    case MYSQL_TYPE_GEOMETRY:
        return COL_BINARY;
    case MYSQL_TYPE_NULL:
        return COL_NULL;
    default:
        return COL_OTHER;
    }
}

static bool kind_integer(col_kind k)
{
    return k == COL_INT || k == COL_UINT;
}

/* Strict UTF-8 (no overlong forms, surrogates or code points above
 * U+10FFFF); the offset of the first bad byte, or -1. */
long import_utf8_bad(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            k = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            k = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            k = 3;
            cp = c & 0x07;
        } else {
            return (long)i;
        }
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80)
                return (long)i;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return (long)i;
        i += k + 1;
    }
    return -1;
}

/* ---- one import run ------------------------------------------------------------ */

typedef enum action { ACT_NONE, ACT_NEW, ACT_CHANGED, ACT_UNCHANGED, ACT_SKIP } action;

typedef struct item {
    uint64_t legacy;
    char key[24];
    char *text;      /* the object's JSON */
    size_t len;
    char md5[33];    /* of its canonical form */
    uint64_t parent; /* near: the parent's legacy id; 0: none */
    legacy_entry e;
    action act;
    unsigned shard;
    uint64_t id;
    char *val;       /* the lookup value to write */
} item;

typedef struct run {
    shard_ctx *ctx;
    const shard_import_options *o;
    source src;
    const char *name;      /* the type or mapping name */
    char lookup[SHARD_DBNAME_MAX];
    char table[65];        /* legacy table */
    char id_col[65];
    unsigned open_shards;
    unsigned threads;
    unsigned batch;
    bool dry;
    shard_import_report rep;
    uint64_t estimate;
    double t0, last_progress;
    /* mapping imports */
    const char *mapname;
    char seq_expr[200];
    /* pending entries found by the lookup scan */
    struct pending {
        uint64_t legacy;
        unsigned shard;
        uint64_t id;  /* adopted object, 0: none found */
    } *pend;
    size_t npend, cappend;
} run;

static void progress(run *r, const char *phase, bool force)
{
    char what[160];
    double t = now_seconds();

    if (!r->o->progress || (!force && t - r->last_progress < 0.5))
        return;
    r->last_progress = t;
    snprintf(what, sizeof what, "import %s: %s", r->name, phase);
    r->o->progress(what, r->rep.rows_read, r->estimate, r->o->payload);
}

static int row_fail(run *r, uint64_t legacy, const char *col, const char *fmt, ...)
    SHARD_PRINTF(4, 5);

/* "legacy row pins.id=17, column title: ..." */
static int row_fail(run *r, uint64_t legacy, const char *col, const char *fmt, ...)
{
    char detail[400];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return shard__fail(SHARD_EINVAL, "legacy row %s.%s=%" PRIu64 "%s%s: %s; refused, nothing "
                      "written for it", r->table, r->id_col, legacy, col ? ", column " : "",
                      col ? col : "", detail);
}

static int parse_i64(const char *s, int64_t *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *v = x;
    return 0;
}

/* One column's value as JSON, its type kept (libshard-import(7)). */
static int column_json(run *r, uint64_t legacy, const MYSQL_FIELD *f, const char *v,
                       unsigned long len, json_t **out)
{
    col_kind k = kind_of(f);
    int64_t i;

    *out = NULL;
    if (!v) {
        *out = json_null();
        return 0;
    }
    switch (k) {
    case COL_INT:
        if (parse_i64(v, &i))
            return row_fail(r, legacy, f->name, "integer \"%.40s\" out of range", v);
        *out = json_integer(i);
        break;
    case COL_UINT: {
        char *end;
        errno = 0;
        unsigned long long u = strtoull(v, &end, 10);
        if (errno || *end || u > INT64_MAX)
            return row_fail(r, legacy, f->name, "%.40s is above 2^63-1, which a JSON integer "
                            "cannot hold", v);
        *out = json_integer((json_int_t)u);
        break;
    }
    case COL_BIT: {
        uint64_t u = 0;
        for (unsigned long b = 0; b < len; b++) {
            if (u >> 56)
                return row_fail(r, legacy, f->name, "a BIT value over 63 bits");
            u = (u << 8) | (unsigned char)v[b];
        }
        if (u > INT64_MAX)
            return row_fail(r, legacy, f->name, "a BIT value over 63 bits");
        *out = json_integer((json_int_t)u);
        break;
    }
    case COL_REAL: {
        char *end;
        double d = strtod(v, &end);
        if (*end || !isfinite(d))
            return row_fail(r, legacy, f->name, "\"%.40s\" is not a finite number", v);
        *out = json_real(d);
        break;
    }
    case COL_DECIMAL:  /* exact digits: a JSON number would pass through a double */
    case COL_TEMPORAL: /* as the server writes it, timestamps in UTC */
        *out = json_stringn(v, len);
        break;
    case COL_TEXT: {
        long bad = import_utf8_bad((const unsigned char *)v, len);
        if (bad >= 0)
            return row_fail(r, legacy, f->name, "not valid UTF-8 (byte %ld of %lu is 0x%02x)",
                            bad, len, (unsigned char)v[bad]);
        *out = json_stringn(v, len);
        break;
    }
    case COL_BINARY:
        return row_fail(r, legacy, f->name, "binary data (a %s column) has no JSON form: "
                        "convert it in a view (e.g. HEX() or TO_BASE64()) and import that",
                        f->type == MYSQL_TYPE_GEOMETRY ? "geometry" : "binary");
    case COL_NULL:
        *out = json_null();
        break;
    default:
        return row_fail(r, legacy, f->name, "column type %d is not supported", (int)f->type);
    }
    return *out ? 0 : shard__fail(SHARD_ENOMEM, "out of memory converting a row");
}

static int dump(const json_t *obj, size_t flags, char **text, size_t *len)
{
    char *s = json_dumps(obj, flags);
    json_malloc_t jm;
    json_free_t jf;
    int rc;

    if (!s)
        return shard__fail(SHARD_ENOMEM, "out of memory serialising an object");
    rc = copy_out(s, strlen(s), text, len);
    json_get_alloc_funcs(&jm, &jf);
    jf(s);
    return rc;
}

/* The object a legacy row becomes, its canonical checksum, and its keys. */
static int row_item(run *r, MYSQL_RES *res, MYSQL_ROW row, item *it)
{
    const shard_import_options *o = r->o;
    MYSQL_FIELD *f = mysql_fetch_fields(res);
    unsigned long *len = mysql_fetch_lengths(res);
    unsigned nf = mysql_num_fields(res);
    json_t *obj = NULL, *v;
    char *canon = NULL;
    size_t clen;
    int64_t legacy = 0;
    int rc = 0;

    memset(it, 0, sizeof *it);
    for (unsigned c = 0; c < nf; c++) {
        if (strcasecmp(f[c].name, r->id_col) == 0) {
            if (!row[c] || !kind_integer(kind_of(&f[c])) || parse_i64(row[c], &legacy) ||
                legacy < 1 || (uint64_t)legacy > SHARD_MAX_LOCAL)
                return shard__fail(SHARD_EINVAL, "legacy row %s.%s=%s: a legacy id must be an "
                                  "integer 1..2^36-1; refused", r->table, r->id_col,
                                  row[c] ? row[c] : "NULL");
        }
    }
    it->legacy = (uint64_t)legacy;
    snprintf(it->key, sizeof it->key, "%" PRIu64, it->legacy);
    for (unsigned c = 0; c < nf && o->near_column; c++)
        if (strcasecmp(f[c].name, o->near_column) == 0 && row[c]) {
            int64_t p;
            if (parse_i64(row[c], &p) || p < 1 || (uint64_t)p > SHARD_MAX_LOCAL)
                return row_fail(r, it->legacy, f[c].name, "parent id %.40s is not a legacy "
                                "id (1..2^36-1)", row[c]);
            it->parent = (uint64_t)p;
        }
    if (o->json_column) {
        json_error_t err;
        for (unsigned c = 0; c < nf && !obj; c++) {
            if (strcasecmp(f[c].name, o->json_column) != 0)
                continue;
            if (!row[c])
                return row_fail(r, it->legacy, f[c].name, "NULL is not a JSON object");
            if (import_utf8_bad((const unsigned char *)row[c], len[c]) >= 0)
                return row_fail(r, it->legacy, f[c].name, "not valid UTF-8");
            obj = json_loadb(row[c], len[c], OBJECT_JSON_FLAGS, &err);
            if (!obj || !json_is_object(obj)) {
                json_decref(obj);
                return row_fail(r, it->legacy, f[c].name, "not a JSON object (%s)",
                                obj ? "another JSON value" : err.text);
            }
        }
        /* The legacy id is always a field of the object (the next pass finds
         * an interrupted pass's objects by it). */
        v = json_object_get(obj, r->id_col);
        if (v && !(json_is_integer(v) && json_integer_value(v) == legacy)) {
            json_decref(obj);
            return row_fail(r, it->legacy, o->json_column, "its field \"%s\" differs from "
                            "the row's id", r->id_col);
        }
        if (!v && json_object_set_new(obj, r->id_col, json_integer(legacy)))
            rc = shard__fail(SHARD_ENOMEM, "out of memory converting a row");
    } else {
        if (!(obj = json_object()))
            return shard__fail(SHARD_ENOMEM, "out of memory converting a row");
        for (unsigned c = 0; rc == 0 && c < nf; c++) {
            if ((rc = column_json(r, it->legacy, &f[c], row[c], len[c], &v)) == 0 &&
                json_object_set_new(obj, f[c].name, v))
                rc = shard__fail(SHARD_ENOMEM, "out of memory converting a row");
        }
    }
    if (rc == 0)
        rc = dump(obj, JSON_COMPACT | JSON_PRESERVE_ORDER, &it->text, &it->len);
    if (rc == 0 && (rc = dump(obj, JSON_COMPACT | JSON_SORT_KEYS, &canon, &clen)) == 0)
        rc = md5_hex(canon, clen, it->md5);
    free(canon);
    json_decref(obj);
    return rc;
}

static void items_free(item *it, size_t n)
{
    for (size_t i = 0; it && i < n; i++) {
        free(it[i].text);
        free(it[i].val);
    }
    free(it);
}

/* Rows of the legacy table: the batch after `after` (0: the first). */
static int read_rows(run *r, const char *where, MYSQL_RES **res)
{
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_addf(&q, "SELECT * FROM `%s`.`%s`", r->src.db, r->table);
    sql_add(&q, where);
    rc = sql_check(&q);
    if (rc == 0)
        rc = source_query(&r->src, q.s, q.len, res);
    sql_free(&q);
    return rc;
}

static int res_items(run *r, MYSQL_RES *res, item **out, size_t *n)
{
    size_t rows = mysql_num_rows(res), k = 0;
    item *it = shard__calloc(rows ? rows : 1, sizeof *it);
    MYSQL_ROW row;
    int rc = 0;

    if (!it)
        return shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", rows);
    while (rc == 0 && (row = mysql_fetch_row(res)))
        if ((rc = row_item(r, res, row, &it[k])) == 0)
            k++;
    if (rc) {
        items_free(it, k + 1);
        return rc;
    }
    *out = it;
    *n = k;
    return 0;
}

/* ---- writing objects --------------------------------------------------------- */

typedef struct write_job {
    run *r;
    item **items;  /* NEW: grouped by shard; CHANGED/delete: one each */
    size_t n;
    size_t *group; /* NEW: start of each shard's run; group[ngroups] = n */
} write_job;

/* One transaction per shard for its new objects: one commit, not one per
 * row, and multi-row INSERTs, not one statement per row. */
static int create_group(void *arg, size_t g, unsigned worker)
{
    write_job *j = arg;
    size_t lo = j->group[g], hi = j->group[g + 1], n = hi - lo;
    unsigned shard = j->items[lo]->shard;
    const char **texts = shard__calloc(n, sizeof *texts);
    size_t *lens = shard__calloc(n, sizeof *lens);
    uint64_t *ids = shard__calloc(n, sizeof *ids);
    int rc = 0;

    (void)worker;
    if (!texts || !lens || !ids) {
        free(texts);
        free(lens);
        free(ids);
        return shard__fail(SHARD_ENOMEM, "out of memory creating %zu objects", n);
    }
    for (size_t i = 0; i < n; i++) {
        texts[i] = j->items[lo + i]->text;
        lens[i] = j->items[lo + i]->len;
    }
    for (unsigned attempt = 0; attempt < 5; attempt++) {
        shard_txn *txn;
        if ((rc = shard_txn_begin(j->r->ctx, shard, &txn)))
            break;
        if ((rc = txn_object_create_many(txn, j->r->o->type, texts, lens, n, ids, NULL)) == 0)
            for (size_t i = 0; i < n; i++)
                j->items[lo + i]->id = ids[i];
        if (rc) {
            shard_txn_rollback(txn);
        } else if ((rc = shard_txn_commit(txn)) != 0) {
            break; /* its outcome may be unknown: the pending entries settle it */
        }
        if (rc == 0 || (rc != SHARD_EMOVED && rc != SHARD_ECONNECT && rc != SHARD_EBUSY))
            break;
        for (size_t i = lo; i < hi; i++)
            j->items[i]->id = 0;
        sleep_ms(10.0 * (attempt + 1));
    }
    if (rc)
        for (size_t i = lo; i < hi; i++)
            j->items[i]->id = 0;
    if (rc == SHARD_ETOOBIG) {
        /* Name the row: the biggest is the one no statement can carry. */
        size_t big = lo;
        for (size_t i = lo; i < hi; i++)
            if (j->items[i]->len > j->items[big]->len)
                big = i;
        shard__fail_prefix(rc, "legacy row %s.%s=%" PRIu64 " (%zu bytes as JSON): ",
                          j->r->table, j->r->id_col, j->items[big]->legacy,
                          j->items[big]->len);
    }
    free(texts);
    free(lens);
    free(ids);
    return rc;
}

typedef struct replace_arg {
    const char *text;
    size_t len;
} replace_arg;

/* The object becomes the row's JSON, whatever it held. */
static int replace_with(json_t *obj, void *payload)
{
    replace_arg *a = payload;
    json_t *v = json_loadb(a->text, a->len, JSON_ALLOW_NUL, NULL);
    int rc = v && json_object_clear(obj) == 0 && json_object_update(obj, v) == 0;
    json_decref(v);
    return rc ? 0 : SHARD_ENOMEM;
}

static int update_one(void *arg, size_t i, unsigned worker)
{
    write_job *j = arg;
    item *it = j->items[i];
    replace_arg a = {it->text, it->len};
    int rc = shard_object_update(j->r->ctx, it->id, replace_with, &a);

    (void)worker;
    if (rc == SHARD_ENOTFOUND) {
        /* Deleted through libshard since: it stays deleted (the library's
         * side wins once the application writes there). */
        it->act = ACT_UNCHANGED;
        ctx_log(j->r->ctx, SHARD_LOG_WARN, "import %s: legacy row %s changed, but object "
                "%" PRIu64 " was deleted through libshard: left deleted", j->r->name, it->key,
                it->id);
        rc = 0;
    }
    return rc;
}

static int delete_one(void *arg, size_t i, unsigned worker)
{
    write_job *j = arg;
    int rc = shard_object_delete(j->r->ctx, j->items[i]->id, 0);

    (void)worker;
    return rc == SHARD_ENOTFOUND ? 0 : rc; /* already deleted */
}

static int cmp_item_shard(const void *a, const void *b)
{
    const item *x = *(item *const *)a, *y = *(item *const *)b;
    return x->shard < y->shard ? -1 : x->shard > y->shard;
}

/* Write the lookup values it[k]->val of the given items. */
static int put_vals(run *r, item **its, size_t n)
{
    char **keys = shard__calloc(n ? n : 1, sizeof *keys);
    char **vals = shard__calloc(n ? n : 1, sizeof *vals);
    int rc = 0;

    if (!keys || !vals)
        rc = shard__fail(SHARD_ENOMEM, "out of memory writing lookup entries");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        keys[i] = its[i]->key;
        vals[i] = its[i]->val;
    }
    if (rc == 0)
        rc = legacy_kv_put_many(r->ctx, r->lookup, keys, vals, n, r->threads);
    free(keys);
    free(vals);
    return rc;
}

static int set_val(item *it, const char *fmt, ...) SHARD_PRINTF(2, 3);

static int set_val(item *it, const char *fmt, ...)
{
    char buf[80];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(it->val);
    it->val = shard__strdup(buf);
    return it->val ? 0 : shard__fail(SHARD_ENOMEM, "out of memory");
}

/*
 * New objects: lookup entries "pending S" first, then the objects (one
 * transaction per shard, shards in parallel), then the entries "ID MD5" of
 * every object that was made, even when some group failed.
 */
static int create_items(run *r, item **its, size_t n, uint64_t *made)
{
    size_t *group = shard__calloc(n + 1, sizeof *group), ng = 0, nmade = 0;
    write_job j = {r, its, n, group};
    int rc = 0, rc2;

    *made = 0;
    if (!group)
        return shard__fail(SHARD_ENOMEM, "out of memory creating %zu objects", n);
    qsort(its, n, sizeof *its, cmp_item_shard);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (i == 0 || its[i]->shard != its[i - 1]->shard)
            group[ng++] = i;
        rc = set_val(its[i], "pending %u", its[i]->shard);
    }
    group[ng] = n;
    if (rc == 0)
        rc = put_vals(r, its, n);
    if (rc == 0)
        rc = fanout_run(ng, r->threads, create_group, &j);
    if (n && shard__import_hook)
        shard__import_hook("created");
    for (size_t i = 0; i < n; i++) {
        if (!its[i]->id)
            continue;
        if ((rc2 = set_val(its[i], "%" PRIu64 " %s", its[i]->id, its[i]->md5))) {
            rc = rc ? rc : rc2;
            break;
        }
        legacy_cache_put(r->ctx, r->o->type, its[i]->legacy, its[i]->id);
        its[nmade++] = its[i];
    }
    if (nmade) {
        shard_errsave saved;
        shard__error_save(&saved, rc);
        rc2 = put_vals(r, its, nmade);
        if (rc)
            shard__error_restore(&saved);
        else
            rc = rc2;
    }
    if (rc == 0)
        *made = nmade;
    free(group);
    return rc;
}

static int change_items(run *r, item **its, size_t n, uint64_t *changed)
{
    write_job j = {r, its, n, NULL};
    size_t k = 0;
    int rc = fanout_run(n, r->threads, update_one, &j);

    *changed = 0;
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if ((rc = set_val(its[i], "%" PRIu64 " %s", its[i]->id, its[i]->md5)))
            return rc;
        *changed += its[i]->act == ACT_CHANGED;
        k++;
    }
    return put_vals(r, its, k);
}

/* ---- a pass over a legacy table --------------------------------------------- */

/* Place the batch's new rows near their parents: one resolution for all. */
static int place_near(run *r, item *it, size_t n)
{
    uint64_t *parents = shard__calloc(n, sizeof *parents), *pids = shard__calloc(n, sizeof *pids);
    size_t np = 0;
    int rc = 0;

    if (!parents || !pids) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (it[i].act == ACT_NEW && it[i].parent)
            parents[np++] = it[i].parent;
    if ((rc = shard_legacy_resolve_many(r->ctx, r->o->near_type, parents, np, pids)))
        goto out;
    np = 0;
    for (size_t i = 0; i < n; i++) {
        if (it[i].act != ACT_NEW || !it[i].parent)
            continue;
        if (!pids[np]) {
            rc = shard__fail(SHARD_ENOTFOUND, "legacy row %s.%s=%" PRIu64 ": its %s %" PRIu64
                            " has no lookup entry: import that parent first", r->table,
                            r->id_col, it[i].legacy, r->o->near_column, it[i].parent);
            goto out;
        }
        it[i].shard = shard_id_shard(pids[np++]);
    }
out:
    free(parents);
    free(pids);
    return rc;
}

static int classify(run *r, item *it, size_t n)
{
    char **keys = shard__calloc(n, sizeof *keys), **vals = shard__calloc(n, sizeof *vals);
    int rc = 0;

    if (!keys || !vals) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = it[i].key;
    if ((rc = legacy_kv_get_many(r->ctx, r->lookup, keys, n, vals)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        legacy_entry_parse(vals[i], &it[i].e);
        switch (it[i].e.state) {
        case LEGACY_ABSENT:
        case LEGACY_DELETED: /* the row came back: a new object */
            it[i].act = ACT_NEW;
            it[i].shard = (unsigned)(ctx_random() % r->open_shards);
            break;
        case LEGACY_PENDING: /* settled after the lookup scan */
            it[i].act = ACT_SKIP;
            break;
        case LEGACY_LIVE:
            /* An object never moves: a row whose parent changed keeps its
             * object where it is (its ID names the shard). */
            it[i].id = it[i].e.id;
            it[i].act = strcmp(it[i].e.md5, it[i].md5) ? ACT_CHANGED : ACT_UNCHANGED;
            break;
        default:
            rc = shard__fail(SHARD_EINVAL, "lookup %s, key %s: \"%.60s\" is not an entry "
                            "libshard wrote", r->lookup, it[i].key, vals[i]);
            goto out;
        }
    }
    if (r->o->near_column)
        rc = place_near(r, it, n);
out:
    for (size_t i = 0; vals && i < n; i++)
        free(vals[i]);
    free(keys);
    free(vals);
    return rc;
}

static int process_batch(run *r, item *it, size_t n)
{
    item **nw = shard__calloc(n, sizeof *nw), **ch = shard__calloc(n, sizeof *ch);
    size_t nn = 0, nc = 0;
    uint64_t made = 0, changed = 0;
    int rc;

    if (!nw || !ch) {
        free(nw);
        free(ch);
        return shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", n);
    }
    rc = classify(r, it, n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (it[i].act == ACT_NEW)
            nw[nn++] = &it[i];
        else if (it[i].act == ACT_CHANGED)
            ch[nc++] = &it[i];
        else if (it[i].act == ACT_UNCHANGED)
            r->rep.unchanged++;
    }
    if (rc == 0 && r->dry) {
        r->rep.created += nn;
        r->rep.changed += nc;
    } else if (rc == 0) {
        if ((rc = create_items(r, nw, nn, &made)) == 0)
            rc = change_items(r, ch, nc, &changed);
        r->rep.created += made;
        r->rep.changed += changed;
        r->rep.unchanged += nc - changed;
    }
    free(nw);
    free(ch);
    return rc;
}

static int forward_scan(run *r)
{
    uint64_t last = 0;
    bool first = true;

    for (;;) {
        MYSQL_RES *res;
        item *it = NULL;
        size_t n = 0;
        char where[200];
        int rc;

        /* The first batch has no lower bound, so ids below 1 are seen (and
         * refused), never skipped. */
        if (first)
            snprintf(where, sizeof where, " ORDER BY `%s` LIMIT %u", r->id_col, r->batch);
        else
            snprintf(where, sizeof where, " WHERE `%s` > %" PRIu64 " ORDER BY `%s` LIMIT %u",
                     r->id_col, last, r->id_col, r->batch);
        first = false;
        if ((rc = read_rows(r, where, &res)))
            return rc;
        rc = res_items(r, res, &it, &n);
        mysql_free_result(res);
        if (rc)
            return rc;
        r->rep.rows_read += n;
        if (n)
            last = it[n - 1].legacy;
        rc = n ? process_batch(r, it, n) : 0;
        items_free(it, n);
        if (rc)
            return rc;
        progress(r, "rows", false);
        if (n < r->batch)
            return 0;
    }
}

/* ---- the lookup scan: rows that are gone, and pending entries ------------------- */

static int add_pending(run *r, uint64_t legacy, unsigned shard)
{
    if (r->npend == r->cappend) {
        size_t cap = r->cappend ? r->cappend * 2 : 64;
        void *p = shard__realloc(r->pend, cap * sizeof *r->pend);
        if (!p)
            return shard__fail(SHARD_ENOMEM, "out of memory");
        r->pend = p;
        r->cappend = cap;
    }
    r->pend[r->npend++] = (struct pending){legacy, shard, 0};
    return 0;
}

/* Which of ids[0..n) exist in the legacy table: present[i]. */
static int rows_present(run *r, const uint64_t *ids, size_t n, bool *present)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    sqlbuf q;
    int rc;

    for (size_t i = 0; i < n; i++)
        present[i] = false;
    if (!n)
        return 0;
    sql_init(&q);
    sql_addf(&q, "SELECT `%s` FROM `%s`.`%s` WHERE `%s` IN (", r->id_col, r->src.db, r->table,
             r->id_col);
    for (size_t i = 0; i < n; i++) {
        sql_add(&q, i ? "," : "");
        sql_u64(&q, ids[i]);
    }
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) == 0)
        rc = source_query(&r->src, q.s, q.len, &res);
    sql_free(&q);
    if (rc)
        return rc;
    while ((row = mysql_fetch_row(res))) {
        uint64_t v = row[0] ? strtoull(row[0], NULL, 10) : 0;
        for (size_t i = 0; i < n; i++) /* ids are in key order, not numeric: scan */
            if (ids[i] == v)
                present[i] = true;
    }
    mysql_free_result(res);
    return 0;
}

static int gone_batch(void *payload, size_t n, char **keys, char **vals)
{
    run *r = payload;
    uint64_t *ids = shard__calloc(n, sizeof *ids);
    item *it = shard__calloc(n, sizeof *it);
    item **del = shard__calloc(n, sizeof *del);
    bool *present = shard__calloc(n, sizeof *present);
    size_t nl = 0, nd = 0;
    int rc = 0;

    if (!ids || !it || !del || !present) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory scanning %s", r->lookup);
        goto out;
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        legacy_entry e;
        uint64_t legacy = strtoull(keys[i], NULL, 10);
        legacy_entry_parse(vals[i], &e);
        if (e.state == LEGACY_PENDING)
            rc = add_pending(r, legacy, e.shard);
        else if (e.state == LEGACY_LIVE) {
            it[nl].legacy = ids[nl] = legacy;
            it[nl].id = e.id;
            snprintf(it[nl].key, sizeof it[nl].key, "%s", keys[i]);
            nl++;
        }
    }
    if (rc || (rc = rows_present(r, ids, nl, present)))
        goto out;
    for (size_t i = 0; i < nl; i++)
        if (!present[i])
            del[nd++] = &it[i];
    if (nd && !r->dry) {
        write_job j = {r, del, nd, NULL};
        if ((rc = fanout_run(nd, r->threads, delete_one, &j)))
            goto out;
        for (size_t i = 0; rc == 0 && i < nd; i++)
            rc = set_val(del[i], "%" PRIu64 " deleted", del[i]->id);
        if (rc == 0)
            rc = put_vals(r, del, nd);
    }
    if (rc == 0)
        r->rep.deleted += nd;
    progress(r, "looking for deleted rows", false);
out:
    for (size_t i = 0; it && i < n; i++)
        free(it[i].val);
    free(ids);
    free(it);
    free(del);
    free(present);
    return rc;
}

/* ---- settling an interrupted pass ------------------------------------------------ */

static int cmp_pending(const void *a, const void *b)
{
    const struct pending *x = a, *y = b;
    return x->legacy < y->legacy ? -1 : x->legacy > y->legacy;
}

/* An object naming a pending legacy id on the shard its entry names was
 * made by the interrupted pass: adopt it. */
static int adopt_scan(uint64_t id, const char *json, size_t len, void *payload)
{
    run *r = payload;
    json_t *obj, *v;
    struct pending key, *p;

    if (!memmem(json, len, r->id_col, strlen(r->id_col)))
        return 0;
    obj = json_loadb(json, len, JSON_ALLOW_NUL, NULL);
    v = obj ? json_object_get(obj, r->id_col) : NULL;
    if (!json_is_integer(v) || json_integer_value(v) < 1) {
        json_decref(obj);
        return 0;
    }
    key.legacy = (uint64_t)json_integer_value(v);
    json_decref(obj);
    p = bsearch(&key, r->pend, r->npend, sizeof *r->pend, cmp_pending);
    if (!p || p->shard != shard_id_shard(id))
        return 0;
    if (p->id) {
        /* Never two objects for one row: the later one goes. */
        ctx_log(r->ctx, SHARD_LOG_WARN, "import %s: objects %" PRIu64 " and %" PRIu64 " both "
                "hold legacy id %" PRIu64 "; deleting %" PRIu64, r->name, p->id, id, p->legacy,
                id);
        return shard_object_delete(r->ctx, id, 0);
    }
    p->id = id;
    return 0;
}

static int settle_pending(run *r)
{
    size_t done = 0;
    int rc = 0;

    if (!r->npend)
        return 0;
    qsort(r->pend, r->npend, sizeof *r->pend, cmp_pending);
    if (!r->dry) {
        progress(r, "settling an interrupted pass", true);
        if ((rc = shard_scatter_scan(r->ctx, r->o->type, adopt_scan, r)))
            return rc;
    }
    while (rc == 0 && done < r->npend) {
        size_t n = r->npend - done < r->batch ? r->npend - done : r->batch;
        sqlbuf w;
        MYSQL_RES *res;
        item *it = NULL, **nw = NULL, **ad = NULL, **gone = NULL;
        size_t nit = 0, nn = 0, na = 0, ng = 0;
        char **dropkeys = NULL;
        size_t ndrop = 0;

        sql_init(&w);
        sql_addf(&w, " WHERE `%s` IN (", r->id_col);
        for (size_t i = 0; i < n; i++) {
            sql_add(&w, i ? "," : "");
            sql_u64(&w, r->pend[done + i].legacy);
        }
        sql_addf(&w, ") ORDER BY `%s`", r->id_col);
        rc = sql_check(&w);
        if (rc == 0)
            rc = read_rows(r, w.s, &res);
        sql_free(&w);
        if (rc)
            break;
        rc = res_items(r, res, &it, &nit);
        mysql_free_result(res);
        if (rc)
            break;
        nw = shard__calloc(n, sizeof *nw);
        ad = shard__calloc(n, sizeof *ad);
        gone = shard__calloc(n, sizeof *gone);
        dropkeys = shard__calloc(n, sizeof *dropkeys);
        item *gi = shard__calloc(n, sizeof *gi);
        if (!nw || !ad || !gone || !dropkeys || !gi)
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
        for (size_t i = 0, k = 0; rc == 0 && i < n; i++) {
            struct pending *p = &r->pend[done + i];
            while (k < nit && it[k].legacy < p->legacy)
                k++;
            if (k < nit && it[k].legacy == p->legacy) {
                it[k].shard = p->shard;
                it[k].id = p->id;
                it[k].act = p->id ? ACT_CHANGED : ACT_NEW;
                if (p->id)
                    ad[na++] = &it[k];
                else
                    nw[nn++] = &it[k];
            } else if (p->id) { /* made, and its row is gone since */
                gi[ng].id = p->id;
                gi[ng].legacy = p->legacy;
                snprintf(gi[ng].key, sizeof gi[ng].key, "%" PRIu64, p->legacy);
                gone[ng] = &gi[ng];
                ng++;
            } else { /* never made, and gone: forget the claim */
                if (!(dropkeys[ndrop] = shard__malloc(24)))
                    rc = shard__fail(SHARD_ENOMEM, "out of memory");
                else
                    snprintf(dropkeys[ndrop++], 24, "%" PRIu64, p->legacy);
            }
        }
        if (rc == 0 && r->dry) {
            r->rep.created += nn + na;
        } else if (rc == 0) {
            uint64_t made = 0, changed = 0;
            if ((rc = create_items(r, nw, nn, &made)) == 0 &&
                (rc = change_items(r, ad, na, &changed)) == 0) {
                r->rep.created += made + na;
                r->rep.adopted += na;
            }
            if (rc == 0 && ng) {
                write_job j = {r, gone, ng, NULL};
                if ((rc = fanout_run(ng, r->threads, delete_one, &j)) == 0) {
                    for (size_t i = 0; rc == 0 && i < ng; i++)
                        rc = set_val(gone[i], "%" PRIu64 " deleted", gone[i]->id);
                    if (rc == 0 && (rc = put_vals(r, gone, ng)) == 0)
                        r->rep.deleted += ng;
                }
            }
            if (rc == 0 && ndrop)
                rc = legacy_kv_delete_many(r->ctx, r->lookup, dropkeys, ndrop, r->threads);
        }
        for (size_t i = 0; dropkeys && i < ndrop; i++)
            free(dropkeys[i]);
        for (size_t i = 0; gi && i < ng; i++)
            free(gi[i].val);
        free(dropkeys);
        free(gi);
        free(nw);
        free(ad);
        free(gone);
        items_free(it, nit);
        done += n;
    }
    return rc;
}

/* ---- setting a run up ---------------------------------------------------------- */

static int check_options(const shard_import_options *o)
{
    if (!o)
        return shard__fail(SHARD_EINVAL, "shard_import: NULL options");
    if (o->version < 1 || o->version > SHARD_IMPORT_OPTIONS_VERSION)
        return shard__fail(SHARD_EINVAL, "shard_import_options.version %u is not supported "
                          "(this library knows 1..%d)", o->version,
                          SHARD_IMPORT_OPTIONS_VERSION);
    if (o->flags & ~SHARD_IMPORT_DRY_RUN)
        return shard__fail(SHARD_EINVAL, "shard_import_options.flags: unknown flags 0x%x",
                          (unsigned)o->flags);
    if (!o->source)
        return shard__fail(SHARD_EINVAL, "shard_import_options.source is NULL");
    if (o->threads > MAX_THREADS)
        return shard__fail(SHARD_EINVAL, "shard_import_options.threads: %u is over %d",
                          o->threads, MAX_THREADS);
    if (o->batch_rows > MAX_BATCH)
        return shard__fail(SHARD_EINVAL, "shard_import_options.batch_rows: %u is over %d",
                          o->batch_rows, MAX_BATCH);
    return check_name("legacy table", o->table);
}

static int run_init(run *r, shard_ctx *ctx, const shard_import_options *o)
{
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->o = o;
    r->threads = o->threads ? o->threads : 4;
    r->batch = o->batch_rows ? o->batch_rows : DEFAULT_BATCH;
    r->dry = (o->flags & SHARD_IMPORT_DRY_RUN) != 0;
    r->t0 = now_seconds();
    snprintf(r->table, sizeof r->table, "%s", o->table);
    return 0;
}

static void run_end(run *r, shard_import_report *report, int rc)
{
    r->rep.seconds = now_seconds() - r->t0;
    if (rc == 0)
        progress(r, "done", true);
    source_close(&r->src);
    free(r->pend);
    if (report)
        *report = r->rep;
}

/* The columns of the legacy table, from a statement that reads no row. */
static int probe(run *r, MYSQL_RES **res)
{
    return read_rows(r, " LIMIT 0", res);
}

static const MYSQL_FIELD *field_named(MYSQL_RES *res, const char *name)
{
    MYSQL_FIELD *f = mysql_fetch_fields(res);
    for (unsigned i = 0; name && i < mysql_num_fields(res); i++)
        if (strcasecmp(f[i].name, name) == 0)
            return &f[i];
    return NULL;
}

/* The id column must be a key of its own (keyset reads and lookups by it). */
static int check_unique(run *r, const char *col)
{
    char sql[600], v[80];
    int rc;

    snprintf(sql, sizeof sql, "SELECT INDEX_NAME FROM information_schema.STATISTICS WHERE "
             "TABLE_SCHEMA = '%s' AND TABLE_NAME = '%s' GROUP BY INDEX_NAME HAVING COUNT(*) "
             "= 1 AND MAX(NON_UNIQUE) = 0 AND MAX(COLUMN_NAME) = '%s' LIMIT 1", r->src.db,
             r->table, col);
    if ((rc = source_value(&r->src, sql, v, sizeof v)))
        return rc;
    if (!v[0]) {
        /* A view has no index of its own: its base table's key serves it. */
        snprintf(sql, sizeof sql, "SELECT TABLE_TYPE FROM information_schema.TABLES WHERE "
                 "TABLE_SCHEMA = '%s' AND TABLE_NAME = '%s'", r->src.db, r->table);
        if ((rc = source_value(&r->src, sql, v, sizeof v)))
            return rc;
        if (strcmp(v, "VIEW") == 0)
            return 0;
        v[0] = '\0';
    }
    if (!v[0])
        return shard__fail(SHARD_EINVAL, "%s: column %s.%s is not the primary key or a unique "
                          "key of its own: the import reads in its order and finds rows by it",
                          r->src.label, r->table, col);
    return 0;
}

static void estimate(run *r)
{
    char sql[400], v[32];
    snprintf(sql, sizeof sql, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE "
             "TABLE_SCHEMA = '%s' AND TABLE_NAME = '%s'", r->src.db, r->table);
    if (source_value(&r->src, sql, v, sizeof v) == 0)
        r->estimate = strtoull(v, NULL, 10);
    shard__clear_error();
}

static int table_setup(run *r)
{
    const shard_import_options *o = r->o;
    const shard_legacydef *def;
    const MYSQL_FIELD *f;
    shard_map *map = ctx_map(r->ctx);
    MYSQL_RES *res = NULL;
    char lock[80];
    int rc = 0;

    snprintf(r->id_col, sizeof r->id_col, "%s", o->id_column ? o->id_column : "id");
    if ((rc = object_table(map, o->type, &r->name)))
        goto out;
    if (!(def = map_legacy_of_type(map, o->type))) {
        rc = shard__fail(SHARD_EINVAL, "the map has no legacy lookup for %s: add \"legacy\": "
                        "{\"%s\": {}} and \"legacy_%s\" to mod_shards.tables, publish the "
                        "map, run shardctl schema apply", r->name, r->name, r->name);
        goto out;
    }
    snprintf(r->lookup, sizeof r->lookup, "%s", def->table);
    r->open_shards = map->open_shards;
    if (o->near_column && !map_legacy_of_type(map, o->near_type)) {
        rc = shard__fail(SHARD_EINVAL, "near: type %u has no legacy lookup in the map",
                        o->near_type);
        goto out;
    }
    if ((rc = check_name("id column", r->id_col)) ||
        (o->json_column && (rc = check_name("JSON column", o->json_column))) ||
        (o->near_column && (rc = check_name("near column", o->near_column))))
        goto out;
    lock_name(r->name, lock);
    if ((rc = source_open(r->ctx, o, r->dry ? NULL : lock, &r->src)) || (rc = probe(r, &res)))
        goto out;
    f = field_named(res, r->id_col);
    if (f) /* the column's own spelling names the object's field */
        snprintf(r->id_col, sizeof r->id_col, "%s", f->name);
    if (!f || !kind_integer(kind_of(f)))
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is %s", r->src.label, r->table, r->id_col,
                        f ? "not an integer column" : "not a column");
    else if (o->json_column && !((f = field_named(res, o->json_column)) &&
                                 kind_of(f) == COL_TEXT))
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is %s", r->src.label, r->table,
                        o->json_column, f ? "not a text column" : "not a column");
    else if (o->near_column && !((f = field_named(res, o->near_column)) &&
                                 kind_integer(kind_of(f))))
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is %s", r->src.label, r->table,
                        o->near_column, f ? "not an integer column" : "not a column");
    else
        rc = check_unique(r, r->id_col);
    if (rc == 0)
        estimate(r);
out:
    mysql_free_result(res);
    shard_map_free(map);
    return rc;
}

int shard_import_table(shard_ctx *ctx, const shard_import_options *opts,
                       shard_import_report *report)
{
    run r;
    int rc;

    if (report)
        memset(report, 0, sizeof *report);
    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_import_table: NULL context");
    if ((rc = check_options(opts)))
        return rc;
    run_init(&r, ctx, opts);
    if ((rc = table_setup(&r)) == 0 && (rc = forward_scan(&r)) == 0 &&
        (rc = legacy_kv_scan(ctx, r.lookup, gone_batch, &r)) == 0)
        rc = settle_pending(&r);
    run_end(&r, report, rc);
    return rc;
}

/* ---- join tables ---------------------------------------------------------------- */

typedef struct edge {
    uint64_t f, t;    /* legacy ids */
    int64_t seq;
    uint64_t fid, tid; /* native IDs */
    char key[48];      /* "F:T" */
    char *val;         /* "FROMID TOID SEQ" */
    bool write;
} edge;

typedef struct edge_job {
    run *r;
    edge **e;
} edge_job;

static int add_edge(void *arg, size_t i, unsigned worker)
{
    edge_job *j = arg;
    (void)worker;
    return shard_mapping_add(j->r->ctx, j->r->mapname, j->e[i]->fid, j->e[i]->tid,
                             j->e[i]->seq);
}

static int remove_edge(void *arg, size_t i, unsigned worker)
{
    edge_job *j = arg;
    int rc = shard_mapping_remove(j->r->ctx, j->r->mapname, j->e[i]->fid, j->e[i]->tid);
    (void)worker;
    return rc == SHARD_ENOTFOUND ? 0 : rc;
}

static int edge_fail(run *r, const edge *e, const char *fmt, ...) SHARD_PRINTF(3, 4);

static int edge_fail(run *r, const edge *e, const char *fmt, ...)
{
    char detail[300];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return shard__fail(SHARD_ENOTFOUND, "legacy row %s (%s=%" PRIu64 ", %s=%" PRIu64 "): %s; "
                      "refused", r->table, r->o->from_column, e->f, r->o->to_column, e->t,
                      detail);
}

/* Resolve both ends, compare with the record, write what differs. */
static int edge_batch(run *r, edge *e, size_t n)
{
    uint64_t *in = shard__calloc(n, sizeof *in), *out = shard__calloc(n, sizeof *out);
    char **keys = shard__calloc(n, sizeof *keys), **vals = shard__calloc(n, sizeof *vals);
    edge **w = shard__calloc(n, sizeof *w);
    size_t nw = 0, nnew = 0;
    int rc = 0;

    if (!in || !out || !keys || !vals || !w) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        in[i] = e[i].f;
    if ((rc = shard_legacy_resolve_many(r->ctx, r->o->from_type, in, n, out)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (!(e[i].fid = out[i])) {
            rc = edge_fail(r, &e[i], "%s %" PRIu64 " has no lookup entry (import it first)",
                           r->o->from_column, e[i].f);
            goto out;
        }
        in[i] = e[i].t;
    }
    if ((rc = shard_legacy_resolve_many(r->ctx, r->o->to_type, in, n, out)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        char v[80];
        if (!(e[i].tid = out[i])) {
            rc = edge_fail(r, &e[i], "%s %" PRIu64 " has no lookup entry (import it first)",
                           r->o->to_column, e[i].t);
            goto out;
        }
        snprintf(v, sizeof v, "%" PRIu64 " %" PRIu64 " %" PRId64, e[i].fid, e[i].tid, e[i].seq);
        if (!(e[i].val = shard__strdup(v))) {
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
            goto out;
        }
        keys[i] = e[i].key;
    }
    if ((rc = legacy_kv_get_many(r->ctx, r->lookup, keys, n, vals)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (vals[i] && strcmp(vals[i], e[i].val) == 0) {
            r->rep.unchanged++;
            continue;
        }
        nnew += !vals[i];
        w[nw++] = &e[i];
    }
    if (!r->dry && nw) {
        edge_job j = {r, w};
        if ((rc = fanout_run(nw, r->threads, add_edge, &j)))
            goto out;
        for (size_t i = 0; i < nw; i++) {
            keys[i] = w[i]->key;
            free(vals[i]);
            vals[i] = NULL;
        }
        char **wv = shard__calloc(nw, sizeof *wv);
        if (!wv) {
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < nw; i++)
            wv[i] = w[i]->val;
        rc = legacy_kv_put_many(r->ctx, r->lookup, keys, wv, nw, r->threads);
        free(wv);
        if (rc)
            goto out;
    }
    r->rep.created += nnew;
    r->rep.changed += nw - nnew;
out:
    for (size_t i = 0; vals && i < n; i++)
        free(vals[i]);
    free(in);
    free(out);
    free(keys);
    free(vals);
    free(w);
    return rc;
}

static int edge_forward(run *r)
{
    const shard_import_options *o = r->o;
    uint64_t lf = 0, lt = 0;
    bool first = true;

    for (;;) {
        MYSQL_RES *res;
        MYSQL_ROW row;
        edge *e = NULL;
        size_t n = 0;
        sqlbuf q;
        int rc;

        sql_init(&q);
        sql_addf(&q, "SELECT `%s`, `%s`, %s FROM `%s`.`%s`", o->from_column, o->to_column,
                 r->seq_expr, r->src.db, r->table);
        if (!first) {
            sql_addf(&q, " WHERE `%s` > ", o->from_column);
            sql_u64(&q, lf);
            sql_addf(&q, " OR (`%s` = ", o->from_column);
            sql_u64(&q, lf);
            sql_addf(&q, " AND `%s` > ", o->to_column);
            sql_u64(&q, lt);
            sql_add(&q, ")");
        }
        sql_addf(&q, " ORDER BY `%s`, `%s` LIMIT %u", o->from_column, o->to_column, r->batch);
        first = false;
        rc = sql_check(&q);
        if (rc == 0)
            rc = source_query(&r->src, q.s, q.len, &res);
        sql_free(&q);
        if (rc)
            return rc;
        if (!(e = shard__calloc(mysql_num_rows(res) + 1, sizeof *e)))
            rc = shard__fail(SHARD_ENOMEM, "out of memory");
        while (rc == 0 && (row = mysql_fetch_row(res))) {
            int64_t f, t, s = 0;
            if (!row[0] || !row[1] || parse_i64(row[0], &f) || parse_i64(row[1], &t) ||
                f < 1 || t < 1 || (uint64_t)f > SHARD_MAX_LOCAL ||
                (uint64_t)t > SHARD_MAX_LOCAL) {
                rc = shard__fail(SHARD_EINVAL, "legacy row %s (%s=%s, %s=%s): both ends must "
                                "be legacy ids (1..2^36-1); refused", r->table,
                                o->from_column, row[0] ? row[0] : "NULL", o->to_column,
                                row[1] ? row[1] : "NULL");
                break;
            }
            if (row[2] && parse_i64(row[2], &s)) {
                rc = shard__fail(SHARD_EINVAL, "legacy row %s (%s=%s, %s=%s): sequence \"%.40s\""
                                " is not a 64-bit integer; refused", r->table, o->from_column,
                                row[0], o->to_column, row[1], row[2]);
                break;
            }
            e[n].f = (uint64_t)f;
            e[n].t = (uint64_t)t;
            e[n].seq = o->seq_column ? s : t;
            snprintf(e[n].key, sizeof e[n].key, "%" PRIu64 ":%" PRIu64, e[n].f, e[n].t);
            n++;
        }
        mysql_free_result(res);
        r->rep.rows_read += n;
        if (rc == 0 && n) {
            lf = e[n - 1].f;
            lt = e[n - 1].t;
            rc = edge_batch(r, e, n);
        }
        for (size_t i = 0; e && i < n; i++)
            free(e[i].val);
        free(e);
        if (rc)
            return rc;
        progress(r, "rows", false);
        if (n < r->batch)
            return 0;
    }
}

/* Recorded rows whose join row is gone: remove them (and their reverse). */
static int edge_gone(void *payload, size_t n, char **keys, char **vals)
{
    run *r = payload;
    const shard_import_options *o = r->o;
    edge *e = shard__calloc(n, sizeof *e);
    edge **gone = shard__calloc(n, sizeof *gone);
    char **gk = shard__calloc(n, sizeof *gk);
    size_t ng = 0;
    MYSQL_RES *res = NULL;
    MYSQL_ROW row;
    sqlbuf q;
    int rc = 0;

    sql_init(&q);
    if (!e || !gone || !gk) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (sscanf(keys[i], "%" SCNu64 ":%" SCNu64, &e[i].f, &e[i].t) != 2 ||
            sscanf(vals[i], "%" SCNu64 " %" SCNu64, &e[i].fid, &e[i].tid) != 2) {
            rc = shard__fail(SHARD_EINVAL, "record %s, key %.40s: not an entry libshard wrote",
                            r->lookup, keys[i]);
            goto out;
        }
        snprintf(e[i].key, sizeof e[i].key, "%s", keys[i]);
    }
    sql_addf(&q, "SELECT `%s`, `%s` FROM `%s`.`%s` WHERE (`%s`, `%s`) IN (", o->from_column,
             o->to_column, r->src.db, r->table, o->from_column, o->to_column);
    for (size_t i = 0; i < n; i++) {
        sql_add(&q, i ? ",(" : "(");
        sql_u64(&q, e[i].f);
        sql_add(&q, ",");
        sql_u64(&q, e[i].t);
        sql_add(&q, ")");
    }
    sql_add(&q, ")");
    if ((rc = sql_check(&q)) || (rc = source_query(&r->src, q.s, q.len, &res)))
        goto out;
    while ((row = mysql_fetch_row(res))) {
        uint64_t f = strtoull(row[0], NULL, 10), t = strtoull(row[1], NULL, 10);
        for (size_t i = 0; i < n; i++)
            if (e[i].f == f && e[i].t == t)
                e[i].write = true; /* present */
    }
    for (size_t i = 0; i < n; i++)
        if (!e[i].write) {
            gone[ng] = &e[i];
            gk[ng++] = e[i].key;
        }
    if (ng && !r->dry) {
        edge_job j = {r, gone};
        if ((rc = fanout_run(ng, r->threads, remove_edge, &j)) == 0)
            rc = legacy_kv_delete_many(r->ctx, r->lookup, gk, ng, r->threads);
    }
    if (rc == 0)
        r->rep.deleted += ng;
out:
    mysql_free_result(res);
    sql_free(&q);
    free(e);
    free(gone);
    free(gk);
    return rc;
}

static int mapping_setup(run *r)
{
    const shard_import_options *o = r->o;
    const shard_mapdef *md;
    const shard_legacydef *def;
    const MYSQL_FIELD *f;
    shard_map *map = ctx_map(r->ctx);
    MYSQL_RES *res = NULL;
    char lock[80];
    int rc = 0;

    if (!o->mapping || !(md = shard__map_find_mapping(map, o->mapping))) {
        rc = shard__fail(SHARD_EINVAL, "no mapping named \"%.64s\" in the map (a reverse "
                        "mapping is written through its forward one)",
                        o->mapping ? o->mapping : "(null)");
        goto out;
    }
    r->name = r->mapname = md->name;
    if (!(def = map_legacy_of(map, md->name))) {
        rc = shard__fail(SHARD_EINVAL, "the map has no legacy record for mapping %s: add "
                        "\"legacy\": {\"%s\": {}} and \"legacy_%s\" to mod_shards.tables, "
                        "publish the map, run shardctl schema apply", md->name, md->name,
                        md->name);
        goto out;
    }
    snprintf(r->lookup, sizeof r->lookup, "%s", def->table);
    if (!map_legacy_of_type(map, o->from_type) || !map_legacy_of_type(map, o->to_type)) {
        rc = shard__fail(SHARD_EINVAL, "both ends need a legacy lookup: type %u has none",
                        map_legacy_of_type(map, o->from_type) ? o->to_type : o->from_type);
        goto out;
    }
    snprintf(r->id_col, sizeof r->id_col, "%s", o->from_column ? o->from_column : "");
    if ((rc = check_name("from column", o->from_column)) ||
        (rc = check_name("to column", o->to_column)) ||
        (o->seq_column && (rc = check_name("sequence column", o->seq_column))))
        goto out;
    lock_name(r->name, lock);
    if ((rc = source_open(r->ctx, o, r->dry ? NULL : lock, &r->src)) || (rc = probe(r, &res)))
        goto out;
    const char *bad = NULL;
    if (!(f = field_named(res, o->from_column)) || !kind_integer(kind_of(f)))
        bad = o->from_column;
    else if (!(f = field_named(res, o->to_column)) || !kind_integer(kind_of(f)))
        bad = o->to_column;
    if (bad) {
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is not an integer column", r->src.label,
                        r->table, bad);
        goto out;
    }
    if (!o->seq_column) {
        snprintf(r->seq_expr, sizeof r->seq_expr, "NULL");
    } else if (!(f = field_named(res, o->seq_column))) {
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is not a column", r->src.label, r->table,
                        o->seq_column);
    } else if (kind_integer(kind_of(f))) {
        snprintf(r->seq_expr, sizeof r->seq_expr, "`%s`", o->seq_column);
    } else if (kind_of(f) == COL_TEMPORAL) {
        /* Microseconds since the epoch, like SHARD_SEQ_NOW (the session is UTC). */
        snprintf(r->seq_expr, sizeof r->seq_expr,
                 "CAST(ROUND(UNIX_TIMESTAMP(`%s`) * 1000000) AS SIGNED)", o->seq_column);
    } else {
        rc = shard__fail(SHARD_EINVAL, "%s: %s.%s is neither an integer nor a date and time",
                        r->src.label, r->table, o->seq_column);
    }
    if (rc == 0)
        estimate(r);
out:
    mysql_free_result(res);
    shard_map_free(map);
    return rc;
}

int shard_import_mapping(shard_ctx *ctx, const shard_import_options *opts,
                         shard_import_report *report)
{
    run r;
    int rc;

    if (report)
        memset(report, 0, sizeof *report);
    if (!ctx)
        return shard__fail(SHARD_EINVAL, "shard_import_mapping: NULL context");
    if ((rc = check_options(opts)))
        return rc;
    run_init(&r, ctx, opts);
    if ((rc = mapping_setup(&r)) == 0 && (rc = edge_forward(&r)) == 0)
        rc = legacy_kv_scan(ctx, r.lookup, edge_gone, &r);
    run_end(&r, report, rc);
    return rc;
}
