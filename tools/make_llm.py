#!/usr/bin/env python3
"""An LLM-scale int4 decoder in an onnxruntime-genai-style folder, from random weights.

    make_llm.py OUT_DIR [--size 7b|1b|tiny] [--opset 21]

Writes OUT_DIR/model.onnx, OUT_DIR/model.onnx.data (every weight, as external data) and
OUT_DIR/genai_config.json, plus a tokenizer_config.json stand-in (the files a genai folder
carries beside the model). The graph is what onnxruntime-genai's model builder writes for a
Llama-style int4 model: token embedding (float16 Gather), per layer SimplifiedLayerNormalization
/ SkipSimplifiedLayerNormalization, q/k/v/o and gate/up/down projections as com.microsoft
MatMulNBits (bits 4, block_size 32, float16 scales, no zero points), GroupQueryAttention with
rotary embeddings inside it (do_rotary, cos/sin caches), past/present KV per layer, a SwiGLU
MLP, and an int4 lm_head (accuracy_level 0, the builder's choice for GPU providers; 4 with
`--accuracy-level 4`, its choice for the CPU). Sizes:

    7b:   32 layers, hidden 4096, 32 query heads, 8 KV heads, MLP 14336, vocab 32000 (~3.9 GB)
    1b:   16 layers, hidden 2048, 32 query heads, 8 KV heads, MLP 8192,  vocab 32000 (~0.8 GB)
    tiny: 2 layers, hidden 256, 8 query heads, 2 KV heads, MLP 512, vocab 512 (runs in a test)

The weights are random bytes (packed int4 nibbles and float16 scales in a sane range), written
straight to the data file one tensor at a time: memory stays small whatever the size.
"""
import argparse
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

MS = "com.microsoft"
F16 = TensorProto.FLOAT16
SIZES = {
    "7b": dict(layers=32, hidden=4096, heads=32, kv=8, inter=14336, vocab=32000),
    "1b": dict(layers=16, hidden=2048, heads=32, kv=8, inter=8192, vocab=32000),
    "tiny": dict(layers=2, hidden=256, heads=8, kv=2, inter=512, vocab=512),
}
ALIGN = 4096


class Data:
    """The external data file, written as tensors are made."""

    def __init__(self, path, seed):
        self.f = open(path, "wb")
        self.name = os.path.basename(path)
        self.rng = np.random.default_rng(seed)
        self.off = 0

    def tensor(self, name, dtype, dims, payload):
        pad = (-self.off) % ALIGN
        if pad:
            self.f.write(b"\0" * pad)
            self.off += pad
        t = TensorProto(name=name, data_type=dtype, dims=dims)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", self.name), ("offset", str(self.off)), ("length", str(len(payload)))):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.f.write(payload)
        self.off += len(payload)
        return t

    def random_bytes(self, n):
        out = bytearray()
        while n > 0:
            k = min(n, 1 << 26)
            out += self.rng.bytes(k)
            n -= k
        return bytes(out)

    def f16(self, shape, scale):
        a = (self.rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16)
        return a.tobytes()


def build(out_dir, size, opset, accuracy_level):
    s = SIZES[size]
    L, H, NH, KV, I, V = s["layers"], s["hidden"], s["heads"], s["kv"], s["inter"], s["vocab"]
    hd = H // NH
    block = 32
    os.makedirs(out_dir, exist_ok=True)
    data = Data(os.path.join(out_dir, "model.onnx.data"), 1234)
    inits, nodes = [], []
    count = {}

    def name(base):
        n = count.get(base, 0)
        count[base] = n + 1
        return f"/model/{base}_{n}"

    def node(op, ins, outs, domain="", **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=name(op), domain=domain or None, **attrs))

    def nbits(x, k, n, label):
        blocks = (k + block - 1) // block
        blob = block // 2
        w = data.tensor(f"{label}.qweight", TensorProto.UINT8, [n, blocks, blob], data.random_bytes(n * blocks * blob))
        sc = data.tensor(f"{label}.scales", F16, [n * blocks], data.f16([n * blocks], 0.002))
        inits.extend([w, sc])
        out = f"{label}/output_0"
        node("MatMulNBits", [x, w.name, sc.name], [out], domain=MS, K=k, N=n, bits=4, block_size=block,
             accuracy_level=accuracy_level)
        return out

    def norm_weight(label):
        t = data.tensor(label, F16, [H], (np.ones(H, np.float16) + 0).tobytes())
        inits.append(t)
        return t.name

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                            ["batch_size", "total_sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", F16, ["batch_size", "sequence_length", V])]
    emb = data.tensor("model.embed_tokens.weight", F16, [V, H], data.f16([V, H], 0.02))
    inits.append(emb)
    node("Gather", [emb.name, "input_ids"], ["/model/embed_tokens/output_0"])
    # seqlens_k and total_sequence_length from the attention mask, as the builder writes them.
    inits.append(helper.make_tensor("/model/one", TensorProto.INT64, [], [1]))
    inits.append(helper.make_tensor("/model/axes1", TensorProto.INT64, [1], [1]))
    node("ReduceSum", ["attention_mask", "/model/axes1"], ["/model/mask/sum"], keepdims=0)
    node("Sub", ["/model/mask/sum", "/model/one"], ["/model/mask/sub"])
    node("Cast", ["/model/mask/sub"], ["seqlens_k"], to=TensorProto.INT32)
    node("Shape", ["attention_mask"], ["/model/mask/shape"])
    node("Gather", ["/model/mask/shape", "/model/axes1"], ["/model/mask/total64"], axis=0)
    node("Cast", ["/model/mask/total64"], ["total_seq_len"], to=TensorProto.INT32)
    max_pos = 4096
    inv = 1.0 / (10000 ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = np.outer(np.arange(max_pos, dtype=np.float64), inv)
    for label, arr in (("cos_cache", np.cos(ang)), ("sin_cache", np.sin(ang))):
        inits.append(data.tensor(label, F16, list(arr.shape), arr.astype(np.float16).tobytes()))
    x = "/model/embed_tokens/output_0"
    residual = None
    for i in range(L):
        p = f"model.layers.{i}"
        if residual is None:
            h = f"/model/layers.{i}/input_layernorm/output_0"
            node("SimplifiedLayerNormalization", [x, norm_weight(f"{p}.input_layernorm.weight")], [h], axis=-1,
                 epsilon=1e-5, stash_type=1)
            residual = x
        else:
            h = f"/model/layers.{i}/input_layernorm/output_0"
            r = f"/model/layers.{i}/input_layernorm/output_3"
            node("SkipSimplifiedLayerNormalization", [x, residual, norm_weight(f"{p}.input_layernorm.weight")],
                 [h, "", "", r], domain=MS, epsilon=1e-5)
            residual = r
        q = nbits(h, H, H, f"{p}.attn.q_proj")
        k = nbits(h, H, KV * hd, f"{p}.attn.k_proj")
        v = nbits(h, H, KV * hd, f"{p}.attn.v_proj")
        pk, pv = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        for n in (pk, pv):
            inputs.append(helper.make_tensor_value_info(n, F16, ["batch_size", KV, "past_sequence_length", hd]))
        pres = [f"present.{i}.key", f"present.{i}.value"]
        for n in pres:
            outputs.append(helper.make_tensor_value_info(n, F16, ["batch_size", KV, "total_sequence_length", hd]))
        a = f"/model/layers.{i}/attn/output_0"
        node("GroupQueryAttention", [q, k, v, pk, pv, "seqlens_k", "total_seq_len", "cos_cache", "sin_cache"],
             [a] + pres, domain=MS, num_heads=NH, kv_num_heads=KV, do_rotary=1, rotary_interleaved=0,
             local_window_size=-1)
        o = nbits(a, H, H, f"{p}.attn.o_proj")
        h = f"/model/layers.{i}/post_attention_layernorm/output_0"
        r = f"/model/layers.{i}/post_attention_layernorm/output_3"
        node("SkipSimplifiedLayerNormalization", [o, residual, norm_weight(f"{p}.post_attention_layernorm.weight")],
             [h, "", "", r], domain=MS, epsilon=1e-5)
        residual = r
        gate = nbits(h, H, I, f"{p}.mlp.gate_proj")
        up = nbits(h, H, I, f"{p}.mlp.up_proj")
        sig = f"/model/layers.{i}/mlp/act/sigmoid"
        node("Sigmoid", [gate], [sig])
        silu = f"/model/layers.{i}/mlp/act/mul"
        node("Mul", [gate, sig], [silu])
        prod = f"/model/layers.{i}/mlp/mul"
        node("Mul", [silu, up], [prod])
        x = nbits(prod, I, H, f"{p}.mlp.down_proj")
    h = "/model/norm/output_0"
    node("SkipSimplifiedLayerNormalization", [x, residual, norm_weight("model.norm.weight")], [h], domain=MS,
         epsilon=1e-5)
    logits = nbits(h, H, V, "lm_head")
    nodes[-1].output[0] = "logits"
    del logits
    data.f.close()
    graph = helper.make_graph(nodes, "main_graph", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)],
                              producer_name="onnxruntime-genai")
    model.ir_version = 10
    with open(os.path.join(out_dir, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    config = {
        "model": {
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "type": "llama", "vocab_size": V,
            "context_length": max_pos,
            "decoder": {
                "filename": "model.onnx", "head_size": hd, "hidden_size": H, "num_attention_heads": NH,
                "num_hidden_layers": L, "num_key_value_heads": KV,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "past_key_names": "past_key_values.%d.key",
                           "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
            },
        },
        "search": {"max_length": max_pos, "do_sample": False, "num_beams": 1},
    }
    with open(os.path.join(out_dir, "genai_config.json"), "w") as f:
        json.dump(config, f, indent=4)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": max_pos, "tokenizer_class": "LlamaTokenizer"}, f, indent=2)
    print(f"{out_dir}: {len(nodes)} nodes, {data.off / 1e9:.2f} GB of external data")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--size", choices=sorted(SIZES), default="7b")
    ap.add_argument("--opset", type=int, default=21)
    # The builder's default for GPU providers (DirectML, WebGPU, CUDA) is 0; for the CPU, 4.
    ap.add_argument("--accuracy-level", type=int, default=0)
    a = ap.parse_args()
    build(a.out_dir, a.size, a.opset, a.accuracy_level)


if __name__ == "__main__":
    main()
