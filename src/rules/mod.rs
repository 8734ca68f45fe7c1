//! Targets and rules: per-GPU rewrite rules declared in YAML, validated up front (every error
//! with `file:line:col`), resolved through `extends`, and matched against a graph.
//!
//! The stages, one module each: [`yaml`] (text → located tree) → `parse` (tree → typed
//! rules, all errors collected) → [`loader`] (files, built-ins, `extends`, `--rules`) →
//! [`matcher`] (which rule fires where, and `explain`). [`facts`] is what the matcher may know
//! about values; `derive` computes per-node facts (depthwise, kernel, work...) from them.
//!
//! # A target file
//!
//! ```yaml
//! target: rx580                       # required: this target's name
//! description: AMD Radeon RX 580 ...  # optional
//! extends: directml                   # optional: a name or a list; `none` = empty base;
//!                                     # a path (with `/` or ending .yaml) is relative to this file
//! disable: [some-base-rule]           # optional: drop rules of the bases
//! rules:
//!   - id: split-depthwise             # required, unique in the file: letters, digits, - _ .
//!     why: one line — what goes wrong without this rule    # required
//!     evidence: [microsoft/onnxruntime#29263]              # required (a string or list; [] allowed)
//!     match: {op: Conv, depthwise: true, channels: {gt: 64}}   # required
//!     action: {split: {axis: channels, max: 64}}           # required
//!     priority: 10                    # optional integer, default 0; higher runs first
//! runtime:                            # optional: settings the runtime needs
//!   - {key: ep.dml.disable_graph_fusion, value: "1", why: ..., evidence: [...]}
//! ```
//!
//! A `--rules FILE` file has the same keys minus `extends` (`target` optional): its rules are
//! layered on the chosen target exactly like a derived target's.
//!
//! **Inheritance.** Bases are resolved in `extends` order, then the file's own layer: `disable`
//! removes base rules (an unknown id is an error), a rule with a base rule's id *replaces* it
//! in place (the way to tune a threshold), other rules are appended; runtime keys replace or
//! append the same way. Cycles are errors naming the chain.
//!
//! # `match:` — predicates
//!
//! A `match` map is a conjunction: every key must hold. `{}` matches every node. Each
//! predicate is true, false or *unknown* (a fact nobody knows, such as an uninferred shape);
//! a rule fires only when the whole pattern is true — unknown never matches, `not` of unknown
//! is unknown, and `explain` says which fact was missing.
//!
//! | key | value | meaning |
//! |---|---|---|
//! | `op` | `Conv` or `[Conv, Add]` | op type; names are checked against the ONNX and ONNX Runtime contrib op lists |
//! | `domain` | `com.microsoft` or a list | the node's domain (`""`, `ai.onnx` or `onnx` = default); absent = any domain |
//! | `name` | string, list, or `{prefix:}`/`{suffix:}`/`{contains:}`/`{exists:}` | the node name |
//! | `opset` | NUM | the model's opset version for the node's domain |
//! | `attr` | `{NAME: VALUE-TEST, ...}` | attribute values (defaults applied for common attributes) |
//! | `input`, `output` | `{SLOT: TENSOR-TEST, ...}` | the tensor at input/output slot SLOT (0-based) |
//! | `any_input`, `any_output` | TENSOR-TEST | some present input/output satisfies it |
//! | `depthwise` | bool | convolution with group > 1 and one input channel per group |
//! | `grouped` | bool | convolution with group > 1 (includes depthwise) |
//! | `kernel` | NUM | largest spatial kernel extent (conv weights / `kernel_shape` / global pool input) |
//! | `channels` | NUM | input channels: dim 1 of input 0; for convolutions also from the weights |
//! | `out_channels` | NUM | output channels: conv weights, else dim 1 of output 0 |
//! | `batch` | NUM | dim 0 of input 0 |
//! | `spatial` | NUM | product of input 0's dims after the second (H×W for NCHW) |
//! | `work` | NUM | estimated FLOPs of one dispatch (conv: 2·N·M·out_spatial·C/group·kernel; MatMul/Gemm: 2·M·N·K·batch; pools: outputs·kernel; other ops: elements of the larger of input 0 / output 0) |
//! | `bytes` | NUM | bytes read and written: every present input and output |
//! | `metadata` | `{KEY: STRING-TEST}` | node `metadata_props` |
//! | `provider_kernel` | `missing`, `deficient`, `registered`, `inlined`, `unloadable` or a list | what the target's execution provider (`provider:`) registers for the node at its schema since-version and types ([`crate::runtime::placement::kernel_verdict`]); an error in a target without a provider |
//! | `followed_by` | PATTERN + `via: SLOT`, `sole: bool` | some consumer of an output (of output `via`) matches; `sole`: that value has one consumer |
//! | `preceded_by` | PATTERN + `via: SLOT`, `sole: bool` | the producer of some input (of input `via`) matches |
//! | `not` | PATTERN | the pattern is false |
//! | `any` / `all` | `[PATTERN, ...]` | some / every pattern is true |
//! | `capture` | NAME | bind the node this pattern is tested on (reported with the match; not under `not`) |
//!
//! **NUM** (numeric test): `64` (equal), `[3, 5]` (one of), or a map of comparisons that must all
//! hold: `{eq, ne, lt, le, gt, ge: number}` and `{in: [numbers]}`, e.g. `{gt: 1, le: 64}`,
//! `{ge: 1e9}`. A fact that does not apply to the op (the kernel of an `Add`) is false; a fact
//! that cannot be computed is unknown.
//!
//! **VALUE-TEST** (attributes): a literal (`1`, `SAME_UPPER`, `[3, 3]`; booleans are 1/0) means
//! equal; or a map of `eq`, `ne` (literal), `in` (list of literals), `lt/le/gt/ge` (number;
//! on a list attribute every element must satisfy it), `exists: bool` (written in the node,
//! defaults not applied).
//!
//! **TENSOR-TEST**: `present: bool`, `dtype: int64 | [float16, float]`, `rank: NUM`,
//! `dims: [...]`, `static: bool` (all dims known numbers), `rank_known: bool` (the analysis
//! knows the number of dims), `const: bool` (known constant —
//! `false` means "not known to be constant"), `initializer: bool`. Any test other than
//! `present` is false on an absent input. `dims` items: `_` (anything), `...` (any number of
//! dims, once), a NUM (a known dim satisfying it), `dynamic` (not a known number),
//! `{sym: true}` / `{sym: NAME}` (a symbolic dim), or a variable name (`N`, `H`): the same
//! name twice in one `dims` list must be the same size.
//!
//! **STRING-TEST**: a string or list (one of), or one of `{eq:}`, `{in:}`, `{prefix:}`,
//! `{suffix:}`, `{contains:}`, `{exists: bool}`.
//!
//! # `action:`
//!
//! | action | parameters | meaning |
//! |---|---|---|
//! | `unfuse` | — | replace a fused / contrib op by the standard ops it stands for |
//! | `split` | `{axis: channels \| batch \| out_channels, max: N ≥ 1}` | cut into slices of at most N |
//! | `cpu` | — | pin the node to the CPU provider |
//! | `cast` | `{from: DTYPE, to: DTYPE, isolated: bool}` (different types) | compute in another element type; `isolated: true` (float16 to float only): only where ONNX Runtime's CPU provider does so itself ([`crate::runtime::fp16`]) |
//! | `barrier` | `{budget: NUMBER > 0}` | break fused runs of matched nodes at `budget` work units (FLOPs) |
//! | `deny` | — | refuse the model ([`check_deny`]) |
//!
//! Parameter-less actions are written as a word (`action: cpu`) or `{cpu: {}}`.

pub mod builtin;
pub(crate) mod derive;
pub mod diag;
pub mod loader;
pub mod matcher;
pub mod ops;
pub(crate) mod parse;
pub mod pattern;
pub mod schema;
pub mod yaml;

use std::path::PathBuf;

/// A dimension as the matcher sees it: `infer`'s own [`Dim`](crate::infer::Dim).
pub use crate::infer::Dim as FactDim;
pub use builtin::{builtin, builtin_names, BUILTIN};
pub use diag::{Diagnostic, RuleErrors};
pub use loader::{Loader, MemFs, RuleFs, StdFs};
pub use matcher::{
    check_deny, explain, find_matches, Explanation, Match, Matcher, Opsets, Outcome,
};
pub use pattern::{Pattern, SourceLoc};
pub use schema::{Action, BarrierLimit, CpuSubgraphs, Rule, RuntimeSetting, SplitAxis, Target};

/// Load a target (a built-in name such as `rx580`, or a YAML file path) with every base it
/// extends. Errors: [`crate::ErrorKind::Rules`], every problem of every file in the message.
pub fn load_target(spec: &str) -> crate::Result<Target> {
    load_target_with_rules(spec, &[])
}

/// Load a target, then layer `--rules` files on top of it.
pub fn load_target_with_rules(spec: &str, rules: &[PathBuf]) -> crate::Result<Target> {
    Loader::new(&StdFs)
        .load(spec, rules)
        .map_err(crate::Error::from)
}

/// Load a target from any [`RuleFs`], keeping the structured diagnostics.
pub fn load_target_from(
    fs: &dyn RuleFs,
    spec: &str,
    rules: &[PathBuf],
) -> Result<Target, RuleErrors> {
    Loader::new(fs).load(spec, rules)
}

/// Check one target text, named `name` in messages; it may extend built-ins only.
pub fn parse_target_str(name: &str, text: &str) -> Result<Target, RuleErrors> {
    let fs = MemFs::new().with(name, text);
    Loader::new(&fs).load(name, &[])
}
