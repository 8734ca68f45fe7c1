"""Runs the ONNX backend node tests of the corpus on onnxruntime-web's WebGPU provider (one
headless Chromium for all of them, through run.mjs) and compares every output with ONNX
Runtime's CPU provider on the test's own inputs. Prints one line per disagreement:

    ERROR test_name [placement] message      the WebGPU session or run failed
    WRONG test_name output n/size maxabs=... values outside 1e-3 + 1e-3*|cpu|
    SHAPE test_name output cpu-shape web-shape

and a summary. docs/webgpu-lab.md lists what it found.

    $ONNX_SAFEIFY_VENV/bin/python tools/webgpu/node_tests.py [--corpus DIR] [--filter TEXT]

Needs scripts/setup-runtimes.sh (Chromium, tools/webgpu/node_modules) and the venv's onnx,
onnxruntime and numpy. Tests that ONNX Runtime CPU cannot run, or with string inputs, are left
out (counted in the summary). Takes ~4 minutes for all on 2 cores.
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def load_inputs(test_dir, model):
    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    files = glob.glob(os.path.join(test_dir, "test_data_set_0", "input_*.pb"))
    files.sort(key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0]))
    arrays = [numpy_helper.to_array(onnx.load_tensor(f)) for f in files]
    if len(arrays) != len(names) or any(a.dtype.kind in "OUS" for a in arrays):
        return None
    return dict(zip(names, arrays))


def main():
    cache = os.environ.get("ONNX_SAFEIFY_CACHE", os.path.expanduser("~/.cache/onnx-safeify"))
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=os.environ.get("ONNX_SAFEIFY_CORPUS", os.path.join(cache, "corpus")))
    ap.add_argument("--filter", default="", help="only tests whose folder name contains this")
    args = ap.parse_args()
    models = sorted(glob.glob(os.path.join(args.corpus, "onnx_node_tests_*", "**", "model.onnx"), recursive=True))
    models = [m for m in models if args.filter in os.path.basename(os.path.dirname(m))]
    if not models:
        sys.exit(f"no backend node tests under {args.corpus}")
    ort.set_default_logger_severity(4)
    work = tempfile.mkdtemp(prefix="onnx-safeify-node-tests-")
    try:
        jobs, refs, skipped = [], [], 0
        for path in models:
            try:
                feeds = load_inputs(os.path.dirname(path), onnx.load(path))
                if feeds is None:
                    skipped += 1
                    continue
                ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
            except Exception:  # ONNX Runtime CPU cannot run it: nothing to compare with
                skipped += 1
                continue
            j = len(jobs)
            inputs = []
            for i, (name, array) in enumerate(feeds.items()):
                file = f"j{j}_i{i}.npy"
                np.save(os.path.join(work, file), array)
                inputs.append({"name": name, "file": file})
            jobs.append({"model": path, "runs": [{"inputs": inputs}]})
            refs.append(ref)
        with open(os.path.join(work, "request.json"), "w", encoding="utf-8") as f:
            json.dump({"jobs": jobs, "provider": "webgpu", "timeout_ms": 1800000}, f)
        subprocess.run(["node", os.path.join(HERE, "run.mjs"), work], check=True, timeout=1900)
        with open(os.path.join(work, "result.json"), encoding="utf-8") as f:
            result = json.load(f)
        if not result.get("ok"):
            sys.exit(f"harness failed: {result.get('stage')}: {result.get('error')}")
        per_job = [[] for _ in jobs]
        current = -1
        for line in result["log"]:
            m = re.match(r"=== job (\d+)$", line)
            if m:
                current = int(m.group(1))
            elif current >= 0:
                per_job[current].append(line)
        counts = {"ERROR": 0, "WRONG": 0, "SHAPE": 0}
        for job, rec, ref, log in zip(jobs, result["jobs"], refs, per_job):
            name = os.path.basename(os.path.dirname(job["model"]))
            placement = "; ".join(
                re.sub(r".*\] ", "", line).strip() for line in log if "placed on [" in line)
            if not rec.get("ok"):
                counts["ERROR"] += 1
                print(f"ERROR {name} [{placement}] {' '.join(rec.get('error', '').split())[:300]}")
                continue
            for out, expected in zip(rec["runs"][0]["outputs"], ref):
                got = np.load(os.path.join(work, out["file"]))
                if got.shape != expected.shape:
                    counts["SHAPE"] += 1
                    print(f"SHAPE {name} {out['name']} {expected.shape} {got.shape} [{placement}]")
                    continue
                if expected.dtype.kind in "fc":
                    a, b = expected.astype(np.float64), got.astype(np.float64)
                    with np.errstate(invalid="ignore"):
                        bad = ~((np.abs(a - b) <= 1e-3 + 1e-3 * np.abs(a)) | (np.isnan(a) & np.isnan(b)) | (a == b))
                        worst = float(np.nanmax(np.abs(a - b))) if bad.any() else 0.0
                else:
                    bad, worst = expected != got, None
                if np.any(bad):
                    counts["WRONG"] += 1
                    print(f"WRONG {name} {out['name']} {int(np.sum(bad))}/{expected.size} maxabs={worst} [{placement}]")
        print(f"{len(jobs)} tests run on WebGPU ({skipped} left out), "
              f"{counts['ERROR']} errors, {counts['WRONG']} wrong outputs, {counts['SHAPE']} wrong shapes")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
