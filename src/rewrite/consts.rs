//! Constant tensors as rewrites need them: the tensor behind a value (an initializer or a
//! `Constant` node's `value`), its contents decoded (also from external data), slices of it
//! along axis 0 that share the payload bytes, and attribute readers.
//!
//! These read the file's own bytes; what a value's shape or type *is* comes from `infer`.

use crate::io::external::{external_ref, is_external};
use crate::io::ExternalData;
use crate::ir::{Graph, NodeId, Origin, TensorView, ValueId};
use crate::proto::TensorProto;
use crate::tensor::{dtype, element_count, raw_size};

/// The constant tensor a value holds, if it is an initializer (not overridable by a graph
/// input) or the output of a `Constant` node with a `value` attribute.
pub fn constant_tensor(g: &Graph, v: ValueId) -> Option<TensorView<'_>> {
    match g.value(v).origin {
        Origin::Initializer => g.initializer(v),
        Origin::Node { node, .. } => {
            let n = g.node(node);
            if n.op_type == "Constant" && n.domain().is_empty() {
                n.attr("value").and_then(|a| a.t()).map(TensorView::from)
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
pub fn slice_rows(t: TensorView<'_>, start: i64, end: i64) -> Option<TensorProto> {
    let d0 = *t.dims.first()?;
    if start < 0 || end < start || end > d0 || crate::io::external::is_external(t.rest) {
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
    if let Some(raw) = t.raw_data {
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
    let r = t.rest;
    macro_rules! take {
        ($f:ident) => {
            if !r.$f.is_empty() {
                out.$f = r.$f.get(s..e)?.to_vec();
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

/// An attribute of a node by name.
pub fn attr<'a>(g: &'a Graph, n: NodeId, name: &str) -> Option<&'a crate::ir::Attribute> {
    g.node(n).attr(name)
}

pub fn attr_i(g: &Graph, n: NodeId, name: &str) -> Option<i64> {
    attr(g, n, name).and_then(|a| a.i())
}

pub fn attr_ints(g: &Graph, n: NodeId, name: &str) -> Option<Vec<i64>> {
    attr(g, n, name).map(|a| a.ints().to_vec())
}

/// The constant tensor behind a value, as the decompositions read it: an initializer (also one
/// that is a graph input's default), or any `value*` attribute of a `Constant` node.
pub fn const_tensor(g: &Graph, v: ValueId) -> Option<TensorProto> {
    match g.value(v).origin {
        Origin::Initializer | Origin::Input => {
            g.initializer(v).map(|t| t.to_proto(Some(g.value_name(v))))
        }
        Origin::Node { node, .. } => {
            let nd = g.node(node);
            if nd.op_type != "Constant" || !nd.domain().is_empty() {
                return None;
            }
            let a = nd.attributes.first()?;
            match a.name() {
                "value" => a.t().cloned(),
                "value_ints" => Some(TensorProto {
                    dims: vec![a.ints().len() as i64],
                    data_type: Some(dtype::INT64),
                    int64_data: a.ints().to_vec(),
                    ..Default::default()
                }),
                "value_int" => Some(TensorProto {
                    data_type: Some(dtype::INT64),
                    int64_data: vec![a.i()?],
                    ..Default::default()
                }),
                "value_float" => Some(TensorProto {
                    data_type: Some(dtype::FLOAT),
                    float_data: vec![a.f()?],
                    ..Default::default()
                }),
                "value_floats" => Some(TensorProto {
                    dims: vec![a.floats().len() as i64],
                    data_type: Some(dtype::FLOAT),
                    float_data: a.floats().to_vec(),
                    ..Default::default()
                }),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The payload bytes of a tensor stored as `raw_data` (or externally, with a resolver).
fn raw_bytes(t: &TensorProto, ext: Option<&ExternalData>) -> Option<bytes::Bytes> {
    if is_external(t) {
        let ext = ext?;
        let r = external_ref(t).ok()?;
        return ext.read(&r).ok();
    }
    t.raw_data.clone()
}

fn element_count_of(t: &TensorProto) -> Option<usize> {
    let n = crate::tensor::element_count(&t.dims).ok()?;
    usize::try_from(n).ok()
}

/// The values of an integer tensor (int64 or int32), or `None`.
pub fn tensor_i64(t: &TensorProto, ext: Option<&ExternalData>) -> Option<Vec<i64>> {
    let n = element_count_of(t)?;
    let v: Vec<i64> = match t.data_type? {
        dtype::INT64 => match raw_bytes(t, ext) {
            Some(b) => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            None => t.int64_data.clone(),
        },
        dtype::INT32 => match raw_bytes(t, ext) {
            Some(b) => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as i64)
                .collect(),
            None => t.int32_data.iter().map(|&x| x as i64).collect(),
        },
        _ => return None,
    };
    (v.len() == n).then_some(v)
}

/// The values of a float32 tensor, or `None`.
pub fn tensor_f32(t: &TensorProto, ext: Option<&ExternalData>) -> Option<Vec<f32>> {
    if t.data_type? != dtype::FLOAT {
        return None;
    }
    let n = element_count_of(t)?;
    let v: Vec<f32> = match raw_bytes(t, ext) {
        Some(b) => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
            .collect(),
        None => t.float_data.clone(),
    };
    (v.len() == n).then_some(v)
}

/// The integer values of a constant value (initializer or `Constant`).
pub fn const_i64(g: &Graph, v: ValueId, ext: Option<&ExternalData>) -> Option<Vec<i64>> {
    tensor_i64(&const_tensor(g, v)?, ext)
}
