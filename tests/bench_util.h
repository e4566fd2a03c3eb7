/*
 * tests/bench_util.h: helpers shared by the benchmarks (tests/bench_*.c):
 * dying with a message, clocks and CPU times, medians, a PRNG, raw
 * libmariadb connections, and loading pins straight into shard tables.
 *
 * Every function is static: each benchmark is built on its own from its one
 * .c file (the Makefile links only the harness and the libraries). Before
 * including, define BENCH_NAME: the prefix of die()'s messages.
 *
 * Selecting benches: a benchmark's command-line arguments, or else the
 * environment variable BENCH_ONLY (comma- or space-separated), name the
 * `bench NAME` lines to produce; a name may be a prefix ("move-scale" selects
 * move-scale-pause-ms and move-scale-vs-myloader). Nothing named: every line.
 */
#ifndef LIBSHARD_TESTS_BENCH_UTIL_H
#define LIBSHARD_TESTS_BENCH_UTIL_H

#include "harness.h"

#include <jansson.h>
#include <libshard.h>
#include <mysql.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#ifndef BENCH_NAME
#error "define BENCH_NAME before including bench_util.h"
#endif

/* Not every benchmark uses every helper. */
#define BENCH_UTIL static __attribute__((unused))

/* Something failed outright: the harness's atexit handler stops the servers. */
BENCH_UTIL void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
BENCH_UTIL void die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, BENCH_NAME ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* ------------------------------------------------------------ selection */

static const char *bench_only; /* what bench_select() was given, or BENCH_ONLY */

/* The names from argv[1..argc) (joined by spaces), or else from BENCH_ONLY. */
BENCH_UTIL void bench_select(int argc, char **argv)
{
    static char buf[1024];
    size_t len = 0;

    for (int i = 1; i < argc; i++)
        len += (size_t)snprintf(buf + len, len < sizeof buf ? sizeof buf - len : 0, "%s%s",
                                i > 1 ? " " : "", argv[i]);
    if (len >= sizeof buf)
        die("too many bench names");
    bench_only = argc > 1 ? buf : getenv("BENCH_ONLY");
}

/* Whether the line `bench NAME` is to be produced. */
BENCH_UTIL bool bench_selected(const char *name)
{
    const char *p = bench_only;

    if (!p)
        p = getenv("BENCH_ONLY");
    if (!p || !*p)
        return true;
    while (*p) {
        size_t n = strcspn(p, ", ");
        if (n && strncmp(name, p, n) == 0)
            return true;
        p += n;
        p += strspn(p, ", ");
    }
    return false;
}

/* ------------------------------------------------------------ time */

BENCH_UTIL double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

BENCH_UTIL void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* CPU seconds this process has used. */
BENCH_UTIL double cpu_self(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds (user + system) a process has used, from /proc; 0 if unknown. */
BENCH_UTIL double cpu_of(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ut, st;
    FILE *f;
    size_t n;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (pid <= 0 || !(f = fopen(path, "r")))
        return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* after "pid (comm) ": state is field 3, utime 14 and stime 15 */
    if (!(p = strrchr(buf, ')')) ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The pid in a pid file (a server's mariadbd.pid); 0 if unreadable. */
BENCH_UTIL pid_t read_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    int pid = 0;

    if (f) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return (pid_t)pid;
}

/* ------------------------------------------------------------ figures */

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n), n >= 1 (v itself is left in its order). */
BENCH_UTIL double median(const double *v, int n)
{
    double *s = malloc((size_t)n * sizeof *s), m;

    if (!s)
        die("out of memory");
    memcpy(s, v, (size_t)n * sizeof *v);
    qsort(s, (size_t)n, sizeof *s, bench_cmp_double);
    m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

BENCH_UTIL uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* ------------------------------------------------------------ raw libmariadb */

/* user over TCP (the password in $LIBSHARD_PASSWORD); timeout seconds for
 * connect, read and write; LOAD DATA LOCAL INFILE allowed if asked. */
BENCH_UTIL MYSQL *raw_connect_as(const char *user, int port, unsigned timeout,
                                 bool local_infile)
{
    unsigned one = 1;
    MYSQL *my = mysql_init(NULL);

    if (!my)
        die("mysql_init failed");
    mysql_optionsv(my, MYSQL_OPT_CONNECT_TIMEOUT, &timeout);
    mysql_optionsv(my, MYSQL_OPT_READ_TIMEOUT, &timeout);
    mysql_optionsv(my, MYSQL_OPT_WRITE_TIMEOUT, &timeout);
    mysql_optionsv(my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (local_infile)
        mysql_optionsv(my, MYSQL_OPT_LOCAL_INFILE, &one);
    if (!mysql_real_connect(my, "127.0.0.1", user, getenv("LIBSHARD_PASSWORD"), NULL,
                            (unsigned)port, NULL, 0))
        die("connect to 127.0.0.1:%d as %s: %s", port, user, mysql_error(my));
    return my;
}

/* The application's account, as libshard connects: rows in the shards. */
BENCH_UTIL MYSQL *raw_connect(int port, unsigned timeout, bool local_infile)
{
    return raw_connect_as("shard", port, timeout, local_infile);
}

/* The operators' account: databases of a benchmark's own, the copying
 * tools compared with a move. */
BENCH_UTIL MYSQL *raw_connect_admin(int port, unsigned timeout, bool local_infile)
{
    return raw_connect_as(HARNESS_ADMIN_USER, port, timeout, local_infile);
}

BENCH_UTIL void raw_exec(MYSQL *my, const char *sql, size_t len)
{
    if (mysql_real_query(my, sql, (unsigned long)len))
        die("%.60s...: %s", sql, mysql_error(my));
    mysql_free_result(mysql_store_result(my));
}

/* ------------------------------------------------------------ maps */

/* The harness's map with a lease (libshard(3), lease_ms), as a fleet whose
 * movers all mark their shards runs: reads of unmarked shards skip the
 * fence while the store answers. */
BENCH_UTIL void bench_map_lease(harness *h, unsigned ms)
{
    shard_store *st = NULL;
    shard_map *cur = NULL, *next = NULL;
    char *text = NULL, *out;
    json_t *doc;

    if (shard_store_open(&st, harness_map_path(h)) || shard_store_load(st, &cur) ||
        shard_map_to_json(cur, &text) || !(doc = json_loads(text, 0, NULL)))
        die("reading the map: %s", shard_errmsg());
    json_object_set_new(doc, "lease_ms", json_integer(ms));
    json_object_set_new(doc, "lease_writes", json_true());
    json_object_set_new(doc, "version", json_integer((json_int_t)shard_map_version(cur) + 1));
    if (!(out = json_dumps(doc, JSON_COMPACT)) || shard_map_parse(&next, out, strlen(out)) ||
        shard_store_publish(st, next, shard_map_version(cur)))
        die("publishing the map: %s", shard_errmsg());
    free(out);
    json_decref(doc);
    shard_free(text);
    shard_map_free(next);
    shard_map_free(cur);
    shard_store_free(st);
}

/* The context's reads of the map store so far (shard_ctx_stats' map
 * reloads; the first read at open not counted). */
/* A counter of shard_ctx_stats' text, by its name. */
BENCH_UTIL uint64_t bench_counter(shard_ctx *ctx, const char *name)
{
    char *text = NULL, *p, key[128];
    unsigned long long n = 0;

    snprintf(key, sizeof key, "\n%s ", name);
    if (shard_ctx_stats(ctx, &text))
        die("stats: %s", shard_errmsg());
    if ((p = strstr(text, key)))
        n = strtoull(p + strlen(key), NULL, 10);
    shard_free(text);
    return n;
}

BENCH_UTIL uint64_t bench_map_reloads(shard_ctx *ctx)
{
    return bench_counter(ctx, "libshard_map_reloads_total");
}

/* ------------------------------------------------------------ pins */

/* A pin of about 200 bytes of JSON, without "active" (never soft-deleted). */
BENCH_UTIL int pin_json(char *buf, size_t size, unsigned shard, unsigned local)
{
    return snprintf(buf, size,
                    "{\"title\":\"Pin %u of shard %u\",\"link\":\"https://example.com/p/%u/%u\","
                    "\"board\":%u,\"tags\":[\"travel\",\"food\",\"ideas\"],\"note\":\"Lorem "
                    "ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod.\"}",
                    local, shard, shard, local, local % 977 + 1);
}

/* Rows straight into the shard's table with multi-row INSERTs of batch rows
 * (local IDs 1..n): much quicker than creating them one by one through the
 * API. */
BENCH_UTIL void load_pins(MYSQL *my, const char *db, unsigned shard, unsigned n, unsigned batch)
{
    size_t cap = 64 + (size_t)batch * 300, len = 0;
    char *q = malloc(cap);

    if (!q)
        die("out of memory");
    for (unsigned local = 1; local <= n; local++) {
        char js[256];
        bool first = len == 0;
        int jl = pin_json(js, sizeof js, shard, local);
        if (first)
            len = (size_t)snprintf(q, cap, "INSERT INTO `%s`.`pins` (local_id, data) VALUES ",
                                   db);
        /* The JSON holds no quote or backslash: it goes in as it is. */
        len += (size_t)snprintf(q + len, cap - len, "%s(%u,'%.*s')", first ? "" : ",", local,
                                jl, js);
        if (local % batch == 0 || local == n) {
            raw_exec(my, q, len);
            len = 0;
        }
    }
    free(q);
}

/* Wait until the standby has applied everything its master wrote, so that
 * replication does not steal CPU from the measurements. */
BENCH_UTIL void wait_standby(harness *h, const char *master, int domain, const char *standby)
{
    char *pos = NULL, *out = NULL, *p, sql[512], want[128] = "";
    char prefix[16];

    snprintf(prefix, sizeof prefix, "%d-", domain);
    if (harness_sql(h, master, "SELECT @@gtid_binlog_pos", &pos) != 0)
        die("%s: cannot read @@gtid_binlog_pos", master);
    for (p = strtok(pos, ",\n"); p; p = strtok(NULL, ",\n"))
        if (strncmp(p, prefix, strlen(prefix)) == 0)
            snprintf(want, sizeof want, "%s", p);
    free(pos);
    if (!want[0])
        return; /* the master wrote nothing of its own */
    snprintf(sql, sizeof sql, "SELECT MASTER_GTID_WAIT('%s', 60)", want);
    if (harness_sql(h, standby, sql, &out) != 0 || strncmp(out, "0", 1) != 0)
        die("%s did not catch up with %s (%s)", standby, master, want);
    free(out);
}

/* One value of a query on my (a copy: free() it). */
BENCH_UTIL char *raw_value(MYSQL *my, const char *sql)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    char *v;

    if (mysql_query(my, sql) || !(res = mysql_store_result(my)))
        die("%.60s: %s", sql, mysql_error(my));
    row = mysql_fetch_row(res);
    v = strdup(row && row[0] ? row[0] : "");
    mysql_free_result(res);
    if (!v)
        die("out of memory");
    return v;
}

/*
 * The standby on standby_port has applied every transaction of the master
 * on master_port (all domains but the standby's own): over connections of
 * this process, so that a timed step that ends with it pays a few round
 * trips (a wait through the mariadb client, harness_sync_standby, costs
 * 0.1-0.8 s of process start-up on a loaded machine even with nothing to
 * wait for). The seconds it took.
 */
BENCH_UTIL double bench_sync_standby(int master_port, int standby_port, unsigned timeout_s)
{
    double t0 = now();
    MYSQL *m = raw_connect_admin(master_port, 10, false);
    MYSQL *s = raw_connect_admin(standby_port, 10, false);
    char *pos = raw_value(m, "SELECT @@gtid_binlog_pos");
    char *dom = raw_value(s, "SELECT @@gtid_domain_id");
    size_t dl = strlen(dom), len = 0, cap = strlen(pos) + 1;
    char *want = calloc(1, cap), *save = NULL;

    if (!want)
        die("out of memory");
    for (char *p = strtok_r(pos, ",", &save); p; p = strtok_r(NULL, ",", &save))
        if (!(strncmp(p, dom, dl) == 0 && p[dl] == '-'))
            len += (size_t)snprintf(want + len, cap - len, "%s%s", len ? "," : "", p);
    if (len) {
        /* GTID positions hold only digits, '-' and ',': safe in a literal */
        char *sql = malloc(len + 64), *r;
        if (!sql)
            die("out of memory");
        snprintf(sql, len + 64, "SELECT MASTER_GTID_WAIT('%s', %u)", want, timeout_s);
        r = raw_value(s, sql);
        if (strcmp(r, "0") != 0)
            die("the standby on port %d did not reach %s within %u s", standby_port, want,
                timeout_s);
        free(r);
        free(sql);
    }
    free(want);
    free(dom);
    free(pos);
    mysql_close(m);
    mysql_close(s);
    return now() - t0;
}

/* ------------------------------------------------------------ files */

BENCH_UTIL int bench_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* Remove a directory tree (links are not followed). */
BENCH_UTIL void bench_rm_tree(const char *path)
{
    nftw(path, bench_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ------------------------------------------------------------ tools */

/* Run argv with its output to LOG; returns wall seconds (and the tool's
 * CPU seconds in *cpu, when cpu is not NULL); dies on failure, with the
 * start of the log. */
BENCH_UTIL double bench_run_tool(const char *const argv[], const char *log, double *cpu)
{
    struct rusage ru;
    double t0;
    int st;
    pid_t pid;

    fflush(stdout);
    fflush(stderr);
    t0 = now();
    pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(127);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    while (wait4(pid, &st, 0, &ru) < 0)
        if (errno != EINTR)
            die("wait4: %s", strerror(errno));
    t0 = now() - t0;
    if (cpu)
        *cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char buf[2048];
        FILE *f = fopen(log, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        die("%s failed (status 0x%x):\n%s", argv[0], st, buf);
    }
    return t0;
}

/* An option file for the tools holding the operators' account and its
 * password (mode 0600, in the private dir), so that the password never
 * shows on a command line. Remove it right after use. */
BENCH_UTIL void bench_write_defaults(const char *path, int port)
{
    const char *pw = getenv("LIBSHARD_PASSWORD");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

    if (!f)
        die("%s: %s", path, strerror(errno));
    fprintf(f, "[client]\nuser=%s\nhost=127.0.0.1\nport=%d\npassword=\"", HARNESS_ADMIN_USER,
            port);
    for (const char *p = pw ? pw : ""; *p; p++) {
        if (*p == '"' || *p == '\\')
            fputc('\\', f);
        fputc(*p, f);
    }
    fprintf(f, "\"\n");
    if (fclose(f) != 0)
        die("%s: %s", path, strerror(errno));
}

#endif
