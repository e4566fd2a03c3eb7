/*
 * The map's compare-and-swap publish loop (publish.h).
 */
#include "publish.h"
#include "store.h"

#define PUBLISH_TRIES 5

int publish_edit(shard_store *store, publish_edit_fn edit, void *arg, uint64_t *version)
{
    bool unknown;

    return publish_edit_outcome(store, edit, arg, version, &unknown);
}

int publish_edit_outcome(shard_store *store, publish_edit_fn edit, void *arg,
                         uint64_t *version, bool *unknown)
{
    int rc = 0;

    *unknown = false;
    for (int attempt = 0; attempt < PUBLISH_TRIES; attempt++) {
        shard_map *cur = NULL, *next = NULL;

        if ((rc = shard_store_load(store, &cur)))
            return shard__fail_prefix(rc, "reading the stored map: ");
        rc = edit(cur, &next, arg);
        if (rc == PUBLISH_UNCHANGED) {
            if (version)
                *version = cur->version;
            shard_map_free(cur);
            return 0;
        }
        if (rc) { /* the edit's own refusal is final */
            shard_map_free(next);
            shard_map_free(cur);
            return rc;
        }
        rc = store_publish(store, next, cur->version, unknown);
        if (rc == 0 && version)
            *version = next->version;
        shard_map_free(next);
        shard_map_free(cur);
        if (rc != SHARD_ECONFLICT)
            break;
    }
    return rc;
}
