//! The rules engine through the CLI: `check` exit codes and JSON, `explain`, `targets`,
//! compile summaries and `--report`, `deny`, `--allow-unsafe`, `--verify`, idempotence.

mod common;

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(common::bin()).args(args).output().unwrap()
}

fn s(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn check_exit_codes_and_json() {
    let sample = common::sample();
    let o = run(&["check", s(&sample), "--target", "rx580"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("split-depthwise"), "{text}");
    assert!(text.contains("backbone.block3.dw.conv"), "{text}");

    let o = run(&["check", s(&sample), "--target", "rx580", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = v["findings"].as_array().unwrap();
    assert_eq!(f.len(), 3);
    for key in ["node", "op", "rule", "why", "evidence", "action", "kind"] {
        assert!(f[0].get(key).is_some(), "missing {key} in {}", f[0]);
    }
    assert_eq!(f[0]["rule"], "split-depthwise");
    assert!(f[0]["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e == "microsoft/onnxruntime#29263"));

    let o = run(&["check", s(&sample), "--target", "none"]);
    assert_eq!(o.status.code(), Some(0));

    let o = run(&["check", s(&sample), "--target", "no-such-gpu"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["check", "/nonexistent.onnx", "--target", "rx580"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn broken_rule_file_is_exit_2_with_location() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "target: bad\ndescription: x\nextends: none\nrules:\n  - id: a\n    why: w\n    evidence: []\n    match: {op: Cnv}\n    action: unfuse\n").unwrap();
    let o = run(&["check", s(&common::sample()), "--target", s(&bad)]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.yaml:8:"), "{err}");
    assert!(err.contains("Cnv"), "{err}");
}

#[test]
fn explain_a_node_and_the_target() {
    let sample = common::sample();
    let o = run(&[
        "explain",
        s(&sample),
        "--target",
        "rx580",
        "--node",
        "backbone.block3.dw.conv",
    ]);
    assert!(o.status.success());
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains("split-depthwise") && t.contains("matches"),
        "{t}"
    );
    let o = run(&[
        "explain",
        s(&sample),
        "--target",
        "rx580",
        "--node",
        "backbone.block1.dw.conv",
    ]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("channels is 16"), "{t}");
    let o = run(&["explain", s(&sample), "--target", "rx580"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("split-depthwise -> split"), "{t}");
    let o = run(&["explain", s(&sample), "--target", "rx580", "--node", "nope"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn targets_lists_the_builtins() {
    let o = run(&["targets"]);
    assert!(o.status.success());
    let t = String::from_utf8_lossy(&o.stdout);
    for name in ["none", "directml", "rx580"] {
        assert!(
            t.lines().any(|l| l.starts_with(name)),
            "{name} missing in {t}"
        );
    }
}

#[test]
fn compile_report_metadata_and_idempotence() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.onnx");
    let again = dir.path().join("s2.onnx");
    let report = dir.path().join("r.json");
    let o = run(&[
        s(&common::sample()),
        "-t",
        "rx580",
        "-o",
        s(&out),
        "--report",
        s(&report),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("split-depthwise"), "{err}");
    assert!(
        err.contains("add_session_config_entry(\"ep.dml.disable_graph_fusion\", \"1\")"),
        "{err}"
    );
    assert!(err.contains("AddSessionConfigEntry"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(v["summary"]["split-depthwise"], 3);
    assert!(v["runtime"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["key"] == "ep.dml.disable_graph_fusion"));

    // New nodes carry their rule and origin; runtime settings travel in metadata_props.
    let doc = onnx_safeify::load(&out).unwrap();
    let g = &doc.model.graph;
    let stamped: Vec<_> = g
        .order
        .iter()
        .filter(|&&n| g.node(n).metadata("onnx_safeify.rule") == Some("split-depthwise"))
        .collect();
    assert!(stamped.len() > 9);
    assert!(stamped
        .iter()
        .all(|&&n| g.node(n).metadata("onnx_safeify.origin").is_some()));
    let meta: std::collections::HashMap<_, _> = doc
        .model
        .metadata_props
        .iter()
        .map(|e| (e.key.clone().unwrap(), e.value.clone().unwrap()))
        .collect();
    assert_eq!(meta["onnx_safeify.target"], "rx580");
    assert_eq!(
        meta["onnx_safeify.runtime.ep.dml.disable_graph_fusion"],
        "1"
    );

    // check is clean, and compiling the output again changes nothing.
    assert_eq!(
        run(&["check", s(&out), "-t", "rx580"]).status.code(),
        Some(0)
    );
    let o = run(&[s(&out), "-t", "rx580", "-o", s(&again)]);
    assert!(o.status.success());
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&again).unwrap());
}

fn write_target(dir: &std::path::Path, name: &str, rule: &str) -> std::path::PathBuf {
    let p = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &p,
        format!("target: {name}\ndescription: test target\nextends: none\nrules:\n{rule}"),
    )
    .unwrap();
    p
}

#[test]
fn deny_blocks_the_output_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let t = write_target(dir.path(), "strict", "  - id: no-hardsigmoid\n    why: test\n    evidence: []\n    match: {op: HardSigmoid}\n    action: deny\n");
    let out = dir.path().join("o.onnx");
    let o = run(&[s(&common::sample()), "-t", s(&t), "-o", s(&out)]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!out.exists());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no-hardsigmoid"));
    let o = run(&[
        "check",
        s(&common::sample()),
        "-t",
        s(&t),
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["findings"][0]["kind"], "denied");
    let o = run(&[
        s(&common::sample()),
        "-t",
        s(&t),
        "-o",
        s(&out),
        "--allow-unsafe",
    ]);
    assert!(o.status.success());
    assert!(out.exists());
}

#[test]
fn verify_flag_removes_an_unfaithful_output() {
    if common::venv_python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A deliberately lossy rule: run convolutions in float16.
    let t = write_target(dir.path(), "lossy", "  - id: half\n    why: test\n    evidence: []\n    match: {op: Conv}\n    action: {cast: {from: float, to: float16}}\n");
    let out = dir.path().join("o.onnx");
    let o = run(&[s(&common::sample()), "-t", s(&t), "-o", s(&out), "--verify"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!out.exists(), "the unfaithful output was left behind");
    // A faithful compile passes --verify and keeps the output.
    let o = run(&[
        s(&common::sample()),
        "-t",
        "rx580",
        "-o",
        s(&out),
        "--verify",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.exists());
}

#[test]
fn rules_layered_on_a_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let extra = dir.path().join("extra.yaml");
    std::fs::write(&extra, "rules:\n  - id: pin-resize\n    why: test\n    evidence: []\n    match: {op: Resize}\n    action: cpu\n").unwrap();
    let out = dir.path().join("o.onnx");
    let o = run(&[
        s(&common::sample()),
        "-t",
        "rx580",
        "--rules",
        s(&extra),
        "-o",
        s(&out),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc = onnx_safeify::load(&out).unwrap();
    let g = &doc.model.graph;
    let pinned = g
        .order
        .iter()
        .filter(|&&n| g.node(n).metadata("layer_ann") == Some("safeify_cpu"))
        .count();
    assert_eq!(pinned, 4);
}

#[test]
fn partition_mode_writes_segments_and_a_manifest() {
    if common::venv_python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let extra = dir.path().join("extra.yaml");
    std::fs::write(&extra, "rules:\n  - id: pin-resize\n    why: test\n    evidence: []\n    match: {op: Resize}\n    action: cpu\n").unwrap();
    let manifest = dir.path().join("s.manifest.yaml");
    let o = run(&[
        s(&common::sample()),
        "-t",
        "rx580",
        "--rules",
        s(&extra),
        "--cpu-subgraphs",
        "partition",
        "-o",
        s(&manifest),
        "--verify",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(
        text.contains("device: cpu") && text.contains("device: gpu"),
        "{text}"
    );
    let segs = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".seg")
        })
        .count();
    assert!(segs >= 3);
}
