//! Where DirectML's GPU work is submitted: what one CPU node does to the command lists, read in
//! ONNX Runtime's DirectML provider.
//!
//! - **A read-back ends a submission.** A GPU value a CPU node reads is copied to the host by
//!   `ReadbackHeap::ReadbackFromGpu`, which records the copy, then calls
//!   `ExecutionContext::Flush()` and waits for the completion event
//!   (`onnxruntime/core/providers/dml/DmlExecutionProvider/src/ReadbackHeap.cpp` at 0672efae):
//!   every GPU operator recorded since the last flush goes to the GPU in that submission, and
//!   the GPU operators that run after it are recorded into a new command list. Operators are
//!   recorded in the order ONNX Runtime runs the nodes (its topological order).
//! - **Graph fusion.** With graph fusion on, `GraphPartitioner.cpp` `BuildPartitions`
//!   (onnxruntime at 82b45a77) fuses DirectML nodes into partitions: a node joins the partitions
//!   of its inputs that are not *finalized*; a node DirectML does not run as a graph node (a
//!   CPU node) finalizes the partitions its inputs come from, and a later node reading a value
//!   of a finalized partition starts a new one, the value staying on the GPU (an edge between
//!   two DirectML nodes, no copy). A fused partition is one recorded operator; it does not end
//!   the command list either: only the read-back does. The built-in DirectML targets turn
//!   fusion off (`ep.dml.disable_graph_fusion`), where every node is its own operator.
//!
//! So a barrier needs one CPU node on one GPU value: its read-back ends the submission whatever
//! else is live across it (those values stay on the GPU and are read there by the next
//! submission), at the cost of two crossings of that one value.
//!
//! [`submissions`] walks a graph in a topological order and numbers the submissions. CPU nodes
//! that only compute shapes are taken to end nothing (see [`Role::Inert`]): where ONNX Runtime
//! copies their input back they end a submission too, so the submissions found here are never
//! shorter than the runtime's.

use crate::ir::{Graph, NodeId, Origin};

/// What a node is to the command lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not a node to the runtime (a `Constant`: an initializer).
    None,
    /// A GPU operator: recorded into the current command list.
    Gpu,
    /// A CPU node: reading a GPU value, it ends the current submission (a read-back).
    Cpu,
    /// A CPU shape computation: taken to end nothing (a `Shape` of a GPU value needs only its
    /// dims; counting it as no read-back makes submissions longer, never shorter).
    Inert,
}

/// The producers of the values node `n` reads (inputs and values read inside its bodies), in
/// input order.
pub fn producers(g: &Graph, n: NodeId) -> Vec<NodeId> {
    let node = g.node(n);
    node.inputs
        .iter()
        .flatten()
        .chain(node.implicit_inputs().iter())
        .filter_map(|v| match g.values[v.index()].origin {
            Origin::Node { node, .. } if g.nodes.contains_node(node) => Some(node),
            _ => None,
        })
        .collect()
}

/// The submission (numbered from 0 in `order`) of every GPU node of `g`, walking `order` (a
/// topological order), each node's role given by `role`; `None` for the nodes off the GPU.
/// A CPU node reading a value a GPU node computed ends the current submission.
pub fn submissions(
    g: &Graph,
    order: &[NodeId],
    role: &dyn Fn(NodeId) -> Role,
) -> Vec<Option<usize>> {
    let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
    let mut gpu = vec![false; bound];
    let mut out = vec![None; bound];
    let mut current: Option<usize> = None;
    let mut count = 0usize;
    for &n in order {
        match role(n) {
            Role::Gpu => {
                gpu[n.index()] = true;
                let s = *current.get_or_insert_with(|| {
                    count += 1;
                    count - 1
                });
                out[n.index()] = Some(s);
            }
            Role::Cpu => {
                if producers(g, n).iter().any(|p| gpu[p.index()]) {
                    current = None;
                }
            }
            Role::None | Role::Inert => {}
        }
    }
    out
}
