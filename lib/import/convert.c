/*
 * Legacy rows to objects (libshard-import(7)): every column a field, its
 * type kept; text strictly UTF-8; the checksum of the canonical form that
 * tells a later pass a changed row from an unchanged one.
 */
#include "import.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

import_kind import_kind_of(const MYSQL_FIELD *f)
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

bool import_kind_integer(import_kind k)
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

static int row_fail(import_run *r, uint64_t legacy, const char *col, const char *fmt, ...)
    SHARD_PRINTF(4, 5);

/* "legacy row pins.id=17, column title: ..." */
static int row_fail(import_run *r, uint64_t legacy, const char *col, const char *fmt, ...)
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

int import_parse_i64(const char *s, int64_t *v)
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
static int column_json(import_run *r, uint64_t legacy, const MYSQL_FIELD *f, const char *v,
                       unsigned long len, json_t **out)
{
    import_kind k = import_kind_of(f);
    int64_t i;

    *out = NULL;
    if (!v) {
        *out = json_null();
        return 0;
    }
    switch (k) {
    case COL_INT:
        if (import_parse_i64(v, &i))
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
static int row_item(import_run *r, MYSQL_RES *res, MYSQL_ROW row, import_item *it)
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
            if (!row[c] || !import_kind_integer(import_kind_of(&f[c])) || import_parse_i64(row[c], &legacy) ||
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
            if (import_parse_i64(row[c], &p) || p < 1 || (uint64_t)p > SHARD_MAX_LOCAL)
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
        rc = import_md5_hex(canon, clen, it->md5);
    free(canon);
    json_decref(obj);
    return rc;
}

void import_items_free(import_item *it, size_t n)
{
    for (size_t i = 0; it && i < n; i++) {
        free(it[i].text);
        free(it[i].val);
    }
    free(it);
}

/* Rows of the legacy table: the batch after `after` (0: the first). */
int import_read_rows(import_run *r, const char *where, MYSQL_RES **res)
{
    sqlbuf q;
    int rc;

    sql_init(&q);
    sql_addf(&q, "SELECT * FROM `%s`.`%s`", r->src.db, r->table);
    sql_add(&q, where);
    rc = sql_check(&q);
    if (rc == 0)
        rc = import_source_query(&r->src, q.s, q.len, res);
    sql_free(&q);
    return rc;
}

int import_res_items(import_run *r, MYSQL_RES *res, import_item **out, size_t *n)
{
    size_t rows = mysql_num_rows(res), k = 0;
    import_item *it = shard__calloc(rows ? rows : 1, sizeof *it);
    MYSQL_ROW row;
    int rc = 0;

    if (!it)
        return shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", rows);
    while (rc == 0 && (row = mysql_fetch_row(res)))
        if ((rc = row_item(r, res, row, &it[k])) == 0)
            k++;
    if (rc) {
        import_items_free(it, k + 1);
        return rc;
    }
    *out = it;
    *n = k;
    return 0;
}
