//! Blocked DequantizeLinear under DirectML (`src/rewrite/unfuse/dequantize.rs`): the cases of
//! `tools/make_blocked_dq.py` (int4/uint4/int8/uint8, zero point or not, float32 and float16
//! scales, axis 0, 1 and -1, K a multiple of block_size or not, data an initializer or a graph
//! input; small int4 DequantizeLinear -> MatMul models) compiled for `rx580` and `directml`:
//! no blocked DequantizeLinear is left unpinned, a constant one is rewritten, and every output
//! that runs matches the original on ONNX Runtime CPU at the class the rewrite declares
//! (bit-identical where exact, `verify` otherwise). Needs the test venv (fails without it unless
//! ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1, then it says so and skips).

mod common;

use std::path::Path;
use std::process::Command;

fn python(args: &[&str]) -> String {
    let py = common::venv_python().expect("the test venv");
    let o = Command::new(py).args(args).output().expect("python runs");
    assert!(
        o.status.success(),
        "python {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn tool() -> String {
    common::repo()
        .join("tools/make_blocked_dq.py")
        .to_string_lossy()
        .into_owned()
}

/// The model's nodes: (op, pinned, block_size).
fn nodes(path: &Path) -> Vec<(String, bool, i64)> {
    let doc = onnx_safeify::load(path).unwrap();
    let g = &doc.model.graph;
    g.order
        .iter()
        .map(|&n| {
            let node = g.node(n);
            (
                node.op_type.clone(),
                node.metadata("layer_ann").is_some(),
                node.attr("block_size").and_then(|a| a.i()).unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn blocked_dequantize_cases_compile_for_directml_and_stay_exact() {
    if common::venv_python().is_none() {
        eprintln!("SKIPPED: no test venv (ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases");
    std::fs::create_dir_all(&cases).unwrap();
    python(&[&tool(), "build", cases.to_str().unwrap()]);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cases.join("cases.json")).unwrap()).unwrap();
    let meta = meta.as_object().unwrap();
    assert!(meta.len() >= 12, "{meta:?}");
    let mut lines = Vec::new();
    for (name, m) in meta {
        let src = cases.join(format!("{name}.onnx"));
        let constant = m["data_is_initializer"].as_bool().unwrap();
        let four_bit = m["four_bit"].as_bool().unwrap();
        let f16 = name.contains("f16");
        for target in ["rx580", "directml"] {
            let out = dir.path().join(format!("{name}.{target}.onnx"));
            let o = Command::new(common::bin())
                .args([src.to_str().unwrap(), "--target", target, "-o"])
                .arg(&out)
                .output()
                .unwrap();
            assert_eq!(
                o.status.code(),
                Some(0),
                "{name} {target}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let ns = nodes(&out);
            let blocked: Vec<_> = ns.iter().filter(|n| n.0 == "DequantizeLinear").collect();
            assert!(
                blocked.iter().all(|n| n.1 || n.2 == 0),
                "{name} {target}: an unpinned blocked DequantizeLinear: {ns:?}"
            );
            // Rewritten wherever DirectML can run the form: all but 4-bit data computed at
            // run time (no Cast from int4 in DirectML), which stays pinned.
            let rewritten = constant || !four_bit;
            assert_eq!(blocked.is_empty(), rewritten, "{name} {target}: {ns:?}");
            let pins = ns.iter().filter(|n| n.1).count();
            if !m["runnable"].as_bool().unwrap() {
                lines.push(format!(
                    "{name} {target}: pins {pins}, not run (4-bit input)"
                ));
                continue;
            }
            let cmp: serde_json::Value = serde_json::from_str(&python(&[
                &tool(),
                "compare",
                src.to_str().unwrap(),
                out.to_str().unwrap(),
            ]))
            .unwrap();
            let identical = cmp["bit_identical"].as_bool().unwrap();
            lines.push(format!(
                "{name} {target}: pins {pins}, max_abs {}, bit-identical {identical}",
                cmp["max_abs"]
            ));
            if f16 && name.starts_with("mm_") {
                // Declared rounding (ONNX Runtime's CPU drops the form's cast to float16
                // ahead of its float32 MatMul): held to that class by verify.
                let v = Command::new(common::bin())
                    .args(["verify", src.to_str().unwrap(), out.to_str().unwrap()])
                    .output()
                    .unwrap();
                assert_eq!(
                    v.status.code(),
                    Some(0),
                    "{name} {target}: {}",
                    String::from_utf8_lossy(&v.stdout)
                );
            } else {
                assert!(identical, "{name} {target}: {cmp}");
            }
        }
    }
    eprintln!("{}", lines.join("\n"));
}
