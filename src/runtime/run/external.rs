//! Running the rewritten model on a runtime outside this process: onnxruntime-web's WebGPU
//! execution provider in headless Chromium (`webgpu`), or OpenVINO's CPU plugin (`openvino`).
//!
//! The exchange goes through a fresh folder: this side writes `request.json` and one `.npy`
//! per input and run; a helper process (`node tools/webgpu/run.mjs DIR`, or the venv's Python
//! with the OpenVINO script embedded below) writes one `.npy` per output and `result.json`.
//! The helper runs in its own process group, tagged through its environment; on every way
//! out (success, error, timeout, panic) the group is killed and any process still carrying
//! the tag (Chromium's, which Playwright starts in a group of their own) is killed too, and
//! the folder is removed.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde::Serialize;

use super::ort_ep::{run_ort_ep, FailureClass, OrtEpRequest};

use super::discover;
use super::error::{one_line, VerifyError};
use super::log::{parse_placement, PlacedNode, Placement, CPU_PROVIDER};
use super::model::{read_model_proto, ModelInfo, LAYER_ANN_KEY};
use super::npz::{npy_bytes, read_npy};
use super::ort::{layer_assignment_setting, OptLevel, LAYER_ASSIGNMENT_KEY};
use super::tensor::HostTensor;

/// The script that installs what `--runtime webgpu|openvino` needs.
pub const SETUP_SCRIPT: &str = "scripts/setup-runtimes.sh";
/// Overrides the folder of the web harness ([`super::harness`]).
pub use super::harness::HARNESS_ENV;
/// Overrides the Chromium executable (default: `chromium` on PATH).
pub const CHROMIUM_ENV: &str = "ONNX_SAFEIFY_CHROMIUM";
/// Overrides the Node.js executable (default: `node` on PATH).
pub const NODE_ENV: &str = "ONNX_SAFEIFY_NODE";
const TAG_ENV: &str = "ONNX_SAFEIFY_HELPER_TAG";
/// The WebGPU execution provider option of onnxruntime-web that keeps named nodes on the CPU.
pub const FORCE_CPU_OPTION: &str = "webgpu.forceCpuNodeNames";

/// The OpenVINO helper, run with the venv's Python.
const OPENVINO_SCRIPT: &str = include_str!("../../../tools/openvino/run.py");

/// Where the rewritten model runs. Written on the command line as `cpu`, `webgpu`,
/// `openvino` or `ort-ep:NAME` (see [`RuntimeKind::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RuntimeKind {
    /// ONNX Runtime's CPU provider, in this process (like the original).
    #[default]
    Cpu,
    /// onnxruntime-web's WebGPU execution provider in headless Chromium.
    Webgpu,
    /// OpenVINO's CPU plugin (f32 inference precision), through its Python API.
    Openvino,
    /// An ONNX Runtime execution provider (`CPUExecutionProvider`, `CUDAExecutionProvider`,
    /// ...) through the venv's onnxruntime Python package, in a child process
    /// ([`super::ort_ep`]). Holds the provider's name, as given after `ort-ep:`.
    OrtEp(String),
}

impl RuntimeKind {
    /// The spelling of the command line: `cpu`, `webgpu`, `openvino`, `ort-ep:NAME`.
    pub fn name(&self) -> String {
        match self {
            RuntimeKind::Cpu => "cpu".into(),
            RuntimeKind::Webgpu => "webgpu".into(),
            RuntimeKind::Openvino => "openvino".into(),
            RuntimeKind::OrtEp(p) => format!("{}{p}", super::ort_ep::PREFIX),
        }
    }

    /// Parses `cpu`, `webgpu`, `openvino` (any case) or `ort-ep:NAME`, NAME an execution
    /// provider's name (letters, digits and `_`). The error says what is accepted.
    pub fn parse(spec: &str) -> Result<RuntimeKind, String> {
        let s = spec.trim();
        if let Some(rest) = s.strip_prefix(super::ort_ep::PREFIX) {
            return match super::ort_ep::provider_of(s) {
                Some(p) => Ok(RuntimeKind::OrtEp(p.to_string())),
                None => Err(format!(
                    "after ort-ep: give an ONNX Runtime execution provider's name (letters, digits, _), e.g. ort-ep:CPUExecutionProvider or ort-ep:CUDAExecutionProvider; got '{rest}'"
                )),
            };
        }
        match s.to_ascii_lowercase().as_str() {
            "cpu" => Ok(RuntimeKind::Cpu),
            "webgpu" => Ok(RuntimeKind::Webgpu),
            "openvino" => Ok(RuntimeKind::Openvino),
            _ => Err(
                "expected cpu, webgpu, openvino or ort-ep:NAME (an ONNX Runtime execution provider, e.g. ort-ep:CPUExecutionProvider)"
                    .into(),
            ),
        }
    }
}

impl std::str::FromStr for RuntimeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        RuntimeKind::parse(s)
    }
}

impl std::fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl Serialize for RuntimeKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

/// How `layer_ann` pins reach onnxruntime-web (`--runtime webgpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WebgpuPins {
    /// Session config `session.layer_assignment_settings` (what the target's runtime settings
    /// say; onnxruntime-web reads the node annotations itself).
    #[default]
    LayerAssignment,
    /// The WebGPU provider's own option `forceCpuNodeNames`, listing the annotated nodes by
    /// name (the session config entry is then not set).
    ForceCpuNodeNames,
}

/// What the rewritten model ran on, for the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExternalInfo {
    pub runtime: RuntimeKind,
    /// One line: versions, device, settings.
    pub description: String,
    /// Session config entries / plugin properties given to the runtime.
    pub settings: Vec<(String, String)>,
    /// Where the runtime placed the nodes (WebGPU: from its own log).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// Seconds each run took inside the runtime (WebGPU: includes shader compilation on
    /// the first run).
    pub run_seconds: Vec<f64>,
}

/// The result of running all feeds.
pub struct ExternalRun {
    pub info: ExternalInfo,
    /// Outputs by name, one map per run.
    pub outputs: Vec<HashMap<String, HostTensor>>,
}

/// Runs `model` on `kind` once per feed. `timeout` bounds the whole helper process.
pub fn run_external(
    kind: &RuntimeKind,
    model: &ModelInfo,
    feeds: &[Vec<(String, HostTensor)>],
    optimization: OptLevel,
    pins: WebgpuPins,
    timeout: Duration,
    warnings: &mut Vec<String>,
) -> Result<ExternalRun, VerifyError> {
    let helper = match kind {
        RuntimeKind::Cpu => {
            return Err(VerifyError::Usage(
                "internal: the CPU runtime runs in process".into(),
            ))
        }
        RuntimeKind::Webgpu => find_webgpu()?,
        RuntimeKind::Openvino => find_openvino()?,
        RuntimeKind::OrtEp(provider) => {
            return run_on_ort_ep(provider, model, feeds, optimization, timeout)
        }
    };
    let kind = kind.clone();
    let path = &model.path;
    let abs = std::fs::canonicalize(path).map_err(|e| VerifyError::model(path, e.to_string()))?;
    let work = super::named::TempDir::with_prefix("onnx-safeify-verify")?;

    // Inputs of the rewritten model only, one .npy per input and run.
    let mut runs_json = Vec::with_capacity(feeds.len());
    for (r, feed) in feeds.iter().enumerate() {
        let mut inputs = Vec::new();
        for (i, spec) in model.inputs.iter().enumerate() {
            let Some((_, t)) = feed.iter().find(|(n, _)| n == &spec.name) else {
                return Err(VerifyError::input(
                    path,
                    &spec.name,
                    "no value was provided for this input",
                ));
            };
            let file = format!("r{r}_i{i}.npy");
            let bytes = npy_bytes(t).map_err(|m| VerifyError::input(path, &spec.name, m))?;
            std::fs::write(work.0.join(&file), bytes)
                .map_err(|e| VerifyError::data(&work.0, format!("cannot write {file}: {e}")))?;
            inputs.push(serde_json::json!({"name": spec.name, "file": file}));
        }
        runs_json.push(serde_json::json!({ "inputs": inputs }));
    }

    let mut settings: Vec<(String, String)> = Vec::new();
    let request = match kind {
        RuntimeKind::Webgpu => {
            let (setting, unusable) = layer_assignment_setting(&model.layer_annotations);
            for u in unusable {
                warnings.push(format!(
                    "{}: layer_ann value '{u}' cannot be written in {LAYER_ASSIGNMENT_KEY}; nodes with it run unpinned",
                    path.display()
                ));
            }
            let mut force_cpu: Vec<String> = Vec::new();
            match (pins, setting) {
                (_, None) => {}
                (WebgpuPins::LayerAssignment, Some(s)) => {
                    settings.push((LAYER_ASSIGNMENT_KEY.to_string(), s));
                }
                (WebgpuPins::ForceCpuNodeNames, Some(_)) => {
                    let (_, pinned) = graph_nodes(path);
                    force_cpu = pinned.into_iter().filter(|n| !n.is_empty()).collect();
                    force_cpu.sort();
                    settings.push((
                        FORCE_CPU_OPTION.to_string(),
                        format!("{} node name(s) with layer_ann", force_cpu.len()),
                    ));
                }
            }
            let session: serde_json::Map<String, serde_json::Value> = settings
                .iter()
                .filter(|(k, _)| k.as_str() == LAYER_ASSIGNMENT_KEY)
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect();
            serde_json::json!({
                "model": abs,
                "runs": runs_json,
                "provider": "webgpu",
                "session": session,
                "force_cpu_nodes": force_cpu,
                "graph_optimization_level": web_opt_level(optimization),
                "timeout_ms": timeout.as_millis().saturating_sub(5000).max(1000) as u64,
            })
        }
        RuntimeKind::Openvino => {
            settings.push(("INFERENCE_PRECISION_HINT".into(), "f32".into()));
            if !model.layer_annotations.is_empty() {
                warnings.push(format!(
                    "{}: layer_ann annotations are ONNX Runtime settings; OpenVINO ignores them and runs every node on its CPU plugin",
                    path.display()
                ));
            }
            let outputs: Vec<&str> = model.outputs.iter().map(|o| o.name.as_str()).collect();
            serde_json::json!({
                "model": abs,
                "runs": runs_json,
                "outputs": outputs,
                "device": "CPU",
                "config": {"INFERENCE_PRECISION_HINT": "f32"},
            })
        }
        RuntimeKind::Cpu | RuntimeKind::OrtEp(_) => unreachable!("handled above"),
    };
    std::fs::write(work.0.join("request.json"), request.to_string())
        .map_err(|e| VerifyError::data(&work.0, format!("cannot write request.json: {e}")))?;

    let mut cmd = Command::new(&helper.program);
    if kind == RuntimeKind::Openvino {
        let script = work.0.join("run_openvino.py");
        std::fs::write(&script, OPENVINO_SCRIPT)
            .map_err(|e| VerifyError::data(&work.0, format!("cannot write the helper: {e}")))?;
        cmd.arg(&script);
    } else {
        cmd.args(&helper.args);
    }
    cmd.arg(&work.0);
    for (k, v) in &helper.env {
        cmd.env(k, v);
    }
    let status = run_bounded(cmd, &work.0, timeout, &kind)?;

    let result_path = work.0.join("result.json");
    let text = match std::fs::read_to_string(&result_path) {
        Ok(t) => t,
        Err(_) => {
            let stderr = std::fs::read_to_string(work.0.join("helper.stderr")).unwrap_or_default();
            let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(VerifyError::RuntimeLoad {
                path: helper.program.clone(),
                message: one_line(&format!(
                    "the {} helper ended ({status}) without a result: {}",
                    kind.name(),
                    tail.join(" | ")
                )),
            });
        }
    };
    let result: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        VerifyError::data(&result_path, format!("the helper wrote no valid JSON: {e}"))
    })?;
    let log: Vec<String> = result
        .get("log")
        .and_then(|l| l.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if result.get("ok").and_then(|v| v.as_bool()) != Some(true) {
        let stage = result.get("stage").and_then(|v| v.as_str()).unwrap_or("?");
        let error = result
            .get("error")
            .and_then(|v| v.as_str())
            .unwrap_or("no message");
        let message = one_line(&format!("{} ({stage}): {error}", describe_short(&kind)));
        // (Session and run errors name the runtime themselves: the Session/Run variants
        // say "ONNX Runtime", which is the in-process reference.)
        return Err(match stage {
            "import" => {
                VerifyError::RuntimeNotFound(format!("{message}; install it with {SETUP_SCRIPT}"))
            }
            "browser" | "adapter" | "harness" | "request" => VerifyError::RuntimeLoad {
                path: helper.program.clone(),
                message,
            },
            "session" => VerifyError::model(
                path,
                format!("{} cannot load the model: {message}", kind.name()),
            ),
            _ => VerifyError::model(
                path,
                format!("{} failed to run the model: {message}", kind.name()),
            ),
        });
    }

    let mut outputs = Vec::with_capacity(feeds.len());
    let mut run_seconds = Vec::with_capacity(feeds.len());
    let runs = result
        .get("runs")
        .and_then(|v| v.as_array())
        .cloned()
        .unwrap_or_default();
    if runs.len() != feeds.len() {
        return Err(VerifyError::data(
            &result_path,
            format!("{} runs requested, {} reported", feeds.len(), runs.len()),
        ));
    }
    for run in &runs {
        let mut map = HashMap::new();
        for o in run
            .get("outputs")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default()
        {
            let (Some(name), Some(file)) = (
                o.get("name").and_then(|v| v.as_str()),
                o.get("file").and_then(|v| v.as_str()),
            ) else {
                continue;
            };
            if file.contains(['/', '\\']) || !file.ends_with(".npy") {
                return Err(VerifyError::data(
                    &result_path,
                    format!("bad output file '{file}'"),
                ));
            }
            let t = read_npy(&work.0.join(file))
                .map_err(|m| VerifyError::output(path, name, format!("{}: {m}", kind.name())))?;
            let _ = map.insert(name.to_string(), t);
        }
        outputs.push(map);
        run_seconds.push(run.get("ms").and_then(|v| v.as_f64()).unwrap_or(0.0) / 1000.0);
    }

    let mut placement = parse_placement(&log);
    if let Some(p) = placement.as_mut() {
        let (nodes, pinned) = graph_nodes(path);
        // "All nodes placed on [CPUExecutionProvider]" names no node: every node of the
        // graph is on the CPU, so list the graph's.
        if p.cpu_nodes.is_empty() && p.count(CPU_PROVIDER) > 0 && p.providers.len() == 1 {
            p.cpu_nodes = nodes;
        }
        for n in &mut p.cpu_nodes {
            n.pinned = pinned.contains(&n.name);
        }
    }
    if kind == RuntimeKind::Webgpu && placement.is_none() {
        warnings.push(
            "onnxruntime-web logged no node placement; the report cannot say which nodes ran on the CPU"
                .into(),
        );
    }
    Ok(ExternalRun {
        info: ExternalInfo {
            description: describe(&kind, &result),
            runtime: kind,
            settings,
            placement,
            run_seconds,
        },
        outputs,
    })
}

/// `run_external` on an ONNX Runtime execution provider: one child process for all feeds
/// ([`run_ort_ep`]); the model's own runtime settings (metadata, `layer_ann`) go to the
/// session. A failure on the provider (no session, run error, device removed, timeout,
/// crash) is an error naming its class and stage.
fn run_on_ort_ep(
    provider: &str,
    model: &ModelInfo,
    feeds: &[Vec<(String, HostTensor)>],
    optimization: OptLevel,
    timeout: Duration,
) -> Result<ExternalRun, VerifyError> {
    let path = &model.path;
    // Only the inputs the model declares, in its order.
    let mut ordered = Vec::with_capacity(feeds.len());
    for feed in feeds {
        let mut f = Vec::with_capacity(model.inputs.len());
        for spec in &model.inputs {
            let Some((_, t)) = feed.iter().find(|(n, _)| n == &spec.name) else {
                return Err(VerifyError::input(
                    path,
                    &spec.name,
                    "no value was provided for this input",
                ));
            };
            f.push((spec.name.clone(), t.clone()));
        }
        ordered.push(f);
    }
    let outputs: Vec<String> = model.outputs.iter().map(|o| o.name.clone()).collect();
    let out = run_ort_ep(&OrtEpRequest {
        model: path,
        provider,
        optimization,
        session: Vec::new(),
        outputs: Some(outputs),
        feeds: &ordered,
        timeout,
    })?;
    let name = RuntimeKind::OrtEp(provider.to_string()).name();
    let outputs = match out.result {
        Ok(o) => o,
        Err(f) => {
            let what = format!("{name} ({}, {}): {}", f.class.label(), f.stage, f.message);
            return Err(match (f.class, f.stage.as_str()) {
                (FailureClass::NoSession, "import" | "provider" | "request") => {
                    VerifyError::RuntimeNotFound(what)
                }
                (FailureClass::NoSession, _) => {
                    VerifyError::model(path, format!("{name} cannot load the model: {what}"))
                }
                (FailureClass::Timeout, _) => VerifyError::Run {
                    path: path.clone(),
                    message: format!("{what} (--timeout)"),
                },
                _ => VerifyError::model(path, format!("{name} failed to run the model: {what}")),
            });
        }
    };
    let mut placement = out.placement;
    if let Some(p) = placement.as_mut() {
        // Every node is on the CPU provider when that is the provider under test: no list.
        if provider == CPU_PROVIDER {
            p.cpu_nodes.clear();
        }
    }
    let mut description = out.description;
    if let Some(src) = &out.placement_source {
        description.push_str(&format!("; placement from {src}"));
    }
    Ok(ExternalRun {
        info: ExternalInfo {
            runtime: RuntimeKind::OrtEp(provider.to_string()),
            description,
            settings: out.settings,
            placement,
            run_seconds: out.run_seconds,
        },
        outputs,
    })
}

/// Whether `python -c "import MODULE"` succeeds with the interpreter `python`.
fn python_imports(python: &std::path::Path, module: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {module}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `kind` can run here: `Ok` when everything it needs is installed, else the error
/// `verify` would give (it names scripts/setup-runtimes.sh). Runs nothing but, for
/// `openvino` and `ort-ep:NAME`, `python -c "import openvino"` / `import onnxruntime`.
pub fn check_available(kind: &RuntimeKind) -> Result<(), VerifyError> {
    match kind {
        RuntimeKind::Cpu => Ok(()),
        RuntimeKind::OrtEp(_) => {
            let py = super::ort_ep::find_python()?;
            if python_imports(&py, "onnxruntime") {
                Ok(())
            } else {
                Err(VerifyError::RuntimeNotFound(format!(
                    "--runtime {} needs the onnxruntime package in {}",
                    kind.name(),
                    py.display()
                )))
            }
        }
        RuntimeKind::Webgpu => find_webgpu().map(|_| ()),
        RuntimeKind::Openvino => {
            let h = find_openvino()?;
            if python_imports(&h.program, "openvino") {
                Ok(())
            } else {
                Err(missing(
                    kind,
                    &format!("the openvino package in {}", h.program.display()),
                ))
            }
        }
    }
}

fn web_opt_level(o: OptLevel) -> &'static str {
    match o {
        OptLevel::Disable => "disabled",
        OptLevel::Basic => "basic",
        OptLevel::Extended => "extended",
        OptLevel::All => "all",
    }
}

fn describe_short(kind: &RuntimeKind) -> &'static str {
    match kind {
        RuntimeKind::Webgpu => "onnxruntime-web WebGPU",
        RuntimeKind::Openvino => "OpenVINO CPU",
        RuntimeKind::Cpu => "ONNX Runtime CPU",
        RuntimeKind::OrtEp(_) => "ONNX Runtime execution provider",
    }
}

fn describe(kind: &RuntimeKind, result: &serde_json::Value) -> String {
    let s = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).unwrap_or("?").to_string();
    match kind {
        RuntimeKind::Webgpu => {
            let rt = result.get("runtime");
            let a = result.get("adapter");
            let flag = |k: &str| {
                a.and_then(|a| a.get(k))
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false)
            };
            let max_buf = a
                .and_then(|a| a.get("max_buffer_size"))
                .and_then(|v| v.as_f64())
                .unwrap_or(0.0);
            format!(
                "onnxruntime-web {} (WebGPU EP) in Chromium {}; adapter {}/{}{}, max buffer {:.0} MiB, shader-f16 {}",
                s(rt.and_then(|r| r.get("onnxruntime_web"))),
                s(rt.and_then(|r| r.get("browser"))),
                s(a.and_then(|a| a.get("vendor"))),
                s(a.and_then(|a| a.get("architecture"))),
                if flag("is_fallback") { " (fallback adapter)" } else { "" },
                max_buf / (1024.0 * 1024.0),
                if flag("shader_f16") { "yes" } else { "no" },
            )
        }
        RuntimeKind::Openvino => format!(
            "OpenVINO {} on {} ({}), INFERENCE_PRECISION_HINT=f32 (compiled model reports {})",
            s(result.get("runtime").and_then(|r| r.get("openvino"))),
            s(result.get("device")),
            s(result.get("device_name")),
            s(result.get("inference_precision")),
        ),
        RuntimeKind::Cpu => "ONNX Runtime CPU".into(),
        RuntimeKind::OrtEp(p) => format!("ONNX Runtime {p}"),
    }
}

/// The main graph's nodes, and the names of those carrying `layer_ann`.
fn graph_nodes(path: &Path) -> (Vec<PlacedNode>, HashSet<String>) {
    let Ok(m) = read_model_proto(path) else {
        return (Vec::new(), HashSet::new());
    };
    let mut all = Vec::new();
    let mut pinned = HashSet::new();
    for n in m.graph.iter().flat_map(|g| g.node.iter()) {
        let name = n.name.clone().unwrap_or_default();
        if n.metadata_props
            .iter()
            .any(|p| p.key.as_deref() == Some(LAYER_ANN_KEY))
        {
            let _ = pinned.insert(name.clone());
        }
        all.push(PlacedNode {
            op: n.op_type.clone().unwrap_or_default(),
            name,
            pinned: false,
            reason: None,
        });
    }
    (all, pinned)
}

struct Helper {
    program: PathBuf,
    args: Vec<PathBuf>,
    env: Vec<(String, PathBuf)>,
}

fn missing(kind: &RuntimeKind, what: &str) -> VerifyError {
    let how = match kind {
        RuntimeKind::Webgpu => format!(
            "`{}` installs the web harness (Node.js 20 or later with npm needed); Chromium comes \
             from your system (chromium on PATH, or {CHROMIUM_ENV}); in a checkout, \
             {SETUP_SCRIPT} installs both",
            super::harness::SETUP_COMMAND
        ),
        _ => format!(
            "`pip install openvino` into that Python environment, or, in a checkout, run \
             {SETUP_SCRIPT} (it installs OpenVINO into the test venv)"
        ),
    };
    VerifyError::RuntimeNotFound(format!("--runtime {} needs {what}; {how}", kind.name()))
}

/// `name` on PATH, or an explicit path from `env`.
fn find_program(env: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The web harness folder ([`super::harness::dir`]).
pub fn harness_dir() -> PathBuf {
    super::harness::dir()
}

fn find_webgpu() -> Result<Helper, VerifyError> {
    use super::harness;
    let kind = RuntimeKind::Webgpu;
    let node =
        find_program(NODE_ENV, "node").ok_or_else(|| missing(&kind, "Node.js (node on PATH)"))?;
    let dir = harness_dir();
    if !harness::installed(&dir) {
        return Err(VerifyError::RuntimeNotFound(format!(
            "--runtime webgpu needs the web harness's npm packages ({}) in {}: run `{}` \
             (it writes the harness there and runs npm ci; Node.js 20 or later with npm), or \
             set {HARNESS_ENV} to a folder where it is installed (in a checkout, \
             {SETUP_SCRIPT} installs it in tools/webgpu)",
            harness::PACKAGES.join(", "),
            dir.join("node_modules").display(),
            harness::SETUP_COMMAND,
        )));
    }
    // The scripts ship with the command: the cache folder gets this version's (a checkout's
    // tools/webgpu, or a folder the variable names, is left as it is).
    if dir == harness::cache_dir() && std::env::var_os(HARNESS_ENV).is_none_or(|v| v.is_empty()) {
        harness::write_scripts(&dir)?;
    }
    let script = dir.join("run.mjs");
    if !script.is_file() {
        return Err(missing(
            &kind,
            &format!("the web harness {} (set {HARNESS_ENV})", script.display()),
        ));
    }
    let chromium = find_program(CHROMIUM_ENV, "chromium").ok_or_else(|| {
        missing(
            &kind,
            &format!("Chromium (chromium on PATH, or {CHROMIUM_ENV})"),
        )
    })?;
    Ok(Helper {
        program: node,
        args: vec![script],
        env: vec![(CHROMIUM_ENV.to_string(), chromium)],
    })
}

fn find_openvino() -> Result<Helper, VerifyError> {
    // Found as `verify` finds ONNX Runtime: the wheel's interpreter, an active venv, the
    // project's venv, python3 on PATH; the first with the openvino package.
    let py =
        discover::find_python(&discover::Discovery::from_env(), &["openvino"]).map_err(|e| {
            missing(
                &RuntimeKind::Openvino,
                &format!("the openvino Python package: {e}"),
            )
        })?;
    Ok(Helper {
        program: py,
        args: Vec::new(),
        env: Vec::new(),
    })
}

/// The helper process; dropping it kills its process group and every process tagged with
/// its id, then reaps it.
struct Running {
    child: Child,
    tag: String,
    /// Once reaped, its process group id may be reused: only tagged processes are killed.
    reaped: bool,
}

impl Running {
    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        let r = self.child.try_wait();
        if let Ok(Some(_)) = r {
            self.reaped = true;
        }
        r
    }

    #[cfg(not(unix))]
    fn kill_all(&mut self, _signal: &str) {
        if !self.reaped {
            let _ = self.child.kill();
        }
    }

    #[cfg(unix)]
    fn kill_all(&mut self, signal: &str) {
        if !self.reaped {
            let pgid = self.child.id();
            let _ = Command::new("kill")
                .args([signal, "--", &format!("-{pgid}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let tagged = tagged_processes(&self.tag);
        if !tagged.is_empty() {
            let mut c = Command::new("kill");
            c.arg(signal).arg("--");
            for p in tagged {
                c.arg(p.to_string());
            }
            let _ = c.stdout(Stdio::null()).stderr(Stdio::null()).status();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Processes can still be starting while the first pass runs: a few passes, until
        // none carries the tag.
        if !self.reaped {
            self.kill_all("-KILL");
            let _ = self.child.wait();
            self.reaped = true;
        }
        for _ in 0..5 {
            if tagged_processes(&self.tag).is_empty() {
                break;
            }
            self.kill_all("-KILL");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Processes (other than this one) whose environment holds `TAG_ENV=tag` (Linux `/proc`).
fn tagged_processes(tag: &str) -> Vec<u32> {
    let needle = format!("{TAG_ENV}={tag}");
    let me = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env
            .split(|b| *b == 0)
            .any(|entry| entry == needle.as_bytes())
        {
            out.push(pid);
        }
    }
    out
}

/// Runs `cmd` in a process group of its own with stdout/stderr to files in `work`, for at
/// most `timeout`; on timeout it is asked to stop (SIGTERM), then killed.
fn run_bounded(
    mut cmd: Command,
    work: &Path,
    timeout: Duration,
    kind: &RuntimeKind,
) -> Result<String, VerifyError> {
    let file = |name: &str| {
        std::fs::File::create(work.join(name))
            .map_err(|e| VerifyError::data(work, format!("cannot create {name}: {e}")))
    };
    let tag = format!(
        "{}-{}",
        std::process::id(),
        work.file_name().and_then(|n| n.to_str()).unwrap_or("x")
    );
    cmd.stdin(Stdio::null())
        .stdout(file("helper.stdout")?)
        .stderr(file("helper.stderr")?)
        .env(TAG_ENV, &tag);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let _ = cmd.process_group(0);
    }
    let program = PathBuf::from(cmd.get_program());
    let child = cmd.spawn().map_err(|e| VerifyError::RuntimeLoad {
        path: program.clone(),
        message: format!("cannot start the {} helper: {e}", kind.name()),
    })?;
    let mut running = Running {
        child,
        tag,
        reaped: false,
    };
    let start = Instant::now();
    loop {
        match running.try_wait() {
            Ok(Some(status)) => return Ok(status.to_string()),
            Ok(None) => {}
            Err(e) => {
                return Err(VerifyError::RuntimeLoad {
                    path: program,
                    message: format!("cannot wait for the {} helper: {e}", kind.name()),
                })
            }
        }
        if start.elapsed() >= timeout {
            // Let the helper close the browser itself, then make sure.
            running.kill_all("-TERM");
            let grace = Instant::now();
            while grace.elapsed() < Duration::from_secs(3) {
                if let Ok(Some(_)) = running.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(running);
            return Err(VerifyError::Run {
                path: program,
                message: format!(
                    "the {} run did not finish within {} s (--timeout) and was stopped",
                    kind.name(),
                    timeout.as_secs()
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
