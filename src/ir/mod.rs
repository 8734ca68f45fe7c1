//! The graph IR: a petgraph `StableGraph` whose nodes are operators and whose edges are values
//! flowing from a producer to a consumer. Values are ids into a per-graph table; their ONNX names
//! are labels. Everything else a model carries (doc strings, metadata, value_info, functions,
//! training info...) is kept so that export reproduces the input exactly when nothing changed.

mod attr;
pub mod dot;
pub mod dump;
pub mod hash;
mod list;
pub mod meta;
pub mod scope;
pub mod tensor;

use std::sync::atomic::Ordering::Relaxed;

use petgraph::stable_graph::{NodeIndex, StableGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences};
use petgraph::Direction;

pub use attr::{Attribute, Attrs};
pub use list::SharedList;
pub use meta::{MetaEntry, MetaList, Text};
pub use tensor::{Tensor, TensorView};

use crate::proto::{
    DeviceConfigurationProto, FunctionProto, NodeDeviceConfigurationProto, OperatorSetIdProto,
    SparseTensorProto, StringStringEntryProto, TensorAnnotation, TrainingInfoProto, ValueInfoProto,
};

/// A node (operator) of a graph.
pub type NodeId = NodeIndex<u32>;

/// A value of a graph: an index into [`Graph::values`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Edge slot used for a value a node reads only inside one of its subgraphs.
pub const IMPLICIT_SLOT: u32 = u32::MAX;

/// An edge: `value` flows from the source node into input `slot` of the target node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge {
    pub value: ValueId,
    pub slot: u32,
}

/// Where a value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A graph input (it may also have an initializer: a default value, IR < 4 style).
    Input,
    /// An initializer (dense or sparse) that is not also a graph input.
    Initializer,
    /// Output `slot` of a node.
    Node { node: NodeId, slot: u32 },
    /// Defined in an enclosing graph (subgraphs only); resolved by name.
    OuterScope,
    /// Named only in value_info or quantization annotations, defined nowhere.
    Unbound,
}

/// A value: its ONNX name (a label) and where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub name: Box<str>,
    pub origin: Origin,
}

/// An operator application.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: Option<String>,
    pub op_type: String,
    pub domain: Option<String>,
    /// `None` is an omitted optional input (an empty name in ONNX).
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<Option<ValueId>>,
    pub attributes: Attrs,
    pub metadata_props: MetaList,
    /// The fields few nodes carry, boxed: a node is 96 bytes smaller (`None`: all absent).
    pub rare: Option<Box<NodeRare>>,
}

/// A node's rarely set fields (see [`Node::rare`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeRare {
    pub doc_string: Option<String>,
    pub overload: Option<String>,
    pub device_configurations: Vec<NodeDeviceConfigurationProto>,
    /// Values of the node's graph read only inside its subgraphs (by name, outer scope).
    pub implicit_inputs: Vec<ValueId>,
}

impl NodeRare {
    /// The box for these fields, `None` when none is set.
    pub fn boxed(
        doc_string: Option<String>,
        overload: Option<String>,
        device_configurations: Vec<NodeDeviceConfigurationProto>,
    ) -> Option<Box<NodeRare>> {
        // Checked field by field (a comparison with a default value builds one per node).
        if doc_string.is_none() && overload.is_none() && device_configurations.is_empty() {
            return None;
        }
        Some(Box::new(NodeRare {
            doc_string,
            overload,
            device_configurations,
            implicit_inputs: Vec::new(),
        }))
    }
}

impl Node {
    /// A node of this op in the default domain, with no name, inputs, outputs or attributes.
    pub fn new(op_type: impl Into<String>) -> Node {
        Node {
            name: None,
            op_type: op_type.into(),
            domain: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            attributes: Attrs::default(),
            metadata_props: MetaList::default(),
            rare: None,
        }
    }
    /// Values of this graph read only inside the node's subgraphs (by name, outer scope).
    pub fn implicit_inputs(&self) -> &[ValueId] {
        self.rare.as_ref().map_or(&[], |r| &r.implicit_inputs)
    }
    /// [`Node::implicit_inputs`], to change (the rare fields' box is made when there is none).
    pub fn implicit_inputs_mut(&mut self) -> &mut Vec<ValueId> {
        &mut self
            .rare
            .get_or_insert_with(Default::default)
            .implicit_inputs
    }
    /// Set [`Node::implicit_inputs`] (no box is made for none).
    pub fn set_implicit_inputs(&mut self, v: Vec<ValueId>) {
        if !v.is_empty() || self.rare.is_some() {
            *self.implicit_inputs_mut() = v;
        }
    }
    pub fn doc_string(&self) -> Option<&str> {
        self.rare.as_ref()?.doc_string.as_deref()
    }
    pub fn overload(&self) -> Option<&str> {
        self.rare.as_ref()?.overload.as_deref()
    }
    pub fn device_configurations(&self) -> &[NodeDeviceConfigurationProto] {
        self.rare
            .as_ref()
            .map_or(&[], |r| r.device_configurations.as_slice())
    }
    /// The operator domain, `""` for the default ONNX domain (`ai.onnx` is folded to `""`).
    pub fn domain(&self) -> &str {
        match self.domain.as_deref() {
            None | Some("ai.onnx") => "",
            Some(d) => d,
        }
    }
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }
    pub fn attr(&self, name: &str) -> Option<&Attribute> {
        self.attributes.iter().find(|a| a.name() == name)
    }
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata_props
            .iter()
            .find(|e| e.key() == Some(key))
            .and_then(MetaEntry::value)
    }
    /// Set (or replace) one metadata_props entry. Give a shared value ([`Text`]) when many
    /// nodes get it.
    pub fn set_metadata(&mut self, key: impl Into<Text>, value: impl Into<Text>) {
        self.metadata_props.set(key.into(), value.into());
    }
}

/// A graph input, output or value_info entry: the value and its declared type.
#[derive(Debug, Clone)]
pub struct ValueInfo {
    pub value: ValueId,
    /// The declaration; its `name` is rewritten from the value's label on export.
    pub proto: ValueInfoProto,
}

/// A dense initializer.
#[derive(Debug, Clone)]
pub struct Initializer {
    pub value: ValueId,
    /// The tensor (named by its value); payloads are slices of the input's memory map (or of
    /// external data maps).
    pub tensor: Tensor,
}

/// A sparse initializer (its name is that of `values`).
#[derive(Debug, Clone)]
pub struct SparseInitializer {
    pub value: ValueId,
    pub tensor: SparseTensorProto,
}

/// A graph or subgraph.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub name: Option<String>,
    pub doc_string: Option<String>,
    pub nodes: StableGraph<Node, Edge, petgraph::Directed, u32>,
    /// The order nodes are written in (the file's order, new nodes where they were inserted).
    pub order: Vec<NodeId>,
    pub values: Vec<Value>,
    pub inputs: Vec<ValueInfo>,
    pub outputs: Vec<ValueInfo>,
    pub value_info: Vec<ValueInfo>,
    pub initializers: Vec<Initializer>,
    pub sparse_initializers: Vec<SparseInitializer>,
    pub quantization_annotation: Vec<TensorAnnotation>,
    pub metadata_props: Vec<StringStringEntryProto>,
    /// Hashes of every value and node name in use, so fresh names are found in O(1).
    /// A hash collision only makes a name look taken (never a duplicate name).
    /// Made on first use ([`Graph::names_in_use`]): a `check`, or a pass that makes no names,
    /// never needs it (on a graph of 50,000 nodes, 125,000 inserts).
    pub(crate) taken_names: hash::HashKeySet,
    /// Whether `taken_names` was made. Until then the names in use are those of `values` and
    /// of the nodes: nothing that drops a name from them (a node removed, a value renamed)
    /// runs before it is made, so the names of a graph as it was stay taken.
    pub(crate) names_indexed: bool,
    /// For each base given to [`Graph::fresh_name`], the suffix after the one it last returned
    /// (0: the base itself is still to be tried): every lower one is taken (names are never
    /// freed), so the next search starts there, not at 1.
    /// Keyed by the base's [`name_hash`]: two bases of one hash (never seen) share a counter,
    /// which only makes one of them skip suffixes that were free (names stay unique, and the
    /// same on every run).
    pub(crate) name_suffixes: hash::HashKeyMap<u64>,
    /// Where in `order` the last node looked up by [`Graph::position`] was: rewrites go through
    /// the graph in order, so the next lookup starts there.
    pub(crate) order_hint: OrderHint,
    /// Where each value's initializer is (see [`InitIndex`]).
    pub(crate) init_index: InitIndex,
    /// Values a node was connected to while they had no producer node (a patch re-points a
    /// reader to a value whose producer it adds afterwards): no edge joins them to such a
    /// reader, so their readers are found by a scan, not through the producer's edges (see
    /// [`Graph::readers`]).
    pub(crate) unlinked: hash::FastSet<ValueId>,
}

/// Room in `v` for `additional` more entries. When it lacks room, it grows by `additional`
/// or a 64th of its length, whichever is more, where `Vec::reserve` would double it: see
/// [`Graph::reserve`]. (The 64th bounds the copies when many small batches follow.)
pub(crate) fn grow_for<T>(v: &mut Vec<T>, additional: usize) {
    if v.capacity() - v.len() < additional {
        v.reserve_exact(additional.max(v.len() / 64));
    }
}

/// Positions in `Graph::initializers` by value index (`u32::MAX`: none), so that
/// [`Graph::initializer`] is not a linear search (it was 7 % of a 1.3 GB compile, quadratic in
/// the number of initializers). `initializers` is public and changed in place by its users, so
/// the index is never trusted: a hit is checked against the vector, and a miss falls back to the
/// linear search, which rebuilds the index when it finds what the index lacked. A mutex, not a
/// `RefCell`: `Graph` stays `Sync` and unwind-safe (a poisoned lock is just taken over: the
/// index is replaced whole, and checked on every use).
/// A place in a graph's write order (see [`Graph::position`]); atomic so that `Graph` stays
/// `Sync`. Only a starting point: any value gives the same answers.
#[derive(Debug, Default)]
pub(crate) struct OrderHint(std::sync::atomic::AtomicUsize);

impl Clone for OrderHint {
    fn clone(&self) -> Self {
        OrderHint(self.0.load(Relaxed).into())
    }
}

#[derive(Default)]
pub(crate) struct InitIndex(std::sync::Mutex<Vec<u32>>);

impl InitIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Clone for InitIndex {
    fn clone(&self) -> Self {
        InitIndex::default()
    }
}

impl std::fmt::Debug for InitIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InitIndex")
    }
}

/// `base`, with `_n` after it when `n` is not 0, allocated at its length.
fn with_suffix(base: &str, n: u64) -> String {
    if n == 0 {
        return base.to_owned();
    }
    let digits = n.checked_ilog10().unwrap_or(0) as usize + 1;
    let mut s = String::with_capacity(base.len() + 1 + digits);
    s.push_str(base);
    push_suffix(&mut s, n);
    s
}

/// Append `_` and `n` in decimal (what `write!(s, "_{n}")` does, without the formatter).
fn push_suffix(s: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    s.push('_');
    // ASCII digits.
    s.push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
}

/// The hash of a name that [`Graph::taken_names`] records and the importer's name table is
/// keyed by: fixed, the same on every run (so fresh names never depend on the run).
///
/// Why a fast hash with no secret key is enough for names read from a file: the tables keyed
/// by it mix it again with keys drawn per table ([`hash::PreHashedBuild`]), so only names of
/// one whole 64-bit hash share a bucket, and those are handled apart: the importer keeps a
/// second name of a hash in a randomly keyed map by name, the output check's [`hash::NameSet`]
/// likewise, and in `taken_names` a shared hash only makes a fresh name skip a candidate.
///
/// The hash reads the name in at most two 8-byte words (a short name's first and last bytes,
/// overlapping) and mixes them with the length in one 128-bit multiply, folded; a longer name
/// folds each 16 bytes into the first word first. No loop and no copy for the names most
/// models have: SipHash of the name took about three times as long, and a word-at-a-time
/// multiply chain longer still (its tail copy and serial multiplies).
pub(crate) fn name_hash(s: &str) -> u64 {
    const K0: u64 = 0xe565_c62b_3c95_3985;
    const K1: u64 = 0xf670_04a2_350d_fac3;
    const K2: u64 = 0x9025_43e2_4e74_9ef3;
    fn fold(a: u64, b: u64) -> u64 {
        let m = u128::from(a) * u128::from(b);
        (m as u64) ^ ((m >> 64) as u64)
    }
    fn word8(b: &[u8], i: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i..i + 8]);
        u64::from_le_bytes(w)
    }
    fn word4(b: &[u8], i: usize) -> u64 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&b[i..i + 4]);
        u64::from(u32::from_le_bytes(w))
    }
    let b = s.as_bytes();
    let n = b.len();
    // Each branch reads every byte of the name (the reads overlap): two names of one length
    // up to 16 bytes that differ give different words.
    let (first, last) = match n {
        0 => (0, 0),
        1..=3 => {
            let w = (u64::from(b[0]) << 16) | (u64::from(b[n / 2]) << 8) | u64::from(b[n - 1]);
            (w, 0)
        }
        4..=7 => (word4(b, 0), word4(b, n - 4)),
        8..=16 => (word8(b, 0), word8(b, n - 8)),
        _ => {
            let mut h = K0;
            let mut i = 0;
            while n - i > 16 {
                h = fold(word8(b, i) ^ K1, word8(b, i + 8) ^ h);
                i += 16;
            }
            (word8(b, n - 16) ^ h, word8(b, n - 8))
        }
    };
    fold(first ^ K1, last ^ K2 ^ n as u64)
}

/// Each node's place in a list of nodes (the write order, a topological order), by node
/// index: one table lookup per question, not a hash.
pub(crate) struct Positions(Vec<usize>);

impl Positions {
    pub(crate) fn new(nodes: &[NodeId]) -> Self {
        let bound = nodes.iter().map(|n| n.index() + 1).max().unwrap_or(0);
        let mut v = vec![usize::MAX; bound];
        for (i, n) in nodes.iter().enumerate() {
            v[n.index()] = i;
        }
        Positions(v)
    }
    /// Where `n` is (`None`: not in the list).
    pub(crate) fn get(&self, n: &NodeId) -> Option<usize> {
        self.0.get(n.index()).copied().filter(|&p| p != usize::MAX)
    }
}

/// [`Graph::consumers`]: each value's readers in two flat vectors (one allocation, not one per
/// value: a graph of 50,000 nodes has 75,000 values).
#[derive(Debug, Clone, Default)]
pub struct Consumers {
    /// Value `v`'s readers are `list[start[v]..start[v + 1]]`.
    start: Vec<u32>,
    list: Vec<(NodeId, u32)>,
}

impl Consumers {
    fn new(g: &Graph) -> Self {
        fn uses(node: &Node) -> impl Iterator<Item = (ValueId, u32)> + '_ {
            let inputs = node.inputs.iter().enumerate();
            inputs
                .filter_map(|(slot, v)| v.map(|v| (v, slot as u32)))
                .chain(node.implicit_inputs().iter().map(|&v| (v, IMPLICIT_SLOT)))
        }
        let n = g.values.len();
        let mut start = vec![0u32; n + 2];
        for &id in &g.order {
            for (v, _) in uses(g.node(id)) {
                start[v.index() + 2] += 1;
            }
        }
        for i in 2..start.len() {
            start[i] += start[i - 1];
        }
        // `start[v + 1]` is now where `v`'s readers begin; it is moved to their end below.
        let mut list = vec![(NodeId::new(0), 0u32); start[n + 1] as usize];
        for &id in &g.order {
            for (v, slot) in uses(g.node(id)) {
                let at = &mut start[v.index() + 1];
                list[*at as usize] = (id, slot);
                *at += 1;
            }
        }
        start.pop();
        Consumers { start, list }
    }
    /// The readers of `v` (none for a value the graph does not have).
    pub fn of(&self, v: ValueId) -> &[(NodeId, u32)] {
        let i = v.index();
        match (self.start.get(i), self.start.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.list[a as usize..b as usize],
            _ => &[],
        }
    }
    /// Each value's readers, by value id.
    pub fn iter(&self) -> impl Iterator<Item = &[(NodeId, u32)]> {
        self.start
            .windows(2)
            .map(|w| &self.list[w[0] as usize..w[1] as usize])
    }
}

/// A whole model.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub ir_version: Option<i64>,
    pub opset_import: Vec<OperatorSetIdProto>,
    pub producer_name: Option<String>,
    pub producer_version: Option<String>,
    pub domain: Option<String>,
    pub model_version: Option<i64>,
    pub doc_string: Option<String>,
    pub graph: Graph,
    pub metadata_props: Vec<StringStringEntryProto>,
    /// Training graphs are carried through untouched (no rule rewrites them).
    pub training_info: Vec<TrainingInfoProto>,
    /// Model-local functions, carried through untouched.
    pub functions: Vec<FunctionProto>,
    pub configuration: Vec<DeviceConfigurationProto>,
    /// The payloads the rewrites left to compute when the model is written (the unpacked
    /// MatMulNBits weights), for as long as the model or a clone of it lives
    /// ([`crate::io::computed`]).
    pub computed: crate::io::computed::Scope,
}

impl Model {
    /// The imported version of an operator set (`""`/`ai.onnx` are the same domain).
    pub fn opset(&self, domain: &str) -> Option<i64> {
        let want = if domain == "ai.onnx" { "" } else { domain };
        self.opset_import.iter().find_map(|o| {
            let d = match o.domain.as_deref() {
                None | Some("ai.onnx") => "",
                Some(d) => d,
            };
            (d == want).then_some(o.version.unwrap_or(0))
        })
    }
}

impl Graph {
    pub fn value(&self, v: ValueId) -> &Value {
        &self.values[v.index()]
    }
    pub fn value_name(&self, v: ValueId) -> &str {
        &self.values[v.index()].name
    }
    pub fn node(&self, n: NodeId) -> &Node {
        &self.nodes[n]
    }
    pub fn node_mut(&mut self, n: NodeId) -> &mut Node {
        &mut self.nodes[n]
    }
    pub fn node_count(&self) -> usize {
        self.nodes.node_count()
    }

    /// Add a value with a given name and origin; the caller keeps names unique
    /// (see [`Graph::fresh_name`]).
    pub fn add_value(&mut self, name: String, origin: Origin) -> ValueId {
        let h = name_hash(&name);
        self.add_value_hashed(name, h, origin)
    }

    /// [`Graph::add_value`], given the name's [`name_hash`].
    pub(crate) fn add_value_hashed(&mut self, name: String, hash: u64, origin: Origin) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        if self.names_indexed {
            self.taken_names.insert(hash);
        }
        self.values.push(Value {
            name: name.into_boxed_str(),
            origin,
        });
        id
    }

    /// [`Graph::taken_names`], made on first use from the values' and nodes' names.
    fn names_in_use(&mut self) -> &mut hash::HashKeySet {
        if !self.names_indexed {
            self.names_indexed = true;
            // (Room for a name per node, named or not: one walk of the nodes, not two.)
            self.taken_names
                .reserve(self.values.len() + self.nodes.node_count());
            for v in &self.values {
                self.taken_names.insert(name_hash(&v.name));
            }
            for n in self.nodes.node_weights() {
                if let Some(name) = n.name.as_deref() {
                    self.taken_names.insert(name_hash(name));
                }
            }
        }
        &mut self.taken_names
    }

    /// Record a name as used (one that no value or node of this graph has: a name of an
    /// enclosing or inner graph).
    pub fn reserve_name(&mut self, name: &str) {
        self.names_in_use().insert(name_hash(name));
    }

    /// Rename a value (the new name should come from [`Graph::fresh_name`]). The old name
    /// stays taken.
    pub fn rename_value(&mut self, v: ValueId, name: String) {
        self.names_in_use().insert(name_hash(&name));
        self.values[v.index()].name = name.into_boxed_str();
    }

    /// A value or node name not used in this graph, derived from `base`; reserved on return.
    /// The candidates are `base`, then `base_1`, `base_2`, ...: the first one free.
    pub fn fresh_name(&mut self, base: &str) -> String {
        // One lookup per table: the suffix counter through its entry, and a candidate is
        // reserved by the insert that finds it free.
        let base_hash = name_hash(base);
        self.names_in_use();
        let next = self.name_suffixes.entry(base_hash).or_insert(0);
        // Each candidate is allocated at its length: a graph keeps every name it makes (one per
        // new value and node), and room for the longest suffix was 21 bytes more in each.
        let mut candidate = with_suffix(base, *next);
        let mut hash = if *next > 0 {
            name_hash(&candidate)
        } else {
            base_hash
        };
        while !self.taken_names.insert(hash) {
            *next += 1;
            candidate = with_suffix(base, *next);
            hash = name_hash(&candidate);
        }
        // Every candidate up to this one is taken now (names are never freed): the next
        // search for this base starts after it.
        *next += 1;
        candidate
    }

    /// Room for `nodes` more nodes, `edges` more edges and `values` more values, so that a
    /// batch of patches grows each table once instead of doubling it (a copy of the whole
    /// node table each time, and twice the memory touched).
    ///
    /// A table grows by what it lacks (at least a 64th of its length, see [`grow_for`]), not
    /// by doubling: a later round's few patches on a large graph would otherwise double
    /// tables of hundreds of thousands of entries.
    pub fn reserve(&mut self, nodes: usize, edges: usize, values: usize) {
        use petgraph::visit::{EdgeIndexable, NodeIndexable};
        let (node_cap, edge_cap) = self.nodes.capacity();
        // The slots up to the last one in use (vacant slots below it are reused first).
        let (n, e) = (self.nodes.node_bound(), self.nodes.edge_bound());
        if node_cap.saturating_sub(n) < nodes {
            self.nodes.reserve_exact_nodes(nodes.max(n / 64));
        }
        if edge_cap.saturating_sub(e) < edges {
            self.nodes.reserve_exact_edges(edges.max(e / 64));
        }
        grow_for(&mut self.order, nodes);
        grow_for(&mut self.values, values);
    }

    /// Room for one more node: when the node table is full (every slot in use, none vacant)
    /// it grows by a 64th, where petgraph would double it. [`Graph::reserve`] makes room for
    /// a batch beforehand; this keeps an estimate that fell short from doubling the table.
    fn room_for_node(&mut self) {
        let cap = self.nodes.capacity().0;
        if self.nodes.node_count() == cap {
            self.nodes.reserve_exact_nodes((cap / 64).max(1));
        }
    }

    /// Room for one more edge (as [`Graph::room_for_node`] for nodes).
    pub(crate) fn room_for_edge(&mut self) {
        let cap = self.nodes.capacity().1;
        if self.nodes.edge_count() == cap {
            self.nodes.reserve_exact_edges((cap / 64).max(1));
        }
    }

    /// Insert a node into the graph (after `after` in the write order, or at the end), with
    /// edges from the producers of its inputs. Its outputs' origins are set to it.
    pub fn insert_node(&mut self, node: Node, after: Option<NodeId>) -> NodeId {
        let inputs = node.inputs.clone();
        let outputs = node.outputs.clone();
        let implicit = node.implicit_inputs().to_vec();
        self.room_for_node();
        let id = self.nodes.add_node(node);
        for (slot, o) in outputs.iter().enumerate() {
            if let Some(v) = o {
                self.values[v.index()].origin = Origin::Node {
                    node: id,
                    slot: slot as u32,
                };
            }
        }
        for (slot, i) in inputs.iter().enumerate() {
            if let Some(v) = i {
                self.connect(*v, id, slot as u32);
            }
        }
        for v in implicit {
            self.connect(v, id, IMPLICIT_SLOT);
        }
        let pos = after
            .and_then(|a| self.position(a))
            .map(|p| p + 1)
            .unwrap_or(self.order.len());
        self.order.insert(pos, id);
        id
    }

    fn connect(&mut self, v: ValueId, to: NodeId, slot: u32) {
        if let Origin::Node { node, .. } = self.values[v.index()].origin {
            if self.nodes.contains_node(node) {
                self.room_for_edge();
                self.nodes.add_edge(node, to, Edge { value: v, slot });
                return;
            }
        }
        self.unlinked.insert(v);
    }

    /// Every input slot (not implicit) that reads `v`, ordered by node index and slot. A node
    /// output's readers are found through its producer's outgoing edges: import joins every
    /// reader to its producer, and so does [`Graph::set_input`] / [`Graph::insert_node`] when
    /// the producer exists; a value read before its producer existed is in `unlinked` and is
    /// looked up by a scan of the write order, like values without a producer (graph inputs,
    /// initializers). The scan for every replaced value made a split of 750 depthwise Convs
    /// quadratic (a quarter of the instructions of the 326 MB rx580 compile).
    pub fn readers(&self, v: ValueId) -> Vec<(NodeId, u32)> {
        let reads = |n: NodeId, slot: u32| {
            self.nodes
                .node_weight(n)
                .and_then(|node| node.inputs.get(slot as usize))
                .is_some_and(|i| *i == Some(v))
        };
        let mut out: Vec<(NodeId, u32)> = match self.linked_producer(v) {
            Some(p) => self
                .nodes
                .edges_directed(p, Direction::Outgoing)
                .filter(|e| e.weight().value == v && e.weight().slot != IMPLICIT_SLOT)
                .map(|e| (e.target(), e.weight().slot))
                .filter(|&(n, s)| reads(n, s))
                .collect(),
            None => self.scan_readers(v),
        };
        out.sort_unstable();
        out.dedup();
        debug_assert_eq!(out, {
            let mut scan = self.scan_readers(v);
            scan.sort_unstable();
            scan
        });
        out
    }

    /// The nodes whose bodies read `v` by name (its implicit readers), ordered by node index. Found
    /// through the producer's implicit edges like [`Graph::readers`], or by a scan of the
    /// write order for values without a linked producer.
    pub fn implicit_readers(&self, v: ValueId) -> Vec<NodeId> {
        let reads = |n: NodeId| {
            self.nodes
                .node_weight(n)
                .is_some_and(|node| node.implicit_inputs().contains(&v))
        };
        let mut out: Vec<NodeId> = match self.linked_producer(v) {
            Some(p) => self
                .nodes
                .edges_directed(p, Direction::Outgoing)
                .filter(|e| e.weight().value == v && e.weight().slot == IMPLICIT_SLOT)
                .map(|e| e.target())
                .filter(|&n| reads(n))
                .collect(),
            None => self.order.iter().copied().filter(|&n| reads(n)).collect(),
        };
        out.sort_unstable();
        out.dedup();
        debug_assert_eq!(out, {
            let mut scan: Vec<NodeId> = self.order.iter().copied().filter(|&n| reads(n)).collect();
            scan.sort_unstable();
            scan
        });
        out
    }

    /// The node that produces `v` when its outgoing edges are complete for `v` (see
    /// [`Graph::readers`]); `None` for values without one, or read before it existed.
    fn linked_producer(&self, v: ValueId) -> Option<NodeId> {
        match self.values[v.index()].origin {
            Origin::Node { node, .. }
                if self.nodes.contains_node(node) && !self.unlinked.contains(&v) =>
            {
                Some(node)
            }
            _ => None,
        }
    }

    fn scan_readers(&self, v: ValueId) -> Vec<(NodeId, u32)> {
        let mut out = Vec::new();
        for &n in &self.order {
            for (s, i) in self.nodes[n].inputs.iter().enumerate() {
                if *i == Some(v) {
                    out.push((n, s as u32));
                }
            }
        }
        out
    }

    /// Remove a node and its edges. Its output values stay (origin left dangling as `Unbound`)
    /// so a patch can re-point them.
    pub fn remove_node(&mut self, n: NodeId) -> Option<Node> {
        let node = self.remove_node_unlisted(n)?;
        if let Some(at) = self.position(n) {
            self.order.remove(at);
        }
        Some(node)
    }

    /// [`Graph::remove_node`] for a node the caller has already taken out of the write order
    /// (a patch puts its new nodes in the place of the node they replace: one shift of the
    /// order, where removing it too would shift everything after it a second time).
    pub(crate) fn remove_node_unlisted(&mut self, n: NodeId) -> Option<Node> {
        // The node's name stays taken (and the names of the graph as it was are known only
        // while every node is there).
        self.names_in_use();
        let node = self.nodes.remove_node(n)?;
        for v in node.outputs.iter().flatten() {
            if matches!(self.values[v.index()].origin, Origin::Node { node, .. } if node == n) {
                self.values[v.index()].origin = Origin::Unbound;
            }
        }
        Some(node)
    }

    /// Where node `n` is in the write order: searched from where the last lookup found its
    /// node, forwards, then from the start (the same answer as a search from the start: a node
    /// is in the order once).
    pub fn position(&self, n: NodeId) -> Option<usize> {
        let hint = self.order_hint.0.load(Relaxed).min(self.order.len());
        let (head, tail) = self.order.split_at(hint);
        let at = tail
            .iter()
            .position(|&m| m == n)
            .map(|i| hint + i)
            .or_else(|| head.iter().position(|&m| m == n))?;
        self.order_hint.0.store(at, Relaxed);
        Some(at)
    }

    /// Replace input `slot` of node `n` with `v`, keeping edges in step.
    pub fn set_input(&mut self, n: NodeId, slot: usize, v: Option<ValueId>) {
        let old: Vec<_> = self
            .nodes
            .edges_directed(n, Direction::Incoming)
            .filter(|e| e.weight().slot == slot as u32)
            .map(|e| e.id())
            .collect();
        for e in old {
            self.nodes.remove_edge(e);
        }
        let node = &mut self.nodes[n];
        if node.inputs.len() <= slot {
            node.inputs.resize(slot + 1, None);
        }
        node.inputs[slot] = v;
        if let Some(v) = v {
            self.connect(v, n, slot as u32);
        }
    }

    /// Every consumer of every value: `(node, input slot)` lists by value id, in write order
    /// (a node's inputs, then its implicit (subgraph) uses with [`IMPLICIT_SLOT`]).
    pub fn consumers(&self) -> Consumers {
        Consumers::new(self)
    }

    /// Puts the write order in topological order where it is not (ties broken by the
    /// current order, so an ordered graph keeps its order). Import keeps a file's order, and
    /// ONNX Runtime runs files whose nodes are out of order (its transformer test models list
    /// a reader before its producer); a rewrite places new nodes where the node they replace
    /// was, which in such a file can be before what they read. Returns whether it moved any.
    pub fn sort_if_needed(&mut self) -> bool {
        match self.topo_order() {
            Ok(order) if order != self.order => {
                self.order = order;
                true
            }
            _ => false,
        }
    }

    /// Nodes in a topological order (ties broken by write order), or the nodes of a cycle.
    pub fn topo_order(&self) -> Result<Vec<NodeId>, Vec<NodeId>> {
        // Tables indexed by node index (not hash maps: this runs once per analysis, on graphs
        // of 50,000 nodes). `NOT_LISTED`: a node that is not in `order`.
        const NOT_LISTED: usize = usize::MAX;
        let bound = self
            .order
            .iter()
            .map(|n| n.index() + 1)
            .max()
            .unwrap_or(0)
            .max(petgraph::visit::NodeIndexable::node_bound(&self.nodes));
        let mut pos = vec![NOT_LISTED; bound];
        let mut unique = true;
        for (i, &n) in self.order.iter().enumerate() {
            unique &= pos[n.index()] == NOT_LISTED;
            pos[n.index()] = i;
        }
        // The write order is usually topological already (import keeps the file's order, and
        // patches place new nodes where the node they replace was). Then the search below
        // returns it unchanged: each node in turn is ready (its producers come before it) and
        // has the smallest position of the nodes left. Checked edge by edge, without the heap.
        if unique
            && self.nodes.edge_references().all(|e| {
                let t = pos[e.target().index()];
                t == NOT_LISTED || pos[e.source().index()] < t
            })
        {
            return Ok(self.order.clone());
        }
        let mut indeg = vec![0usize; bound];
        for e in self.nodes.edge_references() {
            indeg[e.target().index()] += 1;
        }
        let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<(usize, u32)>> = self
            .order
            .iter()
            .filter(|n| indeg[n.index()] == 0)
            .map(|&n| std::cmp::Reverse((pos[n.index()], n.index() as u32)))
            .collect();
        let mut out = Vec::with_capacity(self.order.len());
        while let Some(std::cmp::Reverse((_, idx))) = ready.pop() {
            let n = NodeIndex::new(idx as usize);
            out.push(n);
            for e in self.nodes.edges_directed(n, Direction::Outgoing) {
                let t = e.target().index();
                let p = pos[t];
                if p != NOT_LISTED {
                    indeg[t] -= 1;
                    if indeg[t] == 0 {
                        ready.push(std::cmp::Reverse((p, t as u32)));
                    }
                }
            }
        }
        if out.len() == self.order.len() {
            Ok(out)
        } else {
            let done: std::collections::HashSet<NodeId> = out.into_iter().collect();
            Err(self
                .order
                .iter()
                .copied()
                .filter(|n| !done.contains(n))
                .collect())
        }
    }

    /// The initializer of a value, if it has one.
    pub fn initializer(&self, v: ValueId) -> Option<TensorView<'_>> {
        let cached = self.init_index.lock().get(v.index()).copied();
        if let Some(i) = cached
            .and_then(|p| self.initializers.get(p as usize))
            .filter(|i| i.value == v)
        {
            return Some(i.tensor.view());
        }
        let found = self.initializers.iter().position(|i| i.value == v)?;
        // The index lacked it: rebuild it (first occurrence wins, as in the search).
        let bound = self
            .initializers
            .iter()
            .map(|i| i.value.index() + 1)
            .max()
            .unwrap_or(0)
            .max(self.values.len());
        let mut index = vec![u32::MAX; bound];
        for (p, i) in self.initializers.iter().enumerate().rev() {
            index[i.value.index()] = u32::try_from(p).unwrap_or(u32::MAX);
        }
        *self.init_index.lock() = index;
        Some(self.initializers[found].tensor.view())
    }

    /// Visit this graph and every subgraph below it, depth first, with the nesting depth
    /// (through [`scope::graphs`], the one walker over scopes).
    pub fn walk<'a>(&'a self, depth: usize, f: &mut dyn FnMut(&'a Graph, usize)) {
        for sg in scope::graphs(self) {
            f(sg.graph, depth + sg.path.depth());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixed name hash: the same on every run, and distinct for the names tried (short,
    /// long, of one length, differing in one byte, the empty name, a name and its extension).
    #[test]
    fn name_hash_is_fixed_and_tells_names_apart() {
        assert_eq!(name_hash("input.1"), name_hash("input.1"));
        assert_ne!(name_hash("input.1"), name_hash("input.18"));
        assert_ne!(name_hash(""), name_hash("\0"));
        assert_ne!(name_hash(""), name_hash("\0\0\0\0\0\0\0\0"));
        assert_ne!(name_hash("ab"), name_hash("ab\0"));
        // Every length up to two long words, the varying bytes at the end and at the start.
        for len in 1..=40usize {
            let mut hashes = std::collections::HashSet::new();
            let count = 20_000.min(16usize.pow(len.min(8) as u32));
            for i in 0..count {
                let s = format!("{i:0>len$x}");
                let s = &s[s.len() - len..];
                let reversed: String = s.chars().rev().collect();
                hashes.insert(name_hash(s));
                if len > 4 {
                    hashes.insert(name_hash(&format!("{reversed}_")));
                }
            }
            let want = if len > 4 { 2 * count } else { count };
            assert_eq!(hashes.len(), want, "length {len}");
        }
        // Pinned values: fresh names depend on the function (through collisions), so a change
        // of it must be deliberate, and it must not differ between machines.
        assert_eq!(
            [
                name_hash("x"),
                name_hash("conv_weight_split_1"),
                name_hash("")
            ],
            [
                3_190_586_319_174_909_221,
                6_802_196_175_396_838_810,
                9_854_116_498_888_399_182
            ]
        );
    }

    /// A large table grown by a few entries grows by a 64th of its length, not to twice it;
    /// by a large batch, to what the batch needs; with room to spare, not at all. The graph's
    /// tables follow the same rule.
    #[test]
    fn tables_grow_by_what_they_lack_not_by_doubling() {
        let mut v: Vec<u64> = vec![0; 64_000];
        assert_eq!(v.capacity(), 64_000);
        grow_for(&mut v, 10);
        assert_eq!(v.capacity(), 65_000);
        grow_for(&mut v, 10);
        assert_eq!(v.capacity(), 65_000, "room to spare: unchanged");
        v.resize(65_000, 0);
        grow_for(&mut v, 100_000);
        assert_eq!(v.capacity(), 165_000);

        let mut g = Graph::default();
        for i in 0..640 {
            g.add_value(format!("v{i}"), Origin::Input);
            g.insert_node(Node::new("Relu"), None);
        }
        // Full tables, as the importer leaves them (it sizes them exactly).
        g.nodes.shrink_to_fit();
        g.values.shrink_to_fit();
        g.order.shrink_to_fit();
        g.reserve(2, 0, 2);
        assert_eq!(g.nodes.capacity().0, 650);
        assert_eq!(g.values.capacity(), 650);
        assert_eq!(g.order.capacity(), 650);
        g.reserve(1_000, 0, 1_000);
        assert_eq!(g.nodes.capacity().0, 1_640);
        assert_eq!(g.values.capacity(), 1_640);
    }

    /// The sizes of the tables' entries (a graph has one per value, node and initializer: the
    /// deep rx580 output of the bench, 156,000, 51,000 and 105,000): a value's name and a
    /// tensor's dims are boxed (no spare capacity), a node's attributes and metadata one
    /// shared pointer each.
    #[test]
    fn table_entries_are_compact() {
        assert_eq!(std::mem::size_of::<Value>(), 32);
        assert_eq!(std::mem::size_of::<Initializer>(), 72);
        assert_eq!(std::mem::size_of::<Node>(), 160);
        assert_eq!(std::mem::size_of::<Attrs>(), 16);
        assert_eq!(std::mem::size_of::<MetaList>(), 16);
    }

    /// A node or edge past what was reserved grows a full table by a 64th, not to twice it.
    #[test]
    fn a_full_node_or_edge_table_grows_by_a_64th() {
        let mut g = Graph::default();
        let mut prev = g.add_value("x".into(), Origin::Input);
        for i in 0..641 {
            let out = g.add_value(format!("y{i}"), Origin::Unbound);
            let mut n = Node::new("Relu");
            n.inputs.push(Some(prev));
            n.outputs.push(Some(out));
            g.insert_node(n, None);
            prev = out;
            if i == 639 {
                g.nodes.shrink_to_fit();
                assert_eq!(g.nodes.capacity(), (640, 639));
            }
        }
        assert_eq!((g.nodes.node_count(), g.nodes.edge_count()), (641, 640));
        assert_eq!(g.nodes.capacity(), (650, 648));
    }

    /// `position` finds a node wherever the last lookup left off, and removal keeps the rest
    /// of the order as it was.
    #[test]
    fn positions_in_the_order_from_any_hint() {
        let mut g = Graph::default();
        let ids: Vec<NodeId> = (0..6)
            .map(|i| {
                let node = Node {
                    name: Some(format!("n{i}")),
                    ..Node::new("Relu")
                };
                g.insert_node(node, None)
            })
            .collect();
        for &start in &[0usize, 3, 5, 99] {
            for (i, &n) in ids.iter().enumerate() {
                g.order_hint.0.store(start, Relaxed);
                assert_eq!(g.position(n), Some(i));
            }
        }
        g.remove_node(ids[4]);
        g.remove_node(ids[1]);
        assert_eq!(g.order, [ids[0], ids[2], ids[3], ids[5]]);
        assert_eq!(g.position(ids[1]), None);
        // Fresh names: a base's suffixes go on from the last one.
        g.reserve_name("n0");
        assert_eq!(g.fresh_name("n0"), "n0_1");
        assert_eq!(g.fresh_name("n0"), "n0_2");
        assert_eq!(g.fresh_name("m"), "m");
        assert_eq!(g.fresh_name("m"), "m_1");
        // Names are kept as long as the graph: each is allocated at its length.
        for _ in 0..12 {
            let n = g.fresh_name("m");
            assert_eq!(n.capacity(), n.len(), "{n}");
        }
        assert_eq!(g.fresh_name("m"), "m_14");
    }

    /// The names in use are indexed when first needed, and those of the graph as it was stay
    /// taken: a removed node's, a renamed value's old one (as if indexed from the start).
    #[test]
    fn names_of_the_graph_as_it_was_stay_taken() {
        let mut g = Graph::default();
        let x = g.add_value("x".into(), Origin::Input);
        let a = g.insert_node(
            Node {
                name: Some("a".into()),
                inputs: vec![Some(x)],
                ..Node::new("Relu")
            },
            None,
        );
        assert!(!g.names_indexed, "nothing asked for a name yet");
        g.remove_node(a);
        assert!(g.names_indexed);
        g.rename_value(x, "y".into());
        assert_eq!(g.fresh_name("a"), "a_1");
        assert_eq!(g.fresh_name("x"), "x_1");
        assert_eq!(g.fresh_name("y"), "y_1");
        // Values added once indexed are taken too.
        g.add_value("z".into(), Origin::Input);
        assert_eq!(g.fresh_name("z"), "z_1");
        // A rename first, before anything else asked.
        let mut h = Graph::default();
        let v = h.add_value("v".into(), Origin::Input);
        h.rename_value(v, "w".into());
        assert_eq!(h.fresh_name("v"), "v_1");
        assert_eq!(h.fresh_name("w"), "w_1");
    }
}
