/*
 * tests/server_shardctl.c: the data commands of shardctl against real
 * servers (shardctl(1)): schema apply, obj, mapping and kv.
 *
 * Starts 2 small pairs (8 ID shards, 4 mod shards) once, then runs the
 * shardctl binary ($SHARDCTL, default build/shardctl) as a separate process
 * with LIBSHARD_MAP naming the harness's map, capturing stdout, stderr and
 * the exit status apart. Where a row must be somewhere, the test looks for
 * it there as root (harness_sql), not through libshard.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"
#include "harness.h"
#include "run_cmd.h"

#define NPAIRS 2
#define ID_SHARDS 8  /* 0-3 on MySQL001 (s1), 4-7 on MySQL002 (s3) */
#define MOD_SHARDS 4 /* 0-1 on MySQL001, 2-3 on MySQL002 */

static harness *H;

/* ------------------------------------------------------------------ */
/* Running shardctl                                                    */
/* ------------------------------------------------------------------ */

typedef struct run_opts {
    int no_map_env;       /* LIBSHARD_MAP unset (else: the harness's map) */
    const char *password; /* LIBSHARD_PASSWORD for the child; NULL: inherited */
} run_opts;

/* No output of any run may contain the password (when it is long enough
 * that finding it cannot be a coincidence). */
static void assert_no_password(const run_result *r, const char *pw)
{
    if (!pw || strlen(pw) < 8)
        return;
    ck_assert_msg(strstr(r->out, pw) == NULL, "the password is on stdout: %s", r->out);
    ck_assert_msg(strstr(r->err, pw) == NULL, "the password is on stderr: %s", r->err);
}

/* Runs shardctl with argv (NULL-terminated, without the program name). */
static run_result run_argv(const run_opts *o, const char *const *argv)
{
    run_spec s = {.map_env = o->no_map_env ? NULL : harness_map_path(H),
                  .password = o->password,
                  .timeout_s = 60};
    run_result r = run_cmd(&s, argv);

    assert_no_password(&r, getenv("LIBSHARD_PASSWORD"));
    if (o->password)
        assert_no_password(&r, o->password);
    return r;
}

/* shardctl with LIBSHARD_MAP naming the harness's map. */
#define RUN(...) run_argv(&(run_opts){0, NULL}, ARGV(__VA_ARGS__))
/* The same as the operators' account (schema apply is not the application's). */
#define RUN_ADMIN(...) run_argv(&(run_opts){0, NULL}, ARGV(HARNESS_ADMIN_ARGS, __VA_ARGS__))

/* stderr is exactly one non-empty line, mentioning `mention` when given. */
static void assert_one_error_line(const run_result *r, const char *mention)
{
    ck_assert_msg(count_lines(r->err) == 1 && r->err[strlen(r->err) - 1] == '\n' &&
                      strncmp(r->err, "shardctl: ", 10) == 0 && strlen(r->err) > 15,
                  "stderr is not exactly one error line: \"%s\"", r->err);
    if (mention)
        ck_assert_msg(strstr(r->err, mention) != NULL, "stderr \"%s\" does not mention \"%s\"",
                      r->err, mention);
}

/* Bad usage or input: exit 2, nothing on stdout, one line on stderr. */
static void expect_usage(run_result r, const char *mention)
{
    ck_assert_msg(r.status == 2, "exit status %d (want 2), stdout: \"%s\", stderr: \"%s\"",
                  r.status, r.out, r.err);
    ck_assert_msg(r.out[0] == '\0', "stdout not empty: \"%s\"", r.out);
    assert_one_error_line(&r, mention);
    run_free(&r);
}

/* The operation failed: exit 1, stdout exactly `out`, one line on stderr. */
static void expect_fail(run_result r, const char *out, const char *mention)
{
    ck_assert_msg(r.status == 1, "exit status %d (want 1), stdout: \"%s\", stderr: \"%s\"",
                  r.status, r.out, r.err);
    ck_assert_str_eq(r.out, out);
    assert_one_error_line(&r, mention);
    run_free(&r);
}

/* An ID as text, in one of 16 rotating buffers: for use within one statement
 * (IDBUF keeps one for longer). */
static const char *idstr(uint64_t id)
{
    static char bufs[16][24];
    static unsigned next;
    char *b = bufs[next++ % 16];
    snprintf(b, sizeof bufs[0], "%" PRIu64, id);
    return b;
}

#define IDBUF(name, id)                                                                \
    char name[24];                                                                         \
    snprintf(name, sizeof name, "%" PRIu64, (uint64_t)(id))

static uint64_t compose(uint64_t shard, uint64_t type, uint64_t local)
{
    return (shard << 46) | (type << 36) | local;
}

static unsigned id_shard(uint64_t id)
{
    return (unsigned)(id >> 46) & 0xffff;
}

static unsigned id_type(uint64_t id)
{
    return (unsigned)(id >> 36) & 0x3ff;
}

static uint64_t id_local(uint64_t id)
{
    return id & ((UINT64_C(1) << 36) - 1);
}

/* `obj create` must succeed and print exactly one decimal ID. */
static uint64_t created_id(run_result r)
{
    char *end;
    uint64_t id;

    ck_assert_msg(r.status == 0, "obj create: exit status %d, stderr: %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    ck_assert_msg(r.out[0] >= '1' && r.out[0] <= '9', "not an ID: \"%s\"", r.out);
    errno = 0;
    id = strtoull(r.out, &end, 10);
    ck_assert_msg(errno == 0 && strcmp(end, "\n") == 0, "not one ID line: \"%s\"", r.out);
    ck_assert_msg(id_type(id) != 0 && id_local(id) != 0 && (id >> 62) == 0,
                  "invalid ID %s", r.out);
    run_free(&r);
    return id;
}

#define CREATE(...) created_id(RUN("obj", "create", __VA_ARGS__))

/* The master of the pair serving an ID shard, or a mod shard. */
static const char *master_of_shard(unsigned shard)
{
    return shard < ID_SHARDS / 2 ? "s1" : "s3";
}

static const char *master_of_modshard(unsigned modshard)
{
    return modshard < MOD_SHARDS / 2 ? "s1" : "s3";
}

/* Runs SQL as root on a server; returns its output (caller frees). */
static char *sql(const char *server, const char *fmt, ...)
{
    char q[1024], *out = NULL;
    va_list ap;
    int rc;

    va_start(ap, fmt);
    vsnprintf(q, sizeof q, fmt, ap);
    va_end(ap);
    rc = harness_sql(H, server, q, &out);
    ck_assert_msg(rc == 0, "%s on %s failed (%d)", q, server, rc);
    return out;
}

static void expect_sql(const char *server, const char *want, const char *fmt, ...)
{
    char q[1024], *out = NULL;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(q, sizeof q, fmt, ap);
    va_end(ap);
    ck_assert_int_eq(harness_sql(H, server, q, &out), 0);
    ck_assert_msg(strcmp(out, want) == 0, "%s on %s: \"%s\", want \"%s\"", q, server, out,
                  want);
    free(out);
}

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ------------------------------------------------------------------ */
/* schema apply                                                        */
/* ------------------------------------------------------------------ */

/*
 * Per ID shard: the database, 3 object tables, 3 mapping tables
 * (board_has_pins, its reverse pin_owned_by_board, user_likes_pins); per mod
 * shard: the database and 2 key-value tables.
 */
#define PER_ID_SHARD 7
#define PER_MOD_SHARD 3

static void expect_schema_run(run_result r)
{
    char want[200], line1[100], line2[100];

    ck_assert_msg(r.status == 0, "exit status %d, stderr: %s", r.status, r.err);
    snprintf(want, sizeof want,
             "schema applied: %d databases and tables on 2 pairs (map version 1)\n",
             ID_SHARDS * PER_ID_SHARD + MOD_SHARDS * PER_MOD_SHARD);
    ck_assert_str_eq(r.out, want);
    /* Not a terminal: plain progress lines, one per finished pair, no errors. */
    for (int p = 1; p <= NPAIRS; p++) {
        snprintf(p == 1 ? line1 : line2, sizeof line1,
                 "schema MySQL00%d: done, %d databases and tables\n", p,
                 ID_SHARDS / 2 * PER_ID_SHARD + MOD_SHARDS / 2 * PER_MOD_SHARD);
    }
    ck_assert_msg(strstr(r.err, line1) && strstr(r.err, line2),
                  "progress lacks a pair's last line: \"%s\"", r.err);
    ck_assert_msg(strstr(r.err, "shardctl:") == NULL, "an error on stderr: \"%s\"", r.err);
    ck_assert_msg(strchr(r.err, '\r') == NULL, "terminal output on a pipe: \"%s\"", r.err);
    run_free(&r);
}

START_TEST(schema_apply_twice)
{
    /* Before the schema exists, a write fails (exit 1) and says what to run. */
    expect_fail(RUN("obj", "create", "pins", "{}"), "", "shardctl schema apply");
    expect_fail(RUN("kv", "put", "users_by_email", "k", "v"), "", "doesn't exist");

    /* The application's account (the map's credentials) may not. */
    expect_fail(RUN("schema", "apply"), "", "denied");
    expect_schema_run(RUN_ADMIN("schema", "apply"));
    /* The fence table, on every server, masters and standbys alike. */
    for (int k = 1; k <= 2 * NPAIRS; k++) {
        char name[8];
        snprintf(name, sizeof name, "s%d", k);
        expect_sql(name, "1\n", "SELECT COUNT(*) FROM information_schema.tables WHERE "
                                "table_schema = 'libshard_control' AND table_name = 'fence'");
    }
    for (unsigned s = 0; s < ID_SHARDS; s++)
        expect_sql(master_of_shard(s), "6\n",
                   "SELECT COUNT(*) FROM information_schema.tables "
                   "WHERE table_schema = 'db%05u'", s);
    for (unsigned s = 0; s < MOD_SHARDS; s++)
        expect_sql(master_of_modshard(s), "users_by_email\nusers_by_name\n",
                   "SELECT table_name FROM information_schema.tables "
                   "WHERE table_schema = 'modshard%05u' ORDER BY table_name", s);
    /* No shard database lands on the other pair. */
    expect_sql("s1", "4\n", "SELECT COUNT(*) FROM information_schema.schemata "
                            "WHERE schema_name LIKE 'db0%%'");
    expect_sql("s3", "4\n", "SELECT COUNT(*) FROM information_schema.schemata "
                            "WHERE schema_name LIKE 'db0%%'");

    /* Idempotent: the same again, nothing breaks, same summary. */
    expect_schema_run(RUN_ADMIN("schema", "apply"));
    expect_usage(RUN("schema", "apply", "now"), "schema apply");
    expect_usage(RUN("schema"), "schema");
}
END_TEST

/* ------------------------------------------------------------------ */
/* Objects                                                             */
/* ------------------------------------------------------------------ */

START_TEST(obj_round_trip)
{
    uint64_t id = CREATE("pins", "{\"title\":\"hello\",\"n\":1}");
    IDBUF(s, id);
    char *row;

    ck_assert_uint_eq(id_type(id), 1);
    ck_assert_uint_lt(id_shard(id), ID_SHARDS); /* an open shard */
    /* The row is where the ID says, holding the JSON. */
    row = sql(master_of_shard(id_shard(id)), "SELECT data FROM db%05u.pins WHERE local_id = %"
              PRIu64, id_shard(id), id_local(id));
    ck_assert_str_eq(row, "{\"title\":\"hello\",\"n\":1}\n");
    free(row);

    expect_ok(RUN("obj", "get", s), "{\"title\":\"hello\",\"n\":1}\n");
    /* Merge patch: change n, remove title, add tags. */
    expect_ok(RUN("obj", "update", s, "{\"n\":2,\"title\":null,\"tags\":[\"x\"]}"),
              "{\"n\":2,\"tags\":[\"x\"]}\n");
    expect_ok(RUN("obj", "get", s), "{\"n\":2,\"tags\":[\"x\"]}\n");
    expect_ok(RUN("obj", "update", s, "{\"tags\":{\"a\":1}}"),
              "{\"n\":2,\"tags\":{\"a\":1}}\n");
    expect_ok(RUN("obj", "update", s, "{\"tags\":{\"b\":2,\"a\":null}}"),
              "{\"n\":2,\"tags\":{\"b\":2}}\n");

    /* Soft delete: gone for reads, the row stays. */
    expect_ok(RUN("obj", "delete", s), "");
    expect_fail(RUN("obj", "get", s), "", s);
    expect_fail(RUN("obj", "update", s, "{\"n\":3}"), "", s);
    expect_fail(RUN("obj", "delete", s), "", s);
    expect_sql(master_of_shard(id_shard(id)), "1\n",
               "SELECT COUNT(*) FROM db%05u.pins WHERE local_id = %" PRIu64, id_shard(id),
               id_local(id));
    /* Hard delete removes the row; twice is "not found". */
    expect_ok(RUN("obj", "delete", s, "--hard"), "");
    expect_sql(master_of_shard(id_shard(id)), "0\n",
               "SELECT COUNT(*) FROM db%05u.pins WHERE local_id = %" PRIu64, id_shard(id),
               id_local(id));
    expect_fail(RUN("obj", "delete", "--hard", s), "", s);
    expect_fail(RUN("obj", "get", s), "", s);
}
END_TEST

START_TEST(obj_exact_not_found_line)
{
    uint64_t id = CREATE("pins", "{}");
    char want[100];

    expect_ok(RUN("obj", "delete", idstr(id), "--hard"), "");
    run_result r = RUN("obj", "get", idstr(id));
    snprintf(want, sizeof want, "shardctl: object %s not found\n", idstr(id));
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "");
    ck_assert_str_eq(r.err, want);
    run_free(&r);
}
END_TEST

START_TEST(obj_json_is_one_line)
{
    /* Pretty-printed input comes back on one line (newlines are only ever
     * whitespace between JSON tokens). */
    uint64_t id = CREATE("pins", "{\"a\": 1,\n \"b\": [1, 2]\n}");
    expect_ok(RUN("obj", "get", idstr(id)), "{\"a\": 1,  \"b\": [1, 2] }\n");
    /* Unicode and escapes pass through untouched. */
    id = CREATE("pins", "{\"t\":\"caf\xc3\xa9 \\\"q\\\" \\n\"}");
    expect_ok(RUN("obj", "get", idstr(id)), "{\"t\":\"caf\xc3\xa9 \\\"q\\\" \\n\"}\n");
}
END_TEST

START_TEST(obj_type_by_name_and_number)
{
    uint64_t b1 = CREATE("boards", "{\"k\":\"by name\"}");
    uint64_t b2 = CREATE("2", "{\"k\":\"by number\"}");
    uint64_t u = CREATE("users", "{}");

    ck_assert_uint_eq(id_type(b1), 2);
    ck_assert_uint_eq(id_type(b2), 2);
    ck_assert_uint_eq(id_type(u), 3);
    expect_ok(RUN("obj", "get", idstr(b1)), "{\"k\":\"by name\"}\n");
    expect_ok(RUN("obj", "get", idstr(b2)), "{\"k\":\"by number\"}\n");
    /* Leading zeros are still the number 2. */
    ck_assert_uint_eq(id_type(CREATE("002", "{}")), 2);
}
END_TEST

START_TEST(obj_placement)
{
    /* --shard S puts it on S, whichever pair serves S. */
    for (unsigned s = 0; s < ID_SHARDS; s += 5) {
        char shard[8];
        snprintf(shard, sizeof shard, "%u", s);
        uint64_t id = CREATE("pins", "{\"on\":1}", "--shard", shard);
        ck_assert_uint_eq(id_shard(id), s);
        expect_sql(master_of_shard(s), "{\"on\":1}\n",
                   "SELECT data FROM db%05u.pins WHERE local_id = %" PRIu64, s, id_local(id));
    }
    /* --shard=S spelling, and the shard after the pair boundary. */
    ck_assert_uint_eq(id_shard(CREATE("pins", "{}", "--shard=4")), 4);

    /* --near ID: the same shard as ID, for any type. */
    uint64_t anchor = CREATE("boards", "{}", "--shard", "6");
    for (int i = 0; i < 3; i++) {
        uint64_t near = CREATE("pins", "{\"near\":true}", "--near", idstr(anchor));
        ck_assert_uint_eq(id_shard(near), 6);
        ck_assert_uint_eq(id_type(near), 1);
    }
    anchor = CREATE("users", "{}", "--shard", "1");
    char opt[40];
    snprintf(opt, sizeof opt, "--near=%s", idstr(anchor));
    ck_assert_uint_eq(id_shard(CREATE("2", "{}", opt)), 1);
    /* The anchor need not exist: only its shard counts. */
    ck_assert_uint_eq(id_shard(CREATE("pins", "{}", "--near", idstr(compose(7, 1, 999999)))),
                      7);

    /* Without either: only open shards, and (over 40 objects) more than one. */
    unsigned seen = 0;
    for (int i = 0; i < 40; i++) {
        uint64_t id = CREATE("pins", "{}");
        ck_assert_uint_lt(id_shard(id), ID_SHARDS);
        seen |= 1u << id_shard(id);
    }
    ck_assert_msg(seen & (seen - 1), "40 objects all went to one shard (mask 0x%x)", seen);
}
END_TEST

START_TEST(obj_get_many)
{
    uint64_t a = CREATE("pins", "{\"a\":1}", "--shard", "0");
    uint64_t b = CREATE("boards", "{\"b\":2}", "--shard", "7");
    uint64_t c = CREATE("users", "{\"c\":3}", "--shard", "3");
    uint64_t gone = CREATE("pins", "{\"gone\":1}", "--shard", "5");
    uint64_t m1 = compose(2, 1, 68719476735u), m2 = compose(6, 3, 12345678);
    char want[200];

    expect_ok(RUN("obj", "delete", idstr(gone)), "");
    /* Every one found: in the order asked, duplicates repeated. */
    expect_ok(RUN("obj", "get", idstr(b), idstr(a), idstr(c), idstr(a)),
              "{\"b\":2}\n{\"a\":1}\n{\"c\":3}\n{\"a\":1}\n");
    /* Missing ones: the found ones still printed, one line naming the rest. */
    run_result r = RUN("obj", "get", idstr(a), idstr(m1), idstr(b), idstr(gone));
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "{\"a\":1}\n{\"b\":2}\n");
    snprintf(want, sizeof want, "shardctl: objects %s, %s not found\n", idstr(m1),
             idstr(gone));
    ck_assert_str_eq(r.err, want);
    run_free(&r);

    r = RUN("obj", "get", idstr(m2), idstr(c));
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "{\"c\":3}\n");
    snprintf(want, sizeof want, "shardctl: object %s not found\n", idstr(m2));
    ck_assert_str_eq(r.err, want);
    run_free(&r);

    expect_fail(RUN("obj", "get", idstr(m1), idstr(m2)), "", idstr(m2));

    /* A valid ID whose shard no range serves is bad input (exit 2); the
     * objects found are still printed, and the error is one clean line. */
    uint64_t far = compose(100, 1, 1);
    expect_usage(RUN("obj", "get", idstr(far)), "100");
    r = RUN("obj", "get", idstr(a), idstr(far));
    ck_assert_int_eq(r.status, 2);
    ck_assert_str_eq(r.out, "{\"a\":1}\n");
    snprintf(want, sizeof want, "shardctl: ID %s is on a shard that no range of the map "
             "serves\n", idstr(far));
    ck_assert_str_eq(r.err, want);
    run_free(&r);
    r = RUN("obj", "get", idstr(far), idstr(m1));
    ck_assert_int_eq(r.status, 2);
    ck_assert_str_eq(r.out, "");
    snprintf(want, sizeof want, "shardctl: ID %s is on a shard that no range of the map "
             "serves; object %s not found\n", idstr(far), idstr(m1));
    ck_assert_str_eq(r.err, want);
    run_free(&r);
    expect_usage(RUN("obj", "update", idstr(far), "{}"), "100");
    expect_usage(RUN("obj", "delete", idstr(far)), "100");
    expect_usage(RUN("obj", "delete", idstr(far), "--hard"), "100");
    expect_usage(RUN("obj", "create", "pins", "{}", "--near", idstr(far)), "100");
}
END_TEST

START_TEST(obj_bad_input)
{
    uint64_t id = CREATE("pins", "{\"keep\":1}");
    IDBUF(s, id);
    IDBUF(unregistered, compose(1, 9, 1));

    /* JSON that is not an object: nothing is written. */
    expect_usage(RUN("obj", "create", "pins", "{\"a\":"), "JSON");
    expect_usage(RUN("obj", "create", "pins", "not json"), "JSON");
    expect_usage(RUN("obj", "create", "pins", ""), "JSON");
    expect_usage(RUN("obj", "create", "pins", "[1,2]"), "object");
    expect_usage(RUN("obj", "create", "pins", "\"text\""), "object");
    expect_usage(RUN("obj", "create", "pins", "42"), "object");
    expect_usage(RUN("obj", "create", "pins", "{\"a\":1,\"a\":2}"), "JSON");
    /* Types: unknown names, unregistered or out-of-range numbers. */
    expect_usage(RUN("obj", "create", "pinz", "{}"), "pinz");
    expect_usage(RUN("obj", "create", "9", "{}"), "9");
    expect_usage(RUN("obj", "create", "0", "{}"), "0");
    expect_usage(RUN("obj", "create", "1024", "{}"), "1024");
    expect_usage(RUN("obj", "create", "4294967297", "{}"), "4294967297");
    expect_usage(RUN("obj", "create", "1x", "{}"), "1x");
    /* Placement. */
    expect_usage(RUN("obj", "create", "pins", "{}", "--shard", "8"), "8");
    expect_usage(RUN("obj", "create", "pins", "{}", "--shard", "65536"), "65536");
    expect_usage(RUN("obj", "create", "pins", "{}", "--shard", "abc"), "abc");
    expect_usage(RUN("obj", "create", "pins", "{}", "--shard", "-1"), "--shard");
    expect_usage(RUN("obj", "create", "pins", "{}", "--shard", ""), "--shard");
    expect_usage(RUN("obj", "create", "pins", "{}", "--shard"), "--shard");
    expect_usage(RUN("obj", "create", "pins", "{}", "--shard", "1", "--near", s), "--near");
    expect_usage(RUN("obj", "create", "pins", "{}", "--near", "0"), "--near");
    expect_usage(RUN("obj", "create", "pins", "{}", "--near", "abc"), "abc");
    expect_usage(RUN("obj", "create", "pins", "{}", "--hard"), "--hard");
    expect_usage(RUN("obj", "create", "pins", "{}", "--limit", "3"), "--limit");
    expect_usage(RUN("obj", "create", "pins"), "obj create");
    expect_usage(RUN("obj", "create", "pins", "{}", "{}"), "obj create");
    expect_usage(RUN("obj", "create"), "obj create");

    /* Bad IDs: no partial output even when earlier IDs are fine. */
    expect_usage(RUN("obj", "get", "abc"), "abc");
    expect_usage(RUN("obj", "get", s, "abc"), "abc");
    expect_usage(RUN("obj", "get", s, "0"), "0");
    expect_usage(RUN("obj", "get", idstr(compose(1, 0, 5))), "type");
    expect_usage(RUN("obj", "get", idstr(compose(1, 1, 5) | (UINT64_C(1) << 63))), "reserved");
    expect_usage(RUN("obj", "get", "18446744073709551616"), "18446744073709551616");
    expect_usage(RUN("obj", "get", s, unregistered), unregistered);
    expect_usage(RUN("obj", "get"), "obj get");
    expect_usage(RUN("obj", "get", s, "--hard"), "--hard");
    expect_usage(RUN("obj", "update", s, "{\"a\":"), "JSON");
    expect_usage(RUN("obj", "update", s, "[]"), "object");
    expect_usage(RUN("obj", "update", s, "null"), "object");
    expect_usage(RUN("obj", "update", "abc", "{}"), "abc");
    expect_usage(RUN("obj", "update", unregistered, "{}"), unregistered);
    expect_usage(RUN("obj", "update", s), "obj update");
    expect_usage(RUN("obj", "update", s, "{}", "{}"), "obj update");
    expect_usage(RUN("obj", "delete", "abc"), "abc");
    expect_usage(RUN("obj", "delete", unregistered, "--hard"), unregistered);
    expect_usage(RUN("obj", "delete"), "obj delete");
    expect_usage(RUN("obj", "delete", s, s), "obj delete");
    expect_usage(RUN("obj", "delete", s, "--hard=yes"), "--hard");
    expect_usage(RUN("obj", "delete", s, "--limit", "1"), "--limit");
    expect_usage(RUN("obj", "frob", s), "frob");
    expect_usage(RUN("obj"), "obj");

    /* None of it touched the object. */
    expect_ok(RUN("obj", "get", s), "{\"keep\":1}\n");
}
END_TEST

/* ------------------------------------------------------------------ */
/* Mappings                                                            */
/* ------------------------------------------------------------------ */

START_TEST(mapping_round_trip)
{
    uint64_t board = CREATE("boards", "{}", "--shard", "2");
    uint64_t p1 = CREATE("pins", "{}", "--shard", "5");
    uint64_t p2 = CREATE("pins", "{}", "--shard", "1");
    uint64_t p3 = CREATE("pins", "{}", "--shard", "7");
    IDBUF(b, board);
    char want[300];

    expect_ok(RUN("mapping", "count", "board_has_pins", b), "0\n");
    expect_ok(RUN("mapping", "list", "board_has_pins", b), "");
    expect_ok(RUN("mapping", "add", "board_has_pins", b, idstr(p1), "100"), "");
    expect_ok(RUN("mapping", "add", "board_has_pins", b, idstr(p2), "300"), "");
    expect_ok(RUN("mapping", "add", "board_has_pins", b, idstr(p3), "200"), "");
    expect_ok(RUN("mapping", "count", "board_has_pins", b), "3\n");

    /* Newest first. */
    snprintf(want, sizeof want, "%s 300\n%s 200\n%s 100\n", idstr(p2), idstr(p3), idstr(p1));
    expect_ok(RUN("mapping", "list", "board_has_pins", b), want);
    snprintf(want, sizeof want, "%s 300\n%s 200\n", idstr(p2), idstr(p3));
    expect_ok(RUN("mapping", "list", "board_has_pins", b, "--limit", "2"), want);
    snprintf(want, sizeof want, "%s 300\n", idstr(p2));
    expect_ok(RUN("mapping", "list", "--limit=1", "board_has_pins", b), want);
    /* --before is strict. */
    snprintf(want, sizeof want, "%s 200\n%s 100\n", idstr(p3), idstr(p1));
    expect_ok(RUN("mapping", "list", "board_has_pins", b, "--before", "300"), want);
    snprintf(want, sizeof want, "%s 200\n", idstr(p3));
    expect_ok(RUN("mapping", "list", "board_has_pins", b, "--before", "300", "--limit", "1"),
              want);
    snprintf(want, sizeof want, "%s 100\n", idstr(p1));
    expect_ok(RUN("mapping", "list", "board_has_pins", b, "--before=200"), want);
    expect_ok(RUN("mapping", "list", "board_has_pins", b, "--before", "100"), "");
    expect_ok(RUN("mapping", "list", "board_has_pins", b, "--before", "-5"), "");

    /* The reverse rows, on the shards of the pins. */
    snprintf(want, sizeof want, "%s 100\n", b);
    expect_ok(RUN("mapping", "list", "pin_owned_by_board", idstr(p1)), want);
    expect_ok(RUN("mapping", "count", "pin_owned_by_board", idstr(p3)), "1\n");
    expect_sql("s3", "1\n",
               "SELECT COUNT(*) FROM db00007.pin_owned_by_board WHERE from_id = %" PRIu64
               " AND to_id = %" PRIu64 " AND sequence = 200", p3, board);
    expect_sql("s1", "3\n",
               "SELECT COUNT(*) FROM db00002.board_has_pins WHERE from_id = %" PRIu64, board);

    /* Re-adding re-sequences; the count stays. */
    expect_ok(RUN("mapping", "add", "board_has_pins", b, idstr(p1), "400"), "");
    expect_ok(RUN("mapping", "count", "board_has_pins", b), "3\n");
    snprintf(want, sizeof want, "%s 400\n", idstr(p1));
    expect_ok(RUN("mapping", "list", "board_has_pins", b, "--limit", "1"), want);

    /* Remove, and remove again. */
    expect_ok(RUN("mapping", "remove", "board_has_pins", b, idstr(p3)), "");
    expect_ok(RUN("mapping", "count", "board_has_pins", b), "2\n");
    expect_ok(RUN("mapping", "count", "pin_owned_by_board", idstr(p3)), "0\n");
    expect_fail(RUN("mapping", "remove", "board_has_pins", b, idstr(p3)), "", "board_has_pins");
    snprintf(want, sizeof want, "%s 400\n%s 300\n", idstr(p1), idstr(p2));
    expect_ok(RUN("mapping", "list", "board_has_pins", b), want);
}
END_TEST

START_TEST(mapping_default_and_signed_seq)
{
    uint64_t user = CREATE("users", "{}");
    uint64_t pin = CREATE("pins", "{}");
    uint64_t pin2 = CREATE("pins", "{}");
    int64_t t0 = now_us(), t1, seq;
    uint64_t to;
    run_result r;

    /* Without SEQ: the current time in microseconds. */
    expect_ok(RUN("mapping", "add", "user_likes_pins", idstr(user), idstr(pin)), "");
    t1 = now_us();
    r = RUN("mapping", "list", "user_likes_pins", idstr(user));
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.err, "");
    ck_assert_int_eq(sscanf(r.out, "%" SCNu64 " %" SCNd64, &to, &seq), 2);
    ck_assert_uint_eq(to, pin);
    ck_assert_msg(seq >= t0 && seq <= t1, "sequence %" PRId64 " not in [%" PRId64
                  ", %" PRId64 "]", seq, t0, t1);
    ck_assert_uint_eq(count_lines(r.out), 1);
    run_free(&r);

    /* Negative sequences are sequences (older than any time). */
    expect_ok(RUN("mapping", "add", "user_likes_pins", idstr(user), idstr(pin2), "-5"), "");
    r = RUN("mapping", "list", "user_likes_pins", idstr(user), "--before", "0");
    char want[100];
    snprintf(want, sizeof want, "%s -5\n", idstr(pin2));
    expect_ok(r, want);
    /* The extreme sequences are the library's "now" and "no cursor". */
    expect_ok(RUN("mapping", "add", "user_likes_pins", idstr(user), idstr(pin2),
                  "9223372036854775806"), "");
    snprintf(want, sizeof want, "%s 9223372036854775806\n", idstr(pin2));
    expect_ok(RUN("mapping", "list", "user_likes_pins", idstr(user), "--limit", "1"), want);
    expect_usage(RUN("mapping", "add", "user_likes_pins", idstr(user), idstr(pin2),
                     "9223372036854775807"), "9223372036854775807");
    expect_usage(RUN("mapping", "add", "user_likes_pins", idstr(user), idstr(pin2),
                     "-9223372036854775808"), "-9223372036854775808");
    expect_usage(RUN("mapping", "list", "user_likes_pins", idstr(user), "--before",
                     "9223372036854775807"), "--before");
    expect_usage(RUN("mapping", "add", "user_likes_pins", idstr(user), idstr(pin2),
                     "99999999999999999999"), "99999999999999999999");
    expect_ok(RUN("mapping", "count", "user_likes_pins", idstr(user)), "2\n");
}
END_TEST

START_TEST(mapping_bad_input)
{
    IDBUF(a, CREATE("boards", "{}"));
    IDBUF(p, CREATE("pins", "{}"));

    expect_usage(RUN("mapping", "add", "nosuch", a, p), "nosuch");
    expect_usage(RUN("mapping", "list", "nosuch", a), "nosuch");
    expect_usage(RUN("mapping", "count", "nosuch", a), "nosuch");
    expect_usage(RUN("mapping", "remove", "nosuch", a, p), "nosuch");
    /* A reverse mapping is read, never written directly. */
    expect_usage(RUN("mapping", "add", "pin_owned_by_board", p, a), "reverse");
    expect_usage(RUN("mapping", "remove", "pin_owned_by_board", p, a), "reverse");
    /* IDs. */
    expect_usage(RUN("mapping", "add", "board_has_pins", "abc", p), "abc");
    expect_usage(RUN("mapping", "add", "board_has_pins", a, "0"), "TO");
    expect_usage(RUN("mapping", "list", "board_has_pins", "12x"), "12x");
    expect_usage(RUN("mapping", "count", "board_has_pins", "-3"), "FROM");
    expect_usage(RUN("mapping", "remove", "board_has_pins", a, "x"), "x");
    /* Numbers. */
    expect_usage(RUN("mapping", "add", "board_has_pins", a, p, "1.5"), "1.5");
    expect_usage(RUN("mapping", "add", "board_has_pins", a, p, "x"), "SEQ");
    expect_usage(RUN("mapping", "list", "board_has_pins", a, "--limit", "abc"), "abc");
    expect_usage(RUN("mapping", "list", "board_has_pins", a, "--limit", "0"), "--limit");
    expect_usage(RUN("mapping", "list", "board_has_pins", a, "--limit", "-1"), "--limit");
    expect_usage(RUN("mapping", "list", "board_has_pins", a, "--limit", ""), "--limit");
    expect_usage(RUN("mapping", "list", "board_has_pins", a, "--limit"), "--limit");
    expect_usage(RUN("mapping", "list", "board_has_pins", a, "--limit",
                     "99999999999999999999"), "99999999999999999999");
    expect_usage(RUN("mapping", "list", "board_has_pins", a, "--before", "soon"), "soon");
    expect_usage(RUN("mapping", "list", "board_has_pins", a, "--before", "--limit"),
                 "--before");
    /* Arguments and options. */
    expect_usage(RUN("mapping", "add", "board_has_pins", a), "mapping add");
    expect_usage(RUN("mapping", "add", "board_has_pins", a, p, "1", "2"), "mapping add");
    expect_usage(RUN("mapping", "list", "board_has_pins"), "mapping list");
    expect_usage(RUN("mapping", "count", "board_has_pins", a, p), "mapping count");
    expect_usage(RUN("mapping", "remove", "board_has_pins", a), "mapping remove");
    expect_usage(RUN("mapping", "count", "board_has_pins", a, "--limit", "1"), "--limit");
    expect_usage(RUN("mapping", "add", "board_has_pins", a, p, "--before", "1"), "--before");
    expect_usage(RUN("mapping", "frob"), "frob");
    /* A TO (or FROM) on a shard no range serves: exit 2, and nothing was
     * written, not even the forward row. */
    IDBUF(far, compose(100, 1, 1));
    expect_usage(RUN("mapping", "add", "board_has_pins", a, far), far);
    expect_usage(RUN("mapping", "add", "board_has_pins", far, p), far);
    expect_ok(RUN("mapping", "count", "board_has_pins", a), "0\n");
}
END_TEST

/* ------------------------------------------------------------------ */
/* Key-value                                                           */
/* ------------------------------------------------------------------ */

/* The mod shard of a key, as shardctl computes it (checked in unit tests). */
static unsigned modshard_of(const char *key)
{
    run_result r = RUN("modshard", "--", key);
    unsigned s;
    ck_assert_int_eq(r.status, 0);
    ck_assert_int_eq(sscanf(r.out, "%u", &s), 1);
    ck_assert_uint_lt(s, MOD_SHARDS);
    run_free(&r);
    return s;
}

START_TEST(kv_round_trip)
{
    const char *key = "alice@example.com";
    unsigned ms = modshard_of(key);

    expect_fail(RUN("kv", "get", "users_by_email", key), "", "not found");
    expect_ok(RUN("kv", "put", "users_by_email", key, "42"), "");
    expect_ok(RUN("kv", "get", "users_by_email", key), "42\n");
    expect_sql(master_of_modshard(ms), "42\n",
               "SELECT v FROM modshard%05u.users_by_email WHERE k = '%s'", ms, key);
    /* Put overwrites; tables are separate. */
    expect_ok(RUN("kv", "put", "users_by_email", key, "hello world"), "");
    expect_ok(RUN("kv", "get", "users_by_email", key), "hello world\n");
    expect_fail(RUN("kv", "get", "users_by_name", key), "", "users_by_name");
    expect_ok(RUN("kv", "put", "users_by_name", key, ""), "");
    expect_ok(RUN("kv", "get", "users_by_name", key), "\n");
    /* Keys that look like options, after --. */
    expect_ok(RUN("kv", "put", "users_by_name", "--", "-dash", "v"), "");
    expect_ok(RUN("kv", "get", "users_by_name", "--", "-dash"), "v\n");
    /* Delete, then it is gone; deleting again fails. */
    expect_ok(RUN("kv", "delete", "users_by_email", key), "");
    expect_fail(RUN("kv", "get", "users_by_email", key), "", "not found");
    expect_fail(RUN("kv", "delete", "users_by_email", key), "", "not found");
    expect_sql(master_of_modshard(ms), "0\n",
               "SELECT COUNT(*) FROM modshard%05u.users_by_email", ms);
    expect_ok(RUN("kv", "get", "users_by_name", key), "\n");
}
END_TEST

START_TEST(kv_bad_input)
{
    char longkey[1100];

    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    expect_usage(RUN("kv", "put", "nosuch", "k", "v"), "nosuch");
    expect_usage(RUN("kv", "get", "nosuch", "k"), "nosuch");
    expect_usage(RUN("kv", "delete", "nosuch", "k"), "nosuch");
    expect_usage(RUN("kv", "put", "users_by_email", longkey, "v"), "1024");
    expect_usage(RUN("kv", "put", "users_by_email", "k"), "kv put");
    expect_usage(RUN("kv", "get", "users_by_email"), "kv get");
    expect_usage(RUN("kv", "get", "users_by_email", "k", "v"), "kv get");
    expect_usage(RUN("kv", "delete", "users_by_email"), "kv delete");
    expect_usage(RUN("kv", "get", "users_by_email", "k", "--limit", "5"), "--limit");
    expect_usage(RUN("kv", "put", "users_by_email", "k", "v", "--hex"), "--hex");
    expect_usage(RUN("kv"), "kv");
}
END_TEST

/* ------------------------------------------------------------------ */
/* The map, credentials and failing servers                            */
/* ------------------------------------------------------------------ */

/* A map "file" that is a FIFO is refused at once, never waited on. */
START_TEST(map_fifo)
{
    char path[600];
    snprintf(path, sizeof path, "%s/map.fifo", harness_dir(H));
    unlink(path);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    expect_usage(run_argv(&(run_opts){1, NULL}, ARGV("--map", path, "map", "show")), "FIFO");
    expect_usage(run_argv(&(run_opts){1, NULL}, ARGV("--map", path, "obj", "get", "1")),
                 "not a regular file");
    expect_usage(run_argv(&(run_opts){1, NULL}, ARGV("--map", harness_dir(H), "map", "show")),
                 "directory");
    unlink(path);
}
END_TEST

START_TEST(map_and_credentials)
{
    char opt[600];
    uint64_t id = CREATE("pins", "{\"m\":1}");
    char want[100];

    /* --map in place of LIBSHARD_MAP. */
    snprintf(opt, sizeof opt, "--map=%s", harness_map_path(H));
    snprintf(want, sizeof want, "{\"m\":1}\n");
    expect_ok(run_argv(&(run_opts){1, NULL}, ARGV(opt, "obj", "get", idstr(id))), want);
    expect_ok(run_argv(&(run_opts){1, NULL},
                       ARGV("obj", "get", idstr(id), "--map", harness_map_path(H))), want);
    /* No map at all, a map that is not there: bad usage. */
    expect_usage(run_argv(&(run_opts){1, NULL}, ARGV("obj", "get", idstr(id))), "map");
    expect_usage(RUN("--map", "/nonexistent/map.json", "kv", "get", "users_by_email", "k"),
                 "/nonexistent/map.json");
    /* A wrong password: the server refuses (exit 1), and it is never shown. */
    expect_fail(run_argv(&(run_opts){0, "wrong-secret-7f3a9c"},
                         ARGV("obj", "get", idstr(id))), "", "denied");
    expect_fail(run_argv(&(run_opts){0, "wrong-secret-7f3a9c"},
                         ARGV("kv", "put", "users_by_email", "k", "v")), "", "denied");
}
END_TEST

/* Last: the master of pair 2 goes away (and is brought back). */
START_TEST(server_down)
{
    uint64_t a = CREATE("pins", "{\"up\":1}", "--shard", "1");
    uint64_t b = CREATE("pins", "{\"down\":1}", "--shard", "6");
    char want[100];

    ck_assert_int_eq(harness_kill(H, "s3"), 0);
    /* The pair that answers still answers; one line says what failed. */
    snprintf(want, sizeof want, "{\"up\":1}\n");
    expect_fail(RUN("obj", "get", idstr(a), idstr(b)), want, "MySQL002");
    expect_fail(RUN("obj", "get", idstr(b)), "", "MySQL002");
    expect_fail(RUN("obj", "create", "pins", "{}", "--shard", "5"), "", "MySQL002");
    expect_fail(RUN("mapping", "count", "board_has_pins", idstr(b)), "", "MySQL002");
    expect_ok(RUN("obj", "get", idstr(a)), want);

    ck_assert_int_eq(harness_restart(H, "s3"), 0);
    expect_ok(RUN("obj", "get", idstr(b)), "{\"down\":1}\n");
}
END_TEST

static Suite *shardctl_suite(void)
{
    Suite *s = suite_create("server_shardctl");
    TCase *tc = tcase_create("data");

    /* Generous for valgrind runs: dozens of processes per test. */
    tcase_set_timeout(tc, 300);
    /* schema_apply_twice first: the others need the schema; server_down
     * last: it kills a server. */
    tcase_add_tests(tc, TESTS(schema_apply_twice, obj_round_trip, obj_exact_not_found_line,
                              obj_json_is_one_line, obj_type_by_name_and_number, obj_placement,
                              obj_get_many, obj_bad_input, mapping_round_trip,
                              mapping_default_and_signed_seq, mapping_bad_input, kv_round_trip,
                              kv_bad_input, map_fifo, map_and_credentials, server_down));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return server_test_main("server_shardctl", &H, NPAIRS, ID_SHARDS, MOD_SHARDS, 0,
                            shardctl_suite);
}
