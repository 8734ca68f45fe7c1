//! Contents of small constant tensors: decoding `TensorProto`s, and the index arithmetic that
//! folding needs (broadcast, gather, concat, slice, transpose), all bounded by
//! [`MAX_CONST_ELEMENTS`].

use crate::ir::TensorView;
use crate::tensor::dtype::*;

use super::{ConstTensor, Dim};

/// Larger constants are not decoded (their shape is still known).
pub const MAX_CONST_ELEMENTS: usize = 4096;

/// The element count of the dimensions of a small tensor: `None` when a dimension is
/// negative or larger than [`MAX_CONST_ELEMENTS`] (even if another is 0: index lists are
/// built per axis), or the product overflows.
pub(crate) fn count(dims: &[i64]) -> Option<usize> {
    let mut n: usize = 1;
    for &d in dims {
        let d = usize::try_from(d)
            .ok()
            .filter(|&d| d <= MAX_CONST_ELEMENTS)?;
        n = n.checked_mul(d)?;
    }
    Some(n)
}

pub(crate) fn is_int_type(t: i32) -> bool {
    matches!(
        t,
        UINT8 | INT8 | UINT16 | INT16 | INT32 | INT64 | BOOL | UINT32 | UINT64
    )
}

pub(crate) fn is_float_type(t: i32) -> bool {
    matches!(t, FLOAT | DOUBLE | FLOAT16 | BFLOAT16)
}

/// The contents of element values, as (symbolic) integers or floats.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Elems {
    Ints(Vec<Dim>),
    Floats(Vec<f64>),
}

impl Elems {
    pub fn len(&self) -> usize {
        match self {
            Elems::Ints(v) => v.len(),
            Elems::Floats(v) => v.len(),
        }
    }
    /// The elements at `idx`, in that order.
    pub fn pick(&self, idx: &[usize]) -> Option<Elems> {
        Some(match self {
            Elems::Ints(v) => Elems::Ints(
                idx.iter()
                    .map(|&i| v.get(i).cloned())
                    .collect::<Option<_>>()?,
            ),
            Elems::Floats(v) => Elems::Floats(
                idx.iter()
                    .map(|&i| v.get(i).copied())
                    .collect::<Option<_>>()?,
            ),
        })
    }
}

/// A tensor whose contents are known: fully (constants) or symbolically (shape values).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ValueData {
    pub dtype: i32,
    pub dims: Vec<i64>,
    pub elems: Elems,
}

impl ValueData {
    pub fn new(dtype: i32, dims: Vec<i64>, elems: Elems) -> Option<ValueData> {
        (count(&dims)? == elems.len() && elems.len() <= MAX_CONST_ELEMENTS).then_some(ValueData {
            dtype,
            dims,
            elems,
        })
    }
    pub fn ints(&self) -> Option<&[Dim]> {
        match &self.elems {
            Elems::Ints(v) => Some(v),
            Elems::Floats(_) => None,
        }
    }
}

/// Floating-point constants with more elements than this are decoded only when an inference
/// function asks for their contents (weights of a Conv, biases, batch-norm statistics are read
/// for their shape only, and decoding them all made inference allocate ~40 MB per run on a
/// 326 MB model). Shape-carrying integer tensors are always decoded. At four elements or
/// fewer a deferred entry holds about what the decoded one does, so those are decoded now.
const EAGER_FLOATS: usize = 4;

/// A floating-point constant kept undecoded: its type, dims and bytes (a reference to the
/// file's payload, not a copy), as [`read_tensor`] finds it. Facts keep it as a [`Deferred`],
/// once its dims are the value's.
#[derive(Debug, Clone)]
pub(crate) struct Lazy {
    dtype: i32,
    dims: Box<[i64]>,
    /// The payload: a slice of the file's map (a reference count, not a copy).
    raw: bytes::Bytes,
}

impl Lazy {
    /// `Some` for a raw-data floating-point tensor of more than [`EAGER_FLOATS`] (and at most
    /// [`MAX_CONST_ELEMENTS`]) elements: one that [`from_tensor`] would decode to floats.
    pub fn defer(t: TensorView<'_>) -> Option<Lazy> {
        let dtype = t.data_type?;
        let raw = t.raw_data?;
        if !is_float_type(dtype)
            || t.rest.segment.is_some()
            || crate::io::external::is_external(t.rest)
        {
            return None;
        }
        let n = count(t.dims)?;
        if n <= EAGER_FLOATS || n > MAX_CONST_ELEMENTS {
            return None;
        }
        Some(Lazy {
            dtype,
            dims: t.dims.into(),
            raw: raw.clone(),
        })
    }
    pub fn dtype(&self) -> i32 {
        self.dtype
    }
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }
    /// What is kept of it for a value whose known dims are [`Lazy::dims`] (the caller checks).
    pub fn into_deferred(self) -> Deferred {
        Deferred {
            dtype: self.dtype,
            raw: self.raw,
            decoded: std::cell::OnceCell::new(),
        }
    }
    /// The contents, decoded now (what [`Deferred::get`] would give).
    pub fn decode(&self) -> Option<ConstTensor> {
        from_tensor(TensorView::raw(&self.dims, self.dtype, &self.raw))
    }
}

/// A [`Lazy`] as facts keep it: without its dims, which are those of its value (48 bytes
/// instead of 64 and a second allocation; a rewritten model can hold one per initializer).
#[derive(Debug, Clone)]
pub(crate) struct Deferred {
    dtype: i32,
    raw: bytes::Bytes,
    /// Boxed: most are never decoded, and an empty slot is one word.
    decoded: std::cell::OnceCell<Option<Box<ConstTensor>>>,
}

impl Deferred {
    /// The contents, decoded on first use (exactly what `from_tensor` gives), given the
    /// value's dims (asked for on first use only).
    pub fn get(&self, dims: impl FnOnce() -> Option<Vec<i64>>) -> Option<&ConstTensor> {
        self.decoded
            .get_or_init(|| {
                let dims = dims()?;
                from_tensor(TensorView::raw(&dims, self.dtype, &self.raw)).map(Box::new)
            })
            .as_deref()
    }
}

/// The contents of a constant tensor: decoded now, or deferred (see [`Lazy`]).
pub(crate) fn read_tensor(t: TensorView<'_>) -> (Option<ConstTensor>, Option<Lazy>) {
    match Lazy::defer(t) {
        Some(l) => (None, Some(l)),
        None => (from_tensor(t), None),
    }
}

/// Decode a small tensor (`None` when it is large, external, of a type kept opaque here, or
/// inconsistent).
pub(crate) fn from_tensor(t: TensorView<'_>) -> Option<ConstTensor> {
    let dtype = t.data_type?;
    if t.rest.segment.is_some() || crate::io::external::is_external(t.rest) {
        return None;
    }
    let n = count(t.dims)?;
    if n > MAX_CONST_ELEMENTS {
        return None;
    }
    let dims = t.dims.to_vec();
    let r = t.rest;
    if let Some(raw) = t.raw_data {
        let raw: &[u8] = raw;
        let size = crate::tensor::raw_size(dtype, n as u64)?;
        if raw.len() as u64 != size {
            return None;
        }
        let ints = |w: usize, f: &dyn Fn(&[u8]) -> Option<i64>| -> Option<ConstTensor> {
            let v: Option<Vec<i64>> = raw.chunks_exact(w).map(f).collect();
            Some(ConstTensor {
                dtype,
                dims: dims.clone(),
                ints: Some(v?),
                floats: None,
            })
        };
        let floats = |w: usize, f: &dyn Fn(&[u8]) -> f64| -> Option<ConstTensor> {
            Some(ConstTensor {
                dtype,
                dims: dims.clone(),
                ints: None,
                floats: Some(raw.chunks_exact(w).map(f).collect()),
            })
        };
        return match dtype {
            INT8 => ints(1, &|b| Some(b[0] as i8 as i64)),
            UINT8 => ints(1, &|b| Some(b[0] as i64)),
            BOOL => ints(1, &|b| Some((b[0] != 0) as i64)),
            INT16 => ints(2, &|b| Some(i16::from_le_bytes([b[0], b[1]]) as i64)),
            UINT16 => ints(2, &|b| Some(u16::from_le_bytes([b[0], b[1]]) as i64)),
            INT32 => ints(4, &|b| Some(i32::from_le_bytes(b.try_into().ok()?) as i64)),
            UINT32 => ints(4, &|b| Some(u32::from_le_bytes(b.try_into().ok()?) as i64)),
            INT64 => ints(8, &|b| Some(i64::from_le_bytes(b.try_into().ok()?))),
            UINT64 => ints(8, &|b| {
                i64::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok()
            }),
            FLOAT => floats(4, &|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64),
            DOUBLE => floats(8, &|b| {
                f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
            }),
            FLOAT16 => floats(2, &|b| f16_to_f64(u16::from_le_bytes([b[0], b[1]]))),
            BFLOAT16 => floats(2, &|b| bf16_to_f64(u16::from_le_bytes([b[0], b[1]]))),
            _ => None,
        };
    }
    let (ints, floats): (Option<Vec<i64>>, Option<Vec<f64>>) = match dtype {
        FLOAT => (None, Some(r.float_data.iter().map(|&x| x as f64).collect())),
        DOUBLE => (None, Some(r.double_data.clone())),
        INT64 => (Some(r.int64_data.clone()), None),
        INT32 | INT16 | INT8 | UINT16 | UINT8 => {
            (Some(r.int32_data.iter().map(|&x| x as i64).collect()), None)
        }
        BOOL => (
            Some(r.int32_data.iter().map(|&x| (x != 0) as i64).collect()),
            None,
        ),
        UINT32 | UINT64 => (
            Some(
                r.uint64_data
                    .iter()
                    .map(|&x| i64::try_from(x).ok())
                    .collect::<Option<Vec<_>>>()?,
            ),
            None,
        ),
        FLOAT16 => (
            None,
            Some(r.int32_data.iter().map(|&x| f16_to_f64(x as u16)).collect()),
        ),
        BFLOAT16 => (
            None,
            Some(
                r.int32_data
                    .iter()
                    .map(|&x| bf16_to_f64(x as u16))
                    .collect(),
            ),
        ),
        _ => return None,
    };
    let len = ints.as_ref().map_or(0, Vec::len) + floats.as_ref().map_or(0, Vec::len);
    if len != n {
        return None;
    }
    Some(ConstTensor {
        dtype,
        dims,
        ints,
        floats,
    })
}

fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f64;
    let mag = match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    };
    sign * mag
}

fn bf16_to_f64(h: u16) -> f64 {
    f32::from_bits((h as u32) << 16) as f64
}

/// Round a computed value to what the element type can hold (`None`: a type not folded).
pub(crate) fn round_float(dtype: i32, x: f64) -> Option<f64> {
    match dtype {
        FLOAT => Some(x as f32 as f64),
        DOUBLE => Some(x),
        _ => None,
    }
}

/// An integer as the element type holds it (`None` when out of its range).
pub(crate) fn fit_int(dtype: i32, x: i64) -> Option<i64> {
    let (lo, hi) = match dtype {
        INT8 => (i8::MIN as i64, i8::MAX as i64),
        UINT8 => (0, u8::MAX as i64),
        INT16 => (i16::MIN as i64, i16::MAX as i64),
        UINT16 => (0, u16::MAX as i64),
        INT32 => (i32::MIN as i64, i32::MAX as i64),
        UINT32 => (0, u32::MAX as i64),
        INT64 => (i64::MIN, i64::MAX),
        UINT64 => (0, i64::MAX),
        BOOL => return Some((x != 0) as i64),
        _ => return None,
    };
    (lo..=hi).contains(&x).then_some(x)
}

/// Row-major strides of known dimensions.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(dims[i + 1]);
    }
    s
}

fn to_usize(dims: &[i64]) -> Option<Vec<usize>> {
    dims.iter().map(|&d| usize::try_from(d).ok()).collect()
}

/// Visit every multi-index of `dims` in row-major order (bounded by MAX_CONST_ELEMENTS).
fn for_each_index(dims: &[usize], mut f: impl FnMut(&[usize])) -> Option<()> {
    let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))?;
    if n > MAX_CONST_ELEMENTS {
        return None;
    }
    let mut idx = vec![0usize; dims.len()];
    for _ in 0..n {
        f(&idx);
        for ax in (0..dims.len()).rev() {
            idx[ax] += 1;
            if idx[ax] < dims[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    Some(())
}

/// Multidirectional broadcast of known shapes: the output dims, and for each input the
/// source element of every output element.
pub(crate) fn broadcast_index(inputs: &[&[i64]]) -> Option<(Vec<i64>, Vec<Vec<usize>>)> {
    let rank = inputs.iter().map(|d| d.len()).max()?;
    let mut out = vec![1i64; rank];
    for d in inputs {
        let off = rank - d.len();
        for (i, &x) in d.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = x;
            } else if x != 1 && x != *o {
                return None;
            }
        }
    }
    let out_u = to_usize(&out)?;
    let mut maps = Vec::with_capacity(inputs.len());
    for d in inputs {
        let du = to_usize(d)?;
        let st = strides(&du);
        let off = rank - d.len();
        let mut m = Vec::new();
        for_each_index(&out_u, |idx| {
            let mut s = 0usize;
            for (i, &x) in du.iter().enumerate() {
                if x != 1 {
                    s += idx[off + i] * st[i];
                }
            }
            m.push(s);
        })?;
        maps.push(m);
    }
    Some((out, maps))
}

/// Source indices of `Gather(data, indices, axis)` for known shapes; `indices` already
/// normalized to `[0, dims[axis])`.
pub(crate) fn gather_index(dims: &[i64], axis: usize, indices: &[usize]) -> Option<Vec<usize>> {
    let du = to_usize(dims)?;
    let d = *du.get(axis)?;
    let outer: usize = du[..axis]
        .iter()
        .try_fold(1usize, |a, &x| a.checked_mul(x))?;
    let inner: usize = du[axis + 1..]
        .iter()
        .try_fold(1usize, |a, &x| a.checked_mul(x))?;
    let total = outer.checked_mul(indices.len())?.checked_mul(inner)?;
    if total > MAX_CONST_ELEMENTS || indices.iter().any(|&i| i >= d) {
        return None;
    }
    let mut out = Vec::with_capacity(total);
    for o in 0..outer {
        for &j in indices {
            for i in 0..inner {
                out.push((o * d + j) * inner + i);
            }
        }
    }
    Some(out)
}

/// Concatenate known tensors along `axis` (their other dimensions must agree).
pub(crate) fn concat(parts: &[ValueData], axis: usize) -> Option<ValueData> {
    let first = parts.first()?;
    let rank = first.dims.len();
    let mut dims = first.dims.clone();
    let mut total: i64 = 0;
    for p in parts {
        if p.dims.len() != rank
            || p.dims
                .iter()
                .enumerate()
                .any(|(i, &d)| i != axis && d != first.dims[i])
        {
            return None;
        }
        total = total.checked_add(*p.dims.get(axis)?)?;
    }
    *dims.get_mut(axis)? = total;
    let is_int = matches!(first.elems, Elems::Ints(_));
    if parts
        .iter()
        .any(|p| matches!(p.elems, Elems::Ints(_)) != is_int)
    {
        return None;
    }
    let outer: usize = to_usize(&first.dims[..axis])?
        .iter()
        .try_fold(1usize, |a, &x| a.checked_mul(x))?;
    let mut ints = Vec::new();
    let mut floats = Vec::new();
    for o in 0..outer {
        for p in parts {
            let chunk = p.elems.len() / outer;
            let range = o * chunk..(o + 1) * chunk;
            match &p.elems {
                Elems::Ints(v) => ints.extend_from_slice(v.get(range)?),
                Elems::Floats(v) => floats.extend_from_slice(v.get(range)?),
            }
        }
    }
    let elems = if is_int {
        Elems::Ints(ints)
    } else {
        Elems::Floats(floats)
    };
    ValueData::new(first.dtype, dims, elems)
}

/// Source indices of a selection: for each axis, the list of indices taken.
pub(crate) fn select_index(dims: &[i64], picks: &[Vec<usize>]) -> Option<Vec<usize>> {
    let du = to_usize(dims)?;
    if picks.len() != du.len() {
        return None;
    }
    let st = strides(&du);
    let shape: Vec<usize> = picks.iter().map(Vec::len).collect();
    let mut out = Vec::new();
    for_each_index(&shape, |idx| {
        out.push(
            idx.iter()
                .enumerate()
                .map(|(ax, &i)| picks[ax][i] * st[ax])
                .sum(),
        )
    })?;
    Some(out)
}

/// Source indices of a transpose.
pub(crate) fn transpose_index(dims: &[i64], perm: &[usize]) -> Option<Vec<usize>> {
    let du = to_usize(dims)?;
    let st = strides(&du);
    let out_dims: Vec<usize> = perm
        .iter()
        .map(|&p| du.get(p).copied())
        .collect::<Option<_>>()?;
    let mut out = Vec::new();
    for_each_index(&out_dims, |idx| {
        out.push(idx.iter().enumerate().map(|(i, &x)| x * st[perm[i]]).sum())
    })?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::TensorProto;

    #[test]
    fn decodes_raw_and_typed() {
        let t = TensorProto {
            dims: vec![2],
            data_type: Some(INT64),
            raw_data: Some(bytes::Bytes::from(
                [3i64.to_le_bytes(), (-1i64).to_le_bytes()].concat(),
            )),
            ..Default::default()
        };
        assert_eq!(
            from_tensor((&t).into()).and_then(|c| c.ints),
            Some(vec![3, -1])
        );
        let t = TensorProto {
            dims: vec![1],
            data_type: Some(FLOAT16),
            int32_data: vec![0x3c00],
            ..Default::default()
        };
        assert_eq!(
            from_tensor((&t).into()).and_then(|c| c.floats),
            Some(vec![1.0])
        );
        // Length mismatch, huge claim: no contents.
        let t = TensorProto {
            dims: vec![3],
            data_type: Some(INT64),
            int64_data: vec![1],
            ..Default::default()
        };
        assert!(from_tensor((&t).into()).is_none());
        let t = TensorProto {
            dims: vec![i64::MAX, i64::MAX],
            data_type: Some(FLOAT),
            ..Default::default()
        };
        assert!(from_tensor((&t).into()).is_none());
    }

    #[test]
    fn index_helpers() {
        let (d, m) = broadcast_index(&[&[2, 1], &[3]]).unwrap();
        assert_eq!(d, vec![2, 3]);
        assert_eq!(m[0], vec![0, 0, 0, 1, 1, 1]);
        assert_eq!(m[1], vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(gather_index(&[3, 2], 0, &[2, 0]).unwrap(), vec![4, 5, 0, 1]);
        assert_eq!(
            transpose_index(&[2, 3], &[1, 0]).unwrap(),
            vec![0, 3, 1, 4, 2, 5]
        );
        assert_eq!(select_index(&[4], &[vec![3, 1]]).unwrap(), vec![3, 1]);
    }
}
