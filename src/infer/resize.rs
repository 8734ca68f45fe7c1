//! Resize and Upsample. From the ONNX Resize doc: each output dimension is
//! `floor(input_dimension * (roi_end - roi_start) * scale)` when `sizes` is not given, else
//! `sizes` (with `keep_aspect_ratio_policy` "not_larger"/"not_smaller" since opset 18:
//! `round_int(min/max(sizes[i] / in_size[d]) * in_size[d])`). The product is taken in
//! single precision as ONNX's own shape inference does; a result that double precision
//! would round differently is left unknown rather than guessed.

use super::ctx::{Ctx, Out};
use super::dims::{known_dim, norm_axes};
use super::Dim;

/// `floor(x * scale)`, `None` when single and double precision disagree or it is absurd.
fn scaled(x: i64, scale: f64) -> Option<i64> {
    let f32v = ((x as f32) * (scale as f32)).floor();
    let f64v = ((x as f64) * (scale as f32 as f64)).floor();
    if !f32v.is_finite() || f32v < 0.0 || f32v as f64 != f64v || f64v >= 9.0e18 {
        return None;
    }
    Some(f64v as i64)
}

/// Apply per-axis scales to a shape.
fn apply_scales(s: &[Dim], axes: &[usize], scales: &[f64]) -> Vec<Dim> {
    let mut out = s.to_vec();
    for (&a, &sc) in axes.iter().zip(scales) {
        out[a] = match &s[a] {
            _ if !(sc.is_finite() && sc > 0.0) => Dim::Unknown,
            d if sc == 1.0 => d.clone(),
            Dim::Known(x) => scaled(*x, sc).map_or(Dim::Unknown, Dim::Known),
            _ => Dim::Unknown,
        };
    }
    out
}

/// The axes that `scales`/`sizes` of length `n` refer to.
fn resize_axes(c: &Ctx, rank: usize, n: usize) -> Option<Vec<usize>> {
    let axes = match c.attr_ints("axes") {
        Some(a) if !a.is_empty() => norm_axes(a, rank)?,
        _ => (0..rank).collect(),
    };
    (axes.len() == n).then_some(axes)
}

fn resize_shape(c: &Ctx) -> Option<Vec<Dim>> {
    let s = c.shape(0)?;
    let rank = s.len();
    let unknown = Some(vec![Dim::Unknown; rank]);
    let (scales_at, sizes_at) = if c.version() < 11 {
        (1, None)
    } else {
        (2, Some(3))
    };
    if let Some(sz) = sizes_at.filter(|&i| c.has(i)) {
        let Some(sizes) = c.data(sz).filter(|d| !d.is_empty()) else {
            // An empty or unknown `sizes`: scales decide if they are known.
            return scales_shape(c, s, scales_at).or(unknown);
        };
        let Some(axes) = resize_axes(c, rank, sizes.len()) else {
            return unknown;
        };
        let policy = c.attr_s("keep_aspect_ratio_policy").unwrap_or("stretch");
        let mut out = s.to_vec();
        if policy == "stretch" {
            for (&a, d) in axes.iter().zip(sizes) {
                out[a] = match d {
                    Dim::Known(k) => known_dim(k),
                    other => other,
                };
            }
            return Some(out);
        }
        // not_larger / not_smaller: one scale for all axes.
        let mut ratios = Vec::new();
        for (&a, d) in axes.iter().zip(&sizes) {
            match (&s[a], d) {
                (Dim::Known(x), Dim::Known(k)) if *x > 0 && *k >= 0 => {
                    ratios.push((*k as f64 / *x as f64, *k as f32 / *x as f32))
                }
                _ => return unknown,
            }
        }
        let pick = |a: f64, b: f64| {
            if policy == "not_larger" {
                a.min(b)
            } else {
                a.max(b)
            }
        };
        let pick32 = |a: f32, b: f32| {
            if policy == "not_larger" {
                a.min(b)
            } else {
                a.max(b)
            }
        };
        let Some(s64) = ratios.iter().map(|r| r.0).reduce(pick) else {
            return unknown;
        };
        let Some(s32) = ratios.iter().map(|r| r.1).reduce(pick32) else {
            return unknown;
        };
        for &a in &axes {
            let x = s[a].known()?;
            // round_int: nearest, halfway cases up.
            let r64 = (s64 * x as f64 + 0.5).floor();
            let r32 = (s32 * x as f32 + 0.5).floor() as f64;
            out[a] = if r64 == r32 && (0.0..9.0e18).contains(&r64) {
                Dim::Known(r64 as i64)
            } else {
                Dim::Unknown
            };
        }
        return Some(out);
    }
    scales_shape(c, s, scales_at).or(unknown)
}

fn scales_shape(c: &Ctx, s: &[Dim], at: usize) -> Option<Vec<Dim>> {
    let scales = c.floats(at).filter(|v| !v.is_empty())?;
    let axes = resize_axes(c, s.len(), scales.len())?;
    if c.attr_s("coordinate_transformation_mode") == Some("tf_crop_and_resize") {
        // The size then depends on the roi too.
        let full = c.floats(1).is_some_and(|r| {
            r.len() == 2 * scales.len()
                && r[..scales.len()].iter().all(|&x| x == 0.0)
                && r[scales.len()..].iter().all(|&x| x == 1.0)
        });
        if !full {
            return None;
        }
    }
    Some(apply_scales(s, &axes, &scales))
}

/// `Resize` (opset 10: X, scales; 11+: X, roi, scales, sizes).
pub(crate) fn resize(c: &Ctx) -> Vec<Out> {
    vec![Out::new(c.dtype(0), resize_shape(c))]
}

/// `Upsample` (scales an attribute before opset 9, input 1 after).
pub(crate) fn upsample(c: &Ctx) -> Vec<Out> {
    let shape = c.shape(0).map(|s| {
        let scales: Option<Vec<f64>> = if c.version() < 9 {
            c.attr_floats("scales")
                .map(|v| v.iter().map(|&x| x as f64).collect())
        } else {
            c.floats(1)
        };
        match scales.filter(|v| v.len() == s.len()) {
            Some(sc) => apply_scales(s, &(0..s.len()).collect::<Vec<_>>(), &sc),
            None => vec![Dim::Unknown; s.len()],
        }
    });
    vec![Out::new(c.dtype(0), shape)]
}
