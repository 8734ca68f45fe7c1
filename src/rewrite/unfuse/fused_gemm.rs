//! FusedGemm (ONNX Runtime contrib operator).

use crate::ir::{Graph, NodeId};
use crate::rewrite::Patch;
use crate::tensor::dtype;

use super::activation::{self, Act};
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// FusedGemm: `Y = activation(Gemm(A, B, C))`.
///
/// ContribOperators.md, FusedGemm: "the same as Gemm besides it includes attributes
/// activation and leaky_relu_alpha"; the activation's parameters are `activation_alpha`,
/// `activation_beta`, `activation_gamma` (ONNX Runtime `contrib_ops/cpu/fused_gemm.cc` applies
/// the activation to the Gemm output).
pub fn fused_gemm(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    let gemm_attrs = ["alpha", "beta", "transA", "transB"];
    let mut known = gemm_attrs.to_vec();
    known.extend([
        "activation",
        "activation_alpha",
        "activation_beta",
        "activation_gamma",
        "leaky_relu_alpha",
    ]);
    rw.only_attrs(&known)?;
    let mut act = activation::from_gemm_attrs(&rw)?;
    if let (Act::LeakyRelu(_), Some(a)) = (act, rw.attr("leaky_relu_alpha").and_then(|a| a.f())) {
        if rw.attr("activation_alpha").is_none() {
            act = Act::LeakyRelu(a);
        }
    }
    if rw.opset < activation::min_opset(act) {
        return unsupported(format!(
            "the activation needs opset >= {}; the model imports {}",
            activation::min_opset(act),
            rw.opset
        ));
    }
    let a = rw.need(0, "A")?;
    let b = rw.need(1, "B")?;
    let c = rw.input(2);
    if c.is_none() && rw.opset < 11 {
        return unsupported("Gemm without C needs opset >= 11");
    }
    let attrs = rw.copy_attrs(&gemm_attrs);
    let y = rw.op_opt("Gemm", &[Some(a), Some(b), c], attrs);
    let dt = match act {
        Act::Clip(..) => rw.float_dtype(0)?,
        _ => dtype::FLOAT,
    };
    let y = activation::apply(&mut rw, y, act, dt);
    rw.finish(&[(0, y)])
}
