"""Tiny models, one per shipped rule, each built so that exactly that rule fires.

Usage: python make_rule_models.py OUT_DIR   (run by tests/rule_snapshots.rs in the corpus venv)
"""
import sys
import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

out = sys.argv[1]
rng = np.random.default_rng(7)


def save(name, nodes, inputs, outputs, inits=(), opset=17, extra_opsets=(), ir=8):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), *extra_opsets],
                     producer_name="onnx-safeify tests")
    m.ir_version = ir
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, f"{out}/{name}.onnx")


def w(name, *shape):
    return nh.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)


f = lambda n, *s: h.make_tensor_value_info(n, T.FLOAT, list(s))

# split-depthwise: a 96-channel depthwise conv.
save("split_depthwise",
     [h.make_node("Conv", ["x", "w", "b"], ["y"], name="dw", group=96, kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
     [f("x", 1, 96, 8, 8)], [f("y", 1, 96, 8, 8)], [w("w", 96, 1, 3, 3), w("b", 96)])

# unfuse-contrib: a com.microsoft FusedConv with Relu.
save("unfuse_contrib",
     [h.make_node("FusedConv", ["x", "w", "b"], ["y"], name="fused", domain="com.microsoft",
                  activation="Relu", kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
     [f("x", 1, 4, 8, 8)], [f("y", 1, 8, 8, 8)], [w("w", 8, 4, 3, 3), w("b", 8)],
     extra_opsets=[h.make_opsetid("com.microsoft", 1)])

# int64-indices-on-cpu: Gather with indices computed at run time (ArgMax).
save("int64_indices",
     [h.make_node("ArgMax", ["s"], ["idx"], name="argmax", axis=1, keepdims=0),
      h.make_node("Gather", ["table", "idx"], ["y"], name="gather", axis=0)],
     [f("s", 3, 5)], [f("y", 3, 4)], [w("table", 5, 4)])

# topk-on-cpu
save("topk",
     [h.make_node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=1)],
     [f("x", 2, 6)], [f("v", 2, 3), h.make_tensor_value_info("i", T.INT64, [2, 3])],
     [nh.from_array(np.array([3], dtype=np.int64), "k")])

# dynamic-resize-on-cpu: Resize whose sizes come from the input's shape.
save("dynamic_resize",
     [h.make_node("Shape", ["x"], ["shp"], name="shape"),
      h.make_node("Mul", ["shp", "two"], ["sizes"], name="double"),
      h.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="resize", mode="nearest")],
     [f("x", 1, 2, "H", "W")], [f("y", 1, 2, None, None)],
     [nh.from_array(np.array([1, 1, 2, 2], dtype=np.int64), "two")])

# nonzero-on-cpu
save("nonzero",
     [h.make_node("NonZero", ["x"], ["y"], name="nonzero")],
     [f("x", 3, 4)], [h.make_tensor_value_info("y", T.INT64, [2, None])])

# control-flow-on-cpu: an If on a data-dependent condition.
then_g = h.make_graph([h.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [], [f("t", 2, 3)])
else_g = h.make_graph([h.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [], [f("e", 2, 3)])
save("control_flow",
     [h.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
      h.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
      h.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)],
     [f("x", 2, 3)], [f("y", 2, 3)], [nh.from_array(np.array(0.0, dtype=np.float32), "zero")])

# float64-on-cpu
save("float64",
     [h.make_node("Cast", ["x"], ["d"], name="to_double", to=T.DOUBLE),
      h.make_node("Sqrt", ["d"], ["r"], name="sqrt"),
      h.make_node("Cast", ["r"], ["y"], name="to_float", to=T.FLOAT)],
     [f("x", 4)], [f("y", 4)])

# barrier-heavy-dispatch: two big convs (each ~4.8e9 operations at 256x256).
save("barrier",
     [h.make_node("Conv", ["x", "w1"], ["a"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
      h.make_node("Relu", ["a"], ["r"], name="relu"),
      h.make_node("Conv", ["r", "w2"], ["y"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
     [f("x", 1, 64, 256, 256)], [f("y", 1, 64, 256, 256)], [w("w1", 64, 64, 3, 3), w("w2", 64, 64, 3, 3)])

# unfuse-missing-kernel: an ONNX Gelu-20 (DirectML has no Gelu kernel), between two Adds so
# that the decomposition sits inside a graph.
save("missing_kernel_gelu",
     [h.make_node("Add", ["x", "x"], ["a"], name="pre"),
      h.make_node("Gelu", ["a"], ["g"], name="gelu"),
      h.make_node("Add", ["g", "x"], ["y"], name="post")],
     [f("x", 2, 8)], [f("y", 2, 8)], opset=20, ir=9)

# missing-kernel-on-cpu: Det (DirectML registers none; the CPU provider has Det-11).
save("missing_kernel_det",
     [h.make_node("Add", ["x", "x"], ["a"], name="pre"),
      h.make_node("Det", ["a"], ["y"], name="det")],
     [f("x", 2, 3, 3)], [f("y", 2)])
