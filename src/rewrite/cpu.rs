//! `cpu`: pin nodes to the CPU with the per-node annotation ONNX Runtime 1.32 honours: node
//! metadata `layer_ann`, selected by the session option
//! `session.layer_assignment_settings=cpu(<annotation>)` (see docs/hazards.md).
//!
//! Pinning single nodes can make a model ping-pong between devices, so pinned regions are
//! grown: a node whose every consumer is pinned and that only computes shapes joins them, and
//! so does a node sandwiched between pinned producers and pinned consumers.
//!
//! A pin must also leave a model that loads. ONNX Runtime keeps some values on the CPU by its
//! own choice: the outputs of `Shape`/`Size`, whose GPU kernels write CPU memory, and the small
//! arithmetic on them that its fallback walk (`fallback_cpu_capability.cc`) places on the CPU.
//! onnxruntime-web 1.30.0 fails to create the session (`std::bad_alloc`) when a node pinned by
//! `layer_ann` reads such a value (docs/webgpu-lab.md, "Pins in shape computations"). So a
//! pinned node never reads one: the unpinned producers of what it reads join the region, up
//! to the `Shape`/`Size` they start from ([`runtime_cpu_values`]).

// Node and value indices are internal: a fast hash is safe (see `crate::ir::hash`).
use crate::ir::hash::FastSet as HashSet;

use crate::ir::{Consumers, Graph, Node, NodeId, Origin, Text, ValueId};
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
/// first, then grown ones and those that keep the model loadable, each in graph order).
pub fn pin(g: &mut Graph, nodes: &[NodeId], rule: &str, annotation: &str) -> Vec<NodeId> {
    let added = plan_pins(g, nodes, annotation);
    let (annotation, rule) = (Text::copy(annotation), Text::copy(rule));
    for &n in &added {
        let node = g.node_mut(n);
        node.set_metadata(LAYER_ANN_KEY, annotation.clone());
        node.set_metadata(crate::rewrite::RULE_KEY, rule.clone());
    }
    added
}

/// Does `node` (not pinned) join the region `pinned` (see [`grow`])?
fn joins(
    g: &Graph,
    node: &Node,
    consumers: &Consumers,
    graph_outputs: &HashSet<ValueId>,
    pinned: &HashSet<NodeId>,
) -> bool {
    let outs = || node.outputs.iter().flatten();
    if outs().next().is_none() || outs().any(|v| graph_outputs.contains(v)) {
        return false;
    }
    let mut uses = outs()
        .flat_map(|v| consumers.of(*v).iter().map(|(c, _)| c))
        .peekable();
    if uses.peek().is_none() || !uses.all(|c| pinned.contains(c)) {
        return false;
    }
    let shape_op = node.domain().is_empty() && SHAPE_OPS.contains(&node.op_type.as_str());
    shape_op
        || node
            .inputs
            .iter()
            .flatten()
            .chain(node.implicit_inputs().iter())
            .all(|v| match g.value(*v).origin {
                Origin::Node { node: p, .. } => pinned.contains(&p),
                Origin::Initializer => true,
                _ => false,
            })
}

/// The nodes whose outputs `node` reads (inputs and reads from its bodies).
fn producers<'g>(g: &'g Graph, node: &'g Node) -> impl Iterator<Item = NodeId> + 'g {
    let inputs = node.inputs.iter().flatten();
    inputs
        .chain(node.implicit_inputs().iter())
        .filter_map(|v| match g.value(*v).origin {
            Origin::Node { node, .. } => Some(node),
            _ => None,
        })
}

/// The nodes that join the pinned region, in graph order: the least set closed under "every
/// consumer is pinned (and there is one), no output is a graph output, and the node computes
/// shapes or all its producers are pinned". Both conditions only grow with the pinned set, so
/// the set does not depend on the order nodes are looked at; only a producer of a pinned node
/// can join, so the nodes looked at are those around the region (a worklist), not the graph
/// again and again.
fn grow(g: &Graph, pinned: &mut HashSet<NodeId>) -> Vec<NodeId> {
    let consumers = g.consumers();
    let graph_outputs: HashSet<_> = g.outputs.iter().map(|o| o.value).collect();
    let mut work: Vec<NodeId> = Vec::new();
    for &n in pinned.iter() {
        if let Some(node) = g.nodes.node_weight(n) {
            work.extend(producers(g, node));
        }
    }
    let mut added = Vec::new();
    while let Some(n) = work.pop() {
        if pinned.contains(&n) {
            continue;
        }
        let Some(node) = g.nodes.node_weight(n) else {
            continue;
        };
        if joins(g, node, &consumers, &graph_outputs, pinned) {
            pinned.insert(n);
            added.push(n);
            // Its producers may join now: one more of their consumers is pinned. (Its
            // consumers were all pinned already, so none waits on it as a producer.)
            work.extend(producers(g, node));
        }
    }
    in_write_order(g, &mut added);
    added
}

/// Sort `nodes` by their place in the graph's write order.
fn in_write_order(g: &Graph, nodes: &mut [NodeId]) {
    if nodes.len() > 1 {
        let pos = crate::ir::Positions::new(&g.order);
        nodes.sort_by_key(|n| pos.get(n));
    }
}

/// The nodes [`pin`] would pin (requested ones first, then grown ones and the producers of
/// the runtime's own CPU values that pinned nodes read), without pinning them.
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
    let mut extra = grow(g, &mut pinned);
    // Make the region one the runtime loads: what a pinned node reads is never a value the
    // runtime keeps on the CPU by its own choice. Each round pins the producers of such values
    // (one step up a shape computation) and grows again; it ends at the `Shape`/`Size` nodes
    // the computations start from, so the rounds are as many as the longest such chain.
    loop {
        let more = producers_of_runtime_cpu_reads(g, &pinned);
        if more.is_empty() {
            break;
        }
        for n in more {
            if pinned.insert(n) {
                extra.push(n);
            }
        }
        extra.extend(grow(g, &mut pinned));
    }
    in_write_order(g, &mut extra);
    added.extend(extra);
    added
}

/// Ops whose GPU kernels write their output in CPU memory: where ONNX Runtime's fallback walk
/// starts.
const CPU_OUTPUT_OPS: &[&str] = &["Shape", "Size"];

/// Does onnxruntime-web's WebGPU kernel for `op` read input `slot` in CPU memory? A CPU value
/// entering such a slot stops the fallback walk: the node stays on the GPU and its outputs
/// are GPU values. Measured on onnxruntime-web 1.30.0 for Reshape, Expand, Tile, Slice, Pad,
/// Resize, Unsqueeze, ReduceSum, TopK, CumSum and Clip (docs/webgpu-lab.md); Squeeze, the
/// other reductions and Upsample are registered like their siblings. An op missing here is
/// taken as walked through, which can only pin more, never leave a failing pin.
fn reads_on_cpu(op: &str, slot: usize) -> bool {
    match op {
        "Reshape" | "Expand" | "Tile" | "Unsqueeze" | "Squeeze" | "TopK" | "CumSum"
        | "Upsample" => slot == 1,
        "Slice" => (1..=4).contains(&slot),
        "Pad" | "Resize" => (1..=3).contains(&slot),
        "Clip" => slot == 1 || slot == 2,
        op if op.starts_with("Reduce") => slot == 1,
        _ => false,
    }
}

/// A value the fallback walk treats as already on the CPU: a graph input, an initializer, or
/// a `Constant` (ONNX Runtime turns those into initializers when it loads the model).
fn constant_like(g: &Graph, v: ValueId) -> bool {
    match g.value(v).origin {
        Origin::Input | Origin::Initializer => true,
        Origin::Node { node, .. } => {
            let n = g.node(node);
            n.op_type == "Constant" && n.domain().is_empty()
        }
        _ => false,
    }
}

/// Would the fallback walk put `node` (unpinned) on the CPU, given the CPU values `cpu`
/// found so far? `Shape`/`Size` start it; another op joins when it reads a CPU value, in no
/// slot its GPU kernel reads on the CPU anyway, and otherwise only constants.
fn walked(g: &Graph, node: &Node, cpu: &HashSet<ValueId>) -> bool {
    if !node.domain().is_empty() {
        return false;
    }
    if CPU_OUTPUT_OPS.contains(&node.op_type.as_str()) {
        return true;
    }
    if !node.implicit_inputs().is_empty() {
        return false;
    }
    let mut reads_cpu = false;
    for (slot, v) in node.inputs.iter().enumerate() {
        let Some(v) = v else { continue };
        if cpu.contains(v) {
            if reads_on_cpu(&node.op_type, slot) {
                return false;
            }
            reads_cpu = true;
        } else if !constant_like(g, *v) {
            return false;
        }
    }
    reads_cpu
}

/// The values ONNX Runtime computes on the CPU by its own choice when the nodes in `pinned`
/// are pinned and the rest is offered to a GPU provider: the outputs of unpinned
/// `Shape`/`Size` nodes, and of the unpinned nodes its fallback walk places on the CPU from
/// there (see [`walked`]). A pinned node takes no part: the GPU provider is not offered it.
/// Over-approximated where a kernel's CPU slots are not known (see [`reads_on_cpu`]).
pub fn runtime_cpu_values(g: &Graph, pinned: &HashSet<NodeId>) -> HashSet<ValueId> {
    let consumers = g.consumers();
    let mut cpu: HashSet<ValueId> = HashSet::default();
    let mut placed: HashSet<NodeId> = HashSet::default();
    let mut work: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|n| {
            let node = g.node(*n);
            node.domain().is_empty() && CPU_OUTPUT_OPS.contains(&node.op_type.as_str())
        })
        .collect();
    // A node is looked at again whenever one more of its inputs becomes a CPU value; the
    // condition only grows with `cpu`, so the result does not depend on the order.
    while let Some(n) = work.pop() {
        if pinned.contains(&n) || placed.contains(&n) {
            continue;
        }
        let Some(node) = g.nodes.node_weight(n) else {
            continue;
        };
        if !walked(g, node, &cpu) {
            continue;
        }
        placed.insert(n);
        for &o in node.outputs.iter().flatten() {
            cpu.insert(o);
            work.extend(consumers.of(o).iter().map(|(c, _)| *c));
        }
    }
    cpu
}

/// The unpinned nodes that produce a value the runtime keeps on the CPU (see
/// [`runtime_cpu_values`]) read by a node in `pinned`, in graph order.
fn producers_of_runtime_cpu_reads(g: &Graph, pinned: &HashSet<NodeId>) -> Vec<NodeId> {
    // Cheap test first: a CPU value descends from a `Shape`/`Size`; without an unpinned one
    // there is nothing to find.
    let any_source = g.order.iter().any(|n| {
        let node = g.node(*n);
        !pinned.contains(n)
            && node.domain().is_empty()
            && CPU_OUTPUT_OPS.contains(&node.op_type.as_str())
    });
    if !any_source {
        return Vec::new();
    }
    let cpu = runtime_cpu_values(g, pinned);
    let mut found: HashSet<NodeId> = HashSet::default();
    for &n in &g.order {
        if !pinned.contains(&n) {
            continue;
        }
        let node = g.node(n);
        let reads = node
            .inputs
            .iter()
            .flatten()
            .chain(node.implicit_inputs().iter());
        for v in reads {
            if cpu.contains(v) {
                if let Origin::Node { node: p, .. } = g.value(*v).origin {
                    found.insert(p);
                }
            }
        }
    }
    let mut found: Vec<NodeId> = found.into_iter().collect();
    in_write_order(g, &mut found);
    found
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::ValueInfo;

    /// The growth as first written, the oracle: sweeps of the whole graph in order until one
    /// adds nothing (a chain of k shape ops took k sweeps), with the same condition to join.
    fn grow_by_sweeps(g: &Graph, pinned: &mut HashSet<NodeId>) -> Vec<NodeId> {
        let consumers = g.consumers();
        let graph_outputs: HashSet<_> = g.outputs.iter().map(|o| o.value).collect();
        let mut added = Vec::new();
        loop {
            let mut changed = false;
            for &n in &g.order {
                if pinned.contains(&n) {
                    continue;
                }
                if joins(g, g.node(n), &consumers, &graph_outputs, pinned) {
                    pinned.insert(n);
                    added.push(n);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        in_write_order(g, &mut added);
        added
    }

    /// A small pseudo-random generator (the same graphs on every run).
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) as usize) % n
        }
    }

    /// A graph of `n` nodes, each reading one or two earlier values (a graph input, an
    /// initializer or a node's output), of ops that compute shapes and ops that do not; some
    /// outputs are graph outputs.
    fn random_graph(rng: &mut Lcg, n: usize) -> Graph {
        const OPS: &[&str] = &["Identity", "Shape", "Relu", "Conv", "Add", "Tanh", "Gather"];
        let mut g = Graph::default();
        let mut values: Vec<ValueId> = vec![g.add_value("x".into(), Origin::Input)];
        values.push(g.add_value("w".into(), Origin::Initializer));
        for i in 0..n {
            let inputs = (0..1 + rng.below(2))
                .map(|_| Some(values[rng.below(values.len())]))
                .collect();
            let outputs: Vec<Option<ValueId>> = (0..1 + usize::from(rng.below(5) == 0))
                .map(|k| Some(g.add_value(format!("v{i}_{k}"), Origin::Unbound)))
                .collect();
            values.extend(outputs.iter().flatten());
            let node = Node {
                inputs,
                outputs: outputs.clone(),
                ..Node::new(OPS[rng.below(OPS.len())])
            };
            g.insert_node(node, None);
            if rng.below(10) == 0 {
                g.outputs.push(ValueInfo {
                    value: outputs[0].unwrap(),
                    proto: Default::default(),
                });
            }
        }
        g
    }

    /// The region grows to the same nodes, in the same order, as by sweeps of the whole graph.
    #[test]
    fn the_region_grows_as_by_whole_graph_sweeps() {
        let mut rng = Lcg(7);
        let mut grown = 0;
        for _ in 0..400 {
            let n = 2 + rng.below(40);
            let g = random_graph(&mut rng, n);
            let mut start: HashSet<NodeId> = HashSet::default();
            for &id in &g.order {
                if rng.below(4) == 0 {
                    start.insert(id);
                }
            }
            let (mut a, mut b) = (start.clone(), start);
            let by_sweeps = grow_by_sweeps(&g, &mut b);
            assert_eq!(grow(&g, &mut a), by_sweeps);
            assert_eq!(a, b);
            grown += by_sweeps.len();
        }
        assert!(
            grown > 100,
            "the graphs exercise growth ({grown} nodes grown)"
        );
    }

    /// A chain of shape ops that only feeds a pinned node joins it whole (by sweeps, one
    /// node per sweep).
    #[test]
    fn a_chain_of_shape_ops_joins_whole() {
        let mut g = Graph::default();
        let mut v = g.add_value("x".into(), Origin::Input);
        for i in 0..3000 {
            let out = g.add_value(format!("v{i}"), Origin::Unbound);
            let node = Node {
                inputs: vec![Some(v)],
                outputs: vec![Some(out)],
                ..Node::new("Identity")
            };
            g.insert_node(node, None);
            v = out;
        }
        let y = g.add_value("y".into(), Origin::Unbound);
        let add = g.insert_node(
            Node {
                inputs: vec![Some(v), Some(v)],
                outputs: vec![Some(y)],
                ..Node::new("Add")
            },
            None,
        );
        let pinned = plan_pins(&g, &[add], DEFAULT_ANNOTATION);
        assert_eq!(pinned.len(), 3001);
        assert_eq!(pinned[0], add);
        assert_eq!(pinned[1..], g.order[..3000]);
    }
    /// Builds the graph of the WebGPU lab's finding: `x` (graph input) -> Shape -> Gather ->
    /// Concat -> Reshape(x, .) -> Relu -> Neg, with the Shape also read by a second Gather
    /// (unpinned, feeding a graph output) so that growth alone cannot take the Shape.
    fn shape_chain() -> (Graph, Vec<NodeId>) {
        let mut g = Graph::default();
        let x = g.add_value("x".into(), Origin::Input);
        let idx = g.add_value("idx".into(), Origin::Initializer);
        let m1 = g.add_value("minus_one".into(), Origin::Initializer);
        let mut ids = Vec::new();
        let mut node = |g: &mut Graph, op: &str, ins: &[ValueId], out: &str| {
            let o = g.add_value(out.into(), Origin::Unbound);
            let id = g.insert_node(
                Node {
                    inputs: ins.iter().map(|v| Some(*v)).collect(),
                    outputs: vec![Some(o)],
                    ..Node::new(op)
                },
                None,
            );
            ids.push(id);
            o
        };
        let s = node(&mut g, "Shape", &[x], "s");
        let gat = node(&mut g, "Gather", &[s, idx], "g");
        let t = node(&mut g, "Concat", &[m1, gat], "t");
        let r = node(&mut g, "Reshape", &[x, t], "r");
        let a = node(&mut g, "Relu", &[r], "a");
        let y = node(&mut g, "Neg", &[a], "y");
        let d = node(&mut g, "Gather", &[s, idx], "d");
        for v in [y, d] {
            g.outputs.push(ValueInfo {
                value: v,
                proto: Default::default(),
            });
        }
        (g, ids)
    }

    /// The values the runtime keeps on the CPU: the Shape's output and the arithmetic on it,
    /// up to the Reshape, which reads its shape input on the CPU and stays on the GPU.
    #[test]
    fn runtime_cpu_values_stop_at_a_cpu_slot() {
        let (g, ids) = shape_chain();
        let cpu = runtime_cpu_values(&g, &HashSet::default());
        let out = |i: usize| g.node(ids[i]).outputs[0].unwrap();
        for i in [0, 1, 2, 6] {
            assert!(cpu.contains(&out(i)), "{}", g.node(ids[i]).op_type);
        }
        for i in [3, 4, 5] {
            assert!(!cpu.contains(&out(i)), "{}", g.node(ids[i]).op_type);
        }
        // A pinned Shape starts nothing: the GPU provider is not offered it.
        let pinned: HashSet<NodeId> = [ids[0]].into_iter().collect();
        assert!(runtime_cpu_values(&g, &pinned).is_empty());
    }

    /// A pin in the shape computation (Gather, Concat) or on the node that reads it (Reshape)
    /// takes the computation up to its Shape; a pin past the Reshape's consumer takes nothing
    /// more.
    #[test]
    fn a_pin_reading_a_runtime_cpu_value_takes_the_shape_computation() {
        let (g, ids) = shape_chain();
        let [shape, gather, concat, reshape, relu, neg, _] = ids[..] else {
            unreachable!()
        };
        for (start, want) in [
            (gather, vec![gather, shape]),
            (concat, vec![concat, shape, gather]),
            (reshape, vec![reshape, shape, gather, concat]),
            // Growth takes the Reshape (a shape op whose one consumer is pinned), and so
            // the computation it reads.
            (relu, vec![relu, shape, gather, concat, reshape]),
            (neg, vec![neg]),
        ] {
            let got = plan_pins(&g, &[start], DEFAULT_ANNOTATION);
            assert_eq!(got, want, "pinning {}", g.node(start).op_type);
            let pinned: HashSet<NodeId> = got.into_iter().collect();
            let cpu = runtime_cpu_values(&g, &pinned);
            for &n in &pinned {
                let node = g.node(n);
                assert!(
                    node.inputs.iter().flatten().all(|v| !cpu.contains(v)),
                    "{} reads a runtime CPU value",
                    node.op_type
                );
            }
        }
    }
}
