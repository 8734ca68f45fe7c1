//! Targets' `device:` sections (the device models of the time estimates, `src/timing.rs`):
//! every built-in GPU target has a complete one whose every citation is an entry of
//! docs/hazards.md; a user's target inherits and overrides it key by key; a bad section is an
//! error with its file, line and column.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use onnx_safeify::rules::{builtin_names, load_target, load_target_from, parse_target_str, MemFs};
use onnx_safeify::timing::DeviceModel;

fn headings() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/hazards.md");
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| h.trim().to_string())
        .collect()
}

#[test]
fn every_built_in_gpu_target_has_a_cited_device_model() {
    let page = headings();
    let mut seen = 0;
    for name in builtin_names() {
        let t = load_target(name).unwrap();
        if name == "none" {
            assert!(t.device.is_empty(), "`none` has no device");
            continue;
        }
        seen += 1;
        let d = DeviceModel::from_spec(&t.device).unwrap_or_else(|e| panic!("target {name}: {e}"));
        assert!(d.peak_f32 > 0.0 && d.memory_bps > 0.0 && d.link_bps > 0.0);
        assert!(t.device.name.is_some(), "target {name} names no device");
        assert!(!t.device.evidence.is_empty(), "target {name}: no citations");
        for e in &t.device.evidence {
            assert!(
                page.contains(e),
                "target {name}: device evidence `{e}` has no `### {e}` entry in docs/hazards.md"
            );
        }
        // A limit where a runtime has one: Windows' TDR for the DirectML, WebGPU, OpenVINO and
        // TensorRT targets; none documented for ROCm and Metal.
        let tdr = !matches!(name, "rocm-migraphx" | "coreml");
        assert_eq!(d.timeout_s, tdr.then_some(2.0), "target {name}");
        if tdr {
            assert!(t
                .device
                .evidence
                .iter()
                .any(|e| e == "Windows TDR: TdrDelay"));
        }
    }
    assert!(seen >= 10, "only {seen} GPU targets");
}

#[test]
fn rx580_overrides_the_directml_device_and_a_user_file_overrides_rx580() {
    let dml = load_target("directml").unwrap().device;
    let rx = load_target("rx580").unwrap().device;
    assert_eq!(rx.tflops_f32, Some(6.175));
    assert_eq!(rx.memory_gbs, Some(256.0));
    assert_eq!(rx.unified, Some(false));
    // Inherited from directml: the TDR limit and the launch overhead.
    assert_eq!(rx.timeout_ms, dml.timeout_ms);
    assert_eq!(rx.launch_us, dml.launch_us);
    let t = parse_target_str(
        "mine.yaml",
        "target: mine\nextends: rx580\ndevice:\n  name: my RX 580 at 1200 MHz\n  tflops_f32: 5.5\n  evidence: [\"my own measurement\"]\n",
    )
    .unwrap();
    assert_eq!(t.device.tflops_f32, Some(5.5));
    assert_eq!(t.device.memory_gbs, Some(256.0));
    assert_eq!(t.device.name.as_deref(), Some("my RX 580 at 1200 MHz"));
    assert!(t.device.evidence.iter().any(|e| e == "my own measurement"));
    assert!(t
        .device
        .evidence
        .iter()
        .any(|e| e == "Device: AMD Radeon RX 580 (Polaris 20)"));
}

#[test]
fn a_bad_device_section_is_an_error_with_its_place() {
    let text = "target: bad\nextends: rx580\ndevice:\n  tflops_f32: -1\n  memory_gb: 10\n  unified: maybe\n  evidence: [x]\n";
    let e = parse_target_str("bad.yaml", text).unwrap_err();
    let found: Vec<(u32, u32, &str)> = e
        .diagnostics
        .iter()
        .map(|d| (d.line, d.col, d.message.as_str()))
        .collect();
    assert!(e.diagnostics.iter().all(|d| d.file == "bad.yaml"), "{e}");
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == 4 && m.contains("`device.tflops_f32` must be a positive number")),
        "{e}"
    );
    assert!(
        found
            .iter()
            .any(|(l, c, m)| (*l, *c) == (5, 3) && m.contains("unknown key `memory_gb`")),
        "{e}"
    );
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == 6 && m.contains("`device.unified` must be true or false")),
        "{e}"
    );
    // Figures without evidence.
    let e = parse_target_str(
        "bare.yaml",
        "target: bare\nextends: none\ndevice:\n  tflops_f32: 1\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("without `evidence`"), "{e}");
    assert_eq!(e.diagnostics[0].line, 4, "{e}");
    // A `--rules` file cannot change the device.
    let fs = MemFs::new().with("extra.yaml", "device:\n  tflops_f32: 1\n  evidence: [x]\n");
    let e = load_target_from(&fs, "rx580", &[PathBuf::from("extra.yaml")]).unwrap_err();
    assert!(
        e.to_string().contains("its device model is the target's"),
        "{e}"
    );
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(common::bin()).args(args).output().unwrap()
}

#[test]
fn the_report_gives_the_cost_of_safety_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let sample = common::sample();
    let out = dir.path().join("out.onnx");
    let report = dir.path().join("r.json");
    let o = run(&[
        sample.to_str().unwrap(),
        "--target",
        "rx580",
        "-o",
        out.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    let summary = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{summary}");
    assert!(
        summary.contains("estimated time on AMD Radeon RX 580 8 GB"),
        "{summary}"
    );
    assert!(summary.contains("slowdown"), "{summary}");
    assert!(summary.contains("of the 2000 ms limit"), "{summary}");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let t = &j["timing"];
    for side in ["input", "output"] {
        let s = &t[side];
        assert!(s["total_ms"].as_f64().unwrap() > 0.0, "{j}");
        assert_eq!(s["limit_ms"].as_f64(), Some(2000.0));
        assert!(s["submissions"].as_u64().unwrap() >= 1);
        let total = s["gpu_ms"].as_f64().unwrap()
            + s["cpu_ms"].as_f64().unwrap()
            + s["crossing_ms"].as_f64().unwrap();
        assert!(
            (total - s["total_ms"].as_f64().unwrap()).abs() < 0.01,
            "{s}"
        );
        assert!(s["meets_limit_with_margin"].is_boolean());
    }
    let slowdown = j["slowdown"].as_f64().unwrap();
    assert_eq!(t["slowdown"].as_f64(), Some(slowdown));
    let ratio =
        t["output"]["total_ms"].as_f64().unwrap() / t["input"]["total_ms"].as_f64().unwrap();
    assert!(
        (slowdown - ratio).abs() < 0.01 * ratio,
        "{slowdown} vs {ratio}"
    );

    // check: the JSON's `timing`, and a line in words.
    let o = run(&[
        "check",
        sample.to_str().unwrap(),
        "--target",
        "rx580",
        "--format",
        "json",
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        j["timing"]["longest_submission_ms"].as_f64().unwrap() > 0.0,
        "{j}"
    );
    let o = run(&["check", sample.to_str().unwrap(), "--target", "rx580"]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.contains("longest GPU submission"), "{text}");
    assert!(text.contains("meets the limit with margin"), "{text}");

    // No device, no time: `none`.
    let o = run(&[
        "check",
        sample.to_str().unwrap(),
        "--target",
        "none",
        "--format",
        "json",
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j.get("timing").is_none(), "{j}");
}

/// The CPU terms of the time model (src/timing.rs): a float convolution that is not pointwise
/// pays for MLAS's column buffer, at the strided rate when its row stride is above one, and a
/// grouped one for each group's calls; a pointwise one does not; every CPU node pays the call's fixed cost on top of its sum of
/// arithmetic and bytes; a GPU keeps the roofline's larger term and no CPU extra.
#[test]
fn the_cpu_model_counts_the_column_buffer_and_the_call() {
    use onnx_safeify::proto::{attribute_proto::AttributeType, AttributeProto, GraphProto};
    use onnx_safeify::timing::{
        node_times, roofline, CPU_CONV_SETUP_S, CPU_GROUP_CLOCKS, CPU_NODE_FLOOR_S,
        IM2COL_CLOCKS_STRIDED, IM2COL_CLOCKS_UNIT_STRIDE,
    };
    let ints = |name: &str, v: &[i64]| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    };
    // x[1,3,64,64] -> 3x3 stride-2 Conv (16 out, pads 1) -> a[1,16,32,32] -> 3x3 depthwise
    // (group 16, pads 1) -> d -> 1x1 Conv -> y.
    let mut first = common::node("Conv", "first", &["x", "w1"], &["a"]);
    first.attribute = vec![
        ints("kernel_shape", &[3, 3]),
        ints("strides", &[2, 2]),
        ints("pads", &[1, 1, 1, 1]),
    ];
    let mut dw = common::node("Conv", "dw", &["a", "w3"], &["d"]);
    dw.attribute = vec![
        ints("kernel_shape", &[3, 3]),
        ints("pads", &[1, 1, 1, 1]),
        common::int_attr("group", 16),
    ];
    let mut point = common::node("Conv", "point", &["d", "w2"], &["y"]);
    point.attribute = vec![ints("kernel_shape", &[1, 1])];
    let graph = GraphProto {
        name: Some("g".into()),
        node: vec![first, dw, point],
        input: vec![common::vi("x", &[1, 3, 64, 64])],
        output: vec![common::vi("y", &[1, 32, 32, 32])],
        initializer: vec![
            common::float_init("w1", &[16, 3, 3, 3], &[0.5; 16 * 27]),
            common::float_init("w2", &[32, 16, 1, 1], &[0.5; 32 * 16]),
            common::float_init("w3", &[16, 1, 3, 3], &[0.5; 16 * 9]),
        ],
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("convs.onnx");
    std::fs::write(&path, common::encode(&common::model(graph))).unwrap();
    let doc = onnx_safeify::load(&path).unwrap();
    let none = std::collections::BTreeMap::new();
    let facts =
        onnx_safeify::analysis::Sizes::for_model(&doc.model, &none, &none).infer(&doc.model);
    let g = &doc.model.graph;
    let cpu = DeviceModel::this_cpu_one_thread();
    let times = node_times(g, &facts, &cpu, &cpu, &|_| true);
    assert_eq!(times.len(), 3);
    let (first, dw, point) = (times[0].2, times[1].2, times[2].2);
    // The first: 2 x 16 x 27 x 1024 operations; its column buffer 3 x 9 x 1024 elements at two
    // clocks each, a clock being 32 float32 operations of the peak.
    assert_eq!(first.flops, 2 * 16 * 27 * 1024);
    let base = roofline(&cpu, first.kind, Some(1), first.flops, first.bytes);
    let column = 27.0 * 1024.0 * IM2COL_CLOCKS_STRIDED * 32.0 / cpu.peak_f32;
    assert!(
        (first.seconds - (base + CPU_CONV_SETUP_S + column)).abs() < 1e-12,
        "{} vs {}",
        first.seconds,
        base + CPU_CONV_SETUP_S + column
    );
    // The roofline on a CPU: the call, plus arithmetic, plus bytes.
    let (ec, em) = (0.75, 0.80);
    let sum = CPU_NODE_FLOOR_S
        + first.flops as f64 / (cpu.peak_f32 * ec)
        + first.bytes as f64 / (cpu.memory_bps * em);
    assert!((base - sum).abs() < 1e-12, "{base} vs {sum}");
    // The depthwise one: one im2col and GEMM call per group (16), a column buffer of
    // 16 x 9 x 1024 elements at half a clock each (stride 1).
    let dbase = roofline(&cpu, dw.kind, Some(1), dw.flops, dw.bytes);
    let clock = 32.0 / cpu.peak_f32;
    let want = dbase
        + CPU_CONV_SETUP_S
        + 16.0 * CPU_GROUP_CLOCKS * clock
        + 16.0 * 9.0 * 1024.0 * IM2COL_CLOCKS_UNIT_STRIDE * clock;
    assert!(
        (dw.seconds - want).abs() < 1e-12,
        "{} vs {want}",
        dw.seconds
    );
    // The pointwise one: no column buffer, only the convolution's setup.
    let pbase = roofline(&cpu, point.kind, Some(1), point.flops, point.bytes);
    assert!((point.seconds - (pbase + CPU_CONV_SETUP_S)).abs() < 1e-12);
    // On a GPU: the roofline's larger term, no CPU extra.
    let gpu = DeviceModel::from_spec(&load_target("rx580").unwrap().device).unwrap();
    let on_gpu = node_times(g, &facts, &gpu, &cpu, &|_| true);
    let t = on_gpu[0].2;
    assert_eq!(
        t.seconds,
        roofline(&gpu, t.kind, Some(1), t.flops, t.bytes),
        "a GPU's estimate has no CPU term"
    );
}
