//! Rewrites: the patch type and the actions rules ask for.

pub mod patch;
pub mod unfuse;

pub use patch::{AttrValue, PValue, Patch, PatchError, ORIGIN_KEY, RULE_KEY};
