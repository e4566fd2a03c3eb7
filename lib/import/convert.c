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

/* ---- the columns' object, written directly ----------------------------------
 *
 * A pass converts every row, unchanged or not: building each row as a
 * jansson object and dumping it twice (column order, sorted keys) was most
 * of an unchanged pass's time. The text written here is byte for byte
 * what json_dumps() writes with JSON_COMPACT (checksums of earlier passes
 * stay valid): strings escape '"', '\\' and bytes below 0x20 (\b \f \n \r
 * \t, else \u00XX), integers in decimal, reals through jansson itself.
 */

size_t import_json_escape(char *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    char *o = out;

    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        default:
            memcpy(o, "u00", 3);
            o[3] = hex[c >> 4];
            o[4] = hex[c & 15];
            o += 5;
        }
    }
    *o++ = '"';
    return (size_t)(o - out);
}

typedef struct jtext {
    char *s;
    size_t len, cap;
} jtext;

static int jt_reserve(jtext *b, size_t extra)
{
    size_t cap = b->cap ? b->cap : 256;
    char *s;

    if (b->len + extra <= b->cap)
        return 0;
    while (cap < b->len + extra)
        cap *= 2;
    if (!(s = shard__realloc(b->s, cap)))
        return shard__fail(SHARD_ENOMEM, "out of memory converting a row");
    b->s = s;
    b->cap = cap;
    return 0;
}

static int jt_add(jtext *b, const char *s, size_t n)
{
    int rc = jt_reserve(b, n);
    if (rc == 0) {
        memcpy(b->s + b->len, s, n);
        b->len += n;
    }
    return rc;
}

static int jt_string(jtext *b, const char *s, size_t n)
{
    int rc = jt_reserve(b, 6 * n + 2);
    if (rc == 0)
        b->len += import_json_escape(b->s + b->len, s, n);
    return rc;
}

static int jt_int(jtext *b, int64_t v)
{
    char t[24];
    return jt_add(b, t, (size_t)snprintf(t, sizeof t, "%" PRId64, v));
}

/* A real as jansson writes it (its precision and exponent rules). */
static int jt_real(jtext *b, double d)
{
    json_t *v = json_real(d);
    char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    json_malloc_t jm;
    json_free_t jf;
    int rc = s ? jt_add(b, s, strlen(s)) : shard__fail(SHARD_ENOMEM, "out of memory "
                                                      "converting a row");

    json_get_alloc_funcs(&jm, &jf);
    if (s)
        jf(s);
    json_decref(v);
    return rc;
}

/* One column's value as JSON text, with column_json's rules and refusals. */
static int column_text(import_run *r, uint64_t legacy, const MYSQL_FIELD *f, const char *v,
                       unsigned long len, jtext *b)
{
    int64_t i;

    if (!v)
        return jt_add(b, "null", 4);
    switch (import_kind_of(f)) {
    case COL_INT:
        if (import_parse_i64(v, &i))
            return row_fail(r, legacy, f->name, "integer \"%.40s\" out of range", v);
        return jt_int(b, i);
    case COL_UINT: {
        char *end;
        errno = 0;
        unsigned long long u = strtoull(v, &end, 10);
        if (errno || *end || u > INT64_MAX)
            return row_fail(r, legacy, f->name, "%.40s is above 2^63-1, which a JSON integer "
                            "cannot hold", v);
        return jt_int(b, (int64_t)u);
    }
    case COL_REAL: {
        char *end;
        double d = strtod(v, &end);
        if (*end || !isfinite(d))
            return row_fail(r, legacy, f->name, "\"%.40s\" is not a finite number", v);
        return jt_real(b, d);
    }
    case COL_DECIMAL:
    case COL_TEMPORAL:
        return jt_string(b, v, len);
    case COL_TEXT: {
        long bad = import_utf8_bad((const unsigned char *)v, len);
        if (bad >= 0)
            return row_fail(r, legacy, f->name, "not valid UTF-8 (byte %ld of %lu is 0x%02x)",
                            bad, len, (unsigned char)v[bad]);
        return jt_string(b, v, len);
    }
    case COL_NULL:
        return jt_add(b, "null", 4);
    default: { /* BIT, and the refusals: column_json's */
        json_t *j;
        int rc = column_json(r, legacy, f, v, len, &j);
        if (rc == 0)
            rc = jt_int(b, json_integer_value(j));
        json_decref(j);
        return rc;
    }
    }
}

/* A conversion thread's buffers, kept from row to row (a pass converts
 * every row: two buffers grown and freed per row were a good part of an
 * unchanged pass's client time). */
typedef struct conv_scratch {
    jtext vals, out;
    size_t *at;   /* where each column's value starts in vals */
    unsigned nat;
} conv_scratch;

static void scratch_free(conv_scratch *sc)
{
    free(sc->vals.s);
    free(sc->out.s);
    free(sc->at);
    memset(sc, 0, sizeof *sc);
}

/*
 * The object of a row's columns in column order and, sorted by column name
 * (order[]: the columns' indexes so sorted), its canonical form: each value
 * written once, then both texts put together.
 */
static int columns_item(import_run *r, const MYSQL_FIELD *f, unsigned nf,
                        const unsigned *order, MYSQL_ROW row, const unsigned long *len,
                        import_item *it, conv_scratch *sc, bool text)
{
    jtext *vals = &sc->vals, *out = &sc->out;
    bool sorted = true;
    int rc = 0;

    if (sc->nat < nf + 1) {
        size_t *at = shard__realloc(sc->at, (nf + 1) * sizeof *at);
        if (!at)
            return shard__fail(SHARD_ENOMEM, "out of memory converting a row");
        sc->at = at;
        sc->nat = nf + 1;
    }
    vals->len = 0;
    for (unsigned c = 0; rc == 0 && c < nf; c++) {
        sc->at[c] = vals->len;
        rc = column_text(r, it->legacy, &f[c], row[c], len[c], vals);
        sorted = sorted && order[c] == c;
    }
    if (rc == 0)
        sc->at[nf] = vals->len;
    /* Without the text, only the canonical form (the same bytes in another
     * order: its length is the text's). */
    for (int pass = text || sorted ? 0 : 1; rc == 0 && pass < 2; pass++) {
        out->len = 0;
        rc = jt_add(out, "{", 1);
        for (unsigned k = 0; rc == 0 && k < nf; k++) {
            unsigned c = pass ? order[k] : k;
            if ((k && (rc = jt_add(out, ",", 1))) ||
                (rc = jt_string(out, f[c].name, strlen(f[c].name))) ||
                (rc = jt_add(out, ":", 1)))
                break;
            rc = jt_add(out, vals->s + sc->at[c], sc->at[c + 1] - sc->at[c]);
        }
        if (rc == 0)
            rc = jt_add(out, "}", 1);
        if (rc == 0 && pass == 0 && text)
            rc = copy_out(out->s, out->len, &it->text, &it->len);
        it->len = out->len;
        if (rc == 0 && (pass == 1 || sorted)) {
            rc = import_md5_hex(out->s, out->len, it->md5);
            break;
        }
    }
    return rc;
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
static int row_item(import_run *r, const MYSQL_FIELD *f, unsigned nf, const unsigned *order,
                    MYSQL_ROW row, const unsigned long *len, import_item *it, conv_scratch *sc,
                    bool text)
{
    const shard_import_options *o = r->o;
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
        it->row = row;
        it->lens = len;
        return columns_item(r, f, nf, order, row, len, it, sc, text);
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

/* Rows are converted on r->threads threads, CONV_CHUNK rows at a time: a
 * pass whose lookups say "unchanged" is bound by this conversion. */
#define CONV_CHUNK 256

typedef struct conv_job {
    import_run *r;
    const MYSQL_FIELD *f;
    unsigned nf;
    unsigned *order;     /* the columns by name (the canonical form's order) */
    MYSQL_ROW *rows;
    unsigned long *lens; /* nf per row */
    import_item *it;
    size_t n;
    int *rc;             /* per chunk */
    shard_errsave *err;  /* per chunk: its first failure's message */
    bool text;           /* the objects' texts now, not only their checksums */
} conv_job;

static int conv_chunk(void *arg, size_t c, unsigned worker)
{
    conv_job *j = arg;
    size_t hi = (c + 1) * CONV_CHUNK < j->n ? (c + 1) * CONV_CHUNK : j->n;
    conv_scratch sc;
    int rc = 0;

    (void)worker;
    memset(&sc, 0, sizeof sc);
    for (size_t i = c * CONV_CHUNK; rc == 0 && i < hi; i++) {
        rc = row_item(j->r, j->f, j->nf, j->order, j->rows[i], j->lens + i * j->nf, &j->it[i],
                      &sc, j->text);
        if (rc) {
            j->rc[c] = rc;
            shard__error_save(&j->err[c], rc);
        }
    }
    scratch_free(&sc);
    return rc;
}

/* The columns' indexes sorted by name (the canonical form's order). */
static void sort_columns(const MYSQL_FIELD *f, unsigned nf, unsigned *order)
{
    for (unsigned c = 0; c < nf; c++) { /* insertion sort: a table's columns are few */
        unsigned at = c;
        for (; at > 0 && strcmp(f[order[at - 1]].name, f[c].name) > 0; at--)
            order[at] = order[at - 1];
        order[at] = c;
    }
}

int import_res_items(import_run *r, MYSQL_RES *res, bool text, import_item **out, size_t *n,
                     unsigned long **lens)
{
    size_t rows = mysql_num_rows(res), k = 0, chunks = (rows + CONV_CHUNK - 1) / CONV_CHUNK;
    unsigned nf = mysql_num_fields(res);
    conv_job j = {r, mysql_fetch_fields(res), nf, NULL, NULL, NULL, NULL, rows, NULL, NULL,
                  text || r->o->json_column};
    MYSQL_ROW row;
    int rc = 0;

    j.it = shard__calloc(rows ? rows : 1, sizeof *j.it);
    j.rows = shard__calloc(rows ? rows : 1, sizeof *j.rows);
    j.lens = shard__calloc(rows && nf ? rows * nf : 1, sizeof *j.lens);
    j.rc = shard__calloc(chunks ? chunks : 1, sizeof *j.rc);
    j.err = shard__calloc(chunks ? chunks : 1, sizeof *j.err);
    j.order = shard__calloc(nf ? nf : 1, sizeof *j.order);
    if (!j.it || !j.rows || !j.lens || !j.rc || !j.err || !j.order) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory for %zu rows", rows);
        goto out;
    }
    sort_columns(j.f, nf, j.order);
    /* The result's cursor is one thread's: rows and lengths first. */
    while (k < rows && (row = mysql_fetch_row(res))) {
        memcpy(j.lens + k * nf, mysql_fetch_lengths(res), nf * sizeof *j.lens);
        j.rows[k++] = row;
    }
    j.n = k;
    chunks = (k + CONV_CHUNK - 1) / CONV_CHUNK;
    if (fanout_run(chunks, r->threads, conv_chunk, &j)) {
        /* The first bad row in table order: chunks start in order, so
         * every chunk before a failed one ran to its end. */
        for (size_t c = 0; c < chunks && !rc; c++)
            if (j.rc[c])
                rc = shard__error_restore(&j.err[c]);
    }
out:
    if (rc) {
        import_items_free(j.it, j.it ? rows : 0);
        j.it = NULL;
    } else {
        *out = j.it;
        *n = k;
        *lens = j.lens; /* the items' lens point into it */
        j.lens = NULL;
    }
    free(j.order);
    free(j.rows);
    free(j.lens);
    free(j.rc);
    free(j.err);
    return rc;
}

int import_items_text(import_run *r, MYSQL_RES *res, import_item **its, size_t n)
{
    unsigned nf = mysql_num_fields(res);
    const MYSQL_FIELD *f = mysql_fetch_fields(res);
    unsigned *order = shard__calloc(nf ? nf : 1, sizeof *order);
    conv_scratch sc;
    int rc = order ? 0 : shard__fail(SHARD_ENOMEM, "out of memory converting a row");

    memset(&sc, 0, sizeof sc);
    if (rc == 0)
        sort_columns(f, nf, order);
    /* The same rows as before: the conversion's refusals cannot recur. */
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (!its[i]->text && its[i]->row)
            rc = columns_item(r, f, nf, order, its[i]->row, its[i]->lens, its[i], &sc, true);
    scratch_free(&sc);
    free(order);
    return rc;
}
