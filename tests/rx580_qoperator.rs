//! Issue 46, "outputs load wherever the original loads": the five QOperator models of the corpus
//! (PP-OCRv4 det/rec, the PP-OCR cls, quant_mix uint8 and per-channel int8) compile for `rx580`
//! into models with no float64 value (QLinearAdd is an exact float32 form or a table lookup,
//! QLinearSoftmax keeps its node where DirectML has no float64 for its quotient), that are
//! bit-identical to the original on ONNX Runtime CPU at the declared class, and that load on
//! onnxruntime-web (whose wasm CPU has no float64 Mul/Add; the float64 forms made it refuse the
//! outputs while the originals load). The web check needs the harness (scripts/setup-runtimes.sh):
//! without it the test fails, or with ONNX_SAFEIFY_ALLOW_MISSING_RUNTIMES=1 says loudly that it
//! skipped that part.

mod common;
mod runtimes_support;

use std::path::PathBuf;

use onnx_safeify::engine::{self, FindingKind, Options};
use onnx_safeify::tensor::dtype;
use onnx_safeify::verify::{RuntimeKind, VerifyOptions};

const MODELS: [&str; 5] = [
    "quantized/ch_PP-OCRv4_det_infer.qop.onnx",
    "quantized/ch_PP-OCRv4_rec_infer.qop.onnx",
    "quantized/ch_ppocr_mobile_v2.0_cls_infer.qop.onnx",
    "quantized/quant_mix.qop.onnx",
    "quantized/quant_mix.qop_pc_s8.onnx",
];

fn dims_for(name: &str) -> Vec<String> {
    let (h, w) = if name.contains("rec") {
        (48, 320)
    } else if name.contains("cls") {
        (48, 192)
    } else if name.contains("det") {
        (320, 320)
    } else {
        return vec![];
    };
    vec![format!("x[2]={h}"), format!("x[3]={w}")]
}

#[test]
fn qoperator_models_compile_for_rx580_without_float64_exact_and_loading_on_the_web() {
    let Some(c) = common::corpus() else { return };
    let target = onnx_safeify::rules::load_target("rx580").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let web = runtimes_support::ready(RuntimeKind::Webgpu);
    for rel in MODELS {
        let f: PathBuf = c.join(rel);
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        let mut doc = onnx_safeify::load(&f).unwrap();
        let report = engine::compile(&mut doc.model, &target, &Options::default());
        let blocking: Vec<_> = report
            .remaining
            .iter()
            .filter(|r| matches!(r.kind, FindingKind::Denied | FindingKind::Unsupported))
            .collect();
        assert!(blocking.is_empty(), "{name}: {blocking:?}");
        // No float64 anywhere: no value of the graph is double, so nothing is pinned for it.
        let g = &doc.model.graph;
        let facts = onnx_safeify::infer::infer_model(&doc.model, &Default::default());
        for &n in &g.order {
            let node = g.node(n);
            for v in node.inputs.iter().chain(&node.outputs).flatten() {
                assert_ne!(
                    facts.dtype(*v),
                    Some(dtype::DOUBLE),
                    "{name}: {} ({}) has a float64 value '{}'",
                    node.name(),
                    node.op_type,
                    g.value_name(*v)
                );
            }
        }
        assert!(
            !report.applied.iter().any(|a| a.rule == "float64-on-cpu"),
            "{name}: float64-on-cpu applied"
        );
        // What stays whole fell back to the CPU with a reason (a shape that is not static, or
        // QLinearSoftmax's float64 quotient).
        for &n in &g.order {
            let node = g.node(n);
            assert!(
                !node.domain().starts_with("com.microsoft")
                    || report.fallbacks.iter().any(|f| f.node == node.name()),
                "{name}: {} left without a fallback",
                node.op_type
            );
        }
        engine::stamp_runtime(&mut doc.model, &target);
        let out = dir.path().join(format!("{name}.rx580.onnx"));
        onnx_safeify::save(&doc, &out).unwrap();
        common::onnx_check(&out);
        // Bit-identical on ONNX Runtime CPU (the declared class: exact), over a few runs.
        let opts = VerifyOptions {
            dims: onnx_safeify::verify::inputs::DimOverrides::parse(&dims_for(&name)).unwrap(),
            runs: 3,
            ..VerifyOptions::default()
        };
        let r = onnx_safeify::verify::verify_models(&f, &out, &opts).unwrap();
        assert!(r.passed(), "{name}: {}", r.to_text());
        assert_eq!(
            report.exactness(),
            onnx_safeify::rewrite::Exactness::Exact,
            "{name}"
        );
        // quant_mix's QLinearSoftmax has a static shape: it is refused for its float64
        // quotient (DirectML has none) and stays whole on the CPU, saying so.
        if name.starts_with("quant_mix") {
            assert!(
                report
                    .fallbacks
                    .iter()
                    .any(|f| f.op.ends_with("QLinearSoftmax")
                        && f.reason.contains("float64")
                        && f.reason.contains("DmlExecutionProvider")),
                "{name}: {:?}",
                report.fallbacks
            );
        }
        if web {
            let mut args = vec!["--timeout".to_string(), "300".to_string()];
            for d in dims_for(&name) {
                args.push("--dim".into());
                args.push(d);
            }
            let extra: Vec<&str> = args.iter().map(String::as_str).collect();
            let (code, json, o) = runtimes_support::verify_json(&f, &out, "webgpu", &extra);
            assert_eq!(
                code, 0,
                "{name}: the rx580 output does not load or match on onnxruntime-web: {}{}",
                o.stdout, o.stderr
            );
            assert!(json.is_some(), "{name}: no report: {}", o.stderr);
        }
    }
}

/// Every pair of codes, both operand roles, uint8 and int8: `tools/qladd_exhaustive.py` compiles
/// one-node QLinearAdd models for rx580 and compares all 65,536 outputs with ONNX Runtime's
/// kernel. Seed 5 draws parameter sets that take both forms (float32 and the table).
#[test]
fn qlinear_add_matches_the_kernel_on_every_pair_of_codes() {
    let Some(py) = common::venv_python() else {
        return;
    };
    let o = std::process::Command::new(py)
        .arg(common::repo().join("tools/qladd_exhaustive.py"))
        .arg(env!("CARGO_BIN_EXE_onnx-safeify"))
        .args(["--sets", "6", "--seed", "5"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let last: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["instances"], 12, "{stdout}");
    assert_eq!(last["mismatched"], 0, "{stdout}");
    assert!(last["forms"]["table"].as_u64().unwrap() > 0, "{stdout}");
    assert!(last["forms"]["float32"].as_u64().unwrap() > 0, "{stdout}");
}
