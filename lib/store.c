/*
 * Map stores. The file store publishes by writing a temporary file in the
 * same directory and renaming it over the map, so a reader sees the old map
 * or the new one, never a mix; a lock file serialises publishers so the
 * version compare-and-swap is honest. The MySQL store (store_mysql.c)
 * keeps one row per version in a table, for a fleet of processes; the
 * ZooKeeper store (store_zk.c) one node per version, and pushes new ones.
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct shard_store {
    const store_ops *ops;
    void *impl; /* the backend's: for the file store, the path */
};

static const store_ops store_file_ops;

static const store_ops *const backends[] = {&store_mysql_ops, &store_zk_ops};

int shard_store_open(shard_store **out, const char *location)
{
    const store_ops *ops = &store_file_ops;
    shard_store *s;
    int rc;

    if (!out || !location)
        return shard__fail(SHARD_EINVAL, "shard_store_open: NULL argument");
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (strncmp(location, backends[i]->scheme, strlen(backends[i]->scheme)) == 0)
            ops = backends[i];
    if (!(s = shard__calloc(1, sizeof *s)))
        return shard__fail(SHARD_ENOMEM, "out of memory opening the map store");
    s->ops = ops;
    if ((rc = ops->open(location, &s->impl))) {
        free(s);
        return rc;
    }
    *out = s;
    return SHARD_OK;
}

void shard_store_free(shard_store *store)
{
    if (!store)
        return;
    store->ops->free(store->impl);
    free(store);
}

int shard_store_load(shard_store *store, shard_map **out)
{
    if (!store || !out)
        return shard__fail(SHARD_EINVAL, "shard_store_load: NULL argument");
    return store->ops->load(store->impl, out);
}

int shard_store_load_version(shard_store *store, uint64_t version, shard_map **out)
{
    shard_map *cur = NULL;
    int rc;

    if (!store || !out)
        return shard__fail(SHARD_EINVAL, "shard_store_load_version: NULL argument");
    if (version == 0)
        return shard__fail(SHARD_EINVAL, "shard_store_load_version: versions start at 1");
    if (store->ops->load_version)
        return store->ops->load_version(store->impl, version, out);
    /* A store without history has only its current version to give. */
    if ((rc = store->ops->load(store->impl, &cur)))
        return rc;
    if (cur->version != version) {
        rc = shard__fail(SHARD_ENOTFOUND, "the %s map store keeps only its current "
                        "version (%llu), not version %llu", store->ops->name,
                        (unsigned long long)cur->version, (unsigned long long)version);
        shard_map_free(cur);
        return rc;
    }
    *out = cur;
    return SHARD_OK;
}

void *store_impl(shard_store *store, const store_ops *ops)
{
    return store && store->ops == ops ? store->impl : NULL;
}

bool store_can_watch(const shard_store *store)
{
    return store->ops->watch != NULL;
}

int store_watch(shard_store *store, store_watch_fn fn, void *payload)
{
    if (!store->ops->watch)
        return shard__fail(SHARD_EINTERNAL, "the %s map store has no watches",
                          store->ops->name);
    return store->ops->watch(store->impl, fn, payload);
}

bool store_watch_live(shard_store *store)
{
    return store->ops->watch_live && store->ops->watch_live(store->impl);
}

/* ---- the file store ------------------------------------------------ */

static int file_open(const char *location, void **out)
{
    const char *path = location;
    char *copy;

    if (strncmp(location, "file:", 5) == 0)
        path = location + 5;
    else if (strstr(location, "://"))
        return shard__fail(SHARD_EINVAL, "map store \"%.200s\": unknown scheme "
                          "(use a path, file:PATH, mysql://... or zk://...)", location);
    if (!*path)
        return shard__fail(SHARD_EINVAL, "map store: empty path");
    if (!(copy = shard__strdup(path)))
        return shard__fail(SHARD_ENOMEM, "out of memory opening the map store");
    *out = copy;
    return SHARD_OK;
}

static void file_free(void *impl)
{
    free(impl);
}

static int file_load(void *impl, shard_map **out)
{
    return shard_map_load(out, impl);
}

static int write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* pathcopy is a copy of the map's path (dirname() writes into it). */
static int sync_dir(char *pathcopy)
{
    int fd = open(dirname(pathcopy), O_RDONLY | O_DIRECTORY), rc = 0;

    if (fd >= 0) {
        rc = fsync(fd);
        close(fd);
    }
    return rc;
}

/* Current version in the file, 0 when there is no file. */
static int current_version(const char *path, uint64_t *version)
{
    shard_map *cur = NULL;
    int rc;

    if (access(path, F_OK) != 0 && errno == ENOENT) {
        *version = 0;
        return SHARD_OK;
    }
    rc = shard_map_load(&cur, path);
    if (rc)
        return shard__fail_prefix(rc, "the stored map cannot be read, refusing to "
                                 "replace it: ");
    *version = cur->version;
    shard_map_free(cur);
    return SHARD_OK;
}

/* *renamed: the new file is in place (a later failure is the directory's
 * sync: the map was stored, maybe not durably). */
static int replace_file(const char *path, const char *text, bool *renamed)
{
    size_t plen = strlen(path);
    /* Allocate everything first: once renamed, only I/O may fail. */
    char *tmp = shard__malloc(plen + 16), *dir = shard__strdup(path);
    int fd, err;

    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        return shard__fail(SHARD_ENOMEM, "out of memory publishing the map");
    }
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    fd = mkstemp(tmp);
    if (fd < 0) {
        err = errno;
        free(tmp);
        free(dir);
        return shard__fail(SHARD_EIO, "map store %s: cannot create temporary file: %s",
                          path, strerror(err));
    }
    if (write_all(fd, text, strlen(text)) || write_all(fd, "\n", 1) || fsync(fd) ||
        fchmod(fd, 0644)) {
        err = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        free(dir);
        return shard__fail(SHARD_EIO, "map store %s: cannot write: %s", path,
                          strerror(err));
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        free(tmp);
        free(dir);
        return shard__fail(SHARD_EIO, "map store %s: cannot rename into place: %s", path,
                          strerror(err));
    }
    free(tmp);
    *renamed = true;
    err = sync_dir(dir) != 0 ? errno : 0;
    free(dir);
    if (err)
        return shard__fail(SHARD_EIO, "map store %s: cannot sync directory: %s", path,
                          strerror(err));
    return SHARD_OK;
}

static int file_publish(void *impl, const shard_map *map, uint64_t expected_version,
                        bool *unknown)
{
    const char *path = impl;
    char *lockpath = NULL, *text = NULL;
    uint64_t cur = 0;
    int lockfd = -1, rc;

    if ((rc = shard_map_to_json(map, &text)))
        return rc;
    lockpath = shard__malloc(strlen(path) + 6);
    if (!lockpath) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory publishing the map");
        goto out;
    }
    sprintf(lockpath, "%s.lock", path);
    lockfd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lockfd < 0 || flock(lockfd, LOCK_EX) != 0) {
        rc = shard__fail(SHARD_EIO, "map store %s: cannot lock %s: %s", path,
                        lockpath, strerror(errno));
        goto out;
    }
    if ((rc = current_version(path, &cur)))
        goto out;
    if (cur != expected_version) {
        rc = shard__fail(SHARD_ECONFLICT, "map store %s: version is %llu, expected %llu "
                        "(another change was published first)", path,
                        (unsigned long long)cur, (unsigned long long)expected_version);
        goto out;
    }
    rc = replace_file(path, text, unknown);
out:
    if (lockfd >= 0)
        close(lockfd); /* releases the flock */
    free(lockpath);
    free(text);
    return rc;
}

static const store_ops store_file_ops = {
    .name = "file",
    .open = file_open,
    .free = file_free,
    .load = file_load,
    .publish = file_publish,
};

int shard_store_publish(shard_store *store, const shard_map *map,
                        uint64_t expected_version)
{
    bool unknown = false;

    return store_publish(store, map, expected_version, &unknown);
}

int store_publish(shard_store *store, const shard_map *map, uint64_t expected_version,
                  bool *unknown)
{
    *unknown = false;
    if (!store || !map)
        return shard__fail(SHARD_EINVAL, "shard_store_publish: NULL argument");
    if (map->version <= expected_version)
        return shard__fail(SHARD_EINVAL, "map version %llu must be greater than the "
                          "version it replaces (%llu)",
                          (unsigned long long)map->version,
                          (unsigned long long)expected_version);
    return store->ops->publish(store->impl, map, expected_version, unknown);
}
