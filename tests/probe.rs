//! `probe`: the suite on ONNX Runtime's own CPU provider finds nothing (the control), on
//! WebGPU it rediscovers the lab's four hazards and its target fixes them; bad command lines
//! exit 2.

mod common;
mod runtimes_support;

use onnx_safeify::verify::RuntimeKind;
use runtimes_support::{ready, run};

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("probe_test_{}_{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The control: every case of a cross-section of the suite passes on the CPU provider, the
/// target adds no rule, and a rerun resumes from the results file without running a case.
#[test]
fn cpu_provider_finds_nothing_and_resumes() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no venv with onnxruntime");
        return;
    }
    let dir = tmp("cpu");
    let results = dir.join("results.jsonl");
    let yaml = dir.join("cpu.yaml");
    let only = "Conv,Resize,BatchNormalization,ReduceMax,Gather,TopK,Add,Attention,QLinearConv";
    let args = [
        "probe",
        "--runtime",
        "ort-ep:CPUExecutionProvider",
        "--only",
        only,
        "--jobs",
        "2",
        "--results",
        results.to_str().unwrap(),
        "-o",
        yaml.to_str().unwrap(),
    ];
    let o = run(&args, &[]);
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&results)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // 9 Conv, 10 Resize, 2 BatchNormalization, 2 ReduceMax, 2 Gather, TopK, 2 Add, Attention,
    // QLinearConv.
    assert_eq!(lines.len(), 30, "{}", o.stderr);
    for l in &lines {
        assert_eq!(l["status"], "pass", "{l}");
        assert_eq!(l["runtime"], "ort-ep:CPUExecutionProvider");
    }
    assert!(o.stdout.contains("30 passed, 0 failed"), "{}", o.stdout);
    let text = std::fs::read_to_string(&yaml).unwrap();
    assert!(text.contains("extends: none\n"), "{text}");
    assert!(text.contains("rules: []\n"), "{text}");
    assert!(!text.contains("- id:"), "{text}");
    // The file is a target the compiler takes.
    let check = run(
        &[
            "check",
            "samples/ocr_tiny.onnx",
            "--target",
            yaml.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(check.code, 0, "{}", check.stderr);

    // A rerun resumes: nothing to run, the same summary.
    let again = run(&args, &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again
            .stderr
            .contains("30 of 30 cases already in the results file, 0 to run"),
        "{}",
        again.stderr
    );
    assert!(!again.stderr.contains("[   1/"), "{}", again.stderr);
    assert!(
        again.stdout.contains("30 passed, 0 failed"),
        "{}",
        again.stdout
    );
    assert_eq!(
        std::fs::read_to_string(&results).unwrap().lines().count(),
        30
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_command_lines_exit_2() {
    let dir = tmp("cli");
    for (args, needle) in [
        (vec!["probe", "--runtime", "cuda"], "expected ort-ep:NAME"),
        (
            vec!["probe", "--runtime", "ort-ep:"],
            "expected ort-ep:NAME",
        ),
        (vec!["probe", "--runtime", "cpu"], "reference itself"),
        (
            vec![
                "probe",
                "--runtime",
                "ort-ep:CPUExecutionProvider",
                "--jobs",
                "0",
            ],
            "--jobs",
        ),
        (
            vec![
                "probe",
                "--runtime",
                "ort-ep:CPUExecutionProvider",
                "--timeout",
                "0",
            ],
            "--timeout",
        ),
    ] {
        let o = run(&args, &[]);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
        assert!(o.stderr.contains(needle), "{args:?}: {}", o.stderr);
        assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    }
    if common::venv_python().is_some() {
        let o = run(
            &[
                "probe",
                "--runtime",
                "ort-ep:CPUExecutionProvider",
                "--only",
                "NoSuchOp",
            ],
            &[],
        );
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert!(o.stderr.contains("no case of the suite"), "{}", o.stderr);
        // A results file of another runtime.
        let results = dir.join("other.jsonl");
        std::fs::write(
            &results,
            r#"{"case":"add_fp32","op":"Add","domain":"","family":"float","runtime":"webgpu","status":"pass","seconds":1.0}
"#,
        )
        .unwrap();
        let o = run(
            &[
                "probe",
                "--runtime",
                "ort-ep:CPUExecutionProvider",
                "--only",
                "add_fp32",
                "--results",
                results.to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert!(
            o.stderr.contains("holds results of --runtime webgpu"),
            "{}",
            o.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lab's four findings, each with a passing neighbour that the learned rule must leave
/// out: antialias Resize, training-mode BatchNormalization, ReduceMax/ReduceMin over an empty
/// set, float16 on an adapter without `shader-f16` (SwiftShader here).
#[test]
fn webgpu_rediscovers_the_lab_findings() {
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    let dir = tmp("webgpu");
    let yaml = dir.join("webgpu.yaml");
    let only = "resize_linear_down2,resize_linear_down2_antialias,batchnorm_inference,\
                batchnorm_training,reduce_max_axis1,reduce_max_empty,reduce_min_empty,\
                add_fp32,add_fp16";
    let o = run(
        &[
            "probe",
            "--runtime",
            "webgpu",
            "--only",
            only,
            "--jobs",
            "2",
            "--format",
            "json",
            "-o",
            yaml.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.code, 1, "findings exit 1: {}", o.stderr);
    let r: serde_json::Value = serde_json::from_str(&o.stdout).expect("a JSON report");
    let failed: Vec<&str> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .map(|c| c["case"].as_str().unwrap())
        .collect();
    assert_eq!(
        failed,
        [
            "resize_linear_down2_antialias",
            "batchnorm_training",
            "reduce_max_empty",
            "reduce_min_empty",
            "add_fp16"
        ],
        "{}",
        o.stderr
    );
    let rules = r["rules"].as_array().unwrap();
    let find = |needle: &str| {
        rules
            .iter()
            .find(|x| x["match"].as_str().unwrap().contains(needle))
            .unwrap_or_else(|| panic!("no rule matching {needle}: {rules:?}"))
    };
    for (needle, cases) in [
        ("attr: {antialias: 1}", 1),
        ("attr: {training_mode: 1}", 1),
        ("dims: [_, 0, \"...\"]", 2),
        ("any_input: {dtype: float16}", 1),
    ] {
        let rule = find(needle);
        assert_eq!(rule["written"], true, "{rule}");
        assert_eq!(rule["fixed"], true, "compiled, its cases pass: {rule}");
        assert_eq!(rule["action"], "cpu");
        assert_eq!(rule["cases"].as_array().unwrap().len(), cases, "{rule}");
        assert!(rule["problems"].as_array().unwrap().is_empty(), "{rule}");
    }
    assert_eq!(rules.len(), 4, "{rules:?}");
    let text = std::fs::read_to_string(&yaml).unwrap();
    assert!(text.contains("extends: webgpu\n"), "{text}");
    assert!(
        text.contains("shader-f16 no"),
        "the adapter in the evidence: {text}"
    );
    assert!(
        text.contains("The antialias attribute of Resize operator is NOT implemented"),
        "{text}"
    );
    // The compiler takes the file: the lab's own antialias model checks against it.
    let check = run(
        &[
            "check",
            "tests/data/webgpu_lab/resize_antialias.onnx",
            "--target",
            yaml.to_str().unwrap(),
        ],
        &[],
    );
    assert!(check.code == 1 || check.code == 0, "{}", check.stderr);
    assert!(!check.stderr.contains("error"), "{}", check.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}
