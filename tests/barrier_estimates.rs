//! Barrier cuts come from estimates at sizes, never from ignorance (issue 34):
//! - open dims take the target's default sizes by the role their name gives them (batch,
//!   sequence, past, total) or their position (batch, spatial), `--dim` first;
//! - a node whose shapes are still unknown is bounded from its neighbours and named in one
//!   note, not cut off on its own;
//! - a model whose estimated work fits one budget stays one piece;
//! - the cuts are the fewest that keep every piece within the budget, where the tensors that
//!   cross are smallest, and never on a shape computation;
//! - a file whose nodes are not in topological order gets its barriers written before their
//!   readers (the crash "reads '<x>/barrier' before the node that produces it").

mod common;

use std::collections::BTreeMap;

use common::{float_init, model, node, vi};
use onnx_safeify::analysis::Sizes;
use onnx_safeify::engine::{self, Options};
use onnx_safeify::proto::{
    tensor_shape_proto, type_proto, GraphProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};

const RULE: &str = "test-barrier";

fn target(budget: f64, dims: &str) -> onnx_safeify::rules::schema::Target {
    onnx_safeify::rules::parse_target_str(
        "barrier.yaml",
        &format!(
            "target: barrier-test\nrules:\n  - {{id: {RULE}, why: w, evidence: [], match: {{op: [MatMul, Conv], domain: \"\"}}, action: {{barrier: {{budget: {budget:e}{dims}}}}}}}\n"
        ),
    )
    .unwrap()
}

/// A value of element type `elem` whose dims are numbers (> 0), names, or open (`""`).
fn vi_dims(name: &str, elem: i32, dims: &[&str]) -> ValueInfoProto {
    use tensor_shape_proto::dimension::Value as DV;
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| tensor_shape_proto::Dimension {
                            value: match d.parse::<i64>() {
                                Ok(v) => Some(DV::DimValue(v)),
                                Err(_) if d.is_empty() => None,
                                Err(_) => Some(DV::DimParam(d.to_string())),
                            },
                            denotation: None,
                        })
                        .collect(),
                }),
            })),
            denotation: None,
        }),
        ..Default::default()
    }
}

fn int_init(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(7),
        name: Some(name.into()),
        int64_data: values.to_vec(),
        ..Default::default()
    }
}

fn weights(name: &str, k: i64, n: i64) -> TensorProto {
    let vals: Vec<f32> = (0..k * n)
        .map(|i| ((i * 7919 % 61) as f32 - 30.0) / (30.0 * k as f32))
        .collect();
    float_init(name, &[k, n], &vals)
}

fn import(g: GraphProto) -> onnx_safeify::ir::Model {
    onnx_safeify::import::import_model(model(g), None).unwrap()
}

/// The barrier nodes of a compiled graph.
fn barriers(g: &onnx_safeify::ir::Graph) -> Vec<onnx_safeify::ir::NodeId> {
    g.order
        .iter()
        .copied()
        .filter(|&n| g.node(n).metadata("onnx_safeify.rule") == Some(RULE))
        .collect()
}

#[test]
fn open_dims_take_sizes_by_the_role_their_names_give() {
    let g = GraphProto {
        name: Some("g".into()),
        node: vec![node("Identity", "id", &["ids"], &["o"])],
        input: vec![
            vi_dims("ids", 7, &["batch_size", "sequence_length"]),
            vi_dims("mask", 7, &["batch_size", "total_sequence_length"]),
            vi_dims(
                "past",
                1,
                &["batch_size", "4", "past_sequence_length", "16"],
            ),
            vi_dims("audio", 1, &["", ""]),
            vi_dims("image", 1, &["", "3", "p2o.DynamicDimension.1", ""]),
        ],
        output: vec![vi_dims("o", 7, &["batch_size", "sequence_length"])],
        ..Default::default()
    };
    let m = import(g);
    let defaults: BTreeMap<String, i64> =
        [("batch", 1), ("spatial", 640), ("seq", 128), ("past", 100)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
    let s = Sizes::for_model(&m, &BTreeMap::new(), &defaults);
    let named = |k: &str| s.named.get(k).copied();
    assert_eq!(named("batch_size"), Some(1));
    assert_eq!(named("sequence_length"), Some(128));
    assert_eq!(named("past_sequence_length"), Some(100));
    // A total is the sequence and the past together.
    assert_eq!(named("total_sequence_length"), Some(228));
    assert_eq!(named("p2o.DynamicDimension.1"), Some(640));
    // Unnamed: axis 0 a batch, an image's sides spatial, any other open axis a sequence.
    let mut pos = s.positional.clone();
    pos.sort();
    assert_eq!(pos, vec![(3, 0, 1), (3, 1, 128), (4, 0, 1), (4, 3, 640)]);

    // `--dim` wins, and a total follows the sequence and past it was given.
    let dims: BTreeMap<String, i64> = [("sequence_length", 32), ("audio[1]", 512)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let s = Sizes::for_model(&m, &dims, &defaults);
    assert_eq!(s.named.get("sequence_length"), Some(&32));
    assert_eq!(s.named.get("total_sequence_length"), Some(&132));
    assert!(s.positional.contains(&(3, 1, 512)), "{:?}", s.positional);

    // Without a default for a role, the dim stays open.
    let s = Sizes::for_model(&m, &BTreeMap::new(), &BTreeMap::new());
    assert!(s.is_empty(), "{s:?}");
}

/// A transformer-like block: [batch_size, sequence_length, 64] through a MatMul, a Reshape to a
/// shape given at run time (unknown to inference), and a MatMul on that.
fn runtime_reshape_model() -> onnx_safeify::ir::Model {
    let g = GraphProto {
        name: Some("g".into()),
        node: vec![
            node("MatMul", "m0", &["x", "w0"], &["a"]),
            node("Relu", "act", &["a"], &["b"]),
            node("Reshape", "reshape", &["b", "shape"], &["r"]),
            node("MatMul", "m1", &["r", "w1"], &["c"]),
            node("Relu", "out", &["c"], &["y"]),
        ],
        initializer: vec![weights("w0", 64, 64), weights("w1", 64, 64)],
        input: vec![
            vi_dims("x", 1, &["batch_size", "sequence_length", "64"]),
            vi_dims("shape", 7, &["3"]),
        ],
        output: vec![vi_dims("y", 1, &["", "", "64"])],
        ..Default::default()
    };
    import(g)
}

#[test]
fn work_under_one_budget_stays_one_piece_and_unknown_sizes_are_bounded_in_one_note() {
    let mut m = runtime_reshape_model();
    let t = target(1e9, ", dims: {batch: 1}");
    let report = engine::compile(&mut m, &t, &Options::default());
    assert!(
        !report.applied.iter().any(|a| a.rule == RULE),
        "a cut although the whole work is estimated at {:?}",
        report.pieces
    );
    assert_eq!(report.pieces.len(), 1, "{:?}", report.pieces);
    let p = &report.pieces[0];
    assert_eq!(p.nodes, 5);
    // m0 at batch 1 and 128 tokens: 2·128·64·64 operations, and m1 bounded from the same
    // sizes: at least as much again.
    assert!(p.work >= 2 * 2 * 128 * 64 * 64, "{p:?}");
    assert!(p.work < 1_000_000_000, "{p:?}");
    assert!(
        p.bounded >= 2,
        "the Reshape and what follows are bounded: {p:?}"
    );
    let notes: Vec<&String> = report
        .notes
        .iter()
        .filter(|n| n.contains("estimated from the sizes around them"))
        .collect();
    assert_eq!(notes.len(), 1, "{:?}", report.notes);
    assert!(notes[0].contains("'m1' (MatMul)"), "{}", notes[0]);
    // The same estimate with a budget under it: now cut, with every piece in budget.
    let mut m = runtime_reshape_model();
    let t = target(5e5, ", dims: {batch: 1}");
    let report = engine::compile(&mut m, &t, &Options::default());
    assert!(report.applied.iter().any(|a| a.rule == RULE));
    assert!(report.pieces.len() > 1);
    for p in &report.pieces {
        assert!(p.work <= 500_000 || p.nodes == 1, "{p:?}");
    }
    engine::check_invariants(&m.graph).unwrap();
}

/// A chain of MatMuls over widths `w`: node i maps [1, w[i]] to [1, w[i+1]].
fn chain(widths: &[i64]) -> onnx_safeify::ir::Model {
    let mut nodes = Vec::new();
    let mut inits = Vec::new();
    for i in 0..widths.len() - 1 {
        let (a, b) = (format!("v{i}"), format!("v{}", i + 1));
        nodes.push(node(
            "MatMul",
            &format!("m{i}"),
            &[&a, &format!("w{i}")],
            &[&b],
        ));
        inits.push(weights(&format!("w{i}"), widths[i], widths[i + 1]));
    }
    let last = widths.len() - 1;
    let g = GraphProto {
        name: Some("chain".into()),
        node: nodes,
        initializer: inits,
        input: vec![vi("v0", &[1, widths[0]])],
        output: vec![vi(&format!("v{last}"), &[1, widths[last]])],
        ..Default::default()
    };
    import(g)
}

/// The best cuts of a chain by brute force: every set of cut positions (a cut before node k
/// crosses v_k), the fewest cuts with every piece within `budget` or a single node, then the
/// fewest bytes crossing.
fn brute_force(work: &[u64], crossing: &[u64], budget: u64) -> (usize, u64) {
    let n = work.len();
    let mut best = (usize::MAX, u64::MAX);
    for mask in 0u32..(1 << (n - 1)) {
        let cuts: Vec<usize> = (1..n).filter(|k| mask & (1 << (k - 1)) != 0).collect();
        let mut bounds = vec![0];
        bounds.extend(&cuts);
        bounds.push(n);
        let fits = bounds
            .windows(2)
            .all(|w| w[1] - w[0] == 1 || work[w[0]..w[1]].iter().sum::<u64>() <= budget);
        if fits {
            let bytes: u64 = cuts.iter().map(|&k| crossing[k]).sum();
            best = best.min((cuts.len(), bytes));
        }
    }
    best
}

#[test]
fn the_fewest_cuts_where_the_crossing_tensors_are_smallest() {
    // Widths with narrow waists: cuts are cheapest before the nodes that read a narrow value.
    let mut seed = 12345u64;
    let mut rnd = |m: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % m
    };
    let mut checked = 0;
    for _ in 0..12 {
        let len = 5 + rnd(5) as usize;
        let widths: Vec<i64> = (0..=len)
            .map(|_| [8, 16, 256, 512, 1024][rnd(5) as usize])
            .collect();
        let m0 = chain(&widths);
        let facts = onnx_safeify::infer::infer_model(&m0, &Default::default());
        let g = &m0.graph;
        let work: Vec<u64> = g
            .order
            .iter()
            .map(|&n| onnx_safeify::rewrite::work::work(g, n, &facts).unwrap())
            .collect();
        let crossing: Vec<u64> = (0..=len).map(|k| 4 * widths[k] as u64).collect();
        let total: u64 = work.iter().sum();
        for div in [2, 3, 5] {
            let budget = total / div;
            let want = brute_force(&work, &crossing, budget);
            let mut m = m0.clone();
            let t = target(budget as f64, "");
            let report = engine::compile(&mut m, &t, &Options::default());
            engine::check_invariants(&m.graph).unwrap();
            let g = &m.graph;
            let b = barriers(g);
            let bytes: u64 = b
                .iter()
                .map(|&n| {
                    let v = g.node(n).inputs[0].unwrap();
                    let k: usize = g.value_name(v)[1..].parse().unwrap();
                    crossing[k]
                })
                .sum();
            assert_eq!(
                (b.len(), bytes),
                want,
                "widths {widths:?}, budget {budget}: {:?}",
                report.pieces
            );
            for p in &report.pieces {
                assert!(p.work <= budget || p.nodes == 1, "{p:?}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 36);
}

/// x -> MatMul chain -> Reshape to a shape computed from x's own (Shape, Gather, Unsqueeze,
/// Concat): the shape values are live across every cut, and none may get a barrier.
#[test]
fn no_barrier_lands_on_a_shape_computation() {
    let mut nodes = vec![
        node("Shape", "Shape_1", &["v0"], &["sh"]),
        node("Gather", "Gather_1", &["sh", "zero"], &["n"]),
        node("Unsqueeze", "Unsqueeze_1", &["n", "axes"], &["n1"]),
        node("Concat", "Concat_1", &["n1", "minus1"], &["target_shape"]),
    ];
    nodes[3].attribute.push(common::int_attr("axis", 0));
    let mut inits = vec![
        int_init("zero", &[], &[0]),
        int_init("axes", &[1], &[0]),
        int_init("minus1", &[1], &[-1]),
    ];
    for i in 0..6 {
        nodes.push(node(
            "MatMul",
            &format!("m{i}"),
            &[&format!("v{i}"), &format!("w{i}")],
            &[&format!("v{}", i + 1)],
        ));
        inits.push(weights(&format!("w{i}"), 256, 256));
    }
    nodes.push(node(
        "Reshape",
        "Reshape_1",
        &["v6", "target_shape"],
        &["y"],
    ));
    let g = GraphProto {
        name: Some("g".into()),
        node: nodes,
        initializer: inits,
        input: vec![vi("v0", &[4, 256])],
        output: vec![vi("y", &[4, 256])],
        ..Default::default()
    };
    let mut m = import(g);
    let report = engine::compile(&mut m, &target(6e5, ""), &Options::default());
    let g = &m.graph;
    let b = barriers(g);
    assert!(b.len() >= 2, "the budget needs cuts: {:?}", report.pieces);
    for &n in &b {
        let v = g.node(n).inputs[0].unwrap();
        let producer = match g.value(v).origin {
            onnx_safeify::ir::Origin::Node { node, .. } => g.node(node).op_type.clone(),
            _ => String::new(),
        };
        assert_eq!(
            producer,
            "MatMul",
            "barrier '{}' on '{}'",
            g.node(n).name(),
            g.value_name(v)
        );
    }
    for p in &report.pieces {
        assert!(p.work <= 600_000 || p.nodes == 1, "{p:?}");
    }
    engine::check_invariants(g).unwrap();
}

/// A file whose nodes are not in topological order: `R` comes first but reads `v`, made by
/// `m0`, and `w`, made last. The cut before `m1` crosses `v`, which `m1` and `R` read; its
/// no-op was written where `m1` is, after `R`: "node 'R' (Add) reads 'm1/barrier' before the
/// node that produces it", and nothing was written.
#[test]
fn barriers_in_an_unsorted_file_come_before_their_readers() {
    let g = GraphProto {
        name: Some("unsorted".into()),
        node: vec![
            node("Add", "R", &["v", "w"], &["y"]),
            node("MatMul", "m0", &["x", "w0"], &["v"]),
            node("MatMul", "m1", &["v", "w1"], &["a"]),
            node("MatMul", "m2", &["a", "w2"], &["w"]),
        ],
        initializer: vec![
            weights("w0", 256, 256),
            weights("w1", 256, 256),
            weights("w2", 256, 256),
        ],
        input: vec![vi("x", &[1, 256])],
        output: vec![vi("y", &[1, 256])],
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, out) = (dir.path().join("in.onnx"), dir.path().join("out.onnx"));
    std::fs::write(&a, common::encode(&model(g))).unwrap();
    let mut doc = onnx_safeify::load(&a).unwrap();
    let m = &mut doc.model;
    let report = engine::compile(m, &target(5e5, ""), &Options::default());
    let g = &m.graph;
    let b = barriers(g);
    assert!(!b.is_empty(), "the budget needs a cut: {:?}", report.pieces);
    engine::check_invariants(g).unwrap();
    // Every barrier is written before each node that reads it.
    let pos = |n| g.order.iter().position(|&m| m == n).unwrap();
    for &n in &b {
        let out = g.node(n).outputs[0].unwrap();
        for &r in &g.order {
            if g.node(r).inputs.contains(&Some(out)) {
                assert!(
                    pos(n) < pos(r),
                    "'{}' before '{}'",
                    g.node(r).name(),
                    g.node(n).name()
                );
            }
        }
    }
    // ONNX Runtime sorts the file itself: the outputs agree.
    onnx_safeify::save(&doc, &out).unwrap();
    if common::venv_python().is_none() {
        eprintln!(
            "SKIPPED the ONNX Runtime comparison: no venv with onnxruntime (ONNX_SAFEIFY_VENV)"
        );
        return;
    }
    eprintln!("{}", common::ort_equal(&a, &out, 1, 1e-6));
}
