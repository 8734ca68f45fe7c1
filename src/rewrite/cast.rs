//! `cast`: run a node in another precision, with Cast before its inputs and after its outputs.
//!
//! - Precision fence (e.g. `from: float16, to: float32`): every input of type `from` is cast to
//!   `to`, the node computes in `to`, every output of type `from` is cast back. The graph's
//!   interface and every other node are unchanged.
//! - Index narrowing (e.g. `from: int64, to: int32, inputs: [1]` on Gather): only the named
//!   inputs are cast; exact whenever the values fit in the narrower type, which holds for valid
//!   indices of any axis shorter than 2^31.

use crate::ir::{Graph, NodeId, ValueId};
use crate::proto::AttributeProto;
use crate::rewrite::pass::{Cx, Pass, Pending, Planned};
use crate::rewrite::{AttrValue, PValue, Patch};
use crate::rules::schema::{Action, Rule};
use crate::tensor::dtype_name;

/// What to cast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CastSpec {
    pub from: i32,
    pub to: i32,
    /// Only these input slots (outputs untouched); `None`: every input and output of `from`.
    pub inputs: Option<Vec<usize>>,
    /// The ids of the target's precision fences from `from` to `to` (this rule's included): a
    /// node fenced by any of them passes `to` on to this one without a rounding between.
    pub fences: Vec<String>,
    /// Only a node ONNX Runtime's CPU provider itself computes in `to` (see
    /// [`crate::runtime::fp16`]): what it computes is the original's, so the rewrite is exact.
    pub isolated: bool,
}

/// Build the patch, or say why it does not apply. `dtype` gives a value's element type.
pub fn cast_node(
    g: &Graph,
    n: NodeId,
    rule: &str,
    spec: &CastSpec,
    dtype: &dyn Fn(ValueId) -> Option<i32>,
) -> Result<Patch, String> {
    let node = g.node(n);
    let mut p = Patch::new(rule, node.name(), Some(n));
    let mut inputs: Vec<Option<PValue>> = Vec::with_capacity(node.inputs.len());
    let mut touched = false;
    for (slot, v) in node.inputs.iter().enumerate() {
        let Some(v) = *v else {
            inputs.push(None);
            continue;
        };
        let wanted = spec.inputs.as_ref().is_none_or(|s| s.contains(&slot));
        match dtype(v) {
            Some(t) if t == spec.from && wanted => {
                let c = match fence_source(g, v, rule, spec, dtype) {
                    Some(src) => {
                        // The rounding cast is left unread when this node was its only reader.
                        let sole = g.readers(v).iter().all(|(r, _)| *r == n)
                            && g.implicit_readers(v).is_empty()
                            && !g.outputs.iter().any(|o| o.value == v);
                        if let (true, crate::ir::Origin::Node { node, .. }) =
                            (sole, g.value(v).origin)
                        {
                            p.remove(node);
                        }
                        PValue::Existing(src)
                    }
                    None => p.op(
                        "Cast",
                        &[PValue::Existing(v)],
                        &[("to", AttrValue::Int(spec.to as i64))],
                    ),
                };
                inputs.push(Some(c));
                touched = true;
            }
            None if wanted && spec.inputs.is_some() => {
                return Err(format!(
                    "the element type of input {slot} ('{}') is unknown",
                    g.value_name(v)
                ))
            }
            _ => inputs.push(Some(PValue::Existing(v))),
        }
    }
    let mut outputs_back: Vec<(usize, ValueId)> = Vec::new();
    if spec.inputs.is_none() {
        for (slot, v) in node.outputs.iter().enumerate() {
            let Some(v) = *v else { continue };
            match dtype(v) {
                Some(t) if t == spec.from => outputs_back.push((slot, v)),
                Some(_) => {}
                None => {
                    return Err(format!(
                        "the element type of output {slot} ('{}') is unknown",
                        g.value_name(v)
                    ))
                }
            }
        }
    }
    if !touched && outputs_back.is_empty() {
        return Err(format!(
            "no input or output of type {} to cast",
            dtype_name(spec.from)
        ));
    }
    let attrs: Vec<AttributeProto> = node.attributes.iter().map(|a| a.to_proto()).collect();
    // Trailing omitted optional outputs stay omitted.
    let n_out = node
        .outputs
        .iter()
        .rposition(|o| o.is_some())
        .map_or(0, |i| i + 1);
    let new_outs = p.node(&node.op_type, node.domain(), &inputs, attrs, n_out);
    // The fenced node keeps its own metadata (e.g. a CPU pin), besides the rule's stamps.
    if let Some(nn) = p.nodes.last_mut() {
        nn.metadata = node
            .metadata_props
            .iter()
            .filter_map(|e| Some((e.key.clone()?, e.value.clone().unwrap_or("".into()))))
            .filter(|(k, _)| !k.starts_with("onnx_safeify."))
            .collect();
    }
    for (slot, v) in node.outputs.iter().enumerate() {
        let (Some(v), Some(&produced)) = (*v, new_outs.get(slot)) else {
            continue;
        };
        let back = outputs_back.iter().any(|(s, _)| *s == slot);
        // A node this fence already computes in `to` reads the value through the fence's own
        // cast back to `to`: it reads `produced` itself instead (see `fence_source`).
        let readers = g.readers(v);
        let mut kept = readers.len();
        if back && is_fence(spec) {
            for (r, _) in &readers {
                let rn = g.node(*r);
                // An isolated node's neighbours compute in `to` (ONNX Runtime's condition): a
                // cast to `to` that another rewrite wrote for one (a split's) reads `produced`
                // too, as the runtime's pair of casts between them cancels.
                // So does such a cast that another rule stamped (a `cpu` pin takes the casts
                // between pinned nodes under its own stamp) behind a float16 -> float fence:
                // the node reading it computes in float, as this one does, and ONNX Runtime
                // passes float between two such nodes where the original has float16.
                let f16_fence = spec.from == crate::tensor::dtype::FLOAT16
                    && spec.to == crate::tensor::dtype::FLOAT;
                let neighbour = (spec.isolated || f16_fence)
                    && rn.op_type == "Cast"
                    && rn.attr("to").and_then(|a| a.i()) == Some(i64::from(spec.to))
                    && crate::runtime::fp16::compiler_cast(g, *r, dtype);
                if is_fence_cast(rn, rule, spec, spec.to) || neighbour {
                    if let Some(Some(ro)) = rn.outputs.first() {
                        p.replace(*ro, produced);
                        p.remove(*r);
                        kept -= 1;
                    }
                }
            }
        }
        let unread = kept == 0
            && !readers.is_empty()
            && g.implicit_readers(v).is_empty()
            && !g.outputs.iter().any(|o| o.value == v);
        if back && unread {
            continue;
        }
        let replacement = if back {
            p.op(
                "Cast",
                &[produced],
                &[("to", AttrValue::Int(spec.from as i64))],
            )
        } else {
            produced
        };
        p.replace(v, replacement);
    }
    p.remove(n);
    // A precision fence computes the node in another float type: not what ONNX Runtime's
    // kernel computes in the original type. Index narrowing (only named inputs cast, integer
    // values that fit) is exact, and so is a fence of a node ONNX Runtime's CPU provider itself
    // computes in `to` (`isolated`): its casts and the runtime's cancel.
    if spec.inputs.is_none() && is_float(spec.from) && is_float(spec.to) && !spec.isolated {
        p.exactness = crate::rewrite::Exactness::Approximate(PRECISION_FENCE_BOUND, 0.0);
    }
    Ok(p)
}

/// The bound a precision fence states: a float16 op computed in float32 and rounded back
/// differs from the float16 kernel by the rounding of its intermediates, a few float16 units
/// in the last place (2^-10 each) at the output's scale.
pub const PRECISION_FENCE_BOUND: f64 = 4.0 * 9.765625e-4;

/// A precision fence (every input and output of one float type computed in another).
fn is_fence(spec: &CastSpec) -> bool {
    spec.inputs.is_none() && is_float(spec.from) && is_float(spec.to)
}

/// A `Cast` to `to` that one of the fences `spec.fences` (or `rule`) wrote.
fn is_fence_cast(n: &crate::ir::Node, rule: &str, spec: &CastSpec, to: i32) -> bool {
    n.op_type == "Cast"
        && n.domain().is_empty()
        && n.attr("to").and_then(|a| a.i()) == Some(i64::from(to))
        && n.metadata(crate::rewrite::patch::RULE_KEY)
            .is_some_and(|r| r == rule || spec.fences.iter().any(|f| f == r))
}

/// The `to`-typed value that `v` is the fence's rounding of, when `v` is the output cast of a
/// node the same fence computes in `to`: adjacent fenced nodes pass their values on in `to`,
/// with no rounding to `from` between them. ONNX Runtime's CPU provider computes a float16 chain
/// so (1.32, x86-64: no float16 kernel for Conv, ConvTranspose, MatMul, Add, Mul, the activations
/// and the normalizations; it runs each in float32 between casts and drops the casts between
/// adjacent ones), and a fence that rounds between every two nodes strays from it with the
/// chain's depth: a multi-band iSTFT vocoder's ConvTranspose chain, 4 float16 ulps of bound,
/// was 5.9e-3 of its scale off.
fn fence_source(
    g: &Graph,
    v: ValueId,
    rule: &str,
    spec: &CastSpec,
    dtype: &dyn Fn(ValueId) -> Option<i32>,
) -> Option<ValueId> {
    if !is_fence(spec) {
        return None;
    }
    let crate::ir::Origin::Node { node, .. } = g.value(v).origin else {
        return None;
    };
    let c = g.node(node);
    // A float16 value the model itself casts from float32 (a mel spectrogram entering a float16
    // encoder): ONNX Runtime's CPU provider drops that Cast ahead of a node it runs in float32
    // (every op this fence covers: none has a float16 kernel there), which then reads the float32
    // value unrounded (Cast -> ConvTranspose -> Tanh -> Relu, fenced with the Cast kept: 5.9e-3 of
    // the output's scale off).
    let model_cast = c.op_type == "Cast"
        && c.domain().is_empty()
        && spec.from == crate::tensor::dtype::FLOAT16
        && c.attr("to").and_then(|a| a.i()) == Some(i64::from(spec.from));
    if !is_fence_cast(c, rule, spec, spec.from) && !model_cast {
        return None;
    }
    let src = c.inputs.first().copied().flatten()?;
    (dtype(src) == Some(spec.to)).then_some(src)
}

fn is_float(dt: i32) -> bool {
    use crate::tensor::dtype::{BFLOAT16, DOUBLE, FLOAT, FLOAT16};
    [FLOAT, FLOAT16, BFLOAT16, DOUBLE].contains(&dt)
}

/// Does the node read or write a value of this element type (a `cast` has work to do)?
fn has_dtype(g: &Graph, n: NodeId, dtype: i32, facts: &crate::infer::Facts) -> bool {
    let node = g.node(n);
    node.inputs
        .iter()
        .chain(node.outputs.iter())
        .flatten()
        .any(|v| facts.dtype(*v) == Some(dtype))
}

/// Whether ONNX Runtime's CPU provider computes this float16 node in float32 although it has a
/// float16 kernel (an `isolated: true` fence's condition, [`crate::runtime::fp16::isolated`]).
fn runs_in_float(cx: &Cx, n: NodeId) -> bool {
    let facts = cx.facts();
    crate::runtime::fp16::isolated(cx.graph(), n, &|d| cx.model.opset(d), &|v| facts.dtype(v))
}

/// The `cast` pass: a precision fence around each matched node that handles the type.
pub struct CastPass;

impl Pass for CastPass {
    fn action(&self) -> &'static str {
        "cast"
    }
    fn pending(&self, cx: &Cx, rule: &Rule, node: NodeId) -> Pending {
        match &rule.action {
            Action::Cast { from, .. } if !has_dtype(cx.graph(), node, *from, cx.facts()) => {
                Pending::Satisfied
            }
            Action::Cast { isolated: true, .. } if !runs_in_float(cx, node) => Pending::Satisfied,
            _ => Pending::Fires,
        }
    }
    fn plan(&self, cx: &Cx, rule: usize, nodes: &[NodeId]) -> Vec<Planned> {
        use crate::rewrite::pass::{Cause, Planned, Refusal};
        let r = &cx.target.rules[rule];
        let Action::Cast { from, to, isolated } = &r.action else {
            return Vec::new();
        };
        let g = cx.graph();
        let facts = cx.facts();
        // Every precision fence of the target between the same types: a node one of them fenced
        // passes `to` on to a node another fences.
        let fences = cx
            .target
            .rules
            .iter()
            .filter(|o| {
                matches!(o.action, Action::Cast { from: f, to: t, .. } if f == *from && t == *to)
            })
            .map(|o| o.id.clone())
            .collect();
        let spec = CastSpec {
            from: *from,
            to: *to,
            inputs: None,
            fences,
            isolated: *isolated,
        };
        nodes
            .iter()
            .filter(|&&n| has_dtype(g, n, *from, facts))
            .filter(|&&n| !*isolated || runs_in_float(cx, n))
            .map(|&n| {
                let p = cast_node(g, n, &r.id, &spec, &|v| facts.dtype(v));
                let cause = |reason: String| {
                    let c = if reason.contains("unknown") {
                        Cause::UnknownFact
                    } else {
                        Cause::Unsupported
                    };
                    Refusal::new(c, reason)
                };
                Planned::one(g, n, p.map_err(cause))
            })
            .collect()
    }
}
