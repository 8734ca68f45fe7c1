//! ONNX Runtime contrib operators (`com.microsoft`) and the NCHWc layout operators
//! (`com.microsoft.nchwc`) its optimizer writes. Shapes follow the ONNX Runtime contrib
//! operator docs (ContribOperators.md) where they state them; what they leave open stays
//! unknown.
//!
//! NCHWc: ONNX Runtime keeps blocked tensors as 4-D `[N, C_padded, H, W]` tensors whose
//! channel count is rounded up to the block size of the machine that optimized the model
//! (8 or 16). An nchwc `Conv` writes `W[0]` (already padded) channels; `ReorderOutput`
//! restores the logical count from its `channels` attribute (NHWC with `channels_last`);
//! `ReorderInput` pads to the block size, which the file does not record: it is taken from
//! the model's own evidence (an nchwc `Conv` writing `W[0]` channels read back by a
//! `ReorderOutput` of `channels` logical ones pins the block down when exactly one
//! candidate size rounds one to the other), else a count that is a multiple of 16 (so of
//! every block size ONNX Runtime uses) is kept, and any other is unknown.
//! Pooling and upsampling keep the (padded) channel count.

use super::conv::{self, Window};
use super::ctx::{Ctx, Out};
use super::dims;
use super::matmul::{gemm_shape, matmul_shape};
use super::Dim;
use crate::ir::{Graph, Origin};

/// The domain of ONNX Runtime's NCHWc (blocked layout) operators.
const NCHWC_DOMAIN: &str = "com.microsoft.nchwc";

/// `FusedConv(X, W, B, Z)`: a Conv.
pub(crate) fn fused_conv(c: &Ctx) -> Vec<Out> {
    conv::conv(c)
}

/// `FusedGemm`: a Gemm.
pub(crate) fn fused_gemm(c: &Ctx) -> Vec<Out> {
    vec![Out::new(c.dtype(0), gemm_shape(c))]
}

/// `FusedMatMul(A, B)`: `alpha * op(A) @ op(B)` with transA/transB on the last two axes;
/// the batch transposes (transBatchA/B) are left unknown.
pub(crate) fn fused_matmul(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let tba = c.attr_i("transBatchA").unwrap_or(0) != 0;
    let tbb = c.attr_i("transBatchB").unwrap_or(0) != 0;
    let ta = c.attr_i("transA").unwrap_or(0) != 0;
    let tb = c.attr_i("transB").unwrap_or(0) != 0;
    let shape = match (c.shape(0), c.shape(1)) {
        (Some(a), Some(b)) if !tba && !tbb => {
            // A transposed 1-D operand is not defined: leave it.
            if (ta && a.len() < 2) || (tb && b.len() < 2) {
                None
            } else {
                matmul_shape(a, b, ta, tb)
            }
        }
        _ => None,
    };
    vec![Out::new(dtype, shape)]
}

/// The NHWC window ops: `X [N, spatial..., C]`.
fn nhwc_shape(c: &Ctx, channels: Dim) -> Option<Vec<Dim>> {
    let xs = c.shape(0)?;
    if xs.len() < 3 {
        return None;
    }
    let n = xs.len() - 2;
    let mut out = vec![xs[0].clone()];
    match Window::read(c, n, None) {
        Some(win) => {
            out.extend((0..n).map(|i| win.out_dim(i, &xs[i + 1], c.node.op_type != "NhwcConv")))
        }
        None => out.extend(std::iter::repeat_n(Dim::Unknown, n)),
    }
    out.push(channels);
    Some(out)
}

/// A window op on a channels-last input `x` (`[N, spatial..., C]`): `[N, out..., channels]`,
/// the kernel from `kernel_shape`, else `kernel`.
fn channels_last_window(
    c: &Ctx,
    x: usize,
    kernel: Option<Vec<i64>>,
    channels: Dim,
    pool: bool,
) -> Option<Vec<Dim>> {
    let xs = c.shape(x)?;
    if xs.len() < 3 {
        return None;
    }
    let n = xs.len() - 2;
    let win = Window::read(c, n, kernel)?;
    let mut out = vec![xs[0].clone()];
    out.extend((0..n).map(|i| win.out_dim(i, &xs[i + 1], pool)));
    out.push(channels);
    Some(out)
}

/// `NhwcConv(X [N, H, W, C], W [M, ...])`: `[N, oH, oW, M]` (kernel from `kernel_shape`).
pub(crate) fn nhwc_conv(c: &Ctx) -> Vec<Out> {
    let m = c
        .shape(1)
        .and_then(|s| s.first().cloned())
        .unwrap_or(Dim::Unknown);
    vec![Out::new(c.dtype(0), nhwc_shape(c, m))]
}

/// `NhwcMaxPool(X [N, H, W, C])`: `[N, oH, oW, C]`.
pub(crate) fn nhwc_max_pool(c: &Ctx) -> Vec<Out> {
    let ch = c
        .shape(0)
        .and_then(|s| s.last().cloned())
        .unwrap_or(Dim::Unknown);
    vec![Out::new(c.dtype(0), nhwc_shape(c, ch))]
}

/// nchwc `Conv(X, W, B, Sum)`: `[N, W[0], out...]`.
pub(crate) fn nchwc_conv(c: &Ctx) -> Vec<Out> {
    conv::conv(c)
}

/// nchwc `ReorderInput`: `[N, C, H, W]` (or NHWC with `channels_last`) to blocked NCHW
/// with the channels rounded up to the (unrecorded) block size.
pub(crate) fn reorder_input(c: &Ctx) -> Vec<Out> {
    let last = c.attr_i("channels_last").unwrap_or(0) != 0;
    let shape = c.shape(0).map(|s| {
        if s.len() < 3 {
            return vec![Dim::Unknown; s.len()];
        }
        let (ch, spatial): (&Dim, Vec<Dim>) = if last {
            (&s[s.len() - 1], s[1..s.len() - 1].to_vec())
        } else {
            (&s[1], s[2..].to_vec())
        };
        let ch = match (ch, c.env.nchwc_block) {
            (Dim::Known(k), Some(b)) => dims::opt_dim(round_up(*k, b)),
            (Dim::Known(k), None) if k % 16 == 0 => Dim::Known(*k),
            _ => Dim::Unknown,
        };
        let mut o = vec![s[0].clone(), ch];
        o.extend(spatial);
        o
    });
    vec![Out::new(c.dtype(0), shape)]
}

/// nchwc `ReorderOutput`: back to `channels` logical channels (NHWC with `channels_last`).
pub(crate) fn reorder_output(c: &Ctx) -> Vec<Out> {
    let last = c.attr_i("channels_last").unwrap_or(0) != 0;
    let ch = c.attr_i("channels").map_or(Dim::Unknown, dims::known_dim);
    let shape = c.shape(0).map(|s| {
        if s.len() < 3 {
            return vec![Dim::Unknown; s.len()];
        }
        let mut o = vec![s[0].clone()];
        if last {
            o.extend_from_slice(&s[2..]);
            o.push(ch.clone());
        } else {
            o.push(ch.clone());
            o.extend_from_slice(&s[2..]);
        }
        o
    });
    vec![Out::new(c.dtype(0), shape)]
}

/// nchwc `Upsample`: integer `scales` per axis.
pub(crate) fn nchwc_upsample(c: &Ctx) -> Vec<Out> {
    let shape = c.shape(0).map(|s| match c.attr_ints("scales") {
        Some(sc) if sc.len() == s.len() => s
            .iter()
            .zip(sc)
            .map(|(d, &k)| {
                if k >= 1 {
                    dims::mul(d, &Dim::Known(k))
                } else {
                    Dim::Unknown
                }
            })
            .collect(),
        _ => vec![Dim::Unknown; s.len()],
    });
    vec![Out::new(c.dtype(0), shape)]
}

fn round_up(x: i64, b: i64) -> Option<i64> {
    dims::ceil_div(x, b)?.checked_mul(b)
}

/// The NCHWc block size a model was optimized for, when its nchwc `Conv` -> `ReorderOutput`
/// pairs leave exactly one candidate.
pub(crate) fn nchwc_block(g: &Graph) -> Option<i64> {
    let mut candidates: Vec<i64> = vec![2, 4, 8, 16, 32, 64, 128];
    let mut evidence = false;
    let mut first_dims: Option<std::collections::HashMap<crate::ir::ValueId, i64>> = None;
    for &id in &g.order {
        let n = g.node(id);
        if n.domain() != NCHWC_DOMAIN || n.op_type != "ReorderOutput" {
            continue;
        }
        let Some(channels) = n.attr("channels").and_then(|a| a.i()) else {
            continue;
        };
        let Some(Origin::Node { node: prod, .. }) = n
            .inputs
            .first()
            .copied()
            .flatten()
            .map(|v| g.value(v).origin)
        else {
            continue;
        };
        let Some(p) = g.nodes.node_weight(prod) else {
            continue;
        };
        if p.domain() != NCHWC_DOMAIN || p.op_type != "Conv" {
            continue;
        }
        let first = first_dims.get_or_insert_with(|| {
            g.initializers
                .iter()
                .filter_map(|i| Some((i.value, *i.tensor.dims.first()?)))
                .collect()
        });
        let Some(&padded) = p
            .inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|w| first.get(&w))
        else {
            continue;
        };
        evidence = true;
        candidates.retain(|&b| round_up(channels, b) == Some(padded));
    }
    match candidates.as_slice() {
        [b] if evidence => Some(*b),
        _ => None,
    }
}

/// Mark the values that hold NCHWc-blocked tensors: outputs of NCHWc operators other than
/// `ReorderOutput`, and of any operator (element-wise ops of any domain, `Concat`, ORT's
/// `Reshape`s) that reads one, except `Shape` and `Size`. `order` is topological.
pub(crate) fn mark_blocked(g: &Graph, order: &[crate::ir::NodeId], blocked: &mut [bool]) {
    if !g.order.iter().any(|&n| g.node(n).domain() == NCHWC_DOMAIN) {
        return;
    }
    for &id in order {
        let Some(node) = g.nodes.node_weight(id) else {
            continue;
        };
        mark_outputs_blocked(node, blocked);
    }
}

/// Mark `node`'s outputs blocked when it writes NCHWc-blocked tensors, given which of its
/// inputs are: every node of the NCHWc domain but `ReorderOutput` does, and any other node
/// that reads a blocked tensor (but `Shape` and `Size`) passes the layout on. Without a node
/// of that domain in the graph nothing is blocked, and this marks nothing.
pub(crate) fn mark_outputs_blocked(node: &crate::ir::Node, blocked: &mut [bool]) {
    let is = |b: &[bool], v: &crate::ir::ValueId| b.get(v.index()).copied().unwrap_or(false);
    let out_blocked = if node.domain() == NCHWC_DOMAIN {
        node.op_type != "ReorderOutput"
    } else {
        !matches!(node.op_type.as_str(), "Shape" | "Size")
            && node.inputs.iter().flatten().any(|v| is(blocked, v))
    };
    if out_blocked {
        for v in node.outputs.iter().flatten() {
            if let Some(b) = blocked.get_mut(v.index()) {
                *b = true;
            }
        }
    }
}

/// `QLinearAdd` / `QLinearMul (A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)`: A and B
/// broadcast (numpy rules); the type of C's zero point, else A's.
pub(crate) fn qlinear_binary(c: &Ctx) -> Vec<Out> {
    let shape = match (c.shape(0), c.shape(3)) {
        (Some(a), Some(b)) => dims::broadcast_shapes(&[Some(a), Some(b)]),
        _ => None,
    };
    vec![Out::new(c.dtype(7).or(c.dtype(0)), shape)]
}

/// The one-input QLinear ops `(X, X_scale, X_zp, Y_scale, Y_zp)` whose output has X's shape:
/// QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax.
pub(crate) fn qlinear_like_x(c: &Ctx) -> Vec<Out> {
    vec![Out::with_shape(
        c.dtype(4).or(c.dtype(0)),
        c.info(0).shape.clone(),
    )]
}

/// `QLinearGlobalAveragePool`: `[N, C, 1...]`, or `[N, 1..., C]` with `channels_last`.
pub(crate) fn qlinear_global_pool(c: &Ctx) -> Vec<Out> {
    let last = c.attr_i("channels_last").unwrap_or(0) != 0;
    let shape = c.shape(0).map(|s| {
        let r = s.len();
        s.iter()
            .enumerate()
            .map(|(i, d)| {
                let keep = i == 0 || if last { i + 1 == r } else { i == 1 };
                if keep {
                    d.clone()
                } else {
                    Dim::Known(1)
                }
            })
            .collect()
    });
    vec![Out::new(c.dtype(4).or(c.dtype(0)), shape)]
}

/// `QLinearAveragePool`: AveragePool's window; with `channels_last` only the rank is kept.
pub(crate) fn qlinear_average_pool(c: &Ctx) -> Vec<Out> {
    let dt = c.dtype(4).or(c.dtype(0));
    if c.attr_i("channels_last").unwrap_or(0) != 0 {
        let ch = c
            .shape(0)
            .and_then(|s| s.last().cloned())
            .unwrap_or(Dim::Unknown);
        let shape = channels_last_window(c, 0, None, ch, true)
            .or_else(|| c.rank(0).map(|r| vec![Dim::Unknown; r]));
        return vec![Out::new(dt, shape)];
    }
    let mut out = conv::pool(c);
    out.truncate(1);
    out[0].info.dtype = dt;
    out
}

/// `QLinearConcat(Y_scale, Y_zp, X0, X0_scale, X0_zp, ...)`: the inputs joined on `axis`.
pub(crate) fn qlinear_concat(c: &Ctx) -> Vec<Out> {
    let dt = c.dtype(1).or(c.dtype(2));
    let xs: Vec<usize> = (2..c.n_inputs()).step_by(3).collect();
    let shapes: Option<Vec<&[Dim]>> = xs.iter().map(|&i| c.shape(i)).collect();
    let shape = shapes.and_then(|ss| {
        let first = ss.first()?;
        let r = first.len() as i64;
        let axis = c.attr_i("axis")?;
        let a = usize::try_from(if axis < 0 { axis + r } else { axis }).ok()?;
        if a >= first.len() || ss.iter().any(|s| s.len() != first.len()) {
            return None;
        }
        let mut out = first.to_vec();
        out[a] = ss
            .iter()
            .map(|s| s[a].clone())
            .reduce(|x, y| dims::add(&x, &y))?;
        Some(out)
    });
    vec![Out::new(dt, shape)]
}

/// com.microsoft `QLinearConv`: ONNX QLinearConv; with `channels_last` only the rank is kept.
pub(crate) fn qlinear_conv_ms(c: &Ctx) -> Vec<Out> {
    if c.attr_i("channels_last").unwrap_or(0) != 0 {
        // X is [N, spatial..., C]; W keeps its [M, C/g, k...] layout.
        let w = c.shape(3);
        let kernel = w.and_then(|s| s.get(2..)?.iter().map(Dim::known).collect());
        let m = w.and_then(|s| s.first().cloned()).unwrap_or(Dim::Unknown);
        let shape = channels_last_window(c, 0, kernel, m, false)
            .or_else(|| c.rank(0).map(|r| vec![Dim::Unknown; r]));
        return vec![Out::new(c.dtype(7).or(c.dtype(0)), shape)];
    }
    conv::qlinear_conv(c)
}

/// `QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?)`: `[M, N]`; quantized like
/// y's zero point (A's type without one) when `y_scale` is given, else float (the scale's).
pub(crate) fn qgemm(c: &Ctx) -> Vec<Out> {
    let ta = c.attr_i("transA").unwrap_or(0) != 0;
    let tb = c.attr_i("transB").unwrap_or(0) != 0;
    // M is A's first axis (its second when transposed); N is B's second (first when
    // transposed).
    let pick = |i: usize, second: bool| match c.shape(i) {
        Some([x, y]) => Some(if second { y.clone() } else { x.clone() }),
        _ => None,
    };
    let shape = match (pick(0, ta), pick(3, !tb)) {
        (Some(m), Some(n)) => Some(vec![m, n]),
        _ => Some(vec![Dim::Unknown, Dim::Unknown]),
    };
    let dt = if c.has(7) {
        c.dtype(8).or(c.dtype(0))
    } else {
        c.dtype(1)
    };
    vec![Out::new(dt, shape)]
}

/// `DynamicQuantizeMatMul(A, B, ...)`: `matmul(A, B)` in A's float type.
pub(crate) fn dynamic_quantize_matmul(c: &Ctx) -> Vec<Out> {
    let shape = match (c.shape(0), c.shape(1)) {
        (Some(a), Some(b)) => matmul_shape(a, b, false, false),
        _ => None,
    };
    vec![Out::new(c.dtype(0), shape)]
}

/// `MatMulIntegerToFloat(A, B, a_scale, ...)`: `matmul(A, B)` in the scale's float type.
pub(crate) fn matmul_integer_to_float(c: &Ctx) -> Vec<Out> {
    let shape = match (c.shape(0), c.shape(1)) {
        (Some(a), Some(b)) => matmul_shape(a, b, false, false),
        _ => None,
    };
    vec![Out::new(c.dtype(2), shape)]
}

/// `DynamicQuantizeLSTM`: LSTM's outputs. R is `[D, hidden, 4*hidden]` here, so without the
/// `hidden_size` attribute the hidden size is R's axis 1.
pub(crate) fn dynamic_quantize_lstm(c: &Ctx) -> Vec<Out> {
    let mut out = super::rnn::recurrent(c);
    if c.attr_i("hidden_size").is_none() {
        let h = c
            .shape(2)
            .and_then(|r| r.get(1).cloned())
            .unwrap_or(Dim::Unknown);
        for o in &mut out {
            if let Some(s) = &mut o.info.shape {
                if let Some(last) = s.make_mut().last_mut() {
                    *last = h.clone();
                }
            }
        }
    }
    out
}
