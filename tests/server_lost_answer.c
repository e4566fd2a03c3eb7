/*
 * tests/server_lost_answer.c: writes whose answer is lost after the server
 * applied them. A TCP proxy between the context and the pair's master
 * forwards everything, and once armed drops the server's reply to the next
 * statement that names a marker and closes both sides: the server has run
 * the statement, the client saw the connection go.
 *
 *   hard_delete_answer_lost   the retry finds the object gone: success
 *                             (it was "not found" before), and it is gone
 *   mapping_remove_answer_lost  the same for a mapping row
 *   create_answer_lost        a create is not retried (a retry would make
 *                             a second object): "may or may not have been
 *                             applied", and there is exactly one object
 */
#include <check.h>
#include <libshard.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_util.h"
#include "harness.h"

static harness *H;

/* ---- the proxy ------------------------------------------------------------ */

static int Listen_fd, Server_port, Proxy_port;
static atomic_bool Quit;
static char Armed[64]; /* drop the answer to the next statement holding this */
static pthread_mutex_t Arm_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int Dropped;

typedef struct link {
    int client, server;
} link_t;

static bool take_armed(const char *buf, size_t n)
{
    bool hit = false;
    pthread_mutex_lock(&Arm_lock);
    if (Armed[0] && memmem(buf, n, Armed, strlen(Armed))) {
        Armed[0] = '\0';
        hit = true;
    }
    pthread_mutex_unlock(&Arm_lock);
    return hit;
}

static void *pump(void *arg)
{
    link_t *l = arg;
    char buf[65536];
    bool drop = false;

    while (!atomic_load(&Quit)) {
        struct pollfd p[2] = {{l->client, POLLIN, 0}, {l->server, POLLIN, 0}};
        if (poll(p, 2, 200) <= 0)
            continue;
        if (p[0].revents) {
            ssize_t n = read(l->client, buf, sizeof buf);
            if (n <= 0 || write(l->server, buf, (size_t)n) != n)
                break;
            if (take_armed(buf, (size_t)n))
                drop = true;
        }
        if (p[1].revents) {
            ssize_t n = read(l->server, buf, sizeof buf);
            if (n <= 0)
                break;
            if (drop) { /* the server answered; the client never hears it */
                atomic_fetch_add(&Dropped, 1);
                break;
            }
            if (write(l->client, buf, (size_t)n) != n)
                break;
        }
    }
    close(l->client);
    close(l->server);
    free(l);
    return NULL;
}

static void *accept_loop(void *arg)
{
    (void)arg;
    while (!atomic_load(&Quit)) {
        struct pollfd p = {Listen_fd, POLLIN, 0};
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)Server_port)};
        link_t *l;
        pthread_t t;
        int c;

        if (poll(&p, 1, 200) <= 0 || (c = accept(Listen_fd, NULL, NULL)) < 0)
            continue;
        l = malloc(sizeof *l);
        l->client = c;
        l->server = socket(AF_INET, SOCK_STREAM, 0);
        inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
        if (connect(l->server, (struct sockaddr *)&to, sizeof to) != 0 ||
            pthread_create(&t, NULL, pump, l) != 0) {
            close(l->client);
            close(l->server);
            free(l);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

static int proxy_start(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof a;
    pthread_t t;

    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    Listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (bind(Listen_fd, (struct sockaddr *)&a, sizeof a) || listen(Listen_fd, 64) ||
        getsockname(Listen_fd, (struct sockaddr *)&a, &len) ||
        pthread_create(&t, NULL, accept_loop, NULL))
        return -1;
    Proxy_port = ntohs(a.sin_port);
    pthread_detach(t);
    return 0;
}

static void arm(const char *marker)
{
    pthread_mutex_lock(&Arm_lock);
    snprintf(Armed, sizeof Armed, "%s", marker);
    pthread_mutex_unlock(&Arm_lock);
}

/* A context whose map sends MySQL001's master traffic through the proxy. */
static shard_ctx *open_through_proxy(void)
{
    char from[64], to[64], path[600], *text = NULL, *p;
    shard_map *map = NULL, *m2 = NULL;
    shard_store *st = NULL;
    shard_ctx *c = NULL;
    FILE *f;
    size_t n;

    OK(shard_map_load(&map, harness_map_path(H)));
    OK(shard_map_to_json(map, &text));
    snprintf(from, sizeof from, "\"127.0.0.1:%d\"", Server_port);
    snprintf(to, sizeof to, "\"127.0.0.1:%d\"", Proxy_port);
    ck_assert_ptr_nonnull(p = strstr(text, from));
    n = strlen(text) + 64;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(p - text), text, to, p + strlen(from));
    OK(shard_map_parse(&m2, out, strlen(out)));
    snprintf(path, sizeof path, "%s/proxied-map.json", harness_dir(H));
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fclose(f);
    unlink(path);
    OK(shard_store_open(&st, path));
    OK(shard_store_publish(st, m2, 0));
    shard_store_free(st);
    {
        shard_options o = SHARD_OPTIONS_INIT;
        o.log_level = -1;
        OK(shard_ctx_open(&c, path, &o));
    }
    free(out);
    shard_free(text);
    shard_map_free(m2);
    shard_map_free(map);
    return c;
}

/* ---- tests -------------------------------------------------------------------- */

START_TEST(hard_delete_answer_lost)
{
    shard_ctx *c = open_through_proxy();
    uint64_t id = 0;
    char *json = NULL;
    int before = atomic_load(&Dropped);

    OK(shard_object_create(c, 1, 1, LIT("{\"d\":1}"), &id));
    arm("DELETE FROM");
    OK(shard_object_delete(c, id, SHARD_DELETE_HARD));
    ck_assert_int_eq(atomic_load(&Dropped), before + 1); /* the answer was dropped */
    FAILS(SHARD_ENOTFOUND, shard_object_get(c, id, &json, NULL));
    /* Without a lost answer, a missing object is still "not found". */
    FAILS(SHARD_ENOTFOUND, shard_object_delete(c, id, SHARD_DELETE_HARD));
    shard_ctx_free(c);
}
END_TEST

START_TEST(mapping_remove_answer_lost)
{
    shard_ctx *c = open_through_proxy();
    uint64_t a = 0, b = 0, count = 9;
    int before = atomic_load(&Dropped);

    OK(shard_object_create(c, 2, 1, LIT("{\"board\":1}"), &a));
    OK(shard_object_create(c, 1, 1, LIT("{\"pin\":1}"), &b));
    OK(shard_mapping_add(c, "board_has_pins", a, b, 5));
    arm("DELETE FROM");
    OK(shard_mapping_remove(c, "board_has_pins", a, b));
    ck_assert_int_eq(atomic_load(&Dropped), before + 1);
    OK(shard_mapping_count(c, "board_has_pins", a, &count));
    ck_assert_uint_eq(count, 0);
    shard_ctx_free(c);
}
END_TEST

START_TEST(create_answer_lost)
{
    shard_ctx *c = open_through_proxy();
    uint64_t id = 0, n = 0;
    int before = atomic_load(&Dropped), rc;
    char *out = NULL;

    arm("lost-create-marker");
    rc = shard_object_create(c, 1, 1, LIT("{\"m\":\"lost-create-marker\"}"), &id);
    ck_assert_int_eq(atomic_load(&Dropped), before + 1);
    ck_assert_msg((rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT) &&
                      strstr(shard_errmsg(), "may or may not have been applied"),
                  "%d %s", rc, shard_errmsg());
    ck_assert_int_eq(harness_sql(H, "s1", "SELECT COUNT(*) FROM db00001.pins WHERE data LIKE "
                                          "'%lost-create-marker%'", &out), 0);
    n = strtoull(out, NULL, 10);
    free(out);
    ck_assert_uint_eq(n, 1); /* applied once, never twice */
    shard_ctx_free(c);
}
END_TEST

static Suite *lost_suite(void)
{
    Suite *s = suite_create("server_lost_answer");
    TCase *tc = tcase_of(s, "lost", TESTS(hard_delete_answer_lost, mapping_remove_answer_lost,
                                          create_answer_lost));
    tcase_set_timeout(tc, 60);
    return s;
}

int main(void)
{
    int failed;

    if (!(H = harness_start_ex(2, 8, 2)) || harness_schema_apply(H)) {
        fprintf(stderr, "server_lost_answer: set-up: %s\n", shard_errmsg());
        if (H)
            harness_stop(H);
        return EXIT_FAILURE;
    }
    Server_port = harness_port(H, "s1");
    if (proxy_start()) {
        perror("server_lost_answer: the proxy");
        harness_stop(H);
        return EXIT_FAILURE;
    }
    failed = run_suite(lost_suite(), CK_NOFORK);
    atomic_store(&Quit, true);
    harness_stop(H);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
