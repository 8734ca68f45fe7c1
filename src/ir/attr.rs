//! A node's attributes. Most attributes are a name and one int, float, string, or list of ints
//! or floats, with nothing else set: those are held in a few words (a decoded
//! `AttributeProto` is 336 bytes whatever it holds, and a graph of Conv nodes has five
//! attributes per node). Anything else keeps its decoded message, with graph-valued payloads
//! imported as IR graphs. Either way the attribute encodes to the bytes its message does.

use bytes::Bytes;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message as _;

use super::{Graph, SharedList};
use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, GraphProto, SparseTensorProto, TensorProto};

/// One attribute of a node (see the module documentation).
#[derive(Debug, Clone)]
pub struct Attribute(Repr);

/// A node's attributes: a list the nodes made from one share (see [`SharedList`]).
pub type Attrs = SharedList<Attribute>;

impl SharedList<Attribute> {
    /// The attributes as a vector of their own: moved out when no other node holds the list,
    /// copied when one does.
    pub fn into_vec(self) -> Vec<Attribute> {
        // An empty name allocates nothing: the placeholder left behind is free.
        self.into_vec_with(|| Attribute(Repr::Int(Box::default(), 0)))
    }
}

#[derive(Debug, Clone)]
enum Repr {
    Int(Box<str>, i64),
    Float(Box<str>, f32),
    Ints(Box<str>, Vec<i64>),
    Floats(Box<str>, Vec<f32>),
    String(Box<str>, Bytes),
    Full(Box<Full>),
}

/// An attribute in its message form, with its graphs imported (the message's `g` and
/// `graphs` are then empty).
#[derive(Debug, Clone)]
struct Full {
    proto: AttributeProto,
    g: Option<Box<Graph>>,
    graphs: Vec<Graph>,
}

impl From<AttributeProto> for Attribute {
    fn from(proto: AttributeProto) -> Attribute {
        Attribute::new(proto)
    }
}

impl Attribute {
    /// The attribute of this message (its `g` and `graphs`, if any, stay in the message).
    pub fn new(proto: AttributeProto) -> Attribute {
        Attribute::with_graphs(proto, None, Vec::new())
    }

    /// The attribute of this message and its graph-valued payloads, imported.
    pub fn with_graphs(proto: AttributeProto, g: Option<Box<Graph>>, graphs: Vec<Graph>) -> Self {
        if g.is_none() && graphs.is_empty() {
            if let Some(kind) = compact_kind(&proto) {
                return Attribute(compact(proto, kind));
            }
        }
        Attribute(Repr::Full(Box::new(Full { proto, g, graphs })))
    }

    fn full(&self) -> Option<&Full> {
        match &self.0 {
            Repr::Full(f) => Some(f),
            _ => None,
        }
    }

    pub fn name(&self) -> &str {
        match &self.0 {
            Repr::Int(n, _)
            | Repr::Float(n, _)
            | Repr::Ints(n, _)
            | Repr::Floats(n, _)
            | Repr::String(n, _) => n,
            Repr::Full(f) => f.proto.name.as_deref().unwrap_or(""),
        }
    }
    /// The declared `AttributeType` number (`type` in the message).
    pub fn kind(&self) -> Option<i32> {
        Some(match &self.0 {
            Repr::Int(..) => AttributeType::Int as i32,
            Repr::Float(..) => AttributeType::Float as i32,
            Repr::Ints(..) => AttributeType::Ints as i32,
            Repr::Floats(..) => AttributeType::Floats as i32,
            Repr::String(..) => AttributeType::String as i32,
            Repr::Full(f) => return f.proto.r#type,
        })
    }
    pub fn i(&self) -> Option<i64> {
        match &self.0 {
            Repr::Int(_, i) => Some(*i),
            Repr::Full(f) => f.proto.i,
            _ => None,
        }
    }
    pub fn f(&self) -> Option<f32> {
        match &self.0 {
            Repr::Float(_, x) => Some(*x),
            Repr::Full(f) => f.proto.f,
            _ => None,
        }
    }
    pub fn s(&self) -> Option<&Bytes> {
        match &self.0 {
            Repr::String(_, s) => Some(s),
            Repr::Full(f) => f.proto.s.as_ref(),
            _ => None,
        }
    }
    pub fn ints(&self) -> &[i64] {
        match &self.0 {
            Repr::Ints(_, v) => v,
            Repr::Full(f) => &f.proto.ints,
            _ => &[],
        }
    }
    pub fn floats(&self) -> &[f32] {
        match &self.0 {
            Repr::Floats(_, v) => v,
            Repr::Full(f) => &f.proto.floats,
            _ => &[],
        }
    }
    pub fn strings(&self) -> &[Bytes] {
        self.full().map_or(&[], |f| &f.proto.strings)
    }
    pub fn t(&self) -> Option<&TensorProto> {
        self.full()?.proto.t.as_deref()
    }
    pub fn tensors(&self) -> &[TensorProto] {
        self.full().map_or(&[], |f| &f.proto.tensors)
    }
    pub fn sparse_tensor(&self) -> Option<&SparseTensorProto> {
        self.full()?.proto.sparse_tensor.as_deref()
    }
    /// The graph payload (`g`), imported.
    pub fn g(&self) -> Option<&Graph> {
        self.full()?.g.as_deref()
    }
    /// The graph list payload (`graphs`), imported.
    pub fn graphs(&self) -> &[Graph] {
        self.full().map_or(&[], |f| &f.graphs)
    }
    pub fn g_mut(&mut self) -> Option<&mut Graph> {
        match &mut self.0 {
            Repr::Full(f) => f.g.as_deref_mut(),
            _ => None,
        }
    }
    pub fn graphs_mut(&mut self) -> &mut [Graph] {
        match &mut self.0 {
            Repr::Full(f) => &mut f.graphs,
            _ => &mut [],
        }
    }
    /// Whether the attribute holds a graph: imported, or (for a message built by a rewrite)
    /// still in the message.
    pub fn has_graph(&self) -> bool {
        self.full().is_some_and(|f| {
            f.g.is_some()
                || !f.graphs.is_empty()
                || f.proto.g.is_some()
                || !f.proto.graphs.is_empty()
        })
    }
    /// The graph payloads still in the message (`g`, then `graphs`): those of an attribute a
    /// rewrite built and that are not imported yet.
    pub fn message_graphs(&self) -> impl Iterator<Item = &GraphProto> {
        let f = self.full();
        let one = f.and_then(|f| f.proto.g.as_deref());
        let many = f.map_or(&[][..], |f| f.proto.graphs.as_slice());
        one.into_iter().chain(many)
    }

    /// The message of an attribute whose graph payloads are still in it (for their import),
    /// or the attribute itself when it has none there.
    pub fn into_message_with_graphs(self) -> Result<AttributeProto, Attribute> {
        match self.0 {
            Repr::Full(f) if f.proto.g.is_some() || !f.proto.graphs.is_empty() => {
                debug_assert!(f.g.is_none() && f.graphs.is_empty());
                Ok(f.proto)
            }
            r => Err(Attribute(r)),
        }
    }

    /// The message, without the imported graphs (see [`crate::export`] for those).
    pub fn to_proto(&self) -> AttributeProto {
        let named = |n: &str| AttributeProto {
            name: Some(n.to_string()),
            r#type: self.kind(),
            ..Default::default()
        };
        match &self.0 {
            Repr::Int(n, i) => AttributeProto {
                i: Some(*i),
                ..named(n)
            },
            Repr::Float(n, x) => AttributeProto {
                f: Some(*x),
                ..named(n)
            },
            Repr::Ints(n, v) => AttributeProto {
                ints: v.clone(),
                ..named(n)
            },
            Repr::Floats(n, v) => AttributeProto {
                floats: v.clone(),
                ..named(n)
            },
            Repr::String(n, s) => AttributeProto {
                s: Some(s.clone()),
                ..named(n)
            },
            Repr::Full(f) => f.proto.clone(),
        }
    }

    /// The length of [`Attribute::encode`]'s bytes (the message's, without imported graphs).
    pub fn encoded_len(&self) -> usize {
        use prost::encoding::{float, int32, int64};
        let head = |n: &str| str_len(1, n.as_bytes()) + int32::encoded_len(20, &self.kind_i32());
        match &self.0 {
            Repr::Int(n, i) => head(n) + int64::encoded_len(3, i),
            Repr::Float(n, x) => head(n) + float::encoded_len(2, x),
            Repr::Ints(n, v) => head(n) + int64::encoded_len_repeated(8, v),
            Repr::Floats(n, v) => head(n) + float::encoded_len_repeated(7, v),
            Repr::String(n, s) => head(n) + str_len(4, s),
            Repr::Full(f) => f.proto.encoded_len(),
        }
    }

    /// Append the attribute's message (without imported graphs) to `buf`, as prost writes it:
    /// fields in tag order.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        use prost::encoding::{float, int32, int64};
        if let Repr::Full(f) = &self.0 {
            f.proto.encode_raw(buf);
            return;
        }
        let start = buf.len();
        put(buf, 1, self.name().as_bytes());
        match &self.0 {
            Repr::Int(_, i) => int64::encode(3, i, buf),
            Repr::Float(_, x) => float::encode(2, x, buf),
            Repr::Ints(_, v) => int64::encode_repeated(8, v, buf),
            Repr::Floats(_, v) => float::encode_repeated(7, v, buf),
            Repr::String(_, s) => put(buf, 4, s),
            Repr::Full(_) => {}
        }
        int32::encode(20, &self.kind_i32(), buf);
        debug_assert_eq!(buf.len() - start, self.encoded_len());
        debug_assert_eq!(
            buf[start..],
            self.to_proto().encode_to_vec()[..],
            "attribute '{}' encodes unlike its message",
            self.name()
        );
    }

    fn kind_i32(&self) -> i32 {
        self.kind().unwrap_or(0)
    }
}

fn str_len(tag: u32, b: &[u8]) -> usize {
    key_len(tag) + encoded_len_varint(b.len() as u64) + b.len()
}

fn put(buf: &mut Vec<u8>, tag: u32, b: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(b.len() as u64, buf);
    buf.extend_from_slice(b);
}

/// The compact kinds (see [`compact`]).
enum Kind {
    Int,
    Float,
    String,
    Ints,
    Floats,
}

/// The compact form of a message of this kind ([`compact_kind`]): its name and payload are
/// moved, not copied.
fn compact(p: AttributeProto, kind: Kind) -> Repr {
    let AttributeProto {
        name,
        f,
        i,
        s,
        floats,
        ints,
        ..
    } = p;
    let name = name.unwrap_or_default().into_boxed_str();
    match kind {
        Kind::Int => Repr::Int(name, i.unwrap_or_default()),
        Kind::Float => Repr::Float(name, f.unwrap_or_default()),
        Kind::String => Repr::String(name, s.unwrap_or_default()),
        Kind::Ints => Repr::Ints(name, ints),
        Kind::Floats => Repr::Floats(name, floats),
    }
}

/// Which compact kind `p` is: exactly a name, its type and that type's one payload (so that
/// the compact form gives back an equal message), else `None`.
fn compact_kind(p: &AttributeProto) -> Option<Kind> {
    let AttributeProto {
        name,
        f,
        i,
        s,
        t,
        g,
        floats,
        ints,
        strings,
        tensors,
        graphs,
        doc_string,
        tp,
        type_protos,
        r#type,
        ref_attr_name,
        sparse_tensor,
        sparse_tensors,
    } = p;
    let bare = name.is_some()
        && t.is_none()
        && g.is_none()
        && strings.is_empty()
        && tensors.is_empty()
        && graphs.is_empty()
        && doc_string.is_none()
        && tp.is_none()
        && type_protos.is_empty()
        && ref_attr_name.is_none()
        && sparse_tensor.is_none()
        && sparse_tensors.is_empty();
    if !bare {
        return None;
    }
    // How many of the payload fields are set.
    let set = usize::from(f.is_some())
        + usize::from(i.is_some())
        + usize::from(s.is_some())
        + usize::from(!floats.is_empty())
        + usize::from(!ints.is_empty());
    match AttributeType::try_from((*r#type)?).ok()? {
        AttributeType::Int if set == 1 && i.is_some() => Some(Kind::Int),
        AttributeType::Float if set == 1 && f.is_some() => Some(Kind::Float),
        AttributeType::String if set == 1 && s.is_some() => Some(Kind::String),
        // An empty list is the list's payload: nothing else may be set.
        AttributeType::Ints if set == usize::from(!ints.is_empty()) => Some(Kind::Ints),
        AttributeType::Floats if set == usize::from(!floats.is_empty()) => Some(Kind::Floats),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut AttributeProto)) -> AttributeProto {
        let mut p = AttributeProto {
            name: Some("a".into()),
            ..Default::default()
        };
        f(&mut p);
        p
    }

    /// Every message, compact or not, gives itself back and encodes as prost encodes it; the
    /// bare kinds are compact, anything more is not.
    #[test]
    fn compact_attributes_are_their_messages() {
        use AttributeType as T;
        let cases: Vec<(AttributeProto, bool)> = vec![
            (
                with(|p| (p.r#type, p.i) = (Some(T::Int as i32), Some(-3))),
                true,
            ),
            (
                with(|p| (p.r#type, p.f) = (Some(T::Float as i32), Some(0.5))),
                true,
            ),
            (
                with(|p| (p.r#type, p.s) = (Some(T::String as i32), Some("x".into()))),
                true,
            ),
            (
                with(|p| (p.r#type, p.ints) = (Some(T::Ints as i32), vec![1, -2, 1 << 40])),
                true,
            ),
            (with(|p| p.r#type = Some(T::Ints as i32)), true),
            (
                with(|p| (p.r#type, p.floats) = (Some(T::Floats as i32), vec![1.5, -0.0])),
                true,
            ),
            (with(|p| p.r#type = Some(T::Floats as i32)), true),
            // No type, a mismatched or second payload, anything else set: kept whole.
            (with(|p| p.i = Some(1)), false),
            (
                with(|p| (p.r#type, p.f) = (Some(T::Int as i32), Some(1.0))),
                false,
            ),
            (
                with(|p| (p.r#type, p.i, p.f) = (Some(T::Int as i32), Some(1), Some(1.0))),
                false,
            ),
            (
                with(|p| (p.r#type, p.ints, p.f) = (Some(T::Ints as i32), vec![], Some(1.0))),
                false,
            ),
            (
                with(|p| {
                    (p.r#type, p.i, p.doc_string) = (Some(T::Int as i32), Some(1), Some("d".into()))
                }),
                false,
            ),
            (
                with(|p| (p.r#type, p.ref_attr_name) = (Some(T::Int as i32), Some("r".into()))),
                false,
            ),
            (with(|p| (p.r#type, p.i) = (Some(99), Some(1))), false),
            (
                AttributeProto {
                    r#type: Some(T::Int as i32),
                    i: Some(1),
                    ..Default::default()
                },
                false,
            ),
        ];
        for (p, is_compact) in cases {
            let a = Attribute::new(p.clone());
            assert_eq!(a.full().is_none(), is_compact, "{p:?}");
            assert_eq!(a.to_proto(), p);
            assert_eq!(a.name(), p.name.as_deref().unwrap_or(""));
            assert_eq!(a.kind(), p.r#type);
            assert_eq!((a.i(), a.f(), a.s()), (p.i, p.f, p.s.as_ref()));
            assert_eq!((a.ints(), a.floats()), (&p.ints[..], &p.floats[..]));
            let mut buf = Vec::new();
            a.encode(&mut buf);
            assert_eq!(buf, p.encode_to_vec());
            assert_eq!(a.encoded_len(), buf.len());
        }
    }
}
