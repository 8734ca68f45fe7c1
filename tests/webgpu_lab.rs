//! The WebGPU hazard lab: for each rule of the `webgpu` target, a minimal model holding the
//! pattern (tests/data/webgpu_lab/, made by make_models.py there) runs on onnxruntime-web's
//! WebGPU execution provider in headless Chromium, against ONNX Runtime CPU:
//! - the original: the outcome recorded in docs/webgpu-lab.md for the pinned onnxruntime-web
//!   (hazard reproduced: an error or wrong values; or not reproduced). When an upgrade changes
//!   an outcome, this test fails and the record (and maybe the rule) must be revisited;
//! - the rewrite (`--target webgpu`): faithful on WebGPU, with the node on the CPU, pinned.
//!
//! Needs scripts/setup-runtimes.sh (Chromium, tools/webgpu/node_modules); fails without it
//! unless ONNX_SAFEIFY_ALLOW_MISSING_RUNTIMES=1.

mod runtimes_support;

use std::path::PathBuf;

use onnx_safeify::verify::RuntimeKind;
use runtimes_support::*;

const WEBGPU: &str = "WebGpuExecutionProvider";

/// What the original model does on WebGPU with onnxruntime-web 1.30.0.
enum Original {
    /// Same values as the CPU (within the given atol/rtol): hazard not reproduced.
    Faithful {
        atol: &'static str,
        rtol: &'static str,
    },
    /// Runs, but the values differ from the CPU's (exit 1).
    Wrong,
    /// Fails (exit 2) with this in the message.
    Fails(&'static str),
}

fn lab(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/webgpu_lab")
        .join(file)
}

/// Runs the case; `rule` must fire on `node`, which must end up on the CPU after the rewrite.
fn case(file: &str, rule: &str, node: &str, original: Original) {
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    let model = lab(file);
    // The rule fires on that node (check exits 1 with findings).
    let chk = run(
        &[
            "check",
            model.to_str().unwrap(),
            "--target",
            "webgpu",
            "--format",
            "json",
        ],
        &[],
    );
    assert_eq!(chk.code, 1, "{}", chk.stderr);
    assert!(chk.stdout.contains(rule), "{}", chk.stdout);

    // The original on WebGPU. `verify M M --runtime webgpu` runs M there twice (judged: equal)
    // and once on ONNX Runtime CPU: `original_on_runtime` is WebGPU's own difference.
    match original {
        Original::Faithful { atol, rtol } => {
            let (code, report, out) =
                verify_json(&model, &model, "webgpu", &["--atol", atol, "--rtol", rtol]);
            assert_eq!(code, 0, "{file}: {}{}", out.stdout, out.stderr);
            let report = report.unwrap();
            assert_eq!(report["original_on_runtime"]["ran"], true, "{}", out.stdout);
            assert_eq!(
                report["original_on_runtime"]["differs"], false,
                "{file}: the hazard now reproduces on WebGPU (update docs/webgpu-lab.md): {}{}",
                out.stdout, out.stderr
            );
            assert!(count(&report, WEBGPU) >= 1, "{}", out.stdout);
            assert!(placement(&report).1.is_empty(), "{}", out.stdout);
        }
        Original::Wrong => {
            let (code, report, out) = verify_json(&model, &model, "webgpu", &[]);
            assert_eq!(code, 0, "{file}: {}{}", out.stdout, out.stderr);
            let report = report.unwrap();
            assert_eq!(
                report["original_on_runtime"]["differs"], true,
                "{file}: expected wrong values on WebGPU (docs/webgpu-lab.md): {}{}",
                out.stdout, out.stderr
            );
            assert!(count(&report, WEBGPU) >= 1, "{}", out.stdout);
        }
        Original::Fails(msg) => {
            let (code, _, out) = verify_json(&model, &model, "webgpu", &[]);
            assert_eq!(
                code, 2,
                "{file}: expected a WebGPU failure (docs/webgpu-lab.md): {}{}",
                out.stdout, out.stderr
            );
            assert!(out.stderr.contains(msg), "{}", out.stderr);
            assert!(
                out.stderr.contains("onnxruntime-web WebGPU"),
                "{}",
                out.stderr
            );
        }
    }

    // The rewrite: faithful on WebGPU, the node pinned to the CPU by layer_ann.
    let dir = tempfile::tempdir().unwrap();
    let rewritten = dir.path().join("webgpu.onnx");
    compile(&model, "webgpu", &rewritten);
    let (code, report, out) = verify_json(&model, &rewritten, "webgpu", &[]);
    assert_eq!(code, 0, "{file} rewritten: {}{}", out.stdout, out.stderr);
    let report = report.unwrap();
    let (_, cpu) = placement(&report);
    assert!(
        cpu.iter().any(|(n, _, pinned)| n == node && *pinned),
        "{file}: node {node} not pinned to the CPU: {cpu:?}"
    );
    assert_eq!(
        report["rewritten_runtime"]["settings"][0][1], "cpu(safeify_cpu)",
        "{}",
        out.stdout
    );
}

#[test]
fn resize_linear_rank3_is_not_reproduced_and_is_still_pinned() {
    // microsoft/onnxruntime#18311 (2023): not reproduced on onnxruntime-web 1.30.0, where
    // rank-2/3/5 linear Resize agree with the CPU to ~1e-7.
    case(
        "resize_linear_rank3.onnx",
        "resize-linear-not-4d-on-cpu",
        "resize",
        Original::Faithful {
            atol: "1e-5",
            rtol: "1e-4",
        },
    );
}

#[test]
fn dft_shapes_agree_values_within_wgsl_precision() {
    // microsoft/onnxruntime#24744: the one-off shape is not reproduced on 1.30.0; the values
    // differ from the CPU's by up to ~1e-4 of the output's scale (WGSL sin/cos precision),
    // so the original fails the default tolerance but passes 1e-3.
    case(
        "dft_odd.onnx",
        "dft-on-cpu",
        "irfft",
        Original::Faithful {
            atol: "1e-3",
            rtol: "1e-3",
        },
    );
}

#[test]
fn qmoe_swiglu_gives_wrong_values() {
    case("qmoe_swiglu.onnx", "qmoe-on-cpu", "qmoe", Original::Wrong);
}

#[test]
fn qmoe_silu_fails() {
    case(
        "qmoe_silu.onnx",
        "qmoe-on-cpu",
        "qmoe",
        Original::Fails("only swiglu is supported for WebGPU"),
    );
}

#[test]
fn resize_antialias_fails() {
    case(
        "resize_antialias.onnx",
        "resize-antialias-on-cpu",
        "resize",
        Original::Fails("antialias attribute of Resize operator is NOT implemented"),
    );
}

#[test]
fn batchnorm_training_mode_fails() {
    case(
        "batchnorm_training.onnx",
        "batchnorm-training-on-cpu",
        "bn",
        Original::Fails("BatchNormalization trainingMode is not supported yet"),
    );
}

#[test]
fn conv_with_an_empty_bias_name_fails_and_without_it_runs() {
    // Found here, no rule (docs/webgpu-lab.md): Conv(x, W, "") fails at run time on WebGPU;
    // Conv(x, W) runs. The rx580 output of PP-OCRv4 det ort_all has six such Convs (the
    // unfused NCHWc convolutions without bias).
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    let empty = lab("conv_empty_bias.onnx");
    let (code, _, out) = verify_json(&empty, &empty, "webgpu", &[]);
    assert_eq!(code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("The input shape must not be empty"),
        "{}",
        out.stderr
    );
    // The same function with the bias slot left out: faithful on WebGPU.
    let two = lab("conv_no_bias.onnx");
    let (code, report, out) = verify_json(&empty, &two, "webgpu", &[]);
    assert_eq!(code, 0, "{}{}", out.stdout, out.stderr);
    assert!(count(&report.unwrap(), WEBGPU) >= 1, "{}", out.stdout);
}

#[test]
fn layer_ann_in_a_shape_computation_breaks_session_creation() {
    // Found here, no rule (docs/webgpu-lab.md): with session.layer_assignment_settings, a
    // node pinned by layer_ann inside a shape computation makes onnxruntime-web 1.30.0 fail
    // to create the session (std::bad_alloc); the rx580 output of PP-OCRv4 rec had such a
    // barrier (the barrier by time now avoids those values: tests/web_load.rs). The same pin
    // through forceCpuNodeNames works, and so does ONNX Runtime CPU.
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    let model = lab("layer_ann_shape_path.onnx");
    let (code, _, out) = verify_json(&model, &model, "webgpu", &["--dim", "w=8"]);
    assert_eq!(code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("bad_alloc"), "{}", out.stderr);
    let (code, report, out) = verify_json(
        &model,
        &model,
        "webgpu",
        &["--dim", "w=8", "--webgpu-pins", "force-cpu-node-names"],
    );
    assert_eq!(code, 0, "{}{}", out.stdout, out.stderr);
    let (_, cpu) = placement(&report.unwrap());
    assert!(
        cpu.iter().any(|(n, _, pinned)| n == "barrier" && *pinned),
        "{cpu:?}"
    );
    let (code, _, out) = verify_json(&model, &model, "cpu", &["--dim", "w=8"]);
    assert_eq!(code, 0, "{}{}", out.stdout, out.stderr);
}

#[test]
fn a_pin_that_reads_a_shared_shape_takes_the_shape_and_loads() {
    // Found here (docs/webgpu-lab.md, "Pins in shape computations"): resize-antialias-on-cpu
    // pins a Resize whose sizes come from the input's Shape, which a flattening Reshape reads
    // too. The pin grows over the sizes' arithmetic but not over the shared Shape, so pinned
    // nodes read a value onnxruntime-web keeps on the CPU by itself, and with
    // session.layer_assignment_settings the session could not be created (std::bad_alloc).
    // The cpu pass now pins the Shape too: the output loads and is faithful on WebGPU.
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    let model = lab("resize_antialias_shape_sizes.onnx");
    let dims = ["--dim", "h=16", "--dim", "w=16"];
    let (code, _, out) = verify_json(&model, &model, "webgpu", &dims);
    assert_eq!(code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("antialias attribute of Resize operator is NOT implemented"),
        "{}",
        out.stderr
    );
    let dir = tempfile::tempdir().unwrap();
    let rewritten = dir.path().join("webgpu.onnx");
    compile(&model, "webgpu", &rewritten);
    let (code, report, out) = verify_json(&model, &rewritten, "webgpu", &dims);
    assert!(!out.stderr.contains("bad_alloc"), "{}", out.stderr);
    assert_eq!(code, 0, "{}{}", out.stdout, out.stderr);
    let (_, cpu) = placement(&report.unwrap());
    for node in ["resize", "sizes", "slice_nc", "shape"] {
        assert!(
            cpu.iter().any(|(n, _, pinned)| n == node && *pinned),
            "{node} not pinned to the CPU: {cpu:?}"
        );
    }
    // The same pins given by name to the WebGPU provider: faithful as well.
    let (code, _, out) = verify_json(
        &model,
        &rewritten,
        "webgpu",
        &[&dims[..], &["--webgpu-pins", "force-cpu-node-names"]].concat(),
    );
    assert_eq!(code, 0, "{}{}", out.stdout, out.stderr);
}
