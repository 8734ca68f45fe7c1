//! `verify --runtime webgpu|openvino`: the rewritten model on onnxruntime-web's WebGPU
//! provider in headless Chromium, or on OpenVINO's CPU plugin, against the original on ONNX
//! Runtime CPU. Needs scripts/setup-runtimes.sh; a missing runtime fails these tests unless
//! ONNX_SAFEIFY_ALLOW_MISSING_RUNTIMES=1 (then they are skipped with a message).
//!
//! The tests of this file take a lock: one helper process at a time, so that the check that
//! none outlives its command is not confused by another test's.

mod common;
mod runtimes_support;

use std::path::PathBuf;
use std::sync::Mutex;

use onnx_safeify::verify::cli::parse_args;
use onnx_safeify::verify::RuntimeKind;
use runtimes_support::*;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const CLS: &str = "real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx";
const REC: &str = "real/rapidocr_onnxruntime__ch_PP-OCRv4_rec_infer.onnx";
const WEBGPU: &str = "WebGpuExecutionProvider";
const CPU: &str = "CPUExecutionProvider";

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn corpus_file(rel: &str) -> Option<PathBuf> {
    common::corpus().map(|c| c.join(rel))
}

fn sample() -> PathBuf {
    common::sample()
}

#[test]
fn runtime_argument_parses_and_defaults_to_cpu() {
    let a = parse_args(["a.onnx", "b.onnx"]).unwrap();
    assert_eq!(a.runtime, RuntimeKind::Cpu);
    assert_eq!(a.timeout, 300);
    let a = parse_args(["a.onnx", "b.onnx", "--runtime", "webgpu", "--timeout", "20"]).unwrap();
    assert_eq!(a.runtime, RuntimeKind::Webgpu);
    assert_eq!(a.to_options().unwrap().runtime_timeout.as_secs(), 20);
    assert_eq!(
        parse_args(["a.onnx", "b.onnx", "--runtime", "openvino"])
            .unwrap()
            .runtime,
        RuntimeKind::Openvino
    );
    assert!(parse_args(["a.onnx", "b.onnx", "--runtime", "cuda"]).is_err());
    // Through the binary: an unknown runtime is a usage error (exit 2), no panic.
    let s = sample();
    let o = run(
        &[
            "verify",
            s.to_str().unwrap(),
            s.to_str().unwrap(),
            "--runtime",
            "metal",
        ],
        &[],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
}

#[test]
fn missing_runtimes_exit_2_and_name_the_setup_script() {
    let s = sample();
    let s = s.to_str().unwrap();
    // No Chromium.
    let o = run(
        &["verify", s, s, "--runtime", "webgpu"],
        &[("ONNX_SAFEIFY_CHROMIUM", "/nonexistent/chromium")],
    );
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("scripts/setup-runtimes.sh"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("Chromium"), "{}", o.stderr);
    assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
    // No harness.
    let o = run(
        &["verify", s, s, "--runtime", "webgpu"],
        &[("ONNX_SAFEIFY_WEBGPU_HARNESS", "/nonexistent/harness")],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(
        o.stderr.contains("scripts/setup-runtimes.sh"),
        "{}",
        o.stderr
    );
    // No venv with openvino (ONNX Runtime itself is found through ORT_DYLIB_PATH when set).
    if std::env::var_os("ORT_DYLIB_PATH").is_some() {
        let o = run(
            &["verify", s, s, "--runtime", "openvino"],
            &[("ONNX_SAFEIFY_VENV", "/nonexistent/venv")],
        );
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert!(
            o.stderr.contains("scripts/setup-runtimes.sh"),
            "{}",
            o.stderr
        );
    }
}

#[test]
fn partition_manifest_is_refused_for_other_runtimes() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample();
    let manifest = dir.path().join("p.manifest.yaml");
    let o = run(
        &[
            s.to_str().unwrap(),
            "--target",
            "rx580",
            "--cpu-subgraphs",
            "partition",
            "-o",
            manifest.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = run(
        &[
            "verify",
            s.to_str().unwrap(),
            manifest.to_str().unwrap(),
            "--runtime",
            "webgpu",
        ],
        &[],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("is a partition manifest"), "{}", o.stderr);
}

/// cls for rx580 with one more rule that pins its squeeze-excite pools to the CPU: at cls's
/// size rx580's own rules pin nothing (its barrier by time cuts nothing there), and these tests
/// are about pinned nodes on a runtime.
fn compile_pinned(model: &std::path::Path, out: &std::path::Path, dir: &std::path::Path) {
    let rules = dir.join("pin-pools.yaml");
    std::fs::write(
        &rules,
        "rules:\n  - id: pin-pools\n    why: test\n    evidence: []\n    match: {op: GlobalAveragePool}\n    action: cpu\n",
    )
    .unwrap();
    let o = run(
        &[
            model.to_str().unwrap(),
            "--target",
            "rx580",
            "--rules",
            rules.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.code, 0, "compile {}: {}", model.display(), o.stderr);
}

#[test]
fn cls_and_its_rx580_output_on_webgpu() {
    let _g = lock();
    let Some(cls) = corpus_file(CLS) else { return };
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    // The rx580 output (unfused, split, and pins: see `compile_pinned`) on WebGPU: faithful,
    // and the CPU nodes are exactly the pinned ones.
    let dir = tempfile::tempdir().unwrap();
    let rx = dir.path().join("cls.rx580.onnx");
    compile_pinned(&cls, &rx, dir.path());
    let (code, report, out) = verify_json(&cls, &rx, "webgpu", &["--runs", "2"]);
    assert_eq!(code, 0, "{}{}", out.stdout, out.stderr);
    let report = report.unwrap();
    let desc = report["rewritten_runtime"]["description"].as_str().unwrap();
    assert!(desc.contains("onnxruntime-web 1.30.0"), "{desc}");
    let (_, cpu) = placement(&report);
    assert!(!cpu.is_empty(), "{}", out.stdout);
    // The squeeze-excite pools pinned; nothing else on the CPU (cls as published runs wholly
    // on WebGPU).
    assert_eq!(count(&report, CPU), cpu.len() as u64, "{}", out.stdout);
    assert!(
        cpu.iter().all(|(_, _, pinned)| *pinned),
        "nodes on the CPU that were not pinned: {cpu:?}"
    );
    assert!(count(&report, WEBGPU) > 100, "{}", out.stdout);
    assert_eq!(report["runs"].as_array().unwrap().len(), 2);
    // The text report names the placement.
    let o = run(
        &[
            "verify",
            cls.to_str().unwrap(),
            rx.to_str().unwrap(),
            "--runtime",
            "webgpu",
        ],
        &[],
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("placement: "), "{}", o.stdout);
    assert!(o.stdout.contains("pinned by layer_ann"), "{}", o.stdout);
    assert!(tagged_processes().is_empty(), "{:?}", tagged_processes());
}

#[test]
fn rec_rx580_output_on_webgpu() {
    let _g = lock();
    let Some(rec) = corpus_file(REC) else { return };
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rx = dir.path().join("rec.rx580.onnx");
    compile(&rec, "rx580", &rx);
    // With the target's own setting (session.layer_assignment_settings) onnxruntime-web
    // 1.30.0 cannot create this session: some barriers sit in shape computations
    // (docs/webgpu-lab.md; tests/webgpu_lab.rs reproduces that on a small model). The same
    // pins through the WebGPU provider's forceCpuNodeNames: faithful.
    let (code, report, out) = verify_json(
        &rec,
        &rx,
        "webgpu",
        &["--dim", "x[3]=160", "--webgpu-pins", "force-cpu-node-names"],
    );
    assert_eq!(code, 0, "{}{}", out.stdout, out.stderr);
    let report = report.unwrap();
    assert!(count(&report, WEBGPU) > 100, "{}", out.stdout);
    let (_, cpu) = placement(&report);
    let pinned = cpu.iter().filter(|(_, _, p)| *p).count();
    // Every node the compile pinned runs on the CPU (82 at the rule's default sizes today).
    let doc = onnx_safeify::load(&rx).unwrap();
    let g = &doc.model.graph;
    let in_model = g
        .order
        .iter()
        .filter(|&&n| g.node(n).metadata("layer_ann").is_some())
        .count();
    assert!(in_model > 0, "the rx580 output pins nothing");
    assert_eq!(pinned, in_model, "pinned nodes on the CPU: {cpu:?}");
}

#[test]
fn a_wrong_rewrite_is_caught_on_webgpu() {
    let _g = lock();
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    // x -> Relu against x -> Sigmoid: must fail (exit 1), on WebGPU as on the CPU.
    let dir = tempfile::tempdir().unwrap();
    let mut g = common::tiny_graph();
    let a = dir.path().join("relu.onnx");
    std::fs::write(&a, common::encode(&common::model(g.clone()))).unwrap();
    g.node[0].op_type = Some("Sigmoid".into());
    let b = dir.path().join("sigmoid.onnx");
    std::fs::write(&b, common::encode(&common::model(g))).unwrap();
    let (code, report, out) = verify_json(&a, &b, "webgpu", &[]);
    assert_eq!(code, 1, "{}{}", out.stdout, out.stderr);
    assert_eq!(report.unwrap()["passed"], false);
}

#[test]
fn timeout_stops_chromium_and_leaves_no_process() {
    let _g = lock();
    let Some(cls) = corpus_file(CLS) else { return };
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    // The harness's own deadline (the browser is closed by the harness).
    let start = std::time::Instant::now();
    let (code, _, out) = verify_json(&cls, &cls, "webgpu", &["--timeout", "2"]);
    assert_eq!(code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("did not finish within 2 s") || out.stderr.contains("no result within"),
        "{}",
        out.stderr
    );
    assert!(start.elapsed().as_secs() < 30, "{:?}", start.elapsed());
    assert!(
        tagged_processes().is_empty(),
        "processes outlived the command: {:?}",
        tagged_processes()
    );
}

#[test]
fn a_hung_helper_and_its_detached_children_are_killed() {
    let _g = lock();
    if !ready(RuntimeKind::Webgpu) {
        return;
    }
    // A harness that ignores SIGTERM, never answers, and leaves a child in a process group
    // of its own (as Playwright does with Chromium): the command must still end at the
    // deadline and nothing it started may survive.
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path();
    for pkg in ["onnxruntime-web", "playwright-core"] {
        std::fs::create_dir_all(h.join("node_modules").join(pkg)).unwrap();
        std::fs::write(h.join("node_modules").join(pkg).join("package.json"), "{}").unwrap();
    }
    std::fs::write(
        h.join("run.mjs"),
        "import { spawn } from 'node:child_process';
         spawn('sleep', ['600'], { detached: true, stdio: 'ignore' }).unref();
         process.on('SIGTERM', () => {});
         setInterval(() => {}, 1000);
",
    )
    .unwrap();
    let fake_chromium = h.join("chromium");
    std::fs::write(
        &fake_chromium,
        "#!/bin/sh
",
    )
    .unwrap();
    let s = sample();
    let s = s.to_str().unwrap();
    let start = std::time::Instant::now();
    let o = run(
        &["verify", s, s, "--runtime", "webgpu", "--timeout", "3"],
        &[
            ("ONNX_SAFEIFY_WEBGPU_HARNESS", h.to_str().unwrap()),
            ("ONNX_SAFEIFY_CHROMIUM", fake_chromium.to_str().unwrap()),
        ],
    );
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("did not finish within 3 s"),
        "{}",
        o.stderr
    );
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
    assert!(
        tagged_processes().is_empty(),
        "processes outlived the command: {:?}",
        tagged_processes()
    );
}

#[test]
fn cls_rx580_output_on_openvino() {
    let _g = lock();
    let Some(cls) = corpus_file(CLS) else { return };
    if !ready(RuntimeKind::Openvino) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rx = dir.path().join("cls.rx580.onnx");
    compile_pinned(&cls, &rx, dir.path());
    let (code, report, out) = verify_json(&cls, &rx, "openvino", &["--runs", "2"]);
    assert_eq!(code, 0, "{}{}", out.stdout, out.stderr);
    let report = report.unwrap();
    let desc = report["rewritten_runtime"]["description"].as_str().unwrap();
    assert!(desc.contains("OpenVINO 2026.4.1"), "{desc}");
    assert!(desc.contains("INFERENCE_PRECISION_HINT=f32"), "{desc}");
    // layer_ann means nothing to OpenVINO: said so.
    assert!(
        out.stdout.contains("OpenVINO ignores them"),
        "{}",
        out.stdout
    );
    // A wrong model is caught there too.
    let mut g = common::tiny_graph();
    let a = dir.path().join("relu.onnx");
    std::fs::write(&a, common::encode(&common::model(g.clone()))).unwrap();
    g.node[0].op_type = Some("Sigmoid".into());
    let b = dir.path().join("sigmoid.onnx");
    std::fs::write(&b, common::encode(&common::model(g))).unwrap();
    let (code, _, out) = verify_json(&a, &b, "openvino", &[]);
    assert_eq!(code, 1, "{}{}", out.stdout, out.stderr);
}
