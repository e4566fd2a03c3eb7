/*
 * The map lease (libshard-move(7), "The lease") against real pairs: a read
 * leaves the fence out of its statement only while its context's map was
 * confirmed current by a store read that started less than lease_ms ago,
 * and only on shards the map does not mark moving; a move marks its shards
 * when it plans and fences only once the leases on older maps have run out.
 *
 *   lease_decides_the_check
 *       under a lease an unmarked shard's fence row is not read (a fence set
 *       by hand goes unseen); a marked shard, or a map without lease_ms,
 *       reads it (SHARD_EMOVED).
 *   stale_context_never_reads_the_source_after_the_flip
 *       a context whose map predates the mark and whose store then goes
 *       away: after the flip it never answers from the fenced source.
 *   mover_waits_out_the_lease
 *       the fence goes up no sooner than lease_ms x 1.1 + 0.5 s after the
 *       mark was published.
 *   writes_under_a_lease_lose_nothing
 *       creates from a context whose store went away, during a whole move:
 *       every acknowledged object is on the target afterwards.
 */
#include "harness.h"
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

#define LEASE_MS 2000
#define WAIT_S (LEASE_MS * 1.1 / 1000 + 0.5) /* what the mover must wait */

static harness *h;
static shard_ctx *ctx;   /* the application's context, on the real store */
static shard_ctx *admin; /* the operator's: moves */

/* ---- maps ---------------------------------------------------------------------------- */

/* The stored map with `key` set to `value` (NULL: removed), one version on. */
static void map_set(const char *key, json_t *value)
{
    shard_store *st = NULL;
    shard_map *cur = NULL, *next = NULL;
    char *text = NULL, *out;
    json_t *doc;

    ck_assert_int_eq(shard_store_open(&st, harness_map_path(h)), 0);
    ck_assert_int_eq(shard_store_load(st, &cur), 0);
    ck_assert_int_eq(shard_map_to_json(cur, &text), 0);
    doc = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    if (value)
        json_object_set_new(doc, key, value);
    else
        json_object_del(doc, key);
    json_object_set_new(doc, "version", json_integer((json_int_t)shard_map_version(cur) + 1));
    out = json_dumps(doc, JSON_COMPACT);
    ck_assert_msg(shard_map_parse(&next, out, strlen(out)) == 0, "%s", shard_errmsg());
    ck_assert_msg(shard_store_publish(st, next, shard_map_version(cur)) == 0, "%s",
                  shard_errmsg());
    free(out);
    json_decref(doc);
    shard_free(text);
    shard_map_free(next);
    shard_map_free(cur);
    shard_store_free(st);
}

/* A copy of the stored map at `path`: a context on it has a store of its own
 * that the test can take away (unlink). */
static void map_copy(const char *path)
{
    char *cmd = fmt("cp '%s' '%s'", harness_map_path(h), path);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
}

static shard_ctx *open_on(const char *path, unsigned budget_ms)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *c = NULL;

    o.refresh_interval_ms = 200; /* renews a 2 s lease */
    o.retry_budget_ms = budget_ms;
    o.log_level = -1;
    ck_assert_msg(shard_ctx_open(&c, path, &o) == 0, "%s", shard_errmsg());
    return c;
}

static uint64_t create(shard_ctx *c, unsigned shard, const char *json)
{
    uint64_t id = 0;
    ck_assert_msg(shard_object_create(c, 1, shard, json, strlen(json), &id) == 0, "create: %s",
                  shard_errmsg());
    return id;
}

static void fence_row(const char *server, unsigned shard, int fenced)
{
    char *q = fmt("SET SESSION sql_log_bin = 0; INSERT INTO libshard_control.fence (db, fenced, "
                  "move_id) VALUES ('db%05u', %d, 77) ON DUPLICATE KEY UPDATE fenced = %d",
                  shard, fenced, fenced);
    free(sql_ok(h, server, q));
    free(q);
}

/* ---- the hook: times of the move's named points ---------------------------------- */

static const char *stop_at; /* fail the move here (once), NULL: never */
static double marked_at, fencing_at;

static int hook(uint64_t id, const char *point)
{
    (void)id;
    if (strcmp(point, "marked") == 0)
        marked_at = now_s();
    if (strcmp(point, "fencing") == 0 && !fencing_at)
        fencing_at = now_s();
    if (stop_at && strcmp(point, stop_at) == 0) {
        stop_at = NULL;
        return SHARD_EINTERNAL;
    }
    return 0;
}

/* ---- tests ------------------------------------------------------------------------------ */

START_TEST(lease_decides_the_check)
{
    char *json = NULL, path[600];
    uint64_t id = create(ctx, 1, "{\"d\":1}");
    shard_ctx *c;

    snprintf(path, sizeof path, "%s/decide-map.json", harness_dir(h));
    map_copy(path);
    c = open_on(path, 300);
    fence_row("s1", 1, 1); /* a fence with no mark: only a check sees it */
    ck_assert_msg(shard_object_get(c, id, &json, NULL) == 0,
                  "under a lease the unmarked shard's fence row was read: %s", shard_errmsg());
    ck_assert_str_eq(json, "{\"d\":1}");
    shard_free(json);
    json = NULL;

    /* Marked: the same read checks. */
    map_set("moving", json_pack("[[i,i]]", 1, 1));
    map_copy(path);
    ck_assert_int_eq(shard_ctx_reload(c), 0);
    FAILS(SHARD_EMOVED, shard_object_get(c, id, &json, NULL));
    map_set("moving", NULL);

    /* No lease in the map: every read checks. */
    map_set("lease_ms", NULL);
    map_copy(path);
    ck_assert_int_eq(shard_ctx_reload(c), 0);
    FAILS(SHARD_EMOVED, shard_object_get(c, id, &json, NULL));
    map_set("lease_ms", json_integer(LEASE_MS));
    fence_row("s1", 1, 0);
    shard_ctx_free(c);
    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
}
END_TEST

START_TEST(stale_context_never_reads_the_source_after_the_flip)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char *json = NULL, path[600];
    uint64_t id = create(ctx, 2, "{\"v\":\"old\"}");
    shard_ctx *stale;
    int rc;

    snprintf(path, sizeof path, "%s/stale-map.json", harness_dir(h));
    map_copy(path);
    stale = open_on(path, 1000);
    ck_assert_int_eq(shard_object_get(stale, id, &json, NULL), 0); /* leased, unmarked */
    shard_free(json);
    json = NULL;
    ck_assert_int_eq(unlink(path), 0); /* its store goes away: no read renews the lease */

    /* The move stops right after its flip: the source is fenced and kept,
     * the target serves. */
    stop_at = "flipped";
    shard__move_hook = hook;
    rc = shard_move(admin, 2, 2, "MySQL002", &o, &r, NULL);
    ck_assert_msg(rc == SHARD_EINTERNAL, "the move did not stop at its flip: %d %s", rc,
                  shard_errmsg());
    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL002");
    ck_assert_msg(shard_object_patch(ctx, id, "{\"v\":\"new\"}", 11, NULL, NULL) == 0, "%s",
                  shard_errmsg());

    rc = shard_object_get(stale, id, &json, NULL);
    bool stale_read = rc == 0 && strstr(json, "old");
    char msg[600];
    snprintf(msg, sizeof msg, "%d %s: %s", rc, rc ? shard_errmsg() : "", json ? json : "");
    shard_free(json);
    shard_ctx_free(stale);

    /* The move finishes before anything is judged: the next tests move too. */
    shard__move_hook = NULL;
    ck_assert_msg(shard_move_resume(admin, r.move_id, &o, &r) == 0, "resume: %s",
                  shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_int_eq(r.mismatches, 0);
    ck_assert_msg(!stale_read, "a context with a map from before the mark read the fenced "
                  "source after the flip: %s", msg);
    ck_assert_msg(rc == SHARD_EMOVED, "want SHARD_EMOVED (fenced, no new map), got %s", msg);
}
END_TEST

START_TEST(mover_waits_out_the_lease)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    int rc;

    create(ctx, 3, "{\"w\":1}");
    marked_at = fencing_at = 0;
    shard__move_hook = hook;
    rc = shard_move(admin, 3, 3, "MySQL002", &o, &r, NULL);
    shard__move_hook = NULL;
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_msg(marked_at > 0 && fencing_at > 0, "hook points not reached");
    fprintf(stderr, "server_lease: fence %.2f s after the mark (lease %d ms), pause %.1f ms\n",
            fencing_at - marked_at, LEASE_MS, r.pause_ms);
    ck_assert_msg(fencing_at - marked_at >= WAIT_S - 0.05,
                  "the fence went up %.2f s after the mark, before the leases (%.2f s) ran out",
                  fencing_at - marked_at, WAIT_S);
}
END_TEST

typedef struct lease_writer {
    shard_ctx *c;
    atomic_bool stop;
    uint64_t ids[4096];
    int n, failed;
} lease_writer;

static void *write_main(void *arg)
{
    lease_writer *lw = arg;

    while (!atomic_load(&lw->stop) && lw->n < 4096) {
        uint64_t id = 0;
        if (shard_object_create(lw->c, 1, 0, "{\"under\":\"lease\"}", 17, &id) == 0)
            lw->ids[lw->n++] = id;
        else
            lw->failed++;
        usleep(2000);
    }
    return NULL;
}

START_TEST(writes_under_a_lease_lose_nothing)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char path[600];
    pthread_t t;
    static lease_writer lw;
    int rc;

    snprintf(path, sizeof path, "%s/writer-map.json", harness_dir(h));
    map_copy(path);
    lw.c = open_on(path, 500);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(pthread_create(&t, NULL, write_main, &lw), 0);
    usleep(200000);
    rc = shard_move(admin, 0, 0, "MySQL002", &o, &r, NULL);
    usleep(200000);
    atomic_store(&lw.stop, true);
    pthread_join(t, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_gt(lw.n, 0);
    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    for (int i = 0; i < lw.n; i++) {
        char *json = NULL;
        ck_assert_msg(shard_object_get(ctx, lw.ids[i], &json, NULL) == 0,
                      "acknowledged object %llu is not on the target: %s",
                      (unsigned long long)lw.ids[i], shard_errmsg());
        shard_free(json);
    }
    fprintf(stderr, "server_lease: %d creates acknowledged during the move, all on the target "
                    "(%d refused while fenced)\n", lw.n, lw.failed);
    shard_ctx_free(lw.c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_lease");
    shard_options o = SHARD_OPTIONS_INIT;
    int failed;

    h = harness_start_ex(2, 8, 2); /* 0-3 on MySQL001, 4-7 on MySQL002 */
    if (!h)
        return 1;
    o.refresh_interval_ms = 0;
    if (shard_ctx_open(&ctx, harness_map_path(h), &o) || harness_open_admin(h, &admin, &o) ||
        shard_schema_apply(admin, NULL, NULL)) {
        fprintf(stderr, "set-up: %s\n", shard_errmsg());
        harness_stop(h);
        return 1;
    }
    {
        /* Every test runs under a map with a lease (the map_set below is
         * the first test's set-up as much as the suite's). */
        TCase *tc = tcase_create("lease");
        tcase_set_timeout(tc, 240);
        tcase_add_test(tc, lease_decides_the_check);
        tcase_add_test(tc, stale_context_never_reads_the_source_after_the_flip);
        tcase_add_test(tc, mover_waits_out_the_lease);
        tcase_add_test(tc, writes_under_a_lease_lose_nothing);
        suite_add_tcase(s, tc);
    }
    {
        shard_store *st = NULL;
        shard_map *cur = NULL, *next = NULL;
        char *text = NULL, *out;
        json_t *doc;
        if (shard_store_open(&st, harness_map_path(h)) || shard_store_load(st, &cur) ||
            shard_map_to_json(cur, &text) || !(doc = json_loads(text, 0, NULL))) {
            fprintf(stderr, "set-up: %s\n", shard_errmsg());
            harness_stop(h);
            return 1;
        }
        json_object_set_new(doc, "lease_ms", json_integer(LEASE_MS));
        json_object_set_new(doc, "version", json_integer((json_int_t)shard_map_version(cur) + 1));
        out = json_dumps(doc, JSON_COMPACT);
        if (shard_map_parse(&next, out, strlen(out)) ||
            shard_store_publish(st, next, shard_map_version(cur))) {
            fprintf(stderr, "set-up: %s\n", shard_errmsg());
            harness_stop(h);
            return 1;
        }
        free(out);
        json_decref(doc);
        shard_free(text);
        shard_map_free(next);
        shard_map_free(cur);
        shard_store_free(st);
        shard_ctx_reload(ctx);
        shard_ctx_reload(admin);
    }
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(admin);
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
