//! A benchmark aid, not a tool for users: copy a file as `cp` does (the kernel's
//! `copy_file_range`), but `--shift N` bytes (37 by default) further into the output.
//!
//! A rewrite that changes a model's nodes moves every payload after them by however many bytes
//! the node section grew or shrank, so a payload's source and destination no longer share their
//! offset within a page, and the kernel's file-to-file copy costs more than `cp`'s (each
//! destination page is put together from two source pages). This copy measures that cost on
//! its own: the floor for writing a rewritten model whose weights are copied file to file, as
//! `cp` is the floor for an unchanged one. (onnx-safeify writes them from the mapped input
//! instead, in writes of 256 KiB, with the pages mapped ahead by another thread, which costs
//! about what `cp` does.) `--pieces N` copies in N consecutive ranges (a system call each), as
//! a rewrite that drops tensors from between the others does.
//!
//! `cargo run --release --example copy_shifted -- SRC DST [--shift 37] [--pieces 1]`

use std::fs::File;
use std::io::Write;

fn main() {
    if let Err(e) = run() {
        eprintln!("copy_shifted: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut paths = Vec::new();
    let (mut shift, mut pieces) = (37u64, 1u64);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |what: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("{what} needs a number"))
        };
        match a.as_str() {
            "--shift" => shift = num("--shift")?,
            "--pieces" => pieces = num("--pieces")?.max(1),
            _ => paths.push(a.clone()),
        }
    }
    let [src, dst] = paths.as_slice() else {
        return Err("usage: copy_shifted SRC DST [--shift N] [--pieces N]".to_string());
    };
    let from = File::open(src).map_err(|e| format!("{src}: {e}"))?;
    let size = from.metadata().map_err(|e| format!("{src}: {e}"))?.len();
    let mut to = File::create(dst).map_err(|e| format!("{dst}: {e}"))?;
    to.write_all(&vec![0u8; shift as usize])
        .map_err(|e| format!("{dst}: {e}"))?;
    let step = (size / pieces).max(1);
    let mut off = 0;
    while off < size {
        let n = step.min(size - off);
        copy(&from, off, n, &to).map_err(|e| format!("{src} -> {dst}: {e}"))?;
        off += n;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn copy(from: &File, offset: u64, len: u64, to: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut done = 0;
    while done < len {
        let mut off_in = (offset + done) as libc::loff_t;
        let chunk = (len - done).min(1 << 30) as usize;
        // SAFETY: two open files, a valid pointer for the call's duration, a null output
        // offset (write at the output's position).
        let r = unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut off_in,
                to.as_raw_fd(),
                std::ptr::null_mut(),
                chunk,
                0,
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        done += r as u64;
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn copy(from: &File, offset: u64, len: u64, mut to: &File) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut from = from;
    from.seek(SeekFrom::Start(offset))?;
    let n = std::io::copy(&mut from.take(len), &mut to)?;
    if n < len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}
