/*
 * Reports copied out in the caller's version. Libshard 0.1.0's reports had
 * no version field (the first layout, frozen below), which its entry
 * points (compat.c) and a rebalance step built against it get. Versions
 * from 1 on are prefixes of the newest layout, as the options structs are.
 */
#include "report.h"

#include <stddef.h>
#include <string.h>

/* ---- the first layouts, frozen: never edit them --------------------------- */

typedef struct {
    uint64_t move_id;
    char source[65], target[65];
    unsigned first, last;
    int phase;
    uint64_t tables;
    uint64_t rows_copied, bytes_copied;
    double copy_seconds, catchup_seconds, cutover_seconds, verify_seconds;
    double pause_ms;
    unsigned fence_attempts;
    uint64_t rows_verified, mismatches;
    uint64_t map_version;
    int source_dropped;
    int target_pair_healthy;
} move_report_v0;

typedef struct {
    char pair[65];
    char old_master[300], new_master[300];
    int old_master_fenced;
    int64_t lag_transactions;
    double lag_seconds;
    double wait_ms;
    double total_ms;
    uint64_t map_version;
} failover_report_v0;

typedef struct {
    uint64_t rows_read;
    uint64_t created;
    uint64_t changed;
    uint64_t deleted;
    uint64_t unchanged;
    uint64_t adopted;
    double seconds;
} import_report_v0;

/* ---- versions 1 and on ------------------------------------------------------ */

static int version_ok(const char *what, const char *init, unsigned version, unsigned max)
{
    if (version >= 1 && version <= max)
        return 0;
    return shard__fail(SHARD_EINVAL, "%s.version %u is not one this library knows (1..%u): "
                      "start the report from %s", what, version, max, init);
}

int report_move_check(const shard_move_report *dst)
{
    return dst ? version_ok("shard_move_report", "SHARD_MOVE_REPORT_INIT", dst->version,
                            SHARD_MOVE_REPORT_VERSION)
               : 0;
}

int report_failover_check(const shard_failover_report *dst)
{
    return dst ? version_ok("shard_failover_report", "SHARD_FAILOVER_REPORT_INIT",
                            dst->version, SHARD_FAILOVER_REPORT_VERSION)
               : 0;
}

int report_import_check(const shard_import_report *dst)
{
    return dst ? version_ok("shard_import_report", "SHARD_IMPORT_REPORT_INIT", dst->version,
                            SHARD_IMPORT_REPORT_VERSION)
               : 0;
}

/* Version 1 is the newest layout, whole. When fields are appended (version
 * 2), a version-1 caller gets the prefix up to the first new field: pick
 * that size here by dst->version. The caller's version stays in dst. */
static void copy_newest(void *dst, const void *full, size_t size)
{
    unsigned version;

    memcpy(&version, dst, sizeof version); /* every report starts with it */
    memcpy(dst, full, size);
    memcpy(dst, &version, sizeof version);
}

void report_move_out(shard_move_report *dst, const shard_move_report *full)
{
    if (dst)
        copy_newest(dst, full, sizeof *dst);
}

void report_failover_out(shard_failover_report *dst, const shard_failover_report *full)
{
    if (dst)
        copy_newest(dst, full, sizeof *dst);
}

void report_import_out(shard_import_report *dst, const shard_import_report *full)
{
    if (dst)
        copy_newest(dst, full, sizeof *dst);
}

/* ---- the first layout -------------------------------------------------------- */

void report_move_first(void *dst, const shard_move_report *full)
{
    move_report_v0 v0;

    memset(&v0, 0, sizeof v0);
    v0.move_id = full->move_id;
    memcpy(v0.source, full->source, sizeof v0.source);
    memcpy(v0.target, full->target, sizeof v0.target);
    v0.first = full->first;
    v0.last = full->last;
    v0.phase = report_phase_first(full->phase);
    v0.tables = full->tables;
    v0.rows_copied = full->rows_copied;
    v0.bytes_copied = full->bytes_copied;
    v0.copy_seconds = full->copy_seconds;
    v0.catchup_seconds = full->catchup_seconds;
    v0.cutover_seconds = full->cutover_seconds;
    v0.verify_seconds = full->verify_seconds;
    v0.pause_ms = full->pause_ms;
    v0.fence_attempts = full->fence_attempts;
    v0.rows_verified = full->rows_verified;
    v0.mismatches = full->mismatches;
    v0.map_version = full->map_version;
    v0.source_dropped = full->source_dropped;
    v0.target_pair_healthy = full->target_pair_healthy;
    memcpy(dst, &v0, sizeof v0);
}

void report_failover_first(void *dst, const shard_failover_report *full)
{
    failover_report_v0 v0;

    memset(&v0, 0, sizeof v0);
    memcpy(v0.pair, full->pair, sizeof v0.pair);
    memcpy(v0.old_master, full->old_master, sizeof v0.old_master);
    memcpy(v0.new_master, full->new_master, sizeof v0.new_master);
    v0.old_master_fenced = full->old_master_fenced;
    v0.lag_transactions = full->lag_transactions;
    v0.lag_seconds = full->lag_seconds;
    v0.wait_ms = full->wait_ms;
    v0.total_ms = full->total_ms;
    v0.map_version = full->map_version;
    memcpy(dst, &v0, sizeof v0);
}

void report_import_first(void *dst, const shard_import_report *full)
{
    import_report_v0 v0;

    v0.rows_read = full->rows_read;
    v0.created = full->created;
    v0.changed = full->changed;
    v0.deleted = full->deleted;
    v0.unchanged = full->unchanged;
    v0.adopted = full->adopted;
    v0.seconds = full->seconds;
    memcpy(dst, &v0, sizeof v0);
}

int report_phase_first(int phase)
{
    return phase == SHARD_MOVE_DROPPING ? SHARD_MOVE_CLEANING : phase;
}

static void progress_first(int phase, uint64_t done, uint64_t total, void *payload)
{
    report_progress_first *w = payload;

    w->fn(report_phase_first(phase), done, total, w->payload);
}

const shard_move_options *report_opts_first(const shard_move_options *opts,
                                            report_progress_first *w)
{
    static const shard_move_options defaults = SHARD_MOVE_OPTIONS_INIT;

    if (!opts || !opts->progress || opts->version < 1 ||
        opts->version > SHARD_MOVE_OPTIONS_VERSION)
        return opts;
    w->o = defaults;
    memcpy(&w->o, opts, opts->version >= 2 ? sizeof *opts
                                           : offsetof(shard_move_options, reverse_window_s));
    w->fn = opts->progress;
    w->payload = opts->payload;
    w->o.progress = progress_first;
    w->o.payload = w;
    return &w->o;
}
