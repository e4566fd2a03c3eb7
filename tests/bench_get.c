/*
 * tests/bench_get.c: single-object reads through libshard, side by side with
 * the same reads through raw libmariadb and with sysbench oltp_point_select,
 * on one throwaway pair started here.
 *
 *   (get-vs-raw, against prepared statements, is in tests/bench_hot.c)
 *   bench get-vs-sysbench    shard_object_get / sysbench oltp_point_select, 2 threads
 *
 * Both sides of a ratio run against the same server, in alternating short
 * rounds (A B B A ...) so that noise on a shared machine falls on both alike;
 * medians are reported, with the CPU time per read of client and server,
 * which noise disturbs far less than throughput. Figures only: nothing here
 * is a timed assertion. Exit status 1 means something failed outright (a
 * server, a query, sysbench itself). BENCH_VERBOSE=1 prints every round.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <libshard.h>
#include <mysql.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define BENCH_NAME "bench_get"
#include "bench_util.h"

extern char **environ;

#define SHARDS 4          /* ID shards on the one pair */
#define PINS_PER_SHARD 5000
#define PIN_TYPE 1        /* "pins" in the harness map */
#define INSERT_BATCH 500  /* rows per multi-row INSERT while loading */
#define CONNECT_TIMEOUT 10 /* seconds, raw libmariadb connections */
#define MAX_THREADS 2
#define MAX_ROUNDS 256

#define RAW_ROUNDS 200    /* per thread count, per side */
#define RAW_SECONDS 0.025
#define SB_ROUNDS 6
#define SB_TEXT_ROUNDS 4
#define SB_SECONDS 1      /* sysbench --time takes whole seconds */
#define SB_THREADS 2

static harness *H;
static bool Verbose; /* BENCH_VERBOSE=1: every round's figures on stderr */
static char Sbdir[600]; /* private: sysbench's option file (password) and output */

/* ------------------------------------------------------------ helpers */

static pid_t Server_pid; /* s1's mariadbd, for its CPU time */

/* CPU seconds (user + system) the server has used; 0 if unknown. */
static double cpu_server(void)
{
    return cpu_of(Server_pid);
}

/* ------------------------------------------------------------ timed phases */

enum side { LIBSHARD, RAW };

/* One side of a comparison, and what it has used over all its slices. */
typedef struct phase {
    enum side side;
    shard_ctx *ctx;
    MYSQL **raw;             /* RAW: one connection per thread */
    char (*dbs)[32];         /* RAW: database name of each shard */
    const uint64_t *ids;
    size_t nids;
    uint64_t ops;
    double client_cpu, server_cpu;
} phase;

typedef struct crew crew;

typedef struct worker {
    crew *crew;
    int idx;
    pthread_t thread;
    uint64_t ops;
    char err[512];
} worker;

/*
 * Reader threads that live as long as a comparison and run one side at a
 * time, all together, for slices that the main thread starts and stops:
 * sides can alternate every fraction of a second at no thread start cost.
 */
struct crew {
    int n;
    phase *cur;              /* the side of this slice */
    uint64_t seed;           /* the same IDs for both sides of a round */
    bool quit;
    atomic_bool stop;
    pthread_barrier_t go, done;
    worker w[MAX_THREADS];
};

static int lib_get(shard_ctx *ctx, uint64_t id)
{
    char *json;
    size_t len;
    int rc = shard_object_get(ctx, id, &json, &len);

    if (rc == 0)
        shard_free(json);
    return rc;
}

/* What an application would do without libshard: the same statement text. */
static int raw_get(MYSQL *my, const char *db, uint64_t id)
{
    char q[128];
    int n = snprintf(q, sizeof q, "SELECT data FROM `%s`.`pins` WHERE local_id = %llu", db,
                     (unsigned long long)shard_id_local(id));
    MYSQL_RES *res;
    MYSQL_ROW row;
    int found;

    if (mysql_real_query(my, q, (unsigned long)n) || !(res = mysql_store_result(my)))
        return -1;
    row = mysql_fetch_row(res);
    found = row && row[0] && mysql_fetch_lengths(res)[0] > 0;
    mysql_free_result(res);
    return found ? 0 : -2;
}

static void read_until_stopped(worker *w, const phase *ph, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + (uint64_t)w->idx * 7919 + 1;

    while (!w->err[0] && !atomic_load_explicit(&w->crew->stop, memory_order_relaxed)) {
        uint64_t id = ph->ids[xorshift(&x) % ph->nids];
        int rc = ph->side == LIBSHARD ? lib_get(ph->ctx, id)
                                      : raw_get(ph->raw[w->idx], ph->dbs[shard_id_shard(id)], id);
        if (rc == 0)
            w->ops++;
        else if (ph->side == LIBSHARD)
            snprintf(w->err, sizeof w->err, "shard_object_get(%llu): %s",
                     (unsigned long long)id, shard_errmsg());
        else
            snprintf(w->err, sizeof w->err, "raw SELECT of %llu: %s", (unsigned long long)id,
                     rc == -2 ? "no row" : mysql_error(ph->raw[w->idx]));
    }
}

static void *work(void *arg)
{
    worker *w = arg;
    crew *c = w->crew;

    for (;;) {
        pthread_barrier_wait(&c->go);
        if (c->quit)
            return NULL;
        read_until_stopped(w, c->cur, c->seed);
        pthread_barrier_wait(&c->done);
    }
}

static void crew_start(crew *c, int n)
{
    c->n = n;
    c->quit = false;
    pthread_barrier_init(&c->go, NULL, (unsigned)n + 1);
    pthread_barrier_init(&c->done, NULL, (unsigned)n + 1);
    for (int i = 0; i < n; i++) {
        c->w[i] = (worker){.crew = c, .idx = i};
        if (pthread_create(&c->w[i].thread, NULL, work, &c->w[i]) != 0)
            die("pthread_create failed");
    }
}

static void crew_stop(crew *c)
{
    c->quit = true;
    pthread_barrier_wait(&c->go);
    for (int i = 0; i < c->n; i++)
        pthread_join(c->w[i].thread, NULL);
    pthread_barrier_destroy(&c->go);
    pthread_barrier_destroy(&c->done);
}

/* One slice of about `seconds` of side ph; reads per second. */
static double run_slice(crew *c, phase *ph, uint64_t seed, double seconds)
{
    double t0, t1, c0, c1, s0, s1;
    uint64_t ops = 0;

    c->cur = ph;
    c->seed = seed;
    atomic_store(&c->stop, false);
    for (int i = 0; i < c->n; i++)
        c->w[i].ops = 0;
    c0 = cpu_self();
    s0 = cpu_server();
    t0 = now();
    pthread_barrier_wait(&c->go);
    sleep_s(seconds);
    atomic_store(&c->stop, true);
    pthread_barrier_wait(&c->done);
    t1 = now();
    c1 = cpu_self();
    s1 = cpu_server();
    for (int i = 0; i < c->n; i++) {
        if (c->w[i].err[0])
            die("%s", c->w[i].err);
        ops += c->w[i].ops;
    }
    ph->ops += ops;
    ph->client_cpu += c1 - c0;
    ph->server_cpu += s1 - s0;
    return (double)ops / (t1 - t0);
}

/* ------------------------------------------------------------ sysbench */

/*
 * A private option file, so that the password is on no command line: in a
 * mode 0700 directory inside the harness's own (mode 0700) directory, which
 * goes away with the servers however this program ends.
 */
static void sysbench_options(int port, char *path, size_t size)
{
    const char *pw = getenv("LIBSHARD_PASSWORD");
    FILE *f;
    int fd;

    snprintf(Sbdir, sizeof Sbdir, "%s/bench", harness_dir(H));
    if (mkdir(Sbdir, 0700) != 0)
        die("%s: %s", Sbdir, strerror(errno));
    snprintf(path, size, "%s/sysbench.cnf", Sbdir);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || !(f = fdopen(fd, "w")))
        die("%s: %s", path, strerror(errno));
    /* sysbench's own database is not the application's: the operators' account. */
    fprintf(f, "mysql-host=127.0.0.1\nmysql-port=%d\nmysql-user=" HARNESS_ADMIN_USER "\n"
               "mysql-password=%s\nmysql-db=sbtest\n", port, pw ? pw : "");
    if (fclose(f) != 0)
        die("%s: %s", path, strerror(errno));
}

/* Run sysbench with the option file; its combined output into *out (malloc'd),
 * the CPU seconds it used into *cpu (may be NULL). */
static int sysbench(const char *cnf, const char *const *args, char **out, double *cpu)
{
    posix_spawn_file_actions_t fa;
    struct rusage ru;
    char outpath[700], cfgarg[800];
    const char *argv[32];
    int n = 0, st, rc;
    pid_t pid;
    FILE *f;
    long size;

    snprintf(outpath, sizeof outpath, "%s/sysbench.out", Sbdir);
    snprintf(cfgarg, sizeof cfgarg, "--config-file=%s", cnf);
    argv[n++] = "sysbench";
    argv[n++] = cfgarg;
    while (*args && n < 31)
        argv[n++] = *args++;
    argv[n] = NULL;
    /* posix_spawn, not fork: the reader threads are alive meanwhile. */
    if ((rc = posix_spawn_file_actions_init(&fa)) ||
        (rc = posix_spawn_file_actions_addopen(&fa, 1, outpath, O_WRONLY | O_CREAT | O_TRUNC,
                                               0600)) ||
        (rc = posix_spawn_file_actions_adddup2(&fa, 1, 2)) ||
        (rc = posix_spawnp(&pid, "sysbench", &fa, NULL, (char *const *)argv, environ)))
        die("cannot run sysbench: %s", strerror(rc));
    posix_spawn_file_actions_destroy(&fa);
    while (wait4(pid, &st, 0, &ru) < 0)
        if (errno != EINTR)
            die("wait4: %s", strerror(errno));
    if (cpu)
        *cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    *out = NULL;
    if ((f = fopen(outpath, "r"))) {
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        rewind(f);
        if ((*out = calloc(1, (size_t)(size > 0 ? size : 0) + 1)))
            (void)!fread(*out, 1, (size_t)(size > 0 ? size : 0), f);
        fclose(f);
    }
    if (!*out && !(*out = calloc(1, 1)))
        die("out of memory");
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void sysbench_prepare(const char *cnf, unsigned rows)
{
    char size[32], *out;
    const char *args[] = {"oltp_point_select", "--tables=1", size, "prepare", NULL};

    snprintf(size, sizeof size, "--table-size=%u", rows);
    if (sysbench(cnf, args, &out, NULL) != 0)
        die("sysbench prepare failed:\n%s", out);
    free(out);
}

/* CPU time of sysbench runs, totalled like a phase's. */
typedef struct sb_totals {
    uint64_t queries;
    double client_cpu, server_cpu;
} sb_totals;

/* Queries per second of one timed sysbench run. */
static double sysbench_run(const char *cnf, int threads, int seconds, unsigned rows,
                           bool prepared, sb_totals *tot)
{
    char t[32], s[32], size[32], *out, *p;
    const char *args[] = {"oltp_point_select", "--tables=1", size, t, s,
                          "--rand-type=uniform",
                          prepared ? "--db-ps-mode=auto" : "--db-ps-mode=disable", "run", NULL};
    unsigned long long queries;
    double qps, cpu, s0 = cpu_server();

    snprintf(t, sizeof t, "--threads=%d", threads);
    snprintf(s, sizeof s, "--time=%d", seconds);
    snprintf(size, sizeof size, "--table-size=%u", rows);
    if (sysbench(cnf, args, &out, &cpu) != 0)
        die("sysbench run failed:\n%s", out);
    tot->server_cpu += cpu_server() - s0;
    tot->client_cpu += cpu;
    /* "    queries:                             123456 (41152.00 per sec.)" */
    if (!(p = strstr(out, "queries:")) ||
        sscanf(p, "queries: %llu (%lf per sec.)", &queries, &qps) != 2)
        die("cannot read sysbench's queries per second from:\n%s", out);
    tot->queries += queries;
    free(out);
    return qps;
}

/* ------------------------------------------------------------ benchmarks */

/*
 * Rounds of both sides back to back, in the order A B B A A B ... so that a
 * drift in the machine's load falls on both sides alike; a round's ratio
 * compares two neighbouring measurements. Medians of everything.
 */
typedef double (*measure_fn)(void *arg, int round);

typedef struct duel {
    double ratio, a, b; /* medians: of a/b per round, of a, of b */
} duel;

static duel interleave(int rounds, measure_fn fa, void *aa, measure_fn fb, void *ab,
                       const char *label)
{
    double a[MAX_ROUNDS], b[MAX_ROUNDS], r[MAX_ROUNDS];

    for (int k = 0; k < rounds && k < MAX_ROUNDS; k++) {
        if (k % 4 == 0 || k % 4 == 3) {
            a[k] = fa(aa, k);
            b[k] = fb(ab, k);
        } else {
            b[k] = fb(ab, k);
            a[k] = fa(aa, k);
        }
        r[k] = a[k] / b[k];
        if (Verbose)
            fprintf(stderr, "%s round %d: %.0f vs %.0f (%.2f)\n", label, k, a[k], b[k], r[k]);
    }
    return (duel){median(r, rounds), median(a, rounds), median(b, rounds)};
}

typedef struct slice {
    crew *crew;
    phase *ph;
    double seconds;
} slice;

static double measure_slice(void *arg, int round)
{
    slice *s = arg;
    return run_slice(s->crew, s->ph, (uint64_t)(s->crew->n * 1000 + round + 1), s->seconds);
}

typedef struct sb_slice {
    const char *cnf;
    int threads;
    unsigned rows;
    bool prepared;
    sb_totals tot;
} sb_slice;

static double measure_sysbench(void *arg, int round)
{
    sb_slice *s = arg;
    (void)round;
    return sysbench_run(s->cnf, s->threads, SB_SECONDS, s->rows, s->prepared, &s->tot);
}

/* Microseconds of CPU per operation. */
static double per_op(double cpu, uint64_t ops)
{
    return ops ? cpu * 1e6 / (double)ops : 0;
}

static void reset_totals(phase *ph)
{
    ph->ops = 0;
    ph->client_cpu = ph->server_cpu = 0;
}

/*
 * sysbench as it runs by default (prepared statements: the binary protocol,
 * no parsing per query), and, to tell the protocol from the rest, with plain
 * text statements as libshard sends them.
 */
static void bench_get_vs_sysbench(phase *lib, const char *cnf, unsigned rows)
{
    crew c;
    slice sl = {&c, lib, SB_SECONDS};
    sb_slice ps = {.cnf = cnf, .threads = SB_THREADS, .rows = rows, .prepared = true};
    sb_slice text = {.cnf = cnf, .threads = SB_THREADS, .rows = rows, .prepared = false};
    double lib_client, lib_server;
    uint64_t lib_ops;
    duel d, dt;

    crew_start(&c, SB_THREADS);
    reset_totals(lib);
    d = interleave(SB_ROUNDS, measure_slice, &sl, measure_sysbench, &ps, "get-vs-sysbench");
    lib_ops = lib->ops;
    lib_client = lib->client_cpu;
    lib_server = lib->server_cpu;
    dt = interleave(SB_TEXT_ROUNDS, measure_slice, &sl, measure_sysbench, &text,
                    "get-vs-sysbench-text");
    crew_stop(&c);
    printf("bench get-vs-sysbench ratio=%.2f (%d threads: libshard %.0f gets/s, sysbench "
           "oltp_point_select %.0f queries/s on a %u-row table, uniform keys, prepared "
           "statements; CPU per read, client+server: libshard %.1f+%.1f us, sysbench "
           "%.1f+%.1f us; against sysbench with text statements (--db-ps-mode=disable): "
           "ratio %.2f, %.0f queries/s, CPU %.1f+%.1f us; medians of %d and %d interleaved "
           "%d s rounds per side, ratios the median of the rounds' ratios; target >= "
           "0.80)\n",
           d.ratio, SB_THREADS, d.a, d.b, rows, per_op(lib_client, lib_ops),
           per_op(lib_server, lib_ops), per_op(ps.tot.client_cpu, ps.tot.queries),
           per_op(ps.tot.server_cpu, ps.tot.queries), dt.ratio, dt.b,
           per_op(text.tot.client_cpu, text.tot.queries),
           per_op(text.tot.server_cpu, text.tot.queries), SB_ROUNDS, SB_TEXT_ROUNDS,
           SB_SECONDS);
    fflush(stdout);
}

/* Pins on every shard (IDs into ids, database names into dbs) and sysbench's
 * table of as many rows, replicated and in the buffer pool. Returns how many. */
static size_t load(const shard_map *map, int port, const char *cnf, uint64_t *ids,
                   char (*dbs)[32])
{
    MYSQL *my = raw_connect_admin(port, CONNECT_TIMEOUT, false); /* sbtest is not a shard */
    size_t nids = 0;

    for (unsigned s = 0; s < SHARDS; s++) {
        if (shard_map_database(map, s, dbs[s], sizeof dbs[s]))
            die("shard_map_database(%u): %s", s, shard_errmsg());
        load_pins(my, dbs[s], s, PINS_PER_SHARD, INSERT_BATCH);
        for (unsigned l = 1; l <= PINS_PER_SHARD; l++)
            if (shard_id_make(s, PIN_TYPE, l, &ids[nids++]))
                die("shard_id_make(%u, %u, %u) failed", s, PIN_TYPE, l);
    }
    raw_exec(my, "CREATE DATABASE IF NOT EXISTS sbtest", 36);
    sysbench_prepare(cnf, (unsigned)nids);
    wait_standby(H, "s1", 1, "s2");
    for (unsigned s = 0; s < SHARDS; s++) {
        char q[128];
        int n = snprintf(q, sizeof q, "SELECT SUM(LENGTH(data)) FROM `%s`.`pins`", dbs[s]);
        raw_exec(my, q, (size_t)n);
    }
    raw_exec(my, "SELECT SUM(LENGTH(c)) FROM sbtest.sbtest1", 41);
    mysql_close(my);
    return nids;
}

int main(void)
{
    static uint64_t ids[SHARDS * PINS_PER_SHARD];
    static char dbs[SHARDS][32];
    MYSQL *raw[MAX_THREADS];
    shard_ctx *ctx = NULL;
    shard_map *map = NULL;
    char cnf[700], path[600];
    size_t nids;
    int port;
    crew c;

    Verbose = getenv("BENCH_VERBOSE") && *getenv("BENCH_VERBOSE") == '1';
    if (!(H = harness_start_ex(1, SHARDS, 4)))
        die("cannot start the servers");
    port = harness_port(H, "s1");
    snprintf(path, sizeof path, "%s/s1/mariadbd.pid", harness_dir(H));
    Server_pid = read_pid(path);
    bench_map_lease(H, 10000); /* reads skip the fence, as in bench_hot */
    if (harness_schema_apply(H) || shard_ctx_open(&ctx, harness_map_path(H), NULL) ||
        shard_ctx_map(ctx, &map))
        die("setting up libshard: %s", shard_errmsg());
    sysbench_options(port, cnf, sizeof cnf);
    nids = load(map, port, cnf, ids, dbs);

    for (int i = 0; i < MAX_THREADS; i++)
        raw[i] = raw_connect(port, CONNECT_TIMEOUT, false);
    phase lib = {.side = LIBSHARD, .ctx = ctx, .ids = ids, .nids = nids};
    phase rawp = {.side = RAW, .raw = raw, .dbs = dbs, .ids = ids, .nids = nids};
    /* Warm-up of both code paths and libshard's pool. */
    crew_start(&c, MAX_THREADS);
    run_slice(&c, &lib, 1, 0.3);
    run_slice(&c, &rawp, 1, 0.3);
    crew_stop(&c);

    bench_get_vs_sysbench(&lib, cnf, (unsigned)nids);

    for (int i = 0; i < MAX_THREADS; i++)
        mysql_close(raw[i]);
    shard_map_free(map);
    shard_ctx_free(ctx);
    harness_stop(H); /* removes the option file too */
    return 0;
}
