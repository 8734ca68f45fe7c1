//! The GELU family: Gelu, BiasGelu, FastGelu, QuickGelu (ONNX Runtime contrib) and ONNX Gelu-20.

use crate::ir::{Graph, NodeId};
use crate::rewrite::{PValue, Patch};
use crate::tensor::dtype;

use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// sqrt(2 / pi).
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// 0.044715 * sqrt(2 / pi).
const GELU_TANH_CUBIC: f64 = 0.044715 * SQRT_2_OVER_PI;

/// Exact GELU, in ONNX Runtime's CPU kernel order (`core/providers/cpu/tensor/gelu.cc`,
/// `contrib_ops/cpu/bert/bias_gelu.cc`): `s = x * M_SQRT1_2`, `e = erf(s)` (MLAS's erf, which
/// ONNX Runtime's Erf kernel also uses), `y = (0.5 * x) * (e + 1)`.
pub(super) fn gelu_erf(rw: &mut Rw, x: PValue, dt: i32) -> Result<PValue, Unsupported> {
    if rw.opset < 9 {
        return unsupported(format!(
            "Erf needs opset >= 9; the model imports {}",
            rw.opset
        ));
    }
    let inv_sqrt2 = rw.scalar("inv_sqrt2", dt, std::f64::consts::FRAC_1_SQRT_2);
    let one = rw.scalar("one", dt, 1.0);
    let half = rw.scalar("half", dt, 0.5);
    let s = rw.op("Mul", &[x, inv_sqrt2], &[]);
    let e = rw.op("Erf", &[s], &[]);
    let e1 = rw.op("Add", &[e, one], &[]);
    let hx = rw.op("Mul", &[x, half], &[]);
    Ok(rw.op("Mul", &[hx, e1], &[]))
}

/// Tanh GELU: `0.5 * x * (1 + tanh(x * (sqrt(2/pi) + 0.044715 * sqrt(2/pi) * x^2)))`
/// (ONNX Gelu-20 approximate="tanh"; ContribOperators.md FastGelu:
/// `Y=0.5*X*(1+tanh(0.797885*X+0.035677*X*X*X))`), in ONNX Runtime's CPU kernel order and
/// constants (`gelu.cc`, `bias_gelu.cc`): `p = x * ((C * x) * x + B)`, `t = tanh(p)` (MLAS's
/// tanh, as the Tanh kernel), `y = (0.5 * x) * (t + 1)`. The order matters where `1 + t`
/// cancels (x below about -4): there the output is a few ulp of 1 and any other rounding of
/// `p` moves it by percents of its own size (found by `tools/fuzz_decomp.py`).
pub(super) fn gelu_tanh(rw: &mut Rw, x: PValue, dt: i32) -> PValue {
    let b = rw.scalar("sqrt_2_over_pi", dt, SQRT_2_OVER_PI);
    let c = rw.scalar("cubic", dt, GELU_TANH_CUBIC);
    let one = rw.scalar("one", dt, 1.0);
    let half = rw.scalar("half", dt, 0.5);
    let cx = rw.op("Mul", &[c, x], &[]);
    let cxx = rw.op("Mul", &[cx, x], &[]);
    let inner = rw.op("Add", &[cxx, b], &[]);
    let p = rw.op("Mul", &[x, inner], &[]);
    let t = rw.op("Tanh", &[p], &[]);
    let t1 = rw.op("Add", &[t, one], &[]);
    let hx = rw.op("Mul", &[x, half], &[]);
    rw.op("Mul", &[hx, t1], &[])
}

/// ONNX Runtime's GELU kernels take float32 only. For bfloat16 the decomposition casts the
/// inputs to float32, runs the float32 formula and rounds once (ONNX Runtime 1.32 has no CPU
/// kernel for any of them in bfloat16, so there is nothing to mirror). Float16 is handled by the
/// `*_f16` functions below, which mirror what ONNX Runtime actually runs there.
fn in_float(rw: &mut Rw, v: PValue, dt: i32) -> PValue {
    if matches!(dt, dtype::FLOAT16 | dtype::BFLOAT16) {
        rw.cast(v, dtype::FLOAT)
    } else {
        v
    }
}

/// The compute type for an input of type `dt` (see [`in_float`]).
fn compute_dtype(dt: i32) -> i32 {
    if matches!(dt, dtype::FLOAT16 | dtype::BFLOAT16) {
        dtype::FLOAT
    } else {
        dt
    }
}

/// Back to the node's type after [`in_float`].
fn back(rw: &mut Rw, y: PValue, dt: i32) -> PValue {
    if compute_dtype(dt) != dt {
        rw.cast(y, dt)
    } else {
        y
    }
}

// ---- float16: what ONNX Runtime 1.32 runs on CPU ------------------------------------------
//
// ONNX Runtime 1.32 registers no float16 CPU kernel for com.microsoft Gelu, FastGelu or ONNX
// Gelu-20. For such a node it inlines the operator's schema function body (contrib_defs.cc for
// Gelu and FastGelu, the ONNX function body for Gelu-20), whose constants are made with the
// input's type (float16 for the contrib ops); InsertCastTransformer then casts every float16
// value to float32 around the float-only nodes, and RemoveDuplicateCastTransformer drops the
// float16 round trips between them ("InsertedPrecisionFreeCast_*" in the optimized model). So
// the body runs entirely in float32, node by node in its own order, with the contrib constants
// rounded to float16 first, and the output is rounded once. Checked bit for bit against ONNX
// Runtime over every finite float16 input (and 200,000 random X + bias pairs for FastGelu).

/// A float32 constant holding `v` rounded to float16 (a float16 constant of the function body
/// after its inserted Cast to float32).
fn f16_const(rw: &mut Rw, hint: &str, v: f64) -> PValue {
    let h = super::rw::f32_to_f16(v as f32);
    rw.scalar(
        hint,
        dtype::FLOAT,
        crate::runtime::run::dtype::f16_to_f32(h) as f64,
    )
}

/// com.microsoft Gelu's function body in float32 with float16 constants:
/// `phi = (erf(C * x) + 1) * 0.5`, `y = x * phi`, C = M_SQRT1_2 rounded to float16 (0.70703).
fn gelu_ms_f16(rw: &mut Rw, x: PValue) -> Result<PValue, Unsupported> {
    if rw.opset < 9 {
        return unsupported(format!(
            "Erf needs opset >= 9; the model imports {}",
            rw.opset
        ));
    }
    let xf = rw.cast(x, dtype::FLOAT);
    let c = f16_const(rw, "inv_sqrt2_f16", std::f64::consts::FRAC_1_SQRT_2);
    let one = rw.scalar("one", dtype::FLOAT, 1.0);
    let half = rw.scalar("half", dtype::FLOAT, 0.5);
    let cx = rw.op("Mul", &[c, xf], &[]);
    let e = rw.op("Erf", &[cx], &[]);
    let e1 = rw.op("Add", &[e, one], &[]);
    let phi = rw.op("Mul", &[e1, half], &[]);
    let y = rw.op("Mul", &[xf, phi], &[]);
    Ok(rw.cast(y, dtype::FLOAT16))
}

/// FastGelu's function body in float32 with float16 constants, on `xb = x (+ bias)` (the bias
/// added in float32, not rounded): `t = tanh(xb * (B + C * (xb * xb)))`, `y = 0.5 * (xb * (1 +
/// t))`, B = sqrt(2/pi) and C = 0.044715 * sqrt(2/pi) rounded to float16 (0.79785, 0.035675).
fn fast_gelu_f16(rw: &mut Rw, xb: PValue) -> PValue {
    let b = f16_const(rw, "sqrt_2_over_pi_f16", SQRT_2_OVER_PI);
    let c = f16_const(rw, "cubic_f16", GELU_TANH_CUBIC);
    let one = rw.scalar("one", dtype::FLOAT, 1.0);
    let half = rw.scalar("half", dtype::FLOAT, 0.5);
    let t1 = rw.op("Mul", &[xb, xb], &[]);
    let t2 = rw.op("Mul", &[c, t1], &[]);
    let t3 = rw.op("Add", &[b, t2], &[]);
    let t4 = rw.op("Mul", &[xb, t3], &[]);
    let t5 = rw.op("Tanh", &[t4], &[]);
    let t6 = rw.op("Add", &[one, t5], &[]);
    let t7 = rw.op("Mul", &[xb, t6], &[]);
    let y = rw.op("Mul", &[half, t7], &[]);
    rw.cast(y, dtype::FLOAT16)
}

/// ONNX Gelu-20's function body in float32 (its constants are float32 there):
/// approximate="none": `y = (0.5 * x) * (1 + erf(x / sqrt(2)))`;
/// approximate="tanh": `y = (0.5 * x) * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`, with
/// `x^3` by Pow and sqrt(2/pi) the float32 square root of float32 2/pi, as the body's Sqrt.
fn gelu_onnx_f16(rw: &mut Rw, x: PValue, tanh: bool) -> Result<PValue, Unsupported> {
    if !tanh && rw.opset < 9 {
        return unsupported(format!(
            "Erf needs opset >= 9; the model imports {}",
            rw.opset
        ));
    }
    let xf = rw.cast(x, dtype::FLOAT);
    let half = rw.scalar("half", dtype::FLOAT, 0.5);
    let one = rw.scalar("one", dtype::FLOAT, 1.0);
    let mx = rw.op("Mul", &[half, xf], &[]);
    let phi = if tanh {
        let three = rw.scalar("three", dtype::FLOAT, 3.0);
        let c0 = rw.scalar("c0", dtype::FLOAT, 0.044715);
        let k = ((2.0 / std::f64::consts::PI) as f32).sqrt();
        let k = rw.scalar("sqrt_2_over_pi", dtype::FLOAT, k as f64);
        let x3 = rw.op("Pow", &[xf, three], &[]);
        let x3c = rw.op("Mul", &[c0, x3], &[]);
        let s = rw.op("Add", &[xf, x3c], &[]);
        let ti = rw.op("Mul", &[k, s], &[]);
        let t = rw.op("Tanh", &[ti], &[]);
        rw.op("Add", &[one, t], &[])
    } else {
        let sqrt2 = rw.scalar("sqrt2", dtype::FLOAT, (2.0f32).sqrt() as f64);
        let xs = rw.op("Div", &[xf, sqrt2], &[]);
        let e = rw.op("Erf", &[xs], &[]);
        rw.op("Add", &[one, e], &[])
    };
    let y = rw.op("Mul", &[mx, phi], &[]);
    Ok(rw.cast(y, dtype::FLOAT16))
}

/// com.microsoft Gelu (ContribOperators.md, Gelu: Gaussian Error Linear Unit).
pub fn gelu_ms(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let x = rw.need(0, "X")?;
    let dt = rw.float_dtype(0)?;
    if dt == dtype::FLOAT16 {
        let y = gelu_ms_f16(&mut rw, x)?;
        return rw.finish(&[(0, y)]);
    }
    let xf = in_float(&mut rw, x, dt);
    let y = gelu_erf(&mut rw, xf, compute_dtype(dt))?;
    let y = back(&mut rw, y, dt);
    rw.finish(&[(0, y)])
}

/// BiasGelu: `Gelu(A + B)` (ContribOperators.md, BiasGelu: "takes the sum of input A and bias
/// input B as the input of Gelu activation").
pub fn bias_gelu(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let a = rw.need(0, "A")?;
    let b = rw.need(1, "B")?;
    let dt = rw.float_dtype(0)?;
    let af = in_float(&mut rw, a, dt);
    let bf = in_float(&mut rw, b, dt);
    let s = rw.op("Add", &[af, bf], &[]);
    let y = gelu_erf(&mut rw, s, compute_dtype(dt))?;
    let y = back(&mut rw, y, dt);
    rw.finish(&[(0, y)])
}

/// FastGelu: tanh GELU of `X + bias` (ContribOperators.md, FastGelu, "with an optional input
/// of bias that will be added to X before GELU").
pub fn fast_gelu(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let x = rw.need(0, "X")?;
    let dt = rw.float_dtype(0)?;
    let xf = in_float(&mut rw, x, dt);
    let xb = match rw.input(1) {
        Some(b) => {
            let bf = in_float(&mut rw, b, dt);
            rw.op("Add", &[xf, bf], &[])
        }
        None => xf,
    };
    if dt == dtype::FLOAT16 {
        let y = fast_gelu_f16(&mut rw, xb);
        return rw.finish(&[(0, y)]);
    }
    let y = gelu_tanh(&mut rw, xb, compute_dtype(dt));
    let y = back(&mut rw, y, dt);
    rw.finish(&[(0, y)])
}

/// QuickGelu: `Y = X * Sigmoid(alpha * X)`, alpha default 1.702 (ContribOperators.md,
/// QuickGelu; ONNX Runtime writes Swish/SiLU as QuickGelu with alpha = 1).
pub fn quick_gelu(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["alpha"])?;
    let x = rw.need(0, "X")?;
    let alpha = rw.attr_f("alpha", 1.702);
    let ax = if alpha == 1.0 {
        x
    } else {
        let dt = rw.float_dtype(0)?;
        rw.scale(x, alpha as f64, dt)
    };
    let s = rw.op("Sigmoid", &[ax], &[]);
    let y = rw.op("Mul", &[x, s], &[]);
    rw.finish(&[(0, y)])
}

/// ONNX Gelu-20: approximate "none" (erf) or "tanh" (ONNX operator docs, Gelu).
pub fn gelu_onnx(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["approximate"])?;
    let x = rw.need(0, "X")?;
    let dt = rw.float_dtype(0)?;
    let approximate = rw
        .attr_s("approximate")
        .unwrap_or_else(|| "none".to_string());
    if !matches!(approximate.as_str(), "none" | "tanh") {
        return unsupported(format!("approximate='{approximate}'"));
    }
    if dt == dtype::FLOAT16 {
        let y = gelu_onnx_f16(&mut rw, x, approximate == "tanh")?;
        return rw.finish(&[(0, y)]);
    }
    let xf = in_float(&mut rw, x, dt);
    let y = if approximate == "tanh" {
        gelu_tanh(&mut rw, xf, compute_dtype(dt))
    } else {
        gelu_erf(&mut rw, xf, compute_dtype(dt))?
    };
    let y = back(&mut rw, y, dt);
    rw.finish(&[(0, y)])
}
