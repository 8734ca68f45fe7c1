//! Constant tensors as rewrites need them: the tensor behind a value (an initializer or a
//! `Constant` node's `value`), and slices of it along axis 0 that share the payload bytes.

use crate::ir::{Graph, Origin, ValueId};
use crate::proto::TensorProto;
use crate::tensor::{element_count, raw_size};

/// The constant tensor a value holds, if it is an initializer (not overridable by a graph
/// input) or the output of a `Constant` node with a `value` attribute.
pub fn constant_tensor(g: &Graph, v: ValueId) -> Option<&TensorProto> {
    match g.value(v).origin {
        Origin::Initializer => g.initializer(v),
        Origin::Node { node, .. } => {
            let n = g.node(node);
            if n.op_type == "Constant" && n.domain().is_empty() {
                n.attr("value").and_then(|a| a.proto.t.as_ref())
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Rows `[start, end)` along axis 0 of a dense tensor, as a new tensor. Raw payloads are
/// sliced without copying; typed payloads (float_data, ...) are copied. `None` for external,
/// string, sub-byte or malformed tensors.
pub fn slice_rows(t: &TensorProto, start: i64, end: i64) -> Option<TensorProto> {
    let d0 = *t.dims.first()?;
    if start < 0 || end < start || end > d0 || crate::io::external::is_external(t) {
        return None;
    }
    let inner = element_count(&t.dims[1..]).ok()?;
    let ty = t.data_type?;
    let mut out = TensorProto {
        dims: std::iter::once(end - start)
            .chain(t.dims[1..].iter().copied())
            .collect(),
        data_type: Some(ty),
        ..Default::default()
    };
    let (s, e) = (start as u64 * inner, end as u64 * inner);
    if let Some(raw) = &t.raw_data {
        let es = raw_size(ty, 1)?;
        // Sub-byte types would need bit shifts; refuse them.
        if raw_size(ty, 2)? != 2 * es {
            return None;
        }
        let (bs, be) = (usize::try_from(s * es).ok()?, usize::try_from(e * es).ok()?);
        if be > raw.len() {
            return None;
        }
        out.raw_data = Some(raw.slice(bs..be));
        return Some(out);
    }
    let (s, e) = (usize::try_from(s).ok()?, usize::try_from(e).ok()?);
    let mul = if ty == crate::tensor::dtype::COMPLEX64 || ty == crate::tensor::dtype::COMPLEX128 {
        2
    } else {
        1
    };
    let (s, e) = (s * mul, e * mul);
    macro_rules! take {
        ($f:ident) => {
            if !t.$f.is_empty() {
                out.$f = t.$f.get(s..e)?.to_vec();
                return Some(out);
            }
        };
    }
    take!(float_data);
    take!(int32_data);
    take!(int64_data);
    take!(double_data);
    take!(uint64_data);
    if e == s {
        return Some(out);
    }
    None
}

/// A 1-D int64 tensor.
pub fn int64s(values: &[i64]) -> TensorProto {
    TensorProto {
        dims: vec![values.len() as i64],
        data_type: Some(crate::tensor::dtype::INT64),
        raw_data: Some(bytes::Bytes::from(
            values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        )),
        ..Default::default()
    }
}

/// A scalar float32 tensor.
pub fn scalar_f32(v: f32) -> TensorProto {
    TensorProto {
        data_type: Some(crate::tensor::dtype::FLOAT),
        raw_data: Some(bytes::Bytes::from(v.to_le_bytes().to_vec())),
        ..Default::default()
    }
}
