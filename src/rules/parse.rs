//! YAML tree → typed target file, reporting every error with its place. Nothing here stops at
//! the first problem: a bad rule is skipped after all its errors are recorded, and the rest of
//! the file is still checked.

use super::diag::{Diagnostic, RuleErrors, Sources};
use super::ops;
use super::pattern::{
    AttrCheck, AttrTest, CmpOp, DimPat, Fact, Flag, KernelState, Link, Lit, Num, NumTest, Pattern,
    Pred, PredKind, SourceLoc, StrTest, TensorCheck, TensorTest,
};
use super::schema::{
    Action, BarrierLimit, CpuSubgraphs, DeviceSpec, Fallback, Rule, RuntimeSetting, SplitAxis,
};
use super::yaml::{Loc, Node, Value};
use crate::tensor::{dtype_from_name, dtype_name};

/// How a file is used: as a target (`--target`, `extends`) or as extra rules (`--rules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Target,
    Overlay,
}

/// One file, checked and typed; what is missing or wrong was reported and left out.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileDoc {
    pub target: Option<(String, Loc)>,
    pub description: Option<String>,
    pub extends: Vec<(String, Loc)>,
    pub rules: Vec<Rule>,
    pub runtime: Vec<RuntimeSetting>,
    pub disable: Vec<(String, Loc)>,
    pub fallback: Option<Fallback>,
    /// `approximate: allow|deny` for the target's rules.
    pub approximate: Option<bool>,
    /// `provider: NAME`: the execution provider whose placement the figures predict.
    pub provider: Option<String>,
    /// `cpu_subgraphs: annotate|partition`: how CPU work reaches the runtime.
    pub cpu_subgraphs: Option<CpuSubgraphs>,
    /// `device:`, the device model of the time estimates.
    pub device: DeviceSpec,
}

/// The keys of a target file.
pub(crate) const TOP_KEYS: &[&str] = &[
    "target",
    "description",
    "extends",
    "rules",
    "runtime",
    "disable",
    "fallback",
    "approximate",
    "provider",
    "cpu_subgraphs",
    "device",
];
/// The keys of a rule.
pub(crate) const RULE_KEYS: &[&str] = &[
    "id",
    "why",
    "evidence",
    "match",
    "action",
    "priority",
    "fallback",
    "approximate",
];
/// The keys of a runtime entry.
pub(crate) const RUNTIME_KEYS: &[&str] = &["key", "value", "why", "evidence"];
/// The predicate keys of a `match:` map.
pub(crate) const PRED_KEYS: &[&str] = &[
    "op",
    "domain",
    "name",
    "opset",
    "attr",
    "input",
    "output",
    "any_input",
    "any_output",
    "depthwise",
    "grouped",
    "kernel",
    "channels",
    "out_channels",
    "batch",
    "spatial",
    "work",
    "bytes",
    "metadata",
    "provider_kernel",
    "followed_by",
    "preceded_by",
    "not",
    "any",
    "all",
    "capture",
];
/// Extra keys of a `followed_by` / `preceded_by` map.
const LINK_KEYS: &[&str] = &["via", "sole"];
/// The keys of a tensor test (`input: {0: {...}}`).
pub(crate) const TENSOR_KEYS: &[&str] = &[
    "present",
    "dtype",
    "rank",
    "dims",
    "static",
    "rank_known",
    "const",
    "initializer",
];
const CMP_KEYS: &[&str] = &["eq", "ne", "lt", "le", "gt", "ge", "in"];
const ATTR_KEYS: &[&str] = &["exists", "eq", "ne", "in", "lt", "le", "gt", "ge"];
const STR_KEYS: &[&str] = &["exists", "eq", "in", "prefix", "suffix", "contains"];

type Fields<'n> = Vec<(&'n str, &'n Node, &'n Node)>;

fn field<'n>(f: &Fields<'n>, key: &str) -> Option<(&'n Node, &'n Node)> {
    f.iter()
        .find(|(k, _, _)| *k == key)
        .map(|(_, k, v)| (*k, *v))
}

/// Per-rule state: capture names seen, and whether we are under a `not`.
#[derive(Default)]
struct RuleCx {
    captures: Vec<(String, Loc)>,
    in_not: usize,
}

struct P<'a> {
    src: &'a Sources,
    errs: &'a mut RuleErrors,
    count: usize,
}

fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphanumeric())
        && c.all(|x| x.is_ascii_alphanumeric() || matches!(x, '-' | '_' | '.'))
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

fn backticked(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl<'a> P<'a> {
    fn here(&self, loc: Loc) -> SourceLoc {
        SourceLoc {
            file: self.src.name(loc.file).to_string(),
            line: loc.line,
            col: loc.col,
        }
    }
    fn diag(&self, loc: Loc, msg: impl Into<String>) -> Diagnostic {
        Diagnostic::at(self.src, loc, msg)
    }
    fn error(&mut self, d: Diagnostic) {
        self.errs.push(d);
        self.count += 1;
    }
    fn err(&mut self, loc: Loc, msg: impl Into<String>) {
        let d = self.diag(loc, msg);
        self.error(d);
    }
    /// "`what` must be EXPECTED, found KIND".
    fn type_err(&mut self, n: &Node, what: &str, expected: &str) {
        let d = self
            .diag(
                n.loc,
                format!("{what} must be {expected}, found {}", n.kind()),
            )
            .label(format!("expected {expected}"));
        self.error(d);
    }

    /// The entries of a map whose keys are all in `allowed`; other keys are reported.
    fn fields<'n>(&mut self, n: &'n Node, what: &str, allowed: &[&str]) -> Option<Fields<'n>> {
        let Some(m) = n.as_map() else {
            self.type_err(n, what, "a map");
            return None;
        };
        let mut out = Vec::with_capacity(m.len());
        for (k, v) in m {
            match k.as_str() {
                Some(s) if allowed.contains(&s) => out.push((s, k, v)),
                Some(s) => {
                    let mut d = self.diag(k.loc, format!("unknown key `{s}` in {what}"));
                    if let Some(hint) = ops::suggest(s, allowed.iter().copied()) {
                        d = d.label(format!("did you mean `{hint}`?"));
                    }
                    d = d.note(format!("{what} takes {}", backticked(allowed)));
                    self.error(d);
                }
                None => {
                    let d = self.diag(
                        k.loc,
                        format!("the keys of {what} are names, found {}", k.kind()),
                    );
                    self.error(d);
                }
            }
        }
        Some(out)
    }

    fn require<'n>(
        &mut self,
        map: &Node,
        f: &Fields<'n>,
        key: &str,
        what: &str,
    ) -> Option<(&'n Node, &'n Node)> {
        let got = field(f, key);
        if got.is_none() {
            let d = self
                .diag(map.loc, format!("{what} has no `{key}`"))
                .label(format!("`{key}` is required"));
            self.error(d);
        }
        got
    }

    fn string(&mut self, n: &Node, what: &str) -> Option<String> {
        match &n.value {
            Value::Str(s) => Some(s.clone()),
            _ => {
                self.type_err(n, what, "a string");
                None
            }
        }
    }

    /// One string or a list of strings, each with its place.
    fn strings(&mut self, n: &Node, what: &str) -> Option<Vec<(String, Loc)>> {
        match &n.value {
            Value::Str(s) => Some(vec![(s.clone(), n.loc)]),
            Value::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                let mut ok = true;
                for it in items {
                    match &it.value {
                        Value::Str(s) => out.push((s.clone(), it.loc)),
                        _ => {
                            self.type_err(it, &format!("each item of {what}"), "a string");
                            ok = false;
                        }
                    }
                }
                ok.then_some(out)
            }
            _ => {
                self.type_err(n, what, "a string or a list of strings");
                None
            }
        }
    }

    fn boolean(&mut self, n: &Node, what: &str) -> Option<bool> {
        match n.value {
            Value::Bool(b) => Some(b),
            _ => {
                self.type_err(n, what, "true or false");
                None
            }
        }
    }

    fn int(&mut self, n: &Node, what: &str) -> Option<i64> {
        match n.value {
            Value::Int(i) => Some(i),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
            _ => {
                self.type_err(n, what, "an integer");
                None
            }
        }
    }

    fn num(&mut self, n: &Node, what: &str) -> Option<Num> {
        match n.value {
            Value::Int(i) => Some(Num::Int(i)),
            Value::Float(f) if f.is_finite() => Some(Num::Float(f)),
            _ => {
                self.type_err(n, what, "a number");
                None
            }
        }
    }

    /// A number, a list of numbers (one of), or a map of comparisons.
    fn num_test(&mut self, n: &Node, what: &str) -> Option<NumTest> {
        match &n.value {
            Value::Int(_) | Value::Float(_) => Some(NumTest {
                cmps: vec![(CmpOp::Eq, self.num(n, what)?)],
                one_of: None,
            }),
            Value::Seq(items) => {
                if items.is_empty() {
                    self.err(n.loc, format!("{what} lists no numbers"));
                    return None;
                }
                let set: Vec<Option<Num>> = items
                    .iter()
                    .map(|i| self.num(i, &format!("each item of {what}")))
                    .collect();
                Some(NumTest {
                    cmps: vec![],
                    one_of: Some(set.into_iter().collect::<Option<Vec<_>>>()?),
                })
            }
            Value::Map(m) => {
                let f = self.fields(n, &format!("the comparison {what}"), CMP_KEYS)?;
                if m.is_empty() {
                    self.err(
                        n.loc,
                        format!("{what} needs a comparison: one of {}", backticked(CMP_KEYS)),
                    );
                    return None;
                }
                let mut t = NumTest::default();
                let mut ok = f.len() == m.len();
                for (key, _, v) in f {
                    let op = match key {
                        "eq" => CmpOp::Eq,
                        "ne" => CmpOp::Ne,
                        "lt" => CmpOp::Lt,
                        "le" => CmpOp::Le,
                        "gt" => CmpOp::Gt,
                        "ge" => CmpOp::Ge,
                        _ => {
                            // `in`
                            match &v.value {
                                Value::Seq(_) => {
                                    if let Some(inner) =
                                        self.num_test(v, &format!("`in` of {what}"))
                                    {
                                        t.one_of = inner.one_of;
                                    } else {
                                        ok = false;
                                    }
                                }
                                _ => {
                                    self.type_err(
                                        v,
                                        &format!("`in` of {what}"),
                                        "a list of numbers",
                                    );
                                    ok = false;
                                }
                            }
                            continue;
                        }
                    };
                    match self.num(v, &format!("`{key}` of {what}")) {
                        Some(x) => t.cmps.push((op, x)),
                        None => ok = false,
                    }
                }
                ok.then_some(t)
            }
            _ => {
                self.type_err(
                    n,
                    what,
                    "a number, a list of numbers or a comparison such as {gt: 1}",
                );
                None
            }
        }
    }

    fn lit(&mut self, n: &Node, what: &str) -> Option<Lit> {
        match &n.value {
            Value::Int(i) => Some(Lit::Num(Num::Int(*i))),
            Value::Float(f) => Some(Lit::Num(Num::Float(*f))),
            Value::Bool(b) => Some(Lit::Num(Num::Int(i64::from(*b)))),
            Value::Str(s) => Some(Lit::Str(s.clone())),
            Value::Seq(items) => {
                if items.iter().all(|i| matches!(i.value, Value::Str(_))) && !items.is_empty() {
                    Some(Lit::Strs(
                        items
                            .iter()
                            .filter_map(|i| i.as_str().map(str::to_string))
                            .collect(),
                    ))
                } else {
                    let nums: Vec<Option<Num>> = items
                        .iter()
                        .map(|i| self.num(i, &format!("each item of {what}")))
                        .collect();
                    Some(Lit::Nums(nums.into_iter().collect::<Option<Vec<_>>>()?))
                }
            }
            _ => {
                self.type_err(n, what, "a number, a string or a list");
                None
            }
        }
    }

    fn attr_test(&mut self, n: &Node, what: &str) -> Option<AttrTest> {
        match &n.value {
            Value::Map(m) => {
                let f = self.fields(n, &format!("the test {what}"), ATTR_KEYS)?;
                if m.is_empty() {
                    self.err(
                        n.loc,
                        format!("{what} needs a test: one of {}", backticked(ATTR_KEYS)),
                    );
                    return None;
                }
                let mut t = AttrTest::default();
                let mut ok = f.len() == m.len();
                for (key, _, v) in f {
                    let w = format!("`{key}` of {what}");
                    let check = match key {
                        "exists" => {
                            t.exists = self.boolean(v, &w);
                            ok &= t.exists.is_some();
                            continue;
                        }
                        "eq" => self.lit(v, &w).map(AttrCheck::Eq),
                        "ne" => self.lit(v, &w).map(AttrCheck::Ne),
                        "in" => match &v.value {
                            Value::Seq(items) if !items.is_empty() => {
                                let lits: Vec<Option<Lit>> = items
                                    .iter()
                                    .map(|i| self.lit(i, &format!("each item of {w}")))
                                    .collect();
                                lits.into_iter()
                                    .collect::<Option<Vec<_>>>()
                                    .map(AttrCheck::In)
                            }
                            _ => {
                                self.type_err(v, &w, "a non-empty list");
                                None
                            }
                        },
                        _ => {
                            let op = match key {
                                "lt" => CmpOp::Lt,
                                "le" => CmpOp::Le,
                                "gt" => CmpOp::Gt,
                                _ => CmpOp::Ge,
                            };
                            self.num(v, &w).map(|x| AttrCheck::Cmp(op, x))
                        }
                    };
                    match check {
                        Some(c) => t.checks.push(c),
                        None => ok = false,
                    }
                }
                ok.then_some(t)
            }
            Value::Null => {
                self.type_err(n, what, "a value or a test such as {gt: 1}");
                None
            }
            _ => Some(AttrTest {
                exists: None,
                checks: vec![AttrCheck::Eq(self.lit(n, what)?)],
            }),
        }
    }

    fn str_test(&mut self, n: &Node, what: &str) -> Option<StrTest> {
        match &n.value {
            Value::Str(_) | Value::Seq(_) => Some(StrTest::OneOf(
                self.strings(n, what)?.into_iter().map(|s| s.0).collect(),
            )),
            Value::Map(m) => {
                let f = self.fields(n, &format!("the test {what}"), STR_KEYS)?;
                if m.len() != 1 {
                    self.err(
                        n.loc,
                        format!("{what} takes exactly one of {}", backticked(STR_KEYS)),
                    );
                    return None;
                }
                let (key, _, v) = f.into_iter().next()?;
                let w = format!("`{key}` of {what}");
                match key {
                    "exists" => self.boolean(v, &w).map(StrTest::Exists),
                    "eq" | "in" => self
                        .strings(v, &w)
                        .map(|s| StrTest::OneOf(s.into_iter().map(|x| x.0).collect())),
                    "prefix" => self.string(v, &w).map(StrTest::Prefix),
                    "suffix" => self.string(v, &w).map(StrTest::Suffix),
                    _ => self.string(v, &w).map(StrTest::Contains),
                }
            }
            _ => {
                self.type_err(n, what, "a string, a list of strings or a test");
                None
            }
        }
    }

    fn dtypes(&mut self, n: &Node, what: &str) -> Option<Vec<i32>> {
        let names = self.strings(n, what)?;
        let mut out = Vec::with_capacity(names.len());
        let mut ok = true;
        for (s, loc) in names {
            match dtype_from_name(&s) {
                Some(t) => out.push(t),
                None => {
                    let all: Vec<String> =
                        (1..=crate::tensor::dtype::MAX).map(dtype_name).collect();
                    let mut d = self.diag(loc, format!("unknown element type `{s}`"));
                    if let Some(h) = ops::suggest(&s, all.iter().map(String::as_str)) {
                        d = d.label(format!("did you mean `{h}`?"));
                    }
                    self.error(d.note("element types are ONNX names: float, float16, int64, ..."));
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    fn dims(&mut self, n: &Node, what: &str) -> Option<Vec<DimPat>> {
        let Value::Seq(items) = &n.value else {
            self.type_err(n, what, "a list such as [N, {le: 64}, _, _]");
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        let mut rest_seen = false;
        for it in items {
            let p = match &it.value {
                Value::Str(s) if s == "_" => Some(DimPat::Any),
                Value::Str(s) if s == "..." => {
                    if rest_seen {
                        self.err(it.loc, "`...` may appear once in a dims pattern");
                        None
                    } else {
                        rest_seen = true;
                        Some(DimPat::Rest)
                    }
                }
                Value::Str(s) if s == "dynamic" => Some(DimPat::Dynamic),
                Value::Str(s) if is_ident(s) => Some(DimPat::Var(s.clone())),
                Value::Str(s) => {
                    let d = self
                        .diag(it.loc, format!("`{s}` is not a dimension pattern"))
                        .note("a dimension is `_`, `...`, `dynamic`, a number, a comparison, {sym: NAME} or a variable name");
                    self.error(d);
                    None
                }
                Value::Map(m) if m.len() == 1 && m[0].0.as_str() == Some("sym") => {
                    match &m[0].1.value {
                        Value::Bool(true) => Some(DimPat::Sym(None)),
                        Value::Str(s) => Some(DimPat::Sym(Some(s.clone()))),
                        _ => {
                            self.type_err(&m[0].1, "`sym`", "true or a dimension name");
                            None
                        }
                    }
                }
                _ => self
                    .num_test(it, &format!("a dimension of {what}"))
                    .map(DimPat::Num),
            };
            match p {
                Some(p) => out.push(p),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn tensor_test(&mut self, n: &Node, what: &str) -> Option<TensorTest> {
        let f = self.fields(n, what, TENSOR_KEYS)?;
        let mut t = TensorTest::default();
        let mut ok = true;
        for (key, k, v) in f {
            let w = format!("`{key}`");
            let check = match key {
                "present" => self.boolean(v, &w).map(TensorCheck::Present),
                "dtype" => self.dtypes(v, &w).map(TensorCheck::Dtype),
                "rank" => self.num_test(v, &w).map(TensorCheck::Rank),
                "dims" => self.dims(v, &w).map(TensorCheck::Dims),
                "static" => self.boolean(v, &w).map(TensorCheck::Static),
                "rank_known" => self.boolean(v, &w).map(TensorCheck::RankKnown),
                "const" => self.boolean(v, &w).map(TensorCheck::Const),
                _ => self.boolean(v, &w).map(TensorCheck::Initializer),
            };
            match check {
                Some(c) => t.checks.push((c, self.here(k.loc))),
                None => ok = false,
            }
        }
        ok.then_some(t)
    }

    /// `input: {0: {...}, 2: {...}}`: slot numbers and their tests.
    fn slots(&mut self, n: &Node, what: &str) -> Option<Vec<(usize, TensorTest)>> {
        let Some(m) = n.as_map() else {
            self.type_err(
                n,
                what,
                "a map from slot numbers to tests, such as {0: {dtype: int64}}",
            );
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (k, v) in m {
            let slot = match &k.value {
                Value::Int(i) if *i >= 0 => usize::try_from(*i).ok(),
                Value::Str(s) => s.parse::<usize>().ok(),
                _ => None,
            };
            let Some(slot) = slot else {
                let d = self
                    .diag(
                        k.loc,
                        format!("the keys of `{what}` are slot numbers (0, 1, ...)"),
                    )
                    .label("expected a number");
                self.error(d);
                ok = false;
                continue;
            };
            match self.tensor_test(v, &format!("{what} {slot}")) {
                Some(t) => out.push((slot, t)),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn patterns(&mut self, n: &Node, what: &str, rc: &mut RuleCx) -> Option<Vec<Pattern>> {
        let Value::Seq(items) = &n.value else {
            self.type_err(n, what, "a list of match maps");
            return None;
        };
        if items.is_empty() {
            self.err(n.loc, format!("{what} lists no alternatives"));
            return None;
        }
        let pats: Vec<Option<Pattern>> = items
            .iter()
            .map(|i| self.pattern(i, what, rc, false).map(|p| p.0))
            .collect();
        pats.into_iter().collect()
    }

    /// A `match:` map (or a nested one). Returns the pattern and, for links, `via`/`sole`.
    fn pattern(
        &mut self,
        n: &Node,
        what: &str,
        rc: &mut RuleCx,
        link: bool,
    ) -> Option<(Pattern, Option<usize>, bool)> {
        let allowed: Vec<&str> = if link {
            PRED_KEYS.iter().chain(LINK_KEYS).copied().collect()
        } else {
            PRED_KEYS.to_vec()
        };
        let before = self.count;
        let f = self.fields(n, what, &allowed)?;
        let mut pat = Pattern::default();
        let (mut via, mut sole) = (None, false);
        let mut ops_written: Option<Vec<(String, Loc)>> = None;
        let mut domains_written: Option<Vec<(&'static str, Loc)>> = None;
        for (key, k, v) in f {
            let w = format!("`{key}`");
            let kind = match key {
                "op" => {
                    let Some(names) = self.strings(v, &w) else {
                        continue;
                    };
                    ops_written = Some(names.clone());
                    Some(PredKind::Op(names.into_iter().map(|n| n.0).collect()))
                }
                "domain" => {
                    let Some(names) = self.strings(v, &w) else {
                        continue;
                    };
                    let mut canon = Vec::new();
                    for (d, loc) in names {
                        match ops::canonical_domain(&d) {
                            Some(c) => canon.push((c, loc)),
                            None => {
                                let mut diag = self.diag(loc, format!("unknown domain `{d}`"));
                                if let Some(h) =
                                    ops::suggest(&d, ops::KNOWN_DOMAINS.iter().copied())
                                {
                                    diag = diag.label(format!("did you mean `{h}`?"));
                                }
                                self.error(diag.note(
                                    "known domains: \"\" (or ai.onnx), ai.onnx.ml, ai.onnx.preview.training, com.microsoft, com.microsoft.nchwc",
                                ));
                            }
                        }
                    }
                    let kind = PredKind::Domain(canon.iter().map(|c| c.0.to_string()).collect());
                    domains_written = Some(canon);
                    Some(kind)
                }
                "name" => self.str_test(v, &w).map(PredKind::Name),
                "opset" => self.num_test(v, &w).map(PredKind::Opset),
                "attr" => {
                    let Some(m) = v.as_map() else {
                        self.type_err(v, &w, "a map from attribute names to tests");
                        continue;
                    };
                    for (ak, av) in m {
                        let Some(name) = ak.as_str() else {
                            self.type_err(ak, "an attribute name", "a string");
                            continue;
                        };
                        if let Some(t) = self.attr_test(av, &format!("attribute `{name}`")) {
                            pat.preds.push(Pred {
                                kind: PredKind::Attr(name.to_string(), t),
                                at: self.here(ak.loc),
                            });
                        }
                    }
                    None
                }
                "input" | "output" => {
                    if let Some(slots) = self.slots(v, key) {
                        for (slot, t) in slots {
                            pat.preds.push(Pred {
                                kind: if key == "input" {
                                    PredKind::Input(slot, t)
                                } else {
                                    PredKind::Output(slot, t)
                                },
                                at: self.here(k.loc),
                            });
                        }
                    }
                    None
                }
                "any_input" => self.tensor_test(v, &w).map(PredKind::AnyInput),
                "any_output" => self.tensor_test(v, &w).map(PredKind::AnyOutput),
                "depthwise" => self
                    .boolean(v, &w)
                    .map(|b| PredKind::Flag(Flag::Depthwise, b)),
                "grouped" => self
                    .boolean(v, &w)
                    .map(|b| PredKind::Flag(Flag::Grouped, b)),
                "kernel" | "channels" | "out_channels" | "batch" | "spatial" | "work" | "bytes" => {
                    let fact = match key {
                        "kernel" => Fact::Kernel,
                        "channels" => Fact::Channels,
                        "out_channels" => Fact::OutChannels,
                        "batch" => Fact::Batch,
                        "spatial" => Fact::Spatial,
                        "work" => Fact::Work,
                        _ => Fact::Bytes,
                    };
                    self.num_test(v, &w).map(|t| PredKind::Fact(fact, t))
                }
                "provider_kernel" => {
                    let Some(words) = self.strings(v, &w) else {
                        continue;
                    };
                    let mut states = Vec::with_capacity(words.len());
                    for (word, loc) in words {
                        match KernelState::from_key(&word) {
                            Some(st) => states.push(st),
                            None => {
                                let keys = KernelState::ALL.map(KernelState::key);
                                let mut d = self
                                    .diag(loc, format!("unknown `provider_kernel` state `{word}`"));
                                if let Some(h) = ops::suggest(&word, keys.iter().copied()) {
                                    d = d.label(format!("did you mean `{h}`?"));
                                }
                                self.error(d.note(format!(
                                    "`provider_kernel` is one of (or a list of): {}",
                                    keys.join(", ")
                                )));
                            }
                        }
                    }
                    if states.is_empty() {
                        continue;
                    }
                    Some(PredKind::ProviderKernel(states))
                }
                "metadata" => {
                    let Some(m) = v.as_map() else {
                        self.type_err(v, &w, "a map from metadata keys to tests");
                        continue;
                    };
                    for (mk, mv) in m {
                        let Some(name) = mk.as_str() else {
                            self.type_err(mk, "a metadata key", "a string");
                            continue;
                        };
                        if let Some(t) = self.str_test(mv, &format!("metadata `{name}`")) {
                            pat.preds.push(Pred {
                                kind: PredKind::Metadata(name.to_string(), t),
                                at: self.here(mk.loc),
                            });
                        }
                    }
                    None
                }
                "followed_by" | "preceded_by" => {
                    self.pattern(v, &w, rc, true).map(|(p, via, sole)| {
                        let l = Box::new(Link {
                            via,
                            sole,
                            pattern: p,
                        });
                        if key == "followed_by" {
                            PredKind::FollowedBy(l)
                        } else {
                            PredKind::PrecededBy(l)
                        }
                    })
                }
                "not" => {
                    rc.in_not += 1;
                    let p = self.pattern(v, &w, rc, false);
                    rc.in_not -= 1;
                    p.map(|p| PredKind::Not(Box::new(p.0)))
                }
                "any" => self.patterns(v, &w, rc).map(PredKind::Any),
                "all" => self.patterns(v, &w, rc).map(PredKind::All),
                "capture" => {
                    if let Some(name) = self.string(v, &w) {
                        if !is_ident(&name) {
                            self.err(v.loc, format!("capture name `{name}` is not a plain name (letters, digits, `_`)"));
                        } else if rc.in_not > 0 {
                            self.err(k.loc, "a `capture` under `not` can never be bound");
                        } else if let Some((_, first)) =
                            rc.captures.iter().find(|(c, _)| *c == name)
                        {
                            let d = self
                                .diag(
                                    v.loc,
                                    format!("capture `{name}` is used twice in this rule"),
                                )
                                .note(format!("first used at {}", self.src.place(first)));
                            self.error(d);
                        } else {
                            rc.captures.push((name.clone(), v.loc));
                            pat.capture = Some(name);
                        }
                    }
                    None
                }
                "via" => {
                    if let Some(i) = self.int(v, &w) {
                        match usize::try_from(i) {
                            Ok(s) => via = Some(s),
                            Err(_) => self.err(v.loc, "`via` is a slot number (0, 1, ...)"),
                        }
                    }
                    None
                }
                _ => {
                    // "sole"
                    sole = self.boolean(v, &w).unwrap_or(false);
                    None
                }
            };
            if let Some(kind) = kind {
                pat.preds.push(Pred {
                    kind,
                    at: self.here(k.loc),
                });
            }
        }
        match (ops_written, domains_written) {
            // Every domain named was unknown (and reported): nothing to check the ops against.
            (Some(_), Some(d)) if d.is_empty() => {}
            (Some(names), d) => self.check_ops(&names, d.as_deref()),
            _ => {}
        }
        // The cheap, selective predicates first; the rest keep their written order.
        pat.preds
            .sort_by_key(|p| !matches!(p.kind, PredKind::Op(_) | PredKind::Domain(_)));
        (self.count == before).then_some((pat, via, sole))
    }

    fn check_ops(&mut self, names: &[(String, Loc)], domains: Option<&[(&'static str, Loc)]>) {
        let in_domains: Vec<&str> = match domains {
            Some(d) => d.iter().map(|x| x.0).collect(),
            None => ops::KNOWN_DOMAINS.to_vec(),
        };
        let shown = |d: &str| {
            if d.is_empty() {
                "the default ONNX domain".to_string()
            } else {
                format!("`{d}`")
            }
        };
        for (op, loc) in names {
            if ops::is_known(op, &in_domains) {
                continue;
            }
            let elsewhere = ops::domains_of(op);
            if domains.is_some() && !elsewhere.is_empty() {
                let where_: Vec<String> = elsewhere.iter().map(|d| shown(d)).collect();
                let d = self
                    .diag(
                        *loc,
                        format!(
                            "operator `{op}` is not in {}",
                            in_domains
                                .iter()
                                .map(|d| shown(d))
                                .collect::<Vec<_>>()
                                .join(" or ")
                        ),
                    )
                    .label(format!("`{op}` is in {}", where_.join(", ")));
                self.error(d);
                continue;
            }
            let candidates: Vec<&str> = in_domains.iter().flat_map(|d| ops::ops_in(d)).collect();
            let mut d = self.diag(*loc, format!("unknown operator `{op}`"));
            if let Some(h) = ops::suggest(op, candidates.iter().copied()) {
                d = d.label(format!("did you mean `{h}`?"));
            }
            let d = d.note(
                "operators are checked against the ONNX operator list and ONNX Runtime's contrib and NCHWc ops",
            );
            self.error(d);
        }
    }

    fn action(&mut self, n: &Node) -> Option<Action> {
        let unknown = |p: &mut Self, name: &str, loc: Loc| {
            let mut d = p.diag(loc, format!("unknown action `{name}`"));
            if let Some(h) = ops::suggest(name, Action::NAMES.iter().copied()) {
                d = d.label(format!("did you mean `{h}`?"));
            }
            p.error(d.note(format!("actions: {}", backticked(&Action::NAMES))));
        };
        match &n.value {
            Value::Str(s) => match s.as_str() {
                "unfuse" => Some(Action::Unfuse),
                "cpu" => Some(Action::Cpu),
                "deny" => Some(Action::Deny),
                "split" | "cast" | "barrier" => {
                    let example = match s.as_str() {
                        "split" => "{split: {axis: channels, max: 64}}",
                        "cast" => "{cast: {from: float16, to: float}}",
                        _ => "{barrier: {budget: 1e9}}",
                    };
                    let d = self
                        .diag(n.loc, format!("action `{s}` needs parameters"))
                        .label(format!("write it as {example}"));
                    self.error(d);
                    None
                }
                other => {
                    unknown(self, other, n.loc);
                    None
                }
            },
            Value::Map(m) => {
                if m.len() != 1 {
                    self.err(
                        n.loc,
                        format!(
                            "an action is one name, or one name with its parameters; found {} keys",
                            m.len()
                        ),
                    );
                    return None;
                }
                let (k, params) = (&m[0].0, &m[0].1);
                let Some(name) = k.as_str() else {
                    self.type_err(k, "an action name", "a string");
                    return None;
                };
                match name {
                    "unfuse" | "cpu" | "deny" => {
                        let empty = match &params.value {
                            Value::Null => true,
                            Value::Map(m) => m.is_empty(),
                            _ => false,
                        };
                        if !empty {
                            self.err(params.loc, format!("action `{name}` takes no parameters"));
                            return None;
                        }
                        Some(match name {
                            "unfuse" => Action::Unfuse,
                            "cpu" => Action::Cpu,
                            _ => Action::Deny,
                        })
                    }
                    "split" => {
                        let f = self.fields(params, "`split`", &["axis", "max"])?;
                        let axis =
                            self.require(params, &f, "axis", "`split`")
                                .and_then(|(_, v)| {
                                    let s = self.string(v, "`axis`")?;
                                    let found =
                                        SplitAxis::ALL.iter().find(|(n, _)| *n == s).map(|x| x.1);
                                    if found.is_none() {
                                        let names: Vec<&str> =
                                            SplitAxis::ALL.iter().map(|x| x.0).collect();
                                        let mut d =
                                            self.diag(v.loc, format!("unknown split axis `{s}`"));
                                        if let Some(h) = ops::suggest(&s, names.iter().copied()) {
                                            d = d.label(format!("did you mean `{h}`?"));
                                        }
                                        self.error(d.note(format!("axes: {}", backticked(&names))));
                                    }
                                    found
                                });
                        let max = self
                            .require(params, &f, "max", "`split`")
                            .and_then(|(_, v)| {
                                let i = self.int(v, "`max`")?;
                                if i < 1 {
                                    self.err(v.loc, format!("`max` must be at least 1, found {i}"));
                                    return None;
                                }
                                Some(i as u64)
                            });
                        Some(Action::Split {
                            axis: axis?,
                            max: max?,
                        })
                    }
                    "cast" => {
                        let f = self.fields(params, "`cast`", &["from", "to", "isolated"])?;
                        let one = |p: &mut Self, key: &str| {
                            p.require(params, &f, key, "`cast`").and_then(|(_, v)| {
                                let t = p.dtypes(v, &format!("`{key}`"))?;
                                if t.len() != 1 {
                                    p.type_err(v, &format!("`{key}`"), "one element type");
                                    return None;
                                }
                                Some((t[0], v.loc))
                            })
                        };
                        let from = one(self, "from");
                        let to = one(self, "to");
                        let ((from, _), (to, to_loc)) = (from?, to?);
                        if from == to {
                            self.err(
                                to_loc,
                                format!("`cast` from {} to itself does nothing", dtype_name(from)),
                            );
                            return None;
                        }
                        let isolated = match field(&f, "isolated") {
                            None => false,
                            Some((_, v)) => {
                                let b = self.boolean(v, "`isolated`")?;
                                if b && (from != crate::tensor::dtype::FLOAT16
                                    || to != crate::tensor::dtype::FLOAT)
                                {
                                    self.err(
                                        v.loc,
                                        "`isolated` is ONNX Runtime's float16 rule: it needs `from: float16, to: float`",
                                    );
                                    return None;
                                }
                                b
                            }
                        };
                        Some(Action::Cast { from, to, isolated })
                    }
                    "barrier" => {
                        let f = self.fields(
                            params,
                            "`barrier`",
                            &["margin", "limit_ms", "budget", "dims"],
                        )?;
                        let positive = |p: &mut Self, key: &str| -> Option<Option<f64>> {
                            let Some((_, v)) = field(&f, key) else {
                                return Some(None);
                            };
                            let x = p.num(v, &format!("`{key}`"))?.as_f64();
                            if !(x > 0.0 && x.is_finite()) {
                                p.err(v.loc, format!("`{key}` must be greater than 0"));
                                return None;
                            }
                            Some(Some(x))
                        };
                        let margin = positive(self, "margin")?;
                        let limit_ms = positive(self, "limit_ms")?;
                        let budget = positive(self, "budget")?;
                        let limit = match (budget, margin) {
                            (Some(_), Some(_)) | (Some(_), None) if limit_ms.is_some() => {
                                let (_, v) = field(&f, "budget")?;
                                self.err(
                                    v.loc,
                                    "`budget` (work units) and `limit_ms` (time) cannot be combined: give `margin` with an optional `limit_ms`, or `budget` alone",
                                );
                                return None;
                            }
                            (Some(_), Some(_)) => {
                                let (_, v) = field(&f, "budget")?;
                                self.err(
                                    v.loc,
                                    "`budget` (work units) and `margin` (time) cannot be combined: give one",
                                );
                                return None;
                            }
                            (Some(b), None) => BarrierLimit::Work(b),
                            (None, Some(m)) => {
                                if m < 1.0 {
                                    let (_, v) = field(&f, "margin")?;
                                    self.err(
                                        v.loc,
                                        "`margin` is the factor the limit is divided by: at least 1",
                                    );
                                    return None;
                                }
                                BarrierLimit::Time {
                                    margin: m,
                                    limit_ms,
                                }
                            }
                            (None, None) => {
                                self.err(
                                    params.loc,
                                    "`barrier` needs `margin` (each GPU submission's estimated time stays under the limit divided by it; the limit is `limit_ms` or the target's `device:` `timeout_ms`) or, in the older form, `budget` (work units)",
                                );
                                return None;
                            }
                        };
                        let mut dims = Vec::new();
                        if let Some((_, d)) = field(&f, "dims") {
                            let Some(m) = d.as_map() else {
                                self.type_err(d, "`dims`", "a map of dim names to sizes");
                                return None;
                            };
                            for (k, v) in m {
                                let (Some(name), Some(Num::Int(size))) =
                                    (k.as_str(), self.num(v, "a dim size"))
                                else {
                                    self.err(v.loc, "a dim size must be a positive integer");
                                    return None;
                                };
                                if size < 1 {
                                    self.err(v.loc, "a dim size must be a positive integer");
                                    return None;
                                }
                                dims.push((name.to_string(), size));
                            }
                        }
                        Some(Action::Barrier {
                            limit,
                            dims: dims.into(),
                        })
                    }
                    other => {
                        unknown(self, other, k.loc);
                        None
                    }
                }
            }
            _ => {
                self.type_err(
                    n,
                    "`action`",
                    "an action name or a map such as {split: {axis: channels, max: 64}}",
                );
                None
            }
        }
    }

    fn evidence(&mut self, n: &Node) -> Option<Vec<String>> {
        let items = match &n.value {
            Value::Seq(v) if v.is_empty() => return Some(Vec::new()),
            _ => self.strings(n, "`evidence`")?,
        };
        let mut ok = true;
        for (s, loc) in &items {
            if s.trim().is_empty() {
                self.err(*loc, "an `evidence` entry is empty");
                ok = false;
            }
        }
        ok.then(|| items.into_iter().map(|s| s.0).collect())
    }

    fn why(&mut self, n: &Node) -> Option<String> {
        let s = self.string(n, "`why`")?;
        let s = s.trim().to_string();
        if s.is_empty() {
            self.err(
                n.loc,
                "`why` is empty: say in one line what goes wrong without this",
            );
            return None;
        }
        if s.contains('\n') {
            self.err(n.loc, "`why` must be one line");
            return None;
        }
        Some(s)
    }

    fn rule(&mut self, n: &Node) -> Option<(Rule, Loc)> {
        let before = self.count;
        let f = self.fields(n, "a rule", RULE_KEYS)?;
        let id = field(&f, "id").and_then(|(_, v)| {
            let s = self.string(v, "`id`")?;
            if !is_name(&s) {
                self.err(
                    v.loc,
                    format!("rule id `{s}` must be letters, digits, `-`, `_` or `.`"),
                );
                return None;
            }
            Some((s, v.loc))
        });
        if field(&f, "id").is_none() {
            self.require(n, &f, "id", "a rule");
        }
        let what = match &id {
            Some((s, _)) => format!("rule `{s}`"),
            None => "a rule".to_string(),
        };
        let why = self
            .require(n, &f, "why", &what)
            .and_then(|(_, v)| self.why(v));
        let evidence = self
            .require(n, &f, "evidence", &what)
            .and_then(|(_, v)| self.evidence(v));
        let mut rc = RuleCx::default();
        let pattern = self
            .require(n, &f, "match", &what)
            .and_then(|(_, v)| self.pattern(v, "`match`", &mut rc, false));
        let action = self
            .require(n, &f, "action", &what)
            .and_then(|(_, v)| self.action(v));
        let priority = match field(&f, "priority") {
            Some((_, v)) => self.int(v, "`priority`"),
            None => Some(0),
        };
        let fallback = match field(&f, "fallback") {
            Some((_, v)) => self.fallback(v).map(Some),
            None => Some(None),
        };
        let approximate = match field(&f, "approximate") {
            Some((_, v)) => self.approximate(v).map(Some),
            None => Some(None),
        };
        if self.count != before {
            return None;
        }
        let (id, id_loc) = id?;
        Some((
            Rule {
                id,
                why: why?,
                evidence: evidence?,
                priority: priority?,
                pattern: pattern?.0,
                action: action?,
                fallback: fallback?,
                approximate: approximate?,
                source: self.here(id_loc),
            },
            id_loc,
        ))
    }

    fn runtime(&mut self, n: &Node) -> Option<(RuntimeSetting, Loc)> {
        let before = self.count;
        let f = self.fields(n, "a runtime setting", RUNTIME_KEYS)?;
        let key = self
            .require(n, &f, "key", "a runtime setting")
            .and_then(|(_, v)| {
                let s = self.string(v, "`key`")?;
                if s.trim().is_empty() || s.contains(char::is_whitespace) {
                    self.err(v.loc, "a runtime `key` is a non-empty name without spaces");
                    return None;
                }
                Some((s, v.loc))
            });
        let what = match &key {
            Some((k, _)) => format!("runtime setting `{k}`"),
            None => "a runtime setting".to_string(),
        };
        let value = self
            .require(n, &f, "value", &what)
            .and_then(|(_, v)| match &v.value {
                Value::Str(s) => Some(s.clone()),
                Value::Int(_) | Value::Float(_) | Value::Bool(_) => Some(
                    self.src
                        .snippet(&v.loc)
                        .map(str::to_string)
                        .unwrap_or_else(|| match &v.value {
                            Value::Int(i) => i.to_string(),
                            Value::Float(x) => x.to_string(),
                            Value::Bool(b) => b.to_string(),
                            _ => String::new(),
                        }),
                ),
                _ => {
                    self.type_err(v, "`value`", "a string");
                    None
                }
            });
        let why = self
            .require(n, &f, "why", &what)
            .and_then(|(_, v)| self.why(v));
        let evidence = self
            .require(n, &f, "evidence", &what)
            .and_then(|(_, v)| self.evidence(v));
        if self.count != before {
            return None;
        }
        let (key, key_loc) = key?;
        Some((
            RuntimeSetting {
                key,
                value: value?,
                why: why?,
                evidence: evidence?,
                source: self.here(key_loc),
            },
            key_loc,
        ))
    }

    fn file(&mut self, root: &Node, mode: Mode) -> FileDoc {
        let mut doc = FileDoc::default();
        if matches!(root.value, Value::Null) {
            let start = Loc {
                line: 1,
                col: 1,
                len: 0,
                byte: None,
                ..root.loc
            };
            let d = self
                .diag(start, "the file is empty")
                .label("a target file needs at least `target:`");
            self.error(d);
            return doc;
        }
        let Some(f) = self.fields(root, "a target file", TOP_KEYS) else {
            return doc;
        };
        match field(&f, "target") {
            Some((_, v)) => {
                if let Some(s) = self.string(v, "`target`") {
                    if is_name(&s) {
                        doc.target = Some((s, v.loc));
                    } else {
                        self.err(
                            v.loc,
                            format!("target name `{s}` must be letters, digits, `-`, `_` or `.`"),
                        );
                    }
                }
            }
            None if mode == Mode::Target => {
                self.require(root, &f, "target", "a target file");
            }
            None => {}
        }
        if let Some((_, v)) = field(&f, "description") {
            doc.description = self.string(v, "`description`");
        }
        if let Some((k, v)) = field(&f, "extends") {
            if mode == Mode::Overlay {
                let d = self
                    .diag(
                        k.loc,
                        "a rules file adds to the target it is used with; it cannot `extends`",
                    )
                    .label("use it as a target (--target) to extend another one");
                self.error(d);
            } else if let Some(names) = self.strings(v, "`extends`") {
                doc.extends = names;
            }
        }
        if let Some((_, v)) = field(&f, "rules") {
            match &v.value {
                Value::Seq(items) => {
                    let mut seen: Vec<(String, Loc)> = Vec::new();
                    for it in items {
                        // Duplicate ids are reported even when the rules have other errors.
                        let mut duplicate = false;
                        if let Some((id_node, id)) = it
                            .as_map()
                            .and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some("id")))
                            .and_then(|(_, v)| v.as_str().map(|s| (v, s)))
                        {
                            if let Some((_, first)) = seen.iter().find(|(s, _)| s == id) {
                                let d = self
                                    .diag(id_node.loc, format!("duplicate rule id `{id}`"))
                                    .label("a second rule with this id")
                                    .note(format!("first defined at {}", self.src.place(first)))
                                    .note("rule ids are unique in a file; a rule with the id of a base's rule replaces it");
                                self.error(d);
                                duplicate = true;
                            } else {
                                seen.push((id.to_string(), id_node.loc));
                            }
                        }
                        if let Some((r, _)) = self.rule(it) {
                            if !duplicate {
                                doc.rules.push(r);
                            }
                        }
                    }
                }
                Value::Null => {}
                _ => self.type_err(v, "`rules`", "a list of rules"),
            }
        }
        if let Some((_, v)) = field(&f, "runtime") {
            match &v.value {
                Value::Seq(items) => {
                    let mut seen: Vec<(String, Loc)> = Vec::new();
                    for it in items {
                        if let Some((s, loc)) = self.runtime(it) {
                            if let Some((_, first)) = seen.iter().find(|(k, _)| *k == s.key) {
                                let d = self
                                    .diag(loc, format!("runtime setting `{}` is set twice", s.key))
                                    .note(format!("first set at {}", self.src.place(first)));
                                self.error(d);
                                continue;
                            }
                            seen.push((s.key.clone(), loc));
                            doc.runtime.push(s);
                        }
                    }
                }
                Value::Null => {}
                _ => self.type_err(v, "`runtime`", "a list of settings"),
            }
        }
        if let Some((_, v)) = field(&f, "disable") {
            if let Some(ids) = self.strings(v, "`disable`") {
                doc.disable = ids;
            }
        }
        if let Some((_, v)) = field(&f, "fallback") {
            doc.fallback = self.fallback(v);
        }
        if let Some((_, v)) = field(&f, "approximate") {
            doc.approximate = self.approximate(v);
        }
        if let Some((_, v)) = field(&f, "provider") {
            doc.provider = self.provider(v);
        }
        if let Some((k, v)) = field(&f, "cpu_subgraphs") {
            if mode == Mode::Overlay {
                let d = self
                    .diag(
                        k.loc,
                        "a rules file adds rules to a target; how its runtime takes CPU work is the target's",
                    )
                    .label("set `cpu_subgraphs:` in a target file (one that `extends` the target)");
                self.error(d);
            } else {
                doc.cpu_subgraphs = self.cpu_subgraphs(v);
            }
        }
        if let Some((k, v)) = field(&f, "device") {
            if mode == Mode::Overlay {
                let d = self
                    .diag(
                        k.loc,
                        "a rules file adds rules to a target; its device model is the target's",
                    )
                    .label("set `device:` in a target file (one that `extends` the target)");
                self.error(d);
            } else if let Some(dev) = self.device(v) {
                doc.device = dev;
            }
        }
        doc
    }

    /// The execution provider a target runs on: one of the built-in profiles.
    fn provider(&mut self, v: &Node) -> Option<String> {
        let s = self.string(v, "`provider`")?;
        if crate::runtime::Profile::named(&s).is_some() {
            return Some(s);
        }
        let names: Vec<&str> = crate::runtime::Profile::all()
            .iter()
            .map(|p| p.name)
            .collect();
        let mut d = self.diag(v.loc, format!("unknown `provider` `{s}`"));
        if let Some(h) = ops::suggest(&s, names.iter().copied()) {
            d = d.label(format!("did you mean `{h}`?"));
        }
        self.error(d.note(format!(
            "`provider` names the execution provider whose kernels predict placement: {}",
            names.join(", ")
        )));
        None
    }

    /// A `device:` section: positive numbers, a name, `unified`, and `evidence`.
    fn device(&mut self, n: &Node) -> Option<DeviceSpec> {
        let before = self.count;
        let f = self.fields(n, "`device`", DeviceSpec::KEYS)?;
        let mut d = DeviceSpec::default();
        for (key, _, v) in &f {
            let what = format!("`device.{key}`");
            match *key {
                "name" => d.name = self.string(v, &what),
                "unified" => d.unified = self.boolean(v, &what),
                "evidence" => d.evidence = self.evidence(v).unwrap_or_default(),
                _ => {
                    let Some(x) = self.num(v, &what).map(Num::as_f64) else {
                        continue;
                    };
                    if x <= 0.0 {
                        let e = self
                            .diag(v.loc, format!("{what} must be a positive number"))
                            .label("a figure of the device, in the unit its name says");
                        self.error(e);
                        continue;
                    }
                    let slot = match *key {
                        "timeout_ms" => &mut d.timeout_ms,
                        "tflops_f32" => &mut d.tflops_f32,
                        "tflops_f16" => &mut d.tflops_f16,
                        "tops_int8" => &mut d.tops_int8,
                        "memory_gbs" => &mut d.memory_gbs,
                        "link_gbs" => &mut d.link_gbs,
                        "link_latency_us" => &mut d.link_latency_us,
                        _ => &mut d.launch_us,
                    };
                    *slot = Some(x);
                }
            }
        }
        let figures = DeviceSpec {
            evidence: Vec::new(),
            name: None,
            ..d.clone()
        };
        if !figures.is_empty() && d.evidence.is_empty() && self.count == before {
            let e = self
                .diag(n.loc, "`device` gives figures without `evidence`")
                .label("`evidence` is required")
                .note("say where each figure comes from (a specification page, a heading of docs/hazards.md, a measurement)");
            self.error(e);
        }
        (self.count == before).then_some(d)
    }

    /// Whether approximate rewrites may run: `allow` or `deny`.
    fn approximate(&mut self, v: &Node) -> Option<bool> {
        let s = self.string(v, "`approximate`")?;
        match s.as_str() {
            "allow" => Some(true),
            "deny" => Some(false),
            _ => {
                let mut d = self.diag(v.loc, format!("unknown `approximate` value `{s}`"));
                if let Some(h) = ops::suggest(&s, ["allow", "deny"]) {
                    d = d.label(format!("did you mean `{h}`?"));
                }
                self.error(d.note("`approximate` is `allow` (approximate rewrites may run) or `deny` (the default: such nodes fall back)"));
                None
            }
        }
    }

    /// `cpu_subgraphs`: `annotate` or `partition`.
    fn cpu_subgraphs(&mut self, v: &Node) -> Option<CpuSubgraphs> {
        let s = self.string(v, "`cpu_subgraphs`")?;
        match CpuSubgraphs::ALL.iter().find(|(n, _)| *n == s) {
            Some((_, c)) => Some(*c),
            None => {
                let names: Vec<&str> = CpuSubgraphs::ALL.iter().map(|(n, _)| *n).collect();
                let mut d = self.diag(v.loc, format!("unknown `cpu_subgraphs` value `{s}`"));
                if let Some(h) = ops::suggest(&s, names.iter().copied()) {
                    d = d.label(format!("did you mean `{h}`?"));
                }
                self.error(d.note(
                    "`cpu_subgraphs` is `annotate` (the runtime honours `layer_ann` pins: one model, the default) \
                     or `partition` (it ignores them: CPU work is written as segment models and a manifest)",
                ));
                None
            }
        }
    }

    /// A fallback: `cpu` or `deny`.
    fn fallback(&mut self, v: &Node) -> Option<Fallback> {
        let s = self.string(v, "`fallback`")?;
        match Fallback::ALL.iter().find(|(n, _)| *n == s) {
            Some((_, f)) => Some(*f),
            None => {
                let names: Vec<&str> = Fallback::ALL.iter().map(|(n, _)| *n).collect();
                let mut d = self.diag(v.loc, format!("unknown fallback `{s}`"));
                if let Some(h) = ops::suggest(&s, names.iter().copied()) {
                    d = d.label(format!("did you mean `{h}`?"));
                }
                self.error(d.note(format!("a fallback is one of {}", backticked(&names))));
                None
            }
        }
    }
}

/// Check one parsed file. Errors go to `errs`; what is valid is returned.
pub(crate) fn parse_file(
    root: &Node,
    sources: &Sources,
    errs: &mut RuleErrors,
    mode: Mode,
) -> FileDoc {
    let mut p = P {
        src: sources,
        errs,
        count: 0,
    };
    p.file(root, mode)
}
