//! com.microsoft MatMulNBits: a MatMul whose weight is block-quantized to 2, 4 or 8 bits (the
//! form ONNX Runtime's `MatMulNBitsQuantizer` and onnxruntime-genai's model builder write for
//! int4 LLMs), decomposed into standard ONNX.
//!
//! The operator (ContribOperators.md, MatMulNBits): `Y = A @ dequant(B)^T (+ bias)`, where
//! `B` is uint8 `[N, k_blocks, blob_size]` (`k_blocks = ceil(K / block_size)`,
//! `blob_size = block_size * bits / 8`): row `n` of the `[N, K]` weight, its codes packed along
//! K within each block, the first code in the lowest bits of a byte. `scales` are
//! `[N, k_blocks]` (or flat `[N * k_blocks]`) of A's type; `zero_points` are either packed
//! uint8 `[N, ceil(k_blocks * bits / 8)]` (each row packed on its own, padded to a byte) or
//! unpacked of A's type `[N, k_blocks]`; absent, the zero point is `2^(bits - 1)`. The weight
//! is `(code - zero_point) * scale` for uint8 zero points, and `code * scale + (-scale * zp)`
//! for float zero points (ONNX Runtime's `DequantizeBlockwise` with unquantized zero points,
//! `matmul_nbits_impl.cc`). Codes past K in the last block are padding. `g_idx` (deprecated)
//! gives each k its block of scales and zero points. `bias` is `[N]`.
//!
//! ONNX Runtime's CPU kernel (`contrib_ops/cpu/quantization/matmul_nbits.cc`) with
//! `accuracy_level` 0-3 computes in float32: the weight dequantized to float32 (for a float16
//! A, A, the scales and the bias are converted to float32, the product is computed in float32
//! and converted back), then a float GEMM (MLAS's blocked n-bit kernel or SGEMM over the
//! dequantized weight). The decomposition does the same with `MatMul` (and a `Cast` on each
//! side for float16): class `rounding` (measured at about 1e-6 of the output's scale for
//! float32, at most 1 ulp for float16; the GEMMs sum in different orders). With
//! `accuracy_level` 4 the kernel's int8 path (`SQNBIT_CompInt8`, which x86 CPUs with AVX2 or
//! AVX-512 have for 2, 4 and 8 bits) quantizes A to int8 per block of `block_size` and sums
//! integer products: a float MatMul on A as it is differs from it by that quantization (about
//! 5e-3 of the output's scale). The decomposition quantizes and dequantizes A the way the
//! kernel does ([`quantize_a_int8`]), which brings it back to float rounding (about 1e-7 of the
//! scale). Where the kernel dequantizes to float32 even at level 4 (`g_idx` given, float zero
//! points) A is left as it is; below opset 11 (no `Round`) the patch declares `approximate`
//! ([`INT8_ACCURACY_BOUND`]), so it runs only when approximations are allowed. (A CPU without
//! the int8 kernel computes level 4 in float32; there the decomposition is off by the
//! quantization error, which `verify` reports.)
//!
//! Two forms, chosen per node at the model's opset (the compile raises a model below 21 to 21
//! beforehand where that keeps every node's meaning: [`crate::rewrite::opset`]); the `MatMul`
//! node carries the form in its metadata under [`FORM_KEY`]:
//!
//! * **packed** (default-domain opset >= 21; 2-bit weights need opset 25's uint2): the packed
//!   bytes of B are, unchanged, a uint4 (uint2, uint8) tensor `[N, k_blocks * block_size]`
//!   (ONNX packs sub-byte types first element in the low bits, as MatMulNBits does, and each
//!   row of B is whole bytes); `DequantizeLinear` with `axis = 1` and `block_size` (blocked
//!   quantization, opset 21) gives the float32 weight, `Slice` drops the padding when K is not a
//!   multiple of the block size, `Transpose` makes it `[K, N]`. The new initializer shares B's
//!   payload (an external B stays a reference to the same bytes of the same file), so the
//!   weights keep their size. Packed zero points are reused as they are when each row fills
//!   whole bytes, repacked (they are small) otherwise; absent ones are `2^(bits - 1)` made at
//!   run time (`QuantizeLinear` of an `Expand`ed scalar), not stored. Float zero points:
//!   `DequantizeLinear` without zero point (`code * scale`) plus the constant `-scale * zp`
//!   per block, ONNX Runtime's own formula.
//! * **unpacked** (older opsets, 2-bit weights before opset 25, a `g_idx` that is not the
//!   identity grouping): the `[K, N]` weight is an initializer of the scales' type (float32,
//!   or float16 cast to float32 at run time). It is 8x (float32) or 4x (float16) the size of
//!   4-bit weights: a 4096 x 4096 int4 weight (8 MiB packed) becomes 64 MiB of float32. Its
//!   bytes are not computed here: the initializer is a computed payload
//!   ([`crate::io::computed`]) that keeps B (a slice of the mapped file when external), the
//!   scales and the zero points, and the weight is dequantized a few MiB of rows at a time
//!   while the output is written, so memory stays flat whatever the model's size. A B in
//!   external data is unpacked only through [`super::Unpack`], within the bytes of float
//!   weights the compile may add (the output's size bound); past them the node is refused
//!   (`limit`).
//!
//! Refused, with the reason: a B, scales or zero points that are not constants
//! ([`Cause::NotConstant`]); external data the decomposition has to read but cannot (the
//! unpacked form, repacked zero points); `weight_prepacked` (a CUDA layout); bfloat16 (no CPU
//! kernel to match); a `g_idx` together with packed zero points, or with other than 4 bits
//! (ONNX Runtime's CPU kernel ignores packed zero points when `g_idx` is given, and supports
//! `g_idx` only with 4 bits: no decomposition could both follow the operator's definition and
//! match that kernel); shapes that disagree with K, N, bits and block_size.

use bytes::Bytes;

use crate::io::external::{external_ref, is_external};
use crate::io::ExternalData;
use crate::ir::{Graph, NodeId, TensorView, Text, ValueId};
use crate::proto::TensorProto;
use crate::rewrite::pass::{Cause, Refusal};
use crate::rewrite::{AttrValue, Exactness, PValue, Patch};
use crate::tensor::dtype;

use super::rw::{f32_to_f16, unsupported, Rw};
use super::{UnfuseCtx, Unsupported};

/// The metadata key, on the new `MatMul` node, that names the form used (`packed ...` or
/// `unpacked ...`, with the weight's size).
pub const FORM_KEY: &str = "onnx_safeify.matmul_nbits_form";

/// `accuracy_level` 4 on ONNX Runtime's CPU quantizes A to int8 per block: a float MatMul on A
/// as it is (below opset 11, where `Round` is missing to mirror the quantization) differs from
/// it by that quantization error, measured at up to 6e-3 of the output's scale on random
/// weights and activations (block sizes 16-128, K up to 4096).
pub const INT8_ACCURACY_BOUND: f64 = 2e-2;

/// The largest unpacked weight (elements) the unpacked form writes: a larger one is refused
/// (`Cause::Limit`); at 2 or 4 bytes an element it would not fit in a model file anyway.
const MAX_UNPACKED_ELEMENTS: u64 = 1 << 31;

/// The node's attributes, checked.
#[derive(Debug, Clone, Copy)]
struct Spec {
    k: usize,
    n: usize,
    bits: usize,
    block: usize,
    /// Blocks per row: `ceil(K / block_size)`.
    blocks: usize,
    /// Bytes per block: `block_size * bits / 8`.
    blob: usize,
    /// Bytes per row of packed zero points: `ceil(blocks * bits / 8)`.
    zp_row: usize,
    accuracy: i64,
}

impl Spec {
    fn read(rw: &Rw) -> Result<Spec, Unsupported> {
        let need = |name: &str| -> Result<i64, Unsupported> {
            match rw.attr(name).and_then(|a| a.i()) {
                Some(v) => Ok(v),
                None => unsupported(format!("MatMulNBits without its '{name}' attribute")),
            }
        };
        let k = need("K")?;
        let n = need("N")?;
        let block = need("block_size")?;
        let bits = rw.attr_i("bits", 4);
        let accuracy = rw.attr_i("accuracy_level", 0);
        if rw.attr_i("weight_prepacked", 0) != 0 {
            return unsupported(
                "B is prepacked in an execution provider's own layout (weight_prepacked)",
            );
        }
        if !matches!(bits, 2 | 4 | 8) {
            return unsupported(format!("bits = {bits} (MatMulNBits has 2, 4 or 8)"));
        }
        if block < 16 || block.count_ones() != 1 {
            return unsupported(format!(
                "block_size = {block} (a power of two >= 16 is required)"
            ));
        }
        if k <= 0 || n <= 0 || k > i32::MAX as i64 || n > i32::MAX as i64 {
            return unsupported(format!("K = {k}, N = {n} (out of range)"));
        }
        let (k, n, bits, block) = (k as usize, n as usize, bits as usize, block as usize);
        let blocks = k.div_ceil(block);
        Ok(Spec {
            k,
            n,
            bits,
            block,
            blocks,
            blob: block * bits / 8,
            zp_row: (blocks * bits).div_ceil(8),
            accuracy,
        })
    }

    /// K rounded up to whole blocks.
    fn k_padded(&self) -> usize {
        self.blocks * self.block
    }

    /// The ONNX element type that holds `bits`-bit unsigned codes.
    fn code_type(&self) -> i32 {
        match self.bits {
            2 => dtype::UINT2,
            4 => dtype::UINT4,
            _ => dtype::UINT8,
        }
    }

    fn default_zero_point(&self) -> u8 {
        1u8 << (self.bits - 1)
    }

    /// Code `j` (0..block) of block `b` of row `n` of B.
    fn code(&self, b_bytes: &[u8], n: usize, b: usize, j: usize) -> u8 {
        let bit = j * self.bits;
        let byte = b_bytes[(n * self.blocks + b) * self.blob + bit / 8];
        (byte >> (bit % 8)) & self.mask()
    }

    fn mask(&self) -> u8 {
        if self.bits == 8 {
            0xff
        } else {
            (1u8 << self.bits) - 1
        }
    }

    /// The packed uint8 zero point of block `b` of row `n`.
    fn zero_point(&self, zp: &[u8], n: usize, b: usize) -> u8 {
        let bit = b * self.bits;
        (zp[n * self.zp_row + bit / 8] >> (bit % 8)) & self.mask()
    }
}

/// A constant input: its tensor (an initializer that no graph input overrides, or a
/// `Constant` node's value), or a refusal naming it.
fn constant<'g>(rw: &Rw<'g>, i: usize, what: &str) -> Result<TensorView<'g>, Unsupported> {
    let Some(v) = rw.input_id(i) else {
        return unsupported(format!("required input {i} ({what}) is missing"));
    };
    match crate::rewrite::consts::constant_tensor(rw.g, v) {
        Some(t) => Ok(t),
        None => Err(Refusal::new(
            Cause::NotConstant,
            format!(
                "{what} (input {i}, '{}') is not a constant: the weights are unpacked or \
                 re-typed when the model is rewritten",
                rw.g.value_name(v)
            ),
        )),
    }
}

fn count(dims: &[i64]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    })
}

/// The payload of a dense constant in the model file (`raw_data`, or the typed field
/// `int32_data` of uint8 and float16 tensors, `float_data` of float32 ones), or read from
/// external data when a resolver is given. `elem` is the element's size in bytes (1, 2 or 4).
fn payload(t: &TensorView, elem: usize, ext: Option<&ExternalData>) -> Option<Bytes> {
    if is_external(t.rest) {
        return ext?.read(&external_ref(t.rest).ok()?).ok();
    }
    if let Some(raw) = t.raw_data {
        return Some(raw.clone());
    }
    let mut out = Vec::new();
    if elem == 4 {
        for &f in &t.rest.float_data {
            out.extend_from_slice(&f.to_le_bytes());
        }
    } else {
        for &x in &t.rest.int32_data {
            match elem {
                1 => out.push(x as u8),
                _ => out.extend_from_slice(&(x as u16).to_le_bytes()),
            }
        }
    }
    Some(out.into())
}

/// The resolver for what either form reads from external data: the batch's, or the one given
/// to the unpacked form (see [`super::Unpack`]).
fn resolver<'a>(rw: &Rw<'a>) -> Option<&'a ExternalData> {
    rw.ctx.external.or(rw.ctx.unpack.map(|u| u.data))
}

/// The bytes of a constant, or a refusal saying that they could not be read.
fn read_bytes(
    rw: &Rw,
    t: &TensorView,
    elem: usize,
    expect: usize,
    what: &str,
) -> Result<Bytes, Unsupported> {
    match payload(t, elem, resolver(rw)) {
        Some(b) if b.len() == expect => Ok(b),
        Some(b) => unsupported(format!(
            "{what} holds {} bytes where {expect} are expected",
            b.len()
        )),
        None if resolver(rw).is_none() => Err(Refusal::new(
            Cause::Limit,
            format!(
                "{what} is stored as external data, which this form of the decomposition must \
                 read (to unpack the weights, or to repack zero points) and the rewrite was \
                 given no data file to read; at default-domain opset >= 21 the weights stay \
                 packed and nothing is read"
            ),
        )),
        None => Err(Refusal::new(
            Cause::NotConstant,
            format!("{what}'s external data could not be read"),
        )),
    }
}

/// IEEE half to single precision (exact).
fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: normalise.
            let shift = m.leading_zeros() - 21;
            let m = (m << shift) & 0x3ff;
            sign | ((113 - shift) << 23) | (m << 13)
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// The values of a float32 or float16 payload, as float32 (exact).
fn floats(bytes: &[u8], dt: i32) -> Vec<f32> {
    if dt == dtype::FLOAT16 {
        bytes
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect()
    } else {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

/// Pack `vals` (each below `2^bits`) as ONNX packs a sub-byte tensor: flat, the first element
/// in the lowest bits.
fn pack_flat(vals: &[u8], bits: usize) -> Vec<u8> {
    if bits == 8 {
        return vals.to_vec();
    }
    let per = 8 / bits;
    let mut out = vec![0u8; vals.len().div_ceil(per)];
    for (i, &v) in vals.iter().enumerate() {
        out[i / per] |= v << ((i % per) * bits);
    }
    out
}

/// A tensor of `dims` and element type `dt` over `bytes`.
fn raw_tensor(dims: &[i64], dt: i32, bytes: Bytes) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(dt),
        raw_data: Some(bytes),
        ..Default::default()
    }
}

/// The same payload as `t` (shared, or the same external bytes) seen as `dims` of `dt`: the
/// bytes are not copied, nor read when they are external.
fn retyped(
    rw: &Rw,
    t: &TensorView,
    dims: &[i64],
    dt: i32,
    elem: usize,
    len: usize,
    what: &str,
) -> Result<TensorProto, Unsupported> {
    if is_external(t.rest) {
        let mut p = t.to_proto(None);
        p.dims = dims.to_vec();
        p.data_type = Some(dt);
        return Ok(p);
    }
    let b = read_bytes(rw, t, elem, len, what)?;
    Ok(raw_tensor(dims, dt, b))
}

/// The element type of a scale or float zero point.
fn float_type_name(dt: i32) -> String {
    crate::tensor::dtype_name(dt).to_string()
}

/// What the two forms share: the node's inputs, checked.
struct Inputs<'g> {
    spec: Spec,
    /// A's (and the output's) element type: float32 or float16.
    dt: i32,
    b: TensorView<'g>,
    scales: TensorView<'g>,
    scales_id: ValueId,
    zp: Zp<'g>,
    /// `Some` when `g_idx` is given and is not the identity grouping `k / block_size`.
    g_idx: Option<Vec<usize>>,
    /// Whether a `g_idx` input is given at all (the kernel then dequantizes to float32 even
    /// with `accuracy_level` 4).
    has_g_idx: bool,
}

enum Zp<'g> {
    Default,
    Packed(TensorView<'g>),
    Float(TensorView<'g>),
}

fn inputs<'g>(rw: &Rw<'g>) -> Result<Inputs<'g>, Unsupported> {
    let spec = Spec::read(rw)?;
    let (n, blocks) = (spec.n, spec.blocks);
    rw.need(0, "A")?;
    // B.
    let b = constant(rw, 1, "B")?;
    if b.data_type != Some(dtype::UINT8) {
        return unsupported("B is not uint8");
    }
    let want = [n as i64, blocks as i64, spec.blob as i64];
    if b.dims != want {
        return unsupported(format!(
            "B has shape {:?}, not [N, k_blocks, blob_size] = {want:?} (K = {}, bits = {}, block_size = {})",
            b.dims, spec.k, spec.bits, spec.block
        ));
    }
    // Scales: A's type.
    let scales = constant(rw, 2, "scales")?;
    let dt = match scales.data_type {
        Some(t @ (dtype::FLOAT | dtype::FLOAT16)) => t,
        Some(dtype::BFLOAT16) => {
            return unsupported("bfloat16 MatMulNBits (ONNX Runtime's CPU has no kernel to match)")
        }
        Some(t) => return unsupported(format!("scales of element type {}", float_type_name(t))),
        None => return unsupported("scales without an element type"),
    };
    if let Some(a) = rw.in_facts(0).dtype {
        if a != dt {
            return unsupported(format!(
                "A is {} but the scales are {}",
                float_type_name(a),
                float_type_name(dt)
            ));
        }
    }
    if count(scales.dims) != Some(n * blocks) {
        return unsupported(format!(
            "scales have shape {:?}, not [N, k_blocks] = [{n}, {blocks}]",
            scales.dims
        ));
    }
    let Some(scales_id) = rw.input_id(2) else {
        return unsupported("required input 2 (scales) is missing");
    };
    // Zero points.
    let zp = match rw.input_id(3) {
        None => Zp::Default,
        Some(_) => {
            let t = constant(rw, 3, "zero_points")?;
            match t.data_type {
                Some(dtype::UINT8) => {
                    if count(t.dims) != Some(n * spec.zp_row) {
                        return unsupported(format!(
                            "packed zero points have shape {:?}, not [N, ceil(k_blocks * bits / 8)] = [{n}, {}]",
                            t.dims, spec.zp_row
                        ));
                    }
                    Zp::Packed(t)
                }
                Some(t_dt) if t_dt == dt => {
                    if spec.bits != 4 {
                        return unsupported(format!(
                            "float zero points with {} bits (ONNX Runtime's CPU kernel takes them with 4 bits only)",
                            spec.bits
                        ));
                    }
                    if count(t.dims) != Some(n * blocks) {
                        return unsupported(format!(
                            "zero points have shape {:?}, not [N, k_blocks] = [{n}, {blocks}]",
                            t.dims
                        ));
                    }
                    Zp::Float(t)
                }
                Some(t_dt) => {
                    return unsupported(format!(
                        "zero points of element type {} with {} scales",
                        float_type_name(t_dt),
                        float_type_name(dt)
                    ))
                }
                None => return unsupported("zero points without an element type"),
            }
        }
    };
    // g_idx.
    let g_idx = match rw.input_id(4) {
        None => None,
        Some(_) => {
            if spec.bits != 4 {
                return unsupported(format!(
                    "g_idx with {} bits (ONNX Runtime's CPU kernel supports g_idx with 4 bits only)",
                    spec.bits
                ));
            }
            if matches!(zp, Zp::Packed(_)) {
                return unsupported(
                    "g_idx with packed (uint8) zero points: ONNX Runtime's CPU kernel ignores \
                     such zero points when g_idx is given (it uses 2^(bits-1)), so no \
                     decomposition can follow the operator and match that kernel",
                );
            }
            let Some(gv) = rw.input_id(4) else {
                return unsupported("g_idx is missing");
            };
            let Some(g) = crate::rewrite::consts::const_i64(rw.g, gv, resolver(rw)) else {
                return Err(Refusal::new(
                    Cause::NotConstant,
                    "g_idx (input 4) is not a readable integer constant".to_string(),
                ));
            };
            if g.len() != spec.k && g.len() != spec.k_padded() {
                return unsupported(format!("g_idx has {} entries, not K = {}", g.len(), spec.k));
            }
            let mut idx = Vec::with_capacity(spec.k);
            for &x in &g[..spec.k] {
                if x < 0 || x as usize >= blocks {
                    return unsupported(format!("g_idx entry {x} is not a block (0..{blocks})"));
                }
                idx.push(x as usize);
            }
            let identity = idx.iter().enumerate().all(|(k, &b)| b == k / spec.block);
            (!identity).then_some(idx)
        }
    };
    Ok(Inputs {
        spec,
        dt,
        b,
        scales,
        scales_id,
        zp,
        g_idx,
        has_g_idx: rw.input_id(4).is_some(),
    })
}

/// MatMulNBits `(A, B, scales, zero_points?, g_idx?, bias?)` as `MatMul` on the dequantized
/// weight (see the module's documentation for the two forms).
pub fn matmul_nbits(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    let mut rw = Rw::new(ctx, g, n);
    rw.only_attrs(&[
        "K",
        "N",
        "bits",
        "block_size",
        "accuracy_level",
        "weight_prepacked",
    ])?;
    let ins = inputs(&rw)?;
    let spec = ins.spec;
    let packed = rw.opset >= 21 && (spec.bits != 2 || rw.opset >= 25) && ins.g_idx.is_none();
    let (w, form) = if packed {
        packed_weight(&mut rw, &ins)?
    } else {
        unpacked_weight(&mut rw, &ins)?
    };
    // A, bias and the product in float32, as the kernel computes them.
    let f16 = ins.dt == dtype::FLOAT16;
    let mut a = rw.need(0, "A")?;
    if f16 {
        a = rw.cast(a, dtype::FLOAT);
    }
    // accuracy_level 4: the kernel's int8 path quantizes A per block (not with g_idx or float
    // zero points, which it dequantizes to float32 instead).
    let int8_a = spec.accuracy == 4 && !ins.has_g_idx && !matches!(ins.zp, Zp::Float(_));
    if int8_a {
        if rw.opset >= 11 {
            a = quantize_a_int8(&mut rw, a, &spec)?;
        } else {
            rw.p.exactness = Exactness::Approximate(INT8_ACCURACY_BOUND, 0.0);
        }
    }
    let mut y = rw.op("MatMul", &[a, w], &[]);
    if let Some(last) = rw.p.nodes.last_mut() {
        last.metadata
            .push((Text::Static(FORM_KEY), Text::from(form)));
    }
    if let Some(mut bias) = rw.input(5) {
        if f16 {
            bias = rw.cast(bias, dtype::FLOAT);
        }
        y = rw.op("Add", &[y, bias], &[]);
    }
    if f16 {
        y = rw.cast(y, dtype::FLOAT16);
    }
    rw.finish(&[(0, y)])
}

/// A (float32) as the int8 path of ONNX Runtime's CPU kernel sees it (`accuracy_level` 4,
/// MLAS `QuantizeARow_CompInt8`): per block of `block_size` along K (the last one padded with
/// zeros), `scale = amax / 127`, `q = round_half_even(a * (127 / amax))` (0 where amax is 0),
/// and the kernel's integer products are those of `q * scale` with the weight's codes. Needs
/// `Round` (opset 11).
fn quantize_a_int8(rw: &mut Rw, a: PValue, s: &Spec) -> Result<PValue, Unsupported> {
    let (k, kp) = (s.k as i64, s.k_padded() as i64);
    let rows = rw.reshape(a, &[-1, k])?;
    let rows = if kp != k {
        let pads = rw.ints("pads", &[0, 0, 0, kp - k]);
        rw.op("Pad", &[rows, pads], &[])
    } else {
        rows
    };
    let blocks = rw.reshape(rows, &[-1, s.blocks as i64, s.block as i64])?;
    let magnitude = rw.op("Abs", &[blocks], &[]);
    let amax = rw.reduce("ReduceMax", magnitude, &[2], true);
    let levels = rw.scalar("int8_levels", dtype::FLOAT, 127.0);
    let zero = rw.scalar("zero", dtype::FLOAT, 0.0);
    let scale = rw.op("Div", &[amax, levels], &[]);
    let inverse = rw.op("Div", &[levels, amax], &[]);
    let empty = rw.op("Equal", &[amax, zero], &[]);
    let inverse = rw.op("Where", &[empty, zero, inverse], &[]);
    let scaled = rw.op("Mul", &[blocks, inverse], &[]);
    let q = rw.op("Round", &[scaled], &[]);
    let dequantized = rw.op("Mul", &[q, scale], &[]);
    let rows = rw.reshape(dequantized, &[-1, kp])?;
    let rows = if kp != k {
        rw.slice(rows, &[0], &[k], &[1])
    } else {
        rows
    };
    let shape = rw.op("Shape", &[a], &[]);
    Ok(rw.op("Reshape", &[rows, shape], &[]))
}

/// The packed form: `Transpose(Slice(DequantizeLinear(B as uint4 [N, Kp], scales, zp)))`,
/// float32 `[K, N]`.
fn packed_weight(rw: &mut Rw, ins: &Inputs) -> Result<(PValue, String), Unsupported> {
    let s = ins.spec;
    let (n, blocks, kp) = (s.n as i64, s.blocks as i64, s.k_padded() as i64);
    let code_dt = s.code_type();
    let b_len = s.n * s.blocks * s.blob;
    let x = retyped(rw, &ins.b, &[n, kp], code_dt, 1, b_len, "B")?;
    let x = rw.p.initializer("codes", x);
    // Scales as [N, k_blocks], in float32.
    let elem = if ins.dt == dtype::FLOAT16 { 2 } else { 4 };
    let mut scale = if ins.scales.dims == [n, blocks] {
        PValue::Existing(ins.scales_id)
    } else {
        let t = retyped(
            rw,
            &ins.scales,
            &[n, blocks],
            ins.dt,
            elem,
            s.n * s.blocks * elem,
            "scales",
        )?;
        rw.p.initializer("scales", t)
    };
    if ins.dt == dtype::FLOAT16 {
        scale = rw.cast(scale, dtype::FLOAT);
    }
    let zp_count = s.n * s.blocks;
    let zp_len = (zp_count * s.bits).div_ceil(8);
    let (zp, offset) = match &ins.zp {
        Zp::Default if rw.ctx.profile.is_some_and(|p| p.ignores_block_size()) => {
            // The target's provider ignores block_size: the blocked DequantizeLinear is
            // rewritten again without it ([`super::dequantize`]), which folds a constant zero
            // point into the unpacked codes; one made at run time would need a Cast from a
            // 4-bit type. Stored (1/64 of the weights' size at block 32), then folded away.
            let v = vec![s.default_zero_point(); zp_count];
            let z = raw_tensor(&[n, blocks], code_dt, pack_flat(&v, s.bits).into());
            (Some(rw.p.initializer("zero_points", z)), None)
        }
        Zp::Default => {
            // 2^(bits-1) everywhere, made at run time from three scalars
            // (QuantizeLinear(Expand(2^(bits-1), [N, k_blocks]), 1, 0)) rather than stored:
            // a stored one would add 1/64 of the weights' size (bs 32) to the model file, and
            // ONNX Runtime has no ConstantOfShape for 4- and 2-bit types.
            let value = rw.scalar(
                "zero_point_value",
                dtype::FLOAT,
                s.default_zero_point() as f64,
            );
            let shape = rw.ints("zero_point_shape", &[n, blocks]);
            let filled = rw.op("Expand", &[value, shape], &[]);
            let one = rw.scalar("one", dtype::FLOAT, 1.0);
            let zero = raw_tensor(&[], code_dt, Bytes::from_static(&[0]));
            let zero = rw.p.initializer("code_zero", zero);
            (
                Some(rw.op("QuantizeLinear", &[filled, one, zero], &[])),
                None,
            )
        }
        Zp::Packed(t) => {
            let z = if (s.blocks * s.bits).is_multiple_of(8) {
                // Each row fills whole bytes: the packing is ONNX's.
                retyped(rw, t, &[n, blocks], code_dt, 1, zp_len, "zero_points")?
            } else {
                let bytes = read_bytes(rw, t, 1, s.n * s.zp_row, "zero_points")?;
                let mut v = Vec::with_capacity(zp_count);
                for r in 0..s.n {
                    for b in 0..s.blocks {
                        v.push(s.zero_point(&bytes, r, b));
                    }
                }
                raw_tensor(&[n, blocks], code_dt, pack_flat(&v, s.bits).into())
            };
            (Some(rw.p.initializer("zero_points", z)), None)
        }
        Zp::Float(t) => {
            // code * scale (DequantizeLinear without zero point), plus -scale * zp per block.
            let sb = read_bytes(rw, &ins.scales, elem, zp_count * elem, "scales")?;
            let zb = read_bytes(rw, t, elem, zp_count * elem, "zero_points")?;
            let (sv, zv) = (floats(&sb, ins.dt), floats(&zb, ins.dt));
            let off: Vec<f32> = sv.iter().zip(&zv).map(|(&s, &z)| -s * z).collect();
            (
                None,
                Some(rw.f32s("zero_point_offset", &[n, blocks, 1], &off)),
            )
        }
    };
    let ins_dq = [Some(x), Some(scale), zp];
    let attrs = vec![
        AttrValue::Int(1).to_proto("axis"),
        AttrValue::Int(s.block as i64).to_proto("block_size"),
    ];
    let mut w = rw.op_opt("DequantizeLinear", &ins_dq, attrs);
    if let Some(off) = offset {
        let blocked = rw.reshape(w, &[n, blocks, s.block as i64])?;
        let shifted = rw.op("Add", &[blocked, off], &[]);
        w = rw.reshape(shifted, &[n, kp])?;
    }
    if s.k_padded() != s.k {
        w = rw.slice(w, &[0], &[s.k as i64], &[1]);
    }
    let w = rw.transpose(w, &[1, 0]);
    let form = format!(
        "packed: {}-bit codes [{}, {}] ({} bytes, B's payload as it was) through DequantizeLinear-21 (block_size {})",
        s.bits,
        s.n,
        s.k_padded(),
        b_len,
        s.block
    );
    Ok((w, form))
}

/// The unpacked form: the `[K, N]` weight computed here, in the scales' type (float16 is cast
/// to float32 at run time).
fn unpacked_weight(rw: &mut Rw, ins: &Inputs) -> Result<(PValue, String), Unsupported> {
    let s = ins.spec;
    let total = (s.k as u64) * (s.n as u64);
    if total > MAX_UNPACKED_ELEMENTS {
        return Err(Refusal::new(
            Cause::Limit,
            format!(
                "unpacking a {} x {} weight ({total} elements) is over the limit of {MAX_UNPACKED_ELEMENTS}; \
                 a model at default-domain opset >= 21 keeps it packed",
                s.k, s.n
            ),
        ));
    }
    let elem = if ins.dt == dtype::FLOAT16 { 2 } else { 4 };
    // B from external data: unpacked only within the bytes of float weights this batch may add
    // to the output.
    if is_external(ins.b.rest) && rw.ctx.external.is_none() {
        if let Some(u) = rw.ctx.unpack {
            let add = total * elem as u64;
            let mb = |b: u64| b as f64 / 1e6;
            if u.spent.get().saturating_add(add) > u.limit {
                return Err(Refusal::new(
                    Cause::Limit,
                    format!(
                        "unpacking B ({} x {} weights in external data) would add {:.1} MB of {} \
                         weights, past the {:.1} MB this compile may add ({:.1} MB added already; \
                         the output's size bound, which --allow-growth raises, within the 2 GiB a \
                         model file can hold); at default-domain opset >= 21 the weights stay \
                         packed and nothing is read",
                        s.k,
                        s.n,
                        mb(add),
                        crate::tensor::dtype_name(ins.dt),
                        mb(u.limit),
                        mb(u.spent.get())
                    ),
                ));
            }
            u.spent.set(u.spent.get() + add);
        }
    }
    // The packed bytes (a slice of the mapped file when external), the scales and the zero
    // points are kept as they are; the `[K, N]` weight is computed from them while the output
    // is written (see `Unpacked`), never whole in memory.
    let b = read_bytes(rw, &ins.b, 1, s.n * s.blocks * s.blob, "B")?;
    let count = s.n * s.blocks;
    let scales = read_bytes(rw, &ins.scales, elem, count * elem, "scales")?;
    let zp = match &ins.zp {
        Zp::Default => UnpackedZp::Default,
        Zp::Packed(t) => UnpackedZp::Packed(read_bytes(rw, t, 1, s.n * s.zp_row, "zero_points")?),
        Zp::Float(t) => UnpackedZp::Float(read_bytes(rw, t, elem, count * elem, "zero_points")?),
    };
    let payload = Unpacked {
        spec: s,
        dt: ins.dt,
        b_mapped: is_external(ins.b.rest) && !b.is_empty(),
        b,
        scales,
        zp,
        g_idx: ins.g_idx.clone(),
    };
    let bytes = crate::io::computed::Payload::len(&payload);
    let dims = [s.k as i64, s.n as i64];
    let t = match rw.ctx.computed {
        Some(scope) => scope.tensor(&dims, ins.dt, std::sync::Arc::new(payload)),
        // No model to keep the payload (a decomposition run on its own): computed now.
        None => match crate::io::computed::bytes_of(&payload) {
            Ok(b) => raw_tensor(&dims, ins.dt, b),
            Err(e) => return unsupported(format!("cannot unpack B: {e}")),
        },
    };
    let mut w = rw.p.initializer("weight", t);
    if ins.dt == dtype::FLOAT16 {
        w = rw.cast(w, dtype::FLOAT);
    }
    let why = if ins.g_idx.is_some() {
        "g_idx is not the identity grouping".to_string()
    } else if rw.opset < 21 {
        format!("default-domain opset {} < 21", rw.opset)
    } else {
        format!("{}-bit codes need opset 25", s.bits)
    };
    let form = format!(
        "unpacked ({why}): {} [{}, {}] weight ({bytes} bytes, from {} packed)",
        crate::tensor::dtype_name(ins.dt),
        s.k,
        s.n,
        s.n * s.blocks * s.blob
    );
    Ok((w, form))
}

/// The zero points of an unpacked weight, as stored.
#[derive(Debug)]
enum UnpackedZp {
    Default,
    /// Packed uint8, `[N, zp_row]`.
    Packed(Bytes),
    /// Of the scales' type, `[N, k_blocks]`.
    Float(Bytes),
}

/// The unpacked `[K, N]` weight of a MatMulNBits, as a payload computed while the output is
/// written ([`crate::io::computed`]): `w[k, n]` = the dequantized code of `(n, k)` with block
/// `g_idx[k]` (or `k / block_size`), in the scales' type, rows of K in chunks of about 4 MiB.
#[derive(Debug)]
struct Unpacked {
    spec: Spec,
    dt: i32,
    b: Bytes,
    /// Whether `b` is a slice of a mapped external data file, whose pages are unmapped from
    /// the process once the weight is written ([`crate::io::external::release_mapped`]).
    b_mapped: bool,
    scales: Bytes,
    zp: UnpackedZp,
    g_idx: Option<Vec<usize>>,
}

impl Unpacked {
    fn elem(&self) -> usize {
        if self.dt == dtype::FLOAT16 {
            2
        } else {
            4
        }
    }

    /// Element `i` of a float32 or float16 payload, as float32 (exact).
    fn float_at(&self, bytes: &[u8], i: usize) -> f32 {
        if self.dt == dtype::FLOAT16 {
            f16_to_f32(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]))
        } else {
            let c = &bytes[4 * i..4 * i + 4];
            f32::from_le_bytes([c[0], c[1], c[2], c[3]])
        }
    }

    /// Row `k` of the weight, appended to `out`.
    fn row(&self, k: usize, out: &mut Vec<u8>) {
        let s = &self.spec;
        let (blk, j) = (k / s.block, k % s.block);
        let group = self.g_idx.as_ref().map_or(blk, |g| g[k]);
        for r in 0..s.n {
            let code = s.code(&self.b, r, blk, j);
            let i = r * s.blocks + group;
            let scale = self.float_at(&self.scales, i);
            let v = match &self.zp {
                UnpackedZp::Default => (code as i32 - s.default_zero_point() as i32) as f32 * scale,
                UnpackedZp::Packed(zp) => {
                    (code as i32 - s.zero_point(zp, r, group) as i32) as f32 * scale
                }
                UnpackedZp::Float(zp) => code as f32 * scale + (-scale * self.float_at(zp, i)),
            };
            if self.dt == dtype::FLOAT16 {
                out.extend_from_slice(&f32_to_f16(v).to_le_bytes());
            } else {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
}

impl crate::io::computed::Payload for Unpacked {
    fn len(&self) -> u64 {
        (self.spec.k as u64) * (self.spec.n as u64) * self.elem() as u64
    }

    fn write(&self, out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
        let row = self.spec.n * self.elem();
        let rows = ((4usize << 20) / row.max(1)).max(1);
        let mut buf = Vec::with_capacity(rows * row);
        let mut k = 0;
        while k < self.spec.k {
            buf.clear();
            for kk in k..(k + rows).min(self.spec.k) {
                self.row(kk, &mut buf);
            }
            out(&buf)?;
            k += rows;
        }
        if self.b_mapped {
            crate::io::external::release_mapped(&self.b);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_to_single_is_exact() {
        for h in [0x3c00u16, 0xc000, 0x0001, 0x03ff, 0x7bff, 0x8000, 0x3555] {
            assert_eq!(f32_to_f16(f16_to_f32(h)), h, "{h:#x}");
        }
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0x0001), 5.960_464_5e-8);
        assert!(f16_to_f32(0x7e00).is_nan());
        assert_eq!(f16_to_f32(0xfc00), f32::NEG_INFINITY);
    }

    #[test]
    fn sub_byte_packing_is_flat_and_low_first() {
        assert_eq!(pack_flat(&[1, 2, 3], 4), vec![0x21, 0x03]);
        assert_eq!(pack_flat(&[1, 2, 3, 0, 1], 2), vec![0b0011_1001, 0b01]);
        assert_eq!(pack_flat(&[7, 200], 8), vec![7, 200]);
    }

    #[test]
    fn codes_and_zero_points_are_read_per_row() {
        // K = 40, block 32: 2 blocks of 16 bytes per row; zero points: one byte per row.
        let s = Spec {
            k: 40,
            n: 2,
            bits: 4,
            block: 32,
            blocks: 2,
            blob: 16,
            zp_row: 1,
            accuracy: 0,
        };
        let mut b = vec![0u8; 2 * 2 * 16];
        b[(2 + 1) * 16] = 0xa5; // row 1, block 1, codes 0 and 1
        assert_eq!(s.code(&b, 1, 1, 0), 0x5);
        assert_eq!(s.code(&b, 1, 1, 1), 0xa);
        let zp = [0x21u8, 0x43];
        assert_eq!(s.zero_point(&zp, 0, 1), 2);
        assert_eq!(s.zero_point(&zp, 1, 0), 3);
    }

    /// The unpacked weight, written in chunks, is byte for byte the dequantization of each
    /// element computed on its own (across several 4 MiB chunks; packed and float zero
    /// points; float32 and float16; a g_idx).
    #[test]
    fn the_unpacked_payload_is_each_element_dequantized() {
        use crate::io::computed::Payload;
        // K = 300 (10 blocks of 32, the last one padded), N = 8192: 32 KiB rows of float32,
        // 128 rows to a chunk, 3 chunks.
        let (k, n, block, bits) = (300usize, 8192usize, 32usize, 4usize);
        let blocks = k.div_ceil(block);
        let s = Spec {
            k,
            n,
            bits,
            block,
            blocks,
            blob: block * bits / 8,
            zp_row: (blocks * bits).div_ceil(8),
            accuracy: 0,
        };
        let mut seed = 7u32;
        let mut rnd = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as u8
        };
        let b: Vec<u8> = (0..n * blocks * s.blob).map(|_| rnd()).collect();
        let zp: Vec<u8> = (0..n * s.zp_row).map(|_| rnd()).collect();
        let sc: Vec<f32> = (0..n * blocks)
            .map(|_| (rnd() as f32 - 128.0) / 64.0)
            .collect();
        let zf: Vec<f32> = (0..n * blocks).map(|_| rnd() as f32 / 16.0).collect();
        let g: Vec<usize> = (0..k).map(|i| (i * 7) % blocks).collect();
        let le32 =
            |v: &[f32]| Bytes::from(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
        let le16 = |v: &[f32]| {
            Bytes::from(
                v.iter()
                    .flat_map(|&x| f32_to_f16(x).to_le_bytes())
                    .collect::<Vec<u8>>(),
            )
        };
        for (dt, zpk, gi) in [
            (dtype::FLOAT, 0, false),
            (dtype::FLOAT, 1, false),
            (dtype::FLOAT, 2, true),
            (dtype::FLOAT16, 1, false),
            (dtype::FLOAT16, 2, false),
        ] {
            let half = dt == dtype::FLOAT16;
            let enc = |v: &[f32]| if half { le16(v) } else { le32(v) };
            // The values as the model stores them (rounded to float16 for a float16 model).
            let round = |x: f32| if half { f16_to_f32(f32_to_f16(x)) } else { x };
            let p = Unpacked {
                spec: s,
                dt,
                b: Bytes::from(b.clone()),
                b_mapped: false,
                scales: enc(&sc),
                zp: match zpk {
                    0 => UnpackedZp::Default,
                    1 => UnpackedZp::Packed(Bytes::from(zp.clone())),
                    _ => UnpackedZp::Float(enc(&zf)),
                },
                g_idx: gi.then(|| g.clone()),
            };
            let mut got = Vec::new();
            let mut chunks = 0;
            p.write(&mut |c| {
                chunks += 1;
                got.extend_from_slice(c);
                Ok(())
            })
            .unwrap();
            let elem = if half { 2 } else { 4 };
            assert_eq!(got.len() as u64, p.len());
            assert_eq!(chunks, k.div_ceil((4 << 20) / (n * elem)), "chunks");
            assert!(chunks >= 2);
            for kk in (0..k).step_by(13) {
                for nn in (0..n).step_by(97) {
                    let grp = if gi { g[kk] } else { kk / block };
                    let (blk, j) = (kk / block, kk % block);
                    let byte = b[(nn * blocks + blk) * s.blob + j / 2];
                    let code = if j % 2 == 0 { byte & 15 } else { byte >> 4 };
                    let i = nn * blocks + grp;
                    let scale = round(sc[i]);
                    let v = match zpk {
                        0 => (code as f32 - 8.0) * scale,
                        1 => {
                            let z = zp[nn * s.zp_row + grp / 2];
                            let z = if grp % 2 == 0 { z & 15 } else { z >> 4 };
                            (code as f32 - z as f32) * scale
                        }
                        _ => code as f32 * scale + (-scale * round(zf[i])),
                    };
                    let at = (kk * n + nn) * elem;
                    let want = if half {
                        f32_to_f16(v).to_le_bytes().to_vec()
                    } else {
                        v.to_le_bytes().to_vec()
                    };
                    assert_eq!(
                        &got[at..at + elem],
                        &want[..],
                        "k {kk} n {nn} dt {dt} zp {zpk}"
                    );
                }
            }
        }
    }
}
