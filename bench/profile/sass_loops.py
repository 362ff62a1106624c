#!/usr/bin/env python3
"""The loops of CUDA kernels in SASS: instructions per iteration, by opcode, with registers and stack.

Reads `cuobjdump -sass` text, or an object / cubin / executable (then runs cuobjdump itself: $CUOBJDUMP, PATH,
$CUDA_HOME/bin, /usr/local/cuda/bin). For each function whose demangled name matches --kernel: its instruction
count, registers and stack bytes (cuobjdump -res-usage, objects only), and every loop (a backward branch and the
instructions from its target to it) of at least --min instructions with its depth (the loops around it). The main
loop — the longest of the innermost loops with the most MMA instructions (HMMA, HGMMA, QGMMA, IMMA, DMMA), else
the longest loop — gets a breakdown by opcode (the mnemonic before its first '.', predicate dropped); local-memory
traffic (LDL / STL: spills inside a loop) is counted apart.

This is the count docs/kernels/moe.md and docs/kernels/cuda-backend.md quote ("582 instructions per gate/up
step"): static instructions of one iteration, not executed ones (ncu's counters are for those).

--schedule adds, for the main loop, where its loads sit: each load (LDG, LDS, LDSM) with its destination registers
and its slack, the instructions the warp issues from the load to the first one that reads a destination register
(searched forward, through the back branch into the next iteration for loads issued for it), and a summary. Fewer
instructions per iteration measured slower twice in the MoE decode loop (docs/kernels/moe.md, "The fold by fma"):
the count bounds a loop's time, where its loads wait is what the schedule shows. A read is found by register name
(R8 in `R8`, `R8.reuse`, `R8.64`, `-R8`, `|R8|`); a vector operand named by a lower register (HMMA's A fragment)
is taken to cover the registers after it up to the load's width.

--loop ADDRESS takes the loop that starts there as the main one (e.g. an unrolled loop's inner body, when the loop
around it holds more MMAs).

Usage: sass_loops.py FILE --kernel REGEX [--min N] [--top N] [--schedule] [--loop ADDRESS]
e.g.   sass_loops.py build/src/backend/cuda/CMakeFiles/dsv4_backend_cuda.dir/kernels/moe/moe.cu.o \\
           --kernel 'gate_up_kernel<.*Repacked'
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

MMA_OPCODES = ("HMMA", "HGMMA", "QGMMA", "IMMA", "IGMMA", "DMMA", "BMMA")
INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
RES_FUNCTION = re.compile(r"^\s*Function\s+(\S+?):?\s*$")
RES_VALUES = re.compile(r"REG:(\d+)\s+STACK:(\d+)")
BRANCH_TARGET = re.compile(r"\bBRA(?:\.[A-Z.]+)?\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)")


def fail(message):
    tool = os.path.splitext(os.path.basename(sys.argv[0]))[0]  # sass_loops, or sass_waits importing this
    print(f"{tool}: {message}", file=sys.stderr)
    sys.exit(2)


def find_cuobjdump():
    candidates = [os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")]
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home:
            candidates.append(os.path.join(home, "bin", "cuobjdump"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    fail("cuobjdump not found (set CUOBJDUMP, or put it on PATH; `pip install triton` carries one)")


def is_text(path):
    with open(path, "rb") as f:
        head = f.read(4096)
    return b"\0" not in head


def read_inputs(path):
    """(SASS text, {mangled name: (registers, stack bytes)})"""
    if is_text(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(), {}
    tool = find_cuobjdump()
    sass = subprocess.run([tool, "-sass", path], capture_output=True, text=True)
    if sass.returncode != 0:
        fail(f"{tool} -sass {path} failed: {sass.stderr.strip()}")
    res = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True)
    usage, name = {}, None
    for line in res.stdout.splitlines():
        m = RES_FUNCTION.match(line)
        if m:
            name = m.group(1)
            continue
        m = RES_VALUES.search(line)
        if m and name:
            usage[name] = (int(m.group(1)), int(m.group(2)))
            name = None
    return sass.stdout, usage


def demangle(names):
    if not names or not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def parse_functions(text):
    """[(mangled name, [(address, instruction text)])] in file order"""
    functions = []
    for line in text.splitlines():
        m = FUNCTION.match(line)
        if m:
            functions.append((m.group(1), []))
            continue
        m = INSTR.match(line)
        if m and functions:
            functions[-1][1].append((int(m.group(1), 16), m.group(2)))
    return functions


def load_functions(path, kernel):
    """The SASS functions of a file (cuobjdump -sass text or an object) for a --kernel pattern, with the checks both
    tools make: ([(mangled name, [(address, text)])], {mangled: demangled}, {mangled: (registers, stack)}, pattern)"""
    if not os.path.isfile(path):
        fail(f"{path}: no such file")
    try:
        pattern = re.compile(kernel)
    except re.error as e:
        fail(f"--kernel '{kernel}': {e}")
    text, usage = read_inputs(path)
    functions = parse_functions(text)
    if not functions:
        fail(f"{path}: no SASS functions (is it cuobjdump -sass output or a CUDA object?)")
    return functions, demangle([n for n, _ in functions]), usage, pattern


def opcode(instruction):
    text = re.sub(r"^@!?U?P[T0-9]+\s+", "", instruction.strip())
    return text.split()[0].split(".")[0] if text else ""


def loops_of(instrs):
    """[(first index, last index)] of every backward branch whose target is an instruction of the function"""
    index = {a: i for i, (a, _) in enumerate(instrs)}
    loops = []
    for i, (a, text) in enumerate(instrs):
        m = BRANCH_TARGET.search(text)
        if m:
            target = int(m.group(1), 16)
            if target <= a and target in index:
                loops.append((index[target], i))
    return sorted(set(loops))


def mma_count(body):
    return sum(opcode(t).startswith(MMA_OPCODES) for t in body)


LOAD_OPCODES = ("LDG", "LDS", "LDSM")
REGISTER = re.compile(r"(?<![\w.])[-|!]?R(\d+)\b")


def load_width(text):
    """32-bit registers a load writes: .64 two, .128 four, LDSM .x2 / .x4 two / four, else one"""
    head = re.sub(r"^@!?U?P[T0-9]+\s+", "", text.strip()).split()[0]
    for suffix, n in ((".128", 4), (".64", 2), (".X4", 4), (".X2", 2)):
        if suffix in head:
            return n
    return 1


def operands(text):
    body = re.sub(r"^@!?U?P[T0-9]+\s+", "", text.strip())
    parts = body.split(None, 1)
    return [o.strip() for o in parts[1].split(",")] if len(parts) > 1 else []


def reads(text, regs, vector_span):
    """whether an instruction reads one of `regs` (its source operands: all but the first, except for stores)"""
    ops = operands(text)
    sources = ops if opcode(text).startswith(("ST", "RED", "ATOM")) else ops[1:]
    for operand in sources:
        for m in REGISTER.finditer(operand):
            r = int(m.group(1))
            if any(r <= g < r + vector_span for g in regs):
                return True
    return False


def schedule(body):
    """[(index, opcode, destination, slack or None)] for the loads of one loop iteration, and the first MMA's index"""
    n, rows = len(body), []
    first_mma = next((i for i, t in enumerate(body) if opcode(t).startswith(MMA_OPCODES)), None)
    for i, text in enumerate(body):
        op = opcode(text)
        if op not in LOAD_OPCODES:
            continue
        ops = operands(text)
        m = REGISTER.match(ops[0]) if ops else None
        if not m:
            continue
        width = load_width(text)
        regs = range(int(m.group(1)), int(m.group(1)) + width)
        slack = None
        for d in range(1, n):
            later = body[(i + d) % n]
            # HMMA / QGMMA operands name the first register of a fragment of up to four
            span = 4 if opcode(later).startswith(MMA_OPCODES) else 1
            if reads(later, regs, span):
                slack = d - 1
                break
        rows.append((i, op, f"R{regs[0]}" + (f"..R{regs[-1]}" if width > 1 else ""), slack))
    return rows, first_mma


def schedule_lines(body):
    rows, first_mma = schedule(body)
    if not rows:
        return ["", "main loop schedule: no loads"]
    lines = ["", f"main loop schedule ({len(body)} instructions; first MMA at "
             f"{first_mma if first_mma is not None else '-'}; slack = instructions from a load to its first use):",
             "", "| at | load | registers | slack |", "|---|---|---|---|"]
    for i, op, dest, slack in rows:
        lines.append(f"| {i} | {op} | {dest} | {slack if slack is not None else 'not read'} |")
    for kind in ("LDG", "LDS"):
        mine = [(i, s) for i, op, _, s in rows if op.startswith(kind)]
        slacks = sorted(s for _, s in mine if s is not None)
        if not mine:
            continue
        after = sum(1 for i, _ in mine if first_mma is not None and i > first_mma)
        unread = len(mine) - len(slacks)
        line = f"{kind}: {len(mine)} load{'s' if len(mine) != 1 else ''}"
        if unread:
            line += f" ({unread} not read in the loop)"
        if slacks:
            line += f", slack min {slacks[0]} / median {slacks[len(slacks) // 2]} / max {slacks[-1]}"
        lines.append(line + f", {after} issued after the first MMA")
    return lines


def report(name, shown, instrs, usage, min_len, top, with_schedule=False, loop_at=None):
    lines = [f"## {shown}", ""]
    regs = f", {usage[0]} registers, {usage[1]} bytes of stack" if usage else ""
    lines.append(f"{len(instrs)} instructions{regs}")
    loops = [(b, e) for b, e in loops_of(instrs) if e - b + 1 >= min_len]
    if not loops:
        lines.append(f"no loop of {min_len} or more instructions")
        return lines
    bodies = {(b, e): [t for _, t in instrs[b:e + 1]] for b, e in loops}
    # the main loop: of the loops with the most MMAs, those with no such loop inside them (a loop around the K loop
    # counts its MMAs too), then the longest (a kernel's other paths, e.g. another weight format, may have loops with
    # as many MMAs); with no MMA anywhere the longest loop
    most = max(mma_count(bodies[l]) for l in loops)
    richest = [l for l in loops if mma_count(bodies[l]) == most]
    inner = [l for l in richest if not any(o != l and l[0] <= o[0] and o[1] <= l[1] for o in richest)]
    main = max(inner if most else loops, key=lambda l: l[1] - l[0])
    if loop_at is not None:
        picked = [l for l in loops if instrs[l[0]][0] == loop_at]
        if not picked:
            fail(f"--loop {loop_at:#x}: no loop of {min_len} or more instructions starts there in {shown[:80]}")
        main = max(picked, key=lambda l: l[1] - l[0])
    lines += ["", "| loop (addresses) | depth | instructions | MMA | global loads | shared loads | LDL / STL |",
              "|---|---|---|---|---|---|---|"]
    for b, e in loops:
        body = bodies[(b, e)]
        ops = [opcode(t) for t in body]
        mark = " (main)" if (b, e) == main else ""
        depth = sum(1 for ob, oe in loops if (ob, oe) != (b, e) and ob <= b and e <= oe)
        lines.append(f"| {instrs[b][0]:#06x}-{instrs[e][0]:#06x}{mark} | {depth} | {len(body)} | {mma_count(body)} | "
                     f"{ops.count('LDG')} | {ops.count('LDS') + ops.count('LDSM')} | "
                     f"{ops.count('LDL')} / {ops.count('STL')} |")
    counts = {}
    for t in bodies[main]:
        counts[opcode(t)] = counts.get(opcode(t), 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    lines += ["", f"main loop by opcode ({len(bodies[main])} instructions):", "", "| opcode | count | share |",
              "|---|---|---|"]
    for op, n in ranked[:top]:
        lines.append(f"| {op} | {n} | {100.0 * n / len(bodies[main]):.1f} % |")
    rest = sum(n for _, n in ranked[top:])
    if rest:
        lines.append(f"| (other {len(ranked) - top}) | {rest} | {100.0 * rest / len(bodies[main]):.1f} % |")
    if with_schedule:
        lines += schedule_lines(bodies[main])
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="cuobjdump -sass text, or an object / cubin / executable")
    ap.add_argument("--kernel", required=True, help="regular expression on the demangled function name")
    ap.add_argument("--min", type=int, default=16, help="shortest loop reported (instructions, default 16)")
    ap.add_argument("--top", type=int, default=12, help="opcodes listed for the main loop (default 12)")
    ap.add_argument("--schedule", action="store_true", help="the main loop's loads and their slack to first use")
    ap.add_argument("--loop", type=lambda v: int(v, 16), help="hex address where the loop taken as main starts")
    args = ap.parse_args()
    functions, names, usage, pattern = load_functions(args.file, args.kernel)
    chosen = [(n, i) for n, i in functions if pattern.search(names[n])]
    if not chosen:
        fail(f"no function matches '{args.kernel}' among {len(functions)}: " +
             "; ".join(names[n][:80] for n, _ in functions[:8]))
    out = []
    for n, instrs in chosen:
        out += report(n, names[n], instrs, usage.get(n), args.min, args.top, args.schedule, args.loop) + [""]
    print("\n".join(out).rstrip())


if __name__ == "__main__":
    main()
