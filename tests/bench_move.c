/*
 * tests/bench_move.c: online shard moves (libshard-move(7)) measured side
 * by side with the usual tools, on two throwaway pairs started here.
 *
 *   bench copy-vs-myloader   (mydumper + myloader: same thread count, same
 *                             rows, same two masters) / libshard's
 *                             report.copy_seconds
 *   bench copy-vs-loaddata   LOAD DATA LOCAL INFILE of the same rows into
 *                             empty copies of the tables / report.copy_seconds
 *   bench cutover-pause-ms   the worst call two concurrent writers saw during
 *                             the cut-over (report.pause_ms in the detail)
 *   bench mover-rss          the mover's peak RSS moving 10x the rows / 1x
 *   bench move-scale-pause-ms    the worst call of 4 writer threads while 256
 *                             shards x 6 tables (1000 pins each) move to an
 *                             empty pair (3 pairs, 1024 open shards)
 *   bench move-scale-vs-myloader mydumper + myloader of the same 256
 *                             databases into the same empty pair / the whole
 *                             shard_move's wall time
 *   bench move-scale-vs-myloader-under-writers the same, with the tools run
 *                             under the writers the move runs under, timed
 *                             until the target's standby has every row (the
 *                             move's done waits for it too; the old figure,
 *                             without it, in the detail)
 *   bench move-scale-drop    the writers' p99.9 while the source's databases are
 *                             dropped after the move reported done / in the
 *                             seconds before the move; the time to done and to
 *                             dropped in the detail
 *
 * Data: shards 0-1 (MySQL001) hold BIG_ROWS rows of ~200-byte JSON in their
 * pins and boards tables (four tables, one per copy thread; the other eight
 * tables of the two databases are empty), shards 2-3 (MySQL002) a tenth of
 * that. Rounds alternate (ABBA, so that drift on a shared machine falls on
 * both sides): even rounds run the tools MySQL001 -> MySQL002 and then move
 * shards 0-1 there; odd rounds move them back first and then run the tools.
 * Every copy writes with the binary log on, so each pair's standby receives
 * the rows, as it must for a moved shard. Medians are reported; every
 * round's figure is in the detail, and per-step figures (with CLOCK_MONOTONIC
 * stamps, to cut a `perf record -a -k CLOCK_MONOTONIC` profile by step) go
 * to stderr.
 *
 * Every move runs in a child process (this binary re-executed with
 * --mover); its peak RSS comes from wait4(). Figures only: nothing here is
 * a timed assertion. Exit status 1 means something failed outright (a
 * server, a query, a tool, a move).
 *
 * The move-scale lines come from a run of their own on three pairs (see
 * scale_bench below): one round, the tools before the move, once before
 * the writers start and once under them; the mover's step timings (its
 * debug-level log) go to stderr.
 *
 * Knobs: BENCH_MOVE_ROWS=N (rows on shards 0-1, rounded down to a multiple
 * of 40), BENCH_MOVE_ROUNDS=N (1..16), BENCH_MOVE_WRAP="perf record -g -o
 * FILE --" (runs each mover child under that command; the RSS figure is then
 * the wrapper's), BENCH_MOVE_SCALE_SHARDS=N (shards moved in the scale run,
 * 256; 4N open). Arguments or BENCH_ONLY choose the lines to produce (see
 * bench_util.h): `bench_move move-scale` runs only the scale run.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <libshard.h>
#include <mysql.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define BENCH_NAME "bench_move"
#include "bench_util.h"

#define THREADS 4            /* libshard copy_threads = mydumper/myloader -t = LOAD DATA conns */
#define DEFAULT_BIG_ROWS 200000 /* rows on shards 0-1: the "10x" data */
#define RSS_FACTOR 10        /* shards 2-3 hold BIG_ROWS / RSS_FACTOR rows */
#define INSERT_BATCH 1000    /* rows per multi-row INSERT while loading */
#define CONNECT_TIMEOUT 600  /* seconds, raw libmariadb connections */
#define WRITERS 2            /* concurrent writers during the cut-over move */
#define WRITER_PAUSE_S 0.003 /* between one writer's calls */
#define DEFAULT_ROUNDS 4     /* samples of every copy figure */
#define MAX_ROUNDS 16
#define MAX_CALLS 100000     /* per writer */

static const char *const DATA_TABLES[] = {"pins", "boards"};
#define NDATA 2

static harness *H;
static char Tmpdir[PATH_MAX]; /* private (0700): option file, TSV files, dump */
static char Self[PATH_MAX];   /* this binary, re-executed for the mover */
static int Port[7];           /* s1..s4 (s1..s6 in the scale bench) */
static pid_t Srv_pid[7];      /* their mariadbd processes, for CPU figures */
static long Big_rows = DEFAULT_BIG_ROWS;

/* ------------------------------------------------------------ helpers */

static void cleanup_tmpdir(void)
{
    if (Tmpdir[0]) {
        bench_rm_tree(Tmpdir);
        Tmpdir[0] = '\0';
    }
}

/* Progress on stderr, stamped with CLOCK_MONOTONIC (what `perf record -k
 * CLOCK_MONOTONIC` stamps samples with, to cut a profile by step). */
static void note(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "bench_move: [%.3f] ", now());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* The four servers' CPU seconds so far (index 1..4 = s1..s4). */
static void cpu_servers(double out[5])
{
    out[0] = 0;
    for (int k = 1; k <= 4; k++)
        out[k] = cpu_of(Srv_pid[k]);
}

static void exec_len(MYSQL *my, const char *sql, size_t len)
{
    if (mysql_real_query(my, sql, (unsigned long)len))
        die("%.80s...: %s", sql, mysql_error(my));
    mysql_free_result(mysql_store_result(my));
}

static void execf(MYSQL *my, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void execf(MYSQL *my, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof sql)
        die("statement too long");
    exec_len(my, sql, (size_t)n);
}

static long long value_ll(MYSQL *my, const char *sql)
{
    char *v = raw_value(my, sql);
    long long n = strtoll(v, NULL, 10);
    free(v);
    return n;
}

/* The standby has applied everything its master logged in the master's own
 * GTID domain (the standby's own domain comes back through log-slave-updates
 * and is not waited for). */
static void sync_standby(int master_port, int standby_port)
{
    bench_sync_standby(master_port, standby_port, 300);
}

/* The ports of pair P's master and standby (pair P is MySQL00P). */
static int master_port_of(int pair) { return Port[2 * pair - 1]; }
static int standby_port_of(int pair) { return Port[2 * pair]; }

static void drop_dbs(int pair, const char *prefix, unsigned first, unsigned last)
{
    MYSQL *my = raw_connect_admin(master_port_of(pair), CONNECT_TIMEOUT, false);
    for (unsigned s = first; s <= last; s++)
        execf(my, "DROP DATABASE IF EXISTS `%s%05u`", prefix, s);
    mysql_close(my);
    sync_standby(master_port_of(pair), standby_port_of(pair));
}

static long long count_rows(int pair, const char *prefix, unsigned first, unsigned last)
{
    MYSQL *my = raw_connect_admin(master_port_of(pair), CONNECT_TIMEOUT, false);
    long long n = 0;
    for (unsigned s = first; s <= last; s++)
        for (int t = 0; t < NDATA; t++) {
            char sql[200];
            snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM `%s%05u`.`%s`", prefix, s,
                     DATA_TABLES[t]);
            n += value_ll(my, sql);
        }
    mysql_close(my);
    return n;
}

/* ------------------------------------------------------------ loading */

/* About 200 bytes of JSON (180..220), valid and free of quotes to escape. */
static size_t make_json(char *buf, size_t size, unsigned shard, unsigned long local,
                        uint64_t *rng)
{
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ";
    int n = snprintf(buf, size,
                     "{\"title\":\"Pin %lu of shard %u\",\"link\":\"https://example.com/p/%u/%lu\","
                     "\"board\":%lu,\"tags\":[\"travel\",\"food\"],\"note\":\"",
                     local, shard, shard, local, local % 977 + 1);
    size_t len = (size_t)n, want = 180 + xorshift(rng) % 41;
    while (len < want - 2 && len < size - 3)
        buf[len++] = alnum[xorshift(rng) % (sizeof alnum - 1)];
    buf[len++] = '"';
    buf[len++] = '}';
    buf[len] = '\0';
    return len;
}

typedef struct loadjob {
    int port;
    unsigned shard;
    const char *table;
    long rows;
    pthread_t thread;
} loadjob;

static void *load_main(void *arg)
{
    loadjob *j = arg;
    MYSQL *my = raw_connect_admin(j->port, CONNECT_TIMEOUT, false);
    size_t cap = (size_t)INSERT_BATCH * 300 + 256;
    char *sql = malloc(cap);
    uint64_t rng = 0x9E3779B97F4A7C15ull ^ ((uint64_t)j->shard << 32) ^ (uintptr_t)j->table;

    if (!sql)
        die("out of memory");
    for (long i = 1; i <= j->rows;) {
        size_t len = (size_t)snprintf(sql, cap, "INSERT INTO `db%05u`.`%s` (local_id, data) VALUES ",
                                      j->shard, j->table);
        for (int k = 0; k < INSERT_BATCH && i <= j->rows; k++, i++) {
            char json[256];
            make_json(json, sizeof json, j->shard, (unsigned long)i, &rng);
            len += (size_t)snprintf(sql + len, cap - len, "%s(%ld,'%s')", k ? "," : "", i, json);
        }
        exec_len(my, sql, len);
    }
    free(sql);
    mysql_close(my);
    return NULL;
}

/* rows spread over the data tables of shards first..last on pair's master. */
static void load(int pair, unsigned first, unsigned last, long rows)
{
    loadjob jobs[8];
    int n = 0;
    long per = rows / ((long)(last - first + 1) * NDATA);

    for (unsigned s = first; s <= last; s++)
        for (int t = 0; t < NDATA; t++) {
            jobs[n] = (loadjob){master_port_of(pair), s, DATA_TABLES[t], per, 0};
            pthread_create(&jobs[n].thread, NULL, load_main, &jobs[n]);
            n++;
        }
    for (int i = 0; i < n; i++)
        pthread_join(jobs[i].thread, NULL);
}

/* ------------------------------------------------------------ the mover child */

typedef struct moveres {
    int rc;
    char err[512];
    shard_move_report r;
    double seconds;     /* the whole shard_move call */
    double t_phase[SHARD_MOVE_ABORTED + 1]; /* first progress call of each phase */
    double t_first_rows; /* first batch of rows written on the target */
    double standby_lag;  /* after the copy, until the target's standby had it all */
    /* CPU seconds at the first "copying" and the first "catchup" progress
     * calls: servers s1..s4 in [1..4], the mover itself in [0] */
    double cpu_copy0[5], cpu_copy1[5];
    char feed[200];     /* the mover's log line that names how it fed the target */
    long vmhwm_kb;      /* /proc/self/status just before exit */
    long rss_start_kb;  /* VmRSS after opening the context */
    long maxrss_kb;     /* wait4() ru_maxrss, filled by the parent */
    double cpu_user, cpu_sys; /* the child's CPU seconds, from wait4() */
} moveres;

static moveres Child;
static int Child_standby[2]; /* the target pair's master and standby ports */

static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t fl = strlen(field);
    long kb = -1;

    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, fl) == 0 && line[fl] == ':') {
            kb = strtol(line + fl + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

/* The mover's progress callback (serialised by the mover). */
static void phase_seen(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)total;
    (void)payload;
    if (phase < 0 || phase > SHARD_MOVE_ABORTED)
        return;
    if (Child.t_phase[phase] == 0) {
        Child.t_phase[phase] = now();
        if (phase == SHARD_MOVE_COPYING) {
            cpu_servers(Child.cpu_copy0);
            Child.cpu_copy0[0] = cpu_self();
        } else if (phase == SHARD_MOVE_CATCHUP) {
            cpu_servers(Child.cpu_copy1);
            Child.cpu_copy1[0] = cpu_self();
            /* The copy is redundant once the target's standby has it too
             * (this wait delays the later phases, not copy_seconds). */
            if (Child_standby[0] > 0) {
                double t0 = now();
                sync_standby(Child_standby[0], Child_standby[1]);
                Child.standby_lag = now() - t0;
            }
        }
    }
    if (phase == SHARD_MOVE_COPYING && done > 0 && Child.t_first_rows == 0)
        Child.t_first_rows = now();
}

/* The mover's log: keep the line that says how the copy writes. */
static void mover_log(int level, const char *message, void *payload)
{
    const char *p = strstr(message, "copying with");
    (void)level;
    (void)payload;
    if (p && !Child.feed[0])
        snprintf(Child.feed, sizeof Child.feed, "%s", p);
}

/* argv: --mover FIRST LAST TARGET MAP; the result goes to fd 3. */
static int mover_main(char **argv)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_move_options mo = SHARD_MOVE_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    const char *pids = getenv("BENCH_MOVE_PIDS"), *sb = getenv("BENCH_MOVE_STANDBY");
    double t0;

    memset(&Child, 0, sizeof Child);
    Child.r = (shard_move_report)SHARD_MOVE_REPORT_INIT;
    if (pids) {
        int a[4] = {0, 0, 0, 0};
        sscanf(pids, "%d %d %d %d", &a[0], &a[1], &a[2], &a[3]);
        for (int k = 1; k <= 4; k++)
            Srv_pid[k] = (pid_t)a[k - 1];
    }
    if (sb && sscanf(sb, "%d %d", &Child_standby[0], &Child_standby[1]) != 2)
        Child_standby[0] = 0;
    o.refresh_interval_ms = 0;
    harness_admin_options(&o); /* moves are the operators' */
    o.log_level = SHARD_LOG_INFO;
    o.log = mover_log;
    if ((Child.rc = shard_ctx_open(&ctx, argv[5], &o)) == 0) {
        Child.rss_start_kb = status_kb("VmRSS");
        mo.copy_threads = THREADS;
        mo.progress = phase_seen;
        t0 = now();
        Child.rc = shard_move(ctx, (unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]), argv[4],
                              &mo, &Child.r, NULL);
        Child.seconds = now() - t0;
        /* Done: the source's copies are dropped after it (shardctl move does
         * so right after printing done), outside the move's time; the next
         * step may load those databases onto that pair again. */
        if (Child.rc == 0 && Child.r.phase == SHARD_MOVE_DONE) {
            shard_move_report dr = SHARD_MOVE_REPORT_INIT;
            if ((Child.rc = shard_move_resume(ctx, Child.r.move_id, &mo, &dr)) == 0 &&
                !dr.source_dropped) {
                Child.rc = SHARD_ESERVER;
                snprintf(Child.err, sizeof Child.err, "move %llu: done, source not dropped",
                         (unsigned long long)Child.r.move_id);
            }
        }
    }
    if (Child.rc && !Child.err[0])
        snprintf(Child.err, sizeof Child.err, "%s", shard_errmsg());
    shard_ctx_free(ctx);
    Child.vmhwm_kb = status_kb("VmHWM");
    if (write(3, &Child, sizeof Child) != (ssize_t)sizeof Child)
        return 2;
    return 0;
}

/* Move shards first..last to pair `target` in a child process. */
static void move_child(unsigned first, unsigned last, int target, moveres *out)
{
    char a_first[16], a_last[16], a_target[16], pids[64], sbports[32];
    const char *argv[40];
    int fds[2], n = 0, st;
    struct rusage ru;
    pid_t pid;
    size_t got = 0;
    char *wrap = getenv("BENCH_MOVE_WRAP"), *wcopy = NULL;

    snprintf(a_first, sizeof a_first, "%u", first);
    snprintf(a_last, sizeof a_last, "%u", last);
    snprintf(a_target, sizeof a_target, "MySQL%03d", target);
    snprintf(pids, sizeof pids, "%d %d %d %d", (int)Srv_pid[1], (int)Srv_pid[2],
             (int)Srv_pid[3], (int)Srv_pid[4]);
    snprintf(sbports, sizeof sbports, "%d %d", master_port_of(target),
             standby_port_of(target));
    if (wrap && *wrap) {
        wcopy = strdup(wrap);
        for (char *tok = strtok(wcopy, " "); tok && n < 30; tok = strtok(NULL, " "))
            argv[n++] = tok;
    }
    argv[n++] = Self;
    argv[n++] = "--mover";
    argv[n++] = a_first;
    argv[n++] = a_last;
    argv[n++] = a_target;
    argv[n++] = harness_map_path(H);
    argv[n] = NULL;

    if (pipe2(fds, O_CLOEXEC) != 0)
        die("pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        if (dup2(fds[1], 3) < 0 || setenv("BENCH_MOVE_PIDS", pids, 1) != 0 ||
            setenv("BENCH_MOVE_STANDBY", sbports, 1) != 0)
            _exit(127);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    free(wcopy);
    close(fds[1]);
    memset(out, 0, sizeof *out);
    while (got < sizeof *out) {
        ssize_t r = read(fds[0], (char *)out + got, sizeof *out - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fds[0]);
    while (wait4(pid, &st, 0, &ru) < 0)
        if (errno != EINTR)
            die("wait4: %s", strerror(errno));
    if (got != sizeof *out || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("mover child for shards %u-%u -> %s died (status 0x%x)", first, last, a_target, st);
    if (out->rc)
        die("move %u-%u -> %s: %s (%s)", first, last, a_target, shard_strerror(out->rc),
            out->err);
    if (out->r.phase != SHARD_MOVE_DONE || out->r.mismatches)
        die("move %u-%u -> %s ended in phase %s with %llu mismatches", first, last, a_target,
            shard_move_phase_name(out->r.phase), (unsigned long long)out->r.mismatches);
    out->maxrss_kb = ru.ru_maxrss;
    out->cpu_user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
    out->cpu_sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    {
        int src = target == 1 ? 2 : 1;
        const double *c0 = out->cpu_copy0, *c1 = out->cpu_copy1;
        note("move %u-%u -> %s: copy phase [%.3f, %.3f], %s", first, last, a_target,
             out->t_phase[SHARD_MOVE_COPYING], out->t_phase[SHARD_MOVE_CATCHUP],
             out->feed[0] ? out->feed : "(the mover did not say how it copied)");
        note("move %u-%u -> %s: %llu rows (%.1f MB) copied in %.2f s (target standby %.2f s "
             "behind; first batch written %.2f s after the snapshot; CPU s during copy: source %.2f, source standby %.2f, "
             "target %.2f, target standby %.2f, mover %.2f), whole move %.2f s (catch-up "
             "%.2f, cut-over %.2f, verify %.2f), pause %.1f ms, mover CPU %.2f+%.2f s, peak "
             "RSS %ld kB",
             first, last, a_target, (unsigned long long)out->r.rows_copied,
             (double)out->r.bytes_copied / 1e6, out->r.copy_seconds, out->standby_lag,
             out->t_first_rows - out->t_phase[SHARD_MOVE_COPYING],
             c1[2 * src - 1] - c0[2 * src - 1], c1[2 * src] - c0[2 * src],
             c1[2 * target - 1] - c0[2 * target - 1], c1[2 * target] - c0[2 * target],
             c1[0] - c0[0], out->seconds, out->r.catchup_seconds, out->r.cutover_seconds,
             out->r.verify_seconds, out->r.pause_ms, out->cpu_user, out->cpu_sys,
             out->maxrss_kb);
    }
}

/* CPU seconds of the source master, target master and target standby
 * between two samples, for a copy from pair src to pair dst. */
typedef struct cpusplit {
    double src, dst, dst_standby, client;
} cpusplit;

static cpusplit split_of(const double a[5], const double b[5], int src, int dst,
                         double client)
{
    cpusplit c = {b[2 * src - 1] - a[2 * src - 1], b[2 * dst - 1] - a[2 * dst - 1],
                  b[2 * dst] - a[2 * dst], client};
    return c;
}

/* ------------------------------------------------------------ external tools */



typedef struct dumpres {
    double dump_s, load_s, standby_lag;
    long long rows;
    cpusplit dump_cpu, load_cpu; /* client = mydumper / myloader */
} dumpres;

/* mydumper of shards 0-1 from pair src's master, myloader into dst's master
 * (binary log on, as the move's writes are), then the copy is dropped. */
static void dump_and_load(int src, int dst, dumpres *out)
{
    char cnf[PATH_MAX + 16], dir[PATH_MAX + 16], log[PATH_MAX + 16], t[16], port[16];
    double c0[5], c1[5], tool, tw[3];

    snprintf(cnf, sizeof cnf, "%s/my.cnf", Tmpdir);
    snprintf(dir, sizeof dir, "%s/dump", Tmpdir);
    snprintf(t, sizeof t, "%d", THREADS);

    bench_rm_tree(dir);
    bench_write_defaults(cnf, master_port_of(src));
    snprintf(log, sizeof log, "%s/mydumper.log", Tmpdir);
    snprintf(port, sizeof port, "%d", master_port_of(src));
    {
        const char *argv[] = {"mydumper", "--defaults-file", cnf, "-h", "127.0.0.1", "-P",
                              port, "-u", HARNESS_ADMIN_USER, "-t", t, "--trx-consistency-only",
                              "-x", "^db0000[01][.]", "-o", dir, "-v", "1", NULL};
        cpu_servers(c0);
        tw[0] = now();
        out->dump_s = bench_run_tool(argv, log, &tool);
        cpu_servers(c1);
        out->dump_cpu = split_of(c0, c1, src, dst, tool);
    }
    unlink(cnf);
    bench_write_defaults(cnf, master_port_of(dst));
    snprintf(log, sizeof log, "%s/myloader.log", Tmpdir);
    snprintf(port, sizeof port, "%d", master_port_of(dst));
    {
        const char *argv[] = {"myloader", "--defaults-file", cnf, "-h", "127.0.0.1", "-P",
                              port, "-u", HARNESS_ADMIN_USER, "-t", t, "-e", "-d", dir,
                              "-v", "1", NULL};
        cpu_servers(c0);
        tw[1] = now();
        out->load_s = bench_run_tool(argv, log, &tool);
        cpu_servers(c1);
        out->load_cpu = split_of(c0, c1, src, dst, tool);
        tw[2] = now();
        sync_standby(master_port_of(dst), standby_port_of(dst));
        out->standby_lag = now() - tw[2];
    }
    unlink(cnf);
    out->rows = count_rows(dst, "db", 0, 1);
    bench_rm_tree(dir);
    drop_dbs(dst, "db", 0, 1);
    note("mydumper [%.3f, %.3f], myloader [%.3f, %.3f]", tw[0], tw[0] + out->dump_s, tw[1],
         tw[1] + out->load_s);
    note("mydumper MySQL%03d %.2f s (CPU s: mydumper %.2f, source %.2f) + myloader MySQL%03d "
         "%.2f s (CPU s: myloader %.2f, target %.2f, target standby %.2f), %lld rows, target "
         "standby %.2f s behind",
         src, out->dump_s, out->dump_cpu.client, out->dump_cpu.src, dst, out->load_s,
         out->load_cpu.client, out->load_cpu.dst, out->load_cpu.dst_standby, out->rows,
         out->standby_lag);
}

/* ------------------------------------------------------------ LOAD DATA */

/* One TSV file per data table of shards 0-1 (LOAD DATA's default format). */
static long long export_tsv(int pair)
{
    MYSQL *my = raw_connect_admin(master_port_of(pair), CONNECT_TIMEOUT, false);
    long long rows = 0;

    execf(my, "SET SESSION time_zone = '+00:00'");
    for (unsigned s = 0; s <= 1; s++)
        for (int t = 0; t < NDATA; t++) {
            char path[PATH_MAX + 64], sql[200];
            MYSQL_RES *res;
            MYSQL_ROW row;
            FILE *f;

            snprintf(path, sizeof path, "%s/db%05u.%s.tsv", Tmpdir, s, DATA_TABLES[t]);
            if (!(f = fopen(path, "we")))
                die("%s: %s", path, strerror(errno));
            snprintf(sql, sizeof sql, "SELECT local_id, data, updated_at FROM `db%05u`.`%s`"
                     " ORDER BY 1", s, DATA_TABLES[t]);
            if (mysql_query(my, sql) || !(res = mysql_use_result(my)))
                die("%s: %s", sql, mysql_error(my));
            while ((row = mysql_fetch_row(res))) {
                unsigned long *len = mysql_fetch_lengths(res);
                for (unsigned i = 0; i < 3; i++) {
                    if (i)
                        fputc('\t', f);
                    if (!row[i]) {
                        fputs("\\N", f);
                        continue;
                    }
                    for (unsigned long k = 0; k < len[i]; k++) {
                        char c = row[i][k];
                        switch (c) {
                        case '\\': fputs("\\\\", f); break;
                        case '\t': fputs("\\t", f); break;
                        case '\n': fputs("\\n", f); break;
                        case '\0': fputs("\\0", f); break;
                        default: fputc(c, f);
                        }
                    }
                }
                fputc('\n', f);
                rows++;
            }
            if (mysql_errno(my))
                die("export: %s", mysql_error(my));
            mysql_free_result(res);
            if (fclose(f) != 0)
                die("%s: %s", path, strerror(errno));
        }
    mysql_close(my);
    return rows;
}

typedef struct ldjob {
    MYSQL *my;
    char sql[PATH_MAX + 256];
    pthread_barrier_t *go;
    pthread_t thread;
} ldjob;

static void *ld_main(void *arg)
{
    ldjob *j = arg;
    pthread_barrier_wait(j->go);
    exec_len(j->my, j->sql, strlen(j->sql));
    return NULL;
}

typedef struct ldres {
    double s, standby_lag;
    long long rows;
    cpusplit cpu;
} ldres;

/* LOAD DATA LOCAL INFILE of the TSV files into empty copies (ld00000,
 * ld00001) of the data tables on pair dst's master, one connection per
 * table (THREADS of them), binary log on. */
static void load_data(int src, int dst, ldres *out)
{
    MYSQL *s = raw_connect_admin(master_port_of(src), CONNECT_TIMEOUT, false);
    MYSQL *d = raw_connect_admin(master_port_of(dst), CONNECT_TIMEOUT, false);
    ldjob jobs[THREADS];
    pthread_barrier_t go;
    int n = 0;
    double t0, c0[5], c1[5], self0;

    for (unsigned sh = 0; sh <= 1; sh++) {
        execf(d, "CREATE DATABASE `ld%05u` CHARACTER SET utf8mb4", sh);
        execf(d, "USE `ld%05u`", sh);
        for (int t = 0; t < NDATA; t++) {
            char sql[200];
            MYSQL_RES *res;
            MYSQL_ROW row;
            snprintf(sql, sizeof sql, "SHOW CREATE TABLE `db%05u`.`%s`", sh, DATA_TABLES[t]);
            if (mysql_query(s, sql) || !(res = mysql_store_result(s)) ||
                !(row = mysql_fetch_row(res)))
                die("%s: %s", sql, mysql_error(s));
            exec_len(d, row[1], strlen(row[1]));
            mysql_free_result(res);
        }
    }
    mysql_close(s);
    mysql_close(d);
    sync_standby(master_port_of(dst), standby_port_of(dst));

    pthread_barrier_init(&go, NULL, THREADS + 1);
    for (unsigned sh = 0; sh <= 1; sh++)
        for (int t = 0; t < NDATA; t++, n++) {
            jobs[n].my = raw_connect_admin(master_port_of(dst), CONNECT_TIMEOUT, true);
            jobs[n].go = &go;
            execf(jobs[n].my, "SET SESSION time_zone = '+00:00'");
            snprintf(jobs[n].sql, sizeof jobs[n].sql,
                     "LOAD DATA LOCAL INFILE '%s/db%05u.%s.tsv' INTO TABLE `ld%05u`.`%s`"
                     " CHARACTER SET utf8mb4 (local_id, data, updated_at)",
                     Tmpdir, sh, DATA_TABLES[t], sh, DATA_TABLES[t]);
            pthread_create(&jobs[n].thread, NULL, ld_main, &jobs[n]);
        }
    cpu_servers(c0);
    self0 = cpu_self();
    pthread_barrier_wait(&go);
    t0 = now();
    for (int i = 0; i < n; i++)
        pthread_join(jobs[i].thread, NULL);
    out->s = now() - t0;
    cpu_servers(c1);
    out->cpu = split_of(c0, c1, src, dst, cpu_self() - self0);
    {
        double t1 = now();
        sync_standby(master_port_of(dst), standby_port_of(dst));
        out->standby_lag = now() - t1;
    }
    for (int i = 0; i < n; i++)
        mysql_close(jobs[i].my);
    pthread_barrier_destroy(&go);
    out->rows = count_rows(dst, "ld", 0, 1);
    drop_dbs(dst, "ld", 0, 1);
    note("LOAD DATA -> MySQL%03d: %lld rows in %.2f s [%.3f, %.3f] (CPU s: target %.2f, "
         "target standby %.2f, client %.2f), target standby %.2f s behind", dst, out->rows,
         out->s, t0, t0 + out->s, out->cpu.dst, out->cpu.dst_standby, out->cpu.client,
         out->standby_lag);
}

/* ------------------------------------------------------------ cut-over writers */

typedef struct wcall {
    double t0, t1;
} wcall;

typedef struct writer {
    shard_ctx *ctx;
    unsigned shards[2];
    volatile int *stop;
    wcall *calls;
    long n;
    int errors;
    char err[256];
    pthread_t thread;
} writer;

static void *write_loop(void *arg)
{
    writer *w = arg;
    uint64_t rng = 0xC0FFEEull + w->shards[0];

    for (long i = 0; !*w->stop && w->n < MAX_CALLS; i++) {
        unsigned s = w->shards[i % 2];
        char json[256];
        size_t len = make_json(json, sizeof json, s, (unsigned long)i, &rng);
        uint64_t id;
        double t0 = now();
        int rc = shard_object_create(w->ctx, 1, s, json, len, &id);
        w->calls[w->n].t0 = t0;
        w->calls[w->n].t1 = now();
        w->n++;
        if (rc) {
            w->errors++;
            snprintf(w->err, sizeof w->err, "%s: %s", shard_strerror(rc), shard_errmsg());
        }
        /* A steady application load, not a flood: the target's single
         * replication applier must be able to keep up (libshard-move(7)). */
        sleep_s(WRITER_PAUSE_S);
    }
    return NULL;
}

/* ------------------------------------------------------------ main */

static double maxd(double a, double b) { return a > b ? a : b; }

/* "a/b/c" of n values */
static const char *list(char *buf, size_t size, const double *v, int n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%.2f", i ? "/" : "", v[i]);
    return buf;
}

/* Wait until both standbys have applied their masters' work. */
static void settle(void)
{
    sync_standby(Port[1], Port[2]);
    sync_standby(Port[3], Port[4]);
}

/* The servers of harness H: ports and pids of s1..s<2 npairs>. */
static void servers_of(int npairs)
{
    for (int k = 1; k <= 2 * npairs; k++) {
        char name[8], path[PATH_MAX + 32];
        snprintf(name, sizeof name, "s%d", k);
        if ((Port[k] = harness_port(H, name)) < 0)
            die("no port for %s", name);
        snprintf(path, sizeof path, "%s/%s/mariadbd.pid", harness_dir(H), name);
        Srv_pid[k] = read_pid(path);
    }
}

/* copy-vs-myloader, copy-vs-loaddata, cutover-pause-ms and mover-rss: one
 * run on two pairs of their own. */
static void copy_benches(bool have_mydumper)
{
    shard_ctx *ctx = NULL;
    shard_options so = SHARD_OPTIONS_INIT;
    moveres mv[MAX_ROUNDS], mv_small, mv_cut;
    dumpres dl[MAX_ROUNDS];
    ldres ld[MAX_ROUNDS];
    long long tsv_rows;
    long small_rows;
    int rounds = DEFAULT_ROUNDS;

    if (getenv("BENCH_MOVE_ROWS"))
        Big_rows = atol(getenv("BENCH_MOVE_ROWS")) / (4 * RSS_FACTOR) * (4 * RSS_FACTOR);
    if (Big_rows < 4 * RSS_FACTOR)
        die("BENCH_MOVE_ROWS too small");
    if (getenv("BENCH_MOVE_ROUNDS"))
        rounds = atoi(getenv("BENCH_MOVE_ROUNDS"));
    if (rounds < 1 || rounds > MAX_ROUNDS)
        die("BENCH_MOVE_ROUNDS must be 1..%d", MAX_ROUNDS);
    small_rows = Big_rows / RSS_FACTOR;

    if (!(H = harness_start_ex(2, 4, 2)))
        die("cannot start the servers");
    note("servers in %s", harness_dir(H));
    servers_of(2);
    so.refresh_interval_ms = 0; /* moves are followed through the fence alone */
    if (harness_open_admin(H, &ctx, &so))
        die("open: %s", shard_errmsg());
    if (shard_schema_apply(ctx, NULL, NULL))
        die("schema: %s", shard_errmsg());

    {
        double t0 = now();
        load(1, 0, 1, Big_rows);
        load(2, 2, 3, small_rows);
        settle();
        note("loaded %ld rows on shards 0-1 (MySQL001), %ld on shards 2-3 (MySQL002) "
             "in %.1f s", Big_rows, small_rows, now() - t0);
    }
    tsv_rows = export_tsv(1);

    /* Even rounds: the tools copy MySQL001 -> MySQL002, then the move does.
     * Odd rounds: the move brings the rows back first, then the tools run.
     * (ABBA, so that drift on a shared machine falls on both sides.) The
     * tools always read MySQL001 and write MySQL002; the moves go both ways
     * (the pairs are configured alike). */
    for (int r = 0; r < rounds; r++) {
        if (r % 2 == 1) {
            move_child(0, 1, 1, &mv[r]);
            settle();
        }
        load_data(1, 2, &ld[r]);
        settle();
        if (have_mydumper) {
            dump_and_load(1, 2, &dl[r]);
            settle();
        }
        if (r % 2 == 0) {
            move_child(0, 1, 2, &mv[r]);
            settle();
        }
    }
    if (rounds % 2 == 1) { /* shards 0-1 back home, for a tidy end state */
        moveres back;
        move_child(0, 1, 1, &back);
        settle();
    }

    /* 1x for the RSS ratio: shards 2-3, a tenth of the rows. */
    move_child(2, 3, 1, &mv_small);
    settle();

    /* Cut-over under writes: shards 2-3 back to MySQL002 while two threads of
     * one application context create objects on them (only when its line is
     * asked for: the copy lines do not depend on it). */
    if (bench_selected("cutover-pause-ms")) {
        shard_ctx *app = NULL;
        writer w[WRITERS];
        volatile int stop = 0;
        double worst_cut = 0, worst_all = 0, t_fen, t_flip, t_mv0, t_mv1;
        long ops = 0, in_window = 0;
        int errors = 0;
        char lasterr[256] = "";

        if (shard_ctx_open(&app, harness_map_path(H), &so))
            die("open: %s", shard_errmsg());
        for (int i = 0; i < WRITERS; i++) {
            w[i] = (writer){app, {2 + (unsigned)i % 2, 3 - (unsigned)i % 2}, &stop, NULL, 0, 0,
                            "", 0};
            if (!(w[i].calls = malloc(MAX_CALLS * sizeof *w[i].calls)))
                die("out of memory");
            pthread_create(&w[i].thread, NULL, write_loop, &w[i]);
        }
        sleep_s(0.5);
        t_mv0 = now();
        move_child(2, 3, 2, &mv_cut);
        t_mv1 = now();
        sleep_s(0.5);
        stop = 1;
        for (int i = 0; i < WRITERS; i++)
            pthread_join(w[i].thread, NULL);
        t_fen = mv_cut.t_phase[SHARD_MOVE_FENCED];
        t_flip = mv_cut.t_phase[SHARD_MOVE_FLIPPED];
        if (t_fen == 0 || t_flip == 0)
            die("the cut-over move reported no fenced/flipped phase");
        for (int i = 0; i < WRITERS; i++) {
            errors += w[i].errors;
            if (w[i].errors)
                snprintf(lasterr, sizeof lasterr, "%s", w[i].err);
            for (long k = 0; k < w[i].n; k++) {
                const wcall *c = &w[i].calls[k];
                double d = c->t1 - c->t0;
                if (c->t1 < t_mv0 || c->t0 > t_mv1)
                    continue;
                ops++;
                worst_all = maxd(worst_all, d);
                /* in flight at any moment between the fence and the flip
                 * (a write the fence caught ends after the flip) */
                if (c->t0 <= t_flip && c->t1 >= t_fen) {
                    in_window++;
                    worst_cut = maxd(worst_cut, d);
                }
            }
            free(w[i].calls);
        }
        shard_ctx_free(app);
        if (bench_selected("cutover-pause-ms")) {
            printf("bench cutover-pause-ms value=%.1f (worst shard_object_create among %ld calls "
                   "of %d writer threads (one context, %.0f ms apart) in flight between the fence "
                   "and the map flip; report.pause_ms %.1f, fence attempts %u, cut-over %.3f s; "
                   "during the whole %.2f s move of %llu rows: %ld creates, worst %.1f ms, "
                   "%d errors%s%s; target <= 500)\n",
                   worst_cut * 1000, in_window, WRITERS, WRITER_PAUSE_S * 1000, mv_cut.r.pause_ms,
                   mv_cut.r.fence_attempts, mv_cut.r.cutover_seconds, t_mv1 - t_mv0,
                   (unsigned long long)mv_cut.r.rows_copied, ops, worst_all * 1000, errors,
                   errors ? ", last: " : "", lasterr);
        }
        if (errors)
            die("%d writer errors during the move; last: %s", errors, lasterr);
    }

    {
        double copy[MAX_ROUNDS], tools[MAX_ROUNDS], dump[MAX_ROUNDS], myl[MAX_ROUNDS],
            lds[MAX_ROUNDS], mc = 0, ms = 0, mt = 0, mst = 0, mcl = 0;
        /* the same, until the target's standby also had every row */
        double copy_sb[MAX_ROUNDS], tools_sb[MAX_ROUNDS], lds_sb[MAX_ROUNDS], lead[MAX_ROUNDS];
        double copy_med, src_cpu = 0, dst_cpu = 0, sb_cpu = 0;
        char b1[128], b2[128], b3[128], b4[128];

        for (int r = 0; r < rounds; r++) {
            int dst = r % 2 == 0 ? 2 : 1, src = 3 - dst;
            const double *c0 = mv[r].cpu_copy0, *c1 = mv[r].cpu_copy1;
            copy[r] = mv[r].r.copy_seconds;
            copy_sb[r] = copy[r] + mv[r].standby_lag;
            lead[r] = mv[r].t_first_rows - mv[r].t_phase[SHARD_MOVE_COPYING];
            lds[r] = ld[r].s;
            lds_sb[r] = lds[r] + ld[r].standby_lag;
            if (mv[r].r.rows_copied != (uint64_t)Big_rows)
                die("round %d: the move copied %llu rows, expected %ld", r,
                    (unsigned long long)mv[r].r.rows_copied, Big_rows);
            if (ld[r].rows != Big_rows || tsv_rows != Big_rows)
                die("LOAD DATA loaded %lld rows of %lld exported, expected %ld", ld[r].rows,
                    tsv_rows, Big_rows);
            if (have_mydumper) {
                if (dl[r].rows != Big_rows)
                    die("myloader loaded %lld rows, expected %ld", dl[r].rows, Big_rows);
                dump[r] = dl[r].dump_s;
                myl[r] = dl[r].load_s;
                tools[r] = dump[r] + myl[r];
                tools_sb[r] = tools[r] + dl[r].standby_lag;
                mt += dl[r].load_cpu.dst / rounds;
                mst += dl[r].load_cpu.dst_standby / rounds;
                ms += dl[r].dump_cpu.src / rounds;
                mcl += (dl[r].dump_cpu.client + dl[r].load_cpu.client) / rounds;
            }
            src_cpu += (c1[2 * src - 1] - c0[2 * src - 1]) / rounds;
            dst_cpu += (c1[2 * dst - 1] - c0[2 * dst - 1]) / rounds;
            sb_cpu += (c1[2 * dst] - c0[2 * dst]) / rounds;
            mc += (c1[0] - c0[0]) / rounds;
        }
        copy_med = median(copy, rounds);

        /* copy-vs-myloader */
        if (!bench_selected("copy-vs-myloader")) {
            /* not asked for */
        } else if (!have_mydumper) {
            printf("bench copy-vs-myloader skipped (install mydumper)\n");
        } else {
            printf("bench copy-vs-myloader ratio=%.2f (median of %d rounds of mydumper + "
                   "myloader (%d threads each, myloader -e: binlog on like the move's writes, "
                   "MySQL001 -> MySQL002) %.2f s / median libshard report.copy_seconds "
                   "(%d copy threads, moves alternating MySQL001 -> MySQL002 and back) %.2f s; "
                   "%ld rows of ~200-byte JSON in 4 of 12 tables; per round mydumper %s s, "
                   "myloader %s s, copy %s s; mean CPU s: mydumper+myloader clients %.2f, "
                   "source %.2f, target %.2f, target standby %.2f vs mover %.2f, source %.2f, "
                   "target %.2f, target standby %.2f; until the target's standby also had "
                   "every row: %.2f s vs %.2f s, ratio %.2f; copy_seconds includes %.2f s "
                   "(median) from the snapshot to the first batch written (the rows estimate, "
                   "then one batch); target >= 1.25)\n",
                   median(tools, rounds) / copy_med, rounds, THREADS, median(tools, rounds),
                   THREADS, copy_med, Big_rows, list(b1, sizeof b1, dump, rounds),
                   list(b2, sizeof b2, myl, rounds), list(b3, sizeof b3, copy, rounds), mcl,
                   ms, mt, mst, mc, src_cpu, dst_cpu, sb_cpu, median(tools_sb, rounds),
                   median(copy_sb, rounds), median(tools_sb, rounds) / median(copy_sb, rounds),
                   median(lead, rounds));
        }

        /* copy-vs-loaddata */
        if (bench_selected("copy-vs-loaddata")) {
            double ldt = 0, ldsb = 0;
            for (int r = 0; r < rounds; r++) {
                ldt += ld[r].cpu.dst / rounds;
                ldsb += ld[r].cpu.dst_standby / rounds;
            }
            printf("bench copy-vs-loaddata ratio=%.2f (median LOAD DATA LOCAL INFILE of the "
                   "same %ld rows into empty copies of the 4 tables on MySQL002, %d "
                   "connections (one per table), binlog on: %.2f s / median libshard "
                   "report.copy_seconds %.2f s (%.0f rows/s); per round LOAD DATA %s s, copy "
                   "%s s; mean CPU s: LOAD DATA target %.2f, target standby %.2f (it applies "
                   "each table's one transaction after its commit) vs copy target %.2f, "
                   "target standby %.2f; until the target's standby also had every row: "
                   "%.2f s vs %.2f s, ratio %.2f; the move was %s; target >= 0.75)\n",
                   median(lds, rounds) / copy_med, Big_rows, THREADS, median(lds, rounds),
                   copy_med, (double)Big_rows / copy_med, list(b1, sizeof b1, lds, rounds),
                   list(b4, sizeof b4, copy, rounds), ldt, ldsb, dst_cpu, sb_cpu,
                   median(lds_sb, rounds), median(copy_sb, rounds),
                   median(lds_sb, rounds) / median(copy_sb, rounds),
                   mv[0].feed[0] ? mv[0].feed : "(not said)");
        }

        /* mover-rss */
        if (bench_selected("mover-rss")) {
            long big = 0;
            for (int r = 0; r < rounds; r++)
                if (mv[r].maxrss_kb > big)
                    big = mv[r].maxrss_kb;
            printf("bench mover-rss ratio=%.2f (peak RSS of the mover child process (wait4 "
                   "ru_maxrss), largest of %d moves of %ld rows (%.0f MB) / one move of %ld "
                   "rows: %ld kB / %ld kB; VmHWM before exit %ld / %ld kB; RSS after opening "
                   "its context %ld kB; %d copy threads, default batch_rows; target about 1)\n",
                   (double)big / (double)mv_small.maxrss_kb, rounds, Big_rows,
                   (double)mv[0].r.bytes_copied / 1e6, small_rows, big, mv_small.maxrss_kb,
                   mv[0].vmhwm_kb, mv_small.vmhwm_kb, mv_small.rss_start_kb, THREADS);
        }
    }

    shard_ctx_free(ctx);
    harness_stop(H);
    H = NULL;
}

/* ------------------------------------------------------------ at Pinterest's scale */

/*
 * move-scale-pause-ms and move-scale-vs-myloader: 3 pairs, 4N open shards
 * of the harness map's 6 tables (0..2N-1 on MySQL001, 2N..4N-1 on
 * MySQL002), MySQL003 empty; shards N..2N-1 hold SCALE_PINS pins each
 * (N = 256 unless BENCH_MOVE_SCALE_SHARDS says otherwise). First mydumper +
 * myloader copy those N databases into MySQL003, and the copy is dropped
 * again; then shard_move moves them there while SCALE_WRITERS threads of
 * one context create, patch and read pins on them.
 */
#define SCALE_SHARDS 256      /* moved */
#define SCALE_PINS 1000       /* per moved shard */
#define SCALE_WRITERS 4
#define SCALE_MAX_CALLS 400000 /* recorded per writer */
#define DROP_QUIET_S 3.0       /* the writers alone before the move: the drop's baseline */

enum { OP_CREATE, OP_PATCH, OP_GET };
static const char *const op_name[] = {"create", "patch", "get"};

typedef struct scall {
    double t0, t1;
    int op;
} scall;

typedef struct swriter {
    shard_ctx *ctx;
    int no;
    unsigned first, n; /* the moved shards */
    volatile int *stop;
    scall *calls;
    long ncalls, rounds;
    int errors;
    char err[256];
    pthread_t thread;
} swriter;

static int scall_done(swriter *w, int op, double t0, int rc)
{
    if (w->ncalls < SCALE_MAX_CALLS)
        w->calls[w->ncalls++] = (scall){t0, now(), op};
    if (rc) {
        w->errors++;
        snprintf(w->err, sizeof w->err, "%s: %s: %s", op_name[op], shard_strerror(rc),
                 shard_errmsg());
    }
    return rc;
}

static void *scale_write_loop(void *arg)
{
    swriter *w = arg;
    uint64_t rng = 0x5DEECE66Dull * (uint64_t)(w->no + 1);

    for (long i = 0; !*w->stop; i++) {
        unsigned s = w->first + (unsigned)(xorshift(&rng) % w->n);
        char json[256], patch[64], *res = NULL, *got = NULL;
        size_t len = make_json(json, sizeof json, s, (unsigned long)i, &rng);
        uint64_t id;
        double t0 = now();

        if (scall_done(w, OP_CREATE, t0, shard_object_create(w->ctx, 1, s, json, len, &id)) == 0) {
            int n = snprintf(patch, sizeof patch, "{\"writer\":%d,\"round\":%ld}", w->no, i);
            t0 = now();
            if (scall_done(w, OP_PATCH, t0,
                           shard_object_patch(w->ctx, id, patch, (size_t)n, &res, NULL)) == 0) {
                t0 = now();
                if (scall_done(w, OP_GET, t0, shard_object_get(w->ctx, id, &got, NULL)) == 0 &&
                    strcmp(got, res) != 0) {
                    w->errors++;
                    snprintf(w->err, sizeof w->err, "get %llu: not the patched object",
                             (unsigned long long)id);
                }
            }
        }
        shard_free(res);
        shard_free(got);
        w->rounds++;
        sleep_s(WRITER_PAUSE_S);
    }
    return NULL;
}

typedef struct scale_load_job {
    int port;
    unsigned first, last;
    pthread_t thread;
} scale_load_job;

static void *scale_load_main(void *arg)
{
    scale_load_job *j = arg;
    MYSQL *my = raw_connect_admin(j->port, CONNECT_TIMEOUT, false);

    for (unsigned s = j->first; s <= j->last; s++) {
        char db[16];
        snprintf(db, sizeof db, "db%05u", s);
        load_pins(my, db, s, SCALE_PINS, INSERT_BATCH);
    }
    mysql_close(my);
    return NULL;
}

/* SCALE_PINS pins on each of shards first..last, on pair 1's master. */
static void scale_load(unsigned first, unsigned last)
{
    scale_load_job jobs[THREADS];
    unsigned n = last - first + 1;

    for (unsigned i = 0; i < THREADS; i++) {
        jobs[i] = (scale_load_job){master_port_of(1), first + i * n / THREADS,
                                   first + (i + 1) * n / THREADS - 1, 0};
        pthread_create(&jobs[i].thread, NULL, scale_load_main, &jobs[i]);
    }
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(jobs[i].thread, NULL);
    sync_standby(master_port_of(1), standby_port_of(1));
}

typedef struct scale_tools_res {
    double dump_s, load_s, standby_lag;
    long long rows;
    cpusplit dump_cpu, load_cpu;
} scale_tools_res;

/* mydumper of shards first..last from pair src's master, myloader into pair
 * dst's (empty) master with the binary log on; then the copy is dropped. */
static void scale_tools(int src, int dst, unsigned first, unsigned last, scale_tools_res *out)
{
    char cnf[PATH_MAX + 16], dir[PATH_MAX + 16], log[PATH_MAX + 16], t[16], port[16];
    size_t cap = 16 + (size_t)(last - first + 1) * 9, len = 0;
    char *regex = malloc(cap);
    double c0[7], c1[7], tool, t0;

    if (!regex)
        die("out of memory");
    /* ^(db00256|db00257|...)[.] : exactly the moved databases */
    len += (size_t)snprintf(regex + len, cap - len, "^(");
    for (unsigned s = first; s <= last; s++)
        len += (size_t)snprintf(regex + len, cap - len, "%sdb%05u", s > first ? "|" : "", s);
    snprintf(regex + len, cap - len, ")[.]");
    snprintf(cnf, sizeof cnf, "%s/my.cnf", Tmpdir);
    snprintf(dir, sizeof dir, "%s/scale-dump", Tmpdir);
    snprintf(t, sizeof t, "%d", THREADS);
    bench_rm_tree(dir);

    bench_write_defaults(cnf, master_port_of(src));
    snprintf(log, sizeof log, "%s/mydumper.log", Tmpdir);
    snprintf(port, sizeof port, "%d", master_port_of(src));
    {
        const char *argv[] = {"mydumper", "--defaults-file", cnf, "-h", "127.0.0.1", "-P",
                              port, "-u", HARNESS_ADMIN_USER, "-t", t, "--trx-consistency-only",
                              "-x", regex, "-o", dir, "-v", "1", NULL};
        for (int k = 1; k <= 6; k++)
            c0[k] = cpu_of(Srv_pid[k]);
        out->dump_s = bench_run_tool(argv, log, &tool);
        for (int k = 1; k <= 6; k++)
            c1[k] = cpu_of(Srv_pid[k]);
        out->dump_cpu = split_of(c0, c1, src, dst, tool);
    }
    unlink(cnf);
    bench_write_defaults(cnf, master_port_of(dst));
    snprintf(log, sizeof log, "%s/myloader.log", Tmpdir);
    snprintf(port, sizeof port, "%d", master_port_of(dst));
    {
        const char *argv[] = {"myloader", "--defaults-file", cnf, "-h", "127.0.0.1", "-P",
                              port, "-u", HARNESS_ADMIN_USER, "-t", t, "-e", "-d", dir,
                              "-v", "1", NULL};
        for (int k = 1; k <= 6; k++)
            c0[k] = cpu_of(Srv_pid[k]);
        out->load_s = bench_run_tool(argv, log, &tool);
        for (int k = 1; k <= 6; k++)
            c1[k] = cpu_of(Srv_pid[k]);
        out->load_cpu = split_of(c0, c1, src, dst, tool);
        t0 = now();
        sync_standby(master_port_of(dst), standby_port_of(dst));
        out->standby_lag = now() - t0;
    }
    unlink(cnf);
    free(regex);
    out->rows = count_rows(dst, "db", first, last);
    bench_rm_tree(dir);
    note("mydumper %.2f s + myloader %.2f s of %u databases (%lld rows) MySQL%03d -> "
         "MySQL%03d, target standby %.2f s behind; dropping the copy", out->dump_s,
         out->load_s, last - first + 1, out->rows, src, dst, out->standby_lag);
    drop_dbs(dst, "db", first, last);
}

static double scale_phase_t[SHARD_MOVE_ABORTED + 1];

/* The mover's log in the scale run: where each phase's time goes (its
 * debug-level "... in S s" lines) and every warning. */
static void scale_log(int level, const char *message, void *payload)
{
    (void)payload;
    size_t n = strlen(message);
    if (level <= SHARD_LOG_WARN || (n > 2 && strcmp(message + n - 2, " s") == 0))
        note("scale mover: %s", message);
}

static void scale_phase(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)total;
    (void)payload;
    if (phase >= 0 && phase <= SHARD_MOVE_ABORTED && scale_phase_t[phase] == 0) {
        scale_phase_t[phase] = now();
        note("scale move: %s", shard_move_phase_name(phase));
    }
}

/* The q-quantile of v[0..n) (sorted in place), n >= 1. */
static double quantile(double *v, long n, double q)
{
    long i;

    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    i = (long)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

static void scale_bench(bool have_mydumper)
{
    unsigned nmoved = SCALE_SHARDS, first, last, open;
    shard_options so = SHARD_OPTIONS_INIT;
    shard_move_options mo = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_ctx *app = NULL, *mover = NULL;
    scale_tools_res tr = {0}, trw = {0};
    swriter w[SCALE_WRITERS];
    volatile int stop = 0;
    double t_mv0, t_mv1, t0, t_flip, c0[7], c1[7], worst = 0, worst_cut = 0, *d;
    double t_q0, t_drop1, *dq, *dd;
    shard_move_report dr = SHARD_MOVE_REPORT_INIT;
    long ncalls = 0, nd = 0, in_window = 0, nq = 0, ndrop = 0;
    int rc, drc = 0, errors = 0, worst_op = OP_CREATE;
    char lasterr[256] = "";

    if (getenv("BENCH_MOVE_SCALE_SHARDS"))
        nmoved = (unsigned)atoi(getenv("BENCH_MOVE_SCALE_SHARDS"));
    if (nmoved < 1 || nmoved > 4096)
        die("BENCH_MOVE_SCALE_SHARDS must be 1..4096");
    first = nmoved;
    last = 2 * nmoved - 1;
    open = 4 * nmoved;

    t0 = now();
    if (!(H = harness_start_serving(3, 2, (int)open, 4)))
        die("cannot start the servers");
    note("scale: servers in %s", harness_dir(H));
    servers_of(3);
    so.refresh_interval_ms = 0; /* the writers follow the move through the fence alone */
    if (shard_ctx_open(&app, harness_map_path(H), &so))
        die("open: %s", shard_errmsg());
    so.log_level = SHARD_LOG_DEBUG;
    so.log = scale_log;
    if (harness_open_admin(H, &mover, &so))
        die("open: %s", shard_errmsg());
    if (shard_schema_apply(mover, NULL, NULL))
        die("schema: %s", shard_errmsg());
    note("scale: servers and schema of %u shards x 6 tables on 2 pairs in %.1f s", open,
         now() - t0);
    t0 = now();
    scale_load(first, last);
    sync_standby(master_port_of(2), standby_port_of(2));
    note("scale: %u pins on each of shards %u-%u (MySQL001) in %.1f s", SCALE_PINS, first,
         last, now() - t0);

    if (have_mydumper && bench_selected("move-scale-vs-myloader"))
        scale_tools(1, 3, first, last, &tr);

    for (int i = 0; i < SCALE_WRITERS; i++) {
        w[i] = (swriter){app, i, first, nmoved, &stop, NULL, 0, 0, 0, "", 0};
        if (!(w[i].calls = malloc(SCALE_MAX_CALLS * sizeof *w[i].calls)))
            die("out of memory");
        pthread_create(&w[i].thread, NULL, scale_write_loop, &w[i]);
    }
    sleep_s(0.5);
    /* The same tools again, under the writers the move runs under (they
     * write to the dumped shards on the source meanwhile). */
    if (have_mydumper && bench_selected("move-scale-vs-myloader-under-writers"))
        scale_tools(1, 3, first, last, &trw);
    mo.copy_threads = THREADS;
    mo.progress = scale_phase;
    r = (shard_move_report)SHARD_MOVE_REPORT_INIT;
    /* The writers alone for a while: what the drop's window is held against. */
    t_q0 = now();
    sleep_s(DROP_QUIET_S);
    for (int k = 1; k <= 6; k++)
        c0[k] = cpu_of(Srv_pid[k]);
    c0[0] = cpu_self();
    t_mv0 = now();
    rc = shard_move(mover, first, last, "MySQL003", &mo, &r, NULL);
    t_mv1 = now();
    for (int k = 1; k <= 6; k++)
        c1[k] = cpu_of(Srv_pid[k]);
    c1[0] = cpu_self();
    if (rc)
        snprintf(lasterr, sizeof lasterr, "%s", shard_errmsg());
    /* Done: the source's copies dropped after it, the writers still on,
     * as shardctl move does right after printing done. */
    if (rc == 0 && (drc = shard_move_resume(mover, r.move_id, &mo, &dr)))
        snprintf(lasterr, sizeof lasterr, "%s", shard_errmsg());
    t_drop1 = now();
    sleep_s(0.5);
    stop = 1;
    for (int i = 0; i < SCALE_WRITERS; i++)
        pthread_join(w[i].thread, NULL);
    if (rc)
        die("move %u-%u -> MySQL003: %s (%s)", first, last, shard_strerror(rc), lasterr);
    if (r.phase != SHARD_MOVE_DONE || r.mismatches)
        die("the scale move ended in phase %s with %llu mismatches",
            shard_move_phase_name(r.phase), (unsigned long long)r.mismatches);
    if (drc || !dr.source_dropped)
        die("dropping the source after the move: %s (%s)", shard_strerror(drc), lasterr);

    for (int i = 0; i < SCALE_WRITERS; i++)
        ncalls += w[i].ncalls;
    if (!(d = malloc((size_t)(ncalls ? ncalls : 1) * sizeof *d)) ||
        !(dq = malloc((size_t)(ncalls ? ncalls : 1) * sizeof *dq)) ||
        !(dd = malloc((size_t)(ncalls ? ncalls : 1) * sizeof *dd)))
        die("out of memory");
    /* The pause: report.pause_ms up to the flip (the "fenced" progress call
     * comes only once the fence holds). */
    t_flip = scale_phase_t[SHARD_MOVE_FLIPPED];
    for (int i = 0; i < SCALE_WRITERS; i++) {
        errors += w[i].errors;
        if (w[i].errors)
            snprintf(lasterr, sizeof lasterr, "%s", w[i].err);
        for (long k = 0; k < w[i].ncalls; k++) {
            const scall *c = &w[i].calls[k];
            double dt = c->t1 - c->t0;
            if (c->t0 >= t_q0 && c->t1 < t_mv0)
                dq[nq++] = dt;
            else if (c->t0 > t_mv1 && c->t1 <= t_drop1)
                dd[ndrop++] = dt;
            if (c->t1 < t_mv0 || c->t0 > t_mv1)
                continue;
            d[nd++] = dt;
            if (dt > worst) {
                worst = dt;
                worst_op = c->op;
            }
            if (t_flip > 0 && c->t0 <= t_flip && c->t1 >= t_flip - r.pause_ms / 1000) {
                in_window++;
                worst_cut = maxd(worst_cut, dt);
            }
        }
        free(w[i].calls);
    }
    if (nd == 0)
        die("no writer call during the move");
    if (nq == 0 || ndrop == 0)
        die("no writer call before the move (%ld) or during the drop (%ld)", nq, ndrop);

    {
        const double *ph = scale_phase_t;
        double p999 = quantile(d, nd, 0.999), p99 = quantile(d, nd, 0.99);
        double plan_s = ph[SHARD_MOVE_COPYING] ? ph[SHARD_MOVE_COPYING] - t_mv0 : 0;
        double clean_s = ph[SHARD_MOVE_CLEANING] ? t_mv1 - ph[SHARD_MOVE_CLEANING] : 0;

        if (bench_selected("move-scale-pause-ms"))
            printf("bench move-scale-pause-ms value=%.1f (the worst of %ld calls (create, "
                   "patch, get; a %s) of %d writer threads of one context, %.0f ms apart, "
                   "during the whole %.1f s move of shards %u-%u (%u shards x 6 tables = %llu "
                   "tables, %llu rows) from MySQL001 to the empty MySQL003, 3 pairs, %u open "
                   "shards; p99.9 %.1f ms, p99 %.1f ms; %ld calls in flight during the pause "
                   "(report.pause_ms up to the map flip), worst %.1f ms; report.pause_ms %.1f, fence attempts %u, "
                   "cut-over %.3f s; %d errors%s%s; target <= 250)\n",
                   worst * 1000, nd, op_name[worst_op], SCALE_WRITERS, WRITER_PAUSE_S * 1000,
                   t_mv1 - t_mv0, first, last, nmoved, (unsigned long long)r.tables,
                   (unsigned long long)r.rows_copied, open, p999 * 1000, p99 * 1000,
                   in_window, worst_cut * 1000, r.pause_ms, r.fence_attempts,
                   r.cutover_seconds, errors, errors ? ", last: " : "", lasterr);
        if (bench_selected("move-scale-drop")) {
            double q999 = quantile(dq, nq, 0.999), q99 = quantile(dq, nq, 0.99);
            double x999 = quantile(dd, ndrop, 0.999), x99 = quantile(dd, ndrop, 0.99);
            printf("bench move-scale-drop ratio=%.2f (the writers' p99.9 during the paced drop "
                   "of the source's %u databases after the move was done / in the %.1f s "
                   "before the move: %.1f ms / %.1f ms; p99 %.1f ms / %.1f ms; %ld / %ld "
                   "calls; the move done %.2f s after it started, the source dropped %.2f s "
                   "after that (one database at a time, each followed by a rest as long as "
                   "it took); target about 1)\n",
                   q999 > 0 ? x999 / q999 : 0, nmoved, DROP_QUIET_S, x999 * 1000, q999 * 1000,
                   x99 * 1000, q99 * 1000, ndrop, nq, t_mv1 - t_mv0, t_drop1 - t_mv1);
        }
        if (!bench_selected("move-scale-vs-myloader")) {
            /* not asked for */
        } else if (!have_mydumper) {
            printf("bench move-scale-vs-myloader skipped (install mydumper)\n");
        } else {
            if (tr.rows != (long long)nmoved * SCALE_PINS)
                die("myloader loaded %lld rows, expected %u", tr.rows, nmoved * SCALE_PINS);
            printf("bench move-scale-vs-myloader ratio=%.2f (mydumper %.2f s + myloader %.2f s "
                   "of the same %u databases (%lld rows; %d threads each, myloader -e: binlog "
                   "on) from MySQL001 into the empty MySQL003 = %.2f s / the whole shard_move "
                   "%.2f s (%d copy threads, under the %d writers): planning %.2f s, copy "
                   "%.2f s, catch-up %.2f s, cut-over %.3f s, verify %.2f s, cleanup %.2f s "
                   "(the source's drop after done: %.2f s more); "
                   "%llu rows copied, %llu verified; CPU s: mydumper+myloader clients %.2f, "
                   "source %.2f, target %.2f, target standby %.2f vs this process (mover and "
                   "writers) %.2f, source %.2f, target %.2f, target standby %.2f; tools until "
                   "the target's standby also had every row %.2f s; target >= 1.0)\n",
                   (tr.dump_s + tr.load_s) / (t_mv1 - t_mv0), tr.dump_s, tr.load_s, nmoved,
                   tr.rows, THREADS, tr.dump_s + tr.load_s, t_mv1 - t_mv0, THREADS,
                   SCALE_WRITERS, plan_s, r.copy_seconds, r.catchup_seconds,
                   r.cutover_seconds, r.verify_seconds, clean_s, t_drop1 - t_mv1,
                   (unsigned long long)r.rows_copied, (unsigned long long)r.rows_verified,
                   tr.dump_cpu.client + tr.load_cpu.client, tr.dump_cpu.src + tr.load_cpu.src,
                   tr.dump_cpu.dst + tr.load_cpu.dst,
                   tr.dump_cpu.dst_standby + tr.load_cpu.dst_standby, c1[0] - c0[0],
                   c1[1] - c0[1], c1[5] - c0[5], c1[6] - c0[6],
                   tr.dump_s + tr.load_s + tr.standby_lag);
        }
        if (!bench_selected("move-scale-vs-myloader-under-writers")) {
            /* not asked for */
        } else if (!have_mydumper) {
            printf("bench move-scale-vs-myloader-under-writers skipped (install mydumper)\n");
        } else {
            if (trw.rows < (long long)nmoved * SCALE_PINS)
                die("myloader under the writers loaded %lld rows, expected at least %u",
                    trw.rows, nmoved * SCALE_PINS);
            /* Both sides until the copy is on two servers: the move's done
             * waits for the target's standby, and so do the tools here. */
            double tools = trw.dump_s + trw.load_s + trw.standby_lag;
            printf("bench move-scale-vs-myloader-under-writers ratio=%.2f (the same as "
                   "move-scale-vs-myloader, with mydumper + myloader run while the same %d "
                   "writer threads write to the dumped shards, as during the move, until the "
                   "target's standby had every row, as the move's done waits for it: mydumper "
                   "%.2f s + myloader %.2f s (%lld rows) + target standby %.2f s behind = "
                   "%.2f s / the move's %.2f s (without the standby's lag, as this line was "
                   "before: %.2f s, ratio %.2f); CPU s: "
                   "clients %.2f, source %.2f, target %.2f, target standby %.2f; target >= 1.3 "
                   "on a quiet machine)\n",
                   tools / (t_mv1 - t_mv0), SCALE_WRITERS, trw.dump_s,
                   trw.load_s, trw.rows, trw.standby_lag, tools, t_mv1 - t_mv0,
                   trw.dump_s + trw.load_s, (trw.dump_s + trw.load_s) / (t_mv1 - t_mv0),
                   trw.dump_cpu.client + trw.load_cpu.client, trw.dump_cpu.src + trw.load_cpu.src,
                   trw.dump_cpu.dst + trw.load_cpu.dst,
                   trw.dump_cpu.dst_standby + trw.load_cpu.dst_standby);
        }
    }
    free(d);
    free(dq);
    free(dd);
    shard_ctx_free(mover);
    shard_ctx_free(app);
    harness_stop(H);
    H = NULL;
    if (errors)
        die("%d writer errors during the scale move; last: %s", errors, lasterr);
}

int main(int argc, char **argv)
{
    double t_start = now();
    bool have_mydumper;

    if (argc == 6 && strcmp(argv[1], "--mover") == 0)
        return mover_main(argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_select(argc, argv);
    {
        ssize_t n = readlink("/proc/self/exe", Self, sizeof Self - 1);
        if (n <= 0)
            die("readlink /proc/self/exe: %s", strerror(errno));
        Self[n] = '\0';
    }
    have_mydumper = system("command -v mydumper >/dev/null 2>&1 && "
                           "command -v myloader >/dev/null 2>&1") == 0;
    {
        const char *tmp = getenv("TMPDIR");
        snprintf(Tmpdir, sizeof Tmpdir, "%s/bench_move-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(Tmpdir))
            die("mkdtemp: %s", strerror(errno));
        atexit(cleanup_tmpdir);
    }
    if (bench_selected("copy-vs-myloader") || bench_selected("copy-vs-loaddata") ||
        bench_selected("cutover-pause-ms") || bench_selected("mover-rss"))
        copy_benches(have_mydumper);
    if (bench_selected("move-scale-pause-ms") || bench_selected("move-scale-vs-myloader") ||
        bench_selected("move-scale-vs-myloader-under-writers") ||
        bench_selected("move-scale-drop"))
        scale_bench(have_mydumper);
    cleanup_tmpdir();
    note("total %.1f s", now() - t_start);
    return 0;
}
