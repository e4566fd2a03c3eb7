/*
 * Asking the fleet's servers what they are: shared by the status report
 * (status.c) and the topology edits (topology.c). Each call works on one
 * connection the caller holds, so that callers can fan out over servers.
 */
#ifndef LIBSHARD_FLEET_H
#define LIBSHARD_FLEET_H

#include "ctx.h"

#define FLEET_LINKS 16  /* replication connections read per server, at most */
#define FLEET_NAMED 5   /* missing databases or tables named, at most; then a count */
#define FLEET_MOVES 16  /* unfinished moves read per journal, at most */

/* One replication connection (a row of SHOW ALL SLAVES STATUS). */
typedef struct fleet_link {
    char name[65];             /* "" for the pair's own link */
    char source[300];          /* Master_Host:Master_Port */
    unsigned long source_id;   /* Master_Server_Id; 0: unknown */
    char io[16], sql[16];      /* Slave_IO_Running, Slave_SQL_Running */
    long long lag;             /* Seconds_Behind_Master; -1: NULL */
    char io_error[512], sql_error[512];
} fleet_link;

/* What one server says about itself. */
typedef struct fleet_server {
    char version[64];
    int read_only, log_bin, row_format, ignore_dups, log_slave_updates;
    unsigned long server_id, domain;
    char binlog_pos[2048], slave_pos[2048];
    fleet_link links[FLEET_LINKS];
    size_t nlinks;
    int links_rc;              /* the replication status could not be read */
    bool links_denied;         /* ... because the account lacks the privilege */
    char links_error[512];
} fleet_server;

/* A connection of its own to any server (the pool of ep, created on first use). */
int fleet_connect(shard_ctx *ctx, const shard_endpoint *ep, shard_conn **out);
/* Variables and replication links of the server behind c. A failure to read
 * the links is kept in s->links_rc; only a failure to read the variables
 * fails the call. */
int fleet_probe(shard_conn *c, fleet_server *s);
/* Is link l running without error? */
bool fleet_link_ok(const fleet_link *l);
/* The link of s that replicates from the server whose id is `id` (0: the
 * unnamed connection); NULL when there is none. */
const fleet_link *fleet_link_from(const fleet_server *s, unsigned long id);

/* What a server holds of the databases the map puts on its pair: every
 * open ID shard of the pair's ranges and every mod shard of its ranges. */
typedef struct fleet_inventory {
    uint64_t databases;        /* the map puts this many there */
    uint64_t id_shards, mod_shards;
    uint64_t missing;          /* databases absent */
    uint64_t incomplete;       /* databases present but lacking a table */
    uint64_t bytes;            /* data + index of the databases present */
    char named[FLEET_NAMED][140]; /* "db00080" or "db00080.pins" */
    size_t nnamed;
    /* The first problem found, to name its shard. */
    bool has_first;
    bool first_mod;
    unsigned first_shard;
    char first_what[140];
} fleet_inventory;

int fleet_inventory_get(shard_conn *c, const shard_map *map, size_t pair,
                        fleet_inventory *inv);

/* An unfinished move in a journal (phase before done). */
typedef struct fleet_move {
    uint64_t id;
    char source[65], target[65];
    unsigned first, last;
    int phase;
    bool running;  /* a mover holds the move's lock right now */
    char updated_at[40];
    char message[300];
} fleet_move;

/* The moves journaled on the master behind c (none when it has no
 * journal): all that are not over when `all` (a reverse window, a revert,
 * drops still to do: a pair they name is still needed), else those before
 * done (what status shows); only those naming `pair` (source or target)
 * unless it is NULL. The first `max` into out[0..*n); *total (when not
 * NULL) counts them all, so that a caller can say what it left out. */
int fleet_moves_get(shard_conn *c, const char *pair, fleet_move *out, size_t max, size_t *n,
                    size_t *total, bool all);

#endif
