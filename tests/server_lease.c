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
 *       reads it (SHARD_EMOVED); writes of one statement (create, mapping
 *       add and remove, hard delete) likewise.
 *   stale_context_never_reads_the_source_after_the_flip
 *       a context whose map predates the mark and whose store then goes
 *       away: after the flip it never answers from the fenced source.
 *   mover_waits_out_the_lease
 *       the fence goes up no sooner than lease_ms x 1.1 + lease_ms (the
 *       bound of writes sent under a lease) + 0.5 s after the mark was
 *       published, and the mover's log line says how long it waits.
 *   write_held_across_the_fence_never_commits_on_the_source
 *       a create sent late in a lease taken just before the mark, held on
 *       the server by a table lock until the fence is set: aborted at its
 *       bound (max_statement_time, the map's lease_ms) before the fence, it
 *       runs again with the fence check and lands on the target; nothing of
 *       it commits on the source after the fence.
 *   writes_under_a_lease_lose_nothing
 *       creates from a context whose store went away, during a whole move:
 *       every acknowledged object is on the target afterwards.
 *   mark_left_by_a_stopped_mover_is_reported_and_cleared
 *       a mover stopped once its move was over (left dropping, then done)
 *       leaves the shard marked moving, so every call there checks the
 *       fence: shard_fleet_status reports it with the call that clears it
 *       (shardctl move resume ID), and that call clears it.
 *   resume_of_an_over_move_keeps_an_unfinished_moves_mark
 *       the same call, while another move of the shard is unfinished and
 *       marked it, leaves that mark and names the move it belongs to.
 *   the_next_move_clears_marks_no_move_carries
 *       a move's planning clears the marks that no unfinished move
 *       carries, and keeps the one an unfinished (held) move holds.
 */
#include "harness.h"
#include "move_util.h"

#include <check.h>
#include <jansson.h>
#include <libshard.h>
#include <mysql.h>
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
/* What the mover must wait after the mark: the leases (x 1.1 for clocks),
 * the bound of a write sent under one (the map's lease_ms), 0.5 s margin. */
#define WAIT_S (LEASE_MS * 1.1 / 1000 + LEASE_MS / 1000.0 + 0.5)

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
static void (*at_point)(const char *point); /* a test's own doings, NULL: none */

static int hook(uint64_t id, const char *point)
{
    (void)id;
    if (at_point)
        at_point(point);
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
    uint64_t other = create(ctx, 1, "{\"d\":2}"), gone = create(ctx, 1, "{\"d\":3}"), made = 0;
    fence_row("s1", 1, 1); /* a fence with no mark: only a check sees it */
    ck_assert_msg(shard_object_get(c, id, &json, NULL) == 0,
                  "under a lease the unmarked shard's fence row was read: %s", shard_errmsg());
    ck_assert_str_eq(json, "{\"d\":1}");
    shard_free(json);
    json = NULL;
    /* Writes of one statement skip it too (bounded on the server instead). */
    ck_assert_msg(shard_object_create(c, 1, 1, LIT("{\"d\":4}"), &made) == 0,
                  "under a lease the unmarked shard's create checked the fence: %s",
                  shard_errmsg());
    ck_assert_msg(shard_mapping_add(c, "board_has_pins", id, other, 5) == 0,
                  "under a lease the unmarked shard's mapping add checked the fence: %s",
                  shard_errmsg());
    ck_assert_msg(shard_mapping_remove(c, "board_has_pins", id, other) == 0,
                  "under a lease the unmarked shard's mapping remove checked the fence: %s",
                  shard_errmsg());
    ck_assert_msg(shard_object_delete(c, gone, SHARD_DELETE_HARD) == 0,
                  "under a lease the unmarked shard's hard delete checked the fence: %s",
                  shard_errmsg());

    /* Without "lease_writes" the reads still skip and the writes check. */
    map_set("lease_writes", NULL);
    map_copy(path);
    ck_assert_int_eq(shard_ctx_reload(c), 0);
    ck_assert_msg(shard_object_get(c, id, &json, NULL) == 0, "%s", shard_errmsg());
    shard_free(json);
    json = NULL;
    FAILS(SHARD_EMOVED, shard_object_create(c, 1, 1, LIT("{\"d\":7}"), &made));
    FAILS(SHARD_EMOVED, shard_mapping_add(c, "board_has_pins", id, other, 8));
    FAILS(SHARD_EMOVED, shard_object_delete(c, made, SHARD_DELETE_HARD));
    map_set("lease_writes", json_true());
    map_copy(path);
    ck_assert_int_eq(shard_ctx_reload(c), 0);

    /* Marked: the same read and writes check. */
    map_set("moving", json_pack("[[i,i]]", 1, 1));
    map_copy(path);
    ck_assert_int_eq(shard_ctx_reload(c), 0);
    FAILS(SHARD_EMOVED, shard_object_get(c, id, &json, NULL));
    FAILS(SHARD_EMOVED, shard_object_create(c, 1, 1, LIT("{\"d\":5}"), &made));
    FAILS(SHARD_EMOVED, shard_mapping_add(c, "board_has_pins", id, other, 6));
    FAILS(SHARD_EMOVED, shard_object_delete(c, made, SHARD_DELETE_HARD));
    map_set("moving", NULL);

    /* No lease in the map: every read and write checks. */
    map_set("lease_ms", NULL);
    map_copy(path);
    ck_assert_int_eq(shard_ctx_reload(c), 0);
    FAILS(SHARD_EMOVED, shard_object_get(c, id, &json, NULL));
    FAILS(SHARD_EMOVED, shard_object_create(c, 1, 1, LIT("{\"d\":6}"), &made));
    FAILS(SHARD_EMOVED, shard_mapping_add(c, "board_has_pins", id, other, 7));
    FAILS(SHARD_EMOVED, shard_object_delete(c, made, SHARD_DELETE_HARD));
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

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char wait_line[600]; /* the mover's "waiting N ms before the fence" line */

static void log_wait(int level, const char *message, void *payload)
{
    (void)level;
    (void)payload;
    pthread_mutex_lock(&log_lock);
    if (strstr(message, "before the fence"))
        snprintf(wait_line, sizeof wait_line, "%s", message);
    pthread_mutex_unlock(&log_lock);
}

START_TEST(mover_waits_out_the_lease)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_options lo = SHARD_OPTIONS_INIT;
    shard_ctx *mover = NULL;
    const char *ms;
    int rc;

    lo.refresh_interval_ms = 0;
    lo.log_level = SHARD_LOG_INFO;
    lo.log = log_wait;
    ck_assert_int_eq(harness_open_admin(h, &mover, &lo), 0);
    create(ctx, 3, "{\"w\":1}");
    marked_at = fencing_at = 0;
    shard__move_hook = hook;
    rc = shard_move(mover, 3, 3, "MySQL002", &o, &r, NULL);
    shard__move_hook = NULL;
    shard_ctx_free(mover);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_msg(marked_at > 0 && fencing_at > 0, "hook points not reached");
    fprintf(stderr, "server_lease: fence %.2f s after the mark (lease %d ms), pause %.1f ms; "
            "the mover said: %s\n", fencing_at - marked_at, LEASE_MS, r.pause_ms, wait_line);
    ck_assert_msg(fencing_at - marked_at >= WAIT_S - 0.05,
                  "the fence went up %.2f s after the mark, before the leases and the writes "
                  "they bound (%.2f s) ran out", fencing_at - marked_at, WAIT_S);
    /* It says how long it waits, and that the writes' bound is in it. */
    ck_assert_msg((ms = strstr(wait_line, "waiting ")) && atoi(ms + 8) > 0,
                  "the mover did not say how long it waits: \"%s\"", wait_line);
    ck_assert_msg(atoi(ms + 8) <= (int)(WAIT_S * 1000) + 50,
                  "the mover said it waits longer than %.0f ms: %s", WAIT_S * 1000, wait_line);
    ck_assert_msg(strstr(wait_line, "bounded (2000 ms)"),
                  "the mover's wait does not name the writes' bound: \"%s\"", wait_line);
}
END_TEST

/* ---- a write held on the server across the mark ----------------------------------- */

/* The write goes out late in a lease taken just before the mark; a table
 * lock (LOCK TABLES ... READ on another connection) holds it on the server
 * until the fence is set, then lets it go. */
static struct {
    char path[600];
    shard_ctx *c;            /* its map read from a copy of the store, then gone */
    MYSQL *holder;           /* holds db00001.pins' table lock */
    atomic_int entered;      /* "entered" points seen */
    _Atomic double lease_at; /* when c's last store read started (before the mark) */
    atomic_bool copied;      /* the copy has its snapshot */
    atomic_bool moved;       /* shard_move returned */
    atomic_bool held;        /* holder has the lock */
    atomic_bool released;    /* and let it go (at the fence, or at the end) */
    atomic_int rows_after_fence; /* source rows of the held write once released */
    _Atomic double sent_at;  /* when the create was called */
    _Atomic double done_at;  /* and returned */
    atomic_int rc;
    uint64_t id;
    char msg[600];           /* its shard_errmsg() */
} hw;

static long s1_status(const char *name)
{
    char *out = NULL;
    char *q = fmt("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE "
                  "VARIABLE_NAME = '%s'", name);
    long v = harness_sql(h, "s1", q, &out) == 0 && out ? atol(out) : -1;
    free(q);
    free(out);
    return v;
}

/* A number that `sql` reads on the holder's connection; -1 on failure. */
static long holder_value(const char *sql)
{
    MYSQL_RES *res;
    MYSQL_ROW row;
    long v = -1;

    if (mysql_query(hw.holder, sql) != 0 || !(res = mysql_store_result(hw.holder)))
        return -1;
    if ((row = mysql_fetch_row(res)) && row[0])
        v = atol(row[0]);
    mysql_free_result(res);
    return v;
}

#define HELD_ROWS "SELECT COUNT(*) FROM db00001.pins WHERE JSON_VALUE(data, '$.held') = 'across'"
/* The held statement, still waiting for the table lock. */
#define HELD_WAITING "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE " \
                     "'%INSERT INTO `db00001`%' AND STATE LIKE '%metadata lock%'"

static void holder_release(void)
{
    if (atomic_load(&hw.held) && !atomic_exchange(&hw.released, true))
        mysql_query(hw.holder, "UNLOCK TABLES");
}

static void held_write_point(const char *point)
{
    if (strcmp(point, "entered") == 0 && atomic_fetch_add(&hw.entered, 1) == 0) {
        /* Planned, not yet marked: c's lease starts now, on an unmarked map
         * that no store read renews after this one. */
        atomic_store(&hw.lease_at, now_s());
        shard_ctx_reload(hw.c);
        unlink(hw.path);
    }
    if (strcmp(point, "snapshot opened") == 0)
        atomic_store(&hw.copied, true); /* the copy's snapshot: its reads lock nothing */
    if (strcmp(point, "fence set") == 0 && atomic_load(&hw.held)) {
        /* The held write may go on now: whatever it commits, it commits
         * after the fence. Its statement has ended once no INSERT into
         * db00001 is left waiting for the table lock. (Not held: the write
         * never went out, and the test says so; the holder's connection is
         * the writer's until then.) */
        holder_release();
        for (int i = 0; i < 40 && holder_value(HELD_WAITING) > 0; i++)
            usleep(25000);
        usleep(100000); /* its commit, if it commits */
        atomic_store(&hw.rows_after_fence, (int)holder_value(HELD_ROWS));
    }
    if (strcmp(point, "published") == 0) {
        /* The new map is out: c's store is back, with it. */
        char *cmd = fmt("cp '%s' '%s'", harness_map_path(h), hw.path);
        if (system(cmd) != 0)
            fprintf(stderr, "server_lease: %s failed\n", cmd);
        free(cmd);
    }
}

static void *held_write_main(void *arg)
{
    double send;
    uint64_t id = 0;

    (void)arg;
    while (!atomic_load(&hw.lease_at) || !atomic_load(&hw.copied)) {
        if (atomic_load(&hw.moved)) {
            atomic_store(&hw.rc, -1001); /* the move never got there */
            return NULL;
        }
        usleep(2000);
    }
    /* LOCK TABLES ... READ: the mover's reads, its own LOCK TABLES ... READ
     * (a copy's second try) and its fence (another table) go on. */
    if (mysql_query(hw.holder, "LOCK TABLES db00001.pins READ") != 0) {
        fprintf(stderr, "server_lease: LOCK TABLES: %s\n", mysql_error(hw.holder));
        atomic_store(&hw.rc, -1000);
        return NULL;
    }
    atomic_store(&hw.held, true);
    /* Late in the lease (it ends 2 s after lease_at): on the old mover's
     * wait (1.1 x lease + 0.5 s from the mark) the write's bound would end
     * after the fence. */
    send = atomic_load(&hw.lease_at) + 1.6;
    if (now_s() < send)
        usleep((useconds_t)((send - now_s()) * 1e6));
    atomic_store(&hw.sent_at, now_s());
    atomic_store(&hw.rc, shard_object_create(hw.c, 1, 1, LIT("{\"held\":\"across\"}"), &id));
    atomic_store(&hw.done_at, now_s());
    snprintf(hw.msg, sizeof hw.msg, "%s", atomic_load(&hw.rc) ? shard_errmsg() : "");
    hw.id = id;
    return NULL;
}

START_TEST(write_held_across_the_fence_never_commits_on_the_source)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    pthread_t t;
    long aborted, kept;
    char *json = NULL;
    int rc;

    memset(&hw, 0, sizeof hw);
    snprintf(hw.path, sizeof hw.path, "%s/held-map.json", harness_dir(h));
    map_copy(hw.path);
    hw.c = open_on(hw.path, 15000);
    hw.holder = mysql_init(NULL);
    ck_assert_ptr_nonnull(mysql_real_connect(hw.holder, "127.0.0.1", "shardadmin",
                                             getenv("LIBSHARD_PASSWORD"), NULL,
                                             (unsigned)harness_port(h, "s1"), NULL, 0));
    ck_assert_int_eq(holder_value(HELD_ROWS), 0);
    o.flags = SHARD_MOVE_KEEP_SOURCE; /* its rows counted at the end */
    aborted = s1_status("MAX_STATEMENT_TIME_EXCEEDED");
    atomic_store(&hw.rows_after_fence, -1);
    at_point = held_write_point;
    shard__move_hook = hook;
    ck_assert_int_eq(pthread_create(&t, NULL, held_write_main, NULL), 0);
    rc = shard_move(admin, 1, 1, "MySQL002", &o, &r, NULL);
    atomic_store(&hw.moved, true);
    shard__move_hook = NULL;
    at_point = NULL;
    holder_release(); /* a move that failed before its fence */
    pthread_join(t, NULL);
    kept = holder_value(HELD_ROWS); /* the source's copy, kept fenced */
    mysql_close(hw.holder);
    aborted = s1_status("MAX_STATEMENT_TIME_EXCEEDED") - aborted;
    fprintf(stderr, "server_lease: held write sent %.2f s into its lease: %d (%s), %ld aborted "
            "at the bound, %d of its rows on the source after the fence, %ld at the end\n",
            atomic_load(&hw.sent_at) - atomic_load(&hw.lease_at), atomic_load(&hw.rc),
            atomic_load(&hw.rc) ? shard_strerror(atomic_load(&hw.rc)) : "ok", aborted,
            atomic_load(&hw.rows_after_fence), kept);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_msg(atomic_load(&hw.sent_at) > 0 && atomic_load(&hw.rows_after_fence) >= 0,
                  "the held write did not go out before the fence (%d)", atomic_load(&hw.rc));
    ck_assert_msg(atomic_load(&hw.sent_at) - atomic_load(&hw.lease_at) < 1.9,
                  "the machine was too slow: the write went out %.2f s into a 2 s lease",
                  atomic_load(&hw.sent_at) - atomic_load(&hw.lease_at));
    ck_assert_msg(atomic_load(&hw.rows_after_fence) == 0,
                  "a write sent under the lease committed on the source after the fence "
                  "(%d rows)", atomic_load(&hw.rows_after_fence));
    /* Held until the fence: had any of it committed on the source, it was
     * after the fence. */
    ck_assert_msg(kept == 0, "the source's fenced copy holds %ld rows of the write sent under "
                  "the lease", kept);
    ck_assert_msg(aborted >= 1, "the write under the lease was not aborted at its bound "
                  "(max_statement_time exceeded %ld times)", aborted);
    /* Aborted, not applied, and sent again with the fence check: it waited
     * out the fence and landed on the target. */
    ck_assert_msg(atomic_load(&hw.rc) == 0, "the held create failed after %.2f s: %d %s",
                  atomic_load(&hw.done_at) - atomic_load(&hw.sent_at), atomic_load(&hw.rc),
                  hw.msg);
    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    ck_assert_str_eq(pair_of(ctx, 1), "MySQL002");
    ck_assert_msg(shard_object_get(ctx, hw.id, &json, NULL) == 0,
                  "the acknowledged create is not on the target: %s", shard_errmsg());
    ck_assert_str_eq(json, "{\"held\":\"across\"}");
    shard_free(json);
    shard_ctx_free(hw.c);
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

/* ---- a mark its mover did not clear ------------------------------------------------- */

static int stop_in_phase = -1; /* stop at the "entered" of this journal phase */

/* The mover stops (as one killed there would) right after it journaled
 * the phase stop_in_phase, before anything else. */
static void stop_when_journaled(const char *point)
{
    char *out;

    if (strcmp(point, "entered") != 0 || stop_in_phase < 0)
        return;
    out = sql_ok(h, "s1", "SELECT phase FROM libshard_control.moves ORDER BY id DESC LIMIT 1");
    if (atoi(out) == stop_in_phase) {
        stop_at = "entered";
        stop_in_phase = -1;
    }
    free(out);
}

/* Whether the stored map marks shard moving. */
static bool stored_mark(unsigned shard)
{
    shard_store *st = NULL;
    shard_map *cur = NULL;
    char *text = NULL;
    json_t *doc, *r;
    size_t i;
    bool yes = false;

    ck_assert_int_eq(shard_store_open(&st, harness_map_path(h)), 0);
    ck_assert_int_eq(shard_store_load(st, &cur), 0);
    ck_assert_int_eq(shard_map_to_json(cur, &text), 0);
    doc = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    json_array_foreach(json_object_get(doc, "moving"), i, r)
        yes = yes || (json_integer_value(json_array_get(r, 0)) <= shard &&
                      json_integer_value(json_array_get(r, 1)) >= shard);
    json_decref(doc);
    shard_free(text);
    shard_map_free(cur);
    shard_store_free(st);
    return yes;
}

/* A move of shard to target whose mover stops once it marked the shard:
 * the move stays unfinished, holding the mark. */
static void move_held_at_mark(unsigned shard, const char *target, shard_move_report *r)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    int rc;

    stop_at = "marked";
    shard__move_hook = hook;
    rc = shard_move(admin, shard, shard, target, &o, r, NULL);
    shard__move_hook = NULL;
    ck_assert_msg(rc == SHARD_EINTERNAL, "the move did not stop once marked: %d", rc);
    ck_assert_msg(stored_mark(shard), "the held move did not mark shard %u", shard);
}

/* The problem of shard_fleet_status that holds needle (malloc'd), or NULL. */
static char *status_problem(const char *needle)
{
    char *json = NULL, *line = NULL;
    json_t *doc, *p;
    size_t i;

    ck_assert_int_eq(shard_ctx_reload(admin), 0);
    ck_assert_msg(shard_fleet_status(admin, &json) == 0, "status: %s", shard_errmsg());
    doc = json_loads(json, 0, NULL);
    ck_assert_ptr_nonnull(doc);
    json_array_foreach(json_object_get(doc, "problems"), i, p)
        if (!line && strstr(json_string_value(p), needle))
            line = strdup(json_string_value(p));
    json_decref(doc);
    shard_free(json);
    return line;
}

/* Whether shard_fleet_status has a problem that holds needle. */
static bool has_problem(const char *needle)
{
    char *line = status_problem(needle);
    bool yes = line != NULL;
    free(line);
    return yes;
}

START_TEST(mark_left_by_a_stopped_mover_is_reported_and_cleared)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char *line;
    int rc;

    create(ctx, 6, "{\"m\":6}");
    shard__move_hook = hook;
    at_point = stop_when_journaled;

    /* Done for its user, the source left to drop: the mover stops there. */
    stop_in_phase = SHARD_MOVE_DROPPING;
    rc = shard_move(admin, 6, 6, "MySQL001", &o, &r, NULL);
    ck_assert_msg(rc == SHARD_EINTERNAL, "the move did not stop once left dropping: %d %s", rc,
                  rc ? shard_errmsg() : "");
    ck_assert_msg(stored_mark(6), "the stopped mover cleared its mark: nothing to test");
    line = status_problem("shards 6-6 ");
    ck_assert_msg(line, "shard_fleet_status does not report shard 6 marked moving with its "
                  "move over");
    char *want = fmt("shardctl move resume %llu", (unsigned long long)r.move_id);
    ck_assert_msg(strstr(line, want), "the problem does not name '%s': %s", want, line);
    free(want);
    free(line);

    /* Its resume drops the source and stops once the move is journaled done. */
    stop_in_phase = SHARD_MOVE_DONE;
    rc = shard_move_resume(admin, r.move_id, &o, &r);
    ck_assert_msg(rc == SHARD_EINTERNAL, "the resume did not stop once done: %d %s", rc,
                  rc ? shard_errmsg() : "");
    ck_assert_msg(stored_mark(6), "the stopped resume cleared the mark: nothing to test");
    line = status_problem("shards 6-6 ");
    ck_assert_msg(line && strstr(line, "no unfinished move carries them") &&
                  strstr(line, "shardctl move resume"),
                  "shard_fleet_status does not report shard 6 marked moving with no move "
                  "carrying it, nor how to clear it: %s", line ? line : "(no problem)");
    free(line);
    at_point = NULL;
    shard__move_hook = NULL;

    /* What the problem says clears it: resuming the move that was over. */
    ck_assert_msg(shard_move_resume(admin, r.move_id, &o, &r) == 0, "resume of the done "
                  "move: %s", shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_msg(!stored_mark(6), "resuming the done move left shard 6 marked moving");
    line = status_problem("marked moving");
    ck_assert_msg(!line, "still reported once the mark is gone: %s", line);
    ck_assert_str_eq(pair_of(admin, 6), "MySQL001");
}
END_TEST

START_TEST(resume_of_an_over_move_keeps_an_unfinished_moves_mark)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, r2 = SHARD_MOVE_REPORT_INIT;
    uint64_t over;
    int rc;

    create(ctx, 7, "{\"m\":7}");
    ck_assert_msg(shard_move(admin, 7, 7, "MySQL001", &o, &r, NULL) == 0, "move: %s",
                  shard_errmsg());
    ck_assert_msg(!stored_mark(7), "a move that ended left its mark");
    over = r.move_id;
    /* Shard 7 moves again, and its mover stops once it marked it. */
    move_held_at_mark(7, "MySQL002", &r2);
    ck_assert_msg(!has_problem("marked moving"), "an unfinished move's mark was reported");

    /* The mark is the unfinished move's: resuming the one that is over keeps it. */
    rc = shard_move_resume(admin, over, &o, &r);
    ck_assert_msg(rc == SHARD_ENOTFOUND, "resume of the move that is over: want "
                  "SHARD_ENOTFOUND, got %d %s", rc, rc ? shard_errmsg() : "");
    char *want = fmt("unfinished move %llu", (unsigned long long)r2.move_id);
    ck_assert_msg(strstr(shard_errmsg(), want), "the refusal does not name %s: %s", want,
                  shard_errmsg());
    free(want);
    ck_assert_msg(stored_mark(7), "resuming a move that is over cleared the mark of an "
                  "unfinished move of the same shard");
    /* A wider mark (made by hand, 6-7) that the unfinished move shares a
     * shard with: kept by a sweep and a resume, so not reported either. */
    map_set("moving", json_pack("[[i,i]]", 6, 7));
    ck_assert_msg(!has_problem("marked moving"), "a mark an unfinished move overlaps was "
                  "reported as carried by none");
    map_set("moving", json_pack("[[i,i]]", 7, 7));
    ck_assert_msg(shard_move_abort(admin, r2.move_id) == 0, "abort: %s", shard_errmsg());
    ck_assert_msg(!stored_mark(7), "the abort left shard 7 marked");
    ck_assert_str_eq(pair_of(admin, 7), "MySQL001");
}
END_TEST

START_TEST(the_next_move_clears_marks_no_move_carries)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, held = SHARD_MOVE_REPORT_INIT;

    create(ctx, 4, "{\"m\":4}");
    /* An unfinished move of shard 6 (the other way: moves between the
     * same pairs wait their turn) holds its mark... */
    move_held_at_mark(6, "MySQL002", &held);
    /* ...and shards 2-3 carry one that no move does (as a mover stopped
     * before clearing it leaves it). */
    map_set("moving", json_pack("[[i,i],[i,i]]", 6, 6, 2, 3));
    ck_assert_msg(has_problem("shards 2-3 "), "the mark of shards 2-3 is not reported");

    ck_assert_msg(shard_move(admin, 4, 4, "MySQL001", &o, &r, NULL) == 0, "move: %s",
                  shard_errmsg());
    ck_assert_msg(!stored_mark(2) && !stored_mark(3), "the next move left the mark that no "
                  "move carried");
    ck_assert_msg(stored_mark(6), "the next move cleared the mark of an unfinished move");
    ck_assert_msg(!stored_mark(4), "the move left its own mark");
    ck_assert_msg(shard_move_abort(admin, held.move_id) == 0, "abort: %s", shard_errmsg());
    ck_assert_msg(!stored_mark(6), "the abort left shard 6 marked");
    ck_assert_msg(!has_problem("marked moving"), "a mark is still reported");
    ck_assert_str_eq(pair_of(admin, 4), "MySQL001");
    ck_assert_str_eq(pair_of(admin, 6), "MySQL001");
}
END_TEST


/* A stale mark larger than the next move's range: the move of one of its
 * shards must not keep it (as the only carrier of it) past its end. */
START_TEST(a_move_inside_a_stale_mark_clears_it)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char to[64];
    char *line;

    create(ctx, 2, "{\"m\":2}");
    snprintf(to, sizeof to, "%s", strcmp(pair_of(admin, 2), "MySQL001") == 0 ? "MySQL002"
                                                                             : "MySQL001");
    /* Shards 2-3 carry a mark that no move does (a mover stopped before
     * clearing it). */
    map_set("moving", json_pack("[[i,i]]", 2, 3));
    ck_assert_msg(has_problem("shards 2-3 "), "the mark of shards 2-3 is not reported");
    /* The next move of shard 2, one of those shards. */
    ck_assert_msg(shard_move(admin, 2, 2, to, &o, &r, NULL) == 0, "move: %s", shard_errmsg());
    ck_assert_str_eq(pair_of(admin, 2), to);
    line = status_problem("marked moving");
    ck_assert_msg(!stored_mark(3), "the move of shard 2 left the mark of shards 2-3 that no "
                  "move carries (status: %s)", line ? line : "(nothing)");
    free(line);
}
END_TEST

/* Whether the stored map marks shard moving: 1, 0, or -1 when the store
 * does not answer (no assertion: called from inside a mover's hook). */
static int mark_now(unsigned shard)
{
    shard_store *st = NULL;
    shard_map *cur = NULL;
    char *text = NULL;
    json_t *doc = NULL, *r;
    size_t i;
    int yes = 0;

    if (shard_store_open(&st, harness_map_path(h)) || shard_store_load(st, &cur) ||
        shard_map_to_json(cur, &text) || !(doc = json_loads(text, 0, NULL)))
        yes = -1;
    json_array_foreach(json_object_get(doc, "moving"), i, r)
        if (yes == 0 && json_integer_value(json_array_get(r, 0)) <= shard &&
            json_integer_value(json_array_get(r, 1)) >= shard)
            yes = 1;
    json_decref(doc);
    shard_free(text);
    shard_map_free(cur);
    shard_store_free(st);
    return yes;
}

static unsigned revert_shard;
static int marked_at_drop = -2; /* -2: no drop point seen */

static int look_at_drop(uint64_t id, const char *point)
{
    (void)id;
    if (strcmp(point, "source database dropped") == 0 && marked_at_drop == -2)
        marked_at_drop = mark_now(revert_shard);
    return 0;
}

/* A revert takes its mark off once it is flipped back and verified, before
 * it drops the target's copies one at a time: no fence is set after that,
 * and calls on those shards skip the check again while the drops run. */
START_TEST(a_revert_unmarks_before_its_drops)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, rr = SHARD_MOVE_REPORT_INIT;
    char from[64], to[64];
    int rc;

    revert_shard = 5;
    create(ctx, revert_shard, "{\"r\":5}");
    snprintf(from, sizeof from, "%s", pair_of(admin, revert_shard));
    snprintf(to, sizeof to, "%s", strcmp(from, "MySQL001") == 0 ? "MySQL002" : "MySQL001");
    o.reverse_window_s = 600;
    rc = shard_move(admin, revert_shard, revert_shard, to, &o, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_REVERSIBLE);
    ck_assert_msg(stored_mark(revert_shard), "a reversible move keeps its mark (it may fence "
                  "again, to revert)");
    marked_at_drop = -2;
    shard__move_hook = look_at_drop;
    rc = shard_move_revert(admin, r.move_id, NULL, &rr);
    shard__move_hook = NULL;
    ck_assert_msg(rc == 0, "revert: %s", shard_errmsg());
    ck_assert_int_eq(rr.phase, SHARD_MOVE_REVERTED);
    ck_assert_str_eq(pair_of(admin, revert_shard), from);
    ck_assert_msg(marked_at_drop == 0, "at the revert's first drop the shard was %s",
                  marked_at_drop == -2 ? "(no drop point reached)"
                  : marked_at_drop < 0 ? "unknown (the store did not answer)" : "still marked");
    ck_assert(!stored_mark(revert_shard));
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
        tcase_add_test(tc, write_held_across_the_fence_never_commits_on_the_source);
        tcase_add_test(tc, writes_under_a_lease_lose_nothing);
        tcase_add_test(tc, mark_left_by_a_stopped_mover_is_reported_and_cleared);
        tcase_add_test(tc, resume_of_an_over_move_keeps_an_unfinished_moves_mark);
        tcase_add_test(tc, the_next_move_clears_marks_no_move_carries);
        tcase_add_test(tc, a_move_inside_a_stale_mark_clears_it);
        tcase_add_test(tc, a_revert_unmarks_before_its_drops);
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
        json_object_set_new(doc, "lease_writes", json_true());
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
