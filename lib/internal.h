/* Private declarations shared by the files of lib/. Not installed. */
#ifndef LIBSHARD_INTERNAL_H
#define LIBSHARD_INTERNAL_H

#include <jansson.h> /* first, so libshard.h declares its jansson calls */
#include "libshard.h"

#include <stdarg.h>
#include <stdbool.h>

#include "util.h"

#if defined(__GNUC__)
#define SHARD_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SHARD_PRINTF(a, b)
#endif

/* error.c: record the calling thread's detailed message; returns code. */
int shard_fail(int code, const char *fmt, ...) SHARD_PRINTF(2, 3);
int shard_vfail(int code, const char *fmt, va_list ap);
/* Prefix the current message with more context ("pair X: " + message). */
int shard_fail_prefix(int code, const char *fmt, ...) SHARD_PRINTF(2, 3);
void shard_clear_error(void);

/* Allocation wrappers, replaceable in tests to fail the Nth allocation. */
void *shard_malloc(size_t n);
void *shard_calloc(size_t n, size_t size);
void *shard_realloc(void *p, size_t n);
char *shard_strdup(const char *s);
char *shard_strndup(const char *s, size_t n);
/* Zero a secret, then free it (NULL is fine). */
void shard_wipe_free(char *s);

/* Identifier rule for table, mapping and object names: [a-z][a-z0-9_]*. */
bool shard_ident_valid(const char *s);

#endif
