//! Rewrites: the patch type, the pass interface, and the actions rules ask for, one pass each.

pub mod barrier;
pub mod cast;
pub mod consts;
pub mod cpu;
pub mod deny;
pub mod exactness;
pub mod opset;
pub mod pass;
pub mod patch;
pub mod split;
pub mod unfuse;
pub mod work;

pub use exactness::Exactness;
pub use patch::{AttrValue, PValue, Patch, PatchError, ORIGIN_KEY, RULE_KEY};

/// Every pass, one line per action, in the order the driver runs the per-rule ones.
pub const PASSES: &[&dyn pass::Pass] = &[
    &split::SplitPass,
    &cast::CastPass,
    &unfuse::UnfusePass,
    &cpu::CpuPass,
    &barrier::BarrierPass,
    &deny::DenyPass,
];

/// The pass of an action (by its name in rule files).
pub fn pass_for(action: &str) -> Option<&'static dyn pass::Pass> {
    PASSES.iter().copied().find(|p| p.action() == action)
}
