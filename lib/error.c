/* Error codes, their descriptions, and the per-thread detailed message. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define ERRMSG_SIZE 1024

static _Thread_local char errmsg[ERRMSG_SIZE];

static const char *const descriptions[] = {
    [0] = "success",
    [1] = "invalid argument",
    [2] = "out of memory",
    [3] = "invalid shard map",
    [4] = "I/O error",
    [5] = "not found",
    [6] = "already exists",
    [7] = "cannot connect to server",
    [8] = "server error",
    [9] = "timed out",
    [10] = "shard moved",
    [11] = "conflicting concurrent change",
    [12] = "busy",
    [13] = "value too large",
    [14] = "shard not mapped",
    [15] = "verification failed",
    [16] = "permission denied by server",
    [17] = "TLS error",
    [18] = "partial failure",
    [19] = "internal error",
};

const char *shard_strerror(int code)
{
    const int n = (int)(sizeof descriptions / sizeof descriptions[0]);
    /* Compare before negating: -INT_MIN overflows. */
    if (code <= 0 && code > -n && descriptions[-code])
        return descriptions[-code];
    return "unknown error code";
}

const char *shard_errmsg(void)
{
    return errmsg;
}

void shard__clear_error(void)
{
    errmsg[0] = '\0';
}

int shard__vfail(int code, const char *fmt, va_list ap)
{
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    return code;
}

int shard__fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    shard__vfail(code, fmt, ap);
    va_end(ap);
    return code;
}

int shard__fail_prefix(int code, const char *fmt, ...)
{
    char prefix[256];
    size_t plen, olen;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    plen = strlen(prefix);
    olen = strnlen(errmsg, sizeof errmsg - 1);
    if (plen + olen >= sizeof errmsg)
        olen = sizeof errmsg - 1 - plen; /* keep the prefix, cut the tail */
    memmove(errmsg + plen, errmsg, olen);
    memcpy(errmsg, prefix, plen);
    errmsg[plen + olen] = '\0';
    return code;
}
