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

/// ONNX Runtime's GELU kernels take float32 only; for float16 (bfloat16) it inserts a Cast to
/// float32 on each input and one back on the output. The decomposition does the same: inputs
/// are cast to float32, the formula runs in float32, the result is rounded once.
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

/// com.microsoft Gelu (ContribOperators.md, Gelu: Gaussian Error Linear Unit).
pub fn gelu_ms(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let x = rw.need(0, "X")?;
    let dt = rw.float_dtype(0)?;
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
    let xf = in_float(&mut rw, x, dt);
    let y = if approximate == "tanh" {
        gelu_tanh(&mut rw, xf, compute_dtype(dt))
    } else {
        gelu_erf(&mut rw, xf, compute_dtype(dt))?
    };
    let y = back(&mut rw, y, dt);
    rw.finish(&[(0, y)])
}
