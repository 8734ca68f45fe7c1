//! Replays the cases `examples/fuzz_bodies.rs` kept (models with If / Loop bodies that once
//! failed: a split's output read by name inside a body lost its producer), and a few fresh
//! seeds, through every built-in target: compile, invariants, check clean, fixed point, and
//! equality on ONNX Runtime CPU when it is found.

#[path = "../fuzz/src/bodies.rs"]
mod bodies;

use bodies::{check_case, Case, Outcome};

fn targets() -> Vec<&'static str> {
    onnx_safeify::rules::builtin_names()
}

fn run(case: &Case, label: &str) -> Vec<String> {
    // A missing runtime would let a case pass without its equality check: it must be there.
    let ort = std::env::var_os("ORT_DYLIB_PATH").is_some()
        || onnx_safeify::runtime::run::discover::find_onnxruntime(
            &onnx_safeify::verify::Discovery::from_env(),
        )
        .is_ok();
    assert!(
        ort,
        "ONNX Runtime not found: run scripts/test.sh (it installs it)"
    );
    let mut failures = Vec::new();
    for t in targets() {
        if let Outcome::Failed(why) = check_case(case, t, true) {
            failures.push(format!("{label} {t}: {why}"));
        }
    }
    failures
}

#[test]
fn kept_body_cases_pass_on_every_target() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/bodies");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "{files:?}");
    let mut failures = Vec::new();
    for f in &files {
        let case = Case::from_bytes(&std::fs::read(f).unwrap()).unwrap();
        failures.extend(run(&case, &f.display().to_string()));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn fresh_seeds_pass_on_every_target() {
    let mut failures = Vec::new();
    for seed in 5000..5030 {
        failures.extend(run(&Case::generate(seed), &format!("seed {seed}")));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
