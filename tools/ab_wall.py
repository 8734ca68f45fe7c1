#!/usr/bin/env python3
"""Wall time of one command run with several builds, in random order: an A/B benchmark.

usage: ab_wall.py [--rounds N] [--seed S] 'COMMAND with {bin} and {out}' BIN...

Each round runs COMMAND once per BIN, in a new (seeded) order, with {bin} replaced by the
binary and {out} by an output path that is deleted before and after each run (a compile
that replaces an existing file costs more: see NOTES.md). Prints each binary's median, lower
quartile and minimum wall time. Nothing is asserted: a benchmark, not a test.

Why random order: the command run first in a fixed order was measured several milliseconds
slower than the same binary run later (a 60 ms compile), so a fixed order charges that to
whichever build comes first. For memory figures and baselines (cp, Python onnx) use
tools/bench_roundtrip.py --shuffle.

example:
    ab_wall.py --rounds 50 '{bin} model.onnx --target rx580 -o {out}' old/onnx-safeify new/onnx-safeify
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", help="shell command; {bin} and {out} are replaced")
    ap.add_argument("bins", nargs="+", help="the builds to compare")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if "{bin}" not in args.command:
        ap.error("the command must name the binary as {bin}")
    names = [f"{i}:{os.path.basename(b)}" for i, b in enumerate(args.bins)]
    times = {n: [] for n in names}
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="ab_wall.") as tmp:
        out = os.path.join(tmp, "out.onnx")
        for _ in range(args.rounds):
            order = list(zip(names, args.bins))
            rng.shuffle(order)
            for name, b in order:
                if os.path.exists(out):
                    os.unlink(out)
                cmd = args.command.replace("{bin}", b).replace("{out}", out)
                t = time.perf_counter()
                r = subprocess.run(cmd, shell=True, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
                times[name].append(time.perf_counter() - t)
                if r.returncode not in (0, 1):
                    sys.exit(f"{name}: exit {r.returncode}: {cmd}")
        if os.path.exists(out):
            os.unlink(out)
    for name in names:
        v = sorted(times[name])
        print(f"{name:28s} median {statistics.median(v) * 1000:8.1f} ms   "
              f"p25 {v[len(v) // 4] * 1000:8.1f}   min {v[0] * 1000:8.1f}   ({len(v)} runs)")


if __name__ == "__main__":
    main()
