//! The shipped sample is the project's own: regenerating it gives the same bytes, and it runs
//! on ONNX Runtime.

mod common;

#[test]
fn sample_regenerates_identically() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ocr_tiny.onnx");
    let o = std::process::Command::new(py)
        .arg(common::repo().join("tools/make_sample.py"))
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(common::sample()).unwrap(),
        "tools/make_sample.py no longer produces samples/ocr_tiny.onnx"
    );
    assert!(std::fs::metadata(&out).unwrap().len() < 1 << 20);
}
