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
    let a = operand(&mut rw, 0, "transA", "transBatchA")?;
    let b = operand(&mut rw, 1, "transB", "transBatchB")?;
    let mut y = rw.op("MatMul", &[a, b], &[]);
    if alpha != 1.0 {
        let dt = rw.float_dtype(0)?;
        y = rw.scale(y, alpha as f64, dt);
    }
    rw.finish(&[(0, y)])
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
