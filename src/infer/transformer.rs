//! The `com.microsoft` operators of transformer models: what ONNX Runtime's transformer
//! optimizer, its quantizers and onnxruntime-genai's model builder write (attention in its
//! fused, grouped-query, packed and decoder forms, the fused normalizations and
//! activations, `MatMulNBits`, the embedding layers...).
//!
//! Shapes follow ONNX Runtime's contrib operator docs (ContribOperators.md) and what its CPU
//! kernels return; sizes are kept symbolic where they come from the inputs (`batch`,
//! `past_sequence_length + sequence_length`). What the docs leave open stays unknown: a
//! dimension is never guessed. Element types: `T` follows input 0 (or the first input of
//! that type that is known), statistics outputs are float.

use crate::tensor::dtype::{FLOAT, INT32};

use super::ctx::{Ctx, Out};
use super::dims;
use super::matmul::matmul_shape;
use super::Dim;

/// The first known element type among inputs `ins`.
fn dtype_of(c: &Ctx, ins: &[usize]) -> Option<i32> {
    ins.iter().find_map(|&i| c.dtype(i))
}

/// Dimension `i` of input `x` (unknown when the rank is not known or too small).
fn dim(c: &Ctx, x: usize, i: usize) -> Dim {
    c.shape(x)
        .and_then(|s| s.get(i).cloned())
        .unwrap_or(Dim::Unknown)
}

/// The last dimension of input `x`.
fn last(c: &Ctx, x: usize) -> Dim {
    c.shape(x)
        .and_then(|s| s.last().cloned())
        .unwrap_or(Dim::Unknown)
}

/// A positive integer attribute.
fn attr_pos(c: &Ctx, name: &str) -> Option<i64> {
    c.attr_i(name).filter(|&v| v > 0)
}

/// The shape of input `x` with its last dimension set to `d` (`None` for an unknown rank or
/// a scalar).
fn with_last(c: &Ctx, x: usize, d: Dim) -> Option<Vec<Dim>> {
    let s = c.shape(x)?;
    if s.is_empty() {
        return None;
    }
    let mut o = s.to_vec();
    *o.last_mut()? = d;
    Some(o)
}

/// The shape of input `x`, with the dims of equal-rank input `y` filling what `x` leaves
/// unknown (the two must agree: a skip and its input).
fn like_either(c: &Ctx, x: usize, y: usize) -> Option<Vec<Dim>> {
    match (c.shape(x), c.shape(y)) {
        (Some(a), Some(b)) if a.len() == b.len() => {
            Some(a.iter().zip(b).map(|(p, q)| dims::unify(p, q)).collect())
        }
        (Some(a), _) => Some(a.to_vec()),
        // The skip may have fewer leading dims ([S, H] against [B, S, H]): its rank is no
        // guide to the input's.
        (None, _) => None,
    }
}

/// `[d0, ..., d(r-2), 1]`: the statistics of a normalization over the last axis.
fn stats_shape(s: Option<&[Dim]>) -> Option<Vec<Dim>> {
    let s = s?;
    if s.is_empty() {
        return None;
    }
    let mut o = s.to_vec();
    *o.last_mut()? = Dim::Known(1);
    Some(o)
}

/// `SkipLayerNormalization(input, skip, gamma, beta?, bias?)` and
/// `SkipSimplifiedLayerNormalization(input, skip, gamma, bias?)`: output and
/// `input_skip_bias_sum` (outputs 0 and 3) like the input, mean and inv_std_var (1, 2)
/// float `[.., 1]` (ONNX Runtime returns float statistics for fp16 models too).
pub(crate) fn skip_layer_norm(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[0, 1, 2]);
    let shape = like_either(c, 0, 1);
    let stats = stats_shape(shape.as_deref());
    vec![
        Out::new(t, shape.clone()),
        Out::new(Some(FLOAT), stats.clone()),
        Out::new(Some(FLOAT), stats),
        Out::new(t, shape),
    ]
}

/// `SimplifiedLayerNormalization(X, scale)` (RMS norm; ONNX Runtime registers it in the ONNX
/// domain, older models use com.microsoft): Y like X, inv_std_var float
/// `[d0, ..., d(axis-1), 1, ...]`.
pub(crate) fn simplified_layer_norm(c: &Ctx) -> Vec<Out> {
    let stats = c.shape(0).and_then(|s| {
        let a = dims::norm_axis(c.attr_i("axis").unwrap_or(-1), s.len())?;
        Some(
            s.iter()
                .enumerate()
                .map(|(i, d)| if i < a { d.clone() } else { Dim::Known(1) })
                .collect::<Vec<_>>(),
        )
    });
    let stash = c
        .attr_i("stash_type")
        .and_then(|t| i32::try_from(t).ok())
        .filter(|&t| t > 0)
        .unwrap_or(FLOAT);
    vec![
        Out::info(c.info(0).clone()),
        Out::new(Some(stash), stats.clone()),
        Out::new(Some(stash), stats),
    ]
}

/// The fused activations and biases whose output is like input 0 (`Gelu`, `FastGelu`,
/// `BiasGelu`, `QuickGelu`, `BiasAdd`, `BiasSoftmax`, `RotaryEmbedding`, `GroupNorm`...):
/// the type falls back on the other inputs of type `T` when input 0's is not known.
pub(crate) fn like_input0(c: &Ctx) -> Vec<Out> {
    let t = c.dtype(0).or_else(|| {
        // Inputs of the same type T (a bias, a skip); never an index input.
        match c.node.op_type.as_str() {
            "BiasGelu" | "FastGelu" | "BiasAdd" | "BiasSoftmax" | "GroupNorm" => {
                dtype_of(c, &[1, 2])
            }
            "RotaryEmbedding" => c.dtype(2),
            _ => None,
        }
    });
    vec![Out::with_shape(t, c.info(0).shape.clone())]
}

/// `SkipGroupNorm(X, gamma, beta, skip, bias?)`: Y and the optional sum S like X.
pub(crate) fn skip_group_norm(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[0, 3]);
    let shape = like_either(c, 0, 3);
    vec![Out::new(t, shape.clone()), Out::new(t, shape)]
}

/// `BiasSplitGelu(X [N, HW, D], bias [D])`: `[N, HW, D/2]`.
pub(crate) fn bias_split_gelu(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[0, 1]);
    let half = dims::div_exact(&last(c, 0), &Dim::Known(2));
    vec![Out::new(t, with_last(c, 0, half))]
}

/// `GemmFastGelu(X, W, bias?)`: `FastGelu(X @ W + bias)`, X's type.
pub(crate) fn gemm_fast_gelu(c: &Ctx) -> Vec<Out> {
    let shape = match (c.shape(0), c.shape(1)) {
        (Some(a), Some(b)) => matmul_shape(a, b, false, false),
        _ => None,
    };
    vec![Out::new(dtype_of(c, &[0, 1]), shape)]
}

/// `MatMulNBits(A [.., K], B, scales, zero_points?, g_idx?, bias?)` (also `MatMulBnb4`):
/// `[.., N]` of A's type, N from the attribute.
pub(crate) fn matmul_nbits(c: &Ctx) -> Vec<Out> {
    let n = attr_pos(c, "N").map_or(Dim::Unknown, Dim::Known);
    let t = c.dtype(0).or_else(|| c.dtype(2));
    vec![Out::new(t, with_last(c, 0, n))]
}

/// `GatherBlockQuantized(data, indices, scales, zero_points?)`: `data` gathered on
/// `gather_axis` by `indices`, dequantized to the scales' type. Packed `uint8` data holds
/// `8 / bits` values a byte along its last axis.
pub(crate) fn gather_block_quantized(c: &Ctx) -> Vec<Out> {
    let t = c.dtype(2);
    let shape = (|| {
        let d = c.shape(0)?;
        let idx = c.shape(1)?;
        let axis = dims::norm_axis(c.attr_i("gather_axis").unwrap_or(0), d.len())?;
        let mut d = d.to_vec();
        if c.dtype(0) == Some(crate::tensor::dtype::UINT8) {
            let bits = c.attr_i("bits").unwrap_or(4);
            if !matches!(bits, 2 | 4 | 8) {
                return None;
            }
            let l = d.last_mut()?;
            *l = dims::mul(l, &Dim::Known(8 / bits));
        }
        let mut o: Vec<Dim> = d[..axis].to_vec();
        o.extend_from_slice(idx);
        o.extend_from_slice(&d[axis + 1..]);
        Some(o)
    })();
    vec![Out::new(t, shape)]
}

/// The hidden sizes of `Attention`'s Q, K and V: `qkv_hidden_sizes`, else thirds of the
/// weights' second axis.
fn attention_hidden(c: &Ctx, w: usize) -> (Dim, Dim) {
    match c.attr_ints("qkv_hidden_sizes").filter(|v| !v.is_empty()) {
        Some([_, k, v]) => (dims::known_dim(*k), dims::known_dim(*v)),
        Some(_) => (Dim::Unknown, Dim::Unknown),
        None => {
            let third = dims::div_exact(&dim(c, w, 1), &Dim::Known(3));
            (third.clone(), third)
        }
    }
}

/// The present state of `Attention`-style ops: `[2, B, N, P + S, H]` from the past
/// `[2, B, N, P, H]` (its own shape when past and present share a buffer), else
/// `[2, B, N, S, hidden / N]`.
fn attention_present(c: &Ctx, past: usize, b: &Dim, s: &Dim, k_hidden: &Dim) -> Option<Vec<Dim>> {
    let share = c.attr_i("past_present_share_buffer").unwrap_or(0) != 0;
    if c.has(past) {
        let p = c.shape(past)?;
        if p.len() != 5 {
            return None;
        }
        if share {
            return Some(p.to_vec());
        }
        let mut o = p.to_vec();
        o[1] = dims::unify(&o[1], b);
        o[3] = dims::add(&p[3], s);
        return Some(o);
    }
    let n = attr_pos(c, "num_heads")?;
    Some(vec![
        Dim::Known(2),
        b.clone(),
        Dim::Known(n),
        s.clone(),
        dims::div_exact(k_hidden, &Dim::Known(n)),
    ])
}

/// `Attention(input [B, S, in], weights [in, q + k + v], bias?, mask_index?, past?,
/// attention_bias?, past_sequence_length?)`: output `[B, S, v]`, present
/// `[2, B, N, P + S, k / N]`.
pub(crate) fn attention(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[0, 1, 2]);
    let (k_hidden, v_hidden) = attention_hidden(c, 1);
    let (b, s) = match c.shape(0) {
        Some([b, s, _]) => (b.clone(), s.clone()),
        _ => return vec![Out::dtype(t), Out::dtype(t)],
    };
    vec![
        Out::new(t, Some(vec![b.clone(), s.clone(), v_hidden])),
        Out::new(t, attention_present(c, 4, &b, &s, &k_hidden)),
    ]
}

/// `DecoderMaskedSelfAttention`: `Attention` whose past and present share a buffer.
pub(crate) fn decoder_masked_self_attention(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[0, 1, 2]);
    let (_, v_hidden) = attention_hidden(c, 1);
    let shape = match c.shape(0) {
        Some([b, s, _]) => Some(vec![b.clone(), s.clone(), v_hidden]),
        _ => None,
    };
    let present = c.shape(4).filter(|p| p.len() == 5).map(<[Dim]>::to_vec);
    vec![Out::new(t, shape), Out::new(t, present)]
}

/// `QAttention(input, weight, bias, input_scale, weight_scale, mask_index?,
/// input_zero_point?, weight_zero_point?, past?)`: `Attention` on quantized input, float
/// outputs (the bias's and scales' type).
pub(crate) fn qattention(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[2, 3]);
    let (k_hidden, v_hidden) = attention_hidden(c, 1);
    let (b, s) = match c.shape(0) {
        Some([b, s, _]) => (b.clone(), s.clone()),
        _ => return vec![Out::dtype(t), Out::dtype(t)],
    };
    vec![
        Out::new(t, Some(vec![b.clone(), s.clone(), v_hidden])),
        Out::new(t, attention_present(c, 8, &b, &s, &k_hidden)),
    ]
}

/// The attention geometry of `MultiHeadAttention`-style inputs: batch, query length,
/// key/value length, the head count, and the K and V hidden sizes, from the query
/// (`[B, S, D]`, or packed QKV `[B, S, N, 3, H]`) and the key and value (`[B, L, D]`,
/// `[B, N, L, H]`, or packed KV `[B, L, N, 2, H]` in the key).
struct Geometry {
    b: Dim,
    s: Dim,
    l: Dim,
    k_hidden: Dim,
    v_hidden: Dim,
    /// The key is given as `[B, N, L, H]` (it is the present key as is).
    key_bnsh: bool,
}

fn mha_geometry(c: &Ctx, q: usize, k: usize, v: usize) -> Option<Geometry> {
    let qs = c.shape(q)?;
    match qs {
        [b, s, n2, _three, h] if !c.has(k) => {
            let hidden = dims::mul(n2, h);
            Some(Geometry {
                b: b.clone(),
                s: s.clone(),
                l: s.clone(),
                k_hidden: hidden.clone(),
                v_hidden: hidden,
                key_bnsh: false,
            })
        }
        [b, s, d] => {
            let (l, k_hidden, v_hidden, key_bnsh) = match (c.shape(k), c.shape(v)) {
                (Some([_, l, n2, _two, h]), _) => {
                    let hid = dims::mul(n2, h);
                    (l.clone(), hid.clone(), hid, false)
                }
                (Some([_, l, kd]), Some([_, _, vd])) => (l.clone(), kd.clone(), vd.clone(), false),
                (Some([_, kn, l, kh]), Some([_, vn, _, vh])) => {
                    (l.clone(), dims::mul(kn, kh), dims::mul(vn, vh), true)
                }
                (Some([_, l, kd]), None) => (l.clone(), kd.clone(), Dim::Unknown, false),
                // Self attention without key and value inputs (not packed): Q's sizes.
                (None, None) if !c.has(k) && !c.has(v) => (s.clone(), d.clone(), d.clone(), false),
                _ => (Dim::Unknown, Dim::Unknown, Dim::Unknown, false),
            };
            Some(Geometry {
                b: b.clone(),
                s: s.clone(),
                l,
                k_hidden,
                v_hidden,
                key_bnsh,
            })
        }
        _ => None,
    }
}

/// A present key or value `[B, N, P + L, H]`: the past `[B, N, P, H]` grown by the new
/// length, or the key itself when it is given per head, or `[B, N, L, hidden / N]` without
/// a past.
fn mha_present(
    c: &Ctx,
    g: &Geometry,
    past: usize,
    hidden: &Dim,
    given: Option<usize>,
) -> Option<Vec<Dim>> {
    if let Some(x) = given {
        return c.shape(x).map(<[Dim]>::to_vec);
    }
    let n = attr_pos(c, "num_heads")?;
    let head = dims::div_exact(hidden, &Dim::Known(n));
    if c.has(past) {
        let p = c.shape(past)?;
        if p.len() != 4 {
            return None;
        }
        return Some(vec![
            dims::unify(&p[0], &g.b),
            dims::unify(&p[1], &Dim::Known(n)),
            dims::add(&p[2], &g.l),
            dims::unify(&p[3], &head),
        ]);
    }
    Some(vec![g.b.clone(), Dim::Known(n), g.l.clone(), head])
}

/// `MultiHeadAttention(query, key?, value?, bias?, key_padding_mask?, attention_bias?,
/// past_key?, past_value?, past_sequence_length?, cache_indirection?)`: output `[B, S, v]`,
/// present key and value `[B, N, P + L, H]` (the past's own shape when past and present
/// share a buffer: `past_sequence_length` given), qk `[B, N, S, P + L]`.
pub(crate) fn multi_head_attention(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[0, 1, 2]);
    let Some(g) = mha_geometry(c, 0, 1, 2) else {
        return c.all_dtype(t);
    };
    let out = vec![g.b.clone(), g.s.clone(), g.v_hidden.clone()];
    let shared = c.has(8) && c.has(6);
    let (pk, pv) = if shared {
        (
            c.shape(6).map(<[Dim]>::to_vec),
            c.shape(7).map(<[Dim]>::to_vec),
        )
    } else {
        let kb = g.key_bnsh.then_some(1);
        let vb = g.key_bnsh.then_some(2);
        (
            mha_present(c, &g, 6, &g.k_hidden, kb),
            mha_present(c, &g, 7, &g.v_hidden, vb),
        )
    };
    let qk = match (&pk, attr_pos(c, "num_heads")) {
        (Some(p), Some(n)) if p.len() == 4 => {
            Some(vec![g.b.clone(), Dim::Known(n), g.s.clone(), p[2].clone()])
        }
        _ => None,
    };
    vec![
        Out::new(t, Some(out)),
        Out::new(t, pk),
        Out::new(t, pv),
        Out::new(t, qk),
    ]
}

/// `DecoderMaskedMultiHeadAttention(query, key?, value?, mask_index?, attention_bias?,
/// past_key?, past_value?, past_sequence_length?, beam_width?, cache_indirection?, bias?)`:
/// output `[B, 1, v]`; with past (a shared buffer `[B, N, max, H]`) the present key and
/// value are the past's shape, for cross attention (the key given per head) the key's.
pub(crate) fn decoder_masked_mha(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[0, 1, 2]);
    let Some(qs) = c.shape(0) else {
        return c.all_dtype(t);
    };
    let v_hidden = match (c.shape(2), c.shape(6)) {
        (Some([_, _, v]), _) => v.clone(),
        (Some([_, vn, _, vh]), _) => dims::mul(vn, vh),
        (_, Some([_, pn, _, ph])) => dims::mul(pn, ph),
        _ => match qs {
            // Packed QKV in the query: a third of it.
            [_, _, d] if !c.has(1) => dims::div_exact(d, &Dim::Known(3)),
            _ => Dim::Unknown,
        },
    };
    let out = match qs {
        [b, s, _] => Some(vec![b.clone(), s.clone(), v_hidden]),
        _ => None,
    };
    let cross = matches!(c.shape(1), Some([_, _, _, _]));
    let (pk, pv) = if cross {
        (
            c.shape(1).map(<[Dim]>::to_vec),
            c.shape(2).map(<[Dim]>::to_vec),
        )
    } else {
        (
            c.shape(5).map(<[Dim]>::to_vec),
            c.shape(6).map(<[Dim]>::to_vec),
        )
    };
    vec![
        Out::new(t, out),
        Out::new(t, pk),
        Out::new(t, pv),
        Out::dtype(Some(FLOAT)),
    ]
}

/// `GroupQueryAttention(query, key?, value?, past_key?, past_value?, seqlens_k,
/// total_sequence_length, cos_cache?, sin_cache?, position_ids?, attention_bias?,
/// head_sink?)`: output `[B, S, N * H]`; present key and value `[B, kvN, T, H]` with `T`
/// the larger of the past's length and `total_sequence_length` (ONNX Runtime's rule; the
/// past's own length for a sliding-window cache), or without a past the total length, else
/// the new length.
pub(crate) fn group_query_attention(c: &Ctx) -> Vec<Out> {
    let t = c.dtype(0).or(c.dtype(1));
    let kv_t = c.dtype(3).or(t);
    let Some(qs) = c.shape(0) else {
        return vec![Out::dtype(t), Out::dtype(kv_t), Out::dtype(kv_t)];
    };
    let [b, s, d] = qs else {
        return vec![Out::dtype(t), Out::dtype(kv_t), Out::dtype(kv_t)];
    };
    let n = attr_pos(c, "num_heads");
    let kvn = attr_pos(c, "kv_num_heads");
    let packed = !c.has(1) && !c.has(2);
    // The head size, from the query (packed: N + 2 kvN heads), else from the past.
    let head = match (packed, n, kvn) {
        (false, Some(n), _) => dims::div_exact(d, &Dim::Known(n)),
        (true, Some(n), Some(k)) => n
            .checked_add(k.saturating_mul(2))
            .map_or(Dim::Unknown, |h| dims::div_exact(d, &Dim::Known(h))),
        _ => Dim::Unknown,
    };
    let head = match (&head, c.shape(3)) {
        (Dim::Unknown, Some([_, _, _, h])) => h.clone(),
        _ => head,
    };
    let out_hidden = match (packed, n) {
        (false, _) => d.clone(),
        (true, Some(n)) => dims::mul(&head, &Dim::Known(n)),
        _ => Dim::Unknown,
    };
    let total = c
        .data(6)
        .and_then(|v| (v.len() == 1).then(|| v[0].clone()))
        .filter(|d| !matches!(d, Dim::Known(k) if *k < 0))
        .unwrap_or(Dim::Unknown);
    let new_len = if packed { s.clone() } else { dim(c, 1, 1) };
    let kvn_d = kvn.map_or(Dim::Unknown, Dim::Known);
    let present = match c.shape(3) {
        Some([pb, pn, pl, ph]) => {
            let len = if c.attr_i("sliding_window_cache").unwrap_or(0) == 1 {
                pl.clone()
            } else {
                match (&total, pl) {
                    (Dim::Unknown, _) => Dim::Unknown,
                    (t, Dim::Known(0)) => t.clone(),
                    (t, p) => dims::max(p, t),
                }
            };
            Some(vec![
                dims::unify(pb, b),
                dims::unify(pn, &kvn_d),
                len,
                dims::unify(ph, &head),
            ])
        }
        Some(_) => None,
        None => {
            let len = match &total {
                Dim::Unknown => new_len,
                t => t.clone(),
            };
            Some(vec![b.clone(), kvn_d, len, head])
        }
    };
    vec![
        Out::new(t, Some(vec![b.clone(), s.clone(), out_hidden])),
        Out::new(kv_t, present.clone()),
        Out::new(kv_t, present),
        Out::dtype(t),
    ]
}

/// `EmbedLayerNormalization(input_ids [B, S], segment_ids?, word_embedding [V, H],
/// position_embedding, segment_embedding?, gamma, beta, mask?, position_ids?)`: output
/// `[B, S, H]` of the embeddings' type, mask_index int32 `[B]`, embedding_sum like the
/// output.
pub(crate) fn embed_layer_norm(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[2, 3, 5]);
    let h = [2, 3, 5]
        .iter()
        .map(|&i| last(c, i))
        .find(|d| *d != Dim::Unknown)
        .unwrap_or(Dim::Unknown);
    let (b, s) = match (c.shape(0), c.shape(1)) {
        (Some([b, s]), _) => (b.clone(), s.clone()),
        (_, Some([b, s])) => (b.clone(), s.clone()),
        _ => {
            return vec![
                Out::dtype(t),
                Out::new(Some(INT32), Some(vec![Dim::Unknown])),
                Out::dtype(t),
            ]
        }
    };
    let out = vec![b.clone(), s, h];
    vec![
        Out::new(t, Some(out.clone())),
        Out::new(Some(INT32), Some(vec![b])),
        Out::new(t, Some(out)),
    ]
}

/// `QEmbedLayerNormalization(input_ids, segment_ids?, word_embedding_quant,
/// position_embedding_quant, segment_embedding?, gamma_quant, beta_quant, mask?,
/// word_embedding_scale, ...)`: float `[B, S, H]` and int32 mask_index `[B]`.
pub(crate) fn qembed_layer_norm(c: &Ctx) -> Vec<Out> {
    let t = c.dtype(8).or(Some(FLOAT));
    let h = [2, 3, 5]
        .iter()
        .map(|&i| last(c, i))
        .find(|d| *d != Dim::Unknown)
        .unwrap_or(Dim::Unknown);
    match c.shape(0) {
        Some([b, s]) => vec![
            Out::new(t, Some(vec![b.clone(), s.clone(), h])),
            Out::new(Some(INT32), Some(vec![b.clone()])),
        ],
        _ => vec![
            Out::dtype(t),
            Out::new(Some(INT32), Some(vec![Dim::Unknown])),
        ],
    }
}

/// `PackedAttention(input [T, in], weights [in, q + k + v], bias, token_offset [B, S],
/// cumulative_sequence_length [B + 1], attention_bias?)`: `[T, v]`.
pub(crate) fn packed_attention(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[0, 1, 2]);
    let (_, v_hidden) = attention_hidden(c, 1);
    let shape = match c.shape(0) {
        Some([tok, _]) => Some(vec![tok.clone(), v_hidden]),
        _ => None,
    };
    vec![Out::new(t, shape)]
}

/// `PackedMultiHeadAttention(query [T, D] or packed [T, N, 3, H], key?, value?, bias?,
/// token_offset, cumulative_sequence_length, attention_bias?)`: `[T, v]`.
pub(crate) fn packed_mha(c: &Ctx) -> Vec<Out> {
    let t = dtype_of(c, &[0, 1, 2]);
    let shape = match c.shape(0) {
        Some([tok, n, _three, h]) => Some(vec![tok.clone(), dims::mul(n, h)]),
        Some([tok, d]) => {
            let v = match c.shape(2) {
                Some([_, v]) => v.clone(),
                Some(_) => Dim::Unknown,
                None if !c.has(2) => d.clone(),
                None => Dim::Unknown,
            };
            Some(vec![tok.clone(), v])
        }
        _ => None,
    };
    vec![Out::new(t, shape)]
}

/// `RemovePadding(input [B, S, H], sequence_token_count [B])`: output `[T, H]` (T, the
/// count of tokens, is known only at run time), token_offset int32 `[B, S]`,
/// cumulated_seq_len int32 `[B + 1]`, max_seq_len int32 `[1]`.
pub(crate) fn remove_padding(c: &Ctx) -> Vec<Out> {
    let t = c.dtype(0);
    match c.shape(0) {
        Some([b, s, h]) => vec![
            Out::new(t, Some(vec![Dim::Unknown, h.clone()])),
            Out::new(Some(INT32), Some(vec![b.clone(), s.clone()])),
            Out::new(Some(INT32), Some(vec![dims::add(b, &Dim::Known(1))])),
            Out::new(Some(INT32), Some(vec![Dim::Known(1)])),
        ],
        _ => vec![
            Out::new(t, Some(vec![Dim::Unknown, Dim::Unknown])),
            Out::new(Some(INT32), Some(vec![Dim::Unknown, Dim::Unknown])),
            Out::new(Some(INT32), Some(vec![Dim::Unknown])),
            Out::new(Some(INT32), Some(vec![Dim::Known(1)])),
        ],
    }
}

/// `RestorePadding(input [T, H], token_offset [B, S])`: `[B, S, H]`.
pub(crate) fn restore_padding(c: &Ctx) -> Vec<Out> {
    let t = c.dtype(0);
    let shape = match (c.shape(0), c.shape(1)) {
        (Some([_, h]), Some([b, s])) => Some(vec![b.clone(), s.clone(), h.clone()]),
        _ => Some(vec![Dim::Unknown; 3]),
    };
    vec![Out::new(t, shape)]
}

/// The generation loops (`BeamSearch`, `GreedySearch`, `Sampling`): int32 sequences
/// `[B, num_return_sequences, max_length]` (`[B, max_length]` for greedy search and
/// sampling), with the sizes read from the inputs when they are constants.
pub(crate) fn generation(c: &Ctx) -> Vec<Out> {
    let b = dim(c, 0, 0);
    let scalar = |i: usize| {
        c.data(i)
            .and_then(|d| (d.len() == 1).then(|| d[0].clone()))
            .filter(|d| !matches!(d, Dim::Known(k) if *k < 0))
            .unwrap_or(Dim::Unknown)
    };
    let max_len = scalar(1);
    let seqs = if c.node.op_type == "BeamSearch" || c.node.op_type == "WhisperBeamSearch" {
        vec![b.clone(), scalar(4), max_len]
    } else {
        vec![b.clone(), max_len]
    };
    let mut out = vec![Out::new(Some(INT32), Some(seqs))];
    for _ in 1..c.n_outputs() {
        out.push(Out::dtype(Some(FLOAT)));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn stats_of_a_scalar_are_unknown() {
        assert_eq!(super::stats_shape(Some(&[])), None);
        assert_eq!(super::stats_shape(None), None);
    }
}
