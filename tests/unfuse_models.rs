//! The unfuse action on real models: every corpus model with a fused operator (ONNX Runtime
//! contrib ops, NCHWc layout ops, default-domain ops ONNX lacks at the model's opset) is
//! decomposed, saved, checked by `onnx.checker` (full check) and run against the original on
//! ONNX Runtime; hand-built models cover the attributes the corpus does not.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use onnx_safeify::ir::Model;
use onnx_safeify::proto::{
    attribute_proto::AttributeType, AttributeProto, GraphProto, ModelProto, NodeProto,
    OperatorSetIdProto, TensorProto, ValueInfoProto,
};
use onnx_safeify::rewrite::unfuse::{self, UnfuseOptions, UnfuseReport};
use onnx_safeify::rewrite::{ORIGIN_KEY, RULE_KEY};

const RULE: &str = "test-unfuse";

// ---------------------------------------------------------------------------------------------
// ONNX Runtime comparison with explicit input shapes and optional numpy references.

/// How to compare two models.
struct Cmp<'a> {
    /// Input shapes by name (other symbolic dims become `dim`).
    shapes: HashMap<&'a str, Vec<i64>>,
    dim: i64,
    /// Worst allowed `max|a - b| / max(max|a|, floor)` per output.
    rtol: f64,
    floor: f64,
    /// Without running the original: a Python expression computing the expected outputs from
    /// the feeds `f` and the original's initializers `w`.
    reference: Option<&'a str>,
    /// Intermediate values (by name, present in both models) compared as extra outputs.
    extra: &'a [&'a str],
}

impl Default for Cmp<'_> {
    fn default() -> Self {
        Cmp {
            shapes: HashMap::new(),
            dim: 2,
            rtol: 1e-4,
            floor: 1e-6,
            reference: None,
            extra: &[],
        }
    }
}

/// Compare two models on ONNX Runtime CPU (no graph optimisation) with the same random inputs;
/// returns the worst relative error.
fn compare(original: &Path, rewritten: &Path, c: &Cmp) -> f64 {
    let Some(py) = common::venv_python() else {
        return 0.0;
    };
    let script = r#"
import sys, json, numpy as np, onnxruntime as ort
import onnx
from onnx import helper
a, b, shapes, dim, rtol, ref, floor, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6], float(sys.argv[7]), [e for e in sys.argv[8].split(',') if e]
so = ort.SessionOptions(); so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL; so.log_severity_level = 3
def session(path):
    if not extra:
        return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    m = onnx.load(path)
    made = {o for n in m.graph.node for o in n.output}
    for e in extra:
        assert e in made, (path, e)
        m.graph.output.append(helper.make_empty_tensor_value_info(e))
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
sb = session(b)
rng = np.random.default_rng(0)
types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
         "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
         "tensor(int8)": np.int8, "tensor(uint8)": np.uint8}
feeds = {}
for i in sb.get_inputs():
    shape = shapes.get(i.name) or [d if isinstance(d, int) and d > 0 else dim for d in i.shape]
    t = types[i.type]
    if np.issubdtype(t, np.floating):
        feeds[i.name] = rng.standard_normal(shape).astype(t)
    elif t in (np.int8, np.uint8):
        feeds[i.name] = rng.integers(0, 100, shape).astype(t)
    else:
        feeds[i.name] = rng.integers(0, 2, shape).astype(t)
names = [o.name for o in sb.get_outputs()]
rb = sb.run(None, feeds)
if ref == "-":
    sa = session(a)
    assert names == [o.name for o in sa.get_outputs()], ("output names differ", names)
    ra = sa.run(None, feeds)
else:
    f = {k.replace('.', '_'): v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v for k, v in feeds.items()}
    from onnx import numpy_helper
    m = onnx.load(a)
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    ra = eval(ref, {"np": np, "f": f, "w": w})
    if not isinstance(ra, list): ra = [ra]
worst = 0.0
for n, x, y in zip(names, ra, rb):
    x = np.asarray(x); y = np.asarray(y)
    assert x.shape == y.shape, (n, x.shape, y.shape)
    scale = max(float(np.abs(x).max()) if x.size else 0.0, floor)
    err = float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max()) / scale if x.size else 0.0
    worst = max(worst, err)
    assert err <= rtol, f"output {n}: relative error {err} > {rtol}"
print(worst)
"#;
    let shapes_json = format!(
        "{{{}}}",
        c.shapes
            .iter()
            .map(|(k, v)| format!("\"{k}\": {v:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let o = std::process::Command::new(py)
        .args(["-c", script])
        .arg(original)
        .arg(rewritten)
        .arg(shapes_json)
        .arg(c.dim.to_string())
        .arg(c.rtol.to_string())
        .arg(c.reference.unwrap_or("-"))
        .arg(c.floor.to_string())
        .arg(c.extra.join(","))
        .output()
        .expect("python runs");
    assert!(
        o.status.success(),
        "ONNX Runtime comparison of {} and {} failed:\n{}",
        original.display(),
        rewritten.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(f64::NAN)
}

fn python(script: &str, args: &[&str]) -> String {
    let py = common::venv_python().expect("venv");
    let o = std::process::Command::new(py)
        .args(["-c", script])
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        o.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

// ---------------------------------------------------------------------------------------------
/// The NCHWc block size of this machine's ONNX Runtime (MLAS): 16 with AVX-512, else 8. The
/// corpus's ORT-optimised models are made here, with it.
fn this_cpu_nchwc_block() -> i64 {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if info.split_whitespace().any(|f| f == "avx512f") {
        16
    } else {
        8
    }
}

// Structural checks on an unfused model.

struct Outcome {
    report: UnfuseReport,
    out: PathBuf,
}

/// Load, unfuse every non-standard node, check the graph, save.
fn unfuse_file(src: &Path, dir: &Path, block: Option<i64>) -> Outcome {
    let mut doc = onnx_safeify::load(src).unwrap();
    let opset = doc.model.opset("").unwrap_or(0);
    let before = output_sigs(&doc.model);
    let report = unfuse::unfuse_all_with(
        &mut doc.model,
        &UnfuseOptions {
            rule: RULE,
            external: None,
            nchwc_block_size: block,
            unpack: None,
            computed: None,
            profile: None,
        },
        |n| unfuse::is_fused(n, opset),
    );
    check_model(&doc.model, opset, &report);
    assert_eq!(before, output_sigs(&doc.model), "graph outputs changed");
    let out = dir.join(src.file_name().unwrap());
    onnx_safeify::save(&doc, &out).unwrap();
    onnx_check(&out);
    Outcome { report, out }
}

/// `onnx.checker.check_model(full_check=True)`. Some corpus models declare graph outputs
/// without a shape, which the checker rejects before looking at anything else: those
/// declarations are completed on a copy by ONNX shape inference first (the file is unchanged).
fn onnx_check(path: &Path) {
    let script = r#"
import sys, onnx
m = onnx.load(sys.argv[1])
if any(not o.type.tensor_type.HasField("shape") for o in m.graph.output):
    inferred = {o.name: o for o in onnx.shape_inference.infer_shapes(m).graph.output}
    for o in m.graph.output:
        if not o.type.tensor_type.HasField("shape"):
            o.type.CopyFrom(inferred[o.name].type)
            if not o.type.tensor_type.HasField("shape"):
                o.type.tensor_type.shape.SetInParent()
onnx.checker.check_model(m, full_check=True)
"#;
    if common::venv_python().is_some() {
        python(script, &[path.to_str().unwrap()]);
    }
}

fn output_sigs(m: &Model) -> Vec<(String, String)> {
    m.graph
        .outputs
        .iter()
        .map(|o| {
            (
                m.graph.value_name(o.value).to_string(),
                format!("{:?}", o.proto.r#type),
            )
        })
        .collect()
}

fn check_model(m: &Model, opset: i64, report: &UnfuseReport) {
    let g = &m.graph;
    let unsupported: Vec<&str> = report.unsupported.iter().map(|s| s.node.as_str()).collect();
    for s in &report.unsupported {
        assert!(!s.reason.is_empty(), "{s:?} has no reason");
    }
    for &n in &g.order {
        let node = g.node(n);
        if unfuse::is_fused(node, opset) {
            assert!(
                unsupported.contains(&node.name()),
                "{}::{} '{}' remains and is not reported",
                node.domain(),
                node.op_type,
                node.name()
            );
        }
        if node.metadata(RULE_KEY).is_some() {
            assert_eq!(node.metadata(RULE_KEY), Some(RULE));
            // Named after their origin, or after the rule when the origin had no name.
            match node.metadata(ORIGIN_KEY) {
                Some(o) => assert!(node.name().starts_with(&format!("{o}/")), "{}", node.name()),
                None => assert!(
                    node.name().starts_with(&format!("{RULE}/")),
                    "{}",
                    node.name()
                ),
            }
        }
    }
    let mut names: Vec<&str> = g
        .order
        .iter()
        .map(|&n| g.node(n).name())
        .filter(|s| !s.is_empty())
        .collect();
    let total = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), total, "duplicate node names");
    let mut values: Vec<&str> = g
        .order
        .iter()
        .flat_map(|&n| g.node(n).outputs.iter().flatten().map(|v| g.value_name(*v)))
        .chain(g.initializers.iter().map(|i| g.value_name(i.value)))
        .collect();
    let total = values.len();
    values.sort();
    values.dedup();
    assert_eq!(values.len(), total, "a value is defined twice");
    assert!(g.topo_order().is_ok(), "cycle");
}

fn counts(m: &Model) -> Vec<(String, usize)> {
    let mut c: HashMap<String, usize> = HashMap::new();
    for &n in &m.graph.order {
        let nd = m.graph.node(n);
        *c.entry(format!("{}::{}", nd.domain(), nd.op_type))
            .or_default() += 1;
    }
    let mut v: Vec<_> = c.into_iter().collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// The corpus.

/// Numpy references for contrib models ONNX Runtime's CPU provider cannot run.
fn contrib_reference(stem: &str) -> Option<&'static str> {
    Some(match stem {
        // Y = X + bias + skip
        "BiasAdd" => "f['H'] + w['bias'] + f['S']",
        // softmax(H + S) over the last axis
        "BiasSoftmax" => {
            "(lambda z: np.exp(z - z.max(-1, keepdims=True)) / np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))(f['H'] + f['S'])"
        }
        // NHWC conv, weights [M, kH, kW, C], pads 1: correlate, then channels-last.
        "NhwcConv" => {
            "(lambda x, k: np.einsum('nhwijc,mijc->nhwm', np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0,0),(1,1),(1,1),(0,0))), (3,3), axis=(1,2)).transpose(0,1,2,4,5,3), k))(f['Xn'], w['Wn'])"
        }
        // 2x2/2 max pool over H, W of NHWC.
        "NhwcMaxPool" => "f['Xn'].reshape(1,5,2,5,2,8).max(axis=(2,4))",
        _ => return None,
    })
}

#[test]
fn corpus_contrib_models_decompose_and_match() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let results =
        std::fs::read_to_string(corpus.join("contrib/contrib_results.json")).unwrap_or_default();
    let dir = tempfile::tempdir().unwrap();
    let mut total_nodes = 0;
    let mut worst: f64 = 0.0;
    let mut models = 0;
    for src in common::onnx_files(&corpus.join("contrib")) {
        let stem = src.file_stem().unwrap().to_string_lossy().to_string();
        let o = unfuse_file(&src, dir.path(), None);
        assert!(
            o.report.unsupported.is_empty(),
            "{stem}: {:?}",
            o.report.unsupported
        );
        // Models whose only fused op is standard at their opset have nothing to do.
        let runs = results
            .split(&format!("\"{stem}\": {{"))
            .nth(1)
            .map(|r| {
                r.split('}')
                    .next()
                    .unwrap_or("")
                    .contains("\"runs_on_cpu\": true")
            })
            .unwrap_or(false);
        let err = if runs {
            compare(&src, &o.out, &Cmp::default())
        } else {
            let r = contrib_reference(&stem).unwrap_or_else(|| panic!("no reference for {stem}"));
            compare(
                &src,
                &o.out,
                &Cmp {
                    reference: Some(r),
                    ..Default::default()
                },
            )
        };
        eprintln!(
            "{stem}: {} node(s) unfused into {} ({}), worst relative error {err:.3e}",
            o.report.unfused.len(),
            o.report.new_nodes(),
            if runs { "vs ONNX Runtime" } else { "vs numpy" }
        );
        total_nodes += o.report.unfused.len();
        worst = worst.max(err);
        models += 1;
    }
    eprintln!("contrib: {models} models, {total_nodes} nodes unfused, worst error {worst:.3e}");
    assert!(models >= 20);
}

/// Shapes that make the PP-OCR models meaningful (the det model needs multiples of 32; the
/// rec model a height of 48).
fn ppocr_shapes(name: &str) -> HashMap<&'static str, Vec<i64>> {
    let shape = if name.contains("_det_") {
        vec![1, 3, 96, 128]
    } else if name.contains("_rec_") {
        vec![1, 3, 48, 160]
    } else {
        vec![1, 3, 48, 192]
    };
    HashMap::from([("x", shape)])
}

#[test]
fn corpus_ort_optimized_models_decompose_and_match() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut worst: f64 = 0.0;
    let mut models = 0;
    let mut nodes = 0;
    for src in common::onnx_files(&corpus.join("ort_optimized")) {
        let name = src.file_name().unwrap().to_string_lossy().to_string();
        let doc = onnx_safeify::load(&src).unwrap();
        let opset = doc.model.opset("").unwrap_or(0);
        let fused = doc
            .model
            .graph
            .order
            .iter()
            .filter(|&&n| unfuse::is_fused(doc.model.graph.node(n), opset))
            .count();
        if fused == 0 {
            continue;
        }
        // The block size of this machine, which made the corpus (an NCHWc region of block 8
        // can be ambiguous with 4).
        let o = unfuse_file(&src, dir.path(), Some(this_cpu_nchwc_block()));
        assert!(
            o.report.unsupported.is_empty(),
            "{name}: {:#?}",
            o.report.unsupported
        );
        // Against the ORT-optimized file itself (same CPU) and against the original model. The
        // det model's probabilities are ~1e-6 on noise: compare them absolutely, and its logits.
        let det = name.contains("_det_");
        let cmp = Cmp {
            shapes: ppocr_shapes(&name),
            dim: 1,
            floor: if det { 1.0 } else { 1e-6 },
            extra: if det { &["p2o.Add.281"] } else { &[] },
            ..Default::default()
        };
        let e1 = compare(&src, &o.out, &cmp);
        let real = corpus.join("real").join(
            name.split("__")
                .nth(1)
                .map(|s| {
                    format!(
                        "rapidocr_onnxruntime__{}.onnx",
                        s.split(".ort_").next().unwrap()
                    )
                })
                .unwrap(),
        );
        let e2 = if real.exists() {
            compare(&real, &o.out, &cmp)
        } else {
            0.0
        };
        let after = onnx_safeify::load(&o.out).unwrap();
        eprintln!(
            "{name}: {fused} fused node(s), {} unfused into {} new, nchwc block {:?}, errors {e1:.3e} (vs ORT file) {e2:.3e} (vs original); now {:?}",
            o.report.unfused.len(),
            o.report.new_nodes(),
            o.report.nchwc_block_size,
            counts(&after.model)
                .into_iter()
                .filter(|(k, _)| !k.starts_with("::"))
                .collect::<Vec<_>>()
        );
        worst = worst.max(e1).max(e2);
        nodes += o.report.unfused.len();
        models += 1;
    }
    eprintln!("ort_optimized: {models} models, {nodes} nodes unfused, worst error {worst:.3e}");
    assert_eq!(models, 6);
}

// ---------------------------------------------------------------------------------------------
// NCHWc regions made by ONNX Runtime from hand-built models: channel padding, depthwise,
// pools, Upsample (nearest and linear), Concat, the Reshape/Add pattern, channels-last
// reorders, BatchNormalization folded into a Conv.

const NCHWC_MODELS: &str = r#"
import sys, numpy as np, onnx, onnxruntime as ort
from onnx import helper as h, TensorProto as T, numpy_helper as nh
out = sys.argv[1]
rng = np.random.default_rng(0)
def W(name, shape): return nh.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)
def save(nodes, inputs, outputs, inits, name):
    g = h.make_graph(nodes, name, inputs, [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)]); m.ir_version = 8
    plain = f"{out}/{name}.onnx"; onnx.save(m, plain)
    so = ort.SessionOptions(); so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = f"{out}/{name}.ort_all.onnx"; so.log_severity_level = 3
    ort.InferenceSession(plain, so, providers=["CPUExecutionProvider"])
sc = nh.from_array(np.array([1, 1, 2, 2], np.float32), "sc")
save([
  h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
  h.make_node("Relu", ["c1"], ["r1"]),
  h.make_node("Conv", ["r1", "wd", "bd"], ["c2"], pads=[1, 1, 1, 1], group=24),
  h.make_node("Conv", ["c2", "w3", "b3"], ["c3"]),
  h.make_node("MaxPool", ["c3"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
  h.make_node("AveragePool", ["p1"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
  h.make_node("Resize", ["p2", "", "sc"], ["u1"], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
  h.make_node("Conv", ["u1", "w4", "b4"], ["c4"], pads=[1, 1, 1, 1]),
  h.make_node("Add", ["c4", "c3"], ["a1"]),
  h.make_node("Concat", ["a1", "c3"], ["cat"], axis=1),
  h.make_node("Conv", ["cat", "w5"], ["c5"]),
  h.make_node("GlobalMaxPool", ["c5"], ["gm"]),
  h.make_node("Sigmoid", ["gm"], ["s"]),
  h.make_node("Mul", ["c5", "s"], ["y"]),
  h.make_node("Resize", ["c5", "", "sc"], ["y2"], mode="linear", coordinate_transformation_mode="half_pixel"),
  h.make_node("Transpose", ["c5"], ["y3"], perm=[0, 2, 3, 1]),
  h.make_node("GlobalAveragePool", ["c3"], ["y4"]),
], [h.make_tensor_value_info("x", T.FLOAT, ["N", 8, "H", "W"])], ["y", "y2", "y3", "y4"],
  [W("w1", [24, 8, 3, 3]), W("b1", [24]), W("wd", [24, 1, 3, 3]), W("bd", [24]), W("w3", [32, 24, 1, 1]),
   W("b3", [32]), W("w4", [32, 32, 3, 3]), W("b4", [32]), W("w5", [48, 64, 1, 1]), sc], "nchwc_mix")
save([
  h.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
  h.make_node("Conv", ["xt", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
  h.make_node("BatchNormalization", ["c1", "s", "bb", "mm", "vv"], ["bn"]),
  h.make_node("Relu", ["bn"], ["r"]),
  h.make_node("Conv", ["r", "w2"], ["c2"], group=2),
  h.make_node("Conv", ["c2", "w3", "b3"], ["c3"]),
  h.make_node("Add", ["c3", "c2"], ["a"]),
  h.make_node("Relu", ["a"], ["y"]),
], [h.make_tensor_value_info("x", T.FLOAT, [1, "H", "W", 16])], ["y"],
  [W("w1", [32, 16, 3, 3]), W("b1", [32]), nh.from_array(rng.random(32).astype(np.float32) + 0.5, "s"),
   W("bb", [32]), W("mm", [32]), nh.from_array(rng.random(32).astype(np.float32) + 0.5, "vv"),
   W("w2", [64, 16, 1, 1]), W("w3", [64, 64, 1, 1]), W("b3", [64])], "nchwc_nhwc_in")
# This CPU's block size: the output channels of a 4-filter Conv, padded.
save([h.make_node("Conv", ["x", "w"], ["y"])], [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])], ["y"],
  [W("w", [4, 3, 3, 3])], "probe")
o = onnx.load(f"{out}/probe.ort_all.onnx")
print([t.dims[0] for t in o.graph.initializer if len(t.dims) == 4][0])
"#;

#[test]
fn nchwc_regions_made_by_onnx_runtime_convert_back() {
    if common::venv_python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gen = dir.path().join("gen");
    std::fs::create_dir_all(&gen).unwrap();
    let block: i64 = python(NCHWC_MODELS, &[gen.to_str().unwrap()])
        .trim()
        .parse()
        .unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    for name in ["nchwc_mix", "nchwc_nhwc_in"] {
        let optimized = gen.join(format!("{name}.ort_all.onnx"));
        let doc = onnx_safeify::load(&optimized).unwrap();
        let nchwc: Vec<String> = counts(&doc.model)
            .into_iter()
            .filter(|(k, _)| k.starts_with("com.microsoft.nchwc"))
            .map(|(k, c)| format!("{k} x{c}"))
            .collect();
        assert!(!nchwc.is_empty(), "{name}: ORT made no NCHWc region");
        // The mixed model shows its block size; the other is ambiguous without this CPU's.
        let hint = (name != "nchwc_mix").then_some(block);
        let o = unfuse_file(&optimized, &out, hint);
        assert!(
            o.report.unsupported.is_empty(),
            "{name}: {:#?}",
            o.report.unsupported
        );
        assert_eq!(o.report.nchwc_block_size, Some(block));
        let cmp = Cmp {
            shapes: if name == "nchwc_mix" {
                HashMap::from([("x", vec![2, 8, 12, 20])])
            } else {
                HashMap::from([("x", vec![1, 14, 10, 16])])
            },
            dim: 1,
            ..Default::default()
        };
        let e1 = compare(&optimized, &o.out, &cmp);
        let e2 = compare(&gen.join(format!("{name}.onnx")), &o.out, &cmp);
        eprintln!(
            "{name}: {nchwc:?} -> {} unfused, block {:?}, errors {e1:.3e} / {e2:.3e}",
            o.report.unfused.len(),
            o.report.nchwc_block_size
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-built models for attributes and configurations the corpus lacks.

fn vi(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    let mut v = common::vi(name, dims);
    if let Some(onnx_safeify::proto::type_proto::Value::TensorType(t)) =
        v.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.elem_type = Some(elem);
    }
    v
}

/// A float output of a known rank and unknown dims.
fn out_vi(name: &str, rank: usize) -> ValueInfoProto {
    use onnx_safeify::proto::{tensor_shape_proto, TensorShapeProto};
    let dim = |i: usize| tensor_shape_proto::Dimension {
        value: Some(tensor_shape_proto::dimension::Value::DimParam(format!(
            "{name}_{i}"
        ))),
        denotation: None,
    };
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(onnx_safeify::proto::TypeProto {
            value: Some(onnx_safeify::proto::type_proto::Value::TensorType(
                onnx_safeify::proto::type_proto::Tensor {
                    elem_type: Some(1),
                    shape: Some(TensorShapeProto {
                        dim: (0..rank).map(dim).collect(),
                    }),
                },
            )),
            denotation: None,
        }),
        ..Default::default()
    }
}

fn a_f(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}
fn a_i(name: &str, v: i64) -> AttributeProto {
    common::int_attr(name, v)
}
fn a_s(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::String as i32),
        s: Some(v.as_bytes().to_vec().into()),
        ..Default::default()
    }
}
fn a_fs(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Floats as i32),
        floats: v.to_vec(),
        ..Default::default()
    }
}
fn a_is(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn op(
    op: &str,
    domain: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    let mut n = common::node(op, &format!("{op}_{}", outputs[0]), inputs, outputs);
    if !domain.is_empty() {
        n.domain = Some(domain.into());
    }
    n.attribute = attrs;
    n
}

/// Deterministic pseudo-random weights.
fn weights(name: &str, dims: &[i64], seed: u32) -> TensorProto {
    let n: i64 = dims.iter().product();
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    let vals: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 2000) as f32 / 1000.0 - 1.0
        })
        .collect();
    common::float_init(name, dims, &vals)
}

struct Case {
    name: &'static str,
    opset: i64,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    /// Output names and ranks.
    outputs: Vec<(&'static str, usize)>,
    inits: Vec<TensorProto>,
    /// Ops to decompose even though they are standard at this opset.
    force: &'static [&'static str],
    /// A numpy reference when ONNX Runtime cannot run the original.
    reference: Option<&'static str>,
}

fn build(c: &Case) -> ModelProto {
    let mut m = common::model(GraphProto {
        node: c.nodes.clone(),
        name: Some(c.name.into()),
        input: c.inputs.clone(),
        output: c
            .outputs
            .iter()
            .map(|(o, r)| {
                let mut v = out_vi(o, *r);
                if c.name.starts_with("float16") {
                    if let Some(onnx_safeify::proto::type_proto::Value::TensorType(t)) =
                        v.r#type.as_mut().and_then(|t| t.value.as_mut())
                    {
                        t.elem_type = Some(10);
                    }
                }
                v
            })
            .collect(),
        initializer: c.inits.clone(),
        ..Default::default()
    });
    m.opset_import = vec![
        OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(c.opset),
        },
        OperatorSetIdProto {
            domain: Some("com.microsoft".into()),
            version: Some(1),
        },
    ];
    m
}

fn run_case(c: &Case, dir: &Path) -> (usize, f64) {
    let src = dir.join(format!("{}.onnx", c.name));
    std::fs::write(&src, common::encode(&build(c))).unwrap();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let force = c.force;
    let opset = c.opset;
    let before = output_sigs(&doc.model);
    let report = unfuse::unfuse_all(&mut doc.model, RULE, |n| {
        unfuse::is_fused(n, opset) || force.contains(&n.op_type.as_str())
    });
    assert!(
        report.unsupported.is_empty(),
        "{}: {:#?}",
        c.name,
        report.unsupported
    );
    assert!(!report.unfused.is_empty(), "{}: nothing unfused", c.name);
    check_model(&doc.model, opset, &report);
    for &n in &doc.model.graph.order {
        let nd = doc.model.graph.node(n);
        assert!(
            !force.contains(&nd.op_type.as_str()) && nd.domain().is_empty(),
            "{}: {} remains",
            c.name,
            nd.op_type
        );
    }
    assert_eq!(before, output_sigs(&doc.model));
    let out = dir.join(format!("{}.unfused.onnx", c.name));
    onnx_safeify::save(&doc, &out).unwrap();
    onnx_check(&out);
    let err = compare(
        &src,
        &out,
        &Cmp {
            dim: 3,
            reference: c.reference,
            rtol: if c.name.starts_with("float16") {
                5e-3
            } else {
                1e-4
            },
            ..Default::default()
        },
    );
    (report.unfused.len(), err)
}

fn f32_in(name: &str, dims: &[i64]) -> ValueInfoProto {
    vi(name, 1, dims)
}

fn cases() -> Vec<Case> {
    let ms = "com.microsoft";
    let mut v = vec![
        Case {
            name: "function_ops_opset18",
            opset: 18,
            nodes: vec![
                op("HardSwish", "", &["x"], &["hs"], vec![]),
                op("Mish", "", &["x"], &["mi"], vec![]),
                op(
                    "LayerNormalization",
                    "",
                    &["x", "g4", "b4"],
                    &["ln", "mean", "istd"],
                    vec![a_i("axis", 2), a_f("epsilon", 1e-3)],
                ),
                op(
                    "GroupNormalization",
                    "",
                    &["x", "gs", "gb"],
                    &["gn"],
                    vec![a_i("num_groups", 2), a_f("epsilon", 1e-4)],
                ),
            ],
            inputs: vec![f32_in("x", &[2, 4, 3, 5])],
            outputs: vec![
                ("hs", 4),
                ("mi", 4),
                ("ln", 4),
                ("mean", 4),
                ("istd", 4),
                ("gn", 4),
            ],
            inits: vec![
                weights("g4", &[3, 5], 1),
                weights("b4", &[3, 5], 2),
                weights("gs", &[2], 3),
                weights("gb", &[2], 4),
            ],
            force: &[
                "HardSwish",
                "Mish",
                "LayerNormalization",
                "GroupNormalization",
            ],
            reference: None,
        },
        Case {
            name: "group_norm_21_gelu_20",
            opset: 21,
            nodes: vec![
                op(
                    "GroupNormalization",
                    "",
                    &["x", "gs", "gb"],
                    &["gn"],
                    vec![a_i("num_groups", 2)],
                ),
                op("Gelu", "", &["x"], &["ge"], vec![]),
                op(
                    "Gelu",
                    "",
                    &["x"],
                    &["gt"],
                    vec![a_s("approximate", "tanh")],
                ),
            ],
            inputs: vec![f32_in("x", &[2, 4, 3, 5])],
            outputs: vec![("gn", 4), ("ge", 4), ("gt", 4)],
            inits: vec![weights("gs", &[4], 3), weights("gb", &[4], 4)],
            force: &["GroupNormalization", "Gelu"],
            reference: None,
        },
        Case {
            name: "fused_conv_variants_opset10",
            opset: 10,
            nodes: vec![
                op(
                    "FusedConv",
                    ms,
                    &["x", "w", "b", "z"],
                    &["c1"],
                    vec![
                        a_s("activation", "Clip"),
                        a_fs("activation_params", &[-0.5, 0.7]),
                        a_is("pads", &[1, 1, 1, 1]),
                    ],
                ),
                op(
                    "FusedConv",
                    ms,
                    &["x", "w"],
                    &["c2"],
                    vec![
                        a_s("activation", "LeakyRelu"),
                        a_fs("activation_params", &[0.3]),
                        a_is("strides", &[2, 2]),
                    ],
                ),
                op(
                    "FusedConv",
                    ms,
                    &["x", "wg", "bg"],
                    &["c3"],
                    vec![a_i("group", 2)],
                ),
            ],
            inputs: vec![f32_in("x", &[1, 4, 6, 6]), f32_in("z", &[1, 6, 6, 6])],
            outputs: vec![("c1", 4), ("c2", 4), ("c3", 4)],
            inits: vec![
                weights("w", &[6, 4, 3, 3], 5),
                weights("b", &[6], 6),
                weights("wg", &[6, 2, 1, 1], 7),
                weights("bg", &[6], 8),
            ],
            force: &[],
            reference: None,
        },
        Case {
            name: "fused_conv_clip_opset13",
            opset: 13,
            nodes: vec![op(
                "FusedConv",
                ms,
                &["x", "w", "b"],
                &["c1"],
                vec![
                    a_s("activation", "Clip"),
                    a_fs("activation_params", &[0.0, 0.5]),
                    a_s("auto_pad", "SAME_UPPER"),
                ],
            )],
            inputs: vec![f32_in("x", &[1, 4, 5, 5])],
            outputs: vec![("c1", 4)],
            inits: vec![weights("w", &[6, 4, 3, 3], 5), weights("b", &[6], 6)],
            force: &[],
            reference: None,
        },
        Case {
            name: "fused_gemm_and_matmul",
            opset: 13,
            nodes: vec![
                op(
                    "FusedGemm",
                    ms,
                    &["a", "bt", "c"],
                    &["g1"],
                    vec![
                        a_s("activation", "LeakyRelu"),
                        a_f("activation_alpha", 0.2),
                        a_i("transB", 1),
                        a_f("alpha", 0.7),
                        a_f("beta", 0.4),
                    ],
                ),
                op(
                    "FusedGemm",
                    ms,
                    &["a", "b"],
                    &["g2"],
                    vec![
                        a_s("activation", "HardSigmoid"),
                        a_f("activation_alpha", 0.3),
                        a_f("activation_beta", 0.4),
                    ],
                ),
                op(
                    "FusedMatMul",
                    ms,
                    &["p", "q"],
                    &["m1"],
                    vec![a_i("transBatchA", 1), a_i("transB", 1), a_f("alpha", 0.5)],
                ),
                op(
                    "FusedMatMul",
                    ms,
                    &["r", "q2"],
                    &["m2"],
                    vec![a_i("transA", 1), a_i("transBatchB", 1)],
                ),
            ],
            inputs: vec![
                f32_in("a", &[3, 5]),
                f32_in("c", &[4]),
                f32_in("p", &[3, 2, 4, 5]),
                f32_in("q", &[2, 4, 6, 5]),
                f32_in("r", &[2, 4, 5, 6]),
            ],
            outputs: vec![("g1", 2), ("g2", 2), ("m1", 4), ("m2", 4)],
            inits: vec![
                weights("bt", &[4, 5], 9),
                weights("b", &[5, 4], 10),
                weights("q2", &[5, 2, 4, 3], 11),
            ],
            force: &[],
            reference: None,
        },
        Case {
            name: "gelus_and_norms",
            opset: 13,
            nodes: vec![
                op("FastGelu", ms, &["x"], &["fg"], vec![]),
                op("QuickGelu", ms, &["x"], &["qg"], vec![]),
                op("BiasGelu", ms, &["x", "bias"], &["bg"], vec![]),
                op(
                    "SkipLayerNormalization",
                    ms,
                    &["x", "s", "gamma", "", "bias"],
                    // (A read `mean` output keeps the node: see layer_norm.rs.)
                    &["sl", "", "sli", "sls"],
                    vec![a_f("epsilon", 1e-5)],
                ),
                op(
                    "SkipSimplifiedLayerNormalization",
                    ms,
                    &["x", "s", "gamma", "bias"],
                    &["ss", "", "ssi", "sss"],
                    vec![],
                ),
                op(
                    "SimplifiedLayerNormalization",
                    "",
                    &["x", "gamma"],
                    &["rms", "rmsi"],
                    vec![a_f("epsilon", 1e-6)],
                ),
                op("LayerNormalization", "", &["x", "gamma"], &["ln"], vec![]),
            ],
            inputs: vec![f32_in("x", &[2, 3, 8]), f32_in("s", &[2, 3, 8])],
            outputs: [
                "fg", "qg", "bg", "sl", "sli", "sls", "ss", "ssi", "sss", "rms", "rmsi", "ln",
            ]
            .iter()
            .map(|n| (*n, 3))
            .collect(),
            inits: vec![weights("bias", &[8], 12), weights("gamma", &[8], 13)],
            force: &[],
            reference: None,
        },
        Case {
            name: "attention_mask_causal",
            opset: 13,
            nodes: vec![
                op(
                    "Attention",
                    ms,
                    &["h", "wqkv", "bqkv", "mask"],
                    &["y1"],
                    vec![a_i("num_heads", 2)],
                ),
                op(
                    "Attention",
                    ms,
                    &["h", "wqkv"],
                    &["y2"],
                    vec![
                        a_i("num_heads", 4),
                        a_i("unidirectional", 1),
                        a_f("scale", 0.3),
                    ],
                ),
                op(
                    "MultiHeadAttention",
                    ms,
                    &["q", "k", "v", "mb", "kmask"],
                    &["y3"],
                    vec![a_i("num_heads", 2)],
                ),
            ],
            inputs: vec![
                f32_in("h", &[2, 5, 8]),
                vi("mask", 6, &[2, 5]),
                f32_in("q", &[2, 3, 8]),
                f32_in("k", &[2, 5, 8]),
                f32_in("v", &[2, 5, 6]),
                vi("kmask", 6, &[2, 5]),
            ],
            outputs: vec![("y1", 3), ("y2", 3), ("y3", 3)],
            inits: vec![
                weights("wqkv", &[8, 24], 14),
                weights("bqkv", &[24], 15),
                weights("mb", &[22], 16),
            ],
            force: &[],
            reference: None,
        },
    ];
    // float16: constants in the input's type, statistics in float (stash_type 1).
    v.push(Case {
        name: "float16_gelu_layernorm",
        opset: 20,
        nodes: vec![
            op(
                "Gelu",
                "",
                &["x"],
                &["ge"],
                vec![a_s("approximate", "tanh")],
            ),
            op(
                "LayerNormalization",
                "",
                &["x", "g16", "b16"],
                &["ln"],
                vec![a_f("epsilon", 1e-3)],
            ),
        ],
        inputs: vec![vi("x", 10, &[2, 3, 8])],
        outputs: vec![("ge", 3), ("ln", 3)],
        inits: vec![
            TensorProto {
                dims: vec![8],
                data_type: Some(10),
                name: Some("g16".into()),
                // 1.0, 0.5, 2.0, -1.0 twice
                raw_data: Some(
                    [
                        0x3c00u16, 0x3800, 0x4000, 0xbc00, 0x3c00, 0x3800, 0x4000, 0xbc00,
                    ]
                    .iter()
                    .flat_map(|h| h.to_le_bytes())
                    .collect::<Vec<u8>>()
                    .into(),
                ),
                ..Default::default()
            },
            TensorProto {
                dims: vec![8],
                data_type: Some(10),
                name: Some("b16".into()),
                raw_data: Some(vec![0u8; 16].into()),
                ..Default::default()
            },
        ],
        force: &["Gelu", "LayerNormalization"],
        reference: None,
    });
    // BiasSoftmax has no CPU kernel: numpy softmax over axes 1.. of x + b.
    v.push(Case {
        name: "bias_softmax_axis",
        opset: 13,
        nodes: vec![op(
            "BiasSoftmax",
            ms,
            &["x", "b"],
            &["y"],
            vec![a_i("axis", 1), a_i("is_inner_broadcast", 0)],
        )],
        inputs: vec![f32_in("x", &[2, 3, 4]), f32_in("b", &[2, 3, 4])],
        outputs: vec![("y", 3)],
        inits: vec![],
        force: &[],
        reference: Some(
            "(lambda e: e / e.sum(axis=(1, 2), keepdims=True))(np.exp((f['x'] + f['b']) - (f['x'] + f['b']).max(axis=(1, 2), keepdims=True)))",
        ),
    });
    v
}

#[test]
fn hand_built_models_decompose_and_match() {
    if common::venv_python().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut worst: f64 = 0.0;
    let mut total = 0;
    for c in cases() {
        let (n, err) = run_case(&c, dir.path());
        eprintln!(
            "{}: {n} node(s) unfused, worst relative error {err:.3e}",
            c.name
        );
        worst = worst.max(err);
        total += n;
    }
    eprintln!("hand-built: {total} nodes unfused, worst error {worst:.3e}");
}

// ---------------------------------------------------------------------------------------------
// Refusals: reasons, no panics, nothing changed.

#[test]
fn unsupported_configurations_are_reported_with_reasons() {
    let ms = "com.microsoft";
    let c = Case {
        name: "refusals",
        opset: 13,
        nodes: vec![
            op(
                "Attention",
                ms,
                &["h", "w", "", "", "past"],
                &["y1", "present"],
                // Past state decomposes; a past/present buffer shared in place does not.
                vec![a_i("num_heads", 2), a_i("past_present_share_buffer", 1)],
            ),
            op(
                "FusedConv",
                ms,
                &["x", "wc"],
                &["y2"],
                vec![a_s("activation", "Gelu")],
            ),
            op(
                "FusedMatMul",
                ms,
                &["u", "u"],
                &["y3"],
                vec![a_i("transA", 1)],
            ),
            op("Softmax", "", &["y3"], &["y4"], vec![]),
        ],
        inputs: vec![
            f32_in("h", &[1, 2, 4]),
            f32_in("past", &[2, 1, 2, 1, 2]),
            f32_in("x", &[1, 2, 3, 3]),
            ValueInfoProto {
                name: Some("u".into()),
                r#type: Some(onnx_safeify::proto::TypeProto {
                    value: Some(onnx_safeify::proto::type_proto::Value::TensorType(
                        onnx_safeify::proto::type_proto::Tensor {
                            elem_type: Some(1),
                            shape: None,
                        },
                    )),
                    denotation: None,
                }),
                ..Default::default()
            },
        ],
        outputs: vec![("y1", 3), ("present", 5), ("y2", 4), ("y4", 2)],
        inits: vec![weights("w", &[4, 12], 1), weights("wc", &[2, 2, 1, 1], 2)],
        force: &[],
        reference: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("refusals.onnx");
    std::fs::write(&src, common::encode(&build(&c))).unwrap();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let before = onnx_safeify::ir::dump::dump_model(&doc.model);
    let report = unfuse::unfuse_all(&mut doc.model, RULE, |n| unfuse::is_fused(n, 13));
    assert!(report.unfused.is_empty(), "{:?}", report.unfused);
    let reasons: Vec<(String, String)> = report
        .unsupported
        .iter()
        .map(|s| (s.op_type.clone(), s.reason.clone()))
        .collect();
    eprintln!("{reasons:#?}");
    assert_eq!(reasons.len(), 3);
    assert!(reasons[0].1.contains("past"));
    assert!(reasons[1].1.contains("Gelu"));
    assert!(reasons[2].1.contains("rank"));
    assert_eq!(before, onnx_safeify::ir::dump::dump_model(&doc.model));
    // A node with no decomposition.
    let g = &doc.model.graph;
    let softmax = *g
        .order
        .iter()
        .find(|&&n| g.node(n).op_type == "Softmax")
        .unwrap();
    let facts = onnx_safeify::infer::infer_model(&doc.model, &Default::default());
    let ctx = unfuse::UnfuseCtx::new(13, RULE, &facts);
    assert!(unfuse::unfuse_node(&ctx, g, softmax)
        .unwrap_err()
        .reason
        .contains("no decomposition"));
    assert!(!unfuse::can_unfuse("", "Softmax"));
    assert!(unfuse::can_unfuse("com.microsoft", "QuickGelu"));
    assert!(unfuse::can_unfuse("com.microsoft.nchwc", "ReorderInput"));
}

#[test]
fn an_ambiguous_nchwc_block_size_leaves_the_region_whole() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let src = corpus.join("ort_optimized/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.ort_all.onnx");
    let mut doc = onnx_safeify::load(&src).unwrap();
    // The other block size does not fit this model (made on this machine): every NCHWc node
    // is refused, none changed.
    let wrong = 24 - this_cpu_nchwc_block();
    let report = unfuse::unfuse_all_with(
        &mut doc.model,
        &UnfuseOptions {
            rule: RULE,
            external: None,
            nchwc_block_size: Some(wrong),
            unpack: None,
            computed: None,
            profile: None,
        },
        |n| n.domain() == unfuse::NCHWC_DOMAIN,
    );
    assert!(report.unfused.is_empty());
    assert!(!report.unsupported.is_empty());
    assert!(
        report.unsupported[0]
            .reason
            .contains(&format!("block size {wrong}")),
        "{:?}",
        report.unsupported[0]
    );
    assert!(doc
        .model
        .graph
        .order
        .iter()
        .any(|&n| doc.model.graph.node(n).domain() == unfuse::NCHWC_DOMAIN));
}

/// Manual tool: `UNFUSE_IN=model.onnx UNFUSE_OUT=dir cargo test --test unfuse_models -- --ignored unfuse_one`.
#[test]
#[ignore]
fn unfuse_one() {
    let (Some(src), Some(out)) = (
        std::env::var_os("UNFUSE_IN"),
        std::env::var_os("UNFUSE_OUT"),
    ) else {
        return;
    };
    let block = std::env::var("UNFUSE_BLOCK")
        .ok()
        .and_then(|b| b.parse().ok());
    let o = unfuse_file(Path::new(&src), Path::new(&out), block);
    eprintln!("{:#?}", o.report.unsupported);
    eprintln!("{} unfused -> {}", o.report.unfused.len(), o.out.display());
}

// ---------------------------------------------------------------------------------------------
// Operator forms follow the model's opset.

fn unfused_ops(c: &Case) -> Vec<NodeProto> {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("m.onnx");
    std::fs::write(&src, common::encode(&build(c))).unwrap();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let report = unfuse::unfuse_all(&mut doc.model, RULE, |n| unfuse::is_fused(n, c.opset));
    assert!(report.unsupported.is_empty(), "{:?}", report.unsupported);
    onnx_safeify::export::export_model(&doc.model)
        .graph
        .unwrap()
        .node
}

#[test]
fn decompositions_use_the_forms_of_the_model_opset() {
    let ms = "com.microsoft";
    let case = |opset: i64| Case {
        name: "forms",
        opset,
        nodes: vec![
            op(
                "SkipLayerNormalization",
                ms,
                &["x", "x", "g"],
                &["y"],
                vec![],
            ),
            op(
                "FusedConv",
                ms,
                &["c", "w"],
                &["z"],
                vec![
                    a_s("activation", "Clip"),
                    a_fs("activation_params", &[0.0, 6.0]),
                ],
            ),
        ],
        inputs: vec![f32_in("x", &[1, 2, 4]), f32_in("c", &[1, 2, 3, 3])],
        outputs: vec![("y", 3), ("z", 4)],
        inits: vec![weights("g", &[4], 1), weights("w", &[2, 2, 1, 1], 2)],
        force: &[],
        reference: None,
    };
    let find = |nodes: &[NodeProto], op: &str| -> NodeProto {
        nodes
            .iter()
            .find(|n| n.op_type.as_deref() == Some(op))
            .cloned()
            .unwrap_or_else(|| panic!("no {op}"))
    };
    let has_attr =
        |n: &NodeProto, a: &str| n.attribute.iter().any(|x| x.name.as_deref() == Some(a));
    // Opset 10: ReduceMean axes attribute, Clip bounds attributes.
    let n10 = unfused_ops(&case(10));
    let rm = find(&n10, "ReduceMean");
    assert!(has_attr(&rm, "axes") && rm.input.len() == 1);
    let clip = find(&n10, "Clip");
    assert!(has_attr(&clip, "min") && has_attr(&clip, "max") && clip.input.len() == 1);
    // Opset 13: Clip bounds as inputs, ReduceMean axes still an attribute.
    let n13 = unfused_ops(&case(13));
    assert!(has_attr(&find(&n13, "ReduceMean"), "axes"));
    assert_eq!(find(&n13, "Clip").input.len(), 3);
    // Opset 18: ReduceMean axes as an input.
    let n18 = unfused_ops(&case(18));
    let rm = find(&n18, "ReduceMean");
    assert!(!has_attr(&rm, "axes") && rm.input.len() == 2);
}

// ---------------------------------------------------------------------------------------------
// Subgraphs.

fn graph_attr(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(Box::new(g)),
        ..Default::default()
    }
}

fn branch(name: &str, nodes: Vec<NodeProto>, out: &str) -> GraphProto {
    GraphProto {
        node: nodes,
        name: Some(name.into()),
        output: vec![out_vi(out, 3)],
        ..Default::default()
    }
}

#[test]
fn fused_nodes_inside_subgraphs_are_decomposed() {
    if common::venv_python().is_none() {
        return;
    }
    let ms = "com.microsoft";
    let then_b = branch(
        "then",
        vec![op("QuickGelu", ms, &["x"], &["t"], vec![a_f("alpha", 1.5)])],
        "t",
    );
    let else_b = branch("else", vec![op("Relu", "", &["x"], &["e"], vec![])], "e");
    let c = Case {
        name: "subgraph",
        opset: 13,
        nodes: vec![op(
            "If",
            "",
            &["cond"],
            &["y"],
            vec![
                graph_attr("then_branch", then_b),
                graph_attr("else_branch", else_b),
            ],
        )],
        // The condition is a constant true: ONNX Runtime runs the branch with the fused node.
        inputs: vec![f32_in("x", &[2, 3, 4])],
        outputs: vec![("y", 3)],
        inits: vec![TensorProto {
            data_type: Some(9),
            name: Some("cond".into()),
            raw_data: Some(vec![1u8].into()),
            ..Default::default()
        }],
        force: &[],
        reference: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("sub.onnx");
    std::fs::write(&src, common::encode(&build(&c))).unwrap();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let report = unfuse::unfuse_all(&mut doc.model, RULE, |n| unfuse::is_fused(n, 13));
    assert!(report.unsupported.is_empty(), "{:?}", report.unsupported);
    assert_eq!(report.unfused.len(), 1);
    assert_eq!(report.unfused[0].graph, "If_y/then_branch");
    let out = dir.path().join("sub.unfused.onnx");
    onnx_safeify::save(&doc, &out).unwrap();
    onnx_check(&out);
    let text = python(
        "import sys, onnx; m = onnx.load(sys.argv[1]); print([n.op_type for n in m.graph.node[0].attribute[0].g.node])",
        &[out.to_str().unwrap()],
    );
    assert!(
        text.contains("Sigmoid") && !text.contains("QuickGelu"),
        "{text}"
    );
    let err = compare(&src, &out, &Cmp::default());
    eprintln!("subgraph: worst relative error {err:.3e}");
}

/// A fused node whose output both branches read by name is decomposed; the replacement takes
/// the name over, so the branches still read `q` (issue 12; before, this was refused).
#[test]
fn an_output_read_by_a_subgraph_keeps_its_name() {
    let ms = "com.microsoft";
    let then_b = branch("then", vec![op("Relu", "", &["q"], &["t"], vec![])], "t");
    let else_b = branch("else", vec![op("Neg", "", &["q"], &["e"], vec![])], "e");
    let c = Case {
        name: "outer_read",
        opset: 13,
        nodes: vec![
            op("QuickGelu", ms, &["x"], &["q"], vec![]),
            op(
                "If",
                "",
                &["cond"],
                &["y"],
                vec![
                    graph_attr("then_branch", then_b),
                    graph_attr("else_branch", else_b),
                ],
            ),
        ],
        inputs: vec![f32_in("x", &[2, 3, 4]), vi("cond", 9, &[])],
        outputs: vec![("y", 3)],
        inits: vec![],
        force: &[],
        reference: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("outer.onnx");
    std::fs::write(&src, common::encode(&build(&c))).unwrap();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let report = unfuse::unfuse_all(&mut doc.model, RULE, |n| unfuse::is_fused(n, 13));
    assert!(report.unsupported.is_empty(), "{:?}", report.unsupported);
    assert_eq!(report.unfused.len(), 1);
    assert_eq!(report.unfused[0].node, "QuickGelu_q");
    let g = &doc.model.graph;
    let q = g
        .values
        .iter()
        .find(|v| &*v.name == "q")
        .expect("q is still defined");
    let onnx_safeify::ir::Origin::Node { node, .. } = q.origin else {
        panic!("q has no producer")
    };
    assert_eq!(
        g.node(node).op_type,
        "Mul",
        "the decomposition's last node produces q"
    );
    let out = dir.path().join("outer.unfused.onnx");
    onnx_safeify::save(&doc, &out).unwrap();
    onnx_check(&out);
    let err = compare(&src, &out, &Cmp::default());
    eprintln!("outer-scope read: worst relative error {err:.3e}");
}
