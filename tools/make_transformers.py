#!/usr/bin/env python3
"""The transformer corpus: small transformer models built from fixed seeds, in the forms users
bring them, and ONNX Runtime's own tools applied to them.

    make_transformers.py OUT_DIR

Writes into OUT_DIR, for each model M, M.onnx and M.inputs.npz (valid inputs: token ids below
the vocabulary, masks of ones with padding in the second batch row, past state of the stated
length), and transformers.json (each model: its family, the com.microsoft ops it holds, the
dims used for its inputs).

Families (all small enough for a test suite, shaped like the real ones):
- bert_plain: a 2-layer BERT encoder as a PyTorch export writes it (opset 17: Shape -> Gather
  -> Concat -> Reshape chains, an Erf GELU, LayerNormalization, an extended attention mask);
- bert_fused / bert_fused_int8: the same through `onnxruntime.transformers.optimizer`
  (Attention, SkipLayerNormalization, EmbedLayerNormalization, BiasGelu...) and then through
  `quantize_dynamic` (QAttention, DynamicQuantizeMatMul, MatMulInteger...);
- bert_plain_int8: `quantize_dynamic` of the plain export;
- vit_plain / vit_int4: a ViT (patch Conv, class token, 2 layers, static sizes), and its
  MatMuls as `MatMulNBits` (4 bits, block 32) by ONNX Runtime's quantizer;
- gpt2_past: a GPT-2-style decoder with com.microsoft Attention holding past state
  (unidirectional, `past` input, `present` output), LayerNormalization, FastGelu;
- llama_gqa / llama_rope_gqa: decoders as onnxruntime-genai's builder writes them:
  SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization, GroupQueryAttention with
  past/present KV, seqlens_k and total_sequence_length from the attention mask, rotary
  embeddings inside GQA (do_rotary with cos/sin caches) or as RotaryEmbedding nodes with
  position ids; SwiGLU MLP;
- llama_gqa_int4 (and _b16): the decoder's MatMuls as MatMulNBits (4 bits, block 32 and 16,
  symmetric and with zero points), as the builder writes int4 models;
- llama_gqa_fp16: the decoder in float16 (weights, activations, KV cache).
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64
I32 = TensorProto.INT32
MS = "com.microsoft"
PRODUCER = "onnx-safeify-corpus"


class G:
    """A graph under construction: nodes, initializers, unique names."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], {}

    def name(self, base):
        n = self.count.get(base, 0)
        self.count[base] = n + 1
        return f"{base}_{n}"

    def w(self, shape, scale=0.1, name="w"):
        n = self.name(name)
        a = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(a, n))
        return n

    def const(self, array, name="c"):
        n = self.name(name)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def op(self, op_type, inputs, n_out=1, domain="", **attrs):
        base = self.name(op_type)
        outs = [f"{base}_out{i}" if n_out > 1 else f"{base}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=base, domain=domain or None, **attrs))
        return outs if n_out > 1 else outs[0]

    def model(self, inputs, outputs, opsets, name):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                              producer_name=PRODUCER)
        m.ir_version = 9
        return m


def linear(g, x, k, n, bias=True):
    y = g.op("MatMul", [x, g.w((k, n), 1.0 / np.sqrt(k))])
    return g.op("Add", [y, g.w((n,), 0.02, "b")]) if bias else y


def layer_norm(g, x, hidden):
    gamma = g.const((1 + 0.1 * g.rng.standard_normal(hidden)).astype(np.float32), "gamma")
    beta = g.const((0.1 * g.rng.standard_normal(hidden)).astype(np.float32), "beta")
    return g.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)


def erf_gelu(g, x):
    d = g.op("Div", [x, g.const(np.array(np.sqrt(2.0), np.float32))])
    e = g.op("Erf", [d])
    p = g.op("Add", [e, g.const(np.array(1.0, np.float32))])
    m = g.op("Mul", [x, p])
    return g.op("Mul", [m, g.const(np.array(0.5, np.float32))])


def dims_of(g, x, idx):
    """Shape(x)[idx] as a 1-element int64 tensor (how an export computes runtime sizes)."""
    s = g.op("Shape", [x])
    d = g.op("Gather", [s, g.const(np.array(idx, np.int64), "idx")], axis=0)
    return g.op("Unsqueeze", [d, g.const(np.array([0], np.int64), "axes")])


def bert_layer(g, x, mask_add, hidden, heads, const_shapes=False):
    hd = hidden // heads
    if const_shapes:
        shape4 = g.const(np.array([0, 0, heads, hd], np.int64), "shape")
    else:
        b, s = dims_of(g, x, 0), dims_of(g, x, 1)
        shape4 = g.op("Concat", [b, s, g.const(np.array([heads], np.int64)), g.const(np.array([hd], np.int64))],
                      axis=0)
    q = g.op("Transpose", [g.op("Reshape", [linear(g, x, hidden, hidden), shape4])], perm=[0, 2, 1, 3])
    k = g.op("Transpose", [g.op("Reshape", [linear(g, x, hidden, hidden), shape4])], perm=[0, 2, 3, 1])
    v = g.op("Transpose", [g.op("Reshape", [linear(g, x, hidden, hidden), shape4])], perm=[0, 2, 1, 3])
    sc = g.op("Div", [g.op("MatMul", [q, k]), g.const(np.array(np.sqrt(hd), np.float32))])
    if mask_add is not None:
        sc = g.op("Add", [sc, mask_add])
    p = g.op("Softmax", [sc], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    if const_shapes:
        shape3 = g.const(np.array([0, 0, hidden], np.int64), "shape")
    else:
        shape3 = g.op("Concat", [b, s, g.const(np.array([hidden], np.int64))], axis=0)
    ctx = g.op("Reshape", [ctx, shape3])
    x = layer_norm(g, g.op("Add", [linear(g, ctx, hidden, hidden), x]), hidden)
    h = erf_gelu(g, linear(g, x, hidden, 4 * hidden))
    return layer_norm(g, g.op("Add", [linear(g, h, 4 * hidden, hidden), x]), hidden)


def bert_plain(vocab=100, hidden=64, heads=4, layers=2, max_pos=64, const_shapes=False):
    g = G(11)
    ids = helper.make_tensor_value_info("input_ids", I64, ["batch_size", "sequence_length"])
    mask = helper.make_tensor_value_info("attention_mask", I64, ["batch_size", "sequence_length"])
    types = helper.make_tensor_value_info("token_type_ids", I64, ["batch_size", "sequence_length"])
    word = g.op("Gather", [g.w((vocab, hidden), 0.5, "word_embeddings"), "input_ids"], axis=0)
    seq = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const(np.array(1, np.int64))], axis=0)
    pos_ids = g.op("Unsqueeze", [g.op("Range", [g.const(np.array(0, np.int64)), seq, g.const(np.array(1, np.int64))]),
                                 g.const(np.array([0], np.int64))])
    pos = g.op("Gather", [g.w((max_pos, hidden), 0.5, "position_embeddings"), pos_ids], axis=0)
    tok = g.op("Gather", [g.w((2, hidden), 0.5, "token_type_embeddings"), "token_type_ids"], axis=0)
    x = layer_norm(g, g.op("Add", [g.op("Add", [word, pos]), tok]), hidden)
    m = g.op("Cast", [g.op("Unsqueeze", ["attention_mask", g.const(np.array([1, 2], np.int64))])], to=F32)
    m = g.op("Mul", [g.op("Sub", [g.const(np.array(1.0, np.float32)), m]), g.const(np.array(-10000.0, np.float32))])
    for _ in range(layers):
        x = bert_layer(g, x, m, hidden, heads, const_shapes)
    first = g.op("Gather", [x, g.const(np.array(0, np.int64))], axis=1)
    pooled = g.op("Tanh", [g.op("Gemm", [first, g.w((hidden, hidden), 0.1), g.w((hidden,), 0.02, "b")])])
    g.nodes[-1].output[0] = "pooler_output"
    g.nodes[-2].output[0] = g.nodes[-2].output[0]
    last = helper.make_tensor_value_info(x, F32, ["batch_size", "sequence_length", hidden])
    out = helper.make_tensor_value_info("pooler_output", F32, ["batch_size", hidden])
    return g.model([ids, mask, types], [last, out], [("", 17)], "bert_plain")


def vit_plain(hidden=64, heads=4, layers=2, image=32, patch=16, classes=10):
    g = G(12)
    pixels = helper.make_tensor_value_info("pixel_values", F32, [1, 3, image, image])
    n = (image // patch) ** 2
    p = g.op("Conv", ["pixel_values", g.w((hidden, 3, patch, patch), 0.05), g.w((hidden,), 0.02, "b")],
             kernel_shape=[patch, patch], strides=[patch, patch])
    p = g.op("Transpose", [g.op("Reshape", [p, g.const(np.array([1, hidden, n], np.int64))])], perm=[0, 2, 1])
    x = g.op("Concat", [g.w((1, 1, hidden), 0.5, "cls_token"), p], axis=1)
    x = g.op("Add", [x, g.w((1, n + 1, hidden), 0.5, "position_embeddings")])
    for _ in range(layers):
        x = bert_layer(g, layer_norm(g, x, hidden), None, hidden, heads)
    first = g.op("Gather", [x, g.const(np.array(0, np.int64))], axis=1)
    logits = g.op("Gemm", [first, g.w((hidden, classes), 0.1), g.w((classes,), 0.02, "b")])
    g.nodes[-1].output[0] = "logits"
    out = helper.make_tensor_value_info("logits", F32, [1, classes])
    return g.model([pixels], [out], [("", 17)], "vit_plain")


def gpt2_past(vocab=100, hidden=64, heads=4, layers=2, max_pos=64, ids=I64):
    """GPT-2 as ONNX Runtime's optimizer leaves it: com.microsoft Attention with past state
    (`ids`: the element type of token and position ids; BeamSearch's decoder takes int32)."""
    g = G(13)
    hd = hidden // heads
    ins = [helper.make_tensor_value_info("input_ids", ids, ["batch_size", "sequence_length"]),
           helper.make_tensor_value_info("position_ids", ids, ["batch_size", "sequence_length"]),
           helper.make_tensor_value_info("attention_mask", I32, ["batch_size", "total_sequence_length"])]
    outs = []
    x = g.op("Add", [g.op("Gather", [g.w((vocab, hidden), 0.5, "wte"), "input_ids"], axis=0),
                     g.op("Gather", [g.w((max_pos, hidden), 0.5, "wpe"), "position_ids"], axis=0)])
    for i in range(layers):
        past = f"past_{i}"
        ins.append(helper.make_tensor_value_info(past, F32, [2, "batch_size", heads, "past_sequence_length", hd]))
        h = layer_norm(g, x, hidden)
        att, present = g.op("Attention", [h, g.w((hidden, 3 * hidden), 1.0 / np.sqrt(hidden)),
                                          g.w((3 * hidden,), 0.02, "b"), "attention_mask", past],
                            n_out=2, domain=MS, num_heads=heads, unidirectional=1)
        g.nodes[-1].output[1] = f"present_{i}"
        outs.append(helper.make_tensor_value_info(f"present_{i}", F32,
                                                  [2, "batch_size", heads, "total_sequence_length", hd]))
        x = g.op("Add", [x, linear(g, att, hidden, hidden)])
        h = layer_norm(g, x, hidden)
        f = g.op("FastGelu", [g.op("MatMul", [h, g.w((hidden, 4 * hidden), 0.1)]), g.w((4 * hidden,), 0.02, "b")],
                 domain=MS)
        x = g.op("Add", [x, linear(g, f, 4 * hidden, hidden)])
    x = layer_norm(g, x, hidden)
    g.op("MatMul", [x, g.w((hidden, vocab), 0.1, "lm_head")])
    g.nodes[-1].output[0] = "logits"
    outs.insert(0, helper.make_tensor_value_info("logits", F32, ["batch_size", "sequence_length", vocab]))
    return g.model(ins, outs, [("", 17), (MS, 1)], "gpt2_past")


def gpt2_beam_search(vocab=100, layers=2):
    """BeamSearch (com.microsoft) over the GPT-2 decoder held in its `decoder` attribute, as
    ONNX Runtime's convert_generation tool writes GPT-2 beam search."""
    dec = gpt2_past(vocab=vocab, layers=layers, ids=I32).graph
    dec.name = "decoder"
    scalars = {"max_length": I32, "min_length": I32, "num_beams": I32, "num_return_sequences": I32,
               "length_penalty": F32, "repetition_penalty": F32}
    ins = [helper.make_tensor_value_info("input_ids", I32, ["batch_size", "sequence_length"])]
    ins += [helper.make_tensor_value_info(n, t, [1]) for n, t in scalars.items()]
    node = helper.make_node("BeamSearch", ["input_ids"] + list(scalars), ["sequences"], name="BeamSearch_0",
                            domain=MS, decoder=dec, eos_token_id=vocab - 1, pad_token_id=vocab - 1,
                            model_type=0, no_repeat_ngram_size=0, early_stopping=0)
    out = helper.make_tensor_value_info("sequences", I32, ["batch_size", "num_return_sequences", "max_length"])
    graph = helper.make_graph([node], "gpt2_beam_search", ins, [out])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                          producer_name=PRODUCER)
    m.ir_version = 9
    return m


def llama(separate_rotary, vocab=128, hidden=64, heads=4, kv_heads=2, layers=2, inter=128, max_pos=64):
    """A decoder as onnxruntime-genai's model builder writes one (fp32, MatMuls in float)."""
    g = G(14 + separate_rotary)
    hd = hidden // heads
    ins = [helper.make_tensor_value_info("input_ids", I64, ["batch_size", "sequence_length"]),
           helper.make_tensor_value_info("attention_mask", I64, ["batch_size", "total_sequence_length"])]
    if separate_rotary:
        ins.append(helper.make_tensor_value_info("position_ids", I64, ["batch_size", "sequence_length"]))
    outs = []
    # seqlens_k = sum(mask) - 1 (int32), total_sequence_length = mask.shape[1] (int32 [1]).
    seqlens = g.op("Cast", [g.op("Sub", [g.op("ReduceSum", ["attention_mask", g.const(np.array([1], np.int64))],
                                              keepdims=0), g.const(np.array(1, np.int64))])], to=I32)
    total = g.op("Cast", [g.op("Gather", [g.op("Shape", ["attention_mask"]), g.const(np.array([1], np.int64))],
                               axis=0)], to=I32)
    inv = 1.0 / (10000 ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    angles = np.outer(np.arange(max_pos, dtype=np.float64), inv)
    cos = g.const(np.cos(angles).astype(np.float32), "cos_cache")
    sin = g.const(np.sin(angles).astype(np.float32), "sin_cache")
    x = g.op("Gather", [g.w((vocab, hidden), 0.5, "embed_tokens"), "input_ids"], axis=0)
    residual = None

    def norm_weight():
        return g.const((1 + 0.1 * g.rng.standard_normal(hidden)).astype(np.float32), "norm")

    for i in range(layers):
        if residual is None:
            h = g.op("SimplifiedLayerNormalization", [x, norm_weight()], axis=-1, epsilon=1e-6, stash_type=1)
            residual = x
        else:
            h, _, _, residual = g.op("SkipSimplifiedLayerNormalization", [x, residual, norm_weight()], n_out=4,
                                     domain=MS, epsilon=1e-6)
        q = g.op("MatMul", [h, g.w((hidden, hidden), 1.0 / np.sqrt(hidden))])
        k = g.op("MatMul", [h, g.w((hidden, kv_heads * hd), 1.0 / np.sqrt(hidden))])
        v = g.op("MatMul", [h, g.w((hidden, kv_heads * hd), 1.0 / np.sqrt(hidden))])
        pk, pv = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        for n in (pk, pv):
            ins.append(helper.make_tensor_value_info(n, F32, ["batch_size", kv_heads, "past_sequence_length", hd]))
        if separate_rotary:
            q = g.op("RotaryEmbedding", [q, "position_ids", cos, sin], domain=MS, num_heads=heads)
            k = g.op("RotaryEmbedding", [k, "position_ids", cos, sin], domain=MS, num_heads=kv_heads)
            att = g.op("GroupQueryAttention", [q, k, v, pk, pv, seqlens, total], n_out=3, domain=MS,
                       num_heads=heads, kv_num_heads=kv_heads)
        else:
            att = g.op("GroupQueryAttention", [q, k, v, pk, pv, seqlens, total, cos, sin], n_out=3, domain=MS,
                       num_heads=heads, kv_num_heads=kv_heads, do_rotary=1, rotary_interleaved=0)
        a, pres_k, pres_v = att
        g.nodes[-1].output[1] = f"present.{i}.key"
        g.nodes[-1].output[2] = f"present.{i}.value"
        for n in ("key", "value"):
            outs.append(helper.make_tensor_value_info(f"present.{i}.{n}", F32,
                                                      ["batch_size", kv_heads, "total_sequence_length", hd]))
        o = g.op("MatMul", [a, g.w((hidden, hidden), 1.0 / np.sqrt(hidden))])
        h, _, _, residual = g.op("SkipSimplifiedLayerNormalization", [o, residual, norm_weight()], n_out=4,
                                 domain=MS, epsilon=1e-6)
        gate = g.op("MatMul", [h, g.w((hidden, inter), 1.0 / np.sqrt(hidden))])
        up = g.op("MatMul", [h, g.w((hidden, inter), 1.0 / np.sqrt(hidden))])
        silu = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
        x = g.op("MatMul", [g.op("Mul", [silu, up]), g.w((inter, hidden), 1.0 / np.sqrt(inter))])
    h, _, _, _ = g.op("SkipSimplifiedLayerNormalization", [x, residual, norm_weight()], n_out=4, domain=MS,
                      epsilon=1e-6)
    g.op("MatMul", [h, g.w((hidden, vocab), 0.1, "lm_head")])
    g.nodes[-1].output[0] = "logits"
    outs.insert(0, helper.make_tensor_value_info("logits", F32, ["batch_size", "sequence_length", vocab]))
    name = "llama_rope_gqa" if separate_rotary else "llama_gqa"
    return g.model(ins, outs, [("", 17), (MS, 1)], name)


# ------------------------------------------------------------------------------------- inputs
# BeamSearch's scalar inputs.
SCALARS = {"max_length": 10, "min_length": 1, "num_beams": 3, "num_return_sequences": 2,
           "length_penalty": 1.0, "repetition_penalty": 1.0}

def feeds_for(model, dims):
    """Valid inputs for `model` at `dims` (batch 2: the second row padded on the left by one
    token where the model has an attention mask)."""
    rng = np.random.default_rng(7)
    b, s, past = dims["batch_size"], dims["sequence_length"], dims.get("past_sequence_length", 0)
    total = s + past
    feeds = {}
    for i in model.graph.input:
        shape = []
        for d in i.type.tensor_type.shape.dim:
            shape.append(d.dim_value if d.HasField("dim_value") else dims[d.dim_param])
        et = i.type.tensor_type.elem_type
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, 99, size=shape).astype(np.int32 if et == I32 else np.int64)
        elif i.name == "token_type_ids":
            feeds[i.name] = np.zeros(shape, np.int64)
        elif i.name == "position_ids":
            feeds[i.name] = np.tile(np.arange(past, past + s, dtype=np.int64), (b, 1))
        elif i.name in SCALARS:
            feeds[i.name] = np.array([SCALARS[i.name]], np.float32 if et == F32 else np.int32)
        elif i.name == "attention_mask":
            m = np.ones(shape, np.int64)
            if b > 1 and "total_sequence_length" not in dims:
                m[1, -1] = 0  # right padding for encoders
            feeds[i.name] = m.astype(np.int32 if et == I32 else np.int64)
        else:
            dt = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}[et]
            feeds[i.name] = rng.standard_normal(shape).astype(dt)
    return feeds


def save(out_dir, name, model, dims, info):
    # (No onnx.checker: genai writes SimplifiedLayerNormalization in the default domain, which
    # only ONNX Runtime registers; the session below is the check.)
    path = os.path.join(out_dir, name + ".onnx")
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(model.SerializeToString())
    os.replace(tmp, path)
    feeds = feeds_for(model, dims)
    np.savez(os.path.join(out_dir, name + ".inputs.npz"), **feeds)
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    res = sess.run(None, feeds)
    ops = sorted({f"{n.domain}::{n.op_type}" for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    info[name] = {"ops": ops, "dims": dims, "nodes": len(model.graph.node),
                  "outputs_finite": bool(all(np.isfinite(r).all() for r in res if r.dtype.kind == "f"))}
    print(f"{name}: {len(model.graph.node)} nodes, contrib ops {ops}")


def main(out_dir):
    import onnxruntime as ort  # noqa: F401 (checked early)
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.float16 import convert_float_to_float16

    os.makedirs(out_dir, exist_ok=True)
    info = {}
    enc = {"batch_size": 2, "sequence_length": 8}
    dec_prefill = {"batch_size": 2, "sequence_length": 5, "past_sequence_length": 0, "total_sequence_length": 5}
    dec_step = {"batch_size": 2, "sequence_length": 1, "past_sequence_length": 6, "total_sequence_length": 7}

    bert = bert_plain()
    save(out_dir, "bert_plain", bert, enc, info)
    # The optimizer's attention fusion wants the reshapes of older exports (constant [0, 0, N, H]).
    tmp = os.path.join(out_dir, "bert_export.onnx.tmp")
    onnx.save(bert_plain(const_shapes=True), tmp)
    fused = optimizer.optimize_model(tmp, model_type="bert", num_heads=4, hidden_size=64, opt_level=0,
                                     use_gpu=False).model
    if not any(o.domain == MS for o in fused.opset_import):
        fused.opset_import.append(helper.make_opsetid(MS, 1))
    os.remove(tmp)
    save(out_dir, "bert_fused", fused, enc, info)
    for src, dst in (("bert_plain", "bert_plain_int8"), ("bert_fused", "bert_fused_int8")):
        q = os.path.join(out_dir, dst + ".onnx")
        quantize_dynamic(os.path.join(out_dir, src + ".onnx"), q, weight_type=QuantType.QInt8,
                         extra_options={"DefaultTensorType": TensorProto.FLOAT})
        save(out_dir, dst, onnx.load(q), enc, info)

    vit = vit_plain()
    save(out_dir, "vit_plain", vit, {"batch_size": 1, "sequence_length": 1}, info)
    save(out_dir, "vit_int4", nbits(vit, 32, True), {"batch_size": 1, "sequence_length": 1}, info)

    save(out_dir, "gpt2_past", gpt2_past(), dec_step, info)
    save(out_dir, "gpt2_beam_search", gpt2_beam_search(), {"batch_size": 2, "sequence_length": 4}, info)

    for sep in (False, True):
        m = llama(sep)
        name = m.graph.name
        save(out_dir, name, m, dec_prefill, info)
        save(out_dir, name + "_decode", m, dec_step, info)
        if not sep:
            save(out_dir, name + "_int4", nbits(m, 32, True), dec_step, info)
            save(out_dir, name + "_int4_b16_zp", nbits(m, 16, False), dec_prefill, info)
            half = convert_float_to_float16(m, keep_io_types=False, disable_shape_infer=True)
            save(out_dir, name + "_fp16", half, dec_step, info)
    with open(os.path.join(out_dir, "transformers.json"), "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
    print(f"transformers: {len(info)} models in {out_dir}")


def nbits(model, block, symmetric):
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    cfg = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric, bits=4)
    q = MatMulNBitsQuantizer(onnx.ModelProto.FromString(model.SerializeToString()), algo_config=cfg)
    q.process()
    out = q.model.model
    out.graph.name = model.graph.name + "_int4"
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_transformers.py OUT_DIR")
    main(sys.argv[1])
