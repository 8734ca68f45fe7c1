//! Runtimes: what each execution provider registers ([`capability`]), where it will run each
//! node of a model ([`placement`]), and the profile a target names (`provider:` in its YAML).
//!
//! A target's figures (heavy ops on the GPU, pieces, crossings) come from this prediction, not
//! from the pins alone: ONNX Runtime moves a node to the CPU by itself when its provider has no
//! kernel for it at the node's schema since-version and types, or when it prefers the CPU for a
//! small shape computation, and a node that no provider takes makes the model fail to load.

pub mod capability;
pub mod fp16;
pub mod openvino;
pub mod placement;
pub mod run;
pub mod submission;
pub mod transforms;

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
    /// Whether the provider prefers the NHWC layout. ONNX Runtime's partitioner then assigns
    /// the nodes of the provider's first `GetCapability`, runs the layout transformation and
    /// asks `GetCapability` a second time (`GetCapabilityForEP`, graph_partitioner.cc), in which
    /// only the nodes left unassigned are tentative (see [`placement`]).
    pub prefers_nhwc: bool,
    /// Whether `layer_ann` pins are honoured (`session.layer_assignment_settings`).
    pub honours_layer_ann: bool,
    /// Where the facts about the provider's own placement logic come from.
    pub evidence: &'static str,
    /// The newest ONNX IR version the runtime reads (`None`: whatever ONNX Runtime 1.32 reads).
    pub max_ir: Option<i64>,
    /// For ONNX Runtime's OpenVINO provider: the device its lists are read for (`CPU`, `GPU`);
    /// `table` is then `runtimes/capability/openvino.tsv`, not a kernel table.
    pub openvino_device: Option<&'static str>,
    cap: OnceLock<Capability>,
    cpu: OnceLock<Capability>,
    ov: OnceLock<openvino::OvTable>,
}

const DEFICIENT: &str = include_str!("../../runtimes/deficient.tsv");

/// The CPU provider's kernels: the generated table, then the registered kernels its source
/// (OperatorKernels.md) leaves out, kept by hand and checked against the runtime.
const CPU_TABLE: &str = concat!(
    include_str!("../../runtimes/capability/cpu.tsv"),
    include_str!("../../runtimes/capability/cpu-registered.tsv")
);
const OPENVINO_TABLE: &str = include_str!("../../runtimes/capability/openvino.tsv");

static PROFILES: [Profile; 5] = [
    Profile {
        name: "directml",
        provider: "DmlExecutionProvider",
        table: include_str!("../../runtimes/capability/dml.tsv"),
        cpu_table: CPU_TABLE,
        cpu_preferred: true,
        prefers_nhwc: false,
        honours_layer_ann: true,
        evidence: "ExecutionProviderImpl::GetCapability (onnxruntime/core/providers/dml/DmlExecutionProvider/src/ExecutionProvider.cpp) looks up each node's kernel, then removes GetCpuPreferredNodes",
        max_ir: None,
        openvino_device: None,
        cap: OnceLock::new(),
        cpu: OnceLock::new(),
        ov: OnceLock::new(),
    },
    Profile {
        name: "webgpu",
        provider: "WebGpuExecutionProvider",
        table: include_str!("../../runtimes/capability/webgpu.tsv"),
        cpu_table: CPU_TABLE,
        cpu_preferred: true,
        // "WebGPU EP preferred layout: 1" (NHWC) in onnxruntime-web 1.30's verbose log; every
        // session there logs the provider's GetCapability twice.
        prefers_nhwc: true,
        honours_layer_ann: true,
        evidence: "WebGpuExecutionProvider::GetCapability (onnxruntime/core/providers/webgpu/webgpu_execution_provider.cc) looks up kernels, then removes GetCpuPreferredNodes",
        // onnxruntime-web 1.30.0 refuses an IR 14 model at session creation (model.cc); IR 13
        // loads (measured in Chromium, tests/runtime_placement.rs).
        max_ir: Some(13),
        openvino_device: None,
        cap: OnceLock::new(),
        cpu: OnceLock::new(),
        ov: OnceLock::new(),
    },
    Profile {
        name: "cuda",
        provider: "CUDAExecutionProvider",
        table: include_str!("../../runtimes/capability/cuda.tsv"),
        cpu_table: CPU_TABLE,
        cpu_preferred: true,
        prefers_nhwc: false,
        honours_layer_ann: true,
        evidence: "CUDAExecutionProvider::GetCapability (onnxruntime/core/providers/cuda/cuda_execution_provider.cc) looks up kernels, then removes GetCpuPreferredNodes",
        max_ir: None,
        openvino_device: None,
        cap: OnceLock::new(),
        cpu: OnceLock::new(),
        ov: OnceLock::new(),
    },
    Profile {
        name: "openvino",
        provider: "OpenVINOExecutionProvider",
        table: OPENVINO_TABLE,
        cpu_table: CPU_TABLE,
        cpu_preferred: false,
        prefers_nhwc: false,
        honours_layer_ann: false,
        evidence: "openvino_ep::GetCapability::Execute (onnxruntime/core/providers/openvino/ov_versions/capability.cc) claims clusters of the nodes DataOps::node_is_supported accepts (data_ops.cc); no GetCpuPreferredNodes",
        max_ir: None,
        openvino_device: Some("GPU"),
        cap: OnceLock::new(),
        cpu: OnceLock::new(),
        ov: OnceLock::new(),
    },
    // The same provider on its CPU device: what runs here (tests/openvino_placement.rs).
    Profile {
        name: "openvino-cpu",
        provider: "OpenVINOExecutionProvider",
        table: OPENVINO_TABLE,
        cpu_table: CPU_TABLE,
        cpu_preferred: false,
        prefers_nhwc: false,
        honours_layer_ann: false,
        evidence: "openvino_ep::GetCapability::Execute (onnxruntime/core/providers/openvino/ov_versions/capability.cc), device_type CPU",
        max_ir: None,
        openvino_device: Some("CPU"),
        cap: OnceLock::new(),
        cpu: OnceLock::new(),
        ov: OnceLock::new(),
    },
];

impl Profile {
    /// The built-in profiles.
    pub fn all() -> &'static [Profile] {
        &PROFILES
    }

    /// The profile named `name` (`directml`, `webgpu`, `cuda`, `openvino`, `openvino-cpu`).
    pub fn named(name: &str) -> Option<&'static Profile> {
        PROFILES.iter().find(|p| p.name == name)
    }

    /// The provider's kernel table.
    pub fn capability(&self) -> &Capability {
        self.cap.get_or_init(|| {
            if self.openvino_device.is_some() {
                // Not a kernel table: only its header (provider, runtime, source) is read.
                let header: String = self
                    .table
                    .lines()
                    .filter(|l| l.starts_with('#'))
                    .map(|l| format!("{l}\n"))
                    .collect();
                return Capability::parse(&header)
                    .unwrap_or_else(|e| panic!("built-in table {}: {e}", self.name));
            }
            Capability::parse(self.table)
                .unwrap_or_else(|e| panic!("built-in table {}: {e}", self.name))
        })
    }

    /// For the OpenVINO provider: its lists and the device they are read for.
    pub fn openvino(&self) -> Option<(&openvino::OvTable, &'static str)> {
        let device = self.openvino_device?;
        let t = self.ov.get_or_init(|| {
            openvino::OvTable::parse(self.table)
                .unwrap_or_else(|e| panic!("built-in table {}: {e}", self.name))
        });
        Some((t, device))
    }

    /// The CPU provider's kernel table (the CPU side of this runtime).
    pub fn cpu_capability(&self) -> &Capability {
        self.cpu.get_or_init(|| {
            Capability::parse(self.cpu_table).unwrap_or_else(|e| panic!("built-in CPU table: {e}"))
        })
    }

    /// Whether the provider's blocked `DequantizeLinear` (`block_size` > 0) is on the hand-kept
    /// list of deficient kernels (`runtimes/deficient.tsv`): a rewrite then writes the blocked
    /// dequantization in another form ([`crate::rewrite::unfuse::dequantize`]).
    pub fn ignores_block_size(&self) -> bool {
        DEFICIENT.lines().any(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            !line.starts_with('#')
                && f.len() >= 5
                && f[0] == self.provider
                && f[2] == "DequantizeLinear"
                && f[4].starts_with("block_size")
        })
    }

    /// Why the provider's `GetCapability` passes over a node it has a kernel for, by its own
    /// per-node checks (the node then goes to the CPU provider like one without a kernel, and
    /// counts as a CPU node for `GetCpuPreferredNodes`).
    ///
    /// WebGPU: `WebGpuExecutionProvider::GetCapability` (webgpu_execution_provider.cc, the
    /// stored microsoft/onnxruntime version with the per-node checks) skips a `com.microsoft`
    /// `Attention` with a `mask_index` (input 3), `past` (input 4) or `past_sequence_length`
    /// (input 6), a `present` output (1), or `past_present_share_buffer` set; onnxruntime-web
    /// 1.30 places GPT-2's Attention with past on the CPU without a "kernel not found" line.
    pub fn declines(&self, g: &Graph, n: NodeId) -> Option<String> {
        let node = g.node(n);
        if self.name == "webgpu" && node.op_type == "Attention" && node.domain() == "com.microsoft"
        {
            let has_in = |i: usize| node.inputs.get(i).copied().flatten().is_some();
            let has_out = |i: usize| node.outputs.get(i).copied().flatten().is_some();
            let shared = node
                .attr("past_present_share_buffer")
                .and_then(|a| a.i())
                .is_some_and(|v| v != 0);
            let what: Vec<&str> = [
                (has_in(3), "mask_index"),
                (has_in(4), "past"),
                (has_in(6), "past_sequence_length"),
                (has_out(1), "present"),
                (shared, "past_present_share_buffer"),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, w)| *w)
            .collect();
            if !what.is_empty() {
                return Some(format!(
                    "GetCapability passes over an Attention with {}",
                    what.join(", ")
                ));
            }
        }
        None
    }

    /// The reason the provider's kernel for node `n` is known to compute it wrongly (the
    /// hand-kept list `runtimes/deficient.tsv`, evidence in docs/hazards.md).
    pub fn deficient(&self, g: &Graph, facts: &Facts, n: NodeId) -> Option<String> {
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
    /// Nodes on the provider / on the CPU.
    pub gpu: usize,
    pub cpu: usize,
    /// Nodes ONNX Runtime's graph transformations fold or remove before placement.
    pub removed: usize,
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
    /// `constant`, `inlined`, `folded`, `removed`.
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
    session: &transforms::Session,
) -> PlacementReport {
    let g = &model.graph;
    let p = placement::predict_graph_in(model, g, facts, profile, annotation, session);
    let mut nodes = Vec::new();
    let (mut gpu, mut cpu, mut cannot_load, mut removed) = (0, 0, 0, 0);
    for &n in &g.order {
        let node = g.node(n);
        let side = p.side(n);
        let why = p.why(n).cloned().unwrap_or(placement::Why::Kernel);
        match side {
            placement::Side::Gpu => gpu += 1,
            placement::Side::Cpu => cpu += 1,
            placement::Side::None => {}
        }
        if matches!(why, placement::Why::Folded | placement::Why::Removed(_)) {
            removed += 1;
        }
        if matches!(why, placement::Why::NoProvider(_)) {
            cannot_load += 1;
        }
        let detail = match &why {
            placement::Why::NoKernel(d)
            | placement::Why::Declined(d)
            | placement::Why::Deficient(d)
            | placement::Why::NoProvider(d)
            | placement::Why::Inlined(d) => Some(d.clone()),
            placement::Why::Removed(by) => Some(format!("by {by}")),
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
        removed,
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
        if self.removed > 0 {
            s.push_str(&format!(
                ", {} folded or removed by ONNX Runtime's graph transformations",
                self.removed
            ));
        }
        if self.cannot_load > 0 {
            s.push_str(&format!(
                ", {} that no provider takes (the model will not load)",
                self.cannot_load
            ));
        }
        s.push('\n');
        for n in self
            .nodes
            .iter()
            .filter(|n| n.side == "cpu" || n.why == "no provider")
        {
            s.push_str(&format!("  {:<4} {} ({}): {}", n.side, n.name, n.op, n.why));
            if let Some(d) = &n.detail {
                s.push_str(&format!(": {d}"));
            }
            s.push('\n');
        }
        s
    }
}

impl PlacementReport {
    /// Nodes the runtime runs on the CPU by itself because its provider has no kernel for
    /// them (or a deficient one, or passes over them): neither pinned nor preferred there by
    /// ONNX Runtime.
    pub fn moved(&self) -> impl Iterator<Item = &PlacedNode> {
        self.nodes.iter().filter(|n| {
            n.side == "cpu" && matches!(n.why, "no kernel" | "declined" | "deficient kernel")
        })
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
