//! The compile step exactly as the command runs it, for every front end (the command line, the
//! Python module): [`options`] turns `--dim` sizes into engine options, [`compile_document`]
//! rewrites a loaded model and decides whether it may be written, [`model_bytes`] gives the
//! bytes [`crate::save`] would write.
//!
//! ```
//! use std::path::{Path, PathBuf};
//! use onnx_safeify::compile::{self, parse_dim};
//!
//! let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx");
//! let target = onnx_safeify::rules::load_target("rx580")?;
//! let opts = compile::options([parse_dim("batch=1")?])?;
//! let mut doc = onnx_safeify::load(&path)?;
//! let done = compile::compile_document(&mut doc, &target, &opts, false, &path)?;
//! assert_eq!(done.blocking, 0);
//! let bytes = compile::model_bytes(&doc)?;
//! assert!(bytes.len() > 1000);
//! # Ok::<(), onnx_safeify::Error>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::engine::{self, FindingKind, Report};
use crate::error::{Error, ErrorKind, Result};
use crate::proto::{GraphProto, ModelProto, TensorProto};
use crate::rules::schema::Target;
use crate::Document;

/// Resolve `--target` (a built-in name or a rules file) with `--rules` files on top. A rules
/// file that does not exist but whose stem is a built-in (`rx580.yaml`) gets a hint naming
/// the built-in.
pub fn load_target(spec: &str, rules: &[PathBuf]) -> Result<Target> {
    crate::rules::load_target_with_rules(spec, rules).map_err(|mut e| {
        let path = Path::new(spec);
        let is_yaml = path.extension().is_some_and(|x| x == "yaml" || x == "yml");
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if is_yaml && !path.exists() && crate::rules::builtin_names().contains(&stem) {
            e.message = format!(
                "{}\nhelp: `{stem}` is a built-in target: use --target {stem}",
                e.message.trim_end()
            );
        }
        e
    })
}

/// One `--dim` argument, `NAME=VALUE` or `INPUT[AXIS]=VALUE`, VALUE a positive integer.
pub fn parse_dim(spec: &str) -> Result<(String, i64)> {
    let (k, v) = spec.split_once('=').ok_or_else(|| {
        Error::new(
            ErrorKind::Usage,
            format!("--dim {spec}: expected NAME=VALUE"),
        )
    })?;
    let v: i64 = v.trim().parse().ok().filter(|v| *v > 0).ok_or_else(|| {
        Error::new(
            ErrorKind::Usage,
            format!("--dim {spec}: VALUE must be a positive integer"),
        )
    })?;
    Ok((k.trim().to_string(), v))
}

/// The dimension names of a model's graph inputs (their `dim_param`s), sorted, each once.
pub fn input_dim_names(model: &crate::ir::Model) -> Vec<String> {
    input_dims(model)
        .into_iter()
        .flat_map(|(_, dims)| dims.into_iter().flatten())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Each graph input that is not an initializer: its name and, per axis, its `dim_param`.
fn input_dims(model: &crate::ir::Model) -> Vec<(String, Vec<Option<String>>)> {
    use crate::proto::tensor_shape_proto::dimension::Value as DV;
    use crate::proto::type_proto::Value as TV;
    let g = &model.graph;
    g.inputs
        .iter()
        .filter(|i| g.initializer(i.value).is_none())
        .map(|i| {
            let dims = match i.proto.r#type.as_ref().and_then(|t| t.value.as_ref()) {
                Some(TV::TensorType(t)) => t
                    .shape
                    .as_ref()
                    .map(|s| {
                        s.dim
                            .iter()
                            .map(|d| match &d.value {
                                Some(DV::DimParam(p)) if !p.is_empty() => Some(p.clone()),
                                _ => None,
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            (g.values[i.value.index()].name.to_string(), dims)
        })
        .collect()
}

/// The warnings for `--dim` sizes (`NAME` or `INPUT[AXIS]`) that name nothing in `model`'s
/// inputs (they would be accepted in silence and change nothing).
pub fn dim_warnings(
    model: &crate::ir::Model,
    label: &Path,
    dims: &BTreeMap<String, i64>,
) -> Vec<String> {
    if dims.is_empty() {
        return Vec::new();
    }
    let inputs = input_dims(model);
    let known = input_dim_names(model);
    let mut out = Vec::new();
    for k in dims.keys() {
        match k.strip_suffix(']').and_then(|k| k.rsplit_once('[')) {
            Some((input, axis)) if axis.parse::<usize>().is_ok() => {
                let axis: usize = axis.parse().unwrap_or(0);
                if !inputs.iter().any(|(n, d)| n == input && axis < d.len()) {
                    out.push(format!(
                        "--dim {k}: {} has no such input axis",
                        label.display()
                    ));
                }
            }
            _ if !known.contains(k) => {
                out.push(crate::analysis::unknown_dim_warning(k, label, &known))
            }
            _ => {}
        }
    }
    out
}

/// Engine options with these symbolic dim sizes (every size must be positive).
/// The sizes of a sample input (`--inputs FILE.npz`, arrays named as the model's inputs): one
/// `INPUT[AXIS]=SIZE` per axis of every array, as `--dim` would give them.
pub fn dims_from_npz(path: &std::path::Path) -> Result<Vec<(String, i64)>> {
    let arrays = crate::runtime::run::npz::read_npz(path).map_err(|e| {
        Error::new(
            ErrorKind::Usage,
            format!("--inputs {}: {e}", path.display()),
        )
    })?;
    let mut out = Vec::new();
    for (name, t) in arrays {
        for (axis, &d) in t.shape.iter().enumerate() {
            let d = i64::try_from(d).ok().filter(|d| *d > 0).ok_or_else(|| {
                Error::new(
                    ErrorKind::Usage,
                    format!(
                        "--inputs {}: array '{name}' has an empty axis {axis}: a sample input needs sizes of at least 1",
                        path.display()
                    ),
                )
            })?;
            out.push((format!("{name}[{axis}]"), d));
        }
    }
    Ok(out)
}

pub fn options(dims: impl IntoIterator<Item = (String, i64)>) -> Result<engine::Options> {
    let mut map = BTreeMap::new();
    for (k, v) in dims {
        if v <= 0 {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("--dim {k}={v}: VALUE must be a positive integer"),
            ));
        }
        map.insert(k.trim().to_string(), v);
    }
    Ok(engine::Options {
        dims: map,
        ..engine::Options::default()
    })
}

/// What [`compile_document`] did.
#[derive(Debug)]
pub struct Compiled {
    pub report: Report,
    /// Nodes left with no safe rewrite (denied, or an action that cannot be applied), and
    /// with `strict`, the nodes that fell back.
    pub blocking: usize,
    /// Of `blocking`, the nodes that fell back (counted only with `strict`).
    pub strict_fallbacks: usize,
    /// Whether the model may be written: nothing blocks, or `allow_unsafe` was given.
    pub writable: bool,
}

impl Compiled {
    /// The command's one-line error when the model may not be written.
    pub fn blocked_message(&self, model: &Path, target: &Target) -> String {
        if self.strict_fallbacks > 0 && self.strict_fallbacks == self.blocking {
            return format!(
                "{}: {} node(s) fell back to the CPU and --strict is set; nothing was written (use --allow-unsafe to write anyway)",
                model.display(),
                self.blocking
            );
        }
        format!(
            "{}: {} node(s) have no safe rewrite for target {}; nothing was written (use --allow-unsafe to write anyway)",
            model.display(),
            self.blocking,
            target.name
        )
    }
}

/// Rewrite `doc` for `target`. When nothing blocks (or `allow_unsafe`), the graph's invariants
/// are checked and the target's runtime settings stamped into the model's metadata, so `doc`
/// is ready to save; otherwise `doc` holds the partial rewrite and `writable` is false.
/// `model` names the input in errors.
pub fn compile_document(
    doc: &mut Document,
    target: &Target,
    opts: &engine::Options,
    allow_unsafe: bool,
    model: &Path,
) -> Result<Compiled> {
    // Writing the result needs the input's fields that the schema does not define: another
    // core looks for them while this one rewrites.
    doc.source.unknown.start(doc.source.original.clone());
    // An NCHWc region whose block size the shapes leave open: try the sizes on ONNX Runtime.
    let probe = crate::nchwc_probe::resolve(doc, target, opts);
    let resolved;
    let opts = match probe.as_ref().and_then(|p| p.block) {
        Some(b) => {
            resolved = engine::Options {
                nchwc_block: Some(b),
                ..opts.clone()
            };
            &resolved
        }
        None => opts,
    };
    let mut report = engine::compile_with(&mut doc.model, target, opts, Some(&doc.source.external));
    if let Some(p) = probe {
        report.notes.insert(0, p.note);
    }
    let strict_fallbacks = if opts.strict {
        report.fallbacks.len()
    } else {
        0
    };
    let blocking = report
        .remaining
        .iter()
        .filter(|f| {
            matches!(
                f.kind,
                FindingKind::Denied | FindingKind::Unsupported | FindingKind::FallsBack
            )
        })
        .count()
        + strict_fallbacks;
    let writable = blocking == 0 || allow_unsafe;
    let changed = !report.applied.is_empty() || !report.fallbacks.is_empty();
    if writable {
        engine::check_invariants(&doc.model.graph).map_err(|e| {
            Error::new(
                ErrorKind::Invalid,
                format!("internal error, nothing written: {e}"),
            )
            .in_file(model)
        })?;
        if !target.runtime.is_empty() {
            engine::stamp_runtime(&mut doc.model, target);
        }
        // The loosest class of what changed the graph (a fallback's pin is exact); a model no
        // rule touched gets nothing.
        if changed {
            engine::stamp_exactness(&mut doc.model, report.exactness());
        }
        check_unknown_fields(doc, model)?;
    }
    Ok(Compiled {
        report,
        blocking,
        strict_fallbacks,
        writable,
    })
}

/// The bytes [`crate::save`] writes for `doc` (the model file; the encoding of the exported
/// model). A model whose tensors keep their data in external files has no such single file:
/// that is an error here, save it to a path instead.
pub fn model_bytes(doc: &Document) -> Result<Vec<u8>> {
    let proto = crate::export::export_model(&doc.model);
    if crate::unchanged_with_unknown_fields(doc, &proto)? {
        return Ok(doc.source.original.to_vec());
    }
    if let Some(name) = first_external(&proto) {
        return Err(Error::new(
            ErrorKind::ExternalData,
            format!(
                "tensor '{name}' keeps its data in an external file: the model is more than one file, save it to a path instead"
            ),
        ));
    }
    let unknown = doc.source.unknown()?;
    let plan = crate::io::save::Plan::new(&proto, &unknown)?;
    let mut out = Vec::new();
    crate::io::save::write_model_planned(&mut out, &proto, &plan)
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot encode the model: {e}")))?;
    Ok(out)
}

/// When the input holds fields the schema does not define: fail, naming them, if the compiled
/// model has no place left for some of them (a rewrite removed or replaced their message).
/// `model` names the input in the error.
pub fn check_unknown_fields(doc: &Document, model: &Path) -> Result<()> {
    let unknown = doc.source.unknown()?;
    if unknown.is_empty() {
        return Ok(());
    }
    let proto = crate::export::export_model(&doc.model);
    crate::io::save::Plan::new(&proto, &unknown)
        .map(|_| ())
        .map_err(|e| e.in_file(model))
}

/// The name of the first tensor with external data, in the graphs and functions of `m`.
fn first_external(m: &ModelProto) -> Option<String> {
    fn tensor(t: &TensorProto) -> Option<String> {
        // (A computed payload is written inline.)
        (crate::io::external::is_external(t) && !crate::io::computed::is_computed(t))
            .then(|| t.name.clone().unwrap_or_default())
    }
    fn nodes(ns: &[crate::proto::NodeProto]) -> Option<String> {
        ns.iter().flat_map(|n| &n.attribute).find_map(|a| {
            a.t.as_deref()
                .and_then(tensor)
                .or_else(|| a.tensors.iter().find_map(tensor))
                .or_else(|| a.g.as_deref().and_then(graph))
                .or_else(|| a.graphs.iter().find_map(graph))
        })
    }
    fn graph(g: &GraphProto) -> Option<String> {
        g.initializer
            .iter()
            .find_map(tensor)
            .or_else(|| {
                g.sparse_initializer
                    .iter()
                    .flat_map(|s| s.values.iter().chain(s.indices.iter()))
                    .find_map(tensor)
            })
            .or_else(|| nodes(&g.node))
    }
    m.graph
        .as_ref()
        .and_then(graph)
        .or_else(|| m.functions.iter().find_map(|f| nodes(&f.node)))
}
