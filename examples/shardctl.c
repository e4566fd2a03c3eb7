/*
 * shardctl: the operator's command line for libshard.
 *
 * Exit status: 0 success, 1 the operation failed (not found, server
 * error), 2 bad usage or invalid input. Every error is one line on stderr.
 */
#include <jansson.h>
#include <libshard.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FAIL 1
#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: shardctl [--map FILE] COMMAND ...\n"
    "  id decode [--json] ID...              the parts of each ID\n"
    "  id encode SHARD TYPE LOCAL            the ID made of these parts\n"
    "  modshard [--shards N] [--hex] KEY...  the mod shard of each key\n"
    "  check                                 validate the shard map\n"
    "  schema apply                          create every shard database and table\n"
    "  obj create TYPE JSON [--shard S | --near ID]\n"
    "                                        create an object, print its ID\n"
    "  obj get ID...                         each object's JSON, one line each\n"
    "  obj update ID JSON                    apply a merge patch, print the result\n"
    "  obj delete ID [--hard]                soft delete (--hard: remove the row)\n"
    "  mapping add NAME FROM TO [SEQ]        add a row (SEQ: default now, in us)\n"
    "  mapping list NAME FROM [--limit N] [--before SEQ]\n"
    "                                        TO SEQ per row, newest first\n"
    "  mapping remove NAME FROM TO           remove a row\n"
    "  mapping count NAME FROM               the number of rows of FROM\n"
    "  kv put TABLE KEY VALUE                store a value\n"
    "  kv get TABLE KEY                      print a value\n"
    "  kv delete TABLE KEY                   delete a key\n"
    "  move --shards A-B --to PAIR [--dry-run [--verbose] [--json]] [--yes] [--keep-source]\n"
    "       [--threads N] [--max-lag-ms N] [--fence-timeout S] [--cutover-attempts N]\n"
    "       [--postpone-cutover FILE] [--reverse-window DURATION]\n"
    "       [--max-rows-per-second N] [--max-load VAR=N[,VAR=N]]\n"
    "                                        move shards A..B to another pair, online\n"
    "                                        (DURATION: 3600s, 30m, 2h, 1d: revertible\n"
    "                                        that long after the flip; the throttle\n"
    "                                        pauses while a source status variable is\n"
    "                                        above N; also on move resume)\n"
    "  move status                           the journaled moves, one JSON line each\n"
    "  move resume [ID] [--threads N] [cut-over options as for move]\n"
    "                                        finish an interrupted move\n"
    "  move abort [ID]                       undo an interrupted move (before its flip)\n"
    "  move revert [ID]                      flip a reversible move back to its source\n"
    "  move finish [ID]                      end a reverse window now: drop the source\n"
    "  rebalance [--by bytes|writes] [--threshold F] [--max-moves N] [--drain PAIR]\n"
    "            [--pairs P1,P2,...] [--dry-run | --yes] [--threads N]\n"
    "                                        plan moves that even out the pairs; run\n"
    "                                        them with --yes\n"
    "  failover PAIR [--force]               promote PAIR's standby\n"
    "  map show [--map-version N]            the current map (or published version N), as JSON\n"
    "  map publish FILE [--force]            validate FILE and publish it as the new map\n"
    "                                        (its version must be above the current one)\n"
    "  import --from URL --table T --as TYPE [--id-column C] [--json-column C]\n"
    "         [--near COLUMN:TYPE] [--threads N] [--dry-run] [--until-clean]\n"
    "                                        one import pass of a legacy table\n"
    "  import-mapping --from URL --table T --from-column C:TYPE --to-column C:TYPE\n"
    "         --name MAPPING [--seq-column C] [--threads N] [--dry-run] [--until-clean]\n"
    "                                        one import pass of a legacy join table\n"
    "Import URL: mysql://USER@HOST[:PORT]/DB; its password from --from-password-env\n"
    "VAR, else the map's password variable. --legacy TYPE: the IDs of obj get, update,\n"
    "delete and mapping list, count are legacy ids of TYPE, resolved first.\n"
    "  status [--json]                       every pair's servers, links, shards; the moves\n"
    "  pair add NAME --master ADDR --standby ADDR\n"
    "                                        check a new pair and add it to the map\n"
    "  pair remove NAME                      remove a pair that serves nothing\n"
    "  shards open N [--pair P]              create shards up to N-1, then open them\n"
    "  help [COMMAND]                        the usage of a command (or CMD --help)\n"
    "Options for every command: --map FILE (else $LIBSHARD_MAP); --user NAME and\n"
    "--password-env VAR to connect as another account than the map's (an operator's).\n"
    "shardctl --version prints the library's version.\n"
    "The map is --map FILE, else $LIBSHARD_MAP. TYPE is a name from the map's\n"
    "objects or a number. Exit status: 0 ok, 1 failed, 2 bad usage or input.\n";

/* Every option; a command lists the ones it accepts (--map, --help: all). */
enum {
    OPT_MAP,
    OPT_HELP,
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
    OPT_USER,
    OPT_PASSWORD_ENV,
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
    OPT_VERSION,
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
    OPT_MAP_VERSION,
    NOPTS
};

#define O(x) (UINT64_C(1) << (x))
#define GLOBAL_OPTS (O(OPT_MAP) | O(OPT_HELP) | O(OPT_USER) | O(OPT_PASSWORD_ENV))
#define THROTTLE_OPTS (O(OPT_MAX_ROWS_PER_SECOND) | O(OPT_MAX_LOAD))
#define CUTOVER_OPTS (O(OPT_MAX_LAG_MS) | O(OPT_FENCE_TIMEOUT) | O(OPT_CUTOVER_ATTEMPTS) | \
                      O(OPT_POSTPONE_CUTOVER))

static const struct option_def {
    const char *name;
    int takes_value;
} options[NOPTS] = {
    [OPT_MAP] = {"--map", 1},       [OPT_HELP] = {"--help", 0},
    [OPT_JSON] = {"--json", 0},     [OPT_SHARDS] = {"--shards", 1},
    [OPT_HEX] = {"--hex", 0},       [OPT_SHARD] = {"--shard", 1},
    [OPT_NEAR] = {"--near", 1},     [OPT_HARD] = {"--hard", 0},
    [OPT_LIMIT] = {"--limit", 1},   [OPT_BEFORE] = {"--before", 1},
    [OPT_TO] = {"--to", 1},         [OPT_DRY_RUN] = {"--dry-run", 0},
    [OPT_YES] = {"--yes", 0},       [OPT_KEEP_SOURCE] = {"--keep-source", 0},
    [OPT_THREADS] = {"--threads", 1}, [OPT_FORCE] = {"--force", 0},
    [OPT_USER] = {"--user", 1},     [OPT_PASSWORD_ENV] = {"--password-env", 1},
    [OPT_FROM] = {"--from", 1},     [OPT_FROM_PASSWORD_ENV] = {"--from-password-env", 1},
    [OPT_TABLE] = {"--table", 1},   [OPT_AS] = {"--as", 1},
    [OPT_ID_COLUMN] = {"--id-column", 1}, [OPT_JSON_COLUMN] = {"--json-column", 1},
    [OPT_UNTIL_CLEAN] = {"--until-clean", 0}, [OPT_FROM_COLUMN] = {"--from-column", 1},
    [OPT_TO_COLUMN] = {"--to-column", 1}, [OPT_NAME] = {"--name", 1},
    [OPT_SEQ_COLUMN] = {"--seq-column", 1}, [OPT_LEGACY] = {"--legacy", 1},
    [OPT_VERSION] = {"--version", 0}, [OPT_MASTER] = {"--master", 1},
    [OPT_STANDBY] = {"--standby", 1}, [OPT_PAIR] = {"--pair", 1},
    [OPT_VERBOSE] = {"--verbose", 0},
    [OPT_BY] = {"--by", 1},         [OPT_THRESHOLD] = {"--threshold", 1},
    [OPT_MAX_MOVES] = {"--max-moves", 1}, [OPT_DRAIN] = {"--drain", 1},
    [OPT_PAIRS] = {"--pairs", 1},
    [OPT_MAX_LAG_MS] = {"--max-lag-ms", 1}, [OPT_FENCE_TIMEOUT] = {"--fence-timeout", 1},
    [OPT_CUTOVER_ATTEMPTS] = {"--cutover-attempts", 1},
    [OPT_POSTPONE_CUTOVER] = {"--postpone-cutover", 1},
    [OPT_REVERSE_WINDOW] = {"--reverse-window", 1},
    [OPT_MAX_ROWS_PER_SECOND] = {"--max-rows-per-second", 1},
    [OPT_MAX_LOAD] = {"--max-load", 1},
    [OPT_MAP_VERSION] = {"--map-version", 1},
};

/* Options and positional arguments, parsed once for every command. */
typedef struct args {
    const char *map;       /* --map, else $LIBSHARD_MAP; NULL if neither */
    const char *val[NOPTS]; /* option values; "" for a flag that was given */
    uint64_t seen;         /* O(OPT_x) for every option given */
    int npos;
    char **pos;
} args;

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fputs("shardctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (see shardctl --help)\n", stderr);
    return EXIT_USAGE;
}

/* 2 for bad input (invalid argument, invalid map, an ID or shard that no
 * range of the map serves), 1 for anything else. */
static int exit_code(int rc)
{
    return rc == SHARD_EINVAL || rc == SHARD_EMAP || rc == SHARD_ENOSHARD ? EXIT_USAGE
                                                                          : EXIT_FAIL;
}

/* One line on stderr for a failed library call; 2 for bad input, else 1. */
static int lib_error(int rc)
{
    const char *msg = shard_errmsg();
    fprintf(stderr, "shardctl: %s\n", *msg ? msg : shard_strerror(rc));
    return exit_code(rc);
}

/* "-5" is a (negative) number argument, not an option. */
static int is_option(const char *s)
{
    return s[0] == '-' && s[1] != '\0' && !(s[1] >= '0' && s[1] <= '9');
}

static int parse_option(int argc, char **argv, int *i, args *a)
{
    const char *s = argv[*i];

    if (strcmp(s, "-h") == 0)
        s = "--help";
    for (int k = 0; k < NOPTS; k++) {
        const struct option_def *o = &options[k];
        size_t n = strlen(o->name);
        if (strncmp(s, o->name, n) != 0)
            continue;
        if (s[n] == '\0') {
            if (o->takes_value && *i + 1 >= argc)
                return usage_error("%s needs a value", o->name);
            a->val[k] = o->takes_value ? argv[++*i] : "";
        } else if (s[n] == '=' && o->takes_value) {
            a->val[k] = s + n + 1;
        } else if (s[n] == '=') {
            return usage_error("%s takes no value", o->name);
        } else {
            continue; /* a longer name: --shards is not --shard */
        }
        a->seen |= O(k);
        return 0;
    }
    return usage_error("unknown option %s", s);
}

static int parse_args(int argc, char **argv, args *a)
{
    memset(a, 0, sizeof *a);
    a->pos = calloc((size_t)argc + 1, sizeof *a->pos);
    if (!a->pos)
        return usage_error("out of memory");
    for (int i = 1; i < argc; i++) {
        int rc;
        if (strcmp(argv[i], "--") == 0) {
            while (++i < argc)
                a->pos[a->npos++] = argv[i];
            break;
        }
        if (!is_option(argv[i]))
            a->pos[a->npos++] = argv[i];
        else if ((rc = parse_option(argc, argv, &i, a)))
            return rc;
    }
    a->map = a->val[OPT_MAP];
    if (!a->map) {
        const char *env = getenv("LIBSHARD_MAP");
        if (env && *env)
            a->map = env;
    }
    return 0;
}

/* Parse an unsigned decimal number in [min, max]; -1 with a message if not. */
static int parse_num(const char *what, const char *s, unsigned long long min,
                     unsigned long long max, unsigned long long *out)
{
    char *end;
    if (!(*s >= '0' && *s <= '9'))
        return usage_error("%s '%s' is not a number", what, s), -1;
    errno = 0;
    *out = strtoull(s, &end, 10);
    if (*end)
        return usage_error("%s '%s' is not a number", what, s), -1;
    if (errno == ERANGE || *out < min || *out > max)
        return usage_error("%s %s is out of range (%llu..%llu)", what, s, min, max), -1;
    return 0;
}

/*
 * A mapping sequence: a signed decimal 64-bit number. The two extremes are
 * the library's "now" (SHARD_SEQ_NOW) and "no cursor" (SHARD_SEQ_NONE).
 */
static int parse_seq(const char *what, const char *s, int64_t *out)
{
    const char *digits = s + (*s == '-');
    long long v;
    char *end;

    if (!(*digits >= '0' && *digits <= '9'))
        return usage_error("%s '%s' is not a number", what, s), -1;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (*end)
        return usage_error("%s '%s' is not a number", what, s), -1;
    if (errno == ERANGE || v == INT64_MIN || v == INT64_MAX)
        return usage_error("%s %s is out of range (%" PRId64 "..%" PRId64 ")", what, s,
                           INT64_MIN + 1, INT64_MAX - 1), -1;
    *out = v;
    return 0;
}

/* Parse an ID argument; `what` (NULL for a plain ID) names it: FROM, --near... */
static int parse_id(const char *what, const char *s, uint64_t *id)
{
    if (shard_id_parse(s, id) == 0)
        return 0;
    fprintf(stderr, "shardctl: %s%s%s\n", what ? what : "", what ? ": " : "",
            shard_errmsg());
    return -1;
}

static int load_map(const args *a, shard_map **map)
{
    shard_store *store = NULL;
    int rc;

    if (!a->map)
        return usage_error("no shard map: give --map FILE or set LIBSHARD_MAP");
    rc = shard_store_open(&store, a->map);
    if (!rc)
        rc = shard_store_load(store, map);
    shard_store_free(store);
    if (rc)
        return lib_error(rc == SHARD_EIO ? SHARD_EINVAL : rc);
    return 0;
}

/*
 * A context for one short command: no refresh thread. The map is loaded
 * now and servers are connected lazily. *map (when asked) is a reference
 * to its map, freed with shard_map_free().
 */
static int open_ctx_log(const args *a, shard_ctx **ctx, shard_map **map, shard_log_fn log)
{
    shard_options o = SHARD_OPTIONS_INIT;
    int rc;

    o.refresh_interval_ms = 0;
    o.log = log;
    o.log_level = SHARD_LOG_WARN;
    o.user = a->val[OPT_USER];
    o.password_env = a->val[OPT_PASSWORD_ENV];
    if (o.password_env && !o.user)
        return usage_error("--password-env goes with --user");
    if (!a->map)
        return usage_error("no shard map: give --map FILE or set LIBSHARD_MAP");
    if ((rc = shard_ctx_open(ctx, a->map, &o)))
        return lib_error(rc == SHARD_EIO ? SHARD_EINVAL : rc);
    if (map && (rc = shard_ctx_map(*ctx, map))) {
        rc = lib_error(rc);
        shard_ctx_free(*ctx);
        return rc;
    }
    return 0;
}

static int open_ctx(const args *a, shard_ctx **ctx, shard_map **map)
{
    return open_ctx_log(a, ctx, map, NULL);
}

/* The library's warnings (a move keeping the source, a pair that is not
 * healthy), one line each on standard error. */
static void log_warning(int level, const char *message, void *payload)
{
    (void)payload;
    if (level > SHARD_LOG_WARN)
        return;
    fputs(level == SHARD_LOG_ERROR ? "shardctl: error: " : "shardctl: warning: ", stderr);
    for (const char *p = message; *p; p++)
        fputc(*p == '\n' || *p == '\r' ? ' ' : *p, stderr);
    fputc('\n', stderr);
}

/* Print object text on one line: newlines are whitespace between JSON tokens. */
static void print_object(const char *json, size_t len)
{
    for (size_t i = 0; i < len; i++)
        putchar(json[i] == '\n' || json[i] == '\r' ? ' ' : json[i]);
    putchar('\n');
}

/* ------------------------------------------------------------------ */
/* Commands without a server                                           */
/* ------------------------------------------------------------------ */

static int cmd_id_decode(const args *a)
{
    uint64_t *ids;
    int rc;

    if (a->npos < 3)
        return usage_error("id decode needs at least one ID");
    ids = calloc((size_t)a->npos, sizeof *ids);
    if (!ids)
        return usage_error("out of memory");
    /* Validate every ID before printing any, so bad input prints nothing. */
    for (int i = 2; i < a->npos; i++) {
        if ((rc = shard_id_parse(a->pos[i], &ids[i]))) {
            free(ids);
            return lib_error(rc);
        }
    }
    for (int i = 2; i < a->npos; i++) {
        uint64_t id = ids[i];
        if (a->seen & O(OPT_JSON))
            printf("{\"id\":%" PRIu64 ",\"shard\":%u,\"type\":%u,\"local\":%" PRIu64 "}\n",
                   id, shard_id_shard(id), shard_id_type(id), shard_id_local(id));
        else
            printf("%" PRIu64 " shard=%u type=%u local=%" PRIu64 "\n", id,
                   shard_id_shard(id), shard_id_type(id), shard_id_local(id));
    }
    free(ids);
    return 0;
}

static int cmd_id_encode(const args *a)
{
    unsigned long long shard, type, local;
    uint64_t id;
    int rc;

    if (a->npos != 5)
        return usage_error("id encode needs SHARD TYPE LOCAL");
    if (parse_num("shard", a->pos[2], 0, SHARD_MAX_SHARD, &shard) ||
        parse_num("type", a->pos[3], 1, SHARD_MAX_TYPE, &type) ||
        parse_num("local id", a->pos[4], 1, SHARD_MAX_LOCAL, &local))
        return EXIT_USAGE;
    if ((rc = shard_id_make((unsigned)shard, (unsigned)type, local, &id)))
        return lib_error(rc);
    printf("%" PRIu64 "\n", id);
    return 0;
}

static int unhex(const char *s, unsigned char **out, size_t *len)
{
    size_t n = strlen(s);
    unsigned char *b;

    if (n % 2)
        return usage_error("hex key '%s' has an odd number of digits", s);
    b = malloc(n / 2 + 1);
    if (!b)
        return usage_error("out of memory");
    for (size_t i = 0; i < n; i += 2) {
        unsigned v;
        if (sscanf(s + i, "%2x", &v) != 1 || !strchr("0123456789abcdefABCDEF", s[i]) ||
            !strchr("0123456789abcdefABCDEF", s[i + 1])) {
            free(b);
            return usage_error("hex key '%s' has a non-hex digit", s);
        }
        b[i / 2] = (unsigned char)v;
    }
    *out = b;
    *len = n / 2;
    return 0;
}

static int cmd_modshard(const args *a)
{
    unsigned long long n = 4096;
    uint32_t *out;
    int rc;

    if (a->npos < 2)
        return usage_error("modshard needs at least one KEY");
    if (a->val[OPT_SHARDS]) {
        if (parse_num("--shards", a->val[OPT_SHARDS], 1, SHARD_MAX_MOD_SHARDS, &n))
            return EXIT_USAGE;
    } else if (a->map) {
        shard_map *map = NULL;
        if ((rc = load_map(a, &map)))
            return rc;
        if (shard_map_mod_count(map))
            n = shard_map_mod_count(map);
        shard_map_free(map);
    }
    out = calloc((size_t)a->npos, sizeof *out);
    if (!out)
        return usage_error("out of memory");
    for (int i = 1; i < a->npos; i++) {
        unsigned char *key = (unsigned char *)a->pos[i];
        size_t len = strlen(a->pos[i]);
        int hex = (a->seen & O(OPT_HEX)) != 0;
        if (hex && (rc = unhex(a->pos[i], &key, &len))) {
            free(out);
            return rc;
        }
        rc = shard_mod(key, len, (uint32_t)n, &out[i]);
        if (hex)
            free(key);
        if (rc) {
            free(out);
            return lib_error(rc);
        }
    }
    for (int i = 1; i < a->npos; i++)
        printf("%" PRIu32 "\n", out[i]);
    free(out);
    return 0;
}

static int cmd_check(const args *a)
{
    shard_map *map = NULL;
    char *summary = NULL;
    int rc;

    if (a->npos != 1)
        return usage_error("check takes no arguments");
    if ((rc = load_map(a, &map)))
        return rc;
    rc = shard_map_summary(map, &summary);
    shard_map_free(map);
    if (rc)
        return lib_error(rc);
    printf("%s: ok, %s\n", a->map, summary);
    shard_free(summary);
    return 0;
}

/* ------------------------------------------------------------------ */
/* schema apply                                                        */
/* ------------------------------------------------------------------ */

#define TTY_REDRAW_SECONDS 0.1
#define PLAIN_LINE_SECONDS 5.0

/* Progress of every pair, reported by the library (calls are serialised). */
typedef struct schema_progress {
    int tty;
    size_t npairs, nseen;
    struct pair_progress {
        char what[128];
        uint64_t done, total;
    } *pairs;
    double last;     /* when the last line was drawn */
    int dirty;       /* changed since then */
    size_t line_len; /* length of the open terminal line; 0: none */
} schema_progress;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void progress_sums(const schema_progress *p, uint64_t *done, uint64_t *total)
{
    *done = *total = 0;
    for (size_t i = 0; i < p->nseen; i++) {
        *done += p->pairs[i].done;
        *total += p->pairs[i].total;
    }
}

/* Ends the updating terminal line, so that what follows starts clean. */
static void progress_end_line(schema_progress *p)
{
    if (p->line_len) {
        fputc('\n', stderr);
        p->line_len = 0;
    }
}

static void progress_draw(schema_progress *p)
{
    uint64_t done, total;
    char line[160];
    int n;

    progress_sums(p, &done, &total);
    n = snprintf(line, sizeof line, "schema: %" PRIu64 "/%" PRIu64
                 " databases and tables (%u%%) on %zu of %zu pairs", done, total,
                 total ? (unsigned)(done * 100 / total) : 0, p->nseen, p->npairs);
    if (n < 0)
        return;
    if (p->tty) {
        /* Overwrite the previous line, padding out what it had beyond this one. */
        size_t len = strlen(line);
        fprintf(stderr, "\r%s%*s", line,
                p->line_len > len ? (int)(p->line_len - len) : 0, "");
        p->line_len = len;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    p->last = now_seconds();
    p->dirty = 0;
}

static void on_progress(const char *what, uint64_t done, uint64_t total, void *payload)
{
    schema_progress *p = payload;
    struct pair_progress *pp = NULL;

    for (size_t i = 0; i < p->nseen; i++)
        if (strcmp(p->pairs[i].what, what) == 0)
            pp = &p->pairs[i];
    if (!pp && p->nseen < p->npairs) {
        pp = &p->pairs[p->nseen++];
        snprintf(pp->what, sizeof pp->what, "%s", what);
    }
    if (!pp)
        return;
    pp->done = done;
    pp->total = total;
    p->dirty = 1;
    if (p->tty) {
        if (now_seconds() - p->last >= TTY_REDRAW_SECONDS || done == total)
            progress_draw(p);
    } else if (done == total) {
        fprintf(stderr, "%s: done, %" PRIu64 " databases and tables\n", what, total);
    } else if (now_seconds() - p->last >= PLAIN_LINE_SECONDS) {
        progress_draw(p);
    }
}

static int cmd_schema_apply(const args *a)
{
    schema_progress p;
    shard_ctx *ctx;
    shard_map *map;
    uint64_t done, total, version;
    int rc;

    if (a->npos != 2)
        return usage_error("schema apply takes no arguments");
    if ((rc = open_ctx(a, &ctx, &map)))
        return rc;
    memset(&p, 0, sizeof p);
    p.tty = isatty(STDERR_FILENO);
    p.npairs = shard_map_pair_count(map);
    p.last = now_seconds();
    version = shard_map_version(map);
    shard_map_free(map);
    p.pairs = calloc(p.npairs ? p.npairs : 1, sizeof *p.pairs);
    if (!p.pairs) {
        shard_ctx_free(ctx);
        return usage_error("out of memory");
    }
    rc = shard_schema_apply(ctx, on_progress, &p);
    if (p.tty && p.dirty)
        progress_draw(&p); /* the last state, whatever the redraw rate skipped */
    progress_end_line(&p);
    if (rc) {
        rc = lib_error(rc);
    } else {
        progress_sums(&p, &done, &total);
        printf("schema applied: %" PRIu64 " databases and tables on %zu pairs "
               "(map version %" PRIu64 ")\n", done, p.nseen, version);
    }
    free(p.pairs);
    shard_ctx_free(ctx);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Objects                                                             */
/* ------------------------------------------------------------------ */

/* TYPE: a name from the map's objects, or a registered type number. */
static int parse_type(const shard_map *map, const char *s, unsigned *type)
{
    const char *name;

    if (*s >= '0' && *s <= '9') {
        unsigned long long t;
        if (parse_num("type", s, 1, SHARD_MAX_TYPE, &t))
            return -1;
        if (shard_map_type_name(map, (unsigned)t, &name) != 0)
            return usage_error("type %llu is not registered in the map's objects", t), -1;
        *type = (unsigned)t;
        return 0;
    }
    if (shard_map_type_of(map, s, type) != 0)
        return usage_error("no object type named '%s' in the map's objects", s), -1;
    return 0;
}

/* An object ID: valid, and of a type the map registers. */
static int check_object_id(const shard_map *map, const char *s, uint64_t id)
{
    const char *name;
    if (shard_map_type_name(map, shard_id_type(id), &name) == 0)
        return 0;
    return usage_error("ID %s has type %u, which is not registered in the map's objects",
                       s, shard_id_type(id)), -1;
}

/* The shard of --shard S (0..65535, in a range of the map) or --near ID. */
static int placement(const args *a, const shard_map *map, unsigned *shard)
{
    const char *pair;

    *shard = SHARD_ANY;
    if (a->val[OPT_SHARD] && a->val[OPT_NEAR])
        return usage_error("give --shard or --near, not both"), -1;
    if (a->val[OPT_SHARD]) {
        unsigned long long s;
        if (parse_num("--shard", a->val[OPT_SHARD], 0, SHARD_MAX_SHARD, &s))
            return -1;
        if (shard_map_pair_of(map, (unsigned)s, &pair) != 0)
            return usage_error("--shard %llu is not in any id_shards range of the map",
                               s), -1;
        *shard = (unsigned)s;
    } else if (a->val[OPT_NEAR]) {
        uint64_t id;
        if (parse_id("--near", a->val[OPT_NEAR], &id))
            return -1;
        *shard = shard_id_shard(id);
    }
    return 0;
}

static int cmd_obj_create(const args *a)
{
    shard_ctx *ctx;
    shard_map *map;
    unsigned type, shard;
    uint64_t id;
    int rc;

    if (a->npos != 4)
        return usage_error("obj create needs TYPE JSON");
    if ((rc = open_ctx(a, &ctx, &map)))
        return rc;
    if (parse_type(map, a->pos[2], &type) || placement(a, map, &shard)) {
        rc = EXIT_USAGE;
    } else if ((rc = shard_object_create(ctx, type, shard, a->pos[3], strlen(a->pos[3]),
                                         &id))) {
        rc = lib_error(rc);
    } else {
        printf("%" PRIu64 "\n", id);
    }
    shard_map_free(map);
    shard_ctx_free(ctx);
    return rc;
}

/* Parses positional IDs pos[from..npos) into ids[] (checked against the map). */
static int object_ids(const args *a, const shard_map *map, int from, uint64_t *ids)
{
    for (int i = from; i < a->npos; i++)
        if (parse_id(NULL, a->pos[i], &ids[i - from]) ||
            check_object_id(map, a->pos[i], ids[i - from]))
            return -1;
    return 0;
}

/* Missing IDs named in the error line; more are counted, not listed. */
#define MAX_NAMED 20

/* A list of IDs for one clause of the error line: the first MAX_NAMED named. */
typedef struct idlist {
    char *text;
    size_t len, n;
    FILE *f;
} idlist;

static void idlist_add(idlist *l, uint64_t id)
{
    if (!l->f && !(l->f = open_memstream(&l->text, &l->len)))
        return;
    if (l->n++ < MAX_NAMED)
        fprintf(l->f, "%s%" PRIu64, l->n > 1 ? ", " : "", id);
}

static void idlist_close(idlist *l)
{
    if (l->f)
        fclose(l->f);
    l->f = NULL;
}

/* "object X not found", "objects X, Y not found", "N objects not found: X, ..." */
static void idlist_print(FILE *out, const idlist *l, const char *one, const char *many,
                         const char *says_one, const char *says_many)
{
    const char *t = l->text ? l->text : "";
    if (l->n == 1)
        fprintf(out, "%s %s %s", one, t, says_one);
    else if (l->n <= MAX_NAMED)
        fprintf(out, "%s %s %s", many, t, says_many);
    else
        fprintf(out, "%zu %s %s: %s, ...", l->n, many, says_many, t);
}

/*
 * Several IDs: one multi-get. Found objects are printed in input order;
 * missing ones, IDs on shards no range serves (bad input: exit 2) and any
 * failure are summed up in one line on stderr, clauses separated by "; ".
 */
static int get_many(shard_ctx *ctx, const uint64_t *ids, size_t n)
{
    shard_item *items = NULL;
    char *failure = NULL;
    idlist missing = {0}, unmapped = {0};
    int failed = 0;
    int rc = shard_object_mget(ctx, ids, n, &items);

    if (rc && rc != SHARD_EPARTIAL)
        return lib_error(rc);
    for (size_t i = 0; i < n; i++) {
        if (items[i].status == 0)
            print_object(items[i].data, items[i].len);
        else if (items[i].status == SHARD_ENOTFOUND)
            idlist_add(&missing, ids[i]);
        else if (items[i].status == SHARD_ENOSHARD)
            idlist_add(&unmapped, ids[i]);
        else
            failed = 1;
    }
    idlist_close(&missing);
    idlist_close(&unmapped);
    /* The library's message names the first failed server; only print it
     * for failures, not for items that are merely absent or unmapped. */
    if (failed)
        failure = strdup(*shard_errmsg() ? shard_errmsg() : shard_strerror(rc));
    rc = 0;
    if (failed || missing.n || unmapped.n) {
        const char *sep = "";
        fflush(stdout); /* found objects first, as a reader of both would expect */
        fputs("shardctl: ", stderr);
        if (failed) {
            fputs(failure ? failure : "multi-get failed", stderr);
            sep = "; ";
        }
        if (unmapped.n) {
            fputs(sep, stderr);
            idlist_print(stderr, &unmapped, "ID", "IDs",
                         "is on a shard that no range of the map serves",
                         "are on shards that no range of the map serves");
            sep = "; ";
        }
        if (missing.n) {
            fputs(sep, stderr);
            idlist_print(stderr, &missing, "object", "objects", "not found", "not found");
        }
        fputc('\n', stderr);
        rc = unmapped.n ? EXIT_USAGE : EXIT_FAIL;
    }
    free(missing.text);
    free(unmapped.text);
    free(failure);
    shard_items_free(items, n);
    return rc;
}

static int cmd_obj_get(const args *a)
{
    size_t n = a->npos > 2 ? (size_t)a->npos - 2 : 0;
    shard_ctx *ctx;
    shard_map *map;
    uint64_t *ids;
    int rc;

    if (n == 0)
        return usage_error("obj get needs at least one ID");
    ids = calloc(n, sizeof *ids);
    if (!ids)
        return usage_error("out of memory");
    if ((rc = open_ctx(a, &ctx, &map))) {
        free(ids);
        return rc;
    }
    if (object_ids(a, map, 2, ids)) {
        rc = EXIT_USAGE;
    } else if (n > 1) {
        rc = get_many(ctx, ids, n);
    } else {
        char *json;
        size_t len;
        if ((rc = shard_object_get(ctx, ids[0], &json, &len))) {
            rc = lib_error(rc);
        } else {
            print_object(json, len);
            shard_free(json);
        }
    }
    shard_map_free(map);
    shard_ctx_free(ctx);
    free(ids);
    return rc;
}

static int cmd_obj_update(const args *a)
{
    shard_ctx *ctx;
    shard_map *map;
    uint64_t id;
    char *result;
    size_t len;
    int rc;

    if (a->npos != 4)
        return usage_error("obj update needs ID JSON");
    if (parse_id(NULL, a->pos[2], &id))
        return EXIT_USAGE;
    if ((rc = open_ctx(a, &ctx, &map)))
        return rc;
    if (check_object_id(map, a->pos[2], id)) {
        rc = EXIT_USAGE;
    } else if ((rc = shard_object_patch(ctx, id, a->pos[3], strlen(a->pos[3]), &result,
                                        &len))) {
        rc = lib_error(rc);
    } else {
        print_object(result, len);
        shard_free(result);
    }
    shard_map_free(map);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_obj_delete(const args *a)
{
    shard_ctx *ctx;
    shard_map *map;
    uint64_t id;
    int rc;

    if (a->npos != 3)
        return usage_error("obj delete needs one ID");
    if (parse_id(NULL, a->pos[2], &id))
        return EXIT_USAGE;
    if ((rc = open_ctx(a, &ctx, &map)))
        return rc;
    if (check_object_id(map, a->pos[2], id))
        rc = EXIT_USAGE;
    else if ((rc = shard_object_delete(ctx, id, a->val[OPT_HARD] ? SHARD_DELETE_HARD : 0)))
        rc = lib_error(rc);
    shard_map_free(map);
    shard_ctx_free(ctx);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Mappings                                                            */
/* ------------------------------------------------------------------ */

static int cmd_mapping_add(const args *a)
{
    int64_t seq = SHARD_SEQ_NOW;
    uint64_t from, to;
    shard_ctx *ctx;
    int rc;

    if (a->npos != 5 && a->npos != 6)
        return usage_error("mapping add needs NAME FROM TO [SEQ]");
    if (parse_id("FROM", a->pos[3], &from) || parse_id("TO", a->pos[4], &to) ||
        (a->npos == 6 && parse_seq("SEQ", a->pos[5], &seq)))
        return EXIT_USAGE;
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    if ((rc = shard_mapping_add(ctx, a->pos[2], from, to, seq)))
        rc = lib_error(rc);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_mapping_list(const args *a)
{
    unsigned long long limit = 0;
    int64_t before = SHARD_SEQ_NONE;
    shard_edge *edges = NULL;
    size_t n = 0;
    uint64_t from;
    shard_ctx *ctx;
    int rc;

    if (a->npos != 4)
        return usage_error("mapping list needs NAME FROM");
    if (parse_id("FROM", a->pos[3], &from) ||
        (a->val[OPT_LIMIT] &&
         parse_num("--limit", a->val[OPT_LIMIT], 1, SIZE_MAX, &limit)) ||
        (a->val[OPT_BEFORE] && parse_seq("--before", a->val[OPT_BEFORE], &before)))
        return EXIT_USAGE;
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    if ((rc = shard_mapping_list(ctx, a->pos[2], from, before, (size_t)limit, &edges, &n)))
        rc = lib_error(rc);
    for (size_t i = 0; rc == 0 && i < n; i++)
        printf("%" PRIu64 " %" PRId64 "\n", edges[i].to, edges[i].seq);
    shard_free(edges);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_mapping_remove(const args *a)
{
    uint64_t from, to;
    shard_ctx *ctx;
    int rc;

    if (a->npos != 5)
        return usage_error("mapping remove needs NAME FROM TO");
    if (parse_id("FROM", a->pos[3], &from) || parse_id("TO", a->pos[4], &to))
        return EXIT_USAGE;
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    if ((rc = shard_mapping_remove(ctx, a->pos[2], from, to)))
        rc = lib_error(rc);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_mapping_count(const args *a)
{
    uint64_t from, count;
    shard_ctx *ctx;
    int rc;

    if (a->npos != 4)
        return usage_error("mapping count needs NAME FROM");
    if (parse_id("FROM", a->pos[3], &from))
        return EXIT_USAGE;
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    if ((rc = shard_mapping_count(ctx, a->pos[2], from, &count)))
        rc = lib_error(rc);
    else
        printf("%" PRIu64 "\n", count);
    shard_ctx_free(ctx);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Key-value                                                           */
/* ------------------------------------------------------------------ */

static int cmd_kv_put(const args *a)
{
    shard_ctx *ctx;
    int rc;

    if (a->npos != 5)
        return usage_error("kv put needs TABLE KEY VALUE");
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    if ((rc = shard_kv_put(ctx, a->pos[2], a->pos[3], strlen(a->pos[3]), a->pos[4],
                           strlen(a->pos[4]))))
        rc = lib_error(rc);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_kv_get(const args *a)
{
    shard_ctx *ctx;
    char *value;
    size_t len;
    int rc;

    if (a->npos != 4)
        return usage_error("kv get needs TABLE KEY");
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    if ((rc = shard_kv_get(ctx, a->pos[2], a->pos[3], strlen(a->pos[3]), &value, &len))) {
        rc = lib_error(rc);
    } else {
        fwrite(value, 1, len, stdout);
        putchar('\n');
        shard_free(value);
    }
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_kv_delete(const args *a)
{
    shard_ctx *ctx;
    int rc;

    if (a->npos != 4)
        return usage_error("kv delete needs TABLE KEY");
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    if ((rc = shard_kv_delete(ctx, a->pos[2], a->pos[3], strlen(a->pos[3]))))
        rc = lib_error(rc);
    shard_ctx_free(ctx);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Moves                                                               */
/* ------------------------------------------------------------------ */

typedef struct move_progress {
    int tty;
    int phase;
    double phase_start, last;
    uint64_t done, total;
} move_progress;

static void move_draw(move_progress *p, int final)
{
    double el = now_seconds() - p->phase_start;
    double rate = el > 0 ? (double)p->done / el : 0;
    const char *name = shard_move_phase_name(p->phase);

    if (p->total && p->tty) {
        int width = 30, fill = (int)((double)width * (double)p->done / (double)p->total);
        double eta = rate > 0 ? (double)(p->total - p->done) / rate : 0;
        fprintf(stderr, "\r%-9s [%.*s%*s] %3d%% %" PRIu64 "/%" PRIu64 " rows, %.0f rows/s, "
                "ETA %.0f s ", name, fill, "##############################", width - fill, "",
                (int)(100.0 * (double)p->done / (double)p->total), p->done, p->total, rate,
                eta);
        if (final)
            fputc('\n', stderr);
    } else if (p->total) {
        fprintf(stderr, "%s: %" PRIu64 "/%" PRIu64 " rows (%.0f rows/s)\n", name, p->done,
                p->total, rate);
    }
    p->last = now_seconds();
}

static void on_move_progress(int phase, uint64_t done, uint64_t total, void *payload)
{
    move_progress *p = payload;

    if (phase != p->phase) {
        if (p->total)
            move_draw(p, 1);
        p->phase = phase;
        p->phase_start = now_seconds();
        p->done = p->total = 0;
        fprintf(stderr, "move: %s\n", shard_move_phase_name(phase));
    }
    if (!total)
        return;
    p->done = done;
    /* Rows that arrive during a phase grow its total: never 120/100. */
    p->total = total > done ? total : done;
    if (now_seconds() - p->last >= (p->tty ? 0.1 : 5.0))
        move_draw(p, 0);
}

static void print_report(const shard_move_report *r)
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
           r->source_dropped ? "dropped" : "kept");
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
static int move_stopped(int rc, const shard_move_report *r)
{
    const char *msg = shard_errmsg();

    if (!r->move_id || r->phase == SHARD_MOVE_DONE || r->phase == SHARD_MOVE_ABORTED ||
        r->phase == SHARD_MOVE_REVERTED)
        return lib_error(rc);
    if (r->phase == SHARD_MOVE_REVERSIBLE) {
        fprintf(stderr, "shardctl: move %" PRIu64 ": %s\n", r->move_id,
                *msg ? msg : shard_strerror(rc));
        fprintf(stderr, "shardctl: the move is still reversible: shardctl move resume, "
                "revert or finish %" PRIu64 "\n", r->move_id);
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

static int move_options(const args *a, shard_move_options *o, move_progress *p)
{
    unsigned long long n;

    if (a->val[OPT_REVERSE_WINDOW] &&
        parse_duration("--reverse-window", a->val[OPT_REVERSE_WINDOW], &o->reverse_window_s))
        return -1;
    if (a->val[OPT_THREADS]) {
        if (parse_num("--threads", a->val[OPT_THREADS], 1, 64, &n))
            return -1;
        o->copy_threads = (unsigned)n;
    }
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
    memset(p, 0, sizeof *p);
    p->tty = isatty(STDERR_FILENO);
    p->phase = -1;
    o->progress = on_move_progress;
    o->payload = p;
    return 0;
}

/* ------------------------------------------------------------------ */
/* The dry-run plan, summed up                                         */
/* ------------------------------------------------------------------ */

/* At most this many lines sum up the databases of a dry run. */
#define PLAN_RANGE_LINES 16

/* 6.9 MB: bytes for a human. */
static void human_bytes(json_int_t n, char *buf, size_t size)
{
    const char *unit[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    double v = (double)n;
    int u = 0;

    while (v >= 1000 && u < 5) {
        v /= 1000;
        u++;
    }
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

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
    human_bytes((json_int_t)bytes, size, sizeof size);
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

static int cmd_move(const args *a)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r;
    move_progress p;
    unsigned first, last;
    shard_ctx *ctx;
    char *plan = NULL;
    int rc;

    if (a->npos != 1)
        return usage_error("move takes --shards A-B --to PAIR (or status, resume, abort, "
                           "revert, finish)");
    if (!a->val[OPT_SHARDS] || !a->val[OPT_TO])
        return usage_error("move needs --shards A-B and --to PAIR");
    if (parse_range(a->val[OPT_SHARDS], &first, &last) || move_options(a, &o, &p))
        return EXIT_USAGE;
    if (a->val[OPT_DRY_RUN])
        o.flags |= SHARD_MOVE_DRY_RUN;
    else if (!a->val[OPT_YES] && (rc = confirm(first, last, a->val[OPT_TO])))
        return rc;
    if ((rc = open_ctx_log(a, &ctx, NULL, log_warning)))
        return rc;
    rc = shard_move(ctx, first, last, a->val[OPT_TO], &o, &r, &plan);
    if (p.total)
        move_draw(&p, 1);
    if (plan)
        print_plan(a, plan);
    else if (rc == 0 || r.move_id)
        print_report(&r);
    shard_free(plan);
    if (rc)
        rc = move_stopped(rc, &r);
    shard_ctx_free(ctx);
    return rc;
}

/* An optional move ID argument at position 2. */
static int move_id_arg(const args *a, uint64_t *id)
{
    unsigned long long n;
    *id = 0;
    if (a->npos > 3)
        return usage_error("move %s takes at most one move ID", a->pos[1]), -1;
    if (a->npos == 3) {
        if (parse_num("move ID", a->pos[2], 1, UINT64_MAX, &n))
            return -1;
        *id = n;
    }
    return 0;
}

static int cmd_move_resume(const args *a)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r;
    move_progress p;
    shard_ctx *ctx;
    uint64_t id;
    int rc;

    if (move_id_arg(a, &id) || move_options(a, &o, &p))
        return EXIT_USAGE;
    if ((rc = open_ctx_log(a, &ctx, NULL, log_warning)))
        return rc;
    rc = shard_move_resume(ctx, id, &o, &r);
    if (p.total)
        move_draw(&p, 1);
    if (rc == 0 || r.move_id)
        print_report(&r);
    if (rc)
        rc = move_stopped(rc, &r);
    shard_ctx_free(ctx);
    return rc;
}

/* move revert and move finish: the same shape as resume. */
static int cmd_move_reversible(const args *a, int revert)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r;
    move_progress p;
    shard_ctx *ctx;
    uint64_t id;
    int rc;

    if (move_id_arg(a, &id) || move_options(a, &o, &p))
        return EXIT_USAGE;
    if ((rc = open_ctx_log(a, &ctx, NULL, log_warning)))
        return rc;
    rc = revert ? shard_move_revert(ctx, id, &o, &r) : shard_move_finish(ctx, id, &o, &r);
    if (p.total)
        move_draw(&p, 1);
    if (rc == 0 || (r.move_id && r.phase != SHARD_MOVE_REVERSIBLE))
        print_report(&r);
    if (rc)
        rc = move_stopped(rc, &r);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_move_revert(const args *a)
{
    return cmd_move_reversible(a, 1);
}

static int cmd_move_finish(const args *a)
{
    return cmd_move_reversible(a, 0);
}

static int cmd_move_abort(const args *a)
{
    shard_ctx *ctx;
    uint64_t id;
    int rc;

    if (move_id_arg(a, &id))
        return EXIT_USAGE;
    if ((rc = open_ctx_log(a, &ctx, NULL, log_warning)))
        return rc;
    rc = shard_move_abort(ctx, id);
    if (rc)
        rc = lib_error(rc);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_move_status(const args *a)
{
    shard_ctx *ctx;
    char *text = NULL;
    int rc;

    if (a->npos != 2)
        return usage_error("move status takes no arguments");
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    rc = shard_move_status(ctx, &text);
    if (text) /* also on SHARD_EPARTIAL: what could be read, and the errors */
        fputs(text, stdout);
    if (rc)
        rc = lib_error(rc);
    shard_free(text);
    shard_ctx_free(ctx);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Rebalancing                                                         */
/* ------------------------------------------------------------------ */

/* Set by the signal thread at the first SIGINT: no further move starts. */
static atomic_int rebalance_stop;

/*
 * SIGINT is blocked in every thread (the mover's threads inherit the mask)
 * and taken here, so that no server call sees EINTR. The first stops the
 * rebalance after the current move; the second stops now, leaving the
 * move journaled for shardctl move resume.
 */
static void *rebalance_signals(void *arg)
{
    sigset_t *set = arg;
    int sig;

    for (int n = 0;; n++) {
        if (sigwait(set, &sig) != 0)
            continue;
        if (n == 0) {
            atomic_store(&rebalance_stop, 1);
            fputs("\nshardctl: interrupted: stopping after the current move (interrupt "
                  "again to stop at once; the move can then be resumed)\n", stderr);
        } else {
            fputs("\nshardctl: interrupted again: stopping now; finish the move with "
                  "shardctl move resume (see shardctl move status)\n", stderr);
            _exit(130);
        }
    }
    return NULL;
}

static void load_text(int by, double load, char *buf, size_t size)
{
    if (by == SHARD_REBALANCE_BY_WRITES)
        snprintf(buf, size, "%.1f writes/s", load);
    else
        human_bytes((json_int_t)load, buf, size);
}

static void print_rebalance_move(FILE *f, const shard_rebalance_move *m, size_t i, size_t n,
                                 int by)
{
    char b[32];
    human_bytes((json_int_t)m->bytes, b, sizeof b);
    fprintf(f, "move %zu/%zu: shards %u-%u from %s to %s: %" PRIu64 " bytes (%s)", i + 1, n,
            m->first, m->last, m->from, m->to, m->bytes, b);
    if (by == SHARD_REBALANCE_BY_WRITES)
        fprintf(f, ", %.1f writes/s", m->writes);
    fputs(m->drain ? " (drain)\n" : "\n", f);
}

/* A drained pair that serves mod shards is not empty after the plan. */
static void note_mod_shards(const shard_map *map, const char *pair)
{
    uint32_t n = 0;
    for (uint32_t m = 0; m < shard_map_mod_count(map); m++) {
        const char *p;
        n += shard_map_mod_pair_of(map, m, &p) == 0 && strcmp(p, pair) == 0;
    }
    if (n)
        printf("note: %s also serves %u mod shard%s, which moves do not carry: it is not "
               "empty after the plan\n", pair, n, n == 1 ? "" : "s");
}

static void print_rebalance_plan(const shard_rebalance *plan, const shard_rebalance_options *o,
                                 const shard_map *map)
{
    size_t nm, np, nactive = 0;
    const shard_rebalance_move *mv = shard_rebalance_moves(plan, &nm);
    const shard_rebalance_pair *pp = shard_rebalance_pairs(plan, &np);
    double before, after, total = 0;
    int outside = 0;

    printf("rebalance by %s, threshold %g, map version %" PRIu64 ": %zu move%s\n",
           o->by == SHARD_REBALANCE_BY_WRITES ? "writes" : "bytes", o->threshold,
           shard_rebalance_map_version(plan), nm, nm == 1 ? "" : "s");
    for (size_t i = 0; i < nm; i++) {
        fputs("  ", stdout);
        print_rebalance_move(stdout, &mv[i], i, nm, o->by);
    }
    for (size_t i = 0; i < np; i++) {
        char lb[32], la[32];
        load_text(o->by, pp[i].load_before, lb, sizeof lb);
        load_text(o->by, pp[i].load_after, la, sizeof la);
        printf("  pair %s%s: %u -> %u shards, %s -> %s\n", pp[i].name,
               pp[i].drained ? " (drained)" : "", pp[i].shards_before, pp[i].shards_after, lb,
               la);
        total += pp[i].load_after;
        nactive += !pp[i].drained;
    }
    for (size_t i = 0; i < np && nactive && total > 0; i++) {
        double dev = pp[i].load_after / (total / (double)nactive) - 1;
        if (!pp[i].drained && (dev > o->threshold || dev < -o->threshold))
            outside = 1;
    }
    shard_rebalance_spread(plan, &before, &after);
    printf("  spread (max - min) / mean: %.3f before, %.3f after\n", before, after);
    for (size_t i = 0; i < np; i++)
        if (pp[i].drained)
            note_mod_shards(map, pp[i].name);
    if (!nm)
        printf("nothing to move: %s\n",
               outside ? "no move narrows the gap between the fullest and the emptiest pair "
                         "by more than the threshold"
                       : "every pair is within the threshold of the mean");
    else if (outside)
        printf("after the plan some pair is still outside the threshold (--max-moves, or "
               "shards too large to even out)\n");
}

typedef struct rebalance_progress {
    int by;
    move_progress *mp;
    shard_move_report last; /* of the last move that ran */
} rebalance_progress;

static int on_rebalance_step(const shard_rebalance_move *m, size_t i, size_t n, int rc,
                             const shard_move_report *r, void *payload)
{
    rebalance_progress *p = payload;

    if (!r) {
        if (atomic_load(&rebalance_stop))
            return 1;
        fputs("rebalance: ", stderr);
        print_rebalance_move(stderr, m, i, n, p->by);
        p->mp->phase = -1;
        p->mp->total = 0;
        return 0;
    }
    p->last = *r;
    if (p->mp->total)
        move_draw(p->mp, 1);
    if (rc == 0)
        fprintf(stderr, "rebalance: move %zu/%zu done (move %" PRIu64 "): %" PRIu64
                " rows verified, %" PRIu64 " mismatches, pause %.1f ms, map version %" PRIu64
                "\n", i + 1, n, r->move_id, r->rows_verified, r->mismatches, r->pause_ms,
                r->map_version);
    return atomic_load(&rebalance_stop);
}

static int rebalance_options(const args *a, shard_rebalance_options *o)
{
    unsigned long long n;

    if (a->val[OPT_BY]) {
        if (strcmp(a->val[OPT_BY], "bytes") == 0)
            o->by = SHARD_REBALANCE_BY_BYTES;
        else if (strcmp(a->val[OPT_BY], "writes") == 0)
            o->by = SHARD_REBALANCE_BY_WRITES;
        else
            return usage_error("--by takes bytes or writes, not '%s'", a->val[OPT_BY]);
    }
    if (a->val[OPT_THRESHOLD]) {
        char *end;
        errno = 0;
        o->threshold = strtod(a->val[OPT_THRESHOLD], &end);
        if (end == a->val[OPT_THRESHOLD] || *end || errno || !(o->threshold > 0) ||
            o->threshold > 10)
            return usage_error("--threshold takes a fraction of the mean load above 0 (e.g. "
                               "0.1), not '%s'", a->val[OPT_THRESHOLD]);
    }
    if (a->val[OPT_MAX_MOVES]) {
        if (parse_num("--max-moves", a->val[OPT_MAX_MOVES], 1, 1000000, &n))
            return EXIT_USAGE;
        o->max_moves = (unsigned)n;
    }
    o->drain = a->val[OPT_DRAIN];
    o->pairs = a->val[OPT_PAIRS];
    if (a->val[OPT_DRY_RUN] && a->val[OPT_YES])
        return usage_error("rebalance takes --dry-run or --yes, not both");
    return 0;
}

/* SIGINT from now on goes to a thread of its own; -1 when it cannot. */
static int take_sigint(void)
{
    static sigset_t set;
    pthread_t t;

    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0 ||
        pthread_create(&t, NULL, rebalance_signals, &set) != 0) {
        fprintf(stderr, "shardctl: cannot set up the interrupt handling\n");
        return -1;
    }
    pthread_detach(t);
    return 0;
}

static int cmd_rebalance(const args *a)
{
    shard_rebalance_options o = SHARD_REBALANCE_OPTIONS_INIT;
    shard_move_options mo = SHARD_MOVE_OPTIONS_INIT;
    rebalance_progress rp;
    move_progress mp;
    shard_rebalance *plan = NULL;
    const shard_rebalance_move *mv;
    shard_map *map = NULL;
    shard_ctx *ctx;
    size_t nm, done = 0;
    int rc;

    if (a->npos != 1)
        return usage_error("rebalance takes no arguments");
    if ((rc = rebalance_options(a, &o)) || move_options(a, &mo, &mp))
        return rc ? rc : EXIT_USAGE;
    if ((rc = open_ctx_log(a, &ctx, &map, log_warning)))
        return rc;
    if (o.by == SHARD_REBALANCE_BY_WRITES)
        fprintf(stderr, "rebalance: sampling the write rate for %.1f s\n", o.sample_ms / 1e3);
    if ((rc = shard_rebalance_plan(ctx, &o, &plan))) {
        rc = lib_error(rc);
        goto out;
    }
    shard_map_free(map); /* the plan reloaded the map: note from the one it used */
    map = NULL;
    if ((rc = shard_ctx_map(ctx, &map))) {
        rc = lib_error(rc);
        goto out;
    }
    print_rebalance_plan(plan, &o, map);
    mv = shard_rebalance_moves(plan, &nm);
    if (!nm || a->val[OPT_DRY_RUN])
        goto out;
    if (!a->val[OPT_YES]) {
        printf("nothing was changed: add --yes to run the plan\n");
        goto out;
    }
    fflush(stdout);
    memset(&rp, 0, sizeof rp);
    rp.by = o.by;
    rp.mp = &mp;
    o.move = &mo;
    o.step = on_rebalance_step;
    o.payload = &rp;
    if (take_sigint()) {
        rc = EXIT_FAIL;
        goto out;
    }
    rc = shard_rebalance_run(ctx, plan, &o, &done);
    if (rc) {
        /* The failed move's id and how to go on, when it got that far. */
        rc = rp.last.move_id ? move_stopped(rc, &rp.last) : lib_error(rc);
        fprintf(stderr, "shardctl: %zu of %zu moves done; once the failed move is resumed or "
                "aborted, shardctl rebalance plans again from there\n", done, nm);
    } else if (done < nm) {
        fprintf(stderr, "shardctl: stopped after %zu of %zu moves; left:\n", done, nm);
        for (size_t i = done; i < nm; i++) {
            fputs("  ", stderr);
            print_rebalance_move(stderr, &mv[i], i, nm, o.by);
        }
        fprintf(stderr, "shardctl: run shardctl rebalance again to continue (it plans again "
                "from the new state)\n");
        rc = EXIT_FAIL;
    } else {
        printf("rebalanced: %zu move%s done\n", done, done == 1 ? "" : "s");
    }
out:
    shard_rebalance_free(plan);
    shard_map_free(map);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_map_show(const args *a)
{
    shard_map *map = NULL;
    char *json = NULL;
    int rc;

    if (a->npos != 2)
        return usage_error("map show takes no arguments");
    if (a->val[OPT_MAP_VERSION]) {
        shard_store *store = NULL;
        unsigned long long v;
        if (parse_num("--map-version", a->val[OPT_MAP_VERSION], 1, UINT64_MAX, &v))
            return EXIT_USAGE;
        if (!a->map)
            return usage_error("no map store: give --map LOCATION or set LIBSHARD_MAP");
        if ((rc = shard_store_open(&store, a->map)) == 0)
            rc = shard_store_load_version(store, v, &map);
        shard_store_free(store);
        if (rc)
            return lib_error(rc);
    } else if ((rc = load_map(a, &map))) {
        return rc;
    }
    rc = shard_map_to_json(map, &json);
    shard_map_free(map);
    if (rc)
        return lib_error(rc);
    printf("%s\n", json);
    shard_free(json);
    return 0;
}

/*
 * A map is published only when its open shards have their databases on
 * their pairs' masters (shard_schema_check(3)): a context on FILE itself,
 * so that its own servers and credentials are the ones asked. 0 when the
 * map may be published, else the exit status.
 */
static int publish_check(const args *a, const char *file)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    int rc;

    o.refresh_interval_ms = 0;
    o.user = a->val[OPT_USER];
    o.password_env = a->val[OPT_PASSWORD_ENV];
    if (o.password_env && !o.user)
        return usage_error("--password-env goes with --user");
    if ((rc = shard_ctx_open(&ctx, file, &o)) == 0)
        rc = shard_schema_check(ctx, NULL);
    shard_ctx_free(ctx);
    if (rc == SHARD_EMAP) {
        fprintf(stderr, "shardctl: %s not published: %s; create the schema first (shardctl "
                "shards open, or schema apply on this map), or --force\n", file,
                shard_errmsg());
        return EXIT_USAGE;
    }
    if (rc) {
        fprintf(stderr, "shardctl: %s not published: cannot check its schema: %s (--force "
                "publishes it unchecked)\n", file, shard_errmsg());
        return exit_code(rc);
    }
    return 0;
}

/* Publish FILE to the store --map names, replacing the version there now. */
static int cmd_map_publish(const args *a)
{
    shard_store *store = NULL;
    shard_map *fresh = NULL, *cur = NULL;
    uint64_t expected = 0;
    int rc;

    if (a->npos != 3)
        return usage_error("map publish needs exactly one FILE");
    if (!a->map)
        return usage_error("no map store: give --map LOCATION or set LIBSHARD_MAP");
    if ((rc = shard_map_load(&fresh, a->pos[2])))
        return lib_error(rc == SHARD_EIO ? SHARD_EINVAL : rc);
    if ((rc = shard_store_open(&store, a->map)))
        goto out;
    rc = shard_store_load(store, &cur);
    if (rc == 0)
        expected = shard_map_version(cur);
    else if (rc != SHARD_EIO && rc != SHARD_ENOTFOUND && rc != SHARD_ESERVER)
        goto out; /* an unreadable store is not replaced blindly */
    if (shard_map_version(fresh) <= expected) {
        fprintf(stderr, "shardctl: %s has version %llu; the store is at %llu: raise its "
                "\"version\"\n", a->pos[2], (unsigned long long)shard_map_version(fresh),
                (unsigned long long)expected);
        rc = 0;
        shard_store_free(store);
        shard_map_free(fresh);
        shard_map_free(cur);
        return EXIT_USAGE;
    }
    if (!a->val[OPT_FORCE] && (rc = publish_check(a, a->pos[2])) != 0) {
        shard_store_free(store);
        shard_map_free(fresh);
        shard_map_free(cur);
        return rc;
    }
    rc = shard_store_publish(store, fresh, expected);
    if (rc == 0)
        printf("published map version %llu (was %llu)\n",
               (unsigned long long)shard_map_version(fresh), (unsigned long long)expected);
out:
    shard_store_free(store);
    shard_map_free(fresh);
    shard_map_free(cur);
    return rc ? lib_error(rc) : 0;
}

static int cmd_failover(const args *a)
{
    shard_failover_report r;
    shard_ctx *ctx;
    int rc;

    if (a->npos != 2)
        return usage_error("failover needs exactly one PAIR");
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    rc = shard_pair_failover(ctx, a->pos[1], a->val[OPT_FORCE] ? SHARD_FAILOVER_FORCE : 0, &r);
    if (rc == 0) {
        printf("failover %s: promoted %s (was standby); old master %s %s\n", r.pair,
               r.new_master, r.old_master,
               r.old_master_fenced ? "fenced read-only" : "unreachable");
        if (r.lag_transactions >= 0)
            printf("  standby lag at promotion: %" PRId64 " transactions, %.0f s behind; "
                   "applied in %.0f ms\n", r.lag_transactions,
                   r.lag_seconds < 0 ? 0 : r.lag_seconds, r.wait_ms);
        else
            printf("  standby lag at promotion: unknown (master unreachable): writes it "
                   "committed but never sent are lost; applied what it had in %.0f ms\n",
                   r.wait_ms);
        printf("  map version %" PRIu64 " published in %.0f ms\n", r.map_version, r.total_ms);
    } else {
        rc = lib_error(rc);
    }
    shard_ctx_free(ctx);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Imports from an unsharded database (libshard-import(7))             */
/* ------------------------------------------------------------------ */

#define IMPORT_OPTS \
    (O(OPT_FROM) | O(OPT_FROM_PASSWORD_ENV) | O(OPT_TABLE) | O(OPT_THREADS) | \
     O(OPT_DRY_RUN) | O(OPT_UNTIL_CLEAN))
#define IMPORT_MAX_PASSES 100

typedef struct import_progress {
    int tty;
    double last;
    size_t line_len;
} import_progress;

static void on_import_progress(const char *what, uint64_t done, uint64_t total, void *payload)
{
    import_progress *p = payload;
    char line[200];
    int final = strstr(what, ": done") != NULL;

    if (!final && now_seconds() - p->last < (p->tty ? TTY_REDRAW_SECONDS : PLAIN_LINE_SECONDS))
        return;
    p->last = now_seconds();
    if (total && done <= total)
        snprintf(line, sizeof line, "%s, %" PRIu64 " of about %" PRIu64 " rows read (%u%%)",
                 what, done, total, (unsigned)(done * 100 / total));
    else
        snprintf(line, sizeof line, "%s, %" PRIu64 " rows read", what, done);
    if (p->tty) {
        size_t len = strlen(line);
        fprintf(stderr, "\r%s%*s", line, p->line_len > len ? (int)(p->line_len - len) : 0, "");
        p->line_len = len;
        if (final) {
            fputc('\n', stderr);
            p->line_len = 0;
        }
    } else {
        fprintf(stderr, "%s\n", line);
    }
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
static int import_common(const args *a, shard_import_options *o, import_progress *p)
{
    unsigned long long n;

    if (a->npos != 1)
        return usage_error("%s takes options only", a->pos[0]), -1;
    if (!a->val[OPT_FROM] || !a->val[OPT_TABLE])
        return usage_error("%s needs --from mysql://USER@HOST[:PORT]/DB and --table T",
                           a->pos[0]), -1;
    o->source = a->val[OPT_FROM];
    o->password_env = a->val[OPT_FROM_PASSWORD_ENV];
    o->table = a->val[OPT_TABLE];
    if (a->val[OPT_THREADS]) {
        if (parse_num("--threads", a->val[OPT_THREADS], 1, 64, &n))
            return -1;
        o->threads = (unsigned)n;
    }
    if (a->val[OPT_DRY_RUN])
        o->flags |= SHARD_IMPORT_DRY_RUN;
    memset(p, 0, sizeof *p);
    p->tty = isatty(STDERR_FILENO);
    p->last = now_seconds();
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
        shard_import_report r;
        int rc = mapping ? shard_import_mapping(ctx, o, &r) : shard_import_table(ctx, o, &r);
        import_progress *p = o->payload;
        if (p->line_len) { /* the error line starts on a line of its own */
            fputc('\n', stderr);
            p->line_len = 0;
        }
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

static int cmd_import(const args *a)
{
    shard_import_options o = SHARD_IMPORT_OPTIONS_INIT;
    import_progress p;
    char near_col[80];
    shard_ctx *ctx;
    shard_map *map;
    int rc;

    if (import_common(a, &o, &p))
        return EXIT_USAGE;
    if (!a->val[OPT_AS])
        return usage_error("import needs --as TYPE");
    if ((rc = open_ctx(a, &ctx, &map)))
        return rc;
    o.id_column = a->val[OPT_ID_COLUMN];
    o.json_column = a->val[OPT_JSON_COLUMN];
    if (parse_type(map, a->val[OPT_AS], &o.type) ||
        (a->val[OPT_NEAR] && column_type("--near", a->val[OPT_NEAR], map, near_col,
                                         sizeof near_col, &o.near_type))) {
        rc = EXIT_USAGE;
    } else {
        const char *name = NULL;
        o.near_column = a->val[OPT_NEAR] ? near_col : NULL;
        shard_map_type_name(map, o.type, &name);
        rc = import_passes(a, ctx, &o, name, 0);
    }
    shard_map_free(map);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_import_mapping(const args *a)
{
    shard_import_options o = SHARD_IMPORT_OPTIONS_INIT;
    import_progress p;
    char from_col[80], to_col[80];
    shard_ctx *ctx;
    shard_map *map;
    int rc;

    if (import_common(a, &o, &p))
        return EXIT_USAGE;
    if (!a->val[OPT_FROM_COLUMN] || !a->val[OPT_TO_COLUMN] || !a->val[OPT_NAME])
        return usage_error("import-mapping needs --from-column C:TYPE, --to-column C:TYPE "
                           "and --name MAPPING");
    if ((rc = open_ctx(a, &ctx, &map)))
        return rc;
    if (column_type("--from-column", a->val[OPT_FROM_COLUMN], map, from_col,
                    sizeof from_col, &o.from_type) ||
        column_type("--to-column", a->val[OPT_TO_COLUMN], map, to_col, sizeof to_col,
                    &o.to_type)) {
        rc = EXIT_USAGE;
    } else {
        o.from_column = from_col;
        o.to_column = to_col;
        o.mapping = a->val[OPT_NAME];
        o.seq_column = a->val[OPT_SEQ_COLUMN];
        rc = import_passes(a, ctx, &o, o.mapping, 1);
    }
    shard_map_free(map);
    shard_ctx_free(ctx);
    return rc;
}

/* The fleet: status and topology                                      */
/* ------------------------------------------------------------------ */

static const char *jstr(const json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

static json_int_t jint(const json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

/* "0-31, 64-95" from [[0,31],[64,95]]. */
static void ranges_text(const json_t *ranges, char *buf, size_t size)
{
    const json_t *r;
    size_t i, len = 0;

    buf[0] = '\0';
    json_array_foreach(ranges, i, r) {
        json_int_t lo = json_integer_value(json_array_get(r, 0));
        json_int_t hi = json_integer_value(json_array_get(r, 1));
        int n = lo == hi ? snprintf(buf + len, size - len, "%s%lld", i ? ", " : "",
                                    (long long)lo)
                         : snprintf(buf + len, size - len, "%s%lld-%lld", i ? ", " : "",
                                    (long long)lo, (long long)hi);
        if (n < 0 || (size_t)n >= size - len)
            break;
        len += (size_t)n;
    }
}

/* The state of one replication link, in a few words. */
static void link_text(const json_t *l, char *buf, size_t size)
{
    const json_t *lag = json_object_get(l, "seconds_behind_master");
    int ok = strcmp(jstr(l, "io_running"), "Yes") == 0 &&
             strcmp(jstr(l, "sql_running"), "Yes") == 0 && !*jstr(l, "last_io_error") &&
             !*jstr(l, "last_sql_error");

    if (!ok)
        snprintf(buf, size, "BROKEN (io %s, sql %s)", jstr(l, "io_running"),
                 jstr(l, "sql_running"));
    else if (json_is_integer(lag))
        snprintf(buf, size, "ok, %lld s behind", (long long)json_integer_value(lag));
    else
        snprintf(buf, size, "ok");
}

/* One server line: role, address, state, and what it serves. */
static void print_server(const json_t *srv, const json_t *partner, int addr_width)
{
    const json_t *links = json_object_get(srv, "links"), *l, *pair_link = NULL;
    json_int_t dbs = jint(srv, "databases"), bad;
    const char *version, *dash;
    char bytes[32], text[200];
    size_t i;

    printf("  %-8s %-*s ", jstr(srv, "role"), addr_width, jstr(srv, "address"));
    if (!json_is_true(json_object_get(srv, "reachable"))) {
        printf("DOWN\n");
        return;
    }
    bad = jint(srv, "databases_missing") + jint(srv, "databases_lacking_tables");
    human_bytes(jint(srv, "bytes"), bytes, sizeof bytes);
    /* "10.11.19-MariaDB", without the distribution's suffixes */
    version = jstr(srv, "version");
    dash = strchr(version, '-');
    dash = dash ? strchr(dash + 1, '-') : NULL;
    printf("up    %s  %-16.*s  ", json_is_true(json_object_get(srv, "read_only")) ? "ro" : "rw",
           dash ? (int)(dash - version) : (int)strlen(version), version);
    if (bad)
        printf("%lld/%lld dbs ", (long long)(dbs - bad), (long long)dbs);
    else
        printf("%lld dbs ", (long long)dbs);
    printf("%9s", bytes);
    /* The pair link: the one from the partner's server_id, else the unnamed one. */
    json_array_foreach(links, i, l)
        if (partner && json_is_true(json_object_get(partner, "reachable")) &&
            jint(l, "source_server_id") == jint(partner, "server_id"))
            pair_link = l;
    json_array_foreach(links, i, l)
        if (!pair_link && !*jstr(l, "name"))
            pair_link = l;
    if (pair_link) {
        link_text(pair_link, text, sizeof text);
        printf("  link %s", text);
    } else if (partner) {
        printf("  link NONE");
    }
    json_array_foreach(links, i, l) {
        if (l == pair_link)
            continue;
        link_text(l, text, sizeof text);
        printf("; %s %s", *jstr(l, "name") ? jstr(l, "name") : "link", text);
    }
    printf("  gtid %.60s%s\n", jstr(srv, "gtid_binlog_pos"),
           strlen(jstr(srv, "gtid_binlog_pos")) > 60 ? "..." : "");
}

/* The screen of shardctl status: what is wrong first, then every pair. */
static void print_status(const json_t *doc)
{
    const json_t *problems = json_object_get(doc, "problems");
    const json_t *pairs = json_object_get(doc, "pairs"), *moves = json_object_get(doc, "moves");
    const json_t *p, *m, *e;
    size_t i, k, nproblems = json_array_size(problems);
    int width = 0;

    printf("status: %s", nproblems ? "UNHEALTHY" : "healthy");
    if (nproblems)
        printf(", %zu problem%s", nproblems, nproblems == 1 ? "" : "s");
    printf(" (map version %lld, %lld open shards, %zu pairs, %zu unfinished move%s)\n",
           (long long)jint(doc, "map_version"), (long long)jint(doc, "open_shards"),
           json_array_size(pairs), json_array_size(moves), json_array_size(moves) == 1 ? "" : "s");
    json_array_foreach(problems, i, e)
        printf("  ! %s\n", json_string_value(e));
    json_array_foreach(pairs, i, p)
        json_array_foreach(json_object_get(p, "servers"), k, e)
            if ((int)strlen(jstr(e, "address")) > width)
                width = (int)strlen(jstr(e, "address"));
    json_array_foreach(pairs, i, p) {
        const json_t *servers = json_object_get(p, "servers");
        char ids[200], mods[200];
        ranges_text(json_object_get(p, "ranges"), ids, sizeof ids);
        ranges_text(json_object_get(p, "mod_ranges"), mods, sizeof mods);
        printf("%s: %lld ID shards%s%s, %lld mod shards%s%s\n", jstr(p, "name"),
               (long long)jint(p, "id_shards"), *ids ? " " : "", ids,
               (long long)jint(p, "mod_shards"), *mods ? " " : "", mods);
        json_array_foreach(servers, k, e)
            print_server(e, json_array_get(servers, json_array_size(servers) - 1 - k) == e
                                ? NULL : json_array_get(servers, 1 - k), width);
    }
    json_array_foreach(moves, i, m)
        printf("move %lld: shards %lld-%lld %s -> %s, %s, %s (journal updated %s)\n",
               (long long)jint(m, "id"), (long long)jint(m, "first"),
               (long long)jint(m, "last"), jstr(m, "source"), jstr(m, "target"),
               jstr(m, "phase"),
               json_is_true(json_object_get(m, "running")) ? "running" : "INTERRUPTED",
               jstr(m, "updated_at"));
}

static int cmd_status(const args *a)
{
    shard_ctx *ctx;
    char *text = NULL;
    json_t *doc = NULL;
    int rc;

    if (a->npos != 1)
        return usage_error("status takes no arguments");
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    if ((rc = shard_fleet_status(ctx, &text))) {
        rc = lib_error(rc);
    } else if (!(doc = json_loads(text, 0, NULL))) {
        fprintf(stderr, "shardctl: the status report is not JSON\n");
        rc = EXIT_FAIL;
    } else {
        if (a->seen & O(OPT_JSON))
            printf("%s\n", text);
        else
            print_status(doc);
        rc = json_is_true(json_object_get(doc, "healthy")) ? 0 : EXIT_FAIL;
    }
    json_decref(doc);
    shard_free(text);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_pair_add(const args *a)
{
    shard_ctx *ctx;
    uint64_t version;
    int rc;

    if (a->npos != 3)
        return usage_error("pair add needs NAME (and --master ADDR --standby ADDR)");
    if (!a->val[OPT_MASTER] || !a->val[OPT_STANDBY])
        return usage_error("pair add needs --master ADDR and --standby ADDR");
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    rc = shard_pair_add(ctx, a->pos[2], a->val[OPT_MASTER], a->val[OPT_STANDBY], &version);
    if (rc)
        rc = lib_error(rc);
    else
        printf("pair %s added: master %s, standby %s (map version %" PRIu64 "); it serves "
               "nothing yet: shards open N --pair %s, or move shards to it\n", a->pos[2],
               a->val[OPT_MASTER], a->val[OPT_STANDBY], version, a->pos[2]);
    shard_ctx_free(ctx);
    return rc;
}

static int cmd_pair_remove(const args *a)
{
    shard_ctx *ctx;
    uint64_t version;
    int rc;

    if (a->npos != 3)
        return usage_error("pair remove needs exactly one NAME");
    if ((rc = open_ctx(a, &ctx, NULL)))
        return rc;
    if ((rc = shard_pair_remove(ctx, a->pos[2], &version)))
        rc = lib_error(rc);
    else
        printf("pair %s removed (map version %" PRIu64 ")\n", a->pos[2], version);
    shard_ctx_free(ctx);
    return rc;
}

/* "8-11 on MySQL002, 12-15 on MySQL003": where shards [from, to) live in map. */
static void print_placement(const shard_map *map, unsigned from, unsigned to)
{
    unsigned run = from;

    for (unsigned s = from; s < to; s++) {
        const char *p = "?", *q = "?";
        shard_map_pair_of(map, s, &p);
        if (s + 1 < to)
            shard_map_pair_of(map, s + 1, &q);
        if (s + 1 < to && strcmp(p, q) == 0)
            continue;
        printf("%s%u", run == from ? "" : ", ", run);
        if (s > run)
            printf("-%u", s);
        printf(" on %s", p);
        run = s + 1;
    }
}

static int cmd_shards_open(const args *a)
{
    unsigned long long n;
    schema_progress p;
    shard_ctx *ctx;
    shard_map *before, *after = NULL;
    uint64_t version;
    unsigned from;
    int rc;

    if (a->npos != 3)
        return usage_error("shards open needs exactly one N (the new open_shards)");
    if (parse_num("N", a->pos[2], 1, SHARD_MAX_SHARD + 1, &n))
        return EXIT_USAGE;
    if ((rc = open_ctx(a, &ctx, &before)))
        return rc;
    memset(&p, 0, sizeof p);
    p.tty = isatty(STDERR_FILENO);
    p.npairs = shard_map_pair_count(before) + 1; /* the pair a new range goes to, too */
    p.last = now_seconds();
    from = shard_map_open_shards(before);
    shard_map_free(before);
    if (!(p.pairs = calloc(p.npairs, sizeof *p.pairs))) {
        shard_ctx_free(ctx);
        return usage_error("out of memory");
    }
    rc = shard_shards_open(ctx, (unsigned)n, a->val[OPT_PAIR], on_progress, &p, &version);
    if (p.tty && p.dirty)
        progress_draw(&p);
    progress_end_line(&p);
    if (rc == 0 && (rc = shard_ctx_map(ctx, &after)) == 0) {
        unsigned first = from < shard_map_open_shards(after) ? from : 0;
        printf("opened shards ");
        print_placement(after, first, shard_map_open_shards(after));
        printf(": open_shards %u, map version %" PRIu64 "\n", shard_map_open_shards(after),
               version);
    }
    if (rc)
        rc = lib_error(rc);
    shard_map_free(after);
    free(p.pairs);
    shard_ctx_free(ctx);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Help and version                                                    */
/* ------------------------------------------------------------------ */

/* Whether the usage entry `line` is a command whose words begin with
 * words[0..n). An entry is two spaces, then the command's words. */
static int entry_matches(const char *line, char *const *words, int n)
{
    const char *s = line + 2;

    if (strncmp(line, "  ", 2) != 0 || !(*s >= 'a' && *s <= 'z'))
        return 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(words[i]);
        if (strncmp(s, words[i], len) != 0 || (s[len] != ' ' && s[len] != '\n'))
            return 0;
        s += len;
        while (*s == ' ')
            s++;
    }
    return 1;
}

/* Prints the usage entries (with their continuation lines) of the command
 * words[0..n); returns how many there were. */
static int print_entries(char *const *words, int n, int print)
{
    const char *line = usage_text;
    int found = 0, in = 0;

    while ((line = strchr(line, '\n')) && *++line) {
        const char *end = strchr(line, '\n');
        int len = end ? (int)(end - line) : (int)strlen(line);
        if (strncmp(line, "   ", 3) != 0)
            in = entry_matches(line, words, n);
        else if (!in)
            continue;
        if (in && print)
            printf("%.*s\n", len, line);
        found += in && strncmp(line, "   ", 3) != 0;
    }
    return found;
}

/* The usage of the longest command that words[0..n) start with. */
static int help_for(char *const *words, int n)
{
    for (int k = n; k > 0; k--) {
        if (!print_entries(words, k, 0))
            continue;
        printf("usage: shardctl [--map FILE] COMMAND ...\n");
        print_entries(words, k, 1);
        printf("Options for every command: --map FILE, --user NAME, --password-env VAR;\n"
               "see shardctl --help for all commands, shardctl(1) for the details.\n");
        return 0;
    }
    return usage_error("no command '%s'", n ? words[0] : "");
}

static int cmd_help(const args *a)
{
    if (a->npos == 1) {
        fputs(usage_text, stdout);
        return 0;
    }
    return help_for(a->pos + 1, a->npos - 1);
}

static int print_version(void)
{
    printf("shardctl (libshard) %s\n", shard_version());
    if (strcmp(shard_version(), SHARD_VERSION_STRING) != 0)
        printf("built with the libshard %s header\n", SHARD_VERSION_STRING);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Dispatch                                                            */
/* ------------------------------------------------------------------ */

typedef struct command {
    const char *word1, *word2;
    int (*run)(const args *a);
    uint64_t opts; /* the options it accepts besides GLOBAL_OPTS */
} command;

static const command commands[] = {
    {"id", "decode", cmd_id_decode, O(OPT_JSON)},
    {"id", "encode", cmd_id_encode, 0},
    {"modshard", NULL, cmd_modshard, O(OPT_SHARDS) | O(OPT_HEX)},
    {"check", NULL, cmd_check, 0},
    {"schema", "apply", cmd_schema_apply, 0},
    {"obj", "create", cmd_obj_create, O(OPT_SHARD) | O(OPT_NEAR)},
    {"obj", "get", cmd_obj_get, 0},
    {"obj", "update", cmd_obj_update, 0},
    {"obj", "delete", cmd_obj_delete, O(OPT_HARD)},
    {"mapping", "add", cmd_mapping_add, 0},
    {"mapping", "list", cmd_mapping_list, O(OPT_LIMIT) | O(OPT_BEFORE)},
    {"mapping", "remove", cmd_mapping_remove, 0},
    {"mapping", "count", cmd_mapping_count, 0},
    {"kv", "put", cmd_kv_put, 0},
    {"kv", "get", cmd_kv_get, 0},
    {"kv", "delete", cmd_kv_delete, 0},
    {"move", "status", cmd_move_status, 0},
    {"move", "resume", cmd_move_resume, O(OPT_THREADS) | CUTOVER_OPTS | THROTTLE_OPTS},
    {"move", "abort", cmd_move_abort, 0},
    {"move", "revert", cmd_move_revert, O(OPT_THREADS)},
    {"move", "finish", cmd_move_finish, O(OPT_THREADS)},
    {"failover", NULL, cmd_failover, O(OPT_FORCE)},
    {"map", "show", cmd_map_show, O(OPT_MAP_VERSION)},
    {"map", "publish", cmd_map_publish, O(OPT_FORCE)},
    {"status", NULL, cmd_status, O(OPT_JSON)},
    {"pair", "add", cmd_pair_add, O(OPT_MASTER) | O(OPT_STANDBY)},
    {"pair", "remove", cmd_pair_remove, 0},
    {"shards", "open", cmd_shards_open, O(OPT_PAIR)},
    {"help", NULL, cmd_help, 0},
    {"move", NULL, cmd_move,
     O(OPT_SHARDS) | O(OPT_TO) | O(OPT_DRY_RUN) | O(OPT_YES) | O(OPT_KEEP_SOURCE) |
         O(OPT_THREADS) | O(OPT_VERBOSE) | O(OPT_JSON) | CUTOVER_OPTS | O(OPT_REVERSE_WINDOW) |
         THROTTLE_OPTS},
    {"import", NULL, cmd_import, IMPORT_OPTS | O(OPT_AS) | O(OPT_ID_COLUMN) |
         O(OPT_JSON_COLUMN) | O(OPT_NEAR)},
    {"import-mapping", NULL, cmd_import_mapping, IMPORT_OPTS | O(OPT_FROM_COLUMN) |
         O(OPT_TO_COLUMN) | O(OPT_NAME) | O(OPT_SEQ_COLUMN)},
    {"rebalance", NULL, cmd_rebalance,
     O(OPT_BY) | O(OPT_THRESHOLD) | O(OPT_MAX_MOVES) | O(OPT_DRAIN) | O(OPT_PAIRS) |
         O(OPT_DRY_RUN) | O(OPT_YES) | O(OPT_THREADS)},
};

/*
 * --legacy TYPE: the ID arguments of these commands are legacy ids of TYPE
 * (or native IDs), resolved through the lookup before the command runs.
 */
static const struct legacy_pos {
    const char *word1, *word2;
    int first, last; /* positional ID arguments; last -1: to the end */
} legacy_positions[] = {
    {"obj", "get", 2, -1},     {"obj", "update", 2, 2},   {"obj", "delete", 2, 2},
    {"mapping", "list", 3, 3}, {"mapping", "count", 3, 3},
};

static const struct legacy_pos *legacy_pos_of(const struct command *c)
{
    for (size_t i = 0; i < sizeof legacy_positions / sizeof legacy_positions[0]; i++)
        if (strcmp(legacy_positions[i].word1, c->word1) == 0 && c->word2 &&
            strcmp(legacy_positions[i].word2, c->word2) == 0)
            return &legacy_positions[i];
    return NULL;
}

static int run_legacy(const struct command *c, const struct legacy_pos *lp, const args *a)
{
    int last = lp->last < 0 ? a->npos - 1 : lp->last;
    size_t n = last >= lp->first ? (size_t)(last - lp->first + 1) : 0;
    uint64_t *in = calloc(n ? n : 1, sizeof *in), *out = calloc(n ? n : 1, sizeof *out);
    char (*text)[24] = calloc(n ? n : 1, sizeof *text);
    char **pos = calloc((size_t)a->npos + 1, sizeof *pos);
    shard_ctx *ctx = NULL;
    shard_map *map = NULL;
    unsigned type;
    args copy = *a;
    int rc = 0;

    if (!in || !out || !text || !pos) {
        rc = usage_error("out of memory");
        goto out;
    }
    if (last >= a->npos || n == 0) {
        rc = c->run(a); /* too few arguments: the command says what it needs */
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned long long v;
        if (parse_num("ID", a->pos[lp->first + (int)i], 1, UINT64_MAX, &v)) {
            rc = EXIT_USAGE;
            goto out;
        }
        in[i] = v;
    }
    if ((rc = open_ctx(a, &ctx, &map)))
        goto out;
    if (parse_type(map, a->val[OPT_LEGACY], &type)) {
        rc = EXIT_USAGE;
        goto out;
    }
    if ((rc = shard_legacy_resolve_many(ctx, type, in, n, out))) {
        rc = lib_error(rc);
        goto out;
    }
    for (int i = 0; i < a->npos; i++)
        pos[i] = a->pos[i];
    for (size_t i = 0; i < n; i++) {
        if (!out[i]) {
            fprintf(stderr, "shardctl: no %s with legacy id %" PRIu64 " has been imported\n",
                    a->val[OPT_LEGACY], in[i]);
            rc = EXIT_FAIL;
            goto out;
        }
        snprintf(text[i], sizeof text[i], "%" PRIu64, out[i]);
        pos[lp->first + (int)i] = text[i];
    }
    shard_map_free(map);
    shard_ctx_free(ctx);
    map = NULL;
    ctx = NULL;
    copy.pos = pos;
    rc = c->run(&copy);
out:
    shard_map_free(map);
    shard_ctx_free(ctx);
    free(in);
    free(out);
    free(text);
    free(pos);
    return rc;
}

static int run_command(const command *c, const args *a)
{
    const struct legacy_pos *lp = legacy_pos_of(c);
    uint64_t extra = a->seen & ~(c->opts | GLOBAL_OPTS | (lp ? O(OPT_LEGACY) : 0));

    for (int k = 0; extra && k < NOPTS; k++)
        if (extra & O(k))
            return usage_error("%s is not an option of %s%s%s", options[k].name, c->word1,
                               c->word2 ? " " : "", c->word2 ? c->word2 : "");
    if (lp && a->val[OPT_LEGACY])
        return run_legacy(c, lp, a);
    return c->run(a);
}

static int dispatch(const args *a)
{
    const char *w1 = a->npos > 0 ? a->pos[0] : NULL;
    const char *w2 = a->npos > 1 ? a->pos[1] : NULL;
    int known_first = 0;

    if (a->seen & O(OPT_VERSION))
        return print_version();
    if (a->seen & O(OPT_HELP)) {
        if (w1 && strcmp(w1, "help") != 0)
            return help_for(a->pos, a->npos);
        fputs(usage_text, stdout);
        return 0;
    }
    if (!w1)
        return usage_error("no command given");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        const command *c = &commands[i];
        if (strcmp(c->word1, w1) != 0)
            continue;
        known_first = 1;
        if (!c->word2 || (w2 && strcmp(c->word2, w2) == 0))
            return run_command(c, a);
    }
    if (known_first && !w2)
        return usage_error("%s needs a subcommand", w1);
    if (known_first)
        return usage_error("unknown %s command '%s'", w1, w2);
    return usage_error("unknown command '%s'", w1);
}

int main(int argc, char **argv)
{
    args a;
    int rc = parse_args(argc, argv, &a);

    if (rc == 0)
        rc = dispatch(&a);
    free(a.pos);
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "shardctl: cannot write output: %s\n", strerror(errno));
        rc = EXIT_FAIL;
    }
    shard_global_cleanup();
    return rc;
}
