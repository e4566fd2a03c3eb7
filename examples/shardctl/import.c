/*
 * shardctl: imports from an unsharded database (libshard-import(7)):
 * import (a legacy table of objects) and import-mapping (a join table).
 */
#include "shardctl.h"

#include <inttypes.h>
#include <string.h>

#define IMPORT_MAX_PASSES 100

/*
 * The library says "import NAME: rows" while it reads, then other phases
 * ("looking for deleted rows") and "import NAME: done": one display for
 * the pass, its label naming the phase past the reading.
 */
static void on_import_progress(const char *what, uint64_t done, uint64_t total, void *payload)
{
    progress *p = payload;
    const char *colon = strrchr(what, ':');
    size_t head = colon ? (size_t)(colon - what) : strlen(what);
    const char *phase = colon ? colon + 2 : "";

    if (!p->active)
        progress_begin(p, "", "rows");
    if (strcmp(phase, "rows") == 0 || strcmp(phase, "done") == 0 || !*phase)
        snprintf(p->label, sizeof p->label, "%.*s", (int)head, what);
    else
        snprintf(p->label, sizeof p->label, "%s", what);
    if (strcmp(phase, "done") == 0) {
        p->done = done;
        p->total = total;
        progress_end(p);
        return;
    }
    progress_update(p, done, total);
}

/* COLUMN:TYPE, e.g. board_id:boards: the column into col, the type parsed. */
static int column_type(const char *opt, const char *s, const shard_map *map, char *col,
                       size_t size, unsigned *type)
{
    const char *colon = s ? strchr(s, ':') : NULL;

    if (!colon || colon == s || (size_t)(colon - s) >= size || !colon[1])
        return usage_error("%s takes COLUMN:TYPE, e.g. %s board_id:boards", opt, opt), -1;
    memcpy(col, s, (size_t)(colon - s));
    col[colon - s] = '\0';
    return parse_type(map, colon + 1, type);
}

/* The options both imports share. */
static int import_common(const args *a, shard_import_options *o, progress *p)
{
    if (!a->val[OPT_FROM] || !a->val[OPT_TABLE])
        return usage_error("%s needs --from mysql://USER@HOST[:PORT]/DB and --table T",
                           a->pos[0]), -1;
    o->source = a->val[OPT_FROM];
    o->password_env = a->val[OPT_FROM_PASSWORD_ENV];
    o->table = a->val[OPT_TABLE];
    if (parse_threads(a, &o->threads))
        return -1;
    if (a->val[OPT_DRY_RUN])
        o->flags |= SHARD_IMPORT_DRY_RUN;
    progress_init(p);
    o->progress = on_import_progress;
    o->payload = p;
    return 0;
}

/* Passes (one, or until one finds nothing to do), a summary line each. */
static int import_passes(const args *a, shard_ctx *ctx, const shard_import_options *o,
                         const char *name, int mapping)
{
    int until_clean = a->val[OPT_UNTIL_CLEAN] != NULL;

    for (int pass = 1;; pass++) {
        shard_import_report r = SHARD_IMPORT_REPORT_INIT;
        int rc = mapping ? shard_import_mapping(ctx, o, &r) : shard_import_table(ctx, o, &r);
        progress_stop(o->payload); /* the error line starts on a line of its own */
        if (rc)
            return lib_error(rc);
        printf("import %s: %" PRIu64 " new, %" PRIu64 " changed, %" PRIu64 " deleted, %" PRIu64
               " unchanged\n", name, r.created, r.changed, r.deleted, r.unchanged);
        fflush(stdout);
        if (!until_clean || (r.created | r.changed | r.deleted) == 0 || o->flags)
            return 0;
        if (pass == IMPORT_MAX_PASSES) {
            fprintf(stderr, "shardctl: import %s: still differences after %d passes: the "
                    "legacy side keeps changing faster than passes catch up\n", name, pass);
            return EXIT_FAIL;
        }
    }
}

int cmd_import(const args *a, shard_ctx *ctx, shard_map *map)
{
    shard_import_options o = SHARD_IMPORT_OPTIONS_INIT;
    const char *name = NULL;
    progress p;
    char near_col[80];

    if (import_common(a, &o, &p))
        return EXIT_USAGE;
    if (!a->val[OPT_AS])
        return usage_error("import needs --as TYPE");
    o.id_column = a->val[OPT_ID_COLUMN];
    o.json_column = a->val[OPT_JSON_COLUMN];
    if (parse_type(map, a->val[OPT_AS], &o.type) ||
        (a->val[OPT_NEAR] && column_type("--near", a->val[OPT_NEAR], map, near_col,
                                         sizeof near_col, &o.near_type)))
        return EXIT_USAGE;
    o.near_column = a->val[OPT_NEAR] ? near_col : NULL;
    shard_map_type_name(map, o.type, &name);
    return import_passes(a, ctx, &o, name, 0);
}

int cmd_import_mapping(const args *a, shard_ctx *ctx, shard_map *map)
{
    shard_import_options o = SHARD_IMPORT_OPTIONS_INIT;
    progress p;
    char from_col[80], to_col[80];

    if (import_common(a, &o, &p))
        return EXIT_USAGE;
    if (!a->val[OPT_FROM_COLUMN] || !a->val[OPT_TO_COLUMN] || !a->val[OPT_NAME])
        return usage_error("import-mapping needs --from-column C:TYPE, --to-column C:TYPE "
                           "and --name MAPPING");
    if (column_type("--from-column", a->val[OPT_FROM_COLUMN], map, from_col, sizeof from_col,
                    &o.from_type) ||
        column_type("--to-column", a->val[OPT_TO_COLUMN], map, to_col, sizeof to_col,
                    &o.to_type))
        return EXIT_USAGE;
    o.from_column = from_col;
    o.to_column = to_col;
    o.mapping = a->val[OPT_NAME];
    o.seq_column = a->val[OPT_SEQ_COLUMN];
    return import_passes(a, ctx, &o, o.mapping, 1);
}
