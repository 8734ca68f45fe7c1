//! `cli::on_large_input`: the hook the `onnx-safeify` binary uses to tune its allocator runs
//! once per compile of an input of `io::early::PREPARE_MIN` bytes or more, before the model is
//! read, and never for a smaller one. (A test binary of its own: the hook is set once per
//! process.)

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

static CALLS: AtomicUsize = AtomicUsize::new(0);

fn count() {
    CALLS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn the_hook_runs_for_large_inputs_only() {
    onnx_safeify::cli::on_large_input(count);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let run = |model: &std::path::Path| {
        onnx_safeify::cli::run([
            "onnx-safeify".as_ref(),
            model.as_os_str(),
            "--target".as_ref(),
            "rx580".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
        ])
    };
    // The sample (a few KiB) compiles without it.
    assert_eq!(run(&common::sample()), 0);
    assert_eq!(CALLS.load(Ordering::SeqCst), 0);
    // A file of PREPARE_MIN bytes: the hook runs before the model is read (this one is no
    // model: the compile then fails as broken input).
    let big = dir.path().join("big.onnx");
    let len = onnx_safeify::io::early::PREPARE_MIN;
    std::fs::write(&big, vec![0xffu8; len as usize]).unwrap();
    assert_eq!(run(&big), 2);
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    // One byte less: not large.
    std::fs::write(&big, vec![0xffu8; len as usize - 1]).unwrap();
    assert_eq!(run(&big), 2);
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
}
