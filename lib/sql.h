/*
 * Building SQL text. Values only ever enter as decimal integers or hex
 * literals (X'..'), identifiers only from the validated shard map, so no
 * input can change the statement that runs.
 */
#ifndef LIBSHARD_SQL_H
#define LIBSHARD_SQL_H

#include "internal.h"

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
/* SHARD_ENOMEM with a message if any append failed, else 0. */
int sql_check(const sqlbuf *b);

#endif
