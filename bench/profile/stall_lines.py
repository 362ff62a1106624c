#!/usr/bin/env python3
"""Where a kernel's warps wait: the SASS lines with the most stall samples, from Nsight Compute's source page.

Input: `ncu -i REPORT --page source --csv --print-source sass` of a report taken with the SourceCounters section
(scripts/profile-stalls makes both). Lines before the CSV header (the kernel name) are skipped; the header is the
first row with a "Source" column. Samples are read from the first column named "Warp Stall Sampling (All Samples)"
(or, failing that, the first whose name holds "Stall Sampling"); any other numeric column whose name holds "stall"
is a per-reason count, and each printed line names its three largest.

Prints markdown: the top N lines (address, samples, share of all samples, SASS, main reasons), then the samples
summed per opcode (the first word of the SASS without its predicate and modifiers). Exit status 2 with a one-line
message on an input it cannot read (no header, no sample column, no samples).

--phases adds a table of the kernel cut into phases at its synchronisation points, in address order: a phase ends
with a block barrier (BAR.SYNC, BAR.RED, ...) or a cluster barrier wait (UCGABAR_WAIT); mbarrier and warp-group
waits are not cuts. The instruction after the barrier belongs to the phase that waited, since a warp stalled at a
barrier is sampled on the instruction it is waiting to issue. Per phase: its line range, the barrier that ends it,
samples and share, instructions executed (when the page has the column) and its most sampled line. For one-CTA
chains (batch-1 decode kernels) this is where the time goes phase by phase; address order is the execution order
only for straight-line code, so read loops and branches with the SASS at hand.
"""
import argparse
import collections
import csv
import re
import sys


def fail(msg):
    print(f"stall_lines: {msg}", file=sys.stderr)
    sys.exit(2)


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_rows(path):
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    for i, row in enumerate(rows):
        if "Source" in row:
            return row, rows[i + 1:]
    fail(f"{path}: no ncu source-page CSV header (a row with a 'Source' column)")


def sample_column(header):
    for i, name in enumerate(header):
        if name.strip() == "Warp Stall Sampling (All Samples)":
            return i
    for i, name in enumerate(header):
        if "Stall Sampling" in name:
            return i
    fail("no 'Warp Stall Sampling' column: take the report with --section SourceCounters (columns: " +
         ", ".join(header) + ")")


def opcode(sass):
    """'@!P0 LDG.E.128.CONSTANT R4, [R2.64]' -> 'LDG'."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def is_barrier(sass):
    op = sass.split()
    if op and op[0].startswith("@"):
        op = op[1:]
    return bool(op) and (op[0].startswith("BAR.") or op[0] == "UCGABAR_WAIT")


def print_phases(lines, total):
    """lines: (samples, address, sass, reasons, executed) in address order."""
    cuts = [i + 2 for i, x in enumerate(lines) if is_barrier(x[2])]  # the waiting instruction stays in the phase
    bounds = [0] + [c for c in cuts if c < len(lines)] + [len(lines)]
    bounds = sorted(set(bounds))
    print("\n| phase | lines | ends at | samples | share | instructions | most sampled line |")
    print("|---|---|---|---|---|---|---|")
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        part = lines[a:b]
        smp = sum(x[0] for x in part)
        ins = sum(x[4] or 0 for x in part)
        end = next((x[2] for x in reversed(part) if is_barrier(x[2])), part[-1][2])
        top = max(part, key=lambda x: x[0])
        print(f"| {k} | {a}-{b - 1} | `{end}` | {smp:.0f} | {100 * smp / total:.1f} % | {ins:.0f} | "
              f"`{top[2]}` ({top[0]:.0f}) |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=25, help="lines to print (default 25)")
    ap.add_argument("--phases", action="store_true", help="also cut the kernel into phases at its barriers")
    args = ap.parse_args()
    header, body = read_rows(args.csv)
    src = header.index("Source")
    col = sample_column(header)
    addr = header.index("Address") if "Address" in header else None
    executed = header.index("Instructions Executed") if "Instructions Executed" in header else None
    reasons = [i for i, n in enumerate(header) if "stall" in n.lower() and i != col and "Sampling" not in n]
    lines = []
    for row in body:
        if len(row) <= max(src, col):
            continue
        s = number(row[col])
        if s is None:
            continue
        why = [(number(row[i]) or 0.0, header[i]) for i in reasons if i < len(row)]
        why = sorted((w for w in why if w[0] > 0), reverse=True)[:3]
        ins = number(row[executed]) if executed is not None and executed < len(row) else None
        lines.append((s, row[addr] if addr is not None else "", row[src].strip(), why, ins))
    total = sum(x[0] for x in lines)
    if total <= 0:
        fail(f"{args.csv}: no stall samples in column '{header[col]}'")
    print(f"{len(lines)} SASS lines, {total:.0f} samples ({header[col]})\n")
    print("| address | samples | share | SASS | main reasons |")
    print("|---|---|---|---|---|")
    for s, a, sass, why, _ in sorted(lines, key=lambda x: -x[0])[:args.top]:
        reason = ", ".join(f"{re.sub(r'^.*?stall_?', '', n, flags=re.I) or n} {v:.0f}" for v, n in why)
        print(f"| {a} | {s:.0f} | {100 * s / total:.1f} % | `{sass}` | {reason} |")
    per_op = collections.Counter()
    for s, _, sass, _, _ in lines:
        per_op[opcode(sass)] += s
    print("\n| opcode | samples | share |")
    print("|---|---|---|")
    for op, s in per_op.most_common(15):
        print(f"| {op} | {s:.0f} | {100 * s / total:.1f} % |")
    if args.phases:
        print_phases(lines, total)


if __name__ == "__main__":
    main()
