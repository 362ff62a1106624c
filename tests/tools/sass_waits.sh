#!/usr/bin/env bash
# bench/profile/sass_waits.py on a synthetic SASS listing (tests/data/profile/sass_waits_synthetic.txt: requests
# before the wait, a wait ptxas placed ahead of read-only loads of its block with a branch after them, a bulk
# prefetch before the wait, a function without one): the requests counted before the wait, the read-only loads
# counted up to the block's end and flagged, functions without a wait left out unless asked for, clear failures.
# Usage: sass_waits.sh SOURCE_ROOT
set -euo pipefail
root="${1:?usage: sass_waits.sh SOURCE_ROOT}"
tool="$root/bench/profile/sass_waits.py"
sass="$root/tests/data/profile/sass_waits_synthetic.txt"
fail() { echo "FAIL: $*" >&2; exit 1; }
out="$(python3 "$tool" "$sass")"
grep -q '^| early_request(uint4 const\*, uint4\*) | 0x0040 | 2 | 0 |$' <<<"$out" || fail "requests before the wait: $out"
grep -q '^| hoisted_wait(uint4 const\*, uint4\*) | 0x0020 | 0 | 2 (requests meant for before the wait?) |$' \
    <<<"$out" || fail "read-only loads after the wait, up to the branch: $out"
grep -q '^| prefetch_first(uint4 const\*, uint4\*) | 0x0010 | 1 | 1 |$' <<<"$out" || fail "a bulk prefetch: $out"
! grep -q 'no_wait' <<<"$out" || fail "a function without a wait was listed"
grep -q '^| no_wait(float\*) | none | 0 | 0 |$' <<<"$(python3 "$tool" "$sass" --kernel no_wait)" ||
    fail "--kernel names a function without a wait"
set +e
msg="$(python3 "$tool" "$sass" --kernel zzz 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q "^sass_waits: no function with a programmatic wait matches 'zzz' among 4$" <<<"$msg" ||
    fail "no match: rc $rc, '$msg'"
msg="$(python3 "$tool" "$root/no/such/file" 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'no such file' <<<"$msg" || fail "missing file: rc $rc, '$msg'"
set -e
echo "sass_waits: requests before the wait, read-only loads after it in its block, functions without one, failures"
