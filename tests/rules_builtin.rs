//! The shipped targets, inheritance (`extends`, `disable`, replacement by id), `--rules`
//! overlays, actions, and `deny`.

use std::path::{Path, PathBuf};

use onnx_safeify::rules::{
    builtin_names, check_deny, find_matches, load_target, load_target_from, load_target_with_rules,
    parse_target_str, Action, MemFs, Opsets, SplitAxis,
};
use onnx_safeify::tensor::dtype;
use onnx_safeify::ErrorKind;

#[test]
fn every_builtin_target_loads() {
    for name in builtin_names() {
        let t = load_target(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.name, name, "the file's `target:` is its table name");
        assert!(!t.description.is_empty(), "{name} has a description");
        for r in &t.rules {
            assert!(!r.why.is_empty(), "{name}/{}: why", r.id);
            assert!(!r.evidence.is_empty(), "{name}/{}: evidence", r.id);
        }
        for s in &t.runtime {
            assert!(
                !s.why.is_empty() && !s.evidence.is_empty(),
                "{name}/{}",
                s.key
            );
        }
    }
    assert!(load_target("none").unwrap().rules.is_empty());
}

#[test]
fn builtin_files_are_the_embedded_ones() {
    // The table embeds rules/*.yaml; every file there is in the table.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut names: Vec<String> = builtin_names().iter().map(|s| s.to_string()).collect();
    names.sort();
    assert_eq!(on_disk, names);
    for name in builtin_names() {
        let text = std::fs::read_to_string(dir.join(format!("{name}.yaml"))).unwrap();
        assert_eq!(Some(text.as_str()), onnx_safeify::rules::builtin(name));
    }
}

#[test]
fn rx580_extends_directml() {
    let t = load_target("rx580").unwrap();
    let base = load_target("directml").unwrap();
    assert_eq!(
        t.chain,
        [
            "builtin:directml.yaml".to_string(),
            "builtin:rx580.yaml".to_string()
        ]
    );
    for r in &base.rules {
        assert_eq!(t.rule(&r.id), Some(r), "rx580 keeps {}", r.id);
    }
    // rx580 keeps directml's settings, in order, and adds the transformers its unfusions need
    // disabled (tests/refusion.rs).
    assert_eq!(t.runtime[..base.runtime.len()], base.runtime[..]);
    assert_eq!(
        t.runtime[base.runtime.len()..]
            .iter()
            .map(|r| r.key.as_str())
            .collect::<Vec<_>>(),
        ["optimization.disable_specified_optimizers"]
    );
    assert_eq!(t.runtime_value("ep.dml.disable_graph_fusion"), Some("1"));
    assert_eq!(
        t.rule("split-depthwise").unwrap().action,
        Action::Split {
            axis: SplitAxis::Channels,
            max: 64
        }
    );
    assert_eq!(
        t.rule("barrier-heavy-dispatch").unwrap().action,
        Action::Barrier {
            limit: onnx_safeify::rules::BarrierLimit::Time {
                margin: 28.6,
                limit_ms: None
            },
            dims: vec![("batch".into(), 1), ("spatial".into(), 960)].into()
        }
    );
    assert_eq!(t.rule("unfuse-contrib").unwrap().action, Action::Unfuse);
    for id in [
        "unfuse-contrib",
        "split-depthwise",
        "int64-indices-on-cpu",
        "topk-on-cpu",
        "dynamic-resize-on-cpu",
    ] {
        assert!(t.rule(id).is_some(), "{id}");
    }
}

#[test]
fn child_replaces_disables_and_appends() {
    let fs = MemFs::new().with(
        "gpu/weak.yaml",
        "\
target: weak
extends: rx580
disable: [topk-on-cpu]
rules:
  - id: split-depthwise
    why: tighter on this board
    evidence: [me/notes#1]
    match: {op: Conv, depthwise: true, channels: {gt: 32}}
    action: {split: {axis: channels, max: 32}}
    priority: 60
  - id: no-lstm
    why: LSTMs hang this board
    evidence: [me/notes#2]
    match: {op: LSTM}
    action: deny
runtime:
  - {key: ep.dml.disable_graph_fusion, value: 0, why: testing, evidence: []}
  - {key: extra.key, value: yes, why: testing, evidence: []}
",
    );
    let t = load_target_from(&fs, "gpu/weak.yaml", &[]).unwrap();
    let rx = load_target("rx580").unwrap();
    assert_eq!(t.name, "weak");
    let ids: Vec<&str> = t.rules.iter().map(|r| r.id.as_str()).collect();
    let mut want: Vec<&str> = rx
        .rules
        .iter()
        .map(|r| r.id.as_str())
        .filter(|id| *id != "topk-on-cpu")
        .collect();
    want.push("no-lstm");
    assert_eq!(
        ids, want,
        "replaced in place, disabled removed, new appended"
    );
    let split = t.rule("split-depthwise").unwrap();
    assert_eq!(split.priority, 60);
    assert_eq!(split.source.file, "gpu/weak.yaml");
    assert_eq!(t.runtime_value("ep.dml.disable_graph_fusion"), Some("0"));
    assert_eq!(t.runtime_value("extra.key"), Some("yes"));
    assert_eq!(t.runtime.len(), rx.runtime.len() + 1);
}

#[test]
fn relative_extends_and_diamonds() {
    let fs = MemFs::new()
        .with(
            "t/base.yaml",
            "target: base\nextends: none\nrules:\n  - {id: b, why: w, evidence: [], match: {op: Relu}, action: cpu}\n",
        )
        .with(
            "t/left.yaml",
            "target: left\nextends: ./base.yaml\nrules:\n  - {id: l, why: w, evidence: [], match: {op: Add}, action: cpu}\n",
        )
        .with(
            "t/sub/right.yaml",
            "target: right\nextends: ../base.yaml\nrules:\n  - {id: r, why: w, evidence: [], match: {op: Mul}, action: cpu}\n",
        )
        .with(
            "t/top.yaml",
            "target: top\nextends: [./left.yaml, sub/right.yaml, directml]\n",
        );
    let t = load_target_from(&fs, "t/top.yaml", &[]).unwrap();
    let ids: Vec<&str> = t.rules.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(&ids[..3], ["b", "l", "r"]);
    assert_eq!(
        t.chain,
        [
            "t/base.yaml",
            "t/left.yaml",
            "t/sub/right.yaml",
            "builtin:directml.yaml",
            "t/top.yaml"
        ]
    );
}

#[test]
fn rules_overlay_adds_to_a_target() {
    let fs = MemFs::new().with(
        "extra.yaml",
        "rules:\n  - {id: split-depthwise, why: w, evidence: [], match: {op: Conv, depthwise: true}, action: {split: {axis: channels, max: 16}}}\n  - {id: mine, why: w, evidence: [], match: {op: Relu}, action: cpu}\n",
    );
    let t = load_target_from(&fs, "rx580", &[PathBuf::from("extra.yaml")]).unwrap();
    assert_eq!(t.name, "rx580");
    assert_eq!(t.chain.last().map(String::as_str), Some("extra.yaml"));
    assert_eq!(
        t.rule("split-depthwise").unwrap().action,
        Action::Split {
            axis: SplitAxis::Channels,
            max: 16
        }
    );
    assert_eq!(t.rules.last().unwrap().id, "mine");
}

#[test]
fn files_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("base")).unwrap();
    std::fs::write(
        dir.path().join("base/common.yaml"),
        "target: common\nextends: directml\nrules:\n  - {id: c, why: w, evidence: [x/y#1], match: {op: Relu}, action: cpu}\n",
    )
    .unwrap();
    let top = dir.path().join("mine.yaml");
    std::fs::write(&top, "target: mine\nextends: ./base/common.yaml\n").unwrap();
    let extra = dir.path().join("extra.yaml");
    std::fs::write(
        &extra,
        "rules:\n  - {id: e, why: w, evidence: [], match: {op: Add}, action: cpu}\n",
    )
    .unwrap();
    let t = load_target(top.to_str().unwrap()).unwrap();
    assert_eq!(t.name, "mine");
    assert!(t.rule("c").is_some() && t.rule("float64-on-cpu").is_some());
    let t = load_target_with_rules(top.to_str().unwrap(), &[extra]).unwrap();
    assert!(t.rule("e").is_some());
    // A broken file on disk: a Rules error naming the file and place.
    std::fs::write(&top, "target: mine\nextends: ./base/nope.yaml\n").unwrap();
    let e = load_target(top.to_str().unwrap()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rules);
    assert!(e.message.contains("mine.yaml:2:10"), "{}", e.message);
}

#[test]
fn action_forms() {
    let t = parse_target_str(
        "actions.yaml",
        "\
target: actions
rules:
  - {id: a, why: w, evidence: [], match: {}, action: unfuse}
  - {id: b, why: w, evidence: [], match: {}, action: {cpu: {}}}
  - {id: c, why: w, evidence: [], match: {}, action: {deny: null}}
  - {id: d, why: w, evidence: [], match: {}, action: {cast: {from: float16, to: float32}}}
  - {id: e, why: w, evidence: [], match: {}, action: {split: {axis: out_channels, max: 8}}}
  - {id: f, why: w, evidence: [], match: {}, action: {barrier: {budget: 250000}}}
  - {id: g, why: w, evidence: [], match: {}, action: {split: {axis: batch, max: 1}}}
",
    )
    .unwrap();
    let acts: Vec<String> = t.rules.iter().map(|r| r.action.to_string()).collect();
    assert_eq!(
        acts,
        [
            "unfuse",
            "cpu",
            "deny",
            "cast {from: float16, to: float}",
            "split {axis: out_channels, max: 8}",
            "barrier {budget: 250000}",
            "split {axis: batch, max: 1}"
        ]
    );
    assert_eq!(
        t.rules[3].action,
        Action::Cast {
            from: dtype::FLOAT16,
            to: dtype::FLOAT,
            isolated: false
        }
    );
}

#[test]
fn an_isolated_cast_is_float16_to_float_only() {
    let t = parse_target_str(
        "isolated.yaml",
        "\
target: isolated
rules:
  - {id: a, why: w, evidence: [], match: {}, action: {cast: {from: float16, to: float, isolated: true}}}
",
    )
    .unwrap();
    assert_eq!(
        t.rules[0].action.to_string(),
        "cast {from: float16, to: float, isolated: true}"
    );
    let e = parse_target_str(
        "isolated.yaml",
        "\
target: isolated
rules:
  - {id: a, why: w, evidence: [], match: {}, action: {cast: {from: int64, to: int32, isolated: true}}}
",
    )
    .unwrap_err();
    assert!(e.to_string().contains("`isolated`"), "{e}");
}

#[test]
fn deny_refuses_the_model() {
    let doc =
        onnx_safeify::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx"))
            .unwrap();
    let g = &doc.model.graph;
    let t = parse_target_str(
        "deny.yaml",
        "\
target: strict
extends: rx580
rules:
  - id: no-transposed-conv
    why: ConvTranspose crashes this driver
    evidence: [immich-app/immich#23629]
    match: {op: ConvTranspose}
    action: deny
",
    )
    .unwrap();
    let facts = onnx_safeify::infer::declared(g);
    let ms = find_matches(&t, g, &facts, &Opsets::from_model(&doc.model));
    let e = check_deny(&t, g, &ms).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Usage);
    assert_eq!(e.message.lines().count(), 2, "{}", e.message);
    assert!(e
        .message
        .contains("target `strict` refuses this model (1 node denied):"));
    assert!(e.message.contains("(ConvTranspose): rule `no-transposed-conv`: ConvTranspose crashes this driver [evidence: immich-app/immich#23629]"), "{}", e.message);
    let rx = load_target("rx580").unwrap();
    let ms = find_matches(&rx, g, &facts, &Opsets::from_model(&doc.model));
    assert!(check_deny(&rx, g, &ms).is_ok());
}
