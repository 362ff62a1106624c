#!/usr/bin/env bash
# inspect refuses broken checkpoints with one message naming the problem: each case below starts from a fresh tiny
# make-model checkpoint (sharded, so it has an index), breaks one thing, and expects exit code 1 and a message that
# names the file, tensor or key involved.
# Usage: corrupt_checkpoints.sh DSV4_BINARY SOURCE_DIR
set -euo pipefail
dsv4="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

"$dsv4" make-model --preset tiny --seed 2 --shard-size 3000000 --out "$tmp/pristine" >/dev/null 2>&1 \
    || fail "make-model tiny"
"$dsv4" inspect -m "$tmp/pristine" >/dev/null || fail "the pristine checkpoint does not inspect cleanly"
shard1=model-00001-of-00004.safetensors
shard2=model-00002-of-00004.safetensors
[ -f "$tmp/pristine/$shard1" ] && [ -f "$tmp/pristine/$shard2" ] || { ls "$tmp/pristine"; fail "expected 4 shards"; }

# Rewrites the JSON header of a shard through a Python snippet acting on `h` (the parsed header dict); the data
# region is kept byte for byte.
edit_header() {  # edit_header FILE PYTHON
    python3 - "$1" "$2" <<'EOF'
import json, struct, sys
path, code = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
data = raw[8 + n:]
tensors = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
exec(code)
text = json.dumps(h).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
EOF
}

case_no=0
# expect_failure NAME PATTERN: inspect the broken copy in $dir, want exit 1 and PATTERN (grep -E) in the message.
expect_failure() {
    local out rc=0
    out=$("$dsv4" inspect -m "$dir" 2>&1 >/dev/null) || rc=$?
    [ "$rc" -eq 1 ] || fail "$1: inspect exited $rc (want 1); message: $out"
    echo "$out" | grep -qE -- "$2" || fail "$1: message does not match '$2': $out"
    # One error: a first line "dsv4: ...", then (weight-map problems only) one indented line per tensor.
    echo "$out" | head -1 | grep -q '^dsv4: ' || fail "$1: the message does not start with 'dsv4: ': $out"
    if [ "$(echo "$out" | wc -l)" -gt 1 ]; then
        echo "$out" | tail -n +2 | grep -qv '^  ' && fail "$1: continuation lines must be indented: $out"
    fi
    echo "ok  $1: $(echo "$out" | head -1)"
}
fresh() { case_no=$((case_no + 1)); dir="$tmp/case$case_no"; cp -r "$tmp/pristine" "$dir"; }

fresh
python3 -c "import os,sys; p=sys.argv[1]; os.truncate(p, os.path.getsize(p) - 1000)" "$dir/$shard2"
expect_failure "truncated shard" "$shard2"

fresh
python3 - "$dir/$shard1" <<'EOF'
import os, struct, sys
p = sys.argv[1]
raw = bytearray(open(p, "rb").read())
raw[:8] = struct.pack("<Q", os.path.getsize(p) + 4096)  # the header would end past the end of the file
open(p, "wb").write(raw)
EOF
expect_failure "header length past EOF" "$shard1.*(header|length|past|exceeds|end)"

fresh
edit_header "$dir/$shard1" '
b, e = h[tensors[2]]["data_offsets"]
h[tensors[2]]["data_offsets"] = [b - 1, e - 1]   # overlaps the tensor before it
victim = tensors[2]
open(sys.argv[1] + ".victim", "w").write(victim)'
victim=$(cat "$dir/$shard1.victim"); rm "$dir/$shard1.victim"
expect_failure "overlapping offsets" "$shard1.*'$victim'.*overlap"

fresh
edit_header "$dir/$shard1" '
t = "layers.0.attn.wq_a.weight"
h[t]["shape"] = [h[t]["shape"][0] + 1, h[t]["shape"][1]]   # no longer matches its byte range'
expect_failure "wrong byte size" "layers\.0\.attn\.wq_a\.weight"

fresh
edit_header "$dir/$shard1" 'h["layers.0.attn.wq_a.weight"]["dtype"] = "F7_E3M3"'
expect_failure "unknown dtype" "layers\.0\.attn\.wq_a\.weight.*F7_E3M3|F7_E3M3.*layers\.0\.attn\.wq_a\.weight"

fresh
rm "$dir/$shard2"
expect_failure "missing shard" "$shard2"

fresh
python3 - "$dir/config.json" <<'EOF'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["compress_ratios"][1] = 3
json.dump(c, open(p, "w"), indent=2)
EOF
expect_failure "bad compress ratio" "compress_ratios"

fresh
edit_header "$dir/$shard1" '
h["layers.0.attn.wq_a.weight_renamed"] = h.pop("layers.0.attn.wq_a.weight")'
python3 - "$dir/model.safetensors.index.json" <<'EOF'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
j["weight_map"]["layers.0.attn.wq_a.weight_renamed"] = j["weight_map"].pop("layers.0.attn.wq_a.weight")
json.dump(j, open(p, "w"), indent=2)
EOF
expect_failure "missing tensor" "missing layers\.0\.attn\.wq_a\.weight"

fresh
edit_header "$dir/$shard1" '
t = "layers.0.attn.wkv.weight"
h[t]["shape"] = [h[t]["shape"][1], h[t]["shape"][0]]   # same bytes, transposed shape'
expect_failure "mis-shaped tensor" "layers\.0\.attn\.wkv\.weight"

echo "corrupt_checkpoints: ok ($case_no cases)"
