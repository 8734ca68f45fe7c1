//! The GELU family: Gelu, BiasGelu, FastGelu, QuickGelu (ONNX Runtime contrib) and ONNX Gelu-20.

use crate::ir::{Graph, NodeId};
use crate::rewrite::{PValue, Patch};

use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// sqrt(2 / pi).
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// 0.044715 * sqrt(2 / pi).
const GELU_TANH_CUBIC: f64 = 0.044715 * SQRT_2_OVER_PI;

/// Exact GELU: `0.5 * x * (1 + erf(x / sqrt(2)))` (ONNX Gelu-20 with approximate="none"; ONNX
/// Runtime's com.microsoft Gelu function body multiplies by M_SQRT1_2 the same way).
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
    let xe = rw.op("Mul", &[x, e1], &[]);
    Ok(rw.op("Mul", &[xe, half], &[]))
}

/// Tanh GELU: `0.5 * x * (1 + tanh(x * (sqrt(2/pi) + 0.044715 * sqrt(2/pi) * x^2)))`
/// (ONNX Gelu-20 approximate="tanh"; ContribOperators.md FastGelu:
/// `Y=0.5*X*(1+tanh(0.797885*X+0.035677*X*X*X))`, constants here at full precision as in ONNX
/// Runtime's CPU kernel).
pub(super) fn gelu_tanh(rw: &mut Rw, x: PValue, dt: i32) -> PValue {
    let a = rw.scalar("sqrt_2_over_pi", dt, SQRT_2_OVER_PI);
    let c = rw.scalar("cubic", dt, GELU_TANH_CUBIC);
    let one = rw.scalar("one", dt, 1.0);
    let half = rw.scalar("half", dt, 0.5);
    let x2 = rw.op("Mul", &[x, x], &[]);
    let cx2 = rw.op("Mul", &[c, x2], &[]);
    let inner = rw.op("Add", &[a, cx2], &[]);
    let arg = rw.op("Mul", &[x, inner], &[]);
    let t = rw.op("Tanh", &[arg], &[]);
    let t1 = rw.op("Add", &[t, one], &[]);
    let xt = rw.op("Mul", &[x, t1], &[]);
    rw.op("Mul", &[xt, half], &[])
}

/// com.microsoft Gelu (ContribOperators.md, Gelu: Gaussian Error Linear Unit).
pub fn gelu_ms(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let x = rw.need(0, "X")?;
    let dt = rw.float_dtype(0)?;
    let y = gelu_erf(&mut rw, x, dt)?;
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
    let s = rw.op("Add", &[a, b], &[]);
    let y = gelu_erf(&mut rw, s, dt)?;
    rw.finish(&[(0, y)])
}

/// FastGelu: tanh GELU of `X + bias` (ContribOperators.md, FastGelu, "with an optional input
/// of bias that will be added to X before GELU").
pub fn fast_gelu(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let x = rw.need(0, "X")?;
    let dt = rw.float_dtype(0)?;
    let xb = match rw.input(1) {
        Some(b) => rw.op("Add", &[x, b], &[]),
        None => x,
    };
    let y = gelu_tanh(&mut rw, xb, dt);
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
    let y = match rw.attr_s("approximate").as_deref().unwrap_or("none") {
        "none" => gelu_erf(&mut rw, x, dt)?,
        "tanh" => gelu_tanh(&mut rw, x, dt),
        other => return unsupported(format!("approximate='{other}'")),
    };
    rw.finish(&[(0, y)])
}
