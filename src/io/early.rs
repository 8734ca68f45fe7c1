//! An early copy of the input into the output's folder, made by a second thread while the
//! model is read and analysed. When the compile leaves the model as it was (a target without
//! rules, or a model that is already safe), the output is exactly the input's bytes: the copy
//! is moved into place and nothing is encoded or written again. Otherwise it is cancelled and
//! removed; the output is written as usual, from the verified graph.
//!
//! The copy is the kernel's (`copy_file_range`), in chunks, so that a cancel stops it soon.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::save::TempFile;
use crate::error::Result;

/// Bytes copied between two looks at the cancel flag.
const CHUNK: u64 = 32 << 20;

pub struct EarlyCopy {
    tmp: Option<TempFile>,
    cancel: Arc<AtomicBool>,
    job: Option<JoinHandle<std::io::Result<u64>>>,
}

impl EarlyCopy {
    /// Start copying `input` to a temporary file beside `out`. `None` when that cannot start
    /// (not a regular file, a folder that cannot be written...): the save then goes the usual
    /// way and reports any error itself.
    pub fn start(input: &Path, out: &Path) -> Option<Self> {
        if !std::fs::metadata(input).ok()?.is_file() {
            return None;
        }
        let src = File::open(input).ok()?;
        let (tmp, dst) = TempFile::create(out).ok()?;
        let cancel = Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        let job = std::thread::Builder::new()
            .name("early-copy".into())
            .spawn(move || copy_chunks(src, dst, &flag))
            .ok()?;
        Some(EarlyCopy {
            tmp: Some(tmp),
            cancel,
            job: Some(job),
        })
    }

    /// The output is the input, `len` bytes: wait for the copy and move it to `out`. `Ok(false)`
    /// when the copy is not whole (the input changed, a write failed): the caller writes the
    /// output itself.
    pub fn finish(mut self, len: u64, out: &Path) -> Result<bool> {
        let copied = self.job.take().map(|j| j.join());
        match (copied, self.tmp.take()) {
            (Some(Ok(Ok(n))), Some(tmp)) if n == len => {
                tmp.persist(out)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

impl Drop for EarlyCopy {
    /// Cancelled: stop the copy, wait for the thread, and remove the file (`TempFile`'s drop).
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(j) = self.job.take() {
            let _ = j.join();
        }
    }
}

fn copy_chunks(mut src: File, mut dst: File, cancel: &AtomicBool) -> std::io::Result<u64> {
    // The copy's blocks are allocated first, as the save's are (`Sink::reserve`).
    let len = src.metadata()?.len();
    let reserved = len >= super::save::RESERVE_MIN && super::save::allocate(&dst, len)?;
    let mut total = 0u64;
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Ok(total);
        }
        let n = std::io::copy(&mut Read::by_ref(&mut src).take(CHUNK), &mut dst)?;
        total += n;
        if n < CHUNK {
            // A source that shrank while it was copied leaves no allocated bytes past the copy.
            if reserved && total < len {
                dst.set_len(total)?;
            }
            return Ok(total);
        }
    }
}
