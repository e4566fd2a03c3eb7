/*
 * Fuzz shardctl's argument handling, linked in: the files of examples/shardctl/ are
 * compiled with -Dmain=shardctl_main -Dexit=shardctl_exit and called like
 * a process would be, with stdout and stderr on /dev/null.
 *
 * Input: byte 0 picks the command words (only commands that need no
 * server), byte 1 how the map is given, the rest is split on NUL bytes
 * into arguments. With a map, the first argument is the map file's
 * content (written to a temporary file named by --map). Arguments that
 * would name another map (--map...) are dropped, and LIBSHARD_MAP is
 * unset, so no server or foreign file is ever touched.
 *
 * Checked: no crash, leak or exit(); the exit status is 0, 1 or 2; for
 * the plain shapes "check" and "id decode ID" it matches the library.
 */
#include "fuzz.h"

#include <fcntl.h>
#include <libshard.h>
#include <sanitizer/common_interface_defs.h>
#include <unistd.h>

int shardctl_main(int argc, char **argv);
_Noreturn void shardctl_exit(int status);

static int saved_out = -1, saved_err = -1, devnull = -1;
static char map_path[256];

/* Where shardctl's exit() calls land: a process would have ended here. */
_Noreturn void shardctl_exit(int status)
{
    dup2(saved_out, STDOUT_FILENO);
    dup2(saved_err, STDERR_FILENO);
    fprintf(stderr, "shardctl called exit(%d): commands must return their status\n",
            status);
    abort();
}

static void remove_map(void)
{
    if (map_path[0])
        unlink(map_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *tmp = getenv("TMPDIR");
    int fd;

    (void)argc;
    (void)argv;
    unsetenv("LIBSHARD_MAP");
    saved_out = dup(STDOUT_FILENO);
    saved_err = dup(STDERR_FILENO);
    devnull = open("/dev/null", O_WRONLY);
    snprintf(map_path, sizeof map_path, "%s/fuzz-shardctl-map-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    fd = mkstemp(map_path);
    if (saved_out < 0 || saved_err < 0 || devnull < 0 || fd < 0) {
        perror("fuzz_shardctl: setup");
        abort();
    }
    close(fd);
    atexit(remove_map);
    /* Sanitizer reports must still be seen while stderr is /dev/null. */
    __sanitizer_set_report_fd((void *)(intptr_t)saved_err);
    return 0;
}

static void write_map(const char *text)
{
    int fd = open(map_path, O_WRONLY | O_TRUNC);
    size_t len = strlen(text);

    CHECK(fd >= 0, "cannot open %s", map_path);
    CHECK(write(fd, text, len) == (ssize_t)len, "cannot write %s", map_path);
    close(fd);
}

static int run_shardctl(int argc, char **argv)
{
    int rc;

    fflush(stdout);
    fflush(stderr);
    dup2(devnull, STDOUT_FILENO);
    dup2(devnull, STDERR_FILENO);
    rc = shardctl_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, STDOUT_FILENO);
    dup2(saved_err, STDERR_FILENO);
    return rc;
}

static const char *const words[][2] = {
    {"id", "decode"}, {"id", "encode"}, {"modshard", NULL}, {"check", NULL},
    {"id", NULL},     {"modshard", "--hex"}, {"check", "--help"}, {"nosuch", NULL},
};
#define NWORDS (sizeof words / sizeof words[0])

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader r = {data, size};
    unsigned pick = (unsigned)(fuzz_take(&r, 1) % NWORDS);
    unsigned how = (unsigned)fuzz_take(&r, 1);
    int with_map = how & 1, map_equals = how & 2, map_last = how & 4;
    char *buf = fuzz_strndup(r.p, r.left), *map_text = NULL, *opt = NULL;
    char **argv = calloc(r.left + 8, sizeof *argv);
    int argc = 0, nargs = 0, rc;
    char *tok, *end;

    if (!buf || !argv) {
        free(buf);
        free(argv);
        return 0;
    }
    argv[argc++] = "shardctl";
    if (with_map && !map_last && !map_equals) {
        argv[argc++] = "--map";
        argv[argc++] = map_path;
    }
    argv[argc++] = (char *)words[pick][0];
    if (words[pick][1])
        argv[argc++] = (char *)words[pick][1];
    /* Split on the NUL bytes (a trailing empty part is an argument too). */
    for (tok = buf, end = buf + r.left; r.left && tok <= end; tok += strlen(tok) + 1) {
        if (with_map && !map_text) {
            map_text = tok;
            continue;
        }
        if (strncmp(tok, "--map", 5) == 0)
            continue;
        argv[argc++] = tok;
        nargs++;
    }
    if (with_map) {
        write_map(map_text ? map_text : "");
        if (map_equals) {
            opt = malloc(strlen(map_path) + 7);
            CHECK(opt, "out of memory");
            sprintf(opt, "--map=%s", map_path);
            argv[argc++] = opt;
        } else if (map_last) {
            argv[argc++] = "--map";
            argv[argc++] = map_path;
        }
    }
    argv[argc] = NULL;

    rc = run_shardctl(argc, argv);
    CHECK(rc == 0 || rc == 1 || rc == 2, "exit status %d", rc);

    /* Plain shapes: the status says what the library says. */
    if (pick == 3 && with_map && nargs == 0) {
        shard_map *m = NULL;
        int prc = shard_map_parse(&m, map_text ? map_text : "",
                                  map_text ? strlen(map_text) : 0);
        shard_map_free(m);
        CHECK(rc == (prc == 0 ? 0 : 2), "check: status %d, parse %d", rc, prc);
    }
    if (pick == 0 && nargs == 1 && !with_map) {
        const char *id = argv[argc - 1];
        uint64_t v;
        int is_opt = id[0] == '-' && id[1] && !(id[1] >= '0' && id[1] <= '9');
        if (!is_opt && strcmp(id, "--") != 0)
            CHECK(rc == (shard_id_parse(id, &v) == 0 ? 0 : 2), "id decode '%s': %d", id,
                  rc);
    }
    free(opt);
    free(argv);
    free(buf);
    return 0;
}
