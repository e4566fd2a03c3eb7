/*
 * Legacy lookups (libshard-import(7)): key-value tables in the mod-shard
 * space, read and written many keys at once, shared by legacy.c (resolving
 * legacy ids) and lib/import/ (the import passes).
 */
#ifndef LIBSHARD_LEGACY_H
#define LIBSHARD_LEGACY_H

#include "ctx.h"

/*
 * A lookup entry's value, as text:
 *   "ID MD5"      imported: the object's ID and the MD5 (hex) of the row's
 *                 canonical JSON when it was last written
 *   "ID deleted"  the legacy row is gone and the object was soft-deleted
 *   "pending S"   written by libshard 0.1's imports only (an object on shard
 *                 S claimed, maybe made); today's imports refuse it
 * Mapping entries (import-mapping) are "FROM TO SEQ": the two native IDs and
 * the sequence written.
 */
typedef enum legacy_state {
    LEGACY_ABSENT,
    LEGACY_PENDING,
    LEGACY_LIVE,
    LEGACY_DELETED,
    LEGACY_BAD /* a value libshard did not write */
} legacy_state;

typedef struct legacy_entry {
    legacy_state state;
    uint64_t id;    /* LIVE, DELETED */
    unsigned shard; /* PENDING */
    char md5[33];   /* LIVE */
} legacy_entry;

void legacy_entry_parse(const char *value, legacy_entry *e);

/*
 * keys[0..n): NUL-terminated texts. vals[i] gets a copy of the value
 * (free()) or NULL when the key is absent. One statement per server
 * covering all of its mod shards, servers concurrently.
 */
int legacy_kv_get_many(shard_ctx *ctx, const char *table, char *const *keys, size_t n,
                       char **vals);
/* Upsert keys[i] = vals[i]: one multi-row statement per mod shard, up to
 * `threads` mod shards at a time. */
int legacy_kv_put_many(shard_ctx *ctx, const char *table, char *const *keys,
                       char *const *vals, size_t n, unsigned threads);
int legacy_kv_delete_many(shard_ctx *ctx, const char *table, char *const *keys, size_t n,
                          unsigned threads);

/* Every entry of a table, mod shard by mod shard in key order, handed over
 * in batches with no connection held; non-zero from fn stops the scan. */
typedef int (*legacy_scan_fn)(void *payload, size_t n, char **keys, char **vals);
int legacy_kv_scan(shard_ctx *ctx, const char *table, legacy_scan_fn fn, void *payload);

/* The number of entries of a table (all mod shards, `threads` at a time)
 * that a WHERE clause (`where`, SQL text libshard wrote, never input)
 * keeps. */
int legacy_kv_count(shard_ctx *ctx, const char *table, const char *where, unsigned threads,
                    uint64_t *n);

/* lib/import/, pure helpers (unit-tested). */
typedef struct source_url {
    char user[81];
    char host[256];
    unsigned port;
    char db[65];
} source_url;

/* mysql://USER@HOST[:PORT]/DB (no password, ever); SHARD_EINVAL otherwise. */
int import_parse_url(const char *url, source_url *u);
/* Strict UTF-8: the offset of the first bad byte, or -1 when all is valid. */
long import_utf8_bad(const unsigned char *s, size_t n);
/* s[0..n) as a JSON string, quotes included, escaped as json_dumps() does
 * (no JSON_ENSURE_ASCII): into out, which has room for 6 * n + 2 bytes;
 * returns the length written. */
size_t import_json_escape(char *out, const char *s, size_t n);

/*
 * The start of an import's bulk writes (objects, lookup entries): logged as
 * row events without the statement's text (MariaDB annotates each row
 * event with it by default). The text of a multi-row INSERT is its rows
 * again, so the annotation doubled the binary log that every server of the
 * pair writes and the standby receives and logs again (libshard-import(7)).
 */
#define LEGACY_BULK_WRITE "SET STATEMENT binlog_annotate_row_events=0 FOR "

/* q (an INSERT or DELETE) sent as LEGACY_BULK_WRITE q; where the account
 * may not set that variable (it takes SUPER or BINLOG ADMIN: error 1227),
 * sent again as q alone, annotated like any statement. */
int legacy_bulk_query(shard_conn *c, const sqlbuf *q);

/* Remember a resolution in the context's cache. */
void legacy_cache_put(shard_ctx *ctx, unsigned type, uint64_t legacy, uint64_t id);

/*
 * Test hook (tests link the static library): when set, the import calls it
 * at named points of a pass: "marked" (the pass marker is written),
 * "shard" (one shard's new objects of a batch committed, from any thread),
 * "created" (a batch's new objects are written, their lookup entries not
 * yet), "entries" (and their entries), "changed" and "deleted" (objects
 * rewritten or soft-deleted, their entries not yet). NULL in production.
 */
extern void (*shard__import_hook)(const char *point);

#endif
