//! The matching engine: which rules of a target fire on which nodes, and — for a node — why
//! each rule did or did not.
//!
//! Predicates are three-valued: true, false, or unknown (a fact the matcher cannot see, such as
//! a shape that was not inferred). A rule fires only when its pattern is *true*; `not` of an
//! unknown is unknown, so a missing fact never makes a rule fire. Matches come in a fixed
//! order: higher `priority` first, then the target's rule order, then graph order.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use crate::ir::hash::FastMap;
use crate::ir::{Graph, Model, Node, NodeId, Origin, ValueId, IMPLICIT_SLOT};
use crate::tensor::dtype_name;

use super::derive::{attr_default, attr_value, show_dims, AttrVal, Derived, Shapes};
use super::pattern::{
    AttrCheck, AttrTest, DimPat, KernelState, Link, Lit, Num, Pattern, Pred, PredKind, SourceLoc,
    StrTest, TensorCheck, TensorTest,
};
use super::schema::{Action, Target};
use super::FactDim;
use crate::infer::Facts;
use crate::runtime::placement::{kernel_verdict, Verdict};
use crate::runtime::Profile;

/// The operator set versions a model imports, by domain (`""` for the default domain).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Opsets(BTreeMap<String, i64>);

impl Opsets {
    pub fn from_model(m: &Model) -> Self {
        let mut o = Opsets::default();
        for imp in &m.opset_import {
            o = o.with(
                imp.domain.as_deref().unwrap_or(""),
                imp.version.unwrap_or(0),
            );
        }
        o
    }
    pub fn with(mut self, domain: &str, version: i64) -> Self {
        let d = if domain == "ai.onnx" { "" } else { domain };
        self.0.insert(d.to_string(), version);
        self
    }
    pub fn get(&self, domain: &str) -> Option<i64> {
        let d = if domain == "ai.onnx" { "" } else { domain };
        self.0.get(d).copied()
    }
}

/// One rule firing on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Match {
    /// Index of the rule in [`Target::rules`].
    pub rule: usize,
    pub rule_id: String,
    pub priority: i64,
    pub action: Action,
    /// The node the rule's `match` was tested on.
    pub node: NodeId,
    /// Named nodes (`capture:`), in the order the pattern binds them.
    pub captures: Vec<(String, NodeId)>,
}

impl Match {
    /// The matched node, then the captured ones (without repeats).
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut out = vec![self.node];
        for (_, n) in &self.captures {
            if !out.contains(n) {
                out.push(*n);
            }
        }
        out
    }
    pub fn capture(&self, name: &str) -> Option<NodeId> {
        self.captures.iter().find(|c| c.0 == name).map(|c| c.1)
    }
}

/// Whether a rule matched a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Matched,
    /// A predicate is false.
    NoMatch,
    /// No predicate is false but one depends on a fact nobody knows.
    Unknown,
}

/// Why a rule did or did not match one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    pub rule_id: String,
    pub action: Action,
    pub outcome: Outcome,
    /// For a miss: the first false predicate (or the first unknown one when none is false).
    pub reason: Option<String>,
    /// Where that predicate is written.
    pub at: Option<SourceLoc>,
    pub captures: Vec<(String, NodeId)>,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.outcome {
            Outcome::Matched => "matches",
            Outcome::NoMatch => "no match",
            Outcome::Unknown => "unknown",
        };
        write!(f, "{} ({}): {verdict}", self.rule_id, self.action)?;
        if let Some(r) = &self.reason {
            write!(f, ": {r}")?;
        }
        if let Some(at) = &self.at {
            write!(f, " [{at}]")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tri {
    T,
    F,
    U,
}

/// A verdict and, when asked for, the reason and place of the deciding predicate.
#[derive(Clone)]
struct V {
    t: Tri,
    why: Option<(String, SourceLoc)>,
}

impl V {
    fn yes() -> V {
        V {
            t: Tri::T,
            why: None,
        }
    }
}

/// Matches rules against one graph. Build it once per graph and reuse it (for `explain` on
/// many nodes): the consumer lists that links need are built once, on first use.
pub struct Matcher<'a> {
    graph: &'a Graph,
    facts: FactsRef<'a>,
    opsets: &'a Opsets,
    /// The distinct nodes reading each value (subgraph reads excluded), by value id.
    users: OnceCell<Vec<Vec<NodeId>>>,
    /// Verdicts of the patterns of `followed_by` / `preceded_by` per (pattern address, node,
    /// want), with the captures they add. Nested links would otherwise walk every path through
    /// the graph, exponential in the nesting depth. Cleared for every rule (the addresses are
    /// only meaningful while that rule is borrowed).
    linked: RefCell<LinkMemo>,
    /// The execution provider of the target being matched (`provider:`), for
    /// `provider_kernel`; set by [`Matcher::find`] and [`Matcher::explain`].
    profile: Cell<Option<&'static Profile>>,
}

type LinkMemo = HashMap<(usize, NodeId, bool), (V, Vec<(String, NodeId)>)>;

/// A reason's text, written only when reasons are wanted (matching alone needs none).
fn text(want: bool, f: impl FnOnce() -> String) -> String {
    if want {
        f()
    } else {
        String::new()
    }
}

fn shown_domain(d: &str) -> String {
    if d.is_empty() {
        "the default domain".to_string()
    } else {
        d.to_string()
    }
}

fn one_of(items: &[String]) -> String {
    if items.len() == 1 {
        items[0].clone()
    } else {
        format!("one of {}", items.join(", "))
    }
}

fn lit_eq(v: &AttrVal, l: &Lit) -> bool {
    let num_eq = |a: f64, b: Num| Num::Float(a).cmp_num(b) == Some(std::cmp::Ordering::Equal);
    match (v, l) {
        (AttrVal::Int(a), Lit::Num(b)) => {
            Num::Int(*a).cmp_num(*b) == Some(std::cmp::Ordering::Equal)
        }
        (AttrVal::Float(a), Lit::Num(b)) => num_eq(*a, *b),
        (AttrVal::Str(a), Lit::Str(b)) => a == b,
        (AttrVal::Ints(a), Lit::Nums(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| Num::Int(*x).cmp_num(*y) == Some(std::cmp::Ordering::Equal))
        }
        (AttrVal::Floats(a), Lit::Nums(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| num_eq(*x, *y))
        }
        (AttrVal::Strs(a), Lit::Strs(b)) => a == b,
        _ => false,
    }
}

fn str_test_holds(t: &StrTest, s: Option<&str>) -> bool {
    match (t, s) {
        (StrTest::Exists(e), s) => *e == s.is_some(),
        (_, None) => false,
        (StrTest::OneOf(set), Some(s)) => set.iter().any(|x| x == s),
        (StrTest::Prefix(p), Some(s)) => s.starts_with(p.as_str()),
        (StrTest::Suffix(p), Some(s)) => s.ends_with(p.as_str()),
        (StrTest::Contains(p), Some(s)) => s.contains(p.as_str()),
    }
}

fn str_test_text(t: &StrTest) -> String {
    match t {
        StrTest::Exists(true) => "present".to_string(),
        StrTest::Exists(false) => "absent".to_string(),
        StrTest::OneOf(v) => one_of(v),
        StrTest::Prefix(p) => format!("a prefix `{p}`"),
        StrTest::Suffix(p) => format!("a suffix `{p}`"),
        StrTest::Contains(p) => format!("to contain `{p}`"),
    }
}

/// The facts a matcher reads: given, or inferred on first use (a target whose rules name ops
/// only never needs them, and a graph of 50,000 nodes is not inferred for it).
#[derive(Clone, Copy)]
enum FactsRef<'a> {
    Ready(&'a Facts),
    Lazy(&'a dyn Fn() -> &'a Facts),
}

impl<'a> Matcher<'a> {
    pub fn new(graph: &'a Graph, facts: &'a Facts, opsets: &'a Opsets) -> Self {
        Matcher::with_facts(graph, FactsRef::Ready(facts), opsets)
    }

    /// A matcher that asks `facts` for the facts the first time a rule's condition needs them.
    pub fn lazy(graph: &'a Graph, facts: &'a dyn Fn() -> &'a Facts, opsets: &'a Opsets) -> Self {
        Matcher::with_facts(graph, FactsRef::Lazy(facts), opsets)
    }

    fn with_facts(graph: &'a Graph, facts: FactsRef<'a>, opsets: &'a Opsets) -> Self {
        Matcher {
            graph,
            facts,
            opsets,
            users: OnceCell::new(),
            linked: RefCell::new(HashMap::new()),
            profile: Cell::new(None),
        }
    }

    fn facts(&self) -> &'a Facts {
        match self.facts {
            FactsRef::Ready(f) => f,
            FactsRef::Lazy(f) => f(),
        }
    }

    fn shapes(&self) -> Shapes<'a> {
        Shapes {
            facts: self.facts(),
        }
    }

    /// Every (rule, node) pair that matches, in the engine's fixed order.
    pub fn find(&self, target: &Target) -> Vec<Match> {
        self.profile
            .set(target.provider.as_deref().and_then(Profile::named));
        let mut out = Vec::new();
        // The nodes of each op type the rules name, in write order: a rule whose pattern names
        // its ops (an `op:` predicate at the top, which must hold for the pattern to) tries
        // those only. The table is keyed by the rules' ops (a few, none from the model), so a
        // node's op is looked up with the fast hasher and nodes of other ops cost one probe.
        let rule_ops: Vec<Option<Vec<&str>>> = target
            .rules
            .iter()
            .map(|r| required_ops(&r.pattern))
            .collect();
        let mut wanted: FastMap<&str, usize> = FastMap::default();
        for op in rule_ops.iter().flatten().flatten() {
            let next = wanted.len();
            wanted.entry(op).or_insert(next);
        }
        let mut by_op: Vec<Vec<(usize, NodeId)>> = vec![Vec::new(); wanted.len()];
        if !wanted.is_empty() {
            for (i, &n) in self.graph.order.iter().enumerate() {
                if let Some(&k) = wanted.get(self.graph.node(n).op_type.as_str()) {
                    by_op[k].push((i, n));
                }
            }
        }
        // And of each domain, for a rule that names its domains but not its ops.
        let mut by_domain: FastMap<&str, Vec<(usize, NodeId)>> = FastMap::default();
        let mut candidates: Vec<(usize, NodeId)> = Vec::new();
        for (ri, (rule, ops)) in target.rules.iter().zip(&rule_ops).enumerate() {
            self.linked.borrow_mut().clear();
            candidates.clear();
            if let Some(ops) = ops {
                for op in ops {
                    candidates.extend(&by_op[wanted[op]]);
                }
                candidates.sort_unstable();
                candidates.dedup();
            } else if let Some(domains) = required_domains(&rule.pattern) {
                if by_domain.is_empty() {
                    for (i, &n) in self.graph.order.iter().enumerate() {
                        let d = self.graph.node(n).domain();
                        by_domain.entry(d).or_default().push((i, n));
                    }
                }
                for d in domains {
                    candidates.extend(by_domain.get(d.as_str()).into_iter().flatten());
                }
                candidates.sort_unstable();
                candidates.dedup();
            } else if let Some(dtypes) = required_dtypes(&rule.pattern) {
                // A node can hold only if one of its inputs or outputs is of one of these
                // types: a look at the facts, not a walk of the pattern, per node.
                let of_type = |v: &Option<ValueId>| {
                    v.and_then(|v| self.facts().dtype(v))
                        .is_some_and(|d| dtypes.contains(&d))
                };
                for (i, &n) in self.graph.order.iter().enumerate() {
                    let node = self.graph.node(n);
                    if node.inputs.iter().chain(&node.outputs).any(of_type) {
                        candidates.push((i, n));
                    }
                }
            } else {
                candidates.extend(self.graph.order.iter().copied().enumerate());
            }
            // At most one match per candidate: room for them all at once, not a doubling
            // vector (a rule that names every Conv matches tens of thousands of nodes).
            out.reserve_exact(candidates.len());
            for &(_, n) in &candidates {
                let mut caps = Vec::new();
                if self.pattern(&rule.pattern, n, false, &mut caps).t == Tri::T {
                    out.push(Match {
                        rule: ri,
                        rule_id: rule.id.clone(),
                        priority: rule.priority,
                        action: rule.action.clone(),
                        node: n,
                        captures: caps,
                    });
                }
            }
        }
        // Stable: rule order and graph order are kept within a priority. (Matches are in rule
        // order, so when the rules are in priority order already nothing moves: no sort, and
        // no buffer of half the matches.)
        if !out.is_sorted_by_key(|m| std::cmp::Reverse(m.priority)) {
            out.sort_by_key(|m| std::cmp::Reverse(m.priority));
        }
        out
    }

    /// For each rule (in matching order), whether it matches `node` and why not.
    pub fn explain(&self, target: &Target, node: NodeId) -> Vec<Explanation> {
        self.profile
            .set(target.provider.as_deref().and_then(Profile::named));
        let mut order: Vec<usize> = (0..target.rules.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(target.rules[i].priority));
        order
            .into_iter()
            .map(|i| {
                let rule = &target.rules[i];
                self.linked.borrow_mut().clear();
                let mut caps = Vec::new();
                let v = if self.graph.nodes.contains_node(node) {
                    self.pattern(&rule.pattern, node, true, &mut caps)
                } else {
                    V {
                        t: Tri::F,
                        why: Some(("no such node".to_string(), rule.source.clone())),
                    }
                };
                let (reason, at) = match v.why {
                    Some((r, at)) if v.t != Tri::T => (Some(r), Some(at)),
                    _ => (None, None),
                };
                Explanation {
                    rule_id: rule.id.clone(),
                    action: rule.action.clone(),
                    outcome: match v.t {
                        Tri::T => Outcome::Matched,
                        Tri::F => Outcome::NoMatch,
                        Tri::U => Outcome::Unknown,
                    },
                    reason,
                    at,
                    captures: caps,
                }
            })
            .collect()
    }

    fn pattern(&self, p: &Pattern, n: NodeId, want: bool, caps: &mut Vec<(String, NodeId)>) -> V {
        let mut local = Vec::new();
        if let Some(name) = &p.capture {
            local.push((name.clone(), n));
        }
        let mut unknown: Option<V> = None;
        for pred in &p.preds {
            let v = self.pred(pred, n, want, &mut local);
            match v.t {
                Tri::F => return v,
                Tri::U if unknown.is_none() => unknown = Some(v),
                _ => {}
            }
        }
        if let Some(u) = unknown {
            return u;
        }
        caps.extend(local);
        V::yes()
    }

    fn pred(&self, p: &Pred, n: NodeId, want: bool, caps: &mut Vec<(String, NodeId)>) -> V {
        let node = self.graph.node(n);
        let verdict = |t: Tri, msg: &dyn Fn() -> String| V {
            t,
            why: (want && t != Tri::T).then(|| (msg(), p.at.clone())),
        };
        let bool_t = |b: bool| if b { Tri::T } else { Tri::F };
        match &p.kind {
            PredKind::Op(ops) => verdict(bool_t(ops.contains(&node.op_type)), &|| {
                format!("op is {}, needs {}", node.op_type, one_of(ops))
            }),
            PredKind::Domain(ds) => verdict(bool_t(ds.iter().any(|d| d == node.domain())), &|| {
                let want: Vec<String> = ds.iter().map(|d| shown_domain(d)).collect();
                format!(
                    "domain is {}, needs {}",
                    shown_domain(node.domain()),
                    one_of(&want)
                )
            }),
            PredKind::Name(t) => {
                let name = node.name.as_deref();
                verdict(bool_t(str_test_holds(t, name)), &|| {
                    format!(
                        "name is `{}`, needs {}",
                        name.unwrap_or(""),
                        str_test_text(t)
                    )
                })
            }
            PredKind::Opset(t) => match self.opsets.get(node.domain()) {
                None => verdict(Tri::U, &|| {
                    format!(
                        "the model imports no opset for {}",
                        shown_domain(node.domain())
                    )
                }),
                Some(v) => verdict(bool_t(t.holds(Num::Int(v))), &|| {
                    format!("opset is {v}, needs {t}")
                }),
            },
            PredKind::Attr(name, t) => self.attr(node, name, t, want, &p.at),
            PredKind::Metadata(key, t) => {
                let v = node.metadata(key);
                verdict(bool_t(str_test_holds(t, v)), &|| match v {
                    Some(v) => format!("metadata {key} is `{v}`, needs {}", str_test_text(t)),
                    None => format!("metadata {key} is absent, needs {}", str_test_text(t)),
                })
            }
            PredKind::Input(slot, t) => {
                let v = node.inputs.get(*slot).copied().flatten();
                self.tensor(v, &text(want, || format!("input {slot}")), t, want)
            }
            PredKind::Output(slot, t) => {
                let v = node.outputs.get(*slot).copied().flatten();
                self.tensor(v, &text(want, || format!("output {slot}")), t, want)
            }
            PredKind::AnyInput(t) | PredKind::AnyOutput(t) => {
                let (list, what) = match &p.kind {
                    PredKind::AnyInput(_) => (&node.inputs, "input"),
                    _ => (&node.outputs, "output"),
                };
                let mut first_f: Option<V> = None;
                let mut first_u: Option<V> = None;
                for (i, v) in list.iter().enumerate() {
                    let Some(v) = v else { continue };
                    let r = self.tensor(Some(*v), &text(want, || format!("{what} {i}")), t, want);
                    match r.t {
                        Tri::T => return V::yes(),
                        Tri::U if first_u.is_none() => first_u = Some(r),
                        Tri::F if first_f.is_none() => first_f = Some(r),
                        _ => {}
                    }
                }
                let (t, inner) = match first_u {
                    Some(u) => (Tri::U, u.why),
                    None => (Tri::F, first_f.and_then(|f| f.why)),
                };
                verdict(t, &|| match &inner {
                    Some((r, _)) => format!("no {what} matches ({r})"),
                    None => format!("the node has no {what}s"),
                })
            }
            PredKind::Flag(flag, expected) => {
                let name = match flag {
                    super::pattern::Flag::Depthwise => "depthwise",
                    super::pattern::Flag::Grouped => "grouped",
                };
                match self.shapes().flag(node, *flag) {
                    Derived::Known((b, detail)) => verdict(bool_t(b == *expected), &|| {
                        format!("{name} is {b} ({detail}), needs {expected}")
                    }),
                    Derived::NotApplicable(why) => verdict(bool_t(!*expected), &|| {
                        format!("{name} is false ({why}), needs {expected}")
                    }),
                    Derived::Unknown(why) => {
                        verdict(Tri::U, &|| format!("{name} is unknown: {why}"))
                    }
                }
            }
            PredKind::Fact(fact, t) => match self.shapes().fact(node, *fact) {
                Derived::Known(x) => verdict(bool_t(t.holds(x)), &|| {
                    format!("{} is {x}, needs {t}", fact.key())
                }),
                Derived::NotApplicable(why) => {
                    verdict(Tri::F, &|| format!("{} does not apply: {why}", fact.key()))
                }
                Derived::Unknown(why) => {
                    verdict(Tri::U, &|| format!("{} is unknown: {why}", fact.key()))
                }
            },
            PredKind::ProviderKernel(states) => {
                let need = || {
                    let words: Vec<String> = states.iter().map(|s| s.key().to_string()).collect();
                    one_of(&words)
                };
                match self.profile.get() {
                    None => verdict(Tri::U, &|| {
                        format!(
                            "provider_kernel is unknown: the target names no execution provider (`provider:`), needs {}",
                            need()
                        )
                    }),
                    Some(profile) if profile.openvino().is_some() => verdict(Tri::U, &|| {
                        format!(
                            "provider_kernel is unknown: {} claims clusters of nodes, not kernels, needs {}",
                            profile.provider,
                            need()
                        )
                    }),
                    Some(profile) => {
                        let opset = self.opsets.get(node.domain()).unwrap_or(1);
                        let v = kernel_verdict(profile, self.graph, self.facts(), n, opset);
                        let (state, detail) = match &v {
                            Verdict::Kernel(_) => (KernelState::Registered, None),
                            Verdict::Deficient(d) => (KernelState::Deficient, Some(d)),
                            Verdict::NoKernel(d) | Verdict::Declined(d) => {
                                (KernelState::Missing, Some(d))
                            }
                            Verdict::NoProvider(d) => (KernelState::Unloadable, Some(d)),
                            Verdict::Inlined(_, d) => (KernelState::Inlined, Some(d)),
                        };
                        verdict(bool_t(states.contains(&state)), &|| {
                            format!(
                                "provider_kernel is {}{} under {}, needs {}",
                                state.key(),
                                detail.map(|d| format!(" ({d})")).unwrap_or_default(),
                                profile.provider,
                                need()
                            )
                        })
                    }
                }
            }
            PredKind::FollowedBy(link) => self.followed_by(node, link, want, caps, &p.at),
            PredKind::PrecededBy(link) => self.preceded_by(node, link, want, caps, &p.at),
            PredKind::Not(inner) => {
                let r = self.pattern(inner, n, want, &mut Vec::new());
                match r.t {
                    Tri::T => verdict(Tri::F, &|| "the `not` pattern matches".to_string()),
                    Tri::F => V::yes(),
                    Tri::U => V {
                        t: Tri::U,
                        why: r.why.map(|(m, at)| (format!("under `not`: {m}"), at)),
                    },
                }
            }
            PredKind::Any(alts) => {
                let mut reasons = Vec::new();
                let mut any_u = false;
                for alt in alts {
                    let mut local = Vec::new();
                    let r = self.pattern(alt, n, want, &mut local);
                    match r.t {
                        Tri::T => {
                            caps.extend(local);
                            return V::yes();
                        }
                        Tri::U => any_u = true,
                        Tri::F => {}
                    }
                    if let Some((m, _)) = r.why {
                        reasons.push(m);
                    }
                }
                let t = if any_u { Tri::U } else { Tri::F };
                verdict(t, &|| {
                    format!("none of `any` matches ({})", reasons.join(" | "))
                })
            }
            PredKind::All(parts) => {
                let mut local = Vec::new();
                let mut unknown: Option<V> = None;
                for part in parts {
                    let r = self.pattern(part, n, want, &mut local);
                    match r.t {
                        Tri::F => return r,
                        Tri::U if unknown.is_none() => unknown = Some(r),
                        _ => {}
                    }
                }
                if let Some(u) = unknown {
                    return u;
                }
                caps.extend(local);
                V::yes()
            }
        }
    }

    fn attr(&self, node: &Node, name: &str, t: &AttrTest, want: bool, at: &SourceLoc) -> V {
        let fail = |tri: Tri, msg: String| V {
            t: tri,
            why: want.then(|| (msg, at.clone())),
        };
        let written = node.attr(name).map(attr_value);
        if let Some(e) = t.exists {
            if e != written.is_some() {
                let state = if written.is_some() {
                    "present"
                } else {
                    "absent"
                };
                let need = if e { "present" } else { "absent" };
                return fail(Tri::F, format!("attribute {name} is {state}, needs {need}"));
            }
        }
        if t.checks.is_empty() {
            return V::yes();
        }
        let (value, default) = match written {
            Some(v) => (v, false),
            None => match attr_default(node.domain(), &node.op_type, name) {
                Some(v) => (v, true),
                None => {
                    return fail(
                        Tri::U,
                        format!("attribute {name} is absent and its default is not known"),
                    )
                }
            },
        };
        let shown = text(want, || {
            if default {
                format!("{value} (default)")
            } else {
                value.to_string()
            }
        });
        for c in &t.checks {
            let (ok, need) = match c {
                AttrCheck::Eq(l) => (lit_eq(&value, l), text(want, || format!("{l}"))),
                AttrCheck::Ne(l) => (!lit_eq(&value, l), text(want, || format!("not {l}"))),
                AttrCheck::In(ls) => (
                    ls.iter().any(|l| lit_eq(&value, l)),
                    text(want, || {
                        format!(
                            "one of [{}]",
                            ls.iter()
                                .map(|l| l.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }),
                ),
                AttrCheck::Cmp(op, x) => {
                    let holds = |v: Num| v.cmp_num(*x).is_some_and(|o| op.holds(o));
                    let ok = match &value {
                        AttrVal::Int(i) => holds(Num::Int(*i)),
                        AttrVal::Float(f) => holds(Num::Float(*f)),
                        AttrVal::Ints(v) => !v.is_empty() && v.iter().all(|&i| holds(Num::Int(i))),
                        AttrVal::Floats(v) => {
                            !v.is_empty() && v.iter().all(|&f| holds(Num::Float(f)))
                        }
                        _ => false,
                    };
                    let all = if matches!(value, AttrVal::Ints(_) | AttrVal::Floats(_)) {
                        "every element "
                    } else {
                        ""
                    };
                    (ok, text(want, || format!("{all}{} {x}", op.symbol())))
                }
            };
            if !ok {
                return fail(
                    Tri::F,
                    text(want, || {
                        format!("attribute {name} is {shown}, needs {need}")
                    }),
                );
            }
        }
        V::yes()
    }

    fn tensor(&self, v: Option<ValueId>, what: &str, t: &TensorTest, want: bool) -> V {
        let mut unknown: Option<V> = None;
        for (check, at) in &t.checks {
            let out = |tri: Tri, msg: &dyn Fn() -> String| V {
                t: tri,
                why: (want && tri != Tri::T).then(|| (msg(), at.clone())),
            };
            let bool_t = |b: bool| if b { Tri::T } else { Tri::F };
            let r = match (check, v) {
                (TensorCheck::Present(p), v) => out(bool_t(*p == v.is_some()), &|| {
                    if v.is_some() {
                        format!("{what} is present, needs absent")
                    } else {
                        format!("{what} is absent")
                    }
                }),
                (_, None) => out(Tri::F, &|| format!("{what} is absent")),
                (TensorCheck::Dtype(ts), Some(v)) => match self.facts().dtype(v) {
                    None => out(Tri::U, &|| format!("{what} dtype is unknown")),
                    Some(d) => out(bool_t(ts.contains(&d)), &|| {
                        let names: Vec<String> = ts.iter().map(|&t| dtype_name(t)).collect();
                        format!(
                            "{what} dtype is {}, needs {}",
                            dtype_name(d),
                            one_of(&names)
                        )
                    }),
                },
                (TensorCheck::Rank(nt), Some(v)) => match self.facts().shape(v) {
                    None => out(Tri::U, &|| format!("{what} shape is unknown")),
                    Some(s) => out(bool_t(nt.holds(Num::Int(s.len() as i64))), &|| {
                        format!("{what} rank is {}, needs {nt}", s.len())
                    }),
                },
                (TensorCheck::Dims(pats), Some(v)) => match self.facts().shape(v) {
                    None => out(Tri::U, &|| format!("{what} shape is unknown")),
                    Some(s) => {
                        let (tri, msg) = dims_match(pats, s);
                        out(tri, &|| format!("{what} shape {}: {msg}", show_dims(s)))
                    }
                },
                (TensorCheck::Static(want_static), Some(v)) => match self.facts().shape(v) {
                    None => out(Tri::U, &|| format!("{what} shape is unknown")),
                    Some(s) => {
                        let is_static = s.iter().all(|d| matches!(d, FactDim::Known(_)));
                        let has_sym = s.iter().any(|d| matches!(d, FactDim::Sym(_)));
                        // Unknown dims may still be static; a symbolic one never is.
                        let tri = if is_static || has_sym {
                            bool_t(is_static == *want_static)
                        } else {
                            Tri::U
                        };
                        out(tri, &|| {
                            format!(
                                "{what} shape {} is {}, needs {}",
                                show_dims(s),
                                if is_static { "static" } else { "not static" },
                                if *want_static { "static" } else { "dynamic" }
                            )
                        })
                    }
                },
                (TensorCheck::RankKnown(want), Some(v)) => {
                    let known = self.facts().shape(v).is_some();
                    out(bool_t(known == *want), &|| match self.facts().shape(v) {
                        Some(s) => format!("{what} rank is known ({})", s.len()),
                        None => format!("{what} rank is not known"),
                    })
                }
                (TensorCheck::Const(c), Some(v)) => {
                    let is = self.facts().is_constant(v);
                    out(bool_t(is == *c), &|| {
                        if is {
                            format!("{what} is a constant, needs a computed value")
                        } else {
                            format!("{what} is not known to be constant")
                        }
                    })
                }
                (TensorCheck::Initializer(i), Some(v)) => {
                    let is = matches!(self.graph.value(v).origin, Origin::Initializer);
                    out(bool_t(is == *i), &|| {
                        if is {
                            format!("{what} is an initializer")
                        } else {
                            format!("{what} is not an initializer")
                        }
                    })
                }
            };
            match r.t {
                Tri::F => return r,
                Tri::U if unknown.is_none() => unknown = Some(r),
                _ => {}
            }
        }
        unknown.unwrap_or_else(V::yes)
    }

    fn followed_by(
        &self,
        node: &Node,
        link: &Link,
        want: bool,
        caps: &mut Vec<(String, NodeId)>,
        at: &SourceLoc,
    ) -> V {
        let slots: Vec<usize> = match link.via {
            Some(s) => vec![s],
            None => (0..node.outputs.len()).collect(),
        };
        let mut first_miss: Option<String> = None;
        let mut any_u = false;
        for slot in slots {
            let Some(v) = node.outputs.get(slot).copied().flatten() else {
                first_miss.get_or_insert_with(|| format!("output {slot} is absent"));
                continue;
            };
            let users = self.users(v);
            if users.is_empty() {
                first_miss.get_or_insert_with(|| format!("output {slot} has no consumers"));
                continue;
            }
            if link.sole && users.len() != 1 {
                first_miss.get_or_insert_with(|| {
                    format!("output {slot} has {} consumers, needs one", users.len())
                });
                continue;
            }
            for &c in users {
                let mut local = Vec::new();
                let r = self.linked(&link.pattern, c, want, &mut local);
                match r.t {
                    Tri::T => {
                        caps.extend(local);
                        return V::yes();
                    }
                    Tri::U => any_u = true,
                    Tri::F => {}
                }
                if first_miss.is_none() {
                    if let Some((m, _)) = r.why {
                        first_miss = Some(format!("consumer {}: {m}", self.label(c)));
                    }
                }
            }
        }
        V {
            t: if any_u { Tri::U } else { Tri::F },
            why: want.then(|| {
                (
                    format!(
                        "no consumer matches `followed_by` ({})",
                        first_miss.unwrap_or_else(|| "the node has no outputs".to_string())
                    ),
                    at.clone(),
                )
            }),
        }
    }

    fn preceded_by(
        &self,
        node: &Node,
        link: &Link,
        want: bool,
        caps: &mut Vec<(String, NodeId)>,
        at: &SourceLoc,
    ) -> V {
        let slots: Vec<usize> = match link.via {
            Some(s) => vec![s],
            None => (0..node.inputs.len()).collect(),
        };
        let mut first_miss: Option<String> = None;
        let mut any_u = false;
        for slot in slots {
            let Some(v) = node.inputs.get(slot).copied().flatten() else {
                first_miss.get_or_insert_with(|| format!("input {slot} is absent"));
                continue;
            };
            let producer = match self.graph.value(v).origin {
                Origin::Node { node: p, .. } if self.graph.nodes.contains_node(p) => p,
                _ => {
                    first_miss
                        .get_or_insert_with(|| format!("input {slot} is not computed by a node"));
                    continue;
                }
            };
            if link.sole && self.users(v).len() != 1 {
                first_miss.get_or_insert_with(|| {
                    format!(
                        "input {slot} has {} consumers, needs one",
                        self.users(v).len()
                    )
                });
                continue;
            }
            let mut local = Vec::new();
            let r = self.linked(&link.pattern, producer, want, &mut local);
            match r.t {
                Tri::T => {
                    caps.extend(local);
                    return V::yes();
                }
                Tri::U => any_u = true,
                Tri::F => {}
            }
            if first_miss.is_none() {
                if let Some((m, _)) = r.why {
                    first_miss = Some(format!("producer {}: {m}", self.label(producer)));
                }
            }
        }
        V {
            t: if any_u { Tri::U } else { Tri::F },
            why: want.then(|| {
                (
                    format!(
                        "no producer matches `preceded_by` ({})",
                        first_miss.unwrap_or_else(|| "the node has no inputs".to_string())
                    ),
                    at.clone(),
                )
            }),
        }
    }

    /// The pattern of a link on the linked node, evaluated once per (pattern, node, want).
    fn linked(&self, p: &Pattern, n: NodeId, want: bool, caps: &mut Vec<(String, NodeId)>) -> V {
        let key = (p as *const Pattern as usize, n, want);
        let hit = self.linked.borrow().get(&key).cloned();
        if let Some((v, added)) = hit {
            caps.extend(added);
            return v;
        }
        let mut added = Vec::new();
        let v = self.pattern(p, n, want, &mut added);
        caps.extend(added.iter().cloned());
        self.linked.borrow_mut().insert(key, (v.clone(), added));
        v
    }

    /// The distinct nodes reading a value (not counting subgraph reads), in graph order.
    fn users(&self, v: ValueId) -> &[NodeId] {
        self.users
            .get_or_init(|| {
                self.graph
                    .consumers()
                    .iter()
                    .map(|list| {
                        let mut seen = HashSet::new();
                        list.iter()
                            .copied()
                            .filter(|&(n, slot)| slot != IMPLICIT_SLOT && seen.insert(n))
                            .map(|(n, _)| n)
                            .collect()
                    })
                    .collect()
            })
            .get(v.index())
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// `'name' (Op)` for messages.
    fn label(&self, n: NodeId) -> String {
        let node = self.graph.node(n);
        format!("'{}' ({})", node.name(), node.op_type)
    }
}

/// Match a `dims:` pattern against a shape.
fn dims_match(pats: &[DimPat], dims: &[FactDim]) -> (Tri, String) {
    let rest = pats.iter().position(|p| matches!(p, DimPat::Rest));
    let fixed = pats.len() - usize::from(rest.is_some());
    let pairs: Vec<(&DimPat, usize)> = match rest {
        None => {
            if dims.len() != pats.len() {
                return (
                    Tri::F,
                    format!("rank is {}, the pattern needs {}", dims.len(), pats.len()),
                );
            }
            pats.iter().zip(0..).collect()
        }
        Some(r) => {
            if dims.len() < fixed {
                return (
                    Tri::F,
                    format!("rank is {}, the pattern needs at least {fixed}", dims.len()),
                );
            }
            let tail = pats.len() - r - 1;
            let mut v: Vec<(&DimPat, usize)> = pats[..r].iter().zip(0..).collect();
            v.extend(pats[r + 1..].iter().zip(dims.len() - tail..));
            v
        }
    };
    let mut vars: HashMap<&str, &FactDim> = HashMap::new();
    let mut unknown: Option<String> = None;
    for (p, i) in pairs {
        let d = &dims[i];
        let (tri, msg) = match p {
            DimPat::Any | DimPat::Rest => (Tri::T, String::new()),
            DimPat::Num(t) => match d {
                FactDim::Known(x) => (
                    if t.holds(Num::Int(*x)) {
                        Tri::T
                    } else {
                        Tri::F
                    },
                    format!("dimension {i} is {x}, needs {t}"),
                ),
                FactDim::Sym(s) => (Tri::U, format!("dimension {i} is symbolic ({s})")),
                FactDim::Unknown => (Tri::U, format!("dimension {i} is unknown")),
            },
            DimPat::Sym(name) => match (d, name) {
                (FactDim::Sym(s), Some(want)) => (
                    if **s == **want { Tri::T } else { Tri::F },
                    format!("dimension {i} is {s}, needs symbol {want}"),
                ),
                (FactDim::Sym(_), None) => (Tri::T, String::new()),
                (FactDim::Known(x), _) => (Tri::F, format!("dimension {i} is {x}, needs a symbol")),
                (FactDim::Unknown, _) => (Tri::U, format!("dimension {i} is unknown")),
            },
            DimPat::Dynamic => match d {
                FactDim::Known(x) => (Tri::F, format!("dimension {i} is {x}, needs dynamic")),
                _ => (Tri::T, String::new()),
            },
            DimPat::Var(name) => match (d, vars.get(name.as_str())) {
                (FactDim::Unknown, _) => (Tri::U, format!("dimension {i} ({name}) is unknown")),
                (_, None) => {
                    vars.insert(name, d);
                    (Tri::T, String::new())
                }
                (FactDim::Known(a), Some(FactDim::Known(b))) => (
                    if a == b { Tri::T } else { Tri::F },
                    format!("dimension {i} is {a}, but {name} is {b}"),
                ),
                (FactDim::Sym(a), Some(FactDim::Sym(b))) if a == b => (Tri::T, String::new()),
                (_, Some(b)) => (
                    Tri::U,
                    format!("dimension {i} is {d}, {name} is {b}: equal sizes are not provable"),
                ),
            },
        };
        match tri {
            Tri::F => return (Tri::F, msg),
            Tri::U if unknown.is_none() => unknown = Some(msg),
            _ => {}
        }
    }
    match unknown {
        Some(m) => (Tri::U, m),
        None => (Tri::T, String::new()),
    }
}

/// `find` for one call: every match of `target` in `graph`.
/// Op types one of which a node must have for `p` to hold (`None`: any op may): those of a
/// top-level `op:`, of every alternative of an `any:`, or of one part of an `all:`.
fn required_ops(p: &Pattern) -> Option<Vec<&str>> {
    required(p, &|k| match k {
        PredKind::Op(ops) => Some(ops.iter().map(String::as_str).collect()),
        _ => None,
    })
}

/// What a node must have for `p` to hold, by `leaf` (what one top-level predicate requires):
/// the first predicate that requires something, where an `any:` requires what all its
/// alternatives do together (if each requires something) and an `all:` what one part does.
fn required<'p, T>(
    p: &'p Pattern,
    leaf: &impl Fn(&'p PredKind) -> Option<Vec<T>>,
) -> Option<Vec<T>> {
    p.preds.iter().find_map(|pred| match &pred.kind {
        PredKind::Any(alts) => {
            let mut all = Vec::new();
            for alt in alts {
                all.extend(required(alt, leaf)?);
            }
            Some(all)
        }
        PredKind::All(parts) => parts.iter().find_map(|q| required(q, leaf)),
        k => leaf(k),
    })
}

/// Element types one of which an input or output of a node must have for `p` to hold (`None`:
/// any node may): those a top-level `input:`, `output:`, `any_input:` or `any_output:` test
/// names, of every alternative of an `any:`, or of one part of an `all:`.
fn required_dtypes(p: &Pattern) -> Option<Vec<i32>> {
    fn of(t: &TensorTest) -> Option<Vec<i32>> {
        t.checks.iter().find_map(|(c, _)| match c {
            TensorCheck::Dtype(ts) => Some(ts.clone()),
            _ => None,
        })
    }
    required(p, &|k| match k {
        PredKind::Input(_, t)
        | PredKind::Output(_, t)
        | PredKind::AnyInput(t)
        | PredKind::AnyOutput(t) => of(t),
        _ => None,
    })
}

/// Likewise, the domains (canonical: `""` for the default one) of a top-level `domain:`.
fn required_domains(p: &Pattern) -> Option<&[String]> {
    p.preds.iter().find_map(|pred| match &pred.kind {
        PredKind::Domain(ds) => Some(ds.as_slice()),
        _ => None,
    })
}

pub fn find_matches(target: &Target, graph: &Graph, facts: &Facts, opsets: &Opsets) -> Vec<Match> {
    Matcher::new(graph, facts, opsets).find(target)
}

/// `explain` for one call: for each rule, whether it matches `node` and why not.
pub fn explain(
    target: &Target,
    graph: &Graph,
    facts: &Facts,
    opsets: &Opsets,
    node: NodeId,
) -> Vec<Explanation> {
    Matcher::new(graph, facts, opsets).explain(target, node)
}

/// The `deny` matches, as an error naming each refused node, its rule, why and evidence.
/// `Ok` when nothing is denied.
pub fn check_deny(target: &Target, graph: &Graph, matches: &[Match]) -> crate::Result<()> {
    let denied: Vec<&Match> = matches
        .iter()
        .filter(|m| m.action == Action::Deny)
        .collect();
    if denied.is_empty() {
        return Ok(());
    }
    let mut msg = format!(
        "target `{}` refuses this model ({} node{} denied):",
        target.name,
        denied.len(),
        if denied.len() == 1 { "" } else { "s" }
    );
    for m in denied {
        let (name, op) = match graph.nodes.node_weight(m.node) {
            Some(n) => (n.name(), n.op_type.as_str()),
            None => ("?", "?"),
        };
        msg.push_str(&format!("\n  node '{name}' ({op}): rule `{}`", m.rule_id));
        if let Some(rule) = target.rules.get(m.rule).filter(|r| r.id == m.rule_id) {
            msg.push_str(&format!(": {}", rule.why));
            if !rule.evidence.is_empty() {
                msg.push_str(&format!(" [evidence: {}]", rule.evidence.join(", ")));
            }
        }
    }
    Err(crate::Error::new(crate::ErrorKind::Usage, msg))
}

#[cfg(test)]
mod tests {
    use super::super::pattern::NumTest;
    use super::*;

    fn k(x: i64) -> FactDim {
        FactDim::Known(x)
    }

    #[test]
    fn dims_patterns() {
        let eq = |x| {
            DimPat::Num(NumTest {
                cmps: vec![(super::super::pattern::CmpOp::Eq, Num::Int(x))],
                one_of: None,
            })
        };
        let shape = [FactDim::Sym("N".into()), k(3), k(64), k(64)];
        let var = |s: &str| DimPat::Var(s.to_string());
        assert_eq!(
            dims_match(&[DimPat::Any, eq(3), var("H"), var("H")], &shape).0,
            Tri::T
        );
        assert_eq!(
            dims_match(&[DimPat::Any, eq(4), DimPat::Any, DimPat::Any], &shape).0,
            Tri::F
        );
        assert_eq!(dims_match(&[DimPat::Rest, eq(64)], &shape).0, Tri::T);
        assert_eq!(dims_match(&[eq(1), DimPat::Rest], &shape).0, Tri::U);
        assert_eq!(
            dims_match(&[DimPat::Sym(None), DimPat::Rest], &shape).0,
            Tri::T
        );
        assert_eq!(
            dims_match(&[DimPat::Dynamic, DimPat::Dynamic, DimPat::Rest], &shape).0,
            Tri::F
        );
        assert_eq!(dims_match(&[DimPat::Any, DimPat::Any], &shape).0, Tri::F);
        let odd = [k(1), k(3), k(64), k(32)];
        assert_eq!(
            dims_match(&[DimPat::Any, DimPat::Any, var("H"), var("H")], &odd).0,
            Tri::F
        );
    }

    /// Matches come by priority, highest first; within a priority, in rule order, each rule's
    /// in graph order: whether the rules are written in priority order (nothing to sort) or
    /// not.
    #[test]
    fn matches_by_priority_then_rule_then_graph_order() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx");
        let model = crate::load(&path).unwrap().model;
        let facts = crate::infer::infer_model(&model, &Default::default());
        let opsets = Opsets::from_model(&model);
        let m = Matcher::new(&model.graph, &facts, &opsets);
        let pos: HashMap<NodeId, usize> = model
            .graph
            .order
            .iter()
            .enumerate()
            .map(|(i, &n)| (n, i))
            .collect();
        // Rules a, b, c in this order: (priority, op); the order their matches must come in.
        type Rules<'a> = [(i64, &'a str); 3];
        let cases: [(Rules, [&str; 3]); 3] = [
            ([(1, "Conv"), (1, "Relu"), (0, "Add")], ["a", "b", "c"]),
            ([(0, "Add"), (1, "Conv"), (1, "Relu")], ["b", "c", "a"]),
            ([(0, "Conv"), (5, "Add"), (1, "Relu")], ["b", "c", "a"]),
        ];
        for (rules, want) in cases {
            let mut yaml = String::from("target: t\nrules:\n");
            for ((p, op), id) in rules.iter().zip(["a", "b", "c"]) {
                yaml.push_str(&format!(
                    "  - {{id: {id}, why: t, evidence: [], priority: {p}, action: cpu, match: {{op: {op}}}}}\n"
                ));
            }
            let target = crate::rules::parse_target_str("t.yaml", &yaml).unwrap();
            let found = m.find(&target);
            let ids: Vec<&str> = found.iter().map(|x| x.rule_id.as_str()).collect();
            let mut runs: Vec<&str> = ids.clone();
            runs.dedup();
            assert_eq!(runs, want, "{yaml}");
            for w in found.windows(2) {
                if w[0].rule == w[1].rule {
                    assert!(pos[&w[0].node] < pos[&w[1].node]);
                }
            }
        }
    }

    /// `find` tries only the nodes of the ops, domains or element types a rule names; on every
    /// built-in target and the sample (whose ops, domains and types vary), plus rules whose
    /// ops or types sit in `any:`/`all:`, one that names a domain only and ones that test the
    /// types of inputs and outputs, it finds what trying every node finds.
    #[test]
    fn narrowed_candidates_find_what_every_node_finds() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx");
        let sample = crate::load(&path).unwrap().model;
        let mut checked = 0;
        for model in [sample, typed_chain()] {
            checked += narrowed_on(&model);
        }
        assert!(checked > 80, "{checked} rules");
    }

    /// A chain whose element types change: float -> Shape -> int64 -> Cast -> double ->
    /// Cast -> int64, and an Identity of the float input.
    fn typed_chain() -> crate::ir::Model {
        use crate::proto::{
            tensor_shape_proto::{dimension::Value as D, Dimension},
            type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
            TensorShapeProto, TypeProto, ValueInfoProto,
        };
        let node = |op: &str, i: &str, o: &str, to: Option<i64>| NodeProto {
            op_type: Some(op.into()),
            name: Some(o.into()),
            input: vec![i.into()],
            output: vec![o.into()],
            attribute: to
                .map(|t| AttributeProto {
                    name: Some("to".into()),
                    r#type: Some(2),
                    i: Some(t),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let dim = |v: i64| Dimension {
            value: Some(D::DimValue(v)),
            ..Default::default()
        };
        let x = ValueInfoProto {
            name: Some("x".into()),
            r#type: Some(TypeProto {
                value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                    elem_type: Some(1),
                    shape: Some(TensorShapeProto {
                        dim: vec![dim(2), dim(3)],
                    }),
                })),
                ..Default::default()
            }),
            ..Default::default()
        };
        let out = |n: &str| ValueInfoProto {
            name: Some(n.into()),
            ..Default::default()
        };
        let g = GraphProto {
            name: Some("g".into()),
            node: vec![
                node("Shape", "x", "s", None),
                node("Cast", "s", "d", Some(11)),
                node("Cast", "d", "e", Some(7)),
                node("Identity", "x", "y", None),
            ],
            input: vec![x],
            output: vec![out("e"), out("y")],
            ..Default::default()
        };
        let m = ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            }],
            graph: Some(g),
            ..Default::default()
        };
        crate::import::import_model(m, None).unwrap()
    }

    /// [`narrowed_candidates_find_what_every_node_finds`] on one model: the rules checked.
    fn narrowed_on(model: &crate::ir::Model) -> usize {
        let facts = crate::infer::infer_model(model, &Default::default());
        let opsets = Opsets::from_model(model);
        let m = Matcher::new(&model.graph, &facts, &opsets);
        let extra = r#"
target: t
rules:
  - {id: any-ops, why: t, evidence: [], action: cpu, match: {any: [{op: Conv}, {op: [Relu, Add]}]}}
  - {id: all-ops, why: t, evidence: [], action: cpu, match: {all: [{name: {exists: true}}, {op: Resize}]}}
  - {id: any-open, why: t, evidence: [], action: cpu, match: {any: [{op: Conv}, {name: {exists: true}}]}}
  - {id: domain, why: t, evidence: [], action: cpu, match: {domain: ""}}
  - {id: no-domain, why: t, evidence: [], action: cpu, match: {domain: [com.microsoft]}}
  - {id: any-in, why: t, evidence: [], action: cpu, match: {any_input: {dtype: float}}}
  - {id: slot, why: t, evidence: [], action: cpu, match: {input: {1: {dtype: [int64, float], const: false}}}}
  - {id: any-dt, why: t, evidence: [], action: cpu, match: {any: [{any_output: {dtype: int64}}, {output: {0: {dtype: float}}}]}}
  - {id: all-dt, why: t, evidence: [], action: cpu, match: {all: [{name: {exists: true}}, {any_output: {dtype: int64}}]}}
  - {id: dt-open, why: t, evidence: [], action: cpu, match: {any: [{any_input: {dtype: float}}, {name: {exists: true}}]}}
  - {id: out-only, why: t, evidence: [], action: cpu, match: {any_output: {dtype: [int64, double]}}}
"#;
        let mut targets: Vec<_> = crate::rules::builtin::builtin_names()
            .into_iter()
            .map(|n| crate::rules::load_target(n).unwrap())
            .collect();
        targets.push(crate::rules::parse_target_str("t.yaml", extra).unwrap());
        let mut checked = 0;
        let mut matched = 0;
        for target in &targets {
            let found: Vec<(usize, NodeId)> =
                m.find(target).iter().map(|x| (x.rule, x.node)).collect();
            let mut every = Vec::new();
            for (ri, rule) in target.rules.iter().enumerate() {
                m.linked.borrow_mut().clear();
                for &n in &model.graph.order {
                    if m.pattern(&rule.pattern, n, false, &mut Vec::new()).t == Tri::T {
                        every.push((ri, n));
                    }
                }
                checked += 1;
            }
            let mut a = found.clone();
            a.sort_unstable();
            every.sort_unstable();
            assert_eq!(a, every, "target {}", target.name);
            matched += a.len();
        }
        assert!(matched > 0, "nothing matched");
        checked
    }
}
