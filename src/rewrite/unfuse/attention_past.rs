//! Attention and MultiHeadAttention (ONNX Runtime contrib operators) with past state: a
//! decoder step that appends its keys and values to a cache and attends over the whole of it.
//!
//! * `Attention`: input `past` `[2, B, N, P, H]` (keys then values), output `present`
//!   `[2, B, N, P + S, H]`; the GPT-2 layout ONNX Runtime's converter writes.
//! * `MultiHeadAttention`: `past_key` / `past_value` `[B, N, P, H]` (BNSH), outputs
//!   `present_key` / `present_value` `[B, N, P + L, H]`, with 3-D query/key/value.
//!
//! Semantics, as ONNX Runtime 1.32's CPU kernel computes them (`contrib_ops/cpu/bert/`,
//! the score order `attention.rs` measured against it): the new keys/values (projection bias
//! added) are appended to the past along the sequence axis, giving `T = P + S` rows; per
//! head, the scores are `alpha * Q K_all^T`, plus `attention_bias`, plus `mask_filter_value`
//! (default -10000) where the padding mask masks, rounded in that order, and with
//! `unidirectional=1` query row `i` sees keys `j <= P + i` (later keys at -inf); then
//! `Softmax`, `O = P V_all`; `alpha` is `scale` or `1/sqrt(head_size)` in float32. Masks: none,
//! 1-D key lengths `[B]` and end/start `[2B]` (static batch), 2-D `[B, T]`, 3-D `[B, S, T]`.
//! Refused with a reason: 4-D masks, `past_sequence_length` / a shared past-present buffer,
//! rotary embedding, cache indirection (beam search's shared buffer), 4-D (BNSH) key/value
//! inputs, packed QKV with past, the qk output.
//!
//! float16 and bfloat16 are computed in float32 and cast back, as the CPU kernel does; the
//! present outputs are the concatenation, cast back to the input type (exact).

use crate::ir::{Graph, NodeId};
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::tensor::dtype;

use super::rotary::{dim_scalar, i64_scalar, range};
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// Whether an Attention node carries past state (input 4), for `attention::attention`'s hook.
pub fn attention_has_past(g: &Graph, n: NodeId) -> bool {
    g.node(n).inputs.get(4).copied().flatten().is_some()
}

/// Whether a MultiHeadAttention node carries past state (inputs 6 and 7).
pub fn mha_has_past(g: &Graph, n: NodeId) -> bool {
    let ins = &g.node(n).inputs;
    ins.get(6).copied().flatten().is_some() || ins.get(7).copied().flatten().is_some()
}

pub(super) fn work_type(dt: i32) -> i32 {
    if dt == dtype::FLOAT16 || dt == dtype::BFLOAT16 {
        dtype::FLOAT
    } else {
        dt
    }
}

/// Input `i` in the working type (a Cast from float16/bfloat16).
pub(super) fn in_work(rw: &mut Rw, i: usize, what: &str, work: i32) -> Result<PValue, Unsupported> {
    let v = rw.need(i, what)?;
    Ok(match rw.in_facts(i).dtype {
        Some(t) if t != work => rw.cast(v, work),
        _ => v,
    })
}

/// Split input `i` along its last axis into three parts of `sizes`: constants when it is a
/// float32 constant and `consts`, else Slices.
pub(super) fn split3(
    rw: &mut Rw,
    i: usize,
    sizes: [i64; 3],
    hint: &str,
    work: i32,
    consts: bool,
) -> Result<[PValue; 3], Unsupported> {
    if consts {
        if let Some((dims, vals)) = rw.const_f32(i) {
            let last = dims.last().copied().unwrap_or(0);
            if last == sizes.iter().sum::<i64>() && last > 0 {
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
                    out.push(rw.f32s(&format!("{hint}_{}", ["q", "k", "v"][k]), &d, &part));
                    start += sz;
                }
                return Ok([out[0], out[1], out[2]]);
            }
        }
    }
    let x = in_work(rw, i, hint, work)?;
    let a = rw.slice(x, &[0], &[sizes[0]], &[-1]);
    let b = rw.slice(x, &[sizes[0]], &[sizes[0] + sizes[1]], &[-1]);
    let c = rw.slice(x, &[sizes[0] + sizes[1]], &[sizes.iter().sum()], &[-1]);
    Ok([a, b, c])
}

/// What the shared core needs.
pub(super) struct Step {
    /// `[B, S, N*Hq]`, `[B, L, N*Hk]`, `[B, L, N*Hv]` in the working type.
    pub(super) q: PValue,
    pub(super) k: PValue,
    pub(super) v: PValue,
    /// `[B, N, P, H]` in the working type.
    pub(super) past_k: PValue,
    pub(super) past_v: PValue,
    pub(super) heads: i64,
    /// Q's hidden size (for the default scale).
    pub(super) qk_hidden: Option<i64>,
    /// S when known.
    pub(super) s_known: Option<i64>,
    pub(super) causal: bool,
    pub(super) mask: Option<usize>,
    pub(super) bias: Option<usize>,
    pub(super) work: i32,
}

/// `[B, X, N*H]` -> `[B, N, X, H]`.
pub(super) fn heads_first(rw: &mut Rw, x: PValue, n: i64) -> Result<PValue, Unsupported> {
    let r = rw.reshape(x, &[0, 0, n, -1])?;
    Ok(rw.transpose(r, &[0, 2, 1, 3]))
}

/// Keys kept by a `mask_index` / `key_padding_mask` input `mi` (int32) over `t` keys (rank-0
/// int64), as ONNX Runtime's CPU kernel reads it: 1-D `[B]` key lengths (`j < len[b]`), 1-D
/// `[2B]` end then start positions (`start[b] <= j < end[b]`), 2-D `[B, T]` and 3-D
/// `[B, S, T]` kept where > 0. A boolean broadcasting over `[B, N, S, T]`.
pub(super) fn padding_keep(rw: &mut Rw, mi: usize, t: PValue) -> Result<PValue, Unsupported> {
    let m = rw.need(mi, "mask")?;
    if rw.in_facts(mi).dtype != Some(dtype::INT32) {
        return unsupported("the mask is not int32");
    }
    match rw.rank(mi, "mask layout")? {
        1 => {
            let (len, b) = (rw.in_facts(mi).dim(0), rw.in_facts(0).dim(0));
            let starts = match (len, b) {
                (Some(l), Some(b)) if l == b => false,
                (Some(l), Some(b)) if l == 2 * b && b > 0 => true,
                (Some(l), Some(b)) => {
                    return unsupported(format!(
                        "a 1-D mask of {l} entries for batch {b} (only [B] and [2B])"
                    ))
                }
                _ => {
                    return unsupported(
                        "a 1-D mask needs static batch and mask sizes (to tell [B] from [2B])",
                    )
                }
            };
            let b = b.unwrap_or(0);
            let j = range(rw, t);
            let m64 = rw.cast(m, dtype::INT64);
            let ends = if starts {
                rw.slice(m64, &[0], &[b], &[0])
            } else {
                m64
            };
            let ends = rw.unsqueeze(ends, &[1]);
            let mut k = rw.op("Less", &[j, ends], &[]);
            if starts {
                let st = rw.slice(m64, &[b], &[2 * b], &[0]);
                let st = rw.unsqueeze(st, &[1]);
                let before = rw.op("Less", &[j, st], &[]);
                let after = rw.op("Not", &[before], &[]);
                k = rw.op("And", &[k, after], &[]);
            }
            Ok(rw.unsqueeze(k, &[1, 2]))
        }
        r @ (2 | 3) => {
            let zero = rw.p.initializer(
                "zero_i32",
                crate::proto::TensorProto {
                    dims: vec![],
                    data_type: Some(dtype::INT32),
                    raw_data: Some(0i32.to_le_bytes().to_vec().into()),
                    ..Default::default()
                },
            );
            let k = rw.op("Greater", &[m, zero], &[]);
            Ok(rw.unsqueeze(k, if r == 2 { &[1, 2] } else { &[1] }))
        }
        4 => unsupported("a 4-D mask (ONNX Runtime's CPU kernel has none)"),
        r => unsupported(format!("mask of rank {r}")),
    }
}

/// The attention over past and new keys: returns `(output [B, S, N*Hv], K_all, V_all)`, the
/// last two `[B, N, T, H]`.
pub(super) fn core(rw: &mut Rw, st: Step) -> Result<(PValue, PValue, PValue), Unsupported> {
    let n = st.heads;
    let work = st.work;
    let alpha: f32 = match (
        rw.attr("scale").and_then(|a| a.f()).filter(|&s| s != 0.0),
        st.qk_hidden,
    ) {
        (Some(s), _) => s,
        (None, Some(d)) if d > 0 && d % n == 0 => 1.0f32 / ((d / n) as f32).sqrt(),
        (None, Some(d)) => {
            return unsupported(format!("hidden size {d} is not a multiple of {n} heads"))
        }
        (None, None) => return unsupported("the head size is unknown (needed for the scale)"),
    };
    let qh = heads_first(rw, st.q, n)?;
    let kh = heads_first(rw, st.k, n)?;
    let vh = heads_first(rw, st.v, n)?;
    let axis = [("axis", AttrValue::Int(2))];
    let k_all = rw.op("Concat", &[st.past_k, kh], &axis);
    let v_all = rw.op("Concat", &[st.past_v, vh], &axis);

    // Keys kept by the padding mask, as a boolean broadcasting over [B, N, S, T].
    let filter = rw.attr_f("mask_filter_value", -10000.0);
    let t = dim_scalar(rw, k_all, 2, None);
    let keep = match st.mask {
        Some(mi) => Some(padding_keep(rw, mi, t)?),
        None => None,
    };
    // Keys kept by the causal mask, [S, T]: query row i sees keys j <= P + i, P = T - S.
    let causal = if st.causal && st.s_known != Some(1) {
        let s = dim_scalar(rw, st.q, 1, st.s_known);
        let p = rw.op("Sub", &[t, s], &[]);
        let i = range(rw, s);
        let lim = rw.op("Add", &[i, p], &[]);
        let lim = rw.unsqueeze(lim, &[1]);
        let j = range(rw, t);
        let after = rw.op("Greater", &[j, lim], &[]);
        Some(rw.op("Not", &[after], &[]))
    } else {
        None
    };
    let bias = match st.bias {
        Some(i) if rw.input(i).is_some() => Some(in_work(rw, i, "attention_bias", work)?),
        _ => None,
    };

    // alpha * Q K^T, + attention_bias, + mask_filter_value where padding masks (each rounded,
    // in that order), future keys at -inf: as ONNX Runtime 1.32's CPU kernel computes the
    // scores (the order `attention.rs` measured, fully masked rows included).
    let kt = rw.transpose(k_all, &[0, 1, 3, 2]);
    let qk = rw.op("MatMul", &[qh, kt], &[]);
    let c = rw.scalar("scale", work, alpha as f64);
    let mut scores = rw.op("Mul", &[qk, c], &[]);
    if let Some(b) = bias {
        scores = rw.op("Add", &[scores, b], &[]);
    }
    if let Some(k) = keep {
        let zero = rw.scalar("zero", work, 0.0);
        let fill = rw.scalar("mask_filter_value", work, filter as f64);
        let m = rw.op("Where", &[k, zero, fill], &[]);
        scores = rw.op("Add", &[scores, m], &[]);
    }
    if let Some(c) = causal {
        let ninf = rw.scalar("minus_infinity", work, f64::NEG_INFINITY);
        scores = rw.op("Where", &[c, scores, ninf], &[]);
    }
    let probs = rw.softmax_last(scores);
    let o = rw.op("MatMul", &[probs, v_all], &[]);
    let ot = rw.transpose(o, &[0, 2, 1, 3]);
    let y = rw.reshape(ot, &[0, 0, -1])?;
    Ok((y, k_all, v_all))
}

pub(super) fn check_opset(rw: &Rw, op: &str) -> Result<(), Unsupported> {
    if rw.opset < 11 {
        return unsupported(format!(
            "{op} with past state needs opset >= 11 (Range), the model has {}",
            rw.opset
        ));
    }
    Ok(())
}

pub(super) fn heads_attr(rw: &Rw) -> Result<i64, Unsupported> {
    match rw.attr("num_heads").and_then(|a| a.i()) {
        Some(n) if n > 0 => Ok(n),
        _ => unsupported("num_heads is required"),
    }
}

/// com.microsoft Attention with `past` `[2, B, N, P, H]` and `present` `[2, B, N, P+S, H]`.
pub fn attention_with_past(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
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
    let heads = heads_attr(&rw)?;
    check_opset(&rw, "Attention")?;
    if rw.attr_i("do_rotary", 0) != 0 {
        return unsupported("rotary embedding (do_rotary=1)");
    }
    if rw.attr_i("past_present_share_buffer", 0) != 0 {
        return unsupported("a shared past/present buffer (past_present_share_buffer=1)");
    }
    if rw.input(6).is_some() {
        return unsupported("past_sequence_length (shared buffer)");
    }
    rw.need(0, "input")?;
    rw.need(1, "weights")?;
    let past = rw.need(4, "past")?;
    let dt = rw.float_dtype(0)?;
    let work = work_type(dt);
    if rw.rank(0, "input layout")? != 3 {
        return unsupported("input must be 3-D (batch, sequence, hidden)");
    }
    if rw.rank(4, "past layout")? != 5 {
        return unsupported("past must be 5-D [2, batch, heads, past, head_size]");
    }
    if rw.in_facts(4).dtype.is_some_and(|t| t != dt) {
        return unsupported("past has another element type than the input");
    }
    let sizes = match rw.attr_ints("qkv_hidden_sizes") {
        Some(s) if s.len() == 3 && s.iter().all(|&d| d > 0) => [s[0], s[1], s[2]],
        Some(s) => return unsupported(format!("qkv_hidden_sizes {s:?}")),
        None => match rw.in_facts(1).dim(1) {
            Some(t) if t > 0 && t % 3 == 0 => [t / 3; 3],
            _ => return unsupported("the weights' shape is unknown"),
        },
    };
    if sizes[0] != sizes[1] || sizes[1] != sizes[2] {
        return unsupported(format!(
            "Q, K and V hidden sizes differ ({sizes:?}): the past holds one head size"
        ));
    }
    let x = in_work(&mut rw, 0, "input", work)?;
    let consts = work == dt && dt == dtype::FLOAT;
    let [wq, wk, wv] = split3(&mut rw, 1, sizes, "w", work, consts)?;
    let bias = match rw.input(2) {
        Some(_) => Some(split3(&mut rw, 2, sizes, "b", work, consts)?),
        None => None,
    };
    let mut proj = |w: PValue, b: Option<PValue>| {
        let m = rw.op("MatMul", &[x, w], &[]);
        match b {
            Some(b) => rw.op("Add", &[m, b], &[]),
            None => m,
        }
    };
    let q = proj(wq, bias.map(|b| b[0]));
    let k = proj(wk, bias.map(|b| b[1]));
    let v = proj(wv, bias.map(|b| b[2]));
    let packed = Packed {
        past: (4, past),
        mask: 3,
        bias: Some(5),
        heads,
        qk_hidden: sizes[0],
        work,
        dt,
    };
    let (y, present) = packed_past_step(&mut rw, [q, k, v], packed)?;
    rw.finish(&[(0, y), (1, present)])
}

/// Where the GPT-2 layout's state is, for [`packed_past_step`].
pub(super) struct Packed {
    /// The `past` input `[2, B, N, P, H]`: its index and value.
    pub(super) past: (usize, PValue),
    /// The index of the `mask_index` input (read when present).
    pub(super) mask: usize,
    /// The index of the `attention_bias` input, if the operator has one.
    pub(super) bias: Option<usize>,
    pub(super) heads: i64,
    pub(super) qk_hidden: i64,
    /// The working type and the element type of the output.
    pub(super) work: i32,
    pub(super) dt: i32,
}

/// The attention step of the packed-past layout (Attention, QAttention) once Q, K, V `[B, S,
/// N*H]` are projected (working type): past keys and values gathered from `past`, [`core`],
/// and `present = [K_all; V_all]`. Returns `(output, present)` in the element type `dt`.
pub(super) fn packed_past_step(
    rw: &mut Rw,
    [q, k, v]: [PValue; 3],
    st: Packed,
) -> Result<(PValue, PValue), Unsupported> {
    let (pi, past) = st.past;
    let work = st.work;
    let past_w = match rw.in_facts(pi).dtype {
        Some(t) if t != work => rw.cast(past, work),
        _ => past,
    };
    let i0 = i64_scalar(rw, "past_keys", 0);
    let i1 = i64_scalar(rw, "past_values", 1);
    let ax0 = [("axis", AttrValue::Int(0))];
    let past_k = rw.op("Gather", &[past_w, i0], &ax0);
    let past_v = rw.op("Gather", &[past_w, i1], &ax0);
    let step = Step {
        q,
        k,
        v,
        past_k,
        past_v,
        heads: st.heads,
        qk_hidden: Some(st.qk_hidden),
        s_known: rw.in_facts(0).dim(1),
        causal: rw.attr_i("unidirectional", 0) != 0,
        mask: rw
            .input(st.mask)
            .filter(|_| !super::attention::dummy_mask(rw, st.mask))
            .map(|_| st.mask),
        bias: st.bias,
        work,
    };
    let (mut y, k_all, v_all) = core(rw, step)?;
    let ka = rw.unsqueeze(k_all, &[0]);
    let va = rw.unsqueeze(v_all, &[0]);
    let mut present = rw.op("Concat", &[ka, va], &ax0);
    if work != st.dt {
        y = rw.cast(y, st.dt);
        present = rw.cast(present, st.dt);
    }
    Ok((y, present))
}

/// com.microsoft MultiHeadAttention with 3-D query/key/value and a BNSH `past_key` /
/// `past_value`, producing `present_key` / `present_value`.
pub fn multi_head_attention_with_past(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["num_heads", "scale", "mask_filter_value", "unidirectional"])?;
    let heads = heads_attr(&rw)?;
    check_opset(&rw, "MultiHeadAttention")?;
    if rw.input(8).is_some() {
        return unsupported("past_sequence_length (shared buffer)");
    }
    if rw.node.inputs.iter().skip(9).any(|v| v.is_some()) {
        return unsupported("cache_indirection (beam search's shared buffer)");
    }
    if rw.used(3) {
        return unsupported("the qk output");
    }
    rw.need(0, "query")?;
    if rw.input(1).is_none() || rw.input(2).is_none() {
        return unsupported("packed QKV/KV with past state (no separate key and value)");
    }
    let (pk, pv) = match (rw.input(6), rw.input(7)) {
        (Some(k), Some(v)) => (k, v),
        _ => return unsupported("past_key and past_value must be both present"),
    };
    let dt = rw.float_dtype(0)?;
    let work = work_type(dt);
    for (i, what) in [(0, "query"), (1, "key"), (2, "value")] {
        let r = rw.rank(i, "MultiHeadAttention layout")?;
        if r != 3 {
            return unsupported(format!(
                "{what} of rank {r} with past state (only 3-D BSD layout)"
            ));
        }
    }
    for i in [6, 7] {
        if rw.rank(i, "past layout")? != 4 {
            return unsupported("past_key/past_value must be 4-D (BNSH)");
        }
        if rw.in_facts(i).dtype.is_some_and(|t| t != dt) {
            return unsupported("the past has another element type than the query");
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
        let consts = work == dt && dt == dtype::FLOAT;
        let b = split3(&mut rw, 3, [dq, dq, dv], "b", work, consts)?;
        q = rw.op("Add", &[q, b[0]], &[]);
        k = rw.op("Add", &[k, b[1]], &[]);
        v = rw.op("Add", &[v, b[2]], &[]);
    }
    let to_work = |rw: &mut Rw, i: usize, x: PValue| match rw.in_facts(i).dtype {
        Some(t) if t != work => rw.cast(x, work),
        _ => x,
    };
    let past_k = to_work(&mut rw, 6, pk);
    let past_v = to_work(&mut rw, 7, pv);
    let st = Step {
        q,
        k,
        v,
        past_k,
        past_v,
        heads,
        qk_hidden: dq,
        s_known: rw.in_facts(0).dim(1),
        causal: rw.attr_i("unidirectional", 0) != 0,
        mask: rw.input(4).map(|_| 4),
        bias: Some(5),
        work,
    };
    let (mut y, mut k_all, mut v_all) = core(&mut rw, st)?;
    if work != dt {
        y = rw.cast(y, dt);
        k_all = rw.cast(k_all, dt);
        v_all = rw.cast(v_all, dt);
    }
    rw.finish(&[(0, y), (1, k_all), (2, v_all)])
}
