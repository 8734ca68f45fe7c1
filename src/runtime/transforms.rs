//! The graph transformations ONNX Runtime applies before it places nodes, as far as they change
//! which nodes there are to place.
//!
//! ONNX Runtime runs its level-1 ("basic") transformers before partitioning, for every
//! execution provider: `GenerateTransformers` in `onnxruntime/core/optimizer/
//! graph_transformer_utils.cc` (read at 001290de2e0ce8429d461156843f7ce9b19e7a5d) registers them
//! with an empty compatible-provider set at `TransformerLevel::Level1`, and the session repeats
//! the level until nothing changes. Level-2 and level-3 transformers run after partitioning on
//! nodes already assigned to a provider (each names its compatible providers: for WebGPU only
//! ConvActivationFusion and the QDQ selector/actions; for the CPU provider many fusions), so
//! they rename and merge nodes but do not move them between providers. onnxruntime-web and
//! desktop ONNX Runtime default to "all" (every level).
//!
//! Modelled here, with the matching conditions their source states:
//! - **ConstantFolding** (`onnxruntime/core/optimizer/constant_folding.cc`, read at
//!   ad694563b59c8a6a07c1e9bcca4875fae38f2e7e): a `Shape` node whose input shape is known on
//!   every axis becomes an initializer (its `start`/`end` applied); any other ONNX-domain node
//!   whose inputs are all constant initializers (not graph inputs) is computed on the CPU and
//!   replaced by initializers, unless it is non-deterministic (the random ops), holds a subgraph,
//!   or is a `DequantizeLinear` (kept to preserve QDQ node units unless a DQ -> X -> Q unit folds
//!   whole); the producers left without readers are removed with it
//!   (`RemoveNodesWithOneOutputBottomUp`).
//! - **ReshapeFusion** (`onnxruntime/core/optimizer/reshape_fusion.cc`, `Fuse_Subgraph`: the
//!   stored copy that has `Match_One_Element_Output_Subgraph_1/2`): a `Reshape` (5, 13, 14) whose
//!   shape comes from a `Concat` (1, 4, 11, 13) read by it alone, every input of which is a
//!   constant initializer, a `Shape -> Gather -> Unsqueeze(axes=0)` path of the Reshape's data
//!   input at that position (0: copy the dim), or a one-element value (a shape known to hold one
//!   element; -1) computed by nodes that each have one output edge (the comment on
//!   `Fuse_Subgraph`: "a custom subgraph in which nodes have only one output edge"; measured:
//!   PP-OCRv4 rec's shared `Slice` of a `Shape` is not fused by onnxruntime-web 1.30), with at
//!   most one -1 in all: the Concat becomes an initializer and its producer chains are removed.
//!
//! Fusions that rebuild what a decomposition removed (level 1: GeluFusionL1, LayerNormFusionL1;
//! level 2: LayerNorm/SkipLayerNorm/Gelu/BiasGelu/QuickGelu/FastGelu/Attention fusions,
//! MatMulScale/MatmulTranspose -> FusedMatMul, MatMulIntegerToFloat, the QDQ selectors -> QLinear*
//! ops, ...) do not change placement but undo a target's `unfuse` rewrites: [`REBUILDS`] names
//! them, [`transformers`] (`runtimes/capability/transformers.tsv`, generated from
//! `GenerateTransformers`) says which providers each runs on, and
//! [`Session::rebuilders_left`] which still run under a target's settings (the compile summary
//! warns; rx580 disables them, tests/refusion.rs has ONNX Runtime confirm it).
//!
//! Not modelled (they rename or merge nodes that stay on the side they were on, or do not
//! occur in the measured corpus): the rule-based eliminations (Identity, Dropout, Slice,
//! Unsqueeze, Cast, Expand, no-op), CSE (which merges identical nodes: PP-OCRv4 rec's two
//! `Shape`s of one value become one with two readers, so ReshapeFusion's removal keeps it where
//! the prediction removes it), LayerNorm/Gelu/MatMulAdd fusions, QDQ propagation,
//! the transpose optimizer, and every level-2/3 fusion. A node they remove may still be
//! predicted; `tools/placement_check.py` counts a predicted node that the runtime's log does
//! not name as renamed or removed, not as agreement.

use std::collections::{HashMap, HashSet};

use crate::infer::Facts;
use crate::ir::{Graph, Model, NodeId, Origin, ValueId};

/// ONNX Runtime's graph optimisation level (`GraphOptimizationLevel`; onnxruntime-web's
/// `graphOptimizationLevel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Level {
    Disabled,
    Basic,
    Extended,
    /// The default of ONNX Runtime and onnxruntime-web.
    #[default]
    All,
}

impl Level {
    /// `disabled`, `basic`, `extended` or `all` (what onnxruntime-web and `verify --opt` take).
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "disabled" | "disable" => Some(Level::Disabled),
            "basic" => Some(Level::Basic),
            "extended" => Some(Level::Extended),
            "all" => Some(Level::All),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Level::Disabled => "disabled",
            Level::Basic => "basic",
            Level::Extended => "extended",
            Level::All => "all",
        }
    }
}

/// The session a prediction assumes: the optimisation level and the transformers the session
/// disables (`optimization.disable_specified_optimizers`: names separated by `;`, each compared
/// whole with a transformer's or rewrite rule's name; InferenceSession's constructor splits the
/// value with `SplitString(disabled_string, ";")` and trims nothing, so a comma-separated list,
/// as the key's header comment suggests, disables nothing: measured on ONNX Runtime 1.32 CPU).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Session {
    pub level: Level,
    pub disabled: Vec<String>,
}

/// ONNX Runtime's session config key that names transformers not to run
/// (`kOrtSessionOptionsDisableSpecifiedOptimizers`, onnxruntime_session_options_config_keys.h).
pub const DISABLE_OPTIMIZERS_KEY: &str = "optimization.disable_specified_optimizers";

impl Session {
    /// At `level`, with the transformers a target's runtime settings disable.
    pub fn for_target(target: &crate::rules::schema::Target, level: Level) -> Session {
        let disabled = target
            .runtime
            .iter()
            .filter(|s| s.key == DISABLE_OPTIMIZERS_KEY)
            .flat_map(|s| s.value.split(';').map(str::to_string))
            .filter(|x| !x.is_empty())
            .collect();
        Session { level, disabled }
    }
    fn runs(&self, transformer: &str, level: Level) -> bool {
        self.level >= level && !self.disabled.iter().any(|d| d == transformer)
    }

    /// The fusions of [`REBUILDS`] that this session still runs on `provider`'s nodes (ONNX
    /// Runtime's name, `DmlExecutionProvider`) and that build one of `ops` (op types a
    /// decomposition removed), with the ops each would rebuild.
    pub fn rebuilders_left(
        &self,
        provider: &str,
        ops: &[&str],
    ) -> Vec<(&'static str, Vec<&'static str>)> {
        let table = transformers();
        let mut out = Vec::new();
        for r in REBUILDS {
            let builds: Vec<&'static str> = r
                .builds
                .iter()
                .copied()
                .filter(|b| ops.contains(b))
                .collect();
            if builds.is_empty() {
                continue;
            }
            let runs = table.iter().any(|t| {
                t.name == r.transformer
                    && t.kind == "transformer"
                    && t.runs_on(provider)
                    && self.runs(&t.name, t.level)
            });
            if runs {
                out.push((r.transformer, builds));
            }
        }
        out
    }
}

/// One row of `runtimes/capability/transformers.tsv` (generated by
/// `tools/capability/transformers.py` from `GenerateTransformers` in ONNX Runtime's
/// `graph_transformer_utils.cc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformerRow {
    /// What `optimization.disable_specified_optimizers` matches.
    pub name: String,
    /// `transformer`, `rule` (of a level's rule-based transformer) or `selector` (one rule of
    /// QDQSelectorActionTransformer, disabled only with it).
    pub kind: String,
    pub level: Level,
    /// Compatible execution providers; empty = every provider.
    pub providers: Vec<String>,
    pub class: String,
    pub part: String,
    pub condition: String,
}

impl TransformerRow {
    /// Whether the transformer touches nodes assigned to `provider`.
    pub fn runs_on(&self, provider: &str) -> bool {
        self.providers.is_empty() || self.providers.iter().any(|p| p == provider)
    }
}

const TRANSFORMERS_TSV: &str = include_str!("../../runtimes/capability/transformers.tsv");

/// ONNX Runtime's graph transformers, by level, with their compatible providers.
pub fn transformers() -> &'static [TransformerRow] {
    static T: std::sync::OnceLock<Vec<TransformerRow>> = std::sync::OnceLock::new();
    T.get_or_init(|| parse_transformers(TRANSFORMERS_TSV))
}

fn parse_transformers(text: &str) -> Vec<TransformerRow> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.starts_with("name\t") || line.is_empty() {
            continue;
        }
        let c: Vec<&str> = line.split('\t').collect();
        if c.len() < 7 {
            continue;
        }
        let level = match c[2] {
            "1" => Level::Basic,
            "2" => Level::Extended,
            _ => Level::All,
        };
        let providers = if c[3] == "*" {
            Vec::new()
        } else {
            c[3].split(',').map(str::to_string).collect()
        };
        out.push(TransformerRow {
            name: c[0].to_string(),
            kind: c[1].to_string(),
            level,
            providers,
            class: c[4].to_string(),
            part: c[5].to_string(),
            condition: c[6].to_string(),
        });
    }
    out
}

/// A fusion of ONNX Runtime that builds an op the decompositions (`unfuse`) remove.
#[derive(Debug, Clone, Copy)]
pub struct Rebuild {
    /// The transformer's name (a row of [`transformers`]).
    pub transformer: &'static str,
    /// The op types it builds (com.microsoft, or the ONNX-domain Gelu/LayerNormalization).
    pub builds: &'static [&'static str],
}

/// The fusions that rebuild what `unfuse` decomposes, and the op each builds. Measured with
/// `tools/refusion_check.py --attribute` on ONNX Runtime 1.32 CPU for GeluFusionL1/L2,
/// LayerNormFusionL2, SkipLayerNormFusion, QuickGeluFusion, MatMulScaleFusion,
/// MatmulTransposeFusion, MatMulIntegerToFloatFusion and the QDQ selectors (docs/targets.md,
/// "What the runtime fuses back"); the op `graph.AddNode` writes read in the source for
/// MatMulActivationFusion (FusedMatMul + Softmax -> FusedMatMulActivation) and
/// SkipLayerNormFusion; the others (Attention, EmbedLayerNorm, FastGelu, BiasSkipLayerNorm,
/// DQMatMulNBits, the CPU-only ones) by their names, not exercised by the corpus. The providers
/// each runs on come from the table, not from here.
pub const REBUILDS: &[Rebuild] = &[
    Rebuild {
        transformer: "GeluFusionL1",
        builds: &["Gelu"],
    },
    Rebuild {
        transformer: "LayerNormFusionL1",
        builds: &["LayerNormalization"],
    },
    Rebuild {
        transformer: "DQMatMulNBitsFusion",
        builds: &["MatMulNBits"],
    },
    Rebuild {
        transformer: "QDQSelectorActionTransformer",
        builds: &[
            "QLinearAdd",
            "QLinearMul",
            "QLinearSigmoid",
            "QLinearLeakyRelu",
            "QLinearSoftmax",
            "QLinearAveragePool",
            "QLinearGlobalAveragePool",
            "QLinearConcat",
            "QGemm",
            "MatMulIntegerToFloat",
            "MatMulNBits",
        ],
    },
    Rebuild {
        transformer: "MatMulIntegerToFloatFusion",
        builds: &["MatMulIntegerToFloat"],
    },
    Rebuild {
        transformer: "DynamicQuantizeMatMulFusion",
        builds: &["DynamicQuantizeMatMul"],
    },
    Rebuild {
        transformer: "ConvActivationFusion",
        builds: &["FusedConv"],
    },
    Rebuild {
        transformer: "GemmActivationFusion",
        builds: &["FusedGemm"],
    },
    Rebuild {
        transformer: "GeluFusionL2",
        builds: &["Gelu"],
    },
    Rebuild {
        transformer: "LayerNormFusionL2",
        builds: &["LayerNormalization"],
    },
    Rebuild {
        transformer: "SimplifiedLayerNormFusion",
        builds: &["SimplifiedLayerNormalization"],
    },
    Rebuild {
        transformer: "AttentionFusion",
        builds: &["Attention"],
    },
    Rebuild {
        transformer: "EmbedLayerNormFusion",
        builds: &["EmbedLayerNormalization"],
    },
    Rebuild {
        transformer: "MatmulTransposeFusion",
        builds: &["FusedMatMul"],
    },
    Rebuild {
        transformer: "BiasGeluFusion",
        builds: &["BiasGelu"],
    },
    Rebuild {
        transformer: "SkipLayerNormFusion",
        builds: &["SkipLayerNormalization"],
    },
    Rebuild {
        transformer: "BiasSkipLayerNormFusion",
        builds: &["SkipLayerNormalization"],
    },
    Rebuild {
        transformer: "FastGeluFusion",
        builds: &["FastGelu"],
    },
    Rebuild {
        transformer: "QuickGeluFusion",
        builds: &["QuickGelu"],
    },
    Rebuild {
        transformer: "MatMulScaleFusion",
        builds: &["FusedMatMul"],
    },
    Rebuild {
        transformer: "MatMulActivationFusion",
        builds: &["FusedMatMulActivation"],
    },
    Rebuild {
        transformer: "BiasSoftmaxFusion",
        builds: &["BiasSoftmax"],
    },
    Rebuild {
        transformer: "MatMulNBitsFusion",
        builds: &["MatMulNBits"],
    },
    Rebuild {
        transformer: "GroupQueryAttentionFusion",
        builds: &["GroupQueryAttention"],
    },
];

/// What a transformer did to a node before placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Computed at load and replaced by initializers (ConstantFolding).
    Folded,
    /// Removed by a transformer (named): a fusion replaced what it computed, or nothing reads it
    /// any more.
    Removed(&'static str),
}

/// The outcome of the transformations on one graph.
#[derive(Debug, Clone, Default)]
pub struct Transformed {
    fates: HashMap<NodeId, Fate>,
    /// Values that became initializers, with their element count when known.
    constants: HashMap<ValueId, Option<u64>>,
}

impl Transformed {
    pub fn fate(&self, n: NodeId) -> Option<&Fate> {
        self.fates.get(&n)
    }
    /// Whether the transformations made `v` an initializer; `Some(count)` with its element
    /// count when that is known.
    pub fn new_initializer(&self, v: ValueId) -> Option<Option<u64>> {
        self.constants.get(&v).copied()
    }
    pub fn is_empty(&self) -> bool {
        self.fates.is_empty()
    }
}

const NON_DETERMINISTIC: [&str; 5] = [
    "RandomUniform",
    "RandomNormal",
    "RandomUniformLike",
    "RandomNormalLike",
    "Multinomial",
];

struct State<'a> {
    g: &'a Graph,
    /// The model's ONNX-domain opset.
    model_opset: i64,
    facts: &'a Facts,
    consumers: crate::ir::Consumers,
    graph_outputs: HashSet<ValueId>,
    out: Transformed,
}

impl State<'_> {
    fn gone(&self, n: NodeId) -> bool {
        self.out.fates.contains_key(&n)
    }
    /// A constant initializer as ONNX Runtime sees it: an initializer that is not a graph input,
    /// a `Constant` node's output (ONNX Runtime turns those into initializers at load), or a
    /// value a transformation made constant.
    fn is_const(&self, v: ValueId) -> bool {
        if self.out.constants.contains_key(&v) {
            return true;
        }
        match self.g.value(v).origin {
            Origin::Initializer => true,
            Origin::Node { node, .. } => {
                let p = self.g.node(node);
                p.op_type == "Constant" && p.domain().is_empty()
            }
            _ => false,
        }
    }
    fn producer(&self, v: ValueId) -> Option<NodeId> {
        match self.g.value(v).origin {
            Origin::Node { node, .. } if !self.gone(node) => Some(node),
            _ => None,
        }
    }
    /// Live readers of `v` (node, slot), subgraph reads included.
    fn readers(&self, v: ValueId) -> Vec<(NodeId, u32)> {
        self.consumers
            .of(v)
            .iter()
            .copied()
            .filter(|&(c, _)| !self.gone(c))
            .collect()
    }
    fn numel(&self, v: ValueId) -> Option<u64> {
        self.facts.info(v).numel()
    }
    fn make_const(&mut self, v: ValueId) {
        let n = self.numel(v);
        self.out.constants.insert(v, n);
    }
    /// Removes `start` when nothing live reads its outputs and none is a graph output, then its
    /// producers the same way (ONNX Runtime's `RemoveNodesWithOneOutputBottomUp` after a fold
    /// or a fusion).
    fn remove_unread_upwards(&mut self, start: NodeId, by: &'static str) {
        let mut stack = vec![start];
        while let Some(n) = stack.pop() {
            if self.gone(n) {
                continue;
            }
            let node = self.g.node(n);
            let read = node
                .outputs
                .iter()
                .flatten()
                .any(|&v| self.graph_outputs.contains(&v) || !self.readers(v).is_empty());
            if read {
                continue;
            }
            self.out.fates.insert(n, Fate::Removed(by));
            for v in node.inputs.iter().flatten().chain(node.implicit_inputs()) {
                if let Some(p) = self.producer(*v) {
                    stack.push(p);
                }
            }
        }
    }
}

/// Applies the modelled transformers to `g` as a session at `session` would before placing it.
/// `facts` are the shapes ONNX Runtime knows: inferred from the file alone, with no size
/// assumed for a symbolic dimension.
pub fn apply(
    model: &Model,
    g: &Graph,
    facts: &Facts,
    cpu: &super::capability::Capability,
    session: &Session,
) -> Transformed {
    let mut st = State {
        g,
        model_opset: model.opset("").unwrap_or(1),
        facts,
        consumers: g.consumers(),
        graph_outputs: g.outputs.iter().map(|o| o.value).collect(),
        out: Transformed::default(),
    };
    if session.level < Level::Basic {
        return st.out;
    }
    let fold = session.runs("ConstantFolding", Level::Basic);
    let reshape = session.runs("ReshapeFusion", Level::Basic);
    // The level-1 loop: repeated while something changes (ONNX Runtime stops after
    // `max_num_graph_transformation_steps`, 10 by default).
    for _ in 0..10 {
        let mut changed = false;
        if fold {
            changed |= constant_folding(&mut st, cpu);
        }
        if reshape {
            changed |= reshape_fusion(&mut st);
        }
        if !changed {
            break;
        }
    }
    st.out
}

fn constant_folding(st: &mut State<'_>, cpu: &super::capability::Capability) -> bool {
    let schemas = super::capability::Schemas::builtin();
    let mut changed = false;
    for &n in &st.g.order {
        if st.gone(n) {
            continue;
        }
        let node = st.g.node(n);
        if node.op_type == "Constant" && node.domain().is_empty() {
            continue;
        }
        let folds = if node.op_type == "Shape" && node.domain().is_empty() {
            node.inputs
                .first()
                .copied()
                .flatten()
                .and_then(|v| st.facts.shape(v))
                .is_some_and(|s| s.iter().all(|d| d.is_known()))
        } else {
            // Only ONNX-domain nodes: before partitioning no node is on the CPU provider.
            node.domain().is_empty()
                && !NON_DETERMINISTIC.contains(&node.op_type.as_str())
                && !node.attributes.iter().any(|a| a.has_graph())
                && !node.inputs.is_empty()
                && node.inputs.iter().flatten().all(|&v| st.is_const(v))
                && node.implicit_inputs().is_empty()
                && (node.op_type != "DequantizeLinear" || dq_unit_folds(st, n))
                && {
                    // The CPU kernel computes it; without one the node stays.
                    let opset = st.model_opset;
                    let ins: Vec<Option<i32>> = node
                        .inputs
                        .iter()
                        .map(|v| v.and_then(|v| st.facts.dtype(v)))
                        .collect();
                    let outs: Vec<Option<i32>> = node
                        .outputs
                        .iter()
                        .map(|v| v.and_then(|v| st.facts.dtype(v)))
                        .collect();
                    schemas
                        .since("", &node.op_type, opset)
                        .is_some_and(|since| {
                            matches!(
                                cpu.lookup("", &node.op_type, since, &ins, &outs),
                                super::capability::Lookup::Kernel(_)
                            )
                        })
                }
        };
        if !folds {
            continue;
        }
        let outs: Vec<ValueId> = node.outputs.iter().flatten().copied().collect();
        let ins: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
        for v in outs {
            st.make_const(v);
        }
        st.out.fates.insert(n, Fate::Folded);
        for v in ins {
            if let Some(p) = st.producer(v) {
                st.remove_unread_upwards(p, "ConstantFolding");
            }
        }
        changed = true;
    }
    changed
}

/// A DequantizeLinear folds only with its whole unit: read by one node X alone (and not a
/// graph output), X having one input and one output read only by a QuantizeLinear, X and the
/// QuantizeLinear themselves foldable.
fn dq_unit_folds(st: &State<'_>, dq: NodeId) -> bool {
    let one_reader = |n: NodeId| -> Option<NodeId> {
        let node = st.g.node(n);
        if node.outputs.len() != 1 {
            return None;
        }
        let v = node.outputs[0]?;
        if st.graph_outputs.contains(&v) {
            return None;
        }
        match st.readers(v).as_slice() {
            [(c, _)] => Some(*c),
            _ => None,
        }
    };
    let Some(x) = one_reader(dq) else {
        return false;
    };
    let xn = st.g.node(x);
    if xn.inputs.len() != 1 || xn.outputs.len() != 1 || !xn.domain().is_empty() {
        return false;
    }
    let Some(q) = one_reader(x) else {
        return false;
    };
    let qn = st.g.node(q);
    qn.op_type == "QuantizeLinear"
        && !NON_DETERMINISTIC.contains(&xn.op_type.as_str())
        && !xn.attributes.iter().any(|a| a.has_graph())
}

fn since_in(model_opset: i64, op: &str, versions: &[i64]) -> bool {
    super::capability::Schemas::builtin()
        .since("", op, model_opset)
        .is_some_and(|s| versions.contains(&s))
}

fn reshape_fusion(st: &mut State<'_>) -> bool {
    let mut changed = false;
    for &n in &st.g.order.clone() {
        if st.gone(n) {
            continue;
        }
        let node = st.g.node(n);
        if node.op_type != "Reshape" || !node.domain().is_empty() {
            continue;
        }
        let opset = st.model_opset;
        if !since_in(opset, "Reshape", &[5, 13, 14]) {
            continue;
        }
        let (Some(Some(root)), Some(Some(shape_in))) =
            (node.inputs.first().copied(), node.inputs.get(1).copied())
        else {
            continue;
        };
        let Some(concat) = st.producer(shape_in) else {
            continue;
        };
        let cn = st.g.node(concat);
        if cn.op_type != "Concat"
            || !cn.domain().is_empty()
            || !since_in(opset, "Concat", &[1, 4, 11, 13])
        {
            continue;
        }
        // The Concat's output is read by this Reshape alone.
        if st.graph_outputs.contains(&shape_in) || st.readers(shape_in).len() != 1 {
            continue;
        }
        let mut minus_ones = 0usize;
        let mut ok = true;
        for (i, input) in cn.inputs.iter().enumerate() {
            let Some(v) = *input else {
                ok = false;
                break;
            };
            if st.is_const(v) {
                // A constant initializer: its values are appended (a -1 among them counts).
                match st.facts.const_ints(v) {
                    Some(vals) => minus_ones += vals.iter().filter(|&&x| x == -1).count(),
                    None => {
                        ok = false;
                        break;
                    }
                }
                continue;
            }
            if shape_gather_path(st, v, root, i) {
                continue;
            }
            if (st.numel(v) == Some(1) || one_element_subgraph(st, v, root))
                && single_edge_subgraph(st, v)
            {
                minus_ones += 1;
                continue;
            }
            ok = false;
            break;
        }
        if !ok || minus_ones > 1 {
            continue;
        }
        let ins: Vec<ValueId> = cn.inputs.iter().flatten().copied().collect();
        st.make_const(shape_in);
        st.out.fates.insert(concat, Fate::Removed("ReshapeFusion"));
        for v in ins {
            if let Some(p) = st.producer(v) {
                st.remove_unread_upwards(p, "ReshapeFusion");
            }
        }
        changed = true;
    }
    changed
}

/// The subgraph computing a one-element Concat input is fused away only when each of its nodes
/// has one output edge ("a custom subgraph in which nodes have only one output edge", the
/// comment on `Fuse_Subgraph`): from `v`'s producer up to the `Shape` it starts from, through
/// non-constant inputs.
fn single_edge_subgraph(st: &State<'_>, v: ValueId) -> bool {
    let mut stack: Vec<NodeId> = st.producer(v).into_iter().collect();
    let mut seen = HashSet::new();
    while let Some(n) = stack.pop() {
        if !seen.insert(n) || seen.len() > 32 {
            return seen.len() <= 32;
        }
        let node = st.g.node(n);
        let edges: usize = node
            .outputs
            .iter()
            .flatten()
            .map(|&o| st.readers(o).len() + usize::from(st.graph_outputs.contains(&o)))
            .sum();
        if edges != 1 {
            return false;
        }
        if node.op_type == "Shape" {
            continue;
        }
        for &i in node.inputs.iter().flatten() {
            if !st.is_const(i) {
                if let Some(p) = st.producer(i) {
                    stack.push(p);
                }
            }
        }
    }
    true
}

/// `v` = Unsqueeze(axes=[0]) of Gather(Shape(root'), index) with index == `position`, where
/// root' is the Reshape's data input (ONNX Runtime also accepts a Shape of a value of the same
/// known shape; not modelled).
fn shape_gather_path(st: &State<'_>, v: ValueId, root: ValueId, position: usize) -> bool {
    let Some(u) = st.producer(v) else {
        return false;
    };
    let un = st.g.node(u);
    if un.op_type != "Unsqueeze" || !unsqueeze_axes_zero(st, u) {
        return false;
    }
    let Some(Some(gv)) = un.inputs.first().copied() else {
        return false;
    };
    let Some(ga) = st.producer(gv) else {
        return false;
    };
    let gn = st.g.node(ga);
    if gn.op_type != "Gather" {
        return false;
    }
    let idx_ok = gn
        .inputs
        .get(1)
        .copied()
        .flatten()
        .filter(|&i| st.is_const(i))
        .and_then(|i| st.facts.const_ints(i))
        .is_some_and(|x| x.len() == 1 && x[0] == position as i64);
    let Some(Some(sv)) = gn.inputs.first().copied() else {
        return false;
    };
    let Some(sh) = st.producer(sv) else {
        return false;
    };
    let shn = st.g.node(sh);
    idx_ok && shn.op_type == "Shape" && shn.inputs.first().copied().flatten() == Some(root)
}

fn unsqueeze_axes_zero(st: &State<'_>, u: NodeId) -> bool {
    let un = st.g.node(u);
    if let Some(a) = un.attr("axes") {
        return a.ints() == [0];
    }
    un.inputs
        .get(1)
        .copied()
        .flatten()
        .filter(|&a| st.is_const(a))
        .and_then(|a| st.facts.const_ints(a))
        .is_some_and(|x| x == [0])
}

/// `Is_One_Element_Output_Subgraph`'s other forms: Unsqueeze(axes=0) of a one-element value, of
/// Shape(root) -> Slice (one element) -> Squeeze, or of a Div/Mul whose inputs are each one of
/// those.
fn one_element_subgraph(st: &State<'_>, v: ValueId, root: ValueId) -> bool {
    let Some(u) = st.producer(v) else {
        return false;
    };
    let un = st.g.node(u);
    if un.op_type != "Unsqueeze" || !unsqueeze_axes_zero(st, u) {
        return false;
    }
    let Some(Some(x)) = un.inputs.first().copied() else {
        return false;
    };
    let one = |x: ValueId| st.numel(x) == Some(1) || slice_of_shape(st, x, root);
    if one(x) {
        return true;
    }
    match st.producer(x) {
        Some(b) if matches!(st.g.node(b).op_type.as_str(), "Div" | "Mul") => {
            st.g.node(b).inputs.iter().all(|i| i.is_some_and(one))
        }
        _ => false,
    }
}

/// `x` = Squeeze(Slice(Shape(root)) of one element).
fn slice_of_shape(st: &State<'_>, x: ValueId, root: ValueId) -> bool {
    let Some(sq) = st.producer(x) else {
        return false;
    };
    if st.g.node(sq).op_type != "Squeeze" {
        return false;
    }
    let Some(Some(sv)) = st.g.node(sq).inputs.first().copied() else {
        return false;
    };
    let Some(sl) = st.producer(sv) else {
        return false;
    };
    let sln = st.g.node(sl);
    if sln.op_type != "Slice" {
        return false;
    }
    let Some(Some(shv)) = sln.inputs.first().copied() else {
        return false;
    };
    let Some(sh) = st.producer(shv) else {
        return false;
    };
    if st.g.node(sh).op_type != "Shape"
        || st.g.node(sh).inputs.first().copied().flatten() != Some(root)
    {
        return false;
    }
    let ints = |i: usize| -> Option<Vec<i64>> {
        if let Some(a) = sln.attr(if i == 1 { "starts" } else { "ends" }) {
            return Some(a.ints().to_vec());
        }
        sln.inputs
            .get(i)
            .copied()
            .flatten()
            .and_then(|v| st.facts.const_ints(v))
            .map(<[i64]>::to_vec)
    };
    match (ints(1), ints(2)) {
        (Some(s), Some(e)) if s.len() == 1 && e.len() == 1 => {
            (e[0] >= i32::MAX as i64 && s[0] == -1) || (e[0] - s[0]).abs() == 1
        }
        _ => false,
    }
}
