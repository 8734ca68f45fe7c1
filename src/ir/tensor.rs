//! An initializer's tensor in a few words: the fields nearly every initializer has (its
//! dimensions, element type and raw payload) in place, every other field in one box that only
//! tensors with such fields have. A `TensorProto` is 352 bytes whatever it holds; a split of
//! one depthwise convolution makes about fifteen new initializers, a graph of 50,000 nodes can
//! hold 25,000. The name is not kept: an initializer's name is its value's.
//!
//! [`TensorView`] reads either kind (and any `TensorProto`, such as an attribute's) the same
//! way.

use bytes::Bytes;

use crate::proto::TensorProto;

/// See the module documentation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tensor {
    pub dims: Box<[i64]>,
    pub data_type: Option<i32>,
    pub raw_data: Option<Bytes>,
    /// Every other field, when the tensor has any (its `dims`, `data_type`, `raw_data` and
    /// `name` are left empty).
    rest: Option<Box<TensorProto>>,
}

/// Every field empty: the rest of a tensor that has no other field.
static EMPTY: std::sync::LazyLock<TensorProto> = std::sync::LazyLock::new(TensorProto::default);

impl Tensor {
    /// The tensor of a message; its name is dropped (the caller names the value).
    pub fn from_proto(mut t: TensorProto) -> Tensor {
        let dims = std::mem::take(&mut t.dims);
        let data_type = t.data_type.take();
        let raw_data = t.raw_data.take();
        t.name = None;
        // Every other field, by hand (comparing with an empty message walks them all too).
        let empty = t.segment.is_none()
            && t.float_data.is_empty()
            && t.int32_data.is_empty()
            && t.string_data.is_empty()
            && t.int64_data.is_empty()
            && t.double_data.is_empty()
            && t.uint64_data.is_empty()
            && t.doc_string.is_none()
            && t.external_data.is_empty()
            && t.data_location.is_none()
            && t.metadata_props.is_empty();
        debug_assert_eq!(empty, t == *EMPTY, "a field of TensorProto is not checked");
        let rest = (!empty).then(|| Box::new(t));
        Tensor {
            dims: dims.into_boxed_slice(),
            data_type,
            raw_data,
            rest,
        }
    }

    /// The message, named `name`.
    pub fn to_proto(&self, name: &str) -> TensorProto {
        self.view().to_proto(Some(name))
    }

    /// The fields other than dims, element type, payload and name (all empty for most).
    pub fn rest(&self) -> &TensorProto {
        self.rest.as_deref().unwrap_or(&EMPTY)
    }

    pub fn view(&self) -> TensorView<'_> {
        TensorView {
            dims: &self.dims,
            data_type: self.data_type,
            raw_data: self.raw_data.as_ref(),
            rest: self.rest(),
        }
    }

    /// The bytes of data the tensor carries in the model file itself (its payload and typed
    /// lists, a computed payload's length; 0 for data kept in an external file).
    pub fn inline_len(&self) -> u64 {
        let r = self.rest();
        if let Some(p) = crate::io::computed::get(r) {
            return p.len();
        }
        if crate::io::external::is_external(r) {
            return 0;
        }
        let raw = self.raw_data.as_ref().map_or(0, |b| b.len()) as u64;
        let typed = 4 * (r.float_data.len() + r.int32_data.len()) as u64
            + 8 * (r.int64_data.len() + r.double_data.len() + r.uint64_data.len()) as u64
            + r.string_data.iter().map(|s| s.len() as u64).sum::<u64>();
        raw + typed
    }

    /// The other fields, to change in place (boxed from here on; leave its dims, element
    /// type, payload and name empty).
    pub fn rest_mut(&mut self) -> &mut TensorProto {
        self.rest.get_or_insert_with(Default::default)
    }
}

impl From<TensorProto> for Tensor {
    fn from(t: TensorProto) -> Self {
        Tensor::from_proto(t)
    }
}

/// A tensor as its readers see it: dimensions, element type and raw payload, and the message
/// that holds every other field (`rest`; read its other fields only, never these three or its
/// name).
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    pub dims: &'a [i64],
    pub data_type: Option<i32>,
    pub raw_data: Option<&'a Bytes>,
    pub rest: &'a TensorProto,
}

impl<'a> TensorView<'a> {
    /// Whether a field other than dims, element type, payload and name may be set (`false`
    /// only for a compact tensor that has none).
    pub fn has_rest(&self) -> bool {
        !std::ptr::eq(self.rest, &*EMPTY)
    }

    /// The message, named `name`.
    pub fn to_proto(&self, name: Option<&str>) -> TensorProto {
        TensorProto {
            dims: self.dims.to_vec(),
            data_type: self.data_type,
            raw_data: self.raw_data.cloned(),
            name: name.map(str::to_string),
            ..self.rest.clone()
        }
    }

    /// A tensor of these dimensions and element type whose payload is `raw`, no other field.
    pub fn raw(dims: &'a [i64], data_type: i32, raw: &'a Bytes) -> Self {
        TensorView {
            dims,
            data_type: Some(data_type),
            raw_data: Some(raw),
            rest: &EMPTY,
        }
    }
}

impl<'a> From<&'a TensorProto> for TensorView<'a> {
    fn from(t: &'a TensorProto) -> Self {
        TensorView {
            dims: &t.dims,
            data_type: t.data_type,
            raw_data: t.raw_data.as_ref(),
            rest: t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensor_keeps_every_field_but_its_name() {
        let plain = TensorProto {
            dims: vec![2, 3],
            data_type: Some(1),
            name: Some("w".to_string()),
            raw_data: Some(Bytes::from(vec![0u8; 24])),
            ..Default::default()
        };
        let t = Tensor::from_proto(plain.clone());
        assert!(t.rest.is_none(), "a plain tensor needs no box");
        assert_eq!(t.to_proto("w"), plain);
        let full = TensorProto {
            int64_data: vec![4],
            doc_string: Some("d".to_string()),
            data_location: Some(0),
            ..plain
        };
        let t = Tensor::from_proto(full.clone());
        assert!(t.rest.is_some());
        assert_eq!(t.to_proto("w"), full);
        assert_eq!(t.view().rest.int64_data, vec![4]);
        assert_eq!(t.to_proto("v").name.as_deref(), Some("v"));
        // A present but empty payload, or element type 0, is kept as present.
        let t = Tensor::from_proto(TensorProto {
            data_type: Some(0),
            raw_data: Some(Bytes::new()),
            ..Default::default()
        });
        assert_eq!(t.to_proto("x").data_type, Some(0));
        assert_eq!(t.to_proto("x").raw_data, Some(Bytes::new()));
    }
}
