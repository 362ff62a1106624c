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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=25, help="lines to print (default 25)")
    args = ap.parse_args()
    header, body = read_rows(args.csv)
    src = header.index("Source")
    col = sample_column(header)
    addr = header.index("Address") if "Address" in header else None
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
        lines.append((s, row[addr] if addr is not None else "", row[src].strip(), why))
    total = sum(x[0] for x in lines)
    if total <= 0:
        fail(f"{args.csv}: no stall samples in column '{header[col]}'")
    print(f"{len(lines)} SASS lines, {total:.0f} samples ({header[col]})\n")
    print("| address | samples | share | SASS | main reasons |")
    print("|---|---|---|---|---|")
    for s, a, sass, why in sorted(lines, key=lambda x: -x[0])[:args.top]:
        reason = ", ".join(f"{re.sub(r'^.*?stall_?', '', n, flags=re.I) or n} {v:.0f}" for v, n in why)
        print(f"| {a} | {s:.0f} | {100 * s / total:.1f} % | `{sass}` | {reason} |")
    per_op = collections.Counter()
    for s, _, sass, _ in lines:
        per_op[opcode(sass)] += s
    print("\n| opcode | samples | share |")
    print("|---|---|---|")
    for op, s in per_op.most_common(15):
        print(f"| {op} | {s:.0f} | {100 * s / total:.1f} % |")


if __name__ == "__main__":
    main()
