//! Raising the model's default-domain opset, where that keeps every node's meaning: the
//! MatMulNBits decomposition stays packed (blocked `DequantizeLinear`) only from opset 21, and
//! onnxruntime-genai and older exporters write opsets 14-17.
//!
//! A raise from opset `from` to `to` is safe when every default-domain node of the model (main
//! graph, every body, every model-local function) means the same at `to`. For each operator,
//! [`VERSIONS`] lists the opsets that changed its schema (ONNX's operator changelog,
//! `docs/Changelog.md`; a test checks it against the `onnx` package's schemas, so it cannot
//! drift); every version in `(from, to]` is classified by [`change`]:
//!
//! * **compatible**: types added, or attributes/inputs added whose defaults keep the old
//!   behaviour (Add-14's small integer types, Reshape-14's `allowzero` = 0, Shape-15's
//!   `start`/`end`, Pad-18's optional `axes`, Resize-18's `antialias` = 0 and
//!   `keep_aspect_ratio_policy` = stretch, Cast-19's `saturate` (float8 only), the
//!   quantizers' `block_size` = 0 at 21, GRU/LSTM/RNN-14's `layout` = 0...);
//! * **rewritten** to the new form exactly: the `Reduce*` ops' `axes` attribute becomes an
//!   int64 initializer input at 18 (same axes; no `axes` stays "all axes" with
//!   `noop_with_empty_axes` = 0); a `Split` without a `split` input gets `num_outputs` at 18
//!   (the same equal parts; ONNX Runtime rejects an uneven split without `split` before 18);
//!   a `RoiAlign` without `coordinate_transformation_mode` gets `output_half_pixel`, the
//!   behaviour before 16 (16 made `half_pixel` the default);
//! * **conditional**: BatchNormalization-14 dropped the training outputs (safe with `Y` alone);
//!   QuantizeLinear-19 ties the scale's type to the input's (safe with a float32 input);
//!   Resize keeps `tf_half_pixel_for_nn` only if ONNX Runtime still reads it (refused);
//! * **blocking**: DFT-20 (`axis` became an input), GridSample-20 (modes renamed, N-D),
//!   GroupNormalization-21 (scale and bias per channel instead of per group), and
//!   AveragePool-19, whose meaning ONNX kept (`dilations` = 1 added) but which ONNX Runtime
//!   computes with another CPU kernel that rounds differently: the raise must be bit-exact.
//!
//! Also blocking: an operator that ONNX does not define at `from` (ONNX Runtime's own
//! default-domain registrations, such as LayerNormalization before 17 or Gelu before 20,
//! resolve to another kernel once the opset defines them); the one exception is
//! SimplifiedLayerNormalization, which ONNX never defines and ONNX Runtime registers for every
//! opset from 1. Raises start at opset 13 (below it, Softmax's meaning and the axes of
//! Squeeze/Unsqueeze/Split/ReduceSum change).
//!
//! The raise is made only where a rewrite needs it (see [`crate::engine::compile`]): a model no
//! rule touches keeps its opset and its bytes.

use crate::ir::{Attribute, Graph, Initializer, Model, Node, Origin, Tensor};
use crate::proto::{FunctionProto, GraphProto, NodeProto, TensorProto};
use crate::rewrite::AttrValue;

/// The opset of blocked `DequantizeLinear` (and uint4/int4), which the packed MatMulNBits
/// decomposition needs.
pub const PACKED_OPSET: i64 = 21;

/// The lowest opset a raise starts from.
pub const MIN_FROM: i64 = 13;

/// The IR version that goes with opset 21 (ONNX 1.16: int4/uint4 types).
const IR_FOR_21: i64 = 10;

/// The default-domain operators of ONNX up to opset 21, each with the opsets in which its
/// schema changed (`since_version`s), from ONNX's operator changelog.
pub const VERSIONS: &[(&str, &[i64])] = &[
    ("Abs", &[1, 6, 13]),
    ("Acos", &[7]),
    ("Acosh", &[9]),
    ("Add", &[1, 6, 7, 13, 14]),
    ("AffineGrid", &[20]),
    ("And", &[1, 7]),
    ("ArgMax", &[1, 11, 12, 13]),
    ("ArgMin", &[1, 11, 12, 13]),
    ("Asin", &[7]),
    ("Asinh", &[9]),
    ("Atan", &[7]),
    ("Atanh", &[9]),
    ("AveragePool", &[1, 7, 10, 11, 19]),
    ("BatchNormalization", &[1, 6, 7, 9, 14, 15]),
    ("Bernoulli", &[15]),
    ("BitShift", &[11]),
    ("BitwiseAnd", &[18]),
    ("BitwiseNot", &[18]),
    ("BitwiseOr", &[18]),
    ("BitwiseXor", &[18]),
    ("BlackmanWindow", &[17]),
    ("Cast", &[1, 6, 9, 13, 19, 21]),
    ("CastLike", &[15, 19, 21]),
    ("Ceil", &[1, 6, 13]),
    ("Celu", &[12]),
    ("CenterCropPad", &[18]),
    ("Clip", &[1, 6, 11, 12, 13]),
    ("Col2Im", &[18]),
    ("Compress", &[9, 11]),
    ("Concat", &[1, 4, 11, 13]),
    ("ConcatFromSequence", &[11]),
    ("Constant", &[1, 9, 11, 12, 13, 19, 21]),
    ("ConstantOfShape", &[9, 20, 21]),
    ("Conv", &[1, 11]),
    ("ConvInteger", &[10]),
    ("ConvTranspose", &[1, 11]),
    ("Cos", &[7]),
    ("Cosh", &[9]),
    ("CumSum", &[11, 14]),
    ("DFT", &[17, 20]),
    ("DeformConv", &[19]),
    ("DepthToSpace", &[1, 11, 13]),
    ("DequantizeLinear", &[10, 13, 19, 21]),
    ("Det", &[11]),
    ("Div", &[1, 6, 7, 13, 14]),
    ("Dropout", &[1, 6, 7, 10, 12, 13]),
    ("DynamicQuantizeLinear", &[11]),
    ("Einsum", &[12]),
    ("Elu", &[1, 6]),
    ("Equal", &[1, 7, 11, 13, 19]),
    ("Erf", &[9, 13]),
    ("Exp", &[1, 6, 13]),
    ("Expand", &[8, 13]),
    ("EyeLike", &[9]),
    ("Flatten", &[1, 9, 11, 13, 21]),
    ("Floor", &[1, 6, 13]),
    ("GRU", &[1, 3, 7, 14]),
    ("Gather", &[1, 11, 13]),
    ("GatherElements", &[11, 13]),
    ("GatherND", &[11, 12, 13]),
    ("Gelu", &[20]),
    ("Gemm", &[1, 6, 7, 9, 11, 13]),
    ("GlobalAveragePool", &[1]),
    ("GlobalLpPool", &[1, 2]),
    ("GlobalMaxPool", &[1]),
    ("Greater", &[1, 7, 9, 13]),
    ("GreaterOrEqual", &[12, 16]),
    ("GridSample", &[16, 20]),
    ("GroupNormalization", &[18, 21]),
    ("HammingWindow", &[17]),
    ("HannWindow", &[17]),
    ("HardSigmoid", &[1, 6]),
    ("HardSwish", &[14]),
    ("Hardmax", &[1, 11, 13]),
    ("Identity", &[1, 13, 14, 16, 19, 21]),
    ("If", &[1, 11, 13, 16, 19, 21]),
    ("ImageDecoder", &[20]),
    ("InstanceNormalization", &[1, 6]),
    ("IsInf", &[10, 20]),
    ("IsNaN", &[9, 13, 20]),
    ("LRN", &[1, 13]),
    ("LSTM", &[1, 7, 14]),
    ("LayerNormalization", &[17]),
    ("LeakyRelu", &[1, 6, 16]),
    ("Less", &[1, 7, 9, 13]),
    ("LessOrEqual", &[12, 16]),
    ("Log", &[1, 6, 13]),
    ("LogSoftmax", &[1, 11, 13]),
    ("Loop", &[1, 11, 13, 16, 19, 21]),
    ("LpNormalization", &[1]),
    ("LpPool", &[1, 2, 11, 18]),
    ("MatMul", &[1, 9, 13]),
    ("MatMulInteger", &[10]),
    ("Max", &[1, 6, 8, 12, 13]),
    ("MaxPool", &[1, 8, 10, 11, 12]),
    ("MaxRoiPool", &[1]),
    ("MaxUnpool", &[9, 11]),
    ("Mean", &[1, 6, 8, 13]),
    ("MeanVarianceNormalization", &[9, 13]),
    ("MelWeightMatrix", &[17]),
    ("Min", &[1, 6, 8, 12, 13]),
    ("Mish", &[18]),
    ("Mod", &[10, 13]),
    ("Mul", &[1, 6, 7, 13, 14]),
    ("Multinomial", &[7]),
    ("Neg", &[1, 6, 13]),
    ("NegativeLogLikelihoodLoss", &[12, 13]),
    ("NonMaxSuppression", &[10, 11]),
    ("NonZero", &[9, 13]),
    ("Not", &[1]),
    ("OneHot", &[9, 11]),
    ("Optional", &[15]),
    ("OptionalGetElement", &[15, 18]),
    ("OptionalHasElement", &[15, 18]),
    ("Or", &[1, 7]),
    ("PRelu", &[1, 6, 7, 9, 16]),
    ("Pad", &[1, 2, 11, 13, 18, 19, 21]),
    ("Pow", &[1, 7, 12, 13, 15]),
    ("QLinearConv", &[10]),
    ("QLinearMatMul", &[10, 21]),
    ("QuantizeLinear", &[10, 13, 19, 21]),
    ("RNN", &[1, 7, 14]),
    ("RandomNormal", &[1]),
    ("RandomNormalLike", &[1]),
    ("RandomUniform", &[1]),
    ("RandomUniformLike", &[1]),
    ("Range", &[11]),
    ("Reciprocal", &[1, 6, 13]),
    ("ReduceL1", &[1, 11, 13, 18]),
    ("ReduceL2", &[1, 11, 13, 18]),
    ("ReduceLogSum", &[1, 11, 13, 18]),
    ("ReduceLogSumExp", &[1, 11, 13, 18]),
    ("ReduceMax", &[1, 11, 12, 13, 18, 20]),
    ("ReduceMean", &[1, 11, 13, 18]),
    ("ReduceMin", &[1, 11, 12, 13, 18, 20]),
    ("ReduceProd", &[1, 11, 13, 18]),
    ("ReduceSum", &[1, 11, 13]),
    ("ReduceSumSquare", &[1, 11, 13, 18]),
    ("RegexFullMatch", &[20]),
    ("Relu", &[1, 6, 13, 14]),
    ("Reshape", &[1, 5, 13, 14, 19, 21]),
    ("Resize", &[10, 11, 13, 18, 19]),
    ("ReverseSequence", &[10]),
    ("RoiAlign", &[10, 16]),
    ("Round", &[11]),
    ("STFT", &[17]),
    ("Scan", &[8, 9, 11, 16, 19, 21]),
    ("Scatter", &[9, 11]),
    ("ScatterElements", &[11, 13, 16, 18]),
    ("ScatterND", &[11, 13, 16, 18]),
    ("Selu", &[1, 6]),
    ("SequenceAt", &[11]),
    ("SequenceConstruct", &[11]),
    ("SequenceEmpty", &[11]),
    ("SequenceErase", &[11]),
    ("SequenceInsert", &[11]),
    ("SequenceLength", &[11]),
    ("SequenceMap", &[17]),
    ("Shape", &[1, 13, 15, 19, 21]),
    ("Shrink", &[9]),
    ("Sigmoid", &[1, 6, 13]),
    ("Sign", &[9, 13]),
    ("Sin", &[7]),
    ("Sinh", &[9]),
    ("Size", &[1, 13, 19, 21]),
    ("Slice", &[1, 10, 11, 13]),
    ("Softmax", &[1, 11, 13]),
    ("SoftmaxCrossEntropyLoss", &[12, 13]),
    ("Softplus", &[1]),
    ("Softsign", &[1]),
    ("SpaceToDepth", &[1, 13]),
    ("Split", &[1, 2, 11, 13, 18]),
    ("SplitToSequence", &[11]),
    ("Sqrt", &[1, 6, 13]),
    ("Squeeze", &[1, 11, 13, 21]),
    ("StringConcat", &[20]),
    ("StringNormalizer", &[10]),
    ("StringSplit", &[20]),
    ("Sub", &[1, 6, 7, 13, 14]),
    ("Sum", &[1, 6, 8, 13]),
    ("Tan", &[7]),
    ("Tanh", &[1, 6, 13]),
    ("TfIdfVectorizer", &[9]),
    ("ThresholdedRelu", &[10]),
    ("Tile", &[1, 6, 13]),
    ("TopK", &[1, 10, 11]),
    ("Transpose", &[1, 13, 21]),
    ("Trilu", &[14]),
    ("Unique", &[11]),
    ("Unsqueeze", &[1, 11, 13, 21]),
    ("Upsample", &[1, 7, 9, 10]),
    ("Where", &[9, 16]),
    ("Xor", &[1, 7]),
];

/// The versions of a default-domain operator up to opset 21 (None: ONNX has no such operator).
pub fn versions(op: &str) -> Option<&'static [i64]> {
    VERSIONS
        .binary_search_by(|(o, _)| (*o).cmp(op))
        .ok()
        .map(|i| VERSIONS[i].1)
}

/// What the version of `op` that appeared at opset `v` changed, for a node written for an
/// earlier opset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Types, attributes or inputs added whose defaults keep the old behaviour.
    Compatible,
    /// `axes` moved from an attribute to an input (the `Reduce*` ops at 18).
    AxesToInput,
    /// `num_outputs` added; a Split without a `split` input needs it (18).
    SplitNumOutputs,
    /// `coordinate_transformation_mode` added with a default that differs from the old
    /// behaviour (RoiAlign-16).
    RoiAlignMode,
    /// The training outputs were dropped (BatchNormalization-14): safe with `Y` alone.
    BatchNormOutputs,
    /// The scale's type follows the input's (QuantizeLinear-19): safe with a float32 input.
    QuantizeScaleType,
    /// The coordinate modes changed (Resize-18/19 keep every mode but `tf_half_pixel_for_nn`,
    /// which is refused).
    ResizeModes,
    /// A change of meaning the raise does not rewrite.
    Blocks(&'static str),
    /// A version this table has not classified (none, a test checks): it blocks.
    Unreviewed,
}

/// The change of `op`'s version `v` (one of [`versions`], past the first), for `v` in 14..=21:
/// each one reviewed against ONNX's changelog (a test checks that none is left out).
pub fn change(op: &str, v: i64) -> Change {
    use Change::*;
    match (op, v) {
        (
            "ReduceL1" | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceMax"
            | "ReduceMean" | "ReduceMin" | "ReduceProd" | "ReduceSumSquare",
            18,
        ) => AxesToInput,
        ("Split", 18) => SplitNumOutputs,
        ("RoiAlign", 16) => RoiAlignMode,
        ("BatchNormalization", 14) => BatchNormOutputs,
        ("QuantizeLinear", 19) => QuantizeScaleType,
        ("Resize", 18 | 19) => ResizeModes,
        ("DFT", 20) => Blocks("DFT-20 takes `axis` as an input instead of an attribute"),
        // ONNX only added `dilations` (default 1), but ONNX Runtime's CPU kernel for 19 is
        // another implementation: it rounds differently (1 ulp, measured on random inputs).
        ("AveragePool", 19) => Blocks(
            "ONNX Runtime computes AveragePool-19 with another CPU kernel than 11, which rounds \
             differently (1 ulp)",
        ),
        ("GridSample", 20) => Blocks(
            "GridSample-20 renamed its modes (bilinear -> linear, bicubic -> cubic) and extended \
             them to N-D",
        ),
        ("GroupNormalization", 21) => Blocks(
            "GroupNormalization-21 takes scale and bias per channel, where 18 took them per group",
        ),
        // Element types added.
        ("Add" | "Sub" | "Mul" | "Div" | "Relu" | "CumSum", 14)
        | ("BatchNormalization" | "Pow", 15)
        | ("GreaterOrEqual" | "LessOrEqual" | "LeakyRelu" | "PRelu" | "Where", 16)
        | ("Identity", 14 | 16 | 19 | 21)
        | ("If" | "Loop" | "Scan", 16 | 19 | 21)
        | ("OptionalGetElement" | "OptionalHasElement", 18)
        | ("ReduceMax" | "ReduceMin", 20)
        | ("Cast" | "CastLike", 21)
        | ("Constant" | "Reshape" | "Shape" | "Size", 19 | 21)
        | ("Equal", 19)
        | ("ConstantOfShape" | "IsInf" | "IsNaN", 20)
        | ("ConstantOfShape" | "Flatten" | "Pad" | "Squeeze" | "Unsqueeze" | "Transpose", 21)
        | ("QLinearMatMul" | "QuantizeLinear", 21)
        | ("DequantizeLinear", 19) => Compatible,
        // Attributes or inputs added whose defaults keep the old behaviour, or new values of
        // an attribute.
        ("GRU" | "LSTM" | "RNN", 14)          // layout = 0
        | ("Reshape", 14)                     // allowzero = 0
        | ("Shape", 15)                       // start = 0, end = rank
        | ("ScatterElements" | "ScatterND", 16 | 18) // reduction = none; max, min added
        | ("LpPool", 18)                      // ceil_mode = 0, dilations = 1
        | ("Pad", 18 | 19)                    // optional axes input; wrap mode added
        | ("Cast" | "CastLike", 19)           // saturate (float8 targets only)
        | ("DequantizeLinear", 21) => Compatible, // block_size = 0 (per tensor or axis)
        _ => Unreviewed,
    }
}

/// What a raise did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Raised {
    pub from: i64,
    pub to: i64,
    /// `Reduce*` nodes whose `axes` attribute became an input.
    pub axes_inputs: usize,
    /// `Split` nodes given `num_outputs`.
    pub split_counts: usize,
    /// `RoiAlign` nodes given their old coordinate mode.
    pub roi_modes: usize,
    /// Model-local functions whose default-domain import was raised too.
    pub functions: usize,
}

impl Raised {
    /// The rewrites the raise made, in words (empty: none).
    pub fn rewrites(&self) -> String {
        let mut parts = Vec::new();
        if self.axes_inputs > 0 {
            parts.push(format!(
                "{} Reduce* axes attribute(s) moved to inputs",
                self.axes_inputs
            ));
        }
        if self.split_counts > 0 {
            parts.push(format!("{} Split(s) given num_outputs", self.split_counts));
        }
        if self.roi_modes > 0 {
            parts.push(format!(
                "{} RoiAlign(s) given coordinate_transformation_mode output_half_pixel",
                self.roi_modes
            ));
        }
        if self.functions > 0 {
            parts.push(format!(
                "{} model-local function(s) raised too",
                self.functions
            ));
        }
        parts.join(", ")
    }
}

/// The default-domain opset a function imports (None: it imports none).
fn function_opset(f: &FunctionProto) -> Option<i64> {
    f.opset_import.iter().find_map(|o| {
        matches!(o.domain.as_deref(), None | Some("") | Some("ai.onnx"))
            .then_some(o.version.unwrap_or(0))
    })
}

fn is_default_domain(d: Option<&str>) -> bool {
    matches!(d, None | Some("") | Some("ai.onnx"))
}

/// The versions of `op` past `from` up to `to`, or why the op blocks the raise by itself
/// (not an ONNX operator at `from`).
fn crossed(op: &str, from: i64, to: i64) -> Result<Vec<i64>, String> {
    if op == "SimplifiedLayerNormalization" {
        // Not ONNX at any opset: ONNX Runtime's own kernel, registered from opset 1 on.
        return Ok(Vec::new());
    }
    let Some(vs) = versions(op) else {
        return Err(format!(
            "{op} is not an ONNX operator (nor one ONNX Runtime keeps the same at every opset)"
        ));
    };
    if vs[0] > from {
        return Err(format!(
            "{op} is not an ONNX operator at opset {from} (ONNX defines it from opset {}; ONNX \
             Runtime's own default-domain kernel would give way to ONNX's)",
            vs[0]
        ));
    }
    Ok(vs
        .iter()
        .copied()
        .filter(|&v| v > from && v <= to)
        .collect())
}

/// Where a node is, for reasons: `node 'name' (Op)` with the scope or function.
fn at(scope: &str, name: &str, op: &str) -> String {
    if scope.is_empty() {
        format!("node '{name}' ({op})")
    } else {
        format!("node '{name}' ({op}) in {scope}")
    }
}

/// Why the default-domain opset of `model` cannot be raised to `to` (None: it can, with the
/// rewrites [`raise`] makes).
pub fn blocker(model: &Model, to: i64) -> Option<String> {
    let from = model.opset("")?;
    if from >= to {
        return None;
    }
    if from < MIN_FROM {
        return Some(format!(
            "opset {from} is below {MIN_FROM}: a raise would cross opset 13's changes of meaning \
             (Softmax's axis, the axes inputs of Squeeze, Unsqueeze, Split and ReduceSum)"
        ));
    }
    let scopes = crate::ir::scope::graphs(&model.graph);
    // Element types, computed only if a node needs them.
    let mut facts: Option<Vec<crate::infer::Facts>> = None;
    for (gi, sg) in scopes.iter().enumerate() {
        let scope = sg.path.to_string();
        for &n in &sg.graph.order {
            let node = sg.graph.node(n);
            if node.domain() != "" {
                continue;
            }
            let op = node.op_type.as_str();
            let here = || at(&scope, node.name(), op);
            let vs = match crossed(op, from, to) {
                Ok(vs) => vs,
                Err(e) => return Some(format!("{}: {e}", here())),
            };
            for v in vs {
                let why = match change(op, v) {
                    Change::Compatible
                    | Change::AxesToInput
                    | Change::SplitNumOutputs
                    | Change::RoiAlignMode => continue,
                    Change::BatchNormOutputs => {
                        if node.outputs.iter().skip(1).all(Option::is_none) {
                            continue;
                        }
                        "it uses the training outputs (mean, var, saved_mean, saved_var) that \
                         BatchNormalization-14 dropped"
                            .to_string()
                    }
                    Change::QuantizeScaleType => {
                        let f = facts.get_or_insert_with(|| {
                            crate::engine::scopes_with_facts(model, &Default::default())
                                .into_iter()
                                .map(|(_, f)| f)
                                .collect()
                        });
                        let dt = node
                            .inputs
                            .first()
                            .copied()
                            .flatten()
                            .and_then(|x| f.get(gi).and_then(|f| f.dtype(x)));
                        if dt == Some(crate::tensor::dtype::FLOAT) {
                            continue;
                        }
                        "QuantizeLinear-19 wants the scale in the input's type, and the input \
                         is not known to be float32"
                            .to_string()
                    }
                    Change::ResizeModes => {
                        let mode = node
                            .attr("coordinate_transformation_mode")
                            .and_then(|a| a.s().cloned());
                        if mode.as_deref() != Some(b"tf_half_pixel_for_nn".as_slice()) {
                            continue;
                        }
                        "its coordinate mode tf_half_pixel_for_nn is not one of Resize-18's"
                            .to_string()
                    }
                    Change::Blocks(why) => why.to_string(),
                    Change::Unreviewed => {
                        format!("{op}-{v} is not in the reviewed table of changes")
                    }
                };
                return Some(format!("{}: {why}", here()));
            }
        }
    }
    for f in &model.functions {
        let fname = f.name.as_deref().unwrap_or("");
        let ffrom = function_opset(f).unwrap_or(from);
        if ffrom < MIN_FROM && function_opset(f).is_some() {
            return Some(format!(
                "model-local function '{fname}' imports opset {ffrom}, below {MIN_FROM}"
            ));
        }
        if let Some(e) = proto_nodes_blocker(&f.node, ffrom, to, &format!("function '{fname}'")) {
            return Some(e);
        }
    }
    None
}

/// [`blocker`] for the nodes of a model-local function (and their bodies): only compatible
/// changes pass there (the rewrites are made on the IR's graphs).
fn proto_nodes_blocker(nodes: &[NodeProto], from: i64, to: i64, scope: &str) -> Option<String> {
    for node in nodes {
        let name = node.name.as_deref().unwrap_or("");
        let op = node.op_type.as_deref().unwrap_or("");
        if is_default_domain(node.domain.as_deref()) {
            let here = || at(scope, name, op);
            let vs = match crossed(op, from, to) {
                Ok(vs) => vs,
                Err(e) => return Some(format!("{}: {e}", here())),
            };
            for v in vs {
                match change(op, v) {
                    Change::Compatible => {}
                    Change::Blocks(why) => return Some(format!("{}: {why}", here())),
                    c => {
                        return Some(format!(
                            "{}: {op}-{v} needs a rewrite ({c:?}), which is not made inside \
                             model-local functions",
                            here()
                        ))
                    }
                }
            }
        }
        for a in &node.attribute {
            let graphs = a.g.as_deref().into_iter().chain(a.graphs.iter());
            for g in graphs {
                if let Some(e) = proto_graph_blocker(g, from, to, scope) {
                    return Some(e);
                }
            }
        }
    }
    None
}

fn proto_graph_blocker(g: &GraphProto, from: i64, to: i64, scope: &str) -> Option<String> {
    proto_nodes_blocker(&g.node, from, to, scope)
}

/// Raise the default-domain opset of `model` to `to`, rewriting the nodes whose new version
/// takes another form ([`Change`]); the IR version becomes at least 10 for opset 21. Refused
/// (the model left as it was) with [`blocker`]'s reason.
pub fn raise(model: &mut Model, to: i64) -> Result<Raised, String> {
    let Some(from) = model.opset("") else {
        return Err("the model imports no default-domain opset".to_string());
    };
    if from >= to {
        return Ok(Raised {
            from,
            to: from,
            ..Default::default()
        });
    }
    if let Some(why) = blocker(model, to) {
        return Err(why);
    }
    let mut done = Raised {
        from,
        to,
        ..Default::default()
    };
    if crate::ir::scope::has_bodies(&model.graph) {
        crate::ir::scope::reserve_names_across_scopes(&mut model.graph);
    }
    crate::ir::scope::for_each_graph_mut(&mut model.graph, &mut |_, g| {
        rewrite_graph(g, from, to, &mut done);
    });
    for o in &mut model.opset_import {
        if is_default_domain(o.domain.as_deref()) {
            o.version = Some(to);
        }
    }
    for f in &mut model.functions {
        if function_opset(f).is_some_and(|v| v < to) {
            for o in &mut f.opset_import {
                if is_default_domain(o.domain.as_deref()) {
                    o.version = Some(to);
                }
            }
            done.functions += 1;
        }
    }
    if to >= PACKED_OPSET && model.ir_version.is_some_and(|v| v < IR_FOR_21) {
        model.ir_version = Some(IR_FOR_21);
    }
    Ok(done)
}

/// The rewrites of one graph's nodes (its bodies are visited on their own).
fn rewrite_graph(g: &mut Graph, from: i64, to: i64, done: &mut Raised) {
    for n in g.order.clone() {
        let node = g.node(n);
        if node.domain() != "" {
            continue;
        }
        let Ok(vs) = crossed(&node.op_type, from, to) else {
            continue;
        };
        for v in vs {
            match change(&g.node(n).op_type, v) {
                Change::AxesToInput => {
                    let node = g.node(n);
                    let Some(axes) = node.attr("axes").map(|a| a.ints().to_vec()) else {
                        // No axes: every axis, as noop_with_empty_axes = 0 reads it.
                        continue;
                    };
                    let base = format!("{}_axes", stem(node));
                    let name = g.fresh_name(&base);
                    let v = g.add_value(name, Origin::Initializer);
                    let bytes: Vec<u8> = axes.iter().flat_map(|a| a.to_le_bytes()).collect();
                    let t = TensorProto {
                        dims: vec![axes.len() as i64],
                        data_type: Some(crate::tensor::dtype::INT64),
                        raw_data: Some(bytes.into()),
                        ..Default::default()
                    };
                    g.initializers.push(Initializer {
                        value: v,
                        tensor: Tensor::from_proto(t),
                    });
                    let node = g.node_mut(n);
                    node.attributes = without(node, "axes");
                    g.set_input(n, 1, Some(v));
                    done.axes_inputs += 1;
                }
                Change::SplitNumOutputs => {
                    let node = g.node(n);
                    let has_split = node.inputs.get(1).copied().flatten().is_some();
                    if has_split || node.attr("num_outputs").is_some() {
                        continue;
                    }
                    let count = node.outputs.len() as i64;
                    let a = Attribute::new(AttrValue::Int(count).to_proto("num_outputs"));
                    g.node_mut(n).attributes.push(a);
                    done.split_counts += 1;
                }
                Change::RoiAlignMode => {
                    let node = g.node(n);
                    if node.attr("coordinate_transformation_mode").is_some() {
                        continue;
                    }
                    let a = Attribute::new(
                        AttrValue::String("output_half_pixel".to_string())
                            .to_proto("coordinate_transformation_mode"),
                    );
                    g.node_mut(n).attributes.push(a);
                    done.roi_modes += 1;
                }
                _ => {}
            }
        }
    }
}

/// A base for names made for `node`: its name, else its op.
fn stem(node: &Node) -> String {
    if node.name().is_empty() {
        node.op_type.clone()
    } else {
        node.name().to_string()
    }
}

/// `node`'s attributes less `name`.
fn without(node: &Node, name: &str) -> crate::ir::Attrs {
    node.attributes
        .iter()
        .filter(|a| a.name() != name)
        .cloned()
        .collect()
}
