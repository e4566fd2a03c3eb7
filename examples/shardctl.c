/*
 * shardctl: the operator's command line for libshard.
 *
 * Exit status: 0 success, 1 the operation failed (not found, server
 * error), 2 bad usage or invalid input. Every error is one line on stderr.
 */
#include <libshard.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_FAIL 1
#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: shardctl [--map FILE] COMMAND ...\n"
    "  id decode [--json] ID...          the parts of each ID\n"
    "  id encode SHARD TYPE LOCAL        the ID made of these parts\n"
    "  modshard [--shards N] [--hex] KEY...  the mod shard of each key\n"
    "  check                             validate the shard map\n"
    "The map is --map FILE, else $LIBSHARD_MAP.\n";

/* Options and positional arguments, parsed once for every command. */
typedef struct args {
    const char *map;
    const char *shards;
    int json;
    int hex;
    int help;
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

/* One line on stderr for a failed library call; 2 for bad input, else 1. */
static int lib_error(int rc)
{
    const char *msg = shard_errmsg();
    fprintf(stderr, "shardctl: %s\n", *msg ? msg : shard_strerror(rc));
    switch (rc) {
    case SHARD_EINVAL:
    case SHARD_EMAP:
        return EXIT_USAGE;
    default:
        return EXIT_FAIL;
    }
}

static int parse_args(int argc, char **argv, args *a)
{
    memset(a, 0, sizeof *a);
    a->pos = calloc((size_t)argc + 1, sizeof *a->pos);
    if (!a->pos)
        return usage_error("out of memory");
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--") == 0) {
            while (++i < argc)
                a->pos[a->npos++] = argv[i];
            break;
        }
        if (strcmp(s, "--map") == 0 || strcmp(s, "--shards") == 0) {
            if (i + 1 >= argc)
                return usage_error("%s needs a value", s);
            if (s[2] == 'm')
                a->map = argv[++i];
            else
                a->shards = argv[++i];
        } else if (strncmp(s, "--map=", 6) == 0) {
            a->map = s + 6;
        } else if (strncmp(s, "--shards=", 9) == 0) {
            a->shards = s + 9;
        } else if (strcmp(s, "--json") == 0) {
            a->json = 1;
        } else if (strcmp(s, "--hex") == 0) {
            a->hex = 1;
        } else if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            a->help = 1;
        } else if (s[0] == '-' && s[1] != '\0') {
            return usage_error("unknown option %s", s);
        } else {
            a->pos[a->npos++] = argv[i];
        }
    }
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
        if (a->json)
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
    if (a->shards) {
        if (parse_num("--shards", a->shards, 1, SHARD_MAX_MOD_SHARDS, &n))
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
        if (a->hex && (rc = unhex(a->pos[i], &key, &len))) {
            free(out);
            return rc;
        }
        rc = shard_mod(key, len, (uint32_t)n, &out[i]);
        if (a->hex)
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

typedef struct command {
    const char *word1, *word2;
    int (*run)(const args *a);
} command;

static const command commands[] = {
    {"id", "decode", cmd_id_decode},
    {"id", "encode", cmd_id_encode},
    {"modshard", NULL, cmd_modshard},
    {"check", NULL, cmd_check},
};

static int dispatch(const args *a)
{
    const char *w1 = a->npos > 0 ? a->pos[0] : NULL;
    const char *w2 = a->npos > 1 ? a->pos[1] : NULL;
    int known_first = 0;

    if (a->help) {
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
            return c->run(a);
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
    return rc;
}
