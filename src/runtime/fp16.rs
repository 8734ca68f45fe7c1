//! Which float16 nodes ONNX Runtime's CPU provider computes in float32.
//!
//! The CPU provider has no float16 kernel for most arithmetic ops (Conv, ConvTranspose, Add,
//! Mul, Tanh... on x86-64, `runtimes/capability/cpu.tsv`). Its `InsertCastTransformer` runs such
//! a node in float32 between casts it inserts, and `RemoveDuplicateCastTransformer` drops the
//! casts between two such nodes, so a chain of them passes float32 on unrounded. Before that,
//! `ForceSingleNodeCPUFloat16ToFloat32` takes a node that *has* a float16 kernel (Max, Clip,
//! Transpose, Reshape, Slice, Concat...) to float32 as well when it sits alone between nodes
//! without one (`IsIsolatedFp16NodeOnCpu`,
//! onnxruntime/core/optimizer/insert_cast_transformer.cc at e86b948). Its rule, as written:
//!
//! - the node is assigned to the CPU provider in float16 (it has a float16 kernel), has at
//!   least one input edge from another node, no subgraph, and produces no graph output;
//! - for each formal input, only the *first* actual input is looked at (a variadic Max or
//!   Concat: its first input only); each of those that is float16 and comes from a node must
//!   come from a node that needs casts (no float16 kernel, a float16 input); a graph input or
//!   initializer passes;
//! - it has a float16 output, and every node reading one needs casts;
//! - a float32 kernel exists (it does for every op here).
//!
//! A Relu at opset 14 or later has no float16 kernel but a function body, which ONNX Runtime
//! inlines as `Max(X, CastLike(0, X))`: the Max has a float16 kernel and an input edge (the
//! CastLike's Cast), and only X is looked at. So a Relu of a graph input that feeds a Conv runs
//! in float32 too. All of this was checked on ONNX Runtime 1.32 (x86-64) by saving the session's
//! graph with optimisations off (`SessionOptions.optimized_model_filepath`): Conv -> Relu -> Conv
//! runs the Max on float32, Conv -> Relu -> Relu -> Conv both Maxes in float16 (neither is
//! alone), a Relu whose output is a graph output in float16, and Conv -> Transpose / Clip ->
//! Conv in float32.

use super::capability::{Capability, Function, Lookup, Schemas};
use crate::ir::{Graph, NodeId, Origin, ValueId};
use crate::tensor::dtype::FLOAT16;
use std::sync::OnceLock;

/// The CPU provider's kernel table.
fn cpu() -> &'static Capability {
    static CPU: OnceLock<Capability> = OnceLock::new();
    CPU.get_or_init(|| {
        Capability::parse(super::CPU_TABLE).unwrap_or_else(|e| panic!("built-in CPU table: {e}"))
    })
}

/// Node `n` against the CPU provider's table: the opset its domain is imported at, and whether
/// a kernel takes its op at that schema version and these types (`None`: no opset or schema).
fn cpu_kernel(
    g: &Graph,
    n: NodeId,
    opset: &dyn Fn(&str) -> Option<i64>,
    dtype: &dyn Fn(ValueId) -> Option<i32>,
) -> Option<(i64, bool)> {
    let node = g.node(n);
    let domain = node.domain();
    let version = opset(domain)?;
    let since = Schemas::builtin().since(domain, &node.op_type, version)?;
    let ins: Vec<Option<i32>> = node.inputs.iter().map(|v| v.and_then(dtype)).collect();
    let outs: Vec<Option<i32>> = node.outputs.iter().map(|v| v.and_then(dtype)).collect();
    let kernel = matches!(
        cpu().lookup(domain, &node.op_type, since, &ins, &outs),
        Lookup::Kernel(_)
    );
    Some((version, kernel))
}

/// The ops of the function body ONNX Runtime would inline for node `n` at `version`, if any.
fn body(g: &Graph, n: NodeId, version: i64) -> Option<&'static [String]> {
    let node = g.node(n);
    match Schemas::builtin()
        .at(node.domain(), &node.op_type, version)
        .map(|s| &s.function)
    {
        Some(Function::Ops(ops)) => Some(ops),
        _ => None,
    }
}

/// Whether the CPU provider runs node `n` on its float16 values itself (a float16 kernel, or a
/// function body it inlines whose work is done by an op with one, as Relu's Max): `false` for a
/// node it runs in float32 between inserted casts.
pub fn has_f16_kernel(
    g: &Graph,
    n: NodeId,
    opset: &dyn Fn(&str) -> Option<i64>,
    dtype: &dyn Fn(ValueId) -> Option<i32>,
) -> bool {
    let Some((version, kernel)) = cpu_kernel(g, n, opset, dtype) else {
        return false;
    };
    if kernel {
        return true;
    }
    // No kernel for these types: ONNX Runtime inlines a function body; the body computes in
    // float16 where one of its ops (other than the constant and its cast) has a float16 kernel.
    let schemas = Schemas::builtin();
    body(g, n, version).is_some_and(|ops| {
        ops.iter()
            .filter(|op| !matches!(op.as_str(), "Constant" | "CastLike" | "Cast"))
            .any(|op| {
                schemas.since("", op, version).is_some_and(|s| {
                    matches!(
                        cpu().lookup("", op, s, &[Some(FLOAT16)], &[Some(FLOAT16)]),
                        Lookup::Kernel(_)
                    )
                })
            })
    })
}

/// Whether a function body stands for node `n` (ONNX Runtime inlines it: no kernel for its
/// types).
fn inlined(
    g: &Graph,
    n: NodeId,
    opset: &dyn Fn(&str) -> Option<i64>,
    dtype: &dyn Fn(ValueId) -> Option<i32>,
) -> bool {
    cpu_kernel(g, n, opset, dtype)
        .is_some_and(|(version, kernel)| !kernel && body(g, n, version).is_some())
}

/// `NodeNeedsInputCastToFp32`: a node with a float16 input that the CPU provider runs in
/// float32 between casts (no float16 kernel).
///
/// The question is asked of the model as it was, and the rewrites of a compile may have come
/// first: a `Cast` between float16 and float32 that the compiler wrote (a fence's or a split's,
/// with a rule's stamp) stands for the neighbour it computes in float32, which counts as one
/// that needs casts. (A fenced node that had a float16 kernel is never beside one of the nodes
/// asked about: two nodes with float16 kernels side by side are never isolated.)
pub fn needs_cast(
    g: &Graph,
    n: NodeId,
    opset: &dyn Fn(&str) -> Option<i64>,
    dtype: &dyn Fn(ValueId) -> Option<i32>,
) -> bool {
    let node = g.node(n);
    if compiler_cast(g, n, dtype) {
        return true;
    }
    let f16_input = node
        .inputs
        .iter()
        .flatten()
        .any(|&v| dtype(v) == Some(FLOAT16));
    f16_input && !has_subgraph(g, n) && !has_f16_kernel(g, n, opset, dtype)
}

fn has_subgraph(g: &Graph, n: NodeId) -> bool {
    g.node(n).attributes.iter().any(|a| a.has_graph())
}

/// The node that produces `v` as an edge (a `Constant` is an initializer to ONNX Runtime).
fn producer(g: &Graph, v: ValueId) -> Option<NodeId> {
    match g.value(v).origin {
        Origin::Node { node, .. } => {
            let p = g.node(node);
            (!(p.op_type == "Constant" && p.domain().is_empty())).then_some(node)
        }
        _ => None,
    }
}

/// `IsIsolatedFp16NodeOnCpu` (see the module's text): ONNX Runtime's CPU provider computes this
/// float16 node, which has a float16 kernel, in float32, because every node on its float16
/// edges is computed in float32.
pub fn isolated(
    g: &Graph,
    n: NodeId,
    opset: &dyn Fn(&str) -> Option<i64>,
    dtype: &dyn Fn(ValueId) -> Option<i32>,
) -> bool {
    let node = g.node(n);
    if has_subgraph(g, n) || !has_f16_kernel(g, n, opset, dtype) {
        return false;
    }
    if node
        .outputs
        .iter()
        .flatten()
        .any(|&v| g.outputs.iter().any(|o| o.value == v))
    {
        return false;
    }
    let body = inlined(g, n, opset, dtype);
    // The inputs looked at: the first actual input of each formal (a variadic formal is the
    // last one; an inlined body's op reads the node's first input, beside its own constant).
    let considered: Vec<ValueId> = if body {
        node.inputs.first().copied().flatten().into_iter().collect()
    } else {
        let formals = opset(node.domain())
            .and_then(|v| Schemas::builtin().at(node.domain(), &node.op_type, v))
            .map_or(node.inputs.len(), |s| s.inputs.len().max(1));
        node.inputs
            .iter()
            .take(formals)
            .flatten()
            .copied()
            .collect()
    };
    // At least one input edge (an inlined body has one: the Cast of its constant).
    let edges = body
        || node
            .inputs
            .iter()
            .flatten()
            .any(|&v| producer(g, v).is_some());
    if !edges {
        return false;
    }
    let f16_in: Vec<ValueId> = considered
        .into_iter()
        .filter(|&v| dtype(v) == Some(FLOAT16))
        .collect();
    if f16_in.is_empty() {
        return false;
    }
    if f16_in
        .iter()
        .filter_map(|&v| producer(g, v))
        .any(|p| !needs_cast(g, p, opset, dtype))
    {
        return false;
    }
    let f16_out: Vec<ValueId> = node
        .outputs
        .iter()
        .flatten()
        .copied()
        .filter(|&v| dtype(v) == Some(FLOAT16))
        .collect();
    if f16_out.is_empty() {
        return false;
    }
    f16_out.iter().all(|&v| {
        g.implicit_readers(v).is_empty()
            && g.readers(v)
                .iter()
                .all(|&(r, _)| needs_cast(g, r, opset, dtype))
    })
}

/// A `Cast` between float16 and float32 that a rewrite wrote (it carries a rule's stamp).
pub fn compiler_cast(g: &Graph, n: NodeId, dtype: &dyn Fn(ValueId) -> Option<i32>) -> bool {
    use crate::tensor::dtype::FLOAT;
    let node = g.node(n);
    if node.op_type != "Cast"
        || !node.domain().is_empty()
        || node.metadata(crate::rewrite::patch::RULE_KEY).is_none()
    {
        return false;
    }
    let (Some(Some(i)), Some(Some(o))) = (node.inputs.first(), node.outputs.first()) else {
        return false;
    };
    matches!(
        (dtype(*i), dtype(*o)),
        (Some(FLOAT16), Some(FLOAT)) | (Some(FLOAT), Some(FLOAT16))
    )
}
