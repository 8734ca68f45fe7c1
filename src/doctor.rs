//! `doctor`: read an error log a user pasted, name the likely cause with its evidence, suggest
//! the target and rules that address it, and (given the model) list the nodes involved.
//! Signatures are data: a table of patterns, causes, evidence and the ops they implicate.

use crate::ir::{Graph, Model, Origin};
use crate::rewrite::consts::constant_tensor;

/// Which nodes of a model a signature implicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implicates {
    /// Heavy dispatches: Conv/ConvTranspose/MatMul/Gemm and every com.microsoft fused op.
    HeavyAndFused,
    /// Resize/Upsample whose scales or sizes are not constants.
    DynamicResize,
    /// Gather/GatherElements/GatherND/ScatterND/ScatterElements/TopK/NonZero (int64 indices).
    IndexOps,
    /// ConvTranspose.
    ConvTranspose,
    /// Depthwise and grouped convolutions.
    GroupedConv,
    /// com.microsoft / com.microsoft.nchwc ops.
    ContribOps,
    /// Data-dependent-shape ops (NonZero, NonMaxSuppression, RoiAlign, Unique...).
    DataDependent,
    /// Nothing model-specific.
    None,
}

/// A known error signature.
#[derive(Debug, Clone)]
pub struct Signature {
    pub id: &'static str,
    /// Any of these substrings (case-insensitive) identifies the signature.
    pub patterns: &'static [&'static str],
    pub cause: &'static str,
    pub evidence: &'static [&'static str],
    pub targets: &'static [&'static str],
    pub rules: &'static [&'static str],
    pub implicates: Implicates,
}

/// The signature table (its evidence is explained in docs/hazards.md).
pub const SIGNATURES: &[Signature] = &[
    Signature {
        id: "dxgi-device-removed",
        patterns: &["887a0005", "dxgi_error_device_removed", "device_removed", "device removed"],
        cause: "the GPU was removed by the driver (a reset after a dispatch ran too long or faulted): \
                long DirectML command lists of small depthwise convolutions and fused ops on weak GPUs",
        evidence: &["microsoft/onnxruntime#29263", "microsoft/onnxruntime#22700", "microsoft/onnxruntime#19724", "immich-app/immich#31469", "microsoft/Olive#1194"],
        targets: &["rx580", "directml"],
        rules: &["unfuse-contrib", "split-depthwise", "barrier-heavy-dispatch"],
        implicates: Implicates::HeavyAndFused,
    },
    Signature {
        id: "dxgi-device-hung",
        patterns: &["887a0006", "dxgi_error_device_hung", "device_hung", "device hung"],
        cause: "the GPU stopped responding to a command list (it hung); heavy or long fused dispatches",
        evidence: &["microsoft/onnxruntime#22700", "immich-app/immich#31469", "microsoft/onnxruntime#19724"],
        targets: &["rx580", "directml"],
        rules: &["unfuse-contrib", "split-depthwise", "barrier-heavy-dispatch"],
        implicates: Implicates::HeavyAndFused,
    },
    Signature {
        id: "tdr",
        patterns: &["display driver stopped responding", "tdr", "video_tdr_failure", "has successfully recovered", "black screen", "driver reset"],
        cause: "Windows' Timeout Detection and Recovery reset the display driver: a GPU command ran past \
                the ~2 s limit (DirectML fuses everything it claims into one command list)",
        evidence: &["microsoft/onnxruntime#29263", "microsoft/onnxruntime#19724", "microsoft/tensorflow-directml#28"],
        targets: &["rx580", "directml"],
        rules: &["barrier-heavy-dispatch", "split-depthwise", "unfuse-contrib"],
        implicates: Implicates::HeavyAndFused,
    },
    Signature {
        id: "e-invalidarg",
        patterns: &["80070057", "the parameter is incorrect", "e_invalidarg"],
        cause: "DirectML rejected an operator's parameters: Resize/Upsample with dynamic output sizes, \
                int64 indices in Gather/ScatterND/TopK/NonZero, or a float16 graph in DML's fusion helper",
        evidence: &["microsoft/onnxruntime#24928", "microsoft/onnxruntime#18613", "microsoft/onnxruntime#13975", "microsoft/DirectML#727", "microsoft/onnxruntime#20742"],
        targets: &["rx580", "directml"],
        rules: &["dynamic-resize-on-cpu", "int64-indices-on-cpu", "topk-on-cpu", "nonzero-on-cpu"],
        implicates: Implicates::DynamicResize,
    },
    Signature {
        id: "miopen-bad-parm",
        patterns: &["miopenstatusbadparm", "miopen status bad parm"],
        cause: "MIOpen (ROCm) refused a convolution's parameters; seen with ConvTranspose in PP-OCRv5 models",
        evidence: &["immich-app/immich#23629", "ROCm/AMDMIGraphX#484"],
        targets: &["rocm-migraphx"],
        rules: &["cpu-convtranspose"],
        implicates: Implicates::ConvTranspose,
    },
    Signature {
        id: "migraphx-unsupported-contrib",
        patterns: &["embedlayernormalization", "skiplayernormalization", "unsupported operator", "migraphx: unknown operator", "operator not supported"],
        cause: "the provider does not implement a com.microsoft fused op; it must be decomposed into standard ops",
        evidence: &["ROCm/AMDMIGraphX#2756", "ROCm/AMDMIGraphX#2760"],
        targets: &["rocm-migraphx"],
        rules: &["unfuse-contrib"],
        implicates: Implicates::ContribOps,
    },
    Signature {
        id: "wgsl-out-of-bounds",
        patterns: &["wgsl", "index out of bounds", "shader validation", "can't perform binary op"],
        cause: "a WebGPU shader indexed outside a buffer or failed validation (indexing, broadcast Add, QMoE kernels)",
        evidence: &["microsoft/onnxruntime#18311", "microsoft/onnxruntime#24744", "microsoft/onnxruntime#27220"],
        targets: &["webgpu"],
        rules: &["resize-linear-not-4d-on-cpu", "dft-on-cpu", "qmoe-on-cpu"],
        implicates: Implicates::IndexOps,
    },
    Signature {
        id: "fp16-noise",
        patterns: &["black image", "nan", "noise", "all zeros"],
        cause: "float16 kernels on Intel GPUs compute wrong values (noise, black images); run in float32",
        evidence: &["microsoft/DirectML#380", "microsoft/onnxruntime#19995", "openvinotoolkit/openvino#2925"],
        targets: &["intel-gen9", "openvino-gpu", "rocm-migraphx"],
        rules: &["fp32-fence"],
        implicates: Implicates::None,
    },
    Signature {
        id: "metacommand-mismatch",
        patterns: &["metacommand", "meta command", "meta_command"],
        cause: "a DirectML metacommand of the driver has a parameter mismatch; disable metacommands",
        evidence: &["microsoft/DirectML#70", "microsoft/onnxruntime#22466"],
        targets: &["intel-gen9", "intel-xe"],
        rules: &[],
        implicates: Implicates::None,
    },
    Signature {
        id: "coreml-abort",
        patterns: &["coreml", "mlprogram", "error in building plan", "mpsgraph", "contracting dimensions differ"],
        cause: "CoreML claimed a partition it cannot run and aborted with no per-node fallback",
        evidence: &["docling-project/docling.rs#324", "microsoft/onnxruntime#32569"],
        targets: &["coreml"],
        rules: &["unfuse-contrib", "dynamic-matmul-on-cpu"],
        implicates: Implicates::ContribOps,
    },
    Signature {
        id: "tensorrt-data-dependent",
        patterns: &["data-dependent", "nonzero", "nonmaxsuppression", "roialign", "could not find any implementation"],
        cause: "TensorRT cannot build ops whose output shape depends on data; they must run elsewhere",
        evidence: &["microsoft/onnxruntime PR 22681", "microsoft/onnxruntime PR 23705"],
        targets: &["tensorrt"],
        rules: &["cpu-data-dependent"],
        implicates: Implicates::DataDependent,
    },
];

/// One diagnosis.
#[derive(Debug, Clone)]
pub struct Diagnosis {
    pub signature: &'static Signature,
    /// The log lines that matched (trimmed, at most five).
    pub lines: Vec<String>,
    /// Nodes of the model involved: (name, op). When the log names a node the model has, that
    /// node alone.
    pub nodes: Vec<(String, String)>,
    /// Whether `nodes` is the node the log names (rather than every node of the implicated
    /// kinds).
    pub named: bool,
    /// For the named node: the rules of the signature's targets that match it, as
    /// (target, rule id, action); filled by the caller that can run the matcher ([`cover`]).
    pub covered_by: Vec<(String, String, String)>,
}

/// The node names a runtime's log gives: ONNX Runtime's `Name:'X'` (the node it was running
/// when the error was raised) and `node 'X'`, in the order they first appear.
pub fn named_in_log(log: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for marker in ["Name:'", "Name: '", "node '"] {
        let mut rest = log;
        while let Some(i) = rest.find(marker) {
            let after = &rest[i + marker.len()..];
            let Some(end) = after.find('\'') else { break };
            let name = &after[..end];
            if !name.is_empty() && !name.contains('\n') && !out.iter().any(|n| n == name) {
                out.push(name.to_string());
            }
            rest = &after[end..];
        }
    }
    out
}

/// The rules that cover each diagnosis's named node: `check(target)` gives the findings of a
/// target on the model (node, rule, action); the first target that has a finding on the node
/// is kept, with every rule it applies there.
pub fn cover(ds: &mut [Diagnosis], mut check: impl FnMut(&str) -> Vec<(String, String, String)>) {
    for d in ds.iter_mut().filter(|d| d.named) {
        let Some((node, _)) = d.nodes.first().cloned() else {
            continue;
        };
        for t in d.signature.targets {
            let hits: Vec<(String, String, String)> = check(t)
                .into_iter()
                .filter(|(n, _, _)| *n == node)
                .map(|(_, rule, action)| (t.to_string(), rule, action))
                .collect();
            if !hits.is_empty() {
                d.covered_by = hits;
                break;
            }
        }
    }
}

/// Diagnose a log. Signatures are tried in table order; each matches at most once.
pub fn diagnose(log: &str, model: Option<&Model>) -> Vec<Diagnosis> {
    let lower: Vec<(String, &str)> = log.lines().map(|l| (l.to_ascii_lowercase(), l)).collect();
    let named = named_in_log(log);
    let mut out = Vec::new();
    for sig in SIGNATURES {
        let lines: Vec<String> = lower
            .iter()
            .filter(|(l, _)| {
                sig.patterns.iter().any(|p| {
                    if p.len() <= 4 {
                        // Short patterns (tdr, nan) must be whole words.
                        l.split(|c: char| !c.is_ascii_alphanumeric())
                            .any(|w| w == *p)
                    } else {
                        l.contains(p)
                    }
                })
            })
            .map(|(_, orig)| orig.trim().to_string())
            .take(5)
            .collect();
        if lines.is_empty() {
            continue;
        }
        // A node the log names and the model has is the one to look at: it alone.
        let named_node = model.and_then(|m| {
            let g = &m.graph;
            named.iter().find_map(|want| {
                g.order.iter().find_map(|&n| {
                    let node = g.node(n);
                    (node.name() == want.as_str()).then(|| (want.clone(), op_label(g, n)))
                })
            })
        });
        let (nodes, is_named) = match named_node {
            Some(n) => (vec![n], true),
            None => (
                model
                    .map(|m| implicated(&m.graph, sig.implicates))
                    .unwrap_or_default(),
                false,
            ),
        };
        out.push(Diagnosis {
            signature: sig,
            lines,
            nodes,
            named: is_named,
            covered_by: Vec::new(),
        });
    }
    out
}

fn implicated(g: &Graph, what: Implicates) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for &n in &g.order {
        let node = g.node(n);
        let op = node.op_type.as_str();
        let contrib = node.domain().starts_with("com.microsoft");
        let hit = match what {
            Implicates::HeavyAndFused => {
                contrib || matches!(op, "Conv" | "ConvTranspose" | "MatMul" | "Gemm")
            }
            Implicates::DynamicResize => {
                matches!(op, "Resize" | "Upsample")
                    && node.inputs.iter().skip(1).flatten().any(|v| {
                        constant_tensor(g, *v).is_none()
                            && !matches!(g.value(*v).origin, Origin::Initializer)
                    })
            }
            Implicates::IndexOps => matches!(
                op,
                "Gather"
                    | "GatherElements"
                    | "GatherND"
                    | "ScatterND"
                    | "ScatterElements"
                    | "TopK"
                    | "NonZero"
            ),
            Implicates::ConvTranspose => op == "ConvTranspose",
            Implicates::GroupedConv => {
                op == "Conv" && node.attr("group").and_then(|a| a.i()).unwrap_or(1) > 1
            }
            Implicates::ContribOps => contrib,
            Implicates::DataDependent => matches!(
                op,
                "NonZero" | "NonMaxSuppression" | "RoiAlign" | "Unique" | "Compress"
            ),
            Implicates::None => false,
        };
        if hit {
            out.push((node.name().to_string(), op_label(g, n)));
        }
    }
    out
}

/// A node's op as doctor prints it: `Conv`, or `com.microsoft::FusedConv`.
fn op_label(g: &Graph, n: crate::ir::NodeId) -> String {
    let node = g.node(n);
    if node.domain().is_empty() {
        node.op_type.to_string()
    } else {
        format!("{}::{}", node.domain(), node.op_type)
    }
}

/// Render diagnoses as text; the `try:` lines name the model as `MODEL`.
pub fn render_text(ds: &[Diagnosis]) -> String {
    render_text_for(ds, None)
}

/// Render diagnoses as text; the `try:` lines name `model` (quoted for a POSIX shell where it
/// needs it) when it is given, `MODEL` otherwise.
pub fn render_text_for(ds: &[Diagnosis], model: Option<&str>) -> String {
    use std::fmt::Write;
    let model = model.map(shell_word).unwrap_or_else(|| "MODEL".into());
    let mut s = String::new();
    if ds.is_empty() {
        s.push_str("no known signature in this log. onnx-safeify knows: ");
        s.push_str(
            &SIGNATURES
                .iter()
                .map(|x| x.id)
                .collect::<Vec<_>>()
                .join(", "),
        );
        s.push_str(
            ".\nRun `onnx-safeify check MODEL --target T` to see what a target would change.\n",
        );
        return s;
    }
    for d in ds {
        let sig = d.signature;
        let _ = writeln!(
            s,
            "{}: {}",
            sig.id,
            sig.cause.split_whitespace().collect::<Vec<_>>().join(" ")
        );
        for l in &d.lines {
            let _ = writeln!(s, "  log:      {l}");
        }
        let _ = writeln!(s, "  evidence: {}", sig.evidence.join(", "));
        if !sig.targets.is_empty() {
            let _ = writeln!(s, "  targets:  {}", sig.targets.join(", "));
        }
        if d.named {
            if let Some((name, op)) = d.nodes.first() {
                let _ = writeln!(s, "  node:     {name} ({op}), named in the log");
            }
            for (t, rule, action) in &d.covered_by {
                let _ = writeln!(s, "  covered:  {t} rule {rule} ({action}) matches it");
            }
            if d.covered_by.is_empty() && !sig.targets.is_empty() {
                let _ = writeln!(
                    s,
                    "  covered:  no rule of {} matches it",
                    sig.targets.join(", ")
                );
            }
        }
        if !sig.rules.is_empty() {
            let _ = writeln!(s, "  rules:    {}", sig.rules.join(", "));
        }
        if !d.nodes.is_empty() && !d.named {
            let _ = writeln!(s, "  nodes ({}):", d.nodes.len());
            for (name, op) in d.nodes.iter().take(20) {
                let _ = writeln!(s, "    {name} ({op})");
            }
            if d.nodes.len() > 20 {
                let _ = writeln!(s, "    ... and {} more", d.nodes.len() - 20);
            }
        }
        if let Some(t) = sig.targets.first() {
            let _ = writeln!(s, "  try:      onnx-safeify {model} --target {t}");
        }
    }
    s
}

/// `w` as one word of a POSIX shell command line: as is when it is plain, else single-quoted.
fn shell_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./+,:@%=".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// Render diagnoses as JSON: `{"diagnoses": [{"signature", "cause", "evidence", "targets",
/// "rules", "log_lines", "nodes": [{"name", "op"}], "named_in_log", "covered_by": [{"target",
/// "rule", "action"}]}]}`.
pub fn render_json(ds: &[Diagnosis]) -> String {
    let list: Vec<serde_json::Value> = ds
        .iter()
        .map(|d| {
            serde_json::json!({
                "signature": d.signature.id,
                "cause": d.signature.cause.split_whitespace().collect::<Vec<_>>().join(" "),
                "evidence": d.signature.evidence,
                "targets": d.signature.targets,
                "rules": d.signature.rules,
                "log_lines": d.lines,
                "nodes": d.nodes.iter().map(|(n, o)| serde_json::json!({"name": n, "op": o})).collect::<Vec<_>>(),
                "named_in_log": d.named,
                "covered_by": d.covered_by.iter().map(|(t, r, a)| serde_json::json!({"target": t, "rule": r, "action": a})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let known = ds.len();
    let v = serde_json::json!({
        "diagnoses": list,
        "known_signature": known > 0,
    });
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}
