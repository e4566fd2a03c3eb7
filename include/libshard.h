/*
 * libshard: ID-based sharding over MySQL/MariaDB master pairs.
 *
 * This header is the whole public contract of the library.
 *
 * Conventions (see libshard(3)):
 *  - Functions returning int give 0 on success or a negative SHARD_E* code.
 *    The detail of the last failure on the calling thread (which input,
 *    which server, the server's error number and text) is shard_errmsg().
 *  - "T **out" parameters hand the caller an object it must free with the
 *    matching free function; "const T *" results are borrowed.
 *  - Every free function accepts NULL.
 *  - The library never prints, exits or aborts; it logs only through the
 *    callback given in shard_options.
 *
 * Copyright (c) 2026 the libshard authors. MIT licence, see COPYING.
 */
#ifndef LIBSHARD_H
#define LIBSHARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The one place the version lives; the Makefile reads it from here. */
#define SHARD_VERSION_MAJOR 0
#define SHARD_VERSION_MINOR 1
#define SHARD_VERSION_PATCH 0
#define SHARD_VERSION_STRING "0.1.0"
/* 0xMMmmpp: compare with shard_version_num() at run time. */
#define SHARD_VERSION_NUM \
    ((SHARD_VERSION_MAJOR << 16) | (SHARD_VERSION_MINOR << 8) | SHARD_VERSION_PATCH)

#if defined(__GNUC__) && __GNUC__ >= 4
#define SHARD_EXPORT __attribute__((visibility("default")))
#else
#define SHARD_EXPORT
#endif

/* ------------------------------------------------------------------ */
/* Errors. Codes are only ever appended; their values never change.    */
/* ------------------------------------------------------------------ */

#define SHARD_OK          0
#define SHARD_EINVAL     -1  /* invalid argument or input */
#define SHARD_ENOMEM     -2  /* out of memory */
#define SHARD_EMAP       -3  /* the shard map is invalid */
#define SHARD_EIO        -4  /* file or system I/O failed */
#define SHARD_ENOTFOUND  -5  /* no such object, mapping row or key */
#define SHARD_EEXISTS    -6  /* already exists (put-if-absent) */
#define SHARD_ECONNECT   -7  /* cannot connect to a server */
#define SHARD_ESERVER    -8  /* a server returned an error */
#define SHARD_ETIMEOUT   -9  /* a network wait timed out */
#define SHARD_EMOVED     -10 /* the shard moved; retried after a map reload */
#define SHARD_ECONFLICT  -11 /* a concurrent change won (version compare failed) */
#define SHARD_EBUSY      -12 /* busy: a lock is held or an operation runs */
#define SHARD_ETOOBIG    -13 /* a value is larger than the server accepts */
#define SHARD_ENOSHARD   -14 /* the shard is not mapped to any pair */
#define SHARD_EVERIFY    -15 /* verification found mismatches */
#define SHARD_EPRIV      -16 /* the server denied a privilege */
#define SHARD_ETLS       -17 /* TLS setup or verification failed */
#define SHARD_EPARTIAL   -18 /* some elements of a multi-element call failed */
#define SHARD_EINTERNAL  -19 /* a bug in libshard: please report it */

/* A static, never-NULL description of a SHARD_E* code. */
SHARD_EXPORT const char *shard_strerror(int code);

/*
 * The detailed message of the last failed call made by the calling thread
 * (thread-local, so threads sharing one context never race for it). Valid
 * until the thread's next libshard call; "" when nothing failed yet. Never
 * contains a password.
 */
SHARD_EXPORT const char *shard_errmsg(void);

/* ------------------------------------------------------------------ */
/* Version and global state                                            */
/* ------------------------------------------------------------------ */

/* The library's version string, e.g. "0.1.0" (static). */
SHARD_EXPORT const char *shard_version(void);
/* The library's SHARD_VERSION_NUM, to check against the header's. */
SHARD_EXPORT unsigned shard_version_num(void);

/*
 * Initialise the client library once per process. Optional: the first
 * context opened calls it. Call it from the main thread before starting
 * threads if the application itself also uses libmysqlclient.
 */
SHARD_EXPORT int shard_global_init(void);
/* Release what shard_global_init() set up; call last, once. */
SHARD_EXPORT void shard_global_cleanup(void);

/* Free memory that libshard allocated for the caller (strings, arrays). */
SHARD_EXPORT void shard_free(void *ptr);

/* ------------------------------------------------------------------ */
/* IDs: 2 reserved bits (zero) | 16 bits shard | 10 bits type | 36 bits local */
/* ------------------------------------------------------------------ */

#define SHARD_MAX_SHARD 65535u
#define SHARD_MAX_TYPE 1023u
#define SHARD_MAX_LOCAL ((UINT64_C(1) << 36) - 1)
#define SHARD_MAX_MOD_SHARDS 65536u

/*
 * Compose an ID. shard 0..65535, type 1..1023, local 1..2^36-1; anything
 * else is SHARD_EINVAL and *id is left untouched.
 */
SHARD_EXPORT int shard_id_make(unsigned shard, unsigned type, uint64_t local,
                               uint64_t *id);
/* The parts of an ID. Meaningful only for a valid ID (shard_id_valid). */
SHARD_EXPORT unsigned shard_id_shard(uint64_t id);
SHARD_EXPORT unsigned shard_id_type(uint64_t id);
SHARD_EXPORT uint64_t shard_id_local(uint64_t id);
/* 1 when id is valid (reserved bits zero, type and local non-zero), else 0. */
SHARD_EXPORT int shard_id_valid(uint64_t id);
/*
 * Parse a decimal ID from the NUL-terminated text (no sign, no spaces, no
 * trailing characters) and check it is valid. SHARD_EINVAL otherwise.
 */
SHARD_EXPORT int shard_id_parse(const char *text, uint64_t *id);

/*
 * The mod shard of a key: MD5(key) read as an unsigned 128-bit big-endian
 * integer, mod nshards (1..65536). key may hold any bytes; len may be 0
 * (key may then be NULL).
 */
SHARD_EXPORT int shard_mod(const void *key, size_t len, uint32_t nshards,
                           uint32_t *shard);

/* ------------------------------------------------------------------ */
/* The shard map (immutable once parsed; reference counted)            */
/* ------------------------------------------------------------------ */

typedef struct shard_map shard_map;

/*
 * Parse and validate a shard map from JSON text of len bytes. A map that
 * breaks any rule is rejected whole: SHARD_EMAP, with shard_errmsg()
 * naming the entry. On success *out is the caller's (shard_map_free).
 */
SHARD_EXPORT int shard_map_parse(shard_map **out, const char *json, size_t len);
/* Read and parse a map file. SHARD_EIO when it cannot be read. */
SHARD_EXPORT int shard_map_load(shard_map **out, const char *path);
/* Drop the caller's reference; the map is freed with its last one. */
SHARD_EXPORT void shard_map_free(shard_map *map);

SHARD_EXPORT uint64_t shard_map_version(const shard_map *map);
/* New objects go only to shards [0, open_shards). */
SHARD_EXPORT unsigned shard_map_open_shards(const shard_map *map);
/* Number of mod shards; 0 when the map has no mod_shards section. */
SHARD_EXPORT uint32_t shard_map_mod_count(const shard_map *map);
/* Number of pairs, and the name of pair i (borrowed from the map). */
SHARD_EXPORT size_t shard_map_pair_count(const shard_map *map);
SHARD_EXPORT const char *shard_map_pair_name(const shard_map *map, size_t i);

/*
 * The pair serving ID shard `shard` (binary search, O(log ranges)). *pair
 * is borrowed from the map. SHARD_ENOSHARD when no range covers it.
 */
SHARD_EXPORT int shard_map_pair_of(const shard_map *map, unsigned shard,
                                   const char **pair);
/* The same for mod shard `modshard` (0 .. mod_count-1). */
SHARD_EXPORT int shard_map_mod_pair_of(const shard_map *map, uint32_t modshard,
                                       const char **pair);
/* The master and standby addresses of a pair (borrowed; *standby may be
 * NULL when the pair has none). SHARD_ENOTFOUND for an unknown pair. */
SHARD_EXPORT int shard_map_pair_addrs(const shard_map *map, const char *pair,
                                      const char **master,
                                      const char **standby);
/* The type number of an object name, e.g. "pins" -> 1. */
SHARD_EXPORT int shard_map_type_of(const shard_map *map, const char *name,
                                   unsigned *type);
/* The object name of a type number (borrowed). */
SHARD_EXPORT int shard_map_type_name(const shard_map *map, unsigned type,
                                     const char **name);
/* The database name of ID shard `shard` (e.g. "db03429") into buf. */
SHARD_EXPORT int shard_map_database(const shard_map *map, unsigned shard,
                                    char *buf, size_t size);
/* The database name of mod shard `modshard` into buf. */
SHARD_EXPORT int shard_map_mod_database(const shard_map *map, uint32_t modshard,
                                        char *buf, size_t size);
/*
 * The map as canonical JSON text (NUL-terminated), caller frees with
 * shard_free(). Parsing it gives an equal map.
 */
SHARD_EXPORT int shard_map_to_json(const shard_map *map, char **json);
/* A one-line human summary of the map, caller frees with shard_free(). */
SHARD_EXPORT int shard_map_summary(const shard_map *map, char **text);

/* ------------------------------------------------------------------ */
/* Map stores: where the map lives (a file, a MySQL table, ZooKeeper)  */
/* ------------------------------------------------------------------ */

typedef struct shard_store shard_store;

/*
 * Open a map store. `location` is a file path, "file:PATH",
 * "mysql://USER@HOST:PORT/DATABASE/TABLE?..." or
 * "zk://HOST:PORT[,HOST:PORT...]/PATH[?...]" (shard_store_open(3)). The
 * store is not read until shard_store_load().
 */
SHARD_EXPORT int shard_store_open(shard_store **out, const char *location);
SHARD_EXPORT void shard_store_free(shard_store *store);
/* Read and validate the current map. *out is the caller's. */
SHARD_EXPORT int shard_store_load(shard_store *store, shard_map **out);
/*
 * Read published version `version` from the store's history (the MySQL and
 * ZooKeeper stores keep every version; the file store only its current
 * one). *out is the caller's. SHARD_ENOTFOUND when there is no such version.
 */
SHARD_EXPORT int shard_store_load_version(shard_store *store, uint64_t version,
                                          shard_map **out);
/*
 * Publish `map` as the new current map, atomically (a reader sees the old
 * map or the new one, never a mix), if and only if the store's current
 * version is `expected_version` (0: the store is empty or absent) and the
 * new map's version is greater. SHARD_ECONFLICT otherwise.
 */
SHARD_EXPORT int shard_store_publish(shard_store *store, const shard_map *map,
                                     uint64_t expected_version);

/* ------------------------------------------------------------------ */
/* Contexts: one per process, shared by all its threads                */
/* ------------------------------------------------------------------ */

typedef struct shard_ctx shard_ctx;

#define SHARD_LOG_ERROR 0
#define SHARD_LOG_WARN 1
#define SHARD_LOG_INFO 2
#define SHARD_LOG_DEBUG 3

/* Called from any thread; message is valid only during the call. */
typedef void (*shard_log_fn)(int level, const char *message, void *payload);

/* 1: up to log_payload; 2: adds user and password_env. */
#define SHARD_OPTIONS_VERSION 2

typedef struct shard_options {
    unsigned version;             /* SHARD_OPTIONS_VERSION */
    unsigned connect_timeout_ms;  /* per connection attempt (default 3000) */
    unsigned read_timeout_ms;     /* per network read (default 10000) */
    unsigned write_timeout_ms;    /* per network write (default 10000) */
    unsigned pool_size;           /* max connections per server (default 16) */
    unsigned retry_budget_ms;     /* time for retrying transient errors (default 5000) */
    unsigned retry_max;           /* attempts per operation, at most (default 20) */
    unsigned refresh_interval_ms; /* periodic map reload, jittered +-25%; 0 = off
                                     (default 30000) */
    int log_level;                /* messages up to this level are logged */
    shard_log_fn log;             /* NULL: no logging */
    void *log_payload;
    /* Another account than the map's credentials, e.g. an operator's for
     * moves and failover (NULL: the map's). The password still comes only
     * from the environment: password_env names the variable. */
    const char *user;
    const char *password_env;
} shard_options;

#define SHARD_OPTIONS_INIT \
    { SHARD_OPTIONS_VERSION, 3000, 10000, 10000, 16, 5000, 20, 30000, SHARD_LOG_WARN, NULL, NULL, \
      NULL, NULL }

/*
 * Open a context on the map store at `location` (see shard_store_open):
 * the map is loaded and validated now; servers are connected lazily. opts
 * may be NULL for the defaults. The password is read from the environment
 * variable the map's credentials name. *out is the caller's (shard_ctx_free).
 */
SHARD_EXPORT int shard_ctx_open(shard_ctx **out, const char *location,
                                const shard_options *opts);
/* Close every connection, stop the refresh thread, free. */
SHARD_EXPORT void shard_ctx_free(shard_ctx *ctx);
/*
 * Read the map store now and switch to its map if its version is newer.
 * In-flight operations finish on the snapshot they started with.
 */
SHARD_EXPORT int shard_ctx_reload(shard_ctx *ctx);
/* A reference to the current map snapshot; caller frees (shard_map_free). */
SHARD_EXPORT int shard_ctx_map(shard_ctx *ctx, shard_map **out);

/* Progress of a long operation; called from any thread, serialised. */
typedef void (*shard_progress_fn)(const char *what, uint64_t done, uint64_t total,
                                  void *payload);

/*
 * Create every shard database and table that the map needs on every
 * pair's master, idempotently, pairs in parallel. progress may be NULL.
 */
SHARD_EXPORT int shard_schema_apply(shard_ctx *ctx, shard_progress_fn progress,
                                    void *payload);

/* ------------------------------------------------------------------ */
/* Objects: JSON documents named by IDs                                */
/* ------------------------------------------------------------------ */

/* shard argument of shard_object_create: any open shard, chosen at random. */
#define SHARD_ANY 0xFFFFFFFFu

/*
 * Create an object of `type` from JSON text (an object, UTF-8) on `shard`
 * (or SHARD_ANY; for "near ID x" pass shard_id_shard(x)). *id gets the new
 * ID. Anything but a JSON object is SHARD_EINVAL, and nothing is written.
 */
SHARD_EXPORT int shard_object_create(shard_ctx *ctx, unsigned type, unsigned shard,
                                     const char *json, size_t len, uint64_t *id);
/*
 * The object's JSON text (NUL-terminated, *len without the NUL): the
 * caller frees *json with shard_free(). SHARD_ENOTFOUND when there is no
 * such object or it was soft-deleted.
 */
SHARD_EXPORT int shard_object_get(shard_ctx *ctx, uint64_t id, char **json,
                                  size_t *len);
/*
 * Apply an RFC 7386 merge patch (a JSON object) in one transaction
 * (SELECT ... FOR UPDATE, patch, write). When result is not NULL it gets
 * the new JSON text, the caller frees it with shard_free().
 */
SHARD_EXPORT int shard_object_patch(shard_ctx *ctx, uint64_t id, const char *patch,
                                    size_t len, char **result, size_t *result_len);

#define SHARD_DELETE_HARD 1 /* remove the row instead of "active": false */

/* Soft-delete (default) or hard-delete (SHARD_DELETE_HARD) an object. */
SHARD_EXPORT int shard_object_delete(shard_ctx *ctx, uint64_t id, int flags);

/* One element of a multi-element result. */
typedef struct shard_item {
    int status;  /* 0, SHARD_ENOTFOUND, or the error for this element */
    char *data;  /* NUL-terminated; NULL unless status is 0 */
    size_t len;
} shard_item;

/*
 * Get n objects: one statement per server covering all of its shards,
 * servers queried concurrently. (*items)[i] answers ids[i]; free the
 * array with shard_items_free(*items, n). Returns 0 when every element is
 * found or not found, SHARD_EPARTIAL when some element failed otherwise
 * (its status says why; the others are still answered).
 */
SHARD_EXPORT int shard_object_mget(shard_ctx *ctx, const uint64_t *ids, size_t n,
                                   shard_item **items);
SHARD_EXPORT void shard_items_free(shard_item *items, size_t n);

/* ------------------------------------------------------------------ */
/* Mappings: (from, to, sequence) rows on the shard of `from`          */
/* ------------------------------------------------------------------ */

/* seq argument: use the current time in microseconds. */
#define SHARD_SEQ_NOW INT64_MIN
/* before argument of shard_mapping_list: no cursor. */
#define SHARD_SEQ_NONE INT64_MAX

typedef struct shard_edge {
    uint64_t to;
    int64_t seq;
} shard_edge;

/*
 * Add (or re-sequence) the row (from, to, seq) of mapping `name`; when the
 * map declares a reverse mapping, (to, from, seq) is written to it too, on
 * the shard of `to`.
 */
SHARD_EXPORT int shard_mapping_add(shard_ctx *ctx, const char *name, uint64_t from,
                                   uint64_t to, int64_t seq);
/* Remove the row (and its reverse). SHARD_ENOTFOUND when absent. */
SHARD_EXPORT int shard_mapping_remove(shard_ctx *ctx, const char *name,
                                      uint64_t from, uint64_t to);
/*
 * The newest rows of `from` (highest sequence first, ties by higher `to`
 * first), only sequences strictly below `before` (SHARD_SEQ_NONE: all), at
 * most `limit`. *edges (caller frees with shard_free()) holds *n rows.
 */
SHARD_EXPORT int shard_mapping_list(shard_ctx *ctx, const char *name, uint64_t from,
                                    int64_t before, size_t limit, shard_edge **edges,
                                    size_t *n);
SHARD_EXPORT int shard_mapping_count(shard_ctx *ctx, const char *name, uint64_t from,
                                     uint64_t *count);

/* ------------------------------------------------------------------ */
/* Key-value tables in the mod-shard space (keys and values are bytes)  */
/* ------------------------------------------------------------------ */

#define SHARD_KEY_MAX 1024 /* bytes */

SHARD_EXPORT int shard_kv_put(shard_ctx *ctx, const char *table, const void *key,
                              size_t klen, const void *value, size_t vlen);
/* Put only if the key is absent: SHARD_EEXISTS otherwise (claiming a name). */
SHARD_EXPORT int shard_kv_put_new(shard_ctx *ctx, const char *table, const void *key,
                                  size_t klen, const void *value, size_t vlen);
/* *value (NUL-terminated for convenience) is the caller's: shard_free(). */
SHARD_EXPORT int shard_kv_get(shard_ctx *ctx, const char *table, const void *key,
                              size_t klen, char **value, size_t *vlen);
/* SHARD_ENOTFOUND when absent. */
SHARD_EXPORT int shard_kv_delete(shard_ctx *ctx, const char *table, const void *key,
                                 size_t klen);

/* ------------------------------------------------------------------ */
/* Transactions bound to one shard                                     */
/* ------------------------------------------------------------------ */

typedef struct shard_txn shard_txn;

/*
 * Begin a transaction on `shard`. The transaction holds one connection
 * and is used by one thread at a time. It ends with shard_txn_commit() or
 * shard_txn_rollback(), which both free it. On SHARD_EMOVED or a lost
 * connection the transaction was rolled back: begin it again.
 */
SHARD_EXPORT int shard_txn_begin(shard_ctx *ctx, unsigned shard, shard_txn **out);
SHARD_EXPORT int shard_txn_object_create(shard_txn *txn, unsigned type,
                                         const char *json, size_t len, uint64_t *id);
/* The object's current JSON, locked until the end of the transaction. */
SHARD_EXPORT int shard_txn_object_get(shard_txn *txn, uint64_t id, char **json,
                                      size_t *len);
/* Replace the object's JSON (an object). */
SHARD_EXPORT int shard_txn_object_put(shard_txn *txn, uint64_t id, const char *json,
                                      size_t len);
/* Add a mapping row; `from` (and, with a reverse, `to`) on the txn's shard. */
SHARD_EXPORT int shard_txn_mapping_add(shard_txn *txn, const char *name,
                                       uint64_t from, uint64_t to, int64_t seq);
SHARD_EXPORT int shard_txn_commit(shard_txn *txn);
SHARD_EXPORT void shard_txn_rollback(shard_txn *txn);

/* ------------------------------------------------------------------ */
/* Scatter: the only calls that touch every shard                      */
/* ------------------------------------------------------------------ */

/* Return non-zero to stop the scan (shard_scatter_scan returns it). */
typedef int (*shard_scan_fn)(uint64_t id, const char *json, size_t len, void *payload);

/* Every live object of `type`, shard by shard, in primary-key order. */
SHARD_EXPORT int shard_scatter_scan(shard_ctx *ctx, unsigned type, shard_scan_fn fn,
                                    void *payload);
/* The number of live objects of `type` across every shard. */
SHARD_EXPORT int shard_scatter_count(shard_ctx *ctx, unsigned type, uint64_t *count);

/* ------------------------------------------------------------------ */
/* jansson conveniences (declared when <jansson.h> is included first)   */
/* ------------------------------------------------------------------ */

#ifdef JANSSON_H
SHARD_EXPORT int shard_object_create_json(shard_ctx *ctx, unsigned type,
                                          unsigned shard, const json_t *obj,
                                          uint64_t *id);
/* *out is a new reference: json_decref() it. */
SHARD_EXPORT int shard_object_get_json(shard_ctx *ctx, uint64_t id, json_t **out);
/* Change obj in place; return 0 to write it, non-zero to abort (returned). */
typedef int (*shard_update_fn)(json_t *obj, void *payload);
/* Read-modify-write in one transaction (SELECT ... FOR UPDATE). */
SHARD_EXPORT int shard_object_update(shard_ctx *ctx, uint64_t id, shard_update_fn fn,
                                     void *payload);
#endif

/* ------------------------------------------------------------------ */
/* Online shard moves: split, merge and upgrade with one routine       */
/* ------------------------------------------------------------------ */

#define SHARD_MOVE_DRY_RUN 1     /* plan and check only; change nothing */
#define SHARD_MOVE_KEEP_SOURCE 2 /* keep the source's (fenced) copy after the move */

/* Phase of a move, reported to the progress callback and kept in the journal. */
#define SHARD_MOVE_PLANNED 0
#define SHARD_MOVE_COPYING 1
#define SHARD_MOVE_CATCHUP 2
#define SHARD_MOVE_FENCED 3
#define SHARD_MOVE_FLIPPED 4
#define SHARD_MOVE_VERIFYING 5
#define SHARD_MOVE_CLEANING 6
#define SHARD_MOVE_DONE 7
#define SHARD_MOVE_ABORTED 8
/* Appended: a move run with a reverse window (libshard-move(7), "Revert"). */
#define SHARD_MOVE_REVERSIBLE 9 /* flipped and verified; the source kept in sync
                                   from the target until finish or revert */
#define SHARD_MOVE_REVERTING 10 /* a revert's cut-over: the target is fenced */
#define SHARD_MOVE_REVERTED 11  /* the map is back on the source (over) */
/* Appended: done for its user (flipped, verified, both halves of the target
 * hold the flip), the source's copies left to drop (libshard-move(7),
 * "Dropping the source"): shard_move_resume or shard_move_finish drops them. */
#define SHARD_MOVE_DROPPING 12

/*
 * Progress of a move: the phase, and units done of total in it (rows while
 * copying and verifying; 0 of 0 where a phase has no count). Called from
 * any of the mover's threads, serialised.
 */
typedef void (*shard_move_progress_fn)(int phase, uint64_t done, uint64_t total,
                                       void *payload);

#define SHARD_MOVE_OPTIONS_VERSION 2

typedef struct shard_move_options {
    unsigned version;           /* SHARD_MOVE_OPTIONS_VERSION */
    int flags;                  /* SHARD_MOVE_DRY_RUN | SHARD_MOVE_KEEP_SOURCE */
    unsigned copy_threads;      /* parallel table copies (default 4) */
    unsigned batch_rows;        /* rows per multi-row INSERT, at most (default 2000) */
    unsigned max_lag_ms;        /* fence only when the target is this close (500) */
    unsigned fence_timeout_s;   /* wait this long for locks to fence (default 2) */
    unsigned cutover_attempts;  /* fence attempts before giving up (default 20) */
    unsigned catchup_timeout_s; /* give up catching up after this (default 3600) */
    shard_move_progress_fn progress;
    void *payload;
    /* Version 2 (a version-1 caller's struct ends before these: defaults). */
    unsigned reverse_window_s;  /* after the flip, keep the source in sync from the
                                   target this long, so the move can be reverted
                                   (0: none; cleanup right after verification) */
    uint64_t max_rows_per_second; /* copy throttle (0: none) */
    const char *max_load;       /* "VAR=N[,VAR=N...]": the copy pauses while a
                                   source status variable is above N (NULL: none) */
    const char *postpone_cutover_file; /* caught up, wait while this file exists */
} shard_move_options;

#define SHARD_MOVE_OPTIONS_INIT \
    { SHARD_MOVE_OPTIONS_VERSION, 0, 4, 2000, 500, 2, 20, 3600, NULL, NULL, \
      0, 0, NULL, NULL }

/*
 * Reports are versioned like the options structs (libshard(3), "Options
 * and reports"): start from the _INIT macro, which sets the version; the
 * library writes only the fields that version has, and a version it does
 * not know (0: a zeroed report) is SHARD_EINVAL. (Programs built against
 * libshard 0.1.0, whose reports had no version, call the 0.1.0 entry
 * points, kept under the symbol version LIBSHARD_0.)
 */
#define SHARD_MOVE_REPORT_VERSION 1

/* What a move did, filled by shard_move() and shard_move_resume(). */
typedef struct shard_move_report {
    unsigned version;            /* SHARD_MOVE_REPORT_VERSION (the caller's; kept) */
    uint64_t move_id;
    char source[65], target[65]; /* pair names */
    unsigned first, last;        /* shard range */
    int phase;                   /* where it stopped: SHARD_MOVE_DONE on success */
    uint64_t tables;
    uint64_t rows_copied, bytes_copied;
    double copy_seconds, catchup_seconds, cutover_seconds, verify_seconds;
    double pause_ms;             /* moved shards unwritable: fence to new map */
    unsigned fence_attempts;
    uint64_t rows_verified, mismatches;
    uint64_t map_version;        /* the version published */
    int source_dropped;          /* 1 when the source copy was dropped */
    int target_pair_healthy;     /* 1: both replication links of the target pair run
                                    without error at the end; 0: not (see the log) */
} shard_move_report;

#define SHARD_MOVE_REPORT_INIT \
    { SHARD_MOVE_REPORT_VERSION, 0, "", "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }

/*
 * Move ID shards first..last (all on one pair) to pair `target`: plan and
 * check both pairs, copy a consistent snapshot, catch up by replication,
 * fence the source, publish the new map, verify every row. It returns
 * (report->phase SHARD_MOVE_DONE, report->source_dropped 0) once both
 * halves of the target hold the flip; the source's copies are left to
 * drop (journaled as SHARD_MOVE_DROPPING): shard_move_resume drops them,
 * one database at a time, paced. Every phase is journaled on the target
 * master, so an interrupted move can be resumed (shard_move_resume) or
 * aborted (shard_move_abort). With SHARD_MOVE_DRY_RUN, *plan (caller frees with
 * shard_free(); may be NULL otherwise) gets the plan and nothing changes.
 * report may be NULL. SHARD_EVERIFY when rows differ: the source is kept.
 */
SHARD_EXPORT int shard_move(shard_ctx *ctx, unsigned first, unsigned last,
                            const char *target, const shard_move_options *opts,
                            shard_move_report *report, char **plan);
/* Resume the unfinished move `move_id` (0: the only unfinished one, a move
 * left dropping counted only when no other is unfinished). A
 * move left dropping (SHARD_MOVE_DROPPING) drops the rest of its source's
 * copies and ends SHARD_MOVE_DONE with report->source_dropped 1; a move
 * resumed from an earlier phase returns once done, as shard_move does. */
SHARD_EXPORT int shard_move_resume(shard_ctx *ctx, uint64_t move_id,
                                   const shard_move_options *opts,
                                   shard_move_report *report);
/*
 * Abort an unfinished move before its map flip: lift the fence, remove the
 * replication connection, drop the target's copies. After the flip an
 * abort is refused (SHARD_EBUSY): resume it instead.
 */
SHARD_EXPORT int shard_move_abort(shard_ctx *ctx, uint64_t move_id);
/* Every move journaled on the pairs' masters, one JSON object per line;
 * caller frees *text with shard_free(). A master that cannot be asked gives
 * a line {"pair": ..., "error": ...} and the call returns SHARD_EPARTIAL,
 * with *text still set. */
SHARD_EXPORT int shard_move_status(shard_ctx *ctx, char **text);
/* The phase's name ("copying", ...), static. */
SHARD_EXPORT const char *shard_move_phase_name(int phase);
/*
 * Revert move `move_id` (0: the only reversible one), which is in phase
 * SHARD_MOVE_REVERSIBLE: a cut-over in the other direction (fence the
 * target, wait for the source to apply everything through the reverse
 * stream, publish the map back, unfence the source), then verify every row
 * and drop the target's copies. Refused (SHARD_EBUSY) while the reverse
 * stream is broken. report (may be NULL) describes the revert; its phase
 * is SHARD_MOVE_REVERTED on success.
 */
SHARD_EXPORT int shard_move_revert(shard_ctx *ctx, uint64_t move_id,
                                   const shard_move_options *opts,
                                   shard_move_report *report);
/* End the reverse window of move `move_id` (0: the only reversible one)
 * now: stop the reverse stream and drop the source's copies (paced, as
 * shard_move_resume drops those of a move left dropping, which it also
 * takes). */
SHARD_EXPORT int shard_move_finish(shard_ctx *ctx, uint64_t move_id,
                                   const shard_move_options *opts,
                                   shard_move_report *report);

/* ------------------------------------------------------------------ */
/* Failover: promote a pair's standby                                  */
/* ------------------------------------------------------------------ */

#define SHARD_FAILOVER_FORCE 1 /* promote even when the master cannot be reached */

#define SHARD_FAILOVER_REPORT_VERSION 1 /* as for shard_move_report */

typedef struct shard_failover_report {
    unsigned version;           /* SHARD_FAILOVER_REPORT_VERSION (the caller's; kept) */
    char pair[65];
    char old_master[300], new_master[300]; /* addresses */
    int old_master_fenced;      /* 1: it answered and was made read-only */
    int64_t lag_transactions;   /* what the standby still had to apply; -1: unknown */
    double lag_seconds;         /* its Seconds_Behind_Master at the start; -1: unknown */
    double wait_ms;             /* waiting for the standby to apply what it had */
    double total_ms;
    uint64_t map_version;       /* the version published */
} shard_failover_report;

#define SHARD_FAILOVER_REPORT_INIT \
    { SHARD_FAILOVER_REPORT_VERSION, "", "", "", 0, 0, 0, 0, 0, 0 }

#define SHARD_FAILOVER_OPTIONS_VERSION 1

typedef struct shard_failover_options {
    unsigned version;  /* SHARD_FAILOVER_OPTIONS_VERSION */
    int flags;         /* SHARD_FAILOVER_FORCE */
    unsigned wait_ms;  /* how long the standby may take to apply what it has before
                          the failover gives up, leaving the master in charge
                          (default 30000; 0: promote only a standby that has
                          applied everything already) */
} shard_failover_options;

#define SHARD_FAILOVER_OPTIONS_INIT { SHARD_FAILOVER_OPTIONS_VERSION, 0, 30000 }

/*
 * Promote the standby of `pair`: fence the old master (read-only) if it
 * answers, wait (bounded) until the standby has applied everything, swap
 * the roles in a new map version. Without SHARD_FAILOVER_FORCE a master
 * that cannot be reached is an error (SHARD_ECONNECT); with it, the
 * standby is promoted after applying what it received, and writes the
 * master committed but never sent are lost (the report says the lag is
 * unknown). report may be NULL.
 */
SHARD_EXPORT int shard_pair_failover(shard_ctx *ctx, const char *pair, int flags,
                                     shard_failover_report *report);
/*
 * The same with options (NULL: the defaults): opts->flags as `flags` above,
 * opts->wait_ms the bound on the standby's wait (shard_pair_failover()
 * waits 30 s).
 */
SHARD_EXPORT int shard_pair_failover_opts(shard_ctx *ctx, const char *pair,
                                          const shard_failover_options *opts,
                                          shard_failover_report *report);

/* ------------------------------------------------------------------ */
/* Coming from an unsharded database: legacy ids and imports           */
/* (libshard-import(7))                                                */
/* ------------------------------------------------------------------ */

/*
 * The native ID of the object that shard_import_table() made of the legacy
 * row `legacy_id` (an integer 1..2^36-1) of `type`, read from the lookup
 * table that the map's "legacy" section names for the type. A valid native
 * ID of `type` comes back unchanged, so a caller may pass either kind: a
 * native ID always has a non-zero type field, a legacy id never has one.
 * Answers are cached in the context. SHARD_ENOTFOUND when the row has not
 * been imported; the ID of an object deleted since is still returned.
 */
SHARD_EXPORT int shard_legacy_resolve(shard_ctx *ctx, unsigned type, uint64_t legacy_id,
                                      uint64_t *id);
/*
 * The same for n ids at once: one statement per server covering all of its
 * mod shards, servers asked concurrently, cached ids not asked at all.
 * ids[i] (n elements, the caller's) answers legacy_ids[i], 0 when that row
 * has not been imported. On failure every ids[i] is 0.
 */
SHARD_EXPORT int shard_legacy_resolve_many(shard_ctx *ctx, unsigned type,
                                           const uint64_t *legacy_ids, size_t n,
                                           uint64_t *ids);

#define SHARD_IMPORT_DRY_RUN 1 /* read and compare only; write nothing */

#define SHARD_IMPORT_OPTIONS_VERSION 1

/*
 * What to import. shard_import_table() reads the fields up to near_type,
 * shard_import_mapping() those from mapping on; both read the first five
 * and the last four. Strings are borrowed for the call.
 */
typedef struct shard_import_options {
    unsigned version;         /* SHARD_IMPORT_OPTIONS_VERSION */
    int flags;                /* SHARD_IMPORT_DRY_RUN */
    const char *source;       /* "mysql://USER@HOST[:PORT]/DB"; never a password */
    const char *password_env; /* variable holding the source's password
                                 (NULL: the map's credentials.password_env) */
    const char *table;        /* the legacy table */
    /* shard_import_table */
    unsigned type;            /* the object type its rows become */
    const char *id_column;    /* its integer primary key (NULL: "id") */
    const char *json_column;  /* NULL: every column is a field; else this column's
                                 JSON object is the object */
    const char *near_column;  /* NULL: any open shard; else a column holding the
                                 legacy id of a parent of near_type, whose shard
                                 the object joins */
    unsigned near_type;
    /* shard_import_mapping */
    const char *mapping;      /* the mapping written (with its reverse) */
    const char *from_column;  /* legacy ids of from_type */
    unsigned from_type;
    const char *to_column;    /* legacy ids of to_type */
    unsigned to_type;
    const char *seq_column;   /* NULL: the to side's legacy id is the sequence */
    /* both */
    unsigned threads;         /* objects or rows written in parallel (default 4) */
    unsigned batch_rows;      /* legacy rows read per statement (default 0: about
                                 4 MB of objects, sized from the rows seen) */
    shard_progress_fn progress; /* may be NULL */
    void *payload;
} shard_import_options;

#define SHARD_IMPORT_OPTIONS_INIT \
    { SHARD_IMPORT_OPTIONS_VERSION, 0, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0, NULL, NULL, \
      0, NULL, 0, NULL, 4, 0, NULL, NULL }

#define SHARD_IMPORT_REPORT_VERSION 1 /* as for shard_move_report */

/* What one pass did (with SHARD_IMPORT_DRY_RUN: would do). */
typedef struct shard_import_report {
    unsigned version;    /* SHARD_IMPORT_REPORT_VERSION (the caller's; kept) */
    uint64_t rows_read;  /* legacy rows read */
    uint64_t created;    /* objects (mapping rows) new in this pass */
    uint64_t changed;    /* rewritten: their legacy row changed */
    uint64_t deleted;    /* soft-deleted (removed): their legacy row is gone */
    uint64_t unchanged;
    uint64_t adopted;    /* of created: made by an interrupted pass, kept */
    double seconds;
} shard_import_report;

#define SHARD_IMPORT_REPORT_INIT { SHARD_IMPORT_REPORT_VERSION, 0, 0, 0, 0, 0, 0, 0 }

/*
 * One import pass of a legacy table into objects of opts->type: new rows
 * become objects and get a lookup entry, changed rows (by a checksum kept
 * in the lookup) are rewritten, objects whose row is gone are
 * soft-deleted; nothing is ever duplicated, even after an interrupted
 * pass. Run it again until a pass finds nothing to do. report may be NULL.
 * A row that cannot be imported unchanged (binary data, invalid UTF-8, an
 * integer JSON cannot hold) stops the pass with SHARD_EINVAL naming it.
 */
SHARD_EXPORT int shard_import_table(shard_ctx *ctx, const shard_import_options *opts,
                                    shard_import_report *report);
/*
 * One import pass of a legacy join table into mapping rows of
 * opts->mapping (and its reverse), both ends translated through their
 * lookups, in the same pass model. report may be NULL.
 */
SHARD_EXPORT int shard_import_mapping(shard_ctx *ctx, const shard_import_options *opts,
                                      shard_import_report *report);
/* The fleet: status and topology                                      */
/* ------------------------------------------------------------------ */

/*
 * Ask every server of every pair, all at once, and describe the fleet in
 * one JSON document (shard_fleet_status(3) lists its fields): per server,
 * whether it answers, its version, read_only, server_id and GTID
 * positions, each replication link with its state, lag and last error,
 * the shard databases the map puts there (how many, which are missing,
 * their bytes); the map version; the unfinished moves; and "problems",
 * one line for each thing that is wrong ("healthy" is true when there is
 * none). A server that does not answer is reported, not an error, within
 * the connect timeout. *json is the caller's (shard_free).
 */
SHARD_EXPORT int shard_fleet_status(shard_ctx *ctx, char **json);

/*
 * Check that every open ID shard and every mod shard of `map` (NULL: the
 * context's map) has its database and tables on its pair's master.
 * SHARD_EMAP names the first shard that lacks them and its pair; a master
 * that cannot be asked fails the check with its error.
 */
SHARD_EXPORT int shard_schema_check(shard_ctx *ctx, const shard_map *map);

/*
 * Add pair `name` (master and standby addresses as in the map) to the
 * stored map in a new version, after checking both servers: they answer,
 * have log_bin, binlog_format=ROW, log_slave_updates and
 * gtid_ignore_duplicates on, a server_id and gtid_domain_id of their own
 * (also against every server of the map that answers), a writable master,
 * and a pair link that runs both ways without error. The new pair serves
 * nothing until shards are opened or moved there. *version (may be NULL)
 * gets the version published.
 */
SHARD_EXPORT int shard_pair_add(shard_ctx *ctx, const char *name, const char *master,
                                const char *standby, uint64_t *version);
/* Remove a pair that serves nothing (no ID or mod shard range, no
 * unfinished move) from the stored map, in a new version. */
SHARD_EXPORT int shard_pair_remove(shard_ctx *ctx, const char *name, uint64_t *version);
/*
 * Open ID shards [open_shards, n): create their databases and tables on
 * their pairs' masters and check that they are there, then publish the
 * stored map with open_shards = n in a new version. Shards that no range
 * covers yet go to `pair` (a new range), or with pair NULL (or the last
 * range's pair) extend the last range. progress (may be NULL) is called as
 * by shard_schema_apply(). *version (may be NULL) gets the version published.
 */
SHARD_EXPORT int shard_shards_open(shard_ctx *ctx, unsigned n, const char *pair,
                                   shard_progress_fn progress, void *payload,
                                   uint64_t *version);

/* ------------------------------------------------------------------ */
/* Rebalancing: plan moves from the fullest pair to the emptiest, run  */
/* them one after another (libshard-move(7))                           */
/* ------------------------------------------------------------------ */

#define SHARD_REBALANCE_BY_BYTES 0  /* balance the shard databases' size */
#define SHARD_REBALANCE_BY_WRITES 1 /* balance rows changed per second (needs userstat) */

/* A plan: moves, and every pair's load before and after. Opaque. */
typedef struct shard_rebalance shard_rebalance;

/* One planned move: ID shards first..last, all on pair `from`, to `to`. */
typedef struct shard_rebalance_move {
    unsigned first, last;
    char from[65], to[65];
    uint64_t bytes;     /* the range's databases on disk */
    double writes;      /* their rows changed per second (SHARD_REBALANCE_BY_WRITES, else 0) */
    int drain;          /* 1: moved to empty a drained pair */
} shard_rebalance_move;

/* One pair the plan considered. */
typedef struct shard_rebalance_pair {
    char name[65];
    int drained;                      /* 1: the plan empties it */
    unsigned shards_before, shards_after;
    uint64_t bytes_before, bytes_after;
    double writes_before, writes_after; /* rows changed per second (BY_WRITES) */
    double load_before, load_after;   /* bytes or writes, as the plan balances */
} shard_rebalance_pair;

/*
 * Called by shard_rebalance_run() before each move (report NULL, rc 0) and
 * after it (its report and return code). `index` counts from 0 of `count`.
 * Return non-zero to start no further move: returned before a move, that
 * move is skipped; after one, it was the last.
 */
typedef int (*shard_rebalance_fn)(const shard_rebalance_move *move, size_t index,
                                  size_t count, int rc, const shard_move_report *report,
                                  void *payload);

/* 2: the step's report has this header's layout, SHARD_MOVE_REPORT_VERSION;
 * a version-1 caller's step gets the first layout (libshard 0.1.0's). */
#define SHARD_REBALANCE_OPTIONS_VERSION 2

typedef struct shard_rebalance_options {
    unsigned version;        /* SHARD_REBALANCE_OPTIONS_VERSION */
    int by;                  /* SHARD_REBALANCE_BY_BYTES (default) or _BY_WRITES */
    double threshold;        /* the band around the mean load, and the least gain of a
                                move, as a fraction of the mean (default 0.10) */
    unsigned max_moves;      /* at most this many moves in the plan (0: no limit) */
    const char *pairs;       /* "P1,P2,...": the only pairs to move between (NULL: all) */
    const char *drain;       /* "P1[,P2...]": pairs to empty (NULL: none) */
    unsigned sample_ms;      /* SHARD_REBALANCE_BY_WRITES: sampling interval (default 5000) */
    const shard_move_options *move; /* options of each move (NULL: the defaults) */
    shard_rebalance_fn step; /* may be NULL */
    void *payload;
} shard_rebalance_options;

#define SHARD_REBALANCE_OPTIONS_INIT \
    { SHARD_REBALANCE_OPTIONS_VERSION, SHARD_REBALANCE_BY_BYTES, 0.10, 0, NULL, NULL, 5000, \
      NULL, NULL, NULL }

/*
 * Measure every considered pair (each shard database's size, and with
 * SHARD_REBALANCE_BY_WRITES its write rate over opts->sample_ms) and plan
 * the moves that bring every pair within opts->threshold of the mean.
 * Nothing changes. *out is the caller's (shard_rebalance_free); a
 * balanced cluster gives a plan of 0 moves. opts may be NULL.
 */
SHARD_EXPORT int shard_rebalance_plan(shard_ctx *ctx, const shard_rebalance_options *opts,
                                      shard_rebalance **out);
SHARD_EXPORT void shard_rebalance_free(shard_rebalance *plan);
/* The plan's moves, in the order they run (*count of them; borrowed from
 * the plan, valid until shard_rebalance_free). */
SHARD_EXPORT const shard_rebalance_move *shard_rebalance_moves(const shard_rebalance *plan,
                                                               size_t *count);
/* The pairs the plan considered, in map order (*count; borrowed). */
SHARD_EXPORT const shard_rebalance_pair *shard_rebalance_pairs(const shard_rebalance *plan,
                                                               size_t *count);
/* (max - min) / mean of the loads of the pairs that keep shards, before and
 * after the plan; 0 when there is no load. */
SHARD_EXPORT void shard_rebalance_spread(const shard_rebalance *plan, double *before,
                                         double *after);
/* The map version the plan was made on. */
SHARD_EXPORT uint64_t shard_rebalance_map_version(const shard_rebalance *plan);
/*
 * Run the plan's moves one after another with shard_move(), each with
 * opts->move, calling opts->step around each. Refused (SHARD_ECONFLICT)
 * when the map is no longer the one the plan was made on. *done (may be
 * NULL) gets the number of moves that completed. Stopping through
 * opts->step returns 0; the first failed move stops the run with its code.
 */
SHARD_EXPORT int shard_rebalance_run(shard_ctx *ctx, const shard_rebalance *plan,
                                     const shard_rebalance_options *opts, size_t *done);
/*
 * The context's counters in the Prometheus text exposition format (0.0.4):
 * calls, errors and durations per function, retries, fence waits, map
 * reads, the map version and each server's pool. *text (NUL-terminated) is
 * the caller's: shard_free(). Safe to call from any thread at any time.
 */
SHARD_EXPORT int shard_ctx_stats(shard_ctx *ctx, char **text);

#ifdef __cplusplus
}
#endif

#endif /* LIBSHARD_H */
