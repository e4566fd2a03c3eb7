/*
 * tests/server_import.c: coming from an unsharded database
 * (libshard-import(7)) against real servers.
 *
 * Two pairs (8 ID shards, 4 mod shards). The legacy database `legacy`
 * lives on s1 beside the shards: boards, pins with board_id, a board_pins
 * join table, notes (for the interrupted import) and hostiles (hostile
 * values). The tests run in order, each pass starting where the previous
 * one left the data. Expected objects are built by the server itself
 * (JSON_OBJECT over the legacy rows) or written out here, never by the
 * code under test.
 */
#include <check.h>
#include <inttypes.h>
#include <jansson.h>
#include <libshard.h>
#include <mysql.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"
#include "admin_util.h"
#include "first_reports.h"
#include "harness.h"
#include "legacy.h" /* shard__import_hook */
#include "object.h" /* txn_object_create_many */
#include "report.h" /* the 0.1.0 entry point, shard__import_table_v0 */
#include "run_cmd.h"

#define NPAIRS 2
#define ID_SHARDS 8  /* 0-3 on MySQL001 (s1), 4-7 on MySQL002 (s3) */
#define MOD_SHARDS 4 /* 0-1 on MySQL001, 2-3 on MySQL002 */
#define NBOARDS 200
#define NPINS 3000
#define NNOTES 2000

static harness *H;
static char map_path[512];
static char url[200];

/* ---- helpers ------------------------------------------------------------ */

/* SQL as root on a server; its output (free it). */
#define sql_out(server, sql) sql_ok(H, server, sql)

static void sql_do(const char *server, const char *sql)
{
    free(sql_out(server, sql));
}

static uint64_t sql_count(const char *server, const char *sql)
{
    char *out = sql_out(server, sql);
    uint64_t n = strtoull(out, NULL, 10);
    free(out);
    return n;
}

/* A context of the importing operator (imports run as shardadmin; the
 * application's account `shard` only reads what they made). */
static shard_ctx *open_ctx(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    o.refresh_interval_ms = 0;
    harness_admin_options(&o);
    ck_assert_msg(shard_ctx_open(&ctx, map_path, &o) == 0, "%s", shard_errmsg());
    return ctx;
}

/* The application's context: the map's credentials. */
static shard_ctx *open_app(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    o.refresh_interval_ms = 0;
    ck_assert_msg(shard_ctx_open(&ctx, map_path, &o) == 0, "%s", shard_errmsg());
    return ctx;
}

static unsigned type_of(shard_ctx *ctx, const char *name)
{
    shard_map *map;
    unsigned t = 0;
    ck_assert_int_eq(shard_ctx_map(ctx, &map), 0);
    ck_assert_int_eq(shard_map_type_of(map, name, &t), 0);
    shard_map_free(map);
    return t;
}

static shard_import_options table_opts(shard_ctx *ctx, const char *table, const char *type)
{
    shard_import_options o = SHARD_IMPORT_OPTIONS_INIT;
    o.source = url;
    o.table = table;
    o.type = type_of(ctx, type);
    return o;
}

static shard_import_report import_ok(shard_ctx *ctx, const shard_import_options *o)
{
    shard_import_report r = SHARD_IMPORT_REPORT_INIT;
    int rc = shard_import_table(ctx, o, &r);
    ck_assert_msg(rc == 0, "import %s: %s", o->table, shard_errmsg());
    return r;
}

static void expect_counts(const shard_import_report *r, uint64_t created, uint64_t changed,
                          uint64_t deleted, uint64_t unchanged)
{
    ck_assert_msg(r->created == created && r->changed == changed && r->deleted == deleted &&
                      r->unchanged == unchanged,
                  "pass: %" PRIu64 " new, %" PRIu64 " changed, %" PRIu64 " deleted, %" PRIu64
                  " unchanged; want %" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64,
                  r->created, r->changed, r->deleted, r->unchanged, created, changed, deleted,
                  unchanged);
}

static shard_import_options mapping_opts(shard_ctx *ctx)
{
    shard_import_options o = SHARD_IMPORT_OPTIONS_INIT;
    o.source = url;
    o.table = "board_pins";
    o.mapping = "board_has_pins";
    o.from_column = "board_id";
    o.from_type = type_of(ctx, "boards");
    o.to_column = "pin_id";
    o.to_type = type_of(ctx, "pins");
    o.seq_column = "created_at";
    return o;
}

/* Legacy ids 1..n of a type resolved (all must be imported). */
static uint64_t *resolve_all(shard_ctx *ctx, const char *type, size_t n)
{
    uint64_t *legacy = calloc(n, sizeof *legacy), *ids = calloc(n, sizeof *ids);
    for (size_t i = 0; i < n; i++)
        legacy[i] = i + 1;
    ck_assert_msg(shard_legacy_resolve_many(ctx, type_of(ctx, type), legacy, n, ids) == 0,
                  "%s", shard_errmsg());
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(ids[i] != 0, "%s legacy id %zu did not resolve", type, i + 1);
    free(legacy);
    return ids;
}

static unsigned char unhex1(char c)
{
    return (unsigned char)(c <= '9' ? c - '0' : c - 'A' + 10);
}

/*
 * Every row of `sql` (one HEX(JSON_OBJECT(...)) per line, legacy ids 1..n
 * in order) equals the object its legacy id resolves to.
 */
static void expect_objects_equal(shard_ctx *ctx, const char *type, const char *sql, size_t n)
{
    char *out = sql_out("s1", sql), *line = out;
    uint64_t *ids = resolve_all(ctx, type, n);
    shard_item *items;

    ck_assert_int_eq(shard_object_mget(ctx, ids, n, &items), 0);
    for (size_t i = 0; i < n; i++) {
        char *nl = strchr(line, '\n');
        size_t hl = nl ? (size_t)(nl - line) : strlen(line), len = hl / 2;
        char *text = malloc(len + 1);
        json_t *want, *got;
        for (size_t k = 0; k < len; k++)
            text[k] = (char)(unhex1(line[2 * k]) << 4 | unhex1(line[2 * k + 1]));
        text[len] = '\0';
        want = json_loadb(text, len, JSON_ALLOW_NUL, NULL);
        ck_assert_msg(want != NULL, "bad expectation %s", text);
        ck_assert_msg(items[i].status == 0, "%s %zu: status %d", type, i + 1, items[i].status);
        got = json_loadb(items[i].data, items[i].len, JSON_ALLOW_NUL, NULL);
        ck_assert_msg(json_equal(want, got), "%s legacy id %zu: object %s, legacy row %s", type,
                      i + 1, items[i].data, text);
        json_decref(want);
        json_decref(got);
        free(text);
        line = nl ? nl + 1 : line + hl;
    }
    shard_items_free(items, n);
    free(ids);
    free(out);
}

#define PINS_JSON                                                                         \
    "SELECT HEX(JSON_OBJECT('id', id, 'board_id', board_id, 'title', title, 'likes', likes," \
    " 'ratio', ratio, 'note', note)) FROM legacy.pins"
#define BOARDS_JSON                                                                       \
    "SELECT HEX(JSON_OBJECT('id', id, 'name', name, 'created_at', created_at, 'score',"    \
    " CAST(score AS CHAR))) FROM legacy.boards ORDER BY id"

/* ---- the first pass --------------------------------------------------------- */

START_TEST(import_pins_near_boards)
{
    shard_ctx *ctx = open_ctx();
    shard_import_options o = table_opts(ctx, "boards", "boards");
    shard_import_report r = import_ok(ctx, &o);
    uint64_t *boards, *pins;
    char *out, *line;

    expect_counts(&r, NBOARDS, 0, 0, 0);
    ck_assert_uint_eq(r.rows_read, NBOARDS);
    o = table_opts(ctx, "pins", "pins");
    o.near_column = "board_id";
    o.near_type = type_of(ctx, "boards");
    r = import_ok(ctx, &o);
    expect_counts(&r, NPINS, 0, 0, 0);

    /* Every pin is on its board's shard. */
    boards = resolve_all(ctx, "boards", NBOARDS);
    pins = resolve_all(ctx, "pins", NPINS);
    out = sql_out("s1", "SELECT id, board_id FROM legacy.pins ORDER BY id");
    line = out;
    for (size_t i = 0; i < NPINS; i++) {
        unsigned long pid, bid;
        ck_assert_int_eq(sscanf(line, "%lu\t%lu", &pid, &bid), 2);
        ck_assert_uint_eq(pid, i + 1);
        ck_assert_msg(shard_id_shard(pins[i]) == shard_id_shard(boards[bid - 1]),
                      "pin %lu on shard %u, its board %lu on %u", pid, shard_id_shard(pins[i]),
                      bid, shard_id_shard(boards[bid - 1]));
        line = strchr(line, '\n') + 1;
    }
    /* The objects are spread over the shards, not piled on one. */
    ck_assert_uint_gt(sql_count("s1", "SELECT COUNT(*) FROM db00000.pins") +
                          sql_count("s1", "SELECT COUNT(*) FROM db00001.pins"), 0);
    ck_assert_uint_gt(sql_count("s3", "SELECT COUNT(*) FROM db00005.pins"), 0);
    free(out);
    free(boards);
    free(pins);
    shard_ctx_free(ctx);

    /* The objects reach the standby as row events, logged without the
     * statements' text (libshard-import(7): an INSERT of many objects is
     * those objects again). */
    ck_assert_int_eq(harness_sync_standby(H, 1, 60), 0);
    ck_assert_uint_eq(sql_count("s2", "SELECT COUNT(*) FROM db00000.pins"),
                      sql_count("s1", "SELECT COUNT(*) FROM db00000.pins"));
    out = sql_out("s1", "SHOW BINLOG EVENTS");
    ck_assert_ptr_nonnull(strstr(out, "Write_rows"));
    for (line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        ck_assert_msg(!(strstr(line, "Annotate_rows") && strstr(line, "INSERT INTO") &&
                        (strstr(line, "`pins`") || strstr(line, "`legacy_pins`"))),
                      "an import's write logged with its statement: %.200s", line);
    free(out);
}
END_TEST

START_TEST(objects_equal_legacy_rows)
{
    shard_ctx *ctx = open_ctx();
    expect_objects_equal(ctx, "pins", PINS_JSON " ORDER BY id", NPINS);
    expect_objects_equal(ctx, "boards", BOARDS_JSON, NBOARDS);
    shard_ctx_free(ctx);
}
END_TEST

/* ---- passes until nothing differs ---------------------------------------------- */

/* The objects of pins rows lo..hi hold what the legacy rows hold (a later
 * pass makes an object's text only for the rows it writes). */
static void expect_pins_rows(shard_ctx *ctx, unsigned lo, unsigned hi)
{
    for (unsigned id = lo; id <= hi; id++) {
        char sql[400], *hex, *text = NULL;
        uint64_t nid = 0;
        json_t *want, *got;
        size_t len;
        snprintf(sql, sizeof sql, PINS_JSON " WHERE id = %u", id);
        hex = sql_out("s1", sql);
        len = strcspn(hex, "\n") / 2;
        char *w = malloc(len + 1);
        for (size_t k = 0; k < len; k++)
            w[k] = (char)(unhex1(hex[2 * k]) << 4 | unhex1(hex[2 * k + 1]));
        w[len] = '\0';
        ck_assert_int_eq(shard_legacy_resolve(ctx, type_of(ctx, "pins"), id, &nid), 0);
        ck_assert_int_eq(shard_object_get(ctx, nid, &text, NULL), 0);
        want = json_loadb(w, len, JSON_ALLOW_NUL, NULL);
        got = json_loads(text, JSON_ALLOW_NUL, NULL);
        ck_assert_msg(want && json_equal(want, got), "pins legacy id %u: object %s, legacy row %s",
                      id, text, w);
        json_decref(want);
        json_decref(got);
        shard_free(text);
        free(w);
        free(hex);
    }
}

START_TEST(second_and_third_pass)
{
    shard_ctx *ctx = open_ctx();
    shard_import_options o = table_opts(ctx, "pins", "pins");
    shard_import_report r = SHARD_IMPORT_REPORT_INIT;
    uint64_t gone;

    o.near_column = "board_id";
    o.near_type = type_of(ctx, "boards");
    sql_do("s1", "UPDATE legacy.pins SET title = CONCAT(title, ' v2') WHERE id BETWEEN 101 AND 200;"
                 "DELETE FROM legacy.pins WHERE id BETWEEN 1001 AND 1010;"
                 "INSERT INTO legacy.pins SELECT 3000 + seq, 1 + seq % 200, CONCAT('new pin ', seq),"
                 " seq, 0.25, NULL FROM legacy.seq_1_to_20");
    r = import_ok(ctx, &o);
    expect_counts(&r, 20, 100, 10, NPINS - 110);
    expect_pins_rows(ctx, 95, 205);   /* the changed rows and their neighbours */
    expect_pins_rows(ctx, 3001, 3020); /* the new ones */
    r = import_ok(ctx, &o);
    expect_counts(&r, 0, 0, 0, NPINS + 10);
    /* A deleted row's legacy id still names its object, which is deleted. */
    ck_assert_int_eq(shard_legacy_resolve(ctx, o.type, 1005, &gone), 0);
    {
        char *json = NULL;
        ck_assert_int_eq(shard_object_get(ctx, gone, &json, NULL), SHARD_ENOTFOUND);
    }
    /* Nothing changed on the boards side. */
    o = table_opts(ctx, "boards", "boards");
    /* This pass as a program built against libshard 0.1.0 runs it: its
     * report has the first layout (no version), filled without a byte past
     * its end (a heap struct of exactly that size: ASan). */
    {
        old_import_report *old = malloc(sizeof *old);
        ck_assert_ptr_nonnull(old);
        memset(old, 0xA5, sizeof *old);
        ck_assert_msg(shard__import_table_v0(ctx, &o, old) == 0, "%s", shard_errmsg());
        r.created = old->created;
        r.changed = old->changed;
        r.deleted = old->deleted;
        r.unchanged = old->unchanged;
        expect_counts(&r, 0, 0, 0, NBOARDS);
        ck_assert_uint_eq(old->rows_read, NBOARDS);
        ck_assert_uint_eq(old->adopted, 0);
        ck_assert(old->seconds > 0);
        free(old);
    }
    expect_objects_equal(ctx, "pins", PINS_JSON " WHERE id <= 1000 ORDER BY id", 1000);
    shard_ctx_free(ctx);
}
END_TEST

START_TEST(mapping_passes)
{
    shard_ctx *ctx = open_ctx();
    shard_import_options o = mapping_opts(ctx);
    shard_import_report r = SHARD_IMPORT_REPORT_INIT;
    shard_edge *edges;
    size_t n;
    uint64_t board, pin, count;

    ck_assert_msg(shard_import_mapping(ctx, &o, &r) == 0, "%s", shard_errmsg());
    expect_counts(&r, NPINS, 0, 0, 0);
    /* Board 7 has the pins p with 1 + p % 200 = 7, newest (created_at) first. */
    ck_assert_int_eq(shard_legacy_resolve(ctx, o.from_type, 7, &board), 0);
    ck_assert_int_eq(shard_mapping_count(ctx, "board_has_pins", board, &count), 0);
    ck_assert_uint_eq(count, NPINS / NBOARDS);
    ck_assert_int_eq(shard_mapping_list(ctx, "board_has_pins", board, SHARD_SEQ_NONE, 1,
                                        &edges, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(shard_legacy_resolve(ctx, o.to_type, 2806, &pin), 0);
    ck_assert_uint_eq(edges[0].to, pin);
    /* created_at '2021-01-01' + 2806 minutes, in microseconds since the epoch. */
    ck_assert_int_eq(edges[0].seq, (INT64_C(1609459200) + 2806 * 60) * 1000000);
    shard_free(edges);
    /* The reverse rows were written too. */
    ck_assert_int_eq(shard_mapping_list(ctx, "pin_owned_by_board", pin, SHARD_SEQ_NONE, 10,
                                        &edges, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(edges[0].to, board);
    shard_free(edges);

    sql_do("s1", "DELETE FROM legacy.board_pins WHERE pin_id <= 5;"
                 "UPDATE legacy.board_pins SET created_at = created_at + INTERVAL 1 DAY"
                 " WHERE pin_id BETWEEN 10 AND 16;"
                 "INSERT INTO legacy.board_pins SELECT 1 + seq % 200, 3000 + seq,"
                 " '2022-01-01' + INTERVAL seq MINUTE FROM legacy.seq_1_to_20");
    ck_assert_msg(shard_import_mapping(ctx, &o, &r) == 0, "%s", shard_errmsg());
    expect_counts(&r, 20, 7, 5, NPINS - 12);
    ck_assert_msg(shard_import_mapping(ctx, &o, &r) == 0, "%s", shard_errmsg());
    expect_counts(&r, 0, 0, 0, NPINS + 15);
    /* Pin 3 left board 4, both ways (and pin 3003 joined it). */
    ck_assert_int_eq(shard_legacy_resolve(ctx, o.to_type, 3, &pin), 0);
    ck_assert_int_eq(shard_mapping_count(ctx, "pin_owned_by_board", pin, &count), 0);
    ck_assert_uint_eq(count, 0);
    ck_assert_int_eq(shard_legacy_resolve(ctx, o.from_type, 4, &board), 0);
    ck_assert_int_eq(shard_mapping_count(ctx, "board_has_pins", board, &count), 0);
    ck_assert_uint_eq(count, NPINS / NBOARDS);
    ck_assert_int_eq(shard_mapping_list(ctx, "board_has_pins", board, SHARD_SEQ_NONE, 100,
                                        &edges, &n), 0);
    for (size_t i = 0; i < n; i++)
        ck_assert_uint_ne(edges[i].to, pin);
    shard_free(edges);
    shard_ctx_free(ctx);
}
END_TEST

/* ---- legacy ids -------------------------------------------------------------- */

START_TEST(resolve_one_and_many)
{
    shard_ctx *ctx = open_app(), *fresh;
    unsigned pins = type_of(ctx, "pins"), boards = type_of(ctx, "boards");
    uint64_t id, id2, board;
    uint64_t in[6], out[6];
    char *saved;
    size_t savedlen;

    ck_assert_int_eq(shard_legacy_resolve(ctx, pins, 42, &id), 0);
    ck_assert_uint_eq(shard_id_type(id), pins);
    ck_assert_int_eq(shard_id_valid(id), 1);
    /* A native ID passes through unchanged: callers may pass either. */
    ck_assert_int_eq(shard_legacy_resolve(ctx, pins, id, &id2), 0);
    ck_assert_uint_eq(id2, id);
    /* Another type's ID, an id with type bits, 0: refused. */
    ck_assert_int_eq(shard_legacy_resolve(ctx, boards, 7, &board), 0);
    ck_assert_int_eq(shard_legacy_resolve(ctx, pins, board, &id2), SHARD_EINVAL);
    ck_assert_int_eq(shard_legacy_resolve(ctx, pins, UINT64_C(1) << 36, &id2), SHARD_EINVAL);
    ck_assert_int_eq(shard_legacy_resolve(ctx, pins, 0, &id2), SHARD_EINVAL);
    ck_assert_int_eq(shard_legacy_resolve(ctx, pins, 999999, &id2), SHARD_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "999999"));
    ck_assert_int_eq(shard_legacy_resolve(ctx, 1023, 1, &id2), SHARD_EINVAL); /* no such type */

    /* Many at once, in input order, with duplicates and a gap. */
    in[0] = 42, in[1] = 999999, in[2] = 43, in[3] = 42, in[4] = id, in[5] = 3020;
    ck_assert_int_eq(shard_legacy_resolve_many(ctx, pins, in, 6, out), 0);
    ck_assert_uint_eq(out[0], id);
    ck_assert_uint_eq(out[1], 0);
    ck_assert_uint_ne(out[2], 0);
    ck_assert_uint_ne(out[2], id);
    ck_assert_uint_eq(out[3], id);
    ck_assert_uint_eq(out[4], id);
    ck_assert_int_eq(shard_legacy_resolve(ctx, pins, 3020, &id2), 0);
    ck_assert_uint_eq(out[5], id2);

    /* Resolutions are cached: with the lookup entry gone, this context still
     * answers; a fresh one cannot. */
    ck_assert_int_eq(shard_kv_get(ctx, "legacy_pins", "42", 2, &saved, &savedlen), 0);
    ck_assert_int_eq(shard_kv_delete(ctx, "legacy_pins", "42", 2), 0);
    ck_assert_int_eq(shard_legacy_resolve(ctx, pins, 42, &id2), 0);
    ck_assert_uint_eq(id2, id);
    fresh = open_app();
    ck_assert_int_eq(shard_legacy_resolve(fresh, pins, 42, &id2), SHARD_ENOTFOUND);
    ck_assert_int_eq(shard_kv_put(ctx, "legacy_pins", "42", 2, saved, savedlen), 0);
    ck_assert_int_eq(shard_legacy_resolve(fresh, pins, 42, &id2), 0);
    ck_assert_uint_eq(id2, id);
    shard_free(saved);
    shard_ctx_free(fresh);
    shard_ctx_free(ctx);
}
END_TEST

#define RSET 200 /* legacy ids per resolution below */

typedef struct resolve_call {
    shard_ctx *ctx;
    unsigned type;
    uint64_t legacy[RSET], ids[RSET];
    int rc;
    char err[512];
} resolve_call;

static void *resolve_thread(void *arg)
{
    resolve_call *c = arg;
    c->rc = shard_legacy_resolve_many(c->ctx, c->type, c->legacy, RSET, c->ids);
    snprintf(c->err, sizeof c->err, "%s", c->rc ? shard_errmsg() : "");
    return NULL;
}

/* Legacy ids first..first+RSET-1 into c->legacy. */
static void rset(resolve_call *c, uint64_t first)
{
    for (size_t i = 0; i < RSET; i++)
        c->legacy[i] = first + i;
}

/* c's answers equal what a context of its own, untouched by faults, says. */
static void resolve_expect(const resolve_call *c, const char *when)
{
    shard_ctx *fresh = open_app();
    uint64_t want[RSET];
    ck_assert_int_eq(shard_legacy_resolve_many(fresh, c->type, c->legacy, RSET, want), 0);
    for (size_t i = 0; i < RSET; i++) {
        ck_assert_msg(want[i] != 0, "legacy id %" PRIu64 " is not imported", c->legacy[i]);
        ck_assert_msg(c->ids[i] == want[i], "%s: legacy id %" PRIu64 " resolved to %" PRIu64
                      ", want %" PRIu64, when, c->legacy[i], c->ids[i], want[i]);
    }
    shard_ctx_free(fresh);
}

/*
 * shard_legacy_resolve_many sends each server's statement before reading
 * any answer, on the pools' idle connections: a connection the server
 * closed while idle, an answer lost after both statements went out, and
 * an answer later than the read timeout each end as a call on one
 * connection at a time would (the legacy pins are imported by the tests
 * before this one).
 */
START_TEST(resolve_many_faults_on_ready_connections)
{
    shard_ctx *ctx = open_app();
    resolve_call c = {.ctx = ctx, .type = type_of(ctx, "pins")};
    MYSQL *admin = admin_on(H, "s1");
    long long conns[16], before;
    double t0;
    char *db, *lock;

    /* Warm: both pairs' pools hold an idle connection after this. */
    rset(&c, 1001);
    ck_assert_int_eq(shard_legacy_resolve_many(ctx, c.type, c.legacy, RSET, c.ids), 0);
    resolve_expect(&c, "warm-up");

    /* 1. The server closes MySQL001's idle connections: seen before the
     * statement goes out, and no retry counted. */
    int n = app_connections(admin, NULL, conns, 16);
    ck_assert_int_ge(n, 1);
    for (int i = 0; i < n; i++) {
        char q[64];
        snprintf(q, sizeof q, "KILL CONNECTION %lld", conns[i]);
        mysql_query(admin, q); /* it may have gone meanwhile */
    }
    for (t0 = now_s(); app_connections(admin, NULL, conns, 16) > 0; nap_ms(10))
        ck_assert_msg(now_s() - t0 < 30, "killed connections still listed");
    nap_ms(50); /* the close reaches the client's socket */
    before = retries_of(ctx);
    rset(&c, 1201);
    ck_assert_msg(shard_legacy_resolve_many(ctx, c.type, c.legacy, RSET, c.ids) == 0,
                  "after the idle connections were killed: %s", shard_errmsg());
    resolve_expect(&c, "after the idle connections were killed");
    ck_assert_int_eq(retries_of(ctx), before);

    /* 2. MySQL001's statement waits on a table lock, and its connection is
     * killed while it waits: the answer is lost after both statements went
     * out. The call asks MySQL001 again and resolves every id. */
    rset(&c, 1401);
    ck_assert_int_eq(shard_legacy_resolve_many(ctx, c.type, c.legacy, 1, c.ids), 0);
    db = sql_out("s1", "SELECT table_schema FROM information_schema.TABLES WHERE "
                       "table_name = 'legacy_pins' LIMIT 1");
    db[strcspn(db, "\n")] = '\0';
    ck_assert_msg(db[0], "no legacy_pins table on s1");
    lock = fmt("LOCK TABLES `%s`.`legacy_pins` WRITE", db);
    ck_assert_msg(mysql_query(admin, lock) == 0, "%s: %s", lock, mysql_error(admin));
    rset(&c, 1402);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, resolve_thread, &c), 0);
    for (t0 = now_s(); app_connections(admin, "Waiting for table metadata lock", conns, 1) < 1;
         nap_ms(5))
        ck_assert_msg(now_s() - t0 < 30, "the resolution never waited on the lock");
    char kill[64];
    snprintf(kill, sizeof kill, "KILL CONNECTION %lld", conns[0]);
    ck_assert_msg(mysql_query(admin, kill) == 0, "%s: %s", kill, mysql_error(admin));
    nap_ms(200); /* the retry waits on the lock too */
    ck_assert_msg(mysql_query(admin, "UNLOCK TABLES") == 0, "UNLOCK TABLES: %s",
                  mysql_error(admin));
    pthread_join(t, NULL);
    ck_assert_msg(c.rc == 0, "resolution with a lost answer: %d (%s): %s", c.rc,
                  shard_strerror(c.rc), c.err);
    resolve_expect(&c, "after a lost answer");
    ck_assert_int_gt(retries_of(ctx), before);

    /* 3. MySQL001's answer does not come within the read timeout (1 s, the
     * lock held until the call returns): a timeout is not retried; the
     * call fails with it, every output 0. */
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *c2 = NULL;
    o.read_timeout_ms = 1000;
    o.refresh_interval_ms = 0;
    ck_assert_int_eq(shard_ctx_open(&c2, map_path, &o), 0);
    rset(&c, 1601);
    ck_assert_int_eq(shard_legacy_resolve_many(c2, c.type, c.legacy, 1, c.ids), 0);
    rset(&c, 1602);
    ck_assert_msg(mysql_query(admin, lock) == 0, "%s: %s", lock, mysql_error(admin));
    int rc = shard_legacy_resolve_many(c2, c.type, c.legacy, RSET, c.ids);
    ck_assert_msg(mysql_query(admin, "UNLOCK TABLES") == 0, "UNLOCK TABLES: %s",
                  mysql_error(admin));
    ck_assert_msg(rc == SHARD_ETIMEOUT, "a lookup table locked past the read timeout: %d "
                  "(%s): %s", rc, shard_strerror(rc), shard_errmsg());
    /* The message names the pair, as the threads' path does. */
    ck_assert_msg(strstr(shard_errmsg(), "pair MySQL001: "), "%s", shard_errmsg());
    for (size_t i = 0; i < RSET; i++)
        ck_assert_uint_eq(c.ids[i], 0);
    /* and the same ids resolve once the lock is gone */
    ck_assert_int_eq(shard_legacy_resolve_many(c2, c.type, c.legacy, RSET, c.ids), 0);
    resolve_expect(&c, "after the timeout");
    shard_ctx_free(c2);
    free(lock);
    free(db);
    mysql_close(admin);
    shard_ctx_free(ctx);
}
END_TEST

/* ---- hostile values ------------------------------------------------------------ */

typedef struct hostile {
    const char *t; /* utf8mb4 column */
    size_t tlen;
    const char *l; /* latin1 column, raw bytes */
} hostile;

#define TEXT(s) s, sizeof s - 1
static const hostile hostiles[] = {
    {TEXT("it's \"quoted\" \\ back`tick; -- DROP TABLE pins"), "plain"},
    {TEXT("nul\0inside\0"), "x"},
    {TEXT("emoji \xF0\x9F\x98\x80 clef \xF0\x9D\x84\x9E"), NULL},
    {TEXT("tab\tnewline\ncr\r"), ""},
    {TEXT(""), "\xC3\xA9"}, /* UTF-8 stored in a latin1 column: kept as it is */
    {TEXT("\xE2\x80\xAE right-to-left"), "a'b\"c"},
};
#define NHOSTILE (sizeof hostiles / sizeof hostiles[0])

static void hex_of(const char *s, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02X", (unsigned char)s[i]);
    out[2 * n] = '\0';
}

START_TEST(hostile_values)
{
    shard_ctx *ctx = open_ctx();
    shard_import_options o = table_opts(ctx, "hostiles", "hostiles");
    shard_import_report r = SHARD_IMPORT_REPORT_INIT;
    uint64_t id;
    char sql[1024], h1[200], h2[200];
    char *before, *after;
    int rc;

    for (size_t i = 0; i < NHOSTILE; i++) {
        const hostile *x = &hostiles[i];
        hex_of(x->t, x->tlen, h1);
        if (x->l)
            hex_of(x->l, strlen(x->l), h2);
        snprintf(sql, sizeof sql, "INSERT INTO legacy.hostiles VALUES (%zu, %s%s%s, %s%s%s, %zu)",
                 i + 1, x->tlen ? "CONVERT(X'" : "''", x->tlen ? h1 : "",
                 x->tlen ? "' USING utf8mb4)" : "", x->l ? "CONVERT(X'" : "NULL",
                 x->l ? h2 : "", x->l ? "' USING latin1)" : "", i);
        if (x->l && !x->l[0])
            snprintf(sql, sizeof sql, "INSERT INTO legacy.hostiles VALUES (%zu, CONVERT(X'%s'"
                     " USING utf8mb4), '', %zu)", i + 1, h1, i);
        sql_do("s1", sql);
    }
    r = import_ok(ctx, &o);
    expect_counts(&r, NHOSTILE, 0, 0, 0);
    for (size_t i = 0; i < NHOSTILE; i++) {
        const hostile *x = &hostiles[i];
        json_t *want = json_pack("{s:I,s:s%,s:o,s:I}", "id", (json_int_t)(i + 1), "t", x->t,
                                 x->tlen, "l", x->l ? json_string(x->l) : json_null(), "n",
                                 (json_int_t)i);
        json_t *got;
        ck_assert_ptr_nonnull(want);
        ck_assert_int_eq(shard_legacy_resolve(ctx, o.type, i + 1, &id), 0);
        ck_assert_int_eq(shard_object_get_json(ctx, id, &got), 0);
        ck_assert_msg(json_equal(want, got), "hostile row %zu: got %s", i + 1,
                      json_dumps(got, JSON_ENSURE_ASCII));
        json_decref(want);
        json_decref(got);
    }

    /* Real latin1 (é as the byte 0xE9) is not UTF-8: refused, the row named,
     * nothing written for it. */
    ck_assert_int_eq(shard_legacy_resolve(ctx, o.type, 2, &id), 0);
    ck_assert_int_eq(shard_object_get(ctx, id, &before, NULL), 0);
    sql_do("s1", "UPDATE legacy.hostiles SET l = CONVERT(X'E9' USING latin1) WHERE id = 2");
    rc = shard_import_table(ctx, &o, &r);
    ck_assert_int_eq(rc, SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "hostiles.id=2") && strstr(shard_errmsg(), "column l") &&
                      strstr(shard_errmsg(), "UTF-8"),
                  "message: %s", shard_errmsg());
    ck_assert_int_eq(shard_object_get(ctx, id, &after, NULL), 0);
    ck_assert_str_eq(before, after);
    shard_free(before);
    shard_free(after);
    sql_do("s1", "UPDATE legacy.hostiles SET l = 'fixed' WHERE id = 2");
    r = import_ok(ctx, &o);
    expect_counts(&r, 0, 1, 0, NHOSTILE - 1);

    /* Binary columns have no JSON form: refused, naming the column. */
    sql_do("s1", "ALTER TABLE legacy.hostiles ADD COLUMN b VARBINARY(8);"
                 "UPDATE legacy.hostiles SET b = X'00FF' WHERE id = 4");
    rc = shard_import_table(ctx, &o, &r);
    ck_assert_int_eq(rc, SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "column b") && strstr(shard_errmsg(), "binary"),
                  "message: %s", shard_errmsg());
    sql_do("s1", "ALTER TABLE legacy.hostiles DROP COLUMN b");
    r = import_ok(ctx, &o);
    expect_counts(&r, 0, 0, 0, NHOSTILE);
    shard_ctx_free(ctx);
}
END_TEST

/* ---- --json-column ------------------------------------------------------------------ */

START_TEST(json_column)
{
    shard_ctx *ctx = open_ctx();
    shard_import_options o = table_opts(ctx, "docs", "users");
    shard_import_report r = SHARD_IMPORT_REPORT_INIT;
    json_t *got, *want;
    uint64_t id;
    int rc;

    o.json_column = "doc";
    r = import_ok(ctx, &o);
    expect_counts(&r, 2, 0, 0, 0);
    /* The column's object is the object; the legacy id is added as a field. */
    ck_assert_int_eq(shard_legacy_resolve(ctx, o.type, 1, &id), 0);
    ck_assert_int_eq(shard_object_get_json(ctx, id, &got), 0);
    want = json_loads("{\"name\": \"ann\", \"tags\": [1, 2.5, null], \"id\": 1}", 0, NULL);
    ck_assert_msg(json_equal(want, got), "%s", json_dumps(got, 0));
    json_decref(want);
    json_decref(got);
    ck_assert_int_eq(shard_legacy_resolve(ctx, o.type, 2, &id), 0);
    ck_assert_int_eq(shard_object_get_json(ctx, id, &got), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(got, "id")), 2);
    json_decref(got);

    /* Not an object, or an id field that contradicts the row: refused. */
    sql_do("s1", "INSERT INTO legacy.docs VALUES (3, '[1, 2]')");
    rc = shard_import_table(ctx, &o, &r);
    ck_assert_int_eq(rc, SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "docs.id=3") && strstr(shard_errmsg(), "column doc"),
                  "%s", shard_errmsg());
    sql_do("s1", "UPDATE legacy.docs SET doc = '{\"id\": 4}' WHERE id = 3");
    rc = shard_import_table(ctx, &o, &r);
    ck_assert_int_eq(rc, SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "docs.id=3"), "%s", shard_errmsg());
    sql_do("s1", "DELETE FROM legacy.docs WHERE id = 3");
    r = import_ok(ctx, &o);
    expect_counts(&r, 0, 0, 0, 2);
    shard_ctx_free(ctx);
}
END_TEST

/* ---- an import killed mid-pass ---------------------------------------------------- */

static int created_calls, entries_calls;

/* The pipeline writes batch 2's entries while batch 3's objects are
 * written (the hooks come from two threads): killed once both are done,
 * before batch 3's entries, whichever finishes first. */
static void kill_on_third(const char *point)
{
    int created = strcmp(point, "created") == 0
                      ? __atomic_add_fetch(&created_calls, 1, __ATOMIC_SEQ_CST)
                      : __atomic_load_n(&created_calls, __ATOMIC_SEQ_CST);
    int entries = strcmp(point, "entries") == 0
                      ? __atomic_add_fetch(&entries_calls, 1, __ATOMIC_SEQ_CST)
                      : __atomic_load_n(&entries_calls, __ATOMIC_SEQ_CST);

    if (created >= 3 && entries >= 2)
        raise(SIGKILL); /* batch 3's objects written, its lookup entries not yet */
}

static uint64_t count_all(const char *what)
{
    uint64_t n = 0;
    char sql[300];
    for (int s = 0; s < ID_SHARDS && strcmp(what, "objects") == 0; s++) {
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05d.notes", s);
        n += sql_count(s < 4 ? "s1" : "s3", sql);
    }
    for (int m = 0; m < MOD_SHARDS && strcmp(what, "objects") != 0; m++) {
        /* entries: legacy ids only, not the pass marker "~import" */
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM modshard%05d.legacy_notes%s", m,
                 strcmp(what, "pending") == 0 ? " WHERE v LIKE 'pending %'"
                 : strcmp(what, "marker") == 0 ? " WHERE k = '~import'"
                                               : " WHERE k <> '~import'");
        n += sql_count(m < 2 ? "s1" : "s3", sql);
    }
    return n;
}

START_TEST(killed_import_no_duplicates)
{
    shard_ctx *ctx;
    shard_import_options o;
    shard_import_report r = SHARD_IMPORT_REPORT_INIT;
    uint64_t *ids;
    pid_t pid;
    int st;

    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        shard_ctx *c = open_ctx();
        shard_import_options co = table_opts(c, "notes", "notes");
        co.batch_rows = 100;
        co.threads = 2;
        shard__import_hook = kill_on_third;
        shard_import_table(c, &co, NULL);
        _exit(0); /* not reached when the hook fires */
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the import was not killed");
    /* Two batches finished, the third has objects but no entries yet; the
     * pass marker tells the next pass to look for them. */
    ck_assert_uint_eq(count_all("entries"), 200);
    ck_assert_uint_eq(count_all("pending"), 0);
    ck_assert_uint_eq(count_all("marker"), 1);
    ck_assert_uint_eq(count_all("objects"), 300);

    ctx = open_ctx();
    o = table_opts(ctx, "notes", "notes");
    o.batch_rows = 100;
    r = import_ok(ctx, &o);
    ck_assert_uint_eq(r.created, NNOTES - 200);
    ck_assert_uint_eq(r.adopted, 100);
    ck_assert_uint_eq(r.unchanged, 200);
    ck_assert_uint_eq(count_all("pending"), 0);
    ck_assert_uint_eq(count_all("marker"), 0);
    ck_assert_uint_eq(count_all("entries"), NNOTES);
    ck_assert_uint_eq(count_all("objects"), NNOTES);
    /* One object per legacy row: 2000 distinct ids resolving to 2000
     * distinct objects. */
    {
        uint64_t distinct = 0;
        char sql[300];
        for (int s = 0; s < ID_SHARDS; s++) {
            snprintf(sql, sizeof sql, "SELECT COUNT(DISTINCT JSON_VALUE(data, '$.id')) FROM "
                     "db%05d.notes", s);
            distinct += sql_count(s < 4 ? "s1" : "s3", sql);
        }
        ck_assert_uint_eq(distinct, NNOTES);
    }
    ids = resolve_all(ctx, "notes", NNOTES);
    for (size_t i = 1; i < NNOTES; i++)
        for (size_t k = i < 50 ? 0 : i - 50; k < i; k++)
            ck_assert_uint_ne(ids[i], ids[k]);
    free(ids);
    r = import_ok(ctx, &o);
    expect_counts(&r, 0, 0, 0, NNOTES);
    shard_ctx_free(ctx);
}
END_TEST

/* ---- shardctl ------------------------------------------------------------------ */

START_TEST(shardctl_import)
{
    run_spec s = {.map_env = map_path, .timeout_s = 60};
    char bad[300];
    run_result r;

    r = run_cmd(&s, ARGV(HARNESS_ADMIN_ARGS, "import", "--from", url, "--table", "boards",
                         "--as", "boards"));
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, "import boards: 0 new, 0 changed, 0 deleted, 200 unchanged\n");
    run_free(&r);

    sql_do("s1", "UPDATE legacy.boards SET name = 'renamed' WHERE id = 9");
    r = run_cmd(&s, ARGV(HARNESS_ADMIN_ARGS, "import", "--from", url, "--table", "boards",
                         "--as", "boards", "--until-clean", "--threads", "2"));
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, "import boards: 0 new, 1 changed, 0 deleted, 199 unchanged\n"
                            "import boards: 0 new, 0 changed, 0 deleted, 200 unchanged\n");
    run_free(&r);

    r = run_cmd(&s, ARGV("obj", "get", "--legacy", "boards", "9"));
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "\"name\":\"renamed\""));
    run_free(&r);
    r = run_cmd(&s, ARGV("obj", "get", "--legacy", "boards", "99999"));
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "99999"));
    run_free(&r);

    /* A password in the URL is refused, and never echoed. */
    snprintf(bad, sizeof bad, "mysql://shard:s3cretpw@%s", strchr(url, '@') + 1);
    r = run_cmd(&s, ARGV(HARNESS_ADMIN_ARGS, "import", "--from", bad, "--table", "boards",
                         "--as", "boards"));
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(count_lines(r.err) == 1 && !strstr(r.err, "s3cretpw"), "%s", r.err);
    ck_assert_str_eq(r.out, "");
    run_free(&r);

    r = run_cmd(&s, ARGV(HARNESS_ADMIN_ARGS, "import", "--from", url, "--table", "boards",
                         "--as", "boards", "--dry-run"));
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, "import boards: 0 new, 0 changed, 0 deleted, 200 unchanged\n");
    run_free(&r);
}
END_TEST

/* ---- many objects in one call (what a pass creates a shard's objects with) --------- */

#define MANY_SHARD 1 /* on MySQL001 (s1) */

/* The text {"k":K,"pad":"xxx..."} of about `size` bytes. */
static char *one_text(size_t k, size_t size, size_t *len)
{
    size_t pad = size > 40 ? size - 40 : 1;
    char *t = malloc(pad + 64);
    int n = snprintf(t, 64, "{\"k\":%zu,\"pad\":\"", k);
    memset(t + n, 'a' + (char)(k % 26), pad);
    strcpy(t + n + pad, "\"}");
    *len = strlen(t);
    return t;
}

/* n such texts, K = first, first+1, ... */
static char **many_texts(size_t n, size_t first, size_t size, size_t *lens)
{
    char **t = calloc(n, sizeof *t);
    for (size_t i = 0; i < n; i++)
        t[i] = one_text(first + i, size, &lens[i]);
    return t;
}

static void texts_free(char **t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(t[i]);
    free(t);
}

static uint64_t many_rows(void)
{
    char sql[100];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05d.many", MANY_SHARD);
    return sql_count("s1", sql);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ids[0..n): distinct IDs of type `type` on MANY_SHARD, each naming the
 * object whose text is texts[i], byte for byte. */
static void expect_created(shard_ctx *ctx, unsigned type, char **texts, const size_t *lens,
                           const uint64_t *ids, size_t n)
{
    uint64_t *sorted = malloc(n * sizeof *sorted);
    shard_item *items;

    memcpy(sorted, ids, n * sizeof *ids);
    qsort(sorted, n, sizeof *sorted, cmp_u64);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(shard_id_valid(ids[i]) && shard_id_shard(ids[i]) == MANY_SHARD &&
                          shard_id_type(ids[i]) == type,
                      "object %zu: ID %" PRIu64 " (shard %u, type %u)", i, ids[i],
                      shard_id_shard(ids[i]), shard_id_type(ids[i]));
        ck_assert_msg(i == 0 || sorted[i] != sorted[i - 1], "ID %" PRIu64 " twice", sorted[i]);
    }
    free(sorted);
    ck_assert_int_eq(shard_object_mget(ctx, ids, n, &items), 0);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(items[i].status == 0, "object %zu: status %d", i, items[i].status);
        ck_assert_msg(items[i].len == lens[i] && memcmp(items[i].data, texts[i], lens[i]) == 0,
                      "object %zu (ID %" PRIu64 ") holds %.60s..., created with %.60s...", i,
                      ids[i], items[i].data, texts[i]);
    }
    shard_items_free(items, n);
}

/* Create texts[0..n) in one call in a new transaction, then commit. */
static size_t create_many_ok(shard_ctx *ctx, unsigned type, char **texts, const size_t *lens,
                             size_t n, uint64_t *ids)
{
    shard_txn *txn;
    size_t stmts = 0;
    int rc;

    ck_assert_int_eq(shard_txn_begin(ctx, MANY_SHARD, &txn), 0);
    rc = txn_object_create_many(txn, type, (const char *const *)texts, lens, n, ids, &stmts);
    ck_assert_msg(rc == 0, "create_many of %zu: %s", n, shard_errmsg());
    ck_assert_msg(shard_txn_commit(txn) == 0, "commit: %s", shard_errmsg());
    return stmts;
}

START_TEST(create_many_one_and_many)
{
    shard_ctx *ctx = open_ctx();
    unsigned type = type_of(ctx, "many");
    size_t lens[2500];
    uint64_t ids[2500], before = many_rows();
    char **t;

    /* One. */
    t = many_texts(1, 0, 50, lens);
    ck_assert_uint_eq(create_many_ok(ctx, type, t, lens, 1, ids), 1);
    expect_created(ctx, type, t, lens, ids, 1);
    texts_free(t, 1);
    /* 500 small ones: one statement. */
    t = many_texts(500, 1, 60, lens);
    ck_assert_uint_eq(create_many_ok(ctx, type, t, lens, 500, ids), 1);
    expect_created(ctx, type, t, lens, ids, 500);
    texts_free(t, 500);
    /* 2500: several statements, far fewer than rows. */
    t = many_texts(2500, 501, 80, lens);
    {
        size_t stmts = create_many_ok(ctx, type, t, lens, 2500, ids);
        ck_assert_msg(stmts >= 2 && stmts <= 5, "%zu statements for 2500 rows", stmts);
    }
    expect_created(ctx, type, t, lens, ids, 2500);
    texts_free(t, 2500);
    ck_assert_uint_eq(many_rows(), before + 3001);
    shard_ctx_free(ctx);
}
END_TEST

START_TEST(create_many_rollback_and_refusals)
{
    shard_ctx *ctx = open_ctx();
    unsigned type = type_of(ctx, "many");
    size_t lens[200], stmts = 9;
    uint64_t ids[200], before = many_rows();
    const char *bad[3] = {"{\"a\":1}", "[1,2]", "{\"b\":2}"};
    size_t badlens[3] = {7, 5, 7};
    shard_txn *txn;
    char *json = NULL;
    char **t = many_texts(200, 10000, 100, lens);

    /* Rolled back: nothing stays, and the IDs it returned name nothing. */
    ck_assert_int_eq(shard_txn_begin(ctx, MANY_SHARD, &txn), 0);
    ck_assert_int_eq(txn_object_create_many(txn, type, (const char *const *)t, lens, 200, ids,
                                            &stmts), 0);
    ck_assert_uint_eq(stmts, 1);
    ck_assert_uint_eq(many_rows(), before); /* not committed: not seen */
    shard_txn_rollback(txn);
    ck_assert_uint_eq(many_rows(), before);
    for (size_t i = 0; i < 200; i += 20)
        ck_assert_int_eq(shard_object_get(ctx, ids[i], &json, NULL), SHARD_ENOTFOUND);

    /* A text that is not a JSON object: refused, named, nothing written,
     * and the transaction goes on. */
    ck_assert_int_eq(shard_txn_begin(ctx, MANY_SHARD, &txn), 0);
    ck_assert_int_eq(txn_object_create_many(txn, type, bad, badlens, 3, ids, NULL),
                     SHARD_EINVAL);
    ck_assert_msg(strstr(shard_errmsg(), "object 2 of 3"), "%s", shard_errmsg());
    ck_assert_int_eq(txn_object_create_many(txn, type, (const char *const *)t, lens, 2, ids,
                                            NULL), 0);
    ck_assert_int_eq(shard_txn_commit(txn), 0);
    ck_assert_uint_eq(many_rows(), before + 2);
    expect_created(ctx, type, t, lens, ids, 2);

    /* An unregistered type: refused. */
    ck_assert_int_eq(shard_txn_begin(ctx, MANY_SHARD, &txn), 0);
    ck_assert_int_eq(txn_object_create_many(txn, 1000, (const char *const *)t, lens, 2, ids,
                                            NULL), SHARD_EINVAL);
    shard_txn_rollback(txn);
    texts_free(t, 200);
    ck_assert_uint_eq(many_rows(), before + 2);
    shard_ctx_free(ctx);
}
END_TEST

/* A local id past 36 bits fails the call and the transaction; the rows
 * before it go with the rollback. (Shard 2: its counter stays high.) */
START_TEST(create_many_full_shard)
{
    shard_ctx *ctx = open_ctx();
    unsigned type = type_of(ctx, "many");
    size_t lens[6];
    uint64_t ids[6];
    char **t = many_texts(6, 50000, 50, lens);
    shard_txn *txn;
    int rc;

    /* 2^36 - 5: a few ids are left below 2^36 (the pair's servers count in
     * steps of 2). */
    sql_do("s1", "ALTER TABLE db00002.many AUTO_INCREMENT = 68719476731");
    ck_assert_int_eq(shard_txn_begin(ctx, 2, &txn), 0);
    rc = txn_object_create_many(txn, type, (const char *const *)t, lens, 6, ids, NULL);
    ck_assert_int_eq(rc, SHARD_ESERVER);
    ck_assert_msg(strstr(shard_errmsg(), "exceeds 36 bits"), "%s", shard_errmsg());
    for (size_t i = 0; i < 6; i++)
        ck_assert_uint_eq(ids[i], 0);
    ck_assert_int_ne(shard_txn_commit(txn), 0); /* rolled back */
    ck_assert_uint_eq(sql_count("s1", "SELECT COUNT(*) FROM db00002.many"), 0);
    /* The shard is not full for the later tests, whose imports may put
     * objects there (the empty table's counter goes back to 1). */
    sql_do("s1", "ALTER TABLE db00002.many AUTO_INCREMENT = 1");
    ck_assert_uint_lt(sql_count("s1", "SELECT AUTO_INCREMENT FROM information_schema.TABLES"
                                      " WHERE TABLE_SCHEMA = 'db00002' AND TABLE_NAME = 'many'"),
                      1000);
    texts_free(t, 6);
    shard_ctx_free(ctx);
}
END_TEST

/*
 * Under a 1 MB max_allowed_packet: 100 kB texts (200 kB as hex literals)
 * split over several statements; a 700 kB one (too big as hex, not as
 * bytes) still goes in; a 1.2 MB one is refused before anything is
 * written, naming it.
 */
START_TEST(create_many_splits_by_packet)
{
    char *old = sql_out("s1", "SELECT @@GLOBAL.max_allowed_packet"), set[100];
    shard_ctx *ctx;
    unsigned type;
    size_t lens[24], stmts = 0, mixlens[3], hugelens[3];
    uint64_t ids[24], before = many_rows();
    char **t, **mix, **huge;
    shard_txn *txn;

    old[strcspn(old, "\n")] = '\0';
    sql_do("s1", "SET GLOBAL max_allowed_packet = 1048576");
    ctx = open_ctx(); /* its connections open under the new limit */
    type = type_of(ctx, "many");

    t = many_texts(24, 20000, 100000, lens);
    stmts = create_many_ok(ctx, type, t, lens, 24, ids);
    /* 24 x 200 kB of hex needs at least 5 statements of under 1 MB. */
    ck_assert_msg(stmts >= 5 && stmts <= 12, "%zu statements for 24 texts of 100 kB", stmts);
    expect_created(ctx, type, t, lens, ids, 24);
    texts_free(t, 24);

    mix = many_texts(3, 30000, 100, mixlens);
    free(mix[1]);
    mix[1] = one_text(30001, 700000, &mixlens[1]);
    stmts = create_many_ok(ctx, type, mix, mixlens, 3, ids);
    ck_assert_uint_eq(stmts, 3);
    expect_created(ctx, type, mix, mixlens, ids, 3);

    huge = many_texts(3, 40000, 100, hugelens);
    free(huge[1]);
    huge[1] = one_text(40001, 1200000, &hugelens[1]);
    ck_assert_int_eq(shard_txn_begin(ctx, MANY_SHARD, &txn), 0);
    ck_assert_int_eq(txn_object_create_many(txn, type, (const char *const *)huge, hugelens, 3,
                                            ids, NULL), SHARD_ETOOBIG);
    ck_assert_msg(strstr(shard_errmsg(), "object 2 of 3") &&
                      strstr(shard_errmsg(), "max_allowed_packet") &&
                      strstr(shard_errmsg(), "nothing written"),
                  "%s", shard_errmsg());
    /* Nothing was sent: the transaction goes on. */
    ck_assert_int_eq(txn_object_create_many(txn, type, (const char *const *)mix, mixlens, 1,
                                            ids, NULL), 0);
    ck_assert_int_eq(shard_txn_commit(txn), 0);
    ck_assert_uint_eq(many_rows(), before + 24 + 3 + 1);
    texts_free(mix, 3);
    texts_free(huge, 3);
    shard_ctx_free(ctx);
    snprintf(set, sizeof set, "SET GLOBAL max_allowed_packet = %s", old);
    sql_do("s1", set);
    free(old);
}
END_TEST

/* A row whose JSON no statement can carry (control characters take 6
 * bytes each as JSON: 200 kB become 1.2 MB, over a 1 MB packet) stops the
 * pass, naming the row; once the limit is raised, the next pass imports
 * both rows, once each. */
START_TEST(import_refuses_too_big)
{
    char *old = sql_out("s1", "SELECT @@GLOBAL.max_allowed_packet"), set[100];
    shard_ctx *ctx;
    shard_import_options o;
    shard_import_report r = SHARD_IMPORT_REPORT_INIT;
    uint64_t id, objects = 0;
    json_t *got;
    int rc;

    old[strcspn(old, "\n")] = '\0';
    sql_do("s1", "CREATE TABLE legacy.bigs (id INT PRIMARY KEY, t MEDIUMTEXT);"
                 "INSERT INTO legacy.bigs VALUES (1, 'small'), (2, REPEAT(CHAR(1), 200000))");
    sql_do("s1", "SET GLOBAL max_allowed_packet = 1048576");
    sql_do("s3", "SET GLOBAL max_allowed_packet = 1048576");
    ctx = open_ctx();
    o = table_opts(ctx, "bigs", "many");
    rc = shard_import_table(ctx, &o, &r);
    ck_assert_msg(rc == SHARD_ETOOBIG, "rc %d: %s", rc, shard_errmsg());
    ck_assert_msg(strstr(shard_errmsg(), "bigs.id=2") &&
                      strstr(shard_errmsg(), "max_allowed_packet"),
                  "%s", shard_errmsg());
    shard_ctx_free(ctx);

    snprintf(set, sizeof set, "SET GLOBAL max_allowed_packet = %s", old);
    sql_do("s1", set);
    sql_do("s3", set);
    ctx = open_ctx();
    r = import_ok(ctx, &o);
    ck_assert_uint_eq(r.created + r.unchanged, 2);
    ck_assert_int_eq(shard_legacy_resolve(ctx, o.type, 2, &id), 0);
    ck_assert_int_eq(shard_object_get_json(ctx, id, &got), 0);
    ck_assert_uint_eq(strlen(json_string_value(json_object_get(got, "t"))), 200000);
    json_decref(got);
    for (int sh = 0; sh < ID_SHARDS; sh++) {
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM db%05d.many WHERE JSON_EXISTS(data, "
                 "'$.id')", sh);
        objects += sql_count(sh < 4 ? "s1" : "s3", sql);
    }
    ck_assert_uint_eq(objects, 2);
    r = import_ok(ctx, &o);
    expect_counts(&r, 0, 0, 0, 2);
    shard_ctx_free(ctx);
    free(old);
}
END_TEST

/* ---- set-up --------------------------------------------------------------------- */

/* The harness's map with the legacy lookups and two more object types. */
static int write_map(void)
{
    json_t *m = json_load_file(harness_map_path(H), 0, NULL), *tables, *legacy;
    static const char *const names[] = {"pins", "boards", "notes", "hostiles", "users",
                                        "many", "board_has_pins"};
    if (!m)
        return -1;
    json_object_set_new(json_object_get(m, "objects"), "notes", json_integer(4));
    json_object_set_new(json_object_get(m, "objects"), "hostiles", json_integer(5));
    json_object_set_new(json_object_get(m, "objects"), "many", json_integer(6));
    tables = json_object_get(json_object_get(m, "mod_shards"), "tables");
    legacy = json_object();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char t[80];
        snprintf(t, sizeof t, "legacy_%s", names[i]);
        json_array_append_new(tables, json_string(t));
        json_object_set_new(legacy, names[i], json_object());
    }
    json_object_set_new(m, "legacy", legacy);
    snprintf(map_path, sizeof map_path, "%s/import-map.json", harness_dir(H));
    int rc = json_dump_file(m, map_path, JSON_INDENT(2));
    json_decref(m);
    return rc;
}

static const char legacy_schema[] =
    "CREATE DATABASE legacy; USE legacy;"
    "CREATE TABLE boards (id INT UNSIGNED PRIMARY KEY AUTO_INCREMENT, name VARCHAR(100) NOT NULL,"
    " created_at DATETIME NOT NULL, score DECIMAL(8,2));"
    "INSERT INTO boards SELECT seq, CONCAT('board ', seq), '2020-01-01' + INTERVAL seq HOUR,"
    " seq / 4 FROM seq_1_to_200;"
    "CREATE TABLE pins (id INT UNSIGNED PRIMARY KEY AUTO_INCREMENT, board_id INT UNSIGNED,"
    " title VARCHAR(200) CHARACTER SET utf8mb4 NOT NULL, likes INT NOT NULL, ratio DOUBLE,"
    " note TEXT);"
    "INSERT INTO pins SELECT seq, 1 + seq % 200, CONCAT('pin ', seq), seq * 7 % 1000,"
    " (seq % 10) + 0.5, IF(seq % 3 = 0, NULL, 'some text') FROM seq_1_to_3000;"
    "CREATE TABLE board_pins (board_id INT UNSIGNED NOT NULL, pin_id INT UNSIGNED NOT NULL,"
    " created_at DATETIME NOT NULL, PRIMARY KEY (board_id, pin_id));"
    "INSERT INTO board_pins SELECT 1 + seq % 200, seq, '2021-01-01' + INTERVAL seq MINUTE"
    " FROM seq_1_to_3000;"
    "CREATE TABLE notes (id INT PRIMARY KEY, body VARCHAR(50) NOT NULL);"
    "INSERT INTO notes SELECT seq, CONCAT('note ', seq) FROM seq_1_to_2000;"
    "CREATE TABLE hostiles (id INT PRIMARY KEY, t TEXT CHARACTER SET utf8mb4,"
    " l VARCHAR(50) CHARACTER SET latin1, n INT);"
    "CREATE TABLE docs (id INT PRIMARY KEY, doc TEXT NOT NULL);"
    "INSERT INTO docs VALUES (1, '{\"name\": \"ann\", \"tags\": [1, 2.5, null]}'),"
    " (2, '{\"id\": 2, \"nested\": {\"a\": {\"b\": true}}}')";

static Suite *import_suite(void)
{
    Suite *s = suite_create("import");
    TCase *tc = tcase_create("import");

    tcase_set_timeout(tc, 120);
    tcase_add_tests(tc, TESTS(import_pins_near_boards, objects_equal_legacy_rows,
                              second_and_third_pass, mapping_passes, resolve_one_and_many,
                              resolve_many_faults_on_ready_connections,
                              hostile_values, json_column, killed_import_no_duplicates,
                              shardctl_import));
    suite_add_tcase(s, tc);
    tc = tcase_create("create_many");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, create_many_one_and_many);
    tcase_add_test(tc, create_many_rollback_and_refusals);
    tcase_add_test(tc, create_many_full_shard);
    tcase_add_test(tc, create_many_splits_by_packet);
    tcase_add_test(tc, import_refuses_too_big);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    int failed;

    harness_admin_options(&o);
    H = harness_start_ex(NPAIRS, ID_SHARDS, MOD_SHARDS);
    if (!H) {
        fprintf(stderr, "server_import: could not start the test servers\n");
        return EXIT_FAILURE;
    }
    /* The legacy database is read as the operator too (with the map's
     * password variable, which shardadmin shares). */
    snprintf(url, sizeof url, "mysql://shardadmin@127.0.0.1:%d/legacy", harness_port(H, "s1"));
    if (write_map() != 0 || harness_sql(H, "s1", legacy_schema, NULL) != 0 ||
        shard_ctx_open(&ctx, map_path, &o) != 0 || shard_schema_apply(ctx, NULL, NULL) != 0) {
        fprintf(stderr, "server_import: set-up failed: %s\n", shard_errmsg());
        shard_ctx_free(ctx);
        harness_stop(H);
        return EXIT_FAILURE;
    }
    shard_ctx_free(ctx);
    failed = run_suite(import_suite(), CK_FORK_GETENV);
    harness_stop(H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
