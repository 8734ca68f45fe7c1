//! The one table of operators inference knows: `(domain, op_type) -> function`.
//! Adding an operator: write its function in its family's module, add a line here.

use super::ctx::InferFn;
use super::transformer as tf;
use super::{contrib, conv, elementwise as ew, legacy, matmul, norm, resize, rnn, tensor_ops as t};

const ONNX: &str = "";
const ML: &str = "ai.onnx.ml";
const MS: &str = "com.microsoft";
const NCHWC: &str = "com.microsoft.nchwc";

/// Unary maps whose output has the input's type and shape (no folding).
const SAME: &[&str] = &[
    "Sigmoid",
    "Tanh",
    "Exp",
    "Log",
    "Sin",
    "Cos",
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Erf",
    "Softplus",
    "Softsign",
    "Elu",
    "Selu",
    "Celu",
    "LeakyRelu",
    "ThresholdedRelu",
    "HardSigmoid",
    "HardSwish",
    "Mish",
    "Gelu",
    "Swish",
    "Shrink",
    "Softmax",
    "LogSoftmax",
    "Hardmax",
    "LpNormalization",
    "MeanVarianceNormalization",
    "LRN",
    "BitwiseNot",
    "CumSum",
    "Trilu",
    "Clip",
    "ReverseSequence",
    "Scatter",
    "ScatterElements",
    "ScatterND",
    "TensorScatter",
    "RotaryEmbedding",
];

const REDUCE: &[&str] = &[
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
];

/// The operator table, built once (it was built on every inference run). Looked up once per
/// node with a fast hash: the table is fixed, so a file's names cannot collide its entries.
pub(crate) fn table() -> &'static Table {
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    TABLE.get_or_init(build)
}

pub(crate) type Table = crate::ir::hash::FastMap<(&'static str, &'static str), InferFn>;

fn build() -> Table {
    let mut m: Table = Table::default();
    for &op in SAME {
        m.insert((ONNX, op), ew::same);
    }
    for &op in REDUCE {
        m.insert((ONNX, op), t::reduce);
    }
    let onnx: &[(&str, InferFn)] = &[
        // elementwise.rs
        ("Identity", ew::identity),
        ("Constant", ew::constant),
        ("Neg", ew::neg),
        ("Abs", ew::abs),
        ("Floor", ew::floor),
        ("Ceil", ew::ceil),
        ("Round", ew::round),
        ("Sqrt", ew::sqrt),
        ("Reciprocal", ew::reciprocal),
        ("Relu", ew::relu),
        ("Sign", ew::sign),
        ("Not", ew::not),
        ("IsNaN", ew::same_shape_bool),
        ("IsInf", ew::same_shape_bool),
        ("Add", ew::add),
        ("Sub", ew::sub),
        ("Mul", ew::mul),
        ("Div", ew::div),
        ("Mod", ew::modulo),
        ("Pow", ew::binary_same_type),
        ("BitShift", ew::binary_same_type),
        ("PRelu", ew::prelu),
        ("Equal", ew::equal),
        ("Less", ew::less),
        ("Greater", ew::greater),
        ("LessOrEqual", ew::less_or_equal),
        ("GreaterOrEqual", ew::greater_or_equal),
        ("And", ew::and),
        ("Or", ew::or),
        ("Xor", ew::xor),
        ("BitwiseAnd", ew::bitwise),
        ("BitwiseOr", ew::bitwise),
        ("BitwiseXor", ew::bitwise),
        ("Max", ew::max),
        ("Min", ew::min),
        ("Sum", ew::variadic),
        ("Mean", ew::variadic),
        ("Where", ew::where_op),
        ("Cast", ew::cast),
        ("CastLike", ew::cast_like),
        ("Dropout", ew::dropout),
        ("EyeLike", ew::like_with_dtype_attr),
        ("RandomUniformLike", ew::like_with_dtype_attr),
        ("RandomNormalLike", ew::like_with_dtype_attr),
        ("Bernoulli", ew::like_with_dtype_attr),
        ("RandomUniform", ew::random),
        ("RandomNormal", ew::random),
        ("QuantizeLinear", ew::quantize_linear),
        ("DequantizeLinear", ew::dequantize_linear),
        ("DynamicQuantizeLinear", ew::dynamic_quantize_linear),
        ("SoftmaxCrossEntropyLoss", ew::loss),
        ("NegativeLogLikelihoodLoss", ew::loss),
        // tensor_ops.rs
        ("Shape", t::shape),
        ("Size", t::size),
        ("Reshape", t::reshape),
        ("Flatten", t::flatten),
        ("Transpose", t::transpose),
        ("Concat", t::concat),
        ("Split", t::split),
        ("Slice", t::slice),
        ("Squeeze", t::squeeze),
        ("Unsqueeze", t::unsqueeze),
        ("Gather", t::gather),
        ("GatherElements", t::gather_elements),
        ("GatherND", t::gather_nd),
        ("Expand", t::expand),
        ("Tile", t::tile),
        ("Pad", t::pad),
        ("ConstantOfShape", t::constant_of_shape),
        ("Range", t::range),
        ("ArgMax", t::arg_reduce),
        ("ArgMin", t::arg_reduce),
        ("TopK", t::topk),
        ("OneHot", t::one_hot),
        ("DepthToSpace", t::depth_to_space),
        ("SpaceToDepth", t::space_to_depth),
        ("NonZero", t::non_zero),
        ("NonMaxSuppression", t::non_max_suppression),
        ("Compress", t::compress),
        ("Unique", t::unique),
        ("Det", t::det),
        ("GridSample", t::grid_sample),
        ("AffineGrid", t::affine_grid),
        ("CenterCropPad", t::center_crop_pad),
        ("RoiAlign", t::roi_align),
        ("Einsum", t::einsum),
        ("If", t::if_op),
        ("RegexFullMatch", ew::same_shape_bool),
        // conv.rs
        ("Conv", conv::conv),
        ("ConvInteger", conv::conv_integer),
        ("QLinearConv", conv::qlinear_conv),
        ("DeformConv", conv::conv),
        ("ConvTranspose", conv::conv_transpose),
        ("MaxPool", conv::pool),
        ("AveragePool", conv::pool),
        ("LpPool", conv::pool),
        ("GlobalAveragePool", conv::global_pool),
        ("GlobalMaxPool", conv::global_pool),
        ("GlobalLpPool", conv::global_pool),
        ("MaxUnpool", conv::max_unpool),
        ("MaxRoiPool", conv::max_roi_pool),
        // matmul.rs
        ("MatMul", matmul::matmul),
        ("MatMulInteger", matmul::matmul_integer),
        ("QLinearMatMul", matmul::qlinear_matmul),
        ("Gemm", matmul::gemm),
        ("Attention", matmul::attention),
        // rnn.rs
        ("RNN", rnn::recurrent),
        ("GRU", rnn::recurrent),
        ("LSTM", rnn::recurrent),
        // norm.rs
        ("BatchNormalization", norm::batch_norm),
        ("LayerNormalization", norm::layer_norm),
        ("InstanceNormalization", norm::like_x),
        ("GroupNormalization", norm::like_x),
        ("RMSNormalization", norm::like_x),
        // ONNX Runtime registers its RMS norm in the ONNX domain.
        ("SimplifiedLayerNormalization", tf::simplified_layer_norm),
        // resize.rs
        ("Resize", resize::resize),
        ("Upsample", resize::upsample),
        // legacy.rs: the experimental operators of opsets 1-8
        ("ImageScaler", legacy::elementwise),
        ("ScaledTanh", legacy::elementwise),
        ("ParametricSoftplus", legacy::elementwise),
        ("Affine", legacy::elementwise),
        ("Scale", legacy::elementwise),
        ("Crop", legacy::crop),
        ("DynamicSlice", legacy::dynamic_slice),
        ("ConstantFill", legacy::constant_fill),
        ("GivenTensorFill", legacy::given_tensor_fill),
        ("GRUUnit", legacy::gru_unit),
    ];
    for &(op, f) in onnx {
        m.insert((ONNX, op), f);
    }
    m.insert((ML, "Binarizer"), ew::same);
    let ms: &[(&str, InferFn)] = &[
        ("FusedConv", contrib::fused_conv),
        ("FusedGemm", contrib::fused_gemm),
        ("FusedMatMul", contrib::fused_matmul),
        // transformer.rs
        ("Gelu", tf::like_input0),
        ("BiasGelu", tf::like_input0),
        ("FastGelu", tf::like_input0),
        ("QuickGelu", tf::like_input0),
        ("BiasAdd", tf::like_input0),
        ("BiasSoftmax", tf::like_input0),
        ("RotaryEmbedding", tf::like_input0),
        ("GroupNorm", tf::like_input0),
        ("SkipGroupNorm", tf::skip_group_norm),
        ("BiasSplitGelu", tf::bias_split_gelu),
        ("GemmFastGelu", tf::gemm_fast_gelu),
        ("SkipLayerNormalization", tf::skip_layer_norm),
        ("SkipSimplifiedLayerNormalization", tf::skip_layer_norm),
        ("SimplifiedLayerNormalization", tf::simplified_layer_norm),
        ("LayerNormalization", norm::layer_norm),
        ("Attention", tf::attention),
        ("QAttention", tf::qattention),
        (
            "DecoderMaskedSelfAttention",
            tf::decoder_masked_self_attention,
        ),
        ("MultiHeadAttention", tf::multi_head_attention),
        ("DecoderMaskedMultiHeadAttention", tf::decoder_masked_mha),
        ("GroupQueryAttention", tf::group_query_attention),
        ("PackedAttention", tf::packed_attention),
        ("PackedMultiHeadAttention", tf::packed_mha),
        ("RemovePadding", tf::remove_padding),
        ("RestorePadding", tf::restore_padding),
        ("EmbedLayerNormalization", tf::embed_layer_norm),
        ("QEmbedLayerNormalization", tf::qembed_layer_norm),
        ("MatMulNBits", tf::matmul_nbits),
        ("MatMulBnb4", tf::matmul_nbits),
        ("GatherBlockQuantized", tf::gather_block_quantized),
        ("BeamSearch", tf::generation),
        ("WhisperBeamSearch", tf::generation),
        ("GreedySearch", tf::generation),
        ("Sampling", tf::generation),
        ("QuantizeLinear", ew::quantize_linear),
        ("DequantizeLinear", ew::dequantize_linear),
        ("DynamicQuantizeLinear", ew::dynamic_quantize_linear),
        // contrib.rs
        ("NhwcConv", contrib::nhwc_conv),
        ("NhwcMaxPool", contrib::nhwc_max_pool),
        ("QLinearAdd", contrib::qlinear_binary),
        ("QLinearMul", contrib::qlinear_binary),
        ("QLinearSigmoid", contrib::qlinear_like_x),
        ("QLinearLeakyRelu", contrib::qlinear_like_x),
        ("QLinearSoftmax", contrib::qlinear_like_x),
        ("QLinearGlobalAveragePool", contrib::qlinear_global_pool),
        ("QLinearAveragePool", contrib::qlinear_average_pool),
        ("QLinearConcat", contrib::qlinear_concat),
        ("QLinearConv", contrib::qlinear_conv_ms),
        ("QGemm", contrib::qgemm),
        ("DynamicQuantizeMatMul", contrib::dynamic_quantize_matmul),
        ("MatMulIntegerToFloat", contrib::matmul_integer_to_float),
        ("DynamicQuantizeLSTM", contrib::dynamic_quantize_lstm),
    ];
    for &(op, f) in ms {
        m.insert((MS, op), f);
    }
    let nchwc: &[(&str, InferFn)] = &[
        ("Conv", contrib::nchwc_conv),
        ("ReorderInput", contrib::reorder_input),
        ("ReorderOutput", contrib::reorder_output),
        ("MaxPool", conv::pool),
        ("AveragePool", conv::pool),
        ("GlobalAveragePool", conv::global_pool),
        ("GlobalMaxPool", conv::global_pool),
        ("Upsample", contrib::nchwc_upsample),
    ];
    for &(op, f) in nchwc {
        m.insert((NCHWC, op), f);
    }
    m
}

/// The operators inference knows, as `(domain, op_type)` pairs (sorted).
pub fn known_ops() -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<_> = table().keys().copied().collect();
    v.sort_unstable();
    v
}
