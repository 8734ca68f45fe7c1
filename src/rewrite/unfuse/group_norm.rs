//! GroupNorm and SkipGroupNorm (ONNX Runtime contrib operators of Stable Diffusion UNets, NHWC
//! by default).
//!
//! ONNX Runtime `diffusion_defs.cc`: `y = gamma * (x - mean) / sqrt(variance + epsilon) +
//! beta`, the mean and (biased) variance taken per batch entry over each group of
//! `C / groups` consecutive channels and every spatial position; `activation` 1 applies SiLU
//! (`y * sigmoid(y)`) after; SkipGroupNorm normalizes `s = x + skip + bias` and may output `s`.
//! gamma and beta (type M) may be float32 while X is float16.
//!
//! ONNX Runtime 1.32's CPU provider has no kernel for either (CUDA and DirectML do), so the
//! decompositions are checked against a float64 reference of that formula
//! (`tools/fuzz_decomp.py`), not against ONNX Runtime. float16 is computed in float32 (the
//! CUDA kernel's statistics are float) and rounded once.

use crate::ir::{Graph, NodeId};
use crate::rewrite::{PValue, Patch};

use super::attention_past::work_type;
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// The attributes both operators share.
struct Params {
    groups: i64,
    eps: f32,
    silu: bool,
    channels_last: bool,
    /// The number of channels C.
    c: i64,
}

fn params(rw: &Rw) -> Result<Params, Unsupported> {
    let groups = match rw.attr("groups").and_then(|a| a.i()) {
        Some(g) if g > 0 => g,
        Some(g) => return unsupported(format!("groups {g}")),
        None => return unsupported("groups is required"),
    };
    let silu = match rw.attr("activation").and_then(|a| a.i()) {
        Some(0) => false,
        Some(1) => true,
        Some(a) => return unsupported(format!("activation {a} (0: none and 1: SiLU only)")),
        None => return unsupported("activation is required"),
    };
    let channels_last = match rw.attr_i("channels_last", 1) {
        0 => false,
        1 => true,
        v => return unsupported(format!("channels_last {v}")),
    };
    let r = rw.rank(0, "group normalization layout")?;
    if r != 4 {
        return unsupported(format!(
            "X of rank {r} (the operator takes 4-D NHWC or NCHW)"
        ));
    }
    let c_axis = if channels_last { 3 } else { 1 };
    let c = match (rw.in_facts(1).dim(0), rw.in_facts(0).dim(c_axis)) {
        (Some(c), _) | (None, Some(c)) => c,
        _ => return unsupported("the number of channels is unknown"),
    };
    if c <= 0 || c % groups != 0 {
        return unsupported(format!(
            "{c} channels are not a multiple of {groups} groups"
        ));
    }
    Ok(Params {
        groups,
        eps: rw.attr_f("epsilon", 1e-5),
        silu,
        channels_last,
        c,
    })
}

/// Input `i` in the working type `work`.
fn to_work(rw: &mut Rw, i: usize, x: PValue, work: i32) -> PValue {
    match rw.in_facts(i).dtype {
        Some(t) if t != work => rw.cast(x, work),
        _ => x,
    }
}

/// The group normalization of `x` (4-D, in the working type `work`; `shape` its shape), with
/// gamma and beta (inputs 1 and 2) and the activation; returns Y in `dt`.
fn normalize(
    rw: &mut Rw,
    p: &Params,
    x: PValue,
    shape: PValue,
    work: i32,
    dt: i32,
) -> Result<PValue, Unsupported> {
    let g = p.groups;
    // NHWC: [N, H*W, G, C/G], statistics over axes 1 and 3; NCHW: [N, G, C/G*H*W] over 2.
    let (xr, axes): (PValue, &[i64]) = if p.channels_last {
        (rw.reshape(x, &[0, -1, g, p.c / g])?, &[1, 3])
    } else {
        (rw.reshape(x, &[0, g, -1])?, &[2])
    };
    // Corrected two-pass: the mean's own rounding error is measured on the residuals and
    // taken out of them (with a plain two-pass, a group whose spread is 1e-2 of its mean's
    // magnitude came out 1e-5 of scale off a float64 reference).
    let mean = rw.reduce("ReduceMean", xr, axes, true);
    let r = rw.op("Sub", &[xr, mean], &[]);
    let rmean = rw.reduce("ReduceMean", r, axes, true);
    let d = rw.op("Sub", &[r, rmean], &[]);
    let sq = rw.op("Mul", &[d, d], &[]);
    let var = rw.reduce("ReduceMean", sq, axes, true);
    let e = rw.scalar("epsilon", work, p.eps as f64);
    let ve = rw.op("Add", &[var, e], &[]);
    let sd = rw.op("Sqrt", &[ve], &[]);
    let nrm = rw.op("Div", &[d, sd], &[]);
    let back = rw.op("Reshape", &[nrm, shape], &[]);
    let gamma = rw.need(1, "gamma")?;
    let beta = rw.need(2, "beta")?;
    let mut gamma = to_work(rw, 1, gamma, work);
    let mut beta = to_work(rw, 2, beta, work);
    if !p.channels_last {
        gamma = rw.unsqueeze(gamma, &[1, 2]);
        beta = rw.unsqueeze(beta, &[1, 2]);
    }
    let ys = rw.op("Mul", &[back, gamma], &[]);
    let mut y = rw.op("Add", &[ys, beta], &[]);
    if p.silu {
        let s = rw.op("Sigmoid", &[y], &[]);
        y = rw.op("Mul", &[y, s], &[]);
    }
    if work != dt {
        y = rw.cast(y, dt);
    }
    Ok(y)
}

/// com.microsoft GroupNorm.
pub fn group_norm_ms(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["epsilon", "groups", "activation", "channels_last"])?;
    let x = rw.need(0, "X")?;
    let dt = rw.float_dtype(0)?;
    let p = params(&rw)?;
    let work = work_type(dt);
    let shape = rw.op("Shape", &[x], &[]);
    let xw = to_work(&mut rw, 0, x, work);
    let y = normalize(&mut rw, &p, xw, shape, work, dt)?;
    rw.finish(&[(0, y)])
}

/// com.microsoft SkipGroupNorm: `s = x + skip + bias`, Y the group normalization of `s`, S
/// (output 1) `s`. skip is `[N, H, W, C]`, `[N, 1, 1, C]` or `[N, C]`; NHWC only.
pub fn skip_group_norm(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["epsilon", "groups", "activation", "channels_last"])?;
    let x = rw.need(0, "X")?;
    let skip = rw.need(3, "skip")?;
    let dt = rw.float_dtype(0)?;
    let p = params(&rw)?;
    if !p.channels_last {
        return unsupported(
            "channels_last=0 (ONNX Runtime's SkipGroupNorm kernels take NHWC only)",
        );
    }
    for (i, what) in [(3, "skip"), (4, "bias")] {
        if let Some(t) = rw.in_facts(i).dtype {
            if rw.input(i).is_some() && t != dt {
                return unsupported(format!("{what} has another element type than X"));
            }
        }
    }
    let work = work_type(dt);
    let shape = rw.op("Shape", &[x], &[]);
    let xw = to_work(&mut rw, 0, x, work);
    let mut sk = to_work(&mut rw, 3, skip, work);
    match rw.rank(3, "skip layout")? {
        4 => {}
        2 => sk = rw.unsqueeze(sk, &[1, 2]),
        r => return unsupported(format!("skip of rank {r} (4-D or [N, C])")),
    }
    let mut s = rw.op("Add", &[xw, sk], &[]);
    if let Some(b) = rw.input(4) {
        let bw = to_work(&mut rw, 4, b, work);
        s = rw.op("Add", &[s, bw], &[]);
    }
    let y = normalize(&mut rw, &p, s, shape, work, dt)?;
    let s_out = if work != dt { rw.cast(s, dt) } else { s };
    rw.finish(&[(0, y), (1, s_out)])
}
