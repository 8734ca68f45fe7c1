#!/usr/bin/env python3
"""Small speech models shaped like the two of issue 47 whose barrier cuts cascaded: values live
across many layers (masks, residuals, positions; a vocoder's skip sums) made one cut pin many
values.

    make_speech.py OUT_DIR [NAME...]

Writes NAME.onnx into OUT_DIR (every model when no NAME is given):
- whisper_enc_qdq: a Whisper-tiny-like encoder (two Conv1d + GELU stems, a sinusoid-like
  position table added once, 4 pre-norm layers of LayerNormalization, 4-head self-attention
  with an additive mask input live across every layer, a GELU MLP, residual adds), its float
  MatMuls and Convs quantized to QDQ int8 by ONNX Runtime's `quantize_static` (calibrated on
  seeded random mels). Static sizes: mel [1, 80, 400] -> 200 frames of width 96.
- hifigan_fp16: a HiFi-GAN-like vocoder in float16 throughout (weights, activations, input and
  output): a Conv1d in, 3 upsampling stages (LeakyRelu, ConvTranspose1d), each followed by a
  multi-receptive-field block (2 dilated residual branches summed, so the stage's input is live
  across both), a Conv1d out and Tanh. Static sizes: mel [1, 80, 64] -> 4,096 samples.

Small enough for a test suite (under 2 MB each), built from fixed seeds.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PRODUCER = "onnx-safeify-speech"


class G:
    def __init__(self, seed, dtype=np.float32):
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype
        self.nodes, self.inits, self.count = [], [], {}

    def name(self, base):
        n = self.count.get(base, 0)
        self.count[base] = n + 1
        return f"{base}_{n}"

    def const(self, arr, base="c"):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def w(self, shape, scale=None, base="w"):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        return self.const((self.rng.standard_normal(shape) * scale).astype(self.dtype), base)

    def op(self, op, inputs, base=None, n_out=1, **attrs):
        base = base or op.lower()
        outs = [self.name(base) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
        return outs[0] if n_out == 1 else outs

    def scalar(self, x):
        return self.const(np.array(x, dtype=self.dtype), "s")


def gelu(g, x):
    # 0.5 x (1 + erf(x / sqrt 2)): the Erf form exporters write.
    d = g.op("Div", [x, g.scalar(np.sqrt(2.0))])
    e = g.op("Erf", [d])
    a = g.op("Add", [e, g.scalar(1.0)])
    m = g.op("Mul", [x, a])
    return g.op("Mul", [m, g.scalar(0.5)])


def layer_norm(g, x, width):
    scale = g.const(np.ones(width, dtype=g.dtype), "ln_scale")
    bias = g.const(np.zeros(width, dtype=g.dtype), "ln_bias")
    return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-5)


def whisper_enc():
    g = G(47)
    d, heads, layers, frames = 96, 4, 4, 200
    hd = d // heads
    mel = "mel"
    mask = "mask"
    x = g.op("Conv", [mel, g.w([d, 80, 3]), g.w([d], 0.01)], pads=[1, 1])
    x = gelu(g, x)
    x = g.op("Conv", [x, g.w([d, d, 3]), g.w([d], 0.01)], pads=[1, 1], strides=[2])
    x = gelu(g, x)
    x = g.op("Transpose", [x], perm=[0, 2, 1])  # [1, T, d]
    pos = np.sin(np.arange(frames)[:, None] / (10000 ** (np.arange(d)[None, :] / d)))
    x = g.op("Add", [x, g.const(pos[None].astype(np.float32), "positions")])
    shape_heads = g.const(np.array([1, frames, heads, hd], dtype=np.int64), "shape")
    shape_back = g.const(np.array([1, frames, d], dtype=np.int64), "shape")
    for _ in range(layers):
        h = layer_norm(g, x, d)
        qkv = []
        for _ in range(3):
            p = g.op("Add", [g.op("MatMul", [h, g.w([d, d])]), g.w([d], 0.01)])
            p = g.op("Reshape", [p, shape_heads])
            qkv.append(g.op("Transpose", [p], perm=[0, 2, 1, 3]))  # [1, H, T, hd]
        q, k, v = qkv
        kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
        s = g.op("MatMul", [q, kt])
        s = g.op("Mul", [s, g.scalar(1.0 / np.sqrt(hd))])
        s = g.op("Add", [s, mask])  # the mask: live across every layer
        a = g.op("Softmax", [s], axis=-1)
        o = g.op("MatMul", [a, v])
        o = g.op("Transpose", [o], perm=[0, 2, 1, 3])
        o = g.op("Reshape", [o, shape_back])
        o = g.op("Add", [g.op("MatMul", [o, g.w([d, d])]), g.w([d], 0.01)])
        x = g.op("Add", [x, o])
        h = layer_norm(g, x, d)
        h = g.op("Add", [g.op("MatMul", [h, g.w([d, 4 * d])]), g.w([4 * d], 0.01)])
        h = gelu(g, h)
        h = g.op("Add", [g.op("MatMul", [h, g.w([4 * d, d])]), g.w([d], 0.01)])
        x = g.op("Add", [x, h])
    x = layer_norm(g, x, d)
    g.nodes.append(helper.make_node("Identity", [x], ["hidden"], name="out"))
    graph = helper.make_graph(
        g.nodes,
        "whisper_enc",
        [
            helper.make_tensor_value_info(mel, TensorProto.FLOAT, [1, 80, 2 * frames]),
            helper.make_tensor_value_info(mask, TensorProto.FLOAT, [1, 1, 1, frames]),
        ],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, frames, d])],
        g.inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    m.producer_name = PRODUCER
    return m, frames


def quantize_qdq(model, frames, path):
    """`quantize_static` to QDQ int8, calibrated on seeded random mels and a zero mask."""
    import tempfile

    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(7)
            self.data = iter(
                [
                    {
                        "mel": rng.standard_normal((1, 80, 2 * frames)).astype(np.float32),
                        "mask": np.zeros((1, 1, 1, frames), dtype=np.float32),
                    }
                    for _ in range(4)
                ]
            )

        def get_next(self):
            return next(self.data, None)

    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "float.onnx")
        onnx.save(model, src)
        quantize_static(
            src,
            path,
            Reader(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul", "Conv"],
        )
    m = onnx.load(path)
    m.producer_name = PRODUCER
    onnx.save(m, path)


def hifigan():
    g = G(48, np.float16)
    mel = "mel"
    ch = 64
    x = g.op("Conv", [mel, g.w([ch, 80, 7]), g.w([ch], 0.01)], pads=[3, 3])
    for rate in (8, 4, 2):
        x = g.op("LeakyRelu", [x], alpha=0.1)
        out = ch // 2
        x = g.op(
            "ConvTranspose",
            [x, g.w([ch, out, 2 * rate]), g.w([out], 0.01)],
            strides=[rate],
            pads=[rate // 2, rate // 2],
        )
        ch = out
        branches = []
        for k, dil in ((3, 1), (5, 3)):
            h = x
            for dd in (dil, 1):
                h = g.op("LeakyRelu", [h], alpha=0.1)
                pad = (k - 1) * dd // 2
                h = g.op("Conv", [h, g.w([ch, ch, k]), g.w([ch], 0.01)], pads=[pad, pad],
                         dilations=[dd])
            branches.append(g.op("Add", [x, h]))  # x: live across both branches
        s = g.op("Add", branches)
        x = g.op("Mul", [s, g.scalar(0.5)])
    x = g.op("LeakyRelu", [x], alpha=0.01)
    x = g.op("Conv", [x, g.w([1, ch, 7]), g.w([1], 0.01)], pads=[3, 3])
    g.nodes.append(helper.make_node("Tanh", [x], ["audio"], name="out"))
    frames = 64
    graph = helper.make_graph(
        g.nodes,
        "hifigan",
        [helper.make_tensor_value_info(mel, TensorProto.FLOAT16, [1, 80, frames])],
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT16, [1, 1, frames * 64])],
        g.inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    m.producer_name = PRODUCER
    return m


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    names = sys.argv[2:] or ["whisper_enc_qdq", "hifigan_fp16"]
    os.makedirs(out, exist_ok=True)
    for n in names:
        path = os.path.join(out, f"{n}.onnx")
        if n == "whisper_enc_qdq":
            m, frames = whisper_enc()
            onnx.checker.check_model(m)
            quantize_qdq(m, frames, path)
        elif n == "hifigan_fp16":
            m = hifigan()
            onnx.checker.check_model(m)
            onnx.save(m, path)
        else:
            sys.exit(f"unknown model {n}")
        onnx.checker.check_model(onnx.load(path))
        print(path)


if __name__ == "__main__":
    main()
