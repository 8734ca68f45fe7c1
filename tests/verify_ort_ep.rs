//! `ort-ep:NAME`: a model run on an ONNX Runtime execution provider through the venv's
//! onnxruntime in a child process; placement from ONNX Runtime's record; failures classified.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use onnx_safeify::runtime::run::dtype::DType;
use onnx_safeify::runtime::run::ort::OptLevel;
use onnx_safeify::runtime::run::ort_ep::{run_ort_ep, FailureClass, OrtEpRequest};
use onnx_safeify::runtime::run::tensor::{HostTensor, TensorData};

/// A chain Neg/Relu x20, a Gather whose index 10 is out of range, then Neg/Relu x20.
fn gather_model(dir: &std::path::Path) -> Option<PathBuf> {
    let py = common::venv_python()?;
    let out = dir.join("gather.onnx");
    let script = format!(
        r#"
import onnx, onnx.helper as h
from onnx import TensorProto as T
nodes=[]; prev='x'
for i in range(40):
    if i == 20:
        nodes.append(h.make_node('Gather',[prev,'idx'],['g'],name='bad_gather',axis=0)); prev='g'
    nodes.append(h.make_node('Relu' if i%2 else 'Neg',[prev],[f'v{{i}}'],name=f'n{{i}}')); prev=f'v{{i}}'
nodes[-1].output[0]='y'
g = h.make_graph(nodes,'g',[h.make_tensor_value_info('x',T.FLOAT,[4,3])],[h.make_tensor_value_info('y',T.FLOAT,None)],[h.make_tensor('idx',T.INT64,[2],[0,10])])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('',17)]), {out:?})
"#
    );
    let ok = std::process::Command::new(py)
        .args(["-c", &script])
        .status()
        .expect("python")
        .success();
    assert!(ok, "could not make the test model");
    Some(out)
}

fn input_x() -> Vec<Vec<(String, HostTensor)>> {
    let vals: Vec<u8> = (0..12)
        .flat_map(|i| (i as f32 - 5.5).to_le_bytes())
        .collect();
    vec![vec![(
        "x".to_string(),
        HostTensor::new(DType::F32, vec![4, 3], TensorData::Bytes(vals)).unwrap(),
    )]]
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ort_ep_test_{name}_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn cpu_provider_runs_the_sample_and_reports_placement() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no venv with onnxruntime");
        return;
    }
    let model = common::sample();
    let info = onnx_safeify::runtime::run::model::load_model_info(&model).unwrap();
    let plan = onnx_safeify::verify::inputs::plan_inputs(
        &info,
        &info,
        &Default::default(),
        Default::default(),
        (-1.0, 1.0),
        &mut Vec::new(),
    )
    .unwrap();
    let feeds = vec![onnx_safeify::verify::inputs::generate(&plan, 1)];
    let out = run_ort_ep(&OrtEpRequest {
        model: &model,
        provider: "CPUExecutionProvider",
        optimization: OptLevel::All,
        session: Vec::new(),
        outputs: None,
        feeds: &feeds,
        timeout: Duration::from_secs(120),
    })
    .unwrap();
    let runs = out.result.expect("runs on the CPU provider");
    assert_eq!(runs.len(), 1);
    for o in &info.outputs {
        assert!(runs[0].contains_key(&o.name), "output {} missing", o.name);
    }
    let p = out.placement.expect("a placement");
    assert!(p.count("CPUExecutionProvider") > 0, "{p:?}");
    assert_eq!(
        out.placement_source.as_deref(),
        Some("session.record_ep_graph_assignment_info")
    );
}

#[test]
fn failures_are_classified() {
    let d = tmp("classify");
    let Some(model) = gather_model(&d) else {
        eprintln!("SKIPPED: no venv with onnxruntime");
        return;
    };
    let feeds = input_x();
    let req = |provider: &'static str, timeout: Duration| OrtEpRequest {
        model: &model,
        provider,
        optimization: OptLevel::All,
        session: Vec::new(),
        outputs: None,
        feeds: &feeds,
        timeout,
    };
    // The out-of-range index fails at run time, at the Gather.
    let f = run_ort_ep(&req("CPUExecutionProvider", Duration::from_secs(120)))
        .unwrap()
        .result
        .unwrap_err();
    assert_eq!(f.class, FailureClass::RunError, "{f:?}");
    assert!(f.message.contains("bad_gather"), "{f:?}");
    // A provider this onnxruntime does not have: no session (not a silent CPU fallback).
    let f = run_ort_ep(&req("NoSuchExecutionProvider", Duration::from_secs(120)))
        .unwrap()
        .result
        .unwrap_err();
    assert_eq!(f.class, FailureClass::NoSession, "{f:?}");
    // A driver that cannot finish in time is killed and reported as a timeout.
    let f = run_ort_ep(&req("CPUExecutionProvider", Duration::from_millis(50)))
        .unwrap()
        .result
        .unwrap_err();
    assert_eq!(f.class, FailureClass::Timeout, "{f:?}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `verify --runtime ort-ep:NAME` through the binary: exit code, stdout and stderr.
fn verify_cli(a: &std::path::Path, b: &std::path::Path, runtime: &str) -> (i32, String, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-safeify"))
        .args(["verify"])
        .arg(a)
        .arg(b)
        .args(["--runtime", runtime, "--format", "json"])
        .output()
        .expect("onnx-safeify runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn verify_runtime_ort_ep_cpu_passes_a_rewritten_corpus_model() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no venv with onnxruntime");
        return;
    }
    let d = tmp("verify_cls");
    let orig = corpus.join("real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx");
    let out = d.join("cls.rx580.onnx");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_onnx-safeify"))
        .arg(&orig)
        .args(["--target", "rx580", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (code, stdout, stderr) = verify_cli(&orig, &out, "ort-ep:CPUExecutionProvider");
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).expect("a JSON report");
    // Three runs: the original ran on the provider too, and the provider itself is exact
    // against the in-process ONNX Runtime CPU (the same library, the same level).
    let o = &r["original_on_runtime"];
    assert_eq!(o["runtime"], "ort-ep:CPUExecutionProvider", "{r}");
    assert_eq!(o["ran"], true, "{r}");
    assert_eq!(o["differs"], false, "{r}");
    let ext = &r["rewritten_runtime"];
    assert_eq!(ext["runtime"], "ort-ep:CPUExecutionProvider", "{r}");
    // Placement from ONNX Runtime's own record: every node on the CPU provider.
    let providers = ext["placement"]["providers"].as_array().expect("placement");
    assert_eq!(providers.len(), 1, "{r}");
    assert_eq!(providers[0]["provider"], "CPUExecutionProvider");
    assert!(providers[0]["nodes"].as_u64().unwrap() > 0, "{r}");
    assert!(
        ext["description"]
            .as_str()
            .unwrap()
            .contains("session.record_ep_graph_assignment_info"),
        "{r}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn verify_runtime_ort_ep_unknown_provider_names_the_available_ones() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no venv with onnxruntime");
        return;
    }
    let s = common::sample();
    let (code, stdout, stderr) = verify_cli(&s, &s, "ort-ep:NoSuchExecutionProvider");
    assert_eq!(code, 2, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("NoSuchExecutionProvider") && stderr.contains("CPUExecutionProvider"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn verify_runtime_malformed_spec_exits_2() {
    let s = common::sample();
    for bad in ["ort-ep:", "ort-ep:Bad Name", "ort-ep:a/b", "cuda"] {
        let (code, stdout, stderr) = verify_cli(&s, &s, bad);
        assert_eq!(code, 2, "{bad}: {stdout}\n{stderr}");
        assert!(stderr.contains("--runtime"), "{bad}: {stderr}");
        assert!(stderr.contains("ort-ep:"), "{bad}: {stderr}");
        assert!(!stderr.contains("panicked"), "{bad}: {stderr}");
    }
    // The library parser agrees.
    use onnx_safeify::verify::RuntimeKind;
    assert_eq!(
        RuntimeKind::parse("ort-ep:CUDAExecutionProvider"),
        Ok(RuntimeKind::OrtEp("CUDAExecutionProvider".into()))
    );
    assert_eq!(RuntimeKind::parse("OpenVINO"), Ok(RuntimeKind::Openvino));
    assert!(RuntimeKind::parse("ort-ep:").is_err());
}
