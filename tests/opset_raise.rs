//! Raising the default-domain opset for the packed MatMulNBits decomposition (issue 36):
//! the version table is ONNX's own, a raised model computes bit-identically on ONNX Runtime CPU,
//! an opset-17 int4 decoder compiled for rx580 comes out at opset 21 with its MatMulNBits packed
//! and verifies, a model with a node whose meaning the raise would change keeps its opset (and
//! says why), and a target that leaves MatMulNBits alone leaves the opset alone.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use onnx_safeify::rewrite::opset::{self, Change, VERSIONS};
use onnx_safeify::rewrite::unfuse::matmul_nbits::FORM_KEY;

fn python(args: &[&str]) -> String {
    let py = common::venv_python().expect("the test venv (scripts/corpus.sh)");
    let o = Command::new(py).args(args).output().expect("python runs");
    assert!(
        o.status.success(),
        "python {:?} failed:\n{}\n{}",
        args,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn skip() -> bool {
    if common::venv_python().is_none() {
        eprintln!(
            "SKIPPED: no test venv (onnx, onnxruntime, numpy): ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1"
        );
        return true;
    }
    false
}

fn run(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(common::bin()).args(args).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn every_change_from_14_to_21_is_classified() {
    for (op, vs) in VERSIONS {
        for &v in vs.iter().skip(1).filter(|&&v| (14..=21).contains(&v)) {
            assert_ne!(opset::change(op, v), Change::Unreviewed, "{op}-{v}");
        }
    }
    assert!(VERSIONS.windows(2).all(|w| w[0].0 < w[1].0), "sorted");
    assert_eq!(opset::versions("ReduceMean"), Some(&[1, 11, 13, 18][..]));
    assert_eq!(opset::versions("SimplifiedLayerNormalization"), None);
}

#[test]
fn the_version_table_is_onnx_own() {
    if skip() {
        return;
    }
    let script = r#"
import json
from onnx import defs
ops = {}
for s in defs.get_all_schemas_with_history():
    if s.domain in ("", "ai.onnx") and s.since_version <= 21:
        ops.setdefault(s.name, set()).add(s.since_version)
print(json.dumps({k: sorted(v) for k, v in ops.items()}))
"#;
    let out = python(&["-c", script]);
    let onnx: std::collections::BTreeMap<String, Vec<i64>> = serde_json::from_str(&out).unwrap();
    let ours: std::collections::BTreeMap<String, Vec<i64>> = VERSIONS
        .iter()
        .map(|(o, v)| (o.to_string(), v.to_vec()))
        .collect();
    assert_eq!(ours, onnx);
}

/// A model at `opset` with the operators whose schema changes between 13 and 21 in every way
/// the raise handles: Reduce* with and without `axes`, Split without `split`, RoiAlign without
/// its mode, BatchNormalization, Resize, Pad, pools, LSTM, quantizers, ScatterElements...
const BUILD: &str = r#"
import sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
path, opset = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
inits = []
def c(name, arr):
    inits.append(nh.from_array(np.asarray(arr), name))
    return name
f32 = lambda *s: rng.standard_normal(s).astype(np.float32)
nodes = [
    h.make_node("ReduceMean", ["X"], ["rmean"], axes=[2, 3], keepdims=1),
    h.make_node("ReduceSumSquare", ["X"], ["rss"], axes=[1], keepdims=0),
    h.make_node("ReduceMax", ["X"], ["rmax"], keepdims=0),
    h.make_node("ReduceL2", ["X"], ["rl2"], axes=[-1]),
    h.make_node("ReduceLogSumExp", ["X"], ["rlse"], axes=[1]),
    h.make_node("ReduceProd", ["X"], ["rprod"], axes=[3], keepdims=0),
    h.make_node("Split", ["X"], ["s0", "s1"], axis=1),
    h.make_node("BatchNormalization", ["X", c("bs", f32(4)), c("bb", f32(4)), c("bm", f32(4)),
                c("bv", np.abs(f32(4)) + 0.5)], ["bn"]),
    h.make_node("RoiAlign", ["X", c("rois", np.array([[0, 0, 7, 7], [1, 1.5, 5, 6]], np.float32)),
                c("bi", np.array([0, 0], np.int64))], ["roi"], output_height=3, output_width=3,
                sampling_ratio=2),
    h.make_node("Resize", ["X", "", c("scales", np.array([1, 1, 2, 1.5], np.float32))], ["rz"],
                mode="linear"),
    h.make_node("Pad", ["X", c("pads", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))], ["pd"],
                mode="reflect"),
    h.make_node("LpPool", ["X"], ["lp"], kernel_shape=[2, 2], p=2),
    h.make_node("CumSum", ["X", c("csax", np.array(2, np.int64))], ["cs"]),
    h.make_node("QuantizeLinear", ["X", c("qs", np.float32(0.05)), c("qz", np.uint8(128))], ["q"]),
    h.make_node("DequantizeLinear", ["q", "qs", "qz"], ["dq"]),
    h.make_node("Shape", ["X"], ["sh"]),
    h.make_node("Reshape", ["X", c("shp", np.array([8, 1, 32], np.int64))], ["seq"]),
    h.make_node("LSTM", ["seq", c("W", f32(1, 12, 32) * 0.2), c("R", f32(1, 12, 3) * 0.2),
                c("B", f32(1, 24) * 0.1)], ["lstm"], hidden_size=3),
    h.make_node("LeakyRelu", ["X"], ["lrelu"], alpha=0.1),
    h.make_node("Relu", ["X"], ["relu"]),
    h.make_node("ScatterElements", ["X", c("idx", np.zeros((1, 4, 1, 8), np.int64)),
                c("upd", f32(1, 4, 1, 8))], ["se"], axis=2),
    h.make_node("Where", [c("cond", rng.random((1, 4, 8, 8)) > 0.5), "X", "relu"], ["wh"]),
    h.make_node("Cast", ["X"], ["half"], to=T.FLOAT16),
    h.make_node("Softmax", ["X"], ["sm"], axis=1),
]
outs = ["rmean", "rss", "rmax", "rl2", "rlse", "rprod", "s0", "s1", "bn", "roi", "rz", "pd", "lp", "cs", "dq", "sh", "lstm", "lrelu", "se", "wh", "half", "sm"]
g = h.make_graph(nodes, "g", [h.make_tensor_value_info("X", T.FLOAT, [1, 4, 8, 8])],
                 [h.make_empty_tensor_value_info(o) for o in outs], inits)
m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
m.ir_version = 8
typed = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
del m.graph.output[:]
m.graph.output.extend(typed[o] for o in outs)
onnx.checker.check_model(m, full_check=True)
onnx.save(m, path)
"#;

/// Check `raised` with onnx.checker and run both on ONNX Runtime CPU: every output's bytes equal.
const COMPARE: &str = r#"
import sys, numpy as np, onnx, onnxruntime as ort
a, b = sys.argv[1], sys.argv[2]
onnx.checker.check_model(onnx.load(b), full_check=True)
x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
ra = ort.InferenceSession(a, providers=["CPUExecutionProvider"]).run(None, {"X": x})
sb = ort.InferenceSession(b, providers=["CPUExecutionProvider"])
rb = sb.run(None, {"X": x})
names = [o.name for o in sb.get_outputs()]
bad = [n for n, p, q in zip(names, ra, rb) if p.shape != q.shape or p.dtype != q.dtype
       or p.tobytes() != q.tobytes()]
print(len(names), ",".join(bad))
"#;

#[test]
fn a_raised_model_computes_bit_identically_on_ort_cpu() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let build = dir.path().join("build.py");
    let compare = dir.path().join("compare.py");
    std::fs::write(&build, BUILD).unwrap();
    std::fs::write(&compare, COMPARE).unwrap();
    for from in [13, 17] {
        let src = dir.path().join(format!("m{from}.onnx"));
        python(&[
            build.to_str().unwrap(),
            src.to_str().unwrap(),
            &from.to_string(),
        ]);
        let mut doc = onnx_safeify::load(&src).unwrap();
        assert_eq!(opset::blocker(&doc.model, 21), None);
        let r = opset::raise(&mut doc.model, 21).unwrap();
        assert_eq!((r.from, r.to), (from, 21));
        // ReduceMean, ReduceSumSquare, ReduceL2, ReduceLogSumExp, ReduceProd (ReduceMax has
        // no axes); the Split without `split`; the RoiAlign (its mode changed at 16).
        assert_eq!(r.axes_inputs, 5, "{r:?}");
        assert_eq!(r.split_counts, 1, "{r:?}");
        assert_eq!(r.roi_modes, usize::from(from < 16), "{r:?}");
        assert_eq!(doc.model.opset(""), Some(21));
        assert_eq!(doc.model.ir_version, Some(10));
        let out = dir.path().join(format!("m{from}_raised.onnx"));
        onnx_safeify::save(&doc, &out).unwrap();
        let verdict = python(&[
            compare.to_str().unwrap(),
            src.to_str().unwrap(),
            out.to_str().unwrap(),
        ]);
        assert_eq!(
            verdict, "22",
            "from opset {from}: outputs that differ: {verdict}"
        );
        eprintln!(
            "opset {from} -> 21: 22 outputs bit-identical ({})",
            r.rewrites()
        );
    }
}

#[test]
fn operators_whose_meaning_changes_block_the_raise() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import sys, onnx
from onnx import helper as h, TensorProto as T
path, op, opset = sys.argv[1], sys.argv[2], int(sys.argv[3])
ins = {"AveragePool": ["X"], "GridSample": ["X", "G"], "GroupNormalization": ["X", "S", "B"], "LayerNormalization": ["X", "S"],
       "DFT": ["X"], "BatchNormalization": ["X", "S", "B", "S", "S"]}[op]
outs = ["Y", "m", "v"] if op == "BatchNormalization" else ["Y"]
attrs = {"GroupNormalization": {"num_groups": 2}, "AveragePool": {"kernel_shape": [2, 2]}}.get(op, {})
n = h.make_node(op, ins, outs, name="the_node", **attrs)
g = h.make_graph([n], "g", [h.make_tensor_value_info(i, T.FLOAT, None) for i in dict.fromkeys(ins)],
                 [h.make_tensor_value_info(o, T.FLOAT, None) for o in outs])
onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", opset)]), path)
"#;
    for (op, from, why) in [
        ("GridSample", 17, "renamed its modes"),
        ("GroupNormalization", 18, "per channel"),
        ("DFT", 17, "`axis` as an input"),
        ("LayerNormalization", 16, "not an ONNX operator at opset 16"),
        ("BatchNormalization", 13, "training outputs"),
        ("AveragePool", 17, "rounds differently"),
    ] {
        let p = dir.path().join(format!("{op}.onnx"));
        python(&["-c", script, p.to_str().unwrap(), op, &from.to_string()]);
        let mut doc = onnx_safeify::load(&p).unwrap();
        let e = opset::raise(&mut doc.model, 21).unwrap_err();
        assert!(e.contains("'the_node'") && e.contains(why), "{op}: {e}");
        assert_eq!(doc.model.opset(""), Some(from), "{op}: left as it was");
    }
}

/// tools/make_llm.py's tiny decoder at `opset` in `dir`, and one prefill's inputs.
fn tiny_llm(dir: &Path, opset: i64) -> (PathBuf, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let folder = dir.join(format!("llm{opset}"));
    python(&[
        root.join("tools/make_llm.py").to_str().unwrap(),
        folder.to_str().unwrap(),
        "--size",
        "tiny",
        "--opset",
        &opset.to_string(),
    ]);
    let inputs = dir.join("prefill.npz");
    let script = r#"
import sys, numpy as np
f = {"input_ids": np.array([[1, 5, 9, 3]], np.int64), "attention_mask": np.ones((1, 4), np.int64)}
for i in range(2):
    for k in ("key", "value"):
        f[f"past_key_values.{i}.{k}"] = np.zeros((1, 2, 0, 32), np.float16)
np.savez(sys.argv[1], **f)
"#;
    python(&["-c", script, inputs.to_str().unwrap()]);
    (folder.join("model.onnx"), inputs)
}

fn forms(path: &Path) -> Vec<String> {
    let doc = onnx_safeify::load(path).unwrap();
    let g = &doc.model.graph;
    g.order
        .iter()
        .filter_map(|&n| g.node(n).metadata(FORM_KEY).map(str::to_string))
        .collect()
}

#[test]
fn an_opset_17_int4_decoder_comes_out_at_21_packed_and_verifies() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (model, inputs) = tiny_llm(dir.path(), 17);
    let out = dir.path().join("out/model.onnx");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let m = model.to_str().unwrap();
    let o = out.to_str().unwrap();
    let (code, err) = run(&[m, "--target", "rx580", "-o", o]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("note: opset raised 17 → 21 for the packed MatMulNBits decomposition"),
        "{err}"
    );
    assert!(!err.contains("fell back"), "{err}");
    let doc = onnx_safeify::load(&out).unwrap();
    assert_eq!(doc.model.opset(""), Some(21));
    let f = forms(&out);
    // 7 projections per layer, 2 layers, and the lm_head.
    assert_eq!(f.len(), 15, "{f:?}");
    assert!(f.iter().all(|f| f.starts_with("packed")), "{f:?}");
    // The raise alone (no decomposition) computes bit-identically on ONNX Runtime CPU.
    let mut doc = onnx_safeify::load(&model).unwrap();
    opset::raise(&mut doc.model, 21).unwrap();
    let raised = dir.path().join("raised/model.onnx");
    std::fs::create_dir_all(raised.parent().unwrap()).unwrap();
    onnx_safeify::save(&doc, &raised).unwrap();
    let script = r#"
import sys, numpy as np, onnxruntime as ort
feed = dict(np.load(sys.argv[3]))
a, b = (ort.InferenceSession(p, providers=["CPUExecutionProvider"]).run(None, feed) for p in sys.argv[1:3])
print(sum(x.tobytes() != y.tobytes() for x, y in zip(a, b)), len(a))
"#;
    let verdict = python(&[
        "-c",
        script,
        m,
        raised.to_str().unwrap(),
        inputs.to_str().unwrap(),
    ]);
    assert_eq!(verdict, "0 5", "outputs that differ, of all");
    // At its class (rounding) against the original, on one prefill step.
    let (code, err) = run(&["verify", m, o, "--inputs", inputs.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    // `check` sees what the compile does: nothing falls back.
    let (code, err) = run(&["check", m, "--target", "rx580"]);
    assert!(
        !err.contains("falls back") && !err.contains("fall back"),
        "{code:?} {err}"
    );

    // --keep-opset: unpacked below 21, the weights read from the external data within the
    // output's size bound (here 64 MiB: the tiny model may grow freely).
    let kept = dir.path().join("kept/model.onnx");
    std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
    let (code, err) = run(&[
        m,
        "--target",
        "rx580",
        "--keep-opset",
        "-o",
        kept.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("opset raised"), "{err}");
    assert!(!err.contains("fell back"), "{err}");
    assert_eq!(onnx_safeify::load(&kept).unwrap().model.opset(""), Some(17));
    let f = forms(&kept);
    assert_eq!(f.len(), 15, "{f:?}");
    assert!(
        f.iter()
            .all(|f| f.starts_with("unpacked (default-domain opset 17 < 21)")),
        "{f:?}"
    );
    let k = kept.to_str().unwrap();
    let (code, err) = run(&["verify", m, k, "--inputs", inputs.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    // A bound of 1.5x the input: what would pass it is unpacked, the rest falls back with the
    // reason (the output stays within the bound).
    std::fs::remove_dir_all(kept.parent().unwrap()).unwrap();
    std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
    let (code, err) = run(&[
        m,
        "--target",
        "rx580",
        "--keep-opset",
        "--allow-growth",
        "1.5",
        "-o",
        k,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("fell back") && err.contains("this compile may add"),
        "{err}"
    );
    let f = forms(&kept);
    assert!(!f.is_empty() && f.len() < 15, "{f:?}");
}

/// The unpacked weights are written as they are computed, never whole in memory, and are the
/// bytes the in-memory unpacking wrote: the decomposition with its weights computed into memory
/// and with them left to the writer saves byte-identical files, and the command's --keep-opset
/// output is the encoding of the same compile's model with each weight materialized, which
/// verifies on ONNX Runtime CPU. A model's payloads leave the process's table with it.
#[test]
fn unpacked_weights_computed_while_written_are_the_in_memory_bytes() {
    use onnx_safeify::io::computed;
    use onnx_safeify::rewrite::unfuse::{self, UnfuseOptions};
    use prost::Message;
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (model, inputs) = tiny_llm(dir.path(), 17);
    let is_nbits = |n: &onnx_safeify::ir::Node| n.op_type == "MatMulNBits";
    // (the saved model file, a marker of its weights when they were computed)
    let unpack = |streamed: bool, name: &str| {
        let mut doc = onnx_safeify::load(&model).unwrap();
        let scope = doc.model.computed.clone();
        let opts = UnfuseOptions {
            rule: "test-unpack",
            external: Some(&doc.source.external),
            computed: streamed.then_some(&scope),
            ..Default::default()
        };
        let mut m = std::mem::take(&mut doc.model);
        let report = unfuse::unfuse_all_with(&mut m, &opts, is_nbits);
        doc.model = m;
        assert_eq!(report.unfused.len(), 15, "{:?}", report.unsupported);
        assert_eq!(scope.len(), if streamed { 15 } else { 0 });
        let g = &doc.model.graph;
        let marker = g
            .initializers
            .iter()
            .map(|i| i.tensor.to_proto(g.value_name(i.value)))
            .find(computed::is_computed);
        assert_eq!(marker.is_some(), streamed);
        let out = dir.path().join(name).join("model.onnx");
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        onnx_safeify::save(&doc, &out).unwrap();
        (std::fs::read(&out).unwrap(), marker)
    };
    let (in_memory, _) = unpack(false, "in_memory");
    let (streamed, marker) = unpack(true, "streamed");
    assert!(in_memory == streamed, "the streamed weights differ");
    // Dropped with its model (and its scope's clones).
    let marker = marker.unwrap();
    assert!(
        computed::get(&marker).is_none(),
        "a dropped model's payload stays"
    );

    // The command: the same bytes as the in-process compile's model with every weight
    // materialized, and verified on ONNX Runtime CPU.
    let kept = dir.path().join("kept/model.onnx");
    std::fs::create_dir_all(kept.parent().unwrap()).unwrap();
    let (m, k) = (model.to_str().unwrap(), kept.to_str().unwrap());
    let (code, err) = run(&[m, "--target", "rx580", "--keep-opset", "-o", k]);
    assert_eq!(code, Some(0), "{err}");
    let mut doc = onnx_safeify::load(&model).unwrap();
    let target = onnx_safeify::compile::load_target("rx580", &[]).unwrap();
    let mut opts = onnx_safeify::compile::options([]).unwrap();
    opts.raise_opset = false;
    opts.unpack_limit = 1 << 30;
    let done =
        onnx_safeify::compile::compile_document(&mut doc, &target, &opts, false, &model).unwrap();
    assert!(done.writable);
    assert_eq!(doc.model.computed.len(), 15);
    let mut proto = onnx_safeify::export::export_model(&doc.model);
    let inits = &mut proto.graph.as_mut().unwrap().initializer;
    let marker = inits.iter().find(|t| computed::is_computed(t)).cloned();
    for t in inits {
        computed::materialize(t);
    }
    // A compile's payloads go with its document (repeated compiles in one process, as the
    // Python module makes them, leave nothing behind).
    drop(doc);
    assert!(computed::get(&marker.unwrap()).is_none());
    assert!(
        std::fs::read(&kept).unwrap() == proto.encode_to_vec(),
        "the command's output is not the materialized model's encoding"
    );
    let (code, err) = run(&["verify", m, k, "--inputs", inputs.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_target_that_leaves_matmul_nbits_alone_leaves_the_opset() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = tiny_llm(dir.path(), 17);
    for target in ["webgpu", "none"] {
        let out = dir.path().join(format!("{target}/model.onnx"));
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let (code, err) = run(&[
            model.to_str().unwrap(),
            "--target",
            target,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(0), "{target}: {err}");
        assert!(!err.contains("opset raised"), "{target}: {err}");
        let doc = onnx_safeify::load(&out).unwrap();
        assert_eq!(doc.model.opset(""), Some(17), "{target}");
    }
    // `none` changes nothing: the model file is the input's, byte for byte.
    assert_eq!(
        std::fs::read(dir.path().join("none/model.onnx")).unwrap(),
        std::fs::read(&model).unwrap()
    );
}

#[test]
fn a_blocked_raise_keeps_the_old_behaviour_with_the_reason() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // One MatMulNBits (inline weights) beside a GridSample, at opset 17.
    let script = r#"
import sys, numpy as np, onnx
from onnx import helper as h, TensorProto as T, numpy_helper as nh
path = sys.argv[1]
rng = np.random.default_rng(0)
K, N = 64, 32
B = nh.from_array(rng.integers(0, 256, size=(N, K // 32, 16), dtype=np.uint8), "B")
S = nh.from_array(rng.random(N * K // 32, dtype=np.float32) * 0.01, "S")
nodes = [h.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], name="mnb", domain="com.microsoft",
                     K=K, N=N, bits=4, block_size=32),
         h.make_node("GridSample", ["X", "G"], ["Z"], name="grid", align_corners=0)]
g = h.make_graph(nodes, "g",
                 [h.make_tensor_value_info("A", T.FLOAT, [1, K]),
                  h.make_tensor_value_info("X", T.FLOAT, [1, 1, 4, 4]),
                  h.make_tensor_value_info("G", T.FLOAT, [1, 3, 3, 2])],
                 [h.make_tensor_value_info("Y", T.FLOAT, [1, N]),
                  h.make_tensor_value_info("Z", T.FLOAT, [1, 1, 3, 3])], [B, S])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
m.ir_version = 8
onnx.save(m, path)
"#;
    let src = dir.path().join("blocked.onnx");
    python(&["-c", script, src.to_str().unwrap()]);
    let out = dir.path().join("blocked.rx580.onnx");
    let (code, err) = run(&[
        src.to_str().unwrap(),
        "--target",
        "rx580",
        "-o",
        out.to_str().unwrap(),
        "--verify",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("note: opset kept at 17")
            && err.contains("node 'grid' (GridSample)")
            && err.contains("renamed its modes"),
        "{err}"
    );
    assert_eq!(onnx_safeify::load(&out).unwrap().model.opset(""), Some(17));
    let f = forms(&out);
    assert!(
        f.len() == 1 && f[0].starts_with("unpacked (default-domain opset 17 < 21)"),
        "{f:?}"
    );
}
