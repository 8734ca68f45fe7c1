//! `verify` and `--verify` judge by the rewrite's exactness class, recorded by the compile in
//! the rewritten model's `metadata_props` (`onnx_safeify.exactness`): bit-identical for
//! `exact`, 1e-5 of the output's scale (float32) or 2 ulp at scale (float16) for `rounding`,
//! `B` of the scale for `approximate:B`; `--atol`/`--rtol` override; no class: the old
//! tolerance, said so. With `--runtime openvino` the original runs there too (three runs).
//!
//! The model pairs are built here and the class written into them by hand, so that each
//! bound is met or missed by a known amount.

mod common;
mod runtimes_support;
mod verify_support;

use std::path::{Path, PathBuf};

use onnx_safeify::proto::{StringStringEntryProto, TensorProto};
use onnx_safeify::rewrite::exactness::EXACTNESS_KEY;
use onnx_safeify::verify::cli::parse_args;
use onnx_safeify::verify::{run_cli, verify_models, RuntimeKind, Status, VerifyOptions};
use verify_support::*;

const FLOAT16: i32 = 10;

fn with_class(
    mut m: onnx_safeify::proto::ModelProto,
    class: &str,
) -> onnx_safeify::proto::ModelProto {
    m.metadata_props.push(StringStringEntryProto {
        key: Some(EXACTNESS_KEY.into()),
        value: Some(class.into()),
    });
    m
}

/// y = x * s: with s the float32 after 1.0, every element moves by at most one rounding step.
fn scaled(s: f32) -> onnx_safeify::proto::ModelProto {
    model(
        vec![node("Mul", &["x", "s"], &["y"], vec![])],
        vec![value_info("x", FLOAT, Some(&[16, 16]))],
        vec![value_info("y", FLOAT, Some(&[16, 16]))],
        vec![f32_initializer("s", &[], &[s])],
    )
}

/// y = x * 0 + c: an output that does not depend on the random input, whose scale is
/// max |c|.
fn constant(c: &[f32]) -> onnx_safeify::proto::ModelProto {
    let n = c.len() as i64;
    model(
        vec![
            node("Mul", &["x", "zero"], &["x0"], vec![]),
            node("Add", &["x0", "c"], &["y"], vec![]),
        ],
        vec![value_info("x", FLOAT, Some(&[n]))],
        vec![value_info("y", FLOAT, Some(&[n]))],
        vec![
            f32_initializer("zero", &[], &[0.0]),
            f32_initializer("c", &[n], c),
        ],
    )
}

/// The float16 version of [`constant`], `c` given as float16 bit patterns.
fn constant_f16(c: &[u16]) -> onnx_safeify::proto::ModelProto {
    let n = c.len() as i64;
    let t = |name: &str, dims: &[i64], v: &[u16]| TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(FLOAT16),
        raw_data: Some(
            v.iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        ),
        ..Default::default()
    };
    model(
        vec![
            node("Mul", &["x", "zero"], &["x0"], vec![]),
            node("Add", &["x0", "c"], &["y"], vec![]),
        ],
        vec![value_info("x", FLOAT16, Some(&[n]))],
        vec![value_info("y", FLOAT16, Some(&[n]))],
        vec![t("zero", &[], &[0]), t("c", &[n], c)],
    )
}

fn json(a: &Path, b: &Path, extra: &[&str]) -> (u8, serde_json::Value, String) {
    let mut args = vec![a.to_str().unwrap(), b.to_str().unwrap(), "--format", "json"];
    args.extend_from_slice(extra);
    let out = runtimes_support::run(
        &std::iter::once("verify")
            .chain(args.iter().copied())
            .collect::<Vec<_>>(),
        &[],
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON report ({e}): {}{}", out.stdout, out.stderr));
    (out.code as u8, v, out.stderr)
}

fn text(a: &Path, b: &Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["verify", a.to_str().unwrap(), b.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = runtimes_support::run(&args, &[]);
    (out.code, format!("{}{}", out.stdout, out.stderr))
}

fn code(a: &Path, b: &Path, extra: &[&str]) -> u8 {
    let mut args = vec![a.to_str().unwrap(), b.to_str().unwrap()];
    args.extend_from_slice(extra);
    run_cli(&parse_args(args).unwrap())
}

struct Pair {
    _dir: tempfile::TempDir,
    a: PathBuf,
    b: PathBuf,
}

fn pair(orig: onnx_safeify::proto::ModelProto, rewritten: onnx_safeify::proto::ModelProto) -> Pair {
    let dir = tempfile::tempdir().unwrap();
    let a = write_model(dir.path(), "original.onnx", &orig);
    let b = write_model(dir.path(), "rewritten.onnx", &rewritten);
    Pair { _dir: dir, a, b }
}

fn next_up(x: f32) -> f32 {
    f32::from_bits(x.to_bits() + 1)
}

#[test]
fn one_rounding_step_passes_rounding_and_fails_exact() {
    if !runtime_available() {
        return;
    }
    let s = next_up(1.0);
    let rounding = pair(scaled(1.0), with_class(scaled(s), "rounding"));
    let exact = pair(scaled(1.0), with_class(scaled(s), "exact"));
    let same = pair(scaled(1.0), with_class(scaled(1.0), "exact"));

    let r = verify_models(&rounding.a, &rounding.b, &VerifyOptions::default()).unwrap();
    assert!(r.passed(), "{}", r.to_text());
    let o = &r.runs[0].outputs[0];
    // The pair does differ (by about one step), well inside 1e-5 of the scale.
    let err = o.max_abs_err.unwrap();
    assert!(err > 0.0, "{}", r.to_text());
    assert!(o.err_of_scale.unwrap() < 2.0 * f32::EPSILON as f64, "{o:?}");
    assert_eq!(o.judged_by, "rounding");
    let scale = o.scale.unwrap();
    assert!(scale > 0.5 && scale < 1.0, "{o:?}");
    assert!((o.bound.unwrap() - 1e-5 * scale).abs() < 1e-12, "{o:?}");
    assert_eq!(r.exactness.class.as_deref(), Some("rounding"));
    assert_eq!(r.exactness.criterion, "class");

    let r = verify_models(&exact.a, &exact.b, &VerifyOptions::default()).unwrap();
    assert!(!r.passed(), "{}", r.to_text());
    let o = &r.runs[0].outputs[0];
    assert_eq!(o.status, Status::Mismatch);
    assert_eq!(o.bound, Some(0.0));
    assert_eq!(o.judged_by, "exact");
    assert!(o.mismatched > 0 && o.mismatched <= o.elements);
    assert_eq!(code(&exact.a, &exact.b, &[]), 1);

    // Exact and identical: passes, with a zero error.
    let r = verify_models(&same.a, &same.b, &VerifyOptions::default()).unwrap();
    assert!(r.passed(), "{}", r.to_text());
    assert_eq!(r.runs[0].outputs[0].max_abs_err, Some(0.0));

    // The text report says the class, and per output the scale and the bound.
    let (c, t) = text(&exact.a, &exact.b, &[]);
    assert_eq!(c, 1, "{t}");
    assert!(
        t.contains("the rewrite's exactness class, exact: bit-identical"),
        "{t}"
    );
    assert!(t.contains("err/scale") && t.contains("bound"), "{t}");
    assert!(t.contains("FAIL: 1 of 1 comparison(s)"), "{t}");
}

#[test]
fn approximate_bound_is_a_fraction_of_the_scale() {
    if !runtime_available() {
        return;
    }
    let c = [1.0f32, -2.0, 3.0, -4.0];
    // 5e-3 and 2e-2 of the scale (4) on the last element.
    let near = [1.0f32, -2.0, 3.0, -4.0 - 5e-3 * 4.0];
    let far = [1.0f32, -2.0, 3.0, -4.0 - 2e-2 * 4.0];
    let ok = pair(
        constant(&c),
        with_class(constant(&near), "approximate:1e-2"),
    );
    let bad = pair(constant(&c), with_class(constant(&far), "approximate:1e-2"));

    let (code_ok, j, _) = json(&ok.a, &ok.b, &[]);
    assert_eq!(code_ok, 0, "{j:#}");
    let o = &j["runs"][0]["outputs"][0];
    assert_eq!(o["judged_by"], "approximate:1e-2");
    assert_eq!(o["scale"].as_f64(), Some(4.0));
    assert!((o["bound"].as_f64().unwrap() - 4e-2).abs() < 1e-9, "{o:#}");
    assert!(
        (o["bound_of_scale"].as_f64().unwrap() - 1e-2).abs() < 1e-9,
        "{o:#}"
    );
    let f = o["err_of_scale"].as_f64().unwrap();
    assert!((f - 5e-3).abs() < 1e-6, "{o:#}");
    assert_eq!(j["exactness"]["class"], "approximate:1e-2");
    assert_eq!(j["exactness"]["criterion"], "class");

    let (code_bad, j, _) = json(&bad.a, &bad.b, &[]);
    assert_eq!(code_bad, 1, "{j:#}");
    let o = &j["runs"][0]["outputs"][0];
    assert_eq!(o["status"], "mismatch");
    assert_eq!(o["mismatched"], 1);
    assert_eq!(o["worst"]["index"][0], 3);
    let f = o["err_of_scale"].as_f64().unwrap();
    assert!((f - 2e-2).abs() < 1e-6, "{o:#}");
    // The existing keys are all still there.
    for k in [
        "name",
        "status",
        "dtype",
        "shape",
        "elements",
        "mismatched",
        "max_abs_err",
        "max_rel_err",
    ] {
        assert!(o.get(k).is_some(), "{k} missing: {o:#}");
    }
    for k in [
        "original",
        "rewritten",
        "onnxruntime",
        "tolerance",
        "sessions",
        "inputs",
        "runs",
        "warnings",
        "passed",
    ] {
        assert!(j.get(k).is_some(), "{k} missing");
    }
}

#[test]
fn float16_rounding_is_two_ulp_at_scale() {
    if !runtime_available() {
        return;
    }
    // Scale 1.5 (0x3e00): one ulp there is 2^-10. 0.25 is 0x3400, where a step is 2^-12:
    // 8 steps are 2 ulp at the scale (passes), 12 steps are 3 (fails).
    let c = [0x3e00u16, 0x3400];
    let two = pair(
        constant_f16(&c),
        with_class(constant_f16(&[0x3e00, 0x3408]), "rounding"),
    );
    let three = pair(
        constant_f16(&c),
        with_class(constant_f16(&[0x3e00, 0x340c]), "rounding"),
    );
    let r = verify_models(&two.a, &two.b, &VerifyOptions::default()).unwrap();
    assert!(r.passed(), "{}", r.to_text());
    let o = &r.runs[0].outputs[0];
    assert_eq!(o.bound, Some(2.0 * 2f64.powi(-10)));
    assert_eq!(o.max_abs_err, Some(2.0 * 2f64.powi(-10)));
    let r = verify_models(&three.a, &three.b, &VerifyOptions::default()).unwrap();
    assert!(!r.passed(), "{}", r.to_text());
}

#[test]
fn atol_and_rtol_override_the_class() {
    if !runtime_available() {
        return;
    }
    let c = [1.0f32, -2.0, 3.0, -4.0];
    let far = [1.0f32, -2.0, 3.0, -4.0 - 2e-2 * 4.0];
    let p = pair(constant(&c), with_class(constant(&far), "exact"));
    assert_eq!(code(&p.a, &p.b, &[]), 1);
    // --atol alone: the tolerance as given (rtol at its default 1e-4).
    let (c1, j, _) = json(&p.a, &p.b, &["--atol", "0.1"]);
    assert_eq!(c1, 0, "{j:#}");
    assert_eq!(j["exactness"]["criterion"], "given");
    assert_eq!(j["exactness"]["class"], "exact");
    assert_eq!(j["tolerance"]["atol"].as_f64(), Some(0.1));
    assert_eq!(j["tolerance"]["rtol"].as_f64(), Some(1e-4));
    assert_eq!(j["runs"][0]["outputs"][0]["judged_by"], "tolerance");
    // --rtol alone: 0.05 * 4 = 0.2 >= 0.08.
    assert_eq!(code(&p.a, &p.b, &["--rtol", "0.05"]), 0);
    // Given, but tighter than the class would be: fails.
    let near = pair(
        constant(&c),
        with_class(
            constant(&[1.0, -2.0, 3.0, -4.0 - 5e-3 * 4.0]),
            "approximate:1e-2",
        ),
    );
    assert_eq!(code(&near.a, &near.b, &[]), 0);
    assert_eq!(code(&near.a, &near.b, &["--atol", "0", "--rtol", "0"]), 1);
    let (_, t) = text(&near.a, &near.b, &["--atol", "0", "--rtol", "0"]);
    assert!(
        t.contains("as given (the rewrite's class, approximate:1e-2, not used)"),
        "{t}"
    );
}

#[test]
fn no_class_keeps_the_old_tolerance_and_says_so() {
    if !runtime_available() {
        return;
    }
    // One rounding step with no class: within 1e-5 + 1e-4*|b|.
    let p = pair(scaled(1.0), scaled(next_up(1.0)));
    let (c, j, _) = json(&p.a, &p.b, &[]);
    assert_eq!(c, 0, "{j:#}");
    assert_eq!(j["exactness"]["class"], serde_json::Value::Null);
    assert_eq!(j["exactness"]["criterion"], "default");
    assert_eq!(j["runs"][0]["outputs"][0]["judged_by"], "tolerance");
    let (_, t) = text(&p.a, &p.b, &[]);
    assert!(t.contains("no exactness class recorded"), "{t}");
    assert!(t.contains("|a-b| <= 1e-5 + 1e-4*|b|"), "{t}");
    // A class this version cannot read: a warning, and the old tolerance.
    let odd = pair(
        scaled(1.0),
        with_class(scaled(next_up(1.0)), "approximately"),
    );
    let (c, j, _) = json(&odd.a, &odd.b, &[]);
    assert_eq!(c, 0, "{j:#}");
    assert_eq!(j["exactness"]["criterion"], "default");
    assert!(
        j["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("approximately")),
        "{j:#}"
    );
}

#[test]
fn integer_outputs_are_exact_under_any_class() {
    if !runtime_available() {
        return;
    }
    // ArgMax of a constant: 3 against 2, under approximate:0.5.
    let argmax = |c: &[f32]| {
        let mut m = constant(c);
        let g = m.graph.as_mut().unwrap();
        g.node[1].output[0] = "v".into();
        g.node
            .push(node("ArgMax", &["v"], &["y"], vec![attr_i("keepdims", 0)]));
        g.output[0] = value_info("y", INT64, Some(&[]));
        m
    };
    let p = pair(
        argmax(&[1.0, 2.0, 3.0, 4.0]),
        with_class(argmax(&[1.0, 2.0, 4.0, 3.0]), "approximate:0.5"),
    );
    let r = verify_models(&p.a, &p.b, &VerifyOptions::default()).unwrap();
    assert!(!r.passed(), "{}", r.to_text());
    assert_eq!(r.runs[0].outputs[0].bound, Some(0.0));
}

#[test]
fn compile_verify_judges_by_the_class_the_compile_records() {
    if !runtime_available() {
        return;
    }
    // The sample through rx580 with --verify: the report on stderr names the class the
    // output records, or says that none is.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rx.onnx");
    let s = common::sample();
    let o = runtimes_support::run(
        &[
            s.to_str().unwrap(),
            "--target",
            "rx580",
            "--verify",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let m = read_model(&out);
    let class = m
        .metadata_props
        .iter()
        .find(|p| p.key.as_deref() == Some(EXACTNESS_KEY))
        .and_then(|p| p.value.clone());
    match class {
        Some(c) => assert!(
            o.stderr
                .contains(&format!("the rewrite's exactness class, {c}")),
            "{c}: {}",
            o.stderr
        ),
        None => assert!(
            o.stderr.contains("no exactness class recorded"),
            "{}",
            o.stderr
        ),
    }
}

/// Three runs on OpenVINO.
mod openvino {
    use super::*;

    /// y = x @ w with k = 512: OpenVINO's CPU plugin sums in another order than ONNX
    /// Runtime, so the two differ by a few float32 steps.
    fn matmul() -> onnx_safeify::proto::ModelProto {
        let k = 512usize;
        let w: Vec<f32> = (0..k * 16)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 0.9)
            .collect();
        model(
            vec![node("MatMul", &["x", "w"], &["y"], vec![])],
            vec![value_info("x", FLOAT, Some(&[4, k as i64]))],
            vec![value_info("y", FLOAT, Some(&[4, 16]))],
            vec![f32_initializer("w", &[k as i64, 16], &w)],
        )
    }

    #[test]
    fn an_identical_rewrite_passes_and_the_runtime_s_own_difference_is_reported() {
        if !runtime_available() || !runtimes_support::ready(RuntimeKind::Openvino) {
            return;
        }
        let p = pair(matmul(), with_class(matmul(), "exact"));
        let (c, j, err) = json(&p.a, &p.b, &["--runtime", "openvino"]);
        assert_eq!(c, 0, "{j:#}{err}");
        let o = &j["original_on_runtime"];
        assert_eq!(o["ran"], true, "{o:#}");
        assert_eq!(o["runtime"], "openvino");
        let d = &o["differences"][0];
        assert_eq!(d["output"], "y");
        let own = d["max_abs_err"].as_f64().unwrap();
        assert!(own > 0.0, "OpenVINO now sums as ONNX Runtime does: {o:#}");
        // The classes are defined on ONNX Runtime CPU: on another runtime an exact rewrite is
        // held to float rounding, and the runtime's own order of sums is within it.
        assert_eq!(o["differs"], false, "{o:#}");
        assert_eq!(d["status"], "ok");
        assert!(
            j["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w.as_str().unwrap_or("").contains("held to float rounding")),
            "{j:#}"
        );
        let run = &j["runs"][0];
        // Judged: rewritten on OpenVINO against the original on OpenVINO: equal.
        assert_eq!(run["outputs"][0]["status"], "ok");
        assert_eq!(run["outputs"][0]["max_abs_err"].as_f64(), Some(0.0));
        // Allowed: twice the runtime's own difference (it rounds the original and the
        // rewrite).
        assert_eq!(
            run["outputs"][0]["runtime_allowance"].as_f64(),
            Some(2.0 * own)
        );
        // Shown: against ONNX Runtime CPU, and the runtime's own difference.
        assert_eq!(run["against_cpu"][0]["status"], "ok");
        assert_eq!(run["runtime_vs_cpu"][0]["max_abs_err"].as_f64(), Some(own));
        assert_eq!(
            j["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["device"] == "openvino")
                .count(),
            2
        );
        let (c, t) = text(&p.a, &p.b, &["--runtime", "openvino"]);
        assert_eq!(c, 0, "{t}");
        assert!(
            t.contains("openvino differs from ONNX Runtime CPU on the original, within the bound"),
            "{t}"
        );
        assert!(
            t.contains("rewritten on openvino vs original on openvino (judged)"),
            "{t}"
        );
        // With no class (the old tolerance) the same difference is within the bound: said
        // so, with its size.
        let q = pair(matmul(), matmul());
        let (c, t) = text(&q.a, &q.b, &["--runtime", "openvino"]);
        assert_eq!(c, 0, "{t}");
        assert!(
            t.contains("openvino differs from ONNX Runtime CPU on the original, within the bound"),
            "{t}"
        );
        assert!(t.contains("'y': up to "), "{t}");
    }

    #[test]
    fn a_wrong_rewrite_is_still_caught_on_the_runtime() {
        if !runtime_available() || !runtimes_support::ready(RuntimeKind::Openvino) {
            return;
        }
        let mut bad = matmul();
        let g = bad.graph.as_mut().unwrap();
        g.node.push(node("Relu", &["y0"], &["y"], vec![]));
        g.node[0].output[0] = "y0".into();
        let p = pair(matmul(), with_class(bad, "rounding"));
        let (c, j, err) = json(&p.a, &p.b, &["--runtime", "openvino"]);
        assert_eq!(c, 1, "{j:#}{err}");
        assert_eq!(j["original_on_runtime"]["ran"], true);
        assert_eq!(j["runs"][0]["outputs"][0]["status"], "mismatch");
    }

    /// com.microsoft CDist, which ONNX Runtime runs and OpenVINO's ONNX front end does not
    /// convert; the rewrite computes the same squared distances with standard ops.
    #[test]
    fn an_original_the_runtime_refuses_is_judged_on_onnx_runtime_cpu() {
        if !runtime_available() || !runtimes_support::ready(RuntimeKind::Openvino) {
            return;
        }
        let mut orig = model(
            vec![{
                let mut n = node("CDist", &["x", "x"], &["y"], vec![]);
                n.domain = Some("com.microsoft".into());
                n
            }],
            vec![value_info("x", FLOAT, Some(&[4, 8]))],
            vec![value_info("y", FLOAT, Some(&[4, 4]))],
            vec![],
        );
        orig.opset_import
            .push(onnx_safeify::proto::OperatorSetIdProto {
                domain: Some("com.microsoft".into()),
                version: Some(1),
            });
        let int_init = |name: &str, v: &[i64]| TensorProto {
            name: Some(name.into()),
            dims: vec![v.len() as i64],
            data_type: Some(INT64),
            int64_data: v.to_vec(),
            ..Default::default()
        };
        let rewritten = model(
            vec![
                node("Unsqueeze", &["x", "ax1"], &["xa"], vec![]),
                node("Unsqueeze", &["x", "ax0"], &["xb"], vec![]),
                node("Sub", &["xa", "xb"], &["d"], vec![]),
                node("Mul", &["d", "d"], &["d2"], vec![]),
                node(
                    "ReduceSum",
                    &["d2", "ax2"],
                    &["y"],
                    vec![attr_i("keepdims", 0)],
                ),
            ],
            vec![value_info("x", FLOAT, Some(&[4, 8]))],
            vec![value_info("y", FLOAT, Some(&[4, 4]))],
            vec![
                int_init("ax0", &[0]),
                int_init("ax1", &[1]),
                int_init("ax2", &[2]),
            ],
        );
        let p = pair(orig.clone(), with_class(rewritten, "approximate:1e-4"));
        let (c, j, err) = json(&p.a, &p.b, &["--runtime", "openvino"]);
        assert_eq!(c, 0, "{j:#}{err}");
        let o = &j["original_on_runtime"];
        assert_eq!(o["ran"], false, "{o:#}");
        let why = o["error"].as_str().unwrap();
        assert!(why.contains("OpenVINO"), "{why}");
        // The rewrite is judged on ONNX Runtime CPU at its class (no tolerance floor), and
        // OpenVINO's own difference is measured on the rewritten model.
        assert_eq!(o["measured_on"], "rewritten", "{o:#}");
        assert_eq!(o["differences"][0]["output"], "y", "{o:#}");
        let run = &j["runs"][0];
        let judged = &run["outputs"][0];
        assert_eq!(judged["judged_by"], "approximate:1e-4", "{judged:#}");
        assert!(judged.get("tolerance_floor").is_none(), "{judged:#}");
        assert_eq!(judged["status"], "ok", "{judged:#}");
        assert_eq!(run["runtime_vs_cpu"][0]["name"], "y", "{run:#}");
        assert_eq!(run["against_cpu"][0]["name"], "y", "{run:#}");
        let (c, t) = text(&p.a, &p.b, &["--runtime", "openvino"]);
        assert_eq!(c, 0, "{t}");
        assert!(t.contains("original:  could not run on openvino: "), "{t}");
        assert!(
            t.contains("rewritten vs original, both on ONNX Runtime CPU (judged"),
            "{t}"
        );
        assert!(
            t.contains("rewritten on openvino vs rewritten on ONNX Runtime CPU"),
            "{t}"
        );

        // A rewrite that fails there as the original does: the error says it is the
        // runtime's own limit, not the rewrite's.
        let same = pair(orig.clone(), with_class(orig, "exact"));
        let (c, t) = text(&same.a, &same.b, &["--runtime", "openvino"]);
        assert_eq!(c, 2, "{t}");
        assert!(t.contains("openvino cannot load the model"), "{t}");
        assert!(t.contains("the original fails on openvino too"), "{t}");
        assert!(t.contains("own limit, not the rewrite's"), "{t}");
    }

    /// com.microsoft BiasAdd, which ONNX Runtime's CPU has no kernel for and OpenVINO
    /// converts: the original on OpenVINO is the reference, said so.
    #[test]
    fn an_original_only_the_runtime_runs_is_the_reference() {
        if !runtime_available() || !runtimes_support::ready(RuntimeKind::Openvino) {
            return;
        }
        let biasadd = || {
            let mut m = model(
                vec![{
                    let mut n = node("BiasAdd", &["x", "b", "s"], &["y"], vec![]);
                    n.domain = Some("com.microsoft".into());
                    n
                }],
                vec![
                    value_info("x", FLOAT, Some(&[2, 3, 4])),
                    value_info("s", FLOAT, Some(&[2, 3, 4])),
                ],
                vec![value_info("y", FLOAT, Some(&[2, 3, 4]))],
                vec![f32_initializer("b", &[4], &[0.5, -1.0, 2.0, 0.25])],
            );
            m.opset_import
                .push(onnx_safeify::proto::OperatorSetIdProto {
                    domain: Some("com.microsoft".into()),
                    version: Some(1),
                });
            m
        };
        let rewritten = model(
            vec![
                node("Add", &["x", "b"], &["xb"], vec![]),
                node("Add", &["xb", "s"], &["y"], vec![]),
            ],
            vec![
                value_info("x", FLOAT, Some(&[2, 3, 4])),
                value_info("s", FLOAT, Some(&[2, 3, 4])),
            ],
            vec![value_info("y", FLOAT, Some(&[2, 3, 4]))],
            vec![f32_initializer("b", &[4], &[0.5, -1.0, 2.0, 0.25])],
        );
        let p = pair(biasadd(), with_class(rewritten, "exact"));
        let (c, j, err) = json(&p.a, &p.b, &["--runtime", "openvino"]);
        assert_eq!(c, 0, "{j:#}{err}");
        let o = &j["original_on_runtime"];
        assert_eq!(o["ran"], true, "{o:#}");
        assert!(
            o["reference"].as_str().unwrap().contains("BiasAdd"),
            "{o:#}"
        );
        assert_eq!(j["runs"][0]["outputs"][0]["status"], "ok", "{j:#}");
        let (c, t) = text(&p.a, &p.b, &["--runtime", "openvino"]);
        assert_eq!(c, 0, "{t}");
        assert!(
            t.contains("reference: original on openvino (ONNX Runtime CPU cannot run it)"),
            "{t}"
        );
        // A wrong rewrite is still caught against that reference.
        let wrong = model(
            vec![node("Add", &["x", "s"], &["y"], vec![])],
            vec![
                value_info("x", FLOAT, Some(&[2, 3, 4])),
                value_info("s", FLOAT, Some(&[2, 3, 4])),
            ],
            vec![value_info("y", FLOAT, Some(&[2, 3, 4]))],
            vec![],
        );
        let q = pair(biasadd(), with_class(wrong, "exact"));
        let (c, _, err) = json(&q.a, &q.b, &["--runtime", "openvino"]);
        assert_eq!(c, 1, "{err}");
    }
}
