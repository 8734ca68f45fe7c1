//! The fuzz targets' shared harness (also replayed by `tests/fuzz_regressions.rs`).
pub mod harness;
