#!/bin/sh
# examples/python/check.sh: the Python binding's tests, for tests/run.sh
# (make check-run), against the library of the build directory $B.
#
#   B=build sh examples/python/check.sh
#
# Skipped (exit 0, with a line saying so) without python3, and for
# sanitizer builds: an ASan library cannot be loaded into an uninstrumented
# python3 without LD_PRELOAD tricks that would test the tricks instead.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
B=${B:-build}
case $B in /*) ;; *) B=$ROOT/$B ;; esac

if ! command -v python3 >/dev/null 2>&1; then
    echo "python binding: skipped (no python3)"
    exit 0
fi
if [ "$(basename "$B")" != build ]; then
    echo "python binding: skipped for the sanitizer build $B"
    exit 0
fi
LIBSHARD_LIB=$B/libshard.so.0 exec python3 "$HERE/test_libshard.py"
