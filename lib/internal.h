/*
 * Private declarations shared by the files of lib/. Not installed.
 *
 * Names: the API is shard_<area>_<verb> (include/libshard.h) and nothing
 * else may look like it. Functions and types shared between files of
 * lib/ are named for their file or family: conn_get, ctx_map, exec_*,
 * repl_*, publish_edit, move_* (lib/move/). The library-wide basics that
 * every file uses (errors, allocation, the map's internal lookups) and
 * the hooks tests set are shard__<name>: two underscores, which no API
 * name has. An internal name never starts with shard_ and one underscore.
 * (Internal types such as shard_conn and shard_pairdef predate this rule.)
 */
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
int shard__fail(int code, const char *fmt, ...) SHARD_PRINTF(2, 3);
int shard__vfail(int code, const char *fmt, va_list ap);
/* Prefix the current message with more context ("pair X: " + message). */
int shard__fail_prefix(int code, const char *fmt, ...) SHARD_PRINTF(2, 3);
void shard__clear_error(void);

/* Allocation wrappers, replaceable in tests to fail the Nth allocation. */
/* MD5 of data[0..len) into out (lib/modshard.c): 0, or SHARD_ENOMEM /
 * SHARD_EINTERNAL with the message set. */
int shard__md5(const void *data, size_t len, unsigned char out[16]);
/* A digest context reused over a batch of keys (OpenSSL's EVP_MD_CTX): a
 * fresh one per digest costs about 40% of an MD5 of a short key. NULL from
 * shard__md5_new (no memory) is valid: each digest then makes its own.
 * One thread at a time. shard__mod_with is shard_mod(3) on it. */
typedef struct evp_md_ctx_st shard_md5;
shard_md5 *shard__md5_new(void);
void shard__md5_free(shard_md5 *m);
int shard__mod_with(shard_md5 *m, const void *key, size_t len, uint32_t nshards,
                    uint32_t *shard);
void *shard__malloc(size_t n);
void *shard__calloc(size_t n, size_t size);
void *shard__realloc(void *p, size_t n);
char *shard__strdup(const char *s);
char *shard__strndup(const char *s, size_t n);
/* Zero a secret, then free it (NULL is fine). */
void shard__wipe_free(char *s);

/* Identifier rule for table, mapping and object names: [a-z][a-z0-9_]*. */
bool shard__ident_valid(const char *s);

#endif
