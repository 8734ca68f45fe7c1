//! What a new user meets first: a bare invocation, the exit codes `--help` and the manual
//! promise (the README's), a built-in target named like a file, and `doctor`'s advice.

mod common;

use std::process::Command;

use common::{bin, repo, sample};

fn cli(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(bin())
        .args(args)
        .current_dir(repo())
        .output()
        .expect("the binary runs");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Text with runs of whitespace (line breaks, roff escapes of hyphens aside) made single spaces.
fn flat(s: &str) -> String {
    s.replace("\\-", "-")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_bare_invocation_prints_usage_and_exits_2() {
    let (code, out, err) = cli(&[]);
    assert_eq!(code, 2);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("Usage: onnx-safeify"), "{err}");
    assert!(err.contains("check"), "the subcommands are listed: {err}");
}

#[test]
fn help_and_man_state_the_readme_exit_codes() {
    let readme = flat(&std::fs::read_to_string(repo().join("README.md")).unwrap());
    let promise = "1 findings (check), a denied node or an action that cannot be applied and no fallback takes it (compile";
    assert!(
        readme.contains(&promise.replace("1 findings (check)", "`1` findings (`check`)")),
        "the README states the exit codes"
    );
    let (code, help, _) = cli(&["--help"]);
    assert_eq!(code, 0);
    let help = flat(&help);
    assert!(help.contains(promise), "{help}");
    assert!(help.contains("2 any error"), "{help}");
    let (code, man, _) = cli(&["man"]);
    assert_eq!(code, 0);
    assert!(flat(&man).contains(promise), "the man page says the same");
}

#[test]
fn a_missing_rules_file_named_like_a_builtin_suggests_the_builtin() {
    let s = sample();
    let s = s.to_str().unwrap();
    for spec in ["rx580.yaml", "rules/directml.yml"] {
        let (code, _, err) = cli(&["check", s, "--target", spec]);
        assert_eq!(code, 2, "{err}");
        let stem = spec.rsplit('/').next().unwrap().split('.').next().unwrap();
        assert!(
            err.contains(&format!(
                "help: `{stem}` is a built-in target: use --target {stem}"
            )),
            "{spec}: {err}"
        );
    }
    // An existing file is read as a file; an unknown stem gets no hint.
    let (code, _, err) = cli(&["check", s, "--target", "no-such-gpu.yaml"]);
    assert_eq!(code, 2);
    assert!(!err.contains("use --target"), "{err}");
    let (code, _, _) = cli(&["check", s, "--target", "rules/rx580.yaml"]);
    assert_eq!(code, 1, "the shipped rules file itself loads");
}

#[test]
fn doctor_names_the_model_in_its_try_line() {
    let log = repo().join("tests/data/logs/dxgi_device_removed.log");
    let log = log.to_str().unwrap();
    let (code, out, err) = cli(&["doctor", log, "samples/ocr_tiny.onnx"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("try:      onnx-safeify samples/ocr_tiny.onnx --target rx580"),
        "{out}"
    );
    // Without a model the placeholder stays; a path with a space is quoted for the shell.
    let (_, out, _) = cli(&["doctor", log]);
    assert!(
        out.contains("try:      onnx-safeify MODEL --target rx580"),
        "{out}"
    );
    let dir = tempfile::tempdir().unwrap();
    let spaced = dir.path().join("my model.onnx");
    std::fs::copy(sample(), &spaced).unwrap();
    let (code, out, err) = cli(&["doctor", log, spaced.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("onnx-safeify '{}' --target", spaced.display())),
        "{out}"
    );
}

#[test]
fn compile_exits_1_when_a_node_is_denied() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("deny.yaml");
    std::fs::write(
        &rules,
        "rules:\n  - id: no-conv\n    why: test\n    evidence: []\n    match: {op: Conv}\n    action: deny\n",
    )
    .unwrap();
    let out = dir.path().join("out.onnx");
    let s = sample();
    let (code, _, err) = cli(&[
        s.to_str().unwrap(),
        "--target",
        "rx580",
        "--rules",
        rules.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    assert!(!out.exists());
}
