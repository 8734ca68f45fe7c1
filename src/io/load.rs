//! Reading a model: memory-map the file and decode it without copying tensor payloads
//! (`raw_data` fields are slices of the map).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use prost::Message;

use crate::error::{Error, ErrorKind, Result};
use crate::io::external::{map_file, ExternalData};
use crate::io::unknown::{scan, Carry};
use crate::proto::{ModelProto, NodeProto, TensorProto};

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
    /// The fields the schema does not define, and where they lie (see [`UnknownScan`]).
    pub unknown: UnknownScan,
}

/// The scan of the input for fields the schema does not define ([`scan`]): only writing needs
/// it, so it runs on first use ([`LoadedModel::unknown`]), or on another thread from when the
/// model is read ([`UnknownScan::start`]), while the model is imported and rewritten.
#[derive(Debug, Default)]
pub struct UnknownScan {
    done: OnceLock<Result<Arc<Carry>>>,
    running: std::sync::Mutex<Option<std::thread::JoinHandle<Result<Carry>>>>,
}

impl UnknownScan {
    /// Scan `bytes` on a thread of its own, unless the scan ran or runs already (on first use
    /// instead, if no thread can be made).
    pub fn start(&self, bytes: Bytes) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if self.done.get().is_some() || running.is_some() {
            return;
        }
        *running = std::thread::Builder::new()
            .name("unknown-fields".into())
            .spawn(move || scan(&bytes))
            .ok();
    }
}

impl LoadedModel {
    /// The fields of the input that the schema does not define (scanned once).
    pub fn unknown(&self) -> Result<Arc<Carry>> {
        let u = &self.unknown;
        u.done
            .get_or_init(|| {
                let running = u.running.lock().unwrap_or_else(|e| e.into_inner()).take();
                // (A scan that panicked is run again here, where the panic is reported.)
                let found = running.and_then(|h| h.join().ok());
                found
                    .unwrap_or_else(|| scan(&self.original))
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
    m.merge(bytes.clone())
        .map(|_| m)
        .map_err(|e| model_decode_error(e, &bytes))
}

/// The error for bytes the protobuf decoder refuses.
pub(crate) fn decode_error(e: prost::DecodeError) -> Error {
    Error::new(
        ErrorKind::Decode,
        format!("not a valid ONNX model (protobuf decode failed: {e})"),
    )
}

/// The error for a whole model's bytes the decoder refuses: a file whose last field runs past
/// its end is said to end early (truncated, or still being written), with its size.
fn model_decode_error(e: prost::DecodeError, bytes: &[u8]) -> Error {
    if ends_early(bytes) {
        return Error::new(ErrorKind::Decode, truncated_message(bytes.len() as u64));
    }
    decode_error(e)
}

/// What is said of a model file that [`ends_early`].
pub fn truncated_message(len: u64) -> String {
    format!(
        "not a valid ONNX model: the file ends early (its last field runs past the end of its \
         {len} bytes): a truncated copy or download, or a file still being written"
    )
}

/// Whether `bytes` are a ModelProto's top-level fields, well formed (each a field the format
/// defines, with its wire type) up to the end of the bytes, where the last one needs more than
/// there is, after at least one complete field: what a truncated file looks like (random or
/// corrupt bytes break that structure first).
pub fn ends_early(bytes: &[u8]) -> bool {
    /// ModelProto's fields: ir_version and model_version are varints, the rest messages,
    /// strings or repeated messages (length-delimited).
    fn wire_type_of(field: u64) -> Option<u64> {
        match field {
            1 | 5 => Some(0),
            2 | 3 | 4 | 6 | 7 | 8 | 14 | 20 | 25 | 26 => Some(2),
            _ => None,
        }
    }
    fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *b.get(*at)?;
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        Some(v)
    }
    let mut at = 0usize;
    let mut complete = 0usize;
    while at < bytes.len() {
        let Some(key) = varint(bytes, &mut at) else {
            return complete > 0;
        };
        if wire_type_of(key >> 3) != Some(key & 7) {
            return false;
        }
        let need = match key & 7 {
            0 => match varint(bytes, &mut at) {
                Some(_) => 0,
                None => return complete > 0,
            },
            _ => match varint(bytes, &mut at) {
                Some(n) => n,
                None => return complete > 0,
            },
        };
        match at.checked_add(usize::try_from(need).unwrap_or(usize::MAX)) {
            Some(end) if end <= bytes.len() => at = end,
            _ => return complete > 0,
        }
        complete += 1;
    }
    false
}

/// The main graph's nodes and initializers as [`decode_model_split`] leaves them: each message
/// a slice of the file, in file order, decoded by the importer when it reaches it
/// ([`crate::import::import_model_split`]).
#[derive(Debug, Clone, Default)]
pub struct Encoded {
    /// The nodes (the graph's field 1), after those of the decoded graph.
    pub nodes: Vec<Bytes>,
    /// The initializers (field 5), after those of the decoded graph.
    pub initializers: Vec<Bytes>,
}

impl Encoded {
    /// Nothing was left encoded.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.initializers.is_empty()
    }
}

/// Decode a model, leaving its main graph's nodes and initializers encoded ([`Encoded`]).
/// Decoded all at once, the nodes of a graph of 50,000 were 12 MB of messages held beside the
/// IR being built from them, and 25,000 initializers 8.6 MB. The rest of the model is decoded
/// as by [`decode_model`] (protobuf decodes a message's fields in any split the same as in one
/// piece); bytes that the wire walk finds malformed are left to it, to say how.
pub fn decode_model_split(bytes: Bytes) -> Result<(ModelProto, Encoded)> {
    let plan = match crate::io::unknown::split_plan(&bytes) {
        Some(plan) if !bytes.is_empty() => plan,
        _ => return decode_model(bytes).map(|m| (m, Encoded::default())),
    };
    let mut m = ModelProto::default();
    for r in plan.model {
        m.merge(bytes.slice(r)).map_err(decode_error)?;
    }
    if plan.has_graph {
        let mut g = crate::proto::GraphProto::default();
        for r in plan.graph {
            g.merge(bytes.slice(r)).map_err(decode_error)?;
        }
        m.graph = Some(g);
    }
    let slices = |ranges: Vec<std::ops::Range<usize>>| -> Vec<Bytes> {
        ranges.into_iter().map(|r| bytes.slice(r)).collect()
    };
    let encoded = Encoded {
        nodes: slices(plan.nodes),
        initializers: slices(plan.initializers),
    };
    Ok((m, encoded))
}

/// Memory-map `path` and decode it. Payloads stay in the map.
pub fn load_model(path: &Path) -> Result<LoadedModel> {
    let (mut loaded, encoded) = load_model_split(path)?;
    if !encoded.is_empty() {
        let g = loaded.proto.graph.get_or_insert_with(Default::default);
        let error = |e| decode_error(e).in_file(path);
        g.initializer.reserve_exact(encoded.initializers.len());
        for b in encoded.initializers {
            g.initializer.push(TensorProto::decode(b).map_err(error)?);
        }
        g.node.reserve_exact(encoded.nodes.len());
        for b in encoded.nodes {
            g.node.push(NodeProto::decode(b).map_err(error)?);
        }
        loaded.external_used = crate::io::save::has_external(&loaded.proto);
    }
    Ok(loaded)
}

/// [`load_model`], with the main graph's nodes and initializers left encoded
/// ([`decode_model_split`]): `proto` lacks them, and [`LoadedModel::external_used`] does not
/// account for their tensors.
pub fn load_model_split(path: &Path) -> Result<(LoadedModel, Encoded)> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, "cannot read model", e))?;
    if meta.is_dir() {
        return Err(Error::new(ErrorKind::Io, "is a folder, not a model file").in_file(path));
    }
    let bytes = map_file(path)?;
    let (proto, encoded) = decode_model_split(bytes.clone())
        .map_err(|e| {
            // (A split decode refuses a cut field before `decode_model` sees it.)
            if e.kind == ErrorKind::Decode && ends_early(&bytes) {
                Error::new(ErrorKind::Decode, truncated_message(bytes.len() as u64))
            } else {
                e
            }
        })
        .map_err(|e| e.in_file(path))?;
    let external = ExternalData::new(path).map_err(|e| e.in_file(path))?;
    let loaded = LoadedModel {
        path: path.to_path_buf(),
        original: bytes.clone(),
        bytes,
        external_used: crate::io::save::has_external(&proto),
        proto,
        external,
        unknown: UnknownScan::default(),
    };
    Ok((loaded, encoded))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model with a field the schema does not define (number 99, a varint).
    fn with_unknown() -> Bytes {
        let mut b = ModelProto {
            ir_version: Some(8),
            graph: Some(Default::default()),
            ..Default::default()
        }
        .encode_to_vec();
        b.extend([0x98, 0x06, 0x05]); // key (99 << 3 | 0), value 5
        Bytes::from(b)
    }

    /// The scan on another thread finds what the scan on first use finds, once.
    #[test]
    fn the_background_scan_finds_what_the_scan_on_first_use_finds() {
        let bytes = with_unknown();
        let path = Path::new("m.onnx");
        let direct = crate::load_bytes(bytes.clone(), path).unwrap();
        let found = direct.source.unknown().unwrap().list();
        assert_eq!(found.len(), 1);
        let early = crate::load_bytes(bytes.clone(), path).unwrap();
        early.source.unknown.start(bytes.clone());
        early.source.unknown.start(bytes.clone()); // running already: no second thread
        assert_eq!(early.source.unknown().unwrap().list(), found);
        early.source.unknown.start(bytes); // done already: nothing to start
        assert!(early.source.unknown.running.lock().unwrap().is_none());
        assert_eq!(early.source.unknown().unwrap().list(), found);
    }
}
