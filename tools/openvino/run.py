"""Runs one ONNX model on OpenVINO's CPU plugin, for `onnx-safeify verify --runtime openvino`.

    python run.py REQUEST_DIR

REQUEST_DIR/request.json: {"model": PATH, "runs": [{"inputs": [{"name", "file"}]}],
"outputs": [names], "device": "CPU", "config": {"INFERENCE_PRECISION_HINT": "f32"}}.
Inputs are .npy files in REQUEST_DIR; output K of run R is written as rR_oK.npy and a summary
as result.json ({"ok": true, "runs": [{"outputs": [{"name", "file"}], "ms"}], ...} or
{"ok": false, "stage", "error"}). The inference precision must be f32: the CPU plugin's
default on CPUs with bf16 support computes in bf16, which is not what the model says.
"""

import json
import os
import sys
import time


def write_result(folder, obj):
    tmp = os.path.join(folder, "result.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    os.replace(tmp, os.path.join(folder, "result.json"))


def main():
    folder = sys.argv[1]
    stage = "request"
    try:
        with open(os.path.join(folder, "request.json"), encoding="utf-8") as f:
            request = json.load(f)
        stage = "import"
        import numpy as np
        import openvino as ov

        stage = "session"
        core = ov.Core()
        device = request.get("device", "CPU")
        model = core.read_model(request["model"])
        compiled = core.compile_model(model, device, request.get("config", {}))
        by_name = {}
        for port in compiled.outputs:
            for n in port.get_names():
                by_name.setdefault(n, port)
        missing = [n for n in request["outputs"] if n not in by_name]
        if missing:
            raise RuntimeError(f"compiled model has no output named {missing[0]!r}")
        infer = compiled.create_infer_request()
        runs = []
        for r, run in enumerate(request["runs"]):
            stage = f"run {r + 1}"
            feeds = {i["name"]: np.load(os.path.join(folder, i["file"]), allow_pickle=False)
                     for i in run["inputs"]}
            t0 = time.perf_counter()
            infer.infer(feeds)
            ms = (time.perf_counter() - t0) * 1000.0
            outputs = []
            for k, name in enumerate(request["outputs"]):
                value = np.ascontiguousarray(infer.get_tensor(by_name[name]).data)
                file = f"r{r}_o{k}.npy"
                np.save(os.path.join(folder, file), value, allow_pickle=False)
                outputs.append({"name": name, "file": file})
            runs.append({"outputs": outputs, "ms": ms})
        precision = compiled.get_property("INFERENCE_PRECISION_HINT")
        write_result(folder, {
            "ok": True,
            "runtime": {"openvino": ov.get_version()},
            "device": device,
            "device_name": core.get_property(device, "FULL_DEVICE_NAME"),
            "inference_precision": str(precision),
            "runs": runs,
        })
    except Exception as e:  # reported to the caller, which exits 2
        message = " ".join(str(e).split()) or type(e).__name__
        write_result(folder, {"ok": False, "stage": stage, "error": f"{type(e).__name__}: {message}"[:2000]})


if __name__ == "__main__":
    main()
