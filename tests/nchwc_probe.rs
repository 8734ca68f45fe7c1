//! An NCHWc model whose shapes leave the block size open: the compile tries each size on
//! ONNX Runtime and keeps the one that reproduces the model's outputs; without ONNX Runtime the
//! region falls back to the CPU and the report says why.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes `ambiguous.onnx` (a plain model), `ambiguous.ort_all.onnx` (ONNX Runtime's NCHWc
/// rewrite of it on this CPU), and prints this CPU's block size (read from a probe model: a
/// 4-filter Conv whose output channels ONNX Runtime pads up to the block size).
const MAKE: &str = r#"
import sys, numpy as np, onnx, onnxruntime as ort
from onnx import helper as h, TensorProto as T, numpy_helper as nh
out = sys.argv[1]
rng = np.random.default_rng(7)
def W(name, shape): return nh.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
def save(nodes, x, outputs, inits, name):
    g = h.make_graph(nodes, name, [x], [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)]); m.ir_version = 8
    onnx.save(m, f"{out}/{name}.onnx")
    so = ort.SessionOptions(); so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = f"{out}/{name}.ort_all.onnx"; so.log_severity_level = 3
    ort.InferenceSession(f"{out}/{name}.onnx", so, providers=["CPUExecutionProvider"])
# Channel counts are multiples of 32 and the input has fewer channels than any block: every
# MLAS block size fits the shapes.
save([
  h.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
  h.make_node("Relu", ["c1"], ["r1"]),
  h.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
  h.make_node("Relu", ["c2"], ["r2"]),
  h.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
  h.make_node("Add", ["c3", "c2"], ["y"]),
], h.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, 16]), ["y"],
  [W("w1", [32, 3, 3, 3]), W("b1", [32]), W("w2", [64, 32, 1, 1]), W("b2", [64]),
   W("w3", [64, 64, 3, 3]), W("b3", [64])], "ambiguous")
save([h.make_node("Conv", ["x", "w"], ["y"])], h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8]), ["y"],
  [W("w", [4, 3, 3, 3])], "probe")
m = onnx.load(f"{out}/probe.ort_all.onnx")
print([t.dims[0] for t in m.graph.initializer if len(t.dims) == 4][0])
"#;

fn make(dir: &Path) -> Option<(PathBuf, i64)> {
    let py = common::venv_python()?;
    let o = Command::new(py)
        .args(["-c", MAKE])
        .arg(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let block = String::from_utf8_lossy(&o.stdout).trim().parse().ok();
    let model = dir.join("ambiguous.ort_all.onnx");
    Some((model, block?))
}

fn compile(model: &Path, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let report = out.with_extension("json");
    let o = Command::new(common::bin())
        .arg(model)
        .args(["--target", "rx580", "-o"])
        .arg(out)
        .arg("--report")
        .arg(&report)
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap()
}

fn notes(r: &serde_json::Value) -> Vec<String> {
    r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

fn nchwc_nodes(path: &Path) -> usize {
    let doc = onnx_safeify::load(path).unwrap();
    let g = &doc.model.graph;
    g.order
        .iter()
        .filter(|&&n| g.node(n).domain() == "com.microsoft.nchwc")
        .count()
}

#[test]
fn an_ambiguous_block_size_is_resolved_on_onnx_runtime_or_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    let Some((model, block)) = make(dir.path()) else {
        return;
    };
    let doc = onnx_safeify::load(&model).unwrap();
    let sizes = onnx_safeify::nchwc_probe::ambiguous_sizes(&doc);
    assert!(
        sizes.len() > 1 && sizes.contains(&block),
        "the test model must leave the block size open, including this CPU's {block}: {sizes:?}"
    );
    assert!(nchwc_nodes(&model) > 0, "ONNX Runtime made no NCHWc region");

    // By default the region stays on the CPU: an NCHWc Conv as a standard Conv is
    // approximate (its sums compound over a network), so it falls back.
    let kept = dir.path().join("kept.onnx");
    let r = compile(&model, &kept, &[], &[]);
    let fb = r["fallbacks"].as_array().unwrap();
    assert!(!fb.is_empty(), "{r:#}");
    assert_eq!(nchwc_nodes(&kept), nchwc_nodes(&model));

    // Resolved (approximations allowed): the region is decomposed with this CPU's block size,
    // and the output equals the original (the plain model, and the NCHWc one) on ONNX Runtime.
    let out = dir.path().join("resolved.onnx");
    let r = compile(&model, &out, &["--allow-approximate"], &[]);
    let n = notes(&r);
    assert!(
        n.iter()
            .any(|l| l.starts_with(&format!("NCHWc block size {block}:"))),
        "{n:#?}"
    );
    assert!(r["fallbacks"].as_array().unwrap().is_empty(), "{r:#}");
    assert_eq!(nchwc_nodes(&out), 0);
    eprintln!("{}", common::ort_equal(&model, &out, 1, 1e-4));
    eprintln!(
        "{}",
        common::ort_equal(&dir.path().join("ambiguous.onnx"), &out, 1, 1e-4)
    );

    // The probe discriminates: any other size that fits the shapes computes something else.
    let other = sizes.iter().copied().find(|&b| b != block).unwrap();
    let wrong = dir.path().join("wrong.onnx");
    let other_s = other.to_string();
    compile(
        &model,
        &wrong,
        &["--nchwc-block", &other_s, "--allow-approximate"],
        &[],
    );
    assert_eq!(nchwc_nodes(&wrong), 0);
    let v = Command::new(common::bin())
        .arg("verify")
        .arg(&model)
        .arg(&wrong)
        .output()
        .unwrap();
    assert_eq!(
        v.status.code(),
        Some(1),
        "block {other} on a {block} CPU should not verify:\n{}",
        String::from_utf8_lossy(&v.stdout)
    );

    // No ONNX Runtime: not resolved, the region stays on the CPU whole, the report says why,
    // and the output still computes the original's function.
    let cpu = dir.path().join("fallback.onnx");
    let r = compile(
        &model,
        &cpu,
        &["--allow-approximate"],
        &[("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so")],
    );
    let n = notes(&r);
    assert!(
        n.iter()
            .any(|l| l.contains("not resolved") && l.contains("ONNX Runtime is needed")),
        "{n:#?}"
    );
    let fb = r["fallbacks"].as_array().unwrap();
    assert!(
        !fb.is_empty() && fb.iter().all(|f| f["cause"] == "layout"),
        "{r:#}"
    );
    assert_eq!(nchwc_nodes(&cpu), nchwc_nodes(&model));
    eprintln!("{}", common::ort_equal(&model, &cpu, 1, 1e-6));
}
