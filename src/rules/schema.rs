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
    /// outputs back.
    Cast { from: i32, to: i32 },
    /// Insert partition barriers so that no fused run of matched nodes exceeds `budget`
    /// work units (estimated FLOPs, see the `work` fact).
    /// `dims`: default sizes for symbolic dims when estimating work: a dim name, or `batch`
    /// (axis 0 of a graph input), `spatial` (axes 2.. of a rank-4 graph input), `default`.
    Barrier {
        budget: f64,
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
            Action::Cast { from, to } => {
                write!(
                    f,
                    "cast {{from: {}, to: {}}}",
                    dtype_name(*from),
                    dtype_name(*to)
                )
            }
            Action::Barrier { budget, dims } => {
                write!(
                    f,
                    "barrier {{budget: {}",
                    super::pattern::Num::Float(*budget)
                )?;
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
