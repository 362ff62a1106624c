#!/usr/bin/env bash
# scripts/removal-patch on a throw-away tree: the named kernels (plain, deferred wait, a template with launch bounds
# on two lines) get pdl_wait + return after their first statement and nothing else changes; the patch applies with
# git apply; a commented-out __global__ and a declaration are not kernels; an unknown name or a kernel that does not
# begin with pdl_enter is refused with a message; the pdl_enter lint, which shares the kernel finder
# (scripts/lib/cuda_kernels.py), flags that kernel; a kernel of the real tree is found.
# Usage: removal_patch.sh SOURCE_ROOT
set -euo pipefail
root="${1:?usage: removal_patch.sh SOURCE_ROOT}"
fail() { echo "FAIL: $*" >&2; exit 1; }
t="$(mktemp -d)"
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/src/backend/cuda/kernels/k"
k="$t/src/backend/cuda/kernels/k/k.cuh"
cat > "$k" <<'CU'
// __global__ void commented_kernel(int* p) {
__global__ void declared_kernel(int* p);
__global__ void plain_kernel(int* p) {
    pdl_enter();
    p[0] = 1;
}
template <int N>
__global__ void __launch_bounds__(N, 2)
    deferred_kernel(const int* __restrict__ w, int* p) {
    pdl_enter(false);
    int v = w[0];
    pdl_wait();
    p[0] = v;
}
__global__ void other_kernel(int* p) {
    pdl_enter();
    p[1] = 2;
}
__global__ void late_kernel(int* p) {
    p[2] = 3;
}
CU
"$root/scripts/removal-patch" --root "$t" plain_kernel deferred_kernel > "$t/p.patch" || fail "patch not made"
(cd "$t" && git apply "$t/p.patch") || fail "the patch does not apply"
cat > "$t/want.cuh" <<'CU'
// __global__ void commented_kernel(int* p) {
__global__ void declared_kernel(int* p);
__global__ void plain_kernel(int* p) {
    pdl_enter();
    pdl_wait();  // removal-patch
    return;
    p[0] = 1;
}
template <int N>
__global__ void __launch_bounds__(N, 2)
    deferred_kernel(const int* __restrict__ w, int* p) {
    pdl_enter(false);
    pdl_wait();  // removal-patch
    return;
    int v = w[0];
    pdl_wait();
    p[0] = v;
}
__global__ void other_kernel(int* p) {
    pdl_enter();
    p[1] = 2;
}
__global__ void late_kernel(int* p) {
    p[2] = 3;
}
CU
diff "$t/want.cuh" "$k" >&2 || fail "unexpected patched text"
if "$root/scripts/removal-patch" --root "$t" no_such_kernel > /dev/null 2> "$t/err"; then fail "unknown name accepted"; fi
grep -q "no kernel named no_such_kernel" "$t/err" || fail "unclear message: $(cat "$t/err")"
if "$root/scripts/removal-patch" --root "$t" late_kernel > /dev/null 2> "$t/err"; then fail "late_kernel accepted"; fi
grep -q "late_kernel does not begin with pdl_enter" "$t/err" || fail "unclear message: $(cat "$t/err")"
"$root/scripts/removal-patch" --root "$root" sm90_moe_gate_up_kernel | grep -q '^+    return;' ||
    fail "the tree's MoE kernel was not found"
if bash "$root/tests/lint/pdl_enter.sh" "$t" > "$t/lint" 2>&1; then fail "the lint passed late_kernel"; fi
grep -q "k.cuh:23: first statement is 'p\[2\] = 3;'" "$t/lint" || fail "lint message: $(cat "$t/lint")"
echo "removal-patch: ok"
