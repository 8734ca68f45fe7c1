//! Barriers placed by time (issue 47, part 3): each GPU submission's estimated time stays within
//! the limit the rule guards over its margin, and a cut costs one pinned no-op on one value and
//! that value's two crossings, however many values are live across it (DirectML's read-back
//! ends the command list: `src/runtime/submission.rs`).
//!
//! - the rule's forms: `margin` (the limit from the target's `device:`), `limit_ms`, the older
//!   `budget`, and clear errors with the rule's line;
//! - no cascade on a QDQ int8 Whisper-like encoder and an fp16 HiFi-GAN-like vocoder
//!   (`tools/make_speech.py`), whose masks, residuals and skip sums are live across every cut;
//! - PP-OCRv4 det and rec at their real sizes on `rx580`: the longest submission under the
//!   limit over the margin, crossings at most 10 % of the GPU time.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use onnx_safeify::rules::parse_target_str;
use onnx_safeify::rules::{Action, BarrierLimit};

fn run(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_onnx-safeify"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn rule(action: &str) -> String {
    format!(
        "target: t\nrules:\n  - {{id: b, why: w, evidence: [], match: {{op: Conv}}, action: {action}}}\n"
    )
}

#[test]
fn the_forms_of_a_barrier_rule() {
    let t = parse_target_str("m.yaml", &rule("{barrier: {margin: 28.6}}")).unwrap();
    assert_eq!(
        t.rules[0].action,
        Action::Barrier {
            limit: BarrierLimit::Time {
                margin: 28.6,
                limit_ms: None
            },
            dims: Vec::new().into()
        }
    );
    assert_eq!(
        t.rules[0].action.to_string(),
        "barrier {margin: 28.6}",
        "the form as written"
    );
    let t = parse_target_str("l.yaml", &rule("{barrier: {margin: 4, limit_ms: 500}}")).unwrap();
    assert!(matches!(
        t.rules[0].action,
        Action::Barrier {
            limit: BarrierLimit::Time {
                limit_ms: Some(l),
                ..
            },
            ..
        } if l == 500.0
    ));
    // The older form is still read, in work units.
    let t = parse_target_str("w.yaml", &rule("{barrier: {budget: 1e9}}")).unwrap();
    assert!(matches!(
        t.rules[0].action,
        Action::Barrier {
            limit: BarrierLimit::Work(b),
            ..
        } if b == 1e9
    ));
    // Errors name the file and the rule's line.
    for (action, says) in [
        ("{barrier: {}}", "needs `margin`"),
        ("{barrier: {budget: 1e9, margin: 20}}", "cannot be combined"),
        ("{barrier: {margin: 0.5}}", "at least 1"),
        ("{barrier: {margin: -3}}", "greater than 0"),
        ("{barrier: {margin: 20, limt_ms: 5}}", "limt_ms"),
    ] {
        let e = parse_target_str("bad.yaml", &rule(action)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(says), "{action}: {text}");
        assert!(text.contains("bad.yaml:3:"), "{action}: no line in {text}");
    }
}

/// A target that holds every submission to `limit_ms` (margin 1), on rx580's device.
fn tight_target(dir: &Path, limit_ms: f64) -> PathBuf {
    let p = dir.join("tight.yaml");
    std::fs::write(
        &p,
        format!(
            "target: rx580-tight\ndescription: rx580 with a tight limit\nextends: rx580\nrules:\n  - id: barrier-heavy-dispatch\n    why: cuts on a small model\n    evidence: []\n    match: {{op: [Conv, ConvTranspose, MatMul, Gemm], domain: \"\"}}\n    action: {{barrier: {{margin: 1, limit_ms: {limit_ms}}}}}\n"
        ),
    )
    .unwrap();
    p
}

fn report(model: &Path, target: &str, extra: &[&str], out: &Path) -> serde_json::Value {
    let rep = out.with_extension("json");
    let mut args = vec![
        model.to_str().unwrap(),
        "--target",
        target,
        "-o",
        out.to_str().unwrap(),
        "--report",
        rep.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = run(&args);
    assert_eq!(code, 0, "{}: {stdout}\n{stderr}", model.display());
    serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap()
}

/// The pinned no-ops the barrier made in `path`.
fn barrier_nodes(path: &Path) -> Vec<(String, Vec<String>)> {
    use prost::Message;
    let m =
        onnx_safeify::proto::ModelProto::decode(std::fs::read(path).unwrap().as_slice()).unwrap();
    m.graph
        .unwrap()
        .node
        .iter()
        .filter(|n| n.name().contains("barrier"))
        .filter(|n| {
            n.metadata_props
                .iter()
                .any(|p| p.key() == "layer_ann" && p.value() == "safeify_cpu")
        })
        .map(|n| (n.op_type().to_string(), n.input.clone()))
        .collect()
}

#[test]
fn a_cut_pins_one_value_in_speech_models_with_values_live_across_it() {
    let Some(py) = common::venv_python() else {
        eprintln!("SKIPPED: no venv with onnx and onnxruntime (run scripts/corpus.sh)");
        return;
    };
    let d = std::env::temp_dir().join(format!("barrier_time_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let st = Command::new(py)
        .arg(common::repo().join("tools/make_speech.py"))
        .arg(&d)
        .status()
        .unwrap();
    assert!(st.success(), "tools/make_speech.py failed");
    // Limits that cut each model several times (their whole time is 1.6 and 0.28 ms).
    for (name, limit_ms, min_cuts) in [("whisper_enc_qdq", 0.25, 6), ("hifigan_fp16", 0.1, 3)] {
        let model = d.join(format!("{name}.onnx"));
        let target = tight_target(&d, limit_ms);
        let out = d.join(format!("{name}.out.onnx"));
        let r = report(&model, target.to_str().unwrap(), &[], &out);
        let cuts = barrier_nodes(&out);
        assert!(cuts.len() >= min_cuts, "{name}: {} cuts", cuts.len());
        // One no-op per cut, on one value: `Max(x, x)`.
        for (op, inputs) in &cuts {
            assert_eq!(op, "Max", "{name}");
            assert!(
                inputs.len() == 2 && inputs[0] == inputs[1],
                "{name}: {inputs:?}"
            );
        }
        let pinned = r["pinned"].as_array().unwrap().len();
        assert_eq!(
            pinned,
            cuts.len(),
            "{name}: pinned {pinned} for {} cuts",
            cuts.len()
        );
        let cost = |side: &str, k: &str| r["cost"][side][k].as_u64().unwrap();
        // Each cut adds the two crossings of its one value, and one submission.
        assert_eq!(
            cost("output", "crossings") - cost("input", "crossings"),
            2 * cuts.len() as u64,
            "{name}: {}",
            r["cost"]
        );
        assert_eq!(
            cost("output", "gpu_pieces"),
            cost("input", "gpu_pieces") + cuts.len() as u64,
            "{name}: {}",
            r["cost"]
        );
        let t = &r["timing"]["output"];
        assert_eq!(
            t["submissions"].as_u64(),
            Some(cuts.len() as u64 + 1),
            "{t}"
        );
        let longest = t["longest_submission_ms"].as_f64().unwrap();
        assert!(
            longest <= limit_ms,
            "{name}: longest {longest} ms over {limit_ms}: {t}"
        );
        for p in r["pieces"].as_array().unwrap() {
            assert!(p["ms"].as_f64().unwrap() <= limit_ms, "{p}");
        }
        // The output computes the same function (a barrier is exact).
        let (code, stdout, stderr) =
            run(&["verify", model.to_str().unwrap(), out.to_str().unwrap()]);
        assert_eq!(code, 0, "{name}: verify\n{stdout}\n{stderr}");
        eprintln!(
            "{name}: {} cuts, {} pinned, crossings {} -> {}, submissions {}, longest {longest} ms",
            cuts.len(),
            pinned,
            cost("input", "crossings"),
            cost("output", "crossings"),
            t["submissions"]
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn ppocr_det_and_rec_at_their_real_sizes_fit_the_rx580_margin() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let real = corpus.join("real");
    let d = std::env::temp_dir().join(format!("barrier_time_ocr_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let det = real.join("rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx");
    let rec = real.join("rapidocr_onnxruntime__ch_PP-OCRv4_rec_infer.onnx");
    let per_submission_ms = 2000.0 / 28.6;
    let sides = |s: &str| {
        vec![
            format!("p2o.DynamicDimension.0=1"),
            format!("p2o.DynamicDimension.1={s}"),
            format!("p2o.DynamicDimension.2={s}"),
        ]
    };
    let cases: Vec<(&str, &Path, Vec<String>)> = vec![
        ("det 960", &det, sides("960")),
        ("det 640", &det, sides("640")),
        (
            "rec 48x320",
            &rec,
            vec![
                "p2o.DynamicDimension.0=1".into(),
                "x[2]=48".into(),
                "p2o.DynamicDimension.1=320".into(),
            ],
        ),
    ];
    for (name, model, dims) in cases {
        let mut extra = Vec::new();
        for x in &dims {
            extra.push("--dim");
            extra.push(x.as_str());
        }
        let out = d.join(format!("{}.onnx", name.replace(' ', "_")));
        let r = report(model, "rx580", &extra, &out);
        let t = &r["timing"]["output"];
        let longest = t["longest_submission_ms"].as_f64().unwrap();
        let gpu = t["gpu_ms"].as_f64().unwrap();
        let crossing = t["crossing_ms"].as_f64().unwrap();
        assert!(longest <= per_submission_ms, "{name}: {t}");
        assert!(crossing <= 0.1 * gpu, "{name}: {t}");
        eprintln!(
            "{name}: longest {longest} ms (budget {per_submission_ms:.2}), GPU {gpu} ms, crossings {crossing} ms, {} submission(s)",
            t["submissions"]
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}
