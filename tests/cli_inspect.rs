//! `inspect --format json` and `--dot DIR` on the command line.

mod common;

use std::path::Path;
use std::process::Command;

use common::{bin, sample};

fn run(args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn inspect_json_has_every_field() {
    let model = sample();
    let o = run(&["inspect", model.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
    assert_eq!(v["ir_version"], 8);
    assert_eq!(v["opsets"][0]["domain"], "ai.onnx");
    assert_eq!(v["opsets"][0]["version"], 17);
    let input = &v["inputs"][0];
    assert_eq!(input["name"], "x");
    assert_eq!(input["dtype"], "float");
    assert_eq!(input["type"], "float[N,3,64,64]");
    assert_eq!(input["shape"], serde_json::json!(["N", 3, 64, 64]));
    assert_eq!(v["outputs"][0]["name"], "prob");
    assert_eq!(
        v["outputs"][0]["shape"],
        serde_json::json!(["N", 1, 64, 64])
    );
    assert_eq!(v["nodes"], 76);
    assert_eq!(v["subgraphs"], 0);
    assert_eq!(v["ops"]["Conv"], 27);
    let total: u64 = v["ops"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(total, 76, "the histogram counts every node");
    assert_eq!(v["initializers"]["count"], 106);
    assert!(v["initializers"]["bytes"].as_u64().unwrap() > 200_000);
    assert_eq!(v["external_data"]["tensors"], 0);
    assert_eq!(v["external_data"]["bytes"], 0);
    assert!(v["functions"].as_array().unwrap().is_empty());
}

#[test]
fn inspect_json_and_ir_conflict() {
    let model = sample();
    let o = run(&[
        "inspect",
        model.to_str().unwrap(),
        "--ir",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// A model with a subgraph: the histogram counts the body's nodes, and unknown dims are null.
#[test]
fn inspect_json_counts_subgraphs() {
    use common::{model, node, vi};
    use onnx_safeify::proto::{attribute_proto::AttributeType, AttributeProto, GraphProto};
    let dir = tempfile::tempdir().unwrap();
    let body = GraphProto {
        node: vec![node("Relu", "inner", &["x"], &["b"])],
        name: Some("then".into()),
        output: vec![vi("b", &[1, 4])],
        ..Default::default()
    };
    let else_body = GraphProto {
        node: vec![node("Neg", "inner2", &["x"], &["c"])],
        name: Some("else".into()),
        output: vec![vi("c", &[1, 4])],
        ..Default::default()
    };
    let mut iff = node("If", "if", &["cond"], &["y"]);
    for (name, g) in [("then_branch", body), ("else_branch", else_body)] {
        iff.attribute.push(AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::Graph as i32),
            g: Some(Box::new(g)),
            ..Default::default()
        });
    }
    let mut cond = vi("cond", &[]);
    if let Some(onnx_safeify::proto::type_proto::Value::TensorType(t)) =
        cond.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(9);
    }
    let mut x = vi("x", &[1, 4]);
    if let Some(onnx_safeify::proto::type_proto::Value::TensorType(t)) =
        x.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.shape.as_mut().unwrap().dim[0].value = None;
    }
    let g = GraphProto {
        node: vec![iff],
        name: Some("main".into()),
        input: vec![cond, x],
        output: vec![vi("y", &[1, 4])],
        ..Default::default()
    };
    let path = dir.path().join("if.onnx");
    std::fs::write(&path, common::encode(&model(g))).unwrap();
    let o = run(&["inspect", path.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["nodes"], 3);
    assert_eq!(v["subgraphs"], 2);
    assert_eq!(v["max_depth"], 1);
    assert_eq!(v["ops"]["If"], 1);
    assert_eq!(v["ops"]["Relu"], 1);
    assert_eq!(v["ops"]["Neg"], 1);
    assert_eq!(v["inputs"][0]["dtype"], "bool");
    assert_eq!(v["inputs"][0]["shape"], serde_json::json!([]));
    assert_eq!(v["inputs"][1]["shape"], serde_json::json!([null, 4]));
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Braces balance outside quoted strings, and the text is one `digraph`.
fn assert_dot(text: &str) {
    assert!(text.starts_with("digraph \""), "not a digraph:\n{text}");
    assert!(text.trim_end().ends_with('}'));
    let (mut depth, mut quoted, mut escaped) = (0i64, false, false);
    for c in text.chars() {
        if quoted {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => quoted = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                assert!(depth >= 0, "unbalanced braces");
            }
            _ => {}
        }
    }
    assert!(!quoted, "an unterminated string");
    assert_eq!(depth, 0, "unbalanced braces");
}

#[test]
fn dot_pictures_highlight_rule_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let dots = dir.path().join("pictures");
    // An extra rule pins the Sigmoid to the CPU, so both highlights show up.
    let rules = dir.path().join("pin.yaml");
    std::fs::write(
        &rules,
        "rules:\n  - id: sigmoid-on-cpu\n    why: test\n    evidence: []\n    match: {op: Sigmoid}\n    action: cpu\n",
    )
    .unwrap();
    let model = sample();
    let o = run(&[
        model.to_str().unwrap(),
        "--target",
        "rx580",
        "--rules",
        rules.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--dot",
        dots.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.exists());
    let before = read(&dots.join("before.dot"));
    let after = read(&dots.join("after.dot"));
    assert_dot(&before);
    assert_dot(&after);
    // Before: 76 plain nodes, nothing highlighted.
    assert_eq!(before.matches("\\nConv\"").count(), 27);
    assert!(!before.contains("class=\"created\""));
    assert!(!before.contains("class=\"pinned\""));
    assert!(!before.contains("cluster_legend"));
    assert!(before.contains("->"));
    // After: the split's nodes are orange and name their rule; the Sigmoid is blue.
    assert!(after.contains("class=\"created\""));
    assert!(after.contains("rule: split-depthwise"));
    assert!(after.contains(onnx_safeify::ir::dot::CREATED_COLOR));
    let pinned: Vec<&str> = after
        .lines()
        .filter(|l| l.contains("class=\"pinned\""))
        .collect();
    assert!(!pinned.is_empty());
    assert!(pinned.iter().any(|l| l.contains("\\nSigmoid\\n")));
    assert!(pinned.iter().all(|l| l.contains("layer_ann=safeify_cpu")));
    assert!(after.contains("cluster_legend"));
}

#[test]
fn dot_for_an_untouched_model_is_the_same_picture() {
    let dir = tempfile::tempdir().unwrap();
    let dots = dir.path().join("d");
    let model = sample();
    let o = run(&[
        model.to_str().unwrap(),
        "--target",
        "none",
        "-o",
        dir.path().join("o.onnx").to_str().unwrap(),
        "--dot",
        dots.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let before = read(&dots.join("before.dot"));
    let after = read(&dots.join("after.dot"));
    assert_eq!(
        before.replacen("(before)", "(after)", 2),
        after,
        "no rule, no change in the picture"
    );
}

/// `inspect` reports what inference sees: the sample is fully inferred (its batch a name),
/// and a genai-style decoder with grouped-query attention, rotary embeddings and fused RMS
/// norms keeps the type, rank and full shape of every value.
#[test]
fn inspect_reports_inference_coverage() {
    let model = sample();
    let o = run(&["inspect", model.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
    let inf = &v["inference"];
    assert_eq!(inf["values"], 76);
    for key in ["dtype", "rank", "shape"] {
        assert_eq!(inf[key]["count"], 76, "{key}");
        assert_eq!(inf[key]["percent"], 100.0, "{key}");
    }
    // The batch is symbolic: no value has a static shape.
    assert_eq!(inf["static_shape"]["count"], 0);
    assert!(inf["gaps"].as_object().unwrap().is_empty());
    let o = run(&["inspect", model.to_str().unwrap()]);
    let text = stdout(&o);
    assert!(
        text.contains(
            "inferred     76 values: type 100.0%, rank 100.0%, full shape 100.0% (0.0% static)"
        ),
        "{text}"
    );

    let Some(corpus) = common::corpus() else {
        eprintln!("SKIPPED the transformer half of inspect_reports_inference_coverage: no corpus");
        return;
    };
    let llama = corpus.join("transformers/llama_rope_gqa.onnx");
    if !llama.exists() {
        eprintln!(
            "SKIPPED: {} is missing (scripts/corpus.sh builds it)",
            llama.display()
        );
        return;
    }
    let o = run(&["inspect", llama.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
    let inf = &v["inference"];
    let n = inf["values"].as_u64().unwrap();
    assert!(n > 40, "{inf}");
    for key in ["dtype", "rank", "shape"] {
        assert_eq!(inf[key]["count"].as_u64(), Some(n), "{key}: {inf}");
    }
    assert!(inf["gaps"].as_object().unwrap().is_empty(), "{inf}");
}
