#!/usr/bin/env python3
"""Generate ``samples/ocr_tiny.onnx``, the small OCR-like model shipped with onnx-safeify.

The model imitates the shape of a PP-OCR text detector (MobileNetV3 backbone,
FPN neck, DB-style head) at toy scale, so that a newcomer can run the tool
without downloading anything and so that the interesting rewrite targets are
present:

* a stem ``Conv 3x3 / stride 2 -> BatchNormalization -> HardSwish``;
* inverted-residual blocks with depthwise convolutions (``group == channels``),
  3x3 and 5x5 kernels, stride 1 and 2, one of them with 96 channels and one with
  120 (something for a "split depthwise channels at 64" rule to split);
* squeeze-excite blocks (``GlobalAveragePool -> Conv -> Relu -> Conv ->
  HardSigmoid -> Mul``) and residual ``Add``s;
* an FPN neck with nearest ``Resize`` (constant scales, x2 and x4) and ``Concat``;
* a head ``Conv -> BN -> Relu -> ConvTranspose (x2) -> BN -> Relu -> Conv 1x1 ->
  Sigmoid`` that gives the probability map ``prob``.

Input ``x`` is float32 ``[N, 3, 64, 64]`` with a symbolic batch dimension ``N``;
output ``prob`` is ``[N, 1, 64, 64]``.  The file is opset 17 (default domain),
IR version 8, so that ONNX Runtime releases from 1.12 on load it.  It carries
no ``value_info``: shapes of intermediate values are left for tools to infer.

The output is byte-for-byte deterministic: weights come from a fixed numpy
seed, nothing records a time or a library version.  After writing the model the
script checks it with ``onnx.checker.check_model(full_check=True)`` and runs it
in ONNX Runtime (CPU) for batch 1 and 2 (onnxruntime is optional: without it
that check is skipped with a note).

Usage::

    python tools/make_sample.py [OUT]        # default: samples/ocr_tiny.onnx
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PRODUCER_NAME = "onnx-safeify/tools/make_sample.py"
PRODUCER_VERSION = "1"
OPSET = 17
IR_VERSION = 8
SEED = 20240617
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "samples" / "ocr_tiny.onnx"

IMAGE_HW = 64
BATCH_DIM = "N"


class GraphBuilder:
    """Collects nodes and initializers; every node name is checked for uniqueness.

    The output tensor of a node is named after the node (``<node>.out``), and the
    parameters after the node they feed (``<node>.weight``, ``<node>.bias``, ...),
    so a name found in an error message leads straight back to this script.
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names: set[str] = set()

    # -- bookkeeping ---------------------------------------------------------

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise ValueError(f"duplicate name {name!r}")
        self._names.add(name)
        return name

    def const(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, self._claim(name)))
        return name

    def node(self, op: str, name: str, inputs: list[str], **attrs) -> str:
        out = self._claim(f"{name}.out")
        self._claim(name)
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    # -- layers ---------------------------------------------------------------

    def conv(self, name: str, x: str, cin: int, cout: int, k: int, stride: int = 1,
             group: int = 1, bias: bool = False) -> str:
        """Conv with He-initialised weights; ``pads`` keep 'same' size at stride 1."""
        fan_in = (cin // group) * k * k
        w = self.rng.normal(0.0, np.sqrt(2.0 / fan_in), (cout, cin // group, k, k))
        inputs = [x, self.const(f"{name}.weight", w.astype(np.float32))]
        if bias:
            b = self.rng.normal(0.0, 0.05, cout)
            inputs.append(self.const(f"{name}.bias", b.astype(np.float32)))
        p = k // 2
        return self.node("Conv", name, inputs, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[p, p, p, p], group=group, dilations=[1, 1])

    def conv_transpose(self, name: str, x: str, cin: int, cout: int) -> str:
        """ConvTranspose 2x2 / stride 2: doubles height and width."""
        w = self.rng.normal(0.0, np.sqrt(2.0 / (cin * 4)), (cin, cout, 2, 2))
        b = self.rng.normal(0.0, 0.05, cout)
        inputs = [x, self.const(f"{name}.weight", w.astype(np.float32)),
                  self.const(f"{name}.bias", b.astype(np.float32))]
        return self.node("ConvTranspose", name, inputs, kernel_shape=[2, 2], strides=[2, 2])

    def batch_norm(self, name: str, x: str, c: int) -> str:
        scale = self.rng.uniform(0.8, 1.2, c)
        bias = self.rng.normal(0.0, 0.1, c)
        mean = self.rng.normal(0.0, 0.1, c)
        var = self.rng.uniform(0.5, 1.5, c)
        inputs = [x] + [self.const(f"{name}.{p}", a.astype(np.float32))
                        for p, a in (("scale", scale), ("bias", bias),
                                     ("mean", mean), ("var", var))]
        return self.node("BatchNormalization", name, inputs, epsilon=1e-5, momentum=0.9)

    def act(self, name: str, x: str, kind: str) -> str:
        if kind == "relu":
            return self.node("Relu", name, [x])
        if kind == "hardswish":
            return self.node("HardSwish", name, [x])
        raise ValueError(f"unknown activation {kind!r}")

    def conv_bn_act(self, prefix: str, x: str, cin: int, cout: int, k: int, stride: int = 1,
                    group: int = 1, act: str | None = None) -> str:
        y = self.conv(f"{prefix}.conv", x, cin, cout, k, stride, group)
        y = self.batch_norm(f"{prefix}.bn", y, cout)
        return self.act(f"{prefix}.act", y, act) if act else y

    def squeeze_excite(self, prefix: str, x: str, c: int, reduction: int = 4) -> str:
        mid = c // reduction
        s = self.node("GlobalAveragePool", f"{prefix}.pool", [x])
        s = self.conv(f"{prefix}.fc1", s, c, mid, 1, bias=True)
        s = self.node("Relu", f"{prefix}.relu", [s])
        s = self.conv(f"{prefix}.fc2", s, mid, c, 1, bias=True)
        s = self.node("HardSigmoid", f"{prefix}.gate", [s], alpha=0.2, beta=0.5)
        return self.node("Mul", f"{prefix}.scale", [x, s])

    def resize(self, name: str, x: str, factor: int) -> str:
        scales = self.const(f"{name}.scales",
                            np.array([1, 1, factor, factor], dtype=np.float32))
        # PaddlePaddle exports nearest upsampling as asymmetric/floor.
        return self.node("Resize", name, [x, "", scales], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")


# (name, in, expand, out, kernel, stride, activation, squeeze-excite)
BLOCKS = [
    ("block1", 16, 16, 16, 3, 1, "relu", False),
    ("block2", 16, 64, 24, 3, 2, "relu", False),
    ("block3", 24, 72, 24, 3, 1, "relu", False),
    ("block4", 24, 96, 40, 5, 2, "hardswish", True),
    ("block5", 40, 120, 40, 5, 1, "hardswish", True),
]
# Blocks whose output feeds the neck (strides 2, 4 and 8 of the input).
TAPS = ("block1", "block3", "block5")
NECK_CHANNELS = 32
HEAD_CHANNELS = 8


def inverted_residual(g: GraphBuilder, prefix: str, x: str, cin: int, exp: int, cout: int,
                      k: int, stride: int, act: str, se: bool) -> str:
    """MobileNetV3 block: [expand 1x1] -> depthwise kxk -> [SE] -> project 1x1 [+ x]."""
    y = x
    if exp != cin:
        y = g.conv_bn_act(f"{prefix}.expand", y, cin, exp, 1, act=act)
    y = g.conv_bn_act(f"{prefix}.dw", y, exp, exp, k, stride, group=exp, act=act)
    if se:
        y = g.squeeze_excite(f"{prefix}.se", y, exp)
    y = g.conv_bn_act(f"{prefix}.project", y, exp, cout, 1)
    if stride == 1 and cin == cout:
        y = g.node("Add", f"{prefix}.residual", [x, y])
    return y


def build_model() -> onnx.ModelProto:
    g = GraphBuilder(SEED)

    # Backbone.
    y = g.conv_bn_act("backbone.stem", "x", 3, 16, 3, stride=2, act="hardswish")
    taps: dict[str, tuple[str, int]] = {}
    for name, cin, exp, cout, k, stride, act, se in BLOCKS:
        y = inverted_residual(g, f"backbone.{name}", y, cin, exp, cout, k, stride, act, se)
        if name in TAPS:
            taps[name] = (y, cout)

    # Neck: 1x1 laterals, top-down path with x2 nearest upsampling.
    lateral = [g.conv(f"neck.lateral{i}", t, c, NECK_CHANNELS, 1)
               for i, (t, c) in enumerate(taps[n] for n in TAPS)]
    merged = [lateral[-1]]
    for i in range(len(lateral) - 2, -1, -1):
        up = g.resize(f"neck.up{i + 1}", merged[0], 2)
        merged.insert(0, g.node("Add", f"neck.merge{i}", [lateral[i], up]))
    # Bring every level to stride 2 and concatenate.
    levels = []
    for i, m in enumerate(merged):
        p = g.conv(f"neck.smooth{i}", m, NECK_CHANNELS, HEAD_CHANNELS, 3)
        if i > 0:
            p = g.resize(f"neck.out{i}.up", p, 2 ** i)
        levels.append(p)
    fused = g.node("Concat", "neck.concat", levels, axis=1)
    fused_channels = HEAD_CHANNELS * len(levels)

    # Head: DB-style, back to full resolution with a transposed convolution.
    y = g.conv_bn_act("head.conv", fused, fused_channels, 16, 3, act="relu")
    y = g.conv_transpose("head.deconv", y, 16, 16)
    y = g.batch_norm("head.deconv.bn", y, 16)
    y = g.act("head.deconv.act", y, "relu")
    y = g.conv("head.classifier", y, 16, 1, 1, bias=True)
    g.nodes.append(helper.make_node("Sigmoid", [y], ["prob"], name="head.sigmoid"))

    shape = [BATCH_DIM, 3, IMAGE_HW, IMAGE_HW]
    graph = helper.make_graph(
        g.nodes, "ocr_tiny",
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        outputs=[helper.make_tensor_value_info(
            "prob", TensorProto.FLOAT, [BATCH_DIM, 1, IMAGE_HW, IMAGE_HW])],
        initializer=g.initializers,
        doc_string="Toy PP-OCR-like text detector (random weights).",
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name=PRODUCER_NAME,
        producer_version=PRODUCER_VERSION,
        model_version=1,
        doc_string="onnx-safeify sample model; regenerate with tools/make_sample.py. "
                   "Weights are random: the output is meaningless, only its shape matters.",
    )
    return model


def check_with_onnxruntime(path: Path) -> None:
    try:
        import onnxruntime as ort
    except ImportError:
        print("note: onnxruntime not installed, skipping the run check")
        return
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    x2 = rng.uniform(0.0, 1.0, (2, 3, IMAGE_HW, IMAGE_HW)).astype(np.float32)
    results = {}
    for batch in (1, 2):
        (prob,) = sess.run(["prob"], {"x": x2[:batch]})
        expected = (batch, 1, IMAGE_HW, IMAGE_HW)
        assert prob.shape == expected, f"batch {batch}: shape {prob.shape} != {expected}"
        assert np.isfinite(prob).all(), f"batch {batch}: non-finite values in prob"
        assert ((prob >= 0) & (prob <= 1)).all(), f"batch {batch}: prob outside [0, 1]"
        assert prob.std() > 1e-4, f"batch {batch}: prob is (nearly) constant"
        results[batch] = prob
    # Samples in a batch are independent: the first item must not change with batch size.
    np.testing.assert_allclose(results[2][:1], results[1], rtol=1e-5, atol=1e-6)
    p = results[2]
    print(f"onnxruntime {ort.__version__}: prob {list(p.shape)} "
          f"min {p.min():.4f} mean {p.mean():.4f} max {p.max():.4f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Generate the onnx-safeify sample model (a tiny PP-OCR-like detector).")
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT,
                        help="output path (default: samples/ocr_tiny.onnx in this repository)")
    args = parser.parse_args(argv)

    model = build_model()
    onnx.checker.check_model(model, full_check=True)
    data = model.SerializeToString(deterministic=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    # Check the file as written, not only the in-memory model.
    onnx.checker.check_model(str(args.out), full_check=True)

    ops = collections.Counter(n.op_type for n in model.graph.node)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    print(f"wrote {args.out} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]})")
    print(f"{len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers, "
          f"{params} parameters")
    print("ops: " + ", ".join(f"{op} {n}" for op, n in sorted(ops.items())))
    check_with_onnxruntime(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
