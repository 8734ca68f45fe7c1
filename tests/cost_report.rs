//! The cost of safety and the exactness of rewrites, as the summary, `--report`, `check
//! --format json`, the output's metadata and `explain` give them: on hand-built models whose
//! figures are worked out by hand below.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{float_init, node, vi};
use onnx_safeify::proto::{
    tensor_shape_proto, type_proto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};

fn run(args: &[&str]) -> Output {
    Command::new(common::bin()).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A tensor type of element type `elem` whose first dim is `N` (symbolic) and the rest known.
fn ty(elem: i32, rest: &[i64]) -> TypeProto {
    use tensor_shape_proto::dimension::Value as DV;
    let mut dim = vec![tensor_shape_proto::Dimension {
        value: Some(DV::DimParam("N".into())),
        denotation: None,
    }];
    dim.extend(rest.iter().map(|&d| tensor_shape_proto::Dimension {
        value: Some(DV::DimValue(d)),
        denotation: None,
    }));
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem),
            shape: Some(TensorShapeProto { dim }),
        })),
        denotation: None,
    }
}

fn vi_n(name: &str, elem: i32, rest: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(ty(elem, rest)),
        ..Default::default()
    }
}

fn annotated(mut n: NodeProto, annotation: &str) -> NodeProto {
    n.metadata_props.push(StringStringEntryProto {
        key: Some("layer_ann".into()),
        value: Some(annotation.into()),
    });
    n
}

fn with_attr_ints(mut n: NodeProto, name: &str, v: &[i64]) -> NodeProto {
    n.attribute.push(onnx_safeify::proto::AttributeProto {
        name: Some(name.into()),
        r#type: Some(onnx_safeify::proto::attribute_proto::AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    });
    n
}

fn model_with(graph: GraphProto, extra_domains: &[(&str, i64)]) -> ModelProto {
    let mut m = common::model(graph);
    for (d, v) in extra_domains {
        m.opset_import.push(OperatorSetIdProto {
            domain: Some(d.to_string()),
            version: Some(*v),
        });
    }
    m
}

/// x[N,3,8,8] -> conv1 (GPU) -> a[N,4,8,8]
///   a -> relu (CPU) -> b -> conv2 (CPU, heavy) -> c[N,4,8,8]
///   concat(c, a) (GPU; the rule below pins it) -> d[N,8,8,8]
///   d -> matmul (GPU, heavy, W[8,2]) -> e[N,8,8,2] -> sigmoid (CPU) -> f
///   f -> mul (annotated for another annotation: GPU) -> g -> mystery (GPU, unknown shape) -> h
///   h -> relu2 (CPU) -> y
fn pinned_model() -> ModelProto {
    let cpu = |n| annotated(n, "safeify_cpu");
    let pads = |n| with_attr_ints(n, "pads", &[1, 1, 1, 1]);
    let mut concat = node("Concat", "concat", &["c", "a"], &["d"]);
    concat.attribute.push(common::int_attr("axis", 1));
    let mut mystery = node("Mystery", "mystery", &["g"], &["h"]);
    mystery.domain = Some("com.example".into());
    let graph = GraphProto {
        node: vec![
            pads(node("Conv", "conv1", &["x", "w1"], &["a"])),
            cpu(node("Relu", "relu", &["a"], &["b"])),
            cpu(pads(node("Conv", "conv2", &["b", "w2"], &["c"]))),
            concat,
            node("MatMul", "matmul", &["d", "w3"], &["e"]),
            cpu(node("Sigmoid", "sigmoid", &["e"], &["f"])),
            annotated(node("Mul", "mul", &["f", "f"], &["g"]), "someone_else"),
            mystery,
            cpu(node("Relu", "relu2", &["h"], &["y"])),
        ],
        name: Some("pins".into()),
        initializer: vec![
            float_init("w1", &[4, 3, 3, 3], &[0.1; 108]),
            float_init("w2", &[4, 4, 3, 3], &[0.1; 144]),
            float_init("w3", &[8, 2], &[0.5; 16]),
        ],
        input: vec![vi_n("x", 1, &[3, 8, 8])],
        output: vec![ValueInfoProto {
            name: Some("y".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    model_with(graph, &[("com.example", 1)])
}

const PIN_CONCAT: &str = "\
rules:
  - id: concat-on-cpu
    why: test - keep Concat on the CPU
    evidence: []
    match: {op: Concat}
    action: cpu
";

fn figures(v: &serde_json::Value) -> [u64; 7] {
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    [
        n("heavy_ops_gpu"),
        n("heavy_ops_cpu"),
        n("gpu_pieces"),
        n("crossings"),
        n("crossing_bytes"),
        n("crossings_unknown_size"),
        v["heavy_ops_gpu_percent"]
            .as_f64()
            .map_or(0, |p| (p * 10.0).round() as u64),
    ]
}

#[test]
fn cost_of_safety_counts_heavy_ops_pieces_and_crossings_before_and_after() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("pins.onnx");
    std::fs::write(&input, common::encode(&pinned_model())).unwrap();
    let rules = dir.path().join("pin-concat.yaml");
    std::fs::write(&rules, PIN_CONCAT).unwrap();
    let out = dir.path().join("out.onnx");
    let report = dir.path().join("report.json");
    let o = run(&[
        s(&input),
        "--target",
        "none",
        "--rules",
        s(&rules),
        "--dim",
        "N=2",
        "-o",
        s(&out),
        "--report",
        s(&report),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let pinned: Vec<&str> = v["pinned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    // The `cpu` action grows the pinned region over matmul, which now sits between CPU
    // nodes (concat and sigmoid).
    assert_eq!(
        pinned,
        ["relu", "conv2", "concat", "matmul", "sigmoid", "relu2"],
        "{pinned:?}"
    );
    // Input: heavy conv1, matmul on the GPU, conv2 on the CPU. GPU pieces {conv1, concat,
    // matmul} and {mul, mystery} (mul's annotation is not this compile's). Crossings at N=2:
    // a (GPU->CPU, 2*4*8*8 floats: 2048 B), c (CPU->GPU, 2048 B), e (GPU->CPU, 2*8*8*2
    // floats: 1024 B), f (CPU->GPU, 1024 B), h (GPU->CPU, shape unknown).
    assert_eq!(
        figures(&v["cost"]["input"]),
        [2, 1, 2, 5, 6144, 1, 667],
        "{}",
        v["cost"]
    );
    // Output: matmul went to the CPU; pieces {conv1} and {mul, mystery}; a still crosses
    // (to relu and concat), c and e no longer do, f and h still do.
    assert_eq!(
        figures(&v["cost"]["output"]),
        [1, 2, 2, 3, 3072, 1, 333],
        "{}",
        v["cost"]
    );
    // The summary says the same.
    let summary = text(&o);
    assert!(
        summary.contains(
            "cost of safety: heavy ops on the GPU 1/3 (33.3%, input 66.7%), 2 GPU piece(s) (input 2)\n  3 CPU<->GPU crossing(s) (input 5): 3.1 kB per inference at the assumed sizes (input 6.1 kB), and 1 of unknown size (input 1)\n"
        ),
        "{summary}"
    );
    // A pin is exact: the report and the output's metadata say so.
    assert_eq!(v["exactness"], "exact");
    assert_eq!(v["applied"][0]["exactness"], "exact");
    assert_eq!(v["applied"][0]["bound"], "bit-identical");
    assert_eq!(
        metadata(&out, "onnx_safeify.exactness").as_deref(),
        Some("exact")
    );

    // `check --format json` gives the figures of the model it checks: the output's are the
    // compile's output figures, the input's its input figures.
    for (model, side) in [(&out, "output"), (&input, "input")] {
        let o = run(&[
            "check",
            s(model),
            "--target",
            "none",
            "--rules",
            s(&rules),
            "--dim",
            "N=2",
            "--format",
            "json",
        ]);
        let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            figures(&c["cost"]),
            figures(&v["cost"][side]),
            "{side}: {c}"
        );
    }

    // The sizes used are the ones assumed: at N=1 every known crossing halves.
    let o = run(&[
        "check",
        s(&input),
        "--target",
        "none",
        "--dim",
        "N=1",
        "--format",
        "json",
    ]);
    let c: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(figures(&c["cost"]), [2, 1, 2, 5, 3072, 1, 667], "{c}");
}

/// A model no rule touches is written as it was read: no exactness key, the same bytes.
#[test]
fn an_untouched_model_gets_no_exactness_key() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("pins.onnx");
    std::fs::write(&input, common::encode(&pinned_model())).unwrap();
    let rules = dir.path().join("lstm.yaml");
    std::fs::write(
        &rules,
        PIN_CONCAT
            .replace("op: Concat", "op: LSTM")
            .replace("concat-on-cpu", "lstm-on-cpu"),
    )
    .unwrap();
    let out = dir.path().join("out.onnx");
    let report = dir.path().join("report.json");
    let o = run(&[
        s(&input),
        "--target",
        "none",
        "--rules",
        s(&rules),
        "-o",
        s(&out),
        "--report",
        s(&report),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&input).unwrap());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["exactness"], "exact");
    assert_eq!(v["applied"].as_array().map(Vec::len), Some(0));
    // Unchanged: before and after are the same figures.
    assert_eq!(v["cost"]["input"], v["cost"]["output"]);
}

fn metadata(path: &Path, key: &str) -> Option<String> {
    let doc = onnx_safeify::load(path).unwrap();
    doc.model
        .metadata_props
        .iter()
        .find(|e| e.key.as_deref() == Some(key))
        .and_then(|e| e.value.clone())
}

fn f16_init(name: &str, dims: &[i64], value: f32) -> TensorProto {
    let n: i64 = dims.iter().product();
    let bits = half_bits(value);
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(10),
        name: Some(name.into()),
        raw_data: Some(
            (0..n)
                .flat_map(|_| bits.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        ),
        ..Default::default()
    }
}

/// float32 -> float16 bits for the simple values used here (normal numbers, exact in f16).
fn half_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    let mant = ((b >> 13) & 0x3ff) as u16;
    assert!((1..31).contains(&exp), "{v}");
    sign | ((exp as u16) << 10) | mant
}

/// x[N,2,6,6] float16 -> Conv (float16) -> Relu -> y.
fn fp16_model() -> ModelProto {
    let graph = GraphProto {
        node: vec![
            node("Conv", "conv", &["x", "w"], &["c"]),
            node("Relu", "relu", &["c"], &["y"]),
        ],
        name: Some("fp16".into()),
        initializer: vec![f16_init("w", &[2, 2, 3, 3], 0.25)],
        input: vec![vi_n("x", 10, &[2, 6, 6])],
        output: vec![vi_n("y", 10, &[2, 4, 4])],
        ..Default::default()
    };
    model_with(graph, &[])
}

const FENCE: &str = "\
target: fence-test
description: test - compute float16 convolutions in float32
extends: none
rules:
  - id: fence-fp16-conv
    why: test - float16 convolutions computed in float32
    evidence: []
    match: {op: Conv, any_input: {dtype: float16}}
    action: {cast: {from: float16, to: float}}
    fallback: cpu
";

#[test]
fn approximate_rewrites_fall_back_unless_allowed_and_are_listed_with_their_bound() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("fp16.onnx");
    std::fs::write(&input, common::encode(&fp16_model())).unwrap();
    let target = dir.path().join("fence.yaml");
    std::fs::write(&target, FENCE).unwrap();
    let bound = onnx_safeify::rewrite::cast::PRECISION_FENCE_BOUND;
    let class = onnx_safeify::rewrite::Exactness::Approximate(bound, 0.0);

    // Not allowed: the node falls back to the CPU (cause `approximate`), which is exact.
    let out = dir.path().join("refused.onnx");
    let report = dir.path().join("refused.json");
    let o = run(&[
        s(&input),
        "--target",
        s(&target),
        "-o",
        s(&out),
        "--report",
        s(&report),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["applied"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(v["fallbacks"][0]["node"], "conv");
    assert_eq!(v["fallbacks"][0]["cause"], "approximate");
    assert_eq!(v["exactness"], "exact");
    assert_eq!(
        metadata(&out, "onnx_safeify.exactness").as_deref(),
        Some("exact")
    );
    let summary = text(&o);
    assert!(
        summary.contains("conv (Conv) [fence-fp16-conv, approximate]"),
        "{summary}"
    );
    assert!(!summary.contains("  approximate:"), "{summary}");
    // The only heavy op went to the CPU.
    assert_eq!(v["cost"]["output"]["heavy_ops_gpu"], 0);
    assert_eq!(v["cost"]["output"]["heavy_ops_cpu"], 1);
    assert_eq!(v["cost"]["input"]["heavy_ops_gpu"], 1);
    assert!(
        summary.contains("heavy ops on the GPU 0/1 (0%, input 100%)"),
        "{summary}"
    );

    // Allowed: the fence is applied, listed with its bound, and the output says approximate.
    let out = dir.path().join("fenced.onnx");
    let report = dir.path().join("fenced.json");
    let o = run(&[
        s(&input),
        "--target",
        s(&target),
        "--allow-approximate",
        "-o",
        s(&out),
        "--report",
        s(&report),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["fallbacks"].as_array().map(Vec::len), Some(0), "{v}");
    let applied = &v["applied"][0];
    assert_eq!(applied["node"], "conv");
    assert_eq!(applied["exactness"], "approximate");
    assert_eq!(applied["bound"], class.bound_text().as_str());
    assert_eq!(v["exactness"], class.to_meta().as_str());
    assert_eq!(
        metadata(&out, "onnx_safeify.exactness"),
        Some(class.to_meta())
    );
    assert_eq!(
        onnx_safeify::rewrite::Exactness::from_meta(&class.to_meta()),
        Some(class)
    );
    let summary = text(&o);
    assert!(
        summary.contains(&format!(
            "exactness: 1 approximate; the output is approximate ({})\n  approximate: conv (Conv) [fence-fp16-conv]: {}\n",
            class.bound_text(),
            class.bound_text()
        )),
        "{summary}"
    );
    assert_eq!(v["cost"]["output"]["heavy_ops_gpu"], 1);

    // `explain` says what the rule's rewrite is.
    let o = run(&["explain", s(&input), "--target", s(&target)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("  exactness: approximate (a precision fence, float16 computed in float)"),
        "{out}"
    );
    let o = run(&[
        "explain",
        s(&input),
        "--target",
        s(&target),
        "--node",
        "conv",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("fence-fp16-conv: exactness approximate (a precision fence"),
        "{out}"
    );
}

/// `explain` on an unfuse rule: each node's op with the class of its decomposition.
#[test]
fn explain_gives_each_unfused_op_its_class() {
    let dir = tempfile::tempdir().unwrap();
    let mut gelu = node("Gelu", "gelu", &["x"], &["g"]);
    gelu.domain = Some("com.microsoft".into());
    let mut other = node("NoSuchFusedOp", "other", &["g"], &["y"]);
    other.domain = Some("com.microsoft".into());
    let graph = GraphProto {
        node: vec![gelu, other],
        name: Some("ms".into()),
        input: vec![vi("x", &[1, 4])],
        output: vec![vi("y", &[1, 4])],
        ..Default::default()
    };
    let input = dir.path().join("ms.onnx");
    std::fs::write(
        &input,
        common::encode(&model_with(graph, &[("com.microsoft", 1)])),
    )
    .unwrap();
    let target = dir.path().join("unfuse.yaml");
    std::fs::write(
        &target,
        "target: unfuse-test\ndescription: test\nextends: none\nrules:\n  - id: unfuse-ms\n    why: test\n    evidence: []\n    match: {domain: com.microsoft}\n    action: unfuse\n    fallback: cpu\n",
    )
    .unwrap();
    let o = run(&["explain", s(&input), "--target", s(&target)]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("  - gelu (Gelu) [rounding]"), "{out}");
    assert!(
        out.contains("  - other (NoSuchFusedOp) [no decomposition: falls back]"),
        "{out}"
    );
    let o = run(&[
        "explain",
        s(&input),
        "--target",
        s(&target),
        "--node",
        "gelu",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("unfuse-ms: exactness rounding"), "{out}");
}
