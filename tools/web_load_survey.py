#!/usr/bin/env python3
"""Does each target output load and run on onnxruntime-web wherever its original does?

For each model: compile it for each target (`onnx-safeify MODEL --target T -o OUT --report R`),
then have onnxruntime-web (tools/webgpu/run.mjs, headless Chromium, WebGPU provider on the
software adapter) create a session for the original and for each output and run it once on the
same inputs, the output's session with the runtime settings its target asks for (session
config entries, the report's `runtime`). Inputs: MODEL.inputs.npz where it exists; otherwise
float N(0, 1), integer inputs 0 (1 for a name with "mask"), booleans false, a symbolic
dimension 1 on axis 0 and 64 elsewhere, as `verify` (`--dim` to change). They only need to be
valid for both: the original is the control.

Usage: tools/web_load_survey.py --bin target/release/onnx-safeify --targets rx580,webgpu
           [--batch 8] [--opt all] [--dim 64] [--json OUT] MODEL...
Prints one line per model and target: "ok", or the stage and error where the output fails, or
"original fails" (not counted against the output). Exit 0 when every output runs wherever its
original does, 1 when one does not, 2 on a harness failure.
Run it with the venv's Python (numpy, onnx).
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "webgpu" / "run.mjs"
NUMPY = {
    onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64, onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.BOOL: np.bool_,
    onnx.TensorProto.INT16: np.int16, onnx.TensorProto.UINT16: np.uint16,
}


def inputs_of(model_path, folder, tag, dim):
    """Writes one .npy per graph input (not an initializer) and returns the run's input list."""
    npz = model_path.with_suffix(".inputs.npz")
    if npz.exists():
        out = []
        with np.load(npz) as z:
            for k, name in enumerate(z.files):
                f = f"{tag}_i{k}.npy"
                np.save(folder / f, z[name])
                out.append({"name": name, "file": f})
        return out
    m = onnx.load(str(model_path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    rng = np.random.default_rng(0)
    out = []
    for k, vi in enumerate(x for x in m.graph.input if x.name not in inits):
        tt = vi.type.tensor_type
        dt = NUMPY.get(tt.elem_type)
        if dt is None:
            raise ValueError(f"input {vi.name}: element type {tt.elem_type} not handled")
        shape = []
        for ax, d in enumerate(tt.shape.dim):
            shape.append(d.dim_value if d.HasField("dim_value") and d.dim_value > 0
                         else (1 if ax == 0 else dim))
        if np.issubdtype(dt, np.floating):
            a = rng.standard_normal(shape).astype(dt)
        elif dt is np.bool_:
            a = np.zeros(shape, dtype=dt)
        else:
            a = np.full(shape, 1 if "mask" in vi.name.lower() else 0, dtype=dt)
        f = f"{tag}_i{k}.npy"
        np.save(folder / f, a)
        out.append({"name": vi.name, "file": f})
    return out


def session_entries(report_path):
    """The runtime settings the target wrote (`--report`'s `runtime`: session config entries)."""
    try:
        doc = json.loads(report_path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(e["key"]): str(e["value"]) for e in doc.get("runtime") or []
            if isinstance(e, dict) and "key" in e and "value" in e}


def run_batch(jobs, folder, timeout_s):
    req = {"jobs": jobs, "provider": "webgpu", "timeout_ms": int(timeout_s * 1000)}
    (folder / "request.json").write_text(json.dumps(req))
    r = subprocess.run(["node", str(HARNESS), str(folder)], capture_output=True, text=True,
                       timeout=timeout_s + 120)
    res = folder / "result.json"
    if not res.exists():
        raise RuntimeError(f"harness wrote no result: {r.stderr.strip()[-400:]}")
    doc = json.loads(res.read_text())
    got = doc.get("jobs", [])
    return [got[i] if i < len(got) else {"ok": False, "stage": doc.get("stage"),
                                         "error": doc.get("error")} for i in range(len(jobs))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(HERE.parent / "target" / "release" / "onnx-safeify"))
    ap.add_argument("--targets", default="rx580,webgpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--opt", default="all")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    targets = [t for t in a.targets.split(",") if t]
    work = Path(tempfile.mkdtemp(prefix="web-load-"))
    rows = []  # (model, target or None, path, session entries)
    for m in map(Path, a.models):
        rows.append((m, None, m, {}))
        for t in targets:
            o = work / f"{m.stem}.{t}.onnx"
            rep = work / f"{m.stem}.{t}.report.json"
            r = subprocess.run([a.bin, str(m), "--target", t, "-o", str(o), "--report", str(rep)],
                               capture_output=True, text=True)
            if r.returncode not in (0, 1) or not o.exists():
                rows.append((m, t, None, {"compile": r.stderr.strip()[-300:]}))
            else:
                rows.append((m, t, o, session_entries(rep)))
    results = {}
    runnable = [row for row in rows if row[2] is not None]
    for b in range(0, len(runnable), a.batch):
        chunk = runnable[b:b + a.batch]
        folder = work / f"batch{b // a.batch}"
        folder.mkdir()
        jobs = []
        for i, (m, t, p, extra) in enumerate(chunk):
            try:
                runs = [{"inputs": inputs_of(m, folder, f"j{i}", a.dim)}]
            except Exception as e:  # noqa: BLE001 - reported per model
                results[(m, t)] = {"ok": False, "stage": "inputs", "error": str(e)}
                runs = []
            jobs.append({"model": str(p), "runs": runs, "session": extra,
                         "graph_optimization_level": a.opt})
        for (m, t, _, _), res in zip(chunk, run_batch(jobs, folder, a.timeout)):
            results.setdefault((m, t), res)
    bad = 0
    report = []
    for m, t, p, extra in rows:
        if t is None:
            continue
        orig = results.get((m, None), {})
        res = results.get((m, t)) or {"ok": False, "stage": "compile", "error": extra.get("compile")}
        if not orig.get("ok"):
            verdict = f"original fails ({orig.get('stage')}: {str(orig.get('error'))[:80]})"
        elif res.get("ok"):
            verdict = "ok"
        else:
            verdict = f"FAILS at {res.get('stage')}: {str(res.get('error'))[:160]}"
            bad += 1
        report.append({"model": str(m), "target": t, "verdict": verdict})
        print(f"{m.name[:56]:56} {t:10} {verdict}")
    n_orig = sum(1 for m, t, _, _ in rows if t is None and results.get((m, None), {}).get("ok"))
    n_out = sum(1 for r in report if r["verdict"] == "ok")
    print(f"originals that run: {n_orig} of {sum(1 for r in rows if r[1] is None)}; outputs that run "
          f"where the original does: {n_out}; outputs that fail there: {bad}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
