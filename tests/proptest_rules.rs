//! Property: random rule applications keep a model valid and equal on ONNX Runtime.
//!
//! Small random Conv nets (random channels, groups — depthwise and grouped included — kernel
//! sizes, strides, pads, dilations, bias or none, Relu between some layers, a residual Add
//! where the shapes allow) are compiled with `engine::compile` for a target written as YAML
//! on the fly: `split` by channels and by out_channels with random maxima, `cpu` pinning, and
//! `barrier` with a random budget. The result must pass `engine::check_invariants`, leave no
//! rule that still fires, and compute the same outputs as the original on ONNX Runtime
//! (`verify::verify_models`, both annotated and partitioned into CPU/GPU segments).
//!
//! Deterministic: a fixed seed (override with PROPTEST_RNG_SEED), 24 cases (PROPTEST_CASES).
//! Needs ONNX Runtime (the project venv or ORT_DYLIB_PATH); skipped with
//! ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1 when it is missing.

mod verify_support;

use onnx_safeify::engine::{self, FindingKind, Options};
use onnx_safeify::proto::{
    attribute_proto::AttributeType, AttributeProto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto,
};
use onnx_safeify::verify::{verify_models, VerifyOptions};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use prost::Message;

fn config(default_cases: u32) -> Config {
    let mut c = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = default_cases;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = RngSeed::Fixed(0x0c0_4e75);
    }
    c
}

/// One convolution layer, in terms of its input's channels.
#[derive(Debug, Clone)]
struct Layer {
    /// 0: ordinary, 1: depthwise, 2: grouped (a divisor of the channels, picked by `pick`).
    kind: u8,
    pick: u8,
    /// Output channels per group (depthwise: the channel multiplier).
    per_group: i64,
    kernel: (i64, i64),
    stride: i64,
    pads: [i64; 4],
    dilation: i64,
    bias: bool,
    relu: bool,
    residual: bool,
}

#[derive(Debug, Clone)]
struct Net {
    channels: i64,
    h: i64,
    w: i64,
    layers: Vec<Layer>,
    seed: u32,
}

fn layer() -> impl Strategy<Value = Layer> {
    (
        (0u8..3, any::<u8>(), 1i64..4),
        (
            (1i64..4, 1i64..4),
            1i64..3,
            [0i64..3, 0i64..3, 0i64..3, 0i64..3],
            1i64..3,
        ),
        (any::<bool>(), any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(
                (kind, pick, per_group),
                (kernel, stride, pads, dilation),
                (bias, relu, residual),
            )| {
                Layer {
                    kind,
                    pick,
                    per_group,
                    kernel,
                    stride,
                    pads,
                    dilation,
                    bias,
                    relu,
                    residual,
                }
            },
        )
}

fn net() -> impl Strategy<Value = Net> {
    (
        1i64..17,
        3i64..12,
        3i64..12,
        prop::collection::vec(layer(), 1..5),
        any::<u32>(),
    )
        .prop_map(|(channels, h, w, layers, seed)| Net {
            channels,
            h,
            w,
            layers,
            seed,
        })
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// Deterministic weights in [-1, 1).
fn floats(n: i64, seed: &mut u32) -> Vec<u8> {
    (0..n)
        .flat_map(|_| {
            *seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((*seed >> 8) as f32 / (1u32 << 23) as f32 - 1.0).to_le_bytes()
        })
        .collect()
}

fn tensor(name: &str, dims: &[i64], raw: Vec<u8>) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(1),
        name: Some(name.into()),
        raw_data: Some(raw.into()),
        ..Default::default()
    }
}

/// The model of a net, and (max grouped channels, max output channels) among its Convs.
fn build(net: &Net) -> (ModelProto, i64, i64) {
    let mut nodes = Vec::new();
    let mut inits = Vec::new();
    let mut seed = net.seed;
    let (mut c, mut h, mut w) = (net.channels, net.h, net.w);
    let mut x = "input".to_string();
    let (mut max_grouped, mut max_out) = (0, 0);
    for (i, l) in net.layers.iter().enumerate() {
        let group = match l.kind {
            0 => 1,
            1 => c,
            _ => {
                let d: Vec<i64> = (1..=c).filter(|g| c % g == 0).collect();
                d[l.pick as usize % d.len()]
            }
        };
        let m = group * l.per_group;
        let (kh, kw) = l.kernel;
        let ekh = l.dilation * (kh - 1) + 1;
        let ekw = l.dilation * (kw - 1) + 1;
        let p = l.pads;
        if h + p[0] + p[2] < ekh || w + p[1] + p[3] < ekw {
            continue;
        }
        let oh = (h + p[0] + p[2] - ekh) / l.stride + 1;
        let ow = (w + p[1] + p[3] - ekw) / l.stride + 1;
        let wname = format!("w{i}");
        inits.push(tensor(
            &wname,
            &[m, c / group, kh, kw],
            floats(m * (c / group) * kh * kw, &mut seed),
        ));
        let mut inputs = vec![x.clone(), wname];
        if l.bias {
            let b = format!("b{i}");
            inits.push(tensor(&b, &[m], floats(m, &mut seed)));
            inputs.push(b);
        }
        let y = format!("conv{i}");
        nodes.push(NodeProto {
            input: inputs,
            output: vec![y.clone()],
            name: Some(format!("conv{i}")),
            op_type: Some("Conv".into()),
            attribute: vec![
                int("group", group),
                ints("kernel_shape", &[kh, kw]),
                ints("pads", &p),
                ints("strides", &[l.stride, l.stride]),
                ints("dilations", &[l.dilation, l.dilation]),
            ],
            ..Default::default()
        });
        if group > 1 {
            max_grouped = max_grouped.max(c);
        } else {
            max_out = max_out.max(m);
        }
        let mut out = y;
        if l.residual && m == c && oh == h && ow == w {
            let a = format!("add{i}");
            nodes.push(NodeProto {
                input: vec![out, x.clone()],
                output: vec![a.clone()],
                name: Some(a.clone()),
                op_type: Some("Add".into()),
                ..Default::default()
            });
            out = a;
        }
        if l.relu {
            let r = format!("relu{i}");
            nodes.push(NodeProto {
                input: vec![out],
                output: vec![r.clone()],
                name: Some(r.clone()),
                op_type: Some("Relu".into()),
                ..Default::default()
            });
            out = r;
        }
        x = out;
        (c, h, w) = (m, oh, ow);
    }
    if nodes.is_empty() {
        nodes.push(NodeProto {
            input: vec![x],
            output: vec!["relu".into()],
            name: Some("relu".into()),
            op_type: Some("Relu".into()),
            ..Default::default()
        });
        x = "relu".into();
    }
    let out_name = x;
    let graph = GraphProto {
        node: nodes,
        name: Some("net".into()),
        initializer: inits,
        input: vec![verify_support::value_info(
            "input",
            1,
            Some(&[1, net.channels, net.h, net.w]),
        )],
        output: vec![verify_support::value_info(
            &out_name,
            1,
            Some(&[1, c, h, w]),
        )],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        producer_name: Some("proptest".into()),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(graph),
        ..Default::default()
    };
    (model, max_grouped, max_out)
}

/// Which rules the target has, and their parameters.
#[derive(Debug, Clone)]
struct Rules {
    split_channels: Option<u8>,
    split_out: Option<u8>,
    /// 0: none, 1: pin Relu, 2: pin 1x1 Convs, 3: pin Add.
    cpu: u8,
    barrier: Option<u8>,
    partition: bool,
}

fn rules() -> impl Strategy<Value = Rules> {
    (
        prop::option::of(any::<u8>()),
        prop::option::of(any::<u8>()),
        0u8..4,
        prop::option::weighted(0.4, any::<u8>()),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(split_channels, split_out, cpu, barrier, partition)| Rules {
                split_channels,
                split_out,
                cpu,
                barrier,
                partition,
            },
        )
}

/// The target as YAML; split maxima are drawn below the largest channel count of the net.
fn target_yaml(r: &Rules, max_grouped: i64, max_out: i64) -> String {
    let mut y = String::from("target: prop\nextends: none\nrules:\n");
    let rule = |id: &str, m: &str, a: &str| {
        format!("  - {{id: {id}, why: property test, evidence: [], match: {m}, action: {a}}}\n")
    };
    if let Some(k) = r.split_channels {
        let max = 1 + k as i64 % max_grouped.max(1);
        y += &rule(
            "split-grouped",
            &format!("{{op: Conv, grouped: true, channels: {{gt: {max}}}}}"),
            &format!("{{split: {{axis: channels, max: {max}}}}}"),
        );
    }
    if let Some(k) = r.split_out {
        let max = 1 + k as i64 % max_out.max(1);
        y += &rule(
            "split-out",
            &format!("{{op: Conv, grouped: false, out_channels: {{gt: {max}}}}}"),
            &format!("{{split: {{axis: out_channels, max: {max}}}}}"),
        );
    }
    match r.cpu {
        1 => y += &rule("pin-relu", "{op: Relu}", "cpu"),
        2 => y += &rule("pin-1x1", "{op: Conv, kernel: 1}", "cpu"),
        3 => y += &rule("pin-add", "{op: Add}", "cpu"),
        _ => {}
    }
    if let Some(b) = r.barrier {
        let budget = 10f64.powi(2 + (b % 5) as i32);
        y += &rule(
            "barrier",
            "{op: [Conv, Add]}",
            &format!("{{barrier: {{budget: {budget:e}}}}}"),
        );
    }
    y
}

fn check(net: &Net, r: &Rules) -> Result<(), TestCaseError> {
    let (model, max_grouped, max_out) = build(net);
    let yaml = target_yaml(r, max_grouped, max_out);
    let target = onnx_safeify::rules::parse_target_str("prop.yaml", &yaml)
        .map_err(|e| TestCaseError::fail(format!("target does not load: {e}\n{yaml}")))?;

    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("net.onnx");
    std::fs::write(&src, model.encode_to_vec()).unwrap();
    let mut doc = onnx_safeify::load(&src).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let opts = Options::default();
    let report = engine::compile(&mut doc.model, &target, &opts);
    prop_assert_eq!(engine::check_invariants(&doc.model.graph), Ok(()));
    let still: Vec<_> = engine::check(&mut doc.model, &target, &opts)
        .into_iter()
        .filter(|f| f.kind == FindingKind::Fires)
        .collect();
    prop_assert!(
        still.is_empty(),
        "rules still fire after compile: {:?}\n{}",
        still,
        yaml
    );
    for f in &report.remaining {
        prop_assert!(
            f.kind != FindingKind::Fires && f.kind != FindingKind::Denied,
            "unexpected finding {:?}",
            f
        );
    }

    let out = if r.partition {
        let g = &doc.model.graph;
        let ann = opts.annotation.clone();
        let is_cpu = |n| g.node(n).metadata("layer_ann") == Some(ann.as_str());
        let segs = onnx_safeify::partition::plan(g, &is_cpu)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let facts = onnx_safeify::infer::infer_model(&doc.model, &Default::default());
        let type_of = |v| {
            let i = facts.info(v);
            Some(verify_support::tensor_type(
                i.dtype.unwrap_or(1),
                i.dims_known().as_deref(),
            ))
        };
        let models = onnx_safeify::partition::segment_models(&doc.model, &segs, &type_of)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let manifest = dir.path().join("net.manifest.yaml");
        onnx_safeify::partition::save_partitioned(&doc, &segs, models, &manifest)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        manifest
    } else {
        let out = dir.path().join("net.prop.onnx");
        onnx_safeify::save(&doc, &out).map_err(|e| TestCaseError::fail(e.to_string()))?;
        out
    };
    let v = verify_models(&src, &out, &VerifyOptions::default())
        .map_err(|e| TestCaseError::fail(format!("verify could not run: {e}\n{yaml}")))?;
    prop_assert!(
        v.passed(),
        "{}\n{}\napplied: {:?}",
        v.to_text(),
        yaml,
        report.applied
    );
    Ok(())
}

#[test]
fn random_rule_applications_keep_conv_nets_equal() {
    if !verify_support::runtime_available() {
        return;
    }
    let mut runner = proptest::test_runner::TestRunner::new(config(24));
    let result = runner.run(&(net(), rules()), |(n, r)| check(&n, &r));
    if let Err(e) = result {
        panic!("{e}");
    }
}
