#!/bin/sh
# tests/demo.sh: libshard end to end on throwaway servers, in seconds.
#
#   make demo          (installs what is missing, builds, then runs this)
#   make demo ZK=1     the same with the map in ZooKeeper (tests/zk.sh)
#   SHARDCTL=build/shardctl B=build sh tests/demo.sh
#
# Starts two local MariaDB master-master pairs (tests/servers.sh), creates
# every shard database and table (as the operators' account shardadmin),
# shows the map and a few IDs, runs the pin board example
# (examples/pinboard.c) as the application's account (the map's
# credentials), and stops the servers it started, whatever happens (even
# on ^C).
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-$ROOT/build}
SHARDCTL=${SHARDCTL:-$B/shardctl}
SERVERS=$ROOT/tests/servers.sh
T0=$(date +%s%N)

for p in "$SHARDCTL" "$B/pinboard"; do
    [ -x "$p" ] || { echo "demo: $p is missing: run make first" >&2; exit 1; }
done

# The password of the application's account `shard` (the map's credentials)
# and of the operators' `shardadmin`: random unless the caller chose one.
# Passed through the environment only; never printed.
if [ -z "${LIBSHARD_PASSWORD:-}" ]; then
    LIBSHARD_PASSWORD=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
fi
export LIBSHARD_PASSWORD

DIR=$(mktemp -d "${TMPDIR:-/tmp}/libshard-demo.XXXXXX")
MAP=$DIR/map.json

# Stop every server started in DIR and remove DIR.
stop_servers() {
    [ -d "$DIR/zk" ] && bash "$ROOT/tests/zk.sh" stop "$DIR/zk"
    "$SERVERS" stop "$DIR" && return 0
    # Interrupted during the bootstrap, whose server may still have been
    # writing: give it a second. Once servers.sh removed its marker, what is
    # left is files only, in the directory this script made.
    sleep 1
    [ -e "$DIR/.libshard-servers" ] && { "$SERVERS" stop "$DIR"; return; }
    pgrep -f -- "--datadir=$DIR/" >/dev/null && return 1
    rm -rf "$DIR"
}

on_exit() {
    rc=$?
    trap - EXIT INT TERM
    echo
    echo "demo: stopping the servers"
    stop_servers || { echo "demo: could not stop the servers in $DIR" >&2; rc=1; }
    ms=$((($(date +%s%N) - T0) / 1000000))
    if [ "$rc" -eq 0 ]; then
        printf 'demo: done in %d.%03d s\n' $((ms / 1000)) $((ms % 1000))
    else
        echo "demo: FAILED (exit status $rc)" >&2
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Show a command as one would type it, then run it.
say() { printf '\n$ %s\n' "$*"; }
ctl() { say "shardctl $*"; "$SHARDCTL" "$@"; }

echo "demo: starting 2 MariaDB pairs (4 servers) in $DIR"
"$SERVERS" start "$DIR" 2 --shards 16 --mod-shards 8 >/dev/null
if [ -n "${ZK:-}" ] && [ "${ZK:-}" != 0 ]; then
    echo "demo: starting a ZooKeeper server in $DIR/zk"
    mkdir "$DIR/zk"
    zk=$(bash "$ROOT/tests/zk.sh" start "$DIR/zk")
    ctl --map "zk://$zk/libshard/demo" map publish "$MAP" --force
    MAP="zk://$zk/libshard/demo"
fi

# Creating databases is the operators' work, not the application's.
ctl --map "$MAP" --user shardadmin --password-env LIBSHARD_PASSWORD schema apply
ctl --map "$MAP" check
ctl id encode 3429 1 7
ctl id decode 241294492504686599 422418623496193
ctl modshard --shards 4096 1.2.3.4
ctl --map "$MAP" modshard ada grace
say "pinboard $MAP"
"$B/pinboard" "$MAP"
