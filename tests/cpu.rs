//! `cpu`: pinned nodes carry `layer_ann`, regions grow over shape computations, and ONNX
//! Runtime runs the annotated model with `session.layer_assignment_settings` to the same
//! outputs.

mod common;

use onnx_safeify::ir::NodeId;
use onnx_safeify::rewrite::cpu::{pin, session_option, DEFAULT_ANNOTATION, LAYER_ANN_KEY};

#[test]
fn pinning_resize_in_ppocr_det_grows_over_its_shape_computation() {
    let Some(c) = common::corpus() else { return };
    let src = c.join("real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx");
    let mut doc = onnx_safeify::load(&src).unwrap();
    let g = &mut doc.model.graph;
    let resizes: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| g.node(n).op_type == "Resize")
        .collect();
    assert!(!resizes.is_empty());
    let pinned = pin(g, &resizes, "test-cpu", DEFAULT_ANNOTATION);
    assert!(pinned.len() >= resizes.len());
    for &n in &pinned {
        assert_eq!(g.node(n).metadata(LAYER_ANN_KEY), Some(DEFAULT_ANNOTATION));
    }
    // Pinning again adds nothing.
    assert!(pin(g, &resizes, "test-cpu", DEFAULT_ANNOTATION).is_empty());
    let grown: Vec<&str> = pinned[resizes.len()..]
        .iter()
        .map(|&n| g.node(n).op_type.as_str())
        .collect();
    eprintln!(
        "pinned {} Resize, grown by {} nodes: {grown:?}",
        resizes.len(),
        grown.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pinned.onnx");
    onnx_safeify::save(&doc, &out).unwrap();
    common::onnx_check(&out);
    let (k, v) = session_option(DEFAULT_ANNOTATION);
    eprintln!(
        "{}",
        common::ort_equal_with(&src, &out, 64, 1e-5, &[(&k, &v)])
    );
}

#[test]
fn pinning_the_sample_s_resizes() {
    let src = common::sample();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let g = &mut doc.model.graph;
    let resizes: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| g.node(n).op_type == "Resize")
        .collect();
    let pinned = pin(g, &resizes, "test-cpu", "my_cpu");
    assert_eq!(
        pinned.len(),
        resizes.len(),
        "constant scales need no growing"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pinned.onnx");
    onnx_safeify::save(&doc, &out).unwrap();
    let (k, v) = session_option("my_cpu");
    assert_eq!(v, "cpu(my_cpu)");
    eprintln!(
        "{}",
        common::ort_equal_with(&src, &out, 2, 1e-6, &[(&k, &v)])
    );
}
