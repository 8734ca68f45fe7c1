//! The cost of safety: how much of a model's work a target's rewrites leave on the GPU, in how
//! many pieces, and what moves between the CPU and the GPU per inference.
//!
//! One analysis over a graph and its facts at the sizes a compile assumes ([`Sizes`]):
//! - where a node runs is the runtime's prediction when the target names its execution
//!   provider (`provider:`; [`crate::runtime::placement`]: kernels by op, since-version and
//!   type, ONNX Runtime's CPU preference for shape computations, and the pins); for a target
//!   that names none, a node is on the CPU when it carries `layer_ann` metadata equal to the
//!   compile's annotation ([`LAYER_ANN_KEY`]) and on the GPU otherwise. `Constant` nodes are
//!   neither: ONNX Runtime turns them into initializers before it places nodes;
//! - *heavy ops* ([`is_heavy`]): the ops that hold a model's arithmetic (convolutions, matrix
//!   products, recurrent and attention ops, and their fused and quantized forms), counted in
//!   the main graph and in every body at any depth;
//! - *GPU pieces*: connected regions of GPU nodes (two GPU nodes are connected when one reads a
//!   value the other computes), in every graph; each piece is a separate run on the GPU. Under
//!   DirectML, the main graph's pieces are its submissions instead
//!   ([`crate::runtime::submission`]: a CPU node reading a GPU value ends the command list, so
//!   one barrier makes two pieces even where other values stay on the GPU between them);
//! - *crossings*: values computed on one side and read on the other (a GPU value read by CPU
//!   nodes, or a CPU value read by GPU nodes), counted once per value and direction, as a
//!   runtime copies them; graph inputs and initializers are not crossings. Their bytes per
//!   inference are element count at the assumed sizes times element size; a crossing whose
//!   size is unknown there is counted as unknown, never guessed. Crossings inside bodies
//!   (which may run any number of times per inference) are all of unknown size.
//!
//! A model not compiled yet (the input of a compile) is measured the same way: its nodes that
//! already carry the annotation are on the CPU, the rest on the GPU.

use crate::analysis::Sizes;
use crate::infer::Facts;
use crate::ir::{Graph, Model, NodeId, Origin, ValueId};
use crate::rewrite::cpu::LAYER_ANN_KEY;

/// The figures of one model (or one graph).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Heavy ops on the GPU.
    pub heavy_gpu: usize,
    /// Heavy ops on the CPU.
    pub heavy_cpu: usize,
    /// Connected regions of GPU nodes.
    pub pieces: usize,
    /// Values that cross between the CPU and the GPU (once per value and direction).
    pub crossings: usize,
    /// Bytes of the crossings whose size is known at the assumed sizes, per inference.
    pub crossing_bytes: u64,
    /// Crossings whose size is unknown at the assumed sizes (not in `crossing_bytes`).
    pub crossings_unknown: usize,
}

impl Cost {
    /// Every heavy op.
    pub fn heavy(&self) -> usize {
        self.heavy_gpu + self.heavy_cpu
    }
    /// The share of heavy ops on the GPU, in percent (None without heavy ops).
    pub fn gpu_percent(&self) -> Option<f64> {
        let all = self.heavy();
        (all > 0).then(|| 100.0 * self.heavy_gpu as f64 / all as f64)
    }
    /// Add another graph's figures (a body's).
    pub fn add(&mut self, o: &Cost) {
        self.heavy_gpu += o.heavy_gpu;
        self.heavy_cpu += o.heavy_cpu;
        self.pieces += o.pieces;
        self.crossings += o.crossings;
        self.crossing_bytes = self.crossing_bytes.saturating_add(o.crossing_bytes);
        self.crossings_unknown += o.crossings_unknown;
    }
    /// The figures as JSON (the report's `cost.input` / `cost.output`, `check`'s `cost`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "heavy_ops_gpu": self.heavy_gpu,
            "heavy_ops_cpu": self.heavy_cpu,
            "heavy_ops_gpu_percent": self.gpu_percent(),
            "gpu_pieces": self.pieces,
            "crossings": self.crossings,
            "crossing_bytes": self.crossing_bytes,
            "crossings_unknown_size": self.crossings_unknown,
        })
    }
}

/// A compile's figures: the input model's and the output's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CostOfSafety {
    pub before: Cost,
    pub after: Cost,
}

/// Ops that hold a model's arithmetic, by op type in any domain (`com.microsoft.nchwc`'s
/// `Conv` is a `Conv`). Any op whose type ends in `Attention` counts too.
pub const HEAVY_OPS: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "MatMul",
    "Gemm",
    "ConvInteger",
    "MatMulInteger",
    "QLinearConv",
    "QLinearMatMul",
    "LSTM",
    "GRU",
    "RNN",
    "MatMulNBits",
    "FusedConv",
    "FusedGemm",
    "FusedMatMul",
    "TransposeMatMul",
    "NhwcConv",
    "QGemm",
    "DynamicQuantizeMatMul",
    "MatMulIntegerToFloat",
    "DynamicQuantizeLSTM",
    "GemmFastGelu",
    "Einsum",
];

/// Is this op one of the heavy ones ([`HEAVY_OPS`], or an attention op)?
pub fn is_heavy(op_type: &str) -> bool {
    HEAVY_OPS.contains(&op_type) || op_type.ends_with("Attention")
}

fn is_constant_node(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    node.op_type == "Constant" && node.domain().is_empty()
}

/// Where a node runs, for these figures: the runtime's placement ([`crate::runtime::placement`]).
pub use crate::runtime::placement::Side;
use crate::runtime::Profile;

/// One graph's figures, its crossings still to be sized (the graph only, not its bodies).
pub struct GraphCost {
    pub cost: Cost,
    /// The values that cross (once per value and direction), to be sized with facts.
    crossing: Vec<ValueId>,
}

impl GraphCost {
    /// Whether sizing the crossings needs facts (some value crosses).
    pub fn needs_facts(&self) -> bool {
        !self.crossing.is_empty()
    }
    /// The figures with the crossings sized by `facts` (the graph's, at the assumed sizes).
    pub fn with_sizes(mut self, facts: &Facts) -> Cost {
        for &v in &self.crossing {
            let info = facts.info(v);
            let bytes = info
                .dtype
                .zip(info.numel())
                .and_then(|(t, n)| crate::tensor::raw_size(t, n));
            match bytes {
                Some(b) => self.cost.crossing_bytes = self.cost.crossing_bytes.saturating_add(b),
                None => self.cost.crossings_unknown += 1,
            }
        }
        self.cost
    }
    /// The figures with every crossing of unknown size.
    pub fn without_sizes(mut self) -> Cost {
        self.cost.crossings_unknown += self.crossing.len();
        self.cost
    }
}

/// The figures of `g` alone (not its bodies), nodes on the CPU when annotated `annotation`
/// and on the GPU otherwise (a target that names no provider).
pub fn of_graph(g: &Graph, annotation: &str) -> GraphCost {
    of_graph_placed(g, &|n| {
        if is_constant_node(g, n) {
            Side::None
        } else if g.node(n).metadata(LAYER_ANN_KEY) == Some(annotation) {
            Side::Cpu
        } else {
            Side::Gpu
        }
    })
}

/// The figures of `g` alone where the runtime of `profile` will place each node.
pub fn of_graph_predicted(
    model: &Model,
    g: &Graph,
    facts: &Facts,
    profile: &Profile,
    annotation: &str,
) -> GraphCost {
    let p = crate::runtime::placement::predict_graph(model, g, facts, profile, annotation);
    let mut c = of_graph_placed(g, &|n| p.side(n));
    if profile.name == "directml" {
        // DirectML's submissions, not connected regions: a CPU node reading a GPU value ends
        // the command list, and the GPU nodes after it go into a new one even where they read
        // values that stayed on the GPU (`crate::runtime::submission`).
        let on_gpu = |n: NodeId| p.side(n) == Side::Gpu;
        if let Ok(parts) = crate::rewrite::barrier::submissions_of(g, facts, &on_gpu) {
            let mut roots: Vec<usize> = parts.iter().flatten().copied().collect();
            roots.sort_unstable();
            roots.dedup();
            c.cost.pieces = roots.len();
        }
    }
    c
}

/// The figures of `g` alone with nodes placed by `place`.
pub fn of_graph_placed(g: &Graph, place: &dyn Fn(NodeId) -> Side) -> GraphCost {
    let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
    let mut side = vec![Side::None; bound];
    let mut cost = Cost::default();
    for &n in &g.order {
        let s = place(n);
        side[n.index()] = s;
        if is_heavy(&g.node(n).op_type) {
            match s {
                Side::Cpu => cost.heavy_cpu += 1,
                _ => cost.heavy_gpu += 1,
            }
        }
    }
    let side_of = |n: NodeId| side.get(n.index()).copied().unwrap_or(Side::None);
    // Connected GPU regions: a union of each GPU reader with the GPU producer it reads.
    let mut parent: Vec<usize> = (0..bound).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let consumers = g.consumers();
    let mut crossing = Vec::new();
    for (vi, value) in g.values.iter().enumerate() {
        let Origin::Node { node: p, .. } = value.origin else {
            continue;
        };
        if !g.nodes.contains_node(p) {
            continue;
        }
        let ps = side_of(p);
        if ps == Side::None {
            continue;
        }
        let v = ValueId(vi as u32);
        let (mut to_cpu, mut to_gpu) = (false, false);
        for &(c, _) in consumers.of(v) {
            match (ps, side_of(c)) {
                (Side::Gpu, Side::Gpu) => {
                    let (a, b) = (root(&mut parent, p.index()), root(&mut parent, c.index()));
                    if a != b {
                        parent[a] = b;
                    }
                }
                (Side::Gpu, Side::Cpu) => to_cpu = true,
                (Side::Cpu, Side::Gpu) => to_gpu = true,
                _ => {}
            }
        }
        if to_cpu || to_gpu {
            crossing.push(v);
        }
    }
    cost.crossings = crossing.len();
    cost.pieces = g
        .order
        .iter()
        .filter(|&&n| side_of(n) == Side::Gpu && root(&mut parent, n.index()) == n.index())
        .count();
    GraphCost { cost, crossing }
}

/// The figures of every body of `g` at any depth (their crossings of unknown size); placed by
/// `profile`'s runtime when given (element types as the bodies declare them).
pub fn of_bodies(model: &Model, g: &Graph, annotation: &str, profile: Option<&Profile>) -> Cost {
    let mut cost = Cost::default();
    for sg in crate::ir::scope::graphs(g) {
        if !sg.path.is_root() {
            let c = match profile {
                Some(p) => {
                    let facts = crate::infer::declared(sg.graph);
                    of_graph_predicted(model, sg.graph, &facts, p, annotation)
                }
                None => of_graph(sg.graph, annotation),
            };
            cost.add(&c.without_sizes());
        }
    }
    cost
}

/// The figures of `model`: its main graph with crossings sized by `facts` (called only when a
/// value crosses there, or always when a provider's placement needs the element types), and
/// its bodies.
pub fn of_model_with(
    model: &Model,
    annotation: &str,
    profile: Option<&Profile>,
    facts: impl FnOnce() -> Facts,
) -> Cost {
    let mut cost = match profile {
        Some(p) => {
            let facts = facts();
            of_graph_predicted(model, &model.graph, &facts, p, annotation).with_sizes(&facts)
        }
        None => {
            let main = of_graph(&model.graph, annotation);
            if main.needs_facts() {
                main.with_sizes(&facts())
            } else {
                main.cost
            }
        }
    };
    cost.add(&of_bodies(model, &model.graph, annotation, profile));
    cost
}

/// The figures of `model` at `sizes` (inferred only when needed).
pub fn of_model(model: &Model, annotation: &str, profile: Option<&Profile>, sizes: &Sizes) -> Cost {
    of_model_with(model, annotation, profile, || sizes.infer(model))
}

/// The profile of the provider `target` names (`provider:`), if any.
pub fn profile_of(target: &crate::rules::schema::Target) -> Option<&'static Profile> {
    target.provider.as_deref().and_then(Profile::named)
}

/// The figures of `model` as `check` sees it for `target`: at the sizes a compile assumes
/// (`--dim`, then the target's defaults), nodes annotated `opts.annotation` on the CPU.
pub fn for_target(
    model: &Model,
    target: &crate::rules::schema::Target,
    opts: &crate::engine::Options,
) -> Cost {
    let sizes = Sizes::for_model(
        model,
        &opts.dims,
        &crate::rewrite::pass::assumed_sizes(target),
    );
    of_model(model, &opts.annotation, profile_of(target), &sizes)
}

/// The predicted placement of `model`'s main graph under `target` at the sizes a compile
/// assumes (`--dim`, then the target's defaults); `None` when the target names no provider.
pub fn predict_for_target(
    model: &Model,
    target: &crate::rules::schema::Target,
    opts: &crate::engine::Options,
) -> Option<crate::runtime::PlacementReport> {
    let profile = profile_of(target)?;
    let sizes = crate::analysis::Sizes::for_model(
        model,
        &opts.dims,
        &crate::rewrite::pass::assumed_sizes(target),
    );
    let facts = sizes.infer(model);
    Some(crate::runtime::placement_report(
        model,
        &facts,
        &target.name,
        profile,
        &opts.annotation,
        &crate::runtime::transforms::Session::for_target(
            target,
            crate::runtime::transforms::Level::default(),
        ),
    ))
}

/// A byte count for people: `0 B`, `512 B`, `1.2 kB`, `3.4 MB`, `5.6 GB`.
pub fn bytes_text(b: u64) -> String {
    const UNITS: [&str; 4] = ["kB", "MB", "GB", "TB"];
    if b < 1000 {
        return format!("{b} B");
    }
    let mut x = b as f64 / 1000.0;
    let mut u = 0;
    while x >= 999.95 && u + 1 < UNITS.len() {
        x /= 1000.0;
        u += 1;
    }
    format!("{x:.1} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_ops_include_attention_and_fused_forms() {
        for op in [
            "Conv",
            "MatMulNBits",
            "GroupQueryAttention",
            "QAttention",
            "Einsum",
        ] {
            assert!(is_heavy(op), "{op}");
        }
        for op in ["Add", "Relu", "Softmax", "LayerNormalization"] {
            assert!(!is_heavy(op), "{op}");
        }
    }

    #[test]
    fn bytes_are_written_in_decimal_units() {
        assert_eq!(bytes_text(0), "0 B");
        assert_eq!(bytes_text(999), "999 B");
        assert_eq!(bytes_text(1000), "1.0 kB");
        assert_eq!(bytes_text(1_234_567), "1.2 MB");
        assert_eq!(bytes_text(999_999_999), "1.0 GB");
    }
}
