"""The suite of `onnx-safeify probe`: small models, one node under test each (named `subject`),
for what the built-in rules and the WebGPU lab talk about, with their inputs.

    python cases.py OUT_DIR [--only OP_OR_CASE,...] [--node-tests CORPUS_DIR]

Writes OUT_DIR/NAME.onnx and OUT_DIR/NAME.npz per case and OUT_DIR/cases.json, a list of
{name, op, domain, family, fp16, model, inputs}. Deterministic: every case draws its inputs
and weights from its own fixed seed. With --node-tests, the ONNX backend node tests under
CORPUS_DIR (onnx_node_tests_*/.../model.onnx with test_data_set_0) are added as cases named
`node:TEST` (their inputs are the test's own .pb files; `_expanded` tests and tests with
string inputs are left out). Embedded in the onnx-safeify binary and run with the venv's
Python (onnx, numpy).
"""

import argparse
import glob
import json
import os
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

OPSET = 19
CASES = []


def case(name, family, nodes, inputs, outputs, inits=(), domains=(), fp16=False, opset=OPSET):
    """inputs: [(name, array)]; outputs: [(name, elem_type)]; nodes[...] has the subject."""
    CASES.append(dict(name=name, family=family, nodes=nodes, inputs=inputs, outputs=outputs,
                      inits=list(inits), domains=list(domains), fp16=fp16, opset=opset))


def rng(name):
    return np.random.RandomState(zlib.crc32(name.encode()) & 0x7FFFFFFF)


def tensor(name, a):
    return numpy_helper.from_array(np.ascontiguousarray(a), name)


def f32(r, *shape):
    return r.uniform(-1, 1, shape).astype(np.float32)


def subject(op, ins, outs, domain="", **attrs):
    return h.make_node(op, ins, outs, name="subject", domain=domain, **attrs)


def conv_cases():
    for c, k, group in [(8, 3, 8), (64, 3, 64), (128, 3, 128), (64, 5, 64), (128, 5, 128),
                        (32, 7, 32), (32, 3, 4), (64, 5, 8), (16, 3, 1)]:
        kind = "depthwise" if group == c else ("grouped" if group > 1 else "plain")
        name = f"conv_{kind}_c{c}_k{k}" + (f"_g{group}" if kind == "grouped" else "")
        r = rng(name)
        w = r.uniform(-0.3, 0.3, (c, c // group, k, k)).astype(np.float32)
        b = r.uniform(-0.1, 0.1, (c,)).astype(np.float32)
        case(name, "conv",
             [subject("Conv", ["x", "w", "b"], ["y"], group=group, kernel_shape=[k, k],
                      pads=[k // 2] * 4)],
             [("x", f32(r, 1, c, 16, 16))], [("y", T.FLOAT)], [tensor("w", w), tensor("b", b)])


def resize_cases():
    specs = [
        ("resize_nearest_up2", [1, 3, 8, 8], [1, 1, 2, 2], dict(mode="nearest")),
        ("resize_linear_up2", [1, 3, 8, 8], [1, 1, 2, 2], dict(mode="linear")),
        ("resize_cubic_up2", [1, 3, 8, 8], [1, 1, 2, 2], dict(mode="cubic")),
        ("resize_linear_down2", [1, 3, 16, 16], [1, 1, 0.5, 0.5], dict(mode="linear")),
        ("resize_linear_down2_antialias", [1, 3, 16, 16], [1, 1, 0.5, 0.5],
         dict(mode="linear", antialias=1)),
        ("resize_cubic_down2_antialias", [1, 3, 16, 16], [1, 1, 0.5, 0.5],
         dict(mode="cubic", antialias=1)),
        ("resize_linear_rank3", [1, 8, 16], [1, 1, 2], dict(mode="linear")),
        ("resize_linear_rank2", [8, 16], [2, 2], dict(mode="linear")),
        ("resize_nearest_rank5", [1, 2, 4, 4, 4], [1, 1, 2, 2, 2], dict(mode="nearest")),
        ("resize_linear_align_corners", [1, 3, 8, 8], [1, 1, 2, 2],
         dict(mode="linear", coordinate_transformation_mode="align_corners")),
    ]
    for name, shape, scales, attrs in specs:
        r = rng(name)
        case(name, "resize", [subject("Resize", ["x", "", "scales"], ["y"], **attrs)],
             [("x", f32(r, *shape))], [("y", T.FLOAT)],
             [tensor("scales", np.array(scales, np.float32))])


def batchnorm_cases():
    c = 4
    for training in (0, 1):
        name = "batchnorm_training" if training else "batchnorm_inference"
        r = rng(name)
        inits = [tensor("scale", (r.rand(c) + 0.5).astype(np.float32)),
                 tensor("bias", f32(r, c)), tensor("mean", f32(r, c)),
                 tensor("var", (r.rand(c) + 0.5).astype(np.float32))]
        outs = ["y", "running_mean", "running_var"] if training else ["y"]
        attrs = dict(training_mode=1, momentum=0.9) if training else {}
        case(name, "batchnorm",
             [subject("BatchNormalization", ["x", "scale", "bias", "mean", "var"], outs, **attrs)],
             [("x", f32(r, 2, c, 5, 5))], [(o, T.FLOAT) for o in outs], inits)


def reduce_cases():
    for op in ["ReduceMax", "ReduceMin", "ReduceSum"]:
        for empty in (False, True):
            name = f"reduce_{op[6:].lower()}_{'empty' if empty else 'axis1'}"
            r = rng(name)
            shape = [2, 0, 4] if empty else [3, 4, 5]
            case(name, "reduce", [subject(op, ["x", "axes"], ["y"], keepdims=1)],
                 [("x", f32(r, *shape))], [("y", T.FLOAT)],
                 [tensor("axes", np.array([1], np.int64))])


def index_cases():
    r = rng("gather_axis0")
    case("gather_axis0", "index", [subject("Gather", ["data", "idx"], ["y"], axis=0)],
         [("data", f32(r, 10, 4)), ("idx", np.array([0, 9, -1, 3], np.int64))], [("y", T.FLOAT)])
    r = rng("gather_axis1")
    case("gather_axis1", "index", [subject("Gather", ["data", "idx"], ["y"], axis=1)],
         [("data", f32(r, 4, 10)), ("idx", np.array([[1, 2, 3], [9, 0, -2]], np.int64))],
         [("y", T.FLOAT)])
    r = rng("gathernd")
    case("gathernd", "index", [subject("GatherND", ["data", "idx"], ["y"])],
         [("data", f32(r, 4, 5, 6)), ("idx", np.array([[0, 1], [3, 4], [2, 0]], np.int64))],
         [("y", T.FLOAT)])
    r = rng("gather_elements")
    case("gather_elements", "index", [subject("GatherElements", ["data", "idx"], ["y"], axis=1)],
         [("data", f32(r, 4, 5)), ("idx", r.randint(0, 5, (4, 3)).astype(np.int64))],
         [("y", T.FLOAT)])
    r = rng("scatternd")
    case("scatternd", "index", [subject("ScatterND", ["data", "idx", "upd"], ["y"])],
         [("data", f32(r, 8, 4)), ("idx", np.array([[1], [6], [3]], np.int64)),
          ("upd", f32(r, 3, 4))], [("y", T.FLOAT)])
    r = rng("topk")
    x = r.permutation(4 * 32).reshape(4, 32).astype(np.float32)  # no ties
    case("topk", "index", [subject("TopK", ["x", "k"], ["values", "indices"], axis=-1)],
         [("x", x), ("k", np.array([5], np.int64))], [("values", T.FLOAT), ("indices", T.INT64)])


def fp16_cases():
    for dt, suffix, npt, et in [(False, "fp32", np.float32, T.FLOAT),
                                (True, "fp16", np.float16, T.FLOAT16)]:
        name = f"add_{suffix}"
        r = rng(name)
        case(name, "float", [subject("Add", ["a", "b"], ["y"])],
             [("a", f32(r, 4, 64).astype(npt)), ("b", f32(r, 4, 64).astype(npt))], [("y", et)],
             fp16=dt)
        name = f"matmul_{suffix}"
        r = rng(name)
        case(name, "float", [subject("MatMul", ["a", "b"], ["y"])],
             [("a", f32(r, 8, 32).astype(npt)), ("b", f32(r, 32, 16).astype(npt))], [("y", et)],
             fp16=dt)
        name = f"softmax_{suffix}"
        r = rng(name)
        case(name, "float", [subject("Softmax", ["x"], ["y"], axis=-1)],
             [("x", (f32(r, 4, 64) * 4).astype(npt))], [("y", et)], fp16=dt)
        name = f"layernorm_{suffix}"
        r = rng(name)
        case(name, "float",
             [subject("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
             [("x", f32(r, 4, 64).astype(npt))], [("y", et)],
             [tensor("g", (r.rand(64) + 0.5).astype(npt)), tensor("b", f32(r, 64).astype(npt))],
             fp16=dt)


def contrib_cases():
    ms = [("com.microsoft", 1)]
    hidden = 32
    r = rng("skip_layernorm")
    case("skip_layernorm", "contrib",
         [subject("SkipLayerNormalization", ["x", "skip", "g", "b"], ["y"],
                  domain="com.microsoft", epsilon=1e-5)],
         [("x", f32(r, 1, 8, hidden)), ("skip", f32(r, 1, 8, hidden))], [("y", T.FLOAT)],
         [tensor("g", (r.rand(hidden) + 0.5).astype(np.float32)), tensor("b", f32(r, hidden))], ms)
    r = rng("gelu_contrib")
    case("gelu_contrib", "contrib", [subject("Gelu", ["x"], ["y"], domain="com.microsoft")],
         [("x", f32(r, 4, 64) * 3)], [("y", T.FLOAT)], domains=ms)
    r = rng("attention")
    case("attention", "contrib",
         [subject("Attention", ["x", "w", "bias"], ["y"], domain="com.microsoft", num_heads=4)],
         [("x", f32(r, 1, 8, hidden))], [("y", T.FLOAT)],
         [tensor("w", (f32(r, hidden, 3 * hidden) * 0.3)), tensor("bias", f32(r, 3 * hidden) * 0.1)],
         ms)
    r = rng("qlinearconv")
    c = 8
    w = r.randint(0, 256, (c, c, 3, 3)).astype(np.uint8)
    case("qlinearconv", "contrib",
         [subject("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                  pads=[1, 1, 1, 1])],
         [("x", r.randint(0, 256, (1, c, 8, 8)).astype(np.uint8))], [("y", T.UINT8)],
         [tensor("xs", np.array(0.02, np.float32)), tensor("xz", np.array(128, np.uint8)),
          tensor("w", w), tensor("ws", np.array(0.01, np.float32)),
          tensor("wz", np.array(128, np.uint8)), tensor("ys", np.array(0.5, np.float32)),
          tensor("yz", np.array(100, np.uint8))])


def large_cases():
    r = rng("matmul_large")
    case("matmul_large", "large", [subject("MatMul", ["a", "b"], ["y"])],
         [("a", f32(r, 512, 1024))], [("y", T.FLOAT)], [tensor("b", f32(r, 1024, 1024) * 0.05)])


def build(out, only):
    conv_cases()
    resize_cases()
    batchnorm_cases()
    reduce_cases()
    index_cases()
    fp16_cases()
    contrib_cases()
    large_cases()
    listed = []
    for c in CASES:
        sub = c["nodes"][0]
        if only and sub.op_type.lower() not in only and c["name"].lower() not in only:
            continue
        elem = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float16): T.FLOAT16,
                np.dtype(np.int64): T.INT64, np.dtype(np.uint8): T.UINT8}
        g = h.make_graph(
            c["nodes"], c["name"],
            [h.make_tensor_value_info(n, elem[a.dtype], list(a.shape)) for n, a in c["inputs"]],
            [h.make_tensor_value_info(n, t, None) for n, t in c["outputs"]],
            c["inits"])
        opsets = [h.make_opsetid("", c["opset"])] + [h.make_opsetid(d, v) for d, v in c["domains"]]
        m = h.make_model(g, opset_imports=opsets, producer_name="onnx-safeify probe")
        m.ir_version = 9
        path = os.path.join(out, c["name"] + ".onnx")
        onnx.save(m, path)
        npz = os.path.join(out, c["name"] + ".npz")
        np.savez(npz, **dict(c["inputs"]))
        listed.append(dict(name=c["name"], op=sub.op_type, domain=sub.domain, family=c["family"],
                           fp16=c["fp16"], model=path, inputs=npz))
    return listed


def node_tests(corpus, only):
    listed = []
    models = sorted(glob.glob(os.path.join(corpus, "onnx_node_tests_*", "**", "model.onnx"),
                              recursive=True))
    for path in models:
        test = os.path.basename(os.path.dirname(path))
        if test.endswith("_expanded") or "_expanded_" in test:
            continue
        data = os.path.join(os.path.dirname(path), "test_data_set_0")
        if not os.path.isdir(data):
            continue
        try:
            m = onnx.load(path)
        except Exception:
            continue
        if not m.graph.node:
            continue
        node = m.graph.node[0]
        if only and node.op_type.lower() not in only and ("node:" + test).lower() not in only:
            continue
        inits = {i.name for i in m.graph.initializer}
        if any(i.type.tensor_type.elem_type == T.STRING for i in m.graph.input
               if i.name not in inits) or any(not i.type.HasField("tensor_type")
                                             for i in m.graph.input):
            continue
        fp16 = any(i.type.tensor_type.elem_type in (T.FLOAT16, T.BFLOAT16) for i in m.graph.input)
        listed.append(dict(name="node:" + test, op=node.op_type, domain=node.domain,
                           family="node-test", fp16=fp16, model=os.path.abspath(path),
                           inputs=os.path.abspath(data)))
    return listed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    ap.add_argument("--node-tests", default="")
    a = ap.parse_args()
    only = {o.strip().lower() for o in a.only.split(",") if o.strip()}
    os.makedirs(a.out, exist_ok=True)
    listed = build(a.out, only)
    if a.node_tests:
        listed += node_tests(a.node_tests, only)
    with open(os.path.join(a.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(listed, f, indent=1)
    print(len(listed), file=sys.stderr)


if __name__ == "__main__":
    main()
