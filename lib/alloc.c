/*
 * Every allocation of the library goes through here, so that a test can
 * make the Nth one fail (shard__fail_alloc_after, not exported).
 */
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* -1: never fail. n >= 0: allow n more allocations, then fail. Tests only. */
atomic_long shard__alloc_budget = -1;

static bool alloc_allowed(void)
{
    long b = atomic_load_explicit(&shard__alloc_budget, memory_order_relaxed);
    if (b < 0)
        return true;
    while (b > 0) {
        if (atomic_compare_exchange_weak(&shard__alloc_budget, &b, b - 1))
            return true;
    }
    return b != 0;
}

void *shard__malloc(size_t n)
{
    return alloc_allowed() ? malloc(n ? n : 1) : NULL;
}

void *shard__calloc(size_t n, size_t size)
{
    return alloc_allowed() ? calloc(n ? n : 1, size ? size : 1) : NULL;
}

void *shard__realloc(void *p, size_t n)
{
    return alloc_allowed() ? realloc(p, n ? n : 1) : NULL;
}

char *shard__strndup(const char *s, size_t n)
{
    char *d = shard__malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *shard__strdup(const char *s)
{
    return shard__strndup(s, strlen(s));
}

void shard_free(void *ptr)
{
    free(ptr);
}

void shard__wipe_free(char *s)
{
    if (s) {
        volatile char *p = s;
        while (*p)
            *p++ = 0;
        free(s);
    }
}
