#!/bin/sh
# make install into a staging DESTDIR: every file there (the manual pages and
# their links included), a .pc file relative to ${prefix}, and make uninstall
# taking every file away again. Then a real install, a program built against
# it with pkg-config alone, shared and static, and run.
set -eu
MAKE=${MAKE:-make}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install_check: $*"; exit 1; }

# CPPFLAGS reaches every compile (a distribution's -D_FORTIFY_SOURCE=2 and
# the like): shown by the dry run of a fresh build directory's compile lines.
$MAKE -s -n -B CPPFLAGS=-DLIBSHARD_CPPFLAGS_PROBE B="$tmp/probe" all >"$tmp/dry" 2>&1 || true
grep -E ' -c ' "$tmp/dry" | grep -v -q -- -DLIBSHARD_CPPFLAGS_PROBE &&
    fail "CPPFLAGS is not passed to every compile: $(grep -E ' -c ' "$tmp/dry" | grep -v -- -DLIBSHARD_CPPFLAGS_PROBE | head -n 1)"
grep -q -- -DLIBSHARD_CPPFLAGS_PROBE "$tmp/dry" || fail "CPPFLAGS is not used at all"

# A change of the flags rebuilds (the flags stamp): a no-op build after a
# build does nothing, one with other CFLAGS compiles everything again.
probe="$tmp/probe"
$MAKE B="$probe" "$probe/lib/id.o" >/dev/null 2>&1 || fail "cannot build in $probe"
$MAKE B="$probe" "$probe/lib/id.o" 2>&1 | grep -q -- ' -c ' &&
    fail "a second build with the same flags compiles again"
$MAKE B="$probe" CFLAGS="-O2 -g -DLIBSHARD_FLAGS_PROBE" "$probe/lib/id.o" 2>&1 |
    grep -q -- '-DLIBSHARD_FLAGS_PROBE.*lib/id.c' || fail "a change of CFLAGS does not rebuild"
# Hardening on by default, off with HARDEN=0.
$MAKE -s -n -B B="$probe" all | grep -q -- '-fstack-protector-strong' ||
    fail "no stack protector by default"
$MAKE -s -n -B B="$probe" all | grep -q -- '-D_FORTIFY_SOURCE=2' || fail "no _FORTIFY_SOURCE by default"
$MAKE -s -n -B B="$probe" all | grep -q -- '-z,relro,-z,now' || fail "no full RELRO by default"
$MAKE -s -n -B B="$probe" HARDEN=0 all | grep -q -- '-fstack-protector-strong\|relro' &&
    fail "HARDEN=0 still hardens"
rm -rf "$probe"

# ---- staged install and uninstall ----------------------------------------
stage="$tmp/stage"
$MAKE -s install DESTDIR="$stage" PREFIX=/usr >/dev/null
root="$stage/usr"
for f in include/libshard.h lib/libshard.a lib/pkgconfig/libshard.pc bin/shardctl \
         share/man/man3/shard_id_make.3 share/man/man1/shardctl.1 \
         share/man/man7/libshard-move.7; do
    [ -e "$root/$f" ] || fail "$f was not installed"
done
[ -L "$root/lib/libshard.so" ] && [ -L "$root/lib/libshard.so.0" ] ||
    fail "shared library links missing"
# Every page, and a link for every function that shares another's page.
npages=0
for p in man/man[1-9]/*.[1-9]; do
    cmp -s "$p" "$root/share/${p}" || fail "$p was not installed as share/$p"
    npages=$((npages + 1))
done
nlinks=0
sh man/links.sh man >"$tmp/links"
while read -r dir link page; do
    l="$root/share/man/$dir/$link"
    [ -L "$l" ] || fail "share/man/$dir/$link: no link"
    [ "$(readlink "$l")" = "$page" ] || fail "share/man/$dir/$link points at $(readlink "$l"), not $page"
    [ -f "$l" ] || fail "share/man/$dir/$link is a dangling link"
    nlinks=$((nlinks + 1))
done <"$tmp/links"
[ "$nlinks" -gt 0 ] || fail "man/links.sh lists no links (NAME sections not read?)"
if command -v man >/dev/null 2>&1; then
    # man -l follows the link from anywhere, with no .so to resolve.
    (cd / && man -l "$root/share/man/man3/shard_kv_get.3" 2>/dev/null) | grep -q shard_kv_get ||
        fail "man -l share/man/man3/shard_kv_get.3 does not show shard_kv_get"
fi
# The .pc file: directories relative to ${prefix}, right when resolved.
pcf="$root/lib/pkgconfig/libshard.pc"
grep -qx 'prefix=/usr' "$pcf" || fail "libshard.pc: prefix is not /usr"
grep -qx 'exec_prefix=${prefix}' "$pcf" || fail "libshard.pc: exec_prefix is not \${prefix}"
grep -qx 'libdir=${exec_prefix}/lib' "$pcf" || fail "libshard.pc: libdir is not \${exec_prefix}/lib"
grep -qx 'includedir=${prefix}/include' "$pcf" || fail "libshard.pc: includedir is not \${prefix}/include"
[ "$(PKG_CONFIG_PATH="$root/lib/pkgconfig" pkg-config --variable=libdir libshard)" = /usr/lib ] ||
    fail "pkg-config resolves libdir to $(PKG_CONFIG_PATH="$root/lib/pkgconfig" pkg-config --variable=libdir libshard)"
$MAKE -s install DESTDIR="$tmp/stage2" PREFIX=/usr LIBDIR=/usr/lib/x86_64-linux-gnu >/dev/null
grep -qx 'libdir=${exec_prefix}/lib/x86_64-linux-gnu' "$tmp/stage2/usr/lib/x86_64-linux-gnu/pkgconfig/libshard.pc" ||
    fail "libshard.pc: a LIBDIR under PREFIX is not written relative to \${exec_prefix}"
rm -rf "$tmp/stage2"

# The installed shardctl uses the shared library (a system LIBDIR: no RUNPATH).
readelf -d "$root/bin/shardctl" | grep -q 'NEEDED.*libshard\.so\.0' ||
    fail "bin/shardctl does not link libshard.so.0"
readelf -d "$root/bin/shardctl" | grep -q 'RUNPATH\|RPATH' && fail "bin/shardctl has a RUNPATH in /usr"
readelf -d "$root/bin/shardctl" | grep -q 'BIND_NOW' || fail "bin/shardctl is not linked -z now"
readelf -S "$root/bin/shardctl" | grep -q '\.symtab' || fail "make install already stripped bin/shardctl"
$MAKE -s uninstall DESTDIR="$stage" PREFIX=/usr >/dev/null
# install-strip: the same files, without symbol tables.
$MAKE -s install-strip DESTDIR="$stage" PREFIX=/usr >/dev/null
for f in bin/shardctl lib/libshard.so.0; do
    readelf -S "$root/$f" | grep -q '\.symtab' && fail "make install-strip left $f unstripped"
done
readelf -S "$root/lib/libshard.a" | grep -q '\.debug_info' && fail "install-strip left libshard.a's debug info"
$MAKE -s uninstall DESTDIR="$stage" PREFIX=/usr >/dev/null
left=$(find "$stage" ! -type d)
[ -z "$left" ] || fail "make uninstall left files behind:
$left"

# ---- a real install, used through pkg-config ------------------------------
cat >"$tmp/prog.c" <<'C'
#include <libshard.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    uint64_t id;
    uint32_t s;
    if (shard_id_make(3429, 1, 7, &id) || shard_id_shard(id) != 3429)
        return 1;
    if (shard_mod("1.2.3.4", 7, 4096, &s) || s != 1537)
        return 1;
    if (shard_version_num() != SHARD_VERSION_NUM)
        return 1;
    printf("libshard %s ok\n", shard_version());
    return 0;
}
C
# A staged tree is not where its .pc file says it is: build against a real
# install instead (same files, PREFIX pointing at them).
root="$tmp/prefix"
$MAKE -s install PREFIX="$root" >/dev/null
export PKG_CONFIG_PATH="$root/lib/pkgconfig"
pc() { pkg-config "$@"; }
cc -o "$tmp/prog-shared" "$tmp/prog.c" $(pc --cflags --libs libshard)
LD_LIBRARY_PATH="$root/lib" "$tmp/prog-shared" >/dev/null
if LD_LIBRARY_PATH="$root/lib" ldd "$tmp/prog-shared" | grep -q "libshard.so.0 => $root"; then :; else
    fail "the shared program does not use the installed libshard.so.0"
fi
# The program's references carry the library's symbol version.
objdump -T "$tmp/prog-shared" | grep -q 'LIBSHARD_0.*shard_version' ||
    fail "the shared program's shard_version reference is not versioned LIBSHARD_0"
# What the README says: pkg-config --static gives everything a link needs.
cc -o "$tmp/prog-pcstatic" "$tmp/prog.c" $(pc --cflags --libs --static libshard)
LD_LIBRARY_PATH="$root/lib" "$tmp/prog-pcstatic" >/dev/null
# And libshard itself linked in from libshard.a.
cc -o "$tmp/prog-static" "$tmp/prog.c" $(pc --cflags libshard) \
    "$root/lib/libshard.a" $(pc --libs --static libshard | sed 's/-lshard//')
"$tmp/prog-static" >/dev/null
if ldd "$tmp/prog-static" | grep -q libshard; then
    fail "the static program still links libshard dynamically"
fi
# The installed shardctl runs with the installed library, found by its
# RUNPATH (LIBDIR is not one of the linker's own directories).
"$root/bin/shardctl" --version | grep -q "^shardctl (libshard) " || fail "bin/shardctl does not run"
ldd "$root/bin/shardctl" | grep -q "libshard.so.0 => $root/lib/" ||
    fail "bin/shardctl does not use $root/lib/libshard.so.0"
$MAKE -s uninstall PREFIX="$root" >/dev/null
left=$(find "$root" ! -type d)
[ -z "$left" ] || fail "make uninstall PREFIX=$root left files behind:
$left"
echo "install_check: ok (a flags change rebuilds; hardened by default; $npages pages and $nlinks links installed, .pc relative to \${prefix}, uninstall leaves no file; install-strip strips; shardctl uses the installed libshard.so; shared and static programs built with pkg-config and run)"
