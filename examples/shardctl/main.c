/*
 * shardctl: the operator's command line for libshard (shardctl(1)).
 *
 * The option table and the command table drive everything: parsing,
 * which options a command takes, how many arguments, what is opened for
 * it (the map, a context) and freed after it, in one place, and the help
 * and bash completion that describe every command and flag.
 *
 * Exit status: 0 success, 1 the operation failed (not found, server
 * error), 2 bad usage or invalid input. Every error is one line on stderr.
 */
#include "shardctl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- the options ---------------------------------------------------------- */

static const struct option_def {
    const char *name;
    const char *metavar; /* NULL: a flag without a value */
    const char *help;    /* one line; a command may say it its own way */
} options[NOPTS] = {
    [OPT_MAP] = {"--map", "FILE", "the shard map's store: a file, file:PATH or "
                 "mysql://USER@HOST:PORT/DB/TABLE (else $LIBSHARD_MAP)"},
    [OPT_HELP] = {"--help", NULL, "print this help and exit (also -h)"},
    [OPT_USER] = {"--user", "NAME", "connect as NAME (an operator's account) instead of the "
                  "map's credentials.user"},
    [OPT_PASSWORD_ENV] = {"--password-env", "VAR", "with --user: the environment variable "
                          "that holds its password"},
    [OPT_CONNECT_TIMEOUT] = {"--connect-timeout", "S", "give up connecting to a server after "
                             "S seconds, 1..3600 (default 3)"},
    [OPT_VERSION] = {"--version", NULL, "print the library's version and exit"},
    [OPT_JSON] = {"--json", NULL, "print JSON instead of text"},
    [OPT_SHARDS] = {"--shards", "N", "the number of mod shards"},
    [OPT_HEX] = {"--hex", NULL, "each KEY is hexadecimal bytes (an even number of digits)"},
    [OPT_SHARD] = {"--shard", "S", "create the object on ID shard S (in a range of the map)"},
    [OPT_NEAR] = {"--near", "ID", "create the object on the shard of object ID"},
    [OPT_HARD] = {"--hard", NULL, "remove the row instead of marking the object deleted"},
    [OPT_LIMIT] = {"--limit", "N", "print at most N rows (default: all)"},
    [OPT_BEFORE] = {"--before", "SEQ", "only rows with a sequence strictly below SEQ (the "
                    "next page)"},
    [OPT_TO] = {"--to", "PAIR", "the target pair (required)"},
    [OPT_DRY_RUN] = {"--dry-run", NULL, "check and print the plan; change nothing"},
    [OPT_YES] = {"--yes", NULL, "do it without asking for confirmation"},
    [OPT_KEEP_SOURCE] = {"--keep-source", NULL, "keep the source's copy (fenced, unused) "
                         "instead of dropping it at the end"},
    [OPT_THREADS] = {"--threads", "N", "copy and verify up to N tables at once, 1..64"},
    [OPT_FORCE] = {"--force", NULL, "do it even though a check refuses"},
    [OPT_FROM] = {"--from", "URL", "the legacy database, mysql://USER@HOST[:PORT]/DB "
                  "(required)"},
    [OPT_FROM_PASSWORD_ENV] = {"--from-password-env", "VAR", "the variable that holds the "
                               "legacy account's password (default: the map's)"},
    [OPT_TABLE] = {"--table", "T", "the legacy table (required)"},
    [OPT_AS] = {"--as", "TYPE", "the object type its rows become (required)"},
    [OPT_ID_COLUMN] = {"--id-column", "C", "the integer primary key (default id)"},
    [OPT_JSON_COLUMN] = {"--json-column", "C", "take each object from this column's JSON "
                         "object, not one field per column"},
    [OPT_UNTIL_CLEAN] = {"--until-clean", NULL, "repeat passes until one finds nothing to do "
                         "(at most 100)"},
    [OPT_FROM_COLUMN] = {"--from-column", "C:TYPE", "the column of the FROM side and its "
                         "object type (required)"},
    [OPT_TO_COLUMN] = {"--to-column", "C:TYPE", "the column of the TO side and its object "
                       "type (required)"},
    [OPT_NAME] = {"--name", "MAPPING", "the mapping the rows go to (required)"},
    [OPT_SEQ_COLUMN] = {"--seq-column", "C", "the column holding each row's sequence "
                        "(default: the import time)"},
    [OPT_LEGACY] = {"--legacy", "TYPE", "the ID arguments are legacy ids of TYPE, resolved "
                    "through the import's lookup first"},
    [OPT_MASTER] = {"--master", "ADDR", "the new pair's master, HOST:PORT (required)"},
    [OPT_STANDBY] = {"--standby", "ADDR", "the new pair's standby, HOST:PORT (required)"},
    [OPT_PAIR] = {"--pair", "PAIR", "put shards beyond the last range on PAIR (default: the "
                  "last range's pair)"},
    [OPT_VERBOSE] = {"--verbose", NULL, "with --dry-run: list every table, not only the "
                     "database ranges"},
    [OPT_BY] = {"--by", "bytes|writes", "balance size on disk (default) or rows changed per "
                "second"},
    [OPT_THRESHOLD] = {"--threshold", "F", "the band around the mean load that counts as "
                       "balanced, a fraction (default 0.1)"},
    [OPT_MAX_MOVES] = {"--max-moves", "N", "plan at most N moves"},
    [OPT_DRAIN] = {"--drain", "PAIR[,PAIR...]", "empty these pairs onto the others, then "
                   "even out the rest"},
    [OPT_PAIRS] = {"--pairs", "P1,P2,...", "move only between these pairs (and the drained "
                   "ones)"},
    [OPT_MAX_LAG_MS] = {"--max-lag-ms", "N", "fence only once the target is within N ms of "
                        "the source"},
    [OPT_FENCE_TIMEOUT] = {"--fence-timeout", "S", "the fence's lock wait in seconds, "
                           "1..3600 (default 2)"},
    [OPT_CUTOVER_ATTEMPTS] = {"--cutover-attempts", "N", "fence attempts before the move "
                              "stops, resumable (default 20)"},
    [OPT_POSTPONE_CUTOVER] = {"--postpone-cutover", "FILE", "once caught up, keep "
                              "replicating and wait while FILE exists"},
    [OPT_REVERSE_WINDOW] = {"--reverse-window", "DURATION", "keep the source in sync after "
                            "the flip for DURATION (3600s, 30m, 2h, 1d): revertible"},
    [OPT_MAX_ROWS_PER_SECOND] = {"--max-rows-per-second", "N", "throttle the copy to at most "
                                 "N rows per second"},
    [OPT_MAX_LOAD] = {"--max-load", "VAR=N[,VAR=N...]", "pause the copy while a status "
                      "variable of the source is above N"},
    [OPT_PRETTY] = {"--pretty", NULL, "indented JSON, for people"},
    [OPT_MAP_VERSION] = {"--map-version", "N", "published version N from the store's history "
                         "(a MySQL or ZooKeeper store keeps every version)"},
    [OPT_WAIT] = {"--wait", "SECONDS", "wait at most SECONDS, 0..3600"},
};

#define GLOBAL_OPTS \
    (O(OPT_MAP) | O(OPT_HELP) | O(OPT_USER) | O(OPT_PASSWORD_ENV) | O(OPT_CONNECT_TIMEOUT))
#define THROTTLE_OPTS (O(OPT_MAX_ROWS_PER_SECOND) | O(OPT_MAX_LOAD))
#define CUTOVER_OPTS \
    (O(OPT_MAX_LAG_MS) | O(OPT_FENCE_TIMEOUT) | O(OPT_CUTOVER_ATTEMPTS) | \
     O(OPT_POSTPONE_CUTOVER))
#define IMPORT_OPTS \
    (O(OPT_FROM) | O(OPT_FROM_PASSWORD_ENV) | O(OPT_TABLE) | O(OPT_THREADS) | \
     O(OPT_DRY_RUN) | O(OPT_UNTIL_CLEAN))

/* ---- the commands ----------------------------------------------------------- */

/* A command's own wording of one of its options. */
typedef struct flag_doc {
    int opt;
    const char *metavar, *help;
} flag_doc;

typedef struct command {
    const char *word1, *word2;  /* word2 NULL: a one-word command */
    const char *synopsis;       /* what follows the words */
    const char *summary;        /* one line */
    int min_args, max_args;     /* after the words; max -1: no limit */
    enum need need;
    int log;                    /* the library's warnings on stderr */
    command_fn run;
    uint64_t opts;              /* the options it takes besides GLOBAL_OPTS */
    int legacy_first, legacy_last; /* --legacy: the ID arguments (pos); 0: none, -1: all */
    const flag_doc *docs;       /* its own wording of options, {0}-terminated */
} command;

static const flag_doc decode_docs[] = {
    {OPT_JSON, NULL, "one JSON object per ID: {\"id\":..,\"shard\":..,\"type\":..,\"local\":..}"},
    {0, NULL, NULL}};
static const flag_doc modshard_docs[] = {
    {OPT_SHARDS, "N", "the number of mod shards (default: the map's, else 4096)"},
    {0, NULL, NULL}};
static const flag_doc move_docs[] = {
    {OPT_SHARDS, "A-B", "the range of ID shards to move, all on one pair (required)"},
    {OPT_TO, "PAIR", "the target pair (required)"},
    {OPT_DRY_RUN, NULL, "check both pairs and print the plan; change nothing"},
    {OPT_JSON, NULL, "with --dry-run: the plan as one JSON document"},
    {OPT_YES, NULL, "move without asking for confirmation"},
    {0, NULL, NULL}};
static const flag_doc again_docs[] = {
    {OPT_THREADS, "N", "copy and verify up to N tables at once, 1..64, where the move "
     "still copies or verifies"},
    {0, NULL, NULL}};
static const flag_doc rebalance_docs[] = {
    {OPT_DRY_RUN, NULL, "print the plan only (the default without --yes)"},
    {OPT_YES, NULL, "run the plan, one move after the other"},
    {OPT_THREADS, "N", "parallel table copies in each move, as for move"},
    {0, NULL, NULL}};
static const flag_doc failover_docs[] = {
    {OPT_FORCE, NULL, "promote the standby even when the master does not answer (writes "
     "it never sent are lost)"},
    {OPT_WAIT, "SECONDS", "give the standby at most SECONDS, 0..3600, to apply what it has "
     "(default 30); longer, and the master stays in charge (exit 1)"},
    {0, NULL, NULL}};
static const flag_doc publish_docs[] = {
    {OPT_FORCE, NULL, "publish without checking that the new shards' databases exist"},
    {0, NULL, NULL}};
static const flag_doc import_docs[] = {
    {OPT_NEAR, "COLUMN:TYPE", "put each object on the shard of its parent, the TYPE object "
     "imported from COLUMN's legacy id"},
    {OPT_DRY_RUN, NULL, "read and compare everything, print what a pass would do, write "
     "nothing"},
    {OPT_THREADS, "N", "write up to N shards at once, 1..64"},
    {0, NULL, NULL}};
static const flag_doc import_mapping_docs[] = {
    {OPT_DRY_RUN, NULL, "read and compare everything, print what a pass would do, write "
     "nothing"},
    {OPT_THREADS, "N", "write up to N shards at once, 1..64"},
    {0, NULL, NULL}};
static const flag_doc status_docs[] = {
    {OPT_JSON, NULL, "the report as one JSON document (shard_fleet_status(3))"},
    {0, NULL, NULL}};

/*
 * Ordered as `shardctl help` lists them. A one-word command that shares
 * its first word with subcommands (move) comes after them, so that
 * "move status" is not taken for "move" with an argument.
 */
static const command commands[] = {
    {"id", "decode", "[--json] ID...", "the parts of each ID", 1, -1, NEED_NOTHING, 0,
     cmd_id_decode, O(OPT_JSON), 0, 0, decode_docs},
    {"id", "encode", "SHARD TYPE LOCAL", "the ID made of these parts", 3, 3, NEED_NOTHING, 0,
     cmd_id_encode, 0, 0, 0, NULL},
    {"modshard", NULL, "[--shards N] [--hex] KEY...", "the mod shard of each key", 1, -1,
     NEED_NOTHING, 0, cmd_modshard, O(OPT_SHARDS) | O(OPT_HEX), 0, 0, modshard_docs},
    {"check", NULL, "", "validate the shard map", 0, 0, NEED_MAP, 0, cmd_check, 0, 0, 0,
     NULL},
    {"schema", "apply", "", "create every shard database and table, with progress", 0, 0,
     NEED_CTX_MAP, 0, cmd_schema_apply, 0, 0, 0, NULL},
    {"obj", "create", "TYPE JSON [--shard S | --near ID]", "create an object, print its ID",
     2, 2, NEED_CTX_MAP, 0, cmd_obj_create, O(OPT_SHARD) | O(OPT_NEAR), 0, 0, NULL},
    {"obj", "get", "ID...", "each object's JSON, one line each", 1, -1, NEED_CTX_MAP, 0,
     cmd_obj_get, 0, 2, -1, NULL},
    {"obj", "update", "ID JSON", "apply a merge patch, print the result", 2, 2, NEED_CTX_MAP,
     0, cmd_obj_update, 0, 2, 2, NULL},
    {"obj", "delete", "ID [--hard]", "soft delete (--hard: remove the row)", 1, 1,
     NEED_CTX_MAP, 0, cmd_obj_delete, O(OPT_HARD), 2, 2, NULL},
    {"mapping", "add", "NAME FROM TO [SEQ]", "add a row (SEQ: default now, in us)", 3, 4,
     NEED_CTX, 0, cmd_mapping_add, 0, 0, 0, NULL},
    {"mapping", "list", "NAME FROM [--limit N] [--before SEQ]", "TO SEQ per row, newest "
     "first", 2, 2, NEED_CTX, 0, cmd_mapping_list, O(OPT_LIMIT) | O(OPT_BEFORE), 3, 3, NULL},
    {"mapping", "remove", "NAME FROM TO", "remove a row", 3, 3, NEED_CTX, 0,
     cmd_mapping_remove, 0, 0, 0, NULL},
    {"mapping", "count", "NAME FROM", "the number of rows of FROM", 2, 2, NEED_CTX, 0,
     cmd_mapping_count, 0, 3, 3, NULL},
    {"kv", "put", "TABLE KEY VALUE", "store a value", 3, 3, NEED_CTX, 0, cmd_kv_put, 0, 0, 0,
     NULL},
    {"kv", "get", "TABLE KEY", "print a value", 2, 2, NEED_CTX, 0, cmd_kv_get, 0, 0, 0, NULL},
    {"kv", "delete", "TABLE KEY", "delete a key", 2, 2, NEED_CTX, 0, cmd_kv_delete, 0, 0, 0,
     NULL},
    {"move", "status", "", "the journaled moves, one JSON line each", 0, 0, NEED_CTX, 0,
     cmd_move_status, 0, 0, 0, NULL},
    {"move", "resume", "[ID] [--threads N] [cut-over and throttle options]",
     "finish an interrupted move (or drop what a done one left)", 0, 1, NEED_CTX, 1, cmd_move_resume,
     O(OPT_THREADS) | CUTOVER_OPTS | THROTTLE_OPTS, 0, 0, again_docs},
    {"move", "abort", "[ID]", "undo an interrupted move (before its flip)", 0, 1, NEED_CTX, 1,
     cmd_move_abort, 0, 0, 0, NULL},
    {"move", "revert", "[ID] [--threads N]", "flip a reversible move back to its source", 0,
     1, NEED_CTX, 1, cmd_move_revert, O(OPT_THREADS), 0, 0, again_docs},
    {"move", "finish", "[ID] [--threads N]", "end a reverse window now: drop the source", 0,
     1, NEED_CTX, 1, cmd_move_finish, O(OPT_THREADS), 0, 0, again_docs},
    {"move", NULL, "--shards A-B --to PAIR [OPTIONS]", "move shards A..B to another pair, "
     "online", 0, 0, NEED_CTX, 1, cmd_move,
     O(OPT_SHARDS) | O(OPT_TO) | O(OPT_DRY_RUN) | O(OPT_YES) | O(OPT_KEEP_SOURCE) |
         O(OPT_THREADS) | O(OPT_VERBOSE) | O(OPT_JSON) | CUTOVER_OPTS | O(OPT_REVERSE_WINDOW) |
         THROTTLE_OPTS,
     0, 0, move_docs},
    {"rebalance", NULL, "[--by bytes|writes] [--dry-run | --yes] [OPTIONS]",
     "plan moves that even out the pairs; run them with --yes", 0, 0, NEED_CTX, 1,
     cmd_rebalance,
     O(OPT_BY) | O(OPT_THRESHOLD) | O(OPT_MAX_MOVES) | O(OPT_DRAIN) | O(OPT_PAIRS) |
         O(OPT_DRY_RUN) | O(OPT_YES) | O(OPT_THREADS),
     0, 0, rebalance_docs},
    {"failover", NULL, "PAIR [--force] [--wait SECONDS]", "promote PAIR's standby", 1, 1, NEED_CTX, 1,
     cmd_failover, O(OPT_FORCE) | O(OPT_WAIT), 0, 0, failover_docs},
    {"map", "show", "[--pretty] [--map-version N]",
     "the current map (or published version N), as canonical JSON on one line", 0, 0,
     NEED_MAP, 0, cmd_map_show, O(OPT_PRETTY) | O(OPT_MAP_VERSION), 0, 0, NULL},
    {"map", "publish", "FILE [--force]", "validate FILE and publish it as the new map (its "
     "version above the current one)", 1, 1, NEED_NOTHING, 0, cmd_map_publish, O(OPT_FORCE),
     0, 0, publish_docs},
    {"import", NULL, "--from URL --table T --as TYPE [OPTIONS]",
     "one import pass of a legacy table", 0, 0, NEED_CTX_MAP, 0, cmd_import,
     IMPORT_OPTS | O(OPT_AS) | O(OPT_ID_COLUMN) | O(OPT_JSON_COLUMN) | O(OPT_NEAR), 0, 0,
     import_docs},
    {"import-mapping", NULL, "--from URL --table T --from-column C:TYPE --to-column C:TYPE "
     "--name MAPPING [OPTIONS]", "one import pass of a legacy join table", 0, 0, NEED_CTX_MAP,
     0, cmd_import_mapping,
     IMPORT_OPTS | O(OPT_FROM_COLUMN) | O(OPT_TO_COLUMN) | O(OPT_NAME) | O(OPT_SEQ_COLUMN), 0,
     0, import_mapping_docs},
    {"status", NULL, "[--json]", "every pair's servers, links, shards; the moves", 0, 0,
     NEED_CTX, 0, cmd_status, O(OPT_JSON), 0, 0, status_docs},
    {"pair", "add", "NAME --master ADDR --standby ADDR", "check a new pair and add it to the "
     "map", 1, 1, NEED_CTX, 0, cmd_pair_add, O(OPT_MASTER) | O(OPT_STANDBY), 0, 0, NULL},
    {"pair", "remove", "NAME", "remove a pair that serves nothing", 1, 1, NEED_CTX, 0,
     cmd_pair_remove, 0, 0, 0, NULL},
    {"shards", "open", "N [--pair PAIR]", "create shards up to N-1, then open them", 1, 1,
     NEED_CTX_MAP, 0, cmd_shards_open, O(OPT_PAIR), 0, 0, NULL},
    {"help", NULL, "[COMMAND]", "every command, or a command's flags (also CMD --help)", 0,
     -1, NEED_NOTHING, 0, NULL, 0, 0, 0, NULL},
    {"completion", NULL, "bash", "a bash completion script: eval \"$(shardctl completion "
     "bash)\"", 1, 1, NEED_NOTHING, 0, NULL, 0, 0, 0, NULL},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static int nwords(const command *c)
{
    return c->word2 ? 2 : 1;
}

/* "obj create", "move". */
static const char *command_name(const command *c, char *buf, size_t size)
{
    snprintf(buf, size, "%s%s%s", c->word1, c->word2 ? " " : "", c->word2 ? c->word2 : "");
    return buf;
}

/* Every option the command takes: its own, --legacy where it has ID
 * arguments, and the global ones. */
static uint64_t command_opts(const command *c)
{
    return c->opts | GLOBAL_OPTS | (c->legacy_first ? O(OPT_LEGACY) : 0);
}

/* ---- parsing ------------------------------------------------------------------ */

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
            if (o->metavar && *i + 1 >= argc)
                return usage_error("%s needs a value", o->name);
            a->val[k] = o->metavar ? argv[++*i] : "";
        } else if (s[n] == '=' && o->metavar) {
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

/*
 * The command that words[0..n) name, or NULL with *why set: the mistake
 * in words, the same for `shardctl WORDS` and `shardctl help WORDS`.
 */
static const command *find_command(char *const *words, int n, char *why, size_t size)
{
    const command *one_word = NULL;
    int known_first = 0;

    if (n == 0) {
        snprintf(why, size, "no command given");
        return NULL;
    }
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const command *c = &commands[i];
        if (strcmp(c->word1, words[0]) != 0)
            continue;
        known_first = 1;
        if (c->word2 && n > 1 && strcmp(c->word2, words[1]) == 0)
            return c;
        if (!c->word2)
            one_word = c;
    }
    if (one_word)
        return one_word;
    if (known_first && n < 2)
        snprintf(why, size, "%s needs a subcommand", words[0]);
    else if (known_first)
        snprintf(why, size, "unknown %s command '%s'", words[0], words[1]);
    else
        snprintf(why, size, "unknown command '%s'", words[0]);
    return NULL;
}

/* Whether the family of word1 has subcommands (move status, move resume...). */
static int has_subcommands(const char *word1)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (commands[i].word2 && strcmp(commands[i].word1, word1) == 0)
            return 1;
    return 0;
}

/* ---- help ------------------------------------------------------------------------ */

static const char *flag_help(const command *c, int opt, const char **metavar)
{
    *metavar = options[opt].metavar;
    for (const flag_doc *d = c ? c->docs : NULL; d && d->help; d++)
        if (d->opt == opt) {
            if (d->metavar)
                *metavar = d->metavar;
            return d->help;
        }
    return options[opt].help;
}

static void print_flag(const command *c, int opt)
{
    const char *metavar, *help = flag_help(c, opt, &metavar);
    char left[64];

    snprintf(left, sizeof left, "%s%s%s", options[opt].name, metavar ? " " : "",
             metavar ? metavar : "");
    if (strlen(left) > 26)
        printf("      %s\n      %-26s %s\n", left, "", help);
    else
        printf("      %-26s %s\n", left, help);
}

/* A command's help: its synopsis, what it does, and every flag it takes. */
static void print_command_help(const command *c)
{
    char name[64];

    command_name(c, name, sizeof name);
    printf("  %s%s%s\n      %s\n", name, *c->synopsis ? " " : "", c->synopsis, c->summary);
    if (c->opts | (c->legacy_first ? O(OPT_LEGACY) : 0)) {
        uint64_t left = (c->opts | (c->legacy_first ? O(OPT_LEGACY) : 0)) & ~GLOBAL_OPTS;
        printf("    options:\n");
        /* Those the command words its own way first (its main ones), then
         * the rest in the table's order. */
        for (const flag_doc *d = c->docs; d && d->help; d++)
            if (left & O(d->opt)) {
                print_flag(c, d->opt);
                left &= ~O(d->opt);
            }
        for (int k = 0; k < NOPTS; k++)
            if (left & O(k))
                print_flag(c, k);
    }
}

static void print_global_options(void)
{
    printf("Options of every command:\n");
    for (int k = 0; k < NOPTS; k++)
        if (GLOBAL_OPTS & O(k))
            print_flag(NULL, k);
}

/* shardctl help: every command, one line each. */
static void print_overview(void)
{
    printf("usage: shardctl [--map FILE] COMMAND ...\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const command *c = &commands[i];
        char left[200];
        snprintf(left, sizeof left, "%s%s%s%s%s", c->word1, c->word2 ? " " : "",
                 c->word2 ? c->word2 : "", *c->synopsis ? " " : "", c->synopsis);
        if (strlen(left) > 36)
            printf("  %s  %s\n", left, c->summary);
        else
            printf("  %-36s  %s\n", left, c->summary);
    }
    print_global_options();
    printf("shardctl help COMMAND (or COMMAND --help) lists a command's own options;\n"
           "shardctl --version prints the library's version. TYPE is a name from the map's\n"
           "objects or a number. Exit status: 0 ok, 1 failed, 2 bad usage or input.\n"
           "Every command and option is described in shardctl(1).\n");
}

/* The help of the commands words[0..n) name: one command, or a family
 * (help move: move and its subcommands; help obj: every obj command). */
static int help_for(char *const *words, int n)
{
    char why[200];
    const command *c = find_command(words, n, why, sizeof why);
    int family = c && !c->word2 && n == 1 && has_subcommands(words[0]);

    if (!c && !(n == 1 && has_subcommands(words[0])))
        return usage_error("%s", why);
    printf("usage: shardctl [--map FILE] COMMAND ...\n");
    if (c && !family) {
        print_command_help(c);
    } else {
        for (size_t i = 0; i < NCOMMANDS; i++)
            if (strcmp(commands[i].word1, words[0]) == 0)
                print_command_help(&commands[i]);
    }
    print_global_options();
    printf("See shardctl(1) for the details.\n");
    return 0;
}

/* ---- bash completion, from the tables --------------------------------------------- */

static void print_opts_words(uint64_t opts)
{
    const char *sep = "";
    for (int k = 0; k < NOPTS; k++)
        if (opts & O(k)) {
            printf("%s%s", sep, options[k].name);
            sep = " ";
        }
}

static int print_completion(void)
{
    printf("# bash completion for shardctl: eval \"$(shardctl completion bash)\"\n"
           "_shardctl() {\n"
           "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
           "    local w cmd=() i\n"
           "    case \"$prev\" in\n"
           "        ");
    {
        const char *sep = "";
        for (int k = 0; k < NOPTS; k++)
            if (options[k].metavar) {
                printf("%s%s", sep, options[k].name);
                sep = "|";
            }
    }
    printf(")\n"
           "            case \"$prev\" in\n"
           "                --map|--postpone-cutover) COMPREPLY=($(compgen -f -- \"$cur\"));;\n"
           "                --password-env|--from-password-env) "
           "COMPREPLY=($(compgen -v -- \"$cur\"));;\n"
           "                *) COMPREPLY=();;\n"
           "            esac\n"
           "            return;;\n"
           "    esac\n"
           "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
           "        w=${COMP_WORDS[i]}\n"
           "        case \"$w\" in\n"
           "            -*) case \"$w\" in *=*) ;; ");
    {
        const char *sep = "";
        for (int k = 0; k < NOPTS; k++)
            if (options[k].metavar) {
                printf("%s%s", sep, options[k].name);
                sep = "|";
            }
    }
    printf(") ((i++));; esac;;\n"
           "            *) cmd+=(\"$w\");;\n"
           "        esac\n"
           "    done\n"
           "    local words opts\n"
           "    case \"${cmd[*]}\" in\n");
    /* The first words, then the second words of each family. */
    printf("        '') words='");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        int dup = 0;
        for (size_t j = 0; j < i; j++)
            dup |= strcmp(commands[j].word1, commands[i].word1) == 0;
        if (!dup)
            printf("%s%s", i ? " " : "", commands[i].word1);
    }
    printf("'; opts='");
    print_opts_words(GLOBAL_OPTS | O(OPT_VERSION));
    printf("';;\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const command *c = &commands[i];
        char name[64];
        int first_of_family = 1;
        for (size_t j = 0; j < i; j++)
            first_of_family &= strcmp(commands[j].word1, c->word1) != 0;
        if (c->word2) {
            command_name(c, name, sizeof name);
            printf("        '%s'|'%s '*) words='' opts='", name, name);
            print_opts_words(command_opts(c));
            printf("';;\n");
        }
        if (first_of_family && has_subcommands(c->word1)) {
            const command *one = NULL;
            printf("        '%s') words='", c->word1);
            for (size_t j = 0; j < NCOMMANDS; j++) {
                if (strcmp(commands[j].word1, c->word1) != 0)
                    continue;
                if (commands[j].word2)
                    printf("%s ", commands[j].word2);
                else
                    one = &commands[j];
            }
            printf("' opts='");
            print_opts_words(one ? command_opts(one) : GLOBAL_OPTS);
            printf("';;\n");
        } else if (!c->word2) {
            printf("        '%s'|'%s '*) words='%s' opts='", c->word1, c->word1,
                   strcmp(c->word1, "completion") == 0 ? "bash" : "");
            print_opts_words(command_opts(c));
            printf("';;\n");
        }
    }
    printf("        *) words='' opts='';;\n"
           "    esac\n"
           "    if [[ $cur == -* ]]; then\n"
           "        COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
           "    else\n"
           "        COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
           "    fi\n"
           "}\n"
           "complete -F _shardctl shardctl\n");
    return 0;
}

/* ---- dispatch ---------------------------------------------------------------------- */

/*
 * --legacy TYPE: the ID arguments are legacy ids of TYPE (or native IDs),
 * resolved through the lookup before the command runs; *pos is a copy of
 * the arguments with them replaced (the caller frees it and *text).
 */
static int resolve_legacy(const command *c, const args *a, shard_ctx *ctx,
                          const shard_map *map, char ***pos, char (**text)[24])
{
    int last = c->legacy_last < 0 ? a->npos - 1 : c->legacy_last;
    size_t n = (size_t)(last - c->legacy_first + 1);
    uint64_t *in = calloc(n, sizeof *in), *out = calloc(n, sizeof *out);
    unsigned type;
    int rc = 0;

    *pos = calloc((size_t)a->npos + 1, sizeof **pos);
    *text = calloc(n, sizeof **text);
    if (!in || !out || !*pos || !*text) {
        rc = usage_error("out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned long long v;
        if (parse_num("ID", a->pos[c->legacy_first + (int)i], 1, UINT64_MAX, &v)) {
            rc = EXIT_USAGE;
            goto out;
        }
        in[i] = v;
    }
    if (parse_type(map, a->val[OPT_LEGACY], &type)) {
        rc = EXIT_USAGE;
        goto out;
    }
    if ((rc = shard_legacy_resolve_many(ctx, type, in, n, out))) {
        rc = lib_error(rc);
        goto out;
    }
    memcpy(*pos, a->pos, (size_t)a->npos * sizeof **pos);
    for (size_t i = 0; i < n; i++) {
        if (!out[i]) {
            fprintf(stderr, "shardctl: no %s with legacy id %" PRIu64 " has been imported\n",
                    a->val[OPT_LEGACY], in[i]);
            rc = EXIT_FAIL;
            goto out;
        }
        snprintf((*text)[i], sizeof (*text)[i], "%" PRIu64, out[i]);
        (*pos)[c->legacy_first + (int)i] = (*text)[i];
    }
out:
    free(in);
    free(out);
    return rc;
}

/* The number of arguments the table allows, worded from the synopsis. */
static int check_arity(const command *c, const args *a)
{
    int n = a->npos - nwords(c);
    char name[64];

    if (n >= c->min_args && (c->max_args < 0 || n <= c->max_args))
        return 0;
    command_name(c, name, sizeof name);
    if (c->max_args == 0)
        return usage_error("%s takes no arguments", name);
    if (c->min_args == 0)
        return usage_error("%s takes at most %d argument%s: %s", name, c->max_args,
                           c->max_args == 1 ? "" : "s", c->synopsis);
    return usage_error("%s needs %s", name, c->synopsis);
}

/*
 * Checks the options and the arguments against the table, opens what the
 * command needs, runs it, and frees what was opened: the one place where
 * a context is opened and freed.
 */
static int run_command(const command *c, const args *a)
{
    uint64_t extra = a->seen & ~command_opts(c);
    shard_ctx *ctx = NULL;
    shard_map *map = NULL;
    char **pos = NULL, (*text)[24] = NULL;
    args resolved = *a;
    char name[64];
    int rc;

    command_name(c, name, sizeof name);
    for (int k = 0; extra && k < NOPTS; k++)
        if (extra & O(k))
            return usage_error("%s is not an option of %s", options[k].name, name);
    if ((rc = check_arity(c, a)))
        return rc;
    if (c->need == NEED_MAP)
        rc = load_map(a, &map);
    else if (c->need == NEED_CTX || c->need == NEED_CTX_MAP || a->val[OPT_LEGACY])
        rc = open_ctx(a, &ctx, &map, c->log ? log_warning : NULL);
    if (rc)
        return rc;
    if (c->legacy_first && a->val[OPT_LEGACY] &&
        (rc = resolve_legacy(c, a, ctx, map, &pos, &text)) == 0)
        resolved.pos = pos;
    if (rc == 0)
        rc = c->run(&resolved, ctx, c->need == NEED_CTX ? NULL : map);
    free(pos);
    free(text);
    shard_map_free(map);
    shard_ctx_free(ctx);
    return rc;
}

static int print_version(void)
{
    printf("shardctl (libshard) %s\n", shard_version());
    if (strcmp(shard_version(), SHARD_VERSION_STRING) != 0)
        printf("built with the libshard %s header\n", SHARD_VERSION_STRING);
    return 0;
}

static int dispatch(const args *a)
{
    const command *c;
    char why[200];

    if (a->seen & O(OPT_VERSION))
        return print_version();
    if (a->npos > 0 && strcmp(a->pos[0], "help") == 0) {
        if (a->npos == 1) {
            print_overview();
            return 0;
        }
        return help_for(a->pos + 1, a->npos - 1);
    }
    if (a->seen & O(OPT_HELP)) {
        if (a->npos == 0) {
            print_overview();
            return 0;
        }
        return help_for(a->pos, a->npos > 2 ? 2 : a->npos);
    }
    if (!(c = find_command(a->pos, a->npos, why, sizeof why)))
        return usage_error("%s", why);
    /* "move frob": a family's one-word command takes no such argument */
    if (!c->word2 && c->max_args == 0 && a->npos > 1 && has_subcommands(c->word1))
        return usage_error("unknown %s command '%s'", c->word1, a->pos[1]);
    if (strcmp(c->word1, "completion") == 0) {
        if (strcmp(a->pos[a->npos - 1], "bash") != 0 || a->npos != 2)
            return usage_error("completion takes bash (the only shell it knows)");
        return print_completion();
    }
    return run_command(c, a);
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
