#!/usr/bin/env bash
# bench/profile/sass_loops.py on a synthetic SASS listing (tests/data/profile/sass_synthetic.txt: two functions, the
# second with a loop inside a loop, a shorter loop beside them with as many MMAs, a spill load, predicated branches and
# the self-branch that ends every function): the function filter, loops with their depth, the main loop (the longest
# innermost loop with the most MMAs), opcodes without predicates, --min, --schedule's load slack, --loop, and the
# clear failures.
# Usage: sass_loops.sh SOURCE_ROOT
set -euo pipefail
root="${1:?usage: sass_loops.sh SOURCE_ROOT}"
tool="$root/bench/profile/sass_loops.py"
sass="$root/tests/data/profile/sass_synthetic.txt"
fail() { echo "FAIL: $*" >&2; exit 1; }
out="$(python3 "$tool" "$sass" --kernel 'mma_kernel' --min 4)"
[ "$(sed -n 1p <<<"$out")" = "## mma_kernel(float*, int)" ] || fail "heading: $(sed -n 1p <<<"$out")"
grep -q '^21 instructions$' <<<"$out" || fail "instruction count"
grep -q '^| 0x0010-0x00e0 | 0 | 14 | 2 | 1 | 0 | 1 / 0 |$' <<<"$out" || fail "outer loop: $(grep '0x0010' <<<"$out")"
grep -q '^| 0x0020-0x00b0 (main) | 1 | 10 | 2 | 1 | 0 | 1 / 0 |$' <<<"$out" || fail "inner loop: $(grep '0x0020' <<<"$out")"
grep -q '^| 0x00f0-0x0120 | 0 | 4 | 2 | 0 | 0 | 0 / 0 |$' <<<"$out" || fail "loop beside: $(grep '0x00f0' <<<"$out")"
grep -q '^main loop by opcode (10 instructions):$' <<<"$out" || fail "main loop"
grep -q '^| LOP3 | 2 | 20.0 % |$' <<<"$out" || fail "predicate not stripped from the opcode"
grep -q '^| HMMA | 2 | 20.0 % |$' <<<"$out" || fail "MMA opcode"
! grep -q 'other_kernel' <<<"$out" || fail "a function that does not match was reported"
# --min 1 also reports the one-instruction self-branch at the end
[ "$(python3 "$tool" "$sass" --kernel mma_kernel --min 1 | grep -c '^| 0x')" = 4 ] || fail "--min 1"
[ "$(python3 "$tool" "$sass" --kernel other_kernel | sed -n 3,4p)" = "2 instructions
no loop of 16 or more instructions" ] || fail "a function without loops: $(python3 "$tool" "$sass" --kernel other_kernel)"
set +e
# --schedule (tests/data/profile/sass_schedule_synthetic.txt): slack to the first read by any operand register, by
# a vector operand named by a lower register (HMMA's R8 covers R10), through the back branch, and loads never read
sched="$root/tests/data/profile/sass_schedule_synthetic.txt"
out="$(python3 "$tool" "$sched" --kernel sched_kernel --min 4 --schedule)"
grep -q '^main loop schedule (11 instructions; first MMA at 6;' <<<"$out" || fail "schedule heading: $out"
grep -q '^| 0 | LDG | R4..R7 | 1 |$' <<<"$out" || fail "slack to a read of R5"
grep -q '^| 1 | LDS | R20..R21 | 2 |$' <<<"$out" || fail "slack to R21.reuse"
grep -q '^| 3 | LDG | R10..R11 | 2 |$' <<<"$out" || fail "HMMA vector operand"
grep -q '^| 7 | LDG | R30 | not read |$' <<<"$out" || fail "a load read only after the loop"
grep -q '^| 8 | LDG | R31 | 7 |$' <<<"$out" || fail "slack through the back branch"
grep -q '^LDG: 4 loads (1 not read in the loop), slack min 1 / median 2 / max 7, 2 issued after the first MMA$' \
    <<<"$out" || fail "LDG summary: $(grep '^LDG' <<<"$out")"
grep -q '^LDS: 1 load, slack min 2 / median 2 / max 2, 0 issued after the first MMA$' <<<"$out" || fail "LDS summary"
! grep -q 'main loop schedule' <<<"$(python3 "$tool" "$sched" --kernel sched_kernel --min 4)" ||
    fail "schedule printed without --schedule"
# --loop picks the main loop by its start address (here the inner loop is main anyway; the outer is taken)
grep -q '^| 0x0010-0x00e0 (main) |' <<<"$(python3 "$tool" "$sass" --kernel mma_kernel --min 4 --loop 10)" ||
    fail "--loop 10"
set +e
msg="$(python3 "$tool" "$sass" --kernel mma_kernel --min 4 --loop 30 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q -- '--loop 0x30: no loop of 4 or more instructions starts there' <<<"$msg" ||
    fail "--loop without a loop: rc $rc, '$msg'"
set -e
set +e
msg="$(python3 "$tool" "$sass" --kernel nothing_here 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q "no function matches 'nothing_here' among 2" <<<"$msg" || fail "no match: rc $rc, '$msg'"
msg="$(python3 "$tool" "$root/tests/data/profile/none.txt" --kernel x 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'no such file' <<<"$msg" || fail "missing file: rc $rc, '$msg'"
msg="$(python3 "$tool" "$root/tests/data/profile/ncu_source_synthetic.csv" --kernel x 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'no SASS functions' <<<"$msg" || fail "not SASS: rc $rc, '$msg'"
msg="$(python3 "$tool" "$sass" --kernel '(' 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q "kernel '('" <<<"$msg" || fail "bad regex: rc $rc, '$msg'"
echo "sass_loops: loops with depth, the longest innermost MMA loop as main, opcodes without predicates, load slack," \
     "--loop, clear failures"
