//! DecoderMaskedMultiHeadAttention (ONNX Runtime contrib operator): one decoding step of
//! multi-head attention, as ONNX Runtime's Whisper/GPT exporters write it.
//!
//! Semantics, as ONNX Runtime 1.32's CPU kernel computes them
//! (`contrib_ops/cpu/bert/decoder_masked_multihead_attention.cc`, measured with
//! `tools/fuzz_decomp.py`):
//!
//! * Self attention (`past_key` given): the past and present share one buffer
//!   `[B, N, max_sequence_length, H]` (`past_present_share_buffer=1`; the kernel refuses 0).
//!   With `P = past_sequence_length`, the step's key and value (projection `bias` added) are
//!   written at row `P` of the present buffers (the rest is the past, unchanged), and the
//!   query (sequence length 1) attends over rows `0..=P`. Scores are `alpha * q k^T`, plus
//!   `attention_bias` `[B|1, N|1, 1, P+1]`, plus `mask_filter_value` where the 2-D key padding
//!   mask `[B, P+1]` is 0, in that order (the order `attention_past.rs` shares), then Softmax
//!   and the weighted sum of values; `alpha` is `scale` or `1/sqrt(H)` in float32.
//! * Cross attention (no past): key and value are the encoder's per-head cache
//!   `[B, N, L, H]`; the same scores without attention_bias (the kernel refuses it).
//!
//! Refused with a reason: beam search's `beam_width` / `cache_indirection` (not decomposed;
//! the CPU kernel's beam path, as read in its source, does not index the past per beam as the
//! documentation describes, and was not measured here), packed QKV (the CPU kernel fails on it), `past_present_share_buffer=0` with past
//! (the CPU kernel refuses it), 1-D/3-D masks (the kernel takes only 2-D key padding), the
//! `qk` output. ONNX Runtime's CPU kernel is float32 only: float16 is computed in float32 and
//! rounded once, checked against the float32 kernel on the same values.

use crate::ir::{Graph, NodeId};
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::tensor::dtype;

use super::attention_past::{
    check_opset, core, heads_attr, heads_first, in_work, padding_keep, split3, work_type, Step,
};
use super::rotary::dim_scalar;
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// `x` in the working type.
fn to_work(rw: &mut Rw, i: usize, x: PValue, work: i32) -> PValue {
    match rw.in_facts(i).dtype {
        Some(t) if t != work => rw.cast(x, work),
        _ => x,
    }
}

/// A 1-D int64 constant.
fn i64s(rw: &mut Rw, hint: &str, v: &[i64]) -> PValue {
    rw.ints(hint, v)
}

/// Slice `x` along `axis` from `start` to `end`, either of which may be a 1-D int64 value.
fn slice_dyn(rw: &mut Rw, x: PValue, start: PValue, end: PValue, axis: i64) -> PValue {
    let a = i64s(rw, "axes", &[axis]);
    rw.op("Slice", &[x, start, end, a], &[])
}

/// com.microsoft DecoderMaskedMultiHeadAttention.
pub fn decoder_masked_mha(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[
        "num_heads",
        "mask_filter_value",
        "scale",
        "past_present_share_buffer",
        "output_qk",
    ])?;
    let heads = heads_attr(&rw)?;
    check_opset(&rw, "DecoderMaskedMultiHeadAttention")?;
    if rw.input(8).is_some() || rw.input(9).is_some() {
        return unsupported(
            "beam search's beam_width/cache_indirection (the per-beam gather of the past is not \
             decomposed)",
        );
    }
    if rw.used(3) {
        return unsupported("the qk output");
    }
    rw.need(0, "query")?;
    if rw.input(1).is_none() || rw.input(2).is_none() {
        return unsupported("packed QKV in the query (ONNX Runtime's CPU kernel fails on it)");
    }
    let dt = rw.float_dtype(0)?;
    if dt == dtype::DOUBLE {
        return unsupported("float64 (the operator takes float32 and float16)");
    }
    let work = work_type(dt);
    for i in [1, 2, 4, 5, 6, 10] {
        if rw.input(i).is_some() && rw.in_facts(i).dtype.is_some_and(|t| t != dt) {
            return unsupported(format!("input {i} has another element type than the query"));
        }
    }
    if rw.rank(0, "query layout")? != 3 {
        return unsupported("the query must be 3-D [B, 1, D]");
    }
    if let Some(s) = rw.in_facts(0).dim(1) {
        if s != 1 {
            return unsupported(format!(
                "query sequence length {s} (the operator decodes one token)"
            ));
        }
    }
    if rw.input(3).is_some() && rw.rank(3, "mask layout")? != 2 {
        return unsupported("a mask other than 2-D key padding [B, T] (the kernel takes none)");
    }
    let d = match rw.in_facts(0).dim(2) {
        Some(d) if d > 0 && d % heads == 0 => d,
        Some(d) => {
            return unsupported(format!(
                "hidden size {d} is not a multiple of {heads} heads"
            ))
        }
        None => return unsupported("the query's hidden size is unknown"),
    };
    if rw.input(5).is_some() {
        self_attention(rw, heads, d, dt, work)
    } else {
        cross_attention(rw, heads, d, dt, work)
    }
}

fn self_attention(
    mut rw: Rw,
    heads: i64,
    d: i64,
    dt: i32,
    work: i32,
) -> Result<Patch, Unsupported> {
    if rw.attr_i("past_present_share_buffer", 0) != 1 {
        return unsupported(
            "past state without past_present_share_buffer=1 (ONNX Runtime's kernel requires it)",
        );
    }
    let pk = rw.need(5, "past_key")?;
    let pv = rw.need(6, "past_value")?;
    let psl = rw.need(7, "past_sequence_length")?;
    for (i, what) in [(1, "key"), (2, "value")] {
        let r = rw.rank(i, "key/value layout")?;
        if r != 3 {
            return unsupported(format!(
                "{what} of rank {r} with past state (only [B, 1, D])"
            ));
        }
        if rw.in_facts(i).dim(2).is_some_and(|x| x != d) {
            return unsupported(format!("{what}'s hidden size differs from the query's"));
        }
    }
    for i in [5, 6] {
        if rw.rank(i, "past layout")? != 4 {
            return unsupported("past_key/past_value must be 4-D [B, N, max_sequence_length, H]");
        }
    }
    let mut q = in_work(&mut rw, 0, "query", work)?;
    let mut k = in_work(&mut rw, 1, "key", work)?;
    let mut v = in_work(&mut rw, 2, "value", work)?;
    if rw.input(10).is_some() {
        let consts = work == dt && dt == dtype::FLOAT;
        let b = split3(&mut rw, 10, [d, d, d], "b", work, consts)?;
        q = rw.op("Add", &[q, b[0]], &[]);
        k = rw.op("Add", &[k, b[1]], &[]);
        v = rw.op("Add", &[v, b[2]], &[]);
    }
    // P as a 1-D int64 [1], and P + 1.
    let p = rw.cast(psl, dtype::INT64);
    let p = rw.reshape(p, &[1])?;
    let one = i64s(&mut rw, "one", &[1]);
    let p1 = rw.op("Add", &[p, one], &[]);
    let zero = i64s(&mut rw, "zero", &[0]);
    let end = i64s(&mut rw, "end", &[i64::MAX]);
    let pk_w = to_work(&mut rw, 5, pk, work);
    let pv_w = to_work(&mut rw, 6, pv, work);
    let past_k = slice_dyn(&mut rw, pk_w, zero, p, 2);
    let past_v = slice_dyn(&mut rw, pv_w, zero, p, 2);
    let st = Step {
        q,
        k,
        v,
        past_k,
        past_v,
        heads,
        qk_hidden: Some(d),
        s_known: Some(1),
        causal: false,
        mask: rw.input(3).map(|_| 3),
        bias: Some(4),
        work,
    };
    let (mut y, k_all, v_all) = core(&mut rw, st)?;
    if work != dt {
        y = rw.cast(y, dt);
    }
    // The present buffers: rows 0..=P as attended, the rest of the past after them.
    let mut outs = vec![(0, y)];
    for (slot, all, past) in [(1, k_all, pk), (2, v_all, pv)] {
        if !rw.used(slot) {
            continue;
        }
        let all = if work != dt { rw.cast(all, dt) } else { all };
        let rest = slice_dyn(&mut rw, past, p1, end, 2);
        let present = rw.op("Concat", &[all, rest], &[("axis", AttrValue::Int(2))]);
        outs.push((slot, present));
    }
    rw.finish(&outs)
}

fn cross_attention(
    mut rw: Rw,
    heads: i64,
    d: i64,
    dt: i32,
    work: i32,
) -> Result<Patch, Unsupported> {
    if rw.input(4).is_some() {
        return unsupported("attention_bias in cross attention (ONNX Runtime's kernel refuses it)");
    }
    if rw.input(6).is_some() || rw.input(7).is_some() {
        return unsupported("past_value or past_sequence_length without past_key");
    }
    if rw.used(1) || rw.used(2) {
        return unsupported("present outputs in cross attention (ONNX Runtime's kernel has none)");
    }
    let h = d / heads;
    for (i, what) in [(1, "key"), (2, "value")] {
        let r = rw.rank(i, "key/value layout")?;
        if r != 4 {
            return unsupported(format!(
                "{what} of rank {r} without past (cross attention takes [B, N, L, H])"
            ));
        }
        let f = rw.in_facts(i);
        if f.dim(1).is_some_and(|x| x != heads) || f.dim(3).is_some_and(|x| x != h) {
            return unsupported(format!("{what} is not [B, {heads}, L, {h}]"));
        }
    }
    let mut q = in_work(&mut rw, 0, "query", work)?;
    if let Some(b) = rw.input(10) {
        // Only the query's part of the bias applies (the cache is used as given).
        let bw = to_work(&mut rw, 10, b, work);
        let bq = rw.slice(bw, &[0], &[d], &[0]);
        q = rw.op("Add", &[q, bq], &[]);
    }
    let kc = in_work(&mut rw, 1, "key", work)?;
    let vc = in_work(&mut rw, 2, "value", work)?;
    let alpha: f32 = match rw.attr("scale").and_then(|a| a.f()).filter(|&s| s != 0.0) {
        Some(s) => s,
        None => 1.0f32 / (h as f32).sqrt(),
    };
    let qh = heads_first(&mut rw, q, heads)?;
    let kt = rw.transpose(kc, &[0, 1, 3, 2]);
    let qk = rw.op("MatMul", &[qh, kt], &[]);
    let c = rw.scalar("scale", work, alpha as f64);
    let mut scores = rw.op("Mul", &[qk, c], &[]);
    if rw.input(3).is_some() {
        let l = rw.in_facts(1).dim(2);
        let t = dim_scalar(&mut rw, kc, 2, l);
        let keep = padding_keep(&mut rw, 3, t)?;
        let zero = rw.scalar("zero", work, 0.0);
        let filter = rw.attr_f("mask_filter_value", -10000.0) as f64;
        let fill = rw.scalar("mask_filter_value", work, filter);
        let m = rw.op("Where", &[keep, zero, fill], &[]);
        scores = rw.op("Add", &[scores, m], &[]);
    }
    let probs = rw.softmax_last(scores);
    let o = rw.op("MatMul", &[probs, vc], &[]);
    let ot = rw.transpose(o, &[0, 2, 1, 3]);
    let mut y = rw.reshape(ot, &[0, 0, -1])?;
    if work != dt {
        y = rw.cast(y, dt);
    }
    rw.finish(&[(0, y)])
}
