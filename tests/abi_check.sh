#!/bin/sh
# The public contract: the header stands alone (C11 pedantic and C++); the
# shared library exports nothing but shard_* symbols, under the version
# nodes LIBSHARD_0 and LIBSHARD_0.2 (the calls whose reports gained a
# version, whose 0.1.0 entry points stay at LIBSHARD_0, and a 0.1.0 binary's
# calls reach those); the static library defines no global name but shard_*;
# and an application that defines names the library uses internally
# (now_seconds, conn_get, ...) still links statically against libshard.a.
set -eu
B=${B:-build}
CC=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "abi_check: $*"; exit 1; }

printf '#include <libshard.h>\nint main(void){return shard_version_num()==SHARD_VERSION_NUM?0:1;}\n' >"$tmp/h.c"
$CC -std=c11 -Wall -Wextra -pedantic -Werror -Iinclude -c -o "$tmp/h.o" "$tmp/h.c"
cp "$tmp/h.c" "$tmp/h.cc"
if command -v c++ >/dev/null 2>&1; then
    c++ -std=c++11 -Wall -Wextra -pedantic -Werror -Iinclude -c -o "$tmp/hpp.o" "$tmp/h.cc"
else
    echo "abi_check: no C++ compiler, skipping the C++ header check"
fi

# ---- the shared library --------------------------------------------------
so=$(ls "$B"/libshard.so.*.*.* | head -n 1)
# Defined dynamic symbols as NAME VERSION (version strings split off).
nm -D --defined-only --with-symbol-versions "$so" |
    awk '$2 ~ /^[TDBRVWi]$/ { v = $3; sub(/^[^@]*@+/, "", v); if (v == $3) v = "";
                              n = $3; sub(/@.*/, "", n); print n, v }' >"$tmp/dyn"
bad=$(awk '$1 !~ /^shard_/ { print $1 }' "$tmp/dyn")
[ -z "$bad" ] || fail "$so exports symbols without the shard_ prefix:
$bad"
# The calls whose report gained a version: their current entry points are
# LIBSHARD_0.2's, and libshard 0.1.0's stay at LIBSHARD_0.
REPORT_CALLS="shard_move shard_move_resume shard_move_revert shard_move_finish
shard_pair_failover shard_import_table shard_import_mapping"
NEW_CALLS="$REPORT_CALLS shard_pair_failover_opts"
unversioned=$(awk -v new="$NEW_CALLS" '
    BEGIN { n = split(new, w, /[ \n]+/); for (i = 1; i <= n; i++) isnew[w[i]] = 1 }
    !($2 == "LIBSHARD_0" || ($2 == "LIBSHARD_0.2" && ($1 in isnew))) { print $1, $2 }' "$tmp/dyn")
[ -z "$unversioned" ] || fail "$so exports symbols outside their version node (LIBSHARD_0.2 holds only $NEW_CALLS, LIBSHARD_0 the rest):
$unversioned"
for f in $NEW_CALLS; do
    grep -qx "$f LIBSHARD_0.2" "$tmp/dyn" || fail "$f is not exported under LIBSHARD_0.2"
done
for f in $REPORT_CALLS; do
    grep -qx "$f LIBSHARD_0" "$tmp/dyn" ||
        fail "$f@LIBSHARD_0 (libshard 0.1.0's entry point, for its binaries) is not exported"
done
soname=$(objdump -p "$so" | awk '$1 == "SONAME" {print $2}')
major=$(sed -n 's/^#define SHARD_VERSION_MAJOR \([0-9]*\)/\1/p' include/libshard.h)
[ "$soname" = "libshard.so.$major" ] || fail "soname $soname, expected libshard.so.$major"
# Every function the header declares is exported.
for f in $(grep -oE '\bshard_[a-z0-9_]+ *\(' include/libshard.h | tr -d ' (' | sort -u); do
    awk '{ print $1 }' "$tmp/dyn" | grep -qx "$f" ||
        fail "$f is declared in libshard.h but not exported by $so"
done

# A program built against libshard 0.1.0 binds to the LIBSHARD_0 entry
# points (the .symver lines stand for its link) and passes reports of 0.1.0's
# layout, which had no version: every call resolves at run time and answers
# (SHARD_EINVAL for a NULL context) without writing past the report.
cat >"$tmp/old.c" <<'C'
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#define OLD(ret, name, args) ret name##_v0 args; __asm__(".symver " #name "_v0," #name "@LIBSHARD_0")
OLD(int, shard_move, (void *, unsigned, unsigned, const char *, const void *, void *, char **));
OLD(int, shard_move_resume, (void *, uint64_t, const void *, void *));
OLD(int, shard_move_revert, (void *, uint64_t, const void *, void *));
OLD(int, shard_move_finish, (void *, uint64_t, const void *, void *));
OLD(int, shard_pair_failover, (void *, const char *, int, void *));
OLD(int, shard_import_table, (void *, const void *, void *));
OLD(int, shard_import_mapping, (void *, const void *, void *));
/* 0.1.0's sizes: shard_move_report 256, shard_failover_report 712,
 * shard_import_report 56 bytes; a guard after each. */
static unsigned char mv[256 + 16], fo[712 + 16], im[56 + 16];
static int guarded(const unsigned char *b, size_t n)
{
    for (size_t i = n; i < n + 16; i++)
        if (b[i] != 0xA5)
            return 0;
    return 1;
}
int main(void)
{
    int bad = 0;
    memset(mv, 0xA5, sizeof mv);
    memset(fo, 0xA5, sizeof fo);
    memset(im, 0xA5, sizeof im);
    bad |= shard_move_v0(NULL, 0, 0, "x", NULL, mv, NULL) != -1;
    bad |= shard_move_resume_v0(NULL, 0, NULL, mv) != -1;
    bad |= shard_move_revert_v0(NULL, 0, NULL, mv) != -1;
    bad |= shard_move_finish_v0(NULL, 0, NULL, mv) != -1;
    bad |= shard_pair_failover_v0(NULL, "x", 0, fo) != -1;
    bad |= shard_import_table_v0(NULL, NULL, im) != -1;
    bad |= shard_import_mapping_v0(NULL, NULL, im) != -1;
    if (bad || !guarded(mv, 256) || !guarded(fo, 712) || !guarded(im, 56) || mv[0] != 0 ||
        fo[0] != 0 || im[0] != 0) {
        fprintf(stderr, "a 0.1.0 entry point answered wrongly or wrote past its report\n");
        return 1;
    }
    return 0;
}
C
case $(basename "$B") in
    build) ;; # a sanitizer build's .so needs its runtime loaded first: not here
    *) skip_old=1 ;;
esac
if [ -z "${skip_old:-}" ]; then
    $CC -std=c11 -o "$tmp/old" "$tmp/old.c" -L"$B" -l:"$(basename "$so")" >"$tmp/old.log" 2>&1 ||
        { cat "$tmp/old.log"; fail "a program calling the LIBSHARD_0 entry points does not link"; }
    objdump -T "$tmp/old" | grep -q '(LIBSHARD_0) *shard_move$' ||
        fail "the 0.1.0 program does not bind shard_move@LIBSHARD_0"
    LD_LIBRARY_PATH=$B "$tmp/old" || fail "the 0.1.0 program fails against $so"
fi

# ---- the static library --------------------------------------------------
a=$B/libshard.a
# Global definitions only (U is a reference; the sanitizers' own
# module constructors and instrumentation tables are not ours to name).
nm -g --defined-only "$a" | awk 'NF == 3 { print $3 }' |
    grep -vE '^(__asan_|__odr_asan|__ubsan_|__tsan_|___asan_)' >"$tmp/static" || true
bad=$(grep -v '^shard_' "$tmp/static" || true)
[ -z "$bad" ] || fail "$a defines global symbols without the shard_ prefix:
$bad"
for f in $(awk '{ print $1 }' "$tmp/dyn"); do
    grep -qx "$f" "$tmp/static" || fail "$f is exported by $so but not defined in $a"
done

# An application with names of its own that the library also uses inside:
# with those names global in libshard.a this fails with "multiple definition".
# It refers to every API function, so that the link pulls in all of the
# library, whatever the archive's members.
fns=$(grep -oE '\bshard_[a-z0-9_]+ *\(' include/libshard.h | tr -d ' (' | sort -u)
{
    echo '#include <jansson.h>'; echo '#include <libshard.h>'
    echo 'typedef void (*any_fn)(void);'
    echo 'const any_fn every_api_function[] = {'
    for f in $fns; do echo "    (any_fn)$f,"; done
    echo '};'
} >"$tmp/all.c"
cat >"$tmp/app.c" <<'C'
#include <libshard.h>
#include <stdio.h>
#include <string.h>
typedef void (*any_fn)(void);
extern const any_fn every_api_function[];
double now_seconds(void) { return 42.0; }
void *conn_get(void *p) { return p; }
int copy_out(char *dst, const char *src) { strcpy(dst, src); return 0; }
int merge_patch(int a) { return a + 1; }
int sql_addf(const char *fmt) { return fmt != NULL; }
int main(void)
{
    char buf[16];
    if (now_seconds() != 42.0 || conn_get(buf) != buf || copy_out(buf, "x") ||
        merge_patch(1) != 2 || !sql_addf("%s"))
        return 1;
    if (strcmp(shard_version(), SHARD_VERSION_STRING) != 0 || !every_api_function[0])
        return 1;
    printf("%s\n", shard_version());
    return 0;
}
C
deps_cflags=$(pkg-config --cflags libmariadb jansson libcrypto 2>/dev/null || true)
deps="$(pkg-config --libs libmariadb jansson libcrypto 2>/dev/null || echo "-lmariadb -ljansson -lcrypto") -lzookeeper_mt"
# The library's sanitizers: make check passes SANITIZE; else a build dir
# named for them (build-address-undefined).
sanflags=""
if [ -n "${SANITIZE:-}" ]; then
    sanflags="-fsanitize=$SANITIZE"
else
    case $(basename "$B") in
        build-*) sanflags="-fsanitize=$(basename "$B" | sed 's/^build-//; s/-/,/g')" ;;
    esac
fi
if ! $CC -std=c11 -Iinclude $deps_cflags $sanflags -o "$tmp/app" "$tmp/app.c" "$tmp/all.c" "$a" $deps -lpthread \
    >"$tmp/link.log" 2>&1; then
    cat "$tmp/link.log"
    fail "an application defining now_seconds, conn_get, copy_out, merge_patch and sql_addf does not link against $a"
fi
"$tmp/app" >/dev/null || fail "the statically linked application does not run"

echo "abi_check: ok ($(awk '$2 == "LIBSHARD_0" { n++ } END { print n }' "$tmp/dyn") exported symbols under LIBSHARD_0, $(awk '$2 == "LIBSHARD_0.2" { n++ } END { print n }' "$tmp/dyn") under LIBSHARD_0.2, soname $soname; $a defines only shard_*)"
