//! What the matcher may know about a value: its element type, its shape (static, symbolic or
//! unknown dimensions), whether it is a constant and, for small integer constants, its values.
//!
//! The matcher only sees the [`ValueFacts`] trait. [`DeclaredFacts`] is the simplest source:
//! what the file itself declares (graph inputs/outputs, `value_info`, initializers and
//! `Constant` nodes), with no inference. Shape inference (`src/infer/`) implements the same trait
//! with far more known values.

use crate::ir::{Graph, Origin, ValueId};
use crate::proto::{tensor_shape_proto::dimension, type_proto, AttributeProto, TensorProto};
use crate::tensor::dtype;

/// One dimension of a shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FactDim {
    /// A number known before the model runs.
    Known(i64),
    /// A named (symbolic) dimension such as `N` or `batch`; equal names are equal sizes.
    Sym(String),
    /// Nothing is known.
    Unknown,
}

impl FactDim {
    /// The number, for a known dimension.
    pub fn known(&self) -> Option<i64> {
        match self {
            FactDim::Known(d) => Some(*d),
            _ => None,
        }
    }
}

impl std::fmt::Display for FactDim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FactDim::Known(d) => write!(f, "{d}"),
            FactDim::Sym(s) => f.write_str(s),
            FactDim::Unknown => f.write_str("?"),
        }
    }
}

/// Facts about the values of one graph, as the matcher needs them.
pub trait ValueFacts {
    /// The element type (`tensor::dtype` numbering), if known.
    fn dtype(&self, v: ValueId) -> Option<i32>;
    /// The shape, if at least the rank is known.
    fn shape(&self, v: ValueId) -> Option<Vec<FactDim>>;
    /// The values of an integer constant (any integer or bool element type), if known.
    fn const_ints(&self, v: ValueId) -> Option<Vec<i64>>;
    /// Whether the value is known to be the same on every run (an initializer that is not a
    /// graph input, a `Constant` output, or something computed only from those).
    fn is_constant(&self, v: ValueId) -> bool;
}

/// The most integer elements [`DeclaredFacts::const_ints`] decodes (shape-like constants are
/// small; weights are never needed as integers).
const MAX_CONST_INTS: usize = 1 << 16;

#[derive(Debug, Clone, Default)]
struct Declared<'g> {
    dtype: Option<i32>,
    shape: Option<Vec<FactDim>>,
    constant: bool,
    tensor: Option<&'g TensorProto>,
    /// `Constant` nodes with `value_int(s)`: the values themselves.
    ints: Option<Vec<i64>>,
}

/// Facts declared by the file only: graph inputs, outputs, `value_info`, initializers and
/// `Constant` nodes. Intermediate values without `value_info` are unknown.
#[derive(Debug, Clone)]
pub struct DeclaredFacts<'g> {
    values: Vec<Declared<'g>>,
}

impl<'g> DeclaredFacts<'g> {
    pub fn new(graph: &'g Graph) -> Self {
        let mut values = vec![Declared::default(); graph.values.len()];
        let mut declare = |v: ValueId, t: Option<&crate::proto::TypeProto>| {
            let Some(slot) = values.get_mut(v.index()) else {
                return;
            };
            if let Some(type_proto::Value::TensorType(tt)) = t.and_then(|t| t.value.as_ref()) {
                if let Some(e) = tt.elem_type.filter(|&e| e != dtype::UNDEFINED) {
                    slot.dtype = Some(e);
                }
                if let Some(s) = &tt.shape {
                    slot.shape = Some(s.dim.iter().map(dim_fact).collect());
                }
            }
        };
        // Declarations, least authoritative first: value_info, then inputs and outputs.
        for vi in graph
            .value_info
            .iter()
            .chain(&graph.inputs)
            .chain(&graph.outputs)
        {
            declare(vi.value, vi.proto.r#type.as_ref());
        }
        for init in &graph.initializers {
            if let Some(slot) = values.get_mut(init.value.index()) {
                let t = &init.tensor;
                slot.dtype = t.data_type.filter(|&d| d != dtype::UNDEFINED);
                slot.shape = Some(t.dims.iter().map(|&d| FactDim::Known(d)).collect());
                slot.tensor = Some(t);
                // An initializer that is also a graph input is only a default value.
                slot.constant = matches!(graph.value(init.value).origin, Origin::Initializer);
            }
        }
        for &n in &graph.order {
            let node = graph.node(n);
            if node.op_type != "Constant" || !node.domain().is_empty() {
                continue;
            }
            let Some(Some(out)) = node.outputs.first() else {
                continue;
            };
            let Some(slot) = values.get_mut(out.index()) else {
                continue;
            };
            slot.constant = true;
            if let Some(a) = node.attributes.first() {
                constant_attr(slot, &a.proto);
            }
        }
        DeclaredFacts { values }
    }

    fn get(&self, v: ValueId) -> Option<&Declared<'g>> {
        self.values.get(v.index())
    }
}

fn dim_fact(d: &crate::proto::tensor_shape_proto::Dimension) -> FactDim {
    match &d.value {
        Some(dimension::Value::DimValue(x)) if *x >= 0 => FactDim::Known(*x),
        Some(dimension::Value::DimParam(p)) if !p.is_empty() => FactDim::Sym(p.clone()),
        _ => FactDim::Unknown,
    }
}

/// Fill a `Constant` node's output facts from its (single) value attribute.
fn constant_attr<'g>(slot: &mut Declared<'g>, a: &'g AttributeProto) {
    let scalar = |slot: &mut Declared<'g>, t: i32, shape: Vec<FactDim>| {
        slot.dtype = Some(t);
        slot.shape = Some(shape);
    };
    match a.name.as_deref() {
        Some("value") => {
            if let Some(t) = &a.t {
                slot.dtype = t.data_type.filter(|&d| d != dtype::UNDEFINED);
                slot.shape = Some(t.dims.iter().map(|&d| FactDim::Known(d)).collect());
                slot.tensor = Some(t);
            }
        }
        Some("value_int") => {
            scalar(slot, dtype::INT64, vec![]);
            slot.ints = a.i.map(|i| vec![i]);
        }
        Some("value_ints") => {
            scalar(
                slot,
                dtype::INT64,
                vec![FactDim::Known(a.ints.len() as i64)],
            );
            slot.ints = Some(a.ints.clone());
        }
        Some("value_float") => scalar(slot, dtype::FLOAT, vec![]),
        Some("value_floats") => scalar(
            slot,
            dtype::FLOAT,
            vec![FactDim::Known(a.floats.len() as i64)],
        ),
        Some("value_string") => scalar(slot, dtype::STRING, vec![]),
        Some("value_strings") => scalar(
            slot,
            dtype::STRING,
            vec![FactDim::Known(a.strings.len() as i64)],
        ),
        _ => {}
    }
}

/// Decode the values of a small integer tensor stored in the file (not external data).
pub(crate) fn tensor_ints(t: &TensorProto) -> Option<Vec<i64>> {
    use dtype::*;
    let n = usize::try_from(crate::tensor::element_count(&t.dims).ok()?).ok()?;
    if n > MAX_CONST_INTS || t.segment.is_some() || crate::io::external::is_external(t) {
        return None;
    }
    let ty = t.data_type?;
    let out: Vec<i64> = if let Some(raw) = t.raw_data.as_ref().filter(|r| !r.is_empty()) {
        let width = match ty {
            INT64 | UINT64 => 8,
            INT32 | UINT32 => 4,
            INT16 | UINT16 => 2,
            INT8 | UINT8 | BOOL => 1,
            _ => return None,
        };
        if raw.len() != n.checked_mul(width)? {
            return None;
        }
        raw.chunks_exact(width)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(c);
                let u = u64::from_le_bytes(b);
                match ty {
                    INT64 => u as i64,
                    INT32 => u as u32 as i32 as i64,
                    INT16 => u as u16 as i16 as i64,
                    INT8 => u as u8 as i8 as i64,
                    // Unsigned values: uint64 above i64::MAX saturates.
                    _ => i64::try_from(u).unwrap_or(i64::MAX),
                }
            })
            .collect()
    } else {
        match ty {
            INT64 => t.int64_data.clone(),
            INT32 | INT16 | INT8 | UINT16 | UINT8 | BOOL => {
                t.int32_data.iter().map(|&x| x as i64).collect()
            }
            UINT32 | UINT64 => t
                .uint64_data
                .iter()
                .map(|&x| i64::try_from(x).unwrap_or(i64::MAX))
                .collect(),
            _ => return None,
        }
    };
    (out.len() == n).then_some(out)
}

impl ValueFacts for DeclaredFacts<'_> {
    fn dtype(&self, v: ValueId) -> Option<i32> {
        self.get(v)?.dtype
    }
    fn shape(&self, v: ValueId) -> Option<Vec<FactDim>> {
        self.get(v)?.shape.clone()
    }
    fn const_ints(&self, v: ValueId) -> Option<Vec<i64>> {
        let d = self.get(v)?;
        if !d.constant {
            return None;
        }
        if let Some(i) = &d.ints {
            return Some(i.clone());
        }
        tensor_ints(d.tensor?)
    }
    fn is_constant(&self, v: ValueId) -> bool {
        self.get(v).is_some_and(|d| d.constant)
    }
}
