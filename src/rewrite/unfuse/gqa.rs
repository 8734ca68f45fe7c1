//! GroupQueryAttention (ONNX Runtime contrib operator, com.microsoft), as onnxruntime-genai's
//! model builder writes it: separate or packed Q/K/V, a BNSH past/present KV cache, per-batch
//! lengths in `seqlens_k`, optional rotary embedding from cos/sin caches, `local_window_size`,
//! `softcap`, `smooth_softmax`, `head_sink`, `attention_bias`, `position_ids`. Refused (the
//! fallback keeps the node): a quantized or windowed KV cache, Q/K norms, `query_seqlens`,
//! `qk_output`.
//!
//! Semantics (ContribOperators.md, GroupQueryAttention; ONNX Runtime
//! `contrib_ops/cpu/bert/group_query_attention_helper.h` and `gqa_attention_base.h`; checked
//! on ONNX Runtime 1.32's CPU kernel), per batch entry `b`:
//! - `T_b = seqlens_k[b] + 1` tokens are in the cache after the step; the `S` new tokens start
//!   at `P_b = max(0, T_b - S)` (0 for a first prompt; a prompt chunk after a past needs batch
//!   1, so `P_b` is the same for every entry whenever `S > 1`);
//! - the present cache has `C = max(total_sequence_length, past length)` rows: rows `< P_b`
//!   are the past's, rows `P_b .. P_b + S` the new keys/values (after rotation), the rest 0;
//! - query row `s` attends to key rows `j < L = min(P_b + s + 1, T_b)` (`L = T_b` with
//!   `causal=0`) and, with a window
//!   `W > 0`, `j >= L - W`; scores are `scale * q.k` (`scale` defaults to `1/sqrt(head)`),
//!   then `softcap * tanh(score / softcap)` when `softcap > 0`, plus `attention_bias`, then a
//!   softmax over the attended rows (with an extra logit of 0, or of `head_sink[n]`, in the
//!   denominator for `smooth_softmax` / `head_sink`); query head `n` reads KV head
//!   `n / (num_heads / kv_num_heads)`;
//! - rotary embedding (`do_rotary`) rotates Q and K at positions `P_b + s`, or, with
//!   `position_ids`, at `position_ids[0, 0] + s` for a first prompt (`S == total`) and
//!   `position_ids[b, s]` otherwise; without `do_rotary` the kernel ignores `position_ids`.
//!
//! float16: the kernel rotates in float and stores the rotated Q/K as float16 (its present_key
//! matches float32 rotation rounded once, bit for bit), then converts Q, K, V to float and
//! computes scores, softmax and the weighted sum in float, rounding the output once; the
//! decomposition does the same casts, and builds the present caches in float so that ONNX
//! Runtime's cast removal cannot skip the rounding of the rotated keys (see below).
//!
//! float32: ONNX Runtime 1.32 takes a flash-attention path (`ApplyAttentionFlash`, MLAS
//! `flashattn_gqa.cpp`) whenever total_sequence_length > 1 and there is no softcap,
//! smooth_softmax, head_sink or qk output (unless ORT_GQA_DISABLE_FLASH_ATTENTION is set): a
//! GEMV decode kernel for one new token, a tiled online softmax otherwise, with unnormalized
//! exponentials times V divided by the sum at the end, and block sizes from the L2 cache size
//! and the thread count. Its sums run in another order than Softmax and MatMul, so where the
//! exponentials amplify a score's last bits the outputs can differ by slightly more than
//! 1e-5 of scale (two fuzz cases at 1.3e-5 and 1.4e-5, which agree to 4e-8 with the flash
//! path disabled). The decomposition keeps the plain softmax.

use crate::ir::{Graph, NodeId};
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::tensor::dtype;

use super::rotary::{
    cache_half, cache_rows, dim_scalar, i64_scalar, range, rotate_in_float, unknown, Rotation,
};
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// Inputs of the operator, by index.
const QUERY: usize = 0;
const KEY: usize = 1;
const VALUE: usize = 2;
const PAST_KEY: usize = 3;
const PAST_VALUE: usize = 4;
const SEQLENS_K: usize = 5;
const TOTAL_LEN: usize = 6;
const COS: usize = 7;
const SIN: usize = 8;
const POSITION_IDS: usize = 9;
const ATTENTION_BIAS: usize = 10;
const HEAD_SINK: usize = 11;

/// Inputs this decomposition refuses, with what they are.
const REFUSED_INPUTS: &[(usize, &str)] = &[
    (12, "k_scale (quantized KV cache)"),
    (13, "v_scale (quantized KV cache)"),
    (14, "q_norm_weight"),
    (15, "k_norm_weight"),
    (16, "query_seqlens (right-padded chunks)"),
];

/// The run-time lengths of one call (all int64).
struct Lengths {
    /// `[B]`: tokens in the cache after the step.
    total_b: PValue,
    /// `[B]`: where the new tokens start.
    past_b: PValue,
    /// Rank 0: new tokens.
    s: PValue,
    /// Rank 0: rows of the present cache.
    c: PValue,
    /// Rank 0: `total_sequence_length`.
    total: PValue,
    /// Rank 0: `max(0, total_sequence_length - S)`, the start of a multi-token step.
    past_u: PValue,
    /// `S` when inference knows it.
    s_known: Option<i64>,
}

/// com.microsoft GroupQueryAttention.
pub fn group_query_attention(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[
        "num_heads",
        "kv_num_heads",
        "scale",
        "softcap",
        "local_window_size",
        "do_rotary",
        "rotary_interleaved",
        "smooth_softmax",
        "causal",
        "qk_output",
        "sliding_window_cache",
        "k_quant_type",
        "v_quant_type",
        "kv_cache_bit_width",
        "qk_norm_epsilon",
        "q_norm_epsilon",
        "k_norm_epsilon",
    ])?;
    if rw.opset < 13 {
        return unsupported(format!(
            "GroupQueryAttention needs opset >= 13 (integer Min/Max, Range, Pad with inputs), the model has {}",
            rw.opset
        ));
    }
    let heads = rw.attr_i("num_heads", 0);
    let kv_heads = rw.attr_i("kv_num_heads", 0);
    if heads <= 0 || kv_heads <= 0 {
        return unsupported("num_heads and kv_num_heads are required");
    }
    if heads % kv_heads != 0 {
        return unsupported(format!(
            "num_heads {heads} is not a multiple of kv_num_heads {kv_heads}"
        ));
    }
    let causal = match rw.attr_i("causal", 1) {
        1 => true,
        0 => false,
        c => return unsupported(format!("causal={c}")),
    };
    if rw.attr_i("qk_output", 0) != 0 {
        return unsupported("the QK output (qk_output)");
    }
    if rw.attr_i("sliding_window_cache", 0) != 0 {
        return unsupported("a window-sized KV cache (sliding_window_cache=1)");
    }
    for a in ["k_quant_type", "v_quant_type"] {
        if let Some(q) = rw.attr_s(a) {
            if q != "NONE" {
                return unsupported(format!("a quantized KV cache ({a} {q})"));
            }
        }
    }
    for &(i, what) in REFUSED_INPUTS {
        if rw.input(i).is_some() {
            return unsupported(format!("input {what}"));
        }
    }
    let softcap = rw.attr_f("softcap", 0.0);
    let window = rw.attr_i("local_window_size", -1);
    if !causal && window > 0 {
        return unsupported("a local window without the causal mask (causal=0)");
    }
    let smooth = rw.attr_i("smooth_softmax", 0) != 0;
    let do_rotary = rw.attr_i("do_rotary", 0) != 0;
    let interleaved = rw.attr_i("rotary_interleaved", 0) != 0;
    let sink = rw.input(HEAD_SINK);
    if sink.is_some() && smooth {
        return unsupported("head_sink together with smooth_softmax");
    }
    if !softcap.is_finite() || softcap < 0.0 {
        return unsupported(format!("softcap {softcap}"));
    }

    let q_in = rw.need(QUERY, "query")?;
    let dt = rw.float_dtype(QUERY)?;
    if rw.rank(QUERY, "query layout")? != 3 {
        return unsupported("query must be 3-D (batch, sequence, hidden)");
    }
    let packed = rw.input(KEY).is_none();
    if packed != rw.input(VALUE).is_none() {
        return unsupported("key and value must be both present or both absent");
    }
    let past = match (rw.input(PAST_KEY), rw.input(PAST_VALUE)) {
        (Some(k), Some(v)) => Some((k, v)),
        (None, None) => None,
        _ => return unsupported("past_key and past_value must be both present or both absent"),
    };
    if past.is_some() {
        for i in [PAST_KEY, PAST_VALUE] {
            if rw.in_facts(i).dtype.is_some_and(|t| t != dt) {
                return unsupported(
                    "a KV cache of another element type than the query (quantized cache)",
                );
            }
            if rw.rank(i, "past layout")? != 4 {
                return unsupported("past_key/past_value must be 4-D (BNSH)");
            }
        }
    }
    // The head size: from the query's width, the key's, or the past's.
    let qf = rw.in_facts(QUERY);
    let head = if packed {
        qf.dim(2).map(|d| (d, heads + 2 * kv_heads))
    } else {
        qf.dim(2).map(|d| (d, heads))
    }
    .and_then(|(d, k)| (d % k == 0).then_some(d / k))
    .or_else(|| {
        (!packed)
            .then(|| rw.in_facts(KEY).dim(2).map(|d| d / kv_heads))
            .flatten()
    })
    .or_else(|| past.and(rw.in_facts(PAST_KEY).dim(3)));
    let Some(head) = head.filter(|&h| h > 0) else {
        return unknown("the head size is unknown (the query's, key's or past's last dimension)");
    };
    let s_known = qf.dim(1);

    // Q, K, V as [B, S, width].
    let (q, k, v) = if packed {
        let (dq, dk) = (heads * head, kv_heads * head);
        let q = rw.slice(q_in, &[0], &[dq], &[-1]);
        let k = rw.slice(q_in, &[dq], &[dq + dk], &[-1]);
        let v = rw.slice(q_in, &[dq + dk], &[dq + 2 * dk], &[-1]);
        (q, k, v)
    } else {
        for i in [KEY, VALUE] {
            if rw.rank(i, "key/value layout")? != 3 {
                return unsupported("key and value must be 3-D (batch, sequence, hidden)");
            }
        }
        (q_in, rw.need(KEY, "key")?, rw.need(VALUE, "value")?)
    };
    let bnsh = |rw: &mut Rw, x: PValue, nh: i64| -> Result<PValue, Unsupported> {
        let r = rw.reshape(x, &[0, 0, nh, head])?;
        Ok(rw.transpose(r, &[0, 2, 1, 3]))
    };
    let mut qh = bnsh(&mut rw, q, heads)?;
    let mut kh = bnsh(&mut rw, k, kv_heads)?;
    let vh = bnsh(&mut rw, v, kv_heads)?;

    let len = lengths(&mut rw, q_in, past.map(|p| p.0), s_known)?;

    if do_rotary {
        let (Some(cos), Some(sin)) = (rw.input(COS), rw.input(SIN)) else {
            return unsupported("do_rotary without cos_cache and sin_cache");
        };
        let half = cache_half(&rw, COS, SIN)?;
        let rotary = 2 * half;
        if rotary > head {
            return unsupported(format!(
                "rotary dimension {rotary} is wider than the head size {head}"
            ));
        }
        let s_range = range(&mut rw, len.s);
        let s_row = rw.unsqueeze(s_range, &[0]);
        let pos = match rw.input(POSITION_IDS) {
            // Positions P_b + s, [B, S].
            None => {
                let p_col = rw.unsqueeze(len.past_b, &[1]);
                rw.op("Add", &[p_col, s_row], &[])
            }
            // Given positions: for a first prompt (S == total_sequence_length) the kernel
            // reads only position_ids[0, 0] and counts on from it for every entry; otherwise
            // position_ids[b, s] (checked on ONNX Runtime 1.32).
            Some(given) => {
                if rw.in_facts(POSITION_IDS).rank().is_some_and(|r| r != 2) {
                    return unsupported("position_ids must be 2-D (batch, sequence)");
                }
                if rw
                    .in_facts(POSITION_IDS)
                    .dtype
                    .is_some_and(|t| t != dtype::INT64)
                {
                    return unsupported("position_ids must be int64");
                }
                let zero = rw.ints("zero", &[0, 0]);
                let one = rw.ints("one", &[1, 1]);
                let axes = rw.ints("axes", &[0, 1]);
                let first = rw.op("Slice", &[given, zero, one, axes], &[]);
                let counted = rw.op("Add", &[first, s_row], &[]);
                let s1 = rw.unsqueeze(len.s, &[0]);
                let zero1 = rw.ints("zero", &[0]);
                let axis1 = rw.ints("axis", &[1]);
                let per_token = rw.op("Slice", &[given, zero1, s1, axis1], &[]);
                let is_first = rw.op("Equal", &[len.s, len.total], &[]);
                rw.op("Where", &[is_first, counted, per_token], &[])
            }
        };
        let c = cache_rows(&mut rw, cos, pos);
        let s = cache_rows(&mut rw, sin, pos);
        let c = rw.unsqueeze(c, &[1]);
        let s = rw.unsqueeze(s, &[1]);
        let rot = Rotation {
            head,
            rotary,
            interleaved,
        };
        qh = rotate_in_float(&mut rw, qh, c, s, dt, rot, 4)?;
        kh = rotate_in_float(&mut rw, kh, c, s, dt, rot, 4)?;
    }

    // Attention in float.
    let to_f = |rw: &mut Rw, x: PValue| {
        if dt == dtype::FLOAT {
            x
        } else {
            rw.cast(x, dtype::FLOAT)
        }
    };
    // The present caches, built in float from the float16 values (exact) and rounded back for
    // the outputs. Built in float16, their Pad/Where (no float16 CPU kernel in ONNX Runtime)
    // get Casts inserted around them, and ONNX Runtime's RemoveDuplicateCastTransformer (which
    // runs even with graph optimizations off) then fuses the rotation's float -> float16 Cast
    // with the inserted float16 -> float one: the attention would read the unrounded rotated
    // keys (float16 outputs 1e-3 to 5e-3 of scale off, found by `tools/fuzz_decomp.py`). The
    // explicit float16 -> float Casts here are kept by ONNX Runtime, as the query's always were.
    let rows = present_rows(&mut rw, &len);
    let kf = to_f(&mut rw, kh);
    let vf = to_f(&mut rw, vh);
    let past_f = past.map(|(pk, pv)| (to_f(&mut rw, pk), to_f(&mut rw, pv)));
    let kf32 = present(&mut rw, kf, past_f.map(|p| p.0), &len, &rows, dtype::FLOAT)?;
    let vf32 = present(&mut rw, vf, past_f.map(|p| p.1), &len, &rows, dtype::FLOAT)?;
    let (present_k, present_v) = if dt == dtype::FLOAT {
        (kf32, vf32)
    } else {
        (rw.cast(kf32, dt), rw.cast(vf32, dt))
    };
    let qf32 = to_f(&mut rw, qh);
    let group = heads / kv_heads;
    // Grouped: Q [B, Nkv, g, S, H] against K/V [B, Nkv, 1, C, H]; plain heads stay 4-D.
    let grouped = group > 1;
    let (qg, kt, vg) = if grouped {
        let qg = rw.reshape(qf32, &[0, kv_heads, group, -1, head])?;
        let kt = rw.transpose(kf32, &[0, 1, 3, 2]);
        let kt = rw.unsqueeze(kt, &[2]);
        let vg = rw.unsqueeze(vf32, &[2]);
        (qg, kt, vg)
    } else {
        let kt = rw.transpose(kf32, &[0, 1, 3, 2]);
        (qf32, kt, vf32)
    };
    let qk = rw.op("MatMul", &[qg, kt], &[]);
    let scale = match rw.attr_f("scale", 0.0) {
        s if s != 0.0 => s as f64,
        _ => 1.0 / (head as f64).sqrt(),
    };
    // The kernel's scale is a float (1/sqrtf(head)).
    let mut scores = rw.scale(qk, scale as f32 as f64, dtype::FLOAT);
    if softcap > 0.0 {
        let cap = rw.scalar("softcap", dtype::FLOAT, softcap as f64);
        let d = rw.op("Div", &[scores, cap], &[]);
        let t = rw.op("Tanh", &[d], &[]);
        scores = rw.op("Mul", &[t, cap], &[]);
    }
    let mask_rank = if grouped { 5 } else { 4 };
    // attention_bias [B|1, N|1, S, total] is added after the softcap (checked on ONNX
    // Runtime 1.32); its columns past `total` (a longer past buffer) are masked anyway.
    if rw.input(ATTENTION_BIAS).is_some() {
        let bias = attention_bias(&mut rw, &len, heads, kv_heads, grouped)?;
        scores = rw.op("Add", &[scores, bias], &[]);
    }
    // Which key rows each query row attends: j < L, and j >= L - W with a window.
    // Where a local window starts for the padding rows of a shorter entry of a batched first
    // prompt (rows past the entry's total length) depends on ONNX Runtime 1.32's code path:
    // its float32 kernel with a plain softmax and no softcap starts the window `W` before the
    // row's unclipped causal length (a row whose window then holds no key comes out as zeros);
    // float16, `softcap` and `smooth_softmax` start it `W` before the clipped length. Measured
    // with `tools/fuzz_decomp.py` (cases kept in tests/data/fuzz_regressions/decomp).
    let unclipped =
        window > 0 && causal && dt == dtype::FLOAT && softcap == 0.0 && !smooth && sink.is_none();
    let valid = attended(&mut rw, &len, &rows, window, causal, unclipped, mask_rank);
    let empty_rows_to_zero = if unclipped {
        let v = rw.cast(valid, dtype::FLOAT);
        Some(rw.reduce("ReduceMax", v, &[-1], true))
    } else {
        None
    };
    let lowest = rw.scalar("masked", dtype::FLOAT, f32::MIN as f64);
    scores = rw.op("Where", &[valid, scores, lowest], &[]);
    let extra = if smooth {
        let zero = rw.constant("smooth_logit", dtype::FLOAT, &vec![1; mask_rank], &[0.0]);
        Some(zero)
    } else if let Some(sk) = sink {
        let sk = to_f(&mut rw, sk);
        let shape: Vec<i64> = if grouped {
            vec![1, kv_heads, group, 1, 1]
        } else {
            vec![1, heads, 1, 1]
        };
        Some(rw.reshape(sk, &shape)?)
    } else {
        None
    };
    let probs = match extra {
        None => rw.softmax_last(scores),
        Some(logit) => {
            // One more column holding the extra logit; softmax; the column dropped.
            let shape = rw.op("Shape", &[scores], &[]);
            let lead = rw.slice(shape, &[0], &[mask_rank as i64 - 1], &[0]);
            let one = rw.ints("one", &[1]);
            let col_shape = rw.op("Concat", &[lead, one], &[("axis", AttrValue::Int(0))]);
            let col = rw.op("Expand", &[logit, col_shape], &[]);
            let wide = rw.op("Concat", &[scores, col], &[("axis", AttrValue::Int(-1))]);
            let p = rw.softmax_last(wide);
            let c = rw.op("Shape", &[scores], &[]);
            let c = rw.slice(c, &[mask_rank as i64 - 1], &[mask_rank as i64], &[0]);
            let zero = rw.ints("zero", &[0]);
            let axis = rw.ints("axis", &[-1]);
            rw.op("Slice", &[p, zero, c, axis], &[])
        }
    };
    let probs = match empty_rows_to_zero {
        Some(any) => rw.op("Mul", &[probs, any], &[]),
        None => probs,
    };
    let o = rw.op("MatMul", &[probs, vg], &[]);
    let o = if grouped {
        rw.reshape(o, &[0, heads, -1, head])?
    } else {
        o
    };
    let o = rw.transpose(o, &[0, 2, 1, 3]);
    let o = rw.reshape(o, &[0, 0, heads * head])?;
    let y = if dt == dtype::FLOAT {
        o
    } else {
        rw.cast(o, dt)
    };
    rw.finish(&[(0, y), (1, present_k), (2, present_v)])
}

/// The run-time lengths from `seqlens_k`, `total_sequence_length` and the shapes.
fn lengths(
    rw: &mut Rw,
    q: PValue,
    past_key: Option<PValue>,
    s_known: Option<i64>,
) -> Result<Lengths, Unsupported> {
    let sk = rw.need(SEQLENS_K, "seqlens_k")?;
    let tot = rw.need(TOTAL_LEN, "total_sequence_length")?;
    for i in [SEQLENS_K, TOTAL_LEN] {
        if rw.in_facts(i).dtype.is_some_and(|t| t != dtype::INT32) {
            return unsupported(format!("input {i} must be int32"));
        }
    }
    let sk = rw.cast(sk, dtype::INT64);
    let one = i64_scalar(rw, "one", 1);
    let zero = i64_scalar(rw, "zero", 0);
    let total_b = rw.op("Add", &[sk, one], &[]);
    let s = dim_scalar(rw, q, 1, s_known);
    let d = rw.op("Sub", &[total_b, s], &[]);
    let past_b = rw.op("Max", &[d, zero], &[]);
    let tot = rw.cast(tot, dtype::INT64);
    let tot = super::rotary::to_scalar(rw, tot);
    let c = match past_key {
        Some(pk) => {
            let known = rw.in_facts(PAST_KEY).dim(2);
            let p = dim_scalar(rw, pk, 2, known);
            rw.op("Max", &[tot, p], &[])
        }
        None => tot,
    };
    let du = rw.op("Sub", &[tot, s], &[]);
    let past_u = rw.op("Max", &[du, zero], &[]);
    Ok(Lengths {
        total_b,
        past_b,
        s,
        c,
        total: tot,
        past_u,
        s_known,
    })
}

/// Row indices of the present cache and the per-batch bounds, shaped `[1, 1, C, 1]` and
/// `[B, 1, 1, 1]`.
struct Rows {
    /// `0..C` as `[C]`.
    j: PValue,
    /// `0..C` as `[1, 1, C, 1]`.
    j4: PValue,
    /// `P_b` as `[B, 1, 1, 1]`.
    start: PValue,
    /// `P_b + S` as `[B, 1, 1, 1]`.
    end: PValue,
}

fn present_rows(rw: &mut Rw, len: &Lengths) -> Rows {
    let j = range(rw, len.c);
    let j4 = rw.unsqueeze(j, &[0, 1, 3]);
    let start = rw.unsqueeze(len.past_b, &[1, 2, 3]);
    let end = rw.op("Add", &[start, len.s], &[]);
    Rows { j, j4, start, end }
}

/// A present cache `[B, Nkv, C, H]`: the past's rows below `P_b`, the new rows at
/// `P_b .. P_b + S`, zeros after.
fn present(
    rw: &mut Rw,
    new: PValue,
    past: Option<PValue>,
    len: &Lengths,
    rows: &Rows,
    dt: i32,
) -> Result<PValue, Unsupported> {
    // The new rows placed at P_b: for one new token a broadcast (each entry has its own P_b);
    // for a multi-token step P_b is the same for every entry (P_u): the past's first P_u rows,
    // then the new rows, padded to C.
    let shifted = |rw: &mut Rw| -> PValue {
        let joined = match past {
            Some(p) => {
                let zero = rw.ints("zero", &[0]);
                let end = rw.unsqueeze(len.past_u, &[0]);
                let axis = rw.ints("axis", &[2]);
                let head = rw.op("Slice", &[p, zero, end, axis], &[]);
                rw.op("Concat", &[head, new], &[("axis", AttrValue::Int(2))])
            }
            None => new,
        };
        pad_rows_to(rw, joined, len.c)
    };
    let placed = match len.s_known {
        Some(1) => new,
        Some(_) => shifted(rw),
        None => {
            let x = shifted(rw);
            let one = i64_scalar(rw, "one", 1);
            let single = rw.op("Equal", &[len.s, one], &[]);
            let first = rw.slice(new, &[0], &[1], &[2]);
            rw.op("Where", &[single, first, x], &[])
        }
    };
    let zero = rw.scalar("zero", dt, 0.0);
    let from = rw.op("Less", &[rows.j4, rows.start], &[]);
    let before_end = rw.op("Less", &[rows.j4, rows.end], &[]);
    let at_or_after = rw.op("Not", &[from], &[]);
    let is_new = rw.op("And", &[at_or_after, before_end], &[]);
    let fresh = rw.op("Where", &[is_new, placed, zero], &[]);
    Ok(match past {
        Some(p) => {
            let old = pad_rows_to(rw, p, len.c);
            rw.op("Where", &[from, old, fresh], &[])
        }
        None => fresh,
    })
}

/// Pad (or crop) axis 2 of a 4-D `x` with zero rows to `c` rows.
fn pad_rows_to(rw: &mut Rw, x: PValue, c: PValue) -> PValue {
    pad_axis_to(rw, x, 4, 2, c)
}

/// Pad (or crop) axis `axis` of a rank-`rank` `x` with zeros at the end to `c` entries.
fn pad_axis_to(rw: &mut Rw, x: PValue, rank: i64, axis: i64, c: PValue) -> PValue {
    let shape = rw.op("Shape", &[x], &[]);
    let have = rw.slice(shape, &[axis], &[axis + 1], &[0]);
    let c1 = rw.unsqueeze(c, &[0]);
    let more = rw.op("Sub", &[c1, have], &[]);
    let zeros = |n: i64| vec![0i64; n as usize];
    let before = rw.ints("pads_begin", &zeros(rank + axis));
    let mut parts = vec![before, more];
    if axis + 1 < rank {
        parts.push(rw.ints("pads_end", &zeros(rank - axis - 1)));
    }
    let pads = rw.op("Concat", &parts, &[("axis", AttrValue::Int(0))]);
    rw.op("Pad", &[x, pads], &[])
}

/// attention_bias `[B|1, N|1, S, total]` in float, padded to `C` columns and shaped like the
/// scores (`[B|1, Nkv, g, S, C]` or `[B|1, 1, 1, S, C]` when grouped).
fn attention_bias(
    rw: &mut Rw,
    len: &Lengths,
    heads: i64,
    kv_heads: i64,
    grouped: bool,
) -> Result<PValue, Unsupported> {
    let bias = rw.need(ATTENTION_BIAS, "attention_bias")?;
    let f = rw.in_facts(ATTENTION_BIAS);
    match f.rank() {
        Some(4) => {}
        Some(r) => return unsupported(format!("attention_bias of rank {r}, not 4")),
        None => return unknown("the rank of attention_bias is unknown"),
    }
    let bt = rw.float_dtype(ATTENTION_BIAS)?;
    let bias = if bt == dtype::FLOAT {
        bias
    } else {
        rw.cast(bias, dtype::FLOAT)
    };
    let bias = pad_axis_to(rw, bias, 4, 3, len.c);
    if !grouped {
        return Ok(bias);
    }
    match f.dim(1) {
        Some(1) => Ok(rw.unsqueeze(bias, &[2])),
        Some(n) if n == heads => {
            let shape = rw.op("Shape", &[bias], &[]);
            let b = rw.slice(shape, &[0], &[1], &[0]);
            let sc = rw.slice(shape, &[2], &[4], &[0]);
            let mid = rw.ints("heads", &[kv_heads, heads / kv_heads]);
            let target = rw.op("Concat", &[b, mid, sc], &[("axis", AttrValue::Int(0))]);
            Ok(rw.op("Reshape", &[bias, target], &[]))
        }
        Some(n) => unsupported(format!(
            "attention_bias with {n} heads (num_heads is {heads})"
        )),
        None => unknown("the head dimension of attention_bias is unknown"),
    }
}

/// The attended keys as a bool mask broadcastable to the scores `[B, .., S, C]` (rank
/// `rank`): `j < L` and, with a window `W > 0`, `j >= L - W` (`j >= U - W` when `unclipped`),
/// where `U = P_b + s + 1` and `L = min(U, T_b)`, or `L = T_b` without the causal mask.
fn attended(
    rw: &mut Rw,
    len: &Lengths,
    rows: &Rows,
    window: i64,
    causal: bool,
    unclipped: bool,
    rank: usize,
) -> PValue {
    let t_col = rw.unsqueeze(len.total_b, &[1]);
    // [B, 1, (1,) S, 1]
    let axes: Vec<i64> = if rank == 5 { vec![1, 2, 4] } else { vec![1, 3] };
    // [B, S], or [B, 1] for every row alike; `upto` is the causal length before the clip
    // to the entry's total.
    let (limit, upto) = if causal {
        let s_range = range(rw, len.s);
        let s_row = rw.unsqueeze(s_range, &[0]);
        let p_col = rw.unsqueeze(len.past_b, &[1]);
        let one = i64_scalar(rw, "one", 1);
        let abs = rw.op("Add", &[p_col, s_row], &[]);
        let upto = rw.op("Add", &[abs, one], &[]);
        (rw.op("Min", &[upto, t_col], &[]), Some(upto))
    } else {
        (t_col, None)
    };
    let l = rw.unsqueeze(limit, &axes);
    let mut valid = rw.op("Less", &[rows.j, l], &[]);
    if window > 0 {
        let w = i64_scalar(rw, "window", window);
        let start = match upto {
            Some(u) if unclipped => rw.unsqueeze(u, &axes),
            _ => l,
        };
        let lo = rw.op("Sub", &[start, w], &[]);
        let below = rw.op("Less", &[rows.j, lo], &[]);
        let inside = rw.op("Not", &[below], &[]);
        valid = rw.op("And", &[valid, inside], &[]);
    }
    valid
}
