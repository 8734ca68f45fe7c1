#!/usr/bin/env python3
"""A small model with silero-vad's squeeze-if (issue 48 item 5), from a fixed seed.

    make_squeeze_if.py OUT.onnx

torch's `squeeze(dim)` exports as If(Equal(Gather(Shape(x), k), 1)) {Squeeze(x, k)} else
{Identity(x)}: the If's output has rank 2 or 3 depending on the input length, so its rank is
unknown to any analysis that does not fix the length. The model (opset 15, input `x` [B, L]):

    encoder: Unsqueeze(x, 1) -> Conv 1->16 (k 8, stride 4) -> Relu -> Conv 16->16 (k 3, pad 1) = h
    squeeze-if on h's time axis (2) -> v                           (rank 2 when T = 1, else 3)
    If(T < 2^20) {Unsqueeze(v, -1) -> Relu -> ReduceMean(axis 1, keepdims 0)}
                 else {Relu(v) -> ReduceMean(axis 1, keepdims 0)} = r  (rank unknown)
      (silero's decoder reads the squeeze-if's output inside another If, its LSTM's)
    ReduceSum(r, all axes, keepdims 0) = s                         (a scalar: rank known)
    y = Mul(h, s)                                                  (rank 3: GPU work again)
    outputs: y, s

T = 1 for L in 8..11; L = 512 gives T = 127. The encoder convolutions are the heavy work; the
squeeze-if and what reads its unknown-rank values are what OpenVINO cannot compile.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h


def make():
    rng = np.random.default_rng(48)
    inits = [
        h.make_tensor("w1", T.FLOAT, [16, 1, 8], (rng.standard_normal(128) * 0.3).astype(np.float32)),
        h.make_tensor("b1", T.FLOAT, [16], (rng.standard_normal(16) * 0.1).astype(np.float32)),
        h.make_tensor("w2", T.FLOAT, [16, 16, 3], (rng.standard_normal(768) * 0.2).astype(np.float32)),
        h.make_tensor("b2", T.FLOAT, [16], (rng.standard_normal(16) * 0.1).astype(np.float32)),
        h.make_tensor("ax1", T.INT64, [1], [1]),
        h.make_tensor("ax2", T.INT64, [1], [2]),
        h.make_tensor("axm1", T.INT64, [1], [-1]),
        h.make_tensor("two", T.INT64, [], [2]),
        h.make_tensor("one", T.INT64, [], [1]),
        h.make_tensor("big", T.INT64, [], [1 << 20]),
    ]
    then_g = h.make_graph(
        [h.make_node("Squeeze", ["h", "ax2"], ["sq"], name="dec/Squeeze")], "then", [],
        [h.make_tensor_value_info("sq", T.FLOAT, ["B", 16])])
    else_g = h.make_graph(
        [h.make_node("Identity", ["h"], ["id"], name="dec/Identity")], "else", [],
        [h.make_tensor_value_info("id", T.FLOAT, ["B", 16, "T"])])

    def mean_g(name, unsqueeze):
        # What silero's decoder does: the value of unknown rank is read inside another If.
        first = (h.make_node("Unsqueeze", ["v", "axm1"], [name + "_u"], name=f"dec/{name}/Unsqueeze")
                 if unsqueeze else h.make_node("Identity", ["v"], [name + "_u"], name=f"dec/{name}/Identity"))
        return h.make_graph(
            [first,
             h.make_node("Relu", [name + "_u"], [name + "_r"], name=f"dec/{name}/Relu"),
             h.make_node("ReduceMean", [name + "_r"], [name + "_m"], name=f"dec/{name}/ReduceMean",
                         axes=[1], keepdims=0)],
            name, [], [h.make_tensor_value_info(name + "_m", T.FLOAT, None)])

    nodes = [
        h.make_node("Unsqueeze", ["x", "ax1"], ["x3"], name="enc/Unsqueeze"),
        h.make_node("Conv", ["x3", "w1", "b1"], ["c1"], name="enc/Conv1", kernel_shape=[8],
                    strides=[4]),
        h.make_node("Relu", ["c1"], ["r1"], name="enc/Relu"),
        h.make_node("Conv", ["r1", "w2", "b2"], ["h"], name="enc/Conv2", kernel_shape=[3],
                    pads=[1, 1]),
        h.make_node("Shape", ["h"], ["hs"], name="dec/Shape"),
        h.make_node("Gather", ["hs", "two"], ["t"], name="dec/Gather", axis=0),
        h.make_node("Equal", ["t", "one"], ["cond"], name="dec/Equal"),
        h.make_node("If", ["cond"], ["v"], name="dec/If", then_branch=then_g,
                    else_branch=else_g),
        h.make_node("Less", ["t", "big"], ["short"], name="dec/Less"),
        h.make_node("If", ["short"], ["r"], name="dec/If_1", then_branch=mean_g("then", True),
                    else_branch=mean_g("else", False)),
        h.make_node("ReduceSum", ["r"], ["s"], name="dec/ReduceSum", keepdims=0),
        h.make_node("Mul", ["h", "s"], ["y"], name="out/Mul"),
    ]
    g = h.make_graph(
        nodes, "squeeze_if",
        [h.make_tensor_value_info("x", T.FLOAT, ["B", "L"])],
        [h.make_tensor_value_info("y", T.FLOAT, ["B", 16, "T"]),
         h.make_tensor_value_info("s", T.FLOAT, [])],
        inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 15)], producer_name="make_squeeze_if")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    onnx.save(make(), sys.argv[1])
