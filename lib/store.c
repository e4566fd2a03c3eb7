/*
 * Map stores. The file store publishes by writing a temporary file in the
 * same directory and renaming it over the map, so a reader sees the old map
 * or the new one, never a mix; a lock file serialises publishers so the
 * version compare-and-swap is honest. The MySQL store (store_mysql.c)
 * keeps one row per version in a table, for a fleet of processes.
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
    char *path;         /* the file store */
    store_mysql *mysql; /* or the MySQL store */
};

int shard_store_open(shard_store **out, const char *location)
{
    shard_store *s;
    const char *path = location;

    if (!out || !location)
        return shard__fail(SHARD_EINVAL, "shard_store_open: NULL argument");
    if (strncmp(location, "mysql://", 8) == 0) {
        store_mysql *m = NULL;
        int rc = store_mysql_open(location, &m);
        if (rc)
            return rc;
        if (!(s = shard__calloc(1, sizeof *s))) {
            store_mysql_free(m);
            return shard__fail(SHARD_ENOMEM, "out of memory opening the map store");
        }
        s->mysql = m;
        *out = s;
        return SHARD_OK;
    }
    if (strncmp(location, "file:", 5) == 0)
        path = location + 5;
    else if (strstr(location, "://"))
        return shard__fail(SHARD_EINVAL, "map store \"%.200s\": unknown scheme "
                          "(use a path, file:PATH or mysql://...)", location);
    if (!*path)
        return shard__fail(SHARD_EINVAL, "map store: empty path");
    s = shard__calloc(1, sizeof *s);
    if (!s || !(s->path = shard__strdup(path))) {
        free(s);
        return shard__fail(SHARD_ENOMEM, "out of memory opening the map store");
    }
    *out = s;
    return SHARD_OK;
}

void shard_store_free(shard_store *store)
{
    if (!store)
        return;
    store_mysql_free(store->mysql);
    free(store->path);
    free(store);
}

int shard_store_load(shard_store *store, shard_map **out)
{
    if (!store || !out)
        return shard__fail(SHARD_EINVAL, "shard_store_load: NULL argument");
    if (store->mysql)
        return store_mysql_load(store->mysql, out);
    return shard_map_load(out, store->path);
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

static int replace_file(const char *path, const char *text)
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
    err = sync_dir(dir) != 0 ? errno : 0;
    free(dir);
    if (err)
        return shard__fail(SHARD_EIO, "map store %s: cannot sync directory: %s", path,
                          strerror(err));
    return SHARD_OK;
}

int shard_store_publish(shard_store *store, const shard_map *map,
                        uint64_t expected_version)
{
    char *lockpath = NULL, *text = NULL;
    uint64_t cur = 0;
    int lockfd = -1, rc;

    if (!store || !map)
        return shard__fail(SHARD_EINVAL, "shard_store_publish: NULL argument");
    if (map->version <= expected_version)
        return shard__fail(SHARD_EINVAL, "map version %llu must be greater than the "
                          "version it replaces (%llu)",
                          (unsigned long long)map->version,
                          (unsigned long long)expected_version);
    if (store->mysql)
        return store_mysql_publish(store->mysql, map, expected_version);
    if ((rc = shard_map_to_json(map, &text)))
        return rc;
    lockpath = shard__malloc(strlen(store->path) + 6);
    if (!lockpath) {
        rc = shard__fail(SHARD_ENOMEM, "out of memory publishing the map");
        goto out;
    }
    sprintf(lockpath, "%s.lock", store->path);
    lockfd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lockfd < 0 || flock(lockfd, LOCK_EX) != 0) {
        rc = shard__fail(SHARD_EIO, "map store %s: cannot lock %s: %s", store->path,
                        lockpath, strerror(errno));
        goto out;
    }
    if ((rc = current_version(store->path, &cur)))
        goto out;
    if (cur != expected_version) {
        rc = shard__fail(SHARD_ECONFLICT, "map store %s: version is %llu, expected %llu "
                        "(another change was published first)", store->path,
                        (unsigned long long)cur, (unsigned long long)expected_version);
        goto out;
    }
    rc = replace_file(store->path, text);
out:
    if (lockfd >= 0)
        close(lockfd); /* releases the flock */
    free(lockpath);
    free(text);
    return rc;
}
