/*
 * The shard move's private header (libshard-move(7)): one move's state,
 * shared by the files of lib/move/:
 *
 *   mv.c       the helpers every file uses: the two sides and the direction,
 *              pairs, database names, the mover's connections, statements,
 *              progress, reading a position, dropping one side's copies,
 *              the test hook
 *   journal.c  the durable move record, entering a phase, finding moves,
 *              the refusals an unfinished move causes (face.h)
 *   plan.c     pairs, preflight checks, tables, the target's schema (made,
 *              dropped), fence rows
 *   copy.c     the snapshot copy: the target's tables made from the
 *              source's definitions, each just before it is filled
 *   infile.c   feeding the copy to the target as LOAD DATA LOCAL INFILE
 *   bulk.c     ... or, where that is refused, as array-bound prepared INSERTs
 *   throttle.c the copy's rate limit and its pause on the source's load
 *   catchup.c  the filtered replication connections (shared per source
 *              master, forward and reverse), catching up, the target's
 *              replication-setup lock held over the cut-over
 *   cutover.c  the fence, the flip (publish), the verification snapshots at
 *              the fence, postponing the cut-over
 *   lease.c    the shards marked moving in the map, the lease wait before a fence
 *   verify.c   comparing every row; the target's snapshots
 *   cleanup.c  waiting for both halves of the target, dropping the source
 *              (a forward move's after it reported done: paced, resumable)
 *   driver.c   the phase switch, in both directions (a revert is the same
 *              phases with the sides exchanged); shard_move, _resume,
 *              _abort, _revert, _finish; a move of shards another left
 *              dropping finishes those drops first
 *   status.c   shard_move_status, phase names
 *
 * No file calls one that calls it back: driver.c calls the phases' files,
 * which call one another downward only (cutover.c -> verify.c, cleanup.c
 * -> plan.c -> copy.c -> bulk.c, infile.c -> throttle.c) and journal.c,
 * status.c and catchup.c; every file calls mv.c, which calls none of
 * them. face.h is what the rest of lib/ may call.
 */
#ifndef LIBSHARD_MOVE_MOVE_H
#define LIBSHARD_MOVE_MOVE_H

#include "../control.h"
#include "face.h"
#include "../object.h"
#include "../publish.h"
#include "../repl.h"

#include <pthread.h>

#define MOVE_FENCE_WAIT_S 30 /* target applying up to the fence, at most */
#define MOVE_PAIR_WAIT_S 30  /* both halves of the target applying up to the flip */
#define MOVE_MAX_WORKERS 64
#define MOVE_RETRIES 5       /* transient failures retried per run */
#define MOVE_VERIFY_CHUNK_ROWS 1000 /* rows per checksummed chunk */
#define MOVE_VERIFY_MAX_KEY 8       /* primary key columns a chunk boundary can have */
#define MOVE_VERIFY_GROUP 32        /* small tables or chunks per statement */
#define MOVE_POSTPONE_POLL_MS 500   /* how often a postponed cut-over looks at its file */

/* The phases, in the journal's numbers (the public SHARD_MOVE_*). */
typedef enum move_phase {
    MOVE_PLANNED = SHARD_MOVE_PLANNED,
    MOVE_COPYING = SHARD_MOVE_COPYING,
    MOVE_CATCHUP = SHARD_MOVE_CATCHUP,
    MOVE_FENCED = SHARD_MOVE_FENCED,
    MOVE_FLIPPED = SHARD_MOVE_FLIPPED,
    MOVE_VERIFYING = SHARD_MOVE_VERIFYING,
    MOVE_CLEANING = SHARD_MOVE_CLEANING,
    MOVE_DONE = SHARD_MOVE_DONE,
    MOVE_ABORTED = SHARD_MOVE_ABORTED,
    MOVE_REVERSIBLE = SHARD_MOVE_REVERSIBLE,
    MOVE_REVERTING = SHARD_MOVE_REVERTING,
    MOVE_REVERTED = SHARD_MOVE_REVERTED,
    MOVE_DROPPING = SHARD_MOVE_DROPPING
} move_phase;

#define MOVE_LINK_WAIT_S 120 /* a shared connection reaching a joining move's start */

/* A move's two sides as the current direction sees them: a revert's
 * source is the journal's target (mv.dir). */
typedef enum move_side { MOVE_SOURCE, MOVE_TARGET } move_side;

/* One side of a move, the journal's source (sides[0]) or target (sides[1]):
 * its pair, the mover's connections to its master, the replication
 * connection there that reads the other side. */
typedef struct move_half {
    long pi;                          /* the pair's index in mv.map */
    shard_conn *c;                    /* its master (the mover's own) */
    shard_conn *w[MOVE_MAX_WORKERS];  /* per-worker, by fanout_run's index */
    char link[64]; /* libshard_revert_<target> on the source, libshard_from_<source> on the target */
} move_half;

typedef struct mtable {
    char db[SHARD_DBNAME_MAX];
    char name[65];
    uint64_t rows;   /* counted (the plan), else estimated (the copy) */
    uint64_t copied; /* rows copied so far (under mv.lock) */
} mtable;

/* How the copy hands rows to the target, decided once per copy. */
typedef enum move_feed {
    MOVE_FEED_INFILE, /* LOAD DATA LOCAL INFILE, streamed (infile.c) */
    MOVE_FEED_BULK,   /* array-bound prepared INSERTs (bulk.c; local_infile off) */
    MOVE_FEED_INSERT  /* multi-row INSERTs of hex literals (no array binding) */
} move_feed;

typedef struct mv {
    shard_ctx *ctx;
    shard_move_options o;
    shard_move_report *r;
    shard_map *map;
    move_half sides[2]; /* the journal's source and target */
    int dir;            /* 0 forward (sides[0] the source), 1 a revert (sides[1]) */
    unsigned first, last;
    uint64_t id;
    move_phase phase;
    uint64_t version_from;
    bool resumed;  /* run from a journal: earlier runs' work is this move's own */
    /* GTID positions (never NULL once set up); fence and flip are the
     * current direction's cut-over's. */
    char *snap, *fence, *flip;
    char *rev;     /* the target's position under the fence: the reverse stream's start */
    unsigned window_s;      /* the reverse window asked for (journaled) */
    uint64_t reverse_until; /* end of the window, the journal server's unix time */
    int reverse_state;      /* 1: the reverse stream carries this move's databases */
    bool finish;   /* end the reverse window now (shard_move_finish) */
    bool parked;   /* reversible and not finishing: this run ends here */
    bool revert;   /* revert now (shard_move_revert) */
    bool reported; /* this run brought the move to dropping: it returns done there */
    mtable *tables;
    size_t ntables;
    bool listed;       /* tables listed in this run */
    bool target_made;  /* target's databases made in this run (the copy makes its tables) */
    bool target_ours;  /* the target's copies are this move's (journaled) */
    bool repl_checked; /* the replication connection runs with its filter */
    bool cut_locked;   /* holds the target's replication-setup lock (cut-over) */
    bool final;        /* the failure is not worth retrying (a limit ran out) */
    bool published;    /* this run's flip was sent to the store (move_publish) */
    bool publish_unknown; /* ...and its answer was lost: it may have landed */
    unsigned retries;  /* transient failures retried in this run */
    double fence_t0;   /* when this run fenced (0: an earlier run did) */
    double lease_ready; /* lease.c: monotonic time from which the fence may go up */
    unsigned lease_ms;  /* lease.c: the longest lease of the maps marked (and write bound) */
    unsigned own_domain_restarts; /* catchup.c: restarts of the catch-up's connection
                                   * after 1236 in a domain of its own pair */
    unsigned fence_statements; /* statements the last fence took (journaled) */
    /* Connections of the mover's own (never pooled); the masters' are in sides. */
    shard_conn *ctl;   /* the journal's target master: the journal and the move's lock */
    shard_conn *vsnap[MOVE_MAX_WORKERS]; /* target snapshots at the fence */
    unsigned nvsnap;
    pthread_mutex_t lock; /* counters and the progress callback */
    uint64_t done, total;
    /* Verification (verify.c). */
    bool verify_live;  /* no snapshot of the flip point: the target as it is now */
    char flip_at[64];  /* the target's clock at the fence, UTC text ("": unknown) */
    uint64_t verify_unchecked; /* rows a live verification could not compare */
    uint64_t verify_missing;   /* of those, source rows absent on the target */
    move_feed feed;              /* the copy's way of writing (copy.c) */
    double create_s;             /* the copy's seconds making tables, summed over workers */
    bool ddl_direct;             /* the target's standby gets the DDL from the mover (plan.c) */
    shard_conn *tsb[MOVE_MAX_WORKERS]; /* per worker, to the target's standby, unlogged */
    struct move_throttle *th;    /* the copy's throttle, while it runs */
} mv;

/* Test hook: called at named points of a move (driver.c); non-zero stops
 * the move there with that code. */
extern int (*shard__move_hook)(uint64_t move_id, const char *point);
/* The hook at point (mv.c): its code as the move's failure, or 0. Every
 * move_enter passes one ("entered"), and so do the steps between. */
int move_hook(mv *m, const char *point);

/* ---- helpers (mv.c) ---------------------------------------------------------- */

/* The current direction's side s (its index in sides). */
static inline move_half *move_half_of(mv *m, move_side s)
{
    return &m->sides[m->dir ^ (int)s];
}
/* The current source's and target's masters, the mover's own connections. */
static inline shard_conn *move_src(mv *m)
{
    return move_half_of(m, MOVE_SOURCE)->c;
}
static inline shard_conn *move_tgt(mv *m)
{
    return move_half_of(m, MOVE_TARGET)->c;
}
/* Worker connections to the current source's (target's) master. */
static inline shard_conn **move_wsrcs(mv *m)
{
    return move_half_of(m, MOVE_SOURCE)->w;
}
static inline shard_conn **move_wdsts(mv *m)
{
    return move_half_of(m, MOVE_TARGET)->w;
}
const shard_pairdef *move_sp(const mv *m);
const shard_pairdef *move_dp(const mv *m);
/* The journal's source (side 0) and target (side 1), whatever the direction. */
const shard_pairdef *move_pair(const mv *m, int side);
/* Both masters' connections opened (those not open), or closed. */
int move_open_masters(mv *m);
void move_close_masters(mv *m);
/* A revert begins (libshard-move(7), "Revert"): the same phases in the
 * other direction, the sides exchanged (dir = 1); the forward cut-over's
 * positions are done with. */
void move_turn(mv *m);
/* The public phase of the move as the journal has it: a revert's phases are
 * SHARD_MOVE_REVERTING (their step in the journal's revert_step). */
int move_public_phase(const mv *m);
void move_db(const mv *m, unsigned shard, char *db);
/* A connection of the mover's own: its session settings never reach a pool. */
int move_conn(mv *m, const shard_endpoint *ep, shard_conn **out);
void move_close(shard_conn **c);
/* Worker w's source or target connection, opened on first use. */
int move_wsrc(mv *m, unsigned w, shard_conn **out);
int move_wdst(mv *m, unsigned w, shard_conn **out);
void move_close_workers(mv *m);
/* How many workers per-table work uses (bounded by the pool size). */
unsigned move_threads(const mv *m);
int move_runf(shard_conn *c, const char *fmt, ...) SHARD_PRINTF(2, 3);
void move_progress(mv *m, int phase, uint64_t done, uint64_t total);
/* A debug-level log line "move ID: STEP in S s" (since *t0), and *t0 = now:
 * where a phase's time goes, for operators and benchmarks. */
void move_step(mv *m, double *t0, const char *step);
/* The moved databases as "db00002,db00003" (or quoted for IN (...)). */
int move_db_list(const mv *m, sqlbuf *q, bool quoted);
bool move_name_ok(const char *s);
/* Replace *slot with a copy of s. */
int move_set_str(char **slot, const char *s);
/* c's @@gtid_binlog_pos, whole and checked, into *slot (what it held is
 * freed); *slot is left as it was on failure. The fence position, the
 * flip position, the reverse stream's start. */
int move_read_pos(shard_conn *c, char **slot);
/* Whether c's server holds pos (but for the domains skip): in its binary
 * log (log_slave_updates) or its replication position, whichever is
 * further. */
int move_holds(shard_conn *c, const char *pos, const unsigned long *skip, size_t nskip,
               bool *yes);
/* The moved databases dropped on one side's master (its worker
 * connections), over the workers. */
int move_drop_dbs(mv *m, move_side side);
/* The moved tables (m->tables) on c held against writes (LOCK TABLES ...
 * READ, waiting at most fence_timeout_s for a transaction that writes
 * them) until c says UNLOCK TABLES or closes: snapshots opened meanwhile
 * on that server see the same moved rows, and writers of other databases
 * wait for nothing (libshard-move(7), "Many moves at once"). */
int move_lock_tables(mv *m, shard_conn *c);

/* GET_LOCK(name) on c, asked in steps within c's read timeout (a wait
 * the client gives up on first would break the connection and leave the
 * server a request of a dead session) until wait_s have passed; then
 * SHARD_EBUSY naming the server, what (who held it: "another mover's
 * replication setup") and the lock. */
int move_get_lock(shard_conn *c, const char *name, unsigned wait_s, const char *what);

/* One DDL statement of the move's at a time on c's server, for every mover
 * there: InnoDB runs concurrent CREATE/DROP one after another (on its data
 * dictionary), and while a queue of them waits, writes on the server's other
 * databases wait in "Opening tables" until the last is done (libshard-move(7),
 * "Many moves at once"). One at a time, a write waits for one statement at
 * most. sql is run between the lock and its release. */
int move_ddl(shard_conn *c, const char *sql);
/* move_ddl, and then(c) into *said once the statement succeeded, before the
 * lock's release (its warnings are still the statement's). */
int move_ddl_then(shard_conn *c, const char *sql, bool (*then)(shard_conn *), bool *said);
int move_ddlf(shard_conn *c, const char *fmt, ...) SHARD_PRINTF(2, 3);

/* The connections' names: libshard_from_<pair> on a target,
 * libshard_revert_<pair> on a source (the pair names lowered), into sides. */
void move_link_names(mv *m);

/* ---- journal.c ---------------------------------------------------------------- */

int move_journal_open(mv *m);
int move_journal_lock(mv *m);
/* Whether this run still holds the move's lock (0), or SHARD_ECONFLICT: its
 * journal connection was lost and another mover may have taken the move
 * over (and settled its fence). */
int move_journal_lock_held(mv *m);
int move_journal_insert(mv *m);
/*
 * Enter a phase: the one way a move changes phase. Journals it (with the
 * counters, the positions and msg), tells the progress callback and logs
 * it. msg may be NULL.
 */
int move_enter(mv *m, move_phase phase, const char *msg);
/* Journal the current phase's positions again (checked: a position the
 * next step depends on). */
int move_journal_save(mv *m, const char *msg);
/* Journal the current phase again with a message (a failure's reason). */
void move_note(mv *m, const char *msg);

/* An unfinished move as the journal has it. */
typedef struct move_row {
    uint64_t id;
    char source[65], target[65];
    unsigned first, last;
    int phase, flags;
    uint64_t version_from;
    uint64_t reverse_until;
    unsigned window_s;
    int reverse_state;
    bool running; /* a mover holds the move's lock right now */
} move_row;

/* Unfinished moves (id 0: all) on every master of map. Fails when a
 * master cannot be asked: no answer is never "no move". *rows: free(). */
int move_find(shard_ctx *ctx, const shard_map *map, uint64_t id, move_row **rows,
              size_t *n);
/* Move id if it is over (done, aborted, reverted) in a journal of map:
 * *found, and its row. Fails as move_find does. */
int move_find_over(shard_ctx *ctx, const shard_map *map, uint64_t id, move_row *row,
                   bool *found);
/* Load move id (0: the only unfinished one) into m and take its lock. */
int move_load(shard_ctx *ctx, uint64_t id, mv *m);

/* ---- plan.c ---------------------------------------------------------------------- */

int move_resolve_pairs(mv *m, const char *target);
/* Both pairs can take part (plan: the checks as text, may be NULL). */
int move_preflight(mv *m, sqlbuf *plan);
/* A resumed move: what a restart can change, checked again. */
int move_recheck(mv *m);
int move_list_tables(mv *m);
int move_plan_text(mv *m, char **plan);
/* Create the target's databases (SHARD_EEXISTS when a fresh move finds
 * tables there); the copy makes their tables from the source's
 * definitions, each just before filling it. */
int move_create_target(mv *m);
int move_drop_target(mv *m);
/* The fence table (unlogged) on all four servers, the moved databases
 * fenced on the target master until the flip and without stale rows on
 * its standby, their rows on the source (unfenced). */
int move_fence_prepare(mv *m);
/* The source's rows again (a resumed move), unfenced where missing. */
int move_fence_rows_source(mv *m);
/* The one unlogged statement that fences (or unfences) every moved
 * database on c; *matched: the rows it found. */
int move_fence_update(mv *m, shard_conn *c, bool on, uint64_t *matched);
/* The source's rows (still fenced) say the flip's map is in the store
 * (FENCE_FLIPPED): fenced contexts read the store once, now. */
int move_fence_mark_flipped(mv *m);
/* The target master's rows (fenced since planning) unfenced: after the
 * flip. */
int move_fence_target_lift(mv *m);
/* The target master's rows, once an abort dropped its copies. */
int move_fence_target_delete(mv *m);
/* The source's fence rows, once its databases are dropped. */
int move_fence_delete(mv *m);

/* ---- copy.c -------------------------------------------------------------------------- */

int move_copy(mv *m);
int move_count_rows(mv *m, shard_conn *src);
/* Worker w's connection to the target's standby, opened on first use with
 * its binary log off for the session (the DDL made there directly). */
int move_wtsb(mv *m, unsigned w, shard_conn **out);
void move_close_wtsb(mv *m);

/* ---- throttle.c ------------------------------------------------------------------------ */

#define MOVE_LOAD_MAX 8       /* variables in one max_load */
#define MOVE_LOAD_NAME_MAX 64

typedef struct move_loadvar {
    char name[MOVE_LOAD_NAME_MAX + 1];
    uint64_t limit;
} move_loadvar;

/* One copy's throttle, shared by its workers. */
typedef struct move_throttle {
    mv *m;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    double rate;      /* rows per second (0: no limit) */
    double next;      /* the token bucket: when the next batch may go */
    move_loadvar load[MOVE_LOAD_MAX];
    unsigned nload;
    shard_conn *mon;  /* the watcher's connection to the source master */
    pthread_t monitor;
    bool running, stop;
    bool paused;      /* a variable is above its limit: no batch starts */
    bool failed;      /* a worker failed: the others stop waiting */
    unsigned pauses;
} move_throttle;

/* Check "VAR=N[,VAR=N...]" (NULL or "": none); out (MOVE_LOAD_MAX of
 * them) and n may be NULL. SHARD_EINVAL with the reason. */
int move_load_parse(const char *spec, move_loadvar *out, unsigned *n);
/* Set up th from m->o; with max_load, look at the source once and start
 * the thread that keeps looking. Stop it with move_throttle_stop, also
 * after a failure. */
int move_throttle_start(mv *m, move_throttle *th);
void move_throttle_stop(move_throttle *th);
/* A worker failed: nobody waits for the load to drop any more. */
void move_throttle_fail(move_throttle *th);
bool move_throttle_paused(move_throttle *th);
/* Wait while the copy is paused (an error once another worker failed). */
int move_throttle_wait(move_throttle *th);
/* Rows per batch under the rate (want, or fewer for a low rate). */
uint64_t move_throttle_batch(move_throttle *th, uint64_t want);
/* When the next batch may go (now_seconds): once the rows copied before
 * it are paid for. */
double move_throttle_due(move_throttle *th);
/* Pay for rows copied (move_copied does, for every batch): only rows
 * copied cost time, an empty table none. th may be NULL. */
void move_throttle_charge(move_throttle *th, uint64_t rows);
/* Before a batch outside any statement: wait while paused, then for the
 * bucket. */
int move_throttle_gate(move_throttle *th);
/* Wait until the rows copied are paid for: the copy ends no sooner than
 * its rows at the rate allow. */
void move_throttle_settle(move_throttle *th);
/* Count rows and bytes as copied, pay for them (move_throttle_charge) and
 * tell the progress callback: every copy path calls it per batch. */
void move_copied(mv *m, const mtable *t, uint64_t rows, uint64_t bytes);
/* After busy seconds of work on the source that writers share (a drop):
 * rest so that such work takes at most half of the source's time, and
 * wait while the load is above max_load. */
int move_throttle_rest(move_throttle *th, double busy);

/* ---- bulk.c ------------------------------------------------------------------------------ */

/* Whether dst's server takes array binding (MariaDB's bulk execution). */
bool move_bulk_supported(shard_conn *dst);
/* Copy the rows of res into t on dst, batch_rows rows (and at most half
 * the packet limit) per execution of one prepared INSERT. */
int move_bulk_copy(mv *m, move_throttle *th, shard_conn *src, shard_conn *dst,
                   const mtable *t, MYSQL_RES *res);

/* ---- infile.c -------------------------------------------------------------------------- */

/* Whether dst takes LOAD DATA LOCAL INFILE (probed with an empty one into
 * table t): 1 yes, 0 refused (the reason in the thread's message), <0 an
 * error. */
int move_infile_probe(mv *m, shard_conn *dst, const mtable *t);
/* Copy the rows of res (a SELECT * in primary-key order, being read with
 * mysql_use_result) into t on dst, in LOAD DATA statements of bounded
 * size, each its own transaction. */
int move_infile_copy(mv *m, move_throttle *th, shard_conn *src, shard_conn *dst,
                     const mtable *t, MYSQL_RES *res);

/* ---- catchup.c ------------------------------------------------------------------------ */

/*
 * A replication connection that moves share: one per (replicating server,
 * master it reads), filtered to the union of its moves' databases. The
 * registry of who uses it is the journal: the catch-up connection carries
 * the moves from its source pair in catchup and fenced, the reverse stream
 * the reversible moves to its target pair that joined it.
 */
typedef struct move_link {
    shard_conn *c;              /* the replicating server's master */
    const shard_pairdef *pair;  /* its pair: its own GTID domains are never repositioned */
    const shard_pairdef *from;  /* the pair whose master it reads */
    const char *name;
    bool reverse;
} move_link;
void move_link_forward(mv *m, move_link *l);
void move_link_reverse(mv *m, move_link *l);
/* Add the move's databases, starting them at pos (the others keep theirs). */
int move_link_join(mv *m, const move_link *l, const char *pos);
/* Take the move's databases out; the connection goes with the last. */
int move_link_leave(mv *m, const move_link *l);
/* The filter again (not kept across a restart), the connection started. */
int move_link_ensure(mv *m, const move_link *l);
/* 0 healthy, 1 broken (why says how), or a negative code. */
int move_link_health(mv *m, const move_link *l, char *why, size_t size);
/* 1 when the connection exists with the move's databases in its filter
 * (running or not), 0 when not, or a negative code. */
int move_link_carries(mv *m, const move_link *l);

int move_repl_setup(mv *m);
/* Set the filter again and start the connection (a resumed move). */
int move_repl_start(mv *m);
int move_repl_remove(mv *m);
/* The reverse stream: joined from m->rev (or, resumed, adopted where an
 * earlier run started it), checked, left. */
int move_reverse_setup(mv *m);
int move_reverse_start(mv *m);
int move_reverse_remove(mv *m);
/* m->t's pair's GTID domains (master, standby): never waited for there. */
int move_pair_domains(mv *m, const shard_pairdef *p, unsigned long *d, size_t *n);
int move_catch_up(mv *m);
/* m->t has applied pos in the source pair's domains, within seconds. */
int move_wait_applied(mv *m, const char *pos, double seconds, bool *reached);
/* Start the target pair's own link if it is stopped. */
void move_pair_link_start(mv *m);
/* The target master's replication-setup lock, held from before the fence
 * until the flip (or the fence lifted): another mover's connection setup
 * stops every connection on the target, which would stall this move's
 * wait for the fence position, so it waits for the flip instead. on=false
 * releases it if held. */
int move_cut_lock(mv *m, bool on);

/* ---- cutover.c -------------------------------------------------------------------------- */

int move_fence_set(mv *m, bool on);
int move_fence_state(mv *m, bool *on);
/* Does the stored map already route the moved range to the target? 1 yes,
 * 0 no, a negative code when the store cannot be read (then nobody can
 * tell: keep the fence). */
int move_flipped_in_store(mv *m);
int move_publish(mv *m);
/* Whether the flip landed, settled so that it can never land later: 1 the
 * stored map has it; 0 it has not, and a version published over it
 * without the flip makes a flip still in flight fail its compare-and-
 * swap; or the store's failure (*unknown: the settling publish itself
 * may have landed). */
int move_settle_flip(mv *m, bool *unknown);
/* The store answers a read now: a fence is not put up for a flip that
 * could not be published (the failure, if not). */
int move_store_answers(mv *m);
/*
 * After a cut-over that failed with rc, fenced: did its flip land anyway
 * (its answer lost)? 0 when it did: go on as flipped. When it certainly
 * did not (nothing was sent, or the store answered no), lift(m, rc) at
 * once: traffic goes back where it was. When the answer was lost, the
 * store is asked until it answers (at most catchup_timeout_s), and a flip
 * that did not land is made unable to land later (a version published
 * over it) before the fence is lifted; a store that never answers keeps
 * the fence (a failure): lifting it after a flip that did land would let
 * old maps write on one side while new ones write on the other. flipped
 * and fence name them in the message ("flipped back", "the target's
 * fence").
 */
int move_publish_landed(mv *m, int rc, int (*lift)(mv *m, int rc), const char *flipped,
                        const char *fence);
/* lease.c: mark (on) or unmark the move's shards "moving" in the map; the
 * fence waits out the leases of contexts that read an unmarked map
 * (libshard-move(7), "The lease"). move_lease_wait: marked, and waited,
 * before every fence; move_unmark: once the move is over (best effort). */
int move_mark(mv *m, bool on);
int move_lease_wait(mv *m);
void move_unmark(mv *m);
/* A move that is over left shards first..last marked (its mover stopped
 * before move_unmark): the mark goes, unless an unfinished move that may
 * still fence overlaps it (*carrier: its id). *cleared: a map without it
 * was published. */
int move_clear_stale_mark(shard_ctx *ctx, unsigned first, unsigned last, uint64_t *carrier,
                          bool *cleared);
/* Every mark of the map that no unfinished move carries goes (best
 * effort: a failure is logged): what a move's planning does first. */
void move_sweep_marks(mv *m);
/* At the fence: the target snapshots verification compares against, and
 * the target's clock journaled (flip_at). */
int move_open_vsnaps(mv *m);
/* Caught up: wait while the postpone_cutover_file exists, replicating. */
int move_postpone(mv *m);

/* ---- verify.c ------------------------------------------------------------------------------ */

int move_verify(mv *m);
/* One snapshot per worker of the target as it is now; one_point: all of
 * one commit point (commits wait while they open). */
int move_vsnaps_open(mv *m, bool one_point);
void move_close_vsnaps(mv *m);

/* ---- cleanup.c ------------------------------------------------------------------------------ */

/* Both halves of the target hold everything up to the flip; both links run. */
int move_target_pair_ready(mv *m);
/* The same check, only reported (report and a warning). */
void move_check_target_pair(mv *m);
/* The drop of the source (libshard-move(7), "Dropping the source"): a
 * forward move's after it reported done, a revert's (the journal's
 * target) before it reports reverted. One database at a time, paced, each
 * skipped once gone, so that a resume after a kill drops the rest; the
 * source's fence rows last. */
int move_drop_paced(mv *m);
/* How many of the moved databases the source master still has. */
int move_source_left(mv *m, shard_conn *c, uint64_t *left);

#endif
