//! Runtimes: what each execution provider registers ([`capability`]), where it will run each
//! node of a model ([`placement`]), and the profile a target names (`provider:` in its YAML).
//!
//! A target's figures (heavy ops on the GPU, pieces, crossings) come from this prediction, not
//! from the pins alone: ONNX Runtime moves a node to the CPU by itself when its provider has no
//! kernel for it at the node's schema since-version and types, or when it prefers the CPU for a
//! small shape computation, and a node that no provider takes makes the model fail to load.

pub mod capability;
pub mod fp16;
pub mod placement;

use std::sync::OnceLock;

use crate::infer::Facts;
use crate::ir::{Graph, Model, NodeId};
use capability::Capability;

/// An execution provider as a target names it.
#[derive(Debug)]
pub struct Profile {
    /// The name a target writes (`provider: directml`).
    pub name: &'static str,
    /// ONNX Runtime's name for the provider (as its logs print it).
    pub provider: &'static str,
    table: &'static str,
    cpu_table: &'static str,
    /// Whether the provider's `GetCapability` calls ONNX Runtime's `GetCpuPreferredNodes`.
    pub cpu_preferred: bool,
    /// Whether `layer_ann` pins are honoured (`session.layer_assignment_settings`).
    pub honours_layer_ann: bool,
    /// Where the facts about the provider's own placement logic come from.
    pub evidence: &'static str,
    /// The newest ONNX IR version the runtime reads (`None`: whatever ONNX Runtime 1.32 reads).
    pub max_ir: Option<i64>,
    cap: OnceLock<Capability>,
    cpu: OnceLock<Capability>,
}

const CPU_TABLE: &str = include_str!("../../runtimes/capability/cpu.tsv");

static PROFILES: [Profile; 3] = [
    Profile {
        name: "directml",
        provider: "DmlExecutionProvider",
        table: include_str!("../../runtimes/capability/dml.tsv"),
        cpu_table: CPU_TABLE,
        cpu_preferred: true,
        honours_layer_ann: true,
        evidence: "ExecutionProviderImpl::GetCapability (onnxruntime/core/providers/dml/DmlExecutionProvider/src/ExecutionProvider.cpp) looks up each node's kernel, then removes GetCpuPreferredNodes",
        max_ir: None,
        cap: OnceLock::new(),
        cpu: OnceLock::new(),
    },
    Profile {
        name: "webgpu",
        provider: "WebGpuExecutionProvider",
        table: include_str!("../../runtimes/capability/webgpu.tsv"),
        cpu_table: CPU_TABLE,
        cpu_preferred: true,
        honours_layer_ann: true,
        evidence: "WebGpuExecutionProvider::GetCapability (onnxruntime/core/providers/webgpu/webgpu_execution_provider.cc) looks up kernels, then removes GetCpuPreferredNodes",
        // onnxruntime-web 1.30.0 refuses an IR 14 model at session creation (model.cc); IR 13
        // loads (measured in Chromium, tests/runtime_placement.rs).
        max_ir: Some(13),
        cap: OnceLock::new(),
        cpu: OnceLock::new(),
    },
    Profile {
        name: "cuda",
        provider: "CUDAExecutionProvider",
        table: include_str!("../../runtimes/capability/cuda.tsv"),
        cpu_table: CPU_TABLE,
        cpu_preferred: true,
        honours_layer_ann: true,
        evidence: "CUDAExecutionProvider::GetCapability (onnxruntime/core/providers/cuda/cuda_execution_provider.cc) looks up kernels, then removes GetCpuPreferredNodes",
        max_ir: None,
        cap: OnceLock::new(),
        cpu: OnceLock::new(),
    },
];

impl Profile {
    /// The built-in profiles.
    pub fn all() -> &'static [Profile] {
        &PROFILES
    }

    /// The profile named `name` (`directml`, `webgpu`, `cuda`).
    pub fn named(name: &str) -> Option<&'static Profile> {
        PROFILES.iter().find(|p| p.name == name)
    }

    /// The provider's kernel table.
    pub fn capability(&self) -> &Capability {
        self.cap.get_or_init(|| {
            Capability::parse(self.table)
                .unwrap_or_else(|e| panic!("built-in table {}: {e}", self.name))
        })
    }

    /// The CPU provider's kernel table (the CPU side of this runtime).
    pub fn cpu_capability(&self) -> &Capability {
        self.cpu.get_or_init(|| {
            Capability::parse(self.cpu_table).unwrap_or_else(|e| panic!("built-in CPU table: {e}"))
        })
    }

    /// The reason the provider's kernel for node `n` is known to compute it wrongly (the
    /// hand-kept list `runtimes/deficient.tsv`, evidence in docs/hazards.md).
    pub fn deficient(&self, _model: &Model, g: &Graph, facts: &Facts, n: NodeId) -> Option<String> {
        let node = g.node(n);
        if self.name == "directml" && node.op_type == "DequantizeLinear" && node.domain().is_empty()
        {
            // DirectML's DequantizeLinear never reads `block_size`: it expands a 1-D scale
            // along `axis` and broadcasts any other shape elementwise.
            let blocked = node
                .attr("block_size")
                .and_then(|a| a.i())
                .is_some_and(|b| b != 0);
            let scale_rank = node
                .inputs
                .get(1)
                .copied()
                .flatten()
                .and_then(|v| facts.shape(v))
                .map(|s| s.len());
            if blocked || scale_rank.is_some_and(|r| r > 1) {
                return Some("blocked DequantizeLinear (block_size, a scale of rank > 1): the kernel ignores block_size and broadcasts the scale elementwise".into());
            }
        }
        None
    }
}

/// A model's predicted placement under a target, for `inspect --target` and the tests that
/// hold it against the runtime's own record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlacementReport {
    pub target: String,
    pub provider: String,
    pub runtime: String,
    /// Main-graph nodes in graph order.
    pub nodes: Vec<PlacedNode>,
    /// Nodes on the provider / on the CPU / constants.
    pub gpu: usize,
    pub cpu: usize,
    /// Nodes no provider of the runtime takes (the model will not load).
    pub cannot_load: usize,
}

/// One node's predicted place.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlacedNode {
    pub name: String,
    pub op: String,
    pub domain: String,
    /// `gpu`, `cpu` or `none` (a Constant).
    pub side: &'static str,
    /// `kernel`, `pinned`, `no kernel`, `cpu preferred`, `deficient kernel`, `no provider`,
    /// `constant`.
    pub why: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The predicted placement of `model`'s main graph under `profile`, types from `facts`.
pub fn placement_report(
    model: &Model,
    facts: &Facts,
    target: &str,
    profile: &Profile,
    annotation: &str,
) -> PlacementReport {
    let g = &model.graph;
    let p = placement::predict_graph(model, g, facts, profile, annotation);
    let mut nodes = Vec::new();
    let (mut gpu, mut cpu, mut cannot_load) = (0, 0, 0);
    for &n in &g.order {
        let node = g.node(n);
        let side = p.side(n);
        let why = p.why(n).cloned().unwrap_or(placement::Why::Kernel);
        match side {
            placement::Side::Gpu => gpu += 1,
            placement::Side::Cpu => cpu += 1,
            placement::Side::None => {}
        }
        if matches!(why, placement::Why::NoProvider(_)) {
            cannot_load += 1;
        }
        let detail = match &why {
            placement::Why::NoKernel(d)
            | placement::Why::Deficient(d)
            | placement::Why::NoProvider(d)
            | placement::Why::Inlined(d) => Some(d.clone()),
            _ => None,
        };
        nodes.push(PlacedNode {
            name: node.name().to_string(),
            op: node.op_type.clone(),
            domain: node.domain().to_string(),
            side: match side {
                placement::Side::Gpu => "gpu",
                placement::Side::Cpu => "cpu",
                placement::Side::None => "none",
            },
            why: why.label(),
            detail,
        });
    }
    PlacementReport {
        target: target.to_string(),
        provider: profile.provider.to_string(),
        runtime: profile.capability().runtime.clone(),
        nodes,
        gpu,
        cpu,
        cannot_load,
    }
}

impl PlacementReport {
    /// The text `inspect --target` prints: the counts, then every node off the provider.
    pub fn text(&self) -> String {
        let mut s = format!(
            "placement on {} ({}), predicted from its kernels:\n  {} nodes on {}, {} on the CPU",
            self.target, self.runtime, self.gpu, self.provider, self.cpu
        );
        if self.cannot_load > 0 {
            s.push_str(&format!(
                ", {} that no provider takes (the model will not load)",
                self.cannot_load
            ));
        }
        s.push('\n');
        for n in self.nodes.iter().filter(|n| n.side == "cpu") {
            s.push_str(&format!("  cpu  {} ({}): {}", n.name, n.op, n.why));
            if let Some(d) = &n.detail {
                s.push_str(&format!(": {d}"));
            }
            s.push('\n');
        }
        s
    }
}

/// The predicted placement of `model`'s main graph under `target` at the sizes a compile
/// assumes (`--dim`, then the target's defaults); `None` when the target names no provider.
pub fn predict_for_target(
    model: &Model,
    target: &crate::rules::schema::Target,
    opts: &crate::engine::Options,
) -> Option<PlacementReport> {
    let profile = crate::cost::profile_of(target)?;
    let sizes = crate::analysis::Sizes::for_model(
        model,
        &opts.dims,
        &crate::rewrite::pass::assumed_sizes(target),
    );
    let facts = sizes.infer(model);
    Some(placement_report(
        model,
        &facts,
        &target.name,
        profile,
        &opts.annotation,
    ))
}

impl PlacementReport {
    /// Nodes the runtime runs on the CPU by itself because its provider has no kernel for
    /// them (or a deficient one): neither pinned nor preferred there by ONNX Runtime.
    pub fn moved(&self) -> impl Iterator<Item = &PlacedNode> {
        self.nodes
            .iter()
            .filter(|n| n.side == "cpu" && matches!(n.why, "no kernel" | "deficient kernel"))
    }

    /// Nodes no provider takes: the session cannot be created.
    pub fn unloadable(&self) -> impl Iterator<Item = &PlacedNode> {
        self.nodes.iter().filter(|n| n.why == "no provider")
    }

    /// One line naming what [`PlacementReport::moved`] holds, by op (`None` when empty).
    pub fn moved_note(&self) -> Option<String> {
        let mut by_op: std::collections::BTreeMap<&str, usize> = Default::default();
        for n in self.moved() {
            *by_op.entry(n.op.as_str()).or_default() += 1;
        }
        if by_op.is_empty() {
            return None;
        }
        let total: usize = by_op.values().sum();
        let ops: Vec<String> = by_op.iter().map(|(o, c)| format!("{o} {c}")).collect();
        Some(format!(
            "the runtime runs {total} node(s) on the CPU by itself ({} has no kernel for them at their since-version and types; counted in the cost; `inspect --target {}` lists them): {}",
            self.provider,
            self.target,
            ops.join(", ")
        ))
    }
}
