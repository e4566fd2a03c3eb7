#!/bin/sh
# examples/python/check.sh: the Python binding's tests, for tests/run.sh
# (make check-run), against the package as a user installs it:
#  - make install of the build into a temporary PREFIX;
#  - a fresh venv, and pip install --no-build-isolation of this directory
#    into it, offline (--no-index): the package libshard/, py.typed, and
#    the project's COPYING in its .dist-info;
#  - test_libshard.py and example.py run from a copy outside the source tree
#    with the venv's python, so that `import libshard` is the installed
#    package, which finds the installed libshard.so.0 through
#    LD_LIBRARY_PATH alone (no LIBSHARD_LIB).
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
PYTHON=${PYTHON:-python3}

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "python binding: skipped (no $PYTHON)"
    exit 0
fi
if [ "$(basename "$B")" != build ]; then
    echo "python binding: skipped for the sanitizer build $B"
    exit 0
fi
if ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then
    echo "python binding: $PYTHON cannot make a venv: apt-get install python3-venv (tests/deps.sh does)"
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "python binding: $*"; exit 1; }

# The C library, installed.
${MAKE:-make} -s -C "$ROOT" install PREFIX="$tmp/prefix" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "make install PREFIX=$tmp/prefix failed"; }

# The package, into a fresh venv, offline.
"$PYTHON" -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1 ||
    { cat "$tmp/venv.log"; fail "$PYTHON -m venv failed"; }
py=$tmp/venv/bin/python
(cd "$HERE" && find . | sort) >"$tmp/files.before"
PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$py" -m pip install --no-build-isolation "$HERE" >"$tmp/pip.log" 2>&1 ||
    { cat "$tmp/pip.log"; fail "pip install --no-build-isolation $HERE failed"; }
(cd "$HERE" && find . | sort) >"$tmp/files.after"
cmp -s "$tmp/files.before" "$tmp/files.after" ||
    fail "pip install left files in $HERE: $(comm -13 "$tmp/files.before" "$tmp/files.after" | tr '\n' ' ')"

# The tests from outside the source tree: the script's directory has no
# libshard package, so the import is the venv's.
mkdir "$tmp/run"
cp "$HERE/test_libshard.py" "$HERE/example.py" "$tmp/run/"
unset LIBSHARD_LIB
export LD_LIBRARY_PATH="$tmp/prefix/lib" LIBSHARD_SOURCE_TREE="$ROOT"
cd "$tmp/run"
where=$("$py" -c 'import libshard, sys; print(libshard.__file__); print(libshard.__version__ == libshard.version())') ||
    fail "import libshard failed in the venv"
case $where in
    "$tmp/venv/"*True) ;;
    *) fail "import libshard: expected the venv's module, with __version__ == shard_version(): $where" ;;
esac
# The wheel carries the licence and the typing marker.
site=$(dirname "$(dirname "$(echo "$where" | head -n 1)")")
for f in "$site"/libshard-*.dist-info/COPYING "$site/libshard/py.typed"; do
    [ -f "$f" ] || fail "the installed package lacks $f"
done
cmp -s "$site"/libshard-*.dist-info/COPYING "$ROOT/COPYING" ||
    fail "the installed licence differs from $ROOT/COPYING"
echo "python binding: installed $(echo "$where" | head -n 1), libshard $("$py" -c 'import libshard; print(libshard.__version__)')"
exec "$py" test_libshard.py
