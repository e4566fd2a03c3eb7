/*
 * tests/fuzz/fuzz.h: what the libFuzzer targets share. A broken property
 * is reported like a crash (abort), so libFuzzer saves the input.
 */
#ifndef LIBSHARD_FUZZ_H
#define LIBSHARD_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: property failed: %s: ", __FILE__, __LINE__, \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            abort();                                                           \
        }                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated copy of the input (NULL only when out of memory). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s) {
        if (size)
            memcpy(s, data, size);
        s[size] = '\0';
    }
    return s;
}

/* Reads the input front to back; past its end every read gives zeros. */
typedef struct fuzz_reader {
    const uint8_t *p;
    size_t left;
} fuzz_reader;

static inline uint64_t fuzz_take(fuzz_reader *r, unsigned nbytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < nbytes; i++) {
        v <<= 8;
        if (r->left) {
            v |= *r->p++;
            r->left--;
        }
    }
    return v;
}

#endif
