#!/usr/bin/env python3
"""Checks runtimes/capability/cpu-registered.tsv against the ONNX Runtime this venv holds: each
row's op, at each element type the row lists, is built as a one-node model and must load and run
on the CPU provider. Prints one line per case; exits 1 if any fails.

    ~/.cache/onnx-safeify/venv/bin/python tools/capability/cpu_registered_probe.py
"""
import sys
import onnx, onnxruntime as ort, numpy as np
from onnx import helper as h, TensorProto as T
def mk(op, dt, concat=False):
    t = {np.int8: T.INT8, np.uint8: T.UINT8}[dt]
    inits = [h.make_tensor("s", T.FLOAT, [], [0.1]), h.make_tensor("z", t, [], [0])]
    if concat:
        node = h.make_node(op, ["s", "z", "x", "s", "z", "x", "s", "z"], ["y"], domain="com.microsoft", axis=1)
    else:
        kw = {"kernel_shape": [2, 2]} if op == "QLinearAveragePool" else {}
        node = h.make_node(op, ["x", "s", "z", "s", "z"], ["y"], domain="com.microsoft", **kw)
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", t, [1, 2, 4, 4])], [h.make_tensor_value_info("y", t, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13), h.make_opsetid("com.microsoft", 1)])
    return m.SerializeToString()
failed = False
table = __file__.replace("tools/capability/cpu_registered_probe.py", "runtimes/capability/cpu-registered.tsv")
for line in open(table):
    if line.startswith("#") or not line.strip():
        continue
    f = line.rstrip("\n").split("\t")
    op = f[1]
    types = dict(c.split("=") for c in f[6].split(";"))
    quantized = types.get("T", types.get("T8", ""))
    for name in quantized.split(","):
        dt = {"int8": np.int8, "uint8": np.uint8}[name]
        try:
            s = ort.InferenceSession(mk(op, dt, op == "QLinearConcat"), providers=["CPUExecutionProvider"])
            y = s.run(None, {"x": np.ones((1, 2, 4, 4), dt)})[0]
            print(op, name, "loads and runs", y.shape)
        except Exception as e:  # noqa: BLE001 - any refusal is the answer
            print(op, name, "FAILS", str(e)[:150])
            failed = True
sys.exit(1 if failed else 0)
