//! QAttention (ONNX Runtime contrib operator): com.microsoft Attention whose input projection
//! is quantized. Inputs: `input` uint8 `[B, S, D]`, `weight` uint8/int8 `[D, 3H]`, `bias`
//! float `[3H]`, `input_scale` (per tensor), `weight_scale` (per tensor or per column `[3H]`),
//! `mask_index` int32, `input_zero_point` (per tensor), `weight_zero_point` (per tensor or per
//! column), `past` `[2, B, N, P, H/N]`; outputs `output` `[B, S, H]` and `present`.
//!
//! As ONNX Runtime 1.32's CPU kernel computes it (`contrib_ops/cpu/quantization/
//! attention_quant.cc`): the projection is an integer GEMM, int32 accumulation of
//! `(input - input_zp) * (weight - weight_zp)`, whose output processor turns each accumulator
//! into `float(acc) * dequant + bias`, where `dequant = weight_scale * input_scale` is computed
//! once per tensor (or per column) in float32. Here: `MatMulInteger` with both zero points (its
//! per-column B zero point is the kernel's), `Cast` to float, `Mul` by `weight_scale *
//! input_scale` (one float32 Mul), `Add` the bias, then Q, K, V sliced from the `[B, S, 3H]`
//! result and the float attention of [`super::attention`] (no past) or
//! [`super::attention_past`] (GPT-2 `past` -> `present`): the same scores, masks and softmax
//! as the Attention decomposition measured against the same kernel. The 2-D "dummy" mask
//! `[B, 1]` / `[1, 1]`, which the kernel ignores, is ignored.
//!
//! Refused with a reason (the node then stays on ONNX Runtime's CPU kernel): int8 `input`
//! and float16 (the CPU kernel has neither), rotary embedding, a shared past/present buffer,
//! an omitted bias, scales or zero points of other shapes, a `present` output read without a
//! `past` input, below opset 10 (MatMulInteger; 11 with past state, for Range).

use crate::ir::{Graph, NodeId};
use crate::rewrite::Patch;
use crate::tensor::dtype;

use super::attention::{causal_keep, check_heads, dummy_mask, key_mask, sdpa, split_slices};
use super::attention::{Heads, Terms};
use super::attention_past::{check_opset, packed_past_step, Packed};
use super::quant::{b_scale_ok, need_f32, need_opset10, per_tensor, quant_dtype};
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// A per-column parameter (scale or zero point, input `i`): one element, or `[3H]`.
fn per_column_ok(rw: &Rw, i: usize, what: &str, cols: i64) -> Result<(), Unsupported> {
    let f = rw.in_facts(i);
    match (f.rank(), f.dim(0)) {
        (Some(0), _) => Ok(()),
        (Some(1), Some(n)) if n == 1 || n == cols => Ok(()),
        (Some(1), Some(n)) => unsupported(format!(
            "{what} (input {i}) has {n} elements: QAttention takes one, or one per weight column ({cols})"
        )),
        (Some(1), None) => unsupported(format!(
            "{what} (input {i}) has a dynamic length (per tensor or per column?)"
        )),
        (Some(r), _) => unsupported(format!(
            "{what} (input {i}) of rank {r} (only a scalar or a 1-D tensor)"
        )),
        (None, _) => unsupported(format!("the rank of {what} (input {i}) is unknown")),
    }
}

/// com.microsoft QAttention.
pub fn qattention(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[
        "num_heads",
        "unidirectional",
        "scale",
        "mask_filter_value",
        "do_rotary",
        "past_present_share_buffer",
    ])?;
    let heads = check_heads(&rw)?;
    need_opset10(&rw)?;
    if rw.attr_i("do_rotary", 0) != 0 {
        return unsupported("rotary embedding (do_rotary=1)");
    }
    if rw.attr_i("past_present_share_buffer", 0) != 0 {
        return unsupported("a shared past/present buffer (past_present_share_buffer=1)");
    }
    let x = rw.need(0, "input")?;
    let w = rw.need(1, "weight")?;
    if quant_dtype(&rw, 0)? != dtype::UINT8 {
        return unsupported(
            "an int8 input: ONNX Runtime's CPU kernel takes uint8 input only (quantize the activations as uint8)",
        );
    }
    quant_dtype(&rw, 1)?;
    if rw.input(2).is_none() {
        return unsupported("no bias (QAttention's kernel requires one)");
    }
    let bias = need_f32(&rw, 2, "bias")?;
    let x_scale = need_f32(&rw, 3, "input_scale")?;
    per_tensor(&rw, 3, "input_scale")?;
    let w_scale = need_f32(&rw, 4, "weight_scale")?;
    b_scale_ok(&rw, 4)?;
    if rw.rank(0, "input layout")? != 3 {
        return unsupported("input must be 3-D (batch, sequence, input_hidden)");
    }
    if rw.rank(1, "weight layout")? != 2 {
        return unsupported("weight must be 2-D (input_hidden, 3 * hidden)");
    }
    let hidden = match rw.in_facts(1).dim(1) {
        Some(t) if t > 0 && t % 3 == 0 => t / 3,
        Some(t) => {
            return unsupported(format!(
                "weight has {t} columns, not 3 * hidden (Q, K and V of one size)"
            ))
        }
        None => return unsupported("the weight's column count is unknown"),
    };
    if hidden % heads != 0 {
        return unsupported(format!(
            "hidden size {hidden} is not a multiple of {heads} heads"
        ));
    }
    per_column_ok(&rw, 4, "weight_scale", 3 * hidden)?;
    let x_zp = rw.input(6);
    if x_zp.is_some() {
        per_tensor(&rw, 6, "input_zero_point")?;
        if rw.in_facts(6).dtype.is_some_and(|t| t != dtype::UINT8) {
            return unsupported("input_zero_point is not uint8 (the input's type)");
        }
    }
    let w_zp = rw.input(7);
    if w_zp.is_some() {
        per_column_ok(&rw, 7, "weight_zero_point", 3 * hidden)?;
        let (zt, wt) = (rw.in_facts(7).dtype, rw.in_facts(1).dtype);
        if zt.is_some() && wt.is_some() && zt != wt {
            return unsupported("weight_zero_point's type is not the weight's");
        }
    }
    let past = rw.input(8);
    if past.is_some() {
        check_opset(&rw, "QAttention")?;
        if rw.rank(8, "past layout")? != 5 {
            return unsupported("past must be 5-D [2, batch, heads, past, head_size]");
        }
        if rw.in_facts(8).dtype.is_some_and(|t| t != dtype::FLOAT) {
            return unsupported("past is not float32");
        }
    }

    // The projection: int32 accumulation, then `float(acc) * (weight_scale * input_scale)
    // + bias`, the scale product rounded once in float32 as the kernel computes it.
    let acc = rw.op_opt("MatMulInteger", &[Some(x), Some(w), x_zp, w_zp], vec![]);
    let accf = rw.cast(acc, dtype::FLOAT);
    let dequant = rw.op("Mul", &[w_scale, x_scale], &[]);
    let scaled = rw.op("Mul", &[accf, dequant], &[]);
    let qkv = rw.op("Add", &[scaled, bias], &[]);
    let [q, k, v] = split_slices(&mut rw, qkv, [hidden; 3]);

    if let Some(past) = past {
        let st = Packed {
            past: (8, past),
            mask: 5,
            bias: None,
            heads,
            qk_hidden: hidden,
            work: dtype::FLOAT,
            dt: dtype::FLOAT,
        };
        let (y, present) = packed_past_step(&mut rw, [q, k, v], st)?;
        return rw.finish(&[(0, y), (1, present)]);
    }
    if rw.used(1) {
        return unsupported("a present output without a past input");
    }
    let s = rw.in_facts(0).dim(1);
    let keep = if rw.input(5).is_some() && !dummy_mask(&rw, 5) {
        Some(key_mask(&mut rw, 5, s)?)
    } else {
        None
    };
    let causal = if rw.attr_i("unidirectional", 0) != 0 && s != Some(1) {
        Some(causal_keep(&mut rw, s)?)
    } else {
        None
    };
    let terms = Terms {
        bias: None,
        keep,
        causal,
        filter: rw.attr_f("mask_filter_value", -10000.0),
    };
    let scale = rw.attr("scale").and_then(|a| a.f()).filter(|&s| s != 0.0);
    let h = Heads {
        q,
        k,
        v,
        num_heads: heads,
        qk_hidden: Some(hidden),
    };
    let y = sdpa(&mut rw, h, scale, terms, dtype::FLOAT)?;
    rw.finish(&[(0, y)])
}
