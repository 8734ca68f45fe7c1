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
  ParametricSoftplus, ThresholdedRelu), input [1, 3, 64, 64].
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
    rng = np.random.default_rng(50)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)
    n = helper.make_node
    inits = [
        t("c1_w", w(8, 3, 3, 3)), t("c1_b", w(8)),
        t("in1_s", (1 + w(8)).astype(np.float32)), t("in1_b", w(8)),
        t("c2_w", w(8, 8, 3, 3)), t("c2_b", w(8)),
        t("in2_s", (1 + w(8)).astype(np.float32)), t("in2_b", w(8)),
        t("ct_w", w(8, 4, 3, 3)), t("ct_b", w(4)),
        t("in3_s", (1 + w(4)).astype(np.float32)), t("in3_b", w(4)),
        t("c3_w", w(3, 4, 3, 3)), t("c3_b", w(3)),
    ]
    nodes = [
        n("ImageScaler", ["x"], ["xs"], name="scaler", scale=1.0 / 255,
          bias=[-0.5, -0.4, -0.3]),
        n("Pad", ["xs"], ["xp"], name="pad0", mode="reflect", pads=[0, 0, 4, 4, 0, 0, 4, 4]),
        n("Conv", ["xp", "c1_w", "c1_b"], ["h1"], name="conv1", kernel_shape=[3, 3],
          pads=[1, 1, 1, 1]),
        n("InstanceNormalization", ["h1", "in1_s", "in1_b"], ["n1"], name="in1", epsilon=1e-5),
        n("Relu", ["n1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "c2_w", "c2_b"], ["h2"], name="conv2", kernel_shape=[3, 3],
          pads=[1, 1, 1, 1], strides=[2, 2]),
        n("InstanceNormalization", ["h2", "in2_s", "in2_b"], ["n2"], name="in2", epsilon=1e-5),
        n("ParametricSoftplus", ["n2"], ["sp"], name="psoftplus", alpha=0.9, beta=1.1),
        n("Scale", ["sp"], ["sc"], name="scale", scale=0.5),
        n("Affine", ["sc"], ["af"], name="affine", alpha=2.0, beta=0.1),
        n("ConvTranspose", ["af", "ct_w", "ct_b"], ["u"], name="deconv", kernel_shape=[3, 3],
          pads=[1, 1, 1, 1], strides=[2, 2], output_padding=[1, 1]),
        n("InstanceNormalization", ["u", "in3_s", "in3_b"], ["n3"], name="in3", epsilon=1e-5),
        n("ThresholdedRelu", ["n3"], ["tr"], name="trelu", alpha=0.05),
        n("Conv", ["tr", "c3_w", "c3_b"], ["h3"], name="conv3", kernel_shape=[3, 3],
          pads=[1, 1, 1, 1]),
        n("ScaledTanh", ["h3"], ["st"], name="stanh", alpha=0.5, beta=1.5),
        n("Crop", ["st"], ["y"], name="crop", border=[4, 4, 4, 4]),
    ]
    g = helper.make_graph(
        nodes, "style_opset7",
        [helper.make_tensor_value_info("x", F32, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("y", F32, None)],
        inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 7)])
    m.ir_version = 3
    return m


MODELS = {"gpt2_embed": gpt2_embed, "gpt2_embed_ort": gpt2_embed_ort, "bert_mask": bert_mask, "style_opset7": style_opset7}

if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name in sys.argv[2:] or list(MODELS):
        onnx.save(MODELS[name](), os.path.join(out, name + ".onnx"))
