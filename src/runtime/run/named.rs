//! A runtime that `probe` and `bisect` name on their command line (`ort-ep:NAME`, `webgpu`,
//! `openvino`): the name parsed; one run of a model there, in a child process bounded by a
//! timeout, its failure classified; the same model on ONNX Runtime CPU in this process, the
//! reference; and the scratch folder the models of the way are written to.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::discover::Discovery;
use super::error::{one_line, VerifyError};
use super::external::{run_external, RuntimeKind, WebgpuPins};
use super::model::{model_info_from_proto, ModelInfo};
use super::ort::{self, ModelSession, OptLevel, SessionSettings};
use super::ort_ep::{self, FailureClass, OrtEpRequest};
use super::tensor::HostTensor;
use crate::proto::ModelProto;

/// A runtime other than the reference, where `probe` and `bisect` run models.
pub(crate) enum Runtime {
    OrtEp(String),
    External(RuntimeKind),
}

/// The runtime that `--runtime SPEC` names.
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

/// A fresh temporary folder, removed on drop: what probe and bisect work in, and where verify's
/// helper processes take their requests.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    /// A folder named `onnx-safeify-bisect-...`.
    pub(crate) fn create() -> Result<TempDir, VerifyError> {
        TempDir::with_prefix("onnx-safeify-bisect")
    }

    /// A folder named `PREFIX-PID-TIME-N` below the system temporary folder.
    pub(crate) fn with_prefix(prefix: &str) -> Result<TempDir, VerifyError> {
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for attempt in 0..100u32 {
            let p = base.join(format!(
                "{prefix}-{}-{nanos:x}-{attempt}",
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

/// Runs a model on ONNX Runtime CPU, in this process: its outputs, or its error in one line.
/// `Err`: ONNX Runtime cannot be loaded at all.
pub(crate) fn run_reference(
    path: &Path,
    proto: &ModelProto,
    feed: &[(String, HostTensor)],
    optimization: OptLevel,
) -> Result<Result<HashMap<String, HostTensor>, String>, VerifyError> {
    let info = model_info_from_proto(path, proto)?;
    let discovery = Discovery::from_env();
    let rt = ort::runtime(&discovery)?;
    let settings = SessionSettings {
        optimization,
        ..Default::default()
    };
    Ok(match ModelSession::open(rt, &info, &settings) {
        Err(e) => Err(one_line(&e.to_string())),
        Ok((mut s, _)) => s
            .run(|n| feed.iter().find(|(k, _)| k == n).map(|(_, t)| t))
            .map(|v| v.into_iter().collect::<HashMap<_, _>>())
            .map_err(|e| one_line(&e.to_string())),
    })
}

/// One model to run on a runtime ([`run_on`]).
pub(crate) struct Run<'a> {
    pub runtime: &'a Runtime,
    /// The model file (written).
    pub path: &'a Path,
    pub info: &'a ModelInfo,
    /// Values to fetch.
    pub outputs: &'a [String],
    pub feed: &'a [(String, HostTensor)],
    pub optimization: OptLevel,
    pub timeout: Duration,
}

/// What a run on a runtime gave: its outputs, or its failure (class, text).
pub(crate) type RunResult = Result<HashMap<String, HostTensor>, (FailureClass, String)>;

/// Runs a model on the runtime, in a child process bounded by the timeout. Also returns the
/// runtime's one-line description (versions, device) when the run reported one. `Err`: the run
/// could not be attempted (runtime not installed, unwritable folder).
pub(crate) fn run_on(r: &Run) -> Result<(RunResult, Option<String>), VerifyError> {
    let mut description: Option<String> = None;
    let actual: RunResult = match r.runtime {
        Runtime::OrtEp(provider) => {
            let feeds = vec![r.feed.to_vec()];
            // The model's own session settings: its `layer_ann` pins, as verify gives them.
            let session = ort_ep::model_session_settings(r.path, Some(r.info), &mut Vec::new());
            let out = ort_ep::run_ort_ep(&OrtEpRequest {
                model: r.path,
                provider,
                optimization: r.optimization,
                session,
                outputs: Some(r.outputs.to_vec()),
                feeds: &feeds,
                timeout: r.timeout,
            })?;
            description = Some(out.description.clone());
            match out.result {
                Ok(mut runs) => Ok(runs.pop().unwrap_or_default()),
                Err(f) => Err((
                    f.class,
                    format!("{} ({}): {}", f.class.label(), f.stage, f.message),
                )),
            }
        }
        Runtime::External(kind) => {
            let mut w = Vec::new();
            match run_external(
                kind,
                r.info,
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
                        FailureClass::Timeout
                    } else if text.contains("without a result") {
                        FailureClass::Crash
                    } else if text.contains("cannot load the model") {
                        FailureClass::NoSession
                    } else {
                        FailureClass::RunError
                    };
                    Err((kind, text))
                }
            }
        }
    };
    Ok((actual, description))
}
