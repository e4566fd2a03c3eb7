/*
 * tests/harness.h: throwaway MariaDB master-master pairs for server tests.
 *
 * A thin C wrapper around tests/servers.sh (found through the environment
 * variable LIBSHARD_TESTS_DIR, default "tests", relative to the working
 * directory at harness_start time). Servers listen on 127.0.0.1 and on unix
 * sockets in a fresh temporary directory only.
 *
 * Pair P (1-based) is servers "s<2P-1>" (master) and "s<2P>" (standby), named
 * MySQL001, MySQL002, ... in the shard map at harness_map_path(). The
 * map's credentials are the application's account `shard`, which holds the
 * application's privileges only (rows; no schema apply, move, failover,
 * import, topology change, status or map store publish: see servers.sh);
 * the operators' account `shardadmin` holds ALL PRIVILEGES. Both have the
 * password in $LIBSHARD_PASSWORD (harness_start sets a random one if it is
 * unset). Operator work goes through harness_admin_options(),
 * harness_open_admin() or, for shardctl, HARNESS_ADMIN_ARGS; application
 * work stays on the map's account.
 *
 * Servers started by a harness are stopped by harness_stop(), and otherwise
 * at exit of the process that started them (atexit) or when that process dies
 * of a fatal signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS,
 * SIGABRT, SIGFPE, SIGILL; only handlers still at SIG_DFL are installed).
 * Forked children (Check's CK_FORK mode) never stop them by exiting.
 *
 * All functions may be called from Check's forked test processes: servers
 * restarted from a test run in their own session, so Check's killpg() of the
 * test's process group does not take them down.
 */
#ifndef LIBSHARD_TESTS_HARNESS_H
#define LIBSHARD_TESTS_HARNESS_H

#include <libshard.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct harness harness;

/* The operators' account of the test servers. */
#define HARNESS_ADMIN_USER "shardadmin"
#define HARNESS_ADMIN_PASSWORD_ENV "LIBSHARD_PASSWORD"
/* shardctl's options for it, for a list of arguments:
 * ARGV(HARNESS_ADMIN_ARGS, "move", ...). */
#define HARNESS_ADMIN_ARGS "--user", HARNESS_ADMIN_USER, "--password-env", \
                           HARNESS_ADMIN_PASSWORD_ENV
/* The same as one string, for a shell command line. */
#define HARNESS_ADMIN_OPTS "--user " HARNESS_ADMIN_USER " --password-env " \
                           HARNESS_ADMIN_PASSWORD_ENV

/* Sets opts->user and opts->password_env to the operators' account (opts
 * keeps its other fields): for shard_ctx_open of a context that applies the
 * schema, moves, fails over, imports, changes the topology or reads the
 * fleet's status. */
void harness_admin_options(shard_options *opts);

/* shard_ctx_open(out, harness_map_path(h), ...) as the operators' account,
 * with opts (NULL: the defaults; user and password_env are replaced).
 * Returns what shard_ctx_open returns. */
int harness_open_admin(const harness *h, shard_ctx **out, const shard_options *opts);

/* shard_schema_apply on the harness's map, as the operators' account (the
 * application's may not create databases). 0 or the SHARD_E* code, the
 * detail in shard_errmsg(). */
int harness_schema_apply(const harness *h);

/* Start npairs pairs (64 id shards, 16 mod shards in the map). Sets
 * LIBSHARD_PASSWORD to a random value if unset, creates a mkdtemp dir under
 * $TMPDIR or /tmp, runs `servers.sh start`. NULL on failure, with the reason
 * on stderr (nothing is left running). */
harness *harness_start(int npairs);

/* Same, with the map's open_shards (--shards) and mod_shards count
 * (--mod-shards); 0 means the default. */
harness *harness_start_ex(int npairs, int shards, int mod_shards);

/* Same, with servers that also accept TLS connections using the
 * certificates in certdir (ca.pem, server-cert.pem, server-key.pem: what
 * tests/tls.sh makes); harness_restart() keeps them. */
harness *harness_start_tls(int npairs, int shards, int mod_shards, const char *certdir);

/* Same as harness_start_ex, but the map puts every ID shard and every mod
 * shard on the first `serving` pairs only (an even, contiguous split, as
 * servers.sh splits them over all pairs); pairs serving+1..npairs serve
 * nothing: empty pairs, for moves to go to. 1 <= serving <= npairs. */
harness *harness_start_serving(int npairs, int serving, int shards, int mod_shards);

const char *harness_map_path(const harness *h); /* DIR/map.json */
const char *harness_dir(const harness *h);      /* DIR */

/* The 127.0.0.1 TCP port of a server ("s1", ...), from DIR/servers; -1 if
 * there is no such server. */
int harness_port(const harness *h, const char *server);

/* These return the script's exit status (0 = success; 128+N if it died of
 * signal N; -1 if it could not be run). */
int harness_kill(harness *h, const char *server);    /* SIGKILL, waits for it */
int harness_restart(harness *h, const char *server); /* same port; START SLAVE */
int harness_pause(harness *h, const char *server);   /* SIGSTOP */
int harness_resume(harness *h, const char *server);  /* SIGCONT */
/* Clean shutdown of one server (SIGTERM, SIGKILL after 20 s); its files stay,
 * harness_restart() brings it back. */
int harness_stop_server(harness *h, const char *server);

/* Runs sql (one or more ;-separated statements) as root on the server (the
 * client `servers.sh sql` runs, run directly), in the client's batch mode
 * without column names (--batch --skip-column-names:
 * tab-separated values, one row a line). If out is not NULL, *out receives
 * the malloc'd stdout (never NULL on return, "" if empty or the script could
 * not run); free() it. Errors go to stderr. Returns the exit status. */
int harness_sql(harness *h, const char *server, const char *sql, char **out);

/* Waits (at most timeout_s seconds) until the standby of pair P (server
 * s<2P>) has applied everything its master (s<2P-1>) has in its binary log,
 * in every GTID domain but the standby's own (which the master only relays
 * back). 0 when it has; -1 on timeout or error (the reason on stderr). */
int harness_sync_standby(harness *h, int pair, unsigned timeout_s);

/* Stops all servers of h by pid, removes its directory and frees h.
 * Accepts NULL. */
void harness_stop(harness *h);

#ifdef __cplusplus
}
#endif

#endif /* LIBSHARD_TESTS_HARNESS_H */
