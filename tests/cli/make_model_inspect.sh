#!/usr/bin/env bash
# make-model + inspect: tiny checkpoints in both layouts and every expert format load; header-only V4-Flash and
# V4-Pro reproduce the published tensor, byte and parameter totals (MODEL_SPEC §2.3, §14.13) at no disk cost.
# Usage: make_model_inspect.sh DSV4_BINARY SOURCE_DIR
set -euo pipefail
dsv4="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_line() {  # expect_line FILE TEXT: TEXT appears literally in FILE
    grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "'$2' not found in $1"; }
}

# Tiny, both layouts, same seed.
for layout in official transformers; do
    "$dsv4" make-model --preset tiny --seed 1 --layout "$layout" --out "$tmp/tiny-$layout" >/dev/null 2>&1 \
        || fail "make-model tiny $layout"
    "$dsv4" inspect -m "$tmp/tiny-$layout" >"$tmp/out-$layout.txt" || fail "inspect tiny $layout"
    expect_line "$tmp/out-$layout.txt" "($layout layout"
done
expect_line "$tmp/out-official.txt" "(MTP)"
expect_line "$tmp/out-official.txt" "parameters  8,140,158"

# Every expert format, sharded (small shards force an index and several files).
for fmt in mxfp4 nvfp4 fp8; do
    "$dsv4" make-model --preset tiny --expert-format "$fmt" --shard-size 1000000 --out "$tmp/tiny-$fmt" \
        >/dev/null 2>&1 || fail "make-model tiny $fmt"
    [ -f "$tmp/tiny-$fmt/model.safetensors.index.json" ] || fail "no index for sharded $fmt checkpoint"
    ls "$tmp/tiny-$fmt" | grep -q '^model-00001-of-000[0-9][0-9].safetensors$' || fail "shard names ($fmt)"
    "$dsv4" inspect -m "$tmp/tiny-$fmt" >"$tmp/out-$fmt.txt" || fail "inspect tiny $fmt"
    expect_line "$tmp/out-$fmt.txt" ", $fmt;"
done

# --json is valid JSON with the same counts.
"$dsv4" inspect -m "$tmp/tiny-official" --json >"$tmp/out.json"
python3 - "$tmp/out.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["parameters"] == 8140158, j["parameters"]
assert j["layout"] == "official"
assert [l["attention"] for l in j["schedule"]] == ["SWA", "CSA", "HCA", "CSA", "HCA", "SWA"]
assert j["schedule"][-1]["mtp"] is True
EOF

# Header-only V4-Flash and V4-Pro: the published totals, digit for digit, in sparse files.
check_big() {  # check_big PRESET TENSORS BYTES PARAMS
    local dir="$tmp/$1"
    "$dsv4" make-model --preset "$1" --header-only --out "$dir" >/dev/null 2>&1 || fail "make-model $1 --header-only"
    "$dsv4" inspect -m "$dir" >"$tmp/out-$1.txt" || { cat "$tmp/out-$1.txt"; fail "inspect $1"; }
    expect_line "$tmp/out-$1.txt" "tensors     $2"
    expect_line "$tmp/out-$1.txt" "bytes       $3 "
    expect_line "$tmp/out-$1.txt" "parameters  $4 "
    local apparent_kb used_kb
    apparent_kb=$(du -sk --apparent-size "$dir" | cut -f1)
    used_kb=$(du -sk "$dir" | cut -f1)
    echo "$1: apparent size ${apparent_kb} KiB, on disk ${used_kb} KiB"
    [ "$used_kb" -lt 200000 ] || fail "$1 header-only files use ${used_kb} KiB of disk (not sparse)"
    [ "$apparent_kb" -gt 100000000 ] || fail "$1 header-only files are only ${apparent_kb} KiB long"
    rm -rf "$dir"
}
check_big flash 69,187 159,609,485,896 290,942,289,362
check_big pro 145,116 864,704,792,696 1,598,837,347,742

echo "make_model_inspect: ok"
