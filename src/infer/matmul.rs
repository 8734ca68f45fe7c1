//! Matrix products: MatMul (numpy matmul semantics, as the ONNX MatMul doc states: 1-D
//! operands are promoted and the added axis removed, batch axes broadcast), Gemm,
//! MatMulInteger, QLinearMatMul.

use crate::tensor::dtype::INT32;

use super::ctx::{Ctx, Out};
use super::dims;
use super::Dim;

/// The shape of `matmul(a, b)`, with the last two axes of each operand swapped first when
/// `trans_a` / `trans_b` (rank >= 2 only).
pub(crate) fn matmul_shape(a: &[Dim], b: &[Dim], trans_a: bool, trans_b: bool) -> Option<Vec<Dim>> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    let (la, lb) = (a.len(), b.len());
    if trans_a && la >= 2 {
        a.swap(la - 2, la - 1);
    }
    if trans_b && lb >= 2 {
        b.swap(lb - 2, lb - 1);
    }
    let a_vec = la == 1;
    let b_vec = lb == 1;
    if a_vec {
        a.insert(0, Dim::Known(1));
    }
    if b_vec {
        b.push(Dim::Known(1));
    }
    let (la, lb) = (a.len(), b.len());
    let batch = dims::broadcast_shapes(&[Some(&a[..la - 2]), Some(&b[..lb - 2])])?;
    let mut out = batch;
    if !a_vec {
        out.push(a[la - 2].clone());
    }
    if !b_vec {
        out.push(b[lb - 1].clone());
    }
    Some(out)
}

fn matmul_of(c: &Ctx, a: usize, b: usize, dtype: Option<i32>) -> Vec<Out> {
    let shape = match (c.shape(a), c.shape(b)) {
        (Some(x), Some(y)) => matmul_shape(x, y, false, false),
        _ => None,
    };
    vec![Out::new(dtype, shape)]
}

pub(crate) fn matmul(c: &Ctx) -> Vec<Out> {
    matmul_of(c, 0, 1, c.dtype(0))
}

pub(crate) fn matmul_integer(c: &Ctx) -> Vec<Out> {
    matmul_of(c, 0, 1, Some(INT32))
}

/// `QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)`.
pub(crate) fn qlinear_matmul(c: &Ctx) -> Vec<Out> {
    matmul_of(c, 0, 3, c.dtype(7).or(c.dtype(0)))
}

/// The `[M, N]` of a Gemm-like op with A at input 0 and B at input 1.
pub(crate) fn gemm_shape(c: &Ctx) -> Option<Vec<Dim>> {
    let ta = c.attr_i("transA").unwrap_or(0) != 0;
    let tb = c.attr_i("transB").unwrap_or(0) != 0;
    let m = match c.shape(0) {
        Some([x, y]) => Some(if ta { y.clone() } else { x.clone() }),
        Some(_) => return Some(vec![Dim::Unknown, Dim::Unknown]),
        None => None,
    };
    let n = match c.shape(1) {
        Some([x, y]) => Some(if tb { x.clone() } else { y.clone() }),
        Some(_) => return Some(vec![Dim::Unknown, Dim::Unknown]),
        None => None,
    };
    Some(vec![m.unwrap_or(Dim::Unknown), n.unwrap_or(Dim::Unknown)])
}

/// `Gemm`: `[M, N]`.
pub(crate) fn gemm(c: &Ctx) -> Vec<Out> {
    vec![Out::new(c.dtype(0), gemm_shape(c))]
}

/// `Attention` (ONNX 23+; the Attention doc gives every shape): Q/K/V are 4-D
/// `[B, heads, seq, head_size]` or 3-D `[B, seq, heads * head_size]` (heads from
/// `q_num_heads` / `kv_num_heads`). Y has Q's layout with V's head size; the caches are
/// `[B, kv_heads, past + kv_seq, head_size]`; the QK output `[B, q_heads, q_seq, total]`.
pub(crate) fn attention(c: &Ctx) -> Vec<Out> {
    let attr_dim = |n: &str| c.attr_i(n).map_or(Dim::Unknown, dims::known_dim);
    let div = |a: &Dim, b: &Dim| match (a, b) {
        (Dim::Known(x), Dim::Known(y)) if *y > 0 && x % y == 0 => Dim::Known(x / y),
        _ => Dim::Unknown,
    };
    let (q, k, v) = (c.shape(0), c.shape(1), c.shape(2));
    let (batch, q_heads, q_seq, q_3d) = match q {
        Some([b, n, s, _]) => (b.clone(), n.clone(), s.clone(), Some(false)),
        Some([b, s, _]) => (b.clone(), attr_dim("q_num_heads"), s.clone(), Some(true)),
        _ => (Dim::Unknown, Dim::Unknown, Dim::Unknown, None),
    };
    let (kv_heads, kv_seq, head) = match k {
        Some([_, n, s, h]) => (n.clone(), s.clone(), h.clone()),
        Some([_, s, hid]) => {
            let n = attr_dim("kv_num_heads");
            let h = div(hid, &n);
            (n, s.clone(), h)
        }
        _ => (Dim::Unknown, Dim::Unknown, Dim::Unknown),
    };
    let v_head = match v {
        Some([_, _, _, h]) => h.clone(),
        Some([_, _, hid]) => div(hid, &kv_heads),
        _ => Dim::Unknown,
    };
    let total = if c.has(4) {
        let past = c
            .shape(4)
            .and_then(|p| p.get(2).cloned())
            .unwrap_or(Dim::Unknown);
        dims::add(&past, &kv_seq)
    } else {
        kv_seq
    };
    let y = match q_3d {
        Some(false) => Some(vec![
            batch.clone(),
            q_heads.clone(),
            q_seq.clone(),
            v_head.clone(),
        ]),
        Some(true) => Some(vec![
            batch.clone(),
            q_seq.clone(),
            dims::mul(&q_heads, &v_head),
        ]),
        None => None,
    };
    vec![
        Out::new(c.dtype(0), y),
        Out::new(
            c.dtype(1),
            Some(vec![batch.clone(), kv_heads.clone(), total.clone(), head]),
        ),
        Out::new(
            c.dtype(2),
            Some(vec![batch.clone(), kv_heads, total.clone(), v_head]),
        ),
        Out::new(c.dtype(0), Some(vec![batch, q_heads, q_seq, total])),
    ]
}
