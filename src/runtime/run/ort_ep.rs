//! A generic ONNX Runtime execution provider as a runtime: `--runtime ort-ep:NAME` runs a
//! model through the `onnxruntime` Python package of the venv with provider NAME
//! (`CPUExecutionProvider`, `CUDAExecutionProvider`, `DmlExecutionProvider` with
//! onnxruntime-directml, ...), in a child process (`tools/ort_ep/run.py`) bounded by a timeout.
//!
//! The session gets the model's own runtime settings (`onnx_safeify.runtime.*` metadata, such
//! as `session.layer_assignment_settings`; from the `layer_ann` annotations when the metadata
//! has none) and the graph optimisation level asked for. The provider's node placement is read
//! from ONNX Runtime's own record (`session.record_ep_graph_assignment_info`), or from its
//! verbose log where the installed onnxruntime has no such record.
//!
//! A failure of the runtime is a finding, not an error of the caller: [`run_ort_ep`] returns
//! `Ok` with a [`Failure`] classified as no session, run error, device removed, timeout or
//! crash. `Err` means the run could not be attempted (no venv, no writable temporary folder).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::discover;
use super::error::{one_line, VerifyError};
use super::log::{parse_placement, PlacedNode, Placement, ProviderPlacement, CPU_PROVIDER};
use super::model::{read_model_proto, ModelInfo};
use super::npz::{npy_bytes, read_npy};
use super::ort::{layer_assignment_setting, OptLevel, LAYER_ASSIGNMENT_KEY};
use super::tensor::HostTensor;

/// The `--runtime` prefix naming an ONNX Runtime execution provider.
pub const PREFIX: &str = "ort-ep:";
/// Metadata key prefix under which a compiled model carries its target's runtime settings.
pub const RUNTIME_META_PREFIX: &str = "onnx_safeify.runtime.";
/// The driver, run with the venv's Python.
const DRIVER: &str = include_str!("../../../tools/ort_ep/run.py");

/// How a run on the provider failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureClass {
    /// No session: the provider is not there, or it cannot load the model.
    NoSession,
    /// The session was created but a run returned an error.
    RunError,
    /// The run reported that the device was removed or lost (DXGI_ERROR_DEVICE_REMOVED,
    /// a lost CUDA context).
    DeviceRemoved,
    /// The driver did not finish within the timeout (a hang) and was killed.
    Timeout,
    /// The driver died of a signal or exited without a result (a crash in the runtime).
    Crash,
}

impl FailureClass {
    pub fn label(self) -> &'static str {
        match self {
            FailureClass::NoSession => "no session",
            FailureClass::RunError => "run error",
            FailureClass::DeviceRemoved => "device removed",
            FailureClass::Timeout => "timeout",
            FailureClass::Crash => "crash",
        }
    }
}

/// A classified failure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    pub class: FailureClass,
    /// Where the driver was: `provider`, `session`, `run 1`, ...
    pub stage: String,
    /// One line: the runtime's error text, or what became of the process.
    pub message: String,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct OrtEpRequest<'a> {
    pub model: &'a Path,
    /// The execution provider, e.g. `CPUExecutionProvider`.
    pub provider: &'a str,
    pub optimization: OptLevel,
    /// Extra session config entries (after the model's own).
    pub session: Vec<(String, String)>,
    /// Values to fetch; `None`: the model's outputs.
    pub outputs: Option<Vec<String>>,
    /// Inputs, one list per run.
    pub feeds: &'a [Vec<(String, HostTensor)>],
    /// Bound on the whole driver process.
    pub timeout: Duration,
}

/// The result of one driver process.
#[derive(Debug, Clone)]
pub struct OrtEpOutcome {
    /// Outputs by name, one map per run; or the failure.
    pub result: Result<Vec<HashMap<String, HostTensor>>, Failure>,
    /// Where the nodes were placed (when the session was created).
    pub placement: Option<Placement>,
    /// `session.record_ep_graph_assignment_info` or `log`.
    pub placement_source: Option<String>,
    /// onnxruntime version and providers, one line.
    pub description: String,
    /// Session config entries given.
    pub settings: Vec<(String, String)>,
    /// Seconds each run took inside the runtime.
    pub run_seconds: Vec<f64>,
    /// Wall time of the driver process, seconds.
    pub wall_seconds: f64,
}

/// The provider name of `ort-ep:NAME`, if `runtime` has that form.
pub fn provider_of(runtime: &str) -> Option<&str> {
    runtime
        .strip_prefix(PREFIX)
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// The session config entries a model's metadata asks for (`onnx_safeify.runtime.KEY` =
/// value), plus `session.layer_assignment_settings` from its `layer_ann` annotations when the
/// metadata does not set it.
pub fn model_session_settings(
    model: &Path,
    info: Option<&ModelInfo>,
    warnings: &mut Vec<String>,
) -> Vec<(String, String)> {
    let mut settings: Vec<(String, String)> = Vec::new();
    if let Ok(m) = read_model_proto(model) {
        for p in &m.metadata_props {
            let (Some(k), Some(v)) = (p.key.as_deref(), p.value.as_deref()) else {
                continue;
            };
            if let Some(key) = k.strip_prefix(RUNTIME_META_PREFIX) {
                if !key.is_empty() {
                    settings.push((key.to_string(), v.to_string()));
                }
            }
        }
    }
    if let Some(info) = info {
        if !settings.iter().any(|(k, _)| k == LAYER_ASSIGNMENT_KEY) {
            let (setting, unusable) = layer_assignment_setting(&info.layer_annotations);
            for u in unusable {
                warnings.push(format!(
                    "{}: layer_ann value '{u}' cannot be written in {LAYER_ASSIGNMENT_KEY}; nodes with it run unpinned",
                    model.display()
                ));
            }
            if let Some(s) = setting {
                settings.push((LAYER_ASSIGNMENT_KEY.to_string(), s));
            }
        }
    }
    settings
}

/// The Python whose onnxruntime runs the provider: found as `verify` finds ONNX Runtime
/// ([`discover::find_python`]: the wheel's interpreter, an active venv, the project's venv,
/// python3 on PATH).
pub fn find_python() -> Result<PathBuf, VerifyError> {
    discover::find_python(&discover::Discovery::from_env(), &["onnxruntime"])
}

fn opt_name(o: OptLevel) -> &'static str {
    match o {
        OptLevel::Disable => "disabled",
        OptLevel::Basic => "basic",
        OptLevel::Extended => "extended",
        OptLevel::All => "all",
    }
}

/// Whether an error text says the device went away.
fn device_removed(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "device_removed",
        "device removed",
        "887a0005",
        "887a0006",
        "device lost",
        "device_lost",
        "cudaerrordevicesunavailable",
        "cuda_error_illegal_address",
        "an illegal memory access was encountered",
        "unspecified launch failure",
    ]
    .iter()
    .any(|n| t.contains(n))
}

/// Classifies the driver's own error report by its stage.
pub fn classify(stage: &str, error: &str) -> FailureClass {
    if device_removed(error) {
        return FailureClass::DeviceRemoved;
    }
    match stage {
        "request" | "import" | "provider" | "session" => FailureClass::NoSession,
        _ => FailureClass::RunError,
    }
}

/// Runs `req.model` on the provider in a child process. See the module docs.
pub fn run_ort_ep(req: &OrtEpRequest<'_>) -> Result<OrtEpOutcome, VerifyError> {
    let python = find_python()?;
    let path = req.model;
    let abs = std::fs::canonicalize(path).map_err(|e| VerifyError::model(path, e.to_string()))?;
    let info = super::model::load_model_info(path).ok();
    let mut warnings = Vec::new();
    let mut settings = model_session_settings(path, info.as_ref(), &mut warnings);
    for (k, v) in &req.session {
        settings.retain(|(k2, _)| k2 != k);
        settings.push((k.clone(), v.clone()));
    }
    let work = super::named::TempDir::with_prefix("onnx-safeify-ort-ep")?;

    let mut runs_json = Vec::with_capacity(req.feeds.len());
    for (r, feed) in req.feeds.iter().enumerate() {
        let mut inputs = Vec::new();
        for (i, (name, t)) in feed.iter().enumerate() {
            let file = format!("r{r}_i{i}.npy");
            let bytes = npy_bytes(t).map_err(|m| VerifyError::input(path, name, m))?;
            std::fs::write(work.0.join(&file), bytes)
                .map_err(|e| VerifyError::data(&work.0, format!("cannot write {file}: {e}")))?;
            inputs.push(serde_json::json!({"name": name, "file": file}));
        }
        runs_json.push(serde_json::json!({ "inputs": inputs }));
    }
    let session: serde_json::Map<String, serde_json::Value> = settings
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let request = serde_json::json!({
        "model": abs,
        "provider": req.provider,
        "session": session,
        "graph_optimization_level": opt_name(req.optimization),
        "outputs": req.outputs,
        "runs": runs_json,
    });
    std::fs::write(work.0.join("request.json"), request.to_string())
        .map_err(|e| VerifyError::data(&work.0, format!("cannot write request.json: {e}")))?;
    let script = work.0.join("run_ort_ep.py");
    std::fs::write(&script, DRIVER)
        .map_err(|e| VerifyError::data(&work.0, format!("cannot write the driver: {e}")))?;

    let mut cmd = Command::new(&python);
    cmd.arg(&script).arg(&work.0);
    let start = Instant::now();
    let ended = run_bounded(cmd, &work.0, req.timeout)?;
    let wall_seconds = start.elapsed().as_secs_f64();
    let stderr = std::fs::read_to_string(work.0.join("helper.stderr")).unwrap_or_default();
    let stage = std::fs::read_to_string(work.0.join("stage.txt"))
        .unwrap_or_else(|_| "start".into())
        .trim()
        .to_string();
    let tail = || {
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .rev()
            .take(4)
            .collect();
        one_line(&lines.into_iter().rev().collect::<Vec<_>>().join(" | "))
    };

    let mut outcome = OrtEpOutcome {
        result: Ok(Vec::new()),
        placement: None,
        placement_source: None,
        description: format!("onnxruntime (Python) {}", req.provider),
        settings,
        run_seconds: Vec::new(),
        wall_seconds,
    };
    let status = match ended {
        Ended::TimedOut => {
            outcome.result = Err(Failure {
                class: FailureClass::Timeout,
                stage: stage.clone(),
                message: format!(
                    "the run on {} did not finish within {:.1} s and was killed (it was at stage '{stage}')",
                    req.provider,
                    req.timeout.as_secs_f64()
                ),
            });
            return Ok(outcome);
        }
        Ended::Exited(s) => s,
    };
    let result_path = work.0.join("result.json");
    let result: Option<serde_json::Value> = std::fs::read_to_string(&result_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let Some(result) = result else {
        let class = if device_removed(&stderr) {
            FailureClass::DeviceRemoved
        } else {
            FailureClass::Crash
        };
        outcome.result = Err(Failure {
            class,
            stage: stage.clone(),
            message: format!(
                "the driver ended ({status}) at stage '{stage}' without a result: {}",
                tail()
            ),
        });
        return Ok(outcome);
    };
    let s = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).unwrap_or("?").to_string();
    let rt = result.get("runtime");
    outcome.description = format!(
        "onnxruntime {} (Python, {}) on {}; session providers {}",
        s(rt.and_then(|r| r.get("onnxruntime"))),
        python.display(),
        req.provider,
        result
            .get("providers")
            .and_then(|p| p.as_array())
            .map(|a| a
                .iter()
                .filter_map(|v| v.as_str())
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_else(|| "none".into())
    );
    outcome.placement_source = result
        .get("placement_source")
        .and_then(|v| v.as_str())
        .map(String::from);
    outcome.placement = match result.get("placement").and_then(|p| p.as_array()) {
        Some(groups) => Some(placement_from_record(groups, path)),
        None => {
            let lines: Vec<&str> = stderr.lines().collect();
            parse_placement(&lines)
        }
    };
    if result.get("ok").and_then(|v| v.as_bool()) != Some(true) {
        let stage = s(result.get("stage"));
        let error = s(result.get("error"));
        outcome.result = Err(Failure {
            class: classify(&stage, &error),
            stage,
            message: one_line(&error),
        });
        return Ok(outcome);
    }
    let runs = result
        .get("runs")
        .and_then(|v| v.as_array())
        .cloned()
        .unwrap_or_default();
    if runs.len() != req.feeds.len() {
        return Err(VerifyError::data(
            &result_path,
            format!(
                "{} runs requested, {} reported",
                req.feeds.len(),
                runs.len()
            ),
        ));
    }
    let mut all = Vec::with_capacity(runs.len());
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
                .map_err(|m| VerifyError::output(path, name, format!("{}: {m}", req.provider)))?;
            let _ = map.insert(name.to_string(), t);
        }
        all.push(map);
        outcome
            .run_seconds
            .push(run.get("ms").and_then(|v| v.as_f64()).unwrap_or(0.0) / 1000.0);
    }
    outcome.result = Ok(all);
    Ok(outcome)
}

/// The placement from ONNX Runtime's record: node counts per provider, and the nodes the CPU
/// provider received, each marked pinned when it carries `layer_ann` in `model`.
fn placement_from_record(groups: &[serde_json::Value], model: &Path) -> Placement {
    let pinned: std::collections::HashSet<String> = read_model_proto(model)
        .ok()
        .map(|m| {
            m.graph
                .iter()
                .flat_map(|g| g.node.iter())
                .filter(|n| {
                    n.metadata_props
                        .iter()
                        .any(|p| p.key.as_deref() == Some(super::model::LAYER_ANN_KEY))
                })
                .filter_map(|n| n.name.clone())
                .collect()
        })
        .unwrap_or_default();
    let mut p = Placement::default();
    for g in groups {
        let provider = g
            .get("provider")
            .and_then(|v| v.as_str())
            .unwrap_or("?")
            .to_string();
        let nodes = g
            .get("nodes")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        match p.providers.iter_mut().find(|x| x.provider == provider) {
            Some(x) => x.nodes += nodes.len(),
            None => p.providers.push(ProviderPlacement {
                provider: provider.clone(),
                nodes: nodes.len(),
            }),
        }
        if provider == CPU_PROVIDER {
            for n in nodes {
                let name = n
                    .get("name")
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_string();
                p.cpu_nodes.push(PlacedNode {
                    op: n
                        .get("op")
                        .and_then(|v| v.as_str())
                        .unwrap_or("")
                        .to_string(),
                    pinned: pinned.contains(&name),
                    name,
                    reason: None,
                });
            }
        }
    }
    p
}

enum Ended {
    Exited(String),
    TimedOut,
}

/// Runs `cmd` in a process group of its own (stdout/stderr to files in `work`) for at most
/// `timeout`; then the group is killed.
fn run_bounded(mut cmd: Command, work: &Path, timeout: Duration) -> Result<Ended, VerifyError> {
    let file = |name: &str| {
        std::fs::File::create(work.join(name))
            .map_err(|e| VerifyError::data(work, format!("cannot create {name}: {e}")))
    };
    cmd.stdin(Stdio::null())
        .stdout(file("helper.stdout")?)
        .stderr(file("helper.stderr")?);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let _ = cmd.process_group(0);
    }
    let program = PathBuf::from(cmd.get_program());
    let mut child = cmd.spawn().map_err(|e| VerifyError::RuntimeLoad {
        path: program.clone(),
        message: format!("cannot start the ort-ep driver: {e}"),
    })?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(Ended::Exited(status.to_string())),
            Ok(None) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(VerifyError::RuntimeLoad {
                    path: program,
                    message: format!("cannot wait for the ort-ep driver: {e}"),
                });
            }
        }
        if start.elapsed() >= timeout {
            #[cfg(unix)]
            {
                // The driver leads its own group: kill it and anything it started.
                let pgid = child.id() as libc::pid_t;
                // SAFETY: kill(2) with a negative pid signals that process group only; the
                // child has not been reaped, so its id still names its group.
                let _ = unsafe { libc::kill(-pgid, libc::SIGKILL) };
            }
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Ended::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_names() {
        assert_eq!(
            provider_of("ort-ep:CUDAExecutionProvider"),
            Some("CUDAExecutionProvider")
        );
        assert_eq!(provider_of("ort-ep:"), None);
        assert_eq!(provider_of("ort-ep:a b"), None);
        assert_eq!(provider_of("webgpu"), None);
    }

    #[test]
    fn classification_by_stage_and_text() {
        assert_eq!(classify("provider", "x"), FailureClass::NoSession);
        assert_eq!(classify("session", "x"), FailureClass::NoSession);
        assert_eq!(classify("run 1", "x"), FailureClass::RunError);
        assert_eq!(
            classify("run 1", "DXGI_ERROR_DEVICE_REMOVED (0x887A0005)"),
            FailureClass::DeviceRemoved
        );
    }
}
