//! The compiler's driver. A compile is rounds of: analyse (`infer`, through a pass context),
//! match the target's rules, ask each match's pass for a plan, apply the patches. Rounds repeat
//! until nothing changes (bounded); then graph-wide passes (barrier cuts) settle the graph, and
//! `check` says what still fires. Output is written only after [`check_invariants`].
//!
//! The driver knows no action. A pass ([`crate::rewrite::pass::Pass`]) says when it runs
//! (`Schedule`), whether a match still asks for work (`Pending`), and what to do (`Planned`:
//! patches labelled with their rule, or a `Refusal` with its cause). To add an action, write a
//! pass in `src/rewrite/` and add one line to [`crate::rewrite::PASSES`].
//!
//! - `check`: match, then ask each match's pass whether it still fires, plus graph-wide
//!   leftovers (barrier pieces over budget).
//! - `compile`: [`driver::Driver`]'s `plan_round` → `apply` → `run_per_rule` → `settle` →
//!   `finish`.

mod driver;
mod findings;
mod output;

use std::collections::BTreeMap;

pub use findings::*;
pub use output::{check_invariants, stamp_runtime, RUNTIME_KEY_PREFIX, TARGET_KEY};

use crate::analysis::Sizes;
use crate::ir::Model;
use crate::ir::NodeId;
use crate::rewrite::cpu::is_pinned;
use crate::rewrite::cpu::DEFAULT_ANNOTATION;
use crate::rewrite::pass::{assumed_sizes, rules_by_pass, Cx, Pending, Schedule};
use crate::rewrite::pass_for;
use crate::rules::matcher::{Match, Matcher, Opsets};
use crate::rules::schema::{Fallback, Target};

/// How to compile.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sizes for symbolic dims (`--dim NAME=VALUE`); they win over rule defaults.
    pub dims: BTreeMap<String, i64>,
    /// The `layer_ann` value written by `cpu` and `barrier`.
    pub annotation: String,
    /// Upper bound on match-and-rewrite rounds.
    pub max_iterations: usize,
    /// The NCHWc block size of the CPU that saved the model (`--nchwc-block`): 8 with AVX2,
    /// 16 with AVX-512. Without it the block size is resolved from the model, and a region
    /// whose block size stays ambiguous is refused (and falls back).
    pub nchwc_block: Option<i64>,
    /// A node that falls back (to the CPU) blocks the output, as an unsupported one does:
    /// for pipelines that want every fallback to fail the build (`--strict`).
    pub strict: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dims: BTreeMap::new(),
            annotation: DEFAULT_ANNOTATION.to_string(),
            max_iterations: 32,
            nchwc_block: None,
            strict: false,
        }
    }
}

/// Rewrite `model` for `target` until no rule fires (or only denials and refusals remain).
pub fn compile(model: &mut Model, target: &Target, opts: &Options) -> Report {
    let mut d = driver::Driver::new(model, target, opts, sizes(model, target, opts));
    for iteration in 0..opts.max_iterations {
        d.report.iterations = iteration + 1;
        let round = d.plan_round(model);
        let mut changed = !d.apply(&mut model.graph, round.each).is_empty();
        changed |= d.run_per_rule(model, &round.per_rule);
        changed |= d.take_fallback_change();
        if changed {
            continue;
        }
        if d.settle(model, &round.matches) == 0 {
            break;
        }
    }
    d.finish(model)
}

/// Findings of `target` on `model`: every rule that would still do something.
pub fn check(model: &mut Model, target: &Target, opts: &Options) -> Vec<Finding> {
    let sizes = sizes(model, target, opts);
    let mut cx = Cx::new(model, target, &sizes, &opts.annotation);
    cx.nchwc_block = opts.nchwc_block;
    let matches = find(&cx, &Opsets::from_model(model));
    let mut out = Vec::new();
    // Matches of rules with a fallback, by rule: planned below to see which would fall back.
    let mut with_fallback: BTreeMap<usize, Vec<(usize, NodeId)>> = BTreeMap::new();
    for m in &matches {
        let rule = &target.rules[m.rule];
        let Some(pass) = pass_for(rule.action.name()) else {
            continue;
        };
        let fallback = target.fallback_of(rule);
        // A node on the CPU is out of the GPU's way: a rule that would fall back to the CPU
        // has nothing left to do there.
        if fallback == Some(Fallback::Cpu) && is_pinned(cx.graph(), m.node, &opts.annotation) {
            continue;
        }
        match pass.pending(&cx, rule, m.node) {
            Pending::Fires => {
                if fallback.is_some() && pass.schedule() != Schedule::WhenSettled {
                    with_fallback
                        .entry(m.rule)
                        .or_default()
                        .push((out.len(), m.node));
                }
                out.push(finding(&cx, m, FindingKind::Fires, None));
            }
            Pending::Denied => out.push(finding(&cx, m, FindingKind::Denied, None)),
            Pending::Satisfied => {}
        }
    }
    // A dry run of those rules' plans: a refused node is reported as what the compile will
    // do with it (fall back to the CPU, or deny), with the reason.
    for (ri, nodes) in with_fallback {
        let rule = &target.rules[ri];
        let Some(pass) = pass_for(rule.action.name()) else {
            continue;
        };
        let ids: Vec<NodeId> = nodes.iter().map(|&(_, n)| n).collect();
        for plan in pass.plan(&cx, ri, &ids) {
            let Err(r) = &plan.outcome else { continue };
            for c in &plan.covers {
                let Some(&(at, _)) = nodes.iter().find(|&&(_, n)| Some(n) == c.node) else {
                    continue;
                };
                let f = &mut out[at];
                f.kind = match target.fallback_of(rule) {
                    Some(Fallback::Deny) => FindingKind::Denied,
                    _ => FindingKind::FallsBack,
                };
                f.reason = Some(r.reason.clone());
            }
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
