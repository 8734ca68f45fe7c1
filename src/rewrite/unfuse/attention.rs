//! Attention and MultiHeadAttention (ONNX Runtime contrib operators), in their common
//! configurations: 3-D query/key/value (or packed input projection), optional projection bias,
//! optional mask (`mask_index` / `key_padding_mask`: 1-D key lengths `[B]`, 1-D end/start
//! `[2B]`, 2-D `[B, T]` and 3-D `[B, S, T]` 0/1 masks), optional attention bias, optional
//! causal mask with a static sequence length. Past/present state, rotary embedding, packed
//! layouts and the 4-D mask (no CPU kernel) are refused.
//!
//! Computed as ONNX Runtime 1.32's CPU kernel computes it (`contrib_ops/cpu/bert/`, measured
//! against it on every mask form by `tools/fuzz_decomp.py`, fully masked rows included): per
//! head, the scores are `alpha * Q K^T`, plus `attention_bias`, plus `mask_filter_value`
//! (default -10000) where the padding mask masks, rounded in that order, with future keys at
//! -inf when unidirectional; `P = Softmax(scores)` (MLAS), `O = P V`, heads concatenated.
//! `alpha` is `scale` or `1/sqrt(head_size)` in float32. Float16 and bfloat16 are computed in
//! float32 from the converted inputs and converted back, as the CPU kernel does.

use crate::ir::{Graph, NodeId};
use crate::rewrite::{PValue, Patch};
use crate::tensor::dtype;

use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// What one attention needs once Q, K, V are 3-D `[B, S, D]` tensors.
pub(super) struct Heads {
    pub(super) q: PValue,
    pub(super) k: PValue,
    pub(super) v: PValue,
    pub(super) num_heads: i64,
    /// Hidden size of Q and K (for the default scale).
    pub(super) qk_hidden: Option<i64>,
}

pub(super) fn check_heads(rw: &Rw) -> Result<i64, Unsupported> {
    match rw.attr("num_heads").and_then(|a| a.i()) {
        Some(n) if n > 0 => Ok(n),
        _ => unsupported("num_heads is required"),
    }
}

/// The element type the kernel computes in: ONNX Runtime's CPU attention computes float16 (and
/// bfloat16) in float32 from the converted inputs and converts the result back.
fn work_type(dt: i32) -> i32 {
    if dt == dtype::FLOAT16 || dt == dtype::BFLOAT16 {
        dtype::FLOAT
    } else {
        dt
    }
}

/// Input `i` in the working type `work` (a Cast when the input is float16/bfloat16).
fn in_work(rw: &mut Rw, i: usize, what: &str, work: i32) -> Result<PValue, Unsupported> {
    let v = rw.need(i, what)?;
    Ok(match rw.in_facts(i).dtype {
        Some(t) if t != work => rw.cast(v, work),
        _ => v,
    })
}

/// A 1-D int32 constant `0..n`.
fn arange_i32(rw: &mut Rw, hint: &str, n: i64) -> PValue {
    let t = crate::proto::TensorProto {
        dims: vec![n],
        data_type: Some(dtype::INT32),
        raw_data: Some(
            (0..n as i32)
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        ),
        ..Default::default()
    };
    rw.p.initializer(hint, t)
}

/// Which key positions each query may attend to, from a `mask_index` / `key_padding_mask`
/// input `i` (int32), as ONNX Runtime's CPU kernel reads it (`PrepareMask`): a boolean tensor
/// that broadcasts over `[B, N, S, T]`.
/// * 1-D `[B]`: key lengths, position `j` kept when `j < len[b]`;
/// * 1-D `[2B]`: end then start positions, kept when `start[b] <= j < end[b]`;
/// * 2-D `[B, T]` and 3-D `[B, S, T]`: kept where the mask is > 0.
///
/// The 4-D Megatron mask has no CPU kernel; other forms are refused.
pub(super) fn key_mask(rw: &mut Rw, i: usize, t: Option<i64>) -> Result<PValue, Unsupported> {
    let m = rw.need(i, "mask")?;
    if rw.in_facts(i).dtype != Some(dtype::INT32) {
        return unsupported("the mask is not int32");
    }
    let rank = rw.rank(i, "mask layout")?;
    match rank {
        1 => {
            let Some(t) = t.filter(|&t| t > 0) else {
                return unsupported("a 1-D mask needs a static key length");
            };
            let n = rw.in_facts(i).dim(0);
            let b = rw.in_facts(0).dim(0);
            let j = arange_i32(rw, "key_positions", t);
            let (ends, starts) = match (n, b) {
                (Some(n), Some(b)) if n == 2 * b && b > 0 => {
                    let e = rw.slice(m, &[0], &[b], &[0]);
                    let s = rw.slice(m, &[b], &[2 * b], &[0]);
                    (e, Some(s))
                }
                (Some(n), Some(b)) if n == b => (m, None),
                (Some(n), Some(b)) => {
                    return unsupported(format!(
                        "a 1-D mask of {n} entries for batch {b} (only [B] and [2B])"
                    ))
                }
                _ => return unsupported("a 1-D mask needs static batch and mask sizes"),
            };
            let ends = rw.unsqueeze(ends, &[1]);
            let mut keep = rw.op("Less", &[j, ends], &[]);
            if let Some(starts) = starts {
                let starts = rw.unsqueeze(starts, &[1]);
                let before = rw.op("Less", &[j, starts], &[]);
                let after = rw.op("Not", &[before], &[]);
                keep = rw.op("And", &[keep, after], &[]);
            }
            Ok(rw.unsqueeze(keep, &[1, 2]))
        }
        2 | 3 => {
            let zero = int32_zero(rw);
            let keep = rw.op("Greater", &[m, zero], &[]);
            Ok(rw.unsqueeze(keep, if rank == 2 { &[1, 2] } else { &[1] }))
        }
        4 => unsupported("a 4-D mask (ONNX Runtime's CPU kernel has none)"),
        r => unsupported(format!("mask of rank {r}")),
    }
}

/// Whether mask input `i` is the 2-D "dummy" mask `[B, 1]` or `[1, 1]` that ONNX Runtime's
/// Attention and QAttention kernels ignore (`MASK_2D_DUMMY`: measured, a mask of zeros of that
/// shape leaves the output as without a mask). Only a static second dimension of 1 is told
/// apart; a dynamic one is read as `[B, T]`.
pub(super) fn dummy_mask(rw: &Rw, i: usize) -> bool {
    let f = rw.in_facts(i);
    f.rank() == Some(2) && f.dim(1) == Some(1)
}

fn int32_zero(rw: &mut Rw) -> PValue {
    let t = crate::proto::TensorProto {
        dims: vec![],
        data_type: Some(dtype::INT32),
        raw_data: Some(0i32.to_le_bytes().to_vec().into()),
        ..Default::default()
    };
    rw.p.initializer("zero_i32", t)
}

/// The causal pattern `[S, T]` (key `j` kept for query `i` when `j <= i`) for a static length.
pub(super) fn causal_keep(rw: &mut Rw, s: Option<i64>) -> Result<PValue, Unsupported> {
    let Some(s) = s.filter(|&s| s > 0 && s <= 4096) else {
        return unsupported("unidirectional attention needs a static sequence length");
    };
    let j = arange_i32(rw, "key_positions", s);
    let i = rw.unsqueeze(j, &[1]);
    let after = rw.op("Greater", &[j, i], &[]);
    Ok(rw.op("Not", &[after], &[]))
}

/// What is added to, or masks, the scaled scores.
pub(super) struct Terms {
    /// The attention bias (working type).
    pub(super) bias: Option<PValue>,
    /// Keys kept by the padding mask (boolean, broadcast over `[B, N, S, T]`).
    pub(super) keep: Option<PValue>,
    /// Keys kept by the causal mask (boolean `[S, T]`).
    pub(super) causal: Option<PValue>,
    pub(super) filter: f32,
}

/// Multi-head scaled dot-product attention on 3-D Q, K, V in the working type; returns
/// `[B, S, N*Hv]`. As ONNX Runtime 1.32's CPU kernel computes it (measured against it on every
/// mask form, fully masked rows included): `alpha * QK^T`, plus the attention bias, plus
/// `mask_filter_value` where the padding mask masks (three roundings, in that order), future
/// keys set to -inf when causal (a row masked by padding alone still attends to its past and
/// present keys), MLAS softmax, then `P V`.
pub(super) fn sdpa(
    rw: &mut Rw,
    h: Heads,
    scale: Option<f32>,
    terms: Terms,
    work: i32,
) -> Result<PValue, Unsupported> {
    let n = h.num_heads;
    let alpha: f32 = match (scale, h.qk_hidden) {
        (Some(s), _) => s,
        (None, Some(d)) if d > 0 && d % n == 0 => 1.0f32 / ((d / n) as f32).sqrt(),
        (None, Some(d)) => {
            return unsupported(format!("hidden size {d} is not a multiple of {n} heads"))
        }
        (None, None) => return unsupported("the head size is unknown (needed for the scale)"),
    };
    if (terms.keep.is_some() || terms.causal.is_some()) && rw.opset < 9 {
        return unsupported("an attention mask needs Where (opset >= 9)");
    }
    let split = |rw: &mut Rw, x: PValue, perm: &[i64]| -> Result<PValue, Unsupported> {
        let r = rw.reshape(x, &[0, 0, n, -1])?;
        Ok(rw.transpose(r, perm))
    };
    let qh = split(rw, h.q, &[0, 2, 1, 3])?;
    let kt = split(rw, h.k, &[0, 2, 3, 1])?;
    let vh = split(rw, h.v, &[0, 2, 1, 3])?;
    let qk = rw.op("MatMul", &[qh, kt], &[]);
    let c = rw.scalar("scale", work, alpha as f64);
    let mut s = rw.op("Mul", &[qk, c], &[]);
    if let Some(b) = terms.bias {
        s = rw.op("Add", &[s, b], &[]);
    }
    if let Some(k) = terms.keep {
        let zero = rw.scalar("zero", work, 0.0);
        let fill = rw.scalar("mask_filter_value", work, terms.filter as f64);
        let m = rw.op("Where", &[k, zero, fill], &[]);
        s = rw.op("Add", &[s, m], &[]);
    }
    if let Some(c) = terms.causal {
        let ninf = rw.scalar("minus_infinity", work, f64::NEG_INFINITY);
        s = rw.op("Where", &[c, s, ninf], &[]);
    }
    let p = rw.softmax_last(s);
    let o = rw.op("MatMul", &[p, vh], &[]);
    let ot = rw.transpose(o, &[0, 2, 1, 3]);
    rw.reshape(ot, &[0, 0, -1])
}

/// Split a constant `[.., Dq + Dk + Dv]` tensor along its last axis into three constants.
fn split_const(rw: &mut Rw, i: usize, sizes: [i64; 3], names: [&str; 3]) -> Option<[PValue; 3]> {
    let (dims, vals) = rw.const_f32(i)?;
    let last = *dims.last()?;
    if last != sizes.iter().sum::<i64>() {
        return None;
    }
    let rows = vals.len() / last as usize;
    let mut out = Vec::with_capacity(3);
    let mut start = 0usize;
    for (k, &sz) in sizes.iter().enumerate() {
        let sz = sz as usize;
        let mut part = Vec::with_capacity(rows * sz);
        for r in 0..rows {
            let base = r * last as usize + start;
            part.extend_from_slice(&vals[base..base + sz]);
        }
        let mut d = dims.clone();
        if let Some(l) = d.last_mut() {
            *l = sz as i64;
        }
        out.push(rw.f32s(names[k], &d, &part));
        start += sz;
    }
    Some([out[0], out[1], out[2]])
}

/// Split a value along its last axis with Slice.
pub(super) fn split_slices(rw: &mut Rw, x: PValue, sizes: [i64; 3]) -> [PValue; 3] {
    let a = rw.slice(x, &[0], &[sizes[0]], &[-1]);
    let b = rw.slice(x, &[sizes[0]], &[sizes[0] + sizes[1]], &[-1]);
    let c = rw.slice(
        x,
        &[sizes[0] + sizes[1]],
        &[sizes[0] + sizes[1] + sizes[2]],
        &[-1],
    );
    [a, b, c]
}

/// com.microsoft Attention: `Q|K|V = input x weights + bias`, then multi-head attention.
pub fn attention(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    // With past state (`past` -> `present`): attention_past.rs.
    if super::attention_past::attention_has_past(g, n) {
        return super::attention_past::attention_with_past(ctx, g, n);
    }
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[
        "num_heads",
        "qkv_hidden_sizes",
        "scale",
        "unidirectional",
        "mask_filter_value",
        "do_rotary",
        "past_present_share_buffer",
        "rotary_embedding_dim",
    ])?;
    let heads = check_heads(&rw)?;
    if rw.attr_i("do_rotary", 0) != 0 {
        return unsupported("rotary embedding (do_rotary=1)");
    }
    if rw.attr_i("past_present_share_buffer", 0) != 0 || rw.input(4).is_some() {
        return unsupported("past state");
    }
    if rw.input(6).is_some() {
        return unsupported("past_sequence_length");
    }
    rw.need(0, "input")?;
    rw.need(1, "weights")?;
    let dt = rw.float_dtype(0)?;
    let work = work_type(dt);
    if rw.rank(0, "input layout")? != 3 {
        return unsupported("input must be 3-D (batch, sequence, hidden)");
    }
    let wf = rw.in_facts(1);
    let total = wf.dim(1);
    let sizes = match rw.attr_ints("qkv_hidden_sizes") {
        Some(s) if s.len() == 3 && s.iter().all(|&d| d > 0) => [s[0], s[1], s[2]],
        Some(s) => return unsupported(format!("qkv_hidden_sizes {s:?}")),
        None => match total {
            Some(t) if t % 3 == 0 => [t / 3; 3],
            _ => return unsupported("the weights' shape is unknown"),
        },
    };
    if sizes[0] != sizes[1] {
        return unsupported("Q and K hidden sizes differ");
    }
    let x = in_work(&mut rw, 0, "input", work)?;
    // Projections: split the packed weights (and bias) per Q, K, V.
    let consts = work == dt;
    let split_w = if consts {
        split_const(&mut rw, 1, sizes, ["w_q", "w_k", "w_v"])
    } else {
        None
    };
    let [wq, wk, wv] = match split_w {
        Some(w) => w,
        None => {
            let w = in_work(&mut rw, 1, "weights", work)?;
            split_slices(&mut rw, w, sizes)
        }
    };
    let bias = match rw.input(2) {
        None => None,
        Some(_) => {
            let parts = if consts {
                split_const(&mut rw, 2, sizes, ["b_q", "b_k", "b_v"])
            } else {
                None
            };
            Some(match parts {
                Some(p) => p,
                None => {
                    let b = in_work(&mut rw, 2, "bias", work)?;
                    split_slices(&mut rw, b, sizes)
                }
            })
        }
    };
    // ONNX Runtime: the bias copied into the output, then the GEMM with beta 1, which rounds
    // `x W + b` once, as MatMul then Add do.
    let proj = |rw: &mut Rw, w: PValue, b: Option<PValue>| {
        let m = rw.op("MatMul", &[x, w], &[]);
        match b {
            Some(b) => rw.op("Add", &[m, b], &[]),
            None => m,
        }
    };
    let q = proj(&mut rw, wq, bias.map(|b| b[0]));
    let k = proj(&mut rw, wk, bias.map(|b| b[1]));
    let v = proj(&mut rw, wv, bias.map(|b| b[2]));
    let filter = rw.attr_f("mask_filter_value", -10000.0);
    let s = rw.in_facts(0).dim(1);
    let mut keep = None;
    if rw.input(3).is_some() && !dummy_mask(&rw, 3) {
        keep = Some(key_mask(&mut rw, 3, s)?);
    }
    let mut causal = None;
    if rw.attr_i("unidirectional", 0) != 0 && s != Some(1) {
        causal = Some(causal_keep(&mut rw, s)?);
    }
    let ab = match rw.input(5) {
        Some(_) => Some(in_work(&mut rw, 5, "attention_bias", work)?),
        None => None,
    };
    let terms = Terms {
        bias: ab,
        keep,
        causal,
        filter,
    };
    let scale = rw.attr("scale").and_then(|a| a.f()).filter(|&s| s != 0.0);
    let h = Heads {
        q,
        k,
        v,
        num_heads: heads,
        qk_hidden: Some(sizes[0]),
    };
    let mut y = sdpa(&mut rw, h, scale, terms, work)?;
    if work != dt {
        y = rw.cast(y, dt);
    }
    rw.finish(&[(0, y)])
}

/// com.microsoft MultiHeadAttention with separate 3-D query, key and value.
pub fn multi_head_attention(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    // With past_key/past_value (-> present_key/present_value): attention_past.rs.
    if super::attention_past::mha_has_past(g, n) {
        return super::attention_past::multi_head_attention_with_past(ctx, g, n);
    }
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["num_heads", "scale", "mask_filter_value", "unidirectional"])?;
    let heads = check_heads(&rw)?;
    for (i, what) in [
        (6, "past_key"),
        (7, "past_value"),
        (8, "past_sequence_length"),
    ] {
        if rw.input(i).is_some() {
            return unsupported(format!("{what} (past state)"));
        }
    }
    if rw.node.inputs.iter().skip(9).any(|v| v.is_some()) {
        return unsupported("cache inputs");
    }
    rw.need(0, "query")?;
    if rw.input(1).is_none() {
        return unsupported("packed QKV (no key input)");
    }
    if rw.input(2).is_none() {
        return unsupported("packed KV (no value input)");
    }
    let dt = rw.float_dtype(0)?;
    let work = work_type(dt);
    for (i, what) in [(0, "query"), (1, "key"), (2, "value")] {
        let r = rw.rank(i, "MultiHeadAttention layout")?;
        if r != 3 {
            return unsupported(format!("{what} of rank {r} (only 3-D BSD layout)"));
        }
    }
    let dq = rw.in_facts(0).dim(2);
    let mut q = in_work(&mut rw, 0, "query", work)?;
    let mut k = in_work(&mut rw, 1, "key", work)?;
    let mut v = in_work(&mut rw, 2, "value", work)?;
    if rw.input(3).is_some() {
        let (dq, dv) = match (dq, rw.in_facts(2).dim(2)) {
            (Some(a), Some(b)) => (a, b),
            _ => return unsupported("a projection bias needs static hidden sizes"),
        };
        let sizes = [dq, dq, dv];
        let parts = if work == dt {
            split_const(&mut rw, 3, sizes, ["b_q", "b_k", "b_v"])
        } else {
            None
        };
        let parts = match parts {
            Some(p) => p,
            None => {
                let b = in_work(&mut rw, 3, "bias", work)?;
                split_slices(&mut rw, b, sizes)
            }
        };
        q = rw.op("Add", &[q, parts[0]], &[]);
        k = rw.op("Add", &[k, parts[1]], &[]);
        v = rw.op("Add", &[v, parts[2]], &[]);
    }
    let filter = rw.attr_f("mask_filter_value", -10000.0);
    let (s, l) = (rw.in_facts(0).dim(1), rw.in_facts(1).dim(1));
    let mut keep = None;
    if rw.input(4).is_some() {
        keep = Some(key_mask(&mut rw, 4, l)?);
    }
    let mut causal = None;
    if rw.attr_i("unidirectional", 0) != 0 && s != Some(1) {
        if s != l {
            return unsupported("unidirectional with different query and key lengths");
        }
        causal = Some(causal_keep(&mut rw, s)?);
    }
    let ab = match rw.input(5) {
        Some(_) => Some(in_work(&mut rw, 5, "attention_bias", work)?),
        None => None,
    };
    let terms = Terms {
        bias: ab,
        keep,
        causal,
        filter,
    };
    let scale = rw.attr("scale").and_then(|a| a.f()).filter(|&s| s != 0.0);
    let h = Heads {
        q,
        k,
        v,
        num_heads: heads,
        qk_hidden: dq,
    };
    let mut y = sdpa(&mut rw, h, scale, terms, work)?;
    if work != dt {
        y = rw.cast(y, dt);
    }
    rw.finish(&[(0, y)])
}
