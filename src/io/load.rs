//! Reading a model: memory-map the file and decode it without copying tensor payloads
//! (`raw_data` fields are slices of the map).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use prost::Message;

use crate::error::{Error, ErrorKind, Result};
use crate::io::external::{map_file, ExternalData};
use crate::io::unknown::{scan, Carry};
use crate::proto::ModelProto;

/// A decoded model that still owns the memory map its payloads point into.
#[derive(Debug)]
pub struct LoadedModel {
    pub path: PathBuf,
    /// The whole file, memory-mapped.
    pub bytes: Bytes,
    pub proto: ModelProto,
    /// Resolver for external data, confined to the model's folder.
    pub external: ExternalData,
    /// Whether any tensor of the model as read keeps its data in an external file (rewrites
    /// never make one: without, the output has none either).
    pub external_used: bool,
    /// The model file's bytes as read (mapped, or in memory for a model given as bytes).
    pub original: Bytes,
    /// The fields the schema does not define, and where they lie: scanned on first use (by
    /// [`LoadedModel::unknown`]), since only writing needs them.
    pub unknown: OnceLock<Result<Arc<Carry>>>,
}

impl LoadedModel {
    /// The fields of the input that the schema does not define (scanned once, on first use).
    pub fn unknown(&self) -> Result<Arc<Carry>> {
        self.unknown
            .get_or_init(|| {
                scan(&self.original)
                    .map(Arc::new)
                    .map_err(|e| e.in_file(&self.path))
            })
            .clone()
    }

    /// Does this slice point into the input file's map (i.e. it was not copied)?
    pub fn is_in_map(&self, b: &[u8]) -> bool {
        let base = self.bytes.as_ptr() as usize;
        let p = b.as_ptr() as usize;
        p >= base && p + b.len() <= base + self.bytes.len()
    }
}

/// Decode ONNX protobuf bytes; errors say what is wrong, never panic.
pub fn decode_model(bytes: Bytes) -> Result<ModelProto> {
    if bytes.is_empty() {
        return Err(Error::new(
            ErrorKind::Decode,
            "the file is empty, not an ONNX model",
        ));
    }
    // prost grows repeated fields one element at a time; a graph of 50,000 nodes then copies
    // its node vector a dozen times over (most of a `check`'s time went to that). Counted first,
    // the vectors are allocated once (a failed allocation just leaves them to grow).
    let mut m = ModelProto::default();
    if let Some((nodes, inits)) = crate::io::unknown::graph_counts(&bytes) {
        if nodes + inits > 0 {
            let mut g = crate::proto::GraphProto::default();
            let _ = g.node.try_reserve_exact(nodes);
            let _ = g.initializer.try_reserve_exact(inits);
            m.graph = Some(g);
        }
    }
    m.merge(bytes).map(|_| m).map_err(|e| {
        Error::new(
            ErrorKind::Decode,
            format!("not a valid ONNX model (protobuf decode failed: {e})"),
        )
    })
}

/// Memory-map `path` and decode it. Payloads stay in the map.
pub fn load_model(path: &Path) -> Result<LoadedModel> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "cannot read model", e))?;
    if meta.is_dir() {
        return Err(Error::new(ErrorKind::Io, "is a folder, not a model file").in_file(path));
    }
    let bytes = map_file(path)?;
    let proto = decode_model(bytes.clone()).map_err(|e| e.in_file(path))?;
    let external = ExternalData::new(path).map_err(|e| e.in_file(path))?;
    Ok(LoadedModel {
        path: path.to_path_buf(),
        original: bytes.clone(),
        bytes,
        external_used: crate::io::save::has_external(&proto),
        proto,
        external,
        unknown: OnceLock::new(),
    })
}
