#!/usr/bin/env python3
"""Per-kernel table of one decode step from an Nsight Compute CSV.

Input: the output of `ncu --csv --metrics gpu__time_duration.sum <dsv4 bench ... --no-graphs>` (program output
lines before the CSV header are skipped). A decode step starts at each launch of the embedding kernel; the table
covers the last step by default (`--step N` picks another, counting from 0; `--launches` lists the step's kernels
in launch order instead). Kernel names are shortened to the function name without namespace, template arguments
or parameters, so the instances of one kernel template add up in one row.

Prints markdown: kernel, launches, total µs, share of the step, mean µs per launch, grid × block of the first launch.
Exit status 2 with a one-line message on an input it cannot read (no CSV header, no duration metric, no step).
"""
import argparse
import csv
import os
import re
import sys

METRIC = "gpu__time_duration.sum"
STEP_START = "sm90_embedding_kernel"
UNIT_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def short_name(name):
    """'void dsv4::cuda::(anonymous)::foo_kernel<float, 2>(const float *, int)' -> 'foo_kernel'."""
    base = name.split("(", 1)[0] if not name.startswith("(") else name
    depth, out = 0, []
    for c in base:  # drop template arguments, nested or not
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0:
            out.append(c)
    base = "".join(out).strip()
    base = re.sub(r"^(void|static|__global__)\s+", "", base)
    return base.split("::")[-1].strip() or name


def read_launches(path):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu CSV header (a line starting with \"ID\"): was ncu run with --csv?")
    launches = []
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != METRIC:
            continue
        unit = row.get("Metric Unit", "ns")
        if unit not in UNIT_TO_US:
            raise ValueError(f"{path}: unknown unit {unit!r} for {METRIC}")
        value = float(row["Metric Value"].replace(",", "")) * UNIT_TO_US[unit]
        launches.append((row["Kernel Name"], value, row.get("Grid Size", ""), row.get("Block Size", "")))
    if not launches:
        raise ValueError(f"{path}: no {METRIC} values: run ncu with --metrics {METRIC}")
    return launches


def split_steps(launches):
    starts = [i for i, (name, _, _, _) in enumerate(launches) if STEP_START in name]
    if not starts:
        raise ValueError(f"no {STEP_START} launch: the profile holds no forward step")
    return [launches[a:b] for a, b in zip(starts, starts[1:] + [len(launches)])]


def table(step):
    total = sum(t for _, t, _, _ in step)
    rows = {}
    for name, t, grid, block in step:
        r = rows.setdefault(short_name(name), [0, 0.0, f"{grid} × {block}"])
        r[0] += 1
        r[1] += t
    out = [f"{len(step)} launches, {total:.1f} µs of kernel time", "",
           "| kernel | launches | µs | share | µs per launch | first grid × block |", "|---|---|---|---|---|---|"]
    for k, (n, t, shape) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        out.append(f"| {k} | {n} | {t:.1f} | {100.0 * t / total:.1f} % | {t / n:.1f} | {shape} |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv", help="ncu --csv output of a dsv4 bench run")
    p.add_argument("--step", type=int, default=-1, help="which step (0 = first, default: the last)")
    p.add_argument("--launches", action="store_true", help="list the step's launches in order instead")
    a = p.parse_args()
    try:
        steps = split_steps(read_launches(a.csv))
        if not -len(steps) <= a.step < len(steps):
            raise ValueError(f"--step {a.step}: the profile holds {len(steps)} steps")
    except (OSError, ValueError, KeyError) as e:
        print(f"kernel_table: {e}", file=sys.stderr)
        return 2
    step = steps[a.step]
    try:
        if a.launches:
            for name, t, grid, block in step:
                print(f"{t:9.1f} µs  {short_name(name)}  grid {grid} block {block}")
        else:
            print(table(step))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (e.g. | head): not an error of this tool
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
