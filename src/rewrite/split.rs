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

use crate::ir::{Attribute, Attrs, Graph, NodeId, ValueId};
use crate::proto::AttributeProto;
use crate::rewrite::consts::{constant_tensor, int64s, slice_rows};
use crate::rewrite::pass::{Cx, Pass, Planned};
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::tensor::dtype;

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
    g.node(n).attr(name).and_then(|a| a.i()).unwrap_or(default)
}

/// The node's attributes, minus `group`, plus the given group.
fn conv_attrs(g: &Graph, n: NodeId, group: i64) -> Vec<Attribute> {
    let mut v: Vec<Attribute> = g
        .node(n)
        .attributes
        .iter()
        .filter(|a| a.name() != "group")
        .cloned()
        .collect();
    v.push(AttrValue::Int(group).to_proto("group").into());
    v
}

/// [`conv_attrs`] for the pieces of a split: pieces of one group count hold one list
/// (`last` keeps the list made last).
fn piece_attrs(last: &mut Option<(i64, Attrs)>, g: &Graph, n: NodeId, group: i64) -> Attrs {
    match last {
        Some((k, a)) if *k == group => a.clone(),
        _ => {
            let a = Attrs::from(conv_attrs(g, n, group));
            *last = Some((group, a.clone()));
            a
        }
    }
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

/// At most this many pieces per split. The count follows from sizes the file declares (a
/// static batch) and the rule's `max`; each piece is a few new nodes.
pub const MAX_SPLIT_PIECES: i64 = 1 << 16;

/// How many pieces of at most `max` units cut `total` units (`total >= 0`, `max >= 1`; no
/// overflow, unlike `(total + max - 1) / max`).
fn piece_count(total: i64, max: i64) -> i64 {
    total / max + i64::from(total % max != 0)
}

fn too_many_pieces(what: &str, total: i64, max: i64, chunks: i64) -> Result<Patch, SplitOutcome> {
    Err(SplitOutcome::Unsupported(format!(
        "{total} {what} in pieces of at most {max} make {chunks} pieces, more than \
         {MAX_SPLIT_PIECES}"
    )))
}

/// Sizes of `n` balanced chunks of `total` units.
fn balanced(total: i64, n: i64) -> Vec<i64> {
    let base = total / n;
    let rem = total % n;
    (0..n).map(|i| base + i64::from(i < rem)).collect()
}

/// Weight (and bias) rows `[r0, r1)` as new initializers, or runtime slices when not constant.
#[allow(clippy::too_many_arguments)]
fn weight_rows(
    p: &mut Patch,
    g: &Graph,
    opset: i64,
    conv: NodeId,
    v: ValueId,
    r0: i64,
    r1: i64,
    hint: &str,
) -> Result<PValue, String> {
    match constant_tensor(g, v) {
        Some(t) => slice_rows(t, r0, r1)
            .map(|t| p.initializer(hint, t))
            .ok_or_else(|| format!("{hint} '{}' cannot be sliced", g.value_name(v))),
        None => Ok(dequantized_rows(p, g, conv, v, r0, r1, hint)
            .unwrap_or_else(|| slice(p, opset, PValue::Existing(v), 0, r0, r1))),
    }
}

/// Rows `[r0, r1)` of a weight that a `DequantizeLinear` computes from constants (a QDQ
/// model's weight: per tensor, or per channel along axis 0): the same `DequantizeLinear` of
/// the quantized rows (and of their scales and zero points), which is the same value. A
/// `Slice` of the dequantized weight computes the same, but stands between the
/// `DequantizeLinear` and the `Conv` (ONNX Runtime's QDQ fusions look for them adjacent, and
/// OpenVINO's CPU plugin fails on two Slices of one dequantized weight). `None`: another
/// producer, or a form this does not cover.
fn dequantized_rows(
    p: &mut Patch,
    g: &Graph,
    conv: NodeId,
    v: ValueId,
    r0: i64,
    r1: i64,
    hint: &str,
) -> Option<PValue> {
    let crate::ir::Origin::Node { node, .. } = g.value(v).origin else {
        return None;
    };
    let n = g.node(node);
    if n.op_type != "DequantizeLinear" || !n.domain().is_empty() || n.attr("block_size").is_some() {
        return None;
    }
    let input = |i: usize| n.inputs.get(i).copied().flatten();
    let x = constant_tensor(g, input(0)?)?;
    let scale = input(1)?;
    let st = constant_tensor(g, scale)?;
    let zero = input(2);
    let zt = match zero {
        Some(z) => Some(constant_tensor(g, z)?),
        None => None,
    };
    let rank = x.dims.len() as i64;
    let axis = n.attr("axis").and_then(|a| a.i()).unwrap_or(1);
    let axis = if axis < 0 { axis + rank } else { axis };
    let per_channel = crate::tensor::element_count(st.dims).ok()? != 1;
    let rows = slice_rows(x, r0, r1)?;
    let (s, z) = if per_channel {
        if axis != 0 || st.dims.len() != 1 || st.dims[0] != *x.dims.first()? {
            return None;
        }
        let s = slice_rows(st, r0, r1)?;
        let z = match zt {
            Some(zt) => Some(slice_rows(zt, r0, r1)?),
            None => None,
        };
        (
            p.initializer(&format!("{hint}_scale"), s),
            z.map(|z| p.initializer(&format!("{hint}_zero_point"), z)),
        )
    } else {
        (PValue::Existing(scale), zero.map(PValue::Existing))
    };
    // The whole dequantized weight is left unread when the split Conv was its only reader:
    // removed with it.
    let sole = g.readers(v).iter().all(|(r, _)| *r == conv)
        && g.implicit_readers(v).is_empty()
        && !g.outputs.iter().any(|o| o.value == v);
    if sole {
        p.remove(node);
    }
    let q = p.initializer(&format!("{hint}_quantized"), rows);
    let mut inputs = vec![Some(q), Some(s)];
    if let Some(z) = z {
        inputs.push(Some(z));
    }
    Some(
        p.node(
            "DequantizeLinear",
            "",
            &inputs,
            n.attributes.iter().cloned(),
            1,
        )[0],
    )
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
    split_conv_with(g, n, opset, rule, axis, max, batch, None, None)
}

/// The float32 value a float16 Conv's input `x` is a `Cast` of, when there is one: ONNX Runtime's
/// CPU provider has no float16 Conv kernel (1.32, x86-64), so it runs the Conv in float32 between
/// casts it inserts, and drops a `Cast(float32 -> float16)` that feeds it together with its own
/// cast back: the Conv reads the float32 value unrounded. A split that slices the float16 value
/// reads it rounded (a Slice has a float16 kernel), and 1 float16 ulp moves in about 4 of 10
/// outputs (a 128-channel depthwise Conv of a cast float32 input: 14,618 of 38,400). Every other
/// consumer of the Cast keeps reading it (ORT drops the cast for the Conv alone).
pub fn bypassed_cast(
    g: &Graph,
    x: ValueId,
    dtype: &dyn Fn(ValueId) -> Option<i32>,
) -> Option<ValueId> {
    let crate::ir::Origin::Node { node, .. } = g.value(x).origin else {
        return None;
    };
    let c = g.node(node);
    if c.op_type != "Cast" || !c.domain().is_empty() {
        return None;
    }
    if c.attr("to").and_then(|a| a.i()) != Some(i64::from(dtype::FLOAT16)) {
        return None;
    }
    let src = c.inputs.first().copied().flatten()?;
    (dtype(src) == Some(dtype::FLOAT)).then_some(src)
}

/// [`split_conv`], with the weights' shape when the analysis knows it: weights that are not a
/// constant of this graph (a value of an enclosing scope read inside a body, say) are sliced
/// at run time.
#[allow(clippy::too_many_arguments)]
pub fn split_conv_with(
    g: &Graph,
    n: NodeId,
    opset: i64,
    rule: &str,
    axis: SplitAxis,
    max: i64,
    batch: Option<i64>,
    w_dims: Option<Vec<i64>>,
    float_src: Option<ValueId>,
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
    let w_dims = match (constant_tensor(g, w), w_dims) {
        (Some(t), _) => t.dims.to_vec(),
        (None, Some(d)) if axis != SplitAxis::Batch => d,
        _ => return unsupported("weights are not a constant".into()),
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
    // A float16 Conv: the pieces compute in float32 and the result is rounded once, as ONNX
    // Runtime's CPU provider computes the Conv (no float16 kernel). They read the float32 value
    // `float_src` is a Cast of (see [`bypassed_cast`]), or `x` cast to float32 when `float_src`
    // is `x` itself: the runtime drops that cast together with the one it inserts after a
    // producer it runs in float32, so the pieces read that producer's float32 value as the Conv
    // did (float16 Slices would round it, and keep a Relu between two Convs in float16).
    let in_float = float_src.is_some() && axis != SplitAxis::Batch;
    let xv = match float_src {
        Some(src) if in_float && src == x => p.op(
            "Cast",
            &[PValue::Existing(x)],
            &[("to", AttrValue::Int(i64::from(dtype::FLOAT)))],
        ),
        Some(src) if in_float => PValue::Existing(src),
        _ => PValue::Existing(x),
    };
    let to_float = |p: &mut Patch, v: PValue| {
        if in_float {
            p.op(
                "Cast",
                &[v],
                &[("to", AttrValue::Int(i64::from(dtype::FLOAT)))],
            )
        } else {
            v
        }
    };
    let mut parts = Vec::new();
    let mut shared: Option<(i64, Attrs)> = None;
    let concat_axis;
    match axis {
        SplitAxis::Channels => {
            if group == 1 {
                return unsupported("not a grouped or depthwise Conv (group is 1)".into());
            }
            let gmax = (max / cg).max(1);
            let chunks = piece_count(group, gmax);
            if chunks <= 1 {
                return Err(SplitOutcome::Fits);
            }
            if chunks > MAX_SPLIT_PIECES {
                return too_many_pieces("groups", group, gmax, chunks);
            }
            let mut g0 = 0;
            for groups in balanced(group, chunks) {
                let g1 = g0 + groups;
                let xi = slice(&mut p, opset, xv, 1, g0 * cg, g1 * cg);
                let wi = weight_rows(&mut p, g, opset, n, w, g0 * mg, g1 * mg, "weight")
                    .map_err(SplitOutcome::Unsupported)?;
                let wi = to_float(&mut p, wi);
                let mut ins = vec![Some(xi), Some(wi)];
                if let Some(b) = b {
                    let bi = weight_rows(&mut p, g, opset, n, b, g0 * mg, g1 * mg, "bias")
                        .map_err(SplitOutcome::Unsupported)?;
                    ins.push(Some(to_float(&mut p, bi)));
                }
                let attrs = piece_attrs(&mut shared, g, n, groups);
                parts.push(p.node_with("Conv", "", &ins, attrs, 1)[0]);
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
            let chunks = piece_count(m, max);
            if chunks <= 1 {
                return Err(SplitOutcome::Fits);
            }
            if chunks > MAX_SPLIT_PIECES {
                return too_many_pieces("output channels", m, max, chunks);
            }
            let mut r0 = 0;
            for rows in balanced(m, chunks) {
                let r1 = r0 + rows;
                let wi = weight_rows(&mut p, g, opset, n, w, r0, r1, "weight")
                    .map_err(SplitOutcome::Unsupported)?;
                let wi = to_float(&mut p, wi);
                let mut ins = vec![Some(xv), Some(wi)];
                if let Some(b) = b {
                    let bi = weight_rows(&mut p, g, opset, n, b, r0, r1, "bias")
                        .map_err(SplitOutcome::Unsupported)?;
                    ins.push(Some(to_float(&mut p, bi)));
                }
                let attrs = piece_attrs(&mut shared, g, n, 1);
                parts.push(p.node_with("Conv", "", &ins, attrs, 1)[0]);
                r0 = r1;
            }
            concat_axis = 1;
        }
        SplitAxis::Batch if batch.is_none_or(|b| b <= 0) => {
            return scan_per_sample(g, n, opset, rule, x, w, b, y, max);
        }
        SplitAxis::Batch => {
            let nb = batch.unwrap_or(1);
            let chunks = piece_count(nb, max);
            if chunks <= 1 {
                return Err(SplitOutcome::Fits);
            }
            if chunks > MAX_SPLIT_PIECES {
                return too_many_pieces("samples", nb, max, chunks);
            }
            let mut s0 = 0;
            for rows in balanced(nb, chunks) {
                let s1 = s0 + rows;
                let xi = slice(&mut p, opset, xv, 0, s0, s1);
                let mut ins = vec![Some(xi), Some(PValue::Existing(w))];
                if let Some(b) = b {
                    ins.push(Some(PValue::Existing(b)));
                }
                let attrs = piece_attrs(&mut shared, g, n, group);
                parts.push(p.node_with("Conv", "", &ins, attrs, 1)[0]);
                s0 = s1;
            }
            concat_axis = 0;
        }
    }
    let mut out = p.op("Concat", &parts, &[("axis", AttrValue::Int(concat_axis))]);
    if in_float {
        // A Cast of the Conv's output to float32 (a fence's, or the model's) reads the float32
        // result: ONNX Runtime drops it together with the cast it inserts after the Conv.
        let concat = out;
        for (r, _) in g.readers(y) {
            let rn = g.node(r);
            let to_float = rn.op_type == "Cast"
                && rn.domain().is_empty()
                && rn.attr("to").and_then(|a| a.i()) == Some(i64::from(dtype::FLOAT));
            let Some(Some(ro)) = rn.outputs.first() else {
                continue;
            };
            if to_float && !g.outputs.iter().any(|o| o.value == *ro) {
                p.replace(*ro, concat);
                p.remove(r);
            }
        }
        out = p.op(
            "Cast",
            &[out],
            &[("to", AttrValue::Int(i64::from(dtype::FLOAT16)))],
        );
    }
    p.replace(y, out);
    p.remove(n);
    Ok(p)
}

/// A batch of unknown size: a `Scan` over axis 0 runs the Conv on one sample at a time
/// (Unsqueeze -> Conv -> Squeeze in the body) and stacks the results, for any batch size.
/// Scan (ONNX opset 9+): scan inputs are sliced along axis 0, scan outputs concatenated along
/// a new axis 0 — exactly the batch axis here, since each sample is computed independently.
#[allow(clippy::too_many_arguments)]
fn scan_per_sample(
    g: &Graph,
    n: NodeId,
    opset: i64,
    rule: &str,
    x: ValueId,
    w: ValueId,
    b: Option<ValueId>,
    y: ValueId,
    max: i64,
) -> Result<Patch, SplitOutcome> {
    use crate::proto::{
        attribute_proto::AttributeType, type_proto, GraphProto, NodeProto, TypeProto,
        ValueInfoProto,
    };
    if max != 1 {
        return Err(SplitOutcome::Unsupported(format!(
            "the batch size is not known statically; a batch of unknown size is split into single samples only (max: 1), not {max}"
        )));
    }
    if opset < 9 {
        return Err(SplitOutcome::Unsupported(format!(
            "Scan over a batch needs opset 9 or later (the model has {opset})"
        )));
    }
    let elem = constant_tensor(g, w)
        .and_then(|t| t.data_type)
        .ok_or_else(|| SplitOutcome::Unsupported("weights are not a constant".into()))?;
    let node = g.node(n);
    let base = format!(
        "{}/batch_scan",
        if node.name().is_empty() {
            g.value_name(y)
        } else {
            node.name()
        }
    );
    let name = |s: &str| format!("{base}/{s}");
    let ty = || TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem),
            shape: None,
        })),
        denotation: None,
    };
    let mk =
        |op: &str, ins: Vec<String>, outs: Vec<String>, attrs: Vec<AttributeProto>| NodeProto {
            input: ins,
            output: outs,
            name: Some(name(&op.to_ascii_lowercase())),
            op_type: Some(op.to_string()),
            attribute: attrs,
            ..Default::default()
        };
    let (xi, u, c, yi, axes) = (
        name("x"),
        name("unsqueezed"),
        name("conv"),
        name("y"),
        name("axes"),
    );
    let mut body_nodes = Vec::new();
    let mut body_inits = Vec::new();
    let axes_attr = || vec![AttrValue::Ints(vec![0]).to_proto("axes")];
    if opset >= 13 {
        let mut t = int64s(&[0]);
        t.name = Some(axes.clone());
        body_inits.push(t);
        body_nodes.push(mk(
            "Unsqueeze",
            vec![xi.clone(), axes.clone()],
            vec![u.clone()],
            vec![],
        ));
    } else {
        body_nodes.push(mk(
            "Unsqueeze",
            vec![xi.clone()],
            vec![u.clone()],
            axes_attr(),
        ));
    }
    let mut conv_ins = vec![u.clone(), g.value_name(w).to_string()];
    if let Some(b) = b {
        conv_ins.push(g.value_name(b).to_string());
    }
    let group = attr_i(g, n, "group", 1);
    body_nodes.push(mk(
        "Conv",
        conv_ins,
        vec![c.clone()],
        conv_attrs(g, n, group)
            .iter()
            .map(Attribute::to_proto)
            .collect(),
    ));
    if opset >= 13 {
        body_nodes.push(mk(
            "Squeeze",
            vec![c.clone(), axes.clone()],
            vec![yi.clone()],
            vec![],
        ));
    } else {
        body_nodes.push(mk(
            "Squeeze",
            vec![c.clone()],
            vec![yi.clone()],
            axes_attr(),
        ));
    }
    let vi = |n: &str| ValueInfoProto {
        name: Some(n.to_string()),
        r#type: Some(ty()),
        ..Default::default()
    };
    let body = GraphProto {
        node: body_nodes,
        name: Some(name("body")),
        initializer: body_inits,
        input: vec![vi(&xi)],
        output: vec![vi(&yi)],
        ..Default::default()
    };
    let mut p = Patch::new(rule, node.name(), Some(n));
    let body_attr = AttributeProto {
        name: Some("body".into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(Box::new(body)),
        ..Default::default()
    };
    let attrs = vec![body_attr, AttrValue::Int(1).to_proto("num_scan_inputs")];
    let out = p.node("Scan", "", &[Some(PValue::Existing(x))], attrs, 1)[0];
    p.replace(y, out);
    p.remove(n);
    Ok(p)
}

/// The `split` pass: one patch per matched Conv (see [`split_conv`]).
pub struct SplitPass;

impl Pass for SplitPass {
    fn action(&self) -> &'static str {
        "split"
    }
    fn plan(&self, cx: &Cx, rule: usize, nodes: &[NodeId]) -> Vec<Planned> {
        use crate::rewrite::pass::{Cause, Planned, Refusal};
        use crate::rules::schema::{Action, SplitAxis as RuleAxis};
        let r = &cx.target.rules[rule];
        let Action::Split { axis, max } = &r.action else {
            return Vec::new();
        };
        let axis = match axis {
            RuleAxis::Channels => SplitAxis::Channels,
            RuleAxis::OutChannels => SplitAxis::OutChannels,
            RuleAxis::Batch => SplitAxis::Batch,
        };
        let max = i64::try_from(*max).unwrap_or(i64::MAX);
        let g = cx.graph();
        let mut out = Vec::new();
        for &n in nodes {
            let batch = g
                .node(n)
                .inputs
                .first()
                .copied()
                .flatten()
                .and_then(|x| cx.facts().shape(x)?.first()?.known());
            let w_dims = g
                .node(n)
                .inputs
                .get(1)
                .copied()
                .flatten()
                .and_then(|w| cx.exact_dims(w));
            let facts = cx.facts();
            // A float16 Conv computes in float32 (see `split_conv_with`): on the float32 value a
            // Cast made float16, or on its float16 input cast back.
            let float_src = g.node(n).inputs.first().copied().flatten().and_then(|x| {
                bypassed_cast(g, x, &|v| facts.dtype(v))
                    .or((facts.dtype(x) == Some(dtype::FLOAT16)).then_some(x))
            });
            let half = g
                .node(n)
                .inputs
                .first()
                .copied()
                .flatten()
                .and_then(|x| facts.dtype(x))
                .is_some_and(|t| t == dtype::FLOAT16 || t == dtype::BFLOAT16);
            match split_conv_with(g, n, cx.opset, &r.id, axis, max, batch, w_dims, float_src) {
                Ok(mut p) => {
                    // ONNX Runtime's CPU provider runs a float16 Conv in float32 and rounds where
                    // its neighbours make it (a node with a float16 kernel alone between two
                    // without one runs in float32 too: `runtime::fp16`). The pieces compute in
                    // float32 between one cast in and one out, which the runtime cancels against
                    // its own where it ran the Conv's neighbours in float32; a neighbour it ran in
                    // float32 only because the Conv did (a Relu between two Convs) keeps that
                    // only where the target fences it (rx580's `fp32-isolated`, before the
                    // split). Declared rounding, not exact: one float16 rounding of the Conv's
                    // input or output where such a neighbour is not fenced (a TTS encoder
                    // declared exact was 1 ulp off in 5,785 of 25,680 outputs).
                    if half {
                        p.exactness = crate::rewrite::Exactness::Rounding;
                    }
                    out.push(Planned::one(g, n, Ok(p)))
                }
                Err(SplitOutcome::Fits) => {}
                Err(SplitOutcome::Unsupported(reason)) => {
                    let cause = if reason.contains("pieces") {
                        Cause::Limit
                    } else {
                        Cause::Unsupported
                    };
                    out.push(Planned::one(g, n, Err(Refusal::new(cause, reason))));
                }
            }
        }
        out
    }
}
