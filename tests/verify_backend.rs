//! ONNX backend node tests (ones ONNX Runtime passes per node_tests_results.json): each
//! model against itself and against the expected outputs, with the real inputs.

mod verify_support;

use std::path::{Path, PathBuf};

use onnx_safeify::runtime::run::npz::write_npz;
use onnx_safeify::verify::cli::parse_args;
use onnx_safeify::verify::inputs::{load_tensor_set, SetKind};
use onnx_safeify::verify::{run_cli, verify_models, Status, VerifyOptions};
use verify_support::*;

const TESTS: [&str; 9] = [
    "test_relu",
    "test_conv_with_strides_padding",
    "test_gather_0",
    "test_resize_upsample_scales_nearest",
    "test_argmax_default_axis_example",
    "test_cast_FLOAT_to_FLOAT16",
    "test_gather_elements_0",
    "test_add_uint8",
    "test_equal",
];

fn node_test(name: &str) -> Option<(PathBuf, PathBuf)> {
    let corpus = corpus()?;
    let results = std::fs::read_to_string(corpus.join("node_tests_results.json")).unwrap();
    let results: serde_json::Value = serde_json::from_str(&results).unwrap();
    assert_eq!(
        results["results"][name][0], "pass",
        "{name} is not one ONNX Runtime passes"
    );
    let dir = corpus.join("onnx_node_tests_1.19.1").join(name);
    Some((dir.join("model.onnx"), dir.join("test_data_set_0")))
}

fn verify_cli(model: &Path, args: &[&str]) -> u8 {
    let mut argv = vec![model.to_str().unwrap(), model.to_str().unwrap()];
    argv.extend_from_slice(args);
    run_cli(&parse_args(argv).unwrap())
}

#[test]
fn node_tests_match_themselves_and_their_expected_outputs() {
    if corpus().is_none() || !runtime_available() {
        return;
    }
    for name in TESTS {
        let (model, data) = node_test(name).unwrap();
        let opts = VerifyOptions {
            inputs: Some(data.clone()),
            expected: Some(data.clone()),
            ..VerifyOptions::default()
        };
        let report = verify_models(&model, &model, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(report.passed(), "{name}:\n{}", report.to_text());
        assert!(!report.runs[0].expected.is_empty(), "{name}");
        let d = data.to_str().unwrap();
        assert_eq!(
            verify_cli(&model, &["--inputs", d, "--expected", d]),
            0,
            "{name}"
        );
        // Random inputs work too (ints stay in index range for the Gather tests).
        assert_eq!(verify_cli(&model, &["--runs", "3"]), 0, "{name} (random)");
    }
}

#[test]
fn wrong_expected_outputs_fail() {
    let (Some((relu, relu_data)), Some((_, sigmoid_data))) =
        (node_test("test_relu"), node_test("test_sigmoid"))
    else {
        return;
    };
    if !runtime_available() {
        return;
    }
    let opts = VerifyOptions {
        inputs: Some(relu_data.clone()),
        expected: Some(sigmoid_data.clone()),
        ..VerifyOptions::default()
    };
    // test_sigmoid has the same input and output shape; its expected values differ.
    let report = verify_models(&relu, &relu, &opts).unwrap();
    assert!(report.runs[0].outputs[0].passed());
    assert_eq!(report.runs[0].expected[0].status, Status::Mismatch);
    assert!(!report.passed());
    let d = relu_data.to_str().unwrap();
    let s = sigmoid_data.to_str().unwrap();
    assert_eq!(verify_cli(&relu, &["--inputs", d, "--expected", s]), 1);
}

#[test]
fn npz_inputs_and_expected_outputs_work_like_pb_folders() {
    let Some((model, data)) = node_test("test_gather_0") else {
        return;
    };
    if !runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ins = load_tensor_set(&data, SetKind::Inputs).unwrap();
    let outs = load_tensor_set(&data, SetKind::Outputs).unwrap();
    // Named arrays for the inputs (order reversed: matched by name), positional for outputs.
    let named: Vec<(&str, _)> = vec![("indices", &ins[1].1), ("data", &ins[0].1)];
    let in_npz = dir.path().join("in.npz");
    write_npz(&in_npz, &named).unwrap();
    let out_npz = dir.path().join("out.npz");
    write_npz(&out_npz, &[("arr_0", &outs[0].1)]).unwrap();
    let code = verify_cli(
        &model,
        &[
            "--inputs",
            in_npz.to_str().unwrap(),
            "--expected",
            out_npz.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0);
    // Inputs of the wrong dtype are a clear error naming the input.
    let wrong = dir.path().join("wrong.npz");
    write_npz(&wrong, &[("data", &ins[1].1), ("indices", &ins[0].1)]).unwrap();
    let opts = VerifyOptions {
        inputs: Some(wrong.clone()),
        ..VerifyOptions::default()
    };
    let err = verify_models(&model, &model, &opts)
        .unwrap_err()
        .to_string();
    assert!(err.contains("'data'") && err.contains("wrong.npz"), "{err}");
    assert_eq!(
        verify_cli(&model, &["--inputs", wrong.to_str().unwrap()]),
        2
    );
}

#[test]
fn gather_indices_stay_in_range_of_the_gathered_axis() {
    if !runtime_available() {
        return;
    }
    // data [3, 1000] gathered on axis 0 by int64 indices [50]: out-of-range indices would
    // make ONNX Runtime fail.
    let m = model(
        vec![node(
            "Gather",
            &["data", "idx"],
            &["y"],
            vec![attr_i("axis", 0)],
        )],
        vec![
            value_info("data", FLOAT, Some(&[3, 1000])),
            value_info("idx", INT64, Some(&[50])),
        ],
        vec![value_info("y", FLOAT, Some(&[50, 1000]))],
        vec![],
    );
    let dir = tempfile::tempdir().unwrap();
    let p = write_model(dir.path(), "gather.onnx", &m);
    let opts = VerifyOptions {
        runs: 5,
        ..VerifyOptions::default()
    };
    let report = verify_models(&p, &p, &opts).unwrap();
    assert!(report.passed(), "{}", report.to_text());
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["inputs"]["plan"][1]["range"]["hi"], 3, "{json}");
}
