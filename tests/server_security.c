/*
 * Security against real servers: TLS (verified, missing, the wrong CA,
 * verification off, client certificates, kept across a restart), secrets
 * that never leak (log messages at debug level, every error message,
 * shardctl's output, the map's JSON, the move journal), and least
 * privilege: each role's operations run with an account holding exactly
 * the privileges listed here, and the operations of other roles fail early,
 * clearly, changing nothing.
 *
 * Privileges by role, MariaDB 10.11. The mover's and failover's lists were
 * found by removing candidate privileges one at a time, under writes, until
 * every one left was needed: `LIBSHARD_PRIV_SEARCH=1 build/tests/server_security`
 * derives them again (about 100 s).
 * Accounts are per server and roles change servers (a standby becomes
 * master, a move goes either way): create each on every server. In a
 * GRANT's database name `_` and `%` are wildcards: `db%` means "every
 * database whose name starts with db" (pick a database_format whose prefix
 * only shards use) and a literal underscore is `\_`, as in
 * `libshard\_control`.
 *
 *  application (objects, mappings, key-value, multi-get, transactions,
 *  scatter):
 *    GRANT SELECT, INSERT, UPDATE, DELETE ON `db%`.*       TO app;
 *    GRANT SELECT, INSERT, UPDATE, DELETE ON `modshard%`.* TO app;
 *    GRANT SELECT ON `libshard\_control`.* TO app;  (the move's fence)
 *  (SELECT ON libshard_control.fence alone is enough, once schema apply has
 *  made the table: MariaDB refuses a grant on a table that does not exist),
 *  SELECT on the map store's table when the map is in a MySQL store, and
 *  never READ_ONLY ADMIN (or SUPER): read_only is the failover's fence.
 *  tests/servers.sh gives its application account `shard` these (its map
 *  stores are in libshard_maps); app_account_cannot_operate checks it.
 *
 *  schema (shard_schema_apply):
 *    GRANT CREATE ON `db%`.*       TO schema;
 *    GRANT CREATE ON `modshard%`.* TO schema;
 *    GRANT CREATE ON `libshard\_control`.* TO schema;
 *    GRANT SELECT ON libshard_control.fence TO schema;
 *    GRANT BINLOG ADMIN ON *.* TO schema;  (the fence table is made unlogged)
 *
 *  mover (shard_move, shard_move_resume, shard_move_abort, shard_move_status):
 *    GRANT SELECT, INSERT, CREATE, DROP, LOCK TABLES ON `db%`.*      TO mover;
 *    GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER ON `libshard\_control`.* TO mover;
 *    GRANT RELOAD, BINLOG ADMIN, REPLICATION SLAVE, REPLICATION SLAVE ADMIN,
 *          SLAVE MONITOR ON *.* TO mover;
 *  The target master replicates from the source master as this account,
 *  with the map's credentials.tls (paths valid on the target server).
 *  Reasons, privilege by privilege, at MOVER_GRANTS.
 *
 *  failover (shard_pair_failover), on both servers of the pair:
 *    GRANT SLAVE MONITOR, READ_ONLY ADMIN ON *.* TO failover;
 *    GRANT SELECT ON `mysql`.* TO failover;  (the application's grants)
 *    GRANT SELECT ON `libshard\_control`.* TO failover;  (unfinished moves)
 *  Reasons at FAILOVER_GRANTS.
 */
#include "check_util.h"
#include "harness.h"

#include "ctx.h" /* private: to ask a pooled connection for its TLS cipher */

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libshard.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* A gap in the library found by this test and reported, not yet fixed:
 * printed rather than asserted. Make it a ck_assert_msg once fixed. */
#define KNOWN_GAP(ok, ...)                                                      \
    do {                                                                        \
        if (!(ok)) {                                                            \
            printf("known gap: ");                                              \
            printf(__VA_ARGS__);                                                \
            printf("\n");                                                       \
        }                                                                       \
    } while (0)

/* What the application needs: rows, never schema. */
static const char *const APP_GRANTS[] = {
    "SELECT, INSERT, UPDATE, DELETE ON `db%`.*",
    "SELECT, INSERT, UPDATE, DELETE ON `modshard%`.*",
    "SELECT ON `libshard\\_control`.*",
};

/* What shard_schema_apply needs. */
static const char *const SCHEMA_GRANTS[] = {
    "CREATE ON `db%`.*",
    "CREATE ON `modshard%`.*",
    "CREATE ON `libshard\\_control`.*",
    "SELECT ON libshard_control.fence",
    "BINLOG ADMIN ON *.*",
};

/* What a move needs, each line for a reason:
 *  - SELECT, INSERT, CREATE, DROP on the shard databases: read the
 *    source, create and fill the target, drop the source copy after
 *    verification;
 *  - SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER on libshard_control: the
 *    move journal (created on first use; ALTER sets its AUTO_INCREMENT) and
 *    the fence rows (inserted, updated to fence, deleted after cleanup);
 *  - LOCK TABLES on the shard databases: the moved tables held against
 *    writes while the copy threads open their snapshots of one state;
 *  - RELOAD: RESET SLAVE, when a move's connection goes;
 *  - BINLOG ADMIN: SET sql_log_bin = 0, so the fence never replicates;
 *  - REPLICATION SLAVE: the target's catch-up connection reads the
 *    source's binary log as this account;
 *  - REPLICATION SLAVE ADMIN: CHANGE MASTER, START/STOP SLAVE, SET GLOBAL
 *    gtid_slave_pos and the connection's replicate_do_db, RESET SLAVE;
 *  - SLAVE MONITOR: SHOW ALL SLAVES STATUS (which connections to restart,
 *    and the catch-up connection's health). */
static const char *const MOVER_GRANTS[] = {
    "SELECT ON `db%`.*",
    "INSERT ON `db%`.*",
    "CREATE ON `db%`.*",
    "DROP ON `db%`.*",
    "LOCK TABLES ON `db%`.*",
    "SELECT ON `libshard\\_control`.*",
    "INSERT ON `libshard\\_control`.*",
    "UPDATE ON `libshard\\_control`.*",
    "DELETE ON `libshard\\_control`.*",
    "CREATE ON `libshard\\_control`.*",
    "ALTER ON `libshard\\_control`.*",
    "RELOAD ON *.*",
    "BINLOG ADMIN ON *.*",
    "REPLICATION SLAVE ON *.*",
    "REPLICATION SLAVE ADMIN ON *.*",
    "SLAVE MONITOR ON *.*",
};

/* What a failover needs: SHOW SLAVE STATUS on the standby (SLAVE MONITOR),
 * SET GLOBAL read_only on both servers (READ_ONLY ADMIN), the application
 * account's grants, to check that the fence holds (SELECT on the mysql
 * schema: mysql.user and SHOW GRANTS FOR another account), and the move
 * journal on every master, to check that no move is unfinished (SELECT on
 * libshard_control; the check fails closed when it cannot read it). */
static const char *const FAILOVER_GRANTS[] = {
    "SLAVE MONITOR ON *.*",
    "READ_ONLY ADMIN ON *.*",
    "SELECT ON `mysql`.*",
    "SELECT ON `libshard\\_control`.*",
};

static const char *const SERVERS[] = {"s1", "s2", "s3", "s4"};

/* Every password this test uses; none may ever show. */
static const char *const SECRETS[] = {"LIBSHARD_PASSWORD", "TLSUSER_PASSWORD",
                                      "APP_PASSWORD",      "SCHEMA_PASSWORD",
                                      "MOVER_PASSWORD",    "FAILOVER_PASSWORD",
                                      "WRONG_PASSWORD",    "SHORT_PASSWORD"};

static harness *h;
static char certdir[PATH_MAX];
/* Maps for one account each, beside the certificates. */
static char map_tls[PATH_MAX + 32], map_notls[PATH_MAX + 32], map_wrongca[PATH_MAX + 32],
    map_noverify[PATH_MAX + 32], map_noverify_wrongca[PATH_MAX + 32],
    map_cert[PATH_MAX + 32], map_certless[PATH_MAX + 32], map_missingca[PATH_MAX + 32],
    map_wrongpw[PATH_MAX + 32], map_pwinmap[PATH_MAX + 32], map_unsetenv[PATH_MAX + 32],
    map_broken[PATH_MAX + 32], map_brokenpw[PATH_MAX + 32];
static uint64_t tls_ids[2]; /* made through TLS on shards 0 and 2 */
static uint64_t app_ids[4]; /* made by the application account, shards 0..3 */
static int search_mode;

/* ---- captured output: log messages and error messages -------------------- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char *logbuf;
static size_t loglen, logcap;
static unsigned nlogs, nerrs, nctl;

static void on_log(int level, const char *message, void *payload)
{
    size_t n = strlen(message) + 8;
    (void)payload;
    pthread_mutex_lock(&log_lock);
    if (loglen + n + 1 > logcap && logcap < (8u << 20)) {
        size_t cap = logcap ? logcap * 2 : 65536;
        char *b;
        while (cap < loglen + n + 1)
            cap *= 2;
        if ((b = realloc(logbuf, cap))) {
            logbuf = b;
            logcap = cap;
        }
    }
    if (loglen + n + 1 <= logcap)
        loglen += (size_t)snprintf(logbuf + loglen, logcap - loglen, "%d %s\n", level, message);
    nlogs++;
    pthread_mutex_unlock(&log_lock);
}

static void no_secret(const char *what, const char *text)
{
    for (size_t i = 0; i < NELEM(SECRETS); i++) {
        const char *pw = getenv(SECRETS[i]);
        ck_assert_ptr_nonnull(pw);
        ck_assert_msg(!strstr(text, pw), "%s shows $%s: %s", what, SECRETS[i], text);
    }
}

/* The detailed message of the last failure, checked for passwords. */
static const char *errmsg(void)
{
    const char *m = shard_errmsg();
    no_secret("shard_errmsg()", m);
    nerrs++;
    return m;
}

static void logs_hold_no_secret(void)
{
    pthread_mutex_lock(&log_lock);
    no_secret("a log message", logbuf ? logbuf : "");
    pthread_mutex_unlock(&log_lock);
}

/* ---- helpers -------------------------------------------------------------- */

static void random_secret(const char *env, const char *prefix, size_t bytes)
{
    unsigned char raw[16];
    char v[64];
    size_t n;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

    if (bytes > sizeof raw || fd < 0 || read(fd, raw, bytes) != (ssize_t)bytes) {
        perror("/dev/urandom");
        exit(1);
    }
    close(fd);
    n = (size_t)snprintf(v, sizeof v, "%s", prefix);
    for (size_t i = 0; i < bytes; i++)
        n += (size_t)snprintf(v + n, sizeof v - n, "%02x", raw[i]);
    setenv(env, v, 1);
}

static void sql_all(const char *sql)
{
    for (size_t i = 0; i < NELEM(SERVERS); i++)
        free(sql_ok(h, SERVERS[i], sql));
}

/* (Re)create `user` on every server with exactly `grants` (not replicated:
 * each server gets its own account, as servers.sh makes them). */
static void account(const char *user, const char *pwenv, const char *require,
                    const char *const *grants, size_t n, unsigned skip)
{
    char sql[8192];
    size_t len;

    len = (size_t)snprintf(sql, sizeof sql,
                           "SET sql_log_bin = 0;\n"
                           "DROP USER IF EXISTS '%s'@'127.0.0.1';\n"
                           "CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s'%s%s;\n",
                           user, user, getenv(pwenv), require ? " REQUIRE " : "",
                           require ? require : "");
    for (size_t i = 0; i < n; i++)
        if (!(skip & (1u << i)))
            len += (size_t)snprintf(sql + len, sizeof sql - len,
                                    "GRANT %s TO '%s'@'127.0.0.1';\n", grants[i], user);
    ck_assert_uint_lt(len, sizeof sql);
    sql_all(sql);
}

/* A copy of the harness's map with other credentials (cred is stolen). */
static void write_map(char *path, size_t size, const char *name, json_t *cred)
{
    json_error_t e;
    json_t *m = json_load_file(harness_map_path(h), 0, &e);

    ck_assert_msg(m != NULL, "%s", e.text);
    ck_assert_ptr_nonnull(cred);
    snprintf(path, size, "%s/%s", certdir, name);
    json_object_set_new(m, "credentials", cred);
    ck_assert_int_eq(json_dump_file(m, path, JSON_INDENT(2)), 0);
    json_decref(m);
}

static void write_text(char *path, size_t size, const char *name, const char *text)
{
    FILE *f;
    snprintf(path, size, "%s/%s", certdir, name);
    ck_assert_ptr_nonnull(f = fopen(path, "w"));
    fputs(text, f);
    fclose(f);
}

static json_t *tls_cred(const char *user, const char *pwenv, const char *ca, int verify,
                        const char *cert, const char *key)
{
    char p[3][PATH_MAX + 32];
    json_t *tls = json_object();

    if (ca) {
        snprintf(p[0], sizeof p[0], "%s/%s", certdir, ca);
        json_object_set_new(tls, "ca", json_string(p[0]));
    }
    if (cert) {
        snprintf(p[1], sizeof p[1], "%s/%s", certdir, cert);
        snprintf(p[2], sizeof p[2], "%s/%s", certdir, key);
        json_object_set_new(tls, "cert", json_string(p[1]));
        json_object_set_new(tls, "key", json_string(p[2]));
    }
    json_object_set_new(tls, "verify", json_boolean(verify));
    return json_pack("{s:s, s:s, s:o}", "user", user, "password_env", pwenv, "tls", tls);
}

static json_t *plain_cred(const char *user, const char *pwenv)
{
    return json_pack("{s:s, s:s}", "user", user, "password_env", pwenv);
}

static shard_ctx *try_open(const char *map, const char *user, const char *pwenv, int *rc)
{
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *c = NULL;

    o.refresh_interval_ms = 0;
    o.connect_timeout_ms = 1000;
    o.retry_budget_ms = 1500;
    o.log = on_log;
    o.log_level = SHARD_LOG_DEBUG;
    o.user = user;
    o.password_env = pwenv;
    *rc = shard_ctx_open(&c, map, &o);
    return c;
}

static shard_ctx *open_as(const char *map, const char *user, const char *pwenv)
{
    int rc;
    shard_ctx *c = try_open(map, user, pwenv, &rc);
    ck_assert_msg(rc == 0, "open %s as %s: %s", map, user ? user : "the map's user", errmsg());
    return c;
}

/* The cipher of a pooled connection to pair 0's master, as the server sees
 * it ("" when the connection is not encrypted). */
static void server_cipher(shard_ctx *c, char *out, size_t size)
{
    shard_map *m = ctx_map(c);
    shard_server *s = ctx_server(c, m, 0);
    shard_conn *conn = NULL;
    MYSQL_RES *res;
    MYSQL_ROW row;

    out[0] = '\0';
    ck_assert_int_eq(conn_get(c, s, &conn), 0);
    ck_assert_int_eq(conn_query_str(conn, "SHOW SESSION STATUS LIKE 'Ssl_cipher'"), 0);
    ck_assert_ptr_nonnull(res = mysql_store_result(conn->my));
    if ((row = mysql_fetch_row(res)) && row[1])
        snprintf(out, size, "%s", row[1]);
    mysql_free_result(res);
    conn_put(conn, true);
    shard_map_free(m);
}

static uint64_t map_version(const char *path)
{
    shard_map *m = NULL;
    uint64_t v;
    ck_assert_msg(shard_map_load(&m, path) == 0, "%s", errmsg());
    v = shard_map_version(m);
    shard_map_free(m);
    return v;
}

static const char *pair_in_file(const char *path, unsigned shard)
{
    static char name[65];
    shard_map *m = NULL;
    const char *p = "?";
    ck_assert_int_eq(shard_map_load(&m, path), 0);
    shard_map_pair_of(m, shard, &p);
    snprintf(name, sizeof name, "%s", p);
    shard_map_free(m);
    return name;
}

static const char *master_server(const char *pair)
{
    static char s[8];
    shard_map *m = NULL;
    const char *master = NULL, *standby = NULL;
    char want[32];
    ck_assert_int_eq(shard_map_load(&m, harness_map_path(h)), 0);
    ck_assert_int_eq(shard_map_pair_addrs(m, pair, &master, &standby), 0);
    snprintf(s, sizeof s, "?");
    for (size_t i = 0; i < NELEM(SERVERS); i++) {
        snprintf(want, sizeof want, "127.0.0.1:%d", harness_port(h, SERVERS[i]));
        if (strcmp(master, want) == 0)
            snprintf(s, sizeof s, "%s", SERVERS[i]);
    }
    shard_map_free(m);
    return s;
}

static int db_exists(const char *server, const char *db)
{
    char sql[200], *out;
    int yes;
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE "
             "SCHEMA_NAME = '%s'", db);
    out = sql_ok(h, server, sql);
    yes = strcmp(out, "0\n") != 0;
    free(out);
    return yes;
}

/* Every server's pair link runs (the moves and failovers stop and start it). */
static void pair_links_run(void)
{
    for (size_t i = 0; i < NELEM(SERVERS); i++) {
        char *out = NULL;
        for (int t = 0; t < 100; t++) {
            free(out);
            out = sql_ok(h, SERVERS[i], "SELECT COUNT(*) FROM information_schema.GLOBAL_STATUS"
                                     " WHERE VARIABLE_NAME = 'SLAVES_RUNNING'"
                                     " AND VARIABLE_VALUE = '1'");
            if (strcmp(out, "1\n") == 0)
                break;
            usleep(50000);
        }
        ck_assert_msg(strcmp(out, "1\n") == 0, "%s: the pair link is not running",
                      SERVERS[i]);
        free(out);
    }
}

/* shardctl with args (a shell word list), stdout and stderr together. */
static char *shardctl(const char *args, int *status)
{
    const char *ctl = getenv("SHARDCTL");
    char cmd[4 * PATH_MAX], *buf = NULL;
    size_t len = 0, cap = 0;
    FILE *p;
    int st;

    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1 </dev/null", ctl && *ctl ? ctl : "build/shardctl",
             args);
    ck_assert_ptr_nonnull(p = popen(cmd, "r"));
    for (;;) {
        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 8192;
            ck_assert_ptr_nonnull(buf = realloc(buf, cap));
        }
        size_t r = fread(buf + len, 1, cap - len - 1, p);
        if (r == 0)
            break;
        len += r;
    }
    buf[len] = '\0';
    st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    no_secret("shardctl's output", buf);
    nctl++;
    return buf;
}

static void shardctl_expect(int want, const char *args)
{
    int st;
    char *out = shardctl(args, &st);
    ck_assert_msg(st == want, "shardctl %s: exit %d, wanted %d: %s", args, st, want, out);
    free(out);
}

/* ---- TLS ------------------------------------------------------------------ */

START_TEST(tls_verified_connection_works)
{
    shard_ctx *c = open_as(map_tls, NULL, NULL);
    char *json = NULL, cipher[128], *v = NULL;
    size_t len, vlen;

    for (int i = 0; i < 2; i++) {
        ck_assert_msg(shard_object_create(c, 1, 2u * (unsigned)i, "{\"tls\":true}", 12,
                                          &tls_ids[i]) == 0, "create: %s", errmsg());
        ck_assert_msg(shard_object_get(c, tls_ids[i], &json, &len) == 0, "%s", errmsg());
        ck_assert_ptr_nonnull(strstr(json, "\"tls\":true"));
        shard_free(json);
    }
    ck_assert_msg(shard_kv_put(c, "users_by_email", "a@b", 3, "1", 1) == 0, "%s", errmsg());
    ck_assert_int_eq(shard_kv_get(c, "users_by_email", "a@b", 3, &v, &vlen), 0);
    ck_assert_str_eq(v, "1");
    shard_free(v);
    /* The account requires TLS, so the operations above prove it was used;
     * the server's view of the connection says so too. */
    server_cipher(c, cipher, sizeof cipher);
    ck_assert_msg(cipher[0], "the library's connection is not encrypted");
    printf("tls: verified connection, cipher %s\n", cipher);
    shard_ctx_free(c);
}
END_TEST

START_TEST(tls_missing_from_map_is_refused)
{
    shard_ctx *c = open_as(map_notls, NULL, NULL);
    char *json = NULL;
    size_t len;
    int rc = shard_object_get(c, tls_ids[0], &json, &len);
    const char *m = errmsg();

    /* The server says only "Access denied" (it never tells a client why). */
    ck_assert_msg(rc == SHARD_EPRIV, "rc %d: %s", rc, m);
    ck_assert_msg(strstr(m, "Access denied for user 'tlsuser'"), "%s", m);
    ck_assert_msg(strstr(m, "cannot connect"), "%s", m);
    printf("tls: no \"tls\" for a REQUIRE SSL account: %s: %s\n", shard_strerror(rc), m);
    shard_ctx_free(c);
}
END_TEST

START_TEST(tls_wrong_ca_fails_verification)
{
    shard_ctx *c = open_as(map_wrongca, NULL, NULL);
    char *json = NULL;
    size_t len;
    int rc = shard_object_get(c, tls_ids[0], &json, &len);
    const char *m = errmsg();

    ck_assert_msg(rc == SHARD_ETLS, "rc %d: %s", rc, m);
    ck_assert_msg(strstr(m, "certificate") || strstr(m, "verif"), "%s", m);
    printf("tls: server certificate from an unrelated CA: %s: %s\n", shard_strerror(rc), m);
    shard_ctx_free(c);
}
END_TEST

START_TEST(tls_missing_ca_file_is_clear)
{
    shard_ctx *c = open_as(map_missingca, NULL, NULL);
    char *json = NULL;
    size_t len;
    int rc = shard_object_get(c, tls_ids[0], &json, &len);
    const char *m = errmsg();

    ck_assert_msg(rc == SHARD_ETLS, "rc %d: %s", rc, m);
    printf("tls: tls.ca names a missing file: %s: %s\n", shard_strerror(rc), m);
    /* Connector/C falls back to the system's CAs when it cannot read the
     * file: the message is about verification, not about the file. */
    KNOWN_GAP(strstr(m, "no-such-ca.pem"), "a missing tls.ca file is not named: %s", m);
    shard_ctx_free(c);
}
END_TEST

START_TEST(tls_without_verification_connects)
{
    /* "verify": false without a "ca": encrypted, but the server is not
     * authenticated (any certificate is taken, whoever signed it, for any
     * host name): a man in the middle can read everything. */
    shard_ctx *c = open_as(map_noverify, NULL, NULL);
    char *json = NULL, cipher[128];
    size_t len;
    int rc;

    ck_assert_msg(shard_object_get(c, tls_ids[0], &json, &len) == 0, "%s", errmsg());
    shard_free(json);
    server_cipher(c, cipher, sizeof cipher);
    ck_assert(cipher[0]);
    shard_ctx_free(c);
    /* With a "ca", the chain is still checked against it whatever "verify"
     * says (Connector/C verifies the peer whenever it has a CA); "verify"
     * only turns the host name check on and off. */
    c = open_as(map_noverify_wrongca, NULL, NULL);
    rc = shard_object_get(c, tls_ids[0], &json, &len);
    KNOWN_GAP(rc == 0, "\"verify\": false with an unrelated \"ca\" still verifies the "
              "chain: %s: %s", shard_strerror(rc), errmsg());
    if (rc == 0)
        shard_free(json);
    shard_ctx_free(c);
}
END_TEST

START_TEST(tls_client_certificate)
{
    shard_ctx *c = open_as(map_cert, NULL, NULL);
    char *json = NULL;
    size_t len;
    int rc;

    ck_assert_msg(shard_object_get(c, tls_ids[1], &json, &len) == 0, "%s", errmsg());
    shard_free(json);
    shard_ctx_free(c);
    /* REQUIRE X509 without a client certificate: refused. */
    c = open_as(map_certless, NULL, NULL);
    rc = shard_object_get(c, tls_ids[1], &json, &len);
    ck_assert_msg(rc == SHARD_EPRIV, "rc %d: %s", rc, errmsg());
    ck_assert_ptr_nonnull(strstr(errmsg(), "Access denied for user 'x509user'"));
    shard_ctx_free(c);
}
END_TEST

/* A MySQL map store over TLS: the same rules. */
START_TEST(tls_map_store)
{
    shard_store *st = NULL;
    shard_map *m = NULL, *back = NULL;
    char uri[PATH_MAX + 256];
    int rc;

    ck_assert_int_eq(shard_map_load(&m, map_tls), 0);
    snprintf(uri, sizeof uri, "mysql://tlsuser@127.0.0.1:%d/libshard_maps/maps?"
             "password_env=TLSUSER_PASSWORD&tls_ca=%s/ca.pem", harness_port(h, "s1"), certdir);
    ck_assert_int_eq(shard_store_open(&st, uri), 0);
    ck_assert_msg(shard_store_publish(st, m, 0) == 0, "%s", errmsg());
    ck_assert_msg(shard_store_load(st, &back) == 0, "%s", errmsg());
    ck_assert_uint_eq(shard_map_version(back), shard_map_version(m));
    shard_map_free(back);
    shard_store_free(st);
    snprintf(uri, sizeof uri, "mysql://tlsuser@127.0.0.1:%d/libshard_maps/maps?"
             "password_env=TLSUSER_PASSWORD&tls_ca=%s/other-ca.pem", harness_port(h, "s1"),
             certdir);
    ck_assert_int_eq(shard_store_open(&st, uri), 0);
    rc = shard_store_load(st, &back);
    printf("tls: map store, unrelated CA: %s: %s\n", shard_strerror(rc), errmsg());
    ck_assert_int_ne(rc, 0);
    KNOWN_GAP(rc == SHARD_ETLS, "the MySQL map store reports a TLS failure as %s",
              shard_strerror(rc));
    ck_assert_msg(strstr(errmsg(), "certificate") || strstr(errmsg(), "verif"), "%s",
                  errmsg());
    shard_store_free(st);
    shard_map_free(m);
}
END_TEST

/* ---- secrets -------------------------------------------------------------- */

START_TEST(passwords_never_show)
{
    shard_ctx *c;
    shard_map *m = NULL;
    shard_store *st = NULL;
    shard_item *items = NULL;
    shard_failover_report fr = SHARD_FAILOVER_REPORT_INIT;
    shard_move_options dry = SHARD_MOVE_OPTIONS_INIT;
    char *json = NULL, *plan = NULL, *text = NULL, args[4 * PATH_MAX], uri[512];
    size_t len;
    uint64_t id;
    int rc;

    /* Wrong passwords, the map's account and an operator's. */
    c = open_as(map_wrongpw, NULL, NULL);
    rc = shard_object_get(c, tls_ids[0], &json, &len);
    ck_assert_msg(rc == SHARD_EPRIV, "rc %d: %s", rc, errmsg());
    ck_assert_ptr_nonnull(strstr(errmsg(), "using password: YES"));
    shard_ctx_free(c);
    c = open_as(map_tls, "shardadmin", "WRONG_PASSWORD");
    ck_assert_int_eq(shard_object_create(c, 1, 0, "{}", 2, &id), SHARD_EPRIV);
    errmsg();
    ck_assert_int_eq(shard_pair_failover(c, "MySQL001", 0, &fr), SHARD_EPRIV);
    errmsg();
    shard_ctx_free(c);

    /* Bad maps. */
    ck_assert_ptr_null(try_open(map_pwinmap, NULL, NULL, &rc));
    ck_assert_int_eq(rc, SHARD_EMAP);
    ck_assert_msg(strstr(errmsg(), "credentials.password: passwords never sit in the map"),
                  "%s", errmsg());
    ck_assert_ptr_null(try_open(map_unsetenv, NULL, NULL, &rc));
    ck_assert_int_eq(rc, SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(errmsg(), "LIBSHARD_NO_SUCH_VARIABLE"));
    ck_assert_ptr_null(try_open(map_broken, NULL, NULL, &rc));
    ck_assert_int_eq(rc, SHARD_EMAP);
    errmsg();
    /* A map store location with a password in it, the way URLs often carry one. */
    snprintf(uri, sizeof uri, "mysql://shard:%s@127.0.0.1:%d/libshard_maps/maps",
             getenv("LIBSHARD_PASSWORD"), harness_port(h, "s1"));
    ck_assert_int_eq(shard_store_open(&st, uri), SHARD_EINVAL);
    KNOWN_GAP(!strstr(shard_errmsg(), getenv("LIBSHARD_PASSWORD")),
              "a map store location's error message quotes the password in it: %s",
              shard_errmsg());

    /* Unknown pairs, then a dead master (kept after a restart: TLS too). */
    c = open_as(map_tls, NULL, NULL);
    ck_assert_int_eq(shard_move(c, 0, 0, "MySQL009", NULL, NULL, NULL), SHARD_EINVAL);
    errmsg();
    ck_assert_int_eq(shard_pair_failover(c, "MySQL009", 0, &fr), SHARD_EINVAL);
    errmsg();
    ck_assert_int_eq(harness_kill(h, "s3"), 0);
    rc = shard_object_get(c, tls_ids[1], &json, &len);
    ck_assert_msg(rc == SHARD_ECONNECT || rc == SHARD_ETIMEOUT, "rc %d: %s", rc, errmsg());
    errmsg();
    rc = shard_object_mget(c, tls_ids, 2, &items);
    ck_assert_int_eq(rc, SHARD_EPARTIAL);
    errmsg();
    ck_assert_int_eq(items[0].status, 0);
    ck_assert_int_ne(items[1].status, 0);
    shard_items_free(items, 2);
    snprintf(args, sizeof args, "--map '%s' obj get %llu", map_tls,
             (unsigned long long)tls_ids[1]);
    shardctl_expect(1, args);
    ck_assert_int_eq(harness_restart(h, "s3"), 0);
    ck_assert_msg(shard_object_get(c, tls_ids[1], &json, &len) == 0, "%s", errmsg());
    shard_free(json);

    /* Successful calls whose text could carry a password. */
    dry.flags = SHARD_MOVE_DRY_RUN;
    ck_assert_msg(shard_move(c, 0, 0, "MySQL002", &dry, NULL, &plan) == 0, "%s", errmsg());
    no_secret("a move plan", plan);
    shard_free(plan);
    ck_assert_int_eq(shard_ctx_map(c, &m), 0);
    ck_assert_int_eq(shard_map_to_json(m, &text), 0);
    no_secret("shard_map_to_json", text);
    ck_assert_ptr_nonnull(strstr(text, "TLSUSER_PASSWORD")); /* the variable's name only */
    ck_assert_ptr_nonnull(strstr(text, "\"tls\""));
    ck_assert_ptr_null(strstr(text, "\"password\""));
    shard_free(text);
    ck_assert_int_eq(shard_map_summary(m, &text), 0);
    no_secret("shard_map_summary", text);
    shard_free(text);
    shard_map_free(m);
    shard_ctx_free(c);

    /* shardctl, failing and succeeding. */
    snprintf(args, sizeof args, "--map '%s' obj create pins '{\"ctl\":1}'", map_tls);
    shardctl_expect(0, args);
    snprintf(args, sizeof args, "--map '%s' obj get %llu", map_tls,
             (unsigned long long)tls_ids[0]);
    shardctl_expect(0, args);
    snprintf(args, sizeof args, "--map '%s' check", map_tls);
    shardctl_expect(0, args);
    snprintf(args, sizeof args, "--map '%s' move --shards 0-0 --to MySQL002 --dry-run", map_tls);
    shardctl_expect(0, args);
    snprintf(args, sizeof args, "--map '%s' obj get %llu", map_wrongpw,
             (unsigned long long)tls_ids[0]);
    shardctl_expect(1, args);
    snprintf(args, sizeof args, "--map '%s' --user shardadmin --password-env WRONG_PASSWORD "
             "obj get %llu", map_tls, (unsigned long long)tls_ids[0]);
    shardctl_expect(1, args);
    snprintf(args, sizeof args, "--map '%s' obj get %llu", map_wrongca,
             (unsigned long long)tls_ids[0]);
    shardctl_expect(1, args);
    snprintf(args, sizeof args, "--map '%s' obj get %llu", map_notls,
             (unsigned long long)tls_ids[0]);
    shardctl_expect(1, args);
    snprintf(args, sizeof args, "--map '%s' check", map_pwinmap);
    shardctl_expect(2, args);
    snprintf(args, sizeof args, "--map '%s' check", map_broken);
    shardctl_expect(2, args);
    snprintf(args, sizeof args, "--map '%s' failover MySQL009", map_tls);
    shardctl_expect(2, args);
    snprintf(args, sizeof args, "--map '%s' --user shardadmin --password-env WRONG_PASSWORD "
             "failover MySQL001", map_tls);
    shardctl_expect(1, args);
    snprintf(args, sizeof args, "--map '%s' move --shards 0-0 --to MySQL009 --yes", map_tls);
    shardctl_expect(2, args);
    logs_hold_no_secret();
}
END_TEST

/* jansson quotes the offending token of invalid JSON (up to 20 characters)
 * and the map's parse error passes it on: a short password in a map whose
 * closing quote is missing comes back whole in shard_errmsg() and on
 * shardctl's stderr (a map with a "password" is refused, but only once it
 * parses). */
START_TEST(broken_json_with_a_password)
{
    int rc;
    const char *pw = getenv("SHORT_PASSWORD");
    shard_ctx *c = try_open(map_brokenpw, NULL, NULL, &rc);

    ck_assert_ptr_null(c);
    ck_assert_int_eq(rc, SHARD_EMAP);
    KNOWN_GAP(!strstr(shard_errmsg(), pw), "invalid map JSON echoes its token, here a "
              "password: %s", shard_errmsg());
}
END_TEST

/* ---- least privilege ------------------------------------------------------ */

START_TEST(schema_role)
{
    shard_ctx *c;

    account("schemauser", "SCHEMA_PASSWORD", NULL, SCHEMA_GRANTS, NELEM(SCHEMA_GRANTS), 0);
    c = open_as(harness_map_path(h), "schemauser", "SCHEMA_PASSWORD");
    /* Every database and table exists already: CREATE ... IF NOT EXISTS
     * still needs CREATE. */
    ck_assert_msg(shard_schema_apply(c, NULL, NULL) == 0, "%s", errmsg());
    shard_ctx_free(c);
}
END_TEST

START_TEST(app_role)
{
    shard_ctx *c;
    shard_item *items = NULL;
    shard_edge *edges = NULL;
    shard_failover_report fr = SHARD_FAILOVER_REPORT_INIT;
    shard_txn *txn = NULL;
    char *json = NULL, *v = NULL, *out;
    size_t len, n;
    uint64_t count, tid, version = map_version(harness_map_path(h));
    int rc;

    account("appuser", "APP_PASSWORD", NULL, APP_GRANTS, NELEM(APP_GRANTS), 0);
    c = open_as(harness_map_path(h), "appuser", "APP_PASSWORD");
    for (unsigned s = 0; s < 4; s++) {
        ck_assert_msg(shard_object_create(c, 1, s, "{\"a\":1}", 7, &app_ids[s]) == 0, "%s",
                      errmsg());
        ck_assert_msg(shard_object_patch(c, app_ids[s], "{\"b\":2}", 7, &json, &len) == 0,
                      "%s", errmsg());
        ck_assert_ptr_nonnull(strstr(json, "\"b\":2"));
        shard_free(json);
        ck_assert_int_eq(shard_object_get(c, app_ids[s], &json, &len), 0);
        shard_free(json);
    }
    ck_assert_int_eq(shard_object_mget(c, app_ids, 4, &items), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(items[i].status, 0);
    shard_items_free(items, 4);
    {
        uint64_t gone[2];
        ck_assert_int_eq(shard_object_create(c, 1, 1, "{}", 2, &gone[0]), 0);
        ck_assert_int_eq(shard_object_create(c, 1, 3, "{}", 2, &gone[1]), 0);
        ck_assert_int_eq(shard_object_delete(c, gone[0], 0), 0);
        ck_assert_int_eq(shard_object_delete(c, gone[1], SHARD_DELETE_HARD), 0);
        ck_assert_int_eq(shard_object_get(c, gone[0], &json, &len), SHARD_ENOTFOUND);
        ck_assert_int_eq(shard_object_get(c, gone[1], &json, &len), SHARD_ENOTFOUND);
    }
    /* Mappings, with a reverse on another pair. */
    ck_assert_msg(shard_mapping_add(c, "board_has_pins", app_ids[0], app_ids[2], 5) == 0, "%s",
                  errmsg());
    ck_assert_int_eq(shard_mapping_list(c, "board_has_pins", app_ids[0], SHARD_SEQ_NONE, 10,
                                        &edges, &n), 0);
    ck_assert_uint_eq(n, 1);
    shard_free(edges);
    ck_assert_int_eq(shard_mapping_count(c, "pin_owned_by_board", app_ids[2], &count), 0);
    ck_assert_uint_eq(count, 1);
    ck_assert_int_eq(shard_mapping_remove(c, "board_has_pins", app_ids[0], app_ids[2]), 0);
    /* Key-value. */
    ck_assert_int_eq(shard_kv_put(c, "users_by_name", "ann", 3, "7", 1), 0);
    ck_assert_int_eq(shard_kv_put_new(c, "users_by_name", "ann", 3, "8", 1), SHARD_EEXISTS);
    ck_assert_int_eq(shard_kv_get(c, "users_by_name", "ann", 3, &v, &len), 0);
    ck_assert_str_eq(v, "7");
    shard_free(v);
    ck_assert_int_eq(shard_kv_delete(c, "users_by_name", "ann", 3), 0);
    /* A transaction, committed, and one rolled back. */
    ck_assert_msg(shard_txn_begin(c, 1, &txn) == 0, "%s", errmsg());
    ck_assert_int_eq(shard_txn_object_create(txn, 2, "{\"t\":1}", 7, &tid), 0);
    ck_assert_int_eq(shard_txn_object_get(txn, app_ids[1], &json, &len), 0);
    shard_free(json);
    ck_assert_int_eq(shard_txn_object_put(txn, app_ids[1], "{\"t\":2}", 7), 0);
    ck_assert_int_eq(shard_txn_mapping_add(txn, "user_likes_pins", tid, app_ids[1], 1), 0);
    ck_assert_msg(shard_txn_commit(txn) == 0, "%s", errmsg());
    ck_assert_int_eq(shard_txn_begin(c, 1, &txn), 0);
    ck_assert_int_eq(shard_txn_object_put(txn, app_ids[1], "{\"t\":3}", 7), 0);
    shard_txn_rollback(txn);
    ck_assert_int_eq(shard_object_get(c, app_ids[1], &json, &len), 0);
    ck_assert_ptr_nonnull(strstr(json, "\"t\":2"));
    shard_free(json);
    ck_assert_msg(shard_scatter_count(c, 1, &count) == 0, "%s", errmsg());
    ck_assert_uint_ge(count, 6);

    /* Not the application's business: schema, moves, failover. */
    rc = shard_schema_apply(c, NULL, NULL);
    ck_assert_msg(rc == SHARD_EPRIV, "rc %d: %s", rc, errmsg());
    ck_assert_msg(strstr(errmsg(), "CREATE command denied") ||
                      strstr(errmsg(), "Access denied"), "%s", errmsg());
    printf("app account, schema apply: %s\n", errmsg());
    rc = shard_move(c, 0, 0, "MySQL002", NULL, NULL, NULL);
    ck_assert_msg(rc == SHARD_EPRIV, "rc %d: %s", rc, errmsg());
    printf("app account, move: %s\n", errmsg());
    ck_assert_int_eq(db_exists("s3", "db00000"), 0);
    /* (libshard_control itself exists everywhere: schema apply makes the
     * fence table there.) No move journal was started. */
    out = sql_ok(h, "s3", "SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                       "TABLE_SCHEMA = 'libshard_control' AND TABLE_NAME = 'moves'");
    ck_assert_str_eq(out, "0\n");
    free(out);
    ck_assert_uint_eq(map_version(harness_map_path(h)), version);
    rc = shard_pair_failover(c, "MySQL001", 0, &fr);
    ck_assert_msg(rc == SHARD_EPRIV, "rc %d: %s", rc, errmsg());
    printf("app account, failover: %s\n", errmsg());
    ck_assert_uint_eq(map_version(harness_map_path(h)), version);
    out = sql_ok(h, "s1", "SELECT @@read_only");
    ck_assert_str_eq(out, "0\n");
    free(out);
    ck_assert_int_eq(shard_object_get(c, app_ids[0], &json, &len), 0); /* untouched */
    shard_free(json);
    shard_ctx_free(c);
}
END_TEST

/* Writes to the moving shard all through a move, as the application's
 * least-privilege account: without them the target would never need its
 * catch-up connection (an idle shard is caught up at once). */
typedef struct writer {
    shard_ctx *ctx;
    volatile int stop;
    int n, errors;
    uint64_t ids[20000];
    char err[600];
} writer;

static void *write_loop(void *arg)
{
    writer *w = arg;
    for (int i = 0; !w->stop && w->n < (int)NELEM(w->ids); i++) {
        char json[32];
        int rc;
        snprintf(json, sizeof json, "{\"w\":%d}", i);
        rc = shard_object_create(w->ctx, 1, 0, json, strlen(json), &w->ids[w->n]);
        if (rc == 0)
            w->n++;
        else if (w->errors++ == 0)
            snprintf(w->err, sizeof w->err, "%s", shard_errmsg());
        usleep(2000);
    }
    return NULL;
}

static char move_err[1024]; /* why move_as() failed */

/* How many of the writes are lost (or cannot be read). */
static int writes_lost(writer *w)
{
    shard_item *items = NULL;
    int lost = 0;

    if (w->n && shard_object_mget(w->ctx, w->ids, (size_t)w->n, &items) != 0)
        return w->n;
    for (int i = 0; i < w->n; i++)
        lost += items[i].status != 0;
    shard_items_free(items, (size_t)w->n);
    return lost;
}

/* A writer as user (NULL: the map's credentials, servers.sh's `shard`). */
static writer *writer_start_as(pthread_t *t, const char *user, const char *pwenv)
{
    writer *w = calloc(1, sizeof *w);
    ck_assert_ptr_nonnull(w);
    w->ctx = open_as(harness_map_path(h), user, pwenv);
    pthread_create(t, NULL, write_loop, w);
    usleep(100000);
    return w;
}

static writer *writer_start(pthread_t *t)
{
    return writer_start_as(t, "appuser", "APP_PASSWORD");
}

/* Stops the writer; how many writes failed or were lost (why in *why). */
static int writer_stop(writer *w, pthread_t t, char *why, size_t size)
{
    int failed, lost;
    w->stop = 1;
    pthread_join(t, NULL);
    no_secret("a writer's error", w->err);
    failed = w->errors;
    lost = writes_lost(w);
    snprintf(why, size, "%d of %d writes failed (the first: %s), %d lost", failed,
             w->n + failed, failed ? w->err : "-", lost);
    shard_ctx_free(w->ctx);
    free(w);
    return failed + lost;
}

/* Moves shard 0 to the other pair as `user`, under writes; 0 only when the
 * move completed, verified, dropped the source and lost no write (else
 * move_err says why). */
static int move_as(const char *user, const char *pwenv, unsigned timeout_s,
                   shard_move_report *r)
{
    const char *from = pair_in_file(harness_map_path(h), 0);
    const char *to = strcmp(from, "MySQL001") == 0 ? "MySQL002" : "MySQL001";
    shard_move_options o = SHARD_MOVE_OPTIONS_INIT;
    shard_ctx *c = open_as(harness_map_path(h), user, pwenv);
    pthread_t t;
    writer *w = writer_start(&t);
    char why[800];
    int rc, bad;

    o.copy_threads = 2;
    o.catchup_timeout_s = timeout_s;
    rc = shard_move(c, 0, 0, to, &o, r, NULL);
    if (rc == 0 && r->phase == SHARD_MOVE_DONE && !r->source_dropped) {
        /* Done; the source's drop follows, as shardctl runs it. */
        shard_move_report dr = SHARD_MOVE_REPORT_INIT;
        if ((rc = shard_move_resume(c, r->move_id, &o, &dr)) == 0)
            r->source_dropped = dr.source_dropped;
    }
    snprintf(move_err, sizeof move_err, "%s", errmsg());
    if (rc == 0 && (r->phase != SHARD_MOVE_DONE || r->mismatches || !r->source_dropped)) {
        rc = SHARD_EINTERNAL;
        snprintf(move_err, sizeof move_err, "move ended in phase %s, %llu mismatches, "
                 "source dropped %d", shard_move_phase_name(r->phase),
                 (unsigned long long)r->mismatches, r->source_dropped);
    }
    usleep(100000);
    bad = writer_stop(w, t, why, sizeof why);
    if (rc == 0 && bad) {
        rc = SHARD_EINTERNAL;
        snprintf(move_err, sizeof move_err, "%s", why);
    }
    shard_ctx_free(c);
    return rc;
}

/* Put things right after a move that failed part way. */
static void undo_move(void)
{
    shard_ctx *admin = open_as(harness_map_path(h), "shardadmin", "LIBSHARD_PASSWORD");
    int rc = shard_move_abort(admin, 0);
    if (rc == SHARD_EBUSY) /* after the flip: finish it */
        rc = shard_move_resume(admin, 0, NULL, NULL);
    ck_assert_msg(rc == 0 || rc == SHARD_ENOTFOUND, "undo: %s", errmsg());
    shard_ctx_free(admin);
    sql_all("START SLAVE");
}

/* Rows in the move journal on a server (0 when it has none yet). */
static long journal_rows(const char *server)
{
    char *out = sql_ok(h, server, "SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                               "TABLE_SCHEMA = 'libshard_control' AND TABLE_NAME = 'moves'");
    long n = 0;

    if (strcmp(out, "0\n") != 0) {
        free(out);
        out = sql_ok(h, server, "SELECT COUNT(*) FROM libshard_control.moves");
        n = atol(out);
    }
    free(out);
    return n;
}

static long fence_rows(const char *server)
{
    char *out = sql_ok(h, server, "SELECT COUNT(*) FROM libshard_control.fence");
    long n = atol(out);
    free(out);
    return n;
}

/* The harness's map with one more open shard (4, on MySQL002), whose
 * database nobody made yet. */
static void write_grown_map(char *path, size_t size)
{
    json_error_t e;
    json_t *m = json_load_file(harness_map_path(h), 0, &e), *ranges;

    ck_assert_msg(m != NULL, "%s", e.text);
    ranges = json_object_get(m, "id_shards");
    ck_assert_int_eq(json_array_size(ranges), 2);
    json_object_set_new(m, "open_shards", json_integer(5));
    json_array_set_new(json_object_get(json_array_get(ranges, 1), "range"), 1, json_integer(4));
    snprintf(path, size, "%s/grown.json", certdir);
    ck_assert_int_eq(json_dump_file(m, path, JSON_INDENT(2)), 0);
    json_decref(m);
}

/* The application's account as tests/servers.sh makes it (`shard`, the
 * map's credentials; the README's "Accounts and privileges") cannot move a
 * shard, fail a pair over or create a shard database: each is refused with
 * SHARD_EPRIV before anything changed. The operators' account `shardadmin`
 * then does each of them, the move under the application's writes. */
START_TEST(app_account_cannot_operate)
{
    const char *path = harness_map_path(h);
    char from[16], to[16], master[8], target[8], grown[PATH_MAX + 32], args[4 * PATH_MAX];
    uint64_t version = map_version(path), id;
    long journal[2], fences[2];
    shard_failover_report fr = SHARD_FAILOVER_REPORT_INIT;
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    shard_ctx *app, *admin;
    pthread_t t;
    writer *w;
    char why[800], *out, *json = NULL;
    size_t len;
    int rc, st;

    snprintf(from, sizeof from, "%s", pair_in_file(path, 0));
    snprintf(to, sizeof to, "%s", strcmp(from, "MySQL001") == 0 ? "MySQL002" : "MySQL001");
    snprintf(master, sizeof master, "%s", master_server(from));
    snprintf(target, sizeof target, "%s", master_server(to));
    journal[0] = journal_rows(master);
    journal[1] = journal_rows(target);
    fences[0] = fence_rows(master);
    fences[1] = fence_rows(target);
    app = open_as(path, NULL, NULL);

    /* A move: refused, nothing planned, copied, fenced or journaled. */
    rc = shard_move(app, 0, 0, to, NULL, &r, NULL);
    ck_assert_msg(rc == SHARD_EPRIV, "move as shard: rc %d: %s", rc, errmsg());
    printf("application account shard, move: %s\n", errmsg());
    snprintf(args, sizeof args, "--map '%s' move --shards 0-0 --to %s --yes", path, to);
    out = shardctl(args, &st);
    ck_assert_msg(st == 1 && (strstr(out, "denied") || strstr(out, "privilege")),
                  "shardctl move as shard: exit %d: %s", st, out);
    free(out);
    ck_assert_uint_eq(map_version(path), version);
    ck_assert_str_eq(pair_in_file(path, 0), from);
    ck_assert_int_eq(db_exists(target, "db00000"), 0);
    ck_assert_int_eq(db_exists(master, "db00000"), 1);
    ck_assert_int_eq(journal_rows(master), journal[0]);
    ck_assert_int_eq(journal_rows(target), journal[1]);
    ck_assert_int_eq(fence_rows(master), fences[0]);
    ck_assert_int_eq(fence_rows(target), fences[1]);
    out = sql_ok(h, target, "SHOW ALL SLAVES STATUS");
    ck_assert_msg(!strstr(out, "libshard_move_"), "a move connection on %s", target);
    free(out);
    pair_links_run();

    /* A failover: refused; the map and the master as they were, writable. */
    rc = shard_pair_failover(app, "MySQL001", 0, &fr);
    ck_assert_msg(rc == SHARD_EPRIV, "failover as shard: rc %d: %s", rc, errmsg());
    ck_assert_int_eq(fr.old_master_fenced, 0);
    printf("application account shard, failover: %s\n", errmsg());
    snprintf(args, sizeof args, "--map '%s' failover MySQL001", path);
    shardctl_expect(1, args);
    ck_assert_uint_eq(map_version(path), version);
    snprintf(master, sizeof master, "%s", master_server("MySQL001"));
    out = sql_ok(h, master, "SELECT @@read_only");
    ck_assert_str_eq(out, "0\n");
    free(out);
    ck_assert_msg(shard_object_create(app, 1, 1, "{\"still\":1}", 11, &id) == 0, "%s",
                  errmsg());
    pair_links_run();
    shard_ctx_free(app);

    /* Schema apply of a map with a new shard: refused, no database made. */
    write_grown_map(grown, sizeof grown);
    snprintf(master, sizeof master, "%s", master_server("MySQL002"));
    app = open_as(grown, NULL, NULL);
    rc = shard_schema_apply(app, NULL, NULL);
    ck_assert_msg(rc == SHARD_EPRIV, "schema apply as shard: rc %d: %s", rc, errmsg());
    printf("application account shard, schema apply: %s\n", errmsg());
    ck_assert_int_eq(db_exists(master, "db00004"), 0);
    shard_ctx_free(app);

    /* The operators' account does all three. */
    admin = open_as(grown, "shardadmin", "LIBSHARD_PASSWORD");
    ck_assert_msg(shard_schema_apply(admin, NULL, NULL) == 0, "%s", errmsg());
    ck_assert_int_eq(db_exists(master, "db00004"), 1);
    shard_ctx_free(admin);
    free(sql_ok(h, master, "DROP DATABASE db00004")); /* the map never opened it */

    admin = open_as(path, "shardadmin", "LIBSHARD_PASSWORD");
    w = writer_start_as(&t, NULL, NULL); /* the application's writes, through the move */
    rc = shard_move(admin, 0, 0, to, NULL, &r, NULL);
    usleep(100000);
    st = writer_stop(w, t, why, sizeof why);
    ck_assert_msg(rc == 0, "move as shardadmin: %s", errmsg());
    ck_assert_msg(st == 0, "the application's writes during the move: %s", why);
    ck_assert_int_eq(r.phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(r.mismatches, 0);
    ck_assert_str_eq(pair_in_file(path, 0), to);
    ck_assert_uint_eq(map_version(path), version + 1);
    ck_assert_int_eq(db_exists(target, "db00000"), 1);
    pair_links_run();

    snprintf(master, sizeof master, "%s", master_server("MySQL001"));
    ck_assert_msg(shard_pair_failover(admin, "MySQL001", 0, &fr) == 0, "%s", errmsg());
    ck_assert_int_eq(fr.old_master_fenced, 1);
    ck_assert_str_ne(master_server("MySQL001"), master);
    ck_assert_uint_eq(map_version(path), version + 2);
    shard_ctx_free(admin);
    pair_links_run();

    /* And the application goes on, on the moved shard and the new master. */
    app = open_as(path, NULL, NULL);
    ck_assert_msg(shard_object_get(app, app_ids[0], &json, &len) == 0, "%s", errmsg());
    shard_free(json);
    ck_assert_msg(shard_object_create(app, 1, 1, "{\"after\":1}", 11, &id) == 0, "%s",
                  errmsg());
    shard_ctx_free(app);
}
END_TEST

START_TEST(mover_role)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char *json = NULL, *st = NULL;
    size_t len;
    shard_ctx *app;
    char from[16], source[8];
    int rc;

    snprintf(from, sizeof from, "%s", pair_in_file(harness_map_path(h), 0));
    snprintf(source, sizeof source, "%s", master_server(from));
    account("moveradmin", "MOVER_PASSWORD", NULL, MOVER_GRANTS, NELEM(MOVER_GRANTS), 0);
    rc = move_as("moveradmin", "MOVER_PASSWORD", 60, &r);
    ck_assert_msg(rc == 0, "move as moveradmin: %s", move_err);
    printf("mover account, under writes: %llu rows copied, %llu verified in %.1f s, "
           "pause %.0f ms\n", (unsigned long long)r.rows_copied,
           (unsigned long long)r.rows_verified,
           r.copy_seconds + r.catchup_seconds + r.cutover_seconds + r.verify_seconds,
           r.pause_ms);
    ck_assert_str_eq(pair_in_file(harness_map_path(h), 0),
                     strcmp(from, "MySQL001") == 0 ? "MySQL002" : "MySQL001");
    ck_assert_int_eq(db_exists(source, "db00000"), 0);
    pair_links_run();
    app = open_as(harness_map_path(h), "appuser", "APP_PASSWORD");
    ck_assert_msg(shard_object_get(app, app_ids[0], &json, &len) == 0, "%s", errmsg());
    shard_free(json);
    /* Status as the mover and as the application. */
    {
        shard_ctx *c = open_as(harness_map_path(h), "moveradmin", "MOVER_PASSWORD");
        ck_assert_int_eq(shard_move_status(c, &st), 0);
        ck_assert_ptr_nonnull(strstr(st, "\"phase\":\"done\""));
        no_secret("move status", st);
        shard_free(st);
        shard_ctx_free(c);
    }
    rc = shard_move_status(app, &st);
    KNOWN_GAP(rc != 0 || strstr(st, "\"phase\""), "shard_move_status as an account that "
              "may not read the journal: rc %d and no moves, no error", rc);
    shard_free(st);
    shard_ctx_free(app);
    {
        char *out = sql_ok(h, "s3", "SELECT CONCAT(message, ' ', snapshot_gtid) FROM "
                                 "libshard_control.moves");
        no_secret("the move journal", out);
        free(out);
    }
}
END_TEST

START_TEST(failover_role)
{
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    shard_ctx *c, *app;
    char old[8];
    uint64_t id;

    snprintf(old, sizeof old, "%s", master_server("MySQL001"));
    account("failadmin", "FAILOVER_PASSWORD", NULL, FAILOVER_GRANTS, NELEM(FAILOVER_GRANTS),
            0);
    c = open_as(harness_map_path(h), "failadmin", "FAILOVER_PASSWORD");
    ck_assert_msg(shard_pair_failover(c, "MySQL001", 0, &r) == 0, "%s", errmsg());
    ck_assert_int_eq(r.old_master_fenced, 1);
    ck_assert_str_ne(master_server("MySQL001"), old);
    shard_ctx_free(c);
    app = open_as(harness_map_path(h), "appuser", "APP_PASSWORD");
    ck_assert_msg(shard_object_create(app, 1, 1, "{\"after\":1}", 11, &id) == 0, "%s",
                  errmsg());
    shard_ctx_free(app);
    pair_links_run();
}
END_TEST

/* The catch-up connection (CHANGE MASTER on the target) carries the mover's
 * user and password but none of credentials.tls: an account that requires
 * TLS cannot replicate, and the catch-up loop takes the server's "error
 * connecting to master ... Access denied" for a passing network problem and
 * waits out catchup_timeout_s (an hour by default) before saying anything. */
START_TEST(mover_over_tls)
{
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    char tmp[PATH_MAX + 32];
    json_error_t e;
    json_t *m = json_load_file(harness_map_path(h), 0, &e), *cred;
    time_t t0;
    int rc;

    /* From now on every context of the shared map uses TLS. */
    ck_assert_msg(m != NULL, "%s", e.text);
    snprintf(tmp, sizeof tmp, "%s.tmp", harness_map_path(h));
    cred = tls_cred("-", "-", "ca.pem", 1, NULL, NULL);
    json_object_set(json_object_get(m, "credentials"), "tls", json_object_get(cred, "tls"));
    json_decref(cred);
    ck_assert_int_eq(json_dump_file(m, tmp, JSON_INDENT(2)), 0);
    ck_assert_int_eq(rename(tmp, harness_map_path(h)), 0);
    json_decref(m);
    account("tlsmover", "MOVER_PASSWORD", "SSL", MOVER_GRANTS, NELEM(MOVER_GRANTS), 0);
    t0 = time(NULL);
    rc = move_as("tlsmover", "MOVER_PASSWORD", 3, &r);
    KNOWN_GAP(rc == 0, "a move whose account requires TLS: %s after %.0f s: %s",
              shard_strerror(rc), difftime(time(NULL), t0), move_err);
    if (rc)
        undo_move();
    pair_links_run();
}
END_TEST

/* A failover that fails after fencing the old master (here: the operator
 * account lacks READ_ONLY ADMIN on the standby only) gives the master back:
 * the map is unchanged, so a master left read-only would be a pair that
 * takes no writes at all. */
START_TEST(failover_failing_after_the_fence)
{
    static const char *const monitor[] = {"SLAVE MONITOR ON *.*", "SELECT ON `mysql`.*",
                                          "SELECT ON `libshard\\_control`.*"};
    char master[8], *out, sql[512];
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;
    shard_ctx *c;
    uint64_t version = map_version(harness_map_path(h));
    int rc;

    snprintf(master, sizeof master, "%s", master_server("MySQL001"));
    account("failpartial", "FAILOVER_PASSWORD", NULL, monitor, NELEM(monitor), 0);
    snprintf(sql, sizeof sql, "SET sql_log_bin = 0; GRANT READ_ONLY ADMIN ON *.* TO "
             "'failpartial'@'127.0.0.1'");
    free(sql_ok(h, master, sql));
    c = open_as(harness_map_path(h), "failpartial", "FAILOVER_PASSWORD");
    rc = shard_pair_failover(c, "MySQL001", 0, &r);
    ck_assert_int_eq(rc, SHARD_EPRIV);
    printf("failover, standby denies READ_ONLY ADMIN: %s\n", errmsg());
    shard_ctx_free(c);
    ck_assert_uint_eq(map_version(harness_map_path(h)), version);
    out = sql_ok(h, master, "SELECT @@read_only");
    ck_assert_msg(strcmp(out, "0\n") == 0, "the failed failover left master %s read-only, "
                  "still master in the map", master);
    free(out);
}
END_TEST

/* ---- LIBSHARD_PRIV_SEARCH=1: derive the lists again ------------------------ */

static const char *const MOVER_CANDIDATES[] = {
    "SELECT ON `db%`.*", "INSERT ON `db%`.*", "UPDATE ON `db%`.*", "DELETE ON `db%`.*",
    "CREATE ON `db%`.*", "DROP ON `db%`.*", "ALTER ON `db%`.*", "INDEX ON `db%`.*",
    "LOCK TABLES ON `db%`.*",
    "SELECT ON `libshard\\_control`.*", "INSERT ON `libshard\\_control`.*",
    "UPDATE ON `libshard\\_control`.*", "DELETE ON `libshard\\_control`.*",
    "CREATE ON `libshard\\_control`.*", "DROP ON `libshard\\_control`.*",
    "ALTER ON `libshard\\_control`.*", "INDEX ON `libshard\\_control`.*",
    "RELOAD ON *.*", "PROCESS ON *.*", "REPLICATION SLAVE ON *.*",
    "REPLICATION SLAVE ADMIN ON *.*", "BINLOG ADMIN ON *.*", "BINLOG MONITOR ON *.*",
    "SLAVE MONITOR ON *.*", "REPLICATION MASTER ADMIN ON *.*", "CONNECTION ADMIN ON *.*",
};

static const char *const FAILOVER_CANDIDATES[] = {
    "SLAVE MONITOR ON *.*", "READ_ONLY ADMIN ON *.*", "REPLICATION SLAVE ADMIN ON *.*",
    "BINLOG MONITOR ON *.*", "BINLOG ADMIN ON *.*", "PROCESS ON *.*",
    "CONNECTION ADMIN ON *.*", "SELECT ON `mysql`.*", "SELECT ON `libshard\\_control`.*",
    "SELECT ON *.*",
};

static void print_set(const char *role, const char *const *g, size_t n, unsigned skip)
{
    printf("%s needs:\n", role);
    for (size_t i = 0; i < n; i++)
        if (!(skip & (1u << i)))
            printf("  GRANT %s\n", g[i]);
}

START_TEST(search_mover_privileges)
{
    const size_t n = NELEM(MOVER_CANDIDATES);
    shard_move_report r = SHARD_MOVE_REPORT_INIT;
    unsigned skip = 0;
    int rc;

    account("searchmover", "MOVER_PASSWORD", NULL, MOVER_CANDIDATES, n, 0);
    rc = move_as("searchmover", "MOVER_PASSWORD", 10, &r);
    ck_assert_msg(rc == 0, "with every candidate: %s", move_err);
    for (size_t i = 0; i < n; i++) {
        account("searchmover", "MOVER_PASSWORD", NULL, MOVER_CANDIDATES, n,
                skip | (1u << i));
        rc = move_as("searchmover", "MOVER_PASSWORD", 10, &r);
        printf("without %-40s %s%s\n", MOVER_CANDIDATES[i], rc ? "fails: " : "passes",
               rc ? move_err : "");
        if (rc == 0)
            skip |= 1u << i;
        else
            undo_move();
        pair_links_run();
    }
    print_set("the mover", MOVER_CANDIDATES, n, skip);
}
END_TEST

/* A failover of MySQL001 as user; after a failure the map's master is made
 * writable again (see failover_failing_after_the_fence). */
static int failover_as(const char *user, const char *pwenv)
{
    shard_failover_report fr = SHARD_FAILOVER_REPORT_INIT;
    shard_ctx *c = open_as(harness_map_path(h), user, pwenv);
    int rc = shard_pair_failover(c, "MySQL001", 0, &fr);

    errmsg();
    shard_ctx_free(c);
    if (rc)
        free(sql_ok(h, master_server("MySQL001"), "SET GLOBAL read_only = 0"));
    return rc;
}

START_TEST(search_failover_privileges)
{
    const size_t n = NELEM(FAILOVER_CANDIDATES);
    unsigned skip = 0;
    int rc;

    account("searchfail", "FAILOVER_PASSWORD", NULL, FAILOVER_CANDIDATES, n, 0);
    ck_assert_msg(failover_as("searchfail", "FAILOVER_PASSWORD") == 0, "%s", shard_errmsg());
    for (size_t i = 0; i < n; i++) {
        account("searchfail", "FAILOVER_PASSWORD", NULL, FAILOVER_CANDIDATES, n,
                skip | (1u << i));
        rc = failover_as("searchfail", "FAILOVER_PASSWORD");
        printf("without %-40s %s%s\n", FAILOVER_CANDIDATES[i], rc ? "fails: " : "passes",
               rc ? shard_errmsg() : "");
        if (rc == 0)
            skip |= 1u << i;
    }
    print_set("failover", FAILOVER_CANDIDATES, n, skip);
}
END_TEST

/* ---- setup ---------------------------------------------------------------- */

static int make_certs(void)
{
    const char *tdir = getenv("LIBSHARD_TESTS_DIR");
    char script[PATH_MAX];
    pid_t pid;
    int st;

    snprintf(script, sizeof script, "%s/tls.sh", tdir && *tdir ? tdir : "tests");
    fflush(stdout);
    if ((pid = fork()) < 0)
        return -1;
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0)
            dup2(fd, 1);
        execl("/bin/bash", "bash", script, certdir, (char *)NULL);
        _exit(127);
    }
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The certificate folder holds only files this test made. */
static void remove_certs(void)
{
    DIR *d = opendir(certdir);
    struct dirent *e;
    char p[2 * PATH_MAX];

    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", certdir, e->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
    rmdir(certdir);
}

START_TEST(make_accounts_and_maps)
{
    static const char *const rows[] = {"SELECT, INSERT, UPDATE, DELETE ON `db%`.*",
                                       "SELECT, INSERT, UPDATE, DELETE ON `modshard%`.*",
                                       "SELECT ON libshard_control.fence",
                                       "ALL ON `libshard\\_maps`.*"};
    char text[1024];

    account("tlsuser", "TLSUSER_PASSWORD", "SSL", rows, NELEM(rows), 0);
    account("x509user", "TLSUSER_PASSWORD", "X509", rows, 3, 0);
    write_map(map_tls, sizeof map_tls, "tls.json",
              tls_cred("tlsuser", "TLSUSER_PASSWORD", "ca.pem", 1, NULL, NULL));
    write_map(map_notls, sizeof map_notls, "notls.json",
              plain_cred("tlsuser", "TLSUSER_PASSWORD"));
    write_map(map_wrongca, sizeof map_wrongca, "wrongca.json",
              tls_cred("tlsuser", "TLSUSER_PASSWORD", "other-ca.pem", 1, NULL, NULL));
    write_map(map_noverify, sizeof map_noverify, "noverify.json",
              tls_cred("tlsuser", "TLSUSER_PASSWORD", NULL, 0, NULL, NULL));
    write_map(map_noverify_wrongca, sizeof map_noverify_wrongca, "noverify-wrongca.json",
              tls_cred("tlsuser", "TLSUSER_PASSWORD", "other-ca.pem", 0, NULL, NULL));
    write_map(map_missingca, sizeof map_missingca, "missingca.json",
              tls_cred("tlsuser", "TLSUSER_PASSWORD", "no-such-ca.pem", 1, NULL, NULL));
    write_map(map_cert, sizeof map_cert, "cert.json",
              tls_cred("x509user", "TLSUSER_PASSWORD", "ca.pem", 1, "client-cert.pem",
                       "client-key.pem"));
    write_map(map_certless, sizeof map_certless, "certless.json",
              tls_cred("x509user", "TLSUSER_PASSWORD", "ca.pem", 1, NULL, NULL));
    write_map(map_wrongpw, sizeof map_wrongpw, "wrongpw.json",
              tls_cred("tlsuser", "WRONG_PASSWORD", "ca.pem", 1, NULL, NULL));
    write_map(map_pwinmap, sizeof map_pwinmap, "pwinmap.json",
              json_pack("{s:s, s:s}", "user", "shard", "password",
                        getenv("LIBSHARD_PASSWORD")));
    write_map(map_unsetenv, sizeof map_unsetenv, "unsetenv.json",
              plain_cred("shard", "LIBSHARD_NO_SUCH_VARIABLE"));
    write_text(map_broken, sizeof map_broken, "broken.json",
               "{\"version\": 1, \"credentials\": {\"user\": \"shard\",}}\n");
    /* A closing quote forgotten: the string runs into the newline. */
    snprintf(text, sizeof text, "{\"version\": 1, \"credentials\": {\"user\": \"shard\", "
             "\"password\": \"%s}}\n", getenv("SHORT_PASSWORD"));
    write_text(map_brokenpw, sizeof map_brokenpw, "brokenpw.json", text);
}
END_TEST

START_TEST(logs_hold_no_password)
{
    logs_hold_no_secret();
    ck_assert_uint_gt(nlogs, 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("server_security");
    TCase *tc = tcase_create("security");
    const char *tmp = getenv("TMPDIR");
    double t0 = (double)time(NULL);
    int failed;

    search_mode = getenv("LIBSHARD_PRIV_SEARCH") && atoi(getenv("LIBSHARD_PRIV_SEARCH"));
    /* Passwords of our own, long and random, so that a match is a leak. */
    random_secret("LIBSHARD_PASSWORD", "app-", 12);
    random_secret("TLSUSER_PASSWORD", "tls-", 12);
    random_secret("APP_PASSWORD", "least-", 12);
    random_secret("SCHEMA_PASSWORD", "schema-", 12);
    random_secret("MOVER_PASSWORD", "mover-", 12);
    random_secret("FAILOVER_PASSWORD", "failover-", 12);
    random_secret("WRONG_PASSWORD", "wrong-", 12);
    /* jansson quotes a bad token of up to 20 characters in its messages. */
    random_secret("SHORT_PASSWORD", "short-", 5);
    snprintf(certdir, sizeof certdir, "%s/libshard-tls-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(certdir) || make_certs() != 0) {
        fprintf(stderr, "cannot make certificates in %s\n", certdir);
        return 1;
    }
    h = harness_start_tls(2, 4, 2, certdir);
    if (!h) {
        remove_certs();
        return 1;
    }
    if (harness_schema_apply(h)) {
        fprintf(stderr, "setup: %s\n", shard_errmsg());
        harness_stop(h);
        remove_certs();
        return 1;
    }
    /* Accounts and maps are made inside a test, where ck_assert works. */
    tcase_set_timeout(tc, search_mode ? 1800 : 300);
    tcase_add_tests(tc, TESTS(make_accounts_and_maps, tls_verified_connection_works,
                              tls_missing_from_map_is_refused, tls_wrong_ca_fails_verification,
                              tls_missing_ca_file_is_clear, tls_without_verification_connects,
                              tls_client_certificate, tls_map_store, passwords_never_show,
                              broken_json_with_a_password, schema_role, app_role,
                              app_account_cannot_operate));
    if (search_mode) {
        tcase_add_test(tc, search_mover_privileges);
        tcase_add_test(tc, search_failover_privileges);
    } else {
        tcase_add_tests(tc, TESTS(mover_role, mover_over_tls, failover_role,
                                  failover_failing_after_the_fence));
    }
    tcase_add_test(tc, logs_hold_no_password);
    suite_add_tcase(s, tc);
    failed = run_suite(s, CK_NOFORK); /* the tests build on each other */
    printf("checked %u error messages, %u log messages, %u shardctl runs for passwords; "
           "%.0f s\n", nerrs, nlogs, nctl, (double)time(NULL) - t0);
    harness_stop(h);
    remove_certs();
    free(logbuf);
    return failed ? 1 : 0;
}
