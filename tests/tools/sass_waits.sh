#!/usr/bin/env bash
# bench/profile/sass_waits.py on a synthetic SASS listing (tests/data/profile/sass_waits_synthetic.txt: requests
# before a deferred wait, a deferred wait ptxas placed ahead of read-only loads of its block with a branch after them,
# a bulk prefetch before a wait, a plain wait (no trigger before it) followed by read-only loads, a function without a
# wait): the requests counted before the wait, the read-only loads counted up to the block's end and flagged only
# after a deferred wait, functions without a wait left out unless asked for, clear failures.
# Usage: sass_waits.sh SOURCE_ROOT
set -euo pipefail
root="${1:?usage: sass_waits.sh SOURCE_ROOT}"
tool="$root/bench/profile/sass_waits.py"
sass="$root/tests/data/profile/sass_waits_synthetic.txt"
fail() { echo "FAIL: $*" >&2; exit 1; }
out="$(python3 "$tool" "$sass")"
grep -q '^| early_request(uint4 const\*, uint4\*) | 0x0040 | yes | 2 | 0 |$' <<<"$out" ||
    fail "requests before the wait: $out"
grep -q '^| hoisted_wait(uint4 const\*, uint4\*) | 0x0020 | yes | 0 | 2 (requests meant for before the wait?) |$' \
    <<<"$out" || fail "read-only loads after the wait, up to the branch: $out"
grep -q '^| prefetch_first(uint4 const\*, uint4\*) | 0x0010 | no | 1 | 1 |$' <<<"$out" || fail "a bulk prefetch: $out"
grep -q '^| plain_wait(float const\*, float\*) | 0x0000 | no | 0 | 2 |$' <<<"$out" || fail "a plain wait: $out"
! grep -q 'no_wait' <<<"$out" || fail "a function without a wait was listed"
grep -q '^| no_wait(float\*) | none | no | 0 | 0 |$' <<<"$(python3 "$tool" "$sass" --kernel no_wait)" ||
    fail "--kernel names a function without a wait"
set +e
msg="$(python3 "$tool" "$sass" --kernel zzz 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q "^sass_waits: no function with a programmatic wait matches 'zzz' among 5$" <<<"$msg" ||
    fail "no match: rc $rc, '$msg'"
msg="$(python3 "$tool" "$root/no/such/file" 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'no such file' <<<"$msg" || fail "missing file: rc $rc, '$msg'"
set -e
echo "sass_waits: requests before the wait, read-only loads after it in its block, deferred waits, failures"
