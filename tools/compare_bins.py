#!/usr/bin/env python3
"""Does a change alter what onnx-safeify writes? Compile every model on every built-in target
with two binaries (before and after the change) and compare, per compile: exit code, printed
text (stdout), the JSON report and the output model's bytes.

usage: compare_bins.py --before OLD_BIN --after NEW_BIN [--targets rx580,coreml]
         [--every-node-test N] [--max-mb 400] [--jobs 2] PATH...

PATH: .onnx files or folders (searched recursively; a backend node test folder contributes its
model.onnx, one in every N with --every-node-test). Prints every difference and a count; exit 1
when any compile differs. Timings in the printed text ("wrote ... in N ms") are masked.
"""
import argparse
import concurrent.futures as cf
import filecmp
import re
import subprocess
import sys
import tempfile
from pathlib import Path

TIMING = re.compile(rb"in \d+ ms")


def models(paths, every, max_mb):
    found = []
    for p in map(Path, paths):
        files = [p] if p.is_file() else sorted(p.rglob("*.onnx"))
        node_tests = [f for f in files if f.name == "model.onnx"]
        others = [f for f in files if f.name != "model.onnx"]
        found += [f for f in others + node_tests[::every] if f.stat().st_size <= max_mb * 1e6]
    return found


def targets(binary):
    out = subprocess.run([binary, "targets"], capture_output=True, check=True).stdout
    return [line.split()[0] for line in out.decode().splitlines() if line.strip()]


def run(binary, model, target, folder):
    out, rep = folder / "out.onnx", folder / "report.json"
    p = subprocess.run([binary, str(model), "--target", target, "-o", str(out), "--report",
                        str(rep)], capture_output=True)
    return p.returncode, TIMING.sub(b"in N ms", p.stdout), out, rep


def compare(before, after, model, target):
    """Both binaries write to the same paths (reports and printed text name them), one after
    the other; the first one's files are moved aside."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ra = run(before, model, target, tmp)
        kept = []
        for f in (ra[2], ra[3]):
            kept.append(f.rename(tmp / ("before-" + f.name)) if f.exists() else None)
        rb = run(after, model, target, tmp)
        diffs = []
        if ra[0] != rb[0]:
            diffs.append(f"exit {ra[0]} -> {rb[0]}")
        if ra[1] != rb[1]:
            diffs.append("printed text")
        for what, x, y in (("output", kept[0], rb[2]), ("report", kept[1], rb[3])):
            if (x is not None) != y.exists():
                diffs.append(f"{what} written: {x is not None} -> {y.exists()}")
            elif x is not None and not filecmp.cmp(x, y, shallow=False):
                diffs.append(f"{what} bytes")
        return model, target, diffs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--targets")
    ap.add_argument("--every-node-test", type=int, default=1)
    ap.add_argument("--max-mb", type=float, default=400)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    ts = args.targets.split(",") if args.targets else targets(args.after)
    ms = models(args.paths, args.every_node_test, args.max_mb)
    jobs = [(m, t) for m in ms for t in ts]
    bad = 0
    with cf.ThreadPoolExecutor(args.jobs) as ex:
        for model, target, diffs in ex.map(lambda j: compare(args.before, args.after, *j), jobs):
            if diffs:
                bad += 1
                print(f"DIFF {model} --target {target}: {', '.join(diffs)}", flush=True)
    print(f"{len(ms)} models x {len(ts)} targets = {len(jobs)} compiles; {bad} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
