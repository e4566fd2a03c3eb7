/*
 * tests/bench_import.c: the first pass of an import from an unsharded
 * database (shard_import_table(3), libshard-import(7)) measured side by
 * side with mydumper + myloader of the same table; an unchanged pass
 * against the first; legacy resolution against multi-get.
 *
 *   bench import-vs-myloader  (mydumper of the legacy table + myloader of it
 *                             into a database of the target pair's master,
 *                             same thread count, myloader -e: binary log on
 *                             like the import's writes; the better of a run
 *                             before the passes and one after) wall time /
 *                             the import's first pass wall time; the detail
 *                             gives the first pass's rows/s and a second,
 *                             unchanged pass's rows/s
 *   bench import-repass-vs-first  a second, unchanged pass's rows/s / the
 *                             first pass's rows/s (the second writes nothing)
 *   bench legacy-resolve-many-vs-mget  shard_legacy_resolve_many of 1000
 *                             legacy ids (a fresh context: no cached
 *                             resolution) per call / shard_object_mget of
 *                             the 1000 native IDs they resolve to, calls/s
 *                             against calls/s, RESOLVE_ROUNDS disjoint sets,
 *                             each set resolved and then fetched
 *
 * Two pairs (16 ID shards, 4 mod shards). The legacy table is pins-like
 * (id INT AUTO_INCREMENT PRIMARY KEY, board_id, title VARCHAR, created_at
 * DATETIME, note TEXT), BENCH_IMPORT_ROWS rows (default 100000), in the
 * database `legacy` on s1 (MySQL001's master, as in tests/server_import.c).
 * The tools copy it from s1 to MySQL002's master (s3), so the source is the
 * same server for both; the import writes its objects over both pairs and
 * its lookup entries over the mod shards. Each side's time ends when the
 * standbys of the pairs it wrote have applied everything (the tools: s4;
 * the import: s2 and s4; bench_sync_standby, over connections of its
 * own), so that neither leaves replication work outside its figure; the figures without that wait are
 * printed too ("unsynced"). Every step starts with the standbys caught up.
 * The notes on stderr give each step's server counters, its bytes from
 * clients (a master also receives its standby's binary log back:
 * master-master), and per resolution call the statements and CPU.
 *
 * Figures only: nothing here is a timed assertion. Exit status 1 means
 * something failed outright (a server, a query, a tool, the import).
 * Arguments or BENCH_ONLY choose the lines to produce (see bench_util.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <libshard.h>
#include <mysql.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define BENCH_NAME "bench_import"
#include "bench_util.h"

#define THREADS 4         /* the import's --threads = mydumper/myloader -t */
#define ID_SHARDS 16      /* 0-7 on MySQL001, 8-15 on MySQL002 */
#define MOD_SHARDS 4
#define DEFAULT_ROWS 100000
#define RESOLVE_N 1000    /* ids per call */
#define RESOLVE_ROUNDS 50 /* disjoint sets of them, each resolved once */

static harness *H;
static char Tmpdir[PATH_MAX];
static char Map_path[PATH_MAX + 32];

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, BENCH_NAME ": [%.3f] ", now());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void cleanup(void)
{
    if (Tmpdir[0]) {
        bench_rm_tree(Tmpdir);
        Tmpdir[0] = '\0';
    }
}



static uint64_t count_of(const char *server, const char *sql)
{
    char *out = NULL;
    uint64_t n;

    if (harness_sql(H, server, sql, &out) != 0)
        die("%s on %s failed", sql, server);
    n = strtoull(out, NULL, 10);
    free(out);
    return n;
}

/* What the servers did during a step (stderr notes: where the time goes):
 * each server's CPU seconds and status counters, as deltas. */
#define NSERVERS 4
static const char *const Counters[] = {"Com_insert", "Com_commit", "Handler_write",
                                       "Innodb_data_fsyncs", "Binlog_bytes_written",
                                       "Bytes_received", "Questions"};
#define NCOUNTERS (sizeof Counters / sizeof *Counters)

typedef struct snap {
    double cpu[NSERVERS], self;
    uint64_t v[NSERVERS][NCOUNTERS];
} snap;

static void snap_take(snap *s)
{
    memset(s, 0, sizeof *s);
    s->self = cpu_self();
    for (int k = 0; k < NSERVERS; k++) {
        char name[8], path[PATH_MAX + 32], sql[600], *out = NULL, *p;
        snprintf(name, sizeof name, "s%d", k + 1);
        snprintf(path, sizeof path, "%s/%s/mariadbd.pid", harness_dir(H), name);
        s->cpu[k] = cpu_of(read_pid(path));
        snprintf(sql, sizeof sql, "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM "
                 "information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN "
                 "('%s','%s','%s','%s','%s','%s','%s')", Counters[0], Counters[1], Counters[2],
                 Counters[3], Counters[4], Counters[5], Counters[6]);
        if (harness_sql(H, name, sql, &out) != 0)
            die("status of %s failed", name);
        for (p = strtok(out, "\n"); p; p = strtok(NULL, "\n")) {
            char *tab = strchr(p, '\t');
            if (!tab)
                continue;
            *tab = '\0';
            for (size_t c = 0; c < NCOUNTERS; c++)
                if (strcasecmp(p, Counters[c]) == 0)
                    s->v[k][c] = strtoull(tab + 1, NULL, 10);
        }
        free(out);
    }
}

static void note_bytes(const char *step, const snap *a, const snap *b, unsigned rows);

/* The step's notes; returns the CPU seconds it took in all: the servers',
 * and this process's (the import) or the tools' (tool_cpu >= 0). */
static double snap_note(const char *step, const snap *a, double tool_cpu, unsigned rows)
{
    snap b;
    char line[1400];
    size_t len = 0;
    double servers = 0, client;

    snap_take(&b);
    note_bytes(step, a, &b, rows);
    client = tool_cpu >= 0 ? tool_cpu : b.self - a->self;
    for (int k = 0; k < NSERVERS; k++) {
        servers += b.cpu[k] - a->cpu[k];
        len = (size_t)snprintf(line, sizeof line, "  s%d CPU %.2f s", k + 1,
                               b.cpu[k] - a->cpu[k]);
        for (size_t c = 0; c < NCOUNTERS && len < sizeof line; c++)
            len += (size_t)snprintf(line + len, sizeof line - len, " %s=%" PRIu64, Counters[c],
                                    b.v[k][c] - a->v[k][c]);
        note("%s", line);
    }
    note("%s: CPU %.2f s in all: %s %.2f s, servers %.2f s", step, client + servers,
         tool_cpu >= 0 ? "tools" : "client", client, servers);
    return client + servers;
}

/* Both pairs' standbys caught up with their masters; the seconds that took. */
static double sync_standbys(void)
{
    double t0 = now();

    for (int p = 1; p <= 2; p++)
        bench_sync_standby(harness_port(H, p == 1 ? "s1" : "s3"),
                           harness_port(H, p == 1 ? "s2" : "s4"), 300);
    return now() - t0;
}

/* The servers' CPU seconds so far (all four). */
static double servers_cpu(void)
{
    double cpu = 0;

    for (int k = 0; k < NSERVERS; k++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/s%d/mariadbd.pid", harness_dir(H), k + 1);
        cpu += cpu_of(read_pid(path));
    }
    return cpu;
}

/*
 * Where a master's Bytes_received come from: its clients, and its standby's
 * binary log (master-master: the standby sends back everything it logged,
 * the master's own events included, which the master then skips). The
 * step's client bytes per server, from the counters' deltas (a, b).
 */
static void note_bytes(const char *step, const snap *a, const snap *b, unsigned rows)
{
    enum { RECV = 5, BINLOG = 4 };
    uint64_t clients = 0;

    for (int k = 0; k < NSERVERS; k += 2) {
        uint64_t recv = b->v[k][RECV] - a->v[k][RECV];
        uint64_t back = b->v[k + 1][BINLOG] - a->v[k + 1][BINLOG];
        uint64_t own = recv > back ? recv - back : 0;
        clients += own;
        note("%s: s%d received %" PRIu64 " bytes: %" PRIu64 " from its standby's binary log, "
             "%" PRIu64 " from clients", step, k + 1, recv, back, own);
    }
    note("%s: %" PRIu64 " bytes from clients in all, %.0f per legacy row", step, clients,
         (double)clients / rows);
}

/* mydumper of legacy.pins from s1, myloader of it into legacy_copy on s3
 * (binary log on), then the wait for s3's standby to apply it (*sync_s:
 * myloader exits with s4 still applying; the figure counts until
 * the target's standby has caught up); the copy is dropped afterwards.
 * Wall seconds of all three. Tools_cpu and the step's notes include the
 * standby's catch-up. */
static double Tools_cpu, Import_cpu;

static double tools(unsigned rows, double *dump_s, double *load_s, double *sync_s)
{
    double dump_cpu = 0, load_cpu = 0;
    snap sn;
    char cnf[PATH_MAX + 16], dir[PATH_MAX + 16], log[PATH_MAX + 16], t[16], port[16];
    uint64_t loaded;

    snprintf(cnf, sizeof cnf, "%s/my.cnf", Tmpdir);
    snprintf(dir, sizeof dir, "%s/dump", Tmpdir);
    snprintf(t, sizeof t, "%d", THREADS);
    bench_rm_tree(dir);

    bench_write_defaults(cnf, harness_port(H, "s1"));
    snprintf(log, sizeof log, "%s/mydumper.log", Tmpdir);
    snprintf(port, sizeof port, "%d", harness_port(H, "s1"));
    {
        const char *argv[] = {"mydumper", "--defaults-file", cnf, "-h", "127.0.0.1", "-P",
                              port, "-u", HARNESS_ADMIN_USER, "-t", t, "--trx-consistency-only",
                              "-x", "^legacy[.]pins$", "-o", dir, "-v", "1", NULL};
        snap_take(&sn);
        *dump_s = bench_run_tool(argv, log, &dump_cpu);
    }
    unlink(cnf);
    bench_write_defaults(cnf, harness_port(H, "s3"));
    snprintf(log, sizeof log, "%s/myloader.log", Tmpdir);
    snprintf(port, sizeof port, "%d", harness_port(H, "s3"));
    {
        const char *argv[] = {"myloader", "--defaults-file", cnf, "-h", "127.0.0.1", "-P",
                              port, "-u", HARNESS_ADMIN_USER, "-t", t, "-e", "-B",
                              "legacy_copy", "-d", dir, "-v", "1", NULL};
        *load_s = bench_run_tool(argv, log, &load_cpu);
        *sync_s = sync_standbys();
        Tools_cpu = snap_note("mydumper + myloader + s4 caught up", &sn, dump_cpu + load_cpu,
                              rows);
    }
    unlink(cnf);
    bench_rm_tree(dir);
    loaded = count_of("s3", "SELECT COUNT(*) FROM legacy_copy.pins");
    if (loaded != rows)
        die("myloader loaded %" PRIu64 " rows, expected %u", loaded, rows);
    note("mydumper %.2f s + myloader %.2f s + s4 catching up %.2f s of %u rows", *dump_s,
         *load_s, *sync_s, rows);
    if (harness_sql(H, "s3", "DROP DATABASE legacy_copy", NULL) != 0)
        die("dropping legacy_copy failed");
    sync_standbys();
    return *dump_s + *load_s + *sync_s;
}

/* The harness's map with a lookup for pins. */
static void write_map(void)
{
    json_t *m = json_load_file(harness_map_path(H), 0, NULL), *legacy;

    if (!m)
        die("cannot read %s", harness_map_path(H));
    json_array_append_new(json_object_get(json_object_get(m, "mod_shards"), "tables"),
                          json_string("legacy_pins"));
    legacy = json_object();
    json_object_set_new(legacy, "pins", json_object());
    json_object_set_new(m, "legacy", legacy);
    snprintf(Map_path, sizeof Map_path, "%s/import-map.json", harness_dir(H));
    if (json_dump_file(m, Map_path, JSON_INDENT(2)) != 0)
        die("cannot write %s", Map_path);
    json_decref(m);
}

static void make_legacy(unsigned rows)
{
    char sql[1600];

    snprintf(sql, sizeof sql,
             "CREATE DATABASE legacy; USE legacy;"
             "CREATE TABLE pins (id INT UNSIGNED PRIMARY KEY AUTO_INCREMENT,"
             " board_id INT UNSIGNED NOT NULL, title VARCHAR(200) CHARACTER SET utf8mb4 NOT NULL,"
             " created_at DATETIME NOT NULL, note TEXT CHARACTER SET utf8mb4);"
             "INSERT INTO pins SELECT seq, 1 + seq %% 977, CONCAT('Pin ', seq, ' of the trip'),"
             " '2021-01-01' + INTERVAL seq MINUTE,"
             " IF(seq %% 5 = 0, NULL, CONCAT('Lorem ipsum dolor sit amet, consectetur adipiscing"
             " elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua ', seq))"
             " FROM seq_1_to_%u", rows);
    if (harness_sql(H, "s1", sql, NULL) != 0)
        die("creating the legacy table failed");
}

static shard_import_report import_pass(shard_ctx *ctx, unsigned type, const char *url)
{
    shard_import_options o = SHARD_IMPORT_OPTIONS_INIT;
    shard_import_report r = SHARD_IMPORT_REPORT_INIT;

    o.source = url;
    o.table = "pins";
    o.type = type;
    o.threads = THREADS;
    if (shard_import_table(ctx, &o, &r) != 0)
        die("import: %s", shard_errmsg());
    return r;
}

/* resolve_many of RESOLVE_ROUNDS disjoint sets of RESOLVE_N legacy ids, on
 * a fresh context (nothing cached), against mget of the IDs they give. */
static void resolve_vs_mget(const shard_options *so, unsigned type, unsigned rows)
{
    uint64_t *legacy = calloc(RESOLVE_N, sizeof *legacy);
    uint64_t *ids = calloc((size_t)RESOLVE_N * RESOLVE_ROUNDS, sizeof *ids);
    double resolve_s = 0, mget_s = 0, t0;
    double cpu[2][2] = {{0, 0}, {0, 0}}; /* [resolve, mget][client, servers] */
    unsigned rounds = RESOLVE_ROUNDS;
    shard_ctx *ctx;

    if (rows < RESOLVE_N * rounds)
        rounds = rows / RESOLVE_N;
    if (shard_ctx_open(&ctx, Map_path, so) != 0)
        die("open: %s", shard_errmsg());
    /* Warm both paths' connections and statements first. */
    legacy[0] = 1;
    if (shard_legacy_resolve_many(ctx, type, legacy, 1, ids) != 0)
        die("resolve: %s", shard_errmsg());
    shard_ctx_free(ctx);
    if (shard_ctx_open(&ctx, Map_path, so) != 0)
        die("open: %s", shard_errmsg());
    {
        shard_item *items;
        if (shard_object_mget(ctx, ids, 1, &items) != 0)
            die("mget: %s", shard_errmsg());
        shard_items_free(items, 1);
    }
    /* Each round's resolution and then its multi-get, so that both meet
     * the machine's other load alike. */
    for (unsigned r = 0; r < rounds; r++) {
        shard_item *items;
        /* ids r+1, r+1+rounds, ...: spread over the table, disjoint per round */
        for (unsigned i = 0; i < RESOLVE_N; i++)
            legacy[i] = 1 + r + (uint64_t)i * rounds;
        double c0 = cpu_self(), s0 = servers_cpu();
        t0 = now();
        if (shard_legacy_resolve_many(ctx, type, legacy, RESOLVE_N,
                                      ids + (size_t)r * RESOLVE_N) != 0)
            die("resolve: %s", shard_errmsg());
        resolve_s += now() - t0;
        cpu[0][0] += cpu_self() - c0;
        cpu[0][1] += servers_cpu() - s0;
        c0 = cpu_self();
        s0 = servers_cpu();
        t0 = now();
        if (shard_object_mget(ctx, ids + (size_t)r * RESOLVE_N, RESOLVE_N, &items) != 0)
            die("mget: %s", shard_errmsg());
        mget_s += now() - t0;
        cpu[1][0] += cpu_self() - c0;
        cpu[1][1] += servers_cpu() - s0;
        for (unsigned i = 0; i < RESOLVE_N; i++)
            if (items[i].status != 0)
                die("mget: object %u of round %u: status %d", i, r, items[i].status);
        shard_items_free(items, RESOLVE_N);
    }
    /* Statements per call and the bytes they carry, from one more call of
     * each (warm connections) on legacy ids no round asked for (nothing
     * cached), when the table has them. */
    if (rows >= RESOLVE_N * (rounds + 1)) {
        snap a, b, c;
        shard_item *items;
        for (unsigned i = 0; i < RESOLVE_N; i++)
            legacy[i] = 1 + (uint64_t)RESOLVE_N * rounds + i;
        snap_take(&a);
        if (shard_legacy_resolve_many(ctx, type, legacy, RESOLVE_N, ids) != 0)
            die("resolve: %s", shard_errmsg());
        snap_take(&b);
        if (shard_object_mget(ctx, ids, RESOLVE_N, &items) != 0)
            die("mget: %s", shard_errmsg());
        snap_take(&c);
        shard_items_free(items, RESOLVE_N);
        for (int k = 0; k < NSERVERS; k += 2) /* Questions (6), Bytes_received (5) */
            note("one call on s%d: resolve_many %" PRIu64 " statements, %" PRIu64 " bytes in; "
                 "mget %" PRIu64 " statements, %" PRIu64 " bytes in (the counters' own "
                 "query included in each)", k + 1, b.v[k][6] - a.v[k][6],
                 b.v[k][5] - a.v[k][5], c.v[k][6] - b.v[k][6], c.v[k][5] - b.v[k][5]);
        note("per call, CPU ms: resolve_many client %.2f servers %.2f; mget client %.2f "
             "servers %.2f", cpu[0][0] * 1e3 / rounds, cpu[0][1] * 1e3 / rounds,
             cpu[1][0] * 1e3 / rounds, cpu[1][1] * 1e3 / rounds);
    }
    printf("bench legacy-resolve-many-vs-mget ratio=%.2f (shard_legacy_resolve_many of %d "
           "legacy ids, nothing cached: %.0f calls/s; shard_object_mget of the %d IDs: %.0f "
           "calls/s; %u rounds each, 2 pairs, %d mod shards)\n",
           mget_s / resolve_s, RESOLVE_N, rounds / resolve_s, RESOLVE_N, rounds / mget_s,
           rounds, MOD_SHARDS);
    shard_ctx_free(ctx);
    free(legacy);
    free(ids);
}

int main(int argc, char **argv)
{
    shard_options so = SHARD_OPTIONS_INIT;
    shard_import_report r1 = SHARD_IMPORT_REPORT_INIT, r2 = SHARD_IMPORT_REPORT_INIT;
    shard_ctx *ctx = NULL;
    shard_map *map;
    unsigned rows = DEFAULT_ROWS, type = 0;
    double dump_s = 0, load_s = 0, sync_s = 0, tools_s, t0, pass1_s, pass2_s, sync1_s, sync2_s;
    bool have_mydumper;
    char url[200];
    uint64_t objects = 0;
    snap sn;

    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_select(argc, argv);
    if (!bench_selected("import-vs-myloader") && !bench_selected("import-repass-vs-first") &&
        !bench_selected("legacy-resolve-many-vs-mget"))
        return 0;
    have_mydumper = system("command -v mydumper >/dev/null 2>&1 && "
                           "command -v myloader >/dev/null 2>&1") == 0;
    if (!have_mydumper && bench_selected("import-vs-myloader"))
        printf("bench import-vs-myloader skipped (install mydumper)\n");
    if (getenv("BENCH_IMPORT_ROWS"))
        rows = (unsigned)strtoul(getenv("BENCH_IMPORT_ROWS"), NULL, 10);
    if (rows < 1000 || rows > 10000000)
        die("BENCH_IMPORT_ROWS must be 1000..10000000");
    {
        const char *tmp = getenv("TMPDIR");
        snprintf(Tmpdir, sizeof Tmpdir, "%s/bench_import-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(Tmpdir))
            die("mkdtemp: %s", strerror(errno));
        atexit(cleanup);
    }
    if (!(H = harness_start_ex(2, ID_SHARDS, MOD_SHARDS)))
        die("could not start the servers");
    note("servers in %s", harness_dir(H));
    write_map();
    make_legacy(rows);
    harness_admin_options(&so);
    so.refresh_interval_ms = 0;
    if (shard_ctx_open(&ctx, Map_path, &so) != 0 || shard_schema_apply(ctx, NULL, NULL) != 0)
        die("set-up: %s", shard_errmsg());
    if (shard_ctx_map(ctx, &map) != 0 || shard_map_type_of(map, "pins", &type) != 0)
        die("no type pins: %s", shard_errmsg());
    shard_map_free(map);
    snprintf(url, sizeof url, "mysql://%s@127.0.0.1:%d/legacy", HARNESS_ADMIN_USER,
             harness_port(H, "s1"));
    sync_standbys();
    /* The wait's own cost (the harness asks each server through its
     * client), which both sides' figures include. */
    note("a wait for standbys already caught up: %.2f s", sync_standbys());

    if (have_mydumper && bench_selected("import-vs-myloader"))
        tools_s = tools(rows, &dump_s, &load_s, &sync_s);
    else
        tools_s = 0;

    snap_take(&sn);
    t0 = now();
    r1 = import_pass(ctx, type, url);
    pass1_s = now() - t0;
    sync1_s = sync_standbys(); /* both pairs': the import writes on both */
    Import_cpu = snap_note("first pass + standbys caught up", &sn, -1, rows);
    if (r1.created != rows)
        die("the first pass created %" PRIu64 " objects, expected %u", r1.created, rows);
    note("first pass %.2f s + standbys catching up %.2f s: %" PRIu64 " new", pass1_s, sync1_s,
         r1.created);
    snap_take(&sn);
    t0 = now();
    r2 = import_pass(ctx, type, url);
    pass2_s = now() - t0;
    sync2_s = sync_standbys();
    snap_note("unchanged pass", &sn, -1, rows);
    if (r2.unchanged != rows || r2.created || r2.changed || r2.deleted)
        die("the second pass was not clean: %" PRIu64 " new, %" PRIu64 " changed, %" PRIu64
            " deleted", r2.created, r2.changed, r2.deleted);
    for (int s = 0; s < ID_SHARDS; s++) {
        char sql[100];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05d.pins", s);
        objects += count_of(s < ID_SHARDS / 2 ? "s1" : "s3", sql);
    }
    if (objects != rows)
        die("%" PRIu64 " objects on the shards, expected %u", objects, rows);

    if (tools_s > 0) {
        /* The tools once more, after the passes, on the same servers: the
         * better of the two runs is the baseline (the best the tools do
         * there, whatever the machine's other load did meanwhile). */
        double d2, l2, s2, cpu1 = Tools_cpu, t2 = tools(rows, &d2, &l2, &s2);
        note("tools: %.2f s before the passes, %.2f s after", tools_s, t2);
        if (t2 < tools_s) {
            tools_s = t2;
            dump_s = d2;
            load_s = l2;
            sync_s = s2;
        } else {
            Tools_cpu = cpu1;
        }
    }
    /* Each side's time ends when the target's standbys have caught up
     * (the tools: s4; the import: s2 and s4). The figures without that
     * wait (until the last client call returned) follow as "unsynced". */
    if (tools_s > 0)
        printf("bench import-vs-myloader ratio=%.2f (mydumper %.2f s + myloader %.2f s + s4 "
               "catching up %.2f s = %.2f s (%d threads each, myloader -e: binlog on) / import "
               "first pass %.2f s + standbys catching up %.2f s = %.2f s (%d threads) of %u "
               "rows into %d shards on 2 pairs: first pass %.0f rows/s, tools %.0f rows/s; "
               "unsynced (no standby wait) ratio=%.2f, %.2f s / %.2f s; second (unchanged) "
               "pass %.2f s, %.0f rows/s; CPU seconds, the four servers' included: tools %.2f, "
               "first pass %.2f)\n",
               tools_s / (pass1_s + sync1_s), dump_s, load_s, sync_s, tools_s, THREADS, pass1_s,
               sync1_s, pass1_s + sync1_s, THREADS, rows, ID_SHARDS, rows / (pass1_s + sync1_s),
               rows / tools_s, (dump_s + load_s) / pass1_s, dump_s + load_s, pass1_s,
               pass2_s + sync2_s, rows / (pass2_s + sync2_s), Tools_cpu, Import_cpu);
    if (bench_selected("import-repass-vs-first"))
        printf("bench import-repass-vs-first ratio=%.2f (an unchanged pass %.0f rows/s (%.2f s + "
               "standbys %.2f s, nothing written) / the first pass %.0f rows/s (%.2f s + "
               "standbys catching up %.2f s), %u rows, %d threads, 16 shards on 2 pairs; "
               "unsynced ratio=%.2f)\n", (pass1_s + sync1_s) / (pass2_s + sync2_s),
               rows / (pass2_s + sync2_s), pass2_s, sync2_s, rows / (pass1_s + sync1_s), pass1_s,
               sync1_s, rows, THREADS, pass1_s / pass2_s);
    if (bench_selected("legacy-resolve-many-vs-mget"))
        resolve_vs_mget(&so, type, rows);
    shard_ctx_free(ctx);
    harness_stop(H);
    return 0;
}
