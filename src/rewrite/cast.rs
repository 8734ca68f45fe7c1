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
                let c = p.op(
                    "Cast",
                    &[PValue::Existing(v)],
                    &[("to", AttrValue::Int(spec.to as i64))],
                );
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
        let replacement = if outputs_back.iter().any(|(s, _)| *s == slot) {
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
    // values that fit) is exact.
    if spec.inputs.is_none() && is_float(spec.from) && is_float(spec.to) {
        p.exactness = crate::rewrite::Exactness::Approximate(PRECISION_FENCE_BOUND, 0.0);
    }
    Ok(p)
}

/// The bound a precision fence states: a float16 op computed in float32 and rounded back
/// differs from the float16 kernel by the rounding of its intermediates, a few float16 units
/// in the last place (2^-10 each) at the output's scale.
pub const PRECISION_FENCE_BOUND: f64 = 4.0 * 9.765625e-4;

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
            _ => Pending::Fires,
        }
    }
    fn plan(&self, cx: &Cx, rule: usize, nodes: &[NodeId]) -> Vec<Planned> {
        use crate::rewrite::pass::{Cause, Planned, Refusal};
        let r = &cx.target.rules[rule];
        let Action::Cast { from, to } = &r.action else {
            return Vec::new();
        };
        let g = cx.graph();
        let facts = cx.facts();
        let spec = CastSpec {
            from: *from,
            to: *to,
            inputs: None,
        };
        nodes
            .iter()
            .filter(|&&n| has_dtype(g, n, *from, facts))
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
