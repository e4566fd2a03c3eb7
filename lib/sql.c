/* A growing SQL string; any failed allocation is remembered, checked once. */
#include "sql.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sql_init(sqlbuf *b)
{
    memset(b, 0, sizeof *b);
}

void sql_free(sqlbuf *b)
{
    free(b->s);
    sql_init(b);
}

void sql_reset(sqlbuf *b)
{
    b->len = 0;
    if (b->s)
        b->s[0] = '\0';
}

static bool reserve(sqlbuf *b, size_t extra)
{
    size_t need;
    char *ns;

    if (b->oom)
        return false;
    need = b->len + extra + 1;
    if (need <= b->cap)
        return true;
    if (need < b->len) { /* overflow */
        b->oom = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    ns = shard__realloc(b->s, cap);
    if (!ns) {
        b->oom = true;
        return false;
    }
    b->s = ns;
    b->cap = cap;
    return true;
}

static void add_n(sqlbuf *b, const char *text, size_t n)
{
    if (!reserve(b, n))
        return;
    memcpy(b->s + b->len, text, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void sql_add(sqlbuf *b, const char *text)
{
    add_n(b, text, strlen(text));
}

void sql_addf(sqlbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->oom = true; /* formatted pieces are short by construction */
        return;
    }
    add_n(b, tmp, (size_t)n);
}

/* These run for every statement: plain copies, no printf. */
void sql_table(sqlbuf *b, const char *db, const char *table)
{
    add_n(b, "`", 1);
    sql_add(b, db);
    add_n(b, "`.`", 3);
    sql_add(b, table);
    add_n(b, "`", 1);
}

void sql_u64(sqlbuf *b, uint64_t v)
{
    char tmp[24], *p = tmp + sizeof tmp;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    add_n(b, p, (size_t)(tmp + sizeof tmp - p));
}

void sql_i64(sqlbuf *b, int64_t v)
{
    if (v < 0) {
        add_n(b, "-", 1);
        sql_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        sql_u64(b, (uint64_t)v);
    }
}

void sql_hex(sqlbuf *b, const void *data, size_t len)
{
    static const char digits[] = "0123456789ABCDEF";
    const unsigned char *p = data;
    char *o;

    if (len == 0) {
        sql_add(b, "''");
        return;
    }
    if (len > (SIZE_MAX - 4) / 2 || !reserve(b, len * 2 + 3)) {
        b->oom = true;
        return;
    }
    o = b->s + b->len;
    *o++ = 'X';
    *o++ = '\'';
    for (size_t i = 0; i < len; i++) {
        *o++ = digits[p[i] >> 4];
        *o++ = digits[p[i] & 15];
    }
    *o++ = '\'';
    b->len = (size_t)(o - b->s);
    b->s[b->len] = '\0';
}

int sql_check(const sqlbuf *b)
{
    return b->oom ? shard__fail(SHARD_ENOMEM, "out of memory building a statement") : 0;
}

void sql_str(sqlbuf *b, MYSQL *my, const char *text, size_t len)
{
    unsigned long n;

    if (len > (SIZE_MAX - 4) / 2 || !reserve(b, len * 2 + 3)) {
        b->oom = true;
        return;
    }
    b->s[b->len++] = '\'';
    n = mysql_real_escape_string(my, b->s + b->len, text, (unsigned long)len);
    if (n == (unsigned long)-1) { /* the connection cannot escape: the safe form */
        b->s[--b->len] = '\0';
        sql_hex(b, text, len);
        return;
    }
    b->len += n;
    b->s[b->len++] = '\'';
    b->s[b->len] = '\0';
}
