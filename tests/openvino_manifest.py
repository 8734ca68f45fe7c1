#!/usr/bin/env python3
"""Runs a partition manifest the way an OpenVINO deployment would, and compares it with the
original on ONNX Runtime CPU (issue 48 item 5).

    openvino_manifest.py ORIGINAL MANIFEST INPUTS.npz [INPUTS.npz ...]

Run with a Python whose onnxruntime has the OpenVINO execution provider (onnxruntime-openvino).
Each `gpu` segment runs under OpenVINOExecutionProvider (device CPU: the same front end and
graph compiler as the GPU plugin; this machine has no Intel GPU), each `cpu` segment under
ONNX Runtime's CPU provider; values pass between segments by name. The original cannot run
under OpenVINO (that is why it was partitioned), so this follows `onnx-safeify verify
--runtime`'s rule for that case: the chain also runs with every segment on ONNX Runtime CPU
and is judged there against the original (ONNX Runtime CPU, graph optimisations off) at the
class the segments declare (`onnx_safeify.exactness`: exact = bit-identical, rounding = 1e-5 of
the output's scale, approximate:B[@F] = B x max(scale, F)); the OpenVINO chain's difference
from it is the runtime's own difference, reported with whether it is within float rounding
(1e-5 of the output's scale), and held only to a gross bound (1e-3 of the scale) that catches
a segment wired or computed wrongly, not a precision claim.

Prints one line per segment (device, node count, whether OpenVINO took every node: the segment
loads with ONNX Runtime's CPU fallback disabled) and one per output and input set; exits 0 when
every check holds, 1 when one does not, 2 when something could not be run (a GPU segment that
does not load under OpenVINO included).
"""
import os
import re
import sys

import numpy as np
import onnx
import onnxruntime as ort

OV = "OpenVINOExecutionProvider"
ROUNDING = 1e-5
TINY = float(np.finfo(np.float32).tiny)


def manifest(path):
    """The segments (file, device, inputs, outputs) and outputs of a manifest as onnx-safeify
    writes it: one `key: value` per line, lists in flow style of JSON strings."""
    segs, outs, cur = [], None, None

    def names(v):
        return [m.group(1).encode().decode("unicode_escape") for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', v)]

    for line in open(path, encoding="utf-8"):
        s = line.strip()
        if not s or s.startswith("#") or s == "segments:":
            continue
        if s.startswith("- file:"):
            cur = {"file": names(s)[0]}
            segs.append(cur)
        elif s.startswith(("device:", "inputs:", "outputs:")) and line.startswith("    "):
            k, v = s.split(":", 1)
            cur[k] = v.strip() if k == "device" else names(v)
        elif s.startswith("outputs:"):
            outs = names(s.split(":", 1)[1])
    return segs, outs


def bound(path):
    """The class the model declares, as (relative bound, floor); rounding at least."""
    m = onnx.load(path, load_external_data=False)
    cls = next((p.value for p in m.metadata_props if p.key == "onnx_safeify.exactness"), "exact")
    if cls.startswith("approximate:"):
        b, _, f = cls.split(":", 1)[1].partition("@")
        return cls, max(float(b), ROUNDING), float(f) if f else TINY
    return cls, ROUNDING, TINY


def session(path, device):
    """A session for a segment, and where its nodes run: for a `gpu` segment, "all on
    OpenVINO" when it loads with ONNX Runtime's CPU fallback disabled (every node taken by
    OpenVINO), else the reason that load gave (it then loads with the fallback)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if device != "gpu":
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]), "ONNX Runtime CPU"
    providers = [(OV, {"device_type": "CPU"}), "CPUExecutionProvider"]
    strict = ort.SessionOptions()
    strict.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    strict.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    try:
        ov_only = [(OV, {"device_type": "CPU"})]
        return ort.InferenceSession(path, strict, providers=ov_only), "all on OpenVINO"
    except Exception as e:  # noqa: BLE001 - the reason is reported
        where = "some nodes on ONNX Runtime CPU (" + str(e).strip().splitlines()[-1][:160] + ")"
    return ort.InferenceSession(path, so, providers=providers), where


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    original, man, sets = sys.argv[1], sys.argv[2], sys.argv[3:]
    if OV not in ort.get_available_providers():
        print(f"error: this onnxruntime ({ort.__version__}) has no {OV}", file=sys.stderr)
        return 2
    segs, outs = manifest(man)
    base = os.path.dirname(os.path.abspath(man))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(original, so, providers=["CPUExecutionProvider"])
    sessions = []
    for i, s in enumerate(segs):
        path = os.path.join(base, s["file"])
        try:
            sess, where = session(path, s["device"])
        except Exception as e:  # noqa: BLE001 - a refusal is the finding
            print(f"segment {i} ({s['device']}) {s['file']}: does not load: {str(e)[:400]}")
            return 2
        nodes = len(onnx.load(path, load_external_data=False).graph.node)
        print(f"segment {i} ({s['device']}) {s['file']}: {nodes} node(s), {where}")
        sessions.append((s, sess))
    cls, rel, floor = bound(os.path.join(base, segs[0]["file"]))
    cpu_chain = [(s, session(os.path.join(base, s["file"]), "cpu")[0]) for s in segs]

    def run_chain(chain, feeds):
        have = dict(feeds)
        for s, sess in chain:
            got = sess.run(s["outputs"], {n: have[n] for n in s["inputs"]})
            have.update(zip(s["outputs"], got))
        return have

    def differ(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            return None, 0.0
        if not a.size:
            return 0.0, 0.0
        return float(np.abs(a - b).max()), float(np.abs(a).max())

    ok = True
    for k, npz in enumerate(sets):
        feeds = dict(np.load(npz))
        want = dict(zip([o.name for o in ref.get_outputs()], ref.run(None, feeds)))
        on_cpu = run_chain(cpu_chain, feeds)
        on_ov = run_chain(sessions, feeds)
        for name in outs:
            d_cpu, scale = differ(want[name], on_cpu[name])
            d_ov, _ = differ(on_cpu[name], on_ov[name])
            if d_cpu is None or d_ov is None:
                print(f"set {k} output {name}: shapes differ")
                ok = False
                continue
            limit = 0.0 if cls == "exact" else rel * max(scale, floor)
            judged = d_cpu <= limit
            gross = d_ov <= 1e-3 * max(scale, TINY)
            rounding = d_ov <= ROUNDING * max(scale, TINY)
            ok &= judged and gross
            print(f"set {k} output {name} {list(np.shape(want[name]))} (scale {scale:.3e}): "
                  f"chain on ONNX Runtime CPU {d_cpu:.3e} from the original ({cls}: "
                  f"{'ok' if judged else 'FAILS'}); OpenVINO's own difference {d_ov:.3e} "
                  f"({d_ov / max(scale, TINY):.2e} of scale, "
                  f"{'within' if rounding else 'beyond'} float rounding"
                  f"{'' if gross else ', BEYOND the gross bound'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
