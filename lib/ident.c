/* Names that become SQL identifiers: validated, never quoted-and-hoped. */
#include "internal.h"

#include <string.h>

/* MySQL limits identifiers to 64 characters. */
#define IDENT_MAX 64

bool shard__ident_valid(const char *s)
{
    size_t n;

    if (!s || !(*s >= 'a' && *s <= 'z'))
        return false;
    n = strlen(s);
    if (n > IDENT_MAX)
        return false;
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return false;
    }
    return true;
}
