/*
 * Unit tests (no server) for lib/util.c: the fan-out every parallel part of
 * the library uses, and saving and restoring the thread's error message.
 */
#include "internal.h" /* private: tests link libshard.a */
#include "check_util.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ITEMS 1000

typedef struct tally {
    atomic_int seen[ITEMS];
    atomic_uint workers_used; /* bit per worker */
    size_t fail_at;           /* ITEMS: never */
    atomic_int ran;
    atomic_bool failed;       /* item fail_at has returned its failure */
} tally;

static int count_fn(void *arg, size_t i, unsigned worker)
{
    tally *t = arg;
    atomic_fetch_add(&t->seen[i], 1);
    atomic_fetch_or(&t->workers_used, 1u << worker);
    atomic_fetch_add(&t->ran, 1);
    if (i == t->fail_at) {
        atomic_store(&t->failed, true);
        return shard__fail(SHARD_ESERVER, "item %zu failed on purpose", i);
    }
    /* Items after the failing one take a millisecond each once it failed,
     * as real work does: the rest of the items would take a second, so the
     * failing worker cannot lose the race to record the failure unless it
     * is kept off the CPU for that long (on a loaded machine a trivial item
     * let the others finish all of them first). Before the failure an item
     * after it waits for it, so that it has happened by then. */
    if (t->fail_at < ITEMS && i > t->fail_at) {
        while (!atomic_load(&t->failed))
            sched_yield();
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    return 0;
}

START_TEST(fanout_every_item_once)
{
    static tally t;
    memset(&t, 0, sizeof t);
    t.fail_at = ITEMS;
    ck_assert_int_eq(fanout_run(ITEMS, 4, count_fn, &t), 0);
    for (size_t i = 0; i < ITEMS; i++)
        ck_assert_int_eq(atomic_load(&t.seen[i]), 1);
    /* Workers are numbered 0..3: nothing outside that range. */
    ck_assert_uint_eq(atomic_load(&t.workers_used) & ~0xFu, 0);
}
END_TEST

START_TEST(fanout_first_failure_comes_back)
{
    static tally t;
    memset(&t, 0, sizeof t);
    t.fail_at = 10;
    shard__fail(0, "before");
    ck_assert_int_eq(fanout_run(ITEMS, 3, count_fn, &t), SHARD_ESERVER);
    ck_assert_str_eq(shard_errmsg(), "item 10 failed on purpose");
    /* Items stop being handed out: far fewer than all ran. */
    ck_assert_int_lt(atomic_load(&t.ran), ITEMS);
}
END_TEST

START_TEST(fanout_workers_bounded)
{
    ck_assert_uint_eq(fanout_workers(0, 8), 1);
    ck_assert_uint_eq(fanout_workers(3, 8), 3);
    ck_assert_uint_eq(fanout_workers(100, 0), 1);
    ck_assert_uint_eq(fanout_workers(1000, 500), 64);
    ck_assert_int_eq(fanout_run(0, 4, count_fn, NULL), 0); /* nothing to do */
}
END_TEST

START_TEST(error_save_restore)
{
    shard_errsave s;
    shard__fail(SHARD_ETIMEOUT, "the real cause");
    shard__error_save(&s, SHARD_ETIMEOUT);
    shard__fail(SHARD_EIO, "cleanup failed too");
    ck_assert_int_eq(shard__error_restore(&s), SHARD_ETIMEOUT);
    ck_assert_str_eq(shard_errmsg(), "the real cause");
}
END_TEST

/* A message composed from the previous one (as a caller that adds context
 * writes it) reads once, whole, never repeated or mangled. */
START_TEST(error_composed_from_previous)
{
    char want[600];

    shard__fail(SHARD_ECONNECT, "publishing the map: map store 127.0.0.1:1 does not answer");
    snprintf(want, sizeof want, "whether the map flipped is unknown (%s): the fence stays on",
             shard_errmsg());
    shard__fail(SHARD_ECONNECT, "whether the map flipped is unknown (%s): the fence stays on",
               shard_errmsg());
    ck_assert_str_eq(shard_errmsg(), want);
    shard__fail(SHARD_EIO, "%s; %s", shard_errmsg(), "and again");
    ck_assert_uint_eq(strlen(shard_errmsg()), strlen(want) + strlen("; and again"));
    ck_assert_int_eq(strncmp(shard_errmsg(), want, strlen(want)), 0);
}
END_TEST

START_TEST(copy_out_terminates)
{
    char *out = NULL;
    size_t len = 99;
    ck_assert_int_eq(copy_out("a\0b", 3, &out, &len), 0);
    ck_assert_uint_eq(len, 3);
    ck_assert_int_eq(memcmp(out, "a\0b\0", 4), 0);
    free(out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("util");

    tcase_of(s, "util", TESTS(fanout_every_item_once, fanout_first_failure_comes_back,
                              fanout_workers_bounded, error_save_restore,
                              error_composed_from_previous, copy_out_terminates));
    return run_suite(s, CK_FORK_GETENV) ? EXIT_FAILURE : EXIT_SUCCESS;
}
