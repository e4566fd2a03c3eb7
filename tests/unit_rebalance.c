/*
 * Unit tests (no server) for the rebalancer's planner (lib/rebalance.c):
 * moves go from the fullest pair to the emptiest, in contiguous ranges, until
 * every pair is within the threshold; a plan of the planned state is empty
 * (no flapping); drains empty their pair; --max-moves bounds the plan.
 */
#include "internal.h" /* private: tests link libshard.a */
#include "check_util.h"
#include "rebalance.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#define NP 3
#define NS 24

static bool considered[NP], drained[NP];
static long pair_at[NS];
static double load[NS];

static void setup_all_on_first(void)
{
    for (size_t p = 0; p < NP; p++) {
        considered[p] = true;
        drained[p] = false;
    }
    for (unsigned s = 0; s < NS; s++) {
        pair_at[s] = 0;
        load[s] = 100;
    }
}

/* Plan, check each step is a contiguous range wholly on its source, apply it. */
static size_t plan_apply(double threshold, unsigned max_moves)
{
    rebal_input in = {NP, considered, drained, NS, pair_at, load, threshold, max_moves};
    rebal_step *st = NULL;
    size_t n = 0;

    ck_assert_int_eq(rebal_compute(&in, &st, &n), 0);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_le(st[i].first, st[i].last);
        ck_assert_uint_ne(st[i].from, st[i].to);
        ck_assert(considered[st[i].to] && !drained[st[i].to]);
        for (unsigned s = st[i].first; s <= st[i].last; s++) {
            ck_assert_int_eq(pair_at[s], (long)st[i].from);
            pair_at[s] = (long)st[i].to;
        }
    }
    free(st);
    return n;
}

static void assert_balanced(double threshold)
{
    double pl[NP], total = 0, mean;
    size_t nactive = 0;

    rebal_pair_loads(NP, NS, pair_at, load, pl);
    for (size_t p = 0; p < NP; p++)
        if (considered[p]) {
            total += pl[p];
            nactive += !drained[p];
        }
    mean = total / (double)nactive;
    for (size_t p = 0; p < NP; p++) {
        if (!considered[p])
            continue;
        if (drained[p])
            ck_assert(pl[p] == 0);
        else
            ck_assert_msg(pl[p] >= mean * (1 - threshold) && pl[p] <= mean * (1 + threshold),
                          "pair %zu: %.0f, mean %.0f", p, pl[p], mean);
    }
}

START_TEST(skewed_to_balanced_in_two_moves)
{
    setup_all_on_first();
    ck_assert_uint_eq(plan_apply(0.1, 0), 2);
    assert_balanced(0.1);
    ck_assert_uint_eq(plan_apply(0.1, 0), 0); /* no flapping */
}
END_TEST

START_TEST(uneven_shards)
{
    setup_all_on_first();
    for (unsigned s = 0; s < NS; s++)
        load[s] = (double)((s * 37) % 11 + 1) * 1000;
    ck_assert_uint_ge(plan_apply(0.1, 0), 2);
    assert_balanced(0.1);
    ck_assert_uint_eq(plan_apply(0.1, 0), 0);
}
END_TEST

START_TEST(balanced_is_left_alone)
{
    setup_all_on_first();
    for (unsigned s = 0; s < NS; s++)
        pair_at[s] = (long)(s / (NS / NP));
    load[0] = 150; /* pair 0 is 50/2400 above the others: within 10% */
    ck_assert_uint_eq(plan_apply(0.1, 0), 0);
}
END_TEST

START_TEST(a_giant_shard_is_not_moved_back_and_forth)
{
    setup_all_on_first();
    for (unsigned s = 0; s < NS; s++) {
        pair_at[s] = (long)(s % NP);
        load[s] = 1;
    }
    load[0] = 10000; /* no move can even this out */
    ck_assert_uint_eq(plan_apply(0.1, 0), 0);
}
END_TEST

START_TEST(drain_empties_the_pair)
{
    setup_all_on_first();
    for (unsigned s = 0; s < NS; s++)
        pair_at[s] = (long)(s / (NS / NP));
    drained[1] = true;
    ck_assert_uint_ge(plan_apply(0.1, 0), 2); /* onto both others */
    assert_balanced(0.1);
    ck_assert_uint_eq(plan_apply(0.1, 0), 0);
}
END_TEST

START_TEST(drain_of_nothing_is_one_move_per_run)
{
    setup_all_on_first();
    for (unsigned s = 0; s < NS; s++) {
        pair_at[s] = (long)(s / (NS / NP));
        load[s] = 0;
    }
    drained[0] = true;
    ck_assert_uint_eq(plan_apply(0.1, 0), 1);
    for (unsigned s = 0; s < NS / NP; s++)
        ck_assert_int_ne(pair_at[s], 0);
}
END_TEST

START_TEST(merge_two_of_three)
{
    setup_all_on_first();
    for (unsigned s = 0; s < NS; s++)
        pair_at[s] = (long)(s / (NS / NP));
    considered[0] = false; /* --pairs MySQL002,MySQL003 --drain MySQL003 */
    drained[2] = true;
    ck_assert_uint_ge(plan_apply(0.1, 0), 1);
    for (unsigned s = 0; s < NS; s++)
        ck_assert_int_eq(pair_at[s], s < NS / NP ? 0 : 1);
}
END_TEST

START_TEST(max_moves_bounds_and_a_second_plan_continues)
{
    setup_all_on_first();
    ck_assert_uint_eq(plan_apply(0.1, 1), 1);
    ck_assert_uint_eq(plan_apply(0.1, 1), 1);
    assert_balanced(0.1);
    ck_assert_uint_eq(plan_apply(0.1, 1), 0);
}
END_TEST

START_TEST(nowhere_to_drain_to)
{
    rebal_input in = {NP, considered, drained, NS, pair_at, load, 0.1, 0};
    rebal_step *st = NULL;
    size_t n = 0;

    setup_all_on_first();
    for (size_t p = 0; p < NP; p++)
        drained[p] = true;
    ck_assert_int_eq(rebal_compute(&in, &st, &n), SHARD_EINVAL);
    ck_assert_ptr_null(st);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("unit_rebalance");

    tcase_of(s, "planner", TESTS(skewed_to_balanced_in_two_moves, uneven_shards,
                                 balanced_is_left_alone, a_giant_shard_is_not_moved_back_and_forth,
                                 drain_empties_the_pair, drain_of_nothing_is_one_move_per_run,
                                 merge_two_of_three, max_moves_bounds_and_a_second_plan_continues,
                                 nowhere_to_drain_to));
    return run_suite(s, CK_FORK_GETENV) ? 1 : 0;
}
