#!/usr/bin/env bash
# scripts/sync-build-times on a throw-away tree, in the situations a copied tree creates: a source whose content
# changes while its time goes back gets a time newer than anything built before; a changed source whose copy
# arrives again with its old time gets its recorded (newer) time back, also after its content went back to an
# earlier version (a patch applied, built, reverted); an unchanged source keeps its time; a build directory that
# already holds a build but no sums has every source given the current time; a fresh one nothing.
# Usage: sync_build_times.sh SOURCE_ROOT
set -euo pipefail
root="${1:?usage: sync_build_times.sh SOURCE_ROOT}"
fail() { echo "FAIL: $*" >&2; exit 1; }
t="$(mktemp -d)"
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/tree/scripts" "$t/tree/src" "$t/build"
cp "$root/scripts/sync-build-times" "$t/tree/scripts/"
a="$t/tree/src/a.cpp" b="$t/tree/src/b.cpp"
printf 'int a = 1;\n' > "$a"
printf 'int b = 1;\n' > "$b"
touch -d '2020-01-01' "$a" "$b"
old() { [ "$(stat -c %Y "$1")" -lt 1600000000 ]; }
mtime() { stat -c %.9Y "$1"; }
sync() { "$t/tree/scripts/sync-build-times" "$t/build" > /dev/null; }
sync  # a fresh build directory: nothing touched, the sums recorded
old "$a" && old "$b" || fail "a fresh build directory touched sources"
printf 'int a = 2;\n' > "$a"
touch -d '2020-01-01' "$a"  # new content, old time
sync
old "$a" && fail "a.cpp changed but was not given a new time"
old "$b" || fail "b.cpp did not change but was touched"
given="$(mtime "$a")"
touch -d '2020-01-01' "$a"  # the next copy of the tree: same content, the old time again
sync
[ "$(mtime "$a")" = "$given" ] || fail "a.cpp did not get its recorded time back ($(mtime "$a") != $given)"
printf 'int a = 1;\n' > "$a"  # the patch reverted: the first content again, arriving with the old time
touch -d '2020-01-01' "$a"
sync
reverted="$(mtime "$a")"
awk -v r="$reverted" -v g="$given" 'BEGIN { exit !(r > g) }' ||
    fail "a.cpp went back to its first content but its time did not move forward ($reverted <= $given)"
touch -d '2020-01-01' "$a"  # and sent once more: it must stay newer than anything built before the revert
sync
[ "$(mtime "$a")" = "$reverted" ] || fail "the reverted a.cpp lost its time ($(mtime "$a") != $reverted)"
# an existing build without sums: everything given the current time
mkdir -p "$t/build2"
: > "$t/build2/build.ninja"
"$t/tree/scripts/sync-build-times" "$t/build2" > /dev/null
old "$b" && fail "an unrecorded build directory left b.cpp untouched"
echo "sync-build-times: ok"
