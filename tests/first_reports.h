/*
 * tests/first_reports.h: libshard 0.1.0's reports, as its header declared
 * them (no version field), for the tests of the entry points that
 * programs built against it still call (shard_move@LIBSHARD_0, ...).
 */
#ifndef LIBSHARD_TESTS_FIRST_REPORTS_H
#define LIBSHARD_TESTS_FIRST_REPORTS_H

#include <stdint.h>

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
} old_move_report;

typedef struct {
    char pair[65];
    char old_master[300], new_master[300];
    int old_master_fenced;
    int64_t lag_transactions;
    double lag_seconds;
    double wait_ms;
    double total_ms;
    uint64_t map_version;
} old_failover_report;

typedef struct {
    uint64_t rows_read, created, changed, deleted, unchanged, adopted;
    double seconds;
} old_import_report;

#endif
