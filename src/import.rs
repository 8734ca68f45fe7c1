//! Protobuf -> IR. Names are resolved to value ids once, here; the model is validated with
//! precise errors (undefined inputs, two producers of one name, cycles, tensors whose shape
//! disagrees with their data, attributes whose type disagrees with their payload, nesting).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use prost::Message as _;

use crate::error::{Error, Result};
use crate::io::external::{external_ref, is_external, ExternalData};
use crate::io::load::{decode_error, Encoded};
use crate::ir::hash::PreHashedBuild;
use crate::ir::{
    name_hash, Attribute, Attrs, Edge, Graph, Initializer, MetaEntry, Model, Node, NodeId, Origin,
    SparseInitializer, Value, ValueId, ValueInfo, IMPLICIT_SLOT,
};
use crate::proto::{AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto};
use crate::tensor::{check_tensor, raw_size};

/// Subgraphs nested deeper than this are refused (protobuf decoding already stops far
/// earlier for absurd files; this bounds the importer's own recursion).
pub const MAX_GRAPH_DEPTH: usize = 32;

/// Import a decoded model. `external` resolves external data (checked, not read).
pub fn import_model(proto: ModelProto, external: Option<&ExternalData>) -> Result<Model> {
    import_model_split(proto, &Encoded::default(), external)
}

/// [`import_model`] for a model decoded by [`crate::io::load::decode_model_split`]: the main
/// graph's nodes and initializers are those of `proto` followed by those `encoded`, each
/// decoded when the importer reaches it. A model that the full decoder refuses is refused here
/// the same way: when the import fails, a message that does not decode is the error reported.
pub fn import_model_split(
    proto: ModelProto,
    encoded: &Encoded,
    external: Option<&ExternalData>,
) -> Result<Model> {
    let ModelProto {
        ir_version,
        producer_name,
        producer_version,
        domain,
        model_version,
        doc_string,
        graph,
        opset_import,
        metadata_props,
        training_info,
        functions,
        configuration,
    } = proto;
    let graph = graph.ok_or_else(|| Error::invalid("the model has no graph"))?;
    let ctx = Ctx { external };
    let (graph, outer) = ctx.import_graph(graph, encoded, &[], 0, "").map_err(|e| {
        (encoded.initializers.iter())
            .find_map(|b| TensorProto::decode(b.clone()).err())
            .or_else(|| (encoded.nodes.iter()).find_map(|b| NodeProto::decode(b.clone()).err()))
            .map_or(e, decode_error)
    })?;
    if let Some(name) = outer.first() {
        return Err(Error::invalid(format!(
            "main graph: input '{name}' is not defined"
        )));
    }
    Ok(Model {
        ir_version,
        opset_import,
        producer_name,
        producer_version,
        domain,
        model_version,
        doc_string,
        graph,
        metadata_props,
        training_info,
        functions,
        configuration,
        computed: Default::default(),
    })
}

/// Import a subgraph that reads values of an enclosing graph by name (`outer`: the names
/// visible there). Returns the graph and the outer names it reads, in first-use order.
pub fn import_subgraph(
    gp: GraphProto,
    outer: &HashMap<String, ValueId>,
    path: &str,
) -> Result<(Graph, Vec<String>)> {
    let ctx = Ctx { external: None };
    ctx.import_graph(gp, &Encoded::default(), &[Scope::Map(outer)], 1, path)
}

struct Ctx<'a> {
    external: Option<&'a ExternalData>,
}

/// Names visible from enclosing graphs, innermost last.
type Scopes<'s> = [Scope<'s>];

/// The names of an enclosing graph: a map given by the caller, or those of a graph being
/// imported.
#[derive(Clone, Copy)]
enum Scope<'s> {
    Map(&'s HashMap<String, ValueId>),
    Graph(&'s Names, &'s [Value]),
}

impl Scope<'_> {
    fn contains(&self, name: &str) -> bool {
        match self {
            Scope::Map(m) => m.contains_key(name),
            Scope::Graph(names, values) => names.get(name, values).is_some(),
        }
    }
}

/// The values of a graph being imported, by name: a table of value ids, looked up by the
/// hash [`Graph::taken_names`] records and checked against the value's own name, so no name is
/// copied. Each slot is 8 bytes (a tag and a value id, one cache line holds 8), where a map of
/// hash to id took 16 and a control byte: on a graph of 50,000 nodes, finding names was a
/// cache miss or two each, most of the import's time after its allocations.
///
/// The name's hash is mixed with keys drawn per table ([`PreHashedBuild`]; a file that does
/// not know them cannot steer names into one run of slots), and 31 bits of the result's high
/// half are the tag, which also says where the search starts. The table holds one name per
/// tag; a name whose tag is another's (a chance of one in 2^31 a pair, or names whose hashes
/// the file made equal) is kept apart, by name, in a map hashed with the standard library's
/// SipHash.
struct Names {
    /// `(tag << 32) | value index`; 0 is an empty slot (a tag's top bit is always set).
    /// Linear probing from `tag & mask`; at most three quarters full.
    slots: Vec<u64>,
    len: usize,
    keys: PreHashedBuild,
    clashes: HashMap<String, ValueId>,
}

impl Default for Names {
    fn default() -> Self {
        Names::with_capacity(0)
    }
}

/// Where in `slots` the search for a name's tag ends: the tag's slot, or the empty slot
/// after its run.
enum Probe {
    Tag(usize),
    Empty(usize),
}

impl Names {
    fn with_capacity(n: usize) -> Self {
        Names {
            slots: vec![0; Self::room_for(n)],
            len: 0,
            keys: PreHashedBuild::default(),
            clashes: HashMap::new(),
        }
    }
    /// Slots for `n` names: a power of two, at most three quarters full.
    fn room_for(n: usize) -> usize {
        n.saturating_add(n / 3).max(8).next_power_of_two()
    }
    fn tag(&self, hash: u64) -> u32 {
        use std::hash::BuildHasher;
        (self.keys.hash_one(hash) >> 32) as u32 | 1 << 31
    }
    fn probe(&self, tag: u32) -> Probe {
        let mask = self.slots.len() - 1;
        let mut i = tag as usize & mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return Probe::Empty(i);
            }
            if (s >> 32) as u32 == tag {
                return Probe::Tag(i);
            }
            i = (i + 1) & mask;
        }
    }
    fn id(slot: u64) -> ValueId {
        ValueId(slot as u32)
    }
    fn get(&self, name: &str, values: &[Value]) -> Option<ValueId> {
        self.get_hashed(name, name_hash(name), values)
    }
    fn get_hashed(&self, name: &str, hash: u64, values: &[Value]) -> Option<ValueId> {
        match self.probe(self.tag(hash)) {
            Probe::Empty(_) => None,
            Probe::Tag(i) => {
                let v = Self::id(self.slots[i]);
                if *values[v.index()].name == *name {
                    Some(v)
                } else {
                    // A name in `clashes` has its tag in the table too.
                    self.clashes.get(name).copied()
                }
            }
        }
    }
    /// Record `v`, whose name hashes to `hash`, as the value of that name.
    fn insert(&mut self, hash: u64, v: ValueId, values: &[Value]) {
        let name = &values[v.index()].name;
        let tag = self.tag(hash);
        let slot = (u64::from(tag) << 32) | u64::from(v.0);
        match self.probe(tag) {
            Probe::Tag(i) if values[Self::id(self.slots[i]).index()].name == *name => {
                self.slots[i] = slot;
            }
            Probe::Tag(_) => {
                self.clashes.insert(name.to_string(), v);
            }
            Probe::Empty(i) => {
                self.slots[i] = slot;
                self.len += 1;
                if Self::room_for(self.len) > self.slots.len() {
                    self.grow();
                }
            }
        }
    }
    /// Twice the slots, every entry placed again (its tag says where).
    fn grow(&mut self) {
        let old = std::mem::replace(&mut self.slots, vec![0; Self::room_for(self.len) * 2]);
        let mask = self.slots.len() - 1;
        for s in old.into_iter().filter(|&s| s != 0) {
            let mut i = (s >> 32) as usize & mask;
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }
    /// A new value of this name in `g`, recorded here.
    fn add(&mut self, g: &mut Graph, name: String, origin: Origin) -> ValueId {
        let h = name_hash(&name);
        let v = g.add_value_hashed(name, h, origin);
        self.insert(h, v, &g.values);
        v
    }
}

fn graph_label(g: &GraphProto, path: &str) -> String {
    let name = g.name.as_deref().unwrap_or("");
    if path.is_empty() {
        format!("graph '{name}'")
    } else {
        format!("{path} > graph '{name}'")
    }
}

/// How messages name a node: by its name, else by its position in the file (`index`).
fn node_label(name: Option<&str>, op: &str, index: usize) -> String {
    match name {
        Some(name) if !name.is_empty() => format!("node '{name}' ({op})"),
        _ => format!("node #{index} ({op})"),
    }
}

/// Nodes as the importer takes them, a run at a time: each node's own fields, and the input
/// and output names of the whole run in two lists, a node's own being the next `n_inputs` and
/// `n_outputs` of them. A run read from the file borrows its names from the file's bytes
/// ([`read_run`]); three lists a run, where two per node (a graph of 50,000 nodes) were made
/// by the reading thread and freed by the importing one.
struct NodeRun<'a> {
    nodes: Vec<Result<NodeHead<'a>>>,
    inputs: Vec<Cow<'a, str>>,
    outputs: Vec<Cow<'a, str>>,
}

/// A node's input as pass 1 of the import leaves it for pass 2.
enum Input<'a> {
    /// An optional input left out (an empty name).
    Empty,
    /// Resolved: its value was defined before the node.
    Value(ValueId),
    /// Not defined yet: a later node's output, or a value of an enclosing graph.
    Name(Cow<'a, str>),
}

/// A node's fields other than its input and output names (see [`NodeRun`]).
struct NodeHead<'a> {
    n_inputs: u32,
    n_outputs: u32,
    /// Borrowed from the encoding when read there: the strings the graph keeps are made by
    /// the importing thread, not by a reading thread ([`read_nodes`]).
    name: Option<Cow<'a, str>>,
    op_type: Option<Cow<'a, str>>,
    domain: Option<Cow<'a, str>>,
    attribute: Vec<AttributeProto>,
    metadata_props: Vec<crate::proto::StringStringEntryProto>,
    rare: Option<Box<crate::ir::NodeRare>>,
}

impl<'a> NodeRun<'a> {
    fn with_capacity(nodes: usize) -> Self {
        NodeRun {
            nodes: Vec::with_capacity(nodes),
            inputs: Vec::with_capacity(2 * nodes),
            outputs: Vec::with_capacity(nodes),
        }
    }

    /// A run of decoded nodes (their names moved, not copied).
    fn decoded(nodes: Vec<NodeProto>) -> Self {
        let mut run = NodeRun::with_capacity(0);
        run.nodes.reserve_exact(nodes.len());
        for n in nodes {
            run.push_decoded(n);
        }
        run
    }

    fn push_decoded(&mut self, n: NodeProto) {
        let head = NodeHead {
            n_inputs: count(n.input.len()),
            n_outputs: count(n.output.len()),
            name: n.name.map(Cow::Owned),
            op_type: n.op_type.map(Cow::Owned),
            domain: n.domain.map(Cow::Owned),
            attribute: n.attribute,
            metadata_props: n.metadata_props,
            rare: crate::ir::NodeRare::boxed(n.doc_string, n.overload, n.device_configurations),
        };
        self.inputs.extend(n.input.into_iter().map(Cow::Owned));
        self.outputs.extend(n.output.into_iter().map(Cow::Owned));
        self.nodes.push(Ok(head));
    }
}

/// A count of names as a run keeps it. A node's names are fields of a message of at most
/// 2 GiB, two bytes each at the least: the count fits.
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Read the node encoded in `b` into `run` without copying its input and output names (a
/// graph of 50,000 nodes reads 150,000 of them). The fields are read as the protobuf decoder
/// reads them (a repeated field's occurrences in order, a later singular one replacing an
/// earlier one, unknown fields skipped) and messages (attributes, metadata) are decoded by it.
/// `false`, and `run` as it was, for anything else (a known field of another wire type, a name
/// that is not UTF-8, malformed bytes): the caller then leaves the node to the decoder, which
/// says what is wrong.
fn read_node<'a>(b: &'a Bytes, run: &mut NodeRun<'a>) -> bool {
    let (inputs, outputs) = (run.inputs.len(), run.outputs.len());
    match read_node_fields(b, run) {
        Some(head) => {
            run.nodes.push(Ok(head));
            true
        }
        None => {
            run.inputs.truncate(inputs);
            run.outputs.truncate(outputs);
            false
        }
    }
}

/// [`read_node`]'s reading: the node's names are pushed onto `run`'s lists.
fn read_node_fields<'a>(b: &'a Bytes, run: &mut NodeRun<'a>) -> Option<NodeHead<'a>> {
    use crate::io::unknown::{Reader, LEN};
    let mut h = NodeHead {
        n_inputs: 0,
        n_outputs: 0,
        name: None,
        op_type: None,
        domain: None,
        attribute: Vec::new(),
        metadata_props: Vec::new(),
        rare: None,
    };
    let mut doc_string = None;
    let mut overload = None;
    let mut device_configurations = Vec::new();
    let mut r = Reader::new(b);
    while !r.done() {
        let (number, wire) = r.key().ok()?;
        if !(1..=10).contains(&number) {
            r.skip(number, wire, 0).ok()?;
            continue;
        }
        if wire != LEN {
            return None;
        }
        let n = usize::try_from(r.varint().ok()?).ok()?;
        let field = r.take(n).ok()?;
        let text = || std::str::from_utf8(field).ok();
        match number {
            1 => {
                run.inputs.push(Cow::Borrowed(text()?));
                h.n_inputs += 1;
            }
            2 => {
                run.outputs.push(Cow::Borrowed(text()?));
                h.n_outputs += 1;
            }
            3 => h.name = Some(Cow::Borrowed(text()?)),
            4 => h.op_type = Some(Cow::Borrowed(text()?)),
            6 => doc_string = Some(text()?.to_string()),
            7 => h.domain = Some(Cow::Borrowed(text()?)),
            8 => overload = Some(text()?.to_string()),
            5 => h
                .attribute
                .push(AttributeProto::decode(b.slice_ref(field)).ok()?),
            9 => h
                .metadata_props
                .push(prost::Message::decode(b.slice_ref(field)).ok()?),
            _ => device_configurations.push(prost::Message::decode(b.slice_ref(field)).ok()?),
        }
    }
    h.rare = crate::ir::NodeRare::boxed(doc_string, overload, device_configurations);
    Some(h)
}

/// The nodes encoded in `nodes`, read into one run: [`read_node`], or the decoder for what
/// that leaves to it.
fn read_run(nodes: &[Bytes]) -> NodeRun<'_> {
    let mut run = NodeRun::with_capacity(nodes.len());
    for b in nodes {
        if !read_node(b, &mut run) {
            match NodeProto::decode(b.clone()) {
                Ok(n) => run.push_decoded(n),
                Err(e) => run.nodes.push(Err(decode_error(e))),
            }
        }
    }
    run
}

/// From this many encoded nodes on, [`read_nodes`] reads them on a second thread.
const READ_AHEAD_MIN: usize = 4096;
/// Nodes per run the reading thread hands over (at most 4 runs wait).
const READ_AHEAD_CHUNK: usize = 512;

/// The encoded nodes, read in order, a run at a time ([`read_run`]). Many are read on a thread
/// of `s` ahead of the caller; when the caller stops early (an error), the thread stops at its
/// next run.
fn read_nodes<'s, 'b: 's>(
    s: &'s std::thread::Scope<'s, '_>,
    nodes: &'b [Bytes],
) -> Box<dyn Iterator<Item = NodeRun<'b>> + 's> {
    if nodes.len() < READ_AHEAD_MIN {
        return Box::new(nodes.chunks(READ_AHEAD_CHUNK).map(read_run));
    }
    let (tx, rx) = std::sync::mpsc::sync_channel::<NodeRun<'b>>(4);
    s.spawn(move || {
        for chunk in nodes.chunks(READ_AHEAD_CHUNK) {
            if tx.send(read_run(chunk)).is_err() {
                return;
            }
        }
    });
    Box::new(rx.into_iter())
}

/// [`node_label`] of a node already imported.
fn ir_node_label(n: &Node, index: usize) -> String {
    node_label(n.name.as_deref(), &n.op_type, index)
}

impl Ctx<'_> {
    /// Import one graph, whose nodes and initializers are those of `gp` followed by those of
    /// `more` (still encoded). Returns the graph and the names it reads from enclosing scopes.
    fn import_graph(
        &self,
        gp: GraphProto,
        more: &Encoded,
        scopes: &Scopes<'_>,
        depth: usize,
        path: &str,
    ) -> Result<(Graph, Vec<String>)> {
        let here = graph_label(&gp, path);
        if depth > MAX_GRAPH_DEPTH {
            return Err(Error::invalid(format!(
                "{here}: subgraphs are nested more than {MAX_GRAPH_DEPTH} levels deep"
            )));
        }
        let err = |msg: String| Error::invalid(format!("{here}: {msg}"));
        let GraphProto {
            node: node_protos,
            name,
            initializer,
            doc_string,
            input,
            output,
            value_info,
            quantization_annotation,
            sparse_initializer,
            metadata_props,
        } = gp;
        // Sizes known up front: the tables are allocated once instead of growing by doubling
        // (which copies them and touches twice the memory on a graph of 50,000 nodes).
        // (Nodes still encoded are counted as two inputs and one output each.)
        let (more_nodes, more_inits) = (&more.nodes[..], &more.initializers[..]);
        let n_nodes = node_protos.len() + more_nodes.len();
        let n_edges: usize =
            node_protos.iter().map(|n| n.input.len()).sum::<usize>() + 2 * more_nodes.len();
        let n_values = input.len()
            + initializer.len()
            + more_inits.len()
            + sparse_initializer.len()
            + node_protos.iter().map(|n| n.output.len()).sum::<usize>()
            + more_nodes.len();
        let mut g = Graph {
            name,
            doc_string,
            quantization_annotation,
            metadata_props,
            order: Vec::with_capacity(n_nodes),
            values: Vec::with_capacity(n_values),
            ..Graph::default()
        };
        g.initializers
            .reserve_exact(initializer.len() + more_inits.len());
        let mut defined = Names::with_capacity(n_values);

        // Graph inputs.
        for (i, vi) in input.into_iter().enumerate() {
            let name = vi.name.clone().unwrap_or_default();
            if name.is_empty() {
                return Err(err(format!("graph input #{i} has no name")));
            }
            if defined.get(&name, &g.values).is_some() {
                return Err(err(format!("graph input '{name}' is declared twice")));
            }
            let v = defined.add(&mut g, name, Origin::Input);
            g.inputs.push(ValueInfo {
                value: v,
                proto: vi,
            });
        }

        // Dense initializers (an initializer may share its name with a graph input).
        // Which values have an initializer already (by value index).
        let mut has_init: Vec<bool> = Vec::new();
        let mut init_value = |g: &mut Graph, defined: &mut Names, name: String| {
            let v = match defined.get(&name, &g.values) {
                Some(v) => v,
                None => defined.add(g, name, Origin::Initializer),
            };
            if has_init.len() <= v.index() {
                has_init.resize(v.index() + 1, false);
            }
            // `Err`: a second initializer of this name.
            let seen = std::mem::replace(&mut has_init[v.index()], true);
            if seen {
                Err(v)
            } else {
                Ok(v)
            }
        };
        let twice = |g: &Graph, v: ValueId| {
            err(format!(
                "two initializers are named '{}'",
                g.values[v.index()].name
            ))
        };
        // (Those still encoded are decoded one at a time.)
        let encoded = more_inits.iter().map(|b| TensorProto::decode(b.clone()));
        let tensors = initializer.into_iter().map(Ok).chain(encoded);
        for (i, t) in tensors.enumerate() {
            let mut t = t.map_err(decode_error)?;
            // The value takes the tensor's name over (the tensor is stored unnamed).
            let name = t.name.take().unwrap_or_default();
            if name.is_empty() {
                return Err(err(format!("initializer #{i} has no name")));
            }
            let v = init_value(&mut g, &mut defined, name).map_err(|v| twice(&g, v))?;
            self.check_tensor(&t)
                .map_err(|m| err(format!("initializer '{}' {m}", g.values[v.index()].name)))?;
            g.initializers.push(Initializer {
                value: v,
                tensor: crate::ir::Tensor::from_proto(t),
            });
        }
        for (i, st) in sparse_initializer.into_iter().enumerate() {
            let name = st
                .values
                .as_ref()
                .and_then(|t| t.name.clone())
                .unwrap_or_default();
            if name.is_empty() {
                return Err(err(format!("sparse initializer #{i} has no name")));
            }
            let v = init_value(&mut g, &mut defined, name.clone()).map_err(|v| twice(&g, v))?;
            for (what, t) in [("values", &st.values), ("indices", &st.indices)] {
                if let Some(t) = t {
                    self.check_tensor(t)
                        .map_err(|m| err(format!("sparse initializer '{name}' {what} {m}")))?;
                }
            }
            crate::tensor::element_count(&st.dims)
                .map_err(|m| err(format!("sparse initializer '{name}' {m}")))?;
            g.sparse_initializers.push(SparseInitializer {
                value: v,
                tensor: st,
            });
        }

        // The node table, allocated only now that the decoded initializers are gone: a graph
        // of 50,000 nodes and 25,000 initializers held 11 MB of one beside 9 MB of the other.
        // (The edge table is sized below, once the reads of node outputs are counted.)
        g.nodes.reserve_exact_nodes(n_nodes);

        // Pass 1: nodes and the values they produce, so later nodes may be read before
        // their producer appears in the file.
        // (A node's label for messages is made only when there is an error to report.)
        // Each node's input names are kept for pass 2 in one list for all nodes (`pending`
        // holds where each node's run ends).
        let mut pending: Vec<(NodeId, usize, Vec<AttributeProto>)> = Vec::with_capacity(n_nodes);
        let mut pending_inputs: Vec<Input> = Vec::with_capacity(n_edges);
        let given = NodeRun::decoded(node_protos);
        // Nodes still encoded are read (fields split, names checked as UTF-8) on a second
        // thread when there are many, a run ahead of this one, which defines their values.
        std::thread::scope(|s| -> Result<()> {
            let mut index = 0;
            for run in std::iter::once(given).chain(read_nodes(s, more_nodes)) {
                let mut names_in = run.inputs.into_iter();
                let mut names_out = run.outputs.into_iter();
                for head in run.nodes {
                    let NodeHead {
                        n_inputs,
                        n_outputs,
                        name,
                        op_type,
                        domain,
                        attribute,
                        metadata_props,
                        rare,
                    } = head?;
                    if op_type.as_deref().is_none_or(str::is_empty) {
                        let op = op_type.as_deref().unwrap_or("?");
                        let label = node_label(name.as_deref(), op, index);
                        return Err(err(format!("{label} has no op_type")));
                    }
                    let (n_inputs, n_outputs) = (n_inputs as usize, n_outputs as usize);
                    let node = Node {
                        name: name.map(Cow::into_owned),
                        op_type: op_type.map(Cow::into_owned).unwrap_or_default(),
                        domain: domain.map(Cow::into_owned),
                        inputs: Vec::with_capacity(n_inputs),
                        // Set below, once the outputs are defined.
                        outputs: Vec::new(),
                        attributes: Attrs::default(),
                        metadata_props: metadata_props.into_iter().map(MetaEntry::from).collect(),
                        rare,
                    };
                    let id = g.nodes.add_node(node);
                    g.order.push(id);
                    let mut outputs = Vec::with_capacity(n_outputs);
                    for (slot, o) in names_out.by_ref().take(n_outputs).enumerate() {
                        if o.is_empty() {
                            outputs.push(None);
                            continue;
                        }
                        let hash = name_hash(&o);
                        if let Some(prev) = defined.get_hashed(&o, hash, &g.values) {
                            let by = match g.values[prev.index()].origin {
                                Origin::Input => "a graph input".to_string(),
                                Origin::Initializer => "an initializer".to_string(),
                                Origin::Node { node, .. } => {
                                    let p = &g.nodes[node];
                                    match p.name.as_deref() {
                                        Some(n) if !n.is_empty() => {
                                            format!("node '{n}' ({})", p.op_type)
                                        }
                                        _ => format!("another {} node", p.op_type),
                                    }
                                }
                                _ => "another definition".to_string(),
                            };
                            return Err(err(format!(
                                "{} produces '{o}', which is already produced by {by}",
                                ir_node_label(&g.nodes[id], index)
                            )));
                        }
                        let v = g.add_value_hashed(
                            o.into_owned(),
                            hash,
                            Origin::Node {
                                node: id,
                                slot: slot as u32,
                            },
                        );
                        defined.insert(hash, v, &g.values);
                        outputs.push(Some(v));
                    }
                    g.nodes[id].outputs = outputs;
                    // An input whose value is defined already is resolved now, while its name
                    // is in the cache (in a file in topological order, most are: the output
                    // of a node just before). Each name is defined once (a second definition
                    // is an error), so pass 2 would find the same value.
                    for name in names_in.by_ref().take(n_inputs) {
                        pending_inputs.push(if name.is_empty() {
                            Input::Empty
                        } else {
                            match defined.get(&name, &g.values) {
                                Some(v) => Input::Value(v),
                                None => Input::Name(name),
                            }
                        });
                    }
                    pending.push((id, pending_inputs.len(), attribute));
                    index += 1;
                }
            }
            Ok(())
        })?;

        // Pass 2: resolve inputs (locally, else in enclosing scopes) and import subgraphs.
        let mut outer_refs: Vec<String> = Vec::new();
        let mut outer_ids: HashMap<String, ValueId> = HashMap::new();
        let resolve_outer = |name: &str,
                             g: &mut Graph,
                             outer_refs: &mut Vec<String>,
                             outer_ids: &mut HashMap<String, ValueId>|
         -> Option<ValueId> {
            if let Some(&v) = outer_ids.get(name) {
                return Some(v);
            }
            if scopes.iter().rev().any(|s| s.contains(name)) {
                let v = g.add_value(name.to_string(), Origin::OuterScope);
                outer_ids.insert(name.to_string(), v);
                outer_refs.push(name.to_string());
                Some(v)
            } else {
                None
            }
        };
        let mut edges: Vec<(ValueId, NodeId, u32)> = Vec::with_capacity(n_edges);
        let mut pending_inputs = pending_inputs.into_iter();
        let mut input_start = 0;
        for (index, (id, input_end, attribute)) in pending.into_iter().enumerate() {
            let label = |g: &Graph| ir_node_label(&g.nodes[id], index);
            let n_inputs = input_end - std::mem::replace(&mut input_start, input_end);
            let mut inputs = Vec::with_capacity(n_inputs);
            for (slot, input) in pending_inputs.by_ref().take(n_inputs).enumerate() {
                let v = match input {
                    Input::Empty => {
                        inputs.push(None);
                        continue;
                    }
                    Input::Value(v) => v,
                    Input::Name(name) => match defined.get(&name, &g.values) {
                        Some(v) => v,
                        None => resolve_outer(&name, &mut g, &mut outer_refs, &mut outer_ids)
                            .ok_or_else(|| {
                                err(format!("{}: input '{name}' is not defined", label(&g)))
                            })?,
                    },
                };
                edges.push((v, id, slot as u32));
                inputs.push(Some(v));
            }
            let mut attributes = Vec::with_capacity(attribute.len());
            let mut implicit: Vec<ValueId> = Vec::new();
            let mut implicit_seen: HashSet<ValueId> = HashSet::new();
            for mut ap in attribute {
                let aname = || ap.name.as_deref().unwrap_or("");
                check_attribute(&ap)
                    .map_err(|m| err(format!("{}: attribute '{}' {m}", label(&g), aname())))?;
                for t in ap.t.as_deref().into_iter().chain(ap.tensors.iter()) {
                    self.check_tensor(t).map_err(|m| {
                        err(format!(
                            "{}: attribute '{}': tensor {m}",
                            label(&g),
                            aname()
                        ))
                    })?;
                }
                if ap.g.is_none() && ap.graphs.is_empty() {
                    attributes.push(Attribute::new(ap));
                    continue;
                }
                let sub_path = format!("{here} > {} > attribute '{}'", label(&g), aname());
                let mut sub_graphs = Vec::new();
                let single = ap.g.take();
                let many = std::mem::take(&mut ap.graphs);
                let mut import_sub = |sg: GraphProto| -> Result<Graph> {
                    let mut inner_scopes: Vec<Scope<'_>> = scopes.to_vec();
                    inner_scopes.push(Scope::Graph(&defined, &g.values));
                    let (sub, refs) = self.import_graph(
                        sg,
                        &Encoded::default(),
                        &inner_scopes,
                        depth + 1,
                        &sub_path,
                    )?;
                    for r in refs {
                        let v = match defined.get(&r, &g.values) {
                            Some(v) => v,
                            None => match outer_ids.get(&r) {
                                Some(&v) => v,
                                None => {
                                    let v = g.add_value(r.clone(), Origin::OuterScope);
                                    outer_ids.insert(r.clone(), v);
                                    outer_refs.push(r);
                                    v
                                }
                            },
                        };
                        if implicit_seen.insert(v) {
                            implicit.push(v);
                        }
                    }
                    Ok(sub)
                };
                let g_single = match single {
                    Some(sg) => Some(Box::new(import_sub(*sg)?)),
                    None => None,
                };
                for sg in many {
                    sub_graphs.push(import_sub(sg)?);
                }
                attributes.push(Attribute::with_graphs(ap, g_single, sub_graphs));
            }
            for &v in &implicit {
                edges.push((v, id, IMPLICIT_SLOT));
            }
            let node = &mut g.nodes[id];
            node.inputs = inputs;
            node.attributes = attributes.into();
            node.set_implicit_inputs(implicit);
        }
        // An edge per read of a node's output (reads of initializers and inputs make none).
        let producer = |v: ValueId| match g.values[v.index()].origin {
            Origin::Node { node, .. } => Some(node),
            _ => None,
        };
        let linked = edges.iter().filter(|e| producer(e.0).is_some()).count();
        g.nodes.reserve_exact_edges(linked);
        for (v, to, slot) in edges {
            if let Some(node) = producer(v) {
                g.nodes.add_edge(node, to, Edge { value: v, slot });
            }
        }

        // Graph outputs must be defined here or (for subgraphs) outside.
        for (i, vi) in output.into_iter().enumerate() {
            let name = vi.name.clone().unwrap_or_default();
            if name.is_empty() {
                return Err(err(format!("graph output #{i} has no name")));
            }
            let v = match defined.get(&name, &g.values) {
                Some(v) => v,
                None => resolve_outer(&name, &mut g, &mut outer_refs, &mut outer_ids)
                    .ok_or_else(|| {
                        err(format!(
                            "graph output '{name}' is not produced by any node, input or initializer"
                        ))
                    })?,
            };
            g.outputs.push(ValueInfo {
                value: v,
                proto: vi,
            });
        }

        // value_info may name values that no longer exist; they are kept as unbound labels.
        for (i, vi) in value_info.into_iter().enumerate() {
            let name = vi.name.clone().unwrap_or_default();
            if name.is_empty() {
                return Err(err(format!("value_info #{i} has no name")));
            }
            let v = match defined
                .get(&name, &g.values)
                .or_else(|| outer_ids.get(&name).copied())
            {
                Some(v) => v,
                None => defined.add(&mut g, name, Origin::Unbound),
            };
            g.value_info.push(ValueInfo {
                value: v,
                proto: vi,
            });
        }

        if let Err(cycle) = g.topo_order() {
            let names: Vec<String> = cycle
                .iter()
                .take(5)
                .map(|&n| {
                    let node = &g.nodes[n];
                    format!("'{}' ({})", node.name(), node.op_type)
                })
                .collect();
            return Err(err(format!(
                "the nodes form a cycle ({} nodes involved, e.g. {})",
                cycle.len(),
                names.join(", ")
            )));
        }
        Ok((g, outer_refs))
    }

    fn check_tensor(&self, t: &TensorProto) -> std::result::Result<(), String> {
        let n = check_tensor(t)?;
        if is_external(t) {
            let r = external_ref(t).map_err(|e| e.message)?;
            let expected = raw_size(t.data_type.unwrap_or(0), n);
            match self.external {
                Some(ext) => ext.check(&r, expected).map_err(|e| e.message)?,
                None => {
                    return Err(format!(
                        "uses external data '{}' but the model was not read from a file",
                        r.location
                    ))
                }
            }
        }
        Ok(())
    }
}

/// An attribute's `type` must agree with the payload it carries.
pub fn check_attribute(a: &AttributeProto) -> std::result::Result<(), String> {
    if a.name.as_deref().unwrap_or("").is_empty() {
        return Err("has no name".to_string());
    }
    let fields = [
        (1, "f", a.f.is_some()),
        (2, "i", a.i.is_some()),
        (3, "s", a.s.is_some()),
        (4, "t", a.t.is_some()),
        (5, "g", a.g.is_some()),
        (6, "floats", !a.floats.is_empty()),
        (7, "ints", !a.ints.is_empty()),
        (8, "strings", !a.strings.is_empty()),
        (9, "tensors", !a.tensors.is_empty()),
        (10, "graphs", !a.graphs.is_empty()),
        (11, "sparse_tensor", a.sparse_tensor.is_some()),
        (12, "sparse_tensors", !a.sparse_tensors.is_empty()),
        (13, "tp", a.tp.is_some()),
        (14, "type_protos", !a.type_protos.is_empty()),
    ];
    // The fields present, as (field number, name); no allocation (this runs per attribute).
    let present = || fields.iter().filter(|p| p.2).map(|p| (p.0, p.1));
    let ty = a.r#type.unwrap_or(0);
    if !(0..=14).contains(&ty) {
        return Err(format!("has unknown type {ty}"));
    }
    let type_name = |t: i32| -> &'static str {
        [
            "UNDEFINED",
            "FLOAT",
            "INT",
            "STRING",
            "TENSOR",
            "GRAPH",
            "FLOATS",
            "INTS",
            "STRINGS",
            "TENSORS",
            "GRAPHS",
            "SPARSE_TENSOR",
            "SPARSE_TENSORS",
            "TYPE_PROTO",
            "TYPE_PROTOS",
        ][t as usize]
    };
    if a.ref_attr_name.as_deref().is_some_and(|r| !r.is_empty()) {
        // A reference to a function's attribute: the value comes from the caller.
        if let Some((_, f)) = present().find(|p| p.0 != ty) {
            return Err(format!(
                "refers to attribute '{}' but also carries '{f}'",
                a.ref_attr_name.as_deref().unwrap_or("")
            ));
        }
        return Ok(());
    }
    if ty == 0 {
        return match present().count() {
            0 => Err("has no type and no value".to_string()),
            1 => Ok(()),
            _ => Err(format!(
                "has no type and several values ({})",
                present().map(|p| p.1).collect::<Vec<_>>().join(", ")
            )),
        };
    }
    if let Some((_, f)) = present().find(|p| p.0 != ty) {
        return Err(format!("has type {} but carries '{f}'", type_name(ty)));
    }
    let is_list = matches!(ty, 6..=10 | 12 | 14);
    if !is_list && present().next().is_none() {
        return Err(format!("has type {} but no value", type_name(ty)));
    }
    Ok(())
}

/// The newest IR version this tool's schema (`proto/onnx.proto`) describes.
pub const NEWEST_IR_VERSION: i64 = 14;
/// The newest default-domain (`ai.onnx`) opset this tool knows, that of the same ONNX release.
pub const NEWEST_OPSET: i64 = 28;

/// Warnings for a model newer than this tool knows: its IR version or default-domain opset.
/// Such a model is still read (unknown operators stay unknown, never guessed), but operators
/// may have changed meaning in versions the rules were not written for.
pub fn version_warnings(model: &Model) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(v) = model.ir_version.filter(|&v| v > NEWEST_IR_VERSION) {
        out.push(format!(
            "the model's IR version {v} is newer than the newest this tool knows ({NEWEST_IR_VERSION}); fields it does not know are not rewritten"
        ));
    }
    if let Some(v) = model.opset("").filter(|&v| v > NEWEST_OPSET) {
        out.push(format!(
            "the model imports ai.onnx opset {v}, newer than the newest this tool knows ({NEWEST_OPSET}); operators may have changed meaning since, so verify the output"
        ));
    }
    out
}

#[cfg(test)]
mod names_tests {
    use super::*;

    /// The message of the one node of `run`.
    fn to_proto(run: NodeRun) -> NodeProto {
        assert_eq!(run.nodes.len(), 1, "one node read");
        let h = run.nodes.into_iter().next().unwrap().unwrap();
        assert_eq!(h.n_inputs as usize, run.inputs.len());
        assert_eq!(h.n_outputs as usize, run.outputs.len());
        let rare = h.rare.map(|r| *r).unwrap_or_default();
        NodeProto {
            input: run.inputs.into_iter().map(Cow::into_owned).collect(),
            output: run.outputs.into_iter().map(Cow::into_owned).collect(),
            name: h.name.map(Cow::into_owned),
            op_type: h.op_type.map(Cow::into_owned),
            attribute: h.attribute,
            doc_string: rare.doc_string,
            domain: h.domain.map(Cow::into_owned),
            overload: rare.overload,
            metadata_props: h.metadata_props,
            device_configurations: rare.device_configurations,
        }
    }

    /// A node read from the wire is the node the decoder makes; what the reader does not take
    /// (wrong wire types, names that are not UTF-8) the decoder refuses.
    #[test]
    fn nodes_read_from_the_wire_are_the_decoders() {
        use prost::encoding::{encode_key, encode_varint, WireType};
        let full = NodeProto {
            input: vec!["x".into(), String::new(), "w".into()],
            output: vec!["y".into(), "z".into()],
            name: Some("n".into()),
            op_type: Some("Conv".into()),
            attribute: vec![AttributeProto {
                name: Some("group".into()),
                r#type: Some(2),
                i: Some(4),
                ..Default::default()
            }],
            doc_string: Some("d".into()),
            domain: Some("com.example".into()),
            overload: Some("o".into()),
            metadata_props: vec![crate::proto::StringStringEntryProto {
                key: Some("k".into()),
                value: Some("v".into()),
            }],
            device_configurations: vec![Default::default()],
        };
        let mut cases: Vec<Vec<u8>> = vec![full.encode_to_vec(), Vec::new()];
        // A later name replaces an earlier one; unknown fields of every wire type are skipped.
        let mut b = full.encode_to_vec();
        prost::encoding::string::encode(3, &"second".to_string(), &mut b);
        encode_key(99, WireType::Varint, &mut b);
        encode_varint(7, &mut b);
        encode_key(98, WireType::ThirtyTwoBit, &mut b);
        b.extend([0; 4]);
        encode_key(97, WireType::SixtyFourBit, &mut b);
        b.extend([0; 8]);
        encode_key(96, WireType::LengthDelimited, &mut b);
        encode_varint(2, &mut b);
        b.extend([1, 2]);
        encode_key(95, WireType::StartGroup, &mut b);
        encode_key(95, WireType::EndGroup, &mut b);
        cases.push(b);
        for case in &cases {
            let bytes = Bytes::from(case.clone());
            let mut run = NodeRun::with_capacity(1);
            assert!(read_node(&bytes, &mut run), "a well-formed node is read");
            assert_eq!(to_proto(run), NodeProto::decode(bytes.clone()).unwrap());
        }
        // An input as a varint; a name that is not UTF-8: not read, and refused by the decoder.
        let mut varint_input = Vec::new();
        encode_key(1, WireType::Varint, &mut varint_input);
        encode_varint(3, &mut varint_input);
        let mut not_utf8 = Vec::new();
        encode_key(1, WireType::LengthDelimited, &mut not_utf8);
        encode_varint(1, &mut not_utf8);
        not_utf8.push(0xff);
        // (Read after a good node: the run is left as it was, the good node's names kept.)
        let good = Bytes::from(full.encode_to_vec());
        for bad in [varint_input, not_utf8, vec![0x0a, 0x05, b'x']] {
            let bytes = Bytes::from(bad);
            let mut run = NodeRun::with_capacity(2);
            assert!(read_node(&good, &mut run));
            assert!(!read_node(&bytes, &mut run));
            assert_eq!(to_proto(run), NodeProto::decode(good.clone()).unwrap());
            assert!(NodeProto::decode(bytes).is_err());
        }
    }

    /// An initializer's name is its value's: a second initializer of a name, and a tensor
    /// whose payload disagrees with its dims, are refused by that name; an initializer may
    /// share its name with a graph input.
    #[test]
    fn initializers_are_refused_by_their_names() {
        use crate::proto::ValueInfoProto;
        let tensor = |name: &str, bytes: usize| TensorProto {
            name: Some(name.into()),
            dims: vec![2],
            data_type: Some(1),
            raw_data: Some(Bytes::from(vec![0u8; bytes])),
            ..Default::default()
        };
        let model = |inits: Vec<TensorProto>| ModelProto {
            ir_version: Some(8),
            graph: Some(GraphProto {
                name: Some("g".into()),
                input: vec![ValueInfoProto {
                    name: Some("x".into()),
                    ..Default::default()
                }],
                output: vec![ValueInfoProto {
                    name: Some("x".into()),
                    ..Default::default()
                }],
                initializer: inits,
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = import_model(model(vec![tensor("w", 8), tensor("w", 8)]), None).unwrap_err();
        assert_eq!(e.to_string(), "graph 'g': two initializers are named 'w'");
        let e = import_model(model(vec![tensor("x", 8), tensor("x", 8)]), None).unwrap_err();
        assert_eq!(e.to_string(), "graph 'g': two initializers are named 'x'");
        let e = import_model(model(vec![tensor("w", 4)]), None).unwrap_err();
        assert!(
            e.to_string().starts_with("graph 'g': initializer 'w' "),
            "{e}"
        );
        let m = import_model(model(vec![tensor("x", 8), tensor("w", 8)]), None).unwrap();
        let names: Vec<&str> = m
            .graph
            .initializers
            .iter()
            .map(|i| m.graph.value_name(i.value))
            .collect();
        assert_eq!(names, ["x", "w"]);
        assert_eq!(m.graph.values.len(), 2, "x is the input's value");
    }

    /// Two names whose hashes are equal (forced here; real ones are 64-bit hashes) are told
    /// apart by name, whichever comes first.
    #[test]
    fn names_with_one_hash_are_kept_apart() {
        let mut g = Graph::default();
        let mut names = Names::default();
        let h = 42;
        let a = g.add_value_hashed("a".into(), h, Origin::Input);
        names.insert(h, a, &g.values);
        let b = g.add_value_hashed("b".into(), h, Origin::Input);
        names.insert(h, b, &g.values);
        assert_eq!(names.get_hashed("a", h, &g.values), Some(a));
        assert_eq!(names.get_hashed("b", h, &g.values), Some(b));
        assert_eq!(names.get_hashed("c", h, &g.values), None);
        assert_eq!(names.get_hashed("a", h + 1, &g.values), None);
        // The same name again: the newer value, as a map's insert.
        let a2 = g.add_value_hashed("a".into(), h, Origin::Unbound);
        names.insert(h, a2, &g.values);
        assert_eq!(names.get_hashed("a", h, &g.values), Some(a2));
        let b2 = g.add_value_hashed("b".into(), h, Origin::Unbound);
        names.insert(h, b2, &g.values);
        assert_eq!(names.get_hashed("b", h, &g.values), Some(b2));
        // Real hashes.
        let c = names.add(&mut g, "c".into(), Origin::Input);
        assert_eq!(names.get("c", &g.values), Some(c));
        assert!(Scope::Graph(&names, &g.values).contains("c"));
        assert!(!Scope::Graph(&names, &g.values).contains("d"));
    }

    /// A table made small finds every name after growing many times over, among names whose
    /// hashes a file made equal (kept apart by name), and names never added are not found.
    #[test]
    fn names_are_found_after_the_table_grows() {
        let mut g = Graph::default();
        let mut names = Names::default();
        let slots = names.slots.len();
        let mut ids = Vec::new();
        for i in 0..3000 {
            let name = format!("v{i}");
            let v = if i % 3 == 0 {
                // One hash for a third of them.
                let v = g.add_value_hashed(name, 7, Origin::Input);
                names.insert(7, v, &g.values);
                v
            } else {
                names.add(&mut g, name, Origin::Input)
            };
            ids.push(v);
        }
        assert!(
            names.slots.len() > 100 * slots,
            "{} slots",
            names.slots.len()
        );
        assert!(names.len * 4 <= names.slots.len() * 3);
        for (i, &v) in ids.iter().enumerate() {
            let name = format!("v{i}");
            let h = if i % 3 == 0 { 7 } else { name_hash(&name) };
            assert_eq!(names.get_hashed(&name, h, &g.values), Some(v), "{name}");
        }
        assert_eq!(names.get("v3000", &g.values), None);
        assert_eq!(names.get_hashed("v1", 7, &g.values), None);
        assert_eq!(names.clashes.len(), 999);
    }
}

#[cfg(test)]
pub(crate) mod read_ahead_tests {
    use super::*;
    use crate::ir::ValueId;
    use crate::proto::{OperatorSetIdProto, ValueInfoProto};

    /// A model of `n` Relu nodes in a chain (`v0` -> `v1` -> ...), its nodes encoded one by
    /// one as `decode_model_split` leaves them; `edit` changes a node before it is encoded.
    pub(crate) fn chain(
        n: usize,
        edit: impl Fn(usize, &mut NodeProto),
    ) -> (ModelProto, Vec<Bytes>) {
        let nodes = (0..n)
            .map(|i| {
                let mut node = NodeProto {
                    input: vec![format!("v{i}")],
                    output: vec![format!("v{}", i + 1)],
                    name: Some(format!("relu{i}")),
                    op_type: Some("Relu".into()),
                    ..Default::default()
                };
                edit(i, &mut node);
                Bytes::from(node.encode_to_vec())
            })
            .collect();
        let value = |name: String| ValueInfoProto {
            name: Some(name),
            ..Default::default()
        };
        let model = ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(13),
            }],
            graph: Some(GraphProto {
                input: vec![value("v0".into())],
                output: vec![value(format!("v{n}"))],
                ..Default::default()
            }),
            ..Default::default()
        };
        (model, nodes)
    }

    /// Nodes left encoded, and no initializers.
    pub(crate) fn encoded(nodes: Vec<Bytes>) -> Encoded {
        Encoded {
            nodes,
            initializers: Vec::new(),
        }
    }

    /// The same model with its nodes decoded into the message.
    fn whole(mut model: ModelProto, nodes: &[Bytes]) -> ModelProto {
        let g = model.graph.as_mut().unwrap();
        g.node = nodes
            .iter()
            .map(|b| NodeProto::decode(b.clone()).unwrap())
            .collect();
        model
    }

    fn summary(m: &Model) -> Vec<(String, String, Vec<String>, Vec<String>)> {
        let g = &m.graph;
        let names = |vs: &[Option<ValueId>]| -> Vec<String> {
            vs.iter()
                .map(|v| v.map_or(String::new(), |v| g.value_name(v).to_string()))
                .collect()
        };
        g.order
            .iter()
            .map(|&n| {
                let node = g.node(n);
                (
                    node.name().to_string(),
                    node.op_type.clone(),
                    names(&node.inputs),
                    names(&node.outputs),
                )
            })
            .collect()
    }

    /// Nodes read ahead on a second thread import as the decoded message's nodes do, in order.
    #[test]
    fn nodes_read_ahead_import_as_decoded_ones() {
        let n = READ_AHEAD_MIN + READ_AHEAD_CHUNK + 7;
        let (model, nodes) = chain(n, |_, _| {});
        let ahead = import_model_split(model.clone(), &encoded(nodes.clone()), None).unwrap();
        let decoded = import_model(whole(model, &nodes), None).unwrap();
        assert_eq!(ahead.graph.order.len(), n);
        assert_eq!(summary(&ahead), summary(&decoded));
    }

    /// An input is its name's one definition, whether the node comes after it (resolved as the
    /// node is read) or before it; in a body, a name defined there later is the body's own
    /// value, not the enclosing graph's value of that name.
    #[test]
    fn inputs_resolve_to_their_definition_before_or_after_them() {
        let (mut model, _) = chain(0, |_, _| {});
        let node = |op: &str, name: &str, inputs: &[&str], outputs: &[&str]| NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            name: Some(name.into()),
            op_type: Some(op.into()),
            ..Default::default()
        };
        let body = GraphProto {
            name: Some("body".into()),
            node: vec![
                node("Relu", "reads_later", &["a"], &["b"]),
                node("Relu", "defines", &["v0"], &["a"]),
            ],
            output: vec![ValueInfoProto {
                name: Some("b".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut with_body = node("If", "if", &["v0"], &["c"]);
        with_body.attribute = vec![AttributeProto {
            name: Some("then_branch".into()),
            r#type: Some(5),
            g: Some(Box::new(body.clone())),
            ..Default::default()
        }];
        with_body.attribute.push(AttributeProto {
            name: Some("else_branch".into()),
            ..with_body.attribute[0].clone()
        });
        let g = model.graph.as_mut().unwrap();
        g.output[0].name = Some("c".into());
        g.node = vec![
            node("Relu", "first", &["v0"], &["a"]),
            node("Add", "reads_both", &["a", "later"], &["d"]),
            node("Relu", "late", &["v0"], &["later"]),
            with_body,
        ];
        let m = import_model(model, None).unwrap();
        let g = &m.graph;
        let by_name = |g: &Graph, name: &str| {
            let id = g.order.iter().copied();
            id.into_iter().find(|&n| g.node(n).name() == name).unwrap()
        };
        let producer = |g: &Graph, v: Option<ValueId>| match g.value(v.unwrap()).origin {
            Origin::Node { node, .. } => g.node(node).name().to_string(),
            ref o => format!("{o:?}"),
        };
        let reads = &g.node(by_name(g, "reads_both")).inputs;
        assert_eq!(producer(g, reads[0]), "first");
        assert_eq!(producer(g, reads[1]), "late");
        assert_eq!(g.consumers().of(reads[1].unwrap()).len(), 1);
        let attrs = &g.node(by_name(g, "if")).attributes;
        let body = attrs.iter().find_map(|a| a.g()).unwrap();
        let reads = &body.node(by_name(body, "reads_later")).inputs;
        assert_eq!(producer(body, reads[0]), "defines");
        let reads = &body.node(by_name(body, "defines")).inputs;
        assert_eq!(producer(body, reads[0]), "OuterScope");
    }

    /// An error in any node stops the import with that node's message (the reading thread,
    /// ahead of it, is stopped, not waited on forever), as without reading ahead.
    #[test]
    fn an_error_among_nodes_read_ahead_is_the_nodes() {
        let n = READ_AHEAD_MIN * 2;
        for at in [3, READ_AHEAD_CHUNK, n - 1] {
            let (model, nodes) = chain(n, |i, node| {
                if i == at {
                    node.op_type = Some(String::new());
                }
            });
            let e = import_model_split(model.clone(), &encoded(nodes.clone()), None).unwrap_err();
            let want = import_model(whole(model, &nodes), None).unwrap_err();
            assert!(e.to_string().contains(&format!("'relu{at}'")), "{e}");
            assert!(e.to_string().contains("has no op_type"), "{e}");
            assert_eq!(e.to_string(), want.to_string());
            // An input nothing defines, found in pass 2 after every node was read.
            let (model, nodes) = chain(n, |i, node| {
                if i == at {
                    node.input = vec!["nowhere".into()];
                }
            });
            let e = import_model_split(model, &encoded(nodes), None).unwrap_err();
            assert!(
                e.to_string().contains("input 'nowhere' is not defined"),
                "{e}"
            );
        }
        // Bytes the decoder refuses, early: refused, and the import returns.
        let (model, mut nodes) = chain(n, |_, _| {});
        nodes[5] = Bytes::from_static(&[0x0a, 0x05, b'x']);
        assert!(import_model_split(model, &encoded(nodes), None).is_err());
    }
}
