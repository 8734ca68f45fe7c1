//! `barrier`: cut the GPU work into submissions short enough for the timeout a rule guards.
//! DirectML records every GPU operator into one command list until a CPU node reads a GPU value
//! back (microsoft/onnxruntime#19724: a list that runs past ~2 s on a weak GPU is a TDR), so
//! smaller ops alone do not shorten it; a node on the CPU that reads the GPU ends it.
//!
//! **By time** (`margin`, `limit_ms`: [`plan_time_cuts`]): each node's time on the target's
//! device ([`crate::timing`]), placed as the runtime will place it; the submissions as
//! [`crate::runtime::submission`] walks them (a read-back flushes the command list). Where a
//! submission would pass the limit over the margin, one no-op pinned to the CPU on one value
//! (the smallest the next node reads from the GPU node before it) ends it: whatever else is
//! live across the cut stays on the GPU, so a cut costs that one value's two crossings.
//!
//! **By work** (`budget`, the older form: [`plan_cuts`]): a *cut* before position i of the
//! topological order is clean when every value computed on the GPU before i and read on the
//! GPU at or after i passes through the CPU; each such value gets a pinned no-op and the GPU
//! readers after the cut read it instead. Pieces are the GPU work between clean cuts. Work is
//! estimated at the sizes the compile assumes; the cuts are the fewest that keep every piece
//! within the budget, placed where the values that cross hold the fewest bytes
//! ([`cut_positions`]).
//!
//! The no-op is `Max(x, x)` (exactly `x` for every number, NaN and -0 included), not
//! `Identity`: ONNX Runtime's `EliminateIdentity` optimisation removes Identity nodes before
//! nodes are placed, annotation or not, which would silently undo the cut. Types Max does not
//! take at the model's opset (bool, strings) fall back to Identity.
//!
//! Sizes are those the compile assumes (`--dim`, `--inputs`, then the target's defaults:
//! batch, spatial, sequence, past): exact where inference knows the shapes, otherwise bounded
//! from the sizes around the node ([`crate::rewrite::work::Estimates`]). A cut is made only
//! because an estimate passes the limit: a model that fits stays one piece. Shape computations
//! (`Shape`, `Size` and the small integer arithmetic on them) count as CPU work, as ONNX
//! Runtime places them: a cut never crosses them, and they are taken to end no submission.

use crate::infer::Facts;
use crate::ir::{Graph, NodeId, Origin, Text, ValueId};
use crate::rewrite::cpu::LAYER_ANN_KEY;
use crate::rewrite::pass::{Cx, Leftover, Pass, Pending, Planned, Schedule, Summary};
use crate::rewrite::work::{Estimates, NodeWork};
use crate::rewrite::{PValue, Patch};
use crate::rules::schema::{Action, BarrierLimit, Rule, Target};
use crate::runtime::submission::Role;

/// One piece of GPU work between two clean cuts (under a time limit: one submission, the GPU
/// work between two read-backs).
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// GPU nodes in the piece.
    pub nodes: usize,
    /// Estimated work (operations + bytes).
    pub work: u64,
    /// Name of the first node of the piece.
    pub first: String,
    /// Nodes whose work rests on sizes bounded from their neighbours (shapes inference did
    /// not find at the assumed sizes): estimated, not exact.
    pub bounded: usize,
    /// Estimated seconds on the target's device (launch included), under a time limit.
    pub seconds: Option<f64>,
}

impl Piece {
    /// Is the piece's estimated work over `budget`?
    pub fn over(&self, budget: u64) -> bool {
        self.work > budget
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

/// Ops that shape arithmetic is made of (a `Shape`'s dims gathered, concatenated, computed
/// with, and turned into the shape input of a Reshape, Expand, Slice...).
const SHAPE_ARITHMETIC: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "Cast",
    "Ceil",
    "Clip",
    "Concat",
    "ConstantOfShape",
    "Div",
    "Equal",
    "Expand",
    "Flatten",
    "Floor",
    "Gather",
    "GatherElements",
    "Greater",
    "GreaterOrEqual",
    "Identity",
    "Less",
    "LessOrEqual",
    "Max",
    "Min",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Range",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "Reshape",
    "Round",
    "Sign",
    "Slice",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Tile",
    "Unsqueeze",
    "Where",
];

/// Per node index: a shape computation (`Shape`/`Size`, and the small integer arithmetic on
/// their outputs: see [`SHAPE_ARITHMETIC`]). ONNX Runtime keeps these on the CPU for GPU
/// providers (their outputs feed inputs that kernels read on the CPU), so a cut never crosses
/// them: no barrier lands on a shape value, and a `Shape` of a GPU tensor does not keep that
/// tensor live.
///
/// A value is shape arithmetic when its producer is `Shape` or `Size`, or when its producer
/// is one of [`SHAPE_ARITHMETIC`], reads at least one shape value and otherwise constants, and
/// the value is small: an integer or bool tensor of at most 1,024 elements, or any tensor of
/// at most 64 (a shape cast to float to compute a scale).
fn shape_computations(
    g: &Graph,
    s: &Facts,
    e: &Estimates,
    topo: &[NodeId],
    bound: usize,
) -> Vec<bool> {
    use crate::tensor::dtype::*;
    let mut shape_node = vec![false; bound];
    let mut shape_value = vec![false; g.values.len()];
    let small = |v: ValueId| -> bool {
        let (n, _) = e.numel(v);
        match s.dtype(v) {
            Some(INT64 | INT32 | INT16 | INT8 | UINT64 | UINT32 | UINT16 | UINT8 | BOOL) => {
                n <= 1024
            }
            Some(_) => n <= 64,
            None => false,
        }
    };
    for &n in topo {
        let node = g.node(n);
        if !node.domain().is_empty() || !node.implicit_inputs().is_empty() {
            continue;
        }
        let op = node.op_type.as_str();
        let is_shape = if op == "Shape" || op == "Size" {
            true
        } else if SHAPE_ARITHMETIC.contains(&op) {
            let mut reads_shape = false;
            let inputs_ok = node.inputs.iter().flatten().all(|v| {
                let sv = shape_value.get(v.index()).copied().unwrap_or(false);
                reads_shape |= sv;
                sv || s.is_constant(*v)
            });
            inputs_ok && reads_shape && node.outputs.iter().flatten().all(|&o| small(o))
        } else {
            false
        };
        if is_shape {
            shape_node[n.index()] = true;
            for o in node.outputs.iter().flatten() {
                if let Some(x) = shape_value.get_mut(o.index()) {
                    *x = true;
                }
            }
        }
    }
    shape_node
}

/// Per node index: on the CPU (pinned, or a shape computation), and out of the GPU's work
/// (those, and `Constant` nodes).
struct Kinds {
    cpu: Vec<bool>,
    skip: Vec<bool>,
}

impl Kinds {
    fn new(g: &Graph, shape: &[bool]) -> Self {
        let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
        let mut k = Kinds {
            cpu: vec![false; bound],
            skip: vec![false; bound],
        };
        for n in g.nodes.node_indices() {
            let cpu = is_cpu(g, n) || shape.get(n.index()).copied().unwrap_or(false);
            k.cpu[n.index()] = cpu;
            k.skip[n.index()] = cpu || is_constant_node(g, n);
        }
        k
    }
    /// Not a GPU reader: a pinned node or a shape computation.
    fn cpu(&self, n: NodeId) -> bool {
        self.cpu[n.index()]
    }
    /// Not GPU work.
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
    /// Each GPU value read on the GPU after the position of its producer: (producer's
    /// position, last GPU reader's position, bytes), by producer's position.
    live: Vec<(usize, usize, u64)>,
    /// Per position: the node's estimated work (zero work for nodes out of the GPU's work).
    work: Vec<NodeWork>,
    /// Per node index: a shape computation.
    shape: Vec<bool>,
    estimates: Estimates,
}

fn layout(g: &Graph, s: &Facts) -> Result<Layout, String> {
    let topo = g
        .topo_order()
        .map_err(|_| "the graph has a cycle".to_string())?;
    let pos = crate::ir::Positions::new(&topo);
    let consumers = g.consumers();
    let estimates = Estimates::with_consumers(g, s, &topo, &consumers);
    let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
    let shape = shape_computations(g, s, &estimates, &topo, bound);
    let kinds = Kinds::new(g, &shape);
    let mut diff = vec![0i64; topo.len() + 2];
    let mut live = Vec::new();
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
        let v = ValueId(vi as u32);
        let last_gpu = consumers
            .of(v)
            .iter()
            .filter(|(c, _)| !kinds.cpu(*c))
            .filter_map(|(c, _)| pos.get(c))
            .max();
        if let Some(q) = last_gpu.filter(|&q| q > p) {
            diff[p + 1] += 1;
            diff[q + 1] -= 1;
            live.push((p, q, estimates.bytes(s, v).0));
        }
    }
    live.sort_unstable();
    let mut gpu_live = Vec::with_capacity(topo.len() + 1);
    let mut acc = 0i64;
    for d in diff.iter().take(topo.len() + 1) {
        acc += d;
        gpu_live.push(acc.max(0) as usize);
    }
    let work = topo
        .iter()
        .map(|&n| {
            if kinds.skip(n) {
                NodeWork {
                    work: 0,
                    bounded: false,
                }
            } else {
                estimates.work(g, n, s)
            }
        })
        .collect();
    Ok(Layout {
        topo,
        pos,
        consumers,
        kinds,
        gpu_live,
        live,
        work,
        shape,
        estimates,
    })
}

/// The pieces as the graph stands (existing clean cuts respected). `work` sums the estimates,
/// exact or bounded from neighbours ([`bounded_work`] lists the bounded ones).
pub fn pieces(g: &Graph, s: &Facts) -> Result<Vec<Piece>, String> {
    Ok(pieces_of(g, &layout(g, s)?))
}

fn pieces_of(g: &Graph, l: &Layout) -> Vec<Piece> {
    let mut pieces = PieceList::default();
    for (i, &n) in l.topo.iter().enumerate() {
        if i > 0 && l.gpu_live[i] == 0 {
            pieces.split();
        }
        if l.kinds.skip(n) {
            continue;
        }
        pieces.add(g, n, l.work[i]);
    }
    pieces.finish()
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
    /// A GPU node of work `w`.
    fn add(&mut self, g: &Graph, n: NodeId, w: NodeWork) {
        let cur = self.cur.get_or_insert_with(|| Piece {
            nodes: 0,
            work: 0,
            first: g.node(n).name().to_string(),
            bounded: 0,
            seconds: None,
        });
        cur.nodes += 1;
        cur.work = cur.work.saturating_add(w.work);
        cur.bounded += usize::from(w.bounded);
    }
    fn finish(mut self) -> Vec<Piece> {
        self.split();
        self.done
    }
}

/// GPU nodes whose work rests on sizes bounded from their neighbours, in topological order.
pub fn bounded_work(g: &Graph, s: &Facts) -> Result<Vec<NodeId>, String> {
    let l = layout(g, s)?;
    Ok(l.topo
        .iter()
        .zip(&l.work)
        .filter(|(&n, w)| w.bounded && !l.kinds.skip(n))
        .map(|(&n, _)| n)
        .collect())
}

/// Does any piece exceed the budget (and could a cut help, i.e. has more than one node)?
pub fn over_budget(g: &Graph, s: &Facts, budget: u64) -> Result<bool, String> {
    Ok(pieces(g, s)?.iter().any(|p| p.over(budget) && p.nodes > 1))
}

/// The patches for every cut needed, in order, or none when every piece fits.
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

/// The positions of the fewest cuts that leave every piece within `budget` (or a single GPU
/// node, which no cut can shorten), and among those, the ones whose crossing values hold the
/// fewest bytes.
///
/// The cuts are found one at a time, each as the first cut of the best plan for what follows
/// the cut before it, on the graph as that cut leaves it: the values a cut crosses are read
/// through the CPU from there on, so they no longer keep later positions from being clean
/// cuts, and they no longer cross later cuts. (So the plan is the one that planning on a
/// fresh layout after each cut would make, from one layout.)
///
/// The clean cuts split the graph into stretches, each planned alone ([`first_cut`]).
fn cut_positions(l: &Layout, budget: u64) -> Vec<usize> {
    let n = l.topo.len();
    // Prefix sums of work and of GPU nodes over the topological order.
    // (u128: a sum of u64 estimates cannot overflow it.)
    let mut work = vec![0u128; n + 1];
    let mut gpu = vec![0usize; n + 1];
    for i in 0..n {
        let skip = l.kinds.skip(l.topo[i]);
        work[i + 1] = work[i] + if skip { 0 } else { u128::from(l.work[i].work) };
        gpu[i + 1] = gpu[i] + usize::from(!skip);
    }
    let mut out = Vec::new();
    // Values computed since the last cut (`from`): live from after their producer to their
    // last GPU reader; what each cut crosses.
    let mut live = vec![0i64; n + 2];
    let mut bytes = vec![0i128; n + 2];
    let mut from = 0usize;
    loop {
        let first = l.live.partition_point(|&(p, _, _)| p < from);
        live[from..].iter_mut().for_each(|x| *x = 0);
        bytes[from..].iter_mut().for_each(|x| *x = 0);
        for &(p, q, b) in &l.live[first..] {
            live[p + 1] += 1;
            live[q + 1] -= 1;
            bytes[p + 1] += i128::from(b);
            bytes[q + 1] -= i128::from(b);
        }
        for i in from + 1..=n {
            live[i] += live[i - 1];
            bytes[i] += bytes[i - 1];
        }
        let crossing: Vec<u64> = bytes[..=n]
            .iter()
            .map(|&b| u64::try_from(b.max(0)).unwrap_or(u64::MAX))
            .collect();
        let mut s = from;
        let mut cut = None;
        while s < n && cut.is_none() {
            let mut e = s + 1;
            while e < n && live[e] > 0 {
                e += 1;
            }
            cut = first_cut(&crossing, budget, &work, &gpu, s, e);
            s = e;
        }
        match cut {
            Some(c) => {
                out.push(c);
                from = c;
            }
            None => return out,
        }
    }
}

/// The first cut of the best plan of one stretch `[s, e)` between clean cuts, or none when
/// the stretch fits as it is.
///
/// `best[b]` is the best plan of `[s, b)` that ends with a cut before `b`: the fewest cuts,
/// then the fewest bytes crossing them (`crossing[b]` for a cut before `b`). A piece `[j, b)`
/// may follow when its work is within the budget or it holds at most one GPU node; both hold
/// for every `j` from some `low(b)` up to `b - 1`, and `low` never moves back as `b` grows, so
/// the best `j` is a sliding-window minimum (a queue of candidates whose plans get better
/// towards its front; of equal plans, the later `j` is kept): linear in the stretch's length.
fn first_cut(
    crossing: &[u64],
    budget: u64,
    work: &[u128],
    gpu: &[usize],
    s: usize,
    e: usize,
) -> Option<usize> {
    let budget = u128::from(budget);
    if work[e] - work[s] <= budget || gpu[e] - gpu[s] <= 1 {
        return None;
    }
    let len = e - s + 1;
    let mut best: Vec<(usize, u64)> = vec![(usize::MAX, u64::MAX); len];
    // `from[b]`: where the last piece of `best[b]` starts.
    let mut from = vec![usize::MAX; len];
    best[0] = (0, 0);
    let mut queue: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
    let (mut low_w, mut low_g) = (s, s);
    for b in s + 1..=e {
        // The piece [b - 1, b) always fits: b - 1 joins the candidates.
        let j = b - 1;
        while queue.back().is_some_and(|&k| best[k - s] >= best[j - s]) {
            queue.pop_back();
        }
        queue.push_back(j);
        while work[b] - work[low_w] > budget {
            low_w += 1;
        }
        while gpu[b] - gpu[low_g] > 1 {
            low_g += 1;
        }
        let low = low_w.min(low_g);
        while queue.front().is_some_and(|&k| k < low) {
            queue.pop_front();
        }
        let &k = queue.front()?;
        let (c, bytes) = best[k - s];
        best[b - s] = if b == e {
            (c, bytes)
        } else {
            (c + 1, bytes.saturating_add(crossing[b]))
        };
        from[b - s] = k;
    }
    // Back from the end to the first cut.
    let mut at = e;
    let mut first = None;
    while at > s {
        let k = from[at - s];
        if k == usize::MAX || k <= s {
            break;
        }
        first = Some(k);
        at = k;
    }
    first
}

/// [`cuts`], and the pieces when no cut is needed.
pub fn plan_cuts(
    g: &Graph,
    s: &Facts,
    budget: u64,
    rule: &str,
    annotation: &str,
    opset: i64,
) -> Result<CutPlan, String> {
    let l = layout(g, s)?;
    let at = cut_positions(&l, budget);
    if at.is_empty() {
        return Ok(CutPlan::Fits(pieces_of(g, &l)));
    }
    // Where each node is in the write order, when that is not the topological order (a file
    // whose nodes are not sorted): a cut's no-ops must be written before the readers they
    // take over (see `cut_before`).
    let written = (l.topo != g.order).then(|| crate::ir::Positions::new(&g.order));
    let mut out = Vec::with_capacity(at.len());
    let mut from = 0usize;
    for i in at {
        out.push(cut_before(
            g,
            &l,
            from,
            i,
            rule,
            annotation,
            s,
            opset,
            written.as_ref(),
        ));
        from = i;
    }
    Ok(CutPlan::Cuts(out))
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
/// (values computed before `from` were cut off at `from` already).
///
/// The no-ops are written where the node at `i` is, or, when the write order is not the
/// topological one (`written`: a file whose nodes are not sorted), before the first of the
/// readers they take over in the write order: a reader re-pointed to a value whose producer
/// comes after it in the file is a read before the write, which nothing may save.
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
    written: Option<&crate::ir::Positions>,
) -> Patch {
    let consumers = &l.consumers;
    let at = l.topo[i];
    let mut p = Patch::new(rule, g.node(at).name(), Some(at));
    let mut crossing: Vec<ValueId> = Vec::new();
    for &n in &l.topo[from..i] {
        if l.kinds.skip(n) {
            continue;
        }
        for v in g.node(n).outputs.iter().flatten() {
            let read_later = consumers
                .of(*v)
                .iter()
                .filter(|(c, _)| !l.kinds.cpu(*c))
                .filter_map(|(c, _)| l.pos.get(c))
                .any(|q| q >= i);
            if read_later {
                crossing.push(*v);
            }
        }
    }
    for v in crossing {
        let out = push_no_op(&mut p, v, s, opset, annotation);
        for (c, slot) in consumers.of(v) {
            let later = l.pos.get(c).is_some_and(|q| q >= i);
            if later && !l.kinds.cpu(*c) && *slot != crate::ir::IMPLICIT_SLOT {
                p.repoint.push((*c, *slot as usize, out));
            }
        }
    }
    if let Some(w) = written {
        let first = std::iter::once(at)
            .chain(p.repoint.iter().map(|(c, _, _)| *c))
            .filter_map(|n| w.get(&n).map(|q| (q, n)))
            .min();
        if let Some((_, n)) = first {
            p.anchor = Some(n);
        }
    }
    p
}

// ---------------------------------------------------------------------------------------------
// Barriers placed by time.

/// A time limit resolved against a target: each submission's estimated time (launch
/// included) stays within `limit_s / margin`.
#[derive(Debug, Clone)]
pub struct TimeBudget {
    /// The limit the rule guards (the device's timeout, or the rule's `limit_ms`), seconds.
    pub limit_s: f64,
    pub margin: f64,
    /// The device the estimates assume.
    pub device: crate::timing::DeviceModel,
}

impl TimeBudget {
    /// The most one submission may take, seconds.
    pub fn per_submission_s(&self) -> f64 {
        self.limit_s / self.margin
    }
    /// The most one submission's nodes may take (the launch overhead set aside).
    fn nodes_s(&self) -> f64 {
        (self.per_submission_s() - self.device.launch_s).max(0.0)
    }
}

/// The time budget of a `margin` rule on `target`: its `limit_ms`, else the device's timeout.
pub fn time_budget(
    target: &Target,
    margin: f64,
    limit_ms: Option<f64>,
) -> Result<TimeBudget, String> {
    if target.device.is_empty() {
        return Err(format!(
            "target '{}' has no `device:` section: a barrier by time needs the device model the estimates assume",
            target.name
        ));
    }
    let device = crate::timing::DeviceModel::from_spec(&target.device)
        .map_err(|e| format!("target '{}': {e}", target.name))?;
    let limit_s = match (limit_ms, device.timeout_s) {
        (Some(l), _) => l / 1e3,
        (None, Some(t)) => t,
        (None, None) => {
            return Err(format!(
            "target '{}': its device has no `timeout_ms` and the barrier rule gives no `limit_ms`",
            target.name
        ))
        }
    };
    Ok(TimeBudget {
        limit_s,
        margin,
        device,
    })
}

/// One cut: a CPU no-op on `value`, written before the node at position `at` of the layout:
/// its read-back of `value` ends the submission before `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OneCut {
    at: usize,
    value: ValueId,
}

/// The layout under a time limit: per position the node's seconds on the device, and each
/// node's role to the command lists ([`crate::runtime::submission`]).
struct TimeLayout {
    l: Layout,
    seconds: Vec<f64>,
    roles: Vec<Role>,
    /// Per position: the producers of what the node reads.
    producers: Vec<Vec<NodeId>>,
    bound: usize,
    /// Values ONNX Runtime keeps on the CPU by its own choice (a `Shape`/`Size` output and the
    /// arithmetic its fallback walk puts beside it: [`crate::rewrite::cpu::runtime_cpu_values`]),
    /// and every int64 value.
    /// No cut sits on one: a no-op there reads no GPU value, so it ends no submission, and
    /// onnxruntime-web 1.30 cannot create a session where a `layer_ann` pin reads such a value
    /// (`std::bad_alloc`, docs/hazards.md "layer_ann pins reading Shape values").
    runtime_cpu: crate::ir::hash::FastSet<ValueId>,
}

fn time_layout(
    model: &crate::ir::Model,
    g: &Graph,
    s: &Facts,
    target: &Target,
    annotation: &str,
    dev: &crate::timing::DeviceModel,
) -> Result<TimeLayout, String> {
    let mut l = layout(g, s)?;
    let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
    let pinned: crate::ir::hash::FastSet<NodeId> =
        l.topo.iter().copied().filter(|&n| is_cpu(g, n)).collect();
    let mut runtime_cpu = crate::rewrite::cpu::runtime_cpu_values(g, &pinned);
    // int64 values are shapes, indices and positions: onnxruntime-web has no WebGPU kernel
    // for most int64 arithmetic (a Concat of shape parts runs on its CPU), and a pin reading
    // one fails there too; the values are a few integers, no cut worth making.
    runtime_cpu.extend(
        (0..g.values.len())
            .map(|i| ValueId(i as u32))
            .filter(|&v| s.dtype(v) == Some(crate::tensor::dtype::INT64)),
    );
    // Where the runtime puts each node, where the target names its provider: a node it moves
    // to the CPU by itself ends a submission as a pinned one does.
    let placed = crate::cost::profile_of(target)
        .map(|p| crate::runtime::placement::predict_graph(model, g, s, p, annotation));
    let mut roles = vec![Role::None; bound];
    for &n in &l.topo {
        let shape = l.shape.get(n.index()).copied().unwrap_or(false);
        let side = placed.as_ref().map(|p| p.side(n));
        let role = if is_constant_node(g, n) || side == Some(crate::runtime::placement::Side::None)
        {
            Role::None
        } else if shape {
            Role::Inert
        } else if is_cpu(g, n) || side == Some(crate::runtime::placement::Side::Cpu) {
            Role::Cpu
        } else {
            Role::Gpu
        };
        roles[n.index()] = role;
        if role != Role::Gpu {
            l.kinds.cpu[n.index()] |= role == Role::Cpu;
            l.kinds.skip[n.index()] = true;
        }
    }
    let seconds = l
        .topo
        .iter()
        .map(|&n| {
            if roles[n.index()] == Role::Gpu {
                crate::timing::node_time(g, n, s, &l.estimates, dev).seconds
            } else {
                0.0
            }
        })
        .collect();
    let producers = l
        .topo
        .iter()
        .map(|&n| crate::runtime::submission::producers(g, n))
        .collect();
    Ok(TimeLayout {
        l,
        seconds,
        roles,
        producers,
        bound,
        runtime_cpu,
    })
}

/// What one walk of the command lists found.
enum Walk {
    /// Adding the node at position `at` made the submission that starts at position `start`
    /// run past the budget.
    Over { at: usize, start: usize },
    /// Every submission fits: the pieces.
    Fits(Vec<Piece>),
}

/// Walk the layout's order with `cuts` made (a read-back before each cut's position), stopping
/// at the first submission that runs past `budget_s` with more than one node (no cut shortens
/// a single node).
fn walk(g: &Graph, t: &TimeLayout, cuts: &[OneCut], budget_s: f64, launch_s: f64) -> Walk {
    let mut on_gpu = vec![false; t.bound];
    let mut pieces = Vec::new();
    let mut cur: Option<(usize, Piece)> = None;
    let mut secs = 0f64;
    let mut next = 0usize;
    let end = |cur: &mut Option<(usize, Piece)>, secs: &mut f64, pieces: &mut Vec<Piece>| {
        if let Some((_, mut p)) = cur.take() {
            p.seconds = Some(*secs + launch_s);
            pieces.push(p);
        }
        *secs = 0.0;
    };
    for (i, &n) in t.l.topo.iter().enumerate() {
        let mut cut_here = false;
        while next < cuts.len() && cuts[next].at <= i {
            cut_here |= cuts[next].at == i;
            next += 1;
        }
        if cut_here {
            end(&mut cur, &mut secs, &mut pieces);
        }
        match t.roles[n.index()] {
            Role::Gpu => {
                on_gpu[n.index()] = true;
                let (start, p) = cur.get_or_insert_with(|| {
                    (
                        i,
                        Piece {
                            nodes: 0,
                            work: 0,
                            first: g.node(n).name().to_string(),
                            bounded: 0,
                            seconds: None,
                        },
                    )
                });
                p.nodes += 1;
                p.work = p.work.saturating_add(t.l.work[i].work);
                p.bounded += usize::from(t.l.work[i].bounded);
                secs += t.seconds[i];
                if secs > budget_s && p.nodes > 1 {
                    return Walk::Over {
                        at: i,
                        start: *start,
                    };
                }
            }
            Role::Cpu => {
                if t.producers[i].iter().any(|q| on_gpu[q.index()]) {
                    end(&mut cur, &mut secs, &mut pieces);
                }
            }
            Role::None | Role::Inert => {}
        }
    }
    end(&mut cur, &mut secs, &mut pieces);
    Walk::Fits(pieces)
}

/// Where to cut the submission from position `start` that the node at position `at` made run
/// past the budget: before one of its GPU nodes `j`, on the smallest value `j` reads from the
/// GPU node just before it (so the no-op's read-back comes after everything before `j` in any
/// order the runtime may pick for that chain), where what follows the cut up to `at` fits the
/// budget; of those, the cut whose value holds the fewest bytes, the later one on a tie. When
/// no cut leaves a fitting remainder (one node over the budget), the latest possible cut.
fn choose_cut(
    g: &Graph,
    s: &Facts,
    t: &TimeLayout,
    at: usize,
    start: usize,
    budget_s: f64,
) -> Option<OneCut> {
    let gpu: Vec<usize> = (start..=at)
        .filter(|&i| t.roles[t.l.topo[i].index()] == Role::Gpu)
        .collect();
    let mut suffix = 0f64;
    let mut best: Option<(u64, OneCut)> = None;
    let mut latest: Option<OneCut> = None;
    for k in (1..gpu.len()).rev() {
        let j = gpu[k];
        suffix += t.seconds[j];
        let before = t.l.topo[gpu[k - 1]];
        let n = t.l.topo[j];
        // The smallest value `n` reads from the GPU node before it.
        let mut pick: Option<(u64, ValueId)> = None;
        for v in g.node(n).inputs.iter().flatten() {
            match g.values[v.index()].origin {
                Origin::Node { node, .. } if node == before => {}
                _ => continue,
            }
            if t.runtime_cpu.contains(v) {
                continue;
            }
            let (b, _) = t.l.estimates.bytes(s, *v);
            if pick.is_none_or(|(pb, _)| b < pb) {
                pick = Some((b, *v));
            }
        }
        let Some((bytes, value)) = pick else { continue };
        let cut = OneCut { at: j, value };
        latest.get_or_insert(cut);
        if suffix > budget_s {
            // Earlier cuts leave a longer remainder: none of them fits either.
            break;
        }
        if best.is_none_or(|(b, _)| bytes < b) {
            best = Some((bytes, cut));
        }
    }
    best.map(|(_, c)| c).or(latest)
}

/// The cuts that keep every submission within the time budget, found one at a time (each walk
/// stops at the first submission over the budget; the cut is placed in it, and the walk starts
/// again), or the pieces when none is needed.
#[allow(clippy::too_many_arguments)]
pub fn plan_time_cuts(
    model: &crate::ir::Model,
    g: &Graph,
    s: &Facts,
    target: &Target,
    budget: &TimeBudget,
    rule: &str,
    annotation: &str,
    opset: i64,
) -> Result<CutPlan, String> {
    let t = time_layout(model, g, s, target, annotation, &budget.device)?;
    let nodes_s = budget.nodes_s();
    let launch = budget.device.launch_s;
    let mut cuts: Vec<OneCut> = Vec::new();
    // Each cut is at a new position (a repeated one is refused above): the loop ends; the
    // bound is a guard.
    let limit = t.l.topo.len().saturating_mul(4) + 16;
    for _ in 0..limit {
        match walk(g, &t, &cuts, nodes_s, launch) {
            Walk::Fits(pieces) => {
                if cuts.is_empty() {
                    return Ok(CutPlan::Fits(pieces));
                }
                return Ok(CutPlan::Cuts(one_value_patches(
                    g, &t.l, &cuts, rule, annotation, s, opset,
                )));
            }
            Walk::Over { at, start } => {
                let Some(c) = choose_cut(g, s, &t, at, start, nodes_s) else {
                    return Err(format!(
                        "no cut keeps the GPU submission at '{}' under {}: none of its nodes reads the GPU node before it",
                        g.node(t.l.topo[start]).name(),
                        crate::timing::ms_text(budget.per_submission_s())
                    ));
                };
                if cuts.iter().any(|x| x.at == c.at) {
                    return Err(format!(
                        "the GPU node '{}' alone is over {}",
                        g.node(t.l.topo[c.at]).name(),
                        crate::timing::ms_text(budget.per_submission_s())
                    ));
                }
                let i = cuts.partition_point(|x| (x.at, x.value.index()) < (c.at, c.value.index()));
                cuts.insert(i, c);
            }
        }
    }
    Err("the barrier cuts did not settle".into())
}

/// The patches of `cuts`: per cut, one CPU no-op on its value, read by the value's GPU readers
/// at or after the cut instead.
fn one_value_patches(
    g: &Graph,
    l: &Layout,
    cuts: &[OneCut],
    rule: &str,
    annotation: &str,
    s: &Facts,
    opset: i64,
) -> Vec<Patch> {
    let written = (l.topo != g.order).then(|| crate::ir::Positions::new(&g.order));
    let mut out: Vec<Patch> = Vec::with_capacity(cuts.len());
    for c in cuts {
        let at = l.topo[c.at];
        let mut p = Patch::new(rule, g.node(at).name(), Some(at));
        let v = c.value;
        let out_v = push_no_op(&mut p, v, s, opset, annotation);
        // Readers at or after the cut, up to the next cut on the same value.
        let until = cuts
            .iter()
            .filter(|o| o.value == v && o.at > c.at)
            .map(|o| o.at)
            .min()
            .unwrap_or(usize::MAX);
        for (r, slot) in l.consumers.of(v) {
            let q = l.pos.get(r);
            let later = q.is_some_and(|q| q >= c.at && q < until);
            if later && !l.kinds.cpu(*r) && *slot != crate::ir::IMPLICIT_SLOT {
                p.repoint.push((*r, *slot as usize, out_v));
            }
        }
        if let Some(w) = &written {
            let first = std::iter::once(at)
                .chain(p.repoint.iter().map(|(c, _, _)| *c))
                .filter_map(|n| w.get(&n).map(|q| (q, n)))
                .min();
            if let Some((_, n)) = first {
                p.anchor = Some(n);
            }
        }
        out.push(p);
    }
    out
}

/// What a barrier by time assumed, and how its cuts would change with the size: the limit,
/// the margin, the sizes taken for open dims, and the longest submission against the budget.
fn time_note(cx: &Cx, b: &TimeBudget) -> String {
    let longest = cx
        .pieces()
        .as_ref()
        .ok()
        .and_then(|p| {
            p.iter()
                .filter_map(|p| p.seconds)
                .max_by(|a, b| a.total_cmp(b))
        })
        .unwrap_or(0.0);
    let per = b.per_submission_s();
    let mut s = format!(
        "barrier by time: each GPU submission within {} (the {} limit over the margin {}) on {}; longest {} ({:.0}% of it)",
        crate::timing::ms_text(per),
        crate::timing::ms_text(b.limit_s),
        b.margin,
        b.device.name,
        crate::timing::ms_text(longest),
        100.0 * longest / per
    );
    let open = cx.sizes.assumed_text();
    if !open.is_empty() {
        s.push_str(&format!(
            "; at the assumed sizes {open} (--dim NAME=VALUE sets them)"
        ));
        if let Some((k, sizes)) = largest_fitting(cx, b) {
            if k >= LARGEST_FACTOR {
                s.push_str(&format!(
                    "; at {LARGEST_FACTOR}x those sizes ({}) every submission still fits",
                    sizes.assumed_text()
                ));
            } else {
                s.push_str(&format!(
                    "; every submission fits with these cuts up to {k:.2}x those sizes ({}), no further",
                    sizes.assumed_text()
                ));
            }
        }
    }
    s
}

/// The largest factor [`largest_fitting`] tries.
const LARGEST_FACTOR: f64 = 8.0;

/// The assumed sizes above 1 (a batch of 1 stays 1) scaled by `k`.
fn scaled(sizes: &crate::analysis::Sizes, k: f64) -> crate::analysis::Sizes {
    let f = |v: i64| {
        if v > 1 {
            ((v as f64 * k).round() as i64).max(1)
        } else {
            v
        }
    };
    crate::analysis::Sizes {
        named: sizes
            .named
            .iter()
            .map(|(n, v)| (n.clone(), f(*v)))
            .collect(),
        positional: sizes
            .positional
            .iter()
            .map(|&(i, a, v)| (i, a, f(v)))
            .collect(),
    }
}

/// How far the assumed sizes (those above 1) can grow with every submission of the main graph,
/// as it stands, still within the budget: the largest factor found by halving between 1 and
/// [`LARGEST_FACTOR`] (to 1/64), with its sizes; `None` in a body, without sizes to scale, or
/// when the graph does not fit at the assumed sizes.
fn largest_fitting(cx: &Cx, b: &TimeBudget) -> Option<(f64, crate::analysis::Sizes)> {
    if !std::ptr::eq(cx.graph(), &cx.model.graph) {
        return None;
    }
    let fits = |k: f64| -> Option<bool> {
        let facts = scaled(cx.sizes, k).infer(cx.model);
        let t = time_layout(
            cx.model,
            &cx.model.graph,
            &facts,
            cx.target,
            cx.annotation,
            &b.device,
        )
        .ok()?;
        match walk(&cx.model.graph, &t, &[], b.nodes_s(), b.device.launch_s) {
            Walk::Fits(_) => Some(true),
            Walk::Over { .. } => Some(false),
        }
    };
    if scaled(cx.sizes, 2.0) == *cx.sizes || !fits(1.0)? {
        return None;
    }
    if fits(LARGEST_FACTOR)? {
        return Some((LARGEST_FACTOR, scaled(cx.sizes, LARGEST_FACTOR)));
    }
    let (mut lo, mut hi) = (1.0f64, LARGEST_FACTOR);
    while hi - lo > 1.0 / 64.0 {
        let mid = (lo + hi) / 2.0;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some((lo, scaled(cx.sizes, lo)))
}

/// Says why a piece is over a barrier's limit (`None`: it is within it).
type OverLimit = Box<dyn Fn(&Piece) -> Option<String>>;

/// The barrier rule a pass follows: a time rule when there is one (the smallest time budget),
/// else the smallest work budget; ties go to the first rule.
enum Tightest {
    Work(usize, u64),
    Time(usize, Result<TimeBudget, String>),
}

fn tightest_rule(target: &Target, rules: &[usize]) -> Option<Tightest> {
    let mut time: Option<(usize, Result<TimeBudget, String>)> = None;
    for &r in rules {
        if let Action::Barrier {
            limit: BarrierLimit::Time { margin, limit_ms },
            ..
        } = &target.rules[r].action
        {
            let b = time_budget(target, *margin, *limit_ms);
            let better = match (&time, &b) {
                (None, _) => true,
                (Some((_, Ok(old))), Ok(new)) => new.per_submission_s() < old.per_submission_s(),
                (Some((_, Ok(_))), Err(_)) => true,
                _ => false,
            };
            if better {
                time = Some((r, b));
            }
        }
    }
    if let Some((r, b)) = time {
        return Some(Tightest::Time(r, b));
    }
    tightest(target, rules).map(|(r, b)| Tightest::Work(r, b))
}

/// The pieces of `cx`'s graph as the target's barrier rules see them: DirectML's submissions
/// with their estimated times when the target has a barrier by time, else the pieces between
/// clean cuts ([`pieces`]).
pub(crate) fn pieces_in(cx: &Cx) -> Result<Vec<Piece>, String> {
    let time = cx.target.rules.iter().find_map(|r| match &r.action {
        Action::Barrier {
            limit: BarrierLimit::Time { margin, limit_ms },
            ..
        } => Some((*margin, *limit_ms)),
        _ => None,
    });
    let g = cx.graph();
    match time {
        None => pieces(g, cx.facts()),
        Some((margin, limit_ms)) => {
            let b = time_budget(cx.target, margin, limit_ms)?;
            let t = time_layout(cx.model, g, cx.facts(), cx.target, cx.annotation, &b.device)?;
            match walk(g, &t, &[], f64::INFINITY, b.device.launch_s) {
                Walk::Fits(p) => Ok(p),
                Walk::Over { .. } => Err("an unbounded walk found a piece over its bound".into()),
            }
        }
    }
}

/// Adds the cut's no-op on `v` to `p`, pinned to the CPU: `Max(v, v)`, or `Identity` for a type
/// Max does not take at `opset` (see the module doc). Returns its output.
fn push_no_op(p: &mut Patch, v: ValueId, s: &Facts, opset: i64, annotation: &str) -> PValue {
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
    out
}

/// The smallest budget among the barrier rules in `rules`, with its rule (ties: the first).
fn tightest(target: &Target, rules: &[usize]) -> Option<(usize, u64)> {
    rules
        .iter()
        .filter_map(|&r| match &target.rules[r].action {
            Action::Barrier {
                limit: BarrierLimit::Work(budget),
                ..
            } => Some((r, budget.clamp(1.0, u64::MAX as f64) as u64)),
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
            Action::Barrier { dims, .. } => {
                let mut out = dims.to_vec();
                // A sequence and a past when the rule gives none (see `analysis::DEFAULT_SEQ`).
                for (k, v) in [
                    ("seq", crate::analysis::DEFAULT_SEQ),
                    ("past", crate::analysis::DEFAULT_PAST),
                ] {
                    if !out.iter().any(|(name, _)| name == k) {
                        out.push((k.to_string(), v));
                    }
                }
                out
            }
            _ => Vec::new(),
        }
    }
    fn next(&self, cx: &Cx, rules: &[usize]) -> Vec<(usize, Planned)> {
        use crate::rewrite::pass::{Cause, Covered, Planned, Refusal, Step};
        let Some(tightest) = tightest_rule(cx.target, rules) else {
            return Vec::new();
        };
        let ri = match &tightest {
            Tightest::Work(r, _) | Tightest::Time(r, _) => *r,
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
        let planned = match &tightest {
            Tightest::Work(_, budget) => {
                plan_cuts(g, cx.facts(), *budget, &rule.id, cx.annotation, cx.opset)
            }
            Tightest::Time(_, Ok(budget)) => plan_time_cuts(
                cx.model,
                g,
                cx.facts(),
                cx.target,
                budget,
                &rule.id,
                cx.annotation,
                cx.opset,
            ),
            Tightest::Time(_, Err(e)) => Err(e.clone()),
        };
        match planned {
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
        let Some(tightest) = tightest_rule(cx.target, rules) else {
            return Vec::new();
        };
        let (ri, over): (usize, OverLimit) = match tightest {
            Tightest::Work(ri, budget) => (
                ri,
                Box::new(move |p: &Piece| {
                    p.over(budget).then(|| {
                        format!(
                            "a GPU piece of {} nodes from here is estimated at {:.3e} work units, over the budget {:.3e}",
                            p.nodes, p.work as f64, budget as f64
                        )
                    })
                }),
            ),
            Tightest::Time(ri, Ok(b)) => (
                ri,
                Box::new(move |p: &Piece| {
                    let t = p.seconds.unwrap_or(0.0);
                    (t > b.per_submission_s()).then(|| {
                        format!(
                            "a GPU submission of {} nodes from here is estimated at {}, over {} (the limit {} over the margin {})",
                            p.nodes,
                            crate::timing::ms_text(t),
                            crate::timing::ms_text(b.per_submission_s()),
                            crate::timing::ms_text(b.limit_s),
                            b.margin
                        )
                    })
                }),
            ),
            Tightest::Time(ri, Err(e)) => {
                return vec![Leftover {
                    rule: ri,
                    node: String::new(),
                    reason: e,
                }]
            }
        };
        match cx.pieces() {
            Ok(pieces) => pieces
                .iter()
                .filter(|p| p.nodes > 1)
                .filter_map(|p| {
                    over(p).map(|reason| Leftover {
                        rule: ri,
                        node: p.first.clone(),
                        reason,
                    })
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
        let Some(tightest) = tightest_rule(cx.target, rules) else {
            return;
        };
        if let Tightest::Time(_, Ok(b)) = &tightest {
            out.notes.push(time_note(cx, b));
        }
        let g = cx.graph();
        out.pieces = cx.pieces().clone().unwrap_or_default();
        // The pieces count the GPU nodes whose work was bounded: none, no list to make.
        let any_bounded = out.pieces.iter().any(|p| p.bounded > 0);
        let bounded = if any_bounded {
            bounded_work(g, cx.facts()).unwrap_or_default()
        } else {
            Vec::new()
        };
        if !bounded.is_empty() {
            let names: Vec<String> = bounded
                .iter()
                .take(5)
                .map(|&n| format!("'{}' ({})", g.node(n).name(), g.node(n).op_type))
                .collect();
            let more = bounded.len().saturating_sub(names.len());
            out.notes.push(format!(
                "the work of {} node(s) is estimated from the sizes around them (their shapes are unknown at the assumed sizes: {}{}); give sizes with --dim NAME=VALUE or --dim INPUT[AXIS]=VALUE for exact estimates",
                bounded.len(),
                names.join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            ));
        }
    }
}

/// DirectML's submissions of `g` ([`crate::runtime::submission`]), the nodes placed by
/// `on_gpu` (`Constant` nodes on neither side): per node index, its submission's number, `None`
/// off the GPU. Shape computations on the CPU end nothing, as the barrier's planning assumes.
pub fn submissions_of(
    g: &Graph,
    s: &Facts,
    on_gpu: &dyn Fn(NodeId) -> bool,
) -> Result<Vec<Option<usize>>, String> {
    let topo = g
        .topo_order()
        .map_err(|_| "the graph has a cycle".to_string())?;
    let consumers = g.consumers();
    let estimates = Estimates::with_consumers(g, s, &topo, &consumers);
    let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
    let shape = shape_computations(g, s, &estimates, &topo, bound);
    let role = |n: NodeId| {
        if is_constant_node(g, n) {
            Role::None
        } else if on_gpu(n) {
            Role::Gpu
        } else if shape.get(n.index()).copied().unwrap_or(false) {
            Role::Inert
        } else {
            Role::Cpu
        }
    };
    Ok(crate::runtime::submission::submissions(g, &topo, &role))
}
