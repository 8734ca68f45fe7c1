//! The output file, started by a second thread while the model is read and analysed.
//!
//! - **A copy of the input** ([`EarlyCopy::start`], a target without rules): when the compile
//!   leaves the model as it was (or the model is already safe), the output is exactly the
//!   input's bytes: the copy is moved into place and nothing is encoded or written again. The
//!   copy is the kernel's (`copy_file_range`), in chunks, so that a cancel stops it soon.
//! - **The output's pages, ahead** ([`EarlyCopy::prepare`], a target with rules): the file's
//!   blocks are allocated and its pages written with zeros, up to the input's length. The save
//!   then writes the model over them from the start: a page the file has already costs less to
//!   write than a new one (326 MB on ext4: about 65 ms against 95 ms), and the zeros were
//!   written by a core that would otherwise wait for the analysis.
//!
//! Either way, when the file cannot become the output as it is, the save stops the thread and
//! writes the output over what the thread wrote ([`EarlyCopy::into_file`]), from the verified
//! graph; the file is cut to the length written. Dropped unused, the file is removed.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::save::{allocate, TempFile, RESERVE_MIN, WRITE_PIECE};
use crate::error::Result;

/// Bytes copied between two looks at the cancel flag.
const CHUNK: u64 = 32 << 20;

/// An input smaller than this has no pages written ahead ([`EarlyCopy::prepare`]): its whole
/// write takes less than starting a thread saves.
pub const PREPARE_MIN: u64 = 8 << 20;

/// What the thread writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The input's bytes.
    Copy,
    /// Zeros, to be written over.
    Pages,
}

pub struct EarlyCopy {
    tmp: Option<TempFile>,
    cancel: Arc<AtomicBool>,
    /// The file and the number of bytes the thread wrote.
    job: Option<JoinHandle<std::io::Result<(File, u64)>>>,
    kind: Kind,
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
        Self::spawn(out, Kind::Copy, move |dst, cancel| {
            copy_chunks(src, dst, cancel)
        })
    }

    /// Start writing the pages of a temporary file beside `out` (zeros, as many bytes as
    /// `input` has, at most [`pages_limit`]), for the save to write the output over. `None`
    /// for an input smaller than [`PREPARE_MIN`], or when the thread cannot start.
    pub fn prepare(input: &Path, out: &Path) -> Option<Self> {
        let meta = std::fs::metadata(input).ok()?;
        if !meta.is_file() || meta.len() < PREPARE_MIN {
            return None;
        }
        let len = meta.len().min(pages_limit()?);
        if len < PREPARE_MIN {
            return None;
        }
        Self::spawn(out, Kind::Pages, move |dst, cancel| {
            write_pages(dst, len, cancel)
        })
    }

    fn spawn(
        out: &Path,
        kind: Kind,
        work: impl FnOnce(File, &AtomicBool) -> std::io::Result<(File, u64)> + Send + 'static,
    ) -> Option<Self> {
        let (tmp, dst) = TempFile::create(out).ok()?;
        let cancel = Arc::new(AtomicBool::new(false));
        let flag = cancel.clone();
        let job = std::thread::Builder::new()
            .name("early-output".into())
            .spawn(move || work(dst, &flag))
            .ok()?;
        Some(EarlyCopy {
            tmp: Some(tmp),
            cancel,
            job: Some(job),
            kind,
        })
    }

    /// The output is the input, `len` bytes: wait for the copy and move it to `out`. `Ok(false)`
    /// when the copy is not whole (the input changed, a write failed), or the file holds no
    /// copy ([`EarlyCopy::prepare`]): the caller writes the output itself.
    pub fn finish(mut self, len: u64, out: &Path) -> Result<bool> {
        if self.kind != Kind::Copy {
            return Ok(false);
        }
        let copied = self.job.take().map(|j| j.join());
        match (copied, self.tmp.take()) {
            (Some(Ok(Ok((_, n)))), Some(tmp)) if n == len => {
                tmp.persist(out)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Is the file a copy of the input ([`EarlyCopy::start`])?
    pub fn is_copy(&self) -> bool {
        self.kind == Kind::Copy
    }

    /// Stop the thread and hand over its file, to be written over from its first byte. `None`
    /// when the thread failed (its file is removed): the caller creates one.
    pub(crate) fn into_file(mut self) -> Option<(TempFile, File)> {
        self.cancel.store(true, Ordering::Relaxed);
        match self.job.take()?.join() {
            Ok(Ok((file, _))) => Some((self.tmp.take()?, file)),
            _ => None,
        }
    }
}

impl Drop for EarlyCopy {
    /// Cancelled: stop the thread, wait for it, and remove the file (`TempFile`'s drop).
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(j) = self.job.take() {
            let _ = j.join();
        }
    }
}

/// The most bytes [`EarlyCopy::prepare`] writes ahead: a tenth of the memory available now
/// (the kernel starts writing dirty pages to disk at that share by default, and zeros written
/// to disk before the output replaces them would be written twice). `None` where that is not
/// known (not Linux).
pub fn pages_limit() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib.saturating_mul(1024) / 10)
}

fn copy_chunks(mut src: File, mut dst: File, cancel: &AtomicBool) -> std::io::Result<(File, u64)> {
    // The copy's blocks are allocated first, as the save's are (`Sink::reserve`).
    let len = src.metadata()?.len();
    let reserved = len >= RESERVE_MIN && allocate(&dst, len)?;
    let mut total = 0u64;
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Ok((dst, total));
        }
        let n = std::io::copy(&mut Read::by_ref(&mut src).take(CHUNK), &mut dst)?;
        total += n;
        if n < CHUNK {
            // A source that shrank while it was copied leaves no allocated bytes past the copy.
            if reserved && total < len {
                dst.set_len(total)?;
            }
            return Ok((dst, total));
        }
    }
}

/// Allocate `len` bytes for `dst` and write them with zeros, in the pieces the save writes
/// ([`WRITE_PIECE`]: the page cache takes them in the same folios), until done or cancelled.
/// Only on a filesystem of local disks or memory ([`pages_pay`]); elsewhere nothing is
/// written and the save writes the file as it would without it.
fn write_pages(mut dst: File, len: u64, cancel: &AtomicBool) -> std::io::Result<(File, u64)> {
    if !pages_pay(&dst) {
        return Ok((dst, 0));
    }
    allocate(&dst, len)?;
    // Zeros from a mapping never written to: its pages are the system's shared zero page, so
    // the buffer adds nothing to the process's memory (a heap buffer would be touched, and
    // with huge pages that is 2 MiB).
    let zeros = memmap2::MmapOptions::new().len(WRITE_PIECE).map_anon()?;
    let mut done = 0u64;
    while done < len && !cancel.load(Ordering::Relaxed) {
        let n = (len - done).min(WRITE_PIECE as u64) as usize;
        dst.write_all(&zeros[..n])?;
        done += n as u64;
    }
    Ok((dst, done))
}

/// Is `file` on a filesystem where zeros written ahead stay in this machine's page cache until
/// the output replaces them (ext4, XFS, Btrfs, F2FS, tmpfs, and overlayfs, which containers
/// write through to one of those)? On a network or user-space
/// filesystem they could be sent away before they are written over, a second write of the
/// whole file.
fn pages_pay(file: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // Magic numbers of <linux/magic.h>.
        const LOCAL: [u32; 6] = [
            0xEF53,      // ext2/3/4
            0x5846_5342, // XFS
            0x9123_683E, // Btrfs
            0xF2F5_2010, // F2FS
            0x0102_1994, // tmpfs
            0x794C_7630, // overlayfs
        ];
        // SAFETY: `fstatfs` fills the zeroed struct it is given for the open descriptor.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
            return false;
        }
        // The type's width differs between systems; the magic numbers are 32-bit.
        LOCAL.contains(&(st.f_type as u32))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        false
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Zeros are written ahead on a filesystem of memory (tmpfs) and never on one that is not
    /// of disks or memory (procfs stands in for a network or user-space filesystem).
    #[test]
    fn pages_are_written_ahead_only_on_local_filesystems() {
        assert!(!pages_pay(&File::open("/proc/self/status").unwrap()));
        match tempfile::tempfile_in("/dev/shm") {
            Ok(f) => assert!(pages_pay(&f)),
            Err(e) => crate::errln!("SKIPPED the tmpfs half: no /dev/shm to write in ({e})"),
        }
    }
}
