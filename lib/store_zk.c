/*
 * The ZooKeeper map store: the map of a fleet, pushed to every process by
 * a watch instead of polled. Layout under PATH:
 *
 *   PATH/versions/00000000000000000007   one node per published version, the
 *                                        map's JSON, never changed again
 *   PATH/current                         a copy of the current version's map
 *
 * A publish is one multi-operation transaction: create versions/N and set
 * current to the same map at the znode version read with it (create it,
 * for the first map), both or neither. current's znode version is the
 * compare-and-set token. A reader reads one node, written whole, so it never
 * sees half a map; every published version stays readable under versions/;
 * and a watch costs one read per change (current's data comes back with the
 * watch set again), where a pointer to the version node would cost two.
 *
 * Location: zk://HOST:PORT[,HOST:PORT...]/PATH[?OPTIONS], OPTIONS being
 * auth_env=VAR (digest credentials USER:PASSWORD, read from the
 * environment, never from the location) and session_timeout_ms=N.
 *
 * Threads: the C client's own (an I/O thread and a completion thread per
 * session) run the watch: a change of current sets off an asynchronous read
 * of it that sets the watch again, and the map is handed to the watcher from
 * the completion thread, never a caller's. A lost session is
 * the client's to reconnect; on every (re)connection the watch is set again
 * and current read again. An expired session is replaced by a new one (a
 * short-lived thread of ours closes the old handle: the client's own
 * threads may not). Callers' loads and publishes use synchronous calls.
 */
#define THREADED 1 /* the C client's synchronous API: libzookeeper_mt */
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zookeeper/zookeeper.h>

#define ZK_CONNECT_WAIT_MS 5000      /* the first connection of a store */
#define ZK_SESSION_TIMEOUT_MS 10000  /* default; the server bounds it */
#define ZK_MAX_MAP (480 * 1024)      /* twice in a request: below jute.maxbuffer (1 MiB) */

typedef struct store_zk {
    char hosts[1024];
    char path[512];       /* PATH: absolute, no trailing slash */
    char current[530];    /* PATH/current */
    char versions[530];   /* PATH/versions */
    char auth_env[128];   /* "": no authentication */
    char *auth;           /* USER:PASSWORD, copied at open; wiped at free */
    int session_timeout_ms;
    char label[1600];     /* "map store zk://HOSTS/PATH": no secret in it */

    /* Callers' synchronous calls hold it shared; replacing or closing the
     * handle holds it exclusively. Never taken on the client's threads. */
    pthread_rwlock_t handle_lock;
    pthread_mutex_t lock; /* everything below */
    pthread_cond_t cond;
    zhandle_t *zh;
    bool connected;       /* the session is up */
    bool ever_connected;
    bool auth_failed;
    bool closing;
    unsigned reopeners;   /* threads replacing an expired session */
    store_watch_fn fn;    /* set by zk_watch */
    void *payload;
    bool watch_set;       /* current is watched in this connection */
    uint64_t delivered;   /* the newest version read (by a load or the watch) */
} store_zk;

static int bad(const char *uri, const char *why)
{
    /* A location that (wrongly) carries credentials before an @ must not
     * put them in a message: quote only what follows it. */
    const char *at = strchr(uri, '@');
    return shard__fail(SHARD_EINVAL, "map store \"zk://%s%.300s\": %s (expected "
                      "zk://HOST:PORT[,HOST:PORT...]/PATH[?auth_env=VAR])",
                      at ? "...@" : "", at ? at + 1 : uri + 5, why);
}

#define ALNUM "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

static bool only(const char *s, size_t n, const char *ok)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\0' || !strchr(ok, s[i]))
            return false;
    return true;
}

/* HOST:PORT[,HOST:PORT...], every port given. */
static bool hosts_valid(const char *s, size_t n)
{
    const char *p = s, *end = s + n;

    if (n == 0 || !only(s, n, ALNUM ".-_:,[]"))
        return false;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p)), *stop = comma ? comma : end;
        const char *colon = NULL;
        unsigned long port = 0;

        for (const char *q = p; q < stop; q++)
            if (*q == ':')
                colon = q;
        if (!colon || colon == p || colon + 1 == stop)
            return false;
        for (const char *q = colon + 1; q < stop; q++) {
            if (*q < '0' || *q > '9')
                return false;
            port = port * 10 + (unsigned long)(*q - '0');
            if (port > 65535)
                return false;
        }
        if (port == 0)
            return false;
        p = comma ? comma + 1 : end;
        if (comma && p == end)
            return false;
    }
    return true;
}

/* /seg[/seg...]: segments of [A-Za-z0-9_.-], never "." or "..". */
static bool path_valid(const char *s, size_t n)
{
    size_t i = 0;

    if (n < 2 || s[0] != '/' || s[n - 1] == '/' || !only(s, n, ALNUM "/_.-"))
        return false;
    while (i < n) {
        size_t j = i + 1;
        while (j < n && s[j] != '/')
            j++;
        if (j == i + 1 || (j - i == 2 && s[i + 1] == '.') ||
            (j - i == 3 && s[i + 1] == '.' && s[i + 2] == '.'))
            return false;
        i = j;
    }
    return true;
}

static int parse_option(store_zk *m, const char *uri, const char *opt, size_t n)
{
    const char *eq = memchr(opt, '=', n);
    size_t klen, vlen;

    if (!eq)
        return bad(uri, "an option is not KEY=VALUE");
    klen = (size_t)(eq - opt);
    vlen = n - klen - 1;
    eq++;
    if (klen == 8 && strncmp(opt, "auth_env", 8) == 0) {
        if (vlen == 0 || vlen >= sizeof m->auth_env || !only(eq, vlen, ALNUM "_"))
            return bad(uri, "auth_env is not an environment variable name");
        memcpy(m->auth_env, eq, vlen);
        m->auth_env[vlen] = '\0';
    } else if (klen == 18 && strncmp(opt, "session_timeout_ms", 18) == 0) {
        unsigned long v = 0;
        if (vlen == 0 || vlen > 7 || !only(eq, vlen, "0123456789"))
            return bad(uri, "session_timeout_ms must be a number of milliseconds");
        for (size_t i = 0; i < vlen; i++)
            v = v * 10 + (unsigned long)(eq[i] - '0');
        if (v < 100 || v > 3600000)
            return bad(uri, "session_timeout_ms must be 100..3600000");
        m->session_timeout_ms = (int)v;
    } else {
        return bad(uri, "unknown option");
    }
    return 0;
}

static int parse_uri(store_zk *m, const char *uri)
{
    const char *p = uri + 5, *slash, *q, *end;
    size_t n;

    m->session_timeout_ms = ZK_SESSION_TIMEOUT_MS;
    if (!(slash = strchr(p, '/')))
        return bad(uri, "missing /PATH");
    n = (size_t)(slash - p);
    if (memchr(p, '@', n))
        return bad(uri, "credentials do not belong in the location: name their "
                        "environment variable with auth_env=VAR");
    if (n >= sizeof m->hosts || !hosts_valid(p, n))
        return bad(uri, "HOST:PORT[,HOST:PORT...] is invalid");
    memcpy(m->hosts, p, n);
    m->hosts[n] = '\0';
    q = strchr(slash, '?');
    end = q ? q : slash + strlen(slash);
    n = (size_t)(end - slash);
    if (n >= sizeof m->path || !path_valid(slash, n))
        return bad(uri, "PATH must be /NAME[/NAME...] of [A-Za-z0-9_.-]");
    memcpy(m->path, slash, n);
    m->path[n] = '\0';
    while (q && *q) {
        const char *opt = q + 1, *amp = strchr(opt, '&');
        size_t len = amp ? (size_t)(amp - opt) : strlen(opt);
        int rc = parse_option(m, uri, opt, len);
        if (rc)
            return rc;
        q = amp;
    }
    snprintf(m->current, sizeof m->current, "%s/current", m->path);
    snprintf(m->versions, sizeof m->versions, "%s/versions", m->path);
    snprintf(m->label, sizeof m->label, "map store zk://%s%s", m->hosts, m->path);
    return 0;
}

static int read_auth(store_zk *m)
{
    const char *v;

    if (!m->auth_env[0])
        return 0;
    if (!(v = getenv(m->auth_env)))
        return shard__fail(SHARD_EINVAL, "%s: auth_env names %s, which is not set",
                          m->label, m->auth_env);
    if (!strchr(v, ':') || v[0] == ':')
        return shard__fail(SHARD_EINVAL, "%s: $%s must be USER:PASSWORD (ZooKeeper "
                          "digest credentials)", m->label, m->auth_env);
    if (!(m->auth = shard__strdup(v)))
        return shard__fail(SHARD_ENOMEM, "out of memory opening the map store");
    return 0;
}

static void zk_free(void *impl);

static int zk_open(const char *uri, void **out)
{
    store_zk *m = shard__calloc(1, sizeof *m);
    int rc;

    if (!m)
        return shard__fail(SHARD_ENOMEM, "out of memory opening the map store");
    pthread_rwlock_init(&m->handle_lock, NULL);
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->cond, NULL);
    if ((rc = parse_uri(m, uri)) || (rc = read_auth(m))) {
        zk_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* The library never prints: the client's log lines go nowhere. */
static void zk_quiet(const char *message)
{
    (void)message;
}

static int zk_fail(const store_zk *m, int zrc, const char *doing, const char *node)
{
    int code = zrc == ZNOAUTH                                      ? SHARD_EPRIV
             : zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT ||
                       zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE ||
                       zrc == ZCLOSING || zrc == ZSESSIONMOVED
                 ? SHARD_ECONNECT
             : zrc == ZBADVERSION || zrc == ZNODEEXISTS ? SHARD_ECONFLICT
             : zrc == ZNONODE                           ? SHARD_ENOTFOUND
                                                        : SHARD_ESERVER;

    if (zrc == ZNOAUTH)
        return shard__fail(code, "%s: not allowed to %s %s (ZooKeeper ACL: %s%s%s)",
                          m->label, doing, node,
                          m->auth_env[0] ? "credentials from $" : "no credentials given; "
                                                                  "name them with auth_env=VAR",
                          m->auth_env, m->auth_env[0] ? " lack the permission" : "");
    return shard__fail(code, "%s: cannot %s %s: %s", m->label, doing, node, zerror(zrc));
}

static void arm_locked(store_zk *m);

/* The session watcher, on the client's completion thread. */
static void *reopen_main(void *arg);

static void session_event(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    store_zk *m = ctx;
    pthread_t t;

    (void)path;
    if (type != ZOO_SESSION_EVENT)
        return;
    pthread_mutex_lock(&m->lock);
    if (m->closing || zh != m->zh) { /* a replaced handle's last words */
        pthread_mutex_unlock(&m->lock);
        return;
    }
    if (state == ZOO_CONNECTED_STATE) {
        m->connected = m->ever_connected = true;
        /* The client sets its watches again by itself; reading current
         * again covers what was published while the session was down. */
        m->watch_set = false;
        arm_locked(m);
    } else if (state == ZOO_EXPIRED_SESSION_STATE) {
        m->connected = m->watch_set = false;
        if (m->reopeners == 0) {
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &attr, reopen_main, m) == 0)
                m->reopeners++;
            pthread_attr_destroy(&attr);
        }
    } else if (state == ZOO_AUTH_FAILED_STATE) {
        m->connected = m->watch_set = false;
        m->auth_failed = true;
    } else { /* connecting again */
        m->connected = m->watch_set = false;
    }
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
}

static int open_handle_locked(store_zk *m)
{
    int zrc;

    m->connected = m->watch_set = false;
    m->zh = zookeeper_init2(m->hosts, session_event, m->session_timeout_ms, NULL, m, 0,
                            zk_quiet);
    if (!m->zh)
        return shard__fail(errno == ENOMEM ? SHARD_ENOMEM : SHARD_EINVAL,
                          "%s: cannot start a ZooKeeper session: %s", m->label,
                          strerror(errno));
    /* Sent before any request, and again on every reconnection. */
    if (m->auth && (zrc = zoo_add_auth(m->zh, "digest", m->auth, (int)strlen(m->auth),
                                       NULL, NULL)) != ZOK)
        m->auth_failed = true;
    return 0;
}

/* An expired session cannot come back: a new one replaces it (the watch is
 * set again when it connects). Closing waits for the client's threads, so
 * it runs here, on a thread of its own. */
static void *reopen_main(void *arg)
{
    store_zk *m = arg;
    zhandle_t *old;

    pthread_rwlock_wrlock(&m->handle_lock);
    pthread_mutex_lock(&m->lock);
    old = m->zh;
    m->zh = NULL;
    pthread_mutex_unlock(&m->lock);
    if (old)
        zookeeper_close(old);
    pthread_mutex_lock(&m->lock);
    if (!m->closing)
        open_handle_locked(m); /* on failure, the next caller's load tries again */
    pthread_mutex_unlock(&m->lock);
    pthread_rwlock_unlock(&m->handle_lock);
    pthread_mutex_lock(&m->lock);
    m->reopeners--;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

static void zk_free(void *impl)
{
    store_zk *m = impl;
    zhandle_t *zh;

    if (!m)
        return;
    pthread_rwlock_wrlock(&m->handle_lock);
    pthread_mutex_lock(&m->lock);
    m->closing = true;
    zh = m->zh;
    m->zh = NULL;
    pthread_mutex_unlock(&m->lock);
    if (zh)
        zookeeper_close(zh); /* returns once no callback of ours can run */
    pthread_rwlock_unlock(&m->handle_lock);
    pthread_mutex_lock(&m->lock);
    while (m->reopeners > 0)
        pthread_cond_wait(&m->cond, &m->lock);
    pthread_mutex_unlock(&m->lock);
    shard__wipe_free(m->auth);
    pthread_rwlock_destroy(&m->handle_lock);
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->cond);
    free(m);
}

/*
 * The session, for a caller's synchronous calls: the caller holds
 * handle_lock shared until it is done with *zh. The first connection is
 * waited for; a session that is down fails at once (the client keeps
 * reconnecting by itself, and the hot path keeps its map meanwhile).
 */
static int session(store_zk *m, zhandle_t **zh)
{
    struct timespec deadline;
    int rc = 0;

    pthread_rwlock_rdlock(&m->handle_lock);
    pthread_mutex_lock(&m->lock);
    if (!m->zh && (rc = open_handle_locked(m)))
        goto out;
    if (!m->ever_connected) {
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += ZK_CONNECT_WAIT_MS / 1000;
        while (!m->connected && !m->auth_failed &&
               pthread_cond_timedwait(&m->cond, &m->lock, &deadline) == 0)
            ;
    }
    if (m->auth_failed)
        rc = shard__fail(SHARD_EPRIV, "%s: ZooKeeper refused the credentials in $%s",
                        m->label, m->auth_env);
    else if (!m->connected)
        rc = shard__fail(SHARD_ECONNECT, "%s: no ZooKeeper session (%s; servers %s)",
                        m->label, m->ever_connected ? "lost, reconnecting" :
                        "none answered within 5 s", m->hosts);
    else
        *zh = m->zh;
out:
    pthread_mutex_unlock(&m->lock);
    if (rc)
        pthread_rwlock_unlock(&m->handle_lock);
    return rc;
}

static void session_done(store_zk *m)
{
    pthread_rwlock_unlock(&m->handle_lock);
}

static void version_node(const store_zk *m, uint64_t version, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%020llu", m->versions, (unsigned long long)version);
}

/* A node's whole data: sized by its stat, read again if it grew between. */
static int read_node(store_zk *m, zhandle_t *zh, const char *node, char **out, int *len,
                     struct Stat *st)
{
    int zrc, size;
    char *buf;

    if ((zrc = zoo_exists(zh, node, 0, st)) != ZOK)
        return zk_fail(m, zrc, "read", node);
    for (;;) {
        size = st->dataLength > 0 ? st->dataLength : 1;
        if (!(buf = shard__malloc((size_t)size)))
            return shard__fail(SHARD_ENOMEM, "out of memory reading the map");
        *len = size;
        if ((zrc = zoo_get(zh, node, 0, buf, len, st)) != ZOK) {
            free(buf);
            return zk_fail(m, zrc, "read", node);
        }
        if (st->dataLength <= size)
            break;
        free(buf);
    }
    if (*len <= 0) {
        free(buf);
        return shard__fail(SHARD_EMAP, "%s: %s is empty", m->label, node);
    }
    *out = buf;
    return 0;
}

static int parse_node(store_zk *m, const char *node, const char *text, int len,
                      shard_map **out)
{
    int rc = shard_map_parse(out, text, (size_t)len);
    return rc ? shard__fail_prefix(rc, "%s: %s: ", m->label, node) : 0;
}

/*
 * The current map (NULL and version 0: none published) and the znode
 * version of current, the compare-and-set token. current holds a copy of
 * the current version's map, so that a watch costs one read.
 */
static int read_current(store_zk *m, zhandle_t *zh, shard_map **map, int32_t *zversion)
{
    struct Stat st;
    char *buf = NULL;
    int len, rc;

    *map = NULL;
    *zversion = -1;
    rc = read_node(m, zh, m->current, &buf, &len, &st);
    if (rc == SHARD_ENOTFOUND) {
        shard__clear_error();
        return 0;
    }
    if (rc)
        return rc;
    rc = parse_node(m, m->current, buf, len, map);
    free(buf);
    if (!rc)
        *zversion = st.version;
    return rc;
}

static int read_version(store_zk *m, zhandle_t *zh, uint64_t version, shard_map **out)
{
    char node[600], *buf = NULL;
    struct Stat st;
    int len, rc;

    version_node(m, version, node, sizeof node);
    rc = read_node(m, zh, node, &buf, &len, &st);
    if (rc == SHARD_ENOTFOUND)
        return shard__fail(SHARD_ENOTFOUND, "%s: no version %llu was published (no node %s)",
                          m->label, (unsigned long long)version, node);
    if (rc)
        return rc;
    rc = parse_node(m, node, buf, len, out);
    free(buf);
    if (!rc && (*out)->version != version) {
        rc = shard__fail(SHARD_EMAP, "%s: %s holds map version %llu", m->label, node,
                        (unsigned long long)(*out)->version);
        shard_map_free(*out);
        *out = NULL;
    }
    return rc;
}

static void note_read(store_zk *m, uint64_t version)
{
    pthread_mutex_lock(&m->lock);
    if (version > m->delivered)
        m->delivered = version;
    pthread_mutex_unlock(&m->lock);
}

static int zk_load(void *impl, shard_map **out)
{
    store_zk *m = impl;
    shard_map *map = NULL;
    zhandle_t *zh;
    int32_t zversion;
    int rc;

    if ((rc = session(m, &zh)))
        return rc;
    rc = read_current(m, zh, &map, &zversion);
    session_done(m);
    if (rc)
        return rc;
    if (!map)
        return shard__fail(SHARD_ENOTFOUND, "%s: no map has been published (no node %s)",
                          m->label, m->current);
    note_read(m, map->version);
    *out = map;
    return 0;
}

static int zk_load_version(void *impl, uint64_t version, shard_map **out)
{
    store_zk *m = impl;
    zhandle_t *zh;
    int rc;

    if ((rc = session(m, &zh)))
        return rc;
    rc = read_version(m, zh, version, out);
    session_done(m);
    return rc;
}

/* PATH and PATH/versions exist; *acl is PATH's (deallocate_ACL_vector it),
 * which every node libshard creates under PATH gets: set it once on PATH. */
static int make_dirs(store_zk *m, zhandle_t *zh, struct ACL_vector *acl)
{
    /* A PATH that libshard creates: its creator's (with credentials), else open. */
    struct ACL_vector *fresh = m->auth ? &ZOO_CREATOR_ALL_ACL : &ZOO_OPEN_ACL_UNSAFE;
    char prefix[sizeof m->path];
    struct Stat st;
    int zrc;

    bool have = false;

    if ((zrc = zoo_exists(zh, m->versions, 0, &st)) == ZOK) {
        have = true;
    } else if (zrc == ZNONODE) {
        for (size_t i = 1; m->path[i - 1]; i++) {
            if (m->path[i] != '/' && m->path[i] != '\0')
                continue;
            memcpy(prefix, m->path, i);
            prefix[i] = '\0';
            zrc = zoo_create(zh, prefix, NULL, -1, fresh, ZOO_PERSISTENT, NULL, 0);
            if (zrc != ZOK && zrc != ZNODEEXISTS)
                return zk_fail(m, zrc, "create", prefix);
        }
    } else if (zrc != ZOK) {
        return zk_fail(m, zrc, "read", m->versions);
    }
    memset(acl, 0, sizeof *acl);
    if ((zrc = zoo_get_acl(zh, m->path, acl, &st)) != ZOK)
        return zk_fail(m, zrc, "read the ACL of", m->path);
    if (have)
        return 0;
    zrc = zoo_create(zh, m->versions, NULL, -1, acl, ZOO_PERSISTENT, NULL, 0);
    if (zrc != ZOK && zrc != ZNODEEXISTS) {
        deallocate_ACL_vector(acl);
        return zk_fail(m, zrc, "create", m->versions);
    }
    return 0;
}

static uint64_t version_of(const shard_map *map)
{
    return map ? map->version : 0;
}

static int zk_publish(void *impl, const shard_map *map, uint64_t expected_version,
                      bool *unknown)
{
    store_zk *m = impl;
    char *text = NULL, node[600];
    struct ACL_vector acl = {0};
    zoo_op_t ops[2];
    zoo_op_result_t res[2];
    shard_map *cur = NULL;
    struct Stat st;
    zhandle_t *zh;
    int32_t zversion = -1;
    size_t len;
    int rc, zrc;

    if ((rc = shard_map_to_json(map, &text)))
        return rc;
    /* The map goes in twice (its version node and current), one request. */
    if ((len = strlen(text)) > ZK_MAX_MAP) {
        free(text);
        return shard__fail(SHARD_ETOOBIG, "%s: the map is %zu bytes; this store takes maps "
                          "of up to %d (a ZooKeeper request carries at most 1 MiB)",
                          m->label, len, ZK_MAX_MAP);
    }
    if ((rc = session(m, &zh))) {
        free(text);
        return rc;
    }
    if ((rc = read_current(m, zh, &cur, &zversion)))
        goto out;
    if (version_of(cur) != expected_version) {
        rc = shard__fail(SHARD_ECONFLICT, "%s: version is %llu, expected %llu (another "
                        "change was published first)", m->label,
                        (unsigned long long)version_of(cur),
                        (unsigned long long)expected_version);
        goto out;
    }
    if ((rc = make_dirs(m, zh, &acl)))
        goto out;
    version_node(m, map->version, node, sizeof node);
    zoo_create_op_init(&ops[0], node, text, (int)len, &acl, ZOO_PERSISTENT, NULL, 0);
    if (cur)
        zoo_set_op_init(&ops[1], m->current, text, (int)len, zversion, &st);
    else
        zoo_create_op_init(&ops[1], m->current, text, (int)len, &acl, ZOO_PERSISTENT, NULL,
                           0);
    zrc = zoo_multi(zh, 2, ops, res);
    if (zrc == ZBADVERSION || zrc == ZNODEEXISTS) {
        shard_map *now = NULL;
        int32_t zv;
        if (read_current(m, zh, &now, &zv))
            shard__clear_error();
        rc = shard__fail(SHARD_ECONFLICT, "%s: lost the compare-and-set on %s: another "
                        "publisher got there first (version is now %llu, expected %llu)",
                        m->label, m->current, (unsigned long long)version_of(now),
                        (unsigned long long)expected_version);
        shard_map_free(now);
    } else if (zrc != ZOK) {
        /* No answer (a lost connection, a timeout, a session gone): the
         * request may have been applied. An answer (ZNONODE, ZNOAUTH, ...)
         * says it was not. */
        *unknown = zrc > ZAPIERROR || zrc == ZSESSIONEXPIRED || zrc == ZCLOSING;
        rc = zk_fail(m, zrc, "publish",
                     res[0].err != ZOK && res[0].err != ZRUNTIMEINCONSISTENCY ? node
                                                                              : m->current);
    }
out:
    shard_map_free(cur);
    deallocate_ACL_vector(&acl);
    session_done(m);
    free(text);
    return rc;
}

/* ---- the watch: on the client's completion thread -------------------- */

static void current_changed(zhandle_t *zh, int type, int state, const char *path,
                            void *ctx);

static void exists_done(int zrc, const struct Stat *st, const void *data)
{
    (void)zrc, (void)st, (void)data; /* the watch it set is what counts */
}

/* current read (and watched again): hand its map on if it is newer. */
static void got_current(int zrc, const char *value, int len, const struct Stat *st,
                        const void *data)
{
    store_zk *m = (store_zk *)data;
    shard_map *map = NULL;
    store_watch_fn fn = NULL;
    void *payload = NULL;

    (void)st;
    if (zrc == ZOK && len > 0 && shard_map_parse(&map, value, (size_t)len) != 0)
        map = NULL; /* a bad map is not taken; the next publish is */
    pthread_mutex_lock(&m->lock);
    if (m->closing || !m->zh || !m->fn) {
        pthread_mutex_unlock(&m->lock);
        shard_map_free(map);
        return;
    }
    if (zrc == ZNONODE) { /* nothing published yet: watch for the first map */
        if (zoo_awexists(m->zh, m->current, current_changed, m, exists_done, NULL) == ZOK)
            m->watch_set = true;
    } else if (zrc == ZOK) {
        m->watch_set = true;
        if (map && map->version > m->delivered) {
            m->delivered = map->version;
            fn = m->fn;
            payload = m->payload;
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (fn)
        fn(map, payload); /* theirs now */
    else
        shard_map_free(map);
}

/* Read current and watch it: one request. Called with m->lock held; an
 * asynchronous call only queues work, it never calls back on this thread. */
static void arm_locked(store_zk *m)
{
    if (m->closing || !m->zh || !m->fn)
        return;
    zoo_awget(m->zh, m->current, current_changed, m, got_current, m);
}

static void current_changed(zhandle_t *zh, int type, int state, const char *path,
                            void *ctx)
{
    store_zk *m = ctx;

    (void)zh, (void)state, (void)path;
    if (type == ZOO_SESSION_EVENT) /* session_event sees it too, and re-arms */
        return;
    pthread_mutex_lock(&m->lock);
    m->watch_set = false;
    arm_locked(m);
    pthread_mutex_unlock(&m->lock);
}

static int zk_watch(void *impl, store_watch_fn fn, void *payload)
{
    store_zk *m = impl;
    int rc = 0;

    pthread_rwlock_rdlock(&m->handle_lock);
    pthread_mutex_lock(&m->lock);
    m->fn = fn;
    m->payload = payload;
    if (!m->zh)
        rc = open_handle_locked(m);
    else if (m->connected)
        arm_locked(m);
    /* else: armed when the session connects */
    pthread_mutex_unlock(&m->lock);
    pthread_rwlock_unlock(&m->handle_lock);
    return rc;
}

static bool zk_watch_live(void *impl)
{
    store_zk *m = impl;
    bool live;

    pthread_mutex_lock(&m->lock);
    live = m->connected && m->watch_set;
    pthread_mutex_unlock(&m->lock);
    return live;
}

int store_zk_session(shard_store *store, int64_t *id, char passwd[16])
{
    store_zk *m = store_impl(store, &store_zk_ops);
    int rc = -1;

    if (!m)
        return -1;
    pthread_mutex_lock(&m->lock);
    if (m->zh && m->connected) {
        const clientid_t *c = zoo_client_id(m->zh);
        *id = c->client_id;
        memcpy(passwd, c->passwd, 16);
        rc = 0;
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

const store_ops store_zk_ops = {
    .name = "zk",
    .scheme = "zk://",
    .open = zk_open,
    .free = zk_free,
    .load = zk_load,
    .load_version = zk_load_version,
    .publish = zk_publish,
    .watch = zk_watch,
    .watch_live = zk_watch_live,
};
