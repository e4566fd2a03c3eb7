/*
 * tests/alloc_budget.h: the allocation budget of lib/alloc.c's test hook,
 * for tests that make the Nth allocation fail. shard__alloc_budget = -1
 * never fails; n >= 0 allows n more allocations, then every one fails.
 * budget_malloc() lets jansson's allocations (json_set_alloc_funcs) count
 * against the same budget as libshard's. Static functions: each test
 * program is built on its own from its one .c file.
 */
#ifndef LIBSHARD_TESTS_ALLOC_BUDGET_H
#define LIBSHARD_TESTS_ALLOC_BUDGET_H

#include <stdatomic.h>
#include <stdlib.h>

extern atomic_long shard__alloc_budget; /* lib/alloc.c test hook */

/* Mirrors lib/alloc.c: 1 if one more allocation may succeed (and takes it). */
static __attribute__((unused)) int budget_take(void)
{
    long b = atomic_load(&shard__alloc_budget);
    if (b < 0)
        return 1;
    while (b > 0)
        if (atomic_compare_exchange_weak(&shard__alloc_budget, &b, b - 1))
            return 1;
    return b != 0;
}

static __attribute__((unused)) void *budget_malloc(size_t n)
{
    return budget_take() ? malloc(n) : NULL;
}

#endif
