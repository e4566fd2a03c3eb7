#!/bin/sh
# tests/readme_check.sh: the README's tour run top to bottom as a newcomer
# would, in a copy of the source tree, with a HOME of its own and its own
# servers: every command block of "A five-minute tour" up to "Building,
# linking, installing", in order. A block of "$ " lines gives its commands
# (with their continuation lines and here-documents); a block of plain
# commands runs as it is; a block that the next paragraph calls "Saved as
# FILE" is written to FILE. Shown output is not compared (ports, times and
# IDs differ); a command that fails fails the check, except a status whose
# shown output is UNHEALTHY (exit status 1 is its answer). The servers'
# folder /tmp/libshard-try becomes one in the temporary directory.
#
#   sh tests/readme_check.sh          (.ci/run runs it; a few minutes)
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
try="$tmp/try"
cleanup() {
    [ -d "$try" ] && sh "$tmp/src/tests/servers.sh" stop "$try" >/dev/null 2>&1
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "readme_check: $*"; exit 1; }

extract() {
    awk -v try="$try" '
        function flush_cmd() {
            if (cmd == "") return
            print (may_fail ? "{ " cmd "\n} || [ $? -eq 1 ]" : cmd)
            cmd = ""; may_fail = 0
        }
        function quotes(s,   n) { n = gsub(/\047/, "&", s); return n }
        # A finished block: run it, save it, or pass it over.
        function block(   i, l, first, saved, name) {
            while (n > 0 && lines[n] == "") n--
            if (n == 0) return
            first = lines[1]; sub(/^    /, "", first)
            if (dollar) {
                for (i = 1; i <= n; i++) {
                    l = lines[i]; sub(/^    /, "", l)
                    if (heredoc != "") {
                        cmd = cmd "\n" l
                        if (l == heredoc) heredoc = ""
                        continue
                    }
                    if (cont) {
                        cmd = cmd "\n" l
                    } else if (l ~ /^\$ /) {
                        flush_cmd(); cmd = substr(l, 3)
                    } else {
                        if (cmd != "" && l ~ /^status: UNHEALTHY/) may_fail = 1
                        continue
                    }
                    cont = (l ~ /\\$/) || (quotes(cmd) % 2 == 1)
                    if (match(l, /<<\047?[A-Z]+\047?$/)) {
                        heredoc = substr(l, RSTART + 2); gsub(/\047/, "", heredoc)
                    }
                }
                flush_cmd()
            } else if (first ~ /^(export|tests\/|build\/|make|cc |python3|\$HOME|eval|cd )/) {
                for (i = 1; i <= n; i++) { l = lines[i]; sub(/^    /, "", l); print l }
            } else {
                pending = 1 # a file, if the next paragraph says so
                saved = ""
                for (i = 1; i <= n; i++) { l = lines[i]; sub(/^    /, "", l); saved = saved l "\n" }
                pending_text = saved
                return
            }
            pending = 0
        }
        /^A five-minute tour$/ { on = 1; next }
        /^### Building, linking, installing$/ { if (n) block(); on = 0 }
        !on { next }
        {
            gsub(/\/tmp\/libshard-try/, try)
        }
        /^    / || (/^$/ && inblock) {
            if (!inblock) { n = 0; dollar = 0; inblock = 1; cont = 0; heredoc = "" }
            lines[++n] = $0
            if ($0 ~ /^    \$ /) dollar = 1
            next
        }
        /^$/ { next }
        {
            if (inblock) { block(); inblock = 0; para = "" }
            para = para " " $0
            if (pending && para ~ /Saved as [A-Za-z0-9_.]+/) {
                match(para, /Saved as [A-Za-z0-9_.]+/)
                name = substr(para, RSTART + 9, RLENGTH - 9); sub(/[.,]$/, "", name)
                printf "cat >%s <<\047README_EOF\047\n%sREADME_EOF\n", name, pending_text
                pending = 0
            }
        }
        /[.:]$/ { para = "" }
    ' "$src/README"
}

# --print: the commands only.
if [ "${1:-}" = --print ]; then
    extract
    exit 0
fi
extract >"$tmp/tour.sh"

# The tree as it is (tracked files, with their changes), built as the
# tour assumes ("after make demo (or make)").
mkdir -p "$tmp/src" "$tmp/home"
(cd "$src" && git ls-files -z | xargs -0 tar cf -) | (cd "$tmp/src" && tar xf -)
make -C "$tmp/src" -s -j2 all >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "make failed"; }

grep -q 'servers.sh start' "$tmp/tour.sh" || fail "no tour found in the README (is this check out of date?)"

cd "$tmp/src"
if HOME="$tmp/home" sh -ex "$tmp/tour.sh" >"$tmp/tour.log" 2>&1; then
    echo "readme_check: ok ($(grep -c '^+ ' "$tmp/tour.log") commands of the README's tour ran in order)"
else
    tail -n 30 "$tmp/tour.log"
    fail "the README's tour fails at the command above (the script: $tmp/tour.sh)"
fi
