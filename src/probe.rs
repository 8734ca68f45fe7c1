//! `probe`: learn a runtime's hazards from the runtime itself.
//!
//! A suite of small models (`tools/probe/cases.py`, embedded and run with the venv's Python;
//! one node under test each, named `subject`) runs on the runtime R and on ONNX Runtime CPU,
//! each case in a child process bounded by `--timeout`, through the same machinery as
//! `bisect` ([`crate::verify::pair::run_pair`]). Each case passes, fails (no session, run error,
//! device removed, timeout, crash, wrong values, wrong shape) or is void (ONNX Runtime CPU
//! cannot run it either, so there is nothing to compare with). Tolerance: 1e-4 absolute +
//! 1e-4 relative for float32 cases, 1e-2 + 1e-2 for float16 ones.
//!
//! From the failures it writes a target that `extends:` the nearest built-in: one rule per
//! failure pattern (failures of one op and one class; patterns of several ops that the same
//! conditions separate are one rule with an op list), whose `match` is the op plus the fewest
//! conditions (attributes, element types, a zero-sized dim) that leave out every passing case
//! of the op. Before writing, it checks each rule with the compiler itself (it fires on its
//! failing cases and on no passing case) and compiles each failing case with the target and
//! reruns it on R: a rule whose cases still fail is left out of the file (reported).
//!
//! Results go to a JSONL file, one line per case, from which a rerun resumes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::proto::{AttributeProto, ModelProto, NodeProto};
use crate::runtime::run::error::{one_line, VerifyError};
use crate::runtime::run::model::read_model_proto;
use crate::runtime::run::named::{parse_runtime, Runtime, TempDir};
use crate::runtime::run::ort::OptLevel;
use crate::runtime::run::tensor::HostTensor;
use crate::verify::compare::Tolerance;
use crate::verify::inputs::{self, SetKind};
use crate::verify::pair::{run_pair, FailKind, PairRun};

/// The case generator, run with the venv's Python.
const GENERATOR: &str = include_str!("../tools/probe/cases.py");

/// Tolerance of float32 cases.
pub const TOL_F32: Tolerance = Tolerance {
    atol: 1e-4,
    rtol: 1e-4,
};
/// Tolerance of float16 cases.
pub const TOL_F16: Tolerance = Tolerance {
    atol: 1e-2,
    rtol: 1e-2,
};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum ProbeFormat {
    #[default]
    Text,
    Json,
}

/// The command line of `onnx-safeify probe`.
#[derive(clap::Args, Debug, Clone)]
pub struct ProbeArgs {
    /// The runtime to probe: `ort-ep:NAME` (an ONNX Runtime execution provider through the
    /// venv's onnxruntime), `webgpu` or `openvino`.
    #[arg(long)]
    pub runtime: String,
    /// Write the learned target (YAML, `extends:` the nearest built-in) to this file.
    #[arg(short = 'o', long = "output", value_name = "FILE.yaml")]
    pub output: Option<PathBuf>,
    /// Only the cases whose op (or case name) is one of these (comma-separated,
    /// case-insensitive).
    #[arg(long, value_delimiter = ',', value_name = "OP[,OP]")]
    pub only: Vec<String>,
    /// Cases run at the same time.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Results file (JSONL, one line per case); a rerun skips the cases it already holds.
    #[arg(long, value_name = "FILE.jsonl")]
    pub results: Option<PathBuf>,
    /// Bound on each run on the runtime, in seconds: a run past it is a `timeout` failure.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Also run the ONNX backend node tests of the corpus (hundreds of runs).
    #[arg(long)]
    pub node_tests: bool,
    /// The corpus folder holding onnx_node_tests_* (default: $ONNX_SAFEIFY_CORPUS, else the
    /// cache's corpus).
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<PathBuf>,
    /// Output format of the report on stdout.
    #[arg(long, value_enum, default_value_t = ProbeFormat::Text)]
    pub format: ProbeFormat,
}

/// One case of the suite, as the generator lists it.
#[derive(Debug, Clone, Deserialize)]
struct Case {
    name: String,
    op: String,
    domain: String,
    family: String,
    fp16: bool,
    model: PathBuf,
    inputs: PathBuf,
}

/// The result of one case, one line of the results file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CaseResult {
    pub case: String,
    pub op: String,
    pub domain: String,
    pub family: String,
    pub runtime: String,
    /// `pass`, `fail` or `void` (ONNX Runtime CPU cannot run the case).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<FailKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_error: Option<String>,
    /// The runtime's own description (versions, device), when the run reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_description: Option<String>,
    pub seconds: f64,
}

/// A learned rule.
#[derive(Debug, Clone, Serialize)]
pub struct LearnedRule {
    pub id: String,
    pub ops: Vec<String>,
    pub domain: String,
    pub class: FailKind,
    /// The `match` as YAML flow text.
    #[serde(rename = "match")]
    pub match_yaml: String,
    pub action: String,
    pub why: String,
    pub evidence: Vec<String>,
    /// Failing cases it covers.
    pub cases: Vec<String>,
    /// Whether the compiled failing cases pass on the runtime (None: not checked).
    pub fixed: Option<bool>,
    /// Problems: passing cases it matches, failing cases it misses, cases that still fail.
    pub problems: Vec<String>,
    /// Base rules that fire on its cases too.
    pub base_rules: Vec<String>,
    /// Written to the target file.
    pub written: bool,
}

/// The result of a probe.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeReport {
    pub runtime: String,
    pub runtime_description: Option<String>,
    pub base: String,
    pub results: Vec<CaseResult>,
    pub rules: Vec<LearnedRule>,
    /// The target file's text.
    pub target_yaml: String,
    pub warnings: Vec<String>,
}

impl ProbeReport {
    pub fn failures(&self) -> usize {
        self.results.iter().filter(|r| r.status == "fail").count()
    }
}

/// How to probe.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    pub runtime: String,
    pub only: Vec<String>,
    pub jobs: usize,
    pub results: Option<PathBuf>,
    pub timeout: Duration,
    /// The corpus folder with the backend node tests, when they are asked for.
    pub node_tests: Option<PathBuf>,
    /// Progress lines on stderr.
    pub progress: bool,
}

/// The built-in target a probed runtime is closest to.
pub fn nearest_builtin(runtime: &str) -> &'static str {
    match runtime {
        "webgpu" => "webgpu",
        "openvino" => "openvino-gpu",
        _ => match crate::runtime::run::ort_ep::provider_of(runtime) {
            Some("DmlExecutionProvider") => "directml",
            Some("CoreMLExecutionProvider") => "coreml",
            Some("TensorrtExecutionProvider") => "tensorrt",
            Some("MIGraphXExecutionProvider") | Some("ROCMExecutionProvider") => "rocm-migraphx",
            Some("OpenVINOExecutionProvider") => "openvino-gpu",
            Some("WebGpuExecutionProvider") => "webgpu",
            _ => "none",
        },
    }
}

/// The Python that runs the case generator (onnx and numpy), found as `verify` finds ONNX
/// Runtime.
fn python() -> Result<PathBuf, VerifyError> {
    use crate::runtime::run::discover;
    discover::find_python(&discover::Discovery::from_env(), &["onnx", "numpy"])
}

/// Writes the suite into `dir` and returns its cases.
fn generate(
    dir: &Path,
    only: &[String],
    node_tests: Option<&Path>,
) -> Result<Vec<Case>, VerifyError> {
    let py = python()?;
    let script = dir.join("cases.py");
    std::fs::write(&script, GENERATOR)
        .map_err(|e| VerifyError::data(dir, format!("cannot write the generator: {e}")))?;
    let mut cmd = std::process::Command::new(&py);
    cmd.arg(&script).arg(dir);
    if !only.is_empty() {
        cmd.arg("--only").arg(only.join(","));
    }
    if let Some(c) = node_tests {
        cmd.arg("--node-tests").arg(c);
    }
    let out = cmd
        .output()
        .map_err(|e| VerifyError::RuntimeNotFound(format!("cannot run {}: {e}", py.display())))?;
    if !out.status.success() {
        return Err(VerifyError::RuntimeNotFound(format!(
            "the probe's case generator failed ({} needs onnx and numpy): {}",
            py.display(),
            one_line(&String::from_utf8_lossy(&out.stderr))
        )));
    }
    let listed = dir.join("cases.json");
    let text =
        std::fs::read_to_string(&listed).map_err(|e| VerifyError::data(&listed, e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| VerifyError::data(&listed, e.to_string()))
}

/// Reads the results file (missing: empty). Lines of another runtime are an error.
fn read_results(path: &Path, runtime: &str) -> Result<Vec<CaseResult>, VerifyError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(VerifyError::data(path, e.to_string())),
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: CaseResult = match serde_json::from_str(line) {
            Ok(r) => r,
            // A line cut short by an interrupted run: that case runs again.
            Err(_) if i + 1 == text.lines().count() => continue,
            Err(e) => {
                return Err(VerifyError::data(
                    path,
                    format!("line {}: not a probe result: {e}", i + 1),
                ))
            }
        };
        if r.runtime != runtime {
            return Err(VerifyError::Usage(format!(
                "{}: holds results of --runtime {}, not {runtime}; name another --results file",
                path.display(),
                r.runtime
            )));
        }
        out.push(r);
    }
    Ok(out)
}

fn load_feed(case: &Case, proto: &ModelProto) -> Result<Vec<(String, HostTensor)>, VerifyError> {
    let tensors = inputs::load_tensor_set(&case.inputs, SetKind::Inputs)?;
    let g = proto.graph.as_ref();
    let inits: BTreeSet<&str> = g
        .map(|g| {
            g.initializer
                .iter()
                .filter_map(|t| t.name.as_deref())
                .collect()
        })
        .unwrap_or_default();
    let names: Vec<String> = g
        .map(|g| {
            g.input
                .iter()
                .filter_map(|v| v.name.clone())
                .filter(|n| !inits.contains(n.as_str()))
                .collect()
        })
        .unwrap_or_default();
    inputs::assign_tensors(&case.inputs, tensors, &names, "input")
}

fn graph_outputs(proto: &ModelProto) -> Vec<String> {
    proto
        .graph
        .as_ref()
        .map(|g| g.output.iter().filter_map(|o| o.name.clone()).collect())
        .unwrap_or_default()
}

/// The failure (class, text), ONNX Runtime CPU's error, and the runtime's description.
type RunVerdict = (Option<(FailKind, String)>, Option<String>, Option<String>);

/// Runs `model` (a case, or its compiled form) on the runtime and the reference.
fn run_model(
    runtime: &Runtime,
    model: &Path,
    case: &Case,
    timeout: Duration,
) -> Result<RunVerdict, VerifyError> {
    let proto = read_model_proto(model)?;
    let feed = load_feed(case, &proto)?;
    let outputs = graph_outputs(&proto);
    let (o, description) = run_pair(&PairRun {
        runtime,
        path: model,
        proto: &proto,
        outputs: &outputs,
        feed: &feed,
        tolerance: if case.fp16 { TOL_F16 } else { TOL_F32 },
        optimization: OptLevel::All,
        timeout,
    })?;
    let strip = |m: String| -> String {
        let p = format!("{}: ", model.display());
        m.replace(&p, "")
    };
    Ok((
        o.failure.map(|(k, m)| (k, strip(m))),
        o.reference.err(),
        description,
    ))
}

fn run_case(runtime: &Runtime, name: &str, case: &Case, timeout: Duration) -> CaseResult {
    let t = Instant::now();
    let mut r = CaseResult {
        case: case.name.clone(),
        op: case.op.clone(),
        domain: case.domain.clone(),
        family: case.family.clone(),
        runtime: name.to_string(),
        status: "pass".into(),
        class: None,
        message: None,
        reference_error: None,
        runtime_description: None,
        seconds: 0.0,
    };
    match run_model(runtime, &case.model, case, timeout) {
        Ok((failure, reference, description)) => {
            r.runtime_description = description;
            match (failure, reference) {
                (Some((k, m)), reference) => {
                    r.status = if reference.is_some() { "void" } else { "fail" }.into();
                    r.class = Some(k);
                    r.message = Some(m);
                    r.reference_error = reference;
                }
                (None, Some(e)) => {
                    r.status = "void".into();
                    r.reference_error = Some(e);
                }
                (None, None) => {}
            }
        }
        Err(e) => {
            // The case itself could not be set up (a bad input file): void, with why.
            r.status = "void".into();
            r.reference_error = Some(one_line(&e.to_string()));
        }
    }
    r.seconds = (t.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    r
}

// ---------------------------------------------------------------------------------------
// Rules from failures.

/// An attribute value, as the rule language writes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AttrVal {
    Int(i64),
    Ints(Vec<i64>),
    Str(String),
}

impl AttrVal {
    fn yaml(&self) -> String {
        match self {
            AttrVal::Int(i) => i.to_string(),
            AttrVal::Ints(v) => format!(
                "[{}]",
                v.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            AttrVal::Str(s) => serde_json::Value::String(s.clone()).to_string(),
        }
    }
}

/// What the rule language can say about a case's node under test.
#[derive(Debug, Clone, Default)]
pub(crate) struct Features {
    pub(crate) attrs: BTreeMap<String, AttrVal>,
    /// Element type of each input slot (None: absent or unknown).
    pub(crate) dtypes: Vec<Option<String>>,
    /// Static dims of each input slot.
    pub(crate) dims: Vec<Option<Vec<i64>>>,
}

pub(crate) fn attr_val(a: &AttributeProto) -> Option<AttrVal> {
    if let Some(s) = &a.s {
        return Some(AttrVal::Str(String::from_utf8_lossy(s).into_owned()));
    }
    if let Some(i) = a.i {
        return Some(AttrVal::Int(i));
    }
    if !a.ints.is_empty() {
        return Some(AttrVal::Ints(a.ints.clone()));
    }
    None
}

fn features(model: &Path) -> Features {
    let Ok(proto) = read_model_proto(model) else {
        return Features::default();
    };
    let Some(g) = proto.graph.as_ref() else {
        return Features::default();
    };
    let node = g
        .node
        .iter()
        .find(|n| n.name.as_deref() == Some("subject"))
        .or_else(|| g.node.first());
    let Some(node) = node else {
        return Features::default();
    };
    node_features(g, node)
}

/// What the rule language can say about `node` of graph `g`: its attributes, and the element
/// type and static dims of each input where the graph records them (initializers, graph
/// inputs, `value_info`).
pub(crate) fn node_features(g: &crate::proto::GraphProto, node: &NodeProto) -> Features {
    let mut f = Features::default();
    for a in &node.attribute {
        if let (Some(n), Some(v)) = (a.name.as_deref(), attr_val(a)) {
            f.attrs.insert(n.to_string(), v);
        }
    }
    for i in &node.input {
        let mut dt = None;
        let mut dims = None;
        if !i.is_empty() {
            if let Some(t) = g.initializer.iter().find(|t| t.name.as_deref() == Some(i)) {
                dt = t
                    .data_type
                    .and_then(crate::runtime::run::dtype::DType::from_code)
                    .map(|d| d.name().to_string());
                dims = Some(t.dims.clone());
            } else if let Some(v) = g
                .input
                .iter()
                .chain(g.value_info.iter())
                .find(|v| v.name.as_deref() == Some(i))
            {
                use crate::proto::type_proto::Value;
                if let Some(Value::TensorType(tt)) =
                    v.r#type.as_ref().and_then(|t| t.value.as_ref())
                {
                    dt = tt
                        .elem_type
                        .and_then(crate::runtime::run::dtype::DType::from_code)
                        .map(|d| d.name().to_string());
                    dims = tt.shape.as_ref().and_then(|s| {
                        s.dim
                            .iter()
                            .map(|d| match d.value {
                                Some(
                                    crate::proto::tensor_shape_proto::dimension::Value::DimValue(x),
                                ) => Some(x),
                                _ => None,
                            })
                            .collect::<Option<Vec<i64>>>()
                    });
                }
            }
        }
        f.dtypes.push(dt);
        f.dims.push(dims);
    }
    f
}

/// One condition of a learned `match`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cond {
    /// Some input is float16.
    AnyFloat16,
    Attr(String, AttrVal),
    /// Input 0 has a zero-sized dim (ranks up to the given one).
    ZeroDim(usize),
    Dtype(usize, String),
}

impl Cond {
    pub(crate) fn holds(&self, f: &Features) -> bool {
        match self {
            Cond::AnyFloat16 => f.dtypes.iter().any(|d| d.as_deref() == Some("float16")),
            Cond::Attr(n, v) => f.attrs.get(n) == Some(v),
            Cond::ZeroDim(_) => f
                .dims
                .first()
                .and_then(|d| d.as_ref())
                .is_some_and(|d| d.contains(&0)),
            Cond::Dtype(s, d) => f.dtypes.get(*s).and_then(|x| x.as_deref()) == Some(d),
        }
    }

    /// Words for `why`.
    pub(crate) fn words(&self) -> String {
        match self {
            Cond::AnyFloat16 => "with float16 inputs".into(),
            Cond::Attr(n, v) => format!("with {n}={}", v.yaml()),
            Cond::ZeroDim(_) => "over a zero-sized dim (an empty set)".into(),
            Cond::Dtype(s, d) => format!("with input {s} of type {d}"),
        }
    }
}

/// The `match` map of a rule (flow YAML).
pub(crate) fn match_yaml(ops: &[String], domain: &str, conds: &[Cond]) -> String {
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let op = if ops.len() == 1 {
        ops[0].clone()
    } else {
        format!("[{}]", ops.join(", "))
    };
    let mut parts = vec![format!("op: {op}"), format!("domain: {}", q(domain))];
    let attrs: Vec<String> = conds
        .iter()
        .filter_map(|c| match c {
            Cond::Attr(n, v) => Some(format!("{n}: {}", v.yaml())),
            _ => None,
        })
        .collect();
    if !attrs.is_empty() {
        parts.push(format!("attr: {{{}}}", attrs.join(", ")));
    }
    let dtypes: Vec<String> = conds
        .iter()
        .filter_map(|c| match c {
            Cond::Dtype(s, d) => Some(format!("{s}: {{dtype: {d}}}")),
            _ => None,
        })
        .collect();
    if !dtypes.is_empty() {
        parts.push(format!("input: {{{}}}", dtypes.join(", ")));
    }
    if conds.contains(&Cond::AnyFloat16) {
        parts.push("any_input: {dtype: float16}".into());
    }
    if let Some(Cond::ZeroDim(rank)) = conds.iter().find(|c| matches!(c, Cond::ZeroDim(_))) {
        let alts: Vec<String> = (0..*rank)
            .map(|p| {
                let mut d: Vec<&str> = vec!["_"; p];
                d.push("0");
                d.push("\"...\"");
                format!("{{input: {{0: {{dims: [{}]}}}}}}", d.join(", "))
            })
            .collect();
        parts.push(format!("any: [{}]", alts.join(", ")));
    }
    format!("{{{}}}", parts.join(", "))
}

/// Conditions true of every failing case, in the order the search tries them.
fn shared_conds(failing: &[&Features]) -> Vec<Cond> {
    let mut out = Vec::new();
    if failing.iter().all(|f| Cond::AnyFloat16.holds(f)) {
        out.push(Cond::AnyFloat16);
    }
    if let Some(first) = failing.first() {
        for (n, v) in &first.attrs {
            let c = Cond::Attr(n.clone(), v.clone());
            if failing.iter().all(|f| c.holds(f)) {
                out.push(c);
            }
        }
        let rank = failing
            .iter()
            .filter_map(|f| f.dims.first().and_then(|d| d.as_ref()).map(|d| d.len()))
            .max()
            .unwrap_or(0);
        let z = Cond::ZeroDim(rank);
        if rank > 0 && failing.iter().all(|f| z.holds(f)) {
            out.push(z);
        }
        for (s, d) in first.dtypes.iter().enumerate() {
            if let Some(d) = d {
                let c = Cond::Dtype(s, d.clone());
                if failing.iter().all(|f| c.holds(f)) {
                    out.push(c);
                }
            }
        }
    }
    out
}

/// The fewest shared conditions that leave out every passing case (greedy); `Err` with the
/// passing cases still matched when they cannot all be left out.
pub(crate) fn separate(
    failing: &[&Features],
    passing: &[(&str, &Features)],
) -> (Vec<Cond>, Vec<String>) {
    let cands = shared_conds(failing);
    let mut chosen: Vec<Cond> = Vec::new();
    let matched = |chosen: &[Cond]| -> Vec<usize> {
        passing
            .iter()
            .enumerate()
            .filter(|(_, (_, f))| chosen.iter().all(|c| c.holds(f)))
            .map(|(i, _)| i)
            .collect()
    };
    let mut left = matched(&chosen);
    while !left.is_empty() {
        let best = cands
            .iter()
            .filter(|c| !chosen.contains(c))
            .map(|c| {
                let mut t = chosen.clone();
                t.push(c.clone());
                (matched(&t).len(), c)
            })
            .min_by_key(|(n, _)| *n);
        match best {
            Some((n, c)) if n < left.len() => {
                chosen.push(c.clone());
                left = matched(&chosen);
            }
            _ => break,
        }
    }
    let still = left
        .iter()
        .map(|&i| passing[i].0.to_string())
        .collect::<Vec<_>>();
    (chosen, still)
}

fn rule_id(ops: &[String], conds: &[Cond], taken: &mut BTreeSet<String>) -> String {
    let base = if conds.contains(&Cond::AnyFloat16) && ops.len() > 1 {
        "probe-float16".to_string()
    } else {
        let mut s = format!(
            "probe-{}",
            ops.iter()
                .map(|o| o.to_ascii_lowercase())
                .collect::<Vec<_>>()
                .join("-")
        );
        for c in conds {
            match c {
                Cond::AnyFloat16 => s.push_str("-float16"),
                Cond::Attr(n, v) => {
                    let v = match v {
                        AttrVal::Int(i) => i.to_string(),
                        AttrVal::Str(x) => x.clone(),
                        AttrVal::Ints(_) => String::new(),
                    };
                    s.push_str(&format!("-{n}{v}").replace('_', "-"));
                }
                Cond::ZeroDim(_) => s.push_str("-empty"),
                Cond::Dtype(_, d) => s.push_str(&format!("-{d}")),
            }
        }
        s
    };
    let mut id = format!("{base}-on-cpu");
    let mut k = 2;
    while !taken.insert(id.clone()) {
        id = format!("{base}-{k}-on-cpu");
        k += 1;
    }
    id
}

/// The target file: a header, `extends:` the base, the rules (those not written as comments).
fn target_yaml(report_rt: &str, desc: Option<&str>, base: &str, rules: &[LearnedRule]) -> String {
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let name: String = report_rt
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let mut s = String::new();
    s.push_str(&format!(
        "# Learned by onnx-safeify probe --runtime {report_rt}\n# {}\ntarget: probed-{name}\ndescription: {}\nextends: {base}\n",
        desc.unwrap_or("runtime description not reported"),
        q(&format!("{base} plus the hazards onnx-safeify probe found on {report_rt}"))
    ));
    let written: Vec<&LearnedRule> = rules.iter().filter(|r| r.written).collect();
    if written.is_empty() {
        s.push_str("rules: []\n");
    } else {
        s.push_str("rules:\n");
    }
    for r in rules {
        let prefix = if r.written { "" } else { "# " };
        if !r.written {
            s.push_str(&format!(
                "# left out: {}\n",
                r.problems.join("; ").replace('\n', " ")
            ));
        }
        if !r.base_rules.is_empty() {
            s.push_str(&format!(
                "{prefix}  # the base's {} fires on these cases too\n",
                r.base_rules.join(", ")
            ));
        }
        s.push_str(&format!("{prefix}  - id: {}\n", r.id));
        s.push_str(&format!("{prefix}    why: {}\n", q(&r.why)));
        s.push_str(&format!("{prefix}    evidence:\n"));
        for e in &r.evidence {
            s.push_str(&format!("{prefix}      - {}\n", q(e)));
        }
        s.push_str(&format!("{prefix}    match: {}\n", r.match_yaml));
        s.push_str(&format!("{prefix}    action: {}\n", r.action));
    }
    s
}

/// The runtime's own words in an error text: what follows ONNX Runtime's `Status Message:` or
/// `ERROR_MESSAGE:`, without a leading `file.cc:LINE Function` or a failed check's condition.
pub fn gist(message: &str) -> String {
    let mut m = message;
    for key in ["Status Message: ", "ERROR_MESSAGE: "] {
        if let Some(i) = m.rfind(key) {
            m = &m[i + key.len()..];
            break;
        }
    }
    if let Some(i) = m.find(" was false. ") {
        m = &m[i + " was false. ".len()..];
    }
    let mut words: Vec<&str> = m.split_whitespace().collect();
    let is_place = |w: &str| {
        w.rsplit_once(':').is_some_and(|(f, l)| {
            (f.ends_with(".cc") || f.ends_with(".h") || f.ends_with(".cpp"))
                && !l.is_empty()
                && l.chars().all(|c| c.is_ascii_digit())
        })
    };
    if words.first().is_some_and(|w| is_place(w)) {
        words.remove(0);
        if words.len() > 1
            && words[0]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            words.remove(0);
        }
    }
    let g = words.join(" ");
    if g.is_empty() {
        message.to_string()
    } else {
        g
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

/// Which rules of `target` fire on the node `subject` of `model` (compiled in memory).
fn rules_firing(
    model: &Path,
    target: &crate::rules::schema::Target,
) -> Result<Vec<String>, String> {
    let mut doc = crate::load(model).map_err(|e| e.to_string())?;
    let opts = crate::compile::options(Vec::new()).map_err(|e| e.to_string())?;
    let c = crate::compile::compile_document(&mut doc, target, &opts, true, model)
        .map_err(|e| e.to_string())?;
    let mut ids: Vec<String> = c
        .report
        .applied
        .iter()
        .map(|a| a.rule.clone())
        .chain(c.report.fallbacks.iter().map(|f| f.rule.clone()))
        .chain(c.report.remaining.iter().map(|f| f.rule.clone()))
        .collect();
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// Compiles `model` for the target file `target` into `out`.
fn compile_to(model: &Path, target: &Path, out: &Path) -> Result<(), String> {
    let t = crate::compile::load_target(&target.display().to_string(), &[])
        .map_err(|e| e.to_string())?;
    let mut doc = crate::load(model).map_err(|e| e.to_string())?;
    let opts = crate::compile::options(Vec::new()).map_err(|e| e.to_string())?;
    let c = crate::compile::compile_document(&mut doc, &t, &opts, false, model)
        .map_err(|e| e.to_string())?;
    if !c.writable {
        return Err(c.blocked_message(model, &t));
    }
    crate::save(&doc, out).map_err(|e| e.to_string())?;
    Ok(())
}

/// Builds the rules from the results, checks them with the compiler and on the runtime.
#[allow(clippy::too_many_arguments)]
fn learn(
    runtime: &Runtime,
    opts: &ProbeOptions,
    base: &str,
    desc: Option<&str>,
    cases: &[Case],
    results: &[CaseResult],
    work: &Path,
    warnings: &mut Vec<String>,
) -> Result<Vec<LearnedRule>, VerifyError> {
    let by_name: HashMap<&str, &Case> = cases.iter().map(|c| (c.name.as_str(), c)).collect();
    let feats: HashMap<&str, Features> = cases
        .iter()
        .map(|c| (c.name.as_str(), features(&c.model)))
        .collect();
    // Failure patterns: failures of one op, domain and class.
    let mut groups: BTreeMap<(String, String, String), Vec<&CaseResult>> = BTreeMap::new();
    for r in results.iter().filter(|r| r.status == "fail") {
        if !by_name.contains_key(r.case.as_str()) {
            continue;
        }
        let class = r.class.map(|k| k.label()).unwrap_or("?").to_string();
        groups
            .entry((r.op.clone(), r.domain.clone(), class))
            .or_default()
            .push(r);
    }
    // Each pattern's separating conditions, against the passing cases of its op.
    struct Pattern<'a> {
        ops: Vec<String>,
        domain: String,
        class: FailKind,
        conds: Vec<Cond>,
        still: Vec<String>,
        fails: Vec<&'a CaseResult>,
    }
    let mut patterns: Vec<Pattern> = Vec::new();
    for ((op, domain, _), fails) in &groups {
        let f: Vec<&Features> = fails.iter().map(|r| &feats[r.case.as_str()]).collect();
        let passing: Vec<(&str, &Features)> = results
            .iter()
            .filter(|r| r.status == "pass" && &r.op == op && &r.domain == domain)
            .filter_map(|r| feats.get(r.case.as_str()).map(|f| (r.case.as_str(), f)))
            .collect();
        let (conds, still) = separate(&f, &passing);
        patterns.push(Pattern {
            ops: vec![op.clone()],
            domain: domain.clone(),
            class: fails[0].class.unwrap_or(FailKind::RunError),
            conds,
            still,
            fails: fails.clone(),
        });
    }
    // Patterns of several ops with the same conditions, class and domain: one rule. An op
    // with no passing case to separate from (no conditions of its own) joins a pattern of the
    // same class and domain whose conditions hold on all its failing cases.
    let mut merged: Vec<Pattern> = Vec::new();
    let (lone, patterns): (Vec<Pattern>, Vec<Pattern>) =
        patterns.into_iter().partition(|p| p.conds.is_empty());
    let mut rest = Vec::new();
    for p in lone {
        let has_passing = results
            .iter()
            .any(|r| r.status == "pass" && p.ops.contains(&r.op) && r.domain == p.domain);
        let host = patterns.iter().position(|m| {
            !has_passing
                && m.class == p.class
                && m.domain == p.domain
                && !m.conds.is_empty()
                && m.still.is_empty()
                && p.fails
                    .iter()
                    .all(|r| m.conds.iter().all(|c| c.holds(&feats[r.case.as_str()])))
        });
        match host {
            Some(i) => rest.push((i, p)),
            None => merged.push(p),
        }
    }
    let mut patterns = patterns;
    for (i, p) in rest {
        patterns[i].ops.extend(p.ops);
        patterns[i].fails.extend(p.fails);
    }
    let lone_left = std::mem::take(&mut merged);
    for p in patterns.into_iter().chain(lone_left) {
        let key = match_yaml(&[], &p.domain, &p.conds);
        if !p.conds.is_empty() && p.still.is_empty() {
            if let Some(m) = merged.iter_mut().find(|m| {
                m.class == p.class
                    && m.still.is_empty()
                    && match_yaml(&[], &m.domain, &m.conds) == key
            }) {
                m.ops.extend(p.ops);
                m.fails.extend(p.fails);
                continue;
            }
        }
        merged.push(p);
    }
    let base_target =
        crate::compile::load_target(base, &[]).map_err(|e| VerifyError::Usage(e.to_string()))?;
    let mut taken = BTreeSet::new();
    let mut rules = Vec::new();
    for p in merged {
        let id = rule_id(&p.ops, &p.conds, &mut taken);
        let mut problems = Vec::new();
        if !p.still.is_empty() {
            problems.push(format!(
                "no condition the rule language offers separates it from the passing case(s) {}",
                p.still.join(", ")
            ));
        }
        let example = &p.fails[0];
        let what = if p.conds.is_empty() {
            String::new()
        } else {
            format!(
                " {}",
                p.conds
                    .iter()
                    .map(|c| c.words())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let why = format!(
            "{}{} fails on {} ({}): {}",
            p.ops.join("/"),
            what,
            opts.runtime,
            p.class.label(),
            clip(&gist(example.message.as_deref().unwrap_or("")), 200)
        );
        let evidence: Vec<String> = p
            .fails
            .iter()
            .take(6)
            .map(|r| {
                format!(
                    "onnx-safeify probe --runtime {} ({}): case {}: {}: {}",
                    opts.runtime,
                    r.runtime_description
                        .as_deref()
                        .or(desc)
                        .unwrap_or("no description"),
                    r.case,
                    r.class.map(|k| k.label()).unwrap_or("?"),
                    clip(r.message.as_deref().unwrap_or(""), 300)
                )
            })
            .collect();
        let mut rule = LearnedRule {
            id,
            ops: p.ops.clone(),
            domain: p.domain.clone(),
            class: p.class,
            match_yaml: match_yaml(&p.ops, &p.domain, &p.conds),
            action: "cpu".into(),
            why,
            evidence,
            cases: p.fails.iter().map(|r| r.case.clone()).collect(),
            fixed: None,
            problems,
            base_rules: Vec::new(),
            written: false,
        };
        // The compiler's word: the rule alone fires on its failing cases and on no passing one.
        let alone = work.join(format!("{}.yaml", rule.id));
        let text = target_yaml(
            &opts.runtime,
            desc,
            "none",
            std::slice::from_ref(&LearnedRule {
                written: true,
                base_rules: Vec::new(),
                ..rule.clone()
            }),
        );
        std::fs::write(&alone, &text).map_err(|e| VerifyError::data(&alone, e.to_string()))?;
        match crate::compile::load_target(&alone.display().to_string(), &[]) {
            Err(e) => rule.problems.push(format!(
                "the compiler rejects the rule: {}",
                one_line(&e.to_string())
            )),
            Ok(t) => {
                for r in &p.fails {
                    match rules_firing(&by_name[r.case.as_str()].model, &t) {
                        Ok(ids) if ids.contains(&rule.id) => {}
                        Ok(_) => rule.problems.push(format!("does not fire on {}", r.case)),
                        Err(e) => rule.problems.push(format!(
                            "{} does not compile: {}",
                            r.case,
                            one_line(&e)
                        )),
                    }
                    if let Ok(ids) = rules_firing(&by_name[r.case.as_str()].model, &base_target) {
                        for i in ids {
                            if !rule.base_rules.contains(&i) {
                                rule.base_rules.push(i);
                            }
                        }
                    }
                }
                for r in results
                    .iter()
                    .filter(|r| r.status == "pass" && p.ops.contains(&r.op) && r.domain == p.domain)
                {
                    if let Some(c) = by_name.get(r.case.as_str()) {
                        if let Ok(ids) = rules_firing(&c.model, &t) {
                            if ids.contains(&rule.id) && !p.still.contains(&r.case) {
                                rule.problems
                                    .push(format!("also fires on the passing case {}", r.case));
                            }
                        }
                    }
                }
            }
        }
        rule.written = rule.problems.is_empty();
        rules.push(rule);
    }
    // The runtime's word: each failing case compiled with the whole target passes.
    let full = work.join("learned.yaml");
    std::fs::write(&full, target_yaml(&opts.runtime, desc, base, &rules))
        .map_err(|e| VerifyError::data(&full, e.to_string()))?;
    for rule in rules.iter_mut().filter(|r| r.written) {
        let mut ok = true;
        for c in &rule.cases {
            let case = by_name[c.as_str()];
            let out = work.join(format!("fixed_{}.onnx", sanitize(c)));
            if let Err(e) = compile_to(&case.model, &full, &out) {
                rule.problems.push(format!(
                    "{c} does not compile with the target: {}",
                    one_line(&e)
                ));
                ok = false;
                continue;
            }
            let t = Instant::now();
            let (failure, reference, _) = run_model(runtime, &out, case, opts.timeout)?;
            let verdict = match (&failure, &reference) {
                (None, None) => "passes".to_string(),
                (Some((k, m)), _) => {
                    ok = false;
                    rule.problems.push(format!(
                        "{c} compiled with the target still fails: {}: {}",
                        k.label(),
                        clip(m, 200)
                    ));
                    format!("still fails ({})", k.label())
                }
                (None, Some(e)) => {
                    ok = false;
                    rule.problems.push(format!(
                        "{c} compiled with the target does not run on ONNX Runtime CPU: {}",
                        clip(e, 200)
                    ));
                    "void".into()
                }
            };
            if opts.progress {
                crate::errln!(
                    "check {} with {}: {verdict} ({:.1} s)",
                    c,
                    rule.id,
                    t.elapsed().as_secs_f64()
                );
            }
        }
        rule.fixed = Some(ok);
        rule.written = ok;
    }
    for r in rules.iter().filter(|r| !r.written) {
        warnings.push(format!(
            "rule {} left out of the target: {}",
            r.id,
            r.problems.join("; ")
        ));
    }
    Ok(rules)
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Probes `opts.runtime`. `Err`: it could not be carried out (bad runtime name, no venv).
pub fn probe(opts: &ProbeOptions) -> Result<ProbeReport, VerifyError> {
    let runtime = parse_runtime(&opts.runtime)?;
    if opts.timeout.is_zero() {
        return Err(VerifyError::Usage("--timeout must be positive".into()));
    }
    if opts.jobs == 0 {
        return Err(VerifyError::Usage("--jobs must be at least 1".into()));
    }
    if let Runtime::External(k) = &runtime {
        crate::runtime::run::external::check_available(k)?;
    }
    let base = nearest_builtin(&opts.runtime);
    let work = TempDir::create()?;
    let only: Vec<String> = opts
        .only
        .iter()
        .map(|o| o.trim().to_ascii_lowercase())
        .filter(|o| !o.is_empty())
        .collect();
    let cases = generate(&work.0, &only, opts.node_tests.as_deref())?;
    if cases.is_empty() {
        return Err(VerifyError::Usage(format!(
            "--only {}: no case of the suite has such an op or name",
            opts.only.join(",")
        )));
    }
    let mut results: Vec<CaseResult> = match &opts.results {
        Some(p) => read_results(p, &opts.runtime)?,
        None => Vec::new(),
    };
    let names: BTreeSet<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    results.retain(|r| names.contains(r.case.as_str()));
    let done: BTreeSet<String> = results.iter().map(|r| r.case.clone()).collect();
    let pending: Vec<&Case> = cases.iter().filter(|c| !done.contains(&c.name)).collect();
    let total = cases.len();
    if opts.progress && !done.is_empty() {
        crate::errln!(
            "probe: {} of {total} cases already in the results file, {} to run",
            done.len(),
            pending.len()
        );
    }
    let mut file = match &opts.results {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| VerifyError::data(p, format!("cannot open the results file: {e}")))?,
        ),
        None => None,
    };
    // A results file cut short by an interrupted run ends without a newline: start a new line.
    if let (Some(f), Some(p)) = (file.as_mut(), &opts.results) {
        if let Ok(bytes) = std::fs::read(p) {
            if bytes.last().is_some_and(|b| *b != b'\n') {
                let _ = f.write_all(b"\n");
            }
        }
    }
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(done.len());
    let sink = Mutex::new((file, Vec::<CaseResult>::new(), None::<VerifyError>));
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.min(pending.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(case) = pending.get(i) else { break };
                let r = run_case(&runtime, &opts.runtime, case, opts.timeout);
                let n = finished.fetch_add(1, Ordering::SeqCst) + 1;
                let mut g = sink.lock().unwrap_or_else(|e| e.into_inner());
                if opts.progress {
                    let verdict = match r.status.as_str() {
                        "pass" => "ok".to_string(),
                        "void" => format!(
                            "void (ONNX Runtime CPU: {})",
                            clip(r.reference_error.as_deref().unwrap_or(""), 100)
                        ),
                        _ => format!(
                            "FAIL {}: {}",
                            r.class.map(|k| k.label()).unwrap_or("?"),
                            clip(&gist(r.message.as_deref().unwrap_or("")), 160)
                        ),
                    };
                    crate::errln!(
                        "[{n:>4}/{total}] {} ({}) {verdict} ({:.1} s)",
                        r.case,
                        r.op,
                        r.seconds
                    );
                }
                if let Some(f) = g.0.as_mut() {
                    let line = serde_json::to_string(&r).unwrap_or_default();
                    if let Err(e) = writeln!(f, "{line}").and_then(|_| f.flush()) {
                        g.2.get_or_insert(VerifyError::data(
                            opts.results.as_deref().unwrap_or(Path::new("")),
                            format!("cannot write the results file: {e}"),
                        ));
                    }
                }
                g.1.push(r);
            });
        }
    });
    let (_, fresh, err) = sink.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = err {
        return Err(e);
    }
    results.extend(fresh);
    // The suite's order.
    let pos: HashMap<&str, usize> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.as_str(), i))
        .collect();
    results.sort_by_key(|r| pos.get(r.case.as_str()).copied().unwrap_or(usize::MAX));
    let desc = results.iter().find_map(|r| r.runtime_description.clone());
    let mut warnings = Vec::new();
    let rules = learn(
        &runtime,
        opts,
        base,
        desc.as_deref(),
        &cases,
        &results,
        &work.0,
        &mut warnings,
    )?;
    let target_yaml = target_yaml(&opts.runtime, desc.as_deref(), base, &rules);
    Ok(ProbeReport {
        runtime: opts.runtime.clone(),
        runtime_description: desc,
        base: base.to_string(),
        results,
        rules,
        target_yaml,
        warnings,
    })
}

/// The summary: a table per op, the failures, the rules.
pub fn report_text(r: &ProbeReport) -> String {
    let mut s = format!(
        "probe {}: {} cases ({})\n",
        r.runtime,
        r.results.len(),
        r.runtime_description.as_deref().unwrap_or("no description")
    );
    let mut rows: BTreeMap<(String, String), [usize; 3]> = BTreeMap::new();
    let mut classes: BTreeMap<(String, String), BTreeSet<&'static str>> = BTreeMap::new();
    for c in &r.results {
        let k = (c.family.clone(), c.op.clone());
        let e = rows.entry(k.clone()).or_default();
        match c.status.as_str() {
            "pass" => e[0] += 1,
            "fail" => {
                e[1] += 1;
                if let Some(x) = c.class {
                    classes.entry(k).or_default().insert(x.label());
                }
            }
            _ => e[2] += 1,
        }
    }
    s.push_str(&format!(
        "{:<10} {:<24} {:>5} {:>5} {:>5} {:>5}  {}\n",
        "family", "op", "cases", "pass", "fail", "void", "failures"
    ));
    for ((fam, op), [p, f, v]) in &rows {
        let cl = classes
            .get(&(fam.clone(), op.clone()))
            .map(|c| c.iter().copied().collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        s.push_str(&format!(
            "{fam:<10} {op:<24} {:>5} {p:>5} {f:>5} {v:>5}  {cl}\n",
            p + f + v
        ));
    }
    let fails: Vec<&CaseResult> = r.results.iter().filter(|c| c.status == "fail").collect();
    let voids = r.results.iter().filter(|c| c.status == "void").count();
    s.push_str(&format!(
        "{} passed, {} failed, {} void (ONNX Runtime CPU cannot run them)\n",
        r.results.len() - fails.len() - voids,
        fails.len(),
        voids
    ));
    for c in &fails {
        s.push_str(&format!(
            "  FAIL {} ({}): {}: {}\n",
            c.case,
            c.op,
            c.class.map(|k| k.label()).unwrap_or("?"),
            clip(&gist(c.message.as_deref().unwrap_or("")), 240)
        ));
    }
    if r.rules.is_empty() {
        s.push_str("no failure: the target adds no rule to ");
        s.push_str(&r.base);
        s.push('\n');
    }
    for rule in &r.rules {
        s.push_str(&format!(
            "rule {} ({}): match {} -> {}; {}\n",
            rule.id,
            rule.class.label(),
            rule.match_yaml,
            rule.action,
            match (rule.written, rule.fixed) {
                (true, Some(true)) => format!(
                    "its {} failing case(s) pass on {} once compiled with it",
                    rule.cases.len(),
                    r.runtime
                ),
                (true, _) => "written".into(),
                (false, _) => format!("LEFT OUT: {}", rule.problems.join("; ")),
            }
        ));
    }
    for w in &r.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    s
}

/// Runs the command: 0 when nothing failed, 1 when the runtime failed some case (findings),
/// 2 on an error.
pub fn run_cli(a: &ProbeArgs) -> u8 {
    let node_tests = if a.node_tests {
        let corpus = a.corpus.clone().unwrap_or_else(|| {
            std::env::var_os("ONNX_SAFEIFY_CORPUS")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    crate::runtime::run::discover::default_venv()
                        .parent()
                        .map(|p| p.join("corpus"))
                        .unwrap_or_else(|| PathBuf::from("corpus"))
                })
        });
        if !corpus.is_dir() {
            crate::errln!(
                "error: --node-tests: no corpus folder at {} (run scripts/corpus.sh, or give --corpus DIR)",
                corpus.display()
            );
            return 2;
        }
        Some(corpus)
    } else {
        None
    };
    let opts = ProbeOptions {
        runtime: a.runtime.clone(),
        only: a.only.clone(),
        jobs: a.jobs,
        results: a.results.clone(),
        timeout: Duration::from_secs(a.timeout),
        node_tests,
        progress: true,
    };
    match probe(&opts) {
        Ok(r) => {
            match a.format {
                ProbeFormat::Json => crate::outln!(
                    "{}",
                    serde_json::to_string_pretty(&r).unwrap_or_else(|_| "{}".into())
                ),
                ProbeFormat::Text => crate::outp!("{}", report_text(&r)),
            }
            if let Some(out) = &a.output {
                if let Err(e) = std::fs::write(out, &r.target_yaml) {
                    crate::errln!("error: cannot write {}: {e}", out.display());
                    return 2;
                }
                crate::errln!("wrote {}", out.display());
            }
            u8::from(r.failures() > 0)
        }
        Err(e) => {
            crate::errln!("error: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gist_of_runtime_errors() {
        assert_eq!(
            gist("webgpu failed to run the model: onnxruntime-web WebGPU (run 1): failed to call OrtRun(). ERROR_CODE: 1, ERROR_MESSAGE: Non-zero status code returned while running Add node. Name:'subject' Status Message: shader_helper.cc:416 GenerateSourceCode Program Add requires f16 but the device does not support it"),
            "Program Add requires f16 but the device does not support it"
        );
        assert_eq!(
            gist("ERROR_MESSAGE: /a/reduction_ops.h:94 Status X::CheckInput() const input != nullptr was false. Input tensor cannot be null or empty"),
            "Input tensor cannot be null or empty"
        );
        assert_eq!(gist("plain text"), "plain text");
    }

    /// Rule learning end to end without a GPU runtime: results that say the antialias Resize
    /// cases and the empty ReduceMax failed give two rules, narrow enough to leave out the
    /// passing neighbours (the empty ReduceSum among them), accepted by the compiler, and
    /// their compiled cases pass when run again (on the CPU provider).
    #[test]
    fn learns_checked_rules_from_results() {
        if python().is_err() {
            eprintln!("SKIPPED: no venv with onnx and onnxruntime");
            return;
        }
        let work = TempDir::create().unwrap();
        let only: Vec<String> = ["resize", "reducemax", "reducesum"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let cases = generate(&work.0, &only, None).unwrap();
        assert_eq!(cases.len(), 14);
        let results: Vec<CaseResult> = cases
            .iter()
            .map(|c| {
                let fail = c.name.ends_with("_antialias") || c.name == "reduce_max_empty";
                CaseResult {
                    case: c.name.clone(),
                    op: c.op.clone(),
                    domain: c.domain.clone(),
                    family: c.family.clone(),
                    runtime: "ort-ep:CPUExecutionProvider".into(),
                    status: if fail { "fail" } else { "pass" }.into(),
                    class: fail.then_some(FailKind::RunError),
                    message: fail.then(|| "Status Message: not implemented here".to_string()),
                    reference_error: None,
                    runtime_description: None,
                    seconds: 0.0,
                }
            })
            .collect();
        let opts = ProbeOptions {
            runtime: "ort-ep:CPUExecutionProvider".into(),
            only,
            jobs: 1,
            results: None,
            timeout: Duration::from_secs(120),
            node_tests: None,
            progress: false,
        };
        let mut warnings = Vec::new();
        let rt = Runtime::OrtEp("CPUExecutionProvider".into());
        let rules = learn(
            &rt,
            &opts,
            "none",
            None,
            &cases,
            &results,
            &work.0,
            &mut warnings,
        )
        .unwrap();
        assert_eq!(rules.len(), 2, "{rules:#?}");
        let resize = rules.iter().find(|r| r.ops == ["Resize"]).unwrap();
        assert_eq!(
            resize.match_yaml,
            r#"{op: Resize, domain: "", attr: {antialias: 1}}"#
        );
        assert_eq!(resize.cases.len(), 2);
        let reduce = rules.iter().find(|r| r.ops == ["ReduceMax"]).unwrap();
        assert!(
            reduce.match_yaml.contains("dims: [_, 0"),
            "{}",
            reduce.match_yaml
        );
        for r in &rules {
            assert!(r.written && r.fixed == Some(true), "{r:#?}");
            assert!(
                r.why.ends_with("(run error): not implemented here"),
                "{}",
                r.why
            );
        }
        assert!(warnings.is_empty(), "{warnings:?}");
        let y = target_yaml(&opts.runtime, None, "none", &rules);
        assert!(y.contains("extends: none\nrules:\n  - id: "), "{y}");
    }

    #[test]
    fn nearest_targets() {
        assert_eq!(nearest_builtin("webgpu"), "webgpu");
        assert_eq!(nearest_builtin("openvino"), "openvino-gpu");
        assert_eq!(nearest_builtin("ort-ep:CPUExecutionProvider"), "none");
        assert_eq!(nearest_builtin("ort-ep:DmlExecutionProvider"), "directml");
    }

    fn feat(attrs: &[(&str, AttrVal)], dtype: &str, dims: &[i64]) -> Features {
        Features {
            attrs: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            dtypes: vec![Some(dtype.into())],
            dims: vec![Some(dims.to_vec())],
        }
    }

    #[test]
    fn separates_by_the_attribute_that_differs() {
        let lin = AttrVal::Str("linear".into());
        let bad = feat(
            &[("mode", lin.clone()), ("antialias", AttrVal::Int(1))],
            "float32",
            &[1, 3, 16, 16],
        );
        let good = feat(&[("mode", lin)], "float32", &[1, 3, 16, 16]);
        let (c, still) = separate(&[&bad], &[("down", &good)]);
        assert_eq!(c, vec![Cond::Attr("antialias".into(), AttrVal::Int(1))]);
        assert!(still.is_empty());
        let y = match_yaml(&["Resize".into()], "", &c);
        assert_eq!(y, r#"{op: Resize, domain: "", attr: {antialias: 1}}"#);
    }

    #[test]
    fn separates_by_a_zero_dim_and_reports_what_it_cannot() {
        let empty = feat(&[("keepdims", AttrVal::Int(1))], "float32", &[2, 0, 4]);
        let full = feat(&[("keepdims", AttrVal::Int(1))], "float32", &[3, 4, 5]);
        let (c, still) = separate(&[&empty], &[("axis1", &full)]);
        assert_eq!(c, vec![Cond::ZeroDim(3)]);
        assert!(still.is_empty());
        assert!(match_yaml(&["ReduceMax".into()], "", &c).contains("dims: [_, 0, \"...\"]"));
        let (_, still) = separate(&[&full], &[("same", &full)]);
        assert_eq!(still, vec!["same".to_string()]);
    }
}
