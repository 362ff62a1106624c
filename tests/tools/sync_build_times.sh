#!/usr/bin/env bash
# scripts/sync-build-times on a throw-away tree: a source whose content changes while its modification time goes
# back (as a copied tree can make it) is touched, so that it is newer than anything built before; an unchanged
# source keeps its time; a build directory that already holds a build but no sums has every source touched; a fresh
# one nothing.
# Usage: sync_build_times.sh SOURCE_ROOT
set -euo pipefail
root="${1:?usage: sync_build_times.sh SOURCE_ROOT}"
fail() { echo "FAIL: $*" >&2; exit 1; }
t="$(mktemp -d)"
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/tree/scripts" "$t/tree/src" "$t/build"
cp "$root/scripts/sync-build-times" "$t/tree/scripts/"
printf 'int a = 1;\n' > "$t/tree/src/a.cpp"
printf 'int b = 1;\n' > "$t/tree/src/b.cpp"
touch -d '2020-01-01' "$t/tree/src/a.cpp" "$t/tree/src/b.cpp"
old() { [ "$(stat -c %Y "$1")" -lt 1600000000 ]; }
sync() { "$t/tree/scripts/sync-build-times" "$t/build" > /dev/null; }
sync  # a fresh build directory: nothing touched, the sums recorded
old "$t/tree/src/a.cpp" && old "$t/tree/src/b.cpp" || fail "a fresh build directory touched sources"
printf 'int a = 2;\n' > "$t/tree/src/a.cpp"
touch -d '2020-01-01' "$t/tree/src/a.cpp"  # new content, old time
sync
old "$t/tree/src/a.cpp" && fail "a.cpp changed but was not touched"
old "$t/tree/src/b.cpp" || fail "b.cpp did not change but was touched"
touch -d '2020-01-01' "$t/tree/src/a.cpp"
sync
old "$t/tree/src/a.cpp" || fail "a.cpp was touched again without a change"
# an existing build without sums: everything touched
mkdir -p "$t/build2"
: > "$t/build2/build.ninja"
"$t/tree/scripts/sync-build-times" "$t/build2" > /dev/null
old "$t/tree/src/b.cpp" && fail "an unrecorded build directory left b.cpp untouched"
echo "sync-build-times: ok"
