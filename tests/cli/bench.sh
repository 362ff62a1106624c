#!/usr/bin/env bash
# dsv4 bench: --help, bad flags, and either a one-layer smoke run (a supported GPU present: the table's header,
# a row, the graph counters) or one clear message with exit code 1 (no GPU, no driver, or a build without CUDA).
# Usage: bench.sh DSV4_BINARY SOURCE_DIR
set -euo pipefail
dsv4="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$dsv4" bench --help | grep -q -- "--layers" || fail "--help lists the flags"
set +e
"$dsv4" bench --preset tiny >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "an unknown preset is refused"
set +e
"$dsv4" bench --top-p 1.5 >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "a top-p above 1 is refused (exit code $rc)"
grep -q "top_p" "$tmp/err" || { cat "$tmp/err"; fail "the refusal names top_p"; }

set +e
"$dsv4" bench --layers 1 --batch 1 --context 4096 --steps 2 --warmup 1 --prefill 256 --top-p 0.9 \
    --repetition-penalty 1.2 >"$tmp/out" 2>"$tmp/err"
rc=$?
set -e
if [ "$rc" -eq 0 ]; then
    grep -q "| batch | context | step ms" "$tmp/out" || { cat "$tmp/out"; fail "no table header"; }
    grep -Eq "^\| 1 \| 4096 \| [0-9.]+ \|" "$tmp/out" || { cat "$tmp/out"; fail "no timed row"; }
    grep -q "^prefill 256 tokens" "$tmp/out" || { cat "$tmp/out"; fail "no prefill line"; }
    grep -q "decode graphs: 1 captured" "$tmp/out" || { cat "$tmp/out"; fail "decode steps did not replay a graph"; }
    grep -q "top-p 0.9" "$tmp/out" || { cat "$tmp/out"; fail "the draws' parameters are not printed"; }
else
    [ "$rc" -eq 1 ] || { cat "$tmp/err"; fail "exit code $rc (want 0 or 1)"; }
    grep -Eq "needs a supported GPU|without CUDA" "$tmp/err" || { cat "$tmp/err"; fail "message lacks the reason"; }
fi
