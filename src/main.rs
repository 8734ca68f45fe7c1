//! The `onnx-safeify` command. Everything it does lives in the library
//! ([`onnx_safeify::cli`]), which the Python wheel's console script runs too.

use std::process::ExitCode;

// The IR is many small allocations; mimalloc makes import/export several times faster than
// glibc's malloc on large graphs. (The Python extension keeps the interpreter's malloc.)
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc's options by number (`mi_option_e` in mimalloc 2's `mimalloc.h`; the Rust bindings
// leave this one out). The test below checks the number against the option's default.
const MI_OPTION_PURGE_DELAY: libc::c_int = 15;

extern "C" {
    fn mi_option_set(option: libc::c_int, value: libc::c_long);
    fn mi_collect(force: bool);
}

/// Whether the compile under way reads a large input (see [`large_input`]).
static LARGE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A compile of a large input starts: the allocator is tuned for memory (see [`purge_sooner`]
/// and [`collect`]).
fn large_input() {
    LARGE.store(true, std::sync::atomic::Ordering::Relaxed);
    purge_sooner();
}

/// After a large input is read: hand every free page back to the system now, those of other
/// threads' heaps included (a forced collection on the main thread takes over the heaps that
/// ended threads left), and take no more transparent huge pages. Not after a small input is
/// read: the pages handed back are faulted in again as the compile goes on, and 4 KiB pages
/// fault more often. With both, the 50,000-node pin compile (3.6 MB) took 107 ms against 91
/// before them (medians of 40), for memory it does not need to save (37 against 46 MiB).
///
/// mimalloc asks for huge pages for its arenas (2 MiB backed at the first touch of any byte
/// in them). They make reading a model faster (the 326 MB rx580 compile without them from
/// the start: 204 against 192 ms, medians of 40), but after the read most new memory is
/// small objects and tables that grow a piece at a time, and a huge page partly used holds
/// all of its 2 MiB: the deep 1.3 GB rx580 compile's peak private memory was 6 MiB higher
/// with them. From here on, the kernel backs new pages one 4 KiB page at a time (the same
/// 326 MB compile: 190 against 192 ms; the pages it has already are kept).
fn collect() {
    if !LARGE.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    // SAFETY: a collection of free memory; no allocation is touched.
    unsafe { mi_collect(true) }
    #[cfg(target_os = "linux")]
    // SAFETY: sets a flag of this process; no memory is touched. An error (a kernel without
    // the option) leaves huge pages as they were.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// For a compile of a large input: freed memory goes back to the system after 1 ms instead of
/// mimalloc's 10. Such a compile frees large tables as it grows them and analysis tables
/// between rounds; held 10 ms, they were still counted while the next ones were made: peak
/// private memory of the deep 1.3 GB rx580 compile 124 -> 104 MiB at the same CPU time (it
/// takes more page faults: 5,700 -> 13,600). Not for small inputs, whose runs are short and
/// gain nothing: the 50,000-node pin compile (3.6 MB) took 78 ms instead of 70 (medians of 30,
/// the same peak memory). `MIMALLOC_PURGE_DELAY` still decides when it is set.
fn purge_sooner() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets an option's value; mimalloc reads it when it next purges.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 1) }
    }
}

fn main() -> ExitCode {
    onnx_safeify::cli::on_large_input(large_input);
    onnx_safeify::on_freed(collect);
    let code = onnx_safeify::cli::run_then_exit(std::env::args_os());
    // The process ends here. Printed text is flushed and the process ends without the exit
    // handlers: mimalloc's hands every free page back to the system first, one `madvise` per
    // span (27 after a compile of 50,000 nodes), pages the kernel takes back at exit anyway.
    #[cfg(unix)]
    {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: `_exit` ends the process; nothing runs after it.
        unsafe { libc::_exit(i32::from(code)) }
    }
    #[cfg(not(unix))]
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    extern "C" {
        fn mi_option_get(option: libc::c_int) -> libc::c_long;
    }

    /// The option numbered 15 is the purge delay: its default is 10 (ms), between the eager
    /// commit delay (default 1) and the NUMA node count (default 0). Run without mimalloc's
    /// environment variables.
    #[test]
    fn the_purge_delay_is_option_15() {
        if std::env::vars().any(|(k, _)| k.starts_with("MIMALLOC_")) {
            eprintln!("skipped: a MIMALLOC_ variable is set");
            return;
        }
        // SAFETY: reads options' values.
        let (before, at, after) = unsafe {
            (
                mi_option_get(super::MI_OPTION_PURGE_DELAY - 1),
                mi_option_get(super::MI_OPTION_PURGE_DELAY),
                mi_option_get(super::MI_OPTION_PURGE_DELAY + 1),
            )
        };
        assert_eq!((before, at, after), (1, 10, 0));
        super::purge_sooner();
        // SAFETY: as above.
        assert_eq!(unsafe { mi_option_get(super::MI_OPTION_PURGE_DELAY) }, 1);
    }
}
