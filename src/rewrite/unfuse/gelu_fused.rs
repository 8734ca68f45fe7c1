//! GemmFastGelu and BiasSplitGelu (ONNX Runtime contrib operators, written by its transformer
//! optimizer for BERT-style MLPs and for Stable Diffusion UNets).
//!
//! ONNX Runtime 1.32's CPU provider has no kernel for either (only CUDA/ROCm/DirectML do), so
//! the decompositions cannot be compared with ONNX Runtime CPU: `tools/fuzz_decomp.py` checks
//! them against a float64 reference of the documented formula. float16 is computed in float32
//! and rounded once at the end (the GPU kernels accumulate in float).

use crate::ir::{Graph, NodeId};
use crate::rewrite::{PValue, Patch};

use super::attention_past::work_type;
use super::gelu::gelu_erf;
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// Input `i` in the working type `work` (a Cast when its type differs).
fn to_work(rw: &mut Rw, i: usize, x: PValue, work: i32) -> PValue {
    match rw.in_facts(i).dtype {
        Some(t) if t != work => rw.cast(x, work),
        _ => x,
    }
}

/// Refuse an input whose element type is known and is not `dt`.
fn same_type(rw: &Rw, i: usize, what: &str, dt: i32) -> Result<(), Unsupported> {
    match rw.in_facts(i).dtype {
        Some(t) if t != dt => unsupported(format!(
            "{what} has element type {}, the input {}",
            crate::tensor::dtype_name(t),
            crate::tensor::dtype_name(dt)
        )),
        _ => Ok(()),
    }
}

/// -2 sqrt(2 / pi), and -2 * 0.044715 * sqrt(2 / pi).
const M2_SQRT_2_OVER_PI: f64 = -2.0 * 0.797_884_560_802_865_4;
const M2_CUBIC: f64 = -2.0 * 0.044715 * 0.797_884_560_802_865_4;

/// The tanh GELU in the form `x / (1 + exp(-2 z))`, `z = sqrt(2/pi) (x + 0.044715 x^3)`:
/// equal to `0.5 x (1 + tanh(z))`. For negative `x` the tanh form cancels in `1 + tanh(z)`,
/// and ONNX Runtime's CPU Tanh and Sigmoid are accurate in absolute terms only (up to 1e-4
/// and 6e-2 of an output near -4 off, measured by `tools/fuzz_decomp.py` against a float64
/// reference); its Exp is accurate relative to the value, and so is this form.
fn gelu_tanh_exp(rw: &mut Rw, x: PValue, dt: i32) -> PValue {
    let a = rw.scalar("m2_sqrt_2_over_pi", dt, M2_SQRT_2_OVER_PI);
    let c = rw.scalar("m2_cubic", dt, M2_CUBIC);
    let one = rw.scalar("one", dt, 1.0);
    let x2 = rw.op("Mul", &[x, x], &[]);
    let cx2 = rw.op("Mul", &[c, x2], &[]);
    let inner = rw.op("Add", &[a, cx2], &[]);
    let arg = rw.op("Mul", &[x, inner], &[]);
    let e = rw.op("Exp", &[arg], &[]);
    let d = rw.op("Add", &[one, e], &[]);
    rw.op("Div", &[x, d], &[])
}

/// GemmFastGelu: `Y = FastGelu(MatMul(X, W) + bias)` (ContribOperators.md, GemmFastGelu: "a
/// fusion of MatMul and FastGelu"; X `[..., K]`, W `[K, N]`, bias `[N]` optional). FastGelu is
/// the tanh approximation `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub fn gemm_fast_gelu(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let x = rw.need(0, "X")?;
    let w = rw.need(1, "W")?;
    let dt = rw.float_dtype(0)?;
    same_type(&rw, 1, "W", dt)?;
    same_type(&rw, 2, "bias", dt)?;
    if let Some(r) = rw.in_facts(1).rank() {
        if r != 2 {
            return unsupported(format!("W of rank {r} (only 2-D [K, N])"));
        }
    }
    let work = work_type(dt);
    let xw = to_work(&mut rw, 0, x, work);
    let ww = to_work(&mut rw, 1, w, work);
    let mut m = rw.op("MatMul", &[xw, ww], &[]);
    if let Some(b) = rw.input(2) {
        let bw = to_work(&mut rw, 2, b, work);
        m = rw.op("Add", &[m, bw], &[]);
    }
    let mut y = gelu_tanh_exp(&mut rw, m, work);
    if work != dt {
        y = rw.cast(y, dt);
    }
    rw.finish(&[(0, y)])
}

/// BiasSplitGelu: `(X + bias)` split in two halves `L, R` along the last axis,
/// `Y = L * Gelu(R)` with the exact (erf) Gelu (ONNX Runtime `diffusion_defs.cc`: "after adding
/// bias, hidden state is sliced into two tensors of same size, then left tensor multiplies the
/// Gelu activation result of right tensor"; X `[N, S, D]`, bias `[D]`, Y `[N, S, D/2]`).
pub fn bias_split_gelu(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let x = rw.need(0, "X")?;
    let b = rw.need(1, "bias")?;
    let dt = rw.float_dtype(0)?;
    same_type(&rw, 1, "bias", dt)?;
    let r = rw.rank(0, "BiasSplitGelu layout")?;
    if r != 3 {
        return unsupported(format!("X of rank {r} (the operator takes [N, S, D])"));
    }
    let d = match (rw.in_facts(1).dim(0), rw.in_facts(0).dim(2)) {
        (Some(d), _) | (None, Some(d)) => d,
        _ => return unsupported("the hidden size D is unknown (needed to split)"),
    };
    if d <= 0 || d % 2 != 0 {
        return unsupported(format!("hidden size {d} is not even"));
    }
    let work = work_type(dt);
    let xw = to_work(&mut rw, 0, x, work);
    let bw = to_work(&mut rw, 1, b, work);
    let s = rw.op("Add", &[xw, bw], &[]);
    let left = rw.slice(s, &[0], &[d / 2], &[-1]);
    let right = rw.slice(s, &[d / 2], &[d], &[-1]);
    let gr = gelu_erf(&mut rw, right, work)?;
    let mut y = rw.op("Mul", &[left, gr], &[]);
    if work != dt {
        y = rw.cast(y, dt);
    }
    rw.finish(&[(0, y)])
}
