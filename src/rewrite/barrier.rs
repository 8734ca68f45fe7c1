//! `barrier`: cut a runtime's fused GPU partition into pieces whose estimated work stays under a
//! budget. DirectML records every node it claims into one command list
//! (microsoft/onnxruntime#19724: a list that runs past ~2 s on a weak GPU is a TDR), so smaller
//! ops alone do not shorten it; a node the GPU provider does not take breaks the partition.
//!
//! A *cut* before position i of the topological order is clean when every value computed on
//! the GPU before i and read on the GPU at or after i passes through the CPU. To make a cut
//! clean, each such value gets a no-op node pinned to the CPU (`layer_ann`), and the GPU
//! readers after the cut read it instead. Pieces are the GPU work between clean cuts.
//!
//! The no-op is `Max(x, x)` (exactly `x` for every number, NaN and -0 included), not
//! `Identity`: ONNX Runtime's `EliminateIdentity` optimisation removes Identity nodes before
//! nodes are placed, annotation or not, which would silently undo the cut. Types Max does not
//! take at the model's opset (bool, strings) fall back to Identity.

use crate::infer::Facts;
use crate::ir::{Graph, NodeId, Origin, Text, ValueId};
use crate::rewrite::cpu::LAYER_ANN_KEY;
use crate::rewrite::pass::{Cx, Leftover, Pass, Pending, Planned, Schedule, Summary};
use crate::rewrite::work::work;
use crate::rewrite::{PValue, Patch};
use crate::rules::schema::{Action, Rule, Target};

/// One piece of GPU work between two clean cuts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// GPU nodes in the piece.
    pub nodes: usize,
    /// Estimated work (operations + bytes).
    pub work: u64,
    /// Name of the first node of the piece.
    pub first: String,
    /// Nodes whose work cannot be estimated.
    pub unknown: usize,
}

impl Piece {
    /// Is the piece over `budget` (work that cannot be estimated counts as over)?
    pub fn over(&self, budget: u64) -> bool {
        self.work > budget || self.unknown > 0
    }
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

/// Per node index: on the CPU (pinned), and out of the GPU's work (pinned, or a `Constant`).
struct Kinds {
    cpu: Vec<bool>,
    skip: Vec<bool>,
}

impl Kinds {
    fn new(g: &Graph) -> Self {
        let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
        let mut k = Kinds {
            cpu: vec![false; bound],
            skip: vec![false; bound],
        };
        for n in g.nodes.node_indices() {
            let cpu = is_cpu(g, n);
            k.cpu[n.index()] = cpu;
            k.skip[n.index()] = cpu || is_constant_node(g, n);
        }
        k
    }
    fn cpu(&self, n: NodeId) -> bool {
        self.cpu[n.index()]
    }
    fn skip(&self, n: NodeId) -> bool {
        self.skip[n.index()]
    }
}

struct Layout {
    topo: Vec<NodeId>,
    pos: crate::ir::Positions,
    /// Each value's readers (computed once per layout: `cut_before` reads them too).
    consumers: crate::ir::Consumers,
    kinds: Kinds,
    /// `gpu_live[i]`: GPU-computed values read on the GPU at or after i, computed before i.
    gpu_live: Vec<usize>,
}

fn layout(g: &Graph) -> Result<Layout, String> {
    let topo = g
        .topo_order()
        .map_err(|_| "the graph has a cycle".to_string())?;
    let pos = crate::ir::Positions::new(&topo);
    let consumers = g.consumers();
    let kinds = Kinds::new(g);
    let mut diff = vec![0i64; topo.len() + 2];
    for (vi, value) in g.values.iter().enumerate() {
        let Origin::Node { node, .. } = value.origin else {
            continue;
        };
        if !g.nodes.contains_node(node) {
            continue;
        }
        let (Some(p), false) = (pos.get(&node), kinds.skip(node)) else {
            continue;
        };
        let last_gpu = consumers
            .of(ValueId(vi as u32))
            .iter()
            .filter(|(c, _)| !kinds.cpu(*c))
            .filter_map(|(c, _)| pos.get(c))
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
        consumers,
        kinds,
        gpu_live,
    })
}

/// The pieces as the graph stands (existing clean cuts respected). `work` sums what can be
/// estimated; `unknown` counts the nodes whose work cannot be (unknown shapes), which make a
/// piece of more than one node over any budget ([`unknown_work`] lists them).
pub fn pieces(g: &Graph, s: &Facts) -> Result<Vec<Piece>, String> {
    let l = layout(g)?;
    let mut pieces = PieceList::default();
    for (i, &n) in l.topo.iter().enumerate() {
        if i > 0 && l.gpu_live[i] == 0 {
            pieces.split();
        }
        if l.kinds.skip(n) {
            continue;
        }
        pieces.add(g, n, work(g, n, s));
    }
    Ok(pieces.finish())
}

/// The pieces as a walk of the layout finds them: nodes are added to the current piece, and
/// a clean cut starts a new one.
#[derive(Default)]
struct PieceList {
    done: Vec<Piece>,
    cur: Option<Piece>,
}

impl PieceList {
    /// A clean cut here: the current piece (if it has a node) is done.
    fn split(&mut self) {
        self.done.extend(self.cur.take());
    }
    /// A GPU node of work `w` (`None`: unknown).
    fn add(&mut self, g: &Graph, n: NodeId, w: Option<u64>) {
        let cur = self.cur.get_or_insert_with(|| Piece {
            nodes: 0,
            work: 0,
            first: g.node(n).name().to_string(),
            unknown: 0,
        });
        cur.nodes += 1;
        cur.work = cur.work.saturating_add(w.unwrap_or(0));
        cur.unknown += usize::from(w.is_none());
    }
    fn finish(mut self) -> Vec<Piece> {
        self.split();
        self.done
    }
}

/// GPU nodes whose work cannot be estimated (their shapes are unknown).
pub fn unknown_work(g: &Graph, s: &Facts) -> Vec<NodeId> {
    g.order
        .iter()
        .copied()
        .filter(|&n| !is_cpu(g, n) && !is_constant_node(g, n) && work(g, n, s).is_none())
        .collect()
}

/// Does any piece exceed the budget (and could a cut help, i.e. has more than one node)?
pub fn over_budget(g: &Graph, s: &Facts, budget: u64) -> Result<bool, String> {
    Ok(pieces(g, s)?.iter().any(|p| p.over(budget) && p.nodes > 1))
}

/// The patches for every cut needed, in order, or none when every piece fits. Each cut is
/// planned on the graph as the cuts before it leave it, from one layout: a cut before position
/// i re-points every GPU reader at or after i of the values it crosses to their CPU no-ops, so
/// those values stop being GPU-live from i on (the live counts are lowered to match), and the
/// next cut crosses only values computed at or after i. Applied in order, the patches are the
/// cuts that planning one cut at a time on a fresh layout after each would make.
pub fn cuts(
    g: &Graph,
    s: &Facts,
    budget: u64,
    rule: &str,
    annotation: &str,
    opset: i64,
) -> Result<Vec<Patch>, String> {
    Ok(match plan_cuts(g, s, budget, rule, annotation, opset)? {
        CutPlan::Cuts(patches) => patches,
        CutPlan::Fits(_) => Vec::new(),
    })
}

/// What [`plan_cuts`] found.
pub enum CutPlan {
    /// The cuts to make (at least one).
    Cuts(Vec<Patch>),
    /// No cut is needed: the pieces as the graph stands, what [`pieces`] gives (from the same
    /// layout and work estimates, not computed a second time).
    Fits(Vec<Piece>),
}

/// [`cuts`], and the pieces when no cut is needed. Until a cut is made nothing is lowered,
/// so the places where the cuts' running sum starts again are where [`pieces`] splits.
pub fn plan_cuts(
    g: &Graph,
    s: &Facts,
    budget: u64,
    rule: &str,
    annotation: &str,
    opset: i64,
) -> Result<CutPlan, String> {
    let l = layout(g)?;
    let mut out = Vec::new();
    let mut acc = 0u64;
    let mut count = 0usize;
    // Values the cuts so far took off the GPU from here on: `lowered` of them are counted in
    // `gpu_live` at this position, and `ends[j]` of those stop being counted at position j.
    let mut lowered = 0usize;
    let mut ends = vec![0usize; l.topo.len() + 2];
    let mut from = 0usize;
    let mut pieces = PieceList::default();
    for (i, &n) in l.topo.iter().enumerate() {
        lowered -= ends[i];
        // Every value lowered is one `gpu_live[i]` counts (it is live from its producer to
        // its last GPU reader, and was lowered only from a cut in between).
        debug_assert!(l.gpu_live[i] >= lowered);
        if i > 0 && l.gpu_live[i].saturating_sub(lowered) == 0 {
            acc = 0;
            count = 0;
            if out.is_empty() {
                pieces.split();
            }
        }
        if l.kinds.skip(n) {
            continue;
        }
        // Work that cannot be estimated counts as over the budget: such a node runs between
        // cuts of its own (the unsafe direction would be to count it as nothing).
        let w = work(g, n, s);
        if out.is_empty() {
            pieces.add(g, n, w);
        }
        let over = w.is_none_or(|w| acc.saturating_add(w) > budget);
        if count > 0 && over {
            let (patch, last_reads) = cut_before(g, &l, from, i, rule, annotation, s, opset);
            out.push(patch);
            for q in last_reads {
                lowered += 1;
                ends[q + 1] += 1;
            }
            from = i;
            acc = 0;
            count = 0;
        }
        acc = w.map_or(u64::MAX, |w| acc.saturating_add(w));
        count += 1;
    }
    Ok(if out.is_empty() {
        CutPlan::Fits(pieces.finish())
    } else {
        CutPlan::Cuts(out)
    })
}

/// Can `Max` pass this element type through at this opset (ONNX Max-8: float types;
/// Max-12: every numeric type)?
fn max_takes(dtype: Option<i32>, opset: i64) -> bool {
    use crate::tensor::dtype::*;
    match dtype {
        Some(FLOAT | DOUBLE | FLOAT16) => opset >= 8,
        Some(BFLOAT16 | INT8 | INT16 | INT32 | INT64 | UINT8 | UINT16 | UINT32 | UINT64) => {
            opset >= 12
        }
        _ => false,
    }
}

/// The cut before position `i` of the layout: a CPU no-op for each GPU value computed in
/// `topo[from..i]` and read on the GPU at or after `i`, and those readers re-pointed to it
/// (values computed before `from` were cut off at `from` already). Also gives, per value
/// crossed, the position of its last GPU reader.
#[allow(clippy::too_many_arguments)]
fn cut_before(
    g: &Graph,
    l: &Layout,
    from: usize,
    i: usize,
    rule: &str,
    annotation: &str,
    s: &Facts,
    opset: i64,
) -> (Patch, Vec<usize>) {
    let consumers = &l.consumers;
    let at = l.topo[i];
    let mut p = Patch::new(rule, g.node(at).name(), Some(at));
    let mut crossing: Vec<ValueId> = Vec::new();
    let mut last_reads = Vec::new();
    for &n in &l.topo[from..i] {
        if l.kinds.skip(n) {
            continue;
        }
        for v in g.node(n).outputs.iter().flatten() {
            let last_gpu = consumers
                .of(*v)
                .iter()
                .filter(|(c, _)| !l.kinds.cpu(*c))
                .filter_map(|(c, _)| l.pos.get(c))
                .max();
            if let Some(q) = last_gpu.filter(|&q| q >= i) {
                crossing.push(*v);
                last_reads.push(q);
            }
        }
    }
    for v in crossing {
        let out = p.value("barrier");
        let (op, inputs) = if max_takes(s.dtype(v), opset) {
            (
                "Max",
                vec![Some(PValue::Existing(v)), Some(PValue::Existing(v))],
            )
        } else {
            ("Identity", vec![Some(PValue::Existing(v))])
        };
        p.nodes.push(crate::rewrite::patch::NewNode {
            op_type: op.into(),
            domain: String::new(),
            name_hint: "barrier".into(),
            inputs,
            outputs: vec![out],
            attributes: Default::default(),
            metadata: vec![(LAYER_ANN_KEY.into(), Text::copy(annotation))],
        });
        for (c, slot) in consumers.of(v) {
            let later = l.pos.get(c).is_some_and(|q| q >= i);
            if later && !l.kinds.cpu(*c) && *slot != crate::ir::IMPLICIT_SLOT {
                p.repoint.push((*c, *slot as usize, out));
            }
        }
    }
    (p, last_reads)
}

/// The smallest budget among the barrier rules in `rules`, with its rule (ties: the first).
fn tightest(target: &Target, rules: &[usize]) -> Option<(usize, u64)> {
    rules
        .iter()
        .filter_map(|&r| match &target.rules[r].action {
            Action::Barrier { budget, .. } => Some((r, budget.clamp(1.0, u64::MAX as f64) as u64)),
            _ => None,
        })
        .min_by_key(|&(r, b)| (b, r))
}

/// The `barrier` pass: once the graph is settled, cut GPU partitions under the tightest
/// matched budget, one cut at a time (each cut changes the live values of the next).
pub struct BarrierPass;

impl Pass for BarrierPass {
    fn action(&self) -> &'static str {
        "barrier"
    }
    fn schedule(&self) -> Schedule {
        Schedule::WhenSettled
    }
    fn pending(&self, _cx: &Cx, _rule: &Rule, _node: NodeId) -> Pending {
        // Barrier work is graph-wide: see `leftovers`.
        Pending::Satisfied
    }
    fn keeps_facts(&self) -> bool {
        // A cut adds `Max(x, x)` (or `Identity(x)`) and re-points GPU readers to it.
        true
    }
    fn assumed_sizes(&self, rule: &Rule) -> Vec<(String, i64)> {
        match &rule.action {
            Action::Barrier { dims, .. } => dims.to_vec(),
            _ => Vec::new(),
        }
    }
    fn next(&self, cx: &Cx, rules: &[usize]) -> Vec<(usize, Planned)> {
        use crate::rewrite::pass::{Cause, Covered, Planned, Refusal, Step};
        let Some((ri, budget)) = tightest(cx.target, rules) else {
            return Vec::new();
        };
        let rule = &cx.target.rules[ri];
        let g = cx.graph();
        let plan = |name: String, outcome| Planned {
            covers: vec![Covered {
                node: None,
                name,
                op: String::new(),
            }],
            outcome,
            report_at: 0,
            frees: Vec::new(),
        };
        match plan_cuts(g, cx.facts(), budget, &rule.id, cx.annotation, cx.opset) {
            // The pieces are what the summary and the final check read: kept with the facts
            // until the graph changes (see `Cx::set_pieces`).
            Ok(CutPlan::Fits(pieces)) => {
                cx.set_pieces(Ok(pieces));
                Vec::new()
            }
            Ok(CutPlan::Cuts(patches)) => patches
                .into_iter()
                .map(|p| {
                    let at = p.origin.clone();
                    (ri, plan(at, Ok(vec![Step::new(p, "barrier".into())])))
                })
                .collect(),
            Err(e) => vec![(
                ri,
                plan(String::new(), Err(Refusal::new(Cause::Rejected, e))),
            )],
        }
    }
    fn leftovers(&self, cx: &Cx, rules: &[usize]) -> Vec<Leftover> {
        let Some((ri, budget)) = tightest(cx.target, rules) else {
            return Vec::new();
        };
        match cx.pieces() {
            Ok(pieces) => pieces
                .iter()
                .filter(|p| p.over(budget) && p.nodes > 1)
                .map(|p| Leftover {
                    rule: ri,
                    node: p.first.clone(),
                    reason: if p.unknown > 0 {
                        format!(
                            "a GPU piece of {} nodes from here holds {} whose work cannot be estimated (counted as over the budget {:.3e})",
                            p.nodes, p.unknown, budget as f64
                        )
                    } else {
                        format!(
                            "a GPU piece of {} nodes from here is estimated at {:.3e} work units, over the budget {:.3e}",
                            p.nodes, p.work as f64, budget as f64
                        )
                    },
                })
                .collect(),
            Err(e) => vec![Leftover {
                rule: ri,
                node: String::new(),
                reason: e.clone(),
            }],
        }
    }
    fn summarize(&self, cx: &Cx, rules: &[usize], out: &mut Summary) {
        if tightest(cx.target, rules).is_none() {
            return;
        }
        let g = cx.graph();
        out.pieces = cx.pieces().clone().unwrap_or_default();
        // The pieces count every GPU node whose work is unknown: none, no list to make.
        let any_unknown = cx
            .pieces()
            .as_ref()
            .map_or(true, |p| p.iter().any(|p| p.unknown > 0));
        let unknown = if any_unknown {
            unknown_work(g, cx.facts())
        } else {
            Vec::new()
        };
        if !unknown.is_empty() {
            let names: Vec<String> = unknown
                .iter()
                .take(3)
                .map(|&n| format!("'{}' ({})", g.node(n).name(), g.node(n).op_type))
                .collect();
            out.notes.push(format!(
                "the work of {} node(s) could not be estimated (unknown shapes, e.g. {}); each counts as over the barrier budget and runs between cuts of its own. Give sizes with --dim NAME=VALUE or --dim INPUT[AXIS]=VALUE for exact estimates",
                unknown.len(),
                names.join(", ")
            ));
        }
    }
}
