#!/bin/sh
# The manual pages against the public header. Run from the project root.
# Fails, with one line per problem, when:
#  - a shard_*() function declared in include/libshard.h is not named in the
#    NAME section of a page in man/man3, or the SYNOPSIS of that page does not
#    show the header's prototype (whitespace aside);
#  - man/man3/NAME.3 exists but does not name NAME; a page is a .so stub
#    (those fail to render outside man/: a function that shares a page is
#    named in that page's NAME section, and make install links it there, see
#    man/links.sh);
#  - a page that documents functions lacks one of the sections NAME,
#    SYNOPSIS, DESCRIPTION, RETURN VALUE, ERRORS, EXAMPLE, SEE ALSO; a page
#    refers to a libshard page (shard_*, libshard*, shardctl) that does not
#    exist, neither as a page nor as an installed link;
#  - the SHARD_E* codes (name and number) of the header differ from those that
#    man/man3/libshard-errors.3 lists as "SHARD_EXXX (-N)";
#  - groff -ww -z -man prints anything for any page under man/;
#  - mandoc -Tlint reports anything for any page (when mandoc is installed;
#    tests/deps.sh installs it).
set -u
LC_ALL=C
export LC_ALL

hdr=include/libshard.h
mandir=man
errpage=man3/libshard-errors.3
nproblems=0

problem() {
    echo "doc_check: $*"
    nproblems=$((nproblems + 1))
}

if [ ! -f "$hdr" ] || [ ! -d "$mandir/man3" ]; then
    echo "doc_check: run from the project root ($hdr or $mandir/man3 not found)"
    exit 1
fi
if ! command -v groff >/dev/null 2>&1; then
    echo "doc_check: groff is not installed: install groff-base (apt-get install groff-base)"
    exit 1
fi

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# ---- the header: functions with their prototypes, and error codes --------

# One line per function: NAME<TAB>normalised prototype. Comments and
# preprocessor lines go first, so prose that mentions shard_foo() is not a
# declaration.
awk '
function norm(s) {
    gsub(/[ \t\r\n]+/, " ", s)
    gsub(/\( /, "(", s); gsub(/ \)/, ")", s); gsub(/ ,/, ",", s)
    sub(/^ /, "", s); sub(/ $/, "", s)
    return s
}
{
    line = $0; out = ""
    while (line != "") {
        if (incomment) {
            i = index(line, "*/")
            if (i == 0) { line = ""; break }
            line = substr(line, i + 2); incomment = 0
            continue
        }
        i = index(line, "/*"); j = index(line, "//")
        if (j > 0 && (i == 0 || j < i)) { out = out substr(line, 1, j - 1); break }
        if (i == 0) { out = out line; break }
        out = out substr(line, 1, i - 1) " "; line = substr(line, i + 2); incomment = 1
    }
    if (cont || out ~ /^[ \t]*#/) { cont = (out ~ /\\[ \t]*$/); next }
    text = text " " out
}
END {
    n = split(text, stmt, ";")
    for (k = 1; k <= n; k++) {
        s = stmt[k]
        while (match(s, /[{}]/)) s = substr(s, RSTART + 1)
        if (!match(s, /(^|[^A-Za-z0-9_])shard_[a-z0-9_]+[ \t]*\(/)) continue
        name = substr(s, RSTART, RLENGTH)
        sub(/^[^s]*/, "", name); sub(/[ \t]*\($/, "", name)
        gsub(/(^|[ \t])SHARD_EXPORT[ \t]/, " ", s)
        printf "%s\t%s;\n", name, norm(s)
    }
}' "$hdr" | sort -u >"$tmp/decls"
nfuncs=$(wc -l <"$tmp/decls" | tr -d ' ')
if [ "$nfuncs" -eq 0 ]; then
    problem "found no shard_*() declarations in $hdr (is this check out of date?)"
fi

sed -n -E 's/^[[:space:]]*#[[:space:]]*define[[:space:]]+(SHARD_E[A-Z0-9_]+)[[:space:]]+\(?[[:space:]]*(-?[0-9]+)[[:space:]]*\)?.*/\1 \2/p' \
    "$hdr" | sort -u >"$tmp/codes.h"

# ---- the pages -----------------------------------------------------------

# Render a page as plain text.
render() {
    (cd "$mandir" && groff -man -Tascii -P-cbou "$1" 2>/dev/null)
}

: >"$tmp/names"      # NAME<TAB>page, for every name in a real page's NAME
npages=0
for page in "$mandir"/man*/*.[1-9]*; do
    [ -f "$page" ] || continue
    npages=$((npages + 1))
    rel=${page#"$mandir"/}
    if grep -q '^\.so[[:space:]]' "$page"; then
        problem "$page: a .so request renders only from inside $mandir/: name the function in the NAME section of the page it includes (make install links it)"
        continue
    fi
    # NAME section: the names before "\-".
    awk -v page="$rel" '
        /^\.SH/ { insec = ($0 ~ /^\.SH[ \t]+"?NAME"?[ \t]*$/); next }
        insec && !/^\.\\"/ { text = text " " $0 }
        END {
            sub(/\\-.*/, "", text); gsub(/\\f[BIRP]|\\&|\\%/, "", text)
            n = split(text, w, /[ ,\t]+/)
            for (i = 1; i <= n; i++) if (w[i] != "") printf "%s\t%s\n", w[i], page
        }' "$page" >>"$tmp/names"
done
sort -u "$tmp/names" -o "$tmp/names"

# Does page $2 (relative to man/, a real page) name $1 in its NAME section?
names_it() {
    awk -F '\t' -v n="$1" -v p="$2" '$1 == n && $2 == p { f = 1 } END { exit !f }' "$tmp/names"
}

# Normalised SYNOPSIS text of a real page, cached.
synopsis() {
    f="$tmp/syn.$(echo "$1" | tr '/' '_')"
    if [ ! -f "$f" ]; then
        render "$1" | awk '
            /^[A-Z]/ { insec = ($0 ~ /^SYNOPSIS/); next }
            insec { text = text " " $0 }
            END {
                gsub(/[ \t]+/, " ", text)
                gsub(/\( /, "(", text); gsub(/ \)/, ")", text); gsub(/ ,/, ",", text)
                print text
            }' >"$f"
    fi
    cat "$f"
}

while IFS='	' read -r fn proto; do
    pages=$(awk -F '\t' -v n="$fn" '$1 == n { print $2 }' "$tmp/names")
    if [ -z "$pages" ]; then
        problem "$fn() is declared in $hdr but no page in $mandir/man3 names it in its NAME section"
        continue
    fi
    own="$mandir/man3/$fn.3"
    if [ -f "$own" ] && ! grep -q '^\.so[[:space:]]' "$own"; then
        names_it "$fn" "man3/$fn.3" ||
            problem "$own does not name $fn in its NAME section"
    fi
    found=no
    for p in $pages; do
        synopsis "$p" | grep -F -q -- "$proto" && { found=yes; break; }
    done
    [ "$found" = yes ] ||
        problem "$fn(): the SYNOPSIS of $(echo "$pages" | sed "s|^|$mandir/|" | tr '\n' ' ')does not show the header's prototype: $proto"
done <"$tmp/decls"

# Every page that documents functions has the sections of a function page.
for page in $(awk -F '\t' '$1 ~ /^shard_/ { print $2 }' "$tmp/names" | sort -u); do
    for sec in NAME SYNOPSIS DESCRIPTION "RETURN VALUE" ERRORS EXAMPLE "SEE ALSO"; do
        grep -E -q "^\\.SH[[:space:]]+\"?$sec\"?[[:space:]]*\$" "$mandir/$page" ||
            problem "$mandir/$page has no $sec section"
    done
done

# References to libshard's own pages must resolve, to a page or to a link
# that make install creates.
sh "$mandir/links.sh" "$mandir" | awk '{ print $1 "/" $2 }' >"$tmp/links"
for page in "$mandir"/man*/*.[1-9]*; do
    [ -f "$page" ] || continue
    sed -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' -e 's/"//g' -e 's/\\%//g' "$page" | awk '{
        s = $0
        while (match(s, /(shard_[a-z0-9_]+|libshard[a-z0-9-]*|shardctl) *\([1-9]\)/)) {
            r = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
            gsub(/ /, "", r); print r
        }
    }' | sort -u | while read -r ref; do
        n=${ref%(*}; sec=${ref#*(}; sec=${sec%)}
        [ -f "$mandir/man$sec/$n.$sec" ] || grep -qx "man$sec/$n.$sec" "$tmp/links" ||
            echo "doc_check: $page refers to $ref, but there is no $mandir/man$sec/$n.$sec"
    done
done >"$tmp/refs"
if [ -s "$tmp/refs" ]; then
    cat "$tmp/refs"
    nproblems=$((nproblems + $(wc -l <"$tmp/refs")))
fi

# ---- error codes ---------------------------------------------------------

ncodes=$(wc -l <"$tmp/codes.h" | tr -d ' ')
if [ ! -f "$mandir/$errpage" ]; then
    problem "$mandir/$errpage is missing"
else
    sed -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' -e 's/"//g' "$mandir/$errpage" | awk '{
        s = $0
        while (match(s, /SHARD_E[A-Z0-9_]+ *\( *-?[0-9]+ *\)/)) {
            r = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
            gsub(/[ ()]/, " ", r); split(r, f, / +/); print f[1], f[2]
        }
    }' | sort -u >"$tmp/codes.man"
    awk -v page="$mandir/$errpage" -v hdr="$hdr" '
        FNR == NR { h[$1] = h[$1] (h[$1] == "" ? "" : ",") $2; next }
        { m[$1] = m[$1] (m[$1] == "" ? "" : ",") $2 }
        END {
            for (c in h) {
                if (!(c in m))
                    printf "doc_check: %s (%s) is in %s but not in %s\n", c, h[c], hdr, page
                else if (h[c] != m[c])
                    printf "doc_check: %s is %s in %s but %s in %s\n", c, h[c], hdr, m[c], page
            }
            for (c in m)
                if (!(c in h))
                    printf "doc_check: %s (%s) is listed in %s but not defined in %s\n", c, m[c], page, hdr
        }' "$tmp/codes.h" "$tmp/codes.man" | sort >"$tmp/codediff"
    if [ -s "$tmp/codediff" ]; then
        cat "$tmp/codediff"
        nproblems=$((nproblems + $(wc -l <"$tmp/codediff")))
    fi
fi

# ---- groff warnings ------------------------------------------------------

for page in "$mandir"/man*/*.[1-9]*; do
    [ -f "$page" ] || continue
    rel=${page#"$mandir"/}
    out=$(cd "$mandir" && groff -ww -z -man "$rel" 2>&1 >/dev/null)
    rc=$?
    if [ -n "$out" ] || [ "$rc" -ne 0 ]; then
        problem "$page: groff -ww -z -man exits $rc and says:"
        printf '%s\n' "$out" | sed 's/^/    /'
    fi
done

# ---- mandoc -Tlint ------------------------------------------------------

linted=""
if command -v mandoc >/dev/null 2>&1; then
    for page in "$mandir"/man*/*.[1-9]*; do
        [ -f "$page" ] || continue
        out=$(mandoc -Tlint -W style "$page" 2>&1)
        if [ -n "$out" ]; then
            problem "$page: mandoc -Tlint says:"
            printf '%s\n' "$out" | sed 's/^/    /'
        fi
    done
    linted=", mandoc -Tlint clean"
else
    echo "doc_check: mandoc not installed, skipping mandoc -Tlint (apt-get install mandoc)"
fi

# ---- shardctl(1) against shardctl --help ----------------------------------

# Every command that `shardctl --help` lists (the leading lowercase words of
# an entry, before the two spaces that start its description) has a
# subsection (.SS) of shardctl(1) that starts with those words.
shardctl=${SHARDCTL:-build/shardctl}
page1=$mandir/man1/shardctl.1
if [ ! -x "$shardctl" ]; then
    problem "cannot run $shardctl (build it, or set SHARDCTL) to compare its --help with $page1"
elif [ ! -f "$page1" ]; then
    problem "$page1 is missing"
else
    "$shardctl" --help | awk '
        /^  [a-z]/ {
            s = substr($0, 3); d = index(s, "  "); if (d) s = substr(s, 1, d - 1)
            w = ""; n = split(s, t, / +/)
            for (i = 1; i <= n && t[i] ~ /^[a-z][a-z-]*$/; i++) w = w (w == "" ? "" : " ") t[i]
            print w
        }' | sort -u >"$tmp/cmds"
    [ -s "$tmp/cmds" ] || problem "$shardctl --help lists no commands (is this check out of date?)"
    sed -n -E 's/^\.SS[[:space:]]+"?//p' "$page1" | sed -e 's/\\-/-/g' -e 's/\\&//g' \
        >"$tmp/sections"
    while read -r cmd; do
        grep -E -q "^$cmd( |\"|\$)" "$tmp/sections" ||
            problem "$shardctl --help lists \"$cmd\", but $page1 has no .SS section for it"
    done <"$tmp/cmds"
fi

# ---- every flag in shardctl help CMD ------------------------------------------

# Each option that shardctl(1) names in a command's subsection (its heading
# and its text up to the next .SS or .SH, examples of output aside) is in
# `shardctl help CMD`, and
# every option `shardctl help CMD` lists is described somewhere in the page.
if [ -x "$shardctl" ] && [ -f "$page1" ] && [ -s "$tmp/cmds" ]; then
    sed -e 's/\\-/-/g' -e 's/\\&//g' -e 's/\\f[BIRP]//g' "$page1" | awk '
        /^\.S[SH]/ { cmd = "" }
        /^\.SS/ {
            s = $0; sub(/^\.SS[ \t]+"?/, "", s); sub(/"$/, "", s)
            n = split(s, t, / +/)
            for (i = 1; i <= n && t[i] ~ /^[a-z][a-z-]*$/; i++) cmd = cmd (cmd == "" ? "" : " ") t[i]
        }
        /^\.nf/ { verbatim = 1 }
        /^\.fi/ { verbatim = 0 }
        cmd != "" && !verbatim {
            s = $0
            while (match(s, /--[a-z][a-z-]*[a-z]/)) {
                print cmd "\t" substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
            }
        }' | sort -u >"$tmp/manflags"
    sed -e 's/\\-/-/g' "$page1" >"$tmp/page"
    while read -r cmd; do
        # shellcheck disable=SC2086 # the command's words are separate arguments
        "$shardctl" help $cmd >"$tmp/help" 2>&1 ||
            { problem "shardctl help $cmd failed: $(head -n 1 "$tmp/help")"; continue; }
        awk -F '\t' -v c="$cmd" '$1 == c { print $2 }' "$tmp/manflags" | while read -r flag; do
            grep -q -e "$flag\([^a-z-]\|\$\)" "$tmp/help" ||
                echo "$page1 names $flag under \"$cmd\", but shardctl help $cmd does not list it"
        done >>"$tmp/flagproblems"
        grep -o -e '--[a-z][a-z-]*[a-z]' "$tmp/help" | sort -u | while read -r flag; do
            grep -q -e "$flag" "$tmp/page" ||
                echo "shardctl help $cmd lists $flag, which $page1 does not describe"
        done >>"$tmp/flagproblems"
    done <"$tmp/cmds"
    if [ -s "$tmp/flagproblems" ]; then
        while read -r line; do problem "$line"; done <"$tmp/flagproblems"
    fi
fi

if [ "$nproblems" -ne 0 ]; then
    echo "doc_check: $nproblems problem(s)"
    exit 1
fi
echo "doc_check: ok ($nfuncs functions documented, $ncodes error codes, $npages pages without groff warnings$linted)"
