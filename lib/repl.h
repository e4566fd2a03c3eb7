/*
 * Replication helpers that moves and failover share: GTID positions (pure
 * functions, unit-tested without a server), reading a whole value,
 * waiting for a position in steps shorter than the read timeout, reading
 * every replication connection's status. See libshard-move(7) and shard_pair_failover(3).
 */
#ifndef LIBSHARD_REPL_H
#define LIBSHARD_REPL_H

#include "ctx.h"

/* ---- GTID positions: "D-S-N,D-S-N,..." as the server prints them --------- */

/* Only digits, '-' and ',' (safe inside a quoted SQL literal). */
bool repl_gtid_valid(const char *pos);
/* 0, or SHARD_ESERVER naming the unexpected position. */
int repl_gtid_check(const char *pos);
/* The sequence number of domain d in pos (the highest, should pos name it
 * more than once, as two positions joined by ',' do); *found (may be NULL)
 * says whether pos has that domain (0 when absent). */
uint64_t repl_gtid_seq(const char *pos, unsigned long domain, bool *found);
/* Whether `have` is at or past `want` in every domain of want, except the
 * nskip domains in skip. */
bool repl_gtid_covers(const char *have, const char *want, const unsigned long *skip,
                      size_t nskip);
/* Transactions of `want` that `have` lacks, summed over domains. */
int64_t repl_gtid_behind(const char *want, const char *have);
/*
 * A start position for replication from a snapshot: snap's domains except
 * the nkeep domains in keep, then cur's positions for every domain snap
 * did not give. *out is the caller's (free()); no length limit.
 */
int repl_gtid_merge(const char *cur, const char *snap, const unsigned long *keep,
                    size_t nkeep, char **out);
/*
 * Where a connection from a source starts: pos (a position of the source)
 * for the nfrom domains in from (the source pair's own: its moved rows'
 * new writes are in them), cur for the nkeep domains in keep (the
 * replicating server's own pair), and for any other domain the further of
 * the two (the source only relays those: going back in them would apply
 * again what other connections did, going further skips what the
 * snapshot holds). *out: free().
 */
int repl_gtid_start(const char *cur, const char *pos, const unsigned long *from, size_t nfrom,
                    const unsigned long *keep, size_t nkeep, char **out);
/* pos's entries in the nonly domains in only. *out: free(). */
int repl_gtid_only(const char *pos, const unsigned long *only, size_t nonly, char **out);
/*
 * The entries of cur in the nonly domains in only that `from` also has,
 * where cur is further than from: where a connection repositioned to from
 * has to go again to be back at cur. *out: free(); "" when nowhere.
 */
int repl_gtid_ahead(const char *cur, const char *from, const unsigned long *only,
                    size_t nonly, char **out);

/* ---- on a connection -------------------------------------------------------- */

/* The first column of the first row of sql, whole, in a caller-owned *out
 * (free(); "" for NULL or no row). */
int repl_value(shard_conn *c, const char *sql, char **out);
/* The same, parsed as an unsigned number. */
int repl_value_u64(shard_conn *c, const char *sql, uint64_t *out);
/*
 * MASTER_GTID_WAIT(pos) for up to `seconds` in all, in steps shorter than
 * the connection's read timeout (a single long wait would be cut off by
 * it). *reached says whether the server applied pos.
 */
int repl_wait_pos(shard_conn *c, const char *pos, double seconds, bool *reached);

/* One replication connection of SHOW ALL SLAVES STATUS (strings never NULL). */
typedef struct repl_link {
    char *name;        /* "" for the default (a pair's own) connection */
    char *io_running;  /* "Yes", "No", "Connecting", "Preparing" */
    char *sql_running; /* "Yes", "No" */
    char *last_io_error, *last_sql_error;
    char *do_db;       /* Replicate_Do_DB */
    char *gtid_io_pos;
    char *master_host;
    char *io_state;    /* Slave_IO_State: "Waiting for master to send event", ... */
    char *sql_state;   /* Slave_SQL_State: what the applier does or waits for ("" if unknown) */
    unsigned master_port;
    unsigned long master_server_id; /* Master_Server_Id; 0: unknown */
    long seconds_behind; /* -1: NULL */
} repl_link;

typedef struct repl_status {
    repl_link *links;
    size_t n;
} repl_status;

/* Every replication connection of the server, however many. */
int repl_status_read(shard_conn *c, repl_status *st);
void repl_status_free(repl_status *st);
/* The connection called name, or NULL. */
const repl_link *repl_status_find(const repl_status *st, const char *name);
/* Both threads running. */
bool repl_link_running(const repl_link *l);
/* A thread is stopped ("No"): the link will not catch up by itself, unlike
 * one that is only reconnecting. */
bool repl_link_stopped(const repl_link *l);
/* "IO thread Connecting, SQL thread No (error 1062: ...)" for messages. */
void repl_link_describe(const repl_link *l, char *buf, size_t size);

#endif
