//! The early copy (`io::EarlyCopy`): a target without rules copies the input to the output's
//! folder while the model is read. The copy becomes the output only when the output is the
//! input's bytes; otherwise it is cancelled, and in every case no temporary file is left.

mod common;

use std::path::Path;
use std::process::Command;

use onnx_safeify::io::EarlyCopy;
use onnx_safeify::proto::ModelProto;
use prost::Message;

/// `onnx-safeify MODEL --target none [-o OUT]`.
fn compile_none(model: &Path, out: Option<&Path>) -> std::process::Output {
    let mut c = Command::new(common::bin());
    c.arg(model).args(["--target", "none"]);
    if let Some(o) = out {
        c.arg("-o").arg(o);
    }
    c.output().unwrap()
}

/// The names in a folder, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The sample model's bytes, with the graph (field 7) written before the other fields: the
/// same model, but not the encoding onnx-safeify writes.
fn reordered_sample() -> Vec<u8> {
    let m = ModelProto::decode(std::fs::read(common::sample()).unwrap().as_slice()).unwrap();
    let graph_only = ModelProto {
        graph: m.graph.clone(),
        ..Default::default()
    };
    let rest = ModelProto {
        graph: None,
        ..m.clone()
    };
    let mut bytes = graph_only.encode_to_vec();
    bytes.extend(rest.encode_to_vec());
    assert_eq!(ModelProto::decode(bytes.as_slice()).unwrap(), m);
    bytes
}

#[test]
fn an_unchanged_model_is_the_early_copy() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.onnx");
    std::fs::copy(common::sample(), &src).unwrap();
    let out = dir.path().join("out.onnx");
    let early = EarlyCopy::start(&src, &out).expect("the copy starts");
    let doc = onnx_safeify::load(&src).unwrap();
    let s = onnx_safeify::save_with(&doc, &out, Some(early)).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&src).unwrap());
    assert_eq!(s.bytes, std::fs::metadata(&src).unwrap().len());
    assert_eq!(listing(dir.path()), ["in.onnx", "out.onnx"]);
}

#[test]
fn a_changed_model_cancels_the_early_copy() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.onnx");
    std::fs::copy(common::sample(), &src).unwrap();
    let (early_out, plain_out) = (dir.path().join("a.onnx"), dir.path().join("b.onnx"));
    let early = EarlyCopy::start(&src, &early_out).expect("the copy starts");
    let mut doc = onnx_safeify::load(&src).unwrap();
    doc.model.doc_string = Some("changed".into());
    onnx_safeify::save_with(&doc, &early_out, Some(early)).unwrap();
    onnx_safeify::save(&doc, &plain_out).unwrap();
    let written = std::fs::read(&early_out).unwrap();
    assert_ne!(written, std::fs::read(&src).unwrap());
    assert_eq!(written, std::fs::read(&plain_out).unwrap());
    assert_eq!(listing(dir.path()), ["a.onnx", "b.onnx", "in.onnx"]);
}

#[test]
fn an_input_in_another_encoding_is_written_as_usual() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.onnx");
    std::fs::write(&src, reordered_sample()).unwrap();
    let st = compile_none(&src, Some(&dir.path().join("out.onnx")));
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    // The output is our encoding of the same model (the early copy was not used)...
    let out = std::fs::read(dir.path().join("out.onnx")).unwrap();
    assert_eq!(out, std::fs::read(common::sample()).unwrap());
    // ...and the copy was removed.
    assert_eq!(listing(dir.path()), ["in.onnx", "out.onnx"]);
}

#[test]
fn the_cli_leaves_only_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.onnx");
    std::fs::copy(common::sample(), &src).unwrap();
    let st = compile_none(&src, None);
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(
        std::fs::read(dir.path().join("in.none.onnx")).unwrap(),
        std::fs::read(&src).unwrap()
    );
    assert_eq!(listing(dir.path()), ["in.none.onnx", "in.onnx"]);
}

#[test]
fn refusals_leave_the_input_and_no_copy() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.onnx");
    std::fs::copy(common::sample(), &src).unwrap();
    let before = std::fs::read(&src).unwrap();
    // The output would replace the input.
    let st = compile_none(&src, Some(&src));
    assert_eq!(
        st.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert!(String::from_utf8_lossy(&st.stderr).contains("refusing to overwrite the input"));
    // The output is a folder.
    let st = compile_none(&src, Some(dir.path()));
    assert_eq!(
        st.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    // The output's folder does not exist: the copy cannot start, the save says why.
    let st = compile_none(&src, Some(&dir.path().join("missing/out.onnx")));
    assert_eq!(
        st.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(std::fs::read(&src).unwrap(), before);
    assert_eq!(listing(dir.path()), ["in.onnx"]);
}

#[test]
fn a_broken_input_leaves_no_copy() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.onnx");
    let mut bytes = std::fs::read(common::sample()).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&src, &bytes).unwrap();
    let st = compile_none(&src, Some(&dir.path().join("out.onnx")));
    assert_eq!(
        st.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(listing(dir.path()), ["in.onnx"]);
}

/// White-box: the bytes written are the early copy's (the copy of the file at the path the
/// copy started from), not a second write of the model.
#[test]
fn the_output_is_the_early_copy_itself() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.onnx");
    std::fs::copy(common::sample(), &src).unwrap();
    let mut marked = std::fs::read(&src).unwrap();
    let last = marked.len() - 1;
    marked[last] ^= 0xff;
    let decoy = dir.path().join("decoy.onnx");
    std::fs::write(&decoy, &marked).unwrap();
    let out = dir.path().join("out.onnx");
    let early = EarlyCopy::start(&decoy, &out).expect("the copy starts");
    let doc = onnx_safeify::load(&src).unwrap();
    onnx_safeify::save_with(&doc, &out, Some(early)).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), marked);
}

/// The pages written ahead for a target with rules (`EarlyCopy::prepare`, zeros as long as the
/// input) are written over: the output is what a save without them writes, cut to its length,
/// and no other file is left.
#[test]
fn a_prepared_file_is_written_over_and_cut_to_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.onnx");
    std::fs::copy(common::sample(), &src).unwrap();
    // Only the length of the file `prepare` is given counts: one larger than the output.
    let big = dir.path().join("big.bin");
    let len = onnx_safeify::io::early::PREPARE_MIN + 12_345;
    std::fs::File::create(&big).unwrap().set_len(len).unwrap();
    let (early_out, plain_out) = (dir.path().join("a.onnx"), dir.path().join("b.onnx"));
    let early = EarlyCopy::prepare(&big, &early_out).expect("the pages are written ahead");
    assert!(!early.is_copy());
    let mut doc = onnx_safeify::load(&src).unwrap();
    doc.model.doc_string = Some("changed".into());
    let s = onnx_safeify::save_with(&doc, &early_out, Some(early)).unwrap();
    onnx_safeify::save(&doc, &plain_out).unwrap();
    let written = std::fs::read(&early_out).unwrap();
    assert_eq!(written, std::fs::read(&plain_out).unwrap());
    assert_eq!(s.bytes, written.len() as u64);
    assert_eq!(
        listing(dir.path()),
        ["a.onnx", "b.onnx", "big.bin", "in.onnx"]
    );
    // An unchanged model is written over them too (they are no copy of the input).
    let early = EarlyCopy::prepare(&big, &early_out).unwrap();
    let doc = onnx_safeify::load(&src).unwrap();
    onnx_safeify::save_with(&doc, &early_out, Some(early)).unwrap();
    assert_eq!(
        std::fs::read(&early_out).unwrap(),
        std::fs::read(&src).unwrap()
    );
    // A small input has none; dropped unused, the file is removed.
    assert!(EarlyCopy::prepare(&src, &early_out).is_none());
    drop(EarlyCopy::prepare(&big, &dir.path().join("c.onnx")).unwrap());
    assert_eq!(
        listing(dir.path()),
        ["a.onnx", "b.onnx", "big.bin", "in.onnx"]
    );
}
