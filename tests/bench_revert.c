/*
 * tests/bench_revert.c: what a revert's drop of the target's copies costs
 * the writers of the pair they are on (shard_move_revert(3),
 * libshard-move(7), "Dropping the source").
 *
 *   bench revert-drop   the p99.9 of 4 writer threads creating objects on
 *                       the target pair's own shards while a revert of
 *                       BENCH_REVERT_SHARDS databases (128) of
 *                       BENCH_REVERT_ROWS pins each (2000, about 200 bytes
 *                       of JSON) is in its last step (both halves of the
 *                       source checked, then the copies dropped one
 *                       database at a time, paced) / their p99.9 in the 3 s
 *                       before the revert; the step's and the revert's
 *                       seconds and the worst calls in the detail
 *
 * Two pairs: shards 0..N-1 on MySQL001, N..2N-1 on MySQL002. Shards 0..N-1
 * are loaded on MySQL001 (multi-row INSERTs, the standby caught up), moved
 * to MySQL002 with a reverse window, and reverted while the writers run on
 * MySQL002's own shards. Figures only: nothing here is a timed assertion.
 * Exit status 1 means something failed outright (a server, a move, a
 * write). Arguments or BENCH_ONLY choose the lines (see bench_util.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <libshard.h>
#include <mysql.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define BENCH_NAME "bench_revert"
#include "bench_util.h"

#define WRITERS 4
#define MAX_CALLS 4000000
#define BEFORE_S 3.0

static shard_ctx *App;
static unsigned Type, First, Last; /* the writers' shards */
static atomic_int Stop, Failed;
static double *Lat, *End; /* each call's latency and end time */
static atomic_long Ncalls;
static double Clean_t0;   /* when the revert entered its last step */

static void *writer(void *arg)
{
    unsigned s = First + (unsigned)(uintptr_t)arg % (Last - First + 1);

    while (!atomic_load(&Stop)) {
        uint64_t id;
        double t0 = now();
        int rc = shard_object_create(App, Type, s, "{\"w\":1}", 7, &id);
        double t1 = now();
        long k = atomic_fetch_add(&Ncalls, 1);
        if (k < MAX_CALLS) {
            Lat[k] = t1 - t0;
            End[k] = t1;
        }
        if (rc && !atomic_exchange(&Failed, 1))
            fprintf(stderr, BENCH_NAME ": a write failed: %s\n", shard_errmsg());
        s = s == Last ? First : s + 1;
        usleep(1000);
    }
    return NULL;
}

static void mover_log(int level, const char *message, void *payload)
{
    (void)level;
    (void)payload;
    if (!Clean_t0 && strstr(message, "reverting cleaning"))
        Clean_t0 = now();
    if (getenv("BENCH_REVERT_LOG"))
        fprintf(stderr, BENCH_NAME ": [%.3f] %s\n", now(), message);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The calls recorded (the writers stopped). */
static long calls(void)
{
    long k = atomic_load(&Ncalls);
    return k < MAX_CALLS ? k : MAX_CALLS;
}

/* p99.9 and max (ms) of the calls that ended in [from, to]; *n their count. */
static void window(double from, double to, long *n, double *p999, double *max)
{
    long k = calls(), m = 0;
    double *v = malloc(sizeof *v * (size_t)(k ? k : 1));

    if (!v)
        die("out of memory");
    for (long i = 0; i < k; i++)
        if (End[i] >= from && End[i] <= to)
            v[m++] = Lat[i];
    qsort(v, (size_t)m, sizeof *v, cmp_double);
    *n = m;
    *p999 = m ? v[(long)((double)m * 0.999)] * 1e3 : 0;
    *max = m ? v[m - 1] * 1e3 : 0;
    free(v);
}

int main(int argc, char **argv)
{
    unsigned n = getenv("BENCH_REVERT_SHARDS") ? (unsigned)atoi(getenv("BENCH_REVERT_SHARDS"))
                                               : 128;
    unsigned rows = getenv("BENCH_REVERT_ROWS") ? (unsigned)atoi(getenv("BENCH_REVERT_ROWS"))
                                                : 2000;
    shard_options so = SHARD_OPTIONS_INIT;
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, rr = SHARD_MOVE_REPORT_INIT;
    shard_ctx *admin = NULL;
    shard_map *map = NULL;
    pthread_t t[WRITERS];
    harness *h;
    MYSQL *my;
    double t0, t1, bp, bm, cp, cm;
    long bn, cn;

    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_select(argc, argv);
    if (!bench_selected("revert-drop"))
        return 0;
    if (n < 1 || n > 512 || rows < 1 || rows > 100000)
        die("BENCH_REVERT_SHARDS must be 1..512 and BENCH_REVERT_ROWS 1..100000");
    Lat = calloc(MAX_CALLS, sizeof *Lat);
    End = calloc(MAX_CALLS, sizeof *End);
    if (!Lat || !End)
        die("out of memory");
    if (!(h = harness_start_ex(2, (int)(2 * n), 2)))
        die("could not start the servers");
    if (harness_schema_apply(h))
        die("schema apply: %s", shard_errmsg());
    harness_admin_options(&so);
    so.log = mover_log;
    so.log_level = getenv("BENCH_REVERT_LOG") ? SHARD_LOG_DEBUG : SHARD_LOG_INFO;
    if (harness_open_admin(h, &admin, &so) || shard_ctx_open(&App, harness_map_path(h), NULL))
        die("contexts: %s", shard_errmsg());
    if (shard_ctx_map(App, &map) || shard_map_type_of(map, "pins", &Type))
        die("no type pins: %s", shard_errmsg());
    shard_map_free(map);

    my = raw_connect(harness_port(h, "s1"), 60, false);
    for (unsigned s = 0; s < n; s++) {
        char db[32];
        snprintf(db, sizeof db, "db%05u", s);
        load_pins(my, db, s, rows, 500);
    }
    mysql_close(my);
    bench_sync_standby(harness_port(h, "s1"), harness_port(h, "s2"), 600);

    o.reverse_window_s = 3600;
    if (shard_move(admin, 0, n - 1, "MySQL002", &o, &r, NULL) || r.phase != SHARD_MOVE_REVERSIBLE)
        die("the move: %s", shard_errmsg());
    bench_sync_standby(harness_port(h, "s3"), harness_port(h, "s4"), 600);

    First = n;
    Last = 2 * n - 1;
    for (int i = 0; i < WRITERS; i++)
        pthread_create(&t[i], NULL, writer, (void *)(uintptr_t)(i * 7));
    sleep_s(BEFORE_S);
    t0 = now();
    if (shard_move_revert(admin, r.move_id, NULL, &rr) || rr.phase != SHARD_MOVE_REVERTED)
        die("the revert: %s", shard_errmsg());
    t1 = now();
    if (getenv("BENCH_REVERT_AFTER_S")) /* writers alone again, as long */
        sleep_s(atof(getenv("BENCH_REVERT_AFTER_S")));
    atomic_store(&Stop, 1);
    for (int i = 0; i < WRITERS; i++)
        pthread_join(t[i], NULL);
    if (atomic_load(&Failed))
        die("a writer's call failed");
    if (!Clean_t0)
        die("the revert's last step was not logged");
    {
        long k = calls();
        for (long i = 0; i < k; i++)
            if (Lat[i] > 0.05)
                fprintf(stderr, BENCH_NAME ": a call of %.0f ms ended %.2f s into the revert "
                        "(its last step began at %.2f s)\n", Lat[i] * 1e3, End[i] - t0,
                        Clean_t0 - t0);
    }
    if (getenv("BENCH_REVERT_AFTER_S")) {
        double ap, am;
        long an;
        window(t1, now(), &an, &ap, &am);
        fprintf(stderr, BENCH_NAME ": after the revert: p99.9 %.1f ms over %ld calls, worst "
                "%.1f ms\n", ap, an, am);
    }
    window(t0 - BEFORE_S, t0, &bn, &bp, &bm);
    window(Clean_t0, t1, &cn, &cp, &cm);
    printf("bench revert-drop ratio=%.2f (writers' p99.9 on the target pair while a revert "
           "drops its %u databases of %u pins: %.1f ms over %ld calls, worst %.1f ms / "
           "%.1f ms over %ld calls, worst %.1f ms, in the %.0f s before; the revert %.2f s, "
           "its last step (both halves of the source, then the drops) %.2f s)\n",
           bp > 0 ? cp / bp : 0, n, rows, cp, cn, cm, bp, bn, bm, BEFORE_S, t1 - t0,
           t1 - Clean_t0);
    shard_ctx_free(admin);
    shard_ctx_free(App);
    harness_stop(h);
    free(Lat);
    free(End);
    return 0;
}
