//! Rules inside If, Loop and Scan bodies (issue 12, "no dead ends"): every action applies in a
//! body at any depth, rewrites of values read by name inside a body keep working, and the
//! report, `check` and `explain` name inner nodes by their scope path (`loop/body/conv_3`).
//!
//! The models are built here, deterministically: depthwise Convs of 96 channels (over rx580's
//! split limit of 64) in both branches of an If, in a Loop body, in a Scan body and in a Loop
//! nested in a branch (depth 2); fused com.microsoft ops (FusedConv, FusedGemm) in bodies that
//! read weights of the main graph; main-graph fused ops whose outputs bodies read by name; an
//! op with no decomposition (falls back to the CPU inside a body); a Gather with computed int64
//! indices (pinned to the CPU inside a body); and a float16 model whose body Conv gets a
//! precision fence while the main Conv it reads by name is fenced too.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{bin, float_init, int_attr, node, vi};
use onnx_safeify::proto::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};

const MS: &str = "com.microsoft";
const C: i64 = 96;
const HW: i64 = 16;

fn typed(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| tensor_shape_proto::Dimension {
                            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                            denotation: None,
                        })
                        .collect(),
                }),
            })),
            denotation: None,
        }),
        ..Default::default()
    }
}

fn ints_attr(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn str_attr(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec().into()),
        ..Default::default()
    }
}

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(Box::new(g)),
        ..Default::default()
    }
}

/// Deterministic weights in [-0.3, 0.3) (a linear congruential sequence per name).
fn weights(name: &str, dims: &[i64], seed: u64) -> TensorProto {
    let n: i64 = dims.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let vals: Vec<f32> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.6
        })
        .collect();
    float_init(name, dims, &vals)
}

fn int64_init(name: &str, dims: &[i64], vals: &[i64]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(7),
        name: Some(name.into()),
        raw_data: Some(
            vals.iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        ),
        ..Default::default()
    }
}

fn bool_init(name: &str, v: bool) -> TensorProto {
    TensorProto {
        data_type: Some(9),
        name: Some(name.into()),
        raw_data: Some(vec![u8::from(v)].into()),
        ..Default::default()
    }
}

fn with_attrs(mut n: NodeProto, attrs: Vec<AttributeProto>) -> NodeProto {
    n.attribute = attrs;
    n
}

fn ms(mut n: NodeProto) -> NodeProto {
    n.domain = Some(MS.into());
    n
}

fn dw_attrs(group: i64) -> Vec<AttributeProto> {
    vec![
        int_attr("group", group),
        ints_attr("kernel_shape", &[3, 3]),
        ints_attr("pads", &[1, 1, 1, 1]),
    ]
}

/// A depthwise 3x3 Conv (96 channels: over rx580's limit of 64).
fn dw(name: &str, x: &str, w: &str, y: &str) -> NodeProto {
    with_attrs(node("Conv", name, &[x, w], &[y]), dw_attrs(C))
}

/// A com.microsoft FusedConv (depthwise, with bias and Relu).
fn fused_conv(name: &str, ins: &[&str], y: &str) -> NodeProto {
    let mut a = dw_attrs(C);
    a.push(str_attr("activation", "Relu"));
    ms(with_attrs(node("FusedConv", name, ins, &[y]), a))
}

fn fused_gemm(name: &str, ins: &[&str], y: &str) -> NodeProto {
    ms(with_attrs(
        node("FusedGemm", name, ins, &[y]),
        vec![str_attr("activation", "Relu")],
    ))
}

fn body(
    name: &str,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> GraphProto {
    GraphProto {
        node: nodes,
        name: Some(name.into()),
        input: inputs,
        output: outputs,
        ..Default::default()
    }
}

fn model_of(graph: GraphProto, ms_domain: bool) -> ModelProto {
    let mut opsets = vec![OperatorSetIdProto {
        domain: Some(String::new()),
        version: Some(17),
    }];
    if ms_domain {
        opsets.push(OperatorSetIdProto {
            domain: Some(MS.into()),
            version: Some(1),
        });
    }
    ModelProto {
        ir_version: Some(8),
        producer_name: Some("onnx-safeify tests".into()),
        opset_import: opsets,
        graph: Some(graph),
        ..Default::default()
    }
}

/// The control-flow model (see the module doc). Inputs `x` [1,96,16,16], `z` [1,32] and the If
/// condition `cond`; outputs `y_if`, `y_scan`, `z_loop`.
fn control_flow_model() -> ModelProto {
    let act = [1, C, HW, HW];
    let (bool_t, i64_t) = (9, 7);
    // then_branch / then_loop / body: depth 2; reads f0 (main) and t2 (then_branch) by name.
    let inner = body(
        "inner_body",
        vec![
            dw("inner_dw", "is", "Wl", "is1"),
            fused_conv("inner_fc", &["is1", "W1", "B0"], "is2"),
            node("Add", "inner_add", &["is2", "f0"], &["is3"]),
            node("Add", "inner_add2", &["is3", "t2"], &["is4"]),
            node("Identity", "inner_cond", &["ic"], &["ic_out"]),
        ],
        vec![
            typed("ij", i64_t, &[]),
            typed("ic", bool_t, &[]),
            vi("is", &act),
        ],
        vec![typed("ic_out", bool_t, &[]), vi("is4", &act)],
    );
    let then_branch = body(
        "then_body",
        vec![
            dw("then_dw", "f0", "W1", "t1"),
            fused_conv("then_fc", &["t1", "W0", "B0"], "t2"),
            with_attrs(
                node("Loop", "then_loop", &["trip", "keep", "t2"], &["t_out"]),
                vec![graph_attr("body", inner)],
            ),
        ],
        vec![],
        vec![vi("t_out", &act)],
    );
    let else_branch = body(
        "else_body",
        vec![
            dw("else_dw", "f0", "W1", "e1"),
            fused_conv("else_fc", &["e1", "W0", "B0"], "e2"),
            // No decomposition: falls back to the CPU inside the branch.
            ms(node("Inverse", "else_inv", &["A2"], &["inv"])),
            node("ReduceSum", "else_sum", &["inv"], &["inv_sum"]),
            node("Add", "else_add", &["e2", "inv_sum"], &["e_out"]),
        ],
        vec![],
        vec![vi("e_out", &act)],
    );
    let loop_body = body(
        "loop_body",
        vec![
            dw("loop_dw", "ls", "Wl", "l1"),
            node("Add", "loop_add", &["l1", "f0"], &["l2"]),
            fused_gemm("loop_fg", &["lz", "Wg", "bg"], "z1"),
            node("Add", "loop_add2", &["z1", "g0"], &["z2"]),
            // Computed int64 indices: rx580 pins the Gather to the CPU.
            node("Gather", "loop_gather", &["bg", "li"], &["gi"]),
            node("Mul", "loop_mul", &["z2", "gi"], &["z3"]),
            node("Identity", "loop_cond", &["lc"], &["lc_out"]),
        ],
        vec![
            typed("li", i64_t, &[]),
            typed("lc", bool_t, &[]),
            vi("ls", &act),
            vi("lz", &[1, 32]),
        ],
        vec![
            typed("lc_out", bool_t, &[]),
            vi("l2", &act),
            vi("z3", &[1, 32]),
        ],
    );
    let scan_body = body(
        "scan_body",
        vec![
            dw("scan_dw", "sx", "Ws", "s1"),
            node("Add", "scan_add", &["s1", "f0"], &["s2"]),
        ],
        vec![vi("sx", &act)],
        vec![vi("s2", &act)],
    );
    let graph = GraphProto {
        node: vec![
            fused_conv("main_fc", &["x", "W0", "B0"], "f0"),
            fused_gemm("main_fg", &["z", "Wg", "bg"], "g0"),
            with_attrs(
                node("If", "branch", &["cond"], &["y_if"]),
                vec![
                    graph_attr("then_branch", then_branch),
                    graph_attr("else_branch", else_branch),
                ],
            ),
            with_attrs(
                node(
                    "Loop",
                    "loop",
                    &["trip", "keep", "y_if", "z"],
                    &["y_loop", "z_loop"],
                ),
                vec![graph_attr("body", loop_body)],
            ),
            node("Unsqueeze", "stack", &["y_loop", "axes0"], &["xs"]),
            with_attrs(
                node("Scan", "scan", &["xs"], &["y_scan"]),
                vec![
                    graph_attr("body", scan_body),
                    int_attr("num_scan_inputs", 1),
                ],
            ),
        ],
        name: Some("control_flow".into()),
        initializer: vec![
            weights("W0", &[C, 1, 3, 3], 1),
            weights("B0", &[C], 2),
            weights("W1", &[C, 1, 3, 3], 3),
            weights("Wl", &[C, 1, 3, 3], 4),
            weights("Ws", &[C, 1, 3, 3], 5),
            weights("Wg", &[32, 32], 6),
            weights("bg", &[32], 7),
            float_init("A2", &[2, 2], &[2.0, 0.5, 0.3, 1.5]),
            int64_init("trip", &[], &[2]),
            bool_init("keep", true),
            int64_init("axes0", &[1], &[0]),
        ],
        input: vec![vi("x", &act), vi("z", &[1, 32]), typed("cond", bool_t, &[])],
        output: vec![
            vi("y_if", &act),
            vi("y_scan", &[1, 1, C, HW, HW]),
            vi("z_loop", &[1, 32]),
        ],
        ..Default::default()
    };
    model_of(graph, true)
}

/// A float16 model: a main Conv whose output a Loop body reads by name, and a Conv in the body
/// (both get a float32 fence on the targets that fence float16 convolutions).
fn fp16_model() -> ModelProto {
    let act = [1, 8, 8, 8];
    let w: Vec<u8> = (0..72u32)
        .flat_map(|i| {
            let v = ((i * 37 % 17) as f32 - 8.0) / 16.0;
            half_bits(v).to_le_bytes()
        })
        .collect();
    let w16 = TensorProto {
        dims: vec![8, 1, 3, 3],
        data_type: Some(10),
        name: Some("W16".into()),
        raw_data: Some(w.into()),
        ..Default::default()
    };
    let conv = |name: &str, x: &str, y: &str| {
        with_attrs(node("Conv", name, &[x, "W16"], &[y]), dw_attrs(8))
    };
    let loop_body = body(
        "loop16_body",
        vec![
            conv("body_conv", "s", "s1"),
            node("Add", "body_add", &["s1", "h"], &["s2"]),
            node("Identity", "body_cond", &["c"], &["c_out"]),
        ],
        vec![typed("i", 7, &[]), typed("c", 9, &[]), typed("s", 10, &act)],
        vec![typed("c_out", 9, &[]), typed("s2", 10, &act)],
    );
    let graph = GraphProto {
        node: vec![
            conv("main_conv", "x16", "h"),
            with_attrs(
                node("Loop", "loop16", &["trip", "keep", "h"], &["y16"]),
                vec![graph_attr("body", loop_body)],
            ),
        ],
        name: Some("fp16_loop".into()),
        initializer: vec![w16, int64_init("trip", &[], &[2]), bool_init("keep", true)],
        input: vec![typed("x16", 10, &act)],
        output: vec![typed("y16", 10, &act)],
        ..Default::default()
    };
    model_of(graph, false)
}

/// IEEE half bits of a small float that half represents exactly (multiples of 1/16 here).
fn half_bits(v: f32) -> u16 {
    if v == 0.0 {
        return 0;
    }
    let sign = if v < 0.0 { 0x8000u16 } else { 0 };
    let a = v.abs();
    let e = a.log2().floor() as i32;
    let m = ((a / 2f32.powi(e) - 1.0) * 1024.0).round() as u16;
    sign | (((e + 15) as u16) << 10) | m
}

fn write(dir: &Path, name: &str, m: &ModelProto) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, common::encode(m)).unwrap();
    p
}

fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// onnx.checker (full check) on `rewritten`, and ONNX Runtime (CPU) on both models with the
/// same random inputs, once per value of every bool input (both If branches): every output
/// equal within `rtol` of the largest reference magnitude.
fn checker_and_ort_equal(original: &Path, rewritten: &Path, rtol: f64) -> String {
    let Some(py) = common::venv_python() else {
        return "skipped".into();
    };
    let script = r#"
import sys, numpy as np, onnx, onnxruntime as ort
a, b, rtol = sys.argv[1], sys.argv[2], float(sys.argv[3])
onnx.checker.check_model(onnx.load(b), full_check=True)
def session(p):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(p, so, providers=["CPUExecutionProvider"])
sa, sb = session(a), session(b)
names = [o.name for o in sa.get_outputs()]
assert names == [o.name for o in sb.get_outputs()], names
types = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
lines = []
for flag in (True, False):
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sa.get_inputs():
        if i.type == "tensor(bool)":
            feeds[i.name] = np.array(flag)
        else:
            feeds[i.name] = rng.standard_normal(i.shape).astype(types[i.type])
    ra, rb = sa.run(None, feeds), sb.run(None, feeds)
    worst = 0.0
    for n, x, y in zip(names, ra, rb):
        assert x.shape == y.shape, (n, x.shape, y.shape)
        scale = max(float(np.abs(x.astype(np.float64)).max()), 1e-6)
        err = float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max()) / scale
        assert np.isfinite(err) and err <= rtol, f"cond={flag}: output {n}: relative error {err} > {rtol}"
        worst = max(worst, err)
    lines.append(f"cond={flag}: {len(names)} outputs equal (worst {worst:.3g})")
print("; ".join(lines))
"#;
    let o = Command::new(py)
        .args(["-c", script])
        .arg(original)
        .arg(rewritten)
        .arg(rtol.to_string())
        .output()
        .expect("python runs");
    assert!(
        o.status.success(),
        "{} vs {}:\n{}",
        original.display(),
        rewritten.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// Compile `input` for `target`: exit 0, `check` clean on the output, onnx.checker and ONNX
/// Runtime equal with both branches, and a second compile writes the same bytes. Returns the
/// JSON report.
fn compile_all_checks(dir: &Path, input: &Path, target: &str, rtol: f64) -> serde_json::Value {
    let out = dir.join(format!("{target}.onnx"));
    let report = dir.join(format!("{target}.json"));
    let o = run(&[
        s(input),
        "-t",
        target,
        "-o",
        s(&out),
        "--report",
        s(&report),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "compile for {target}: {}",
        text(&o)
    );
    let o = run(&["check", s(&out), "--target", target]);
    assert_eq!(o.status.code(), Some(0), "check for {target}: {}", text(&o));
    let line = checker_and_ort_equal(input, &out, rtol);
    eprintln!("{target}: {line}");
    let again = dir.join(format!("{target}.again.onnx"));
    let o = run(&[s(&out), "-t", target, "-o", s(&again)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "recompile for {target}: {}",
        text(&o)
    );
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&again).unwrap(),
        "compiling the {target} output again changed it"
    );
    serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap()
}

fn nodes_of(v: &serde_json::Value, key: &str, rule_or_action: &str) -> Vec<String> {
    let mut out: Vec<String> = v[key]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["rule"] == rule_or_action || a["action"] == rule_or_action)
        .map(|a| a["node"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn rx580_rewrites_every_body_and_names_inner_nodes_by_scope() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "control_flow.onnx", &control_flow_model());
    let v = compile_all_checks(dir.path(), &input, "rx580", 1e-4);

    // Every large depthwise Conv is split, wherever it is (the main one comes from main_fc).
    let split = nodes_of(&v, "applied", "split-depthwise");
    for inner in [
        "branch/else_branch/else_dw",
        "branch/then_branch/then_dw",
        "branch/then_branch/then_loop/body/inner_dw",
        "loop/body/loop_dw",
        "scan/body/scan_dw",
    ] {
        assert!(
            split.contains(&inner.to_string()),
            "{inner} not split: {split:?}"
        );
    }
    assert!(split.iter().any(|n| n.starts_with("main_fc/")), "{split:?}");
    // Fused ops in bodies read weights of the main graph; main_fc and main_fg's outputs are
    // read inside bodies: all are decomposed (no outer-scope refusal).
    let unfused = nodes_of(&v, "applied", "unfuse-contrib");
    assert_eq!(
        unfused,
        [
            "branch/else_branch/else_fc",
            "branch/then_branch/then_fc",
            "branch/then_branch/then_loop/body/inner_fc",
            "loop/body/loop_fg",
            "main_fc",
            "main_fg",
        ]
    );
    // cpu inside a body, and a fallback inside a body, by scope path.
    assert_eq!(
        nodes_of(&v, "applied", "int64-indices-on-cpu"),
        ["loop/body/loop_gather"]
    );
    let fb = v["fallbacks"].as_array().unwrap();
    assert_eq!(fb.len(), 1, "{fb:?}");
    assert_eq!(fb[0]["node"], "branch/else_branch/else_inv");
    assert_eq!(fb[0]["cause"], "no-rewrite");
    assert_eq!(fb[0]["op"], "com.microsoft::Inverse");
    let pinned: Vec<&str> = v["pinned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    for p in ["loop/body/loop_gather", "branch/else_branch/else_inv"] {
        assert!(pinned.contains(&p), "{p} not pinned: {pinned:?}");
    }
    assert!(v["remaining"].as_array().unwrap().is_empty(), "{v}");

    // The output: the names the bodies read are still defined, no com.microsoft op is left
    // but the one that fell back, and it carries the CPU pin.
    let out = onnx_safeify::load(&dir.path().join("rx580.onnx")).unwrap();
    let scopes = onnx_safeify::ir::scope::graphs(&out.model.graph);
    let fused: Vec<String> = onnx_safeify::ir::scope::nodes(&scopes)
        .filter(|n| n.node.domain() == MS)
        .map(|n| n.qualified_name())
        .collect();
    assert_eq!(fused, ["branch/else_branch/else_inv"]);
    let main = &out.model.graph;
    for name in ["f0", "g0"] {
        let v = main.values.iter().find(|v| *v.name == *name).expect(name);
        assert!(
            matches!(v.origin, onnx_safeify::ir::Origin::Node { .. }),
            "{name} lost its producer"
        );
    }
}

#[test]
fn check_and_explain_name_inner_nodes_by_scope_path() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "control_flow.onnx", &control_flow_model());
    let o = run(&["check", s(&input), "--target", "rx580", "--format", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut found: Vec<(String, String, String)> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["node"].as_str().unwrap().to_string(),
                f["rule"].as_str().unwrap().to_string(),
                f["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    found.sort();
    let t = |n: &str, r: &str, k: &str| (n.to_string(), r.to_string(), k.to_string());
    let mut want = vec![
        t("branch", "control-flow-on-cpu", "fires"),
        // The else branch holds an op without an inference rule here (Inverse): its work is
        // bounded from the sizes around it, and the branch's estimated work is far under the
        // barrier budget, so no piece is over it (unknown work used to count as over it).
        t("branch/else_branch/else_dw", "split-depthwise", "fires"),
        t("branch/else_branch/else_fc", "unfuse-contrib", "fires"),
        t("branch/else_branch/else_inv", "unfuse-contrib", "fallback"),
        t("branch/then_branch/then_dw", "split-depthwise", "fires"),
        t("branch/then_branch/then_fc", "unfuse-contrib", "fires"),
        t(
            "branch/then_branch/then_loop",
            "control-flow-on-cpu",
            "fires",
        ),
        t(
            "branch/then_branch/then_loop/body/inner_dw",
            "split-depthwise",
            "fires",
        ),
        t(
            "branch/then_branch/then_loop/body/inner_fc",
            "unfuse-contrib",
            "fires",
        ),
        t("loop", "control-flow-on-cpu", "fires"),
        t("loop/body/loop_dw", "split-depthwise", "fires"),
        t("loop/body/loop_fg", "unfuse-contrib", "fires"),
        t("loop/body/loop_gather", "int64-indices-on-cpu", "fires"),
        t("main_fc", "unfuse-contrib", "fires"),
        t("main_fg", "unfuse-contrib", "fires"),
        t("scan", "control-flow-on-cpu", "fires"),
        t("scan/body/scan_dw", "split-depthwise", "fires"),
    ];
    // DirectML has no kernel for these (the contrib ops, Loop, Scan, Inverse): directml's
    // `missing-kernel-on-cpu` matches them too. `check` lists every rule that matches a node;
    // the compile applies the first (unfuse-contrib, control-flow-on-cpu: higher priority).
    for n in [
        "branch/else_branch/else_fc",
        "branch/else_branch/else_inv",
        "branch/then_branch/then_fc",
        "branch/then_branch/then_loop",
        "branch/then_branch/then_loop/body/inner_fc",
        "loop",
        "loop/body/loop_fg",
        "main_fc",
        "main_fg",
        "scan",
    ] {
        want.push(t(n, "missing-kernel-on-cpu", "fires"));
    }
    want.sort();
    assert_eq!(found, want);

    // The text report too.
    let o = run(&["check", s(&input), "--target", "rx580"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("branch/then_branch/then_loop/body/inner_dw"),
        "{out}"
    );

    // explain: the target's view lists inner nodes by path; a node by its qualified name.
    let o = run(&["explain", s(&input), "--target", "rx580"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let split = out
        .split("split-depthwise -> ")
        .nth(1)
        .and_then(|r| r.split("\n  why").next())
        .unwrap_or_default()
        .to_string();
    assert_eq!(split, "split {axis: channels, max: 64}: 5 node(s)", "{out}");
    for inner in [
        "  - branch/then_branch/then_dw (Conv)",
        "  - branch/then_branch/then_loop/body/inner_dw (Conv)",
        "  - branch/else_branch/else_dw (Conv)",
        "  - loop/body/loop_dw (Conv)",
        "  - scan/body/scan_dw (Conv)",
    ] {
        assert!(out.contains(inner), "{inner} missing:\n{out}");
    }
    let o = run(&[
        "explain",
        s(&input),
        "--target",
        "rx580",
        "--node",
        "branch/then_branch/then_loop/body/inner_dw",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("node 'branch/then_branch/then_loop/body/inner_dw' (Conv):"),
        "{out}"
    );
    let line = out
        .lines()
        .find(|l| l.contains("split-depthwise"))
        .unwrap_or_default();
    assert!(line.contains("matches"), "{out}");
    let o = run(&[
        "explain",
        s(&input),
        "--target",
        "rx580",
        "--node",
        "body/inner_dw",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn every_builtin_target_compiles_the_control_flow_model() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "control_flow.onnx", &control_flow_model());
    for target in onnx_safeify::rules::builtin::builtin_names() {
        let v = compile_all_checks(dir.path(), &input, target, 1e-4);
        // A target that unfuses contrib ops reaches every body.
        let unfused = nodes_of(&v, "applied", "unfuse");
        if !unfused.is_empty() {
            assert!(
                unfused.contains(&"branch/then_branch/then_loop/body/inner_fc".to_string()),
                "{target}: {unfused:?}"
            );
        }
    }
}

#[test]
fn float16_fences_apply_in_a_body_and_keep_names_bodies_read() {
    let dir = tempfile::tempdir().unwrap();
    let input = write(dir.path(), "fp16.onnx", &fp16_model());
    for target in onnx_safeify::rules::builtin::builtin_names() {
        let v = compile_all_checks(dir.path(), &input, target, 2e-3);
        // The targets that fence float16 convolutions.
        if !["rocm-migraphx", "intel-gen9"].contains(&target) {
            continue;
        }
        let fenced = nodes_of(&v, "applied", "cast");
        for n in ["loop16/body/body_conv", "main_conv"] {
            assert!(fenced.contains(&n.to_string()), "{target}: {fenced:?}");
        }
        let out = onnx_safeify::load(&dir.path().join(format!("{target}.onnx"))).unwrap();
        let g = &out.model.graph;
        // `h` is produced by the Cast back to float16 and keeps its name for the body.
        let h = g.values.iter().find(|v| &*v.name == "h").expect("h");
        let onnx_safeify::ir::Origin::Node { node, .. } = h.origin else {
            panic!("h has no producer")
        };
        assert_eq!(g.node(node).op_type, "Cast", "{target}");
    }
}
