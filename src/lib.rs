//! onnx-safeify: an offline ONNX graph-rewriting compiler that makes models safe for GPUs and
//! drivers with known hazards.
//!
//! The pipeline, one module per stage: [`io::load`] (memory map, zero-copy decode) →
//! [`import`] (protobuf → IR, validation) → [`ir`] (the graph) → [`export`] (IR → protobuf)
//! → [`io::save`] (streamed, atomic write).

pub mod doctor;
pub mod engine;
pub mod error;
pub mod export;
pub mod import;
pub mod infer;
pub mod inspect;
pub mod io;
pub mod ir;
pub mod partition;
pub mod report;
pub mod rewrite;
pub mod rules;
pub mod tensor;
pub mod verify;

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
}

/// Load and import a model file.
pub fn load(path: &Path) -> Result<Document> {
    let mut source = io::load_model(path)?;
    let proto = std::mem::take(&mut source.proto);
    let model = import::import_model(proto, Some(&source.external)).map_err(|e| e.in_file(path))?;
    Ok(Document { model, source })
}

/// Export and save a model next to (never over) its source.
pub fn save(doc: &Document, out: &Path) -> Result<io::SaveSummary> {
    let proto = export::export_model(&doc.model);
    let opts = io::SaveOptions {
        protect: vec![doc.source.path.clone()],
    };
    let sources = vec![io::save::Source::new(
        doc.source.bytes.clone(),
        doc.source.path.clone(),
    )];
    io::save_model(proto, out, Some(&doc.source.external), sources, &opts)
}
