#!/bin/sh
# tests/fuzz/run.sh [SECONDS]: build the libFuzzer targets with clang into
# build-fuzz/ (lib/*.c and lib/*/*.c compiled with the same ASan+UBSan flags)
# and run each for SECONDS (default 60), all at once, on a copy of
# tests/fuzz/corpus/ (new inputs stay in build-fuzz/corpus/). Prints one line
# per target:
#   fuzz TARGET: N execs, 0 crashes
# and exits non-zero on any crash, leak, timeout or broken property; the
# input that did it is in build-fuzz/artifacts/TARGET/.
# Needs clang and its libFuzzer runtime (Debian: clang libclang-rt-14-dev).
# FUZZ_CC (default clang) picks another clang, e.g. FUZZ_CC=clang-16;
# FUZZ_JOBS (default: the number of CPUs) how many compiles run at once.
set -u
cd "$(dirname "$0")/../.." || exit 2

SECS=${1:-60}
case "$SECS" in ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
CC=${FUZZ_CC:-clang}
B=build-fuzz
TARGETS="map id patch shardctl"
PKGS="libmariadb jansson libcrypto"

if ! command -v "$CC" >/dev/null 2>&1; then
    echo "fuzz: $CC not found: apt-get install clang libclang-rt-14-dev" >&2
    exit 2
fi
if ! DEPS_CFLAGS=$(pkg-config --cflags $PKGS) || ! DEPS_LIBS=$(pkg-config --libs $PKGS); then
    echo "fuzz: pkg-config cannot find $PKGS" >&2
    exit 2
fi
# ZooKeeper's C client (the zk:// map store) ships no .pc file.
DEPS_LIBS="$DEPS_LIBS -lzookeeper_mt"
mkdir -p "$B/lib" "$B/probe" || exit 2

# The fuzzer runtime ships apart from clang on Debian (libclang-rt-N-dev).
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' \
    >"$B/probe/probe.c"
if ! "$CC" -fsanitize=fuzzer,address,undefined -o "$B/probe/probe" "$B/probe/probe.c" \
    >"$B/probe/log" 2>&1; then
    major=$("$CC" -dumpversion | cut -d. -f1)
    cat "$B/probe/log" >&2
    echo "fuzz: $CC cannot link -fsanitize=fuzzer: apt-get install libclang-rt-$major-dev" >&2
    exit 2
fi

SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS="-std=c11 -D_GNU_SOURCE -pthread -g -O1 -Wall -Wextra $SAN -Iinclude $DEPS_CFLAGS"
HEADERS="include/libshard.h $(ls lib/*.h lib/*/*.h 2>/dev/null)"

# An object is rebuilt when its source or any header is newer.
stale() {
    [ -f "$1" ] || return 0
    [ -n "$(find $2 $HEADERS -newer "$1" 2>/dev/null)" ]
}

# Compiles run FUZZ_JOBS at a time (default: one per CPU), in batches.
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
case "$JOBS" in ''|*[!0-9]*|0) JOBS=1 ;; esac
pids="" running=0
finish() { # waits for the batch; exits if a compile failed
    for p in $pids; do wait "$p" || exit 2; done
    pids="" running=0
}
compile() { # OUT SRC ARGS...: $CC $CFLAGS ARGS -c -o OUT SRC, in the background
    out=$1 src=$2
    shift 2
    $CC $CFLAGS "$@" -c -o "$out" "$src" &
    pids="$pids $!" running=$((running + 1))
    [ "$running" -lt "$JOBS" ] || finish
}

objs=""
for src in lib/*.c lib/*/*.c; do
    [ -f "$src" ] || continue
    obj="$B/${src%.c}.o"
    objs="$objs $obj"
    mkdir -p "$(dirname "$obj")" || exit 2
    if stale "$obj" "$src"; then
        compile "$obj" "$src" -fsanitize=fuzzer-no-link -fvisibility=hidden -DLIBSHARD_BUILD
    fi
done
finish
rm -f "$B/libshard.a"
ar rcs "$B/libshard.a" $objs || exit 2

# shardctl (examples/shardctl/) is linked into its target: main and exit
# renamed, so the fuzzer calls it and an exit() call is caught as a failure.
shardctl_objs=""
for src in examples/shardctl/*.c; do
    obj="$B/shardctl_$(basename "$src" .c).o"
    shardctl_objs="$shardctl_objs $obj"
    if stale "$obj" "$src" || stale "$obj" examples/shardctl/shardctl.h; then
        compile "$obj" "$src" -fsanitize=fuzzer-no-link -Dmain=shardctl_main -Dexit=shardctl_exit
    fi
done
finish
for t in $TARGETS; do
    extra=""
    [ "$t" = shardctl ] && extra="$shardctl_objs"
    $CC $CFLAGS -fsanitize=fuzzer -Ilib -o "$B/fuzz_$t" "tests/fuzz/fuzz_$t.c" $extra \
        "$B/libshard.a" $DEPS_LIBS -lpthread &
    pids="$pids $!" running=$((running + 1))
    [ "$running" -lt "$JOBS" ] || finish
done
finish

# Run every target at once, each on its own copy of the corpus.
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}"
for t in $TARGETS; do
    rm -rf "$B/artifacts/$t"
    mkdir -p "$B/corpus/$t" "$B/artifacts/$t"
    cp tests/fuzz/corpus/"$t"/* "$B/corpus/$t/" 2>/dev/null
    dict=""
    [ -f "tests/fuzz/$t.dict" ] && dict="-dict=tests/fuzz/$t.dict"
    ( "$B/fuzz_$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
          -print_final_stats=1 -artifact_prefix="$B/artifacts/$t/" $dict "$B/corpus/$t" \
          >"$B/fuzz_$t.log" 2>&1
      echo $? >"$B/fuzz_$t.rc" ) &
done
wait

failed=0
for t in $TARGETS; do
    log="$B/fuzz_$t.log"
    rc=$(cat "$B/fuzz_$t.rc" 2>/dev/null || echo 1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    [ -n "$execs" ] || execs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
    [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    [ -n "$execs" ] || execs=0
    crashes=$(find "$B/artifacts/$t" -type f | wc -l | tr -d ' ')
    [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes=1
    echo "fuzz $t: $execs execs, $crashes crashes"
    if [ "$crashes" -ne 0 ]; then
        failed=1
        grep -E 'ERROR|property failed|SUMMARY|exit\(|^ *#[0-9]+ ' "$log" | \
            grep -vE 'fuzzer::|__sanitizer_print_stack_trace|libc|_start' | head -n 40 | \
            sed 's/^/    /'
        find "$B/artifacts/$t" -type f | sed 's/^/    input: /'
        echo "    full log: $log; reproduce: $B/fuzz_$t INPUT"
    fi
done
exit $failed
