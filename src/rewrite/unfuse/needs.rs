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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Profile;
    use crate::tensor::dtype;

    fn check_on(profile: Option<&'static str>, needs: &Needs) -> Result<(), Unsupported> {
        let facts = crate::infer::Facts::default();
        let mut ctx = UnfuseCtx::new(13, "test", &facts);
        ctx.profile = profile.map(|p| Profile::named(p).unwrap());
        needs.check(&ctx, 13, "the form")
    }

    #[test]
    fn quantized_add_forms_against_directml() {
        let (u8_, i32_, f, d) = (dtype::UINT8, dtype::INT32, dtype::FLOAT, dtype::DOUBLE);
        // The table form and the float32 form: DirectML registers every op at opset 13.
        let mut table = Needs::default();
        table.add("Cast", &[u8_], &[i32_]);
        table.add("Mul", &[i32_, i32_], &[i32_]);
        table.add("Add", &[i32_, i32_], &[i32_]);
        table.add("Gather", &[u8_, i32_], &[u8_]);
        table.add("QuantizeLinear", &[f, f, u8_], &[u8_]);
        assert!(check_on(Some("directml"), &table).is_ok());
        // float64 math: none on DirectML, with the op and type named.
        let mut f64_ = Needs::default();
        f64_.add("Cast", &[f], &[d]);
        f64_.add("Mul", &[d, d], &[d]);
        let e = check_on(Some("directml"), &f64_).unwrap_err();
        assert!(
            e.reason.contains("the form needs Mul")
                && e.reason.contains("DmlExecutionProvider")
                && e.reason.contains("double"),
            "{}",
            e.reason
        );
        // No provider, or OpenVINO (no kernel table): nothing to check.
        assert!(check_on(None, &f64_).is_ok());
        assert!(check_on(Some("openvino"), &f64_).is_ok());
    }
}
