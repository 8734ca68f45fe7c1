//! `--cpu-subgraphs partition`: segment models plus a manifest, run chained by `verify` to the
//! original's outputs.

mod common;

use onnx_safeify::ir::NodeId;
use onnx_safeify::partition::{plan, save_partitioned, segment_models, Device};
use onnx_safeify::rewrite::cpu::{pin, DEFAULT_ANNOTATION, LAYER_ANN_KEY};

#[test]
fn sample_with_pinned_resizes_partitions_and_runs_chained() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Give the sample value_info (ONNX's own shape inference) so boundaries have types.
    let src = dir.path().join("typed.onnx");
    let st = std::process::Command::new(py)
        .args([
            "-c",
            "import sys, onnx; onnx.save(onnx.shape_inference.infer_shapes(onnx.load(sys.argv[1])), sys.argv[2])",
        ])
        .arg(common::sample())
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    let mut doc = onnx_safeify::load(&src).unwrap();
    let g = &mut doc.model.graph;
    let resizes: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| g.node(n).op_type == "Resize")
        .collect();
    pin(g, &resizes, "test", DEFAULT_ANNOTATION);
    let g = &doc.model.graph;
    let segs = plan(g, &|n| g.node(n).metadata(LAYER_ANN_KEY).is_some()).unwrap();
    assert!(segs.len() >= 3, "{} segments", segs.len());
    assert!(segs.iter().any(|s| s.device == Device::Cpu));
    let cpu_nodes: usize = segs
        .iter()
        .filter(|s| s.device == Device::Cpu)
        .map(|s| s.nodes.len())
        .sum();
    assert_eq!(cpu_nodes, resizes.len());
    let models = segment_models(&doc.model, &segs, &|_| None).unwrap();
    let manifest = dir.path().join("out").join("typed.manifest.yaml");
    std::fs::create_dir_all(manifest.parent().unwrap()).unwrap();
    let files = save_partitioned(&doc, &segs, models, &manifest).unwrap();
    assert_eq!(files.len(), segs.len() + 1);
    for f in &files[..files.len() - 1] {
        common::onnx_check(f);
    }
    let report = onnx_safeify::verify::verify_models(&src, &manifest, &Default::default()).unwrap();
    assert!(report.passed(), "{}", report.to_text());
}
