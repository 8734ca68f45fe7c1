//! ONNX Runtime through the `ort` crate, loaded at run time (`load-dynamic`).
//!
//! ORT's environment can be created once per process, so it lives in a process-wide
//! `OnceLock`: the first successful [`runtime`] call loads the library found by
//! discovery and every later call reuses it. A failed load leaves nothing behind, so a
//! later call with a working library still succeeds.

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use ort::environment::Environment;
use ort::memory::Allocator;
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::{DynTensor, DynTensorValueType, DynValue, Tensor, ValueType};

use super::discover::{find_onnxruntime, Discovery};
use super::dtype::DType;
use super::error::{one_line, VerifyError};
use super::model::ModelInfo;
use super::tensor::{element_count, HostTensor, TensorData};

/// Session config key that maps `layer_ann` node annotations to devices (ORT >= 1.24).
pub const LAYER_ASSIGNMENT_KEY: &str = "session.layer_assignment_settings";

/// A loaded ONNX Runtime.
pub struct Runtime {
    env: Environment,
    pub library: PathBuf,
    /// Build information reported by the library (`git-branch=rel-1.32.0, ...`).
    pub build_info: String,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());

/// The process-wide runtime, loading it on first use.
pub fn runtime(discovery: &Discovery) -> Result<&'static Runtime, VerifyError> {
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let _guard = INIT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let library = find_onnxruntime(discovery)?;
    let load_err = |message: String| VerifyError::RuntimeLoad {
        path: library.clone(),
        message: one_line(&message),
    };
    let builder = ort::init_from(&library).map_err(|e| load_err(e.to_string()))?;
    let env = builder
        .with_name("onnx-safeify-verify")
        .with_telemetry(false)
        .build()
        .map_err(|e| load_err(e.to_string()))?;
    // ORT logs failures itself before returning them; they reach the user through our
    // one-line errors, so keep its own log quiet unless ORT_LOG asks otherwise.
    if std::env::var_os("ORT_LOG").is_none() {
        env.set_log_level(ort::logging::LogLevel::Fatal);
    }
    let build_info = one_line(ort::info());
    Ok(RUNTIME.get_or_init(|| Runtime {
        env,
        library,
        build_info,
    }))
}

impl Runtime {
    /// The release version, read from the library's file name (`libonnxruntime.so.1.32.0`,
    /// following a symlink) or the build info; `unknown` if neither shows it.
    pub fn version(&self) -> String {
        let from_name = |p: &std::path::Path| {
            let name = p.file_name()?.to_str()?;
            let v = name
                .split_once(".so.")
                .map(|(_, v)| v)
                .or_else(|| name.strip_prefix("libonnxruntime.")?.strip_suffix(".dylib"))?;
            let ok = v.split('.').count() >= 2 && v.split('.').all(|p| p.parse::<u32>().is_ok());
            ok.then(|| v.to_string())
        };
        from_name(&self.library)
            .or_else(|| {
                std::fs::canonicalize(&self.library)
                    .ok()
                    .and_then(|p| from_name(&p))
            })
            .or_else(|| {
                self.build_info
                    .split([',', ' '])
                    .find_map(|p| p.strip_prefix("git-branch=rel-"))
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "unknown".to_string())
    }
}

/// ORT graph optimisation level used for both models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum OptLevel {
    Disable,
    Basic,
    Extended,
    #[default]
    All,
}

/// Session settings shared by every model of a verification.
#[derive(Debug, Clone, Default)]
pub struct SessionSettings {
    pub optimization: OptLevel,
    /// Intra-op threads (`None`: ORT's default).
    pub threads: Option<usize>,
}

/// One model loaded in ORT on the CPU provider.
pub struct ModelSession {
    pub path: PathBuf,
    session: Session,
    /// The `session.layer_assignment_settings` value used, if the model has annotations.
    pub layer_assignment: Option<String>,
    pub input_names: Vec<String>,
    pub output_names: Vec<String>,
}

/// `cpu(a,b)` for the distinct `layer_ann` values of a model; values ORT's config syntax
/// cannot carry (`,;()` or a leading `=`) are returned separately.
pub fn layer_assignment_setting(annotations: &[String]) -> (Option<String>, Vec<String>) {
    let (ok, bad): (Vec<&String>, Vec<&String>) = annotations
        .iter()
        .partition(|a| !a.contains([',', ';', '(', ')']) && !a.starts_with('='));
    let setting = if ok.is_empty() {
        None
    } else {
        let list: Vec<&str> = ok.iter().map(|s| s.as_str()).collect();
        Some(format!("cpu({})", list.join(",")))
    };
    (setting, bad.into_iter().cloned().collect())
}

impl ModelSession {
    /// Loads `info.path`; returns the session and warnings about it.
    pub fn open(
        rt: &Runtime,
        info: &ModelInfo,
        settings: &SessionSettings,
    ) -> Result<(ModelSession, Vec<String>), VerifyError> {
        let path = info.path.as_path();
        let err = |e: &dyn std::fmt::Display| VerifyError::Session {
            path: path.to_path_buf(),
            message: one_line(&e.to_string()),
        };
        let mut warnings = Vec::new();
        let level = match settings.optimization {
            OptLevel::Disable => GraphOptimizationLevel::Disable,
            OptLevel::Basic => GraphOptimizationLevel::Level1,
            OptLevel::Extended => GraphOptimizationLevel::Level2,
            OptLevel::All => GraphOptimizationLevel::All,
        };
        let mut builder = Session::builder(&rt.env)
            .map_err(|e| err(&e))?
            .with_optimization_level(level)
            .map_err(|e| err(&e))?;
        if let Some(n) = settings.threads {
            builder = builder.with_intra_threads(n).map_err(|e| err(&e))?;
        }
        let (layer_assignment, unusable) = layer_assignment_setting(&info.layer_annotations);
        for u in unusable {
            warnings.push(format!(
                "{}: layer_ann value '{u}' cannot be written in {LAYER_ASSIGNMENT_KEY}; nodes with it run unpinned",
                path.display()
            ));
        }
        if let Some(setting) = &layer_assignment {
            builder = builder
                .with_config_entry(LAYER_ASSIGNMENT_KEY, setting)
                .map_err(|e| err(&e))?;
        }
        let session = builder.commit_from_file(path).map_err(|e| err(&e))?;
        let input_names = session
            .inputs()
            .iter()
            .map(|o| o.name().to_string())
            .collect();
        let output_names = session
            .outputs()
            .iter()
            .map(|o| o.name().to_string())
            .collect();
        Ok((
            ModelSession {
                path: path.to_path_buf(),
                session,
                layer_assignment,
                input_names,
                output_names,
            },
            warnings,
        ))
    }

    /// Runs the model. `lookup` provides a tensor by input name; every declared input must
    /// be provided. Returns the outputs in declaration order.
    pub fn run<'a>(
        &mut self,
        lookup: impl Fn(&str) -> Option<&'a HostTensor>,
    ) -> Result<Vec<(String, HostTensor)>, VerifyError> {
        let mut feeds: Vec<(String, DynValue)> = Vec::with_capacity(self.input_names.len());
        for name in &self.input_names {
            let t = lookup(name).ok_or_else(|| {
                VerifyError::input(&self.path, name, "no value was provided for this input")
            })?;
            let v = to_ort_value(t).map_err(|m| VerifyError::input(&self.path, name, m))?;
            feeds.push((name.clone(), v));
        }
        let path = self.path.clone();
        let outputs = self.session.run(feeds).map_err(|e| VerifyError::Run {
            path: path.clone(),
            message: one_line(&e.to_string()),
        })?;
        let mut result = Vec::with_capacity(outputs.len());
        for (name, value) in outputs.iter() {
            let t = from_ort_value(&value).map_err(|m| VerifyError::output(&path, name, m))?;
            result.push((name.to_string(), t));
        }
        Ok(result)
    }
}

fn to_ort_value(t: &HostTensor) -> Result<DynValue, String> {
    let shape: Vec<i64> = t
        .shape
        .iter()
        .map(|&d| i64::try_from(d).map_err(|_| format!("dimension {d} is too large")))
        .collect::<Result<_, _>>()?;
    match &t.data {
        TensorData::Strings(s) => Tensor::from_string_array((shape, s.as_slice()))
            .map(|v| v.into_dyn())
            .map_err(|e| e.to_string()),
        TensorData::Bytes(bytes) => {
            let mut value = DynTensor::new(&Allocator::default(), t.dtype.to_ort(), shape)
                .map_err(|e| e.to_string())?;
            if !bytes.is_empty() {
                match value.size() {
                    Some(n) if n == bytes.len() => {}
                    other => {
                        return Err(format!(
                            "ONNX Runtime allocated {other:?} bytes for {} bytes of data",
                            bytes.len()
                        ))
                    }
                }
                let ptr = value.data_ptr_mut().cast::<u8>();
                if ptr.is_null() {
                    return Err("ONNX Runtime returned no buffer for the tensor".into());
                }
                // SAFETY: `ptr` points to a CPU buffer of exactly `bytes.len()` bytes (checked
                // through `size()` above) owned by `value`, which outlives this copy.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
            }
            Ok(value.into_dyn())
        }
    }
}

fn from_ort_value(value: &DynValue) -> Result<HostTensor, String> {
    let (ty, dims) = match value.dtype() {
        ValueType::Tensor { ty, shape, .. } => (*ty, shape.to_vec()),
        other => return Err(format!("is {other}; only tensor outputs can be compared")),
    };
    let dtype = DType::from_ort(ty).ok_or_else(|| format!("has unsupported element type {ty}"))?;
    let shape: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("has a negative dimension {d}")))
        .collect::<Result<_, _>>()?;
    let n = element_count(&shape).ok_or("has too many elements")?;
    let data = if dtype == DType::Str {
        let (_, strings) = value.try_extract_strings().map_err(|e| e.to_string())?;
        TensorData::Strings(strings)
    } else {
        let len = dtype.byte_len(n).ok_or("has too many elements")?;
        let tensor = value
            .view()
            .downcast::<DynTensorValueType>()
            .map_err(|e| e.to_string())?;
        if !tensor.memory_info().is_cpu_accessible() {
            return Err("is not in CPU memory".into());
        }
        if len == 0 {
            TensorData::Bytes(Vec::new())
        } else {
            let ptr = tensor.data_ptr().cast::<u8>();
            if ptr.is_null() {
                return Err("has no data buffer".into());
            }
            // SAFETY: a CPU tensor of `n` elements of `dtype` owns at least `len` bytes at
            // `ptr`, and `tensor` (borrowing `value`) keeps them alive during the copy.
            TensorData::Bytes(unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec())
        }
    };
    HostTensor::new(dtype, shape, data)
}
