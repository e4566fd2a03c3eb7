#!/bin/sh
# man/links.sh [MANDIR]: the manual page links that make install creates.
#
# A page may document several functions; its NAME section names them all
# (one name per line). Every name that has no page file of its own gets a
# link to the page that names it, so `man shard_kv_get` opens
# shard_kv_put(3). Prints one line per link:
#
#   man3 shard_kv_get.3 shard_kv_put.3
#
# (section directory, link, page it points to). The list is derived from the
# pages, so a function added to a page's NAME section gets its link without
# any list to keep up to date. make install, make uninstall and
# tests/doc_check.sh read it.
set -eu
mandir=${1:-$(dirname "$0")}
for page in "$mandir"/man*/*.[1-9]; do
    [ -f "$page" ] || continue
    dir=$(basename "$(dirname "$page")")
    file=$(basename "$page")
    sec=${file##*.}
    awk '
        /^\.SH/ { insec = ($0 ~ /^\.SH[ \t]+"?NAME"?[ \t]*$/); next }
        insec && !/^\.\\"/ { text = text " " $0 }
        END {
            sub(/\\-.*/, "", text); gsub(/\\f[BIRP]|\\&|\\%/, "", text)
            n = split(text, w, /[ ,\t]+/)
            for (i = 1; i <= n; i++) if (w[i] != "") print w[i]
        }' "$page" | while read -r name; do
        [ -e "$mandir/$dir/$name.$sec" ] || printf '%s %s %s\n' "$dir" "$name.$sec" "$file"
    done
done
