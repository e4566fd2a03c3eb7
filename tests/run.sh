#!/bin/bash
# Runs test programs and scripts, then prints one closing line:
# "N passed, N failed" counting the individual checks of every program.
# RUN (e.g. a valgrind command) prefixes each compiled test.
# JOBS (default 1) runs that many at once: each test's output is printed
# whole when it ends, with how long it took, so outputs never interleave.
# The tests start their own servers on ports they pick and retry, so they
# can run side by side; the longest ones (by tests/durations, one "name
# seconds" line each) start first. Every run writes its own durations to
# $B/durations (copy it over tests/durations when the suite changes).
set -u
passed=0 failed=0 bad="" badlogs=""
jobs=${JOBS:-1}
[ -n "${RUN:-}" ] && export CK_FORK=no   # valgrind and forks: keep one process
# Run as a user runs them, also under make -j2: a make that a test starts
# (the Python binding's make install) must not look for the job server of
# the make that started this script.
unset MAKEFLAGS MFLAGS
here=$(cd "$(dirname "$0")" && pwd)
# ASan builds: leaks inside third-party libraries LSan cannot see into
# (tests/lsan.supp says which and why); ours are still failures.
export LSAN_OPTIONS="suppressions=$here/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# longest first, by the last recorded durations (unknown ones first of all)
order() {
    local t name s
    for t in "$@"; do
        name=$(basename "$t")
        s=$(awk -v n="$name" '$1 == n { print $2 }' "$here/durations" 2>/dev/null)
        echo "${s:-100000} $t"
    done | sort -k1,1nr -s | cut -d' ' -f2-
}

run_one() {
    local t=$1 i=$2 start rc
    start=$EPOCHREALTIME
    case "$t" in
        *.sh) sh "$t" >"$work/$i.log" 2>&1; rc=$? ;;
        *) ${RUN:-} "$t" >"$work/$i.log" 2>&1; rc=$? ;;
    esac
    echo "$rc $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')" \
        >"$work/$i.rc.tmp" && mv "$work/$i.rc.tmp" "$work/$i.rc"
}

tally() {
    local t=$1 i=$2 name rc secs line n f e
    name=$(basename "$t")
    read -r rc secs <"$work/$i.rc"
    cat "$work/$i.log"
    echo "$name: $secs s"
    echo "$name $secs" >>"$work/durations"
    # Check's summary: "100%: Checks: 12, Failures: 0, Errors: 0"
    line=$(grep -E '^[0-9]+%: Checks: [0-9]+' "$work/$i.log" | tail -n 1)
    if [ -n "$line" ]; then
        n=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
        f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
        e=$(echo "$line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
        passed=$((passed + n - f - e)); failed=$((failed + f + e))
        if [ "$rc" -ne 0 ] && [ $((f + e)) -eq 0 ]; then failed=$((failed + 1)); fi
    elif [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
    fi
    [ "$rc" -ne 0 ] && bad="$bad $name" && badlogs="$badlogs $i"
}

mapfile -t tests < <(order "$@")
declare -A running=() # index -> pid
i=0
for t in "${tests[@]}"; do
    while [ "${#running[@]}" -ge "$jobs" ]; do
        wait -n 2>/dev/null
        for k in "${!running[@]}"; do
            if [ -e "$work/$k.rc" ]; then
                wait "${running[$k]}" 2>/dev/null
                tally "${tests[$k]}" "$k"
                unset "running[$k]"
            fi
        done
    done
    run_one "$t" "$i" &
    running[$i]=$!
    i=$((i + 1))
done
wait
for k in "${!running[@]}"; do
    tally "${tests[$k]}" "$k"
done
[ -n "${B:-}" ] && [ -d "$B" ] && sort "$work/durations" >"$B/durations" 2>/dev/null
# Again at the end, where a CI log's tail shows it: each failed program's
# failed checks (Check's ":F:" and ":E:" lines) and its last lines.
for i in $badlogs; do
    echo "== $(basename "${tests[$i]}") failed:"
    grep -E ':[FE]:' "$work/$i.log" | head -n 20
    echo "-- its last lines:"
    tail -n 12 "$work/$i.log"
done
[ -n "$bad" ] && echo "FAILED:$bad"
echo "$passed passed, $failed failed"
[ -z "$bad" ]
