//! External tensor data (`data_location: EXTERNAL`): parsing the key/value entries, confining
//! locations to the model's folder, and mapping the data files lazily, once each.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;

use crate::error::{Error, ErrorKind, Result};
use crate::proto::{tensor_proto::DataLocation, TensorProto};

/// Where one tensor's bytes live outside the model file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalRef {
    pub location: String,
    pub offset: u64,
    pub length: Option<u64>,
}

/// Is this tensor's payload stored in an external file?
pub fn is_external(t: &TensorProto) -> bool {
    t.data_location == Some(DataLocation::External as i32)
}

/// Parse the `external_data` entries of a tensor (location required, offset/length optional).
pub fn external_ref(t: &TensorProto) -> Result<ExternalRef> {
    if crate::io::computed::is_computed(t) {
        return Err(Error::new(
            ErrorKind::ExternalData,
            "the tensor's bytes are computed when the model is written (not readable before)",
        ));
    }
    let mut location = None;
    let mut offset = 0u64;
    let mut length = None;
    for e in &t.external_data {
        let key = e.key.as_deref().unwrap_or("");
        let value = e.value.as_deref().unwrap_or("");
        let number = |what: &str| {
            value.parse::<u64>().map_err(|_| {
                Error::new(
                    ErrorKind::ExternalData,
                    format!("external data {what} '{value}' is not a non-negative integer"),
                )
            })
        };
        match key {
            "location" => location = Some(value.to_string()),
            "offset" => offset = number("offset")?,
            "length" => length = Some(number("length")?),
            _ => {} // checksum and future keys are kept but not needed to read the data
        }
    }
    let location = location.ok_or_else(|| {
        Error::new(
            ErrorKind::ExternalData,
            "external data has no 'location' entry",
        )
    })?;
    Ok(ExternalRef {
        location,
        offset,
        length,
    })
}

/// Resolves and reads external data files of one model, confined to the model's folder.
#[derive(Debug)]
pub struct ExternalData {
    /// The model's folder, canonicalised.
    base: PathBuf,
    maps: Mutex<HashMap<PathBuf, Bytes>>,
    /// Each location as written, resolved once: its canonical path and size. (A model whose
    /// 9,000 tensors share one data file resolved that file 9,000 times: 108,006 `readlink`
    /// and 45,014 `statx` calls.)
    resolved: Mutex<HashMap<String, (PathBuf, u64)>>,
}

impl ExternalData {
    pub fn new(model_path: &Path) -> Result<Self> {
        let dir = match model_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let base = dir
            .canonicalize()
            .map_err(|e| Error::io(&dir, "cannot resolve the model's folder", e))?;
        Ok(ExternalData {
            base,
            maps: Mutex::new(HashMap::new()),
            resolved: Mutex::new(HashMap::new()),
        })
    }

    /// The model's folder (canonical).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The canonical path of a location, which must stay inside the model's folder: no absolute
    /// path, no `..` that leaves it, no symlink that points out of it; the file must exist.
    pub fn resolve(&self, location: &str) -> Result<PathBuf> {
        self.resolve_sized(location).map(|(p, _)| p)
    }

    /// [`Self::resolve`] and the file's size, each distinct location checked once.
    fn resolve_sized(&self, location: &str) -> Result<(PathBuf, u64)> {
        let cache = || self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = cache().get(location) {
            return Ok(found.clone());
        }
        let found = self.resolve_uncached(location)?;
        cache().insert(location.to_string(), found.clone());
        Ok(found)
    }

    fn resolve_uncached(&self, location: &str) -> Result<(PathBuf, u64)> {
        let err = |msg: String| Error::new(ErrorKind::ExternalData, msg);
        if location.is_empty() {
            return Err(err("external data location is empty".into()));
        }
        if location.contains('\0') {
            return Err(err(format!(
                "external data location {location:?} contains a NUL byte"
            )));
        }
        let rel = Path::new(location);
        let mut depth: i64 = 0;
        for c in rel.components() {
            match c {
                Component::Prefix(_) | Component::RootDir => {
                    return Err(err(format!(
                        "external data location '{location}' is absolute; it must be relative to the model's folder"
                    )))
                }
                Component::ParentDir => {
                    depth -= 1;
                    if depth < 0 {
                        return Err(err(format!(
                            "external data location '{location}' leaves the model's folder"
                        )));
                    }
                }
                Component::CurDir => {}
                Component::Normal(_) => depth += 1,
            }
        }
        let joined = self.base.join(rel);
        let canonical = joined.canonicalize().map_err(|e| {
            err(format!(
                "external data file '{location}' cannot be opened ({e})"
            ))
        })?;
        if !canonical.starts_with(&self.base) {
            return Err(err(format!(
                "external data location '{location}' resolves to {} outside the model's folder (through a symlink)",
                canonical.display()
            )));
        }
        match std::fs::metadata(&canonical) {
            Ok(m) if m.is_file() => Ok((canonical, m.len())),
            Ok(_) => Err(err(format!(
                "external data location '{location}' is not a regular file"
            ))),
            Err(e) => Err(Error::io(&canonical, "cannot stat external data", e)),
        }
    }

    /// Check a reference without reading the data: the file is allowed and large enough.
    pub fn check(&self, r: &ExternalRef, expected_len: Option<u64>) -> Result<()> {
        let (_, size) = self.resolve_sized(&r.location)?;
        if let (Some(l), Some(e)) = (r.length, expected_len) {
            if l != e {
                return Err(Error::new(
                    ErrorKind::ExternalData,
                    format!(
                        "external data '{}' declares length {l} but the tensor's shape and type need {e} bytes",
                        r.location
                    ),
                ));
            }
        }
        let len = match (r.length, expected_len) {
            (Some(l), _) => l,
            (None, Some(e)) => e,
            (None, None) => 0,
        };
        match r.offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::new(
                ErrorKind::ExternalData,
                format!(
                    "external data '{}' needs bytes {}..{} but the file has {size} bytes",
                    r.location,
                    r.offset,
                    r.offset.saturating_add(len)
                ),
            )),
        }
    }

    /// The data files mapped so far, as payload sources for saving.
    pub fn sources(&self) -> Vec<crate::io::save::Source> {
        let maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = maps
            .iter()
            .map(|(p, b)| crate::io::save::Source::new(b.clone(), p.clone()))
            .collect();
        v.sort_by(|a, b| a.path().cmp(b.path()));
        v
    }

    /// The bytes of one reference, sliced from a memory map of its file (mapped on first use).
    /// Without a declared length, the data runs to the end of the file.
    pub fn read(&self, r: &ExternalRef) -> Result<Bytes> {
        let path = self.resolve(&r.location)?;
        let whole = {
            let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
            match maps.get(&path) {
                Some(b) => b.clone(),
                None => {
                    let b = map_file(&path)?;
                    maps.insert(path.clone(), b.clone());
                    b
                }
            }
        };
        let start = usize::try_from(r.offset).ok().filter(|&s| s <= whole.len());
        let end = match (start, r.length) {
            (Some(s), Some(l)) => usize::try_from(l).ok().and_then(|l| s.checked_add(l)),
            (Some(_), None) => Some(whole.len()),
            _ => None,
        };
        match (start, end) {
            (Some(s), Some(e)) if e <= whole.len() => Ok(whole.slice(s..e)),
            _ => Err(Error::new(
                ErrorKind::ExternalData,
                format!(
                    "external data '{}' (offset {}, length {:?}) runs past the end of its {}-byte file",
                    r.location,
                    r.offset,
                    r.length,
                    whole.len()
                ),
            )
            .in_file(&path)),
        }
    }
}

/// Unmap from this process the pages that lie wholly inside `b`, a slice of a map of
/// [`map_file`] (the bytes [`ExternalData::read`] returns), once they have been read: they stay
/// in the page cache and are mapped again if read later, but stop counting in the process's
/// resident memory. For a weight read once while it is written (the unpacked MatMulNBits
/// form), so that the input's mapped pages do not pile up.
pub fn release_mapped(b: &Bytes) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `sysconf` only reads a constant of the system.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096);
        let (start, end) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
        let from = start.div_ceil(page) * page;
        let to = end / page * page;
        if to > from {
            // SAFETY: [from, to) lies inside `b`, so inside the read-only shared file mapping
            // `b` keeps alive. MADV_DONTNEED on such a mapping only drops this process's page
            // table entries: a later read maps the file's (unchanged) pages again.
            unsafe {
                libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_DONTNEED);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = b;
}

/// Memory-map a whole file as `Bytes` (an empty file gives empty bytes; nothing is copied).
pub fn map_file(path: &Path) -> Result<Bytes> {
    let file = File::open(path).map_err(|e| Error::io(path, "cannot open", e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io(path, "cannot stat", e))?
        .len();
    if len == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the map is read-only and private to this process. Like every tool that maps its
    // input, we rely on the file not being truncated while we run; onnx-safeify never writes
    // to its inputs (outputs are written to a new temporary file and renamed).
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, "cannot map", e))?;
    #[cfg(unix)]
    {
        let _ = map.advise(memmap2::Advice::Sequential);
    }
    Ok(Bytes::from_owner(map))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tensor of a file names the same location: it is resolved (canonicalised, its
    /// confinement checked, its size read) once, however many tensors refer to it.
    #[test]
    fn a_location_is_resolved_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.onnx.data"), [0u8; 64]).unwrap();
        let ext = ExternalData::new(&dir.path().join("m.onnx")).unwrap();
        for i in 0..100u64 {
            let r = ExternalRef {
                location: "m.onnx.data".into(),
                offset: i % 8 * 8,
                length: Some(8),
            };
            ext.check(&r, Some(8)).unwrap();
            assert_eq!(ext.read(&r).unwrap().len(), 8);
        }
        let resolved = ext.resolved.lock().unwrap();
        assert_eq!(resolved.len(), 1);
        assert_eq!(resolved["m.onnx.data"].1, 64);
        drop(resolved);
        // A location that leaves the folder is still refused, and not remembered.
        assert!(ext.resolve("../m.onnx.data").is_err());
        assert_eq!(ext.resolved.lock().unwrap().len(), 1);
    }
}
