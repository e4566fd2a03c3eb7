/*
 * Map stores behind one function table, the way curl's TLS backends sit
 * behind struct Curl_ssl: the file store (store.c), the MySQL table store
 * (store_mysql.c) and the ZooKeeper store (store_zk.c). store.c picks the
 * backend by the location's scheme; callers see only shard_store.
 */
#ifndef LIBSHARD_STORE_H
#define LIBSHARD_STORE_H

#include "map.h"

/* A new map from a store that pushes (ZooKeeper watches), delivered on the
 * store's own thread; the callee owns map. */
typedef void (*store_watch_fn)(shard_map *map, void *payload);

typedef struct store_ops {
    const char *name;   /* "file", "mysql", "zk": for messages */
    const char *scheme; /* location prefix ("mysql://"); NULL: the file store */
    int (*open)(const char *location, void **out);
    void (*free)(void *impl);
    int (*load)(void *impl, shard_map **out);
    /* One published version, from the store's history (NULL: none kept). */
    int (*load_version)(void *impl, uint64_t version, shard_map **out);
    /* *unknown (never NULL): set when it fails after the write was sent
     * and before its answer came back, so that the map may have been
     * stored; left false when the store certainly did not take it. */
    int (*publish)(void *impl, const shard_map *map, uint64_t expected_version,
                   bool *unknown);
    /* Start pushing every newer version to fn (NULL: the store is polled).
     * Stopped only by free, which returns once fn can no longer run. */
    int (*watch)(void *impl, store_watch_fn fn, void *payload);
    /* The watch is live: a session is up and the watch is set. */
    bool (*watch_live)(void *impl);
} store_ops;

extern const store_ops store_mysql_ops;
extern const store_ops store_zk_ops;

/* shard_store_publish, saying in *unknown whether a failure may still have
 * stored the map (store_ops.publish): a publish that certainly did not land
 * leaves *unknown false. */
int store_publish(shard_store *store, const shard_map *map, uint64_t expected_version,
                  bool *unknown);

/* Does the store push new versions (store_watch), so that nothing polls? */
bool store_can_watch(const shard_store *store);
/* See store_ops.watch. */
int store_watch(shard_store *store, store_watch_fn fn, void *payload);
/* See store_ops.watch_live; false for a polled store. */
bool store_watch_live(shard_store *store);

/* The backend's state when store is of kind ops, else NULL. */
void *store_impl(shard_store *store, const store_ops *ops);
/* A test hook: the ZooKeeper session (id and password) of a zk:// store,
 * while it is connected; -1 otherwise. */
int store_zk_session(shard_store *store, int64_t *id, char passwd[16]);

#endif
