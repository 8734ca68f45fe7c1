#!/usr/bin/env python3
"""Small stand-ins for the held-out models of issue 48, built with onnx.helper from fixed seeds.

    make_held_out.py OUT_DIR [NAME...]

Writes OUT_DIR/NAME.onnx for each NAME (all when none is named):
- gpt2_embed: the four-node GPT-2 block ONNX Runtime's transformer optimizer writes
  (com.microsoft EmbedLayerNormalization -> Attention -> MatMul -> SkipLayerNormalization,
  int32 ids, opset 16). The skip input of SkipLayerNormalization is EmbedLayerNormalization's
  optional output 2, the embedding sum (GPT-2 is pre-norm: the residual is the sum); the file
  lists SkipLayerNormalization first, as ONNX Runtime's test models do.
- gpt2_embed_ort: ONNX Runtime's own GPT-2 test model of that block (its
  `gpt2_model_generator.py`, smaller), nodes in its file order, the embedding sum a graph output.
- bert_mask: a plain BERT-style front as an exporter writes it: int64 `input_ids`,
  `token_type_ids`, `position_ids` and `attention_mask`, Gathers from the embedding tables, the
  extended mask `(1 - mask) * -10000` added to the scores, and a Softmax whose row is all
  -inf-like when the mask is not 0/1. (Inputs out of a table's rows make Gather fail.)
- style_opset7: a fast-neural-style network saved at opset 7 with the experimental ops of that
  era (ImageScaler, Crop, InstanceNormalization, ConvTranspose, ScaledTanh, Scale, Affine,
  ParametricSoftplus, ThresholdedRelu), 16 heavy ops, input [N, 3, 720, 720].
- legacy_fill: ConstantFill, DynamicSlice, GivenTensorFill, GRUUnit (for inference only).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

F32 = TensorProto.FLOAT
I64 = TensorProto.INT64
I32 = TensorProto.INT32
MS = "com.microsoft"


def t(name, a):
    return helper.make_tensor(name, {np.float32: F32, np.int64: I64, np.int32: I32}[a.dtype.type],
                              a.shape, a.flatten().tolist())


def gpt2_embed():
    rng = np.random.default_rng(48)
    H, V, P, heads = 16, 50, 32, 2
    w = lambda *s: (rng.standard_normal(s) * 0.1).astype(np.float32)
    inits = [
        t("wte", w(V, H)), t("wpe", w(P, H)),
        t("ln_g", (1 + w(H)).astype(np.float32)), t("ln_b", w(H)),
        t("attn_w", w(H, 3 * H)), t("attn_b", w(3 * H)),
        t("proj_w", w(H, H)), t("proj_b", w(H)),
        t("ln2_g", (1 + w(H)).astype(np.float32)), t("ln2_b", w(H)),
    ]
    # In the order ONNX Runtime's GPT-2 test models list them: the last reader first (ONNX
    # Runtime sorts a graph before it runs it; the file's order is not topological).
    nodes = [
        helper.make_node(
            "SkipLayerNormalization", ["proj_out", "embed_sum", "ln2_g", "ln2_b", "proj_b"],
            ["last_hidden", "", "", "residual"], name="attn_skip_layernorm", domain=MS,
            epsilon=1e-5),
        helper.make_node(
            "EmbedLayerNormalization",
            ["input_ids", "", "wte", "wpe", "", "ln_g", "ln_b", "", "position_ids"],
            ["EmbedLayerNormalization_0_output", "", "embed_sum"],
            name="EmbedLayerNormalization_0", domain=MS, epsilon=1e-5),
        helper.make_node(
            "Attention",
            ["EmbedLayerNormalization_0_output", "attn_w", "attn_b", "attention_mask"],
            ["attn_out"], name="Attention_0", domain=MS, num_heads=heads, unidirectional=1),
        helper.make_node("MatMul", ["attn_out", "proj_w"], ["proj_out"], name="MatMul_0"),
    ]
    g = helper.make_graph(
        nodes, "gpt2_embed",
        [helper.make_tensor_value_info("input_ids", I32, ["batch", "seq"]),
         helper.make_tensor_value_info("position_ids", I32, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", I32, ["batch", "seq"])],
        [helper.make_tensor_value_info("last_hidden", F32, ["batch", "seq", H]),
         helper.make_tensor_value_info("residual", F32, ["batch", "seq", H])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16),
                                            helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m


def gpt2_embed_ort():
    """`create_gpt2_fused_embedlayer(one_attention_node=True, output_embedding_sum=True)` of
    ONNX Runtime's `test/python/transformers/gpt2_model_generator.py`, smaller: the ids are
    also the segment and position ids, the embedding sum is a graph output, and the
    SkipLayerNormalization that reads output 0 comes first in the file."""
    rng = np.random.default_rng(51)
    H, A, heads = 16, 8, 2
    w = lambda *s: (rng.standard_normal(s) * 0.1).astype(np.float32)
    inits = [
        t("dense_bias", w(H)), t("word_embeddings_weight", w(101, H)),
        t("pos_embeddings_weight", w(100, H)), t("token_embeddings_weight", w(10, H)),
        t("layernorm_weight", (1 + w(H)).astype(np.float32)), t("layernorm_bias", w(H)),
        t("qkv_weight", w(H, A * 3)), t("qkv_bias", w(A * 3)), t("fix_hidden_size", w(A, H)),
    ]
    nodes = [
        helper.make_node(
            "SkipLayerNormalization",
            ["EmbedLayerNormalization_0_output", "qkv_out", "layernorm_weight", "layernorm_bias",
             "dense_bias"], ["output_0"], "attn_skip_layernorm", domain=MS, epsilon=0.1),
        helper.make_node(
            "EmbedLayerNormalization",
            ["ids", "ids", "word_embeddings_weight", "pos_embeddings_weight",
             "token_embeddings_weight", "layernorm_weight", "layernorm_bias", "", "ids"],
            ["EmbedLayerNormalization_0_output", "EmbedLayerNormalization_0_dummy_mask_index",
             "embedding_sum"], "EmbedLayerNormalization_0", domain=MS, epsilon=0.1),
        helper.make_node(
            "Attention", ["EmbedLayerNormalization_0_output", "qkv_weight", "qkv_bias", ""],
            ["attn_out"], "qkv_attn", domain=MS, num_heads=heads),
        helper.make_node("MatMul", ["attn_out", "fix_hidden_size"], ["qkv_out"],
                         "matmul_after_attn"),
    ]
    g = helper.make_graph(
        nodes, "GPT2_embedlayer_graph",
        [helper.make_tensor_value_info("ids", I32, ["batch_size", "sequence_length"])],
        [helper.make_tensor_value_info("output_0", F32, ["batch_size", "sequence_length", H]),
         helper.make_tensor_value_info("embedding_sum", F32,
                                       ["batch_size", "sequence_length", H])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("ai.onnx", 16)])
    m.ir_version = 8
    return m


def bert_mask():
    rng = np.random.default_rng(49)
    H, V, P, T = 8, 30, 20, 2
    w = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)
    inits = [
        t("word", w(V, H)), t("pos", w(P, H)), t("type", w(T, H)),
        t("one", np.array(1.0, np.float32)), t("big", np.array(-10000.0, np.float32)),
        t("ax1", np.array([1], np.int64)), t("ax12", np.array([1, 2], np.int64)),
    ]
    n = helper.make_node
    nodes = [
        n("Gather", ["word", "input_ids"], ["we"], name="word_gather"),
        n("Gather", ["pos", "position_ids"], ["pe"], name="pos_gather"),
        n("Gather", ["type", "token_type_ids"], ["te"], name="type_gather"),
        n("Add", ["we", "pe"], ["e1"], name="add1"),
        n("Add", ["e1", "te"], ["e"], name="add2"),
        # scores[b, i, j] = e[b, i] . e[b, j]
        n("Transpose", ["e"], ["et"], name="tr", perm=[0, 2, 1]),
        n("MatMul", ["e", "et"], ["scores"], name="qk"),
        # The extended mask: (1 - mask) * -10000, broadcast over the query rows.
        n("Cast", ["attention_mask"], ["mf"], name="mask_cast", to=F32),
        n("Sub", ["one", "mf"], ["inv"], name="mask_sub"),
        n("Mul", ["inv", "big"], ["bias"], name="mask_mul"),
        n("Unsqueeze", ["bias", "ax1"], ["bias3"], name="mask_unsq"),
        n("Add", ["scores", "bias3"], ["masked"], name="mask_add"),
        n("Softmax", ["masked"], ["probs"], name="softmax", axis=-1),
        # A probability that underflows to 0 everywhere (a mask of large values) makes the
        # normalisation 0/0: the exporter's "safe softmax" divides by the row's sum.
        n("Exp", ["masked"], ["ex"], name="exp"),
        n("ReduceSum", ["ex", "ax12"], ["den"], name="den", keepdims=1),
        n("Div", ["ex", "den"], ["probs2"], name="norm"),
        n("Add", ["probs", "probs2"], ["p"], name="mix"),
        n("MatMul", ["p", "e"], ["ctx"], name="pv"),
    ]
    g = helper.make_graph(
        nodes, "bert_mask",
        [helper.make_tensor_value_info("input_ids", I64, ["batch", "seq"]),
         helper.make_tensor_value_info("token_type_ids", I64, ["batch", "seq"]),
         helper.make_tensor_value_info("position_ids", I64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", I64, ["batch", "seq"])],
        [helper.make_tensor_value_info("ctx", F32, ["batch", "seq", H])],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def style_opset7():
    """Johnson et al.'s fast-neural-style network as the ONNX model zoo's exporters wrote it at
    opset 7 (narrower): ImageScaler, a reflection Pad, 3 Convs down, 5 residual blocks (two
    unpadded Convs each, the skip cropped to match by Crop), 2 ConvTransposes up, a Conv out;
    InstanceNormalization after each; ScaledTanh, ParametricSoftplus, Affine, Scale and
    ThresholdedRelu on the way. 16 heavy ops, input [N, 3, 720, 720]."""
    rng = np.random.default_rng(50)
    n = helper.make_node
    nodes, inits = [], []

    def w(name, *s):
        inits.append(t(name, (rng.standard_normal(s) * (1.0 / np.sqrt(np.prod(s[1:])))
                              ).astype(np.float32)))
        return name

    def inorm(x, c, name):
        inits.append(t(name + "_s", (1 + 0.1 * rng.standard_normal(c)).astype(np.float32)))
        inits.append(t(name + "_b", (0.1 * rng.standard_normal(c)).astype(np.float32)))
        nodes.append(n("InstanceNormalization", [x, name + "_s", name + "_b"], [name],
                       name=name, epsilon=1e-5))
        return name

    def conv(x, cin, cout, k, name, stride=1, pad=None):
        pad = k // 2 if pad is None else pad
        nodes.append(n("Conv", [x, w(name + "_w", cout, cin, k, k), w(name + "_b", cout)],
                       [name], name=name, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad] * 4))
        return name

    def relu(x, name):
        nodes.append(n("Relu", [x], [name], name=name))
        return name

    C = [8, 16, 32]
    nodes.append(n("ImageScaler", ["x"], ["xs"], name="scaler", scale=1.0 / 255,
                   bias=[-0.5, -0.4, -0.3]))
    nodes.append(n("Pad", ["xs"], ["xp"], name="pad0", mode="reflect",
                   pads=[0, 0, 40, 40, 0, 0, 40, 40]))
    h = relu(inorm(conv("xp", 3, C[0], 9, "conv1"), C[0], "in1"), "relu1")
    h = relu(inorm(conv(h, C[0], C[1], 3, "conv2", 2), C[1], "in2"), "relu2")
    h = inorm(conv(h, C[1], C[2], 3, "conv3", 2), C[2], "in3")
    nodes.append(n("ParametricSoftplus", [h], ["sp"], name="psoftplus", alpha=0.9, beta=1.1))
    h = "sp"
    for r in range(5):
        a = relu(inorm(conv(h, C[2], C[2], 3, f"res{r}_a", pad=0), C[2], f"res{r}_ina"),
                 f"res{r}_relu")
        b = inorm(conv(a, C[2], C[2], 3, f"res{r}_b", pad=0), C[2], f"res{r}_inb")
        nodes.append(n("Crop", [h], [f"res{r}_skip"], name=f"res{r}_crop", border=[2, 2, 2, 2]))
        nodes.append(n("Add", [f"res{r}_skip", b], [f"res{r}"], name=f"res{r}_add"))
        h = f"res{r}"
    nodes.append(n("Scale", [h], ["sc"], name="scale", scale=0.5))
    nodes.append(n("Affine", ["sc"], ["af"], name="affine", alpha=2.0, beta=0.1))
    h = "af"
    for i, (cin, cout) in enumerate([(C[2], C[1]), (C[1], C[0])]):
        name = f"deconv{i}"
        nodes.append(n("ConvTranspose", [h, w(name + "_w", cin, cout, 3, 3), w(name + "_b", cout)],
                       [name], name=name, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                       strides=[2, 2], output_padding=[1, 1]))
        h = relu(inorm(name, cout, f"in_up{i}"), f"relu_up{i}")
    nodes.append(n("ThresholdedRelu", [h], ["tr"], name="trelu", alpha=0.05))
    h = conv("tr", C[0], 3, 9, "conv_out")
    nodes.append(n("ScaledTanh", [h], ["y"], name="stanh", alpha=150.0, beta=0.01))
    g = helper.make_graph(
        nodes, "style_opset7",
        [helper.make_tensor_value_info("x", F32, ["N", 3, 720, 720])],
        [helper.make_tensor_value_info("y", F32, None)],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 7)])
    m.ir_version = 3
    return m


def legacy_fill():
    """The other experimental ops of opsets 1-8 (ONNX Runtime 1.32 runs DynamicSlice only; the
    model is for inference, not for running): ConstantFill from a shape input, DynamicSlice,
    GivenTensorFill, GRUUnit."""
    n = helper.make_node
    nodes = [
        n("ConstantFill", ["shape"], ["filled"], name="cfill", input_as_shape=1, value=1.0,
          extra_shape=[4]),
        n("DynamicSlice", ["x", "starts", "ends", "axes"], ["sliced"], name="dslice"),
        n("GivenTensorFill", [], ["given"], name="gfill", shape=[2, 3], values=[1, 2, 3, 4, 5, 6]),
        n("GRUUnit", ["h", "gates", "lens", "step"], ["h1"], name="gru_unit"),
        n("Add", ["sliced", "sliced"], ["s2"], name="add"),
    ]
    inits = [t("shape", np.array([2, 3], np.int64)), t("starts", np.array([1], np.int64)),
             t("ends", np.array([3], np.int64)), t("axes", np.array([1], np.int64)),
             t("lens", np.array([1, 1], np.int32)), t("step", np.array([0], np.int32))]
    g = helper.make_graph(
        nodes, "legacy_fill",
        [helper.make_tensor_value_info("x", F32, ["N", 5]),
         helper.make_tensor_value_info("h", F32, ["N", 4]),
         helper.make_tensor_value_info("gates", F32, ["N", 12])],
        [helper.make_tensor_value_info(o, F32, None) for o in ["filled", "s2", "given", "h1"]],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 7)])
    m.ir_version = 3
    return m


MODELS = {"gpt2_embed": gpt2_embed, "gpt2_embed_ort": gpt2_embed_ort, "bert_mask": bert_mask, "style_opset7": style_opset7,
          "legacy_fill": legacy_fill}

if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[2:] or list(MODELS):
        onnx.save(MODELS[name](), os.path.join(out, name + ".onnx"))
