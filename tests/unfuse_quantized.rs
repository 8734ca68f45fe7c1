//! The quantized com.microsoft family (ONNX Runtime's quantization tools and optimizer):
//! single-op models built by `tests/data/quantized_cases.py` (per-tensor and per-channel,
//! uint8 and int8, with and without bias, channels-first and channels-last) and the quantized
//! corpus models (`quantized/`, built by `tools/make_corpus.py quantized`) are decomposed into
//! standard ONNX, pass `onnx.checker` (full check) and match the original on ONNX Runtime CPU
//! at the class the registry declares (issue 39): bit-identical for the exact ones (every op of
//! the family but DynamicQuantizeLSTM, whose float LSTM is approximate), and a statically
//! quantized corpus model, all of whose fused ops are exact, bit-identical end to end.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use onnx_safeify::rewrite::unfuse::{self, UnfuseReport};
use onnx_safeify::rewrite::Exactness;

const RULE: &str = "test-unfuse-quantized";

/// The operators this family decomposes (each must be covered by a single-op case).
const FAMILY: &[&str] = &[
    "QLinearAdd",
    "QLinearMul",
    "QLinearSigmoid",
    "QLinearLeakyRelu",
    "QLinearSoftmax",
    "QLinearAveragePool",
    "QLinearGlobalAveragePool",
    "QLinearConcat",
    "QLinearConv",
    "QGemm",
    "DynamicQuantizeMatMul",
    "MatMulIntegerToFloat",
    "DynamicQuantizeLSTM",
];

fn script() -> PathBuf {
    common::repo().join("tests/data/quantized_cases.py")
}

fn python(args: &[&str]) -> String {
    let py = common::venv_python().expect("the test venv (scripts/corpus.sh)");
    let o = std::process::Command::new(py)
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        o.status.success(),
        "python {:?} failed:\n{}",
        args,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Unfuse every non-standard node of `src` but ONNX Runtime's NCHWc layout ops (their block
/// size is ambiguous in the models saved at the `all` level here, see
/// `tests/unfuse_models.rs`; they stay as they are), assert none is left, save into `dir`,
/// run `onnx.checker` (full check) on the result.
fn unfuse_file(src: &Path, dir: &Path) -> (PathBuf, UnfuseReport) {
    let mut doc = onnx_safeify::load(src).unwrap();
    let opset = doc.model.opset("").unwrap_or(0);
    let selected = |n: &onnx_safeify::ir::Node| {
        unfuse::is_fused(n, opset) && n.domain() != unfuse::NCHWC_DOMAIN
    };
    let report = unfuse::unfuse_all(&mut doc.model, RULE, selected);
    // Exactness needs some shapes at compile time (QLinearSoftmax's table depends on the
    // reduced length, QLinearAveragePool's window on the image): without them the node is
    // refused with that reason and stays (a compile pins it to the CPU). Nothing else may be.
    let static_only = |r: &str| r.contains("is not static");
    let other: Vec<_> = report
        .unsupported
        .iter()
        .filter(|u| !static_only(&u.reason))
        .collect();
    assert!(other.is_empty(), "{}: refused {other:?}", src.display());
    let refused: Vec<&str> = report.unsupported.iter().map(|u| u.node.as_str()).collect();
    let g = &doc.model.graph;
    for &n in &g.order {
        let node = g.node(n);
        assert!(
            !selected(node) || refused.contains(&node.name()),
            "{}: {}::{} is left",
            src.display(),
            node.domain(),
            node.op_type
        );
    }
    let out = dir.join(src.file_name().unwrap());
    onnx_safeify::save(&doc, &out).unwrap();
    python(&[
        "-c",
        "import sys, onnx; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)",
        out.to_str().unwrap(),
    ]);
    (out, report)
}

#[test]
fn single_op_quantized_models_decompose_within_their_tolerance() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no test venv (ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases");
    std::fs::create_dir_all(&cases).unwrap();
    python(&[script().to_str().unwrap(), "build", cases.to_str().unwrap()]);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cases.join("cases.json")).unwrap()).unwrap();
    let meta = meta.as_object().unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut covered: BTreeSet<String> = BTreeSet::new();
    let mut worst: BTreeMap<String, f64> = BTreeMap::new();
    for (name, tol) in meta {
        let src = cases.join(format!("{name}.onnx"));
        let (out, report) = unfuse_file(&src, &out_dir);
        assert_eq!(report.unfused.len(), 1, "{name}: {report:?}");
        let op = report.unfused[0].op_type.clone();
        covered.insert(op.clone());
        // The class's bound: exact is 0 (steps, or relative for a float output).
        let class = unfuse::exactness_of(unfuse::MS_DOMAIN, &op).expect("a registered op");
        let limit = match class {
            Exactness::Exact => 0.0,
            // The float LSTM against ONNX Runtime's 8-bit one depends on the CPU's 8-bit code
            // path: 0.02 on an AVX-512 Xeon, 0.55 on an AVX2 AMD EPYC (per-channel s8). Held
            // to half its class's bound there (2 of the hidden state's range, at least 1).
            _ if op == "DynamicQuantizeLSTM" => tol[1].as_f64().unwrap().max(1.0),
            _ => tol[1].as_f64().unwrap(),
        };
        let err: f64 = python(&[
            script().to_str().unwrap(),
            "compare",
            src.to_str().unwrap(),
            out.to_str().unwrap(),
            &tol.to_string(),
        ])
        .parse()
        .unwrap();
        assert!(
            err <= limit,
            "{name}: error {err} over {limit} ({class:?}; the case's own tolerance {tol})"
        );
        worst.insert(name.clone(), err);
    }
    eprintln!("worst error per case: {worst:#?}");
    for op in FAMILY {
        assert!(covered.contains(*op), "no single-op case for {op}");
    }
}

#[test]
fn quantized_ops_below_opset_10_are_refused_with_the_opset() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no test venv (ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    python(&[
        script().to_str().unwrap(),
        "build",
        dir.path().to_str().unwrap(),
    ]);
    for name in ["QLinearAdd_u8", "QGemm_s8s8_transA_requant"] {
        let mut doc = onnx_safeify::load(&dir.path().join(format!("{name}.onnx"))).unwrap();
        for o in &mut doc.model.opset_import {
            if o.domain.as_deref().unwrap_or("").is_empty() {
                o.version = Some(9);
            }
        }
        let report = unfuse::unfuse_all(&mut doc.model, RULE, |n| unfuse::is_fused(n, 9));
        assert!(report.unfused.is_empty(), "{name}: {report:?}");
        assert_eq!(report.unsupported.len(), 1, "{name}: {report:?}");
        assert!(
            report.unsupported[0].reason.contains("opset >= 10"),
            "{name}: {}",
            report.unsupported[0].reason
        );
    }
}

/// Input sizes for the quantized corpus models' symbolic axes.
fn dims_for(stem: &str) -> &'static str {
    if stem.contains("_det_") {
        "[1,3,96,96]"
    } else if stem.contains("_rec_") {
        "[1,3,48,320]"
    } else if stem.contains("_cls_") {
        "[1,3,48,192]"
    } else {
        "[]"
    }
}

/// End-to-end tolerance of a quantized corpus model against the model it was made from,
/// relative to the output's range: 0 (bit-identical) where every decomposed op is exact. The
/// LSTM models hold DynamicQuantizeLSTM, whose float LSTM differs by ONNX Runtime's activation
/// quantization; the dynamic models that ONNX Runtime saved at the extended and all levels
/// hold its fused DynamicQuantizeMatMul kernel, which saturates u8s8 products on CPUs without
/// VNNI where `MatMulInteger` does not (they are also compared with the unfused model they
/// were saved from, `<model>.dyn.onnx`, which they must match to float rounding).
fn corpus_tolerance(stem: &str) -> f64 {
    if stem.contains("quant_lstm") {
        // DynamicQuantizeLSTM (approximate, 2 of the hidden state's range): 0.05 relative on an
        // AVX-512 Xeon, 0.65 on an AVX2 AMD EPYC, where ONNX Runtime's 8-bit kernel takes
        // another path.
        1.0
    } else if stem.contains(".dyn.ort_") {
        0.05
    } else {
        0.0
    }
}

fn compare(a: &Path, b: &Path, tol: f64, stem: &str) -> f64 {
    python(&[
        script().to_str().unwrap(),
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        &format!("[\"rel\", {tol}]"),
        dims_for(stem),
    ])
    .parse()
    .unwrap()
}

#[test]
fn quantized_corpus_models_decompose_and_match() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let dir = corpus.join("quantized");
    assert!(
        dir.is_dir(),
        "{} is missing: run scripts/corpus.sh (it builds the `quantized` step)",
        dir.display()
    );
    let files = common::onnx_files(&dir);
    assert!(files.len() >= 40, "only {} quantized models", files.len());
    let out = tempfile::tempdir().unwrap();
    let mut decomposed: BTreeMap<String, usize> = BTreeMap::new();
    let mut worst: BTreeMap<String, f64> = BTreeMap::new();
    for f in &files {
        let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
        let (o, report) = unfuse_file(f, out.path());
        for u in &report.unfused {
            *decomposed.entry(u.op_type.clone()).or_default() += 1;
        }
        let tol = corpus_tolerance(&stem);
        let err = compare(f, &o, tol, &stem);
        assert!(err <= tol, "{stem}: relative error {err} over {tol}");
        // A dynamic model saved by ONNX Runtime against the unfused model it came from (the
        // LSTM models hold DynamicQuantizeLSTM in both, so they are not exact). The layer
        // norms ONNX Runtime fused are decomposed as its kernel computes them (Welford's mean,
        // a division), not as the primitives they were fused from, and the next
        // DynamicQuantizeLinear turns a rounding into a quantization step: the same bound as
        // against the saved model (rec at "all": 0.023).
        if let Some((base, _)) = stem
            .split_once(".dyn.ort_")
            .filter(|_| !stem.contains("quant_lstm"))
        {
            let unfused = dir.join(format!("{base}.dyn.onnx"));
            let e = compare(&unfused, &o, tol, &stem);
            assert!(
                e <= tol,
                "{stem}: relative error {e} against {base}.dyn.onnx"
            );
        }
        worst.insert(stem, err);
    }
    eprintln!("decomposed: {decomposed:#?}\nworst relative error: {worst:#?}");
    for op in FAMILY {
        assert!(decomposed.contains_key(*op), "no corpus model had {op}");
    }
}
