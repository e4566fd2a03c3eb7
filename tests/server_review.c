/*
 * Data-safety review of the move (libshard-move(7)) against real pairs:
 * each test is a sequence of events that once broke one of the two rules
 * (every acknowledged row on both halves of the pair that serves it; an ID
 * never names two objects), driven with the library's move test hook, a
 * killed mover, a stale map or a server started without log_slave_updates.
 *
 *   reverse_start_survives_a_stop_after_the_flip
 *       a mover stopped between the publish and the journal's "flipped",
 *       a client write on the target, a resume: the reverse stream must
 *       start from the position under the fence, or a revert loses the
 *       write and hands its ID out again.
 *   retry_in_planning_keeps_existing_target
 *       a lost connection while planning: the retry must still refuse a
 *       target that already holds the databases (it must not drop them).
 *   stale_map_write_during_move_back
 *       a client with a map from before an earlier move writes while the
 *       shard moves back: the write must not land in the move's copy on
 *       the target (an abort drops it).
 *   transient_failure_is_retried
 *       a lost connection in a phase is retried in the same call and the
 *       move completes (the retry's journal connection stays usable).
 *   join_keeps_other_connections_positions
 *       a move's connection start must not move a GTID domain past what
 *       another move's lagging connection on the server has applied.
 *   read_committed_server_still_fences
 *       a server defaulting to READ COMMITTED: a transaction opened before
 *       a move must not commit on the source after the fence.
 *   resume_rechecks_log_slave_updates
 *       a resume after the target master came back without
 *       log_slave_updates must refuse (or keep every row on both halves).
 *   target_without_log_slave_updates
 *       a target master that does not log what it replicates never passes
 *       the catch-up's rows to its standby: the move must refuse it.
 */
#include "harness.h"
#include "move_util.h"

#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

/* The library's test hook (lib/move/driver.c). */
extern int (*shard__move_hook)(uint64_t move_id, const char *point);

static harness *h;
static shard_ctx *ctx;   /* the application's context (the map's account) */
static shard_ctx *admin; /* the operator's: moves */

static int count_rows(const char *server, unsigned shard)
{
    char sql[200], *out;
    int n;
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05u.pins", shard);
    out = sql_ok(h, server, sql);
    n = atoi(out);
    free(out);
    return n;
}

static uint64_t create(shard_ctx *c, unsigned shard, const char *json)
{
    uint64_t id = 0;
    ck_assert_msg(shard_object_create(c, 1, shard, json, strlen(json), &id) == 0, "create: %s",
                  shard_errmsg());
    return id;
}

/* The object as a context with the current map reads it (NULL: none). */
static char *get(uint64_t id)
{
    char *json = NULL;
    shard_ctx_reload(ctx);
    if (shard_object_get(ctx, id, &json, NULL) != 0)
        return NULL;
    return json;
}

/* ---- the hook's behaviours ------------------------------------------------------- */

static const char *stop_at;  /* the point at which the hook fails the move */
static int stop_code;        /* with this code */
static int stops_left;       /* this many times */

static int stop_hook(uint64_t id, const char *point)
{
    (void)id;
    if (stop_at && strcmp(point, stop_at) == 0 && stops_left > 0) {
        stops_left--;
        return stop_code;
    }
    return 0;
}

static void hook_set(const char *point, int code, int times)
{
    stop_at = point;
    stop_code = code;
    stops_left = times;
    shard__move_hook = stop_hook;
}

static void hook_clear(void)
{
    shard__move_hook = NULL;
    stop_at = NULL;
}

/* ---- tests ------------------------------------------------------------------------ */

/*
 * The mover stops after its map flip landed and before the journal says
 * "flipped" (a kill there leaves the same). Clients already write on the
 * target. The resume must start the reverse stream from the target's
 * position under the fence (before those writes), else the source never
 * gets them: a revert then hides an acknowledged object and the source
 * hands its ID out again.
 */
START_TEST(reverse_start_survives_a_stop_after_the_flip)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, rr = SHARD_MOVE_REPORT_INIT;
    uint64_t x, y;
    char *got;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 0), "MySQL001");
    for (int i = 0; i < 5; i++)
        create(ctx, 0, "{\"before\":1}");
    o.reverse_window_s = 3600;
    hook_set("flipped", SHARD_EINTERNAL, 1);
    rc = shard_move(admin, 0, 0, "MySQL002", &o, &r, NULL);
    hook_clear();
    ck_assert_int_eq(rc, SHARD_EINTERNAL);
    ck_assert_uint_ne(r.move_id, 0);
    /* The map flipped: the application writes on the target. */
    ck_assert_str_eq(pair_of(ctx, 0), "MySQL002");
    x = create(ctx, 0, "{\"after_flip\":1}");
    rc = shard_move_resume(admin, r.move_id, NULL, &r);
    ck_assert_msg(rc == 0, "resume: %s", shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_REVERSIBLE);
    ck_assert_int_eq(harness_sync_standby(h, 1, 60), 0);
    rc = shard_move_revert(admin, r.move_id, NULL, &rr);
    ck_assert_msg(rc == 0, "revert: %d %s", rc, shard_errmsg());
    ck_assert_int_eq(rr.phase, SHARD_MOVE_REVERTED);
    ck_assert_uint_eq(rr.mismatches, 0);
    ck_assert_str_eq(pair_of(ctx, 0), "MySQL001");
    /* The write made on the target is on the source, and its ID is its own. */
    got = get(x);
    ck_assert_msg(got != NULL, "object %llu, written on the target after the flip, is gone "
                  "after the revert", (unsigned long long)x);
    ck_assert_str_eq(got, "{\"after_flip\":1}");
    shard_free(got);
    y = create(ctx, 0, "{\"after_revert\":1}");
    ck_assert_msg(y != x, "ID %llu handed out twice", (unsigned long long)x);
}
END_TEST

/*
 * A fresh move refuses a target that already has the moved databases (a
 * copy kept for inspection, say). A lost connection while planning makes
 * the move try again as a resume does: it must refuse just the same, not
 * drop what is there.
 */
START_TEST(retry_in_planning_keeps_existing_target)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char *out;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 1), "MySQL001");
    free(sql_ok(h, "s3", "CREATE DATABASE db00001; CREATE TABLE db00001.kept (k INT PRIMARY KEY);"
                    " INSERT INTO db00001.kept VALUES (42)"));
    /* Without a failure: refused. */
    rc = shard_move(admin, 1, 1, "MySQL002", NULL, &r, NULL);
    ck_assert_msg(rc == SHARD_EEXISTS, "fresh move: %d %s", rc, shard_errmsg());
    /* With a transient failure in planning: the same answer. */
    hook_set("fence prepared", SHARD_ECONNECT, 1);
    rc = shard_move(admin, 1, 1, "MySQL002", NULL, &r, NULL);
    hook_clear();
    out = sql_ok(h, "s3", "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA ="
                     " 'db00001' AND TABLE_NAME = 'kept'");
    ck_assert_msg(strcmp(out, "1\n") == 0, "the target's db00001.kept was dropped (move: %d %s)",
                  rc, rc ? shard_errmsg() : "done");
    free(out);
    ck_assert_msg(rc == SHARD_EEXISTS, "retried move: %d %s", rc, shard_errmsg());
    ck_assert_str_eq(pair_of(ctx, 1), "MySQL001");
    /* Stopped in planning (a kill there), then aborted: the abort takes
     * apart only what the move made. */
    hook_set("fence prepared", SHARD_EINTERNAL, 1);
    rc = shard_move(admin, 1, 1, "MySQL002", NULL, &r, NULL);
    hook_clear();
    ck_assert_int_eq(rc, SHARD_EINTERNAL);
    rc = shard_move_abort(admin, r.move_id);
    ck_assert_msg(rc == 0, "abort: %s", shard_errmsg());
    out = sql_ok(h, "s3", "SELECT k FROM db00001.kept");
    ck_assert_msg(strcmp(out, "42\n") == 0, "the abort dropped the target's db00001.kept");
    free(out);
    ck_assert_str_eq(pair_of(ctx, 1), "MySQL001");
    free(sql_ok(h, "s3", "DROP DATABASE db00001"));
    /* And the shard still moves once the target is clear. */
    rc = shard_move(admin, 1, 1, "MySQL002", NULL, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_str_eq(pair_of(ctx, 1), "MySQL002");
}
END_TEST

/* A transient failure in a phase is retried in the same call (the phase
 * entered again as a resume enters it): the move completes. */
START_TEST(transient_failure_is_retried)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 8), "MySQL002");
    for (int i = 0; i < 5; i++)
        create(ctx, 8, "{\"retried\":1}");
    hook_set("fence prepared", SHARD_ECONNECT, 1);
    rc = shard_move(admin, 8, 8, "MySQL001", NULL, &r, NULL);
    hook_clear();
    ck_assert_msg(rc == 0, "move with one retried failure: %d %s", rc, shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_str_eq(pair_of(ctx, 8), "MySQL001");
    ck_assert_int_eq(count_rows("s1", 8), 5);
}
END_TEST

/* A mover in a child, SIGKILLed once it has entered catchup. */
static int kill_fd;

static void stop_in_catchup(int phase, uint64_t done, uint64_t total, void *payload)
{
    char c = 1;
    (void)done;
    (void)total;
    (void)payload;
    if (phase == SHARD_MOVE_CATCHUP) {
        if (write(kill_fd, &c, 1) != 1)
            _exit(3);
        raise(SIGSTOP); /* the parent SIGKILLs us here */
    }
}

static void move_killed_in_catchup(unsigned shard, const char *to)
{
    int fds[2], status;
    pid_t pid;
    char c;

    ck_assert_int_eq(pipe(fds), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
        shard_ctx *mc = NULL;
        close(fds[0]);
        kill_fd = fds[1];
        o.progress = stop_in_catchup;
        if (harness_open_admin(h, &mc, NULL))
            _exit(2);
        _exit(shard_move(mc, shard, shard, to, &o, NULL, NULL) == 0 ? 1 : 2);
    }
    close(fds[1]);
    ck_assert_int_eq(read(fds[0], &c, 1), 1);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    close(fds[0]);
}

/*
 * Shard 2 moves to MySQL002 and is dropped from MySQL001. A client that
 * has not read a map since (its store unread: no refresh, no query on the
 * shard) writes while the shard moves back to MySQL001: MySQL001 has the
 * move's copy of the databases by then, and no fence row for them. The
 * write must go to MySQL002 (which serves the shard), not into the copy,
 * which an abort drops.
 */
START_TEST(stale_map_write_during_move_back)
{
    shard_options so = SHARD_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_ctx *old = NULL;
    uint64_t id;
    char *got, *st = NULL;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 2), "MySQL001");
    create(ctx, 2, "{\"first\":1}");
    so.refresh_interval_ms = 0;
    ck_assert_int_eq(shard_ctx_open(&old, harness_map_path(h), &so), 0);
    rc = shard_move(admin, 2, 2, "MySQL002", NULL, &r, NULL);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL002");
    /* Back to MySQL001: the mover dies in catchup (the copy made). */
    move_killed_in_catchup(2, "MySQL001");
    ck_assert_int_eq(shard_move_status(admin, &st), 0);
    ck_assert_msg(strstr(st, "\"phase\":\"catchup\"") != NULL, "%s", st);
    shard_free(st);
    rc = shard_object_create(old, 1, 2, "{\"stale\":1}", 11, &id);
    shard_ctx_free(old);
    ck_assert_msg(rc == 0, "stale write: %s", shard_errmsg());
    /* The interrupted move back is abandoned: its copy goes. */
    rc = shard_move_abort(admin, 0);
    ck_assert_msg(rc == 0, "abort: %s", shard_errmsg());
    ck_assert_str_eq(pair_of(ctx, 2), "MySQL002");
    got = get(id);
    ck_assert_msg(got != NULL, "object %llu, acknowledged to a client with an old map, is "
                  "gone: it was written into the aborted move's copy on MySQL001",
                  (unsigned long long)id);
    ck_assert_str_eq(got, "{\"stale\":1}");
    shard_free(got);
}
END_TEST

static int acked_c;

static void write_c_in_catchup(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)total;
    (void)payload;
    if (phase != SHARD_MOVE_CATCHUP || acked_c)
        return;
    for (int i = 0; i < 3; i++) {
        uint64_t id;
        if (shard_object_create(ctx, 1, 6, "{\"c\":1}", 7, &id) == 0)
            acked_c++;
    }
}

/*
 * One gtid_slave_pos per domain and server: a move joining a server must
 * not move a domain that another move's connection there still has to
 * apply. Move A (shard 5, MySQL001 -> MySQL002) is in catchup, its
 * connection behind (stopped here; a slow applier is the same) while
 * shard 5 takes writes. Move C (shard 6, MySQL001 -> MySQL003) then puts
 * later events of MySQL001's domain into MySQL003's binary log, and move B
 * (shard 16, MySQL003 -> MySQL002) starts its connection on MySQL002 from
 * a position that has them. If B's start moved MySQL001's domain ahead on
 * MySQL002, A's connection would skip the writes to shard 5 for good.
 */
START_TEST(join_keeps_other_connections_positions)
{
    shard_move_options oc = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT, rb = SHARD_MOVE_REPORT_INIT;
    uint64_t ids[10];
    int rc, brc, n = 0;
    char *got;

    ck_assert_str_eq(pair_of(ctx, 5), "MySQL001");
    ck_assert_str_eq(pair_of(ctx, 16), "MySQL003");
    for (int i = 0; i < 5; i++)
        ids[n++] = create(ctx, 5, "{\"a\":1}");
    create(ctx, 16, "{\"b\":1}");
    move_killed_in_catchup(5, "MySQL002");
    free(sql_ok(h, "s3", "STOP SLAVE 'libshard_from_mysql001'"));
    for (int i = 0; i < 5; i++)
        ids[n++] = create(ctx, 5, "{\"a\":2}");
    oc.progress = write_c_in_catchup;
    rc = shard_move(admin, 6, 6, "MySQL003", &oc, &r, NULL);
    ck_assert_msg(rc == 0, "move C: %s", shard_errmsg());
    ck_assert_int_gt(acked_c, 0);
    brc = shard_move(admin, 16, 16, "MySQL002", NULL, &rb, NULL);
    if (brc) {
        printf("move B while A's connection lags: %d %s\n", brc, shard_errmsg());
        ck_assert_msg(brc == SHARD_EBUSY, "move B: %d %s", brc, shard_errmsg());
        rc = shard_move_abort(admin, rb.move_id);
        ck_assert_msg(rc == 0, "abort B: %s", shard_errmsg());
    }
    /* A goes on (its resume starts its connection again). */
    rc = shard_move_resume(admin, 0, NULL, &r);
    ck_assert_msg(rc == 0, "move A resumed: %d %s", rc, shard_errmsg());
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_str_eq(pair_of(ctx, 5), "MySQL002");
    for (int i = 0; i < n; i++) {
        got = get(ids[i]);
        ck_assert_msg(got != NULL, "object %llu of shard 5 is gone after the move",
                      (unsigned long long)ids[i]);
        shard_free(got);
    }
    if (brc) { /* refused while A lagged: it goes now */
        rc = shard_move(admin, 16, 16, "MySQL002", NULL, &r, NULL);
        ck_assert_msg(rc == 0, "move B again: %s", shard_errmsg());
    }
    ck_assert_str_eq(pair_of(ctx, 16), "MySQL002");
}
END_TEST

/* A transaction on shard 7 held open across a move's fence, committed by
 * a thread once the fence is in place (or once the move waits for it). */
typedef struct late_commit {
    shard_txn *t;
    int fenced_first; /* the fence went up while the transaction was open */
    int blocked;      /* the move waited for the transaction */
    int rc;
} late_commit;

static void *commit_late(void *arg)
{
    late_commit *lc = arg;
    for (int i = 0; i < 600 && !lc->fenced_first && !lc->blocked; i++) {
        char *out = NULL;
        usleep(50000);
        if (harness_sql(h, "s1", "SELECT (SELECT COUNT(*) FROM libshard_control.fence WHERE"
                                 " db = 'db00007' AND fenced <> 0), (SELECT COUNT(*) FROM"
                                 " information_schema.INNODB_LOCK_WAITS)", &out) == 0) {
            lc->fenced_first = atoi(out) > 0;
            lc->blocked = atoi(strchr(out, '\t') ? strchr(out, '\t') + 1 : "0") > 0;
        }
        free(out);
    }
    lc->rc = shard_txn_commit(lc->t);
    return NULL;
}

/*
 * The fence holds writes through the shared lock a write takes on its
 * shard's fence row, and for a shard that was never moved (no row yet)
 * through the gap lock of REPEATABLE READ, which the mover's INSERT of the
 * row waits for. A server running READ-COMMITTED (a common setting) takes
 * no gap lock: a transaction opened before the move could then commit on
 * the source after the fence. The library's sessions must not depend on
 * the server's default.
 */
START_TEST(read_committed_server_still_fences)
{
    shard_options so = SHARD_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_ctx *rc_ctx = NULL;
    late_commit lc = {0};
    pthread_t th;
    uint64_t id = 0;
    char *out;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 7), "MySQL001");
    out = sql_ok(h, "s1", "SELECT COUNT(*) FROM libshard_control.fence WHERE db = 'db00007'");
    ck_assert_str_eq(out, "0\n"); /* never moved: no fence row */
    free(out);
    free(sql_ok(h, "s1", "SET GLOBAL tx_isolation = 'READ-COMMITTED'"));
    so.refresh_interval_ms = 0;
    rc = shard_ctx_open(&rc_ctx, harness_map_path(h), &so);
    if (rc == 0)
        rc = shard_txn_begin(rc_ctx, 7, &lc.t);
    if (rc == 0)
        rc = shard_txn_object_create(lc.t, 1, "{\"late\":1}", 10, &id);
    if (rc) {
        free(sql_ok(h, "s1", "SET GLOBAL tx_isolation = 'REPEATABLE-READ'"));
        ck_abort_msg("transaction: %s", shard_errmsg());
    }
    pthread_create(&th, NULL, commit_late, &lc);
    rc = shard_move(admin, 7, 7, "MySQL002", NULL, &r, NULL);
    pthread_join(th, NULL);
    free(sql_ok(h, "s1", "SET GLOBAL tx_isolation = 'REPEATABLE-READ'"));
    shard_ctx_free(rc_ctx);
    ck_assert_msg(!(lc.fenced_first && lc.rc == 0), "a transaction opened before the move "
                  "committed on the source after the fence (object %llu)",
                  (unsigned long long)id);
    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_uint_eq(r.mismatches, 0);
    if (lc.rc == 0) {
        char *got = get(id);
        ck_assert_msg(got != NULL, "object %llu, committed, is gone", (unsigned long long)id);
        shard_free(got);
    }
}
END_TEST

/* ---- a server started with other options ----------------------------------------- */

/* Stop server (s1...) and start it again with its own command line, one
 * argument replaced by another. */
static void restart_with(const char *server, const char *from, const char *to)
{
    char path[600], buf[8192], *argv[128], *out = NULL;
    size_t n = 0, len;
    FILE *f;
    pid_t pid;
    int argc = 0, up = 0;

    snprintf(path, sizeof path, "%s/%s/mariadbd.pid", harness_dir(h), server);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    while (n < len && argc < 126) {
        char *a = buf + n;
        n += strlen(a) + 1;
        argv[argc++] = strcmp(a, from) == 0 ? (char *)to : a;
    }
    argv[argc] = NULL;
    ck_assert_int_eq(harness_stop_server(h, server), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", 0);
        setsid();
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    for (int i = 0; i < 300 && !up; i++) {
        usleep(100000);
        up = harness_sql(h, server, "SELECT 1", NULL) == 0;
    }
    ck_assert_msg(up, "%s did not come back", server);
    free(sql_ok(h, server, "START SLAVE"));
    free(out);
}

/*
 * A move stopped in catchup, its target master restarted without
 * log_slave_updates (a configuration that only had it set at run time,
 * say), the shard written meanwhile: the resume must check again what
 * the fresh move checked, or the rows replicated from then on live on the
 * target master alone when the source is dropped.
 */
START_TEST(resume_rechecks_log_slave_updates)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    int rc, master, standby, acked = 0;

    ck_assert_str_eq(pair_of(ctx, 4), "MySQL001");
    for (int i = 0; i < 10; i++)
        create(ctx, 4, "{\"copied\":1}");
    move_killed_in_catchup(4, "MySQL002");
    restart_with("s3", "--log-slave-updates=ON", "--log-slave-updates=OFF");
    for (int i = 0; i < 5; i++, acked++)
        create(ctx, 4, "{\"after_restart\":1}");
    rc = shard_move_resume(admin, 0, NULL, &r);
    if (rc == SHARD_EINVAL && strstr(shard_errmsg(), "log_slave_updates")) {
        printf("resume refused: %s\n", shard_errmsg());
        restart_with("s3", "--log-slave-updates=OFF", "--log-slave-updates=ON");
        rc = shard_move_resume(admin, 0, NULL, &r);
    }
    ck_assert_msg(rc == 0, "resume: %d %s", rc, shard_errmsg());
    ck_assert_str_eq(pair_of(ctx, 4), "MySQL002");
    harness_sync_standby(h, 2, 30);
    master = count_rows("s3", 4);
    standby = count_rows("s4", 4);
    ck_assert_int_eq(master, 10 + acked);
    ck_assert_msg(standby == master, "the resumed move dropped the source (%s) while target "
                  "standby s4 holds %d of the %d rows", r.source_dropped ? "dropped" : "kept",
                  standby, master);
}
END_TEST

static int acked_in_catchup;

static void write_in_catchup(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)total;
    (void)payload;
    if (phase != SHARD_MOVE_CATCHUP || acked_in_catchup)
        return;
    /* On the source (the map not flipped yet): these reach the target by
     * the catch-up connection only. */
    for (int i = 0; i < 5; i++) {
        uint64_t id;
        if (shard_object_create(ctx, 1, 3, "{\"catchup\":1}", 13, &id) == 0)
            acked_in_catchup++;
    }
}

/*
 * MariaDB's default is log_slave_updates=OFF. A target master that runs
 * so applies the catch-up's rows without logging them, so its standby
 * never gets them, and the flip position (from its binary log) says
 * nothing about them: the move must refuse such a target (or else every
 * acknowledged row must still be on both halves).
 */
START_TEST(target_without_log_slave_updates)
{
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char *out;
    int rc, before, master, standby;

    ck_assert_str_eq(pair_of(ctx, 3), "MySQL001");
    for (int i = 0; i < 10; i++)
        create(ctx, 3, "{\"copied\":1}");
    before = count_rows("s1", 3);
    restart_with("s3", "--log-slave-updates=ON", "--log-slave-updates=OFF");
    out = sql_ok(h, "s3", "SELECT @@log_slave_updates");
    ck_assert_str_eq(out, "0\n");
    free(out);
    o.progress = write_in_catchup;
    rc = shard_move(admin, 3, 3, "MySQL002", &o, &r, NULL);
    if (rc == SHARD_EINVAL && strstr(shard_errmsg(), "log_slave_updates")) {
        printf("target without log_slave_updates refused: %s\n", shard_errmsg());
    } else {
        ck_assert_msg(rc == 0, "move: %d %s", rc, shard_errmsg());
        ck_assert_int_gt(acked_in_catchup, 0);
        harness_sync_standby(h, 2, 30);
        master = count_rows("s3", 3);
        standby = count_rows("s4", 3);
        ck_assert_int_eq(master, before + acked_in_catchup);
        ck_assert_msg(standby == master, "the move dropped the source (%s) while target "
                      "standby s4 holds %d of the %d rows (the %d acknowledged during the "
                      "catch-up are on s3 only)", r.source_dropped ? "dropped" : "kept",
                      standby, master, acked_in_catchup);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_review");
    int failed;

    h = harness_start_ex(3, 24, 3); /* 0-7, 8-15, 16-23 */
    if (!h)
        return 1;
    {
        shard_options o = SHARD_OPTIONS_INIT;
        o.refresh_interval_ms = 0; /* moves are followed through the fence alone */
        if (shard_ctx_open(&ctx, harness_map_path(h), &o) ||
            harness_open_admin(h, &admin, &o)) {
            fprintf(stderr, "open: %s\n", shard_errmsg());
            harness_stop(h);
            return 1;
        }
    }
    if (shard_schema_apply(admin, NULL, NULL)) {
        fprintf(stderr, "schema: %s\n", shard_errmsg());
        harness_stop(h);
        return 1;
    }
    {
        const struct {
            const char *name;
            const TTest *test;
        } cases[] = {
            {"reverse_start", reverse_start_survives_a_stop_after_the_flip},
            {"planning_retry", retry_in_planning_keeps_existing_target},
            {"retried", transient_failure_is_retried},
            {"stale_map", stale_map_write_during_move_back},
            {"join", join_keeps_other_connections_positions},
            {"read_committed", read_committed_server_still_fences},
            {"resume_recheck", resume_rechecks_log_slave_updates},
            {"log_slave_updates", target_without_log_slave_updates},
        };
        /* One case each (CK_RUN_CASE=name runs one); in this order, each
         * building on the map the ones before published. */
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            TCase *tc = tcase_create(cases[i].name);
            tcase_set_timeout(tc, 300);
            tcase_add_test(tc, cases[i].test);
            suite_add_tcase(s, tc);
        }
    }
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(admin);
    shard_ctx_free(ctx);
    harness_stop(h);
    return failed ? 1 : 0;
}
