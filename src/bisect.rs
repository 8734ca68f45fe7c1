//! `bisect`: find the node where a model starts to fail on a runtime.
//!
//! MODEL (compiled for `--target` first, when given) fails on runtime R: a run there ends in an
//! error (no session, run error, device removed, timeout, crash) or its outputs differ from
//! ONNX Runtime CPU beyond the tolerance. Bisect cuts the graph after its first k nodes in
//! topological order, exposing as outputs every value of the prefix that a later node or the
//! graph's outputs read (and the last node's inputs and outputs), and runs the prefix on R and
//! on ONNX Runtime CPU. It searches the smallest failing prefix by halving: one run of the whole
//! model, then ceil(log2 n) runs, each in a child process bounded by `--timeout`. The last
//! node of the smallest failing prefix is where the failure starts; bisect names it (op,
//! attributes, the shapes of its inputs) with the failure class and the error text, and
//! suggests the narrowest rule that pins such nodes to the CPU.
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
use crate::verify::compare::{self, Judge, Status, Tolerance};
use crate::verify::discover::Discovery;
use crate::verify::error::{one_line, VerifyError};
use crate::verify::external::{run_external, RuntimeKind, WebgpuPins};
use crate::verify::inputs::{self, DimDefaults, DimOverrides, SetKind};
use crate::verify::model::{load_model_info, model_info_from_proto, read_model_proto};
use crate::verify::ort_ep::{self, FailureClass, OrtEpRequest};
use crate::verify::runtime::{self, ModelSession, OptLevel, SessionSettings};
use crate::verify::tensor::{fmt_shape, HostTensor};

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
    /// Absolute tolerance (verify's default).
    #[arg(long, default_value_t = Tolerance::default().atol)]
    pub atol: f64,
    /// Relative tolerance (verify's default).
    #[arg(long, default_value_t = Tolerance::default().rtol)]
    pub rtol: f64,
    /// Bound on each run on the runtime, in seconds: a run past it is a `timeout` failure.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// ONNX Runtime graph optimisation level, on both sides.
    #[arg(long, value_enum, default_value_t = OptLevel::All)]
    pub ort_opt_level: OptLevel,
    /// Write the suggested rule to this file (a rules file for `--rules`).
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
}

impl Default for BisectOptions {
    fn default() -> Self {
        BisectOptions {
            runtime: String::new(),
            target: None,
            inputs: None,
            seed: 0,
            dims: DimOverrides::default(),
            tolerance: Tolerance::default(),
            timeout: Duration::from_secs(120),
            optimization: OptLevel::All,
        }
    }
}

/// How a prefix fails on the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailKind {
    NoSession,
    RunError,
    DeviceRemoved,
    Timeout,
    Crash,
    /// Ran, but an output differs from ONNX Runtime CPU beyond the tolerance.
    WrongValues,
    /// Ran, but an output has another shape or element type than on ONNX Runtime CPU.
    WrongShape,
}

impl FailKind {
    pub fn label(self) -> &'static str {
        match self {
            FailKind::NoSession => "no session",
            FailKind::RunError => "run error",
            FailKind::DeviceRemoved => "device removed",
            FailKind::Timeout => "timeout",
            FailKind::Crash => "crash",
            FailKind::WrongValues => "wrong values",
            FailKind::WrongShape => "wrong shape",
        }
    }

    fn from_class(c: FailureClass) -> FailKind {
        match c {
            FailureClass::NoSession => FailKind::NoSession,
            FailureClass::RunError => FailKind::RunError,
            FailureClass::DeviceRemoved => FailKind::DeviceRemoved,
            FailureClass::Timeout => FailKind::Timeout,
            FailureClass::Crash => FailKind::Crash,
        }
    }
}

/// One run of a prefix.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// Number of nodes in the prefix (all of them: the whole model).
    pub nodes: usize,
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

/// The node where the failure starts.
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

/// The result of a bisection.
#[derive(Debug, Clone, Serialize)]
pub struct BisectReport {
    pub model: String,
    /// The file bisected (the compiled model with `--target`).
    pub bisected: String,
    pub runtime: String,
    /// Nodes of the main graph.
    pub nodes: usize,
    /// Runs on the runtime (each a child process).
    pub runs: usize,
    /// The most runs the search may take: 1 + ceil(log2 n).
    pub run_bound: usize,
    /// The run of the whole model, then the search's.
    pub steps: Vec<Step>,
    /// `None`: the whole model runs faithfully on the runtime.
    pub culprit: Option<Culprit>,
    /// The suggested rule, a rules file for `--rules`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_yaml: Option<String>,
    pub warnings: Vec<String>,
}

/// Where the prefixes run.
pub(crate) enum Runtime {
    OrtEp(String),
    External(RuntimeKind),
}

pub(crate) fn parse_runtime(spec: &str) -> Result<Runtime, VerifyError> {
    if let Some(p) = ort_ep::provider_of(spec) {
        return Ok(Runtime::OrtEp(p.to_string()));
    }
    match RuntimeKind::parse(spec) {
        Ok(RuntimeKind::Cpu) => Err(VerifyError::Usage(
            "--runtime cpu is the reference itself; name the runtime the model fails on (ort-ep:NAME, webgpu, openvino)".into(),
        )),
        Ok(k) => Ok(Runtime::External(k)),
        Err(_) => Err(VerifyError::Usage(format!(
            "--runtime {spec}: expected ort-ep:NAME (an ONNX Runtime execution provider, e.g. ort-ep:CUDAExecutionProvider), webgpu or openvino"
        ))),
    }
}

/// A fresh temporary folder, removed on drop.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    pub(crate) fn create() -> Result<TempDir, VerifyError> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for attempt in 0..100u32 {
            let p = base.join(format!(
                "onnx-safeify-bisect-{}-{nanos:x}-{attempt}",
                std::process::id()
            ));
            match std::fs::create_dir(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(VerifyError::data(
                        &base,
                        format!("cannot create a working folder: {e}"),
                    ))
                }
            }
        }
        Err(VerifyError::data(&base, "cannot create a working folder"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

/// The model cut after the first `k` nodes of `order`, and the names it outputs.
fn cut_model(model: &ModelProto, order: &[usize], k: usize) -> (ModelProto, Vec<String>) {
    let mut m = model.clone();
    let Some(g) = model.graph.as_ref() else {
        return (m, Vec::new());
    };
    let inside: Vec<&NodeProto> = order[..k].iter().map(|&i| &g.node[i]).collect();
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
    for &i in &order[k..] {
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

/// How a run on the runtime went, against ONNX Runtime CPU.
pub(crate) struct Outcome {
    /// `None`: it ran and agrees (or the reference itself failed and the runtime ran).
    pub failure: Option<(FailKind, String)>,
    /// ONNX Runtime CPU's outputs, or its error.
    pub reference: Result<HashMap<String, HostTensor>, String>,
}

struct Bisector<'a> {
    runtime: Runtime,
    opts: &'a BisectOptions,
    model: ModelProto,
    model_dir: PathBuf,
    order: Vec<usize>,
    feed: Vec<(String, HostTensor)>,
    work: TempDir,
    warnings: Vec<String>,
    runs: usize,
}

impl Bisector<'_> {
    /// Runs the first `k` nodes on the runtime and on ONNX Runtime CPU.
    fn run_prefix(&mut self, k: usize) -> Result<(Outcome, Vec<String>), VerifyError> {
        let (cut, outputs) = if k == self.order.len() {
            let outs = self
                .model
                .graph
                .as_ref()
                .map(|g| {
                    g.output
                        .iter()
                        .filter_map(|o| o.name.clone())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            (self.model.clone(), outs)
        } else {
            cut_model(&self.model, &self.order, k)
        };
        let path = self.work.0.join(format!("prefix_{k}.onnx"));
        std::fs::write(&path, cut.encode_to_vec())
            .map_err(|e| VerifyError::data(&path, format!("cannot write the cut model: {e}")))?;
        self.runs += 1;
        let (outcome, _) = run_pair(&PairRun {
            runtime: &self.runtime,
            path: &path,
            proto: &cut,
            outputs: &outputs,
            feed: &self.feed,
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
        Ok((outcome, outputs))
    }
}

/// One model to run on a runtime and on ONNX Runtime CPU ([`run_pair`]).
pub(crate) struct PairRun<'a> {
    pub runtime: &'a Runtime,
    /// The model file (written).
    pub path: &'a Path,
    pub proto: &'a ModelProto,
    /// Values to fetch and compare.
    pub outputs: &'a [String],
    pub feed: &'a [(String, HostTensor)],
    pub tolerance: Tolerance,
    pub optimization: OptLevel,
    pub timeout: Duration,
}

/// Runs a model on the runtime (a child process bounded by the timeout) and on ONNX Runtime
/// CPU (in this process), and classifies the runtime's result against the reference. Also
/// returns the runtime's one-line description (versions, device) when a run reported one.
/// `Err`: the run could not be attempted (runtime not installed, unwritable folder).
pub(crate) fn run_pair(pr: &PairRun) -> Result<(Outcome, Option<String>), VerifyError> {
    let r = pr;
    let path = r.path;
    let outputs = r.outputs;
    let tolerance = r.tolerance;
    let info = model_info_from_proto(path, r.proto)?;
    // The reference, in this process.
    let discovery = Discovery::from_env();
    let rt = runtime::runtime(&discovery)?;
    let settings = SessionSettings {
        optimization: r.optimization,
        ..Default::default()
    };
    let reference = match ModelSession::open(rt, &info, &settings) {
        Err(e) => Err(one_line(&e.to_string())),
        Ok((mut s, _)) => {
            let feed = r.feed;
            s.run(|n| feed.iter().find(|(k, _)| k == n).map(|(_, t)| t))
                .map(|v| v.into_iter().collect::<HashMap<_, _>>())
                .map_err(|e| one_line(&e.to_string()))
        }
    };

    // The runtime, in a child process.
    let mut description: Option<String> = None;
    let actual: Result<HashMap<String, HostTensor>, (FailKind, String)> = match r.runtime {
        Runtime::OrtEp(provider) => {
            let feeds = vec![r.feed.to_vec()];
            let out = ort_ep::run_ort_ep(&OrtEpRequest {
                model: path,
                provider,
                optimization: r.optimization,
                session: Vec::new(),
                outputs: Some(outputs.to_vec()),
                feeds: &feeds,
                timeout: r.timeout,
            })?;
            description = Some(out.description.clone());
            match out.result {
                Ok(mut runs) => Ok(runs.pop().unwrap_or_default()),
                Err(f) => Err((
                    FailKind::from_class(f.class),
                    format!("{} ({}): {}", f.class.label(), f.stage, f.message),
                )),
            }
        }
        Runtime::External(kind) => {
            let mut w = Vec::new();
            match run_external(
                kind,
                &info,
                std::slice::from_ref(&r.feed.to_vec()),
                r.optimization,
                WebgpuPins::LayerAssignment,
                r.timeout,
                &mut w,
            ) {
                Ok(mut ext) => {
                    description = Some(ext.info.description.clone());
                    Ok(ext.outputs.pop().unwrap_or_default())
                }
                Err(e @ (VerifyError::RuntimeNotFound(_) | VerifyError::RuntimeLoad { .. })) => {
                    return Err(e)
                }
                Err(e) => {
                    let text = one_line(&e.to_string());
                    let kind = if text.contains("did not finish within") {
                        FailKind::Timeout
                    } else if text.contains("without a result") {
                        FailKind::Crash
                    } else if text.contains("cannot load the model") {
                        FailKind::NoSession
                    } else {
                        FailKind::RunError
                    };
                    Err((kind, text))
                }
            }
        }
    };
    let failure = match (&actual, &reference) {
        (Err(f), _) => Some(f.clone()),
        (Ok(_), Err(_)) => None,
        (Ok(a), Ok(r)) => {
            let judge = Judge::tolerance(tolerance);
            let mut found = None;
            for name in outputs {
                let Some(b) = r.get(name) else { continue };
                let Some(x) = a.get(name) else {
                    found = Some((
                        FailKind::WrongShape,
                        format!("value '{name}' was not produced"),
                    ));
                    break;
                };
                let c = compare::compare_with(name, b, x, judge);
                match c.status {
                    Status::Ok => {}
                    Status::ShapeMismatch | Status::DtypeMismatch | Status::Missing => {
                        found = Some((
                            FailKind::WrongShape,
                            format!(
                                "value '{name}': {} {} on ONNX Runtime CPU, {} {} here",
                                c.dtype,
                                fmt_shape(&c.shape),
                                c.actual_dtype.clone().unwrap_or_default(),
                                c.actual_shape.as_deref().map(fmt_shape).unwrap_or_default()
                            ),
                        ));
                        break;
                    }
                    Status::Mismatch => {
                        found = Some((
                            FailKind::WrongValues,
                            format!(
                                "value '{name}': {} of {} elements differ from ONNX Runtime CPU, largest difference {:e}",
                                c.mismatched,
                                c.elements,
                                c.max_abs_err.unwrap_or(f64::NAN)
                            ),
                        ));
                        break;
                    }
                }
            }
            found
        }
    };
    Ok((Outcome { failure, reference }, description))
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
    let run_bound = 1 + ceil_log2(n);
    let mut b = Bisector {
        runtime,
        opts,
        model: proto,
        model_dir,
        order,
        feed,
        work,
        warnings,
        runs: 0,
    };
    let _ = &b.model_dir;
    let mut steps = Vec::new();
    let record = |k: usize, o: &Outcome, t: Instant, steps: &mut Vec<Step>| {
        steps.push(Step {
            nodes: k,
            failed: o.failure.is_some(),
            class: o.failure.as_ref().map(|f| f.0),
            message: o.failure.as_ref().map(|f| f.1.clone()),
            reference_error: o.reference.as_ref().err().cloned(),
            seconds: t.elapsed().as_secs_f64(),
        })
    };
    let t = Instant::now();
    let (whole, _) = b.run_prefix(n)?;
    record(n, &whole, t, &mut steps);
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
        runs: 0,
        run_bound,
        steps: Vec::new(),
        culprit: None,
        rule_yaml: None,
        warnings: Vec::new(),
    };
    let Some(mut fail) = whole.failure.clone() else {
        report.runs = b.runs;
        report.steps = steps;
        report.warnings = std::mem::take(&mut b.warnings);
        return Ok(report);
    };
    let mut fail_ref = whole.reference.as_ref().err().cloned();
    // Invariant: the first `lo` nodes pass (0 nodes trivially), the first `hi` fail.
    let (mut lo, mut hi) = (0usize, n);
    let mut lo_reference: Option<HashMap<String, HostTensor>> = None;
    let mut hi_reference: Option<HashMap<String, HostTensor>> = whole.reference.ok();
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let t = Instant::now();
        let (o, _) = b.run_prefix(mid)?;
        record(mid, &o, t, &mut steps);
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
    let g = b.model.graph.as_ref().expect("a graph with nodes");
    let node = &g.node[b.order[hi - 1]];
    let shape_of = |name: &str| -> String {
        if let Some((_, t)) = b.feed.iter().find(|(k, _)| k == name) {
            return t.describe();
        }
        if let Some(t) = g
            .initializer
            .iter()
            .find(|t| t.name.as_deref() == Some(name))
        {
            let dt = t
                .data_type
                .and_then(crate::verify::dtype::DType::from_code)
                .map(|d| d.name())
                .unwrap_or("?");
            let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
            return format!("{dt}[{}] (initializer)", dims.join(","));
        }
        for m in [&lo_reference, &hi_reference].into_iter().flatten() {
            if let Some(t) = m.get(name) {
                return t.describe();
            }
        }
        "?".into()
    };
    let inputs_desc: Vec<String> = node
        .input
        .iter()
        .filter(|i| !i.is_empty())
        .map(|i| format!("{i}: {}", shape_of(i)))
        .collect();
    let attributes: Vec<String> = node.attribute.iter().map(attr_text).collect();
    let op = node.op_type.clone().unwrap_or_default();
    let domain = node.domain.clone().unwrap_or_default();
    let culprit = Culprit {
        index: hi - 1,
        name: node.name.clone().unwrap_or_default(),
        op: op.clone(),
        domain: domain.clone(),
        inputs: inputs_desc,
        attributes,
        class: fail.0,
        message: fail.1.clone(),
        reference_error: fail_ref,
    };
    let culprit_dtypes: Vec<Option<String>> = node
        .input
        .iter()
        .map(|i| {
            Some(shape_of(i))
                .filter(|_| !i.is_empty())
                .and_then(|s| s.split('[').next().map(str::to_string))
                .filter(|s| s != "?" && !s.is_empty())
        })
        .collect();
    let (conds, still) = narrow_conds(g, b.order[hi - 1], &culprit_dtypes);
    if !still.is_empty() {
        b.warnings.push(format!(
            "no condition on attributes, input types or dims leaves out {} other {} node(s) ({}): the rule pins them too",
            still.len(),
            op,
            still.join(", ")
        ));
    }
    let yaml = rule_yaml(&culprit, &conds, opts, model);
    // The compiler's check: the rule fires on the culprit and on no other node.
    let rules_path = b.work.0.join("bisect-rule.yaml");
    let base = opts
        .target
        .clone()
        .unwrap_or_else(|| crate::probe::nearest_builtin(&opts.runtime).to_string());
    let id = format!("bisect-{}-on-cpu", op.to_ascii_lowercase());
    let fired = std::fs::write(&rules_path, &yaml)
        .map_err(|e| e.to_string())
        .and_then(|_| rule_fires_on(&bisected, &base, &rules_path, &id));
    match fired {
        Ok(nodes) => {
            let extra: Vec<&String> = nodes.iter().filter(|n| **n != culprit.name).collect();
            if !extra.is_empty() && still.is_empty() {
                b.warnings.push(format!(
                    "the compiler finds the rule on {} other node(s) too: {}",
                    extra.len(),
                    extra
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        Err(e) => b.warnings.push(format!(
            "the suggested rule does not compile: {}",
            scrub_paths(&e)
        )),
    }
    report.rule_yaml = Some(yaml);
    report.culprit = Some(culprit);
    report.runs = b.runs;
    report.steps = steps;
    report.warnings = std::mem::take(&mut b.warnings);
    Ok(report)
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

/// The narrowest rule for the culprit: its op and domain, then the fewest conditions on its
/// attributes and input types and dims (probe's separation) that leave out every other node of
/// the graph with that op. Returns the conditions and the other nodes it still matches.
pub(crate) fn narrow_conds(
    g: &crate::proto::GraphProto,
    culprit: usize,
    culprit_dtypes: &[Option<String>],
) -> (Vec<crate::probe::Cond>, Vec<String>) {
    let node = &g.node[culprit];
    let mut bad = crate::probe::node_features(g, node);
    for (slot, d) in culprit_dtypes.iter().enumerate() {
        if let (Some(d), Some(x)) = (d, bad.dtypes.get_mut(slot)) {
            if x.is_none() {
                *x = Some(d.clone());
            }
        }
    }
    let others: Vec<(String, crate::probe::Features)> = g
        .node
        .iter()
        .enumerate()
        .filter(|(i, n)| {
            *i != culprit
                && n.op_type == node.op_type
                && n.domain.as_deref().unwrap_or("") == node.domain.as_deref().unwrap_or("")
        })
        .map(|(i, n)| {
            let mut f = crate::probe::node_features(g, n);
            // An input type the graph does not record may be the culprit's: assume it is, so
            // that a type condition never seems to leave out a node it would match.
            for (slot, d) in f.dtypes.iter_mut().enumerate() {
                if d.is_none() {
                    *d = bad.dtypes.get(slot).cloned().flatten();
                }
            }
            (n.name.clone().unwrap_or_else(|| format!("#{i}")), f)
        })
        .collect();
    let passing: Vec<(&str, &crate::probe::Features)> =
        others.iter().map(|(n, f)| (n.as_str(), f)).collect();
    crate::probe::separate(&[&bad], &passing)
}

/// The rules file for the culprit (see [`narrow_conds`]); the action pins it to the CPU.
fn rule_yaml(
    c: &Culprit,
    conds: &[crate::probe::Cond],
    opts: &BisectOptions,
    model: &Path,
) -> String {
    let q = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let m = crate::probe::match_yaml(std::slice::from_ref(&c.op), &c.domain, conds);
    let id = format!("bisect-{}-on-cpu", c.op.to_ascii_lowercase());
    let words: Vec<String> = conds.iter().map(|c| c.words()).collect();
    let what = if words.is_empty() {
        format!("{} node '{}'", c.op, c.name)
    } else {
        format!("{} node '{}' ({})", c.op, c.name, words.join(", "))
    };
    let msg = scrub_paths(&crate::probe::gist(&c.message));
    let why = format!(
        "{what} fails on {} ({}): {}",
        opts.runtime,
        c.class.label(),
        msg.chars().take(300).collect::<String>()
    );
    let evidence = format!(
        "onnx-safeify bisect {} --runtime {}",
        model
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or("model"),
        opts.runtime
    );
    format!(
        "# Suggested by onnx-safeify bisect; use with --rules FILE (with the target you compile for).\nrules:\n  - id: {id}\n    why: {}\n    evidence: [{}]\n    match: {m}\n    action: cpu\n",
        q(&why),
        q(&evidence),
    )
}

/// Compiles `model` with `rules` over `base` (check only) and returns the nodes the rule `id`
/// fires on.
fn rule_fires_on(model: &Path, base: &str, rules: &Path, id: &str) -> Result<Vec<String>, String> {
    let t = crate::compile::load_target(base, &[rules.to_path_buf()]).map_err(|e| e.to_string())?;
    let mut doc = crate::load(model).map_err(|e| e.to_string())?;
    let o = crate::compile::options(Vec::new()).map_err(|e| e.to_string())?;
    let c = crate::compile::compile_document(&mut doc, &t, &o, true, model)
        .map_err(|e| e.to_string())?;
    let mut nodes: Vec<String> = c
        .report
        .applied
        .iter()
        .filter(|a| a.rule == id)
        .map(|a| a.node.clone())
        .chain(
            c.report
                .fallbacks
                .iter()
                .filter(|f| f.rule == id)
                .map(|f| f.node.clone()),
        )
        .chain(
            c.report
                .remaining
                .iter()
                .filter(|f| f.rule == id)
                .map(|f| f.node.clone()),
        )
        .collect();
    nodes.sort();
    nodes.dedup();
    Ok(nodes)
}

/// The report as text.
pub fn report_text(r: &BisectReport) -> String {
    let mut s = format!(
        "bisect {} on {}: {} nodes, {} runs (bound {})\n",
        r.bisected, r.runtime, r.nodes, r.runs, r.run_bound
    );
    for st in &r.steps {
        s.push_str(&format!(
            "  first {:>6} nodes: {}{} ({:.1} s)\n",
            st.nodes,
            if st.failed { "FAIL" } else { "ok" },
            st.message
                .as_deref()
                .map(|m| format!(" - {}", scrub_paths(m)))
                .unwrap_or_default(),
            st.seconds
        ));
    }
    match &r.culprit {
        None => s.push_str("the whole model runs faithfully on the runtime: nothing to bisect\n"),
        Some(c) => {
            s.push_str(&format!(
                "the failure starts at node #{} '{}' ({}{}): {}\n",
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
                    "  note   ONNX Runtime CPU fails on the same nodes too ({e}): the model itself does not run, this is not a hazard of the runtime\n"
                ));
            }
            if let Some(y) = &r.rule_yaml {
                s.push_str("suggested rule:\n");
                s.push_str(y);
            }
        }
    }
    for w in &r.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    s
}

/// Runs the command: exit 0 when the model runs faithfully, 1 when a culprit was found, 2 on
/// an error.
pub fn run_cli(a: &BisectArgs) -> u8 {
    let dims = match DimOverrides::parse(&a.dims) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
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
    };
    match bisect(&a.model, &opts) {
        Ok(r) => {
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).unwrap_or_else(|_| "{}".into())
                );
            } else {
                print!("{}", report_text(&r));
            }
            if let (Some(out), Some(y)) = (&a.rules_out, &r.rule_yaml) {
                if let Err(e) = std::fs::write(out, y) {
                    eprintln!("error: cannot write {}: {e}", out.display());
                    return 2;
                }
                eprintln!("wrote {}", out.display());
            }
            u8::from(r.culprit.is_some())
        }
        Err(e) => {
            eprintln!("error: {e}");
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
        let (conds, still) = narrow_conds(&g, 1, &dt);
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
        let (conds, still) = narrow_conds(&one, 0, &dt);
        assert!(conds.is_empty() && still.is_empty());
        // Two identical nodes cannot be told apart: reported, not hidden.
        let twins = GraphProto {
            node: vec![
                resize("a", vec![attr_s("mode", "linear")]),
                resize("b", vec![attr_s("mode", "linear")]),
            ],
            ..Default::default()
        };
        let (_, still) = narrow_conds(&twins, 0, &dt);
        assert_eq!(still, vec!["b".to_string()]);
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
        let y = rule_yaml(&c, &conds, &opts, Path::new("/tmp/x/seeded.onnx"));
        assert!(!y.contains("/tmp"), "{y}");
        assert!(
            y.contains("match: {op: Resize, domain: \"\", attr: {antialias: 1}}"),
            "{y}"
        );
        assert!(y.contains("with antialias=1"), "{y}");
    }
}
