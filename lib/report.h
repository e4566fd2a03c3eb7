/*
 * The caller's reports (shard_move_report, shard_failover_report,
 * shard_import_report), versioned like the options structs: the library
 * fills a report of its own (the newest layout) and copies out only what
 * the caller's version has (libshard(3), "Options and reports").
 *
 * Programs built against libshard 0.1.0, whose reports had no version
 * field, call the entry points of the symbol version LIBSHARD_0, declared
 * here and defined in compat.c: they write the first layout whatever the
 * caller's struct holds. Their names are internal; lib/libshard.ver keeps
 * them local and binds each to the API name at LIBSHARD_0 (the current
 * ones are LIBSHARD_0.2).
 */
#ifndef LIBSHARD_REPORT_H
#define LIBSHARD_REPORT_H

#include "internal.h"

/* Each is 0 when dst is NULL or its version is one this library writes
 * (1 up to the newest); SHARD_EINVAL naming the struct and the version
 * otherwise. */
int report_move_check(const shard_move_report *dst);
int report_failover_check(const shard_failover_report *dst);
int report_import_check(const shard_import_report *dst);

/* Copy the library's report `full` (the newest layout) to the caller's dst
 * (may be NULL: nothing), only the fields dst's version has; dst's version
 * was checked. Call once the full report is final. */
void report_move_out(shard_move_report *dst, const shard_move_report *full);
void report_failover_out(shard_failover_report *dst, const shard_failover_report *full);
void report_import_out(shard_import_report *dst, const shard_import_report *full);

/* Write `full` into dst in the first layout (libshard 0.1.0), for the
 * 0.1.0 entry points and a rebalance step built against 0.1.0; dst has
 * room for that layout (the current struct of the same kind has). */
void report_move_first(void *dst, const shard_move_report *full);
void report_failover_first(void *dst, const shard_failover_report *full);
void report_import_first(void *dst, const shard_import_report *full);

/* Move options for a caller built against 0.1.0 (its entry points, a
 * rebalance of options version 1): its progress callback never sees a
 * phase 0.1.0 did not have (dropping is told as cleaning, the phase 0.1.0
 * dropped the source in). Returns opts itself when it has no callback,
 * else w->o, a copy of only the caller's version's fields (an older
 * caller's struct is shorter) whose callback wraps the caller's. An
 * unknown version comes back as it is, for the call to refuse. */
typedef struct report_progress_first {
    shard_move_options o;
    shard_move_progress_fn fn;
    void *payload;
} report_progress_first;
const shard_move_options *report_opts_first(const shard_move_options *opts,
                                            report_progress_first *w);
/* The phase as 0.1.0 knew it. */
int report_phase_first(int phase);

/* ---- compat.c: the 0.1.0 entry points (shard_move@LIBSHARD_0, ...) ---------- */

SHARD_EXPORT int shard__move_v0(shard_ctx *ctx, unsigned first, unsigned last,
                                const char *target, const shard_move_options *opts,
                                void *report, char **plan);
SHARD_EXPORT int shard__move_resume_v0(shard_ctx *ctx, uint64_t move_id,
                                       const shard_move_options *opts, void *report);
SHARD_EXPORT int shard__move_revert_v0(shard_ctx *ctx, uint64_t move_id,
                                       const shard_move_options *opts, void *report);
SHARD_EXPORT int shard__move_finish_v0(shard_ctx *ctx, uint64_t move_id,
                                       const shard_move_options *opts, void *report);
SHARD_EXPORT int shard__pair_failover_v0(shard_ctx *ctx, const char *pair, int flags,
                                         void *report);
SHARD_EXPORT int shard__import_table_v0(shard_ctx *ctx, const shard_import_options *opts,
                                        void *report);
SHARD_EXPORT int shard__import_mapping_v0(shard_ctx *ctx, const shard_import_options *opts,
                                          void *report);

#endif
