/*
 * Writes on shards that are not moving wait for nothing a move does
 * (libshard-move(7), "Many moves at once"): a mover held where its copy
 * opens its snapshots holds back no write on the source's other shards;
 * three moves at once between three pairs, and all three back, three
 * rounds under writers on every shard: no call on a shard that stays
 * where it is fails or stalls (the calls over 250 ms are counted and
 * printed), and every acknowledged write is there.
 */
#define LEDGER_MAX 60000
#define LEDGER_DROP_WHEN_FULL
#include "check_util.h"
#include "harness.h"
#include "move_util.h"

#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static harness *h;
static shard_ctx *ctx;   /* the application's context (the map's account) */
static shard_ctx *admin; /* the operators' (shardadmin): schema apply, moves */

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

static void timed(timed_writer *tw, unsigned s, const char *what, double t0)
{
    double t1 = now_s(), took = t1 - t0, own = took;

    if (atomic_load(&moving[s]))
        return;
    tw->calls++;
    if (took * 1000.0 > SLOW_MS) {
        tw->slow++;
        own = took - machine_delay(t0, t1);
        tw->slow_own += own * 1000.0 > SLOW_MS;
    }
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
        int rc;

        snprintf(json, sizeof json, "{\"w\":%ld,\"s\":%u}", i, s);
        rc = shard_object_create(ctx, 1, s, json, strlen(json), &id);
        timed(tw, s, "create", t0);
        if (rc == 0) {
            ledger_add(id, json);
            t0 = now_s();
            rc = shard_object_patch(ctx, id, "{\"p\":1}", 7, &res, NULL);
            timed(tw, s, "patch", t0);
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
} mover;

static void *run_move(void *arg)
{
    mover *mv = arg;
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;

    mv->rc = shard_move(admin, mv->first, mv->last, mv->to, &o, &r, NULL);
    if (mv->rc)
        snprintf(mv->err, sizeof mv->err, "%s", shard_errmsg());
    return NULL;
}

/* The n moves at once; 0 when all are done. */
static int moves_at_once(mover *mv, int n)
{
    int failed = 0;

    for (int i = 0; i < n; i++)
        for (unsigned s = mv[i].first; s <= mv[i].last; s++)
            atomic_store(&moving[s], 1);
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
    mover fwd[3] = {{2, 3, "MySQL003", 0, "", 0}, {6, 7, "MySQL003", 0, "", 0},
                    {10, 11, "MySQL001", 0, "", 0}};
    mover back[3] = {{2, 3, "MySQL001", 0, "", 0}, {6, 7, "MySQL002", 0, "", 0},
                     {10, 11, "MySQL003", 0, "", 0}};
    static timed_writer tw[4];
    atomic_int stop;
    long calls = 0, slow = 0, slow_own = 0;
    double worst = 0, worst_own = 0;
    const char *worst_what = "";
    pthread_t prober;

    ledger_fill(ctx, 0, 11, 50);
    atomic_store(&stop, 0);
    pthread_create(&prober, NULL, probe_loop, &stop);
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

    if (move_test_start(&h, &ctx, &admin))
        return 1;
    tcase_set_timeout(tcase_of(s, "held", TESTS(snapshots_hold_back_only_the_moved_shards)),
                      300);
    tcase_set_timeout(tcase_of(s, "rounds", TESTS(concurrent_moves_leave_other_shards_alone)),
                      900);
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(admin);
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
