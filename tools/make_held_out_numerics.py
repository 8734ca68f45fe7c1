#!/usr/bin/env python3
"""Held-out models of issue 48: shapes the corpus lacks, built from fixed seeds.

    make_held_out_numerics.py OUT_DIR [NAME...]

Writes OUT_DIR/NAME.onnx and OUT_DIR/NAME.npz (the inputs) for each model, and made.json (the
names written). Models:
- whisper_block: a Whisper encoder block as ONNX Runtime's optimizer writes it (opset 16:
  Attention, the output MatMul, two SkipLayerNormalization around an MLP MatMul; hidden 64,
  sequence 1500, float32). The residual stream sits near 4e3 with a spread of a few units, so
  each layer norm's row mean is ~1000 times its deviation: every float32 evaluation, ONNX
  Runtime's kernel included, rounds the centred values by |mean| / std ulps.
- whisper_block_sln: the same block with only its two SkipLayerNormalization nodes (the MatMuls
  and the attention left out), the ill-conditioned part alone.
- fp16_tts_encoder, fp16_istft_vocoder: float16 Conv / ConvTranspose models (opset 18, float16
  weights and activations; the encoder's float32 mel cast to float16 where it enters).
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper as h, numpy_helper as nh

F32 = TensorProto.FLOAT
F16 = TensorProto.FLOAT16
MS = "com.microsoft"


def model(nodes, name, inputs, outputs, inits, opset, ms=True):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=inits)
    ops = [h.make_opsetid("", opset)] + ([h.make_opsetid(MS, 1)] if ms else [])
    m = h.make_model(g, opset_imports=ops, producer_name="onnx-safeify-held-out")
    m.ir_version = 8
    return m


def whisper_block(sln_only=False, seq=1500, hidden=64, heads=4, seed=48):
    rng = np.random.default_rng(seed)
    inits = []

    def init(shape, s, base=0.0):
        t = nh.from_array((base + rng.standard_normal(shape) * s).astype(np.float32), f"w{len(inits)}")
        inits.append(t)
        return t.name

    vi = lambda n: h.make_tensor_value_info(n, F32, [1, seq, hidden])
    nodes = []
    if sln_only:
        ins = [vi("hidden"), vi("residual")]
        attn_out = "hidden"
    else:
        ins = [vi("hidden"), vi("residual")]
        nodes.append(h.make_node("Attention", ["hidden", init([hidden, 3 * hidden], 0.05),
                                               init([3 * hidden], 0.02)], ["attn"],
                                 domain=MS, num_heads=heads, name="attention"))
        nodes.append(h.make_node("MatMul", ["attn", init([hidden, hidden], 0.1)], ["attn_proj"], name="out_proj"))
        attn_out = "attn_proj"
    nodes.append(h.make_node("SkipLayerNormalization",
                             [attn_out, "residual", init([hidden], 0.2, 1.0), init([hidden], 0.1),
                              init([hidden], 0.05)], ["ln1", "", "", "sum1"],
                             domain=MS, epsilon=1e-5, name="skip_ln_1"))
    if sln_only:
        mlp = "ln1"
    else:
        nodes.append(h.make_node("MatMul", ["ln1", init([hidden, hidden], 0.1)], ["mlp"], name="fc"))
        mlp = "mlp"
    nodes.append(h.make_node("SkipLayerNormalization",
                             [mlp, "sum1", init([hidden], 0.2, 1.0), init([hidden], 0.1),
                              init([hidden], 0.05)], ["ln2", "", "", "sum2"],
                             domain=MS, epsilon=1e-5, name="skip_ln_2"))
    name = "whisper_block_sln" if sln_only else "whisper_block"
    m = model(nodes, name, ins, [vi("ln2"), vi("sum2")], inits, 16)
    feeds = {
        "hidden": rng.standard_normal((1, seq, hidden)).astype(np.float32),
        # The residual stream near 4e3, a few units of spread per row.
        "residual": (4000.0 + rng.standard_normal((1, 1, hidden)) * 2.0
                     + rng.standard_normal((1, seq, hidden)) * 1.0).astype(np.float32),
    }
    return name, m, feeds


class Half:
    """A float16 graph under construction (weights He-scaled so activations keep their size)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []

    def w(self, shape, fan_in, scale=1.0):
        name = f"w{len(self.inits)}"
        v = self.rng.standard_normal(shape) * scale * np.sqrt(2.0 / fan_in)
        self.inits.append(nh.from_array(v.astype(np.float16), name))
        return name

    def b(self, n):
        name = f"b{len(self.inits)}"
        self.inits.append(nh.from_array((self.rng.standard_normal(n) * 0.05).astype(np.float16), name))
        return name

    def node(self, op, ins, **attrs):
        out = f"t{len(self.nodes)}"
        self.nodes.append(h.make_node(op, ins, [out], name=f"{op.lower()}_{len(self.nodes)}", **attrs))
        return out


def fp16_tts_encoder(seed=7, mels=80, frames=321, channels=192):
    """A TTS encoder's front in float16 (opset 18): the float32 mel cast to float16 feeds a
    depthwise Conv over the mel bins (more than 64 channels: rx580 splits it), then pointwise and
    depthwise Convs with residual Adds, a LayerNormalization, a MatMul self-attention (Softmax over
    frames) and a projection back to the mel bins; float16 out."""
    g = Half(seed)
    x = g.node("Cast", ["mel"], to=F16)
    x = g.node("Conv", [x, g.w([mels, 1, 5], 5), g.b(mels)], group=mels, pads=[2, 2])
    x = g.node("Conv", [x, g.w([channels, mels, 1], mels), g.b(channels)])
    x = g.node("Relu", [x])
    for _ in range(2):
        d = g.node("Conv", [x, g.w([channels, 1, 5], 5), g.b(channels)], group=channels, pads=[2, 2])
        d = g.node("Relu", [d])
        d = g.node("Conv", [d, g.w([channels, channels, 1], channels, 0.5), g.b(channels)])
        x = g.node("Add", [x, d])
    t = g.node("Transpose", [x], perm=[0, 2, 1])
    scale = nh.from_array(np.ones(channels, np.float16), "ln_scale")
    bias = nh.from_array(np.zeros(channels, np.float16), "ln_bias")
    g.inits += [scale, bias]
    t = g.node("LayerNormalization", [t, "ln_scale", "ln_bias"], axis=-1, epsilon=1e-5)
    q = g.node("MatMul", [t, g.w([channels, channels], channels, 0.3)])
    k = g.node("MatMul", [t, g.w([channels, channels], channels, 0.3)])
    v = g.node("MatMul", [t, g.w([channels, channels], channels)])
    kt = g.node("Transpose", [k], perm=[0, 2, 1])
    s = g.node("MatMul", [q, kt])
    a = g.node("Softmax", [s], axis=-1)
    o = g.node("MatMul", [a, v])
    o = g.node("Add", [o, t])
    o = g.node("Transpose", [o], perm=[0, 2, 1])
    y = g.node("Conv", [o, g.w([mels, channels, 1], channels), g.b(mels)])
    g.nodes[-1].output[0] = "y"
    m = model(g.nodes, "fp16_tts_encoder", [h.make_tensor_value_info("mel", F32, [1, mels, frames])],
              [h.make_tensor_value_info("y", F16, [1, mels, frames])], g.inits, 18, ms=False)
    feeds = {"mel": (g.rng.standard_normal((1, mels, frames)) * 2.0 - 4.0).astype(np.float32)}
    return "fp16_tts_encoder", m, feeds


def fp16_istft_vocoder(seed=0, channels=128, frames=40):
    """A multi-band iSTFT vocoder's upsampler in float16 (opset 18): a Conv, then ConvTranspose x4
    (strides 4, 4, 2, 2), each followed by a residual block of three dilated Convs (LeakyRelu
    before each), and a Conv with Tanh to the bands; float16 in and out. A chain of 22 float16
    Conv/ConvTranspose/Add/LeakyRelu nodes that ONNX Runtime's CPU provider runs end to end in
    float32: fenced node by node (rounding to float16 between every two) it strays 1.1e-2 of the
    output's scale from that, past the fence's 4 ulps (3.9e-3)."""
    g = Half(seed)
    x = g.node("Conv", ["feat", g.w([channels, 80, 7], 80 * 7), g.b(channels)], pads=[3, 3])
    c = channels
    for stride in (4, 4, 2, 2):
        n = c // 2
        x = g.node("LeakyRelu", [x], alpha=0.1)
        x = g.node("ConvTranspose", [x, g.w([c, n, 2 * stride], c * 2), g.b(n)], strides=[stride],
                   pads=[stride // 2, stride // 2])
        for dil in (1, 3, 5):
            r = g.node("LeakyRelu", [x], alpha=0.1)
            r = g.node("Conv", [r, g.w([n, n, 3], n * 3, 0.5), g.b(n)], dilations=[dil], pads=[dil, dil])
            x = g.node("Add", [x, r])
        c = n
    x = g.node("LeakyRelu", [x], alpha=0.1)
    y = g.node("Conv", [x, g.w([c, c, 7], c * 7, 0.5), g.b(c)], pads=[3, 3])
    g.node("Tanh", [y])
    g.nodes[-1].output[0] = "y"
    m = model(g.nodes, "fp16_istft_vocoder", [h.make_tensor_value_info("feat", F16, [1, 80, frames])],
              [h.make_tensor_value_info("y", F16, [1, "bands", "samples"])], g.inits, 18, ms=False)
    feeds = {"feat": g.rng.standard_normal((1, 80, frames)).astype(np.float16)}
    return "fp16_istft_vocoder", m, feeds


def main(out, names):
    makers = {
        "whisper_block": lambda: whisper_block(False),
        "whisper_block_sln": lambda: whisper_block(True),
        "fp16_tts_encoder": fp16_tts_encoder,
        "fp16_istft_vocoder": fp16_istft_vocoder,
    }
    made = []
    for n, make in makers.items():
        if names and n not in names:
            continue
        name, m, feeds = make()
        onnx.checker.check_model(m)
        onnx.save(m, os.path.join(out, name + ".onnx"))
        np.savez(os.path.join(out, name + ".npz"), **feeds)
        made.append(name)
    with open(os.path.join(out, "made.json"), "w") as f:
        json.dump(made, f)
    print(f"held-out: {len(made)} models in {out}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: make_held_out_numerics.py OUT_DIR [NAME...]")
    main(sys.argv[1], sys.argv[2:])
