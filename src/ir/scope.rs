//! The one walker over a model's scopes: the main graph and every `If`/`Loop`/`Scan` body below
//! it, at any depth, each with its [`ScopePath`].
//!
//! Every stage that visits nodes goes through here instead of recursing into attributes by
//! hand: [`graphs`] and [`nodes`] for reading, [`fold_graphs_mut`] for rewriting (each graph
//! gets what its enclosing graph computed, e.g. the facts of the outer-scope values its body
//! reads). A body's reads of enclosing values are resolved with [`ScopedGraph::resolve`].
//!
//! Order is deterministic: a graph, then the bodies of its nodes in write order, attributes in
//! their order, `graphs` lists in their order (depth first, pre-order).

use std::fmt;

use super::{Graph, Node, NodeId, Origin, ValueId};

/// One step down: the body `attr` (item `index` of a `graphs` list) of node `node`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeStep {
    /// The name of the node that owns the body (may be empty in a file).
    pub node: String,
    /// The attribute holding the body (`body`, `then_branch`, `else_branch`, ...).
    pub attr: String,
    /// For a `graphs` attribute, the position in the list.
    pub index: Option<usize>,
}

/// Where a graph sits in the model: empty for the main graph.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopePath(Vec<ScopeStep>);

impl ScopePath {
    /// The main graph.
    pub fn root() -> Self {
        ScopePath(Vec::new())
    }
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
    /// Nesting depth (0 for the main graph).
    pub fn depth(&self) -> usize {
        self.0.len()
    }
    pub fn steps(&self) -> &[ScopeStep] {
        &self.0
    }
    /// The path of the enclosing graph (`None` for the main graph).
    pub fn parent(&self) -> Option<Self> {
        let (_, up) = self.0.split_last()?;
        Some(ScopePath(up.to_vec()))
    }
    /// The path of a body of node `node` in this scope.
    pub fn child(&self, node: &str, attr: &str, index: Option<usize>) -> Self {
        let mut steps = self.0.clone();
        steps.push(ScopeStep {
            node: node.to_string(),
            attr: attr.to_string(),
            index,
        });
        ScopePath(steps)
    }
    /// A name of this scope, qualified by its path: `loop/body/conv_3` (plain in the main graph).
    pub fn qualify(&self, name: &str) -> String {
        if self.is_root() {
            name.to_string()
        } else {
            format!("{self}/{name}")
        }
    }
}

impl fmt::Display for ScopePath {
    /// `loop/body`, `if/then_branch/loop/body`, `scan/bodies[1]`; empty for the main graph.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            write!(f, "{}/{}", s.node, s.attr)?;
            if let Some(k) = s.index {
                write!(f, "[{k}]")?;
            }
        }
        Ok(())
    }
}

/// A graph of the model with its path and the graphs that enclose it (innermost last).
#[derive(Debug, Clone)]
pub struct ScopedGraph<'a> {
    pub path: ScopePath,
    pub graph: &'a Graph,
    /// The enclosing graphs, outermost first (empty for the main graph).
    pub ancestors: Vec<&'a Graph>,
}

/// Where an outer-scope value of a body is defined.
#[derive(Debug, Clone, Copy)]
pub struct OuterRef<'a> {
    /// How many scopes up (1: the graph that owns the body).
    pub levels_up: usize,
    pub graph: &'a Graph,
    pub value: ValueId,
}

impl<'a> ScopedGraph<'a> {
    /// The definition of a value this graph reads from an enclosing scope, innermost first
    /// (`None` for a value defined here, or a name no enclosing graph defines).
    pub fn resolve(&self, v: ValueId) -> Option<OuterRef<'a>> {
        let val = self.graph.values.get(v.index())?;
        if val.origin != Origin::OuterScope {
            return None;
        }
        let mut name = &*val.name;
        for (up, g) in self.ancestors.iter().rev().enumerate() {
            let found = g
                .values
                .iter()
                .position(|x| *x.name == *name && x.origin != Origin::Unbound)
                .map(|i| ValueId(i as u32));
            match found {
                Some(id) if g.value(id).origin == Origin::OuterScope => name = &g.value(id).name,
                Some(id) => {
                    return Some(OuterRef {
                        levels_up: up + 1,
                        graph: g,
                        value: id,
                    })
                }
                None => {}
            }
        }
        None
    }
}

/// The bodies of a node: (attribute name, index in a `graphs` list, graph), in attribute order.
pub fn bodies(node: &Node) -> impl Iterator<Item = (&str, Option<usize>, &Graph)> {
    node.attributes.iter().flat_map(|a| {
        let name = a.name();
        a.g().into_iter().map(move |g| (name, None, g)).chain(
            a.graphs()
                .iter()
                .enumerate()
                .map(move |(i, g)| (name, Some(i), g)),
        )
    })
}

/// Does any node of this graph (not its bodies) own a body?
pub fn has_bodies(g: &Graph) -> bool {
    g.order.iter().any(|&n| {
        g.node(n)
            .attributes
            .iter()
            .any(|a| a.g().is_some() || !a.graphs().is_empty())
    })
}

/// Every graph of the model, the main graph first, depth first in write order.
pub fn graphs(root: &Graph) -> Vec<ScopedGraph<'_>> {
    let mut out = Vec::new();
    let mut stack = vec![ScopedGraph {
        path: ScopePath::root(),
        graph: root,
        ancestors: Vec::new(),
    }];
    while let Some(sg) = stack.pop() {
        let mut children = Vec::new();
        for &n in &sg.graph.order {
            let node = sg.graph.node(n);
            for (attr, index, body) in bodies(node) {
                let mut ancestors = sg.ancestors.clone();
                ancestors.push(sg.graph);
                children.push(ScopedGraph {
                    path: sg.path.child(node.name(), attr, index),
                    graph: body,
                    ancestors,
                });
            }
        }
        stack.extend(children.into_iter().rev());
        out.push(sg);
    }
    out
}

/// One node of the model, with the graph (and scope) it lives in.
#[derive(Debug, Clone, Copy)]
pub struct ScopedNode<'s, 'a> {
    pub scope: &'s ScopedGraph<'a>,
    pub id: NodeId,
    pub node: &'a Node,
}

impl ScopedNode<'_, '_> {
    /// The node's name qualified by its scope (`loop/body/conv_3`).
    pub fn qualified_name(&self) -> String {
        self.scope.path.qualify(self.node.name())
    }
}

/// Every node of every graph in `scopes` (from [`graphs`]), each graph's nodes in write order.
pub fn nodes<'s, 'a>(scopes: &'s [ScopedGraph<'a>]) -> impl Iterator<Item = ScopedNode<'s, 'a>> {
    scopes.iter().flat_map(|sg| {
        sg.graph.order.iter().map(move |&id| ScopedNode {
            scope: sg,
            id,
            node: sg.graph.node(id),
        })
    })
}

/// Visit every graph mutably, the main graph first, depth first in write order. `f` gets the
/// graph, its path and what its enclosing graph's call returned (`top` for the main graph), and
/// returns what the bodies of this graph get: facts about the values they may read, say.
pub fn fold_graphs_mut<C>(
    root: &mut Graph,
    top: &C,
    f: &mut dyn FnMut(&ScopePath, &mut Graph, &C) -> C,
) {
    fold_rec(root, &ScopePath::root(), top, f);
}

fn fold_rec<C>(
    g: &mut Graph,
    path: &ScopePath,
    from_parent: &C,
    f: &mut dyn FnMut(&ScopePath, &mut Graph, &C) -> C,
) {
    let for_bodies = f(path, g, from_parent);
    if !has_bodies(g) {
        return;
    }
    let order = g.order.clone();
    for n in order {
        if !g.nodes.contains_node(n) {
            continue;
        }
        let node = g.node_mut(n);
        let name = node.name().to_string();
        for a in node.attributes.make_mut() {
            let attr = a.name().to_string();
            if let Some(body) = a.g_mut() {
                fold_rec(body, &path.child(&name, &attr, None), &for_bodies, f);
            }
            for (i, body) in a.graphs_mut().iter_mut().enumerate() {
                fold_rec(body, &path.child(&name, &attr, Some(i)), &for_bodies, f);
            }
        }
    }
}

/// Visit every graph mutably with its path (see [`fold_graphs_mut`]).
pub fn for_each_graph_mut(root: &mut Graph, f: &mut dyn FnMut(&ScopePath, &mut Graph)) {
    fold_graphs_mut(root, &(), &mut |p, g, _| f(p, g));
}

/// Reserve every value and node name of every graph below `root` (and `root`'s own) in each of
/// them, so that a fresh name made in one graph ([`Graph::fresh_name`]) is used by no graph that
/// encloses it or that it encloses: onnx.checker rejects a body that defines a name an
/// enclosing scope defines, and a body would read such a name as its own.
pub fn reserve_names_across_scopes(root: &mut Graph) {
    let mut names: Vec<String> = Vec::new();
    for sg in graphs(root) {
        let g = sg.graph;
        names.extend(g.values.iter().map(|v| v.name.to_string()));
        names.extend(g.order.iter().map(|&n| g.node(n).name().to_string()));
    }
    names.sort_unstable();
    names.dedup();
    for_each_graph_mut(root, &mut |_, g| {
        for n in &names {
            g.reserve_name(n);
        }
    });
}
