"""Builds the WebGPU hazard lab models (tests/webgpu_lab.rs, docs/webgpu-lab.md).

    python tests/data/webgpu_lab/make_models.py     # with onnx installed (the test venv)

One small model per rule of the `webgpu` target (rules/webgpu.yaml), each holding only the
pattern the rule is about. Weights come from a fixed seed, so the files are reproducible.
"""

import os

import numpy as np
import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
RNG = np.random.default_rng(15)


def save(name, nodes, inputs, outputs, inits, opsets):
    # The pattern's first output goes through a Neg ("after"), which WebGPU runs: the placement
    # that ONNX Runtime logs is then mixed, and mixed placements list the CPU nodes by name.
    first = outputs[0].name
    for n in nodes:
        n.output[:] = [o + "_pre" if o == first else o for o in n.output]
        n.input[:] = [i + "_pre" if i == first else i for i in n.input]
    nodes = list(nodes) + [helper.make_node("Neg", [first + "_pre"], [first], name="after")]
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
        producer_name="onnx-safeify webgpu lab",
    )
    model.ir_version = 9
    if all(d in ("",) for d, _ in opsets):
        onnx.checker.check_model(model, full_check=True)
    onnx.save(model, os.path.join(HERE, name + ".onnx"))


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def resize_linear_rank3():
    # resize-linear-not-4d-on-cpu: bilinear Resize of a rank-3 tensor (width axis 2).
    save(
        "resize_linear_rank3",
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize",
                          mode="linear", coordinate_transformation_mode="half_pixel")],
        [f32("x", [1, 8, 16])],
        [f32("y", [1, 8, 32])],
        [helper.make_tensor("scales", TensorProto.FLOAT, [3], [1.0, 1.0, 2.0])],
        [("", 19)],
    )


def resize_antialias():
    # resize-antialias-on-cpu: a downscaling linear Resize with antialias=1 (opset 18+),
    # the form torchvision's resize(antialias=True) exports.
    save(
        "resize_antialias",
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize",
                          mode="linear", antialias=1)],
        [f32("x", [1, 3, 16, 16])],
        [f32("y", [1, 3, 8, 8])],
        [helper.make_tensor("scales", TensorProto.FLOAT, [4], [1.0, 1.0, 0.5, 0.5])],
        [("", 19)],
    )


def dft_odd():
    # dft-on-cpu: a one-sided real DFT over an odd-sized axis (63), then the inverse back to
    # 63 samples, the rfft/irfft pair of a Fourier convolution.
    save(
        "dft_odd",
        [
            helper.make_node("DFT", ["x", "", "axis"], ["spec"], name="rfft", onesided=1),
            helper.make_node("DFT", ["spec", "n", "axis"], ["y"], name="irfft",
                             inverse=1, onesided=1),
        ],
        [f32("x", [1, 63, 1])],
        [f32("y", [1, 63, 1])],
        [
            helper.make_tensor("axis", TensorProto.INT64, [], [1]),
            helper.make_tensor("n", TensorProto.INT64, [], [63]),
        ],
        [("", 20)],
    )


def qmoe(name, activation):
    # qmoe-on-cpu: 8-bit QMoE, 4 experts, top-2, hidden 32, intermediate 32.
    experts, hidden, inter, tokens = 4, 32, 32, 5
    fusion = 2 if activation == "swiglu" else 1
    attrs = dict(k=2, activation_type=activation, expert_weight_bits=8,
                 normalize_routing_weights=0)
    if activation == "swiglu":
        attrs["swiglu_fusion"] = 1
    inits = [
        helper.make_tensor("w1", TensorProto.UINT8, [experts, fusion * inter, hidden],
                           RNG.integers(0, 256, (experts, fusion * inter, hidden)).flatten().tolist()),
        helper.make_tensor("s1", TensorProto.FLOAT, [experts, fusion * inter],
                           (RNG.random((experts, fusion * inter)) * 0.02).flatten().tolist()),
        helper.make_tensor("w2", TensorProto.UINT8, [experts, hidden, inter],
                           RNG.integers(0, 256, (experts, hidden, inter)).flatten().tolist()),
        helper.make_tensor("s2", TensorProto.FLOAT, [experts, hidden],
                           (RNG.random((experts, hidden)) * 0.02).flatten().tolist()),
    ]
    save(
        name,
        [helper.make_node("QMoE", ["x", "router", "w1", "s1", "", "w2", "s2"], ["y"],
                          name="qmoe", domain="com.microsoft", **attrs)],
        [f32("x", [tokens, hidden]), f32("router", [tokens, experts])],
        [f32("y", [tokens, hidden])],
        inits,
        [("", 17), ("com.microsoft", 1)],
    )


def batchnorm_training():
    # batchnorm-training-on-cpu: BatchNormalization with training_mode=1 (batch statistics,
    # three outputs), opset 15.
    c = 4
    save(
        "batchnorm_training",
        [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"],
                          ["y", "running_mean", "running_var"], name="bn", training_mode=1,
                          momentum=0.9)],
        [f32("x", [2, c, 5, 5])],
        [f32("y", [2, c, 5, 5]), f32("running_mean", [c]), f32("running_var", [c])],
        [
            helper.make_tensor("scale", TensorProto.FLOAT, [c], (RNG.random(c) + 0.5).tolist()),
            helper.make_tensor("bias", TensorProto.FLOAT, [c], RNG.standard_normal(c).tolist()),
            helper.make_tensor("mean", TensorProto.FLOAT, [c], RNG.standard_normal(c).tolist()),
            helper.make_tensor("var", TensorProto.FLOAT, [c], (RNG.random(c) + 0.5).tolist()),
        ],
        [("", 15)],
    )


def conv_empty_bias():
    # No rule (docs/webgpu-lab.md): a Conv whose optional bias is written as an empty input name,
    # Conv(x, W, ""), which is valid ONNX; and the same Conv with two inputs.
    weights = RNG.standard_normal(32).tolist()
    for name, inputs in (("conv_empty_bias", ["x", "w", ""]), ("conv_no_bias", ["x", "w"])):
        save(
            name,
            [helper.make_node("Conv", inputs, ["y"], name="conv")],
            [f32("x", [1, 8, 6, 6])],
            [f32("y", [1, 4, 6, 6])],
            [helper.make_tensor("w", TensorProto.FLOAT, [4, 8, 1, 1], weights)],
            [("", 17)],
        )


def layer_ann_shape_path():
    # No rule (docs/webgpu-lab.md): a node pinned with layer_ann inside a shape computation
    # (Shape -> Slice -> Max -> Cast -> Cast -> Concat -> Reshape, on a dynamic width), as the
    # rx580 barriers are in PP-OCRv4 rec. The Max carries layer_ann=safeify_cpu.
    def i64(name, values):
        return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)

    pinned = helper.make_node("Max", ["sl", "sl"], ["b"], name="barrier")
    entry = pinned.metadata_props.add()
    entry.key, entry.value = "layer_ann", "safeify_cpu"
    save(
        "layer_ann_shape_path",
        [
            helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("Slice", ["s", "start", "end"], ["sl"], name="slice"),
            pinned,
            helper.make_node("Cast", ["b"], ["bf"], name="cast", to=TensorProto.FLOAT),
            helper.make_node("Cast", ["bf"], ["bi"], name="cast_back", to=TensorProto.INT64),
            helper.make_node("Concat", ["minus_one", "bi"], ["target"], name="concat", axis=0),
            helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
            helper.make_node("Relu", ["r"], ["y"], name="relu"),
        ],
        [f32("x", [2, 3, "w"])],
        [f32("y", [None, None])],
        [i64("start", [2]), i64("end", [3]), i64("minus_one", [-1])],
        [("", 17)],
    )


def resize_antialias_shape_sizes():
    # resize-antialias-on-cpu again, with the sizes computed from the input's Shape, which a
    # second computation (the flattening Reshape) reads too: compiled for `webgpu`, the pin
    # grows over the sizes' arithmetic but not over the shared Shape. Pinned nodes then read a
    # Shape output that onnxruntime-web keeps on the CPU by itself, and with
    # session.layer_assignment_settings onnxruntime-web 1.30.0 fails to create the session
    # (std::bad_alloc) unless the Shape is pinned too (src/rewrite/cpu.rs, docs/webgpu-lab.md).
    def i64(name, values, dims=None):
        return helper.make_tensor(
            name, TensorProto.INT64, [len(values)] if dims is None else dims, values
        )

    save(
        "resize_antialias_shape_sizes",
        [
            helper.make_node("Shape", ["x"], ["s"], name="shape"),
            helper.make_node("Slice", ["s", "zero", "two"], ["nc"], name="slice_nc"),
            helper.make_node("Slice", ["s", "two", "four"], ["hw"], name="slice_hw"),
            helper.make_node("Div", ["hw", "two"], ["half"], name="half"),
            helper.make_node("Concat", ["nc", "half"], ["sizes"], name="sizes", axis=0),
            helper.make_node("Resize", ["x", "", "", "sizes"], ["r"], name="resize",
                             mode="linear", antialias=1),
            helper.make_node("Gather", ["s", "zero_scalar"], ["n"], name="batch", axis=0),
            helper.make_node("Unsqueeze", ["n", "zero"], ["n1"], name="batch_1d"),
            helper.make_node("Concat", ["n1", "minus_one"], ["flat"], name="flat_shape", axis=0),
            helper.make_node("Reshape", ["r", "flat"], ["y"], name="flatten"),
        ],
        [f32("x", [1, 3, "h", "w"])],
        [f32("y", [None, None])],
        [i64("zero", [0]), i64("two", [2]), i64("four", [4]), i64("minus_one", [-1]),
         i64("zero_scalar", [0], [])],
        [("", 19)],
    )


if __name__ == "__main__":
    resize_linear_rank3()
    resize_antialias()
    dft_odd()
    qmoe("qmoe_swiglu", "swiglu")
    qmoe("qmoe_silu", "silu")
    batchnorm_training()
    conv_empty_bias()
    layer_ann_shape_path()
    resize_antialias_shape_sizes()
