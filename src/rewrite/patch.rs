//! Rewrites are patch objects: a description of nodes, values and initializers to add, nodes
//! to remove and uses to re-point, labelled with the rule that made it. A patch is checked
//! before anything changes and applied whole, so a failing rewrite leaves the graph as it was.

use std::collections::HashMap;

use crate::ir::{
    Attribute, Attrs, Graph, Initializer, MetaEntry, MetaList, Node, NodeId, Origin, Tensor, Text,
    ValueId, IMPLICIT_SLOT,
};
use crate::proto::{attribute_proto::AttributeType, AttributeProto, TensorProto};

/// Metadata key stamped on every node a rule creates: the rule's id.
pub const RULE_KEY: &str = "onnx_safeify.rule";
/// Metadata key stamped on every node a rule creates: the name of the node it came from.
pub const ORIGIN_KEY: &str = "onnx_safeify.origin";

/// A value a patch refers to: one already in the graph, or one the patch creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PValue {
    Existing(ValueId),
    New(usize),
}

/// An attribute value for a new node.
#[derive(Debug, Clone)]
pub enum AttrValue {
    Float(f32),
    Int(i64),
    String(String),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Tensor(Box<TensorProto>),
}

impl AttrValue {
    pub fn to_proto(&self, name: &str) -> AttributeProto {
        let mut a = AttributeProto {
            name: Some(name.to_string()),
            ..Default::default()
        };
        match self {
            AttrValue::Float(f) => {
                a.r#type = Some(AttributeType::Float as i32);
                a.f = Some(*f);
            }
            AttrValue::Int(i) => {
                a.r#type = Some(AttributeType::Int as i32);
                a.i = Some(*i);
            }
            AttrValue::String(s) => {
                a.r#type = Some(AttributeType::String as i32);
                a.s = Some(bytes::Bytes::from(s.clone().into_bytes()));
            }
            AttrValue::Floats(v) => {
                a.r#type = Some(AttributeType::Floats as i32);
                a.floats = v.clone();
            }
            AttrValue::Ints(v) => {
                a.r#type = Some(AttributeType::Ints as i32);
                a.ints = v.clone();
            }
            AttrValue::Tensor(t) => {
                a.r#type = Some(AttributeType::Tensor as i32);
                a.t = Some(t.clone());
            }
        }
        a
    }
}

/// A node to add.
#[derive(Debug, Clone)]
pub struct NewNode {
    pub op_type: String,
    pub domain: String,
    /// Suffix of the node's name (`<origin>/<suffix>`).
    pub name_hint: String,
    pub inputs: Vec<Option<PValue>>,
    pub outputs: Vec<PValue>,
    /// Attributes, either built here or carried over from the original node (one list for
    /// nodes that have the same, e.g. the pieces of a split). Graph payloads stay in their
    /// messages until the patch is applied, which imports them.
    pub attributes: Attrs,
    /// Extra metadata (e.g. `layer_ann`), besides the rule and origin stamps.
    pub metadata: Vec<(Text, Text)>,
}

/// A value to add (produced by a new node, or an initializer).
#[derive(Debug, Clone)]
pub struct NewValue {
    pub name_hint: String,
}

/// A set of changes labelled with the rule that made them.
#[derive(Debug, Clone, Default)]
pub struct Patch {
    pub rule: String,
    /// Name of the node the patch rewrites (for the origin stamp and new names).
    pub origin: String,
    /// Position: new nodes are written where this node was (or at the end).
    pub anchor: Option<NodeId>,
    pub values: Vec<NewValue>,
    /// New initializers (value index, tensor), held compact like the graph's own.
    pub initializers: Vec<(usize, Tensor)>,
    pub nodes: Vec<NewNode>,
    pub remove: Vec<NodeId>,
    /// Every use of the first value (node inputs, graph outputs) becomes the second.
    pub replace: Vec<(ValueId, PValue)>,
    /// Metadata to set on existing nodes (e.g. a CPU annotation).
    /// Node metadata to set: (node, key, value). Keys are the program's own; values are
    /// shared (a pin of 12,500 nodes holds two strings, not 25,000).
    pub annotate: Vec<(NodeId, &'static str, std::sync::Arc<str>)>,
    /// Single uses to re-point: input `slot` of an existing node reads the value instead.
    pub repoint: Vec<(NodeId, usize, PValue)>,
    /// How closely the rewrite reproduces the original on ONNX Runtime (see
    /// [`crate::rewrite::exactness`]); exact unless the rewrite says otherwise.
    pub exactness: crate::rewrite::Exactness,
}

/// What applying a patch did: the nodes created, and the replacements (old value -> new value).
pub type Applied = (Vec<NodeId>, Vec<(ValueId, ValueId)>);

/// Why a patch was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchError(pub String);

impl std::fmt::Display for PatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How applying a patch changes the graph's node and edge tables (see [`Patch::growth`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Growth {
    pub nodes_added: usize,
    pub nodes_removed: usize,
    /// Edges the patch adds (an estimate: its new nodes' reads of values that nodes produce,
    /// and re-pointed reads).
    pub edges_added: usize,
    /// Edges of the nodes it removes.
    pub edges_removed: usize,
}

impl Patch {
    /// How applying this patch to `g` changes its tables, for room made beforehand: a new
    /// node's read makes an edge when a node produces the value (a new value an earlier
    /// patch's node does not produce, e.g. a new initializer, makes none); a removed node's
    /// edges free their slots, which the next patch reuses.
    pub fn growth(&self, g: &Graph) -> Growth {
        let mut new_initializer = vec![false; self.values.len()];
        for &(i, _) in &self.initializers {
            if let Some(b) = new_initializer.get_mut(i) {
                *b = true;
            }
        }
        let made_by_node = |v: &PValue| match *v {
            PValue::Existing(v) => g.values.get(v.index()).is_some_and(
                |v| matches!(v.origin, Origin::Node { node, .. } if g.nodes.contains_node(node)),
            ),
            PValue::New(i) => !new_initializer.get(i).copied().unwrap_or(false),
        };
        let reads = self
            .nodes
            .iter()
            .flat_map(|n| n.inputs.iter().flatten())
            .chain(self.repoint.iter().map(|(_, _, v)| v))
            .filter(|v| made_by_node(v))
            .count();
        let replaced_reads: usize = self
            .replace
            .iter()
            // A reader re-pointed to a new node's value is joined to it once it exists.
            .filter(|(_, new)| made_by_node(new))
            .map(|(old, _)| g.readers(*old).len())
            .sum();
        let edges_removed = self
            .remove
            .iter()
            .filter(|&&n| g.nodes.contains_node(n))
            .map(|&n| {
                g.nodes
                    .edges_directed(n, petgraph::Direction::Incoming)
                    .count()
                    + g.nodes
                        .edges_directed(n, petgraph::Direction::Outgoing)
                        .count()
            })
            .sum();
        Growth {
            nodes_added: self.nodes.len(),
            nodes_removed: self.remove.len(),
            edges_added: reads + replaced_reads,
            edges_removed,
        }
    }

    pub fn new(rule: &str, origin: &str, anchor: Option<NodeId>) -> Self {
        Patch {
            rule: rule.to_string(),
            origin: origin.to_string(),
            anchor,
            ..Default::default()
        }
    }

    /// Does this patch leave facts that [`crate::infer::Facts::extend_after_patches`] can
    /// bring up to date: it re-points no single input (only whole replacements, whose facts
    /// are compared there) and its new nodes hold no subgraph.
    pub fn extends_facts(&self) -> bool {
        self.repoint.is_empty()
            && self.nodes.iter().all(|n| {
                n.attributes
                    .iter()
                    .all(|a| a.message_graphs().next().is_none())
            })
    }

    /// Whether applying this patch only sets metadata on existing nodes (a pin): the graph's
    /// nodes, values, edges and initializers stay as they were.
    pub fn only_annotates(&self) -> bool {
        self.values.is_empty()
            && self.initializers.is_empty()
            && self.nodes.is_empty()
            && self.remove.is_empty()
            && self.replace.is_empty()
            && self.repoint.is_empty()
    }

    /// Give back the room the lists have beyond their entries. The lists grow as the patch is
    /// built, by doubling; a planned patch is kept until its batch is applied (the 3,000 splits
    /// of the deep 1.3 GB rx580 compile: 6 MB of spare room held at once).
    pub fn shrink_to_fit(&mut self) {
        self.values.shrink_to_fit();
        self.initializers.shrink_to_fit();
        self.nodes.shrink_to_fit();
        self.remove.shrink_to_fit();
        self.replace.shrink_to_fit();
        self.annotate.shrink_to_fit();
        self.repoint.shrink_to_fit();
    }

    /// A new value; `hint` becomes part of its name.
    pub fn value(&mut self, hint: &str) -> PValue {
        self.values.push(NewValue {
            name_hint: hint.to_string(),
        });
        PValue::New(self.values.len() - 1)
    }

    /// A new initializer value holding `t` (its name is set on apply).
    pub fn initializer(&mut self, hint: &str, t: TensorProto) -> PValue {
        let v = self.value(hint);
        if let PValue::New(i) = v {
            self.initializers.push((i, Tensor::from_proto(t)));
        }
        v
    }

    /// Add a node with `n_out` new output values; returns them.
    pub fn node(
        &mut self,
        op: &str,
        domain: &str,
        inputs: &[Option<PValue>],
        attributes: impl IntoIterator<Item = impl Into<Attribute>>,
        n_out: usize,
    ) -> Vec<PValue> {
        let attributes = attributes.into_iter().map(Into::into).collect();
        self.node_with(op, domain, inputs, attributes, n_out)
    }

    /// [`Patch::node`] with a list of attributes other nodes may share.
    pub fn node_with(
        &mut self,
        op: &str,
        domain: &str,
        inputs: &[Option<PValue>],
        attributes: Attrs,
        n_out: usize,
    ) -> Vec<PValue> {
        let base = op.to_ascii_lowercase();
        let outputs: Vec<PValue> = (0..n_out).map(|_| self.value(&base)).collect();
        self.nodes.push(NewNode {
            op_type: op.to_string(),
            domain: domain.to_string(),
            name_hint: op.to_string(),
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
            attributes,
            metadata: Vec::new(),
        });
        outputs
    }

    /// A default-domain node with all inputs present and one output.
    pub fn op(&mut self, op: &str, inputs: &[PValue], attrs: &[(&str, AttrValue)]) -> PValue {
        let ins: Vec<Option<PValue>> = inputs.iter().map(|v| Some(*v)).collect();
        let attributes = attrs.iter().map(|(n, v)| v.to_proto(n));
        self.node(op, "", &ins, attributes, 1)[0]
    }

    /// Remove a node (its outputs must be replaced or unused).
    pub fn remove(&mut self, n: NodeId) {
        if !self.remove.contains(&n) {
            self.remove.push(n);
        }
    }

    /// Re-point every use of `old` to `new`.
    pub fn replace(&mut self, old: ValueId, new: PValue) {
        self.replace.push((old, new));
    }

    /// Re-point this patch's references to existing values through `map` (old -> new), for
    /// patches built on a graph that earlier patches have since changed.
    pub fn remap(&mut self, map: &HashMap<ValueId, ValueId>) {
        if map.is_empty() {
            return;
        }
        let fix = |p: &mut PValue| {
            if let PValue::Existing(v) = p {
                let mut cur = *v;
                // Follow chains (a value replaced twice), bounded by the map's size.
                for _ in 0..=map.len() {
                    match map.get(&cur) {
                        Some(&n) if n != cur => cur = n,
                        _ => break,
                    }
                }
                *v = cur;
            }
        };
        for n in &mut self.nodes {
            for i in n.inputs.iter_mut().flatten() {
                fix(i);
            }
        }
        for (_, new) in &mut self.replace {
            fix(new);
        }
        for (_, _, v) in &mut self.repoint {
            fix(v);
        }
    }

    /// Apply to `g`, all or nothing. Returns the ids of the nodes created.
    pub fn apply(self, g: &mut Graph) -> Result<Vec<NodeId>, PatchError> {
        self.apply_with_map(g).map(|(created, _)| created)
    }

    /// Like [`Patch::apply`], also returning the replacements made (old value -> new value).
    pub fn apply_with_map(mut self, g: &mut Graph) -> Result<Applied, PatchError> {
        self.check(g)?;
        let body_read = self.route_body_reads(g);
        let Patch {
            rule,
            origin,
            anchor,
            values,
            initializers,
            nodes,
            remove,
            replace,
            annotate,
            repoint,
            exactness: _,
        } = self;
        let prefix = if origin.is_empty() {
            rule.clone()
        } else {
            origin.clone()
        };

        // Values: names derived from the origin, unique in the graph. (Each name's stem,
        // `prefix/hint`, is built in one buffer.)
        fn stem<'b>(buf: &'b mut String, prefix: &str, hint: &str) -> &'b str {
            buf.clear();
            buf.push_str(prefix);
            buf.push('/');
            buf.push_str(hint);
            buf
        }
        let mut base = String::new();
        let mut ids: Vec<ValueId> = Vec::with_capacity(values.len());
        for v in &values {
            let name = g.fresh_name(stem(&mut base, &prefix, &v.name_hint));
            ids.push(g.add_value(name, Origin::Unbound));
        }
        let resolve = |p: PValue| -> ValueId {
            match p {
                PValue::Existing(v) => v,
                PValue::New(i) => ids[i],
            }
        };
        for (i, t) in initializers {
            let v = ids[i];
            g.values[v.index()].origin = Origin::Initializer;
            // Named by its value.
            g.initializers.push(Initializer {
                value: v,
                tensor: t,
            });
        }

        // Where new nodes go in the write order: where the anchor (or first removed node) was.
        let anchor_pos = anchor
            .filter(|_| !nodes.is_empty())
            .or_else(|| remove.first().copied().filter(|_| !nodes.is_empty()))
            .and_then(|a| g.position(a));

        // Re-point uses before removing nodes, so graph outputs keep their names: when an old
        // value is a graph output, the new value takes over its name.
        let mut renames: Vec<(ValueId, ValueId)> = Vec::new();
        let mut replaced: Vec<(ValueId, ValueId)> = Vec::new();
        // Surviving nodes re-pointed to a value this patch's nodes produce: no edge can join
        // them before the producer exists, so they are joined once it does (below).
        let mut late: Vec<(NodeId, u32, ValueId)> = Vec::new();
        for (old, new) in &replace {
            let is_new = matches!(new, PValue::New(_));
            let new = resolve(*new);
            replaced.push((*old, new));
            // Every input slot that reads `old` (through the producer's edges where they are
            // complete: see `Graph::readers`).
            for (n, slot) in g.readers(*old) {
                g.set_input(n, slot as usize, Some(new));
                if is_new {
                    late.push((n, slot, new));
                }
            }
            if body_read.contains(old) && !renames.contains(&(*old, new)) {
                renames.push((*old, new));
            }
            if g.outputs.iter().any(|o| o.value == *old) {
                if !renames.contains(&(*old, new)) {
                    renames.push((*old, new));
                }
                for o in g.outputs.iter_mut() {
                    if o.value == *old {
                        o.value = new;
                    }
                }
            }
            for vi in g.value_info.iter_mut() {
                if vi.value == *old {
                    vi.value = new;
                }
            }
        }

        for (n, slot, v) in &repoint {
            g.set_input(*n, *slot, Some(resolve(*v)));
            if matches!(v, PValue::New(_)) {
                late.push((*n, *slot as u32, resolve(*v)));
            }
        }

        // Names visible to subgraphs of new nodes (built only when a new node has one).
        let needs_scope = nodes.iter().any(|n| {
            n.attributes
                .iter()
                .any(|a| a.message_graphs().next().is_some())
        });
        let scope: HashMap<String, ValueId> = if needs_scope {
            g.values
                .iter()
                .enumerate()
                .filter(|(_, v)| !matches!(v.origin, Origin::Unbound))
                .map(|(i, v)| (v.name.to_string(), ValueId(i as u32)))
                .collect()
        } else {
            HashMap::new()
        };

        let mut created = Vec::with_capacity(nodes.len());
        let first_at = anchor_pos.unwrap_or(g.order.len());
        // The stamps every new node gets: one list for all (a node with metadata of its own
        // gets a copy with it).
        let stamps: MetaList = std::iter::once(MetaEntry::new(RULE_KEY, rule))
            .chain((!origin.is_empty()).then(|| MetaEntry::new(ORIGIN_KEY, Text::copy(&origin))))
            .collect();
        for nn in nodes {
            let name = g.fresh_name(stem(&mut base, &prefix, &nn.name_hint));
            let mut node = Node {
                name: Some(name),
                op_type: nn.op_type,
                domain: if nn.domain.is_empty() {
                    None
                } else {
                    Some(nn.domain)
                },
                inputs: nn.inputs.iter().map(|i| i.map(resolve)).collect(),
                outputs: nn.outputs.iter().map(|o| Some(resolve(*o))).collect(),
                attributes: Attrs::default(),
                metadata_props: stamps.clone(),
                rare: None,
            };
            let mut implicit: Vec<ValueId> = Vec::new();
            // Attributes without graphs to import are taken as they are (a list the patch's
            // nodes share stays one list).
            let imports = nn
                .attributes
                .iter()
                .any(|a| a.message_graphs().next().is_some());
            if !imports {
                node.attributes = nn.attributes;
            } else {
                let mut attributes = Vec::with_capacity(nn.attributes.len());
                for a in nn.attributes.into_vec() {
                    let mut proto = match a.into_message_with_graphs() {
                        Ok(proto) => proto,
                        Err(a) => {
                            attributes.push(a);
                            continue;
                        }
                    };
                    let single = proto.g.take();
                    let many = std::mem::take(&mut proto.graphs);
                    let mut import = |gp: crate::proto::GraphProto| -> Graph {
                        match crate::import::import_subgraph(gp, &scope, &prefix) {
                            Ok((sub, refs)) => {
                                for r in refs {
                                    if let Some(&v) = scope.get(&r) {
                                        if !implicit.contains(&v) {
                                            implicit.push(v);
                                        }
                                    }
                                }
                                sub
                            }
                            // `check` imported it successfully already; an empty graph is
                            // unreachable.
                            Err(_) => Graph::default(),
                        }
                    };
                    let g1 = single.map(|gp| Box::new(import(*gp)));
                    let gs = many.into_iter().map(&mut import).collect();
                    attributes.push(Attribute::with_graphs(proto, g1, gs));
                }
                node.attributes = attributes.into();
            }
            node.set_implicit_inputs(implicit);
            for (k, v) in nn.metadata {
                node.set_metadata(k, v);
            }
            let id = g.insert_node(node, None);
            // insert_node appended it; the new nodes are moved to their place together below.
            g.order.pop();
            created.push(id);
        }
        // One shift of the write order for all new nodes, not one per node (the same order:
        // they go to consecutive places from `first_at`, which is at most the order's length).
        // When the node at that place is one this patch removes (a replaced node, as a split
        // is), the new nodes take its place in the same shift: removing it afterwards would
        // shift the rest of the order again (once per patch, quadratic in a graph's size).
        let at = first_at.min(g.order.len());
        let taken_place = g.order.get(at).copied().filter(|n| remove.contains(n));
        let end = at + usize::from(taken_place.is_some());
        g.order.splice(at..end, created.iter().copied());
        for (n, k, v) in &annotate {
            if let Some(node) = g.nodes.node_weight_mut(*n) {
                node.set_metadata(*k, v.clone());
            }
        }
        for n in remove {
            if Some(n) == taken_place {
                g.remove_node_unlisted(n);
            } else {
                g.remove_node(n);
            }
        }
        // Nodes whose bodies read a replaced value by name read the replacement (which takes
        // the name over below); their implicit edges follow.
        for &(old, new) in &renames {
            if body_read.contains(&old) {
                repoint_implicit(g, old, new);
            }
        }
        // A graph output, or a value a body reads by name, keeps its name: swap names between
        // the old and the new value.
        for (old, new) in renames {
            let old_name = g.value_name(old).to_string();
            let new_name = g.value_name(new).to_string();
            g.values[old.index()].name = new_name.into_boxed_str();
            g.values[new.index()].name = old_name.into_boxed_str();
        }
        // Edges into new nodes whose producers are new nodes created later in this patch.
        rebuild_edges(g, &created);
        // Edges into the surviving nodes re-pointed to new values. Then every reader of this
        // patch's values is joined to its producer: they are no longer `unlinked`, so the
        // write order can follow the edges (a file whose nodes are not in topological order
        // keeps its order until a rewrite; see `Graph::sort_if_needed`).
        link_late_reads(g, &late);
        for v in &ids {
            if matches!(g.values[v.index()].origin, Origin::Node { node, .. } if g.nodes.contains_node(node))
            {
                let _ = g.unlinked.remove(v);
            }
        }
        Ok((created, replaced))
    }

    /// The replaced values that a surviving node's body reads by name. Each keeps its name:
    /// the replacement takes it over. A replacement that is an existing value (with a name of
    /// its own, maybe a graph input or read by name elsewhere) gets an `Identity` of its own
    /// to carry the name.
    fn route_body_reads(&mut self, g: &Graph) -> Vec<ValueId> {
        let mut read = Vec::new();
        for i in 0..self.replace.len() {
            let (old, new) = self.replace[i];
            // Inputs, initializers and outer values stay defined: their readers keep them.
            if !matches!(g.values[old.index()].origin, Origin::Node { .. }) {
                continue;
            }
            let by_body = g
                .implicit_readers(old)
                .iter()
                .any(|n| !self.remove.contains(n));
            if !by_body {
                continue;
            }
            if !read.contains(&old) {
                read.push(old);
            }
            if let PValue::Existing(_) = new {
                let out = self.value("body_read");
                self.nodes.push(NewNode {
                    op_type: "Identity".into(),
                    domain: String::new(),
                    name_hint: "Identity".into(),
                    inputs: vec![Some(new)],
                    outputs: vec![out],
                    attributes: Attrs::default(),
                    metadata: Vec::new(),
                });
                self.replace[i].1 = out;
            }
        }
        read
    }

    /// Refuse a patch that refers to values or nodes that do not exist, or that would leave a
    /// removed node's output in use.
    fn check(&self, g: &Graph) -> Result<(), PatchError> {
        let err = |m: String| {
            Err(PatchError(format!(
                "rule '{}' at '{}': {m}",
                self.rule, self.origin
            )))
        };
        let n_new = self.values.len();
        let ok = |p: &PValue| match p {
            PValue::Existing(v) => v.index() < g.values.len(),
            PValue::New(i) => *i < n_new,
        };
        // Subgraphs of new nodes must import against the names visible here.
        if self.nodes.iter().any(|n| {
            n.attributes
                .iter()
                .any(|a| a.message_graphs().next().is_some())
        }) {
            let scope: HashMap<String, ValueId> = g
                .values
                .iter()
                .enumerate()
                .filter(|(_, v)| !matches!(v.origin, Origin::Unbound))
                .map(|(i, v)| (v.name.to_string(), ValueId(i as u32)))
                .collect();
            for nn in &self.nodes {
                for a in &nn.attributes {
                    for gp in a.message_graphs() {
                        if let Err(e) =
                            crate::import::import_subgraph(gp.clone(), &scope, &self.origin)
                        {
                            return err(format!(
                                "a subgraph of the new {} node is invalid: {e}",
                                nn.op_type
                            ));
                        }
                    }
                }
            }
        }
        let mut produced = vec![false; n_new];
        for (i, _) in &self.initializers {
            produced[*i] = true;
        }
        for nn in &self.nodes {
            for i in nn.inputs.iter().flatten() {
                if !ok(i) {
                    return err(format!(
                        "node {} reads a value that does not exist",
                        nn.op_type
                    ));
                }
            }
            for o in &nn.outputs {
                match o {
                    PValue::New(i) if *i < n_new => {
                        if produced[*i] {
                            return err(format!("value #{i} is produced twice"));
                        }
                        produced[*i] = true;
                    }
                    _ => return err(format!("node {} must produce new values", nn.op_type)),
                }
            }
        }
        for (i, p) in produced.iter().enumerate() {
            if !p {
                return err(format!(
                    "value #{i} ('{}') has no producer",
                    self.values[i].name_hint
                ));
            }
        }
        for n in &self.remove {
            if !g.nodes.contains_node(*n) {
                return err("removes a node that does not exist".to_string());
            }
        }
        let replaced: HashMap<ValueId, ()> = self.replace.iter().map(|(o, _)| (*o, ())).collect();
        for (old, new) in &self.replace {
            if old.index() >= g.values.len() || !ok(new) {
                return err("replaces a value that does not exist".to_string());
            }
        }
        for (n, slot, v) in &self.repoint {
            if !g.nodes.contains_node(*n) || *slot >= g.nodes[*n].inputs.len() || !ok(v) {
                return err("re-points an input that does not exist".to_string());
            }
        }
        // Outputs of removed nodes must be replaced, or used by no surviving node/graph output.
        let removed: std::collections::HashSet<NodeId> = self.remove.iter().copied().collect();
        for &n in &self.remove {
            for v in g.nodes[n].outputs.iter().flatten() {
                if replaced.contains_key(v) {
                    continue;
                }
                let used_by_survivor = g.order.iter().any(|&m| {
                    !removed.contains(&m)
                        && (g.nodes[m].inputs.contains(&Some(*v))
                            || g.nodes[m].implicit_inputs().contains(v))
                });
                let new_reads = self
                    .nodes
                    .iter()
                    .any(|nn| nn.inputs.contains(&Some(PValue::Existing(*v))));
                if used_by_survivor || new_reads || g.outputs.iter().any(|o| o.value == *v) {
                    return err(format!(
                        "removes the producer of '{}' which is still in use",
                        g.value_name(*v)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Every node that reads `old` inside its bodies (by name) reads `new` instead: its implicit
/// inputs and the edges that order it after the producer.
fn repoint_implicit(g: &mut Graph, old: ValueId, new: ValueId) {
    let readers = g.implicit_readers(old);
    for n in readers {
        let stale: Vec<_> = g
            .nodes
            .edges_directed(n, petgraph::Direction::Incoming)
            .filter(|e| e.weight().slot == IMPLICIT_SLOT && e.weight().value == old)
            .map(|e| petgraph::visit::EdgeRef::id(&e))
            .collect();
        for e in stale {
            g.nodes.remove_edge(e);
        }
        let implicit = g.nodes[n].implicit_inputs_mut();
        implicit.retain(|&v| v != old);
        if implicit.contains(&new) {
            continue;
        }
        implicit.push(new);
        if let Origin::Node { node, .. } = g.values[new.index()].origin {
            if g.nodes.contains_node(node) {
                g.room_for_edge();
                g.nodes.add_edge(
                    node,
                    n,
                    crate::ir::Edge {
                        value: new,
                        slot: IMPLICIT_SLOT,
                    },
                );
            }
        }
    }
}

/// Joins surviving readers re-pointed to a value whose producer a patch added afterwards.
fn link_late_reads(g: &mut Graph, late: &[(NodeId, u32, ValueId)]) {
    for &(n, slot, v) in late {
        if !g.nodes.contains_node(n)
            || g.nodes[n].inputs.get(slot as usize).copied().flatten() != Some(v)
        {
            continue;
        }
        let Origin::Node { node, .. } = g.values[v.index()].origin else {
            continue;
        };
        if !g.nodes.contains_node(node) {
            continue;
        }
        let linked = g
            .nodes
            .edges_directed(n, petgraph::Direction::Incoming)
            .any(|e| e.weight().slot == slot && e.weight().value == v);
        if !linked {
            g.room_for_edge();
            g.nodes
                .add_edge(node, n, crate::ir::Edge { value: v, slot });
        }
    }
}

/// `insert_node` connects inputs whose producers already exist; a patch may add a consumer
/// before its producer, so connect those edges once every node is in.
fn rebuild_edges(g: &mut Graph, created: &[NodeId]) {
    for &n in created {
        let have: Vec<(ValueId, u32)> = g
            .nodes
            .edges_directed(n, petgraph::Direction::Incoming)
            .map(|e| (e.weight().value, e.weight().slot))
            .collect();
        let inputs = g.nodes[n].inputs.clone();
        for (slot, v) in inputs.iter().enumerate() {
            let Some(v) = v else { continue };
            if have.contains(&(*v, slot as u32)) {
                continue;
            }
            if let Origin::Node { node, .. } = g.values[v.index()].origin {
                if g.nodes.contains_node(node) {
                    g.room_for_edge();
                    g.nodes.add_edge(
                        node,
                        n,
                        crate::ir::Edge {
                            value: *v,
                            slot: slot as u32,
                        },
                    );
                }
            }
        }
    }
}
