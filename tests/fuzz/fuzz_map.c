/*
 * Fuzz the shard map parser. Any bytes: shard_map_parse() either rejects
 * them cleanly or gives a map whose every accessor agrees with the JSON
 * document read independently here (linear range scans against the
 * library's binary search, the database format used directly as a printf
 * format), whose canonical JSON parses to the same JSON again, and which
 * map_reassign() (the move's map edit) turns into another valid map.
 */
#include "fuzz.h"

#include <jansson.h>
#include <libshard.h>

#include "map.h" /* map_reassign: the edit a move publishes */

/* The pair named for `x` by a list of {"range": [lo, hi], "pair": p}, or NULL. */
static const char *scan_ranges(json_t *ranges, unsigned x)
{
    size_t i;
    json_t *e;

    json_array_foreach(ranges, i, e) {
        json_t *rg = json_object_get(e, "range");
        json_int_t lo = json_integer_value(json_array_get(rg, 0));
        json_int_t hi = json_integer_value(json_array_get(rg, 1));
        if ((json_int_t)x >= lo && (json_int_t)x <= hi)
            return json_string_value(json_object_get(e, "pair"));
    }
    return NULL;
}

static json_int_t max_hi(json_t *ranges)
{
    json_int_t m = -1;
    size_t i;
    json_t *e;

    json_array_foreach(ranges, i, e) {
        json_int_t hi = json_integer_value(json_array_get(json_object_get(e, "range"), 1));
        if (hi > m)
            m = hi;
    }
    return m;
}

static void check_pair_of(const shard_map *m, json_t *doc, unsigned shard)
{
    const char *pair = NULL;
    const char *want = shard <= SHARD_MAX_SHARD
                           ? scan_ranges(json_object_get(doc, "id_shards"), shard)
                           : NULL;
    int rc = shard_map_pair_of(m, shard, &pair);

    if (!want) {
        CHECK(rc == SHARD_ENOSHARD, "shard %u: rc %d, expected ENOSHARD", shard, rc);
        return;
    }
    CHECK(rc == 0, "shard %u: rc %d (%s)", shard, rc, shard_errmsg());
    CHECK(strcmp(pair, want) == 0, "shard %u: pair %s, expected %s", shard, pair, want);
}

static void check_mod_pair_of(const shard_map *m, json_t *doc, uint32_t modshard)
{
    const char *pair = NULL;
    json_t *mod = json_object_get(doc, "mod_shards");
    const char *want = NULL;
    int rc = shard_map_mod_pair_of(m, modshard, &pair);

    if (mod && modshard < (uint32_t)json_integer_value(json_object_get(mod, "count")))
        want = scan_ranges(json_object_get(mod, "ranges"), modshard);
    if (!want) {
        CHECK(rc == SHARD_ENOSHARD, "mod shard %u: rc %d", modshard, rc);
        return;
    }
    CHECK(rc == 0, "mod shard %u: rc %d (%s)", modshard, rc, shard_errmsg());
    CHECK(strcmp(pair, want) == 0, "mod shard %u: %s, expected %s", modshard, pair, want);
}

/* The database format is validated to be [a-z0-9_]* around one %0Nd: a
 * safe printf format, which gives the expected name independently. */
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static void check_database(const shard_map *m, const char *fmt, unsigned n, int mod)
{
    char want[128], got[SHARD_DBNAME_MAX + 8];
    int len = snprintf(want, sizeof want, fmt, (int)n);
    int rc;

    CHECK(len > 0 && len <= 64, "format %s: %d characters for %u", fmt, len, n);
    rc = mod ? shard_map_mod_database(m, n, got, sizeof got)
             : shard_map_database(m, n, got, sizeof got);
    CHECK(rc == 0, "database of %u: rc %d (%s)", n, rc, shard_errmsg());
    CHECK(strcmp(got, want) == 0, "database of %u: %s, expected %s", n, got, want);
    /* Exactly large enough works; one byte short is refused, buf untouched. */
    rc = mod ? shard_map_mod_database(m, n, got, (size_t)len + 1)
             : shard_map_database(m, n, got, (size_t)len + 1);
    CHECK(rc == 0 && strcmp(got, want) == 0, "database of %u in %d+1 bytes", n, len);
    rc = mod ? shard_map_mod_database(m, n, got, (size_t)len)
             : shard_map_database(m, n, got, (size_t)len);
    CHECK(rc == SHARD_EINVAL, "database of %u in %d bytes: rc %d", n, len, rc);
}

static void check_pairs(const shard_map *m, json_t *doc)
{
    json_t *pairs = json_object_get(doc, "pairs");
    size_t n = shard_map_pair_count(m);

    CHECK(n == json_object_size(pairs), "%zu pairs, document has %zu", n,
          json_object_size(pairs));
    CHECK(shard_map_pair_name(m, n) == NULL, "pair_name past the end");
    for (size_t i = 0; i < n; i++) {
        const char *name = shard_map_pair_name(m, i), *master = NULL, *standby = NULL;
        json_t *p;
        CHECK(name != NULL, "pair %zu has no name", i);
        p = json_object_get(pairs, name);
        CHECK(p != NULL, "pair %s is not in the document", name);
        CHECK(shard_map_pair_addrs(m, name, &master, &standby) == 0, "addrs of %s", name);
        CHECK(strcmp(master, json_string_value(json_object_get(p, "master"))) == 0,
              "master of %s", name);
        if (json_object_get(p, "standby"))
            CHECK(standby && strcmp(standby, json_string_value(
                                                 json_object_get(p, "standby"))) == 0,
                  "standby of %s", name);
        else
            CHECK(standby == NULL, "standby of %s", name);
        CHECK(shard_map_pair_addrs(m, name, NULL, NULL) == 0, "NULL outputs");
    }
    CHECK(shard_map_pair_addrs(m, "no such pair!", NULL, NULL) == SHARD_ENOTFOUND,
          "unknown pair found");
}

static void check_types(const shard_map *m, json_t *doc)
{
    json_t *objects = json_object_get(doc, "objects"), *v;
    const char *key, *name;
    size_t registered = 0;
    unsigned type;

    json_object_foreach(objects, key, v) {
        CHECK(shard_map_type_of(m, key, &type) == 0, "type_of %s", key);
        CHECK(type == (unsigned)json_integer_value(v), "type of %s: %u", key, type);
        CHECK(shard_map_type_name(m, type, &name) == 0 && strcmp(name, key) == 0,
              "type_name %u", type);
    }
    for (unsigned t = 0; t <= SHARD_MAX_TYPE + 1; t++)
        registered += shard_map_type_name(m, t, &name) == 0;
    CHECK(registered == json_object_size(objects), "%zu types registered, %zu in the "
          "document", registered, json_object_size(objects));
    CHECK(shard_map_type_of(m, "Not_A_Name", &type) == SHARD_ENOTFOUND, "bad name found");
}

/* The JSON text of a map parses to a map with the same JSON text. */
static void check_round_trip(const shard_map *m)
{
    char *text = NULL, *text2 = NULL, *sum = NULL;
    shard_map *m2 = NULL;
    int rc;

    CHECK(shard_map_to_json(m, &text) == 0, "to_json: %s", shard_errmsg());
    rc = shard_map_parse(&m2, text, strlen(text));
    CHECK(rc == 0, "canonical JSON rejected: %s\n%s", shard_errmsg(), text);
    CHECK(shard_map_to_json(m2, &text2) == 0, "to_json again");
    CHECK(strcmp(text, text2) == 0, "round trip changed the JSON:\n%s\n%s", text, text2);
    CHECK(shard_map_version(m2) == shard_map_version(m) &&
          shard_map_open_shards(m2) == shard_map_open_shards(m) &&
          shard_map_mod_count(m2) == shard_map_mod_count(m) &&
          shard_map_pair_count(m2) == shard_map_pair_count(m), "round trip changed the map");
    CHECK(shard_map_summary(m, &sum) == 0, "summary");
    CHECK(strncmp(sum, "map version ", 12) == 0, "summary: %s", sum);
    shard_free(sum);
    shard_free(text);
    shard_free(text2);
    shard_map_free(m2);
}

/* Reassigning first..last to a pair gives a valid map with those shards on it. */
static void check_reassign(const shard_map *m, json_t *doc, uint64_t h)
{
    json_int_t top = max_hi(json_object_get(doc, "id_shards"));
    unsigned a = (unsigned)(h % (uint64_t)(top + 1));
    unsigned b = (unsigned)((h >> 20) % (uint64_t)(top + 1));
    unsigned first = a < b ? a : b, last = a < b ? b : a;
    const char *target = shard_map_pair_name(m, (size_t)(h >> 40) % shard_map_pair_count(m));
    const unsigned probe[] = {0, first ? first - 1 : 0, first, last, last + 1,
                              (unsigned)top, (first + last) / 2};
    shard_map *m2 = NULL;
    int rc;

    if (shard_map_version(m) >= INT64_MAX)
        return;
    rc = map_reassign(m, first, last, target, shard_map_version(m) + 1, &m2);
    CHECK(rc == 0, "reassign %u..%u to %s: %s", first, last, target, shard_errmsg());
    CHECK(shard_map_version(m2) == shard_map_version(m) + 1, "reassigned version");
    for (size_t i = 0; i < sizeof probe / sizeof probe[0]; i++) {
        const char *p1 = NULL, *p2 = NULL;
        unsigned s = probe[i];
        int r1 = shard_map_pair_of(m, s, &p1), r2 = shard_map_pair_of(m2, s, &p2);
        CHECK(r1 == r2, "shard %u: %d before, %d after reassigning", s, r1, r2);
        if (r2 == 0 && s >= first && s <= last)
            CHECK(strcmp(p2, target) == 0, "shard %u on %s, not %s", s, p2, target);
        else if (r2 == 0)
            CHECK(strcmp(p1, p2) == 0, "shard %u moved from %s to %s", s, p1, p2);
    }
    shard_map_free(m2);
}

static uint64_t fnv1a(const uint8_t *data, size_t size)
{
    uint64_t h = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * UINT64_C(1099511628211);
    return h;
}

static void check_map(const shard_map *m, const uint8_t *data, size_t size)
{
    json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    json_t *mod;
    unsigned open = shard_map_open_shards(m);
    uint32_t modn = shard_map_mod_count(m);
    uint64_t h = fnv1a(data, size);
    const char *fmt;

    CHECK(doc != NULL, "the library accepted JSON that jansson rejects");
    mod = json_object_get(doc, "mod_shards");
    CHECK(shard_map_version(m) == (uint64_t)json_integer_value(json_object_get(doc, "version")),
          "version");
    CHECK(open == (unsigned)json_integer_value(json_object_get(doc, "open_shards")),
          "open_shards");
    CHECK(modn == (mod ? (uint32_t)json_integer_value(json_object_get(mod, "count")) : 0),
          "mod count");
    check_pairs(m, doc);
    check_types(m, doc);

    /* Every open shard is served; edges and pseudo-random shards agree
     * with a linear scan of the ranges. */
    CHECK(open >= 1 && open <= SHARD_MAX_SHARD + 1, "open_shards %u", open);
    {
        const unsigned edge[] = {0, open - 1, open, SHARD_MAX_SHARD, SHARD_MAX_SHARD + 1,
                                 (unsigned)max_hi(json_object_get(doc, "id_shards")),
                                 (unsigned)max_hi(json_object_get(doc, "id_shards")) + 1,
                                 UINT32_MAX};
        const char *pair;
        CHECK(shard_map_pair_of(m, open - 1, &pair) == 0, "open shard %u unserved", open - 1);
        for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
            check_pair_of(m, doc, edge[i]);
        for (int i = 0; i < 16; i++)
            check_pair_of(m, doc, (unsigned)((h >> (i * 4)) % (SHARD_MAX_SHARD + 2)));
    }
    check_mod_pair_of(m, doc, 0);
    check_mod_pair_of(m, doc, modn);
    check_mod_pair_of(m, doc, UINT32_MAX);
    if (modn) {
        check_mod_pair_of(m, doc, modn - 1);
        for (int i = 0; i < 8; i++)
            check_mod_pair_of(m, doc, (uint32_t)((h >> (i * 5)) % modn));
    }

    fmt = json_string_value(json_object_get(doc, "database_format"));
    check_database(m, fmt ? fmt : "db%05d", 0, 0);
    check_database(m, fmt ? fmt : "db%05d", SHARD_MAX_SHARD, 0);
    check_database(m, fmt ? fmt : "db%05d", (unsigned)(h % (SHARD_MAX_SHARD + 1)), 0);
    {
        char buf[SHARD_DBNAME_MAX];
        CHECK(shard_map_database(m, SHARD_MAX_SHARD + 1, buf, sizeof buf) == SHARD_EINVAL,
              "shard 65536 has a database");
        CHECK(shard_map_mod_database(m, modn, buf, sizeof buf) == SHARD_ENOSHARD,
              "mod shard %u has a database", modn);
    }
    if (modn) {
        fmt = json_string_value(json_object_get(mod, "database_format"));
        check_database(m, fmt ? fmt : "modshard%05d", 0, 1);
        check_database(m, fmt ? fmt : "modshard%05d", modn - 1, 1);
        check_database(m, fmt ? fmt : "modshard%05d", (uint32_t)(h % modn), 1);
    }

    check_round_trip(m);
    check_reassign(m, doc, h);
    json_decref(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    shard_map *m = (shard_map *)&m; /* any non-NULL value: must stay untouched */
    int rc = shard_map_parse(&m, (const char *)data, size);

    if (rc != 0) {
        CHECK(rc == SHARD_EMAP, "rejected with %d (%s), not SHARD_EMAP", rc, shard_errmsg());
        CHECK(m == (shard_map *)&m, "output written on failure");
        CHECK(strncmp(shard_errmsg(), "shard map: ", 11) == 0, "message: %s",
              shard_errmsg());
        return 0;
    }
    check_map(m, data, size);
    shard_map_free(m);
    return 0;
}
