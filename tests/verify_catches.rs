//! Unfaithful rewrites are caught: a tampered weight, swapped outputs, a changed op or
//! attribute, a missing output, another dtype or shape.

mod verify_support;

use onnx_safeify::verify::cli::parse_args;
use onnx_safeify::verify::{run_cli, verify_models, Status, VerifyError, VerifyOptions};
use verify_support::*;

const DET: &str = "real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx";
const DET_BASIC: &str = "ort_optimized/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.ort_basic.onnx";
const CLS: &str = "real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx";
const CLS_BASIC: &str =
    "ort_optimized/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.ort_basic.onnx";

fn cli(a: &std::path::Path, b: &std::path::Path) -> u8 {
    run_cli(&parse_args([a.to_str().unwrap(), b.to_str().unwrap()]).unwrap())
}

/// `verify A B --inputs INPUTS`.
fn cli_with_inputs(a: &std::path::Path, b: &std::path::Path, inputs: &std::path::Path) -> u8 {
    run_cli(
        &parse_args([
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--inputs",
            inputs.to_str().unwrap(),
        ])
        .unwrap(),
    )
}

/// Multiplies every float of an initializer's raw data by 1.5 and adds 0.01.
fn tamper(m: &mut onnx_safeify::proto::ModelProto, name: &str) {
    let g = m.graph.as_mut().unwrap();
    let w = g
        .initializer
        .iter_mut()
        .find(|t| t.name.as_deref() == Some(name))
        .expect("initializer");
    let raw = w.raw_data.as_ref().expect("raw_data");
    let tampered: Vec<u8> = raw
        .chunks_exact(4)
        .flat_map(|c| (f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * 1.5 + 0.01).to_le_bytes())
        .collect();
    w.raw_data = Some(tampered.into());
}

#[test]
fn tampered_initializer_is_caught() {
    let (Some(cls), Some(cls_basic)) = (corpus_file(CLS), corpus_file(CLS_BASIC)) else {
        return;
    };
    let (Some(det), Some(det_basic)) = (corpus_file(DET), corpus_file(DET_BASIC)) else {
        return;
    };
    if !runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The classifier: random inputs are enough, its softmax output is never degenerate.
    let mut m = read_model(&cls_basic);
    tamper(&mut m, "ConvBnFusion_W_conv1_weights");
    let bad = write_model(dir.path(), "cls_tampered.onnx", &m);
    let report = verify_models(&cls, &bad, &VerifyOptions::default()).unwrap();
    assert!(!report.passed(), "{}", report.to_text());
    assert_eq!(report.runs[0].outputs[0].status, Status::Mismatch);
    assert_eq!(cli(&cls, &bad), 1);
    assert_eq!(cli(&cls, &cls_basic), 0);
    // The detector: on noise its output is ~0 everywhere (no text), so random inputs prove
    // little (the report warns); on a synthetic page of text the tampering shows.
    let mut m = read_model(&det_basic);
    tamper(&mut m, "ConvBnFusion_W_conv2d_0.w_0");
    let bad = write_model(dir.path(), "det_tampered.onnx", &m);
    let noise = verify_models(&det, &bad, &VerifyOptions::default()).unwrap();
    assert!(
        noise.warnings.iter().any(|w| w.contains("proves little")),
        "{}",
        noise.to_text()
    );
    let page = text_page_npz(dir.path(), 96, 96, 1);
    let opts = VerifyOptions {
        inputs: Some(page.clone()),
        ..VerifyOptions::default()
    };
    let report = verify_models(&det, &bad, &opts).unwrap();
    assert!(!report.passed(), "{}", report.to_text());
    assert!(report.runs[0].outputs[0].max_abs_err.unwrap() > 1e-3);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(cli_with_inputs(&det, &bad, &page), 1);
    assert_eq!(cli_with_inputs(&det, &det_basic, &page), 0);
}

#[test]
fn tampered_constant_weight_is_caught() {
    let Some(det) = corpus_file(DET) else { return };
    if !runtime_available() {
        return;
    }
    // This model keeps its weights in Constant nodes: change the first conv weight's.
    let mut m = read_model(&det);
    {
        let g = m.graph.as_mut().unwrap();
        let conv_w = g
            .node
            .iter()
            .find(|n| n.op_type.as_deref() == Some("Conv"))
            .map(|n| n.input[1].clone())
            .unwrap();
        let c = g
            .node
            .iter_mut()
            .find(|n| n.op_type.as_deref() == Some("Constant") && n.output[0] == conv_w)
            .unwrap();
        let t = c.attribute[0].t.as_mut().unwrap();
        let mut raw = t.raw_data.as_ref().unwrap().to_vec();
        raw[0..4].copy_from_slice(&5.0f32.to_le_bytes());
        t.raw_data = Some(raw.into());
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = write_model(dir.path(), "tampered.onnx", &m);
    let page = text_page_npz(dir.path(), 96, 96, 2);
    assert_eq!(cli_with_inputs(&det, &bad, &page), 1);
    assert_eq!(cli_with_inputs(&det, &det, &page), 0);
}

#[test]
fn changed_op_and_changed_attribute_are_caught() {
    let (Some(det), Some(cls)) = (corpus_file(DET), corpus_file(CLS)) else {
        return;
    };
    if !runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = text_page_npz(dir.path(), 96, 96, 3);
    for (model, name) in [(&det, "det"), (&cls, "cls")] {
        // Relu -> Sigmoid on the first Relu.
        let mut m = read_model(model);
        let relu = m
            .graph
            .as_mut()
            .unwrap()
            .node
            .iter_mut()
            .find(|n| n.op_type.as_deref() == Some("Relu"))
            .unwrap();
        relu.op_type = Some("Sigmoid".into());
        let sig = write_model(dir.path(), &format!("{name}_sigmoid.onnx"), &m);
        // HardSigmoid alpha changed on every such node.
        let mut m = read_model(model);
        for n in m.graph.as_mut().unwrap().node.iter_mut() {
            if n.op_type.as_deref() == Some("HardSigmoid") {
                for a in &mut n.attribute {
                    if a.name.as_deref() == Some("alpha") {
                        a.f = Some(a.f.unwrap_or(0.2) * 1.25);
                    }
                }
            }
        }
        let alpha = write_model(dir.path(), &format!("{name}_alpha.onnx"), &m);
        if name == "det" {
            let opts = VerifyOptions {
                inputs: Some(page.clone()),
                ..VerifyOptions::default()
            };
            let report = verify_models(model, &sig, &opts).unwrap();
            assert!(!report.passed(), "{}", report.to_text());
            assert!(report.to_text().contains("FAIL"));
            assert_eq!(cli_with_inputs(model, &alpha, &page), 1);
        } else {
            assert_eq!(cli(model, &sig), 1);
            assert_eq!(cli(model, &alpha), 1);
        }
    }
}

#[test]
fn swapped_outputs_are_caught() {
    if !runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = write_model(dir.path(), "a.onnx", &two_output_model());
    // The same computation with the names of the two outputs exchanged.
    let mut swapped = two_output_model();
    {
        let g = swapped.graph.as_mut().unwrap();
        g.node[1].output[0] = "z".into();
        g.node[2].output[0] = "y".into();
    }
    let b = write_model(dir.path(), "b.onnx", &swapped);
    let report = verify_models(&a, &b, &VerifyOptions::default()).unwrap();
    assert!(!report.passed());
    let statuses: Vec<Status> = report.runs[0].outputs.iter().map(|o| o.status).collect();
    assert_eq!(statuses, vec![Status::Mismatch, Status::Mismatch]);
    assert_eq!(cli(&a, &b), 1);
    // Only reordering the declared outputs is faithful: outputs are matched by name.
    let mut reordered = two_output_model();
    reordered.graph.as_mut().unwrap().output.reverse();
    let c = write_model(dir.path(), "c.onnx", &reordered);
    assert_eq!(cli(&a, &c), 0);
}

#[test]
fn missing_output_dtype_and_shape_changes_are_caught() {
    if !runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = write_model(dir.path(), "a.onnx", &two_output_model());

    let mut missing = two_output_model();
    missing.graph.as_mut().unwrap().output.truncate(1);
    let b = write_model(dir.path(), "missing.onnx", &missing);
    let report = verify_models(&a, &b, &VerifyOptions::default()).unwrap();
    assert_eq!(report.runs[0].outputs[1].status, Status::Missing);
    assert!(!report.passed());

    let mut dtype = two_output_model();
    {
        let g = dtype.graph.as_mut().unwrap();
        g.node[2].output[0] = "z32".into();
        g.node.push(node(
            "Cast",
            &["z32"],
            &["z"],
            vec![attr_i("to", DOUBLE as i64)],
        ));
        g.output[1] = value_info("z", DOUBLE, Some(&[2, 3]));
    }
    let c = write_model(dir.path(), "dtype.onnx", &dtype);
    let report = verify_models(&a, &c, &VerifyOptions::default()).unwrap();
    assert_eq!(report.runs[0].outputs[1].status, Status::DtypeMismatch);

    let mut shape = two_output_model();
    {
        let g = shape.graph.as_mut().unwrap();
        g.node[2].output[0] = "z2".into();
        g.node
            .push(node("Flatten", &["z2"], &["z"], vec![attr_i("axis", 0)]));
        g.output[1] = value_info("z", FLOAT, None);
    }
    let d = write_model(dir.path(), "shape.onnx", &shape);
    let report = verify_models(&a, &d, &VerifyOptions::default()).unwrap();
    assert_eq!(report.runs[0].outputs[1].status, Status::ShapeMismatch);
    assert_eq!(report.runs[0].outputs[0].status, Status::Ok);
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["passed"], false);
    assert_eq!(json["runs"][0]["outputs"][1]["status"], "shape_mismatch");
}

#[test]
fn small_differences_respect_the_tolerances() {
    if !runtime_available() {
        return;
    }
    // y = x * 1.001 against y = x: |a-b| <= 1e-3*|x| < atol + rtol*|b| only with rtol 2e-3.
    let make = |scale: f32| {
        model(
            vec![node("Mul", &["x", "s"], &["y"], vec![])],
            vec![value_info("x", FLOAT, Some(&[4, 4]))],
            vec![value_info("y", FLOAT, Some(&[4, 4]))],
            vec![f32_initializer("s", &[], &[scale])],
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let a = write_model(dir.path(), "a.onnx", &make(1.0));
    let b = write_model(dir.path(), "b.onnx", &make(1.001));
    assert_eq!(cli(&a, &b), 1);
    let loose = parse_args([a.to_str().unwrap(), b.to_str().unwrap(), "--rtol", "2e-3"]).unwrap();
    assert_eq!(run_cli(&loose), 0);
    let abs = parse_args([
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--rtol",
        "0",
        "--atol",
        "1.1e-3",
    ])
    .unwrap();
    assert_eq!(run_cli(&abs), 0);
}

#[test]
fn unusable_files_are_one_line_errors_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let good = write_model(dir.path(), "good.onnx", &two_output_model());
    let garbage = dir.path().join("garbage.onnx");
    std::fs::write(&garbage, b"this is not a protobuf \xff\xff\xff").unwrap();
    let empty = dir.path().join("empty.onnx");
    std::fs::write(&empty, b"").unwrap();
    let missing = dir.path().join("nope.onnx");
    for bad in [&garbage, &empty, &missing, &dir.path().to_path_buf()] {
        let err = verify_models(&good, bad, &VerifyOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(bad.to_str().unwrap()), "{err}");
        assert!(!err.contains('\n'), "{err}");
        assert_eq!(cli(&good, bad), 2);
    }
    // An input the original lacks.
    let mut extra = two_output_model();
    extra
        .graph
        .as_mut()
        .unwrap()
        .input
        .push(value_info("extra", FLOAT, Some(&[1])));
    let e = write_model(dir.path(), "extra.onnx", &extra);
    let err = verify_models(&good, &e, &VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("extra.onnx") && err.contains("'extra'"),
        "{err}"
    );
    // Bad option values.
    let args = parse_args([
        good.to_str().unwrap(),
        good.to_str().unwrap(),
        "--dim",
        "nonsense",
    ])
    .unwrap();
    assert_eq!(run_cli(&args), 2);
    let args = parse_args([
        good.to_str().unwrap(),
        good.to_str().unwrap(),
        "--runs",
        "0",
    ])
    .unwrap();
    assert_eq!(run_cli(&args), 2);
}

#[test]
fn truncated_models_and_corrupt_input_files_never_panic() {
    let have_runtime = runtime_available();
    let dir = tempfile::tempdir().unwrap();
    let good = write_model(dir.path(), "good.onnx", &two_output_model());
    let bytes = std::fs::read(&good).unwrap();
    let cut = dir.path().join("cut.onnx");
    // Truncations that still decode to a model both can run need ONNX Runtime to go further.
    let mut need_runtime = 0;
    for len in (1..bytes.len()).step_by(3) {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let r = std::panic::catch_unwind(|| verify_models(&good, &cut, &VerifyOptions::default()));
        let r = r.unwrap_or_else(|_| panic!("panic on a model truncated to {len} bytes"));
        match r {
            Err(VerifyError::RuntimeNotFound(_)) if !have_runtime => need_runtime += 1,
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("cut.onnx"), "{len}: {msg}");
                assert!(!msg.contains('\n'), "{msg}");
            }
            Ok(_) => assert!(have_runtime),
        }
    }
    if need_runtime > 0 {
        eprintln!(
            "SKIPPED (no ONNX Runtime): {need_runtime} truncated model(s) decode and were not run; \
             only the ones that cannot be read were checked"
        );
    }
    // Corrupt input files: not zip, zip without arrays, truncated .npy, bad .pb.
    let npz = dir.path().join("in.npz");
    let pb = dir.path().join("in.pb");
    let npy = dir.path().join("in.npy");
    std::fs::write(&npz, b"PK\x03\x04 not really").unwrap();
    std::fs::write(&pb, b"\x08\x96\x01\x12\xff").unwrap();
    std::fs::write(&npy, b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4',").unwrap();
    let folder = dir.path().join("empty_dir");
    std::fs::create_dir(&folder).unwrap();
    for bad in [&npz, &pb, &npy, &folder] {
        let opts = VerifyOptions {
            inputs: Some(bad.clone()),
            ..VerifyOptions::default()
        };
        let err = verify_models(&good, &good, &opts).unwrap_err().to_string();
        assert!(err.contains(bad.to_str().unwrap()), "{err}");
        let args = parse_args([
            good.to_str().unwrap(),
            good.to_str().unwrap(),
            "--inputs",
            bad.to_str().unwrap(),
        ])
        .unwrap();
        assert_eq!(run_cli(&args), 2);
    }
}
