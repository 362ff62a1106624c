#!/usr/bin/env bash
# bench/profile/kernel_table.py on a recorded profile (tests/data/profile: the last two decode steps of a 2-layer
# V4-Flash bench at batch 1 on an H200): the step split, the per-kernel sums and the clear failures.
# Usage: kernel_table.sh SOURCE_ROOT
set -euo pipefail
root="${1:?usage: kernel_table.sh SOURCE_ROOT}"
tool="$root/bench/profile/kernel_table.py"
csv="$root/tests/data/profile/ncu_decode_b1.csv"
fail() { echo "FAIL: $*" >&2; exit 1; }
out="$(python3 "$tool" "$csv")"
grep -q '^91 launches, 1076.7 µs of kernel time$' <<<"$out" || fail "last step summary: $(head -1 <<<"$out")"
grep -q '^| sm90_wo_a_kernel | 2 | 147.6 | 13.7 % | 73.8 |' <<<"$out" || fail "wo_a row missing or wrong"
# every instance of a template adds up in one row: 14 FP8 GEMM launches
grep -q '^| sm90_fp8_gemm_block128_kernel | 14 | 123.8 |' <<<"$out" || fail "template instances not merged"
# whole outputs into variables first: a reader that stops early (head) would end the writer with a broken pipe
step0="$(python3 "$tool" "$csv" --step 0)"
[ "$(sed -n 1p <<<"$step0")" = "91 launches, 1077.9 µs of kernel time" ] || fail "first step: $(sed -n 1p <<<"$step0")"
list="$(python3 "$tool" "$csv" --launches)"
[ "$(wc -l <<<"$list")" = 91 ] || fail "--launches listed $(wc -l <<<"$list") kernels"
[ "$(sed -n 1p <<<"$list" | awk '{print $3}')" = sm90_embedding_kernel ] || fail "step order"
set +e
msg="$(python3 "$tool" "$csv" --step 2 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'holds 2 steps' <<<"$msg" || fail "--step 2: rc $rc, '$msg'"
msg="$(python3 "$tool" "$root/README.md" 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'no ncu CSV header' <<<"$msg" || fail "non-CSV input: rc $rc, '$msg'"
echo "kernel_table: steps, sums, template merge and errors as expected"
