//! ONNX Runtime's CPU NCHWc layout operators (domain `com.microsoft.nchwc`, written into
//! models saved at ORT_ENABLE_ALL), back to plain NCHW operators.
//!
//! How ONNX Runtime builds the region (`onnxruntime/core/optimizer/nchwc_transformer.cc`;
//! schemas in `core/graph/contrib_ops/nchwc_schema_defs.cc`; filter layouts in
//! `core/mlas/lib/reorder.cpp`):
//! - An NCHWc tensor is logically `[N, Cp, H, W]` with the channels zero-padded up to a
//!   multiple `Cp` of the block size `b` (8 with AVX2, 16 with AVX-512, `MlasNchwcGetBlockSize`),
//!   stored as `[N, Cp/b, H, W, b]`.
//! - `ReorderInput` turns NCHW (or NHWC with `channels_last=1`) into NCHWc, zero-padding the
//!   channels; `ReorderOutput` turns NCHWc back into NCHW (NHWC with `channels_last=1`) keeping
//!   the first `channels` channels.
//! - `Conv` takes its filter reordered: `OIHWBo` (`MlasReorderFilterOIHWBo`) when the input is
//!   plain NCHW (group 1 and fewer input channels than `b`) or the convolution is depthwise,
//!   `OIHWBiBo` (`MlasReorderFilterOIHWBiBo`) otherwise; output channels (and the bias) are
//!   zero-padded to `Cp`. The optional 4th input `Sum` is added to the convolution before the
//!   activation (Conv+Add+Activation fusion); `activation`/`activation_params` as FusedConv.
//! - Pools, `Upsample` (from Resize) and element-wise operators work on the NCHWc tensor
//!   directly; ORT may also wrap an Add in `Reshape`s to `[N, Cp/b, H, W, b]` and back.
//!
//! The decomposition keeps the logical NCHWc shape `[N, Cp, H, W]` and makes the data plain
//! NCHW: every element-wise operator, Concat (channel counts block-aligned), pool and the
//! Reshape/Add/Reshape pattern compute the same thing on that representation, so only the
//! NCHWc operators change: Conv gets its filter back in OIHW order (padded channels stay,
//! with their zero weights), ReorderInput becomes a channel Pad (and Transpose), ReorderOutput
//! a channel Slice (and Transpose), pools the standard pools, Upsample a Resize. A conversion
//! must cover every NCHWc node of the graph (see `unfuse_all`).

use crate::ir::{Graph, NodeId};
use crate::proto::AttributeProto;
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::tensor::dtype;

use super::activation;
use super::fused_conv::{act_dtype, conv_act, CONV_ATTRS};
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported, NCHWC_DOMAIN};
use crate::infer::Facts;
use crate::rewrite::consts;

/// Block sizes MLAS uses for NCHWc.
const CANDIDATES: &[i64] = &[4, 8, 16, 32];

fn weight_dims(g: &Graph, f: &Facts, n: NodeId) -> Option<Vec<i64>> {
    let w = g.node(n).inputs.get(1).copied().flatten()?;
    f.dims(w)
}

/// The NCHWc block sizes consistent with every filter shape, channel padding and ORT-inserted
/// Reshape of `g` (MLAS's sizes, plus `hint` when it is not one of them), and the first node
/// that left none when none fits.
pub fn fitting_block_sizes(g: &Graph, f: &Facts, hint: Option<i64>) -> (Vec<i64>, Option<String>) {
    let mut cands: Vec<i64> = CANDIDATES.to_vec();
    if let Some(h) = hint {
        if !cands.contains(&h) {
            cands.push(h);
        }
    }
    let mut culprit: Option<String> = None;
    for &n in &g.order {
        let before = cands.len();
        let mut keep = |why: &dyn Fn(i64) -> bool| cands.retain(|&b| why(b));
        let node = g.node(n);
        let input_blocked = node
            .inputs
            .first()
            .copied()
            .flatten()
            .is_some_and(|v| f.is_blocked(v));
        match (node.domain(), node.op_type.as_str()) {
            (NCHWC_DOMAIN, "Conv") => {
                let Some(w) = weight_dims(g, f, n).filter(|w| w.len() >= 3) else {
                    continue;
                };
                let group = consts::attr_i(g, n, "group").unwrap_or(1);
                let (op, iw) = (w[0], w[1]);
                keep(&|b| op % b == 0);
                let depthwise = iw == 1 && group > 1 && group == op;
                if !input_blocked {
                    keep(&|b| group == 1 && iw < b);
                } else if !depthwise {
                    keep(&|b| iw % b == 0 && group > 0 && (op / group) % b == 0);
                }
            }
            (NCHWC_DOMAIN, "ReorderOutput") => {
                let c = consts::attr_i(g, n, "channels").unwrap_or(0);
                let cp = node
                    .inputs
                    .first()
                    .copied()
                    .flatten()
                    .and_then(|v| f.info(v).dim(1));
                if let (true, Some(cp)) = (c > 0, cp) {
                    keep(&|b| (c + b - 1) / b * b == cp);
                }
            }
            ("", "Reshape") if input_blocked => {
                let target = node
                    .inputs
                    .get(1)
                    .copied()
                    .flatten()
                    .and_then(|v| consts::const_i64(g, v, None));
                if let Some(t) = target.filter(|t| t.len() == 5) {
                    let b = t[4];
                    keep(&|x| x == b);
                }
            }
            _ => {}
        }
        if cands.is_empty() && before > 0 && culprit.is_none() {
            culprit = Some(format!("{} '{}'", node.op_type, node.name()));
        }
    }
    (cands, culprit)
}

/// The NCHWc block size of the CPU that produced the model: the one size that fits (see
/// [`fitting_block_sizes`]); `hint` must be one of those that fit.
pub fn infer_block_size(g: &Graph, f: &Facts, hint: Option<i64>) -> Result<i64, String> {
    let (cands, culprit) = fitting_block_sizes(g, f, hint);
    match (hint, cands.as_slice()) {
        (Some(h), c) if c.contains(&h) => Ok(h),
        (Some(h), c) => Err(format!(
            "NCHWc block size {h} contradicts the model (sizes that fit: {c:?})"
        )),
        (None, [b]) => Ok(*b),
        (None, []) => Err(format!(
            "no NCHWc block size fits this model (none left after {})",
            culprit.unwrap_or_default()
        )),
        (None, c) => Err(format!(
            "the NCHWc block size is ambiguous ({c:?} all fit): give the block size of the CPU \
             that saved the model with --nchwc-block N (8 with AVX2, 16 with AVX-512)"
        )),
    }
}

fn block_size(rw: &Rw) -> Result<i64, Unsupported> {
    match rw.ctx.nchwc_block_size {
        Some(b) if b > 0 => Ok(b),
        _ => infer_block_size(rw.g, rw.facts(), None)
            .map_err(|e| Unsupported::new(crate::rewrite::pass::Cause::Layout, e)),
    }
}

fn is_blocked(rw: &Rw, i: usize) -> bool {
    rw.input_id(i).is_some_and(|v| rw.facts().is_blocked(v))
}

/// How a filter was reordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterLayout {
    /// `MlasReorderFilterOIHWBo`: output channels blocked.
    OIHWBo,
    /// `MlasReorderFilterOIHWBiBo`: output and input channels blocked.
    OIHWBiBo,
}

/// Undo an NCHWc filter reorder: `dims` are the saved filter dims `[Op, I, kH, kW]` (`Op` a
/// multiple of `b`), `data` the reordered values; returns the values in OIHW order.
///
/// OIHWBo stores, for each block of `b` output channels, for each input channel and kernel
/// position, the `b` filters' values; OIHWBiBo stores, for each output block and input block
/// and kernel position, a `b x b` tile indexed `[input][output]`.
pub fn unblock_filter(
    dims: &[i64],
    data: &[f32],
    b: i64,
    layout: FilterLayout,
) -> Result<Vec<f32>, String> {
    if dims.len() < 3 || dims.iter().any(|&d| d <= 0) || b <= 0 {
        return Err(format!("filter dims {dims:?}"));
    }
    let (op, iw) = (dims[0] as usize, dims[1] as usize);
    let ks: usize = dims[2..].iter().map(|&d| d as usize).product();
    let b = b as usize;
    if op % b != 0 {
        return Err(format!(
            "{op} output channels are not a multiple of the block size {b}"
        ));
    }
    if layout == FilterLayout::OIHWBiBo && iw % b != 0 {
        return Err(format!(
            "{iw} input channels are not a multiple of the block size {b}"
        ));
    }
    let total = op * iw * ks;
    if data.len() != total {
        return Err(format!(
            "filter holds {} values, dims say {total}",
            data.len()
        ));
    }
    let mut out = vec![0f32; total];
    for o in 0..op {
        let (ob, bo) = (o / b, o % b);
        for i in 0..iw {
            for k in 0..ks {
                let src = match layout {
                    FilterLayout::OIHWBo => ((ob * iw + i) * ks + k) * b + bo,
                    FilterLayout::OIHWBiBo => {
                        let (ib, bi) = (i / b, i % b);
                        (((ob * (iw / b) + ib) * ks + k) * b + bi) * b + bo
                    }
                };
                out[(o * iw + i) * ks + k] = data[src];
            }
        }
    }
    Ok(out)
}

/// NCHWc Conv -> Conv (filter back in OIHW order) + Sum + activation.
pub fn conv(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    let mut known = CONV_ATTRS.to_vec();
    known.extend(["activation", "activation_params"]);
    rw.only_attrs(&known)?;
    let b = block_size(&rw)?;
    let act = activation::from_conv_attrs(&rw)?;
    let x = rw.need(0, "X")?;
    let Some((dims, data)) = rw.const_f32(1) else {
        return unsupported("the reordered filter is not a float constant");
    };
    if dims.len() != 4 {
        return unsupported(format!("filter of rank {} (NCHWc is 2-D)", dims.len()));
    }
    let group = rw.attr_i("group", 1);
    let depthwise = dims[1] == 1 && group > 1 && group == dims[0];
    let plain_input = !depthwise && group == 1 && dims[1] < b;
    let layout = if depthwise || plain_input {
        FilterLayout::OIHWBo
    } else {
        FilterLayout::OIHWBiBo
    };
    // The input's layout must agree with the filter's.
    let blocked = is_blocked(&rw, 0);
    if !depthwise && blocked == plain_input {
        return unsupported(format!(
            "the input is {} but a {layout:?} filter with {} input channels and group {group} \
             expects it {}",
            if blocked { "NCHWc" } else { "plain NCHW" },
            dims[1],
            if plain_input { "plain" } else { "NCHWc" }
        ));
    }
    let plain = unblock_filter(&dims, &data, b, layout).map_err(Unsupported::unsupported)?;
    let w = rw.f32s("weight", &dims, &plain);
    let dt = act_dtype(&rw, act)?;
    let attrs = rw.copy_attrs(CONV_ATTRS);
    let (bias, z) = (rw.input(2), rw.input(3));
    let y = conv_act(&mut rw, x, w, bias, z, attrs, act, dt)?;
    rw.finish(&[(0, y)])
}

/// Zero-pad axis 1 from `c` to `cp` channels (Pad-2 attributes before opset 11, inputs after).
fn pad_channels(rw: &mut Rw, x: PValue, rank: usize, extra: i64) -> PValue {
    let mut pads = vec![0i64; 2 * rank];
    pads[rank + 1] = extra;
    if rw.opset >= 11 {
        let p = rw.ints("pads", &pads);
        rw.op("Pad", &[x, p], &[])
    } else {
        rw.op("Pad", &[x], &[("pads", AttrValue::Ints(pads))])
    }
}

fn channels_first_perm(rank: usize) -> Vec<i64> {
    let r = rank as i64;
    let mut p = vec![0, r - 1];
    p.extend(1..r - 1);
    p
}

/// ReorderInput: NCHW (or NHWC, `channels_last=1`) to NCHWc = the channels zero-padded to a
/// multiple of the block size (schema: output channels `(C + b - 1) & ~(b - 1)`).
pub fn reorder_input(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["channels_last"])?;
    let b = block_size(&rw)?;
    let x = rw.need(0, "X")?;
    let last = rw.attr_i("channels_last", 0) != 0;
    let xf = rw.in_facts(0);
    let rank = xf.rank().unwrap_or(4);
    if rank < 3 {
        return unsupported(format!("input of rank {rank}"));
    }
    let c = if last { xf.dim(rank - 1) } else { xf.dim(1) };
    let Some(c) = c else {
        return unsupported("the input's channel count is unknown");
    };
    let cp = (c + b - 1) / b * b;
    let mut y = x;
    if last {
        y = rw.transpose(y, &channels_first_perm(rank));
    }
    if cp != c {
        y = pad_channels(&mut rw, y, rank, cp - c);
    }
    rw.finish(&[(0, y)])
}

/// ReorderOutput: NCHWc to NCHW keeping the first `channels` channels (NHWC with
/// `channels_last=1`).
pub fn reorder_output(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["channels", "channels_last"])?;
    let x = rw.need(0, "X")?;
    let c = rw.attr_i("channels", 0);
    if c <= 0 {
        return unsupported("channels must be positive");
    }
    let last = rw.attr_i("channels_last", 0) != 0;
    let xf = rw.in_facts(0);
    let rank = xf.rank().unwrap_or(4);
    let mut y = x;
    if xf.dim(1) != Some(c) {
        y = rw.slice(y, &[0], &[c], &[1]);
    }
    if last {
        let r = rank as i64;
        let mut perm = vec![0];
        perm.extend(2..r);
        perm.push(1);
        y = rw.transpose(y, &perm);
    }
    rw.finish(&[(0, y)])
}

/// NCHWc MaxPool / AveragePool / GlobalMaxPool / GlobalAveragePool -> the ONNX pool with the
/// same attributes (the NCHWc pools take the ONNX pool attributes, `NchwcPoolOpSchemaGenerator`).
pub fn pool(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    let op = rw.node.op_type.clone();
    let global = op.starts_with("Global");
    let mut names: Vec<&str> = vec![];
    if !global {
        names.extend([
            "auto_pad",
            "kernel_shape",
            "dilations",
            "strides",
            "pads",
            "ceil_mode",
        ]);
        names.push(if op == "MaxPool" {
            "storage_order"
        } else {
            "count_include_pad"
        });
    }
    rw.only_attrs(&names)?;
    let x = rw.need(0, "X")?;
    let mut attrs: Vec<AttributeProto> = Vec::new();
    for a in rw.copy_attrs(&names) {
        let name = a.name.clone().unwrap_or_default();
        let default = match name.as_str() {
            "dilations" => a.ints.iter().all(|&d| d == 1),
            "ceil_mode" | "storage_order" => a.i.unwrap_or(0) == 0,
            _ => false,
        };
        let since = match (op.as_str(), name.as_str()) {
            (_, "ceil_mode") => 10,
            ("MaxPool", "dilations") => 10,
            ("AveragePool", "dilations") => 19,
            ("MaxPool", "storage_order") => 8,
            ("AveragePool", "count_include_pad") => 7,
            _ => 1,
        };
        if rw.opset >= since {
            attrs.push(a);
        } else if !default {
            return unsupported(format!(
                "{op} attribute '{name}' needs opset >= {since}; the model imports {}",
                rw.opset
            ));
        }
    }
    let y = rw.op_opt(&op, &[Some(x)], attrs);
    rw.finish(&[(0, y)])
}

/// NCHWc Upsample (made from Resize; schema attributes `scales` (ints), `mode` (nearest or
/// linear), `coordinate_transformation_mode` (default asymmetric)) -> Resize with float scales.
/// The NCHWc nearest kernel reads input index `floor(out / scale)`: Resize nearest with
/// asymmetric coordinates and nearest_mode floor.
pub fn upsample(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["scales", "mode", "coordinate_transformation_mode"])?;
    if rw.opset < 11 {
        return unsupported(format!(
            "Resize with coordinate_transformation_mode needs opset >= 11; the model imports {}",
            rw.opset
        ));
    }
    let x = rw.need(0, "X")?;
    let scales = match rw.attr_ints("scales") {
        Some(s) if !s.is_empty() && s.iter().all(|&v| v > 0) => s,
        _ => return unsupported("scales are required"),
    };
    let mode = rw.attr_s("mode").unwrap_or_else(|| "nearest".into());
    let ctm = rw
        .attr_s("coordinate_transformation_mode")
        .unwrap_or_else(|| "asymmetric".into());
    let mut attrs = vec![
        string_attr("mode", &mode),
        string_attr("coordinate_transformation_mode", &ctm),
    ];
    match mode.as_str() {
        "nearest" if ctm == "asymmetric" => attrs.push(string_attr("nearest_mode", "floor")),
        "nearest" => return unsupported(format!("nearest upsampling with {ctm} coordinates")),
        "linear"
            if matches!(
                ctm.as_str(),
                "asymmetric" | "half_pixel" | "align_corners" | "pytorch_half_pixel"
            ) => {}
        _ => return unsupported(format!("mode '{mode}' with {ctm} coordinates")),
    }
    let sv: Vec<f32> = scales.iter().map(|&s| s as f32).collect();
    let s = rw.f32s("scales", &[sv.len() as i64], &sv);
    let roi = if rw.opset >= 13 {
        None
    } else {
        Some(rw.constant("roi", dtype::FLOAT, &[0], &[]))
    };
    let y = rw.op_opt("Resize", &[Some(x), roi, Some(s)], attrs);
    rw.finish(&[(0, y)])
}

fn string_attr(name: &str, v: &str) -> AttributeProto {
    AttrValue::String(v.to_string()).to_proto(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The forward reorders, written from the MLAS loop descriptions, for the round trip.
    fn block(dims: &[i64], w: &[f32], b: usize, layout: FilterLayout) -> Vec<f32> {
        let (op, iw) = (dims[0] as usize, dims[1] as usize);
        let ks: usize = dims[2..].iter().map(|&d| d as usize).product();
        let mut out = Vec::new();
        for ob in 0..op / b {
            match layout {
                FilterLayout::OIHWBo => {
                    for i in 0..iw {
                        for k in 0..ks {
                            for bo in 0..b {
                                out.push(w[((ob * b + bo) * iw + i) * ks + k]);
                            }
                        }
                    }
                }
                FilterLayout::OIHWBiBo => {
                    for ib in 0..iw / b {
                        for k in 0..ks {
                            for bi in 0..b {
                                for bo in 0..b {
                                    out.push(w[((ob * b + bo) * iw + ib * b + bi) * ks + k]);
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn filters_round_trip() {
        for (dims, b, layout) in [
            (vec![16i64, 3, 3, 3], 8usize, FilterLayout::OIHWBo),
            (vec![32, 1, 3, 3], 16, FilterLayout::OIHWBo),
            (vec![32, 16, 1, 1], 8, FilterLayout::OIHWBiBo),
            (vec![16, 32, 3, 3], 16, FilterLayout::OIHWBiBo),
        ] {
            let n: i64 = dims.iter().product();
            let w: Vec<f32> = (0..n).map(|v| v as f32).collect();
            let blocked = block(&dims, &w, b, layout);
            assert_eq!(
                unblock_filter(&dims, &blocked, b as i64, layout).unwrap(),
                w
            );
        }
        assert!(unblock_filter(&[12, 16, 1, 1], &[0.0; 192], 8, FilterLayout::OIHWBiBo).is_err());
    }
}
