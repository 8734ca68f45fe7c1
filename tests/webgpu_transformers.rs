//! Transformer outputs on the runtime they are meant for: models of the transformer corpus
//! (~/.cache/onnx-safeify/corpus/transformers, fp32; the WebGPU adapter here has no f16) are
//! compiled and verified on onnxruntime-web's WebGPU provider in headless Chromium with their
//! own valid inputs (`M.inputs.npz`), against the original on ONNX Runtime CPU. The survey of
//! the whole corpus is in docs/webgpu-lab.md ("The transformer corpus on WebGPU").
//!
//! `bert_plain` for `coreml` is the case of issue 34: its pins (position-id Gathers fed by
//! `Shape`) read values ONNX Runtime keeps on the CPU by itself, and with
//! session.layer_assignment_settings onnxruntime-web 1.30.0 failed to create the session
//! (`std::bad_alloc`) until the `cpu` pass took those `Shape`s into the pin (src/rewrite/cpu.rs).
//!
//! Needs scripts/setup-runtimes.sh (Chromium, tools/webgpu/node_modules) and the corpus; fails
//! without them unless ONNX_SAFEIFY_ALLOW_MISSING_RUNTIMES=1 / ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1
//! (then it says loudly what it skipped).

mod common;
mod runtimes_support;

use std::path::PathBuf;

use onnx_safeify::verify::RuntimeKind;
use runtimes_support::*;

/// The corpus model `name` and its inputs, or None (skipped loudly) when the corpus is absent.
fn transformer(name: &str) -> Option<(PathBuf, PathBuf)> {
    let dir = common::corpus()?.join("transformers");
    let (model, inputs) = (
        dir.join(format!("{name}.onnx")),
        dir.join(format!("{name}.inputs.npz")),
    );
    assert!(
        model.exists() && inputs.exists(),
        "{} or its inputs missing: rerun scripts/corpus.sh",
        model.display()
    );
    Some((model, inputs))
}

/// Compiles `name` for `target`, verifies it on WebGPU with the corpus inputs and returns the
/// report; the verify must pass, and every node the compile pinned and the runtime lists on
/// the CPU is marked pinned there. Returns (report, pinned nodes on the CPU).
fn loads_and_verifies(name: &str, target: &str) -> Option<(serde_json::Value, usize)> {
    let (model, inputs) = transformer(name)?;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{name}.{target}.onnx"));
    compile(&model, target, &out);
    let (code, report, o) = verify_json(
        &model,
        &out,
        "webgpu",
        &["--inputs", inputs.to_str().unwrap()],
    );
    assert!(
        !o.stderr.contains("bad_alloc"),
        "{name} for {target}: onnxruntime-web cannot create the session: {}",
        o.stderr
    );
    assert_eq!(code, 0, "{name} for {target}: {}{}", o.stdout, o.stderr);
    let report = report.expect("a JSON report");
    assert_eq!(report["passed"], true, "{}", o.stdout);
    assert!(
        count(&report, "WebGpuExecutionProvider") > 0,
        "{name} for {target}: nothing ran on WebGPU: {}",
        o.stdout
    );
    let pinned = placement(&report).1.iter().filter(|c| c.2).count();
    Some((report, pinned))
}

#[test]
fn bert_plain_coreml_output_with_pins_on_shape_values_loads_on_webgpu() {
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    let Some((report, pinned)) = loads_and_verifies("bert_plain", "coreml") else {
        return;
    };
    // The pins are there and the runtime honours them (layer_ann + the session setting).
    assert!(pinned > 0, "no pinned node on the CPU: {report}");
    assert_eq!(
        report["rewritten_runtime"]["settings"][0][1], "cpu(safeify_cpu)",
        "{report}"
    );
}

#[test]
fn bert_plain_rx580_and_webgpu_outputs_verify_on_webgpu() {
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    for target in ["rx580", "webgpu"] {
        if loads_and_verifies("bert_plain", target).is_none() {
            return;
        }
    }
}

#[test]
fn a_gqa_decoder_rx580_output_verifies_on_webgpu() {
    // GroupQueryAttention decomposed for rx580 (past state, rotary): the decomposition's ops
    // all have WebGPU kernels and agree with the CPU.
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    let _ = loads_and_verifies("llama_rope_gqa_decode", "rx580");
}
