//! Writing a model: streamed field by field (large tensor payloads go straight from the memory
//! map to the file, never through a buffer the size of the model), into a temporary file in the
//! output's folder that is renamed into place only when everything was written. The bytes are
//! exactly those of prost's `encode` of the same message.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;

use crate::error::{Error, ErrorKind, Result};
use crate::io::computed;
use crate::io::external::{external_ref, is_external, ExternalData};
use crate::io::unknown::{dropped_error, varint_len, Carry, Found, Msg, Part};
use crate::ir::TensorView;
use crate::proto::{GraphProto, ModelProto, StringStringEntryProto, TensorProto};

/// Payloads at least this big are written straight from their source, not via the encoder.
const STREAM_THRESHOLD: usize = 64 * 1024;
/// External data offsets are aligned to this (page size), so the data file can be mapped.
const EXTERNAL_ALIGN: u64 = 4096;

/// How to save.
#[derive(Debug, Default, Clone)]
pub struct SaveOptions {
    /// Files that must never be overwritten (the inputs).
    pub protect: Vec<PathBuf>,
    /// Fields the schema does not define, scanned from the input, to write back where their
    /// messages still are (see [`crate::io::unknown`]). Saving fails, before anything is
    /// written, when some would be dropped.
    pub carry: Option<std::sync::Arc<Carry>>,
    /// How external data the output keeps unchanged reaches it (see [`Weights`]).
    pub weights: Weights,
}

/// How the output gets the external data it keeps unchanged from the input. Only tensors a
/// rewrite left as they were are still external in the output (new and changed tensors are
/// written inline), so their bytes are exactly the input's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Weights {
    /// The default. In the input's folder the output refers to the input's data files as they
    /// are (same locations, offsets and lengths; nothing written: the two models share the
    /// files, as an onnxruntime-genai folder's models do). In another folder each file is
    /// cloned (a reflink, where the file system has them) or else copied whole, under the
    /// same name, so the output's references stay the input's.
    #[default]
    Share,
    /// Like `Share`, but a file placed in another folder is a hard link where possible (no
    /// byte written; an edit in place of one file changes the other, and Python's `onnx.load`
    /// refuses a data file with more than one link, the input's too: why it is not the
    /// default).
    Link,
    /// One fresh data file beside the output (`<output file name>.data`), holding exactly the
    /// tensors the output keeps.
    Copy,
}

impl Weights {
    pub const ALL: &'static [(&'static str, Weights)] = &[
        ("share", Weights::Share),
        ("link", Weights::Link),
        ("copy", Weights::Copy),
    ];
}

/// What was written.
#[derive(Debug, Clone)]
pub struct SaveSummary {
    pub path: PathBuf,
    pub bytes: u64,
    /// The external data file written beside the model, if any.
    pub external_file: Option<PathBuf>,
    pub external_bytes: u64,
    /// Data files the output refers to that it shares with the input (nothing written), or
    /// that were placed beside it by a reflink, a hard link or a copy (with how).
    pub shared: Vec<(PathBuf, Placed)>,
}

/// How a shared data file reached the output's folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    /// The input's own file, in the output's folder already: nothing written.
    Same,
    /// A copy-on-write clone (FICLONE): no byte written, the files independent.
    Reflink,
    /// A hard link (`--weights link`): no byte written, one file under two names.
    HardLink,
    /// A copy of the whole file.
    Copy,
}

impl Placed {
    pub fn as_str(self) -> &'static str {
        match self {
            Placed::Same => "shared with the input",
            Placed::Reflink => "reflinked",
            Placed::HardLink => "hard-linked",
            Placed::Copy => "copied",
        }
    }
}

impl SaveSummary {
    /// A model written to `path` as one file of `bytes` bytes (no external data).
    pub fn one_file(path: &Path, bytes: u64) -> Self {
        SaveSummary {
            path: path.to_path_buf(),
            bytes,
            external_file: None,
            external_bytes: 0,
            shared: Vec::new(),
        }
    }
}

/// Is `a` the same file as `b` (or would writing `a` replace `b`)?
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

pub(crate) struct TempFile {
    path: PathBuf,
    keep: bool,
}

impl TempFile {
    pub(crate) fn create(final_path: &Path) -> Result<(Self, File)> {
        let dir = final_path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = final_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model.onnx".into());
        let pid = std::process::id();
        for attempt in 0..1000u32 {
            let path = dir.join(format!(".{name}.tmp-{pid}-{attempt}"));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(f) => return Ok((TempFile { path, keep: false }, f)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::io(final_path, "cannot create output", e)),
            }
        }
        Err(Error::new(ErrorKind::Io, "cannot find a free temporary file name").in_file(final_path))
    }
    pub(crate) fn persist(mut self, to: &Path) -> Result<()> {
        std::fs::rename(&self.path, to)
            .map_err(|e| Error::io(to, "cannot move output into place", e))?;
        self.keep = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Visit every tensor of a model that could hold external data (initializers, sparse
/// initializers and attribute tensors of all graphs, training graphs included).
fn for_each_tensor_mut(
    m: &mut ModelProto,
    f: &mut dyn FnMut(&mut TensorProto) -> Result<()>,
) -> Result<()> {
    fn graph(g: &mut GraphProto, f: &mut dyn FnMut(&mut TensorProto) -> Result<()>) -> Result<()> {
        for t in &mut g.initializer {
            f(t)?;
        }
        for s in &mut g.sparse_initializer {
            for t in s.values.iter_mut().chain(s.indices.iter_mut()) {
                f(t)?;
            }
        }
        for n in &mut g.node {
            for a in &mut n.attribute {
                for t in a.t.as_deref_mut().into_iter().chain(a.tensors.iter_mut()) {
                    f(t)?;
                }
                if let Some(sg) = a.g.as_mut() {
                    graph(sg, f)?;
                }
                for sg in &mut a.graphs {
                    graph(sg, f)?;
                }
            }
        }
        Ok(())
    }
    if let Some(g) = m.graph.as_mut() {
        graph(g, f)?;
    }
    for ti in &mut m.training_info {
        for g in ti.initialization.iter_mut().chain(ti.algorithm.iter_mut()) {
            graph(g, f)?;
        }
    }
    Ok(())
}

/// Does any tensor of the model keep its data in an external file?
pub fn has_external(m: &ModelProto) -> bool {
    // The tensors `for_each_tensor_mut` visits, read only.
    fn graph(g: &GraphProto) -> bool {
        g.initializer.iter().any(is_external)
            || g.sparse_initializer
                .iter()
                .any(|s| s.values.iter().chain(s.indices.iter()).any(is_external))
            || g.node.iter().flat_map(|n| &n.attribute).any(|a| {
                a.t.as_deref()
                    .into_iter()
                    .chain(a.tensors.iter())
                    .any(is_external)
                    || a.g.as_deref().is_some_and(graph)
                    || a.graphs.iter().any(graph)
            })
    }
    m.graph.as_ref().is_some_and(graph)
        || m.training_info
            .iter()
            .flat_map(|ti| ti.initialization.iter().chain(ti.algorithm.iter()))
            .any(graph)
}

/// Does any tensor of an imported graph (initializers, attribute tensors, bodies at any
/// depth) keep its data in an external file?
pub fn graph_has_external(g: &crate::ir::Graph) -> bool {
    g.initializers.iter().any(|i| is_external(i.tensor.rest()))
        || g.sparse_initializers.iter().any(|s| {
            let t = &s.tensor;
            t.values.iter().chain(t.indices.iter()).any(is_external)
        })
        || g.nodes.node_weights().flat_map(|n| &n.attributes).any(|a| {
            a.t().into_iter().chain(a.tensors().iter()).any(is_external)
                || a.g().is_some_and(graph_has_external)
                || a.graphs().iter().any(graph_has_external)
        })
}

/// The output may be neither one of the protected inputs nor a folder.
pub(crate) fn check_output_path(out: &Path, opts: &SaveOptions) -> Result<()> {
    for p in &opts.protect {
        if same_file(out, p) {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("refusing to overwrite the input {}", p.display()),
            )
            .in_file(out));
        }
    }
    if out.is_dir() {
        return Err(Error::new(ErrorKind::Usage, "output path is a folder").in_file(out));
    }
    Ok(())
}

/// Save a model to `out`. Tensors whose data is external are written, in model order, to one
/// data file beside the output named `<output file name>.data`, read from `external`.
/// `sources` are the mapped files payloads may be slices of (the input model), written from
/// their maps when they are.
pub fn save_model(
    mut proto: ModelProto,
    out: &Path,
    external: Option<&ExternalData>,
    sources: Vec<Source>,
    opts: &SaveOptions,
) -> Result<SaveSummary> {
    check_output_path(out, opts)?;
    if opts.weights != Weights::Copy {
        if let Some(ext) = external {
            if let Some(files) = shareable(&mut proto, ext)? {
                return save_sharing(proto, out, files, sources, opts);
            }
        }
    }

    // External data: gather payloads first so that any error happens before writing.
    let mut ext_payloads: Vec<(u64, Bytes)> = Vec::new();
    let mut ext_sources: Vec<PathBuf> = Vec::new();
    let data_name = format!(
        "{}.data",
        out.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model.onnx".into())
    );
    let data_path = out.with_file_name(&data_name);
    {
        let mut offset = 0u64;
        for_each_tensor_mut(&mut proto, &mut |t| {
            if !is_external(t) || computed::is_computed(t) {
                return Ok(());
            }
            let ext = external.ok_or_else(|| {
                Error::new(
                    ErrorKind::ExternalData,
                    format!(
                        "tensor '{}' uses external data but no source folder is known",
                        t.name.as_deref().unwrap_or("")
                    ),
                )
            })?;
            let r = external_ref(t)?;
            let source = ext.resolve(&r.location)?;
            if !ext_sources.contains(&source) {
                ext_sources.push(source);
            }
            let data = ext.read(&r)?;
            offset = offset.div_ceil(EXTERNAL_ALIGN) * EXTERNAL_ALIGN;
            let mut entries: Vec<StringStringEntryProto> =
                Vec::with_capacity(t.external_data.len());
            for e in &t.external_data {
                let v = match e.key.as_deref() {
                    Some("location") => Some(data_name.clone()),
                    Some("offset") => Some(offset.to_string()),
                    Some("length") => Some(data.len().to_string()),
                    _ => e.value.clone(),
                };
                entries.push(StringStringEntryProto {
                    key: e.key.clone(),
                    value: v,
                });
            }
            for (k, v) in [
                ("offset", offset.to_string()),
                ("length", data.len().to_string()),
            ] {
                if !entries.iter().any(|e| e.key.as_deref() == Some(k)) {
                    entries.push(StringStringEntryProto {
                        key: Some(k.to_string()),
                        value: Some(v),
                    });
                }
            }
            t.external_data = entries;
            let len = data.len() as u64;
            ext_payloads.push((offset, data));
            offset += len;
            Ok(())
        })
        .map_err(|e| e.in_file(out))?;
    }
    if !ext_payloads.is_empty() {
        for p in &opts.protect {
            if same_file(&data_path, p) {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!("refusing to overwrite {}", p.display()),
                )
                .in_file(&data_path));
            }
        }
        for src in &ext_sources {
            if same_file(&data_path, src) {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!(
                        "refusing to overwrite {}, which holds the input's external data",
                        src.display()
                    ),
                )
                .in_file(&data_path));
            }
        }
    }

    let plan = match &opts.carry {
        Some(c) => Plan::new(&proto, c).map_err(|e| e.in_file(out))?,
        None => Plan::default(),
    };

    let (data_tmp, external_bytes) = if ext_payloads.is_empty() {
        (None, 0)
    } else {
        let (tmp, file) = TempFile::create(&data_path)?;
        let ext_sources = external.map(|e| e.sources()).unwrap_or_default();
        let mut w = Sink::new(file, ext_sources);
        let mut pos = 0u64;
        let io = |e| Error::io(&data_path, "cannot write external data", e);
        let end = ext_payloads.last().map_or(0, |(o, d)| o + d.len() as u64);
        w.reserve(end).map_err(io)?;
        for (offset, data) in &ext_payloads {
            let pad = offset - pos;
            w.write_all(&vec![0u8; pad as usize]).map_err(io)?;
            w.write_payload(data).map_err(io)?;
            pos = offset + data.len() as u64;
        }
        w.finish().map_err(io)?;
        (Some(tmp), pos)
    };

    let (tmp, written) = write_temp(out, sources, |w| write_model_planned(w, &proto, &plan))?;
    if let Some(d) = data_tmp {
        d.persist(&data_path)?;
    }
    tmp.persist(out)?;
    Ok(SaveSummary {
        path: out.to_path_buf(),
        bytes: written,
        external_file: (external_bytes > 0).then_some(data_path),
        external_bytes,
        shared: Vec::new(),
    })
}

/// The input's data files the output's external tensors refer to (location as written, the
/// file), when every location is a plain relative path (names only, no `..`): the output
/// can then keep the references as they are. `None` when some location is not plain.
fn shareable(proto: &mut ModelProto, ext: &ExternalData) -> Result<Option<Vec<(String, PathBuf)>>> {
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    let mut plain = true;
    // (The visit changes nothing.)
    for_each_tensor_mut(proto, &mut |t| {
        if !is_external(t) || computed::is_computed(t) || !plain {
            return Ok(());
        }
        let r = external_ref(t)?;
        let normal = Path::new(&r.location)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !normal {
            plain = false;
            return Ok(());
        }
        let source = ext.resolve(&r.location)?;
        // The reference must be readable as written (offset and length inside the file).
        ext.read(&r)?;
        if !files.iter().any(|(l, _)| *l == r.location) {
            files.push((r.location, source));
        }
        Ok(())
    })?;
    Ok((plain && !files.is_empty()).then_some(files))
}

/// Save with the external references kept as they are ([`Weights::Share`], [`Weights::Link`]):
/// each data file is the input's own (the same folder) or placed beside the output under its
/// location, before the model is moved into place.
fn save_sharing(
    proto: ModelProto,
    out: &Path,
    files: Vec<(String, PathBuf)>,
    sources: Vec<Source>,
    opts: &SaveOptions,
) -> Result<SaveSummary> {
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut placed: Vec<(Option<TempFile>, PathBuf, Placed)> = Vec::new();
    for (location, source) in &files {
        let dest = dir.join(location);
        if same_file(&dest, source) {
            placed.push((None, dest, Placed::Same));
            continue;
        }
        for p in opts
            .protect
            .iter()
            .chain(std::iter::once(&out.to_path_buf()))
        {
            if same_file(&dest, p) {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!("refusing to overwrite {}", p.display()),
                )
                .in_file(&dest));
            }
        }
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::io(&dest, "cannot create the data file's folder", e))?;
        }
        let (tmp, how) = place_file(source, &dest, opts.weights == Weights::Link)?;
        placed.push((Some(tmp), dest, how));
    }
    let plan = match &opts.carry {
        Some(c) => Plan::new(&proto, c).map_err(|e| e.in_file(out))?,
        None => Plan::default(),
    };
    let (tmp, written) = write_temp(out, sources, |w| write_model_planned(w, &proto, &plan))?;
    let mut shared = Vec::with_capacity(placed.len());
    for (t, dest, how) in placed {
        if let Some(t) = t {
            t.persist(&dest)?;
        }
        shared.push((dest, how));
    }
    tmp.persist(out)?;
    Ok(SaveSummary {
        path: out.to_path_buf(),
        bytes: written,
        external_file: None,
        external_bytes: 0,
        shared,
    })
}

/// A temporary file beside `dest` with `source`'s bytes: a hard link (`link`), else a
/// reflink, else a copy.
fn place_file(source: &Path, dest: &Path, link: bool) -> Result<(TempFile, Placed)> {
    let io = |what: &'static str| move |e| Error::io(dest, what, e);
    if link {
        let (tmp, file) = TempFile::create(dest)?;
        drop(file);
        std::fs::remove_file(&tmp.path).map_err(io("cannot place the data file"))?;
        if std::fs::hard_link(source, &tmp.path).is_ok() {
            return Ok((tmp, Placed::HardLink));
        }
    }
    let (tmp, file) = TempFile::create(dest)?;
    let src = File::open(source).map_err(|e| Error::io(source, "cannot read external data", e))?;
    if reflink(&src, &file) {
        return Ok((tmp, Placed::Reflink));
    }
    let mut w = file;
    let mut r = src;
    std::io::copy(&mut r, &mut w).map_err(io("cannot copy the data file"))?;
    w.sync_data().ok();
    Ok((tmp, Placed::Copy))
}

/// Clone `src` into `dst` copy-on-write (Linux `FICLONE`); false where the file system has no
/// reflinks (ext4) or the files are on two file systems.
#[cfg(target_os = "linux")]
fn reflink(src: &File, dst: &File) -> bool {
    use std::os::fd::AsRawFd;
    // _IOW(0x94, 9, int)
    const FICLONE: libc::c_ulong = 0x4004_9409;
    // SAFETY: both descriptors are open files owned by the caller for the call's duration.
    unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE as _, src.as_raw_fd()) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn reflink(_src: &File, _dst: &File) -> bool {
    false
}

/// Write a model file beside `out` (not yet moved into place): returns it and its length. As
/// long as the output repeats the input model (`sources[0]`) from its first byte, it is written
/// from the input's map: an unchanged model is one write of the whole file.
fn write_temp(
    out: &Path,
    sources: Vec<Source>,
    write: impl FnOnce(&mut Sink) -> std::io::Result<()>,
) -> Result<(TempFile, u64)> {
    write_temp_over(out, sources, None, write)
}

/// [`write_temp`], over `started` (a temporary file beside `out` with bytes in it already,
/// written over from the start and cut to what is written) when given.
fn write_temp_over(
    out: &Path,
    sources: Vec<Source>,
    started: Option<(TempFile, File)>,
    write: impl FnOnce(&mut Sink) -> std::io::Result<()>,
) -> Result<(TempFile, u64)> {
    let (tmp, mut w) = match started {
        Some((tmp, file)) => {
            let w =
                Sink::over(file, sources).map_err(|e| Error::io(out, "cannot write output", e))?;
            (tmp, w)
        }
        None => {
            let (tmp, file) = TempFile::create(out)?;
            (tmp, Sink::new(file, sources))
        }
    };
    w.match_from_start(0);
    // Most of what is written comes from the first source: its pages are mapped from the start
    // while the nodes are encoded.
    w.read_ahead(0, 0);
    write(&mut w)
        .and_then(|_| w.finish())
        .map_err(|e| Error::io(out, "cannot write output", e))?;
    Ok((tmp, w.written()))
}

/// A model's message whose main graph's nodes and initializers are produced one at a time
/// (exported from the IR as they are written), so that the whole message is never held.
pub trait GraphSource {
    /// The model's message, its main graph without nodes and initializers.
    fn shell(&self) -> &ModelProto;
    /// The size of the main graph's nodes, each encoded as the graph's field 1 (key, length,
    /// message).
    fn nodes_len(&self) -> usize;
    /// The main graph's nodes, in order, each encoded as the graph's field 1, given to `put`
    /// in parts (the encoded nodes need not all be held at once). An error of `put` stops
    /// the encoding and is returned.
    fn write_nodes(&self, put: &mut dyn FnMut(&[u8]) -> std::io::Result<()>)
        -> std::io::Result<()>;
    /// The main graph's initializers, in order, each with the name it is written under (which
    /// replaces the tensor's own `name`).
    fn initializers(&self, each: &mut dyn FnMut(TensorView<'_>, &str));
}

/// Save a model given as a [`GraphSource`] that holds neither external data nor fields to
/// carry (the callers' condition; the bytes are those [`save_model`] writes for the whole
/// message).
pub fn save_streamed(
    src: &dyn GraphSource,
    out: &Path,
    sources: Vec<Source>,
    opts: &SaveOptions,
) -> Result<SaveSummary> {
    save_streamed_over(src, out, sources, opts, None)
}

/// [`save_streamed`], written over the file an [`EarlyCopy`](crate::io::EarlyCopy) started.
pub(crate) fn save_streamed_over(
    src: &dyn GraphSource,
    out: &Path,
    sources: Vec<Source>,
    opts: &SaveOptions,
    early: Option<crate::io::EarlyCopy>,
) -> Result<SaveSummary> {
    check_output_path(out, opts)?;
    let started = early.and_then(crate::io::EarlyCopy::into_file);
    let (tmp, written) = write_temp_over(out, sources, started, |w| write_model_streamed(w, src))?;
    tmp.persist(out)?;
    Ok(SaveSummary::one_file(out, written))
}

/// The encoding of `proto.encode_to_vec()` for the model of `src`: the nodes and initializers
/// are measured first (the graph's length prefix needs their size), then written, the nodes
/// as they are encoded, the initializers with their payloads.
fn write_model_streamed<W: PayloadWrite>(w: &mut W, src: &dyn GraphSource) -> std::io::Result<()> {
    let m = src.shell();
    let mut scratch = Vec::with_capacity(1 << 16);
    let (head, tail) = (model_head(m), model_tail(m));
    // The graph's nodes, encoded, and its length.
    let graph = m.graph.as_ref().map(|g| {
        let nodes_len = src.nodes_len();
        let mut inits = 0usize;
        src.initializers(&mut |t, name| {
            let l = named_len(t, Some(name));
            inits += prost::encoding::key_len(5) + varint_len(l as u64) + l;
        });
        (g, nodes_len + g.encoded_len() + inits)
    });
    let graph_field = graph.as_ref().map_or(0, |(_, len)| {
        prost::encoding::key_len(7) + varint_len(*len as u64) + len
    });
    w.reserve((head.encoded_len() + graph_field + tail.encoded_len()) as u64)?;
    put_message(w, &mut scratch, &head)?;
    if let Some((g, len)) = graph {
        put_len_key(w, 7, len)?;
        src.write_nodes(&mut |part| w.write_all(part))?;
        if let Some(name) = &g.name {
            scratch.clear();
            prost::encoding::string::encode(2, name, &mut scratch);
            w.write_all(&scratch)?;
        }
        let mut result = Ok(());
        src.initializers(&mut |t, name| {
            if result.is_ok() {
                result = put_len_key(w, 5, named_len(t, Some(name)))
                    .and_then(|_| write_tensor_as(w, &mut scratch, t, Some(name)));
            }
        });
        result?;
        put_message(w, &mut scratch, &graph_tail(g))?;
    }
    put_message(w, &mut scratch, &tail)
}

/// Would [`save_streamed`] write exactly `original` for `src`? The encoding stops at the first
/// byte that differs.
pub(crate) fn encodes_as(src: &dyn GraphSource, original: &[u8]) -> bool {
    let mut w = SameAs {
        expected: original,
        pos: 0,
        same: true,
    };
    write_model_streamed(&mut w, src).is_ok() && w.same && w.pos == original.len()
}

/// Save `bytes`, a whole model file as read (a slice of one of `sources` when it was mapped),
/// to `out`: the model came through unchanged. A mapped source is written from its map.
pub fn save_verbatim(
    bytes: &Bytes,
    out: &Path,
    sources: Vec<Source>,
    opts: &SaveOptions,
) -> Result<SaveSummary> {
    check_output_path(out, opts)?;
    let (tmp, written) = write_temp(out, sources, |w| {
        w.reserve(bytes.len() as u64)?;
        w.write_payload(bytes)
    })?;
    tmp.persist(out)?;
    Ok(SaveSummary::one_file(out, written))
}

/// A writer that can also take large payloads by reference, so that payloads that are slices
/// of a mapped source file are written straight from the map, never through a buffer.
pub trait PayloadWrite: Write {
    fn write_payload(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.write_all(b)
    }
    /// What is about to be written is `len` bytes in all: a file may set that space aside
    /// first. An error is one the writes would meet (no space left).
    fn reserve(&mut self, _len: u64) -> std::io::Result<()> {
        Ok(())
    }
}

impl PayloadWrite for Vec<u8> {}

/// A mapped file that payloads may be slices of.
pub struct Source {
    map: Bytes,
    path: PathBuf,
}

impl Source {
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn new(map: Bytes, path: PathBuf) -> Self {
        Source { map, path }
    }
}

/// Buffered file output that counts bytes and writes mapped payloads from the map.
///
/// A payload that is a slice of a source file opens a *pending range* of that file instead of
/// being written at once. Later bytes that equal the source's next bytes (an unchanged tensor
/// header, the next payload) extend the range, so each unchanged stretch of a model is one
/// range (written in pieces of [`WRITE_PIECE`]) rather than one write per tensor.
///
/// A range is written with `write` from the map, not copied file to file by the kernel
/// (`copy_file_range`): when a rewrite changed the nodes, the payloads move in the file by a
/// number of bytes that is not a multiple of the page size, and the kernel's file-to-file copy
/// then costs a fifth to a third more than `cp` (326 MB: 150 against 132 ms), while a write
/// from mapped pages costs what `cp` does or less (122 ms). The pages must be mapped already: a
/// write that meets an unmapped page falls back to faulting it in and copying again (170 ms).
/// So a thread maps the pages of a large source ahead of the writes ([`Ahead`]). The writes
/// are small ([`WRITE_PIECE`]).
pub struct Sink {
    w: BufWriter<File>,
    n: u64,
    sources: Vec<Source>,
    /// (source index, start, end) of source bytes still to be written.
    pending: Option<(usize, u64, u64)>,
    /// The thread that maps a large source's pages ahead of the writes (source index, thread).
    ahead: Option<(usize, Ahead)>,
    /// The length of the file's space set aside by [`PayloadWrite::reserve`] (0: none).
    reserved: u64,
}

/// A source at least this large has its pages mapped ahead of the writes by another thread
/// (smaller ones take a few faults).
const AHEAD_MIN: usize = 8 << 20;
/// Ranges are written in pieces of this size, each telling [`Ahead`] where the writes are.
/// Small: a write of a few MiB makes the page cache take the output in large folios, and on a
/// virtual machine those came slow and erratic (the 1.3 GB model, median of 14 runs: 0.43 s
/// with 256 KiB or 512 KiB writes, 0.48 s with 1 MiB, 0.85 s with 2 MiB, 1.2-1.3 s with 4 MiB,
/// the runs of the last from 0.35 to 2 s; a shifted file-to-file copy 0.58 s, `cp` 0.47 s).
pub(crate) const WRITE_PIECE: usize = 256 << 10;

impl Sink {
    pub fn new(file: File, sources: Vec<Source>) -> Self {
        Sink {
            w: BufWriter::with_capacity(1 << 20, file),
            n: 0,
            sources,
            pending: None,
            ahead: None,
            reserved: 0,
        }
    }
    pub fn written(&self) -> u64 {
        self.n
    }

    /// A sink writing `file` over from its first byte; [`Sink::finish`] cuts it to the length
    /// written.
    pub fn over(mut file: File, sources: Vec<Source>) -> std::io::Result<Self> {
        use std::io::Seek;
        let len = file.metadata()?.len();
        file.rewind()?;
        let mut w = Sink::new(file, sources);
        w.reserved = len;
        Ok(w)
    }

    /// Write out what is buffered, and end the file where the writes ended (a reservation
    /// larger than what was written leaves no bytes past it).
    pub fn finish(&mut self) -> std::io::Result<()> {
        self.flush()?;
        if self.reserved > self.n {
            self.w.get_ref().set_len(self.n)?;
        }
        Ok(())
    }

    /// Open a pending range at the start of source `i` (when nothing was written yet): output
    /// bytes that repeat that source from its first byte are then written from its map.
    pub fn match_from_start(&mut self, i: usize) {
        if self.n == 0
            && self.pending.is_none()
            && self.sources.get(i).is_some_and(|s| !s.map.is_empty())
        {
            self.pending = Some((i, 0, 0));
        }
    }

    /// Map the pages of source `i` from byte `from` on ahead of the writes, when it is large
    /// and no thread does so yet (one at a time: the one of another source stops first).
    pub fn read_ahead(&mut self, i: usize, from: usize) {
        let Some(src) = self.sources.get(i) else {
            return;
        };
        if src.map.len() >= AHEAD_MIN && self.ahead.as_ref().is_none_or(|(j, _)| *j != i) {
            self.ahead = None;
            self.ahead = Some((i, Ahead::start(src.map.clone(), from)));
        }
    }

    fn flush_pending(&mut self) -> std::io::Result<()> {
        let Some((i, start, end)) = self.pending.take() else {
            return Ok(());
        };
        if start == end {
            return Ok(());
        }
        // The bytes before the range go first.
        self.w.flush()?;
        let (start, end) = (start as usize, end as usize);
        self.read_ahead(i, start);
        let src = &self.sources[i];
        let mut at = start;
        while at < end {
            let to = end.min(at + WRITE_PIECE);
            if let Some((_, a)) = &self.ahead {
                a.writing_at(at);
            }
            // A page the source no longer has (the file shrank since it was mapped) fails the
            // write with EFAULT; the output is then removed, never renamed into place.
            self.w.get_mut().write_all(&src.map[at..to]).map_err(|e| {
                if e.raw_os_error() == Some(EFAULT) {
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("{} changed while it was being read", src.path.display()),
                    )
                } else {
                    e
                }
            })?;
            at = to;
        }
        Ok(())
    }
}

/// Files smaller than this are not allocated ahead ([`Sink::reserve`]): their writes take a few
/// milliseconds either way.
pub(crate) const RESERVE_MIN: u64 = 8 << 20;

/// Allocate `len` bytes of disk space for `file` from its start, growing it to that length.
/// `Ok(false)` when the filesystem (or the system) cannot: nothing changed. `Err` only for no
/// space left (or over quota), which the writes would meet too.
pub(crate) fn allocate(file: &File, len: u64) -> std::io::Result<bool> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let Ok(len) = libc::off_t::try_from(len) else {
            return Ok(false);
        };
        // SAFETY: `fallocate` only acts on the open file descriptor `file` holds; mode 0
        // allocates blocks (reading as zeros) and changes no byte already written.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => Err(e),
            _ => Ok(false),
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (file, len);
        Ok(false)
    }
}

#[cfg(unix)]
const EFAULT: i32 = libc::EFAULT;
#[cfg(not(unix))]
const EFAULT: i32 = 14;

/// A thread that maps the pages of a source into this process (`MADV_POPULATE_READ`, Linux
/// 5.14+) a little ahead of the writes from it, so that the writes find them mapped. It stays at
/// most [`Ahead::LEAD`] bytes ahead of the writes (a file larger than memory is not read
/// further ahead than that), and stops at the end of the source, when it is dropped, or at the
/// first refusal (an older kernel, a file that shrank: the writes then fault the pages in
/// themselves, as they would without it). Elsewhere than on Linux there is no thread.
struct Ahead {
    at: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Where the writes were when the thread was last woken: it is woken again once they have
    /// moved on by [`Ahead::PIECE`] (a wake of a parked thread is a system call; once per
    /// write was thousands of them on a 1.3 GB model).
    woken_at: std::cell::Cell<usize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ahead {
    const LEAD: usize = 64 << 20;
    const PIECE: usize = 4 << 20;

    /// Start mapping the pages of `map` from byte `from` on.
    fn start(map: Bytes, from: usize) -> Ahead {
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        use std::sync::Arc;
        let at = Arc::new(AtomicUsize::new(from));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = if cfg!(target_os = "linux") {
            let (at, stop) = (at.clone(), stop.clone());
            std::thread::Builder::new()
                .name("onnx-safeify-ahead".into())
                .spawn(move || Ahead::run(&map, from, &at, &stop))
                .ok()
        } else {
            None
        };
        Ahead {
            at,
            woken_at: std::cell::Cell::new(from),
            stop,
            thread,
        }
    }

    /// The writes are at byte `at` of the source.
    fn writing_at(&self, at: usize) {
        self.at.store(at, std::sync::atomic::Ordering::Relaxed);
        if at < self.woken_at.get().saturating_add(Self::PIECE) {
            return;
        }
        self.woken_at.set(at);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    #[cfg(target_os = "linux")]
    fn run(
        map: &[u8],
        from: usize,
        at: &std::sync::atomic::AtomicUsize,
        stop: &std::sync::atomic::AtomicBool,
    ) {
        use std::sync::atomic::Ordering::Relaxed;
        // SAFETY: `sysconf` only reads a constant of the system.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096);
        let base = map.as_ptr() as usize;
        let end = base + map.len();
        // From the start of the page that holds byte `from`: `map` is a slice of a mapping,
        // which holds every page the slice touches, whole.
        let mut addr = base + from.min(map.len());
        addr -= addr % page;
        while addr < end && !stop.load(Relaxed) {
            if addr.saturating_sub(base) > at.load(Relaxed).saturating_add(Self::LEAD) {
                std::thread::park_timeout(std::time::Duration::from_millis(5));
                continue;
            }
            let len = Self::PIECE.min(end - addr);
            // SAFETY: [addr, addr + len) lies in the pages of the mapping `map` is a slice of,
            // which `map` keeps alive; populating maps the file's pages into this process and
            // changes no memory.
            let r =
                unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_POPULATE_READ) };
            if r != 0 {
                break;
            }
            addr += len;
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn run(
        _: &[u8],
        _: usize,
        _: &std::sync::atomic::AtomicUsize,
        _: &std::sync::atomic::AtomicBool,
    ) {
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if let Some((i, start, end)) = self.pending {
            let map = &self.sources[i].map;
            let (e, l) = (end as usize, buf.len());
            if e + l <= map.len() && &map[e..e + l] == buf {
                self.pending = Some((i, start, end + l as u64));
                self.n += l as u64;
                return Ok(());
            }
            self.flush_pending()?;
        }
        self.w.write_all(buf)?;
        self.n += buf.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.flush_pending()?;
        self.w.flush()
    }
}

impl PayloadWrite for Sink {
    /// Allocate the file's blocks for `len` bytes before anything is written (Linux
    /// `fallocate`): the writes then fill space the file already has, instead of the filesystem
    /// reserving it page by page (on ext4, a 326 MB write took about 15 % less time). Only
    /// before the first write, for at least [`RESERVE_MIN`] bytes and more than the file has;
    /// a filesystem that cannot allocate ahead is written as before. Running out of space is
    /// reported now, before anything is written.
    fn reserve(&mut self, len: u64) -> std::io::Result<()> {
        if self.n > 0 || len < RESERVE_MIN || len <= self.reserved {
            return Ok(());
        }
        if allocate(self.w.get_ref(), len)? {
            self.reserved = len;
        }
        Ok(())
    }

    fn write_payload(&mut self, b: &[u8]) -> std::io::Result<()> {
        if b.len() < STREAM_THRESHOLD {
            return self.write_all(b);
        }
        let p = b.as_ptr() as usize;
        let found = self.sources.iter().position(|s| {
            let base = s.map.as_ptr() as usize;
            p >= base && p + b.len() <= base + s.map.len()
        });
        let Some(i) = found else {
            return self.write_all(b);
        };
        let offset = (p - self.sources[i].map.as_ptr() as usize) as u64;
        let len = b.len() as u64;
        match self.pending {
            Some((j, start, end)) if j == i && end == offset => {
                self.pending = Some((i, start, end + len));
            }
            _ => {
                self.flush_pending()?;
                self.pending = Some((i, offset, offset + len));
            }
        }
        self.n += len;
        Ok(())
    }
}

/// A writer that only compares what it is given with `expected`, from its first byte.
struct SameAs<'a> {
    expected: &'a [u8],
    pos: usize,
    same: bool,
}

impl Write for SameAs<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let end = self.pos + buf.len();
        if !self.same || self.expected.get(self.pos..end) != Some(buf) {
            self.same = false;
            // Stop the encoding: the answer is known.
            return Err(std::io::Error::other("differs"));
        }
        self.pos = end;
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl PayloadWrite for SameAs<'_> {
    fn write_payload(&mut self, b: &[u8]) -> std::io::Result<()> {
        // A payload that is the expected bytes' own slice at this place is equal as it stands.
        let here = self.expected.as_ptr() as usize + self.pos;
        if self.same && b.as_ptr() as usize == here && self.pos + b.len() <= self.expected.len() {
            self.pos += b.len();
            return Ok(());
        }
        self.write_all(b)
    }
}

fn put_len_key(w: &mut impl Write, tag: u32, len: usize) -> std::io::Result<()> {
    // A key (at most 5 bytes) and a length (at most 10), on the stack.
    let mut head = [0u8; 16];
    let mut rest = &mut head[..];
    encode_key(tag, WireType::LengthDelimited, &mut rest);
    encode_varint(len as u64, &mut rest);
    let n = 16 - rest.len();
    w.write_all(&head[..n])
}

fn put_message(w: &mut impl Write, scratch: &mut Vec<u8>, m: &impl Message) -> std::io::Result<()> {
    scratch.clear();
    m.encode_raw(scratch);
    w.write_all(scratch)
}

/// Stream the encoding of a model; the bytes equal `proto.encode_to_vec()`.
pub fn write_model<W: PayloadWrite>(c: &mut W, m: &ModelProto) -> std::io::Result<()> {
    write_model_planned(c, m, &Plan::default())
}

fn model_head(m: &ModelProto) -> ModelProto {
    ModelProto {
        ir_version: m.ir_version,
        producer_name: m.producer_name.clone(),
        producer_version: m.producer_version.clone(),
        domain: m.domain.clone(),
        model_version: m.model_version,
        doc_string: m.doc_string.clone(),
        ..Default::default()
    }
}

fn model_tail(m: &ModelProto) -> ModelProto {
    ModelProto {
        opset_import: m.opset_import.clone(),
        metadata_props: m.metadata_props.clone(),
        training_info: m.training_info.clone(),
        functions: m.functions.clone(),
        configuration: m.configuration.clone(),
        ..Default::default()
    }
}

fn graph_tail(g: &GraphProto) -> GraphProto {
    GraphProto {
        doc_string: g.doc_string.clone(),
        input: g.input.clone(),
        output: g.output.clone(),
        value_info: g.value_info.clone(),
        quantization_annotation: g.quantization_annotation.clone(),
        sparse_initializer: g.sparse_initializer.clone(),
        metadata_props: g.metadata_props.clone(),
        ..Default::default()
    }
}

/// Tags 1-8 of a tensor, which precede raw_data (9), as prost encodes them (in tag order), with
/// `name` in the name field: the message's encoding up to its payload, without a copy of it.
fn encode_tensor_head(t: TensorView<'_>, name: Option<&str>, buf: &mut Vec<u8>) {
    use prost::encoding::{bytes, float, int32, int64, message};
    let r = t.rest;
    int64::encode_repeated(1, t.dims, buf);
    if let Some(v) = &t.data_type {
        int32::encode(2, v, buf);
    }
    if let Some(v) = &r.segment {
        message::encode(3, v, buf);
    }
    float::encode_packed(4, &r.float_data, buf);
    int32::encode_packed(5, &r.int32_data, buf);
    bytes::encode_repeated(6, &r.string_data, buf);
    int64::encode_packed(7, &r.int64_data, buf);
    if let Some(v) = name {
        // What `string::encode` writes (it takes a `&String`).
        encode_key(8, WireType::LengthDelimited, buf);
        encode_varint(v.len() as u64, buf);
        buf.extend_from_slice(v.as_bytes());
    }
}

/// Tags 10.. of a tensor, which follow raw_data (9), as prost encodes them.
fn encode_tensor_tail(t: TensorView<'_>, buf: &mut Vec<u8>) {
    use prost::encoding::{double, int32, message, string, uint64};
    let r = t.rest;
    double::encode_packed(10, &r.double_data, buf);
    uint64::encode_packed(11, &r.uint64_data, buf);
    if let Some(v) = &r.doc_string {
        string::encode(12, v, buf);
    }
    message::encode_repeated(13, &r.external_data, buf);
    if let Some(v) = &r.data_location {
        int32::encode(14, v, buf);
    }
    message::encode_repeated(16, &r.metadata_props, buf);
}

/// The raw_data a tensor's writer streams (large enough), if any.
fn streamed_raw(t: TensorView<'_>) -> Option<&Bytes> {
    t.raw_data.filter(|r| r.len() >= STREAM_THRESHOLD)
}

/// Where the fields this schema does not define, carried from the input
/// ([`crate::io::unknown`]), go in the written model: the re-encoded parts that hold them.
/// The default plan carries nothing and writes exactly `proto.encode_to_vec()`.
#[derive(Debug, Default)]
pub struct Plan {
    /// The model's own carried fields, written at its end.
    model_own: Vec<u8>,
    /// The model's fields from opset_import (8) on, re-encoded with what they carry.
    model_tail: Option<Vec<u8>>,
    graph: Option<GraphPlan>,
}

#[derive(Debug)]
struct GraphPlan {
    /// The graph's encoded length with everything it carries.
    len: usize,
    /// Re-encoded nodes (whole fields, key and length included), by index.
    nodes: HashMap<usize, Vec<u8>>,
    inits: HashMap<usize, InitPlan>,
    /// The fields from doc_string (10) on, re-encoded, then the graph's own carried fields.
    tail: Vec<u8>,
}

#[derive(Debug)]
enum InitPlan {
    /// The whole field, key and length included.
    Whole(Vec<u8>),
    /// A streamed tensor: its length, and the parts before and after raw_data.
    Split {
        len: usize,
        head: Vec<u8>,
        tail: Vec<u8>,
    },
}

impl Plan {
    /// Place the fields of `carry` (scanned from the input) into the model `m` about to be
    /// written. Fails, naming them, when some have no message left to go into.
    pub fn new(m: &ModelProto, carry: &Carry) -> Result<Plan> {
        if carry.is_empty() {
            return Ok(Plan::default());
        }
        let mut dropped = Vec::new();
        let mut part = Part::new(Msg::Model, carry);
        let graph = match &m.graph {
            Some(g) => match part.child(7, &[]) {
                Some(gc) => Some(plan_graph(g, gc, &mut dropped)?),
                None => None,
            },
            None => None,
        };
        let mut tail = Vec::new();
        part.fields(&model_tail(m).encode_to_vec(), &mut tail, &mut dropped)?;
        let model_own = part.finish(&mut dropped);
        if !dropped.is_empty() {
            return Err(dropped_error(
                &dropped,
                "the rewrite removed or replaced the messages that hold them",
            ));
        }
        Ok(Plan {
            model_own,
            model_tail: Some(tail),
            graph,
        })
    }
}

fn plan_graph(g: &GraphProto, carry: &Carry, dropped: &mut Vec<Found>) -> Result<GraphPlan> {
    let mut part = Part::new(Msg::Graph, carry);
    let mut len = 0usize;
    let mut scratch = Vec::new();
    let mut nodes = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        scratch.clear();
        prost::encoding::message::encode(1, n, &mut scratch);
        let mut out = Vec::new();
        part.fields(&scratch, &mut out, dropped)?;
        len += out.len();
        if out != scratch {
            nodes.insert(i, out);
        }
    }
    if let Some(name) = &g.name {
        len += prost::encoding::string::encoded_len(2, name);
    }
    let mut inits = HashMap::new();
    for (i, t) in g.initializer.iter().enumerate() {
        let view = TensorView::from(t);
        if computed::is_computed(t) {
            // A new tensor (no field of the input's is carried into it): written as
            // `write_tensor` writes it, its marker passed through for the walk's count.
            scratch.clear();
            prost::encoding::message::encode(5, t, &mut scratch);
            let mut out = Vec::new();
            part.fields(&scratch, &mut out, dropped)?;
            let l = tensor_len(t);
            len += 1 + varint_len(l as u64) + l;
        } else if let Some(raw) = streamed_raw(view) {
            let mut head = Vec::new();
            encode_tensor_head(view, t.name.as_deref(), &mut head);
            let mut tail = Vec::new();
            encode_tensor_tail(view, &mut tail);
            let Some(tc) = part.child(5, &head) else {
                len += prost::encoding::message::encoded_len(5, t);
                continue;
            };
            let mut tp = Part::new(Msg::Tensor, tc);
            let (mut h, mut tl) = (Vec::new(), Vec::new());
            tp.fields(&head, &mut h, dropped)?;
            tp.fields(&tail, &mut tl, dropped)?;
            tl.extend(tp.finish(dropped));
            let raw_field = 1 + varint_len(raw.len() as u64) + raw.len();
            let inner = h.len() + raw_field + tl.len();
            len += 1 + varint_len(inner as u64) + inner;
            inits.insert(
                i,
                InitPlan::Split {
                    len: inner,
                    head: h,
                    tail: tl,
                },
            );
        } else {
            scratch.clear();
            prost::encoding::message::encode(5, t, &mut scratch);
            let mut out = Vec::new();
            part.fields(&scratch, &mut out, dropped)?;
            len += out.len();
            if out != scratch {
                inits.insert(i, InitPlan::Whole(out));
            }
        }
    }
    let mut tail = Vec::new();
    part.fields(&graph_tail(g).encode_to_vec(), &mut tail, dropped)?;
    tail.extend(part.finish(dropped));
    len += tail.len();
    Ok(GraphPlan {
        len,
        nodes,
        inits,
        tail,
    })
}

/// Stream the encoding of a model with the carried fields of `plan`.
pub fn write_model_planned<W: PayloadWrite>(
    c: &mut W,
    m: &ModelProto,
    plan: &Plan,
) -> std::io::Result<()> {
    let mut scratch = Vec::with_capacity(1 << 16);
    // Fields are encoded in tag order: those before `graph` (7), the graph, those after.
    put_message(c, &mut scratch, &model_head(m))?;
    if let Some(g) = &m.graph {
        match &plan.graph {
            Some(gp) => {
                put_len_key(c, 7, gp.len)?;
                write_graph_planned(c, &mut scratch, g, gp)?;
            }
            None => {
                put_len_key(c, 7, graph_len(g))?;
                write_graph(c, &mut scratch, g)?;
            }
        }
    }
    match &plan.model_tail {
        Some(t) => c.write_all(t)?,
        None => put_message(c, &mut scratch, &model_tail(m))?,
    }
    c.write_all(&plan.model_own)
}

fn write_graph<W: PayloadWrite>(
    w: &mut W,
    scratch: &mut Vec<u8>,
    g: &GraphProto,
) -> std::io::Result<()> {
    // node = 1, name = 2
    for n in &g.node {
        scratch.clear();
        prost::encoding::message::encode(1, n, scratch);
        w.write_all(scratch)?;
    }
    if let Some(name) = &g.name {
        scratch.clear();
        prost::encoding::string::encode(2, name, scratch);
        w.write_all(scratch)?;
    }
    // initializer = 5
    for t in &g.initializer {
        put_len_key(w, 5, tensor_len(t))?;
        write_tensor(w, scratch, t)?;
    }
    // doc_string = 10 and everything after.
    put_message(w, scratch, &graph_tail(g))
}

fn write_graph_planned<W: PayloadWrite>(
    w: &mut W,
    scratch: &mut Vec<u8>,
    g: &GraphProto,
    plan: &GraphPlan,
) -> std::io::Result<()> {
    for (i, n) in g.node.iter().enumerate() {
        match plan.nodes.get(&i) {
            Some(b) => w.write_all(b)?,
            None => {
                scratch.clear();
                prost::encoding::message::encode(1, n, scratch);
                w.write_all(scratch)?;
            }
        }
    }
    if let Some(name) = &g.name {
        scratch.clear();
        prost::encoding::string::encode(2, name, scratch);
        w.write_all(scratch)?;
    }
    for (i, t) in g.initializer.iter().enumerate() {
        match (plan.inits.get(&i), streamed_raw(t.into())) {
            (Some(InitPlan::Whole(b)), _) => w.write_all(b)?,
            (Some(InitPlan::Split { len, head, tail }), Some(raw)) => {
                put_len_key(w, 5, *len)?;
                w.write_all(head)?;
                put_len_key(w, 9, raw.len())?;
                w.write_payload(raw)?;
                w.write_all(tail)?;
            }
            _ => {
                put_len_key(w, 5, tensor_len(t))?;
                write_tensor(w, scratch, t)?;
            }
        }
    }
    w.write_all(&plan.tail)
}

/// The encoded length of `t` with `name` in its `name` field (8).
fn named_len(t: TensorView<'_>, name: Option<&str>) -> usize {
    use prost::encoding::{int32, int64, key_len};
    let len_field = |tag: u32, l: usize| key_len(tag) + varint_len(l as u64) + l;
    // Fields 1, 2, 8 and 9 of a tensor with these values.
    let own = |dims: &[i64], data_type: Option<i32>, name: Option<&str>, raw: Option<usize>| {
        int64::encoded_len_repeated(1, dims)
            + data_type.map_or(0, |d| int32::encoded_len(2, &d))
            + name.map_or(0, |n| len_field(8, n.len()))
            + raw.map_or(0, |r| len_field(9, r))
    };
    // A computed payload's marker has no other field: the tensor with its bytes inline.
    if let Some(p) = computed::get(t.rest) {
        return own(t.dims, t.data_type, name, Some(p.len() as usize));
    }
    // The rest's other fields: its encoding less those four (set only when the view reads a
    // whole message, whose rest is itself).
    let r = t.rest;
    let other = if t.has_rest() {
        r.encoded_len()
            - own(
                &r.dims,
                r.data_type,
                r.name.as_deref(),
                r.raw_data.as_ref().map(|b| b.len()),
            )
    } else {
        0
    };
    own(t.dims, t.data_type, name, t.raw_data.map(|b| b.len())) + other
}

/// The encoded length of a tensor as the savers write it (a computed payload inline).
fn tensor_len(t: &TensorProto) -> usize {
    if computed::is_computed(t) {
        named_len(t.into(), t.name.as_deref())
    } else {
        t.encoded_len()
    }
}

/// The encoded length of a graph as the savers write it (computed payloads inline).
fn graph_len(g: &GraphProto) -> usize {
    let field = |l: usize| 1 + varint_len(l as u64) + l;
    g.initializer
        .iter()
        .filter(|t| computed::is_computed(t))
        .fold(g.encoded_len(), |len, t| {
            len - field(t.encoded_len()) + field(tensor_len(t))
        })
}

fn write_tensor<W: PayloadWrite>(
    w: &mut W,
    scratch: &mut Vec<u8>,
    t: &TensorProto,
) -> std::io::Result<()> {
    write_tensor_as(w, scratch, t.into(), t.name.as_deref())
}

/// A tensor's encoding with `name` as its name, field by field as prost writes it: a payload
/// large enough is written by the sink (from the file it was mapped from, where it can),
/// between the tensor's head and its tail.
fn write_tensor_as<W: PayloadWrite>(
    w: &mut W,
    scratch: &mut Vec<u8>,
    t: TensorView<'_>,
    name: Option<&str>,
) -> std::io::Result<()> {
    scratch.clear();
    encode_tensor_head(t, name, scratch);
    if computed::is_computed(t.rest) {
        // The marker's only other fields say where the bytes come from: the tensor is written
        // with them inline, chunk by chunk.
        let p = computed::get(t.rest).ok_or_else(|| computed::missing(t.rest))?;
        encode_key(9, WireType::LengthDelimited, scratch);
        encode_varint(p.len(), scratch);
        w.write_all(scratch)?;
        let mut written = 0u64;
        p.write(&mut |c| {
            written += c.len() as u64;
            w.write_all(c)
        })?;
        if written != p.len() {
            return Err(std::io::Error::other(format!(
                "a computed payload wrote {written} bytes of {}",
                p.len()
            )));
        }
        return Ok(());
    }
    if let Some(raw) = t.raw_data {
        encode_key(9, WireType::LengthDelimited, scratch);
        encode_varint(raw.len() as u64, scratch);
        if streamed_raw(t).is_some() {
            w.write_all(scratch)?;
            w.write_payload(raw)?;
            scratch.clear();
        } else {
            scratch.extend_from_slice(raw);
        }
    }
    encode_tensor_tail(t, scratch);
    w.write_all(scratch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::tensor_proto::Segment;

    /// A tensor with every field of the schema set, and a payload large enough to be streamed.
    fn every_field() -> TensorProto {
        let entry = |k: &str, v: &str| StringStringEntryProto {
            key: Some(k.to_string()),
            value: Some(v.to_string()),
        };
        TensorProto {
            dims: vec![3, -1, 1 << 40],
            data_type: Some(1),
            segment: Some(Segment {
                begin: Some(2),
                end: Some(9),
            }),
            float_data: vec![1.5, -0.0, f32::INFINITY],
            int32_data: vec![-7, 0, i32::MAX],
            string_data: vec![Bytes::from_static(b"a"), Bytes::new()],
            int64_data: vec![i64::MIN, 5],
            name: Some("w".to_string()),
            raw_data: Some(Bytes::from(vec![7u8; STREAM_THRESHOLD + 3])),
            double_data: vec![2.25, -1e300],
            uint64_data: vec![u64::MAX, 0],
            doc_string: Some("doc".to_string()),
            external_data: vec![entry("location", "x.bin"), entry("offset", "0")],
            data_location: Some(0),
            metadata_props: vec![entry("k", "v")],
        }
    }

    #[test]
    fn tensors_are_written_as_prost_encodes_them() {
        let small = TensorProto {
            raw_data: Some(Bytes::from_static(&[1, 2, 3])),
            ..every_field()
        };
        let bare = TensorProto {
            raw_data: Some(Bytes::from(vec![0u8; STREAM_THRESHOLD])),
            ..TensorProto::default()
        };
        for t in [every_field(), small, bare, TensorProto::default()] {
            let mut out = Vec::new();
            write_tensor(&mut out, &mut Vec::new(), &t).unwrap();
            assert_eq!(out, t.encode_to_vec());
            // Under another name: as the renamed message encodes, read from the message or
            // from the IR's compact tensor.
            let renamed = TensorProto {
                name: Some("renamed".to_string()),
                ..t.clone()
            };
            let compact = crate::ir::Tensor::from_proto(t.clone());
            for view in [TensorView::from(&t), compact.view()] {
                let mut out = Vec::new();
                write_tensor_as(&mut out, &mut Vec::new(), view, Some("renamed")).unwrap();
                assert_eq!(out, renamed.encode_to_vec());
                assert_eq!(out.len(), named_len(view, Some("renamed")));
            }
            assert_eq!(compact.to_proto("renamed"), renamed);
        }
    }

    /// A mapped file of `len` bytes (a pattern that differs page to page), and its map.
    fn mapped(len: usize) -> (tempfile::NamedTempFile, Bytes) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        let data: Vec<u8> = (0..len)
            .map(|i| (i % 251) as u8 ^ (i >> 12) as u8)
            .collect();
        f.write_all(&data).unwrap();
        f.flush().unwrap();
        // SAFETY: the file is this test's own and changes only where the test says.
        let map = unsafe { memmap2::Mmap::map(f.as_file()) }.unwrap();
        (f, Bytes::from_owner(map))
    }

    /// A sink writing to a new temporary file, with `map` (of file `f`) as its one source, its
    /// pages mapped ahead of the writes by the read-ahead thread.
    fn sink_over(f: &tempfile::NamedTempFile, map: &Bytes) -> (tempfile::NamedTempFile, Sink) {
        let out = tempfile::NamedTempFile::new().unwrap();
        let sources = vec![Source::new(map.clone(), f.path().to_path_buf())];
        let mut w = Sink::new(out.reopen().unwrap(), sources);
        w.read_ahead(0, 0);
        (out, w)
    }

    /// Ranges of a large mapped source, at offsets that are no multiple of the page size (as a
    /// rewrite leaves them), come out exactly, while the read-ahead thread maps its pages:
    /// contiguous payloads as one range, the bytes between them in order.
    #[test]
    fn payload_ranges_of_a_source_come_out_exactly() {
        let len = AHEAD_MIN + 3 * WRITE_PIECE + 12_345;
        let (f, map) = mapped(len);
        let (out, mut w) = sink_over(&f, &map);
        w.write_all(b"head: 37 bytes that are not the file")
            .unwrap();
        w.write_payload(&map[5..len / 2]).unwrap();
        w.write_all(b"between").unwrap();
        // Contiguous payloads are one range; an earlier one opens another.
        w.write_payload(&map[len / 2 + 1..len - 7]).unwrap();
        w.write_payload(&map[len - 7..]).unwrap();
        w.write_payload(&map[100..STREAM_THRESHOLD + 100]).unwrap();
        w.flush().unwrap();
        let mut want = b"head: 37 bytes that are not the file".to_vec();
        want.extend_from_slice(&map[5..len / 2]);
        want.extend_from_slice(b"between");
        want.extend_from_slice(&map[len / 2 + 1..]);
        want.extend_from_slice(&map[100..STREAM_THRESHOLD + 100]);
        assert_eq!(w.written(), want.len() as u64);
        drop(w);
        assert!(std::fs::read(out.path()).unwrap() == want);
    }

    /// A source that shrinks while it is mapped fails the write with a message that names it,
    /// never a crash (a read of a page past the end of a mapped file would raise SIGBUS).
    #[cfg(target_os = "linux")]
    #[test]
    fn a_source_that_shrinks_fails_the_write() {
        let len = AHEAD_MIN + WRITE_PIECE;
        let (f, map) = mapped(len);
        f.as_file().set_len(4096).unwrap();
        let (_out, mut w) = sink_over(&f, &map);
        w.write_all(b"x").unwrap();
        w.write_payload(&map[..]).unwrap();
        let e = w.flush().unwrap_err();
        assert!(
            e.to_string().contains("changed while it was being read"),
            "{e}"
        );
    }

    /// Space set aside before the writes never shows in the file: one reserved larger than what
    /// was written is cut back to it, one reserved smaller grows with the writes, and a
    /// reservation once something was written changes nothing.
    #[test]
    fn reserved_space_ends_where_the_writes_end() {
        let len = RESERVE_MIN as usize + 3 * 4097;
        let (f, map) = mapped(len);
        for reserve in [len as u64 + 4097, len as u64 - 10, 2 * len as u64] {
            let (out, mut w) = sink_over(&f, &map);
            w.reserve(reserve).unwrap();
            w.write_all(b"head").unwrap();
            w.reserve(4 * len as u64).unwrap();
            w.write_payload(&map[7..]).unwrap();
            w.finish().unwrap();
            let want = [&b"head"[..], &map[7..]].concat();
            assert_eq!(w.written(), want.len() as u64);
            drop(w);
            assert!(
                std::fs::read(out.path()).unwrap() == want,
                "reserve {reserve}"
            );
        }
    }

    /// A streamed model reserves exactly the length it then writes.
    #[test]
    fn a_streamed_model_reserves_what_it_writes() {
        struct Counting {
            out: Vec<u8>,
            reserved: Option<u64>,
        }
        impl Write for Counting {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.out.write(b)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        impl PayloadWrite for Counting {
            fn reserve(&mut self, len: u64) -> std::io::Result<()> {
                assert!(self.out.is_empty() && self.reserved.is_none());
                self.reserved = Some(len);
                Ok(())
            }
        }
        use crate::proto::{NodeProto, OperatorSetIdProto, ValueInfoProto};
        let value = |n: &str| ValueInfoProto {
            name: Some(n.into()),
            ..Default::default()
        };
        let node = |i: &str, o: &str| NodeProto {
            op_type: Some("Add".into()),
            input: vec![i.into(), "w".into()],
            output: vec![o.into()],
            ..Default::default()
        };
        let model = ModelProto {
            ir_version: Some(8),
            producer_name: Some("test".into()),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            }],
            graph: Some(GraphProto {
                name: Some("g".into()),
                node: vec![node("x", "y"), node("y", "z")],
                input: vec![value("x")],
                output: vec![value("z")],
                initializer: vec![TensorProto {
                    name: Some("w".into()),
                    dims: vec![STREAM_THRESHOLD as i64 / 4 + 1],
                    data_type: Some(1),
                    raw_data: Some(Bytes::from(vec![7u8; STREAM_THRESHOLD + 4])),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let doc = crate::load_bytes(model.encode_to_vec(), Path::new("m.onnx")).unwrap();
        let src = crate::export::Streamed::new(&doc.model);
        let mut w = Counting {
            out: Vec::new(),
            reserved: None,
        };
        write_model_streamed(&mut w, &src).unwrap();
        assert!(!w.out.is_empty());
        assert_eq!(w.reserved, Some(w.out.len() as u64));
        assert_eq!(ModelProto::decode(&w.out[..]).unwrap(), model);
    }

    /// A computed payload is written as the tensor with those bytes in `raw_data` would be
    /// (its length too, as the streamed writer and the size guard count it); once its scope
    /// is gone, writing the marker is an error, never the marker itself.
    #[test]
    fn a_computed_payload_is_written_as_its_bytes_inline() {
        #[derive(Debug)]
        struct Ramp(u64);
        impl computed::Payload for Ramp {
            fn len(&self) -> u64 {
                self.0
            }
            fn write(
                &self,
                out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
            ) -> std::io::Result<()> {
                let all: Vec<u8> = (0..self.0).map(|i| (i * 31 % 251) as u8).collect();
                for c in all.chunks(1000) {
                    out(c)?;
                }
                Ok(())
            }
        }
        let scope = computed::Scope::default();
        let mut markers = Vec::new();
        for len in [10u64, STREAM_THRESHOLD as u64 + 5, 300_000] {
            let mut marker = scope.tensor(&[len as i64], 2, std::sync::Arc::new(Ramp(len)));
            marker.name = Some("w".to_string());
            let small = TensorProto {
                name: Some("s".to_string()),
                dims: vec![1],
                data_type: Some(1),
                raw_data: Some(Bytes::from_static(&[0, 0, 128, 63])),
                ..Default::default()
            };
            let model = |t: TensorProto| ModelProto {
                ir_version: Some(8),
                graph: Some(GraphProto {
                    name: Some("g".to_string()),
                    initializer: vec![small.clone(), t, small.clone()],
                    ..Default::default()
                }),
                ..Default::default()
            };
            let mut inline = marker.clone();
            computed::materialize(&mut inline);
            assert_eq!(inline.raw_data.as_ref().map(|b| b.len() as u64), Some(len));
            let want = model(inline.clone()).encode_to_vec();
            let mut got = Vec::new();
            write_model(&mut got, &model(marker.clone())).unwrap();
            assert_eq!(got, want, "len {len}");
            assert_eq!(tensor_len(&marker), inline.encoded_len());
            assert_eq!(named_len((&marker).into(), Some("w")), inline.encoded_len());
            let model = model(marker.clone());
            assert_eq!(graph_len(model.graph.as_ref().unwrap()), {
                let g = GraphProto {
                    initializer: vec![small.clone(), inline, small.clone()],
                    ..model.graph.clone().unwrap()
                };
                g.encoded_len()
            });
            markers.push(model);
        }
        drop(scope);
        for m in &markers {
            let e = write_model(&mut Vec::new(), m).unwrap_err();
            assert!(e.to_string().contains("is gone"), "{e}");
        }
    }

    /// With fields of the input to carry (an unknown field in the model, the graph and an
    /// initializer), a computed payload is written as its bytes inline would be, and the
    /// carried fields stay where they were.
    #[test]
    fn a_computed_payload_is_written_inline_among_carried_fields() {
        use crate::io::unknown::scan;
        #[derive(Debug)]
        struct Fill(u64);
        impl computed::Payload for Fill {
            fn len(&self) -> u64 {
                self.0
            }
            fn write(
                &self,
                out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
            ) -> std::io::Result<()> {
                out(&vec![7u8; self.0 as usize])
            }
        }
        let a = TensorProto {
            name: Some("a".to_string()),
            dims: vec![1],
            data_type: Some(1),
            raw_data: Some(Bytes::from_static(&[0, 0, 128, 63])),
            ..Default::default()
        };
        let model = |inits: Vec<TensorProto>| ModelProto {
            ir_version: Some(8),
            graph: Some(GraphProto {
                name: Some("g".to_string()),
                initializer: inits,
                ..Default::default()
            }),
            ..Default::default()
        };
        let varint = |n: u64| {
            let mut v = Vec::new();
            encode_varint(n, &mut v);
            v
        };
        // The input: `a` with an unknown field 99 (varint 5), the graph with 98, the model
        // with 97, appended to their encodings.
        let mut t = a.encode_to_vec();
        t.extend([0x98, 0x06, 5]);
        let mut g = GraphProto {
            name: Some("g".to_string()),
            ..Default::default()
        }
        .encode_to_vec();
        g.push(0x2a);
        g.extend(varint(t.len() as u64));
        g.extend(&t);
        g.extend([0x90, 0x06, 1]);
        let mut input = ModelProto {
            ir_version: Some(8),
            ..Default::default()
        }
        .encode_to_vec();
        input.push(0x3a);
        input.extend(varint(g.len() as u64));
        input.extend(&g);
        input.extend([0x88, 0x06, 2]);
        let carry = scan(&Bytes::from(input)).unwrap();
        assert!(!carry.is_empty());
        for len in [100u64, 200_000] {
            let scope = computed::Scope::default();
            let mut w = scope.tensor(&[len as i64], 2, std::sync::Arc::new(Fill(len)));
            w.name = Some("w".to_string());
            let mut inline = w.clone();
            computed::materialize(&mut inline);
            let write = |m: &ModelProto| {
                let plan = Plan::new(m, &carry).unwrap();
                let mut out = Vec::new();
                write_model_planned(&mut out, m, &plan).unwrap();
                out
            };
            let got = write(&model(vec![a.clone(), w]));
            let want = write(&model(vec![a.clone(), inline]));
            assert!(got == want, "len {len}");
            // The carried fields are there: the output scans as carrying them.
            assert_eq!(
                scan(&Bytes::from(got)).unwrap().list().len(),
                carry.list().len()
            );
        }
    }
}
