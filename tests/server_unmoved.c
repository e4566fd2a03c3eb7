/*
 * Writes on shards that are not moving wait for nothing a move does
 * (libshard-move(7), "Many moves at once"): a mover held where its copy
 * opens its snapshots holds back no write on the source's other shards;
 * three moves at once between three pairs, and all three back, three
 * rounds under writers on every shard: no call on a shard that stays
 * where it is fails or stalls (the calls over 250 ms are counted and
 * printed, each with its time of day and where each move was), and every
 * acknowledged write is there. To find what a slow call waited on:
 * UNMOVED_TRACE=FILE UNMOVED_MONITOR=1 (the movers' steps, the slow calls,
 * and what the masters ran while a write waited there), and
 * LIBSHARD_TESTS_SERVER_OPTS="--slow-query-log=1 --slow-query-log-file=slow.log
 * --long-query-time=0.1" UNMOVED_SLOW_LOGS=PREFIX (the servers' slow logs).
 */
#define LEDGER_MAX 60000
#define LEDGER_DROP_WHEN_FULL
#include "check_util.h"
#include "harness.h"
#include "move_util.h"

#include <check.h>
#include <libshard.h>
#include <mysql.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static harness *h;
static shard_ctx *ctx;   /* the application's context (the map's account) */
static shard_ctx *admin; /* the operators' (shardadmin): schema apply, moves */

/* ---- the time of day, and a trace for finding what a slow call waited on ---- */

static double wall_minus_mono; /* CLOCK_REALTIME less CLOCK_MONOTONIC, seconds */

static void clock_note(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    wall_minus_mono = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 - now_s();
}

/* now_s() time t as HH:MM:SS.mmm UTC into buf. */
static const char *tod(double t, char *buf, size_t size)
{
    double wt = t + wall_minus_mono;
    time_t sec = (time_t)wt;
    struct tm tm;

    gmtime_r(&sec, &tm);
    snprintf(buf, size, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)((wt - (double)sec) * 1000.0));
    return buf;
}

/* UNMOVED_TRACE=FILE: the movers' and the application's log lines, every
 * slow call, and what the masters ran while a write of the application
 * waited there (UNMOVED_MONITOR=1), each line with its time of day. */
static FILE *trace;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;

static void tracef(const char *f, ...) __attribute__((format(printf, 1, 2)));
static void tracef(const char *f, ...)
{
    char when[32];
    va_list ap;

    if (!trace)
        return;
    va_start(ap, f);
    pthread_mutex_lock(&trace_lock);
    fprintf(trace, "%s ", tod(now_s(), when, sizeof when));
    vfprintf(trace, f, ap);
    fputc('\n', trace);
    pthread_mutex_unlock(&trace_lock);
    va_end(ap);
}

static void trace_log(int level, const char *message, void *payload)
{
    (void)level;
    tracef("[%s] %s", (const char *)payload, message);
}

static MYSQL *monitor_connect(int port)
{
    MYSQL *my = mysql_init(NULL);

    if (my && !mysql_real_connect(my, "127.0.0.1", HARNESS_ADMIN_USER,
                                  getenv(HARNESS_ADMIN_PASSWORD_ENV), NULL, (unsigned)port,
                                  NULL, 0)) {
        tracef("monitor: connecting to port %d: %s", port, mysql_error(my));
        mysql_close(my);
        return NULL;
    }
    return my;
}

/* Every row of sql's result, each field tab-separated, after prefix. */
static void monitor_dump(MYSQL *my, const char *prefix, const char *sql)
{
    MYSQL_RES *res;
    MYSQL_ROW row;

    if (mysql_query(my, sql) || !(res = mysql_store_result(my))) {
        tracef("%s: %s", prefix, mysql_error(my));
        return;
    }
    while ((row = mysql_fetch_row(res))) {
        char line[1200] = "";
        size_t len = 0;
        for (unsigned i = 0; i < mysql_num_fields(res) && len < sizeof line - 1; i++)
            len += (size_t)snprintf(line + len, sizeof line - len, "%s%s", i ? "\t" : "",
                                    row[i] ? row[i] : "NULL");
        tracef("%s %s", prefix, line);
    }
    mysql_free_result(res);
}

#define MONITOR_WAIT_MS 40
static const char monitor_list[] =
    "SELECT ID, USER, COMMAND, TIME_MS, STATE, LEFT(REPLACE(INFO, '\n', ' '), 200)"
    " FROM information_schema.PROCESSLIST WHERE COMMAND NOT IN ('Sleep', 'Daemon',"
    " 'Binlog Dump') AND ID <> CONNECTION_ID()";
static const char monitor_locks[] =
    "SELECT r.trx_mysql_thread_id, LEFT(r.trx_query, 120), b.trx_mysql_thread_id,"
    " LEFT(b.trx_query, 120), rl.lock_mode, rl.lock_type, rl.lock_table, rl.lock_index,"
    " rl.lock_data, bl.lock_mode, bl.lock_data"
    " FROM information_schema.INNODB_LOCK_WAITS w"
    " JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id"
    " JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id"
    " JOIN information_schema.INNODB_LOCKS rl ON rl.lock_id = w.requested_lock_id"
    " JOIN information_schema.INNODB_LOCKS bl ON bl.lock_id = w.blocking_lock_id";

static const char monitor_status[] =
    "SELECT GROUP_CONCAT(CONCAT(VARIABLE_NAME, '=', VARIABLE_VALUE)) FROM"
    " information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('OPENED_TABLES',"
    " 'OPENED_TABLE_DEFINITIONS', 'TABLE_OPEN_CACHE_MISSES', 'TABLE_OPEN_CACHE_OVERFLOWS',"
    " 'TABLE_OPEN_CACHE_HITS', 'OPEN_TABLES')";
static const char monitor_vars[] =
    "SELECT GROUP_CONCAT(CONCAT(VARIABLE_NAME, '=', VARIABLE_VALUE)) FROM"
    " information_schema.GLOBAL_VARIABLES WHERE VARIABLE_NAME IN ('TABLE_OPEN_CACHE',"
    " 'TABLE_OPEN_CACHE_INSTANCES', 'TABLE_DEFINITION_CACHE', 'OPEN_FILES_LIMIT', 'VERSION')";

/* Polls the masters every 10 ms: when a statement of the application's
 * account has run MONITOR_WAIT_MS or more, everything the server runs
 * then, and the lock waits. */
static void *monitor_loop(void *arg)
{
    static const char *const names[3] = {"s1", "s3", "s5"};
    atomic_int *stop = arg;
    MYSQL *my[3];

    for (int i = 0; i < 3; i++)
        if ((my[i] = monitor_connect(harness_port(h, names[i])))) {
            char prefix[40];
            snprintf(prefix, sizeof prefix, "monitor %s variables:", names[i]);
            monitor_dump(my[i], prefix, monitor_vars);
            snprintf(prefix, sizeof prefix, "monitor %s status:", names[i]);
            monitor_dump(my[i], prefix, monitor_status);
        }
    while (!atomic_load(stop)) {
        for (int i = 0; i < 3; i++) {
            MYSQL_RES *res;
            MYSQL_ROW row;
            bool waits = false;
            if (!my[i] || mysql_query(my[i], monitor_list) || !(res = mysql_store_result(my[i])))
                continue;
            while ((row = mysql_fetch_row(res)))
                waits |= row[1] && strcmp(row[1], "shard") == 0 && row[3] &&
                         atof(row[3]) >= MONITOR_WAIT_MS;
            mysql_free_result(res);
            if (waits) {
                char prefix[40];
                snprintf(prefix, sizeof prefix, "monitor %s:", names[i]);
                monitor_dump(my[i], prefix, monitor_list);
                snprintf(prefix, sizeof prefix, "monitor %s lock wait:", names[i]);
                monitor_dump(my[i], prefix, monitor_locks);
                snprintf(prefix, sizeof prefix, "monitor %s status:", names[i]);
                monitor_dump(my[i], prefix, monitor_status);
            }
        }
        nap_ms(10);
    }
    for (int i = 0; i < 3; i++)
        if (my[i])
            mysql_close(my[i]);
    return NULL;
}

/* ---- writers that time every call on the shards that stay ------------------ */

static atomic_int moving[12]; /* 1 while a move of that shard runs */

typedef struct timed_writer {
    unsigned k; /* shards k, k + 4, k + 8 by turns */
    atomic_int *stop;
    long calls, slow; /* calls on unmoved shards, those over SLOW_MS */
    long slow_own;    /* those over SLOW_MS beyond the machine's delays (probe) */
    double worst;     /* the longest of them, seconds */
    double worst_own; /* the longest less the machine's delays in it (probe) */
    char worst_what[200];
    int errors;
    char err[300];
    pthread_t t;
} timed_writer;

/* The bound (issue 24): counted and printed. What fails the test
 * is a call over STALL_MS beyond the machine's own delays: a wait on the
 * move, not the scheduling delays of a loaded machine (calls of 250-600 ms
 * were seen here at a load of 10 on 2 cores, with no statement of theirs
 * over 40 ms on the server, and of 1.7 s at a load of 18). */
#define SLOW_MS 250.0
#define STALL_MS 2000.0

/* ---- the machine's own delays ------------------------------------------------ */

/* A thread that sleeps PROBE_NAP_MS at a time notes each window in which it
 * woke more than PROBE_LATE_MS late: time it wanted the CPU and did not
 * get it. A slow call's time that overlaps such windows is the machine's,
 * not the library's; a wait on a lock or a server overlaps none. */
#define PROBE_NAP_MS 5
#define PROBE_LATE_MS 20.0
#define PROBE_MAX 20000

static struct {
    pthread_mutex_t lock;
    double from[PROBE_MAX], to[PROBE_MAX];
    int n;
    double worst; /* the longest window, seconds */
} probe = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *probe_loop(void *arg)
{
    atomic_int *stop = arg;

    while (!atomic_load(stop)) {
        double a = now_s(), b;
        nap_ms(PROBE_NAP_MS);
        b = now_s();
        if ((b - a) * 1000.0 - PROBE_NAP_MS > PROBE_LATE_MS) {
            pthread_mutex_lock(&probe.lock);
            if (probe.n < PROBE_MAX) {
                probe.from[probe.n] = a + PROBE_NAP_MS / 1000.0;
                probe.to[probe.n++] = b;
            }
            if (b - a > probe.worst)
                probe.worst = b - a;
            pthread_mutex_unlock(&probe.lock);
        }
    }
    return NULL;
}

/* How much of [t0, t1] the probe spent waiting for the CPU (seconds). */
static double machine_delay(double t0, double t1)
{
    double d = 0;

    pthread_mutex_lock(&probe.lock);
    for (int i = probe.n - 1; i >= 0 && probe.to[i] > t0 - 60; i--) {
        double a = probe.from[i] > t0 ? probe.from[i] : t0;
        double b = probe.to[i] < t1 ? probe.to[i] : t1;
        if (b > a)
            d += b - a;
    }
    pthread_mutex_unlock(&probe.lock);
    return d;
}

/* ---- where the movers are --------------------------------------------------- */

/* The moves running at once, by slot: their shards and the phase their
 * progress last reported (-1: not started; RETURNED: shard_move returned). */
#define RETURNED 100
static atomic_int mover_phase[3];
static char mover_range[3][16];

typedef struct phases {
    int p[3];
} phases;

static phases phases_now(void)
{
    phases ph;
    for (int i = 0; i < 3; i++)
        ph.p[i] = atomic_load(&mover_phase[i]);
    return ph;
}

static const char *phase_text(int p)
{
    return p < 0 ? "not started" : p == RETURNED ? "returned" : shard_move_phase_name(p);
}

/* "2-3 copying, 6-7 catchup -> fenced, ..." from a and b. */
static void phases_text(const phases *a, const phases *b, char *buf, size_t size)
{
    size_t len = 0;

    buf[0] = '\0';
    for (int i = 0; i < 3 && len < size; i++) {
        len += (size_t)snprintf(buf + len, size - len, "%s%s %s", i ? ", " : "", mover_range[i],
                                phase_text(a->p[i]));
        if (a->p[i] != b->p[i] && len < size)
            len += (size_t)snprintf(buf + len, size - len, " -> %s", phase_text(b->p[i]));
    }
}

/* The calls over SLOW_MS, for the report: when, how long, and where the
 * moves were (at the call's start -> at its end). */
#define SLOW_KEEP 40
static struct {
    pthread_mutex_t lock;
    char line[SLOW_KEEP][400];
    int n, more;
} slow_calls = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void slow_note(const char *what, unsigned s, double t0, double t1, double own,
                      const phases *at)
{
    phases end = phases_now();
    char from[32], to[32], where[240];

    phases_text(at, &end, where, sizeof where);
    tracef("SLOW %s on shard %u: %.0f ms (%.0f beyond the machine's delays), %s to %s; "
           "moves %s", what, s, (t1 - t0) * 1000.0, own * 1000.0,
           tod(t0, from, sizeof from), tod(t1, to, sizeof to), where);
    if ((t1 - t0) * 1000.0 <= SLOW_MS)
        return;
    pthread_mutex_lock(&slow_calls.lock);
    if (slow_calls.n < SLOW_KEEP)
        snprintf(slow_calls.line[slow_calls.n++], sizeof slow_calls.line[0],
                 "%s on shard %u, %.0f ms (%.0f beyond the machine's delays), %s to %s; "
                 "moves %s", what, s, (t1 - t0) * 1000.0, own * 1000.0, from, to, where);
    else
        slow_calls.more++;
    pthread_mutex_unlock(&slow_calls.lock);
}

/* Calls over this go to the trace. */
#define TRACE_MS 100.0

static void timed(timed_writer *tw, unsigned s, const char *what, double t0, const phases *at)
{
    double t1 = now_s(), took = t1 - t0, own = took;

    if (atomic_load(&moving[s]))
        return;
    tw->calls++;
    if (took * 1000.0 > TRACE_MS)
        own = took - machine_delay(t0, t1);
    if (took * 1000.0 > SLOW_MS) {
        tw->slow++;
        tw->slow_own += own * 1000.0 > SLOW_MS;
    }
    if (took * 1000.0 > TRACE_MS)
        slow_note(what, s, t0, t1, own, at);
    if (took > tw->worst)
        tw->worst = took;
    if (own > tw->worst_own) {
        tw->worst_own = own;
        snprintf(tw->worst_what, sizeof tw->worst_what, "%s on shard %u, %.0f ms in all", what,
                 s, took * 1000.0);
    }
}

static void *timed_loop(void *arg)
{
    timed_writer *tw = arg;

    for (long i = 0; !atomic_load(tw->stop); i++) {
        unsigned s = tw->k + 4 * (unsigned)(i % 3);
        char json[64], *res = NULL;
        uint64_t id = 0;
        double t0 = now_s();
        phases at = phases_now();
        int rc;

        snprintf(json, sizeof json, "{\"w\":%ld,\"s\":%u}", i, s);
        rc = shard_object_create(ctx, 1, s, json, strlen(json), &id);
        timed(tw, s, "create", t0, &at);
        if (rc == 0) {
            ledger_add(id, json);
            t0 = now_s();
            at = phases_now();
            rc = shard_object_patch(ctx, id, "{\"p\":1}", 7, &res, NULL);
            timed(tw, s, "patch", t0, &at);
            if (rc == 0)
                ledger_update(id, res);
            shard_free(res);
        }
        if (rc) {
            tw->errors++;
            snprintf(tw->err, sizeof tw->err, "shard %u: %s", s, shard_errmsg());
        }
    }
    return NULL;
}

/* ---- movers in threads ------------------------------------------------------- */

typedef struct mover {
    unsigned first, last;
    const char *to;
    int rc;
    char err[600];
    pthread_t t;
    int slot; /* in mover_phase */
} mover;

static void mover_progress(int phase, uint64_t done, uint64_t total, void *payload)
{
    mover *mv = payload;

    (void)done;
    (void)total;
    if (atomic_exchange(&mover_phase[mv->slot], phase) != phase)
        tracef("move %u-%u to %s: %s", mv->first, mv->last, mv->to, shard_move_phase_name(phase));
}

static void *run_move(void *arg)
{
    mover *mv = arg;
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;

    o.progress = mover_progress;
    o.payload = mv;
    mv->rc = shard_move(admin, mv->first, mv->last, mv->to, &o, &r, NULL);
    atomic_store(&mover_phase[mv->slot], RETURNED);
    tracef("move %u-%u to %s: returned %d", mv->first, mv->last, mv->to, mv->rc);
    if (mv->rc)
        snprintf(mv->err, sizeof mv->err, "%s", shard_errmsg());
    return NULL;
}

/* The n moves at once; 0 when all are done. */
static int moves_at_once(mover *mv, int n)
{
    int failed = 0;

    for (int i = 0; i < n; i++) {
        for (unsigned s = mv[i].first; s <= mv[i].last; s++)
            atomic_store(&moving[s], 1);
        mv[i].slot = i;
        snprintf(mover_range[i], sizeof mover_range[i], "%u-%u", mv[i].first, mv[i].last);
        atomic_store(&mover_phase[i], -1);
    }
    for (int i = 0; i < n; i++)
        pthread_create(&mv[i].t, NULL, run_move, &mv[i]);
    for (int i = 0; i < n; i++)
        pthread_join(mv[i].t, NULL);
    for (int i = 0; i < n; i++) {
        for (unsigned s = mv[i].first; s <= mv[i].last; s++)
            atomic_store(&moving[s], 0);
        failed += mv[i].rc != 0;
    }
    return failed;
}

/* ---- a mover held while it opens its snapshots ---------------------------------- */

extern int (*shard__move_hook)(uint64_t move_id, const char *point);

/* The writes on unmoved shards of the source while the mover was in the
 * hook, and the first that failed. */
static int held_writes, held_failed, held_locked;
static char held_err[400];

static void write_shard(unsigned shard, const char *json)
{
    uint64_t id = 0;
    char *res = NULL;
    int rc = shard_object_create(ctx, 1, shard, json, strlen(json), &id);

    if (rc == 0) {
        ledger_add(id, json);
        if ((rc = shard_object_patch(ctx, id, "{\"held\":1}", 10, &res, NULL)) == 0)
            ledger_update(id, res);
        shard_free(res);
    }
    held_writes++;
    if (rc && !held_failed++)
        snprintf(held_err, sizeof held_err, "shard %u: %s", shard, shard_errmsg());
}

/* After each first worker's snapshot a write commits on the source, so
 * the next worker's lands elsewhere in the binary log and the copy opens
 * them again under its lock; there (the mover waits in the hook) writes on
 * shards 0 and 1, on the source but not moving, must go through. */
static int snapshot_hook(uint64_t move_id, const char *point)
{
    (void)move_id;
    if (strcmp(point, "snapshot opened") == 0)
        write_shard(1, "{\"between\":1}");
    else if (strcmp(point, "snapshots held") == 0) {
        held_locked++;
        write_shard(0, "{\"while\":\"held\"}");
    }
    return 0;
}

/* The copy's snapshots of one commit point hold back the moved shards'
 * writes, nobody else's: a write on another shard of the source goes
 * through while the mover is stopped there. */
START_TEST(snapshots_hold_back_only_the_moved_shards)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    ledger_fill(ctx, 0, 3, 20);
    o.copy_threads = 4;
    shard__move_hook = snapshot_hook;
    rc = shard_move(admin, 2, 3, "MySQL003", &o, &r, NULL);
    shard__move_hook = NULL;
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_msg(held_locked == 1, "the copy opened its snapshots under its lock %d times",
                  held_locked);
    ck_assert_msg(held_failed == 0, "%d of %d writes on shards 0-1 (not moving) failed while the "
                  "mover opened its snapshots, the first: %s", held_failed, held_writes, held_err);
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL003");
    ledger_check_all(ctx);
    /* Back where the next test expects it. */
    ck_assert_msg(shard_move(admin, 2, 3, "MySQL001", &o, &r, NULL) == 0, "%s", shard_errmsg());
}
END_TEST

/* ---- the test ------------------------------------------------------------------ */

START_TEST(concurrent_moves_leave_other_shards_alone)
{
    mover fwd[3] = {{2, 3, "MySQL003", 0, "", 0, 0}, {6, 7, "MySQL003", 0, "", 0, 0},
                    {10, 11, "MySQL001", 0, "", 0, 0}};
    mover back[3] = {{2, 3, "MySQL001", 0, "", 0, 0}, {6, 7, "MySQL002", 0, "", 0, 0},
                     {10, 11, "MySQL003", 0, "", 0, 0}};
    static timed_writer tw[4];
    atomic_int stop;
    long calls = 0, slow = 0, slow_own = 0;
    double worst = 0, worst_own = 0;
    const char *worst_what = "";
    pthread_t prober, monitor = 0;

    ledger_fill(ctx, 0, 11, 50);
    atomic_store(&stop, 0);
    pthread_create(&prober, NULL, probe_loop, &stop);
    if (trace && getenv("UNMOVED_MONITOR"))
        pthread_create(&monitor, NULL, monitor_loop, &stop);
    for (unsigned k = 0; k < 4; k++) {
        memset(&tw[k], 0, sizeof tw[k]);
        tw[k].k = k;
        tw[k].stop = &stop;
        pthread_create(&tw[k].t, NULL, timed_loop, &tw[k]);
    }
    /* A failed move stops the rounds (the next would wait on it). */
    for (int round = 0; round < 3 && !moves_at_once(fwd, 3) && !moves_at_once(back, 3); round++)
        ;
    atomic_store(&stop, 1);
    for (unsigned k = 0; k < 4; k++)
        pthread_join(tw[k].t, NULL);
    pthread_join(prober, NULL);
    if (monitor)
        pthread_join(monitor, NULL);
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(fwd[i].rc == 0, "move %u-%u: %s", fwd[i].first, fwd[i].last, fwd[i].err);
        ck_assert_msg(back[i].rc == 0, "move %u-%u back: %s", back[i].first, back[i].last,
                      back[i].err);
    }
    for (unsigned k = 0; k < 4; k++) {
        calls += tw[k].calls;
        slow += tw[k].slow;
        slow_own += tw[k].slow_own;
        if (tw[k].worst > worst)
            worst = tw[k].worst;
        if (tw[k].worst_own > worst_own) {
            worst_own = tw[k].worst_own;
            worst_what = tw[k].worst_what;
        }
    }
    fprintf(stderr, "unmoved shards: %ld calls, %ld over %.0f ms, the worst %.0f ms; less the "
            "machine's delays, %ld over %.0f ms, the worst %.0f ms (%s); the probe's longest "
            "wait for the CPU %.0f ms\n", calls, slow, SLOW_MS, worst * 1000.0, slow_own,
            SLOW_MS, worst_own * 1000.0, worst_what, probe.worst * 1000.0);
    for (int i = 0; i < slow_calls.n; i++)
        fprintf(stderr, "  over %.0f ms: %s\n", SLOW_MS, slow_calls.line[i]);
    if (slow_calls.more)
        fprintf(stderr, "  and %d more\n", slow_calls.more);
    for (unsigned k = 0; k < 4; k++)
        ck_assert_msg(tw[k].errors == 0, "writer %u: %d errors, the last: %s", k, tw[k].errors,
                      tw[k].err);
    ck_assert_int_gt(calls, 0);
    ck_assert_msg(worst_own * 1000.0 <= STALL_MS, "a call on an unmoved shard took %.0f ms "
                  "beyond the machine's own delays (%s); %ld of %ld took over %.0f ms",
                  worst_own * 1000.0, worst_what, slow, calls, SLOW_MS);
    ledger_check_all(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_unmoved");
    int failed;

    shard_options app_o = SHARD_OPTIONS_INIT, admin_o = SHARD_OPTIONS_INIT;
    const char *trace_path = getenv("UNMOVED_TRACE");

    clock_note();
    if (trace_path && !(trace = fopen(trace_path, "w")))
        perror(trace_path);
    if (trace) {
        setvbuf(trace, NULL, _IOLBF, 0);
        app_o.log = admin_o.log = trace_log;
        app_o.log_level = admin_o.log_level = SHARD_LOG_DEBUG;
        app_o.log_payload = "app";
        admin_o.log_payload = "mover";
    }
    if (move_test_start_opts(&h, &ctx, &admin, &app_o, &admin_o))
        return 1;
    tcase_set_timeout(tcase_of(s, "held", TESTS(snapshots_hold_back_only_the_moved_shards)),
                      300);
    tcase_set_timeout(tcase_of(s, "rounds", TESTS(concurrent_moves_leave_other_shards_alone)),
                      900);
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(admin);
    shard_ctx_free(ctx);
    /* UNMOVED_SLOW_LOGS=PREFIX: each server's slow.log (a
     * LIBSHARD_TESTS_SERVER_OPTS experiment) kept as PREFIX-sN.log. */
    if (getenv("UNMOVED_SLOW_LOGS")) {
        char *cmd = NULL;
        if (asprintf(&cmd, "for d in '%s'/s*/; do n=$(basename \"$d\"); [ -f \"$d/data/slow.log\" ] "
                     "&& cp \"$d/data/slow.log\" '%s'-\"$n\".log; done", harness_dir(h),
                     getenv("UNMOVED_SLOW_LOGS")) < 0 || system(cmd) != 0)
            fprintf(stderr, "copying the slow logs failed\n");
        free(cmd);
    }
    harness_stop(h);
    if (trace)
        fclose(trace);
    return failed ? 1 : 0;
}
