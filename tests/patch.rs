//! Patches: applied whole, stamped with their rule, names unique, graph outputs keep their
//! names, and the result computes the same function (ONNX Runtime).

mod common;

use onnx_safeify::ir::NodeId;
use onnx_safeify::rewrite::{AttrValue, PValue, Patch, ORIGIN_KEY, RULE_KEY};

/// HardSwish(x) = x * HardSigmoid(x; alpha = 1/6, beta = 0.5) (ONNX HardSwish spec).
fn unfuse_hardswish(g: &mut onnx_safeify::ir::Graph, n: NodeId) {
    let node = g.node(n).clone();
    let x = node.inputs[0].unwrap();
    let y = node.outputs[0].unwrap();
    let mut p = Patch::new("test-hardswish", node.name(), Some(n));
    let hs = p.op(
        "HardSigmoid",
        &[PValue::Existing(x)],
        &[
            ("alpha", AttrValue::Float(1.0 / 6.0)),
            ("beta", AttrValue::Float(0.5)),
        ],
    );
    let out = p.op("Mul", &[PValue::Existing(x), hs], &[]);
    p.replace(y, out);
    p.remove(n);
    p.apply(g).unwrap();
}

#[test]
fn unfusing_hardswish_in_the_sample_keeps_the_function() {
    let src = common::sample();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let g = &mut doc.model.graph;
    let targets: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| g.node(n).op_type == "HardSwish")
        .collect();
    assert!(!targets.is_empty());
    let outputs_before: Vec<String> = g
        .outputs
        .iter()
        .map(|o| g.value_name(o.value).to_string())
        .collect();
    for n in &targets {
        unfuse_hardswish(g, *n);
    }
    assert!(g.order.iter().all(|&n| g.node(n).op_type != "HardSwish"));
    let stamped: Vec<_> = g
        .order
        .iter()
        .filter(|&&n| g.node(n).metadata(RULE_KEY) == Some("test-hardswish"))
        .collect();
    assert_eq!(stamped.len(), 2 * targets.len());
    for &&n in &stamped {
        assert!(g
            .node(n)
            .metadata(ORIGIN_KEY)
            .is_some_and(|o| o.contains("hswish") || !o.is_empty()));
    }
    // Names unique.
    let mut names: Vec<&str> = g.order.iter().map(|&n| g.node(n).name()).collect();
    names.sort();
    let len = names.len();
    names.dedup();
    assert_eq!(names.len(), len, "duplicate node names");
    assert!(g.topo_order().is_ok());
    let outputs_after: Vec<String> = g
        .outputs
        .iter()
        .map(|o| g.value_name(o.value).to_string())
        .collect();
    assert_eq!(outputs_before, outputs_after);

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("unfused.onnx");
    onnx_safeify::save(&doc, &out).unwrap();
    common::onnx_check(&out);
    for batch in [1, 3] {
        eprintln!("{}", common::ort_equal(&src, &out, batch, 1e-5));
    }
}

/// The write order after a patch: its new nodes go where its anchor was, in the order they
/// were added, and every other node keeps its place. When the anchor is a node the patch
/// removes (a replacement), the new nodes take its place; when the anchor stays, they go
/// just before it, and a removed node elsewhere just leaves.
#[test]
fn new_nodes_take_the_place_of_the_node_they_replace() {
    let mut doc = onnx_safeify::load(&common::sample()).unwrap();
    let g = &mut doc.model.graph;
    let swishes: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| g.node(n).op_type == "HardSwish")
        .collect();
    assert!(swishes.len() >= 2, "the sample has two HardSwish nodes");
    let expect = |before: &[NodeId], x: NodeId, new: &[NodeId], at: usize| {
        let mut e: Vec<NodeId> = before.iter().copied().filter(|&n| n != x).collect();
        e.splice(at..at, new.iter().copied());
        e
    };

    // Anchored at the node it removes: in its place.
    let before = g.order.clone();
    let x = swishes[0];
    let at = before.iter().position(|&n| n == x).unwrap();
    assert!(at > 0 && at + 1 < before.len(), "a node in the middle");
    unfuse_hardswish(g, x);
    let new: Vec<NodeId> = g.order[at..at + 2].to_vec();
    assert_eq!(g.node(new[0]).op_type, "HardSigmoid");
    assert_eq!(g.node(new[1]).op_type, "Mul");
    assert_eq!(g.order, expect(&before, x, &new, at));

    // Anchored at a node that stays (the first node), removing one further on: the new nodes
    // go before the anchor, and the removed node's place closes.
    let before = g.order.clone();
    let y = swishes[1];
    let node = g.node(y).clone();
    let first = before[0];
    let mut p = Patch::new("test-anchor", node.name(), Some(first));
    let hs = p.op(
        "HardSigmoid",
        &[PValue::Existing(node.inputs[0].unwrap())],
        &[
            ("alpha", AttrValue::Float(1.0 / 6.0)),
            ("beta", AttrValue::Float(0.5)),
        ],
    );
    let out = p.op("Mul", &[PValue::Existing(node.inputs[0].unwrap()), hs], &[]);
    p.replace(node.outputs[0].unwrap(), out);
    p.remove(y);
    p.apply(g).unwrap();
    let new: Vec<NodeId> = g.order[0..2].to_vec();
    assert_eq!(g.node(new[0]).op_type, "HardSigmoid");
    assert_eq!(g.order, expect(&before, y, &new, 0));
}

#[test]
fn patch_replacing_a_graph_output_keeps_its_name() {
    let src = common::sample();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let g = &mut doc.model.graph;
    // The last node (Sigmoid) produces the graph output `prob`: replace it by 1/(1+exp(-x)).
    let last = *g
        .order
        .iter()
        .find(|&&n| g.node(n).op_type == "Sigmoid")
        .unwrap();
    let node = g.node(last).clone();
    let x = PValue::Existing(node.inputs[0].unwrap());
    let mut p = Patch::new("test-sigmoid", node.name(), Some(last));
    let one = p.initializer(
        "one",
        onnx_safeify::proto::TensorProto {
            data_type: Some(1),
            raw_data: Some(bytes::Bytes::from_static(&[0, 0, 0x80, 0x3f])),
            ..Default::default()
        },
    );
    let neg = p.op("Neg", &[x], &[]);
    let e = p.op("Exp", &[neg], &[]);
    let d = p.op("Add", &[one, e], &[]);
    let r = p.op("Div", &[one, d], &[]);
    p.replace(node.outputs[0].unwrap(), r);
    p.remove(last);
    p.apply(g).unwrap();
    assert_eq!(g.value_name(g.outputs[0].value), "prob");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sigmoid.onnx");
    onnx_safeify::save(&doc, &out).unwrap();
    common::onnx_check(&out);
    eprintln!("{}", common::ort_equal(&src, &out, 2, 1e-5));
}

#[test]
fn a_bad_patch_changes_nothing() {
    let mut doc = onnx_safeify::load(&common::sample()).unwrap();
    let before = onnx_safeify::ir::dump::dump_model(&doc.model);
    let g2 = &mut doc.model.graph;
    let first = g2.order[0];
    // Removing a node whose output is still used, without replacing it, is refused.
    let mut p = Patch::new("test-bad", "x", Some(first));
    p.remove(first);
    let e = p.apply(g2).unwrap_err();
    assert!(e.0.contains("still in use"), "{e}");
    assert_eq!(before, onnx_safeify::ir::dump::dump_model(&doc.model));
}

/// A reader re-pointed to a value whose producer the same patch adds is joined to that
/// producer once it exists. Placed after the reader in the write order, the producer would be
/// written after the node that reads it: the check before writing refuses that graph (compile
/// puts a rewritten graph in topological order first). Placed before the reader, as passes
/// place new nodes, the graph passes.
#[test]
fn a_new_producer_placed_after_its_reader_fails_the_check() {
    for before_reader in [false, true] {
        let src = common::sample();
        let mut doc = onnx_safeify::load(&src).unwrap();
        let g = &mut doc.model.graph;
        let reader = g.order[g.order.len() / 2];
        let x = g.node(reader).inputs[0].expect("an input");
        let mut p = Patch::new("test-cut", "test", before_reader.then_some(reader));
        let cut = p.op("Identity", &[PValue::Existing(x)], &[]);
        p.repoint.push((reader, 0, cut));
        p.apply(g).unwrap();
        let checked = onnx_safeify::engine::check_invariants(g);
        if before_reader {
            assert_eq!(checked, Ok(()));
        } else {
            let e = checked.expect_err("a read before its producer");
            assert!(e.contains("before the node that produces it"), "{e}");
        }
    }
}
