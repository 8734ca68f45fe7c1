//! `onnx_safeify._native`, the extension module under the Python package (feature `python`).
//! The package's Python layer (`python/onnx_safeify/__init__.py`) turns paths, bytes and
//! `onnx.ModelProto`s into what these functions take and shapes their results; every step
//! here calls the same library functions as the command line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::compile;
use crate::Document;

create_exception!(
    onnx_safeify,
    Error,
    PyValueError,
    "An onnx-safeify error: the message the command prints after `error: ` (one line; for \
     rule files, a first line that counts the errors, then each with file:line:col and a \
     snippet)."
);

fn err(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

/// A model given as a file (`path`) or as bytes in memory (`data`, labelled `label`).
fn load(path: Option<PathBuf>, data: Option<&[u8]>, label: &str) -> crate::Result<Document> {
    match (path, data) {
        (Some(p), _) => crate::load(&p),
        (None, Some(d)) => crate::load_bytes(bytes::Bytes::copy_from_slice(d), Path::new(label)),
        (None, None) => Err(crate::Error::new(
            crate::ErrorKind::Usage,
            "no model given (a path, bytes or an onnx.ModelProto)",
        )),
    }
}

fn options(dims: Vec<(String, i64)>) -> PyResult<crate::engine::Options> {
    compile::options(dims).map_err(err)
}

/// A compiled model, ready to be written.
#[pyclass(module = "onnx_safeify._native", name = "Compiled", frozen)]
struct Compiled {
    doc: Document,
    report_json: String,
}

#[pymethods]
impl Compiled {
    /// The `--report` JSON of the compile.
    #[getter]
    fn report_json(&self) -> &str {
        &self.report_json
    }

    /// The model file's bytes, as the command writes them.
    fn model_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = py.detach(|| compile::model_bytes(&self.doc)).map_err(err)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Write the model to `path` with the command's writer (a temporary file renamed into
    /// place; external data, if any, into `path` + `.data`). Returns the paths written.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<Vec<PathBuf>> {
        let written = py.detach(|| crate::save(&self.doc, &path)).map_err(err)?;
        let mut out = vec![written.path];
        out.extend(written.external_file);
        Ok(out)
    }
}

/// Compile a model for a target; raises `Error` with the command's message when nodes have
/// no safe rewrite and `allow_unsafe` is false.
#[pyfunction(name = "compile")]
#[pyo3(signature = (path, data, label, target, rules, dims, allow_unsafe, strict=false, nchwc_block=None, allow_approximate=false))]
#[allow(clippy::too_many_arguments)]
fn compile_model(
    py: Python<'_>,
    path: Option<PathBuf>,
    data: Option<&[u8]>,
    label: String,
    target: String,
    rules: Vec<PathBuf>,
    dims: Vec<(String, i64)>,
    allow_unsafe: bool,
    strict: bool,
    nchwc_block: Option<i64>,
    allow_approximate: bool,
) -> PyResult<Compiled> {
    let mut opts = options(dims)?;
    if let Some(b) = nchwc_block.filter(|b| !(1..=1024).contains(b)) {
        return Err(err(crate::Error::new(
            crate::ErrorKind::Usage,
            format!("nchwc_block {b}: expected a block size from 1 to 1024"),
        )));
    }
    opts.strict = strict;
    opts.nchwc_block = nchwc_block;
    opts.allow_approximate = allow_approximate;
    let shown = path.clone().unwrap_or_else(|| PathBuf::from(&label));
    let data = data.map(<[u8]>::to_vec);
    py.detach(move || {
        let target = compile::load_target(&target, &rules)?;
        let mut doc = load(path, data.as_deref(), &label)?;
        let warned = compile::dim_warnings(&doc.model, &shown, &opts.dims);
        let done = compile::compile_document(&mut doc, &target, &opts, allow_unsafe, &shown)?;
        if !done.writable {
            return Err(crate::Error::new(
                crate::ErrorKind::Usage,
                done.blocked_message(&shown, &target),
            ));
        }
        // One model is all this API writes; a runtime that ignores pins needs a partition.
        if target.cpu_subgraphs == crate::rules::CpuSubgraphs::Partition {
            let g = &doc.model.graph;
            let ann = opts.annotation.as_str();
            let pinned = |n: &crate::ir::Node| n.metadata(crate::rewrite::cpu::LAYER_ANN_KEY) == Some(ann);
            if g.order
                .iter()
                .any(|&n| crate::partition::holds_pin(g.node(n), &pinned))
            {
                return Err(crate::Error::new(
                    crate::ErrorKind::Usage,
                    format!(
                        "{}: target {} runs on a runtime that ignores CPU pins, and this compile pins nodes: \
                         it must be written as a partition, which this API does not write; use the command \
                         (onnx-safeify MODEL --target {} writes segment models and a manifest)",
                        shown.display(),
                        target.name,
                        target.name
                    ),
                ));
            }
        }
        let report_json =
            crate::report::compile_json(&done.report, &target, &shown.display().to_string(), &[]);
        Ok((Compiled { doc, report_json }, warned))
    })
    .map_err(err)
    .and_then(|(compiled, warned)| warn(py, &warned).map(|_| compiled))
}

/// Each text as a Python `UserWarning` (what the command prints as `warning:` lines).
fn warn(py: Python<'_>, texts: &[String]) -> PyResult<()> {
    if texts.is_empty() {
        return Ok(());
    }
    let warnings = py.import("warnings")?;
    for t in texts {
        warnings.call_method1("warn", (t.as_str(),))?;
    }
    Ok(())
}

/// What the target's rules would change: `check --format json`.
#[pyfunction]
#[pyo3(signature = (path, data, label, target, rules, dims))]
fn check(
    py: Python<'_>,
    path: Option<PathBuf>,
    data: Option<&[u8]>,
    label: String,
    target: String,
    rules: Vec<PathBuf>,
    dims: Vec<(String, i64)>,
) -> PyResult<String> {
    let opts = options(dims)?;
    let shown = path.clone().unwrap_or_else(|| PathBuf::from(&label));
    let data = data.map(<[u8]>::to_vec);
    py.detach(move || {
        let target = compile::load_target(&target, &rules)?;
        let mut doc = load(path, data.as_deref(), &label)?;
        let warned = compile::dim_warnings(&doc.model, &shown, &opts.dims);
        let findings = crate::engine::check(&mut doc.model, &target, &opts);
        let cost = crate::cost::for_target(&doc.model, &target, &opts);
        let timing = crate::timing::for_target(&doc.model, &target, &opts);
        Ok::<_, crate::Error>((
            crate::report::findings_json_with_timing(
                &target.name,
                &shown.display().to_string(),
                &findings,
                Some(&cost),
                timing.as_ref(),
            ),
            warned,
        ))
    })
    .map_err(err)
    .and_then(|(json, warned)| warn(py, &warned).map(|_| json))
}

/// The built-in target names.
#[pyfunction]
fn targets() -> Vec<&'static str> {
    crate::rules::builtin_names()
}

/// `verify ARGS... --format json`: the report as JSON, whether or not it passed.
#[pyfunction]
fn verify(py: Python<'_>, args: Vec<OsString>) -> PyResult<String> {
    let args = crate::verify::cli::parse_args(args).map_err(|e| {
        // clap's message without its "error: " prefix and usage lines: the first line.
        let text = e.to_string();
        let first = text.lines().next().unwrap_or("").trim();
        err(first.strip_prefix("error: ").unwrap_or(first))
    })?;
    let mut opts = args.to_options().map_err(err)?;
    // ONNX Runtime is looked for in this interpreter's environment first, and a "not found"
    // error tells to install it there (not into the command's cache venv).
    if let Some(d) = opts.discovery.as_mut() {
        if d.own_python.is_none() {
            d.own_python = py
                .import("sys")
                .and_then(|sys| sys.getattr("executable"))
                .and_then(|e| e.extract::<Option<String>>())
                .ok()
                .flatten()
                .filter(|e| !e.is_empty())
                .map(std::path::PathBuf::from);
        }
    }
    py.detach(|| crate::verify::verify_models(&args.original, &args.rewritten, &opts))
        .map(|report| report.to_json())
        .map_err(err)
}

/// Run the command line (`argv[0]` is the program name); returns the exit code.
#[pyfunction]
fn run_cli(py: Python<'_>, argv: Vec<OsString>) -> u8 {
    py.detach(|| crate::cli::run(argv))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Compiled>()?;
    m.add_function(wrap_pyfunction!(compile_model, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(targets, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    Ok(())
}
