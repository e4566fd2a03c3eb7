#!/bin/sh
# make install into a staging DESTDIR, then build a program against the
# installed copy with pkg-config alone, shared and static, and run both.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s install DESTDIR="$tmp/stage" PREFIX=/usr/local >/dev/null
root="$tmp/stage/usr/local"
for f in include/libshard.h lib/libshard.a lib/pkgconfig/libshard.pc bin/shardctl \
         share/man/man3/shard_id_make.3 share/man/man1/shardctl.1; do
    [ -e "$root/$f" ] || { echo "install_check: $f was not installed"; exit 1; }
done
[ -L "$root/lib/libshard.so" ] && [ -L "$root/lib/libshard.so.0" ] ||
    { echo "install_check: shared library links missing"; exit 1; }
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
make -s install PREFIX="$root" >/dev/null
export PKG_CONFIG_PATH="$root/lib/pkgconfig"
pc() { pkg-config "$@"; }
cc -o "$tmp/prog-shared" "$tmp/prog.c" $(pc --cflags --libs libshard)
LD_LIBRARY_PATH="$root/lib" "$tmp/prog-shared"
if LD_LIBRARY_PATH="$root/lib" ldd "$tmp/prog-shared" | grep -q "libshard.so.0 => $root"; then :; else
    echo "install_check: the shared program does not use the installed libshard.so.0"; exit 1
fi
# What the README says: pkg-config --static gives everything a link needs.
cc -o "$tmp/prog-pcstatic" "$tmp/prog.c" $(pc --cflags --libs --static libshard)
LD_LIBRARY_PATH="$root/lib" "$tmp/prog-pcstatic"
# And libshard itself linked in from libshard.a.
cc -o "$tmp/prog-static" "$tmp/prog.c" $(pc --cflags libshard) \
    "$root/lib/libshard.a" $(pc --libs --static libshard | sed 's/-lshard//')
"$tmp/prog-static"
if ldd "$tmp/prog-static" | grep -q libshard; then
    echo "install_check: the static program still links libshard dynamically"; exit 1
fi
echo "install_check: ok (shared and static programs built with pkg-config and run)"
