/*
 * The import's private header (libshard-import(7)): one import run's
 * state, shared by the files of lib/import/:
 *
 *   source.c   the legacy server: its URL, connection, lock and queries
 *   convert.c  legacy rows to objects: column types, UTF-8, checksums
 *   lookup.c   lookup entries: classifying a batch, writing entries, the
 *              pass marker, finding what an interrupted pass wrote
 *   write.c    writing objects: one idempotent upsert per shard batch at
 *              IDs known in advance, rewrites and soft deletes; a batch's
 *              entries
 *   pass.c     a pass over a legacy table; shard_import_table
 *   mapping.c  join tables; shard_import_mapping
 *   setup.c    options, checks of the legacy table, the run's start and end
 *
 * The write model: a new row's object gets the legacy id as its local id
 * (an explicit value in the AUTO_INCREMENT column), so its ID is known
 * before anything is written; the object is written first (an upsert, in
 * the shard's own transaction, behind the fence) and its lookup entry
 * second (an upsert on a mod shard). Both are idempotent: a pass that dies
 * between them leaves an object without an entry, which the next pass
 * finds (a pass marker says it must look) and completes. pass.c runs the
 * stages as a pipeline (batch N-1's entries, batch N's objects, batch
 * N+1's read at once), never a batch's entries before its objects.
 */
#ifndef LIBSHARD_IMPORT_IMPORT_H
#define LIBSHARD_IMPORT_IMPORT_H

#include "../legacy.h"
#include "../object.h"
#include "../report.h"

#define IMPORT_MAX_BATCH 100000
#define IMPORT_MAX_THREADS 64
/* Without batch_rows, a pass reads about this many bytes of objects (or of
 * a join table's records) per batch (rows, not bytes, bound a keyset read:
 * the next batch's row count follows the rows seen so far), between these
 * many rows. */
#define IMPORT_BATCH_BYTES (4u << 20)
#define IMPORT_BATCH_FIRST 1000
#define IMPORT_BATCH_MIN 100
#define IMPORT_BATCH_MAX 20000
/* How long a pass waits for the import's lock before SHARD_EBUSY. */
#define IMPORT_LOCK_WAIT_S 30
/* The lookup key of the pass marker: never a legacy id (those are digits). */
#define IMPORT_MARKER_KEY "~import"

/* ---- the source database (source.c) --------------------------------------- */

typedef struct import_source {
    MYSQL *my;
    char db[65];
    char label[400]; /* "source HOST:PORT/DB", for messages */
} import_source;

/* SHARD_EINVAL naming `what` unless s is a plain legacy name (A-Z a-z 0-9 _ $). */
int import_check_name(const char *what, const char *s);
/* Connect, read UTC timestamps, and take GET_LOCK(lockname) unless NULL. */
int import_source_open(shard_ctx *ctx, const shard_import_options *o, const char *lockname,
                       import_source *s);
void import_source_close(import_source *s);
int import_source_query(import_source *s, const char *sql, size_t len, MYSQL_RES **res);
/* The first column of the first row as text ("" when none). */
int import_source_value(import_source *s, const char *sql, char *out, size_t size);
int import_md5_hex(const char *data, size_t len, char hex[33]);
/* "shard_import:NAME", or a digest of NAME where that is over 64 characters. */
void import_lock_name(const char *name, char out[80]);

/* ---- one run ---------------------------------------------------------------- */

typedef enum import_action {
    ACT_NONE, ACT_NEW, ACT_CHANGED, ACT_UNCHANGED
} import_action;

typedef struct import_item {
    uint64_t legacy;
    char key[24];
    char *text;       /* the object's JSON (NULL: not made yet, import_items_text) */
    size_t len;       /* its length, known before the text is made */
    MYSQL_ROW row;    /* the legacy row (in its batch's result) and its lengths */
    const unsigned long *lens;
    char md5[33];     /* of its canonical form */
    uint64_t parent;  /* near: the parent's legacy id; 0: none */
    legacy_entry e;
    import_action act;
    unsigned shard;
    uint64_t id;      /* NEW: (shard, type, legacy), known before writing */
    bool fixed;       /* NEW at an ID that must not change (revived, adopted) */
    bool adopted;     /* NEW: an interrupted pass wrote the object already */
    bool collided;    /* NEW: a native object holds that local id on shard */
    bool written;     /* the object write committed */
    char *val;        /* the lookup value to write */
} import_item;

typedef struct import_run {
    shard_ctx *ctx;
    const shard_import_options *o;
    import_source src;
    char name[65];            /* the type's table, or the mapping */
    unsigned type;
    char lookup[SHARD_DBNAME_MAX];
    char table[65];           /* legacy table */
    char id_col[65];
    unsigned open_shards;
    unsigned threads;
    unsigned batch;           /* rows of the next read */
    bool fixed_batch;         /* batch_rows given: never adapted */
    bool dry;
    bool repair;              /* a marker was found: objects may lack entries */
    bool empty;               /* the lookup had no entry at all: every row is new */
    bool marked;              /* this pass wrote the marker */
    uint64_t collisions;      /* rows placed off their shard by a native object */
    uint64_t seen_live;       /* rows the forward scan found a live entry for */
    shard_import_report rep;
    uint64_t estimate;
    double t0, last_progress;
    /* mapping imports */
    char seq_expr[200];
} import_run;

/* setup.c */
int import_check_options(const shard_import_options *o);
void import_run_init(import_run *r, shard_ctx *ctx, const shard_import_options *o);
void import_run_end(import_run *r, shard_import_report *report, int rc);
/* Without batch_rows, the next read's rows: about IMPORT_BATCH_BYTES at the
 * bytes per row of the batch just read (`bytes` over `rows`), within
 * IMPORT_BATCH_MIN..IMPORT_BATCH_MAX. */
void import_adapt_batch(import_run *r, size_t bytes, size_t rows);
/* The test hook, at a named point of a pass (legacy.h). */
void import_hook(const char *point);
void import_progress(import_run *r, const char *phase, bool force);
int import_table_setup(import_run *r);
int import_mapping_setup(import_run *r);
/* The columns of the legacy table, from a statement that reads no row. */
int import_probe(import_run *r, MYSQL_RES **res);
const MYSQL_FIELD *import_field_named(MYSQL_RES *res, const char *name);

/* ---- convert.c ---------------------------------------------------------------- */

typedef enum import_kind {
    COL_INT, COL_UINT, COL_BIT, COL_DECIMAL, COL_REAL, COL_TEMPORAL, COL_TEXT,
    COL_BINARY, COL_NULL, COL_OTHER
} import_kind;

import_kind import_kind_of(const MYSQL_FIELD *f);
bool import_kind_integer(import_kind k);
int import_parse_i64(const char *s, int64_t *v);
/* SELECT * of the legacy table with `where` appended. */
int import_read_rows(import_run *r, const char *where, MYSQL_RES **res);
/* Every row of res as an item (its checksum, and its object text unless
 * !text): res and *lens (the caller's to free) must outlive the items. */
int import_res_items(import_run *r, MYSQL_RES *res, bool text, import_item **out, size_t *n,
                     unsigned long **lens);
/* The object texts its[i] lack (import_res_items without text): only rows
 * that are written need one, and an unchanged pass writes none. */
int import_items_text(import_run *r, MYSQL_RES *res, import_item **its, size_t n);
void import_items_free(import_item *it, size_t n);

/* ---- lookup.c ------------------------------------------------------------------- */

/* Read the batch's entries and decide each item's action (and, for new
 * rows, its shard and ID). */
int import_classify(import_run *r, import_item *it, size_t n);
int import_set_val(import_item *it, const char *fmt, ...) SHARD_PRINTF(2, 3);
/* Write its[i]->val as the entries of its[0..n). */
int import_put_vals(import_run *r, import_item **its, size_t n);
/* The pass marker: read at the start (r->repair), written before the
 * pass's first write, removed when the pass ends cleanly. */
int import_marker_read(import_run *r);
int import_mark(import_run *r);
int import_unmark(import_run *r);
/* Repair passes: find objects an interrupted pass wrote for new items
 * (by local id, on every shard) and adopt them. */
int import_find_written(import_run *r, import_item **its, size_t n);

/* ---- write.c ------------------------------------------------------------------- */

/* New objects written (it->written: committed at it->id). */
int import_create(import_run *r, import_item **its, size_t n);
/* Changed rows' objects rewritten (act becomes ACT_UNCHANGED for one
 * deleted through libshard since). */
int import_change(import_run *r, import_item **its, size_t n);
/* The entries of the written ones of nw[0..nn) and of the rewritten ones of
 * ch[0..nc): *made and *changed count them. */
int import_entries(import_run *r, import_item **nw, size_t nn, import_item **ch, size_t nc,
                   uint64_t *made, uint64_t *changed);
/* Gone rows: objects soft-deleted, then their entries "ID deleted". */
int import_delete(import_run *r, import_item **its, size_t n);


#endif
