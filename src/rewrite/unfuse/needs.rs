//! The operators a decomposition emits, checked against the target's provider before the patch
//! is returned: each at the schema since-version of the model's opset, with the element types
//! the form gives it ([`crate::runtime::capability`], the table `provider_kernel` reads). A
//! form with an operator the provider does not register would only be pinned to the CPU in the
//! next round; the decomposition refuses it (or picks another form) instead.

use crate::rewrite::pass::{Cause, Refusal};
use crate::runtime::capability::{Lookup, Schemas};
use crate::tensor::dtype_name;

use super::{UnfuseCtx, Unsupported};

/// The operators of a form, with the element types of their inputs and outputs.
#[derive(Default)]
pub(super) struct Needs(Vec<(&'static str, Vec<i32>, Vec<i32>)>);

impl Needs {
    pub(super) fn add(&mut self, op: &'static str, ins: &[i32], outs: &[i32]) {
        if !self
            .0
            .iter()
            .any(|(o, i, x)| *o == op && i.as_slice() == ins && x.as_slice() == outs)
        {
            self.0.push((op, ins.to_vec(), outs.to_vec()));
        }
    }

    /// Refuse unless the provider the target names registers every operator at the schema
    /// since-version of `opset`, for these types; the reason reads "`form` needs OP: why". No
    /// provider named, or one without a kernel table (OpenVINO claims clusters by its own op
    /// lists, [`crate::runtime::Profile::openvino`]): nothing to check.
    pub(super) fn check(&self, ctx: &UnfuseCtx, opset: i64, form: &str) -> Result<(), Unsupported> {
        let Some(profile) = ctx.profile.filter(|p| p.openvino().is_none()) else {
            return Ok(());
        };
        let cap = profile.capability();
        for (op, ins, outs) in &self.0 {
            let Some(since) = Schemas::builtin().since("", op, opset) else {
                return Err(Refusal::new(
                    Cause::Limit,
                    format!("{form} needs {op}, which has no schema at opset {opset}"),
                ));
            };
            let ins: Vec<Option<i32>> = ins.iter().map(|&t| Some(t)).collect();
            let outs: Vec<Option<i32>> = outs.iter().map(|&t| Some(t)).collect();
            let why = match cap.lookup("", op, since, &ins, &outs) {
                Lookup::Kernel(_) => continue,
                Lookup::NoOp => format!("{} registers no {op} kernel", profile.provider),
                Lookup::NoVersion(_) => format!(
                    "{} registers no {op}-{since} kernel (the model's opset is {opset})",
                    profile.provider
                ),
                Lookup::NoType {
                    output,
                    index,
                    dtype,
                } => format!(
                    "{}'s {op}-{since} kernel does not take {} {} {index}",
                    profile.provider,
                    dtype_name(dtype),
                    if output { "as output" } else { "as input" }
                ),
            };
            return Err(Refusal::new(
                Cause::Unsupported,
                format!("{form} needs {op}: {why}"),
            ));
        }
        Ok(())
    }
}
