"""QLinearAdd over every pair of codes: the decomposition against ONNX Runtime's kernel.

    qladd_exhaustive.py BINARY [--sets N] [--seed S] [--target T]

For N random parameter sets (uint8 or int8, scales from 1e-3 to 1, zero points anywhere in the
range, some output scales a small multiple of A's), a one-node QLinearAdd model is compiled by
BINARY for the target (default rx580) twice: with A of shape [1, 256] and B [256, 1] (A the
kernel's vector) and with A [256, 1], B [1, 256] (A broadcast along the innermost run, so B is the
vector). Fed every code on each side, one run covers all 65,536 pairs. The original and the output
run on ONNX Runtime CPU (optimisations off, one thread) and must be bit-identical; the output must
hold no QLinearAdd and no float64 Cast. Prints one JSON line (instances, mismatched instances,
pairs checked, how many were written as a table Gather / a float32 form); exits 1 on a mismatch.
Run it with the corpus venv's python (onnx, onnxruntime, numpy).
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def model(dt, npdt, shapes, scales, zps):
    inits = []
    for i, n in enumerate("abc"):
        inits.append(numpy_helper.from_array(np.array(scales[i], np.float32), n + "_s"))
        inits.append(numpy_helper.from_array(np.array(zps[i], npdt), n + "_z"))
    node = helper.make_node("QLinearAdd", ["A", "a_s", "a_z", "B", "b_s", "b_z", "c_s", "c_z"],
                            ["C"], domain="com.microsoft")
    g = helper.make_graph([node], "qladd",
                          [helper.make_tensor_value_info("A", dt, shapes[0]),
                           helper.make_tensor_value_info("B", dt, shapes[1])],
                          [helper.make_tensor_value_info("C", dt, [256, 256])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def run(path, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("--sets", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", default="rx580")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    d = Path(tempfile.mkdtemp(prefix="qladd-"))
    tot = bad = 0
    forms = {"table": 0, "float32": 0}
    for _ in range(a.sets):
        signed = rng.random() < 0.5
        dt, npdt = (TensorProto.INT8, np.int8) if signed else (TensorProto.UINT8, np.uint8)
        lo, hi = (-128, 127) if signed else (0, 255)
        scales = [float(np.float32(10 ** rng.uniform(-3, 0))) for _ in range(3)]
        if rng.random() < 0.2:
            scales[2] = float(np.float32(scales[0] * rng.choice([0.5, 1, 2, 3])))
        zps = [rng.randint(lo, hi) if rng.random() < 0.8 else 0 for _ in range(3)]
        for b_vector in (False, True):
            shapes = ([256, 1], [1, 256]) if b_vector else ([1, 256], [256, 1])
            src, out = d / "m.onnx", d / "o.onnx"
            onnx.save(model(dt, npdt, shapes, scales, zps), src)
            r = subprocess.run([a.binary, str(src), "--target", a.target, "-o", str(out)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                print(f"compile failed: {r.stderr[-800:]}", file=sys.stderr)
                return 2
            nodes = onnx.load(out).graph.node
            ops = [n.op_type for n in nodes]
            f64 = any(n.op_type == "Cast" and any(x.name == "to" and x.i == TensorProto.DOUBLE
                                                  for x in n.attribute) for n in nodes)
            if "QLinearAdd" in ops or f64:
                print(f"not decomposed without float64: {ops}", file=sys.stderr)
                return 1
            forms["table" if "Gather" in ops else "float32"] += 1
            codes = np.arange(lo, hi + 1).astype(npdt)
            feeds = {"A": codes.reshape(shapes[0]), "B": codes.reshape(shapes[1])}
            n = int((run(src, feeds) != run(out, feeds)).sum())
            tot += 1
            if n:
                bad += 1
                print(json.dumps({"mismatch": {"signed": signed, "scales": scales, "zero_points": zps,
                                               "b_vector": b_vector, "pairs": n}}))
    print(json.dumps({"instances": tot, "mismatched": bad, "pairs_checked": tot * 65536,
                      "forms": forms}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
