//! `bisect`: find the nodes that make a model fail on a runtime.
//!
//! MODEL (compiled for `--target` first, when given) fails on runtime R: a run there ends in an
//! error (no session, run error, device removed, timeout, crash) or its outputs differ from
//! ONNX Runtime CPU beyond the tolerance. Bisect cuts the graph after its first k nodes in
//! topological order, exposing as outputs every value of the prefix that a later node or the
//! graph's outputs read (and the last node's inputs and outputs), and runs the prefix on R and
//! on ONNX Runtime CPU, each run on R in a child process bounded by `--timeout`. It searches
//! the smallest failing prefix by halving; the last node of that prefix is where a failure
//! starts, a culprit.
//!
//! Then it pins the culprit to the CPU in a way every runtime honours: the culprit leaves the
//! runtime's graph, and its outputs become graph inputs fed with ONNX Runtime CPU's values for
//! them. With the culprits found so far pinned, it runs the whole model again: when it passes,
//! the search is over; else it halves again between the last culprit and the end. For k
//! culprits among n nodes that is at most k·(1 + ceil(log2 n)) + 1 runs (one run of the whole
//! model and the halving per culprit, and the last run of the whole model that passes).
//!
//! Bisect names each culprit (op, attributes, the shapes of its inputs) with the failure class
//! and the error text, writes the narrowest rules that pin such nodes to the CPU (one per op),
//! checks with the compiler where they fire, and checks them for real: MODEL compiled with
//! them runs on R against ONNX Runtime CPU (one more run, counted apart).
//!
//! It assumes that a prefix containing a failing node fails (an error stays an error; a wrong
//! value reaches a later exposed value). A failure that needs two distant nodes together is
//! found at the second one.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use prost::Message;
use serde::Serialize;

use crate::proto::{ModelProto, NodeProto, ValueInfoProto};
use crate::runtime::run::error::{one_line, VerifyError};
use crate::runtime::run::external::RuntimeKind;
use crate::runtime::run::model::{load_model_info, read_model_proto};
use crate::runtime::run::named::{parse_runtime, run_reference, Runtime, TempDir};
use crate::runtime::run::ort::OptLevel;
use crate::runtime::run::tensor::HostTensor;
use crate::verify::compare::Tolerance;
use crate::verify::inputs::{self, DimDefaults, DimOverrides, SetKind};
use crate::verify::pair::{run_pair, Outcome, PairRun};

pub use crate::verify::pair::FailKind;

/// What counts as a wrong value in a bisect run: ten times verify's default tolerance. With
/// verify's own (atol 1e-5, rtol 1e-4), PP-OCRv4 det with two seeded antialias Resizes on
/// WebGPU gave two more "culprits", an Add and a 1x1 Conv one element of which was 4e-5 off:
/// float rounding that builds up along the model, not a fault.
pub const BISECT_TOLERANCE: Tolerance = Tolerance {
    atol: 1e-4,
    rtol: 1e-3,
};

/// The command line of `onnx-safeify bisect`.
#[derive(clap::Args, Debug, Clone)]
pub struct BisectArgs {
    /// The model that fails on the runtime.
    pub model: PathBuf,
    /// Where it fails: `ort-ep:NAME` (an ONNX Runtime execution provider through the venv's
    /// onnxruntime, e.g. ort-ep:DmlExecutionProvider), `webgpu` or `openvino`.
    #[arg(long)]
    pub runtime: String,
    /// Compile MODEL for this target (a built-in name or a YAML file) first, and bisect the
    /// result.
    #[arg(long)]
    pub target: Option<String>,
    /// Real inputs (.npz, .npy, .pb or a folder of input_N.pb); default: random, as verify.
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Size of a symbolic dim for random inputs: NAME=VALUE or INPUT[AXIS]=VALUE.
    #[arg(long = "dim", value_name = "NAME=VALUE")]
    pub dims: Vec<String>,
    /// Absolute tolerance of a value against ONNX Runtime CPU (looser than verify's 1e-5:
    /// bisect looks for what breaks, not for rounding that builds up along a model).
    #[arg(long, default_value_t = BISECT_TOLERANCE.atol)]
    pub atol: f64,
    /// Relative tolerance (looser than verify's 1e-4, as --atol).
    #[arg(long, default_value_t = BISECT_TOLERANCE.rtol)]
    pub rtol: f64,
    /// Bound on each run on the runtime, in seconds: a run past it is a `timeout` failure.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// ONNX Runtime graph optimisation level, on both sides.
    #[arg(long, value_enum, default_value_t = OptLevel::All)]
    pub ort_opt_level: OptLevel,
    /// Stop after this many culprits, even when the model still fails with them pinned.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_culprits: u32,
    /// Write the suggested rules to this file (a rules file for `--rules`).
    #[arg(short = 'o', long = "rules-out", value_name = "FILE.yaml")]
    pub rules_out: Option<PathBuf>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// How to bisect.
#[derive(Debug, Clone)]
pub struct BisectOptions {
    /// `ort-ep:NAME`, `webgpu` or `openvino`.
    pub runtime: String,
    pub target: Option<String>,
    pub inputs: Option<PathBuf>,
    pub seed: u64,
    pub dims: DimOverrides,
    pub tolerance: Tolerance,
    /// Bound on each run on the runtime.
    pub timeout: Duration,
    pub optimization: OptLevel,
    /// The most culprits to look for.
    pub max_culprits: usize,
}

impl Default for BisectOptions {
    fn default() -> Self {
        BisectOptions {
            runtime: String::new(),
            target: None,
            inputs: None,
            seed: 0,
            dims: DimOverrides::default(),
            tolerance: BISECT_TOLERANCE,
            timeout: Duration::from_secs(120),
            optimization: OptLevel::All,
            max_culprits: 8,
        }
    }
}

/// One run of a prefix.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// Number of nodes in the prefix (all of them: the whole model).
    pub nodes: usize,
    /// Culprits found before this run, pinned to the CPU (out of the runtime's graph).
    pub pinned: usize,
    pub failed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<FailKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// ONNX Runtime CPU's own error on the same prefix, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_error: Option<String>,
    pub seconds: f64,
}

/// A node where a failure starts.
#[derive(Debug, Clone, Serialize)]
pub struct Culprit {
    /// Position in topological order (0-based).
    pub index: usize,
    pub name: String,
    pub op: String,
    pub domain: String,
    /// `name: dtype[shape]` of each input (`?` where unknown).
    pub inputs: Vec<String>,
    /// `name=value` of each attribute (graphs and tensors summarised).
    pub attributes: Vec<String>,
    pub class: FailKind,
    pub message: String,
    /// ONNX Runtime CPU fails on the same prefix too: the model itself does not run there, so
    /// the failure is not a hazard of the runtime.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_error: Option<String>,
}

/// One suggested rule: the culprits of one op.
#[derive(Debug, Clone, Serialize)]
pub struct SuggestedRule {
    pub id: String,
    /// The rule's `match`, as written in the rules file.
    #[serde(rename = "match")]
    pub matches: String,
    /// The culprits it is for.
    pub culprits: Vec<String>,
    /// The nodes the compiler pins with it (the culprits, and any other node it matches).
    pub fires_on: Vec<String>,
}

/// How the final check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckStatus {
    /// MODEL compiled with the rules runs faithfully on the runtime.
    Pass,
    /// It still fails there (or does not compile).
    Fail,
    /// Not attempted (ONNX Runtime CPU itself fails at a culprit, or the rules do not load).
    NotRun,
}

impl CheckStatus {
    pub fn label(self) -> &'static str {
        match self {
            CheckStatus::Pass => "pass",
            CheckStatus::Fail => "fail",
            CheckStatus::NotRun => "not run",
        }
    }
}

/// The final check: MODEL compiled with the suggested rules, run on the runtime against ONNX
/// Runtime CPU.
#[derive(Debug, Clone, Serialize)]
pub struct RuleCheck {
    pub status: CheckStatus,
    /// The target the rules were compiled over.
    pub target: String,
    pub detail: String,
    /// Runs on the runtime (not counted in the search's `runs`).
    pub runs: usize,
    pub seconds: f64,
}

/// The result of a bisection.
#[derive(Debug, Clone, Serialize)]
pub struct BisectReport {
    pub model: String,
    /// The file bisected (the compiled model with `--target`).
    pub bisected: String,
    pub runtime: String,
    /// Nodes of the main graph.
    pub nodes: usize,
    /// Runs of the search on the runtime (each a child process).
    pub runs: usize,
    /// The most runs the search may take for the culprits found: k·(1 + ceil(log2 n)) + 1 for
    /// k culprits among n nodes (1 when the whole model runs faithfully).
    pub run_bound: usize,
    /// Every run of the search, in order: a run of the whole model, then the halving, for each
    /// culprit; the last run of the whole model.
    pub steps: Vec<Step>,
    /// In the order found (topological). Empty: the whole model runs faithfully.
    pub culprits: Vec<Culprit>,
    /// Why the search stopped before the model ran faithfully with the culprits pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// One rule per op of the culprits.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<SuggestedRule>,
    /// The suggested rules, a rules file for `--rules`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_yaml: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_check: Option<RuleCheck>,
    pub warnings: Vec<String>,
}

/// Node indices of the main graph in topological order: the file's order when it already is
/// one (ONNX requires it), else Kahn's order over the explicit inputs.
fn topological_order(model: &ModelProto) -> Vec<usize> {
    let Some(g) = model.graph.as_ref() else {
        return Vec::new();
    };
    let mut known: HashSet<&str> = HashSet::new();
    known.insert("");
    for v in &g.input {
        known.insert(v.name.as_deref().unwrap_or(""));
    }
    for t in &g.initializer {
        known.insert(t.name.as_deref().unwrap_or(""));
    }
    let producer: HashMap<&str, usize> = g
        .node
        .iter()
        .enumerate()
        .flat_map(|(i, n)| n.output.iter().map(move |o| (o.as_str(), i)))
        .collect();
    let mut seen = known.clone();
    let mut ordered = true;
    for n in &g.node {
        if n.input.iter().any(|i| !seen.contains(i.as_str())) {
            ordered = false;
            break;
        }
        seen.extend(n.output.iter().map(|o| o.as_str()));
    }
    if ordered {
        return (0..g.node.len()).collect();
    }
    // Kahn: a node is ready when each input is known or made by an already placed node.
    let mut placed = vec![false; g.node.len()];
    let mut order = Vec::with_capacity(g.node.len());
    let mut avail = known;
    loop {
        let mut progress = false;
        for (i, n) in g.node.iter().enumerate() {
            if placed[i] {
                continue;
            }
            let ready = n
                .input
                .iter()
                .all(|x| avail.contains(x.as_str()) || !producer.contains_key(x.as_str()));
            if ready {
                placed[i] = true;
                order.push(i);
                avail.extend(n.output.iter().map(|o| o.as_str()));
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
    // A cycle: the rest in file order (ONNX Runtime will refuse the model anyway).
    order.extend((0..g.node.len()).filter(|i| !placed[*i]));
    order
}

/// Names a node reads, its subgraphs' references to outer values included.
fn node_reads(n: &NodeProto, out: &mut Vec<String>) {
    out.extend(n.input.iter().filter(|i| !i.is_empty()).cloned());
    for a in &n.attribute {
        for g in a.g.iter().map(|g| g.as_ref()).chain(a.graphs.iter()) {
            for inner in &g.node {
                node_reads(inner, out);
            }
        }
    }
}

/// The model cut after the first `k` nodes of `order`, without the `pinned` nodes, and the
/// names it outputs.
fn cut_model(
    model: &ModelProto,
    order: &[usize],
    k: usize,
    pinned: &HashSet<usize>,
) -> (ModelProto, Vec<String>) {
    let mut m = model.clone();
    let Some(g) = model.graph.as_ref() else {
        return (m, Vec::new());
    };
    let inside: Vec<&NodeProto> = order[..k]
        .iter()
        .filter(|i| !pinned.contains(i))
        .map(|&i| &g.node[i])
        .collect();
    let produced: HashSet<&str> = inside
        .iter()
        .flat_map(|n| n.output.iter().map(|o| o.as_str()))
        .filter(|o| !o.is_empty())
        .collect();
    let mut wanted: Vec<String> = Vec::new();
    let push = |name: &str, wanted: &mut Vec<String>| {
        if produced.contains(name) && !wanted.iter().any(|w| w == name) {
            wanted.push(name.to_string());
        }
    };
    // Read after the prefix, or a graph output.
    let mut later = Vec::new();
    for &i in order[k..].iter().filter(|i| !pinned.contains(i)) {
        node_reads(&g.node[i], &mut later);
    }
    for o in &g.output {
        later.push(o.name.clone().unwrap_or_default());
    }
    let later: HashSet<String> = later.into_iter().collect();
    for n in &inside {
        for o in &n.output {
            if later.contains(o) {
                push(o, &mut wanted);
            }
        }
    }
    // The last node's inputs and outputs.
    if let Some(last) = inside.last() {
        for x in last.input.iter().chain(last.output.iter()) {
            push(x, &mut wanted);
        }
    }
    let typed: HashMap<&str, &ValueInfoProto> = g
        .value_info
        .iter()
        .chain(g.output.iter())
        .filter_map(|v| v.name.as_deref().map(|n| (n, v)))
        .collect();
    if let Some(mg) = m.graph.as_mut() {
        mg.node = inside.iter().map(|n| (*n).clone()).collect();
        mg.output = wanted
            .iter()
            .map(|name| match typed.get(name.as_str()) {
                Some(v) => (*v).clone(),
                None => ValueInfoProto {
                    name: Some(name.clone()),
                    ..Default::default()
                },
            })
            .collect();
    }
    (m, wanted)
}

/// The whole model without the `pinned` nodes, and its outputs.
fn whole_model(model: &ModelProto, pinned: &HashSet<usize>) -> (ModelProto, Vec<String>) {
    let mut m = model.clone();
    let mut outputs = Vec::new();
    if let Some(g) = m.graph.as_mut() {
        if !pinned.is_empty() {
            let nodes = std::mem::take(&mut g.node);
            g.node = nodes
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !pinned.contains(i))
                .map(|(_, n)| n)
                .collect();
        }
        outputs = g.output.iter().filter_map(|o| o.name.clone()).collect();
    }
    (m, outputs)
}

/// A graph input of `t`'s element type and shape.
fn input_of(name: &str, t: &HostTensor) -> ValueInfoProto {
    use crate::proto::{tensor_shape_proto, type_proto, TensorShapeProto, TypeProto};
    let dim = t
        .shape
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
            denotation: None,
        })
        .collect();
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(t.dtype.code()),
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: None,
        }),
        ..Default::default()
    }
}

/// Feeds the pinned nodes' outputs (`values`, ONNX Runtime CPU's) to `m` as graph inputs: each
/// one a node of `m` reads becomes an input; none is an output any more (it is exact). Returns
/// the feed of `m`: `feed` and those values, for its inputs only.
fn feed_pinned(
    m: &mut ModelProto,
    outputs: &mut Vec<String>,
    feed: &[(String, HostTensor)],
    values: &[(String, HostTensor)],
) -> Vec<(String, HostTensor)> {
    let Some(g) = m.graph.as_mut() else {
        return feed.to_vec();
    };
    if !values.is_empty() {
        let mut reads = Vec::new();
        for n in &g.node {
            node_reads(n, &mut reads);
        }
        let reads: HashSet<String> = reads.into_iter().collect();
        let pinned: HashSet<&str> = values.iter().map(|(n, _)| n.as_str()).collect();
        g.output
            .retain(|o| !pinned.contains(o.name.as_deref().unwrap_or("")));
        outputs.retain(|o| !pinned.contains(o.as_str()));
        g.value_info
            .retain(|v| !pinned.contains(v.name.as_deref().unwrap_or("")));
        for (name, t) in values {
            if reads.contains(name) && !g.input.iter().any(|i| i.name.as_deref() == Some(name)) {
                g.input.push(input_of(name, t));
            }
        }
    }
    let inputs: HashSet<&str> = g.input.iter().filter_map(|i| i.name.as_deref()).collect();
    feed.iter()
        .chain(values.iter())
        .filter(|(n, _)| inputs.contains(n.as_str()))
        .cloned()
        .collect()
}

/// Links the external data files `model` names (relative to `from`) into `to`, so that a cut
/// written there finds them.
fn link_external_data(model: &ModelProto, from: &Path, to: &Path) {
    let Some(g) = model.graph.as_ref() else {
        return;
    };
    let mut done = HashSet::new();
    for t in &g.initializer {
        for e in &t.external_data {
            if e.key.as_deref() != Some("location") {
                continue;
            }
            let Some(loc) = e.value.as_deref() else {
                continue;
            };
            let rel = Path::new(loc);
            if rel.is_absolute()
                || rel
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
                || !done.insert(loc.to_string())
            {
                continue;
            }
            let src = from.join(rel);
            let dst = to.join(rel);
            if let Some(parent) = dst.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            if let Ok(abs) = std::fs::canonicalize(&src) {
                #[cfg(unix)]
                let _ = std::os::unix::fs::symlink(&abs, &dst);
                #[cfg(not(unix))]
                let _ = std::fs::copy(&abs, &dst);
            }
        }
    }
}

struct Bisector<'a> {
    runtime: Runtime,
    opts: &'a BisectOptions,
    model: ModelProto,
    order: Vec<usize>,
    feed: Vec<(String, HostTensor)>,
    work: TempDir,
    warnings: Vec<String>,
    runs: usize,
    /// The culprits found so far (indices into the graph's nodes), out of the runtime's graph.
    pinned: Vec<usize>,
    /// ONNX Runtime CPU's values of the pinned nodes' outputs, fed in their place.
    pinned_values: Vec<(String, HostTensor)>,
    steps: Vec<Step>,
}

/// The smallest failing prefix of a search.
struct Found {
    /// Its length: the culprit is `order[hi - 1]`.
    hi: usize,
    fail: (FailKind, String),
    /// ONNX Runtime CPU's error on it.
    fail_ref: Option<String>,
    /// ONNX Runtime CPU's values on the longest passing prefix and on the failing one.
    lo_reference: Option<HashMap<String, HostTensor>>,
    hi_reference: Option<HashMap<String, HostTensor>>,
}

impl Bisector<'_> {
    /// The first `k` nodes (all of them: the model) without the pinned ones, the names to
    /// compare, and its feed.
    fn prefix(&self, k: usize) -> (ModelProto, Vec<String>, Vec<(String, HostTensor)>) {
        let pinned: HashSet<usize> = self.pinned.iter().copied().collect();
        let (mut cut, mut outputs) = if k == self.order.len() {
            whole_model(&self.model, &pinned)
        } else {
            cut_model(&self.model, &self.order, k, &pinned)
        };
        let feed = feed_pinned(&mut cut, &mut outputs, &self.feed, &self.pinned_values);
        (cut, outputs, feed)
    }

    /// Runs the first `k` nodes on the runtime and on ONNX Runtime CPU, and records the step.
    fn run_prefix(&mut self, k: usize) -> Result<Outcome, VerifyError> {
        let t = Instant::now();
        let (cut, outputs, feed) = self.prefix(k);
        let path = self
            .work
            .0
            .join(format!("prefix_{k}_{}.onnx", self.pinned.len()));
        std::fs::write(&path, cut.encode_to_vec())
            .map_err(|e| VerifyError::data(&path, format!("cannot write the cut model: {e}")))?;
        self.runs += 1;
        let (outcome, _) = run_pair(&PairRun {
            runtime: &self.runtime,
            path: &path,
            proto: &cut,
            outputs: &outputs,
            feed: &feed,
            tolerance: self.opts.tolerance,
            optimization: self.opts.optimization,
            timeout: self.opts.timeout,
        })?;
        if let (None, Err(e)) = (&outcome.failure, &outcome.reference) {
            self.warnings.push(format!(
                "the first {k} nodes run on {} but not on ONNX Runtime CPU ({e}); counted as passing",
                self.opts.runtime
            ));
        }
        self.steps.push(Step {
            nodes: k,
            pinned: self.pinned.len(),
            failed: outcome.failure.is_some(),
            class: outcome.failure.as_ref().map(|f| f.0),
            message: outcome.failure.as_ref().map(|f| f.1.clone()),
            reference_error: outcome.reference.as_ref().err().cloned(),
            seconds: t.elapsed().as_secs_f64(),
        });
        Ok(outcome)
    }

    /// Halves between a passing prefix of `lo` nodes and the failing whole model (`whole`, its
    /// run) down to the smallest failing prefix.
    fn search(&mut self, mut lo: usize, whole: Outcome) -> Result<Found, VerifyError> {
        let mut hi = self.order.len();
        let mut fail = whole.failure.clone().expect("a failing run");
        let mut fail_ref = whole.reference.as_ref().err().cloned();
        let mut lo_reference = None;
        let mut hi_reference = whole.reference.ok();
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let o = self.run_prefix(mid)?;
            match o.failure {
                Some(f) => {
                    hi = mid;
                    fail = f;
                    fail_ref = o.reference.as_ref().err().cloned();
                    hi_reference = o.reference.ok();
                }
                None => {
                    lo = mid;
                    lo_reference = o.reference.ok();
                }
            }
        }
        Ok(Found {
            hi,
            fail,
            fail_ref,
            lo_reference,
            hi_reference,
        })
    }

    /// `dtype[shape]` of a value the culprit reads, from the feeds, the initializers or the
    /// reference's values around it.
    fn shape_of(&self, name: &str, f: &Found) -> String {
        if let Some((_, t)) = self
            .feed
            .iter()
            .chain(self.pinned_values.iter())
            .find(|(k, _)| k == name)
        {
            return t.describe();
        }
        let g = self.model.graph.as_ref().expect("a graph");
        if let Some(t) = g
            .initializer
            .iter()
            .find(|t| t.name.as_deref() == Some(name))
        {
            let dt = t
                .data_type
                .and_then(crate::runtime::run::dtype::DType::from_code)
                .map(|d| d.name())
                .unwrap_or("?");
            let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
            return format!("{dt}[{}] (initializer)", dims.join(","));
        }
        for m in [&f.lo_reference, &f.hi_reference].into_iter().flatten() {
            if let Some(t) = m.get(name) {
                return t.describe();
            }
        }
        "?".into()
    }

    /// The culprit of a search, and the element types of its inputs.
    fn culprit(&self, f: &Found) -> (Culprit, Vec<Option<String>>) {
        let g = self.model.graph.as_ref().expect("a graph");
        let node = &g.node[self.order[f.hi - 1]];
        let inputs: Vec<String> = node
            .input
            .iter()
            .filter(|i| !i.is_empty())
            .map(|i| format!("{i}: {}", self.shape_of(i, f)))
            .collect();
        let dtypes: Vec<Option<String>> = node
            .input
            .iter()
            .map(|i| {
                Some(i)
                    .filter(|i| !i.is_empty())
                    .map(|i| self.shape_of(i, f))
                    .and_then(|s| s.split('[').next().map(str::to_string))
                    .filter(|s| s != "?" && !s.is_empty())
            })
            .collect();
        let c = Culprit {
            index: f.hi - 1,
            name: node.name.clone().unwrap_or_default(),
            op: node.op_type.clone().unwrap_or_default(),
            domain: node.domain.clone().unwrap_or_default(),
            inputs,
            attributes: node.attribute.iter().map(attr_text).collect(),
            class: f.fail.0,
            message: f.fail.1.clone(),
            reference_error: f.fail_ref.clone(),
        };
        (c, dtypes)
    }

    /// ONNX Runtime CPU's values of the culprit's outputs: from the failing prefix's reference
    /// (which exposes them), else from a run of the reference alone.
    fn culprit_values(&self, f: &Found) -> Result<Vec<(String, HostTensor)>, String> {
        let g = self.model.graph.as_ref().expect("a graph");
        let node = &g.node[self.order[f.hi - 1]];
        let names: Vec<&String> = node.output.iter().filter(|o| !o.is_empty()).collect();
        let from = |m: &HashMap<String, HostTensor>| -> Option<Vec<(String, HostTensor)>> {
            names
                .iter()
                .map(|n| m.get(*n).map(|t| ((*n).clone(), t.clone())))
                .collect()
        };
        if let Some(v) = f.hi_reference.as_ref().and_then(from) {
            return Ok(v);
        }
        let pinned: HashSet<usize> = self.pinned.iter().copied().collect();
        let (mut cut, mut outputs) = cut_model(&self.model, &self.order, f.hi, &pinned);
        let feed = feed_pinned(&mut cut, &mut outputs, &self.feed, &self.pinned_values);
        let path = self.work.0.join(format!("reference_{}.onnx", f.hi));
        std::fs::write(&path, cut.encode_to_vec()).map_err(|e| e.to_string())?;
        let values = run_reference(&path, &cut, &feed, self.opts.optimization)
            .map_err(|e| e.to_string())??;
        from(&values).ok_or_else(|| {
            "ONNX Runtime CPU does not give all of its outputs as tensors".to_string()
        })
    }
}

/// Bisects `model` on `opts.runtime`. `Ok` carries the report whether or not a culprit was
/// found; `Err`: it could not be carried out (bad file, runtime missing, ...).
pub fn bisect(model: &Path, opts: &BisectOptions) -> Result<BisectReport, VerifyError> {
    let runtime = parse_runtime(&opts.runtime)?;
    if opts.timeout.is_zero() {
        return Err(VerifyError::Usage("--timeout must be positive".into()));
    }
    let work = TempDir::create()?;
    let mut warnings = Vec::new();
    // Compile for the target first, when one is given.
    let bisected: PathBuf = match &opts.target {
        None => model.to_path_buf(),
        Some(t) => {
            let out = work.0.join("compiled.onnx");
            let target = crate::compile::load_target(t, &[])
                .map_err(|e| VerifyError::Usage(e.to_string()))?;
            let mut doc =
                crate::load(model).map_err(|e| VerifyError::model(model, e.to_string()))?;
            let eopts = crate::compile::options(Vec::new())
                .map_err(|e| VerifyError::Usage(e.to_string()))?;
            let compiled =
                crate::compile::compile_document(&mut doc, &target, &eopts, false, model)
                    .map_err(|e| VerifyError::model(model, e.to_string()))?;
            if !compiled.writable {
                return Err(VerifyError::model(
                    model,
                    compiled.blocked_message(model, &target),
                ));
            }
            crate::save(&doc, &out).map_err(|e| VerifyError::model(model, e.to_string()))?;
            out
        }
    };
    let proto = read_model_proto(&bisected)?;
    let info = load_model_info(&bisected)?;
    let feed: Vec<(String, HostTensor)> = match &opts.inputs {
        Some(p) => {
            let tensors = inputs::load_tensor_set(p, SetKind::Inputs)?;
            let names: Vec<String> = info.inputs.iter().map(|v| v.name.clone()).collect();
            inputs::assign_tensors(p, tensors, &names, "input")?
        }
        None => {
            let plan = inputs::plan_inputs(
                &info,
                &info,
                &opts.dims,
                DimDefaults::default(),
                (-1.0, 1.0),
                &mut warnings,
            )?;
            inputs::generate(&plan, inputs::run_seed(opts.seed, 0))
        }
    };
    let order = topological_order(&proto);
    let n = order.len();
    if n == 0 {
        return Err(VerifyError::model(&bisected, "the main graph has no nodes"));
    }
    let model_dir = bisected
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    link_external_data(&proto, &model_dir, &work.0);
    if opts.max_culprits == 0 {
        return Err(VerifyError::Usage(
            "--max-culprits must be at least 1".into(),
        ));
    }
    let mut b = Bisector {
        runtime,
        opts,
        model: proto,
        order,
        feed,
        work,
        warnings,
        runs: 0,
        pinned: Vec::new(),
        pinned_values: Vec::new(),
        steps: Vec::new(),
    };
    let mut culprits: Vec<(Culprit, Vec<Option<String>>, usize)> = Vec::new();
    let mut stopped: Option<String> = None;
    // The first `lo` nodes pass, with the culprits found so far pinned.
    let mut lo = 0usize;
    loop {
        let whole = b.run_prefix(n)?;
        if whole.failure.is_none() {
            break;
        }
        if culprits.len() >= opts.max_culprits {
            stopped = Some(format!(
                "the model still fails with {} culprit(s) pinned; stopped at --max-culprits {}",
                culprits.len(),
                opts.max_culprits
            ));
            break;
        }
        if lo >= n {
            stopped = Some(
                "the model still fails with every culprit pinned, and no node is left after the last one (a failure of no single node, or a runtime that fails at random)".into(),
            );
            break;
        }
        let found = b.search(lo, whole)?;
        let (c, dtypes) = b.culprit(&found);
        let node = b.order[found.hi - 1];
        let name = c.name.clone();
        let reference_fails = c.reference_error.clone();
        let again = culprits
            .last()
            .filter(|(p, _, _)| same_failure(&p.message, &c.message))
            .map(|(p, _, _)| p.name.clone());
        culprits.push((c, dtypes, node));
        if let Some(prev) = again {
            stopped = Some(format!(
                "'{name}' fails with the very error '{prev}' did, with '{prev}' pinned: the failure does not come from a node (pinning does not change it); look at the model as a whole"
            ));
            break;
        }
        if let Some(e) = reference_fails {
            stopped = Some(format!(
                "ONNX Runtime CPU fails at '{name}' too ({}): the model itself does not run there, so bisect cannot pin it and look further",
                scrub_paths(&e)
            ));
            break;
        }
        match b.culprit_values(&found) {
            Ok(v) => {
                b.pinned.push(node);
                b.pinned_values.extend(v);
            }
            Err(e) => {
                stopped = Some(format!(
                    "cannot pin '{name}' to look further: {}",
                    scrub_paths(&e)
                ));
                break;
            }
        }
        lo = found.hi;
    }
    let k = culprits.len();
    let mut report = BisectReport {
        model: model.display().to_string(),
        bisected: if opts.target.is_some() {
            format!(
                "{} compiled for {}",
                model.display(),
                opts.target.as_deref().unwrap_or("")
            )
        } else {
            bisected.display().to_string()
        },
        runtime: opts.runtime.clone(),
        nodes: n,
        runs: b.runs,
        run_bound: k * (1 + ceil_log2(n)) + 1,
        steps: std::mem::take(&mut b.steps),
        culprits: culprits.iter().map(|(c, _, _)| c.clone()).collect(),
        stopped,
        rules: Vec::new(),
        rule_yaml: None,
        rule_check: None,
        warnings: Vec::new(),
    };
    if k == 0 {
        report.warnings = std::mem::take(&mut b.warnings);
        return Ok(report);
    }

    // One rule per op, the narrowest that takes all its culprits and leaves out the other
    // nodes of that op.
    let g = b.model.graph.as_ref().expect("a graph with nodes");
    let mut groups: Vec<RuleDraft> = Vec::new();
    for (ci, (c, _, _)) in culprits.iter().enumerate() {
        match groups
            .iter_mut()
            .find(|d| d.op == c.op && d.domain == c.domain)
        {
            Some(d) => d.members.push(ci),
            None => groups.push(RuleDraft {
                id: String::new(),
                op: c.op.clone(),
                domain: c.domain.clone(),
                members: vec![ci],
                conds: Vec::new(),
            }),
        }
    }
    let mut used_ids: HashSet<String> = HashSet::new();
    for d in &mut groups {
        let nodes: Vec<usize> = d.members.iter().map(|&ci| culprits[ci].2).collect();
        let dtypes: Vec<Vec<Option<String>>> =
            d.members.iter().map(|&ci| culprits[ci].1.clone()).collect();
        let (conds, still) = narrow_conds(g, &nodes, &dtypes);
        if !still.is_empty() {
            b.warnings.push(format!(
                "no condition on attributes, input types or dims leaves out {} other {} node(s) ({}): the rule pins them too",
                still.len(),
                d.op,
                still.join(", ")
            ));
        }
        d.conds = conds;
        let mut id = format!("bisect-{}-on-cpu", d.op.to_ascii_lowercase());
        if !used_ids.insert(id.clone()) {
            id = format!(
                "bisect-{}-{}-on-cpu",
                d.domain.replace('.', "-"),
                d.op.to_ascii_lowercase()
            );
            used_ids.insert(id.clone());
        }
        d.id = id;
    }
    let all: Vec<Culprit> = culprits.iter().map(|(c, _, _)| c.clone()).collect();
    let yaml = rule_yaml(&groups, &all, opts, model);
    // The compiler's check: where each rule fires.
    let rules_path = b.work.0.join("bisect-rules.yaml");
    let base = opts
        .target
        .clone()
        .unwrap_or_else(|| crate::probe::nearest_builtin(&opts.runtime).to_string());
    let fired = std::fs::write(&rules_path, &yaml)
        .map_err(|e| e.to_string())
        .and_then(|_| rule_fires_on(&bisected, &base, &rules_path));
    let mut rules_load = true;
    match &fired {
        Ok((_, theirs)) => {
            // The base target may cover a culprit already (bisect ran the model as it is).
            let mut by_rule: Vec<(String, Vec<String>)> = Vec::new();
            for (rule, node) in theirs {
                if culprits.iter().any(|(c, _, _)| &c.name == node) {
                    match by_rule.iter_mut().find(|(r, _)| r == rule) {
                        Some((_, v)) => v.push(node.clone()),
                        None => by_rule.push((rule.clone(), vec![node.clone()])),
                    }
                }
            }
            for (rule, nodes) in by_rule {
                b.warnings.push(format!(
                    "target {base} already has a rule for {}: {rule}{}",
                    nodes.join(", "),
                    if opts.target.is_none() {
                        format!(" (compile with --target {base})")
                    } else {
                        String::new()
                    }
                ));
            }
        }
        Err(e) => {
            rules_load = false;
            b.warnings.push(format!(
                "the suggested rules do not compile: {}",
                scrub_paths(e)
            ))
        }
    }
    for d in &groups {
        let names: Vec<String> = d.members.iter().map(|&ci| all[ci].name.clone()).collect();
        let fires_on: Vec<String> = fired
            .as_ref()
            .ok()
            .and_then(|f| f.0.get(&d.id).cloned())
            .unwrap_or_default();
        if rules_load {
            let missed: Vec<&str> = names
                .iter()
                .filter(|n| !fires_on.contains(n))
                .map(|s| s.as_str())
                .collect();
            if !missed.is_empty() {
                b.warnings.push(format!(
                    "the compiler does not fire {} on {}",
                    d.id,
                    missed.join(", ")
                ));
            }
            let extra: Vec<&str> = fires_on
                .iter()
                .filter(|n| !names.contains(n))
                .map(|s| s.as_str())
                .collect();
            if !extra.is_empty() {
                b.warnings.push(format!(
                    "the compiler pins {} other node(s) with {} too: {}",
                    extra.len(),
                    d.id,
                    extra.join(", ")
                ));
            }
        }
        report.rules.push(SuggestedRule {
            id: d.id.clone(),
            matches: crate::probe::match_yaml(std::slice::from_ref(&d.op), &d.domain, &d.conds),
            culprits: names,
            fires_on,
        });
    }
    report.rule_yaml = Some(yaml);

    // The final check: MODEL compiled with the rules runs faithfully on the runtime.
    report.rule_check = Some(
        if let Some(c) = all.iter().find(|c| c.reference_error.is_some()) {
            RuleCheck {
                status: CheckStatus::NotRun,
                target: base.clone(),
                detail: format!(
                    "ONNX Runtime CPU itself fails at '{}': pinning it to the CPU cannot help",
                    c.name
                ),
                runs: 0,
                seconds: 0.0,
            }
        } else if !rules_load {
            RuleCheck {
                status: CheckStatus::NotRun,
                target: base.clone(),
                detail: "the rules do not compile".into(),
                runs: 0,
                seconds: 0.0,
            }
        } else {
            check_rules(&b, model, &base, &rules_path)
        },
    );
    report.warnings = std::mem::take(&mut b.warnings);
    Ok(report)
}

/// Whether two failure messages say the same thing, the cut model's file named at their
/// start aside.
fn same_failure(a: &str, b: &str) -> bool {
    let strip = |m: &str| -> String {
        match m.split_once(".onnx: ") {
            Some((file, rest)) if !file.contains(' ') => rest.to_string(),
            _ => m.to_string(),
        }
    };
    strip(a) == strip(b)
}

/// One rule being written: the culprits (indices into the list) of one op.
struct RuleDraft {
    id: String,
    op: String,
    domain: String,
    members: Vec<usize>,
    conds: Vec<crate::probe::Cond>,
}

/// Compiles MODEL over `base` with the rules, and runs the result on the runtime against ONNX
/// Runtime CPU.
fn check_rules(b: &Bisector, model: &Path, base: &str, rules: &Path) -> RuleCheck {
    let t = Instant::now();
    let mut check = RuleCheck {
        status: CheckStatus::Fail,
        target: base.to_string(),
        detail: String::new(),
        runs: 0,
        seconds: 0.0,
    };
    let compiled = (|| -> Result<PathBuf, String> {
        let target =
            crate::compile::load_target(base, &[rules.to_path_buf()]).map_err(|e| e.to_string())?;
        let mut doc = crate::load(model).map_err(|e| e.to_string())?;
        let o = crate::compile::options(Vec::new()).map_err(|e| e.to_string())?;
        let c = crate::compile::compile_document(&mut doc, &target, &o, false, model)
            .map_err(|e| e.to_string())?;
        if !c.writable {
            return Err(c.blocked_message(model, &target));
        }
        let out = b.work.0.join("checked.onnx");
        crate::save(&doc, &out).map_err(|e| e.to_string())?;
        Ok(out)
    })();
    let path = match compiled {
        Ok(p) => p,
        Err(e) => {
            check.detail = format!(
                "MODEL does not compile for {base} with the rules: {}",
                scrub_paths(&e)
            );
            check.seconds = t.elapsed().as_secs_f64();
            return check;
        }
    };
    let run = read_model_proto(&path).and_then(|proto| {
        let mut outputs: Vec<String> = proto
            .graph
            .as_ref()
            .map(|g| g.output.iter().filter_map(|o| o.name.clone()).collect())
            .unwrap_or_default();
        let mut p2 = proto.clone();
        let feed = feed_pinned(&mut p2, &mut outputs, &b.feed, &[]);
        run_pair(&PairRun {
            runtime: &b.runtime,
            path: &path,
            proto: &proto,
            outputs: &outputs,
            feed: &feed,
            tolerance: b.opts.tolerance,
            optimization: b.opts.optimization,
            timeout: b.opts.timeout,
        })
    });
    check.runs = 1;
    check.seconds = t.elapsed().as_secs_f64();
    let openvino = matches!(b.runtime, Runtime::External(RuntimeKind::Openvino));
    let ignores = "openvino ignores CPU pins (layer_ann is an ONNX Runtime setting; OpenVINO runs every node itself)";
    match run {
        Err(e) => {
            check.detail = format!(
                "MODEL compiled for {base} with the rules could not be run: {}",
                scrub_paths(&one_line(&e.to_string()))
            );
        }
        Ok((o, _)) => match (o.failure, o.reference) {
            (None, Ok(_)) => {
                check.status = CheckStatus::Pass;
                check.detail = if openvino {
                    format!("MODEL compiled for {base} with the rules runs faithfully on openvino; {ignores}, so not because of the rules")
                } else {
                    format!(
                        "MODEL compiled for {base} with the rules runs faithfully on {}",
                        b.opts.runtime
                    )
                };
            }
            (None, Err(e)) => {
                check.detail = format!(
                    "MODEL compiled for {base} with the rules runs on {}, but not on ONNX Runtime CPU ({}): nothing to compare with",
                    b.opts.runtime,
                    scrub_paths(&e)
                );
            }
            (Some((kind, msg)), _) => {
                check.detail = format!(
                    "MODEL compiled for {base} with the rules still fails on {} ({}): {}{}",
                    b.opts.runtime,
                    kind.label(),
                    scrub_paths(&msg),
                    if openvino {
                        format!("; {ignores}: the rules cannot move these nodes off it")
                    } else {
                        String::new()
                    }
                );
            }
        },
    }
    check
}

fn ceil_log2(n: usize) -> usize {
    let mut k = 0;
    while (1usize << k) < n {
        k += 1;
    }
    k
}

fn attr_text(a: &crate::proto::AttributeProto) -> String {
    let name = a.name.clone().unwrap_or_default();
    let v = if let Some(s) = &a.s {
        format!("{:?}", String::from_utf8_lossy(s))
    } else if let Some(i) = a.i {
        i.to_string()
    } else if let Some(f) = a.f {
        f.to_string()
    } else if !a.ints.is_empty() {
        format!("{:?}", a.ints)
    } else if !a.floats.is_empty() {
        format!("{:?}", a.floats)
    } else if a.t.is_some() {
        "<tensor>".into()
    } else if a.g.is_some() || !a.graphs.is_empty() {
        "<graph>".into()
    } else {
        "<other>".into()
    };
    format!("{name}={v}")
}

/// Removes file paths from a runtime's message (the temporary files bisect runs): an absolute
/// path is replaced by its file name.
pub(crate) fn scrub_paths(message: &str) -> String {
    message
        .split(' ')
        .map(|w| {
            let core = w.trim_matches(|c: char| "'\"`()[],:;".contains(c));
            if core.starts_with('/') && core[1..].contains('/') {
                let base = core.rsplit('/').next().unwrap_or("");
                w.replace(core, base)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The narrowest rule for culprits of one op: their op and domain, then the fewest conditions
/// on attributes and input types and dims that all of them share (probe's separation) and that
/// leave out every other node of the graph with that op. `dtypes`: each culprit's input element
/// types where the graph does not record them. Returns the conditions and the other nodes they
/// still match.
pub(crate) fn narrow_conds(
    g: &crate::proto::GraphProto,
    culprits: &[usize],
    dtypes: &[Vec<Option<String>>],
) -> (Vec<crate::probe::Cond>, Vec<String>) {
    let Some(&first) = culprits.first() else {
        return (Vec::new(), Vec::new());
    };
    let node = &g.node[first];
    let bad: Vec<crate::probe::Features> = culprits
        .iter()
        .enumerate()
        .map(|(ci, &i)| {
            let mut f = crate::probe::node_features(g, &g.node[i]);
            for (slot, d) in dtypes.get(ci).into_iter().flatten().enumerate() {
                if let (Some(d), Some(x)) = (d, f.dtypes.get_mut(slot)) {
                    if x.is_none() {
                        *x = Some(d.clone());
                    }
                }
            }
            f
        })
        .collect();
    let others: Vec<(String, crate::probe::Features)> = g
        .node
        .iter()
        .enumerate()
        .filter(|(i, n)| {
            !culprits.contains(i)
                && n.op_type == node.op_type
                && n.domain.as_deref().unwrap_or("") == node.domain.as_deref().unwrap_or("")
        })
        .map(|(i, n)| {
            let mut f = crate::probe::node_features(g, n);
            // An input type the graph does not record may be the culprits': assume it is, so
            // that a type condition never seems to leave out a node it would match.
            for (slot, d) in f.dtypes.iter_mut().enumerate() {
                if d.is_none() {
                    *d = bad[0].dtypes.get(slot).cloned().flatten();
                }
            }
            (n.name.clone().unwrap_or_else(|| format!("#{i}")), f)
        })
        .collect();
    let passing: Vec<(&str, &crate::probe::Features)> =
        others.iter().map(|(n, f)| (n.as_str(), f)).collect();
    let failing: Vec<&crate::probe::Features> = bad.iter().collect();
    crate::probe::separate(&failing, &passing)
}

/// The rules file: one rule per op of the culprits (see [`narrow_conds`]), each pinning its
/// nodes to the CPU.
fn rule_yaml(
    rules: &[RuleDraft],
    culprits: &[Culprit],
    opts: &BisectOptions,
    model: &Path,
) -> String {
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let evidence = format!(
        "onnx-safeify bisect {} --runtime {}",
        model
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or("model"),
        opts.runtime
    );
    let mut out = String::from(
        "# Suggested by onnx-safeify bisect; use with --rules FILE (with the target you compile for).\nrules:\n",
    );
    for r in rules {
        let m = crate::probe::match_yaml(std::slice::from_ref(&r.op), &r.domain, &r.conds);
        let words: Vec<String> = r.conds.iter().map(|c| c.words()).collect();
        let names: Vec<String> = r
            .members
            .iter()
            .map(|&ci| format!("'{}'", culprits[ci].name))
            .collect();
        let mut what = if names.len() == 1 {
            format!("{} node {}", r.op, names[0])
        } else {
            format!("{} nodes {}", r.op, names.join(", "))
        };
        if !words.is_empty() {
            what = format!("{what} ({})", words.join(", "));
        }
        let c = &culprits[r.members[0]];
        let msg = scrub_paths(&crate::probe::gist(&c.message));
        let why = format!(
            "{what} {} on {} ({}): {}",
            if names.len() == 1 { "fails" } else { "fail" },
            opts.runtime,
            c.class.label(),
            msg.chars().take(300).collect::<String>()
        );
        out.push_str(&format!(
            "  - id: {}\n    why: {}\n    evidence: [{}]\n    match: {m}\n    action: cpu\n",
            r.id,
            q(&why),
            q(&evidence),
        ));
    }
    out
}

/// What the compiler's `check` finds on `model` with `rules` over `base`: per rule of the
/// rules file (its ids start with `bisect-`), the nodes it matches; and the base target's own
/// rules that match a node too, as (rule, node).
type Fired = (HashMap<String, Vec<String>>, Vec<(String, String)>);

fn rule_fires_on(model: &Path, base: &str, rules: &Path) -> Result<Fired, String> {
    let t = crate::compile::load_target(base, &[rules.to_path_buf()]).map_err(|e| e.to_string())?;
    let mut doc = crate::load(model).map_err(|e| e.to_string())?;
    let o = crate::compile::options(Vec::new()).map_err(|e| e.to_string())?;
    let findings = crate::engine::check(&mut doc.model, &t, &o);
    let mut ours: HashMap<String, Vec<String>> = HashMap::new();
    let mut theirs = Vec::new();
    for f in findings {
        if f.kind != crate::engine::FindingKind::Fires {
            continue;
        }
        if f.rule.starts_with("bisect-") {
            ours.entry(f.rule).or_default().push(f.node);
        } else {
            theirs.push((f.rule, f.node));
        }
    }
    for v in ours.values_mut() {
        v.sort();
        v.dedup();
    }
    Ok((ours, theirs))
}

/// The report as text.
pub fn report_text(r: &BisectReport) -> String {
    let k = r.culprits.len();
    let mut s = format!(
        "bisect {} on {}: {} nodes, {} culprit{}, {} runs (bound {k}·(1 + ceil(log2 {})) + 1 = {})\n",
        r.bisected,
        r.runtime,
        r.nodes,
        k,
        if k == 1 { "" } else { "s" },
        r.runs,
        r.nodes,
        r.run_bound
    );
    for st in &r.steps {
        s.push_str(&format!(
            "  first {:>6} nodes{}: {}{} ({:.1} s)\n",
            st.nodes,
            if st.pinned > 0 {
                format!(", {} pinned", st.pinned)
            } else {
                String::new()
            },
            if st.failed { "FAIL" } else { "ok" },
            st.message
                .as_deref()
                .map(|m| format!(" - {}", scrub_paths(m)))
                .unwrap_or_default(),
            st.seconds
        ));
    }
    if k == 0 {
        s.push_str("the whole model runs faithfully on the runtime: nothing to bisect\n");
    }
    for (i, c) in r.culprits.iter().enumerate() {
        s.push_str(&format!(
            "culprit {} of {k}: node #{} '{}' ({}{}): {}\n",
            i + 1,
            c.index,
            c.name,
            if c.domain.is_empty() {
                String::new()
            } else {
                format!("{}.", c.domain)
            },
            c.op,
            c.class.label()
        ));
        for i in &c.inputs {
            s.push_str(&format!("  input  {i}\n"));
        }
        for a in &c.attributes {
            s.push_str(&format!("  attr   {a}\n"));
        }
        // (The temporary files it ran are gone: their names only.)
        s.push_str(&format!("  error  {}\n", scrub_paths(&c.message)));
        if let Some(e) = &c.reference_error {
            s.push_str(&format!(
                "  note   ONNX Runtime CPU fails on the same nodes too ({}): the model itself does not run, this is not a hazard of the runtime\n",
                scrub_paths(e)
            ));
        }
    }
    if k > 0 {
        match &r.stopped {
            Some(why) => s.push_str(&format!("stopped: {why}\n")),
            None => s.push_str(&format!(
                "with {} pinned to the CPU, the whole model runs faithfully on {}\n",
                if k == 1 { "it" } else { "them" },
                r.runtime
            )),
        }
    }
    if let Some(y) = &r.rule_yaml {
        s.push_str(if r.rules.len() == 1 {
            "suggested rule:\n"
        } else {
            "suggested rules:\n"
        });
        s.push_str(y);
    }
    for rule in &r.rules {
        if !rule.fires_on.is_empty() {
            s.push_str(&format!(
                "the compiler fires {} on {}\n",
                rule.id,
                rule.fires_on.join(", ")
            ));
        }
    }
    if let Some(c) = &r.rule_check {
        s.push_str(&format!(
            "rule check: {} - {}{}\n",
            c.status.label(),
            c.detail,
            if c.runs > 0 {
                format!(" ({} run, {:.1} s, not counted above)", c.runs, c.seconds)
            } else {
                String::new()
            }
        ));
    }
    for w in &r.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    s
}

/// Runs the command: exit 0 when the model runs faithfully, 1 when culprits were found, 2 on
/// an error.
pub fn run_cli(a: &BisectArgs) -> u8 {
    let dims = match DimOverrides::parse(&a.dims) {
        Ok(d) => d,
        Err(e) => {
            crate::errln!("error: {e}");
            return 2;
        }
    };
    let opts = BisectOptions {
        runtime: a.runtime.clone(),
        target: a.target.clone(),
        inputs: a.inputs.clone(),
        seed: a.seed,
        dims,
        tolerance: Tolerance {
            atol: a.atol,
            rtol: a.rtol,
        },
        timeout: Duration::from_secs(a.timeout),
        optimization: a.ort_opt_level,
        max_culprits: a.max_culprits as usize,
    };
    match bisect(&a.model, &opts) {
        Ok(r) => {
            if a.json {
                crate::outln!(
                    "{}",
                    serde_json::to_string_pretty(&r).unwrap_or_else(|_| "{}".into())
                );
            } else {
                crate::outp!("{}", report_text(&r));
            }
            if let (Some(out), Some(y)) = (&a.rules_out, &r.rule_yaml) {
                if let Err(e) = std::fs::write(out, y) {
                    crate::errln!("error: cannot write {}: {e}", out.display());
                    return 2;
                }
                crate::errln!("wrote {}", out.display());
            }
            u8::from(!r.culprits.is_empty())
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
    fn log2_bound() {
        assert_eq!(ceil_log2(1), 0);
        assert_eq!(ceil_log2(2), 1);
        assert_eq!(ceil_log2(5), 3);
        assert_eq!(ceil_log2(64), 6);
        assert_eq!(ceil_log2(65), 7);
    }

    #[test]
    fn the_same_failure_twice() {
        let a = "/tmp/w/prefix_51_0.onnx: webgpu cannot load the model: Unsupported model IR version: 14";
        let b = "/tmp/w/prefix_77_1.onnx: webgpu cannot load the model: Unsupported model IR version: 14";
        assert!(same_failure(a, b));
        let c = "/tmp/w/prefix_9_1.onnx: webgpu failed: Resize node. Name:'smooth2' Status Message: The antialias attribute";
        let d = "/tmp/w/prefix_9_0.onnx: webgpu failed: Resize node. Name:'smooth1' Status Message: The antialias attribute";
        assert!(!same_failure(c, d));
    }

    #[test]
    fn runtime_names() {
        assert!(matches!(
            parse_runtime("ort-ep:CUDAExecutionProvider"),
            Ok(Runtime::OrtEp(p)) if p == "CUDAExecutionProvider"
        ));
        assert!(matches!(
            parse_runtime("webgpu"),
            Ok(Runtime::External(RuntimeKind::Webgpu))
        ));
        assert!(parse_runtime("cpu").is_err());
        assert!(parse_runtime("ort-ep:").is_err());
    }
}

#[cfg(test)]
mod narrow_tests {
    use super::*;
    use crate::proto::{AttributeProto, GraphProto, NodeProto};

    fn attr_s(n: &str, v: &str) -> AttributeProto {
        AttributeProto {
            name: Some(n.into()),
            s: Some(v.as_bytes().to_vec().into()),
            ..Default::default()
        }
    }

    fn attr_i(n: &str, v: i64) -> AttributeProto {
        AttributeProto {
            name: Some(n.into()),
            i: Some(v),
            ..Default::default()
        }
    }

    fn resize(name: &str, attrs: Vec<AttributeProto>) -> NodeProto {
        NodeProto {
            name: Some(name.into()),
            op_type: Some("Resize".into()),
            input: vec![format!("{name}_in"), String::new(), "scales".into()],
            output: vec![format!("{name}_out")],
            attribute: attrs,
            ..Default::default()
        }
    }

    #[test]
    fn the_rule_leaves_out_the_other_nodes_of_the_op() {
        let g = GraphProto {
            node: vec![
                resize("up", vec![attr_s("mode", "linear")]),
                resize(
                    "smooth",
                    vec![attr_s("mode", "linear"), attr_i("antialias", 1)],
                ),
                resize("near", vec![attr_s("mode", "nearest")]),
            ],
            ..Default::default()
        };
        let dt = vec![Some("float32".to_string()), None, Some("float32".into())];
        let (conds, still) = narrow_conds(&g, &[1], std::slice::from_ref(&dt));
        assert!(still.is_empty(), "{still:?}");
        // One condition is enough: antialias=1 (mode=linear alone would take 'up' too).
        assert_eq!(
            conds,
            vec![crate::probe::Cond::Attr(
                "antialias".into(),
                crate::probe::AttrVal::Int(1)
            )]
        );
        let m = crate::probe::match_yaml(&["Resize".into()], "", &conds);
        assert_eq!(m, "{op: Resize, domain: \"\", attr: {antialias: 1}}");
        // The only Resize: the op alone is the narrowest rule.
        let one = GraphProto {
            node: vec![resize("smooth", vec![attr_s("mode", "linear")])],
            ..Default::default()
        };
        let (conds, still) = narrow_conds(&one, &[0], std::slice::from_ref(&dt));
        assert!(conds.is_empty() && still.is_empty());
        // Two identical nodes cannot be told apart: reported, not hidden.
        let twins = GraphProto {
            node: vec![
                resize("a", vec![attr_s("mode", "linear")]),
                resize("b", vec![attr_s("mode", "linear")]),
            ],
            ..Default::default()
        };
        let (_, still) = narrow_conds(&twins, &[0], std::slice::from_ref(&dt));
        assert_eq!(still, vec!["b".to_string()]);
        // Both twins culprits: nothing else to leave out.
        let (conds, still) = narrow_conds(&twins, &[0, 1], &[dt.clone(), dt.clone()]);
        assert!(conds.is_empty() && still.is_empty(), "{conds:?} {still:?}");
    }

    /// Two culprits of one op: the conditions they share that leave out the passing nodes;
    /// where they share none that does, the passing nodes it still takes are named.
    #[test]
    fn one_rule_for_several_culprits_of_an_op() {
        let dt = vec![Some("float32".to_string()), None, Some("float32".into())];
        let g = GraphProto {
            node: vec![
                resize("up", vec![attr_s("mode", "linear")]),
                resize(
                    "smooth1",
                    vec![attr_s("mode", "linear"), attr_i("antialias", 1)],
                ),
                resize("near", vec![attr_s("mode", "nearest")]),
                resize(
                    "smooth2",
                    vec![attr_s("mode", "cubic"), attr_i("antialias", 1)],
                ),
            ],
            ..Default::default()
        };
        let (conds, still) = narrow_conds(&g, &[1, 3], &[dt.clone(), dt.clone()]);
        assert!(still.is_empty(), "{still:?}");
        assert_eq!(
            conds,
            vec![crate::probe::Cond::Attr(
                "antialias".into(),
                crate::probe::AttrVal::Int(1)
            )]
        );
        // 'up' (linear) and 'smooth2' (cubic, antialias) share no attribute: the op alone,
        // and the passing nodes it takes too are named.
        let (conds, still) = narrow_conds(&g, &[0, 3], &[dt.clone(), dt.clone()]);
        assert!(conds.is_empty(), "{conds:?}");
        assert_eq!(still, vec!["smooth1".to_string(), "near".to_string()]);
    }

    /// A pinned node leaves the runtime's graph: its outputs become graph inputs fed with the
    /// given values, only where a node that remains reads them, and are no longer compared.
    #[test]
    fn pinned_nodes_become_fed_inputs() {
        use crate::runtime::run::dtype::DType;
        use crate::runtime::run::tensor::TensorData;
        let node = |name: &str, op: &str, i: &str, o: &str| NodeProto {
            name: Some(name.into()),
            op_type: Some(op.into()),
            input: vec![i.into()],
            output: vec![o.into()],
            ..Default::default()
        };
        let vi = |n: &str| ValueInfoProto {
            name: Some(n.into()),
            ..Default::default()
        };
        let m = ModelProto {
            graph: Some(GraphProto {
                node: vec![
                    node("a", "Neg", "x", "va"),
                    node("bad", "Relu", "va", "vb"),
                    node("c", "Neg", "vb", "vc"),
                    node("d", "Neg", "vc", "y"),
                ],
                input: vec![vi("x")],
                output: vec![vi("y")],
                value_info: vec![vi("vb")],
                ..Default::default()
            }),
            ..Default::default()
        };
        let t = |v: f32| {
            HostTensor::new(
                DType::F32,
                vec![1],
                TensorData::Bytes(v.to_le_bytes().to_vec()),
            )
            .unwrap()
        };
        let feed = vec![("x".to_string(), t(1.0))];
        let values = vec![("vb".to_string(), t(0.0))];
        let pinned: HashSet<usize> = [1].into_iter().collect();
        let order = vec![0, 1, 2, 3];
        // The first 3 nodes, 'bad' pinned: 'a' and 'c' run, 'vb' is fed.
        let (mut cut, mut outputs) = cut_model(&m, &order, 3, &pinned);
        let f = feed_pinned(&mut cut, &mut outputs, &feed, &values);
        let g = cut.graph.as_ref().unwrap();
        let names: Vec<&str> = g.node.iter().map(|n| n.name.as_deref().unwrap()).collect();
        assert_eq!(names, ["a", "c"]);
        let inputs: Vec<&str> = g.input.iter().map(|n| n.name.as_deref().unwrap()).collect();
        assert_eq!(inputs, ["x", "vb"]);
        assert!(g.value_info.is_empty(), "vb is an input now");
        assert_eq!(outputs, ["vc"]);
        assert_eq!(
            f.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["x", "vb"]
        );
        // The first node only: nothing reads 'vb', so it is no input.
        let (mut cut, mut outputs) = cut_model(&m, &order, 1, &pinned);
        let f = feed_pinned(&mut cut, &mut outputs, &feed, &values);
        assert_eq!(cut.graph.as_ref().unwrap().input.len(), 1);
        assert_eq!(f.len(), 1);
        // The whole model.
        let (mut whole, mut outputs) = whole_model(&m, &pinned);
        feed_pinned(&mut whole, &mut outputs, &feed, &values);
        assert_eq!(whole.graph.as_ref().unwrap().node.len(), 3);
        assert_eq!(outputs, ["y"]);
    }

    #[test]
    fn why_has_no_temporary_paths() {
        let m = "/tmp/onnx-safeify-bisect-1-2-0/prefix_1.onnx: webgpu failed: Status Message: The antialias attribute of Resize operator is NOT implemented.";
        let w = scrub_paths(&crate::probe::gist(m));
        assert_eq!(
            w,
            "The antialias attribute of Resize operator is NOT implemented."
        );
        let w = scrub_paths(m);
        assert!(!w.contains("/tmp"), "{w}");
        assert!(w.starts_with("prefix_1.onnx: webgpu failed"), "{w}");
        let c = Culprit {
            index: 1,
            name: "smooth".into(),
            op: "Resize".into(),
            domain: String::new(),
            inputs: vec![],
            attributes: vec![],
            class: FailKind::RunError,
            message: m.into(),
            reference_error: None,
        };
        let opts = BisectOptions {
            runtime: "webgpu".into(),
            ..Default::default()
        };
        let conds = vec![crate::probe::Cond::Attr(
            "antialias".into(),
            crate::probe::AttrVal::Int(1),
        )];
        let d = RuleDraft {
            id: "bisect-resize-on-cpu".into(),
            op: "Resize".into(),
            domain: String::new(),
            members: vec![0],
            conds,
        };
        let y = rule_yaml(
            std::slice::from_ref(&d),
            &[c],
            &opts,
            Path::new("/tmp/x/seeded.onnx"),
        );
        assert!(!y.contains("/tmp"), "{y}");
        assert!(
            y.contains("match: {op: Resize, domain: \"\", attr: {antialias: 1}}"),
            "{y}"
        );
        assert!(y.contains("with antialias=1"), "{y}");
    }
}
