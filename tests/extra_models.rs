//! Real models beyond OCR (corpus `extra/`: silero-vad's speech detectors, whose If bodies hold
//! convolutions, and magika's file-type classifier) through every built-in target: each compiles
//! with exit 0, its output checks clean for the target, passes onnx.checker full_check, and
//! equals the original on ONNX Runtime CPU (silero-vad on openvino-gpu: a partition manifest,
//! verified as a chain; tests/openvino_rank.rs runs it under the OpenVINO provider) (silero with both sample rates, so both branches of
//! its If nodes run).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn targets() -> Vec<String> {
    let o = Command::new(common::bin()).arg("targets").output().unwrap();
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Writes the input sets a model is verified with: silero-vad at 16 kHz (512 samples) and,
/// when it takes a sample rate, at 8 kHz (256 samples); nothing for other models (random inputs).
fn input_sets(model: &Path, dir: &Path) -> Vec<Option<PathBuf>> {
    let stem = model.file_stem().unwrap().to_string_lossy().to_string();
    if !stem.starts_with("silero_vad") {
        return vec![None];
    }
    let py = common::venv_python().unwrap();
    let script = r#"
import sys, numpy as np, onnx
model, out = sys.argv[1], sys.argv[2]
names = [i.name for i in onnx.load(model).graph.input]
rng = np.random.default_rng(3)
for sr, n in [(16000, 512), (8000, 256)]:
    if sr == 8000 and "sr" not in names:
        continue
    feed = {"input": (rng.standard_normal((1, n)) * 0.1).astype(np.float32),
            "state": (rng.standard_normal((2, 1, 128)) * 0.1).astype(np.float32)}
    if "sr" in names:
        feed["sr"] = np.array(sr, np.int64)
    np.savez(f"{out}_{sr}.npz", **feed)
    print(f"{out}_{sr}.npz")
"#;
    let o = Command::new(py)
        .args(["-c", script])
        .arg(model)
        .arg(dir.join(&stem))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| Some(PathBuf::from(l)))
        .collect()
}

fn run(cmd: &mut Command) -> (Option<i32>, String) {
    let o = cmd.output().unwrap();
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn extra_real_models_compile_check_clean_and_verify_on_every_target() {
    let Some(c) = common::corpus() else {
        return;
    };
    let models = common::onnx_files(&c.join("extra"));
    assert!(
        models.len() >= 4,
        "corpus extra/ is incomplete: {models:?} (run scripts/corpus.sh)"
    );
    let dir = tempfile::tempdir().unwrap();
    let targets = targets();
    assert!(targets.len() >= 11, "{targets:?}");
    let mut failures = Vec::new();
    let mut count = 0;
    for model in &models {
        let sets = input_sets(model, dir.path());
        for t in &targets {
            let out = dir.path().join(format!(
                "{}.{t}.onnx",
                model.file_stem().unwrap().to_string_lossy()
            ));
            let (code, text) = run(Command::new(common::bin())
                .arg(model)
                .args(["--target", t, "-o"])
                .arg(&out));
            // OpenVINO cannot compile what reads silero-vad's squeeze-if (a value of unknown
            // rank) and its provider ignores pins: the output is a partition, CPU segments for
            // the If and its unknown-rank readers, a manifest in place of the .onnx.
            let stem = model.file_stem().unwrap().to_string_lossy().to_string();
            if t == "openvino-gpu" && stem.starts_with("silero_vad") {
                let manifest = out.with_extension("manifest.yaml");
                if code != Some(0) || !text.contains("openvino-needs-rank") || !manifest.exists() {
                    failures.push(format!(
                        "{} {t}: expected a partition (exit 0, rule openvino-needs-rank, a manifest), got exit {code:?}\n{text}",
                        model.display()
                    ));
                    continue;
                }
                for set in &sets {
                    let mut v = Command::new(common::bin());
                    v.arg("verify").arg(model).arg(&manifest);
                    if let Some(s) = set {
                        v.arg("--inputs").arg(s);
                    }
                    let (code, text) = run(&mut v);
                    if code != Some(0) {
                        failures.push(format!(
                            "{} {t} {set:?}: verify of the manifest exit {code:?}\n{text}",
                            model.display()
                        ));
                    }
                }
                count += 1;
                continue;
            }
            if code != Some(0) {
                failures.push(format!(
                    "{} {t}: compile exit {code:?}\n{text}",
                    model.display()
                ));
                continue;
            }
            let (code, text) = run(Command::new(common::bin())
                .arg("check")
                .arg(&out)
                .args(["--target", t]));
            if code != Some(0) {
                failures.push(format!(
                    "{} {t}: check exit {code:?}\n{text}",
                    model.display()
                ));
            }
            common::onnx_check(&out);
            for set in &sets {
                let mut v = Command::new(common::bin());
                v.arg("verify").arg(model).arg(&out);
                if let Some(s) = set {
                    v.arg("--inputs").arg(s);
                }
                let (code, text) = run(&mut v);
                if code != Some(0) {
                    failures.push(format!(
                        "{} {t} {set:?}: verify exit {code:?}\n{text}",
                        model.display()
                    ));
                }
            }
            count += 1;
        }
    }
    eprintln!("{count} compiles of {} models", models.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
