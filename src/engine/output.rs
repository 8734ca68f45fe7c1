//! The output side of a compile: weights the rewrites orphaned are pruned, the target's
//! runtime settings are stamped into the model, and the graph invariants are checked before
//! anything is written.

use std::collections::HashSet;

use crate::ir::{Graph, Model, NodeId, ValueId};
use crate::rules::schema::Target;

/// Values read by some node (or its subgraphs) or given out as graph outputs: one flag per
/// value of the graph, by index.
#[derive(Debug, Clone, Default)]
pub(crate) struct UsedValues(Vec<bool>);

impl UsedValues {
    pub(crate) fn contains(&self, v: &ValueId) -> bool {
        self.0.get(v.index()).copied().unwrap_or(false)
    }
}

/// The values `g` uses (see [`UsedValues`]).
pub(crate) fn used_values(g: &Graph) -> UsedValues {
    let mut used = vec![false; g.values.len()];
    let mut mark = |v: ValueId| {
        if let Some(u) = used.get_mut(v.index()) {
            *u = true;
        }
    };
    g.outputs.iter().for_each(|o| mark(o.value));
    for &n in &g.order {
        let node = g.node(n);
        node.inputs.iter().flatten().for_each(|&v| mark(v));
        node.implicit_inputs().iter().for_each(|&v| mark(v));
    }
    UsedValues(used)
}

/// Remove weights the rewrites orphaned: `Constant` nodes and initializers whose values were
/// used before the compile and are used by nothing now (e.g. a split Conv's full weight).
/// Constants that were already unused are left alone, so untouched parts stay as they were.
/// Returns how many `Constant` nodes it removed (what can change a match of the graph).
pub(crate) fn prune_orphans(g: &mut Graph, used_before: &UsedValues) -> usize {
    let used = used_values(g);
    let orphan = |v: &ValueId| used_before.contains(v) && !used.contains(v);
    let dead: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| {
            let node = g.node(n);
            node.op_type == "Constant"
                && node.domain().is_empty()
                && !node.outputs.iter().flatten().any(|v| !orphan(v))
        })
        .collect();
    let nodes = dead.len();
    for n in dead {
        g.remove_node(n);
    }
    let inputs: HashSet<ValueId> = g.inputs.iter().map(|i| i.value).collect();
    g.initializers
        .retain(|i| inputs.contains(&i.value) || !orphan(&i.value));
    nodes
}

/// Metadata key prefix under which the target's runtime settings travel with the model.
pub const RUNTIME_KEY_PREFIX: &str = "onnx_safeify.runtime.";
/// Metadata key naming the target a model was compiled for.
pub const TARGET_KEY: &str = "onnx_safeify.target";

/// Store the target's name and runtime settings in the model's metadata_props (replacing
/// earlier values of the same keys; deterministic order).
pub fn stamp_runtime(model: &mut Model, target: &Target) {
    let mut entries: Vec<(String, String)> = vec![(TARGET_KEY.to_string(), target.name.clone())];
    for s in &target.runtime {
        entries.push((format!("{RUNTIME_KEY_PREFIX}{}", s.key), s.value.clone()));
    }
    set_metadata(model, entries);
}

/// Store the loosest exactness class of a compile's rewrites in the model's metadata_props
/// under [`crate::rewrite::exactness::EXACTNESS_KEY`] (its `to_meta` form, replacing an
/// earlier value), for `verify` to take its default tolerance from.
pub fn stamp_exactness(model: &mut Model, exactness: crate::rewrite::Exactness) {
    set_metadata(
        model,
        vec![(
            crate::rewrite::exactness::EXACTNESS_KEY.to_string(),
            exactness.to_meta(),
        )],
    );
}

/// Set metadata_props entries, replacing earlier values of the same keys, adding new keys at
/// the end in the order given.
fn set_metadata(model: &mut Model, entries: Vec<(String, String)>) {
    for (k, v) in entries {
        match model
            .metadata_props
            .iter_mut()
            .find(|e| e.key.as_deref() == Some(k.as_str()))
        {
            Some(e) => e.value = Some(v),
            None => model
                .metadata_props
                .push(crate::proto::StringStringEntryProto {
                    key: Some(k),
                    value: Some(v),
                }),
        }
    }
}

/// Graph invariants that must hold before anything is written, in the main graph and in every
/// body (an error in a body names its scope path): no cycle, every value read is defined (in
/// a body, a value of an enclosing scope counts), graph outputs are produced, and names are
/// unique.
pub fn check_invariants(g: &Graph) -> Result<(), String> {
    for sg in crate::ir::scope::graphs(g) {
        check_graph_invariants(sg.graph).map_err(|e| {
            if sg.path.is_root() {
                e
            } else {
                format!("in {}: {e}", sg.path)
            }
        })?;
    }
    Ok(())
}

fn check_graph_invariants(g: &Graph) -> Result<(), String> {
    use crate::ir::Origin;
    match g.topo_order() {
        Err(cycle) => {
            return Err(format!(
                "the rewritten graph has a cycle through {} nodes",
                cycle.len()
            ));
        }
        // An edge against the write order into or out of a node a rewrite made: a producer
        // written after its reader. (A file may list its own nodes out of order; ONNX Runtime
        // sorts them, and an untouched graph keeps its order.)
        Ok(order) if order != g.order => {
            let made = |n: NodeId| g.node(n).metadata(crate::rewrite::RULE_KEY).is_some();
            use petgraph::visit::{EdgeRef, IntoEdgeReferences};
            let pos = crate::ir::Positions::new(&g.order);
            for e in (&g.nodes).edge_references() {
                let (Some(p), Some(r)) = (pos.get(&e.source()), pos.get(&e.target())) else {
                    continue;
                };
                if p >= r && (made(e.source()) || made(e.target())) {
                    let node = g.node(e.target());
                    return Err(format!(
                        "node '{}' ({}) reads '{}' before the node that produces it",
                        node.name(),
                        node.op_type,
                        g.value_name(e.weight().value)
                    ));
                }
            }
        }
        Ok(_) => {}
    }
    // A read without an edge (a patch re-pointed a reader to a value whose producer it added
    // afterwards: see `Graph::unlinked`) is not seen by `topo_order`, which follows edges. Its
    // producer must still come first in the write order, which is the order the file gets:
    // each node's write position, and which values are unlinked (a table lookup per read).
    let unlinked_reads = (!g.unlinked.is_empty()).then(|| {
        let pos = crate::ir::Positions::new(&g.order);
        let mut unlinked = vec![false; g.values.len()];
        for v in &g.unlinked {
            if let Some(u) = unlinked.get_mut(v.index()) {
                *u = true;
            }
        }
        (pos, unlinked)
    });
    let produced_later = |v: ValueId, at: usize| -> bool {
        let Some((pos, unlinked)) = &unlinked_reads else {
            return false;
        };
        if !unlinked.get(v.index()).copied().unwrap_or(false) {
            return false;
        }
        let Origin::Node { node: p, .. } = g.value(v).origin else {
            return false;
        };
        pos.get(&p).is_some_and(|q| q >= at)
    };
    let defined = |v: ValueId| -> bool {
        match g.value(v).origin {
            Origin::Input | Origin::Initializer | Origin::OuterScope => true,
            Origin::Node { node, slot } => {
                g.nodes.contains_node(node)
                    && g.node(node).outputs.get(slot as usize).copied().flatten() == Some(v)
            }
            Origin::Unbound => false,
        }
    };
    // Room for every node output's name at once (no rehashing while it fills): at most the
    // values that are not initializers (not room for every value's, most of which are
    // initializers in a rewritten model: 6.5 MB on the deep 1.3 GB model of the bench for
    // 1.6 used).
    let outputs = g.values.len().saturating_sub(g.initializers.len());
    let mut names = crate::ir::hash::NameSet::with_capacity(outputs);
    for (at, &n) in g.order.iter().enumerate() {
        let node = g.node(n);
        for v in node
            .inputs
            .iter()
            .flatten()
            .chain(node.implicit_inputs().iter())
        {
            if !defined(*v) {
                return Err(format!(
                    "node '{}' ({}) reads '{}', which nothing defines",
                    node.name(),
                    node.op_type,
                    g.value_name(*v)
                ));
            }
            if produced_later(*v, at) {
                return Err(format!(
                    "node '{}' ({}) reads '{}' before the node that produces it",
                    node.name(),
                    node.op_type,
                    g.value_name(*v)
                ));
            }
        }
        for v in node.outputs.iter().flatten() {
            if !names.insert(g.value_name(*v)) {
                return Err(format!("two values are named '{}'", g.value_name(*v)));
            }
        }
    }
    for o in &g.outputs {
        if !defined(o.value) {
            return Err(format!(
                "graph output '{}' is not produced",
                g.value_name(o.value)
            ));
        }
    }
    drop(names);
    let mut created = crate::ir::hash::NameSet::with_capacity(0);
    for &n in &g.order {
        let node = g.node(n);
        if node.metadata(crate::rewrite::RULE_KEY).is_some()
            && node.metadata(crate::rewrite::ORIGIN_KEY).is_some()
            && !created.insert(node.name())
        {
            return Err(format!("two new nodes are named '{}'", node.name()));
        }
    }
    Ok(())
}
