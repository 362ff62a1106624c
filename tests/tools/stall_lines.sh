#!/usr/bin/env bash
# bench/profile/stall_lines.py on a synthetic source page (tests/data/profile/ncu_source_synthetic.csv: the layout
# the tool reads, a kernel-name line before the header, thousands separators): ranking, shares, reasons, opcode sums
# and the clear failures; --phases on tests/data/profile/ncu_source_phases.csv.
# Usage: stall_lines.sh SOURCE_ROOT
set -euo pipefail
root="${1:?usage: stall_lines.sh SOURCE_ROOT}"
tool="$root/bench/profile/stall_lines.py"
csv="$root/tests/data/profile/ncu_source_synthetic.csv"
fail() { echo "FAIL: $*" >&2; exit 1; }
out="$(python3 "$tool" "$csv" --top 2)"
[ "$(sed -n 1p <<<"$out")" = "5 SASS lines, 1000 samples (Warp Stall Sampling (All Samples))" ] ||
    fail "summary: $(sed -n 1p <<<"$out")"
first="$(grep -m1 '^| 00007f00' <<<"$out")"
[ "$first" = '| 00007f00 00000020 | 600 | 60.0 % | `@!P0 LOP3.LUT R6, R4, 0x77777777, RZ, 0xc0, !PT` | long_sb 580, wait 15, barrier 5 |' ] ||
    fail "top line: $first"
[ "$(grep -c '^| 00007f00' <<<"$out")" = 2 ] || fail "--top 2 printed $(grep -c '^| 00007f00' <<<"$out") lines"
grep -q '^| BAR | 240 | 24.0 % |$' <<<"$out" || fail "opcode sums"
grep -q '^| LOP3 | 600 | 60.0 % |$' <<<"$out" || fail "predicate not stripped from the opcode"
# --phases: cut after the instruction that follows each block or cluster barrier (its barrier samples stay with
# the phase that waited); tests/data/profile/ncu_source_phases.csv has one of each
phases="$(python3 "$tool" "$root/tests/data/profile/ncu_source_phases.csv" --top 1 --phases)"
grep -q '^| 0 | 0-3 | `BAR.SYNC.DEFER_BLOCKING 0x0` | 405 | 81.0 % | 2112 | `UMOV UR10, 0x400` (300) |$' <<<"$phases" ||
    fail "first phase: $(grep '^| 0 |' <<<"$phases")"
grep -q '^| 1 | 4-6 | `UCGABAR_WAIT` | 95 | 19.0 % | 576 | `UCGABAR_WAIT` (50) |$' <<<"$phases" ||
    fail "second phase: $(grep '^| 1 |' <<<"$phases")"
[ "$(grep -c '^| [0-9] | [0-9]' <<<"$phases")" = 3 ] || fail "phase count: $(grep -c '^| [0-9] | [0-9]' <<<"$phases")"
grep -q '^| 2 | 7-7 | `EXIT` | 0 | 0.0 % | 32 |' <<<"$phases" || fail "last phase: $(grep '^| 2 |' <<<"$phases")"
[ -z "$(python3 "$tool" "$csv" | grep '^| phase |')" ] || fail "phases printed without --phases"
set +e
msg="$(python3 "$tool" "$root/README.md" 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'no ncu source-page CSV header' <<<"$msg" || fail "non-CSV input: rc $rc, '$msg'"
msg="$(printf '"#","Address","Source","Instructions Executed"\n"1","0","EXIT","1"\n' | python3 "$tool" /dev/stdin 2>&1)"
rc=$?
[ $rc = 2 ] && grep -q "no 'Warp Stall Sampling' column" <<<"$msg" || fail "no sample column: rc $rc, '$msg'"
echo "stall_lines: ranking, reasons, opcode sums, phases and errors as expected"
