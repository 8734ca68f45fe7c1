//! The `onnx-safeify` command. Everything it does lives in the library
//! ([`onnx_safeify::cli`]), which the Python wheel's console script runs too.

use std::process::ExitCode;

// The IR is many small allocations; mimalloc makes import/export several times faster than
// glibc's malloc on large graphs. (The Python extension keeps the interpreter's malloc.)
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
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
