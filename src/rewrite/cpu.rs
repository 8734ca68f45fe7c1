//! `cpu`: pin nodes to the CPU with the per-node annotation ONNX Runtime 1.32 honours: node
//! metadata `layer_ann`, selected by the session option
//! `session.layer_assignment_settings=cpu(<annotation>)` (see docs/hazards.md).
//!
//! Pinning single nodes can make a model ping-pong between devices, so pinned regions are
//! grown: a node whose every consumer is pinned and that only computes shapes joins them, and
//! so does a node sandwiched between pinned producers and pinned consumers.

// Node and value indices are internal: a fast hash is safe (see `crate::ir::hash`).
use crate::ir::hash::{FastMap, FastSet as HashSet};

use crate::ir::{Graph, NodeId, Origin};
use crate::rewrite::pass::{Cx, Pass, Pending, Planned, Schedule};
use crate::rules::schema::Rule;

/// The metadata key ONNX Runtime reads.
pub const LAYER_ANN_KEY: &str = "layer_ann";
/// The annotation onnx-safeify writes unless a rule names another.
pub const DEFAULT_ANNOTATION: &str = "safeify_cpu";

/// The session option line that makes ONNX Runtime honour the annotation.
pub fn session_option(annotation: &str) -> (String, String) {
    (
        "session.layer_assignment_settings".to_string(),
        format!("cpu({annotation})"),
    )
}

/// Ops that typically compute shapes or move small tensors: cheap on the CPU, and a GPU round
/// trip for them costs more than they do. They join a pinned region only when every consumer
/// of theirs is pinned (their result has to reach the CPU anyway).
const SHAPE_OPS: &[&str] = &[
    "Shape",
    "Size",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Concat",
    "Cast",
    "Constant",
    "ConstantOfShape",
    "Slice",
    "Range",
    "Reshape",
    "Identity",
    "Equal",
    "Where",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Floor",
    "Ceil",
    "Max",
    "Min",
];

/// Is this node already pinned with `annotation`?
pub fn is_pinned(g: &Graph, n: NodeId, annotation: &str) -> bool {
    g.node(n).metadata(LAYER_ANN_KEY) == Some(annotation)
}

/// Pin `nodes` and grow the pinned region; returns every node newly pinned (requested ones
/// first, then grown ones, each in graph order).
pub fn pin(g: &mut Graph, nodes: &[NodeId], rule: &str, annotation: &str) -> Vec<NodeId> {
    let added = plan_pins(g, nodes, annotation);
    for &n in &added {
        let node = g.node_mut(n);
        node.set_metadata(LAYER_ANN_KEY, annotation);
        node.set_metadata(crate::rewrite::RULE_KEY, rule);
    }
    added
}

fn grow(g: &Graph, pinned: &mut HashSet<NodeId>) -> Vec<NodeId> {
    let consumers = g.consumers();
    let graph_outputs: HashSet<_> = g.outputs.iter().map(|o| o.value).collect();
    let mut added = Vec::new();
    loop {
        let mut changed = false;
        for &n in &g.order {
            if pinned.contains(&n) {
                continue;
            }
            let node = g.node(n);
            let outs = || node.outputs.iter().flatten();
            if outs().next().is_none() || outs().any(|v| graph_outputs.contains(v)) {
                continue;
            }
            let mut uses = outs()
                .flat_map(|v| consumers.of(*v).iter().map(|(c, _)| c))
                .peekable();
            if uses.peek().is_none() || !uses.all(|c| pinned.contains(c)) {
                continue;
            }
            let shape_op = node.domain().is_empty() && SHAPE_OPS.contains(&node.op_type.as_str());
            let sandwiched = node
                .inputs
                .iter()
                .flatten()
                .chain(node.implicit_inputs.iter())
                .all(|v| match g.value(*v).origin {
                    Origin::Node { node: p, .. } => pinned.contains(&p),
                    Origin::Initializer => true,
                    _ => false,
                });
            if shape_op || sandwiched {
                pinned.insert(n);
                added.push(n);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let pos: FastMap<NodeId, usize> = g.order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    added.sort_by_key(|n| pos.get(n).copied());
    added
}

/// The nodes [`pin`] would pin (requested ones first, then grown ones), without pinning them.
pub fn plan_pins(g: &Graph, nodes: &[NodeId], annotation: &str) -> Vec<NodeId> {
    let mut pinned: HashSet<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| is_pinned(g, n, annotation))
        .collect();
    let mut added = Vec::new();
    for &n in nodes {
        if g.nodes.contains_node(n) && pinned.insert(n) {
            added.push(n);
        }
    }
    if added.is_empty() {
        return added;
    }
    let grown = grow(g, &mut pinned);
    added.extend(grown);
    added
}

/// The `cpu` pass: the rule's matches and the region grown around them, annotated together.
pub struct CpuPass;

impl Pass for CpuPass {
    fn action(&self) -> &'static str {
        "cpu"
    }
    fn schedule(&self) -> Schedule {
        Schedule::PerRule
    }
    fn claims_nodes(&self) -> bool {
        false
    }
    fn pending(&self, cx: &Cx, _rule: &Rule, node: NodeId) -> Pending {
        if is_pinned(cx.graph(), node, cx.annotation) {
            Pending::Satisfied
        } else {
            Pending::Fires
        }
    }
    fn plan(&self, cx: &Cx, rule: usize, nodes: &[NodeId]) -> Vec<Planned> {
        use crate::rewrite::pass::{covered, Planned, Step};
        let g = cx.graph();
        let r = &cx.target.rules[rule];
        let annotation: std::sync::Arc<str> = cx.annotation.into();
        let rule_id: std::sync::Arc<str> = r.id.as_str().into();
        plan_pins(g, nodes, cx.annotation)
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                let c = covered(g, n);
                let mut p = crate::rewrite::Patch::new(&r.id, &c.name, None);
                p.annotate = vec![
                    (n, LAYER_ANN_KEY, annotation.clone()),
                    (n, crate::rewrite::RULE_KEY, rule_id.clone()),
                ];
                let mut step = Step::new(p, c.op.clone());
                step.count = 1;
                Planned {
                    covers: vec![c],
                    outcome: Ok(vec![step]),
                    report_at: 0,
                    frees: Vec::new(),
                }
                .at(i)
            })
            .collect()
    }
}
