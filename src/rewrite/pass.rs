//! Passes: one per action, behind one interface. The driver (`engine`) matches the target's
//! rules, asks each match's pass for a plan, applies the patches, and repeats; it knows nothing
//! of any action's details.
//!
//! A plan is either patches (labelled with their rule) or a [`Refusal`]: a value that says why
//! the action cannot be applied to the node, which a fallback can act on.
//!
//! Adding an action: a module with a type that implements [`Pass`], and one line in
//! [`crate::rewrite::PASSES`].

use std::cell::OnceCell;
use std::collections::BTreeMap;

use crate::analysis::Sizes;
use crate::infer::Facts;
use crate::ir::{Graph, Model, NodeId};
use crate::rewrite::Patch;
use crate::rules::schema::{Rule, Target};

/// When the driver asks a pass for plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// Each match on its own, in match order, in every round (split, cast).
    EachMatch,
    /// All of one rule's matches together, after the per-match patches of the round (unfuse:
    /// layout regions convert whole; cpu: pinned regions grow).
    PerRule,
    /// Once a round changes nothing: graph-wide work, one patch at a time (barrier).
    WhenSettled,
}

/// Whether a match still asks for work (`check`'s notion of "a rule fires").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// The action would rewrite the node.
    Fires,
    /// The node already satisfies the rule (pinned already, no value of that type...).
    Satisfied,
    /// The rule refuses the node outright (`deny`).
    Denied,
}

/// Why an action cannot be applied to a node: the cause (for fallbacks to act on) and the
/// reason in words (for people).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub cause: Cause,
    pub reason: String,
}

/// The kinds of refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// No rewrite exists for this operator (e.g. no decomposition).
    NoRewrite,
    /// A fact the rewrite needs is unknown (a shape, an element type, a rank).
    UnknownFact,
    /// A weight or parameter the rewrite needs is not a constant.
    NotConstant,
    /// A value the rewrite would replace is read by name inside a body. The built-in passes
    /// no longer refuse for this (the replacement takes the name over); kept for passes that
    /// cannot do so, and for the reports' vocabulary.
    OuterScopeRead,
    /// A layout cannot be resolved (e.g. an ambiguous NCHWc block size).
    Layout,
    /// The rewrite would exceed a limit (too many pieces, an opset too old...).
    Limit,
    /// The node's configuration is not one the rewrite handles.
    Unsupported,
    /// The patch was built but the graph refused it (a broken invariant).
    Rejected,
    /// The rewrite is approximate and approximations were not allowed
    /// (`--allow-approximate`, `approximate: allow`).
    Approximate,
}

impl Cause {
    /// The cause as reports write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::NoRewrite => "no-rewrite",
            Cause::UnknownFact => "unknown-fact",
            Cause::NotConstant => "not-constant",
            Cause::OuterScopeRead => "outer-scope-read",
            Cause::Layout => "layout",
            Cause::Limit => "limit",
            Cause::Unsupported => "unsupported",
            Cause::Rejected => "rejected",
            Cause::Approximate => "approximate",
        }
    }
}

impl Refusal {
    pub fn new(cause: Cause, reason: impl Into<String>) -> Self {
        Refusal {
            cause,
            reason: reason.into(),
        }
    }
    /// A refusal whose cause is not more specific than "this configuration is not handled".
    pub fn unsupported(reason: impl Into<String>) -> Self {
        Refusal::new(Cause::Unsupported, reason)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// A node a plan covers: what the report names (`node` is `None` for graph-wide work).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covered {
    pub node: Option<NodeId>,
    pub name: String,
    pub op: String,
}

/// One patch of a plan, with what the report says of it.
#[derive(Debug, Clone)]
pub struct Step {
    pub patch: Patch,
    /// The rewritten node's name and op label (`Patch::origin` is the name).
    pub op: String,
    /// Nodes created (for pins: nodes annotated).
    pub count: usize,
    /// Where the step is reported among the batch's (plans apply in the order returned).
    pub report_at: usize,
}

impl Step {
    /// The step's exactness class (its patch's).
    pub fn exactness(&self) -> crate::rewrite::Exactness {
        self.patch.exactness
    }
    pub fn new(mut patch: Patch, op: String) -> Self {
        // A batch holds every plan until it is applied: no spare room in them.
        patch.shrink_to_fit();
        let count = patch.nodes.len();
        Step {
            patch,
            op,
            count,
            report_at: 0,
        }
    }
}

/// One plan: steps applied in order, all or none; or a refusal for the nodes it covers.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The nodes rewritten (or refused).
    pub covers: Vec<Covered>,
    pub outcome: Result<Vec<Step>, Refusal>,
    /// Where a refusal is reported among the batch's.
    pub report_at: usize,
    /// Values the rewrite may leave unread (for a pass's clean-up in [`Pass::finish`]).
    pub frees: Vec<crate::ir::ValueId>,
}

impl Planned {
    /// A plan for one node: one patch, or a refusal.
    pub fn one(g: &Graph, node: NodeId, outcome: Result<Patch, Refusal>) -> Self {
        let c = covered(g, node);
        let op = c.op.clone();
        Planned {
            covers: vec![c],
            outcome: outcome.map(|p| vec![Step::new(p, op)]),
            report_at: 0,
            frees: Vec::new(),
        }
    }
    /// Reported at `at` (and its steps too).
    pub fn at(mut self, at: usize) -> Self {
        self.report_at = at;
        if let Ok(steps) = &mut self.outcome {
            for s in steps {
                s.report_at = at;
            }
        }
        self
    }
}

/// A node as the report names it: its name and `domain::op` label.
pub fn covered(g: &Graph, n: NodeId) -> Covered {
    Covered {
        node: Some(n),
        name: g.node(n).name().to_string(),
        op: op_label(g, n),
    }
}

/// `op` for the default domain, `domain::op` otherwise.
pub fn op_label(g: &Graph, n: NodeId) -> String {
    let node = g.node(n);
    if node.domain().is_empty() {
        node.op_type.clone()
    } else {
        format!("{}::{}", node.domain(), node.op_type)
    }
}

/// Graph-wide work left for a [`Schedule::WhenSettled`] pass (what `check` reports).
#[derive(Debug, Clone, PartialEq)]
pub struct Leftover {
    pub rule: usize,
    pub node: String,
    pub reason: String,
}

/// What a pass may consult: the graph as it is now (the main graph, or a body) and the one
/// analysis of it, computed on first use. A context is made afresh after every change to the
/// graph.
pub struct Cx<'a> {
    /// The model: its opsets and IR version (and its main graph).
    pub model: &'a Model,
    /// The graph the passes rewrite: the main graph, or an `If`/`Loop`/`Scan` body.
    graph: &'a Graph,
    /// For a body: what the enclosing scopes know of the values it reads by name.
    outer: Option<&'a OuterFacts>,
    pub target: &'a Target,
    pub sizes: &'a Sizes,
    /// The `layer_ann` value pins and cuts write.
    pub annotation: &'a str,
    /// The model's default-domain opset (new nodes use its operator forms).
    pub opset: i64,
    /// The NCHWc block size of the CPU that saved the model, when the user gave it.
    pub nchwc_block: Option<i64>,
    /// The resolver of the model's external data, when the compile was given one.
    pub external: Option<&'a crate::io::ExternalData>,
    /// Bytes of float weights the unpacked MatMulNBits form may add from external data, per
    /// batch (`engine::Options::unpack_limit`).
    pub unpack_limit: u64,
    facts: OnceCell<Facts>,
    exact: OnceCell<Option<Facts>>,
    /// Per value: named by a `value_info` or graph output declaration (see [`Cx::exact_dims`]).
    declared: OnceCell<Vec<bool>>,
    /// The GPU pieces between clean cuts (see [`Cx::pieces`]).
    pieces: OnceCell<Pieces>,
}

/// The GPU pieces between clean cuts, or why they cannot be found (see [`Cx::pieces`]).
pub(crate) type Pieces = Result<Vec<crate::rewrite::barrier::Piece>, String>;

impl<'a> Cx<'a> {
    pub fn new(
        model: &'a Model,
        target: &'a Target,
        sizes: &'a Sizes,
        annotation: &'a str,
    ) -> Self {
        Cx {
            model,
            graph: &model.graph,
            outer: None,
            target,
            sizes,
            annotation,
            opset: model.opset("").unwrap_or(1),
            nchwc_block: None,
            external: None,
            unpack_limit: 0,
            facts: OnceCell::new(),
            exact: OnceCell::new(),
            declared: OnceCell::new(),
            pieces: OnceCell::new(),
        }
    }
    /// A context for `graph`, a body of the model, whose outer-scope reads have the facts of
    /// `outer` (the enclosing scopes').
    pub(crate) fn in_body(mut self, graph: &'a Graph, outer: &'a OuterFacts) -> Self {
        self.graph = graph;
        self.outer = Some(outer);
        self
    }
    /// Infer this context's graph with `opts`; `exact`: seed a body's outer-scope reads with
    /// the enclosing scopes' exact facts (else their assumed-size ones).
    pub fn infer_with(&self, opts: &crate::infer::InferOptions, exact: bool) -> Facts {
        match self.outer {
            None => crate::infer::infer_graph(self.model, self.graph, opts),
            Some(o) => {
                let seeds = if exact { &o.exact } else { &o.assumed };
                let lookup = |name: &str| seeds.get(name).cloned();
                crate::infer::infer_body(self.model, self.graph, opts, &lookup)
            }
        }
    }
    /// A context whose assumed-size facts are already known (carried over a change that left
    /// them valid; see `Facts::extend_with_new_nodes`).
    pub fn with_facts(self, facts: Facts) -> Self {
        let _ = self.facts.set(facts);
        self
    }
    /// The assumed-size facts, if they were computed.
    pub fn into_facts(self) -> Option<Facts> {
        self.facts.into_inner()
    }
    /// A context whose pieces are already known (found on this very graph, with these facts).
    pub(crate) fn with_pieces(self, pieces: Option<Pieces>) -> Self {
        if let Some(p) = pieces {
            let _ = self.pieces.set(p);
        }
        self
    }
    /// The facts and the pieces, where they were computed (see [`Cx::with_pieces`]).
    pub(crate) fn into_kept(self) -> (Option<Facts>, Option<Pieces>) {
        (self.facts.into_inner(), self.pieces.into_inner())
    }
    /// The pieces, found by a pass that had them as it planned (see [`Cx::pieces`]); kept
    /// where they were already known.
    pub(crate) fn set_pieces(&self, pieces: Pieces) {
        let _ = self.pieces.set(pieces);
    }
    pub fn graph(&self) -> &'a Graph {
        self.graph
    }
    /// The facts with the sizes assumed for open dimensions (`--dim`, the target's defaults):
    /// what matching and work estimates see.
    pub fn facts(&self) -> &Facts {
        self.facts
            .get_or_init(|| self.infer_with(&self.sizes.infer_options(), false))
    }
    /// The dims of `v` that a rewrite may bake into the output: those of the exact facts. For
    /// an initializer that is not a graph input and that no `value_info` or graph output
    /// declares, they are its own dims, read without inferring the graph a second time (the
    /// exact facts differ from the assumed ones only through declarations with open
    /// dimensions, and an initializer's dims are all known).
    pub fn exact_dims(&self, v: crate::ir::ValueId) -> Option<Vec<i64>> {
        let g = self.graph;
        let undeclared = || {
            let declared = self.declared.get_or_init(|| {
                let mut d = vec![false; g.values.len()];
                for vi in g.value_info.iter().chain(g.outputs.iter()) {
                    if let Some(slot) = d.get_mut(vi.value.index()) {
                        *slot = true;
                    }
                }
                d
            });
            !declared.get(v.index()).copied().unwrap_or(true)
        };
        let own = (g.values.get(v.index())?.origin == crate::ir::Origin::Initializer
            && undeclared())
        .then(|| g.initializer(v))
        .flatten();
        match own {
            Some(t) => crate::infer::initializer_dims(t.dims),
            None => self.exact_facts().dims(v),
        }
    }
    /// The GPU pieces between clean cuts on this graph, with the assumed-size facts
    /// ([`crate::rewrite::barrier::pieces`]), computed once: the final check's leftovers and
    /// the summary both read them.
    pub fn pieces(&self) -> &Result<Vec<crate::rewrite::barrier::Piece>, String> {
        self.pieces
            .get_or_init(|| crate::rewrite::barrier::pieces_in(self))
    }
    /// The facts with the model's own declarations only: what rewrites may bake into the
    /// output (a size assumed for an estimate must never become part of the model).
    pub fn exact_facts(&self) -> &Facts {
        let exact = self.exact.get_or_init(|| {
            (!self.sizes.is_empty()).then(|| self.infer_with(&Default::default(), true))
        });
        match exact {
            Some(f) => f,
            None => self.facts(),
        }
    }
}

/// What the enclosing scopes of a body know of the values it may read by name: with the sizes
/// assumed for open dimensions (what matching sees) and with the declarations only (what
/// rewrites may bake in). Inner names shadow outer ones.
#[derive(Debug, Clone, Default)]
pub struct OuterFacts {
    pub(crate) assumed: std::collections::HashMap<String, crate::infer::Seed>,
    pub(crate) exact: std::collections::HashMap<String, crate::infer::Seed>,
}

impl OuterFacts {
    /// What the bodies of `cx`'s graph may read: these facts, and the graph's own.
    pub fn for_bodies_of(&self, cx: &Cx) -> OuterFacts {
        let mut out = self.clone();
        let g = cx.graph();
        let known = |s: &crate::infer::Seed| s.info.dtype.is_some() || s.info.shape.is_some();
        for (i, v) in g.values.iter().enumerate() {
            let id = crate::ir::ValueId(i as u32);
            if v.origin == crate::ir::Origin::Unbound || v.origin == crate::ir::Origin::OuterScope {
                continue;
            }
            let a = cx.facts().seed(id);
            if known(&a) {
                out.assumed.insert(v.name.to_string(), a);
            }
            let e = cx.exact_facts().seed(id);
            if known(&e) {
                out.exact.insert(v.name.to_string(), e);
            }
        }
        out
    }
}

/// One action's pass.
pub trait Pass: Sync {
    /// The action's name in rule files.
    fn action(&self) -> &'static str;
    /// When the driver asks for plans.
    fn schedule(&self) -> Schedule {
        Schedule::EachMatch
    }
    /// Whether a planned match keeps other rules off its nodes for the rest of the round.
    fn claims_nodes(&self) -> bool {
        true
    }
    /// Does this match still ask for work?
    fn pending(&self, _cx: &Cx, _rule: &Rule, _node: NodeId) -> Pending {
        Pending::Fires
    }
    /// Plans for matches of `rule` (one node for [`Schedule::EachMatch`]). A match with nothing
    /// to do gets no plan.
    fn plan(&self, _cx: &Cx, _rule: usize, _nodes: &[NodeId]) -> Vec<Planned> {
        Vec::new()
    }
    /// After a batch of this pass's plans was applied (`done`: those that applied).
    fn finish(&self, _g: &mut Graph, _done: &[Planned]) {}
    /// [`Schedule::WhenSettled`]: the next plans for the matched rules of this action (none:
    /// nothing left to do). Each is planned on the graph as the ones before it leave it, and
    /// they are applied in order; the driver asks again until none are left.
    fn next(&self, _cx: &Cx, _rules: &[usize]) -> Vec<(usize, Planned)> {
        Vec::new()
    }
    /// [`Schedule::WhenSettled`]: whether this pass's patches leave the facts of every value
    /// already in the graph as they were (they add identities and re-point readers to them),
    /// so the driver may extend the facts to the new values instead of inferring again.
    fn keeps_facts(&self) -> bool {
        false
    }
    /// [`Schedule::WhenSettled`]: graph-wide work left (what `check` reports).
    fn leftovers(&self, _cx: &Cx, _rules: &[usize]) -> Vec<Leftover> {
        Vec::new()
    }
    /// Sizes this rule assumes for open dimensions when estimating (name -> size).
    fn assumed_sizes(&self, _rule: &Rule) -> Vec<(String, i64)> {
        Vec::new()
    }
    /// Notes and summaries for the report once the compile is done.
    fn summarize(&self, _cx: &Cx, _rules: &[usize], _out: &mut Summary) {}
}

/// What passes add to the report at the end.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub pieces: Vec<crate::rewrite::barrier::Piece>,
    pub notes: Vec<String>,
}

/// The rules of `target` per pass, for the matched rules (`rules`), in rule order.
pub fn rules_by_pass(target: &Target, rules: &[usize]) -> BTreeMap<&'static str, Vec<usize>> {
    let mut by: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
    for &r in rules {
        if let Some(p) = crate::rewrite::pass_for(target.rules[r].action.name()) {
            let v = by.entry(p.action()).or_default();
            if !v.contains(&r) {
                v.push(r);
            }
        }
    }
    by
}

/// A step that applied: what the report says of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    /// The rewritten node's name (the patch's origin).
    pub node: String,
    pub op: String,
    pub count: usize,
    pub report_at: usize,
    /// The values whose readers now read another (old, new).
    pub replaced: Vec<(crate::ir::ValueId, crate::ir::ValueId)>,
    /// The patch's exactness class.
    pub exactness: crate::rewrite::Exactness,
}

/// What became of one plan.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The plan, less its patches.
    pub plan: Planned,
    /// The steps that applied, or why the plan was refused or failed (the graph is then as
    /// it was before the plan).
    pub result: Result<Vec<Done>, Refusal>,
}

/// Apply plans in order, each all or nothing (a multi-step plan is undone from a copy when a
/// step fails). Later patches are re-pointed at the values earlier ones replaced: the plans
/// were built on one graph.
pub fn apply_plans(g: &mut Graph, plans: Vec<Planned>) -> Vec<Outcome> {
    let mut out = Vec::with_capacity(plans.len());
    let mut value_map: std::collections::HashMap<crate::ir::ValueId, crate::ir::ValueId> =
        Default::default();
    // Room for what the patches add, made once. A patch adds its nodes and edges before it
    // removes nodes, whose slots the next patches reuse: the room needed is the most that
    // any prefix of the patches holds at once.
    let (mut values, mut inits) = (0, 0);
    let (mut nodes, mut edges) = ((0isize, 0isize), (0isize, 0isize));
    for step in plans
        .iter()
        .filter_map(|p| p.outcome.as_ref().ok())
        .flatten()
    {
        let p = &step.patch;
        let grow = p.growth(g);
        for (t, added, removed) in [
            (&mut nodes, grow.nodes_added, grow.nodes_removed),
            (&mut edges, grow.edges_added, grow.edges_removed),
        ] {
            t.0 += added as isize;
            t.1 = t.1.max(t.0);
            t.0 -= removed as isize;
        }
        values += p.values.len();
        inits += p.initializers.len();
    }
    g.reserve(nodes.1 as usize, edges.1 as usize, values);
    crate::ir::grow_for(&mut g.initializers, inits);
    for plan in plans {
        let Planned {
            covers,
            outcome,
            report_at,
            frees,
        } = plan;
        let plan = Planned {
            covers,
            outcome: Ok(Vec::new()),
            report_at,
            frees,
        };
        let steps = match outcome {
            Ok(steps) => steps,
            Err(r) => {
                out.push(Outcome {
                    plan,
                    result: Err(r),
                });
                continue;
            }
        };
        let snapshot = (steps.len() > 1).then(|| (g.clone(), value_map.clone()));
        let mut done = Vec::with_capacity(steps.len());
        let mut failure = None;
        for step in steps {
            let mut p = step.patch;
            p.remap(&value_map);
            let origin = p.origin.clone();
            let exactness = p.exactness;
            match p.apply_with_map(g) {
                Ok((_, replaced)) => {
                    value_map.extend(replaced.iter().copied());
                    done.push(Done {
                        node: origin,
                        op: step.op,
                        count: step.count,
                        report_at: step.report_at,
                        replaced,
                        exactness,
                    });
                }
                Err(e) => {
                    failure = Some(Refusal::new(Cause::Rejected, e.0));
                    break;
                }
            }
        }
        let result = match failure {
            None => Ok(done),
            Some(r) => {
                if let Some((g0, m0)) = snapshot {
                    *g = g0;
                    value_map = m0;
                }
                // A single failed step names the patch's origin when the plan covers several.
                let mut r = r;
                if plan.covers.len() > 1 {
                    if let Some(d) = done.first() {
                        r.reason = format!("{}: {}", d.node, r.reason);
                    }
                }
                Err(r)
            }
        };
        out.push(Outcome { plan, result });
    }
    out
}

/// The sizes the target's rules assume for open dimensions (first rule wins per name).
pub fn assumed_sizes(target: &Target) -> BTreeMap<String, i64> {
    let mut out: BTreeMap<String, i64> = BTreeMap::new();
    for r in &target.rules {
        if let Some(p) = crate::rewrite::pass_for(r.action.name()) {
            for (k, v) in p.assumed_sizes(r) {
                out.entry(k).or_insert(v);
            }
        }
    }
    out
}
