//! Standard QLinearConv-13 / QLinearMatMul-13 with per-channel weight scales or zero points:
//! OpenVINO 2026.4.1's ONNX front end refuses them (or, for a QLinearConv whose M equals
//! C/group, applies them along the input-channel axis). The `openvino-gpu` target decomposes
//! them into ConvInteger / MatMulInteger and ONNX Runtime's requantization: bit-identical on
//! ONNX Runtime CPU, and loadable by OpenVINO. A per-channel weight zero point with differing
//! values has no such form (ONNX Runtime's ConvInteger takes one zero point): the compile
//! refuses it (exit 1) with the reason.

mod common;
mod runtimes_support;

use std::path::{Path, PathBuf};

use onnx_safeify::verify::RuntimeKind;
use runtimes_support::{run, verify_json};

/// The test models, written by the venv's onnx: name -> path.
fn models(dir: &Path) -> Option<Vec<(String, PathBuf)>> {
    let py = common::venv_python()?;
    let script = r#"
import sys, numpy as np, onnx, onnx.helper as h
from onnx import TensorProto as T, numpy_helper as nh
out = sys.argv[1]
rng = np.random.default_rng(7)
def save(name, nodes, ins, outs, inits):
    g = h.make_graph(nodes, name, ins, outs, [nh.from_array(v, k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid('', 13)]); m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, f'{out}/{name}.onnx')
def conv(name, M, C, group=1, zp=None, xt=np.uint8):
    w = rng.integers(-128, 128, (M, C // group, 3, 3)).astype(np.int8)
    inits = dict(xs=np.array(0.021, np.float32), xz=np.array(3 if xt == np.int8 else 131, xt), w=w,
                 ws=rng.uniform(0.001, 0.02, M).astype(np.float32),
                 wz=np.zeros(M, np.int8) if zp is None else zp,
                 ys=np.array(0.37, np.float32), yz=np.array(-5 if xt == np.int8 else 121, xt),
                 b=rng.integers(-3000, 3000, M).astype(np.int32))
    n = h.make_node('QLinearConv', ['x', 'xs', 'xz', 'w', 'ws', 'wz', 'ys', 'yz', 'b'], ['q'],
                    pads=[1, 1, 1, 1], group=group, name='qconv')
    et = T.INT8 if xt == np.int8 else T.UINT8
    save(name, [n], [h.make_tensor_value_info('x', et, [1, C, 9, 9])],
         [h.make_tensor_value_info('q', et, [1, M, 9, 9])], inits)
conv('qconv_pc', 8, 4)
conv('qconv_pc_m_eq_c', 4, 4)
conv('qconv_pc_s8x_grouped', 8, 4, group=2, xt=np.int8)
conv('qconv_pc_zp_differ', 8, 4, zp=np.arange(8).astype(np.int8))
b = rng.integers(-128, 128, (32, 12)).astype(np.int8)
inits = dict(a_s=np.array(0.013, np.float32), a_z=np.array(128, np.uint8), b=b,
             b_s=rng.uniform(0.001, 0.02, 12).astype(np.float32), b_z=np.zeros(12, np.int8),
             ys=np.array(0.41, np.float32), yz=np.array(118, np.uint8))
n = h.make_node('QLinearMatMul', ['a', 'a_s', 'a_z', 'b', 'b_s', 'b_z', 'ys', 'yz'], ['q'], name='qmm')
save('qmatmul_pc', [n], [h.make_tensor_value_info('a', T.UINT8, [5, 32])],
     [h.make_tensor_value_info('q', T.UINT8, [5, 12])], inits)
"#;
    let ok = std::process::Command::new(py)
        .args(["-c", script])
        .arg(dir)
        .status()
        .expect("python")
        .success();
    assert!(ok, "could not make the test models");
    Some(
        [
            "qconv_pc",
            "qconv_pc_m_eq_c",
            "qconv_pc_s8x_grouped",
            "qconv_pc_zp_differ",
            "qmatmul_pc",
        ]
        .iter()
        .map(|n| (n.to_string(), dir.join(format!("{n}.onnx"))))
        .collect(),
    )
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ov_pc_{name}_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ops(path: &Path) -> Vec<String> {
    use prost::Message;
    let m = onnx_safeify::proto::ModelProto::decode(&*std::fs::read(path).unwrap()).unwrap();
    m.graph
        .unwrap()
        .node
        .iter()
        .map(|n| n.op_type.clone().unwrap_or_default())
        .collect()
}

#[test]
fn per_channel_qlinear_ops_load_on_openvino_and_stay_bit_exact() {
    let d = tmp("exact");
    let Some(models) = models(&d) else {
        eprintln!("SKIPPED: no venv");
        return;
    };
    let openvino = runtimes_support::ready(RuntimeKind::Openvino);
    for (name, m) in &models {
        let out = d.join(format!("{name}.openvino-gpu.onnx"));
        let o = run(
            &[
                m.to_str().unwrap(),
                "--target",
                "openvino-gpu",
                "-o",
                out.to_str().unwrap(),
            ],
            &[],
        );
        if name == "qconv_pc_zp_differ" {
            // No exact loadable form: refused with the reason, nothing written.
            assert_eq!(o.code, 1, "{name}: {}{}", o.stdout, o.stderr);
            let all = format!("{}{}", o.stdout, o.stderr);
            assert!(all.contains("zero point"), "{all}");
            assert!(!out.exists());
            continue;
        }
        assert_eq!(o.code, 0, "{name}: {}", o.stderr);
        let got = ops(&out);
        assert!(
            !got.iter()
                .any(|op| op == "QLinearConv" || op == "QLinearMatMul"),
            "{name}: {got:?}"
        );
        // Bit-identical on ONNX Runtime CPU (the output records the exact class), over
        // random 8-bit inputs across their whole range (the quantized output itself: 8-bit
        // outputs must be equal whatever the class).
        let (c, j, o) = verify_json(m, &out, "cpu", &["--runs", "6"]);
        assert_eq!(c, 0, "{name}: {}{}", o.stdout, o.stderr);
        let j = j.unwrap();
        assert_eq!(j["exactness"]["class"], "exact", "{name}: {j:#}");
        for run in j["runs"].as_array().unwrap() {
            assert_eq!(
                run["outputs"][0]["max_abs_err"].as_f64(),
                Some(0.0),
                "{name}"
            );
        }
        if !openvino {
            continue;
        }
        // Loads on OpenVINO and verifies there.
        let (c, j, o) = verify_json(m, &out, "openvino", &[]);
        assert_eq!(c, 0, "{name}: {}{}", o.stdout, o.stderr);
        let j = j.unwrap();
        let orig = &j["original_on_runtime"];
        if name == "qconv_pc_m_eq_c" {
            // OpenVINO loads the original (M = C) and computes it wrong: its own difference
            // is reported, while the rewrite on OpenVINO gives ONNX Runtime CPU's values.
            assert_eq!(orig["ran"], true, "{j:#}");
            assert_eq!(orig["differs"], true, "{j:#}");
            assert_eq!(j["runs"][0]["against_cpu"][0]["status"], "ok", "{j:#}");
        } else {
            assert_eq!(orig["ran"], false, "{name}: {j:#}");
            let why = orig["error"].as_str().unwrap_or("");
            assert!(
                why.contains("QLinearConv") || why.contains("QLinearMatMul"),
                "{name}: {why}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}
