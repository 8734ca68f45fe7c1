//! `split`: cut one big dispatch into several small ones that compute the same values.
//!
//! - `channels`: a depthwise or grouped Conv is cut into chunks of whole groups, each reading at
//!   most `max` input channels: Slice (input channels) -> Conv (the chunk's weight rows) ->
//!   Concat along channels. Groups are independent (ONNX Conv: output channels of group g read
//!   only input channels of group g), so the concatenation equals the original output.
//! - `out_channels`: an ordinary Conv is cut by output channels (weight rows); each chunk reads
//!   the whole input. Output channel m depends only on weight row m and bias m.
//! - `batch`: samples are independent; a static batch is cut into chunks of at most `max`.
//!
//! Slices are made with `Slice`, not `Split`: DirectML computed wrong results for Split inside
//! fused partitions (microsoft/onnxruntime#21007).

use crate::ir::{Graph, NodeId, ValueId};
use crate::proto::AttributeProto;
use crate::rewrite::consts::{constant_tensor, int64s, slice_rows};
use crate::rewrite::{AttrValue, PValue, Patch};

/// Which axis to split along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitAxis {
    Channels,
    OutChannels,
    Batch,
}

/// Why a node was not split.
#[derive(Debug, Clone, PartialEq)]
pub enum SplitOutcome {
    /// The node already fits (nothing to do).
    Fits,
    /// The node cannot be split this way; the reason says why.
    Unsupported(String),
}

fn attr_i(g: &Graph, n: NodeId, name: &str, default: i64) -> i64 {
    g.node(n)
        .attr(name)
        .and_then(|a| a.proto.i)
        .unwrap_or(default)
}

/// The node's attributes, minus `group`, plus the given group.
fn conv_attrs(g: &Graph, n: NodeId, group: i64) -> Vec<AttributeProto> {
    let mut v: Vec<AttributeProto> = g
        .node(n)
        .attributes
        .iter()
        .filter(|a| a.name() != "group")
        .map(|a| a.proto.clone())
        .collect();
    v.push(AttrValue::Int(group).to_proto("group"));
    v
}

/// `Slice(x)[start:end]` along `axis`, in the form the opset supports.
fn slice(p: &mut Patch, opset: i64, x: PValue, axis: i64, start: i64, end: i64) -> PValue {
    if opset >= 10 {
        let s = p.initializer("starts", int64s(&[start]));
        let e = p.initializer("ends", int64s(&[end]));
        let a = p.initializer("axes", int64s(&[axis]));
        p.op("Slice", &[x, s, e, a], &[])
    } else {
        p.op(
            "Slice",
            &[x],
            &[
                ("starts", AttrValue::Ints(vec![start])),
                ("ends", AttrValue::Ints(vec![end])),
                ("axes", AttrValue::Ints(vec![axis])),
            ],
        )
    }
}

/// Sizes of `n` balanced chunks of `total` units.
fn balanced(total: i64, n: i64) -> Vec<i64> {
    let base = total / n;
    let rem = total % n;
    (0..n).map(|i| base + i64::from(i < rem)).collect()
}

/// Weight (and bias) rows `[r0, r1)` as new initializers, or runtime slices when not constant.
fn weight_rows(
    p: &mut Patch,
    g: &Graph,
    opset: i64,
    v: ValueId,
    r0: i64,
    r1: i64,
    hint: &str,
) -> Result<PValue, String> {
    match constant_tensor(g, v) {
        Some(t) => slice_rows(t, r0, r1)
            .map(|t| p.initializer(hint, t))
            .ok_or_else(|| format!("{hint} '{}' cannot be sliced", g.value_name(v))),
        None => Ok(slice(p, opset, PValue::Existing(v), 0, r0, r1)),
    }
}

/// Split a Conv node. `batch` is the static batch size when known (for `Batch`).
pub fn split_conv(
    g: &Graph,
    n: NodeId,
    opset: i64,
    rule: &str,
    axis: SplitAxis,
    max: i64,
    batch: Option<i64>,
) -> Result<Patch, SplitOutcome> {
    let node = g.node(n);
    let unsupported = |m: String| Err(SplitOutcome::Unsupported(m));
    if node.op_type != "Conv" || !node.domain().is_empty() {
        return unsupported(format!("{} is not a standard Conv", node.op_type));
    }
    if max < 1 {
        return unsupported(format!("max must be at least 1, not {max}"));
    }
    let (Some(Some(x)), Some(Some(w))) = (node.inputs.first(), node.inputs.get(1)) else {
        return unsupported("Conv without input or weights".into());
    };
    let (x, w) = (*x, *w);
    let b = node.inputs.get(2).copied().flatten();
    let Some(y) = node.outputs.first().copied().flatten() else {
        return unsupported("Conv without output".into());
    };
    let w_dims = match constant_tensor(g, w) {
        Some(t) => t.dims.clone(),
        None => return unsupported("weights are not a constant".into()),
    };
    if w_dims.len() < 3 || w_dims.iter().any(|&d| d <= 0) {
        return unsupported(format!("weights have an unusable shape {w_dims:?}"));
    }
    let group = attr_i(g, n, "group", 1);
    let (m, cg) = (w_dims[0], w_dims[1]);
    if group < 1 || m % group != 0 {
        return unsupported(format!("group {group} does not divide {m} output channels"));
    }
    let mg = m / group;
    let mut p = Patch::new(rule, node.name(), Some(n));
    let xv = PValue::Existing(x);
    let mut parts = Vec::new();
    let concat_axis;
    match axis {
        SplitAxis::Channels => {
            if group == 1 {
                return unsupported("not a grouped or depthwise Conv (group is 1)".into());
            }
            let gmax = (max / cg).max(1);
            let chunks = (group + gmax - 1) / gmax;
            if chunks <= 1 {
                return Err(SplitOutcome::Fits);
            }
            let mut g0 = 0;
            for groups in balanced(group, chunks) {
                let g1 = g0 + groups;
                let xi = slice(&mut p, opset, xv, 1, g0 * cg, g1 * cg);
                let wi = weight_rows(&mut p, g, opset, w, g0 * mg, g1 * mg, "weight")
                    .map_err(SplitOutcome::Unsupported)?;
                let mut ins = vec![Some(xi), Some(wi)];
                if let Some(b) = b {
                    ins.push(Some(
                        weight_rows(&mut p, g, opset, b, g0 * mg, g1 * mg, "bias")
                            .map_err(SplitOutcome::Unsupported)?,
                    ));
                }
                parts.push(p.node("Conv", "", &ins, conv_attrs(g, n, groups), 1)[0]);
                g0 = g1;
            }
            concat_axis = 1;
        }
        SplitAxis::OutChannels => {
            if group != 1 {
                return unsupported(format!(
                    "a grouped Conv (group {group}) is split along channels, not out_channels"
                ));
            }
            let chunks = (m + max - 1) / max;
            if chunks <= 1 {
                return Err(SplitOutcome::Fits);
            }
            let mut r0 = 0;
            for rows in balanced(m, chunks) {
                let r1 = r0 + rows;
                let wi = weight_rows(&mut p, g, opset, w, r0, r1, "weight")
                    .map_err(SplitOutcome::Unsupported)?;
                let mut ins = vec![Some(xv), Some(wi)];
                if let Some(b) = b {
                    ins.push(Some(
                        weight_rows(&mut p, g, opset, b, r0, r1, "bias")
                            .map_err(SplitOutcome::Unsupported)?,
                    ));
                }
                parts.push(p.node("Conv", "", &ins, conv_attrs(g, n, 1), 1)[0]);
                r0 = r1;
            }
            concat_axis = 1;
        }
        SplitAxis::Batch => {
            let Some(nb) = batch.filter(|&b| b > 0) else {
                return unsupported("the batch size is not known statically".into());
            };
            let chunks = (nb + max - 1) / max;
            if chunks <= 1 {
                return Err(SplitOutcome::Fits);
            }
            let mut s0 = 0;
            for rows in balanced(nb, chunks) {
                let s1 = s0 + rows;
                let xi = slice(&mut p, opset, xv, 0, s0, s1);
                let mut ins = vec![Some(xi), Some(PValue::Existing(w))];
                if let Some(b) = b {
                    ins.push(Some(PValue::Existing(b)));
                }
                parts.push(p.node("Conv", "", &ins, conv_attrs(g, n, group), 1)[0]);
                s0 = s1;
            }
            concat_axis = 0;
        }
    }
    let out = p.op("Concat", &parts, &[("axis", AttrValue::Int(concat_axis))]);
    p.replace(y, out);
    p.remove(n);
    Ok(p)
}
