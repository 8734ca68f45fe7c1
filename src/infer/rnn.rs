//! Recurrent layers: RNN, GRU, LSTM (ONNX docs: Y `[seq_length, num_directions,
//! batch_size, hidden_size]`, Y_h / Y_c `[num_directions, batch_size, hidden_size]`; with
//! `layout = 1` (opset 14) batch comes first: Y `[batch, seq, num_directions, hidden]`,
//! Y_h `[batch, num_directions, hidden]`).

use super::ctx::{Ctx, Out};
use super::dims::known_dim;
use super::Dim;

pub(crate) fn recurrent(c: &Ctx) -> Vec<Out> {
    let dtype = c.dtype(0);
    let layout = c.attr_i("layout").unwrap_or(0);
    let dirs = match c.attr_s("direction").unwrap_or("forward") {
        "bidirectional" => Dim::Known(2),
        "forward" | "reverse" => Dim::Known(1),
        _ => Dim::Unknown,
    };
    // hidden_size, else the last axis of R `[num_directions, gates * hidden, hidden]`.
    let hidden = match c.attr_i("hidden_size") {
        Some(h) => known_dim(h),
        None => c
            .shape(2)
            .and_then(|r| r.get(2).cloned())
            .unwrap_or(Dim::Unknown),
    };
    let (seq, batch) = match (c.shape(0), layout) {
        (Some([s, b, _]), 0) => (s.clone(), b.clone()),
        (Some([b, s, _]), 1) => (s.clone(), b.clone()),
        _ => (Dim::Unknown, Dim::Unknown),
    };
    if layout != 0 && layout != 1 {
        return c.all_dtype(dtype);
    }
    let y = if layout == 0 {
        vec![seq, dirs.clone(), batch.clone(), hidden.clone()]
    } else {
        vec![batch.clone(), seq, dirs.clone(), hidden.clone()]
    };
    let h = if layout == 0 {
        vec![dirs, batch, hidden]
    } else {
        vec![batch, dirs, hidden]
    };
    vec![
        Out::new(dtype, Some(y)),
        Out::new(dtype, Some(h.clone())),
        Out::new(dtype, Some(h)),
    ]
}
