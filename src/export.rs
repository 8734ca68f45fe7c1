//! IR -> protobuf. Deterministic: the same IR always gives the same message, and a graph that
//! was not changed gives back exactly the message it was imported from. Value names are labels
//! written where the value is used; payloads are shared (`Bytes`), never copied.

use crate::ir::{Attribute, Graph, MetaEntry, Model, ValueId};
use crate::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto,
};

/// Build the protobuf message of a model.
pub fn export_model(m: &Model) -> ModelProto {
    ModelProto {
        graph: Some(export_graph(&m.graph)),
        ..export_model_without_graph(m)
    }
}

fn export_model_without_graph(m: &Model) -> ModelProto {
    ModelProto {
        ir_version: m.ir_version,
        producer_name: m.producer_name.clone(),
        producer_version: m.producer_version.clone(),
        domain: m.domain.clone(),
        model_version: m.model_version,
        doc_string: m.doc_string.clone(),
        graph: None,
        opset_import: m.opset_import.clone(),
        metadata_props: m.metadata_props.clone(),
        training_info: m.training_info.clone(),
        functions: m.functions.clone(),
        configuration: m.configuration.clone(),
    }
}

fn names(g: &Graph, vs: &[Option<ValueId>]) -> Vec<String> {
    vs.iter()
        .map(|v| match v {
            Some(v) => g.value_name(*v).to_string(),
            None => String::new(),
        })
        .collect()
}

fn value_info(g: &Graph, v: ValueId, proto: &ValueInfoProto) -> ValueInfoProto {
    let mut p = proto.clone();
    p.name = Some(g.value_name(v).to_string());
    p
}

fn export_attribute(a: &Attribute) -> AttributeProto {
    let mut p = a.to_proto();
    if let Some(g) = a.g() {
        p.g = Some(Box::new(export_subgraph(g)));
    }
    if !a.graphs().is_empty() {
        p.graphs = a.graphs().iter().map(export_subgraph).collect();
    }
    p
}

/// A subgraph's message: encoded whole, with any computed payload
/// ([`crate::io::computed`]) in it.
fn export_subgraph(g: &Graph) -> GraphProto {
    let mut p = export_graph(g);
    for t in &mut p.initializer {
        crate::io::computed::materialize(t);
    }
    p
}

/// The protobuf message of one node.
pub fn export_node(g: &Graph, id: crate::ir::NodeId) -> NodeProto {
    let n = &g.nodes[id];
    NodeProto {
        input: names(g, &n.inputs),
        output: names(g, &n.outputs),
        name: n.name.clone(),
        op_type: Some(n.op_type.clone()),
        attribute: n.attributes.iter().map(export_attribute).collect(),
        doc_string: n.doc_string().map(str::to_string),
        domain: n.domain.clone(),
        overload: n.overload().map(str::to_string),
        metadata_props: n.metadata_props.iter().map(MetaEntry::to_proto).collect(),
        device_configurations: n.device_configurations().to_vec(),
    }
}

/// Append node `id` to `buf` as its graph's field 1: the bytes prost writes for
/// [`export_node`]'s message, without building it (each of its names would be a copy). A node
/// with a subgraph goes through the message.
pub fn encode_node_field(g: &Graph, id: crate::ir::NodeId, buf: &mut Vec<u8>) {
    node_field(g, id, Some(buf), None);
}

/// The length of node `id`'s message (what [`encode_node_field`] appends after the field's
/// key and length).
pub fn node_message_len(g: &Graph, id: crate::ir::NodeId) -> usize {
    node_field(g, id, None, None)
}

/// The length of node `id`'s message; with `buf`, the node is appended to it as its graph's
/// field 1 too. `known`: the message's length, when the caller has it already
/// ([`node_message_len`]).
fn node_field(
    g: &Graph,
    id: crate::ir::NodeId,
    buf: Option<&mut Vec<u8>>,
    known: Option<usize>,
) -> usize {
    use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
    use prost::Message as _;
    let n = &g.nodes[id];
    if n.attributes.iter().any(Attribute::has_graph) {
        let m = export_node(g, id);
        if let Some(buf) = buf {
            prost::encoding::message::encode(1, &m, buf);
        }
        return m.encoded_len();
    }
    let name_of = |v: &Option<ValueId>| v.map_or("", |v| g.value_name(v));
    // The fields in tag order, as prost writes them: (tag, text) for strings, then messages.
    let strings = |f: &mut dyn FnMut(u32, &str)| {
        for v in &n.inputs {
            f(1, name_of(v));
        }
        for v in &n.outputs {
            f(2, name_of(v));
        }
        if let Some(s) = &n.name {
            f(3, s);
        }
        f(4, &n.op_type);
    };
    let tail_strings = |f: &mut dyn FnMut(u32, &str)| {
        for (tag, s) in [
            (6, n.doc_string()),
            (7, n.domain.as_deref()),
            (8, n.overload()),
        ] {
            if let Some(s) = s {
                f(tag, s);
            }
        }
    };
    let str_len = |tag: u32, s: &str| key_len(tag) + encoded_len_varint(s.len() as u64) + s.len();
    let msg_len = |tag: u32, l: usize| key_len(tag) + encoded_len_varint(l as u64) + l;
    let len = known.unwrap_or_else(|| {
        let mut len = 0usize;
        strings(&mut |t, s| len += str_len(t, s));
        len += n
            .attributes
            .iter()
            .map(|a| msg_len(5, a.encoded_len()))
            .sum::<usize>();
        tail_strings(&mut |t, s| len += str_len(t, s));
        len += n
            .metadata_props
            .iter()
            .map(|m| msg_len(9, m.encoded_len()))
            .sum::<usize>();
        len += n
            .device_configurations()
            .iter()
            .map(|d| msg_len(10, d.encoded_len()))
            .sum::<usize>();
        len
    });
    let Some(buf) = buf else {
        return len;
    };

    fn put(buf: &mut Vec<u8>, tag: u32, s: &str) {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(s.len() as u64, buf);
        buf.extend_from_slice(s.as_bytes());
    }
    encode_key(1, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
    let start = buf.len();
    buf.reserve(len);
    strings(&mut |t, s| put(buf, t, s));
    for a in &n.attributes {
        encode_key(5, WireType::LengthDelimited, buf);
        encode_varint(a.encoded_len() as u64, buf);
        a.encode(buf);
    }
    tail_strings(&mut |t, s| put(buf, t, s));
    for m in &n.metadata_props {
        m.encode(9, buf);
    }
    for d in n.device_configurations() {
        prost::encoding::message::encode(10, d, buf);
    }
    debug_assert_eq!(buf.len() - start, len);
    debug_assert_eq!(
        buf[start..],
        export_node(g, id).encode_to_vec()[..],
        "node {id:?} encodes unlike its message"
    );
    len
}

/// Build the protobuf message of one graph (recursively for subgraphs).
pub fn export_graph(g: &Graph) -> GraphProto {
    GraphProto {
        node: g.order.iter().map(|&id| export_node(g, id)).collect(),
        initializer: g
            .initializers
            .iter()
            .map(|i| export_initializer(g, i))
            .collect(),
        ..graph_shell(g)
    }
}

fn export_initializer(g: &Graph, i: &crate::ir::Initializer) -> TensorProto {
    i.tensor.to_proto(g.value_name(i.value))
}

/// A model's message whose main graph's nodes and initializers are exported one at a time,
/// as the writer asks for them ([`crate::io::save::save_streamed`]): the whole message is
/// never held beside the IR.
pub struct Streamed<'a> {
    model: &'a Model,
    shell: ModelProto,
    /// The main graph's nodes' message lengths, in write order (measured once: the graph's
    /// length needs them before the nodes are written, and each node's encoding again).
    lens: std::sync::OnceLock<Vec<usize>>,
}

impl<'a> Streamed<'a> {
    pub fn new(model: &'a Model) -> Self {
        let shell = ModelProto {
            graph: Some(graph_shell(&model.graph)),
            ..export_model_without_graph(model)
        };
        Streamed {
            model,
            shell,
            lens: std::sync::OnceLock::new(),
        }
    }

    fn lens(&self) -> &[usize] {
        self.lens.get_or_init(|| {
            let g = &self.model.graph;
            g.order.iter().map(|&id| node_message_len(g, id)).collect()
        })
    }
}

impl crate::io::save::GraphSource for Streamed<'_> {
    fn shell(&self) -> &ModelProto {
        &self.shell
    }
    fn nodes_len(&self) -> usize {
        use prost::encoding::{encoded_len_varint, key_len};
        let field = |&len: &usize| key_len(1) + encoded_len_varint(len as u64) + len;
        self.lens().iter().map(field).sum()
    }
    fn write_nodes(
        &self,
        put: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let g = &self.model.graph;
        let lens = self.lens();
        if g.order.len() < PARALLEL_ENCODE_MIN {
            return encode_nodes(g, &g.order, lens, put);
        }
        // Many nodes: the second half is encoded on a second thread, at most `PARTS_AHEAD`
        // parts ahead of the writes (the encoded nodes are never all held: the deep 1.3 GB
        // model of the bench has 17 MB of them). Its parts come back to it once written, so
        // that the thread that made a buffer frees it.
        let half = g.order.len() / 2;
        let (first, second) = g.order.split_at(half);
        let (first_lens, second_lens) = lens.split_at(half);
        std::thread::scope(|s| {
            let (parts, written) = std::sync::mpsc::sync_channel::<Vec<u8>>(PARTS_AHEAD);
            let (give_back, returned) = std::sync::mpsc::channel::<Vec<u8>>();
            let encoder = s.spawn(move || {
                let mut buf = part_buffer(second_lens);
                for (&id, &len) in second.iter().zip(second_lens) {
                    if part_is_full(&buf) {
                        let next = returned
                            .try_recv()
                            .unwrap_or_else(|_| part_buffer(second_lens));
                        if parts.send(std::mem::replace(&mut buf, next)).is_err() {
                            return;
                        }
                    }
                    node_field(g, id, Some(&mut buf), Some(len));
                }
                let _ = parts.send(buf);
                // The last parts written come back after the sending ends.
                drop(parts);
                while returned.recv().is_ok() {}
            });
            let result = encode_nodes(g, first, first_lens, put).and_then(|()| {
                for mut part in written.iter() {
                    put(&part)?;
                    part.clear();
                    let _ = give_back.send(part);
                }
                Ok(())
            });
            // On an error the encoder stops at its next part.
            drop(written);
            drop(give_back);
            if let Err(panic) = encoder.join() {
                std::panic::resume_unwind(panic)
            }
            result
        })
    }
    fn initializers(&self, each: &mut dyn FnMut(crate::ir::TensorView<'_>, &str)) {
        let g = &self.model.graph;
        for i in &g.initializers {
            each(i.tensor.view(), g.value_name(i.value));
        }
    }
}

/// The size of the parts [`Streamed`] encodes nodes into.
const NODES_PART: usize = 256 << 10;

/// Parts of nodes a second encoding thread may have ready before they are written.
const PARTS_AHEAD: usize = 4;

/// An empty buffer for a part of the nodes whose message lengths are `lens`, with room for the
/// whole part (grown from nothing a doubling at a time, each buffer's copies touched twice its
/// size in new memory).
fn part_buffer(lens: &[usize]) -> Vec<u8> {
    // Each node's field: its key (1 byte) and length (at most 10) before the message.
    let all = lens.iter().fold(0usize, |n, l| n.saturating_add(l + 11));
    Vec::with_capacity(all.min(NODES_PART))
}

/// Whether the next node goes into a new part (a node rarely takes more than the room left
/// then; if it does, the part grows).
fn part_is_full(buf: &[u8]) -> bool {
    buf.len() + NODES_PART / 16 > NODES_PART
}

/// Encode nodes `ids` of `g` (their messages' lengths `lens`) as their graph's field 1 each,
/// given to `put` a part at a time (one buffer, reused).
fn encode_nodes(
    g: &Graph,
    ids: &[crate::ir::NodeId],
    lens: &[usize],
    put: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut buf = part_buffer(lens);
    for (&id, &len) in ids.iter().zip(lens) {
        if part_is_full(&buf) {
            put(&buf)?;
            buf.clear();
        }
        node_field(g, id, Some(&mut buf), Some(len));
    }
    if buf.is_empty() {
        return Ok(());
    }
    put(&buf)
}

/// From this many nodes on, [`Streamed`] encodes the main graph's nodes on two threads.
const PARALLEL_ENCODE_MIN: usize = 8192;

/// A graph's message without its nodes and initializers.
fn graph_shell(g: &Graph) -> GraphProto {
    let sparse_initializer = g
        .sparse_initializers
        .iter()
        .map(|s| {
            let mut t = s.tensor.clone();
            if let Some(v) = t.values.as_mut() {
                v.name = Some(g.value_name(s.value).to_string());
            }
            t
        })
        .collect();
    GraphProto {
        node: Vec::new(),
        initializer: Vec::new(),
        name: g.name.clone(),
        doc_string: g.doc_string.clone(),
        input: g
            .inputs
            .iter()
            .map(|i| value_info(g, i.value, &i.proto))
            .collect(),
        output: g
            .outputs
            .iter()
            .map(|i| value_info(g, i.value, &i.proto))
            .collect(),
        value_info: g
            .value_info
            .iter()
            .map(|i| value_info(g, i.value, &i.proto))
            .collect(),
        quantization_annotation: g.quantization_annotation.clone(),
        sparse_initializer,
        metadata_props: g.metadata_props.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::save::GraphSource;

    /// Nodes are encoded in parts of at most `NODES_PART` bytes (many nodes on two
    /// threads): together the bytes the message's nodes encode to, in order, of the size
    /// `nodes_len` gives.
    #[test]
    fn nodes_encoded_in_parts_are_the_messages() {
        for n in [10, PARALLEL_ENCODE_MIN + 5, 4 * PARALLEL_ENCODE_MIN] {
            let (proto, nodes) = crate::import::read_ahead_tests::chain(n, |_, _| {});
            let nodes = crate::import::read_ahead_tests::encoded(nodes);
            let model = crate::import::import_model_split(proto, &nodes, None).unwrap();
            let src = Streamed::new(&model);
            let mut parts: Vec<Vec<u8>> = Vec::new();
            src.write_nodes(&mut |p| {
                parts.push(p.to_vec());
                Ok(())
            })
            .unwrap();
            let mut want = Vec::new();
            for nd in &export_model(&model).graph.unwrap().node {
                prost::encoding::message::encode(1, nd, &mut want);
            }
            assert!(parts.concat() == want, "{n} nodes");
            assert_eq!(src.nodes_len(), want.len(), "{n} nodes");
            assert!(parts.iter().all(|p| p.len() <= NODES_PART), "{n} nodes");
            if n >= 4 * PARALLEL_ENCODE_MIN {
                // More than one part a thread: never one buffer of them all.
                assert!(parts.len() > 2, "{} parts", parts.len());
            }
        }
    }

    /// A write that fails stops the encoding, on both threads, with its error.
    #[test]
    fn a_failed_write_stops_the_encoding() {
        let (proto, nodes) =
            crate::import::read_ahead_tests::chain(4 * PARALLEL_ENCODE_MIN, |_, _| {});
        let nodes = crate::import::read_ahead_tests::encoded(nodes);
        let model = crate::import::import_model_split(proto, &nodes, None).unwrap();
        for fail_at in [0, 1, 3] {
            let mut calls = 0;
            let err = Streamed::new(&model)
                .write_nodes(&mut |_| {
                    calls += 1;
                    if calls > fail_at {
                        return Err(std::io::Error::other("disk full"));
                    }
                    Ok(())
                })
                .unwrap_err();
            assert_eq!(err.to_string(), "disk full");
            assert_eq!(calls, fail_at + 1);
        }
    }
}
