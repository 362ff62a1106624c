#!/usr/bin/env python3
"""Where each kernel's programmatic wait sits in SASS, and which global requests go before it.

For every function whose demangled name matches --kernel (default: every function with a wait): the address of its
first griddepcontrol.wait (SASS `ACQBULK`), the global requests that precede it in the listing (LDG, LDGSTS,
UTMALDG, and UBLKPF / UTMAPF prefetches), and the read-only loads (LDG ... .CONSTANT: ld.global.nc, __ldg) in the
wait's basic block after it — up to the next branch, exit or branch target. ptxas places griddepcontrol.wait ahead
of the ld.global.nc loads of its basic block, so a weight request written before the wait with such a load issues
after it (docs/kernels/cuda-backend.md, "Early weight requests that issued after the wait"): no request before the
wait and read-only loads right after it, in a kernel that triggers its dependents before waiting (`PREEXIT` ahead of
`ACQBULK`: pdl_enter(false), a deferred wait), is the pattern flagged; coherent loads (ld_early16), cp.async, TMA and
bulk prefetches keep their place.

Reads `cuobjdump -sass` text or an object (cuobjdump found as sass_loops.py finds it).

Usage: sass_waits.py FILE [--kernel REGEX]
e.g.   sass_waits.py build/src/backend/cuda/CMakeFiles/dsv4_backend_cuda.dir/kernels/gemm_fp8/gemv_fp8.cu.o
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sass_loops import BRANCH_TARGET, fail, load_functions, opcode  # noqa: E402

REQUESTS = ("LDG", "LDGSTS", "UTMALDG", "UBLKPF", "UTMAPF")
BLOCK_ENDS = ("BRA", "BRX", "JMP", "JMX", "EXIT", "RET", "CALL", "BSYNC", "WARPSYNC")


def waits(instrs):
    """(address of the first ACQBULK or None, requests before it, read-only loads after it in its basic block, whether
    the kernel triggers its dependents (PREEXIT: griddepcontrol.launch_dependents) before it — pdl_enter(false), a
    deferred wait)"""
    targets = set()
    for _, text in instrs:
        m = BRANCH_TARGET.search(text)
        if m:
            targets.add(int(m.group(1), 16))
    at = next((i for i, (_, t) in enumerate(instrs) if opcode(t) == "ACQBULK"), None)
    if at is None:
        return None, 0, 0, False
    before = sum(1 for _, t in instrs[:at] if opcode(t) in REQUESTS)
    deferred = any(opcode(t) == "PREEXIT" for _, t in instrs[:at])
    after = 0
    for address, text in instrs[at + 1:]:
        if address in targets or opcode(text) in BLOCK_ENDS:
            break
        if opcode(text) == "LDG" and ".CONSTANT" in re.sub(r"^@!?U?P[T0-9]+\s+", "", text.strip()).split()[0]:
            after += 1
    return instrs[at][0], before, after, deferred


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="cuobjdump -sass text, or an object / cubin / executable")
    ap.add_argument("--kernel", default="", help="regular expression on the demangled function name (default: all)")
    args = ap.parse_args()
    functions, names, _, pattern = load_functions(args.file, args.kernel)
    rows = []
    for n, instrs in functions:
        if not pattern.search(names[n]):
            continue
        at, before, after, deferred = waits(instrs)
        if at is None and not args.kernel:
            continue
        rows.append((names[n], at, deferred, before, after))
    if not rows:
        fail(f"no function with a programmatic wait matches '{args.kernel}' among {len(functions)}")
    lines = ["| kernel | wait at | deferred | requests before it | read-only loads after it in its block |",
             "|---|---|---|---|---|"]
    for name, at, deferred, before, after in rows:
        where = f"{at:#06x}" if at is not None else "none"
        flag = " (requests meant for before the wait?)" if deferred and after and not before else ""
        lines.append(f"| {name[:100]} | {where} | {'yes' if deferred else 'no'} | {before} | {after}{flag} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
