//! com.microsoft QAttention (issue 34, item 3): the quantized Attention that
//! `onnxruntime.quantization.quantize_dynamic` writes, decomposed by
//! `src/rewrite/unfuse/qattention.rs` into MatMulInteger, the kernel's dequantization and the
//! float Attention decomposition. Single-op models built with the venv's onnx (uint8 input,
//! int8 and uint8 weights, with and without zero points, per-column scales and zero points,
//! every mask form, unidirectional, past state) and the corpus's GPT-2 with past state run
//! through `quantize_dynamic` are compiled for `rx580` through the CLI: no QAttention is left
//! and none falls back, and `verify` passes on ONNX Runtime CPU at the class the compile records
//! (`rounding`: 1e-5 of each output's scale for float32). Configurations the decomposition
//! does not take are refused with a reason.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use onnx_safeify::rewrite::unfuse;

/// `build DIR` writes `NAME.onnx` and `NAME.inputs.npz` per case, and `cases.json`.
const BUILD: &str = r#"
import sys, json, os, numpy as np, onnx
from onnx import helper as h, TensorProto as TP, numpy_helper as nh
out = sys.argv[1]
rng = np.random.default_rng(34)
cases = []

def quant_weights(D_in, D3, wdt, per_col):
    """Float weights quantized as quantize_dynamic does: int8 symmetric, uint8 asymmetric."""
    wf = rng.standard_normal((D_in, D3)) / np.sqrt(D_in)
    axis = 0 if per_col else None
    lo = np.minimum(wf.min(axis=axis), 0); hi = np.maximum(wf.max(axis=axis), 0)
    if wdt == 'int8':
        s = np.maximum(np.abs(lo), np.abs(hi)) / 127.0
        zp = np.zeros_like(s)
        q = np.clip(np.round(wf / s), -127, 127).astype(np.int8)
        zp = zp.astype(np.int8)
    else:
        s = (hi - lo) / 255.0
        zp = np.clip(np.round(-lo / s), 0, 255)
        q = np.clip(np.round(wf / s) + zp, 0, 255).astype(np.uint8)
        zp = zp.astype(np.uint8)
    return q, np.asarray(s, np.float32), np.asarray(zp)

def case(name, B=2, S=5, N=4, H=8, D_in=None, wdt='int8', x_zp=True, w_zp=False, per_col=False,
         mask=None, uni=0, past=None, attrs=None, opset=17, dynamic=False):
    D = N * H
    D_in = D_in or D
    q, ws, wz = quant_weights(D_in, 3 * D, wdt, per_col)
    xf = rng.standard_normal((B, S, D_in))
    xlo, xhi = min(xf.min(), 0.0), max(xf.max(), 0.0)
    xs = np.float32((xhi - xlo) / 255.0)
    xz = np.uint8(np.clip(np.round(-xlo / xs), 0, 255)) if x_zp else np.uint8(0)
    x = np.clip(np.round(xf / xs) + int(xz), 0, 255).astype(np.uint8)
    inits = [nh.from_array(q, 'w'), nh.from_array((rng.standard_normal(3 * D) * 0.2).astype(np.float32), 'b'),
             nh.from_array(np.array(xs, np.float32), 'x_scale'), nh.from_array(ws, 'w_scale')]
    bdim, sdim = ('batch', 'seq') if dynamic else (B, S)
    inputs = [h.make_tensor_value_info('x', TP.UINT8, [bdim, sdim, D_in])]
    names = ['x', 'w', 'b', 'x_scale', 'w_scale']
    feeds = {'x': x}
    P = past or 0
    T = P + S
    if mask is None:
        names.append('')
    else:
        if mask == '2d':
            m = np.ones((B, T), np.int32); m[1, T - 2:] = 0
        elif mask == 'dummy':
            m = np.zeros((B, 1), np.int32)
        elif mask == '1d':
            m = np.array([T - 1 - i for i in range(B)], np.int32)
        elif mask == '1d_end_start':
            m = np.array([T - i for i in range(B)] + [1 + i for i in range(B)], np.int32)
        elif mask == '3d':
            m = (rng.random((B, S, T)) > 0.3).astype(np.int32); m[:, :, 0] = 1
        names.append('mask'); feeds['mask'] = m
        inputs.append(h.make_tensor_value_info('mask', TP.INT32, list(m.shape)))
    if x_zp:
        inits.append(nh.from_array(np.array(xz, np.uint8), 'x_zp')); names.append('x_zp')
    else:
        names.append('')
    if w_zp:
        if wdt == 'uint8':
            z = wz if per_col else np.asarray(wz).reshape(-1)[0]
        else:  # symmetric int8 has zero points of 0: non-zero ones, to exercise them
            z = rng.integers(-3, 4, 3 * D) if per_col else 3
        inits.append(nh.from_array(np.asarray(z).astype(wz.dtype), 'w_zp'))
        names.append('w_zp')
    else:
        names.append('')
    outs = ['y']
    outputs = [h.make_tensor_value_info('y', TP.FLOAT, [bdim, sdim, D])]
    if past is not None:
        names.append('past'); outs.append('present')
        feeds['past'] = rng.standard_normal((2, B, N, P, H)).astype(np.float32)
        inputs.append(h.make_tensor_value_info('past', TP.FLOAT, [2, bdim, N, 'past_seq', H]))
        outputs.append(h.make_tensor_value_info('present', TP.FLOAT, [2, bdim, N, 'total_seq', H]))
    while names[-1] == '':
        names.pop()
    node = h.make_node('QAttention', names, outs, domain='com.microsoft', num_heads=N, unidirectional=uni,
                       **(attrs or {}))
    g = h.make_graph([node], name, inputs, outputs, initializer=inits)
    mo = h.make_model(g, opset_imports=[h.make_opsetid('', opset), h.make_opsetid('com.microsoft', 1)])
    mo.ir_version = 8
    onnx.save(mo, os.path.join(out, name + '.onnx'))
    np.savez(os.path.join(out, name + '.inputs.npz'), **feeds)
    cases.append(name)

case('int8_weights')
case('int8_weights_no_zero_points', x_zp=False)
case('int8_weights_weight_zero_point', w_zp=True)
case('uint8_weights', wdt='uint8', x_zp=False)
case('uint8_weights_zero_points', wdt='uint8', w_zp=True)
case('int8_per_column', per_col=True)
case('int8_per_column_zero_points', per_col=True, w_zp=True)
case('uint8_per_column_zero_points', wdt='uint8', per_col=True, w_zp=True)
case('mask_2d', mask='2d')
case('mask_key_lengths', mask='1d')
case('mask_end_start', mask='1d_end_start')
case('mask_3d', mask='3d')
case('mask_dummy', mask='dummy')
case('unidirectional', uni=1)
case('unidirectional_mask_2d', uni=1, mask='2d', wdt='uint8', w_zp=True)
case('scale_and_filter', mask='2d', attrs=dict(scale=0.3, mask_filter_value=-1000.0))
case('pruned_input_hidden', D_in=48)
case('dynamic_shapes', dynamic=True, w_zp=True)
case('single_token', S=1, uni=1)
case('opset_11', opset=11, mask='2d')
case('past_causal', S=3, past=4, uni=1, mask='2d')
case('past_decode', S=1, past=6, uni=1, mask='2d', wdt='uint8', w_zp=True)
case('past_no_mask_per_column', S=2, past=3, per_col=True, w_zp=True)
case('past_dummy_mask', S=2, past=3, mask='dummy')
json.dump(cases, open(os.path.join(out, 'cases.json'), 'w'))
"#;

/// `quantize SRC DIR`: `quantize_dynamic` of SRC with int8 and with uint8 weights into
/// DIR/int8.onnx, DIR/uint8.onnx; prints the QAttention count of each.
const QUANTIZE: &str = r#"
import sys, os, onnx
from onnx import TensorProto
from onnxruntime.quantization import quantize_dynamic, QuantType
src, out = sys.argv[1], sys.argv[2]
counts = []
for name, wt in (('int8', QuantType.QInt8), ('uint8', QuantType.QUInt8)):
    dst = os.path.join(out, name + '.onnx')
    quantize_dynamic(src, dst, weight_type=wt, extra_options={'DefaultTensorType': TensorProto.FLOAT})
    counts.append(sum(n.op_type == 'QAttention' for n in onnx.load(dst).graph.node))
print(' '.join(map(str, counts)))
"#;

fn python(args: &[&str]) -> String {
    let py = common::venv_python().expect("the test venv (scripts/corpus.sh)");
    let o = Command::new(py).args(args).output().expect("python runs");
    assert!(
        o.status.success(),
        "python failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// No venv (onnx, onnxruntime): say so loudly and skip (only with
/// ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1; otherwise `venv_python` fails the test).
fn have_venv() -> bool {
    if common::venv_python().is_none() {
        eprintln!(
            "SKIPPED: no test venv (onnx, onnxruntime, numpy); QAttention is not checked against ONNX Runtime"
        );
        return false;
    }
    true
}

/// Compile `model` for rx580 through the CLI into `dir`, check that no QAttention is left in the
/// output or named by a fallback, and `verify` it against the original with `inputs`. Returns
/// the failures (empty: it passed) and verify's report.
///
/// `class`: the class verify must judge by, `rounding`, or `approximate` (then the compile runs
/// with `--allow-approximate`: a QAttention whose output is quantized again downstream is
/// approximate, since a rounding there can move a quantization step).
fn compile_and_verify(
    model: &Path,
    inputs: &Path,
    dir: &Path,
    class: &str,
) -> (Vec<String>, String) {
    let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
    let out = dir.join(format!("{stem}.rx580.onnx"));
    let report = dir.join(format!("{stem}.rx580.json"));
    let mut cmd = Command::new(common::bin());
    cmd.arg(model)
        .args(["--target", "rx580", "-o"])
        .arg(&out)
        .arg("--report")
        .arg(&report);
    if class == "approximate" {
        cmd.arg("--allow-approximate");
    }
    let o = cmd.output().unwrap();
    if o.status.code() != Some(0) {
        let err = format!(
            "{stem}: compile exit {:?}: {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        );
        return (vec![err], String::new());
    }
    let mut failures = Vec::new();
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    for f in r["fallbacks"].as_array().into_iter().flatten() {
        if f["op"].as_str().unwrap_or_default().ends_with("QAttention") {
            failures.push(format!("{stem}: QAttention fell back: {f}"));
        }
    }
    let doc = onnx_safeify::load(&out).unwrap();
    let g = &doc.model.graph;
    let left = g
        .order
        .iter()
        .filter(|&&n| g.node(n).op_type == "QAttention")
        .count();
    if left > 0 {
        failures.push(format!("{stem}: {left} QAttention node(s) left"));
    }
    if !g
        .order
        .iter()
        .any(|&n| g.node(n).op_type == "MatMulInteger")
    {
        failures.push(format!("{stem}: no MatMulInteger in the output"));
    }
    let v = Command::new(common::bin())
        .arg("verify")
        .arg(model)
        .arg(&out)
        .arg("--inputs")
        .arg(inputs)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
    if !v.status.success() {
        failures.push(format!("{stem}: verify exit {:?}: {text}", v.status.code()));
    } else if !text.contains(&format!("exactness class, {class}")) {
        failures.push(format!(
            "{stem}: verify did not judge by the {class} class: {text}"
        ));
    }
    (failures, text)
}

#[test]
fn qattention_models_compile_for_rx580_and_verify_within_rounding() {
    if !have_venv() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases");
    let outs = dir.path().join("out");
    std::fs::create_dir_all(&cases).unwrap();
    std::fs::create_dir_all(&outs).unwrap();
    python(&["-c", BUILD, cases.to_str().unwrap()]);
    let names: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(cases.join("cases.json")).unwrap()).unwrap();
    assert!(names.len() >= 20, "{} cases", names.len());
    let mut failures = Vec::new();
    for name in &names {
        let model = cases.join(format!("{name}.onnx"));
        let inputs = cases.join(format!("{name}.inputs.npz"));
        let (f, text) = compile_and_verify(&model, &inputs, &outs, "rounding");
        let summary = text.lines().last().unwrap_or_default().to_string();
        eprintln!("{name}: {summary}");
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The real path: ONNX Runtime's `quantize_dynamic` turns the corpus GPT-2's Attention (with
/// past state) into QAttention, with int8 and with uint8 weights; both compile for rx580 and
/// verify with the corpus's own inputs. (The corpus's `bert_fused` has no Attention node, so
/// `quantize_dynamic` writes no QAttention there.)
#[test]
fn quantize_dynamic_gpt2_compiles_for_rx580_and_verifies() {
    if !have_venv() {
        return;
    }
    let Some(corpus) = common::corpus() else {
        return;
    };
    let src = corpus.join("transformers/gpt2_past.onnx");
    assert!(src.exists(), "{} is missing", src.display());
    let inputs = corpus.join("transformers/gpt2_past.inputs.npz");
    let dir = tempfile::tempdir().unwrap();
    let counts = python(&[
        "-c",
        QUANTIZE,
        src.to_str().unwrap(),
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(
        counts, "2 2",
        "QAttention nodes written by quantize_dynamic"
    );
    let mut failures = Vec::new();
    for name in ["int8", "uint8"] {
        let model: PathBuf = dir.path().join(format!("{name}.onnx"));
        // By default the QAttention nodes stay on the CPU: their outputs are quantized again
        // (DynamicQuantizeMatMul) downstream, so the decomposition is approximate there.
        let kept = dir.path().join(format!("{name}.kept.onnx"));
        let report = dir.path().join(format!("{name}.kept.json"));
        let o = Command::new(common::bin())
            .arg(&model)
            .args(["--target", "rx580", "-o"])
            .arg(&kept)
            .arg("--report")
            .arg(&report)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let approximate = r["fallbacks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| {
                f["op"].as_str().unwrap_or_default().ends_with("QAttention")
                    && f["cause"] == "approximate"
            })
            .count();
        assert_eq!(approximate, 2, "{name}: {r:#}");
        let (f, text) = compile_and_verify(&model, &inputs, dir.path(), "approximate");
        eprintln!("gpt2_past {name}: {text}");
        failures.extend(f);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What the decomposition does not take is refused with a reason a user can act on (the node
/// stays on ONNX Runtime's CPU kernel).
#[test]
fn unsupported_qattention_configurations_are_refused_with_a_reason() {
    if !have_venv() {
        return;
    }
    let script = r#"
import sys, os, numpy as np, onnx
from onnx import helper as h, TensorProto as TP, numpy_helper as nh
out = sys.argv[1]
def save(name, ins, attrs=None, xdt=TP.UINT8, ws=None, opset=17, outs=('y',), extra=()):
    inits = [nh.from_array(np.zeros((16, 48), np.int8), 'w'), nh.from_array(np.zeros(48, np.float32), 'b'),
             nh.from_array(np.array(0.1, np.float32), 'xs'),
             nh.from_array(ws if ws is not None else np.array(0.1, np.float32), 'ws')]
    inputs = [h.make_tensor_value_info('x', xdt, [2, 3, 16])] + list(extra)
    node = h.make_node('QAttention', ins, list(outs), domain='com.microsoft', num_heads=2, **(attrs or {}))
    g = h.make_graph([node], name, inputs, [h.make_tensor_value_info(o, TP.FLOAT, None) for o in outs], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid('', opset), h.make_opsetid('com.microsoft', 1)])
    onnx.save(m, os.path.join(out, name + '.onnx'))
base = ['x', 'w', 'b', 'xs', 'ws']
save('int8_input', base, xdt=TP.INT8)
save('rotary', base, attrs=dict(do_rotary=1))
save('share_buffer', base, attrs=dict(past_present_share_buffer=1))
save('no_bias', ['x', 'w', '', 'xs', 'ws'])
save('weight_scale_length', base, ws=np.full(7, 0.1, np.float32))
save('present_without_past', base, outs=('y', 'present'))
save('opset_9', base, opset=9)
save('past_opset_10', base + ['', '', '', 'past'], opset=10, outs=('y', 'present'),
     extra=[h.make_tensor_value_info('past', TP.FLOAT, [2, 2, 2, 4, 8])])
"#;
    let dir = tempfile::tempdir().unwrap();
    python(&["-c", script, dir.path().to_str().unwrap()]);
    for (name, want) in [
        ("int8_input", "uint8 input only"),
        ("rotary", "do_rotary"),
        ("share_buffer", "past_present_share_buffer"),
        ("no_bias", "no bias"),
        ("weight_scale_length", "one per weight column (48)"),
        ("present_without_past", "present output without a past"),
        ("opset_9", "opset >= 10"),
        ("past_opset_10", "opset >= 11"),
    ] {
        let mut doc = onnx_safeify::load(&dir.path().join(format!("{name}.onnx"))).unwrap();
        let report = unfuse::unfuse_all(&mut doc.model, "test-qattention", |n| {
            !n.domain().is_empty()
        });
        assert!(report.unfused.is_empty(), "{name}: {report:?}");
        assert_eq!(report.unsupported.len(), 1, "{name}: {report:?}");
        let reason = &report.unsupported[0].reason;
        assert!(reason.contains(want), "{name}: {reason}");
    }
}
