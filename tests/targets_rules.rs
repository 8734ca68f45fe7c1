//! The new targets' rules on small hand-built models and on the corpus' contrib models: each
//! rule fires where its evidence says and nowhere else, the CLI output passes the target's own
//! `check`, compiling it again changes nothing, and ONNX Runtime computes the same outputs
//! (float16 models within float16 tolerances: the fences compute in float32).

mod common;
mod verify_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use onnx_safeify::proto::{
    attribute_proto::AttributeType, AttributeProto, ModelProto, OperatorSetIdProto, TensorProto,
};
use onnx_safeify::verify::{verify_models, Tolerance, VerifyOptions};
use prost::Message;
use verify_support::{attr_i, node, value_info, FLOAT, INT64};

const FLOAT16: i32 = 10;

fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(AttributeType::Ints as i32),
        ..Default::default()
    }
}

fn attr_s(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec().into()),
        r#type: Some(AttributeType::String as i32),
        ..Default::default()
    }
}

/// A float16 initializer of `dims` filled by a small deterministic pattern in [-scale, scale].
fn f16_init(name: &str, dims: &[i64], scale: f32, seed: u32) -> TensorProto {
    let n: i64 = dims.iter().product();
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(12_345);
    let raw: Vec<u8> = (0..n)
        .flat_map(|_| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let u = ((state >> 8) & 0xffff) as f32 / 65_535.0;
            let v = (u * 2.0 - 1.0) * scale;
            onnx_safeify::runtime::run::dtype::f32_to_f16(v).to_le_bytes()
        })
        .collect();
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(FLOAT16),
        raw_data: Some(raw.into()),
        ..Default::default()
    }
}

fn i64_init(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(INT64),
        raw_data: Some(
            values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        ),
        ..Default::default()
    }
}

fn with_opset(mut m: ModelProto, opset: i64, ms: bool) -> ModelProto {
    m.opset_import = vec![OperatorSetIdProto {
        domain: Some(String::new()),
        version: Some(opset),
    }];
    if ms {
        m.opset_import.push(OperatorSetIdProto {
            domain: Some("com.microsoft".into()),
            version: Some(1),
        });
    }
    m
}

fn write(dir: &Path, name: &str, m: &ModelProto) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

/// A float16 conv net with the activations the evidence names: Conv -> Swish (Sigmoid, Mul) ->
/// depthwise Conv -> Mish (Softplus, Tanh, Mul) -> ConvTranspose -> Add -> Mish (one op).
fn fp16_net() -> ModelProto {
    let mut nodes = vec![
        node(
            "Conv",
            &["x", "w1", "b1"],
            &["c1"],
            vec![attr_ints("pads", &[1, 1, 1, 1])],
        ),
        node("Sigmoid", &["c1"], &["s1"], vec![]),
        node("Mul", &["c1", "s1"], &["swish"], vec![]),
        node(
            "Conv",
            &["swish", "wd"],
            &["dw"],
            vec![attr_i("group", 8), attr_ints("pads", &[1, 1, 1, 1])],
        ),
        node("Softplus", &["dw"], &["sp"], vec![]),
        node("Tanh", &["sp"], &["th"], vec![]),
        node("Mul", &["dw", "th"], &["mish"], vec![]),
        node(
            "ConvTranspose",
            &["mish", "wt"],
            &["up"],
            vec![
                attr_ints("strides", &[2, 2]),
                attr_ints("kernel_shape", &[2, 2]),
            ],
        ),
        node("Add", &["up", "bias"], &["sum"], vec![]),
        node("Mish", &["sum"], &["y"], vec![]),
    ];
    for (i, n) in nodes.iter_mut().enumerate() {
        n.name = Some(format!("n{i}_{}", n.op_type.as_deref().unwrap_or("")));
    }
    let m = verify_support::model(
        nodes,
        vec![value_info("x", FLOAT16, Some(&[1, 3, 8, 8]))],
        vec![value_info("y", FLOAT16, Some(&[1, 4, 16, 16]))],
        vec![
            f16_init("w1", &[8, 3, 3, 3], 0.4, 1),
            f16_init("b1", &[8], 0.1, 2),
            f16_init("wd", &[8, 1, 3, 3], 0.5, 3),
            f16_init("wt", &[8, 4, 2, 2], 0.4, 4),
            f16_init("bias", &[1, 4, 1, 1], 0.2, 5),
        ],
    );
    with_opset(m, 18, false)
}

fn cli(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(common::bin())
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Compile with the CLI, assert exit 0, `check` exit 0 and a byte-identical second compile;
/// returns the output path.
fn compile_clean(model: &Path, target: &str, dir: &Path) -> PathBuf {
    let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
    let out = dir.join(format!("{stem}.{target}.onnx"));
    let again = dir.join(format!("{stem}.{target}.again.onnx"));
    let o = cli(&[
        model.as_os_str(),
        "--target".as_ref(),
        target.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(
        o.status.success(),
        "{target} on {stem}:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let c = cli(&[
        "check".as_ref(),
        out.as_os_str(),
        "--target".as_ref(),
        target.as_ref(),
    ]);
    assert_eq!(
        c.status.code(),
        Some(0),
        "{target}: check on the output of {stem}:\n{}",
        String::from_utf8_lossy(&c.stdout)
    );
    let o2 = cli(&[
        out.as_os_str(),
        "--target".as_ref(),
        target.as_ref(),
        "-o".as_ref(),
        again.as_os_str(),
    ]);
    assert!(o2.status.success());
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(&again).unwrap(),
        "{target}: a second compile of {stem} changed it"
    );
    out
}

/// `check --format json` findings as (rule, node) pairs.
fn findings(model: &Path, target: &str) -> Vec<(String, String)> {
    let c = cli(&[
        "check".as_ref(),
        model.as_os_str(),
        "--target".as_ref(),
        target.as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap_or_else(|e| {
        panic!(
            "check output is not JSON ({e}):\n{}{}",
            String::from_utf8_lossy(&c.stdout),
            String::from_utf8_lossy(&c.stderr)
        )
    });
    let mut out: Vec<(String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["rule"].as_str().unwrap().to_string(),
                f["node"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    v.sort();
    v
}

fn read(path: &Path) -> ModelProto {
    ModelProto::decode(std::fs::read(path).unwrap().as_slice()).unwrap()
}

/// Names of the original nodes that now compute in float32: a rewritten node (metadata
/// `onnx_safeify.origin`) that reads a Cast to float32. (The rule stamp is not used: a fenced
/// node that a `cpu` rule pins afterwards carries the pinning rule's stamp.)
fn fenced_origins(m: &ModelProto) -> Vec<String> {
    let g = m.graph.as_ref().unwrap();
    let cast_to_f32: std::collections::HashSet<&str> = g
        .node
        .iter()
        .filter(|n| {
            n.op_type.as_deref() == Some("Cast")
                && n.attribute
                    .iter()
                    .any(|a| a.name.as_deref() == Some("to") && a.i == Some(FLOAT as i64))
        })
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    // A fenced node reads a Cast to float32, or (adjacent fenced nodes pass float32 on) the
    // output of another node the fence wrote.
    let fence_made = |n: &&onnx_safeify::proto::NodeProto| {
        n.metadata_props.iter().any(|e| {
            e.key.as_deref() == Some("onnx_safeify.rule")
                && e.value.as_deref() == Some("fp32-fence")
        })
    };
    let mut out: Vec<String> = g
        .node
        .iter()
        .filter(|n| n.op_type.as_deref() != Some("Cast"))
        .filter(|n| n.input.iter().any(|i| cast_to_f32.contains(i.as_str())) || fence_made(n))
        .filter_map(|n| {
            n.metadata_props
                .iter()
                .find(|e| e.key.as_deref() == Some("onnx_safeify.origin"))
                .and_then(|e| e.value.clone())
        })
        .collect();
    out.sort();
    out
}

fn fp16_tolerance() -> VerifyOptions {
    // Both sides end in float16; the fenced side rounds once per node instead of per
    // operation inside it. A few float16 steps at the outputs' magnitude (seen: 4.9e-4).
    VerifyOptions {
        tolerance: Tolerance {
            rtol: 1e-2,
            atol: 2e-3,
        },
        runs: 2,
        ..VerifyOptions::default()
    }
}

#[test]
fn fp32_fences_on_a_float16_net_compute_the_same_function() {
    if !verify_support::runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = write(dir.path(), "fp16_net.onnx", &fp16_net());
    let all: Vec<String> = (0..10)
        .map(|i| fp16_net().graph.unwrap().node[i].name.clone().unwrap())
        .collect();
    let expect = |idx: &[usize]| -> Vec<String> {
        let mut v: Vec<String> = idx.iter().map(|&i| all[i].clone()).collect();
        v.sort();
        v
    };
    for (target, fenced) in [
        // Every float16 arithmetic node.
        ("intel-gen9", expect(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9])),
        // Mish and Swish parts only (the Muls that close them included).
        ("openvino-gpu", expect(&[1, 2, 4, 5, 6, 9])),
        // Convolutions only.
        ("rocm-migraphx", expect(&[0, 3, 7])),
    ] {
        let before = findings(&src, target);
        let mut fired: Vec<String> = before
            .iter()
            .filter(|(r, _)| r == "fp32-fence")
            .map(|(_, n)| n.clone())
            .collect();
        fired.sort();
        assert_eq!(fired, fenced, "{target}: nodes the fence matches");
        let out = compile_clean(&src, target, dir.path());
        let m = read(&out);
        assert_eq!(fenced_origins(&m), fenced, "{target}: nodes fenced");
        // The interface is unchanged: still float16 in and out.
        let g = m.graph.as_ref().unwrap();
        for v in g.input.iter().chain(g.output.iter()) {
            let t = v.r#type.as_ref().unwrap();
            let Some(onnx_safeify::proto::type_proto::Value::TensorType(tt)) = &t.value else {
                panic!()
            };
            assert_eq!(tt.elem_type, Some(FLOAT16), "{target}: {:?}", v.name);
        }
        common::onnx_check(&out);
        let report = verify_models(&src, &out, &fp16_tolerance()).unwrap();
        assert!(report.passed(), "{target}:\n{}", report.to_text());
        assert!(
            report.warnings.is_empty(),
            "{target}: {:?}",
            report.warnings
        );
    }
}

#[test]
fn fp32_fences_leave_float32_models_alone() {
    for target in ["intel-gen9", "openvino-gpu", "rocm-migraphx"] {
        let f = findings(&common::sample(), target);
        assert!(f.iter().all(|(r, _)| r != "fp32-fence"), "{target}: {f:?}");
    }
}

#[test]
fn rdna2_unfuses_rms_norms_in_both_domains() {
    if !verify_support::runtime_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // SimplifiedLayerNormalization: ONNX Runtime's default-domain RMS norm.
    let mut n = node(
        "SimplifiedLayerNormalization",
        &["x", "scale"],
        &["y"],
        vec![],
    );
    n.attribute.push(AttributeProto {
        name: Some("epsilon".into()),
        f: Some(1e-5),
        r#type: Some(AttributeType::Float as i32),
        ..Default::default()
    });
    n.attribute.push(attr_i("axis", -1));
    let m = verify_support::model(
        vec![n],
        vec![value_info("x", FLOAT, Some(&[2, 5, 16]))],
        vec![value_info("y", FLOAT, Some(&[2, 5, 16]))],
        vec![verify_support::f32_initializer(
            "scale",
            &[16],
            &(0..16).map(|i| 0.5 + i as f32 / 16.0).collect::<Vec<_>>(),
        )],
    );
    let rms = write(dir.path(), "rms.onnx", &m);
    let mut models = vec![rms];
    if let Some(p) = verify_support::corpus_file("contrib/SkipSimplifiedLayerNormalization.onnx") {
        models.push(p);
    }
    for src in models {
        let f = findings(&src, "rdna2");
        assert!(
            !f.is_empty() && f.iter().all(|(r, _)| r == "unfuse-simplified-layernorm"),
            "{f:?}"
        );
        let out = compile_clean(&src, "rdna2", dir.path());
        let g = read(&out).graph.unwrap();
        assert!(
            g.node.iter().all(|n| !n
                .op_type
                .as_deref()
                .unwrap_or("")
                .contains("SimplifiedLayerNormalization")),
            "{}",
            src.display()
        );
        let report = verify_models(&src, &out, &VerifyOptions::default()).unwrap();
        assert!(report.passed(), "{}", report.to_text());
    }
}

#[test]
fn rocm_migraphx_unfuses_skip_layer_norm_and_refuses_what_it_cannot_unfuse() {
    let dir = tempfile::tempdir().unwrap();
    if let Some(src) = verify_support::corpus_file("contrib/SkipLayerNormalization.onnx") {
        if verify_support::runtime_available() {
            let out = compile_clean(&src, "rocm-migraphx", dir.path());
            let g = read(&out).graph.unwrap();
            assert!(g
                .node
                .iter()
                .all(|n| n.domain.as_deref().unwrap_or("").is_empty()));
            let report = verify_models(&src, &out, &VerifyOptions::default()).unwrap();
            assert!(report.passed(), "{}", report.to_text());
        }
    }
    // A contrib op with no decomposition (WordConvEmbedding; EmbedLayerNormalization, the other
    // op of the MIGraphX reports, has one now) falls back to the CPU (the target's default), and
    // the report says so and why.
    let mut n = node(
        "WordConvEmbedding",
        &["ids", "word", "pos", "gamma"],
        &["out", "mask"],
        vec![],
    );
    n.domain = Some("com.microsoft".into());
    let m = with_opset(
        verify_support::model(
            vec![n],
            vec![value_info("ids", 6, Some(&[1, 4]))],
            vec![
                value_info("out", FLOAT, Some(&[1, 4, 8])),
                value_info("mask", 6, Some(&[1])),
            ],
            vec![
                verify_support::f32_initializer("word", &[10, 8], &[0.1; 80]),
                verify_support::f32_initializer("pos", &[4, 8], &[0.2; 32]),
                verify_support::f32_initializer("gamma", &[8], &[1.0; 8]),
                verify_support::f32_initializer("beta", &[8], &[0.0; 8]),
            ],
        ),
        17,
        true,
    );
    let src = write(dir.path(), "embed.onnx", &m);
    let out = dir.path().join("embed.rocm.onnx");
    let json = dir.path().join("embed.json");
    let o = cli(&[
        src.as_os_str(),
        "--target".as_ref(),
        "rocm-migraphx".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        "--report".as_ref(),
        json.as_os_str(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let fb = &report["fallbacks"][0];
    assert_eq!(fb["rule"], "unfuse-contrib");
    assert_eq!(fb["op"], "com.microsoft::WordConvEmbedding");
    assert_eq!(fb["cause"], "no-rewrite");
    assert_eq!(fb["to"], "cpu");
    assert!(report["remaining"].as_array().unwrap().is_empty());
    let g = read(&out).graph.unwrap();
    let embed = g
        .node
        .iter()
        .find(|n| n.op_type.as_deref() == Some("WordConvEmbedding"))
        .unwrap();
    assert!(embed.metadata_props.iter().any(
        |p| p.key.as_deref() == Some("layer_ann") && p.value.as_deref() == Some("safeify_cpu")
    ));
    // The output is clean for the target.
    let o = cli(&[
        "check".as_ref(),
        out.as_os_str(),
        "--target".as_ref(),
        "rocm-migraphx".as_ref(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn rocm_migraphx_pins_conv_transpose_of_ppocr_det() {
    let Some(det) =
        verify_support::corpus_file("real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx")
    else {
        return;
    };
    let f = findings(&det, "rocm-migraphx");
    assert_eq!(
        f,
        pairs(&[
            ("cpu-convtranspose", "p2o.ConvTranspose.0"),
            ("cpu-convtranspose", "p2o.ConvTranspose.2"),
        ])
    );
}

/// Resize (linear on rank 3, linear on rank 4, nearest on rank 3), DFT, NonZero.
fn webgpu_probe() -> ModelProto {
    let nodes = vec![
        node(
            "Resize",
            &["seq", "", "s3"],
            &["seq_up"],
            vec![attr_s("mode", "linear")],
        ),
        node(
            "Resize",
            &["img", "", "s4"],
            &["img_up"],
            vec![attr_s("mode", "linear")],
        ),
        node(
            "Resize",
            &["seq", "", "s3"],
            &["seq_near"],
            vec![attr_s("mode", "nearest")],
        ),
        node(
            "DFT",
            &["sig", "", "axis"],
            &["spec"],
            vec![attr_i("onesided", 1)],
        ),
    ];
    let mut m = verify_support::model(
        nodes,
        vec![
            value_info("seq", FLOAT, Some(&[1, 4, 8])),
            value_info("img", FLOAT, Some(&[1, 2, 4, 4])),
            value_info("sig", FLOAT, Some(&[1, 16, 1])),
        ],
        vec![
            value_info("seq_up", FLOAT, Some(&[1, 4, 16])),
            value_info("img_up", FLOAT, Some(&[1, 2, 8, 8])),
            value_info("seq_near", FLOAT, Some(&[1, 4, 16])),
            value_info("spec", FLOAT, Some(&[1, 9, 2])),
        ],
        vec![
            verify_support::f32_initializer("s3", &[3], &[1.0, 1.0, 2.0]),
            verify_support::f32_initializer("s4", &[4], &[1.0, 1.0, 2.0, 2.0]),
            i64_init("axis", &[], &[1]),
        ],
    );
    m = with_opset(m, 20, false);
    m
}

#[test]
fn webgpu_pins_the_reported_patterns_only() {
    let dir = tempfile::tempdir().unwrap();
    let src = write(dir.path(), "webgpu_probe.onnx", &webgpu_probe());
    assert_eq!(
        findings(&src, "webgpu"),
        pairs(&[
            ("dft-on-cpu", "DFT_spec"),
            ("resize-linear-not-4d-on-cpu", "Resize_seq_up"),
        ])
    );
    let out = compile_clean(&src, "webgpu", dir.path());
    if verify_support::runtime_available() {
        let report = verify_models(&src, &out, &VerifyOptions::default()).unwrap();
        assert!(report.passed(), "{}", report.to_text());
        assert!(
            report.to_text().contains("cpu(safeify_cpu)"),
            "{}",
            report.to_text()
        );
    }
    // QMoE: matched by domain and op (not run: the test only needs the match).
    let mut q = node(
        "QMoE",
        &["h", "router", "w1", "s1", "", "w2", "s2"],
        &["out"],
        vec![attr_i("k", 1), attr_i("expert_weight_bits", 8)],
    );
    q.domain = Some("com.microsoft".into());
    let m = with_opset(
        verify_support::model(
            vec![q],
            vec![
                value_info("h", FLOAT, Some(&[2, 8])),
                value_info("router", FLOAT, Some(&[2, 2])),
                value_info("w1", 2, Some(&[2, 16, 8])),
                value_info("s1", FLOAT, Some(&[2, 16])),
                value_info("w2", 2, Some(&[2, 8, 16])),
                value_info("s2", FLOAT, Some(&[2, 8])),
            ],
            vec![value_info("out", FLOAT, Some(&[2, 8]))],
            vec![],
        ),
        17,
        true,
    );
    let qsrc = write(dir.path(), "qmoe.onnx", &m);
    assert_eq!(
        findings(&qsrc, "webgpu"),
        pairs(&[("qmoe-on-cpu", "QMoE_out")])
    );
}

#[test]
fn tensorrt_pins_data_dependent_ops() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = vec![
        node("NonZero", &["mask"], &["idx"], vec![]),
        node(
            "NonMaxSuppression",
            &["boxes", "scores", "max_out"],
            &["keep"],
            vec![],
        ),
        node("Relu", &["scores"], &["relu"], vec![]),
    ];
    let m = with_opset(
        verify_support::model(
            nodes,
            vec![
                value_info("mask", FLOAT, Some(&[3, 4])),
                value_info("boxes", FLOAT, Some(&[1, 6, 4])),
                value_info("scores", FLOAT, Some(&[1, 1, 6])),
            ],
            vec![
                value_info("idx", INT64, None),
                value_info("keep", INT64, None),
                value_info("relu", FLOAT, Some(&[1, 1, 6])),
            ],
            vec![i64_init("max_out", &[1], &[3])],
        ),
        17,
        false,
    );
    let src = write(dir.path(), "dds.onnx", &m);
    assert_eq!(
        findings(&src, "tensorrt"),
        pairs(&[
            ("cpu-data-dependent", "NonMaxSuppression_keep"),
            ("cpu-data-dependent", "NonZero_idx"),
        ])
    );
    let out = compile_clean(&src, "tensorrt", dir.path());
    if verify_support::runtime_available() {
        let report = verify_models(&src, &out, &VerifyOptions::default()).unwrap();
        assert!(report.passed(), "{}", report.to_text());
    }
}

#[test]
fn coreml_pins_only_dynamically_shaped_matmuls() {
    let dir = tempfile::tempdir().unwrap();
    let dynamic = onnx_safeify::proto::ValueInfoProto {
        name: Some("a".into()),
        r#type: Some(onnx_safeify::proto::TypeProto {
            value: Some(onnx_safeify::proto::type_proto::Value::TensorType(
                onnx_safeify::proto::type_proto::Tensor {
                    elem_type: Some(FLOAT),
                    shape: Some(onnx_safeify::proto::TensorShapeProto {
                        dim: vec![
                            onnx_safeify::proto::tensor_shape_proto::Dimension {
                                value: Some(
                                    onnx_safeify::proto::tensor_shape_proto::dimension::Value::DimParam(
                                        "batch".into(),
                                    ),
                                ),
                                denotation: None,
                            },
                            onnx_safeify::proto::tensor_shape_proto::Dimension {
                                value: Some(
                                    onnx_safeify::proto::tensor_shape_proto::dimension::Value::DimValue(8),
                                ),
                                denotation: None,
                            },
                        ],
                    }),
                },
            )),
            denotation: None,
        }),
        ..Default::default()
    };
    let m = verify_support::model(
        vec![
            node("MatMul", &["a", "w"], &["ya"], vec![]),
            node("MatMul", &["b", "w"], &["yb"], vec![]),
        ],
        vec![dynamic, value_info("b", FLOAT, Some(&[2, 8]))],
        vec![
            value_info("ya", FLOAT, None),
            value_info("yb", FLOAT, Some(&[2, 4])),
        ],
        vec![verify_support::f32_initializer("w", &[8, 4], &[0.25; 32])],
    );
    let src = write(dir.path(), "matmuls.onnx", &m);
    assert_eq!(
        findings(&src, "coreml"),
        pairs(&[("dynamic-matmul-on-cpu", "MatMul_ya")])
    );
    let out = compile_clean(&src, "coreml", dir.path());
    if verify_support::runtime_available() {
        let report = verify_models(&src, &out, &VerifyOptions::default()).unwrap();
        assert!(report.passed(), "{}", report.to_text());
    }
}

/// A float16 chain of depthwise Convs with a Relu alone between two of them and two Relus in a
/// row between two others: Conv -> Relu -> Conv -> Relu -> Relu -> Conv -> Tanh, 72 channels
/// (rx580 splits each Conv).
fn fp16_relu_chain() -> ModelProto {
    let dw = |x: &str, w: &str, y: &str| {
        node(
            "Conv",
            &[x, w],
            &[y],
            vec![attr_i("group", 72), attr_ints("pads", &[1, 1, 1, 1])],
        )
    };
    let mut nodes = vec![
        dw("x", "w1", "c1"),
        node("Relu", &["c1"], &["r1"], vec![]),
        dw("r1", "w2", "c2"),
        node("Relu", &["c2"], &["r2"], vec![]),
        node("Relu", &["r2"], &["r3"], vec![]),
        dw("r3", "w3", "c3"),
        node("Tanh", &["c3"], &["y"], vec![]),
    ];
    for (i, n) in nodes.iter_mut().enumerate() {
        n.name = Some(format!("n{i}_{}", n.op_type.as_deref().unwrap_or("")));
    }
    let m = verify_support::model(
        nodes,
        vec![value_info("x", FLOAT16, Some(&[1, 72, 8, 8]))],
        vec![value_info("y", FLOAT16, Some(&[1, 72, 8, 8]))],
        vec![
            f16_init("w1", &[72, 1, 3, 3], 0.6, 11),
            f16_init("w2", &[72, 1, 3, 3], 0.6, 12),
            f16_init("w3", &[72, 1, 3, 3], 0.6, 13),
        ],
    );
    with_opset(m, 18, false)
}

/// ONNX Runtime's CPU provider runs a Relu alone between two float16 Convs in float32 (inlined
/// as Max, which has a float16 kernel, between two nodes without one: InsertCastTransformer's
/// isolated-node rule), and two Relus in a row in float16. `fp32-isolated` fences the first
/// only, so that the fences (intel-gen9, rocm-migraphx) and the depthwise split (rx580) compute
/// what the runtime computes on the original: bit for bit.
#[test]
fn fp32_isolated_fences_the_relu_onnx_runtime_runs_in_float32() {
    let dir = tempfile::tempdir().unwrap();
    let src = write(dir.path(), "fp16_relu_chain.onnx", &fp16_relu_chain());
    for target in ["intel-gen9", "rocm-migraphx", "rx580"] {
        let isolated: Vec<String> = findings(&src, target)
            .into_iter()
            .filter(|(r, _)| r == "fp32-isolated")
            .map(|(_, n)| n)
            .collect();
        assert_eq!(isolated, vec!["n1_Relu".to_string()], "{target}");
        if !verify_support::runtime_available() {
            eprintln!("SKIP the numerical half of this test: no ONNX Runtime to run");
            continue;
        }
        let out = compile_clean(&src, target, dir.path());
        common::onnx_check(&out);
        let bits = VerifyOptions {
            tolerance: Tolerance {
                rtol: 0.0,
                atol: 0.0,
            },
            tolerance_given: true,
            runs: 3,
            ..VerifyOptions::default()
        };
        let report = verify_models(&src, &out, &bits).unwrap();
        assert!(report.passed(), "{target}:\n{}", report.to_text());
    }
}
