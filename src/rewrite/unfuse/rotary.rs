//! RotaryEmbedding (ONNX Runtime contrib operator, com.microsoft), and the rotation that
//! GroupQueryAttention applies with `do_rotary` (see `gqa.rs`).
//!
//! Formula (ContribOperators.md, RotaryEmbedding; ONNX Runtime
//! `contrib_ops/cpu/bert/rotary_embedding.cc`): per head, the first `rotary_dim` channels of
//! each token at position `p` are rotated by the angles of row `p` of the caches,
//! `c = cos_cache[p]`, `s = sin_cache[p]` (`rotary_dim / 2` entries each):
//! - not interleaved: `x1 = x[:d/2]`, `x2 = x[d/2:d]`, `y = [x1 c - x2 s, x2 c + x1 s]`;
//! - interleaved: pairs `(x[2i], x[2i+1])` become `(x[2i] c_i - x[2i+1] s_i,
//!   x[2i+1] c_i + x[2i] s_i)`;
//!
//! and channels `rotary_dim..head_size` pass through. Positions are `position_ids[b, s]`, or
//! `position_ids[0] + s` for a 1-element `position_ids`. float16/bfloat16 are rotated in float
//! and rounded once, as the kernel converts each row to float (MLAS `RotaryEmbedOneRow`;
//! bit for bit on ONNX Runtime 1.32, standalone and inside GroupQueryAttention, both layouts).
//! float32 on x86-64 differs in the last bit: the kernel fuses the multiply-adds,
//! `fma(x1, c, -(x2 s))` and `fma(x1, s, x2 c)` (bit for bit on ONNX Runtime 1.32, both
//! layouts); the decomposition rounds every product (at most 1 ulp per element, inside
//! `rounding` here; inside GroupQueryAttention the softmax can amplify it to a little over
//! 1e-5 of scale, two fuzz cases at 1.1e-5 and 1.9e-5). Mirroring it would take float64
//! arithmetic in every float32 rotation, which is not done.
//! The `scale` attribute is not read by the CPU kernel (checked on ONNX Runtime 1.32: a
//! `scale` of 0.5 gives the same output), so it is ignored here too.
//!
//! The cache rows are gathered with int32 positions: the positions index a cache of at most a
//! few hundred thousand rows, and int64 run-time indices are the DirectML crash pattern the
//! `int64-indices-on-cpu` rules pin (the gather is small; it is not the attention's work).

use crate::ir::{Graph, NodeId};
use crate::proto::TensorProto;
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::tensor::dtype;

use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};
use crate::rewrite::pass::{Cause, Refusal};

/// A refusal for a fact the decomposition needs and inference did not establish.
pub(super) fn unknown<T>(reason: impl Into<String>) -> Result<T, Unsupported> {
    Err(Refusal::new(Cause::UnknownFact, reason.into()))
}

/// A rank-0 int64 constant.
pub(super) fn i64_scalar(rw: &mut Rw, hint: &str, v: i64) -> PValue {
    rw.p.initializer(
        hint,
        TensorProto {
            dims: vec![],
            data_type: Some(dtype::INT64),
            raw_data: Some(v.to_le_bytes().to_vec().into()),
            ..Default::default()
        },
    )
}

/// Dimension `axis` of `x` as a rank-0 int64 value: a constant when inference knows it.
pub(super) fn dim_scalar(rw: &mut Rw, x: PValue, axis: i64, known: Option<i64>) -> PValue {
    if let Some(d) = known {
        return i64_scalar(rw, "dim", d);
    }
    let shape = rw.op("Shape", &[x], &[]);
    let d = rw.slice(shape, &[axis], &[axis + 1], &[0]);
    to_scalar(rw, d)
}

/// Reshape a one-element tensor to rank 0.
pub(super) fn to_scalar(rw: &mut Rw, x: PValue) -> PValue {
    let empty = rw.ints("scalar_shape", &[]);
    rw.op("Reshape", &[x, empty], &[])
}

/// `0, 1, ..., n - 1` (int64) for a rank-0 int64 `n`.
pub(super) fn range(rw: &mut Rw, n: PValue) -> PValue {
    let zero = i64_scalar(rw, "zero", 0);
    let one = i64_scalar(rw, "one", 1);
    rw.op("Range", &[zero, n, one], &[])
}

/// Rows `pos` (int64, any shape) of a `[max_position, d]` cache: `pos.shape + [d]`.
pub(super) fn cache_rows(rw: &mut Rw, cache: PValue, pos: PValue) -> PValue {
    let idx = rw.cast(pos, dtype::INT32);
    rw.op("Gather", &[cache, idx], &[("axis", AttrValue::Int(0))])
}

/// What a rotation needs to know of the head: its size, the rotated channels, the layout.
#[derive(Clone, Copy)]
pub(super) struct Rotation {
    pub head: i64,
    pub rotary: i64,
    pub interleaved: bool,
}

/// The rotation itself on `x` (last axis `head`, of rank `rank`), with `cos`/`sin` broadcastable
/// to `x`'s shape with a last axis of `rotary / 2`. All in one element type.
pub(super) fn rotate(
    rw: &mut Rw,
    x: PValue,
    cos: PValue,
    sin: PValue,
    rot: Rotation,
    rank: usize,
) -> Result<PValue, Unsupported> {
    let Rotation {
        head,
        rotary,
        interleaved,
    } = rot;
    let half = rotary / 2;
    let rest = (rotary < head).then(|| rw.slice(x, &[rotary], &[head], &[-1]));
    let rotated = if interleaved {
        let xr = if rotary < head {
            rw.slice(x, &[0], &[rotary], &[-1])
        } else {
            x
        };
        // [.., rotary] -> [.., rotary / 2, 2]: the pairs on the last axis.
        let mut pairs = vec![0i64; rank - 1];
        pairs.extend([half, 2]);
        let xp = rw.reshape(xr, &pairs)?;
        let a = rw.slice(xp, &[0], &[1], &[-1]);
        let b = rw.slice(xp, &[1], &[2], &[-1]);
        let c = rw.unsqueeze(cos, &[-1]);
        let s = rw.unsqueeze(sin, &[-1]);
        let (ya, yb) = rotate_pair(rw, a, b, c, s);
        let y = rw.op("Concat", &[ya, yb], &[("axis", AttrValue::Int(-1))]);
        let mut back = vec![0i64; rank - 1];
        back.push(rotary);
        rw.reshape(y, &back)?
    } else {
        let a = rw.slice(x, &[0], &[half], &[-1]);
        let b = rw.slice(x, &[half], &[rotary], &[-1]);
        let (ya, yb) = rotate_pair(rw, a, b, cos, sin);
        rw.op("Concat", &[ya, yb], &[("axis", AttrValue::Int(-1))])
    };
    Ok(match rest {
        Some(r) => rw.op("Concat", &[rotated, r], &[("axis", AttrValue::Int(-1))]),
        None => rotated,
    })
}

/// `(a c - b s, b c + a s)`.
fn rotate_pair(rw: &mut Rw, a: PValue, b: PValue, c: PValue, s: PValue) -> (PValue, PValue) {
    let ac = rw.op("Mul", &[a, c], &[]);
    let bs = rw.op("Mul", &[b, s], &[]);
    let ya = rw.op("Sub", &[ac, bs], &[]);
    let bc = rw.op("Mul", &[b, c], &[]);
    let as_ = rw.op("Mul", &[a, s], &[]);
    let yb = rw.op("Add", &[bc, as_], &[]);
    (ya, yb)
}

/// `rotate` in float for a float16/bfloat16 `x` (cast once each way), directly for float.
pub(super) fn rotate_in_float(
    rw: &mut Rw,
    x: PValue,
    cos: PValue,
    sin: PValue,
    dt: i32,
    rot: Rotation,
    rank: usize,
) -> Result<PValue, Unsupported> {
    if dt == dtype::FLOAT || dt == dtype::DOUBLE {
        return rotate(rw, x, cos, sin, rot, rank);
    }
    let xf = rw.cast(x, dtype::FLOAT);
    let cf = rw.cast(cos, dtype::FLOAT);
    let sf = rw.cast(sin, dtype::FLOAT);
    let y = rotate(rw, xf, cf, sf, rot, rank)?;
    Ok(rw.cast(y, dt))
}

/// The half rotary dimension: dimension 1 of the cos and sin caches, which must agree.
pub(super) fn cache_half(rw: &Rw, cos: usize, sin: usize) -> Result<i64, Unsupported> {
    for i in [cos, sin] {
        match rw.in_facts(i).rank() {
            Some(2) => {}
            Some(r) => {
                return unsupported(format!("input {i} (a cos/sin cache) has rank {r}, not 2"))
            }
            None => return unknown(format!("the rank of input {i} (cos/sin cache) is unknown")),
        }
    }
    match (rw.in_facts(cos).dim(1), rw.in_facts(sin).dim(1)) {
        (Some(c), Some(s)) if c == s && c > 0 => Ok(c),
        (Some(c), Some(s)) if c != s => unsupported(format!(
            "the cos and sin caches differ in width ({c} and {s})"
        )),
        (Some(_), Some(_)) => unsupported("an empty cos/sin cache"),
        _ => unknown("the width of the cos/sin caches is unknown (the rotary dimension)"),
    }
}

/// com.microsoft RotaryEmbedding: input `[B, S, hidden]` or `[B, N, S, H]`.
pub fn rotary_embedding(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[
        "interleaved",
        "num_heads",
        "rotary_embedding_dim",
        "is_packed_batching",
        "scale",
    ])?;
    if rw.opset < 11 {
        return unsupported(format!(
            "RotaryEmbedding needs opset >= 11 (Range), the model has {}",
            rw.opset
        ));
    }
    if rw.attr_i("is_packed_batching", 0) != 0 {
        return unsupported("packed (ragged) batching (is_packed_batching=1)");
    }
    let x = rw.need(0, "input")?;
    let pos = rw.need(1, "position_ids")?;
    let cos = rw.need(2, "cos_cache")?;
    let sin = rw.need(3, "sin_cache")?;
    let dt = rw.float_dtype(0)?;
    let interleaved = rw.attr_i("interleaved", 0) != 0;
    let num_heads = rw.attr_i("num_heads", 0);
    let rd_attr = rw.attr_i("rotary_embedding_dim", 0);
    if num_heads < 0 || rd_attr < 0 {
        return unsupported("negative num_heads or rotary_embedding_dim");
    }
    if rd_attr > 0 && num_heads == 0 {
        return unsupported("rotary_embedding_dim is set without num_heads");
    }
    let half = cache_half(&rw, 2, 3)?;
    let xf = rw.in_facts(0);
    let rank = rw.rank(0, "RotaryEmbedding layout")?;
    // Head size, and the sequence axis of the input.
    let (head, seq_axis) = match rank {
        4 => match xf.dim(3) {
            Some(h) => (h, 2usize),
            None => return unknown("the head size (dimension 3 of the input) is unknown"),
        },
        3 => {
            if num_heads > 0 {
                match xf.dim(2) {
                    Some(d) if d % num_heads == 0 => (d / num_heads, 1),
                    Some(d) => {
                        return unsupported(format!(
                            "hidden size {d} is not a multiple of {num_heads} heads"
                        ))
                    }
                    None => {
                        return unknown("the hidden size (dimension 2 of the input) is unknown")
                    }
                }
            } else {
                (2 * half, 1)
            }
        }
        r => return unsupported(format!("input of rank {r} (only 3-D and 4-D)")),
    };
    let rotary = if rd_attr > 0 { rd_attr } else { head };
    if rotary != 2 * half {
        return unsupported(format!(
            "the rotary dimension {rotary} does not match the caches' width {half} (x2)"
        ));
    }
    if rotary > head || rotary % 2 != 0 {
        return unsupported(format!("rotary dimension {rotary} for head size {head}"));
    }
    if let Some(d) = xf.dim(2).filter(|_| rank == 3) {
        if d % head != 0 {
            return unsupported(format!(
                "hidden size {d} is not a multiple of head size {head}"
            ));
        }
    }
    // Positions [B or 1, S].
    let positions = match rw.in_facts(1).rank() {
        Some(2) => pos,
        Some(1) => {
            if rw.in_facts(1).dim(0).is_some_and(|d| d != 1) {
                return unsupported("1-D position_ids with more than one element");
            }
            let s = dim_scalar(&mut rw, x, seq_axis as i64, xf.dim(seq_axis));
            let r = range(&mut rw, s);
            let r = rw.unsqueeze(r, &[0]);
            rw.op("Add", &[r, pos], &[])
        }
        Some(r) => return unsupported(format!("position_ids of rank {r}")),
        None => return unknown("the rank of position_ids is unknown (offset or per-token)"),
    };
    if rw.in_facts(1).dtype.is_some_and(|t| t != dtype::INT64) {
        return unsupported("position_ids must be int64");
    }
    let c = cache_rows(&mut rw, cos, positions);
    let s = cache_rows(&mut rw, sin, positions);
    // Cos/sin [B|1, S, d/2] against the heads: axis 2 of [B, S, N, H], axis 1 of [B, N, S, H].
    let (c, s) = if rank == 3 {
        (rw.unsqueeze(c, &[2]), rw.unsqueeze(s, &[2]))
    } else {
        (rw.unsqueeze(c, &[1]), rw.unsqueeze(s, &[1]))
    };
    let x4 = if rank == 3 {
        rw.reshape(x, &[0, 0, -1, head])?
    } else {
        x
    };
    let rot = Rotation {
        head,
        rotary,
        interleaved,
    };
    let y = rotate_in_float(&mut rw, x4, c, s, dt, rot, 4)?;
    let y = if rank == 3 {
        rw.reshape(y, &[0, 0, -1])?
    } else {
        y
    };
    rw.finish(&[(0, y)])
}
