//! Differential checks of the `unfuse` decompositions against ONNX Runtime's own kernels
//! (issue 39): every mismatch `tools/fuzz_decomp.py` ever found is kept under
//! `tests/data/fuzz_regressions/decomp/` (a one-node model and its inputs) and replayed here
//! through the binary and ONNX Runtime CPU, at the class the registry declares for the op
//! (exact: bit-identical; rounding: 1e-5 of the output's scale for float32, 2 units in the last
//! place for float16). A short fuzz of every family runs too, with a fixed seed, so a new
//! decomposition or a change of class is checked on fresh instances.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn fuzz_tool() -> PathBuf {
    common::repo().join("tools/fuzz_decomp.py")
}

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_onnx-safeify")
}

fn venv() -> Option<PathBuf> {
    let py = common::venv_python();
    if py.is_none() {
        eprintln!(
            "SKIPPED: no test venv (onnx, onnxruntime, numpy); run scripts/corpus.sh to check the decompositions against ONNX Runtime"
        );
    }
    py
}

fn cases() -> Vec<PathBuf> {
    let dir = common::repo().join("tests/data/fuzz_regressions/decomp");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("model.onnx").is_file())
        .collect();
    out.sort();
    out
}

/// Replay kept cases in one run of the tool: one verdict (`case`, `class`, `status`, `detail`)
/// per case, in order.
fn replay(py: &Path, cases: &[PathBuf]) -> Vec<serde_json::Value> {
    let o = Command::new(py)
        .arg(fuzz_tool())
        .arg("replay")
        .args(cases)
        .arg("--binary")
        .arg(binary())
        .output()
        .expect("python runs");
    let out = String::from_utf8_lossy(&o.stdout);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    assert_eq!(
        rows.len(),
        cases.len(),
        "the replay stopped early:\n{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    rows
}

fn status(v: &serde_json::Value) -> &str {
    v["status"].as_str().unwrap_or("?")
}

#[test]
fn every_kept_fuzz_mismatch_now_meets_its_class() {
    let Some(py) = venv() else { return };
    let cases = cases();
    assert!(
        cases.len() >= 20,
        "only {} kept cases under tests/data/fuzz_regressions/decomp",
        cases.len()
    );
    let mut failed = Vec::new();
    let mut decomposed = 0;
    for v in replay(&py, &cases) {
        match status(&v) {
            "ok" | "conditioned" => decomposed += 1,
            "refused" => {}
            _ => failed.push(v.to_string()),
        }
    }
    assert!(
        failed.is_empty(),
        "{} case(s) fail:\n{}",
        failed.len(),
        failed.join("\n")
    );
    // A refused decomposition falls back to the CPU (exact), but most kept cases must be
    // decomposed, or this test would check nothing.
    assert!(
        decomposed * 10 >= cases.len() * 8,
        "only {decomposed} of {} kept cases were decomposed",
        cases.len()
    );
}

/// The kept cases whose sums cancel (MatMulNBits, LayerNormGroup, FusedMatMul's single dot
/// products, GemmFastGelu's product and its GELU deep in the negative tail) or whose scores a
/// softmax amplifies (GroupQueryAttention: ONNX Runtime's flash order, its fused rotary;
/// MultiHeadAttention, DecoderMaskedMultiHeadAttention, a batch entry with every key masked) meet the
/// rounding class only with the conditioning allowance (`tools/fuzz_decomp.py`, `CONDITIONING`):
/// they replay as "conditioned", not "ok", and an output off by ten times its allowance in one
/// element is still refused. The allowance is about one rounding of what the element is made of
/// (sqrt(K) * 2^-24 of a sum's terms; a rounding of the largest score times the largest value),
/// far below what a wrong term, scale or position moves.
const CONDITIONED: &str = r#"
import sys, os, json, numpy as np
sys.path.insert(0, sys.argv[1])
import fuzz_decomp as fd
seen = 0
for d in sys.argv[2:]:
    m, f, meta = fd.load_case(d)
    op = m.graph.node[0].op_type
    if op not in fd.CONDITIONING:
        continue
    ref = fd.reference(m, f, os.path.join(d, "model.onnx"))[0]
    if ref.dtype != np.float32:
        continue
    assert fd.within_conditioning(m, f, 0, ref, ref.copy(), ("rounding",)), d
    allow = np.broadcast_to(fd.CONDITIONING[op](m, f, 0), ref.shape)
    k = np.unravel_index(np.argmax(allow), ref.shape)
    bad = ref.astype(np.float64)
    bad[k] += 10 * (allow[k] + fd.f32_rounding_bound(float(np.abs(ref).max())))
    assert not fd.within_conditioning(m, f, 0, ref, bad.astype(np.float32), ("rounding",)), d
    seen += 1
print(seen)
"#;

#[test]
fn ill_conditioned_sums_pass_only_within_their_allowance() {
    let Some(py) = venv() else { return };
    let cases: Vec<PathBuf> = cases()
        .into_iter()
        .filter(|c| {
            let n = c.file_name().unwrap().to_string_lossy().to_string();
            [
                "MatMulNBits_",
                "LayerNormGroup_",
                "GroupQueryAttention_",
                "MultiHeadAttention_",
                "DecoderMaskedMultiHeadAttention_",
                "GemmFastGelu_",
                "FusedMatMulGroup_",
            ]
            .iter()
            .any(|f| n.starts_with(f))
        })
        .collect();
    let rows = replay(&py, &cases);
    let off: Vec<_> = rows
        .iter()
        .filter(|v| !matches!(status(v), "ok" | "conditioned" | "refused"))
        .collect();
    assert!(off.is_empty(), "{off:#?}");
    let conditioned = rows.iter().filter(|v| status(v) == "conditioned").count();
    // 33 on the Xeon (AVX-512) that kept them, 32 on an AMD EPYC (AVX2): where the kernel's
    // own sums land depends on the CPU's code path. Since the layer norms take their mean about
    // the row's first element, as ONNX Runtime's Welford update starts (issue 48), five
    // LayerNormGroup cases meet the plain bound: 28 where 33 did before. Most still need it.
    assert!(
        conditioned >= 26,
        "only {conditioned} kept cases needed the allowance"
    );
    let o = Command::new(&py)
        .args(["-c", CONDITIONED])
        .arg(common::repo().join("tools"))
        .args(&cases)
        .output()
        .expect("python runs");
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let seen: usize = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(seen >= 33, "checked {seen} cases");
}

/// Run the fuzzer for `families` with `instances` each (fixed seed, nothing kept) and return
/// one JSON object per family.
fn fuzz(py: &Path, families: &[&str], instances: u32, seed: u32) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(py)
        .arg(fuzz_tool())
        .args(["run", "--no-keep", "--seconds-per-family", "120"])
        .args(["--max-instances", &instances.to_string()])
        .args(["--seed", &seed.to_string()])
        .args(["--families", &families.join(",")])
        .arg("--save")
        .arg(dir.path())
        .arg("--binary")
        .arg(binary())
        .output()
        .expect("python runs");
    assert!(
        o.status.success(),
        "fuzz_decomp.py failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn assert_clean(rows: &[serde_json::Value], families: &[&str]) {
    assert_eq!(rows.len(), families.len(), "{rows:#?}");
    for r in rows {
        let fam = r["family"].as_str().unwrap_or("?");
        let n = r["instances"].as_u64().unwrap_or(0);
        let ok = r["ok"].as_u64().unwrap_or(0);
        assert_eq!(
            r["mismatch"].as_u64(),
            Some(0),
            "{fam}: decompositions that miss their class: {r:#}"
        );
        assert!(
            n > 0 && ok * 2 >= n,
            "{fam}: too few instances decomposed: {r:#}"
        );
    }
}

#[test]
fn a_short_fuzz_of_every_family_meets_the_declared_classes() {
    let Some(py) = venv() else { return };
    let families = [
        "QLinearAdd",
        "QLinearMul",
        "QLinearSoftmax",
        "QLinearAveragePool",
        "QLinearGlobalAveragePool",
        "QLinearConcat",
        "QLinearConv",
        "QGemm",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
        "Attention",
        "MultiHeadAttention",
        "QAttention",
    ];
    let rows = fuzz(&py, &families, 25, 39);
    assert_clean(&rows, &families);
}

/// The other decompositions (issue 39, item 5): GELUs, layer norms, FusedConv/NhwcMaxPool,
/// FusedGemm, FusedMatMul, RotaryEmbedding, GroupQueryAttention, (Q)EmbedLayerNormalization,
/// MatMulNBits, DynamicQuantizeLSTM (approximate: its stated bound), HardSwish/Mish/
/// GroupNormalization and ONNX Runtime's own NCHWc regions.
#[test]
fn a_short_fuzz_of_the_other_decompositions_meets_their_classes() {
    let Some(py) = venv() else { return };
    let families = [
        "GeluGroup",
        "LayerNormGroup",
        "FusedConvGroup",
        "FusedGemm",
        "FusedMatMulGroup",
        "RotaryEmbedding",
        "GroupQueryAttention",
        "EmbedLayerNormGroup",
        "MatMulNBits",
        "DynamicQuantizeLSTM",
        "ActNormGroup",
        "NchwcRegion",
    ];
    let rows = fuzz(&py, &families, 20, 39);
    assert_clean(&rows, &families);
}

/// QLinearSigmoid and QLinearLeakyRelu become a Gather over a 256-entry table built at compile
/// time with the kernel's arithmetic; half of the fuzzed instances hold every one of the 256
/// codes, each with its own scales, zero points (and alpha).
#[test]
fn lookup_tables_match_onnx_runtime_on_every_code() {
    let Some(py) = venv() else { return };
    let families = ["QLinearSigmoid", "QLinearLeakyRelu"];
    let rows = fuzz(&py, &families, 120, 7);
    assert_clean(&rows, &families);
}

/// Issue 34's decoder, diffusion and packed-BERT decompositions. DecoderMaskedMultiHeadAttention
/// is judged against ONNX Runtime's CPU kernel (float32; float16 on the same values in
/// float32); ONNX Runtime has no CPU kernel for the others, which are judged against the
/// fuzzer's references (ONNX Runtime running the unfused graph for BiasSplitGelu, float64
/// formulas for the rest).
#[test]
fn decoder_diffusion_and_packed_families_meet_their_classes() {
    let Some(py) = venv() else { return };
    let families = [
        "DecoderMaskedMultiHeadAttention",
        "GemmFastGelu",
        "BiasSplitGelu",
        "GroupNorm",
        "SkipGroupNorm",
        "RemovePadding",
        "RestorePadding",
        "PackedAttention",
        "PackedMultiHeadAttention",
    ];
    let rows = fuzz(&py, &families, 25, 34);
    assert_clean(&rows, &families);
}

/// Issue 48: chains of contrib ops as ONNX Runtime's optimizer writes them (the residual stream
/// in the thousands, sequences and hidden sizes to 4096, optional outputs read downstream) and
/// float16 Conv/ConvTranspose chains compiled for rx580, intel-gen9, rocm-migraphx, directml or
/// webgpu. A chain's ill-conditioned layer norm is "conditioned" (judged against a float64
/// evaluation of the original, as `verify` does), never a mismatch.
#[test]
fn transformer_chains_and_float16_conv_chains_meet_their_classes() {
    let Some(py) = venv() else { return };
    let families = ["TransformerChain", "Fp16ConvChain"];
    let rows = fuzz(&py, &families, 12, 48);
    assert_eq!(rows.len(), families.len(), "{rows:#?}");
    for r in &rows {
        let fam = r["family"].as_str().unwrap_or("?");
        let n = r["instances"].as_u64().unwrap_or(0);
        let judged = r["ok"].as_u64().unwrap_or(0) + r["conditioned"].as_u64().unwrap_or(0);
        assert_eq!(r["mismatch"].as_u64(), Some(0), "{fam}: {r:#}");
        assert!(n > 0 && judged * 2 >= n, "{fam}: too few judged: {r:#}");
    }
}
