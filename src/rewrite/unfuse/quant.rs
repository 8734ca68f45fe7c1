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

use super::fused_conv::CONV_ATTRS;
use super::needs::Needs;
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};
use crate::rewrite::pass::{Cause, Refusal};

/// Refuse below opset 10 (no QuantizeLinear/DequantizeLinear/MatMulInteger/QLinearConv).
pub(super) fn need_opset10(rw: &Rw) -> Result<(), Unsupported> {
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
pub(super) fn quant_dtype(rw: &Rw, i: usize) -> Result<i32, Unsupported> {
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
pub(super) fn per_tensor(rw: &Rw, i: usize, what: &str) -> Result<(), Unsupported> {
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

/// The per-tensor float32 constant behind input `i` (a scale), if it is one.
fn const_scale(rw: &Rw, i: usize) -> Option<f32> {
    let (_, v) = rw.const_f32(i)?;
    (v.len() == 1).then(|| v[0])
}

/// The 8-bit zero point behind input `i`: 0 when the input is omitted, `None` when it is not a
/// per-tensor uint8/int8 constant.
fn const_zp(rw: &Rw, i: usize) -> Option<i32> {
    let Some(id) = rw.input_id(i) else {
        return Some(0);
    };
    let t = crate::rewrite::consts::const_tensor(rw.g, id)?;
    let signed = match t.data_type? {
        dtype::UINT8 => false,
        dtype::INT8 => true,
        _ => return None,
    };
    let vals: Vec<i32> = match &t.raw_data {
        Some(b) => b
            .iter()
            .map(|&x| if signed { x as i8 as i32 } else { x as i32 })
            .collect(),
        None => t.int32_data.clone(),
    };
    (vals.len() == 1).then(|| vals[0])
}

/// The range of an 8-bit type.
fn range_of(dt: i32) -> (i32, i32) {
    if dt == dtype::INT8 {
        (-128, 127)
    } else {
        (0, 255)
    }
}

/// `MlasQuantizeLinear` of one value: `v / scale` in float32, clamped to the type's range less
/// the zero point (a NaN takes the lower bound, as MAXPS gives it), rounded half to even, plus
/// the zero point.
fn mlas_quantize(v: f32, scale: f32, zp: i32, dt: i32) -> i32 {
    let (lo, hi) = range_of(dt);
    let x = v / scale;
    let x = if x > (lo - zp) as f32 {
        x
    } else {
        (lo - zp) as f32
    };
    let x = if x < (hi - zp) as f32 {
        x
    } else {
        (hi - zp) as f32
    };
    x.round_ties_even() as i32 + zp
}

/// `MlasComputeLogistic` as ONNX Runtime runs it on x86-64 with FMA3 (and on ARM64, whose NEON
/// multiply-add is fused too): the input clamped to [-18, 18], Eigen's rational polynomial with
/// fused multiply-adds, `p / q + 0.5`, clamped below at 0 (MLAS `logistic.cpp`,
/// `LogisticKernelFma3.S`).
#[allow(clippy::excessive_precision)]
pub fn mlas_logistic(x: f32) -> f32 {
    // The constants as MLAS writes them (decimal, rounded to float32 by the compiler).
    const A9: f32 = 4.37031012579801e-11;
    const A7: f32 = 1.15627324459942e-07;
    const A5: f32 = 6.08574864600143e-05;
    const A3: f32 = 8.51377133304701e-03;
    const A1: f32 = 2.48287947061529e-01;
    const B10: f32 = 6.10247389755681e-13;
    const B8: f32 = 5.76102136993427e-09;
    const B6: f32 = 6.29106785017040e-06;
    const B4: f32 = 1.70198817374094e-03;
    const B2: f32 = 1.16817656904453e-01;
    const B0: f32 = 9.93151921023180e-01;
    // MAXPS/MINPS with the constant first: a NaN input gives the constant's bound.
    let v = if x > -18.0 { x } else { -18.0 };
    let v = if v < 18.0 { v } else { 18.0 };
    let v2 = v * v;
    let mut p = v2.mul_add(A9, A7);
    for c in [A5, A3, A1] {
        p = v2.mul_add(p, c);
    }
    let mut q = v2.mul_add(B10, B8);
    for c in [B6, B4, B2, B0] {
        q = v2.mul_add(q, c);
    }
    let p = v * p;
    let r = p / q + 0.5;
    if r > 0.0 {
        r
    } else {
        0.0
    }
}

/// The 256-entry table ONNX Runtime builds for a lookup-table activation
/// (`qlinear_lookup_table.cc`): each code dequantized as `x_scale * (x - x_zp)` in float32,
/// mapped by `f`, quantized with `MlasQuantizeLinear`. Entry `j` is for the code `j + min`
/// (value order, not byte order).
pub fn lookup_table(
    xs: f32,
    xzp: i32,
    ys: f32,
    yzp: i32,
    dt: i32,
    f: impl Fn(f32) -> f32,
) -> Vec<i32> {
    let (lo, hi) = range_of(dt);
    (lo..=hi)
        .map(|x| mlas_quantize(f(xs * (x - xzp) as f32), ys, yzp, dt))
        .collect()
}

/// A constant 1-D tensor of 8-bit values of type `dt`.
fn bytes_const(rw: &mut Rw, hint: &str, dt: i32, vals: &[i32]) -> PValue {
    let t = crate::proto::TensorProto {
        dims: vec![vals.len() as i64],
        data_type: Some(dt),
        raw_data: Some(vals.iter().map(|&v| v as u8).collect::<Vec<u8>>().into()),
        ..Default::default()
    };
    rw.p.initializer(hint, t)
}

/// `Gather(table, Cast(x, int32) - min)`: the table lookup of an 8-bit tensor.
fn gather_table(rw: &mut Rw, x: PValue, table: &[i32], dt: i32) -> PValue {
    let t = bytes_const(rw, "lookup_table", dt, table);
    let xi = rw.cast(x, dtype::INT32);
    let idx = if dt == dtype::INT8 {
        let off = int32_scalar(rw, "offset", 128);
        rw.op("Add", &[xi, off], &[])
    } else {
        xi
    };
    rw.op("Gather", &[t, idx], &[("axis", AttrValue::Int(0))])
}

/// A rank-0 int32 constant.
fn int32_scalar(rw: &mut Rw, hint: &str, v: i32) -> PValue {
    let t = crate::proto::TensorProto {
        dims: vec![],
        data_type: Some(dtype::INT32),
        raw_data: Some(v.to_le_bytes().to_vec().into()),
        ..Default::default()
    };
    rw.p.initializer(hint, t)
}

/// A lookup-table activation `(X, X_scale, X_zp, Y_scale, Y_zp)`: with constant per-tensor
/// parameters, the kernel's own 256-entry table and a Gather (bit-exact on every runtime);
/// otherwise dequantize, the float operator `float_op`, quantize (what the kernel computes when
/// it builds its table at run time; exact on ONNX Runtime CPU, whose float kernels are the ones
/// the table is built with).
fn table_activation(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
    attrs: &[&str],
    f: impl Fn(f32) -> f32,
    float_op: impl FnOnce(&mut Rw, PValue) -> Result<PValue, Unsupported>,
) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(attrs)?;
    need_opset10(&rw)?;
    let dt = quant_dtype(&rw, 0)?;
    let params = (
        const_scale(&rw, 1),
        const_zp(&rw, 2),
        const_scale(&rw, 3),
        const_zp(&rw, 4),
    );
    if let (Some(xs), Some(xzp), Some(ys), Some(yzp)) = params {
        let x = rw.need(0, "X")?;
        let table = lookup_table(xs, xzp, ys, yzp, dt, f);
        let y = gather_table(&mut rw, x, &table, dt);
        return rw.finish(&[(0, y)]);
    }
    drop(rw);
    unary(ctx, g, n, attrs, float_op)
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

/// Which input ONNX Runtime's broadcaster hands to the MLAS kernel as the vector: the kernel is
/// called per span of the innermost run of the output, with A as the vector unless A is
/// broadcast along that run (A "scalar in span"), when the two swap roles. Decided from the
/// static dimensions at the innermost output axis of size > 1; `None` when a dimension that
/// decides it is unknown.
fn a_is_scalar_in_span(rw: &Rw) -> Option<bool> {
    use crate::infer::Dim;
    let (fa, fb) = (rw.in_facts(0), rw.in_facts(3));
    let all_one =
        |s: Option<&crate::infer::Shape>| s.is_some_and(|s| s.iter().all(|d| d.known() == Some(1)));
    // A one-element B (a constant such as the 3 of a hard-swish) leaves A the vector, whatever
    // A's shape (A of one element too would be the broadcaster's first case: known ones only);
    // a one-element A swaps.
    if all_one(fb.shape.as_ref()) {
        return Some(all_one(fa.shape.as_ref()));
    }
    if all_one(fa.shape.as_ref()) {
        return Some(true);
    }
    let (sa, sb) = (fa.shape.as_ref()?, fb.shape.as_ref()?);
    let (ra, rb) = (sa.len(), sb.len());
    let r = ra.max(rb);
    // Symbolic sizes: the same shape on both sides (the same names, a size known > 1) is never
    // broadcast, so A is the vector.
    let some_big = sa.iter().any(|d| d.known().is_some_and(|k| k > 1));
    if ra == rb
        && some_big
        && sa
            .iter()
            .zip(sb.iter())
            .all(|(x, y)| x == y && !matches!(x, Dim::Unknown))
    {
        return Some(false);
    }
    for k in 1..=r {
        let da = if k <= ra { fa.dim(ra - k)? } else { 1 };
        let db = if k <= rb { fb.dim(rb - k)? } else { 1 };
        match (da, db) {
            (1, 1) => continue,
            (1, _) => return Some(true),
            _ => return Some(false),
        }
    }
    // A single element: the broadcaster's first case, A scalar.
    Some(true)
}

/// The constant per-tensor parameters of a QLinear binary op: `(a_s, a_zp, b_s, b_zp, c_s,
/// c_zp)`.
fn binary_params(rw: &Rw) -> Result<(f32, i32, f32, i32, f32, i32), Unsupported> {
    let (sa, za) = const_params(rw, 1, 2, "A")?;
    let (sb, zb) = const_params(rw, 4, 5, "B")?;
    let (sc, zc) = const_params(rw, 6, 7, "C")?;
    Ok((sa, za, sb, zb, sc, zc))
}

/// `(float)(x * r + c)` with one rounding, as a fused multiply-add computes it, for an 8-bit
/// tensor `x`: in double, where `x * r` (8 by 24 bits) and its sum with a float `c` of the
/// magnitudes quantized ops see are exact, then one rounding to float.
fn fma_8bit(rw: &mut Rw, x: PValue, r: f32, c: PValue) -> PValue {
    let xd = rw.cast(x, dtype::DOUBLE);
    let rd = rw.scalar("ratio", dtype::DOUBLE, r as f64);
    let prod = rw.op("Mul", &[xd, rd], &[]);
    let sum = rw.op("Add", &[prod, c], &[]);
    rw.cast(sum, dtype::FLOAT)
}

/// `round(t)` saturated to the 8-bit type `dt` (QuantizeLinear with scale 1 and zero point 0:
/// the kernels' `cvtps` and saturating packs).
fn round_saturate(rw: &mut Rw, t: PValue, dt: i32) -> PValue {
    let one = rw.scalar("one", dtype::FLOAT, 1.0);
    let zero = zero_of(rw, dt);
    rw.op("QuantizeLinear", &[t, one, zero], &[])
}

/// The constant per-tensor parameters of a QLinearAdd: `(scale, zero point)` of A, B and C, and
/// the 8-bit element type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AddParams {
    pub a: (f32, i32),
    pub b: (f32, i32),
    pub c: (f32, i32),
    pub dt: i32,
}

impl AddParams {
    /// `(r_v, r_s, F)` of the kernel with A the vector (`swap` false) or B: the two scale
    /// ratios and the fixed part `zp_c - fma(r_v, zp_v, r_s * zp_s)`.
    fn kernel_constants(&self, swap: bool) -> (f32, f32, f32) {
        let ((sv, zv), (so, zo)) = if swap {
            (self.b, self.a)
        } else {
            (self.a, self.b)
        };
        let (sc, zc) = self.c;
        let rv = sv / sc;
        let ro = so / sc;
        let fixed = zc as f32 - rv.mul_add(zv as f32, ro * zo as f32);
        (rv, ro, fixed)
    }
}

/// ONNX Runtime's x86-64 QLinearAdd (`qladd_avx2.cpp`) of one pair of codes `(a, b)`, with A the
/// vector (`swap` false) or B: `C = round(fma(v, r_v, fma(s, r_s, F)))` in float32, rounded half
/// to even by `cvtps2dq` (whose out-of-range result, 0x80000000, the saturating packs take to the
/// type's minimum) and saturated to the type's range.
pub fn qladd_kernel(p: &AddParams, swap: bool, a: i32, b: i32) -> i32 {
    let (rv, ro, fixed) = p.kernel_constants(swap);
    let (v, o) = if swap { (b, a) } else { (a, b) };
    let t = (v as f32).mul_add(rv, (o as f32).mul_add(ro, fixed));
    let (lo, hi) = range_of(p.dt);
    let r = t.round_ties_even();
    let i = if (-2_147_483_648.0..2_147_483_648.0).contains(&r) {
        r as i32
    } else {
        i32::MIN
    };
    i.clamp(lo, hi)
}

/// The kernel's output for every pair of codes: entry `(a - min) * 256 + (b - min)` is the code
/// of `C` for the codes `a`, `b` (value order, as [`lookup_table`]).
pub fn qladd_table(p: &AddParams, swap: bool) -> Vec<i32> {
    let (lo, hi) = range_of(p.dt);
    let mut t = Vec::with_capacity(65_536);
    for a in lo..=hi {
        for b in lo..=hi {
            t.push(qladd_kernel(p, swap, a, b));
        }
    }
    t
}

/// A float32 form of QLinearAdd (each operator rounding once, as ONNX's Mul and Add do), the
/// codes cast to float: [`AddF32::OtherFirst`] is the kernel's order without its fusions,
/// `(s * r_s + F) + v * r_v`; [`AddF32::ProductsFirst`] is `(v * r_v + s * r_s) + F`. Both end
/// with `QuantizeLinear` of scale 1 (round half to even, saturate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddF32 {
    OtherFirst,
    ProductsFirst,
}

/// The result of the float32 form `f` for the codes `(a, b)`.
pub fn qladd_f32(p: &AddParams, swap: bool, f: AddF32, a: i32, b: i32) -> i32 {
    let (rv, ro, fixed) = p.kernel_constants(swap);
    let (v, o) = if swap { (b, a) } else { (a, b) };
    let (pv, po) = (v as f32 * rv, o as f32 * ro);
    let t = match f {
        AddF32::OtherFirst => (po + fixed) + pv,
        AddF32::ProductsFirst => (pv + po) + fixed,
    };
    mlas_quantize(t, 1.0, 0, p.dt)
}

/// The first float32 form that gives the kernel's code for all 65,536 pairs (`table`, from
/// [`qladd_table`]), if one does.
pub fn exact_f32_form(p: &AddParams, swap: bool, table: &[i32]) -> Option<AddF32> {
    let (lo, hi) = range_of(p.dt);
    [AddF32::OtherFirst, AddF32::ProductsFirst]
        .into_iter()
        .find(|&f| {
            (lo..=hi)
                .flat_map(|a| (lo..=hi).map(move |b| (a, b)))
                .zip(table)
                .all(|((a, b), &c)| qladd_f32(p, swap, f, a, b) == c)
        })
}

/// How one operand order of a QLinearAdd is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddForm {
    /// A float32 form, exact for every pair of codes.
    Float32(AddF32),
    /// `Gather` from the 65,536-entry table of the kernel's codes.
    Table,
    /// The kernel's fused multiply-adds in float64 ([`fma_8bit`]): the last resort, for a
    /// provider that runs neither of the others (float64 then pins it to the CPU on DirectML).
    Float64,
}

/// The operators of `form` with their element types, for the provider check.
fn add_form_needs(form: AddForm, dt: i32) -> Needs {
    let mut n = Needs::default();
    let (f, i) = (dtype::FLOAT, dtype::INT32);
    match form {
        AddForm::Float32(_) => {
            n.add("Cast", &[dt], &[f]);
            n.add("Mul", &[f, f], &[f]);
            n.add("Add", &[f, f], &[f]);
            n.add("QuantizeLinear", &[f, f, dt], &[dt]);
        }
        AddForm::Table => {
            n.add("Cast", &[dt], &[i]);
            n.add("Mul", &[i, i], &[i]);
            n.add("Add", &[i, i], &[i]);
            n.add("Gather", &[dt, i], &[dt]);
        }
        AddForm::Float64 => {}
    }
    n
}

/// The form of QLinearAdd for one operand order: a float32 form where one is exact and the
/// provider runs it, else the table where the provider runs it, else float64.
fn choose_add_form(
    ctx: &UnfuseCtx,
    opset: i64,
    p: &AddParams,
    swap: bool,
    table: &[i32],
) -> AddForm {
    let ok = |f: AddForm| {
        add_form_needs(f, p.dt)
            .check(ctx, opset, "QLinearAdd's form")
            .is_ok()
    };
    if let Some(f) = exact_f32_form(p, swap, table) {
        if ok(AddForm::Float32(f)) {
            return AddForm::Float32(f);
        }
    }
    if ok(AddForm::Table) {
        return AddForm::Table;
    }
    AddForm::Float64
}

/// The float32 form `f` of QLinearAdd on the codes `a`, `b`, rounded and saturated to `dt`.
fn emit_add_f32(rw: &mut Rw, p: &AddParams, swap: bool, f: AddF32, a: PValue, b: PValue) -> PValue {
    let (rv, ro, fixed) = p.kernel_constants(swap);
    let (v, o) = if swap { (b, a) } else { (a, b) };
    let vf = rw.cast(v, dtype::FLOAT);
    let rv = rw.scalar("ratio", dtype::FLOAT, rv as f64);
    let pv = rw.op("Mul", &[vf, rv], &[]);
    let of = rw.cast(o, dtype::FLOAT);
    let ro = rw.scalar("ratio", dtype::FLOAT, ro as f64);
    let po = rw.op("Mul", &[of, ro], &[]);
    let fx = rw.scalar("fixed_part", dtype::FLOAT, fixed as f64);
    let t = match f {
        AddF32::OtherFirst => {
            let t1 = rw.op("Add", &[po, fx], &[]);
            rw.op("Add", &[t1, pv], &[])
        }
        AddF32::ProductsFirst => {
            let t1 = rw.op("Add", &[pv, po], &[]);
            rw.op("Add", &[t1, fx], &[])
        }
    };
    round_saturate(rw, t, p.dt)
}

/// The table index `(a - min) * 256 + (b - min)` of the codes `a`, `b` (int32, broadcast to
/// the output's shape).
fn add_table_index(rw: &mut Rw, dt: i32, a: PValue, b: PValue) -> PValue {
    let ai = rw.cast(a, dtype::INT32);
    let bi = rw.cast(b, dtype::INT32);
    let c256 = int32_scalar(rw, "c256", 256);
    let hi = rw.op("Mul", &[ai, c256], &[]);
    let idx = rw.op("Add", &[hi, bi], &[]);
    if dt == dtype::INT8 {
        let off = int32_scalar(rw, "offset", 128 * 257);
        rw.op("Add", &[idx, off], &[])
    } else {
        idx
    }
}

/// The float64 form: the kernel's fused multiply-adds in double, rounded and saturated.
fn emit_add_f64(rw: &mut Rw, p: &AddParams, swap: bool, a: PValue, b: PValue) -> PValue {
    let (rv, ro, fixed) = p.kernel_constants(swap);
    let (v, o) = if swap { (b, a) } else { (a, b) };
    let fd = rw.scalar("fixed_part", dtype::DOUBLE, fixed as f64);
    let t1 = fma_8bit(rw, o, ro, fd);
    let t1d = rw.cast(t1, dtype::DOUBLE);
    let t = fma_8bit(rw, v, rv, t1d);
    round_saturate(rw, t, p.dt)
}

/// QLinearAdd `(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)`, numpy broadcasting, as
/// ONNX Runtime's x86-64 kernel computes it (`qladd_avx2.cpp`, AVX2 and FMA3): with the vector
/// input `V` and the other `S` (A and B, swapped when A is broadcast along the innermost run,
/// see [`a_is_scalar_in_span`]), `r_v = s_v / s_c`, `r_s = s_s / s_c`, `F = zp_c - fma(r_v,
/// zp_v, r_s * zp_s)`, `C = round(fma(v, r_v, fma(s, r_s, F)))` saturated; the raw codes enter
/// as floats, the zero points only through `F`. Needs constant per-tensor parameters.
///
/// With those, `C` is a function of the two codes alone: it is enumerated here for all 65,536
/// pairs ([`qladd_table`]) and written in the smallest form that reproduces every pair, among
/// those the target's provider runs ([`choose_add_form`]): a float32 form ([`exact_f32_form`];
/// 159 of the 223 QLinearAdd nodes of the corpus's five QOperator models), else a `Gather` from
/// the table (64 KiB), else the fused multiply-adds in float64 (exact, but float64: DirectML and
/// onnxruntime-web's wasm CPU have no float64 Mul/Add). The float32 form is exact on ONNX
/// Runtime CPU (each Mul and Add rounds once); a GPU compiler that contracts a Mul and an Add
/// into one multiply-add could round differently, the table is exact everywhere. Where the
/// dimensions that decide the operand order are unknown, both orders are written and a `Where`
/// picks the broadcaster's choice at run time (ranks needed), unless both orders give the same
/// table.
pub fn qlinear_add(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    need_opset10(&rw)?;
    let dt = quant_dtype(&rw, 0)?;
    if quant_dtype(&rw, 3)? != dt {
        return unsupported("A and B have different element types");
    }
    let (sa, za, sb, zb, sc, zc) = binary_params(&rw)?;
    let p = AddParams {
        a: (sa, za),
        b: (sb, zb),
        c: (sc, zc),
        dt,
    };
    let a = rw.need(0, "A")?;
    let b = rw.need(3, "B")?;
    let keep_table = qladd_table(&p, false);
    let swapped_table = qladd_table(&p, true);
    let order = match a_is_scalar_in_span(&rw) {
        Some(swap) => Some(swap),
        // Both orders give the same codes: no run-time choice to make.
        None if swapped_table == keep_table => Some(false),
        None => None,
    };
    let opset = rw.opset;
    let q = match order {
        Some(swap) => {
            let table = if swap { &swapped_table } else { &keep_table };
            let form = choose_add_form(ctx, opset, &p, swap, table);
            emit_add(&mut rw, &p, swap, form, table, a, b)
        }
        None => {
            // The shapes decide at run time: both results, and the one the broadcaster's
            // choice picks.
            let fk = choose_add_form(ctx, opset, &p, false, &keep_table);
            let fs = choose_add_form(ctx, opset, &p, true, &swapped_table);
            let swap = runtime_a_scalar(&mut rw, a, b)?;
            if (fk, fs) == (AddForm::Table, AddForm::Table) {
                // One index, one Gather from the table the order picks.
                let tk = bytes_const(&mut rw, "qlinear_add_table", dt, &keep_table);
                let ts = bytes_const(&mut rw, "qlinear_add_table", dt, &swapped_table);
                let t = rw.op("Where", &[swap, ts, tk], &[]);
                let idx = add_table_index(&mut rw, dt, a, b);
                rw.op("Gather", &[t, idx], &[("axis", AttrValue::Int(0))])
            } else {
                let keep = emit_add(&mut rw, &p, false, fk, &keep_table, a, b);
                let swapped = emit_add(&mut rw, &p, true, fs, &swapped_table, a, b);
                rw.op("Where", &[swap, swapped, keep], &[])
            }
        }
    };
    rw.finish(&[(0, q)])
}

/// QLinearAdd's codes for one operand order in `form` (`table`: the kernel's, for that order).
fn emit_add(
    rw: &mut Rw,
    p: &AddParams,
    swap: bool,
    form: AddForm,
    table: &[i32],
    a: PValue,
    b: PValue,
) -> PValue {
    match form {
        AddForm::Float32(f) => emit_add_f32(rw, p, swap, f, a, b),
        AddForm::Table => {
            let t = bytes_const(rw, "qlinear_add_table", p.dt, table);
            let idx = add_table_index(rw, p.dt, a, b);
            rw.op("Gather", &[t, idx], &[("axis", AttrValue::Int(0))])
        }
        AddForm::Float64 => emit_add_f64(rw, p, swap, a, b),
    }
}

/// [`a_is_scalar_in_span`] at run time, for known ranks: both shapes padded with leading ones
/// to the output's rank, the innermost axis whose output size is > 1 found as the largest
/// `(axis + 1) * (size > 1)`, and A "scalar" there when its size is 1 (or when there is no
/// such axis: one element). A boolean scalar.
fn runtime_a_scalar(rw: &mut Rw, a: PValue, b: PValue) -> Result<PValue, Unsupported> {
    let (ra, rb) =
        match (rw.in_facts(0).rank(), rw.in_facts(3).rank()) {
            (Some(x), Some(y)) => (x, y),
            _ => return Err(Refusal::new(
                Cause::UnknownFact,
                "the ranks of A and B are unknown (their shapes decide the kernel's operand order)",
            )),
        };
    if rw.opset < 11 {
        return unsupported("run-time operand order needs opset >= 11");
    }
    let r = ra.max(rb);
    let padded = |rw: &mut Rw, x: PValue, rank: usize| -> PValue {
        let s = rw.op("Shape", &[x], &[]);
        if rank == r {
            return s;
        }
        let ones = rw.ints("ones", &vec![1; r - rank]);
        rw.op("Concat", &[ones, s], &[("axis", AttrValue::Int(0))])
    };
    let sa = padded(rw, a, ra);
    let sb = padded(rw, b, rb);
    let a_bigger = rw.op("Greater", &[sa, sb], &[]);
    let out = rw.op("Where", &[a_bigger, sa, sb], &[]);
    let one = rw.ints("one", &[1]);
    let big = rw.op("Greater", &[out, one], &[]);
    let bigi = rw.cast(big, dtype::INT64);
    let pos: Vec<i64> = (1..=r as i64).collect();
    let pos = rw.ints("positions", &pos);
    let weighted = rw.op("Mul", &[bigi, pos], &[]);
    let last = rw.reduce("ReduceMax", weighted, &[0], true);
    // A padded with a leading 1 so that position 0 (no axis > 1) reads a 1.
    let sa1 = rw.op("Concat", &[one, sa], &[("axis", AttrValue::Int(0))]);
    let at = rw.op("Gather", &[sa1, last], &[("axis", AttrValue::Int(0))]);
    let is_one = rw.op("Equal", &[at, one], &[]);
    let shape0 = rw.ints("scalar_shape", &[]);
    Ok(rw.op("Reshape", &[is_one, shape0], &[]))
}

/// QLinearMul, as ONNX Runtime's kernel computes it (`qlmul.cpp`, SSE2): `p = (a - zp_a) * (b -
/// zp_b)` in integers, `C = round(float(p) * ((s_a * s_b) / s_c) + zp_c)` (float32, multiply
/// then add) saturated. Needs constant per-tensor parameters.
pub fn qlinear_mul(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    need_opset10(&rw)?;
    let dt = quant_dtype(&rw, 0)?;
    if quant_dtype(&rw, 3)? != dt {
        return unsupported("A and B have different element types");
    }
    let (sa, za, sb, zb, sc, zc) = binary_params(&rw)?;
    let a = rw.need(0, "A")?;
    let b = rw.need(3, "B")?;
    let ai = rw.cast(a, dtype::INT32);
    let za = int32_scalar(&mut rw, "a_zero_point", za);
    let ai = rw.op("Sub", &[ai, za], &[]);
    let bi = rw.cast(b, dtype::INT32);
    let zb = int32_scalar(&mut rw, "b_zero_point", zb);
    let bi = rw.op("Sub", &[bi, zb], &[]);
    let p = rw.op("Mul", &[ai, bi], &[]);
    let pf = rw.cast(p, dtype::FLOAT);
    let ratio = rw.scalar("ratio", dtype::FLOAT, ((sa * sb) / sc) as f64);
    let scaled = rw.op("Mul", &[pf, ratio], &[]);
    let zcf = rw.scalar("c_zero_point", dtype::FLOAT, zc as f64);
    let t = rw.op("Add", &[scaled, zcf], &[]);
    let q = round_saturate(&mut rw, t, dt);
    rw.finish(&[(0, q)])
}

pub fn qlinear_sigmoid(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    table_activation(ctx, g, n, &[], mlas_logistic, |rw, x| {
        Ok(rw.op("Sigmoid", &[x], &[]))
    })
}

/// QLinearLeakyRelu: `alpha` defaults to 0.01 (as LeakyRelu's); the kernel's table maps
/// `v >= 0 ? v : alpha * v`.
pub fn qlinear_leaky_relu(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let alpha = ctx_attr_f(g, n, "alpha", 0.01);
    table_activation(
        ctx,
        g,
        n,
        &["alpha"],
        move |v| if v >= 0.0 { v } else { v * alpha },
        move |rw, x| Ok(rw.op("LeakyRelu", &[x], &[("alpha", AttrValue::Float(alpha))])),
    )
}

fn ctx_attr_f(g: &Graph, n: NodeId, name: &str, default: f32) -> f32 {
    g.node(n).attr(name).and_then(|a| a.f()).unwrap_or(default)
}

/// The per-tensor constant quantization parameters `(scale, zero point)` at inputs `s`, `zp`,
/// or a refusal naming what is not constant.
fn const_params(rw: &Rw, s: usize, zp: usize, what: &str) -> Result<(f32, i32), Unsupported> {
    match (const_scale(rw, s), const_zp(rw, zp)) {
        (Some(sc), Some(z)) if sc.is_finite() && sc > 0.0 => Ok((sc, z)),
        (Some(sc), Some(_)) => unsupported(format!("{what} scale {sc} is not a positive number")),
        _ => Err(Refusal::new(
            Cause::UnknownFact,
            format!("{what} scale and zero point (inputs {s}, {zp}) are not per-tensor constants"),
        )),
    }
}

/// The static shape of input `i`, or a refusal saying why it is needed.
fn static_dims(rw: &Rw, i: usize, why: &str) -> Result<Vec<i64>, Unsupported> {
    match rw.in_facts(i).dims_known() {
        Some(d) => Ok(d),
        None => Err(Refusal::new(
            Cause::UnknownFact,
            format!("the shape of input {i} is not static ({why})"),
        )),
    }
}

/// The exp table of ONNX Runtime's QLinearSoftmax (`qlinear_softmax.cc`, float variant):
/// `bit_shift = max(0, ln(FLT_MAX / D) - 5) / x_scale` and entry `j` =
/// `(float)exp((j - 255 + bit_shift) * x_scale)` in double. The logarithm is the float one
/// (`FLT_MAX / D` is a float, and C++ picks `log(float)`): with the double logarithm every
/// entry moves by the same factor, their float roundings do not, and fuzzed ties went the other
/// way. An input `x` of a row whose maximum is `m` reads entry `x - m + 255`, for uint8 and
/// int8 alike.
pub fn softmax_exp_table(x_scale: f32, reduce_len: i64) -> Vec<f32> {
    let ratio = f32::MAX / reduce_len as f32;
    let shift = (ratio.ln() as f64 - 5.0).max(0.0) / x_scale as f64;
    (0..256)
        .map(|j| (((j as f64) - 255.0 + shift) * x_scale as f64).exp() as f32)
        .collect()
}

/// QLinearSoftmax `(X, X_scale, X_zp, Y_scale, Y_zp)`, attributes `axis` and `opset` (the
/// Softmax semantics: before 13 a softmax over the axes from `axis` on, flattened; from 13 over
/// `axis` alone; `axis` defaults to 1 before 13, -1 from 13), computed as the kernel computes
/// it: the row maximum `m` in integers, `e = table[x - m + 255]` from the kernel's exp table
/// (which depends on the reduced length, so the shape must be static), the sum of `e` in
/// float32 in order along the axis (CumSum, last element), `round(e * floor(1 / Y_scale) /
/// sum) + Y_zp` with the quotient in double (one rounding) and rounded half to
/// even there, saturated. The float32 quotient lands exactly on a half where the true one is a
/// little above or below it; ONNX Runtime 1.32 decides those as the double quotient does (0 of
/// 40,000 fuzzed instances differ, against 3 for the float32 quotient).
pub fn qlinear_softmax(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["axis", "opset"])?;
    need_opset10(&rw)?;
    if rw.opset < 11 {
        return Err(Refusal::new(
            Cause::Limit,
            format!(
                "QLinearSoftmax needs CumSum and Round (opset >= 11); the model imports opset {}",
                rw.opset
            ),
        ));
    }
    let dt = quant_dtype(&rw, 0)?;
    let Some(sem) = rw.attr("opset").and_then(|a| a.i()) else {
        return unsupported("QLinearSoftmax without its 'opset' attribute");
    };
    let (xs, _) = const_params(&rw, 1, 2, "X")?;
    let (ys, yzp) = const_params(&rw, 3, 4, "Y")?;
    let dims = static_dims(
        &rw,
        0,
        "the kernel's exp table depends on the reduced length",
    )?;
    let r = dims.len() as i64;
    let axis = rw.attr_i("axis", if sem < 13 { 1 } else { -1 });
    let a = if axis < 0 { axis + r } else { axis };
    if r == 0 || a < 0 || a >= r {
        return unsupported(format!("axis {axis} out of range for rank {r}"));
    }
    if dims.contains(&0) {
        return unsupported("an empty input (the kernel writes nothing)");
    }
    let d: i64 = if sem < 13 {
        dims[a as usize..].iter().product()
    } else {
        dims[a as usize]
    };
    let table = softmax_exp_table(xs, d);
    let y_mul = (1.0f32 / ys).floor();
    if y_mul.is_nan() || y_mul >= 2_147_483_648.0 {
        // The kernel converts the rounded quotient, up to floor(1 / Y_scale), to int32.
        return Err(Refusal::new(
            Cause::Limit,
            format!("Y_scale {ys} is below 2^-31: the kernel's int32 conversion overflows"),
        ));
    }
    // The quotient is float64; a provider without float64 math (DirectML) would leave it to
    // the CPU in pieces, and onnxruntime-web's wasm CPU has no float64 Mul/Div: the node stays
    // whole instead (the rule's fallback).
    let mut needs = Needs::default();
    let (f, d) = (dtype::FLOAT, dtype::DOUBLE);
    needs.add("Cast", &[f], &[d]);
    needs.add("Mul", &[d, d], &[d]);
    needs.add("Div", &[d, d], &[d]);
    needs.add("Round", &[d], &[d]);
    needs.add("Cast", &[d], &[f]);
    needs.check(
        ctx,
        rw.opset,
        "QLinearSoftmax's exact form (the kernel's quotient, rounded once in float64)",
    )?;
    let x = rw.need(0, "X")?;
    let mut xi = rw.cast(x, dtype::INT32);
    let red = if sem < 13 {
        xi = rw.op("Flatten", &[xi], &[("axis", AttrValue::Int(a))]);
        1
    } else {
        a
    };
    let m = rw.reduce("ReduceMax", xi, &[red], true);
    let c255 = int32_scalar(&mut rw, "c255", 255);
    let shifted = rw.op("Sub", &[xi, m], &[]);
    let idx = rw.op("Add", &[shifted, c255], &[]);
    let t = rw.f32s("softmax_exp_table", &[256], &table);
    let e = rw.op("Gather", &[t, idx], &[("axis", AttrValue::Int(0))]);
    let ax = rw.ints("axis", &[red]);
    let ax0 = rw.op("Squeeze", &[ax], &[]);
    let cs = rw.op("CumSum", &[e, ax0], &[]);
    let sum = rw.slice(cs, &[-1], &[i64::MAX], &[red]);
    let ym = rw.scalar("y_scale_inverse", dtype::DOUBLE, y_mul as f64);
    // e * floor(1 / Y_scale) / sum in double: the product is exact (below 2^29 for Y), the
    // quotient rounded once, and Round is half to even there, like nearbyint.
    let ed = rw.cast(e, dtype::DOUBLE);
    let sd = rw.cast(sum, dtype::DOUBLE);
    let prod = rw.op("Mul", &[ed, ym], &[]);
    let quot = rw.op("Div", &[prod, sd], &[]);
    let rounded = rw.op("Round", &[quot], &[]);
    // An integer below 2^31: exact in float up to 2^24, and saturated either way above.
    let y = rw.cast(rounded, dtype::FLOAT);
    // plus the zero point, saturated (ONNX Runtime 1.32 saturates int8 too, where the source's
    // cast would wrap).
    let one = rw.scalar("one", dtype::FLOAT, 1.0);
    let z = bytes_scalar(&mut rw, "y_zero_point", dt, yzp);
    let q = rw.op("QuantizeLinear", &[y, one, z], &[]);
    let q = if sem < 13 {
        let shape = rw.ints("shape", &dims);
        rw.op("Reshape", &[q, shape], &[])
    } else {
        q
    };
    rw.finish(&[(0, q)])
}

/// A rank-0 8-bit constant of type `dt`.
fn bytes_scalar(rw: &mut Rw, hint: &str, dt: i32, v: i32) -> PValue {
    let t = crate::proto::TensorProto {
        dims: vec![],
        data_type: Some(dt),
        raw_data: Some(vec![v as u8].into()),
        ..Default::default()
    };
    rw.p.initializer(hint, t)
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

/// The integer path of ONNX Runtime's quantized global average pool
/// (`MlasQLinearGlobalAveragePoolNchw/Nhwc`, which QLinearAveragePool also takes when the
/// window covers the whole image without padding): `acc = sum(x) - x_zp * image_size` in int32,
/// `round(float(acc) * (x_scale / (y_scale * image_size)))` (float32, in that order) plus the
/// zero point, saturated. `axes` are the spatial axes, kept as size 1.
fn integer_global_average(
    rw: &mut Rw,
    dt: i32,
    axes: &[i64],
    image_size: Option<i64>,
) -> Result<PValue, Unsupported> {
    if let Some(n) = image_size {
        if !(1..0x100_0000).contains(&n) {
            return unsupported(format!("image size {n} (the kernel takes 1 to 2^24 - 1)"));
        }
    }
    let x = rw.need(0, "X")?;
    let xs = rw.need(1, "X_scale")?;
    let ys = rw.need(3, "Y_scale")?;
    per_tensor(rw, 1, "X_scale")?;
    per_tensor(rw, 3, "Y_scale")?;
    // The image size: a constant, or the product of the spatial dimensions at run time.
    let (count_i, count_f) = match image_size {
        Some(n) => (
            int32_scalar(rw, "image_size", n as i32),
            rw.scalar("image_size_f", dtype::FLOAT, n as f32 as f64),
        ),
        None => {
            if rw.opset < 11 {
                return unsupported("a dynamic image size needs opset >= 11 here");
            }
            let shape = rw.op("Shape", &[x], &[]);
            let idx = rw.ints("spatial_axes", axes);
            let dims = rw.op("Gather", &[shape, idx], &[("axis", AttrValue::Int(0))]);
            let n = rw.reduce("ReduceProd", dims, &[0], false);
            (rw.cast(n, dtype::INT32), rw.cast(n, dtype::FLOAT))
        }
    };
    let xi = rw.cast(x, dtype::INT32);
    let mut acc = rw.reduce("ReduceSum", xi, axes, true);
    if let Some(zp) = rw.input(2) {
        per_tensor(rw, 2, "X zero point")?;
        let zi = rw.cast(zp, dtype::INT32);
        let bias = rw.op("Mul", &[zi, count_i], &[]);
        acc = rw.op("Sub", &[acc, bias], &[]);
    }
    let denom = rw.op("Mul", &[ys, count_f], &[]);
    let scale = rw.op("Div", &[xs, denom], &[]);
    let accf = rw.cast(acc, dtype::FLOAT);
    let y = rw.op("Mul", &[accf, scale], &[]);
    let one = rw.scalar("one", dtype::FLOAT, 1.0);
    per_tensor(rw, 4, "Y zero point")?;
    let z = match rw.input(4) {
        Some(z) => {
            if rw.in_facts(4).dtype.is_some_and(|t| t != dt) {
                return unsupported("the output zero point's type differs from the input's");
            }
            z
        }
        None => zero_of(rw, dt),
    };
    Ok(rw.op("QuantizeLinear", &[y, one, z], &[]))
}

/// QLinearGlobalAveragePool (`channels_last` puts the channels last): the kernel's integer
/// path (see [`integer_global_average`]); a symbolic spatial size is multiplied out at run
/// time.
pub fn qlinear_global_average_pool(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["channels_last"])?;
    need_opset10(&rw)?;
    let dt = quant_dtype(&rw, 0)?;
    let r = rw.rank(0, "pooling")?;
    if r < 3 {
        return unsupported(format!("input of rank {r}"));
    }
    let axes: Vec<i64> = if rw.attr_i("channels_last", 0) != 0 {
        (1..r as i64 - 1).collect()
    } else {
        (2..r as i64).collect()
    };
    let f = rw.in_facts(0);
    let image: Option<i64> = axes
        .iter()
        .map(|&a| f.dim(a as usize))
        .try_fold(1i64, |acc, d| d.map(|d| acc.saturating_mul(d)));
    let y = integer_global_average(&mut rw, dt, &axes, image)?;
    rw.finish(&[(0, y)])
}

/// ONNX Runtime's pool window arithmetic for one spatial axis (`PoolAttributes`): explicit
/// `(pad_head, pad_tail)` and the output size, from the input size, kernel, stride, pads or
/// `auto_pad`, and `ceil_mode`.
fn pool_axis(
    input: i64,
    kernel: i64,
    stride: i64,
    pads: (i64, i64),
    auto_pad: &str,
    ceil: bool,
) -> Option<(i64, i64, i64)> {
    if kernel < 1 || stride < 1 {
        return None;
    }
    // VALID is no padding, with ceil_mode honoured as for explicit pads.
    let pads = if auto_pad == "VALID" { (0, 0) } else { pads };
    let (head, tail, out) = match auto_pad {
        "" | "NOTSET" | "VALID" => {
            let total = input + pads.0 + pads.1 - kernel;
            if total < 0 {
                return None;
            }
            let mut out = if ceil {
                (total + stride - 1) / stride + 1
            } else {
                total / stride + 1
            };
            // The last window must start inside the image or its head padding.
            if ceil && (out - 1) * stride >= input + pads.0 {
                out -= 1;
            }
            (pads.0, pads.1, out)
        }
        "SAME_UPPER" | "SAME_LOWER" => {
            let out = (input + stride - 1) / stride;
            let needed = (out - 1) * stride + kernel - input;
            let head = if auto_pad == "SAME_LOWER" {
                (needed + 1) / 2
            } else {
                needed / 2
            };
            (head, needed - head, out)
        }
        _ => return None,
    };
    (head >= 0 && tail >= 0 && out >= 1).then_some((head, tail, out))
}

/// QLinearAveragePool, as the kernel computes it (`qlinear_pool.cc`): with a window that covers
/// the whole image and no padding, the integer global-average path; otherwise each code
/// dequantized (`x_scale * (x - x_zp)`), summed in float32 over the part of the window inside
/// the image (in row order), divided by the kernel size (`count_include_pad`) or by the number
/// of elements summed, and quantized as `round(avg / y_scale + y_zp)` (float32, then
/// saturated). The sum is written out in the kernel's order (one strided Slice of the
/// zero-padded input per kernel offset, added in row order: float AveragePool sums in another
/// order on larger images); the spatial shape must be static.
pub fn qlinear_average_pool(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[
        "auto_pad",
        "ceil_mode",
        "count_include_pad",
        "kernel_shape",
        "pads",
        "strides",
        "channels_last",
    ])?;
    need_opset10(&rw)?;
    let dt = quant_dtype(&rw, 0)?;
    let last = rw.attr_i("channels_last", 0) != 0;
    let dims = static_dims(&rw, 0, "the kernel's window arithmetic")?;
    let r = dims.len();
    if !(3..=5).contains(&r) {
        return unsupported(format!("input of rank {r} (1 to 3 spatial axes)"));
    }
    let spatial: Vec<i64> = if last {
        dims[1..r - 1].to_vec()
    } else {
        dims[2..].to_vec()
    };
    let k = spatial.len();
    let kernel = rw.attr_ints("kernel_shape").unwrap_or_default();
    if kernel.len() != k {
        return unsupported(format!("kernel_shape {kernel:?} for {k} spatial axes"));
    }
    let strides = rw.attr_ints("strides").unwrap_or_else(|| vec![1; k]);
    let pads = rw.attr_ints("pads").unwrap_or_else(|| vec![0; 2 * k]);
    if strides.len() != k || pads.len() != 2 * k {
        return unsupported("strides/pads do not match the kernel's rank");
    }
    let auto_pad = rw.attr_s("auto_pad").unwrap_or_default();
    let ceil = rw.attr_i("ceil_mode", 0) != 0;
    let include_pad = rw.attr_i("count_include_pad", 0) != 0;
    let mut heads = Vec::with_capacity(k);
    let mut tails = Vec::with_capacity(k);
    let mut outs = Vec::with_capacity(k);
    for i in 0..k {
        match pool_axis(
            spatial[i],
            kernel[i],
            strides[i],
            (pads[i], pads[k + i]),
            &auto_pad,
            ceil,
        ) {
            Some((h, t, o)) => {
                heads.push(h);
                tails.push(t);
                outs.push(o);
            }
            None => {
                return unsupported(format!(
                    "window arithmetic the kernel does not define for this decomposition (input {spatial:?}, kernel {kernel:?}, strides {strides:?}, pads {pads:?}, auto_pad '{auto_pad}')"
                ))
            }
        }
    }
    let axes: Vec<i64> = if last {
        (1..r as i64 - 1).collect()
    } else {
        (2..r as i64).collect()
    };
    if spatial == kernel && heads.iter().chain(&tails).all(|&p| p == 0) {
        let image: i64 = spatial.iter().product();
        let y = integer_global_average(&mut rw, dt, &axes, Some(image))?;
        return rw.finish(&[(0, y)]);
    }
    let mut x = dequant(&mut rw, 0, 1, 2)?;
    if last {
        let (first, _) = nhwc_perms(r);
        x = rw.transpose(x, &first);
    }
    let window: i64 = kernel.iter().product();
    if window > 64 {
        return unsupported(format!(
            "a window of {window} elements (the in-order sum is written out up to 64)"
        ));
    }
    if rw.opset < 10 {
        return unsupported("strided Slice needs opset >= 10");
    }
    // Zeros in the head padding and past the last window (adding a zero leaves a float sum as
    // it is), then the window's elements added one by one in row order, as the kernel adds
    // them: a strided Slice of the padded input per kernel offset.
    let mut before = vec![0i64; 2];
    let mut after = vec![0i64; 2];
    for i in 0..k {
        before.push(heads[i]);
        let need = (outs[i] - 1) * strides[i] + kernel[i] - spatial[i] - heads[i];
        after.push(need.max(0));
    }
    if before.iter().chain(&after).any(|&p| p != 0) {
        let mut all = before;
        all.extend(after);
        x = pad_zeros(&mut rw, x, &all)?;
    }
    let axes: Vec<i64> = (2..2 + k as i64).collect();
    let mut offset = vec![0i64; k];
    let mut acc: Option<PValue> = None;
    for _ in 0..window {
        let starts = offset.clone();
        let ends: Vec<i64> = (0..k)
            .map(|i| offset[i] + (outs[i] - 1) * strides[i] + 1)
            .collect();
        let st = rw.ints("starts", &starts);
        let en = rw.ints("ends", &ends);
        let ax = rw.ints("axes", &axes);
        let sp = rw.ints("steps", &strides);
        let part = rw.op("Slice", &[x, st, en, ax, sp], &[]);
        acc = Some(match acc {
            None => part,
            Some(a) => rw.op("Add", &[a, part], &[]),
        });
        // The next offset in row order.
        for i in (0..k).rev() {
            offset[i] += 1;
            if offset[i] < kernel[i] {
                break;
            }
            offset[i] = 0;
        }
    }
    let Some(sum) = acc else {
        return unsupported("an empty window");
    };
    // The divisor: the kernel size, or the number of elements of each window inside the image.
    let divisor = if include_pad {
        rw.scalar("kernel_size", dtype::FLOAT, window as f64)
    } else {
        let mut counts = vec![1i64];
        for i in 0..k {
            let per: Vec<i64> = (0..outs[i])
                .map(|o| {
                    let start = o * strides[i] - heads[i];
                    (start + kernel[i]).min(spatial[i]) - start.max(0)
                })
                .collect();
            counts = counts
                .iter()
                .flat_map(|&c| per.iter().map(move |&p| c * p))
                .collect();
        }
        let vals: Vec<f64> = counts.iter().map(|&c| c as f32 as f64).collect();
        rw.constant("window_counts", dtype::FLOAT, &outs, &vals)
    };
    let mut y = rw.op("Div", &[sum, divisor], &[]);
    if last {
        let (_, to_last) = nhwc_perms(r);
        y = rw.transpose(y, &to_last);
    }
    // round(avg / y_scale + y_zp), saturated: QuantizeLinear with scale 1 and zero point 0 of
    // the float sum.
    let ys = rw.need(3, "Y_scale")?;
    per_tensor(&rw, 3, "Y_scale")?;
    let v = rw.op("Div", &[y, ys], &[]);
    let v = match rw.input(4) {
        Some(z) => {
            per_tensor(&rw, 4, "Y zero point")?;
            let zf = rw.cast(z, dtype::FLOAT);
            rw.op("Add", &[v, zf], &[])
        }
        None => v,
    };
    let one = rw.scalar("one", dtype::FLOAT, 1.0);
    let zero = zero_of(&mut rw, dt);
    let q = rw.op("QuantizeLinear", &[v, one, zero], &[]);
    rw.finish(&[(0, q)])
}

/// Pad with zeros (`pads` in ONNX order: all begins, then all ends): Pad-2 attributes before
/// opset 11, inputs from 11.
fn pad_zeros(rw: &mut Rw, x: PValue, pads: &[i64]) -> Result<PValue, Unsupported> {
    if rw.opset >= 11 {
        let p = rw.ints("pads", pads);
        Ok(rw.op("Pad", &[x, p], &[]))
    } else if rw.opset >= 2 {
        Ok(rw.op("Pad", &[x], &[("pads", AttrValue::Ints(pads.to_vec()))]))
    } else {
        unsupported("Pad needs opset >= 2")
    }
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
    let mut rw = Rw::new(ctx, g, n);
    let mut known = CONV_ATTRS.to_vec();
    known.push("channels_last");
    rw.only_attrs(&known)?;
    need_opset10(&rw)?;
    let last = rw.attr_i("channels_last", 0) != 0;
    let mut ins: Vec<Option<PValue>> = (0..rw.node.inputs.len()).map(|i| rw.input(i)).collect();
    if ins.len() < 8 {
        return unsupported("QLinearConv needs at least 8 inputs");
    }
    let attrs = rw.copy_attrs(CONV_ATTRS);
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

/// The weight zero point of a standard QLinearConv as one value for `ConvInteger` (ONNX
/// Runtime's ConvInteger takes a per-tensor zero point only): `None` when omitted, else a
/// rank-0 constant of its own type. A per-channel zero point whose values are all equal (the
/// symmetric int8 weights of ONNX Runtime's quantizer: all 0) is that value; one whose values
/// differ is refused.
fn uniform_zero_point(rw: &mut Rw, i: usize) -> Result<Option<PValue>, Unsupported> {
    let Some(id) = rw.input_id(i) else {
        return Ok(None);
    };
    let Some(t) = crate::rewrite::consts::const_tensor(rw.g, id) else {
        return unsupported(format!(
            "the weight zero point (input {i}) is not a constant (ConvInteger takes one per-tensor zero point)"
        ));
    };
    let dt = match t.data_type {
        Some(d @ (dtype::UINT8 | dtype::INT8)) => d,
        _ => {
            return unsupported(format!(
                "the weight zero point (input {i}) is not uint8/int8"
            ))
        }
    };
    let vals: Vec<i32> = match &t.raw_data {
        Some(b) => b
            .iter()
            .map(|&x| {
                if dt == dtype::INT8 {
                    x as i8 as i32
                } else {
                    x as i32
                }
            })
            .collect(),
        None => t.int32_data.clone(),
    };
    let Some(&first) = vals.first() else {
        return unsupported(format!("the weight zero point (input {i}) is empty"));
    };
    if vals.iter().any(|&v| v != first) {
        return unsupported(format!(
            "per-channel weight zero points that differ (input {i}): ONNX Runtime's ConvInteger takes one zero point"
        ));
    }
    if t.dims.is_empty() {
        return Ok(rw.input(i));
    }
    Ok(Some(bytes_scalar(rw, "w_zero_point", dt, first)))
}

/// The requantization of ONNX Runtime's QLinearConv / QLinearMatMul kernels
/// (`MlasRequantizeOutput`): `acc` (int32, bias included) times the float32 scale
/// `x_scale * w_scale / y_scale` (in that order, per channel), rounded half to even, plus the
/// zero point, saturated: `Cast(Clip(Round(Cast(acc) * scale) + y_zp))` (below opset 11,
/// `QuantizeLinear(Cast(acc) * scale, 1, y_zp)`). `shape` reshapes the
/// per-channel scale so it broadcasts over the output's channel axis (`None`: the last axis).
fn requantize(
    rw: &mut Rw,
    acc: PValue,
    scales: (usize, usize, usize),
    y_zp: usize,
    shape: Option<&[i64]>,
) -> Result<PValue, Unsupported> {
    let (xs, ws, ys) = scales;
    let x_s = need_f32(rw, xs, "x_scale")?;
    per_tensor(rw, xs, "x_scale")?;
    let w_s = need_f32(rw, ws, "w_scale")?;
    let y_s = need_f32(rw, ys, "y_scale")?;
    per_tensor(rw, ys, "y_scale")?;
    per_tensor(rw, y_zp, "y_zero_point")?;
    let m = rw.op("Mul", &[x_s, w_s], &[]);
    let mut scale = rw.op("Div", &[m, y_s], &[]);
    if let Some(shape) = shape {
        scale = rw.reshape(scale, shape)?;
    }
    let f = rw.cast(acc, dtype::FLOAT);
    let y = rw.op("Mul", &[f, scale], &[]);
    let dt = match rw.input(y_zp) {
        Some(_) => quant_dtype(rw, y_zp)?,
        None => dtype::UINT8,
    };
    if rw.opset < 11 {
        let one = rw.scalar("one", dtype::FLOAT, 1.0);
        let z = match rw.input(y_zp) {
            Some(z) => z,
            None => zero_of(rw, dt),
        };
        return Ok(rw.op("QuantizeLinear", &[y, one, z], &[]));
    }
    // From opset 11 the rounding is written out (Round is half to even, as the kernel's):
    // OpenVINO 2026.4.1's CPU plugin fails to compile QuantizeLinear after a per-channel
    // Multiply of a Cast int32 when a decomposed QLinearMul reads the result ("Model
    // references undeclared parameters"). Clamping after the zero point is the kernel's
    // clamp-then-round: the bounds are integers.
    let r = rw.op("Round", &[y], &[]);
    let with_zp = match rw.input(y_zp) {
        None => r,
        Some(z) => {
            let zf = match const_zp(rw, y_zp) {
                Some(v) => rw.scalar("y_zero_point_f", dtype::FLOAT, v as f64),
                None => rw.cast(z, dtype::FLOAT),
            };
            rw.op("Add", &[r, zf], &[])
        }
    };
    let (lo, hi) = range_of(dt);
    let c = rw.clip(with_zp, lo as f32, hi as f32, dtype::FLOAT);
    Ok(rw.cast(c, dt))
}

/// Standard QLinearConv `(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?)` as ONNX
/// Runtime's kernel computes it: the int32 accumulator by `ConvInteger` (x's zero point, one
/// weight zero point), plus the int32 bias, requantized per output channel (see
/// [`requantize`]). For OpenVINO, whose ONNX front end refuses per-channel weight scales and
/// zero points on QLinearConv (or, when M equals C/group, applies them along the wrong axis).
pub fn qlinear_conv(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(CONV_ATTRS)?;
    need_opset10(&rw)?;
    if rw.node.inputs.len() < 8 {
        return unsupported("QLinearConv needs at least 8 inputs");
    }
    let x = rw.need(0, "x")?;
    quant_dtype(&rw, 0)?;
    per_tensor(&rw, 2, "x_zero_point")?;
    let w = rw.need(3, "w")?;
    quant_dtype(&rw, 3)?;
    let r = rw.rank(0, "the channel axis of the output")?;
    if r < 3 {
        return unsupported(format!("input of rank {r}"));
    }
    let w_zp = uniform_zero_point(&mut rw, 5)?;
    let attrs = rw.copy_attrs(CONV_ATTRS);
    let x_zp = rw.input(2);
    let mut acc = rw.op_opt("ConvInteger", &[Some(x), Some(w), x_zp, w_zp], attrs);
    let mut shape = vec![1i64, -1];
    shape.resize(r, 1);
    if let Some(b) = rw.input(8) {
        match rw.in_facts(8).dtype {
            Some(dtype::INT32) => {}
            _ => return unsupported("QLinearConv's B is not known to be int32"),
        }
        let b = rw.reshape(b, &shape)?;
        acc = rw.op("Add", &[acc, b], &[]);
    }
    let y = requantize(&mut rw, acc, (1, 4, 6), 7, Some(&shape))?;
    rw.finish(&[(0, y)])
}

/// Standard QLinearMatMul `(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)` as ONNX
/// Runtime's kernel computes it: `MatMulInteger` (per-column B zero points are its own), then
/// the per-column requantization of [`requantize`]. For OpenVINO, whose ONNX front end takes
/// only per-tensor scales and zero points on QLinearMatMul.
pub fn qlinear_matmul(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    need_opset10(&rw)?;
    if rw.node.inputs.len() < 8 {
        return unsupported("QLinearMatMul needs 8 inputs");
    }
    let a = rw.need(0, "a")?;
    let b = rw.need(3, "b")?;
    quant_dtype(&rw, 0)?;
    quant_dtype(&rw, 3)?;
    per_tensor(&rw, 2, "a_zero_point")?;
    b_scale_ok(&rw, 4)?;
    match rw.in_facts(5).rank() {
        Some(0 | 1) => {}
        _ if rw.input(5).is_none() => {}
        _ => return unsupported("b_zero_point (input 5) is not per-tensor or per-column"),
    }
    let (a_zp, b_zp) = (rw.input(2), rw.input(5));
    let acc = rw.op_opt("MatMulInteger", &[Some(a), Some(b), a_zp, b_zp], vec![]);
    let y = requantize(&mut rw, acc, (1, 4, 6), 7, None)?;
    rw.finish(&[(0, y)])
}

/// Float32 input `i` (a scale or a float bias).
pub(super) fn need_f32(rw: &Rw, i: usize, what: &str) -> Result<PValue, Unsupported> {
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
pub(super) fn b_scale_ok(rw: &Rw, i: usize) -> Result<(), Unsupported> {
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
    use super::*;

    fn pairs(dt: i32) -> impl Iterator<Item = (i32, i32)> {
        let (lo, hi) = range_of(dt);
        (lo..=hi).flat_map(move |a| (lo..=hi).map(move |b| (a, b)))
    }

    const fn ps(dt: i32, a: (f32, i32), b: (f32, i32), c: (f32, i32)) -> AddParams {
        AddParams { a, b, c, dt }
    }

    /// uint8 and int8 parameter sets, ratios that are and are not powers of two.
    const SETS: [AddParams; 6] = [
        ps(dtype::UINT8, (0.0123, 128), (0.0311, 120), (0.0457, 125)),
        ps(dtype::UINT8, (0.02, 130), (0.015, 110), (0.03, 120)),
        ps(dtype::UINT8, (0.25, 128), (0.5, 0), (1.0, 7)),
        ps(dtype::INT8, (0.0123, 3), (0.0311, -5), (0.0457, 0)),
        ps(dtype::INT8, (0.05, 0), (0.1, 0), (0.2, 0)),
        ps(dtype::INT8, (0.007, -10), (0.009, 12), (0.011, -3)),
    ];

    #[test]
    fn qladd_kernel_is_the_quantized_sum_within_one_step() {
        for p in SETS {
            let (lo, hi) = range_of(p.dt);
            for swap in [false, true] {
                for (a, b) in pairs(p.dt) {
                    let real =
                        p.a.0 as f64 * (a - p.a.1) as f64 + p.b.0 as f64 * (b - p.b.1) as f64;
                    let ideal = ((real / p.c.0 as f64).round() as i32 + p.c.1).clamp(lo, hi);
                    let c = qladd_kernel(&p, swap, a, b);
                    assert!(
                        (c - ideal).abs() <= 1,
                        "{p:?} swap {swap} ({a}, {b}): {c} vs {ideal}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_table_is_indexed_by_code_pairs_in_value_order() {
        for p in SETS {
            let (lo, _) = range_of(p.dt);
            let t = qladd_table(&p, false);
            assert_eq!(t.len(), 65_536);
            for (a, b) in [(lo, lo), (lo, lo + 255), (lo + 255, lo), (lo + 7, lo + 200)] {
                let k = ((a - lo) * 256 + (b - lo)) as usize;
                assert_eq!(t[k], qladd_kernel(&p, false, a, b));
            }
        }
    }

    #[test]
    fn the_float32_form_is_chosen_only_where_every_pair_matches() {
        // Exact in float32 (uint8 and int8, ratios not powers of two among them).
        for k in [0, 2, 3, 4, 5] {
            let p = SETS[k];
            for swap in [false, true] {
                let t = qladd_table(&p, swap);
                let f = exact_f32_form(&p, swap, &t);
                assert_eq!(f, Some(AddF32::OtherFirst), "{p:?} swap {swap}");
                assert!(pairs(p.dt).zip(&t).all(|((a, b), &c)| qladd_f32(
                    &p,
                    swap,
                    AddF32::OtherFirst,
                    a,
                    b
                ) == c));
            }
        }
        // Not exact: the unfused products miss the kernel's rounding of a few hundred pairs
        // (the table it is then), and the two operand orders differ.
        let p = SETS[1];
        let t = qladd_table(&p, false);
        assert_eq!(exact_f32_form(&p, false, &t), None);
        assert_eq!(t[25 * 256 + 141], 65);
        assert_ne!(qladd_f32(&p, false, AddF32::OtherFirst, 25, 141), 65);
        let misses = pairs(p.dt)
            .zip(&t)
            .filter(|&((a, b), &c)| qladd_f32(&p, false, AddF32::OtherFirst, a, b) != c)
            .count();
        assert_eq!(misses, 476);
        let ts = qladd_table(&p, true);
        assert_eq!(exact_f32_form(&p, true, &ts), None);
        assert_ne!(t, ts);
    }

    #[test]
    fn an_out_of_range_sum_takes_the_kernels_indefinite_integer() {
        // A ratio of 1e10: 255 * 1e10 is past int32, cvtps2dq gives 0x80000000 and the packs
        // saturate it to the minimum; QuantizeLinear would give the maximum, so no float32 form.
        let p = AddParams {
            a: (1e7, 0),
            b: (1.0, 0),
            c: (1e-3, 0),
            dt: dtype::UINT8,
        };
        assert_eq!(qladd_kernel(&p, false, 255, 0), 0);
        assert_eq!(qladd_kernel(&p, false, 0, 0), 0);
        assert_eq!(qladd_kernel(&p, false, 0, 1), 255);
        assert_eq!(qladd_f32(&p, false, AddF32::OtherFirst, 255, 0), 255);
        let t = qladd_table(&p, false);
        assert_eq!(exact_f32_form(&p, false, &t), None);
    }

    #[test]
    fn channels_last_permutations() {
        assert_eq!(nhwc_perms(4), (vec![0, 3, 1, 2], vec![0, 2, 3, 1]));
        assert_eq!(nhwc_perms(3), (vec![0, 2, 1], vec![0, 2, 1]));
    }
}
