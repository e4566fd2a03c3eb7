/*
 * A MySQL map store on a server of its own (s5, the third pair's master,
 * which the map does not name) that stops answering (SIGSTOP) while shards
 * are fenced (libshard-move(7), "When the map store does not answer").
 *
 *   calls_keep_their_budget_while_the_store_hangs
 *       shards fenced by hand and the store stopped: every create returns
 *       within retry_budget_ms plus one round trip (1000 ms of margin), none
 *       waits out the store's own 5 s timeout.
 *   fence_lifts_while_the_store_is_stopped
 *       the store stopped right before the cut-over's publish, for 20 s:
 *       the publish never reached it, so the fence is off again while the
 *       store is still stopped (no operator), and the move cuts over once
 *       it answers; no acknowledged write is lost.
 *   fence_lifts_when_the_mover_gives_up
 *       the same for longer than the move's retries (the store stays
 *       stopped until the mover gives up, LONG_OUTAGE_S at most): the
 *       mover gives up with the fence lifted, and a resume later finishes
 *       the move.
 *
 * Each prints the writers' pause (the move's pause_ms) and worst call.
 */
#include "harness.h"
/* Four writers for two and a half minutes. */
#define LEDGER_MAX 100000
#include "move_util.h"

#include <check.h>
#include <jansson.h>
#include <libshard.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The library's test hook (lib/move/driver.c). */
extern int (*shard__move_hook)(uint64_t move_id, const char *point);

#define BUDGET_MS 2000
#define MARGIN_MS 1000 /* one round trip, generously */
#define STORE "s5"
/* Longer than a mover's retries (5, backing off 1 to 16 s, each waiting out
 * the store's 5 s timeouts). */
#define LONG_OUTAGE_S 120

static harness *h;
static char admin_uri[600], app_uri[600];

static void uri_as(char *buf, size_t n, const char *user)
{
    snprintf(buf, n, "mysql://%s@127.0.0.1:%d/libshard_maps/maps?password_env="
             "LIBSHARD_PASSWORD", user, harness_port(h, STORE));
}

/* The harness's map without the third pair (its master is the store). */
static int publish_map(void)
{
    json_t *doc = json_load_file(harness_map_path(h), 0, NULL);
    shard_store *st = NULL;
    shard_map *m = NULL;
    char *text;
    int rc;

    if (!doc)
        return -1;
    json_object_del(json_object_get(doc, "pairs"), "MySQL003");
    text = json_dumps(doc, 0);
    json_decref(doc);
    rc = shard_map_parse(&m, text, strlen(text));
    free(text);
    if (rc == 0 && (rc = shard_store_open(&st, admin_uri)) == 0)
        rc = shard_store_publish(st, m, 0);
    shard_store_free(st);
    shard_map_free(m);
    return rc;
}

static shard_ctx *open_ctx(bool admin, unsigned budget_ms)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;

    o.refresh_interval_ms = 0;
    if (budget_ms)
        o.retry_budget_ms = budget_ms;
    if (admin)
        harness_admin_options(&o);
    ck_assert_msg(shard_ctx_open(&ctx, admin ? admin_uri : app_uri, &o) == 0, "%s",
                  shard_errmsg());
    return ctx;
}

/* Fenced rows on a server. */
static int fenced_rows(const char *server)
{
    char *out = sql_ok(h, server, "SELECT COUNT(*) FROM libshard_control.fence WHERE fenced <> 0");
    int n = atoi(out);
    free(out);
    return n;
}

/* ---- creates, each call timed ------------------------------------------------ */

typedef struct creator {
    shard_ctx *ctx;
    unsigned shard;
    atomic_int *stop;
    int calls; /* stop after this many (0: until *stop) */
    int ok, errors;
    double worst; /* seconds, the longest single call */
    char err[300];
} creator;

static void *create_loop(void *arg)
{
    creator *c = arg;

    for (int i = 0; !atomic_load(c->stop) && (!c->calls || i < c->calls); i++) {
        char json[64];
        uint64_t id;
        double t0 = now_s(), took;
        int rc;

        snprintf(json, sizeof json, "{\"c\":%d,\"s\":%u}", i, c->shard);
        rc = shard_object_create(c->ctx, 1, c->shard, json, strlen(json), &id);
        took = now_s() - t0;
        if (took > c->worst)
            c->worst = took;
        if (rc == 0) {
            ledger_add(id, json);
            c->ok++;
        } else {
            c->errors++;
            snprintf(c->err, sizeof c->err, "%s", shard_errmsg());
        }
        usleep(50000);
    }
    return NULL;
}

#define NCREATORS 4

typedef struct crowd {
    atomic_int stop;
    creator c[NCREATORS];
    pthread_t t[NCREATORS];
} crowd;

static void crowd_start(crowd *cr, shard_ctx *ctx, const unsigned shards[NCREATORS], int calls)
{
    atomic_store(&cr->stop, 0);
    for (int i = 0; i < NCREATORS; i++) {
        cr->c[i] = (creator){ctx, shards[i], &cr->stop, calls, 0, 0, 0, ""};
        ck_assert_int_eq(pthread_create(&cr->t[i], NULL, create_loop, &cr->c[i]), 0);
    }
}

/* Joined; the worst call of all, in seconds. */
static double crowd_stop(crowd *cr, int *errors)
{
    double worst = 0;

    atomic_store(&cr->stop, 1);
    *errors = 0;
    for (int i = 0; i < NCREATORS; i++) {
        pthread_join(cr->t[i], NULL);
        worst = cr->c[i].worst > worst ? cr->c[i].worst : worst;
        *errors += cr->c[i].errors;
    }
    return worst;
}

/* ---- item 2: the budget bounds a call while the store hangs ----------------- */

START_TEST(calls_keep_their_budget_while_the_store_hangs)
{
    static const unsigned shards[NCREATORS] = {5, 5, 6, 6};
    shard_ctx *app = open_ctx(false, BUDGET_MS);
    crowd cr;
    double worst;
    int errors;

    free(sql_ok(h, "s1", "SET SESSION sql_log_bin = 0; INSERT INTO libshard_control.fence"
                         " (db, fenced) VALUES ('db00005', 1), ('db00006', 1)"
                         " ON DUPLICATE KEY UPDATE fenced = 1"));
    ck_assert_int_eq(harness_pause(h, STORE), 0);
    crowd_start(&cr, app, shards, 3);
    for (int i = 0; i < NCREATORS; i++)
        pthread_join(cr.t[i], NULL);
    ck_assert_int_eq(harness_resume(h, STORE), 0);
    free(sql_ok(h, "s1", "SET SESSION sql_log_bin = 0; UPDATE libshard_control.fence"
                         " SET fenced = 0 WHERE db IN ('db00005', 'db00006')"));
    worst = crowd_stop(&cr, &errors);
    fprintf(stderr, "server_store_outage: store stopped, shards fenced: %d calls failed, "
            "worst call %.0f ms (budget %d ms)\n", errors, worst * 1000, BUDGET_MS);
    ck_assert_msg(errors == NCREATORS * 3, "%d of %d creates on fenced shards failed (want "
                  "all): %s", errors, NCREATORS * 3, cr.c[0].err);
    ck_assert_msg(worst * 1000 <= BUDGET_MS + MARGIN_MS, "a call took %.0f ms against a "
                  "retry budget of %d ms: %s", worst * 1000, BUDGET_MS, cr.c[0].err);
    shard_ctx_free(app);
}
END_TEST

/* ---- item 1: the fence lifts itself ------------------------------------------ */

/* The store stops for `seconds`, or until the move returns if that is
 * sooner: a mover that gave up (or failed) has nothing more to wait for, and
 * the fence is looked at, the store still stopped, either way. */
static struct outage {
    unsigned seconds;
    bool paused;
    atomic_bool move_returned;
    double stopped_s; /* how long the store was stopped */
    pthread_t t;
    int fenced_while_stopped; /* fence rows on s1 just before the store came back */
} out;

static void *outage_main(void *arg)
{
    double t0 = now_s();

    (void)arg;
    while (now_s() - t0 < out.seconds && !atomic_load(&out.move_returned))
        usleep(100000);
    out.fenced_while_stopped = fenced_rows("s1");
    out.stopped_s = now_s() - t0;
    harness_resume(h, STORE);
    return NULL;
}

static int stop_store_hook(uint64_t id, const char *point)
{
    (void)id;
    if (strcmp(point, "publishing") == 0 && !out.paused) {
        out.paused = true;
        ck_assert_int_eq(harness_pause(h, STORE), 0);
        pthread_create(&out.t, NULL, outage_main, NULL);
    }
    return 0;
}

/* Shards first..last move to MySQL002 while the store stops for `seconds`
 * at the publish; *rc and the report of the move. */
static void move_through_outage(shard_ctx *admin, unsigned first, unsigned last,
                                unsigned seconds, shard_move_report *r, int *rc, char *err,
                                size_t errsize, double *worst, int *errors)
{
    static const unsigned shards[NCREATORS] = {1, 2, 3, 4};
    unsigned ws[NCREATORS];
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_ctx *app = open_ctx(false, 0);
    crowd cr;

    for (int i = 0; i < NCREATORS; i++)
        ws[i] = shards[i] % (last - first + 1) + first;
    ledger_fill(app, first, last, 5);
    out = (struct outage){.seconds = seconds, .fenced_while_stopped = -1};
    crowd_start(&cr, app, ws, 0);
    usleep(300000);
    shard__move_hook = stop_store_hook;
    *rc = shard_move(admin, first, last, "MySQL002", &o, r, NULL);
    atomic_store(&out.move_returned, true);
    snprintf(err, errsize, "%s", *rc ? shard_errmsg() : "");
    shard__move_hook = NULL;
    ck_assert_msg(out.paused, "the move never reached its publish: %d %s", *rc, err);
    pthread_join(out.t, NULL);
    usleep(300000);
    *worst = crowd_stop(&cr, errors);
    shard_ctx_free(app);
}

START_TEST(fence_lifts_while_the_store_is_stopped)
{
    shard_ctx *admin = open_ctx(true, 0), *check;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char err[600];
    double worst;
    int rc, errors;

    move_through_outage(admin, 1, 2, 20, &r, &rc, err, sizeof err, &worst, &errors);
    fprintf(stderr, "server_store_outage: store stopped 20 s at the publish: move rc %d, "
            "pause %.0f ms, writers' worst call %.0f ms, %d failed calls, fenced while "
            "stopped: %d rows%s%s\n", rc, r.pause_ms, worst * 1000, errors,
            out.fenced_while_stopped, rc ? ": " : "", err);
    ck_assert_msg(out.fenced_while_stopped == 0, "%d shards were still fenced on the source "
                  "after 20 s of a stopped store, though the publish never reached it",
                  out.fenced_while_stopped);
    ck_assert_msg(rc == 0, "the move did not cut over once the store answered: %s", err);
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    /* Done: the source's copies stay fenced until they are dropped. */
    ck_assert_int_eq(fenced_rows("s1"), 2);
    {
        shard_move_report d = SHARD_MOVE_REPORT_INIT;
        rc = shard_move_resume(admin, r.move_id, NULL, &d);
        ck_assert_msg(rc == 0 && d.source_dropped, "drop: %d %s", rc, shard_errmsg());
    }
    ck_assert_int_eq(fenced_rows("s1"), 0);
    check = open_ctx(true, 0);
    ledger_check_all(check);
    shard_ctx_free(check);
    shard_ctx_free(admin);
}
END_TEST

START_TEST(fence_lifts_when_the_mover_gives_up)
{
    shard_ctx *admin = open_ctx(true, 0), *check;
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char err[600];
    double worst;
    int rc, errors;

    move_through_outage(admin, 3, 4, LONG_OUTAGE_S, &r, &rc, err, sizeof err, &worst, &errors);
    fprintf(stderr, "server_store_outage: store stopped at the publish until the mover gave "
            "up, %.1f s (%d s at most): move rc %d, writers' worst call %.0f ms, %d failed "
            "calls, fenced while stopped: %d rows; %s\n", out.stopped_s, LONG_OUTAGE_S, rc,
            worst * 1000, errors, out.fenced_while_stopped, err);
    ck_assert_msg(out.fenced_while_stopped == 0, "%d shards were still fenced on the source "
                  "after %.1f s of a stopped store", out.fenced_while_stopped, out.stopped_s);
    ck_assert_msg(rc != 0, "the move outlasted a %d s store outage", LONG_OUTAGE_S);
    ck_assert_msg(fenced_rows("s1") == 0, "the mover gave up and left the source fenced: %s",
                  err);
    /* Nothing for an operator to do but cut over again, when it suits. */
    ck_assert_msg(shard_move_resume(admin, r.move_id, &o, &r) == 0, "resume: %s",
                  shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    check = open_ctx(true, 0);
    ledger_check_all(check);
    shard_ctx_free(check);
    shard_ctx_free(admin);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_store_outage");
    TCase *tc = tcase_create("outage");
    int failed;

    h = harness_start_serving(3, 1, 8, 3);
    if (!h)
        return 1;
    uri_as(admin_uri, sizeof admin_uri, HARNESS_ADMIN_USER);
    uri_as(app_uri, sizeof app_uri, "shard");
    if (harness_schema_apply(h) || publish_map()) {
        fprintf(stderr, "setup: %s\n", shard_errmsg());
        harness_stop(h);
        return 1;
    }
    tcase_set_timeout(tc, 400);
    tcase_add_tests(tc, TESTS(calls_keep_their_budget_while_the_store_hangs,
                              fence_lifts_while_the_store_is_stopped,
                              fence_lifts_when_the_mover_gives_up));
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_FORK_GETENV);
    harness_stop(h);
    shard_global_cleanup();
    return failed ? 1 : 0;
}
