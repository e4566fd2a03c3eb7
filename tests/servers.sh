#!/usr/bin/env bash
# tests/servers.sh: throwaway MariaDB master-master pairs for libshard tests.
#
#   servers.sh start DIR NPAIRS [--shards N] [--mod-shards M] [--tls CERTDIR]
#   servers.sh stop DIR [NAME]       (NAME: a clean shutdown; none: all, by
#                                     SIGKILL, then DIR is removed)
#   servers.sh kill|restart|pause|resume DIR NAME
#   servers.sh sql DIR NAME [CLIENT-ARGS...]      (SQL on stdin, batch output)
#
# Servers listen on 127.0.0.1 and on a unix socket in DIR only. Pair P is made
# of servers s(2P-1) (master) and s(2P) (standby), replicating each other with
# GTID. DIR/servers lists "NAME PAIR ROLE PORT SOCKET PIDFILE" per server and
# DIR/map.json is a shard map (libshard(3), "The shard map") for what was started.
#
# The two halves of a pair hand out disjoint AUTO_INCREMENT values (local
# ids): every server has auto_increment_increment=2, a pair's master
# auto_increment_offset=1 and its standby 2, as shard_pair_failover(3) asks.
#
# --tls CERTDIR: the servers also accept TLS, with CERTDIR/ca.pem,
# CERTDIR/server-cert.pem and CERTDIR/server-key.pem (tests/tls.sh makes
# them); `restart` keeps them (DIR/tls names CERTDIR). Nothing requires TLS
# and the map stays the same: tests add "tls" to the credentials themselves.
#
# Two accounts (on 127.0.0.1 and localhost) get the password in
# $LIBSHARD_PASSWORD (required by `start`): the application's, `shard`, the
# map's credentials, with the application's privileges only (APP_GRANTS
# below, the README's "Accounts and privileges"): it can read and write
# rows, never change the schema, move shards or fail a pair over; and the
# operators' `shardadmin`, with ALL PRIVILEGES, for everything else
# (shardctl --user shardadmin --password-env LIBSHARD_PASSWORD, or
# shard_options.user and .password_env). The launcher itself
# talks to every server as root over the unix socket (unix_socket auth).
# Passwords are handed to the client on stdin only, never on a command line,
# and never written to a file by this script (the server itself keeps the
# random replication password in its master.info, as MariaDB always does).
#
# The datadir mariadb-install-db makes is kept for later starts in
# $LIBSHARD_TESTS_CACHE (default ${TMPDIR:-/tmp}/libshard-tests-cache-UID, a
# directory of this user's, mode 700; set it empty not to keep it): under a
# name that changes with mariadbd, mariadb-install-db and how this script
# runs it (old ones are not removed: 50 MB each). Every
# server still starts from a copy of its own of that fresh datadir.
#
# Processes are stopped by the pid in their pid file, after checking that the
# pid still is a mariadbd serving DIR; never by name.

set -euo pipefail

PROG=${0##*/}
MARKER=.libshard-servers
WAIT_UP_SECS=30
STOP_WAIT_SECS=20

die() { echo "$PROG: $*" >&2; exit 1; }
note() { echo "$PROG: $*" >&2; }

usage() {
    cat >&2 <<EOF
usage: $PROG start DIR NPAIRS [--shards N] [--mod-shards M] [--tls CERTDIR]
       $PROG stop DIR [NAME]
       $PROG kill|restart|pause|resume DIR NAME
       $PROG sql DIR NAME [CLIENT-ARGS...]   (SQL on stdin)
EOF
    exit 2
}

find_prog() {
    local p
    for p in "$@"; do
        if command -v "$p" >/dev/null 2>&1; then command -v "$p"; return 0; fi
        if [[ -x /usr/sbin/$p ]]; then echo "/usr/sbin/$p"; return 0; fi
    done
    return 1
}

MARIADBD=$(find_prog mariadbd mysqld) || die "mariadbd not found"
CLIENT=$(find_prog mariadb mysql) || die "mariadb client not found"
INSTALL_DB=$(find_prog mariadb-install-db mysql_install_db) ||
    die "mariadb-install-db not found"
SETSID=$(command -v setsid || true)
DBROOT=$(id -un)

# The application account's privileges. In a GRANT's database name `_` and
# `%` are wildcards (`\_` a literal underscore). libshard_control is granted
# whole (SELECT only) because MariaDB refuses a grant on a table that does
# not exist yet, and the fence table libshard_control.fence, which every
# statement on an ID shard reads, is made by `shardctl schema apply` after
# the accounts; libshard_maps is the database of the MySQL map stores the
# tests use (shard_store_open(3)), which applications read.
APP_GRANTS=(
    'SELECT, INSERT, UPDATE, DELETE ON `db%`.*'
    'SELECT, INSERT, UPDATE, DELETE ON `modshard%`.*'
    'SELECT ON `libshard\_control`.*'
    'SELECT ON `libshard\_maps`.*'
)

is_uint() { [[ $1 =~ ^(0|[1-9][0-9]{0,9})$ ]]; }

# abs_dir PATH: absolute, symlink-free path of an existing directory
abs_dir() { (cd "$1" && pwd -P); }

# alive PID: the process exists and is not a zombie
alive() {
    local stat state
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    state=${stat##*) }
    state=${state%% *}
    [[ -n $state && $state != Z && $state != X ]]
}

sdir() { echo "$DIR/s$1"; }

# our_pid K: print the pid of server K if it is running (a mariadbd whose
# command line names this server's datadir), else fail.
our_pid() {
    local k=$1 d f pid cmd
    d=$(sdir "$k")
    for f in "$d/mariadbd.pid" "$d/launch.pid"; do
        [[ -r $f ]] || continue
        pid=$(head -n1 "$f" 2>/dev/null || true)
        is_uint "${pid:-x}" || continue
        alive "$pid" || continue
        cmd=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null || true)
        if grep -qxF -- "--datadir=$d/data" <<<"$cmd"; then
            echo "$pid"
            return 0
        fi
    done
    return 1
}

# client K [ARGS...]: the mariadb client as root on server K's socket
client() {
    local k=$1
    shift
    "$CLIENT" --no-defaults -u "$DBROOT" -S "$(sdir "$k")/sock" \
        --connect-timeout=5 --batch "$@"
}

# server_args K PORT: the mariadbd command line of server K (into ARGS)
server_args() {
    local k=$1 port=$2 d
    d=$(sdir "$k")
    ARGS=(--no-defaults)
    if [[ $(id -u) -eq 0 ]]; then ARGS+=(--user=root); fi
    ARGS+=(
        "--datadir=$d/data"
        "--tmpdir=$d/tmp"
        "--socket=$d/sock"
        --bind-address=127.0.0.1
        "--port=$port"
        "--pid-file=$d/mariadbd.pid"
        "--log-error=$d/err.log"
        --log-bin=binlog
        --relay-log=relay-bin
        --binlog-format=ROW
        --log-slave-updates=ON
        --gtid-ignore-duplicates=ON
        "--server-id=$k"
        "--gtid-domain-id=$k"
        --auto-increment-increment=2
        "--auto-increment-offset=$((k % 2 ? 1 : 2))"
        --skip-slave-start
        --skip-name-resolve
        --slave-net-timeout=10
        --max-connect-errors=1000000
        --innodb-buffer-pool-size=64M
        --innodb-log-file-size=32M
        --innodb-buffer-pool-dump-at-shutdown=OFF
        --innodb-buffer-pool-load-at-startup=OFF
        --performance-schema=OFF
        --innodb-flush-log-at-trx-commit=2
        --sync-binlog=0
        --max-connections=500
        --max-allowed-packet=64M
        --character-set-server=utf8mb4
        --collation-server=utf8mb4_general_ci
    )
    # LIBSHARD_TESTS_SERVER_OPTS: more mariadbd options, for experiments
    # (e.g. "--innodb-autoinc-lock-mode=2")
    if [[ -n ${LIBSHARD_TESTS_SERVER_OPTS:-} ]]; then
        local -a extra
        read -ra extra <<<"$LIBSHARD_TESTS_SERVER_OPTS"
        ARGS+=("${extra[@]}")
    fi
    if [[ -r $DIR/tls ]]; then
        local certs
        certs=$(cat "$DIR/tls")
        ARGS+=("--ssl-ca=$certs/ca.pem" "--ssl-cert=$certs/server-cert.pem"
            "--ssl-key=$certs/server-key.pem")
    fi
}

# launch K PORT: start server K in the background
launch() {
    local k=$1 port=$2 d
    d=$(sdir "$k")
    server_args "$k" "$port"
    mkdir -p "$d/tmp"
    rm -f "$d/mariadbd.pid" "$d/launch.pid"
    # wait_up only looks at what this launch logs
    LOG_OFF[k]=$(($(stat -c %s "$d/err.log" 2>/dev/null || echo 0) + 1))
    ERR_OFF[k]=$(($(stat -c %s "$d/stderr.log" 2>/dev/null || echo 0) + 1))
    # stdout/stderr must not inherit the caller's pipes (popen would hang).
    # setsid: a session of its own, so that a test runner's killpg() of the
    # caller's process group (Check does that after every forked test) or a
    # terminal's ^C does not reach the server. setsid does not fork here (a
    # background job of a non-interactive shell is no group leader), so $! is
    # the server's pid.
    if [[ -n $SETSID ]]; then
        "$SETSID" "$MARIADBD" "${ARGS[@]}" </dev/null >>"$d/stderr.log" 2>&1 &
    else
        "$MARIADBD" "${ARGS[@]}" </dev/null >>"$d/stderr.log" 2>&1 &
    fi
    echo "$!" >"$d/launch.pid"
}

# wait_up K: 0 = answering, 2 = died of a port clash, 1 = other failure
wait_up() {
    local k=$1 d pid i
    d=$(sdir "$k")
    pid=$(cat "$d/launch.pid")
    for ((i = 0; i < WAIT_UP_SECS * 20; i++)); do
        if client "$k" -e 'SELECT 1' >/dev/null 2>&1; then
            return 0
        fi
        if ! alive "$pid" && ! our_pid "$k" >/dev/null; then
            # (not `tail | grep -q`: with pipefail, tail's SIGPIPE fails it)
            if grep -qE 'Bind on TCP/IP port|Address already in use' < <(
                tail -c "+${LOG_OFF[k]:-1}" "$d/err.log" 2>/dev/null || true
                tail -c "+${ERR_OFF[k]:-1}" "$d/stderr.log" 2>/dev/null || true
            ); then
                return 2
            fi
            return 1
        fi
        sleep 0.05
    done
    return 1
}

show_log() {
    local d
    d=$(sdir "$1")
    note "--- tail of $d/err.log ---"
    tail -n 25 "$d/err.log" >&2 2>/dev/null || true
    if [[ -s $d/stderr.log ]]; then
        note "--- tail of $d/stderr.log ---"
        tail -n 10 "$d/stderr.log" >&2 || true
    fi
}

random_port() {
    # below the kernel's ephemeral range (32768-60999), where any client
    # socket may take a port at any moment
    echo $((10000 + (RANDOM * 32768 + RANDOM) % 22768))
}

port_busy() {
    local p=$1 u
    for u in "${USED_PORTS[@]}"; do
        [[ $u == "$p" ]] && return 0
    done
    # something already listening there (any address)?
    if command -v ss >/dev/null 2>&1; then
        [[ -n $(ss -Htln "sport = :$p" 2>/dev/null) ]] && return 0
    fi
    return 1
}

# pick_port: sets PICKED to a port that looks free (the server still may
# lose a race for it: launch/wait_up detect that and pick another one)
pick_port() {
    local p i
    for ((i = 0; i < 200; i++)); do
        p=$(random_port)
        if ! port_busy "$p"; then
            USED_PORTS+=("$p")
            PICKED=$p
            return 0
        fi
    done
    return 1
}

# server_ks: the K of every server directory in DIR
server_ks() {
    local d
    for d in "$DIR"/s*/; do
        d=${d%/}
        d=${d##*/s}
        is_uint "$d" && echo "$d"
    done
    return 0
}

# stop_servers [--kill] K...: SIGTERM (and SIGCONT, in case it is paused),
# wait up to STOP_WAIT_SECS, then SIGKILL; --kill: SIGKILL at once.
stop_servers() {
    local k pid i left sig=TERM
    local -a pids=()
    if [[ ${1:-} == --kill ]]; then sig=KILL; shift; fi
    for k in "$@"; do
        if pid=$(our_pid "$k"); then
            kill -"$sig" "$pid" 2>/dev/null || true
            kill -CONT "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    ((${#pids[@]})) || return 0
    for ((i = 0; i < STOP_WAIT_SECS * 20; i++)); do
        left=0
        for pid in "${pids[@]}"; do
            if alive "$pid"; then left=1; break; fi
        done
        ((left)) || return 0
        sleep 0.05
    done
    for pid in "${pids[@]}"; do
        if alive "$pid"; then
            note "pid $pid did not stop in ${STOP_WAIT_SECS}s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    for ((i = 0; i < 100; i++)); do
        left=0
        for pid in "${pids[@]}"; do
            if alive "$pid"; then left=1; break; fi
        done
        ((left)) || return 0
        sleep 0.05
    done
    note "warning: some servers in $DIR are still alive"
    return 1
}

# sql_escape STRING: escape for a single-quoted SQL string literal
sql_escape() {
    local s=$1
    s=${s//\\/\\\\}
    s=${s//\'/\\\'}
    printf '%s' "$s"
}

# server_line NAME: checks NAME is in DIR/servers and sets S_PORT
server_line() {
    local n port _
    [[ -r $DIR/servers ]] || die "$DIR/servers: not found"
    while read -r n _ _ port _; do
        if [[ $n == "$1" ]]; then
            S_PORT=$port
            return 0
        fi
    done <"$DIR/servers"
    die "no server named '$1' in $DIR/servers"
}

set_dir_existing() {
    [[ -d $1 ]] || die "$1: no such directory"
    DIR=$(abs_dir "$1")
    [[ -e $DIR/$MARKER ]] || die "$DIR was not made by $PROG"
}

name_to_k() {
    [[ $1 =~ ^s([0-9]+)$ ]] || die "bad server name '$1' (expected s1, s2, ...)"
    echo "${BASH_REMATCH[1]}"
}

slave_running() { # slave_running K: "Slave_IO_Running Slave_SQL_Running"
    local out line io="" sqlt=""
    out=$(client "$1" -e 'SHOW SLAVE STATUS\G' 2>/dev/null) || return 0
    while IFS= read -r line; do
        line=${line#"${line%%[! ]*}"}
        case $line in
        "Slave_IO_Running: "*) io=${line#*: } ;;
        "Slave_SQL_Running: "*) sqlt=${line#*: } ;;
        esac
    done <<<"$out"
    echo "$io $sqlt"
}

# ---------------------------------------------------------------- start
STARTED=()
START_OK=0
LOG_OFF=()
ERR_OFF=()

on_start_exit() {
    local rc=$?
    if ((START_OK)); then return 0; fi
    if ((${#STARTED[@]})); then
        note "start failed: stopping the servers started in $DIR"
        stop_servers "${STARTED[@]}" || true
    fi
    exit $((rc ? rc : 1))
}

# install_db DEST: mariadb-install-db into DEST/data (3 tries)
install_db() {
    local tpl=$1 attempt
    for attempt in 1 2 3; do
        rm -rf "$tpl"
        mkdir -p "$tpl/tmp"
        local -a a=(--no-defaults "--datadir=$tpl/data" --skip-test-db
            --skip-name-resolve --auth-root-authentication-method=socket
            "--tmpdir=$tpl/tmp" --innodb-buffer-pool-size=64M
            --innodb-log-file-size=32M)
        if [[ $(id -u) -eq 0 ]]; then a+=(--user=root); fi
        if "$INSTALL_DB" "${a[@]}" </dev/null >"$DIR/bootstrap.log" 2>&1 &&
            [[ -d $tpl/data/mysql ]]; then
            rm -rf "$tpl/tmp"
            return 0
        fi
        note "bootstrap attempt $attempt failed (see $DIR/bootstrap.log)"
        tail -n 15 "$DIR/bootstrap.log" >&2 || true
    done
    die "mariadb-install-db failed 3 times"
}

# bootstrap: a fresh datadir every server of this start is copied from, in
# TEMPLATE/data. What mariadb-install-db makes is the same for every start
# with the same server binaries, so it is made once and kept in the cache
# directory (see the top of this file), under a name that changes with the
# binaries and with install_db; a start finding it there only copies it.
bootstrap() {
    local cache key tmp
    TEMPLATE=$DIR/template
    cache=${LIBSHARD_TESTS_CACHE-${TMPDIR:-/tmp}/libshard-tests-cache-$(id -u)}
    if [[ -z $cache ]]; then
        install_db "$TEMPLATE"
        return 0
    fi
    mkdir -p -m 700 "$cache" 2>/dev/null || true
    # only a directory of our own, that no one else may write in
    if [[ ! -d $cache || -L $cache || ! -O $cache ]] ||
        [[ -n $(find "$cache" -maxdepth 0 -perm /022 2>/dev/null) ]]; then
        note "$cache: not a directory of this user's alone; not caching the bootstrap"
        install_db "$TEMPLATE"
        return 0
    fi
    key=$( { stat -L -c '%n %s %Y' "$MARIADBD" "$INSTALL_DB"; declare -f install_db; } |
        cksum | cut -d' ' -f1)
    TEMPLATE=$cache/datadir-$key
    [[ -e $TEMPLATE/ok ]] && return 0
    # made aside, then renamed into place: a start running alongside either
    # finds the whole template or none (then makes its own; one rename wins)
    # (what an interrupted start left there)
    find "$cache" -maxdepth 1 -name 'making.*' -mmin +60 -exec rm -rf {} + 2>/dev/null || true
    tmp=$(mktemp -d "$cache/making.XXXXXX") || die "mktemp in $cache failed"
    install_db "$tmp"
    : >"$tmp/ok"
    if ! mv -T "$tmp" "$TEMPLATE" 2>/dev/null; then
        rm -rf "$tmp"
        [[ -e $TEMPLATE/ok ]] || die "$TEMPLATE: could not put the bootstrap there"
    fi
}

cmd_start() {
    (($# >= 2)) || usage
    local dir=$1 npairs=$2 nshards=64 nmod=16 certs=""
    shift 2
    while (($#)); do
        case $1 in
        --shards) (($# >= 2)) || usage; nshards=$2; shift 2 ;;
        --shards=*) nshards=${1#*=}; shift ;;
        --mod-shards) (($# >= 2)) || usage; nmod=$2; shift 2 ;;
        --mod-shards=*) nmod=${1#*=}; shift ;;
        --tls) (($# >= 2)) || usage; certs=$2; shift 2 ;;
        --tls=*) certs=${1#*=}; shift ;;
        *) usage ;;
        esac
    done
    if ! is_uint "$npairs" || ((npairs < 1 || npairs > 50)); then
        die "NPAIRS must be 1..50"
    fi
    if ! is_uint "$nshards" || ((nshards < npairs || nshards > 65536)); then
        die "--shards must be NPAIRS..65536"
    fi
    if ! is_uint "$nmod" || ((nmod < npairs || nmod > 65536)); then
        die "--mod-shards must be NPAIRS..65536"
    fi
    if [[ -n $certs ]]; then
        local f
        for f in ca.pem server-cert.pem server-key.pem; do
            [[ -r $certs/$f ]] || die "--tls $certs: no readable $f there (see tests/tls.sh)"
        done
        certs=$(abs_dir "$certs")
    fi
    if [[ -z ${LIBSHARD_PASSWORD:-} ]]; then
        echo "$PROG: LIBSHARD_PASSWORD is not set: it is the password given" \
            "to the application's account 'shard' and the operators'" \
            "'shardadmin' (export it first)" >&2
        exit 2
    fi

    if [[ -e $dir ]]; then
        [[ -d $dir ]] || die "$dir exists and is not a directory"
        [[ -z $(ls -A "$dir") ]] || die "$dir is not empty"
    fi
    mkdir -p "$dir"
    DIR=$(abs_dir "$dir")
    [[ $DIR != *[[:space:]]* ]] || die "$DIR: whitespace in the path"
    : >"$DIR/$MARKER"
    if [[ -n $certs ]]; then printf '%s\n' "$certs" >"$DIR/tls"; fi
    local nserv=$((2 * npairs)) k
    local longest="$DIR/s$nserv/sock"
    ((${#longest} < 108)) || die "$longest: too long for a unix socket"

    trap on_start_exit EXIT
    trap 'exit 129' HUP
    trap 'exit 130' INT
    trap 'exit 143' TERM

    bootstrap
    local -a cps=()
    local c
    for ((k = 1; k <= nserv; k++)); do # copies in parallel
        mkdir -p "$(sdir "$k")/tmp"
        cp -a "$TEMPLATE/data" "$(sdir "$k")/data" &
        cps+=("$!")
    done
    for c in "${cps[@]}"; do
        wait "$c" || die "copying the template datadir failed"
    done
    rm -rf "$DIR/template" # (not a cached one)

    # launch all, then wait for all; a port clash relaunches on another port
    USED_PORTS=()
    local -a port tries
    for ((k = 1; k <= nserv; k++)); do
        pick_port || die "no free port found"
        port[k]=$PICKED
        tries[k]=1
        launch "$k" "${port[k]}"
        STARTED+=("$k")
    done
    local rc
    for ((k = 1; k <= nserv; k++)); do
        while :; do
            rc=0
            wait_up "$k" || rc=$?
            ((rc == 0)) && break
            if ((rc == 2 && tries[k] < 10)); then
                pick_port || die "no free port found"
                port[k]=$PICKED
                tries[k]=$((tries[k] + 1))
                launch "$k" "${port[k]}"
                continue
            fi
            show_log "$k"
            die "server s$k did not come up"
        done
    done

    # DIR/servers
    local pair role
    {
        for ((k = 1; k <= nserv; k++)); do
            pair=$(printf 'MySQL%03d' $(((k + 1) / 2)))
            if ((k % 2)); then role=master; else role=standby; fi
            echo "s$k $pair $role ${port[k]} $(sdir "$k")/sock $(sdir "$k")/mariadbd.pid"
        done
    } >"$DIR/servers"

    # accounts, not replicated (created on every server)
    local apw rpw host g
    local -a app_grants=()
    apw=$(sql_escape "$LIBSHARD_PASSWORD")
    rpw=$(od -An -N18 -tx1 /dev/urandom | tr -d ' \n')
    for host in 127.0.0.1 localhost; do
        for g in "${APP_GRANTS[@]}"; do
            app_grants+=("GRANT $g TO 'shard'@'$host';")
        done
    done
    # (every server at once, here and for replication below)
    local -a jobs=()
    for ((k = 1; k <= nserv; k++)); do
        printf '%s\n' \
            "SET sql_log_bin=0;" \
            "CREATE USER 'shard'@'127.0.0.1' IDENTIFIED BY '$apw';" \
            "CREATE USER 'shard'@'localhost' IDENTIFIED BY '$apw';" \
            "${app_grants[@]}" \
            "CREATE USER 'shardadmin'@'127.0.0.1' IDENTIFIED BY '$apw';" \
            "CREATE USER 'shardadmin'@'localhost' IDENTIFIED BY '$apw';" \
            "GRANT ALL PRIVILEGES ON *.* TO 'shardadmin'@'127.0.0.1';" \
            "GRANT ALL PRIVILEGES ON *.* TO 'shardadmin'@'localhost';" \
            "CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY '$rpw';" \
            "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';" |
            client "$k" &
        jobs[k]=$!
    done
    for ((k = 1; k <= nserv; k++)); do
        wait "${jobs[k]}" || die "creating accounts on s$k failed"
    done

    # replication: each server of a pair replicates from the other
    local other
    for ((k = 1; k <= nserv; k++)); do
        if ((k % 2)); then other=$((k + 1)); else other=$((k - 1)); fi
        printf '%s\n' \
            "CHANGE MASTER TO master_host='127.0.0.1', master_port=${port[other]}," \
            " master_user='repl', master_password='$rpw'," \
            " master_use_gtid=slave_pos, master_connect_retry=1;" \
            "START SLAVE;" |
            client "$k" &
        jobs[k]=$!
    done
    for ((k = 1; k <= nserv; k++)); do
        wait "${jobs[k]}" || die "setting up replication on s$k failed"
    done
    local i ok
    for ((k = 1; k <= nserv; k++)); do
        ok=0
        for ((i = 0; i < 30 * 20; i++)); do
            if [[ $(slave_running "$k") == "Yes Yes" ]]; then ok=1; break; fi
            sleep 0.05
        done
        if ((!ok)); then
            client "$k" -e 'SHOW SLAVE STATUS\G' >&2 || true
            show_log "$k"
            die "replication on s$k did not start"
        fi
    done

    write_map "$npairs" "$nshards" "$nmod"
    START_OK=1
    trap - EXIT HUP INT TERM
    echo "$DIR/map.json"
}

# ranges TOTAL NPAIRS: the inclusive ranges of an even, contiguous split
ranges_json() { # TOTAL NPAIRS INDENT
    local total=$1 n=$2 ind=$3 i lo hi sep=""
    for ((i = 0; i < n; i++)); do
        lo=$((i * total / n))
        hi=$(((i + 1) * total / n - 1))
        printf '%s\n%s{"range": [%d, %d], "pair": "MySQL%03d"}' \
            "$sep" "$ind" "$lo" "$hi" $((i + 1))
        sep=","
    done
}

write_map() {
    local npairs=$1 nshards=$2 nmod=$3 p sep="" tmp
    tmp=$DIR/.map.json.tmp
    {
        printf '{\n'
        printf '  "version": 1,\n'
        printf '  "open_shards": %d,\n' "$nshards"
        printf '  "database_format": "db%%05d",\n'
        printf '  "credentials": {"user": "shard", "password_env": "LIBSHARD_PASSWORD"},\n'
        printf '  "objects": {"pins": 1, "boards": 2, "users": 3},\n'
        printf '  "mappings": {"board_has_pins": {"reverse": "pin_owned_by_board"},\n'
        printf '               "user_likes_pins": {}},\n'
        printf '  "pairs": {'
        for ((p = 1; p <= npairs; p++)); do
            printf '%s\n    "MySQL%03d": {"master": "127.0.0.1:%s", "standby": "127.0.0.1:%s"}' \
                "$sep" "$p" "$(port_of $((2 * p - 1)))" "$(port_of $((2 * p)))"
            sep=","
        done
        printf '\n  },\n'
        printf '  "id_shards": ['
        ranges_json "$nshards" "$npairs" "    "
        printf '\n  ],\n'
        printf '  "mod_shards": {\n'
        printf '    "count": %d,\n' "$nmod"
        printf '    "database_format": "modshard%%05d",\n'
        printf '    "tables": ["users_by_email", "users_by_name"],\n'
        printf '    "ranges": ['
        ranges_json "$nmod" "$npairs" "      "
        printf '\n    ]\n'
        printf '  }\n'
        printf '}\n'
    } >"$tmp"
    mv -f "$tmp" "$DIR/map.json"
}

port_of() {
    server_line "s$1"
    echo "$S_PORT"
}

# ---------------------------------------------------------------- the rest
cmd_stop() {
    if (($# == 2)); then # one server, cleanly; its files stay for restart
        set_dir_existing "$1"
        local k1
        k1=$(name_to_k "$2")
        server_line "$2"
        our_pid "$k1" >/dev/null || die "$2 is not running"
        stop_servers "$k1"
        return
    fi
    (($# == 1)) || usage
    [[ -e $1 ]] || return 0 # already stopped and removed
    [[ -d $1 ]] || die "$1: not a directory"
    DIR=$(abs_dir "$1")
    if [[ ! -e $DIR/$MARKER ]]; then
        if [[ -z $(ls -A "$DIR") ]]; then rmdir "$DIR"; return 0; fi
        die "$DIR was not made by $PROG: not touching it"
    fi
    local -a ks
    mapfile -t ks < <(server_ks)
    local rc=0
    # their files go with DIR: no clean shutdown to wait for
    if ((${#ks[@]})); then stop_servers --kill "${ks[@]}" || rc=1; fi
    if ((rc == 0)); then
        rm -rf "$DIR"
    else
        die "not removing $DIR: servers still running"
    fi
}

cmd_kill() {
    (($# == 2)) || usage
    set_dir_existing "$1"
    local k pid i
    k=$(name_to_k "$2")
    server_line "$2"
    pid=$(our_pid "$k") || die "$2 is not running"
    kill -KILL "$pid"
    for ((i = 0; i < 200; i++)); do
        alive "$pid" || return 0
        sleep 0.05
    done
    die "$2 (pid $pid) survived SIGKILL"
}

cmd_restart() {
    (($# == 2)) || usage
    set_dir_existing "$1"
    local k rc=0 attempt
    k=$(name_to_k "$2")
    server_line "$2"
    if our_pid "$k" >/dev/null; then die "$2 is already running"; fi
    # the old port may linger for a moment after a kill: retry a few times
    for attempt in 1 2 3 4 5; do
        launch "$k" "$S_PORT"
        rc=0
        wait_up "$k" || rc=$?
        ((rc == 2)) || break
        sleep 1
    done
    if ((rc != 0)); then
        show_log "$k"
        die "$2 did not come back"
    fi
    # skip-slave-start: restart the pair link (if it is configured)
    if [[ -n $(client "$k" -e 'SHOW SLAVE STATUS' 2>/dev/null) ]]; then
        client "$k" -e 'START SLAVE' || die "START SLAVE on $2 failed"
    fi
}

cmd_signal() { # SIG DIR NAME
    local sig=$1
    shift
    (($# == 2)) || usage
    set_dir_existing "$1"
    local k pid
    k=$(name_to_k "$2")
    server_line "$2"
    pid=$(our_pid "$k") || die "$2 is not running"
    kill "-$sig" "$pid"
}

cmd_sql() {
    (($# >= 2)) || usage
    set_dir_existing "$1"
    local k name=$2
    shift 2
    k=$(name_to_k "$name")
    server_line "$name"
    client "$k" "$@"
}

(($# >= 1)) || usage
cmd=$1
shift
case $cmd in
start) cmd_start "$@" ;;
stop) cmd_stop "$@" ;;
kill) cmd_kill "$@" ;;
restart) cmd_restart "$@" ;;
pause) cmd_signal STOP "$@" ;;
resume) cmd_signal CONT "$@" ;;
sql) cmd_sql "$@" ;;
-h | --help | help) usage ;;
*) usage ;;
esac
