#!/usr/bin/env bash
# Every kernel of the CUDA backend must begin with pdl_enter() (src/backend/cuda/common/pdl.cuh): decode graphs
# launch each backend kernel programmatically, before the previous kernel has finished, and only the wait in
# pdl_enter() orders it after that kernel. A kernel that touched memory before it would race. pdl_enter(false) defers
# the wait under the rules in pdl.cuh; it is still the first statement. Usage: pdl_enter.sh ROOT
set -euo pipefail
root="${1:?usage: pdl_enter.sh SOURCE_ROOT}"
python3 - "$root" <<'PY'
import pathlib, re, sys
root = pathlib.Path(sys.argv[1]) / "src" / "backend" / "cuda"
kernels, bad = 0, []
for f in sorted(list(root.rglob("*.cu")) + list(root.rglob("*.cuh"))):
    s = f.read_text()
    for m in re.finditer(r"__global__", s):
        line_start = s.rfind("\n", 0, m.start()) + 1
        if s[line_start:m.start()].strip().startswith("//"):
            continue
        j, depth, seen = m.end(), 0, False
        while j < len(s):  # the body's opening brace: the first '{' after the parameter list
            c = s[j]
            if c == "(":
                depth, seen = depth + 1, True
            elif c == ")":
                depth -= 1
            elif c == ";" and depth == 0:
                j = -1  # a declaration
                break
            elif c == "{" and depth == 0 and seen:
                break
            j += 1
        if j < 0:
            continue
        kernels += 1
        first = s[j + 1:].lstrip().split("\n", 1)[0].strip()
        if not re.fullmatch(r"pdl_enter\([^;]*\);", first):
            line = s.count("\n", 0, m.start()) + 1
            bad.append(f"{f.relative_to(root.parents[2])}:{line}: first statement is '{first}'")
if kernels == 0:
    sys.exit(f"no __global__ function found under {root}: wrong source root?")
if bad:
    print("kernels that do not begin with pdl_enter():", *bad, sep="\n  ")
    sys.exit(1)
print(f"{kernels} kernels, each begins with pdl_enter()")
PY
