//! onnx-safeify: an offline ONNX graph-rewriting compiler that makes models safe for GPUs and
//! drivers with known hazards.
//!
//! The pipeline, one module per stage: [`io::load`] (memory map, zero-copy decode) →
//! [`import`] (protobuf → IR, validation) → [`ir`] (the graph) → [`export`] (IR → protobuf)
//! → [`io::save`] (streamed, atomic write). Between import and export, [`engine`] infers
//! shapes ([`infer`]), matches a target's rules ([`rules`]) and applies their actions
//! ([`rewrite`]); [`report`] turns the result into text or JSON, [`verify`] runs the original
//! and the rewrite side by side on ONNX Runtime.
//!
//! The command-line tool `onnx-safeify` is a thin layer over the functions below; everything it
//! does can be done from Rust.
//!
//! # Load, compile, check, save
//!
//! [`load`] reads a model into a [`Document`]; [`rules::load_target`] resolves a target (a
//! built-in name such as `rx580`, or a YAML file); [`engine::compile`] rewrites the model in
//! place and returns an [`engine::Report`]; [`save`] writes the result atomically.
//!
//! ```
//! use std::path::Path;
//! use onnx_safeify::engine::{self, FindingKind};
//!
//! let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx");
//! let mut doc = onnx_safeify::load(&model)?;
//! let target = onnx_safeify::rules::load_target("rx580")?;
//! let opts = engine::Options::default();
//!
//! let report = engine::compile(&mut doc.model, &target, &opts);
//! // Nothing is left that has no safe rewrite (`deny`, or an action that cannot apply).
//! assert!(!report
//!     .remaining
//!     .iter()
//!     .any(|f| matches!(f.kind, FindingKind::Denied | FindingKind::Unsupported)));
//! // The sample's wide depthwise convolutions were split.
//! assert!(report.applied.iter().any(|a| a.rule == "split-depthwise"));
//!
//! // What the command line does before writing: the graph's invariants, then the target's
//! // runtime settings stored in the model's metadata (`onnx_safeify.runtime.*`).
//! engine::check_invariants(&doc.model.graph).expect("a well-formed graph");
//! engine::stamp_runtime(&mut doc.model, &target);
//!
//! let out = std::env::temp_dir().join(format!("ocr_tiny.rx580.{}.onnx", std::process::id()));
//! let written = onnx_safeify::save(&doc, &out)?;
//! assert!(written.bytes > 0);
//! // The summary the command prints on stderr, with the session options to use.
//! let summary = onnx_safeify::report::summary_text(&report, &target);
//! assert!(summary.contains("session.layer_assignment_settings"));
//! # std::fs::remove_file(&out).ok();
//! # Ok::<(), onnx_safeify::Error>(())
//! ```
//!
//! # Check without rewriting
//!
//! [`engine::check`] lists what the target's rules would still do, as [`engine::Finding`]s (the
//! `check` command exits 1 when there is any). A compiled model checks clean:
//!
//! ```
//! use std::path::Path;
//! use onnx_safeify::engine;
//!
//! let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx");
//! let target = onnx_safeify::rules::load_target("rx580")?;
//! let opts = engine::Options::default();
//!
//! let mut doc = onnx_safeify::load(&model)?;
//! let findings = engine::check(&mut doc.model, &target, &opts);
//! assert!(findings.iter().any(|f| f.rule == "split-depthwise" && f.op == "Conv"));
//! // As `check --format json` prints them:
//! let json = onnx_safeify::report::findings_json(&target.name, "ocr_tiny.onnx", &findings);
//! assert!(json.contains("\"findings\""));
//!
//! engine::compile(&mut doc.model, &target, &opts);
//! assert!(engine::check(&mut doc.model, &target, &opts).is_empty());
//! # Ok::<(), onnx_safeify::Error>(())
//! ```
//!
//! # A target of your own
//!
//! Targets are data: [`rules::parse_target_str`] checks a YAML text (errors carry
//! `file:line:col`), [`rules::load_target`] reads a file, and
//! [`rules::load_target_with_rules`] layers `--rules` files on top. The rule language is
//! described in [`rules`].
//!
//! ```
//! use std::path::Path;
//! use onnx_safeify::engine;
//!
//! let yaml = r#"
//! target: my-gpu
//! extends: directml
//! rules:
//!   - id: no-big-resize
//!     why: example - keep every Resize on the CPU
//!     evidence: []
//!     match: {op: Resize}
//!     action: cpu
//! "#;
//! let target = onnx_safeify::rules::parse_target_str("my-gpu.yaml", yaml)
//!     .map_err(|e| e.to_string())?;
//! assert_eq!(target.chain, ["builtin:directml.yaml", "my-gpu.yaml"]);
//!
//! let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx");
//! let mut doc = onnx_safeify::load(&model)?;
//! let report = engine::compile(&mut doc.model, &target, &engine::Options::default());
//! // The four Resize nodes carry `layer_ann=safeify_cpu` now.
//! assert_eq!(report.pinned.len(), 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Errors
//!
//! Every fallible function returns [`Result`]: an [`Error`] with an [`ErrorKind`], the file it
//! concerns, and a one-line message naming the graph, node and attribute where that applies.
//!
//! ```
//! let err = onnx_safeify::load(std::path::Path::new("no/such/model.onnx")).unwrap_err();
//! assert_eq!(err.kind, onnx_safeify::ErrorKind::Io);
//! ```

// The command's printing: `println!` and `eprintln!` panic when the stream is closed
// (`onnx-safeify ... 2>&1 | head -1`), which turned the exit code into 101. These write the
// same text and take a closed stream as the end of output; the exit code stays the command's.

/// `println!` that ignores a closed stdout.
#[macro_export]
#[doc(hidden)]
macro_rules! outln {
    () => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stdout());
    }};
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stdout(), $($t)*);
    }};
}

/// `print!` that ignores a closed stdout.
#[macro_export]
#[doc(hidden)]
macro_rules! outp {
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::write!(::std::io::stdout(), $($t)*);
    }};
}

/// `eprintln!` that ignores a closed stderr.
#[macro_export]
#[doc(hidden)]
macro_rules! errln {
    () => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr());
    }};
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($t)*);
    }};
}

/// `eprint!` that ignores a closed stderr.
#[macro_export]
#[doc(hidden)]
macro_rules! errp {
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::write!(::std::io::stderr(), $($t)*);
    }};
}

pub mod analysis;
pub mod bisect;
pub mod cli;
pub mod compile;
pub mod cost;
pub mod doctor;
pub mod engine;
pub mod error;
pub mod export;
pub mod genai;
pub mod import;
pub mod infer;
pub mod inspect;
pub mod io;
pub mod ir;
pub mod nchwc_probe;
pub mod partition;
pub mod probe;
pub mod report;
pub mod rewrite;
pub mod rules;
pub mod runtime;
pub mod tensor;
pub mod timing;
pub mod verify;

#[cfg(feature = "python")]
mod python;

/// The generated protobuf types of `proto/onnx.proto` (package `onnx`).
#[allow(clippy::all, missing_docs)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

pub use error::{Error, ErrorKind, Result};
pub use ir::Model;

use std::path::Path;

/// A model read from disk: the IR plus what is needed to save it again (the memory map its
/// payloads point into, and the resolver for its external data).
#[derive(Debug)]
pub struct Document {
    pub model: Model,
    pub source: io::LoadedModel,
    /// How a save gets the external data the output keeps unchanged (default: shared with
    /// the input; see [`io::save::Weights`]).
    pub weights: io::save::Weights,
}

/// The bytes of tensor data a model carries inline (every graph's initializers, not external
/// data): what a compile that adds weights grows.
pub fn inline_bytes(model: &Model) -> u64 {
    ir::scope::graphs(&model.graph)
        .iter()
        .map(|sg| {
            sg.graph
                .initializers
                .iter()
                .map(|i| i.tensor.inline_len())
                .sum::<u64>()
        })
        .sum()
}

/// The size of a document's input: its model file and every external data file its tensors
/// refer to (each counted once).
pub fn input_size(doc: &Document) -> u64 {
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for sg in ir::scope::graphs(&doc.model.graph) {
        for i in &sg.graph.initializers {
            let t = i.tensor.rest();
            if !io::external::is_external(t) {
                continue;
            }
            let Ok(r) = io::external::external_ref(t) else {
                continue;
            };
            if let Ok(p) = doc.source.external.resolve(&r.location) {
                if !files.contains(&p) {
                    files.push(p);
                }
            }
        }
    }
    std::iter::once(doc.source.path.clone())
        .chain(files)
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

/// Load and import a model file.
pub fn load(path: &Path) -> Result<Document> {
    let (mut source, encoded) = io::load::load_model_split(path)?;
    let proto = std::mem::take(&mut source.proto);
    let model = import::import_model_split(proto, &encoded, Some(&source.external))
        .map_err(|e| e.in_file(path))?;
    // The nodes and initializers were not decoded when `external_used` was worked out: their
    // tensors count too.
    source.external_used |= !encoded.is_empty() && io::save::graph_has_external(&model.graph);
    // The decoded messages and the reading thread's lists are freed by now.
    freed();
    Ok(Document {
        model,
        source,
        weights: Default::default(),
    })
}

/// Called by [`freed`] (see [`on_freed`]).
static FREED: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Have `hook` called when a step has just freed much of what it made: a model read (its
/// decoded messages, and the lists a reading thread made and this one freed). The
/// `onnx-safeify` binary has its allocator hand the free pages back to the system there:
/// pages another thread's frees left empty are otherwise kept until that thread's heap is
/// taken over (the deep 1.3 GB model of the bench: 9 MiB). Only the first hook given is kept.
pub fn on_freed(hook: fn()) {
    let _ = FREED.set(hook);
}

/// Run the hook of [`on_freed`], if any.
fn freed() {
    if let Some(hook) = FREED.get() {
        hook();
    }
}

/// Load and import a model held in memory. `name` labels it in messages, and its folder is
/// where external data, if the model has any, is looked for (`Path::new("model.onnx")`: the
/// current folder). Nothing is memory-mapped, so [`save`] writes every payload from memory.
pub fn load_bytes(bytes: impl Into<bytes::Bytes>, name: &Path) -> Result<Document> {
    let data: bytes::Bytes = bytes.into();
    let proto = io::load::decode_model(data.clone()).map_err(|e| e.in_file(name))?;
    let external = io::ExternalData::new(name).map_err(|e| e.in_file(name))?;
    let external_used = io::save::has_external(&proto);
    let model = import::import_model(proto, Some(&external)).map_err(|e| e.in_file(name))?;
    let source = io::LoadedModel {
        path: name.to_path_buf(),
        // No file backs these payloads: an empty map makes `save` copy none from `name`.
        bytes: bytes::Bytes::new(),
        proto: Default::default(),
        external,
        external_used,
        original: data,
        unknown: Default::default(),
    };
    Ok(Document {
        model,
        source,
        weights: Default::default(),
    })
}

/// Export and save a model next to (never over) its source. Fields the schema does not define
/// are written back where their messages still are; an error names those that would be
/// dropped, and nothing is written then.
pub fn save(doc: &Document, out: &Path) -> Result<io::SaveSummary> {
    save_with(doc, out, None)
}

/// [`save`], given an early output file in the output's folder ([`io::EarlyCopy`], started
/// when the model was read): when it is a copy of the input and the output is the input's
/// bytes, that copy becomes the output; otherwise the output is written over it.
pub fn save_with(
    doc: &Document,
    out: &Path,
    early: Option<io::EarlyCopy>,
) -> Result<io::SaveSummary> {
    let unknown = doc.source.unknown()?;
    let opts = io::SaveOptions {
        protect: vec![doc.source.path.clone()],
        carry: (!unknown.is_empty()).then_some(unknown),
        weights: doc.weights,
    };
    let sources = vec![io::save::Source::new(
        doc.source.bytes.clone(),
        doc.source.path.clone(),
    )];
    let original = &doc.source.original;
    if opts.carry.is_none() && !doc.source.external_used {
        // The common case: the nodes and initializers are exported as they are written.
        let src = export::Streamed::new(&doc.model);
        let early = match early {
            Some(e)
                if e.is_copy() && !original.is_empty() && io::save::encodes_as(&src, original) =>
            {
                return match use_early_copy(e, out, &opts, original.len() as u64)? {
                    Some(s) => Ok(s),
                    None => io::save::save_streamed(&src, out, sources, &opts),
                };
            }
            e => e,
        };
        // Otherwise the output is written over the early file (its pages are there already).
        return io::save::save_streamed_over(&src, out, sources, &opts, early);
    }
    let proto = export::export_model(&doc.model);
    if unchanged_with_unknown_fields(doc, &proto)? {
        if let Some(early) = early.filter(io::EarlyCopy::is_copy) {
            if let Some(s) = use_early_copy(early, out, &opts, original.len() as u64)? {
                return Ok(s);
            }
        }
        return io::save::save_verbatim(original, out, sources, &opts);
    }
    // The early file is not written over here: stop its thread before the writes start.
    drop(early);
    io::save_model(proto, out, Some(&doc.source.external), sources, &opts)
}

/// The output is the input's `len` bytes: the early copy becomes it (`None` when the copy is
/// not whole; the caller writes the output itself).
fn use_early_copy(
    early: io::EarlyCopy,
    out: &Path,
    opts: &io::SaveOptions,
    len: u64,
) -> Result<Option<io::SaveSummary>> {
    io::save::check_output_path(out, opts)?;
    Ok(early
        .finish(len, out)?
        .then(|| io::SaveSummary::one_file(out, len)))
}

/// Does `proto`, the export of `doc`, hold exactly what its input held, which has fields the
/// schema does not define and no external data? Then the input's bytes are the output's.
pub(crate) fn unchanged_with_unknown_fields(
    doc: &Document,
    proto: &proto::ModelProto,
) -> Result<bool> {
    if doc.source.unknown()?.is_empty()
        || doc.source.original.is_empty()
        || io::save::has_external(proto)
    {
        return Ok(false);
    }
    let input = io::load::decode_model(doc.source.original.clone())
        .map_err(|e| e.in_file(&doc.source.path))?;
    Ok(*proto == input)
}
