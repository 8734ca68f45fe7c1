//! Inputs the fuzzers found (`tests/data/fuzz/model/*`, `tests/data/fuzz/rules/*`), replayed
//! through the fuzz targets' own harness (`fuzz/src/harness.rs`): none may panic, and each
//! known-bad one must be refused with a clean error. Also the seeds of `fuzz/corpus/`, which
//! must go all the way through.

#[path = "../fuzz/src/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};

/// Whether models are also compiled with the harness's stress target here. Off until
/// `engine::compile` stops patching adjacent nodes in one round (see
/// `adjacent_splits_in_one_round_keep_the_graph_valid`): the sample model hits that bug.
/// Turn on together with that test.
const STRESS_COMPILE: bool = true;

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Replay every file of `tests/data/fuzz/<kind>/` on a thread with a small stack (a recursion
/// that only fits the main thread's 8 MiB would still be caught), and return the outcomes.
fn replay_all(kind: &str) -> Vec<(String, Result<(), String>)> {
    let dir = root().join("tests/data/fuzz").join(kind);
    let mut out = Vec::new();
    for p in files(&dir) {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let path = p.clone();
        let r = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || harness::replay_with(&path, STRESS_COMPILE))
            .unwrap()
            .join()
            .unwrap_or_else(|_| panic!("{kind}/{name} panicked"));
        out.push((name, r));
    }
    out
}

fn outcome<'a>(all: &'a [(String, Result<(), String>)], name: &str) -> &'a Result<(), String> {
    &all.iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("regression input {name} is missing"))
        .1
}

#[test]
fn model_crashers_do_not_panic() {
    let all = replay_all("model");
    for (name, r) in &all {
        eprintln!("model/{name}: {:?}", r.as_ref().map_err(|e| first_line(e)));
    }
}

#[test]
fn unknown_crashers_do_not_panic() {
    let all = replay_all("unknown");
    for (name, r) in &all {
        eprintln!(
            "unknown/{name}: {:?}",
            r.as_ref().map_err(|e| first_line(e))
        );
    }
}

#[test]
fn rules_crashers_do_not_panic() {
    let t0 = std::time::Instant::now();
    let all = replay_all("rules");
    for (name, r) in &all {
        eprintln!("rules/{name}: {:?}", r.as_ref().map_err(|e| first_line(e)));
    }
    // 40 nested links around the sample's Concats: exponential before link verdicts were
    // memoised.
    assert!(outcome(&all, "zigzag_links.yaml").is_ok());
    assert!(t0.elapsed().as_secs() < 20, "took {:?}", t0.elapsed());
}

/// The committed seeds: every model goes all the way through its target; every rule file
/// does too, except the one that is an `extends` cycle on purpose.
#[test]
fn seeds_go_through() {
    for kind in ["model", "rules", "tensors", "unknown"] {
        for p in files(&root().join("fuzz/corpus").join(kind)) {
            let r = harness::replay_with(&p, STRESS_COMPILE);
            let bad = p.file_name().is_some_and(|n| n == "cycle.yaml");
            match (&r, bad) {
                (Ok(()), false) => {}
                (Err(e), true) => assert!(e.contains("cyclic"), "{e}"),
                _ => panic!("{}: {:?}", p.display(), r),
            }
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn expect_err(all: &[(String, Result<(), String>)], name: &str, fragment: &str) {
    match outcome(all, name) {
        Ok(()) => panic!("{name}: expected a clean error mentioning {fragment:?}"),
        Err(e) => assert!(e.contains(fragment), "{name}: {e}"),
    }
}

mod common;

use onnx_safeify::import::import_model;
use onnx_safeify::infer::{infer_model, InferOptions};
use onnx_safeify::proto::GraphProto;
use onnx_safeify::rules::{self, Opsets};

/// x -> 8 Relu -> Concat -> y: every Relu feeds the Concat, the Concat reads every Relu.
fn fan_model() -> onnx_safeify::Model {
    let mut nodes = Vec::new();
    let mut outs = Vec::new();
    for i in 0..8 {
        let o = format!("r{i}");
        nodes.push(common::node("Relu", &format!("relu{i}"), &["x"], &[&o]));
        outs.push(o);
    }
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    let mut cat = common::node("Concat", "cat", &refs, &["y"]);
    cat.attribute.push(common::int_attr("axis", 1));
    nodes.push(cat);
    let g = GraphProto {
        node: nodes,
        name: Some("fan".into()),
        input: vec![common::vi("x", &[1, 4])],
        output: vec![common::vi("y", &[1, 32])],
        ..Default::default()
    };
    import_model(common::model(g), None).unwrap()
}

/// `preceded_by` / `followed_by` nested `depth` times around a test nothing satisfies.
fn zigzag_rule(depth: usize) -> String {
    let mut p = "{op: Conv}".to_string();
    for i in 0..depth {
        let key = if i % 2 == 1 {
            "followed_by"
        } else {
            "preceded_by"
        };
        p = format!("{{{key}: {p}}}");
    }
    format!(
        "target: zz\nextends: none\nrules:\n  - {{id: zz, why: w, evidence: [], match: {{op: Concat, preceded_by: {p}}}, action: cpu}}\n"
    )
}

/// Nested links are evaluated once per (pattern, node), not once per path: 8^12 paths here.
#[test]
fn nested_links_take_polynomial_time() {
    let model = fan_model();
    let target = rules::parse_target_str("zz.yaml", &zigzag_rule(24)).unwrap();
    let facts = infer_model(&model, &InferOptions::default());
    let opsets = Opsets::from_model(&model);
    let t0 = std::time::Instant::now();
    let found = rules::find_matches(&target, &model.graph, &facts, &opsets);
    assert!(found.is_empty());
    let cat = *model.graph.order.last().unwrap();
    let ex = rules::explain(&target, &model.graph, &facts, &opsets, cat);
    assert_eq!(ex.len(), 1);
    assert!(t0.elapsed().as_secs() < 5, "took {:?}", t0.elapsed());
}

/// A lattice of `layers` x 2 target files, each extending both files of the next layer: 2^layers
/// paths from the top, every file to be resolved once.
fn lattice(layers: usize) -> rules::MemFs {
    let mut fs = rules::MemFs::new().with(
        "top.yaml",
        "target: top\nextends: [./l0a.yaml, ./l0b.yaml]\n",
    );
    for i in 0..layers {
        for side in ["a", "b"] {
            let ext = if i + 1 == layers {
                "directml".to_string()
            } else {
                format!("[./l{}a.yaml, ./l{}b.yaml]", i + 1, i + 1)
            };
            fs = fs.with(
                &format!("l{i}{side}.yaml"),
                &format!(
                    "target: l{i}{side}\nextends: {ext}\nrules:\n  - {{id: r{i}{side}, why: w, evidence: [], match: {{op: Relu}}, action: cpu}}\n"
                ),
            );
        }
    }
    fs
}

/// Diamonds in `extends` resolve each file once (not once per path), and the chain names each
/// file once.
#[test]
fn extends_diamonds_take_polynomial_time() {
    let fs = lattice(24);
    let t0 = std::time::Instant::now();
    let t = rules::load_target_from(&fs, "top.yaml", &[]).unwrap();
    assert!(t0.elapsed().as_secs() < 5, "took {:?}", t0.elapsed());
    assert_eq!(
        t.rules.len(),
        // directml's own rules, and two a layer.
        24 * 2 + rules::load_target("directml").unwrap().rules.len(),
        "{:?}",
        t.rules.iter().map(|r| &r.id).collect::<Vec<_>>()
    );
    let mut chain = t.chain.clone();
    chain.sort();
    chain.dedup();
    assert_eq!(chain.len(), t.chain.len());
    assert_eq!(t.chain.len(), 24 * 2 + 2);
}

/// One base listed twice in one `extends` is an error (it used to be resolved twice).
#[test]
fn a_base_named_twice_is_an_error() {
    let e = rules::parse_target_str("t.yaml", "target: t\nextends: [directml, none, directml]\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`extends` names `builtin:directml.yaml` twice"),
        "{e}"
    );
    let fs = rules::MemFs::new()
        .with("t.yaml", "target: t\nextends: [./b.yaml, sub/../b.yaml]\n")
        .with("b.yaml", "target: b\n");
    let e = rules::load_target_from(&fs, "t.yaml", &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("twice"), "{e}");
}

/// x -> depthwise Conv a -> depthwise Conv b -> y (4 channels, 1x1 kernels).
fn two_depthwise() -> onnx_safeify::Model {
    let mut nodes = Vec::new();
    let mut inits = Vec::new();
    for (i, (x, y)) in [("x", "a"), ("a", "b")].into_iter().enumerate() {
        let w = format!("w{i}");
        inits.push(common::float_init(&w, &[4, 1, 1, 1], &[1.0, 2.0, 3.0, 4.0]));
        let mut n = common::node("Conv", y, &[x, &w], &[y]);
        n.attribute.push(common::int_attr("group", 4));
        nodes.push(n);
    }
    let g = GraphProto {
        node: nodes,
        name: Some("dw2".into()),
        initializer: inits,
        input: vec![common::vi("x", &[1, 4, 3, 3])],
        output: vec![common::vi("b", &[1, 4, 3, 3])],
        ..Default::default()
    };
    import_model(common::model(g), None).unwrap()
}

/// Found by `proptest_rules` (PROPTEST_CASES=300): two adjacent Convs split in the same round.
/// The patch of `b` is built before the patch of `a` is applied and still reads `a`'s old
/// output, whose producer that patch removed: `check_invariants` fails ("node 'b/Slice'
/// (Slice) reads 'a', which nothing defines"). The fix belongs in `engine::compile` (a patched
/// node's neighbours wait for the next round); src/engine.rs is being edited elsewhere.
#[test]

fn adjacent_splits_in_one_round_keep_the_graph_valid() {
    let mut model = two_depthwise();
    let yaml = "target: t\nextends: none\nrules:\n  - {id: s, why: w, evidence: [], match: {op: Conv, grouped: true, channels: {gt: 2}}, action: {split: {axis: channels, max: 2}}}\n";
    let target = rules::parse_target_str("t.yaml", yaml).unwrap();
    let report = onnx_safeify::engine::compile(&mut model, &target, &Default::default());
    assert_eq!(onnx_safeify::engine::check_invariants(&model.graph), Ok(()));
    assert_eq!(report.applied.len(), 2, "{:?}", report.applied);
}

/// An If whose branches read `n` values of the main graph.
fn if_reading_outer_values(n: usize) -> onnx_safeify::proto::ModelProto {
    use onnx_safeify::proto::{
        type_proto, AttributeProto, TensorShapeProto, TypeProto, ValueInfoProto,
    };
    let names: Vec<String> = (0..n).map(|i| format!("o{i}")).collect();
    let inner: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, nm)| common::node("Relu", &format!("in{i}"), &[nm], &[&format!("t{i}")]))
        .collect();
    let branch = GraphProto {
        node: inner,
        name: Some("branch".into()),
        output: vec![common::vi("t0", &[1, 4])],
        ..Default::default()
    };
    let mut iff = common::node("If", "if", &["c"], &["y"]);
    for b in ["then_branch", "else_branch"] {
        iff.attribute.push(AttributeProto {
            name: Some(b.into()),
            r#type: Some(5),
            g: Some(Box::new(branch.clone())),
            ..Default::default()
        });
    }
    let mut inputs: Vec<ValueInfoProto> = names.iter().map(|s| common::vi(s, &[1, 4])).collect();
    inputs.push(ValueInfoProto {
        name: Some("c".into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(9),
                shape: Some(TensorShapeProto { dim: vec![] }),
            })),
            denotation: None,
        }),
        ..Default::default()
    });
    common::model(GraphProto {
        node: vec![iff],
        input: inputs,
        output: vec![common::vi("y", &[1, 4])],
        ..Default::default()
    })
}

/// Import is linear in the number of outer-scope values a subgraph reads (the implicit inputs
/// of its node were deduplicated with `Vec::contains`: quadratic, ~30 s for 250,000 of them).
#[test]
fn many_outer_scope_reads_import_in_linear_time() {
    let m = if_reading_outer_values(250_000);
    let t0 = std::time::Instant::now();
    let model = import_model(m, None).unwrap();
    let _ = infer_model(&model, &InferOptions::default());
    let _ = onnx_safeify::export::export_model(&model);
    assert!(t0.elapsed().as_secs() < 20, "took {:?}", t0.elapsed());
    let node = model.graph.node(model.graph.order[0]);
    assert_eq!(node.implicit_inputs().len(), 250_000);
}

/// `.npy` headers whose string width or shape was trusted: `U0` with a 10^12-element shape
/// reserved 24 TB of strings (abort), a width of 2^62 overflowed `width * 4` (panic); and
/// what the `tensors` fuzzer found.
#[test]
fn tensors_crashers_are_refused_cleanly() {
    let all = replay_all("tensors");
    for (name, r) in &all {
        eprintln!(
            "tensors/{name}: {:?}",
            r.as_ref().map_err(|e| first_line(e))
        );
    }
    expect_err(&all, "u_zero_width_huge.npy", "zero-width strings");
    expect_err(&all, "s_zero_width_huge.npy", "zero-width strings");
    expect_err(&all, "u_width_overflow.npy", "shape too large");
    expect_err(&all, "s_width_overflow.npy", "shape too large");
    expect_err(&all, "f_huge_shape.npy", "shape too large");
    expect_err(&all, "claims_1gib.npz", "cannot read entry");
    assert!(outcome(&all, "fortran_zero.npy").is_ok());
    // Found by the `tensors` fuzzer: a descr whose first character is not ASCII was split
    // inside that character.
    expect_err(
        &all,
        "descr_starts_with_non_ascii.npy",
        "unsupported numpy dtype",
    );
}

/// x[batch, 2, 2, 2] -> Conv (2 -> 4 channels, 1x1) -> y.
fn conv_with_batch(batch: i64) -> onnx_safeify::Model {
    let g = GraphProto {
        node: vec![common::node("Conv", "conv", &["x", "w"], &["y"])],
        name: Some("batch".into()),
        initializer: vec![common::float_init(
            "w",
            &[4, 2, 1, 1],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        )],
        input: vec![common::vi("x", &[batch, 2, 2, 2])],
        output: vec![common::vi("y", &[batch, 4, 2, 2])],
        ..Default::default()
    };
    import_model(common::model(g), None).unwrap()
}

fn split_rule(axis: &str, max: &str) -> String {
    format!(
        "target: t\nextends: none\nrules:\n  - {{id: s, why: w, evidence: [], match: {{op: Conv}}, action: {{split: {{axis: {axis}, max: {max}}}}}}}\n"
    )
}

/// A split's piece count comes from what the file claims (a batch of 2^40 in a 200-byte model)
/// and the rule's `max`: it is bounded, and `max` near i64::MAX does not overflow.
#[test]
fn split_pieces_are_bounded_and_do_not_overflow() {
    let opts = onnx_safeify::engine::Options::default();
    // A huge static batch, split into pieces of one: refused, not 2^40 Convs.
    let mut model = conv_with_batch(1 << 40);
    let target = rules::parse_target_str("t.yaml", &split_rule("batch", "1")).unwrap();
    let t0 = std::time::Instant::now();
    let report = onnx_safeify::engine::compile(&mut model, &target, &opts);
    assert!(t0.elapsed().as_secs() < 10, "took {:?}", t0.elapsed());
    assert!(report.applied.is_empty(), "{:?}", report.applied);
    let reason = report.remaining[0].reason.clone().unwrap_or_default();
    assert!(reason.contains("pieces"), "{reason}");
    // max = i64::MAX on every axis: the node fits, nothing overflows.
    for axis in ["batch", "out_channels", "channels"] {
        let mut model = conv_with_batch(3);
        let target =
            rules::parse_target_str("t.yaml", &split_rule(axis, "9223372036854775807")).unwrap();
        let report = onnx_safeify::engine::compile(&mut model, &target, &opts);
        assert!(report.applied.is_empty(), "{axis}: {:?}", report.applied);
    }
    // A sane split still happens.
    let mut model = conv_with_batch(3);
    let target = rules::parse_target_str("t.yaml", &split_rule("batch", "1")).unwrap();
    let report = onnx_safeify::engine::compile(&mut model, &target, &opts);
    assert_eq!(report.applied.len(), 1);
    assert_eq!(onnx_safeify::engine::check_invariants(&model.graph), Ok(()));
}
