//! `on_freed`: the hook the `onnx-safeify` binary uses to hand free memory back to the system
//! runs once after every model read, when the read's temporary memory is freed, and not for a
//! read that fails. (A test binary of its own: the hook is set once per process.)

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

static CALLS: AtomicUsize = AtomicUsize::new(0);

fn count() {
    CALLS.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn the_hook_runs_once_per_model_read() {
    onnx_safeify::on_freed(count);
    let doc = onnx_safeify::load(&common::sample()).unwrap();
    assert!(doc.model.graph.nodes.node_count() > 0);
    assert_eq!(CALLS.load(Ordering::SeqCst), 1);
    // A compile reads the model once.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let code = onnx_safeify::cli::run([
        "onnx-safeify".as_ref(),
        common::sample().as_os_str(),
        "--target".as_ref(),
        "rx580".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert_eq!(code, 0);
    assert_eq!(CALLS.load(Ordering::SeqCst), 2);
    // A file that is no model: the read fails, and nothing was read to free.
    let broken = dir.path().join("broken.onnx");
    std::fs::write(&broken, [0xffu8; 64]).unwrap();
    assert!(onnx_safeify::load(&broken).is_err());
    assert_eq!(CALLS.load(Ordering::SeqCst), 2);
}
