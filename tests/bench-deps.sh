#!/bin/sh
# What `make bench` needs beyond `make deps`: sysbench, the reference that
# bench_get compares libshard with. As root on Debian it installs it;
# otherwise it says what to install.
set -u
PKGS="sysbench mydumper"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -z "$missing" ] && command -v sysbench >/dev/null 2>&1; then
    exit 0
fi
[ -z "$missing" ] && missing=" sysbench"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "bench-deps: installing:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2 && apt-get install -y -q --no-install-recommends $missing >&2 && exit 0
    echo "bench-deps: apt-get failed installing:$missing" >&2
    exit 1
fi
echo "bench-deps: missing packages:$missing" >&2
echo "bench-deps: install them with: sudo apt-get install$missing" >&2
exit 1
