#!/usr/bin/env python3
"""Builds the parts of the test corpus that are not plain downloads.

    make_corpus.py CORPUS WHEELS STEP...

CORPUS is the corpus folder (the layout the tests read through ONNX_SAFEIFY_CORPUS), WHEELS the
folder holding the two wheels `scripts/corpus.sh` downloaded. Steps, in the order they are
needed:

  real        real/rapidocr_onnxruntime__<name>.onnx: the three PP-OCR models packed in the
              rapidocr-onnxruntime 1.4.4 wheel
  nodetests   onnx_node_tests_1.19.1/<test>/: the ONNX backend node tests packed in the onnx
              1.19.1 wheel (the newest release that ships their data)
  synthetic   synthetic/syn_mobilenet_dw_300mb.onnx (750 depthwise blocks, 326 MB) and
              synthetic/syn_50k_nodes.onnx (a chain of 50,000 small nodes)
  contrib     contrib/<case>.onnx: one tiny model per com.microsoft fused operator, and
              contrib/contrib_results.json: does ONNX Runtime run it, and how far is its output
              from a plain numpy evaluation of the unfused maths
  ortopt      ort_optimized/<model>.ort_{basic,extended,all}.onnx: the real models as ONNX
              Runtime saves them after optimising at each level, and ortopt_results.json
  quantized   quantized/<model>.<variant>.onnx: the real models and small float models quantized
              by onnxruntime.quantization (dynamic, static QOperator and QDQ), and each saved
              by ONNX Runtime at three optimisation levels; quantized_ops.json lists their
              com.microsoft operators
  noderesults node_tests_results.json: which node tests ONNX Runtime (CPU) itself passes

Every step is deterministic: fixed seeds, one thread, sorted walks. The models of `real`,
`synthetic` and `contrib` are checked against `tools/corpus.sha256` by `scripts/corpus.sh`.
"""

import collections
import glob
import json
import math
import os
import shutil
import sys
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT
PRODUCER = "onnx-safeify-corpus"
NODE_TESTS = "onnx_node_tests_1.19.1"


def only_wheel(wheels, prefix):
    found = sorted(glob.glob(os.path.join(wheels, prefix + "-*.whl")))
    if len(found) != 1:
        sys.exit(f"make_corpus: expected one {prefix} wheel in {wheels}, found {len(found)}")
    return found[0]


def write_atomically(path, data):
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def save_model(model, path):
    write_atomically(path, model.SerializeToString())


def model_of(graph, opsets):
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(domain, version) for domain, version in opsets],
        producer_name=PRODUCER,
    )
    m.ir_version = 8
    return m


def tensor(name, array):
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


# ------------------------------------------------------------------------------------ downloads
def step_real(corpus, wheels):
    out = os.path.join(corpus, "real")
    os.makedirs(out, exist_ok=True)
    with zipfile.ZipFile(only_wheel(wheels, "rapidocr_onnxruntime-1.4.4")) as z:
        names = sorted(n for n in z.namelist() if n.endswith(".onnx"))
        for n in names:
            dest = os.path.join(out, "rapidocr_onnxruntime__" + os.path.basename(n))
            write_atomically(dest, z.read(n))
    print(f"real: {len(names)} models")


def step_nodetests(corpus, wheels):
    dest = os.path.join(corpus, NODE_TESTS)
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    part = dest + ".part"
    if os.path.isdir(part):
        shutil.rmtree(part)
    prefix = "onnx/backend/test/data/node/"
    count = 0
    with zipfile.ZipFile(only_wheel(wheels, "onnx-1.19.1")) as z:
        for n in sorted(z.namelist()):
            if not n.startswith(prefix) or n.endswith("/"):
                continue
            rel = n[len(prefix):]
            target = os.path.join(part, *rel.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(z.read(n))
            count += 1
    os.replace(part, dest)
    print(f"nodetests: {len(os.listdir(dest))} tests, {count} files")


# ------------------------------------------------------------------------------------ synthetic
def depthwise_stack(path, channels=320, side=7, blocks=750):
    """MobileNet-like blocks on a [N, 320, 7, 7] tensor: a 3x3 depthwise Conv, BatchNormalization,
    Clip to [0, 6], a 1x1 Conv, BatchNormalization, Clip, and a residual Add. About 431 KB of
    float32 weights per block."""
    rng = np.random.default_rng(1)
    c = channels
    inits = [tensor("clip_min", np.array(0, np.float32)), tensor("clip_max", np.array(6, np.float32))]
    nodes = []
    prev = "input"
    for b in range(blocks):
        p = f"b{b}"
        dw = (rng.standard_normal((c, 1, 3, 3)) * 0.3).astype(np.float32)
        pw = (rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
        inits += [tensor(p + "_dw_w", dw), tensor(p + "_dw_b", np.zeros(c, np.float32)),
                  tensor(p + "_pw_w", pw), tensor(p + "_pw_b", np.zeros(c, np.float32))]
        for bn in ("bn1", "bn2"):
            for suffix, fill in (("s", 1), ("b", 0), ("m", 0), ("v", 1)):
                inits.append(tensor(f"{p}_{bn}_{suffix}", np.full(c, fill, np.float32)))

        def bn(x, which):
            stats = [f"{p}_{which}_{s}" for s in "sbmv"]
            return helper.make_node("BatchNormalization", [x] + stats, [f"{p}_{which}"], name=f"{p}_{which}")

        nodes += [
            helper.make_node("Conv", [prev, p + "_dw_w", p + "_dw_b"], [p + "_dw"], group=c,
                             kernel_shape=[3, 3], pads=[1, 1, 1, 1], name=p + "_dw"),
            bn(p + "_dw", "bn1"),
            helper.make_node("Clip", [p + "_bn1", "clip_min", "clip_max"], [p + "_a1"], name=p + "_a1"),
            helper.make_node("Conv", [p + "_a1", p + "_pw_w", p + "_pw_b"], [p + "_pw"],
                             kernel_shape=[1, 1], name=p + "_pw"),
            bn(p + "_pw", "bn2"),
            helper.make_node("Clip", [p + "_bn2", "clip_min", "clip_max"], [p + "_a2"], name=p + "_a2"),
            helper.make_node("Add", [p + "_a2", prev], [p + "_out"], name=p + "_add"),
        ]
        prev = p + "_out"
    shape = ["N", c, side, side]
    graph = helper.make_graph(nodes, "syn_mobilenet_dw", [helper.make_tensor_value_info("input", FLOAT, shape)],
                              [helper.make_tensor_value_info(prev, FLOAT, shape)], inits)
    save_model(model_of(graph, [("", 17)]), path)


def long_chain(path, length=50000, width=16):
    """A chain of `length` nodes on a [N, 16] tensor: Add(constant), Relu, Mul(constant), Tanh,
    repeated; every constant is its own initializer."""
    rng = np.random.default_rng(2)
    nodes, inits = [], []
    prev = "input"
    for i in range(length):
        out, name = f"t{i}", f"n{i}"
        kind = ("Add", "Relu", "Mul", "Tanh")[i % 4]
        inputs = [prev]
        if kind == "Add":
            inits.append(tensor(f"c{i}", rng.standard_normal(width).astype(np.float32) * 0.01))
            inputs.append(f"c{i}")
        elif kind == "Mul":
            inits.append(tensor(f"c{i}", (1 + rng.standard_normal(width) * 0.01).astype(np.float32)))
            inputs.append(f"c{i}")
        nodes.append(helper.make_node(kind, inputs, [out], name=name))
        prev = out
    graph = helper.make_graph(nodes, "syn_50k_nodes", [helper.make_tensor_value_info("input", FLOAT, ["N", width])],
                              [helper.make_tensor_value_info(prev, FLOAT, ["N", width])], inits)
    save_model(model_of(graph, [("", 17)]), path)


def step_synthetic(corpus, _wheels):
    out = os.path.join(corpus, "synthetic")
    os.makedirs(out, exist_ok=True)
    depthwise_stack(os.path.join(out, "syn_mobilenet_dw_300mb.onnx"))
    long_chain(os.path.join(out, "syn_50k_nodes.onnx"))
    print("synthetic: 2 models")


# ------------------------------------------------------------------------------------ contrib
def conv2d(x, w, b, group=1, pad=1):
    """Reference convolution (stride 1, symmetric padding) in float64, through an explicit
    patch matrix per group."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.empty((n, m, oh, ow))
    per_group = m // group
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg]
        cols = np.stack([xs[:, :, i:i + oh, j:j + ow] for i in range(kh) for j in range(kw)], axis=2)
        # cols: n, cg, kh*kw, oh, ow
        wg = w[g * per_group:(g + 1) * per_group].reshape(per_group, cg, kh * kw).astype(np.float64)
        out[:, g * per_group:(g + 1) * per_group] = np.einsum("nckhw,mck->nmhw", cols, wg)
    return out + b.reshape(1, -1, 1, 1)


def erf_gelu(v):
    v = v.astype(np.float64)
    return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))


def tanh_gelu(v):
    v = v.astype(np.float64)
    return 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))


def softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def heads(t, count):
    b, s, d = t.shape
    return t.reshape(b, s, count, d // count).transpose(0, 2, 1, 3)


def attend(q, k, v, count):
    q, k, v = heads(q, count), heads(k, count), heads(v, count)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    out = softmax(scores) @ v
    b, h, s, d = out.shape
    return out.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def step_contrib(corpus, _wheels):
    import onnxruntime as ort

    out_dir = os.path.join(corpus, "contrib")
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(3)

    def normal(shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    # The draws, in this order, make the models' weights and inputs.
    x = normal((1, 8, 10, 10))
    w = normal((16, 8, 3, 3), 0.2)
    b = normal(16)
    wd = normal((8, 1, 3, 3), 0.2)
    z = normal((1, 16, 10, 10))
    a = normal((4, 32))
    bm = normal((32, 24))
    cb = normal(24)
    h = normal((2, 5, 32))
    bias = normal(32)
    skip = normal((2, 5, 32))
    gamma = (1 + 0.1 * rng.standard_normal(32)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(32)).astype(np.float32)
    wqkv = normal((32, 96), 0.2)
    bqkv = normal(96, 0.1)
    q = normal((2, 5, 32))
    xn = normal((1, 10, 10, 8))
    wn = normal((16, 3, 3, 8), 0.2)
    heads_n = 4

    def layer_norm(v):
        v = v.astype(np.float64)
        mu = v.mean(-1, keepdims=True)
        var = ((v - mu) ** 2).mean(-1, keepdims=True)
        return (v - mu) / np.sqrt(var + 1e-5) * gamma + beta

    def rms_norm(v):
        v = v.astype(np.float64)
        return v / np.sqrt((v ** 2).mean(-1, keepdims=True) + 1e-5) * gamma

    ms = "com.microsoft"
    conv_attrs = dict(domain=ms, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    activations = [
        ("Relu", [], lambda y: np.maximum(y, 0)),
        ("Sigmoid", [], lambda y: 1 / (1 + np.exp(-y))),
        ("Tanh", [], np.tanh),
        ("LeakyRelu", [0.1], lambda y: np.where(y > 0, y, 0.1 * y)),
        ("Clip", [0.0, 6.0], lambda y: np.clip(y, 0, 6)),
        ("HardSigmoid", [0.2, 0.5], lambda y: np.clip(0.2 * y + 0.5, 0, 1)),
    ]
    # (name, node, graph inputs, initializers, reference or None, default-domain opset)
    cases = []
    for act, params, fn in activations:
        extra = {"activation_params": params} if params else {}
        cases.append((f"FusedConv_{act}",
                      helper.make_node("FusedConv", ["X", "W", "B"], ["Y"], activation=act, **extra, **conv_attrs),
                      {"X": x}, {"W": w, "B": b}, lambda fn=fn: fn(conv2d(x, w, b)), 17))
    cases += [
        ("FusedConv_Relu_depthwise",
         helper.make_node("FusedConv", ["X", "Wd", "Bd"], ["Y"], group=8, activation="Relu", **conv_attrs),
         {"X": x}, {"Wd": wd, "Bd": b[:8]}, lambda: np.maximum(conv2d(x, wd, b[:8], group=8), 0), 17),
        ("FusedConv_Relu_sum",
         helper.make_node("FusedConv", ["X", "W", "B", "Z"], ["Y"], activation="Relu", **conv_attrs),
         {"X": x, "Z": z}, {"W": w, "B": b}, lambda: np.maximum(conv2d(x, w, b) + z, 0), 17),
        ("FusedGemm_Relu",
         helper.make_node("FusedGemm", ["A", "Bm", "Cb"], ["Y"], domain=ms, activation="Relu", alpha=0.5, beta=1.0),
         {"A": a}, {"Bm": bm, "Cb": cb}, lambda: np.maximum(0.5 * (a.astype(np.float64) @ bm) + cb, 0), 17),
        ("FusedMatMul_transB_alpha",
         helper.make_node("FusedMatMul", ["A", "Bt"], ["Y"], domain=ms, transB=1, alpha=0.25),
         {"A": a}, {"Bt": bm.T.copy()}, lambda: 0.25 * (a.astype(np.float64) @ bm), 17),
        ("Gelu", helper.make_node("Gelu", ["H"], ["Y"], domain=ms), {"H": h}, {}, lambda: erf_gelu(h), 17),
        ("BiasGelu", helper.make_node("BiasGelu", ["H", "bias"], ["Y"], domain=ms),
         {"H": h}, {"bias": bias}, lambda: erf_gelu(h + bias), 17),
        ("FastGelu", helper.make_node("FastGelu", ["H", "bias"], ["Y"], domain=ms),
         {"H": h}, {"bias": bias}, lambda: tanh_gelu(h + bias), 17),
        ("QuickGelu", helper.make_node("QuickGelu", ["H"], ["Y"], domain=ms, alpha=1.702),
         {"H": h}, {}, lambda: h / (1 + np.exp(-1.702 * h.astype(np.float64))), 17),
        ("Gelu_onnx20", helper.make_node("Gelu", ["H"], ["Y"]), {"H": h}, {}, lambda: erf_gelu(h), 20),
        ("SkipLayerNormalization",
         helper.make_node("SkipLayerNormalization", ["H", "S", "gamma", "beta", "bias"], ["Y"], domain=ms, epsilon=1e-5),
         {"H": h, "S": skip}, {"gamma": gamma, "beta": beta, "bias": bias}, lambda: layer_norm(h + skip + bias), 17),
        ("SkipSimplifiedLayerNormalization",
         helper.make_node("SkipSimplifiedLayerNormalization", ["H", "S", "gamma"], ["Y"], domain=ms, epsilon=1e-5),
         {"H": h, "S": skip}, {"gamma": gamma}, lambda: rms_norm(h + skip), 17),
        ("LayerNormalization_onnx17",
         helper.make_node("LayerNormalization", ["H", "gamma", "beta"], ["Y"], epsilon=1e-5, axis=-1),
         {"H": h}, {"gamma": gamma, "beta": beta}, lambda: layer_norm(h), 17),
        ("Attention",
         helper.make_node("Attention", ["H", "Wqkv", "bqkv"], ["Y"], domain=ms, num_heads=heads_n),
         {"H": h}, {"Wqkv": wqkv, "bqkv": bqkv},
         lambda: attend(*np.split(h.astype(np.float64) @ wqkv + bqkv, 3, axis=-1), heads_n), 17),
        ("MultiHeadAttention",
         helper.make_node("MultiHeadAttention", ["Q", "H", "S"], ["Y"], domain=ms, num_heads=heads_n),
         {"Q": q, "H": h, "S": skip}, {},
         lambda: attend(q.astype(np.float64), h.astype(np.float64), skip.astype(np.float64), heads_n), 17),
        ("NhwcMaxPool",
         helper.make_node("NhwcMaxPool", ["Xn"], ["Y"], domain=ms, kernel_shape=[2, 2], strides=[2, 2]),
         {"Xn": xn}, {}, lambda: xn.reshape(1, 5, 2, 5, 2, 8).max(axis=(2, 4)), 17),
        ("NhwcConv",
         helper.make_node("NhwcConv", ["Xn", "Wn"], ["Y"], domain=ms, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         {"Xn": xn}, {"Wn": wn},
         lambda: conv2d(xn.transpose(0, 3, 1, 2), wn.transpose(0, 3, 1, 2), np.zeros(16)).transpose(0, 2, 3, 1), 17),
        ("BiasAdd", helper.make_node("BiasAdd", ["H", "bias", "S"], ["Y"], domain=ms),
         {"H": h, "S": skip}, {"bias": bias}, lambda: h.astype(np.float64) + bias + skip, 17),
        # No reference: ONNX Runtime's CPU provider has no BiasSoftmax kernel.
        ("BiasSoftmax", helper.make_node("BiasSoftmax", ["H", "S"], ["Y"], domain=ms, axis=-1),
         {"H": h, "S": skip}, {}, None, 17),
    ]

    results = {}
    for name, node, inputs, weights, reference, opset in cases:
        graph = helper.make_graph(
            [node], name,
            [helper.make_tensor_value_info(k, FLOAT, v.shape) for k, v in inputs.items()],
            [helper.make_tensor_value_info("Y", FLOAT, None)],
            [tensor(k, v) for k, v in weights.items()])
        path = os.path.join(out_dir, name + ".onnx")
        save_model(model_of(graph, [("", opset), (ms, 1)]), path)
        entry = {"model": f"contrib/{name}.onnx"}
        try:
            opts = ort.SessionOptions()
            # the operator exactly as written: no graph optimisation may rewrite it first
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            opts.intra_op_num_threads = 1
            session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            got = session.run(None, inputs)[0]
            entry["runs_on_cpu"] = True
            if reference is not None:
                want = reference()
                entry["max_abs_err_vs_numpy_unfused"] = float(np.max(np.abs(got.astype(np.float64) - want)))
                entry["matches"] = bool(np.allclose(got, want, rtol=1e-3, atol=1e-4))
        except Exception as e:  # ONNX Runtime refuses the operator: recorded, not fatal
            entry["runs_on_cpu"] = False
            entry["error"] = str(e).splitlines()[0][:200]
        results[name] = entry
    with open(os.path.join(out_dir, "contrib_results.json"), "w") as f:
        json.dump(results, f, indent=1)
    # One line: a model ONNX Runtime has no CPU kernel for is expected data, not a failure.
    refused = sorted(k for k, v in results.items() if not v["runs_on_cpu"])
    print(f"contrib: {len(results)} models, {len(results) - len(refused)} run on ONNX Runtime's "
          f"CPU provider" + (f" ({len(refused)} without a CPU kernel there, as expected: "
                             f"{', '.join(refused)})" if refused else "")
          + "; details in contrib/contrib_results.json")


# ------------------------------------------------------------------------------------ ortopt
# Input sizes for the real models' symbolic dims.
INPUT_SHAPES = {"det": [1, 3, 640, 640], "rec": [1, 3, 48, 320], "cls": [1, 3, 48, 192]}


def feeds_for(session, model_name):
    rng = np.random.default_rng(0)
    feeds = {}
    for i in session.get_inputs():
        shape = next((s for k, s in INPUT_SHAPES.items() if f"_{k}_" in model_name), None)
        if shape is None:
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        feeds[i.name] = rng.random(shape, dtype=np.float32)
    return feeds


def step_ortopt(corpus, _wheels):
    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    src_dir = os.path.join(corpus, "real")
    out_dir = os.path.join(corpus, "ort_optimized")
    os.makedirs(out_dir, exist_ok=True)
    levels = [("basic", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
              ("extended", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
              ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)]

    def session(path, level, save_to=None):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        opts.intra_op_num_threads = 1
        if save_to:
            opts.optimized_model_filepath = save_to
        return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])

    results = {}
    for fn in sorted(f for f in os.listdir(src_dir) if f.endswith(".onnx")):
        src = os.path.join(src_dir, fn)
        stem = fn[:-len(".onnx")]
        for level_name, level in levels:
            dest = os.path.join(out_dir, f"{stem}.ort_{level_name}.onnx")
            key = f"{stem}.{level_name}"
            try:
                session(src, level, save_to=dest)
                saved = onnx.load(dest)
                fused = collections.Counter()
                for n in saved.graph.node:
                    if n.domain in ("", "ai.onnx"):
                        continue
                    label = f"{n.domain}::{n.op_type}"
                    act = next((a.s.decode() for a in n.attribute if a.name == "activation"), None)
                    fused[label + (f"[{act}]" if act else "")] += 1
                entry = {"nodes": len(saved.graph.node), "contrib_ops": dict(fused.most_common())}
                # The original and the saved model, both run as written. (The `all` models are
                # not in tools/corpus.sha256: the NCHWc block size follows the CPU's vector
                # width, and ONNX Runtime numbers the nodes it makes with a counter that every
                # session of the process advances.)
                plain = session(src, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
                feeds = feeds_for(plain, fn)
                expected = plain.run(None, feeds)
                # The saved model, run as written, against the original.
                try:
                    got = session(dest, ort.GraphOptimizationLevel.ORT_DISABLE_ALL).run(None, feeds)
                    entry["reload_max_abs_diff"] = max(
                        (float(np.max(np.abs(e.astype(np.float64) - g.astype(np.float64)))) if e.size else 0.0)
                        for e, g in zip(expected, got))
                except Exception as e:
                    entry["reload_error"] = str(e).splitlines()[0][:200]
            except Exception as e:
                entry = {"error": str(e).splitlines()[0][:200]}
            results[key] = entry
    with open(os.path.join(out_dir, "ortopt_results.json"), "w") as f:
        json.dump(results, f, indent=1)
    # One line; a model ONNX Runtime could not save or reload is recorded data the tests read.
    odd = sorted(k for k, v in results.items() if "error" in v or "reload_error" in v)
    print(f"ortopt: {len(results) - len(odd)} of {len(results)} saved and reloaded by ONNX Runtime"
          + (f" (recorded as not, as some are expected to be: {', '.join(odd)})" if odd else "")
          + "; details in ort_optimized/ortopt_results.json")



# ------------------------------------------------------------------------------------ quantized
def quant_mix_model(rng):
    """A small float CNN + MLP whose ops ONNX Runtime's static quantizer turns into QLinearConv,
    QLinearLeakyRelu, QLinearAveragePool, QLinearSigmoid, QLinearAdd, QLinearMul,
    QLinearConcat, QLinearGlobalAveragePool, QGemm and QLinearSoftmax."""
    def w(name, shape, scale=0.3):
        return tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))
    inits = [w("c1_w", (8, 3, 3, 3)), w("c1_b", (8,), 0.1), w("c2_w", (8, 8, 1, 1)),
             w("c2_b", (8,), 0.1), w("g_w", (16, 10)), w("g_b", (10,), 0.1),
             w("m_w", (16, 12)), tensor("half", np.array(0.5, np.float32))]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "c1_w", "c1_b"], ["c1"], pads=[1, 1, 1, 1]),
        n("LeakyRelu", ["c1"], ["l1"], alpha=0.1),
        n("AveragePool", ["l1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "c2_w", "c2_b"], ["c2"]),
        n("Sigmoid", ["c2"], ["s2"]),
        n("Mul", ["c2", "s2"], ["m2"]),
        n("Add", ["m2", "p1"], ["a2"]),
        n("Mul", ["a2", "half"], ["h2"]),
        n("Concat", ["h2", "p1"], ["cat"], axis=1),
        n("GlobalAveragePool", ["cat"], ["gp"]),
        n("Flatten", ["gp"], ["f"], axis=1),
        n("Gemm", ["f", "g_w", "g_b"], ["g"]),
        n("Softmax", ["g"], ["y"], axis=1),
        n("MatMul", ["f", "m_w"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes, "quant_mix", [helper.make_tensor_value_info("x", FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", FLOAT, [1, 10]),
         helper.make_tensor_value_info("z", FLOAT, [1, 12])], inits)
    return model_of(graph, [("", 13)])


def quant_lstm_model(rng, direction):
    """An LSTM (and a MatMul after it) that quantize_dynamic turns into DynamicQuantizeLSTM
    and DynamicQuantizeLinear + MatMulInteger (which the optimizer fuses into
    DynamicQuantizeMatMul)."""
    dirs, hidden, size = (2 if direction == "bidirectional" else 1), 16, 8
    def w(name, shape, scale=0.3):
        return tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))
    inits = [w("W", (dirs, 4 * hidden, size)), w("R", (dirs, 4 * hidden, hidden)),
             w("B", (dirs, 8 * hidden), 0.1), w("proj", (dirs * hidden, 6)),
             tensor("shape", np.array([0, 0, -1], np.int64))]
    n = helper.make_node
    nodes = [
        n("LSTM", ["x", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=hidden, direction=direction),
        n("Transpose", ["Y"], ["Yt"], perm=[0, 2, 1, 3]),
        n("Reshape", ["Yt", "shape"], ["Yf"]),
        n("MatMul", ["Yf", "proj"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, f"quant_lstm_{direction}", [helper.make_tensor_value_info("x", FLOAT, [5, 2, size])],
        [helper.make_tensor_value_info("out", FLOAT, [5, 2, 6]),
         helper.make_tensor_value_info("Y_h", FLOAT, [dirs, 2, hidden]),
         helper.make_tensor_value_info("Y_c", FLOAT, [dirs, 2, hidden])], inits)
    return model_of(graph, [("", 13)])


def step_quantized(corpus, _wheels):
    """quantized/<model>.<variant>.onnx: the real models (as ONNX Runtime saves them at the
    basic level, which turns their Constant weights into the initializers the quantizer
    needs) and two small float models, quantized by onnxruntime.quantization: dynamic, static
    QOperator, static QDQ (uint8 per-tensor; the small models also int8 per-channel), each
    also saved by ONNX Runtime at the basic, extended and all levels. Calibration data:
    random inputs from a fixed seed."""
    import onnxruntime as ort
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)

    ort.set_default_logger_severity(3)
    import logging
    logging.getLogger().setLevel(logging.ERROR)
    out_dir = os.path.join(corpus, "quantized")
    os.makedirs(out_dir, exist_ok=True)
    work = os.path.join(out_dir, ".src")
    os.makedirs(work, exist_ok=True)

    class Reader(CalibrationDataReader):
        def __init__(self, path, name):
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            rng = np.random.default_rng(5)
            self.items = []
            for _ in range(2):
                feeds = feeds_for(sess, name)
                self.items.append({k: rng.random(v.shape, dtype=np.float32) for k, v in feeds.items()})
            self.pos = 0

        def get_next(self):
            if self.pos >= len(self.items):
                return None
            self.pos += 1
            return self.items[self.pos - 1]

    sources = []
    for fn in sorted(os.listdir(os.path.join(corpus, "ort_optimized"))):
        if fn.endswith(".ort_basic.onnx"):
            sources.append((fn[:-len(".ort_basic.onnx")].replace("rapidocr_onnxruntime__", ""),
                            os.path.join(corpus, "ort_optimized", fn), False))
    rng = np.random.default_rng(11)
    for name, model in [("quant_mix", quant_mix_model(rng)),
                        ("quant_lstm_fwd", quant_lstm_model(rng, "forward")),
                        ("quant_lstm_bidi", quant_lstm_model(rng, "bidirectional"))]:
        path = os.path.join(work, name + ".onnx")
        save_model(model, path)
        sources.append((name, path, True))

    made = []
    for name, src, small in sources:
        variants = [("dyn", None)]
        if small:
            variants.append(("dyn_pc_s8", None))
        if "lstm" not in name:
            variants += [("qop", (QuantFormat.QOperator, QuantType.QUInt8, False)),
                         ("qdq", (QuantFormat.QDQ, QuantType.QUInt8, False))]
            if small:
                variants += [("qop_pc_s8", (QuantFormat.QOperator, QuantType.QInt8, True)),
                             ("qdq_pc_s8", (QuantFormat.QDQ, QuantType.QInt8, True))]
        for tag, static in variants:
            dest = os.path.join(out_dir, f"{name}.{tag}.onnx")
            if static is None:
                per_channel = tag.endswith("_pc_s8")
                quantize_dynamic(src, dest, per_channel=per_channel,
                                 weight_type=QuantType.QInt8 if per_channel else QuantType.QUInt8)
            else:
                fmt, qt, per_channel = static
                quantize_static(src, dest, Reader(src, name), quant_format=fmt, activation_type=qt,
                                weight_type=qt, per_channel=per_channel)
            made.append(dest)
    levels = [("basic", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
              ("extended", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
              ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)]
    ops = {}
    for dest in list(made):
        for level_name, level in levels:
            opts = ort.SessionOptions()
            opts.graph_optimization_level = level
            opts.intra_op_num_threads = 1
            saved = dest[:-len(".onnx")] + f".ort_{level_name}.onnx"
            opts.optimized_model_filepath = saved
            ort.InferenceSession(dest, opts, providers=["CPUExecutionProvider"])
            made.append(saved)
    for path in made:
        m = onnx.load(path)
        ops[os.path.basename(path)] = dict(sorted(collections.Counter(
            f"{n.domain}::{n.op_type}" for n in m.graph.node if n.domain not in ("", "ai.onnx")).items()))
    shutil.rmtree(work)
    with open(os.path.join(out_dir, "quantized_ops.json"), "w") as f:
        json.dump(ops, f, indent=1, sort_keys=True)
    total = collections.Counter(op for v in ops.values() for op in v)
    print(f"quantized: {len(made)} models; contrib ops in them: {dict(sorted(total.items()))}")

# ------------------------------------------------------------------------------------ node tests
def read_value(path, type_proto):
    """A test_data_set_N/*.pb file, read as the graph declares the value (tensor, sequence or
    optional)."""
    with open(path, "rb") as f:
        data = f.read()
    kind = type_proto.WhichOneof("value") if type_proto is not None else "tensor_type"
    if kind == "sequence_type":
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if kind == "optional_type":
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)


LOW_PRECISION = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


def same(got, want):
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    if want is None:
        return got is None
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if want.dtype.kind in "fc" or str(want.dtype) in LOW_PRECISION:
        try:
            return bool(np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-3, atol=1e-7,
                                    equal_nan=True))
        except (TypeError, ValueError):
            return False
    if want.dtype.kind in "OUS":
        return got.astype(str).tolist() == want.astype(str).tolist()
    return bool(np.array_equal(got, want))


def numbered(folder, prefix):
    files = glob.glob(os.path.join(folder, prefix + "_*.pb"))
    return sorted(files, key=lambda p: int(os.path.basename(p)[len(prefix) + 1:-3]))


def run_node_test(folder, ort):
    model_path = os.path.join(folder, "model.onnx")
    try:
        model = onnx.load(model_path)
        weights = {t.name for t in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in weights]
        outputs = list(model.graph.output)
        data = os.path.join(folder, "test_data_set_0")
        feeds_in = [read_value(p, inputs[k].type if k < len(inputs) else None)
                    for k, p in enumerate(numbered(data, "input"))]
        expected = [read_value(p, outputs[k].type if k < len(outputs) else None)
                    for k, p in enumerate(numbered(data, "output"))]
    except Exception as e:
        return ["data_fail", repr(e)[:200]]
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    except Exception as e:
        return ["load_fail", str(e).splitlines()[0][:200]]
    try:
        got = sess.run([o.name for o in outputs], {i.name: v for i, v in zip(inputs, feeds_in)})
    except Exception as e:
        return ["run_fail", str(e).splitlines()[0][:200]]
    ok = len(got) == len(expected) and all(same(g, w) for g, w in zip(got, expected))
    return ["pass" if ok else "mismatch", ""]


def step_noderesults(corpus, _wheels):
    import onnxruntime as ort

    ort.set_default_logger_severity(4)
    root = os.path.join(corpus, NODE_TESTS)
    results = {}
    for folder in sorted(glob.glob(os.path.join(root, "*"))):
        if os.path.exists(os.path.join(folder, "model.onnx")):
            results[os.path.basename(folder)] = run_node_test(folder, ort)
    counts = collections.Counter(r[0] for r in results.values())
    summary = {"total": len(results), "counts": dict(sorted(counts.items())),
               "onnx_tests_from": NODE_TESTS, "ort": ort.__version__, "onnx": onnx.__version__}
    write_atomically(os.path.join(corpus, "node_tests_results.json"),
                     json.dumps({"summary": summary, "results": results}, indent=0).encode())
    print("noderesults", json.dumps(summary))


def step_transformers(corpus, _wheels):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_transformers

    make_transformers.main(os.path.join(corpus, "transformers"))


STEPS = {"real": step_real, "nodetests": step_nodetests, "synthetic": step_synthetic,
         "contrib": step_contrib, "ortopt": step_ortopt, "quantized": step_quantized,
         "noderesults": step_noderesults, "transformers": step_transformers}


def main(argv):
    if len(argv) < 4 or any(s not in STEPS for s in argv[3:]):
        sys.exit(f"usage: make_corpus.py CORPUS WHEELS STEP... (steps: {', '.join(STEPS)})")
    corpus, wheels = argv[1], argv[2]
    for step in argv[3:]:
        STEPS[step](corpus, wheels)


if __name__ == "__main__":
    main(sys.argv)
