/*
 * The rebalancer against real pairs: a skewed 3-pair cluster (every ID
 * shard, and all the data, on the first pair) whose dry-run plan changes
 * nothing; a rebalance stopped after its first move (a stop from the step
 * callback) that a second run (shardctl rebalance --yes) finishes, leaving
 * every pair within the threshold and every row verified and readable; a
 * drain interrupted by SIGINT and continued, leaving the pair serving
 * nothing; planning by writes, refused while userstat is off; no plan
 * while a move is unfinished.
 */
/* The objects written through the library; set up in main, outside any
 * test, where nothing may assert: fill() stops at LEDGER_MAX itself. */
#define LEDGER_MAX 200
#define LEDGER_DROP_WHEN_FULL
#include "check_util.h"
#include "harness.h"
#include "move_util.h"
#include "run_cmd.h"

#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHARDS 12
#define HEAVY 6         /* shards 0..HEAVY-1 get most of the data */
#define HEAVY_ROWS 1000
#define LIGHT_ROWS 50
#define THRESHOLD "0.15"

static harness *h;
static shard_ctx *ctx; /* the operator's (shardadmin): schema, plans, moves */
static shard_ctx *app; /* the application's (the map's account): its rows */
static uint64_t rows_expected; /* pins rows, every shard */
static double spread_first;    /* of the first plan */

static int shard_dbs(const char *server)
{
    char *out = sql_ok(h, server, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE "
                                  "SCHEMA_NAME LIKE 'db%'");
    int n = atoi(out);
    free(out);
    return n;
}

static uint64_t map_version(void)
{
    shard_map *m = NULL;
    uint64_t v;
    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    v = shard_map_version(m);
    shard_map_free(m);
    return v;
}

static unsigned shards_on(const char *pair)
{
    shard_map *m = NULL;
    unsigned n = 0;
    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    for (unsigned s = 0; s < SHARDS; s++) {
        const char *p = NULL;
        ck_assert_int_eq(shard_map_pair_of(m, s, &p), 0);
        n += strcmp(p, pair) == 0;
    }
    shard_map_free(m);
    return n;
}

/* Every row of every shard, read through the library: its "shard" field
 * names the shard its ID says. */
static int scan_one(uint64_t id, const char *json, size_t len, void *payload)
{
    char want[32];
    (void)len;
    snprintf(want, sizeof want, "{\"shard\":%u,", shard_id_shard(id));
    ck_assert_msg(strncmp(json, want, strlen(want)) == 0, "object %llu: %.60s",
                  (unsigned long long)id, json);
    ++*(uint64_t *)payload;
    return 0;
}

static void check_rows(void)
{
    uint64_t n = 0;
    int rc;

    ck_assert_int_eq(shard_ctx_reload(app), 0); /* a scan of the map as published */
    rc = shard_scatter_scan(app, 1, scan_one, &n);
    ck_assert_msg(rc == 0, "scan: %s", shard_errmsg());
    ck_assert_uint_eq(n, rows_expected);
    ledger_check_all(app);
}

/* ---- plans ------------------------------------------------------------------ */

static shard_rebalance *plan_now(const char *drain, unsigned max_moves)
{
    shard_rebalance_options o = SHARD_REBALANCE_OPTIONS_INIT;
    shard_rebalance *p = NULL;
    int rc;

    o.threshold = atof(THRESHOLD);
    o.drain = drain;
    o.max_moves = max_moves;
    rc = shard_rebalance_plan(ctx, &o, &p);
    ck_assert_msg(rc == 0, "plan: %s", shard_errmsg());
    return p;
}

static void print_plan(const char *what, const shard_rebalance *p)
{
    size_t nm, np;
    const shard_rebalance_move *m = shard_rebalance_moves(p, &nm);
    const shard_rebalance_pair *pp = shard_rebalance_pairs(p, &np);
    double before, after;

    shard_rebalance_spread(p, &before, &after);
    printf("%s: %zu moves, spread %.3f -> %.3f\n", what, nm, before, after);
    for (size_t i = 0; i < nm; i++)
        printf("  shards %u-%u %s -> %s, %llu bytes\n", m[i].first, m[i].last, m[i].from,
               m[i].to, (unsigned long long)m[i].bytes);
    for (size_t i = 0; i < np; i++)
        printf("  %s: %u -> %u shards, %llu -> %llu bytes\n", pp[i].name, pp[i].shards_before,
               pp[i].shards_after, (unsigned long long)pp[i].bytes_before,
               (unsigned long long)pp[i].bytes_after);
}

/* Every pair that keeps shards is within the threshold of the mean. */
static void assert_within_threshold(const shard_rebalance *p)
{
    size_t np, nactive = 0;
    const shard_rebalance_pair *pp = shard_rebalance_pairs(p, &np);
    double total = 0, mean, f = atof(THRESHOLD);

    for (size_t i = 0; i < np; i++) {
        total += pp[i].load_before;
        nactive += !pp[i].drained;
    }
    mean = total / (double)nactive;
    for (size_t i = 0; i < np; i++) {
        double dev = pp[i].load_before / mean - 1;
        ck_assert_msg(dev <= f && dev >= -f, "pair %s: %.0f bytes, %.3f off the mean %.0f",
                      pp[i].name, pp[i].load_before, dev, mean);
    }
}

/* ---- tests ------------------------------------------------------------------ */

START_TEST(dry_run_changes_nothing)
{
    uint64_t v = map_version();
    run_spec rs = {harness_map_path(h), NULL, 0, 60};
    run_result r = run_cmd(&rs, ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--threshold", THRESHOLD,
                                     "--dry-run"));
    shard_rebalance *p;

    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "move 1/") && strstr(r.out, "from MySQL001 to MySQL00"), "%s",
                  r.out);
    ck_assert_msg(strstr(r.out, "spread (max - min) / mean: "), "%s", r.out);
    printf("$ shardctl rebalance --threshold %s --dry-run\n%s", THRESHOLD, r.out);
    run_free(&r);
    /* Without --yes it is a plan too. */
    r = run_cmd(&rs, ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--threshold", THRESHOLD));
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "nothing was changed: add --yes"), "%s", r.out);
    run_free(&r);
    ck_assert_uint_eq(map_version(), v);
    ck_assert_int_eq(shard_dbs("s3"), 0);
    ck_assert_int_eq(shard_dbs("s5"), 0);
    ck_assert_uint_eq(shards_on("MySQL001"), SHARDS);

    p = plan_now(NULL, 0);
    print_plan("first plan", p);
    {
        size_t nm;
        shard_rebalance_moves(p, &nm);
        ck_assert_uint_ge(nm, 2);
    }
    shard_rebalance_spread(p, &spread_first, NULL);
    ck_assert_msg(spread_first > 1, "spread %.3f", spread_first);
    shard_rebalance_free(p);
}
END_TEST

/* The step callback: remember each move's report, stop after `stop_after`. */
typedef struct steps {
    size_t stop_after; /* 0: never */
    size_t before, after;
    uint64_t mismatches, verified;
} steps;

static int on_step(const shard_rebalance_move *m, size_t i, size_t n, int rc,
                   const shard_move_report *r, void *payload)
{
    steps *st = payload;
    (void)m;
    (void)n;
    if (!r) {
        ck_assert_uint_eq(i, st->before);
        st->before++;
        return 0;
    }
    ck_assert_msg(rc == 0, "move %zu: %s", i, shard_errmsg());
    ck_assert_int_eq(r->phase, SHARD_MOVE_DONE);
    st->after++;
    st->mismatches += r->mismatches;
    st->verified += r->rows_verified;
    return st->stop_after && st->after >= st->stop_after;
}

/* Count "N mismatches" in shardctl's progress: every move done said 0. */
static void expect_moves_verified(const char *err, size_t *moves)
{
    size_t done = 0, clean = 0;
    for (const char *p = err; (p = strstr(p, "rebalance: move ")); p++) {
        const char *eol = strchr(p, '\n');
        const char *d = strstr(p, " done (move ");
        if (d && (!eol || d < eol)) {
            done++;
            const char *z = strstr(p, " rows verified, 0 mismatches");
            clean += z && (!eol || z < eol);
        }
    }
    ck_assert_uint_eq(done, clean);
    *moves = done;
}

START_TEST(stopped_after_one_move_then_continued)
{
    shard_rebalance_options o = SHARD_REBALANCE_OPTIONS_INIT;
    shard_rebalance *p = plan_now(NULL, 0), *again;
    steps st = {1, 0, 0, 0, 0};
    uint64_t v = map_version();
    size_t nm, done = 0, cli_moves;
    run_spec rs = {harness_map_path(h), NULL, 0, 120};
    run_result r;
    double before, after;
    int rc;

    shard_rebalance_moves(p, &nm);
    ck_assert_uint_ge(nm, 2);
    o.threshold = atof(THRESHOLD);
    o.step = on_step;
    o.payload = &st;
    rc = shard_rebalance_run(ctx, p, &o, &done);
    ck_assert_msg(rc == 0, "run: %s", shard_errmsg());
    ck_assert_uint_eq(done, 1);
    ck_assert_uint_eq(st.after, 1);
    ck_assert_uint_eq(st.mismatches, 0);
    ck_assert_uint_gt(st.verified, 0);
    ck_assert_uint_eq(map_version(), v + 1);
    /* The old plan no longer fits the map. */
    rc = shard_rebalance_run(ctx, p, NULL, &done);
    ck_assert_int_eq(rc, SHARD_ECONFLICT);
    shard_rebalance_free(p);
    check_rows();

    /* A second run plans again from the new state and finishes. */
    r = run_cmd(&rs, ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--threshold", THRESHOLD, "--yes"));
    ck_assert_msg(r.status == 0, "exit %d: %s\n%s", r.status, r.err, r.out);
    ck_assert_msg(strstr(r.out, "rebalanced: "), "%s", r.out);
    printf("$ shardctl rebalance --threshold %s --yes\n%s%s", THRESHOLD, r.out, r.err);
    expect_moves_verified(r.err, &cli_moves);
    ck_assert_uint_ge(cli_moves, 1);
    run_free(&r);
    check_rows();

    /* Balanced: a plan right after proposes nothing. */
    again = plan_now(NULL, 0);
    print_plan("after the rebalance", again);
    shard_rebalance_moves(again, &nm);
    ck_assert_uint_eq(nm, 0);
    assert_within_threshold(again);
    shard_rebalance_spread(again, &before, &after);
    printf("spread before the rebalance %.3f, after %.3f (threshold %s)\n", spread_first,
           before, THRESHOLD);
    shard_rebalance_free(again);
    for (int s = 1; s <= 3; s++) {
        char name[16];
        snprintf(name, sizeof name, "MySQL%03d", s);
        ck_assert_uint_gt(shards_on(name), 0);
    }
    r = run_cmd(&rs, ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--threshold", THRESHOLD, "--yes"));
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "nothing to move: every pair is within the threshold"), "%s",
                  r.out);
    run_free(&r);
}
END_TEST

/* shardctl rebalance in a child, SIGINT once its first move has started.
 * Returns its exit status; *err gets its stderr. */
static int rebalance_interrupted(const char *const *argv, char **err)
{
    int errp[2], wst;
    pid_t pid;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int sent = 0;
    const char *args[32];
    int n = 0;

    args[n++] = shardctl_path();
    for (; *argv; argv++)
        args[n++] = *argv;
    args[n] = NULL;
    ck_assert_int_eq(pipe(errp), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull < 0 || dup2(devnull, 1) < 0 || dup2(errp[1], 2) < 0)
            _exit(126);
        close(errp[0]);
        close(errp[1]);
        setenv("LIBSHARD_MAP", harness_map_path(h), 1);
        execv(args[0], (char *const *)args);
        _exit(127);
    }
    close(errp[1]);
    buf_append(&buf, &len, &cap, "", 0);
    for (;;) {
        char chunk[4096];
        ssize_t k = read(errp[0], chunk, sizeof chunk);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        buf_append(&buf, &len, &cap, chunk, (size_t)k);
        if (!sent && strstr(buf, "rebalance: move 1/")) {
            ck_assert_int_eq(kill(pid, SIGINT), 0);
            sent = 1;
        }
    }
    close(errp[0]);
    while (waitpid(pid, &wst, 0) < 0)
        ck_assert_int_eq(errno, EINTR);
    ck_assert_msg(sent, "the rebalance never started a move: %s", buf);
    *err = buf;
    return WIFEXITED(wst) ? WEXITSTATUS(wst) : -1;
}

START_TEST(drain_interrupted_then_continued)
{
    run_spec rs = {harness_map_path(h), NULL, 0, 120};
    run_result r;
    shard_rebalance *p = plan_now("MySQL003", 0);
    size_t nm, moves;
    char *err = NULL;
    int status;

    print_plan("drain MySQL003", p);
    shard_rebalance_moves(p, &nm);
    ck_assert_uint_ge(nm, 2); /* its shards go to both other pairs */
    shard_rebalance_free(p);

    status = rebalance_interrupted(ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--threshold", THRESHOLD,
                                        "--drain", "MySQL003", "--yes"), &err);
    printf("$ shardctl rebalance --threshold %s --drain MySQL003 --yes  (^C)\n%s", THRESHOLD,
           err);
    ck_assert_msg(status == 1, "exit %d: %s", status, err);
    ck_assert_msg(strstr(err, "stopping after the current move"), "%s", err);
    ck_assert_msg(strstr(err, "stopped after 1 of "), "%s", err);
    ck_assert_msg(strstr(err, "run shardctl rebalance again to continue"), "%s", err);
    expect_moves_verified(err, &moves);
    ck_assert_uint_eq(moves, 1);
    free(err);
    ck_assert_uint_gt(shards_on("MySQL003"), 0);
    check_rows();

    r = run_cmd(&rs, ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--threshold", THRESHOLD, "--drain",
                          "MySQL003", "--yes"));
    ck_assert_msg(r.status == 0, "exit %d: %s\n%s", r.status, r.err, r.out);
    expect_moves_verified(r.err, &moves);
    ck_assert_uint_ge(moves, 1);
    run_free(&r);
    ck_assert_uint_eq(shards_on("MySQL003"), 0);
    ck_assert_int_eq(shard_dbs("s5"), 0);
    check_rows();
    p = plan_now("MySQL003", 0);
    print_plan("after the drain", p);
    shard_rebalance_moves(p, &nm);
    ck_assert_uint_eq(nm, 0);
    shard_rebalance_free(p);
}
END_TEST

/* A writer on the shards of one pair, while the plan samples. */
static atomic_int writing;
static char hot_pair[16];

static void *hot_writer(void *arg)
{
    shard_map *m = NULL;
    unsigned hot[SHARDS], nhot = 0;
    (void)arg;
    ck_assert_int_eq(shard_ctx_reload(app), 0);
    ck_assert_int_eq(shard_ctx_map(app, &m), 0);
    for (unsigned s = 0; s < SHARDS; s++) {
        const char *p;
        if (shard_map_pair_of(m, s, &p) == 0 && strcmp(p, hot_pair) == 0)
            hot[nhot++] = s;
    }
    shard_map_free(m);
    ck_assert_uint_gt(nhot, 0);
    for (unsigned i = 0; atomic_load(&writing); i++) {
        uint64_t id;
        char json[64];
        snprintf(json, sizeof json, "{\"shard\":%u,\"hot\":%u}", hot[i % nhot], i);
        ck_assert_int_eq(shard_object_create(app, 1, hot[i % nhot], json, strlen(json), &id), 0);
        rows_expected++; /* only this thread writes meanwhile */
    }
    return NULL;
}

START_TEST(plan_by_writes)
{
    shard_rebalance_options o = SHARD_REBALANCE_OPTIONS_INIT;
    shard_rebalance *p = NULL;
    const shard_rebalance_move *m;
    pthread_t t;
    size_t nm;
    int rc;

    o.by = SHARD_REBALANCE_BY_WRITES;
    o.sample_ms = 1000;
    rc = shard_rebalance_plan(ctx, &o, &p);
    ck_assert_int_eq(rc, SHARD_ESERVER);
    ck_assert_msg(strstr(shard_errmsg(), "userstat"), "%s", shard_errmsg());
    ck_assert_ptr_null(p);

    for (int s = 1; s <= 5; s += 2) {
        char name[8];
        snprintf(name, sizeof name, "s%d", s);
        free(sql_ok(h, name, "SET GLOBAL userstat = 1"));
    }
    snprintf(hot_pair, sizeof hot_pair, "MySQL002");
    atomic_store(&writing, 1);
    ck_assert_int_eq(pthread_create(&t, NULL, hot_writer, NULL), 0);
    rc = shard_rebalance_plan(ctx, &o, &p);
    atomic_store(&writing, 0);
    pthread_join(t, NULL);
    ck_assert_msg(rc == 0, "plan: %s", shard_errmsg());
    m = shard_rebalance_moves(p, &nm);
    ck_assert_uint_ge(nm, 1);
    ck_assert_str_eq(m[0].from, "MySQL002");
    ck_assert_msg(m[0].writes > 0, "%f", m[0].writes);
    printf("by writes: %zu moves, the first of %.1f writes/s from %s to %s\n", nm, m[0].writes,
           m[0].from, m[0].to);
    shard_rebalance_free(p);
    for (int s = 1; s <= 5; s += 2) {
        char name[8];
        snprintf(name, sizeof name, "s%d", s);
        free(sql_ok(h, name, "SET GLOBAL userstat = 0"));
    }
    check_rows();
}
END_TEST

/* While a move of a considered pair is unfinished, no plan is made: the
 * plan is asked from the move's own progress callback, mid-copy. */
static int busy_rc = 1;
static char busy_msg[512];

static void plan_while_moving(int phase, uint64_t done, uint64_t total, void *payload)
{
    shard_rebalance *p = NULL;
    (void)done;
    (void)total;
    (void)payload;
    if (phase != SHARD_MOVE_COPYING || busy_rc != 1)
        return;
    busy_rc = shard_rebalance_plan(ctx, NULL, &p);
    snprintf(busy_msg, sizeof busy_msg, "%s", shard_errmsg());
    shard_rebalance_free(p);
}

START_TEST(no_plan_while_a_move_is_unfinished)
{
    shard_move_options mo = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_map *m = NULL;
    const char *from = NULL;
    unsigned shard = SHARDS;
    int rc;

    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    for (unsigned s = 0; s < SHARDS && shard == SHARDS; s++)
        if (shard_map_pair_of(m, s, &from) == 0 && strcmp(from, "MySQL001") == 0)
            shard = s;
    shard_map_free(m);
    ck_assert_uint_lt(shard, SHARDS);
    mo.progress = plan_while_moving;
    rc = shard_move(ctx, shard, shard, "MySQL003", &mo, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_eq(busy_rc, SHARD_EBUSY);
    ck_assert_msg(strstr(busy_msg, "unfinished"), "%s", busy_msg);
    check_rows();
}
END_TEST

/* Bad options are refused before anything is measured. */
START_TEST(bad_options)
{
    shard_rebalance_options o = SHARD_REBALANCE_OPTIONS_INIT;
    shard_rebalance *p = NULL;
    run_spec rs = {harness_map_path(h), NULL, 0, 60};
    run_result r;

    o.pairs = "MySQL001,Nope";
    ck_assert_int_eq(shard_rebalance_plan(ctx, &o, &p), SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "Nope"), "%s", shard_errmsg());
    o.pairs = "MySQL001";
    o.drain = "MySQL001";
    ck_assert_int_eq(shard_rebalance_plan(ctx, &o, &p), SHARD_EINVAL);
    o.drain = NULL;
    o.pairs = NULL;
    o.threshold = 0;
    ck_assert_int_eq(shard_rebalance_plan(ctx, &o, &p), SHARD_EINVAL);
    ck_assert_ptr_null(p);
    r = run_cmd(&rs, ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--by", "rows"));
    ck_assert_int_eq(r.status, 2);
    run_free(&r);
    r = run_cmd(&rs, ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--dry-run", "--yes"));
    ck_assert_int_eq(r.status, 2);
    run_free(&r);
    /* One pair, or one named twice: nothing to balance, refused (not a
     * plan of nothing), the map as it was. */
    {
        uint64_t v0 = map_version();
        r = run_cmd(&rs, ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--pairs", "MySQL001", "--yes"));
        ck_assert_msg(r.status == 2 && count_lines(r.err) == 1 &&
                      strstr(r.err, "\"MySQL001\"") && strstr(r.err, "two pairs or more"),
                      "exit %d: %s%s", r.status, r.out, r.err);
        run_free(&r);
        r = run_cmd(&rs, ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--pairs", "MySQL001,MySQL001",
                              "--yes"));
        ck_assert_msg(r.status == 2 && count_lines(r.err) == 1 &&
                      strstr(r.err, "pair MySQL001 is named twice"), "exit %d: %s%s", r.status,
                      r.out, r.err);
        run_free(&r);
        r = run_cmd(&rs, ARGV(HARNESS_ADMIN_ARGS, "rebalance", "--pairs", "MySQL001,MySQL002",
                              "--drain", "MySQL002,MySQL002", "--dry-run"));
        ck_assert_msg(r.status == 2 && strstr(r.err, "pair MySQL002 is named twice"),
                      "exit %d: %s%s", r.status, r.out, r.err);
        run_free(&r);
        ck_assert_uint_eq(map_version(), v0);
    }
}
END_TEST

/* ---- setup ------------------------------------------------------------------ */

static int fill(void)
{
    char sql[512];

    for (unsigned s = 0; s < SHARDS; s++) {
        unsigned rows = s < HEAVY ? HEAVY_ROWS : LIGHT_ROWS;
        snprintf(sql, sizeof sql, "USE db%05u; INSERT INTO pins (data) SELECT CONCAT("
                 "'{\"shard\":%u,\"n\":', seq, ',\"pad\":\"', REPEAT('x', 1500), '\"}')"
                 " FROM seq_1_to_%u", s, s, rows);
        if (harness_sql(h, "s1", sql, NULL))
            return -1;
        rows_expected += rows;
        for (int i = 0; i < 5 && nw < LEDGER_MAX; i++) {
            char json[64];
            uint64_t id;
            snprintf(json, sizeof json, "{\"shard\":%u,\"lib\":%d}", s, i);
            if (shard_object_create(app, 1, s, json, strlen(json), &id))
                return -1;
            ledger_add(id, json);
            rows_expected++;
        }
    }
    return harness_sync_standby(h, 1, 60);
}

int main(void)
{
    Suite *s = suite_create("server_rebalance");
    TCase *tc = tcase_create("rebalance");
    shard_options so = SHARD_OPTIONS_INIT;
    int failed;

    /* Pair 1 serves every shard and holds all the data; pairs 2 and 3 are empty. */
    h = harness_start_serving(3, 1, SHARDS, 3);
    if (!h)
        return 1;
    so.refresh_interval_ms = 0;
    if (harness_open_admin(h, &ctx, &so) || shard_ctx_open(&app, harness_map_path(h), &so) ||
        shard_schema_apply(ctx, NULL, NULL) || fill()) {
        fprintf(stderr, "setup: %s\n", shard_errmsg());
        shard_ctx_free(app);
        shard_ctx_free(ctx);
        harness_stop(h);
        return 1;
    }
    /* In order, in this process: each test starts from where the last left. */
    tcase_set_timeout(tc, 300);
    tcase_add_tests(tc, TESTS(bad_options, dry_run_changes_nothing,
                              stopped_after_one_move_then_continued,
                              drain_interrupted_then_continued, plan_by_writes,
                              no_plan_while_a_move_is_unfinished));
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(app);
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
