/*
 * Fuzz the ID codec and the mod-shard hash.
 *
 *  - shard_id_parse() on the input as text agrees with a reference parser
 *    written here (decimal digits only, 64-bit, reserved bits zero, type
 *    and local non-zero);
 *  - make/decompose round trips on parts and on IDs taken from the input;
 *  - shard_mod() on the input bytes, N from its first three bytes, agrees
 *    with MD5 computed here through an EVP_MD_CTX (not the one-shot
 *    EVP_Digest the library uses) reduced as a native 128-bit integer
 *    (not by Horner's rule).
 */
#include "fuzz.h"

#include <libshard.h>
#include <openssl/evp.h>

/* 1 and *out when text is a valid ID, else 0. */
static int ref_parse(const char *text, uint64_t *out)
{
    uint64_t v = 0;

    if (!*text)
        return 0;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
            return 0; /* does not fit in 64 bits */
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v >> 62)                          /* reserved bits */
        return 0;
    if (((v >> 36) & 0x3ff) == 0)         /* type */
        return 0;
    if ((v & ((UINT64_C(1) << 36) - 1)) == 0) /* local */
        return 0;
    *out = v;
    return 1;
}

static void check_parse(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size);
    uint64_t want = 0, got = 0xdeadbeef;
    int ok, rc;

    if (!text)
        return;
    ok = ref_parse(text, &want);
    rc = shard_id_parse(text, &got);
    if (ok) {
        CHECK(rc == 0, "'%s' rejected: %s", text, shard_errmsg());
        CHECK(got == want, "'%s' parsed as %llu", text, (unsigned long long)got);
        CHECK(shard_id_valid(got), "parsed an invalid ID");
    } else {
        CHECK(rc == SHARD_EINVAL, "'%s' accepted (rc %d)", text, rc);
        CHECK(got == 0xdeadbeef, "output written on failure");
        CHECK(shard_errmsg()[0] != '\0', "no message");
    }
    free(text);
}

static void check_make(unsigned shard, unsigned type, uint64_t local)
{
    uint64_t id = 0x1234;
    int ok = shard <= SHARD_MAX_SHARD && type >= 1 && type <= SHARD_MAX_TYPE &&
             local >= 1 && local <= SHARD_MAX_LOCAL;
    int rc = shard_id_make(shard, type, local, &id);

    if (!ok) {
        CHECK(rc == SHARD_EINVAL && id == 0x1234, "make(%u, %u, %llu) accepted", shard,
              type, (unsigned long long)local);
        return;
    }
    CHECK(rc == 0, "make(%u, %u, %llu): %s", shard, type, (unsigned long long)local,
          shard_errmsg());
    CHECK(id == (uint64_t)shard * (UINT64_C(1) << 46) + (uint64_t)type * (UINT64_C(1) << 36) +
                    local, "make(%u, %u, %llu) = %llu", shard, type,
          (unsigned long long)local, (unsigned long long)id);
    CHECK(shard_id_valid(id), "made an invalid ID");
    CHECK(shard_id_shard(id) == shard && shard_id_type(id) == type &&
          shard_id_local(id) == local, "decompose(make(%u, %u, %llu))", shard, type,
          (unsigned long long)local);
    {
        char text[32];
        uint64_t back = 0;
        snprintf(text, sizeof text, "%llu", (unsigned long long)id);
        CHECK(shard_id_parse(text, &back) == 0 && back == id, "parse(%s)", text);
    }
}

static void check_decompose(uint64_t id)
{
    int valid = (id >> 62) == 0 && ((id >> 36) & 0x3ff) != 0 &&
                (id & ((UINT64_C(1) << 36) - 1)) != 0;
    uint64_t back = 0;

    CHECK(shard_id_valid(id) == valid, "valid(%llu)", (unsigned long long)id);
    CHECK(shard_id_shard(id) <= SHARD_MAX_SHARD && shard_id_type(id) <= SHARD_MAX_TYPE &&
          shard_id_local(id) <= SHARD_MAX_LOCAL, "parts of %llu", (unsigned long long)id);
    if (!valid)
        return;
    CHECK(shard_id_make(shard_id_shard(id), shard_id_type(id), shard_id_local(id),
                        &back) == 0 && back == id, "make(decompose(%llu))",
          (unsigned long long)id);
}

/* MD5 as a native unsigned 128-bit integer, mod n. */
static uint32_t ref_mod(const uint8_t *key, size_t len, uint32_t n)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    unsigned __int128 v = 0;

    CHECK(c && EVP_DigestInit_ex(c, EVP_md5(), NULL) &&
          EVP_DigestUpdate(c, key, len) && EVP_DigestFinal_ex(c, md, &mdlen) &&
          mdlen == 16, "reference MD5 failed");
    EVP_MD_CTX_free(c);
    for (int i = 0; i < 16; i++)
        v |= (unsigned __int128)md[i] << (8 * (15 - i));
    return (uint32_t)(v % n);
}

static void check_mod(const uint8_t *data, size_t size)
{
    fuzz_reader r = {data, size};
    /* 0..65537: both invalid counts and every valid one. */
    uint32_t n = (uint32_t)(fuzz_take(&r, 3) % (SHARD_MAX_MOD_SHARDS + 2));
    uint32_t got = 0xfffffff;
    int rc = shard_mod(r.left ? r.p : NULL, r.left, n, &got);

    if (n < 1 || n > SHARD_MAX_MOD_SHARDS) {
        CHECK(rc == SHARD_EINVAL && got == 0xfffffff, "N=%u accepted", n);
        return;
    }
    CHECK(rc == 0, "shard_mod(N=%u): %s", n, shard_errmsg());
    CHECK(got < n, "shard %u of %u", got, n);
    CHECK(got == ref_mod(r.p, r.left, n), "shard_mod(N=%u) = %u, reference %u", n, got,
          ref_mod(r.p, r.left, n));
    /* The same bytes give the same shard; a NULL key needs length 0. */
    CHECK(shard_mod(r.p, r.left, n, &got) == 0, "again");
    CHECK(shard_mod(NULL, 1, n, &got) == SHARD_EINVAL, "NULL key with a length");
    CHECK(shard_mod(r.p, r.left, n, NULL) == SHARD_EINVAL, "NULL output");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_reader r = {data, size};
    uint64_t a, b;

    check_parse(data, size);
    check_mod(data, size);
    /* Parts over and around their ranges, and IDs taken from the bytes. */
    a = fuzz_take(&r, 8);
    b = fuzz_take(&r, 8);
    check_make((unsigned)(a >> 47) /* 0..131071 */, (unsigned)((a >> 36) & 0x7ff),
               b >> 27 /* 0..2^37-1 */);
    check_make((unsigned)(a & 0xffff), (unsigned)(b % 1024), (b >> 10) & SHARD_MAX_LOCAL);
    check_decompose(a);
    check_decompose(b);
    check_decompose(a & ~(UINT64_C(3) << 62));
    return 0;
}
