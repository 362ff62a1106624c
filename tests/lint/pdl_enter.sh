#!/usr/bin/env bash
# Every kernel of the CUDA backend must begin with pdl_enter() (src/backend/cuda/common/pdl.cuh): decode graphs
# launch each backend kernel programmatically, before the previous kernel has finished, and only the wait in
# pdl_enter() orders it after that kernel. A kernel that touched memory before it would race. pdl_enter(false) defers
# the wait under the rules in pdl.cuh; it is still the first statement. Usage: pdl_enter.sh ROOT
set -euo pipefail
root="${1:?usage: pdl_enter.sh SOURCE_ROOT}"
lib="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib" && pwd)"  # the kernel finder, shared with removal-patch
python3 - "$root" "$lib" <<'PY'
import pathlib, re, sys
root = pathlib.Path(sys.argv[1])
sys.path.insert(0, sys.argv[2])
from cuda_kernels import backend_kernels
kernels, bad = 0, []
for f, _, found in backend_kernels(root):
    for k in found:
        kernels += 1
        if not re.fullmatch(r"pdl_enter\([^;]*\);", k.first):
            bad.append(f"{f.relative_to(root)}:{k.line}: first statement is '{k.first}'")
if kernels == 0:
    sys.exit(f"no __global__ function found under {root / 'src/backend/cuda'}: wrong source root?")
if bad:
    print("kernels that do not begin with pdl_enter():", *bad, sep="\n  ")
    sys.exit(1)
print(f"{kernels} kernels, each begins with pdl_enter()")
PY
