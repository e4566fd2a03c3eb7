#!/bin/sh
# The public contract: the header stands alone (C11 pedantic and C++), and
# the shared library exports nothing but shard_* symbols.
set -eu
B=${B:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include <libshard.h>\nint main(void){return shard_version_num()==SHARD_VERSION_NUM?0:1;}\n' >"$tmp/h.c"
cc -std=c11 -Wall -Wextra -pedantic -Werror -Iinclude -c -o "$tmp/h.o" "$tmp/h.c"
cp "$tmp/h.c" "$tmp/h.cc"
if command -v c++ >/dev/null 2>&1; then
    c++ -std=c++11 -Wall -Wextra -pedantic -Werror -Iinclude -c -o "$tmp/hpp.o" "$tmp/h.cc"
else
    echo "abi_check: no C++ compiler, skipping the C++ header check"
fi
so=$(ls "$B"/libshard.so.*.*.* | head -n 1)
bad=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v '^shard_' || true)
if [ -n "$bad" ]; then
    echo "abi_check: $so exports symbols without the shard_ prefix:"; echo "$bad"; exit 1
fi
soname=$(objdump -p "$so" | awk '$1 == "SONAME" {print $2}')
major=$(sed -n 's/^#define SHARD_VERSION_MAJOR \([0-9]*\)/\1/p' include/libshard.h)
[ "$soname" = "libshard.so.$major" ] || { echo "abi_check: soname $soname, expected libshard.so.$major"; exit 1; }
# Every function the header declares is exported.
for f in $(grep -oE '\bshard_[a-z0-9_]+ *\(' include/libshard.h | tr -d ' (' | sort -u); do
    nm -D --defined-only "$so" | awk '{print $3}' | grep -qx "$f" ||
        { echo "abi_check: $f is declared in libshard.h but not exported"; exit 1; }
done
echo "abi_check: ok ($(nm -D --defined-only "$so" | grep -c ' T shard_') exported functions, soname $soname)"
