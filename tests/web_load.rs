//! Outputs load wherever the original loads (issue 46): the `rx580` and `webgpu` outputs of
//! corpus models are created and run on onnxruntime-web (WebGPU provider, headless Chromium)
//! with the runtime settings their targets ask for, next to the originals on the same inputs
//! (`tools/web_load_survey.py`, which exits 1 when an output fails where its original runs).
//!
//! The models: the three OCR models (PP-OCRv4 rec's `rx580` output once held a time barrier on
//! an int64 shape value, and a `layer_ann` pin reading a value onnxruntime-web keeps on its CPU
//! makes its session creation fail with `std::bad_alloc`), det quantized and saved by ONNX
//! Runtime at level "all" (its QLinearAdd nodes once decomposed through float64, which the web
//! build's CPU side cannot run), an int8 BERT and an int4 ViT. The QOperator models' rx580
//! outputs are held by tests/rx580_qoperator.rs; `tools/web_load_survey.py` over the whole
//! corpus gives the figures in NOTES.md.
//!
//! Needs scripts/setup-runtimes.sh (Chromium, tools/webgpu/node_modules) and the corpus; fails
//! without them unless ONNX_SAFEIFY_ALLOW_MISSING_RUNTIMES=1 / ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1.

mod common;
mod runtimes_support;

use std::path::PathBuf;
use std::process::Command;

use onnx_safeify::verify::RuntimeKind;

const MODELS: &[&str] = &[
    "real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx",
    "real/rapidocr_onnxruntime__ch_PP-OCRv4_rec_infer.onnx",
    "real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx",
    "quantized/ch_PP-OCRv4_det_infer.qdq.ort_all.onnx",
    "transformers/bert_plain_int8.onnx",
    "transformers/vit_int4.onnx",
];

fn python() -> PathBuf {
    let venv = std::env::var_os("ONNX_SAFEIFY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::cache_dir().join("venv"));
    venv.join("bin").join("python")
}

#[test]
fn rx580_and_webgpu_outputs_run_on_onnxruntime_web_where_the_originals_run() {
    if !runtimes_support::ready(RuntimeKind::Webgpu) {
        return;
    }
    let Some(corpus) = common::corpus() else {
        return;
    };
    let py = python();
    assert!(py.exists(), "no venv Python at {}", py.display());
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new(&py);
    cmd.arg(root.join("tools/web_load_survey.py"))
        .args(["--bin", env!("CARGO_BIN_EXE_onnx-safeify")])
        .args(["--targets", "rx580,webgpu", "--batch", "6"]);
    for m in MODELS {
        let p = corpus.join(m);
        assert!(p.exists(), "corpus model missing: {}", p.display());
        cmd.arg(p);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    // Every original ran (the inputs are valid), so every output was held to it.
    let last = stdout.lines().last().unwrap_or_default();
    let want = format!("originals that run: {n} of {n}", n = MODELS.len());
    assert!(last.contains(&want), "{stdout}");
    let ok = stdout
        .lines()
        .filter(|l| l.trim_end().ends_with(" ok"))
        .count();
    assert_eq!(ok, 2 * MODELS.len(), "{stdout}");
}
