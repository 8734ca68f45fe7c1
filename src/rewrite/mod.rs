//! Rewrites: the patch type and the actions rules ask for.

pub mod barrier;
pub mod cast;
pub mod consts;
pub mod cpu;
pub mod deny;
pub mod pass;
pub mod patch;
pub mod split;
pub mod unfuse;
pub mod work;

pub use patch::{AttrValue, PValue, Patch, PatchError, ORIGIN_KEY, RULE_KEY};
