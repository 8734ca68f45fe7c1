#!/usr/bin/env python3
"""Time a rewritten model against its original on ONNX Runtime's CPU provider.

Both sessions get the same random input; runs are interleaved and the median and minimum of
``--runs`` are reported, with the ratio rewritten/original. A benchmark, not a test.

Usage::

    python tools/bench_ort.py ORIGINAL REWRITTEN [--shape x=1,3,640,640] [--runs 20]
        [--threads 1] [--opt disable|basic|extended|all] [--config KEY=VALUE ...]
"""

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort

LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def session(path, args, config):
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[args.opt]
    so.intra_op_num_threads = args.threads
    for kv in config:
        k, v = kv.split("=", 1)
        so.add_session_config_entry(k, v)
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("original")
    ap.add_argument("rewritten")
    ap.add_argument("--shape", action="append", default=[], help="INPUT=d0,d1,... (symbolic dims)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--opt", choices=LEVELS, default="all")
    ap.add_argument("--config", action="append", default=[], help="session config for the rewritten model")
    args = ap.parse_args()
    shapes = {k: [int(d) for d in v.split(",")] for k, v in (s.split("=", 1) for s in args.shape)}
    a = session(args.original, args, [])
    b = session(args.rewritten, args, args.config)
    rng = np.random.default_rng(0)
    feeds = {}
    for i in a.get_inputs():
        shape = shapes.get(i.name) or [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    a.run(None, feeds)
    b.run(None, feeds)
    ta, tb = [], []
    for _ in range(args.runs):
        for s, t in ((a, ta), (b, tb)):
            start = time.perf_counter()
            s.run(None, feeds)
            t.append(time.perf_counter() - start)
    ma, mb = statistics.median(ta), statistics.median(tb)
    print(f"original  median {ma*1e3:8.2f} ms  min {min(ta)*1e3:8.2f} ms")
    print(f"rewritten median {mb*1e3:8.2f} ms  min {min(tb)*1e3:8.2f} ms")
    print(f"ratio (rewritten/original): median {mb/ma:.2f}x  min {min(tb)/min(ta):.2f}x")


if __name__ == "__main__":
    main()
