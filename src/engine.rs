//! The compiler's driver. One round: analyse (`infer`, through [`Cx`]), match the target's
//! rules, ask each match's pass for a plan ([`crate::rewrite::pass`]), apply the patches.
//! Rounds repeat until nothing changes (bounded); then the passes that work on the settled
//! graph (barrier cuts) run, and finally `check` says what still fires.
//!
//! The driver knows no action: a pass says when it runs ([`Schedule`]), whether a match still
//! asks for work ([`Pending`]), and what to do ([`Planned`]: patches or a [`Refusal`]). To add
//! an action, write a pass and add it to [`crate::rewrite::pass::PASSES`].
//!
//! `check` and `compile` share one notion of "a rule fires": a match whose pass says
//! [`Pending::Fires`] or [`Pending::Denied`], plus the graph-wide leftovers of settled passes.

use std::collections::{BTreeMap, HashSet};

use crate::analysis::Sizes;
use crate::ir::{Graph, Model, NodeId, ValueId};
use crate::rewrite::barrier;
use crate::rewrite::cpu::{DEFAULT_ANNOTATION, LAYER_ANN_KEY};
use crate::rewrite::pass::{
    apply_plans, assumed_sizes, rules_by_pass, Cause, Cx, Pending, Planned, Schedule, Summary,
};
use crate::rewrite::{pass_for, PASSES};
use crate::rules::matcher::{Match, Matcher, Opsets};
use crate::rules::schema::Target;

/// How to compile.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sizes for symbolic dims (`--dim NAME=VALUE`); they win over rule defaults.
    pub dims: BTreeMap<String, i64>,
    /// The `layer_ann` value written by `cpu` and `barrier`.
    pub annotation: String,
    /// Upper bound on match-and-rewrite rounds.
    pub max_iterations: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dims: BTreeMap::new(),
            annotation: DEFAULT_ANNOTATION.to_string(),
            max_iterations: 32,
        }
    }
}

/// Why a finding is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// The rule would rewrite this node.
    Fires,
    /// The rule says no safe rewrite exists (`deny`).
    Denied,
    /// The rule's action cannot be applied to this node (the reason says why).
    Unsupported,
    /// A GPU piece's estimated work is over the barrier budget.
    OverBudget,
}

impl FindingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::Fires => "fires",
            FindingKind::Denied => "denied",
            FindingKind::Unsupported => "unsupported",
            FindingKind::OverBudget => "over-budget",
        }
    }
}

/// One rule firing on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub node: String,
    pub op: String,
    pub rule: String,
    pub action: String,
    pub why: String,
    pub evidence: Vec<String>,
    pub kind: FindingKind,
    pub reason: Option<String>,
}

/// One rewrite that was applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub rule: String,
    pub action: String,
    pub node: String,
    pub op: String,
    /// Nodes created (for `cpu`: nodes annotated).
    pub nodes: usize,
}

/// What a compile did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub target: String,
    pub applied: Vec<Applied>,
    /// Findings left after the last round (denied, unsupported, or not converged).
    pub remaining: Vec<Finding>,
    pub iterations: usize,
    /// GPU pieces between clean cuts, with their estimated work, when a barrier rule is active.
    pub pieces: Vec<barrier::Piece>,
    /// Nodes carrying the CPU annotation in the output.
    pub pinned: Vec<String>,
    pub annotation: String,
    /// Warnings that do not block the output (e.g. work estimates missing for some nodes).
    pub notes: Vec<String>,
}

/// Sizes assumed for the open dimensions of `model`'s inputs, by name (`--dim` first, then
/// the target's defaults).
pub fn dim_sizes(model: &Model, target: &Target, opts: &Options) -> BTreeMap<String, i64> {
    sizes(model, target, opts).named
}

/// The sizes assumed for `model`'s open dimensions: `--dim`, then the target's defaults.
fn sizes(model: &Model, target: &Target, opts: &Options) -> Sizes {
    Sizes::for_model(model, &opts.dims, &assumed_sizes(target))
}

fn finding(cx: &Cx, m: &Match, kind: FindingKind, reason: Option<String>) -> Finding {
    let rule = &cx.target.rules[m.rule];
    let g = cx.graph();
    Finding {
        node: g.node(m.node).name().to_string(),
        op: crate::rewrite::pass::op_label(g, m.node),
        rule: rule.id.clone(),
        action: rule.action.to_string(),
        why: rule.why.clone(),
        evidence: rule.evidence.clone(),
        kind,
        reason,
    }
}

fn rule_finding(
    target: &Target,
    ri: usize,
    node: String,
    op: String,
    kind: FindingKind,
    reason: String,
) -> Finding {
    let rule = &target.rules[ri];
    Finding {
        node,
        op,
        rule: rule.id.clone(),
        action: rule.action.to_string(),
        why: rule.why.clone(),
        evidence: rule.evidence.clone(),
        kind,
        reason: Some(reason),
    }
}

/// Values read by some node (or its subgraphs) or given out as graph outputs.
fn used_values(g: &Graph) -> HashSet<ValueId> {
    let mut used: HashSet<ValueId> = g.outputs.iter().map(|o| o.value).collect();
    for &n in &g.order {
        let node = g.node(n);
        used.extend(node.inputs.iter().flatten().copied());
        used.extend(node.implicit_inputs.iter().copied());
    }
    used
}

/// Remove weights the rewrites orphaned: `Constant` nodes and initializers whose values were
/// used before the compile and are used by nothing now (e.g. a split Conv's full weight).
/// Constants that were already unused are left alone, so untouched parts stay as they were.
fn prune_orphans(g: &mut Graph, used_before: &HashSet<ValueId>) {
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
    for n in dead {
        g.remove_node(n);
    }
    let inputs: HashSet<ValueId> = g.inputs.iter().map(|i| i.value).collect();
    g.initializers
        .retain(|i| inputs.contains(&i.value) || !orphan(&i.value));
}

/// The rules that matched somewhere, in rule order.
fn matched_rules(matches: &[Match]) -> Vec<usize> {
    let mut r: Vec<usize> = matches.iter().map(|m| m.rule).collect();
    r.sort_unstable();
    r.dedup();
    r
}

fn find(cx: &Cx, opsets: &Opsets) -> Vec<Match> {
    Matcher::new(cx.graph(), cx.facts(), opsets).find(cx.target)
}

/// Findings of `target` on `model`: every rule that would still do something.
pub fn check(model: &mut Model, target: &Target, opts: &Options) -> Vec<Finding> {
    let sizes = sizes(model, target, opts);
    let cx = Cx::new(model, target, &sizes, &opts.annotation);
    let matches = find(&cx, &Opsets::from_model(model));
    let mut out = Vec::new();
    for m in &matches {
        let rule = &target.rules[m.rule];
        let Some(pass) = pass_for(rule.action.name()) else {
            continue;
        };
        match pass.pending(&cx, rule, m.node) {
            Pending::Fires => out.push(finding(&cx, m, FindingKind::Fires, None)),
            Pending::Denied => out.push(finding(&cx, m, FindingKind::Denied, None)),
            Pending::Satisfied => {}
        }
    }
    for (action, rules) in rules_by_pass(target, &matched_rules(&matches)) {
        let Some(pass) = pass_for(action) else {
            continue;
        };
        for l in pass.leftovers(&cx, &rules) {
            out.push(rule_finding(
                target,
                l.rule,
                l.node,
                String::new(),
                FindingKind::OverBudget,
                l.reason,
            ));
        }
    }
    out
}

/// The state of one compile: the report being written and the (rule, node) pairs whose action
/// was refused (not asked again).
struct Driver<'t> {
    target: &'t Target,
    report: Report,
    stuck: HashSet<(usize, NodeId)>,
}

impl Driver<'_> {
    /// Apply a batch of plans (each with its rule), in order, and report them in each plan's
    /// report order. Later patches are re-pointed at the values earlier ones replaced (the
    /// batch was planned on one graph). Returns the plans that applied.
    fn apply(&mut self, g: &mut Graph, plans: Vec<(usize, Planned)>) -> Vec<Planned> {
        let rules: Vec<usize> = plans.iter().map(|(r, _)| *r).collect();
        let outcomes = apply_plans(g, plans.into_iter().map(|(_, p)| p).collect());
        let mut applied: Vec<(usize, Applied)> = Vec::new();
        let mut refused: Vec<(usize, Finding)> = Vec::new();
        let mut done = Vec::new();
        for (ri, o) in rules.into_iter().zip(outcomes) {
            let rule = &self.target.rules[ri];
            match o.result {
                Ok(steps) => {
                    applied.extend(steps.into_iter().map(|s| {
                        let a = Applied {
                            rule: rule.id.clone(),
                            action: rule.action.name().to_string(),
                            node: s.node,
                            op: s.op,
                            nodes: s.count,
                        };
                        (s.report_at, a)
                    }));
                    done.push(o.plan);
                }
                Err(r) => {
                    for c in &o.plan.covers {
                        if let Some(n) = c.node {
                            self.stuck.insert((ri, n));
                        }
                    }
                    // A refusal names every node it covers; a failed multi-node plan, itself.
                    let names: Vec<(String, String)> =
                        if r.cause == Cause::Rejected && o.plan.covers.len() > 1 {
                            vec![(String::new(), String::new())]
                        } else {
                            o.plan
                                .covers
                                .iter()
                                .map(|c| (c.name.clone(), c.op.clone()))
                                .collect()
                        };
                    for (name, op) in names {
                        let f = rule_finding(
                            self.target,
                            ri,
                            name,
                            op,
                            FindingKind::Unsupported,
                            r.reason.clone(),
                        );
                        refused.push((o.plan.report_at, f));
                    }
                }
            }
        }
        applied.sort_by_key(|(at, _)| *at);
        refused.sort_by_key(|(at, _)| *at);
        self.report
            .applied
            .extend(applied.into_iter().map(|(_, a)| a));
        self.report
            .remaining
            .extend(refused.into_iter().map(|(_, f)| f));
        done
    }
}

/// Rewrite `model` for `target` until no rule fires (or only denials/refusals remain).
pub fn compile(model: &mut Model, target: &Target, opts: &Options) -> Report {
    let mut d = Driver {
        target,
        report: Report {
            target: target.name.clone(),
            annotation: opts.annotation.clone(),
            ..Report::default()
        },
        stuck: HashSet::new(),
    };
    let opsets = Opsets::from_model(model);
    let sizes = sizes(model, target, opts);
    let used_before = used_values(&model.graph);
    let ann = opts.annotation.as_str();
    for iteration in 0..opts.max_iterations {
        d.report.iterations = iteration + 1;
        // Match, and plan the per-match passes; per-rule passes collect their matches.
        let (matches, each, per_rule) = {
            let cx = Cx::new(model, target, &sizes, ann);
            let matches = find(&cx, &opsets);
            let mut claimed: HashSet<NodeId> = HashSet::new();
            let mut each: Vec<(usize, Planned)> = Vec::new();
            let mut per_rule: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
            for m in &matches {
                let rule = &target.rules[m.rule];
                let Some(pass) = pass_for(rule.action.name()) else {
                    continue;
                };
                if d.stuck.contains(&(m.rule, m.node))
                    || m.nodes().iter().any(|n| claimed.contains(n))
                {
                    continue;
                }
                match pass.schedule() {
                    Schedule::EachMatch => {
                        let plans = pass.plan(&cx, m.rule, &[m.node]);
                        for p in plans {
                            if p.outcome.is_ok() && pass.claims_nodes() {
                                claimed.extend(m.nodes());
                            }
                            let at = each.len();
                            each.push((m.rule, p.at(at)));
                        }
                    }
                    Schedule::PerRule => {
                        if pass.pending(&cx, rule, m.node) == Pending::Fires {
                            if pass.claims_nodes() {
                                claimed.extend(m.nodes());
                            }
                            per_rule.entry(m.rule).or_default().push(m.node);
                        }
                    }
                    Schedule::WhenSettled => {}
                }
            }
            (matches, each, per_rule)
        };
        let mut changed = false;
        // Per-match plans, in match order (each under its own action's name).
        changed |= !d.apply(&mut model.graph, each).is_empty();
        // Per-rule passes, in registry order, each rule in rule order, planned on the graph as
        // the earlier ones left it.
        for pass in PASSES.iter().filter(|p| p.schedule() == Schedule::PerRule) {
            for (&ri, nodes) in per_rule
                .iter()
                .filter(|(&ri, _)| target.rules[ri].action.name() == pass.action())
            {
                let nodes: Vec<NodeId> = nodes
                    .iter()
                    .copied()
                    .filter(|&n| model.graph.nodes.contains_node(n))
                    .collect();
                let plans = {
                    let cx = Cx::new(model, target, &sizes, ann);
                    pass.plan(&cx, ri, &nodes)
                };
                let batch = plans.into_iter().map(|p| (ri, p)).collect();
                let done = d.apply(&mut model.graph, batch);
                if !done.is_empty() {
                    changed = true;
                    pass.finish(&mut model.graph, &done);
                }
            }
        }
        if changed {
            continue;
        }
        // The structure is stable: graph-wide passes, one patch at a time.
        let mut settled = 0usize;
        for (action, rules) in rules_by_pass(target, &matched_rules(&matches)) {
            let Some(pass) = pass_for(action).filter(|p| p.schedule() == Schedule::WhenSettled)
            else {
                continue;
            };
            let mut n = 0usize;
            loop {
                let next = {
                    let cx = Cx::new(model, target, &sizes, ann);
                    pass.next(&cx, &rules)
                };
                let Some((ri, plan)) = next else { break };
                let ok = plan.outcome.is_ok();
                let done = d.apply(&mut model.graph, vec![(ri, plan)]);
                if !ok || done.is_empty() {
                    break;
                }
                n += 1;
                if n > 100_000 {
                    break;
                }
            }
            settled += n;
        }
        if settled > 0 {
            continue;
        }
        break;
    }
    prune_orphans(&mut model.graph, &used_before);
    // What still fires (beyond what was already reported as refused).
    for f in check(model, target, opts) {
        let dup =
            d.report.remaining.iter().any(|r| {
                r.rule == f.rule && r.node == f.node && r.kind == FindingKind::Unsupported
            });
        if !dup {
            d.report.remaining.push(f);
        }
    }
    let mut report = d.report;
    {
        let cx = Cx::new(model, target, &sizes, ann);
        let matches = find(&cx, &opsets);
        let mut summary = Summary::default();
        for (action, rules) in rules_by_pass(target, &matched_rules(&matches)) {
            if let Some(pass) = pass_for(action) {
                pass.summarize(&cx, &rules, &mut summary);
            }
        }
        report.pieces = summary.pieces;
        report.notes.extend(summary.notes);
    }
    let g = &model.graph;
    report.pinned = g
        .order
        .iter()
        .filter(|&&n| g.node(n).metadata(LAYER_ANN_KEY) == Some(opts.annotation.as_str()))
        .map(|&n| g.node(n).name().to_string())
        .collect();
    report
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

/// Graph invariants that must hold before anything is written: no cycle, every value read is
/// defined, graph outputs are produced, and names are unique.
pub fn check_invariants(g: &Graph) -> Result<(), String> {
    use crate::ir::Origin;
    if let Err(cycle) = g.topo_order() {
        return Err(format!(
            "the rewritten graph has a cycle through {} nodes",
            cycle.len()
        ));
    }
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
    let mut names: HashSet<&str> = HashSet::new();
    for &n in &g.order {
        let node = g.node(n);
        for v in node
            .inputs
            .iter()
            .flatten()
            .chain(node.implicit_inputs.iter())
        {
            if !defined(*v) {
                return Err(format!(
                    "node '{}' ({}) reads '{}', which nothing defines",
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
    let mut created: HashSet<&str> = HashSet::new();
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
