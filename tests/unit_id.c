/*
 * Unit tests (no server) for the ID codec, mod-shard hashing, error codes,
 * the per-thread error message and the version (libshard(3): "The 64-bit
 * ID", "Mod shards"; libshard-errors(3); shard_version(3)).
 *
 * Expected values are never taken from the code under test: bit layouts are
 * composed here, mod-shard vectors come from Python's hashlib, and the
 * property checks compute MD5 through OpenSSL's EVP API directly.
 */
#include <libshard.h>

#include <check.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"

#define LOCAL_LIMIT (UINT64_C(1) << 36) /* first local id that is too big */

/*
 * For hot loops: Check's ck_assert_* report every passing check to the
 * runner through a pipe, which makes 100000 rounds take seconds.
 */
#define REQUIRE(cond, ...)                \
    do {                                  \
        if (!(cond))                      \
            ck_abort_msg(__VA_ARGS__);    \
    } while (0)

/* The test's own PRNG (splitmix64), fixed seed: failures are reproducible. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* The ID layout of libshard(3), composed here, not by the library. */
static uint64_t compose(uint64_t shard, uint64_t type, uint64_t local)
{
    return (shard << 46) | (type << 36) | local;
}

/*
 * Leave a recognisable message behind, so that a check on the message of
 * the next failure cannot pass on a stale one.
 */
static void prime_errmsg(void)
{
    uint64_t id;
    ck_assert_int_eq(shard_id_parse("PRIMED", &id), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "PRIMED"));
}

/* The message of the failure that just happened: fresh and non-empty. */
static const char *fresh_errmsg(void)
{
    const char *msg = shard_errmsg();
    ck_assert_ptr_nonnull(msg);
    ck_assert_msg(msg[0] != '\0', "empty error message");
    ck_assert_msg(strstr(msg, "PRIMED") == NULL, "stale error message: %s", msg);
    return msg;
}

static void assert_mentions(const char *msg, const char *what)
{
    ck_assert_msg(strstr(msg, what) != NULL, "message \"%s\" does not mention \"%s\"",
                  msg, what);
}

/* ------------------------------------------------------------------ */
/* shard_id_make                                                       */
/* ------------------------------------------------------------------ */

static void expect_make_ok(unsigned shard, unsigned type, uint64_t local)
{
    uint64_t id = 0;
    ck_assert_int_eq(shard_id_make(shard, type, local, &id), SHARD_OK);
    ck_assert_uint_eq(id, compose(shard, type, local));
}

/* Fails with EINVAL, leaves *id alone, and the message names `part` and `value`. */
static void expect_make_bad(unsigned shard, unsigned type, uint64_t local,
                            const char *part, const char *value)
{
    const uint64_t sentinel = UINT64_C(0xDEADBEEFCAFEF00D);
    uint64_t id = sentinel;
    const char *msg;

    prime_errmsg();
    ck_assert_int_eq(shard_id_make(shard, type, local, &id), SHARD_EINVAL);
    ck_assert_uint_eq(id, sentinel);
    msg = fresh_errmsg();
    assert_mentions(msg, part);
    assert_mentions(msg, value);
}

START_TEST(make_bounds)
{
    expect_make_ok(0, 1, 1);
    expect_make_ok(65535, 1, 1);
    expect_make_ok(0, 1023, 1);
    expect_make_ok(0, 1, LOCAL_LIMIT - 1);
    expect_make_ok(65535, 1023, LOCAL_LIMIT - 1);

    expect_make_bad(65536, 1, 1, "shard", "65536");
    expect_make_bad(UINT_MAX, 1, 1, "shard", "4294967295");
    expect_make_bad(0, 0, 1, "type", "0");
    expect_make_bad(0, 1024, 1, "type", "1024");
    expect_make_bad(0, UINT_MAX, 1, "type", "4294967295");
    expect_make_bad(0, 1, 0, "local", "0");
    expect_make_bad(0, 1, LOCAL_LIMIT, "local", "68719476736");
    expect_make_bad(0, 1, UINT64_MAX, "local", "18446744073709551615");
}
END_TEST

START_TEST(make_null_out)
{
    prime_errmsg();
    ck_assert_int_eq(shard_id_make(1, 1, 1, NULL), SHARD_EINVAL);
    fresh_errmsg();
}
END_TEST

START_TEST(make_bit_layout)
{
    uint64_t id;

    /* Pinterest's published example: shard 3429, type 1, local 7075733. */
    ck_assert_int_eq(shard_id_make(3429, 1, 7075733, &id), SHARD_OK);
    ck_assert_uint_eq(id, UINT64_C(241294492511762325));
    ck_assert_uint_eq(id, compose(3429, 1, 7075733));

    /* Each field on its own, at its lowest and highest bit. */
    ck_assert_int_eq(shard_id_make(0, 1, 1, &id), SHARD_OK);
    ck_assert_uint_eq(id, (UINT64_C(1) << 36) | 1);
    ck_assert_int_eq(shard_id_make(1, 1, 1, &id), SHARD_OK);
    ck_assert_uint_eq(id, (UINT64_C(1) << 46) | (UINT64_C(1) << 36) | 1);
    ck_assert_int_eq(shard_id_make(32768, 512, UINT64_C(1) << 35, &id), SHARD_OK);
    ck_assert_uint_eq(id, (UINT64_C(1) << 61) | (UINT64_C(1) << 45) | (UINT64_C(1) << 35));
    /* Everything at its maximum fills exactly the 62 low bits. */
    ck_assert_int_eq(shard_id_make(65535, 1023, LOCAL_LIMIT - 1, &id), SHARD_OK);
    ck_assert_uint_eq(id, UINT64_C(0x3FFFFFFFFFFFFFFF));
}
END_TEST

START_TEST(make_round_trip)
{
    uint64_t state = 20260101;
    char text[32];

    for (int i = 0; i < 100000; i++) {
        unsigned shard = (unsigned)(splitmix64(&state) % 65536);
        unsigned type = 1 + (unsigned)(splitmix64(&state) % 1023);
        uint64_t local = 1 + splitmix64(&state) % (LOCAL_LIMIT - 1);
        uint64_t id = 0, parsed = 0;

        /* Bias some draws to the edges, where off-by-one bugs live. */
        if (i % 7 == 0)
            shard = i % 2 ? 65535 : 0;
        if (i % 11 == 0)
            type = i % 2 ? 1023 : 1;
        if (i % 13 == 0)
            local = i % 2 ? LOCAL_LIMIT - 1 : 1;

        REQUIRE(shard_id_make(shard, type, local, &id) == SHARD_OK,
                "make(%u, %u, %" PRIu64 ") failed: %s", shard, type, local,
                shard_errmsg());
        REQUIRE(id == compose(shard, type, local),
                "make(%u, %u, %" PRIu64 ") = %" PRIu64, shard, type, local, id);
        REQUIRE(shard_id_shard(id) == shard && shard_id_type(id) == type &&
                    shard_id_local(id) == local,
                "%" PRIu64 " decodes to %u/%u/%" PRIu64 ", made of %u/%u/%" PRIu64, id,
                shard_id_shard(id), shard_id_type(id), shard_id_local(id), shard, type,
                local);
        REQUIRE(shard_id_valid(id) == 1, "%" PRIu64 " is not valid", id);

        snprintf(text, sizeof text, "%" PRIu64, id);
        REQUIRE(shard_id_parse(text, &parsed) == SHARD_OK && parsed == id,
                "parse(\"%s\") failed: %s", text, shard_errmsg());
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* shard_id_valid                                                      */
/* ------------------------------------------------------------------ */

START_TEST(valid_rules)
{
    uint64_t good = compose(3429, 1, 7075733);

    ck_assert_int_eq(shard_id_valid(good), 1);
    ck_assert_int_eq(shard_id_valid(compose(0, 1, 1)), 1);
    ck_assert_int_eq(shard_id_valid(UINT64_C(0x3FFFFFFFFFFFFFFF)), 1);

    ck_assert_int_eq(shard_id_valid(good | (UINT64_C(1) << 62)), 0);
    ck_assert_int_eq(shard_id_valid(good | (UINT64_C(1) << 63)), 0);
    ck_assert_int_eq(shard_id_valid(good | (UINT64_C(3) << 62)), 0);
    ck_assert_int_eq(shard_id_valid(UINT64_MAX), 0);
    ck_assert_int_eq(shard_id_valid(compose(3429, 0, 7075733)), 0);
    ck_assert_int_eq(shard_id_valid(compose(3429, 1, 0)), 0);
    ck_assert_int_eq(shard_id_valid(0), 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* shard_id_parse                                                      */
/* ------------------------------------------------------------------ */

START_TEST(parse_valid)
{
    uint64_t id = 0;

    ck_assert_int_eq(shard_id_parse("241294492511762325", &id), SHARD_OK);
    ck_assert_uint_eq(id, compose(3429, 1, 7075733));
    ck_assert_int_eq(shard_id_parse("68719476737", &id), SHARD_OK);
    ck_assert_uint_eq(id, compose(0, 1, 1));
    ck_assert_int_eq(shard_id_parse("4611686018427387903", &id), SHARD_OK);
    ck_assert_uint_eq(id, compose(65535, 1023, LOCAL_LIMIT - 1));
}
END_TEST

/* Fails with EINVAL, leaves *id alone; the message quotes the input and `why`. */
static void expect_parse_bad(const char *text, const char *why)
{
    const uint64_t sentinel = UINT64_C(0xDEADBEEFCAFEF00D);
    uint64_t id = sentinel;
    const char *msg;

    prime_errmsg();
    ck_assert_msg(shard_id_parse(text, &id) == SHARD_EINVAL, "\"%s\" was accepted", text);
    ck_assert_uint_eq(id, sentinel);
    msg = fresh_errmsg();
    if (text[0])
        assert_mentions(msg, text);
    if (why)
        assert_mentions(msg, why);
}

START_TEST(parse_rejects)
{
    char buf[32];
    uint64_t id;

    expect_parse_bad("", NULL);
    expect_parse_bad("-1", NULL);
    expect_parse_bad("+5", NULL);
    expect_parse_bad(" 5", NULL);
    expect_parse_bad("5 ", NULL);
    expect_parse_bad("12abc", NULL);
    expect_parse_bad("0x10", NULL);
    /* The number inside is a valid ID: only the decoration is wrong. */
    expect_parse_bad("+68719476737", NULL);
    expect_parse_bad(" 68719476737", NULL);
    expect_parse_bad("\t68719476737", NULL);
    expect_parse_bad("68719476737 ", NULL);
    expect_parse_bad("68719476737abc", NULL);
    expect_parse_bad("0x1000000001", NULL); /* 2^36 + 1 in hex */
    expect_parse_bad("-18446744004990074879", NULL); /* wraps to 2^36 + 1 */
    expect_parse_bad("241294492511762325\n", NULL);
    expect_parse_bad("100000000000000000000", NULL);  /* 21 digits: > 2^64 */
    expect_parse_bad("18446744073709551616", NULL);   /* 2^64 */
    expect_parse_bad("18446744073709551615", "reserved"); /* 2^64-1: both top bits */

    snprintf(buf, sizeof buf, "%" PRIu64, compose(3429, 1, 7075733) | (UINT64_C(1) << 62));
    expect_parse_bad(buf, "reserved");
    snprintf(buf, sizeof buf, "%" PRIu64, compose(3429, 1, 7075733) | (UINT64_C(1) << 63));
    expect_parse_bad(buf, "reserved");
    snprintf(buf, sizeof buf, "%" PRIu64, compose(3429, 0, 7075733));
    expect_parse_bad(buf, "type");
    snprintf(buf, sizeof buf, "%" PRIu64, compose(3429, 1, 0));
    expect_parse_bad(buf, "local");
    expect_parse_bad("0", NULL);

    prime_errmsg();
    ck_assert_int_eq(shard_id_parse(NULL, &id), SHARD_EINVAL);
    fresh_errmsg();
    prime_errmsg();
    ck_assert_int_eq(shard_id_parse("241294492511762325", NULL), SHARD_EINVAL);
    fresh_errmsg();
}
END_TEST

/* ------------------------------------------------------------------ */
/* shard_mod                                                           */
/* ------------------------------------------------------------------ */

static const uint32_t mod_ns[] = {1, 2, 3, 7, 10, 255, 256, 1000, 4096, 4097, 65535, 65536};
#define NNS (sizeof mod_ns / sizeof mod_ns[0])

enum { K_EXAMPLE, K_EMPTY, K_A, K_A_NUL_B, K_NUL, K_EMAIL, K_UTF8, K_BYTES, K_MIB, NKEYS };

static const char mib_unit[] = "0123456789abcdef";
#define MIB (1024 * 1024)

/*
 * Produced with Python 3, independently of libshard:
 *
 *   import hashlib
 *   def m(k, n): return int.from_bytes(hashlib.md5(k).digest(), 'big') % n
 *   NS = [1, 2, 3, 7, 10, 255, 256, 1000, 4096, 4097, 65535, 65536]
 *   keys = [b"1.2.3.4", b"", b"a", b"a\0b", b"\0", b"user@example.com",
 *           "h\u00e9llo".encode(), bytes(range(256)), b"0123456789abcdef" * 65536]
 *   for k in keys: print([m(k, n) for n in NS])
 *
 * Row order follows the enum above; columns follow mod_ns.
 */
static const struct {
    int key;
    uint32_t expect[NNS];
} mod_vectors[] = {
    {K_EXAMPLE, {0, 1, 2, 0, 9, 134, 1, 929, 1537, 253, 30479, 30209}},
    {K_EMPTY,   {0, 0, 0, 1, 6, 81, 126, 366, 638, 2070, 50316, 17022}},
    {K_A,       {0, 1, 1, 0, 7, 232, 97, 497, 1633, 3666, 21907, 9825}},
    {K_A_NUL_B, {0, 1, 1, 3, 5, 55, 155, 275, 155, 1891, 41365, 12443}},
    {K_NUL,     {0, 1, 0, 6, 7, 117, 113, 137, 3953, 3313, 43467, 40817}},
    {K_EMAIL,   {0, 1, 0, 2, 9, 24, 175, 239, 2479, 398, 8439, 18863}},
    {K_UTF8,    {0, 0, 2, 5, 8, 83, 80, 8, 2896, 2922, 16148, 6992}},
    {K_BYTES,   {0, 0, 0, 1, 6, 66, 240, 736, 2288, 389, 26331, 6384}},
    {K_MIB,     {0, 0, 2, 4, 2, 212, 152, 432, 3224, 1776, 10667, 3224}},
};

/* The bytes of test key k; *buf is freed by the caller (may be NULL). */
static const void *key_bytes(int k, size_t *len, unsigned char **buf)
{
    *buf = NULL;
    switch (k) {
    case K_EXAMPLE: *len = 7; return "1.2.3.4";
    case K_EMPTY: *len = 0; return "";
    case K_A: *len = 1; return "a";
    case K_A_NUL_B: *len = 3; return "a\0b";
    case K_NUL: *len = 1; return "\0";
    case K_EMAIL: *len = 16; return "user@example.com";
    case K_UTF8: *len = 6; return "h\xc3\xa9llo";
    case K_BYTES:
        *buf = malloc(256);
        ck_assert_ptr_nonnull(*buf);
        for (int i = 0; i < 256; i++)
            (*buf)[i] = (unsigned char)i;
        *len = 256;
        return *buf;
    case K_MIB:
        *buf = malloc(MIB);
        ck_assert_ptr_nonnull(*buf);
        for (size_t i = 0; i < MIB; i += 16)
            memcpy(*buf + i, mib_unit, 16);
        *len = MIB;
        return *buf;
    }
    ck_abort_msg("no key %d", k);
    return NULL;
}

static uint32_t mod_of(const void *key, size_t len, uint32_t n)
{
    uint32_t out = UINT32_MAX;
    int rc = shard_mod(key, len, n, &out);

    REQUIRE(rc == SHARD_OK, "shard_mod(len %zu, %u) = %d: %s", len, n, rc, shard_errmsg());
    REQUIRE(out < n, "shard_mod(len %zu, %u) gave %u", len, n, out);
    return out;
}

START_TEST(mod_design_example)
{
    ck_assert_uint_eq(mod_of("1.2.3.4", 7, 4096), 1537);
}
END_TEST

START_TEST(mod_vectors_match_python)
{
    for (size_t v = 0; v < sizeof mod_vectors / sizeof mod_vectors[0]; v++) {
        unsigned char *buf;
        size_t len;
        const void *key = key_bytes(mod_vectors[v].key, &len, &buf);

        for (size_t j = 0; j < NNS; j++) {
            uint32_t got = mod_of(key, len, mod_ns[j]);
            ck_assert_msg(got == mod_vectors[v].expect[j],
                          "key #%d (len %zu) mod %u: got %u, Python says %u",
                          mod_vectors[v].key, len, mod_ns[j], got,
                          mod_vectors[v].expect[j]);
        }
        free(buf);
    }
}
END_TEST

/* The library's batches (lookup keys, lib/legacy.c) reuse one digest
 * context over many keys (shard__mod_with): every Python vector, twice
 * over in one context (a context that kept state from the key before
 * would differ), and with no context at all (its allocation failed). */
typedef struct evp_md_ctx_st shard_md5;
shard_md5 *shard__md5_new(void);
void shard__md5_free(shard_md5 *m);
int shard__mod_with(shard_md5 *m, const void *key, size_t len, uint32_t nshards,
                    uint32_t *shard);

START_TEST(mod_reused_context_matches_python)
{
    shard_md5 *md = shard__md5_new();

    ck_assert_ptr_nonnull(md);
    for (int round = 0; round < 3; round++)
        for (size_t v = 0; v < sizeof mod_vectors / sizeof mod_vectors[0]; v++) {
            unsigned char *buf = NULL;
            size_t len;
            const void *key = key_bytes(mod_vectors[v].key, &len, &buf);

            for (size_t j = 0; j < NNS; j++) {
                uint32_t got = UINT32_MAX;
                int rc = shard__mod_with(round < 2 ? md : NULL, key, len, mod_ns[j], &got);
                ck_assert_msg(rc == SHARD_OK && got == mod_vectors[v].expect[j],
                              "round %d, key #%d (len %zu) mod %u: rc %d, got %u, Python "
                              "says %u", round, mod_vectors[v].key, len, mod_ns[j], rc, got,
                              mod_vectors[v].expect[j]);
            }
            free(buf);
        }
    shard__md5_free(md);
}
END_TEST

START_TEST(mod_empty_and_nul_keys)
{
    ck_assert_int_eq(mod_vectors[K_EMPTY].key, K_EMPTY);
    ck_assert_int_eq(mod_vectors[K_A].key, K_A);
    /* An empty key is allowed, with or without a pointer. */
    for (size_t j = 0; j < NNS; j++) {
        ck_assert_uint_eq(mod_of(NULL, 0, mod_ns[j]), mod_vectors[K_EMPTY].expect[j]);
        ck_assert_uint_eq(mod_of("ignored", 0, mod_ns[j]), mod_vectors[K_EMPTY].expect[j]);
    }
    /* NUL bytes are key bytes: the length decides, not the first NUL. */
    ck_assert_uint_ne(mod_of("a\0b", 3, 65536), mod_of("a", 1, 65536));
    ck_assert_uint_eq(mod_of("a\0b", 1, 65536), mod_vectors[K_A].expect[NNS - 1]);
    ck_assert_uint_ne(mod_of("\0", 1, 65536), mod_of(NULL, 0, 65536));
}
END_TEST

static void expect_mod_bad(const void *key, size_t len, uint32_t n, uint32_t *out)
{
    uint32_t before = out ? *out : 0;

    prime_errmsg();
    ck_assert_int_eq(shard_mod(key, len, n, out), SHARD_EINVAL);
    if (out)
        ck_assert_uint_eq(*out, before);
    fresh_errmsg();
}

START_TEST(mod_rejects)
{
    uint32_t out = 12345;

    expect_mod_bad("k", 1, 0, &out);
    expect_mod_bad("k", 1, 65537, &out);
    expect_mod_bad("k", 1, UINT32_MAX, &out);
    expect_mod_bad(NULL, 1, 16, &out);
    expect_mod_bad(NULL, SIZE_MAX, 16, &out);
    expect_mod_bad("k", 1, 16, NULL);
    /* The bounds themselves are fine. */
    ck_assert_uint_eq(mod_of("k", 1, 1), 0);
    mod_of("k", 1, 65536);
}
END_TEST

static void md5(const void *key, size_t len, unsigned char digest[16])
{
    unsigned int n = 0;
    REQUIRE(EVP_Digest(key, len, digest, &n, EVP_md5(), NULL) == 1 && n == 16,
            "EVP_Digest(md5) failed");
}

/*
 * Over many random keys: for N = 2^k the shard is the low k bits of the
 * digest's last bytes, and for any N it is the digest as a 128-bit
 * big-endian integer mod N (computed here with a 128-bit integer).
 */
START_TEST(mod_property)
{
    __extension__ typedef unsigned __int128 u128;
    uint64_t state = 4096;
    unsigned char key[200], d[16];

    for (int i = 0; i < 20000; i++) {
        size_t len = (size_t)(splitmix64(&state) % sizeof key);
        uint32_t tail, n;
        u128 whole = 0;

        for (size_t b = 0; b < len; b++)
            key[b] = (unsigned char)splitmix64(&state);
        md5(key, len, d);
        tail = ((uint32_t)d[12] << 24) | ((uint32_t)d[13] << 16) |
               ((uint32_t)d[14] << 8) | d[15];
        for (unsigned k = 0; k <= 16; k++) {
            n = UINT32_C(1) << k;
            REQUIRE(mod_of(key, len, n) == (tail & (n - 1)),
                    "key %d (len %zu) mod 2^%u: %u, digest's low bits say %u", i, len,
                    k, mod_of(key, len, n), tail & (n - 1));
        }
        for (int b = 0; b < 16; b++)
            whole = (whole << 8) | d[b];
        n = 1 + (uint32_t)(splitmix64(&state) % 65536);
        REQUIRE(mod_of(key, len, n) == (uint32_t)(whole % n),
                "key %d (len %zu) mod %u: %u, 128-bit arithmetic says %u", i, len, n,
                mod_of(key, len, n), (uint32_t)(whole % n));
    }
}
END_TEST

/* ------------------------------------------------------------------ */
/* Error codes and version                                             */
/* ------------------------------------------------------------------ */

START_TEST(strerror_codes)
{
    const char *desc[20];
    const char *fallback = shard_strerror(-1000);
    const int unknown[] = {1, 5, -20, -1000, INT_MIN, INT_MAX};

    ck_assert_ptr_nonnull(fallback);
    ck_assert_msg(fallback[0] != '\0', "empty fallback");
    for (int i = 0; i < 20; i++) {
        int code = -i; /* SHARD_OK .. SHARD_EINTERNAL */
        desc[i] = shard_strerror(code);
        ck_assert_ptr_nonnull(desc[i]);
        ck_assert_msg(desc[i][0] != '\0', "code %d has an empty description", code);
        ck_assert_msg(strcmp(desc[i], fallback) != 0,
                      "code %d has the unknown-code description", code);
        for (int j = 0; j < i; j++)
            ck_assert_msg(strcmp(desc[i], desc[j]) != 0,
                          "codes %d and %d share the description \"%s\"", -i, -j,
                          desc[i]);
    }
    ck_assert_int_eq(SHARD_OK, 0);
    ck_assert_int_eq(SHARD_EINTERNAL, -19);
    for (size_t u = 0; u < sizeof unknown / sizeof unknown[0]; u++) {
        const char *s = shard_strerror(unknown[u]);
        ck_assert_ptr_nonnull(s);
        ck_assert_msg(s[0] != '\0', "code %d: empty description", unknown[u]);
        for (int i = 0; i < 20; i++)
            ck_assert_msg(strcmp(s, desc[i]) != 0,
                          "unknown code %d described as code %d", unknown[u], -i);
    }
}
END_TEST

START_TEST(version_matches_header)
{
    char expect[32];

    ck_assert_str_eq(shard_version(), SHARD_VERSION_STRING);
    ck_assert_uint_eq(shard_version_num(), SHARD_VERSION_NUM);
    snprintf(expect, sizeof expect, "%d.%d.%d", SHARD_VERSION_MAJOR,
             SHARD_VERSION_MINOR, SHARD_VERSION_PATCH);
    ck_assert_str_eq(SHARD_VERSION_STRING, expect);
    ck_assert_uint_eq(SHARD_VERSION_NUM, ((unsigned)SHARD_VERSION_MAJOR << 16) |
                                             ((unsigned)SHARD_VERSION_MINOR << 8) |
                                             (unsigned)SHARD_VERSION_PATCH);
}
END_TEST

/* ------------------------------------------------------------------ */
/* shard_errmsg is per thread                                          */
/* ------------------------------------------------------------------ */

#define ROUNDS 20000

static pthread_barrier_t start_line;

typedef struct worker {
    int which;       /* 0: fails in shard_id_make, 1: in shard_id_parse */
    int fresh_empty; /* errmsg was "" before this thread failed */
    int wrong;       /* rounds that read another thread's message */
    char last[256];
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    char text[32], want[32];
    uint64_t id;

    w->fresh_empty = shard_errmsg()[0] == '\0';
    pthread_barrier_wait(&start_line);
    for (int i = 0; i < ROUNDS; i++) {
        if (w->which == 0) {
            unsigned shard = 70000u + (unsigned)i;
            snprintf(want, sizeof want, "%u", shard);
            shard_id_make(shard, 1, 1, &id);
        } else {
            snprintf(text, sizeof text, "zz%d", i);
            snprintf(want, sizeof want, "'zz%d'", i);
            shard_id_parse(text, &id);
        }
        if (!strstr(shard_errmsg(), want))
            w->wrong++;
    }
    snprintf(w->last, sizeof w->last, "%s", shard_errmsg());
    return NULL;
}

START_TEST(errmsg_thread_local)
{
    pthread_t t[2];
    worker w[2];
    char mine[256];

    /* The main thread's own message must survive the workers. */
    ck_assert_int_eq(shard_id_make(0, 0, 1, NULL), SHARD_EINVAL);
    ck_assert_int_eq(shard_id_make(1, 1, LOCAL_LIMIT, &(uint64_t){0}), SHARD_EINVAL);
    snprintf(mine, sizeof mine, "%s", shard_errmsg());
    ck_assert_ptr_nonnull(strstr(mine, "68719476736"));

    ck_assert_int_eq(pthread_barrier_init(&start_line, NULL, 2), 0);
    for (int i = 0; i < 2; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].which = i;
        ck_assert_int_eq(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    pthread_barrier_destroy(&start_line);

    for (int i = 0; i < 2; i++) {
        ck_assert_msg(w[i].fresh_empty, "thread %d did not start with an empty message", i);
        ck_assert_msg(w[i].wrong == 0, "thread %d read a foreign message %d times",
                      i, w[i].wrong);
    }
    ck_assert_ptr_nonnull(strstr(w[0].last, "shard"));
    ck_assert_ptr_nonnull(strstr(w[0].last, "89999"));
    ck_assert_ptr_nonnull(strstr(w[1].last, "'zz19999'"));
    ck_assert_str_eq(shard_errmsg(), mine);
}
END_TEST

static Suite *id_suite(void)
{
    Suite *s = suite_create("id");

    tcase_set_timeout(tcase_of(s, "id", TESTS(make_bounds, make_null_out, make_bit_layout,
                                              make_round_trip, valid_rules, parse_valid,
                                              parse_rejects)),
                      60);
    tcase_set_timeout(tcase_of(s, "modshard", TESTS(mod_design_example, mod_vectors_match_python,
                                                    mod_reused_context_matches_python,
                                                    mod_empty_and_nul_keys, mod_rejects,
                                                    mod_property)),
                      60);
    tcase_set_timeout(tcase_of(s, "errors", TESTS(strerror_codes, version_matches_header,
                                                  errmsg_thread_local)),
                      60);
    return s;
}

int main(void)
{
    return run_suite(id_suite(), CK_FORK_GETENV) ? EXIT_FAILURE : EXIT_SUCCESS;
}
