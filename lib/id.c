/* The 64-bit ID: 2 reserved bits | 16 bits shard | 10 bits type | 36 bits local. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>

#define SHARD_SHIFT 46
#define TYPE_SHIFT 36
#define RESERVED_MASK (UINT64_C(3) << 62)

int shard_id_make(unsigned shard, unsigned type, uint64_t local, uint64_t *id)
{
    if (!id)
        return shard__fail(SHARD_EINVAL, "shard_id_make: id output is NULL");
    if (shard > SHARD_MAX_SHARD)
        return shard__fail(SHARD_EINVAL, "shard %u out of range (0..65535)", shard);
    if (type < 1 || type > SHARD_MAX_TYPE)
        return shard__fail(SHARD_EINVAL, "type %u out of range (1..1023)", type);
    if (local < 1 || local > SHARD_MAX_LOCAL)
        return shard__fail(SHARD_EINVAL,
                          "local id %llu out of range (1..68719476735)",
                          (unsigned long long)local);
    *id = ((uint64_t)shard << SHARD_SHIFT) | ((uint64_t)type << TYPE_SHIFT) | local;
    return SHARD_OK;
}

unsigned shard_id_shard(uint64_t id)
{
    return (unsigned)((id >> SHARD_SHIFT) & SHARD_MAX_SHARD);
}

unsigned shard_id_type(uint64_t id)
{
    return (unsigned)((id >> TYPE_SHIFT) & SHARD_MAX_TYPE);
}

uint64_t shard_id_local(uint64_t id)
{
    return id & SHARD_MAX_LOCAL;
}

int shard_id_valid(uint64_t id)
{
    return (id & RESERVED_MASK) == 0 && shard_id_type(id) != 0 &&
           shard_id_local(id) != 0;
}

static int why_invalid(const char *text, uint64_t id)
{
    if (id & RESERVED_MASK)
        return shard__fail(SHARD_EINVAL, "invalid ID %s: reserved top bits are set", text);
    if (shard_id_type(id) == 0)
        return shard__fail(SHARD_EINVAL, "invalid ID %s: type is 0", text);
    return shard__fail(SHARD_EINVAL, "invalid ID %s: local id is 0", text);
}

int shard_id_parse(const char *text, uint64_t *id)
{
    char *end;
    unsigned long long v;

    if (!text || !id)
        return shard__fail(SHARD_EINVAL, "shard_id_parse: NULL argument");
    if (*text < '0' || *text > '9')
        return shard__fail(SHARD_EINVAL, "invalid ID '%.64s': not a decimal number", text);
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno == ERANGE)
        return shard__fail(SHARD_EINVAL, "invalid ID '%.64s': larger than 64 bits", text);
    if (*end != '\0')
        return shard__fail(SHARD_EINVAL, "invalid ID '%.64s': not a decimal number", text);
    if (!shard_id_valid(v))
        return why_invalid(text, v);
    *id = v;
    return SHARD_OK;
}
