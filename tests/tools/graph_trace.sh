#!/usr/bin/env bash
# bench/profile/graph_trace.py on a synthetic trace (tests/data/profile/trace_synthetic.csv and its .edges: two
# launches of a 4-kernel graph whose head is a copy node, a branch beside a GEMV and a join; kernel records carry
# the instantiated nodes' ids, the edges the originals'): the critical path's charges worked out by hand, one launch
# against the other (--against), the path cut into segments (--segments), the fallback without edges, and the errors.
# Usage: graph_trace.sh SOURCE_ROOT
set -euo pipefail
root="${1:?usage: graph_trace.sh SOURCE_ROOT}"
tool="$root/bench/profile/graph_trace.py"
csv="$root/tests/data/profile/trace_synthetic.csv"
fail() { echo "FAIL: $*" >&2; exit 1; }
# whole outputs into variables first: a reader that stops early (head) would end the writer with a broken pipe
out="$(python3 "$tool" "$csv" --last 2)"
grep -q '^graph 7: 4 kernels per launch, the last 2 launches (critical path' <<<"$out" || fail "summary: $(head -1 <<<"$out")"
# launch 1 takes the GEMV into the join (ends 6.0 > 5.0 µs), launch 2 the branch (6.5 > 6.0)
grep -q '^| sm90_embedding_kernel | 1 | 1 | 2.0 | 33.3 % | 2.00 | 2.00 |$' <<<"$out" || fail "head kernel row"
grep -q '^| sm90_fp8_gemv_kernel | 1 | 0.5 | 1.5 | 25.0 % | 3.00 | 3.50 |$' <<<"$out" || fail "GEMV row"
grep -q '^| sm90_compressor_decode_fused_kernel | 1 | 0.5 | 1.8 | 29.2 % | 3.50 | 2.75 |$' <<<"$out" || fail "branch row"
grep -q '^| join_kernel | 1 | 1 | 0.8 | 12.5 % | 0.75 | 1.50 |$' <<<"$out" || fail "join row"
grep -q 'warmup_kernel' <<<"$out" && fail "a kernel launched outside the graph was counted"
order="$(python3 "$tool" "$csv" --last 2 --order --templates)"
[ "$(grep -c '^| [0-9]' <<<"$order")" = 3 ] || fail "--order: the path should hold 3 kernels"
grep -q '^| 1 | sm90_compressor_decode_fused_kernel<__nv_bfloat16, 512> | 2.00 | 5.50 | 3.50 |$' <<<"$order" ||
    fail "--order with --templates: $order"
all="$(python3 "$tool" "$csv" --last 2 --order --all)"
grep -q '^| 1 | sm90_fp8_gemv_kernel | 1.50 | 5.00 | - |$' <<<"$all" || fail "--order --all: $all"
# without the edges file: each kernel charged what its end added to the latest end (launch 2: 2, 3, 0.5, 0.5 µs)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp "$csv" "$tmp/t.csv"
plain="$(python3 "$tool" "$tmp/t.csv" --last 1 --order)"
grep -q 'no edges file' <<<"$plain" || fail "fallback not announced"
grep -q "^| 1 | sm90_fp8_gemv_kernel | 1.50 | 5.00 | 3.00 |$" <<<"$plain" || fail "fallback charges: $plain"
# --against: launch 2 (the branch on the path) against a base holding launch 1 only (the GEMV on the path)
grep -v '^200,' "$csv" > "$tmp/base.csv"
cp "$csv.edges" "$tmp/base.csv.edges"
vs="$(python3 "$tool" "$csv" --last 1 --against "$tmp/base.csv")"
grep -q 'span median 0.006 -> 0.006 ms' <<<"$vs" || fail "--against summary: $vs"
[ "$(grep '^| ' <<<"$vs" | sed -n 2p)" = '| sm90_compressor_decode_fused_kernel | 0 -> 1 | 0.0 -> 3.5 | +3.5 |' ] ||
    fail "--against: the largest change first: $vs"
grep -q '^| sm90_fp8_gemv_kernel | 1 -> 0 | 3.0 -> 0.0 | -3.0 |$' <<<"$vs" || fail "--against GEMV row: $vs"
# --segments: each launch's path cut before the join: launch 1 [embedding, GEMV] 2.0 + 3.0, launch 2 [embedding,
# branch] 2.0 + 3.5, and [join] in both (1.0, 0.5: median 0.75)
seg="$(python3 "$tool" "$csv" --last 2 --segments join_kernel)"
grep -q 'the path cut before each join_kernel: 2 segments per launch in 3 kinds' <<<"$seg" || fail "--segments: $seg"
grep -q '^| A | 0.5 | 5.0 | 2.5 | 41.7 % | embedding 2.0, fp8_gemv 3.0 |$' <<<"$seg" || fail "--segments kind A: $seg"
grep -q '^| C | 0.5 | 5.5 | 2.8 | 45.8 % | embedding 2.0, compressor_decode_fused 3.5 |$' <<<"$seg" ||
    fail "--segments kind C: $seg"
grep -q '^| B | 1 | 0.8 | 0.8 | 12.5 % | join 0.8 |$' <<<"$seg" || fail "--segments kind B: $seg"
[ "$(grep '^| [A-C] ' <<<"$seg" | cut -d'|' -f2 | tr -d ' \n')" = CAB ] || fail "--segments: largest first: $seg"
set +e
msg="$(python3 "$tool" "$csv" --last 2 --segments no_such_kernel 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'no kernel named no_such_kernel on the critical path' <<<"$msg" || fail "--segments unknown: rc $rc, '$msg'"
msg="$(python3 "$tool" "$csv" --last 1 --against "$tmp/t.csv" 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'were not charged the same way' <<<"$msg" || fail "--against without edges: rc $rc, '$msg'"
msg="$(python3 "$tool" "$csv" --last 3 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'ran 2 launches, fewer than --last 3' <<<"$msg" || fail "--last 3: rc $rc, '$msg'"
msg="$(python3 "$tool" "$root/README.md" 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'no kernel-trace CSV header' <<<"$msg" || fail "non-CSV input: rc $rc, '$msg'"
msg="$(python3 "$tool" "$csv" --graph 9 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'graph 9 was not launched' <<<"$msg" || fail "--graph 9: rc $rc, '$msg'"
echo "graph_trace: critical path, comparison, segments, fallback and errors as expected"
