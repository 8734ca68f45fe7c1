//! The compiler's driver: infer facts, match the target's rules, apply their actions as
//! patches, repeat to a fixpoint (bounded), then check that no rule still fires.
//!
//! `check` and `compile` share one notion of "a rule fires": a match whose action is not
//! already satisfied (a `cpu` node already annotated, a `barrier` whose pieces fit).

use std::collections::{BTreeMap, HashSet};

use crate::infer::{Dim, Facts, InferOptions};
use crate::ir::{Graph, Model, NodeId, ValueId};
use crate::rewrite::barrier;
use crate::rewrite::cast::{cast_node, CastSpec};
use crate::rewrite::cpu::{self, DEFAULT_ANNOTATION, LAYER_ANN_KEY};
use crate::rewrite::split::{split_conv, SplitAxis as RwAxis, SplitOutcome};
use crate::rewrite::work::ShapeSource;
use crate::rules::facts::{FactDim, ValueFacts};
use crate::rules::matcher::{Match, Matcher, Opsets};
use crate::rules::schema::{Action, SplitAxis, Target};

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

/// `infer::Facts` seen through the interfaces the matcher and the rewrites use.
pub struct FactView<'a>(pub &'a Facts);

impl ValueFacts for FactView<'_> {
    fn dtype(&self, v: ValueId) -> Option<i32> {
        self.0.info(v).dtype
    }
    fn shape(&self, v: ValueId) -> Option<Vec<FactDim>> {
        self.0.info(v).shape.as_ref().map(|s| {
            s.iter()
                .map(|d| match d {
                    Dim::Known(k) => FactDim::Known(*k),
                    Dim::Sym(n) => FactDim::Sym(n.clone()),
                    Dim::Unknown => FactDim::Unknown,
                })
                .collect()
        })
    }
    fn const_ints(&self, v: ValueId) -> Option<Vec<i64>> {
        self.0.const_value(v).and_then(|c| c.ints.clone())
    }
    fn is_constant(&self, v: ValueId) -> bool {
        self.0.is_constant(v)
    }
}

impl ShapeSource for FactView<'_> {
    fn dims(&self, v: ValueId) -> Option<Vec<i64>> {
        self.0.info(v).dims_known()
    }
    fn dtype(&self, v: ValueId) -> Option<i32> {
        self.0.info(v).dtype
    }
}

/// Default sizes from the target's barrier rules: `batch` (axis 0 of a graph input),
/// `spatial` (axes 2.. of a rank-4 graph input), `default` (any other), or a dim's own name.
fn barrier_defaults(target: &Target) -> BTreeMap<String, i64> {
    let mut defaults: BTreeMap<String, i64> = BTreeMap::new();
    for r in &target.rules {
        if let Action::Barrier { dims, .. } = &r.action {
            for (k, v) in dims {
                defaults.entry(k.clone()).or_insert(*v);
            }
        }
    }
    defaults
}

/// Sizes for the graph inputs' dims that the file leaves open: by name (`--dim` first, then the
/// defaults of the target's barrier rules), and by position for dims without a name (`-1`,
/// missing). Returns (named sizes, (input index, axis) -> size for unnamed dims).
pub fn dim_sizes(model: &Model, target: &Target, opts: &Options) -> BTreeMap<String, i64> {
    input_dims(model, target, opts).0
}

type Positional = Vec<(usize, usize, i64)>;

fn input_dims(
    model: &Model,
    target: &Target,
    opts: &Options,
) -> (BTreeMap<String, i64>, Positional) {
    use crate::proto::tensor_shape_proto::dimension::Value as DV;
    let mut named: BTreeMap<String, i64> = BTreeMap::new();
    let mut by_position: BTreeMap<(String, usize), i64> = BTreeMap::new();
    for (k, v) in &opts.dims {
        match k.strip_suffix(']').and_then(|k| k.rsplit_once('[')) {
            Some((input, axis)) if axis.parse::<usize>().is_ok() => {
                by_position.insert((input.to_string(), axis.parse().unwrap_or(0)), *v);
            }
            _ => {
                named.insert(k.clone(), *v);
            }
        }
    }
    let mut positional = Vec::new();
    let defaults = barrier_defaults(target);
    let g = &model.graph;
    for (ii, i) in g.inputs.iter().enumerate() {
        if g.initializer(i.value).is_some() {
            continue;
        }
        let Some(crate::proto::type_proto::Value::TensorType(t)) =
            i.proto.r#type.as_ref().and_then(|t| t.value.as_ref())
        else {
            continue;
        };
        let Some(shape) = &t.shape else { continue };
        let rank = shape.dim.len();
        let input_name = g.value_name(i.value).to_string();
        for (axis, d) in shape.dim.iter().enumerate() {
            if let Some(v) = by_position.get(&(input_name.clone(), axis)) {
                positional.push((ii, axis, *v));
                continue;
            }
            let by_role = if axis == 0 {
                defaults.get("batch")
            } else if rank == 4 && axis >= 2 {
                defaults.get("spatial")
            } else {
                None
            };
            match &d.value {
                Some(DV::DimParam(name)) if !name.is_empty() => {
                    if named.contains_key(name) {
                        continue;
                    }
                    if let Some(v) = defaults.get(name).or(by_role).or(defaults.get("default")) {
                        named.insert(name.clone(), *v);
                    }
                }
                Some(DV::DimValue(v)) if *v > 0 => {}
                _ => {
                    if let Some(v) = by_role.or(defaults.get("default")) {
                        positional.push((ii, axis, *v));
                    }
                }
            }
        }
    }
    (named, positional)
}

fn infer(model: &Model, dims: &BTreeMap<String, i64>) -> Facts {
    let opts = InferOptions {
        dims: dims.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        ..Default::default()
    };
    crate::infer::infer_model(model, &opts)
}

/// Infer with the sizes above. Unnamed input dims are filled in the declarations for the
/// duration of the inference, then restored.
fn infer_with(model: &mut Model, target: &Target, opts: &Options) -> Facts {
    use crate::proto::tensor_shape_proto::dimension::Value as DV;
    let (named, positional) = input_dims(model, target, opts);
    let mut saved = Vec::new();
    for &(ii, axis, v) in &positional {
        if let Some(crate::proto::type_proto::Value::TensorType(t)) = model.graph.inputs[ii]
            .proto
            .r#type
            .as_mut()
            .and_then(|t| t.value.as_mut())
        {
            if let Some(d) = t.shape.as_mut().and_then(|s| s.dim.get_mut(axis)) {
                saved.push((ii, axis, d.value.clone()));
                d.value = Some(DV::DimValue(v));
            }
        }
    }
    let facts = infer(model, &named);
    for (ii, axis, old) in saved {
        if let Some(crate::proto::type_proto::Value::TensorType(t)) = model.graph.inputs[ii]
            .proto
            .r#type
            .as_mut()
            .and_then(|t| t.value.as_mut())
        {
            if let Some(d) = t.shape.as_mut().and_then(|s| s.dim.get_mut(axis)) {
                d.value = old;
            }
        }
    }
    facts
}

fn finding(
    target: &Target,
    g: &Graph,
    m: &Match,
    kind: FindingKind,
    reason: Option<String>,
) -> Finding {
    let rule = &target.rules[m.rule];
    let node = g.node(m.node);
    Finding {
        node: node.name().to_string(),
        op: op_label(g, m.node),
        rule: rule.id.clone(),
        action: rule.action.to_string(),
        why: rule.why.clone(),
        evidence: rule.evidence.clone(),
        kind,
        reason,
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

/// Does the node read or write a value of this element type (a `cast` has work to do)?
fn has_dtype(g: &Graph, n: NodeId, dtype: i32, facts: &Facts) -> bool {
    let node = g.node(n);
    node.inputs
        .iter()
        .chain(node.outputs.iter())
        .flatten()
        .any(|v| facts.info(*v).dtype == Some(dtype))
}

fn op_label(g: &Graph, n: NodeId) -> String {
    let node = g.node(n);
    if node.domain().is_empty() {
        node.op_type.clone()
    } else {
        format!("{}::{}", node.domain(), node.op_type)
    }
}

/// The smallest budget among the target's barrier rules that match some node, with its rule.
fn barrier_rule(target: &Target, matches: &[Match]) -> Option<(usize, u64)> {
    matches
        .iter()
        .filter_map(|m| match &target.rules[m.rule].action {
            Action::Barrier { budget, .. } => {
                Some((m.rule, budget.clamp(1.0, u64::MAX as f64) as u64))
            }
            _ => None,
        })
        .min_by_key(|&(r, b)| (b, r))
}

/// Findings of `target` on `model`: every rule that would still do something.
pub fn check(model: &mut Model, target: &Target, opts: &Options) -> Vec<Finding> {
    let facts = infer_with(model, target, opts);
    let model = &*model;
    let view = FactView(&facts);
    let opsets = Opsets::from_model(model);
    let g = &model.graph;
    let matches = Matcher::new(g, &view, &opsets).find(target);
    let mut out = Vec::new();
    for m in &matches {
        match &target.rules[m.rule].action {
            Action::Cpu if cpu::is_pinned(g, m.node, &opts.annotation) => {}
            Action::Cast { from, .. } if !has_dtype(g, m.node, *from, &facts) => {}
            Action::Barrier { .. } => {}
            Action::Deny => out.push(finding(target, g, m, FindingKind::Denied, None)),
            _ => out.push(finding(target, g, m, FindingKind::Fires, None)),
        }
    }
    if let Some((ri, budget)) = barrier_rule(target, &matches) {
        out.extend(barrier_findings(target, g, &view, ri, budget));
    }
    out
}

fn barrier_findings(
    target: &Target,
    g: &Graph,
    view: &FactView,
    ri: usize,
    budget: u64,
) -> Vec<Finding> {
    let rule = &target.rules[ri];
    let mk = |node: String, reason: String| Finding {
        node,
        op: String::new(),
        rule: rule.id.clone(),
        action: rule.action.to_string(),
        why: rule.why.clone(),
        evidence: rule.evidence.clone(),
        kind: FindingKind::OverBudget,
        reason: Some(reason),
    };
    match barrier::pieces(g, view) {
        Ok(pieces) => pieces
            .into_iter()
            .filter(|p| p.work > budget && p.nodes > 1)
            .map(|p| {
                mk(
                    p.first.clone(),
                    format!(
                        "a GPU piece of {} nodes from here is estimated at {:.3e} work units, over the budget {:.3e}",
                        p.nodes, p.work as f64, budget as f64
                    ),
                )
            })
            .collect(),
        Err(e) => vec![mk(String::new(), e)],
    }
}

/// Rewrite `model` for `target` until no rule fires (or only denials/unsupported remain).
pub fn compile(model: &mut Model, target: &Target, opts: &Options) -> Report {
    let mut report = Report {
        target: target.name.clone(),
        annotation: opts.annotation.clone(),
        ..Report::default()
    };
    let opset = model.opset("").unwrap_or(1);
    let opsets = Opsets::from_model(model);
    let used_before = used_values(&model.graph);
    let mut stuck: HashSet<(usize, NodeId)> = HashSet::new();
    for iteration in 0..opts.max_iterations {
        report.iterations = iteration + 1;
        let facts = infer_with(model, target, opts);
        let view = FactView(&facts);
        let matches = Matcher::new(&model.graph, &view, &opsets).find(target);
        let mut touched: HashSet<NodeId> = HashSet::new();
        let mut pins: Vec<(usize, NodeId)> = Vec::new();
        let mut changed = false;
        let mut patches = Vec::new();
        let mut unfuse_sets: BTreeMap<usize, HashSet<ValueId>> = BTreeMap::new();
        {
            let g = &model.graph;
            for m in &matches {
                let rule = &target.rules[m.rule];
                let name = g.node(m.node).name().to_string();
                if stuck.contains(&(m.rule, m.node)) {
                    continue;
                }
                if m.nodes().iter().any(|n| touched.contains(n)) {
                    continue;
                }
                let result: Result<Option<crate::rewrite::Patch>, String> = match &rule.action {
                    Action::Deny | Action::Barrier { .. } => Ok(None),
                    Action::Cpu => {
                        if !cpu::is_pinned(g, m.node, &opts.annotation) {
                            pins.push((m.rule, m.node));
                        }
                        Ok(None)
                    }
                    Action::Unfuse => {
                        // Unfused together per rule (NCHWc regions convert as a whole).
                        let key = g.node(m.node).outputs.iter().flatten().next().copied();
                        if let Some(v) = key {
                            unfuse_sets.entry(m.rule).or_default().insert(v);
                            touched.extend(m.nodes());
                            continue;
                        }
                        Err("the node has no output to identify it by".to_string())
                    }
                    Action::Split { axis, max } => {
                        let ax = match axis {
                            SplitAxis::Channels => RwAxis::Channels,
                            SplitAxis::OutChannels => RwAxis::OutChannels,
                            SplitAxis::Batch => RwAxis::Batch,
                        };
                        let batch =
                            g.node(m.node)
                                .inputs
                                .first()
                                .copied()
                                .flatten()
                                .and_then(|x| {
                                    facts
                                        .info(x)
                                        .shape
                                        .as_ref()
                                        .and_then(|s| s.first())
                                        .and_then(|d| d.known())
                                });
                        let max = i64::try_from(*max).unwrap_or(i64::MAX);
                        match split_conv(g, m.node, opset, &rule.id, ax, max, batch) {
                            Ok(p) => Ok(Some(p)),
                            Err(SplitOutcome::Fits) => Ok(None),
                            Err(SplitOutcome::Unsupported(r)) => Err(r),
                        }
                    }
                    Action::Cast { from, .. } if !has_dtype(g, m.node, *from, &facts) => Ok(None),
                    Action::Cast { from, to } => {
                        let spec = CastSpec {
                            from: *from,
                            to: *to,
                            inputs: None,
                        };
                        cast_node(g, m.node, &rule.id, &spec, &|v| facts.info(v).dtype).map(Some)
                    }
                };
                match result {
                    Ok(Some(p)) => {
                        touched.extend(m.nodes());
                        patches.push((m.rule, m.node, name, op_label(g, m.node), p));
                    }
                    Ok(None) => {}
                    Err(reason) => {
                        stuck.insert((m.rule, m.node));
                        report.remaining.push(finding(
                            target,
                            g,
                            m,
                            FindingKind::Unsupported,
                            Some(reason),
                        ));
                    }
                }
            }
        }
        let mut value_map: std::collections::HashMap<ValueId, ValueId> = Default::default();
        for (ri, node, name, op, mut p) in patches {
            let rule = &target.rules[ri];
            p.remap(&value_map);
            match p.apply_with_map(&mut model.graph) {
                Ok((created, replaced)) => {
                    value_map.extend(replaced);
                    changed = true;
                    report.applied.push(Applied {
                        rule: rule.id.clone(),
                        action: rule.action.name().to_string(),
                        node: name,
                        op,
                        nodes: created.len(),
                    });
                }
                Err(e) => {
                    stuck.insert((ri, node));
                    report.remaining.push(Finding {
                        node: name,
                        op,
                        rule: rule.id.clone(),
                        action: rule.action.to_string(),
                        why: rule.why.clone(),
                        evidence: rule.evidence.clone(),
                        kind: FindingKind::Unsupported,
                        reason: Some(e.0),
                    });
                }
            }
        }
        for (ri, set) in unfuse_sets {
            let rule = &target.rules[ri];
            let uopts = crate::rewrite::unfuse::UnfuseOptions {
                rule: &rule.id,
                external: None,
                nchwc_block_size: None,
            };
            let ur = crate::rewrite::unfuse::unfuse_all_with(model, &uopts, |n| {
                n.outputs.iter().flatten().any(|v| set.contains(v))
            });
            for u in &ur.unfused {
                changed = true;
                report.applied.push(Applied {
                    rule: rule.id.clone(),
                    action: "unfuse".into(),
                    node: u.node.clone(),
                    op: if u.domain.is_empty() {
                        u.op_type.clone()
                    } else {
                        format!("{}::{}", u.domain, u.op_type)
                    },
                    nodes: u.new_nodes,
                });
            }
            for sk in &ur.unsupported {
                let g = &model.graph;
                if let Some(&n) = g.order.iter().find(|&&n| {
                    let node = g.node(n);
                    node.name() == sk.node
                        && node.op_type == sk.op_type
                        && node.outputs.iter().flatten().any(|v| set.contains(v))
                }) {
                    stuck.insert((ri, n));
                }
                report.remaining.push(Finding {
                    node: sk.node.clone(),
                    op: format!("{}::{}", sk.domain, sk.op_type),
                    rule: rule.id.clone(),
                    action: rule.action.to_string(),
                    why: rule.why.clone(),
                    evidence: rule.evidence.clone(),
                    kind: FindingKind::Unsupported,
                    reason: Some(sk.reason.clone()),
                });
            }
        }
        // Pins, grouped by rule, in match order.
        let mut by_rule: BTreeMap<usize, Vec<NodeId>> = BTreeMap::new();
        for (ri, n) in pins {
            if model.graph.nodes.contains_node(n) {
                by_rule.entry(ri).or_default().push(n);
            }
        }
        for (ri, nodes) in by_rule {
            let rule = &target.rules[ri];
            let added = cpu::pin(&mut model.graph, &nodes, &rule.id, &opts.annotation);
            if !added.is_empty() {
                changed = true;
                for n in &added {
                    report.applied.push(Applied {
                        rule: rule.id.clone(),
                        action: "cpu".into(),
                        node: model.graph.node(*n).name().to_string(),
                        op: op_label(&model.graph, *n),
                        nodes: 1,
                    });
                }
            }
        }
        if changed {
            continue;
        }
        // The structure is stable: cut GPU partitions under the budget, one cut at a time.
        if let Some((ri, budget)) = barrier_rule(target, &matches) {
            let rule = &target.rules[ri];
            let mut cuts = 0usize;
            loop {
                let facts = infer_with(model, target, opts);
                let view = FactView(&facts);
                match barrier::next_cut(&model.graph, &view, budget, &rule.id, &opts.annotation) {
                    Ok(Some(p)) => {
                        let at = p.origin.clone();
                        match p.apply(&mut model.graph) {
                            Ok(created) => {
                                cuts += 1;
                                report.applied.push(Applied {
                                    rule: rule.id.clone(),
                                    action: "barrier".into(),
                                    node: at,
                                    op: "Identity".into(),
                                    nodes: created.len(),
                                });
                            }
                            Err(e) => {
                                report.remaining.push(Finding {
                                    node: at,
                                    op: String::new(),
                                    rule: rule.id.clone(),
                                    action: rule.action.to_string(),
                                    why: rule.why.clone(),
                                    evidence: rule.evidence.clone(),
                                    kind: FindingKind::Unsupported,
                                    reason: Some(e.0),
                                });
                                break;
                            }
                        }
                        if cuts > 100_000 {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        report.remaining.push(Finding {
                            node: String::new(),
                            op: String::new(),
                            rule: rule.id.clone(),
                            action: rule.action.to_string(),
                            why: rule.why.clone(),
                            evidence: rule.evidence.clone(),
                            kind: FindingKind::Unsupported,
                            reason: Some(e),
                        });
                        break;
                    }
                }
            }
            if cuts > 0 {
                continue;
            }
        }
        break;
    }
    prune_orphans(&mut model.graph, &used_before);
    // What still fires (beyond what was already reported as stuck).
    let left = check(model, target, opts);
    for f in left {
        let dup = report
            .remaining
            .iter()
            .any(|r| r.rule == f.rule && r.node == f.node && r.kind == FindingKind::Unsupported);
        if !dup {
            report.remaining.push(f);
        }
    }
    let facts = infer_with(model, target, opts);
    let view = FactView(&facts);
    if barrier_rule(
        target,
        &Matcher::new(&model.graph, &view, &opsets).find(target),
    )
    .is_some()
    {
        report.pieces = barrier::pieces(&model.graph, &view).unwrap_or_default();
        let unknown = barrier::unknown_work(&model.graph, &view);
        if !unknown.is_empty() {
            let g = &model.graph;
            let names: Vec<String> = unknown
                .iter()
                .take(3)
                .map(|&n| format!("'{}' ({})", g.node(n).name(), g.node(n).op_type))
                .collect();
            report.notes.push(format!(
                "the work of {} node(s) could not be estimated (unknown shapes, e.g. {}); they count as 0 in the barrier budget. Give sizes with --dim NAME=VALUE or --dim INPUT[AXIS]=VALUE",
                unknown.len(),
                names.join(", ")
            ));
        }
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
