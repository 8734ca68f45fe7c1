//! Attention and MultiHeadAttention (ONNX Runtime contrib operators), in their common
//! configurations: 3-D query/key/value (or packed input projection), optional projection bias,
//! optional 2-D/3-D key padding mask, optional attention bias, optional causal mask with a
//! static sequence length. Past/present state, rotary embedding and packed layouts are refused.
//!
//! Formula (ContribOperators.md, Attention / MultiHeadAttention; ONNX Runtime
//! `contrib_ops/cpu/bert/attention_cpu_base.h`, `ComputeAttentionProbs`/`ComputeVxAttentionScore`):
//! per head, `P = Softmax(scale * Q K^T + attention_bias + mask)`, `O = P V`, heads concatenated;
//! `scale` defaults to `1/sqrt(head_size)`; a masked position (mask value 0, or a future
//! position when unidirectional) gets `mask_filter_value` (default -10000) added to its score.

use crate::ir::{Graph, NodeId};
use crate::rewrite::{PValue, Patch};
use crate::tensor::dtype;

use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// What one attention needs once Q, K, V are 3-D `[B, S, D]` tensors.
struct Heads {
    q: PValue,
    k: PValue,
    v: PValue,
    num_heads: i64,
    /// Hidden size of Q and K (for the default scale).
    qk_hidden: Option<i64>,
}

fn check_heads(rw: &Rw) -> Result<i64, Unsupported> {
    match rw.attr("num_heads").and_then(|a| a.i()) {
        Some(n) if n > 0 => Ok(n),
        _ => unsupported("num_heads is required"),
    }
}

/// Additive mask from a raw 0/1 mask `[B, T]` or `[B, S, T]`: `mask > 0 ? 0 : filter`,
/// shaped to broadcast over `[B, N, S, T]`.
fn raw_mask(rw: &mut Rw, i: usize, filter: f32, dt: i32) -> Result<PValue, Unsupported> {
    if rw.opset < 9 {
        return unsupported("an attention mask needs Where (opset >= 9)");
    }
    let m = rw.need(i, "mask")?;
    let rank = rw.rank(i, "mask layout")?;
    let axes: &[i64] = match rank {
        2 => &[1, 2],
        3 => &[1],
        r => return unsupported(format!("mask of rank {r} (only 2-D and 3-D raw masks)")),
    };
    let mf = rw.cast(m, dt);
    let zero = rw.scalar("zero", dt, 0.0);
    let keep = rw.op("Greater", &[mf, zero], &[]);
    let fill = rw.scalar("mask_filter_value", dt, filter as f64);
    let add = rw.op("Where", &[keep, zero, fill], &[]);
    Ok(rw.unsqueeze(add, axes))
}

/// Additive causal mask `[S, S]` for a static sequence length.
fn causal_mask(rw: &mut Rw, s: Option<i64>, filter: f32, dt: i32) -> Result<PValue, Unsupported> {
    let Some(s) = s.filter(|&s| s > 0 && s <= 4096) else {
        return unsupported("unidirectional attention needs a static sequence length");
    };
    let mut vals = Vec::with_capacity((s * s) as usize);
    for i in 0..s {
        for j in 0..s {
            vals.push(if j > i { filter as f64 } else { 0.0 });
        }
    }
    Ok(rw.constant("causal_mask", dt, &[s, s], &vals))
}

/// Multi-head scaled dot-product attention on 3-D Q, K, V; returns `[B, S, N*Hv]`.
fn sdpa(
    rw: &mut Rw,
    h: Heads,
    scale: Option<f32>,
    biases: &[PValue],
    dt: i32,
) -> Result<PValue, Unsupported> {
    let n = h.num_heads;
    let scale = match (scale, h.qk_hidden) {
        (Some(s), _) => s as f64,
        (None, Some(d)) if d > 0 && d % n == 0 => 1.0 / ((d / n) as f64).sqrt(),
        (None, Some(d)) => {
            return unsupported(format!("hidden size {d} is not a multiple of {n} heads"))
        }
        (None, None) => return unsupported("the head size is unknown (needed for the scale)"),
    };
    let split = |rw: &mut Rw, x: PValue, perm: &[i64]| -> Result<PValue, Unsupported> {
        let r = rw.reshape(x, &[0, 0, n, -1])?;
        Ok(rw.transpose(r, perm))
    };
    let qh = split(rw, h.q, &[0, 2, 1, 3])?;
    let kt = split(rw, h.k, &[0, 2, 3, 1])?;
    let vh = split(rw, h.v, &[0, 2, 1, 3])?;
    let qk = rw.op("MatMul", &[qh, kt], &[]);
    let mut s = rw.scale(qk, scale, dt);
    for b in biases {
        s = rw.op("Add", &[s, *b], &[]);
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
fn split_slices(rw: &mut Rw, x: PValue, sizes: [i64; 3]) -> [PValue; 3] {
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
    let x = rw.need(0, "input")?;
    rw.need(1, "weights")?;
    let dt = rw.float_dtype(0)?;
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
    // Projections: split the packed weights (and bias) per Q, K, V.
    let [wq, wk, wv] = match split_const(&mut rw, 1, sizes, ["w_q", "w_k", "w_v"]) {
        Some(w) => w,
        None => {
            let w = rw.need(1, "weights")?;
            split_slices(&mut rw, w, sizes)
        }
    };
    let bias = rw.input(2).map(
        |b| match split_const(&mut rw, 2, sizes, ["b_q", "b_k", "b_v"]) {
            Some(parts) => parts,
            None => split_slices(&mut rw, b, sizes),
        },
    );
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
    let mut biases = Vec::new();
    if rw.input(5).is_some() {
        biases.push(rw.need(5, "attention_bias")?);
    }
    if rw.input(3).is_some() {
        biases.push(raw_mask(&mut rw, 3, filter, dt)?);
    }
    if rw.attr_i("unidirectional", 0) != 0 {
        let s = rw.in_facts(0).dim(1);
        biases.push(causal_mask(&mut rw, s, filter, dt)?);
    }
    let scale = rw.attr("scale").and_then(|a| a.f()).filter(|&s| s != 0.0);
    let h = Heads {
        q,
        k,
        v,
        num_heads: heads,
        qk_hidden: Some(sizes[0]),
    };
    let y = sdpa(&mut rw, h, scale, &biases, dt)?;
    rw.finish(&[(0, y)])
}

/// com.microsoft MultiHeadAttention with separate 3-D query, key and value.
pub fn multi_head_attention(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
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
    let q = rw.need(0, "query")?;
    let k = match rw.input(1) {
        Some(k) => k,
        None => return unsupported("packed QKV (no key input)"),
    };
    let v = match rw.input(2) {
        Some(v) => v,
        None => return unsupported("packed KV (no value input)"),
    };
    let dt = rw.float_dtype(0)?;
    for (i, what) in [(0, "query"), (1, "key"), (2, "value")] {
        let r = rw.rank(i, "MultiHeadAttention layout")?;
        if r != 3 {
            return unsupported(format!("{what} of rank {r} (only 3-D BSD layout)"));
        }
    }
    let dq = rw.in_facts(0).dim(2);
    let (mut q, mut k, mut v) = (q, k, v);
    if rw.input(3).is_some() {
        let (dq, dv) = match (dq, rw.in_facts(2).dim(2)) {
            (Some(a), Some(b)) => (a, b),
            _ => return unsupported("a projection bias needs static hidden sizes"),
        };
        let sizes = [dq, dq, dv];
        let parts = match split_const(&mut rw, 3, sizes, ["b_q", "b_k", "b_v"]) {
            Some(p) => p,
            None => {
                let b = rw.need(3, "bias")?;
                split_slices(&mut rw, b, sizes)
            }
        };
        q = rw.op("Add", &[q, parts[0]], &[]);
        k = rw.op("Add", &[k, parts[1]], &[]);
        v = rw.op("Add", &[v, parts[2]], &[]);
    }
    let filter = rw.attr_f("mask_filter_value", -10000.0);
    let mut biases = Vec::new();
    if rw.input(5).is_some() {
        biases.push(rw.need(5, "attention_bias")?);
    }
    if rw.input(4).is_some() {
        if rw.in_facts(4).dtype != Some(dtype::INT32) {
            return unsupported("key_padding_mask must be int32");
        }
        biases.push(raw_mask(&mut rw, 4, filter, dt)?);
    }
    if rw.attr_i("unidirectional", 0) != 0 {
        let (s, l) = (rw.in_facts(0).dim(1), rw.in_facts(1).dim(1));
        if s != l {
            return unsupported("unidirectional with different query and key lengths");
        }
        biases.push(causal_mask(&mut rw, s, filter, dt)?);
    }
    let scale = rw.attr("scale").and_then(|a| a.f()).filter(|&s| s != 0.0);
    let h = Heads {
        q,
        k,
        v,
        num_heads: heads,
        qk_hidden: dq,
    };
    let y = sdpa(&mut rw, h, scale, &biases, dt)?;
    rw.finish(&[(0, y)])
}
