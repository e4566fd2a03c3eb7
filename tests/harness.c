/*
 * tests/harness.c: see harness.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "harness.h"

#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MAX_SLOTS 16

struct harness {
    char dir[PATH_MAX];
    char map[PATH_MAX + 16];
    int slot;
};

/* What the exit/signal cleanup needs, in static storage so that a signal
 * handler can use it without malloc. */
static struct {
    volatile sig_atomic_t used;
    pid_t owner;
    char dir[PATH_MAX];
} slots[MAX_SLOTS];

static char g_script[PATH_MAX];
static char g_bash[32];
static char g_client[PATH_MAX]; /* mariadb (or mysql), for harness_sql */
static char g_dbroot[256];      /* the account servers.sh gives unix_socket auth */
static int g_inited;
static volatile sig_atomic_t g_in_cleanup;
static volatile pid_t g_child; /* the script now running, if any */

static const int fatal_sigs[] = {SIGINT,  SIGTERM, SIGHUP, SIGQUIT, SIGSEGV,
                                 SIGBUS,  SIGABRT, SIGFPE, SIGILL};

/* ------------------------------------------------------------ processes */

/* Close every fd >= 3 (in a freshly forked child, before exec), so that the
 * script and the servers it launches hold none of the test's descriptors. */
static void close_from_3(long maxfd)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, 3U, ~0U, 0U) == 0)
        return;
#endif
    for (long fd = 3; fd < maxfd; fd++)
        close((int)fd);
}

static long max_fd(void)
{
    long m = sysconf(_SC_OPEN_MAX);
    if (m < 0 || m > 65536)
        m = 65536;
    return m;
}

static int wait_status(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

/* `servers.sh stop DIR` using only async-signal-safe calls. */
static int spawn_stop_sigsafe(const char *dir, long maxfd)
{
    char *argv[] = {g_bash, g_script, (char *)"stop", (char *)dir, NULL};
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close_from_3(maxfd);
        execve(g_bash, argv, environ);
        _exit(127);
    }
    return wait_status(pid);
}

/* Run prog with argv (NULL-terminated, argv[0] included), feeding input (may
 * be NULL) on its stdin and collecting its stdout into *out (if out).
 * Returns the exit status, 128+signal, or -1. */
static int run_prog(const char *prog, const char *const argv[], const char *input, char **out)
{
    if (out)
        *out = NULL;
    int inp[2] = {-1, -1}, outp[2] = {-1, -1};
    if ((input && pipe(inp) < 0) || pipe(outp) < 0) {
        fprintf(stderr, "harness: pipe: %s\n", strerror(errno));
        if (inp[0] >= 0) {
            close(inp[0]);
            close(inp[1]);
        }
        if (out)
            *out = strdup("");
        return -1;
    }
    long maxfd = max_fd();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "harness: fork: %s\n", strerror(errno));
        if (inp[0] >= 0) {
            close(inp[0]);
            close(inp[1]);
        }
        close(outp[0]);
        close(outp[1]);
        if (out)
            *out = strdup("");
        return -1;
    }
    if (pid == 0) {
        int in_fd = input ? inp[0] : open("/dev/null", O_RDONLY);
        if (in_fd < 0 || dup2(in_fd, 0) < 0 || dup2(outp[1], 1) < 0)
            _exit(127);
        close_from_3(maxfd);
        /* default signal dispositions for the script */
        signal(SIGPIPE, SIG_DFL);
        execve(prog, (char *const *)argv, environ);
        _exit(127);
    }

    g_child = pid;
    if (input)
        close(inp[0]);
    close(outp[1]);

    struct sigaction ign, old_pipe;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old_pipe);

    size_t in_len = input ? strlen(input) : 0, in_off = 0;
    int in_fd = input ? inp[1] : -1;
    if (in_fd >= 0 && in_len == 0) {
        close(in_fd);
        in_fd = -1;
    }
    int out_fd = outp[0];
    char *buf = NULL;
    size_t len = 0, cap = 0;

    while (in_fd >= 0 || out_fd >= 0) {
        struct pollfd p[2];
        int np = 0, ii = -1, oi = -1;
        if (in_fd >= 0) {
            p[np].fd = in_fd;
            p[np].events = POLLOUT;
            ii = np++;
        }
        if (out_fd >= 0) {
            p[np].fd = out_fd;
            p[np].events = POLLIN;
            oi = np++;
        }
        if (poll(p, (nfds_t)np, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (ii >= 0 && p[ii].revents) {
            ssize_t w = write(in_fd, input + in_off, in_len - in_off);
            if (w > 0)
                in_off += (size_t)w;
            if (w < 0 && errno != EINTR && errno != EAGAIN)
                in_off = in_len; /* EPIPE: the script stopped reading */
            if (in_off >= in_len) {
                close(in_fd);
                in_fd = -1;
            }
        }
        if (oi >= 0 && p[oi].revents) {
            if (cap - len < 4096) {
                size_t ncap = cap ? cap * 2 : 8192;
                char *nb = realloc(buf, ncap);
                if (!nb) {
                    close(out_fd);
                    out_fd = -1;
                    continue;
                }
                buf = nb;
                cap = ncap;
            }
            ssize_t r = read(out_fd, buf + len, cap - len - 1);
            if (r > 0) {
                len += (size_t)r;
            } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
                close(out_fd);
                out_fd = -1;
            }
        }
    }
    if (in_fd >= 0)
        close(in_fd);
    if (out_fd >= 0)
        close(out_fd);
    sigaction(SIGPIPE, &old_pipe, NULL);

    int st = wait_status(pid);
    g_child = 0;
    if (out) {
        if (!buf)
            buf = strdup("");
        else
            buf[len] = '\0';
        *out = buf;
    } else {
        free(buf);
    }
    return st;
}

/* Run servers.sh with args (NULL-terminated), as run_prog. */
static int run_script(const char *const args[], const char *input, char **out)
{
    const char *argv[16];
    int n = 0;
    argv[n++] = g_bash;
    argv[n++] = g_script;
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    return run_prog(g_bash, argv, input, out);
}

/* ------------------------------------------------------------ cleanup */

static void cleanup_mine(void)
{
    long maxfd = max_fd();
    pid_t me = getpid();
    pid_t child = g_child;
    if (child > 0) {
        /* a script still running (e.g. `start`) would race with `stop`:
         * end it first (on TERM, `start` stops what it launched) */
        int st;
        kill(child, SIGTERM);
        while (waitpid(child, &st, 0) < 0 && errno == EINTR)
            ;
        g_child = 0;
    }
    for (int i = 0; i < MAX_SLOTS; i++) {
        if (slots[i].used && slots[i].owner == me) {
            slots[i].used = 0;
            spawn_stop_sigsafe(slots[i].dir, maxfd);
        }
    }
}

static void at_exit_cleanup(void)
{
    if (g_in_cleanup)
        return;
    g_in_cleanup = 1;
    cleanup_mine();
    g_in_cleanup = 0;
}

static void on_fatal_signal(int sig)
{
    int saved = errno;
    if (!g_in_cleanup) {
        g_in_cleanup = 1;
        cleanup_mine(); /* only the starting process's servers */
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig); /* delivered with the default action when we return */
    errno = saved;
}

/* The client and the account `servers.sh sql` uses (its client(): the
 * first of mariadb, mysql on PATH or in /usr/sbin; `id -un`), found once:
 * harness_sql runs the client itself, without a shell that runs it. If
 * either is not found, harness_sql goes through servers.sh sql. */
static void find_client(void)
{
    static const char *const names[] = {"mariadb", "mysql"};
    const char *path = getenv("PATH");
    struct passwd *pw = getpwuid(geteuid());

    g_client[0] = '\0';
    if (!pw || strlen(pw->pw_name) >= sizeof g_dbroot)
        return;
    strcpy(g_dbroot, pw->pw_name);
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !g_client[0]; i++) {
        const char *p = path ? path : "";
        char cand[PATH_MAX];
        for (;;) {
            size_t len = strcspn(p, ":");
            if (len > 0 && snprintf(cand, sizeof cand, "%.*s/%s", (int)len, p, names[i]) <
                               (int)sizeof cand && access(cand, X_OK) == 0) {
                snprintf(g_client, sizeof g_client, "%s", cand);
                break;
            }
            if (!p[len])
                break;
            p += len + 1;
        }
        if (!g_client[0] && snprintf(cand, sizeof cand, "/usr/sbin/%s", names[i]) <
                                (int)sizeof cand && access(cand, X_OK) == 0)
            snprintf(g_client, sizeof g_client, "%s", cand);
    }
}

static int init_once(void)
{
    if (g_inited)
        return 0;
    const char *tdir = getenv("LIBSHARD_TESTS_DIR");
    if (!tdir || !*tdir)
        tdir = "tests";
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/servers.sh", tdir) >= (int)sizeof path) {
        fprintf(stderr, "harness: LIBSHARD_TESTS_DIR too long\n");
        return -1;
    }
    if (!realpath(path, g_script)) {
        fprintf(stderr,
                "harness: cannot find %s (%s); set LIBSHARD_TESTS_DIR to the "
                "folder holding servers.sh or run from the project root\n",
                path, strerror(errno));
        return -1;
    }
    if (access("/bin/bash", X_OK) == 0)
        strcpy(g_bash, "/bin/bash");
    else if (access("/usr/bin/bash", X_OK) == 0)
        strcpy(g_bash, "/usr/bin/bash");
    else {
        fprintf(stderr, "harness: bash not found\n");
        return -1;
    }
    find_client();
    if (atexit(at_exit_cleanup) != 0) {
        fprintf(stderr, "harness: atexit failed\n");
        return -1;
    }
    for (size_t i = 0; i < sizeof fatal_sigs / sizeof fatal_sigs[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(fatal_sigs[i], NULL, &old) != 0)
            continue;
        if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_fatal_signal;
            sigemptyset(&sa.sa_mask);
            sigaction(fatal_sigs[i], &sa, NULL);
        }
    }
    g_inited = 1;
    return 0;
}

static int ensure_password(void)
{
    const char *pw = getenv("LIBSHARD_PASSWORD");
    if (pw && *pw)
        return 0;
    unsigned char raw[16];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, raw, sizeof raw) != (ssize_t)sizeof raw) {
        fprintf(stderr, "harness: /dev/urandom: %s\n", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    char hex[2 * sizeof raw + 1];
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    if (setenv("LIBSHARD_PASSWORD", hex, 1) != 0) {
        fprintf(stderr, "harness: setenv: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ API */

static harness *start(int npairs, int shards, int mod_shards, const char *certdir)
{
    if (npairs < 1) {
        fprintf(stderr, "harness: npairs must be >= 1\n");
        return NULL;
    }
    if (init_once() != 0 || ensure_password() != 0)
        return NULL;

    int slot = -1;
    for (int i = 0; i < MAX_SLOTS; i++) {
        if (!slots[i].used) {
            slot = i;
            break;
        }
    }
    if (slot < 0) {
        fprintf(stderr, "harness: too many harnesses at once (max %d)\n",
                MAX_SLOTS);
        return NULL;
    }

    harness *h = calloc(1, sizeof *h);
    if (!h) {
        fprintf(stderr, "harness: out of memory\n");
        return NULL;
    }
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    if (snprintf(h->dir, sizeof h->dir, "%s/libshard-XXXXXX", tmp) >=
            (int)sizeof h->dir ||
        !mkdtemp(h->dir)) {
        fprintf(stderr, "harness: mkdtemp under %s: %s\n", tmp,
                strerror(errno));
        free(h);
        return NULL;
    }
    snprintf(h->map, sizeof h->map, "%s/map.json", h->dir);

    /* register before starting, so that a crash during start cleans up */
    h->slot = slot;
    slots[slot].owner = getpid();
    memcpy(slots[slot].dir, h->dir, sizeof h->dir);
    slots[slot].used = 1;

    char np[16], ns[16], nm[16];
    snprintf(np, sizeof np, "%d", npairs);
    snprintf(ns, sizeof ns, "%d", shards);
    snprintf(nm, sizeof nm, "%d", mod_shards);
    const char *args[11];
    int n = 0;
    args[n++] = "start";
    args[n++] = h->dir;
    args[n++] = np;
    if (shards > 0) {
        args[n++] = "--shards";
        args[n++] = ns;
    }
    if (mod_shards > 0) {
        args[n++] = "--mod-shards";
        args[n++] = nm;
    }
    if (certdir) {
        args[n++] = "--tls";
        args[n++] = certdir;
    }
    args[n] = NULL;

    char *out = NULL;
    int st = run_script(args, NULL, &out);
    free(out);
    if (st != 0 || access(h->map, R_OK) != 0) {
        fprintf(stderr, "harness: %s start %s %d failed (status %d)\n",
                g_script, h->dir, npairs, st);
        harness_stop(h);
        return NULL;
    }
    return h;
}

harness *harness_start_ex(int npairs, int shards, int mod_shards)
{
    return start(npairs, shards, mod_shards, NULL);
}

harness *harness_start_tls(int npairs, int shards, int mod_shards, const char *certdir)
{
    if (!certdir || !*certdir) {
        fprintf(stderr, "harness: harness_start_tls needs a certificate folder\n");
        return NULL;
    }
    return start(npairs, shards, mod_shards, certdir);
}

harness *harness_start(int npairs)
{
    return harness_start_ex(npairs, 0, 0);
}

/* An even, contiguous split of total shards over pairs MySQL001..n (the
 * split servers.sh writes), as a JSON array of ranges; NULL if out of memory. */
static json_t *split_ranges(int total, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        char name[16];
        long lo = (long)i * total / n, hi = (long)(i + 1) * total / n - 1;
        snprintf(name, sizeof name, "MySQL%03d", i + 1);
        if (json_array_append_new(a, json_pack("{s:[I,I],s:s}", "range", (json_int_t)lo,
                                               (json_int_t)hi, "pair", name)) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

/* Rewrite h's map so that only pairs 1..serving serve shards. */
static int serve_from(harness *h, int serving)
{
    json_error_t err;
    json_t *map = json_load_file(h->map, 0, &err), *mod, *ids, *mods = NULL;
    json_int_t nmod = 0;
    unsigned shards;
    char tmp[PATH_MAX + 32];
    int rc = -1;

    if (!map) {
        fprintf(stderr, "harness: %s: %s\n", h->map, err.text);
        return -1;
    }
    shards = (unsigned)json_integer_value(json_object_get(map, "open_shards"));
    mod = json_object_get(map, "mod_shards");
    if (mod)
        nmod = json_integer_value(json_object_get(mod, "count"));
    ids = split_ranges((int)shards, serving);
    if (mod)
        mods = split_ranges((int)nmod, serving);
    if (!ids || (mod && !mods) || json_object_set_new(map, "id_shards", ids) != 0 ||
        (mod && json_object_set_new(mod, "ranges", mods) != 0)) {
        fprintf(stderr, "harness: out of memory rewriting %s\n", h->map);
        json_decref(map);
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", h->map);
    if (json_dump_file(map, tmp, JSON_INDENT(2)) != 0 || rename(tmp, h->map) != 0)
        fprintf(stderr, "harness: cannot write %s: %s\n", h->map, strerror(errno));
    else
        rc = 0;
    json_decref(map);
    return rc;
}

harness *harness_start_serving(int npairs, int serving, int shards, int mod_shards)
{
    harness *h;

    if (serving < 1 || serving > npairs) {
        fprintf(stderr, "harness: serving must be 1..npairs\n");
        return NULL;
    }
    if (!(h = start(npairs, shards, mod_shards, NULL)))
        return NULL;
    if (serve_from(h, serving) != 0) {
        harness_stop(h);
        return NULL;
    }
    return h;
}

const char *harness_map_path(const harness *h)
{
    return h ? h->map : NULL;
}

const char *harness_dir(const harness *h)
{
    return h ? h->dir : NULL;
}

int harness_port(const harness *h, const char *server)
{
    if (!h || !server)
        return -1;
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/servers", h->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[2 * PATH_MAX + 128];
    int port = -1;
    while (fgets(line, sizeof line, f)) {
        char name[64];
        int p;
        if (sscanf(line, "%63s %*s %*s %d", name, &p) == 2 &&
            strcmp(name, server) == 0) {
            port = p;
            break;
        }
    }
    fclose(f);
    return port;
}

/* The unix socket of a server, from DIR/servers; -1 if there is no such
 * server. */
static int server_socket(const harness *h, const char *server, char *sock, size_t size)
{
    char path[PATH_MAX + 16], line[2 * PATH_MAX + 128];
    int rc = -1;

    snprintf(path, sizeof path, "%s/servers", h->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (rc && fgets(line, sizeof line, f)) {
        char name[64], *s;
        int skip = 0;
        /* NAME PAIR ROLE PORT SOCKET PIDFILE */
        if (sscanf(line, "%63s %*s %*s %*d %n", name, &skip) != 1 || !skip ||
            strcmp(name, server) != 0)
            continue;
        s = line + skip;
        s[strcspn(s, " \n")] = '\0';
        if (*s && strlen(s) < size) {
            strcpy(sock, s);
            rc = 0;
        }
        break;
    }
    fclose(f);
    return rc;
}

static int simple(harness *h, const char *cmd, const char *server)
{
    if (!h || !server)
        return -1;
    const char *args[] = {cmd, h->dir, server, NULL};
    return run_script(args, NULL, NULL);
}

int harness_kill(harness *h, const char *server)
{
    return simple(h, "kill", server);
}

int harness_restart(harness *h, const char *server)
{
    return simple(h, "restart", server);
}

int harness_pause(harness *h, const char *server)
{
    return simple(h, "pause", server);
}

int harness_resume(harness *h, const char *server)
{
    return simple(h, "resume", server);
}

int harness_stop_server(harness *h, const char *server)
{
    return simple(h, "stop", server);
}

int harness_sql(harness *h, const char *server, const char *sql, char **out)
{
    if (!h || !server || !sql) {
        if (out)
            *out = strdup("");
        return -1;
    }
    char sock[PATH_MAX];
    if (g_client[0] && server_socket(h, server, sock, sizeof sock) == 0) {
        /* what servers.sh sql runs (its client()), minus the shell */
        const char *argv[] = {g_client,    "--no-defaults", "-u", g_dbroot, "-S", sock,
                              "--connect-timeout=5", "--batch", "--skip-column-names",
                              NULL};
        return run_prog(g_client, argv, sql, out);
    }
    const char *args[] = {"sql", h->dir, server, "--skip-column-names", NULL};
    return run_script(args, sql, out);
}

/* The first line of a query's output, without its newline, malloc'd. */
static char *first_line(harness *h, const char *server, const char *sql)
{
    char *out = NULL;
    if (harness_sql(h, server, sql, &out) != 0) {
        free(out);
        return NULL;
    }
    out[strcspn(out, "\n")] = '\0';
    return out;
}

int harness_sync_standby(harness *h, int pair, unsigned timeout_s)
{
    char master[16], standby[16], *pos, *dom, *want, *res, *save = NULL;
    size_t len = 0, cap, dl;
    int rc = -1;

    if (!h || pair < 1)
        return -1;
    snprintf(master, sizeof master, "s%d", 2 * pair - 1);
    snprintf(standby, sizeof standby, "s%d", 2 * pair);
    pos = first_line(h, master, "SELECT @@gtid_binlog_pos");
    dom = first_line(h, standby, "SELECT @@gtid_domain_id");
    if (!pos || !dom) {
        fprintf(stderr, "harness: cannot read the GTID state of pair %d\n", pair);
        free(pos);
        free(dom);
        return -1;
    }
    cap = strlen(pos) + 1;
    dl = strlen(dom);
    want = calloc(1, cap);
    for (char *p = want ? strtok_r(pos, ",", &save) : NULL; p; p = strtok_r(NULL, ",", &save))
        if (!(strncmp(p, dom, dl) == 0 && p[dl] == '-'))
            len += (size_t)snprintf(want + len, cap - len, "%s%s", len ? "," : "", p);
    if (want && len == 0) {
        rc = 0; /* nothing of the master's to wait for */
    } else if (want) {
        /* GTID positions hold only digits, '-' and ',': safe in a literal */
        char *sql = malloc(len + 64);
        if (sql) {
            snprintf(sql, len + 64, "SELECT MASTER_GTID_WAIT('%s', %u)", want, timeout_s);
            res = first_line(h, standby, sql);
            rc = res && strcmp(res, "0") == 0 ? 0 : -1;
            if (rc)
                fprintf(stderr, "harness: %s did not reach %s of %s within %u s\n", standby,
                        want, master, timeout_s);
            free(res);
            free(sql);
        }
    }
    free(want);
    free(pos);
    free(dom);
    return rc;
}

void harness_stop(harness *h)
{
    if (!h)
        return;
    if (h->slot >= 0 && h->slot < MAX_SLOTS)
        slots[h->slot].used = 0;
    const char *args[] = {"stop", h->dir, NULL};
    int st = run_script(args, NULL, NULL);
    if (st != 0)
        fprintf(stderr, "harness: %s stop %s: status %d\n", g_script, h->dir,
                st);
    free(h);
}

/* ------------------------------------------------------------ accounts */

void harness_admin_options(shard_options *opts)
{
    opts->user = HARNESS_ADMIN_USER;
    opts->password_env = HARNESS_ADMIN_PASSWORD_ENV;
}

int harness_open_admin(const harness *h, shard_ctx **out, const shard_options *opts)
{
    shard_options o = SHARD_OPTIONS_INIT;

    if (opts)
        o = *opts;
    harness_admin_options(&o);
    return shard_ctx_open(out, harness_map_path(h), &o);
}

int harness_schema_apply(const harness *h)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    int rc;

    o.refresh_interval_ms = 0;
    if ((rc = harness_open_admin(h, &ctx, &o)) == 0)
        rc = shard_schema_apply(ctx, NULL, NULL);
    shard_ctx_free(ctx);
    return rc;
}
