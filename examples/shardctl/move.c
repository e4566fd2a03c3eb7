/*
 * shardctl: the move commands (move, and move status, resume, abort,
 * revert, finish): options, the progress of each phase, the dry run's plan
 * summed up, the report, and what to do when a move stops
 * (libshard-move(7)).
 */
#include "shardctl.h"

#include <jansson.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- progress and the report -------------------------------------------- */

/* Every phase is announced; the two that count rows get the progress display. */
static void on_move_progress(int phase, uint64_t done, uint64_t total, void *payload)
{
    move_display *d = payload;

    if (phase != d->phase) {
        progress_end(&d->bar);
        d->phase = phase;
        fprintf(stderr, "move: %s\n", shard_move_phase_name(phase));
        if (phase == SHARD_MOVE_COPYING || phase == SHARD_MOVE_VERIFYING)
            progress_begin(&d->bar, shard_move_phase_name(phase), "rows");
        else if (phase == SHARD_MOVE_DROPPING)
            progress_begin(&d->bar, shard_move_phase_name(phase), "databases");
    }
    if (done || total)
        progress_update(&d->bar, done, total);
}

/* After the library returned: a phase that counted ends, or stops short
 * when the call failed (rc). */
void move_display_end(move_display *d, int rc)
{
    if (rc)
        progress_stop(&d->bar);
    else
        progress_end(&d->bar);
    d->phase = -1;
}

/* A move done for its caller whose source's copies are still to drop. */
static int drop_left(const shard_move_report *r, const shard_move_options *o)
{
    return r->move_id && r->phase == SHARD_MOVE_DONE && !r->source_dropped &&
           !(o->flags & SHARD_MOVE_KEEP_SOURCE);
}

static void print_report(const shard_move_report *r, const shard_move_options *o)
{
    printf("move %" PRIu64 ": shards %u-%u from %s to %s: %s\n", r->move_id, r->first,
           r->last, r->source, r->target, shard_move_phase_name(r->phase));
    printf("  copied %" PRIu64 " row%s, %" PRIu64 " bytes in %d table%s in %.2f s (%.0f rows/s, "
           "%.1f MB/s)\n", r->rows_copied, r->rows_copied == 1 ? "" : "s", r->bytes_copied,
           (int)r->tables, r->tables == 1 ? "" : "s", r->copy_seconds,
           r->copy_seconds > 0 ? (double)r->rows_copied / r->copy_seconds : 0,
           r->copy_seconds > 0 ? (double)r->bytes_copied / r->copy_seconds / 1e6 : 0);
    printf("  catch-up %.2f s, cut-over %.2f s, pause %.1f ms (%u fence attempt%s)\n",
           r->catchup_seconds, r->cutover_seconds, r->pause_ms, r->fence_attempts,
           r->fence_attempts == 1 ? "" : "s");
    printf("  verified %" PRIu64 " rows in %.2f s: %" PRIu64 " mismatch%s\n", r->rows_verified,
           r->verify_seconds, r->mismatches, r->mismatches == 1 ? "" : "es");
    printf("  map version %" PRIu64 " published; source %s\n", r->map_version,
           r->source_dropped ? "dropped" : drop_left(r, o) ? "left to drop (dropping it now)"
                                                           : "kept");
    if (r->phase == SHARD_MOVE_REVERSIBLE)
        printf("  reversible: the source is kept in sync from the target until the reverse "
               "window ends; shardctl move revert %" PRIu64 " flips back, shardctl move "
               "finish %" PRIu64 " drops the source now\n", r->move_id, r->move_id);
    if (r->phase == SHARD_MOVE_REVERTED)
        printf("  reverted: the map is back on %s; the copies on %s %s\n", r->target,
               r->source, r->source_dropped ? "dropped" : "kept");
    if (r->phase >= SHARD_MOVE_FLIPPED && r->phase != SHARD_MOVE_REVERSIBLE && r->target[0])
        printf("  target pair %s: %s\n", r->target,
               r->target_pair_healthy ? "healthy (both halves hold the moved rows, both "
                                        "links running)"
                                      : "NOT healthy (see the warning above)");
}

/* A move that stopped: which, where, why, and the commands that go on
 * from there (the reason is the library's message). */
int move_stopped(int rc, const shard_move_report *r)
{
    const char *msg = shard_errmsg();

    if (!r->move_id || r->phase == SHARD_MOVE_DONE || r->phase == SHARD_MOVE_ABORTED ||
        r->phase == SHARD_MOVE_REVERTED)
        return lib_error(rc);
    if (r->phase == SHARD_MOVE_REVERSIBLE) {
        fprintf(stderr, "shardctl: move %" PRIu64 ": %s\n", r->move_id,
                *msg ? msg : shard_strerror(rc));
        fprintf(stderr, "shardctl: the move is still reversible: shardctl move finish %" PRIu64
                " or shardctl move revert %" PRIu64 "\n", r->move_id, r->move_id);
        return exit_code(rc);
    }
    fprintf(stderr, "shardctl: move %" PRIu64 " stopped in phase %s: %s\n", r->move_id,
            shard_move_phase_name(r->phase), *msg ? msg : shard_strerror(rc));
    fprintf(stderr, "shardctl: to continue it: shardctl move resume %" PRIu64 "\n",
            r->move_id);
    if (r->phase < SHARD_MOVE_FLIPPED)
        fprintf(stderr, "shardctl: to undo it: shardctl move abort %" PRIu64 "\n", r->move_id);
    return exit_code(rc);
}

/*
 * A move done with its source's copies left to drop: this process drops
 * them now, one database at a time, paced (libshard-move(7), "Dropping
 * the source"); a kill leaves the move dropping, for move resume.
 */
static int drop_rest(shard_ctx *ctx, shard_move_options *o, move_display *d,
                     const shard_move_report *r)
{
    shard_move_report dr = SHARD_MOVE_REPORT_INIT;
    double t0 = ctl_now();
    int rc;

    if (!drop_left(r, o))
        return 0;
    fflush(stdout);
    rc = shard_move_resume(ctx, r->move_id, o, &dr);
    move_display_end(d, rc);
    if (rc == SHARD_ENOTFOUND) /* over already: a resumed move kept its source */
        return 0;
    if (rc)
        return move_stopped(rc, &dr);
    printf("  source %s: shards %u-%u dropped in %.2f s\n", dr.source, dr.first, dr.last,
           ctl_now() - t0);
    return 0;
}

/* ---- options --------------------------------------------------------------- */

static int parse_range(const char *s, unsigned *first, unsigned *last)
{
    char *dash = strchr(s, '-'), buf[32];
    unsigned long long a, b;

    if (!dash || strlen(s) >= sizeof buf)
        return usage_error("--shards takes a range A-B, e.g. --shards 0-31"), -1;
    memcpy(buf, s, (size_t)(dash - s));
    buf[dash - s] = '\0';
    if (parse_num("--shards start", buf, 0, SHARD_MAX_SHARD, &a) ||
        parse_num("--shards end", dash + 1, 0, SHARD_MAX_SHARD, &b))
        return -1;
    if (a > b)
        return usage_error("--shards %s is reversed", s), -1;
    *first = (unsigned)a;
    *last = (unsigned)b;
    return 0;
}

static int confirm(unsigned first, unsigned last, const char *to)
{
    char line[16];
    if (!isatty(STDIN_FILENO))
        return usage_error("stdin is not a terminal to confirm on: add --yes to move "
                           "shards %u-%u to %s", first, last, to);
    fprintf(stderr, "Move shards %u-%u to %s, online? [y/N] ", first, last, to);
    if (!fgets(line, sizeof line, stdin) || (line[0] != 'y' && line[0] != 'Y')) {
        fprintf(stderr, "shardctl: not confirmed; nothing was changed\n");
        return EXIT_FAIL;
    }
    return 0;
}

/* The cut-over controls (shardctl(1), move): how close the target must be,
 * how long the fence waits for locks, how often it tries, and a file that
 * holds the cut-over while it exists. */
static int cutover_options(const args *a, shard_move_options *o)
{
    unsigned long long n;

    if (a->val[OPT_MAX_LAG_MS]) {
        if (parse_num("--max-lag-ms", a->val[OPT_MAX_LAG_MS], 1, 3600000, &n))
            return -1;
        o->max_lag_ms = (unsigned)n;
    }
    if (a->val[OPT_FENCE_TIMEOUT]) {
        if (parse_num("--fence-timeout", a->val[OPT_FENCE_TIMEOUT], 1, 3600, &n))
            return -1;
        o->fence_timeout_s = (unsigned)n;
    }
    if (a->val[OPT_CUTOVER_ATTEMPTS]) {
        if (parse_num("--cutover-attempts", a->val[OPT_CUTOVER_ATTEMPTS], 1, 1000000, &n))
            return -1;
        o->cutover_attempts = (unsigned)n;
    }
    if (a->val[OPT_POSTPONE_CUTOVER]) {
        if (!a->val[OPT_POSTPONE_CUTOVER][0])
            return usage_error("--postpone-cutover takes a file name"), -1;
        o->postpone_cutover_file = a->val[OPT_POSTPONE_CUTOVER];
    }
    return 0;
}

/* 3600, 3600s, 30m, 2h, 1d: seconds. */
static int parse_duration(const char *what, const char *s, unsigned *out)
{
    unsigned long long n = 0, mult = 1;
    char buf[32];
    size_t len = strlen(s);

    if (len == 0 || len >= sizeof buf)
        return usage_error("%s takes a duration such as 3600s, 30m, 2h or 1d", what), -1;
    memcpy(buf, s, len + 1);
    switch (buf[len - 1]) {
    case 's': mult = 1; buf[--len] = '\0'; break;
    case 'm': mult = 60; buf[--len] = '\0'; break;
    case 'h': mult = 3600; buf[--len] = '\0'; break;
    case 'd': mult = 86400; buf[--len] = '\0'; break;
    default: break;
    }
    if (parse_num(what, buf, 1, UINT32_MAX / mult, &n))
        return -1;
    *out = (unsigned)(n * mult);
    return 0;
}

/* --max-load VAR=N[,VAR=N...]: VAR letters and _, N a positive integer. */
static int check_max_load(const char *s)
{
    const char *p = s;

    for (;;) {
        size_t len = 0, digits = 0;
        while ((p[len] >= 'A' && p[len] <= 'Z') || (p[len] >= 'a' && p[len] <= 'z') ||
               p[len] == '_')
            len++;
        if (len == 0 || p[len] != '=')
            return usage_error("--max-load '%s': expected VAR=N[,VAR=N...], VAR a status "
                               "variable name such as Threads_running", s), -1;
        p += len + 1;
        while (p[digits] >= '0' && p[digits] <= '9')
            digits++;
        if (digits == 0 || digits > 19 || strspn(p, "0") >= digits ||
            (p[digits] && p[digits] != ','))
            return usage_error("--max-load '%s': each limit must be a positive integer", s),
                   -1;
        p += digits;
        if (!*p)
            return 0;
        p++;
    }
}

/* The options of every command that runs a move (the command table says
 * which of them each takes), and the progress display. */
int move_options(const args *a, shard_move_options *o, move_display *d)
{
    unsigned long long n;

    if (a->val[OPT_REVERSE_WINDOW] &&
        parse_duration("--reverse-window", a->val[OPT_REVERSE_WINDOW], &o->reverse_window_s))
        return -1;
    if (parse_threads(a, &o->copy_threads))
        return -1;
    if (a->val[OPT_MAX_ROWS_PER_SECOND]) {
        if (parse_num("--max-rows-per-second", a->val[OPT_MAX_ROWS_PER_SECOND], 1,
                      UINT64_MAX, &n))
            return -1;
        o->max_rows_per_second = n;
    }
    if (a->val[OPT_MAX_LOAD]) {
        if (check_max_load(a->val[OPT_MAX_LOAD]))
            return -1;
        o->max_load = a->val[OPT_MAX_LOAD];
    }
    if (a->val[OPT_KEEP_SOURCE])
        o->flags |= SHARD_MOVE_KEEP_SOURCE;
    if (cutover_options(a, o))
        return -1;
    progress_init(&d->bar);
    d->phase = -1;
    o->progress = on_move_progress;
    o->payload = d;
    return 0;
}

/* ---- the dry-run plan, summed up ----------------------------------------- */

/* At most this many lines sum up the databases of a dry run. */
#define PLAN_RANGE_LINES 16

typedef struct plan_db {
    char name[65];
    unsigned long long tables, rows, bytes;
} plan_db;

/* A plan line "table DB.TABLE: R rows, B bytes on disk"; 0 for any other. */
static int plan_table(const char *line, size_t len, char *db, unsigned long long *rows,
                      unsigned long long *bytes)
{
    const char *dot = memchr(line, '.', len), *colon;

    if (len < 6 || strncmp(line, "table ", 6) != 0 || !dot || dot - line - 6 >= 65 ||
        !(colon = strstr(dot, ": ")) || colon >= line + len ||
        sscanf(colon + 2, "%llu rows, %llu bytes", rows, bytes) != 2)
        return 0;
    memcpy(db, line + 6, (size_t)(dot - line - 6));
    db[dot - line - 6] = '\0';
    return 1;
}

/* The databases of the plan's table lines, in order; NULL when none. */
static plan_db *plan_dbs(const char *plan, size_t *n)
{
    plan_db *dbs = NULL;
    size_t cap = 0;

    *n = 0;
    for (const char *l = plan; *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char db[65];
        unsigned long long rows, bytes;
        if (plan_table(l, len, db, &rows, &bytes)) {
            if (!*n || strcmp(dbs[*n - 1].name, db) != 0) {
                if (*n == cap) {
                    plan_db *more = realloc(dbs, (cap = cap ? 2 * cap : 64) * sizeof *dbs);
                    if (!more) {
                        free(dbs);
                        *n = 0;
                        return NULL;
                    }
                    dbs = more;
                }
                memset(&dbs[*n], 0, sizeof *dbs);
                snprintf(dbs[(*n)++].name, sizeof dbs->name, "%s", db);
            }
            dbs[*n - 1].tables++;
            dbs[*n - 1].rows += rows;
            dbs[*n - 1].bytes += bytes;
        }
        l += len + (end ? 1 : 0);
    }
    return dbs;
}

/* Databases [i, j) summed up: as a line, or as a JSON object. */
static void plan_range(const plan_db *d, size_t i, size_t j, json_t *out)
{
    unsigned long long tables = 0, rows = 0, bytes = 0;
    char size[32];

    for (size_t k = i; k < j; k++) {
        tables += d[k].tables;
        rows += d[k].rows;
        bytes += d[k].bytes;
    }
    if (out) {
        json_array_append_new(out, json_pack("{s:s,s:s,s:I,s:I,s:I,s:I}", "first", d[i].name,
                                             "last", d[j - 1].name, "databases",
                                             (json_int_t)(j - i), "tables", (json_int_t)tables,
                                             "rows", (json_int_t)rows, "bytes",
                                             (json_int_t)bytes));
        return;
    }
    human_bytes((long long)bytes, size, sizeof size);
    printf("databases %s%s%s: %zu database%s, %llu tables, %llu rows, %s on disk\n",
           d[i].name, j - i > 1 ? "-" : "", j - i > 1 ? d[j - 1].name : "", j - i,
           j - i == 1 ? "" : "s", tables, rows, size);
}

static void plan_json(const char *plan, const plan_db *dbs, size_t n, size_t chunk,
                      int verbose)
{
    json_t *doc = json_object(), *checks = json_array(), *ranges = json_array();
    json_t *tables = json_array(), *other = json_array();
    char *text;

    for (const char *l = plan; *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char db[65];
        unsigned long long rows, bytes;
        json_t *line = json_stringn(l, len);
        if (plan_table(l, len, db, &rows, &bytes))
            json_array_append(tables, line);
        else if (len > 6 && strncmp(l, "check ", 6) == 0)
            json_array_append(checks, line);
        else if (len > 8 && strncmp(l, "phases: ", 8) == 0)
            json_object_set_new(doc, "phases", json_stringn(l + 8, len - 8));
        else if (l == plan)
            json_object_set(doc, "move", line);
        else
            json_array_append(other, line);
        json_decref(line);
        l += len + (end ? 1 : 0);
    }
    for (size_t i = 0; i < n; i += chunk)
        plan_range(dbs, i, i + chunk < n ? i + chunk : n, ranges);
    plan_range(dbs, 0, n, other); /* the whole move, last */
    json_object_set_new(doc, "checks", checks);
    json_object_set_new(doc, "ranges", ranges);
    json_object_set_new(doc, "total", json_incref(json_array_get(other,
                                                             json_array_size(other) - 1)));
    json_array_remove(other, json_array_size(other) - 1);
    json_object_set_new(doc, "notes", other);
    if (verbose)
        json_object_set_new(doc, "tables", tables);
    else
        json_decref(tables);
    if ((text = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER))) {
        printf("%s\n", text);
        free(text);
    }
    json_decref(doc);
}

/*
 * The plan of move --dry-run: its table lines summed up per range of
 * databases (at most PLAN_RANGE_LINES lines), every table only with
 * --verbose, or one JSON document with --json. A plan without table lines
 * is printed as it is.
 */
static void print_plan(const args *a, const char *plan)
{
    size_t n = 0, chunk;
    plan_db *dbs = plan_dbs(plan, &n);
    int verbose = (a->seen & O(OPT_VERBOSE)) != 0, shown = 0;

    if (!dbs) {
        fputs(plan, stdout);
        return;
    }
    chunk = (n + PLAN_RANGE_LINES - 1) / PLAN_RANGE_LINES;
    if (a->seen & O(OPT_JSON)) {
        plan_json(plan, dbs, n, chunk, verbose);
        free(dbs);
        return;
    }
    for (const char *l = plan; *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char db[65];
        unsigned long long rows, bytes;
        int table = plan_table(l, len, db, &rows, &bytes);
        if (table && !shown) {
            for (size_t i = 0; i < n; i += chunk)
                plan_range(dbs, i, i + chunk < n ? i + chunk : n, NULL);
            shown = 1;
        }
        if (!table || verbose)
            printf("%.*s\n", (int)len, l);
        l += len + (end ? 1 : 0);
    }
    free(dbs);
}

/* ---- the commands ---------------------------------------------------------- */

int cmd_move(const args *a, shard_ctx *ctx, shard_map *map)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    move_display d;
    unsigned first, last;
    char *plan = NULL;
    int rc;

    (void)map;
    if (!a->val[OPT_SHARDS] || !a->val[OPT_TO])
        return usage_error("move needs --shards A-B and --to PAIR (or a subcommand: status, "
                           "resume, abort, revert, finish)");
    if (parse_range(a->val[OPT_SHARDS], &first, &last) || move_options(a, &o, &d))
        return EXIT_USAGE;
    if (a->val[OPT_DRY_RUN])
        o.flags |= SHARD_MOVE_DRY_RUN;
    else if (!a->val[OPT_YES] && (rc = confirm(first, last, a->val[OPT_TO])))
        return rc;
    rc = shard_move(ctx, first, last, a->val[OPT_TO], &o, &r, &plan);
    move_display_end(&d, rc);
    if (plan)
        print_plan(a, plan);
    else if (rc == 0 || r.move_id)
        print_report(&r, &o);
    shard_free(plan);
    return rc ? move_stopped(rc, &r) : drop_rest(ctx, &o, &d, &r);
}

/* The optional move ID argument. */
static int move_id_arg(const args *a, uint64_t *id)
{
    unsigned long long n;

    *id = 0;
    if (a->npos == 3) {
        if (parse_num("move ID", a->pos[2], 1, UINT64_MAX, &n))
            return -1;
        *id = n;
    }
    return 0;
}

/* move resume, revert and finish: a journaled move taken further. */
enum { MOVE_RESUME, MOVE_REVERT, MOVE_FINISH };

static int move_again(const args *a, shard_ctx *ctx, int how)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    move_display d;
    uint64_t id;
    int rc;

    if (move_id_arg(a, &id) || move_options(a, &o, &d))
        return EXIT_USAGE;
    if (how == MOVE_RESUME)
        rc = shard_move_resume(ctx, id, &o, &r);
    else if (how == MOVE_REVERT)
        rc = shard_move_revert(ctx, id, &o, &r);
    else
        rc = shard_move_finish(ctx, id, &o, &r);
    move_display_end(&d, rc);
    if (rc == 0 && how == MOVE_RESUME && r.phase == SHARD_MOVE_REVERSIBLE)
        /* Nothing to resume: the window runs until finished or reverted. */
        fprintf(stderr, "shardctl: move %" PRIu64 " is reversible: its reverse window "
                "ends with shardctl move finish %" PRIu64 " or shardctl move revert %" PRIu64
                "\n", r.move_id, r.move_id, r.move_id);
    if (rc == 0 || (r.move_id && (how == MOVE_RESUME || r.phase != SHARD_MOVE_REVERSIBLE)))
        print_report(&r, &o);
    return rc ? move_stopped(rc, &r) : drop_rest(ctx, &o, &d, &r);
}

int cmd_move_resume(const args *a, shard_ctx *ctx, shard_map *map)
{
    (void)map;
    return move_again(a, ctx, MOVE_RESUME);
}

int cmd_move_revert(const args *a, shard_ctx *ctx, shard_map *map)
{
    (void)map;
    return move_again(a, ctx, MOVE_REVERT);
}

int cmd_move_finish(const args *a, shard_ctx *ctx, shard_map *map)
{
    (void)map;
    return move_again(a, ctx, MOVE_FINISH);
}

int cmd_move_abort(const args *a, shard_ctx *ctx, shard_map *map)
{
    uint64_t id;
    int rc;

    (void)map;
    if (move_id_arg(a, &id))
        return EXIT_USAGE;
    if ((rc = shard_move_abort(ctx, id)))
        return lib_error(rc);
    return 0;
}

int cmd_move_status(const args *a, shard_ctx *ctx, shard_map *map)
{
    char *text = NULL;
    int rc;

    (void)a, (void)map;
    rc = shard_move_status(ctx, &text);
    if (text) /* also on SHARD_EPARTIAL: what could be read, and the errors */
        fputs(text, stdout);
    shard_free(text);
    return rc ? lib_error(rc) : 0;
}
