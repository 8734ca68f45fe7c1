//! Normalizations: BatchNormalization, LayerNormalization, InstanceNormalization,
//! GroupNormalization, RMSNormalization (Y has X's shape in all of them), and the extra
//! statistics outputs where their shapes are specified.

use crate::tensor::dtype::FLOAT;

use super::ctx::{Ctx, Out};
use super::dims::norm_axis;
use super::Dim;

/// `BatchNormalization`: Y like X; running/saved statistics like the mean input.
pub(crate) fn batch_norm(c: &Ctx) -> Vec<Out> {
    let mut out = vec![Out::info(c.info(0).clone())];
    for i in 1..c.n_outputs() {
        // Outputs 1/3 follow the mean (input 3), 2/4 the variance (input 4).
        let src = if i % 2 == 1 { 3 } else { 4 };
        out.push(Out::info(c.info(src).clone()));
    }
    out
}

/// `LayerNormalization` (ONNX 17, and the older com.microsoft one): Y like X; Mean and
/// InvStdDev are `[d0, ..., d(axis-1), 1, ..., 1]` of type `stash_type` (float default),
/// as the LayerNormalization doc specifies.
pub(crate) fn layer_norm(c: &Ctx) -> Vec<Out> {
    let stats_shape = c.shape(0).and_then(|s| {
        let a = norm_axis(c.attr_i("axis").unwrap_or(-1), s.len())?;
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
        .unwrap_or(FLOAT);
    let stats_t = if c.node.domain() == "" {
        Some(stash)
    } else {
        None
    };
    vec![
        Out::info(c.info(0).clone()),
        Out::new(stats_t, stats_shape.clone()),
        Out::new(stats_t, stats_shape),
    ]
}

/// Normalizations with a single output like X.
pub(crate) fn like_x(c: &Ctx) -> Vec<Out> {
    vec![Out::info(c.info(0).clone())]
}
