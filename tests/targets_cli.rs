//! The target list and the doctor, as users see them (insta snapshots), and the shipped
//! targets' runtime settings, spelled the way their runtime parses them (the evidence entries
//! are checked against docs/hazards.md by tests/hazards_doc.rs).

mod common;

use std::process::Command;

use onnx_safeify::rules::{builtin_names, load_target};

fn snapshot(name: &str, value: &str) {
    insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
        insta::assert_snapshot!(name, value);
    });
}

fn cli(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(common::bin())
        .args(args)
        .output()
        .expect("the binary runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn targets_lists_every_builtin() {
    let (code, out, err) = cli(&["targets"]);
    assert_eq!(code, 0, "{err}");
    for name in builtin_names() {
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} missing:\n{out}"
        );
    }
    // Counts agree with their nouns: "1 rule", "2 rules".
    for l in out.lines() {
        assert!(
            !l.contains(" 1 rules") && !l.contains(" 1 runtime settings"),
            "{l}"
        );
    }
    assert!(
        out.lines().any(|l| l.contains(" 1 rule ")),
        "a target of one rule: {out}"
    );
    snapshot("targets_list", &out);
}

fn log(name: &str) -> String {
    common::repo()
        .join("tests/data/logs")
        .join(name)
        .display()
        .to_string()
}

const LOGS: &[&str] = &[
    "dxgi_device_removed",
    "dxgi_device_hung",
    "e_invalidarg_resize",
    "tdr",
    "miopen_bad_parm",
    "wgsl_out_of_bounds",
    "unknown",
];

#[test]
fn doctor_on_sample_logs() {
    for name in LOGS {
        let (code, out, err) = cli(&["doctor", &log(&format!("{name}.log"))]);
        assert_eq!(code, 0, "{name}: {err}");
        snapshot(&format!("targets_doctor_{name}"), &out);
    }
    let (_, unknown, _) = cli(&["doctor", &log("unknown.log")]);
    assert!(unknown.starts_with("no known signature"), "{unknown}");
    // Every target the doctor suggests exists.
    for name in LOGS {
        let (_, json, _) = cli(&["doctor", &log(&format!("{name}.log")), "--format", "json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        for d in v["diagnoses"].as_array().unwrap() {
            for t in d["targets"].as_array().unwrap() {
                let t = t.as_str().unwrap();
                assert!(
                    builtin_names().contains(&t),
                    "{name}: doctor suggests unknown target {t}"
                );
            }
        }
    }
}

#[test]
fn doctor_with_the_ppocr_det_model() {
    let Some(c) = common::corpus() else { return };
    let det = c.join("real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx");
    let det = det.display().to_string();
    for name in ["dxgi_device_removed", "e_invalidarg_resize"] {
        let (code, out, err) = cli(&["doctor", &log(&format!("{name}.log")), &det]);
        assert_eq!(code, 0, "{err}");
        // The `try:` line names the model given; the corpus folder differs between machines.
        assert!(
            out.contains(&format!("try:      onnx-safeify {det} --target")),
            "{out}"
        );
        snapshot(
            &format!("targets_doctor_{name}_det"),
            &out.replace(&det, "<det>"),
        );
    }
}

#[test]
fn runtime_settings_are_spelled_for_their_runtime() {
    // Execution provider names as ONNX Runtime's Python API spells them.
    const EPS: &[&str] = &[
        "DmlExecutionProvider",
        "OpenVINOExecutionProvider",
        "TensorrtExecutionProvider",
        "MIGraphXExecutionProvider",
        "CoreMLExecutionProvider",
        "WebGpuExecutionProvider",
    ];
    for name in builtin_names() {
        let t = load_target(name).unwrap();
        for s in &t.runtime {
            if let Some(rest) = s.key.strip_prefix("provider.") {
                let (ep, opt) = rest.split_once('.').unwrap();
                assert!(EPS.contains(&ep), "{name}: unknown provider {ep}");
                assert!(!opt.is_empty());
            } else {
                // Session config entries: ONNX Runtime's key namespaces.
                assert!(
                    s.key.starts_with("session.")
                        || s.key.starts_with("ep.")
                        || s.key.starts_with("optimization."),
                    "{name}: {}",
                    s.key
                );
            }
            // Transformer names separated by ';' (inference_session.cc splits on ';' only and
            // compares whole names), each one ONNX Runtime has.
            if s.key == onnx_safeify::runtime::transforms::DISABLE_OPTIMIZERS_KEY {
                for n in s.value.split(';') {
                    assert!(
                        onnx_safeify::runtime::transforms::transformers()
                            .iter()
                            .any(|t| t.name == n),
                        "{name}: {n:?} is not a transformer of runtimes/capability/transformers.tsv"
                    );
                }
            }
            // DirectML parses its boolean provider options strictly (True/true/False/false).
            if s.key.starts_with("provider.DmlExecutionProvider.") {
                assert!(
                    ["true", "false", "True", "False"].contains(&s.value.as_str()),
                    "{name}: {} = {}",
                    s.key,
                    s.value
                );
            }
            if s.key == "provider.OpenVINOExecutionProvider.precision" {
                assert!(["FP32", "FP16", "ACCURACY"].contains(&s.value.as_str()));
            }
        }
        // A target that pins nodes asks ONNX Runtime to honour the pins.
        let pins = t.rules.iter().any(|r| {
            matches!(
                r.action,
                onnx_safeify::rules::Action::Cpu | onnx_safeify::rules::Action::Barrier { .. }
            )
        });
        // A runtime that ignores the pins (`cpu_subgraphs: partition`) gets CPU segments
        // instead, and no setting that would mean nothing to it.
        let partition = t.cpu_subgraphs == onnx_safeify::rules::CpuSubgraphs::Partition;
        if pins {
            assert_eq!(
                t.runtime_value("session.layer_assignment_settings"),
                (!partition).then_some("cpu(safeify_cpu)"),
                "{name}"
            );
        }
    }
}

#[test]
fn new_targets_extend_what_they_say() {
    // `extends: none` leaves no trace in the chain (none is the empty base).
    for (name, base) in [
        ("intel-gen9", Some("directml")),
        ("intel-xe", Some("directml")),
        ("rdna2", Some("directml")),
        ("rocm-migraphx", None),
        ("openvino-gpu", None),
        ("coreml", None),
        ("webgpu", None),
        ("tensorrt", None),
    ] {
        let t = load_target(name).unwrap();
        let mut chain: Vec<String> = base.iter().map(|b| format!("builtin:{b}.yaml")).collect();
        chain.push(format!("builtin:{name}.yaml"));
        assert_eq!(t.chain, chain, "{name}");
        assert!(!t.description.is_empty());
        if base.is_some() {
            let base = load_target("directml").unwrap();
            for r in &base.rules {
                assert_eq!(t.rule(&r.id), Some(r), "{name} keeps {}", r.id);
            }
        }
    }
}
