//! The documentation's examples keep working: every complete rule file shown in `docs/*.md`
//! loads, and the example target `docs/examples/my-igpu.yaml` does on the sample what
//! `docs/targets.md` says it does (this file is also the pattern that page recommends for
//! testing a target of your own).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{bin, repo, sample};
use onnx_safeify::engine::{self, FindingKind};
use onnx_safeify::rules::{load_target, load_target_with_rules, Action, SplitAxis};

macro_rules! snap {
    ($name:expr, $value:expr) => {
        insta::with_settings!({
            snapshot_path => "../snapshots",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, $value);
        })
    };
}

/// The ```yaml blocks of a Markdown file, with the line each starts on.
fn yaml_blocks(md: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(md).unwrap();
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == "```yaml" => current = Some((i + 2, String::new())),
            Some(_) if line.trim_start() == "```" => out.extend(current.take()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    out
}

#[test]
fn rule_files_in_the_docs_load() {
    // Blocks are written beside copies of docs/examples/, which relative `extends` name.
    let dir = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(repo().join("docs/examples")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    let mut checked = 0;
    for md in ["docs/rules.md", "docs/targets.md", "docs/deploy.md"] {
        let path = repo().join(md);
        for (line, body) in yaml_blocks(&path) {
            let first = body
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .unwrap_or("");
            let file = dir.path().join(format!("block{checked}.yaml"));
            std::fs::write(&file, &body).unwrap();
            let result = if first.starts_with("target:") {
                load_target(file.to_str().unwrap())
            } else if first.starts_with("rules:") {
                load_target_with_rules("none", std::slice::from_ref(&file))
            } else {
                continue; // a fragment
            };
            if let Err(e) = result {
                panic!("{md}:{line}: the example does not load:\n{e}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} examples found");
}

fn example_target() -> PathBuf {
    repo().join("docs/examples/my-igpu.yaml")
}

#[test]
fn example_target_inherits_as_documented() {
    let t = load_target(example_target().to_str().unwrap()).unwrap();
    assert_eq!(t.name, "my-igpu");
    assert_eq!(
        t.chain,
        [
            "builtin:directml.yaml",
            "builtin:rx580.yaml",
            example_target().to_str().unwrap()
        ]
    );
    let rx580 = load_target("rx580").unwrap();
    let ids = |t: &onnx_safeify::rules::Target| -> Vec<String> {
        t.rules.iter().map(|r| r.id.clone()).collect()
    };
    // topk-on-cpu disabled, upsample-on-cpu appended, the two replaced rules in place.
    let mut want: Vec<String> = ids(&rx580)
        .into_iter()
        .filter(|id| id != "topk-on-cpu")
        .collect();
    want.push("upsample-on-cpu".into());
    assert_eq!(ids(&t), want);
    assert_eq!(
        t.rule("split-depthwise").unwrap().action,
        Action::Split {
            axis: SplitAxis::Channels,
            max: 32
        }
    );
    match &t.rule("barrier-heavy-dispatch").unwrap().action {
        Action::Barrier { limit, dims } => {
            assert_eq!(*limit, onnx_safeify::rules::BarrierLimit::Work(2.5e8));
            assert!(dims.contains(&("spatial".to_string(), 640)));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(t.runtime, rx580.runtime);
}

#[test]
fn example_target_on_the_sample() {
    let target = load_target(example_target().to_str().unwrap()).unwrap();
    let opts = engine::Options::default();
    let mut doc = onnx_safeify::load(&sample()).unwrap();
    let findings = engine::check(&mut doc.model, &target, &opts);
    let count = |rule: &str| findings.iter().filter(|f| f.rule == rule).count();
    assert_eq!(count("split-depthwise"), 4, "32 channels catch block2 too");
    assert_eq!(count("upsample-on-cpu"), 4);
    assert_eq!(findings.len(), 8);
    let report = engine::compile(&mut doc.model, &target, &opts);
    assert!(report
        .remaining
        .iter()
        .all(|f| !matches!(f.kind, FindingKind::Denied | FindingKind::Unsupported)));
    assert_eq!(report.pinned.len(), 4);
    assert!(engine::check(&mut doc.model, &target, &opts).is_empty());
}

/// `check` as the user sees it, pinned by a snapshot: a change to the example target or to
/// the built-in rules it inherits shows up here as a diff to review.
#[test]
fn example_target_check_snapshot() {
    let o = Command::new(bin())
        .current_dir(repo())
        .args([
            "check",
            "samples/ocr_tiny.onnx",
            "--target",
            "docs/examples/my-igpu.yaml",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    snap!(
        "docs_example_my_igpu_check",
        String::from_utf8_lossy(&o.stdout).into_owned()
    );
}
