//! Partitioned rewrites (a manifest of segment models run as a chain) and annotated ones
//! (`layer_ann` node metadata, run with session.layer_assignment_settings).

mod verify_support;

use std::path::Path;

use onnx_safeify::verify::cli::parse_args;
use onnx_safeify::verify::{run_cli, verify_models, VerifyError, VerifyOptions};
use verify_support::*;

const DET: &str = "real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx";
const DET_BASIC: &str = "ort_optimized/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.ort_basic.onnx";

fn yaml_list(names: &[String]) -> String {
    format!(
        "[{}]",
        names
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Writes seg0.onnx, seg1.onnx and manifest.yaml into `dir`.
fn write_split(dir: &Path, m: &onnx_safeify::proto::ModelProto, k: usize) -> Vec<String> {
    let (s0, s1, crossing) = split_model(m, k);
    write_model(dir, "seg0.onnx", &s0);
    write_model(dir, "seg1.onnx", &s1);
    let ins0: Vec<String> = s0
        .graph
        .as_ref()
        .unwrap()
        .input
        .iter()
        .map(|v| v.name.clone().unwrap())
        .collect();
    let ins1: Vec<String> = s1
        .graph
        .as_ref()
        .unwrap()
        .input
        .iter()
        .map(|v| v.name.clone().unwrap())
        .collect();
    let outs1: Vec<String> = s1
        .graph
        .as_ref()
        .unwrap()
        .output
        .iter()
        .map(|v| v.name.clone().unwrap())
        .collect();
    let manifest = format!(
        "# two segments\nsegments:\n  - file: seg0.onnx\n    device: gpu\n    inputs: {}\n    outputs: {}\n  - file: seg1.onnx\n    device: cpu\n    inputs: {}\n    outputs: {}\n",
        yaml_list(&ins0),
        yaml_list(&crossing),
        yaml_list(&ins1),
        yaml_list(&outs1)
    );
    std::fs::write(dir.join("manifest.yaml"), manifest).unwrap();
    crossing
}

#[test]
fn tiny_model_split_in_two_passes_and_a_tampered_segment_fails() {
    if !runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let whole = write_model(dir.path(), "whole.onnx", &two_output_model());
    let parts = dir.path().join("parts");
    std::fs::create_dir(&parts).unwrap();
    let crossing = write_split(&parts, &two_output_model(), 1);
    assert_eq!(crossing, vec!["xw".to_string()]);
    // The folder and the manifest itself both name the chain.
    let report = verify_models(&whole, &parts, &VerifyOptions::default()).unwrap();
    assert!(report.passed(), "{}", report.to_text());
    assert_eq!(report.sessions.len(), 3);
    assert_eq!(report.sessions[1].device.as_deref(), Some("gpu"));
    let manifest = parts.join("manifest.yaml");
    let args = parse_args([
        whole.to_str().unwrap(),
        manifest.to_str().unwrap(),
        "--runs",
        "2",
    ])
    .unwrap();
    assert_eq!(run_cli(&args), 0);
    // The chain can be the original too.
    assert!(verify_models(&manifest, &whole, &VerifyOptions::default())
        .unwrap()
        .passed());

    // Second segment computes sigmoid(xw) instead of sigmoid(x).
    let (_, mut s1, _) = split_model(&two_output_model(), 1);
    s1.graph.as_mut().unwrap().node[1].input[0] = "xw".into();
    write_model(&parts, "seg1.onnx", &s1);
    let report = verify_models(&whole, &manifest, &VerifyOptions::default()).unwrap();
    assert!(!report.passed());
    assert!(report.runs[0].outputs[0].passed());
    assert!(!report.runs[0].outputs[1].passed());
}

#[test]
fn det_model_split_in_two_passes_on_a_text_page() {
    let (Some(det), Some(basic)) = (corpus_file(DET), corpus_file(DET_BASIC)) else {
        return;
    };
    if !runtime_available() {
        return;
    }
    let m = read_model(&basic);
    let g = m.graph.as_ref().unwrap();
    // Cut in the middle at a point where every crossing tensor comes from a float op.
    let float_ops = [
        "Conv",
        "Add",
        "Mul",
        "Relu",
        "HardSigmoid",
        "Clip",
        "Div",
        "BatchNormalization",
    ];
    let producer: std::collections::HashMap<&str, &str> = g
        .node
        .iter()
        .flat_map(|n| {
            n.output
                .iter()
                .map(move |o| (o.as_str(), n.op_type.as_deref().unwrap_or("")))
        })
        .collect();
    let k = (g.node.len() / 2..g.node.len())
        .find(|&k| {
            let (_, _, crossing) = split_model(&m, k);
            !crossing.is_empty()
                && crossing.iter().all(|c| {
                    producer
                        .get(c.as_str())
                        .is_some_and(|op| float_ops.contains(op))
                })
        })
        .expect("a cut point");
    let dir = tempfile::tempdir().unwrap();
    let crossing = write_split(dir.path(), &m, k);
    assert!(!crossing.is_empty());
    let page = text_page_npz(dir.path(), 96, 96, 4);
    let opts = VerifyOptions {
        inputs: Some(page),
        ..VerifyOptions::default()
    };
    let report = verify_models(&det, dir.path(), &opts).unwrap();
    assert!(report.passed(), "{}", report.to_text());
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
}

#[test]
fn broken_manifests_are_errors_naming_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let whole = write_model(dir.path(), "whole.onnx", &two_output_model());
    let parts = dir.path().join("parts");
    std::fs::create_dir(&parts).unwrap();
    write_split(&parts, &two_output_model(), 1);
    let manifest = parts.join("manifest.yaml");
    let check = |text: &str, needle: &str| {
        std::fs::write(&manifest, text).unwrap();
        let err = verify_models(&whole, &manifest, &VerifyOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(needle), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
        let args = parse_args([whole.to_str().unwrap(), manifest.to_str().unwrap()]).unwrap();
        assert_eq!(run_cli(&args), 2);
        err
    };
    let e = check(
        "segments:\n  - file: seg0.onnx\n    devise: gpu\n",
        "line 3",
    );
    assert!(matches!(e, VerifyError::Manifest { .. }));
    check("segments: []\n", "no segments");
    check("segments:\n  - file: nope.onnx\n", "nope.onnx");
    check(
        "segments:\n  - file: seg0.onnx\n    outputs: [q]\n",
        "'q' is not an output",
    );
    // seg1 alone needs 'xw', which nothing produces: it becomes a chain input the
    // original does not have.
    check("segments:\n  - file: seg1.onnx\n", "'xw'");
    check(
        "segments:\n  - file: seg0.onnx\n  - file: seg1.onnx\noutputs: [nothing]\n",
        "'nothing' is produced by no segment",
    );
    std::fs::remove_file(&manifest).unwrap();
    let err = verify_models(&whole, &parts, &VerifyOptions::default()).unwrap_err();
    assert!(err.to_string().contains("manifest.yaml"), "{err}");
}

#[test]
fn annotated_model_runs_with_layer_assignment() {
    let Some(det) = corpus_file(DET) else { return };
    if !runtime_available() {
        return;
    }
    let mut m = read_model(&det);
    for n in m.graph.as_mut().unwrap().node.iter_mut() {
        match n.op_type.as_deref() {
            Some("HardSigmoid") => annotate(n, "safeify_cpu"),
            Some("Resize") => annotate(n, "safeify_cpu_resize"),
            _ => {}
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let annotated = write_model(dir.path(), "annotated.onnx", &m);
    let page = text_page_npz(dir.path(), 96, 96, 5);
    let opts = VerifyOptions {
        inputs: Some(page.clone()),
        ..VerifyOptions::default()
    };
    let report = verify_models(&det, &annotated, &opts).unwrap();
    assert!(report.passed(), "{}", report.to_text());
    assert_eq!(report.sessions[0].layer_assignment, None);
    assert_eq!(
        report.sessions[1].layer_assignment.as_deref(),
        Some("cpu(safeify_cpu,safeify_cpu_resize)")
    );
    assert!(report
        .to_text()
        .contains("session.layer_assignment_settings=cpu(safeify_cpu,safeify_cpu_resize)"));
    // Annotated and tampered: still caught.
    for n in m.graph.as_mut().unwrap().node.iter_mut() {
        if n.op_type.as_deref() == Some("HardSigmoid") {
            n.op_type = Some("Sigmoid".into());
            n.attribute.clear();
        }
    }
    let bad = write_model(dir.path(), "annotated_bad.onnx", &m);
    let args = parse_args([
        det.to_str().unwrap(),
        bad.to_str().unwrap(),
        "--inputs",
        page.to_str().unwrap(),
    ])
    .unwrap();
    assert_eq!(run_cli(&args), 1);
}
