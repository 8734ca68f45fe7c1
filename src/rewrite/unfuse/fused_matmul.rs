//! FusedMatMul and TransposeMatMul (ONNX Runtime contrib operators).

use crate::ir::{Graph, NodeId};
use crate::rewrite::{AttrValue, PValue, Patch};

use super::fused_conv::permute;
use super::rw::{unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// FusedMatMul: `Y = alpha * MatMul(op(A), op(B))`.
///
/// ContribOperators.md, FusedMatMul: numpy matmul semantics; `transA`/`transB` transpose the
/// last two dimensions; `transBatchA`/`transBatchB` move the first dimension behind the other
/// batch dimensions ("transposed on the 1st dimension and batch dimensions (dim-1 to
/// dim-rank-2)": permutation [1, ..., r-2, 0, r-1]), applied before `trans*`; `alpha` scales
/// the product. (ONNX Runtime's `MatMulComputeHelper` and the onnxscript reference
/// implementation `fused_matmul_rule_sets_test.py` apply the batch permutation first.)
/// TransposeMatMul is the same operator under its older name.
///
/// Refused (the node stays on ONNX Runtime): `transA` with a 1-D B. ONNX Runtime's CPU kernel
/// (1.32) does not transpose A then: it reads A's `[..., K, M]` buffer as `[..., M, K]`
/// (`Y = reshape(A, [..., M, K]) @ B`), not what the operator documents; found by
/// `tools/fuzz_decomp.py` (kept in `tests/data/fuzz_regressions/decomp`).
pub fn fused_matmul(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&["alpha", "transA", "transB", "transBatchA", "transBatchB"])?;
    let alpha = rw.attr_f("alpha", 1.0);
    if rw.attr_i("transA", 0) != 0 {
        match rw.in_facts(1).rank() {
            Some(1) => {
                return unsupported(
                    "transA with a 1-D B (ONNX Runtime's kernel does not transpose A then)",
                )
            }
            Some(_) => {}
            None => return unsupported(
                "transA with a B of unknown rank (ONNX Runtime does not transpose A for a 1-D B)",
            ),
        }
    }
    if let Some(y) = as_gemm(&mut rw, alpha)? {
        return rw.finish(&[(0, y)]);
    }
    let a = operand(&mut rw, 0, "transA", "transBatchA")?;
    let b = operand(&mut rw, 1, "transB", "transBatchB")?;
    let mut y = rw.op("MatMul", &[a, b], &[]);
    if alpha != 1.0 {
        let dt = rw.float_dtype(0)?;
        y = rw.scale(y, alpha as f64, dt);
    }
    rw.finish(&[(0, y)])
}

/// FusedMatMul with operands of rank 1 or 2 as one ONNX `Gemm` (alpha, transA, transB), 1-D
/// operands reshaped to a row (A: `[1, K]`) or a column (B: `[K, 1]`) and the output back to
/// MatMul's shape. None where the MatMul form is used instead.
///
/// Why not `alpha * MatMul`: ONNX Runtime's kernel hands `alpha` and the transposes to MLAS's
/// SGEMM, which takes its M = 1 and N = 1 shortcuts (a row or a column times a matrix, summed
/// in groups of 4 without FMA) only where alpha is 1 and, for the transposed forms, by another
/// kernel. `alpha * MatMul(op(A), op(B))` goes through MatMul's own call (alpha 1, no
/// transposes), so for a vector operand the two sum the products in a different order and with
/// or without FMA; on a dot product with cancellation (fuzz cases FusedMatMulGroup_*, outputs
/// near 1e-5 of the terms) that was 1e-5 to 8e-5 of the output's scale, past the rounding bound.
/// ONNX Runtime's `Gemm` makes the same MLAS call with the same alpha, transposes, M, N, K and
/// leading dimensions (and packs a constant 2-D B as FusedMatMul does): bit-identical on every
/// instance measured, but one. With alpha 1 and a 1-D B, FusedMatMul takes MatMul's own path
/// (B stays 1-D, unpacked, and transB is ignored), so the plain MatMul form is kept there; it is
/// the same call. Batched operands keep the MatMul form (within float rounding; bit-identical
/// where neither M nor N is 1). Gemm without C needs opset 11.
fn as_gemm(rw: &mut Rw, alpha: f32) -> Result<Option<PValue>, Unsupported> {
    let (Some(ra), Some(rb)) = (rw.in_facts(0).rank(), rw.in_facts(1).rank()) else {
        return Ok(None);
    };
    if rw.opset < 11 || ra > 2 || rb > 2 || ra == 0 || rb == 0 || (alpha == 1.0 && rb == 1) {
        return Ok(None);
    }
    if alpha == 1.0 && rw.attr_i("transA", 0) == 0 && rw.attr_i("transB", 0) == 0 {
        // MatMul is the kernel's own call then.
        return Ok(None);
    }
    let a = rw.need(0, "A")?;
    let b = rw.need(1, "B")?;
    // ONNX Runtime ignores the transposes of a 1-D operand.
    let ta = ra == 2 && rw.attr_i("transA", 0) != 0;
    let tb = rb == 2 && rw.attr_i("transB", 0) != 0;
    let a2 = if ra == 1 { rw.reshape(a, &[1, -1])? } else { a };
    let b2 = if rb == 1 {
        match rw.const_f32(1) {
            Some((dims, vals)) if dims.len() == 1 => rw.f32s("b_col", &[dims[0], 1], &vals),
            _ => rw.reshape(b, &[-1, 1])?,
        }
    } else {
        b
    };
    let attrs = [
        ("alpha", AttrValue::Float(alpha)),
        ("transA", AttrValue::Int(ta as i64)),
        ("transB", AttrValue::Int(tb as i64)),
    ];
    let y = rw.op("Gemm", &[a2, b2], &attrs);
    Ok(Some(match (ra, rb) {
        (2, 2) => y,
        (1, 1) => rw.reshape(y, &[])?,
        // [1, N] -> [N]; [M, 1] -> [M].
        _ => rw.reshape(y, &[-1])?,
    }))
}

/// The permutation FusedMatMul applies to an operand of rank `r`.
fn operand_perm(r: usize, trans: bool, batch: bool) -> Vec<i64> {
    let mut p: Vec<i64> = (0..r as i64).collect();
    if batch {
        p = (1..r as i64 - 1).collect();
        p.push(0);
        p.push(r as i64 - 1);
    }
    if trans {
        p.swap(r - 1, r - 2);
    }
    p
}

fn operand(rw: &mut Rw, i: usize, trans: &str, batch: &str) -> Result<PValue, Unsupported> {
    let v = rw.need(i, if i == 0 { "A" } else { "B" })?;
    let t = rw.attr_i(trans, 0) != 0;
    let bt = rw.attr_i(batch, 0) != 0;
    if !t && !bt {
        return Ok(v);
    }
    let r = rw.rank(i, "FusedMatMul transposes need it")?;
    if r < 2 || (bt && r < 3) {
        return unsupported(format!("{trans}/{batch} on an operand of rank {r}"));
    }
    let perm = operand_perm(r, t, bt);
    // A float initializer is transposed once, here.
    if let Some((dims, vals)) = rw.const_f32(i) {
        if dims.len() == r {
            let (d, x) = permute(&dims, &vals, &perm);
            return Ok(rw.f32s(if i == 0 { "a_t" } else { "b_t" }, &d, &x));
        }
    }
    Ok(rw.op("Transpose", &[v], &[("perm", AttrValue::Ints(perm))]))
}

#[cfg(test)]
mod tests {
    use super::operand_perm;

    #[test]
    fn fused_matmul_permutations() {
        assert_eq!(operand_perm(2, true, false), vec![1, 0]);
        assert_eq!(operand_perm(3, true, false), vec![0, 2, 1]);
        assert_eq!(operand_perm(4, false, true), vec![1, 2, 0, 3]);
        // Batch move first, then swap the last two.
        assert_eq!(operand_perm(4, true, true), vec![1, 2, 3, 0]);
    }
}
