//! Shared helpers for the integration tests: where the corpus and the venv are, and small
//! builders for hand-made models.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use onnx_safeify::proto::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};

pub fn cache_dir() -> PathBuf {
    match std::env::var_os("ONNX_SAFEIFY_CACHE") {
        Some(p) => PathBuf::from(p),
        None => {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            Path::new(&home).join(".cache/onnx-safeify")
        }
    }
}

/// The corpus built by `scripts/corpus.sh` (which `scripts/test.sh` runs). Tests fail when it
/// is missing, unless ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1 (then they return `None` and skip).
pub fn corpus() -> Option<PathBuf> {
    let dir = std::env::var_os("ONNX_SAFEIFY_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("corpus"));
    if dir.join(".complete").exists() {
        return Some(dir);
    }
    if std::env::var("ONNX_SAFEIFY_ALLOW_MISSING_CORPUS").as_deref() == Ok("1") {
        eprintln!("corpus missing at {}: skipped", dir.display());
        return None;
    }
    panic!(
        "the test corpus is missing at {} — run `scripts/test.sh` (it builds it), or set \
         ONNX_SAFEIFY_CORPUS, or ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1 to skip corpus tests",
        dir.display()
    );
}

/// The Python of the corpus venv (onnx, onnxruntime, numpy).
pub fn venv_python() -> Option<PathBuf> {
    let dir = std::env::var_os("ONNX_SAFEIFY_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("venv"));
    let py = dir.join("bin/python");
    if py.exists() {
        return Some(py);
    }
    if std::env::var("ONNX_SAFEIFY_ALLOW_MISSING_CORPUS").as_deref() == Ok("1") {
        return None;
    }
    panic!(
        "the test venv is missing at {} — run `scripts/test.sh`",
        dir.display()
    );
}

/// Every `.onnx` file below `dir`, sorted.
pub fn onnx_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "onnx") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn sample() -> PathBuf {
    repo().join("samples/ocr_tiny.onnx")
}

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_onnx-safeify"))
}

pub fn float_tensor_type(dims: &[i64]) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(1),
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
    }
}

pub fn vi(name: &str, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(float_tensor_type(dims)),
        ..Default::default()
    }
}

pub fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(name.into()),
        op_type: Some(op.into()),
        ..Default::default()
    }
}

pub fn float_init(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: Some(1),
        name: Some(name.into()),
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

pub fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

/// A model around one graph, opset 17.
pub fn model(graph: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        producer_name: Some("onnx-safeify tests".into()),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(graph),
        ..Default::default()
    }
}

/// x[1,4] -> Relu -> y, the smallest valid model.
pub fn tiny_graph() -> GraphProto {
    GraphProto {
        node: vec![node("Relu", "relu", &["x"], &["y"])],
        name: Some("tiny".into()),
        input: vec![vi("x", &[1, 4])],
        output: vec![vi("y", &[1, 4])],
        ..Default::default()
    }
}

pub fn encode(m: &ModelProto) -> Vec<u8> {
    use prost::Message;
    m.encode_to_vec()
}

pub fn sha(path: &Path) -> Vec<u8> {
    // Not cryptographic: only "did the file change", so the whole content is enough.
    std::fs::read(path).unwrap_or_default()
}

/// Run two models on ONNX Runtime (CPU, Python venv) with the same random inputs and assert
/// every output agrees within `rtol` (relative to max |reference|) — an independent check.
/// Symbolic dims are set to `dim`. Returns the report line.
pub fn ort_equal(original: &Path, rewritten: &Path, dim: i64, rtol: f64) -> String {
    ort_equal_with(original, rewritten, dim, rtol, &[])
}

/// [`ort_equal`] with session config entries for the rewritten model's session (e.g.
/// `session.layer_assignment_settings`); also prints where ORT placed nodes when asked.
pub fn ort_equal_with(
    original: &Path,
    rewritten: &Path,
    dim: i64,
    rtol: f64,
    config: &[(&str, &str)],
) -> String {
    let Some(py) = venv_python() else {
        return "skipped".into();
    };
    let script = r#"
import sys, numpy as np, onnxruntime as ort
a, b, dim, rtol = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
so = ort.SessionOptions(); so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
sa = ort.InferenceSession(a, so, providers=["CPUExecutionProvider"])
sob = ort.SessionOptions(); sob.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
for kv in sys.argv[5:]:
    k, v = kv.split("=", 1)
    sob.add_session_config_entry(k, v)
sb = ort.InferenceSession(b, sob, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
feeds = {}
types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
         "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
for i in sa.get_inputs():
    shape = [d if isinstance(d, int) and d > 0 else dim for d in i.shape]
    t = types[i.type]
    if np.issubdtype(t, np.floating):
        feeds[i.name] = rng.standard_normal(shape).astype(t)
    else:
        feeds[i.name] = rng.integers(0, 2, shape).astype(t)
names = [o.name for o in sa.get_outputs()]
assert names == [o.name for o in sb.get_outputs()], ("output names differ", names, [o.name for o in sb.get_outputs()])
ra = sa.run(None, feeds); rb = sb.run(None, feeds)
worst = 0.0
for n, x, y in zip(names, ra, rb):
    assert x.shape == y.shape, (n, x.shape, y.shape)
    scale = max(float(np.abs(x).max()) if x.size else 0.0, 1e-6)
    err = float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max()) / scale if x.size else 0.0
    worst = max(worst, err)
    assert err <= rtol, f"output {n}: relative error {err} > {rtol}"
print(f"{len(names)} outputs equal, worst relative error {worst:.3g}")
"#;
    let o = std::process::Command::new(py)
        .args(["-c", script])
        .arg(original)
        .arg(rewritten)
        .arg(dim.to_string())
        .arg(rtol.to_string())
        .args(config.iter().map(|(k, v)| format!("{k}={v}")))
        .output()
        .expect("python runs");
    assert!(
        o.status.success(),
        "ONNX Runtime comparison of {} and {} failed:\n{}",
        original.display(),
        rewritten.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// onnx.checker.check_model(full_check=True) in the venv.
pub fn onnx_check(path: &Path) {
    let Some(py) = venv_python() else { return };
    let o = std::process::Command::new(py)
        .args([
            "-c",
            "import sys, onnx; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)",
        ])
        .arg(path)
        .output()
        .expect("python runs");
    assert!(
        o.status.success(),
        "onnx.checker rejects {}:\n{}",
        path.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}
