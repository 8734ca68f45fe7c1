//! The compiler's core: every action has a pass, refusals are values with a cause, and the one
//! walker gives every node of every body with its scope path.

mod common;

use common::{float_init, model, node, vi};
use onnx_safeify::analysis::Sizes;
use onnx_safeify::engine::{self, FindingKind};
use onnx_safeify::ir::scope;
use onnx_safeify::proto::{
    attribute_proto::AttributeType, tensor_proto, type_proto, AttributeProto, GraphProto,
    OperatorSetIdProto, TypeProto, ValueInfoProto,
};
use onnx_safeify::rewrite::pass::{Cause, Cx, Pending};
use onnx_safeify::rewrite::{pass_for, unfuse, PASSES};
use onnx_safeify::rules::schema::Fallback;
use onnx_safeify::rules::{parse_target_str, Action};

#[test]
fn every_action_has_exactly_one_pass() {
    for name in Action::NAMES {
        let p = pass_for(name).unwrap_or_else(|| panic!("no pass for action {name}"));
        assert_eq!(p.action(), name);
        assert_eq!(PASSES.iter().filter(|p| p.action() == name).count(), 1);
    }
    assert_eq!(PASSES.len(), Action::NAMES.len());
}

fn scalar_type(elem: i32) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem),
            shape: Some(Default::default()),
        })),
        ..Default::default()
    }
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(Box::new(g)),
        ..Default::default()
    }
}

/// main: r = Relu(x); if c { loop trip times { deep_add = r + r } } else { Identity(r) }.
fn nested() -> onnx_safeify::Model {
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![
            node("Add", "deep_add", &["r", "r"], &["s"]),
            node("Identity", "keep_going", &["cond_in"], &["cond_out"]),
        ],
        input: vec![
            ValueInfoProto {
                name: Some("i".into()),
                r#type: Some(scalar_type(tensor_proto::DataType::Int64 as i32)),
                ..Default::default()
            },
            ValueInfoProto {
                name: Some("cond_in".into()),
                r#type: Some(scalar_type(tensor_proto::DataType::Bool as i32)),
                ..Default::default()
            },
        ],
        output: vec![
            ValueInfoProto {
                name: Some("cond_out".into()),
                ..Default::default()
            },
            ValueInfoProto {
                name: Some("s".into()),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let mut inner_loop = node("Loop", "inner_loop", &["trip", ""], &["stacked"]);
    inner_loop.attribute.push(graph_attr("body", body));
    let then_branch = GraphProto {
        name: Some("then".into()),
        node: vec![inner_loop],
        output: vec![ValueInfoProto {
            name: Some("stacked".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let else_branch = GraphProto {
        name: Some("else".into()),
        node: vec![node("Identity", "pass_through", &["r"], &["e"])],
        output: vec![ValueInfoProto {
            name: Some("e".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut iff = node("If", "if", &["c"], &["y"]);
    iff.attribute.push(graph_attr("then_branch", then_branch));
    iff.attribute.push(graph_attr("else_branch", else_branch));
    let g = GraphProto {
        name: Some("main".into()),
        node: vec![node("Relu", "outer_relu", &["x"], &["r"]), iff],
        input: vec![
            vi("x", &[1, 4]),
            ValueInfoProto {
                name: Some("c".into()),
                r#type: Some(scalar_type(tensor_proto::DataType::Bool as i32)),
                ..Default::default()
            },
            ValueInfoProto {
                name: Some("trip".into()),
                r#type: Some(scalar_type(tensor_proto::DataType::Int64 as i32)),
                ..Default::default()
            },
        ],
        output: vec![ValueInfoProto {
            name: Some("y".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    onnx_safeify::import::import_model(model(g), None).expect("a valid nested model")
}

#[test]
fn the_walker_gives_every_scope_with_its_path() {
    let m = nested();
    let scopes = scope::graphs(&m.graph);
    let paths: Vec<String> = scopes.iter().map(|s| s.path.to_string()).collect();
    assert_eq!(
        paths,
        [
            "",
            "if/then_branch",
            "if/then_branch/inner_loop/body",
            "if/else_branch"
        ]
    );
    assert_eq!(
        scopes.iter().map(|s| s.path.depth()).collect::<Vec<_>>(),
        [0, 1, 2, 1]
    );
    let names: Vec<String> = scope::nodes(&scopes).map(|n| n.qualified_name()).collect();
    assert_eq!(
        names,
        [
            "outer_relu",
            "if",
            "if/then_branch/inner_loop",
            "if/then_branch/inner_loop/body/deep_add",
            "if/then_branch/inner_loop/body/keep_going",
            "if/else_branch/pass_through"
        ]
    );
    // `r`, read two levels down, resolves to the main graph's Relu output.
    let body = &scopes[2];
    let add = body
        .graph
        .order
        .iter()
        .copied()
        .find(|&n| body.graph.node(n).name() == "deep_add")
        .unwrap();
    let r_inner = body.graph.node(add).inputs[0].unwrap();
    let found = body.resolve(r_inner).expect("an outer-scope value");
    assert_eq!(found.levels_up, 2);
    assert!(std::ptr::eq(found.graph, &m.graph));
    assert_eq!(found.graph.value_name(found.value), "r");
    // A value defined in the body itself is not an outer-scope read.
    let s = body.graph.node(add).outputs[0].unwrap();
    assert!(body.resolve(s).is_none());
    // Graph::walk goes through the same walker.
    let mut depths = Vec::new();
    m.graph.walk(0, &mut |_, d| depths.push(d));
    assert_eq!(depths, [0, 1, 2, 1]);
}

#[test]
fn the_mutable_walker_hands_each_body_what_its_parent_computed() {
    let mut m = nested();
    let mut seen = Vec::new();
    scope::fold_graphs_mut(&mut m.graph, &0usize, &mut |path, g, depth_from_parent| {
        assert_eq!(*depth_from_parent, path.depth());
        seen.push((path.to_string(), g.node_count()));
        path.depth() + 1
    });
    assert_eq!(
        seen,
        [
            ("".to_string(), 2),
            ("if/then_branch".to_string(), 1),
            ("if/then_branch/inner_loop/body".to_string(), 2),
            ("if/else_branch".to_string(), 1),
        ]
    );
}

/// x -> com.microsoft::Inverse (no decomposition) -> y.
fn undecomposable() -> onnx_safeify::Model {
    let g = GraphProto {
        name: Some("q".into()),
        node: vec![{
            let mut n = node("Inverse", "inv", &["x", "w", "s"], &["y"]);
            n.domain = Some("com.microsoft".into());
            n
        }],
        initializer: vec![
            float_init("w", &[4, 4], &[0.0; 16]),
            float_init("s", &[1], &[1.0]),
        ],
        input: vec![vi("x", &[1, 4])],
        output: vec![vi("y", &[1, 4])],
        ..Default::default()
    };
    let mut p = model(g);
    p.opset_import.push(OperatorSetIdProto {
        domain: Some("com.microsoft".into()),
        version: Some(1),
    });
    onnx_safeify::import::import_model(p, None).unwrap()
}

const UNFUSE_MS: &str = "target: t
description: unfuse contrib ops
extends: none
rules:
  - id: unfuse-ms
    why: test
    evidence: [test]
    match: {domain: com.microsoft}
    action: unfuse
";

#[test]
fn a_refusal_is_a_value_with_a_cause() {
    let m = undecomposable();
    let target = parse_target_str("t.yaml", UNFUSE_MS).unwrap();
    let sizes = Sizes::none();
    let cx = Cx::new(&m, &target, &sizes, "safeify_cpu");
    let inv = m.graph.order[0];
    let pass = pass_for("unfuse").unwrap();
    assert_eq!(pass.pending(&cx, &target.rules[0], inv), Pending::Fires);
    let plans = pass.plan(&cx, 0, &[inv]);
    assert_eq!(plans.len(), 1);
    let refusal = plans[0].outcome.as_ref().unwrap_err();
    assert_eq!(refusal.cause, Cause::NoRewrite);
    assert!(refusal.reason.contains("no decomposition"), "{refusal}");
    assert_eq!(plans[0].covers[0].name, "inv");
    assert_eq!(plans[0].covers[0].op, "com.microsoft::Inverse");

    // The driver reports it once, as unsupported, and leaves the node as it was.
    let mut m = m;
    let report = engine::compile(&mut m, &target, &engine::Options::default());
    assert!(report.applied.is_empty());
    assert_eq!(report.remaining.len(), 1, "{:?}", report.remaining);
    assert_eq!(report.remaining[0].kind, FindingKind::Unsupported);
    assert_eq!(report.remaining[0].node, "inv");
    assert_eq!(m.graph.node_count(), 1);
    // The same decomposition, asked directly, gives the same cause.
    let facts = onnx_safeify::infer::infer_model(&m, &Default::default());
    let ctx = unfuse::UnfuseCtx::new(17, "r", &facts);
    assert_eq!(
        unfuse::unfuse_node(&ctx, &m.graph, inv).unwrap_err().cause,
        Cause::NoRewrite
    );
}

#[test]
fn infer_is_the_one_source_of_uses_and_body_reads() {
    let m = nested();
    let facts = onnx_safeify::infer::infer_model(&m, &Default::default());
    let g = &m.graph;
    let relu = g.order[0];
    let r = g.node(relu).outputs[0].unwrap();
    // `r` is read by name inside both branches (If's implicit input), and used.
    assert!(facts.is_used(r));
    assert!(facts.read_by_body(r));
    let x = g.node(relu).inputs[0].unwrap();
    assert!(facts.is_used(x));
    assert!(!facts.read_by_body(x));
    assert_eq!(
        facts.shape(r).map(<[_]>::to_vec),
        Some(vec![
            onnx_safeify::infer::Dim::Known(1),
            onnx_safeify::infer::Dim::Known(4)
        ])
    );
}

const FALLBACK_CPU: &str = "target: t
description: unfuse contrib ops, else the CPU
extends: none
fallback: cpu
rules:
  - id: unfuse-ms
    why: test
    evidence: [test]
    match: {domain: com.microsoft}
    action: unfuse
";

#[test]
fn a_node_that_cannot_be_rewritten_falls_back_to_the_cpu() {
    let target = parse_target_str("t.yaml", FALLBACK_CPU).unwrap();
    assert_eq!(target.fallback, Some(Fallback::Cpu));
    let opts = engine::Options::default();
    // check says what the compile will do with it, and why.
    let mut m = undecomposable();
    let found = engine::check(&mut m, &target, &opts);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].kind, FindingKind::FallsBack);
    assert!(found[0]
        .reason
        .as_deref()
        .unwrap()
        .contains("no decomposition"));
    // The compile pins it, reports it as a fallback, and leaves nothing blocking.
    let report = engine::compile(&mut m, &target, &opts);
    assert!(report.remaining.is_empty(), "{:?}", report.remaining);
    assert_eq!(report.fallbacks.len(), 1);
    let fb = &report.fallbacks[0];
    assert_eq!(
        (
            fb.node.as_str(),
            fb.cause.as_str(),
            fb.to.as_str(),
            fb.rule.as_str()
        ),
        ("inv", "no-rewrite", "cpu", "unfuse-ms")
    );
    assert_eq!(report.pinned, ["inv"]);
    let node = m.graph.node(m.graph.order[0]);
    assert_eq!(node.metadata("layer_ann"), Some("safeify_cpu"));
    assert_eq!(node.metadata("onnx_safeify.rule"), Some("unfuse-ms"));
    // The output is clean under check, and compiling it again changes nothing.
    assert!(engine::check(&mut m, &target, &opts).is_empty());
    let again = engine::compile(&mut m, &target, &opts);
    assert!(again.applied.is_empty() && again.fallbacks.is_empty());
}

#[test]
fn a_rule_may_fall_back_to_deny_and_a_later_file_overrides_the_default() {
    let deny = FALLBACK_CPU.replace(
        "    action: unfuse\n",
        "    action: unfuse\n    fallback: deny\n",
    );
    let target = parse_target_str("t.yaml", &deny).unwrap();
    assert_eq!(target.rules[0].fallback, Some(Fallback::Deny));
    let mut m = undecomposable();
    let report = engine::compile(&mut m, &target, &engine::Options::default());
    assert!(report.fallbacks.is_empty());
    assert_eq!(report.remaining.len(), 1);
    assert_eq!(report.remaining[0].kind, FindingKind::Denied);
    assert!(report.pinned.is_empty());

    // No fallback: the node is unsupported, as before fallbacks existed.
    let target = parse_target_str("t.yaml", UNFUSE_MS).unwrap();
    assert_eq!(target.fallback, None);
    let mut m = undecomposable();
    let report = engine::compile(&mut m, &target, &engine::Options::default());
    assert_eq!(report.remaining[0].kind, FindingKind::Unsupported);

    // A fallback that is neither cpu nor deny is an error at its line.
    let bad = FALLBACK_CPU.replace("fallback: cpu", "fallback: cpux");
    let err = parse_target_str("t.yaml", &bad).unwrap_err().to_string();
    assert!(err.contains("t.yaml:4:"), "{err}");
    assert!(err.contains("unknown fallback `cpux`"), "{err}");
    assert!(err.contains("did you mean `cpu`?"), "{err}");
}

#[test]
fn built_in_gpu_targets_fall_back_to_the_cpu() {
    for name in onnx_safeify::rules::builtin_names() {
        let t = onnx_safeify::rules::load_target(name).unwrap();
        let expected = match name {
            "none" => None,
            // Its runtime settings do not make ONNX Runtime honour CPU pins.
            "openvino-gpu" => None,
            _ => Some(Fallback::Cpu),
        };
        assert_eq!(t.fallback, expected, "{name}");
        if expected == Some(Fallback::Cpu) {
            assert!(
                t.runtime_value("session.layer_assignment_settings")
                    .is_some(),
                "{name} pins nodes without the session option that honours the pins"
            );
        }
    }
}

#[test]
fn the_nchwc_block_size_can_be_given_and_a_wrong_one_falls_back_to_the_cpu() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let src = corpus.join("ort_optimized/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.ort_all.onnx");
    let target = onnx_safeify::rules::load_target("rx580").unwrap();
    let nchwc = |m: &onnx_safeify::Model| {
        m.graph
            .order
            .iter()
            .filter(|&&n| m.graph.node(n).domain() == unfuse::NCHWC_DOMAIN)
            .count()
    };
    // The corpus's ORT-optimised model takes the NCHWc block size of the CPU that made it
    // (8 with AVX2, 16 with AVX-512): the other size does not fit it.
    let region_causes = |block: i64| {
        let mut doc = onnx_safeify::load(&src).unwrap();
        let opts = engine::Options {
            nchwc_block: Some(block),
            ..Default::default()
        };
        let report = engine::compile(&mut doc.model, &target, &opts);
        (doc, opts, report)
    };
    let (_, _, r8) = region_causes(8);
    let eight_fits = !r8
        .fallbacks
        .iter()
        .any(|f| f.op.starts_with(unfuse::NCHWC_DOMAIN) && f.cause == "layout");
    let (wrong, right) = if eight_fits { (16, 8) } else { (8, 16) };
    // The wrong size: the region stays whole, on the CPU, and the report says why.
    let mut doc = onnx_safeify::load(&src).unwrap();
    let before = nchwc(&doc.model);
    assert!(before > 0);
    let (mut doc2, opts, report) = region_causes(wrong);
    std::mem::swap(&mut doc, &mut doc2);
    assert_eq!(nchwc(&doc.model), before);
    assert!(report.remaining.is_empty(), "{:?}", report.remaining);
    let region: Vec<_> = report
        .fallbacks
        .iter()
        .filter(|f| f.op.starts_with(unfuse::NCHWC_DOMAIN))
        .collect();
    assert_eq!(region.len(), before);
    assert!(region.iter().all(|f| f.cause == "layout" && f.to == "cpu"));
    assert!(
        region[0].reason.contains(&format!("block size {wrong}")),
        "{}",
        region[0].reason
    );
    assert!(engine::check(&mut doc.model, &target, &opts).is_empty());
    // The right size fits: the region is decomposed, when approximations are allowed (an
    // NCHWc Conv as a standard Conv is approximate); otherwise it stays on the CPU.
    let (doc, _, report) = region_causes(right);
    assert_eq!(nchwc(&doc.model), before);
    assert!(
        report.fallbacks.iter().any(|f| f.cause == "approximate"),
        "{:?}",
        report.fallbacks
    );
    let mut doc = onnx_safeify::load(&src).unwrap();
    let opts = engine::Options {
        nchwc_block: Some(right),
        allow_approximate: true,
        ..Default::default()
    };
    let report = engine::compile(&mut doc.model, &target, &opts);
    assert_eq!(nchwc(&doc.model), 0);
    assert!(report.fallbacks.is_empty(), "{:?}", report.fallbacks);
}

/// `Cx::exact_dims` reads an undeclared initializer's own dims (no second inference) and, for
/// a declared or overridable one, gives what the exact facts give, which is not what the
/// assumed-size facts give when a declaration has an open dimension.
#[test]
fn exact_dims_are_the_exact_facts_dims() {
    use onnx_safeify::proto::{tensor_shape_proto, TensorShapeProto};
    let sym_vi = |name: &str, dims: &[&str]| {
        let mut v = vi(name, &[]);
        if let Some(type_proto::Value::TensorType(t)) =
            v.r#type.as_mut().and_then(|t| t.value.as_mut())
        {
            t.shape = Some(TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|d| tensor_shape_proto::Dimension {
                        value: Some(match d.parse::<i64>() {
                            Ok(n) => tensor_shape_proto::dimension::Value::DimValue(n),
                            Err(_) => tensor_shape_proto::dimension::Value::DimParam(d.to_string()),
                        }),
                        denotation: None,
                    })
                    .collect(),
            });
        }
        v
    };
    let w = |name: &str| float_init(name, &[8, 1, 3, 3], &[0.5; 72]);
    let g = GraphProto {
        node: vec![
            node("Conv", "c_plain", &["x", "w_plain"], &["y1"]),
            node("Conv", "c_declared", &["x", "w_declared"], &["y2"]),
            node("Conv", "c_input", &["x", "w_input"], &["y3"]),
            node("Conv", "c_conflict", &["x", "w_conflict"], &["y4"]),
        ],
        name: Some("g".into()),
        input: vec![
            sym_vi("x", &["N", "8", "7", "7"]),
            vi("w_input", &[8, 1, 3, 3]),
        ],
        output: vec![
            sym_vi("y1", &["N", "8", "5", "5"]),
            sym_vi("y2", &["N", "8", "5", "5"]),
            sym_vi("y3", &["N", "8", "5", "5"]),
            sym_vi("y4", &["N", "8", "5", "5"]),
        ],
        initializer: vec![w("w_plain"), w("w_declared"), w("w_input"), w("w_conflict")],
        // A declaration with an open first dim that the assumed size fills in wrongly, and
        // one that contradicts the initializer (the declaration is kept).
        value_info: vec![
            sym_vi("w_declared", &["N", "1", "3", "3"]),
            sym_vi("w_conflict", &["4", "1", "3", "3"]),
        ],
        ..Default::default()
    };
    let m = onnx_safeify::import::import_model(model(g), None).unwrap();
    let target = parse_target_str("t.yaml", UNFUSE_MS).unwrap();
    let mut sizes = Sizes::none();
    sizes.named.insert("N".into(), 2);
    let cx = Cx::new(&m, &target, &sizes, "safeify_cpu");
    let value = |name: &str| {
        (0..m.graph.values.len())
            .map(|i| onnx_safeify::ir::ValueId(i as u32))
            .find(|&v| m.graph.value_name(v) == name)
            .unwrap()
    };
    for (name, dims) in [
        ("w_plain", [8, 1, 3, 3]),
        ("w_declared", [8, 1, 3, 3]),
        ("w_input", [8, 1, 3, 3]),
        ("w_conflict", [4, 1, 3, 3]),
    ] {
        let v = value(name);
        assert_eq!(cx.exact_dims(v), cx.exact_facts().dims(v), "{name}");
        assert_eq!(cx.exact_dims(v), Some(dims.to_vec()), "{name}");
    }
    // What the fallback guards against: the assumed sizes would bake 2 for 8.
    assert_eq!(cx.facts().dims(value("w_declared")), Some(vec![2, 1, 3, 3]));
    // Not an initializer: the exact facts (the batch stays open).
    assert_eq!(cx.exact_dims(value("y1")), None);
    assert_eq!(cx.facts().dims(value("y1")), Some(vec![2, 8, 5, 5]));
}
