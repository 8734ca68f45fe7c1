//! The quantized family: the com.microsoft operators that ONNX Runtime's quantization tools
//! (`quantize_dynamic`, `quantize_static` in QOperator and QDQ formats) and its graph optimizer
//! write, decomposed into standard ONNX quantization operators (opset >= 10).
//!
//! Two shapes of decomposition, chosen per operator so the result stays within the operator's
//! own quantization error:
//!
//! * **Integer products** (DynamicQuantizeMatMul, MatMulIntegerToFloat, QGemm): the int32
//!   accumulator is computed exactly by `MatMulInteger` (with the zero points), the bias (int32
//!   for QGemm) is added to it, and the scales are applied in float32 in the order ONNX Runtime's
//!   kernels apply them (`contrib_ops/cpu/quantization/dynamic_quantize_matmul.cc`,
//!   `quant_gemm.cc`: `acc * (a_scale * b_scale) + bias`, `(acc + C) * (alpha * a_scale *
//!   b_scale / y_scale)` then round-half-to-even plus the zero point). DynamicQuantizeMatMul
//!   quantizes A with `DynamicQuantizeLinear`, whose definition (uint8, range widened to hold 0,
//!   `scale = (max - min) / 255`, zero point rounded half to even) is the one the kernel uses.
//!   Per-column B scales (`[N]`) broadcast over the last axis; per-column B zero points are
//!   `MatMulInteger`'s own. Tolerance: exact up to float32 rounding of the last multiply-add
//!   (the kernel may fuse it): a few ulp of the output, and at most one quantization step where
//!   the output is requantized.
//! * **Element-wise, pooling and softmax ops** (QLinearAdd, QLinearMul, QLinearSigmoid,
//!   QLinearLeakyRelu, QLinearSoftmax, QLinearAveragePool, QLinearGlobalAveragePool,
//!   QLinearConcat): `DequantizeLinear` of each input, the float operator, `QuantizeLinear` of
//!   the result (ContribOperators.md defines each as exactly that composition). ONNX Runtime
//!   evaluates some through lookup tables or fixed-point paths; the float result differs from
//!   theirs by less than one step before rounding, so the quantized output differs by **at most
//!   one quantization step** (of the output's scale) per element.
//! * **QLinearConv (com.microsoft)** is ONNX `QLinearConv` with `channels_last` (NHWC input and
//!   output): a Transpose on each side of the standard operator, bit-exact.
//! * **DynamicQuantizeLSTM** is an `LSTM` on the dequantized weights, transposed from the
//!   contrib layout `[num_directions, input_size, 4*hidden]` (`[.., hidden, 4*hidden]` for R)
//!   to LSTM's `[num_directions, 4*hidden, input_size]`. The kernel also quantizes X and the
//!   hidden state to uint8 on every step; the decomposition keeps them in float, so it differs
//!   from ONNX Runtime by that activation quantization error (the float LSTM on the same
//!   weights is the more exact of the two). Per-tensor (`[num_directions]`) and per-channel
//!   (`[num_directions, 4*hidden]`) scales and zero points are handled with Cast/Sub/Mul, which
//!   needs no `axis` attribute (DequantizeLinear's axis needs opset 13).
//!
//! Opsets: QuantizeLinear, DequantizeLinear, MatMulInteger and QLinearConv exist from opset
//! 10; below it every operator here is refused (the fallback then keeps the node on the CPU).
//! Where a zero point is omitted, the quantized type is read from the data input and a zero of
//! that type is written (QuantizeLinear without a zero point would produce uint8).

use crate::ir::{Attribute, Graph, NodeId};
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::tensor::dtype;

use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};
use crate::rewrite::pass::{Cause, Refusal};

/// Refuse below opset 10 (no QuantizeLinear/DequantizeLinear/MatMulInteger/QLinearConv).
fn need_opset10(rw: &Rw) -> Result<(), Unsupported> {
    if rw.opset < 10 {
        return Err(Refusal::new(
            Cause::Limit,
            format!(
                "{} needs QuantizeLinear/DequantizeLinear/MatMulInteger (opset >= 10); the model imports opset {}",
                rw.node.op_type, rw.opset
            ),
        ));
    }
    Ok(())
}

/// The 8-bit element type of input `i` (uint8 or int8).
fn quant_dtype(rw: &Rw, i: usize) -> Result<i32, Unsupported> {
    match rw.in_facts(i).dtype {
        Some(t @ (dtype::UINT8 | dtype::INT8)) => Ok(t),
        Some(t) => unsupported(format!(
            "input {i} has element type {}, not uint8 or int8",
            crate::tensor::dtype_name(t)
        )),
        None => Err(Refusal::new(
            Cause::UnknownFact,
            format!("the element type of input {i} is unknown (uint8 or int8?)"),
        )),
    }
}

/// A scale or zero point that must be per-tensor: refuse a known shape with more than one
/// element.
fn per_tensor(rw: &Rw, i: usize, what: &str) -> Result<(), Unsupported> {
    if let Some(shape) = rw.in_facts(i).shape {
        let known: Option<i64> = shape.iter().map(|d| d.known()).product();
        if shape.len() > 1 || known.is_some_and(|n| n != 1) {
            return unsupported(format!("{what} (input {i}) is not per-tensor"));
        }
    }
    Ok(())
}

/// A zero of element type `dt` (a zero point).
fn zero_of(rw: &mut Rw, dt: i32) -> PValue {
    let t = crate::proto::TensorProto {
        dims: vec![],
        data_type: Some(dt),
        raw_data: Some(vec![0u8].into()),
        ..Default::default()
    };
    rw.p.initializer("zero_point", t)
}

/// `DequantizeLinear(x, scale, zp)` of the per-tensor quantized input at `x`, with its scale
/// and zero point at `s` and `zp`.
fn dequant(rw: &mut Rw, x: usize, s: usize, zp: usize) -> Result<PValue, Unsupported> {
    let xv = rw.need(x, "quantized input")?;
    let sv = rw.need(s, "scale")?;
    per_tensor(rw, s, "scale")?;
    per_tensor(rw, zp, "zero point")?;
    let ins = [Some(xv), Some(sv), rw.input(zp)];
    Ok(rw.op_opt("DequantizeLinear", &ins, vec![]))
}

/// `QuantizeLinear(y, scale, zp)` to the output's per-tensor parameters at `s` and `zp`; an
/// omitted zero point is a zero of `dt`.
fn quant(rw: &mut Rw, y: PValue, s: usize, zp: usize, dt: i32) -> Result<PValue, Unsupported> {
    let sv = rw.need(s, "output scale")?;
    per_tensor(rw, s, "output scale")?;
    per_tensor(rw, zp, "output zero point")?;
    let z = match rw.input(zp) {
        Some(z) => {
            if let Some(t) = rw.in_facts(zp).dtype {
                if t != dt {
                    return unsupported("the output zero point's type differs from the input's");
                }
            }
            z
        }
        None => zero_of(rw, dt),
    };
    Ok(rw.op("QuantizeLinear", &[y, sv, z], &[]))
}

/// The common frame of the one-input QLinear ops `(X, X_scale, X_zp, Y_scale, Y_zp)`:
/// dequantize, apply `f`, quantize.
fn unary(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
    attrs: &[&str],
    f: impl FnOnce(&mut Rw, PValue) -> Result<PValue, Unsupported>,
) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(attrs)?;
    need_opset10(&rw)?;
    let dt = quant_dtype(&rw, 0)?;
    let x = dequant(&mut rw, 0, 1, 2)?;
    let y = f(&mut rw, x)?;
    let q = quant(&mut rw, y, 3, 4, dt)?;
    rw.finish(&[(0, q)])
}

/// QLinearAdd / QLinearMul `(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)`:
/// `C = quantize(dequantize(A) op dequantize(B))`, numpy broadcasting.
fn binary(ctx: &UnfuseCtx, g: &Graph, n: NodeId, op: &str) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    need_opset10(&rw)?;
    let dt = quant_dtype(&rw, 0)?;
    if quant_dtype(&rw, 3)? != dt {
        return unsupported("A and B have different element types");
    }
    let a = dequant(&mut rw, 0, 1, 2)?;
    let b = dequant(&mut rw, 3, 4, 5)?;
    let c = rw.op(op, &[a, b], &[]);
    let q = quant(&mut rw, c, 6, 7, dt)?;
    rw.finish(&[(0, q)])
}

pub fn qlinear_add(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    binary(ctx, g, n, "Add")
}

pub fn qlinear_mul(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    binary(ctx, g, n, "Mul")
}

pub fn qlinear_sigmoid(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    unary(ctx, g, n, &[], |rw, x| Ok(rw.op("Sigmoid", &[x], &[])))
}

/// QLinearLeakyRelu: `alpha` defaults to 0.01 (as LeakyRelu's).
pub fn qlinear_leaky_relu(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    unary(ctx, g, n, &["alpha"], |rw, x| {
        let alpha = rw.attr_f("alpha", 0.01);
        Ok(rw.op("LeakyRelu", &[x], &[("alpha", AttrValue::Float(alpha))]))
    })
}

/// QLinearSoftmax: `axis` (default -1) with the Softmax semantics of the node's `opset`
/// attribute: before 13 the input is coerced to 2-D at `axis` (a softmax over the flattened
/// trailing axes), from 13 a softmax over `axis` alone.
pub fn qlinear_softmax(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    unary(ctx, g, n, &["axis", "opset"], |rw, x| {
        let axis = rw.attr_i("axis", -1);
        let Some(semantics) = rw.attr("opset").and_then(|a| a.i()) else {
            return unsupported("QLinearSoftmax without its 'opset' attribute");
        };
        if semantics < 13 {
            // softmax_flat picks the native operator before 13, Flatten/Softmax/Reshape after.
            return Ok(rw.softmax_flat(x, axis));
        }
        if rw.opset >= 13 {
            return Ok(rw.op("Softmax", &[x], &[("axis", AttrValue::Int(axis))]));
        }
        // Per-axis semantics at an older model opset: over the last axis the two agree;
        // elsewhere, move the axis last and back.
        let r = rw.rank(0, "QLinearSoftmax axis")? as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if a < 0 || a >= r {
            return unsupported(format!("axis {axis} out of range for rank {r}"));
        }
        if a == r - 1 {
            return Ok(rw.softmax_last(x));
        }
        let mut perm: Vec<i64> = (0..r).filter(|&i| i != a).collect();
        perm.push(a);
        let mut inv = vec![0i64; r as usize];
        for (i, &p) in perm.iter().enumerate() {
            inv[p as usize] = i as i64;
        }
        let t = rw.transpose(x, &perm);
        let s = rw.softmax_last(t);
        Ok(rw.transpose(s, &inv))
    })
}

/// Permutations between channels-last `[N, spatial..., C]` and channels-first for rank `r`.
fn nhwc_perms(r: usize) -> (Vec<i64>, Vec<i64>) {
    let r = r as i64;
    let mut to_first = vec![0, r - 1];
    to_first.extend(1..r - 1);
    let mut to_last = vec![0];
    to_last.extend(2..r);
    to_last.push(1);
    (to_first, to_last)
}

/// QLinearGlobalAveragePool: the mean over the spatial axes (`channels_last` puts the
/// channels last).
pub fn qlinear_global_average_pool(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
) -> Result<Patch, Unsupported> {
    unary(ctx, g, n, &["channels_last"], |rw, x| {
        if rw.attr_i("channels_last", 0) == 0 {
            return Ok(rw.op("GlobalAveragePool", &[x], &[]));
        }
        let r = rw.rank(0, "channels-last pooling")?;
        if r < 3 {
            return unsupported(format!("input of rank {r}"));
        }
        let axes: Vec<i64> = (1..r as i64 - 1).collect();
        Ok(rw.reduce("ReduceMean", x, &axes, true))
    })
}

/// QLinearAveragePool: AveragePool with the node's window attributes.
pub fn qlinear_average_pool(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    const WINDOW: &[&str] = &[
        "auto_pad",
        "ceil_mode",
        "count_include_pad",
        "kernel_shape",
        "pads",
        "strides",
    ];
    let mut known = WINDOW.to_vec();
    known.push("channels_last");
    unary(ctx, g, n, &known, |rw, x| {
        if rw.attr_i("ceil_mode", 0) != 0 && rw.opset < 10 {
            return unsupported("ceil_mode needs AveragePool-10");
        }
        let attrs = rw.copy_attrs(WINDOW);
        if rw.attr_i("channels_last", 0) == 0 {
            return Ok(rw.op_opt("AveragePool", &[Some(x)], attrs));
        }
        let r = rw.rank(0, "channels-last pooling")?;
        if r < 3 {
            return unsupported(format!("input of rank {r}"));
        }
        let (first, last) = nhwc_perms(r);
        let t = rw.transpose(x, &first);
        let p = rw.op_opt("AveragePool", &[Some(t)], attrs);
        Ok(rw.transpose(p, &last))
    })
}

/// QLinearConcat `(Y_scale, Y_zp, X0, X0_scale, X0_zp, X1, ...)`: each input dequantized with
/// its own parameters, concatenated on `axis`, quantized with Y's.
pub fn qlinear_concat(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["axis"])?;
    need_opset10(&rw)?;
    let Some(axis) = rw.attr("axis").and_then(|a| a.i()) else {
        return unsupported("QLinearConcat without 'axis'");
    };
    let count = rw.node.inputs.len();
    if count < 5 || !(count - 2).is_multiple_of(3) {
        return unsupported(format!(
            "{count} inputs (expected Y_scale, Y_zero_point and triples)"
        ));
    }
    let dt = quant_dtype(&rw, 2)?;
    let mut parts = Vec::new();
    for k in 0..(count - 2) / 3 {
        let i = 2 + 3 * k;
        if quant_dtype(&rw, i)? != dt {
            return unsupported("the inputs have different element types");
        }
        parts.push(dequant(&mut rw, i, i + 1, i + 2)?);
    }
    let c = rw.op("Concat", &parts, &[("axis", AttrValue::Int(axis))]);
    let q = quant(&mut rw, c, 0, 1, dt)?;
    rw.finish(&[(0, q)])
}

/// com.microsoft QLinearConv: ONNX QLinearConv, with `channels_last` meaning NHWC input and
/// output (the weights stay `[M, C/group, k...]`).
pub fn qlinear_conv_ms(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    const CONV: &[&str] = &[
        "auto_pad",
        "dilations",
        "group",
        "kernel_shape",
        "pads",
        "strides",
    ];
    let mut rw = Rw::new(ctx, g, n);
    let mut known = CONV.to_vec();
    known.push("channels_last");
    rw.only_attrs(&known)?;
    need_opset10(&rw)?;
    let last = rw.attr_i("channels_last", 0) != 0;
    let mut ins: Vec<Option<PValue>> = (0..rw.node.inputs.len()).map(|i| rw.input(i)).collect();
    if ins.len() < 8 {
        return unsupported("QLinearConv needs at least 8 inputs");
    }
    let attrs = rw.copy_attrs(CONV);
    if !last {
        let y = rw.op_opt("QLinearConv", &ins, attrs);
        return rw.finish(&[(0, y)]);
    }
    let r = rw.rank(0, "channels-last convolution")?;
    if r < 3 {
        return unsupported(format!("input of rank {r}"));
    }
    let (first, to_last) = nhwc_perms(r);
    let x = rw.need(0, "X")?;
    ins[0] = Some(rw.transpose(x, &first));
    let y = rw.op_opt("QLinearConv", &ins, attrs);
    let y = rw.transpose(y, &to_last);
    rw.finish(&[(0, y)])
}

/// Float32 input `i` (a scale or a float bias).
fn need_f32(rw: &Rw, i: usize, what: &str) -> Result<PValue, Unsupported> {
    let v = rw.need(i, what)?;
    match rw.in_facts(i).dtype {
        Some(dtype::FLOAT) => Ok(v),
        Some(t) => unsupported(format!(
            "{what} (input {i}) is {}, not float",
            crate::tensor::dtype_name(t)
        )),
        None => Err(Refusal::new(
            Cause::UnknownFact,
            format!("the element type of {what} (input {i}) is unknown"),
        )),
    }
}

/// A B scale: per-tensor, or per column (`[N]`, broadcast over the last axis of the product).
fn b_scale_ok(rw: &Rw, i: usize) -> Result<(), Unsupported> {
    match rw.in_facts(i).rank() {
        Some(0 | 1) => Ok(()),
        Some(r) => unsupported(format!("B scale (input {i}) of rank {r}")),
        None => Err(Refusal::new(
            Cause::UnknownFact,
            format!("the rank of B's scale (input {i}) is unknown"),
        )),
    }
}

/// `Cast(MatMulInteger(a, b, a_zp, b_zp), float) * scale (+ bias)`.
fn integer_product(
    rw: &mut Rw,
    a: PValue,
    b: PValue,
    a_zp: Option<PValue>,
    b_zp: Option<PValue>,
    scale: PValue,
    bias: Option<PValue>,
) -> PValue {
    let acc = rw.op_opt("MatMulInteger", &[Some(a), Some(b), a_zp, b_zp], vec![]);
    let f = rw.cast(acc, dtype::FLOAT);
    let y = rw.op("Mul", &[f, scale], &[]);
    match bias {
        Some(bias) => rw.op("Add", &[y, bias], &[]),
        None => y,
    }
}

/// DynamicQuantizeMatMul `(A float, B int8/uint8, b_scale, b_zero_point?, bias?)`: A is
/// quantized to uint8 with DynamicQuantizeLinear, then `MatMulInteger`, scaled by
/// `a_scale * b_scale`, plus the bias.
pub fn dynamic_quantize_matmul(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    need_opset10(&rw)?;
    if rw.opset < 11 {
        return Err(Refusal::new(
            Cause::Limit,
            format!(
                "DynamicQuantizeMatMul needs DynamicQuantizeLinear (opset >= 11); the model imports opset {}",
                rw.opset
            ),
        ));
    }
    let a = need_f32(&rw, 0, "A")?;
    let b = rw.need(1, "B")?;
    quant_dtype(&rw, 1)?;
    let bs = need_f32(&rw, 2, "b_scale")?;
    b_scale_ok(&rw, 2)?;
    let bias = match rw.input(4) {
        Some(_) => Some(need_f32(&rw, 4, "bias")?),
        None => None,
    };
    let dq = rw.p.node(
        "DynamicQuantizeLinear",
        "",
        &[Some(a)],
        Vec::<Attribute>::new(),
        3,
    );
    let (aq, a_s, a_zp) = (dq[0], dq[1], dq[2]);
    let scale = rw.op("Mul", &[a_s, bs], &[]);
    let b_zp = rw.input(3);
    let y = integer_product(&mut rw, aq, b, Some(a_zp), b_zp, scale, bias);
    rw.finish(&[(0, y)])
}

/// MatMulIntegerToFloat `(A, B, a_scale, b_scale, a_zp?, b_zp?, bias?)`:
/// `MatMulInteger(A, B, a_zp, b_zp) * (a_scale * b_scale) + bias`.
pub fn matmul_integer_to_float(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    need_opset10(&rw)?;
    let a = rw.need(0, "A")?;
    let b = rw.need(1, "B")?;
    quant_dtype(&rw, 0)?;
    quant_dtype(&rw, 1)?;
    let a_s = need_f32(&rw, 2, "a_scale")?;
    per_tensor(&rw, 2, "a_scale")?;
    let b_s = need_f32(&rw, 3, "b_scale")?;
    b_scale_ok(&rw, 3)?;
    per_tensor(&rw, 4, "a_zero_point")?;
    let bias = match rw.input(6) {
        Some(_) => Some(need_f32(&rw, 6, "bias")?),
        None => None,
    };
    let scale = rw.op("Mul", &[a_s, b_s], &[]);
    let (a_zp, b_zp) = (rw.input(4), rw.input(5));
    let y = integer_product(&mut rw, a, b, a_zp, b_zp, scale, bias);
    rw.finish(&[(0, y)])
}

/// QGemm `(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?)`, attributes `alpha`,
/// `transA`, `transB`: `acc = (A - a_zp)(B - b_zp) + C` in int32 (C is the int32 bias at scale
/// `a_scale * b_scale`), then `acc * (alpha * a_scale * b_scale / y_scale)` quantized with
/// `y_zp` (round half to even, saturate), or `acc * (alpha * a_scale * b_scale)` in float when
/// `y_scale` is absent.
pub fn qgemm(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["alpha", "transA", "transB"])?;
    need_opset10(&rw)?;
    let mut a = rw.need(0, "A")?;
    let mut b = rw.need(3, "B")?;
    quant_dtype(&rw, 0)?;
    quant_dtype(&rw, 3)?;
    let a_s = need_f32(&rw, 1, "a_scale")?;
    per_tensor(&rw, 1, "a_scale")?;
    per_tensor(&rw, 2, "a_zero_point")?;
    let b_s = need_f32(&rw, 4, "b_scale")?;
    b_scale_ok(&rw, 4)?;
    if rw.attr_i("transA", 0) != 0 {
        a = rw.transpose(a, &[1, 0]);
    }
    if rw.attr_i("transB", 0) != 0 {
        b = rw.transpose(b, &[1, 0]);
    }
    let (a_zp, b_zp) = (rw.input(2), rw.input(5));
    let mut acc = rw.op_opt("MatMulInteger", &[Some(a), Some(b), a_zp, b_zp], vec![]);
    if let Some(c) = rw.input(6) {
        match rw.in_facts(6).dtype {
            Some(dtype::INT32) => {}
            _ => return unsupported("QGemm's C is not known to be int32"),
        }
        acc = rw.op("Add", &[acc, c], &[]);
    }
    // The kernel's order: ((alpha * a_scale) * b_scale) / y_scale, in float32.
    let alpha = rw.attr_f("alpha", 1.0);
    let mut scale = if alpha != 1.0 {
        let al = rw.scalar("alpha", dtype::FLOAT, alpha as f64);
        rw.op("Mul", &[al, a_s], &[])
    } else {
        a_s
    };
    scale = rw.op("Mul", &[scale, b_s], &[]);
    let requant = rw.input(7).is_some();
    if requant {
        let y_s = need_f32(&rw, 7, "y_scale")?;
        per_tensor(&rw, 7, "y_scale")?;
        scale = rw.op("Div", &[scale, y_s], &[]);
    }
    let f = rw.cast(acc, dtype::FLOAT);
    let y = rw.op("Mul", &[f, scale], &[]);
    let out = if requant {
        let dt = match rw.in_facts(8).dtype {
            Some(t @ (dtype::UINT8 | dtype::INT8)) => t,
            _ if rw.input(8).is_none() => dtype::UINT8,
            _ => quant_dtype(&rw, 8)?,
        };
        let one = rw.scalar("one", dtype::FLOAT, 1.0);
        let z = match rw.input(8) {
            Some(z) => z,
            None => zero_of(&mut rw, dt),
        };
        rw.op("QuantizeLinear", &[y, one, z], &[])
    } else {
        y
    };
    rw.finish(&[(0, out)])
}

/// The float weights of a DynamicQuantizeLSTM weight input `w` (`[D, rows, 4H]`, int8 or
/// uint8) with its scale `s` and zero point `zp` (`[D]` or `[D, 4H]`), in LSTM's layout
/// `[D, 4H, rows]`: `Transpose((Cast(w) - Cast(zp)) * s, [0, 2, 1])`.
fn lstm_weight(rw: &mut Rw, w: usize, s: usize, zp: usize) -> Result<PValue, Unsupported> {
    let wv = rw.need(w, "weight")?;
    quant_dtype(rw, w)?;
    if rw.rank(w, "weight layout")? != 3 {
        return unsupported(format!("weight input {w} is not 3-D"));
    }
    let sv = need_f32(rw, s, "weight scale")?;
    let zv = rw.need(zp, "weight zero point")?;
    let rank = |rw: &Rw, i: usize| rw.rank(i, "weight scale layout");
    // [D] -> [D, 1, 1]; [D, 4H] -> [D, 1, 4H].
    let axes: &[i64] = match (rank(rw, s)?, rank(rw, zp)?) {
        (1, 1) => &[1, 2],
        (2, 2) => &[1],
        (a, b) => return unsupported(format!("weight scale/zero point of ranks {a}/{b}")),
    };
    let wf = rw.cast(wv, dtype::FLOAT);
    let zf = rw.cast(zv, dtype::FLOAT);
    let zf = rw.unsqueeze(zf, axes);
    let sf = rw.unsqueeze(sv, axes);
    let centred = rw.op("Sub", &[wf, zf], &[]);
    let scaled = rw.op("Mul", &[centred, sf], &[]);
    Ok(rw.transpose(scaled, &[0, 2, 1]))
}

/// DynamicQuantizeLSTM `(X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale,
/// W_zero_point, R_scale, R_zero_point)`: LSTM on the dequantized, transposed weights; the
/// LSTM attributes carry over.
pub fn dynamic_quantize_lstm(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    const LSTM: &[&str] = &[
        "activation_alpha",
        "activation_beta",
        "activations",
        "clip",
        "direction",
        "hidden_size",
        "input_forget",
    ];
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(LSTM)?;
    need_opset10(&rw)?;
    let x = need_f32(&rw, 0, "X")?;
    let w = lstm_weight(&mut rw, 1, 8, 9)?;
    let r = lstm_weight(&mut rw, 2, 10, 11)?;
    let mut ins: Vec<Option<PValue>> = vec![Some(x), Some(w), Some(r)];
    ins.extend((3..8).map(|i| rw.input(i)));
    let attrs = rw.copy_attrs(LSTM);
    let outs = rw.node.outputs.len().clamp(1, 3);
    let n_in = ins.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
    let ys = rw.p.node("LSTM", "", &ins[..n_in], attrs, outs);
    let map: Vec<(usize, PValue)> = ys.into_iter().enumerate().collect();
    rw.finish(&map)
}

#[cfg(test)]
mod tests {
    use super::nhwc_perms;

    #[test]
    fn channels_last_permutations() {
        assert_eq!(nhwc_perms(4), (vec![0, 3, 1, 2], vec![0, 2, 3, 1]));
        assert_eq!(nhwc_perms(3), (vec![0, 2, 1], vec![0, 2, 1]));
    }
}
