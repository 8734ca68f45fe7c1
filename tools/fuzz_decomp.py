"""Differential fuzzing of the `unfuse` decompositions against ONNX Runtime's own kernels.

    fuzz_decomp.py run [--families A,B] [--seconds-per-family N] [--seed S] [--save DIR]
                       [--binary PATH] [--max-instances N]
    fuzz_decomp.py replay CASE_DIR [CASE_DIR...] [--binary PATH]
    fuzz_decomp.py list

`run`: for each op family, draw random instances (attributes, shapes with broadcasting, size-1
and empty axes where the kernel takes them, element types fp32/fp16/uint8/int8), build a
one-node model, compile it with the release binary and a rule file that unfuses every
com.microsoft node, run the original and the result on ONNX Runtime CPU (graph optimizations
off, one thread) and check the class the registry (src/rewrite/unfuse/mod.rs) declares for
the op: exact = bit-identical outputs; rounding = at most 1e-5 of the output's scale for
float32 and 2 units in the last place at that scale for float16 (scale = the largest
|reference|); approximate(b) = at most b of the scale. Each mismatch is kept as a case
directory (model.onnx, input_N.pb, case.json) under --save (default
tests/data/fuzz_regressions/decomp/); `replay` reruns one (tests/exactness_regressions.rs does
this for every kept case) and exits 1 when it still mismatches. Prints one JSON line per
family: instances, mismatches (with the worst error), refused (the decomposition declined),
skipped (ONNX Runtime rejected the original).

Three families are not one node (issue 48): TransformerChain (EmbedLayerNormalization ->
Attention -> SkipLayerNormalization chains as ONNX Runtime's optimizer writes them, sequences and
hidden sizes to 4096, a residual stream in the thousands; an output past its bound is judged
once more against a float64 evaluation of the original, as `verify` does), Fp16ConvChain (float16
Conv/ConvTranspose chains compiled for a GPU target, judged at the class the output declares) and
OptimizedBert (`onnxruntime.transformers.optimizer` over a small BERT at every opt_level, compiled
for a random built-in target).

Run it with the venv's python (scripts/corpus.sh), at low priority: `nice -n 10`.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
U8, I8, F, F16, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32
NP = {U8: np.uint8, I8: np.int8, F: np.float32, F16: np.float16, I32: np.int32, TensorProto.INT64: np.int64}
RULES = """target: unfuse-all
description: decompose every fused operator (differential fuzzing)
rules:
  - id: unfuse-all
    why: fuzz the decompositions against ONNX Runtime's kernels
    evidence: []
    match: {domain: [com.microsoft, com.microsoft.nchwc]}
    action: unfuse
  - id: unfuse-default-domain
    why: the default-domain ops that have a decomposition (function ops, ORT's contrib ops there)
    evidence: []
    match: {op: [LayerNormalization, SimplifiedLayerNormalization, Gelu, HardSwish, Mish, GroupNormalization], domain: ""}
    action: unfuse
"""


# ---- the declared classes --------------------------------------------------------------------

def registry_classes():
    """(domain, op) -> ("exact",) | ("rounding",) | ("approximate", bound, floor), read from mod.rs."""
    src = open(os.path.join(REPO, "src/rewrite/unfuse/mod.rs")).read()
    consts = {m.group(1): float(m.group(2)) for m in re.finditer(r"const (\w+): f64 = ([0-9.eE+-]+);", src)}
    doms = {"MS_DOMAIN": "com.microsoft", "NCHWC_DOMAIN": "com.microsoft.nchwc", '""': ""}
    out = {}
    body = src[src.index("pub const REGISTRY"):]
    body = body[:body.index("];")]
    for m in re.finditer(r'\(\s*(MS_DOMAIN|NCHWC_DOMAIN|"")\s*,\s*"(\w+)"\s*,\s*[\w:]+\s*,\s*([^()]*?(?:\([^()]*\))?)\s*,?\s*\)', body):
        dom, op, cls = doms[m.group(1)], m.group(2), m.group(3).strip()
        if cls == "EXACT" or cls.endswith("Exact"):
            out[(dom, op)] = ("exact",)
        elif cls == "ROUNDING" or cls.endswith("Rounding"):
            out[(dom, op)] = ("rounding",)
        else:
            a = re.search(r"Approximate\(([^)]*)\)", cls)
            if not a:
                raise SystemExit(f"cannot read the class of {op}: {cls}")
            b, f = ([v.strip() for v in a.group(1).split(",")] + ["0"])[:2]
            num = lambda v: consts[v] if v in consts else float(v)
            out[(dom, op)] = ("approximate", num(b), num(f))
    return out


# ---- comparison --------------------------------------------------------------------------------

def ulp_at(scale, dt):
    """One unit in the last place of a float of type dt at magnitude scale."""
    if scale == 0 or not np.isfinite(scale):
        return 0.0
    return float(np.spacing(dt(scale)))


def error_of(ref, got, cls):
    """(ok, measure): does `got` meet `cls` against `ref`; measure says by how much."""
    if ref.shape != got.shape or ref.dtype != got.dtype:
        return False, f"shape/type {ref.shape}/{ref.dtype} vs {got.shape}/{got.dtype}"
    if cls[0] == "exact" or ref.dtype.kind in "iub":
        same = ref.tobytes() == got.tobytes()
        if ref.dtype.kind == "f" and not same:
            # NaNs with different payloads are the same value.
            same = np.array_equal(ref, got, equal_nan=True) and np.array_equal(np.signbit(ref), np.signbit(got))
        if same:
            return True, 0.0
        d = np.abs(ref.astype(np.float64) - got.astype(np.float64))
        if ref.dtype.kind in "iu":
            return False, f"{int(np.max(d))} step(s), {int(np.count_nonzero(d))}/{d.size} elements"
        scale = float(np.nanmax(np.abs(ref.astype(np.float64)))) if ref.size else 0.0
        rel = float(np.nanmax(d) / scale) if scale > 0 else float(np.nanmax(d))
        return False, f"{rel:.3g} of scale, {int(np.count_nonzero(d))}/{d.size} elements differ"
    if ref.size == 0:
        return True, 0.0
    r64, g64 = ref.astype(np.float64), got.astype(np.float64)
    if not np.array_equal(np.isnan(r64), np.isnan(g64)):
        return False, "NaN pattern differs"
    fin = ~np.isnan(r64)
    if not np.array_equal(r64[~np.isfinite(r64) & fin], g64[~np.isfinite(r64) & fin]):
        return False, "an infinity differs"
    okm = np.isfinite(r64)
    d = float(np.max(np.abs(r64[okm] - g64[okm]))) if okm.any() else 0.0
    scale = float(np.max(np.abs(r64[okm]))) if okm.any() else 0.0
    if cls[0] == "rounding":
        # float32: 1e-5 of the scale, and never less than the smallest normal float32: a value
        # below it is subnormal, where float32 arithmetic keeps fewer bits (and flushes to zero
        # under FTZ/DAZ, as GPUs do), so an output that is all subnormal (GemmFastGelu_177996520b30:
        # -1.2e-39 where exp overflows and x / inf gives -0) has no 1e-5 of its scale to meet.
        bound = 2 * ulp_at(scale, ref.dtype.type) if ref.dtype != np.float32 else f32_rounding_bound(scale)
    else:
        # approximate: a fraction of the scale, or of the rewrite's floor under it.
        bound = cls[1] * max(scale, cls[2])
    rel = d / scale if scale > 0 else d
    return d <= bound, rel


# ---- conditioning of sums (rounding class, float32 outputs) ------------------------------------
# The rounding class's 1e-5 of the output's scale assumes the output is not itself a near-total
# cancellation. Where it is, no summation order meets it: a K-term sum rounds by up to about
# sqrt(K) * u * sum|terms| (u = 2^-24) in any order (the probabilistic bound of Higham and Mary),
# which is far more than 1e-5 of a small result. For the ops that sum, an element past the plain
# bound is accepted within that allowance of its own terms, counted apart ("conditioned"), and
# never for a float16 output or another class. The allowance is per element and scales with
# u, so a wrong term (|term| ~ sum|terms| / K) is still caught by orders of magnitude.
U32 = 2.0 ** -24


def _vals(model, feeds):
    v = {i.name: numpy_helper.to_array(i).astype(np.float64) for i in model.graph.initializer}
    v.update({k: np.asarray(x, dtype=np.float64) for k, x in feeds.items()})
    return v


def _unpack(b, bits, count):
    b = np.asarray(b).reshape(-1).astype(np.int64)
    if bits == 8:
        return b[:count]
    return np.stack([b & 15, b >> 4], -1).reshape(-1)[:count]


def allow_matmul_nbits(model, feeds, index):
    """sqrt(K) * u * (|A| @ |W|^T + |bias|) per output element, W dequantized in float64."""
    if index != 0:
        return None
    n = model.graph.node[0]
    at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    K, N, bits, bs = at["K"], at["N"], at["bits"], at["block_size"]
    kb = (K + bs - 1) // bs
    raw = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    ins = list(n.input) + [""] * (6 - len(n.input))
    codes = np.stack([_unpack(raw[ins[1]][j], bits, kb * bs) for j in range(N)]).reshape(N, kb, bs)
    sc = raw[ins[2]].astype(np.float64).reshape(N, kb)
    if ins[3]:
        z = raw[ins[3]]
        if z.dtype == np.uint8:
            per = 8 // bits
            zp = _unpack(z, bits, N * (-(-kb // per)) * per).reshape(N, -1)[:, :kb]
        else:
            zp = z.astype(np.float64).reshape(N, kb)
    else:
        zp = np.full((N, kb), 2.0 ** (bits - 1))
    w = ((codes - zp[:, :, None]) * sc[:, :, None]).reshape(N, kb * bs)[:, :K]
    a = np.abs(np.asarray(feeds[ins[0]], dtype=np.float64))
    terms = a @ np.abs(w).T
    if ins[5]:
        terms = terms + np.abs(raw[ins[5]].astype(np.float64))
    return np.sqrt(K) * U32 * terms


def allow_layer_norm(model, feeds, index):
    """`index` is the node's output slot. The mean (1) is a sum: sqrt(K) * u * mean|s| for the row
    s being normalised (x, + skip, + bias). The other outputs' sensitivity to that rounding,
    c = sqrt(K) * u * mean|s| / sd with sd the row's deviation: c * |gamma| for the normalised
    output (0), c / sd for the inverse deviation (2: a kernel that updates the variance with
    `x - mean`, as Welford's does, carries the mean's rounding into it). SkipLayerNormalization's
    sum (3) is a sum of 2 or 3 terms: sqrt(3) * u * (|x| + |skip| + |bias|)."""
    if index not in (0, 1, 2, 3):
        return None
    n = model.graph.node[0]
    if n.op_type not in ("LayerNormalization", "SkipLayerNormalization"):
        return None
    at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    v = _vals(model, feeds)
    ins = list(n.input)
    s = v[ins[0]]
    if n.op_type == "SkipLayerNormalization":
        s = s + v[ins[1]]
        if len(ins) > 4 and ins[4]:
            s = s + v[ins[4]]
        gamma, axis = v[ins[2]], s.ndim - 1
    else:
        gamma, axis = v[ins[1]], at.get("axis", -1) % s.ndim
    if index == 3:
        if n.op_type != "SkipLayerNormalization":
            return None
        t = np.abs(v[ins[0]]) + np.abs(v[ins[1]]) + (np.abs(v[ins[4]]) if len(ins) > 4 and ins[4] else 0)
        return np.sqrt(3) * U32 * t
    axes = tuple(range(axis, s.ndim))
    K = int(np.prod(s.shape[axis:]))
    mean = s.mean(axes, keepdims=True)
    sd = np.sqrt(((s - mean) ** 2).mean(axes, keepdims=True) + at.get("epsilon", 1e-5))
    m = np.sqrt(K) * U32 * np.abs(s).mean(axes, keepdims=True)
    if index == 1:
        return m
    c = m / sd
    return c * np.abs(gamma) if index == 0 else c / sd


def allow_gqa(model, feeds, index):
    """Attention amplifies its scores' last bits by exp: two orders of a score q.k differ by
    about a rounding of the largest score the norms allow, u * scale * |q| |k| (float32 rotary's
    fused multiply-adds move q and k by an ulp too; rotations keep the norms), which moves each
    probability by that much relative, so an output element (batch b, query s, head n) moves by
    up to that times the largest |v| of its KV head; the weighted sum itself rounds by about
    sqrt(T) * u * max|v| in the order of ONNX Runtime's flash path. For the present caches (1,
    2): an ulp of the rotated keys, 2 u max|k|."""
    n = model.graph.node[0]
    at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    # (softcap's tanh and smooth_softmax's extra 1 in the sum do not amplify a score's change.)
    v = _vals(model, feeds)
    ins = list(n.input) + [""] * (9 - len(n.input))
    N, KV = at["num_heads"], at["kv_num_heads"]
    q = v[ins[0]]
    B, S = q.shape[:2]
    if ins[1]:
        H = v[ins[1]].shape[-1] // KV
        k, val = v[ins[1]].reshape(B, S, KV, H), v[ins[2]].reshape(B, S, KV, H)
        q = q.reshape(B, S, N, H)
    else:
        H = q.shape[-1] // (N + 2 * KV)
        qkv = q.reshape(B, S, N + 2 * KV, H)
        q, k, val = qkv[:, :, :N], qkv[:, :, N:N + KV], qkv[:, :, N + KV:]
    k, val = k.transpose(0, 2, 1, 3), val.transpose(0, 2, 1, 3)  # [B, KV, S, H]
    if ins[3]:
        k = np.concatenate([v[ins[3]], k], axis=2)
        val = np.concatenate([v[ins[4]], val], axis=2)
    if index != 0:
        return (2 * U32 * np.abs(k).reshape(B, -1).max(1)).reshape(B, 1, 1, 1)
    T = k.shape[2]
    scale = at.get("scale", 0.0) or 1.0 / np.sqrt(H)
    kv_of = np.arange(N) // (N // KV)
    qn = np.sqrt((q ** 2).sum(-1))                             # [B, S, N]
    kn = np.sqrt((k ** 2).sum(-1)).max(-1)[:, kv_of]           # [B, N]
    vmax = np.abs(val).max(axis=(2, 3))[:, kv_of]              # [B, N]
    a = vmax[:, None, :] * (U32 * scale * qn * kn[:, None, :] + np.sqrt(T) * U32)
    return np.repeat(a, H, axis=-1)                            # [B, S, N * H]


def allow_attention(model, feeds, index):
    """MultiHeadAttention and DecoderMaskedMultiHeadAttention, output 0: GroupQueryAttention's
    allowance with whole-tensor bounds (the kernels' layouts differ; the norms over all heads
    bound each head's): max|v| * (u * scale * max|q| |k| + u * max|attention bias| + sqrt(T) *
    u), where |q| and |k| are the largest row norms of the query and of every key tensor given
    (past included), each plus its part of the projection bias."""
    if index != 0:
        return None
    n = model.graph.node[0]
    at = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    v = _vals(model, feeds)
    ins = list(n.input) + [""] * 12
    N = at["num_heads"]
    q = v[ins[0]]
    D = q.shape[-1]
    if n.op_type == "MultiHeadAttention":
        keys, vals, bias, ab = [ins[1], ins[6]], [ins[2], ins[7]], ins[3], ins[5]
    else:
        keys, vals, bias, ab = [ins[1], ins[5]], [ins[2], ins[6]], ins[10], ins[4]
    b = v[bias] if bias else np.zeros(3 * D)
    bq, bk, bv = b[:D], b[D:2 * D], b[2 * D:3 * D]
    if not ins[1] or q.ndim != 3 or b.shape[0] != 3 * D:
        return None  # packed forms: no allowance
    H = D // N
    scale = at.get("scale", 0.0) or 1.0 / np.sqrt(H)
    qn = np.sqrt(((q + bq) ** 2).sum(-1)).max() if q.size else 0.0
    kn = max((np.sqrt((v[k] ** 2).sum(-1)).max() if v[k].size else 0.0) for k in keys if k)
    kn += np.sqrt((bk ** 2).sum())
    vmax = max((np.abs(v[x]).max() if v[x].size else 0.0) for x in vals if x) + np.abs(bv).max(initial=0.0)
    T = sum(v[k].shape[-2] for k in keys if k)
    abm = np.abs(v[ab]).max(initial=0.0) if ab else 0.0
    allow = vmax * (U32 * scale * qn * kn + U32 * abm + np.sqrt(T) * U32)
    # A batch entry whose every key is masked: each score is absorbed into mask_filter_value
    # (-10000: an ulp of 1e-3), so its softmax is one of rounded values in the kernel's order of
    # scaling and masking; an output moves by up to max|v| times that ulp, 2 u |filter|.
    mask = ins[4] if n.op_type == "MultiHeadAttention" else ins[3]
    if mask and v[mask].ndim == 2 and v[mask].shape[0] == q.shape[0]:
        full = (v[mask] == 0).all(axis=1)
        filt = abs(at.get("mask_filter_value", -10000.0))
        allow = allow + (full * vmax * 2 * U32 * filt)[:, None, None]
    return allow


def _abs_model_output(model, feeds):
    """The node run by ONNX Runtime CPU on the absolute values of its inputs and initializers."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, t in enumerate(m.graph.initializer):
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f":
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.abs(a), t.name))
    f = {k: (np.abs(x) if x.dtype.kind == "f" else x) for k, x in feeds.items()}
    return ref_ort_float32(m, f)[0].astype(np.float64)


def allow_fused_matmul(model, feeds, index):
    """FusedMatMul / TransposeMatMul: a K-term dot product, sqrt(K) * u * |alpha| (|A| @ |B|)
    (the node itself on absolute values; K bounded by A's last two dims)."""
    if index != 0:
        return None
    a = _vals(model, feeds)[model.graph.node[0].input[0]]
    K = max(a.shape[-2:]) if a.ndim else 1
    return np.sqrt(K) * U32 * np.abs(_abs_model_output(model, feeds))


def allow_gemm_fast_gelu(model, feeds, index):
    """GemmFastGelu: the pre-activation x = X @ W + bias rounds by sqrt(K + 1) * u (|X| @ |W| +
    |bias|), and the float32 GELU itself by a few u of its argument, which its slope carries to the
    output: |g'(x)| (sqrt(K + 1) * u * terms + 8 u |x|). Where x is deep in the negative tail the
    output is tiny (1e-29 at x = -9) and its relative condition |x g'/g| is in the hundreds."""
    if index != 0:
        return None
    ins = node_inputs(model, feeds)
    X, W = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 and ins[2] is not None else 0.0
    K = W.shape[0]
    x = X @ W + b
    terms = np.abs(X) @ np.abs(W) + np.abs(b)
    c = np.sqrt(2.0 / np.pi)
    z = c * (x + 0.044715 * x ** 3)
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-2.0 * z))
    dz = c * (1.0 + 3 * 0.044715 * x ** 2)
    slope = np.abs(s + x * 2.0 * dz * s * (1.0 - s))
    return slope * (np.sqrt(K + 1) * U32 * terms + 8 * U32 * np.abs(x))


CONDITIONING = {"MatMulNBits": allow_matmul_nbits, "LayerNormalization": allow_layer_norm,
                "SkipLayerNormalization": allow_layer_norm, "GroupQueryAttention": allow_gqa,
                "PackedAttention": lambda m, f, i: allow_packed_attention(m, f, i),
                "PackedMultiHeadAttention": lambda m, f, i: allow_packed_attention(m, f, i),
                "MultiHeadAttention": allow_attention, "DecoderMaskedMultiHeadAttention": allow_attention,
                "FusedMatMul": allow_fused_matmul, "TransposeMatMul": allow_fused_matmul,
                "GemmFastGelu": allow_gemm_fast_gelu}


def f32_rounding_bound(scale):
    """The rounding class for a float32 output: 1e-5 of its scale, never below the smallest
    normal float32 (see `error_of`)."""
    return max(1e-5 * scale, float(np.finfo(np.float32).tiny))


def within_conditioning(model, feeds, index, ref, got, cls):
    """Does a float32 rounding-class output that missed the plain bound meet it plus the sum's
    conditioning allowance, element by element?"""
    node = model.graph.node[0]
    fn = CONDITIONING.get(node.op_type)
    if fn is None or cls[0] != "rounding" or ref.dtype != np.float32 or ref.shape != got.shape:
        return False
    # `index` counts the graph's outputs; the allowance is per output slot of the node.
    name = model.graph.output[index].name
    if name not in node.output:
        return False
    allow = fn(model, feeds, list(node.output).index(name))
    if allow is None:
        return False
    r64, g64 = ref.astype(np.float64), got.astype(np.float64)
    if not np.array_equal(np.isfinite(r64), np.isfinite(g64)) or not np.isfinite(r64).all():
        return False
    bound = f32_rounding_bound(float(np.max(np.abs(r64))))
    return bool(np.all(np.abs(r64 - g64) <= bound + np.broadcast_to(allow, r64.shape)))


def session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


# ---- instance generators -------------------------------------------------------------------------

def ms(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain="com.microsoft", **attrs)


def make_model(node, inputs, outputs, inits, opset=13):
    g = helper.make_graph([node], "fuzz", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def vi(name, dt, shape=None):
    return helper.make_tensor_value_info(name, dt, shape)


def const(name, value, dt):
    return numpy_helper.from_array(np.asarray(value, dtype=NP[dt]), name)


class Gen:
    def __init__(self, rng):
        self.r = rng

    def qdt(self):
        return U8 if self.r.random() < 0.5 else I8

    def qrand(self, shape, dt):
        lo, hi = (0, 256) if dt == U8 else (-128, 128)
        return self.r.integers(lo, hi, size=shape).astype(NP[dt])

    def zp(self, dt, shape=()):
        mode = self.r.random()
        if mode < 0.25:
            v = np.zeros(shape) + (128 if dt == U8 and self.r.random() < 0.5 else 0)
        else:
            v = self.r.integers(0, 256, size=shape) - (0 if dt == U8 else 128)
        return np.asarray(v, dtype=NP[dt])

    def scale(self, shape=(), lo=-4.0, hi=0.5):
        # Log-uniform, sometimes a power of two or a "nice" decimal as tools write them.
        e = self.r.uniform(lo, hi, size=shape)
        v = 10.0 ** e
        mode = self.r.random()
        if mode < 0.15:
            v = 2.0 ** np.round(np.log2(v))
        elif mode < 0.3:
            v = np.round(v, 4) + 1e-4
        return np.asarray(v, dtype=np.float32)

    def shape(self, rank, lo=1, hi=6, empty=False):
        s = [int(self.r.integers(lo, hi + 1)) for _ in range(rank)]
        if empty and rank and self.r.random() < 0.05:
            s[int(self.r.integers(rank))] = 0
        return s

    def bcast_pair(self, empty=False):
        rank = int(self.r.integers(0, 5))
        out = self.shape(rank, 1, 5, empty)
        def sub():
            k = int(self.r.integers(0, rank + 1))
            s = out[rank - k:]
            return [1 if self.r.random() < 0.3 else d for d in s]
        a, b = out, sub()
        if self.r.random() < 0.5:
            a, b = b, a
        return a, b

    def floats(self, shape, dt=F, spread=None):
        spread = spread if spread is not None else 10.0 ** self.r.uniform(-2, 1.5)
        v = self.r.standard_normal(shape) * spread
        if self.r.random() < 0.2:
            v = v + self.r.uniform(-3, 3) * spread
        return v.astype(NP[dt])


def quant_unary_inputs(g, dt, shape):
    # Every one of the 256 codes appears when the tensor is large enough.
    n = int(np.prod(shape))
    codes = np.arange(256) - (0 if dt == U8 else 128)
    v = np.resize(g.r.permutation(codes), n) if n else np.zeros(0)
    return v.reshape(shape).astype(NP[dt])


def gen_qlinear_binary(g, op):
    dt = g.qdt()
    sa, sb = g.bcast_pair(empty=True)
    inits = [const("as", g.scale(), F), const("az", g.zp(dt), dt), const("bs", g.scale(), F),
             const("bz", g.zp(dt), dt), const("cs", g.scale(lo=-3.5, hi=1.0), F), const("cz", g.zp(dt), dt)]
    names = ["A", "as", "az", "B", "bs", "bz", "cs", "cz"]
    feeds = {"A": g.qrand(sa, dt), "B": g.qrand(sb, dt)}
    if g.r.random() < 0.3:
        # Every pair of codes, with B a full tensor, a column or a row (the kernel's operand
        # roles differ), and scales that are powers of two (where rounding ties happen).
        codes = (np.arange(256) - (0 if dt == U8 else 128)).astype(NP[dt])
        full = [np.repeat(codes[:, None], 256, 1), np.repeat(codes[None, :], 256, 0)]
        kind = int(g.r.integers(0, 3))
        a, b = (full[0], full[1]) if kind == 0 else ((full[1], codes[:, None].copy()) if kind == 1 else (codes[:, None].copy(), full[1]))
        sa, sb = list(a.shape), list(b.shape)
        feeds = {"A": a, "B": b}
        for k in (0, 2, 4):
            if g.r.random() < 0.5:
                inits[k] = const(inits[k].name, np.float32(2.0 ** int(g.r.integers(-8, 1))), F)
    m = make_model(ms(op, names, ["C"]), [vi("A", dt, sa), vi("B", dt, sb)], [vi("C", dt)], inits)
    return m, feeds


def gen_qlinear_unary(g, op, attrs):
    dt = g.qdt()
    shape = g.shape(int(g.r.integers(1, 5)), 1, 9, empty=True)
    if g.r.random() < 0.5 and 0 not in shape:
        shape = [2, 128]
    inits = [const("xs", g.scale(lo=-3, hi=0), F), const("xz", g.zp(dt), dt),
             const("ys", g.scale(lo=-3.5, hi=0), F), const("yz", g.zp(dt), dt)]
    m = make_model(ms(op, ["X", "xs", "xz", "ys", "yz"], ["Y"], **attrs), [vi("X", dt, shape)], [vi("Y", dt)], inits)
    return m, {"X": quant_unary_inputs(g, dt, shape)}


def gen_sigmoid(g):
    return gen_qlinear_unary(g, "QLinearSigmoid", {})


def gen_leaky(g):
    alpha = float(g.r.choice([0.01, 0.1, 0.2, 0.3, float(g.r.uniform(-1, 2))]))
    return gen_qlinear_unary(g, "QLinearLeakyRelu", {"alpha": alpha})


def gen_softmax(g):
    dt = g.qdt()
    rank = int(g.r.integers(1, 5))
    shape = g.shape(rank, 1, 7)
    axis = int(g.r.integers(-rank, rank))
    sem = int(g.r.choice([11, 13]))
    model_opset = int(g.r.choice([11, 13, 13, 17]))
    inits = [const("xs", g.scale(lo=-3, hi=0.3), F), const("xz", g.zp(dt), dt),
             const("ys", np.float32(1.0 / 256) if g.r.random() < 0.6 else g.scale(lo=-3, hi=-1), F),
             const("yz", np.asarray(0 if dt == U8 else -128) if g.r.random() < 0.7 else g.zp(dt), dt)]
    m = make_model(ms("QLinearSoftmax", ["X", "xs", "xz", "ys", "yz"], ["Y"], axis=axis, opset=sem),
                   [vi("X", dt, shape)], [vi("Y", dt)], inits, opset=model_opset)
    return m, {"X": g.qrand(shape, dt)}


def gen_gap(g):
    dt = g.qdt()
    last = int(g.r.random() < 0.5)
    rank = int(g.r.integers(3, 5))
    shape = g.shape(rank, 1, 9)
    inits = [const("xs", g.scale(), F), const("xz", g.zp(dt), dt), const("ys", g.scale(), F), const("yz", g.zp(dt), dt)]
    m = make_model(ms("QLinearGlobalAveragePool", ["X", "xs", "xz", "ys", "yz"], ["Y"], channels_last=last),
                   [vi("X", dt, shape)], [vi("Y", dt)], inits)
    return m, {"X": g.qrand(shape, dt)}


def gen_avgpool(g):
    dt = g.qdt()
    last = int(g.r.random() < 0.5)
    nsp = int(g.r.integers(1, 3))
    # Larger images too: ONNX Runtime's float AveragePool sums in another order there.
    spatial = g.shape(nsp, 2, 16 if g.r.random() < 0.3 else 9)
    k = [int(g.r.integers(1, min(s, 4) + 1)) for s in spatial]
    strides = [int(g.r.integers(1, 3)) for _ in spatial]
    attrs = {"kernel_shape": k, "strides": strides, "count_include_pad": int(g.r.random() < 0.5)}
    if g.r.random() < 0.5:
        attrs["pads"] = [int(g.r.integers(0, kk)) for kk in k] * 2
    elif g.r.random() < 0.3:
        attrs["auto_pad"] = str(g.r.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    if g.r.random() < 0.3:
        attrs["ceil_mode"] = 1
    c = int(g.r.integers(1, 6))
    n = int(g.r.integers(1, 3))
    shape = [n] + spatial + [c] if last else [n, c] + spatial
    inits = [const("xs", g.scale(), F), const("xz", g.zp(dt), dt), const("ys", g.scale(), F), const("yz", g.zp(dt), dt)]
    m = make_model(ms("QLinearAveragePool", ["X", "xs", "xz", "ys", "yz"], ["Y"], channels_last=last, **attrs),
                   [vi("X", dt, shape)], [vi("Y", dt)], inits)
    return m, {"X": g.qrand(shape, dt)}


def gen_concat(g):
    dt = g.qdt()
    rank = int(g.r.integers(1, 5))
    base = g.shape(rank, 1, 5)
    axis = int(g.r.integers(-rank, rank))
    k = int(g.r.integers(1, 5))
    ys, yz = g.scale(), g.zp(dt)
    inits = [const("ys", ys, F), const("yz", yz, dt)]
    ins, inputs, feeds = ["ys", "yz"], [], {}
    for i in range(k):
        s = list(base)
        s[axis] = int(g.r.integers(0 if g.r.random() < 0.1 else 1, 5))
        same = g.r.random() < 0.3
        inits += [const(f"s{i}", ys if same else g.scale(), F), const(f"z{i}", yz if same else g.zp(dt), dt)]
        ins += [f"X{i}", f"s{i}", f"z{i}"]
        inputs.append(vi(f"X{i}", dt, s))
        feeds[f"X{i}"] = g.qrand(s, dt)
    m = make_model(ms("QLinearConcat", ins, ["Y"], axis=axis), inputs, [vi("Y", dt)], inits)
    return m, feeds


def gen_conv(g):
    dt = g.qdt()
    wdt = I8 if (dt == I8 or g.r.random() < 0.6) else U8
    last = int(g.r.random() < 0.5)
    nsp = int(g.r.integers(1, 3))
    group = int(g.r.choice([1, 1, 2, 3]))
    cin = group * int(g.r.integers(1, 4))
    cout = group * int(g.r.integers(1, 4))
    spatial = g.shape(nsp, 3, 8)
    k = [int(g.r.integers(1, 4)) for _ in range(nsp)]
    attrs = {"kernel_shape": k, "group": group, "strides": [int(g.r.integers(1, 3)) for _ in k],
             "dilations": [int(g.r.integers(1, 3)) if g.r.random() < 0.3 else 1 for _ in k],
             "pads": [int(g.r.integers(0, kk)) for kk in k] * 2}
    w = g.qrand([cout, cin // group] + k, wdt)
    per_ch = g.r.random() < 0.5
    ws = g.scale((cout,) if per_ch else (), lo=-3.5, hi=-1)
    wz = np.zeros((cout,) if per_ch else (), NP[wdt]) if (wdt == I8 or g.r.random() < 0.5) else g.zp(wdt, (cout,) if per_ch else ())
    n = int(g.r.integers(1, 3))
    shape = [n] + spatial + [cin] if last else [n, cin] + spatial
    inits = [const("xs", g.scale(lo=-3, hi=-0.5), F), const("xz", g.zp(dt), dt), numpy_helper.from_array(w, "w"),
             const("ws", ws, F), const("wz", wz, wdt), const("ys", g.scale(lo=-2, hi=1), F), const("yz", g.zp(dt), dt)]
    ins = ["X", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if g.r.random() < 0.6:
        inits.append(const("b", g.r.integers(-3000, 3000, cout), I32))
        ins.append("b")
    m = make_model(ms("QLinearConv", ins, ["Y"], channels_last=last, **attrs), [vi("X", dt, shape)], [vi("Y", dt)], inits)
    return m, {"X": g.qrand(shape, dt)}


def gen_qgemm(g):
    adt = g.qdt()
    bdt = I8 if (adt == I8 or g.r.random() < 0.5) else U8
    M, K, N = (int(g.r.integers(1, 9)) for _ in range(3))
    ta, tb = int(g.r.random() < 0.3), int(g.r.random() < 0.4)
    bshape = [N, K] if tb else [K, N]
    per_col = g.r.random() < 0.4
    bs = g.scale((N,) if per_col else (), lo=-3.5, hi=-1)
    bz = np.zeros((N,) if per_col else (), NP[bdt]) if bdt == I8 else g.zp(bdt, (N,) if per_col else ())
    inits = [const("as", g.scale(lo=-3, hi=-0.5), F), const("az", g.zp(adt), adt),
             numpy_helper.from_array(g.qrand(bshape, bdt), "B"), const("bs", bs, F), const("bz", bz, bdt)]
    ins = ["A", "as", "az", "B", "bs", "bz"]
    attrs = {"transA": ta, "transB": tb}
    if g.r.random() < 0.4:
        attrs["alpha"] = float(g.r.choice([0.5, 2.0, float(g.r.uniform(0.1, 3))]))
    requant = g.r.random() < 0.6
    if g.r.random() < 0.6:
        cshape = [[N], [1, N], [M, N], []][int(g.r.integers(0, 4))]
        inits.append(const("C", g.r.integers(-5000, 5000, cshape), I32))
        ins.append("C")
    elif requant:
        ins.append("")
    ydt = F
    if requant:
        ydt = adt
        inits += [const("ys", g.scale(lo=-2, hi=1), F), const("yz", g.zp(adt), adt)]
        ins += ["ys", "yz"]
    ashape = [K, M] if ta else [M, K]
    m = make_model(ms("QGemm", ins, ["Y"], **attrs), [vi("A", adt, ashape)], [vi("Y", ydt)], inits)
    return m, {"A": g.qrand(ashape, adt)}


def gen_mitf(g):
    adt = g.qdt()
    bdt = I8 if (adt == I8 or g.r.random() < 0.6) else U8
    K, N = int(g.r.integers(1, 17)), int(g.r.integers(1, 9))
    batch = g.shape(int(g.r.integers(0, 3)), 1, 3)
    ashape = batch + [int(g.r.integers(1, 6)), K]
    per_col = g.r.random() < 0.4
    inits = [numpy_helper.from_array(g.qrand([K, N], bdt), "B"), const("as", g.scale(lo=-3, hi=-0.5), F),
             const("bs", g.scale((N,) if per_col else (), lo=-3.5, hi=-1), F)]
    ins = ["A", "B", "as", "bs"]
    if g.r.random() < 0.6:
        inits.append(const("az", g.zp(adt), adt))
        ins.append("az")
    else:
        ins.append("")
    if g.r.random() < 0.5:
        inits.append(const("bz", g.zp(bdt, (N,) if per_col and g.r.random() < 0.5 else ()), bdt))
        ins.append("bz")
    else:
        ins.append("")
    if g.r.random() < 0.6:
        inits.append(const("bias", g.floats([N]), F))
        ins.append("bias")
    while ins[-1] == "":
        ins.pop()
    m = make_model(ms("MatMulIntegerToFloat", ins, ["Y"]), [vi("A", adt, ashape)], [vi("Y", F)], inits)
    return m, {"A": g.qrand(ashape, adt)}


def gen_dqmm(g):
    bdt = I8 if g.r.random() < 0.6 else U8
    K, N = int(g.r.integers(1, 17)), int(g.r.integers(1, 9))
    batch = g.shape(int(g.r.integers(0, 3)), 1, 3)
    ashape = batch + [int(g.r.integers(1, 6)), K]
    per_col = g.r.random() < 0.4
    inits = [numpy_helper.from_array(g.qrand([K, N], bdt), "B"), const("bs", g.scale((N,) if per_col else (), lo=-3.5, hi=-1), F)]
    ins = ["A", "B", "bs"]
    if g.r.random() < 0.5:
        inits.append(const("bz", g.zp(bdt, (N,) if per_col and g.r.random() < 0.5 else ()), bdt))
        ins.append("bz")
    else:
        ins.append("")
    if g.r.random() < 0.6:
        inits.append(const("bias", g.floats([N]), F))
        ins.append("bias")
    while ins[-1] == "":
        ins.pop()
    m = make_model(ms("DynamicQuantizeMatMul", ins, ["Y"]), [vi("A", F, ashape)], [vi("Y", F)], inits)
    a = g.floats(ashape)
    if g.r.random() < 0.1:
        a = np.abs(a)
    return m, {"A": a}


def mask_index(g, kind, B, S, T):
    """A mask_index input of the given format and its ONNX type."""
    lens = g.r.integers(1, T + 1, size=B)
    if kind == "1d_len":
        return lens.astype(np.int32), [B]
    if kind == "1d_end_start":
        starts = np.array([int(g.r.integers(0, l)) for l in lens])
        return np.concatenate([lens, starts]).astype(np.int32), [2 * B]
    if kind == "2d":
        m = (np.arange(T)[None, :] < lens[:, None]).astype(np.int32)
        if g.r.random() < 0.3:
            m = (g.r.random((B, T)) < 0.8).astype(np.int32)
            m[:, 0] = 1
        if g.r.random() < 0.1:
            m[int(g.r.integers(B))] = 0  # a batch entry with every key masked
        return m, [B, T]
    if kind == "3d":
        m = (g.r.random((B, S, T)) < 0.8).astype(np.int32)
        m[:, :, 0] = 1
        if g.r.random() < 0.1:
            m[int(g.r.integers(B)), int(g.r.integers(S))] = 0  # a query row with every key masked
        return m, [B, S, T]
    if kind == "4d":
        m = (g.r.random((B, 1, T, T)) < 0.8).astype(np.int32)
        m[..., 0] = 1
        return m, [B, 1, T, T]
    raise ValueError(kind)


def gen_attention(g):
    dt = F16 if g.r.random() < 0.3 else F
    B, S = int(g.r.integers(1, 3)), int(g.r.integers(1, 7))
    heads = int(g.r.choice([1, 2, 4]))
    hs = int(g.r.choice([2, 4, 8, 16]))
    D = heads * hs
    inp = int(g.r.choice([D, 8, 12]))
    attrs = {"num_heads": heads}
    if g.r.random() < 0.3:
        attrs["unidirectional"] = 1
    if g.r.random() < 0.3:
        attrs["mask_filter_value"] = float(g.r.choice([-10000.0, -3.4e38, -1e9, -65504.0 if dt == F16 else -1e4]))
    if g.r.random() < 0.2:
        attrs["scale"] = float(g.r.uniform(0.05, 1))
    w = (g.r.standard_normal((inp, 3 * D)) / np.sqrt(inp)).astype(NP[dt])
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["X", "w"]
    if g.r.random() < 0.8:
        inits.append(numpy_helper.from_array((g.r.standard_normal(3 * D) * 0.2).astype(NP[dt]), "b"))
        ins.append("b")
    else:
        ins.append("")
    feeds = {"X": g.floats([B, S, inp], dt, spread=float(g.r.choice([0.5, 1.0, 3.0])))}
    inputs = [vi("X", dt, [B, S, inp])]
    # (A 4-D mask has no CPU kernel: ONNX Runtime refuses it, so it is not drawn.)
    kind = str(g.r.choice(["none", "1d_len", "1d_end_start", "2d", "3d", "dummy"]))
    if kind == "dummy":
        # [B, 1]: the 2-D "dummy" mask the kernel ignores, whatever it holds.
        ins.append("mask")
        inputs.append(vi("mask", I32, [B, 1]))
        feeds["mask"] = g.r.integers(0, 2, size=(B, 1)).astype(np.int32)
    elif kind != "none":
        m, shp = mask_index(g, kind, B, S, S)
        if kind == "4d":
            # The 4-D mask is [B, 1, max_sequence_length, max_sequence_length].
            pass
        ins.append("mask")
        inputs.append(vi("mask", I32, shp))
        feeds["mask"] = m
    if g.r.random() < 0.15:
        while len(ins) < 5:
            ins.append("")
        ins.append("ab")
        shp = [1 if g.r.random() < 0.5 else B, heads, S, S]
        inputs.append(vi("ab", dt, shp))
        feeds["ab"] = g.floats(shp, dt, spread=1.0)
    while ins[-1] == "":
        ins.pop()
    m = make_model(ms("Attention", ins, ["Y"], **attrs), inputs, [vi("Y", dt)], inits)
    return m, feeds


def gen_mha(g):
    dt = F16 if g.r.random() < 0.3 else F
    B, S = int(g.r.integers(1, 3)), int(g.r.integers(1, 7))
    L = S if g.r.random() < 0.5 else int(g.r.integers(1, 7))
    heads = int(g.r.choice([1, 2, 4]))
    hs = int(g.r.choice([2, 4, 8]))
    D = heads * hs
    attrs = {"num_heads": heads}
    if g.r.random() < 0.2 and L == S:
        attrs["unidirectional"] = 1
    if g.r.random() < 0.3:
        attrs["mask_filter_value"] = float(g.r.choice([-10000.0, -1e9]))
    if g.r.random() < 0.2:
        attrs["scale"] = float(g.r.uniform(0.05, 1))
    sp = float(g.r.choice([0.5, 1.0, 3.0]))
    feeds = {"q": g.floats([B, S, D], dt, sp), "k": g.floats([B, L, D], dt, sp), "v": g.floats([B, L, D], dt, sp)}
    inputs = [vi("q", dt, [B, S, D]), vi("k", dt, [B, L, D]), vi("v", dt, [B, L, D])]
    ins = ["q", "k", "v"]
    inits = []
    if g.r.random() < 0.5:
        inits.append(numpy_helper.from_array((g.r.standard_normal(3 * D) * 0.2).astype(NP[dt]), "b"))
        ins.append("b")
    else:
        ins.append("")
    if g.r.random() < 0.5:
        kind = str(g.r.choice(["1d_len", "1d_end_start", "2d", "3d"]))
        mk, shp = mask_index(g, kind, B, S, L)
        ins.append("kpm")
        inputs.append(vi("kpm", I32, shp))
        feeds["kpm"] = mk
    else:
        ins.append("")
    if g.r.random() < 0.4:
        shp = [1 if g.r.random() < 0.5 else B, 1 if g.r.random() < 0.3 else heads, S, L]
        ins.append("ab")
        inputs.append(vi("ab", dt, shp))
        feeds["ab"] = g.floats(shp, dt, spread=1.0)
    while ins[-1] == "":
        ins.pop()
    m = make_model(ms("MultiHeadAttention", ins, ["Y"], **attrs), inputs, [vi("Y", dt)], inits)
    return m, feeds


def gen_qattention(g):
    """QAttention: uint8 input (the CPU kernel's only input type), uint8/int8 weights, per-tensor
    or per-column weight scales and zero points, every mask form the CPU kernel takes (the 2-D
    dummy [B, 1] mask included), causal, and GPT-2 past state with the present output."""
    B, S = int(g.r.integers(1, 3)), int(g.r.integers(1, 7))
    heads = int(g.r.choice([1, 2, 4]))
    hs = int(g.r.choice([2, 4, 8, 16]))
    D = heads * hs
    inp = int(g.r.choice([D, 8, 12]))
    wdt = g.qdt()
    attrs = {"num_heads": heads}
    if g.r.random() < 0.3:
        attrs["unidirectional"] = 1
    if g.r.random() < 0.2:
        attrs["mask_filter_value"] = float(g.r.choice([-10000.0, -1e9]))
    if g.r.random() < 0.2:
        attrs["scale"] = float(g.r.uniform(0.05, 1))
    # Scales such that the projections are O(1) (accumulators of inp products of up to 255 * 128).
    x_scale = g.scale(lo=-2.5, hi=-1.0)
    per_col = g.r.random() < 0.4
    w_scale = g.scale((3 * D,) if per_col else (), lo=-3.0, hi=-1.5) / np.float32(np.sqrt(inp))
    inits = [numpy_helper.from_array(g.qrand([inp, 3 * D], wdt), "w"),
             numpy_helper.from_array((g.r.standard_normal(3 * D) * 0.3).astype(np.float32), "b"),
             const("xs", x_scale, F), const("ws", w_scale.astype(np.float32), F)]
    ins = ["X", "w", "b", "xs", "ws"]
    feeds = {"X": g.qrand([B, S, inp], U8)}
    inputs = [vi("X", U8, [B, S, inp])]
    past = g.r.random() < 0.25
    P = int(g.r.integers(0, 5)) if past else 0
    T = P + S
    kind = str(g.r.choice(["none", "1d_len", "1d_end_start", "2d", "3d", "dummy"]))
    if kind == "dummy":
        m, shp = g.r.integers(0, 2, size=(B, 1)).astype(np.int32), [B, 1]
    elif kind != "none":
        m, shp = mask_index(g, kind, B, S, T)
    if kind != "none":
        ins.append("mask")
        inputs.append(vi("mask", I32, shp))
        feeds["mask"] = m
    else:
        ins.append("")
    if g.r.random() < 0.6:
        inits.append(const("xz", g.zp(U8), U8))
        ins.append("xz")
    else:
        ins.append("")
    if g.r.random() < 0.5:
        inits.append(const("wz", g.zp(wdt, (3 * D,) if per_col and g.r.random() < 0.5 else ()), wdt))
        ins.append("wz")
    else:
        ins.append("")
    outs, out_vis = ["Y"], [vi("Y", F)]
    if past:
        ins.append("past")
        inputs.append(vi("past", F, [2, B, heads, P, hs]))
        feeds["past"] = g.floats([2, B, heads, P, hs], F, spread=1.0)
        outs.append("present")
        out_vis.append(vi("present", F))
    while ins[-1] == "":
        ins.pop()
    m = make_model(ms("QAttention", ins, outs, **attrs), inputs, out_vis, inits)
    return m, feeds


# ---- decoder steps, diffusion UNets, fused MLPs (issue 34) ---------------------------------------
# ONNX Runtime's CPU provider has no kernel for GemmFastGelu, BiasSplitGelu, GroupNorm and
# SkipGroupNorm: BiasSplitGelu is judged against ONNX Runtime CPU running the unfused graph its
# optimizer fuses (Add + Slice + Gelu + Mul), the others against a float64 reference of the
# documented formula (REFERENCES). DecoderMaskedMultiHeadAttention has a float32 CPU kernel:
# float16 instances are judged against it on the same values in float32, rounded to float16.

def node_inputs(model, feeds):
    """The node's inputs as float64/int arrays by position (None where omitted)."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    out = []
    for name in model.graph.node[0].input:
        v = feeds.get(name, inits.get(name)) if name else None
        out.append(None if v is None else (v.astype(np.float64) if v.dtype.kind == "f" else v))
    return out


def node_attr(model, name, default):
    for a in model.graph.node[0].attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def out_types(model):
    return [NP[o.type.tensor_type.elem_type] for o in model.graph.output]


def ref_ort_unfused(model, feeds, nodes):
    """ONNX Runtime CPU running `nodes` (the graph ONNX Runtime's optimizer fuses into the op,
    of kernels its CPU provider has) on the model's inputs and initializers in float32, the
    outputs rounded to the model's types."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return ref_ort_float32(m, feeds)


def ref_gemm_fast_gelu(model, feeds):
    # The product from ONNX Runtime's CPU MatMul in float32 (what a float32 GEMM gives: a float64
    # product would flag the float32 cancellation of a sum of large terms into a small output),
    # then bias and the FastGelu formula in float64. (ONNX Runtime's FastGelu CPU kernel, the
    # unfused form, loses up to 1e-4 of the output to the cancellation of 1 + tanh(x) in the
    # negative tail: it is no reference there.)
    ins = list(model.graph.node[0].input)
    mm = ref_ort_unfused(model, feeds, [helper.make_node("MatMul", ins[:2], [model.graph.output[0].name])])[0]
    if mm.dtype == np.float16:  # the product, not rounded to float16
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.graph.output[0].type.tensor_type.elem_type = F
        mm = ref_ort_unfused(m, feeds, [helper.make_node("MatMul", ins[:2], [m.graph.output[0].name])])[0]
    x = mm.astype(np.float64)
    b = node_inputs(model, feeds)[2] if len(ins) > 2 and ins[2] else None
    if b is not None:
        x = x + b
    # 0.5 x (1 + tanh(z)) as x / (1 + exp(-2z)): the same value, without the cancellation of
    # 1 + tanh(z), which float64 too suffers past z = -18.
    z = np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)
    with np.errstate(over="ignore"):
        y = x / (1.0 + np.exp(-2.0 * z))
    return [y.astype(out_types(model)[0])]


def ref_bias_split_gelu(model, feeds):
    # Add + Slice + Gelu + Mul, Gelu (erf) being com.microsoft's CPU kernel.
    x, b = model.graph.node[0].input[:2]
    d = [i for i in model.graph.initializer if i.name == b][0].dims[0]
    h = d // 2
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.initializer.extend([numpy_helper.from_array(np.array(v, np.int64), n) for v, n in
                                (([0], "r0"), ([h], "rh"), ([d], "rd"), ([-1], "rax"))])
    nodes = [helper.make_node("Add", [x, b], ["s"]),
             helper.make_node("Slice", ["s", "r0", "rh", "rax"], ["left"]),
             helper.make_node("Slice", ["s", "rh", "rd", "rax"], ["right"]),
             ms("Gelu", ["right"], ["gr"]),
             helper.make_node("Mul", ["left", "gr"], list(model.graph.node[0].output))]
    return ref_ort_unfused(m, feeds, nodes)


def np_group_norm(s, gamma, beta, model):
    groups, eps = node_attr(model, "groups", 1), np.float64(np.float32(node_attr(model, "epsilon", 1e-5)))
    last = node_attr(model, "channels_last", 1)
    x = s if last else s.transpose(0, 2, 3, 1)
    n, h, w, c = x.shape
    xr = x.reshape(n, h * w, groups, c // groups)
    mean = xr.mean(axis=(1, 3), keepdims=True)
    var = ((xr - mean) ** 2).mean(axis=(1, 3), keepdims=True)
    y = ((xr - mean) / np.sqrt(var + eps)).reshape(n, h, w, c) * gamma + beta
    if node_attr(model, "activation", 0) == 1:
        y = y / (1.0 + np.exp(-y))
    return y if last else y.transpose(0, 3, 1, 2)


def ref_group_norm(model, feeds):
    x, gamma, beta = node_inputs(model, feeds)[:3]
    return [np_group_norm(x, gamma, beta, model).astype(out_types(model)[0])]


def ref_skip_group_norm(model, feeds):
    ins = node_inputs(model, feeds) + [None, None]
    x, gamma, beta, skip, bias = ins[:5]
    if skip.ndim == 2:
        skip = skip[:, None, None, :]
    # float32: the sum in float32, (x + skip) + bias, as ONNX Runtime's CUDA kernel forms it
    # (contrib_ops/cuda/diffusion/group_norm_impl_kernel.cuh, AddSkipBias: the sum is stored in T
    # and the statistics are taken from the stored value) and as the decomposition does. A
    # float64 sum is no reference where a group has 2 elements that nearly cancel
    # (SkipGroupNorm_eebfdd1783e0: 3.7e-5 of scale). float16 keeps the float64 sum: the
    # decomposition sums float16 inputs in float, where the CUDA kernel rounds the sum to float16
    # (judging it by the float16 sum misses by up to 2e-3 of scale; not settled).
    if model.graph.input[0].type.tensor_type.elem_type == F:
        s = (x + skip).astype(np.float32).astype(np.float64)
        if bias is not None:
            s = (s + bias).astype(np.float32).astype(np.float64)
    else:
        s = x + skip + (bias if bias is not None else 0.0)
    t = out_types(model)
    outs = [np_group_norm(s, gamma, beta, model).astype(t[0])]
    if len(t) > 1:
        outs.append(s.astype(t[1]))
    return outs


def ref_ort_float32(model, feeds):
    """ONNX Runtime CPU on the same values in float32 (a kernel that has no float16 form), the
    outputs rounded to the model's types."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vs in (m.graph.input, m.graph.output):
        for v in vs:
            if v.type.tensor_type.elem_type == F16:
                v.type.tensor_type.elem_type = F
    for i, t in enumerate(m.graph.initializer):
        if t.data_type == F16:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    f32 = {k: (v.astype(np.float32) if v.dtype == np.float16 else v) for k, v in feeds.items()}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f32.onnx")
        onnx.save(m, path)
        outs = session(path).run(None, f32)
    return [o.astype(t) for o, t in zip(outs, out_types(model))]


def gen_gemm_fast_gelu(g):
    dt = F16 if g.r.random() < 0.3 else F
    K, N = int(g.r.integers(1, 33)), int(g.r.integers(1, 17))
    batch = g.shape(int(g.r.integers(0, 3)), 1, 3)
    xs = batch + [int(g.r.integers(1, 6)), K]
    w = (g.r.standard_normal((K, N)) / np.sqrt(K)).astype(NP[dt])
    inits, ins = [numpy_helper.from_array(w, "W")], ["X", "W"]
    if g.r.random() < 0.6:
        inits.append(numpy_helper.from_array(g.floats([N], dt, spread=0.5), "bias"))
        ins.append("bias")
    m = make_model(ms("GemmFastGelu", ins, ["Y"]), [vi("X", dt, xs)], [vi("Y", dt)], inits)
    return m, {"X": g.floats(xs, dt, spread=float(g.r.choice([0.3, 1.0, 3.0])))}


def gen_bias_split_gelu(g):
    dt = F16 if g.r.random() < 0.3 else F
    D = 2 * int(g.r.integers(1, 17))
    xs = [int(g.r.integers(1, 3)), int(g.r.integers(1, 17)), D]
    inits = [numpy_helper.from_array(g.floats([D], dt, spread=0.5), "bias")]
    m = make_model(ms("BiasSplitGelu", ["X", "bias"], ["Y"]), [vi("X", dt, xs)], [vi("Y", dt)], inits)
    return m, {"X": g.floats(xs, dt, spread=float(g.r.choice([0.3, 1.0, 3.0])))}


def gen_group_norm_common(g, skip):
    dt = F16 if g.r.random() < 0.3 else F
    mdt = F if (dt == F or g.r.random() < 0.5) else F16
    groups = int(g.r.choice([1, 2, 4, 8, 32]))
    C = groups * int(g.r.integers(1, 4 if groups < 32 else 2))
    n, h, w = int(g.r.integers(1, 3)), int(g.r.integers(1, 7)), int(g.r.integers(1, 7))
    last = 1 if (skip or g.r.random() < 0.7) else 0
    xs = [n, h, w, C] if last else [n, C, h, w]
    attrs = {"groups": groups, "activation": int(g.r.random() < 0.5)}
    if g.r.random() < 0.5 or not last:
        attrs["channels_last"] = last
    if g.r.random() < 0.4:
        attrs["epsilon"] = float(g.r.choice([1e-6, 1e-5, 1e-3, 0.1]))
    sp = float(g.r.choice([0.1, 1.0, 5.0]))
    inits = [numpy_helper.from_array((1.0 + 0.3 * g.r.standard_normal(C)).astype(NP[mdt]), "gamma"),
             numpy_helper.from_array((0.3 * g.r.standard_normal(C)).astype(NP[mdt]), "beta")]
    inputs, feeds, ins, outs = [vi("X", dt, xs)], {"X": g.floats(xs, dt, spread=sp)}, ["X", "gamma", "beta"], [vi("Y", dt)]
    if skip:
        ss = [[n, h, w, C], [n, 1, 1, C], [n, C]][int(g.r.integers(0, 3))]
        inputs.append(vi("skip", dt, ss))
        feeds["skip"] = g.floats(ss, dt, spread=sp)
        ins.append("skip")
        if g.r.random() < 0.6:
            inits.append(numpy_helper.from_array(g.floats([C], dt, spread=0.3), "bias"))
            ins.append("bias")
        if g.r.random() < 0.6:
            outs.append(vi("S", dt))
    op = "SkipGroupNorm" if skip else "GroupNorm"
    m = make_model(ms(op, ins, [o.name for o in outs], **attrs), inputs, outs, inits)
    return m, feeds


def gen_dmmha(g):
    dt = F16 if g.r.random() < 0.3 else F
    B, N = int(g.r.integers(1, 4)), int(g.r.choice([1, 2, 4]))
    H = int(g.r.choice([2, 4, 8, 16]))
    D = N * H
    attrs = {"num_heads": N}
    if g.r.random() < 0.2:
        attrs["scale"] = float(g.r.uniform(0.05, 1))
    if g.r.random() < 0.3:
        attrs["mask_filter_value"] = float(g.r.choice([-10000.0, -1e9]))
    sp = float(g.r.choice([0.5, 1.0, 3.0]))
    feeds, inputs, inits = {"q": g.floats([B, 1, D], dt, sp)}, [vi("q", dt, [B, 1, D])], []
    ins = ["q", "k", "v", "", "", "", "", "", "", "", ""]
    cross = g.r.random() < 0.25
    if cross:
        L = int(g.r.integers(1, 9))
        for nm in ("k", "v"):
            feeds[nm] = g.floats([B, N, L, H], dt, sp)
            inputs.append(vi(nm, dt, [B, N, L, H]))
        T, outs = L, ["Y"]
    else:
        M = int(g.r.integers(1, 11))
        P = int(g.r.integers(0, M))
        T = P + 1
        attrs["past_present_share_buffer"] = 1
        for nm in ("k", "v"):
            feeds[nm] = g.floats([B, 1, D], dt, sp)
            inputs.append(vi(nm, dt, [B, 1, D]))
        for i, nm in ((5, "pk"), (6, "pv")):
            feeds[nm] = g.floats([B, N, M, H], dt, sp)
            inputs.append(vi(nm, dt, [B, N, M, H]))
            ins[i] = nm
        shp = [] if g.r.random() < 0.5 else [1]
        feeds["psl"] = np.array(P, np.int32).reshape(shp)
        inputs.append(vi("psl", I32, shp))
        ins[7] = "psl"
        outs = ["Y", "pko", "pvo"]
        if g.r.random() < 0.3:
            ab = [1 if g.r.random() < 0.4 else B, 1 if g.r.random() < 0.3 else N, 1, T]
            feeds["ab"] = g.floats(ab, dt, spread=1.0)
            inputs.append(vi("ab", dt, ab))
            ins[4] = "ab"
    if g.r.random() < 0.5:
        m = (g.r.random((B, T)) < 0.8).astype(np.int32)
        m[:, 0] = 1
        if g.r.random() < 0.15:
            m[int(g.r.integers(B))] = 0  # a batch entry with every key masked
        feeds["mask"] = m
        inputs.append(vi("mask", I32, [B, T]))
        ins[3] = "mask"
    if g.r.random() < 0.5:
        inits.append(numpy_helper.from_array((g.r.standard_normal(3 * D) * 0.2).astype(NP[dt]), "bias"))
        ins[10] = "bias"
    while ins[-1] == "":
        ins.pop()
    m = make_model(ms("DecoderMaskedMultiHeadAttention", ins, outs, **attrs), inputs,
                   [vi(o, dt) for o in outs], inits)
    return m, feeds


def ref_dmmha(model, feeds):
    if model.graph.input[0].type.tensor_type.elem_type == F16:
        return ref_ort_float32(model, feeds)
    return None


REFERENCES = {
    "GemmFastGelu": ref_gemm_fast_gelu,
    "BiasSplitGelu": ref_bias_split_gelu,
    "GroupNorm": ref_group_norm,
    "SkipGroupNorm": ref_skip_group_norm,
    "DecoderMaskedMultiHeadAttention": ref_dmmha,
}



def packing(g, B, S, allow_empty=True):
    """Sequence lengths, token_offset [B, S] and cumulative lengths [B + 1] of a right-padded batch."""
    lens = g.r.integers(0 if (allow_empty and g.r.random() < 0.1) else 1, S + 1, size=B)
    lens[int(g.r.integers(B))] = max(1, lens.max())  # at least one token
    valid = np.arange(S)[None, :] < lens[:, None]
    flat = valid.reshape(-1)
    off = np.concatenate([np.nonzero(flat)[0], np.nonzero(~flat)[0]]).reshape(B, S).astype(np.int32)
    cum = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return lens.astype(np.int32), off, cum


def gen_remove_padding(g):
    dt = F16 if g.r.random() < 0.3 else F
    B, S, H = int(g.r.integers(1, 4)), int(g.r.integers(1, 8)), int(g.r.integers(1, 9))
    lens, _, _ = packing(g, B, S)
    outs = [vi("out", dt), vi("off", I32), vi("cum", I32), vi("mx", I32)]
    m = make_model(ms("RemovePadding", ["X", "cnt"], [o.name for o in outs]), [vi("X", dt, [B, S, H]), vi("cnt", I32, [B])],
                   outs, [])
    return m, {"X": g.floats([B, S, H], dt), "cnt": lens}


def gen_restore_padding(g):
    dt = F16 if g.r.random() < 0.3 else F
    B, S, H = int(g.r.integers(1, 4)), int(g.r.integers(1, 8)), int(g.r.integers(1, 9))
    lens, off, _ = packing(g, B, S)
    T = int(lens.sum())
    m = make_model(ms("RestorePadding", ["X", "off"], ["Y"]), [vi("X", dt, [T, H]), vi("off", I32, [B, S])], [vi("Y", dt)], [])
    return m, {"X": g.floats([T, H], dt), "off": off}


def gen_packed_attention(g, mha):
    dt = F16 if g.r.random() < 0.3 else F
    B, S = int(g.r.integers(1, 4)), int(g.r.integers(1, 8))
    N, H = int(g.r.choice([1, 2, 4])), int(g.r.choice([2, 4, 8]))
    D = N * H
    lens, off, cum = packing(g, B, S)
    T = int(lens.sum())
    attrs = {"num_heads": N}
    if g.r.random() < 0.2:
        attrs["scale"] = float(g.r.uniform(0.05, 1))
    sp = float(g.r.choice([0.5, 1.0, 3.0]))
    inits, inputs, feeds = [], [], {}
    if mha:
        packed_qkv = g.r.random() < 0.25
        if packed_qkv:
            feeds["q"] = g.floats([T, N, 3, H], dt, sp)
            inputs.append(vi("q", dt, [T, N, 3, H]))
            ins = ["q", "", "", ""]
        else:
            ins = ["q", "k", "v"]
            for nm in ins:
                feeds[nm] = g.floats([T, D], dt, sp)
                inputs.append(vi(nm, dt, [T, D]))
            if g.r.random() < 0.5:
                inits.append(numpy_helper.from_array((g.r.standard_normal(3 * D) * 0.2).astype(NP[dt]), "b"))
                ins.append("b")
            else:
                ins.append("")
        ins += ["off", "cum"]
        if g.r.random() < 0.3:
            attrs["mask_filter_value"] = float(g.r.choice([-10000.0, -1e9]))
    else:
        inp = int(g.r.choice([D, 8, 12]))
        feeds["x"] = g.floats([T, inp], dt, sp)
        inputs.append(vi("x", dt, [T, inp]))
        inits.append(numpy_helper.from_array((g.r.standard_normal((inp, 3 * D)) / np.sqrt(inp)).astype(NP[dt]), "w"))
        inits.append(numpy_helper.from_array((g.r.standard_normal(3 * D) * 0.2).astype(NP[dt]), "b"))
        ins = ["x", "w", "b", "off", "cum"]
    feeds["off"], feeds["cum"] = off, cum
    inputs += [vi("off", I32, [B, S]), vi("cum", I32, [B + 1])]
    if g.r.random() < 0.3:
        shp = [1 if g.r.random() < 0.5 else B, 1 if g.r.random() < 0.3 else N, S, S]
        feeds["ab"] = g.floats(shp, dt, spread=1.0)
        inputs.append(vi("ab", dt, shp))
        ins.append("ab")
    op = "PackedMultiHeadAttention" if mha else "PackedAttention"
    m = make_model(ms(op, ins, ["Y"], **attrs), inputs, [vi("Y", dt)], inits)
    return m, feeds


def ref_remove_padding(model, feeds):
    x, cnt = feeds["X"], feeds["cnt"]
    B, S, H = x.shape
    valid = (np.arange(S)[None, :] < cnt[:, None]).reshape(-1)
    off = np.concatenate([np.nonzero(valid)[0], np.nonzero(~valid)[0]]).reshape(B, S).astype(np.int32)
    cum = np.concatenate([[0], np.cumsum(cnt)]).astype(np.int32)
    return [x.reshape(B * S, H)[valid], off, cum, np.array([cnt.max()], np.int32)]


def ref_restore_padding(model, feeds):
    x, off = feeds["X"], feeds["off"]
    B, S = off.shape
    y = np.zeros((B * S, x.shape[1]), x.dtype)
    y[off.reshape(-1)[:x.shape[0]]] = x
    return [y.reshape(B, S, -1)]


def ref_packed_attention(model, feeds):
    node = model.graph.node[0]
    ins = node_inputs(model, feeds) + [None] * 8
    N = node_attr(model, "num_heads", 1)
    if node.op_type == "PackedAttention":
        x, w, b, off, cum, ab = ins[:6]
        D = w.shape[1] // 3
        qkv = x @ w + b
        q, k, v = qkv[:, :D], qkv[:, D:2 * D], qkv[:, 2 * D:]
    else:
        q, k, v, b, off, cum, ab = ins[:7]
        if q.ndim == 4:
            T = q.shape[0]
            q, k, v = (q[:, :, i, :].reshape(T, -1) for i in range(3))
        elif b is not None:
            D = q.shape[1]
            q, k, v = q + b[:D], k + b[D:2 * D], v + b[2 * D:]
    D = q.shape[1]
    H = D // N
    alpha = node_attr(model, "scale", 0.0) or 1.0 / np.sqrt(np.float32(H))
    alpha = np.float64(np.float32(alpha))
    out = np.zeros((q.shape[0], v.shape[1]))
    for bi in range(len(cum) - 1):
        a, e = int(cum[bi]), int(cum[bi + 1])
        L = e - a
        if L == 0:
            continue
        qh = q[a:e].reshape(L, N, H).transpose(1, 0, 2)
        kh = k[a:e].reshape(L, N, H).transpose(1, 0, 2)
        vh = v[a:e].reshape(L, N, -1).transpose(1, 0, 2)
        s = alpha * (qh @ kh.transpose(0, 2, 1))
        if ab is not None:
            s = s + ab[bi if ab.shape[0] > 1 else 0][:, :L, :L]
        pr = np.exp(s - s.max(-1, keepdims=True))
        pr = pr / pr.sum(-1, keepdims=True)
        out[a:e] = (pr @ vh).transpose(1, 0, 2).reshape(L, -1)
    return [out.astype(out_types(model)[0])]


def allow_packed_attention(model, feeds, index):
    """The float64 reference is exact; a float32 attention rounds each score by about u * alpha *
    |q| |k| and the softmax carries that into the output (see `allow_gqa`): per token and head,
    max|v| * (u * alpha * |q| * max|k| + sqrt(L) * u) over the token's own sequence."""
    if index != 0:
        return None
    node = model.graph.node[0]
    ins = [None if a is None else np.asarray(a, dtype=np.float64) for a in node_inputs(model, feeds)] + [None] * 8
    N = node_attr(model, "num_heads", 1)
    if node.op_type == "PackedAttention":
        x, w, b, off, cum = ins[:5]
        D = w.shape[1] // 3
        qkv = x @ w + b
        q, k, v = qkv[:, :D], qkv[:, D:2 * D], qkv[:, 2 * D:]
    else:
        q, k, v, b, off, cum = ins[:6]
        if q.ndim == 4:
            T = q.shape[0]
            q, k, v = (q[:, :, i, :].reshape(T, -1) for i in range(3))
        elif b is not None:
            D = q.shape[1]
            q, k, v = q + b[:D], k + b[D:2 * D], v + b[2 * D:]
    D = q.shape[1]
    H = D // N
    alpha = node_attr(model, "scale", 0.0) or 1.0 / np.sqrt(np.float32(H))
    allow = np.zeros((q.shape[0], v.shape[1]))
    cum = np.asarray(cum).astype(np.int64)
    for bi in range(len(cum) - 1):
        a, e = int(cum[bi]), int(cum[bi + 1])
        L = e - a
        if L == 0:
            continue
        qn = np.sqrt((q[a:e].reshape(L, N, H) ** 2).sum(-1))                 # [L, N]
        kn = np.sqrt((k[a:e].reshape(L, N, H) ** 2).sum(-1)).max(0)          # [N]
        vm = np.abs(v[a:e].reshape(L, N, -1)).max(axis=(0, 2))               # [N]
        per = vm * (U32 * alpha * qn * kn + np.sqrt(L) * U32)                # [L, N]
        allow[a:e] = np.repeat(per, v.shape[1] // N, axis=1)
    return allow


REFERENCES.update({
    "RemovePadding": ref_remove_padding,
    "RestorePadding": ref_restore_padding,
    "PackedAttention": ref_packed_attention,
    "PackedMultiHeadAttention": ref_packed_attention,
})


FAMILIES = {
    "QLinearAdd": lambda g: gen_qlinear_binary(g, "QLinearAdd"),
    "QLinearMul": lambda g: gen_qlinear_binary(g, "QLinearMul"),
    "QLinearSigmoid": gen_sigmoid,
    "QLinearLeakyRelu": gen_leaky,
    "QLinearSoftmax": gen_softmax,
    "QLinearAveragePool": gen_avgpool,
    "QLinearGlobalAveragePool": gen_gap,
    "QLinearConcat": gen_concat,
    "QLinearConv": gen_conv,
    "QGemm": gen_qgemm,
    "MatMulIntegerToFloat": gen_mitf,
    "DynamicQuantizeMatMul": gen_dqmm,
    "Attention": gen_attention,
    "MultiHeadAttention": gen_mha,
    "QAttention": gen_qattention,
    # Issue 34's decoder/diffusion/MLP ops (see REFERENCES for what each is judged against).
    "DecoderMaskedMultiHeadAttention": gen_dmmha,
    "GemmFastGelu": gen_gemm_fast_gelu,
    "BiasSplitGelu": gen_bias_split_gelu,
    "GroupNorm": lambda g: gen_group_norm_common(g, False),
    "SkipGroupNorm": lambda g: gen_group_norm_common(g, True),
    "RemovePadding": gen_remove_padding,
    "RestorePadding": gen_restore_padding,
    "PackedAttention": lambda g: gen_packed_attention(g, False),
    "PackedMultiHeadAttention": lambda g: gen_packed_attention(g, True),
}


# ---- every other registered decomposition (issue 39, item 5) ----------------------------------
# One family per op, or per group of ops sharing a decomposition (the op drawn inside the group).
# No family, because ONNX Runtime's CPU provider has no kernel for them (1.32: "Could not find an
# implementation"), so there is nothing to compare against: com.microsoft BiasAdd, BiasSoftmax,
# NhwcConv. The NCHWc family runs ONNX Runtime's own NCHWc rewrite (ORT_ENABLE_ALL) of a small
# standard model and fuzzes the region it writes (ReorderInput, Conv, pools, Upsample,
# ReorderOutput), the way such models reach the compiler.

def fdt(g, p16=0.4):
    return F16 if g.r.random() < p16 else F


def wide_or(g, dt, choices):
    """A hidden size; for float16 sometimes 4096 (where a float16 sum of squares overflows)."""
    if dt == F16 and g.r.random() < 0.25:
        return 4096
    return int(g.r.choice(choices))


def acts(g, shape, dt, wide=False):
    """Activations; large ones sometimes (always some for a wide float16 hidden state)."""
    if (wide and g.r.random() < 0.7) or g.r.random() < 0.1:
        return g.floats(shape, dt, spread=float(g.r.uniform(20, 300 if dt == F16 else 1e3)))
    return g.floats(shape, dt)


def out_vis(names):
    return [helper.make_empty_tensor_value_info(n) for n in names if n]


def make_model_n(node, inputs, outputs, inits, opset=13, extra=()):
    g = helper.make_graph([node], "fuzz", inputs, outputs, inits)
    ops = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)] + list(extra)
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 8 if opset < 21 else 10
    return m


def gen_gelu_group(g):
    op = str(g.r.choice(["Gelu", "BiasGelu", "FastGelu", "QuickGelu", "onnx.Gelu"]))
    dt = fdt(g)
    H = wide_or(g, dt, [1, 2, 3, 5, 8, 16, 64])
    lead = g.shape(int(g.r.integers(0, 3)), 1, 4, empty=True) if H < 4096 else [int(g.r.integers(1, 3))]
    shape = lead + [H]
    feeds = {"X": acts(g, shape, dt, H == 4096)}
    inputs = [vi("X", dt, shape)]
    ins, attrs, opset = ["X"], {}, 13
    if op in ("BiasGelu", "FastGelu") and (op == "BiasGelu" or g.r.random() < 0.6):
        ins.append("b")
        inputs.append(vi("b", dt, [H]))
        feeds["b"] = g.floats([H], dt, spread=1.0)
    if op == "QuickGelu" and g.r.random() < 0.7:
        attrs["alpha"] = float(g.r.choice([1.702, 1.0, float(g.r.uniform(0.1, 3))]))
    if op == "onnx.Gelu":
        opset = 20
        if g.r.random() < 0.6:
            attrs["approximate"] = str(g.r.choice(["tanh", "none"]))
        node = helper.make_node("Gelu", ins, ["Y"], **attrs)
    else:
        node = ms(op, ins, ["Y"], **attrs)
    return make_model_n(node, inputs, [vi("Y", dt)], [], opset), feeds


def gen_layer_norm_group(g):
    op = str(g.r.choice(["LayerNormalization", "SimplifiedLayerNormalization",
                         "SkipLayerNormalization", "SkipSimplifiedLayerNormalization"]))
    dt = fdt(g)
    H = wide_or(g, dt, [1, 2, 3, 4, 7, 16, 64, 256])
    wide = H == 4096
    attrs = {}
    if g.r.random() < 0.5:
        attrs["epsilon"] = float(g.r.choice([1e-5, 1e-6, 1e-12, 1e-3]))
    inits, inputs, feeds = [], [], {}
    if op.startswith("Skip"):
        rank = int(g.r.choice([2, 3])) if not wide else 3
        shape = ([int(g.r.integers(1, 3))] if rank == 3 else []) + [int(g.r.integers(1, 5)), H]
        if wide:
            shape[-2] = int(g.r.integers(1, 3))
        skip = list(shape)
        if rank == 3 and g.r.random() < 0.3:
            skip = [1] + shape[1:] if g.r.random() < 0.5 else shape[1:]
        feeds["x"], feeds["s"] = acts(g, shape, dt, wide), acts(g, skip, dt, wide)
        inputs = [vi("x", dt, shape), vi("s", dt, skip)]
        inits.append(numpy_helper.from_array(g.floats([H], dt, spread=1.0), "gamma"))
        ins = ["x", "s", "gamma"]
        simplified = op == "SkipSimplifiedLayerNormalization"
        if not simplified:
            if g.r.random() < 0.7:
                inits.append(numpy_helper.from_array(g.floats([H], dt, spread=1.0), "beta"))
                ins.append("beta")
            else:
                ins.append("")
        if g.r.random() < 0.5:
            inits.append(numpy_helper.from_array(g.floats([H], dt, spread=1.0), "bias"))
            ins.append("bias")
        while ins[-1] == "":
            ins.pop()
        # (SkipSimplifiedLayerNormalization's `mean` output is not computed: not drawn.)
        outs = ["Y"] + [n if g.r.random() < 0.4 and not (simplified and n == "mean") else ""
                        for n in ("mean", "inv_std", "sum")]
        while outs[-1] == "":
            outs.pop()
        node = ms(op, ins, outs, **attrs)
        return make_model_n(node, inputs, [vi("Y", dt)] + out_vis(outs[1:]), inits), feeds
    rank = int(g.r.integers(1, 5)) if not wide else int(g.r.integers(2, 4))
    shape = g.shape(rank - 1, 1, 4, empty=True) + [H]
    if wide:
        shape = [1] * (rank - 2) + [int(g.r.integers(1, 3)), H]
    axis = -1
    if g.r.random() < 0.4 and not wide:
        axis = int(g.r.integers(-rank, rank))
    if axis != -1:
        attrs["axis"] = axis
    a = axis % rank
    nshape = shape[a:]
    opset = 17 if (op == "LayerNormalization" and g.r.random() < 0.6) else 13
    if g.r.random() < 0.3:
        attrs["stash_type"] = 1 if (g.r.random() < 0.7 or dt != F16) else int(g.r.choice([10, 0]))
    feeds["X"] = acts(g, shape, dt, wide)
    inputs = [vi("X", dt, shape)]
    sshape = nshape if g.r.random() < 0.8 else [1] * (len(nshape) - 1) + nshape[-1:]
    inits.append(numpy_helper.from_array(g.floats(sshape, dt, spread=1.0), "scale"))
    ins = ["X", "scale"]
    if op == "LayerNormalization" and g.r.random() < 0.7:
        inits.append(numpy_helper.from_array(g.floats(sshape, dt, spread=1.0), "B"))
        ins.append("B")
    extra = ("mean", "inv_std") if op == "LayerNormalization" else ("inv_std",)
    outs = ["Y"] + [n if g.r.random() < 0.4 else "" for n in extra]
    while outs[-1] == "":
        outs.pop()
    node = helper.make_node(op, ins, outs, **attrs)
    return make_model_n(node, inputs, [vi("Y", dt)] + out_vis(outs[1:]), inits, opset), feeds


ACT_CONV = [None, ("Relu", []), ("Tanh", []), ("Sigmoid", []), ("LeakyRelu", [0.1]), ("Clip", [-1.0, 3.0]),
            ("HardSigmoid", [0.2, 0.5])]


def gen_fused_conv_group(g):
    if g.r.random() < 0.3:
        # NhwcMaxPool: int8/uint8 NHWC.
        dt = g.qdt()
        nsp = int(g.r.integers(1, 3))
        spatial = g.shape(nsp, 1, 9)
        k = [int(g.r.integers(1, s + 1)) for s in spatial]
        k = [min(kk, 4) for kk in k]
        attrs = {"kernel_shape": k}
        if g.r.random() < 0.5:
            attrs["strides"] = [int(g.r.integers(1, 3)) for _ in k]
        if g.r.random() < 0.3:
            attrs["dilations"] = [int(g.r.integers(1, 3)) for _ in k]
        if g.r.random() < 0.4:
            attrs["pads"] = [int(g.r.integers(0, kk)) for kk in k] * 2
        elif g.r.random() < 0.2:
            attrs["auto_pad"] = str(g.r.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
        if g.r.random() < 0.2:
            attrs["ceil_mode"] = 1
        shape = [int(g.r.integers(1, 3))] + spatial + [int(g.r.integers(1, 6))]
        m = make_model(ms("NhwcMaxPool", ["X"], ["Y"], **attrs), [vi("X", dt, shape)], [vi("Y", dt)], [])
        return m, {"X": g.qrand(shape, dt)}
    dt = fdt(g, 0.2)
    nsp = int(g.r.integers(1, 4)) if g.r.random() < 0.2 else 2
    group = int(g.r.choice([1, 1, 2, 3]))
    cin, cout = group * int(g.r.integers(1, 4)), group * int(g.r.integers(1, 4))
    spatial = g.shape(nsp, 3, 8 if nsp < 3 else 5)
    k = [int(g.r.integers(1, 4)) for _ in range(nsp)]
    attrs = {"kernel_shape": k, "group": group}
    if g.r.random() < 0.5:
        attrs["strides"] = [int(g.r.integers(1, 3)) for _ in k]
    if g.r.random() < 0.3:
        attrs["dilations"] = [int(g.r.integers(1, 3)) for _ in k]
    if g.r.random() < 0.5:
        attrs["pads"] = [int(g.r.integers(0, kk)) for kk in k] * 2
    elif g.r.random() < 0.2:
        attrs["auto_pad"] = str(g.r.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    act = ACT_CONV[int(g.r.integers(len(ACT_CONV)))]
    if act:
        attrs["activation"] = act[0]
        if act[1]:
            attrs["activation_params"] = [float(v) for v in act[1]]
    n = int(g.r.integers(1, 3))
    xs = [n, cin] + spatial
    w = (g.r.standard_normal([cout, cin // group] + k) / np.sqrt(cin * np.prod(k))).astype(NP[dt])
    inits = [numpy_helper.from_array(w, "W")]
    ins = ["X", "W"]
    feeds = {"X": g.floats(xs, dt)}
    inputs = [vi("X", dt, xs)]
    if g.r.random() < 0.6:
        inits.append(numpy_helper.from_array(g.floats([cout], dt, spread=0.5), "B"))
        ins.append("B")
    if g.r.random() < 0.25:
        # Z (the Sum input) has the output's shape: run the plain Conv to get it.
        ref = make_model(helper.make_node("Conv", ins, ["Y"], **{k2: v for k2, v in attrs.items() if not k2.startswith("activation")}),
                         inputs, [vi("Y", dt)], inits)
        try:
            zshape = list(session(ref.SerializeToString()).run(None, feeds)[0].shape)
        except Exception:
            zshape = None
        if zshape:
            if len(ins) == 2:
                ins.append("")
            ins.append("Z")
            inputs.append(vi("Z", dt, zshape))
            feeds["Z"] = g.floats(zshape, dt)
    m = make_model(ms("FusedConv", ins, ["Y"], **attrs), inputs, [vi("Y", dt)], inits)
    return m, feeds


def gen_fused_gemm(g):
    dt = fdt(g, 0.2)
    M, K, N = int(g.r.integers(1, 7)), int(g.r.integers(1, 17)), int(g.r.integers(1, 9))
    ta, tb = int(g.r.random() < 0.4), int(g.r.random() < 0.4)
    attrs = {}
    if ta:
        attrs["transA"] = 1
    if tb:
        attrs["transB"] = 1
    if g.r.random() < 0.4:
        attrs["alpha"] = float(g.r.uniform(-2, 2))
    if g.r.random() < 0.4:
        attrs["beta"] = float(g.r.uniform(-2, 2))
    # ONNX Runtime's kernel needs an activation, and activation_alpha (and _gamma for Selu)
    # where the activation has one ("No attribute with name:'alpha'"; "unknown kernel type").
    act = str(g.r.choice(["Relu", "Tanh", "Sigmoid", "LeakyRelu", "HardSigmoid", "Elu", "Selu",
                          "ThresholdedRelu", "Softplus", "Softsign"]))
    attrs["activation"] = act
    if act in ("LeakyRelu", "Elu", "Selu", "ThresholdedRelu", "HardSigmoid"):
        attrs["activation_alpha"] = float(g.r.uniform(0.05, 1.5))
    if act == "HardSigmoid":
        attrs["activation_beta"] = float(g.r.uniform(0.1, 0.9))
    if act == "Selu":
        attrs["activation_gamma"] = float(g.r.uniform(0.5, 2))
    ashape = [K, M] if ta else [M, K]
    bshape = [N, K] if tb else [K, N]
    inits = [numpy_helper.from_array(g.floats(bshape, dt, spread=0.5), "B")]
    ins = ["A", "B"]
    if g.r.random() < 0.75:
        cshape = [[N], [1, N], [M, 1], [M, N], [], [1]][int(g.r.integers(6))]
        inits.append(numpy_helper.from_array(g.floats(cshape, dt), "C"))
        ins.append("C")
    m = make_model(ms("FusedGemm", ins, ["Y"], **attrs), [vi("A", dt, ashape)], [vi("Y", dt)], inits)
    return m, {"A": g.floats(ashape, dt)}


def fm_perm(r, trans, batch):
    p = list(range(r))
    if batch:
        p = list(range(1, r - 1)) + [0, r - 1]
    if trans:
        p[-1], p[-2] = p[-2], p[-1]
    return p


def gen_fused_matmul_group(g):
    op = "FusedMatMul" if g.r.random() < 0.7 else "TransposeMatMul"
    dt = fdt(g, 0.25)
    M, K, N = int(g.r.integers(1, 6)), int(g.r.integers(1, 17)), int(g.r.integers(1, 7))
    ra, rb = int(g.r.integers(1, 5)), int(g.r.integers(1, 5))
    batch = g.shape(max(ra, rb) - 2, 1, 3) if max(ra, rb) > 2 else []
    def logical(r, last2):
        if r == 1:
            return [last2[0] if last2 is not None else 0]
        b = batch[len(batch) - (r - 2):] if r > 2 else []
        b = [1 if g.r.random() < 0.25 else d for d in b]
        return b + last2
    la = [K] if ra == 1 else logical(ra, [M, K])
    lb = [K] if rb == 1 else logical(rb, [K, N])
    attrs = {}
    stored = []
    for name, shape, t, bt in (("A", la, "transA", "transBatchA"), ("B", lb, "transB", "transBatchB")):
        r = len(shape)
        tr = r >= 2 and g.r.random() < 0.4
        # (ONNX Runtime refuses transBatch* unless both operands have the same rank.)
        btr = op == "FusedMatMul" and r >= 3 and ra == rb and g.r.random() < 0.3
        if tr:
            attrs[t] = 1
        if btr:
            attrs[bt] = 1
        p = fm_perm(r, tr, btr)
        # The stored operand X satisfies transpose(X, p) == logical, so X = transpose(logical, p^-1).
        inv = [0] * r
        for i, pi in enumerate(p):
            inv[pi] = i
        stored.append([shape[i] for i in inv])
    if g.r.random() < 0.5:
        attrs["alpha"] = float(g.r.choice([0.125, 0.5, float(g.r.uniform(-2, 2))]))
    sa, sb = stored
    inputs = [vi("A", dt, sa)]
    feeds = {"A": g.floats(sa, dt)}
    inits = []
    if g.r.random() < 0.5:
        inits.append(numpy_helper.from_array(g.floats(sb, dt, spread=0.5), "B"))
    else:
        inputs.append(vi("B", dt, sb))
        feeds["B"] = g.floats(sb, dt)
    m = make_model(ms(op, ["A", "B"], ["Y"], **attrs), inputs, [vi("Y", dt)], inits)
    return m, feeds


def rotary_caches(g, max_pos, half, dt):
    theta = float(g.r.choice([10000.0, 500000.0, 100.0]))
    inv = 1.0 / theta ** (np.arange(half) * 2.0 / max(2 * half, 1))
    ang = np.arange(max_pos)[:, None] * inv[None, :]
    if g.r.random() < 0.2:
        ang = g.r.uniform(-np.pi, np.pi, size=(max_pos, half))
    return np.cos(ang).astype(NP[dt]), np.sin(ang).astype(NP[dt])


def gen_rotary(g):
    dt = fdt(g)
    B, S = int(g.r.integers(1, 3)), int(g.r.integers(1, 6))
    heads = int(g.r.choice([1, 2, 4]))
    head = int(g.r.choice([2, 4, 8, 16, 64]))
    rank = 3 if g.r.random() < 0.6 else 4
    attrs = {}
    rot = head
    if g.r.random() < 0.3 and head > 2:
        rot = int(g.r.choice([d for d in range(2, head, 2)]))
    if g.r.random() < 0.5:
        attrs["interleaved"] = 1
    if rank == 3:
        shape = [B, S, heads * head]
        if rot != head or heads > 1 or g.r.random() < 0.5:
            attrs["num_heads"] = heads
    else:
        shape = [B, heads, S, head]
        if rot != head or g.r.random() < 0.3:
            attrs["num_heads"] = heads
    if rot != head:
        attrs["rotary_embedding_dim"] = rot
    max_pos = S + int(g.r.integers(0, 20))
    cos, sin = rotary_caches(g, max_pos, rot // 2, dt)
    if g.r.random() < 0.4:
        pos = np.array([int(g.r.integers(0, max_pos - S + 1))], dtype=np.int64)
    else:
        pos = g.r.integers(0, max_pos, size=(B, S)).astype(np.int64)
    inits = [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    feeds = {"X": acts(g, shape, dt), "pos": pos}
    inputs = [vi("X", dt, shape), vi("pos", TensorProto.INT64, list(pos.shape))]
    m = make_model(ms("RotaryEmbedding", ["X", "pos", "cos", "sin"], ["Y"], **attrs), inputs, [vi("Y", dt)], inits)
    return m, feeds


def gen_gqa(g):
    dt = fdt(g)
    kv = int(g.r.choice([1, 2]))
    heads = kv * int(g.r.choice([1, 2, 4]))
    hs = int(g.r.choice([16, 32, 64]))  # the CPU kernel wants a multiple of 8 (16 with some paths)
    mode = str(g.r.choice(["prompt", "decode", "chunk"]))
    B = 1 if mode == "chunk" else int(g.r.integers(1, 3))
    past = 0
    if mode == "prompt":
        S = int(g.r.integers(1, 7))
        total = S
        lens = np.full(B, S) if g.r.random() < 0.6 else g.r.integers(1, S + 1, size=B)
        lens[0] = S
        with_past = g.r.random() < 0.3  # an empty past
    elif mode == "decode":
        S = 1
        past = int(g.r.integers(1, 8))
        total = past + 1
        lens = g.r.integers(1, total + 1, size=B)
        lens[0] = total
        with_past = True
    else:
        S = int(g.r.integers(2, 5))
        past = int(g.r.integers(1, 6))
        total = past + S
        lens = np.array([total])
        with_past = True
    attrs = {"num_heads": heads, "kv_num_heads": kv}
    if g.r.random() < 0.2:
        attrs["scale"] = float(g.r.uniform(0.05, 1))
    if g.r.random() < 0.25:
        attrs["local_window_size"] = int(g.r.integers(1, total + 2))
    if g.r.random() < 0.15:
        attrs["softcap"] = float(g.r.choice([5.0, 30.0, 50.0]))
    if g.r.random() < 0.15:
        attrs["smooth_softmax"] = 1
    sp = float(g.r.choice([0.5, 1.0, 3.0]))
    packed = g.r.random() < 0.3
    inputs, feeds, ins = [], {}, []
    if packed:
        qs = [B, S, (heads + 2 * kv) * hs]
        inputs.append(vi("q", dt, qs))
        feeds["q"] = g.floats(qs, dt, sp)
        ins += ["q", "", ""]
    else:
        for nm, d in (("q", heads * hs), ("k", kv * hs), ("v", kv * hs)):
            inputs.append(vi(nm, dt, [B, S, d]))
            feeds[nm] = g.floats([B, S, d], dt, sp)
            ins.append(nm)
    if with_past:
        ps = [B, kv, past, hs]
        for nm in ("pk", "pv"):
            inputs.append(vi(nm, dt, ps))
            feeds[nm] = g.floats(ps, dt, sp)
            ins.append(nm)
    else:
        ins += ["", ""]
    inputs += [vi("seqlens_k", I32, [B]), vi("total", I32, [])]
    feeds["seqlens_k"] = (np.asarray(lens) - 1).astype(np.int32)
    feeds["total"] = np.asarray(total, dtype=np.int32)
    ins += ["seqlens_k", "total"]
    inits = []
    if g.r.random() < 0.4:
        attrs["do_rotary"] = 1
        if g.r.random() < 0.5:
            attrs["rotary_interleaved"] = 1
        rot = hs
        cos, sin = rotary_caches(g, total + int(g.r.integers(0, 8)), rot // 2, dt)
        inits += [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
        ins += ["cos", "sin"]
    while ins[-1] == "":
        ins.pop()
    outs = ["Y", "present_k", "present_v"]
    m = make_model(ms("GroupQueryAttention", ins, outs, **attrs), inputs, [vi("Y", dt)] + out_vis(outs[1:]), inits)
    return m, feeds


def gen_embed_ln(g):
    quant = g.r.random() < 0.35
    B, S = int(g.r.integers(1, 4)), int(g.r.integers(1, 8))
    H = int(g.r.choice([1, 4, 8, 16, 32, 128]))
    V, P, T = int(g.r.integers(2, 20)), S + int(g.r.integers(0, 6)), int(g.r.integers(1, 4))
    with_seg = g.r.random() < 0.6
    tables = {"word": [V, H], "pos": [P, H], "seg": [T, H], "gamma": [H], "beta": [H]}
    feeds = {"ids": g.r.integers(0, V, size=(B, S)).astype(np.int32)}
    inputs = [vi("ids", I32, [B, S])]
    ins = ["ids"]
    if with_seg:
        feeds["segs"] = g.r.integers(0, T, size=(B, S)).astype(np.int32)
        inputs.append(vi("segs", I32, [B, S]))
        ins.append("segs")
    else:
        ins.append("")
    inits = []
    order = ["word", "pos", "seg", "gamma", "beta"]
    for k in order:
        if k == "seg" and not with_seg:
            ins.append("")
            continue
        if quant:
            inits.append(numpy_helper.from_array(g.r.integers(0, 256, size=tables[k]).astype(np.uint8), k))
        else:
            v = g.floats(tables[k], F, spread=1.0 if k != "beta" else 0.3)
            inits.append(numpy_helper.from_array(v, k))
        ins.append(k)
    attrs = {}
    if g.r.random() < 0.5:
        attrs["epsilon"] = float(g.r.choice([1e-12, 1e-5, 1e-3]))
    if g.r.random() < 0.5:
        m = (g.r.random((B, S)) < 0.8).astype(np.int32)
        feeds["mask"] = m
        inputs.append(vi("mask", I32, [B, S]))
        ins.append("mask")
    else:
        ins.append("")
    if quant:
        for k in order:
            inits.append(const(k + "_s", g.scale(lo=-3, hi=-1) if k != "gamma" else g.scale(lo=-2.5, hi=-1.5), F))
        for k in order:
            inits.append(const(k + "_z", g.zp(U8), U8))
        ins += [k + "_s" if (k != "seg" or with_seg) else "" for k in order]
        ins += [k + "_z" if (k != "seg" or with_seg) else "" for k in order]
        inits = [i for i in inits if with_seg or not i.name.startswith("seg_")]
        while ins[-1] == "":
            ins.pop()
        outs = ["Y", "mask_index"]
        node = ms("QEmbedLayerNormalization", ins, outs, **attrs)
    else:
        if g.r.random() < 0.3:
            pshape = [1 if g.r.random() < 0.5 else B, S]
            feeds["pos_ids"] = g.r.integers(0, P, size=pshape).astype(np.int32)
            inputs.append(vi("pos_ids", I32, pshape))
            ins.append("pos_ids")
        while ins[-1] == "":
            ins.pop()
        outs = ["Y", "mask_index" if g.r.random() < 0.7 else ""] + (["esum"] if g.r.random() < 0.4 else [])
        node = ms("EmbedLayerNormalization", ins, outs, **attrs)
    return make_model_n(node, inputs, [vi("Y", F)] + out_vis(outs[1:]), inits), feeds


def pack_codes(codes, bits):
    """Codes (uint, < 2**bits) along the last axis packed into bytes, first code in the low bits."""
    per = 8 // bits
    c = codes.reshape(codes.shape[:-1] + (-1, per)).astype(np.uint32)
    out = np.zeros(c.shape[:-1], dtype=np.uint32)
    for i in range(per):
        out |= c[..., i] << (bits * i)
    return out.astype(np.uint8)


def gen_matmul_nbits(g):
    dt = fdt(g, 0.3)
    bits = 4 if g.r.random() < 0.7 else 8
    bs = int(g.r.choice([16, 32, 64, 128, 256]))
    K = int(g.r.choice([bs, 2 * bs, int(g.r.integers(1, 3 * bs)), 16, 48]))
    N = int(g.r.integers(1, 13))
    kb = (K + bs - 1) // bs
    codes = g.r.integers(0, 2 ** bits, size=(N, kb * bs))
    B = pack_codes(codes, bits).reshape(N, kb, bs * bits // 8)
    scales = (g.scale((N * kb,), lo=-3, hi=-0.5)).astype(NP[dt])
    inits = [numpy_helper.from_array(B, "B"),
             numpy_helper.from_array(scales if g.r.random() < 0.6 else scales.reshape(N, kb), "scales")]
    ins = ["A", "B", "scales"]
    zmode = str(g.r.choice(["none", "packed", "float"]))
    if zmode == "packed":
        per = 8 // bits
        zc = g.r.integers(0, 2 ** bits, size=(N, kb))
        zc = np.concatenate([zc, np.zeros((N, (-kb) % per), dtype=zc.dtype)], axis=1)
        inits.append(numpy_helper.from_array(pack_codes(zc, bits).reshape(-1), "zp"))
        ins.append("zp")
    elif zmode == "float":
        inits.append(numpy_helper.from_array(g.r.uniform(0, 2 ** bits - 1, size=N * kb).astype(NP[dt]), "zp"))
        ins.append("zp")
    else:
        ins.append("")
    ins.append("")  # g_idx
    if g.r.random() < 0.4:
        inits.append(numpy_helper.from_array(g.floats([N], dt, spread=1.0), "bias"))
        ins.append("bias")
    while ins[-1] == "":
        ins.pop()
    attrs = {"K": K, "N": N, "bits": bits, "block_size": bs}
    if g.r.random() < 0.6:
        attrs["accuracy_level"] = int(g.r.choice([0, 1, 2, 3, 4, 4]))
    batch = g.shape(int(g.r.integers(0, 3)), 1, 3)
    ashape = batch + [int(g.r.integers(1, 6)), K]
    opset = int(g.r.choice([17, 21]))
    m = make_model_n(ms("MatMulNBits", ins, ["Y"], **attrs), [vi("A", dt, ashape)], [vi("Y", dt)], inits, opset)
    return m, {"A": g.floats(ashape, dt)}


def gen_dq_lstm(g):
    nd = 2 if g.r.random() < 0.3 else 1
    direction = "bidirectional" if nd == 2 else str(g.r.choice(["forward", "reverse"]))
    T, B, I, Hd = int(g.r.integers(1, 6)), int(g.r.integers(1, 4)), int(g.r.integers(1, 9)), int(g.r.integers(1, 9))
    wdt = I8 if g.r.random() < 0.6 else U8
    per_ch = g.r.random() < 0.5
    sshape = (nd, 4 * Hd) if per_ch else (nd,)
    w = g.qrand([nd, I, 4 * Hd], wdt)
    r = g.qrand([nd, Hd, 4 * Hd], wdt)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R")]
    ins = ["X", "W", "R"]
    opt = {}
    if g.r.random() < 0.7:
        opt["B"] = g.floats([nd, 8 * Hd], F, spread=0.3)
    if g.r.random() < 0.3:
        opt["seq"] = g.r.integers(1, T + 1, size=B).astype(np.int32)
    if g.r.random() < 0.5:
        opt["h0"] = g.floats([nd, B, Hd], F, spread=0.5)
    if g.r.random() < 0.5:
        opt["c0"] = g.floats([nd, B, Hd], F, spread=0.5)
    if g.r.random() < 0.2:
        opt["P"] = g.floats([nd, 3 * Hd], F, spread=0.3)
    for k in ("B", "seq", "h0", "c0", "P"):
        if k in opt:
            inits.append(numpy_helper.from_array(opt[k], k))
            ins.append(k)
        else:
            ins.append("")
    # The kernel takes zero weight zero points only ("InputWeight zero point must be zero").
    z = np.zeros(sshape, dtype=NP[wdt])
    inits += [const("ws", g.scale(sshape, lo=-2.5, hi=-1.5), F), const("wz", z, wdt),
              const("rs", g.scale(sshape, lo=-2.5, hi=-1.5), F), const("rz", z, wdt)]
    ins += ["ws", "wz", "rs", "rz"]
    attrs = {"hidden_size": Hd, "direction": direction}
    if g.r.random() < 0.15:
        attrs["clip"] = float(g.r.uniform(0.5, 3))
    if g.r.random() < 0.1:
        attrs["input_forget"] = 1
    outs = ["Y", "Y_h" if g.r.random() < 0.5 else "", "Y_c" if g.r.random() < 0.5 else ""]
    while outs[-1] == "":
        outs.pop()
    m = make_model(ms("DynamicQuantizeLSTM", ins, outs, **attrs), [vi("X", F, [T, B, I])],
                   [vi("Y", F)] + out_vis(outs[1:]), inits)
    return m, {"X": g.floats([T, B, I], F, spread=float(g.r.choice([0.3, 1.0, 3.0])))}


def gen_act_norm_group(g):
    op = str(g.r.choice(["HardSwish", "Mish", "GroupNormalization"]))
    dt = fdt(g)
    if op != "GroupNormalization":
        shape = g.shape(int(g.r.integers(0, 5)), 1, 6, empty=True)
        x = np.asarray(acts(g, shape, dt))
        if g.r.random() < 0.3 and x.size:
            x.reshape(-1)[: min(x.size, 16)] = np.array([-3, 3, 0, -0.0, 20, -20, 1e-3, 2.9, -2.9, 3.1, 40, -40,
                                                        65000 if dt == F16 else 1e30, -8, 8, 0.5])[: min(x.size, 16)]
        opset = 14 if op == "HardSwish" else 18
        m = make_model_n(helper.make_node(op, ["X"], ["Y"]), [vi("X", dt, shape)], [vi("Y", dt)], [], opset)
        return m, {"X": x}
    opset = int(g.r.choice([18, 21]))
    groups = int(g.r.choice([1, 2, 4, 8]))
    C = groups * int(g.r.integers(1, 4))
    wide = dt == F16 and g.r.random() < 0.25
    if wide:
        groups, C = 4, 8
        spatial = [64, 32]
    else:
        spatial = g.shape(int(g.r.integers(0, 3)), 1, 6)
    shape = [int(g.r.integers(1, 3)), C] + spatial
    cshape = [C] if opset >= 21 else [groups]
    attrs = {"num_groups": groups}
    if g.r.random() < 0.5:
        attrs["epsilon"] = float(g.r.choice([1e-5, 1e-6, 1e-3]))
    if opset >= 21 and g.r.random() < 0.3:
        attrs["stash_type"] = 1
    inits = [numpy_helper.from_array(g.floats(cshape, dt, spread=1.0), "scale"),
             numpy_helper.from_array(g.floats(cshape, dt, spread=0.5), "bias")]
    m = make_model_n(helper.make_node(op, ["X", "scale", "bias"], ["Y"], **attrs), [vi("X", dt, shape)],
                     [vi("Y", dt)], inits, opset)
    return m, {"X": acts(g, shape, dt, wide)}


def gen_nchwc(g):
    """A standard Conv (and a pool or Upsample after it), rewritten by ONNX Runtime itself into its
    NCHWc region (ORT_ENABLE_ALL, saved): the instance is that region."""
    import onnxruntime as ort
    for _ in range(8):
        cin = int(g.r.choice([1, 3, 8, 16, 24, 32]))
        group = 1
        cout = int(g.r.choice([8, 16, 32, 48]))
        if g.r.random() < 0.25 and cin >= 8:
            group, cout = cin, cin  # depthwise
        hw = g.shape(2, 4, 12)
        k = [int(g.r.choice([1, 3, 5])) for _ in range(2)]
        attrs = {"kernel_shape": k, "group": group}
        if g.r.random() < 0.4:
            attrs["strides"] = [int(g.r.integers(1, 3))] * 2
        if g.r.random() < 0.6:
            attrs["pads"] = [kk // 2 for kk in k] * 2
        if g.r.random() < 0.2:
            attrs["dilations"] = [2, 2]
        w = (g.r.standard_normal([cout, cin // group] + k) / np.sqrt(cin * np.prod(k))).astype(np.float32)
        b = g.floats([cout], F, spread=0.3)
        nodes = [helper.make_node("Conv", ["X", "W", "Bc"], ["c"], **attrs)]
        last = "c"
        if g.r.random() < 0.5:
            act = str(g.r.choice(["Relu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "LeakyRelu"]))
            ains = [last] + (["lo", "hi"] if act == "Clip" else [])
            nodes.append(helper.make_node(act, ains, ["a"]))
            last = "a"
        tail = str(g.r.choice(["", "MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool", "Upsample", "Add"]))
        inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "Bc"),
                 numpy_helper.from_array(np.float32(-1.0), "lo"), numpy_helper.from_array(np.float32(2.0), "hi")]
        # The Conv's output size: a pool window larger than it is invalid, and ONNX Runtime's
        # NCHWc AveragePool dies of SIGFPE on it (1.32), taking the fuzzer with it.
        pads = attrs.get("pads", [0, 0, 0, 0])
        dil = attrs.get("dilations", [1, 1])
        st = attrs.get("strides", [1, 1])
        out_hw = [(hw[i] + pads[i] + pads[i + 2] - dil[i] * (k[i] - 1) - 1) // st[i] + 1 for i in range(2)]
        if min(out_hw) < 1:
            continue
        if tail in ("MaxPool", "AveragePool"):
            pk = [int(g.r.integers(1, min(4, min(out_hw) + 1)))] * 2
            pa = {"kernel_shape": pk, "strides": [int(g.r.integers(1, 3))] * 2}
            if g.r.random() < 0.4:
                pa["pads"] = [int(g.r.integers(0, pk[0]))] * 4
            if tail == "AveragePool" and g.r.random() < 0.5:
                pa["count_include_pad"] = 1
            if g.r.random() < 0.2:
                pa["ceil_mode"] = 1
            nodes.append(helper.make_node(tail, [last], ["p"], **pa))
            last = "p"
        elif tail in ("GlobalMaxPool", "GlobalAveragePool"):
            nodes.append(helper.make_node(tail, [last], ["p"]))
            last = "p"
        elif tail == "Upsample":
            s = float(g.r.choice([2.0, 3.0]))
            inits.append(numpy_helper.from_array(np.array([1, 1, s, s], np.float32), "sc"))
            nodes.append(helper.make_node("Resize", [last, "", "sc"], ["p"],
                                          mode=str(g.r.choice(["nearest", "linear"]))))
            last = "p"
        elif tail == "Add":
            nodes.append(helper.make_node("Add", [last, "c"], ["p"]))
            last = "p"
        nodes.append(helper.make_node("Identity", [last], ["Y"]))
        xs = [int(g.r.integers(1, 3)), cin] + hw
        gr = helper.make_graph(nodes, "fuzz", [vi("X", F, xs)], [vi("Y", F)], inits)
        m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        with tempfile.TemporaryDirectory() as tmp:
            src, opt = os.path.join(tmp, "m.onnx"), os.path.join(tmp, "o.onnx")
            onnx.save(m, src)
            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            so.optimized_model_filepath = opt
            so.log_severity_level = 4
            try:
                ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
            except Exception:
                continue
            om = onnx.load(opt)
        if any(n.domain == "com.microsoft.nchwc" for n in om.graph.node):
            return om, {"X": g.floats(xs, F)}
    return m, {"X": g.floats(xs, F)}


FAMILIES.update({
    "GeluGroup": gen_gelu_group,
    "LayerNormGroup": gen_layer_norm_group,
    "FusedConvGroup": gen_fused_conv_group,
    "FusedGemm": gen_fused_gemm,
    "FusedMatMulGroup": gen_fused_matmul_group,
    "RotaryEmbedding": gen_rotary,
    "GroupQueryAttention": gen_gqa,
    "EmbedLayerNormGroup": gen_embed_ln,
    "MatMulNBits": gen_matmul_nbits,
    "DynamicQuantizeLSTM": gen_dq_lstm,
    "ActNormGroup": gen_act_norm_group,
    "NchwcRegion": gen_nchwc,
    "TransformerChain": lambda g: gen_transformer_chain(g),
    "Fp16ConvChain": lambda g: gen_fp16_conv_chain(g),
    "OptimizedBert": lambda g: gen_optimized_bert(g),
})


# ---- chains as the optimizer writes them, and float16 conv chains (issue 48, item 3) ------------
# One-node models at small sizes miss what real transformers do: a layer norm's input is the
# residual stream (thousands, in Whisper's encoder), the optional outputs of one fused op feed the
# next (EmbedLayerNormalization's mask_index into Attention, SkipLayerNormalization's sum into the
# next one's skip), sequences reach 4096 and hidden sizes 4096. A float32 output past the rounding
# bound is judged once more against a float64 evaluation of the original (`wide_reference`, as
# `verify` does): "conditioned" when the original is itself past the bound from it and the rewrite
# within twice the original's own error.

FLOAT_ONLY = ("Attention", "EmbedLayerNormalization", "MultiHeadAttention")


def wide_reference(model, feeds):
    """The original's outputs with its float32 arithmetic in float64 (ops without a float64 kernel
    in ONNX Runtime's CPU provider, FLOAT_ONLY, in float32 between casts), rounded to float32."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    floats = set()
    for t in g.initializer:
        if t.data_type == F:
            a = numpy_helper.to_array(t).astype(np.float64)
            t.CopyFrom(numpy_helper.from_array(a, t.name))
            floats.add(t.name)
    ren = {}
    head = []
    for i in g.input:
        if i.type.tensor_type.elem_type == F:
            ren[i.name] = i.name + "::f64"
            head.append(helper.make_node("Cast", [i.name], [ren[i.name]], to=TensorProto.DOUBLE))
            floats.add(ren[i.name])
    tail = []
    for o in g.output:
        if o.type.tensor_type.elem_type == F:
            ren.setdefault(o.name, o.name + "::f64")
            tail.append(helper.make_node("Cast", [ren[o.name]], [o.name], to=F))
    body = []
    for k, n in enumerate(g.node):
        n2 = onnx.NodeProto()
        n2.CopyFrom(n)
        for j, x in enumerate(n2.input):
            n2.input[j] = ren.get(x, x)
        for j, x in enumerate(n2.output):
            n2.output[j] = ren.get(x, x)
        fl = [x for x in n2.input if x in floats]
        outs_f = [x for j, x in enumerate(n2.output) if x and not (n.op_type == "EmbedLayerNormalization" and j == 1)]
        stats = list(n2.output[1:3]) + ["", ""]
        simp = n.op_type == "SkipSimplifiedLayerNormalization"
        if n.op_type in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization") and not (simp and stats[0]):
            # No float64 kernel: Add and the default-domain (Simplified)LayerNormalization in
            # float64 (ONNX Runtime's own kernels, not the compiler's decomposition); its
            # statistics come in float32, cast up.
            ins = list(n2.input) + [""] * 5
            beta, bias = ("", ins[3]) if simp else (ins[3], ins[4])
            eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-12)
            total = n2.output[3] if len(n2.output) > 3 and n2.output[3] else f"sln{k}::sum"
            if bias:
                body.append(helper.make_node("Add", [ins[0], ins[1]], [f"sln{k}::xs"]))
                body.append(helper.make_node("Add", [f"sln{k}::xs", bias], [total]))
            else:
                body.append(helper.make_node("Add", [ins[0], ins[1]], [total]))
            outs = [n2.output[0]] + [(x + "::f32" if x else "") for x in (stats[1:2] if simp else stats[:2])]
            while outs[-1] == "":
                outs.pop()
            body.append(helper.make_node("SimplifiedLayerNormalization" if simp else "LayerNormalization",
                                         [total, ins[2]] + ([beta] if beta else []), outs,
                                         axis=-1, epsilon=eps))
            for x in outs[1:]:
                if x:
                    body.append(helper.make_node("Cast", [x], [x[:-len("::f32")]], to=TensorProto.DOUBLE))
            floats.update(outs_f)
            continue
        if n.op_type in FLOAT_ONLY or n.op_type in ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization"):
            after = []
            for j, x in enumerate(n2.input):
                if x in floats:
                    body.append(helper.make_node("Cast", [x], [f"{x}::f32:{k}"], to=F))
                    n2.input[j] = f"{x}::f32:{k}"
            for j, x in enumerate(n2.output):
                if x in outs_f:
                    n2.output[j] = x + "::f32"
                    after.append(helper.make_node("Cast", [x + "::f32"], [x], to=TensorProto.DOUBLE))
            body.append(n2)
            body.extend(after)
            floats.update(outs_f)
            continue
        if fl:
            floats.update(outs_f)
        body.append(n2)
    del g.node[:]
    g.node.extend(head + body + tail)
    del g.value_info[:]
    return session_bytes(m.SerializeToString()).run(None, feeds)


def session_bytes(b):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    return ort.InferenceSession(b, so, providers=["CPUExecutionProvider"])


def within_float64(model, feeds, index, ref, got, cls, cache):
    """verify's float64 judgement of a float32 output past the rounding bound: the original is
    itself past the bound from a float64 evaluation of it and the rewrite within twice that, or
    the rewrite is closer to it than the original."""
    if cls[0] == "exact" or ref.dtype != np.float32 or ref.shape != got.shape:
        return False
    if "wide" not in cache:
        cache["wide"] = wide_reference(model, feeds)
    w = cache["wide"][index].astype(np.float64)
    r64, g64 = ref.astype(np.float64), got.astype(np.float64)
    fin = np.isfinite(r64) & np.isfinite(g64) & np.isfinite(w)
    if not np.array_equal(np.isfinite(r64), np.isfinite(g64)):
        return False
    scale = float(np.max(np.abs(r64[fin]))) if fin.any() else 0.0
    bound = f32_rounding_bound(scale) if cls[0] == "rounding" else cls[1] * max(scale, cls[2])
    e_o = float(np.max(np.abs(r64[fin] - w[fin]))) if fin.any() else 0.0
    e_r = float(np.max(np.abs(g64[fin] - w[fin]))) if fin.any() else 0.0
    return (e_o > bound and e_r <= 2 * e_o) or e_r <= e_o


def chain_sizes(g):
    """(S, heads, head size): sequences to 4096, hidden sizes to 4096, the attention's work kept
    to what one CPU thread does in a second or two (S*H <= 2^20, S*S*H <= 2^31)."""
    while True:
        S = int(round(2 ** g.r.uniform(0, 12)))
        heads = int(g.r.choice([1, 2, 4, 8, 16, 32]))
        hs = int(g.r.choice([4, 8, 16, 32, 64, 128]))
        H = heads * hs
        if H <= 4096 and S * H <= 2 ** 20 and S * S * H <= 2 ** 31:
            return S, heads, hs


def gen_transformer_chain(g):
    """EmbedLayerNormalization -> Attention -> MatMul -> SkipLayerNormalization (-> MatMul ->
    SkipLayerNormalization), or the same from a residual stream and a hidden state given as
    inputs, as ONNX Runtime's optimizer writes BERT and Whisper blocks; the residual stream
    sometimes in the thousands; optional outputs read downstream (mask_index into the
    attention, embedding_sum and the layer norms' sums as graph outputs or the next skip)."""
    S, heads, hs = chain_sizes(g)
    B = 1 if S > 512 else int(g.r.integers(1, 3))
    H = heads * hs
    inits, inputs, feeds, nodes, outs = [], [], {}, [], []

    def w(name, shape, s):
        inits.append(numpy_helper.from_array((g.r.standard_normal(shape) * s).astype(np.float32), name))
        return name

    eln = g.r.random() < 0.4
    mask = ""
    if eln:
        V = int(g.r.integers(2, 50))
        feeds["ids"] = g.r.integers(0, V, size=(B, S)).astype(np.int32)
        inputs.append(vi("ids", I32, [B, S]))
        ins = ["ids", "", w("word", [V, H], 1.0), w("pos", [S, H], 0.5), "", w("eg", [H], 0.3) , w("eb", [H], 0.1)]
        inits[-2] = numpy_helper.from_array((numpy_helper.to_array(inits[-2]) + 1).astype(np.float32), "eg")
        if g.r.random() < 0.6:
            m = np.ones((B, S), np.int32)
            if B > 1:
                m[1, int(g.r.integers(1, S + 1)):] = 0
            feeds["mask"] = m
            inputs.append(vi("mask", I32, [B, S]))
            ins.append("mask")
        esum = g.r.random() < 0.4
        e_outs = ["hidden", "mask_index" if "mask" in feeds else ""] + (["esum"] if esum else [])
        nodes.append(ms("EmbedLayerNormalization", ins, e_outs))
        if esum:
            outs.append(vi("esum", F))
        mask = "mask_index" if "mask" in feeds else ""
        residual = "hidden"
        if g.r.random() < 0.5:
            off = float(g.r.choice([0.0, 50.0, 1e3, 4e3]))
            feeds["res"] = (off + g.r.standard_normal((B, S, H)) * float(g.r.choice([0.5, 2.0, 20.0]))).astype(np.float32)
            inputs.append(vi("res", F, [B, S, H]))
            nodes.append(helper.make_node("Add", ["hidden", "res"], ["residual0"]))
            residual = "residual0"
    else:
        feeds["hidden"] = g.floats([B, S, H], F, spread=1.0)
        off = float(g.r.choice([0.0, 50.0, 1e3, 4e3, -2e3]))
        spread = float(g.r.choice([0.5, 2.0, 20.0, 300.0]))
        feeds["res"] = (off + g.r.standard_normal((1, 1, H)) * spread
                        + g.r.standard_normal((B, S, H)) * spread * 0.3).astype(np.float32)
        inputs += [vi("hidden", F, [B, S, H]), vi("res", F, [B, S, H])]
        residual = "res"
    a_ins = ["hidden", w("qkv", [H, 3 * H], 1.0 / np.sqrt(H)), w("qkv_b", [3 * H], 0.05)]
    if mask:
        a_ins.append(mask)
    attrs = {"num_heads": heads}
    if g.r.random() < 0.2:
        attrs["unidirectional"] = 1
    nodes.append(ms("Attention", a_ins, ["attn"], **attrs))
    nodes.append(helper.make_node("MatMul", ["attn", w("wo", [H, H], 1.0 / np.sqrt(H))], ["proj"]))
    s_ins = ["proj", residual, w("g1", [H], 0.2), w("b1", [H], 0.1)]
    if g.r.random() < 0.7:
        s_ins.append(w("bias1", [H], 0.05))
    inits[[i.name for i in inits].index("g1")] = numpy_helper.from_array(
        (numpy_helper.to_array(inits[[i.name for i in inits].index("g1")]) + 1).astype(np.float32), "g1")
    read_inv = g.r.random() < 0.2
    nodes.append(ms("SkipLayerNormalization", s_ins, ["ln1", "", "inv1" if read_inv else "", "sum1"],
                    epsilon=float(g.r.choice([1e-5, 1e-12]))))
    if read_inv:
        outs.append(vi("inv1", F))
    if g.r.random() < 0.6:
        nodes.append(helper.make_node("MatMul", ["ln1", w("fc", [H, H], 1.0 / np.sqrt(H))], ["mlp"]))
        nodes.append(ms("SkipLayerNormalization", ["mlp", "sum1", w("g2", [H], 0.2), w("b2", [H], 0.1)],
                        ["ln2", "", "", "sum2"], epsilon=1e-5))
        outs = [vi("ln2", F), vi("sum2", F)] + outs
    else:
        outs = [vi("ln1", F), vi("sum1", F)] + outs
    g_ = helper.make_graph(nodes, "chain", inputs, outs, inits)
    m = helper.make_model(g_, opset_imports=[helper.make_opsetid("", 16), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m, feeds


FP16_TARGETS = ("rx580", "intel-gen9", "rocm-migraphx", "directml", "webgpu")


def gen_fp16_conv_chain(g):
    """float16 Conv / ConvTranspose chains (opset 18): a float32 input cast to float16 or a
    float16 input, depthwise Convs wider than 64 channels (rx580 splits them), dense and
    transposed Convs (stride to 4), LeakyRelu / Relu / Tanh, residual Adds; compiled for one of
    FP16_TARGETS and judged at the class the output declares."""
    C = int(g.r.choice([8, 16, 32, 65, 96, 128, 192, 256]))
    L = int(g.r.integers(8, 200))
    d2 = g.r.random() < 0.25
    sp = [int(g.r.integers(4, 24)), int(g.r.integers(4, 24))] if d2 else [L]
    nd = len(sp)
    sp_in = list(sp)
    inits, nodes = [], []
    cast_in = g.r.random() < 0.5
    x = "x"
    if cast_in:
        nodes.append(helper.make_node("Cast", ["x"], ["xh"], to=F16))
        x = "xh"
    c = C
    count = [0]

    def name(b):
        count[0] += 1
        return f"{b}{count[0]}"

    def w(shape, fan):
        n = name("w")
        inits.append(numpy_helper.from_array((g.r.standard_normal(shape) * np.sqrt(2.0 / fan)).astype(np.float16), n))
        return n

    def bias(k):
        n = name("b")
        inits.append(numpy_helper.from_array((g.r.standard_normal(k) * 0.05).astype(np.float16), n))
        return n

    for _ in range(int(g.r.integers(1, 6))):
        kind = g.r.choice(["dw", "dense", "convT", "act", "res"])
        y = name("t")
        if kind == "dw":
            k = int(g.r.choice([3, 5, 7]))
            dil = int(g.r.choice([1, 2]))
            ins = [x, w([c, 1] + [k] * nd, k ** nd)] + ([bias(c)] if g.r.random() < 0.7 else [])
            nodes.append(helper.make_node("Conv", ins, [y], group=c, pads=[(k // 2) * dil] * (2 * nd),
                                          dilations=[dil] * nd))
        elif kind == "dense":
            n = int(g.r.choice([c, max(8, c // 2), min(256, c * 2)]))
            k = int(g.r.choice([1, 3]))
            nodes.append(helper.make_node("Conv", [x, w([n, c] + [k] * nd, c * k ** nd), bias(n)], [y],
                                          pads=[k // 2] * (2 * nd)))
            c = n
        elif kind == "convT":
            if np.prod(sp) * 4 > 4096:
                continue
            st = int(g.r.choice([1, 2, 4]))
            n = max(4, c // int(g.r.choice([1, 2])))
            nodes.append(helper.make_node("ConvTranspose", [x, w([c, n] + [2 * st] * nd, c * 2), bias(n)], [y],
                                          strides=[st] * nd, pads=[st // 2] * (2 * nd)))
            sp = [d * st for d in sp]
            c = n
        elif kind == "act":
            op = str(g.r.choice(["LeakyRelu", "Relu", "Tanh"]))
            nodes.append(helper.make_node(op, [x], [y], **({"alpha": 0.1} if op == "LeakyRelu" else {})))
        else:
            r = name("t")
            nodes.append(helper.make_node("Conv", [x, w([c, c] + [3] * nd, c * 9), bias(c)], [r], pads=[1] * (2 * nd)))
            nodes.append(helper.make_node("Add", [x, r], [y]))
        x = y
    if x in ("x", "xh"):
        nodes.append(helper.make_node("Conv", [x, w([c, 1] + [3] * nd, 3), bias(c)], ["y"], group=c, pads=[1] * (2 * nd)))
    else:
        nodes[-1].output[0] = "y"
    in_dt = F if cast_in else F16
    g_in_shape = [1, C] + sp_in
    feeds = {"x": (g.r.standard_normal(g_in_shape) * float(g.r.choice([0.5, 2.0, 8.0]))).astype(NP[in_dt])}
    gr = helper.make_graph(nodes, "fp16chain", [vi("x", in_dt, g_in_shape)], [vi("y", F16)], inits)
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    m.metadata_props.add(key="fuzz.target", value=str(g.r.choice(FP16_TARGETS)))
    return m, feeds


ALL_TARGETS = ("rx580", "rdna2", "directml", "intel-gen9", "intel-xe", "rocm-migraphx", "coreml", "tensorrt",
               "webgpu", "openvino-gpu")


def gen_optimized_bert(g):
    """A third source: `onnxruntime.transformers.optimizer` over a small BERT as a PyTorch export
    writes it (tools/make_transformers.py's bert_plain, random sizes and weights), at a random
    opt_level (0, 1, 2, 99: ONNX Runtime's own fusions on top of the optimizer's), compiled for a
    random built-in target and judged at the class the output declares."""
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import make_transformers as mt
    from onnxruntime.transformers import optimizer
    heads = int(g.r.choice([1, 2, 4, 8]))
    hidden = heads * int(g.r.choice([8, 16, 32, 64]))
    layers = int(g.r.integers(1, 3))
    const = g.r.random() < 0.7
    seed = int(g.r.integers(0, 2 ** 31))
    orig_g = mt.G
    mt.G = lambda _s: orig_g(seed)
    try:
        plain = mt.bert_plain(hidden=hidden, heads=heads, layers=layers, const_shapes=const)
    finally:
        mt.G = orig_g
    level = int(g.r.choice([0, 1, 2, 99]))
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "bert.onnx")
        onnx.save(plain, src)
        import logging
        import onnxruntime as ort
        logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
        if level:
            # optimize_model's own ONNX Runtime pass imports torch (not installed): the same pass
            # by hand, then the optimizer's fusions at level 0 on its output.
            so = ort.SessionOptions()
            so.graph_optimization_level = {1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                           2: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                           99: ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
            so.optimized_model_filepath = os.path.join(tmp, "ort.onnx")
            so.log_severity_level = 4
            ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
            src = so.optimized_model_filepath
        m = optimizer.optimize_model(src, model_type="bert", num_heads=heads, hidden_size=hidden,
                                     opt_level=0, use_gpu=False).model
    if not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    dims = {"batch_size": int(g.r.integers(1, 3)), "sequence_length": int(g.r.integers(1, 65))}
    feeds = mt.feeds_for(m, dims)
    m.metadata_props.add(key="fuzz.target", value=str(g.r.choice(ALL_TARGETS)))
    m.metadata_props.add(key="fuzz.opt_level", value=str(level))
    return m, feeds


# ---- one instance --------------------------------------------------------------------------------

def nchwc_block():
    """MLAS's NCHWc block size on this CPU: 16 with AVX-512, 8 otherwise (AVX2)."""
    try:
        return 16 if " avx512f" in open("/proc/cpuinfo").read() else 8
    except OSError:
        return 8


def compile_model(binary, rules, src, dst, approximate, extra=()):
    args = [binary, src, "--target", rules, "-o", dst, "--allow-growth", *extra]
    if approximate:
        args.append("--allow-approximate")
    p = subprocess.run(args, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def reference(model, feeds, path):
    """The outputs to judge against: the family's own reference where ONNX Runtime's CPU
    provider has no kernel (of this type) for the op, else ONNX Runtime on the model at `path`."""
    own = REFERENCES.get(model.graph.node[0].op_type)
    ref = own(model, feeds) if own else None
    return ref if ref is not None else session(path).run(None, feeds)


def target_of(model):
    """The built-in target a family compiles its instance for (`fuzz.target`), or None."""
    return next((p.value for p in model.metadata_props if p.key == "fuzz.target"), None)


def declared_class(path):
    """The class an output declares (`onnx_safeify.exactness`); untouched: exact."""
    m = onnx.load(path, load_external_data=False)
    v = next((p.value for p in m.metadata_props if p.key == "onnx_safeify.exactness"), "exact")
    if v.startswith("approximate:"):
        b, _, f = v.split(":", 1)[1].partition("@")
        return ("approximate", float(b), float(f or 0))
    return (v,)


def check(binary, rules, workdir, model, feeds, cls):
    """("ok"|"mismatch"|"refused"|"skipped", detail)."""
    src = os.path.join(workdir, "model.onnx")
    dst = os.path.join(workdir, "out.onnx")
    onnx.save(model, src)
    target = target_of(model)
    try:
        # An op ONNX Runtime's CPU provider has no kernel for (or no kernel of this type for) is
        # judged against the family's own reference.
        ref = reference(model, feeds, src)
    except Exception as e:  # ONNX Runtime rejects the instance: not a test of the decomposition
        return "skipped", str(e).splitlines()[0][:200]
    if os.path.exists(dst):
        os.remove(dst)
    # A model ONNX Runtime wrote on this machine has this machine's NCHWc block size.
    extra = ["--nchwc-block", str(nchwc_block())] if any(n.domain == "com.microsoft.nchwc" for n in model.graph.node) else []
    rc, log = compile_model(binary, target or rules, src, dst, cls[0] == "approximate", extra)
    if rc != 0 or not os.path.exists(dst):
        why = [l.split("]: ", 1)[-1] for l in log.splitlines() if "]: " in l and l.strip().startswith("- ")]
        return "refused", (why[0] if why else (log.strip().splitlines() or [f"exit {rc}"])[-1])[:300]
    out = onnx.load(dst)
    left = [n.op_type for n in out.graph.node if n.domain not in ("", "ai.onnx")
            or n.op_type in ("LayerNormalization", "SimplifiedLayerNormalization", "Gelu", "HardSwish", "Mish",
                             "GroupNormalization")]
    if target:
        # Judged at the class the compile for that target declares.
        cls = declared_class(dst)
    elif left:
        return "refused", f"left in the output: {left}"
    try:
        got = session(dst).run(None, feeds)
    except Exception as e:
        return "mismatch", "the decomposition fails on ONNX Runtime: " + str(e).splitlines()[0][:200]
    worst, conditioned, cache = 0.0, False, {}
    for i, (r, o) in enumerate(zip(ref, got)):
        ok, how = error_of(r, o, cls)
        if not ok:
            chain = len(model.graph.node) > 1
            if not within_conditioning(model, feeds, i, r, o, cls) and not (
                    chain and within_float64(model, feeds, i, r, o, cls, cache)):
                return "mismatch", how
            conditioned = True
        elif isinstance(how, float):
            worst = max(worst, how)
    return ("conditioned", worst) if conditioned else ("ok", worst)


def save_case(root, family, model, feeds, cls, detail):
    blob = model.SerializeToString() + b"".join(v.tobytes() for v in feeds.values())
    h = hashlib.sha256(blob).hexdigest()[:12]
    d = os.path.join(root, f"{family}_{h}")
    os.makedirs(d, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    names = [i.name for i in model.graph.input]
    for k, name in enumerate(names):
        t = numpy_helper.from_array(feeds[name], name)
        with open(os.path.join(d, f"input_{k}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump({"family": family, "class_when_found": list(cls), "found": str(detail)}, f, indent=1)
    return d


def load_case(d):
    model = onnx.load(os.path.join(d, "model.onnx"))
    feeds = {}
    for k, i in enumerate(model.graph.input):
        t = TensorProto()
        with open(os.path.join(d, f"input_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        feeds[i.name] = numpy_helper.to_array(t)
    meta = json.load(open(os.path.join(d, "case.json")))
    return model, feeds, meta


def default_binary():
    return os.path.join(REPO, "target/release/onnx-safeify")


def loosest(a, b):
    rank = {"exact": 0, "rounding": 1, "approximate": 2}
    if a is None or b is None:
        return a or b
    if a[0] == b[0] == "approximate":
        return ("approximate", max(a[1], b[1]), max(a[2], b[2]))
    return a if rank[a[0]] >= rank[b[0]] else b


def class_of(classes, model):
    """The loosest class over the model's nodes that have a decomposition."""
    cls = None
    for n in model.graph.node:
        dom = "" if n.domain in ("", "ai.onnx") else n.domain
        cls = loosest(cls, classes.get((dom, n.op_type)))
    return cls


def cpu_seconds():
    """CPU time of this process and the compiler runs it waited for (the budget of a family)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def cmd_run(a):
    # SIGINT stops a run early (see below), also one started in the background, where the shell
    # leaves SIGINT ignored.
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    classes = registry_classes()
    fams = a.families.split(",") if a.families else list(FAMILIES)
    root = a.save or os.path.join(REPO, "tests/data/fuzz_regressions/decomp")
    totals = {}
    with tempfile.TemporaryDirectory() as tmp:
        rules = os.path.join(tmp, "unfuse-all.yaml")
        open(rules, "w").write(RULES)
        for fam in fams:
            g = Gen(np.random.default_rng([a.seed, sum(map(ord, fam))]))
            count = {"instances": 0, "ok": 0, "conditioned": 0, "mismatch": 0, "refused": 0, "skipped": 0}
            worst, examples, refusals, skips = 0.0, [], {}, {}
            t0, cpu0 = time.time(), cpu_seconds()
            interrupted = False
            while cpu_seconds() - cpu0 < a.seconds_per_family and count["instances"] < a.max_instances:
                try:
                    model, feeds = FAMILIES[fam](g)
                    cls = class_of(classes, model) or (("exact",) if target_of(model) else None)
                    if cls is None:
                        raise SystemExit(f"{fam}: no decomposition registered")
                    status, detail = check(a.binary, rules, tmp, model, feeds, cls)
                    count["instances"] += 1
                    count[status] += 1
                    if status in ("ok", "conditioned"):
                        worst = max(worst, detail)
                    elif status == "mismatch":
                        if a.keep:
                            d = save_case(root, fam, model, feeds, cls, detail)
                        else:
                            d = "-"
                        if len(examples) < 5:
                            examples.append(f"{os.path.basename(d)}: {detail}")
                    elif status == "refused":
                        refusals[detail] = refusals.get(detail, 0) + 1
                    else:
                        skips[detail] = skips.get(detail, 0) + 1
                except KeyboardInterrupt:
                    # Stopped early (SIGINT): report what this family did so far, then stop.
                    interrupted = True
                    break
            count.update(family=fam, seconds=round(time.time() - t0, 1),
                         cpu_seconds=round(cpu_seconds() - cpu0, 1), class_=cls[0] if cls else None,
                         worst_ok=worst, examples=examples,
                         refusals=dict(sorted(refusals.items(), key=lambda kv: -kv[1])[:4]),
                         skips=dict(sorted(skips.items(), key=lambda kv: -kv[1])[:2]))
            if interrupted:
                count["interrupted"] = True
            print(json.dumps(count), flush=True)
            totals[fam] = count
            if interrupted:
                break
    return 0


def cmd_replay(a):
    """Replay each case (one JSON line each); exit 1 when any misses its class."""
    classes = registry_classes()
    bad = 0
    for case in a.case:
        model, feeds, meta = load_case(case)
        cls = class_of(classes, model) or (("exact",) if target_of(model) else None)
        with tempfile.TemporaryDirectory() as tmp:
            rules = os.path.join(tmp, "unfuse-all.yaml")
            open(rules, "w").write(RULES)
            status, detail = check(a.binary, rules, tmp, model, feeds, cls)
        print(json.dumps({"case": os.path.basename(case.rstrip("/")), "class": list(cls), "status": status,
                          "detail": detail if not isinstance(detail, float) else f"{detail:.3g} of scale"}),
              flush=True)
        bad += not (status in ("ok", "conditioned", "refused") and not (status == "refused" and a.no_refusal))
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--families", default="")
    r.add_argument("--seconds-per-family", type=float, default=180.0,
                   help="CPU seconds per family (this process and the compiler runs)")
    r.add_argument("--max-instances", type=int, default=10 ** 9)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--save", default="")
    r.add_argument("--no-keep", dest="keep", action="store_false")
    r.add_argument("--binary", default=default_binary())
    rp = sub.add_parser("replay")
    rp.add_argument("case", nargs="+")
    rp.add_argument("--binary", default=default_binary())
    rp.add_argument("--no-refusal", action="store_true", help="a refused decomposition fails the replay")
    sub.add_parser("list")
    a = p.parse_args()
    if a.cmd == "run":
        return cmd_run(a)
    if a.cmd == "replay":
        return cmd_replay(a)
    for fam in FAMILIES:
        print(fam)
    return 0


if __name__ == "__main__":
    sys.exit(main())
