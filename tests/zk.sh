#!/bin/bash
# tests/zk.sh: throwaway ZooKeeper servers for tests, benchmarks and the demo,
# from Debian's libzookeeper-java jars (no system service), on 127.0.0.1
# ports below 32768 only, in a folder of the caller's.
#
#   zk.sh start DIR [N]   N = 1 (default): one standalone server; N = 3 (or 5):
#                         an ensemble. Prints the connect string
#                         127.0.0.1:PORT[,127.0.0.1:PORT...] once every server
#                         serves (ruok: imok, and srvr names its mode: an
#                         ensemble's are in a quorum).
#   zk.sh stop DIR [ID]   stops server ID (1..N), or all (no ID, or 0), by the
#                         pid it started
#   zk.sh kill DIR ID     SIGKILL to server ID
#   zk.sh restart DIR ID  starts server ID again: same port, same data
#   zk.sh hosts DIR       the connect string again
#
# Each server lives in DIR/zkID (zoo.cfg, data/, server.log, pid). Ports are
# picked at random and checked free; a server that cannot bind makes start
# try again on other ports.
set -u

JARS=/usr/share/java
JAVA=${JAVA:-java}

die() { echo "zk.sh: $*" >&2; exit 1; }

classpath() {
    local cp="" j
    for j in zookeeper zookeeper-jute netty-buffer netty-codec netty-common netty-handler \
             netty-resolver netty-transport netty-transport-native-unix-common \
             netty-transport-native-epoll slf4j-api slf4j-simple jackson-core \
             jackson-databind jackson-annotations commons-cli metrics-core snappy-java; do
        [ -f "$JARS/$j.jar" ] || die "$JARS/$j.jar is missing (apt-get install --no-install-recommends libzookeeper-java default-jre-headless)"
        cp="$cp${cp:+:}$JARS/$j.jar"
    done
    echo "$cp"
}

# Answers of a four-letter command, or nothing.
four() {
    local port=$1 cmd=$2
    timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && printf $cmd >&3 && cat <&3" 2>/dev/null
}

port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

random_port() {
    local p
    while :; do
        p=$((10000 + RANDOM % 22000))
        port_free "$p" && { echo "$p"; return; }
    done
}

write_config() {
    local dir=$1 n=$2 id=$3 i
    local d="$dir/zk$id"
    mkdir -p "$d/data"
    {
        echo "tickTime=500"
        echo "initLimit=10"
        echo "syncLimit=5"
        echo "dataDir=$d/data"
        echo "clientPort=$(cat "$d/port")"
        echo "clientPortAddress=127.0.0.1"
        echo "maxClientCnxns=0"
        echo "admin.enableServer=false"
        echo "4lw.commands.whitelist=ruok,srvr"
        if [ "$n" -gt 1 ]; then
            for i in $(seq 1 "$n"); do
                echo "server.$i=127.0.0.1:$(cat "$dir/zk$i/peer"):$(cat "$dir/zk$i/election")"
            done
        fi
    } >"$d/zoo.cfg"
    [ "$n" -gt 1 ] && echo "$id" >"$d/data/myid"
    return 0
}

launch() {
    local dir=$1 id=$2
    local d="$dir/zk$id"
    # Its own session: a test framework's kill of its process group leaves it.
    setsid "$JAVA" -Xms16m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dzookeeper.jmx.log4j.disable=true \
        -cp "$(classpath)" org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" \
        >>"$d/server.log" 2>&1 </dev/null &
    echo $! >"$d/pid"
}

alive() { [ -f "$1/pid" ] && kill -0 "$(cat "$1/pid")" 2>/dev/null; }

# 0 when server id answers (and an ensemble's is in a quorum), 1 if it
# died, 2 when it did not answer in time.
wait_up() {
    local dir=$1 n=$2 id=$3 t
    local d="$dir/zk$id" port
    port=$(cat "$d/port")
    for t in $(seq 1 300); do
        alive "$d" || return 1
        # imok comes before the database is loaded: srvr says when it serves.
        if [ "$(four "$port" ruok)" = imok ]; then
            if [ "$n" -eq 1 ]; then
                four "$port" srvr | grep -qE '^Mode: (standalone|leader|follower)' && return 0
            else
                four "$port" srvr | grep -qE '^Mode: (leader|follower)' && return 0
            fi
        fi
        sleep 0.1
    done
    return 2
}

stop_one() {
    local d=$1 sig=${2:-TERM} pid t
    alive "$d" || { rm -f "$d/pid"; return 0; }
    pid=$(cat "$d/pid")
    kill -"$sig" "$pid" 2>/dev/null
    for t in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
    rm -f "$d/pid"
}

count() { ls -d "$1"/zk[0-9]* 2>/dev/null | wc -l; }

hosts() {
    local dir=$1 n i out=""
    n=$(count "$dir")
    for i in $(seq 1 "$n"); do out="$out${out:+,}127.0.0.1:$(cat "$dir/zk$i/port")"; done
    echo "$out"
}

start() {
    local dir=$1 n=${2:-1} try i rc ok
    case "$n" in 1|3|5) ;; *) die "start: N must be 1, 3 or 5" ;; esac
    [ -d "$dir" ] || die "start: no folder $dir"
    command -v "$JAVA" >/dev/null || die "no java (apt-get install --no-install-recommends default-jre-headless)"
    for try in 1 2 3 4 5; do
        for i in $(seq 1 "$n"); do
            rm -rf "$dir/zk$i"
            mkdir -p "$dir/zk$i"
            random_port >"$dir/zk$i/port"
            random_port >"$dir/zk$i/peer"
            random_port >"$dir/zk$i/election"
        done
        for i in $(seq 1 "$n"); do write_config "$dir" "$n" "$i"; done
        for i in $(seq 1 "$n"); do launch "$dir" "$i"; done
        ok=1
        for i in $(seq 1 "$n"); do
            wait_up "$dir" "$n" "$i"; rc=$?
            [ $rc -eq 0 ] || { ok=0; break; }
        done
        [ $ok -eq 1 ] && { hosts "$dir"; return 0; }
        for i in $(seq 1 "$n"); do stop_one "$dir/zk$i" KILL; done
        grep -qs "Address already in use" "$dir"/zk*/server.log ||
            { tail -n 20 "$dir/zk$i/server.log" >&2; die "start: server $i did not come up"; }
    done
    die "start: no free ports after 5 tries"
}

cmd=${1:-}; dir=${2:-}
[ -n "$dir" ] || die "usage: zk.sh start|stop|kill|restart|hosts DIR [ID|N]"
case "$cmd" in
    start) start "$dir" "${3:-1}" ;;
    stop)
        if [ -n "${3:-}" ] && [ "${3:-}" != 0 ]; then stop_one "$dir/zk$3"
        else for d in "$dir"/zk[0-9]*; do [ -d "$d" ] && stop_one "$d"; done; fi ;;
    kill) [ -n "${3:-}" ] || die "kill: which server?"; stop_one "$dir/zk$3" KILL ;;
    restart)
        [ -n "${3:-}" ] || die "restart: which server?"
        [ -f "$dir/zk$3/zoo.cfg" ] || die "restart: no server $3 in $dir"
        alive "$dir/zk$3" && die "restart: server $3 is running"
        launch "$dir" "$3"
        # Waits until it serves: an ensemble's member needs a quorum for that.
        wait_up "$dir" 1 "$3" || die "restart: server $3 did not come up" ;;
    hosts) hosts "$dir" ;;
    *) die "unknown command $cmd" ;;
esac
