//! Shape-manipulating operators: Shape, Size, Reshape, Flatten, Transpose, Concat, Split,
//! Slice, Squeeze, Unsqueeze, Gather*, Expand, Tile, Pad, ConstantOfShape, Range, the
//! reductions, TopK, OneHot, DepthToSpace/SpaceToDepth and friends. Semantics follow the
//! ONNX operator specifications (Operators.md); the shape-computation chains exporters
//! write are folded element by element, symbolically.

use crate::tensor::dtype::{FLOAT, INT64};

use super::consts::{self, Elems, ValueData};
use super::ctx::{Ctx, Out};
use super::dims::{self, known_dim, norm_axes, norm_axis, opt_dim};
use super::Dim;

/// A rank-known shape of unknown dimensions.
fn unknown_dims(rank: usize) -> Vec<Dim> {
    vec![Dim::Unknown; rank]
}

/// Ranks above this are treated as unknown (no allocation sized by a file's claim).
const MAX_RANK: usize = 64;

fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `Shape` (start/end since opset 15): the dimensions as a 1-D int64 tensor.
pub(crate) fn shape(c: &Ctx) -> Vec<Out> {
    let Some(s) = c.shape(0) else {
        return vec![Out::new(Some(INT64), Some(vec![Dim::Unknown]))];
    };
    let r = len_i64(s.len());
    let clamp = |x: i64| {
        let x = if x < 0 { x.saturating_add(r) } else { x };
        x.max(0).min(r) as usize
    };
    let start = clamp(c.attr_i("start").unwrap_or(0));
    let end = clamp(c.attr_i("end").unwrap_or(r)).max(start);
    let d = s[start..end].to_vec();
    match ValueData::new(INT64, vec![len_i64(d.len())], Elems::Ints(d)) {
        Some(v) => vec![Out::from_data(v)],
        None => vec![Out::new(
            Some(INT64),
            Some(vec![known_dim(len_i64(end - start))]),
        )],
    }
}

/// `Size`: the element count as an int64 scalar.
pub(crate) fn size(c: &Ctx) -> Vec<Out> {
    match c.shape(0) {
        Some(s) => {
            let n = dims::product(s);
            vec![Out::from_data(ValueData {
                dtype: INT64,
                dims: vec![],
                elems: Elems::Ints(vec![n]),
            })]
        }
        None => vec![Out::new(Some(INT64), Some(vec![]))],
    }
}

/// The dimension a `-1` stands for: input element count over the other output dimensions,
/// with names cancelled (`[N, 3, 4] -> [N, -1]` gives 12; `[b, s, 64] -> [b*s, -1]` 64).
fn solve_infer_dim(input: &[Dim], others: &[Dim]) -> Dim {
    let rest = dims::product(others);
    if rest == Dim::Known(0) {
        return Dim::Unknown;
    }
    dims::div_exact(&dims::product(input), &rest)
}

/// The output dimensions of `Reshape(input, target)`, `None` when the target is invalid.
fn reshape_dims(input: Option<&[Dim]>, target: &[Dim], allowzero: bool) -> Option<Vec<Dim>> {
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    let mut has_zero = false;
    for (i, t) in target.iter().enumerate() {
        out.push(match t {
            Dim::Known(0) if !allowzero => input
                .and_then(|s| s.get(i).cloned())
                .unwrap_or(Dim::Unknown),
            Dim::Known(-1) => {
                if infer_at.replace(i).is_some() {
                    return None;
                }
                Dim::Unknown
            }
            Dim::Known(k) if *k >= 0 => {
                has_zero |= *k == 0;
                Dim::Known(*k)
            }
            Dim::Known(_) => return None,
            other => other.clone(),
        });
    }
    if let Some(at) = infer_at {
        if has_zero {
            // allowzero=1 with both 0 and -1 is invalid.
            return None;
        }
        let others: Vec<Dim> = out
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != at)
            .map(|(_, d)| d.clone())
            .collect();
        out[at] = match input {
            Some(s) => solve_infer_dim(s, &others),
            None => Dim::Unknown,
        };
    }
    Some(out)
}

/// `Reshape` (the target is an input since opset 5, an attribute before).
pub(crate) fn reshape(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let allowzero = c.attr_i("allowzero").unwrap_or(0) != 0;
    let target: Option<Vec<Dim>> = if c.version() < 5 {
        c.attr_ints("shape")
            .map(|v| v.iter().map(|&x| Dim::Known(x)).collect())
    } else {
        c.data(1)
    };
    let Some(target) = target else {
        let rank = c.shape(1).and_then(|s| match s {
            [Dim::Known(k)] => usize::try_from(*k).ok().filter(|&k| k <= MAX_RANK),
            _ => None,
        });
        return vec![Out::new(dtype, rank.map(unknown_dims))];
    };
    if target.len() > MAX_RANK {
        return vec![Out::dtype(dtype)];
    }
    let Some(out) = reshape_dims(c.shape(0), &target, allowzero) else {
        return vec![Out::new(dtype, Some(unknown_dims(target.len())))];
    };
    if let Some(v) = c.value_data(0) {
        if let Some(d) = out.iter().map(Dim::known).collect::<Option<Vec<i64>>>() {
            if let Some(v) = ValueData::new(v.dtype, d, v.elems) {
                return vec![Out::from_data(v)];
            }
        }
    }
    vec![Out::new(dtype, Some(out))]
}

/// `Flatten`: `[prod(d[:axis]), prod(d[axis:])]`.
pub(crate) fn flatten(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let Some(s) = c.shape(0) else {
        return vec![Out::new(dtype, Some(unknown_dims(2)))];
    };
    let r = len_i64(s.len());
    let axis = c.attr_i("axis").unwrap_or(1);
    let axis = if axis < 0 {
        axis.saturating_add(r)
    } else {
        axis
    };
    if !(0..=r).contains(&axis) {
        return vec![Out::new(dtype, Some(unknown_dims(2)))];
    }
    let (a, b) = s.split_at(axis as usize);
    vec![Out::new(
        dtype,
        Some(vec![dims::product(a), dims::product(b)]),
    )]
}

/// `Transpose` (default: reverse the dimensions).
pub(crate) fn transpose(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let perm_attr = c.attr_ints("perm");
    let Some(s) = c.shape(0) else {
        let rank = perm_attr
            .map(|p| p.len())
            .filter(|&r| r > 0 && r <= MAX_RANK);
        return vec![Out::new(dtype, rank.map(unknown_dims))];
    };
    let perm: Vec<usize> = match perm_attr {
        Some(p) if !p.is_empty() || s.is_empty() => match norm_axes(p, s.len()) {
            Some(p) if p.len() == s.len() => p,
            _ => return vec![Out::new(dtype, Some(unknown_dims(s.len())))],
        },
        _ => (0..s.len()).rev().collect(),
    };
    if let Some(v) = c.value_data(0) {
        if let Some(idx) = consts::transpose_index(&v.dims, &perm) {
            let d: Vec<i64> = perm.iter().map(|&p| v.dims[p]).collect();
            if let Some(e) = v.elems.pick(&idx) {
                if let Some(v) = ValueData::new(v.dtype, d, e) {
                    return vec![Out::from_data(v)];
                }
            }
        }
    }
    vec![Out::new(
        dtype,
        Some(perm.iter().map(|&p| s[p].clone()).collect()),
    )]
}

/// `Concat` along `axis`.
pub(crate) fn concat(c: &Ctx) -> Vec<Out> {
    let dtype = (0..c.n_inputs()).find_map(|i| c.dtype(i));
    let Some(rank) = (0..c.n_inputs()).find_map(|i| c.rank(i)) else {
        return vec![Out::dtype(dtype)];
    };
    let Some(axis) = c.attr_i("axis").and_then(|a| norm_axis(a, rank)) else {
        return vec![Out::new(dtype, Some(unknown_dims(rank)))];
    };
    // Folding (shape vectors are concatenated here).
    let parts: Option<Vec<ValueData>> = (0..c.n_inputs()).map(|i| c.value_data(i)).collect();
    if let Some(parts) = parts {
        if let Some(v) = consts::concat(&parts, axis) {
            return vec![Out::from_data(v)];
        }
    }
    let mut out = unknown_dims(rank);
    let mut sum = Dim::Known(0);
    for i in 0..c.n_inputs() {
        match c.shape(i) {
            Some(s) if s.len() == rank => {
                for (j, d) in s.iter().enumerate() {
                    if j != axis {
                        out[j] = dims::unify(&out[j], d);
                    }
                }
                sum = dims::add(&sum, &s[axis]);
            }
            Some(_) => return vec![Out::new(dtype, Some(unknown_dims(rank)))],
            None => sum = Dim::Unknown,
        }
    }
    out[axis] = sum;
    vec![Out::new(dtype, Some(out))]
}

/// `Split`: sizes from the `split` attribute (before opset 13) or input, else
/// `num_outputs` (opset 18: chunks of `ceil(d / n)`, the last one smaller), else equal.
pub(crate) fn split(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let n = c.n_outputs();
    let Some(s) = c.shape(0) else {
        return c.all_dtype(dtype);
    };
    let unknown_axis = |axis: Option<usize>| -> Vec<Out> {
        (0..n)
            .map(|_| {
                let mut d = s.to_vec();
                match axis {
                    Some(a) => d[a] = Dim::Unknown,
                    None => d = unknown_dims(s.len()),
                }
                Out::new(dtype, Some(d))
            })
            .collect()
    };
    let Some(axis) = norm_axis(c.attr_i("axis").unwrap_or(0), s.len()) else {
        return unknown_axis(None);
    };
    let d = &s[axis];
    let sizes: Option<Vec<Dim>> = if c.has_attr("split") {
        c.attr_ints("split")
            .map(|v| v.iter().map(|&x| known_dim(x)).collect())
    } else if c.has(1) {
        c.ints(1).map(|v| v.iter().map(|&x| known_dim(x)).collect())
    } else if let Some(k) = c.attr_i("num_outputs") {
        match d.known() {
            Some(dv) if k > 0 && usize::try_from(k).ok() == Some(n) => {
                let chunk = dims::ceil_div(dv, k);
                chunk.map(|ch| {
                    (0..k)
                        .map(|i| {
                            let start = ch.checked_mul(i);
                            let end = ch.checked_mul(i + 1).map(|e| e.min(dv));
                            match (start, end) {
                                (Some(st), Some(e)) => Dim::Known((e - st).max(0)),
                                _ => Dim::Unknown,
                            }
                        })
                        .collect()
                })
            }
            _ => None,
        }
    } else {
        match (d, n) {
            (_, 0) => return Vec::new(),
            (_, 1) => Some(vec![d.clone()]),
            (Dim::Known(dv), _) => {
                let k = len_i64(n);
                (dv % k == 0).then(|| vec![Dim::Known(dv / k); n])
            }
            _ => None,
        }
    };
    let Some(sizes) = sizes.filter(|v| v.len() == n) else {
        return unknown_axis(Some(axis));
    };
    // Sizes that do not add up to a known dimension: the model is invalid.
    if let Some(dv) = d.known() {
        let total = sizes
            .iter()
            .try_fold(0i64, |a, x| a.checked_add(x.known()?));
        if total.is_some_and(|t| t != dv) {
            return unknown_axis(Some(axis));
        }
    }
    sizes
        .into_iter()
        .map(|sz| {
            let mut o = s.to_vec();
            o[axis] = sz;
            Out::new(dtype, Some(o))
        })
        .collect()
}

/// Ends at least this large mean "to the end" for a dimension that is not known: the
/// conventional INT32_MAX / INT64_MAX of every exporter.
const SLICE_TO_END: i64 = i32::MAX as i64;

/// The first index and length of a slice of a dimension of size `d` (ONNX Slice-10+
/// semantics: negative indices count from the back, then clamp to `[0, d]` for positive
/// steps and `[-1, d-1]` for ends of negative steps).
fn slice_range(d: i64, start: i64, end: i64, step: i64) -> Option<(i64, i64)> {
    if step == 0 || d < 0 {
        return None;
    }
    let (d, s, e, st) = (d as i128, start as i128, end as i128, step as i128);
    let s = if s < 0 { s + d } else { s };
    let e = if e < 0 { e + d } else { e };
    let (s, len) = if st > 0 {
        let s = s.max(0).min(d);
        let e = e.max(0).min(d);
        (s, if e > s { (e - s + st - 1) / st } else { 0 })
    } else {
        let s = s.max(0).min(d - 1);
        let e = e.max(-1).min(d - 1);
        (s, if s > e { (s - e - st - 1) / (-st) } else { 0 })
    };
    Some((i64::try_from(s).ok()?, i64::try_from(len).ok()?))
}

/// `Slice` (attributes before opset 10, inputs after).
pub(crate) fn slice(c: &Ctx) -> Vec<Out> {
    slice_with(c, c.version() >= 10)
}

/// `Slice`, with its bounds in inputs 1-4 (opset 10 on, and the experimental `DynamicSlice`)
/// or in attributes (before opset 10).
pub(crate) fn slice_with(c: &Ctx, bounds_in_inputs: bool) -> Vec<Out> {
    let dtype = c.dtype(0);
    let Some(s) = c.shape(0) else {
        return vec![Out::dtype(dtype)];
    };
    let rank = s.len();
    let all_unknown = || vec![Out::new(dtype, Some(unknown_dims(rank)))];
    type Args = (
        Option<Vec<Dim>>,
        Option<Vec<Dim>>,
        Option<Vec<i64>>,
        Option<Vec<i64>>,
    );
    let (starts, ends, axes, steps): Args = if !bounds_in_inputs {
        let k = |n: &str| {
            c.attr_ints(n)
                .map(|v| v.iter().map(|&x| Dim::Known(x)).collect())
        };
        (
            k("starts"),
            k("ends"),
            c.attr_ints("axes").map(<[i64]>::to_vec),
            None,
        )
    } else {
        (
            c.data(1),
            c.data(2),
            if c.has(3) { c.ints(3) } else { None },
            if c.has(4) { c.ints(4) } else { None },
        )
    };
    let (Some(starts), Some(ends)) = (starts, ends) else {
        return all_unknown();
    };
    if (bounds_in_inputs && c.has(3) && axes.is_none()) || (c.has(4) && steps.is_none()) {
        return all_unknown();
    }
    let n = starts.len();
    let axes = match axes {
        Some(a) => a,
        None => (0..len_i64(n)).collect(),
    };
    let steps = steps.unwrap_or_else(|| vec![1; n]);
    if ends.len() != n || axes.len() != n || steps.len() != n {
        return all_unknown();
    }
    let Some(axes) = norm_axes(&axes, rank) else {
        return all_unknown();
    };
    let mut out = s.to_vec();
    let mut picks: Vec<Option<(i64, i64, i64)>> = vec![None; rank];
    for i in 0..n {
        let ax = axes[i];
        let step = steps[i];
        out[ax] = match (&s[ax], &starts[i], &ends[i]) {
            (Dim::Known(d), Dim::Known(st), Dim::Known(e)) => {
                match slice_range(*d, *st, *e, step) {
                    Some((first, len)) => {
                        picks[ax] = Some((first, len, step));
                        Dim::Known(len)
                    }
                    None => Dim::Unknown,
                }
            }
            // The whole of a dimension that is not known.
            (d, Dim::Known(0), e)
                if step == 1 && (e.known().is_some_and(|e| e >= SLICE_TO_END) || e == d) =>
            {
                d.clone()
            }
            _ => Dim::Unknown,
        };
    }
    if let Some(v) = c.value_data(0) {
        if v.dims.len() == rank {
            let sel: Option<Vec<Vec<usize>>> = (0..rank)
                .map(|ax| match picks[ax] {
                    Some((first, len, step)) => (0..len)
                        .map(|k| usize::try_from(first.checked_add(k.checked_mul(step)?)?).ok())
                        .collect(),
                    None if axes.contains(&ax) => None,
                    None => Some((0..usize::try_from(v.dims[ax]).ok()?).collect()),
                })
                .collect();
            if let Some(sel) = sel {
                let d: Vec<i64> = sel.iter().map(|x| len_i64(x.len())).collect();
                if let Some(e) =
                    consts::select_index(&v.dims, &sel).and_then(|idx| v.elems.pick(&idx))
                {
                    if let Some(v) = ValueData::new(v.dtype, d, e) {
                        return vec![Out::from_data(v)];
                    }
                }
            }
        }
    }
    vec![Out::new(dtype, Some(out))]
}

/// Keep the contents of input 0 under new (fully known) dimensions, when they are known.
fn refold(c: &Ctx, out: &[Dim]) -> Option<Out> {
    let v = c.value_data(0)?;
    let d: Vec<i64> = out.iter().map(Dim::known).collect::<Option<_>>()?;
    Some(Out::from_data(ValueData::new(v.dtype, d, v.elems)?))
}

/// Axes from the attribute (older opsets) or input 1 (newer ones); `Err` when given but
/// not known.
fn axes_arg(c: &Ctx) -> Result<Option<Vec<i64>>, ()> {
    if c.has_attr("axes") {
        return Ok(c.attr_ints("axes").map(<[i64]>::to_vec));
    }
    if c.has(1) {
        return c.ints(1).map(Some).ok_or(());
    }
    Ok(None)
}

/// The number of axes in an axes input whose values are not known.
fn axes_count(c: &Ctx) -> Option<usize> {
    match c.shape(1)? {
        [Dim::Known(k)] => usize::try_from(*k).ok(),
        _ => None,
    }
}

/// `Squeeze`.
pub(crate) fn squeeze(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let Some(s) = c.shape(0) else {
        return vec![Out::dtype(dtype)];
    };
    let out: Vec<Dim> = match axes_arg(c) {
        // Axes not known, their count is: the rank is.
        Err(()) => {
            let rank = axes_count(c).and_then(|k| s.len().checked_sub(k));
            return vec![Out::new(dtype, rank.map(unknown_dims))];
        }
        Ok(Some(axes)) if !axes.is_empty() => {
            let Some(axes) = norm_axes(&axes, s.len()) else {
                return vec![Out::dtype(dtype)];
            };
            if axes
                .iter()
                .any(|&a| matches!(s[a], Dim::Known(k) if k != 1))
            {
                return vec![Out::dtype(dtype)];
            }
            s.iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, d)| d.clone())
                .collect()
        }
        // No axes: every dimension of size 1 goes, which needs all of them known.
        Ok(_) => {
            if !s.iter().all(Dim::is_known) {
                return vec![Out::dtype(dtype)];
            }
            s.iter().filter(|d| **d != Dim::Known(1)).cloned().collect()
        }
    };
    if let Some(o) = refold(c, &out) {
        return vec![o];
    }
    vec![Out::new(dtype, Some(out))]
}

/// `Unsqueeze`: insert dimensions of size 1 at `axes` (of the output).
pub(crate) fn unsqueeze(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let axes = match axes_arg(c) {
        Ok(Some(a)) => a,
        Err(()) => {
            let rank = match (axes_count(c), c.rank(0)) {
                (Some(k), Some(r)) => r.checked_add(k).filter(|&r| r <= MAX_RANK),
                _ => None,
            };
            return vec![Out::new(dtype, rank.map(unknown_dims))];
        }
        Ok(None) => return vec![Out::dtype(dtype)],
    };
    let Some(s) = c.shape(0) else {
        return vec![Out::dtype(dtype)];
    };
    let r = s.len().saturating_add(axes.len());
    if r > MAX_RANK {
        return vec![Out::dtype(dtype)];
    }
    let Some(axes) = norm_axes(&axes, r) else {
        return vec![Out::dtype(dtype)];
    };
    let mut it = s.iter();
    let out: Vec<Dim> = (0..r)
        .map(|i| {
            if axes.contains(&i) {
                Dim::Known(1)
            } else {
                it.next().cloned().unwrap_or(Dim::Unknown)
            }
        })
        .collect();
    if let Some(o) = refold(c, &out) {
        return vec![o];
    }
    vec![Out::new(dtype, Some(out))]
}

/// `Gather`: `data[:axis] + indices + data[axis+1:]`.
pub(crate) fn gather(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let (Some(s), Some(q)) = (c.shape(0), c.shape(1)) else {
        return vec![Out::dtype(dtype)];
    };
    let Some(axis) = norm_axis(c.attr_i("axis").unwrap_or(0), s.len()) else {
        return vec![Out::dtype(dtype)];
    };
    if s.len() + q.len() > MAX_RANK {
        return vec![Out::dtype(dtype)];
    }
    let mut out: Vec<Dim> = s[..axis].to_vec();
    out.extend_from_slice(q);
    out.extend_from_slice(&s[axis + 1..]);
    if let (Some(v), Some(k)) = (c.value_data(0), c.konst(1)) {
        if let (Some(idx), Some(&d)) = (&k.ints, v.dims.get(axis)) {
            let norm: Option<Vec<usize>> = idx
                .iter()
                .map(|&i| {
                    let i = if i < 0 { i.checked_add(d)? } else { i };
                    (0..d).contains(&i).then_some(i as usize)
                })
                .collect();
            let folded = norm
                .and_then(|n| consts::gather_index(&v.dims, axis, &n))
                .and_then(|src| {
                    let mut dd = v.dims[..axis].to_vec();
                    dd.extend_from_slice(&k.dims);
                    dd.extend_from_slice(&v.dims[axis + 1..]);
                    ValueData::new(v.dtype, dd, v.elems.pick(&src)?)
                });
            if let Some(f) = folded {
                return vec![Out::from_data(f)];
            }
        }
    }
    vec![Out::new(dtype, Some(out))]
}

/// `GatherElements`: the shape of the indices.
pub(crate) fn gather_elements(c: &Ctx) -> Vec<Out> {
    vec![Out::with_shape(c.dtype(0), c.info(1).shape.clone())]
}

/// `GatherND`: `indices[:-1] + data[batch_dims + indices[-1]:]`.
pub(crate) fn gather_nd(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let (Some(s), Some(q)) = (c.shape(0), c.shape(1)) else {
        return vec![Out::dtype(dtype)];
    };
    let b = usize::try_from(c.attr_i("batch_dims").unwrap_or(0)).ok();
    let (Some(b), Some(Dim::Known(k))) = (b, q.last()) else {
        return vec![Out::dtype(dtype)];
    };
    let Some(from) = usize::try_from(*k).ok().and_then(|k| k.checked_add(b)) else {
        return vec![Out::dtype(dtype)];
    };
    if from > s.len() || q.is_empty() {
        return vec![Out::dtype(dtype)];
    }
    let mut out = q[..q.len() - 1].to_vec();
    out.extend_from_slice(&s[from..]);
    vec![Out::new(dtype, Some(out))]
}

/// `Expand`: bidirectional broadcast of the input with the requested shape.
pub(crate) fn expand(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let target: Option<Vec<Dim>> = c.data(1).map(|d| {
        d.into_iter()
            .map(|x| match x {
                Dim::Known(k) => known_dim(k),
                other => other,
            })
            .collect()
    });
    let Some(target) = target else {
        let k = c.shape(1).and_then(|s| match s {
            [Dim::Known(k)] => usize::try_from(*k).ok(),
            _ => None,
        });
        let rank = match (k, c.rank(0)) {
            (Some(k), Some(r)) => Some(k.max(r)).filter(|&r| r <= MAX_RANK),
            _ => None,
        };
        return vec![Out::new(dtype, rank.map(unknown_dims))];
    };
    if target.len() > MAX_RANK {
        return vec![Out::dtype(dtype)];
    }
    if let (Some(v), Some(t)) = (c.value_data(0), c.ints(1)) {
        if let Some((d, maps)) = consts::broadcast_index(&[&v.dims, &t]) {
            if let Some(e) = v.elems.pick(&maps[0]) {
                if let Some(v) = ValueData::new(v.dtype, d, e) {
                    return vec![Out::from_data(v)];
                }
            }
        }
    }
    vec![Out::new(
        dtype,
        dims::broadcast_shapes(&[c.shape(0), Some(&target)]),
    )]
}

/// `Tile`: each dimension times its repeat count.
pub(crate) fn tile(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let Some(s) = c.shape(0) else {
        return vec![Out::dtype(dtype)];
    };
    match c.ints(1) {
        Some(r) if r.len() == s.len() && r.iter().all(|&x| x >= 0) => {
            let out = s
                .iter()
                .zip(&r)
                .map(|(d, &k)| dims::mul(d, &Dim::Known(k)))
                .collect();
            vec![Out::new(dtype, Some(out))]
        }
        _ => vec![Out::new(dtype, Some(unknown_dims(s.len())))],
    }
}

/// `Pad`: pads from the attribute (before opset 11) or input 1, axes (opset 18) input 3.
pub(crate) fn pad(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let Some(s) = c.shape(0) else {
        return vec![Out::dtype(dtype)];
    };
    let pads = if c.version() < 11 {
        c.attr_ints("pads")
            .or_else(|| c.attr_ints("paddings"))
            .map(<[i64]>::to_vec)
    } else {
        c.ints(1)
    };
    let axes: Option<Vec<usize>> = if c.has(3) {
        c.ints(3).and_then(|a| norm_axes(&a, s.len()))
    } else {
        Some((0..s.len()).collect())
    };
    let (Some(pads), Some(axes)) = (pads, axes) else {
        return vec![Out::new(dtype, Some(unknown_dims(s.len())))];
    };
    if pads.len() != 2 * axes.len() {
        return vec![Out::new(dtype, Some(unknown_dims(s.len())))];
    }
    let mut out = s.to_vec();
    for (i, &ax) in axes.iter().enumerate() {
        let total = pads[i].checked_add(pads[i + axes.len()]);
        out[ax] = match total {
            Some(t) => dims::add(&s[ax], &Dim::Known(t)),
            None => Dim::Unknown,
        };
        if let Dim::Known(k) = out[ax] {
            out[ax] = known_dim(k);
        }
    }
    vec![Out::new(dtype, Some(out))]
}

/// `ConstantOfShape`: a tensor of the requested shape filled with `value` (float 0 default).
pub(crate) fn constant_of_shape(c: &Ctx) -> Vec<Out> {
    let value = c.attr_t("value");
    let dtype = value
        .and_then(|t| t.data_type)
        .filter(|&d| d > 0)
        .unwrap_or(FLOAT);
    let Some(d) = c.data(0) else {
        let rank = c.shape(0).and_then(|s| match s {
            [Dim::Known(k)] => usize::try_from(*k).ok().filter(|&k| k <= MAX_RANK),
            _ => None,
        });
        return vec![Out::new(Some(dtype), rank.map(unknown_dims))];
    };
    let out: Vec<Dim> = d
        .into_iter()
        .map(|x| match x {
            Dim::Known(k) => known_dim(k),
            other => other,
        })
        .collect();
    if let Some(dk) = out.iter().map(Dim::known).collect::<Option<Vec<i64>>>() {
        if let Some(n) = consts::count(&dk).filter(|&n| n <= consts::MAX_CONST_ELEMENTS) {
            let fill = match value {
                Some(t) => consts::from_tensor(t.into()).and_then(|k| {
                    if k.ints.as_ref().map_or(0, Vec::len) + k.floats.as_ref().map_or(0, Vec::len)
                        != 1
                    {
                        return None;
                    }
                    Some(match (k.ints, k.floats) {
                        (Some(i), _) => Elems::Ints(vec![Dim::Known(i[0]); n]),
                        (None, Some(f)) => Elems::Floats(vec![f[0]; n]),
                        _ => return None,
                    })
                }),
                None => Some(Elems::Floats(vec![0.0; n])),
            };
            if let Some(v) = fill.and_then(|e| ValueData::new(dtype, dk, e)) {
                return vec![Out::from_data(v)];
            }
        }
    }
    vec![Out::new(Some(dtype), Some(out))]
}

/// `Range(start, limit, delta)`: `max(ceil((limit - start) / delta), 0)` elements.
pub(crate) fn range(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let unknown = || vec![Out::new(dtype, Some(vec![Dim::Unknown]))];
    let scalar = |i: usize| c.data(i).and_then(|d| (d.len() == 1).then(|| d[0].clone()));
    if let (Some(start), Some(limit), Some(delta)) = (scalar(0), scalar(1), scalar(2)) {
        let n = match (&start, &limit, &delta) {
            (Dim::Known(s), Dim::Known(l), Dim::Known(d)) if *d != 0 => {
                let span = l.checked_sub(*s);
                let n = match span {
                    Some(sp) if *d > 0 => dims::ceil_div(sp, *d),
                    Some(sp) => sp
                        .checked_neg()
                        .and_then(|sp| dims::ceil_div(sp, d.checked_neg()?)),
                    None => None,
                };
                n.map(|n| n.max(0))
            }
            // A symbolic span with a step of one: `limit - start` elements.
            (_, _, Dim::Known(1)) => {
                let n = dims::sub(&limit, &start);
                // A span that can be negative gives no elements: only a name is sure.
                let n = match n {
                    Dim::Known(_) | Dim::Unknown => Dim::Unknown,
                    n => n,
                };
                return vec![Out::new(dtype, Some(vec![n]))];
            }
            _ => None,
        };
        let Some(n) = n else { return unknown() };
        if let (Some(t), Dim::Known(s), Dim::Known(d)) = (dtype, &start, &delta) {
            if usize::try_from(n).is_ok_and(|n| n <= consts::MAX_CONST_ELEMENTS) {
                let e: Option<Vec<Dim>> = (0..n)
                    .map(|i| Some(Dim::Known(s.checked_add(i.checked_mul(*d)?)?)))
                    .collect();
                if let Some(v) = e.and_then(|e| ValueData::new(t, vec![n], Elems::Ints(e))) {
                    return vec![Out::from_data(v)];
                }
            }
        }
        return vec![Out::new(dtype, Some(vec![Dim::Known(n)]))];
    }
    // Float ranges: the count only, and only away from a rounding boundary.
    if let (Some(s), Some(l), Some(d)) = (c.floats(0), c.floats(1), c.floats(2)) {
        if let ([s], [l], [d]) = (s.as_slice(), l.as_slice(), d.as_slice()) {
            let q = (l - s) / d;
            let r = q.ceil();
            if q.is_finite()
                && (q == q.round() || (q - q.round()).abs() > 1e-6 * q.abs().max(1.0))
                && r < 9.0e18
            {
                return vec![Out::new(dtype, Some(vec![Dim::Known((r as i64).max(0))]))];
            }
        }
    }
    unknown()
}

/// The reduced shape: `axes` (normalized) dropped, or kept as 1.
fn reduced(s: &[Dim], axes: &[usize], keep: bool) -> Vec<Dim> {
    s.iter()
        .enumerate()
        .filter_map(|(i, d)| match (axes.contains(&i), keep) {
            (true, true) => Some(Dim::Known(1)),
            (true, false) => None,
            (false, _) => Some(d.clone()),
        })
        .collect()
}

/// The `Reduce*` family: axes from the attribute or (ReduceSum-13, others-18) input 1,
/// `keepdims` (default 1), `noop_with_empty_axes`.
pub(crate) fn reduce(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let keep = c.attr_i("keepdims").unwrap_or(1) != 0;
    let noop = c.attr_i("noop_with_empty_axes").unwrap_or(0) != 0;
    let Some(s) = c.shape(0) else {
        return vec![Out::dtype(dtype)];
    };
    let axes = match axes_arg(c) {
        Ok(a) => a.unwrap_or_default(),
        // An axes input known to be empty (shape [0]).
        Err(()) if c.shape(1) == Some(&[Dim::Known(0)]) => Vec::new(),
        Err(()) => {
            // Unknown axes: with keepdims every dimension is itself or 1, so a 1 stays.
            let shape = keep.then(|| {
                s.iter()
                    .map(|d| {
                        if *d == Dim::Known(1) {
                            d.clone()
                        } else {
                            Dim::Unknown
                        }
                    })
                    .collect()
            });
            return vec![Out::new(dtype, shape)];
        }
    };
    if axes.is_empty() && noop {
        return vec![Out::info(c.info(0).clone())];
    }
    let axes: Vec<usize> = if axes.is_empty() {
        (0..s.len()).collect()
    } else {
        match norm_axes(&axes, s.len()) {
            Some(a) => a,
            None => return vec![Out::dtype(dtype)],
        }
    };
    let out = reduced(s, &axes, keep);
    // Fold reductions of small integer vectors (element counts from shapes).
    if let Some(v) = c.value_data(0) {
        if let (Some(x), 1) = (v.ints(), v.dims.len()) {
            let r = match c.node.op_type.as_str() {
                "ReduceProd" => Some(dims::product(x)),
                "ReduceSum" => Some(x.iter().fold(Dim::Known(0), |a, b| dims::add(&a, b))),
                _ => None,
            };
            let d: Option<Vec<i64>> = out.iter().map(Dim::known).collect();
            if let (Some(r), Some(d)) = (r, d) {
                if let Some(v) = ValueData::new(v.dtype, d, Elems::Ints(vec![r])) {
                    return vec![Out::from_data(v)];
                }
            }
        }
    }
    vec![Out::new(dtype, Some(out))]
}

/// `ArgMax`, `ArgMin`: int64 indices along `axis`.
pub(crate) fn arg_reduce(c: &Ctx) -> Vec<Out> {
    let keep = c.attr_i("keepdims").unwrap_or(1) != 0;
    let shape = c.shape(0).and_then(|s| {
        let a = norm_axis(c.attr_i("axis").unwrap_or(0), s.len())?;
        Some(reduced(s, &[a], keep))
    });
    vec![Out::new(Some(INT64), shape)]
}

/// `TopK`: values and int64 indices, `k` along `axis` (k is an attribute before opset 10).
pub(crate) fn topk(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let k = if c.version() < 10 {
        c.attr_i("k")
    } else {
        c.ints(1).and_then(|v| (v.len() == 1).then(|| v[0]))
    };
    let shape = c.shape(0).map(|s| {
        let mut o = s.to_vec();
        if let Some(a) = norm_axis(c.attr_i("axis").unwrap_or(-1), s.len()) {
            o[a] = opt_dim(k);
        } else {
            o = unknown_dims(s.len());
        }
        o
    });
    vec![Out::new(dtype, shape.clone()), Out::new(Some(INT64), shape)]
}

/// `OneHot(indices, depth, values)`: a new axis of size `depth` at `axis` (default -1).
pub(crate) fn one_hot(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(2);
    let depth = c.ints(1).or_else(|| {
        c.floats(1).map(|f| {
            f.iter()
                .map(|&x| {
                    if x.fract() == 0.0 && x.abs() < 9e18 {
                        x as i64
                    } else {
                        -1
                    }
                })
                .collect()
        })
    });
    let depth = depth.and_then(|d| (d.len() == 1).then(|| d[0]));
    let shape = c.shape(0).and_then(|s| {
        let r = s.len() + 1;
        let a = norm_axis(c.attr_i("axis").unwrap_or(-1), r)?;
        let mut o = s.to_vec();
        o.insert(a, opt_dim(depth));
        Some(o)
    });
    vec![Out::new(dtype, shape)]
}

/// `DepthToSpace`: `[N, C/(b*b), H*b, W*b]`.
pub(crate) fn depth_to_space(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let b = c.attr_i("blocksize").filter(|&b| b > 0);
    let shape = match (c.shape(0), b) {
        (Some([n, ch, h, w]), Some(b)) => {
            let bb = b.checked_mul(b);
            let cc = match (ch, bb) {
                (Dim::Known(ch), Some(bb)) if ch % bb == 0 => Dim::Known(ch / bb),
                _ => Dim::Unknown,
            };
            Some(vec![
                n.clone(),
                cc,
                dims::mul(h, &Dim::Known(b)),
                dims::mul(w, &Dim::Known(b)),
            ])
        }
        (Some(s), _) if s.len() == 4 => Some(unknown_dims(4)),
        _ => None,
    };
    vec![Out::new(dtype, shape)]
}

/// `SpaceToDepth`: `[N, C*b*b, H/b, W/b]`.
pub(crate) fn space_to_depth(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let b = c.attr_i("blocksize").filter(|&b| b > 0);
    let div = |d: &Dim, b: i64| match d {
        Dim::Known(x) if x % b == 0 => Dim::Known(x / b),
        _ => Dim::Unknown,
    };
    let shape = match (c.shape(0), b) {
        (Some([n, ch, h, w]), Some(b)) => {
            let cc = b
                .checked_mul(b)
                .map_or(Dim::Unknown, |bb| dims::mul(ch, &Dim::Known(bb)));
            Some(vec![n.clone(), cc, div(h, b), div(w, b)])
        }
        (Some(s), _) if s.len() == 4 => Some(unknown_dims(4)),
        _ => None,
    };
    vec![Out::new(dtype, shape)]
}

/// `NonZero`: `[rank, ?]` int64.
pub(crate) fn non_zero(c: &Ctx) -> Vec<Out> {
    let shape = c
        .rank(0)
        .map(|r| vec![Dim::Known(len_i64(r)), Dim::Unknown]);
    vec![Out::new(Some(INT64), shape)]
}

/// `NonMaxSuppression`: `[?, 3]` int64.
pub(crate) fn non_max_suppression(_c: &Ctx) -> Vec<Out> {
    vec![Out::new(
        Some(INT64),
        Some(vec![Dim::Unknown, Dim::Known(3)]),
    )]
}

/// `Compress`: the selected axis becomes unknown (flattened to 1-D without an axis).
pub(crate) fn compress(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let shape = match c.attr_i("axis") {
        Some(a) => c.shape(0).and_then(|s| {
            let a = norm_axis(a, s.len())?;
            let mut o = s.to_vec();
            o[a] = Dim::Unknown;
            Some(o)
        }),
        None => Some(vec![Dim::Unknown]),
    };
    vec![Out::new(dtype, shape)]
}

/// `Unique`: Y, indices, inverse_indices, counts.
pub(crate) fn unique(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let (y, inverse) = match c.attr_i("axis") {
        Some(a) => match c.shape(0).and_then(|s| Some((s, norm_axis(a, s.len())?))) {
            Some((s, a)) => {
                let mut o = s.to_vec();
                o[a] = Dim::Unknown;
                (Some(o), Some(vec![s[a].clone()]))
            }
            None => (None, Some(vec![Dim::Unknown])),
        },
        None => (
            Some(vec![Dim::Unknown]),
            Some(vec![c.shape(0).map_or(Dim::Unknown, dims::product)]),
        ),
    };
    vec![
        Out::new(dtype, y),
        Out::new(Some(INT64), Some(vec![Dim::Unknown])),
        Out::new(Some(INT64), inverse),
        Out::new(Some(INT64), Some(vec![Dim::Unknown])),
    ]
}

/// `Det`: the batch dimensions.
pub(crate) fn det(c: &Ctx) -> Vec<Out> {
    let shape = c
        .shape(0)
        .and_then(|s| (s.len() >= 2).then(|| s[..s.len() - 2].to_vec()));
    vec![Out::new(c.dtype(0), shape)]
}

/// `GridSample(X [N, C, D...], grid [N, D_out..., r])`: `[N, C, D_out...]`.
pub(crate) fn grid_sample(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let shape = match (c.shape(0), c.shape(1)) {
        (Some(x), Some(g)) if x.len() >= 2 && g.len() == x.len() => {
            let mut o = vec![dims::unify(&x[0], &g[0]), x[1].clone()];
            o.extend_from_slice(&g[1..g.len() - 1]);
            Some(o)
        }
        (Some(x), _) => Some(unknown_dims(x.len())),
        _ => None,
    };
    vec![Out::new(dtype, shape)]
}

/// `AffineGrid(theta, size)`: `[N, H, W, 2]` or `[N, D, H, W, 3]`.
pub(crate) fn affine_grid(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let shape = c.data(1).and_then(|d| match d.as_slice() {
        [n, _c, h, w] => Some(vec![n.clone(), h.clone(), w.clone(), Dim::Known(2)]),
        [n, _c, dd, h, w] => Some(vec![
            n.clone(),
            dd.clone(),
            h.clone(),
            w.clone(),
            Dim::Known(3),
        ]),
        _ => None,
    });
    let shape = shape.map(|s| {
        s.into_iter()
            .map(|d| match d {
                Dim::Known(k) => known_dim(k),
                o => o,
            })
            .collect()
    });
    vec![Out::new(dtype, shape)]
}

/// `CenterCropPad(input, shape)`: the `axes` dimensions become the requested ones.
pub(crate) fn center_crop_pad(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let Some(s) = c.shape(0) else {
        return vec![Out::dtype(dtype)];
    };
    let axes: Option<Vec<usize>> = match c.attr_ints("axes") {
        Some(a) => norm_axes(a, s.len()),
        None => Some((0..s.len()).collect()),
    };
    let shape = match (axes, c.data(1)) {
        (Some(axes), Some(d)) if d.len() == axes.len() => {
            let mut o = s.to_vec();
            for (a, v) in axes.iter().zip(d) {
                o[*a] = match v {
                    Dim::Known(k) => known_dim(k),
                    other => other,
                };
            }
            o
        }
        _ => unknown_dims(s.len()),
    };
    vec![Out::new(dtype, Some(shape))]
}

/// `RoiAlign(X, rois, batch_indices)`: `[num_rois, C, output_height, output_width]`.
pub(crate) fn roi_align(c: &Ctx) -> Vec<Out> {
    let rois = c
        .shape(1)
        .and_then(|s| s.first().cloned())
        .unwrap_or(Dim::Unknown);
    let rois = match c.shape(2).and_then(|s| s.first()) {
        Some(b) => dims::unify(&rois, b),
        None => rois,
    };
    let ch = c
        .shape(0)
        .and_then(|s| s.get(1).cloned())
        .unwrap_or(Dim::Unknown);
    let h = known_dim(c.attr_i("output_height").unwrap_or(1));
    let w = known_dim(c.attr_i("output_width").unwrap_or(1));
    vec![Out::new(c.dtype(0), Some(vec![rois, ch, h, w]))]
}

/// `Einsum`: dimensions by subscript letter (explicit or implicit output, ellipsis).
pub(crate) fn einsum(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let shape = c.attr_s("equation").and_then(|eq| einsum_shape(c, eq));
    vec![Out::new(dtype, shape)]
}

fn einsum_shape(c: &Ctx, eq: &str) -> Option<Vec<Dim>> {
    let eq: String = eq.chars().filter(|ch| !ch.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != c.n_inputs() {
        return None;
    }
    let mut letters: std::collections::BTreeMap<char, Dim> = Default::default();
    let mut counts: std::collections::BTreeMap<char, usize> = Default::default();
    let mut ellipsis: Option<Vec<Dim>> = None;
    for (i, t) in terms.iter().enumerate() {
        let s = c.shape(i)?;
        let (pre, post, has_ell) = match t.split_once("...") {
            Some((a, b)) => (a, b, true),
            None => (*t, "", false),
        };
        let named = pre.chars().count() + post.chars().count();
        if named > s.len() || (!has_ell && named != s.len()) {
            return None;
        }
        let ell_len = s.len() - named;
        let pre_n = pre.chars().count();
        for (j, ch) in pre.chars().enumerate() {
            bind(&mut letters, &mut counts, ch, &s[j])?;
        }
        for (j, ch) in post.chars().enumerate() {
            bind(&mut letters, &mut counts, ch, &s[pre_n + ell_len + j])?;
        }
        if has_ell {
            let e = &s[pre_n..pre_n + ell_len];
            ellipsis = Some(match ellipsis {
                None => e.to_vec(),
                Some(prev) => dims::broadcast_shapes(&[Some(&prev), Some(e)])?,
            });
        }
    }
    let mut out = Vec::new();
    match rhs {
        Some(r) => {
            let (pre, post) = match r.split_once("...") {
                Some((a, b)) => (a, b),
                None => (r, ""),
            };
            for ch in pre.chars() {
                out.push(letters.get(&ch)?.clone());
            }
            if r.contains("...") {
                out.extend(ellipsis.clone().unwrap_or_default());
            }
            for ch in post.chars() {
                out.push(letters.get(&ch)?.clone());
            }
        }
        None => {
            out.extend(ellipsis.unwrap_or_default());
            for (ch, d) in &letters {
                if counts.get(ch) == Some(&1) {
                    out.push(d.clone());
                }
            }
        }
    }
    Some(out)
}

fn bind(
    letters: &mut std::collections::BTreeMap<char, Dim>,
    counts: &mut std::collections::BTreeMap<char, usize>,
    ch: char,
    d: &Dim,
) -> Option<()> {
    if !ch.is_ascii_alphabetic() {
        return None;
    }
    *counts.entry(ch).or_insert(0) += 1;
    let e = letters.entry(ch).or_insert(Dim::Unknown);
    // A letter seen twice is the same axis (1 broadcasts in numpy's einsum).
    *e = match (&*e, d) {
        (Dim::Unknown, _) if counts[&ch] == 1 => d.clone(),
        (a, b) => dims::broadcast_dim(a, b),
    };
    Some(())
}

/// `If`: the outputs of the branch taken when the condition is constant, else what both
/// branches agree on.
pub(crate) fn if_op(c: &Ctx) -> Vec<Out> {
    let (Some(t), Some(e)) = (c.attr_g("then_branch"), c.attr_g("else_branch")) else {
        return Vec::new();
    };
    match c.ints(0).as_deref() {
        Some([x]) => c.subgraph_outputs(if *x != 0 { t } else { e }),
        _ => {
            let (a, b) = (c.subgraph_outputs(t), c.subgraph_outputs(e));
            a.iter()
                .zip(&b)
                .map(|(x, y)| Out::info(dims::meet(&x.info, &y.info)))
                .collect()
        }
    }
}
