//! Graphviz (DOT) pictures of a graph, for people who would rather look than read.
//!
//! [`render`] draws the nodes of one graph (not its subgraphs) in their stored order, its
//! inputs and outputs as ellipses, and one edge per value a node reads from another node or a
//! graph input. Initializers are left out: they are weights, not data flow. Nodes a rule made
//! or touched are filled in colour and name their rule:
//!
//! - **pinned** (metadata `layer_ann`, written by the `cpu` and `barrier` actions): blue;
//! - **created** (metadata `onnx_safeify.rule` without `layer_ann`, written by `split`,
//!   `unfuse`, `cast` and barrier cuts): orange.
//!
//! Render a picture with `dot -Tsvg after.dot -o after.svg`.

use std::collections::HashMap;
use std::fmt::Write;

use super::{Graph, Node, NodeId, Origin, ValueId};

/// Node metadata key of a layer annotation (the same as `rewrite::cpu::LAYER_ANN_KEY`; the IR
/// does not depend on the rewrites).
pub const LAYER_ANN_KEY: &str = "layer_ann";
/// Node metadata key naming the rule that made or touched a node (the same as
/// `rewrite::RULE_KEY`).
pub const RULE_KEY: &str = "onnx_safeify.rule";

/// Fill colour of nodes a rule created.
pub const CREATED_COLOR: &str = "#ffb347";
/// Fill colour of nodes pinned to the CPU (`layer_ann`).
pub const PINNED_COLOR: &str = "#8ecae6";

/// How a node is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Untouched by rules.
    Plain,
    /// Made by a rule (`onnx_safeify.rule`, no `layer_ann`).
    Created,
    /// Carries `layer_ann` (pinned to a layer, the CPU for the built-in targets).
    Pinned,
}

/// How [`render`] treats one node.
pub fn mark(node: &Node) -> Mark {
    if node.metadata(LAYER_ANN_KEY).is_some() {
        Mark::Pinned
    } else if node.metadata(RULE_KEY).is_some() {
        Mark::Created
    } else {
        Mark::Plain
    }
}

/// A DOT string literal: quoted, with `"` and `\` escaped and newlines as `\n`.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn op_label(node: &Node) -> String {
    if node.domain().is_empty() {
        node.op_type.clone()
    } else {
        format!("{}::{}", node.domain(), node.op_type)
    }
}

/// The DOT text of graph `g`, titled `title` (a file name, say).
pub fn render(g: &Graph, title: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph {} {{", quote(title));
    let _ = writeln!(s, "  label={};", quote(title));
    s.push_str("  labelloc=t;\n  rankdir=TB;\n");
    s.push_str(
        "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", fontsize=10];\n",
    );
    s.push_str("  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n");

    // Graph inputs (not initializers) and outputs as ellipses.
    let mut input_ids: HashMap<ValueId, String> = HashMap::new();
    for (i, vi) in g.inputs.iter().enumerate() {
        if g.initializer(vi.value).is_some() {
            continue;
        }
        let id = format!("in{i}");
        let label = format!(
            "{}\n{}",
            g.value_name(vi.value),
            super::dump::type_string(vi.proto.r#type.as_ref())
        );
        let _ = writeln!(
            s,
            "  {id} [shape=ellipse, style=filled, fillcolor=\"#eeeeee\", label={}];",
            quote(&label)
        );
        input_ids.insert(vi.value, id);
    }

    // Nodes created, nodes pinned.
    let mut counts = [0usize; 2];
    for &n in &g.order {
        let node = g.node(n);
        let mut label = format!("{}\n{}", display_name(node), op_label(node));
        let attrs = match mark(node) {
            Mark::Plain => String::new(),
            Mark::Created => {
                counts[0] += 1;
                let rule = node.metadata(RULE_KEY).unwrap_or("");
                label.push_str(&format!("\nrule: {rule}"));
                format!(
                    ", fillcolor={}, penwidth=2, class=\"created\", tooltip={}",
                    quote(CREATED_COLOR),
                    quote(&format!("created by rule {rule}"))
                )
            }
            Mark::Pinned => {
                counts[1] += 1;
                let ann = node.metadata(LAYER_ANN_KEY).unwrap_or("");
                let rule = node.metadata(RULE_KEY).unwrap_or("");
                label.push_str(&format!("\nlayer_ann={ann}"));
                if !rule.is_empty() {
                    label.push_str(&format!("\nrule: {rule}"));
                }
                format!(
                    ", fillcolor={}, penwidth=2, class=\"pinned\", tooltip={}",
                    quote(PINNED_COLOR),
                    quote(&format!("pinned (layer_ann={ann}) by rule {rule}"))
                )
            }
        };
        let _ = writeln!(s, "  n{} [label={}{attrs}];", n.index(), quote(&label));
    }

    // Data flow: one edge per (producer, consumer, value).
    let mut seen: std::collections::HashSet<(String, NodeId, ValueId)> = Default::default();
    for &n in &g.order {
        let node = g.node(n);
        let reads = node
            .inputs
            .iter()
            .flatten()
            .chain(node.implicit_inputs().iter());
        for &v in reads {
            let Some(from) = source_id(g, v, &input_ids) else {
                continue;
            };
            if seen.insert((from.clone(), n, v)) {
                let _ = writeln!(
                    s,
                    "  {from} -> n{} [tooltip={}];",
                    n.index(),
                    quote(g.value_name(v))
                );
            }
        }
    }
    for (i, vi) in g.outputs.iter().enumerate() {
        let label = format!(
            "{}\n{}",
            g.value_name(vi.value),
            super::dump::type_string(vi.proto.r#type.as_ref())
        );
        let _ = writeln!(
            s,
            "  out{i} [shape=ellipse, style=filled, fillcolor=\"#eeeeee\", label={}];",
            quote(&label)
        );
        if let Some(from) = source_id(g, vi.value, &input_ids) {
            let _ = writeln!(s, "  {from} -> out{i};");
        }
    }

    if counts[0] + counts[1] > 0 {
        s.push_str("  subgraph cluster_legend {\n    label=\"legend\";\n    style=dashed;\n");
        if counts[0] > 0 {
            let _ = writeln!(
                s,
                "    legend_created [label={}, fillcolor={}];",
                quote(&format!("created by a rule ({} nodes)", counts[0])),
                quote(CREATED_COLOR)
            );
        }
        if counts[1] > 0 {
            let _ = writeln!(
                s,
                "    legend_pinned [label={}, fillcolor={}];",
                quote(&format!("pinned with layer_ann ({} nodes)", counts[1])),
                quote(PINNED_COLOR)
            );
        }
        s.push_str("  }\n");
    }
    s.push_str("}\n");
    s
}

fn display_name(node: &Node) -> &str {
    if node.name().is_empty() {
        "<unnamed>"
    } else {
        node.name()
    }
}

/// The DOT id of whatever defines `v` in this graph: a node or a graph input.
fn source_id(g: &Graph, v: ValueId, inputs: &HashMap<ValueId, String>) -> Option<String> {
    match g.value(v).origin {
        Origin::Node { node, .. } if g.nodes.contains_node(node) => {
            Some(format!("n{}", node.index()))
        }
        Origin::Input => inputs.get(&v).cloned(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn keys_match_the_rewrites() {
        assert_eq!(super::LAYER_ANN_KEY, crate::rewrite::cpu::LAYER_ANN_KEY);
        assert_eq!(super::RULE_KEY, crate::rewrite::RULE_KEY);
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
    }
}
