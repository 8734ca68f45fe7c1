//! The experimental operators of ONNX 1.1-1.3 (opsets 1-8), removed from the standard since,
//! that exporters of that era wrote (CoreML and Caffe2 converters, early PyTorch) and runtimes
//! still run: ONNX Runtime 1.32's CPU provider runs ImageScaler, Crop, ScaledTanh,
//! ParametricSoftplus, Affine, Scale and DynamicSlice (and ThresholdedRelu and
//! MeanVarianceNormalization, which became standard; they are in `table.rs`'s `SAME`), and
//! refuses GivenTensorFill, ConstantFill and GRUUnit; their shapes are known either way.
//!
//! The shapes follow the experimental schemas (`onnx/defs/experiments/defs.cc` of ONNX 1.3)
//! and, for Crop, ONNX Runtime's kernel (`core/providers/cpu/tensor/crop.h`).

use crate::tensor::dtype::FLOAT;

use super::ctx::{Ctx, Out};
use super::dims::{self, known_dim};
use super::tensor_ops;
use super::Dim;

/// `ImageScaler`, `ScaledTanh`, `ParametricSoftplus`, `Affine`, `Scale`: elementwise, the
/// input's element type and shape.
pub(crate) fn elementwise(c: &Ctx) -> Vec<Out> {
    vec![Out::info(c.info(0).clone())]
}

/// `Crop` of an `[N, C, H, W]` input: `border` is `[left, top, right, bottom]`; without
/// `scale` the output is `[N, C, H - top - bottom, W - left - right]`, with `scale = [h, w]`
/// it is `[N, C, h, w]`.
pub(crate) fn crop(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let Some(s) = c.shape(0) else {
        return vec![Out::dtype(dtype)];
    };
    if s.len() != 4 {
        return vec![Out::dtype(dtype)];
    }
    let border = c.attr_ints("border").unwrap_or(&[]);
    let scale = c.attr_ints("scale").filter(|v| !v.is_empty());
    let mut out = s.to_vec();
    match (border, scale) {
        (_, Some(&[h, w])) => {
            out[2] = known_dim(h);
            out[3] = known_dim(w);
        }
        (&[left, top, right, bottom], None) => {
            out[2] = shrink(&s[2], top, bottom);
            out[3] = shrink(&s[3], left, right);
        }
        _ => {
            out[2] = Dim::Unknown;
            out[3] = Dim::Unknown;
        }
    }
    vec![Out::new(dtype, Some(out))]
}

fn shrink(d: &Dim, a: i64, b: i64) -> Dim {
    match a.checked_add(b).and_then(i64::checked_neg) {
        Some(t) => match dims::add(d, &Dim::Known(t)) {
            Dim::Known(k) => known_dim(k),
            other => other,
        },
        None => Dim::Unknown,
    }
}

/// `DynamicSlice(data, starts, ends, axes?)`: `Slice` with its bounds as inputs.
pub(crate) fn dynamic_slice(c: &Ctx) -> Vec<Out> {
    tensor_ops::slice_with(c, true)
}

/// The shape a fill operator makes: from its input's contents (`input_as_shape = 1`), else
/// its input's shape, else the `shape` attribute; then `extra_shape` appended.
fn fill_shape(c: &Ctx) -> Option<Vec<Dim>> {
    let mut out: Vec<Dim> = if c.has(0) {
        if c.attr_i("input_as_shape").unwrap_or(0) != 0 {
            c.data(0)?
        } else {
            c.shape(0)?.to_vec()
        }
    } else {
        c.attr_ints("shape")
            .unwrap_or(&[])
            .iter()
            .map(|&d| Dim::Known(d))
            .collect()
    };
    out.extend(
        c.attr_ints("extra_shape")
            .unwrap_or(&[])
            .iter()
            .map(|&d| Dim::Known(d)),
    );
    Some(
        out.into_iter()
            .map(|d| match d {
                Dim::Known(k) => known_dim(k),
                other => other,
            })
            .collect(),
    )
}

/// `ConstantFill`: element type from `dtype` (float by default).
pub(crate) fn constant_fill(c: &Ctx) -> Vec<Out> {
    let dtype = c.attr_i("dtype").and_then(|d| i32::try_from(d).ok());
    vec![Out::new(Some(dtype.unwrap_or(FLOAT)), fill_shape(c))]
}

/// `GivenTensorFill`: the schema's element type is its input's, float without one.
pub(crate) fn given_tensor_fill(c: &Ctx) -> Vec<Out> {
    let dtype = if c.has(0) { c.dtype(0) } else { Some(FLOAT) };
    vec![Out::new(dtype, fill_shape(c))]
}

/// `GRUUnit(hidden_prev, gates, seq_lengths, t)`: the hidden state's type and shape.
pub(crate) fn gru_unit(c: &Ctx) -> Vec<Out> {
    vec![Out::info(c.info(0).clone())]
}
