/*
 * shardctl: the data commands: IDs and mod shards (no server), the map
 * check, objects, mappings and key-value pairs (shardctl(1)). The
 * dispatcher has checked the number of arguments and opened what the
 * command table says each needs.
 */
#include "shardctl.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- IDs, mod shards, the map check ------------------------------------- */

int cmd_id_decode(const args *a, shard_ctx *ctx, shard_map *map)
{
    uint64_t *ids = calloc((size_t)a->npos, sizeof *ids);
    int rc;

    (void)ctx, (void)map;
    if (!ids)
        return usage_error("out of memory");
    /* Validate every ID before printing any, so bad input prints nothing. */
    for (int i = 2; i < a->npos; i++) {
        if ((rc = shard_id_parse(a->pos[i], &ids[i]))) {
            free(ids);
            return lib_error(rc);
        }
    }
    for (int i = 2; i < a->npos; i++) {
        uint64_t id = ids[i];
        if (a->seen & O(OPT_JSON))
            printf("{\"id\":%" PRIu64 ",\"shard\":%u,\"type\":%u,\"local\":%" PRIu64 "}\n",
                   id, shard_id_shard(id), shard_id_type(id), shard_id_local(id));
        else
            printf("%" PRIu64 " shard=%u type=%u local=%" PRIu64 "\n", id,
                   shard_id_shard(id), shard_id_type(id), shard_id_local(id));
    }
    free(ids);
    return 0;
}

int cmd_id_encode(const args *a, shard_ctx *ctx, shard_map *map)
{
    unsigned long long shard, type, local;
    uint64_t id;
    int rc;

    (void)ctx, (void)map;
    if (parse_num("shard", a->pos[2], 0, SHARD_MAX_SHARD, &shard) ||
        parse_num("type", a->pos[3], 1, SHARD_MAX_TYPE, &type) ||
        parse_num("local id", a->pos[4], 1, SHARD_MAX_LOCAL, &local))
        return EXIT_USAGE;
    if ((rc = shard_id_make((unsigned)shard, (unsigned)type, local, &id)))
        return lib_error(rc);
    printf("%" PRIu64 "\n", id);
    return 0;
}

static int unhex(const char *s, unsigned char **out, size_t *len)
{
    size_t n = strlen(s);
    unsigned char *b;

    if (n % 2)
        return usage_error("hex key '%s' has an odd number of digits", s);
    b = malloc(n / 2 + 1);
    if (!b)
        return usage_error("out of memory");
    for (size_t i = 0; i < n; i += 2) {
        unsigned v;
        if (sscanf(s + i, "%2x", &v) != 1 || !strchr("0123456789abcdefABCDEF", s[i]) ||
            !strchr("0123456789abcdefABCDEF", s[i + 1])) {
            free(b);
            return usage_error("hex key '%s' has a non-hex digit", s);
        }
        b[i / 2] = (unsigned char)v;
    }
    *out = b;
    *len = n / 2;
    return 0;
}

/* The map is read only when --map (or LIBSHARD_MAP) names one and
 * --shards is not given: modshard needs no map. */
int cmd_modshard(const args *a, shard_ctx *ctx, shard_map *map)
{
    unsigned long long n = 4096;
    uint32_t *out;
    int rc;

    (void)ctx, (void)map;
    if (a->val[OPT_SHARDS]) {
        if (parse_num("--shards", a->val[OPT_SHARDS], 1, SHARD_MAX_MOD_SHARDS, &n))
            return EXIT_USAGE;
    } else if (a->map) {
        shard_map *m = NULL;
        if ((rc = load_map(a, &m)))
            return rc;
        if (shard_map_mod_count(m))
            n = shard_map_mod_count(m);
        shard_map_free(m);
    }
    out = calloc((size_t)a->npos, sizeof *out);
    if (!out)
        return usage_error("out of memory");
    for (int i = 1; i < a->npos; i++) {
        unsigned char *key = (unsigned char *)a->pos[i];
        size_t len = strlen(a->pos[i]);
        int hex = (a->seen & O(OPT_HEX)) != 0;
        if (hex && (rc = unhex(a->pos[i], &key, &len))) {
            free(out);
            return rc;
        }
        rc = shard_mod(key, len, (uint32_t)n, &out[i]);
        if (hex)
            free(key);
        if (rc) {
            free(out);
            return lib_error(rc);
        }
    }
    for (int i = 1; i < a->npos; i++)
        printf("%" PRIu32 "\n", out[i]);
    free(out);
    return 0;
}

int cmd_check(const args *a, shard_ctx *ctx, shard_map *map)
{
    char *summary = NULL;
    int rc;

    (void)ctx;
    if ((rc = shard_map_summary(map, &summary)))
        return lib_error(rc);
    printf("%s: ok, %s\n", a->map, summary);
    shard_free(summary);
    return 0;
}

/* ---- objects ------------------------------------------------------------- */

/* The shard of --shard S (0..65535, in a range of the map) or --near ID. */
static int placement(const args *a, const shard_map *map, unsigned *shard)
{
    const char *pair;

    *shard = SHARD_ANY;
    if (a->val[OPT_SHARD] && a->val[OPT_NEAR])
        return usage_error("give --shard or --near, not both"), -1;
    if (a->val[OPT_SHARD]) {
        unsigned long long s;
        if (parse_num("--shard", a->val[OPT_SHARD], 0, SHARD_MAX_SHARD, &s))
            return -1;
        if (shard_map_pair_of(map, (unsigned)s, &pair) != 0)
            return usage_error("--shard %llu is not in any id_shards range of the map",
                               s), -1;
        *shard = (unsigned)s;
    } else if (a->val[OPT_NEAR]) {
        uint64_t id;
        if (parse_id("--near", a->val[OPT_NEAR], &id))
            return -1;
        *shard = shard_id_shard(id);
    }
    return 0;
}

int cmd_obj_create(const args *a, shard_ctx *ctx, shard_map *map)
{
    unsigned type, shard;
    uint64_t id;
    int rc;

    if (parse_type(map, a->pos[2], &type) || placement(a, map, &shard))
        return EXIT_USAGE;
    if ((rc = shard_object_create(ctx, type, shard, a->pos[3], strlen(a->pos[3]), &id)))
        return lib_error(rc);
    printf("%" PRIu64 "\n", id);
    return 0;
}

/* Parses positional IDs pos[from..npos) into ids[] (checked against the map). */
static int object_ids(const args *a, const shard_map *map, int from, uint64_t *ids)
{
    for (int i = from; i < a->npos; i++)
        if (parse_id(NULL, a->pos[i], &ids[i - from]) ||
            check_object_id(map, a->pos[i], ids[i - from]))
            return -1;
    return 0;
}

/* Missing IDs named in the error line; more are counted, not listed. */
#define MAX_NAMED 20

/* A list of IDs for one clause of the error line: the first MAX_NAMED named. */
typedef struct idlist {
    char *text;
    size_t len, n;
    FILE *f;
} idlist;

static void idlist_add(idlist *l, uint64_t id)
{
    if (!l->f && !(l->f = open_memstream(&l->text, &l->len)))
        return;
    if (l->n++ < MAX_NAMED)
        fprintf(l->f, "%s%" PRIu64, l->n > 1 ? ", " : "", id);
}

static void idlist_close(idlist *l)
{
    if (l->f)
        fclose(l->f);
    l->f = NULL;
}

/* "object X not found", "objects X, Y not found", "N objects not found: X, ..." */
static void idlist_print(FILE *out, const idlist *l, const char *one, const char *many,
                         const char *says_one, const char *says_many)
{
    const char *t = l->text ? l->text : "";
    if (l->n == 1)
        fprintf(out, "%s %s %s", one, t, says_one);
    else if (l->n <= MAX_NAMED)
        fprintf(out, "%s %s %s", many, t, says_many);
    else
        fprintf(out, "%zu %s %s: %s, ...", l->n, many, says_many, t);
}

/*
 * Several IDs: one multi-get. Found objects are printed in input order;
 * missing ones, IDs on shards no range serves (bad input: exit 2) and any
 * failure are summed up in one line on stderr, clauses separated by "; ".
 */
static int get_many(shard_ctx *ctx, const uint64_t *ids, size_t n)
{
    shard_item *items = NULL;
    char *failure = NULL;
    idlist missing = {0}, unmapped = {0};
    int failed = 0;
    int rc = shard_object_mget(ctx, ids, n, &items);

    if (rc && rc != SHARD_EPARTIAL)
        return lib_error(rc);
    for (size_t i = 0; i < n; i++) {
        if (items[i].status == 0)
            print_object(items[i].data, items[i].len);
        else if (items[i].status == SHARD_ENOTFOUND)
            idlist_add(&missing, ids[i]);
        else if (items[i].status == SHARD_ENOSHARD)
            idlist_add(&unmapped, ids[i]);
        else
            failed = 1;
    }
    idlist_close(&missing);
    idlist_close(&unmapped);
    /* The library's message names the first failed server; only print it
     * for failures, not for items that are merely absent or unmapped. */
    if (failed)
        failure = strdup(*shard_errmsg() ? shard_errmsg() : shard_strerror(rc));
    rc = 0;
    if (failed || missing.n || unmapped.n) {
        const char *sep = "";
        fflush(stdout); /* found objects first, as a reader of both would expect */
        fputs("shardctl: ", stderr);
        if (failed) {
            fputs(failure ? failure : "multi-get failed", stderr);
            sep = "; ";
        }
        if (unmapped.n) {
            fputs(sep, stderr);
            idlist_print(stderr, &unmapped, "ID", "IDs",
                         "is on a shard that no range of the map serves",
                         "are on shards that no range of the map serves");
            sep = "; ";
        }
        if (missing.n) {
            fputs(sep, stderr);
            idlist_print(stderr, &missing, "object", "objects", "not found", "not found");
        }
        fputc('\n', stderr);
        rc = unmapped.n ? EXIT_USAGE : EXIT_FAIL;
    }
    free(missing.text);
    free(unmapped.text);
    free(failure);
    shard_items_free(items, n);
    return rc;
}

int cmd_obj_get(const args *a, shard_ctx *ctx, shard_map *map)
{
    size_t n = (size_t)a->npos - 2;
    uint64_t *ids = calloc(n, sizeof *ids);
    char *json;
    size_t len;
    int rc;

    if (!ids)
        return usage_error("out of memory");
    if (object_ids(a, map, 2, ids))
        rc = EXIT_USAGE;
    else if (n > 1)
        rc = get_many(ctx, ids, n);
    else if ((rc = shard_object_get(ctx, ids[0], &json, &len)))
        rc = lib_error(rc);
    else {
        print_object(json, len);
        shard_free(json);
    }
    free(ids);
    return rc;
}

int cmd_obj_update(const args *a, shard_ctx *ctx, shard_map *map)
{
    uint64_t id;
    char *result;
    size_t len;
    int rc;

    if (parse_id(NULL, a->pos[2], &id) || check_object_id(map, a->pos[2], id))
        return EXIT_USAGE;
    if ((rc = shard_object_patch(ctx, id, a->pos[3], strlen(a->pos[3]), &result, &len)))
        return lib_error(rc);
    print_object(result, len);
    shard_free(result);
    return 0;
}

int cmd_obj_delete(const args *a, shard_ctx *ctx, shard_map *map)
{
    uint64_t id;
    int rc;

    if (parse_id(NULL, a->pos[2], &id) || check_object_id(map, a->pos[2], id))
        return EXIT_USAGE;
    if ((rc = shard_object_delete(ctx, id, a->val[OPT_HARD] ? SHARD_DELETE_HARD : 0)))
        return lib_error(rc);
    return 0;
}

/* ---- mappings ------------------------------------------------------------ */

int cmd_mapping_add(const args *a, shard_ctx *ctx, shard_map *map)
{
    int64_t seq = SHARD_SEQ_NOW;
    uint64_t from, to;
    int rc;

    (void)map;
    if (parse_id("FROM", a->pos[3], &from) || parse_id("TO", a->pos[4], &to) ||
        (a->npos == 6 && parse_seq("SEQ", a->pos[5], &seq)))
        return EXIT_USAGE;
    if ((rc = shard_mapping_add(ctx, a->pos[2], from, to, seq)))
        return lib_error(rc);
    return 0;
}

int cmd_mapping_list(const args *a, shard_ctx *ctx, shard_map *map)
{
    unsigned long long limit = 0;
    int64_t before = SHARD_SEQ_NONE;
    shard_edge *edges = NULL;
    size_t n = 0;
    uint64_t from;
    int rc;

    (void)map;
    if (parse_id("FROM", a->pos[3], &from) ||
        (a->val[OPT_LIMIT] && parse_num("--limit", a->val[OPT_LIMIT], 1, SIZE_MAX, &limit)) ||
        (a->val[OPT_BEFORE] && parse_seq("--before", a->val[OPT_BEFORE], &before)))
        return EXIT_USAGE;
    if ((rc = shard_mapping_list(ctx, a->pos[2], from, before, (size_t)limit, &edges, &n)))
        return lib_error(rc);
    for (size_t i = 0; i < n; i++)
        printf("%" PRIu64 " %" PRId64 "\n", edges[i].to, edges[i].seq);
    shard_free(edges);
    return 0;
}

int cmd_mapping_remove(const args *a, shard_ctx *ctx, shard_map *map)
{
    uint64_t from, to;
    int rc;

    (void)map;
    if (parse_id("FROM", a->pos[3], &from) || parse_id("TO", a->pos[4], &to))
        return EXIT_USAGE;
    if ((rc = shard_mapping_remove(ctx, a->pos[2], from, to)))
        return lib_error(rc);
    return 0;
}

int cmd_mapping_count(const args *a, shard_ctx *ctx, shard_map *map)
{
    uint64_t from, count;
    int rc;

    (void)map;
    if (parse_id("FROM", a->pos[3], &from))
        return EXIT_USAGE;
    if ((rc = shard_mapping_count(ctx, a->pos[2], from, &count)))
        return lib_error(rc);
    printf("%" PRIu64 "\n", count);
    return 0;
}

/* ---- key-value ----------------------------------------------------------- */

int cmd_kv_put(const args *a, shard_ctx *ctx, shard_map *map)
{
    int rc;

    (void)map;
    if ((rc = shard_kv_put(ctx, a->pos[2], a->pos[3], strlen(a->pos[3]), a->pos[4],
                           strlen(a->pos[4]))))
        return lib_error(rc);
    return 0;
}

int cmd_kv_get(const args *a, shard_ctx *ctx, shard_map *map)
{
    char *value;
    size_t len;
    int rc;

    (void)map;
    if ((rc = shard_kv_get(ctx, a->pos[2], a->pos[3], strlen(a->pos[3]), &value, &len)))
        return lib_error(rc);
    fwrite(value, 1, len, stdout);
    putchar('\n');
    shard_free(value);
    return 0;
}

int cmd_kv_delete(const args *a, shard_ctx *ctx, shard_map *map)
{
    int rc;

    (void)map;
    if ((rc = shard_kv_delete(ctx, a->pos[2], a->pos[3], strlen(a->pos[3]))))
        return lib_error(rc);
    return 0;
}
