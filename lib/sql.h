/*
 * Building SQL text. Values only ever enter as decimal integers, hex
 * literals (X'..': any bytes) or string literals escaped for the connection
 * they are sent on (sql_str: text known to be valid UTF-8), identifiers
 * only from the validated shard map, so no input can change the statement
 * that runs.
 */
#ifndef LIBSHARD_SQL_H
#define LIBSHARD_SQL_H

#include "internal.h"

#include <mysql.h>

typedef struct sqlbuf {
    char *s;
    size_t len, cap;
    bool oom;
} sqlbuf;

void sql_init(sqlbuf *b);
void sql_free(sqlbuf *b);
void sql_reset(sqlbuf *b);
/* Constant SQL text: never caller input. */
void sql_add(sqlbuf *b, const char *text);
void sql_addf(sqlbuf *b, const char *fmt, ...) SHARD_PRINTF(2, 3);
/* `db`.`table`, both already validated identifiers. */
void sql_table(sqlbuf *b, const char *db, const char *table);
void sql_u64(sqlbuf *b, uint64_t v);
void sql_i64(sqlbuf *b, int64_t v);
/* Bytes as a hex literal X'..' (an empty value is ''). */
void sql_hex(sqlbuf *b, const void *data, size_t len);
/* Text as a string literal '..', escaped by mysql_real_escape_string() for
 * `my`, the connection the statement goes to (its character set, utf8mb4
 * for every libshard connection, and its sql_mode's NO_BACKSLASH_ESCAPES).
 * Only for text the caller knows to be valid UTF-8 (an import's object,
 * whose every string was checked): about half a hex literal's size, for
 * the server to parse and for the binary log to keep (MariaDB logs each
 * row event's statement); bytes of any other kind go as sql_hex(). */
void sql_str(sqlbuf *b, MYSQL *my, const char *text, size_t len);
/* SHARD_ENOMEM with a message if any append failed, else 0. */
int sql_check(const sqlbuf *b);

#endif
