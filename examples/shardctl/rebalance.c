/*
 * shardctl rebalance: plan moves that even out the pairs, print the plan,
 * and with --yes run it, one move after the other, with the move's
 * progress display; the first interrupt stops after the current move.
 */
#include "shardctl.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Set by the signal thread at the first SIGINT: no further move starts. */
static atomic_int rebalance_stop;

/*
 * SIGINT is blocked in every thread (the mover's threads inherit the mask)
 * and taken here, so that no server call sees EINTR. The first stops the
 * rebalance after the current move; the second stops now, leaving the
 * move journaled for shardctl move resume.
 */
static void *rebalance_signals(void *arg)
{
    sigset_t *set = arg;
    int sig;

    for (int n = 0;; n++) {
        if (sigwait(set, &sig) != 0)
            continue;
        if (n == 0) {
            atomic_store(&rebalance_stop, 1);
            fputs("\nshardctl: interrupted: stopping after the current move (interrupt "
                  "again to stop at once; the move can then be resumed)\n", stderr);
        } else {
            fputs("\nshardctl: interrupted again: stopping now; finish the move with "
                  "shardctl move resume (see shardctl move status)\n", stderr);
            _exit(130);
        }
    }
    return NULL;
}

/* SIGINT from now on goes to a thread of its own; -1 when it cannot. */
static int take_sigint(void)
{
    static sigset_t set;
    pthread_t t;

    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0 ||
        pthread_create(&t, NULL, rebalance_signals, &set) != 0) {
        fprintf(stderr, "shardctl: cannot set up the interrupt handling\n");
        return -1;
    }
    pthread_detach(t);
    return 0;
}

static void load_text(int by, double load, char *buf, size_t size)
{
    if (by == SHARD_REBALANCE_BY_WRITES)
        snprintf(buf, size, "%.1f writes/s", load);
    else
        human_bytes((long long)load, buf, size);
}

static void print_rebalance_move(FILE *f, const shard_rebalance_move *m, size_t i, size_t n,
                                 int by)
{
    char b[32];
    human_bytes((long long)m->bytes, b, sizeof b);
    fprintf(f, "move %zu/%zu: shards %u-%u from %s to %s: %" PRIu64 " bytes (%s)", i + 1, n,
            m->first, m->last, m->from, m->to, m->bytes, b);
    if (by == SHARD_REBALANCE_BY_WRITES)
        fprintf(f, ", %.1f writes/s", m->writes);
    fputs(m->drain ? " (drain)\n" : "\n", f);
}

/* A drained pair that serves mod shards is not empty after the plan. */
static void note_mod_shards(const shard_map *map, const char *pair)
{
    uint32_t n = 0;
    for (uint32_t m = 0; m < shard_map_mod_count(map); m++) {
        const char *p;
        n += shard_map_mod_pair_of(map, m, &p) == 0 && strcmp(p, pair) == 0;
    }
    if (n)
        printf("note: %s also serves %u mod shard%s, which moves do not carry: it is not "
               "empty after the plan\n", pair, n, n == 1 ? "" : "s");
}

static void print_plan(const shard_rebalance *plan, const shard_rebalance_options *o,
                       const shard_map *map)
{
    size_t nm, np, nactive = 0;
    const shard_rebalance_move *mv = shard_rebalance_moves(plan, &nm);
    const shard_rebalance_pair *pp = shard_rebalance_pairs(plan, &np);
    double before, after, total = 0;
    int outside = 0;

    printf("rebalance by %s, threshold %g, map version %" PRIu64 ": %zu move%s\n",
           o->by == SHARD_REBALANCE_BY_WRITES ? "writes" : "bytes", o->threshold,
           shard_rebalance_map_version(plan), nm, nm == 1 ? "" : "s");
    for (size_t i = 0; i < nm; i++) {
        fputs("  ", stdout);
        print_rebalance_move(stdout, &mv[i], i, nm, o->by);
    }
    for (size_t i = 0; i < np; i++) {
        char lb[32], la[32];
        load_text(o->by, pp[i].load_before, lb, sizeof lb);
        load_text(o->by, pp[i].load_after, la, sizeof la);
        printf("  pair %s%s: %u -> %u shards, %s -> %s\n", pp[i].name,
               pp[i].drained ? " (drained)" : "", pp[i].shards_before, pp[i].shards_after, lb,
               la);
        total += pp[i].load_after;
        nactive += !pp[i].drained;
    }
    for (size_t i = 0; i < np && nactive && total > 0; i++) {
        double dev = pp[i].load_after / (total / (double)nactive) - 1;
        if (!pp[i].drained && (dev > o->threshold || dev < -o->threshold))
            outside = 1;
    }
    shard_rebalance_spread(plan, &before, &after);
    printf("  spread (max - min) / mean: %.3f before, %.3f after\n", before, after);
    for (size_t i = 0; i < np; i++)
        if (pp[i].drained)
            note_mod_shards(map, pp[i].name);
    if (!nm)
        printf("nothing to move: %s\n",
               outside ? "no move narrows the gap between the fullest and the emptiest pair "
                         "by more than the threshold"
                       : "every pair is within the threshold of the mean");
    else if (outside)
        printf("after the plan some pair is still outside the threshold (--max-moves, or "
               "shards too large to even out)\n");
}

typedef struct rebalance_progress {
    int by;
    move_display *md;
    shard_move_report last; /* of the last move that ran */
} rebalance_progress;

static int on_step(const shard_rebalance_move *m, size_t i, size_t n, int rc,
                   const shard_move_report *r, void *payload)
{
    rebalance_progress *p = payload;

    if (!r) {
        if (atomic_load(&rebalance_stop))
            return 1;
        fputs("rebalance: ", stderr);
        print_rebalance_move(stderr, m, i, n, p->by);
        p->md->phase = -1;
        return 0;
    }
    p->last = *r;
    move_display_end(p->md, rc);
    if (rc == 0)
        fprintf(stderr, "rebalance: move %zu/%zu done (move %" PRIu64 "): %" PRIu64
                " rows verified, %" PRIu64 " mismatches, pause %.1f ms, map version %" PRIu64
                "\n", i + 1, n, r->move_id, r->rows_verified, r->mismatches, r->pause_ms,
                r->map_version);
    return atomic_load(&rebalance_stop);
}

static int rebalance_options(const args *a, shard_rebalance_options *o)
{
    unsigned long long n;

    if (a->val[OPT_BY]) {
        if (strcmp(a->val[OPT_BY], "bytes") == 0)
            o->by = SHARD_REBALANCE_BY_BYTES;
        else if (strcmp(a->val[OPT_BY], "writes") == 0)
            o->by = SHARD_REBALANCE_BY_WRITES;
        else
            return usage_error("--by takes bytes or writes, not '%s'", a->val[OPT_BY]);
    }
    if (a->val[OPT_THRESHOLD]) {
        char *end;
        errno = 0;
        o->threshold = strtod(a->val[OPT_THRESHOLD], &end);
        if (end == a->val[OPT_THRESHOLD] || *end || errno || !(o->threshold > 0) ||
            o->threshold > 10)
            return usage_error("--threshold takes a fraction of the mean load above 0 (e.g. "
                               "0.1), not '%s'", a->val[OPT_THRESHOLD]);
    }
    if (a->val[OPT_MAX_MOVES]) {
        if (parse_num("--max-moves", a->val[OPT_MAX_MOVES], 1, 1000000, &n))
            return EXIT_USAGE;
        o->max_moves = (unsigned)n;
    }
    o->drain = a->val[OPT_DRAIN];
    o->pairs = a->val[OPT_PAIRS];
    if (a->val[OPT_DRY_RUN] && a->val[OPT_YES])
        return usage_error("rebalance takes --dry-run or --yes, not both");
    return 0;
}

/* The plan's moves, one after the other; the exit status. */
static int run_plan(const args *a, shard_ctx *ctx, shard_rebalance *plan,
                    shard_rebalance_options *o, shard_move_options *mo, move_display *md)
{
    rebalance_progress rp;
    size_t nm, done = 0;
    const shard_rebalance_move *mv = shard_rebalance_moves(plan, &nm);
    int rc;

    (void)a;
    fflush(stdout);
    memset(&rp, 0, sizeof rp);
    rp.by = o->by;
    rp.md = md;
    o->move = mo;
    o->step = on_step;
    o->payload = &rp;
    if (take_sigint())
        return EXIT_FAIL;
    rc = shard_rebalance_run(ctx, plan, o, &done);
    if (rc) {
        /* The failed move's id and how to go on, when it got that far. */
        rc = rp.last.move_id ? move_stopped(rc, &rp.last) : lib_error(rc);
        fprintf(stderr, "shardctl: %zu of %zu moves done; once the failed move is over (as "
                "above), shardctl rebalance plans again from there\n", done, nm);
        return rc;
    }
    if (done < nm) {
        fprintf(stderr, "shardctl: stopped after %zu of %zu moves; left:\n", done, nm);
        for (size_t i = done; i < nm; i++) {
            fputs("  ", stderr);
            print_rebalance_move(stderr, &mv[i], i, nm, o->by);
        }
        fprintf(stderr, "shardctl: run shardctl rebalance again to continue (it plans again "
                "from the new state)\n");
        return EXIT_FAIL;
    }
    printf("rebalanced: %zu move%s done\n", done, done == 1 ? "" : "s");
    return 0;
}

int cmd_rebalance(const args *a, shard_ctx *ctx, shard_map *unused)
{
    shard_rebalance_options o = SHARD_REBALANCE_OPTIONS_INIT;
    shard_move_options mo = SHARD_MOVE_OPTIONS_INIT;
    move_display md;
    shard_rebalance *plan = NULL;
    shard_map *map = NULL;
    size_t nm;
    int rc;

    (void)unused;
    if ((rc = rebalance_options(a, &o)) || move_options(a, &mo, &md))
        return rc ? rc : EXIT_USAGE;
    if (o.by == SHARD_REBALANCE_BY_WRITES)
        fprintf(stderr, "rebalance: sampling the write rate for %.1f s\n", o.sample_ms / 1e3);
    if ((rc = shard_rebalance_plan(ctx, &o, &plan)))
        return lib_error(rc);
    /* The plan reloaded the map: notes come from the one it used. */
    if ((rc = shard_ctx_map(ctx, &map))) {
        shard_rebalance_free(plan);
        return lib_error(rc);
    }
    print_plan(plan, &o, map);
    shard_map_free(map);
    shard_rebalance_moves(plan, &nm);
    if (nm && !a->val[OPT_DRY_RUN] && !a->val[OPT_YES])
        printf("nothing was changed: add --yes to run the plan\n");
    else if (nm && !a->val[OPT_DRY_RUN])
        rc = run_plan(a, ctx, plan, &o, &mo, &md);
    shard_rebalance_free(plan);
    return rc;
}
