//! FusedConv, NhwcConv and NhwcMaxPool (ONNX Runtime contrib operators).

use crate::ir::{Graph, NodeId};
use crate::proto::AttributeProto;
use crate::rewrite::{PValue, Patch};
use crate::tensor::dtype;

use super::activation::{self, Act};
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// The attributes a Conv takes (ONNX Conv-1/11).
pub const CONV_ATTRS: &[&str] = &[
    "auto_pad",
    "dilations",
    "group",
    "kernel_shape",
    "pads",
    "strides",
];

/// FusedConv: `Y = activation(Conv(X, W, B) + Z)`.
///
/// ContribOperators.md, FusedConv: "the same as Conv besides it includes an attribute
/// activation", inputs X, W, B (optional), Z (optional). ONNX Runtime's CPU kernel
/// (`contrib_ops/cpu/fused_conv.cc`, built on the Conv kernel) adds Z (the sum input of the
/// Conv+Add+Activation fusion) to the convolution output before the activation; the activation
/// and its `activation_params` are read by `GetFusedActivationAttr` (see [`activation`]).
///
/// Class rounding, and one configuration refused: Sigmoid with the sum input Z. The kernel
/// hands Z to MLAS's GEMM as C with beta = 1 and adds the bias B afterwards, in MLAS's
/// activation step: `(products + Z) + B`, where the decomposition forms `(products + B) + Z`.
/// Where a group has one filter (M / group = 1), MLAS's M = 1 kernel (`MlasSgemmKernelM1Avx` on
/// x86-64) even starts from C, adding Z before the products; and where the reduction is longer
/// than the GEMM's K block, partial sums are added to C one block at a time. No arrangement of
/// ONNX ops reproduces every one of those orders (the blocking is the CPU's). Each is float
/// rounding of the sum, which is within the class for every activation but Sigmoid: MLAS's
/// logistic (also the Sigmoid op's) is `0.5 + p(x)/q(x)` with an absolute error of about 6e-8 near
/// 0, so where every pre-activation is very negative (outputs of 1e-6 or less) an ulp moved
/// before the Sigmoid moves an output by 2^-23, 1e-4 to 3e-4 of the output's scale and more as
/// it shrinks (fuzz cases FusedConvGroup_cc8d66cdbb92 with one filter per group;
/// FusedConvGroup_5f75dbd26e8c, _6a0c21af4a84, _be482c27d992 with two and three, a bias each).
/// No bound relative to the scale holds, so Sigmoid with Z falls back to the kernel, which is
/// exact. (ONNX Runtime's Conv+Add+activation fusion rarely ends in a Sigmoid: none in the
/// corpus.)
pub fn fused_conv(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    let mut known = CONV_ATTRS.to_vec();
    known.extend(["activation", "activation_params"]);
    rw.only_attrs(&known)?;
    let act = activation::from_conv_attrs(&rw)?;
    let x = rw.need(0, "X")?;
    let w = rw.need(1, "W")?;
    let dt = act_dtype(&rw, act)?;
    let attrs = rw.copy_attrs(CONV_ATTRS);
    let (bias, z) = (rw.input(2), rw.input(3));
    if act == Act::Sigmoid && z.is_some() {
        return unsupported(
            "Sigmoid with the sum input Z: ONNX Runtime's GEMM adds Z and the bias in an order \
             of its own (Z before the products with one filter per group, the bias after Z), and \
             its logistic's absolute error near 0 turns that ulp into more than the rounding \
             bound on small outputs",
        );
    }
    let y = conv_act(&mut rw, x, w, bias, z, attrs, act, dt)?;
    rw.finish(&[(0, y)])
}

/// The element type the activation's constants need (only Clip has constants).
pub fn act_dtype(rw: &Rw, act: Act) -> Result<i32, Unsupported> {
    match act {
        Act::Clip(..) if rw.opset >= 11 => rw.float_dtype(0),
        _ => Ok(dtype::FLOAT),
    }
}

/// Conv, plus the optional sum input, plus the activation.
#[allow(clippy::too_many_arguments)]
pub fn conv_act(
    rw: &mut Rw,
    x: PValue,
    w: PValue,
    b: Option<PValue>,
    z: Option<PValue>,
    attrs: Vec<AttributeProto>,
    act: Act,
    dt: i32,
) -> Result<PValue, Unsupported> {
    if rw.opset < activation::min_opset(act) {
        return unsupported(format!(
            "the activation needs opset >= {}; the model imports {}",
            activation::min_opset(act),
            rw.opset
        ));
    }
    let conv = rw.op_opt("Conv", &[Some(x), Some(w), b], attrs);
    let summed = match z {
        Some(z) => rw.op("Add", &[conv, z], &[]),
        None => conv,
    };
    Ok(activation::apply(rw, summed, act, dt))
}

/// The permutation that moves the last axis to position 1 (channels-last to channels-first).
fn to_channels_first(rank: usize) -> Vec<i64> {
    let r = rank as i64;
    let mut p = vec![0, r - 1];
    p.extend(1..r - 1);
    p
}

/// The permutation that moves axis 1 to the end (channels-first to channels-last).
fn to_channels_last(rank: usize) -> Vec<i64> {
    let r = rank as i64;
    let mut p = vec![0];
    p.extend(2..r);
    p.push(1);
    p
}

/// NhwcConv: Conv on channels-last data, `Y = T(Conv(T'(X), T'(W), B))`.
///
/// X and Y are channels-last ([N, H, W, C]); W is [M, kH, kW, C/group]: ONNX Runtime's own
/// converter (`onnxruntime/python/tools/transformers/fusion_nhwc_conv.py`) builds NhwcConv from
/// a Conv by transposing X with perm [0, 2, 3, 1] and the weights with perm [0, 2, 3, 1], and
/// the output back with [0, 3, 1, 2]. The decomposition undoes exactly those transposes
/// (the weights statically when they are a float initializer).
pub fn nhwc_conv(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(CONV_ATTRS)?;
    let x = rw.need(0, "X")?;
    rw.need(1, "W")?;
    let w_rank = match rw.in_facts(1).rank() {
        Some(r) => r,
        None => rw.rank(0, "NhwcConv layout")?,
    };
    if w_rank < 3 {
        return unsupported(format!("weight of rank {w_rank}"));
    }
    if let Some(xr) = rw.in_facts(0).rank() {
        if xr != w_rank {
            return unsupported(format!("X has rank {xr} but W has rank {w_rank}"));
        }
    }
    // Check the weight against the channels-last reading when the shapes are known.
    let wf = rw.in_facts(1);
    if let (Some(k), Some(ws)) = (rw.attr_ints("kernel_shape"), wf.static_dims()) {
        let spatial: Vec<Option<i64>> = ws[1..w_rank - 1].to_vec();
        if spatial
            .iter()
            .zip(&k)
            .any(|(d, k)| d.is_some_and(|d| d != *k))
        {
            return unsupported(format!(
                "weight shape {ws:?} is not [M, kH, kW, C/group] for kernel_shape {k:?}"
            ));
        }
    }
    let to_first = to_channels_first(w_rank);
    let w_oihw = match rw.const_f32(1) {
        Some((dims, vals)) if dims.len() == w_rank => {
            let (d, v) = permute(&dims, &vals, &to_first);
            rw.f32s("weight_oihw", &d, &v)
        }
        _ => {
            let w = rw.need(1, "W")?;
            rw.transpose(w, &to_first)
        }
    };
    let xt = rw.transpose(x, &to_first);
    let attrs = rw.copy_attrs(CONV_ATTRS);
    let conv = rw.op_opt("Conv", &[Some(xt), Some(w_oihw), rw.input(2)], attrs);
    let y = rw.transpose(conv, &to_channels_last(w_rank));
    rw.finish(&[(0, y)])
}

/// NhwcMaxPool: MaxPool on channels-last data (ContribOperators.md, NhwcMaxPool: the MaxPool
/// attributes, int8/uint8 tensors), as Transpose + MaxPool + Transpose.
pub fn nhwc_max_pool(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    let names = [
        "auto_pad",
        "ceil_mode",
        "dilations",
        "kernel_shape",
        "pads",
        "strides",
    ];
    rw.only_attrs(&names)?;
    let x = rw.need(0, "x")?;
    let rank = match rw.attr_ints("kernel_shape") {
        Some(k) if !k.is_empty() => k.len() + 2,
        _ => return unsupported("kernel_shape is required"),
    };
    let dt = rw.in_facts(0).dtype;
    let needs = match dt {
        Some(dtype::INT8 | dtype::UINT8) => 12,
        Some(dtype::FLOAT | dtype::FLOAT16 | dtype::DOUBLE) => 1,
        Some(t) => {
            return unsupported(format!(
                "element type {} is not supported by MaxPool",
                crate::tensor::dtype_name(t)
            ))
        }
        None => return unsupported("the element type of x is unknown"),
    };
    let needs = if rw.attr("dilations").is_some() || rw.attr("ceil_mode").is_some() {
        needs.max(10)
    } else {
        needs
    };
    if rw.opset < needs {
        return unsupported(format!(
            "MaxPool for this input needs opset >= {needs}; the model imports {}",
            rw.opset
        ));
    }
    let xt = rw.transpose(x, &to_channels_first(rank));
    let attrs = rw.copy_attrs(&names);
    let pooled = rw.op_opt("MaxPool", &[Some(xt)], attrs);
    let y = rw.transpose(pooled, &to_channels_last(rank));
    rw.finish(&[(0, y)])
}

/// Permute a dense tensor's axes (row-major).
pub fn permute(dims: &[i64], vals: &[f32], perm: &[i64]) -> (Vec<i64>, Vec<f32>) {
    let r = dims.len();
    let new_dims: Vec<i64> = perm.iter().map(|&p| dims[p as usize]).collect();
    let mut strides = vec![1usize; r];
    for i in (0..r.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1] as usize;
    }
    let mut out = Vec::with_capacity(vals.len());
    let mut idx = vec![0usize; r];
    for _ in 0..vals.len() {
        let src: usize = (0..r).map(|k| idx[k] * strides[perm[k] as usize]).sum();
        out.push(vals[src]);
        for k in (0..r).rev() {
            idx[k] += 1;
            if idx[k] < new_dims[k] as usize {
                break;
            }
            idx[k] = 0;
        }
    }
    (new_dims, out)
}
