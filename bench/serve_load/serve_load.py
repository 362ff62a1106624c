#!/usr/bin/env python3
"""Bounded load against a running `dsv4 serve` on 127.0.0.1: N streaming chat requests from C concurrent clients.
Reports request throughput, generated tokens/s, time to first token and inter-token latency percentiles (measured
client-side from SSE arrival times; ITL = gaps between content-bearing chunks, one chunk per token or fewer).

  python3 bench/serve_load/serve_load.py --port 8080 --requests 64 --concurrency 8 --max-tokens 32 [--json]

Standard library only; refuses hosts other than 127.0.0.1/localhost so it never loads someone else's server.
"""
import argparse
import concurrent.futures
import http.client
import json
import statistics
import sys
import time


def percentile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def one_request(args, i):
    body = {"model": "bench", "stream": True, "max_tokens": args.max_tokens, "seed": i, "temperature": 0.8,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Request %d: %s" % (i, args.prompt)}]}
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key
    conn = http.client.HTTPConnection(args.host, args.port, timeout=args.timeout)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=headers)
    r = conn.getresponse()
    if r.status != 200:
        return {"error": "%d %s" % (r.status, r.read()[:200])}
    arrivals, tokens = [], 0
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        for ch in chunk.get("choices", []):
            d = ch.get("delta", {})
            if d.get("content") or d.get("reasoning_content") or d.get("tool_calls"):
                arrivals.append(time.perf_counter())
    conn.close()
    end = time.perf_counter()
    return {"ttft": (arrivals[0] - t0) if arrivals else None, "itl": [b - a for a, b in zip(arrivals, arrivals[1:])],
            "tokens": tokens, "latency": end - t0}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--prompt", default="Write a short poem about the sea.")
    p.add_argument("--api-key", default="")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = p.parse_args()
    if args.host not in ("127.0.0.1", "localhost"):
        sys.exit("serve_load: only 127.0.0.1 / localhost are allowed")
    if not (1 <= args.requests <= 10000 and 1 <= args.concurrency <= 512):
        sys.exit("serve_load: --requests must be in 1..10000 and --concurrency in 1..512")

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        results = list(pool.map(lambda i: one_request(args, i), range(args.requests)))
    wall = time.perf_counter() - t0
    ok = [r for r in results if "error" not in r]
    errors = [r["error"] for r in results if "error" in r]
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    itl = [x for r in ok for x in r["itl"]]
    tokens = sum(r["tokens"] for r in ok)
    out = {
        "requests": args.requests, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
        "ok": len(ok), "errors": len(errors), "wall_s": wall,
        "requests_per_s": len(ok) / wall, "generated_tokens": tokens, "generated_tokens_per_s": tokens / wall,
        "ttft_ms": {q: 1000 * percentile(ttft, v) for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))},
        "itl_ms": {q: 1000 * percentile(itl, v) for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))},
        "latency_s_mean": statistics.mean(r["latency"] for r in ok) if ok else float("nan"),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print("requests %d (ok %d, errors %d), concurrency %d, max_tokens %d, wall %.2f s"
              % (args.requests, len(ok), len(errors), args.concurrency, args.max_tokens, wall))
        print("throughput: %.2f req/s, %.1f generated tok/s" % (out["requests_per_s"], out["generated_tokens_per_s"]))
        print("TTFT ms: p50 %.1f  p90 %.1f  p99 %.1f" % tuple(out["ttft_ms"].values()))
        print("ITL  ms: p50 %.1f  p90 %.1f  p99 %.1f" % tuple(out["itl_ms"].values()))
        for e in errors[:5]:
            print("error:", e)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
