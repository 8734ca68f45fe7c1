//! Layer normalizations: LayerNormalization (ONNX-17, and ONNX Runtime's default-domain version
//! before 17), SimplifiedLayerNormalization (RMSNorm), SkipLayerNormalization and
//! SkipSimplifiedLayerNormalization (ONNX Runtime contrib).

use crate::ir::{Graph, NodeId};
use crate::rewrite::{PValue, Patch};
use crate::tensor::dtype;

use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// What a normalization produced: the normalized input (before scale and bias, in the input's
/// element type) and the statistics (in the stash type).
struct Normed {
    normalized: PValue,
    mean: Option<PValue>,
    /// `Sqrt(Var + epsilon)`: the InvStdDev output is its Reciprocal ([`Normed::inv_std`]),
    /// written only where that output is read.
    sd: PValue,
}

impl Normed {
    fn inv_std(&self, rw: &mut Rw) -> PValue {
        rw.op("Reciprocal", &[self.sd], &[])
    }
}

/// The reduction axes `axis..rank`: negative indices when possible (no rank needed from
/// opset 11), else from the known rank.
fn norm_axes(rw: &Rw, axis: i64) -> Result<Vec<i64>, Unsupported> {
    let rank = rw.in_facts(0).rank();
    let neg = |r: i64| -> Vec<i64> {
        let a = if axis < 0 { axis } else { axis - r };
        (a..0).collect()
    };
    let pos = |r: i64| -> Vec<i64> {
        let a = if axis < 0 { axis + r } else { axis };
        (a..r).collect()
    };
    match (rank, axis < 0, rw.opset >= 11) {
        (_, true, true) => Ok(neg(0)),
        (Some(r), _, true) => Ok(neg(r as i64)),
        (Some(r), _, false) => Ok(pos(r as i64)),
        (None, _, _) => unsupported(format!(
            "the input rank is unknown (axis {axis} needs it at opset {})",
            rw.opset
        )),
    }
    .and_then(|v: Vec<i64>| {
        if v.is_empty() {
            unsupported(format!("axis {axis} selects no dimension"))
        } else {
            Ok(v)
        }
    })
}

/// ONNX LayerNormalization-17 function body (ONNX operator docs): with `Xs` the input in the
/// stash type, `Mean = ReduceMean(Xs)`, `D = Xs - Mean`, `Var = ReduceMean(D * D)`,
/// `InvStdDev = Reciprocal(Sqrt(Var + epsilon))`, `Normalized = D * InvStdDev` (cast back).
/// RMS variant (`simplified`, ONNX Runtime SimplifiedLayerNormalization:
/// `y = x / sqrt(mean(x^2) + epsilon) * scale`): no mean is subtracted.
///
/// Two changes of order follow ONNX Runtime 1.32's CPU kernels (`layer_norm_impl.cc`,
/// `skip_layer_norm.cc`; checked bit for bit against a NumPy replay of their arithmetic), with
/// the same value in exact arithmetic:
/// - the mean is taken about the row's first element, `X0 + ReduceMean(Xs - X0)`, as Welford's
///   update starts from it (`mean = x0`, then `mean += (x - mean) / k`): on a residual stream
///   near 4e3 with a deviation near 1 the differences are exact and small, so the mean rounds
///   once at the stream's magnitude instead of through a sum four times it (the plain
///   ReduceMean was 1.2e-5 and 2.2e-4 of the output's scale off a float64 evaluation in fuzz
///   cases TransformerChain_ffeff2855449 and _a107b1703d0a, the kernel 6.4e-6 and 6.3e-5; this
///   order 4.0e-6 and 7.1e-5). Welford's sequence itself is not written: it is one step an
///   element, a `Scan` on every provider's CPU.
/// - the output divides by the deviation, `D / Sqrt(Var + epsilon)`, as the kernels do, rather
///   than multiplying by its rounded reciprocal (which the InvStdDev output still is: the
///   kernels write `1 / deviation` there).
fn normalize(
    rw: &mut Rw,
    x: PValue,
    axes: &[i64],
    eps: f32,
    stash: i32,
    simplified: bool,
    dt: i32,
) -> Result<Normed, Unsupported> {
    let cast = dt != stash;
    let xs = if cast { rw.cast(x, stash) } else { x };
    let (centered, mean) = if simplified {
        (xs, None)
    } else {
        let zeros = vec![0; axes.len()];
        let ones = vec![1; axes.len()];
        let first = rw.slice(xs, &zeros, &ones, axes);
        let shifted = rw.op("Sub", &[xs, first], &[]);
        let rest = rw.reduce("ReduceMean", shifted, axes, true);
        let mean = rw.op("Add", &[first, rest], &[]);
        (rw.op("Sub", &[xs, mean], &[]), Some(mean))
    };
    let sq = rw.op("Mul", &[centered, centered], &[]);
    let var = rw.reduce("ReduceMean", sq, axes, true);
    let e = rw.scalar("epsilon", stash, eps as f64);
    let ve = rw.op("Add", &[var, e], &[]);
    let sd = rw.op("Sqrt", &[ve], &[]);
    let n = rw.op("Div", &[centered, sd], &[]);
    let normalized = if cast { rw.cast(n, dt) } else { n };
    Ok(Normed {
        normalized,
        mean,
        sd,
    })
}

/// The stash type: the element type of the statistics outputs (Mean, InvStdDev).
fn stash_type(rw: &Rw) -> Result<i32, Unsupported> {
    match rw.attr_i("stash_type", 1) {
        1 => Ok(dtype::FLOAT),
        t @ (10 | 11 | 16) => Ok(t as i32),
        t => unsupported(format!("stash_type {t}")),
    }
}

/// The type ONNX Runtime's CPU kernel (`core/providers/cpu/nn/layer_norm_impl.cc`) computes
/// in: double for double input, float otherwise. It does not read `stash_type`: a float16 or
/// bfloat16 input is converted to float, normalized, scaled and shifted in float, and rounded
/// once. (Computing in a float16 stash type instead rounds epsilon too: 1e-12 becomes 0, and a
/// constant row gives 0 / 0 = NaN where the kernel gives the bias; fuzz case
/// LayerNormGroup_23ea1df09d44.)
fn compute_type(dt: i32) -> i32 {
    if dt == dtype::DOUBLE {
        dtype::DOUBLE
    } else {
        dtype::FLOAT
    }
}

/// LayerNormalization / SimplifiedLayerNormalization: normalize in the kernel's compute type,
/// apply scale (and bias) there, round the output once, and give the statistics in the stash
/// type.
fn layer_norm_common(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
    simplified: bool,
) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["axis", "epsilon", "stash_type"])?;
    let x = rw.need(0, "X")?;
    let scale = rw.need(1, "Scale")?;
    let axes = norm_axes(&rw, rw.attr_i("axis", -1))?;
    let eps = rw.attr_f("epsilon", 1e-5);
    let stash = stash_type(&rw)?;
    let dt = rw.float_dtype(0)?;
    let ct = compute_type(dt);
    let wide = ct != dt;
    let to_c = |rw: &mut Rw, v: PValue| if wide { rw.cast(v, ct) } else { v };
    let xc = to_c(&mut rw, x);
    let nm = normalize(&mut rw, xc, &axes, eps, ct, simplified, ct)?;
    let sc = to_c(&mut rw, scale);
    let mut y = rw.op("Mul", &[nm.normalized, sc], &[]);
    if let Some(b) = rw.input(2).filter(|_| !simplified) {
        let bc = to_c(&mut rw, b);
        y = rw.op("Add", &[y, bc], &[]);
    }
    if wide {
        y = rw.cast(y, dt);
    }
    let stat = |rw: &mut Rw, v: PValue| if stash != ct { rw.cast(v, stash) } else { v };
    // The statistics outputs, written only where they are read.
    let (inv_slot, mean_slot) = if simplified { (1, None) } else { (2, Some(1)) };
    let mut outs = vec![(0, y)];
    if rw.used(inv_slot) {
        let inv_std = nm.inv_std(&mut rw);
        outs.push((inv_slot, stat(&mut rw, inv_std)));
    }
    if let (Some(slot), Some(m)) = (mean_slot, nm.mean) {
        if rw.used(slot) {
            outs.push((slot, stat(&mut rw, m)));
        }
    }
    rw.finish(&outs)
}

/// LayerNormalization: `Y = Normalized * Scale + B`, outputs Mean and InvStdDev (ONNX
/// operator docs, LayerNormalization-17; ONNX Runtime's default-domain LayerNormalization-1
/// has the same inputs, outputs and attributes).
///
/// Class rounding, with a limit no decomposition passes: ONNX Runtime 1.32's kernel takes the
/// mean and variance by Welford's update (`mean += (x - mean) / k`, one element at a time
/// below 8 elements, 8 lanes merged above), this one by a ReduceMean about the row's first
/// element (`normalize`). Both are accurate, but their means can differ by an ulp, and
/// `x - mean` turns an ulp of the mean into `|mean| / std` ulps of the output: past 1e-5 of the
/// scale where a row's mean is some 200 times its standard deviation, or a row is constant to a
/// few ulps with a tiny epsilon (fuzz cases LayerNormGroup_1cc47a1d41de,
/// LayerNormGroup_2ac466fe4208; judged against a float64 evaluation).
pub fn layer_norm(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    layer_norm_common(ctx, g, n, false)
}

/// SimplifiedLayerNormalization (ONNX Runtime, default domain): RMS normalization,
/// `Y = X / sqrt(mean(X^2) + epsilon) * scale`; outputs Y and inv_std_var.
pub fn simplified_layer_norm(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    layer_norm_common(ctx, g, n, true)
}

/// SkipLayerNormalization: `S = input + skip (+ bias)`, `output = LayerNorm(S) * gamma
/// (+ beta)` over the last axis; outputs mean, inv_std_var (float) and
/// input_skip_bias_sum = S (ContribOperators.md / `bert_defs.cc`, SkipLayerNormalization).
///
/// ONNX Runtime 1.32's CPU kernel (`contrib_ops/cpu/skip_layer_norm.cc`, checked bit for bit
/// against a NumPy replay) takes the mean and the variance by Welford's update, one element
/// after the other (`delta = s - mean; mean += delta / (h + 1); M2 += delta * (s - mean)`), in
/// float for float32, float16 and bfloat16 inputs (in double for double), then
/// `(s - mean) / sqrt(M2 / H + epsilon) * gamma + beta`; not the one-pass `E[s^2] - E[s]^2` of
/// releases before it (which went negative on a residual stream near 4e3: NaN). Welford's
/// sequential update cannot be written with ONNX reductions (a `Scan` would, one element per
/// step, on the CPU of every GPU provider), so the mean here is a ReduceMean about the row's
/// first element, and the output divides by the deviation as the kernel does (`normalize`):
/// both means are within rounding of the true mean, but where a row's mean is ~1000 times its
/// deviation (a Whisper encoder's residual stream near 4e3) `s - mean` turns an ulp of the mean
/// into `|mean| / std` ulps of the output, past 1e-5 of the scale, with the kernel as far off a
/// float64 evaluation itself. `verify` shows such an output against a float64 evaluation of the
/// original (`verify/wide.rs`) instead of failing it. SkipSimplifiedLayerNormalization has no mean: its
/// kernel's sequential float sum of squares and this ReduceMean differ by rounding only.
pub fn skip_layer_norm(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    skip_norm(ctx, g, n, false)
}

/// SkipSimplifiedLayerNormalization: as SkipLayerNormalization with RMS normalization, inputs
/// input, skip, gamma, bias (no beta); outputs output, (mean: not defined for RMS), inv_std_var,
/// input_skip_bias_sum.
pub fn skip_simplified_layer_norm(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
) -> Result<Patch, Unsupported> {
    skip_norm(ctx, g, n, true)
}

fn skip_norm(
    ctx: &UnfuseCtx,
    g: &Graph,
    n: NodeId,
    simplified: bool,
) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["epsilon"])?;
    let x = rw.need(0, "input")?;
    let skip = rw.need(1, "skip")?;
    let gamma = rw.need(2, "gamma")?;
    let (beta, bias) = if simplified {
        (None, rw.input(3))
    } else {
        (rw.input(3), rw.input(4))
    };
    let eps = rw.attr_f("epsilon", 1e-12);
    // `mean` (output 1): the mean of the sum, reported at its own scale, while its rounding
    // error is relative to the sum's magnitude: where the row nearly cancels (a mean 1e-4 of
    // the values) no reduction order other than the kernel's own stays within rounding at
    // that scale (found by `tools/fuzz_decomp.py` on a 4096-wide row). ONNX Runtime's
    // inference graphs never read it; a consumer keeps the node.
    if rw.used(1) {
        return unsupported(
            "output 1 (mean) is read: it cancels on nearly zero-mean rows, beyond rounding at its own scale",
        );
    }
    let dt = rw.float_dtype(0)?;
    // ONNX Runtime's float16 kernel (`contrib_ops/cpu/skip_layer_norm.cc`) converts input,
    // skip, bias, gamma and beta to float, sums and normalizes in float, and rounds the output
    // (and the sum output) once; the statistics come from the float sum, not a rounded one.
    let wide = matches!(dt, dtype::FLOAT16 | dtype::BFLOAT16);
    let to_f = |rw: &mut Rw, v: PValue| if wide { rw.cast(v, dtype::FLOAT) } else { v };
    let xf = to_f(&mut rw, x);
    let sf = to_f(&mut rw, skip);
    let mut s = rw.op("Add", &[xf, sf], &[]);
    if let Some(b) = bias {
        let bf = to_f(&mut rw, b);
        s = rw.op("Add", &[s, bf], &[]);
    }
    let cdt = if wide { dtype::FLOAT } else { dt };
    let nm = normalize(&mut rw, s, &[-1], eps, dtype::FLOAT, simplified, cdt)?;
    let gf = to_f(&mut rw, gamma);
    let mut y = rw.op("Mul", &[nm.normalized, gf], &[]);
    if let Some(b) = beta {
        let bf = to_f(&mut rw, b);
        y = rw.op("Add", &[y, bf], &[]);
    }
    let y = if wide { rw.cast(y, dt) } else { y };
    // The other outputs, written only where they are read.
    let mut outs = vec![(0, y)];
    if let Some(m) = nm.mean.filter(|_| rw.used(1)) {
        outs.push((1, m));
    }
    if rw.used(2) {
        outs.push((2, nm.inv_std(&mut rw)));
    }
    if rw.used(3) {
        outs.push((3, if wide { rw.cast(s, dt) } else { s }));
    }
    rw.finish(&outs)
}
