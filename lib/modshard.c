/* mod_shard(key, N) = MD5(key) as an unsigned 128-bit big-endian integer, mod N. */
#include "internal.h"

#include <openssl/err.h>
#include <openssl/evp.h>

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

int shard_mod(const void *key, size_t len, uint32_t nshards, uint32_t *shard)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    uint32_t r = 0;

    if (!shard)
        return shard__fail(SHARD_EINVAL, "shard_mod: shard output is NULL");
    if (nshards < 1 || nshards > SHARD_MAX_MOD_SHARDS)
        return shard__fail(SHARD_EINVAL, "mod shard count %u out of range (1..65536)",
                          nshards);
    if (!key && len > 0)
        return shard__fail(SHARD_EINVAL, "shard_mod: key is NULL but length is %zu", len);
    if (!EVP_Digest(len ? key : "", len, md, &mdlen, EVP_md5(), NULL))
        return digest_failed();
    if (mdlen != 16)
        return shard__fail(SHARD_EINTERNAL, "MD5 gave %u bytes, not 16", mdlen);
    /* Horner's rule over the big-endian bytes; r < 65536 keeps r*256+255 in 32 bits. */
    for (unsigned i = 0; i < mdlen; i++)
        r = (r * 256u + md[i]) % nshards;
    *shard = r;
    return SHARD_OK;
}
