#!/usr/bin/env python3
"""Holds onnx-safeify's OpenVINO placement prediction against ONNX Runtime's own record.

For each model: `onnx-safeify inspect MODEL --target T --format json` predicts per node whether
ONNX Runtime's OpenVINO execution provider or its CPU provider runs it (T names
`provider: openvino-cpu`; a target file is written for it when --target is not given). Then
the `onnxruntime-openvino` wheel (its own venv: it cannot share one with the plain
`onnxruntime` wheel) creates a session with `providers=['OpenVINOExecutionProvider']`,
`device_type` CPU and `session.record_ep_graph_assignment_info`, and
`get_provider_graph_assignment_info()` names the nodes each provider took. A node agrees when
the predicted side is the recorded one.

Nodes are matched by name, so a model with unnamed or duplicate node names is first written
to a temporary copy with every node named (`n<index>`); both sides read that copy.

Usage: tools/ovep_placement_check.py --bin target/debug/onnx-safeify [--python PY]
           [--opt disabled|basic|extended|all] [--json OUT] MODEL...
  --python  the venv's interpreter (default ~/.cache/onnx-safeify/ovep-venv/bin/python)
Prints one line per model, every miss with its predicted reason, and the total.
Exit 0 when every model was compared or refused by the runtime (a load failure is reported,
with whether the prediction said it would not load), 2 on a harness failure.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

VENV_PY = Path.home() / ".cache/onnx-safeify/ovep-venv/bin/python"

TARGET = """target: openvino-cpu-check
description: ONNX Runtime's OpenVINO execution provider, CPU device (placement check)
extends: none
provider: openvino-cpu
rules: []
"""

# Runs inside the onnxruntime-openvino venv: name the nodes, create the session, print the record.
RUNNER = r"""
import json, sys
import onnx
import onnxruntime as ort
src, dst, opt = sys.argv[1], sys.argv[2], sys.argv[3]
m = onnx.load(src)
names = [n.name for n in m.graph.node]
renamed = len(set(names)) != len(names) or any(not n for n in names)
if renamed:
    seen = set()
    for i, n in enumerate(m.graph.node):
        if not n.name or n.name in seen:
            n.name = f"n{i}"
        seen.add(n.name)
    onnx.save(m, dst)
    path = dst
else:
    path = src
so = ort.SessionOptions()
so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
so.graph_optimization_level = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}[opt]
out = {"path": path, "version": ort.__version__}
try:
    s = ort.InferenceSession(path, so, providers=["OpenVINOExecutionProvider"],
                             provider_options=[{"device_type": "CPU"}])
    out["where"] = {}
    for sg in s.get_provider_graph_assignment_info():
        for n in sg.get_nodes():
            out["where"][n.name] = sg.ep_name
except Exception as e:
    out["error"] = str(e).splitlines()[0][:300]
print(json.dumps(out))
"""


def predict(binary, model, target):
    r = subprocess.run([binary, "inspect", str(model), "--target", str(target), "--format", "json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"inspect failed on {model}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def run(python, model, tmp, opt):
    dst = Path(tmp) / (Path(model).stem + ".named.onnx")
    r = subprocess.run([str(python), "-c", RUNNER, str(model), str(dst), opt],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"runtime harness failed on {model}: {r.stderr.strip()[-400:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare(pred, rec):
    where = rec.get("where", {})
    res = {"agree": 0, "disagree": 0, "unrecorded": 0, "misses": []}
    for n in pred["nodes"]:
        if n["side"] == "none":
            continue
        got = where.get(n["name"])
        if got is None:
            res["unrecorded"] += 1
            res["misses"].append({"node": n["name"], "op": n["op"], "predicted": n["side"],
                                  "recorded": None, "why": n["why"], "detail": n.get("detail")})
            continue
        side = "gpu" if got == "OpenVINOExecutionProvider" else "cpu"
        if side == n["side"]:
            res["agree"] += 1
        else:
            res["disagree"] += 1
            res["misses"].append({"node": n["name"], "op": n["op"], "predicted": n["side"],
                                  "recorded": got, "why": n["why"], "detail": n.get("detail")})
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--python", default=str(VENV_PY))
    ap.add_argument("--target", help="a target naming provider: openvino-cpu (default: written)")
    ap.add_argument("--opt", default="disabled", choices=["disabled", "basic", "extended", "all"])
    ap.add_argument("--json")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    if not Path(a.python).exists():
        print(f"error: no onnxruntime-openvino interpreter at {a.python}", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="ovep-placement-")
    target = a.target or os.path.join(tmp, "openvino-cpu-check.yaml")
    if not a.target:
        Path(target).write_text(TARGET)
    rows, total = [], {"agree": 0, "disagree": 0, "unrecorded": 0}
    try:
        for m in a.models:
            rec = run(a.python, m, tmp, a.opt)
            pred = predict(a.bin, rec["path"], target)
            row = {"model": m, "predicted_gpu": pred["gpu"], "predicted_cpu": pred["cpu"],
                   "predicted_unloadable": pred["cannot_load"]}
            if "error" in rec:
                row["error"] = rec["error"]
                print(f"{Path(m).name}: does not load ({rec['error']}); predicted "
                      f"{pred['cannot_load']} node(s) no provider takes")
            else:
                c = compare(pred, rec)
                row.update(c)
                for k in total:
                    total[k] += c[k]
                print(f"{Path(m).name}: {c['agree']}/{c['agree'] + c['disagree'] + c['unrecorded']}"
                      f" agree (predicted {pred['gpu']} on OpenVINO, {pred['cpu']} on the CPU)")
                for x in c["misses"]:
                    print(f"  miss {x['node']} ({x['op']}): predicted {x['predicted']} "
                          f"({x['why']}: {x['detail'] or ''}), recorded {x['recorded']}")
            rows.append(row)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = total["agree"] + total["disagree"] + total["unrecorded"]
    pct = 100.0 * total["agree"] / n if n else 0.0
    print(f"total: {total['agree']} of {n} placed nodes agree ({pct:.2f} %), "
          f"{total['disagree']} disagree, {total['unrecorded']} not in the record")
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "total": total}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
