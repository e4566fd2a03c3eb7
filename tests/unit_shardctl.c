/*
 * Unit tests (no server) for the shardctl commands that need no server:
 * id decode/encode, modshard and check (shardctl(1)).
 *
 * shardctl is run as a separate process ($SHARDCTL, default build/shardctl),
 * with stdout, stderr and the exit status captured apart. Expected IDs are
 * composed here and expected mod shards come from Python's hashlib, never
 * from libshard.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"
#include "run_cmd.h"

/* ------------------------------------------------------------------ */
/* Running shardctl                                                    */
/* ------------------------------------------------------------------ */

/* How the child's environment and stdout are set up. */
typedef struct run_opts {
    const char *map_env; /* LIBSHARD_MAP value; NULL: unset */
    int stdout_full;     /* stdout is /dev/full (writes fail with ENOSPC) */
} run_opts;

/* Runs shardctl with argv (NULL-terminated, without the program name). */
static run_result run_argv(const run_opts *o, const char *const *argv)
{
    run_spec s = {.map_env = o->map_env, .stdout_full = o->stdout_full, .timeout_s = 30};
    return run_cmd(&s, argv);
}

/* shardctl with LIBSHARD_MAP unset. */
#define RUN(...) run_argv(&(run_opts){NULL, 0}, ARGV(__VA_ARGS__))
/* shardctl with LIBSHARD_MAP set to env. */
#define RUN_ENV(env, ...) run_argv(&(run_opts){(env), 0}, ARGV(__VA_ARGS__))

/*
 * Bad usage or input: exit 2, nothing on stdout, exactly one non-empty line
 * on stderr, which mentions `mention` when given.
 */
static void expect_usage(run_result r, const char *mention)
{
    ck_assert_msg(r.status == 2, "exit status %d (want 2), stdout: \"%s\", stderr: \"%s\"",
                  r.status, r.out, r.err);
    ck_assert_msg(r.out[0] == '\0', "stdout not empty: \"%s\"", r.out);
    ck_assert_msg(count_lines(r.err) == 1 && r.err[strlen(r.err) - 1] == '\n' &&
                      strlen(r.err) > 10,
                  "stderr is not exactly one line: \"%s\"", r.err);
    if (mention)
        ck_assert_msg(strstr(r.err, mention) != NULL, "stderr \"%s\" does not mention \"%s\"",
                      r.err, mention);
    run_free(&r);
}

/* ------------------------------------------------------------------ */
/* Temporary map files                                                 */
/* ------------------------------------------------------------------ */

/* The example map of libshard(3) ("The shard map"), with 16 mod shards. */
static const char example_map[] =
    "{\n"
    "  \"version\": 7,\n"
    "  \"open_shards\": 64,\n"
    "  \"database_format\": \"db%05d\",\n"
    "  \"credentials\": {\"user\": \"app\", \"password_env\": \"LIBSHARD_PASSWORD\"},\n"
    "  \"objects\": {\"pins\": 1, \"boards\": 2, \"users\": 3},\n"
    "  \"mappings\": {\"board_has_pins\": {\"reverse\": \"pin_owned_by_board\"},\n"
    "               \"user_likes_pins\": {}},\n"
    "  \"pairs\": {\n"
    "    \"MySQL001\": {\"master\": \"127.0.0.1:33061\", \"standby\": \"127.0.0.1:33062\"},\n"
    "    \"MySQL002\": {\"master\": \"unix:/var/run/mysqld/b.sock\", \"standby\": "
    "\"127.0.0.1:33064\"}\n"
    "  },\n"
    "  \"id_shards\": [\n"
    "    {\"range\": [0, 31],  \"pair\": \"MySQL001\"},\n"
    "    {\"range\": [32, 63], \"pair\": \"MySQL002\"}\n"
    "  ],\n"
    "  \"mod_shards\": {\n"
    "    \"count\": 16,\n"
    "    \"database_format\": \"modshard%05d\",\n"
    "    \"tables\": [\"users_by_email\", \"users_by_name\"],\n"
    "    \"ranges\": [{\"range\": [0, 15], \"pair\": \"MySQL001\"}]\n"
    "  }\n"
    "}\n";

/* The same map with overlapping id_shards ranges: invalid. */
static const char overlap_map[] =
    "{\"version\": 7, \"open_shards\": 64, \"database_format\": \"db%05d\",\n"
    " \"credentials\": {\"user\": \"app\", \"password_env\": \"LIBSHARD_PASSWORD\"},\n"
    " \"objects\": {\"pins\": 1},\n"
    " \"pairs\": {\"MySQL001\": {\"master\": \"127.0.0.1:33061\", "
    "\"standby\": \"127.0.0.1:33062\"}},\n"
    " \"id_shards\": [{\"range\": [0, 31], \"pair\": \"MySQL001\"},\n"
    "               {\"range\": [31, 63], \"pair\": \"MySQL001\"}]}\n";

/* A valid map without a mod_shards section. */
static const char nomod_map[] =
    "{\"version\": 1, \"open_shards\": 4, \"database_format\": \"db%05d\",\n"
    " \"credentials\": {\"user\": \"app\", \"password_env\": \"LIBSHARD_PASSWORD\"},\n"
    " \"objects\": {\"pins\": 1},\n"
    " \"pairs\": {\"MySQL001\": {\"master\": \"127.0.0.1:33061\", "
    "\"standby\": \"127.0.0.1:33062\"}},\n"
    " \"id_shards\": [{\"range\": [0, 3], \"pair\": \"MySQL001\"}]}\n";

static char tmpdir[256];
static char map_path[300], overlap_path[300], nomod_path[300], missing_path[300];

static void write_file(char *path, size_t size, const char *name, const char *text)
{
    FILE *f;
    snprintf(path, size, "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot create %s: %s", path, strerror(errno));
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
}

static void maps_setup(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/unit_shardctl.XXXXXX", t && *t ? t : "/tmp");
    ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
    write_file(map_path, sizeof map_path, "map.json", example_map);
    write_file(overlap_path, sizeof overlap_path, "overlap.json", overlap_map);
    write_file(nomod_path, sizeof nomod_path, "nomod.json", nomod_map);
    snprintf(missing_path, sizeof missing_path, "%s/missing.json", tmpdir);
}

static void maps_teardown(void)
{
    unlink(map_path);
    unlink(overlap_path);
    unlink(nomod_path);
    rmdir(tmpdir);
}

/* ------------------------------------------------------------------ */
/* id decode / encode                                                  */
/* ------------------------------------------------------------------ */

static uint64_t compose(uint64_t shard, uint64_t type, uint64_t local)
{
    return (shard << 46) | (type << 36) | local;
}

START_TEST(decode_plain)
{
    char a[32], b[32], want[256];
    uint64_t ida = compose(3429, 1, 7075733), idb = compose(65535, 1023, 68719476735u);

    snprintf(a, sizeof a, "%" PRIu64, ida);
    snprintf(b, sizeof b, "%" PRIu64, idb);
    ck_assert_str_eq(a, "241294492511762325");
    expect_ok(RUN("id", "decode", a), "241294492511762325 shard=3429 type=1 local=7075733\n");

    snprintf(want, sizeof want,
             "%s shard=3429 type=1 local=7075733\n"
             "%s shard=65535 type=1023 local=68719476735\n"
             "68719476737 shard=0 type=1 local=1\n",
             a, b);
    expect_ok(RUN("id", "decode", a, b, "68719476737"), want);
}
END_TEST

START_TEST(decode_json)
{
    char b[32], want[256];

    snprintf(b, sizeof b, "%" PRIu64, compose(65535, 1023, 68719476735u));
    snprintf(want, sizeof want,
             "{\"id\":241294492511762325,\"shard\":3429,\"type\":1,\"local\":7075733}\n"
             "{\"id\":%s,\"shard\":65535,\"type\":1023,\"local\":68719476735}\n",
             b);
    expect_ok(RUN("id", "decode", "--json", "241294492511762325", b), want);
    /* The option may come anywhere. */
    expect_ok(RUN("id", "decode", "241294492511762325", "--json"),
              "{\"id\":241294492511762325,\"shard\":3429,\"type\":1,\"local\":7075733}\n");
}
END_TEST

START_TEST(decode_rejects)
{
    char buf[32];
    const char *good = "241294492511762325";

    expect_usage(RUN("id", "decode"), NULL);
    expect_usage(RUN("id", "decode", "0"), "0");
    snprintf(buf, sizeof buf, "%" PRIu64, compose(3429, 1, 7075733) | (UINT64_C(1) << 62));
    expect_usage(RUN("id", "decode", buf), buf);
    snprintf(buf, sizeof buf, "%" PRIu64, compose(3429, 1, 7075733) | (UINT64_C(1) << 63));
    expect_usage(RUN("id", "decode", buf), buf);
    snprintf(buf, sizeof buf, "%" PRIu64, compose(3429, 0, 7075733));
    expect_usage(RUN("id", "decode", buf), buf);
    snprintf(buf, sizeof buf, "%" PRIu64, compose(3429, 1, 0));
    expect_usage(RUN("id", "decode", buf), buf);
    expect_usage(RUN("id", "decode", "abc"), "abc");
    expect_usage(RUN("id", "decode", "12abc"), "12abc");
    expect_usage(RUN("id", "decode", "0x10"), "0x10");
    expect_usage(RUN("id", "decode", ""), NULL);
    expect_usage(RUN("id", "decode", "-1"), NULL);
    expect_usage(RUN("id", "decode", "100000000000000000000"), "100000000000000000000");

    /* One bad ID among good ones: nothing at all on stdout. */
    expect_usage(RUN("id", "decode", good, good, "7", good), "7");
    expect_usage(RUN("id", "decode", "--json", good, "abc"), "abc");
    expect_usage(RUN("id", "decode", "abc", good), "abc");
}
END_TEST

START_TEST(encode_ok)
{
    expect_ok(RUN("id", "encode", "3429", "1", "7075733"), "241294492511762325\n");
    expect_ok(RUN("id", "encode", "0", "1", "1"), "68719476737\n");
    expect_ok(RUN("id", "encode", "65535", "1023", "68719476735"), "4611686018427387903\n");
}
END_TEST

START_TEST(encode_rejects)
{
    expect_usage(RUN("id", "encode"), NULL);
    expect_usage(RUN("id", "encode", "1", "2"), NULL);
    expect_usage(RUN("id", "encode", "1", "2", "3", "4"), NULL);
    expect_usage(RUN("id", "encode", "65536", "1", "1"), "65536");
    expect_usage(RUN("id", "encode", "0", "0", "1"), "type");
    expect_usage(RUN("id", "encode", "0", "1024", "1"), "1024");
    expect_usage(RUN("id", "encode", "0", "1", "0"), "local");
    expect_usage(RUN("id", "encode", "0", "1", "68719476736"), "68719476736");
    /* Values that would wrap to valid ones if truncated to 32 or 64 bits. */
    expect_usage(RUN("id", "encode", "4294967296", "1", "1"), "4294967296");
    expect_usage(RUN("id", "encode", "1", "4294967297", "1"), "4294967297");
    expect_usage(RUN("id", "encode", "1", "1", "18446744073709551617"),
                 "18446744073709551617");
    expect_usage(RUN("id", "encode", "x", "1", "1"), "x");
    expect_usage(RUN("id", "encode", "1", "1", "5z"), "5z");
    expect_usage(RUN("id", "encode", "1", "", "1"), NULL);
    expect_usage(RUN("id", "encode", "1", "1", "-1"), NULL);
}
END_TEST

/* ------------------------------------------------------------------ */
/* modshard                                                            */
/* ------------------------------------------------------------------ */

/*
 * Expected shards, produced with Python 3, independently of libshard:
 *   import hashlib
 *   def m(k, n): return int.from_bytes(hashlib.md5(k).digest(), 'big') % n
 *   for k in [b'1.2.3.4', b'user@example.com', b'a', b'', b'a\0b', b'\0',
 *             b'\x00\xff', b'-k']: print(k, m(k, 4096), m(k, 16), m(k, 65536), m(k, 1000))
 */
START_TEST(modshard_default_4096)
{
    expect_ok(RUN("modshard", "1.2.3.4"), "1537\n");
    expect_ok(RUN("modshard", "1.2.3.4", "user@example.com", "a"), "1537\n2479\n1633\n");
    expect_ok(RUN("modshard", ""), "638\n");
    /* After "--", keys may start with a dash. */
    expect_ok(RUN("modshard", "--", "-k"), "173\n");
}
END_TEST

START_TEST(modshard_shards_option)
{
    expect_ok(RUN("modshard", "--shards", "16", "1.2.3.4", "user@example.com"), "1\n15\n");
    expect_ok(RUN("modshard", "--shards", "65536", "1.2.3.4", "a"), "30209\n9825\n");
    expect_ok(RUN("modshard", "--shards", "1000", "1.2.3.4"), "929\n");
    expect_ok(RUN("modshard", "--shards", "1", "1.2.3.4", "a"), "0\n0\n");
    expect_ok(RUN("modshard", "--shards=16", "a"), "1\n");
}
END_TEST

START_TEST(modshard_hex)
{
    /* "1.2.3.4" spelled in hex is the same key. */
    expect_ok(RUN("modshard", "--hex", "312e322e332e34"), "1537\n");
    expect_ok(RUN("modshard", "--hex", "00", "00ff", "00FF", "610062"),
              "3953\n3584\n3584\n155\n");
    expect_ok(RUN("modshard", "--hex", "--shards", "65536", "610062", "61"),
              "12443\n9825\n");
    expect_ok(RUN("modshard", "--hex", ""), "638\n");
    expect_usage(RUN("modshard", "--hex", "0"), "0");
    expect_usage(RUN("modshard", "--hex", "0g"), "0g");
    expect_usage(RUN("modshard", "--hex", "00", "zz"), "zz");
}
END_TEST

START_TEST(modshard_map_count)
{
    /* The map says 16 mod shards. */
    expect_ok(RUN("--map", map_path, "modshard", "1.2.3.4", "user@example.com", "a"),
              "1\n15\n1\n");
    expect_ok(RUN_ENV(map_path, "modshard", "1.2.3.4", "user@example.com"), "1\n15\n");
    /* --shards wins over the map. */
    expect_ok(RUN("--map", map_path, "modshard", "--shards", "4096", "1.2.3.4"), "1537\n");
    /* A map without mod shards: the default 4096. */
    expect_ok(RUN("--map", nomod_path, "modshard", "1.2.3.4"), "1537\n");
    /* A map that cannot be read is an error, not a silent default. */
    expect_usage(RUN("--map", missing_path, "modshard", "1.2.3.4"), "missing.json");
    expect_usage(RUN("--map", overlap_path, "modshard", "1.2.3.4"), "id_shards");
}
END_TEST

START_TEST(modshard_rejects)
{
    expect_usage(RUN("modshard"), NULL);
    expect_usage(RUN("modshard", "--shards", "16"), NULL);
    expect_usage(RUN("modshard", "--shards", "0", "a"), "--shards");
    expect_usage(RUN("modshard", "--shards", "65537", "a"), "65537");
    expect_usage(RUN("modshard", "--shards", "4294967312", "a"), "4294967312");
    expect_usage(RUN("modshard", "--shards", "abc", "a"), "abc");
    expect_usage(RUN("modshard", "--shards", "", "a"), NULL);
    expect_usage(RUN("modshard", "--shards", "-1", "a"), NULL);
    expect_usage(RUN("modshard", "a", "--shards"), "--shards");
    expect_usage(RUN("modshard", "--bogus", "a"), "--bogus");
}
END_TEST

/* ------------------------------------------------------------------ */
/* check                                                               */
/* ------------------------------------------------------------------ */

static void expect_summary(run_result r)
{
    ck_assert_msg(r.status == 0, "exit status %d, stderr: %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    ck_assert_msg(count_lines(r.out) == 1 && strlen(r.out) > 10,
                  "not a one-line summary: \"%s\"", r.out);
    run_free(&r);
}

START_TEST(check_valid)
{
    char opt[320];

    expect_summary(RUN("--map", map_path, "check"));
    expect_summary(RUN("check", "--map", map_path));
    snprintf(opt, sizeof opt, "--map=%s", nomod_path);
    expect_summary(RUN(opt, "check"));
    /* LIBSHARD_MAP in place of --map, and --map over LIBSHARD_MAP. */
    expect_summary(RUN_ENV(map_path, "check"));
    expect_summary(RUN_ENV(overlap_path, "--map", map_path, "check"));
}
END_TEST

START_TEST(check_rejects)
{
    expect_usage(RUN("--map", overlap_path, "check"), "id_shards");
    expect_usage(RUN_ENV(overlap_path, "check"), "id_shards");
    expect_usage(RUN("--map", missing_path, "check"), "missing.json");
    expect_usage(RUN_ENV(missing_path, "check"), "missing.json");
    expect_usage(RUN("check"), NULL);
    expect_usage(RUN_ENV("", "check"), NULL);
    expect_usage(RUN("--map", map_path, "check", "extra"), NULL);
    expect_usage(RUN("--map"), "--map");
    /* failover's --wait is checked before any server is asked (the map's
     * servers do not exist). */
    setenv("LIBSHARD_PASSWORD", "unused", 1);
    expect_usage(RUN("--map", map_path, "failover", "MySQL001", "--wait", "3601"), "--wait");
    expect_usage(RUN("--map", map_path, "failover", "MySQL001", "--wait", "ten"), "--wait");
    expect_usage(RUN("--map", map_path, "move", "status", "--wait", "1"), "--wait");
    unsetenv("LIBSHARD_PASSWORD");
}
END_TEST

/* ------------------------------------------------------------------ */
/* Usage errors and output failures                                    */
/* ------------------------------------------------------------------ */

START_TEST(usage_errors)
{
    expect_usage(RUN("frobnicate"), "frobnicate");
    expect_usage(run_argv(&(run_opts){NULL, 0}, (const char *const[]){NULL}), NULL);
    expect_usage(RUN("id"), NULL);
    expect_usage(RUN("id", "frob", "1"), "frob");
    expect_usage(RUN("--no-such-option", "check"), "--no-such-option");
}
END_TEST

START_TEST(help_on_stdout)
{
    run_result r = RUN("--help");
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.err, "");
    ck_assert_ptr_nonnull(strstr(r.out, "modshard"));
    run_free(&r);
}
END_TEST

/* help lists every command on one line; help CMD lists every flag of the
 * command (checked against shardctl(1) by tests/doc_check.sh); a mistake
 * is worded the same way with and without help. */
START_TEST(help_per_command)
{
    static const char *const want[][3] = {
        {"move revert", "--threads", NULL},
        {"move finish", "--threads", NULL},
        {"import", "--from-password-env", "--near"},
        {"obj get", "--legacy", "--connect-timeout"},
        {"map show", "--pretty", "--map-version"},
        {"move", "--reverse-window", "--max-rows-per-second"},
    };
    run_result r = RUN("help"), r2;

    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "\n  map show [--pretty] [--map-version N]  "));
    ck_assert_ptr_nonnull(strstr(r.out, "\n  completion bash  "));
    run_free(&r);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char cmd[40], *sp;
        snprintf(cmd, sizeof cmd, "%s", want[i][0]);
        sp = strchr(cmd, ' ');
        if (sp)
            *sp++ = '\0';
        r = sp ? RUN("help", cmd, sp) : RUN("help", cmd);
        ck_assert_int_eq(r.status, 0);
        for (int k = 1; k < 3 && want[i][k]; k++)
            ck_assert_msg(strstr(r.out, want[i][k]), "help %s lacks %s: %s", want[i][0],
                          want[i][k], r.out);
        r2 = sp ? RUN(cmd, sp, "--help") : RUN(cmd, "--help");
        ck_assert_str_eq(r2.out, r.out);
        run_free(&r);
        run_free(&r2);
    }
    r = RUN("help", "bogus");
    r2 = RUN("bogus");
    ck_assert_int_eq(r.status, 2);
    ck_assert_int_eq(r2.status, 2);
    ck_assert_str_eq(r.err, r2.err);
    ck_assert_ptr_nonnull(strstr(r.err, "unknown command 'bogus'"));
    run_free(&r);
    run_free(&r2);
    r = RUN("help", "obj", "frob");
    r2 = RUN("obj", "frob", "1");
    ck_assert_str_eq(r.err, r2.err);
    run_free(&r);
    run_free(&r2);
}
END_TEST

/* The completion script comes from the same tables. */
START_TEST(completion_bash)
{
    run_result r = RUN("completion", "bash");

    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "complete -F _shardctl shardctl"));
    ck_assert_ptr_nonnull(strstr(r.out, "'move revert'|'move revert '*) words='' opts='--map --help --user"));
    ck_assert_ptr_nonnull(strstr(r.out, "--reverse-window"));
    ck_assert_ptr_nonnull(strstr(r.out, "'obj') words='create get update delete '"));
    run_free(&r);
    expect_usage(RUN("completion", "zsh"), "bash");
}
END_TEST

/* map show: canonical JSON on one line; --pretty indents it. */
START_TEST(map_show_one_line)
{
    run_result r = RUN("--map", map_path, "map", "show"), p;

    ck_assert_int_eq(r.status, 0);
    ck_assert_uint_eq(count_lines(r.out), 1);
    ck_assert_ptr_null(strstr(r.out, ": "));
    ck_assert_ptr_nonnull(strstr(r.out, "{\""));
    p = RUN("--map", map_path, "map", "show", "--pretty");
    ck_assert_int_eq(p.status, 0);
    ck_assert_uint_gt(count_lines(p.out), 5);
    run_free(&r);
    run_free(&p);
}
END_TEST

START_TEST(write_error_fails)
{
    run_result r;

    if (access("/dev/full", W_OK) != 0)
        return; /* not Linux: nothing to test with */
    r = run_argv(&(run_opts){NULL, 1}, ARGV("id", "encode", "3429", "1", "7075733"));
    ck_assert_msg(r.status == 1, "exit status %d on a failed write", r.status);
    ck_assert_uint_eq(count_lines(r.err), 1);
    run_free(&r);
}
END_TEST

static Suite *shardctl_suite(void)
{
    Suite *s = suite_create("shardctl");
    TCase *id = tcase_create("id");
    TCase *mod = tcase_create("modshard");
    TCase *chk = tcase_create("check");
    TCase *use = tcase_create("usage");

    tcase_add_tests(id, TESTS(decode_plain, decode_json, decode_rejects, encode_ok,
                              encode_rejects));

    /* Unchecked: the files are removed even when a (forked) test fails. */
    tcase_add_unchecked_fixture(mod, maps_setup, maps_teardown);
    tcase_add_tests(mod, TESTS(modshard_default_4096, modshard_shards_option, modshard_hex,
                               modshard_map_count, modshard_rejects));

    tcase_add_unchecked_fixture(chk, maps_setup, maps_teardown);
    tcase_add_test(chk, check_valid);
    tcase_add_test(chk, check_rejects);
    tcase_add_test(chk, map_show_one_line);

    tcase_add_tests(use, TESTS(usage_errors, help_on_stdout, help_per_command, completion_bash,
                               write_error_fails));

    /* Dozens of processes per test; generous for valgrind runs. */
    TCase *all[] = {id, mod, chk, use};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        tcase_set_timeout(all[i], 120);
        suite_add_tcase(s, all[i]);
    }
    return s;
}

int main(void)
{
    return run_suite(shardctl_suite(), CK_FORK_GETENV) ? EXIT_FAILURE : EXIT_SUCCESS;
}
