//! `split` on real models: depthwise/grouped Convs by channels, ordinary Convs by output
//! channels, static batches; every result equal to the original on ONNX Runtime.

mod common;

use std::path::Path;

use onnx_safeify::ir::NodeId;
use onnx_safeify::rewrite::split::{split_conv, SplitAxis, SplitOutcome};
use onnx_safeify::rewrite::ORIGIN_KEY;

/// Split every Conv the axis applies to; returns (split, fits, unsupported). Each patch
/// changes the node table by what its `growth` says, and the edge table by at most that (the
/// room made for a batch of patches).
fn split_all(
    doc: &mut onnx_safeify::Document,
    axis: SplitAxis,
    max: i64,
    batch: Option<i64>,
) -> (usize, usize, usize) {
    let opset = doc.model.opset("").unwrap_or(1);
    let g = &mut doc.model.graph;
    let convs: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| g.node(n).op_type == "Conv")
        .collect();
    let (mut done, mut fits, mut unsupported) = (0, 0, 0);
    for n in convs {
        match split_conv(g, n, opset, "test-split", axis, max, batch) {
            Ok(p) => {
                let grow = p.growth(g);
                let before = (g.nodes.node_count(), g.nodes.edge_count());
                p.apply(g).unwrap();
                let after = (g.nodes.node_count(), g.nodes.edge_count());
                assert_eq!(
                    after.0 + grow.nodes_removed,
                    before.0 + grow.nodes_added,
                    "{grow:?}"
                );
                assert!(
                    after.1 + grow.edges_removed <= before.1 + grow.edges_added,
                    "{grow:?}: {before:?} -> {after:?}"
                );
                done += 1;
            }
            Err(SplitOutcome::Fits) => fits += 1,
            Err(SplitOutcome::Unsupported(_)) => unsupported += 1,
        }
    }
    (done, fits, unsupported)
}

fn check_equal(src: &Path, doc: &onnx_safeify::Document, name: &str, dims: &[i64]) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(name);
    onnx_safeify::save(doc, &out).unwrap();
    common::onnx_check(&out);
    for &d in dims {
        eprintln!("{name} dim={d}: {}", common::ort_equal(src, &out, d, 1e-4));
    }
}

fn max_group_channels(doc: &onnx_safeify::Document) -> i64 {
    let g = &doc.model.graph;
    g.order
        .iter()
        .filter(|&&n| g.node(n).op_type == "Conv")
        .filter_map(|&n| {
            let node = g.node(n);
            let group = node.attr("group").and_then(|a| a.i()).unwrap_or(1);
            let w = onnx_safeify::rewrite::consts::constant_tensor(g, node.inputs[1]?)?;
            (group > 1).then(|| w.dims[1] * group)
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn depthwise_split_on_the_sample() {
    let src = common::sample();
    let mut doc = onnx_safeify::load(&src).unwrap();
    assert!(max_group_channels(&doc) > 64);
    let (done, _, _) = split_all(&mut doc, SplitAxis::Channels, 64, None);
    assert!(done >= 2, "split {done}");
    assert!(max_group_channels(&doc) <= 64);
    check_equal(&src, &doc, "split.onnx", &[1, 2]);
    // The pieces of one Conv with equal attributes hold one list of them.
    let g = &doc.model.graph;
    let pieces: Vec<_> = g
        .order
        .iter()
        .map(|&n| g.node(n))
        .filter(|n| n.op_type == "Conv" && n.metadata(ORIGIN_KEY).is_some())
        .collect();
    let protos = |n: &onnx_safeify::ir::Node| -> Vec<_> {
        n.attributes.iter().map(|a| a.to_proto()).collect()
    };
    let mut shared = 0;
    for (i, a) in pieces.iter().enumerate() {
        for b in &pieces[i + 1..] {
            if a.metadata(ORIGIN_KEY) == b.metadata(ORIGIN_KEY) && protos(a) == protos(b) {
                assert!(a.attributes.same_list(&b.attributes), "{}", a.name());
                shared += 1;
            }
        }
    }
    assert!(shared >= done, "{shared} pairs share a list");
}

#[test]
fn depthwise_split_on_ppocr_and_the_synthetic_stack() {
    let Some(c) = common::corpus() else { return };
    for (f, dims) in [
        (
            "real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx",
            &[64i64][..],
        ),
        (
            "real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx",
            &[48][..],
        ),
        (
            "real/rapidocr_onnxruntime__ch_PP-OCRv4_rec_infer.onnx",
            &[48][..],
        ),
    ] {
        let src = c.join(f);
        let mut doc = onnx_safeify::load(&src).unwrap();
        let (done, fits, unsupported) = split_all(&mut doc, SplitAxis::Channels, 32, None);
        eprintln!("{f}: split {done}, fit {fits}, not grouped {unsupported}");
        assert!(done > 0);
        assert!(max_group_channels(&doc) <= 32);
        check_equal(&src, &doc, "split.onnx", dims);
    }
}

#[test]
fn out_channel_split_on_the_sample() {
    let src = common::sample();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let (done, _, _) = split_all(&mut doc, SplitAxis::OutChannels, 16, None);
    assert!(done >= 3, "split {done}");
    check_equal(&src, &doc, "split_out.onnx", &[2]);
}

#[test]
fn static_batch_split() {
    // The sample with its symbolic batch fixed to 4.
    use onnx_safeify::proto::tensor_shape_proto::dimension::Value;
    use onnx_safeify::proto::type_proto;
    use prost::Message;
    let mut m = onnx_safeify::proto::ModelProto::decode(
        std::fs::read(common::sample()).unwrap().as_slice(),
    )
    .unwrap();
    let g = m.graph.as_mut().unwrap();
    for vi in g.input.iter_mut().chain(g.output.iter_mut()) {
        if let Some(type_proto::Value::TensorType(t)) =
            vi.r#type.as_mut().and_then(|t| t.value.as_mut())
        {
            t.shape.as_mut().unwrap().dim[0].value = Some(Value::DimValue(4));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("batch4.onnx");
    std::fs::write(&src, m.encode_to_vec()).unwrap();
    let mut doc = onnx_safeify::load(&src).unwrap();
    // Only the first Conv (the stem) sees the batch directly from the input; split it.
    let opset = doc.model.opset("").unwrap();
    let g = &mut doc.model.graph;
    let first = *g
        .order
        .iter()
        .find(|&&n| g.node(n).op_type == "Conv")
        .unwrap();
    let p = split_conv(g, first, opset, "test-batch", SplitAxis::Batch, 1, Some(4)).unwrap();
    p.apply(g).unwrap();
    let slices = g
        .order
        .iter()
        .filter(|&&n| g.node(n).op_type == "Slice")
        .count();
    assert_eq!(slices, 4);
    // Without a known batch there is nothing to split statically.
    let second = *g
        .order
        .iter()
        .find(|&&n| g.node(n).op_type == "Conv")
        .unwrap();
    assert!(matches!(
        split_conv(g, second, opset, "t", SplitAxis::Batch, 2, None),
        Err(SplitOutcome::Unsupported(_))
    ));
    check_equal(&src, &doc, "split_batch.onnx", &[4]);
}

#[test]
fn symbolic_batch_split_runs_one_sample_at_a_time_for_any_batch() {
    // The sample's batch N is symbolic: the stem Conv becomes a Scan over samples.
    let src = common::sample();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let opset = doc.model.opset("").unwrap();
    let g = &mut doc.model.graph;
    let first = *g
        .order
        .iter()
        .find(|&&n| g.node(n).op_type == "Conv")
        .unwrap();
    assert!(matches!(
        split_conv(g, first, opset, "t", SplitAxis::Batch, 4, None),
        Err(SplitOutcome::Unsupported(_))
    ));
    let p = split_conv(g, first, opset, "test-batch", SplitAxis::Batch, 1, None).unwrap();
    p.apply(g).unwrap();
    let scan = *g
        .order
        .iter()
        .find(|&&n| g.node(n).op_type == "Scan")
        .unwrap();
    let body = g.node(scan).attr("body").and_then(|a| a.g()).unwrap();
    assert_eq!(body.order.len(), 3);
    // The body reads the weights from the outer scope.
    assert!(!g.node(scan).implicit_inputs().is_empty());
    onnx_safeify::engine::check_invariants(g).unwrap();
    check_equal(&src, &doc, "split_scan.onnx", &[1, 3]);
}
