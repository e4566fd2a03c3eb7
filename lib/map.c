/*
 * The shard map: parse, validate, look up. A map that breaks any rule is
 * rejected whole, with a message naming the offending entry.
 */
#include "map.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A map file larger than this is refused (a power of two times 8 KiB). */
#define MAP_FILE_MAX (64 << 20)

#define BAD(...) shard__fail(SHARD_EMAP, "shard map: " __VA_ARGS__)

static const char *const top_keys[] = {
    "version", "open_shards", "database_format", "credentials", "objects",
    "mappings", "pairs", "id_shards", "mod_shards", "legacy", "lease_ms", "lease_max_ms", "lease_writes",
    "moving", NULL};
static const char *const cred_keys[] = {"user", "password_env", "tls", NULL};
static const char *const tls_keys[] = {"ca", "cert", "key", "verify", NULL};
static const char *const pair_keys[] = {"master", "standby", NULL};
static const char *const range_keys[] = {"range", "pair", NULL};
static const char *const mapping_keys[] = {"reverse", NULL};
static const char *const mod_keys[] = {"count", "database_format", "tables",
                                       "ranges", NULL};
static const char *const legacy_keys[] = {"table", NULL};

void map_json_text_free(void *p)
{
    json_malloc_t m;
    json_free_t f;

    if (!p)
        return;
    json_get_alloc_funcs(&m, &f);
    f(p);
}

static int check_keys(json_t *obj, const char *const *allowed, const char *where)
{
    const char *key;
    json_t *v;

    json_object_foreach(obj, key, v) {
        bool ok = false;
        for (size_t i = 0; allowed[i] && !ok; i++)
            ok = strcmp(key, allowed[i]) == 0;
        if (!ok) {
            if (strcmp(key, "password") == 0)
                return BAD("%s.password: passwords never sit in the map; "
                           "name an environment variable in password_env",
                           where);
            return BAD("%s: unknown key \"%.64s\"", where, key);
        }
    }
    return SHARD_OK;
}

static int get_uint(json_t *obj, const char *key, const char *where,
                    unsigned long long min, unsigned long long max,
                    unsigned long long *out)
{
    json_t *v = json_object_get(obj, key);
    json_int_t n;

    if (!v)
        return BAD("%s.%s: missing", where, key);
    if (!json_is_integer(v))
        return BAD("%s.%s: must be an integer", where, key);
    n = json_integer_value(v);
    if (n < 0 || (unsigned long long)n < min || (unsigned long long)n > max)
        return BAD("%s.%s: %lld out of range (%llu..%llu)", where, key,
                   (long long)n, min, max);
    *out = (unsigned long long)n;
    return SHARD_OK;
}

/* An optional string member: *out is NULL when absent. */
static int get_str(json_t *obj, const char *key, const char *where, bool required,
                   const char **out)
{
    json_t *v = json_object_get(obj, key);

    *out = NULL;
    if (!v) {
        if (required)
            return BAD("%s.%s: missing", where, key);
        return SHARD_OK;
    }
    if (!json_is_string(v))
        return BAD("%s.%s: must be a string", where, key);
    if (json_string_length(v) != strlen(json_string_value(v)))
        return BAD("%s.%s: contains a NUL byte", where, key);
    *out = json_string_value(v);
    return SHARD_OK;
}

static int parse_dbfmt(const char *s, const char *where, shard_dbfmt *f)
{
    const char *pct = strchr(s, '%');
    const char *p;
    size_t plen;

    memset(f, 0, sizeof *f);
    if (!pct)
        return BAD("%s: \"%.64s\" has no %%d conversion", where, s);
    plen = (size_t)(pct - s);
    if (plen == 0 || plen >= sizeof f->prefix || !(s[0] >= 'a' && s[0] <= 'z'))
        return BAD("%s: \"%.64s\" must start with a letter a-z before %%", where, s);
    for (size_t i = 0; i < plen; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return BAD("%s: \"%.64s\" may only hold a-z, 0-9, _ and one %%d", where, s);
    memcpy(f->prefix, s, plen);
    p = pct + 1;
    if (*p == '0') {
        f->zero = true;
        p++;
    }
    while (*p >= '0' && *p <= '9') {
        f->width = f->width * 10 + (*p++ - '0');
        if (f->width > 20)
            return BAD("%s: \"%.64s\" has a field width over 20", where, s);
    }
    if (f->width && !f->zero)
        return BAD("%s: \"%.64s\": a field width needs the 0 flag (e.g. %%05d); "
                   "spaces cannot be in database names", where, s);
    if (*p++ != 'd')
        return BAD("%s: \"%.64s\" must use exactly one %%d conversion (e.g. db%%05d)",
                   where, s);
    if (strlen(p) >= sizeof f->suffix)
        return BAD("%s: \"%.64s\" is too long", where, s);
    for (const char *q = p; *q; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '_'))
            return BAD("%s: \"%.64s\" may only hold a-z, 0-9, _ and one %%d", where, s);
    strcpy(f->suffix, p);
    if (plen + strlen(p) + (f->width > 5 ? (size_t)f->width : 5) > 64)
        return BAD("%s: \"%.64s\" makes names longer than 64 characters", where, s);
    return SHARD_OK;
}

/* On every operation's path: digits by hand. Lengths were checked when the
 * format was parsed, so the name always fits. */
void shard__dbfmt_name(const shard_dbfmt *f, unsigned n, char *buf)
{
    char digits[12];
    int nd = 0;
    size_t len = strlen(f->prefix);

    do {
        digits[nd++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    memcpy(buf, f->prefix, len);
    for (int pad = f->width - nd; pad > 0; pad--)
        buf[len++] = '0'; /* a width always comes with the 0 flag */
    while (nd)
        buf[len++] = digits[--nd];
    strcpy(buf + len, f->suffix);
}

/* Does one of x, y extend the other by digits only, at the front (prefix)
 * or at the back (suffix)? */
static bool digit_extension(const char *x, const char *y, bool at_end)
{
    size_t lx = strlen(x), ly = strlen(y);
    const char *longer = lx >= ly ? x : y, *shorter = lx >= ly ? y : x;
    size_t d = (lx >= ly ? lx : ly) - (lx >= ly ? ly : lx);

    if (at_end ? strcmp(longer + d, shorter) != 0 : strncmp(longer, shorter, strlen(shorter)))
        return false;
    for (size_t i = 0; i < d; i++) {
        char c = at_end ? longer[i] : longer[strlen(shorter) + i];
        if (c < '0' || c > '9')
            return false;
    }
    return true;
}

/*
 * Could two formats name some shard alike (an ID database and a mod-shard
 * database sharing a name would be moved, and dropped, together)? A name is
 * prefix + digits + suffix, so only when the prefixes and the suffixes each
 * differ by digits alone: "db%05d" and "db0%04d" do; "db%05d" and
 * "modshard%05d" do not.
 */
static bool same_dbfmt(const shard_dbfmt *a, const shard_dbfmt *b)
{
    return digit_extension(a->prefix, b->prefix, false) &&
           digit_extension(a->suffix, b->suffix, true);
}

static int parse_endpoint(const char *s, const char *where, shard_endpoint *ep)
{
    const char *colon;
    char *end;
    unsigned long port;
    size_t hlen;

    memset(ep, 0, sizeof *ep);
    if (strlen(s) >= sizeof ep->text)
        return BAD("%s: address is too long", where);
    strcpy(ep->text, s);
    if (strncmp(s, "unix:", 5) == 0) {
        const char *path = s + 5;
        if (path[0] != '/')
            return BAD("%s: \"%.200s\": a unix socket path must be absolute "
                       "(unix:/path)", where, s);
        if (strlen(path) >= sizeof ep->socket)
            return BAD("%s: \"%.200s\": socket path longer than %zu bytes", where, s,
                       sizeof ep->socket - 1);
        strcpy(ep->socket, path);
        return SHARD_OK;
    }
    if (s[0] == '[') { /* [IPv6]:port */
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return BAD("%s: \"%.200s\" is not host:port, [ipv6]:port or unix:/path",
                       where, s);
        hlen = (size_t)(close - s - 1);
        if (hlen == 0 || hlen >= sizeof ep->host)
            return BAD("%s: \"%.200s\": bad IPv6 address", where, s);
        for (size_t i = 1; i <= hlen; i++)
            if (!strchr("0123456789abcdefABCDEF:.", s[i]))
                return BAD("%s: \"%.200s\": bad IPv6 address", where, s);
        memcpy(ep->host, s + 1, hlen);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || colon == s)
            return BAD("%s: \"%.200s\" is not host:port, [ipv6]:port or unix:/path",
                       where, s);
        hlen = (size_t)(colon - s);
        if (hlen >= sizeof ep->host)
            return BAD("%s: \"%.200s\": host name too long", where, s);
        for (size_t i = 0; i < hlen; i++) {
            char c = s[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_'))
                return BAD("%s: \"%.200s\": bad character in host name", where, s);
        }
        memcpy(ep->host, s, hlen);
    }
    if (!(colon[1] >= '0' && colon[1] <= '9'))
        return BAD("%s: \"%.200s\": port must be a number 1..65535", where, s);
    errno = 0;
    port = strtoul(colon + 1, &end, 10);
    if (errno || *end || port < 1 || port > 65535)
        return BAD("%s: \"%.200s\": port must be a number 1..65535", where, s);
    ep->port = (unsigned)port;
    return SHARD_OK;
}

static int parse_credentials(shard_map *m, json_t *c)
{
    json_t *tls;
    const char *env;
    int rc;

    if (!c)
        return BAD("credentials: missing");
    if (!json_is_object(c))
        return BAD("credentials: must be an object");
    if ((rc = check_keys(c, cred_keys, "credentials")) ||
        (rc = get_str(c, "user", "credentials", true, &m->user)) ||
        (rc = get_str(c, "password_env", "credentials", false, &env)))
        return rc;
    if (m->user[0] == '\0' || strlen(m->user) > 80)
        return BAD("credentials.user: must be 1..80 characters");
    if (env) {
        bool ok = env[0] && !(env[0] >= '0' && env[0] <= '9');
        for (const char *p = env; *p && ok; p++)
            ok = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
                 (*p >= '0' && *p <= '9') || *p == '_';
        if (!ok)
            return BAD("credentials.password_env: \"%.64s\" is not an environment "
                       "variable name", env);
    }
    m->password_env = env;
    tls = json_object_get(c, "tls");
    if (!tls)
        return SHARD_OK;
    if (!json_is_object(tls))
        return BAD("credentials.tls: must be an object");
    if ((rc = check_keys(tls, tls_keys, "credentials.tls")) ||
        (rc = get_str(tls, "ca", "credentials.tls", false, &m->tls.ca)) ||
        (rc = get_str(tls, "cert", "credentials.tls", false, &m->tls.cert)) ||
        (rc = get_str(tls, "key", "credentials.tls", false, &m->tls.key)))
        return rc;
    m->tls.enabled = true;
    m->tls.verify = true;
    if (json_object_get(tls, "verify")) {
        if (!json_is_boolean(json_object_get(tls, "verify")))
            return BAD("credentials.tls.verify: must be true or false");
        m->tls.verify = json_is_true(json_object_get(tls, "verify"));
    }
    if (!m->tls.cert != !m->tls.key)
        return BAD("credentials.tls: cert and key go together");
    if (m->tls.verify && !m->tls.ca)
        return BAD("credentials.tls: verify needs a ca (or set \"verify\": false)");
    return SHARD_OK;
}

/* Table names share one namespace per shard database. */
static int check_table_name(shard_map *m, const char *name, const char *where)
{
    /* Shorter than MySQL's 64 (see SHARD_TABLE_NAME_MAX). */
    if (!shard__ident_valid(name) || strlen(name) > SHARD_TABLE_NAME_MAX)
        return BAD("%s: \"%.64s\" is not a valid name ([a-z][a-z0-9_]*, at most %d)",
                   where, name, SHARD_TABLE_NAME_MAX);
    for (size_t i = 0; i < m->nobjects; i++)
        if (strcmp(m->objects[i].name, name) == 0)
            return BAD("%s: \"%s\" is already the name of an object type", where, name);
    for (size_t i = 0; i < m->nmappings; i++)
        if (strcmp(m->mappings[i].name, name) == 0 ||
            (m->mappings[i].reverse && strcmp(m->mappings[i].reverse, name) == 0))
            return BAD("%s: \"%s\" is already the name of a mapping", where, name);
    return SHARD_OK;
}

static int parse_objects(shard_map *m, json_t *o)
{
    const char *name;
    json_t *v;
    char where[100];
    int rc;

    if (!o)
        return BAD("objects: missing");
    if (!json_is_object(o))
        return BAD("objects: must be an object of name: type number");
    m->objects = shard__calloc(json_object_size(o), sizeof *m->objects);
    if (!m->objects)
        return shard__fail(SHARD_ENOMEM, "out of memory parsing the shard map");
    json_object_foreach(o, name, v) {
        json_int_t t;
        snprintf(where, sizeof where, "objects.%.64s", name);
        if ((rc = check_table_name(m, name, where)))
            return rc;
        if (!json_is_integer(v))
            return BAD("%s: type must be an integer", where);
        t = json_integer_value(v);
        if (t < 1 || t > SHARD_MAX_TYPE)
            return BAD("%s: type %lld out of range (1..1023)", where, (long long)t);
        if (m->type_names[t])
            return BAD("%s: type %lld is already used by \"%s\"", where, (long long)t,
                       m->type_names[t]);
        m->type_names[t] = name;
        m->objects[m->nobjects].name = name;
        m->objects[m->nobjects++].type = (unsigned)t;
    }
    return SHARD_OK;
}

static int parse_mappings(shard_map *m, json_t *o)
{
    const char *name;
    json_t *v;
    char where[100];
    int rc;

    if (!o)
        return SHARD_OK;
    if (!json_is_object(o))
        return BAD("mappings: must be an object of name: {\"reverse\": name}");
    m->mappings = shard__calloc(json_object_size(o), sizeof *m->mappings);
    if (!m->mappings)
        return shard__fail(SHARD_ENOMEM, "out of memory parsing the shard map");
    json_object_foreach(o, name, v) {
        const char *rev;
        snprintf(where, sizeof where, "mappings.%.64s", name);
        if ((rc = check_table_name(m, name, where)))
            return rc;
        if (!json_is_object(v))
            return BAD("%s: must be an object", where);
        if ((rc = check_keys(v, mapping_keys, where)) ||
            (rc = get_str(v, "reverse", where, false, &rev)))
            return rc;
        if (rev) {
            snprintf(where, sizeof where, "mappings.%.64s.reverse", name);
            if (strcmp(rev, name) == 0)
                return BAD("%s: a mapping cannot be its own reverse", where);
            if ((rc = check_table_name(m, rev, where)))
                return rc;
            if (json_object_get(o, rev))
                return BAD("%s: \"%s\" is already the name of a mapping", where, rev);
        }
        m->mappings[m->nmappings].name = name;
        m->mappings[m->nmappings++].reverse = rev;
    }
    return SHARD_OK;
}

static bool pair_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

static int parse_pairs(shard_map *m, json_t *o)
{
    const char *name;
    json_t *v;
    char where[100];
    int rc;

    if (!o)
        return BAD("pairs: missing");
    if (!json_is_object(o) || json_object_size(o) == 0)
        return BAD("pairs: must be a non-empty object of name: {master, standby}");
    m->pairs = shard__calloc(json_object_size(o), sizeof *m->pairs);
    if (!m->pairs)
        return shard__fail(SHARD_ENOMEM, "out of memory parsing the shard map");
    json_object_foreach(o, name, v) {
        shard_pairdef *p = &m->pairs[m->npairs];
        const char *master, *standby;
        snprintf(where, sizeof where, "pairs.%.64s", name);
        if (!pair_name_valid(name))
            return BAD("%s: pair names hold 1..64 of A-Z a-z 0-9 _ - .", where);
        if (!json_is_object(v))
            return BAD("%s: must be an object with master and standby", where);
        if ((rc = check_keys(v, pair_keys, where)) ||
            (rc = get_str(v, "master", where, true, &master)) ||
            (rc = get_str(v, "standby", where, false, &standby)))
            return rc;
        snprintf(where, sizeof where, "pairs.%.64s.master", name);
        if ((rc = parse_endpoint(master, where, &p->master)))
            return rc;
        if (standby) {
            snprintf(where, sizeof where, "pairs.%.64s.standby", name);
            if ((rc = parse_endpoint(standby, where, &p->standby)))
                return rc;
            if (strcmp(master, standby) == 0)
                return BAD("%s: same address as the master", where);
            p->has_standby = true;
        }
        p->name = name;
        m->npairs++;
    }
    return SHARD_OK;
}

static int cmp_range(const void *a, const void *b)
{
    const shard_rangedef *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/*
 * A list of {"range": [lo, hi], "pair": name}: each range within
 * [0, limit-1], sorted, no overlap, no gap, starting at 0.
 */
static int parse_ranges(shard_map *m, json_t *a, const char *where, unsigned limit,
                        shard_rangedef **out, size_t *nout)
{
    shard_rangedef *r;
    size_t n, i;
    json_t *e;
    char w[120];
    int rc;

    if (!a)
        return BAD("%s: missing", where);
    if (!json_is_array(a) || json_array_size(a) == 0)
        return BAD("%s: must be a non-empty array of {\"range\": [first, last], "
                   "\"pair\": name}", where);
    n = json_array_size(a);
    r = *out = shard__calloc(n, sizeof *r);
    if (!r)
        return shard__fail(SHARD_ENOMEM, "out of memory parsing the shard map");
    json_array_foreach(a, i, e) {
        json_t *rg;
        const char *pair;
        json_int_t lo, hi;
        long pi;
        snprintf(w, sizeof w, "%s[%zu]", where, i);
        if (!json_is_object(e))
            return BAD("%s: must be an object {\"range\": [first, last], \"pair\": name}", w);
        if ((rc = check_keys(e, range_keys, w)) ||
            (rc = get_str(e, "pair", w, true, &pair)))
            return rc;
        rg = json_object_get(e, "range");
        if (!rg)
            return BAD("%s.range: missing", w);
        if (!json_is_array(rg) || json_array_size(rg) != 2 ||
            !json_is_integer(json_array_get(rg, 0)) ||
            !json_is_integer(json_array_get(rg, 1)))
            return BAD("%s.range: must be [first, last], two integers", w);
        lo = json_integer_value(json_array_get(rg, 0));
        hi = json_integer_value(json_array_get(rg, 1));
        if (lo < 0 || hi < 0 || lo >= (json_int_t)limit || hi >= (json_int_t)limit)
            return BAD("%s.range: [%lld, %lld] outside 0..%u", w, (long long)lo,
                       (long long)hi, limit - 1);
        if (lo > hi)
            return BAD("%s.range: [%lld, %lld] is reversed (first > last)", w,
                       (long long)lo, (long long)hi);
        pi = shard__map_find_pair(m, pair);
        if (pi < 0)
            return BAD("%s.pair: unknown pair \"%.64s\"", w, pair);
        r[i].lo = (unsigned)lo;
        r[i].hi = (unsigned)hi;
        r[i].pair = (size_t)pi;
    }
    *nout = n;
    qsort(r, n, sizeof *r, cmp_range);
    if (r[0].lo != 0)
        return BAD("%s: shards 0..%u are not covered by any range", where, r[0].lo - 1);
    for (i = 1; i < n; i++) {
        if (r[i].lo <= r[i - 1].hi)
            return BAD("%s: range [%u, %u] overlaps range [%u, %u]", where, r[i].lo,
                       r[i].hi, r[i - 1].lo, r[i - 1].hi);
        if (r[i].lo != r[i - 1].hi + 1)
            return BAD("%s: shards %u..%u are not covered (gap between [%u, %u] and "
                       "[%u, %u])", where, r[i - 1].hi + 1, r[i].lo - 1, r[i - 1].lo,
                       r[i - 1].hi, r[i].lo, r[i].hi);
    }
    return SHARD_OK;
}

static int parse_mod(shard_map *m, json_t *o)
{
    unsigned long long count;
    const char *fmt;
    json_t *tables, *t;
    size_t i;
    int rc;

    if (!o)
        return SHARD_OK;
    if (!json_is_object(o))
        return BAD("mod_shards: must be an object");
    if ((rc = check_keys(o, mod_keys, "mod_shards")) ||
        (rc = get_uint(o, "count", "mod_shards", 1, SHARD_MAX_MOD_SHARDS, &count)) ||
        (rc = get_str(o, "database_format", "mod_shards", false, &fmt)) ||
        (rc = parse_dbfmt(fmt ? fmt : "modshard%05d", "mod_shards.database_format",
                          &m->mod_dbfmt)))
        return rc;
    if (same_dbfmt(&m->mod_dbfmt, &m->dbfmt))
        return BAD("mod_shards.database_format: names the same databases as "
                   "database_format");
    m->mod_count = (uint32_t)count;
    tables = json_object_get(o, "tables");
    if (!tables)
        return BAD("mod_shards.tables: missing");
    if (!json_is_array(tables))
        return BAD("mod_shards.tables: must be an array of table names");
    m->mod_tables = shard__calloc(json_array_size(tables), sizeof *m->mod_tables);
    if (!m->mod_tables)
        return shard__fail(SHARD_ENOMEM, "out of memory parsing the shard map");
    json_array_foreach(tables, i, t) {
        const char *name = json_string_value(t);
        if (!name || !shard__ident_valid(name))
            return BAD("mod_shards.tables[%zu]: not a valid name ([a-z][a-z0-9_]*, "
                       "at most 64)", i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(m->mod_tables[j], name) == 0)
                return BAD("mod_shards.tables[%zu]: \"%s\" is listed twice", i, name);
        m->mod_tables[m->nmod_tables++] = name;
    }
    if ((rc = parse_ranges(m, json_object_get(o, "ranges"), "mod_shards.ranges",
                           m->mod_count, &m->mod_ranges, &m->nmod_ranges)))
        return rc;
    if (m->mod_ranges[m->nmod_ranges - 1].hi != m->mod_count - 1)
        return BAD("mod_shards.ranges: mod shards %u..%u are not covered",
                   m->mod_ranges[m->nmod_ranges - 1].hi + 1, m->mod_count - 1);
    return SHARD_OK;
}

/*
 * "legacy": {"pins": {}, "board_has_pins": {"table": "t"}}: one entry per
 * object type whose legacy ids resolve through a lookup table, or per
 * mapping whose imported join rows are recorded in one. The table (default
 * legacy_NAME) must be a key-value table of mod_shards.tables.
 */
static int parse_legacy(shard_map *m, json_t *o)
{
    const char *name;
    json_t *v;
    char where[100];
    int rc;

    if (!o)
        return SHARD_OK;
    if (!json_is_object(o))
        return BAD("legacy: must be an object of name: {options} ({} for the defaults)");
    m->legacy = shard__calloc(json_object_size(o) ? json_object_size(o) : 1, sizeof *m->legacy);
    if (!m->legacy)
        return shard__fail(SHARD_ENOMEM, "out of memory parsing the shard map");
    json_object_foreach(o, name, v) {
        shard_legacydef *d = &m->legacy[m->nlegacy];
        const shard_mapdef *md = NULL;
        const char *table;
        unsigned type = 0;

        snprintf(where, sizeof where, "legacy.%.64s", name);
        for (size_t i = 0; i < m->nobjects; i++)
            if (strcmp(m->objects[i].name, name) == 0)
                type = m->objects[i].type;
        if (!type) {
            for (size_t i = 0; i < m->nmappings && !md; i++) {
                if (m->mappings[i].reverse && strcmp(m->mappings[i].reverse, name) == 0)
                    return BAD("%s: \"%s\" is the reverse of mapping \"%s\": name \"%s\"",
                               where, name, m->mappings[i].name, m->mappings[i].name);
                if (strcmp(m->mappings[i].name, name) == 0)
                    md = &m->mappings[i];
            }
        }
        if (!type && !md)
            return BAD("%s: no object type or mapping named \"%.64s\" in objects or "
                       "mappings", where, name);
        if (!json_is_object(v))
            return BAD("%s: must be an object ({} for the defaults)", where);
        if ((rc = check_keys(v, legacy_keys, where)) ||
            (rc = get_str(v, "table", where, false, &table)))
            return rc;
        if (table && (!shard__ident_valid(table) || strlen(table) >= sizeof d->table))
            return BAD("%s.table: \"%.64s\" is not a valid name ([a-z][a-z0-9_]*, at most "
                       "64)", where, table);
        if (!table && strlen(name) + 7 >= sizeof d->table)
            return BAD("%s: legacy_%s is longer than 64 characters: name a shorter "
                       "\"table\"", where, name);
        snprintf(d->table, sizeof d->table, "%s%s", table ? "" : "legacy_",
                 table ? table : name);
        if (!shard__map_has_mod_table(m, d->table))
            return BAD("%s: its lookup table \"%s\" is not in mod_shards.tables: add it "
                       "there and run shardctl schema apply", where, d->table);
        for (size_t i = 0; i < m->nlegacy; i++)
            if (strcmp(m->legacy[i].table, d->table) == 0)
                return BAD("%s: table \"%s\" is already the lookup of legacy.%s", where,
                           d->table, m->legacy[i].name);
        d->name = name;
        d->type = type;
        m->nlegacy++;
    }
    return SHARD_OK;
}

/* An optional unsigned integer member: *out keeps its value when absent. */
static int get_uint_opt(json_t *obj, const char *key, const char *where,
                        unsigned long long max, unsigned long long *out)
{
    return json_object_get(obj, key) ? get_uint(obj, key, where, 0, max, out) : SHARD_OK;
}

/* The lease (libshard-move(7), "The lease"): lease_ms, lease_max_ms, moving. */
static int parse_lease(shard_map *m, json_t *d)
{
    unsigned long long v = 0, max;
    json_t *a = json_object_get(d, "moving"), *r;
    size_t i;
    int rc;

    if ((rc = get_uint_opt(d, "lease_ms", "top level", SHARD_LEASE_MAX_MS, &v)))
        return rc;
    m->lease_ms = (unsigned)v;
    max = v;
    if ((rc = get_uint_opt(d, "lease_max_ms", "top level", SHARD_LEASE_MAX_MS, &max)))
        return rc;
    if (max < v)
        return BAD("lease_max_ms: %llu is below lease_ms (%llu): it must be at least the "
                   "longest lease a context may still hold", max, v);
    m->lease_max_ms = (unsigned)max;
    {
        json_t *w = json_object_get(d, "lease_writes");
        if (w && !json_is_boolean(w))
            return BAD("lease_writes: must be true or false");
        m->lease_writes = json_is_true(w);
    }
    if (!a)
        return SHARD_OK;
    if (!json_is_array(a))
        return BAD("moving: must be an array of [first, last] shard ranges");
    if (!(m->moving = shard__calloc(json_array_size(a) + 1, sizeof *m->moving)))
        return shard__fail(SHARD_ENOMEM, "out of memory parsing the shard map");
    json_array_foreach(a, i, r) {
        json_t *lo = json_array_get(r, 0), *hi = json_array_get(r, 1);
        if (!json_is_array(r) || json_array_size(r) != 2 || !json_is_integer(lo) ||
            !json_is_integer(hi) || json_integer_value(lo) < 0 ||
            json_integer_value(hi) < json_integer_value(lo) ||
            json_integer_value(hi) > SHARD_MAX_SHARD)
            return BAD("moving[%zu]: must be [first, last] with 0 <= first <= last <= %u", i,
                       SHARD_MAX_SHARD);
        m->moving[m->nmoving].lo = (unsigned)json_integer_value(lo);
        m->moving[m->nmoving++].hi = (unsigned)json_integer_value(hi);
    }
    return SHARD_OK;
}

bool map_shard_moving(const shard_map *map, unsigned shard)
{
    for (size_t i = 0; i < map->nmoving; i++)
        if (shard >= map->moving[i].lo && shard <= map->moving[i].hi)
            return true;
    return false;
}

static void map_destroy(shard_map *m)
{
    free(m->moving);
    free(m->objects);
    free(m->mappings);
    free(m->pairs);
    free(m->ranges);
    free(m->mod_tables);
    free(m->mod_ranges);
    free(m->legacy);
    json_decref(m->doc);
    free(m);
}

static int build(shard_map *m)
{
    json_t *d = m->doc;
    unsigned long long v;
    const char *fmt;
    int rc;

    if (!json_is_object(d))
        return BAD("the document must be a JSON object");
    if ((rc = check_keys(d, top_keys, "top level")))
        return rc;
    if ((rc = get_uint(d, "version", "top level", 1, INT64_MAX, &v)))
        return rc;
    m->version = v;
    if ((rc = get_uint(d, "open_shards", "top level", 1, SHARD_MAX_SHARD + 1, &v)))
        return rc;
    m->open_shards = (unsigned)v;
    if ((rc = get_str(d, "database_format", "top level", false, &fmt)) ||
        (rc = parse_dbfmt(fmt ? fmt : "db%05d", "database_format", &m->dbfmt)) ||
        (rc = parse_credentials(m, json_object_get(d, "credentials"))) ||
        (rc = parse_objects(m, json_object_get(d, "objects"))) ||
        (rc = parse_mappings(m, json_object_get(d, "mappings"))) ||
        (rc = parse_pairs(m, json_object_get(d, "pairs"))) ||
        (rc = parse_ranges(m, json_object_get(d, "id_shards"), "id_shards",
                           SHARD_MAX_SHARD + 1, &m->ranges, &m->nranges)))
        return rc;
    if (m->ranges[m->nranges - 1].hi + 1 < m->open_shards)
        return BAD("id_shards: open shards %u..%u are not covered by any range",
                   m->ranges[m->nranges - 1].hi + 1, m->open_shards - 1);
    if ((rc = parse_mod(m, json_object_get(d, "mod_shards"))) || (rc = parse_lease(m, d)))
        return rc;
    return parse_legacy(m, json_object_get(d, "legacy"));
}

int shard_map_parse(shard_map **out, const char *json, size_t len)
{
    json_error_t jerr;
    shard_map *m;
    int rc;

    memset(&jerr, 0, sizeof jerr); /* jansson leaves it unset on early failures */
    if (!out || (!json && len))
        return shard__fail(SHARD_EINVAL, "shard_map_parse: NULL argument");
    m = shard__calloc(1, sizeof *m);
    if (!m)
        return shard__fail(SHARD_ENOMEM, "out of memory parsing the shard map");
    atomic_init(&m->refs, 1);
    m->doc = json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!m->doc) {
        free(m);
        /* jansson reports a failed allocation either by code or, early in
         * parsing, as an error with no text at all. */
        if (json_error_code(&jerr) == json_error_out_of_memory || !jerr.text[0])
            return shard__fail(SHARD_ENOMEM, "out of memory parsing the shard map");
        /* jansson quotes the text "near" the error: it may be a secret
         * that was wrongly written into the map, so it is left out. */
        char *near = strstr(jerr.text, " near '");
        if (near)
            *near = '\0';
        return BAD("invalid JSON at line %d, column %d: %s", jerr.line, jerr.column,
                   jerr.text);
    }
    if ((rc = build(m))) {
        map_destroy(m);
        return rc;
    }
    *out = m;
    return SHARD_OK;
}

/*
 * Open a map file for reading, refusing anything but a regular file: a FIFO
 * or a device would block or never end. O_NONBLOCK keeps the open itself
 * from waiting for a FIFO's writer; fstat then judges what was opened.
 */
static int open_regular(const char *path, FILE **out)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC), flags;

    if (fd < 0)
        return shard__fail(SHARD_EIO, "shard map %s: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return shard__fail(SHARD_EIO, "shard map %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return shard__fail(SHARD_EIO, "shard map %s is not a regular file (it is %s)", path,
                          S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" :
                          S_ISSOCK(st.st_mode) ? "a socket" : S_ISCHR(st.st_mode) ?
                          "a character device" : S_ISBLK(st.st_mode) ? "a block device" :
                          "a special file");
    }
    /* Reads of a regular file never block: back to ordinary blocking I/O. */
    if ((flags = fcntl(fd, F_GETFL)) >= 0)
        fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    if (!(*out = fdopen(fd, "rb"))) {
        close(fd);
        return shard__fail(SHARD_ENOMEM, "shard map %s: %s", path, strerror(errno));
    }
    return 0;
}

int shard_map_load(shard_map **out, const char *path)
{
    FILE *f;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    int rc;

    if (!out || !path)
        return shard__fail(SHARD_EINVAL, "shard_map_load: NULL argument");
    if ((rc = open_regular(path, &f)))
        return rc;
    do {
        if (len == cap) {
            char *nb;
            if (cap >= MAP_FILE_MAX) {
                free(buf);
                fclose(f);
                return shard__fail(SHARD_EMAP, "shard map %s: larger than %d MiB", path,
                                  MAP_FILE_MAX >> 20);
            }
            nb = shard__realloc(buf, cap = cap ? cap * 2 : 8192);
            if (!nb) {
                free(buf);
                fclose(f);
                return shard__fail(SHARD_ENOMEM, "shard map %s: out of memory", path);
            }
            buf = nb;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return shard__fail(SHARD_EIO, "shard map %s: read error", path);
    }
    fclose(f);
    rc = shard_map_parse(out, buf, len);
    free(buf);
    if (rc)
        shard__fail_prefix(rc, "%s: ", path);
    return rc;
}

shard_map *shard__map_ref(shard_map *map)
{
    if (map)
        atomic_fetch_add(&map->refs, 1);
    return map;
}

void shard_map_free(shard_map *map)
{
    if (map && atomic_fetch_sub(&map->refs, 1) == 1)
        map_destroy(map);
}

uint64_t shard_map_version(const shard_map *map)
{
    return map ? map->version : 0;
}

unsigned shard_map_open_shards(const shard_map *map)
{
    return map ? map->open_shards : 0;
}

uint32_t shard_map_mod_count(const shard_map *map)
{
    return map ? map->mod_count : 0;
}

size_t shard_map_pair_count(const shard_map *map)
{
    return map ? map->npairs : 0;
}

const char *shard_map_pair_name(const shard_map *map, size_t i)
{
    return map && i < map->npairs ? map->pairs[i].name : NULL;
}

long shard__map_find_pair(const shard_map *map, const char *name)
{
    for (size_t i = 0; i < map->npairs; i++)
        if (strcmp(map->pairs[i].name, name) == 0)
            return (long)i;
    return -1;
}

static long range_lookup(const shard_rangedef *r, size_t n, unsigned x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x < r[mid].lo)
            hi = mid;
        else if (x > r[mid].hi)
            lo = mid + 1;
        else
            return (long)r[mid].pair;
    }
    return -1;
}

long shard__map_pair_index(const shard_map *map, unsigned shard)
{
    return range_lookup(map->ranges, map->nranges, shard);
}

long shard__map_mod_pair_index(const shard_map *map, uint32_t modshard)
{
    return range_lookup(map->mod_ranges, map->nmod_ranges, modshard);
}

int shard_map_pair_of(const shard_map *map, unsigned shard, const char **pair)
{
    long i;
    if (!map || !pair)
        return shard__fail(SHARD_EINVAL, "shard_map_pair_of: NULL argument");
    i = shard__map_pair_index(map, shard);
    if (i < 0)
        return shard__fail(SHARD_ENOSHARD, "shard %u is not in any id_shards range "
                          "of map version %llu", shard, (unsigned long long)map->version);
    *pair = map->pairs[i].name;
    return SHARD_OK;
}

int shard_map_mod_pair_of(const shard_map *map, uint32_t modshard, const char **pair)
{
    long i;
    if (!map || !pair)
        return shard__fail(SHARD_EINVAL, "shard_map_mod_pair_of: NULL argument");
    if (modshard >= map->mod_count)
        return shard__fail(SHARD_ENOSHARD, "mod shard %u is not below the mod shard "
                          "count %u", modshard, map->mod_count);
    i = shard__map_mod_pair_index(map, modshard);
    *pair = map->pairs[i].name;
    return SHARD_OK;
}

int shard_map_pair_addrs(const shard_map *map, const char *pair, const char **master,
                         const char **standby)
{
    long i;
    if (!map || !pair)
        return shard__fail(SHARD_EINVAL, "shard_map_pair_addrs: NULL argument");
    i = shard__map_find_pair(map, pair);
    if (i < 0)
        return shard__fail(SHARD_ENOTFOUND, "no pair named \"%.64s\" in the map", pair);
    if (master)
        *master = map->pairs[i].master.text;
    if (standby)
        *standby = map->pairs[i].has_standby ? map->pairs[i].standby.text : NULL;
    return SHARD_OK;
}

int shard_map_type_of(const shard_map *map, const char *name, unsigned *type)
{
    if (!map || !name || !type)
        return shard__fail(SHARD_EINVAL, "shard_map_type_of: NULL argument");
    for (size_t i = 0; i < map->nobjects; i++)
        if (strcmp(map->objects[i].name, name) == 0) {
            *type = map->objects[i].type;
            return SHARD_OK;
        }
    return shard__fail(SHARD_ENOTFOUND, "no object type named \"%.64s\" in the map", name);
}

int shard_map_type_name(const shard_map *map, unsigned type, const char **name)
{
    if (!map || !name)
        return shard__fail(SHARD_EINVAL, "shard_map_type_name: NULL argument");
    if (type < 1 || type > SHARD_MAX_TYPE || !map->type_names[type])
        return shard__fail(SHARD_ENOTFOUND, "type %u is not registered in the map", type);
    *name = map->type_names[type];
    return SHARD_OK;
}

const shard_mapdef *shard__map_find_mapping(const shard_map *map, const char *name)
{
    for (size_t i = 0; i < map->nmappings; i++)
        if (strcmp(map->mappings[i].name, name) == 0)
            return &map->mappings[i];
    return NULL;
}

bool shard__map_has_mod_table(const shard_map *map, const char *name)
{
    for (size_t i = 0; i < map->nmod_tables; i++)
        if (strcmp(map->mod_tables[i], name) == 0)
            return true;
    return false;
}

const shard_legacydef *map_legacy_of(const shard_map *map, const char *name)
{
    for (size_t i = 0; i < map->nlegacy; i++)
        if (strcmp(map->legacy[i].name, name) == 0)
            return &map->legacy[i];
    return NULL;
}

const shard_legacydef *map_legacy_of_type(const shard_map *map, unsigned type)
{
    for (size_t i = 0; type && i < map->nlegacy; i++)
        if (map->legacy[i].type == type)
            return &map->legacy[i];
    return NULL;
}

static int copy_name(const char *name, char *buf, size_t size)
{
    if (!buf || strlen(name) >= size)
        return shard__fail(SHARD_EINVAL, "buffer too small for database name %s", name);
    strcpy(buf, name);
    return SHARD_OK;
}

int shard_map_database(const shard_map *map, unsigned shard, char *buf, size_t size)
{
    char name[SHARD_DBNAME_MAX];
    if (!map)
        return shard__fail(SHARD_EINVAL, "shard_map_database: NULL map");
    if (shard > SHARD_MAX_SHARD)
        return shard__fail(SHARD_EINVAL, "shard %u out of range (0..65535)", shard);
    shard__dbfmt_name(&map->dbfmt, shard, name);
    return copy_name(name, buf, size);
}

int shard_map_mod_database(const shard_map *map, uint32_t modshard, char *buf,
                           size_t size)
{
    char name[SHARD_DBNAME_MAX];
    if (!map)
        return shard__fail(SHARD_EINVAL, "shard_map_mod_database: NULL map");
    if (modshard >= map->mod_count)
        return shard__fail(SHARD_ENOSHARD, "mod shard %u is not below the mod shard "
                          "count %u", modshard, map->mod_count);
    shard__dbfmt_name(&map->mod_dbfmt, modshard, name);
    return copy_name(name, buf, size);
}

int shard_map_to_json(const shard_map *map, char **json)
{
    char *s, *copy;
    if (!map || !json)
        return shard__fail(SHARD_EINVAL, "shard_map_to_json: NULL argument");
    s = json_dumps(map->doc, JSON_INDENT(2) | JSON_SORT_KEYS);
    copy = s ? shard__strdup(s) : NULL;
    map_json_text_free(s);
    if (!copy)
        return shard__fail(SHARD_ENOMEM, "out of memory writing the shard map");
    *json = copy;
    return SHARD_OK;
}

int shard_map_summary(const shard_map *map, char **text)
{
    char buf[512];
    size_t nrev = 0;
    int n;

    if (!map || !text)
        return shard__fail(SHARD_EINVAL, "shard_map_summary: NULL argument");
    for (size_t i = 0; i < map->nmappings; i++)
        nrev += map->mappings[i].reverse != NULL;
#define S(n) ((n) == 1 ? "" : "s")
    n = snprintf(buf, sizeof buf,
                 "map version %llu: %u open shard%s, ID shards 0..%u in %zu range%s on "
                 "%zu pair%s, %zu object type%s, %zu mapping%s (%zu with reverse), ",
                 (unsigned long long)map->version, map->open_shards, S(map->open_shards),
                 map->ranges[map->nranges - 1].hi, map->nranges, S(map->nranges),
                 map->npairs, S(map->npairs), map->nobjects, S(map->nobjects),
                 map->nmappings, S(map->nmappings), nrev);
    if (map->mod_count)
        snprintf(buf + n, sizeof buf - (size_t)n, "%u mod shard%s with %zu table%s",
                 map->mod_count, S(map->mod_count), map->nmod_tables, S(map->nmod_tables));
#undef S
    else
        snprintf(buf + n, sizeof buf - (size_t)n, "no mod shards");
    *text = shard__strdup(buf);
    return *text ? SHARD_OK : shard__fail(SHARD_ENOMEM, "out of memory");
}

/* Append {"range": [lo, hi], "pair": name} to a, merging with the last entry
 * when it continues it on the same pair. */
static int append_range(json_t *a, unsigned lo, unsigned hi, const char *pair)
{
    json_t *last = json_array_size(a) ? json_array_get(a, json_array_size(a) - 1) : NULL;

    if (last && strcmp(json_string_value(json_object_get(last, "pair")), pair) == 0 &&
        json_integer_value(json_array_get(json_object_get(last, "range"), 1)) + 1 == lo)
        return json_array_set_new(json_object_get(last, "range"), 1, json_integer(hi));
    return json_array_append_new(a, json_pack("{s:[i,i],s:s}", "range", (json_int_t)lo,
                                              (json_int_t)hi, "pair", pair));
}

int map_reassign(const shard_map *cur, unsigned first, unsigned last, const char *pair,
                 uint64_t version, shard_map **out)
{
    json_t *doc = json_deep_copy(cur->doc), *ranges = json_array();
    char *text = NULL;
    int rc = 0;

    if (!doc || !ranges) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory editing the shard map");
        goto out;
    }
    for (size_t i = 0; rc == 0 && i < cur->nranges; i++) {
        const shard_rangedef *r = &cur->ranges[i];
        const char *owner = cur->pairs[r->pair].name;
        if (r->hi < first || r->lo > last) {
            rc = append_range(ranges, r->lo, r->hi, owner);
            continue;
        }
        if (r->lo < first)
            rc = append_range(ranges, r->lo, first - 1, owner);
        if (rc == 0)
            rc = append_range(ranges, r->lo > first ? r->lo : first,
                              r->hi < last ? r->hi : last, pair);
        if (rc == 0 && r->hi > last)
            rc = append_range(ranges, last + 1, r->hi, owner);
    }
    if (rc || json_object_set(doc, "id_shards", ranges) ||
        json_object_set_new(doc, "version", json_integer((json_int_t)version)) ||
        !(text = json_dumps(doc, JSON_SORT_KEYS))) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory editing the shard map");
        goto out;
    }
    rc = shard_map_parse(out, text, strlen(text));
out:
    map_json_text_free(text);
    json_decref(ranges);
    json_decref(doc);
    return rc;
}

int map_mark_moving(const shard_map *cur, unsigned first, unsigned last, bool on,
                    uint64_t version, shard_map **out)
{
    json_t *doc = json_deep_copy(cur->doc), *moving = json_array();
    char *text = NULL;
    int rc = 0;

    if (!doc || !moving)
        goto oom;
    for (size_t i = 0; i < cur->nmoving; i++) {
        const shard_rangedef *r = &cur->moving[i];
        if (r->lo >= first && r->hi <= last)
            continue; /* this move's mark (or a stale one inside its range) */
        if (json_array_append_new(moving, json_pack("[I,I]", (json_int_t)r->lo,
                                                    (json_int_t)r->hi)))
            goto oom;
    }
    if (on && json_array_append_new(moving, json_pack("[I,I]", (json_int_t)first,
                                                      (json_int_t)last)))
        goto oom;
    if (!json_array_size(moving))
        json_object_del(doc, "moving"); /* absent when nothing moves (-1: it was) */
    else if (json_object_set(doc, "moving", moving))
        goto oom;
    if (json_object_set_new(doc, "version", json_integer((json_int_t)version)) ||
        !(text = json_dumps(doc, JSON_SORT_KEYS)))
        goto oom;
    rc = shard_map_parse(out, text, strlen(text));
    goto out;
oom:
    rc = shard__fail(SHARD_ENOMEM, "out of memory editing the shard map");
out:
    map_json_text_free(text);
    json_decref(moving);
    json_decref(doc);
    return rc;
}

int map_swap_roles(const shard_map *cur, const char *pair, uint64_t version, shard_map **out)
{
    json_t *doc = json_deep_copy(cur->doc), *p, *master, *standby;
    char *text = NULL;
    int rc;

    p = doc ? json_object_get(json_object_get(doc, "pairs"), pair) : NULL;
    master = p ? json_object_get(p, "master") : NULL;
    standby = p ? json_object_get(p, "standby") : NULL;
    if (!doc || !master || !standby) {
        json_decref(doc);
        return shard__fail(doc ? SHARD_EINVAL : SHARD_ENOMEM, "pair %.64s has no standby to "
                          "promote", pair);
    }
    json_incref(master);
    json_incref(standby);
    json_object_set_new(p, "master", standby);
    json_object_set_new(p, "standby", master);
    json_object_set_new(doc, "version", json_integer((json_int_t)version));
    text = json_dumps(doc, JSON_SORT_KEYS);
    rc = text ? shard_map_parse(out, text, strlen(text))
              : shard__fail(SHARD_ENOMEM, "out of memory editing the shard map");
    map_json_text_free(text);
    json_decref(doc);
    return rc;
}
