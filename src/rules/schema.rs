//! The resolved, validated form of a target: its rules (with typed actions) and the runtime
//! settings the output needs.

use std::fmt;

use super::pattern::{Pattern, SourceLoc};
use crate::tensor::dtype_name;

/// The axis a `split` action cuts along.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitAxis {
    /// Input channels (depthwise and grouped convolutions: whole groups per slice).
    Channels,
    /// The batch dimension.
    Batch,
    /// Output channels (slices of the weights, outputs concatenated).
    OutChannels,
}

impl SplitAxis {
    pub const ALL: [(&'static str, SplitAxis); 3] = [
        ("channels", SplitAxis::Channels),
        ("batch", SplitAxis::Batch),
        ("out_channels", SplitAxis::OutChannels),
    ];
    pub fn name(self) -> &'static str {
        match self {
            SplitAxis::Channels => "channels",
            SplitAxis::Batch => "batch",
            SplitAxis::OutChannels => "out_channels",
        }
    }
}

/// What a rule asks for when it matches. Parameters are validated when the file is loaded.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Replace a fused or contrib op by the standard ONNX ops it stands for.
    Unfuse,
    /// Cut the node into slices of at most `max` along `axis`, concatenated back.
    Split { axis: SplitAxis, max: u64 },
    /// Pin the node to the CPU execution provider.
    Cpu,
    /// Compute the node in another element type: cast inputs of type `from` to `to`, and the
    /// outputs back. `isolated`: only where ONNX Runtime's CPU provider itself computes the
    /// node in `to` (a float16 node with a float16 kernel that sits alone between nodes without
    /// one: its InsertCastTransformer runs it in float32), so the fenced chain passes `to` on
    /// through it as the runtime does.
    Cast { from: i32, to: i32, isolated: bool },
    /// Insert partition barriers so that no GPU submission exceeds the rule's limit: an
    /// estimated time (the device's timeout over a margin, or an explicit limit) or, in the
    /// older form, a budget of work units (estimated operations + bytes, see the `work` fact).
    /// `dims`: default sizes for symbolic dims when estimating work: a dim name, or `batch`
    /// (axis 0 of a graph input), `spatial` (axes 2.. of a rank-4 graph input), `default`.
    Barrier {
        limit: BarrierLimit,
        /// Shared: every match of the rule carries a copy of its action.
        dims: std::sync::Arc<[(String, i64)]>,
    },
    /// Refuse to compile: the model cannot be made safe for this target.
    Deny,
}

impl Action {
    /// Every action name, as written in rule files.
    pub const NAMES: [&'static str; 6] = ["unfuse", "split", "cpu", "cast", "barrier", "deny"];

    pub fn name(&self) -> &'static str {
        match self {
            Action::Unfuse => "unfuse",
            Action::Split { .. } => "split",
            Action::Cpu => "cpu",
            Action::Cast { .. } => "cast",
            Action::Barrier { .. } => "barrier",
            Action::Deny => "deny",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Split { axis, max } => {
                write!(f, "split {{axis: {}, max: {max}}}", axis.name())
            }
            Action::Cast { from, to, isolated } => {
                write!(
                    f,
                    "cast {{from: {}, to: {}{}}}",
                    dtype_name(*from),
                    dtype_name(*to),
                    if *isolated { ", isolated: true" } else { "" }
                )
            }
            Action::Barrier { limit, dims } => {
                f.write_str("barrier {")?;
                match limit {
                    BarrierLimit::Work(budget) => {
                        write!(f, "budget: {}", super::pattern::Num::Float(*budget))?
                    }
                    BarrierLimit::Time { margin, limit_ms } => {
                        write!(f, "margin: {}", super::pattern::Num::Float(*margin))?;
                        if let Some(l) = limit_ms {
                            write!(f, ", limit_ms: {}", super::pattern::Num::Float(*l))?;
                        }
                    }
                }
                if !dims.is_empty() {
                    let d: Vec<String> = dims.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                    write!(f, ", dims: {{{}}}", d.join(", "))?;
                }
                f.write_str("}")
            }
            other => f.write_str(other.name()),
        }
    }
}

/// What a `barrier` rule holds each GPU submission under.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BarrierLimit {
    /// The older form: `budget` work units (estimated operations + bytes moved).
    Work(f64),
    /// Estimated time ([`crate::timing`]): `limit_ms` (or the target's `device:`
    /// `timeout_ms` when not given) divided by `margin`.
    Time { margin: f64, limit_ms: Option<f64> },
}

/// What happens to a node when a rule's action cannot be applied to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// The node runs on the CPU (pinned like the `cpu` action does).
    Cpu,
    /// The compile refuses, as a `deny` rule would.
    Deny,
}

impl Fallback {
    pub const ALL: [(&'static str, Fallback); 2] =
        [("cpu", Fallback::Cpu), ("deny", Fallback::Deny)];
    pub fn name(self) -> &'static str {
        match self {
            Fallback::Cpu => "cpu",
            Fallback::Deny => "deny",
        }
    }
}

/// How a target's runtime is given the work that must run on the CPU (`cpu_subgraphs:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CpuSubgraphs {
    /// One model; pinned nodes carry the `layer_ann` metadata the runtime honours (ONNX
    /// Runtime's own providers). The default.
    #[default]
    Annotate,
    /// The runtime ignores pins: a model with CPU work is written as segment models and a
    /// manifest (`--cpu-subgraphs partition`), the CPU work in segments of its own.
    Partition,
}

impl CpuSubgraphs {
    pub const ALL: [(&'static str, CpuSubgraphs); 2] = [
        ("annotate", CpuSubgraphs::Annotate),
        ("partition", CpuSubgraphs::Partition),
    ];
    pub fn name(self) -> &'static str {
        match self {
            CpuSubgraphs::Annotate => "annotate",
            CpuSubgraphs::Partition => "partition",
        }
    }
}

/// One rule of a resolved target.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub id: String,
    /// One line: what goes wrong without this rule.
    pub why: String,
    /// Public reports the rule rests on (`owner/repo#N`, ...).
    pub evidence: Vec<String>,
    /// Higher first; 0 when not given.
    pub priority: i64,
    pub pattern: Pattern,
    pub action: Action,
    /// When the action cannot be applied to a node (`None`: the target's default).
    pub fallback: Option<Fallback>,
    /// `approximate: allow|deny` on the rule (`None`: the target's, else denied).
    pub approximate: Option<bool>,
    /// Where the rule's `id` was written.
    pub source: SourceLoc,
}

/// A setting the runtime needs to run the output safely (a session config entry, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSetting {
    pub key: String,
    pub value: String,
    pub why: String,
    pub evidence: Vec<String>,
    pub source: SourceLoc,
}

/// A target with its whole `extends` chain resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The `target:` name of the file that was asked for.
    pub name: String,
    pub description: String,
    /// The files that made it, bases first (`builtin:directml.yaml`, `my.yaml`...).
    pub chain: Vec<String>,
    /// The rules in order: bases' first, each replaced in place by a later rule of the same id.
    pub rules: Vec<Rule>,
    pub runtime: Vec<RuntimeSetting>,
    /// The default fallback of the target's rules (the last file of the chain that sets one).
    pub fallback: Option<Fallback>,
    /// Whether the target's rules may apply approximate rewrites (`approximate: allow`; the
    /// last file of the chain that sets it). Rules may say otherwise; `--allow-approximate`
    /// allows them all.
    pub approximate: Option<bool>,
    /// The execution provider the target runs on (`provider:`, the last file of the chain
    /// that sets one): its kernels predict where each node runs ([`crate::runtime`]).
    pub provider: Option<String>,
    /// How CPU work reaches the runtime (`cpu_subgraphs:`, the last file of the chain that
    /// sets it; `annotate` when none does).
    pub cpu_subgraphs: CpuSubgraphs,
    /// The device model the time estimates rest on (`device:`; each key from the last file of
    /// the chain that sets it). Empty for a target without one.
    pub device: DeviceSpec,
}

/// A target's `device:` section: published figures of the device its time estimates assume
/// ([`crate::timing`]). Every key is optional in one file; a file that `extends` another
/// overrides key by key, and its `evidence` is added to the base's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceSpec {
    /// The device the figures assume (a family's target names one representative device).
    pub name: Option<String>,
    /// The timeout one GPU submission must stay under, in milliseconds (Windows' TDR:
    /// `TdrDelay`, 2 s by default); `None` where the runtime has none.
    pub timeout_ms: Option<f64>,
    /// Peak throughput, 10^12 operations per second, for float32, float16 and 8-bit integer
    /// arithmetic (a multiply-add is 2).
    pub tflops_f32: Option<f64>,
    pub tflops_f16: Option<f64>,
    pub tops_int8: Option<f64>,
    /// Peak memory bandwidth of the device, GB/s (10^9 bytes).
    pub memory_gbs: Option<f64>,
    /// The CPU-GPU link: bandwidth per direction, GB/s, and the latency of one copy, µs.
    pub link_gbs: Option<f64>,
    pub link_latency_us: Option<f64>,
    /// The GPU shares the CPU's memory (a crossing is a copy in that memory, or none).
    pub unified: Option<bool>,
    /// Fixed cost of one GPU submission (record, submit, wait), µs.
    pub launch_us: Option<f64>,
    /// Where the figures come from (each entry a heading of docs/hazards.md for the built-in
    /// targets).
    pub evidence: Vec<String>,
}

impl DeviceSpec {
    /// The keys of a `device:` section.
    pub const KEYS: &'static [&'static str] = &[
        "name",
        "timeout_ms",
        "tflops_f32",
        "tflops_f16",
        "tops_int8",
        "memory_gbs",
        "link_gbs",
        "link_latency_us",
        "unified",
        "launch_us",
        "evidence",
    ];
    /// No key set.
    pub fn is_empty(&self) -> bool {
        *self == DeviceSpec::default()
    }
    /// `later`'s keys over this one's; evidence added.
    pub fn merge(&mut self, later: &DeviceSpec) {
        fn over<T: Clone>(a: &mut Option<T>, b: &Option<T>) {
            if b.is_some() {
                a.clone_from(b);
            }
        }
        over(&mut self.name, &later.name);
        over(&mut self.timeout_ms, &later.timeout_ms);
        over(&mut self.tflops_f32, &later.tflops_f32);
        over(&mut self.tflops_f16, &later.tflops_f16);
        over(&mut self.tops_int8, &later.tops_int8);
        over(&mut self.memory_gbs, &later.memory_gbs);
        over(&mut self.link_gbs, &later.link_gbs);
        over(&mut self.link_latency_us, &later.link_latency_us);
        over(&mut self.unified, &later.unified);
        over(&mut self.launch_us, &later.launch_us);
        for e in &later.evidence {
            if !self.evidence.contains(e) {
                self.evidence.push(e.clone());
            }
        }
    }
}

impl Target {
    /// What happens to a node when `rule`'s action cannot be applied to it.
    pub fn fallback_of(&self, rule: &Rule) -> Option<Fallback> {
        match rule.action {
            // Pinning and refusing are already what a fallback would do.
            Action::Cpu | Action::Deny => None,
            _ => rule.fallback.or(self.fallback),
        }
    }
    /// Whether `rule` may apply an approximate rewrite (`all`: `--allow-approximate`).
    pub fn allows_approximate(&self, rule: &Rule, all: bool) -> bool {
        all || rule.approximate.or(self.approximate).unwrap_or(false)
    }
    /// The rule with this id.
    pub fn rule(&self, id: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.id == id)
    }
    /// The value of a runtime setting.
    pub fn runtime_value(&self, key: &str) -> Option<&str> {
        self.runtime
            .iter()
            .find(|s| s.key == key)
            .map(|s| s.value.as_str())
    }
}
