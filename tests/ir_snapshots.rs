//! Golden IR dumps of the real PP-OCR models and the shipped sample: any drift in what the
//! importer sees (ops, order, attributes, weights by hash) fails here.

mod common;

use std::path::Path;

fn snapshot(name: &str, path: &Path) {
    let doc = onnx_safeify::load(path).unwrap_or_else(|e| panic!("{e}"));
    let text = onnx_safeify::ir::dump::dump_model(&doc.model);
    insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
        insta::assert_snapshot!(name, text);
    });
}

#[test]
fn sample_ir() {
    snapshot("ir_sample_ocr_tiny", &common::sample());
}

#[test]
fn ppocr_ir() {
    let Some(c) = common::corpus() else { return };
    snapshot(
        "ir_ppocrv4_det",
        &c.join("real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx"),
    );
    snapshot(
        "ir_ppocrv4_rec",
        &c.join("real/rapidocr_onnxruntime__ch_PP-OCRv4_rec_infer.onnx"),
    );
    snapshot(
        "ir_ppocr_cls",
        &c.join("real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx"),
    );
}

#[test]
fn sample_inspect() {
    let doc = onnx_safeify::load(&common::sample()).unwrap();
    let text = onnx_safeify::inspect::render_text(&onnx_safeify::inspect::summarize(&doc.model));
    insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
        insta::assert_snapshot!("inspect_sample_ocr_tiny", text);
    });
}
