/*
 * shardctl: the helpers every command family shares: usage and library
 * errors, number and ID parsing, the map and the context.
 */
#include "shardctl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int usage_error(const char *fmt, ...)
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
int exit_code(int rc)
{
    return rc == SHARD_EINVAL || rc == SHARD_EMAP || rc == SHARD_ENOSHARD ? EXIT_USAGE
                                                                          : EXIT_FAIL;
}

/* One line on stderr for a failed library call; 2 for bad input, else 1. */
int lib_error(int rc)
{
    const char *msg = shard_errmsg();
    fprintf(stderr, "shardctl: %s\n", *msg ? msg : shard_strerror(rc));
    return exit_code(rc);
}

/* Parse an unsigned decimal number in [min, max]; -1 with a message if not. */
int parse_num(const char *what, const char *s, unsigned long long min, unsigned long long max,
              unsigned long long *out)
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
int parse_seq(const char *what, const char *s, int64_t *out)
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
int parse_id(const char *what, const char *s, uint64_t *id)
{
    if (shard_id_parse(s, id) == 0)
        return 0;
    fprintf(stderr, "shardctl: %s%s%s\n", what ? what : "", what ? ": " : "",
            shard_errmsg());
    return -1;
}

/* TYPE: a name from the map's objects, or a registered type number. */
int parse_type(const shard_map *map, const char *s, unsigned *type)
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
int check_object_id(const shard_map *map, const char *s, uint64_t id)
{
    const char *name;
    if (shard_map_type_name(map, shard_id_type(id), &name) == 0)
        return 0;
    return usage_error("ID %s has type %u, which is not registered in the map's objects",
                       s, shard_id_type(id)), -1;
}

/* --threads N (1..64); *threads untouched without it. */
int parse_threads(const args *a, unsigned *threads)
{
    unsigned long long n;

    if (!a->val[OPT_THREADS])
        return 0;
    if (parse_num("--threads", a->val[OPT_THREADS], 1, 64, &n))
        return -1;
    *threads = (unsigned)n;
    return 0;
}

int load_map(const args *a, shard_map **map)
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
 * The context options of the command line: no refresh thread, the
 * account of --user and --password-env, --connect-timeout. The options
 * are checked here, so that a mistake is worded as the option the user
 * typed.
 */
int ctx_options(const args *a, shard_options *o)
{
    o->refresh_interval_ms = 0;
    o->log_level = SHARD_LOG_WARN;
    o->user = a->val[OPT_USER];
    o->password_env = a->val[OPT_PASSWORD_ENV];
    if (o->password_env && !o->user)
        return usage_error("--password-env goes with --user");
    if (o->password_env && !getenv(o->password_env))
        return usage_error("--password-env names %s, which is not set in the environment",
                           o->password_env);
    if (a->val[OPT_CONNECT_TIMEOUT]) {
        unsigned long long s;
        if (parse_num("--connect-timeout", a->val[OPT_CONNECT_TIMEOUT], 1, 3600, &s))
            return EXIT_USAGE;
        o->connect_timeout_ms = (unsigned)(s * 1000);
    }
    return 0;
}

/*
 * A context for one short command: no refresh thread. The map is loaded
 * now and servers are connected lazily. *map (when asked) is a reference
 * to its map, freed with shard_map_free().
 */
int open_ctx(const args *a, shard_ctx **ctx, shard_map **map, shard_log_fn log)
{
    shard_options o = SHARD_OPTIONS_INIT;
    int rc;

    if ((rc = ctx_options(a, &o)))
        return rc;
    o.log = log;
    if (!a->map)
        return usage_error("no shard map: give --map FILE or set LIBSHARD_MAP");
    if ((rc = shard_ctx_open(ctx, a->map, &o)))
        return lib_error(rc == SHARD_EIO ? SHARD_EINVAL : rc);
    if (map && (rc = shard_ctx_map(*ctx, map))) {
        rc = lib_error(rc);
        shard_ctx_free(*ctx);
        *ctx = NULL;
        return rc;
    }
    return 0;
}

/* The library's warnings (a move keeping the source, a pair that is not
 * healthy), one line each on standard error. */
void log_warning(int level, const char *message, void *payload)
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
void print_object(const char *json, size_t len)
{
    for (size_t i = 0; i < len; i++)
        putchar(json[i] == '\n' || json[i] == '\r' ? ' ' : json[i]);
    putchar('\n');
}

/* 6.9 MB: bytes for a human. */
void human_bytes(long long n, char *buf, size_t size)
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

double ctl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
