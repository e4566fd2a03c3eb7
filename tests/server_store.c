/*
 * Map stores and the hot path: the MySQL table store (publish with version
 * compare-and-swap, concurrent publishers), contexts that reload on demand
 * and on a jittered timer, and operations that keep working when the store
 * is gone or broken (the hot path never reads the store).
 */
#include "check_util.h"
#include "harness.h"

#include <check.h>
#include <jansson.h>
#include <libshard.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static harness *h;

/* A MySQL store location for table `table` in database libshard_maps on s1,
 * as user: the operators' account publishes (it creates the table), the
 * application's reads (servers.sh grants it SELECT there, nothing more). */
static void store_uri_as(char *buf, size_t size, const char *user, const char *table)
{
    snprintf(buf, size,
             "mysql://%s@127.0.0.1:%d/libshard_maps/%s?password_env=LIBSHARD_PASSWORD",
             user, harness_port(h, "s1"), table);
}

static void store_uri(char *buf, size_t size, const char *table)
{
    store_uri_as(buf, size, HARNESS_ADMIN_USER, table);
}

static void app_store_uri(char *buf, size_t size, const char *table)
{
    store_uri_as(buf, size, "shard", table);
}

static shard_map *map_version(uint64_t version, int open_shards)
{
    json_t *doc = json_load_file(harness_map_path(h), 0, NULL);
    shard_map *m = NULL;
    char *text;

    ck_assert_ptr_nonnull(doc);
    json_object_set_new(doc, "version", json_integer((json_int_t)version));
    if (open_shards)
        json_object_set_new(doc, "open_shards", json_integer(open_shards));
    text = json_dumps(doc, 0);
    ck_assert_int_eq(shard_map_parse(&m, text, strlen(text)), 0);
    free(text);
    json_decref(doc);
    return m;
}

static void publish(const char *location, uint64_t version, uint64_t expected)
{
    shard_store *st = NULL;
    shard_map *m = map_version(version, 0);
    ck_assert_int_eq(shard_store_open(&st, location), 0);
    ck_assert_msg(shard_store_publish(st, m, expected) == 0, "%s", shard_errmsg());
    shard_store_free(st);
    shard_map_free(m);
}

START_TEST(mysql_store_round_trip_and_cas)
{
    shard_store *st = NULL, *app = NULL;
    shard_map *m = NULL, *m5 = map_version(5, 0), *m6 = map_version(6, 0);
    char uri[600], app_uri[600];

    store_uri(uri, sizeof uri, "maps_cas");
    app_store_uri(app_uri, sizeof app_uri, "maps_cas");
    ck_assert_int_eq(shard_store_open(&st, uri), 0);
    ck_assert_int_eq(shard_store_publish(st, m5, 0), 0);
    ck_assert_int_eq(shard_store_load(st, &m), 0);
    ck_assert_uint_eq(shard_map_version(m), 5);
    shard_map_free(m);
    ck_assert_int_eq(shard_store_publish(st, m6, 4), SHARD_ECONFLICT);
    ck_assert_msg(strstr(shard_errmsg(), "version is 5"), "%s", shard_errmsg());
    ck_assert_int_eq(shard_store_publish(st, m5, 5), SHARD_EINVAL);
    ck_assert_int_eq(shard_store_publish(st, m6, 5), 0);
    ck_assert_int_eq(shard_store_load(st, &m), 0);
    ck_assert_uint_eq(shard_map_version(m), 6);
    shard_map_free(m);
    /* The application's account reads the store and may not publish. */
    ck_assert_int_eq(shard_store_open(&app, app_uri), 0);
    ck_assert_msg(shard_store_load(app, &m) == 0, "%s", shard_errmsg());
    ck_assert_uint_eq(shard_map_version(m), 6);
    shard_map_free(m);
    m = map_version(7, 0);
    ck_assert_int_eq(shard_store_publish(app, m, 6), SHARD_EPRIV);
    ck_assert_msg(strstr(shard_errmsg(), "denied"), "%s", shard_errmsg());
    shard_map_free(m);
    shard_store_free(app);
    /* Every version stays in the table: the history of the map. */
    {
        char *out = NULL, sql[300];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM libshard_maps.maps_cas");
        ck_assert_int_eq(harness_sql(h, "s1", sql, &out), 0);
        ck_assert_str_eq(out, "2\n");
        free(out);
    }
    shard_store_free(st);
    shard_map_free(m5);
    shard_map_free(m6);
}
END_TEST

START_TEST(mysql_store_concurrent_publishers)
{
    char uri[600];
    int wins;
    shard_store *st = NULL;
    shard_map *m2 = map_version(2, 0);

    store_uri(uri, sizeof uri, "maps_race");
    publish(uri, 1, 0);
    ck_assert_int_eq(shard_store_open(&st, uri), 0);
    wins = publish_race(st, m2, 1, 6, NULL, NULL);
    ck_assert_int_eq(wins, 1);
    shard_store_free(st);
    shard_map_free(m2);
}
END_TEST

START_TEST(mysql_store_bad_locations)
{
    static const char *const bad[] = {
        "mysql://",
        "mysql://127.0.0.1:3306/db/t",
        "mysql://u@127.0.0.1:0/db/t",
        "mysql://u@127.0.0.1:99999/db/t",
        "mysql://u@127.0.0.1:3306/db",
        "mysql://u@127.0.0.1:3306/Db/t",
        "mysql://u@127.0.0.1:3306/db/t;drop",
        "mysql://u@127.0.0.1:3306/db/t?password=x",
        "mysql://u@127.0.0.1:3306/db/t?socket=relative",
        "mysql://u@127.0.0.1:3306/db/t?password_env=A B",
        "postgres://u@h/db/t",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        shard_store *st = (shard_store *)0x1;
        ck_assert_msg(shard_store_open(&st, bad[i]) == SHARD_EINVAL, "%s accepted", bad[i]);
        ck_assert_ptr_eq(st, (shard_store *)0x1);
        ck_assert_msg(strstr(shard_errmsg(), "map store"), "%s", shard_errmsg());
    }
}
END_TEST

START_TEST(mysql_store_empty_and_wrong_password)
{
    shard_store *st = NULL;
    shard_map *m = NULL;
    char uri[600];
    const char *pw = getenv("LIBSHARD_PASSWORD");

    app_store_uri(uri, sizeof uri, "maps_empty");
    ck_assert_int_eq(shard_store_open(&st, uri), 0);
    /* No table yet: the store says so, it does not invent a map. */
    ck_assert_int_ne(shard_store_load(st, &m), 0);
    ck_assert_ptr_null(m);
    shard_store_free(st);
    setenv("LIBSHARD_STORE_WRONG_PW", "not-the-password", 1);
    snprintf(uri, sizeof uri, "mysql://shard@127.0.0.1:%d/libshard_maps/maps?"
             "password_env=LIBSHARD_STORE_WRONG_PW", harness_port(h, "s1"));
    ck_assert_int_eq(shard_store_open(&st, uri), 0);
    ck_assert_int_eq(shard_store_load(st, &m), SHARD_EPRIV);
    ck_assert_msg(strstr(shard_errmsg(), "Access denied"), "%s", shard_errmsg());
    ck_assert_ptr_null(strstr(shard_errmsg(), "not-the-password"));
    ck_assert_ptr_null(strstr(shard_errmsg(), pw));
    shard_store_free(st);
}
END_TEST

/* A context on the MySQL store follows new versions: on reload and on its timer. */
START_TEST(context_follows_mysql_store)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    shard_map *m = NULL;
    shard_store *st = NULL;
    shard_map *v11 = map_version(11, 0), *v12 = map_version(12, 0);
    char uri[600], app_uri[600];
    double waited = 0;

    store_uri(uri, sizeof uri, "maps_follow");
    app_store_uri(app_uri, sizeof app_uri, "maps_follow");
    publish(uri, 10, 0);
    o.refresh_interval_ms = 200;
    /* The application reads the store as its own account. */
    ck_assert_msg(shard_ctx_open(&ctx, app_uri, &o) == 0, "%s", shard_errmsg());
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    ck_assert_uint_eq(shard_map_version(m), 10);
    shard_map_free(m);
    ck_assert_int_eq(shard_store_open(&st, uri), 0);
    ck_assert_int_eq(shard_store_publish(st, v11, 10), 0);
    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    ck_assert_uint_eq(shard_map_version(m), 11);
    shard_map_free(m);
    /* The timer picks up version 12 by itself. */
    ck_assert_int_eq(shard_store_publish(st, v12, 11), 0);
    for (;;) {
        struct timespec ts = {0, 50000000};
        ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
        if (shard_map_version(m) == 12) {
            shard_map_free(m);
            break;
        }
        shard_map_free(m);
        ck_assert_msg(waited < 5.0, "refresh did not pick up version 12 in 5 s");
        nanosleep(&ts, NULL);
        waited += 0.05;
    }
    shard_store_free(st);
    shard_map_free(v11);
    shard_map_free(v12);
    shard_ctx_free(ctx);
}
END_TEST

/* The hot path never reads the store: a broken store changes nothing. */
START_TEST(store_gone_operations_continue)
{
    char dir[] = "/tmp/libshard-store-XXXXXX", path[128];
    shard_ctx *ctx = NULL;
    shard_map *m = NULL;
    uint64_t id;
    char *json = NULL;
    FILE *f;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/map.json", dir);
    publish(path, 20, 0);
    ck_assert_int_eq(shard_ctx_open(&ctx, path, NULL), 0);
    ck_assert_int_eq(shard_object_create(ctx, 1, 3, "{\"k\":1}", 7, &id), 0);
    f = fopen(path, "w");
    fputs("{ broken", f);
    fclose(f);
    ck_assert_int_eq(shard_ctx_reload(ctx), SHARD_EMAP);
    ck_assert_int_eq(shard_object_get(ctx, id, &json, NULL), 0);
    ck_assert_str_eq(json, "{\"k\":1}");
    shard_free(json);
    unlink(path);
    ck_assert_int_eq(shard_ctx_reload(ctx), SHARD_EIO);
    ck_assert_int_eq(shard_object_get(ctx, id, &json, NULL), 0);
    shard_free(json);
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    ck_assert_uint_eq(shard_map_version(m), 20);
    shard_map_free(m);
    /* An older version in the store never replaces a newer one in use. */
    publish(path, 19, 0);
    ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
    ck_assert_uint_eq(shard_map_version(m), 20);
    shard_map_free(m);
    shard_ctx_free(ctx);
    remove_store_dir(dir);
}
END_TEST

typedef struct reader {
    shard_ctx *ctx;
    uint64_t id;
    atomic_int *stop;
    long ok, failed;
} reader;

static void *read_loop(void *arg)
{
    reader *r = arg;
    while (!atomic_load(r->stop)) {
        char *json = NULL;
        if (shard_object_get(r->ctx, r->id, &json, NULL) == 0)
            r->ok++;
        else
            r->failed++;
        shard_free(json);
    }
    return NULL;
}

/* Reloads swap the snapshot under running operations without disturbing them. */
START_TEST(reload_under_load)
{
    char dir[] = "/tmp/libshard-store-XXXXXX", path[128];
    shard_ctx *ctx = NULL;
    shard_store *st = NULL;
    atomic_int stop = 0;
    reader r[4];
    pthread_t t[4];
    uint64_t id;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/map.json", dir);
    publish(path, 1, 0);
    ck_assert_int_eq(shard_ctx_open(&ctx, path, NULL), 0);
    ck_assert_int_eq(shard_object_create(ctx, 1, 5, "{}", 2, &id), 0);
    for (int i = 0; i < 4; i++) {
        r[i] = (reader){ctx, id, &stop, 0, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, read_loop, &r[i]), 0);
    }
    ck_assert_int_eq(shard_store_open(&st, path), 0);
    for (uint64_t v = 2; v <= 60; v++) {
        shard_map *m = map_version(v, v % 2 ? 8 : 4);
        ck_assert_int_eq(shard_store_publish(st, m, v - 1), 0);
        shard_map_free(m);
        ck_assert_int_eq(shard_ctx_reload(ctx), 0);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        ck_assert_int_eq(r[i].failed, 0);
        ck_assert_int_gt(r[i].ok, 0);
    }
    {
        shard_map *m = NULL;
        ck_assert_int_eq(shard_ctx_map(ctx, &m), 0);
        ck_assert_uint_eq(shard_map_version(m), 60);
        shard_map_free(m);
    }
    shard_store_free(st);
    shard_ctx_free(ctx);
    remove_store_dir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_store");
    TCase *tc = tcase_create("store");
    int failed;

    h = harness_start_ex(1, 8, 4);
    if (!h)
        return 1;
    if (harness_schema_apply(h)) {
        fprintf(stderr, "setup: %s\n", shard_errmsg());
        harness_stop(h);
        return 1;
    }
    tcase_set_timeout(tc, 120);
    tcase_add_tests(tc, TESTS(mysql_store_round_trip_and_cas, mysql_store_concurrent_publishers,
                              mysql_store_bad_locations, mysql_store_empty_and_wrong_password,
                              context_follows_mysql_store, store_gone_operations_continue,
                              reload_under_load));
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_FORK_GETENV);
    harness_stop(h);
    shard_global_cleanup();
    return failed ? 1 : 0;
}
