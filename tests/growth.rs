//! A compile that adds weights (MatMulNBits unpacked below opset 21, here with `--keep-opset`)
//! states the output's size, and past 2x the input (and 64 MiB added) writes nothing and exits 1
//! unless --allow-growth. Without `--keep-opset` the model is raised to opset 21 and the weights
//! stay packed.

mod common;

use std::path::Path;
use std::process::Command;

/// One MatMulNBits node, 4 bits, block 32, K x N int4 weights (K*N/2 bytes), at `opset`.
fn nbits_model(path: &Path, k: usize, n: usize, opset: i64) -> Option<()> {
    let py = common::venv_python()?;
    let script = r#"
import sys, numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
path, K, N, opset = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)
blocks = K // 32
B = numpy_helper.from_array(rng.integers(0, 256, size=(N, blocks, 16), dtype=np.uint8), "B")
S = numpy_helper.from_array((rng.random(N * blocks, dtype=np.float32) * 0.01), "S")
node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], domain="com.microsoft", K=K, N=N, bits=4, block_size=32)
g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, K])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, N])], [B, S])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
m.ir_version = 9
onnx.save(m, path)
"#;
    let st = Command::new(py)
        .args(["-c", script, path.to_str()?])
        .args([k.to_string(), n.to_string(), opset.to_string()])
        .status()
        .ok()?;
    assert!(st.success());
    Some(())
}

fn compile(model: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(common::bin())
        .arg(model)
        .args(["--target", "rx580", "-o"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn unpacked_weights_past_the_bound_need_allow_growth() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.onnx");
    // 4096 x 8192 int4: 16 MiB packed, 128 MiB as float32.
    if nbits_model(&big, 4096, 8192, 17).is_none() {
        eprintln!("SKIP: no venv (run scripts/corpus.sh)");
        return;
    }
    let out = dir.path().join("big.rx580.onnx");
    let (code, err) = compile(&big, &out, &["--keep-opset"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("size: the rewrites add") && err.contains("--allow-growth"),
        "{err}"
    );
    assert!(!out.exists(), "an output was written");
    let (code, err) = compile(&big, &out, &["--keep-opset", "--allow-growth"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.exists());
    // With a factor too small, refused again; at opset 21 the weights stay packed: no growth.
    std::fs::remove_file(&out).unwrap();
    let (code, err) = compile(&big, &out, &["--keep-opset", "--allow-growth", "3"]);
    assert_eq!(code, Some(1), "{err}");
    // Without --keep-opset the model is raised to opset 21: packed, and under DirectML (whose
    // DequantizeLinear ignores block_size) the blocked dequantization is written as int8 codes:
    // twice the packed bytes (32 MiB), within the default bound, a quarter of the float32 form.
    let int8_form = |err: &str, out: &Path| {
        let size = std::fs::metadata(out).unwrap().len();
        assert!(size > 32 << 20 && size < 40 << 20, "{size} bytes: {err}");
    };
    let (code, err) = compile(&big, &out, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("opset raised 17 → 21 for the packed MatMulNBits decomposition"),
        "{err}"
    );
    int8_form(&err, &out);
    std::fs::remove_file(&out).unwrap();
    let packed = dir.path().join("packed.onnx");
    nbits_model(&packed, 4096, 8192, 21).unwrap();
    let (code, err) = compile(&packed, &out, &[]);
    assert_eq!(code, Some(0), "{err}");
    int8_form(&err, &out);
}

#[test]
fn a_small_model_may_double() {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small.onnx");
    if nbits_model(&small, 1024, 1024, 17).is_none() {
        eprintln!("SKIP: no venv (run scripts/corpus.sh)");
        return;
    }
    let out = dir.path().join("small.rx580.onnx");
    let (code, err) = compile(&small, &out, &["--keep-opset"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("size: the rewrites add"), "{err}");
}
