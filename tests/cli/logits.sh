#!/usr/bin/env bash
# dsv4 logits: the output file's format, and one clear message with exit code 1 for every bad input.
# Usage: logits.sh DSV4_BINARY SOURCE_DIR
set -euo pipefail
dsv4="$1"
src="$2"
model="$src/tests/data/official_ops/ds"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A good run: '<f4' [T, vocab] in C order, and --chunk 1 (pure decode) writes the same bytes in f32 numerics.
"$dsv4" logits -m "$model" --tokens 5,6,7 --out "$tmp/a.npy" --precision f32 -t 2 2>/dev/null || fail "good run"
printf '5\n 6,\t7' > "$tmp/tokens.txt"
"$dsv4" logits -m "$model" --tokens-file "$tmp/tokens.txt" --out "$tmp/b.npy" --precision f32 --chunk 1 -t 2 \
    2>/dev/null || fail "tokens file with commas and whitespace"
"$dsv4" logits -m "$model" --tokens 5,6,7 --out "$tmp/c.npy" --precision f32 --last -t 2 2>/dev/null \
    || fail "--last"
python3 - "$tmp/a.npy" "$tmp/b.npy" "$tmp/c.npy" <<'PY' || fail "npy format, chunked logits or --last"
import sys, numpy as np
a, b, c = np.load(sys.argv[1]), np.load(sys.argv[2]), np.load(sys.argv[3])
assert a.dtype == np.dtype("<f4") and a.shape == (3, 512) and a.flags["C_CONTIGUOUS"], (a.dtype, a.shape)
assert np.isfinite(a).all()
rel = np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(a.astype(np.float64))
assert rel <= 1e-5, rel
assert c.shape == (1, 512) and np.array_equal(c[0], a[-1]), (c.shape, "--last is not the last row")
PY

# expect_failure PATTERN ARGS...: exit code 1 and PATTERN (grep -E) in stderr.
expect_failure() {
    local pattern="$1"; shift
    set +e
    "$dsv4" logits "$@" 2>"$tmp/err" >/dev/null
    local rc=$?
    set -e
    [ "$rc" -eq 1 ] || { cat "$tmp/err" >&2; fail "exit code $rc (want 1) for: $*"; }
    grep -Eq "$pattern" "$tmp/err" || { cat "$tmp/err" >&2; fail "message lacks /$pattern/ for: $*"; }
}
expect_failure "outside the vocabulary" -m "$model" --tokens 1,512 --out "$tmp/x.npy"
expect_failure "'abc' is not a token id" -m "$model" --tokens 1,abc --out "$tmp/x.npy"
printf ' ,\n' > "$tmp/empty.txt"
expect_failure "token list is empty" -m "$model" --tokens-file "$tmp/empty.txt" --out "$tmp/x.npy"
expect_failure "cannot open" -m "$model" --tokens-file "$tmp/missing.txt" --out "$tmp/x.npy"
expect_failure "exactly one of --tokens and --tokens-file" -m "$model" --out "$tmp/x.npy"
expect_failure "exceed the session's max context of 2" -m "$model" --tokens 1,2,3 -c 2 --out "$tmp/x.npy"
# --backend cuda runs where a supported GPU is present; elsewhere it is one clear error pointing at the CPU backend.
set +e
"$dsv4" logits -m "$model" --tokens 1,2,3 --backend cuda --out "$tmp/cuda.npy" 2>"$tmp/err" >/dev/null
rc=$?
set -e
if [ "$rc" -eq 0 ]; then
    [ -s "$tmp/cuda.npy" ] || fail "--backend cuda succeeded without writing its output"
else
    [ "$rc" -eq 1 ] || { cat "$tmp/err" >&2; fail "--backend cuda: exit code $rc (want 0 or 1)"; }
    grep -Eq "backend cpu" "$tmp/err" || { cat "$tmp/err" >&2; fail "--backend cuda: message lacks a way out"; }
fi
expect_failure "config.json|not found|No such" -m "$tmp/nothing" --tokens 1 --out "$tmp/x.npy"
echo "logits CLI: ok"
