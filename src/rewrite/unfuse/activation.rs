//! Activations fused into convolutions and GEMMs, applied as standard ONNX operators.
//!
//! FusedConv and NCHWc Conv name the activation in `activation` and take its parameters from
//! `activation_params` (ONNX Runtime `contrib_ops/cpu/fused_activation.cc`,
//! `GetFusedActivationAttr`: LeakyRelu takes 1 parameter (alpha), Clip 2 (min, max),
//! HardSigmoid 2 (alpha, beta), and the count must match; Relu, Tanh, Sigmoid take none).
//! FusedGemm takes `activation_alpha`/`activation_beta`/`activation_gamma` (ContribOperators.md,
//! FusedGemm), which map onto the ONNX activation's own attributes.

use crate::rewrite::{AttrValue, PValue};

use super::rw::{unsupported, Rw};
use super::Unsupported;

/// An activation and its parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Act {
    Identity,
    Relu,
    Tanh,
    Sigmoid,
    LeakyRelu(f32),
    Clip(f32, f32),
    HardSigmoid(f32, f32),
    Elu(f32),
    Selu(f32, f32),
    ThresholdedRelu(f32),
    Softplus,
    Softsign,
}

/// The activation of a FusedConv / NCHWc Conv node (`activation`, `activation_params`).
pub fn from_conv_attrs(rw: &Rw) -> Result<Act, Unsupported> {
    let Some(name) = rw.attr_s("activation") else {
        return Ok(Act::Identity);
    };
    let params = rw.attr_floats("activation_params").unwrap_or_default();
    let need = |n: usize| -> Result<(), Unsupported> {
        if params.len() != n {
            return unsupported(format!(
                "activation {name} needs {n} activation_params, the node has {}",
                params.len()
            ));
        }
        Ok(())
    };
    Ok(match name.as_str() {
        "Relu" => Act::Relu,
        "Tanh" => Act::Tanh,
        "Sigmoid" => Act::Sigmoid,
        "LeakyRelu" => {
            need(1)?;
            Act::LeakyRelu(params[0])
        }
        "Clip" => {
            need(2)?;
            Act::Clip(params[0], params[1])
        }
        "HardSigmoid" => {
            need(2)?;
            Act::HardSigmoid(params[0], params[1])
        }
        other => return unsupported(format!("fused activation '{other}' is not supported")),
    })
}

/// The activation of a FusedGemm node. Defaults are those of the ONNX operators.
pub fn from_gemm_attrs(rw: &Rw) -> Result<Act, Unsupported> {
    let Some(name) = rw.attr_s("activation") else {
        return Ok(Act::Identity);
    };
    let a = |d: f32| rw.attr_f("activation_alpha", d);
    let b = |d: f32| rw.attr_f("activation_beta", d);
    let gm = |d: f32| rw.attr_f("activation_gamma", d);
    Ok(match name.as_str() {
        "Relu" => Act::Relu,
        "Tanh" => Act::Tanh,
        "Sigmoid" => Act::Sigmoid,
        "LeakyRelu" => Act::LeakyRelu(a(0.01)),
        "HardSigmoid" => Act::HardSigmoid(a(0.2), b(0.5)),
        "Elu" => Act::Elu(a(1.0)),
        "Selu" => Act::Selu(a(1.673_263_2), gm(1.050_701)),
        "ThresholdedRelu" => Act::ThresholdedRelu(a(1.0)),
        "Softplus" => Act::Softplus,
        "Softsign" => Act::Softsign,
        other => return unsupported(format!("fused activation '{other}' is not supported")),
    })
}

/// Apply `act` to `x` (element type `dt`).
pub fn apply(rw: &mut Rw, x: PValue, act: Act, dt: i32) -> PValue {
    let f = AttrValue::Float;
    match act {
        Act::Identity => x,
        Act::Relu => rw.op("Relu", &[x], &[]),
        Act::Tanh => rw.op("Tanh", &[x], &[]),
        Act::Sigmoid => rw.op("Sigmoid", &[x], &[]),
        Act::LeakyRelu(a) => rw.op("LeakyRelu", &[x], &[("alpha", f(a))]),
        Act::Clip(lo, hi) => rw.clip(x, lo, hi, dt),
        Act::HardSigmoid(a, b) => rw.op("HardSigmoid", &[x], &[("alpha", f(a)), ("beta", f(b))]),
        Act::Elu(a) => rw.op("Elu", &[x], &[("alpha", f(a))]),
        Act::Selu(a, g) => rw.op("Selu", &[x], &[("alpha", f(a)), ("gamma", f(g))]),
        Act::ThresholdedRelu(a) => rw.op("ThresholdedRelu", &[x], &[("alpha", f(a))]),
        Act::Softplus => rw.op("Softplus", &[x], &[]),
        Act::Softsign => rw.op("Softsign", &[x], &[]),
    }
}

/// The opset an activation's operator needs.
pub fn min_opset(act: Act) -> i64 {
    match act {
        Act::ThresholdedRelu(_) => 10,
        _ => 1,
    }
}
