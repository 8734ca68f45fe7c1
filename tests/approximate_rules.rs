//! Approximate rewrites run only when asked (issue 39): a float16 precision fence (`cast`) is
//! refused with cause `approximate` and falls back to the CPU unless the rule or target says
//! `approximate: allow` or the command line says `--allow-approximate`; a bad value is a rule
//! error with its place.

mod common;

use std::path::Path;
use std::process::Command;

fn rules(dir: &Path, approximate: Option<&str>) -> std::path::PathBuf {
    let line = approximate
        .map(|a| format!("    approximate: {a}\n"))
        .unwrap_or_default();
    let text = format!(
        "target: fence-test\ndescription: fence every float16 MatMul\nextends: directml\nrules:\n  - id: fence-matmul\n    why: test\n    evidence: [test]\n    match: {{op: MatMul, any_input: {{dtype: float16}}}}\n    action: {{cast: {{from: float16, to: float}}}}\n{line}"
    );
    let p = dir.join(format!("fence-{}.yaml", approximate.unwrap_or("unset")));
    std::fs::write(&p, text).unwrap();
    p
}

fn compile(model: &Path, target: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let report = out.with_extension("json");
    let o = Command::new(common::bin())
        .arg(model)
        .arg("--target")
        .arg(target)
        .arg("-o")
        .arg(out)
        .arg("--report")
        .arg(&report)
        .args(extra)
        .output()
        .unwrap();
    let json = std::fs::read_to_string(&report).unwrap_or_default();
    (
        o.status.code(),
        format!("{}\n{json}", String::from_utf8_lossy(&o.stderr)),
    )
}

#[test]
fn a_fence_runs_only_when_approximations_are_allowed() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let model = corpus.join("transformers/llama_gqa_fp16.onnx");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    // Not asked: refused as approximate, and the directml fallback pins the MatMuls.
    for (approx, extra) in [(None, &[][..]), (Some("deny"), &[][..])] {
        let (code, text) = compile(&model, &rules(dir.path(), approx), &out, extra);
        assert_eq!(code, Some(0), "{text}");
        assert!(
            text.contains("\"cause\": \"approximate\""),
            "{approx:?}: {text}"
        );
        assert!(!text.contains("\"exactness\": \"approximate\""), "{text}");
    }
    // Asked, by the rule or on the command line: the fence applies and says its bound.
    for (approx, extra) in [
        (Some("allow"), &[][..]),
        (None, &["--allow-approximate"][..]),
    ] {
        let (code, text) = compile(&model, &rules(dir.path(), approx), &out, extra);
        assert_eq!(code, Some(0), "{text}");
        assert!(
            !text.contains("\"cause\": \"approximate\""),
            "{approx:?}: {text}"
        );
        assert!(text.contains("approximate"), "{text}");
        let meta = Command::new(common::venv_python().unwrap())
            .args([
                "-c",
                "import sys, onnx; m = onnx.load(sys.argv[1]); print({p.key: p.value for p in m.metadata_props}.get('onnx_safeify.exactness'))",
            ])
            .arg(&out)
            .output()
            .unwrap();
        let meta = String::from_utf8_lossy(&meta.stdout);
        assert!(meta.trim().starts_with("approximate:"), "{meta}");
    }
}

#[test]
fn a_bad_approximate_value_is_an_error_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let target = rules(dir.path(), Some("maybe"));
    let o = Command::new(common::bin())
        .arg("check")
        .arg(common::sample())
        .arg("--target")
        .arg(&target)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("fence-maybe.yaml:10:18"), "{err}");
    assert!(
        err.contains("approximate") && err.contains("allow"),
        "{err}"
    );
}
