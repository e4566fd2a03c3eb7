/*
 * shardctl: the map (show, publish) and failover.
 */
#include "shardctl.h"

#include <jansson.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Canonical JSON, one line (keys sorted, no spaces), as jq and diff want
 * it; --pretty: indented, for people; --map-version N: a published version
 * from the store's history (shard_store_load_version(3)). */
int cmd_map_show(const args *a, shard_ctx *ctx, shard_map *map)
{
    size_t flags = JSON_SORT_KEYS | (a->val[OPT_PRETTY] ? JSON_INDENT(2) : JSON_COMPACT);
    char *json = NULL, *text;
    json_t *doc;
    int rc;

    (void)ctx;
    if (a->val[OPT_MAP_VERSION]) {
        shard_store *store = NULL;
        shard_map *old = NULL;
        unsigned long long v;
        if (parse_num("--map-version", a->val[OPT_MAP_VERSION], 1, UINT64_MAX, &v))
            return EXIT_USAGE;
        if ((rc = shard_store_open(&store, a->map)) == 0)
            rc = shard_store_load_version(store, v, &old);
        shard_store_free(store);
        if (rc)
            return lib_error(rc);
        rc = shard_map_to_json(old, &json);
        shard_map_free(old);
    } else {
        rc = shard_map_to_json(map, &json);
    }
    if (rc)
        return lib_error(rc);
    doc = json_loads(json, 0, NULL);
    shard_free(json);
    if (!doc || !(text = json_dumps(doc, flags))) {
        json_decref(doc);
        fprintf(stderr, "shardctl: out of memory writing the map\n");
        return EXIT_FAIL;
    }
    printf("%s\n", text);
    free(text);
    json_decref(doc);
    return 0;
}

/*
 * A map is published only when its open shards have their databases on
 * their pairs' masters (shard_schema_check(3)): a context on FILE itself,
 * so that its own servers and credentials are the ones asked. 0 when the
 * map may be published, else the exit status.
 */
static int publish_check(const args *a, const char *file)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    int rc;

    if ((rc = ctx_options(a, &o)))
        return rc;
    if ((rc = shard_ctx_open(&ctx, file, &o)) == 0)
        rc = shard_schema_check(ctx, NULL);
    shard_ctx_free(ctx);
    if (rc == SHARD_EMAP) {
        fprintf(stderr, "shardctl: %s not published: %s; create the schema first (shardctl "
                "shards open, or schema apply on this map), or --force\n", file,
                shard_errmsg());
        return EXIT_USAGE;
    }
    if (rc) {
        fprintf(stderr, "shardctl: %s not published: cannot check its schema: %s (--force "
                "publishes it unchecked)\n", file, shard_errmsg());
        return exit_code(rc);
    }
    return 0;
}

/* Publish FILE to the store --map names, replacing the version there now. */
int cmd_map_publish(const args *a, shard_ctx *ctx, shard_map *map)
{
    shard_store *store = NULL;
    shard_map *fresh = NULL, *cur = NULL;
    uint64_t expected = 0;
    int rc;

    (void)ctx, (void)map;
    if (!a->map)
        return usage_error("no map store: give --map LOCATION or set LIBSHARD_MAP");
    if ((rc = shard_map_load(&fresh, a->pos[2])))
        return lib_error(rc == SHARD_EIO ? SHARD_EINVAL : rc);
    if ((rc = shard_store_open(&store, a->map)))
        goto out;
    rc = shard_store_load(store, &cur);
    if (rc == 0)
        expected = shard_map_version(cur);
    else if (rc != SHARD_EIO && rc != SHARD_ENOTFOUND && rc != SHARD_ESERVER)
        goto out; /* an unreadable store is not replaced blindly */
    rc = 0;
    if (shard_map_version(fresh) <= expected) {
        fprintf(stderr, "shardctl: %s has version %llu; the store is at %llu: raise its "
                "\"version\"\n", a->pos[2], (unsigned long long)shard_map_version(fresh),
                (unsigned long long)expected);
        rc = EXIT_USAGE;
    } else if (!a->val[OPT_FORCE] && (rc = publish_check(a, a->pos[2])) != 0) {
        ; /* said why */
    } else if ((rc = shard_store_publish(store, fresh, expected)) == 0) {
        printf("published map version %llu (was %llu)\n",
               (unsigned long long)shard_map_version(fresh), (unsigned long long)expected);
    } else {
        rc = lib_error(rc);
    }
    shard_store_free(store);
    shard_map_free(fresh);
    shard_map_free(cur);
    return rc;
out:
    shard_store_free(store);
    shard_map_free(fresh);
    shard_map_free(cur);
    return lib_error(rc);
}

int cmd_failover(const args *a, shard_ctx *ctx, shard_map *map)
{
    shard_failover_options o = SHARD_FAILOVER_OPTIONS_INIT;
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    unsigned long long wait_s;
    int rc;

    (void)map;
    if (a->val[OPT_WAIT]) {
        if (parse_num("--wait", a->val[OPT_WAIT], 0, 3600, &wait_s))
            return EXIT_USAGE;
        o.wait_ms = (unsigned)wait_s * 1000;
    }
    o.flags = a->val[OPT_FORCE] ? SHARD_FAILOVER_FORCE : 0;
    rc = shard_pair_failover_opts(ctx, a->pos[1], &o, &r);
    if (rc)
        return lib_error(rc);
    printf("failover %s: promoted %s (was standby); old master %s %s\n", r.pair, r.new_master,
           r.old_master, r.old_master_fenced ? "fenced read-only" : "unreachable");
    if (r.lag_transactions >= 0)
        printf("  standby lag at promotion: %" PRId64 " transactions, %.0f s behind; "
               "applied in %.0f ms\n", r.lag_transactions,
               r.lag_seconds < 0 ? 0 : r.lag_seconds, r.wait_ms);
    else
        printf("  standby lag at promotion: unknown (master unreachable): writes it "
               "committed but never sent are lost; applied what it had in %.0f ms\n",
               r.wait_ms);
    printf("  map version %" PRIu64 " published in %.0f ms\n", r.map_version, r.total_ms);
    return 0;
}
