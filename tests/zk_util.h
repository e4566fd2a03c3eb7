/*
 * tests/zk_util.h: throwaway ZooKeeper servers for server tests and
 * benchmarks, through tests/zk.sh (found through LIBSHARD_TESTS_DIR, default
 * "tests"): a standalone server or an ensemble on 127.0.0.1, in a fresh
 * temporary folder. What zk_start started is stopped by zk_stop, and at exit
 * of the process that started it (atexit) otherwise. Also: ZooKeeper digest
 * ACLs for tests that set them by hand. Every function is static (each test
 * program is built on its own from its one .c file).
 */
#ifndef LIBSHARD_TESTS_ZK_UTIL_H
#define LIBSHARD_TESTS_ZK_UTIL_H

#define THREADED 1
#include <zookeeper/zookeeper.h>

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ZK_UTIL static __attribute__((unused))

typedef struct zk_servers {
    char dir[256];
    char hosts[256]; /* 127.0.0.1:PORT[,127.0.0.1:PORT...] */
    int n;
    pid_t owner;     /* the process that started them */
} zk_servers;

static zk_servers *zk_started[8];

static int zk_script(const zk_servers *z, const char *cmd, int id, char *out, size_t size)
{
    const char *dir = getenv("LIBSHARD_TESTS_DIR");
    char line[700];
    FILE *p;
    int status;

    /* id 0: every server (zk.sh takes no id for that). */
    if (id > 0)
        snprintf(line, sizeof line, "bash '%s/zk.sh' %s '%s' %d", dir ? dir : "tests", cmd,
                 z->dir, id);
    else
        snprintf(line, sizeof line, "bash '%s/zk.sh' %s '%s'", dir ? dir : "tests", cmd,
                 z->dir);
    if (!(p = popen(line, "r")))
        return -1;
    if (out && size) {
        out[0] = '\0';
        if (fgets(out, (int)size, p))
            out[strcspn(out, "\n")] = '\0';
    }
    while (fgetc(p) != EOF)
        ;
    status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void zk_remove(zk_servers *z)
{
    char line[300];
    snprintf(line, sizeof line, "rm -rf '%s'", z->dir);
    if (system(line) != 0)
        fprintf(stderr, "zk_util: cannot remove %s\n", z->dir);
}

ZK_UTIL void zk_stop(zk_servers *z)
{
    if (!z)
        return;
    for (size_t i = 0; i < sizeof zk_started / sizeof zk_started[0]; i++)
        if (zk_started[i] == z)
            zk_started[i] = NULL;
    zk_script(z, "stop", 0, NULL, 0);
    zk_remove(z);
    free(z);
}

static void zk_at_exit(void)
{
    for (size_t i = 0; i < sizeof zk_started / sizeof zk_started[0]; i++)
        if (zk_started[i] && zk_started[i]->owner == getpid())
            zk_stop(zk_started[i]);
}

/* zk_start in two halves, so that a program starts its servers while it
 * does something else: zk_start_begin launches tests/zk.sh (NULL if it
 * cannot), zk_start_end waits for it, then as zk_start. */
typedef struct zk_pending {
    zk_servers *z;
    FILE *p;
} zk_pending;

ZK_UTIL zk_pending zk_start_begin(int n)
{
    const char *tmp = getenv("TMPDIR"), *tests = getenv("LIBSHARD_TESTS_DIR");
    zk_pending pend = {calloc(1, sizeof *pend.z), NULL};
    char line[700];

    if (!pend.z)
        return pend;
    snprintf(pend.z->dir, sizeof pend.z->dir, "%s/libshard-zk.XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(pend.z->dir)) {
        perror("zk_util: mkdtemp");
        free(pend.z);
        pend.z = NULL;
        return pend;
    }
    pend.z->n = n;
    pend.z->owner = getpid();
    snprintf(line, sizeof line, "bash '%s/zk.sh' start '%s' %d", tests ? tests : "tests",
             pend.z->dir, n);
    if (!(pend.p = popen(line, "r"))) {
        zk_remove(pend.z);
        free(pend.z);
        pend.z = NULL;
    }
    return pend;
}

/* NULL on failure (the reason on stderr; nothing is left running). */
ZK_UTIL zk_servers *zk_start_end(zk_pending pend)
{
    static int registered;
    zk_servers *z = pend.z;
    int status;

    if (!z)
        return NULL;
    if (!fgets(z->hosts, (int)sizeof z->hosts, pend.p))
        z->hosts[0] = '\0';
    z->hosts[strcspn(z->hosts, "\n")] = '\0';
    while (fgetc(pend.p) != EOF)
        ;
    status = pclose(pend.p);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !z->hosts[0]) {
        fprintf(stderr, "zk_util: ZooKeeper did not start\n");
        zk_script(z, "stop", 0, NULL, 0);
        zk_remove(z);
        free(z);
        return NULL;
    }
    if (!registered++)
        atexit(zk_at_exit);
    for (size_t slot = 0; slot < sizeof zk_started / sizeof zk_started[0]; slot++)
        if (!zk_started[slot]) {
            zk_started[slot] = z;
            break;
        }
    return z;
}

/* n = 1: a standalone server; 3: an ensemble. NULL on failure (the reason
 * on stderr; nothing is left running). */
ZK_UTIL zk_servers *zk_start(int n)
{
    return zk_start_end(zk_start_begin(n));
}

/* Server id (1..n): stop cleanly, SIGKILL, or start again (same port and
 * data; returns once it serves). The script's exit status. */
ZK_UTIL int zk_stop_server(zk_servers *z, int id) { return zk_script(z, "stop", id, NULL, 0); }
ZK_UTIL int zk_kill_server(zk_servers *z, int id) { return zk_script(z, "kill", id, NULL, 0); }
ZK_UTIL int zk_restart_server(zk_servers *z, int id)
{
    return zk_script(z, "restart", id, NULL, 0);
}

/* "zk://HOSTS/PATH" plus "?" and query when query is not NULL; malloc'd. */
ZK_UTIL char *zk_location(const zk_servers *z, const char *path, const char *query)
{
    char *s = NULL;
    if (asprintf(&s, "zk://%s%s%s%s", z->hosts, path, query ? "?" : "", query ? query : "") < 0)
        return NULL;
    return s;
}

/* ZooKeeper's digest id of USER:PASSWORD: USER:base64(sha1(USER:PASSWORD)). */
ZK_UTIL void zk_digest_id(const char *cred, char *out, size_t size)
{
    unsigned char md[EVP_MAX_MD_SIZE], b64[64];
    unsigned mdlen = 0;
    const char *colon = strchr(cred, ':');

    EVP_Digest(cred, strlen(cred), md, &mdlen, EVP_sha1(), NULL);
    EVP_EncodeBlock(b64, md, (int)mdlen);
    snprintf(out, size, "%.*s:%s", (int)(colon - cred), cred, (const char *)b64);
}

static void zk_quiet_log(const char *message)
{
    (void)message;
}

/* A connected handle of the C client, as cred (NULL: no credentials),
 * waiting at most 10 s; NULL on failure. zookeeper_close() it. */
ZK_UTIL zhandle_t *zk_raw_connect(const zk_servers *z, const char *cred)
{
    zhandle_t *zh = zookeeper_init2(z->hosts, NULL, 10000, NULL, NULL, 0, zk_quiet_log);

    for (int i = 0; zh && i < 1000 && zoo_state(zh) != ZOO_CONNECTED_STATE; i++)
        usleep(10000);
    if (zh && zoo_state(zh) != ZOO_CONNECTED_STATE) {
        zookeeper_close(zh);
        return NULL;
    }
    if (zh && cred)
        zoo_add_auth(zh, "digest", cred, (int)strlen(cred), NULL, NULL);
    return zh;
}

#endif
