//! The packed (padding-free) BERT family of ONNX Runtime contrib operators: RemovePadding,
//! RestorePadding, PackedAttention and PackedMultiHeadAttention.
//!
//! ONNX Runtime `bert_defs.cc`: a batch `[B, S, H]` padded on the right is packed into the
//! `T` real tokens `[T, H]`; `token_offset` `[B, S]` lists, flattened, the positions
//! (`b * S + s`) of the real tokens in order, then those of the padding;
//! `cumulative_sequence_length` `[B + 1]` is `0, c0, c0 + c1, ...`. RestorePadding writes the
//! tokens back at their positions and zeros elsewhere. The packed attentions are BERT
//! attention (no causal mask, no past) over each sequence's own tokens only: scores
//! `alpha * q k^T + attention_bias` over the keys `j < len[b]`, Softmax, the weighted sum of
//! values; `alpha` is `scale` or `1/sqrt(head_size)`. Here the other keys get
//! `mask_filter_value` (-10000 by default; PackedAttention has no such attribute): their
//! weight underflows to 0 in float32, and a `mask_filter_value` above -1000, which would let
//! them weigh in, is refused.
//!
//! Here the tokens are scattered back into the padded layout (ScatterND), attended there with
//! a key padding mask built from the cumulative lengths, and gathered again. Padding rows are
//! computed and dropped; a padding key's weight is `exp(mask_filter_value + ...)`, 0 in
//! float32 at the default.
//!
//! ONNX Runtime 1.32's CPU provider has no kernel for any of the four (CUDA only), so these
//! are checked against a float64 reference of the semantics above (`tools/fuzz_decomp.py`),
//! not against ONNX Runtime. float16 is computed in float32 and rounded once. Refused: packed
//! QKV with a bias (its bias layout is not documented), `qkv_hidden_sizes` with Q and K of
//! different sizes.

use crate::ir::{Graph, NodeId};
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::tensor::dtype;

use super::attention_past::{heads_attr, heads_first, split3, work_type};
use super::rotary::{i64_scalar, to_scalar};
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

fn check_opset(rw: &Rw, op: &str) -> Result<(), Unsupported> {
    if rw.opset < 11 {
        return unsupported(format!(
            "{op} needs opset >= 11 (NonZero, CumSum, ScatterND), the model has {}",
            rw.opset
        ));
    }
    Ok(())
}

fn need_int32(rw: &Rw, i: usize, what: &str) -> Result<PValue, Unsupported> {
    let v = rw.need(i, what)?;
    match rw.in_facts(i).dtype {
        Some(dtype::INT32) | None => Ok(v),
        Some(t) => unsupported(format!(
            "{what} has element type {}, not int32",
            crate::tensor::dtype_name(t)
        )),
    }
}

/// `x` in the working type.
fn to_work(rw: &mut Rw, i: usize, x: PValue, work: i32) -> PValue {
    match rw.in_facts(i).dtype {
        Some(t) if t != work => rw.cast(x, work),
        _ => x,
    }
}

/// Elements `a..b` of a 1-D value (constant bounds).
fn part(rw: &mut Rw, x: PValue, a: i64, b: i64) -> PValue {
    rw.slice(x, &[a], &[b], &[0])
}

/// The padded layout of one packing: the token positions, and the shapes to scatter into.
struct Layout {
    /// `[T, 1]` int64: the flat position of each token.
    idx: PValue,
    /// `[2]` int64: `B, S`.
    bs: PValue,
    /// `[1]` int64: `B * S`.
    bxs: PValue,
}

/// The layout from `token_offset` (input `oi`, int32 `[B, S]`) for the `T` tokens of `x`
/// (`[T, ...]`).
fn layout(rw: &mut Rw, oi: usize, x: PValue) -> Result<Layout, Unsupported> {
    let off = need_int32(rw, oi, "token_offset")?;
    if rw.rank(oi, "token_offset layout")? != 2 {
        return unsupported("token_offset must be 2-D [B, S]");
    }
    let bs = rw.op("Shape", &[off], &[]);
    let size = rw.op("Size", &[off], &[]);
    let bxs = rw.reshape(size, &[1])?;
    let o64 = rw.cast(off, dtype::INT64);
    let flat = rw.reshape(o64, &[-1])?;
    let xs = rw.op("Shape", &[x], &[]);
    let t = part(rw, xs, 0, 1);
    let zero = rw.ints("zero", &[0]);
    let ax = rw.ints("axes", &[0]);
    let tok = rw.op("Slice", &[flat, zero, t, ax], &[]);
    let idx = rw.unsqueeze(tok, &[1]);
    Ok(Layout { idx, bs, bxs })
}

/// Tokens `x` `[T, H]` written back at their positions of `[B, S, H]`, zeros elsewhere.
fn restore(rw: &mut Rw, lay: &Layout, x: PValue, dt: i32) -> PValue {
    let xs = rw.op("Shape", &[x], &[]);
    let h = part(rw, xs, 1, 2);
    let flat_shape = rw.op("Concat", &[lay.bxs, h], &[("axis", AttrValue::Int(0))]);
    let zero = rw.scalar("zero", dt, 0.0);
    let zeros = rw.op("Expand", &[zero, flat_shape], &[]);
    let flat = rw.op("ScatterND", &[zeros, lay.idx, x], &[]);
    let shape = rw.op("Concat", &[lay.bs, h], &[("axis", AttrValue::Int(0))]);
    rw.op("Reshape", &[flat, shape], &[])
}

/// The tokens of a padded `[B, S, H]`: `[T, H]`.
fn pack(rw: &mut Rw, lay: &Layout, x: PValue) -> Result<PValue, Unsupported> {
    let xs = rw.op("Shape", &[x], &[]);
    let h = part(rw, xs, 2, 3);
    let flat_shape = rw.op("Concat", &[lay.bxs, h], &[("axis", AttrValue::Int(0))]);
    let flat = rw.op("Reshape", &[x, flat_shape], &[]);
    let idx = rw.reshape(lay.idx, &[-1])?;
    Ok(rw.op("Gather", &[flat, idx], &[("axis", AttrValue::Int(0))]))
}

/// What the packed attention core needs.
struct Packed {
    /// `[T, D]`, `[T, D]`, `[T, Dv]` in the working type, projection bias added.
    q: PValue,
    k: PValue,
    v: PValue,
    heads: i64,
    head_size: i64,
    /// Input indices of token_offset, cumulative_sequence_length, attention_bias.
    offsets: usize,
    cumulative: usize,
    attn_bias: usize,
    filter: f32,
    work: i32,
}

/// Attention over each sequence's tokens; `[T, Dv]` in the working type.
fn packed_core(rw: &mut Rw, p: Packed) -> Result<PValue, Unsupported> {
    let lay = layout(rw, p.offsets, p.q)?;
    let cum = need_int32(rw, p.cumulative, "cumulative_sequence_length")?;
    let qp = restore(rw, &lay, p.q, p.work);
    let kp = restore(rw, &lay, p.k, p.work);
    let vp = restore(rw, &lay, p.v, p.work);
    let qh = heads_first(rw, qp, p.heads)?;
    let kh = heads_first(rw, kp, p.heads)?;
    let vh = heads_first(rw, vp, p.heads)?;
    let alpha: f32 = match rw.attr("scale").and_then(|a| a.f()).filter(|&s| s != 0.0) {
        Some(s) => s,
        None => 1.0f32 / (p.head_size as f32).sqrt(),
    };
    let kt = rw.transpose(kh, &[0, 1, 3, 2]);
    let qk = rw.op("MatMul", &[qh, kt], &[]);
    let c = rw.scalar("scale", p.work, alpha as f64);
    let mut scores = rw.op("Mul", &[qk, c], &[]);
    if let Some(b) = rw.input(p.attn_bias) {
        let bw = to_work(rw, p.attn_bias, b, p.work);
        scores = rw.op("Add", &[scores, bw], &[]);
    }
    // Keys j < len[b] are kept, len = cum[1:] - cum[:-1].
    let c64 = rw.cast(cum, dtype::INT64);
    let big = rw.ints("end", &[i64::MAX]);
    let one = rw.ints("one", &[1]);
    let zero = rw.ints("zero", &[0]);
    let minus1 = rw.ints("minus_one", &[-1]);
    let ax = rw.ints("axes", &[0]);
    let hi = rw.op("Slice", &[c64, one, big, ax], &[]);
    let lo = rw.op("Slice", &[c64, zero, minus1, ax], &[]);
    let len = rw.op("Sub", &[hi, lo], &[]);
    let len = rw.unsqueeze(len, &[1]);
    let s = part(rw, lay.bs, 1, 2);
    let s = to_scalar(rw, s);
    let z = i64_scalar(rw, "zero", 0);
    let o = i64_scalar(rw, "one", 1);
    let j = rw.op("Range", &[z, s, o], &[]);
    let keep = rw.op("Less", &[j, len], &[]);
    let keep = rw.unsqueeze(keep, &[1, 2]);
    let zf = rw.scalar("zero", p.work, 0.0);
    let fill = rw.scalar("mask_filter_value", p.work, p.filter as f64);
    let m = rw.op("Where", &[keep, zf, fill], &[]);
    scores = rw.op("Add", &[scores, m], &[]);
    let probs = rw.softmax_last(scores);
    let out = rw.op("MatMul", &[probs, vh], &[]);
    let ot = rw.transpose(out, &[0, 2, 1, 3]);
    let y = rw.reshape(ot, &[0, 0, -1])?;
    pack(rw, &lay, y)
}

/// com.microsoft RemovePadding: outputs the tokens `[T, H]`, token_offset `[B, S]`,
/// cumulated_seq_len `[B + 1]` and max_seq_len `[1]` (int32), from `input` `[B, S, H]` and
/// `sequence_token_count` `[B]` (each count in `0..=S`: right padding).
pub fn remove_padding(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    check_opset(&rw, "RemovePadding")?;
    let x = rw.need(0, "input")?;
    let cnt = need_int32(&rw, 1, "sequence_token_count")?;
    if rw.rank(0, "input layout")? != 3 {
        return unsupported("input must be 3-D [B, S, H]");
    }
    let shape = rw.op("Shape", &[x], &[]);
    let bs = part(&mut rw, shape, 0, 2);
    let s = part(&mut rw, shape, 1, 2);
    let h = part(&mut rw, shape, 2, 3);
    let s = to_scalar(&mut rw, s);
    let z = i64_scalar(&mut rw, "zero", 0);
    let o = i64_scalar(&mut rw, "one", 1);
    let pos = rw.op("Range", &[z, s, o], &[]);
    let lens = rw.cast(cnt, dtype::INT64);
    let lens = rw.unsqueeze(lens, &[1]);
    let valid = rw.op("Less", &[pos, lens], &[]);
    let vflat = rw.reshape(valid, &[-1])?;
    let real = rw.op("NonZero", &[vflat], &[]);
    let padv = rw.op("Not", &[vflat], &[]);
    let pad = rw.op("NonZero", &[padv], &[]);
    let all = rw.op("Concat", &[real, pad], &[("axis", AttrValue::Int(1))]);
    let offs = rw.op("Reshape", &[all, bs], &[]);
    let offs = rw.cast(offs, dtype::INT32);
    let minus1 = rw.ints("minus_one", &[-1]);
    let flat_shape = rw.op("Concat", &[minus1, h], &[("axis", AttrValue::Int(0))]);
    let xf = rw.op("Reshape", &[x, flat_shape], &[]);
    let real1 = rw.reshape(real, &[-1])?;
    let out = rw.op("Gather", &[xf, real1], &[("axis", AttrValue::Int(0))]);
    let axis0 = rw.p.initializer(
        "axis",
        crate::proto::TensorProto {
            dims: vec![],
            data_type: Some(dtype::INT32),
            raw_data: Some(0i32.to_le_bytes().to_vec().into()),
            ..Default::default()
        },
    );
    let csum = rw.op("CumSum", &[cnt, axis0], &[]);
    let zero32 = rw.p.initializer(
        "zero",
        crate::proto::TensorProto {
            dims: vec![1],
            data_type: Some(dtype::INT32),
            raw_data: Some(0i32.to_le_bytes().to_vec().into()),
            ..Default::default()
        },
    );
    let cum = rw.op("Concat", &[zero32, csum], &[("axis", AttrValue::Int(0))]);
    let mx = rw.reduce("ReduceMax", cnt, &[0], true);
    rw.finish(&[(0, out), (1, offs), (2, cum), (3, mx)])
}

/// com.microsoft RestorePadding: `input` `[T, H]` back to `[B, S, H]` by `token_offset`,
/// zeros at the padding (exact: data movement only).
pub fn restore_padding(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    check_opset(&rw, "RestorePadding")?;
    let x = rw.need(0, "input")?;
    if rw.rank(0, "input layout")? != 2 {
        return unsupported("input must be 2-D [T, H]");
    }
    let dt = match rw.in_facts(0).dtype {
        Some(t) => t,
        None => return unsupported("the element type of input 0 is unknown (needed for zeros)"),
    };
    let lay = layout(&mut rw, 1, x)?;
    let y = restore(&mut rw, &lay, x, dt);
    rw.finish(&[(0, y)])
}

/// com.microsoft PackedAttention: `input` `[T, in]` projected by `weights` and `bias` into Q,
/// K, V, then the packed attention.
pub fn packed_attention(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["num_heads", "qkv_hidden_sizes", "scale"])?;
    check_opset(&rw, "PackedAttention")?;
    let heads = heads_attr(&rw)?;
    let x = rw.need(0, "input")?;
    rw.need(1, "weights")?;
    rw.need(2, "bias")?;
    let dt = rw.float_dtype(0)?;
    let work = work_type(dt);
    if rw.rank(0, "input layout")? != 2 {
        return unsupported("input must be 2-D [T, input_hidden_size]");
    }
    let sizes = match rw.attr_ints("qkv_hidden_sizes") {
        Some(s) if s.len() == 3 && s.iter().all(|&d| d > 0) => [s[0], s[1], s[2]],
        Some(s) => return unsupported(format!("qkv_hidden_sizes {s:?}")),
        None => match rw.in_facts(1).dim(1).or(rw.in_facts(2).dim(0)) {
            Some(t) if t > 0 && t % 3 == 0 => [t / 3; 3],
            _ => return unsupported("the weights' shape is unknown"),
        },
    };
    if sizes[0] != sizes[1] {
        return unsupported(format!("Q and K hidden sizes differ ({sizes:?})"));
    }
    for (s, what) in [(sizes[0], "Q"), (sizes[2], "V")] {
        if s % heads != 0 {
            return unsupported(format!(
                "{what} hidden size {s} is not a multiple of {heads}"
            ));
        }
    }
    let x = to_work(&mut rw, 0, x, work);
    let consts = work == dt && dt == dtype::FLOAT;
    let [wq, wk, wv] = split3(&mut rw, 1, sizes, "w", work, consts)?;
    let [bq, bk, bv] = split3(&mut rw, 2, sizes, "b", work, consts)?;
    let mut proj = |w: PValue, b: PValue| {
        let m = rw.op("MatMul", &[x, w], &[]);
        rw.op("Add", &[m, b], &[])
    };
    let q = proj(wq, bq);
    let k = proj(wk, bk);
    let v = proj(wv, bv);
    let p = Packed {
        q,
        k,
        v,
        heads,
        head_size: sizes[0] / heads,
        offsets: 3,
        cumulative: 4,
        attn_bias: 5,
        filter: -10000.0,
        work,
    };
    let mut y = packed_core(&mut rw, p)?;
    if work != dt {
        y = rw.cast(y, dt);
    }
    rw.finish(&[(0, y)])
}

/// com.microsoft PackedMultiHeadAttention: query/key/value `[T, D]` (or packed QKV
/// `[T, N, 3, H]` in the query), an optional projection bias, then the packed attention.
pub fn packed_mha(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["num_heads", "mask_filter_value", "scale"])?;
    check_opset(&rw, "PackedMultiHeadAttention")?;
    let heads = heads_attr(&rw)?;
    let filter = rw.attr_f("mask_filter_value", -10000.0);
    if filter > -1000.0 {
        return unsupported(format!(
            "mask_filter_value {filter} (padding keys would weigh in; ONNX Runtime's fused \
             kernels leave them out)"
        ));
    }
    let q0 = rw.need(0, "query")?;
    let dt = rw.float_dtype(0)?;
    let work = work_type(dt);
    for i in [1, 2, 3, 6] {
        if rw.input(i).is_some() && rw.in_facts(i).dtype.is_some_and(|t| t != dt) {
            return unsupported(format!("input {i} has another element type than the query"));
        }
    }
    let (q, k, v, d) = match rw.rank(0, "query layout")? {
        4 => {
            if rw.input(1).is_some() || rw.input(2).is_some() {
                return unsupported("packed QKV with a separate key or value");
            }
            if rw.input(3).is_some() {
                return unsupported(
                    "packed QKV with a projection bias (its layout is undocumented)",
                );
            }
            let f = rw.in_facts(0);
            let (nh, h) = match (f.dim(1), f.dim(2), f.dim(3)) {
                (Some(nh), Some(3), Some(h)) if nh == heads => (nh, h),
                _ => return unsupported(format!("packed QKV is not [T, {heads}, 3, H]")),
            };
            let x = to_work(&mut rw, 0, q0, work);
            let mut parts = Vec::new();
            for i in 0..3 {
                let s = rw.slice(x, &[i], &[i + 1], &[2]);
                parts.push(rw.reshape(s, &[0, nh * h])?);
            }
            (parts[0], parts[1], parts[2], nh * h)
        }
        2 => {
            let (k0, v0) = match (rw.input(1), rw.input(2)) {
                (Some(k), Some(v)) => (k, v),
                _ => return unsupported("2-D query without key and value"),
            };
            let d = match rw.in_facts(0).dim(1) {
                Some(d) => d,
                None => return unsupported("the query's hidden size is unknown"),
            };
            let mut q = to_work(&mut rw, 0, q0, work);
            let mut k = to_work(&mut rw, 1, k0, work);
            let mut v = to_work(&mut rw, 2, v0, work);
            if rw.input(3).is_some() {
                let dv = match rw.in_facts(2).dim(1) {
                    Some(dv) => dv,
                    None => return unsupported("a projection bias needs a static value size"),
                };
                let consts = work == dt && dt == dtype::FLOAT;
                let b = split3(&mut rw, 3, [d, d, dv], "b", work, consts)?;
                q = rw.op("Add", &[q, b[0]], &[]);
                k = rw.op("Add", &[k, b[1]], &[]);
                v = rw.op("Add", &[v, b[2]], &[]);
            }
            (q, k, v, d)
        }
        r => return unsupported(format!("query of rank {r} (2-D, or 4-D packed QKV)")),
    };
    if d % heads != 0 {
        return unsupported(format!(
            "hidden size {d} is not a multiple of {heads} heads"
        ));
    }
    let p = Packed {
        q,
        k,
        v,
        heads,
        head_size: d / heads,
        offsets: 4,
        cumulative: 5,
        attn_bias: 6,
        filter,
        work,
    };
    let mut y = packed_core(&mut rw, p)?;
    if work != dt {
        y = rw.cast(y, dt);
    }
    rw.finish(&[(0, y)])
}
