/*
 * shardctl's private header: the parsed command line, the command table's
 * shape, and the helpers the command families share (examples/shardctl/).
 *
 * main.c holds the option and command tables, the dispatch (which opens
 * and frees the context a command needs, in one place), help and shell
 * completion; util.c the parsing and error helpers; progress.c the one
 * progress display of every long operation; data.c, move.c, rebalance.c,
 * map.c, import.c and fleet.c one family of commands each.
 */
#ifndef SHARDCTL_H
#define SHARDCTL_H

#include <libshard.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* Every option; a command lists the ones it accepts (the global ones: all). */
enum {
    OPT_MAP,
    OPT_HELP,
    OPT_USER,
    OPT_PASSWORD_ENV,
    OPT_CONNECT_TIMEOUT,
    OPT_VERSION,
    OPT_JSON,
    OPT_SHARDS,
    OPT_HEX,
    OPT_SHARD,
    OPT_NEAR,
    OPT_HARD,
    OPT_LIMIT,
    OPT_BEFORE,
    OPT_TO,
    OPT_DRY_RUN,
    OPT_YES,
    OPT_KEEP_SOURCE,
    OPT_THREADS,
    OPT_FORCE,
    OPT_FROM,
    OPT_FROM_PASSWORD_ENV,
    OPT_TABLE,
    OPT_AS,
    OPT_ID_COLUMN,
    OPT_JSON_COLUMN,
    OPT_UNTIL_CLEAN,
    OPT_FROM_COLUMN,
    OPT_TO_COLUMN,
    OPT_NAME,
    OPT_SEQ_COLUMN,
    OPT_LEGACY,
    OPT_MASTER,
    OPT_STANDBY,
    OPT_PAIR,
    OPT_VERBOSE,
    OPT_BY,
    OPT_THRESHOLD,
    OPT_MAX_MOVES,
    OPT_DRAIN,
    OPT_PAIRS,
    OPT_MAX_LAG_MS,
    OPT_FENCE_TIMEOUT,
    OPT_CUTOVER_ATTEMPTS,
    OPT_POSTPONE_CUTOVER,
    OPT_REVERSE_WINDOW,
    OPT_MAX_ROWS_PER_SECOND,
    OPT_MAX_LOAD,
    OPT_PRETTY,
    OPT_MAP_VERSION,
    OPT_WAIT,
    NOPTS
};

#define O(x) (UINT64_C(1) << (x))

/* Options and positional arguments, parsed once for every command. */
typedef struct args {
    const char *map;        /* --map, else $LIBSHARD_MAP; NULL if neither */
    const char *val[NOPTS]; /* option values; "" for a flag that was given */
    uint64_t seen;          /* O(OPT_x) for every option given */
    int npos;
    char **pos; /* the command's words first, then its arguments */
} args;

/* What the dispatcher opens before a command runs, and frees after it. */
enum need {
    NEED_NOTHING, /* the command reads what it needs itself (or nothing) */
    NEED_MAP,     /* the map, loaded from its store: no context */
    NEED_CTX,     /* a context on the map (servers connected lazily) */
    NEED_CTX_MAP, /* a context and a reference to its map */
};

/* A command gets its arguments and what its table entry asked for (NULL
 * for what it did not ask for); it returns the exit status. */
typedef int (*command_fn)(const args *a, shard_ctx *ctx, shard_map *map);

/* ---- util.c -------------------------------------------------------------- */

int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int exit_code(int rc);
int lib_error(int rc);
int parse_num(const char *what, const char *s, unsigned long long min,
              unsigned long long max, unsigned long long *out);
int parse_seq(const char *what, const char *s, int64_t *out);
int parse_id(const char *what, const char *s, uint64_t *id);
int parse_type(const shard_map *map, const char *s, unsigned *type);
int check_object_id(const shard_map *map, const char *s, uint64_t id);
int parse_threads(const args *a, unsigned *threads);
int load_map(const args *a, shard_map **map);
int ctx_options(const args *a, shard_options *o);
int open_ctx(const args *a, shard_ctx **ctx, shard_map **map, shard_log_fn log);
void log_warning(int level, const char *message, void *payload);
void print_object(const char *json, size_t len);
void human_bytes(long long n, char *buf, size_t size);
double ctl_now(void);

/* ---- progress.c: one display for every long operation ------------------- */

typedef struct progress {
    char label[96];   /* "copying", "schema", "import boards" */
    const char *unit; /* "rows", "databases and tables" */
    int tty;          /* a bar redrawn in place; else a line every few seconds */
    int active;       /* begun and not ended */
    double start, last;
    uint64_t done, total;
    size_t line_len; /* of the open terminal line; 0: none */
} progress;

void progress_init(progress *p);
void progress_begin(progress *p, const char *label, const char *unit);
void progress_update(progress *p, uint64_t done, uint64_t total);
void progress_end(progress *p);
void progress_stop(progress *p);
void progress_break(progress *p);

/* ---- the command families ------------------------------------------------ */

/* data.c */
int cmd_id_decode(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_id_encode(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_modshard(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_check(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_obj_create(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_obj_get(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_obj_update(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_obj_delete(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_mapping_add(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_mapping_list(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_mapping_remove(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_mapping_count(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_kv_put(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_kv_get(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_kv_delete(const args *a, shard_ctx *ctx, shard_map *map);

/* move.c */
typedef struct move_display {
    progress bar;
    int phase;
} move_display;

int move_options(const args *a, shard_move_options *o, move_display *d);
void move_display_end(move_display *d, int rc);
int move_stopped(int rc, const shard_move_report *r);
int cmd_move(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_move_status(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_move_resume(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_move_abort(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_move_revert(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_move_finish(const args *a, shard_ctx *ctx, shard_map *map);

/* rebalance.c */
int cmd_rebalance(const args *a, shard_ctx *ctx, shard_map *map);

/* map.c: the map and failover */
int cmd_map_show(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_map_publish(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_failover(const args *a, shard_ctx *ctx, shard_map *map);

/* import.c */
int cmd_import(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_import_mapping(const args *a, shard_ctx *ctx, shard_map *map);

/* fleet.c: status, topology and schema */
int cmd_schema_apply(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_status(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_pair_add(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_pair_remove(const args *a, shard_ctx *ctx, shard_map *map);
int cmd_shards_open(const args *a, shard_ctx *ctx, shard_map *map);

#endif
