/* mod_shard(key, N) = MD5(key) as an unsigned 128-bit big-endian integer, mod N. */
#include "internal.h"

#include <openssl/err.h>
#include <openssl/evp.h>

#include <pthread.h>
#include <string.h>

/*
 * Why OpenSSL's MD5 failed, from its error queue (emptied, so no stale
 * entry misleads the client library's TLS code later). MD5 missing from
 * the loaded providers (a FIPS-only configuration) is "unsupported" with
 * no failed allocation; anything else, an empty queue included (the
 * digest context itself could not be allocated), is memory.
 */
static int digest_failed(void)
{
    bool nomem = false, unsupported = false;
    unsigned long e;

    while ((e = ERR_get_error()) != 0) {
        nomem |= ERR_GET_REASON(e) == ERR_GET_REASON(ERR_R_MALLOC_FAILURE);
#ifdef ERR_R_UNSUPPORTED
        unsupported |= ERR_GET_REASON(e) == ERR_GET_REASON(ERR_R_UNSUPPORTED);
#endif
    }
    if (unsupported && !nomem)
        return shard__fail(SHARD_EINTERNAL, "MD5 is not available from OpenSSL's providers");
    return shard__fail(SHARD_ENOMEM, "out of memory computing MD5");
}

/* MD5 fetched from the providers once: EVP_md5() looks it up (under a lock)
 * at every digest, a cost that a lookup of 1000 keys or an import's rows
 * pay per key. Where the fetch fails, EVP_md5() as before (and its error). */
static EVP_MD *md5_fetched;
static pthread_once_t md5_once = PTHREAD_ONCE_INIT;

static void md5_fetch(void)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    md5_fetched = EVP_MD_fetch(NULL, "MD5", NULL);
    ERR_clear_error();
#endif
}

#if OPENSSL_VERSION_NUMBER >= 0x30000000L
#define DIGEST_INIT(c, type) EVP_DigestInit_ex2((c), (type), NULL)
#else
#define DIGEST_INIT(c, type) EVP_DigestInit_ex((c), (type), NULL)
#endif

/* One digest on the given context (reused: no allocation per key) or, with
 * none, on one made for it. */
static int md5_on(EVP_MD_CTX *c, const void *data, size_t len, unsigned char out[16])
{
    unsigned int mdlen = 0;
    unsigned char md[EVP_MAX_MD_SIZE];
    const EVP_MD *type;

    pthread_once(&md5_once, md5_fetch);
    type = md5_fetched ? md5_fetched : EVP_md5();
    if (c ? !DIGEST_INIT(c, type) || !EVP_DigestUpdate(c, len ? data : "", len) ||
                !EVP_DigestFinal_ex(c, md, &mdlen)
          : !EVP_Digest(len ? data : "", len, md, &mdlen, type, NULL))
        return digest_failed();
    if (mdlen != 16)
        return shard__fail(SHARD_EINTERNAL, "MD5 gave %u bytes, not 16", mdlen);
    memcpy(out, md, 16);
    return 0;
}

int shard__md5(const void *data, size_t len, unsigned char out[16])
{
    return md5_on(NULL, data, len, out);
}

shard_md5 *shard__md5_new(void)
{
    shard_md5 *m = EVP_MD_CTX_new();

    if (!m)
        ERR_clear_error(); /* each digest makes its own (and reports its failure) */
    return m;
}

void shard__md5_free(shard_md5 *m)
{
    EVP_MD_CTX_free(m);
}

int shard__mod_with(shard_md5 *m, const void *key, size_t len, uint32_t nshards,
                    uint32_t *shard)
{
    unsigned char md[16];
    uint32_t r = 0;
    int rc;

    if (nshards < 1 || nshards > SHARD_MAX_MOD_SHARDS)
        return shard__fail(SHARD_EINVAL, "mod shard count %u out of range (1..65536)",
                          nshards);
    if ((rc = md5_on(m, key, len, md)))
        return rc;
    /* Horner's rule over the big-endian 32-bit words: r < 65536 keeps
     * r * 2^32 + word in 64 bits; four divisions, not sixteen. */
    for (unsigned i = 0; i < 16; i += 4) {
        uint64_t w = (uint64_t)md[i] << 24 | (uint64_t)md[i + 1] << 16 |
                     (uint64_t)md[i + 2] << 8 | md[i + 3];
        r = (uint32_t)((((uint64_t)r << 32) | w) % nshards);
    }
    *shard = r;
    return SHARD_OK;
}

int shard_mod(const void *key, size_t len, uint32_t nshards, uint32_t *shard)
{
    if (!shard)
        return shard__fail(SHARD_EINVAL, "shard_mod: shard output is NULL");
    if (!key && len > 0)
        return shard__fail(SHARD_EINVAL, "shard_mod: key is NULL but length is %zu", len);
    return shard__mod_with(NULL, key, len, nshards, shard);
}
