//! Estimated work of a node, from inferred shapes: floating-point operations for the heavy
//! ops (Conv, ConvTranspose, MatMul, Gemm and their fused forms) plus the bytes it reads and
//! writes. Used by `barrier` budgets and by the `work` predicate. Unknown shapes give `None`:
//! an estimate is never guessed.
//!
//! Formulas (multiply-add counted as 2 operations):
//! - Conv: 2 · N · M · ∏(output spatial) · (C / group) · ∏(kernel)   (output-stationary count)
//! - ConvTranspose: 2 · N · C · ∏(input spatial) · (M / group) · ∏(kernel)
//! - MatMul [.., m, k] x [.., k, n]: 2 · batch · m · k · n; Gemm likewise on its 2-D operands.

use crate::infer::Facts;
use crate::ir::{Graph, NodeId};
use crate::tensor::elem_size;

fn numel(d: &[i64]) -> Option<u64> {
    d.iter().try_fold(1u64, |acc, &x| {
        u64::try_from(x).ok().and_then(|x| acc.checked_mul(x))
    })
}

/// Floating-point operations of a node, when it is one of the heavy ops and shapes are known;
/// `Some(0)` for other ops.
pub fn flops(g: &Graph, n: NodeId, s: &Facts) -> Option<u64> {
    let node = g.node(n);
    let input = |i: usize| node.inputs.get(i).copied().flatten();
    let output = |i: usize| node.outputs.get(i).copied().flatten();
    let op = node.op_type.as_str();
    match op {
        "Conv" | "FusedConv" | "NhwcConv" => {
            let w = s.dims(input(1)?)?;
            let y = s.dims(output(0)?)?;
            if w.len() < 3 || y.len() != w.len() {
                return None;
            }
            let kernel = numel(&w[2..])?;
            let spatial = if op == "NhwcConv" {
                numel(&y[1..y.len() - 1])?
            } else {
                numel(&y[2..])?
            };
            let (batch, m) = (u64::try_from(y[0]).ok()?, u64::try_from(w[0]).ok()?);
            let cg = u64::try_from(w[1]).ok()?;
            2u64.checked_mul(batch)?
                .checked_mul(m)?
                .checked_mul(spatial)?
                .checked_mul(cg)?
                .checked_mul(kernel)
        }
        "ConvTranspose" => {
            let w = s.dims(input(1)?)?;
            let x = s.dims(input(0)?)?;
            if w.len() < 3 || x.len() != w.len() {
                return None;
            }
            let per = numel(&w[1..])?; // (M / group) · ∏kernel
            2u64.checked_mul(numel(&x)?)?.checked_mul(per)
        }
        "MatMul" | "FusedMatMul" | "Gemm" | "FusedGemm" => {
            let a = s.dims(input(0)?)?;
            let y = s.dims(output(0)?)?;
            if a.len() < 2 || y.is_empty() {
                return None;
            }
            let trans_a = node.attr("transA").and_then(|a| a.i()).unwrap_or(0) != 0;
            let k = if trans_a {
                a[a.len() - 2]
            } else {
                a[a.len() - 1]
            };
            2u64.checked_mul(numel(&y)?)?
                .checked_mul(u64::try_from(k).ok()?)
        }
        _ => Some(0),
    }
}

/// Bytes a node reads and writes (all inputs and outputs with known shape and type).
pub fn bytes(g: &Graph, n: NodeId, s: &Facts) -> Option<u64> {
    let node = g.node(n);
    let mut total = 0u64;
    for v in node.inputs.iter().chain(node.outputs.iter()).flatten() {
        // The element count without collecting the dims (this runs per node per cut).
        let info = s.info(*v);
        let n = info.numel()?;
        let t = info.dtype?;
        total = total.checked_add(n.checked_mul(elem_size(t))?)?;
    }
    Some(total)
}

/// The work estimate: operations plus bytes moved (one unit each).
pub fn work(g: &Graph, n: NodeId, s: &Facts) -> Option<u64> {
    flops(g, n, s)?.checked_add(bytes(g, n, s)?)
}
