#!/usr/bin/env python3
"""Compile models for targets and verify each output on another runtime: pass, the runtime's
own difference, or fail (issue 38's done criterion).

    runtime_table.py BIN OUT_DIR MODEL... [--targets openvino-gpu,webgpu,rx580]
                     [--runtimes openvino,webgpu] [--webgpu-fp32-only] [--timeout SECS]
                     [--json FILE]

For each model and target: `BIN MODEL --target T -o OUT` (exit 1: the compile refused, with
its reason), then for each runtime R `BIN verify MODEL OUT --runtime R --format json` (with
MODEL's `.inputs.npz` beside it when there is one). `--webgpu-fp32-only` runs webgpu only for
the webgpu and rx580 outputs of models without 8-bit or float16 tensors. A row's verdict:

  pass          every output within its bound, and R gives the original's outputs as ONNX
                Runtime CPU does (or within the bound)
  pass (own)    within the bound widened by R's own difference from ONNX Runtime CPU on the
                original, which the report names
  pass (own*)   the original does not load on R: the rewrite is judged on ONNX Runtime CPU
                and R's own difference is measured on the rewritten model, which the report
                names (`original_on_runtime.measured_on` = rewritten)
  pass (cpu)    the original does not load on R, and the rewritten model does not run on
                ONNX Runtime CPU: judged against ONNX Runtime CPU
  pass (R ref)  ONNX Runtime CPU cannot run the original (a contrib op without a CPU kernel):
                judged against the original on R
  no reference  neither ONNX Runtime CPU nor R runs the original: nothing to compare with
  FAIL          some output beyond its bound
  own limit     the output does not load or run on R, and neither does the original: R's own
                limit (verify says so)
  NO LOAD / ERR verify could not run the output on R (exit 2), while the original runs there
                (or was not tried): the message
  refused       the compile exited 1 (the reason)

Results are appended to the JSON file as they come (one object per line), so a long run can
be read while it goes and resumed: rows already in the file are not run again.
"""
import json
import os
import subprocess
import sys

import onnx

FP_TYPES = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.UINT8,
            onnx.TensorProto.INT8}


COLUMNS = ["pass", "pass (own)", "pass (own*)", "pass (R ref)", "pass (cpu)", "FAIL",
           "own limit", "no reference", "NO LOAD", "ERR", "refused"]


def is_fp32(path):
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    types = [i.data_type for i in g.initializer]
    types += [v.type.tensor_type.elem_type for v in list(g.input) + list(g.output) + list(g.value_info)]
    return not any(t in FP_TYPES for t in types)


def verdict(code, report, stderr):
    if code == 2 or report is None:
        msg = " ".join(stderr.split())
        if "own limit, not the rewrite's" in msg:
            return "own limit", msg[:300]
        if "ONNX Runtime cannot load the model" in msg and "; nor does " in msg:
            return "no reference", msg[:300]
        kind = "NO LOAD" if "cannot load" in msg or "cannot run" in msg else "ERR"
        return kind, msg[:300]
    o = report.get("original_on_runtime") or {}
    own = ""
    if o.get("ran") or o.get("measured_on") == "rewritten":
        diffs = [d for d in o.get("differences", []) if d.get("max_abs_err") not in (0, 0.0)]
        if diffs:
            own = "; ".join(f"{d['output']}: {d['max_abs_err'] if d['max_abs_err'] is not None else 'inf'}"
                            for d in diffs[:3])
    if code == 1:
        bad = []
        for run in report.get("runs", []):
            for c in run.get("outputs", []):
                if c.get("status") != "ok":
                    bad.append(f"{c.get('name')}: {c.get('max_abs_err')} ({c.get('status')})")
        return "FAIL", "; ".join(bad[:3]) + (f" | runtime's own: {own}" if own else "")
    if o.get("reference"):
        return "pass (R ref)", " ".join(o["reference"].split())[:200]
    if not o.get("ran") and o.get("measured_on") == "rewritten":
        return ("pass (own*)", own) if own else ("pass", "")
    if not o.get("ran"):
        return "pass (cpu)", " ".join((o.get("error") or "").split())[:200]
    if o.get("differs") or own:
        return "pass (own)", own
    return "pass", ""


def main(argv):
    args = argv[1:]
    opts = {"--targets": "openvino-gpu,webgpu,rx580", "--runtimes": "openvino,webgpu",
            "--timeout": "300", "--json": None}
    fp32_only = False
    rest = []
    it = iter(args)
    for a in it:
        if a in opts:
            opts[a] = next(it)
        elif a == "--webgpu-fp32-only":
            fp32_only = True
        else:
            rest.append(a)
    bin_, out_dir, models = rest[0], rest[1], rest[2:]
    os.makedirs(out_dir, exist_ok=True)
    done = {}
    if opts["--json"] and os.path.exists(opts["--json"]):
        with open(opts["--json"]) as f:
            for line in f:
                r = json.loads(line)
                done[(r["model"], r["target"], r["runtime"])] = r
    rows = list(done.values())
    for model in models:
        base = os.path.basename(model)[:-5]
        inputs = model[:-5] + ".inputs.npz"
        fp32 = is_fp32(model)
        for t in opts["--targets"].split(","):
            out = os.path.join(out_dir, f"{base}.{t}.onnx")
            compiled = None
            for rt in opts["--runtimes"].split(","):
                key = (base, t, rt)
                if key in done:
                    continue
                if rt == "webgpu" and fp32_only and (t == "openvino-gpu" or not fp32):
                    continue
                if compiled is None:
                    p = subprocess.run([bin_, model, "--target", t, "-o", out],
                                       capture_output=True, text=True)
                    compiled = (p.returncode, " ".join(p.stderr.split())[-300:])
                if compiled[0] != 0:
                    v = ("refused" if compiled[0] == 1 else "ERR", compiled[1])
                else:
                    cmd = [bin_, "verify", model, out, "--runtime", rt, "--format", "json",
                           "--timeout", opts["--timeout"]]
                    if os.path.exists(inputs):
                        cmd += ["--inputs", inputs]
                    p = subprocess.run(cmd, capture_output=True, text=True)
                    try:
                        rep = json.loads(p.stdout)
                    except ValueError:
                        rep = None
                    v = verdict(p.returncode, rep, p.stderr)
                row = {"model": base, "target": t, "runtime": rt, "verdict": v[0], "detail": v[1]}
                rows.append(row)
                print(f"{base:45} {t:13} {rt:9} {v[0]:11} {v[1][:150]}", flush=True)
                if opts["--json"]:
                    with open(opts["--json"], "a") as f:
                        f.write(json.dumps(row) + "\n")
    counts = {}
    for r in rows:
        k = (r["target"], r["runtime"])
        counts.setdefault(k, {}).setdefault(r["verdict"], 0)
        counts[k][r["verdict"]] += 1
    print("\n| target | runtime | " + " | ".join(
        COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    for (t, rt), c in sorted(counts.items()):
        print(f"| {t} | {rt} | " + " | ".join(str(c.get(k, 0)) for k in
              COLUMNS) + " |")


if __name__ == "__main__":
    main(sys.argv)
