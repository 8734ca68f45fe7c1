//! ONNX operators defined by function bodies (HardSwish, Mish, GroupNormalization), and small
//! ONNX Runtime contrib operators that are plain compositions (BiasAdd, BiasSoftmax).
//! The standard ones are decomposed only when a rule asks (a target that lacks them).

use crate::ir::{Graph, NodeId};
use crate::rewrite::{AttrValue, Patch};
use crate::tensor::dtype;

use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// HardSwish-14: `y = x * HardSigmoid(x; alpha = 1/6, beta = 0.5)` (ONNX operator docs,
/// HardSwish function body).
pub fn hard_swish(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let x = rw.need(0, "X")?;
    let hs = rw.op(
        "HardSigmoid",
        &[x],
        &[
            ("alpha", AttrValue::Float(1.0 / 6.0)),
            ("beta", AttrValue::Float(0.5)),
        ],
    );
    let y = rw.op("Mul", &[x, hs], &[]);
    rw.finish(&[(0, y)])
}

/// Mish-18: `y = x * tanh(softplus(x))` (ONNX operator docs, Mish function body).
pub fn mish(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let x = rw.need(0, "X")?;
    let sp = rw.op("Softplus", &[x], &[]);
    let t = rw.op("Tanh", &[sp], &[]);
    let y = rw.op("Mul", &[x, t], &[]);
    rw.finish(&[(0, y)])
}

/// GroupNormalization (ONNX operator docs, function body of versions 18 and 21): the input
/// `[N, C, ...]` is viewed as `[N, G, -1]`, each group normalized,
/// `(x - mean) / sqrt(mean(x * x) - mean * mean + epsilon)`, then reshaped back and scaled.
/// Version 18 (models at opset 18-20) computes in the input's type and takes scale and bias per
/// group (`[G]`); version 21 computes in the stash type (float) and casts the normalized value
/// back, and takes them per channel (`[C]`). ONNX Runtime has no kernel for it: it runs the
/// function body, so the decomposition is that body, operation for operation (the variance as
/// `E[x^2] - E[x]^2`, not `E[(x - mean)^2]`: they differ by float rounding, a lot on nearly
/// constant groups; found by `tools/fuzz_decomp.py`). A float16 or bfloat16 input is computed
/// in float from the input's cast to the output's, scale and bias included, at either version:
/// ONNX Runtime's CPU provider has no half-precision kernels for the body's ops, wraps each in
/// casts to float and drops the casts between them, so only the output is rounded (bit-identical
/// on 1,500 fuzzed float16 instances; the body's own half-precision arithmetic was 1.2e-3 to
/// 3.3e-3 of scale off on groups of 2 elements).
pub fn group_norm(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["epsilon", "num_groups", "stash_type"])?;
    let x = rw.need(0, "X")?;
    let scale = rw.need(1, "scale")?;
    let bias = rw.need(2, "bias")?;
    let dt = rw.float_dtype(0)?;
    let groups = match rw.attr("num_groups").and_then(|a| a.i()) {
        Some(g) if g > 0 => g,
        _ => return unsupported("num_groups is required"),
    };
    let eps = rw.attr_f("epsilon", 1e-5);
    let per_channel = rw.opset >= 21;
    let half = dt == dtype::FLOAT16 || dt == dtype::BFLOAT16;
    let stash = if !per_channel {
        if half {
            dtype::FLOAT
        } else {
            dt
        }
    } else {
        match rw.attr_i("stash_type", 1) {
            1 => dtype::FLOAT,
            t => return unsupported(format!("stash_type {t}")),
        }
    };
    let shape = rw.op("Shape", &[x], &[]);
    let x3 = rw.reshape(x, &[0, groups, -1])?;
    let cast = dt != stash;
    let xs = if cast { rw.cast(x3, stash) } else { x3 };
    let mean = rw.reduce("ReduceMean", xs, &[2], true);
    let sq = rw.op("Mul", &[xs, xs], &[]);
    let mean_sq = rw.reduce("ReduceMean", sq, &[2], true);
    let sq_mean = rw.op("Mul", &[mean, mean], &[]);
    let var = rw.op("Sub", &[mean_sq, sq_mean], &[]);
    let e = rw.scalar("epsilon", stash, eps as f64);
    let ve = rw.op("Add", &[var, e], &[]);
    let sd = rw.op("Sqrt", &[ve], &[]);
    let d = rw.op("Sub", &[xs, mean], &[]);
    let nrm = rw.op("Div", &[d, sd], &[]);
    // Half precision: scale and bias in float too, one rounding at the end.
    let late = cast && half;
    let nrm = if cast && !late { rw.cast(nrm, dt) } else { nrm };
    let (scale, bias) = if late {
        (rw.cast(scale, stash), rw.cast(bias, stash))
    } else {
        (scale, bias)
    };
    let y = if per_channel {
        let rank = rw.rank(0, "per-channel scale of GroupNormalization-21")?;
        let back = rw.op("Reshape", &[nrm, shape], &[]);
        let axes: Vec<i64> = (1..rank as i64 - 1).collect();
        let (s, b) = if axes.is_empty() {
            (scale, bias)
        } else {
            (rw.unsqueeze(scale, &axes), rw.unsqueeze(bias, &axes))
        };
        let ys = rw.op("Mul", &[back, s], &[]);
        rw.op("Add", &[ys, b], &[])
    } else {
        let s = rw.unsqueeze(scale, &[1]);
        let b = rw.unsqueeze(bias, &[1]);
        let ys = rw.op("Mul", &[nrm, s], &[]);
        let yb = rw.op("Add", &[ys, b], &[]);
        rw.op("Reshape", &[yb, shape], &[])
    };
    let y = if late { rw.cast(y, dt) } else { y };
    rw.finish(&[(0, y)])
}

/// BiasAdd: `Y = X + bias + skip` (ContribOperators.md, BiasAdd: "Add input with bias, then
/// add residual inputs").
pub fn bias_add(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[])?;
    let x = rw.need(0, "X")?;
    let b = rw.need(1, "bias")?;
    let s = rw.need(2, "skip")?;
    let xb = rw.op("Add", &[x, b], &[]);
    let y = rw.op("Add", &[xb, s], &[]);
    rw.finish(&[(0, y)])
}

/// BiasSoftmax: `Y = softmax(data + bias)` over the dimensions `axis..` (ContribOperators.md,
/// BiasSoftmax: "apply softmax to elements for dimensions axis or higher"; default axis 1).
/// ONNX Runtime forms it from `Softmax(Add(data, bias))` whose Add broadcasts the ONNX way
/// (`bias_softmax_fusion.cc`); `is_inner_broadcast` only says which of the two broadcasts that
/// Add did, so the decomposition is that Add and a softmax over the flattened trailing axes.
pub fn bias_softmax(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["axis", "is_inner_broadcast"])?;
    let x = rw.need(0, "data")?;
    let b = rw.need(1, "bias")?;
    let mut axis = rw.attr_i("axis", 1);
    if axis >= 0 {
        if let Some(r) = rw.in_facts(0).rank() {
            if axis == r as i64 - 1 {
                axis = -1;
            }
        }
    }
    let s = rw.op("Add", &[x, b], &[]);
    let y = rw.softmax_flat(s, axis);
    rw.finish(&[(0, y)])
}
