/*
 * A move at scale, through the public API only: 128 open shards of 6 tables
 * each (3 object types, 2 mappings and a reverse), shards 0-63 preloaded,
 * moved in one shard_move to an empty pair while 4 writer threads of this
 * process create, patch and read objects and add mapping rows on them.
 *
 * Checked: the move succeeds and verifies every row; no writer call fails
 * within its retry budget; every acknowledged write, and every preloaded
 * row, is on both halves of the pair the map now names, with its exact
 * content, and nothing else is; the source pair no longer holds the moved
 * databases. The pause and the worst writer call are printed, never
 * asserted (see shard_move(3), libshard-move(7)).
 */
#include "harness.h"
#include "check_util.h"

#include <check.h>
#include <libshard.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SHARDS 128
#define MOVED_FIRST 0u
#define MOVED_LAST 63u
#define NMOVED (MOVED_LAST - MOVED_FIRST + 1)
#define SOURCE "MySQL001"
#define TARGET "MySQL002" /* empty until the move */
#define PRE_PINS 50       /* per moved shard; as many user_likes_pins rows */
#define PRE_BOARDS 5      /* per moved shard; each board holds PRE_PINS / PRE_BOARDS pins */
#define WRITERS 4
#define COPY_THREADS 3
#define WRITER_PAUSE_US 2000 /* between one writer's rounds: a steady load, not a flood */

enum { PINS = 1, BOARDS = 2, USERS = 3 }; /* the harness map's object types */

static const char *const object_table[] = {NULL, "pins", "boards", "users"};
static const char *const mapping_tables[] = {"user_likes_pins", "board_has_pins",
                                             "pin_owned_by_board"};

static harness *h;
static shard_ctx *ctx; /* the application's, shared by the writers */

static uint64_t id_of(unsigned shard, unsigned type, uint64_t local)
{
    uint64_t id = 0;
    ck_assert_int_eq(shard_id_make(shard, type, local, &id), 0);
    return id;
}

/* ---- lines: one row of a shard table, as the mariadb client prints it ------- */

typedef struct lines {
    char **v;
    size_t n, cap;
} lines;

static void add_line(lines *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_line(lines *l, const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    int rc;

    va_start(ap, fmt);
    rc = vasprintf(&s, fmt, ap);
    va_end(ap);
    ck_assert_int_ge(rc, 0);
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4096;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        ck_assert_ptr_nonnull(l->v);
    }
    l->v[l->n++] = s;
}

static void free_lines(lines *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void object_line(lines *l, uint64_t id, const char *json)
{
    add_line(l, "%s\t%u\t%llu\t%s", object_table[shard_id_type(id)], shard_id_shard(id),
             (unsigned long long)shard_id_local(id), json);
}

static void mapping_line(lines *l, const char *table, uint64_t from, uint64_t to, int64_t seq)
{
    add_line(l, "%s\t%u\t%llu\t%llu\t%lld", table, shard_id_shard(from),
             (unsigned long long)from, (unsigned long long)to, (long long)seq);
}

/* ---- the preload: written straight into the source's tables ---------------- */

static void pre_pin_json(char *buf, size_t size, unsigned s, unsigned l)
{
    snprintf(buf, size, "{\"pre\":%u,\"s\":%u,\"title\":\"pin %u of shard %u\"}", l, s, l, s);
}

static unsigned board_of_pin(unsigned l)
{
    return l % PRE_BOARDS + 1;
}

/* What the preload puts on shard s, as lines. */
static void preload_lines(lines *l, unsigned s)
{
    char json[128];
    uint64_t user = id_of(s, USERS, 1);

    for (unsigned p = 1; p <= PRE_PINS; p++) {
        uint64_t pin = id_of(s, PINS, p), board = id_of(s, BOARDS, board_of_pin(p));
        pre_pin_json(json, sizeof json, s, p);
        object_line(l, pin, json);
        mapping_line(l, "user_likes_pins", user, pin, p);
        mapping_line(l, "board_has_pins", board, pin, p);
        mapping_line(l, "pin_owned_by_board", pin, board, p);
    }
    for (unsigned b = 1; b <= PRE_BOARDS; b++) {
        snprintf(json, sizeof json, "{\"board\":%u,\"s\":%u}", b, s);
        object_line(l, id_of(s, BOARDS, b), json);
    }
    snprintf(json, sizeof json, "{\"user\":1,\"s\":%u}", s);
    object_line(l, user, json);
}

/* One SQL script filling every table of the moved shards on the source master. */
static void preload(void)
{
    size_t cap = (size_t)NMOVED * (PRE_PINS * 400 + 2000), len = 0;
    char *sql = malloc(cap), *out = NULL;

    ck_assert_ptr_nonnull(sql);
#define ADD(...) (len += (size_t)snprintf(sql + len, cap - len, __VA_ARGS__))
    for (unsigned s = MOVED_FIRST; s <= MOVED_LAST; s++) {
        char json[128];
        unsigned long long user = id_of(s, USERS, 1);
        ADD("INSERT INTO db%05u.pins (local_id, data) VALUES ", s);
        for (unsigned p = 1; p <= PRE_PINS; p++) {
            pre_pin_json(json, sizeof json, s, p);
            ADD("%s(%u,'%s')", p > 1 ? "," : "", p, json);
        }
        ADD(";\nINSERT INTO db%05u.boards (local_id, data) VALUES ", s);
        for (unsigned b = 1; b <= PRE_BOARDS; b++)
            ADD("%s(%u,'{\"board\":%u,\"s\":%u}')", b > 1 ? "," : "", b, b, s);
        ADD(";\nINSERT INTO db%05u.users (local_id, data) VALUES (1,'{\"user\":1,\"s\":%u}');\n",
            s, s);
        for (int t = 0; t < 3; t++) {
            ADD("INSERT INTO db%05u.%s (from_id, to_id, sequence) VALUES ", s, mapping_tables[t]);
            for (unsigned p = 1; p <= PRE_PINS; p++) {
                unsigned long long pin = id_of(s, PINS, p),
                                   board = id_of(s, BOARDS, board_of_pin(p));
                unsigned long long from = t == 0 ? user : t == 1 ? board : pin;
                unsigned long long to = t == 0 ? pin : t == 1 ? pin : board;
                ADD("%s(%llu,%llu,%u)", p > 1 ? "," : "", from, to, p);
            }
            ADD(";\n");
        }
    }
#undef ADD
    ck_assert_uint_lt(len, cap);
    ck_assert_int_eq(harness_sql(h, "s1", sql, &out), 0);
    free(out);
    free(sql);
}

/* ---- writers ----------------------------------------------------------------- */

typedef struct wobj {
    uint64_t id;
    char json[128]; /* the content last acknowledged */
} wobj;

typedef struct wmap {
    int table; /* index in mapping_tables */
    uint64_t from, to;
    int64_t seq;
} wmap;

typedef struct writer {
    int no;
    atomic_int *stop;
    wobj *objs;
    size_t nobjs, capobjs;
    wmap *maps;
    size_t nmaps, capmaps;
    long rounds, calls;
    int errors;
    char err[512];
    double worst;       /* the longest single call, seconds */
    const char *worst_op;
    pthread_t thread;
} writer;

static wobj *keep_obj(writer *w, uint64_t id, const char *json)
{
    if (w->nobjs == w->capobjs) {
        w->capobjs = w->capobjs ? 2 * w->capobjs : 1024;
        w->objs = realloc(w->objs, w->capobjs * sizeof *w->objs);
        ck_assert_ptr_nonnull(w->objs);
    }
    w->objs[w->nobjs].id = id;
    snprintf(w->objs[w->nobjs].json, sizeof w->objs[w->nobjs].json, "%s", json);
    return &w->objs[w->nobjs++];
}

static void keep_map(writer *w, int table, uint64_t from, uint64_t to, int64_t seq)
{
    if (w->nmaps == w->capmaps) {
        w->capmaps = w->capmaps ? 2 * w->capmaps : 1024;
        w->maps = realloc(w->maps, w->capmaps * sizeof *w->maps);
        ck_assert_ptr_nonnull(w->maps);
    }
    w->maps[w->nmaps++] = (wmap){table, from, to, seq};
}

/* Times one call; a failure is counted with its message. */
static int timed(writer *w, const char *op, int rc, double t0)
{
    double d = now_s() - t0;
    w->calls++;
    if (d > w->worst) {
        w->worst = d;
        w->worst_op = op;
    }
    if (rc) {
        w->errors++;
        snprintf(w->err, sizeof w->err, "%s: %s (%s)", op, shard_strerror(rc), shard_errmsg());
    }
    return rc;
}

/* One round: a pin created, patched and read back, liked by itself; every
 * fourth round a board (on another moved shard) that holds the pin. One
 * round in eight goes to a shard that stays where it is. */
static void write_round(writer *w, long i, unsigned *x)
{
    unsigned s = i % 8 == 7 ? NMOVED + (unsigned)rand_r(x) % (SHARDS - NMOVED)
                            : MOVED_FIRST + (unsigned)rand_r(x) % NMOVED;
    char json[128], *res = NULL, *got = NULL;
    uint64_t pin, board;
    size_t k;
    double t0;
    int rc;

    snprintf(json, sizeof json, "{\"w\":%d,\"i\":%ld,\"s\":%u}", w->no, i, s);
    t0 = now_s();
    if (timed(w, "create", shard_object_create(ctx, PINS, s, json, strlen(json), &pin), t0))
        return;
    k = keep_obj(w, pin, json) - w->objs;
    snprintf(json, sizeof json, "{\"p\":%ld}", i);
    t0 = now_s();
    if (timed(w, "patch", shard_object_patch(ctx, pin, json, strlen(json), &res, NULL), t0))
        return;
    snprintf(w->objs[k].json, sizeof w->objs[k].json, "%s", res);
    t0 = now_s();
    rc = timed(w, "get", shard_object_get(ctx, pin, &got, NULL), t0);
    if (rc == 0 && strcmp(got, res) != 0) {
        w->errors++;
        snprintf(w->err, sizeof w->err, "get %llu: \"%.100s\", not the patched \"%.100s\"",
                 (unsigned long long)pin, got, res);
    }
    shard_free(got);
    shard_free(res);
    t0 = now_s();
    if (timed(w, "mapping_add", shard_mapping_add(ctx, "user_likes_pins", pin, pin, i + 1), t0))
        return;
    keep_map(w, 0, pin, pin, i + 1);
    if (i % 4 != 0 || s >= NMOVED)
        return;
    {
        unsigned bs = MOVED_FIRST + (s - MOVED_FIRST + 17) % NMOVED;
        snprintf(json, sizeof json, "{\"w\":%d,\"board\":%ld}", w->no, i);
        t0 = now_s();
        if (timed(w, "create", shard_object_create(ctx, BOARDS, bs, json, strlen(json), &board),
                  t0))
            return;
        keep_obj(w, board, json);
        t0 = now_s();
        if (timed(w, "mapping_add", shard_mapping_add(ctx, "board_has_pins", board, pin, i + 1),
                  t0))
            return;
        keep_map(w, 1, board, pin, i + 1);
        keep_map(w, 2, pin, board, i + 1);
    }
}

static void *write_loop(void *arg)
{
    writer *w = arg;
    unsigned x = 0x9E3779B9u * (unsigned)(w->no + 1);

    for (long i = 0; !atomic_load(w->stop); i++) {
        write_round(w, i, &x);
        w->rounds++;
        usleep(WRITER_PAUSE_US);
    }
    return NULL;
}

/* ---- checking a pair ---------------------------------------------------------- */

/* Every row of shard s's six tables on `server`, as lines (appended). */
static void server_lines(const char *server, const unsigned *shards, size_t nshards, lines *l)
{
    size_t cap = nshards * 1200 + 64, len = 0;
    char *sql = malloc(cap), *out = NULL, *save = NULL;
    int rc;

    ck_assert_ptr_nonnull(sql);
    for (size_t i = 0; i < nshards; i++) {
        unsigned s = shards[i];
        for (int t = PINS; t <= USERS; t++)
            len += (size_t)snprintf(sql + len, cap - len,
                                    "SELECT '%s', %u, local_id, data FROM db%05u.%s;\n",
                                    object_table[t], s, s, object_table[t]);
        for (int t = 0; t < 3; t++)
            len += (size_t)snprintf(sql + len, cap - len,
                                    "SELECT '%s', %u, from_id, to_id, sequence FROM db%05u.%s;\n",
                                    mapping_tables[t], s, s, mapping_tables[t]);
    }
    ck_assert_uint_lt(len, cap);
    rc = harness_sql(h, server, sql, &out);
    ck_assert_msg(rc == 0, "reading the shard tables on %s failed (status %d)", server, rc);
    for (char *p = strtok_r(out, "\n", &save); p; p = strtok_r(NULL, "\n", &save))
        add_line(l, "%s", p);
    free(out);
    free(sql);
}

/* What must be on shards[]: the preload and every acknowledged write. */
static void expected_lines(writer *wr, const unsigned *shards, size_t nshards, lines *l)
{
    char on[SHARDS] = {0};

    for (size_t i = 0; i < nshards; i++) {
        on[shards[i]] = 1;
        if (shards[i] <= MOVED_LAST)
            preload_lines(l, shards[i]);
    }
    for (int k = 0; k < WRITERS; k++) {
        for (size_t i = 0; i < wr[k].nobjs; i++)
            if (on[shard_id_shard(wr[k].objs[i].id)])
                object_line(l, wr[k].objs[i].id, wr[k].objs[i].json);
        for (size_t i = 0; i < wr[k].nmaps; i++) {
            const wmap *m = &wr[k].maps[i];
            if (on[shard_id_shard(m->from)])
                mapping_line(l, mapping_tables[m->table], m->from, m->to, m->seq);
        }
    }
}

/* The server holds exactly the expected rows of shards[], byte for byte. */
static void check_server(const char *server, writer *wr, const unsigned *shards,
                         size_t nshards)
{
    lines want = {0}, have = {0};
    size_t i;

    expected_lines(wr, shards, nshards, &want);
    server_lines(server, shards, nshards, &have);
    qsort(want.v, want.n, sizeof *want.v, cmp_str);
    qsort(have.v, have.n, sizeof *have.v, cmp_str);
    for (i = 0; i < want.n && i < have.n; i++)
        if (strcmp(want.v[i], have.v[i]) != 0)
            break;
    ck_assert_msg(i == want.n && i == have.n,
                  "%s: %zu rows expected, %zu found; first difference: expected \"%s\", "
                  "found \"%s\"", server, want.n, have.n, i < want.n ? want.v[i] : "(end)",
                  i < have.n ? have.v[i] : "(end)");
    printf("%s: all %zu rows of %zu shards present, exact\n", server, have.n, nshards);
    free_lines(&want);
    free_lines(&have);
}

static int databases_between(const char *server, unsigned first, unsigned last)
{
    char sql[200], *out = NULL;
    int n;

    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE "
             "SCHEMA_NAME BETWEEN 'db%05u' AND 'db%05u'", first, last);
    ck_assert_int_eq(harness_sql(h, server, sql, &out), 0);
    n = atoi(out);
    free(out);
    return n;
}

/* ---- the test ------------------------------------------------------------------ */

static double t_phase[SHARD_MOVE_ABORTED + 1];

static void phase_seen(int phase, uint64_t done, uint64_t total, void *payload)
{
    (void)done;
    (void)total;
    (void)payload;
    if (phase >= 0 && phase <= SHARD_MOVE_ABORTED && t_phase[phase] == 0)
        t_phase[phase] = now_s();
}

START_TEST(move_64_shards_of_6_tables_under_writers)
{
    static writer wr[WRITERS];
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_ctx *mover = NULL;
    atomic_int stop = 0;
    unsigned moved[NMOVED], stayed[SHARDS - NMOVED];
    size_t nstayed = 0;
    shard_move_report dr = SHARD_MOVE_REPORT_INIT;
    double t0, t1, t2, worst = 0;
    int left, drc = 0;
    const char *worst_op = "-";
    long calls = 0, rounds = 0;
    int rc, errors = 0;

    preload();
    ck_assert_int_eq(harness_sync_standby(h, 1, 120), 0);
    ck_assert_str_eq(pair_of(ctx, MOVED_FIRST), SOURCE);
    ck_assert_int_eq(databases_between("s3", MOVED_FIRST, MOVED_LAST), 0);

    /* The mover has a context of its own, as an operator's process would,
     * on the operator's account. */
    ck_assert_msg(harness_open_admin(h, &mover, NULL) == 0, "%s", shard_errmsg());
    for (int k = 0; k < WRITERS; k++) {
        wr[k] = (writer){.no = k, .stop = &stop, .worst_op = "-"};
        ck_assert_int_eq(pthread_create(&wr[k].thread, NULL, write_loop, &wr[k]), 0);
    }
    usleep(300000);
    o.copy_threads = COPY_THREADS;
    o.progress = phase_seen;
    t0 = now_s();
    rc = shard_move(mover, MOVED_FIRST, MOVED_LAST, TARGET, &o, &r, NULL);
    t1 = now_s();
    if (rc)
        fprintf(stderr, "move: %s: %s\n", shard_strerror(rc), shard_errmsg());
    /* Done before the drops: the source whole; then dropped, writers on. */
    left = rc ? -1 : databases_between("s1", MOVED_FIRST, MOVED_LAST);
    if (rc == 0 && (drc = shard_move_resume(mover, r.move_id, NULL, &dr)))
        fprintf(stderr, "drop: %s: %s\n", shard_strerror(drc), shard_errmsg());
    t2 = now_s();
    usleep(300000);
    atomic_store(&stop, 1);
    for (int k = 0; k < WRITERS; k++) {
        pthread_join(wr[k].thread, NULL);
        errors += wr[k].errors;
        calls += wr[k].calls;
        rounds += wr[k].rounds;
        if (wr[k].worst > worst) {
            worst = wr[k].worst;
            worst_op = wr[k].worst_op;
        }
    }
    shard_ctx_free(mover);

    printf("move of shards %u-%u (%llu tables) %s -> %s: rc %d, %.2f s in all (planning "
           "%.2f s, copy %.2f s, catch-up %.2f s, cut-over %.3f s, verify %.2f s), %llu rows "
           "copied, %llu verified, %llu mismatches, pause_ms %.1f, fence attempts %u, "
           "target pair healthy %d\n",
           MOVED_FIRST, MOVED_LAST, (unsigned long long)r.tables, SOURCE, TARGET, rc, t1 - t0,
           t_phase[SHARD_MOVE_COPYING] ? t_phase[SHARD_MOVE_COPYING] - t0 : 0, r.copy_seconds,
           r.catchup_seconds, r.cutover_seconds, r.verify_seconds,
           (unsigned long long)r.rows_copied, (unsigned long long)r.rows_verified,
           (unsigned long long)r.mismatches, r.pause_ms, r.fence_attempts,
           r.target_pair_healthy);
    printf("drop: %d of %d databases left at done, dropped in %.2f s after it (rc %d)\n",
           left, NMOVED, t2 - t1, drc);
    printf("writers: %d threads, %ld rounds, %ld calls, %d errors, worst call %.1f ms (%s)\n",
           WRITERS, rounds, calls, errors, worst * 1000, worst_op);
    fflush(stdout);

    ck_assert_msg(rc == 0, "move: %s", shard_errmsg());
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r.tables, (uint64_t)NMOVED * 6);
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_uint_ge(r.rows_verified, (uint64_t)NMOVED * (4 * PRE_PINS + PRE_BOARDS + 1));
    ck_assert_int_eq(r.source_dropped, 0);
    ck_assert_int_eq(left, NMOVED);
    ck_assert_msg(drc == 0, "drop: %s", shard_errmsg());
    ck_assert_int_eq(dr.source_dropped, 1);
    for (int k = 0; k < WRITERS; k++) {
        ck_assert_msg(wr[k].errors == 0, "writer %d: %d errors, last: %s", k, wr[k].errors,
                      wr[k].err);
        ck_assert_int_gt(wr[k].rounds, 0);
    }

    /* The map: the moved shards on the target, the others where they were. */
    for (unsigned s = 0; s < SHARDS; s++) {
        ck_assert_str_eq(pair_of(ctx, s), s <= MOVED_LAST ? TARGET : SOURCE);
        if (s <= MOVED_LAST)
            moved[s - MOVED_FIRST] = s;
        else
            for (int k = 0; k < WRITERS; k++) {
                bool touched = false;
                for (size_t i = 0; i < wr[k].nobjs && !touched; i++)
                    touched = shard_id_shard(wr[k].objs[i].id) == s;
                if (touched) {
                    stayed[nstayed++] = s;
                    break;
                }
            }
    }

    /* Every row on both halves of the target pair, and of the source pair for
     * the shards that stayed; the moved databases gone from both halves of
     * the source. */
    ck_assert_int_eq(harness_sync_standby(h, 2, 120), 0);
    ck_assert_int_eq(harness_sync_standby(h, 1, 120), 0);
    check_server("s3", wr, moved, NMOVED);
    check_server("s4", wr, moved, NMOVED);
    if (nstayed) {
        check_server("s1", wr, stayed, nstayed);
        check_server("s2", wr, stayed, nstayed);
    }
    ck_assert_int_eq(databases_between("s1", MOVED_FIRST, MOVED_LAST), 0);
    ck_assert_int_eq(databases_between("s2", MOVED_FIRST, MOVED_LAST), 0);
    ck_assert_int_eq(databases_between("s1", MOVED_LAST + 1, SHARDS - 1), SHARDS - NMOVED);

    for (int k = 0; k < WRITERS; k++) {
        free(wr[k].objs);
        free(wr[k].maps);
    }
}
END_TEST

/*
 * The target's standby gets the new tables from the mover, unlogged, before
 * its master's statements (IF NOT EXISTS) reach it through the pair's link
 * (libshard-move(7), phase planned). A table left there (a stale one of a
 * moved database) fails the move there, naming it: the link would have
 * broken on it (error 1050) had the standby applied the master's CREATE
 * TABLE, leaving the pair silently unredundant. An abort's drop, logged,
 * removes it from the standby too, and the move then goes through.
 */
START_TEST(a_table_left_on_the_target_standby_fails_the_move_not_the_pair)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT, dr = SHARD_MOVE_REPORT_INIT;
    shard_ctx *mover = NULL;
    char *out = NULL;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 64), SOURCE);
    ck_assert_int_eq(harness_sql(h, "s4", "SET SESSION sql_log_bin = 0; CREATE DATABASE IF NOT "
                                 "EXISTS db00064; CREATE TABLE db00064.pins (x INT PRIMARY KEY)",
                                 &out), 0);
    free(out);
    ck_assert_msg(harness_open_admin(h, &mover, NULL) == 0, "%s", shard_errmsg());
    rc = shard_move(mover, 64, 65, TARGET, NULL, &r, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(shard_errmsg(), "target standby") && strstr(shard_errmsg(), "db00064.pins"),
                  "%s", shard_errmsg());
    ck_assert_uint_gt(r.move_id, 0);
    /* Both halves of the target still apply each other's writes. */
    ck_assert_int_eq(harness_sync_standby(h, 2, 60), 0);
    ck_assert_msg(shard_move_abort(mover, r.move_id) == 0, "%s", shard_errmsg());
    ck_assert_int_eq(harness_sync_standby(h, 2, 60), 0);
    ck_assert_int_eq(databases_between("s4", 64, 65), 0);
    r = (shard_move_report)SHARD_MOVE_REPORT_INIT;
    rc = shard_move(mover, 64, 65, TARGET, NULL, &r, NULL);
    ck_assert_msg(rc == 0, "%s", shard_errmsg());
    ck_assert_msg(shard_move_resume(mover, r.move_id, NULL, &dr) == 0, "%s", shard_errmsg());
    ck_assert_int_eq(harness_sync_standby(h, 2, 60), 0);
    ck_assert_int_eq(databases_between("s4", 64, 65), 2);
    ck_assert_int_eq(databases_between("s1", 64, 65), 0);
    shard_ctx_free(mover);
}
END_TEST

/* A child table whose name sorts before its parent's: made first on both
 * halves of the target (foreign key checks off there, as on the master),
 * its rows with it. */
START_TEST(a_child_table_made_before_its_parent)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT, dr = SHARD_MOVE_REPORT_INIT;
    shard_ctx *mover = NULL;
    char *out = NULL;
    int rc;

    ck_assert_str_eq(pair_of(ctx, 66), SOURCE);
    ck_assert_int_eq(harness_sql(h, "s1", "INSERT INTO db00066.pins (data) VALUES ('{}');"
                                 "CREATE TABLE db00066.a_child (id INT PRIMARY KEY, pin BIGINT"
                                 " UNSIGNED NOT NULL, FOREIGN KEY (pin) REFERENCES"
                                 " db00066.pins (local_id)) ENGINE=InnoDB;"
                                 "INSERT INTO db00066.a_child SELECT 1, MAX(local_id) FROM"
                                 " db00066.pins", &out), 0);
    free(out);
    ck_assert_msg(harness_open_admin(h, &mover, NULL) == 0, "%s", shard_errmsg());
    rc = shard_move(mover, 66, 67, TARGET, NULL, &r, NULL);
    ck_assert_msg(rc == 0, "%s", shard_errmsg());
    ck_assert_msg(shard_move_resume(mover, r.move_id, NULL, &dr) == 0, "%s", shard_errmsg());
    ck_assert_int_eq(harness_sync_standby(h, 2, 60), 0);
    for (int k = 0; k < 2; k++) {
        const char *srv = k ? "s4" : "s3";
        ck_assert_int_eq(harness_sql(h, srv, "SELECT COUNT(*) FROM db00066.a_child", &out), 0);
        out[strcspn(out, "\n")] = '\0';
        ck_assert_msg(strcmp(out, "1") == 0, "%s has %s rows in db00066.a_child", srv, out);
        free(out);
    }
    shard_ctx_free(mover);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_move_scale");
    TCase *tc = tcase_create("scale");
    shard_options so = SHARD_OPTIONS_INIT;
    double t0 = now_s();
    int failed;

    /* Pair 1 serves all 128 shards; pair 2 is empty, for the move. */
    h = harness_start_serving(2, 1, SHARDS, 2);
    if (!h)
        return 1;
    so.refresh_interval_ms = 0; /* the writers follow the move through the fence alone */
    if (harness_schema_apply(h) || shard_ctx_open(&ctx, harness_map_path(h), &so)) {
        fprintf(stderr, "setup: %s\n", shard_errmsg());
        shard_ctx_free(ctx);
        harness_stop(h);
        return 1;
    }
    printf("servers and schema (%d shards x 6 tables) ready in %.1f s\n", SHARDS, now_s() - t0);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, move_64_shards_of_6_tables_under_writers);
    tcase_add_test(tc, a_table_left_on_the_target_standby_fails_the_move_not_the_pair);
    tcase_add_test(tc, a_child_table_made_before_its_parent);
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_NOFORK);
    shard_ctx_free(ctx);
    harness_stop(h);
    printf("total %.1f s\n", now_s() - t0);
    return failed ? 1 : 0;
}
