#!/usr/bin/env python3
"""Which operators OpenVINO's ONNX front end cannot load, found by loading real models.

    openvino_capability.py MODEL_OR_DIR... [--json OUT]
    openvino_capability.py --per-channel


Each model is read (`Core.read_model`) and compiled for the CPU plugin; the operators OpenVINO
names in its error summary ("No conversion rule found for operations: ...": it has no such
operator; "Conversion is failed for: ...": the operator failed, possibly because an operator
before it left an input's type unknown) are collected with the model that showed them. Also prints the com.microsoft operators of
the models that loaded, which OpenVINO does accept. The figures back the `openvino-gpu`
target's must-rewrite rule (rules/openvino-gpu.yaml) and docs/hazards.md.

`--per-channel` builds small standard QLinearConv-13 / QLinearMatMul-13 models with per-tensor
and per-channel weight scales and zero points (separately), loads each on OpenVINO's CPU plugin
and compares it with ONNX Runtime CPU: which forms OpenVINO refuses (with its message), and
which it loads but computes differently. It also checks the integer forms the `openvino-gpu`
target rewrites them into (ConvInteger with int8 weights, MatMulInteger with per-column int8
zero points).
"""
import glob
import json
import os
import re
import sys

import onnx
import openvino as ov


def models(args):
    for a in args:
        if os.path.isdir(a):
            yield from sorted(glob.glob(os.path.join(a, "*.onnx")))
        else:
            yield a


def per_channel():
    import numpy as np
    import onnx.helper as h
    import onnxruntime as ort
    from onnx import TensorProto as T
    from onnx import numpy_helper as nh
    import tempfile

    rng = np.random.default_rng(0)
    core = ov.Core()
    folder = tempfile.mkdtemp(prefix="ov_per_channel_")
    print(f"OpenVINO {ov.__version__}, onnxruntime {ort.__version__}")

    def check(name, node, inp, out_type, inits, feed):
        g = h.make_graph([node], name, [inp], [h.make_tensor_value_info("y", out_type, None)],
                         [nh.from_array(v, k) for k, v in inits.items()])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
        m.ir_version = 8
        path = os.path.join(folder, name + ".onnx")
        onnx.save(m, path)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
        except Exception as e:  # noqa: BLE001
            print(f"  {name}: ONNX Runtime refuses it: {' '.join(str(e).split())[:160]}")
            return
        try:
            cm = core.compile_model(core.read_model(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            got = cm(feed)[cm.outputs[0]]
        except Exception as e:  # noqa: BLE001
            text = " ".join(str(e).split())
            i = text.find("While validating")
            print(f"  {name}: REFUSED: {text[i:i + 330] if i >= 0 else text[-330:]}")
            return
        diff = np.abs(got.astype(np.int64) - ref.astype(np.int64)).max()
        print(f"  {name}: loads; {'equal to ONNX Runtime' if diff == 0 else f'WRONG: up to {diff} off'}")

    x = rng.integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)
    pc = lambda n: rng.uniform(0.001, 0.01, n).astype(np.float32)  # noqa: E731
    one = lambda v, t: np.array(v, t)  # noqa: E731
    for name, m_out, ws, wz in (
            ("QLinearConv per-tensor", 8, one(0.005, np.float32), one(0, np.int8)),
            ("QLinearConv per-channel scale and zero point", 8, pc(8), np.zeros(8, np.int8)),
            ("QLinearConv per-channel scale, scalar zero point", 8, pc(8), one(0, np.int8)),
            ("QLinearConv scalar scale, per-channel zero point", 8, one(0.005, np.float32),
             np.zeros(8, np.int8)),
            ("QLinearConv per-channel, M = C", 4, pc(4), np.zeros(4, np.int8))):
        inits = dict(xs=one(0.02, np.float32), xz=one(128, np.uint8),
                     w=rng.integers(-100, 100, (m_out, 4, 3, 3)).astype(np.int8), ws=ws, wz=wz,
                     ys=one(0.5, np.float32), yz=one(10, np.uint8))
        check(name, h.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"]),
              h.make_tensor_value_info("x", T.UINT8, [1, 4, 6, 6]), T.UINT8, inits, {"x": x})
    a = rng.integers(0, 256, (3, 16)).astype(np.uint8)
    for name, bs, bz in (
            ("QLinearMatMul per-tensor", one(0.005, np.float32), one(0, np.int8)),
            ("QLinearMatMul per-column scale and zero point", pc(12), np.zeros(12, np.int8)),
            ("QLinearMatMul per-column scale, scalar zero point", pc(12), one(0, np.int8)),
            ("QLinearMatMul scalar scale, per-column zero point", one(0.005, np.float32),
             np.zeros(12, np.int8))):
        inits = dict(as_=one(0.02, np.float32), az=one(128, np.uint8),
                     b=rng.integers(-100, 100, (16, 12)).astype(np.int8), bs=bs, bz=bz,
                     ys=one(0.5, np.float32), yz=one(10, np.uint8))
        check(name, h.make_node("QLinearMatMul", ["a", "as_", "az", "b", "bs", "bz", "ys", "yz"], ["y"]),
              h.make_tensor_value_info("a", T.UINT8, [3, 16]), T.UINT8, inits, {"a": a})
    inits = dict(w=rng.integers(-100, 100, (8, 4, 3, 3)).astype(np.int8), xz=one(128, np.uint8),
                 wz=one(0, np.int8))
    check("ConvInteger, int8 weights, scalar zero point",
          h.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"]),
          h.make_tensor_value_info("x", T.UINT8, [1, 4, 6, 6]), T.INT32, inits, {"x": x})
    inits["wz"] = np.zeros(8, np.int8)
    check("ConvInteger, int8 weights, per-channel zero point",
          h.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"]),
          h.make_tensor_value_info("x", T.UINT8, [1, 4, 6, 6]), T.INT32, inits, {"x": x})
    inits = dict(b=rng.integers(-100, 100, (16, 12)).astype(np.int8), az=one(128, np.uint8),
                 bz=np.zeros(12, np.int8))
    check("MatMulInteger, int8 B, per-column zero point",
          h.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"]),
          h.make_tensor_value_info("a", T.UINT8, [3, 16]), T.INT32, inits, {"a": a})


def main(argv):
    if "--per-channel" in argv:
        per_channel()
        return
    out_json = None
    if "--json" in argv:
        i = argv.index("--json")
        out_json = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    core = ov.Core()
    refused, accepted = {}, {}
    for f in models(argv[1:]):
        m = onnx.load(f, load_external_data=False)
        ops = {f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in m.graph.node}
        try:
            core.compile_model(core.read_model(f), "CPU")
        except Exception as e:  # noqa: BLE001 (OpenVINO raises its own types)
            names = set()
            for line in str(e).splitlines():
                line = line.strip()
                for head, kind in (("-- No conversion rule found for operations:", "no rule"),
                                   ("-- Conversion is failed for:", "failed")):
                    if line.startswith(head):
                        names.update((kind, x.strip()) for x in line[len(head):].split(",") if x.strip())
            for kind, n in sorted(names):
                refused.setdefault(kind, {}).setdefault(n, []).append(os.path.basename(f))
            if not names:
                refused.setdefault("other", {}).setdefault(" ".join(str(e).split())[:120], []).append(
                    os.path.basename(f))
            continue
        for op in ops:
            if op.startswith("com.microsoft::"):
                accepted.setdefault(op, []).append(os.path.basename(f))
    print(f"OpenVINO {ov.__version__}")
    for kind, why in (("no rule", "no conversion rule (the front end has no such operator)"),
                      ("failed", "conversion failed (the operator, or an input type an operator "
                                 "before it left unknown)"),
                      ("other", "other errors")):
        print(f"refused, {why}:")
        for op in sorted(refused.get(kind, {})):
            seen = refused[kind][op]
            print(f"  {op}: {len(seen)} model(s), e.g. {seen[0]}")
    print("com.microsoft ops accepted (in models that loaded):")
    for op in sorted(accepted):
        print(f"  {op}: {len(accepted[op])} model(s)")
    if out_json:
        with open(out_json, "w") as fh:
            json.dump({"openvino": ov.__version__, "refused": refused, "accepted": accepted}, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv)
