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
pub use output::{
    check_invariants, stamp_exactness, stamp_runtime, RUNTIME_KEY_PREFIX, TARGET_KEY,
};

use crate::analysis::Sizes;
use crate::ir::scope::{has_bodies, ScopePath};
use crate::ir::{Graph, Model, NodeId};
use crate::rewrite::cpu::is_pinned;
use crate::rewrite::cpu::DEFAULT_ANNOTATION;
use crate::rewrite::pass::{assumed_sizes, rules_by_pass, Cx, OuterFacts, Pending, Schedule};
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
    /// Approximate rewrites may run for every rule (`--allow-approximate`); otherwise only
    /// for rules and targets that say `approximate: allow`, and other nodes fall back.
    pub allow_approximate: bool,
    /// A model below opset 21 may be raised to it for the packed MatMulNBits decomposition,
    /// where that keeps every node's meaning (`--keep-opset` turns it off).
    pub raise_opset: bool,
    /// Bytes of float weights the unpacked MatMulNBits form may add by reading quantized
    /// weights from external data (given to [`compile_with`]), per batch of decompositions; 0
    /// (the default): external weights are not read, and such a node is refused. The command
    /// line sets it to what `--allow-growth` lets the output grow by, so that the output
    /// stays within what the size guard would let through (the weights are computed while it
    /// is written, never held: see [`crate::io::computed`]).
    pub unpack_limit: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dims: BTreeMap::new(),
            annotation: DEFAULT_ANNOTATION.to_string(),
            max_iterations: 32,
            nchwc_block: None,
            strict: false,
            allow_approximate: false,
            raise_opset: true,
            unpack_limit: 0,
        }
    }
}

/// Rewrite `model` for `target` until no rule fires (or only denials and refusals remain):
/// the main graph first, then every `If`/`Loop`/`Scan` body at any depth, each on its own (as
/// ONNX Runtime partitions them), its outer-scope reads seeded with what its enclosing graphs
/// know. Inner nodes are named by their scope path in the report (`loop/body/conv_3`).
///
/// A model below opset 21 whose MatMulNBits the target decomposes is first raised to opset 21
/// where that keeps every node's meaning ([`crate::rewrite::opset`]), so the decomposition
/// keeps the weights packed; the raise stands only if some MatMulNBits was decomposed packed
/// (else the model is compiled again as it was). A note says what was done, or why the opset
/// was kept.
pub fn compile(model: &mut Model, target: &Target, opts: &Options) -> Report {
    compile_with(model, target, opts, None)
}

/// The IR version that holds `model`: what its default-domain opset came with (ONNX's
/// release table: opset 22 and older with IR 10 or older, 23 with 11, 24 with 12, 25-27 with
/// 13, 28 with 14) and what its element types need (int4/uint4 10, float4e2m1 11,
/// float8e8m0 12); `None` when a type newer than those is declared (not lowered).
fn ir_needed(model: &Model) -> Option<i64> {
    let by_opset = match model.opset("").unwrap_or(1) {
        o if o <= 22 => 10,
        23 => 11,
        24 => 12,
        25..=27 => 13,
        _ => 14,
    };
    let facts = crate::infer::declared(&model.graph);
    let mut by_type = 0;
    for i in 0..model.graph.values.len() {
        match facts.dtype(crate::ir::ValueId(i as u32)) {
            Some(21 | 22) => by_type = by_type.max(10),
            Some(23) => by_type = by_type.max(11),
            Some(24) => by_type = by_type.max(12),
            Some(t) if t > 24 => return None,
            _ => {}
        }
    }
    Some(by_opset.max(by_type))
}

/// Lowers the IR version to the most the target's runtime reads, when the model declares a
/// newer one and needs nothing newer (onnxruntime-web 1.30 refuses IR 14, which current `onnx`
/// writes): a note says so. Nothing changes for a target whose runtime reads it.
fn fit_ir_version(model: &mut Model, target: &Target, report: &mut Report) {
    let Some(max) = crate::cost::profile_of(target).and_then(|p| p.max_ir) else {
        return;
    };
    let Some(ir) = model.ir_version.filter(|&v| v > max) else {
        return;
    };
    match ir_needed(model) {
        Some(need) if need <= max => {
            model.ir_version = Some(max);
            report.notes.push(format!(
                "IR version written as {max} (the model declared {ir}): the target's runtime reads IR {max} at most, and the model needs nothing newer (IR {need} holds its opset and element types)"
            ));
        }
        _ => report.notes.push(format!(
            "the model declares IR version {ir} and needs it; the target's runtime reads IR {max} at most, so the output will not load there"
        )),
    }
}

/// [`compile`] with the resolver of the model's external data: the unpacked MatMulNBits form
/// reads quantized weights from it, up to [`Options::unpack_limit`] bytes of float weights.
pub fn compile_with(
    model: &mut Model,
    target: &Target,
    opts: &Options,
    external: Option<&crate::io::ExternalData>,
) -> Report {
    let mut report = compile_raising(model, target, opts, external);
    fit_ir_version(model, target, &mut report);
    if !report.applied.is_empty() || !report.fallbacks.is_empty() {
        // A rewritten graph is written in topological order, in every scope, even where the
        // input's was not (ONNX Runtime runs files out of order; a patch places new nodes where
        // the node they replace was). An untouched one keeps its order and bytes.
        crate::ir::scope::for_each_graph_mut(&mut model.graph, &mut |_, g| {
            let _ = g.sort_if_needed();
        });
    }
    report
}

fn compile_raising(
    model: &mut Model,
    target: &Target,
    opts: &Options,
    external: Option<&crate::io::ExternalData>,
) -> Report {
    use crate::rewrite::opset;
    if !opts.raise_opset || !wants_packed_opset(model, target, opts) {
        return compile_at_own_opset(model, target, opts, external);
    }
    let from = model.opset("").unwrap_or(0);
    let before = model.clone();
    let raised = match opset::raise(model, opset::PACKED_OPSET) {
        Ok(r) => r,
        Err(why) => {
            let mut report = compile_at_own_opset(model, target, opts, external);
            report.notes.push(format!(
                "opset kept at {from}: raising it to {} for the packed MatMulNBits decomposition \
                 would change the meaning of {why}; MatMulNBits is unpacked (or falls back) below \
                 opset {}",
                opset::PACKED_OPSET,
                opset::PACKED_OPSET
            ));
            return report;
        }
    };
    // A raise must not move a node off the GPU: a provider registers kernels per
    // since-version, and a node's since-version may change with the opset (DirectML has
    // ScatterND at 11, 13 and 16, not 18).
    if let Some(moved) = raise_moves_off_gpu(&before, model, target, opts) {
        *model = before;
        let mut report = compile_at_own_opset(model, target, opts, external);
        report.notes.push(format!(
            "opset kept at {from}: raising it to {} for the packed MatMulNBits decomposition \
             would move {moved} off the GPU (the target's provider has no kernel for its new \
             since-version); MatMulNBits is unpacked (or falls back) below opset {}",
            opset::PACKED_OPSET,
            opset::PACKED_OPSET
        ));
        return report;
    }
    let mut report = compile_at_own_opset(model, target, opts, external);
    if any_packed_nbits(&model.graph) {
        let rewrites = raised.rewrites();
        report.notes.push(format!(
            "opset raised {} → {} for the packed MatMulNBits decomposition{}",
            raised.from,
            raised.to,
            if rewrites.is_empty() {
                String::new()
            } else {
                format!(" ({rewrites})")
            }
        ));
        return report;
    }
    // No MatMulNBits was decomposed packed (each refused for another reason): the raise
    // served nothing, and the model is compiled as it came.
    *model = before;
    let mut report = compile_at_own_opset(model, target, opts, external);
    report.notes.push(format!(
        "opset kept at {from}: no MatMulNBits could be decomposed packed at opset {}",
        opset::PACKED_OPSET
    ));
    report
}

/// The nodes (named, with their op) that the target's provider runs before an opset raise and
/// not after it, when there are any (`None` for a target that names no provider).
fn raise_moves_off_gpu(
    before: &Model,
    raised: &Model,
    target: &Target,
    opts: &Options,
) -> Option<String> {
    use crate::runtime::placement::Why;
    let profile = crate::cost::profile_of(target)?;
    let on_gpu = |m: &Model| -> std::collections::HashSet<String> {
        let facts = sizes(m, target, opts).infer(m);
        let p = crate::runtime::placement::predict_graph(
            m,
            &m.graph,
            &facts,
            profile,
            &opts.annotation,
        );
        m.graph
            .order
            .iter()
            .filter(|&&n| {
                matches!(p.why(n), Some(Why::Kernel | Why::Inlined(_)))
                    && p.side(n) == crate::runtime::placement::Side::Gpu
            })
            .map(|&n| format!("{} ({})", m.graph.node(n).name(), m.graph.node(n).op_type))
            .collect()
    };
    let (a, b) = (on_gpu(before), on_gpu(raised));
    let mut lost: Vec<&String> = a.difference(&b).collect();
    if lost.is_empty() {
        return None;
    }
    lost.sort();
    let n = lost.len();
    let shown: Vec<&str> = lost.iter().take(3).map(|s| s.as_str()).collect();
    Some(format!(
        "{n} node(s): {}{}",
        shown.join(", "),
        if n > 3 { ", ..." } else { "" }
    ))
}

/// Whether the target would decompose a MatMulNBits of the main graph that opset 21 keeps
/// packed (4 or 8 bits, no `g_idx`) while the model is below opset 21: an `unfuse` rule
/// matches it.
fn wants_packed_opset(model: &Model, target: &Target, opts: &Options) -> bool {
    let Some(from) = model.opset("") else {
        return false;
    };
    if from >= crate::rewrite::opset::PACKED_OPSET {
        return false;
    }
    let g = &model.graph;
    let packable = |n: NodeId| {
        let node = g.node(n);
        node.domain() == crate::rewrite::unfuse::MS_DOMAIN
            && node.op_type == "MatMulNBits"
            && matches!(node.attr("bits").and_then(|a| a.i()).unwrap_or(4), 4 | 8)
            && node.inputs.get(4).copied().flatten().is_none()
    };
    if !g.order.iter().any(|&n| packable(n)) {
        return false;
    }
    let sizes = sizes(model, target, opts);
    let cx = context(model, target, &sizes, opts);
    find(&cx, &Opsets::from_model(model))
        .iter()
        .any(|m| packable(m.node) && target.rules[m.rule].action.name() == "unfuse")
}

/// Whether some graph of the model holds a MatMulNBits decomposed in the packed form.
fn any_packed_nbits(g: &Graph) -> bool {
    use crate::rewrite::unfuse::matmul_nbits::FORM_KEY;
    crate::ir::scope::graphs(g).iter().any(|sg| {
        sg.graph.order.iter().any(|&n| {
            sg.graph
                .node(n)
                .metadata(FORM_KEY)
                .is_some_and(|f| f.starts_with("packed"))
        })
    })
}

/// [`compile`] at the model's own opset.
fn compile_at_own_opset(
    model: &mut Model,
    target: &Target,
    opts: &Options,
    external: Option<&crate::io::ExternalData>,
) -> Report {
    let sizes = sizes(model, target, opts);
    let before = crate::cost::of_model(
        model,
        &opts.annotation,
        crate::cost::profile_of(target),
        &sizes,
    );
    let time_before = crate::timing::of_model(model, target, &opts.annotation, &sizes);
    if has_bodies(&model.graph) {
        // New names must not shadow (or be shadowed by) a name of an enclosing or inner scope.
        crate::ir::scope::reserve_names_across_scopes(&mut model.graph);
    }
    let mut report = compile_graph(model, target, opts, sizes.clone(), None, external);
    if has_bodies(&model.graph) {
        crate::ir::scope::reserve_names_across_scopes(&mut model.graph);
        let header = header_of(model);
        let outer = {
            let cx = Cx::new(model, target, &sizes, &opts.annotation);
            OuterFacts::default().for_bodies_of(&cx)
        };
        let mut bodies = Bodies {
            header: &header,
            target,
            opts,
            sizes: &sizes,
            report: &mut report,
            external,
        };
        bodies.compile(&mut model.graph, &ScopePath::root(), &outer);
    }
    if let Some(note) = crate::cost::predict_for_target(model, target, opts)
        .as_ref()
        .and_then(|p| p.moved_note())
    {
        report.notes.push(note);
    }
    if let Some(c) = report.cost.as_mut() {
        c.before = before;
        c.after.add(&crate::cost::of_bodies(
            model,
            &model.graph,
            &opts.annotation,
            crate::cost::profile_of(target),
        ));
    }
    report.timing = time_before.and_then(|before| {
        let after = crate::timing::of_model(model, target, &opts.annotation, &sizes)?;
        Some(crate::timing::TimingOfSafety { before, after })
    });
    report
}

/// One graph's compile: rounds until nothing changes, settle, finish. `outer`: for a body
/// (held in `model.graph`), its enclosing scopes' facts.
fn compile_graph(
    model: &mut Model,
    target: &Target,
    opts: &Options,
    sizes: Sizes,
    outer: Option<&OuterFacts>,
    external: Option<&crate::io::ExternalData>,
) -> Report {
    let mut d = driver::Driver::new(model, target, opts, sizes, outer);
    d.external = external;
    let mut settled = None;
    for iteration in 0..opts.max_iterations {
        d.report.iterations = iteration + 1;
        let round = d.plan_round(model);
        let matched_at = d.applications;
        let mut changed = !d.apply(&mut model.graph, round.each).is_empty();
        changed |= d.run_per_rule(model, &round.per_rule);
        changed |= d.take_fallback_change();
        if changed {
            continue;
        }
        if d.settle(model, &round.matches) == 0 {
            // Nothing applied since this round matched: its matches are the graph's.
            settled = (d.applications == matched_at).then_some(round.matches);
            break;
        }
    }
    d.finish(model, settled)
}

/// The model's opsets and IR version around an empty graph: a body is compiled in it (its
/// computed payloads are the model's).
fn header_of(model: &Model) -> Model {
    Model {
        ir_version: model.ir_version,
        opset_import: model.opset_import.clone(),
        computed: model.computed.clone(),
        ..Model::default()
    }
}

/// The walk over the bodies of a compiled graph.
struct Bodies<'a> {
    header: &'a Model,
    target: &'a Target,
    opts: &'a Options,
    sizes: &'a Sizes,
    report: &'a mut Report,
    external: Option<&'a crate::io::ExternalData>,
}

impl Bodies<'_> {
    /// Compile every body of `g` (at `path`), and theirs, depth first in write order. Each is
    /// taken out of its node, compiled as the graph of a model with the main model's opsets,
    /// and put back.
    fn compile(&mut self, g: &mut Graph, path: &ScopePath, outer: &OuterFacts) {
        for n in g.order.clone() {
            if !g.nodes.contains_node(n) {
                continue;
            }
            let node = g.node_mut(n);
            let name = node.name().to_string();
            for a in node.attributes.make_mut() {
                let attr = a.name().to_string();
                if let Some(body) = a.g_mut() {
                    self.one(body, &path.child(&name, &attr, None), outer);
                }
                for (i, body) in a.graphs_mut().iter_mut().enumerate() {
                    self.one(body, &path.child(&name, &attr, Some(i)), outer);
                }
            }
        }
    }

    fn one(&mut self, body: &mut Graph, path: &ScopePath, outer: &OuterFacts) {
        let mut m = Model {
            graph: std::mem::take(body),
            ..self.header.clone()
        };
        let r = compile_graph(
            &mut m,
            self.target,
            self.opts,
            self.sizes.clone(),
            Some(outer),
            self.external,
        );
        merge_body_report(self.report, r, path);
        if has_bodies(&m.graph) {
            crate::ir::scope::reserve_names_across_scopes(&mut m.graph);
            let inner = {
                let cx = Cx::new(&m, self.target, self.sizes, &self.opts.annotation)
                    .in_body(&m.graph, outer);
                outer.for_bodies_of(&cx)
            };
            self.compile(&mut m.graph, path, &inner);
        }
        *body = m.graph;
    }
}

/// Add a body's report to the compile's, its nodes named by their scope path.
fn merge_body_report(into: &mut Report, r: Report, path: &ScopePath) {
    let q = |s: String| path.qualify(&s);
    into.applied.extend(r.applied.into_iter().map(|mut a| {
        a.node = q(a.node);
        a
    }));
    into.remaining.extend(r.remaining.into_iter().map(|mut f| {
        f.node = q(f.node);
        f
    }));
    into.fallbacks.extend(r.fallbacks.into_iter().map(|mut f| {
        f.node = q(f.node);
        f
    }));
    into.pinned.extend(r.pinned.into_iter().map(q));
    into.pieces.extend(r.pieces.into_iter().map(|mut p| {
        p.first = q(p.first);
        p
    }));
    into.notes
        .extend(r.notes.into_iter().map(|n| format!("{path}: {n}")));
}

/// Findings of `target` on `model`: every rule that would still do something, in the main
/// graph and in every body (inner nodes named by their scope path, `loop/body/conv_3`).
/// A model that [`compile`] would raise to opset 21 for the packed MatMulNBits decomposition is
/// checked as raised (on a copy: `model` is left as it is).
pub fn check(model: &mut Model, target: &Target, opts: &Options) -> Vec<Finding> {
    if opts.raise_opset && wants_packed_opset(model, target, opts) {
        let mut raised = model.clone();
        if crate::rewrite::opset::raise(&mut raised, crate::rewrite::opset::PACKED_OPSET).is_ok() {
            return check_at_own_opset(&mut raised, target, opts);
        }
    }
    check_at_own_opset(model, target, opts)
}

fn check_at_own_opset(model: &mut Model, target: &Target, opts: &Options) -> Vec<Finding> {
    let sizes = sizes(model, target, opts);
    let model: &Model = model;
    let cx = context(model, target, &sizes, opts);
    let mut out = check_graph(&cx, opts);
    if let Some(profile) = crate::cost::profile_of(target) {
        // A node no provider of the runtime takes: the output would not load.
        let p = crate::runtime::placement::predict_graph(
            model,
            &model.graph,
            cx.facts(),
            profile,
            &opts.annotation,
        );
        for &n in &model.graph.order {
            if let Some(crate::runtime::placement::Why::NoProvider(d)) = p.why(n) {
                let node = model.graph.node(n);
                out.push(Finding {
                    node: node.name().to_string(),
                    op: node.op_type.clone(),
                    rule: "runtime-cannot-load".into(),
                    action: "none".into(),
                    why: format!(
                        "no provider of the target's runtime ({} and the CPU provider) registers a kernel for this node: the session cannot be created",
                        profile.provider
                    ),
                    evidence: Vec::new(),
                    kind: FindingKind::WillNotLoad,
                    reason: Some(d.clone()),
                });
            }
        }
    }
    if has_bodies(&model.graph) {
        let outer = OuterFacts::default().for_bodies_of(&cx);
        check_bodies(
            model,
            &model.graph,
            &ScopePath::root(),
            &outer,
            target,
            opts,
            &sizes,
            &mut out,
        );
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn check_bodies(
    model: &Model,
    g: &Graph,
    path: &ScopePath,
    outer: &OuterFacts,
    target: &Target,
    opts: &Options,
    sizes: &Sizes,
    out: &mut Vec<Finding>,
) {
    for &n in &g.order {
        let node = g.node(n);
        for (attr, index, body) in crate::ir::scope::bodies(node) {
            let here = path.child(node.name(), attr, index);
            let cx = context(model, target, sizes, opts).in_body(body, outer);
            out.extend(check_graph(&cx, opts).into_iter().map(|mut f| {
                f.node = here.qualify(&f.node);
                f
            }));
            if has_bodies(body) {
                let inner = outer.for_bodies_of(&cx);
                check_bodies(model, body, &here, &inner, target, opts, sizes, out);
            }
        }
    }
}

/// A pass context on `model`'s main graph.
fn context<'a>(
    model: &'a Model,
    target: &'a Target,
    sizes: &'a Sizes,
    opts: &'a Options,
) -> Cx<'a> {
    let mut cx = Cx::new(model, target, sizes, &opts.annotation);
    cx.nchwc_block = opts.nchwc_block;
    cx.unpack_limit = opts.unpack_limit;
    cx
}

/// The findings of one graph (the context's): node names as they are in that graph.
fn check_graph(cx: &Cx, opts: &Options) -> Vec<Finding> {
    let matches = find(cx, &Opsets::from_model(cx.model));
    check_matches(cx, opts, &matches)
}

/// [`check_graph`] with the graph's matches already found.
fn check_matches(cx: &Cx, opts: &Options, matches: &[Match]) -> Vec<Finding> {
    let target = cx.target;
    let mut out = Vec::new();
    // Matches of rules with a fallback, by rule: planned below to see which would fall back.
    let mut with_fallback: BTreeMap<usize, Vec<(usize, NodeId)>> = BTreeMap::new();
    for m in matches {
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
        match pass.pending(cx, rule, m.node) {
            Pending::Fires => {
                if fallback.is_some() && pass.schedule() != Schedule::WhenSettled {
                    with_fallback
                        .entry(m.rule)
                        .or_default()
                        .push((out.len(), m.node));
                }
                out.push(finding(cx, m, FindingKind::Fires, None));
            }
            Pending::Denied => out.push(finding(cx, m, FindingKind::Denied, None)),
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
        for plan in pass.plan(cx, ri, &ids) {
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
    for (action, rules) in rules_by_pass(target, &matched_rules(matches)) {
        let Some(pass) = pass_for(action) else {
            continue;
        };
        for l in pass.leftovers(cx, &rules) {
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

/// Every graph of `model` with its facts under `sizes`: the main graph first, then the bodies
/// depth first in write order ([`crate::ir::scope::graphs`]), each body's outer-scope reads
/// seeded with what its enclosing graphs know.
pub fn scopes_with_facts<'a>(
    model: &'a Model,
    sizes: &Sizes,
) -> Vec<(crate::ir::scope::ScopedGraph<'a>, crate::infer::Facts)> {
    use std::collections::HashMap;
    let opts = sizes.infer_options();
    let mut seeds: HashMap<ScopePath, HashMap<String, crate::infer::Seed>> = HashMap::new();
    let mut out = Vec::new();
    for sg in crate::ir::scope::graphs(&model.graph) {
        let outer = sg.path.parent().and_then(|p| seeds.get(&p));
        let facts = match outer {
            None => crate::infer::infer_graph(model, sg.graph, &opts),
            Some(o) => {
                let lookup = |name: &str| o.get(name).cloned();
                crate::infer::infer_body(model, sg.graph, &opts, &lookup)
            }
        };
        if has_bodies(sg.graph) {
            let mut mine = outer.cloned().unwrap_or_default();
            for (i, v) in sg.graph.values.iter().enumerate() {
                let s = facts.seed(crate::ir::ValueId(i as u32));
                let own = !matches!(
                    v.origin,
                    crate::ir::Origin::Unbound | crate::ir::Origin::OuterScope
                );
                if own && (s.info.dtype.is_some() || s.info.shape.is_some()) {
                    mine.insert(v.name.to_string(), s);
                }
            }
            seeds.insert(sg.path.clone(), mine);
        }
        out.push((sg, facts));
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
    let facts = || cx.facts();
    Matcher::lazy(cx.graph(), &facts, opsets).find(cx.target)
}
