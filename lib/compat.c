/*
 * The entry points that programs built against libshard 0.1.0 call, whose
 * reports had no version field: their calls bind to shard_move@LIBSHARD_0
 * and the others (lib/libshard.ver keeps these internal names local),
 * which run the current call on a report of the newest layout and write
 * the first layout into the caller's struct, whatever it held
 * (libshard(3), "Options and reports"). Above every call it wraps: nothing
 * in the library calls these.
 */
#include "report.h"

#if defined(__GNUC__) && defined(__ELF__)
#define SYMVER(impl, api) __asm__(".symver " #impl "," #api "@LIBSHARD_0")
#else
#define SYMVER(impl, api)
#endif

/* Each runs the current call on a report of the newest layout (NULL when
 * the caller's is NULL) and writes the first layout into the caller's. */
static int move_first(int rc, void *report, const shard_move_report *full)
{
    if (report)
        report_move_first(report, full);
    return rc;
}

static int failover_first(int rc, void *report, const shard_failover_report *full)
{
    if (report)
        report_failover_first(report, full);
    return rc;
}

static int import_first(int rc, void *report, const shard_import_report *full)
{
    if (report)
        report_import_first(report, full);
    return rc;
}

/*
 * A 0.1.0 move returned once its source was dropped; this library's
 * returns done first and leaves the drops (phase dropping) to a resume,
 * which a 0.1.0 program never calls: so they run here, before returning,
 * as they did. Their progress is told as cleaning.
 */
static int drop_after(shard_ctx *ctx, const shard_move_options *opts, int rc,
                      shard_move_report *full)
{
    shard_move_report dropped = SHARD_MOVE_REPORT_INIT;

    if (rc || full->phase != SHARD_MOVE_DONE || full->source_dropped || !full->move_id ||
        (opts && (opts->flags & (SHARD_MOVE_KEEP_SOURCE | SHARD_MOVE_DRY_RUN))))
        return rc;
    if ((rc = shard_move_resume(ctx, full->move_id, opts, &dropped)) == 0)
        full->source_dropped = dropped.source_dropped;
    return rc;
}

SYMVER(shard__move_v0, shard_move);
int shard__move_v0(shard_ctx *ctx, unsigned first, unsigned last, const char *target,
                   const shard_move_options *opts, void *report, char **plan)
{
    shard_move_report full = SHARD_MOVE_REPORT_INIT;
    report_progress_first w;
    const shard_move_options *o = report_opts_first(opts, &w);
    int rc = shard_move(ctx, first, last, target, o, &full, plan);

    return move_first(drop_after(ctx, o, rc, &full), report, &full);
}

/* resume, revert and finish: one signature. */
typedef int (*move_id_fn)(shard_ctx *, uint64_t, const shard_move_options *,
                          shard_move_report *);

static int move_id_v0(move_id_fn call, shard_ctx *ctx, uint64_t move_id,
                      const shard_move_options *opts, void *report)
{
    shard_move_report full = SHARD_MOVE_REPORT_INIT;
    report_progress_first w;
    const shard_move_options *o = report_opts_first(opts, &w);
    int rc = call(ctx, move_id, o, &full);

    return move_first(drop_after(ctx, o, rc, &full), report, &full);
}

SYMVER(shard__move_resume_v0, shard_move_resume);
int shard__move_resume_v0(shard_ctx *ctx, uint64_t move_id, const shard_move_options *opts,
                          void *report)
{
    return move_id_v0(shard_move_resume, ctx, move_id, opts, report);
}

SYMVER(shard__move_revert_v0, shard_move_revert);
int shard__move_revert_v0(shard_ctx *ctx, uint64_t move_id, const shard_move_options *opts,
                          void *report)
{
    return move_id_v0(shard_move_revert, ctx, move_id, opts, report);
}

SYMVER(shard__move_finish_v0, shard_move_finish);
int shard__move_finish_v0(shard_ctx *ctx, uint64_t move_id, const shard_move_options *opts,
                          void *report)
{
    return move_id_v0(shard_move_finish, ctx, move_id, opts, report);
}

SYMVER(shard__pair_failover_v0, shard_pair_failover);
int shard__pair_failover_v0(shard_ctx *ctx, const char *pair, int flags, void *report)
{
    shard_failover_report full = SHARD_FAILOVER_REPORT_INIT;

    return failover_first(shard_pair_failover(ctx, pair, flags, report ? &full : NULL), report,
                          &full);
}

/* Both imports: one signature. */
typedef int (*import_fn)(shard_ctx *, const shard_import_options *, shard_import_report *);

static int import_v0(import_fn call, shard_ctx *ctx, const shard_import_options *opts,
                     void *report)
{
    shard_import_report full = SHARD_IMPORT_REPORT_INIT;

    return import_first(call(ctx, opts, report ? &full : NULL), report, &full);
}

SYMVER(shard__import_table_v0, shard_import_table);
int shard__import_table_v0(shard_ctx *ctx, const shard_import_options *opts, void *report)
{
    return import_v0(shard_import_table, ctx, opts, report);
}

SYMVER(shard__import_mapping_v0, shard_import_mapping);
int shard__import_mapping_v0(shard_ctx *ctx, const shard_import_options *opts, void *report)
{
    return import_v0(shard_import_mapping, ctx, opts, report);
}
