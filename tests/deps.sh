#!/bin/sh
# Make sure what libshard builds and tests with is installed. As root on
# Debian it installs what is missing; otherwise it says what to install.
set -u
# python3-venv: the Python binding's check installs the package into a fresh
# venv; mandoc: tests/doc_check.sh lints every manual page with it;
# libzookeeper-mt-dev: the ZooKeeper map store's C client (threaded);
# libzookeeper-java, default-jre-headless: the ZooKeeper servers that
# tests/zk.sh starts (from the jars: no system service).
PKGS="build-essential pkg-config default-libmysqlclient-dev libjansson-dev libssl-dev libzookeeper-mt-dev check mariadb-server mariadb-client groff-base python3 python3-venv mandoc libzookeeper-java default-jre-headless"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps: installing:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2 && apt-get install -y -q --no-install-recommends $missing >&2 && exit 0
    echo "deps: apt-get failed installing:$missing" >&2
    exit 1
fi
echo "deps: missing packages:$missing" >&2
echo "deps: install them with: sudo apt-get install$missing" >&2
exit 1
