/*
 * The import's pure helpers, no server (libshard-import(7)): source URLs
 * (a password is never accepted, nor echoed), strict UTF-8, lookup values,
 * batch sizes.
 */
#include <check.h>
#include <jansson.h>
#include <libshard.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "legacy.h"
#include "import/import.h" /* import_adapt_batch */

START_TEST(urls)
{
    source_url u;

    ck_assert_int_eq(import_parse_url("mysql://reader@legacy.example:3307/app", &u), 0);
    ck_assert_str_eq(u.user, "reader");
    ck_assert_str_eq(u.host, "legacy.example");
    ck_assert_uint_eq(u.port, 3307);
    ck_assert_str_eq(u.db, "app");
    ck_assert_int_eq(import_parse_url("mysql://r@10.0.0.1/db_1", &u), 0);
    ck_assert_uint_eq(u.port, 3306);
    ck_assert_int_eq(import_parse_url("mysql://r@[::1]:4000/x", &u), 0);
    ck_assert_str_eq(u.host, "::1");
    ck_assert_uint_eq(u.port, 4000);

    static const char *const bad[] = {
        "postgres://r@h/db", "mysql://h/db", "mysql://@h/db", "mysql://r@h", "mysql://r@/db",
        "mysql://r@h:0/db", "mysql://r@h:65536/db", "mysql://r@h:33x/db", "mysql://r@h/",
        "mysql://r@h/d-b", "mysql://r@h/d`b", "mysql://r@ho st/db", "mysql://r@[::1/db",
        "mysql://r@h/db;drop"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(import_parse_url(bad[i], &u) == SHARD_EINVAL, "accepted %s", bad[i]);
    ck_assert_int_eq(import_parse_url(NULL, &u), SHARD_EINVAL);
}
END_TEST

/* A password in the URL is refused, and the message does not repeat it. */
START_TEST(url_password_refused)
{
    source_url u;
    ck_assert_int_eq(import_parse_url("mysql://reader:hunter22@h:3306/app", &u), SHARD_EINVAL);
    ck_assert_ptr_null(strstr(shard_errmsg(), "hunter22"));
    ck_assert_ptr_nonnull(strstr(shard_errmsg(), "password"));
}
END_TEST

#define BAD(s) import_utf8_bad((const unsigned char *)(s), sizeof(s) - 1)

START_TEST(utf8)
{
    ck_assert_int_eq(BAD(""), -1);
    ck_assert_int_eq(BAD("plain ascii \t\n"), -1);
    ck_assert_int_eq(BAD("nul\0inside"), -1);
    ck_assert_int_eq(BAD("caf\xC3\xA9"), -1);
    ck_assert_int_eq(BAD("\xE2\x82\xAC euro"), -1);
    ck_assert_int_eq(BAD("\xF0\x9F\x98\x80"), -1);      /* 4 bytes */
    ck_assert_int_eq(BAD("\xF4\x8F\xBF\xBF"), -1);      /* U+10FFFF */
    ck_assert_int_eq(BAD("ab\xE9"), 2);                 /* latin1 */
    ck_assert_int_eq(BAD("\xC3("), 0);                  /* bad continuation */
    ck_assert_int_eq(BAD("x\xC3"), 1);                  /* truncated */
    ck_assert_int_eq(BAD("\xF0\x9F\x98"), 0);           /* truncated */
    ck_assert_int_eq(BAD("\xC0\xAF"), 0);               /* overlong */
    ck_assert_int_eq(BAD("\xE0\x80\xAF"), 0);           /* overlong */
    ck_assert_int_eq(BAD("\xF0\x80\x80\xAF"), 0);       /* overlong */
    ck_assert_int_eq(BAD("\xED\xA0\x80"), 0);           /* surrogate */
    ck_assert_int_eq(BAD("\xF4\x90\x80\x80"), 0);       /* above U+10FFFF */
    ck_assert_int_eq(BAD("\xF8\x88\x80\x80\x80"), 0);   /* 5 bytes */
    ck_assert_int_eq(BAD("ok\x80"), 2);                 /* lone continuation */
    ck_assert_int_eq(BAD("\xFF"), 0);
}
END_TEST

START_TEST(entries)
{
    legacy_entry e;

    legacy_entry_parse(NULL, &e);
    ck_assert_int_eq(e.state, LEGACY_ABSENT);
    legacy_entry_parse("70437463654401 9e107d9d372bb6826bd81d3542a419d6", &e);
    ck_assert_int_eq(e.state, LEGACY_LIVE);
    ck_assert_uint_eq(e.id, UINT64_C(70437463654401));
    ck_assert_str_eq(e.md5, "9e107d9d372bb6826bd81d3542a419d6");
    legacy_entry_parse("70437463654401 deleted", &e);
    ck_assert_int_eq(e.state, LEGACY_DELETED);
    ck_assert_uint_eq(e.id, UINT64_C(70437463654401));
    legacy_entry_parse("pending 17", &e);
    ck_assert_int_eq(e.state, LEGACY_PENDING);
    ck_assert_uint_eq(e.shard, 17);

    static const char *const bad[] = {
        "", "pending", "pending ", "pending 65536", "pending 1x", "42 9e107d9d372bb6826bd81d3542a419d6",
        "70437463654401", "70437463654401 9E107D9D372BB6826BD81D3542A419D6",
        "70437463654401 9e107d9d", "70437463654401 gone", "x 9e107d9d372bb6826bd81d3542a419d6"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        legacy_entry_parse(bad[i], &e);
        ck_assert_msg(e.state == LEGACY_BAD, "\"%s\" parsed as state %d", bad[i], e.state);
    }
}
END_TEST

/* The import writes a row's strings itself: byte for byte what jansson
 * writes, or the checksums of rows imported before would all differ. */
static void same_as_jansson(const char *str, size_t n)
{
    json_t *v = json_stringn(str, n);
    char *want = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    char *got = malloc(6 * n + 2 + 1);
    size_t len = import_json_escape(got, str, n);

    got[len] = '\0';
    ck_assert_ptr_nonnull(want);
    ck_assert_uint_eq(len, strlen(want));
    ck_assert_msg(memcmp(got, want, len) == 0, "escaped as %s, jansson: %s", got, want);
    free(got);
    free(want);
    json_decref(v);
}

START_TEST(json_strings)
{
    char one[3];
    static const char *texts[] = {"", "plain", "quote \" backslash \\ slash /",
                                  "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80",
                                  "tab\tnl\ncr\rbs\bff\f", "del \x7F", "</script>",
                                  "\xE2\x80\xA8 line separator"};

    for (int c = 0; c < 0x80; c++) { /* every ASCII byte, alone and in text */
        one[0] = (char)c;
        same_as_jansson(one, 1);
        one[0] = 'a';
        one[1] = (char)c;
        one[2] = 'z';
        same_as_jansson(one, 3);
    }
    same_as_jansson("nul\0inside", 10);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        same_as_jansson(texts[i], strlen(texts[i]));
}
END_TEST

/* Batches are sized in bytes (about IMPORT_BATCH_BYTES) for objects and a
 * join table's records alike, unless batch_rows fixes them. */
START_TEST(batch_sizes)
{
    shard_import_options o = SHARD_IMPORT_OPTIONS_INIT;
    import_run r;

    import_run_init(&r, NULL, &o);
    ck_assert_uint_eq(r.batch, IMPORT_BATCH_FIRST);
    import_adapt_batch(&r, 1000 * 4096, 1000); /* 4 kB objects */
    ck_assert_uint_eq(r.batch, IMPORT_BATCH_BYTES / 4096);
    import_adapt_batch(&r, 1000 * 110, 1000); /* mapping records: "12:34" "ID ID SEQ" */
    ck_assert_uint_eq(r.batch, IMPORT_BATCH_MAX);
    import_adapt_batch(&r, 10 * 1000000, 10); /* 1 MB objects */
    ck_assert_uint_eq(r.batch, IMPORT_BATCH_MIN);
    import_adapt_batch(&r, 0, 0); /* an empty batch changes nothing */
    ck_assert_uint_eq(r.batch, IMPORT_BATCH_MIN);
    o.batch_rows = 300;
    import_run_init(&r, NULL, &o);
    import_adapt_batch(&r, 1000 * 110, 1000);
    ck_assert_uint_eq(r.batch, 300);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("import");

    tcase_of(s, "import", TESTS(urls, url_password_refused, utf8, entries, json_strings,
                                batch_sizes));
    return run_suite(s, CK_FORK_GETENV) ? 1 : 0;
}
