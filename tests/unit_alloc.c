/*
 * Allocation failures: the Nth allocation fails, for every N, in the map
 * parser and every accessor, shard_map_to_json(), the summary and the
 * move's map edit, shard_map_load(), the file store (open, load, publish),
 * the codec (shard_id_parse, shard_mod) and the merge patch path
 * (object_parse, merge_patch, object_dump). libshard's own allocations
 * fail through its test hook (lib/alloc.c); jansson's and OpenSSL's are
 * routed through the same budget. For every N: no crash, a clean error
 * code, nothing leaked (run it under valgrind with CK_FORK=no), nothing
 * half-done left behind; and the first N that succeeds gives the right
 * result.
 */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <libshard.h>
#include <openssl/crypto.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc_budget.h" /* shard__alloc_budget, budget_take, budget_malloc */
#include "base_map.h"
#include "check_util.h"
#include "map.h"          /* map_reassign */
#include "object.h"       /* object_parse, merge_patch, object_dump */

/* A loop gives up here: no path needs anywhere near this many allocations. */
#define MAX_ALLOCS 100000

static const char base_map[] = BASE_MAP_HEAD
    " \"credentials\": {\"user\": \"app\", \"password_env\": \"LIBSHARD_PASSWORD\","
    "                   \"tls\": {\"ca\": \"/etc/ca.pem\", \"verify\": true}},"
    BASE_MAP_TAIL;

/* ---- one budget for libshard, jansson and OpenSSL ------------------------ */

/* budget_take() and budget_malloc(): tests/alloc_budget.h */

static void *ossl_malloc(size_t n, const char *file, int line)
{
    (void)file;
    (void)line;
    return budget_take() ? malloc(n ? n : 1) : NULL;
}

static void *ossl_realloc(void *p, size_t n, const char *file, int line)
{
    (void)file;
    (void)line;
    if (n == 0) { /* OpenSSL's own realloc frees then */
        free(p);
        return NULL;
    }
    return budget_take() ? realloc(p, n) : NULL;
}

static void ossl_free(void *p, const char *file, int line)
{
    (void)file;
    (void)line;
    free(p);
}

static int openssl_routed; /* OpenSSL allocations count against the budget */
static json_malloc_t saved_json_malloc;
static json_free_t saved_json_free;

static void setup(void)
{
    json_get_alloc_funcs(&saved_json_malloc, &saved_json_free);
    json_set_alloc_funcs(budget_malloc, free);
}

/* Also runs after a failed assertion: later tests get a working allocator. */
static void teardown(void)
{
    atomic_store(&shard__alloc_budget, -1);
    json_set_alloc_funcs(saved_json_malloc, saved_json_free);
}

/* The loop: run `step` with n allocations allowed, n = 0, 1, 2, ... until it
 * succeeds. Every failure must be one of the codes in `ok` (0-terminated). */
typedef int (*step_fn)(void *state);

static long alloc_loop(const char *what, step_fn step, void *state, const int *ok)
{
    for (long n = 0; n < MAX_ALLOCS; n++) {
        int rc, allowed = 0;
        atomic_store(&shard__alloc_budget, n);
        rc = step(state);
        atomic_store(&shard__alloc_budget, -1);
        if (rc == 0)
            return n;
        for (const int *c = ok; *c; c++)
            allowed |= rc == *c;
        ck_assert_msg(allowed, "%s, allocation %ld failing: got %d %s (%s)", what, n, rc,
                      shard_strerror(rc), shard_errmsg());
    }
    ck_abort_msg("%s: still failing after %d allocations", what, MAX_ALLOCS);
    return -1;
}

static const int nomem[] = {SHARD_ENOMEM, 0};
/* jansson turns some of its own allocation failures into parse errors. */
static const int nomem_or_map[] = {SHARD_ENOMEM, SHARD_EMAP, 0};
static const int nomem_or_inval[] = {SHARD_ENOMEM, SHARD_EINVAL, 0};

/* ---- the map: parse, every accessor, to_json, summary ------------------- */

typedef struct map_state {
    shard_map *map;
    char *json, *summary;
} map_state;

static void map_state_free(map_state *s)
{
    shard_map_free(s->map);
    shard_free(s->json);
    shard_free(s->summary);
    memset(s, 0, sizeof *s);
}

/* The accessors allocate nothing: they must give the right answers with the
 * budget spent, right after a parse that just made it. */
static void check_accessors(const shard_map *m)
{
    const char *master, *standby;

    assert_base_map_lookups(m);
    ck_assert_str_eq(shard_map_pair_name(m, 1), "MySQL002");
    ck_assert_ptr_null(shard_map_pair_name(m, 2));
    ck_assert_int_eq(shard_map_pair_addrs(m, "MySQL003", &master, &standby),
                     SHARD_ENOTFOUND);
}

static int map_step(void *arg)
{
    map_state *s = arg;
    int rc;

    map_state_free(s);
    if ((rc = shard_map_parse(&s->map, base_map, strlen(base_map))))
        return rc;
    check_accessors(s->map);
    if ((rc = shard_map_to_json(s->map, &s->json)))
        return rc;
    return shard_map_summary(s->map, &s->summary);
}

START_TEST(map_parse_accessors_json_summary)
{
    map_state s = {0};
    shard_map *again = NULL;
    long n = alloc_loop("map parse, to_json, summary", map_step, &s, nomem_or_map);

    ck_assert_int_gt(n, 10);
    check_accessors(s.map);
    ck_assert_msg(strstr(s.summary, "map version 7: 64 open shards") &&
                  strstr(s.summary, "16 mod shards with 2 tables"), "%s", s.summary);
    ck_assert_int_eq(shard_map_parse(&again, s.json, strlen(s.json)), 0);
    check_accessors(again);
    shard_map_free(again);
    map_state_free(&s);
}
END_TEST

/* ---- the move's map edit ------------------------------------------------- */

typedef struct reassign_state {
    shard_map *cur, *next;
} reassign_state;

static int reassign_step(void *arg)
{
    reassign_state *s = arg;
    shard_map_free(s->next);
    s->next = NULL;
    return map_reassign(s->cur, 16, 40, "MySQL002", 8, &s->next);
}

START_TEST(map_reassign_allocation_failures)
{
    reassign_state s = {NULL, NULL};
    const char *pair;

    ck_assert_int_eq(shard_map_parse(&s.cur, base_map, strlen(base_map)), 0);
    ck_assert_int_gt(alloc_loop("map_reassign", reassign_step, &s, nomem_or_map), 10);
    ck_assert_uint_eq(shard_map_version(s.next), 8);
    ck_assert_int_eq(shard_map_pair_of(s.next, 15, &pair), 0);
    ck_assert_str_eq(pair, "MySQL001");
    ck_assert_int_eq(shard_map_pair_of(s.next, 16, &pair), 0);
    ck_assert_str_eq(pair, "MySQL002");
    ck_assert_int_eq(shard_map_pair_of(s.next, 63, &pair), 0);
    ck_assert_str_eq(pair, "MySQL002");
    shard_map_free(s.cur);
    shard_map_free(s.next);
}
END_TEST

/* ---- shard_map_load and the file store ----------------------------------- */

typedef struct tmpdir {
    char dir[64], map[128];
} tmpdir;

static void tmpdir_make(tmpdir *t)
{
    snprintf(t->dir, sizeof t->dir, "/tmp/libshard-alloc-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(t->dir));
    snprintf(t->map, sizeof t->map, "%s/map.json", t->dir);
}

static void tmpdir_remove(tmpdir *t)
{
    DIR *d = opendir(t->dir);
    struct dirent *e;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    rmdir(t->dir);
}

/* The names in the directory other than the map and its lock file. */
static int stray_files(const tmpdir *t)
{
    DIR *d = opendir(t->dir);
    struct dirent *e;
    int n = 0;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
             strcmp(e->d_name, "map.json") && strcmp(e->d_name, "map.json.lock");
    closedir(d);
    return n;
}

/* The base map at `version`, written without libshard. */
static void write_map(const char *path, int version)
{
    FILE *f = fopen(path, "w");
    const char *v = strstr(base_map, "7,");

    ck_assert_ptr_nonnull(f);
    fprintf(f, "%.*s%d%s", (int)(v - base_map), base_map, version, v + 1);
    ck_assert_int_eq(fclose(f), 0);
}

static uint64_t stored_version(const char *path)
{
    shard_map *m = NULL;
    uint64_t v;
    ck_assert_msg(shard_map_load(&m, path) == 0, "%s", shard_errmsg());
    v = shard_map_version(m);
    shard_map_free(m);
    return v;
}

typedef struct load_state {
    const char *path;
    shard_map *map;
} load_state;

static int load_step(void *arg)
{
    load_state *s = arg;
    shard_map_free(s->map);
    s->map = NULL;
    return shard_map_load(&s->map, s->path);
}

START_TEST(map_load_allocation_failures)
{
    tmpdir t;
    load_state s = {t.map, NULL};

    tmpdir_make(&t);
    write_map(t.map, 7);
    ck_assert_int_gt(alloc_loop("shard_map_load", load_step, &s, nomem_or_map), 10);
    check_accessors(s.map);
    shard_map_free(s.map);
    tmpdir_remove(&t);
}
END_TEST

typedef struct store_state {
    tmpdir *t;
    shard_map *next; /* version 8, to publish over version 7 */
    uint64_t loaded;
} store_state;

static int store_step(void *arg)
{
    store_state *s = arg;
    shard_store *st = NULL;
    shard_map *cur = NULL;
    int rc;

    write_map(s->t->map, 7); /* every attempt starts from the same store */
    if ((rc = shard_store_open(&st, s->t->map)))
        return rc;
    rc = shard_store_load(st, &cur);
    if (rc == 0) {
        s->loaded = shard_map_version(cur);
        rc = shard_store_publish(st, s->next, shard_map_version(cur));
    }
    shard_map_free(cur);
    shard_store_free(st);
    /* A publish that failed left the store as it was, and no temporary file. */
    atomic_store(&shard__alloc_budget, -1);
    if (rc)
        ck_assert_msg(stored_version(s->t->map) == 7,
                      "publish failed with %d (%s), yet the map was replaced", rc,
                      shard_errmsg());
    ck_assert_int_eq(stray_files(s->t), 0);
    return rc;
}

START_TEST(file_store_allocation_failures)
{
    tmpdir t;
    store_state s = {&t, NULL, 0};
    char *text;

    tmpdir_make(&t);
    write_map(t.map, 8);
    ck_assert_int_eq(shard_map_load(&s.next, t.map), 0);
    ck_assert_int_gt(alloc_loop("file store open, load, publish", store_step, &s,
                                nomem_or_map), 10);
    ck_assert_uint_eq(s.loaded, 7);
    ck_assert_uint_eq(stored_version(t.map), 8);
    /* The file holds the published map's canonical text. */
    {
        load_state l = {t.map, NULL};
        char *stored = NULL;
        ck_assert_int_eq(load_step(&l), 0);
        ck_assert_int_eq(shard_map_to_json(l.map, &stored), 0);
        ck_assert_int_eq(shard_map_to_json(s.next, &text), 0);
        ck_assert_str_eq(stored, text);
        shard_free(stored);
        shard_free(text);
        shard_map_free(l.map);
    }
    shard_map_free(s.next);
    tmpdir_remove(&t);
}
END_TEST

/* ---- the codec ----------------------------------------------------------- */

typedef struct codec_state {
    uint64_t id;
    uint32_t mod[3];
} codec_state;

static int codec_step(void *arg)
{
    codec_state *s = arg;
    int rc;

    if ((rc = shard_id_parse("3769161113107693573", &s->id)) ||
        (rc = shard_mod("1.2.3.4", 7, 4096, &s->mod[0])) ||
        (rc = shard_mod("", 0, 65536, &s->mod[1])) ||
        (rc = shard_mod("a\0b", 3, 1000, &s->mod[2])))
        return rc;
    return 0;
}

START_TEST(codec_allocation_failures)
{
    codec_state s;
    uint32_t expect_nul;
    long n = alloc_loop("shard_id_parse, shard_mod", codec_step, &s, nomem);

    /* shard_id_parse allocates nothing; each MD5 needs OpenSSL's memory. */
    if (openssl_routed)
        ck_assert_int_ge(n, 3);
    ck_assert_uint_eq(s.id, (UINT64_C(53563) << 46) | (UINT64_C(1) << 36) | 5);
    ck_assert_uint_eq(s.mod[0], 1537); /* shard_mod(3)'s example */
    /* MD5("") = d41d8cd98f00b204e9800998ecf8427e; mod 65536 is its last 16 bits. */
    ck_assert_uint_eq(s.mod[1], 0x427e);
    /* MD5("a\0b") = 70350f6027bce3713f6b76473084309b, mod 1000, by Horner. */
    {
        static const unsigned char md[16] = {0x70, 0x35, 0x0f, 0x60, 0x27, 0xbc, 0xe3, 0x71,
                                             0x3f, 0x6b, 0x76, 0x47, 0x30, 0x84, 0x30, 0x9b};
        unsigned __int128 v = 0;
        for (int i = 0; i < 16; i++)
            v = v << 8 | md[i];
        expect_nul = (uint32_t)(v % 1000);
    }
    ck_assert_uint_eq(s.mod[2], expect_nul);
    if (!openssl_routed)
        fprintf(stderr, "unit_alloc: note: OpenSSL allocated before main; its "
                        "allocations were not failed\n");
}
END_TEST

/* ---- merge patch: object_parse, merge_patch, object_dump ---------------- */

typedef struct patch_state {
    char *text;
    size_t len;
} patch_state;

static int patch_step(void *arg)
{
    static const char target[] =
        "{\"title\": \"Goodbye!\", \"author\": {\"givenName\": \"John\", \"familyName\": \"Doe\"},"
        " \"tags\": [\"example\", \"sample\"], \"content\": \"This will be unchanged\"}";
    static const char patch[] =
        "{\"title\": \"Hello!\", \"phoneNumber\": \"+01-555-555-5555\","
        " \"author\": {\"familyName\": null}, \"tags\": [\"example\"], \"new\": {\"a\": [1, 2.5, null],"
        " \"b\": {\"c\": null, \"d\": \"x\\u0000y\"}}}";
    patch_state *s = arg;
    json_t *t = NULL, *p = NULL, *r = NULL;
    int rc;

    free(s->text);
    s->text = NULL;
    if ((rc = object_parse(target, strlen(target), &t)) ||
        (rc = object_parse(patch, strlen(patch), &p)))
        goto out;
    if (!(r = merge_patch(t, p))) {
        rc = SHARD_ENOMEM;
        goto out;
    }
    rc = object_dump(r, &s->text, &s->len);
out:
    json_decref(t);
    json_decref(p);
    json_decref(r);
    return rc;
}

START_TEST(merge_patch_allocation_failures)
{
    patch_state s = {NULL, 0};
    json_t *got, *want;

    ck_assert_int_gt(alloc_loop("object_parse, merge_patch, object_dump", patch_step, &s,
                                nomem_or_inval), 10);
    /* RFC 7386 section 3, plus nested objects made from nothing. */
    got = json_loadb(s.text, s.len, JSON_ALLOW_NUL, NULL);
    want = json_loads("{\"title\": \"Hello!\", \"author\": {\"givenName\": \"John\"},"
                      " \"tags\": [\"example\"], \"content\": \"This will be unchanged\","
                      " \"phoneNumber\": \"+01-555-555-5555\","
                      " \"new\": {\"a\": [1, 2.5, null], \"b\": {\"d\": \"x\\u0000y\"}}}",
                      JSON_ALLOW_NUL, NULL);
    ck_assert_ptr_nonnull(got);
    ck_assert_ptr_nonnull(want);
    ck_assert_msg(json_equal(got, want), "merged: %s", s.text);
    json_decref(got);
    json_decref(want);
    free(s.text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("alloc");
    TCase *tc = tcase_create("alloc");

    /* Before anything makes OpenSSL allocate: afterwards it refuses. */
    openssl_routed = CRYPTO_set_mem_functions(ossl_malloc, ossl_realloc, ossl_free);
    /* OpenSSL's one-time set-up (providers, the MD5 fetch) is not under test:
     * let it happen now, so the loops see what every call needs. */
    {
        uint32_t warm;
        if (shard_mod("", 0, 1, &warm) != 0) {
            fprintf(stderr, "unit_alloc: shard_mod fails: %s\n", shard_errmsg());
            return 1;
        }
    }
    tcase_set_timeout(tc, 120); /* thousands of iterations under valgrind */
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_tests(tc, TESTS(map_parse_accessors_json_summary, map_reassign_allocation_failures,
                              map_load_allocation_failures, file_store_allocation_failures,
                              codec_allocation_failures, merge_patch_allocation_failures));
    suite_add_tcase(s, tc);
    return run_suite(s, CK_FORK_GETENV) ? 1 : 0;
}
