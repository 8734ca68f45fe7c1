//! The matching engine on real models: the sample `samples/ocr_tiny.onnx` and the corpus
//! (`~/.cache/onnx-safeify/corpus`, or `ONNX_SAFEIFY_CORPUS`). A missing corpus fails the
//! test unless `ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use onnx_safeify::ir::{Graph, NodeId};
use onnx_safeify::rules::{
    explain, find_matches, load_target, parse_target_str, Action, Match, Opsets, Outcome,
    SplitAxis, Target,
};

macro_rules! snap {
    ($name:expr, $value:expr) => {
        insta::with_settings!({
            snapshot_path => "../snapshots",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, $value);
        })
    };
}

fn sample() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/ocr_tiny.onnx")
}

/// A corpus file, or `None` (test skipped) when it is missing and that is allowed.
fn corpus(rel: &str) -> Option<PathBuf> {
    let root = std::env::var_os("ONNX_SAFEIFY_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_default();
            Path::new(&home).join(".cache/onnx-safeify/corpus")
        });
    let p = root.join(rel);
    if p.exists() {
        return Some(p);
    }
    if std::env::var("ONNX_SAFEIFY_ALLOW_MISSING_CORPUS").as_deref() == Ok("1") {
        eprintln!("skipped: corpus file {} is missing", p.display());
        return None;
    }
    panic!(
        "corpus file {} is missing: set ONNX_SAFEIFY_CORPUS to the corpus folder, or \
         ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1 to skip the corpus tests",
        p.display()
    );
}

struct Loaded {
    doc: onnx_safeify::Document,
}

impl Loaded {
    fn new(path: &Path) -> Self {
        Loaded {
            doc: onnx_safeify::load(path).unwrap_or_else(|e| panic!("{e}")),
        }
    }
    fn graph(&self) -> &Graph {
        &self.doc.model.graph
    }
    fn matches(&self, t: &Target) -> Vec<Match> {
        let facts = onnx_safeify::infer::declared(self.graph());
        find_matches(
            t,
            self.graph(),
            &facts,
            &Opsets::from_model(&self.doc.model),
        )
    }
    fn node_named(&self, name: &str) -> NodeId {
        let g = self.graph();
        *g.order
            .iter()
            .find(|&&n| g.node(n).name() == name)
            .unwrap_or_else(|| panic!("no node named {name}"))
    }
    fn explain(&self, t: &Target, node: NodeId) -> String {
        let facts = onnx_safeify::infer::declared(self.graph());
        explain(
            t,
            self.graph(),
            &facts,
            &Opsets::from_model(&self.doc.model),
            node,
        )
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
    }
    /// `rule  node (Op) [capture=node ...]`, one line per match.
    fn listing(&self, ms: &[Match]) -> String {
        let g = self.graph();
        ms.iter()
            .map(|m| {
                let n = g.node(m.node);
                let caps: Vec<String> = m
                    .captures
                    .iter()
                    .map(|(c, id)| format!("{c}={}", g.node(*id).name()))
                    .collect();
                format!(
                    "{:<22} {} ({}){}",
                    m.rule_id,
                    n.name(),
                    n.op_type,
                    if caps.is_empty() {
                        String::new()
                    } else {
                        format!(" [{}]", caps.join(" "))
                    }
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn counts(ms: &[Match]) -> BTreeMap<String, usize> {
    let mut c = BTreeMap::new();
    for m in ms {
        *c.entry(m.rule_id.clone()).or_insert(0) += 1;
    }
    c
}

#[test]
fn ocr_tiny_rx580() {
    let model = Loaded::new(&sample());
    let target = load_target("rx580").unwrap();
    let ms = model.matches(&target);
    let g = model.graph();
    // Exactly the depthwise convolutions with more than 64 channels are split.
    let split: Vec<&Match> = ms
        .iter()
        .filter(|m| m.rule_id == "split-depthwise")
        .collect();
    assert_eq!(split.len(), 3, "{}", model.listing(&ms));
    assert!(split.iter().all(|m| m.action
        == Action::Split {
            axis: SplitAxis::Channels,
            max: 64
        }));
    // Every Conv / ConvTranspose gets the barrier rule; nothing else fires (no contrib ops,
    // Resize scales are initializers, no int64 indices).
    let convs = g
        .order
        .iter()
        .filter(|&&n| matches!(g.node(n).op_type.as_str(), "Conv" | "ConvTranspose"))
        .count();
    let c = counts(&ms);
    assert_eq!(c.get("barrier-heavy-dispatch"), Some(&convs));
    assert_eq!(c.len(), 2, "{c:?}");
    // Priority order: the splits (50) come before the barriers (0).
    assert!(ms[..3].iter().all(|m| m.rule_id == "split-depthwise"));
    snap!("rules_match_ocr_tiny_rx580", model.listing(&ms));
}

#[test]
fn determinism() {
    let a = Loaded::new(&sample());
    let b = Loaded::new(&sample());
    let t1 = load_target("rx580").unwrap();
    let t2 = load_target("rx580").unwrap();
    assert_eq!(t1, t2);
    let m1 = a.matches(&t1);
    assert_eq!(m1, a.matches(&t1));
    assert_eq!(m1, b.matches(&t2));
    let n = a.node_named(a.graph().node(m1[0].node).name());
    assert_eq!(a.explain(&t1, n), b.explain(&t2, n));
}

#[test]
fn explain_reasons() {
    let model = Loaded::new(&sample());
    let target = load_target("rx580").unwrap();
    let g = model.graph();
    let mut out = String::new();
    // A depthwise conv of 16 channels, a Resize, and a HardSwish.
    let dw16 = g
        .order
        .iter()
        .copied()
        .find(|&n| {
            let node = g.node(n);
            node.op_type == "Conv"
                && node
                    .attr("group")
                    .and_then(|a| a.i())
                    .is_some_and(|gr| gr == 16)
        })
        .expect("a 16-group conv");
    let resize = g
        .order
        .iter()
        .copied()
        .find(|&n| g.node(n).op_type == "Resize")
        .unwrap();
    let hs = g
        .order
        .iter()
        .copied()
        .find(|&n| g.node(n).op_type == "HardSwish")
        .unwrap();
    for n in [dw16, resize, hs] {
        let node = g.node(n);
        out.push_str(&format!("## {} ({})\n", node.name(), node.op_type));
        out.push_str(&model.explain(&target, n));
        out.push_str("\n\n");
    }
    assert!(out.contains("channels is 16, needs > 64"), "{out}");
    snap!("rules_explain_ocr_tiny", out);
}

const PROBE: &str = "\
target: probe
rules:
  - id: heavy
    why: probe
    evidence: []
    match: {op: Conv, work: {gt: 0}}
    action: {barrier: {budget: 1}}
  - id: not-heavy
    why: probe
    evidence: []
    match: {op: Conv, not: {work: {gt: 0}}}
    action: deny
  - id: conv-bn-hardswish
    why: probe
    evidence: []
    match:
      op: Conv
      capture: conv
      followed_by:
        op: BatchNormalization
        capture: bn
        sole: true
        followed_by: {op: HardSwish, capture: act}
    action: cpu
  - id: resize-after-conv
    why: probe
    evidence: []
    match: {op: Resize, preceded_by: {op: Conv, via: 0, capture: src}}
    action: cpu
  - id: symbolic-batch
    why: probe
    evidence: []
    match: {input: {0: {dims: [{sym: N}, 3, H, H], static: false}}}
    action: cpu
  - id: weights
    why: probe
    evidence: []
    match:
      op: Conv
      input: {1: {initializer: true, const: true, dtype: float, rank: 4, dims: [_, 1, 5, 5]}}
      attr: {group: {gt: 1}, kernel_shape: {in: [[5, 5]]}, auto_pad: NOTSET}
    action: cpu
";

#[test]
fn unknown_facts_never_match() {
    let model = Loaded::new(&sample());
    let target = parse_target_str("probe.yaml", PROBE).unwrap();
    let ms = model.matches(&target);
    let c = counts(&ms);
    // Without inferred shapes the work of every conv is unknown: neither `work > 0` nor
    // `not work > 0` fires.
    assert_eq!(c.get("heavy"), None, "{}", model.listing(&ms));
    assert_eq!(c.get("not-heavy"), None, "{}", model.listing(&ms));
    let first_conv = model.graph().order[0];
    let why = model.explain(&target, first_conv);
    assert!(
        why.contains("heavy (barrier {budget: 1}): unknown: work is unknown"),
        "{why}"
    );
    snap!("rules_explain_unknown", why);
}

#[test]
fn captures_and_links() {
    let model = Loaded::new(&sample());
    let target = parse_target_str("probe.yaml", PROBE).unwrap();
    let ms = model.matches(&target);
    let c = counts(&ms);
    assert!(c.get("conv-bn-hardswish").copied().unwrap_or(0) > 0);
    for m in ms.iter().filter(|m| m.rule_id == "conv-bn-hardswish") {
        assert_eq!(m.capture("conv"), Some(m.node));
        let bn = m.capture("bn").unwrap();
        let act = m.capture("act").unwrap();
        assert_eq!(model.graph().node(bn).op_type, "BatchNormalization");
        assert_eq!(model.graph().node(act).op_type, "HardSwish");
        assert_eq!(m.nodes(), vec![m.node, bn, act]);
    }
    assert!(c.get("resize-after-conv").copied().unwrap_or(0) > 0);
    // Only the graph input has a declared shape: [N, 3, 64, 64].
    assert_eq!(c.get("symbolic-batch"), Some(&1));
    // 5x5 depthwise weights are initializers in the sample.
    assert!(c.get("weights").copied().unwrap_or(0) > 0);
    snap!("rules_match_ocr_tiny_probe", model.listing(&ms));
}

#[test]
fn corpus_pp_ocrv4_det() {
    let Some(p) = corpus("real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx") else {
        return;
    };
    let model = Loaded::new(&p);
    let target = load_target("rx580").unwrap();
    let ms = model.matches(&target);
    let g = model.graph();
    // Weights are Constant nodes here: depthwise-ness and channels come from them.
    for m in ms.iter().filter(|m| m.rule_id == "split-depthwise") {
        let group = g.node(m.node).attr("group").and_then(|a| a.i()).unwrap();
        assert!(group > 64, "group {group}");
    }
    let c = counts(&ms);
    assert_eq!(c.get("split-depthwise"), Some(&10), "{c:?}");
    // The Resize scales are Constant outputs: not dynamic.
    assert_eq!(c.get("dynamic-resize-on-cpu"), None);
    let listing = format!("{c:#?}");
    snap!("rules_match_pp_ocrv4_det_rx580", listing);
}

#[test]
fn corpus_ort_optimized_contrib_ops_are_unfused() {
    let target = load_target("rx580").unwrap();
    for level in ["all", "extended", "basic"] {
        for m in [
            "rapidocr_onnxruntime__ch_PP-OCRv4_det_infer",
            "rapidocr_onnxruntime__ch_PP-OCRv4_rec_infer",
            "rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer",
        ] {
            let Some(p) = corpus(&format!("ort_optimized/{m}.ort_{level}.onnx")) else {
                return;
            };
            let model = Loaded::new(&p);
            let g = model.graph();
            let contrib = g
                .order
                .iter()
                .filter(|&&n| g.node(n).domain().starts_with("com.microsoft"))
                .count();
            let ms = model.matches(&target);
            let unfused = ms.iter().filter(|m| m.rule_id == "unfuse-contrib").count();
            assert_eq!(unfused, contrib, "{m} {level}");
            assert!(
                level == "basic" || contrib > 0,
                "{m} {level} has contrib ops"
            );
            // Unfusing runs first.
            assert!(ms[..unfused].iter().all(|m| m.rule_id == "unfuse-contrib"));
        }
    }
}

#[test]
fn corpus_fused_conv_attributes() {
    let Some(p) = corpus("contrib/FusedConv_Relu_depthwise.onnx") else {
        return;
    };
    let model = Loaded::new(&p);
    let t = parse_target_str(
        "fused.yaml",
        "\
target: fused
rules:
  - id: fused-relu-dw
    why: probe
    evidence: []
    match: {op: FusedConv, domain: com.microsoft, attr: {activation: Relu}, depthwise: true, opset: 1}
    action: unfuse
  - id: fused-clip
    why: probe
    evidence: []
    match: {op: FusedConv, attr: {activation: Clip}}
    action: unfuse
",
    )
    .unwrap();
    let ms = model.matches(&t);
    let c = counts(&ms);
    assert_eq!(c.get("fused-relu-dw"), Some(&1), "{c:?}");
    assert_eq!(c.get("fused-clip"), None);
    let n = ms[0].node;
    let why = model.explain(&t, n);
    assert!(
        why.contains("fused-clip (unfuse): no match: attribute activation is Relu, needs Clip"),
        "{why}"
    );
}

/// Every built-in target runs on every corpus model, and `explain` on every node.
#[test]
fn corpus_every_target_every_model() {
    let mut files = vec![sample()];
    for dir in ["real", "ort_optimized", "contrib"] {
        let Some(d) = corpus(dir) else { return };
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
            .collect();
        entries.sort();
        files.extend(entries);
    }
    let targets: Vec<Target> = onnx_safeify::rules::builtin_names()
        .into_iter()
        .map(|n| load_target(n).unwrap())
        .collect();
    for f in &files {
        let model = Loaded::new(f);
        let facts = onnx_safeify::infer::declared(model.graph());
        let opsets = Opsets::from_model(&model.doc.model);
        for t in &targets {
            let ms = find_matches(t, model.graph(), &facts, &opsets);
            for m in &ms {
                let e = explain(t, model.graph(), &facts, &opsets, m.node);
                let mine = e.iter().find(|x| x.rule_id == m.rule_id).unwrap();
                assert_eq!(mine.outcome, Outcome::Matched, "{}", f.display());
            }
        }
    }
}

/// `provider_kernel` asks the target's provider (DirectML's generated table): ONNX Gelu-20 and
/// com.microsoft FusedConv have no DirectML kernel ("missing"), the sample's Conv has one
/// ("registered"); `directml` pins what is missing, `rx580` decomposes the Gelu first (priority
/// 15 over 10) and leaves FusedConv to `unfuse-contrib`; a target without a provider cannot
/// ask.
#[test]
fn provider_kernel_matches() {
    let (Some(gelu), Some(fused)) = (
        corpus("contrib/Gelu_onnx20.onnx"),
        corpus("contrib/FusedConv_Relu.onnx"),
    ) else {
        return;
    };
    let directml = load_target("directml").unwrap();
    let rx580 = load_target("rx580").unwrap();
    let gelu = Loaded::new(&gelu);
    let g0 = gelu.graph().order[0];
    assert_eq!(gelu.graph().node(g0).op_type, "Gelu");
    let c = counts(&gelu.matches(&directml));
    assert_eq!(c.get("missing-kernel-on-cpu"), Some(&1), "{c:?}");
    let ms = gelu.matches(&rx580);
    assert_eq!(
        ms[0].rule_id,
        "unfuse-missing-kernel",
        "{}",
        gelu.listing(&ms)
    );
    let why = gelu.explain(&directml, g0);
    assert!(
        why.contains("missing-kernel-on-cpu (cpu): matches"),
        "{why}"
    );
    let fused = Loaded::new(&fused);
    let ms = fused.matches(&rx580);
    assert_eq!(ms[0].rule_id, "unfuse-contrib", "{}", fused.listing(&ms));
    // unfuse-missing-kernel asks for the default domain: FusedConv is not its.
    assert!(!ms.iter().any(|m| m.rule_id == "unfuse-missing-kernel"));
    assert!(ms.iter().any(|m| m.rule_id == "missing-kernel-on-cpu"));
    // A registered kernel: no match, and the reason names the state and the provider.
    let sample = Loaded::new(&sample());
    let conv = sample
        .graph()
        .order
        .iter()
        .copied()
        .find(|&n| sample.graph().node(n).op_type == "Conv")
        .unwrap();
    let why = sample.explain(&directml, conv);
    assert!(
        why.contains(
            "missing-kernel-on-cpu (cpu): no match: provider_kernel is registered under \
             DmlExecutionProvider, needs one of missing, deficient"
        ),
        "{why}"
    );
    // Against another provider's table the same node can differ: CUDA registers Gelu-20.
    for (provider, want) in [("cuda", 0), ("directml", 1)] {
        let t = parse_target_str(
            "pk.yaml",
            &format!(
                "target: pk\nextends: none\nprovider: {provider}\nrules:\n  - {{id: m, why: w, evidence: [], match: {{provider_kernel: missing}}, action: cpu}}\n"
            ),
        )
        .unwrap();
        assert_eq!(gelu.matches(&t).len(), want, "{provider}");
    }
}
