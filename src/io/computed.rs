//! Computed payloads: a tensor whose bytes a rewrite describes rather than holds (the unpacked
//! weights of `MatMulNBits`, 4x or 8x their packed size), produced chunk by chunk while the
//! output is written, so that no such weight is ever whole in memory.
//!
//! In the IR such a tensor is a marker: `data_location` EXTERNAL, with `external_data` entries
//! `location` = [`LOCATION`] (no file), `length` and [`KEY`] (the payload's number in this
//! process's table). Everything that reads a tensor's bytes before save treats it as external
//! data it cannot read ([`crate::io::external::external_ref`] refuses it): constant folding,
//! slicing and the decompositions leave it alone. The savers write it inline, as a `raw_data`
//! of [`Payload::len`] bytes streamed from [`Payload::write`], byte for byte what the tensor
//! with those bytes in `raw_data` encodes to; a tensor in a subgraph is materialized when
//! exported (subgraphs are encoded whole). A marker whose payload is gone is an error when
//! written, never written as it is.
//!
//! The table holds a payload (and the mapped bytes it reads) for as long as the model that
//! made it: each [`crate::ir::Model`] has a [`Scope`], shared by its clones, and the last of
//! them to be dropped removes its payloads from the table. Repeated compiles in one process
//! (the Python module) thus leave nothing behind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;

use crate::proto::{tensor_proto::DataLocation, StringStringEntryProto, TensorProto};

/// The `location` of a computed payload's marker (names no file).
pub const LOCATION: &str = "<onnx-safeify computed payload>";
/// The `external_data` key holding the payload's number.
pub const KEY: &str = "onnx_safeify.computed";

/// Bytes produced on demand.
pub trait Payload: Send + Sync + std::fmt::Debug {
    /// The payload's length in bytes.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Hand the bytes, in order and `len` in all, to `out` in chunks of a few MiB. The same
    /// bytes every time.
    fn write(&self, out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()>;
}

static TABLE: LazyLock<Mutex<HashMap<u64, Arc<dyn Payload>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
static NEXT: AtomicU64 = AtomicU64::new(1);

fn table() -> std::sync::MutexGuard<'static, HashMap<u64, Arc<dyn Payload>>> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The computed payloads of one model (see the module documentation). Clones share it; the
/// payloads leave the table when the last clone is dropped.
#[derive(Debug, Clone, Default)]
pub struct Scope(Arc<Owned>);

#[derive(Debug, Default)]
struct Owned(Mutex<Vec<u64>>);

impl Drop for Owned {
    fn drop(&mut self) {
        let ids = std::mem::take(self.0.get_mut().unwrap_or_else(|e| e.into_inner()));
        if ids.is_empty() {
            return;
        }
        let mut t = table();
        for id in ids {
            t.remove(&id);
        }
    }
}

impl Scope {
    /// A tensor of `dims` and element type `dt` whose bytes `p` computes, registered in this
    /// scope.
    pub fn tensor(&self, dims: &[i64], dt: i32, p: Arc<dyn Payload>) -> TensorProto {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let len = p.len();
        table().insert(id, p);
        self.0 .0.lock().unwrap_or_else(|e| e.into_inner()).push(id);
        let entry = |k: &str, v: String| StringStringEntryProto {
            key: Some(k.to_string()),
            value: Some(v),
        };
        TensorProto {
            dims: dims.to_vec(),
            data_type: Some(dt),
            external_data: vec![
                entry("location", LOCATION.to_string()),
                entry("length", len.to_string()),
                entry(KEY, id.to_string()),
            ],
            data_location: Some(DataLocation::External as i32),
            ..Default::default()
        }
    }

    /// How many payloads this scope registered.
    pub fn len(&self) -> usize {
        self.0 .0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How many payloads the table holds (all scopes of the process).
pub fn live() -> usize {
    table().len()
}

/// Whether `t` is a computed payload's marker.
pub fn is_computed(t: &TensorProto) -> bool {
    t.data_location == Some(DataLocation::External as i32)
        && t.external_data
            .iter()
            .any(|e| e.key.as_deref() == Some(KEY))
}

/// The payload of a marker (`None` for another tensor, or a marker whose model is gone).
pub fn get(t: &TensorProto) -> Option<Arc<dyn Payload>> {
    if !is_computed(t) {
        return None;
    }
    let id: u64 = t
        .external_data
        .iter()
        .find(|e| e.key.as_deref() == Some(KEY))?
        .value
        .as_deref()?
        .parse()
        .ok()?;
    table().get(&id).cloned()
}

/// The error of writing a marker whose payload is gone.
pub fn missing(t: &TensorProto) -> std::io::Error {
    std::io::Error::other(format!(
        "internal error: the computed payload of tensor '{}' is gone (its model was dropped)",
        t.name.as_deref().unwrap_or("")
    ))
}

/// All the bytes of `p`, in memory.
pub fn bytes_of(p: &dyn Payload) -> std::io::Result<Bytes> {
    let mut bytes = Vec::with_capacity(usize::try_from(p.len()).unwrap_or(0));
    p.write(&mut |c| {
        bytes.extend_from_slice(c);
        Ok(())
    })?;
    Ok(Bytes::from(bytes))
}

/// The tensor with its computed bytes in `raw_data` (for a subgraph, encoded whole); other
/// tensors, and a marker whose payload is gone (an error when written), are left as they are.
pub fn materialize(t: &mut TensorProto) {
    let Some(p) = get(t) else {
        return;
    };
    let Ok(bytes) = bytes_of(&*p) else {
        return;
    };
    t.external_data.clear();
    t.data_location = None;
    t.raw_data = Some(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Count(u64);
    impl Payload for Count {
        fn len(&self) -> u64 {
            self.0
        }
        fn write(&self, out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
            for i in 0..self.0 {
                out(&[i as u8])?;
            }
            Ok(())
        }
    }

    #[test]
    fn a_marker_is_external_unreadable_and_materializes() {
        let scope = Scope::default();
        let mut t = scope.tensor(&[5], 2, Arc::new(Count(5)));
        assert!(crate::io::external::is_external(&t));
        assert!(crate::io::external::external_ref(&t).is_err());
        assert_eq!(get(&t).map(|p| p.len()), Some(5));
        materialize(&mut t);
        assert!(!is_computed(&t));
        assert_eq!(t.raw_data.as_deref(), Some(&[0u8, 1, 2, 3, 4][..]));
    }

    /// A scope's payloads leave the table when its last clone is dropped (other scopes'
    /// stay), and their markers then read as gone.
    #[test]
    fn payloads_live_as_long_as_their_scope() {
        let (a, b) = (Scope::default(), Scope::default());
        let ta: Vec<_> = (0..3)
            .map(|i| a.tensor(&[i], 2, Arc::new(Count(i as u64))))
            .collect();
        let tb = b.tensor(&[4], 2, Arc::new(Count(4)));
        assert_eq!((a.len(), b.len()), (3, 1));
        let a2 = a.clone();
        drop(a);
        assert!(ta.iter().all(|t| get(t).is_some()), "a clone keeps them");
        drop(a2);
        assert!(ta.iter().all(|t| is_computed(t) && get(t).is_none()));
        assert_eq!(get(&tb).map(|p| p.len()), Some(4));
        drop(b);
        assert!(get(&tb).is_none());
    }
}
