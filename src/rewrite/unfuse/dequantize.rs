//! Blocked `DequantizeLinear` (opset 21, `block_size` > 0) in operators that a provider whose own
//! `DequantizeLinear` ignores `block_size` runs: DirectML's kernel never reads the attribute and
//! broadcasts a `[.., K / block_size, ..]` scale elementwise (`runtimes/deficient.tsv`,
//! docs/hazards.md), so the node is written without it.
//!
//! The operator (Operators.md, DequantizeLinear-21): `y = (x - zero_point) * scale`, where the
//! scale and zero point of element `i` along `axis` are those of block `i / block_size` (the last
//! block may be short: K need not be a multiple of `block_size`). ONNX Runtime's CPU kernel
//! (`DequantizeLinearApply` in `core/providers/cpu/quantization/quantize_linear.cc`, read at
//! microsoft/onnxruntime@0703da1) computes each element as
//! `OutT(float(int32(x) - int32(zp)) * float(scale))`: the integer difference, converted to
//! float32 (exactly: it is at most 255 in magnitude), one float32 product, and for a float16
//! scale one conversion of that product to float16.
//!
//! The form:
//!
//! * **data**: a constant 4-bit `x` is unpacked here into an int8 initializer of the same shape
//!   holding `x - zero_point` (at most 15 in magnitude; a constant 4-bit zero point is folded
//!   in, an absent one is 0). Those bytes are written into the model: one byte per element,
//!   twice the packed size. An 8-bit `x` (constant or not) is read as it is; its zero point, if
//!   any, is subtracted at run time after both are cast to float32.
//! * **scale** (and an 8-bit zero point) expanded along `axis` to `x`'s shape:
//!   `Unsqueeze(axis + 1)`, `Expand` to `block_size` copies, `Reshape` back to rank, and a
//!   `Slice` to K where K is not a multiple of `block_size`. A float16 scale is cast to float32
//!   first (exact).
//! * `Cast(x → float32)`, `Sub(zero point)`, `Mul(scale)`, then `Cast(→ float16)` for a float16
//!   scale.
//!
//! Each step is the kernel's own arithmetic: the cast and the subtraction are exact (integers
//! far below 2^24), the product is the one float32 rounding the kernel makes, and for float16
//! the float32 product of a float16 scale (11 significant bits) and an integer of at most 9 bits
//! is exact, so the final cast is the kernel's one rounding to float16. Class `exact` for a
//! float32 scale (bit-identical on ONNX Runtime CPU, alone and ahead of a MatMul:
//! `tests/unfuse_blocked_dequantize.rs`). For a float16 scale the dequantized tensor itself is
//! bit-identical too, but where it feeds an operator that ONNX Runtime's CPU runs in float32
//! (it has no float16 MatMul or Mul kernel and inserts casts around them), the session drops the
//! form's last `Cast(float32 -> float16)` together with its own `Cast(float16 -> float32)` even at
//! `ORT_DISABLE_ALL` (seen in the optimized model it saves), so the MatMul reads the weight
//! before its rounding to float16: measured at 0.375 (43 of 128 elements differ; the output's
//! scale 246) on `mm_uint4_zp_b32_f16` of `tools/make_blocked_dq.py`. The patch declares
//! `rounding` there.
//!
//! Every operator of the form is checked against the target's provider
//! ([`crate::runtime::capability`]): its kernel at the schema since-version of the model's
//! opset, with the element types it is given here. Where the provider lacks one (a 4-bit `x` or
//! zero point computed at run time needs a Cast from int4, which DirectML does not register),
//! the node is refused with the reason and the target's fallback (the CPU) takes it. Refused
//! too: a non-blocked node (nothing to do), shapes that are not known, element types other than
//! int4/uint4/int8/uint8 with float32 or float16 scales, and a payload that cannot be read.

use crate::io::external::{external_ref, is_external};
use crate::ir::{Graph, NodeId};
use crate::proto::TensorProto;
use crate::rewrite::pass::{Cause, Refusal};
use crate::rewrite::{Exactness, PValue, Patch};
use crate::tensor::{dtype, dtype_name};

use super::needs::Needs;
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// The payload of a constant 4-bit tensor: `raw_data`, the packed bytes in `int32_data`, or
/// external data read through the batch's resolver.
fn packed_bytes(rw: &Rw, t: &crate::ir::TensorView, what: &str) -> Result<Vec<u8>, Unsupported> {
    let count = t.dims.iter().try_fold(1usize, |a, &d| {
        usize::try_from(d).ok().and_then(|d| a.checked_mul(d))
    });
    let Some(count) = count else {
        return unsupported(format!("{what} has shape {:?}", t.dims));
    };
    let want = count.div_ceil(2);
    let bytes: Vec<u8> = if is_external(t.rest) {
        let ext = rw.ctx.external.or(rw.ctx.unpack.map(|u| u.data));
        let read = ext.and_then(|e| e.read(&external_ref(t.rest).ok()?).ok());
        match read {
            Some(b) => b.to_vec(),
            None => {
                return Err(Refusal::new(
                    Cause::Limit,
                    format!(
                        "{what} is stored as external data, which the rewrite was given no file to read"
                    ),
                ))
            }
        }
    } else if let Some(raw) = t.raw_data {
        raw.to_vec()
    } else {
        t.rest.int32_data.iter().map(|&x| x as u8).collect()
    };
    if bytes.len() != want {
        return unsupported(format!(
            "{what} holds {} bytes where {want} are expected",
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// Element `i` of a packed 4-bit tensor (the first in the low bits), as an integer.
fn nibble(bytes: &[u8], i: usize, signed: bool) -> i32 {
    let v = (bytes[i / 2] >> ((i % 2) * 4)) & 0x0f;
    if signed && v >= 8 {
        v as i32 - 16
    } else {
        v as i32
    }
}

/// `[.., blocks, ..]` (blocks along `axis`) repeated `block` times along `axis` and cut to
/// `k`: the value of every element of `x`'s shape `dims`.
fn expand_blocks(
    rw: &mut Rw,
    v: PValue,
    dims: &[i64],
    axis: usize,
    block: i64,
    blocks: i64,
) -> Result<PValue, Unsupported> {
    let k = dims[axis];
    let unsq = rw.unsqueeze(v, &[axis as i64 + 1]);
    let mut wide: Vec<i64> = dims.to_vec();
    wide[axis] = blocks;
    wide.insert(axis + 1, block);
    let shape = rw.ints("block_shape", &wide);
    let expanded = rw.op("Expand", &[unsq, shape], &[]);
    let mut flat: Vec<i64> = dims.to_vec();
    flat[axis] = blocks * block;
    let flat_v = rw.reshape(expanded, &flat)?;
    Ok(if blocks * block != k {
        rw.slice(flat_v, &[0], &[k], &[axis as i64])
    } else {
        flat_v
    })
}

/// `DequantizeLinear(x, scale, zero_point?)` with `block_size` > 0, as the form above.
pub fn blocked_dequantize_linear(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["axis", "block_size", "output_dtype"])?;
    let block = rw.attr_i("block_size", 0);
    if block <= 0 {
        return unsupported("not a blocked DequantizeLinear (block_size is 0): nothing to do");
    }
    let x_dt = match rw.in_facts(0).dtype {
        Some(t @ (dtype::INT4 | dtype::UINT4 | dtype::INT8 | dtype::UINT8)) => t,
        Some(t) => {
            return unsupported(format!(
                "x of element type {} (int4, uint4, int8 or uint8 are handled)",
                dtype_name(t)
            ))
        }
        None => {
            return Err(Refusal::new(
                Cause::UnknownFact,
                "x's element type is unknown".to_string(),
            ))
        }
    };
    let s_dt = match rw.in_facts(1).dtype {
        Some(t @ (dtype::FLOAT | dtype::FLOAT16)) => t,
        Some(t) => {
            return unsupported(format!(
                "a scale of element type {} (ONNX Runtime's CPU kernel takes float32 and float16)",
                dtype_name(t)
            ))
        }
        None => {
            return Err(Refusal::new(
                Cause::UnknownFact,
                "the scale's element type is unknown".to_string(),
            ))
        }
    };
    let out_dt = rw.attr_i("output_dtype", 0);
    if out_dt != 0 && out_dt != s_dt as i64 {
        return unsupported(format!(
            "output_dtype {out_dt} differs from the scale's type {}",
            dtype_name(s_dt)
        ));
    }
    let Some(dims) = rw.in_facts(0).dims_known() else {
        return Err(Refusal::new(
            Cause::UnknownFact,
            "x's shape is not known: the scale is expanded to it".to_string(),
        ));
    };
    let rank = dims.len() as i64;
    let axis = rw.attr_i("axis", 1);
    if rank == 0 || axis < -rank || axis >= rank {
        return unsupported(format!("axis {axis} for x of rank {rank}"));
    }
    let axis = if axis < 0 { axis + rank } else { axis } as usize;
    let k = dims[axis];
    let blocks = (k + block - 1) / block;
    let mut s_dims = dims.clone();
    s_dims[axis] = blocks;
    match rw.in_facts(1).dims_known() {
        Some(s) if s == s_dims => {}
        Some(s) => {
            return unsupported(format!(
                "the scale has shape {s:?}, not {s_dims:?} (x {dims:?}, axis {axis}, block_size {block})"
            ))
        }
        None => {
            return Err(Refusal::new(
                Cause::UnknownFact,
                "the scale's shape is not known".to_string(),
            ))
        }
    }
    let zp_id = rw.input_id(2);
    if let Some(z) = zp_id {
        let zi = rw.ctx.facts.info(z);
        if zi.dtype.is_some_and(|t| t != x_dt) {
            return unsupported("the zero point's type differs from x's");
        }
        if zi.dims_known().is_some_and(|d| d != s_dims) {
            return unsupported("the zero point's shape differs from the scale's");
        }
    }
    let four_bit = matches!(x_dt, dtype::INT4 | dtype::UINT4);
    let x_const = rw
        .input_id(0)
        .and_then(|v| crate::rewrite::consts::constant_tensor(g, v));
    let zp_const = zp_id.and_then(|v| crate::rewrite::consts::constant_tensor(g, v));
    let mut needs = Needs::default();
    let f32_ = dtype::FLOAT;

    // The integers, and the zero point still to subtract (as float32, expanded).
    let (ints, ints_dt, zp_left) = match (&x_const, four_bit, zp_id.is_none() || zp_const.is_some())
    {
        (Some(xt), true, true) => {
            // x - zp, unpacked here into int8.
            let signed = x_dt == dtype::INT4;
            let count: usize = dims.iter().map(|&d| d as usize).product();
            // External data is unpacked only within the bytes this batch may add to the output
            // (its size bound), as the unpacked MatMulNBits form is.
            if is_external(xt.rest) && rw.ctx.external.is_none() {
                if let Some(u) = rw.ctx.unpack {
                    let add = (count - count.div_ceil(2)) as u64;
                    if u.spent.get().saturating_add(add) > u.limit {
                        return Err(Refusal::new(
                            Cause::Limit,
                            format!(
                                "unpacking x ({count} 4-bit elements in external data) to int8 \
                                 would add {add} bytes, past the {} this compile may add ({} \
                                 added already; the output's size bound, which --allow-growth \
                                 raises)",
                                u.limit,
                                u.spent.get()
                            ),
                        ));
                    }
                    u.spent.set(u.spent.get() + add);
                }
            }
            let xb = packed_bytes(&rw, xt, "x")?;
            let zb = match &zp_const {
                Some(zt) => Some(packed_bytes(&rw, zt, "the zero point")?),
                None => None,
            };
            let inner: usize = dims[axis + 1..].iter().map(|&d| d as usize).product();
            let outer_k = k as usize;
            let mut out = Vec::with_capacity(count);
            for i in 0..count {
                let mut v = nibble(&xb, i, signed);
                if let Some(zb) = &zb {
                    // The element's block: the same index with axis / block_size.
                    let (o, rest) = (i / (outer_k * inner), i % (outer_k * inner));
                    let (kk, j) = (rest / inner, rest % inner);
                    let zi = (o * blocks as usize + kk / block as usize) * inner + j;
                    v -= nibble(zb, zi, signed);
                }
                out.push(v as i8 as u8);
            }
            let t = TensorProto {
                dims: dims.clone(),
                data_type: Some(dtype::INT8),
                raw_data: Some(out.into()),
                ..Default::default()
            };
            (rw.p.initializer("unpacked", t), dtype::INT8, None)
        }
        _ => {
            // x as it is (8-bit; a 4-bit x computed at run time needs a Cast from int4, which
            // the check below asks the provider for).
            let x = rw.need(0, "x")?;
            let zp = zp_id.and_then(|_| rw.input(2));
            (x, x_dt, zp)
        }
    };
    needs.add("Cast", &[ints_dt], &[f32_]);
    let mut y = rw.cast(ints, f32_);
    if let Some(zp) = zp_left {
        needs.add("Unsqueeze", &[f32_, dtype::INT64], &[f32_]);
        needs.add("Expand", &[f32_, dtype::INT64], &[f32_]);
        needs.add("Reshape", &[f32_, dtype::INT64], &[f32_]);
        needs.add("Sub", &[f32_, f32_], &[f32_]);
        let zf = rw.cast(zp, f32_);
        let ze = expand_blocks(&mut rw, zf, &dims, axis, block, blocks)?;
        y = rw.op("Sub", &[y, ze], &[]);
    }
    let mut scale = rw.need(1, "x_scale")?;
    if s_dt == dtype::FLOAT16 {
        needs.add("Cast", &[s_dt], &[f32_]);
        scale = rw.cast(scale, f32_);
    }
    needs.add("Unsqueeze", &[f32_, dtype::INT64], &[f32_]);
    needs.add("Expand", &[f32_, dtype::INT64], &[f32_]);
    needs.add("Reshape", &[f32_, dtype::INT64], &[f32_]);
    if blocks * block != k {
        needs.add(
            "Slice",
            &[f32_, dtype::INT64, dtype::INT64, dtype::INT64],
            &[f32_],
        );
    }
    let se = expand_blocks(&mut rw, scale, &dims, axis, block, blocks)?;
    needs.add("Mul", &[f32_, f32_], &[f32_]);
    y = rw.op("Mul", &[y, se], &[]);
    if s_dt == dtype::FLOAT16 {
        needs.add("Cast", &[f32_], &[s_dt]);
        y = rw.cast(y, s_dt);
        // ONNX Runtime's CPU may drop this cast with one of its own (see the module's text).
        rw.p.exactness = Exactness::Rounding;
    }
    needs.check(ctx, rw.opset, "the form without block_size")?;
    rw.finish(&[(0, y)])
}

#[cfg(test)]
mod tests {
    use super::nibble;

    #[test]
    fn nibbles_are_low_first_and_signed_for_int4() {
        let b = [0x8f_u8, 0x17];
        assert_eq!(nibble(&b, 0, false), 15);
        assert_eq!(nibble(&b, 1, false), 8);
        assert_eq!(nibble(&b, 0, true), -1);
        assert_eq!(nibble(&b, 1, true), -8);
        assert_eq!(nibble(&b, 2, true), 7);
        assert_eq!(nibble(&b, 3, true), 1);
    }
}
