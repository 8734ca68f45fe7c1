//! One compile's state and its steps: plan a round, apply plans, run the per-rule passes,
//! settle, and write the report. The driver knows no action; passes say what to do.

use std::collections::{BTreeMap, HashSet};

use super::output::{prune_orphans, used_values};
use super::{
    check_matches, find, matched_rules, rule_finding, Applied, FellBack, Finding, FindingKind,
    Options, Report,
};
use crate::analysis::Sizes;
use crate::ir::{Graph, Model, NodeId};
use crate::rewrite::cpu::LAYER_ANN_KEY;
use crate::rewrite::pass::{
    apply_plans, rules_by_pass, Cause, Cx, OuterFacts, Pending, Pieces, Planned, Refusal, Schedule,
    Summary,
};
use crate::rewrite::{pass_for, PASSES};
use crate::rules::matcher::{Match, Opsets};
use crate::rules::schema::{Fallback, Target};

/// What one round's matching found: per-match plans, and per-rule passes' matches.
pub(super) struct Round {
    pub matches: Vec<Match>,
    pub each: Vec<(usize, Planned)>,
    pub per_rule: BTreeMap<usize, Vec<NodeId>>,
}

/// Facts inferred before patches that only added nodes and initializers and re-pointed the
/// readers of the values they replace (a split, an unfused op): the values from `first_new`
/// on are new, and `replaced` pairs each old value with its replacement.
struct Stale {
    facts: crate::infer::Facts,
    first_new: usize,
    replaced: Vec<(crate::ir::ValueId, crate::ir::ValueId)>,
}

/// The state of one compile: the report being written and the (rule, node) pairs whose action
/// was refused (not asked again).
pub(super) struct Driver<'t> {
    pub target: &'t Target,
    pub opts: &'t Options,
    pub sizes: Sizes,
    pub opsets: Opsets,
    pub report: Report,
    stuck: HashSet<(usize, NodeId)>,
    used_before: super::output::UsedValues,
    /// A fallback changed the graph since the flag was last taken.
    fell_back_now: bool,
    /// How many times plans were applied (each may have changed the graph): a round's matches
    /// still describe the graph while this count is what it was when they were found.
    pub applications: u64,
    /// For a body: what its enclosing scopes know of the values it reads by name.
    outer: Option<&'t OuterFacts>,
    /// The resolver of the model's external data (for the unpacked MatMulNBits form).
    pub external: Option<&'t crate::io::ExternalData>,
    /// The assumed-size facts of the graph as it is now, when a step computed them and nothing
    /// changed the graph since: the next step starts from them instead of a whole inference.
    facts: std::cell::Cell<Option<crate::infer::Facts>>,
    /// Facts of the graph before the last patches, and what they need to be brought up to
    /// date (see [`Stale`]): the next step extends them instead of inferring the whole graph.
    stale: std::cell::Cell<Option<Stale>>,
    /// The GPU pieces of the graph as it is now, when a step found them and nothing changed
    /// the graph since (a pin changes them: any patch drops them).
    pieces: std::cell::Cell<Option<Pieces>>,
    /// When [`Driver::settle`] last ended with every pass planning nothing: `applications`
    /// then, and the matched rules it was given. While both are the same, the graph is the
    /// one those passes found nothing to do on, and settling again would plan nothing.
    quiet: Option<(u64, Vec<usize>)>,
}

impl<'t> Driver<'t> {
    pub fn new(
        model: &Model,
        target: &'t Target,
        opts: &'t Options,
        sizes: Sizes,
        outer: Option<&'t OuterFacts>,
    ) -> Self {
        Driver {
            target,
            opts,
            sizes,
            opsets: Opsets::from_model(model),
            report: Report {
                target: target.name.clone(),
                annotation: opts.annotation.clone(),
                ..Report::default()
            },
            stuck: HashSet::new(),
            used_before: used_values(&model.graph),
            fell_back_now: false,
            applications: 0,
            outer,
            external: None,
            facts: std::cell::Cell::new(None),
            pieces: std::cell::Cell::new(None),
            stale: std::cell::Cell::new(None),
            quiet: None,
        }
    }

    /// Whether a fallback changed the graph since the last call.
    pub fn take_fallback_change(&mut self) -> bool {
        std::mem::take(&mut self.fell_back_now)
    }

    /// A context on the graph as it is now, with the facts a step left when they are still
    /// current. Give them back with [`Driver::keep_facts`] when the step changed nothing.
    fn cx<'a>(&'a self, model: &'a Model) -> Cx<'a> {
        let mut cx = super::context(model, self.target, &self.sizes, self.opts);
        cx.external = self.external;
        let cx = match self.outer {
            Some(o) => cx.in_body(&model.graph, o),
            None => cx,
        };
        let facts = self.facts.take().or_else(|| {
            // Facts from before the last patches, extended to what they added when that
            // gives what a whole inference would (else the whole graph is inferred).
            let mut st = self.stale.take()?;
            let opts = self.sizes.infer_options();
            st.facts
                .extend_after_patches(model, &model.graph, &opts, st.first_new, &st.replaced)
                .then_some(st.facts)
        });
        let cx = match facts {
            Some(f) => cx.with_facts(f),
            None => cx,
        };
        // (Pieces are kept only with the facts they were found with: see `keep_facts`.)
        cx.with_pieces(self.pieces.take())
    }

    /// Keep the facts (and pieces) `cx` computed for the next step (the graph has not changed
    /// since).
    fn keep_facts(&self, cx: Cx) {
        let (facts, pieces) = cx.into_kept();
        self.pieces.set(pieces.filter(|_| facts.is_some()));
        self.facts.set(facts);
    }

    /// Match; plan the per-match passes (a planned match keeps later rules off its nodes);
    /// collect the matches the per-rule passes will plan together.
    pub fn plan_round(&self, model: &Model) -> Round {
        let cx = self.cx(model);
        let matches = find(&cx, &self.opsets);
        let mut claimed: HashSet<NodeId> = HashSet::new();
        let mut each: Vec<(usize, Planned)> = Vec::new();
        let mut per_rule: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
        for m in &matches {
            let rule = &self.target.rules[m.rule];
            let Some(pass) = pass_for(rule.action.name()) else {
                continue;
            };
            if self.stuck.contains(&(m.rule, m.node))
                || m.nodes().iter().any(|n| claimed.contains(n))
            {
                continue;
            }
            // A node on the CPU is out of the GPU's way (as `check` sees it too).
            if self.target.fallback_of(rule) == Some(Fallback::Cpu)
                && crate::rewrite::cpu::is_pinned(cx.graph(), m.node, &self.opts.annotation)
            {
                continue;
            }
            match pass.schedule() {
                Schedule::EachMatch => {
                    for p in pass.plan(&cx, m.rule, &[m.node]) {
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
        self.keep_facts(cx);
        Round {
            matches,
            each,
            per_rule,
        }
    }

    /// The per-rule passes, in registry order, each rule in rule order, each planned on the
    /// graph as the earlier ones left it. Returns whether anything changed.
    pub fn run_per_rule(
        &mut self,
        model: &mut Model,
        per_rule: &BTreeMap<usize, Vec<NodeId>>,
    ) -> bool {
        let mut changed = false;
        for pass in PASSES.iter().filter(|p| p.schedule() == Schedule::PerRule) {
            for (&ri, nodes) in per_rule
                .iter()
                .filter(|(&ri, _)| self.target.rules[ri].action.name() == pass.action())
            {
                let nodes: Vec<NodeId> = nodes
                    .iter()
                    .copied()
                    .filter(|&n| model.graph.nodes.contains_node(n))
                    .collect();
                let cx = self.cx(model);
                let plans = pass.plan(&cx, ri, &nodes);
                if plans.is_empty() {
                    self.keep_facts(cx);
                    continue;
                }
                // `apply` keeps these facts when the plans only pin.
                self.keep_facts(cx);
                let done = self.apply(
                    &mut model.graph,
                    plans.into_iter().map(|p| (ri, p)).collect(),
                );
                if !done.is_empty() {
                    changed = true;
                    pass.finish(&mut model.graph, &done);
                }
            }
        }
        changed
    }

    /// The structure is stable: graph-wide passes (barrier cuts), in batches of patches, each
    /// planned on the graph the last one left. Returns how many applied.
    pub fn settle(&mut self, model: &mut Model, matches: &[Match]) -> usize {
        let matched = matched_rules(matches);
        if self.quiet.as_ref() == Some(&(self.applications, matched.clone())) {
            return 0;
        }
        let mut settled = 0usize;
        // Quiet: every pass's last plan was empty, on the graph as it ends (a pass that applies
        // after another found nothing leaves that one's answer stale).
        let mut quiet = true;
        let mut passes = 0usize;
        for (action, rules) in rules_by_pass(self.target, &matched) {
            let Some(pass) = pass_for(action).filter(|p| p.schedule() == Schedule::WhenSettled)
            else {
                continue;
            };
            passes += 1;
            let mut ended_empty = false;
            let mut n = 0usize;
            // A settled pass's patches only add identities (cuts): the facts of one step,
            // extended to the new values, serve the next without a whole re-inference.
            while n <= 100_000 {
                let first_new = model.graph.values.len();
                let cx = self.cx(model);
                let plans = pass.next(&cx, &rules);
                if plans.is_empty() {
                    // Nothing changed since these facts: the next round starts from them.
                    self.keep_facts(cx);
                    ended_empty = true;
                    break;
                }
                let facts = cx.into_facts();
                let ok = plans.iter().all(|(_, p)| p.outcome.is_ok());
                let applied = self.apply(&mut model.graph, plans).len();
                if applied == 0 || !ok {
                    break;
                }
                n += applied;
                let carried = facts.filter(|_| pass.keeps_facts()).and_then(|mut f| {
                    let opts = self.sizes.infer_options();
                    f.extend_with_new_nodes(model, &model.graph, &opts, first_new)
                        .then_some(f)
                });
                self.facts.set(carried);
            }
            quiet &= ended_empty;
            settled += n;
        }
        quiet &= settled == 0 || passes == 1;
        self.quiet = quiet.then_some((self.applications, matched));
        settled
    }

    /// Prune what the rewrites orphaned, add what still fires, and the passes' summaries.
    /// `settled`: the last round's matches, when nothing changed the graph after they were
    /// found (they are then the final graph's, unless pruning removes something).
    pub fn finish(mut self, model: &mut Model, settled: Option<Vec<Match>>) -> Report {
        // Pruning removes only what nothing reads (orphaned constants and initializers): the
        // facts of every value still read are the same, so they stay current.
        let pruned_nodes = prune_orphans(&mut model.graph, &self.used_before);
        if pruned_nodes > 0 {
            self.pieces.take();
        }
        let cx = self.cx(model);
        // One match of the final graph serves the check and the summaries (the model's opsets
        // are the ones the driver started with: no rewrite changes them). A match is of nodes,
        // and what it tests is read from them: the last round's matches stay the graph's when
        // pruning removed initializers only (which no node reads), not when a `Constant` went.
        let matches = match settled {
            Some(m) if pruned_nodes == 0 => m,
            _ => find(&cx, &self.opsets),
        };
        let findings = check_matches(&cx, self.opts, &matches);
        let mut summary = Summary::default();
        for (action, rules) in rules_by_pass(self.target, &matched_rules(&matches)) {
            if let Some(pass) = pass_for(action) {
                pass.summarize(&cx, &rules, &mut summary);
            }
        }
        // The output's cost of safety (main graph; its bodies are added once compiled), its
        // crossings sized with the facts the check used.
        let after = self
            .outer
            .is_none()
            .then(|| match crate::cost::profile_of(self.target) {
                Some(p) => crate::cost::of_graph_predicted(
                    cx.model,
                    cx.graph(),
                    cx.facts(),
                    p,
                    &self.opts.annotation,
                )
                .with_sizes(cx.facts()),
                None => {
                    let c = crate::cost::of_graph(cx.graph(), &self.opts.annotation);
                    if c.needs_facts() {
                        c.with_sizes(cx.facts())
                    } else {
                        c.cost
                    }
                }
            });
        drop(cx);
        for f in findings {
            let dup = self.report.remaining.iter().any(|r| {
                r.rule == f.rule
                    && r.node == f.node
                    && matches!(r.kind, FindingKind::Unsupported | FindingKind::Denied)
            });
            if !dup {
                self.report.remaining.push(f);
            }
        }
        let mut report = self.report;
        report.pieces = summary.pieces;
        if self.outer.is_none() {
            report.notes.extend(crate::import::version_warnings(model));
        }
        report.notes.extend(summary.notes);
        report.cost = after.map(|after| crate::cost::CostOfSafety {
            before: Default::default(),
            after,
        });
        let g = &model.graph;
        report.pinned = g
            .order
            .iter()
            .filter(|&&n| g.node(n).metadata(LAYER_ANN_KEY) == Some(self.opts.annotation.as_str()))
            .map(|&n| g.node(n).name().to_string())
            .collect();
        report
    }

    pub fn apply(&mut self, g: &mut Graph, plans: Vec<(usize, Planned)>) -> Vec<Planned> {
        if plans.is_empty() {
            return Vec::new();
        }
        self.applications += 1;
        // Patches change the graph: the facts kept are no longer current. Unless every patch
        // only sets node metadata and frees nothing (pins; a refused plan's fallback is a pin
        // too): no fact depends on metadata, so they stay current.
        let pins_only = plans.iter().all(|(_, p)| {
            p.frees.is_empty()
                && p.outcome
                    .as_ref()
                    .map_or(true, |steps| steps.iter().all(|s| s.patch.only_annotates()))
        });
        // Patches that add nodes and initializers and replace values, and touch no body, leave
        // facts that the next step can extend (see `Stale`). Only from facts of the graph as
        // it is now, and in the main graph (a body's new nodes could read outer values by
        // name).
        let extendable = !pins_only
            && self.outer.is_none()
            && plans.iter().all(|(_, p)| {
                p.frees.is_empty()
                    && p.outcome
                        .as_ref()
                        .map_or(true, |steps| steps.iter().all(|s| s.patch.extends_facts()))
            });
        let before = self.facts.take();
        self.stale.take();
        let (kept, stale) = match before {
            Some(f) if pins_only => (Some(f), None),
            Some(f) if extendable => (None, Some(f)),
            _ => (None, None),
        };
        let first_new = g.values.len();
        // Pins move nodes to the CPU: the pieces change with any patch.
        self.pieces.take();
        let rules: Vec<usize> = plans.iter().map(|(r, _)| *r).collect();
        // Approximate rewrites run only where allowed; elsewhere the plan is refused, and the
        // rule's fallback takes the node (the built-in targets: the CPU, which is exact).
        let plans: Vec<Planned> = plans
            .into_iter()
            .map(|(ri, mut p)| {
                let rule = &self.target.rules[ri];
                if self.target.allows_approximate(rule, self.opts.allow_approximate) {
                    return p;
                }
                let loosest = p.outcome.as_ref().ok().and_then(|steps| {
                    steps
                        .iter()
                        .map(|s| s.exactness())
                        .reduce(crate::rewrite::Exactness::max)
                });
                if let Some(e @ crate::rewrite::Exactness::Approximate(..)) = loosest {
                    p.outcome = Err(Refusal::new(
                        Cause::Approximate,
                        format!(
                            "the rewrite is approximate ({}); --allow-approximate or `approximate: allow` runs it",
                            e.bound_text()
                        ),
                    ));
                }
                p
            })
            .collect();
        let outcomes = apply_plans(g, plans);
        let mut applied: Vec<(usize, Applied)> = Vec::new();
        let mut refused: Vec<(usize, Finding)> = Vec::new();
        let mut fell_back: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
        let mut done = Vec::new();
        let mut replaced = Vec::new();
        for (ri, o) in rules.into_iter().zip(outcomes) {
            let rule = &self.target.rules[ri];
            match o.result {
                Ok(steps) => {
                    if stale.is_some() {
                        replaced.extend(steps.iter().flat_map(|s| s.replaced.iter().copied()));
                    }
                    applied.extend(steps.into_iter().map(|s| {
                        let a = Applied {
                            rule: rule.id.clone(),
                            action: rule.action.name().to_string(),
                            node: s.node,
                            op: s.op,
                            nodes: s.count,
                            exactness: s.exactness,
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
                    let fallback = self.target.fallback_of(rule);
                    if fallback == Some(Fallback::Cpu) {
                        // The node runs on the CPU instead; the report says so, and why.
                        for c in &o.plan.covers {
                            let Some(n) = c.node else { continue };
                            fell_back.entry(ri).or_default().push(n);
                            self.report.fallbacks.push(FellBack {
                                node: c.name.clone(),
                                op: c.op.clone(),
                                rule: rule.id.clone(),
                                action: rule.action.to_string(),
                                cause: r.cause.as_str().to_string(),
                                reason: r.reason.clone(),
                                to: "cpu".into(),
                            });
                        }
                        if o.plan.covers.iter().any(|c| c.node.is_some()) {
                            continue;
                        }
                    }
                    let kind = if fallback == Some(Fallback::Deny) {
                        FindingKind::Denied
                    } else {
                        FindingKind::Unsupported
                    };
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
                        let f = rule_finding(self.target, ri, name, op, kind, r.reason.clone());
                        refused.push((o.plan.report_at, f));
                    }
                }
            }
        }
        // Fallbacks to the CPU: pinned like the `cpu` action pins (regions grow), under the
        // rule that could not be applied.
        for (ri, nodes) in fell_back {
            let nodes: Vec<NodeId> = nodes
                .into_iter()
                .filter(|&n| g.nodes.contains_node(n))
                .collect();
            let rule = &self.target.rules[ri].id;
            if !crate::rewrite::cpu::pin(g, &nodes, rule, &self.opts.annotation).is_empty() {
                self.fell_back_now = true;
            }
        }
        self.facts.set(kept);
        if let Some(facts) = stale {
            self.stale.set(Some(Stale {
                facts,
                first_new,
                replaced,
            }));
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
