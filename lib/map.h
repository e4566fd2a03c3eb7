/* The parsed shard map, shared by the files of lib/. Immutable once built. */
#ifndef LIBSHARD_MAP_H
#define LIBSHARD_MAP_H

#include "internal.h"

#include <jansson.h>
#include <stdatomic.h>

#define SHARD_DBNAME_MAX 65 /* MySQL's 64 characters plus NUL */

typedef struct shard_endpoint {
    char text[300];  /* as written in the map */
    char host[256];  /* empty for a unix socket */
    unsigned port;
    char socket[108];
} shard_endpoint;

typedef struct shard_pairdef {
    const char *name; /* borrowed from the JSON document */
    shard_endpoint master;
    shard_endpoint standby;
    bool has_standby;
} shard_pairdef;

typedef struct shard_rangedef {
    unsigned lo, hi; /* inclusive */
    size_t pair;     /* index into pairs */
} shard_rangedef;

typedef struct shard_objdef {
    const char *name;
    unsigned type;
} shard_objdef;

typedef struct shard_mapdef {
    const char *name;
    const char *reverse; /* NULL when none */
} shard_mapdef;

/* One entry of the map's "legacy" section: an object type whose legacy ids
 * resolve through a key-value lookup table, or a mapping whose imported
 * join rows are recorded in one (libshard-import(7)). */
typedef struct shard_legacydef {
    const char *name;            /* object type or mapping name (borrowed) */
    unsigned type;               /* the object type; 0 for a mapping */
    char table[SHARD_DBNAME_MAX]; /* the key-value table in mod_shards.tables */
} shard_legacydef;

typedef struct shard_dbfmt {
    char prefix[SHARD_DBNAME_MAX];
    char suffix[SHARD_DBNAME_MAX];
    int width;
    bool zero;
} shard_dbfmt;

typedef struct shard_tlsdef {
    bool enabled;
    bool verify;
    const char *ca, *cert, *key; /* NULL when not set */
} shard_tlsdef;

struct shard_map {
    atomic_int refs;
    json_t *doc; /* owns every borrowed string below */
    uint64_t version;
    unsigned open_shards;
    shard_dbfmt dbfmt;
    const char *user;
    const char *password_env; /* NULL: no password */
    shard_tlsdef tls;
    shard_objdef *objects;
    size_t nobjects;
    const char *type_names[SHARD_MAX_TYPE + 1];
    shard_mapdef *mappings;
    size_t nmappings;
    shard_pairdef *pairs;
    size_t npairs;
    shard_rangedef *ranges; /* sorted by lo */
    size_t nranges;
    uint32_t mod_count;
    shard_dbfmt mod_dbfmt;
    const char **mod_tables;
    size_t nmod_tables;
    shard_rangedef *mod_ranges;
    size_t nmod_ranges;
    shard_legacydef *legacy;
    size_t nlegacy;
    /* The lease (libshard-move(7), "The lease"): 0 = none, every read checks
     * the fence. moving: shards a move is about to fence or has fenced. */
    unsigned lease_ms, lease_max_ms;
    /* "lease_writes": true lets one-statement writes skip the check under
     * the lease too, bounded on the server (off: only reads skip it). */
    bool lease_writes;
    shard_rangedef *moving; /* pair unused */
    size_t nmoving;
};

shard_map *shard__map_ref(shard_map *map);
/* Index of the pair serving a shard, or -1. */
long shard__map_pair_index(const shard_map *map, unsigned shard);
long shard__map_mod_pair_index(const shard_map *map, uint32_t modshard);
long shard__map_find_pair(const shard_map *map, const char *name);
const shard_mapdef *shard__map_find_mapping(const shard_map *map, const char *name);
bool shard__map_has_mod_table(const shard_map *map, const char *name);
/* The legacy entry of an object type or mapping name; NULL when the map has none. */
const shard_legacydef *map_legacy_of(const shard_map *map, const char *name);
const shard_legacydef *map_legacy_of_type(const shard_map *map, unsigned type);
void shard__dbfmt_name(const shard_dbfmt *f, unsigned n, char *buf);
/* A copy of cur at `version` with ID shards first..last on `pair`. */
int map_reassign(const shard_map *cur, unsigned first, unsigned last, const char *pair,
                 uint64_t version, shard_map **out);
/* The longest lease_ms a map accepts. */
#define SHARD_LEASE_MAX_MS 600000u
/* Whether a move has marked `shard` (the map's "moving" ranges). */
bool map_shard_moving(const shard_map *map, unsigned shard);
/* A copy of cur at `version` with shards first..last marked moving (on) or
 * not (every mark inside first..last removed). */
int map_mark_moving(const shard_map *cur, unsigned first, unsigned last, bool on,
                    uint64_t version, shard_map **out);
/* A copy of cur at `version` with pair's master and standby swapped. */
int map_swap_roles(const shard_map *cur, const char *pair, uint64_t version, shard_map **out);
/* Table names stay 7 characters below MySQL's 64: earlier versions fenced
 * a moved table by renaming it to "_moved_" + its name, and a map must
 * load in every version that may share it. */
#define SHARD_TABLE_NAME_MAX (64 - 7)

/* Text from json_dumps() goes back to jansson's allocator, whatever it is. */
void map_json_text_free(void *p);

#endif
