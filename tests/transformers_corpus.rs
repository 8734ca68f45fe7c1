//! The transformer corpus (scripts/corpus.sh step `transformers`: BERT as exported, fused and
//! int8; ViT and its int4 form; GPT-2 with past state and its beam search; genai-style Llama
//! decoders with GQA, RotaryEmbedding, int4 and fp16) on every built-in target, through the CLI
//! as a user runs it: the compile exits 0, the output passes the target's `check`, and `verify`
//! (its default tolerance taken from the rewrites' exactness classes) finds the output equal to
//! the original on ONNX Runtime CPU with the model's own valid inputs.
//!
//! Under `rx580` the share of heavy ops (MatMul, Conv, attention, MatMulNBits...) left on the
//! GPU over the whole corpus is printed and held to a floor (issue 34 asks for 95 %).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const HEAVY: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "MatMul",
    "Gemm",
    "ConvInteger",
    "MatMulInteger",
    "QLinearConv",
    "QLinearMatMul",
    "LSTM",
    "GRU",
    "RNN",
    "Einsum",
    "Attention",
    "MultiHeadAttention",
    "GroupQueryAttention",
    "DecoderMaskedMultiHeadAttention",
    "QAttention",
    "MatMulNBits",
    "FusedConv",
    "FusedGemm",
    "FusedMatMul",
    "QGemm",
    "DynamicQuantizeMatMul",
    "MatMulIntegerToFloat",
    "DynamicQuantizeLSTM",
];

/// Compiles that must be refused (exit 1, nothing written), with why: the target's runtime
/// cannot load the node and no decomposition exists, or none within its class by default.
const REFUSED: &[(&str, &str, &str)] = &[
    (
        "gpt2_beam_search",
        "openvino-gpu",
        // OpenVINO has no BeamSearch, and its provider cannot honour a CPU pin.
        "com.microsoft::BeamSearch",
    ),
    (
        "bert_fused_int8",
        "openvino-gpu",
        // OpenVINO cannot load QEmbedLayerNormalization; its decomposition is within rounding,
        // but its output is quantized dynamically downstream, where a rounding can move a
        // step: approximate, so refused unless approximations are allowed.
        "com.microsoft::QEmbedLayerNormalization",
    ),
];

/// The floor for the share of heavy ops on the GPU under rx580 over the corpus (percent): the
/// figure this build reaches, so that a change that sends work back to the CPU fails here.
const RX580_GPU_SHARE_FLOOR: f64 = 95.0;

fn models(corpus: &Path) -> Vec<PathBuf> {
    let dir = corpus.join("transformers");
    let v = common::onnx_files(&dir);
    assert!(
        v.len() >= 15,
        "only {} models in {} (scripts/corpus.sh builds them)",
        v.len(),
        dir.display()
    );
    v
}

fn targets() -> Vec<String> {
    let o = Command::new(common::bin()).arg("targets").output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Heavy ops on the GPU and in all, over every graph of the model at `path`.
fn heavy_ops(path: &Path) -> (usize, usize) {
    let py = common::venv_python().unwrap();
    let script = r#"
import sys, onnx
heavy = set(sys.argv[2].split(","))
m = onnx.load(sys.argv[1], load_external_data=False)
def graphs(g):
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from graphs(a.g)
            for s in a.graphs:
                yield from graphs(s)
gpu = total = 0
for g in graphs(m.graph):
    for n in g.node:
        if n.op_type in heavy:
            total += 1
            gpu += not any(p.key == "layer_ann" for p in n.metadata_props)
print(gpu, total)
"#;
    let o = Command::new(py)
        .args(["-c", script, path.to_str().unwrap(), &HEAVY.join(",")])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = String::from_utf8_lossy(&o.stdout);
    let mut it = s.split_whitespace().map(|x| x.parse::<usize>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

#[test]
fn every_transformer_compiles_checks_clean_and_verifies_on_every_target() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let (mut gpu, mut total) = (0, 0);
    let targets = targets();
    assert!(targets.len() >= 10, "{targets:?}");
    for model in models(&corpus) {
        let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
        let inputs = model.with_file_name(format!("{stem}.inputs.npz"));
        for t in &targets {
            let out = dir.path().join(format!("{stem}.{t}.onnx"));
            let o = Command::new(common::bin())
                .arg(&model)
                .args(["--target", t, "-o"])
                .arg(&out)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            if let Some((_, _, op)) = REFUSED.iter().find(|(m, tt, _)| *m == stem && tt == t) {
                if o.status.code() != Some(1) || !err.contains(op) || out.exists() {
                    failures.push(format!(
                        "{stem} {t}: expected a refusal naming {op} (exit 1, nothing written), got exit {:?}: {}",
                        o.status.code(),
                        last(&err)
                    ));
                }
                continue;
            }
            if !o.status.success() {
                failures.push(format!(
                    "{stem} {t}: compile exit {:?}: {}",
                    o.status.code(),
                    last(&err)
                ));
                continue;
            }
            let c = Command::new(common::bin())
                .arg("check")
                .arg(&out)
                .args(["--target", t])
                .output()
                .unwrap();
            if !c.status.success() {
                failures.push(format!(
                    "{stem} {t}: check exit {:?}: {}",
                    c.status.code(),
                    last(&String::from_utf8_lossy(&c.stdout))
                ));
            }
            let v = Command::new(common::bin())
                .arg("verify")
                .arg(&model)
                .arg(&out)
                .arg("--inputs")
                .arg(&inputs)
                .output()
                .unwrap();
            if !v.status.success() {
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&v.stdout),
                    String::from_utf8_lossy(&v.stderr)
                );
                failures.push(format!(
                    "{stem} {t}: verify exit {:?}: {}",
                    v.status.code(),
                    last(&text)
                ));
            }
            if t == "rx580" {
                let (g, n) = heavy_ops(&out);
                eprintln!("{stem:28} rx580 heavy ops on the GPU {g}/{n}");
                gpu += g;
                total += n;
            }
        }
    }
    let share = 100.0 * gpu as f64 / total.max(1) as f64;
    eprintln!(
        "rx580: heavy ops on the GPU {gpu}/{total} ({share:.1}%) over the transformer corpus"
    );
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        share >= RX580_GPU_SHARE_FLOOR,
        "rx580 keeps {share:.1}% of the heavy ops on the GPU (floor {RX580_GPU_SHARE_FLOOR}%)"
    );
}

fn last(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_string()
}
