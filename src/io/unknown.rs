//! Fields the schema does not define ("unknown fields"): found by a wire-level scan of the input,
//! carried through a compile, and written back.
//!
//! prost drops every field that `proto/onnx.proto` does not define (a newer ONNX's data, a
//! vendor's extension). [`scan`] walks the protobuf wire format of the input with the field
//! numbers and message types of the schema and keeps, for every message that holds such fields
//! (at any depth, subgraphs and functions included), their raw bytes and where they lie.
//!
//! When the model is written, [`Plan::new`] matches each output message to the input message it
//! came from (nodes by domain, op type, name and outputs; attributes by name; initializers,
//! value infos and sparse initializers by name; metadata entries by key; opset imports by
//! domain; functions by domain, name and overload; everything else by position) and appends the
//! carried fields at the end of the matching message, as protobuf runtimes do. A field whose
//! message is gone from the output (a node a rewrite removed or replaced) cannot be carried: the
//! plan fails with an error that names every such field, before anything is written.

use std::collections::HashMap;
use std::fmt::Write as _;

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};

/// Messages nested deeper than this are refused (prost's own decoding limit is 100).
pub const MAX_DEPTH: usize = 100;

/// The message types of the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Msg {
    Model,
    Graph,
    Node,
    Attribute,
    ValueInfo,
    Tensor,
    Segment,
    SparseTensor,
    Shape,
    Dim,
    Type,
    TypeTensor,
    TypeSequence,
    TypeMap,
    TypeOptional,
    TypeSparseTensor,
    TypeOpaque,
    Entry,
    OpsetId,
    Function,
    TrainingInfo,
    TensorAnnotation,
    DeviceConfiguration,
    NodeDeviceConfiguration,
    ShardingSpec,
    IntIntListEntry,
    ShardedDim,
    SimpleShardedDim,
}

/// What the schema says a field number holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// varint (int32/int64/uint64/enum), repeated ones also packed.
    Varint,
    /// fixed32 (float), repeated ones also packed.
    Fixed32,
    /// fixed64 (double), repeated ones also packed.
    Fixed64,
    /// string or bytes.
    Bytes,
    /// A message of this type.
    Message(Msg),
}

/// The field `n` of message `m`, or `None` when the schema does not define it (reserved numbers
/// included: prost drops them too).
fn field(m: Msg, n: u32) -> Option<Kind> {
    use Kind::*;
    use Msg as M;
    let k = match (m, n) {
        (M::Model, 1 | 5) => Varint,
        (M::Model, 2..=4 | 6) => Bytes,
        (M::Model, 7) => Message(M::Graph),
        (M::Model, 8) => Message(M::OpsetId),
        (M::Model, 14) => Message(M::Entry),
        (M::Model, 20) => Message(M::TrainingInfo),
        (M::Model, 25) => Message(M::Function),
        (M::Model, 26) => Message(M::DeviceConfiguration),

        (M::Graph, 1) => Message(M::Node),
        (M::Graph, 2 | 10) => Bytes,
        (M::Graph, 5) => Message(M::Tensor),
        (M::Graph, 11..=13) => Message(M::ValueInfo),
        (M::Graph, 14) => Message(M::TensorAnnotation),
        (M::Graph, 15) => Message(M::SparseTensor),
        (M::Graph, 16) => Message(M::Entry),

        (M::Node, 1..=4 | 6..=8) => Bytes,
        (M::Node, 5) => Message(M::Attribute),
        (M::Node, 9) => Message(M::Entry),
        (M::Node, 10) => Message(M::NodeDeviceConfiguration),

        (M::Attribute, 1 | 4 | 9 | 13 | 21) => Bytes,
        (M::Attribute, 2 | 7) => Fixed32,
        (M::Attribute, 3 | 8 | 20) => Varint,
        (M::Attribute, 5 | 10) => Message(M::Tensor),
        (M::Attribute, 6 | 11) => Message(M::Graph),
        (M::Attribute, 14 | 15) => Message(M::Type),
        (M::Attribute, 22 | 23) => Message(M::SparseTensor),

        (M::ValueInfo, 1 | 3) => Bytes,
        (M::ValueInfo, 2) => Message(M::Type),
        (M::ValueInfo, 4) => Message(M::Entry),

        (M::Tensor, 1 | 2 | 5 | 7 | 11 | 14) => Varint,
        (M::Tensor, 3) => Message(M::Segment),
        (M::Tensor, 4) => Fixed32,
        (M::Tensor, 6 | 8 | 9 | 12) => Bytes,
        (M::Tensor, 10) => Fixed64,
        (M::Tensor, 13 | 16) => Message(M::Entry),
        (M::Segment, 1 | 2) => Varint,

        (M::SparseTensor, 1 | 2) => Message(M::Tensor),
        (M::SparseTensor, 3) => Varint,

        (M::Shape, 1) => Message(M::Dim),
        (M::Dim, 1) => Varint,
        (M::Dim, 2 | 3) => Bytes,

        (M::Type, 1) => Message(M::TypeTensor),
        (M::Type, 4) => Message(M::TypeSequence),
        (M::Type, 5) => Message(M::TypeMap),
        (M::Type, 6) => Bytes,
        (M::Type, 7) => Message(M::TypeOpaque),
        (M::Type, 8) => Message(M::TypeSparseTensor),
        (M::Type, 9) => Message(M::TypeOptional),
        (M::TypeTensor | M::TypeSparseTensor, 1) => Varint,
        (M::TypeTensor | M::TypeSparseTensor, 2) => Message(M::Shape),
        (M::TypeSequence | M::TypeOptional, 1) => Message(M::Type),
        (M::TypeMap, 1) => Varint,
        (M::TypeMap, 2) => Message(M::Type),
        (M::TypeOpaque, 1 | 2) => Bytes,

        (M::Entry, 1 | 2) => Bytes,
        (M::OpsetId, 1) => Bytes,
        (M::OpsetId, 2) => Varint,

        (M::Function, 1 | 4..=6 | 8 | 10 | 13) => Bytes,
        (M::Function, 7) => Message(M::Node),
        (M::Function, 9) => Message(M::OpsetId),
        (M::Function, 11) => Message(M::Attribute),
        (M::Function, 12) => Message(M::ValueInfo),
        (M::Function, 14) => Message(M::Entry),

        (M::TrainingInfo, 1 | 2) => Message(M::Graph),
        (M::TrainingInfo, 3 | 4) => Message(M::Entry),

        (M::TensorAnnotation, 1) => Bytes,
        (M::TensorAnnotation, 2) => Message(M::Entry),

        (M::DeviceConfiguration, 1 | 3) => Bytes,
        (M::DeviceConfiguration, 2) => Varint,

        (M::NodeDeviceConfiguration, 1) => Bytes,
        (M::NodeDeviceConfiguration, 2) => Message(M::ShardingSpec),
        (M::NodeDeviceConfiguration, 3) => Varint,
        (M::ShardingSpec, 1) => Bytes,
        (M::ShardingSpec, 2) => Varint,
        (M::ShardingSpec, 3) => Message(M::IntIntListEntry),
        (M::ShardingSpec, 4) => Message(M::ShardedDim),
        (M::IntIntListEntry, 1 | 2) => Varint,
        (M::ShardedDim, 1) => Varint,
        (M::ShardedDim, 2) => Message(M::SimpleShardedDim),
        (M::SimpleShardedDim, 1 | 3) => Varint,
        (M::SimpleShardedDim, 2) => Bytes,
        _ => return None,
    };
    Some(k)
}

/// The protobuf wire types.
const VARINT: u8 = 0;
const I64: u8 = 1;
pub(crate) const LEN: u8 = 2;
const SGROUP: u8 = 3;
const EGROUP: u8 = 4;
const I32: u8 = 5;

/// A wire type's name, for messages.
pub fn wire_name(w: u8) -> &'static str {
    match w {
        VARINT => "varint",
        I64 => "64-bit",
        LEN => "length-delimited",
        SGROUP => "group",
        EGROUP => "end group",
        I32 => "32-bit",
        _ => "invalid",
    }
}

/// One field the schema does not define, as it lies in the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownField {
    pub number: u32,
    pub wire_type: u8,
    /// The whole field: key and value, exactly as read.
    pub bytes: Bytes,
    /// Where the field starts in the input.
    pub offset: usize,
}

/// The unknown fields of one message instance and of the messages inside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Carry {
    /// Where the message lies, for messages (`graph 'g' > node 'n' (Conv)`).
    pub path: String,
    /// The message's own unknown fields, in input order.
    pub own: Vec<UnknownField>,
    /// Child messages that hold unknown fields somewhere, in input order.
    pub children: Vec<Child>,
}

/// A child message of a [`Carry`]: the field it is in, its identity and its carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    pub field: u32,
    /// The identity the output message must have (`None`: matched by position).
    pub key: Option<String>,
    /// Among the messages of this field with this key (or, without key, of this field), the
    /// index of this one, in input order.
    pub occurrence: u32,
    /// Where the child's body starts in the input.
    pub at: usize,
    pub carry: Carry,
}

/// One unknown field and where it lies, as [`Carry::list`] gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub path: String,
    pub number: u32,
    pub wire_type: u8,
    pub offset: usize,
    pub len: usize,
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: field {} ({}, {} bytes at offset {})",
            self.path,
            self.number,
            wire_name(self.wire_type),
            self.len,
            self.offset
        )
    }
}

impl Carry {
    pub fn is_empty(&self) -> bool {
        self.own.is_empty() && self.children.is_empty()
    }
    /// Every unknown field inside, depth first, in input order.
    pub fn list(&self) -> Vec<Found> {
        let mut v = Vec::new();
        self.collect(&mut v);
        v
    }
    fn collect(&self, v: &mut Vec<Found>) {
        for u in &self.own {
            v.push(Found {
                path: self.path.clone(),
                number: u.number,
                wire_type: u.wire_type,
                offset: u.offset,
                len: u.bytes.len(),
            });
        }
        for c in &self.children {
            c.carry.collect(v);
        }
    }
    fn own_len(&self) -> usize {
        self.own.iter().map(|u| u.bytes.len()).sum()
    }
}

/// How many nodes and initializers the model's main graph holds (fields 1 and 5 of every
/// `graph` field, 7), read from the wire without decoding (see [`split_plan`]): the decoder's
/// vectors are then allocated once. `None` when the bytes are malformed (the decoder says how).
pub(crate) fn graph_counts(model: &[u8]) -> Option<(usize, usize)> {
    split_plan(model).map(|p| (p.nodes.len(), p.initializers.len()))
}

/// How to decode a model with its main graph's nodes left encoded (see
/// [`crate::io::load::decode_model_split`]): byte ranges of the file, in file order.
#[derive(Debug, Default)]
pub(crate) struct SplitPlan {
    /// Runs of the model's fields other than `graph` (7).
    pub model: Vec<std::ops::Range<usize>>,
    /// Runs of the `graph` fields' own fields other than `node` (1) and `initializer` (5);
    /// empty with no graph.
    pub graph: Vec<std::ops::Range<usize>>,
    /// Whether the model has a `graph` field at all.
    pub has_graph: bool,
    /// Each node's message, without its key and length.
    pub nodes: Vec<std::ops::Range<usize>>,
    /// Each initializer's message (field 5), without its key and length.
    pub initializers: Vec<std::ops::Range<usize>>,
}

/// The [`SplitPlan`] of a model file, read from the wire without decoding. `None` when the
/// bytes are malformed or a field has an unexpected wire type: the full decoder then says how.
pub(crate) fn split_plan(model: &[u8]) -> Option<SplitPlan> {
    // Adds `r` to `runs`, joined to the last run when they touch.
    fn push(runs: &mut Vec<std::ops::Range<usize>>, r: std::ops::Range<usize>) {
        match runs.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => runs.push(r),
        }
    }
    let mut plan = SplitPlan::default();
    let mut r = Reader::new(model);
    while !r.done() {
        let start = r.pos;
        let (number, wire) = r.key().ok()?;
        if number != 7 {
            r.skip(number, wire, 0).ok()?;
            push(&mut plan.model, start..r.pos);
            continue;
        }
        if wire != LEN {
            return None;
        }
        plan.has_graph = true;
        let n = usize::try_from(r.varint().ok()?).ok()?;
        let base = r.pos;
        let mut g = Reader::new(r.take(n).ok()?);
        while !g.done() {
            let start = g.pos;
            let (number, wire) = g.key().ok()?;
            if number == 1 || number == 5 {
                if wire != LEN {
                    return None;
                }
                let len = usize::try_from(g.varint().ok()?).ok()?;
                let at = g.pos;
                g.take(len).ok()?;
                let list = if number == 1 {
                    &mut plan.nodes
                } else {
                    &mut plan.initializers
                };
                list.push(base + at..base + at + len);
                continue;
            }
            g.skip(number, wire, 0).ok()?;
            push(&mut plan.graph, base + start..base + g.pos);
        }
    }
    Some(plan)
}

/// A cursor over protobuf wire data. Every read is bounds-checked.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn malformed(at: usize, what: &str) -> Error {
    Error::new(
        ErrorKind::Decode,
        format!("not a valid ONNX model (malformed protobuf at byte {at}: {what})"),
    )
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    pub(crate) fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }
    pub(crate) fn varint(&mut self) -> Result<u64> {
        if let Some(&b) = self.buf.get(self.pos) {
            if b < 0x80 {
                self.pos += 1;
                return Ok(u64::from(b));
            }
        }
        let start = self.pos;
        let mut v: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(malformed(start, "truncated varint"));
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(malformed(start, "varint longer than 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(malformed(start, "varint longer than 10 bytes"))
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let start = self.pos;
        match start.checked_add(n) {
            Some(end) if end <= self.buf.len() => {
                self.pos = end;
                Ok(&self.buf[start..end])
            }
            _ => Err(malformed(start, "field runs past the end of its message")),
        }
    }
    /// A field key: (number, wire type).
    pub(crate) fn key(&mut self) -> Result<(u32, u8)> {
        let at = self.pos;
        let k = self.varint()?;
        let wire = (k & 7) as u8;
        let number = k >> 3;
        if number == 0 || number > (1 << 29) - 1 {
            return Err(malformed(at, "field number 0 or out of range"));
        }
        if wire > 5 {
            return Err(malformed(at, "invalid wire type"));
        }
        Ok((number as u32, wire))
    }
    /// Skip a value of this wire type (the key was read). Groups are skipped up to their end,
    /// at most `depth` levels deep.
    pub(crate) fn skip(&mut self, number: u32, wire: u8, depth: usize) -> Result<()> {
        match wire {
            VARINT => self.varint().map(|_| ()),
            I64 => self.take(8).map(|_| ()),
            I32 => self.take(4).map(|_| ()),
            LEN => {
                let at = self.pos;
                let n = self.varint()?;
                let n = usize::try_from(n).map_err(|_| malformed(at, "length too large"))?;
                self.take(n).map(|_| ())
            }
            SGROUP => {
                if depth >= MAX_DEPTH {
                    return Err(malformed(
                        self.pos,
                        &format!("groups nested more than {MAX_DEPTH} levels deep"),
                    ));
                }
                loop {
                    if self.done() {
                        return Err(malformed(self.pos, "group without its end"));
                    }
                    let at = self.pos;
                    let (n, w) = self.key()?;
                    if w == EGROUP {
                        if n != number {
                            return Err(malformed(at, "group ends with another field's number"));
                        }
                        return Ok(());
                    }
                    self.skip(n, w, depth + 1)?;
                }
            }
            _ => Err(malformed(self.pos, "unexpected end of group")),
        }
    }
}

/// Scan a whole model file for fields the schema does not define. Malformed input gives a
/// `Decode` error, never a panic; nesting is bounded by [`MAX_DEPTH`].
pub fn scan(model: &Bytes) -> Result<Carry> {
    let mut c = scan_message(model, 0, model.len(), Msg::Model, 0)?.unwrap_or_default();
    c.path = "model".into();
    for ch in &mut c.children {
        prefix_paths(&mut ch.carry, "");
    }
    Ok(c)
}

/// Turn each child's own label into its whole path below the model.
fn prefix_paths(c: &mut Carry, parent: &str) {
    if !parent.is_empty() {
        c.path = format!("{parent} > {}", c.path);
    }
    let here = c.path.clone();
    for ch in &mut c.children {
        prefix_paths(&mut ch.carry, &here);
    }
}

/// Scan the message in `buf[start..end]`. `None` when it holds no unknown field at any depth.
fn scan_message(
    buf: &Bytes,
    start: usize,
    end: usize,
    ty: Msg,
    depth: usize,
) -> Result<Option<Carry>> {
    if depth > MAX_DEPTH {
        return Err(malformed(
            start,
            &format!("messages nested more than {MAX_DEPTH} levels deep"),
        ));
    }
    let mut r = Reader::new(&buf[..end]);
    r.pos = start;
    let mut carry: Option<Carry> = None;
    while !r.done() {
        let at = r.pos;
        let (number, wire) = r.key()?;
        match field(ty, number) {
            Some(Kind::Message(child)) if wire == LEN => {
                let lat = r.pos;
                let n = r.varint()?;
                let n = usize::try_from(n).map_err(|_| malformed(lat, "length too large"))?;
                let body = r.pos;
                r.take(n)?;
                if let Some(c) = scan_message(buf, body, body + n, child, depth + 1)? {
                    carry
                        .get_or_insert_with(Carry::default)
                        .children
                        .push(Child {
                            field: number,
                            key: key_of(child, ty, number, &buf[body..body + n]),
                            occurrence: 0,
                            at: body,
                            carry: c,
                        });
                }
            }
            Some(k) if known_wire(k, wire) => r.skip(number, wire, depth)?,
            Some(_) => {
                return Err(malformed(
                    at,
                    &format!(
                        "field {number} of {ty:?} has wire type {} ({})",
                        wire,
                        wire_name(wire)
                    ),
                ))
            }
            None => {
                if wire == EGROUP {
                    return Err(malformed(at, "end of a group that was not started"));
                }
                r.skip(number, wire, depth)?;
                carry
                    .get_or_insert_with(Carry::default)
                    .own
                    .push(UnknownField {
                        number,
                        wire_type: wire,
                        bytes: buf.slice(at..r.pos),
                        offset: at,
                    });
            }
        }
    }
    if let Some(c) = carry.as_mut() {
        place_children(&buf[..end], start, ty, &mut c.children);
    }
    Ok(carry)
}

fn known_wire(k: Kind, wire: u8) -> bool {
    match k {
        Kind::Varint => wire == VARINT || wire == LEN,
        Kind::Fixed32 => wire == I32 || wire == LEN,
        Kind::Fixed64 => wire == I64 || wire == LEN,
        Kind::Bytes | Kind::Message(_) => wire == LEN,
    }
}

/// Give each carried child of the message `buf[start..]` (of type `ty`) its occurrence (among
/// all the message's fields of its number with its key, carried or not: the output is matched
/// the same way) and its label (with its index among the fields of its number). One pass over
/// the message, computing keys only for the numbers that have carried children. A singular
/// message field seen twice (decoders merge the two) gets occurrence 1 the second time, which
/// no output message matches: a rewrite refuses rather than guess.
fn place_children(buf: &[u8], start: usize, ty: Msg, children: &mut [Child]) {
    let mut counts: HashMap<(u32, Option<String>), u32> = HashMap::new();
    let mut index: HashMap<u32, u32> = HashMap::new();
    let mut r = Reader::new(buf);
    r.pos = start;
    let mut next = 0;
    while !r.done() && next < children.len() {
        let Ok((number, wire)) = r.key() else { break };
        if wire != LEN {
            if r.skip(number, wire, 0).is_err() {
                break;
            }
            continue;
        }
        let Ok(len) = r.varint() else { break };
        let body = r.pos;
        let Ok(bytes) = r.take(len as usize) else {
            break;
        };
        if !children.iter().any(|c| c.field == number) {
            continue;
        }
        let Some(Kind::Message(child_ty)) = field(ty, number) else {
            continue;
        };
        let i = index.entry(number).or_insert(0);
        let key = key_of(child_ty, ty, number, bytes);
        let n = counts.entry((number, key)).or_insert(0);
        if let Some(c) = children[next..].iter_mut().find(|c| c.at == body) {
            c.occurrence = *n;
            c.carry.path = label(ty, number, child_ty, bytes, *i);
            next += 1;
        }
        *n += 1;
        *i += 1;
    }
}

/// The length-delimited fields `numbers` of a message, raw.
fn raw_fields<'a>(bytes: &'a [u8], numbers: &[u32]) -> Vec<Vec<&'a [u8]>> {
    let mut out = vec![Vec::new(); numbers.len()];
    let mut r = Reader::new(bytes);
    while !r.done() {
        let Ok((n, w)) = r.key() else { break };
        if w == LEN {
            let Ok(len) = r.varint() else { break };
            let Ok(len) = usize::try_from(len) else { break };
            let Ok(v) = r.take(len) else { break };
            if let Some(i) = numbers.iter().position(|&x| x == n) {
                out[i].push(v);
            }
        } else if r.skip(n, w, 0).is_err() {
            break;
        }
    }
    out
}

/// The string fields `numbers` of a message (lossily decoded).
fn strings(bytes: &[u8], numbers: &[u32]) -> Vec<Vec<String>> {
    raw_fields(bytes, numbers)
        .into_iter()
        .map(|v| {
            v.into_iter()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .collect()
        })
        .collect()
}

fn varint_field(bytes: &[u8], number: u32) -> Option<u64> {
    let mut r = Reader::new(bytes);
    let mut found = None;
    while !r.done() {
        let (n, w) = r.key().ok()?;
        if w == VARINT && n == number {
            found = Some(r.varint().ok()?);
        } else {
            r.skip(n, w, 0).ok()?;
        }
    }
    found
}

fn last(v: &[String]) -> &str {
    v.last().map(String::as_str).unwrap_or("")
}

/// The identity a child message is matched by in the output (see the module's notes).
fn key_of(ty: Msg, parent: Msg, field: u32, bytes: &[u8]) -> Option<String> {
    let s = |ns: &[u32]| strings(bytes, ns);
    match ty {
        Msg::Node => {
            // input 1, output 2, name 3, op_type 4, domain 7
            let v = s(&[2, 3, 4, 7]);
            let domain = match last(&v[3]) {
                "ai.onnx" => "",
                d => d,
            };
            Some(format!(
                "{domain}\u{0}{}\u{0}{}\u{0}{}",
                last(&v[2]),
                last(&v[1]),
                v[0].join("\u{1}")
            ))
        }
        Msg::Attribute => {
            let v = s(&[1]);
            let t = varint_field(bytes, 20).unwrap_or(0);
            Some(format!("{}\u{0}{t}", last(&v[0])))
        }
        // Initializers and tensor-valued things by name; an attribute's tensors by position.
        Msg::Tensor if parent == Msg::Graph => Some(last(&s(&[8])[0]).to_string()),
        Msg::ValueInfo => Some(last(&s(&[1])[0]).to_string()),
        Msg::SparseTensor if parent == Msg::Graph => {
            let values = raw_fields(bytes, &[1]);
            let name = values[0]
                .last()
                .map(|v| last(&strings(v, &[8])[0]).to_string());
            Some(name.unwrap_or_default())
        }
        Msg::Entry => Some(last(&s(&[1])[0]).to_string()),
        Msg::OpsetId => Some(last(&s(&[1])[0]).to_string()),
        Msg::TensorAnnotation => Some(last(&s(&[1])[0]).to_string()),
        Msg::DeviceConfiguration => Some(last(&s(&[1])[0]).to_string()),
        Msg::Function => {
            let v = s(&[1, 10, 13]);
            Some(format!(
                "{}\u{0}{}\u{0}{}",
                last(&v[1]),
                last(&v[0]),
                last(&v[2])
            ))
        }
        _ => {
            let _ = field;
            None
        }
    }
}

/// How a child message is named in paths.
fn label(parent: Msg, field: u32, ty: Msg, bytes: &[u8], index: u32) -> String {
    let named = |what: &str, n: u32| {
        let v = strings(bytes, &[n]);
        match v[0].last() {
            Some(name) if !name.is_empty() => format!("{what} '{name}'"),
            _ => format!("{what} #{index}"),
        }
    };
    match (parent, field, ty) {
        (_, _, Msg::Node) => {
            let v = strings(bytes, &[3, 4]);
            let op = last(&v[1]);
            match v[0].last() {
                Some(n) if !n.is_empty() => format!("node '{n}' ({op})"),
                _ => format!("node #{index} ({op})"),
            }
        }
        (Msg::Model, 7, _) => named("graph", 2),
        (Msg::Attribute, 6, _) => named("attribute graph", 2),
        (Msg::Attribute, 11, _) => format!("attribute graphs[{index}]"),
        (Msg::TrainingInfo, 1, _) => "initialization graph".into(),
        (Msg::TrainingInfo, 2, _) => "algorithm graph".into(),
        (_, _, Msg::Attribute) => named("attribute", 1),
        (Msg::Graph, 5, _) => named("initializer", 8),
        (Msg::Graph, 11, _) => named("input", 1),
        (Msg::Graph, 12, _) => named("output", 1),
        (Msg::Graph, 13, _) => named("value_info", 1),
        (Msg::Graph, 15, _) => format!("sparse_initializer #{index}"),
        (Msg::Graph, 14, _) => named("quantization_annotation", 1),
        (_, 8, Msg::OpsetId) | (_, 9, Msg::OpsetId) => named("opset_import", 1),
        (_, _, Msg::Entry) => named("entry", 1),
        (Msg::Model, 20, _) => format!("training_info #{index}"),
        (Msg::Model, 25, _) => named("function", 1),
        (Msg::Model, 26, _) => named("configuration", 1),
        (Msg::Function, 12, _) => named("value_info", 1),
        _ => format!("{ty:?} (field {field} #{index})"),
    }
}

// ---------------------------------------------------------------------------------------------
// Writing: which output message gets which carried fields.

/// Matches the children of one input [`Carry`] to output messages and records which were used.
struct Matcher<'c> {
    carry: &'c Carry,
    /// Output messages seen so far per (field, key).
    seen: HashMap<(u32, Option<String>), u32>,
    used: Vec<bool>,
}

impl<'c> Matcher<'c> {
    fn new(carry: &'c Carry) -> Self {
        Matcher {
            carry,
            seen: HashMap::new(),
            used: vec![false; carry.children.len()],
        }
    }
    /// The next output child message in field `field` of message type `parent`: its input
    /// counterpart's carry, if that holds unknown fields.
    fn next(&mut self, parent: Msg, field_no: u32, bytes: &[u8]) -> Option<&'c Carry> {
        if !self.carry.children.iter().any(|c| c.field == field_no) {
            return None;
        }
        let Some(Kind::Message(ty)) = field(parent, field_no) else {
            return None;
        };
        let key = key_of(ty, parent, field_no, bytes);
        let n = self.seen.entry((field_no, key.clone())).or_insert(0);
        let occurrence = *n;
        *n += 1;
        let i = self
            .carry
            .children
            .iter()
            .position(|c| c.field == field_no && c.key == key && c.occurrence == occurrence)?;
        self.used[i] = true;
        Some(&self.carry.children[i].carry)
    }
    /// The input children that no output message matched.
    fn dropped(&self, out: &mut Vec<Found>) {
        for (c, used) in self.carry.children.iter().zip(&self.used) {
            if !used {
                c.carry.collect(out);
            }
        }
    }
}

/// Re-encode the message `bytes` (of type `ty`, as prost wrote it) with the carried fields of
/// `carry` and of its children appended at the end of their messages. Children of `carry` that
/// no output message matches are added to `dropped`.
fn rebuild(
    ty: Msg,
    bytes: &[u8],
    carry: &Carry,
    depth: usize,
    out: &mut Vec<u8>,
    dropped: &mut Vec<Found>,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(malformed(0, "messages nested too deep"));
    }
    let mut m = Matcher::new(carry);
    let mut r = Reader::new(bytes);
    while !r.done() {
        let at = r.pos;
        let (number, wire) = r.key()?;
        let is_msg = matches!(field(ty, number), Some(Kind::Message(_)));
        if wire == LEN && is_msg {
            let n = r.varint()? as usize;
            let body = r.take(n)?;
            if let Some(Kind::Message(child)) = field(ty, number) {
                if let Some(c) = m.next(ty, number, body) {
                    let mut inner = Vec::with_capacity(body.len() + c.own_len() + 16);
                    rebuild(child, body, c, depth + 1, &mut inner, dropped)?;
                    put_key(out, number, LEN);
                    put_varint(out, inner.len() as u64);
                    out.extend_from_slice(&inner);
                    continue;
                }
            }
            out.extend_from_slice(&bytes[at..r.pos]);
        } else {
            r.skip(number, wire, depth)?;
            out.extend_from_slice(&bytes[at..r.pos]);
        }
    }
    m.dropped(dropped);
    for u in &carry.own {
        out.extend_from_slice(&u.bytes);
    }
    Ok(())
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(out: &mut Vec<u8>, number: u32, wire: u8) {
    put_varint(out, (u64::from(number) << 3) | u64::from(wire));
}

/// The length of a varint.
pub fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// How the carried fields go into one written message part: `rebuild` of the part's bytes,
/// with the matches shared by all parts of the message (so that occurrences count across
/// parts).
pub struct Part<'c> {
    matcher: Matcher<'c>,
    ty: Msg,
}

impl<'c> Part<'c> {
    pub fn new(ty: Msg, carry: &'c Carry) -> Self {
        Part {
            matcher: Matcher::new(carry),
            ty,
        }
    }
    /// Re-encode a run of whole fields of this message (as prost wrote them) with their child
    /// messages' carried fields. Own fields are not added here (see [`Part::finish`]).
    pub fn fields(
        &mut self,
        bytes: &[u8],
        out: &mut Vec<u8>,
        dropped: &mut Vec<Found>,
    ) -> Result<()> {
        let ty = self.ty;
        let mut r = Reader::new(bytes);
        while !r.done() {
            let at = r.pos;
            let (number, wire) = r.key()?;
            match field(ty, number) {
                Some(Kind::Message(child)) if wire == LEN => {
                    let n = r.varint()? as usize;
                    let body = r.take(n)?;
                    if let Some(c) = self.matcher.next(ty, number, body) {
                        let mut inner = Vec::with_capacity(body.len() + c.own_len() + 16);
                        rebuild(child, body, c, 1, &mut inner, dropped)?;
                        put_key(out, number, LEN);
                        put_varint(out, inner.len() as u64);
                        out.extend_from_slice(&inner);
                    } else {
                        out.extend_from_slice(&bytes[at..r.pos]);
                    }
                }
                _ => {
                    r.skip(number, wire, 0)?;
                    out.extend_from_slice(&bytes[at..r.pos]);
                }
            }
        }
        Ok(())
    }
    /// The next child message in `field` whose bytes the caller writes itself (a streamed
    /// initializer): its carry, if any.
    pub fn child(&mut self, field_no: u32, bytes: &[u8]) -> Option<&'c Carry> {
        self.matcher.next(self.ty, field_no, bytes)
    }
    /// The message's own carried fields (to append at its end), and the children that no output
    /// message matched added to `dropped`.
    pub fn finish(self, dropped: &mut Vec<Found>) -> Vec<u8> {
        self.matcher.dropped(dropped);
        let mut v = Vec::with_capacity(self.matcher.carry.own_len());
        for u in &self.matcher.carry.own {
            v.extend_from_slice(&u.bytes);
        }
        v
    }
}

/// Re-encode a whole message of type `ty` with `carry` (for callers outside the streaming
/// writer).
pub fn rebuild_message(
    ty: Msg,
    bytes: &[u8],
    carry: &Carry,
    dropped: &mut Vec<Found>,
) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(bytes.len() + carry.own_len() + 16);
    rebuild(ty, bytes, carry, 0, &mut out, dropped)?;
    Ok(out)
}

/// The error for carried fields that the output has no place for.
/// `why` says why they have no place.
pub fn dropped_error(dropped: &[Found], why: &str) -> Error {
    let mut msg = format!(
        "{} field(s) that this tool's ONNX schema does not define would be dropped ({why}); \
         nothing was written: ",
        dropped.len()
    );
    for (i, f) in dropped.iter().enumerate() {
        if i > 0 {
            msg.push_str("; ");
        }
        if i == 8 {
            let _ = write!(msg, "and {} more", dropped.len() - 8);
            break;
        }
        let _ = write!(
            msg,
            "{} field {} ({})",
            f.path,
            f.number,
            wire_name(f.wire_type)
        );
    }
    Error::new(ErrorKind::Usage, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_field(n: u32, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        put_key(&mut v, n, LEN);
        put_varint(&mut v, body.len() as u64);
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn graph_counts_reads_every_graph_field() {
        use crate::proto::{GraphProto, ModelProto, NodeProto, TensorProto};
        use prost::Message;
        let g = |nodes: usize, inits: usize| GraphProto {
            node: vec![NodeProto::default(); nodes],
            initializer: vec![TensorProto::default(); inits],
            name: Some("g".into()),
            ..Default::default()
        };
        let m = ModelProto {
            ir_version: Some(8),
            graph: Some(g(3, 2)),
            ..Default::default()
        };
        let bytes = m.encode_to_vec();
        assert_eq!(graph_counts(&bytes), Some((3, 2)));
        // A second `graph` field merges into the first: its entries count too.
        let mut twice = bytes.clone();
        twice.extend(len_field(7, &g(1, 4).encode_to_vec()));
        assert_eq!(graph_counts(&twice), Some((4, 6)));
        let decoded = ModelProto::decode(twice.as_slice()).unwrap();
        let graph = decoded.graph.unwrap();
        assert_eq!((graph.node.len(), graph.initializer.len()), (4, 6));
        // Truncated: no count (the decoder reports the error).
        assert_eq!(graph_counts(&bytes[..bytes.len() - 1]), None);
        assert_eq!(graph_counts(&[]), Some((0, 0)));
    }

    #[test]
    fn finds_unknown_fields_at_depth_with_paths() {
        // node: name 'n1', op_type 'Relu', unknown varint field 99 = 7
        let mut node = len_field(3, b"n1");
        node.extend(len_field(4, b"Relu"));
        let unknown_at = node.len();
        put_key(&mut node, 99, VARINT);
        put_varint(&mut node, 7);
        let mut graph = len_field(2, b"g");
        graph.extend(len_field(1, &node));
        let mut model = Vec::new();
        put_key(&mut model, 1, VARINT);
        put_varint(&mut model, 8);
        model.extend(len_field(7, &graph));
        put_key(&mut model, 5000, I32);
        model.extend_from_slice(&[1, 2, 3, 4]);
        let bytes = Bytes::from(model);
        let c = scan(&bytes).unwrap();
        let found = c.list();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].path, "model");
        assert_eq!((found[0].number, found[0].wire_type), (5000, I32));
        assert_eq!(found[1].path, "graph 'g' > node 'n1' (Relu)");
        assert_eq!((found[1].number, found[1].wire_type), (99, VARINT));
        // model head (2) + graph key/len (2) + graph name (3) + node key/len (2)
        assert_eq!(found[1].offset, 2 + 2 + 3 + 2 + unknown_at);
        assert_eq!(
            &bytes[found[1].offset..found[1].offset + 3],
            &[0x98, 0x06, 7]
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for bad in [
            &[0x3a, 0x05, 0x0a][..], // graph longer than the file
            &[0x08][..],             // truncated varint
            &[0x00][..],             // field number 0
            &[0x0f][..],             // wire type 7
            &[0xa3, 0x06, 0x08][..], // group without its end
            &[
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ][..],
        ] {
            assert!(scan(&Bytes::copy_from_slice(bad)).is_err(), "{bad:?}");
        }
        // Deeply nested types: Type > Sequence > Type > ... beyond the limit.
        let mut t = Vec::new();
        for _ in 0..200 {
            t = len_field(4, &len_field(1, &t));
        }
        let vi = len_field(2, &t);
        let g = len_field(11, &vi);
        let m = len_field(7, &g);
        let e = scan(&Bytes::from(m)).unwrap_err();
        assert!(e.message.contains("nested"), "{e}");
    }

    #[test]
    fn varint_lengths() {
        for v in [0u64, 1, 127, 128, 16383, 16384, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(varint_len(v), b.len(), "{v}");
        }
    }
}
