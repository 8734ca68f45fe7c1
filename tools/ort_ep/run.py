"""Runs one ONNX model on an ONNX Runtime execution provider, for `onnx-safeify verify
--runtime ort-ep:NAME` and `onnx-safeify bisect`.

    python run.py REQUEST_DIR

REQUEST_DIR/request.json: {"model": PATH, "provider": NAME, "provider_options": {...},
"session": {config key: value}, "graph_optimization_level": "disabled|basic|extended|all",
"outputs": [names] or null (the model's own), "runs": [{"inputs": [{"name", "file"}]}]}.
Inputs are .npy files in REQUEST_DIR; output K of run R is written as rR_oK.npy and the
summary as result.json: {"ok": true, "runs": [{"outputs": [{"name", "file"}], "ms"}],
"placement": [{"provider", "nodes": [{"name", "op", "domain"}]}], "placement_source", ...}
or {"ok": false, "stage", "error", ...}. Before each step the stage is written to stage.txt,
so that a caller whose helper died of a signal knows where it died.

The node placement comes from ONNX Runtime's own record (session config
session.record_ep_graph_assignment_info, read back with get_provider_graph_assignment_info);
where this onnxruntime lacks it, from the verbose log lines of VerifyEachNodeIsAssignedToAnEp,
which ONNX Runtime writes to stderr (the caller reads helper.stderr).
"""

import json
import os
import sys
import time

LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
RECORD_KEY = "session.record_ep_graph_assignment_info"


def write_json(folder, name, obj):
    tmp = os.path.join(folder, name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    os.replace(tmp, os.path.join(folder, name))


def set_stage(folder, stage):
    with open(os.path.join(folder, "stage.txt"), "w", encoding="utf-8") as f:
        f.write(stage)


def one_line(e):
    message = " ".join(str(e).split()) or type(e).__name__
    return f"{type(e).__name__}: {message}"[:4000]


def main():
    folder = sys.argv[1]
    stage = "request"
    result = {"ok": False}
    try:
        set_stage(folder, stage)
        with open(os.path.join(folder, "request.json"), encoding="utf-8") as f:
            request = json.load(f)
        stage = "import"
        set_stage(folder, stage)
        import numpy as np
        import onnxruntime as ort

        provider = request["provider"]
        available = ort.get_available_providers()
        result["runtime"] = {"onnxruntime": ort.__version__, "device": ort.get_device(),
                             "available_providers": available}
        stage = "provider"
        set_stage(folder, stage)
        if provider not in available:
            raise RuntimeError(
                f"execution provider {provider!r} is not in this onnxruntime "
                f"({ort.__version__}); it has {', '.join(available)}")

        stage = "session"
        set_stage(folder, stage)
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, LEVELS[request.get("graph_optimization_level", "all")])
        for key, value in (request.get("session") or {}).items():
            so.add_session_config_entry(key, str(value))
        record = hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")
        if record:
            so.add_session_config_entry(RECORD_KEY, "1")
        else:
            so.log_severity_level = 0  # verbose: the placement lines
        options = request.get("provider_options") or {}
        providers = [(provider, options)] if provider == "CPUExecutionProvider" else [
            (provider, options), "CPUExecutionProvider"]
        session = ort.InferenceSession(request["model"], so, providers=providers)
        if not record:
            so.log_severity_level = 2
        got = session.get_providers()
        result["providers"] = got
        if not got or got[0] != provider:
            raise RuntimeError(
                f"ONNX Runtime created the session on {', '.join(got) or 'nothing'}, not on {provider}")
        placement = []
        if record:
            for sub in session.get_provider_graph_assignment_info():
                nodes = [{"name": n.name, "op": n.op_type, "domain": n.domain}
                         for n in sub.get_nodes()]
                if placement and placement[-1]["provider"] == sub.ep_name:
                    placement[-1]["nodes"].extend(nodes)
                else:
                    placement.append({"provider": sub.ep_name, "nodes": nodes})
            result["placement"] = placement
            result["placement_source"] = RECORD_KEY
        else:
            result["placement_source"] = "log"

        names = request.get("outputs") or [o.name for o in session.get_outputs()]
        runs = []
        for r, run in enumerate(request["runs"]):
            stage = f"run {r + 1}"
            set_stage(folder, stage)
            feeds = {i["name"]: np.load(os.path.join(folder, i["file"]), allow_pickle=False)
                     for i in run["inputs"]}
            t0 = time.perf_counter()
            values = session.run(names, feeds)
            ms = (time.perf_counter() - t0) * 1000.0
            outputs = []
            for k, (name, value) in enumerate(zip(names, values)):
                file = f"r{r}_o{k}.npy"
                np.save(os.path.join(folder, file), np.ascontiguousarray(value), allow_pickle=False)
                outputs.append({"name": name, "file": file})
            runs.append({"outputs": outputs, "ms": ms})
        result["runs"] = runs
        result["ok"] = True
        stage = "done"
        set_stage(folder, stage)
    except Exception as e:  # reported to the caller, which classifies it by stage
        result["stage"] = stage
        result["error"] = one_line(e)
    write_json(folder, "result.json", result)


if __name__ == "__main__":
    main()
