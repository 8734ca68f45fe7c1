//! Convolutions and pooling: Conv, ConvInteger, QLinearConv, DeformConv, ConvTranspose,
//! MaxPool/AveragePool/LpPool, the global pools, MaxUnpool, MaxRoiPool.
//!
//! Output sizes follow the ONNX operator specifications: for Conv and the pools (Conv and
//! MaxPool docs, "output_spatial_shape"),
//!   explicit pads: floor((x + pad_begin + pad_end - ((k - 1) * d + 1)) / s) + 1
//!                  (ceil instead of floor with ceil_mode, dropping a last window that
//!                  would start in the end padding, as the MaxPool doc and the reference
//!                  implementation's op_pool_common.py do),
//!   SAME_UPPER / SAME_LOWER: ceil(x / s),
//!   VALID: floor((x - ((k - 1) * d + 1)) / s) + 1;
//! for ConvTranspose (ConvTranspose doc),
//!   s * (x - 1) + output_padding + ((k - 1) * d + 1) - pad_begin - pad_end,
//!   or x * s with SAME_*, or the `output_shape` attribute when given.

use crate::tensor::dtype::{INT32, INT64};

use super::ctx::{Ctx, Out};
use super::dims::{self, known_dim};
use super::Dim;

/// Attributes of a sliding window over `n` spatial axes.
pub(crate) struct Window {
    pub kernel: Vec<i64>,
    pub strides: Vec<i64>,
    pub dilations: Vec<i64>,
    pub pads: Vec<i64>,
    pub auto_pad: String,
    pub ceil_mode: bool,
}

impl Window {
    /// Read the window of a node with `n` spatial axes (kernel from the attribute, else
    /// `kernel`); `None` when an attribute has the wrong length.
    pub fn read(c: &Ctx, n: usize, kernel: Option<Vec<i64>>) -> Option<Window> {
        let list = |name: &str, len: usize, default: i64| -> Option<Vec<i64>> {
            match c.attr_ints(name) {
                Some(v) if !v.is_empty() => (v.len() == len).then(|| v.to_vec()),
                _ => Some(vec![default; len]),
            }
        };
        let kernel = match c.attr_ints("kernel_shape") {
            Some(k) if !k.is_empty() => k.to_vec(),
            _ => kernel?,
        };
        if kernel.len() != n {
            return None;
        }
        Some(Window {
            kernel,
            strides: list("strides", n, 1)?,
            dilations: list("dilations", n, 1)?,
            pads: list("pads", n.checked_mul(2)?, 0)?,
            auto_pad: c.attr_s("auto_pad").unwrap_or("NOTSET").to_string(),
            ceil_mode: c.attr_i("ceil_mode").unwrap_or(0) != 0,
        })
    }

    /// The output size of spatial axis `i` for an input size `x`.
    pub fn out_dim(&self, i: usize, x: &Dim, pool: bool) -> Dim {
        let (k, s, d) = (self.kernel[i], self.strides[i], self.dilations[i]);
        let (pb, pe) = (self.pads[i], self.pads[i + self.kernel.len()]);
        if k < 1 || s < 1 || d < 1 {
            return Dim::Unknown;
        }
        let Some(ek) = (k - 1).checked_mul(d).and_then(|e| e.checked_add(1)) else {
            return Dim::Unknown;
        };
        match self.auto_pad.as_str() {
            "SAME_UPPER" | "SAME_LOWER" => match x {
                Dim::Known(x) => dims::opt_dim(dims::ceil_div(*x, s)),
                other if s == 1 => other.clone(),
                // ceil(x / s) = floor((x + s - 1) / s).
                other => dims::floor_div_dim(&dims::add(other, &Dim::Known(s - 1)), s),
            },
            "VALID" => match x {
                Dim::Known(x) if *x >= ek => {
                    dims::opt_dim(dims::floor_div(x - ek, s).and_then(|q| q.checked_add(1)))
                }
                Dim::Known(_) => Dim::Unknown,
                other if s == 1 && ek == 1 => other.clone(),
                // floor((x - ek) / s) + 1 = floor((x - ek + s) / s).
                other => dims::floor_div_dim(&dims::sub_value(other, ek - s), s),
            },
            "NOTSET" | "" => {
                if pb < 0 || pe < 0 {
                    return Dim::Unknown;
                }
                match x {
                    Dim::Known(x) => {
                        let Some(total) = x.checked_add(pb).and_then(|t| t.checked_add(pe)) else {
                            return Dim::Unknown;
                        };
                        if total < ek {
                            return Dim::Unknown;
                        }
                        if pool && self.ceil_mode {
                            let Some(mut out) =
                                dims::ceil_div(total - ek, s).and_then(|q| q.checked_add(1))
                            else {
                                return Dim::Unknown;
                            };
                            // The last window must start inside the input or its begin padding.
                            if (out - 1)
                                .checked_mul(s)
                                .is_some_and(|st| Some(st) >= x.checked_add(pb))
                            {
                                out -= 1;
                            }
                            known_dim(out)
                        } else {
                            known_dim((total - ek) / s + 1)
                        }
                    }
                    other if s == 1 && pb.checked_add(pe) == Some(ek - 1) => other.clone(),
                    // floor((x + pads - ek) / s) + 1 = floor((x + pads - ek + s) / s); a
                    // pooling window that rounds up is left unknown.
                    other if !(pool && self.ceil_mode) => {
                        match pb
                            .checked_add(pe)
                            .and_then(|p| p.checked_sub(ek)?.checked_add(s)?.checked_neg())
                        {
                            Some(neg) => dims::floor_div_dim(&dims::sub_value(other, neg), s),
                            None => Dim::Unknown,
                        }
                    }
                    _ => Dim::Unknown,
                }
            }
            _ => Dim::Unknown,
        }
    }
}

/// Spatial dimensions of a weight `[M, C/g, k...]` when all are known.
fn weight_kernel(c: &Ctx, w: usize) -> Option<Vec<i64>> {
    let s = c.shape(w)?;
    s.get(2..)?.iter().map(Dim::known).collect()
}

/// The number of spatial axes: from X, else W, else `kernel_shape`.
fn spatial_rank(c: &Ctx, x: usize, w: Option<usize>) -> Option<usize> {
    c.rank(x)
        .and_then(|r| r.checked_sub(2))
        .or_else(|| w.and_then(|w| c.rank(w)?.checked_sub(2)))
        .or_else(|| {
            c.attr_ints("kernel_shape")
                .map(<[i64]>::len)
                .filter(|&n| n > 0)
        })
}

/// Shape of a convolution: `[N, M, out...]`, X at input `x`, W at input `w`.
pub(crate) fn conv_shape(c: &Ctx, x: usize, w: usize) -> Option<Vec<Dim>> {
    let n = spatial_rank(c, x, Some(w))?;
    let xs = c.shape(x);
    let batch = xs.and_then(|s| s.first().cloned()).unwrap_or(Dim::Unknown);
    let m = c
        .shape(w)
        .and_then(|s| s.first().cloned())
        .unwrap_or(Dim::Unknown);
    let mut out = vec![batch, m];
    match (Window::read(c, n, weight_kernel(c, w)), xs) {
        (Some(win), Some(xs)) if xs.len() == n + 2 => {
            out.extend((0..n).map(|i| win.out_dim(i, &xs[i + 2], false)));
        }
        _ => out.extend(std::iter::repeat_n(Dim::Unknown, n)),
    }
    Some(out)
}

pub(crate) fn conv(c: &Ctx) -> Vec<Out> {
    vec![Out::new(c.dtype(0), conv_shape(c, 0, 1))]
}

pub(crate) fn conv_integer(c: &Ctx) -> Vec<Out> {
    vec![Out::new(Some(INT32), conv_shape(c, 0, 1))]
}

/// `QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B)`.
pub(crate) fn qlinear_conv(c: &Ctx) -> Vec<Out> {
    vec![Out::new(c.dtype(7).or(c.dtype(0)), conv_shape(c, 0, 3))]
}

/// `ConvTranspose`: `[N, W[1] * group, out...]`.
pub(crate) fn conv_transpose(c: &Ctx) -> Vec<Out> {
    vec![Out::new(c.dtype(0), conv_transpose_shape(c))]
}

fn conv_transpose_shape(c: &Ctx) -> Option<Vec<Dim>> {
    let n = spatial_rank(c, 0, Some(1))?;
    let xs = c.shape(0);
    let batch = xs.and_then(|s| s.first().cloned()).unwrap_or(Dim::Unknown);
    let group = c.attr_i("group").unwrap_or(1);
    let m = match c.shape(1).and_then(|s| s.get(1)) {
        Some(d) if group >= 1 => dims::mul(d, &Dim::Known(group)),
        _ => Dim::Unknown,
    };
    let mut out = vec![batch, m];
    if let Some(os) = c.attr_ints("output_shape").filter(|v| !v.is_empty()) {
        let os = match os.len() {
            l if l == n => os,
            l if l == n + 2 => &os[2..],
            _ => {
                out.extend(std::iter::repeat_n(Dim::Unknown, n));
                return Some(out);
            }
        };
        out.extend(os.iter().map(|&d| known_dim(d)));
        return Some(out);
    }
    let win = Window::read(c, n, weight_kernel(c, 1));
    let opad = match c.attr_ints("output_padding") {
        Some(v) if !v.is_empty() => (v.len() == n).then(|| v.to_vec()),
        _ => Some(vec![0; n]),
    };
    let (Some(win), Some(opad), Some(xs)) = (win, opad, xs.filter(|s| s.len() == n + 2)) else {
        out.extend(std::iter::repeat_n(Dim::Unknown, n));
        return Some(out);
    };
    for i in 0..n {
        let x = &xs[i + 2];
        let (k, s, d) = (win.kernel[i], win.strides[i], win.dilations[i]);
        let (pb, pe) = match win.auto_pad.as_str() {
            "NOTSET" | "" => (win.pads[i], win.pads[i + n]),
            _ => (0, 0),
        };
        let ok = k >= 1 && s >= 1 && d >= 1 && opad[i] >= 0;
        let dim = match win.auto_pad.as_str() {
            _ if !ok => Dim::Unknown,
            // x * s when the window covers a stride (else the runtimes' padding, never
            // negative, gives a smaller size): not guessed.
            "SAME_UPPER" | "SAME_LOWER" => {
                let covers = (k - 1)
                    .checked_mul(d)
                    .and_then(|e| e.checked_add(1 + opad[i]))
                    .is_some_and(|e| e >= s);
                if covers {
                    dims::mul(x, &Dim::Known(s))
                } else {
                    Dim::Unknown
                }
            }
            "NOTSET" | "" | "VALID" => {
                // s * (x - 1) + output_padding + ((k - 1) * d + 1) - pads
                let tail = (k - 1)
                    .checked_mul(d)
                    .and_then(|e| e.checked_add(1))
                    .and_then(|e| e.checked_add(opad[i]))
                    .and_then(|e| e.checked_sub(pb))
                    .and_then(|e| e.checked_sub(pe));
                match (x, tail) {
                    (Dim::Known(x), Some(t)) => dims::opt_dim(
                        x.checked_sub(1)
                            .and_then(|v| v.checked_mul(s))
                            .and_then(|v| v.checked_add(t)),
                    ),
                    (other, Some(1)) if s == 1 => other.clone(),
                    _ => Dim::Unknown,
                }
            }
            _ => Dim::Unknown,
        };
        out.push(dim);
    }
    Some(out)
}

/// Shape of a pooling op on `[N, C, spatial...]`.
fn pool_shape(c: &Ctx) -> Option<Vec<Dim>> {
    let xs = c.shape(0);
    let n = spatial_rank(c, 0, None)?;
    let mut out = vec![
        xs.and_then(|s| s.first().cloned()).unwrap_or(Dim::Unknown),
        xs.and_then(|s| s.get(1).cloned()).unwrap_or(Dim::Unknown),
    ];
    match (Window::read(c, n, None), xs) {
        (Some(win), Some(xs)) if xs.len() == n + 2 => {
            out.extend((0..n).map(|i| win.out_dim(i, &xs[i + 2], true)));
        }
        _ => out.extend(std::iter::repeat_n(Dim::Unknown, n)),
    }
    Some(out)
}

/// `MaxPool` (Y and int64 Indices), `AveragePool`, `LpPool`.
pub(crate) fn pool(c: &Ctx) -> Vec<Out> {
    let shape = pool_shape(c);
    vec![
        Out::new(c.dtype(0), shape.clone()),
        Out::new(Some(INT64), shape),
    ]
}

/// `GlobalAveragePool`, `GlobalMaxPool`, `GlobalLpPool`: `[N, C, 1, ...]`.
pub(crate) fn global_pool(c: &Ctx) -> Vec<Out> {
    let shape = c.shape(0).map(|s| {
        s.iter()
            .enumerate()
            .map(|(i, d)| if i < 2 { d.clone() } else { Dim::Known(1) })
            .collect()
    });
    vec![Out::new(c.dtype(0), shape)]
}

/// `MaxUnpool(X, I, output_shape?)`: `(x - 1) * s + k - pads`, or the given shape.
pub(crate) fn max_unpool(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    if c.has(2) {
        let shape = c.data(2).map(|d| {
            d.into_iter()
                .map(|x| match x {
                    Dim::Known(k) => known_dim(k),
                    o => o,
                })
                .collect()
        });
        return vec![Out::new(dtype, shape)];
    }
    let Some(xs) = c.shape(0) else {
        return vec![Out::dtype(dtype)];
    };
    let n = xs.len().saturating_sub(2);
    let mut out: Vec<Dim> = xs.iter().take(2).cloned().collect();
    let win = Window::read(c, n, None);
    for i in 0..n {
        out.push(match (&win, &xs[i + 2]) {
            (Some(w), Dim::Known(x)) if w.strides[i] >= 1 => dims::opt_dim(
                x.checked_sub(1)
                    .and_then(|v| v.checked_mul(w.strides[i]))
                    .and_then(|v| v.checked_add(w.kernel[i]))
                    .and_then(|v| v.checked_sub(w.pads[i]))
                    .and_then(|v| v.checked_sub(w.pads[i + n])),
            ),
            _ => Dim::Unknown,
        });
    }
    vec![Out::new(dtype, Some(out))]
}

/// `MaxRoiPool(X, rois)`: `[num_rois, C, pooled_shape...]`.
pub(crate) fn max_roi_pool(c: &Ctx) -> Vec<Out> {
    let rois = c
        .shape(1)
        .and_then(|s| s.first().cloned())
        .unwrap_or(Dim::Unknown);
    let ch = c
        .shape(0)
        .and_then(|s| s.get(1).cloned())
        .unwrap_or(Dim::Unknown);
    let shape = c.attr_ints("pooled_shape").map(|p| {
        let mut o = vec![rois, ch];
        o.extend(p.iter().map(|&d| known_dim(d)));
        o
    });
    vec![Out::new(c.dtype(0), shape)]
}
