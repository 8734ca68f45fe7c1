//! The RX 580 scenario end to end: the PP-OCR det/rec/cls models, as shipped and as ONNX
//! Runtime saved them at basic/extended/all levels, compile for `rx580` into models with no
//! com.microsoft op, no depthwise convolution over 64 channels, GPU pieces under the barrier
//! budget, a clean `check`, nothing denied, and the same outputs on ONNX Runtime.

mod common;

#[path = "verify_support/mod.rs"]
mod support;

use onnx_safeify::engine::{self, FindingKind, Options};
use onnx_safeify::verify::VerifyOptions;

fn dims_for(name: &str) -> Vec<String> {
    let (h, w) = if name.contains("rec") {
        (48, 320)
    } else if name.contains("cls") {
        (48, 192)
    } else {
        (320, 320)
    };
    vec![format!("x[2]={h}"), format!("x[3]={w}")]
}

#[test]
fn ppocr_models_compile_for_rx580_and_stay_equal() {
    let Some(c) = common::corpus() else { return };
    let target = onnx_safeify::rules::load_target("rx580").unwrap();
    let mut files: Vec<_> = common::onnx_files(&c.join("real"));
    files.extend(common::onnx_files(&c.join("ort_optimized")));
    assert_eq!(files.len(), 12);
    let dir = tempfile::tempdir().unwrap();
    let page = support::text_page_npz(dir.path(), 320, 320, 3);
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let mut doc = onnx_safeify::load(f).unwrap();
        let report = engine::compile(&mut doc.model, &target, &Options::default());
        let blocking: Vec<_> = report
            .remaining
            .iter()
            .filter(|r| matches!(r.kind, FindingKind::Denied | FindingKind::Unsupported))
            .collect();
        assert!(blocking.is_empty(), "{name}: {blocking:?}");
        engine::check_invariants(&doc.model.graph).unwrap();
        let g = &doc.model.graph;
        for &n in &g.order {
            let node = g.node(n);
            assert!(
                !node.domain().starts_with("com.microsoft"),
                "{name}: {} left",
                node.op_type
            );
            if node.op_type == "Conv" {
                let group = node.attr("group").and_then(|a| a.proto.i).unwrap_or(1);
                assert!(
                    group <= 64,
                    "{name}: depthwise conv '{}' with {group} groups",
                    node.name()
                );
            }
        }
        let budget = 1e9 as u64;
        for p in &report.pieces {
            assert!(
                p.work <= budget || p.nodes == 1,
                "{name}: piece {p:?} over budget"
            );
        }
        engine::stamp_runtime(&mut doc.model, &target);
        let out = dir.path().join(format!("{name}.rx580.onnx"));
        onnx_safeify::save(&doc, &out).unwrap();
        common::onnx_check(&out);
        let mut again = onnx_safeify::load(&out).unwrap();
        let left = engine::check(&mut again.model, &target, &Options::default());
        assert!(left.is_empty(), "{name}: check finds {left:?}");
        // Numerically the same, with real-looking inputs for the detector.
        let opts = VerifyOptions {
            dims: onnx_safeify::verify::inputs::DimOverrides::parse(&dims_for(&name)).unwrap(),
            inputs: name.contains("det").then(|| page.clone()),
            ..VerifyOptions::default()
        };
        let r = onnx_safeify::verify::verify_models(f, &out, &opts).unwrap();
        assert!(r.passed(), "{name}: {}", r.to_text());
        eprintln!(
            "{name}: {} rewrites, {} pieces, {} pinned",
            report.applied.len(),
            report.pieces.len(),
            report.pinned.len()
        );
    }
}
