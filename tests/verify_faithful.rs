//! Faithful pairs pass: a model against a byte copy of itself, and PP-OCR det against its
//! ONNX Runtime-optimised ("basic") variant.

mod verify_support;

use onnx_safeify::verify::cli::parse_args;
use onnx_safeify::verify::{run_cli, verify_models, VerifyOptions};
use verify_support::*;

const DET: &str = "real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx";
const DET_BASIC: &str = "ort_optimized/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.ort_basic.onnx";
const CLS: &str = "real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx";

#[test]
fn det_model_against_a_byte_copy_passes() {
    let Some(det) = corpus_file(DET) else { return };
    if !runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.onnx");
    std::fs::copy(&det, &copy).unwrap();
    let report = verify_models(&det, &copy, &VerifyOptions::default()).unwrap();
    assert!(report.passed(), "{}", report.to_text());
    let out = &report.runs[0].outputs[0];
    assert_eq!(out.name, "sigmoid_0.tmp_0");
    assert_eq!(out.shape, vec![1, 1, 64, 64]);
    assert_eq!(out.max_abs_err, Some(0.0));
    // The same through the command line code path, with JSON output.
    let args = parse_args([
        det.to_str().unwrap(),
        copy.to_str().unwrap(),
        "--format",
        "json",
        "--dim",
        "p2o.DynamicDimension.1=32",
        "--dim",
        "x[3]=96",
    ])
    .unwrap();
    assert_eq!(run_cli(&args), 0);
}

#[test]
fn det_model_against_its_ort_basic_variant_passes() {
    let (Some(det), Some(basic)) = (corpus_file(DET), corpus_file(DET_BASIC)) else {
        return;
    };
    if !runtime_available() {
        return;
    }
    let opts = VerifyOptions {
        runs: 2,
        ..VerifyOptions::default()
    };
    let report = verify_models(&det, &basic, &opts).unwrap();
    assert!(report.passed(), "{}", report.to_text());
    assert_eq!(report.runs.len(), 2);
    assert_ne!(report.runs[0].seed, report.runs[1].seed);
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["passed"], true);
    assert_eq!(json["runs"][1]["outputs"][0]["status"], "ok");
    assert!(json["onnxruntime"]["version"]
        .as_str()
        .unwrap()
        .starts_with("1."));
}

#[test]
fn cls_model_with_unnamed_and_negative_dims_passes_several_runs() {
    let Some(cls) = corpus_file(CLS) else { return };
    if !runtime_available() {
        return;
    }
    let args = parse_args([
        cls.to_str().unwrap(),
        cls.to_str().unwrap(),
        "--runs",
        "3",
        "--dim",
        "?=48",
        "--dim",
        "x[3]=192",
    ])
    .unwrap();
    let opts = args.to_options().unwrap();
    let report = verify_models(&cls, &cls, &opts).unwrap();
    assert!(report.passed(), "{}", report.to_text());
    assert_eq!(report.runs.len(), 3);
    let text = report.to_text();
    assert!(text.contains("x float32[1,3,48,192]"), "{text}");
    assert!(text.contains("PASS"), "{text}");
}

#[test]
fn contrib_op_model_against_itself_passes() {
    let Some(m) = corpus_file("contrib/FusedConv_Relu.onnx") else {
        return;
    };
    if !runtime_available() {
        return;
    }
    let report = verify_models(&m, &m, &VerifyOptions::default()).unwrap();
    assert!(report.passed(), "{}", report.to_text());
}

#[test]
fn tiny_model_against_an_equivalent_rewrite_passes() {
    if !runtime_available() {
        return;
    }
    // relu(x*w) rewritten as max(x*w, 0).
    let dir = tempfile::tempdir().unwrap();
    let a = write_model(dir.path(), "a.onnx", &two_output_model());
    let mut rewritten = two_output_model();
    {
        let g = rewritten.graph.as_mut().unwrap();
        g.node[1] = node("Max", &["xw", "zero"], &["y"], vec![]);
        g.initializer.push(f32_initializer("zero", &[], &[0.0]));
    }
    let b = write_model(dir.path(), "b.onnx", &rewritten);
    let report = verify_models(&a, &b, &VerifyOptions::default()).unwrap();
    assert!(report.passed(), "{}", report.to_text());
    assert_eq!(report.runs[0].outputs.len(), 2);
}
