#!/usr/bin/env python3
"""Blocked DequantizeLinear models (opset 21, block_size > 0), for the DirectML form of the
blocked dequantization (src/rewrite/unfuse/dequantize.rs) and its tests.

    make_blocked_dq.py build DIR        write the cases into DIR, and DIR/cases.json
    make_blocked_dq.py compare A B      run A and B on ONNX Runtime CPU on the same seeded
                                        inputs; print JSON {"max_abs": ..., "bit_identical": ...}

Two kinds of case:
  * `dq_*`: one DequantizeLinear whose output is the graph output (the dequantized tensor
    itself is compared, bit for bit), over int4/uint4/int8/uint8 data, with and without a zero
    point, float32 and float16 scales, axis 0, 1 and -1, K a multiple of block_size or not, and
    data that is an initializer or a graph input;
  * `mm_*`: a small int4 model as ONNX Runtime's blocked QDQ quantization writes it: each
    weight [K, N] int4/uint4 blocked along K (axis 0), DequantizeLinear -> MatMul, two layers
    with a Relu between them.

cases.json maps each case to {"data_is_initializer": bool, "four_bit": bool, "runnable": bool}.

`compare` runs with graph optimizations off (as `verify` checks a class): at ONNX Runtime's
default level its CPU fuses the original's DequantizeLinear -> MatMul into MatMulNBits, which
computes differently (mm_int4_b32: 9.0 off at an output scale of 843, ORT 1.32).
"""

import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 21
IR = 10
SEED = 46

INT_RANGE = {
    TensorProto.INT4: (-8, 7),
    TensorProto.UINT4: (0, 15),
    TensorProto.INT8: (-128, 127),
    TensorProto.UINT8: (0, 255),
}
NP_OF = {
    TensorProto.INT4: np.int8,
    TensorProto.UINT4: np.uint8,
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
}


def ints(rng, dt, shape):
    lo, hi = INT_RANGE[dt]
    return rng.integers(lo, hi + 1, size=shape).astype(NP_OF[dt])


def tensor(name, dt, arr):
    # make_tensor packs int4/uint4 (two to a byte, the first in the low bits).
    return helper.make_tensor(name, dt, list(arr.shape), arr.flatten().tolist())


def scales(rng, shape, f16):
    s = (rng.random(shape) * 0.09 + 0.01).astype(np.float32)
    # Some scales with many significant bits, some tiny, some large.
    s.flat[0] = np.float32(0.1234567)
    if s.size > 2:
        s.flat[1] = np.float32(3.0e-5)
        s.flat[2] = np.float32(17.77)
    return s.astype(np.float16) if f16 else s


def dq_case(name, rng, dt, shape, axis, block, zp, f16, data_input):
    ax = axis % len(shape)
    sshape = list(shape)
    sshape[ax] = -(-shape[ax] // block)
    x = ints(rng, dt, shape)
    s = scales(rng, sshape, f16)
    sdt = TensorProto.FLOAT16 if f16 else TensorProto.FLOAT
    inits = [helper.make_tensor("scale", sdt, sshape, s.flatten().tolist())]
    if f16:
        inits[0] = onnx.numpy_helper.from_array(s, "scale")
    ins = ["x", "scale"]
    if zp:
        inits.append(tensor("zp", dt, ints(rng, dt, sshape)))
        ins.append("zp")
    graph_inputs, nodes = [], []
    if data_input:
        graph_inputs.append(helper.make_tensor_value_info("x", dt, list(shape)))
    else:
        inits.append(tensor("x", dt, x))
    nodes.append(
        helper.make_node("DequantizeLinear", ins, ["y"], name="dq", axis=axis, block_size=block)
    )
    g = helper.make_graph(
        nodes,
        name,
        graph_inputs,
        [helper.make_tensor_value_info("y", sdt, list(shape))],
        initializer=inits,
    )
    return g


def mm_case(name, rng, dt, k, n, block, zp, f16):
    fdt = TensorProto.FLOAT16 if f16 else TensorProto.FLOAT
    inits, nodes = [], []
    prev = "a"
    dims = [k, n, n]
    for layer in range(2):
        kk, nn = dims[layer], dims[layer + 1]
        w = ints(rng, dt, (kk, nn))
        blocks = -(-kk // block)
        s = scales(rng, (blocks, nn), f16) * (1.0 / 8)
        s = s.astype(np.float16 if f16 else np.float32)
        inits.append(tensor(f"w{layer}", dt, w))
        inits.append(onnx.numpy_helper.from_array(s, f"s{layer}"))
        ins = [f"w{layer}", f"s{layer}"]
        if zp:
            inits.append(tensor(f"z{layer}", dt, ints(rng, dt, (blocks, nn))))
            ins.append(f"z{layer}")
        nodes.append(
            helper.make_node(
                "DequantizeLinear",
                ins,
                [f"wf{layer}"],
                name=f"dq{layer}",
                axis=0,
                block_size=block,
            )
        )
        nodes.append(
            helper.make_node("MatMul", [prev, f"wf{layer}"], [f"m{layer}"], name=f"mm{layer}")
        )
        prev = f"m{layer}"
        if layer == 0:
            nodes.append(helper.make_node("Relu", [prev], ["r0"], name="relu0"))
            prev = "r0"
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("a", fdt, [1, 4, k])],
        [helper.make_tensor_value_info(prev, fdt, [1, 4, n])],
        initializer=inits,
    )
    return g


def save(graph, path):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = IR
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)


def build(out):
    rng = np.random.default_rng(SEED)
    I4, U4, I8, U8 = TensorProto.INT4, TensorProto.UINT4, TensorProto.INT8, TensorProto.UINT8
    cases = {}
    dq = [
        # name, dtype, shape, axis, block, zp, f16, data is a graph input
        ("dq_int4_zp_axis1", I4, (8, 64), 1, 16, True, False, False),
        ("dq_uint4_axis1_k40", U4, (6, 40), 1, 16, False, False, False),
        ("dq_uint4_zp_axis1_k40", U4, (6, 40), 1, 16, True, False, False),
        ("dq_int4_zp_axis0_k50_f16", I4, (50, 6), 0, 32, True, True, False),
        ("dq_uint4_zp_rank3_axis_last", U4, (2, 3, 37), -1, 8, True, False, False),
        ("dq_int8_zp_axis1_k72", I8, (5, 72), 1, 32, True, False, False),
        ("dq_uint8_zp_axis0_f16", U8, (33, 4), 0, 16, True, True, False),
        ("dq_uint8_zp_input", U8, (4, 48), 1, 16, True, False, True),
        ("dq_int8_input_k20", I8, (3, 20), 1, 8, False, False, True),
        ("dq_int4_input", I4, (4, 32), 1, 16, False, False, True),
    ]
    for name, dt, shape, axis, block, zp, f16, data_input in dq:
        save(dq_case(name, rng, dt, shape, axis, block, zp, f16, data_input), f"{out}/{name}.onnx")
        four = dt in (I4, U4)
        cases[name] = {
            "data_is_initializer": not data_input,
            "four_bit": four,
            # ONNX Runtime's Python API takes no 4-bit arrays to feed.
            "runnable": not (four and data_input),
        }
    mm = [
        ("mm_int4_b32", I4, 64, 48, 32, False, False),
        ("mm_uint4_zp_b16_k40", U4, 40, 24, 16, True, False),
        ("mm_uint4_zp_b32_f16", U4, 96, 32, 32, True, True),
    ]
    for name, dt, k, n, block, zp, f16 in mm:
        save(mm_case(name, rng, dt, k, n, block, zp, f16), f"{out}/{name}.onnx")
        cases[name] = {"data_is_initializer": True, "four_bit": True, "runnable": True}
    with open(f"{out}/cases.json", "w") as f:
        json.dump(cases, f, indent=1, sort_keys=True)


def run(path, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.layer_assignment_settings", "cpu(safeify_cpu)")
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def feeds_for(path):
    m = onnx.load(path)
    rng = np.random.default_rng(SEED + 1)
    feeds = {}
    for i in m.graph.input:
        t = i.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type in INT_RANGE:
            lo, hi = INT_RANGE[t.elem_type]
            arr = rng.integers(lo, hi + 1, size=shape).astype(NP_OF[t.elem_type])
        else:
            np_t = np.float16 if t.elem_type == TensorProto.FLOAT16 else np.float32
            arr = (rng.standard_normal(shape) * 2).astype(np_t)
        feeds[i.name] = arr
    return feeds


def compare(a, b):
    feeds = feeds_for(a)
    ya, yb = run(a, feeds), run(b, feeds)
    worst, same = 0.0, True
    for p, q in zip(ya, yb):
        if p.shape != q.shape or p.dtype != q.dtype:
            same = False
            worst = float("inf")
            continue
        worst = max(worst, float(np.max(np.abs(p.astype(np.float64) - q.astype(np.float64)))))
        same = same and p.tobytes() == q.tobytes()
    print(json.dumps({"max_abs": worst, "bit_identical": same}))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "build":
        build(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
