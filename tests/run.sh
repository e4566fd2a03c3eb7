#!/bin/sh
# Runs test programs and scripts, then prints one closing line:
# "N passed, N failed" counting the individual checks of every program.
# RUN (e.g. a valgrind command) prefixes each compiled test.
set -u
passed=0 failed=0 bad=""
[ -n "${RUN:-}" ] && export CK_FORK=no   # valgrind and forks: keep one process
for t in "$@"; do
    name=$(basename "$t")
    log=$(mktemp)
    case "$t" in
        *.sh) sh "$t" >"$log" 2>&1; rc=$? ;;
        *) ${RUN:-} "$t" >"$log" 2>&1; rc=$? ;;
    esac
    cat "$log"
    # Check's summary: "100%: Checks: 12, Failures: 0, Errors: 0"
    line=$(grep -E '^[0-9]+%: Checks: [0-9]+' "$log" | tail -n 1)
    rm -f "$log"
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
    [ "$rc" -ne 0 ] && bad="$bad $name"
done
[ -n "$bad" ] && echo "FAILED:$bad"
echo "$passed passed, $failed failed"
[ -z "$bad" ]
