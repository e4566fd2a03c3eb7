/*
 * tests/run_cmd.h: running shardctl ($SHARDCTL, default build/shardctl) as
 * a separate process from a Check test, with stdout, stderr and the exit
 * status captured apart. Shared by tests/unit_shardctl.c and
 * tests/server_shardctl.c; every function is static (each test program is
 * built on its own from its one .c file).
 */
#ifndef LIBSHARD_TESTS_RUN_CMD_H
#define LIBSHARD_TESTS_RUN_CMD_H

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Not every test program uses every helper. */
#define RUN_CMD_UTIL static __attribute__((unused))

typedef struct run_result {
    char *out;  /* everything written to stdout, NUL-terminated */
    char *err;  /* everything written to stderr */
    int status; /* exit status, or -1 when it did not exit normally */
} run_result;

/* How the child's environment and stdout are set up. */
typedef struct run_spec {
    const char *map_env;  /* LIBSHARD_MAP value; NULL: unset */
    const char *password; /* LIBSHARD_PASSWORD value; NULL: inherited */
    int stdout_full;      /* stdout is /dev/full (writes fail with ENOSPC) */
    int timeout_s;        /* fail if the child writes nothing and does not exit for this long */
} run_spec;

RUN_CMD_UTIL const char *shardctl_path(void)
{
    const char *p = getenv("SHARDCTL");
    return p && *p ? p : "build/shardctl";
}

static void buf_append(char **buf, size_t *len, size_t *cap, const char *data, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t ncap = (*cap ? *cap : 256);
        while (ncap < *len + n + 1)
            ncap *= 2;
        *buf = realloc(*buf, ncap);
        ck_assert_ptr_nonnull(*buf);
        *cap = ncap;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = '\0';
}

/* Reads both pipes to their end at once, so a full pipe never blocks the
 * child (outfd < 0: no stdout pipe, stderr alone). */
static void drain(int outfd, int errfd, int timeout_s, run_result *r)
{
    struct pollfd p[2] = {{.fd = outfd, .events = POLLIN}, {.fd = errfd, .events = POLLIN}};
    char *bufs[2] = {NULL, NULL};
    size_t len[2] = {0, 0}, cap[2] = {0, 0};
    int open_fds = 2;

    for (int i = 0; i < 2; i++)
        buf_append(&bufs[i], &len[i], &cap[i], "", 0);
    if (outfd < 0) {
        p[0].fd = -1;
        open_fds = 1;
    }
    while (open_fds > 0) {
        int ready = poll(p, 2, timeout_s * 1000);
        ck_assert_msg(ready != 0, "shardctl wrote nothing and did not exit for %d s",
                      timeout_s);
        if (ready < 0) {
            ck_assert_msg(errno == EINTR, "poll: %s", strerror(errno));
            continue;
        }
        for (int i = 0; i < 2; i++) {
            char chunk[4096];
            ssize_t n;
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            n = read(p[i].fd, chunk, sizeof chunk);
            if (n > 0) {
                buf_append(&bufs[i], &len[i], &cap[i], chunk, (size_t)n);
            } else if (n == 0 || errno != EINTR) {
                close(p[i].fd);
                p[i].fd = -1;
                open_fds--;
            }
        }
    }
    r->out = bufs[0];
    r->err = bufs[1];
}

/* Runs shardctl with argv (NULL-terminated, without the program name). */
RUN_CMD_UTIL run_result run_cmd(const run_spec *s, const char *const *argv)
{
    const char *prog = shardctl_path();
    const char *args[64];
    int outp[2] = {-1, -1}, errp[2];
    run_result r = {NULL, NULL, -1};
    int n = 0, wst;
    pid_t pid;

    ck_assert_msg(access(prog, X_OK) == 0, "cannot run %s (set SHARDCTL): %s", prog,
                  strerror(errno));
    args[n++] = prog;
    for (; *argv; argv++) {
        ck_assert_int_lt(n, 62);
        args[n++] = *argv;
    }
    args[n] = NULL;

    ck_assert(s->stdout_full || pipe(outp) == 0);
    ck_assert_int_eq(pipe(errp), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int out = s->stdout_full ? open("/dev/full", O_WRONLY) : outp[1];
        if (out < 0 || dup2(out, 1) < 0 || dup2(errp[1], 2) < 0)
            _exit(126);
        if (!s->stdout_full) {
            close(outp[0]);
            close(outp[1]);
        }
        close(errp[0]);
        close(errp[1]);
        if (s->map_env)
            setenv("LIBSHARD_MAP", s->map_env, 1);
        else
            unsetenv("LIBSHARD_MAP");
        if (s->password)
            setenv("LIBSHARD_PASSWORD", s->password, 1);
        execv(prog, (char *const *)args);
        _exit(127);
    }
    if (!s->stdout_full)
        close(outp[1]);
    close(errp[1]);
    drain(outp[0], errp[0], s->timeout_s, &r);
    while (waitpid(pid, &wst, 0) < 0)
        ck_assert_int_eq(errno, EINTR);
    r.status = WIFEXITED(wst) ? WEXITSTATUS(wst) : -1;
    ck_assert_msg(r.status != 126 && r.status != 127, "could not exec %s", prog);
    return r;
}

RUN_CMD_UTIL void run_free(run_result *r)
{
    free(r->out);
    free(r->err);
}

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

RUN_CMD_UTIL size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Success: exit 0, stdout exactly `out`, nothing on stderr. */
RUN_CMD_UTIL void expect_ok(run_result r, const char *out)
{
    ck_assert_msg(r.status == 0, "exit status %d, stderr: %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    ck_assert_str_eq(r.out, out);
    run_free(&r);
}

#endif
