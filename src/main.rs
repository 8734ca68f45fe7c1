//! The `onnx-safeify` command. Everything it does lives in the library
//! ([`onnx_safeify::cli`]), which the Python wheel's console script runs too.

use std::process::ExitCode;

// The IR is many small allocations; mimalloc makes import/export several times faster than
// glibc's malloc on large graphs. (The Python extension keeps the interpreter's malloc.)
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    ExitCode::from(onnx_safeify::cli::run_then_exit(std::env::args_os()))
}
