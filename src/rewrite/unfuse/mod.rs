//! The `unfuse` action: decompose fused operators (ONNX Runtime contrib ops, its NCHWc layout
//! ops, ONNX function ops) into standard ONNX operators at the model's own opset.
//!
//! One module per operator family, registered in [`REGISTRY`]. Each decomposition reads the
//! node, checks what it needs (attributes, constant weights, element type, rank) and returns a
//! [`Patch`] or an [`Unsupported`] with the reason; it never panics on what came from the file.
//! The formula each one implements is cited next to it.
//!
//! Opset policy: a decomposition never raises the default-domain opset import; each picks the
//! operator forms of the model's opset, and refuses, with the opset it would need, where no form
//! exists. The one raise is the compile's, before any rule runs: to opset 21 for the packed
//! MatMulNBits form, where every node keeps its meaning ([`crate::rewrite::opset`]).

pub mod activation;
pub mod attention;
pub mod attention_past;
pub mod decoder_attention;
pub mod dequantize;
pub mod embed_layer_norm;
pub mod function_ops;
pub mod fused_conv;
pub mod fused_gemm;
pub mod fused_matmul;
pub mod gelu;
pub mod gelu_fused;
pub mod gqa;
pub mod group_norm;
pub mod layer_norm;
pub mod matmul_nbits;
pub mod nchwc;
mod needs;
pub mod packed;
pub mod qattention;
pub mod quant;
pub mod rotary;
pub mod rw;

use std::collections::{HashMap, HashSet};

use crate::infer::{Facts, InferOptions, Seed};
use crate::io::ExternalData;
use crate::ir::scope::fold_graphs_mut;
use crate::ir::{Graph, Model, Node, NodeId, ValueId};
use crate::rewrite::pass::{
    apply_plans, covered, op_label, Cause, Cx, Pass, Planned, Refusal, Schedule, Step,
};
use crate::rewrite::{Exactness, Patch};

/// The NCHWc layout domain of ONNX Runtime's CPU provider.
pub const NCHWC_DOMAIN: &str = "com.microsoft.nchwc";
/// ONNX Runtime's contrib domain.
pub const MS_DOMAIN: &str = "com.microsoft";

/// What a decomposition may consult.
#[derive(Clone, Copy)]
pub struct UnfuseCtx<'a> {
    /// The model's default-domain opset: new nodes use the operator forms of this version.
    pub model_opset: i64,
    /// The rule id stamped on new nodes.
    pub rule: &'a str,
    /// What `infer` established about the graph's values (element type, shape, uses,
    /// NCHWc-blocked), before any decomposition of this round.
    pub facts: &'a Facts,
    /// Resolver for weights stored as external data.
    pub external: Option<&'a ExternalData>,
    /// NCHWc block size of the CPU that produced the model (8 with AVX2, 16 with AVX-512):
    /// inferred from the model when absent, and checked against it when given.
    pub nchwc_block_size: Option<i64>,
    /// External data the unpacked MatMulNBits form may read, within a bound (see [`Unpack`]).
    pub unpack: Option<Unpack<'a>>,
    /// Where the unpacked MatMulNBits form registers the weights it leaves to compute while
    /// the output is written (the model's, [`crate::io::computed`]); without it they are
    /// computed into memory here.
    pub computed: Option<&'a crate::io::computed::Scope>,
    /// The nodes of the graph from which a quantizer is reachable ([`reaching_quantizers`]),
    /// found once for the batch; `None`: found for each node that asks.
    pub reaching_quantizers: Option<&'a HashSet<NodeId>>,
    /// The execution provider the target names (`provider:`): a decomposition that must emit
    /// only what that provider runs checks its operators against the provider's kernels
    /// ([`crate::runtime::capability`]). `None`: no provider named, nothing to check.
    pub profile: Option<&'static crate::runtime::Profile>,
}

/// External data that only the unpacked MatMulNBits form reads (its weights, and the small
/// scales and zero points of either form), and how many bytes of float weights the batch's
/// decompositions may add from it: the bound keeps the output within what its size guard
/// (`--allow-growth`) would let through, and within what a model file can hold.
#[derive(Clone, Copy)]
pub struct Unpack<'a> {
    pub data: &'a ExternalData,
    pub limit: u64,
    /// Bytes of float weights unpacked so far in this batch.
    pub spent: &'a std::cell::Cell<u64>,
}

impl<'a> UnfuseCtx<'a> {
    pub fn new(model_opset: i64, rule: &'a str, facts: &'a Facts) -> Self {
        UnfuseCtx {
            model_opset,
            rule,
            facts,
            external: None,
            nchwc_block_size: None,
            unpack: None,
            computed: None,
            reaching_quantizers: None,
            profile: None,
        }
    }
}

/// Why a node was not decomposed: a [`Refusal`] (its cause and reason).
pub type Unsupported = Refusal;

/// A decomposition: builds the patch for one node (nothing is changed yet).
pub type Decompose = fn(&UnfuseCtx, &Graph, NodeId) -> Result<Patch, Unsupported>;

const EXACT: Exactness = Exactness::Exact;
const ROUNDING: Exactness = Exactness::Rounding;
/// `DynamicQuantizeLSTM` as a float LSTM: the weights are dequantized, the activations are not
/// quantized per step as the kernel does. Measured at 5e-3 of the logits' scale on a shipped
/// OCR model; `tools/fuzz_decomp.py` (random weights up to about 4 in magnitude, inputs up to
/// about 10, up to 5 steps) measures 0.006 of an output's scale (median) and 0.09 (99th
/// percentile). Where a gate sits at a quantization step, the float LSTM and the 8-bit one part
/// ways: 289 of 117,032 fuzzed instances were past 0.25 of their scale, up to 6 times the scale
/// of an output below 1 and 8e8 times one that collapses to 1e-17. Measured against the hidden
/// state's own range instead (the scale, at least 1: an LSTM's outputs live in (-1, 1) and its
/// cell state around it), the worst of those 289 is 0.70. So the bound is the whole of that
/// range: 1 of the scale, at least 1. On an x86-64 CPU with AVX2 and no VNNI (AMD EPYC, Zen 3)
/// ONNX Runtime's 8-bit kernel takes another path, and the fuzzer's seed-39 instances and a
/// kept case reach 1.54 and 1.56 of that range: the bound is 2 of it. Nothing closer holds.
const DQ_LSTM_BOUND: f64 = 2.0;
/// The floor under DynamicQuantizeLSTM's scale: the hidden state's range.
const DQ_LSTM_FLOOR: f64 = 1.0;
/// NCHWc Conv as a standard Conv: each convolution is within float rounding of the NCHWc
/// kernel (which sums channel blocks in its own order), but a network of them compounds the
/// differences past the rounding bound: PP-OCRv4 det optimised by ONNX Runtime (level all, 62
/// NCHWc convolutions) on a 640x640 page: 3.9e-5 of the output's scale; rec and cls at their
/// real sizes: 2.9e-6 and 9.9e-7. Approximate, with a bound 25 times what was measured: off by
/// default (the region stays on the CPU, where ONNX Runtime runs NCHWc in the original too).
const NCHWC_CONV_BOUND: f64 = 1e-3;

/// Every decomposition, by (domain, op_type), with its exactness class (see
/// [`crate::rewrite::exactness`]). `""` is the default ONNX domain.
pub const REGISTRY: &[(&str, &str, Decompose, Exactness)] = &[
    // ONNX Runtime contrib operators.
    (MS_DOMAIN, "FusedConv", fused_conv::fused_conv, ROUNDING),
    (MS_DOMAIN, "NhwcConv", fused_conv::nhwc_conv, ROUNDING),
    (MS_DOMAIN, "NhwcMaxPool", fused_conv::nhwc_max_pool, EXACT),
    (MS_DOMAIN, "FusedGemm", fused_gemm::fused_gemm, ROUNDING),
    (
        MS_DOMAIN,
        "FusedMatMul",
        fused_matmul::fused_matmul,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "TransposeMatMul",
        fused_matmul::fused_matmul,
        ROUNDING,
    ),
    (MS_DOMAIN, "Gelu", gelu::gelu_ms, ROUNDING),
    (MS_DOMAIN, "BiasGelu", gelu::bias_gelu, ROUNDING),
    (MS_DOMAIN, "FastGelu", gelu::fast_gelu, ROUNDING),
    (MS_DOMAIN, "QuickGelu", gelu::quick_gelu, ROUNDING),
    (MS_DOMAIN, "BiasAdd", function_ops::bias_add, ROUNDING),
    (
        MS_DOMAIN,
        "BiasSoftmax",
        function_ops::bias_softmax,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "SkipLayerNormalization",
        layer_norm::skip_layer_norm,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "SkipSimplifiedLayerNormalization",
        layer_norm::skip_simplified_layer_norm,
        ROUNDING,
    ),
    (MS_DOMAIN, "Attention", attention::attention, ROUNDING),
    (MS_DOMAIN, "QAttention", qattention::qattention, ROUNDING),
    (
        MS_DOMAIN,
        "MultiHeadAttention",
        attention::multi_head_attention,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "RotaryEmbedding",
        rotary::rotary_embedding,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "GroupQueryAttention",
        gqa::group_query_attention,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "EmbedLayerNormalization",
        embed_layer_norm::embed_layer_norm,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "QEmbedLayerNormalization",
        embed_layer_norm::qembed_layer_norm,
        ROUNDING,
    ),
    // Decoder steps, diffusion UNets, fused MLPs (no ONNX Runtime CPU kernel but for
    // DecoderMaskedMultiHeadAttention: see each module for what the class was checked against).
    (
        MS_DOMAIN,
        "DecoderMaskedMultiHeadAttention",
        decoder_attention::decoder_masked_mha,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "GemmFastGelu",
        gelu_fused::gemm_fast_gelu,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "BiasSplitGelu",
        gelu_fused::bias_split_gelu,
        ROUNDING,
    ),
    (MS_DOMAIN, "GroupNorm", group_norm::group_norm_ms, ROUNDING),
    (
        MS_DOMAIN,
        "SkipGroupNorm",
        group_norm::skip_group_norm,
        ROUNDING,
    ),
    (MS_DOMAIN, "RemovePadding", packed::remove_padding, EXACT),
    (MS_DOMAIN, "RestorePadding", packed::restore_padding, EXACT),
    (
        MS_DOMAIN,
        "PackedAttention",
        packed::packed_attention,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "PackedMultiHeadAttention",
        packed::packed_mha,
        ROUNDING,
    ),
    // The quantized family (ONNX Runtime's quantization tools and optimizer).
    (MS_DOMAIN, "QLinearAdd", quant::qlinear_add, EXACT),
    (MS_DOMAIN, "QLinearMul", quant::qlinear_mul, EXACT),
    (MS_DOMAIN, "QLinearSigmoid", quant::qlinear_sigmoid, EXACT),
    (
        MS_DOMAIN,
        "QLinearLeakyRelu",
        quant::qlinear_leaky_relu,
        EXACT,
    ),
    (MS_DOMAIN, "QLinearSoftmax", quant::qlinear_softmax, EXACT),
    (
        MS_DOMAIN,
        "QLinearGlobalAveragePool",
        quant::qlinear_global_average_pool,
        EXACT,
    ),
    (
        MS_DOMAIN,
        "QLinearAveragePool",
        quant::qlinear_average_pool,
        EXACT,
    ),
    (MS_DOMAIN, "QLinearConcat", quant::qlinear_concat, EXACT),
    (MS_DOMAIN, "QLinearConv", quant::qlinear_conv_ms, EXACT),
    ("", "QLinearConv", quant::qlinear_conv, EXACT),
    ("", "QLinearMatMul", quant::qlinear_matmul, EXACT),
    (MS_DOMAIN, "QGemm", quant::qgemm, EXACT),
    (
        MS_DOMAIN,
        "MatMulNBits",
        matmul_nbits::matmul_nbits,
        ROUNDING,
    ),
    (
        MS_DOMAIN,
        "DynamicQuantizeMatMul",
        quant::dynamic_quantize_matmul,
        EXACT,
    ),
    (
        MS_DOMAIN,
        "MatMulIntegerToFloat",
        quant::matmul_integer_to_float,
        EXACT,
    ),
    (
        MS_DOMAIN,
        "DynamicQuantizeLSTM",
        quant::dynamic_quantize_lstm,
        Exactness::Approximate(DQ_LSTM_BOUND, DQ_LSTM_FLOOR),
    ),
    // ONNX Runtime's CPU NCHWc layout operators.
    (
        NCHWC_DOMAIN,
        "Conv",
        nchwc::conv,
        Exactness::Approximate(NCHWC_CONV_BOUND, 0.0),
    ),
    (NCHWC_DOMAIN, "ReorderInput", nchwc::reorder_input, EXACT),
    (NCHWC_DOMAIN, "ReorderOutput", nchwc::reorder_output, EXACT),
    (NCHWC_DOMAIN, "MaxPool", nchwc::pool, EXACT),
    (NCHWC_DOMAIN, "AveragePool", nchwc::pool, ROUNDING),
    (NCHWC_DOMAIN, "GlobalMaxPool", nchwc::pool, EXACT),
    (NCHWC_DOMAIN, "GlobalAveragePool", nchwc::pool, ROUNDING),
    (NCHWC_DOMAIN, "Upsample", nchwc::upsample, ROUNDING),
    // Default domain: function ops, and ONNX Runtime's default-domain contrib ops (valid ONNX
    // only from the opset noted in `is_standard`).
    ("", "LayerNormalization", layer_norm::layer_norm, ROUNDING),
    (
        "",
        "SimplifiedLayerNormalization",
        layer_norm::simplified_layer_norm,
        ROUNDING,
    ),
    ("", "Gelu", gelu::gelu_onnx, ROUNDING),
    ("", "HardSwish", function_ops::hard_swish, ROUNDING),
    ("", "Mish", function_ops::mish, ROUNDING),
    ("", "GroupNormalization", function_ops::group_norm, ROUNDING),
    // Blocked DequantizeLinear (opset 21) without block_size, for a provider whose kernel
    // ignores it (DirectML); a non-blocked one is refused.
    (
        "",
        "DequantizeLinear",
        dequantize::blocked_dequantize_linear,
        EXACT,
    ),
];

fn lookup(domain: &str, op: &str) -> Option<(Decompose, Exactness)> {
    let domain = if domain == "ai.onnx" { "" } else { domain };
    REGISTRY
        .iter()
        .find(|(d, o, _, _)| *d == domain && *o == op)
        .map(|(_, _, f, e)| (*f, *e))
}

/// The exactness class a decomposition declares (None: no decomposition). A patch may
/// declare a looser class for a configuration of the node; never a tighter one.
pub fn exactness_of(domain: &str, op: &str) -> Option<Exactness> {
    lookup(domain, op).map(|(_, e)| e)
}

/// Is there a decomposition for this operator?
pub fn can_unfuse(domain: &str, op: &str) -> bool {
    lookup(domain, op).is_some()
}

/// Is this default-domain operator part of standard ONNX at `opset`? ONNX Runtime registers
/// some operators in the default domain before ONNX adopted them (LayerNormalization before
/// 17, SimplifiedLayerNormalization always): models using them fail `onnx.checker`.
pub fn is_standard(op: &str, opset: i64) -> bool {
    match op {
        "LayerNormalization" => opset >= 17,
        "Gelu" => opset >= 20,
        "GroupNormalization" => opset >= 18,
        "HardSwish" => opset >= 14,
        "Mish" => opset >= 18,
        "SimplifiedLayerNormalization" => false,
        _ => true,
    }
}

/// The default filter: nodes that are not standard ONNX at the model's opset (contrib and
/// layout domains, and default-domain ops ONNX does not have at that version).
pub fn is_fused(node: &Node, opset: i64) -> bool {
    match node.domain() {
        "" => !is_standard(&node.op_type, opset),
        "ai.onnx.ml" => false,
        _ => true,
    }
}

/// Build the patch that decomposes node `n`.
pub fn unfuse_node(ctx: &UnfuseCtx, g: &Graph, n: NodeId) -> Result<Patch, Unsupported> {
    if !g.nodes.contains_node(n) {
        return Err(Refusal::unsupported("no such node"));
    }
    let node = g.node(n);
    match lookup(node.domain(), &node.op_type) {
        Some((f, class)) => f(ctx, g, n).map(|mut p| {
            p.exactness = p.exactness.max(class);
            let reaches = match ctx.reaching_quantizers {
                Some(set) => set.contains(&n),
                None => reaching_quantizers(g).contains(&n),
            };
            if p.exactness == Exactness::Rounding && reaches {
                p.exactness = Exactness::Approximate(QUANTIZED_DOWNSTREAM_BOUND, 0.0);
            }
            p
        }),
        None => Err(Refusal::new(
            Cause::NoRewrite,
            format!(
                "no decomposition for {}::{}",
                if node.domain().is_empty() {
                    "ai.onnx"
                } else {
                    node.domain()
                },
                node.op_type
            ),
        )),
    }
}

/// Ops that round a float value to an integer grid: a difference of one float rounding before
/// them can move a value across a step, and the step is far more than a rounding.
const QUANTIZERS: &[&str] = &[
    "QuantizeLinear",
    "DynamicQuantizeLinear",
    "DynamicQuantizeMatMul",
    "DynamicQuantizeLSTM",
];

/// A rounding decomposition whose output reaches a quantizer ([`QUANTIZERS`]) is not within
/// rounding at the model's outputs: PP-OCRv4 rec quantized dynamically and saved by ONNX
/// Runtime, its 5 LayerNormalizations decomposed (each within rounding) ahead of
/// DynamicQuantizeMatMul, came out 4.7e-2 of its softmax output's scale off at 48x320. Such a
/// rewrite is approximate, with this bound (twice what was measured); by default the node
/// stays on the CPU.
const QUANTIZED_DOWNSTREAM_BOUND: f64 = 0.1;

/// The nodes from which a quantizer is reachable, through any chain of readers (not into
/// subgraphs): one sweep of the graph in reverse topological order.
pub fn reaching_quantizers(g: &Graph) -> HashSet<NodeId> {
    let is_quantizer = |n: NodeId| {
        let node = g.node(n);
        QUANTIZERS.contains(&node.op_type.as_str()) && matches!(node.domain(), "" | "com.microsoft")
    };
    let mut out = HashSet::new();
    if !g.order.iter().any(|&n| is_quantizer(n)) {
        return out;
    }
    let consumers = g.consumers();
    let topo = g.topo_order().unwrap_or_else(|_| g.order.clone());
    for &m in topo.iter().rev() {
        let reaches = g.node(m).outputs.iter().flatten().any(|&v| {
            consumers
                .of(v)
                .iter()
                .filter(|&&(_, slot)| slot != crate::ir::IMPLICIT_SLOT)
                .any(|&(r, _)| is_quantizer(r) || out.contains(&r))
        });
        if reaches {
            out.insert(m);
        }
    }
    out
}

/// Options of the decompositions of one batch.
#[derive(Clone, Copy, Default)]
pub struct UnfuseOptions<'a> {
    pub rule: &'a str,
    pub external: Option<&'a ExternalData>,
    pub nchwc_block_size: Option<i64>,
    /// External data for the unpacked MatMulNBits form only, and the bytes of float weights
    /// it may add per batch ([`Unpack`]).
    pub unpack: Option<(&'a ExternalData, u64)>,
    /// See [`UnfuseCtx::computed`] (the `unfuse` pass gives the model's).
    pub computed: Option<&'a crate::io::computed::Scope>,
    /// See [`UnfuseCtx::profile`] (the `unfuse` pass gives the target's).
    pub profile: Option<&'static crate::runtime::Profile>,
}

/// Plans for the `selected` nodes of graph `g`, whose facts (before any change) are `facts`;
/// `reinfer` infers `g` again under a given NCHWc block size.
///
/// Each node's patch is built on the unchanged graph and the plans are returned consumers
/// first (reverse topological order), so every patch reads values of the original graph and
/// the driver re-points the rest. The NCHWc operators share one tensor layout: they are
/// converted all together, as one all-or-nothing plan, or not at all. Plans are reported in
/// the graph's order.
pub fn plan_graph(
    g: &Graph,
    facts: &Facts,
    reinfer: &dyn Fn(Option<i64>) -> Facts,
    opset: Option<i64>,
    opts: &UnfuseOptions,
    selected: &[NodeId],
) -> (Vec<Planned>, Option<i64>) {
    let pos: HashMap<NodeId, usize> = g.order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let at = |n: NodeId| pos.get(&n).copied().unwrap_or(usize::MAX);
    let frees = |n: NodeId| {
        g.node(n)
            .inputs
            .iter()
            .flatten()
            .copied()
            .collect::<Vec<_>>()
    };
    let Some(opset) = opset else {
        let plans = selected
            .iter()
            .map(|&n| {
                let r = Refusal::new(Cause::Limit, "the model imports no default-domain opset");
                Planned::one(g, n, Err(r)).at(at(n))
            })
            .collect();
        return (plans, None);
    };
    let nchwc_all: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| g.node(n).domain() == NCHWC_DOMAIN)
        .collect();
    let want_nchwc = selected.iter().any(|&n| g.node(n).domain() == NCHWC_DOMAIN);
    let todo: HashSet<NodeId> = selected
        .iter()
        .copied()
        .filter(|&n| g.node(n).domain() != NCHWC_DOMAIN)
        .collect();

    let mut block = opts.nchwc_block_size;
    let mut nchwc_error: Option<String> = None;
    if want_nchwc {
        match nchwc::infer_block_size(g, facts, opts.nchwc_block_size) {
            Ok(b) => block = Some(b),
            Err(e) => nchwc_error = Some(e),
        }
    }
    // Infer again only when the resolved block size is not the one inference assumed.
    let refined;
    let facts = if want_nchwc && block.is_some() && block != facts.nchwc_block() {
        refined = reinfer(block);
        &refined
    } else {
        facts
    };
    let spent = std::cell::Cell::new(0u64);
    let reaching = reaching_quantizers(g);
    let ctx = UnfuseCtx {
        model_opset: opset,
        rule: opts.rule,
        facts,
        external: opts.external,
        nchwc_block_size: block,
        unpack: opts.unpack.map(|(data, limit)| Unpack {
            data,
            limit,
            spent: &spent,
        }),
        computed: opts.computed,
        reaching_quantizers: Some(&reaching),
        profile: opts.profile,
    };
    // The region: every NCHWc node must decompose (in graph order, naming the first that
    // does not).
    let mut region: HashMap<NodeId, Patch> = HashMap::new();
    if want_nchwc && nchwc_error.is_none() {
        for &n in &nchwc_all {
            match unfuse_node(&ctx, g, n) {
                Ok(p) => {
                    region.insert(n, p);
                }
                Err(e) => {
                    let node = g.node(n);
                    nchwc_error = Some(format!(
                        "NCHWc node '{}' ({}): {}",
                        node.name(),
                        node.op_type,
                        e.reason
                    ));
                    break;
                }
            }
        }
    }
    let mut plans = Vec::new();
    if let (Some(e), true) = (&nchwc_error, want_nchwc) {
        for &n in &nchwc_all {
            let reason = format!("the NCHWc layout region is converted whole; {e}");
            plans.push(Planned::one(g, n, Err(Refusal::new(Cause::Layout, reason))).at(at(n)));
        }
        region.clear();
    }

    let topo = g.topo_order().unwrap_or_else(|_| g.order.clone());
    let mut ordered: Vec<NodeId> = topo
        .iter()
        .rev()
        .copied()
        .filter(|n| todo.contains(n) || region.contains_key(n))
        .collect();
    // Nodes outside the topological order (none in a valid graph) last.
    let seen: HashSet<NodeId> = ordered.iter().copied().collect();
    ordered.extend(
        selected
            .iter()
            .copied()
            .filter(|n| todo.contains(n) && !seen.contains(n)),
    );

    let mut group: Option<Planned> = None;
    let mut group_slot: Option<usize> = None;
    for n in ordered {
        if let Some(p) = region.remove(&n) {
            let mut step = Step::new(p, op_label(g, n));
            step.report_at = at(n);
            let gp = group.get_or_insert_with(|| Planned {
                covers: nchwc_all.iter().map(|&m| covered(g, m)).collect(),
                outcome: Ok(Vec::new()),
                report_at: at(n),
                frees: Vec::new(),
            });
            gp.frees.extend(frees(n));
            if let Ok(steps) = &mut gp.outcome {
                steps.push(step);
            }
            if group_slot.is_none() {
                group_slot = Some(plans.len());
                plans.push(Planned {
                    covers: Vec::new(),
                    outcome: Ok(Vec::new()),
                    report_at: 0,
                    frees: Vec::new(),
                });
            }
            continue;
        }
        let mut plan = Planned::one(g, n, unfuse_node(&ctx, g, n)).at(at(n));
        plan.frees = frees(n);
        plans.push(plan);
    }
    if let (Some(slot), Some(gp)) = (group_slot, group) {
        plans[slot] = gp;
    }
    let resolved = if want_nchwc && nchwc_error.is_none() {
        block
    } else {
        None
    };
    (plans, resolved)
}

/// The `unfuse` pass: each rule's matches decomposed together (a layout region converts
/// whole), on the facts with the model's own declarations.
pub struct UnfusePass;

impl Pass for UnfusePass {
    fn action(&self) -> &'static str {
        "unfuse"
    }
    fn schedule(&self) -> Schedule {
        Schedule::PerRule
    }
    fn plan(&self, cx: &Cx, rule: usize, nodes: &[NodeId]) -> Vec<Planned> {
        let opts = UnfuseOptions {
            rule: &cx.target.rules[rule].id,
            external: None,
            nchwc_block_size: cx.nchwc_block,
            unpack: cx
                .external
                .filter(|_| cx.unpack_limit > 0)
                .map(|d| (d, cx.unpack_limit)),
            computed: Some(&cx.model.computed),
            profile: crate::cost::profile_of(cx.target),
        };
        let reinfer = |block: Option<i64>| {
            let io = InferOptions {
                nchwc_block: block,
                ..Default::default()
            };
            cx.infer_with(&io, true)
        };
        plan_graph(
            cx.graph(),
            cx.exact_facts(),
            &reinfer,
            cx.model.opset(""),
            &opts,
            nodes,
        )
        .0
    }
    fn finish(&self, g: &mut Graph, done: &[Planned]) {
        let freed: HashSet<ValueId> = done.iter().flat_map(|p| p.frees.iter().copied()).collect();
        drop_dead_initializers(g, &freed);
    }
}

/// One node decomposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfused {
    /// The graph it was in ("" for the main graph, else its scope path, `loop/body`).
    pub graph: String,
    pub node: String,
    pub domain: String,
    pub op_type: String,
    pub new_nodes: usize,
}

/// One node left as it was, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub graph: String,
    pub node: String,
    pub domain: String,
    pub op_type: String,
    pub reason: String,
}

/// What [`unfuse_all`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnfuseReport {
    pub unfused: Vec<Unfused>,
    pub unsupported: Vec<Skipped>,
    /// Initializers only the removed nodes used (e.g. NCHWc-reordered weights), dropped.
    pub removed_initializers: usize,
    /// The NCHWc block size used, where the model had NCHWc operators.
    pub nchwc_block_size: Option<i64>,
}

impl UnfuseReport {
    /// Nodes created in all.
    pub fn new_nodes(&self) -> usize {
        self.unfused.iter().map(|u| u.new_nodes).sum()
    }
}

/// Decompose every node the filter selects, in the main graph and every body below it (the
/// one walker over scopes, [`crate::ir::scope`]). Never panics: a selected node that cannot be
/// decomposed is left as it was and listed with the reason. The plans are the `unfuse` pass's
/// ([`plan_graph`]); the default-domain opset import is never changed. Unpacked weights are
/// left to compute when the model is written, as the `unfuse` pass leaves them.
pub fn unfuse_all(model: &mut Model, rule: &str, filter: impl Fn(&Node) -> bool) -> UnfuseReport {
    let scope = model.computed.clone();
    unfuse_all_with(
        model,
        &UnfuseOptions {
            rule,
            computed: Some(&scope),
            ..Default::default()
        },
        filter,
    )
}

/// [`unfuse_all`] with options (external data resolver, NCHWc block size, where unpacked
/// weights are registered: `computed: None` computes them into memory).
pub fn unfuse_all_with(
    model: &mut Model,
    opts: &UnfuseOptions,
    filter: impl Fn(&Node) -> bool,
) -> UnfuseReport {
    let mut report = UnfuseReport::default();
    let opset = model.opset("");
    // Inference reads the opsets and IR version only; the graphs are walked below.
    let header = Model {
        ir_version: model.ir_version,
        opset_import: model.opset_import.clone(),
        ..Default::default()
    };
    let top: HashMap<String, Seed> = HashMap::new();
    fold_graphs_mut(&mut model.graph, &top, &mut |scope, g, outer| {
        let selected: Vec<NodeId> = g
            .order
            .iter()
            .copied()
            .filter(|&n| filter(g.node(n)))
            .collect();
        let path = scope.to_string();
        let facts = infer_in(&header, g, outer, None);
        if !selected.is_empty() {
            let reinfer = |b: Option<i64>| infer_in(&header, g, outer, b);
            let (plans, block) = plan_graph(g, &facts, &reinfer, opset, opts, &selected);
            if block.is_some() {
                report.nchwc_block_size = block;
            }
            let outcomes = apply_plans(g, plans);
            let mut done: Vec<(usize, Unfused)> = Vec::new();
            let mut failed: Vec<(usize, Skipped)> = Vec::new();
            let mut freed: HashSet<ValueId> = HashSet::new();
            let split = |op: &str| match op.rsplit_once("::") {
                Some((d, o)) => (d.to_string(), o.to_string()),
                None => (String::new(), op.to_string()),
            };
            for o in outcomes {
                match o.result {
                    Ok(steps) => {
                        freed.extend(o.plan.frees.iter().copied());
                        for d in steps {
                            let (domain, op_type) = split(&d.op);
                            done.push((
                                d.report_at,
                                Unfused {
                                    graph: path.clone(),
                                    node: d.node,
                                    domain,
                                    op_type,
                                    new_nodes: d.count,
                                },
                            ));
                        }
                    }
                    Err(r) => {
                        for c in &o.plan.covers {
                            let (domain, op_type) = split(&c.op);
                            failed.push((
                                o.plan.report_at,
                                Skipped {
                                    graph: path.clone(),
                                    node: c.name.clone(),
                                    domain,
                                    op_type,
                                    reason: r.reason.clone(),
                                },
                            ));
                        }
                    }
                }
            }
            done.sort_by_key(|(p, _)| *p);
            failed.sort_by_key(|(p, _)| *p);
            report.unfused.extend(done.into_iter().map(|(_, u)| u));
            report
                .unsupported
                .extend(failed.into_iter().map(|(_, s)| s));
            report.removed_initializers += drop_dead_initializers(g, &freed);
        }
        // What the bodies of this graph may read: the enclosing scopes' facts, and this
        // graph's after the rewrite.
        if !crate::ir::scope::has_bodies(g) {
            return HashMap::new();
        }
        let mut for_bodies = outer.clone();
        if opset.is_some() {
            let f = if selected.is_empty() {
                facts
            } else {
                infer_in(&header, g, outer, opts.nchwc_block_size)
            };
            for (i, v) in g.values.iter().enumerate() {
                let s = f.seed(ValueId(i as u32));
                if s.info.dtype.is_some() || s.info.shape.is_some() {
                    for_bodies.insert(v.name.to_string(), s);
                }
            }
        }
        for_bodies
    });
    report
}

/// The facts of `g`'s values, its outer-scope reads seeded from `outer`.
fn infer_in(
    header: &Model,
    g: &Graph,
    outer: &HashMap<String, Seed>,
    nchwc_block: Option<i64>,
) -> Facts {
    let opts = InferOptions {
        nchwc_block,
        ..Default::default()
    };
    let lookup = |name: &str| outer.get(name).cloned();
    crate::infer::infer_body(header, g, &opts, &lookup)
}

/// Remove initializers that only removed nodes read (not graph inputs or outputs).
fn drop_dead_initializers(g: &mut Graph, candidates: &HashSet<ValueId>) -> usize {
    if candidates.is_empty() {
        return 0;
    }
    let mut live: HashSet<ValueId> = HashSet::new();
    for &n in &g.order {
        let nd = g.node(n);
        live.extend(nd.inputs.iter().flatten());
        live.extend(nd.implicit_inputs().iter());
    }
    live.extend(g.outputs.iter().map(|o| o.value));
    live.extend(g.inputs.iter().map(|i| i.value));
    let before = g.initializers.len();
    g.initializers
        .retain(|i| live.contains(&i.value) || !candidates.contains(&i.value));
    let removed = before - g.initializers.len();
    if removed > 0 {
        let gone: HashSet<ValueId> = candidates
            .iter()
            .copied()
            .filter(|v| !live.contains(v))
            .collect();
        g.value_info.retain(|vi| !gone.contains(&vi.value));
    }
    removed
}
