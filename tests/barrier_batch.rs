//! The barrier pass plans every cut from one layout (`barrier::cuts`), each lowering the live
//! counts of the values it re-points. Applied in order, those patches must give the graph that
//! planning one cut at a time gives: take the first cut of a fresh plan, apply it, plan again,
//! until no cut is left (the pass as it was, a fresh layout and facts per cut). When no cut is
//! left, the pieces the plan gives are the pieces `barrier::pieces` finds on that graph.

mod common;

use onnx_safeify::infer::{infer_model, InferOptions};
use onnx_safeify::rewrite::barrier::{cuts, pieces, plan_cuts, CutPlan};
use prost::Message as _;

const RULE: &str = "test-barrier";
const ANNOTATION: &str = "safeify_cpu";

/// The graph after the cuts of `budget`: all planned at once, or one per plan.
fn cut(model: &onnx_safeify::ir::Model, budget: u64, one_at_a_time: bool) -> (Vec<u8>, usize) {
    let mut m = model.clone();
    // Sizes for the open dimensions, so that work is estimated and budgets fall between nodes.
    let opts = InferOptions {
        dims: [
            ("p2o.DynamicDimension.0", 1),
            ("p2o.DynamicDimension.1", 64),
            ("p2o.DynamicDimension.2", 256),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        input_dims: vec![(0, 0, 1), (0, 2, 64), (0, 3, 256)],
        ..InferOptions::default()
    };
    let opset = m.opset("").unwrap_or(13);
    let mut applied = 0;
    loop {
        let facts = infer_model(&m, &opts);
        let mut patches = match plan_cuts(&m.graph, &facts, budget, RULE, ANNOTATION, opset) {
            Ok(CutPlan::Cuts(patches)) => patches,
            Ok(CutPlan::Fits(found)) => {
                // What the pass keeps for the summary and the final check.
                assert_eq!(found, pieces(&m.graph, &facts).unwrap(), "budget {budget}");
                assert!(found.iter().all(|p| !p.over(budget) || p.nodes == 1));
                break;
            }
            Err(e) => panic!("{e}"),
        };
        assert!(!patches.is_empty(), "a plan of cuts has at least one");
        if one_at_a_time {
            patches.truncate(1);
        }
        for p in patches {
            p.apply(&mut m.graph).unwrap();
            applied += 1;
        }
        if !one_at_a_time {
            // Planned together, nothing is left to cut.
            let facts = infer_model(&m, &opts);
            let left = cuts(&m.graph, &facts, budget, RULE, ANNOTATION, opset).unwrap();
            assert!(
                left.is_empty(),
                "{} more cut(s) after the batch",
                left.len()
            );
            break;
        }
    }
    (
        onnx_safeify::export::export_model(&m).encode_to_vec(),
        applied,
    )
}

/// A chain where a cut leaves only the values it crossed live: `c` is read by no GPU node, so
/// once the cut before `c` re-points `a` and `b`, the position after `c` is a clean cut of its
/// own, and the work counted there starts again (planning from the old layout, which counts
/// `a` and `b` as live there, would cut once more).
#[test]
fn a_cut_lowers_the_live_values_it_crosses() {
    use common::{model, node, vi};
    use onnx_safeify::proto::GraphProto;
    let g = GraphProto {
        name: Some("g".into()),
        node: vec![
            node("Relu", "n0", &["x"], &["a"]),
            node("Relu", "n1", &["a"], &["b"]),
            node("Relu", "n2", &["b"], &["c"]),
            node("Add", "n3", &["a", "b"], &["d"]),
            node("Relu", "n4", &["d"], &["e"]),
            node("Relu", "n5", &["e"], &["f"]),
        ],
        input: vec![vi("x", &[1, 4096])],
        output: vec![vi("c", &[1, 4096]), vi("f", &[1, 4096])],
        ..Default::default()
    };
    let m = onnx_safeify::import::import_model(model(g), None).unwrap();
    let mut budgets = 0;
    let mut budget = 1_000u64;
    while budget < 10_000_000 {
        let (together, n) = cut(&m, budget, false);
        let (alone, k) = cut(&m, budget, true);
        assert_eq!(n, k, "budget {budget}: cut counts differ");
        assert!(together == alone, "budget {budget}: the graphs differ");
        budgets += usize::from(n > 0);
        budget += budget / 8;
    }
    assert!(budgets > 5, "only {budgets} budgets made a cut");
}

#[test]
fn cuts_planned_together_are_the_cuts_planned_one_at_a_time() {
    let Some(dir) = common::corpus() else { return };
    let mut compared = 0;
    let mut with_cuts = 0;
    for path in common::onnx_files(&dir.join("real")) {
        let Ok(doc) = onnx_safeify::load(&path) else {
            continue;
        };
        if doc.model.graph.nodes.node_count() > 3000 {
            continue;
        }
        // Budgets from a cut at every node to one cut in a while.
        for budget in [1u64, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000] {
            let (together, n) = cut(&doc.model, budget, false);
            let (alone, m) = cut(&doc.model, budget, true);
            assert_eq!(
                n,
                m,
                "{} at budget {budget}: cut counts differ",
                path.display()
            );
            assert!(
                together == alone,
                "{} at budget {budget}: the graphs differ",
                path.display()
            );
            eprintln!("{} budget {budget}: {n} cut(s)", path.display());
            compared += 1;
            with_cuts += usize::from(n > 1);
        }
    }
    assert!(compared >= 6, "only {compared} comparisons");
    assert!(
        with_cuts >= 3,
        "only {with_cuts} comparisons made several cuts"
    );
}
