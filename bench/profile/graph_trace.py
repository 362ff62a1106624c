#!/usr/bin/env python3
"""Where a replayed CUDA graph's time goes, from a kernel trace (bench/profile/kernel_trace.cpp's CSV and its edges).

The critical path of one launch: from the kernel that ends last, step back to the predecessor (through the graph's
edges; copies, memsets and other kernel-less nodes are passed through) that ended last, until a kernel without one.
Each kernel on the path is charged its end minus its path predecessor's end (the first: end minus its start) — the
edge and the kernel's own time. The charges add up to the launch's span from the first kernel's start; kernels off
the path (on branches that finished in time) cost the launch nothing. Without the edges file each kernel is charged
instead what its end added to the latest end so far (exact on a plain chain; on branches it splits the chain's time).
With programmatic launch a kernel starts while its predecessor runs, so "duration" (end - start) includes its wait.

Usage: graph_trace.py TRACE.csv [--graph ID] [--last N] [--templates] [--order [--all] [--first K] [--count N]]
                      [--against BASE.csv] [--segments KERNEL]
  --graph ID   the graph to read (default: the one whose launches hold the most kernels)
  --last N     the last N launches of it (default 5; the earlier ones include first-replay costs)
  --templates  one row per template instance instead of one per kernel function
  --order      the last launch's critical path in order: offsets from its start, charged time
  --all        with --order: every kernel of the launch in end order, "-" where off the path
  --first K, --count N   with --order: path kernels K .. K + N - 1 (default 0, all)
  --against BASE.csv   per kernel, the charged time in BASE's largest graph and in this one, largest change first
  --segments KERNEL    the critical path cut before each call of KERNEL (e.g. sm90_hc_collapse_kernel: one segment
                       per sub-block): segments of the same kernels in the same order form a kind; per kind its
                       count, its median time and its path with each position's median charge
"""
import argparse
import csv
import statistics
import sys
from collections import defaultdict


def fail(msg):
    print(f"graph_trace: {msg}", file=sys.stderr)
    sys.exit(2)


def short_name(name, templates):
    """Function name without return type, arguments and namespaces; template arguments kept only if asked."""
    s = name.strip()
    if s.endswith(")"):  # drop the argument list: the last balanced parentheses
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i]
                break
    for prefix in ("void ", "__global__ "):
        if s.startswith(prefix):
            s = s[len(prefix):]
    args = ""
    if s.endswith(">"):  # split off the template arguments: the last balanced angle brackets
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(s[i], 0)
            if depth == 0:
                s, args = s[:i], s[i:]
                break
    s = s.split("::")[-1]
    if templates and args:
        args = args.replace("dsv4::cuda::", "").replace("(anonymous namespace)::", "")
        return s + args
    return s


def read(path):
    rows = []
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            need = {"correlation", "graph", "node", "stream", "start_ns", "end_ns", "name"}
            if not reader.fieldnames or not need.issubset(reader.fieldnames):
                fail(f"{path}: no kernel-trace CSV header (columns {sorted(need)})")
            for r in reader:
                try:
                    rows.append({"corr": int(r["correlation"]), "graph": int(r["graph"]), "node": int(r["node"]),
                                 "stream": int(r["stream"]), "start": int(r["start_ns"]), "end": int(r["end_ns"]),
                                 "name": r["name"]})
                except (TypeError, ValueError):
                    fail(f"{path}: line {reader.line_num}: not a kernel record")
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    return rows


def read_edges(path):
    """Predecessors of each node (original ids), and the original of each instantiated node; None without a file."""
    try:
        f = open(path, newline="")
    except OSError:
        return None
    preds, original = defaultdict(set), {}
    with f:
        reader = csv.DictReader(f)
        if reader.fieldnames != ["kind", "a", "b", "type"]:
            fail(f"{path}: no edges CSV header (kind,a,b,type)")
        for r in reader:
            try:
                a, b = int(r["a"]), int(r["b"])
            except (TypeError, ValueError):
                fail(f"{path}: line {reader.line_num}: not an edge record")
            if r["kind"] == "edge":
                preds[b].add(a)
            elif r["kind"] == "clone":
                original[a] = b
    return preds, original


def frontier_charges(kernels):
    """(kernel, charge ns) in end order, each charged what its end added to the latest end so far; the span."""
    t0 = min(k["start"] for k in kernels)
    frontier, out = t0, []
    for k in sorted(kernels, key=lambda k: (k["end"], k["start"])):
        out.append((k, max(0, k["end"] - frontier)))
        frontier = max(frontier, k["end"])
    return out, frontier - t0


def path_charges(kernels, edges):
    """(kernel, charge ns) along the critical path, first kernel first; the span. Kernels off the path: absent."""
    preds, original = edges
    by_node = {original.get(k["node"], k["node"]): k for k in kernels}
    t0 = min(k["start"] for k in kernels)
    last = max(kernels, key=lambda k: k["end"])
    node, path = original.get(last["node"], last["node"]), []
    while True:
        k = by_node[node]
        # kernel predecessors, through nodes that ran no kernel (copies, memsets, empty nodes)
        found, stack, seen = [], list(preds.get(node, ())), set()
        while stack:
            p = stack.pop()
            if p in seen:
                continue
            seen.add(p)
            if p in by_node:
                found.append(p)
            else:
                stack.extend(preds.get(p, ()))
        if not found:
            path.append((k, k["end"] - min(k["start"], k["end"])))
            break
        prev = max(found, key=lambda p: by_node[p]["end"])
        path.append((k, max(0, k["end"] - by_node[prev]["end"])))
        node = prev
    path.reverse()
    head = path[0][0]
    path[0] = (head, head["end"] - t0)  # the path's first kernel: from the launch's first start
    return path, last["end"] - t0


def load(path, graph, last):
    """The last `last` launches of `graph` (default: the largest) in trace `path`, the charge function, its name."""
    launches = defaultdict(list)  # (graph, correlation) -> kernels
    for r in read(path):
        if r["graph"]:
            launches[(r["graph"], r["corr"])].append(r)
    if not launches:
        fail(f"{path}: no kernel ran from a CUDA graph")
    if graph is None:
        graph = max(launches.items(), key=lambda kv: (len(kv[1]), kv[0][0]))[0][0]
    mine = sorted((ks for (g, _), ks in launches.items() if g == graph), key=lambda ks: min(k["start"] for k in ks))
    if not mine:
        fail(f"graph {graph} was not launched (graphs: {sorted({g for g, _ in launches})})")
    if len(mine) < last:
        fail(f"graph {graph} ran {len(mine)} launches, fewer than --last {last}")
    edges = read_edges(path + ".edges")
    if edges is not None and not edges[0]:
        edges = None
    charges = (lambda ks: path_charges(ks, edges)) if edges else frontier_charges
    how = "critical path through the graph's edges" if edges else "no edges file: each kernel charged what its end added"
    return graph, mine[-last:], charges, how


def summary(mine, charges, templates):
    """Per kernel name over the launches: (calls, calls charged, charge ns, duration ns) means; the spans in ns."""
    spans, per_launch = [], []
    for ks in mine:
        rows, span = charges(ks)
        spans.append(span)
        acc = defaultdict(lambda: [0, 0, 0, 0])  # name -> calls, calls charged, charge, duration
        for k in ks:
            s = acc[short_name(k["name"], templates)]
            s[0] += 1
            s[3] += k["end"] - k["start"]
        for k, c in rows:
            s = acc[short_name(k["name"], templates)]
            s[1] += 1
            s[2] += c
        per_launch.append(acc)
    names = set().union(*per_launch)
    table = {n: tuple(statistics.mean(p[n][i] for p in per_launch) for i in range(4)) for n in names}
    return table, spans


def compact(name):
    """A kernel's short name without the backend's sm90_ prefix and _kernel suffix, for one-line paths."""
    name = name[len("sm90_"):] if name.startswith("sm90_") else name
    return name[:-len("_kernel")] if name.endswith("_kernel") else name


def segments(mine, charges, cut, templates):
    """Each launch's critical path cut before every kernel named `cut`; per kind (the segment's kernel names in path
    order) the segments' charge lists, kinds in order of first appearance."""
    kinds = {}
    for ks in mine:
        rows, _ = charges(ks)
        seg = []
        for k, c in rows:
            n = short_name(k["name"], templates)
            if n == cut and seg:
                kinds.setdefault(tuple(x for x, _ in seg), []).append([y for _, y in seg])
                seg = []
            seg.append((n, c))
        if seg:
            kinds.setdefault(tuple(x for x, _ in seg), []).append([y for _, y in seg])
    return kinds


def print_segments(graph, mine, charges, how, cut, templates):
    kinds = segments(mine, charges, cut, templates)
    if not any(cut in sig for sig in kinds):
        fail(f"no kernel named {cut} on the critical path of graph {graph}")
    spans = [charges(ks)[1] for ks in mine]
    total = statistics.mean(spans)
    count = sum(len(s) for s in kinds.values()) / len(mine)
    print(f"graph {graph}, the last {len(mine)} launches ({how}): the path cut before each {cut}: "
          f"{count:g} segments per launch in {len(kinds)} kinds; span median {statistics.median(spans) / 1e6:.3f} ms")
    print("| kind | segments per launch | µs per segment (median) | µs per launch | share | its path (µs charged, "
          "median per position) |")
    print("|---|---|---|---|---|---|")
    labels = {sig: chr(ord("A") + i) if i < 26 else f"K{i}" for i, sig in enumerate(kinds)}
    rows = [(sum(map(sum, segs)), sig, segs) for sig, segs in kinds.items()]
    for charge, sig, segs in sorted(rows, key=lambda r: (-r[0], labels[r[1]])):
        per_pos = [statistics.median(s[i] for s in segs) / 1e3 for i in range(len(sig))]
        path = ", ".join(f"{compact(n)} {c:.1f}" for n, c in zip(sig, per_pos))
        print(f"| {labels[sig]} | {len(segs) / len(mine):g} | {statistics.median(map(sum, segs)) / 1e3:.1f} | "
              f"{charge / len(mine) / 1e3:.1f} | {100 * charge / len(mine) / total:.1f} % | {path} |")


def main():
    ap = argparse.ArgumentParser(add_help=True, description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--graph", type=int)
    ap.add_argument("--last", type=int, default=5)
    ap.add_argument("--templates", action="store_true")
    ap.add_argument("--order", action="store_true")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--count", type=int)
    ap.add_argument("--against")
    ap.add_argument("--segments", metavar="KERNEL")
    a = ap.parse_args()
    if a.last < 1:
        fail("--last must be at least 1")
    graph, mine, charges, how = load(a.trace, a.graph, a.last)

    if a.segments:
        print_segments(graph, mine, charges, how, a.segments, a.templates)
        return
    if a.order:
        rows, span = charges(mine[-1])
        t0 = min(k["start"] for k in mine[-1])
        if a.all:
            charged = {id(k): c for k, c in rows}
            rows = [(k, charged.get(id(k))) for k in sorted(mine[-1], key=lambda k: (k["end"], k["start"]))]
        end = len(rows) if a.count is None else a.first + a.count
        on_path = sum(c is not None for _, c in rows)
        print(f"graph {graph}, its last launch: {len(mine[-1])} kernels, {on_path} charged ({how}), "
              f"span {span / 1e3:.1f} µs")
        print("| # | kernel | start µs | end µs | charged µs |")
        print("|---|---|---|---|---|")
        for i, (k, c) in enumerate(rows[a.first:end], start=a.first):
            cs = "-" if c is None else f"{c / 1e3:.2f}"
            print(f"| {i} | {short_name(k['name'], a.templates)} | {(k['start'] - t0) / 1e3:.2f} | "
                  f"{(k['end'] - t0) / 1e3:.2f} | {cs} |")
        return

    table, spans = summary(mine, charges, a.templates)
    kernels = statistics.median(len(ks) for ks in mine)
    if a.against:
        _, base_mine, base_charges, base_how = load(a.against, None, a.last)
        if base_how != how:
            fail(f"{a.against} and {a.trace} were not charged the same way ({base_how} / {how})")
        base, base_spans = summary(base_mine, base_charges, a.templates)
        print(f"{a.trace} against {a.against} ({how}), the last {a.last} launches of each: span median "
              f"{statistics.median(base_spans) / 1e6:.3f} -> {statistics.median(spans) / 1e6:.3f} ms")
        print("| kernel | charged calls | charged µs per launch | change µs |")
        print("|---|---|---|---|")
        zero = (0, 0, 0, 0)
        rows = [(table.get(n, zero)[2] - base.get(n, zero)[2], n) for n in set(table) | set(base)]
        for delta, n in sorted(rows, key=lambda r: (-abs(r[0]), r[1])):
            b, t = base.get(n, zero), table.get(n, zero)
            print(f"| {n} | {b[1]:g} -> {t[1]:g} | {b[2] / 1e3:.1f} -> {t[2] / 1e3:.1f} | {delta / 1e3:+.1f} |")
        return
    print(f"graph {graph}: {kernels:.0f} kernels per launch, the last {len(mine)} launches ({how}); span median "
          f"{statistics.median(spans) / 1e6:.3f} ms (min {min(spans) / 1e6:.3f}, max {max(spans) / 1e6:.3f})")
    print("| kernel | calls | charged calls | charged µs per launch | share | charged µs per charged call | "
          "duration µs per call |")
    print("|---|---|---|---|---|---|---|")
    total = statistics.mean(spans)
    for n, (calls, on_path, charge, duration) in sorted(table.items(), key=lambda kv: (-kv[1][2], kv[0])):
        per = f"{charge / 1e3 / on_path:.2f}" if on_path else "-"
        print(f"| {n} | {calls:g} | {on_path:g} | {charge / 1e3:.1f} | {100 * charge / total:.1f} % | {per} | "
              f"{duration / 1e3 / calls:.2f} |")


if __name__ == "__main__":
    main()
