#!/usr/bin/env python3
"""A model with many external tensors in one data file, and a timing of onnx-safeify on it.

    python tools/bench_external.py make DIR [--tensors 9000] [--floats 9024]
    python tools/bench_external.py time DIR --bin target/release/onnx-safeify [--rounds 7]

`make` writes DIR/many.onnx, a chain of `--tensors` Add nodes, each adding one float32
initializer of `--floats` values, every initializer stored as external data in one file,
DIR/many.onnx.data (9,000 x 9,024 floats: 9,000 tensors, 325 MB). Deterministic.

`time` runs, interleaved in a new order each round, `cp` of the data file (to DIR/cp.data, the
yardstick: what reading and writing the weights once costs), and onnx-safeify with `--target
none` and `--target webgpu` (outputs in DIR, beside the input: their weights stay in the
input's data file, as the README's "Files" says), deleting every output before the next run.
It prints each command's median and minimum wall time and the ratio of the medians to cp's.
The page cache is warm after the first round (every command reads the same file).
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import time


def make(out_dir, tensors, floats):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(12)
    inits, nodes = [], []
    x = "x"
    for i in range(tensors):
        w = f"w{i}"
        t = helper.make_tensor(w, TensorProto.FLOAT, [floats],
                               rng.standard_normal(floats, dtype=np.float32).tobytes(), raw=True)
        inits.append(t)
        y = f"y{i}" if i + 1 < tensors else "y"
        nodes.append(helper.make_node("Add", [x, w], [y], name=f"add{i}"))
        x = y
    graph = helper.make_graph(
        nodes, "many_external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, floats])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, floats])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = os.path.join(out_dir, "many.onnx")
    for p in (path, path + ".data"):
        if os.path.exists(p):
            os.remove(p)
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="many.onnx.data", size_threshold=0)
    size = os.path.getsize(path + ".data")
    print(f"wrote {path} ({os.path.getsize(path)} bytes) and {path}.data "
          f"({size / 1e6:.1f} MB, {tensors} tensors)")


def run_once(cmd, outputs):
    for o in outputs:
        if os.path.exists(o):
            os.remove(o)
    t = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.decode()[-500:]}")
    return wall


def time_all(out_dir, binary, rounds):
    model = os.path.join(out_dir, "many.onnx")
    data = model + ".data"
    cases = {
        "cp": (["cp", data, os.path.join(out_dir, "cp.data")], [os.path.join(out_dir, "cp.data")]),
    }
    for target in ("none", "webgpu"):
        out = os.path.join(out_dir, f"many.{target}.onnx")
        cases[f"--target {target}"] = (
            [binary, model, "--target", target, "-o", out], [out, out + ".data"])
    times = {k: [] for k in cases}
    for _ in range(rounds + 1):  # the first round warms the page cache and is not counted
        order = list(cases)
        random.shuffle(order)
        for k in order:
            times[k].append(run_once(*cases[k]))
    for k in cases:
        for o in cases[k][1]:
            if os.path.exists(o):
                os.remove(o)
    cp = statistics.median(times["cp"][1:])
    print(f"{'command':<18} {'median s':>9} {'min s':>9} {'median / cp':>12}   ({rounds} rounds)")
    for k, v in times.items():
        v = v[1:]
        print(f"{k:<18} {statistics.median(v):>9.3f} {min(v):>9.3f} {statistics.median(v) / cp:>12.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--tensors", type=int, default=9000)
    m.add_argument("--floats", type=int, default=9024)
    t = sub.add_parser("time")
    t.add_argument("dir")
    t.add_argument("--bin", default="target/release/onnx-safeify")
    t.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    if a.cmd == "make":
        make(a.dir, a.tensors, a.floats)
    else:
        time_all(a.dir, a.bin, a.rounds)


if __name__ == "__main__":
    main()
