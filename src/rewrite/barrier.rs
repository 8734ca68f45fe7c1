//! `barrier`: cut a runtime's fused GPU partition into pieces whose estimated work stays under a
//! budget. DirectML records every node it claims into one command list
//! (microsoft/onnxruntime#19724: a list that runs past ~2 s on a weak GPU is a TDR), so smaller
//! ops alone do not shorten it; a node the GPU provider does not take breaks the partition.
//!
//! A *cut* before position i of the topological order is clean when every value computed on
//! the GPU before i and read on the GPU at or after i passes through the CPU. To make a cut
//! clean, each such value gets an `Identity` pinned to the CPU (`layer_ann`), and the GPU
//! readers after the cut read the Identity instead. Pieces are the GPU work between clean cuts.

use std::collections::HashMap;

use crate::ir::{Graph, NodeId, Origin, ValueId};
use crate::rewrite::cpu::LAYER_ANN_KEY;
use crate::rewrite::work::{work, ShapeSource};
use crate::rewrite::{PValue, Patch};

/// One piece of GPU work between two clean cuts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// GPU nodes in the piece.
    pub nodes: usize,
    /// Estimated work (operations + bytes).
    pub work: u64,
    /// Name of the first node of the piece.
    pub first: String,
}

fn is_cpu(g: &Graph, n: NodeId) -> bool {
    g.node(n).metadata(LAYER_ANN_KEY).is_some()
}

/// `Constant` nodes hold weights like initializers do: their outputs never make a partition
/// long and never need a barrier.
fn is_constant_node(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    node.op_type == "Constant" && node.domain().is_empty()
}

struct Layout {
    topo: Vec<NodeId>,
    pos: HashMap<NodeId, usize>,
    /// `gpu_live[i]`: GPU-computed values read on the GPU at or after i, computed before i.
    gpu_live: Vec<usize>,
}

fn layout(g: &Graph) -> Result<Layout, String> {
    let topo = g
        .topo_order()
        .map_err(|_| "the graph has a cycle".to_string())?;
    let pos: HashMap<NodeId, usize> = topo.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let consumers = g.consumers();
    let mut diff = vec![0i64; topo.len() + 2];
    for (vi, value) in g.values.iter().enumerate() {
        let Origin::Node { node, .. } = value.origin else {
            continue;
        };
        let (Some(&p), false) = (pos.get(&node), is_cpu(g, node) || is_constant_node(g, node))
        else {
            continue;
        };
        let last_gpu = consumers[vi]
            .iter()
            .filter(|(c, _)| !is_cpu(g, *c))
            .filter_map(|(c, _)| pos.get(c).copied())
            .max();
        if let Some(q) = last_gpu.filter(|&q| q > p) {
            diff[p + 1] += 1;
            diff[q + 1] -= 1;
        }
    }
    let mut gpu_live = Vec::with_capacity(topo.len() + 1);
    let mut acc = 0i64;
    for d in diff.iter().take(topo.len() + 1) {
        acc += d;
        gpu_live.push(acc.max(0) as usize);
    }
    Ok(Layout {
        topo,
        pos,
        gpu_live,
    })
}

/// The pieces as the graph stands (existing clean cuts respected). Nodes whose work cannot be
/// estimated (unknown shapes) count as 0; [`unknown_work`] lists them.
pub fn pieces(g: &Graph, s: &dyn ShapeSource) -> Result<Vec<Piece>, String> {
    let l = layout(g)?;
    let mut out = Vec::new();
    let mut cur = Piece {
        nodes: 0,
        work: 0,
        first: String::new(),
    };
    for (i, &n) in l.topo.iter().enumerate() {
        if i > 0 && l.gpu_live[i] == 0 && cur.nodes > 0 {
            out.push(std::mem::replace(
                &mut cur,
                Piece {
                    nodes: 0,
                    work: 0,
                    first: String::new(),
                },
            ));
        }
        if is_cpu(g, n) || is_constant_node(g, n) {
            continue;
        }
        let w = work(g, n, s).unwrap_or(0);
        if cur.nodes == 0 {
            cur.first = g.node(n).name().to_string();
        }
        cur.nodes += 1;
        cur.work = cur.work.saturating_add(w);
    }
    if cur.nodes > 0 {
        out.push(cur);
    }
    Ok(out)
}

/// GPU nodes whose work cannot be estimated (their shapes are unknown).
pub fn unknown_work(g: &Graph, s: &dyn ShapeSource) -> Vec<NodeId> {
    g.order
        .iter()
        .copied()
        .filter(|&n| !is_cpu(g, n) && !is_constant_node(g, n) && work(g, n, s).is_none())
        .collect()
}

/// Does any piece exceed the budget (and could a cut help, i.e. has more than one node)?
pub fn over_budget(g: &Graph, s: &dyn ShapeSource, budget: u64) -> Result<bool, String> {
    Ok(pieces(g, s)?.iter().any(|p| p.work > budget && p.nodes > 1))
}

/// Build the patch for the first cut needed, or `None` when every piece fits. Apply it and
/// call again until `None` (each cut changes the live values of the next).
pub fn next_cut(
    g: &Graph,
    s: &dyn ShapeSource,
    budget: u64,
    rule: &str,
    annotation: &str,
) -> Result<Option<Patch>, String> {
    let l = layout(g)?;
    let mut acc = 0u64;
    let mut count = 0usize;
    for (i, &n) in l.topo.iter().enumerate() {
        if i > 0 && l.gpu_live[i] == 0 {
            acc = 0;
            count = 0;
        }
        if is_cpu(g, n) || is_constant_node(g, n) {
            continue;
        }
        let w = work(g, n, s).unwrap_or(0);
        if count > 0 && acc.saturating_add(w) > budget {
            return Ok(Some(cut_before(g, &l, i, rule, annotation)));
        }
        acc = acc.saturating_add(w);
        count += 1;
    }
    Ok(None)
}

fn cut_before(g: &Graph, l: &Layout, i: usize, rule: &str, annotation: &str) -> Patch {
    let consumers = g.consumers();
    let at = l.topo[i];
    let mut p = Patch::new(rule, g.node(at).name(), Some(at));
    let mut crossing: Vec<ValueId> = Vec::new();
    for &n in &l.topo[..i] {
        if is_cpu(g, n) || is_constant_node(g, n) {
            continue;
        }
        for v in g.node(n).outputs.iter().flatten() {
            let later_gpu = consumers[v.index()]
                .iter()
                .any(|(c, _)| !is_cpu(g, *c) && l.pos.get(c).is_some_and(|&q| q >= i));
            if later_gpu {
                crossing.push(*v);
            }
        }
    }
    for v in crossing {
        let out = p.value("barrier");
        p.nodes.push(crate::rewrite::patch::NewNode {
            op_type: "Identity".into(),
            domain: String::new(),
            name_hint: "barrier".into(),
            inputs: vec![Some(PValue::Existing(v))],
            outputs: vec![out],
            attributes: Vec::new(),
            metadata: vec![(LAYER_ANN_KEY.to_string(), annotation.to_string())],
        });
        for (c, slot) in &consumers[v.index()] {
            let later = l.pos.get(c).is_some_and(|&q| q >= i);
            if later && !is_cpu(g, *c) && *slot != crate::ir::IMPLICIT_SLOT {
                p.repoint.push((*c, *slot as usize, out));
            }
        }
    }
    p
}
