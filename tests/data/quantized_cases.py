"""Single-op models of ONNX Runtime's quantized com.microsoft operators, for
tests/unfuse_quantized.rs.

    quantized_cases.py build DIR      writes DIR/<case>.onnx and DIR/cases.json
    quantized_cases.py compare A B TOL [DIMS]  runs both models on ONNX Runtime CPU with the
                                      same random inputs (fixed seeds; DIMS, a JSON list, sizes
                                      the inputs of that rank) and prints the worst error

Each case records its tolerance: ["steps", n] for quantized outputs (the largest difference of
the integer outputs), ["rel", r] for float outputs (max |a - b| / max |a|), ["abs", a].
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

U8, I8, F, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT, TensorProto.INT32
NP = {U8: np.uint8, I8: np.int8, F: np.float32, I32: np.int32}
rng = np.random.default_rng(7)


def const(name, value, dt):
    return numpy_helper.from_array(np.asarray(value, dtype=NP[dt]), name)


def qrand(shape, dt):
    lo, hi = (0, 256) if dt == U8 else (-128, 128)
    return rng.integers(lo, hi, size=shape).astype(NP[dt])


def zp_of(dt, value):
    return value if dt == U8 else value - 128


def model(name, node, inputs, outputs, inits, opset=13):
    g = helper.make_graph([node], name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


def ms(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain="com.microsoft", **attrs)


def cases():
    out = []

    def add(name, m, tol):
        out.append((name, m, tol))

    one_step = ["steps", 1]
    # QLinearAdd / QLinearMul: int8 with broadcasting, uint8 without (ONNX Runtime's type
    # inference rejects omitted zero points here).
    for op in ["QLinearAdd", "QLinearMul"]:
        for dt in [U8, I8]:
            zps = dt == I8
            inits = [const("as", 0.05, F), const("bs", 0.03, F), const("cs", 0.08, F)]
            if True:
                inits += [const("az", zp_of(dt, 120), dt), const("bz", zp_of(dt, 131), dt),
                          const("cz", zp_of(dt, 128), dt)]
                names = ["A", "as", "az", "B", "bs", "bz", "cs", "cz"]
            tag = "s8_bcast" if zps else "u8"
            add(f"{op}_{tag}", model(op, ms(op, names, ["C"]),
                                     [vi("A", dt, [2, 3, 8]), vi("B", dt, [8] if zps else [2, 3, 8])],
                                     [vi("C", dt, [2, 3, 8])], inits), one_step)
    # Unary lookups.
    for op, attrs in [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.2})]:
        for dt in [U8, I8]:
            inits = [const("xs", 0.06, F), const("xz", zp_of(dt, 100), dt), const("ys", 0.004, F),
                     const("yz", zp_of(dt, 0) if op == "QLinearSigmoid" else zp_of(dt, 128), dt)]
            if op == "QLinearLeakyRelu":
                inits[2] = const("ys", 0.03, F)
            add(f"{op}_{'u8' if dt == U8 else 's8'}",
                model(op, ms(op, ["X", "xs", "xz", "ys", "yz"], ["Y"], **attrs),
                      [vi("X", dt, [2, 4, 5])], [vi("Y", dt, [2, 4, 5])], inits), one_step)
    # QLinearSoftmax: per-axis (opset attribute 13), flattened (opset attribute 11) in an
    # opset-13 model, per-axis on a non-last axis in an opset-11 model.
    for tag, dt, axis, sem, model_opset in [("u8_last", U8, -1, 13, 13), ("s8_flat_axis1", I8, 1, 11, 13),
                                            ("u8_axis1_model11", U8, 1, 13, 11)]:
        inits = [const("xs", 0.1, F), const("xz", zp_of(dt, 128), dt), const("ys", 1.0 / 256, F),
                 const("yz", zp_of(dt, 0), dt)]
        add(f"QLinearSoftmax_{tag}",
            model("QLinearSoftmax", ms("QLinearSoftmax", ["X", "xs", "xz", "ys", "yz"], ["Y"], axis=axis, opset=sem),
                  [vi("X", dt, [2, 3, 6])], [vi("Y", dt, [2, 3, 6])], inits, opset=model_opset), one_step)
    # Pools.
    for dt in [U8, I8]:
        for last in [0, 1]:
            shape = [1, 6, 7, 7] if not last else [1, 7, 7, 6]
            inits = [const("xs", 0.05, F), const("xz", zp_of(dt, 110), dt), const("ys", 0.04, F),
                     const("yz", zp_of(dt, 120), dt)]
            s = "u8" if dt == U8 else "s8"
            oshape = [1, 6, 1, 1] if not last else [1, 1, 1, 6]
            add(f"QLinearGlobalAveragePool_{s}_last{last}",
                model("gap", ms("QLinearGlobalAveragePool", ["X", "xs", "xz", "ys", "yz"], ["Y"], channels_last=last),
                      [vi("X", dt, shape)], [vi("Y", dt, oshape)], inits), one_step)
            pshape = [1, 6, 4, 4] if not last else [1, 4, 4, 6]
            add(f"QLinearAveragePool_{s}_last{last}",
                model("ap", ms("QLinearAveragePool", ["X", "xs", "xz", "ys", "yz"], ["Y"], channels_last=last,
                               kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                               count_include_pad=last),
                      [vi("X", dt, shape)], [vi("Y", dt, pshape)], inits), one_step)
    # QLinearConcat: three inputs with their own scales (one equal to the output's).
    for dt in [U8, I8]:
        inits = [const("ys", 0.05, F), const("yz", zp_of(dt, 128), dt)]
        ins = ["ys", "yz"]
        for k, (sc, z) in enumerate([(0.05, 128), (0.02, 100), (0.11, 140)]):
            inits += [const(f"s{k}", sc, F), const(f"z{k}", zp_of(dt, z), dt)]
            ins += [f"X{k}", f"s{k}", f"z{k}"]
        add(f"QLinearConcat_{'u8' if dt == U8 else 's8'}",
            model("cat", ms("QLinearConcat", ins, ["Y"], axis=1),
                  [vi(f"X{k}", dt, [2, k + 1, 3]) for k in range(3)], [vi("Y", dt, [2, 6, 3])], inits),
            one_step)
    # com.microsoft QLinearConv, channels last, per-channel int8 weights, int32 bias.
    for dt in [U8, I8]:
        w = qrand((4, 3, 3, 3), I8)
        inits = [const("xs", 0.05, F), const("xz", zp_of(dt, 120), dt), numpy_helper.from_array(w, "w"),
                 const("ws", rng.uniform(0.01, 0.03, 4), F), const("wz", np.zeros(4), I8),
                 const("ys", 0.5, F), const("yz", zp_of(dt, 128), dt),
                 const("b", rng.integers(-500, 500, 4), I32)]
        add(f"QLinearConv_nhwc_{'u8' if dt == U8 else 's8'}",
            model("conv", ms("QLinearConv", ["X", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["Y"],
                             channels_last=1, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
                  [vi("X", dt, [1, 5, 5, 3])], [vi("Y", dt, [1, 5, 5, 4])], inits), ["steps", 0])
    # QGemm: uint8 A, int8 per-column B, int32 C, requantized; float output with transB and
    # alpha; int8 A and B, transA, per-tensor, without C.
    a_dt = U8
    inits = [const("as", 0.02, F), const("az", 130, U8), numpy_helper.from_array(qrand((6, 5), I8), "B"),
             const("bs", rng.uniform(0.01, 0.02, 5), F), const("bz", np.zeros(5), I8),
             const("C", rng.integers(-300, 300, 5), I32), const("ys", 0.3, F), const("yz", 120, U8)]
    add("QGemm_u8s8_perchannel_bias_requant",
        model("qgemm", ms("QGemm", ["A", "as", "az", "B", "bs", "bz", "C", "ys", "yz"], ["Y"]),
              [vi("A", a_dt, [4, 6])], [vi("Y", U8, [4, 5])], inits), ["steps", 0])
    inits = [const("as", 0.02, F), const("az", 100, U8), numpy_helper.from_array(qrand((5, 6), U8), "B"),
             const("bs", 0.015, F), const("bz", 128, U8), const("C", rng.integers(-300, 300, (4, 5)), I32)]
    add("QGemm_u8u8_transB_alpha_float",
        model("qgemm", ms("QGemm", ["A", "as", "az", "B", "bs", "bz", "C"], ["Y"], transB=1, alpha=0.5),
              [vi("A", U8, [4, 6])], [vi("Y", F, [4, 5])], inits), ["rel", 1e-6])
    inits = [const("as", 0.02, F), const("az", 3, I8), numpy_helper.from_array(qrand((6, 5), I8), "B"),
             const("bs", 0.01, F), const("bz", 0, I8), const("ys", 0.2, F), const("yz", -5, I8)]
    add("QGemm_s8s8_transA_requant",
        model("qgemm", ms("QGemm", ["A", "as", "az", "B", "bs", "bz", "", "ys", "yz"], ["Y"], transA=1),
              [vi("A", I8, [6, 4])], [vi("Y", I8, [4, 5])], inits), ["steps", 0])
    # DynamicQuantizeMatMul: uint8 B with a zero point and a bias, 3-D A; int8 B per-column
    # scale, no zero point, no bias.
    inits = [numpy_helper.from_array(qrand((8, 5), U8), "B"), const("bs", 0.01, F), const("bz", 127, U8),
             const("bias", rng.standard_normal(5), F)]
    add("DynamicQuantizeMatMul_u8_zp_bias",
        model("dqmm", ms("DynamicQuantizeMatMul", ["A", "B", "bs", "bz", "bias"], ["Y"]),
              [vi("A", F, [2, 3, 8])], [vi("Y", F, [2, 3, 5])], inits), ["rel", 1e-6])
    inits = [numpy_helper.from_array(qrand((8, 5), I8), "B"), const("bs", rng.uniform(0.01, 0.02, 5), F)]
    add("DynamicQuantizeMatMul_s8_perchannel",
        model("dqmm", ms("DynamicQuantizeMatMul", ["A", "B", "bs"], ["Y"]),
              [vi("A", F, [3, 8])], [vi("Y", F, [3, 5])], inits), ["rel", 1e-6])
    # MatMulIntegerToFloat.
    inits = [numpy_helper.from_array(qrand((8, 5), U8), "B"), const("as", 0.03, F), const("bs", 0.01, F),
             const("az", 128, U8), const("bz", 120, U8), const("bias", rng.standard_normal(5), F)]
    add("MatMulIntegerToFloat_u8u8_zp_bias",
        model("mitf", ms("MatMulIntegerToFloat", ["A", "B", "as", "bs", "az", "bz", "bias"], ["Y"]),
              [vi("A", U8, [2, 3, 8])], [vi("Y", F, [2, 3, 5])], inits), ["rel", 1e-6])
    inits = [numpy_helper.from_array(qrand((8, 5), I8), "B"), const("as", 0.03, F),
             const("bs", rng.uniform(0.01, 0.02, 5), F)]
    add("MatMulIntegerToFloat_u8s8_perchannel",
        model("mitf", ms("MatMulIntegerToFloat", ["A", "B", "as", "bs"], ["Y"]),
              [vi("A", U8, [3, 8])], [vi("Y", F, [3, 5])], inits), ["rel", 1e-6])
    # DynamicQuantizeLSTM: forward, per-tensor uint8; bidirectional, per-channel int8, with
    # bias and initial state.
    for tag, dirs, dt, per_channel in [("fwd_u8", 1, U8, False), ("bidi_s8_perchannel", 2, I8, True)]:
        h, size = 6, 4
        sshape = (dirs, 4 * h) if per_channel else (dirs,)
        zp = np.full(sshape, zp_of(dt, 128 if dt == U8 else 128))
        inits = [numpy_helper.from_array(qrand((dirs, size, 4 * h), dt), "W"),
                 numpy_helper.from_array(qrand((dirs, h, 4 * h), dt), "R"),
                 const("Ws", rng.uniform(0.002, 0.004, sshape), F), const("Wz", zp, dt),
                 const("Rs", rng.uniform(0.002, 0.004, sshape), F), const("Rz", zp, dt),
                 const("B", rng.standard_normal((dirs, 8 * h)) * 0.1, F)]
        ins = ["X", "W", "R", "B", "", "", "", "", "Ws", "Wz", "Rs", "Rz"]
        inputs = [vi("X", F, [5, 2, size])]
        if dirs == 2:
            ins[5], ins[6] = "h0", "c0"
            inputs += [vi("h0", F, [dirs, 2, h]), vi("c0", F, [dirs, 2, h])]
        add(f"DynamicQuantizeLSTM_{tag}",
            model("dqlstm", ms("DynamicQuantizeLSTM", ins, ["Y", "Yh", "Yc"], hidden_size=h,
                               direction="bidirectional" if dirs == 2 else "forward"),
                  inputs, [vi("Y", F, [5, dirs, 2, h]), vi("Yh", F, [dirs, 2, h]), vi("Yc", F, [dirs, 2, h])],
                  inits), ["abs", 0.02])
    return out


def build(d):
    meta = {}
    for name, m, tol in cases():
        onnx.checker.check_model(m)
        path = os.path.join(d, name + ".onnx")
        onnx.save(m, path)
        meta[name] = tol
    with open(os.path.join(d, "cases.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)


def feeds_for(sess, seed=0, dims=None):
    r = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        if dims and len(dims) == len(shape):
            shape = list(dims)
        if i.type == "tensor(uint8)":
            feeds[i.name] = r.integers(0, 256, shape).astype(np.uint8)
        elif i.type == "tensor(int8)":
            feeds[i.name] = r.integers(-128, 128, shape).astype(np.int8)
        else:
            feeds[i.name] = r.standard_normal(shape).astype(np.float32)
    return feeds


def compare(a, b, tol, dims=None):
    import onnxruntime as ort
    kind, _limit = json.loads(tol)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    sa = ort.InferenceSession(a, so, providers=["CPUExecutionProvider"])
    sb = ort.InferenceSession(b, so, providers=["CPUExecutionProvider"])
    worst = 0.0
    for seed in range(3):
        feeds = feeds_for(sa, seed, dims)
        for x, y in zip(sa.run(None, feeds), sb.run(None, feeds)):
            assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
            if kind == "rel":
                e = float(d.max() / max(float(np.abs(x).max()), 1e-6)) if d.size else 0.0
            else:
                e = float(d.max()) if d.size else 0.0
            worst = max(worst, e)
    print(worst)


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2])
    elif sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]) if len(sys.argv) > 5 else None)
