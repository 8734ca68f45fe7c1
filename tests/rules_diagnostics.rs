//! Broken rule files: every error is reported, each with file:line:col and a caret snippet.
//! The rendered diagnostics are insta snapshots in `snapshots/`.

use std::path::PathBuf;

use onnx_safeify::rules::{load_target_from, parse_target_str, MemFs, RuleErrors};
use onnx_safeify::ErrorKind;

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

/// Load a single in-memory file and return its rendered errors (it must fail).
fn errors(name: &str, text: &str) -> RuleErrors {
    match parse_target_str(name, text) {
        Ok(t) => panic!("{name} loaded but should not have: {t:?}"),
        Err(e) => e,
    }
}

fn render(e: &RuleErrors) -> String {
    format!("{}\n\n{e}", e.summary())
}

#[test]
fn bad_yaml() {
    let e = errors(
        "bad_yaml.yaml",
        "target: broken\nrules:\n  - id: a\n    match: {op: [Conv, Add}\n    action: cpu\n",
    );
    assert_eq!(e.len(), 1);
    assert!(e.diagnostics[0].message.starts_with("invalid YAML"));
    assert_eq!(e.diagnostics[0].line, 4);
    snap!("rules_diag_bad_yaml", render(&e));
}

#[test]
fn duplicate_yaml_key() {
    let e = errors("dup_key.yaml", "target: t\ntarget: u\n");
    assert_eq!((e.diagnostics[0].line, e.diagnostics[0].col), (2, 1));
    snap!("rules_diag_duplicate_yaml_key", render(&e));
}

#[test]
fn unknown_key() {
    let e = errors(
        "unknown_key.yaml",
        "\
target: t
descripton: typo
rules:
  - id: r1
    why: a reason
    evidence: []
    matchh: {op: Conv}
    action: cpu
  - id: r2
    why: a reason
    evidence: []
    match: {op: Conv, chanels: {gt: 64}, input: {0: {dtyp: float}}}
    action: cpu
",
    );
    let msgs: Vec<&str> = e.diagnostics.iter().map(|d| d.message.as_str()).collect();
    assert!(
        msgs.contains(&"unknown key `descripton` in a target file"),
        "{msgs:?}"
    );
    assert!(msgs.contains(&"unknown key `matchh` in a rule"), "{msgs:?}");
    assert!(msgs.contains(&"rule `r1` has no `match`"), "{msgs:?}");
    assert!(
        msgs.contains(&"unknown key `chanels` in `match`"),
        "{msgs:?}"
    );
    assert!(msgs.contains(&"unknown key `dtyp` in input 0"), "{msgs:?}");
    snap!("rules_diag_unknown_key", render(&e));
}

#[test]
fn unknown_op() {
    let e = errors(
        "unknown_op.yaml",
        "\
target: t
rules:
  - id: typo
    why: a reason
    evidence: []
    match: {op: [Cnv, Relu, HardSwsh]}
    action: cpu
  - id: wrong-domain
    why: a reason
    evidence: []
    match: {op: FusedConv, domain: \"\"}
    action: unfuse
  - id: bad-domain
    why: a reason
    evidence: []
    match: {op: FusedConv, domain: com.microsft}
    action: unfuse
  - id: nested
    why: a reason
    evidence: []
    match: {op: Conv, followed_by: {op: Rleu}}
    action: cpu
",
    );
    assert_eq!(e.len(), 5, "{e}");
    snap!("rules_diag_unknown_op", render(&e));
}

#[test]
fn unknown_action() {
    let e = errors(
        "unknown_action.yaml",
        "\
target: t
rules:
  - {id: a, why: w, evidence: [], match: {op: Conv}, action: spilt}
  - {id: b, why: w, evidence: [], match: {op: Conv}, action: split}
  - {id: c, why: w, evidence: [], match: {op: Conv}, action: {split: {axis: chanels, max: 0}}}
  - {id: d, why: w, evidence: [], match: {op: Conv}, action: {cast: {from: float16, to: fp16}}}
  - {id: e, why: w, evidence: [], match: {op: Conv}, action: {cpu: {now: true}}}
  - {id: f, why: w, evidence: [], match: {op: Conv}, action: {barrier: {budget: -1}}}
  - {id: g, why: w, evidence: [], match: {op: Conv}, action: {teleport: {}}}
",
    );
    assert_eq!(e.len(), 8, "{e}");
    snap!("rules_diag_unknown_action", render(&e));
}

#[test]
fn duplicate_id() {
    let e = errors(
        "duplicate_id.yaml",
        "\
target: t
rules:
  - {id: same, why: w, evidence: [], match: {op: Conv}, action: cpu}
  - {id: other, why: w, evidence: [], match: {op: Add}, action: cpu}
  - {id: same, why: w, evidence: [], match: {op: Mul}, action: deny}
runtime:
  - {key: k, value: \"1\", why: w, evidence: []}
  - {key: k, value: \"2\", why: w, evidence: []}
",
    );
    assert_eq!(e.len(), 2, "{e}");
    assert_eq!(e.diagnostics[0].message, "duplicate rule id `same`");
    assert_eq!((e.diagnostics[0].line, e.diagnostics[0].col), (5, 10));
    snap!("rules_diag_duplicate_id", render(&e));
}

#[test]
fn missing_base() {
    let fs = MemFs::new().with(
        "dir/child.yaml",
        "target: child\nextends: [directml, ./missing.yaml, rx58]\nrules: []\n",
    );
    let e = load_target_from(&fs, "dir/child.yaml", &[]).unwrap_err();
    assert_eq!(e.len(), 2, "{e}");
    snap!("rules_diag_missing_base", render(&e));
}

#[test]
fn missing_target() {
    let fs = MemFs::new();
    let e = load_target_from(&fs, "rx590", &[]).unwrap_err();
    assert!(e.diagnostics[0].label.contains("rx580"), "{e}");
    let e2 = load_target_from(&fs, "nowhere/target.yaml", &[]).unwrap_err();
    snap!(
        "rules_diag_missing_target",
        format!("{}\n\n{}", render(&e), render(&e2))
    );
}

#[test]
fn cyclic_base() {
    let fs = MemFs::new()
        .with("a.yaml", "target: a\nextends: ./b.yaml\n")
        .with("b.yaml", "target: b\nextends: [none, ./sub/../c.yaml]\n")
        .with("c.yaml", "target: c\nextends: a.yaml\n")
        .with("self.yaml", "target: self\nextends: ./self.yaml\n");
    let e = load_target_from(&fs, "a.yaml", &[]).unwrap_err();
    assert_eq!(e.len(), 1, "{e}");
    assert_eq!(
        e.diagnostics[0].message,
        "cyclic `extends`: a.yaml -> b.yaml -> c.yaml -> a.yaml"
    );
    let e2 = load_target_from(&fs, "self.yaml", &[]).unwrap_err();
    snap!(
        "rules_diag_cyclic_base",
        format!("{}\n\n{}", render(&e), render(&e2))
    );
}

#[test]
fn type_errors() {
    let e = errors(
        "types.yaml",
        "\
target: t
extends: {name: directml}
rules:
  - id: r
    why: [not, a, string]
    evidence: microsoft/onnxruntime#1
    priority: high
    match:
      op: Conv
      channels: {gt: \"64\"}
      depthwise: yes
      attr: {group: {gt: [1]}}
      input: {x: {rank: 4}, 1: {dims: [N, {le: 64}, \"?\", ...]}}
      kernel: {}
    action: cpu
",
    );
    snap!("rules_diag_type_errors", render(&e));
}

/// One file with many different mistakes, all reported in one go, in file order.
#[test]
fn everything_at_once() {
    let text = "\
target: many
extends: directml
disable: [float64-on-cpu, no-such-rule]
rules:
  - id: ok-rule
    why: fine
    evidence: [a/b#1]
    match: {op: Conv}
    action: cpu
  - id: bad one
    why: \"\"
    evidence: [\"\"]
    match: {op: Cnv, opset: {gte: 11}, not: {op: Relu, capture: r}}
    action: {split: {axis: channels}}
  - id: ok-rule
    why: duplicated
    evidence: []
    match: {op: Gather, input: {1: {dtype: int65}}}
    action: deny
  - why: no id
    evidence: []
    match: {any: []}
    action: unfuse
runtime:
  - {key: \"has space\", value: [1], why: w, evidence: []}
";
    let e = errors("many.yaml", text);
    assert!(e.len() >= 12, "{e}");
    let lines: Vec<u32> = e.diagnostics.iter().map(|d| d.line).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted, "diagnostics come in file order");
    snap!("rules_diag_everything_at_once", render(&e));
}

#[test]
fn errors_in_base_and_child_together() {
    let fs = MemFs::new()
        .with("base.yaml", "target: base\nrules:\n  - {id: x, why: w, evidence: [], match: {op: Conv}, action: nope}\n")
        .with("child.yaml", "target: child\nextends: ./base.yaml\nrules:\n  - {id: y, why: w, evidence: [], match: {op: Conc}, action: cpu}\n");
    let e = load_target_from(&fs, "child.yaml", &[]).unwrap_err();
    let files: Vec<&str> = e.diagnostics.iter().map(|d| d.file.as_str()).collect();
    assert_eq!(files, ["child.yaml", "base.yaml"], "{e}");
}

#[test]
fn rules_overlay_errors() {
    let fs = MemFs::new().with(
        "extra.yaml",
        "extends: directml\nrules:\n  - {id: y, why: w, evidence: [], match: {op: Conv}, action: cpu}\n",
    );
    let e = load_target_from(&fs, "rx580", &[PathBuf::from("extra.yaml")]).unwrap_err();
    assert_eq!(e.len(), 1, "{e}");
    snap!("rules_diag_overlay_extends", render(&e));
}

#[test]
fn empty_file() {
    let e = errors("empty.yaml", "# nothing here\n");
    snap!("rules_diag_empty_file", render(&e));
}

#[test]
fn load_failure_is_a_rules_error() {
    let err: onnx_safeify::Error = errors("x.yaml", "target: [x]\n").into();
    assert_eq!(err.kind, ErrorKind::Rules);
    assert!(
        err.message.starts_with("1 error in rule files\n"),
        "{}",
        err.message
    );
    assert!(err.message.contains("--> x.yaml:1:9"), "{}", err.message);
    let err = onnx_safeify::rules::load_target("/nonexistent/dir/target.yaml").unwrap_err();
    assert_eq!(err.kind, ErrorKind::Rules);
}

/// `provider_kernel`: an unknown state is an error at its place (with a suggestion), and a rule
/// that asks the provider in a target naming none is one too (it would never fire).
#[test]
fn provider_kernel_errors() {
    let e = errors(
        "pk_state.yaml",
        "\
target: t
extends: directml
rules:
  - id: r1
    why: w
    evidence: []
    match: {provider_kernel: [missing, misisng]}
    action: cpu
",
    );
    assert_eq!(e.len(), 1, "{e}");
    let d = &e.diagnostics[0];
    assert_eq!((d.line, d.col), (7, 40), "{e}");
    assert!(
        d.message
            .contains("unknown `provider_kernel` state `misisng`"),
        "{e}"
    );
    assert!(d.label.contains("did you mean `missing`?"), "{e}");
    let e = errors(
        "pk_none.yaml",
        "\
target: t
extends: none
rules:
  - id: r1
    why: w
    evidence: []
    match:
      op: Gelu
      any: [{provider_kernel: deficient}, {not: {provider_kernel: registered}}]
    action: cpu
",
    );
    assert_eq!(e.len(), 2, "{e}");
    for d in &e.diagnostics {
        assert_eq!(d.line, 9, "{e}");
        assert!(
            d.message
                .contains("rule `r1` matches on `provider_kernel`, but the target names no execution provider"),
            "{e}"
        );
    }
    // With a provider it loads.
    parse_target_str(
        "pk_ok.yaml",
        "target: t\nextends: none\nprovider: directml\nrules:\n  - {id: r1, why: w, evidence: [], match: {provider_kernel: [missing, deficient]}, action: cpu}\n",
    )
    .unwrap();
}
