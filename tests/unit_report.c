/*
 * Unit tests (no server) for the versioned reports (lib/report.c,
 * libshard(3) "Options and reports"): the first layout (libshard 0.1.0,
 * no version field) is written field by field into a buffer of exactly
 * its size, so ASan sees a write past its end; version 1 is written whole
 * and keeps the caller's version; an unknown version (0: a zeroed report,
 * or one newer than the library) is SHARD_EINVAL naming the struct and the
 * version before anything runs; the 0.1.0 entry points fill the first
 * layout; shard_pair_failover_opts refuses options it does not know.
 */
#include "internal.h" /* private: tests link libshard.a */
#include "check_util.h"
#include "first_reports.h"
#include "report.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A heap buffer of exactly n bytes, filled with 0xA5. */
static void *exact(size_t n)
{
    void *p = malloc(n);

    ck_assert_ptr_nonnull(p);
    memset(p, 0xA5, n);
    return p;
}

static shard_move_report full_move(void)
{
    shard_move_report f = SHARD_MOVE_REPORT_INIT;

    f.move_id = 11;
    snprintf(f.source, sizeof f.source, "%s", "MySQL001");
    snprintf(f.target, sizeof f.target, "%064d", 7); /* the longest name */
    f.first = 3;
    f.last = 9;
    f.phase = SHARD_MOVE_DONE;
    f.tables = 12;
    f.rows_copied = 13;
    f.bytes_copied = 14;
    f.copy_seconds = 1.5;
    f.catchup_seconds = 2.5;
    f.cutover_seconds = 3.5;
    f.verify_seconds = 4.5;
    f.pause_ms = 5.5;
    f.fence_attempts = 15;
    f.rows_verified = 16;
    f.mismatches = 17;
    f.map_version = 18;
    f.source_dropped = 1;
    f.target_pair_healthy = 1;
    return f;
}

START_TEST(move_first_layout_field_by_field)
{
    shard_move_report f = full_move();
    old_move_report *o = exact(sizeof *o);

    report_move_first(o, &f);
    ck_assert_uint_eq(o->move_id, 11);
    ck_assert_str_eq(o->source, "MySQL001");
    ck_assert_str_eq(o->target, f.target);
    ck_assert_uint_eq(o->first, 3);
    ck_assert_uint_eq(o->last, 9);
    ck_assert_int_eq(o->phase, SHARD_MOVE_DONE);
    ck_assert_uint_eq(o->tables, 12);
    ck_assert_uint_eq(o->rows_copied, 13);
    ck_assert_uint_eq(o->bytes_copied, 14);
    ck_assert(o->copy_seconds == 1.5 && o->catchup_seconds == 2.5);
    ck_assert(o->cutover_seconds == 3.5 && o->verify_seconds == 4.5 && o->pause_ms == 5.5);
    ck_assert_uint_eq(o->fence_attempts, 15);
    ck_assert_uint_eq(o->rows_verified, 16);
    ck_assert_uint_eq(o->mismatches, 17);
    ck_assert_uint_eq(o->map_version, 18);
    ck_assert_int_eq(o->source_dropped, 1);
    ck_assert_int_eq(o->target_pair_healthy, 1);
    free(o);
}
END_TEST

START_TEST(failover_and_import_first_layouts)
{
    shard_failover_report f = SHARD_FAILOVER_REPORT_INIT;
    shard_import_report i = SHARD_IMPORT_REPORT_INIT;
    old_failover_report *of = exact(sizeof *of);
    old_import_report *oi = exact(sizeof *oi);

    snprintf(f.pair, sizeof f.pair, "%s", "MySQL002");
    memset(f.old_master, 'm', sizeof f.old_master - 1);
    snprintf(f.new_master, sizeof f.new_master, "%s", "127.0.0.1:3307");
    f.old_master_fenced = 1;
    f.lag_transactions = -1;
    f.lag_seconds = 2.25;
    f.wait_ms = 3.25;
    f.total_ms = 4.25;
    f.map_version = 99;
    report_failover_first(of, &f);
    ck_assert_str_eq(of->pair, "MySQL002");
    ck_assert_uint_eq(strlen(of->old_master), sizeof of->old_master - 1);
    ck_assert_str_eq(of->new_master, "127.0.0.1:3307");
    ck_assert_int_eq(of->old_master_fenced, 1);
    ck_assert_int_eq(of->lag_transactions, -1);
    ck_assert(of->lag_seconds == 2.25 && of->wait_ms == 3.25 && of->total_ms == 4.25);
    ck_assert_uint_eq(of->map_version, 99);

    i.rows_read = 1;
    i.created = 2;
    i.changed = 3;
    i.deleted = 4;
    i.unchanged = 5;
    i.adopted = 6;
    i.seconds = 7.5;
    report_import_first(oi, &i);
    ck_assert(oi->rows_read == 1 && oi->created == 2 && oi->changed == 3 && oi->deleted == 4 &&
              oi->unchanged == 5 && oi->adopted == 6 && oi->seconds == 7.5);
    free(of);
    free(oi);
}
END_TEST

/* Version 1 is the whole struct, and the caller's version stays. */
START_TEST(version_one_whole)
{
    shard_move_report f = full_move(), *dst = exact(sizeof *dst);

    f.version = 0; /* the library's own report: its version is not the caller's */
    dst->version = SHARD_MOVE_REPORT_VERSION;
    ck_assert_int_eq(report_move_check(dst), 0);
    report_move_out(dst, &f);
    ck_assert_uint_eq(dst->version, SHARD_MOVE_REPORT_VERSION);
    ck_assert_uint_eq(dst->move_id, 11);
    ck_assert_int_eq(dst->target_pair_healthy, 1);
    ck_assert_int_eq(memcmp((char *)dst + sizeof dst->version,
                            (char *)&f + sizeof f.version, sizeof f - sizeof f.version), 0);
    report_move_out(NULL, &f); /* no report: nothing */
    free(dst);
}
END_TEST

START_TEST(unknown_versions_named)
{
    shard_move_report m = SHARD_MOVE_REPORT_INIT;
    shard_failover_report f = SHARD_FAILOVER_REPORT_INIT;
    shard_import_report i = SHARD_IMPORT_REPORT_INIT;

    ck_assert_int_eq(report_move_check(NULL), 0);
    m.version = 0;
    ck_assert_int_eq(report_move_check(&m), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "shard_move_report.version 0"));
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "SHARD_MOVE_REPORT_INIT"));
    f.version = SHARD_FAILOVER_REPORT_VERSION + 1;
    ck_assert_int_eq(report_failover_check(&f), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "shard_failover_report.version 2"));
    i.version = 77;
    ck_assert_int_eq(report_import_check(&i), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "shard_import_report.version 77"));
}
END_TEST

/* ---- the calls, on a context whose servers are never reached --------------- */

static char Dir[64], Path[128];

static shard_ctx *open_ctx(void)
{
    static const char map[] =
        "{\"version\": 3, \"open_shards\": 4, \"credentials\": {\"user\": \"app\","
        " \"password_env\": \"LIBSHARD_UNIT_REPORT_PW\"}, \"objects\": {\"pins\": 1},"
        " \"pairs\": {\"MySQL001\": {\"master\": \"127.0.0.1:1\", \"standby\": \"127.0.0.1:2\"},"
        "            \"MySQL002\": {\"master\": \"127.0.0.1:3\", \"standby\": \"127.0.0.1:4\"}},"
        " \"id_shards\": [{\"range\": [0, 1], \"pair\": \"MySQL001\"},"
        "                 {\"range\": [2, 3], \"pair\": \"MySQL002\"}]}";
    shard_options o = SHARD_OPTIONS_INIT;
    shard_ctx *ctx = NULL;
    FILE *f;

    snprintf(Dir, sizeof Dir, "%s", "/tmp/libshard-report-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(Dir));
    snprintf(Path, sizeof Path, "%s/map.json", Dir);
    ck_assert_ptr_nonnull(f = fopen(Path, "w"));
    fputs(map, f);
    fclose(f);
    setenv("LIBSHARD_UNIT_REPORT_PW", "x", 1);
    o.refresh_interval_ms = 0;
    o.connect_timeout_ms = 200;
    ck_assert_msg(shard_ctx_open(&ctx, Path, &o) == 0, "%s", shard_errmsg());
    return ctx;
}

static void close_ctx(shard_ctx *ctx)
{
    shard_ctx_free(ctx);
    unlink(Path);
    rmdir(Dir);
}

/* A zeroed report (version 0) and one newer than the library are refused
 * by every call that takes one, naming it, before any server is asked (the
 * servers of this map do not exist: a call that went on would fail with
 * SHARD_ECONNECT instead), and the report is left as it was. */
START_TEST(calls_refuse_unknown_report_versions)
{
    shard_ctx *ctx = open_ctx();
    shard_move_report m, zero;
    shard_failover_report f;
    shard_import_report i;
    shard_import_options io = SHARD_IMPORT_OPTIONS_INIT;

    memset(&m, 0, sizeof m);
    zero = m;
    ck_assert_int_eq(shard_move(ctx, 0, 1, "MySQL002", NULL, &m, NULL), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "shard_move_report.version 0"));
    ck_assert_int_eq(memcmp(&m, &zero, sizeof m), 0);
    m.version = 9;
    ck_assert_int_eq(shard_move_resume(ctx, 1, NULL, &m), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "shard_move_report.version 9"));
    ck_assert_int_eq(shard_move_revert(ctx, 1, NULL, &m), SHARD_EINVAL);
    ck_assert_int_eq(shard_move_finish(ctx, 1, NULL, &m), SHARD_EINVAL);
    ck_assert_uint_eq(m.version, 9);
    ck_assert_uint_eq(m.move_id, 0);

    memset(&f, 0, sizeof f);
    ck_assert_int_eq(shard_pair_failover(ctx, "MySQL001", 0, &f), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "shard_failover_report.version 0"));
    ck_assert_str_eq(f.pair, "");

    memset(&i, 0, sizeof i);
    io.table = "legacy";
    io.type = 1;
    io.source = "mysql://app@127.0.0.1:1/legacy";
    ck_assert_int_eq(shard_import_table(ctx, &io, &i), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "shard_import_report.version 0"));
    ck_assert_int_eq(shard_import_mapping(ctx, &io, &i), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "shard_import_report.version 0"));
    close_ctx(ctx);
}
END_TEST

START_TEST(failover_options_refused)
{
    shard_ctx *ctx = open_ctx();
    shard_failover_options o = SHARD_FAILOVER_OPTIONS_INIT;
    shard_failover_report r = SHARD_FAILOVER_REPORT_INIT;

    o.version = 0;
    ck_assert_int_eq(shard_pair_failover_opts(ctx, "MySQL001", &o, &r), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "shard_failover_options.version 0"));
    o.version = SHARD_FAILOVER_OPTIONS_VERSION + 1;
    ck_assert_int_eq(shard_pair_failover_opts(ctx, "MySQL001", &o, &r), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "shard_failover_options.version 2"));
    o.version = SHARD_FAILOVER_OPTIONS_VERSION;
    o.flags = 6;
    ck_assert_int_eq(shard_pair_failover_opts(ctx, "MySQL001", &o, &r), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "flags"));
    ck_assert_int_eq(shard_pair_failover(ctx, "MySQL001", 4, &r), SHARD_EINVAL);
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "0x4"));
    ck_assert_int_eq(shard_pair_failover_opts(NULL, "MySQL001", NULL, &r), SHARD_EINVAL);
    ck_assert_str_eq(r.pair, ""); /* refused before anything was written */
    close_ctx(ctx);
}
END_TEST

/* The 0.1.0 entry points write the first layout into a struct of exactly
 * that size, whatever it held (a 0.1.0 program need not zero it), also
 * when the call fails. */
START_TEST(first_entry_points_fill_the_first_layout)
{
    shard_ctx *ctx = open_ctx();
    old_move_report *m = exact(sizeof *m);
    old_failover_report *f = exact(sizeof *f);
    old_import_report *i = exact(sizeof *i);
    shard_import_options io = SHARD_IMPORT_OPTIONS_INIT;

    ck_assert_int_eq(shard__move_v0(ctx, 0, 1, "MySQL009", NULL, m, NULL), SHARD_EINVAL);
    ck_assert_uint_eq(m->move_id, 0);
    ck_assert_int_eq(m->target_pair_healthy, 0);
    memset(m, 0xA5, sizeof *m);
    ck_assert_int_eq(shard__move_resume_v0(NULL, 0, NULL, m), SHARD_EINVAL);
    ck_assert_int_eq(shard__move_revert_v0(NULL, 0, NULL, m), SHARD_EINVAL);
    ck_assert_int_eq(shard__move_finish_v0(NULL, 0, NULL, m), SHARD_EINVAL);
    ck_assert_uint_eq(m->mismatches, 0);
    ck_assert_int_eq(shard__move_v0(NULL, 0, 1, "x", NULL, NULL, NULL), SHARD_EINVAL);

    /* A failover of a pair the map lacks fails after the report's pair is
     * known: nothing past the old struct's end is written. */
    ck_assert_int_eq(shard__pair_failover_v0(ctx, "MySQL009", 0, f), SHARD_EINVAL);
    ck_assert_uint_eq(f->map_version, 0);
    ck_assert_int_eq(shard__pair_failover_v0(ctx, "MySQL009", 0, NULL), SHARD_EINVAL);

    io.version = 0; /* bad options: the report is still the first layout */
    ck_assert_int_eq(shard__import_table_v0(ctx, &io, i), SHARD_EINVAL);
    ck_assert_uint_eq(i->rows_read, 0);
    memset(i, 0xA5, sizeof *i);
    ck_assert_int_eq(shard__import_mapping_v0(ctx, &io, i), SHARD_EINVAL);
    ck_assert(i->seconds == 0);
    free(m);
    free(f);
    free(i);
    close_ctx(ctx);
}
END_TEST

static Suite *report_suite(void)
{
    Suite *s = suite_create("report");

    tcase_set_timeout(tcase_of(s, "layouts", TESTS(move_first_layout_field_by_field,
                                                   failover_and_import_first_layouts,
                                                   version_one_whole, unknown_versions_named)),
                      60);
    tcase_set_timeout(tcase_of(s, "calls", TESTS(calls_refuse_unknown_report_versions,
                                                 failover_options_refused,
                                                 first_entry_points_fill_the_first_layout)),
                      60);
    return s;
}

int main(void)
{
    return run_suite(report_suite(), CK_FORK_GETENV) ? EXIT_FAILURE : EXIT_SUCCESS;
}
