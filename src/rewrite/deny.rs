//! `deny`: the target says the node cannot be made safe. Nothing is rewritten; every match is
//! a finding of kind `denied`, and a compile that leaves one exits 1.

use crate::ir::NodeId;
use crate::rewrite::pass::{Cx, Pass, Pending};
use crate::rules::schema::Rule;

/// The `deny` pass.
pub struct DenyPass;

impl Pass for DenyPass {
    fn action(&self) -> &'static str {
        "deny"
    }
    fn pending(&self, _cx: &Cx, _rule: &Rule, _node: NodeId) -> Pending {
        Pending::Denied
    }
}
