//! The `unfuse` action: decompose fused operators (ONNX Runtime contrib ops, its NCHWc layout
//! ops, ONNX function ops) into standard ONNX operators at the model's own opset.
//!
//! One module per operator family, registered in [`REGISTRY`]. Each decomposition reads the
//! node, checks what it needs (attributes, constant weights, element type, rank) and returns a
//! [`Patch`] or an [`Unsupported`] with the reason; it never panics on what came from the file.
//! The formula each one implements is cited next to it.
//!
//! Opset policy: the default-domain opset import is never raised (a raise would change the
//! meaning of other operators in the model); each decomposition picks the operator forms of the
//! model's opset, and refuses, with the opset it would need, where no form exists.

pub mod activation;
pub mod attention;
pub mod facts;
pub mod function_ops;
pub mod fused_conv;
pub mod fused_gemm;
pub mod fused_matmul;
pub mod gelu;
pub mod layer_norm;
pub mod nchwc;
pub mod rw;

use std::collections::{HashMap, HashSet};

use crate::io::ExternalData;
use crate::ir::{Graph, Model, Node, NodeId, ValueId};
use crate::rewrite::Patch;

pub use facts::{Facts, ValueFacts};

/// The NCHWc layout domain of ONNX Runtime's CPU provider.
pub const NCHWC_DOMAIN: &str = "com.microsoft.nchwc";
/// ONNX Runtime's contrib domain.
pub const MS_DOMAIN: &str = "com.microsoft";

/// What a decomposition may consult.
#[derive(Clone, Copy)]
pub struct UnfuseCtx<'a> {
    /// The model's default-domain opset: new nodes use the operator forms of this version.
    pub model_opset: i64,
    /// The rule id stamped on new nodes.
    pub rule: &'a str,
    /// Value facts (element type, rank, static dims) of the graph; computed on demand if absent.
    pub facts: Option<&'a Facts>,
    /// Resolver for weights stored as external data.
    pub external: Option<&'a ExternalData>,
    /// NCHWc block size of the CPU that produced the model (8 with AVX2, 16 with AVX-512):
    /// inferred from the model when absent, and checked against it when given.
    pub nchwc_block_size: Option<i64>,
}

impl<'a> UnfuseCtx<'a> {
    pub fn new(model_opset: i64, rule: &'a str) -> Self {
        UnfuseCtx {
            model_opset,
            rule,
            facts: None,
            external: None,
            nchwc_block_size: None,
        }
    }
}

/// Why a node was not decomposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub reason: String,
}

impl Unsupported {
    pub fn new(reason: impl Into<String>) -> Self {
        Unsupported {
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A decomposition: builds the patch for one node (nothing is changed yet).
pub type Decompose = fn(&UnfuseCtx, &Graph, NodeId) -> Result<Patch, Unsupported>;

/// Every decomposition, by (domain, op_type). `""` is the default ONNX domain.
pub const REGISTRY: &[(&str, &str, Decompose)] = &[
    // ONNX Runtime contrib operators.
    (MS_DOMAIN, "FusedConv", fused_conv::fused_conv),
    (MS_DOMAIN, "NhwcConv", fused_conv::nhwc_conv),
    (MS_DOMAIN, "NhwcMaxPool", fused_conv::nhwc_max_pool),
    (MS_DOMAIN, "FusedGemm", fused_gemm::fused_gemm),
    (MS_DOMAIN, "FusedMatMul", fused_matmul::fused_matmul),
    (MS_DOMAIN, "TransposeMatMul", fused_matmul::fused_matmul),
    (MS_DOMAIN, "Gelu", gelu::gelu_ms),
    (MS_DOMAIN, "BiasGelu", gelu::bias_gelu),
    (MS_DOMAIN, "FastGelu", gelu::fast_gelu),
    (MS_DOMAIN, "QuickGelu", gelu::quick_gelu),
    (MS_DOMAIN, "BiasAdd", function_ops::bias_add),
    (MS_DOMAIN, "BiasSoftmax", function_ops::bias_softmax),
    (
        MS_DOMAIN,
        "SkipLayerNormalization",
        layer_norm::skip_layer_norm,
    ),
    (
        MS_DOMAIN,
        "SkipSimplifiedLayerNormalization",
        layer_norm::skip_simplified_layer_norm,
    ),
    (MS_DOMAIN, "Attention", attention::attention),
    (
        MS_DOMAIN,
        "MultiHeadAttention",
        attention::multi_head_attention,
    ),
    // ONNX Runtime's CPU NCHWc layout operators.
    (NCHWC_DOMAIN, "Conv", nchwc::conv),
    (NCHWC_DOMAIN, "ReorderInput", nchwc::reorder_input),
    (NCHWC_DOMAIN, "ReorderOutput", nchwc::reorder_output),
    (NCHWC_DOMAIN, "MaxPool", nchwc::pool),
    (NCHWC_DOMAIN, "AveragePool", nchwc::pool),
    (NCHWC_DOMAIN, "GlobalMaxPool", nchwc::pool),
    (NCHWC_DOMAIN, "GlobalAveragePool", nchwc::pool),
    (NCHWC_DOMAIN, "Upsample", nchwc::upsample),
    // Default domain: function ops, and ONNX Runtime's default-domain contrib ops (valid ONNX
    // only from the opset noted in `is_standard`).
    ("", "LayerNormalization", layer_norm::layer_norm),
    (
        "",
        "SimplifiedLayerNormalization",
        layer_norm::simplified_layer_norm,
    ),
    ("", "Gelu", gelu::gelu_onnx),
    ("", "HardSwish", function_ops::hard_swish),
    ("", "Mish", function_ops::mish),
    ("", "GroupNormalization", function_ops::group_norm),
];

fn lookup(domain: &str, op: &str) -> Option<Decompose> {
    let domain = if domain == "ai.onnx" { "" } else { domain };
    REGISTRY
        .iter()
        .find(|(d, o, _)| *d == domain && *o == op)
        .map(|(_, _, f)| *f)
}

/// Is there a decomposition for this operator?
pub fn can_unfuse(domain: &str, op: &str) -> bool {
    lookup(domain, op).is_some()
}

/// Is this default-domain operator part of standard ONNX at `opset`? ONNX Runtime registers
/// some operators in the default domain before ONNX adopted them (LayerNormalization before
/// 17, SimplifiedLayerNormalization always): models using them fail `onnx.checker`.
pub fn is_standard(op: &str, opset: i64) -> bool {
    match op {
        "LayerNormalization" => opset >= 17,
        "Gelu" => opset >= 20,
        "GroupNormalization" => opset >= 18,
        "HardSwish" => opset >= 14,
        "Mish" => opset >= 18,
        "SimplifiedLayerNormalization" => false,
        _ => true,
    }
}

/// The default filter: nodes that are not standard ONNX at the model's opset (contrib and
/// layout domains, and default-domain ops ONNX does not have at that version).
pub fn is_fused(node: &Node, opset: i64) -> bool {
    match node.domain() {
        "" => !is_standard(&node.op_type, opset),
        "ai.onnx.ml" => false,
        _ => true,
    }
}

/// Build the patch that decomposes node `n`.
pub fn unfuse_node(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    if !g.nodes.contains_node(n) {
        return Err(Unsupported::new("no such node"));
    }
    let node = g.node(n);
    match lookup(node.domain(), &node.op_type) {
        Some(f) => f(ctx, g, n),
        None => Err(Unsupported::new(format!(
            "no decomposition for {}::{}",
            if node.domain().is_empty() {
                "ai.onnx"
            } else {
                node.domain()
            },
            node.op_type
        ))),
    }
}

/// One node decomposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfused {
    /// The graph it was in ("" for the main graph, else `node/attribute` path).
    pub graph: String,
    pub node: String,
    pub domain: String,
    pub op_type: String,
    pub new_nodes: usize,
}

/// One node left as it was, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub graph: String,
    pub node: String,
    pub domain: String,
    pub op_type: String,
    pub reason: String,
}

/// What [`unfuse_all`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnfuseReport {
    pub unfused: Vec<Unfused>,
    pub unsupported: Vec<Skipped>,
    /// Initializers only the removed nodes used (e.g. NCHWc-reordered weights), dropped.
    pub removed_initializers: usize,
    /// The NCHWc block size used, where the model had NCHWc operators.
    pub nchwc_block_size: Option<i64>,
}

impl UnfuseReport {
    /// Nodes created in all.
    pub fn new_nodes(&self) -> usize {
        self.unfused.iter().map(|u| u.new_nodes).sum()
    }
}

/// Options of [`unfuse_all_with`].
#[derive(Clone, Copy, Default)]
pub struct UnfuseOptions<'a> {
    pub rule: &'a str,
    pub external: Option<&'a ExternalData>,
    pub nchwc_block_size: Option<i64>,
}

/// Decompose every node the filter selects, in the main graph and its subgraphs. Never panics:
/// a selected node that cannot be decomposed (no decomposition, or a configuration it does not
/// handle) is left as it was and listed with the reason.
///
/// Nodes are rewritten consumers first (reverse topological order), so each decomposition
/// reads only values of the original graph, whose facts are computed once; the NCHWc nodes of
/// a graph are converted all together or not at all. Initializers only the removed nodes read
/// are dropped. The default-domain opset import is never changed.
pub fn unfuse_all(model: &mut Model, rule: &str, filter: impl Fn(&Node) -> bool) -> UnfuseReport {
    unfuse_all_with(
        model,
        &UnfuseOptions {
            rule,
            ..Default::default()
        },
        filter,
    )
}

/// [`unfuse_all`] with options (external data resolver, NCHWc block size).
pub fn unfuse_all_with(
    model: &mut Model,
    opts: &UnfuseOptions,
    filter: impl Fn(&Node) -> bool,
) -> UnfuseReport {
    let mut report = UnfuseReport::default();
    let opset = model.opset("");
    unfuse_graph(
        &mut model.graph,
        opset,
        opts,
        &filter,
        "",
        None,
        &mut report,
    );
    report
}

/// What [`apply_all`] did.
struct Applied {
    done: Vec<Unfused>,
    failed: Vec<Skipped>,
    read_by_removed: HashSet<ValueId>,
}

/// Build and apply the patch of every node of `todo`, consumers first: each patch then reads
/// only values of the original graph, whose facts `ctx` holds. Fails (having changed `g`) only
/// when an NCHWc patch does not apply.
fn apply_all(
    g: &mut Graph,
    ctx: &UnfuseCtx,
    todo: &[NodeId],
    path: &str,
) -> Result<Applied, String> {
    let topo = g.topo_order().unwrap_or_else(|_| g.order.clone());
    let todo_set: HashSet<NodeId> = todo.iter().copied().collect();
    let mut ordered: Vec<NodeId> = topo
        .into_iter()
        .rev()
        .filter(|n| todo_set.contains(n))
        .collect();
    // Nodes outside the topological order (none in a valid graph) last.
    let seen: HashSet<NodeId> = ordered.iter().copied().collect();
    ordered.extend(todo.iter().copied().filter(|n| !seen.contains(n)));

    let mut read_by_removed: HashSet<ValueId> = HashSet::new();
    let mut done: Vec<(usize, Unfused)> = Vec::new();
    let mut failed: Vec<(usize, Skipped)> = Vec::new();
    for n in ordered {
        if !g.nodes.contains_node(n) {
            continue;
        }
        let pos = g.order.iter().position(|&m| m == n).unwrap_or(0);
        let node = g.node(n).clone();
        let built = unfuse_node(ctx, g, n);
        let result = built.and_then(|p| {
            let count = p.nodes.len();
            p.apply(g).map(|_| count).map_err(|e| Unsupported::new(e.0))
        });
        match result {
            Ok(new_nodes) => {
                read_by_removed.extend(node.inputs.iter().flatten());
                done.push((
                    pos,
                    Unfused {
                        graph: path.to_string(),
                        node: node.name().to_string(),
                        domain: node.domain().to_string(),
                        op_type: node.op_type.clone(),
                        new_nodes,
                    },
                ));
            }
            Err(e) if node.domain() == NCHWC_DOMAIN => {
                return Err(format!(
                    "NCHWc node '{}' ({}): {}",
                    node.name(),
                    node.op_type,
                    e.reason
                ));
            }
            Err(e) => failed.push((
                pos,
                Skipped {
                    graph: path.to_string(),
                    node: node.name().to_string(),
                    domain: node.domain().to_string(),
                    op_type: node.op_type.clone(),
                    reason: e.reason,
                },
            )),
        }
    }
    // In the graph's order (patches insert where their node was, so the positions of the nodes
    // not yet processed, all earlier, do not move).
    done.sort_by_key(|(p, _)| *p);
    failed.sort_by_key(|(p, _)| *p);
    Ok(Applied {
        done: done.into_iter().map(|(_, u)| u).collect(),
        failed: failed.into_iter().map(|(_, s)| s).collect(),
        read_by_removed,
    })
}

fn skip(report: &mut UnfuseReport, path: &str, node: &Node, reason: String) {
    report.unsupported.push(Skipped {
        graph: path.to_string(),
        node: node.name().to_string(),
        domain: node.domain().to_string(),
        op_type: node.op_type.clone(),
        reason,
    });
}

fn unfuse_graph(
    g: &mut Graph,
    opset: Option<i64>,
    opts: &UnfuseOptions,
    filter: &dyn Fn(&Node) -> bool,
    path: &str,
    outer: Option<&HashMap<String, ValueFacts>>,
    report: &mut UnfuseReport,
) {
    let selected: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| filter(g.node(n)))
        .collect();
    // The NCHWc operators share one tensor layout: they are converted all together or not at
    // all (a partial conversion would mix blocked and plain tensors).
    let nchwc_all: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| g.node(n).domain() == NCHWC_DOMAIN)
        .collect();
    let want_nchwc = selected.iter().any(|&n| g.node(n).domain() == NCHWC_DOMAIN);
    let mut todo: Vec<NodeId> = selected
        .iter()
        .copied()
        .filter(|&n| g.node(n).domain() != NCHWC_DOMAIN)
        .collect();

    if let Some(opset) = opset {
        let mut block = opts.nchwc_block_size;
        let mut nchwc_error: Option<String> = None;
        if want_nchwc {
            let f1 = Facts::compute_in(g, opset, None, outer);
            match nchwc::infer_block_size(g, &f1, opts.nchwc_block_size) {
                Ok(b) => {
                    block = Some(b);
                    report.nchwc_block_size = Some(b);
                }
                Err(e) => nchwc_error = Some(e),
            }
        }
        let facts = Facts::compute_in(g, opset, block, outer);
        let ctx = UnfuseCtx {
            model_opset: opset,
            rule: opts.rule,
            facts: Some(&facts),
            external: opts.external,
            nchwc_block_size: block,
        };
        if want_nchwc && nchwc_error.is_none() {
            // Dry run on the unchanged graph: every NCHWc node must be convertible.
            for &n in &nchwc_all {
                if let Err(e) = unfuse_node(&ctx, g, n) {
                    nchwc_error = Some(format!(
                        "NCHWc node '{}' ({}): {}",
                        g.node(n).name(),
                        g.node(n).op_type,
                        e.reason
                    ));
                    break;
                }
            }
        }
        match (&nchwc_error, want_nchwc) {
            (Some(e), true) => {
                for &n in &nchwc_all {
                    let reason = format!("the NCHWc layout region is converted whole; {e}");
                    skip(report, path, g.node(n), reason);
                }
            }
            (None, true) => todo.extend(nchwc_all.iter().copied()),
            _ => {}
        }

        // The region must not end half converted: on a failed NCHWc patch, start again from
        // the unchanged graph without the region.
        let snapshot = (want_nchwc && nchwc_error.is_none()).then(|| g.clone());
        let mut run = apply_all(g, &ctx, &todo, path);
        if let (Err(e), Some(snapshot)) = (&run, snapshot) {
            *g = snapshot;
            for &n in &nchwc_all {
                let reason = format!("the NCHWc layout region is converted whole; {e}");
                skip(report, path, g.node(n), reason);
            }
            todo.retain(|&n| g.node(n).domain() != NCHWC_DOMAIN);
            run = apply_all(g, &ctx, &todo, path);
        }
        match run {
            Ok(a) => {
                report.unfused.extend(a.done);
                report.unsupported.extend(a.failed);
                report.removed_initializers += drop_dead_initializers(g, &a.read_by_removed);
            }
            // Only NCHWc patches fail this way, and the retry has none.
            Err(e) => report.unsupported.push(Skipped {
                graph: path.to_string(),
                node: String::new(),
                domain: NCHWC_DOMAIN.to_string(),
                op_type: String::new(),
                reason: e,
            }),
        }
    } else {
        for &n in &selected {
            let reason = "the model imports no default-domain opset".to_string();
            skip(report, path, g.node(n), reason);
        }
    }

    // Subgraphs (If/Loop/Scan bodies): same treatment, their own facts, seeded with the facts
    // of the values they read from this scope.
    let has_subgraphs = g.order.iter().any(|&n| {
        g.node(n)
            .attributes
            .iter()
            .any(|a| a.g.is_some() || !a.graphs.is_empty())
    });
    if !has_subgraphs {
        return;
    }
    let mut scope: HashMap<String, ValueFacts> = outer.cloned().unwrap_or_default();
    if let Some(opset) = opset {
        scope.extend(Facts::compute_in(g, opset, opts.nchwc_block_size, outer).by_name(g));
    }
    let nodes: Vec<NodeId> = g.order.clone();
    for n in nodes {
        let name = g.node(n).name().to_string();
        let node = g.node_mut(n);
        for a in node.attributes.iter_mut() {
            let sub_path = |attr: &str| {
                if path.is_empty() {
                    format!("{name}/{attr}")
                } else {
                    format!("{path}/{name}/{attr}")
                }
            };
            let an = a.name().to_string();
            if let Some(sg) = a.g.as_mut() {
                unfuse_graph(
                    sg,
                    opset,
                    opts,
                    filter,
                    &sub_path(&an),
                    Some(&scope),
                    report,
                );
            }
            for (i, sg) in a.graphs.iter_mut().enumerate() {
                let p = format!("{}[{i}]", sub_path(&an));
                unfuse_graph(sg, opset, opts, filter, &p, Some(&scope), report);
            }
        }
    }
}

/// Remove initializers that only removed nodes read (not graph inputs or outputs).
fn drop_dead_initializers(g: &mut Graph, candidates: &HashSet<ValueId>) -> usize {
    if candidates.is_empty() {
        return 0;
    }
    let mut live: HashSet<ValueId> = HashSet::new();
    for &n in &g.order {
        let nd = g.node(n);
        live.extend(nd.inputs.iter().flatten());
        live.extend(nd.implicit_inputs.iter());
    }
    live.extend(g.outputs.iter().map(|o| o.value));
    live.extend(g.inputs.iter().map(|i| i.value));
    let before = g.initializers.len();
    g.initializers
        .retain(|i| live.contains(&i.value) || !candidates.contains(&i.value));
    let removed = before - g.initializers.len();
    if removed > 0 {
        let gone: HashSet<ValueId> = candidates
            .iter()
            .copied()
            .filter(|v| !live.contains(v))
            .collect();
        g.value_info.retain(|vi| !gone.contains(&vi.value));
    }
    removed
}
