/*
 * tests/server_fence.c: the writes that check the fence in their own
 * statement (one round trip: shard_object_create(3), a hard
 * shard_object_delete(3), shard_mapping_add(3), shard_mapping_remove(3)),
 * and the read-modify-write whose first statement locks the fence row and
 * the object's row together (shard_object_update(3), shard_object_patch(3)),
 * hold a move's fence back until they commit, as libshard-move(7) ("The
 * fence") requires: each statement, exactly as the library sends it, runs
 * in a transaction left open; the mover's fence UPDATE (fence row present)
 * and its INSERT of the row (row absent) must both wait for it, and go
 * through once it ends. A form whose check took no lock would let the
 * fence commit first, and the write after it, on the frozen source.
 *
 * Then the same calls through the API on a fenced shard write nothing and
 * fail with SHARD_EMOVED once their retry budget is spent.
 */
#include <check.h>
#include <jansson.h> /* first: libshard.h declares its jansson calls */
#include <libshard.h>
#include <mysql.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "ctx.h"    /* private: the pool and the statements (libshard_internal.a) */
#include "object.h"

static harness *H;

#define F 2 /* the shard under test, on MySQL001 (s1) */

static char Db[64];

typedef enum form { INSERT_OBJECT, DELETE_OBJECT, ADD_MAPPING, REMOVE_MAPPING } form;

static const char *const Names[] = {"object insert", "hard delete", "mapping upsert",
                                    "mapping delete"};

/* The mover's fence statements, with the lock waits of a cut-over cut to 1 s. */
static int fence_update(void)
{
    char *q = fmt("SET SESSION sql_log_bin = 0; SET SESSION innodb_lock_wait_timeout = 1; "
                  "SET SESSION lock_wait_timeout = 1; UPDATE libshard_control.fence SET "
                  "fenced = 1 WHERE db = '%s'", Db), *out = NULL;
    int rc = harness_sql(H, "s1", q, &out);
    free(q);
    free(out);
    return rc;
}

static int fence_insert(void)
{
    char *q = fmt("SET SESSION sql_log_bin = 0; SET SESSION innodb_lock_wait_timeout = 1; "
                  "SET SESSION lock_wait_timeout = 1; INSERT INTO libshard_control.fence "
                  "(db, fenced, move_id) VALUES ('%s', 1, 77)", Db), *out = NULL;
    int rc = harness_sql(H, "s1", q, &out);
    free(q);
    free(out);
    return rc;
}

static void fence_clear(bool keep_row)
{
    char *q = keep_row ? fmt("SET SESSION sql_log_bin = 0; INSERT INTO libshard_control.fence "
                             "(db, fenced, move_id) VALUES ('%s', 0, 77) ON DUPLICATE KEY "
                             "UPDATE fenced = 0", Db)
                       : fmt("SET SESSION sql_log_bin = 0; DELETE FROM "
                             "libshard_control.fence WHERE db = '%s'", Db);
    char *out = NULL;
    ck_assert_msg(harness_sql(H, "s1", q, &out) == 0, "%s", q);
    free(q);
    free(out);
}

/* Runs the library's statement of `f` (with its fence check) on c, in
 * the transaction c has open; the rows it changed. */
static uint64_t run_form(shard_conn *c, const shard_map *map, form f, uint64_t obj,
                         uint64_t other)
{
    const char *table = NULL;
    uint64_t id = 0;
    sqlbuf q;

    OK(object_table(map, 1, &table));
    sql_init(&q);
    switch (f) {
    case INSERT_OBJECT:
        OK(object_insert(c, Db, table, F, 1, LIT("{\"held\":1}"), true, 0, &id));
        sql_free(&q);
        return id ? 1 : 0;
    case DELETE_OBJECT:
        object_delete_sql(&q, Db, table, obj, true);
        break;
    case ADD_MAPPING:
        mapping_write_sql(&q, Db, "board_has_pins", obj, other, 5, false, true);
        break;
    case REMOVE_MAPPING:
        mapping_write_sql(&q, Db, "board_has_pins", obj, other, 0, true, true);
        break;
    }
    OK(conn_query(c, &q));
    sql_free(&q);
    return mysql_affected_rows(c->my);
}

static void holds_fence_back(form f, bool row_present)
{
    shard_ctx *ctx = NULL;
    shard_map *map = NULL;
    shard_conn *c = NULL;
    uint64_t obj = 0, other = 0;

    OK(shard_ctx_open(&ctx, harness_map_path(H), NULL));
    OK(shard_ctx_map(ctx, &map));
    fence_clear(true);
    OK(shard_object_create(ctx, 1, F, LIT("{\"o\":1}"), &obj));
    OK(shard_object_create(ctx, 1, F, LIT("{\"o\":2}"), &other));
    if (f == REMOVE_MAPPING)
        OK(shard_mapping_add(ctx, "board_has_pins", obj, other, 1));
    fence_clear(row_present);

    OK(conn_get(ctx, ctx_server(ctx, map, (size_t)shard__map_pair_index(map, F)), &c));
    OK(conn_query_str(c, "START TRANSACTION"));
    ck_assert_msg(run_form(c, map, f, obj, other) >= 1, "the %s changed nothing on an "
                  "unfenced shard", Names[f]);
    ck_assert_msg((row_present ? fence_update() : fence_insert()) != 0,
                  "the fence %s went through while a %s was in flight (fence row %s)",
                  row_present ? "UPDATE" : "INSERT", Names[f],
                  row_present ? "present" : "absent");
    OK(conn_query_str(c, "COMMIT"));
    ck_assert_msg((row_present ? fence_update() : fence_insert()) == 0,
                  "the fence still waits after the %s committed", Names[f]);

    /* Fenced now: the statement changes nothing. */
    OK(conn_query_str(c, "START TRANSACTION"));
    if (f == INSERT_OBJECT)
        FAILS(SHARD_EMOVED, object_insert(c, Db, "pins", F, 1, LIT("{}"), true, 0, &obj));
    else if (f == DELETE_OBJECT) /* `other` is still there */
        ck_assert_uint_eq(run_form(c, map, DELETE_OBJECT, other, 0), 0);
    else /* the opposite of what committed would change a row, unfenced */
        ck_assert_uint_eq(run_form(c, map, f == ADD_MAPPING ? REMOVE_MAPPING : ADD_MAPPING,
                                   obj, other), 0);
    OK(conn_query_str(c, "ROLLBACK"));
    conn_put(c, true);
    fence_clear(true);
    shard_map_free(map);
    shard_ctx_free(ctx);
}

START_TEST(test_insert_holds_fence_back)
{
    holds_fence_back(INSERT_OBJECT, true);
    holds_fence_back(INSERT_OBJECT, false);
}
END_TEST

START_TEST(test_delete_holds_fence_back)
{
    holds_fence_back(DELETE_OBJECT, true);
    holds_fence_back(DELETE_OBJECT, false);
}
END_TEST

START_TEST(test_mapping_add_holds_fence_back)
{
    holds_fence_back(ADD_MAPPING, true);
    holds_fence_back(ADD_MAPPING, false);
}
END_TEST

START_TEST(test_mapping_remove_holds_fence_back)
{
    holds_fence_back(REMOVE_MAPPING, true);
    holds_fence_back(REMOVE_MAPPING, false);
}
END_TEST

/* A read-modify-write (shard_object_update) held open in its callback:
 * its first statement read the fence row under a lock, which the mover's
 * fence must wait for. */
typedef struct held {
    shard_ctx *ctx;
    uint64_t id;
    pthread_barrier_t inside, release;
    int rc;
} held;

static int hold_cb(json_t *obj, void *payload)
{
    held *hd = payload;
    json_object_set_new(obj, "patched", json_true());
    pthread_barrier_wait(&hd->inside);
    pthread_barrier_wait(&hd->release);
    return 0;
}

static void *update_main(void *arg)
{
    held *hd = arg;
    hd->rc = shard_object_update(hd->ctx, hd->id, hold_cb, hd);
    return NULL;
}

static void rmw_holds_fence_back(bool row_present)
{
    held hd;
    pthread_t t;
    char *json = NULL;

    memset(&hd, 0, sizeof hd);
    OK(shard_ctx_open(&hd.ctx, harness_map_path(H), NULL));
    fence_clear(true);
    OK(shard_object_create(hd.ctx, 1, F, LIT("{\"r\":1}"), &hd.id));
    fence_clear(row_present);
    pthread_barrier_init(&hd.inside, NULL, 2);
    pthread_barrier_init(&hd.release, NULL, 2);
    ck_assert_int_eq(pthread_create(&t, NULL, update_main, &hd), 0);
    pthread_barrier_wait(&hd.inside);
    int fenced_meanwhile = row_present ? fence_update() : fence_insert();
    pthread_barrier_wait(&hd.release);
    pthread_join(t, NULL);
    ck_assert_msg(fenced_meanwhile != 0, "the fence %s went through while a read-modify-write "
                  "was in flight (fence row %s)", row_present ? "UPDATE" : "INSERT",
                  row_present ? "present" : "absent");
    ck_assert_msg(hd.rc == 0, "update: %s", shard_errmsg());
    ck_assert_msg((row_present ? fence_update() : fence_insert()) == 0,
                  "the fence still waits after the read-modify-write committed");
    /* Fenced: a patch writes nothing. */
    {
        shard_options o = SHARD_OPTIONS_INIT;
        shard_ctx *c2 = NULL;
        o.retry_budget_ms = 300;
        OK(shard_ctx_open(&c2, harness_map_path(H), &o));
        FAILS(SHARD_EMOVED, shard_object_patch(c2, hd.id, LIT("{\"late\":1}"), NULL, NULL));
        shard_ctx_free(c2);
    }
    fence_clear(true);
    OK(shard_object_get(hd.ctx, hd.id, &json, NULL));
    ck_assert_str_eq(json, "{\"r\":1,\"patched\":true}");
    shard_free(json);
    pthread_barrier_destroy(&hd.inside);
    pthread_barrier_destroy(&hd.release);
    shard_ctx_free(hd.ctx);
}

START_TEST(test_rmw_holds_fence_back)
{
    rmw_holds_fence_back(true);
    rmw_holds_fence_back(false);
}
END_TEST

static uint64_t rows_in(const char *table)
{
    char *q = fmt("SELECT COUNT(*) FROM %s.%s", Db, table), *out = NULL;
    ck_assert_msg(harness_sql(H, "s1", q, &out) == 0, "%s", q);
    uint64_t n = strtoull(out, NULL, 10);
    free(q);
    free(out);
    return n;
}

/* Through the API: on a fenced shard the one-statement writes change
 * nothing, and say SHARD_EMOVED when the budget is spent; unfenced, the
 * fallbacks (a delete of nothing, a mapping row already there) give the
 * exact answers. */
START_TEST(test_fenced_writes_change_nothing)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    uint64_t obj = 0, other = 0, nid = 0, pins, maps;

    o.retry_budget_ms = 300;
    OK(shard_ctx_open(&ctx, harness_map_path(H), &o));
    fence_clear(true);
    OK(shard_object_create(ctx, 1, F, LIT("{\"o\":1}"), &obj));
    OK(shard_object_create(ctx, 1, F, LIT("{\"o\":2}"), &other));
    OK(shard_mapping_add(ctx, "board_has_pins", obj, other, 1));
    OK(shard_mapping_add(ctx, "board_has_pins", obj, other, 1)); /* unchanged: still 0 */
    FAILS(SHARD_ENOTFOUND, shard_mapping_remove(ctx, "board_has_pins", other, obj));
    FAILS(SHARD_ENOTFOUND, shard_object_delete(ctx, other + 1000, SHARD_DELETE_HARD));
    pins = rows_in("pins");
    maps = rows_in("board_has_pins");
    ck_assert_int_eq(fence_update(), 0);
    FAILS(SHARD_EMOVED, shard_object_create(ctx, 1, F, LIT("{}"), &nid));
    FAILS(SHARD_EMOVED, shard_object_delete(ctx, other, SHARD_DELETE_HARD));
    FAILS(SHARD_EMOVED, shard_mapping_add(ctx, "board_has_pins", obj, other, 9));
    FAILS(SHARD_EMOVED, shard_mapping_remove(ctx, "board_has_pins", obj, other));
    ck_assert_uint_eq(rows_in("pins"), pins);
    ck_assert_uint_eq(rows_in("board_has_pins"), maps);
    fence_clear(true);
    OK(shard_mapping_remove(ctx, "board_has_pins", obj, other));
    OK(shard_object_delete(ctx, other, SHARD_DELETE_HARD));
    ck_assert_uint_eq(rows_in("pins"), pins - 1);
    shard_ctx_free(ctx);
}
END_TEST

static Suite *fence_suite(void)
{
    Suite *s = suite_create("server_fence");
    TCase *tc = tcase_of(s, "fence", TESTS(test_insert_holds_fence_back,
                                           test_delete_holds_fence_back,
                                           test_mapping_add_holds_fence_back,
                                           test_mapping_remove_holds_fence_back,
                                           test_rmw_holds_fence_back,
                                           test_fenced_writes_change_nothing));
    tcase_set_timeout(tc, 90);
    return s;
}

int main(void)
{
    harness *h;
    shard_map *map = NULL;

    /* Db is the name of shard F's database in the harness's map. */
    if (!(h = harness_start_ex(2, 8, 4)) || harness_schema_apply(h) ||
        shard_map_load(&map, harness_map_path(h)) ||
        shard_map_database(map, F, Db, sizeof Db)) {
        fprintf(stderr, "server_fence: could not set up: %s\n", shard_errmsg());
        if (h)
            harness_stop(h);
        return EXIT_FAILURE;
    }
    shard_map_free(map);
    H = h;
    {
        int failed = run_suite(fence_suite(), CK_FORK_GETENV);
        harness_stop(h);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
    }
}
