//! The operator names a rule may mention, per domain, so that a typo in `op:` is an error
//! instead of a rule that silently never fires.
//!
//! The default domain lists every operator the ONNX standard has defined (current and
//! deprecated, opsets 1 to 24), plus the few that ONNX Runtime registers in the default domain
//! itself. The `com.microsoft` list is ONNX Runtime's contrib operators, `com.microsoft.nchwc`
//! the blocked-layout operators its level-3 optimiser writes.

/// Domains a rule may name, with the spellings accepted for the default domain.
pub const DEFAULT_DOMAIN_ALIASES: &[&str] = &["", "ai.onnx", "onnx"];

/// The ONNX default domain (`""` / `ai.onnx`).
#[rustfmt::skip]
pub const ONNX_OPS: &[&str] = &[
    // Element-wise arithmetic and math.
    "Abs", "Add", "Ceil", "Div", "Exp", "Floor", "Log", "Max", "Mean", "Min", "Mod", "Mul",
    "Neg", "Pow", "Reciprocal", "Round", "Sign", "Sqrt", "Sub", "Sum", "Erf", "IsInf", "IsNaN",
    "Clip", "CumSum", "Det", "Einsum", "Gemm", "MatMul", "MatMulInteger", "QLinearMatMul",
    // Trigonometry.
    "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cos", "Cosh", "Sin", "Sinh", "Tan",
    // Activations.
    "Celu", "Elu", "Gelu", "HardSigmoid", "HardSwish", "Hardmax", "LeakyRelu", "LogSoftmax",
    "Mish", "PRelu", "Relu", "Selu", "Shrink", "Sigmoid", "Softmax", "Softplus", "Softsign",
    "Swish", "Tanh", "ThresholdedRelu",
    // Logic and bitwise.
    "And", "Not", "Or", "Xor", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual",
    "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "Where",
    // Convolution and pooling.
    "Conv", "ConvInteger", "ConvTranspose", "DeformConv", "QLinearConv", "AveragePool",
    "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "LpPool", "MaxPool", "MaxRoiPool",
    "MaxUnpool", "RoiAlign", "Col2Im",
    // Normalisation.
    "BatchNormalization", "GroupNormalization", "InstanceNormalization", "LayerNormalization",
    "LpNormalization", "LRN", "MeanVarianceNormalization", "RMSNormalization",
    // Reductions and arg-reductions.
    "ArgMax", "ArgMin", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
    "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
    // Shape and data movement.
    "Cast", "CastLike", "CenterCropPad", "Compress", "Concat", "Constant", "ConstantOfShape",
    "DepthToSpace", "Expand", "EyeLike", "Flatten", "Gather", "GatherElements", "GatherND",
    "Identity", "NonZero", "OneHot", "Pad", "Range", "Reshape", "Resize", "ReverseSequence",
    "Scatter", "ScatterElements", "ScatterND", "Shape", "Size", "Slice", "SpaceToDepth",
    "Split", "Squeeze", "TensorScatter", "Tile", "TopK", "Transpose", "Trilu", "Unique",
    "Unsqueeze", "Upsample", "AffineGrid", "GridSample",
    // Quantisation.
    "DequantizeLinear", "DynamicQuantizeLinear", "QuantizeLinear",
    // Recurrent, attention and sequence models.
    "GRU", "LSTM", "RNN", "Attention", "RotaryEmbedding",
    // Control flow, optionals and sequences.
    "If", "Loop", "Scan", "Optional", "OptionalGetElement", "OptionalHasElement",
    "ConcatFromSequence", "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
    "SequenceInsert", "SequenceLength", "SequenceMap", "SplitToSequence",
    // Random generation and regularisation.
    "Bernoulli", "Dropout", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
    "RandomUniformLike",
    // Signal processing.
    "BlackmanWindow", "DFT", "HammingWindow", "HannWindow", "MelWeightMatrix", "STFT",
    // Detection, losses, text and images.
    "NonMaxSuppression", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss",
    "RegexFullMatch", "StringConcat", "StringNormalizer", "StringSplit", "TfIdfVectorizer",
    "ImageDecoder",
];

/// Operators ONNX Runtime registers in the default domain although ONNX does not define them
/// (its own layer norm variant and the experimental ops older exporters wrote).
#[rustfmt::skip]
pub const ORT_DEFAULT_DOMAIN_OPS: &[&str] = &[
    "SimplifiedLayerNormalization", "Affine", "ConstantFill", "Crop", "DynamicSlice",
    "GRUUnit", "GivenTensorFill", "ImageScaler", "ParametricSoftplus", "Scale", "ScaledTanh",
];

/// `ai.onnx.ml`: the classical machine-learning operators.
#[rustfmt::skip]
pub const ONNX_ML_OPS: &[&str] = &[
    "ArrayFeatureExtractor", "Binarizer", "CastMap", "CategoryMapper", "DictVectorizer",
    "FeatureVectorizer", "Imputer", "LabelEncoder", "LinearClassifier", "LinearRegressor",
    "Normalizer", "OneHotEncoder", "SVMClassifier", "SVMRegressor", "Scaler", "TreeEnsemble",
    "TreeEnsembleClassifier", "TreeEnsembleRegressor", "ZipMap",
];

/// `ai.onnx.preview.training`.
pub const ONNX_TRAINING_OPS: &[&str] = &["Adagrad", "Adam", "Gradient", "Momentum"];

/// `com.microsoft`: ONNX Runtime's contrib operators (what its optimisers and the transformer
/// tools write: fused convolutions and GEMMs, attention, layer norms, quantised kernels...).
#[rustfmt::skip]
pub const MS_OPS: &[&str] = &[
    // Fusions of standard ops.
    "FusedConv", "FusedGemm", "FusedMatMul", "FusedMatMulActivation", "TransposeMatMul",
    "NhwcConv", "NhwcFusedConv", "NhwcMaxPool", "ConvTransposeWithDynamicPads", "GemmFastGelu",
    "BiasAdd", "BiasDropout", "BiasGelu", "BiasSoftmax", "BiasSplitGelu", "BitmaskBiasDropout",
    "BitmaskDropout", "FastGelu", "Gelu", "QuickGelu", "GatedAdd",
    // Normalisation.
    "EmbedLayerNormalization", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
    "SimplifiedLayerNormalization", "GroupNorm", "SkipGroupNorm", "GatedRMSNorm",
    "QEmbedLayerNormalization",
    // Attention and generation.
    "Attention", "AttnLSTM", "DecoderAttention", "DecoderMaskedMultiHeadAttention",
    "DecoderMaskedSelfAttention", "GatedRelativePositionBias", "GroupQueryAttention",
    "LongformerAttention", "MultiHeadAttention", "PackedAttention", "PackedMultiHeadAttention",
    "PagedAttention", "RelativePositionBias", "RotaryEmbedding", "GemmaRotaryEmbedding",
    "MRotaryEmbedding", "SparseAttention", "LinearAttention", "LinearAttentionGate",
    "GatedDeltaNet", "CausalConvWithState", "VarlenCausalConvWithState", "MoE", "QMoE",
    "BeamSearch", "GreedySearch", "Sampling", "WhisperBeamSearch", "NGramRepeatBlock",
    "BifurcationDetector", "RemovePadding", "RestorePadding", "EngramGate",
    "NGramHashMapping", "VarlenNGramHashMapping",
    // Quantised and low-bit kernels.
    "DequantizeBFP", "DequantizeLinear", "DequantizeWithOrder", "DynamicQuantizeLSTM",
    "DynamicQuantizeMatMul", "GatherBlockQuantized", "GemmFloat8", "MatMulBnb4",
    "MatMulFpQ4", "MatMulInteger16", "MatMulIntegerToFloat", "MatMulNBits", "MatMulNBitsMlp",
    "MatMulNBitsQkv", "MatMulBlockQuantizedFp4Weight", "MatMulBlockQuantizedFp8Weight",
    "MulInteger", "QAttention", "QGemm", "QLinearAdd", "QLinearAveragePool", "QLinearConcat",
    "QLinearConv", "QLinearGlobalAveragePool", "QLinearLeakyRelu", "QLinearMul",
    "QLinearReduceMean", "QLinearSigmoid", "QLinearSoftmax", "QLinearWhere", "QOrderedAttention",
    "QOrderedGelu", "QOrderedLayerNormalization", "QOrderedLongformerAttention",
    "QOrderedMatMul", "QuantizeBFP", "QuantizeLinear", "QuantizeWithOrder", "ReduceSumInteger",
    // Everything else.
    "CDist", "ComplexMul", "ComplexMulConj", "CropAndResize", "DynamicTimeWarping", "EPContext",
    "ExpandDims", "GatherND", "GridSample", "Inverse", "Irfft", "IsAllFinite", "MaxpoolWithMask",
    "MurmurHash3", "Pad", "Range", "Rfft", "SampleOp", "Snpe", "SparseToDenseMatMul",
    "Tokenizer", "TorchEmbedding", "Trilu", "UnfoldTensor", "Unique", "WordConvEmbedding",
];

/// `com.microsoft.nchwc`: the blocked-channel layout ops of ONNX Runtime's CPU optimiser.
#[rustfmt::skip]
pub const NCHWC_OPS: &[&str] = &[
    "Conv", "MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool", "ReorderInput",
    "ReorderOutput", "Upsample",
];

/// The canonical spelling of a domain a rule may name (`""` for the default domain), or
/// `None` when this build knows no operators in it.
pub fn canonical_domain(d: &str) -> Option<&'static str> {
    if DEFAULT_DOMAIN_ALIASES.contains(&d) {
        return Some("");
    }
    KNOWN_DOMAINS
        .iter()
        .copied()
        .find(|&k| k == d && !k.is_empty())
}

/// Every domain with a known operator list, the default domain first.
pub const KNOWN_DOMAINS: &[&str] = &[
    "",
    "ai.onnx.ml",
    "ai.onnx.preview.training",
    "com.microsoft",
    "com.microsoft.nchwc",
];

/// The operators known in a (canonical) domain.
pub fn ops_in(domain: &str) -> Vec<&'static str> {
    match domain {
        "" => ONNX_OPS
            .iter()
            .chain(ORT_DEFAULT_DOMAIN_OPS)
            .copied()
            .collect(),
        "ai.onnx.ml" => ONNX_ML_OPS.to_vec(),
        "ai.onnx.preview.training" => ONNX_TRAINING_OPS.to_vec(),
        "com.microsoft" => MS_OPS.to_vec(),
        "com.microsoft.nchwc" => NCHWC_OPS.to_vec(),
        _ => Vec::new(),
    }
}

/// Whether `op` is known in any of `domains` (canonical spellings).
pub fn is_known(op: &str, domains: &[&str]) -> bool {
    domains.iter().any(|d| ops_in(d).contains(&op))
}

/// The domains (canonical) where `op` is known.
pub fn domains_of(op: &str) -> Vec<&'static str> {
    KNOWN_DOMAINS
        .iter()
        .copied()
        .filter(|d| ops_in(d).contains(&op))
        .collect()
}

/// A close spelling of `word` among `candidates` (same letters ignoring case, or at most two
/// edits away), for "did you mean" hints.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = word.to_ascii_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        let d = if c.to_ascii_lowercase() == lower {
            0
        } else {
            edit_distance(&lower, &c.to_ascii_lowercase())
        };
        let limit = if word.chars().count() <= 3 { 1 } else { 2 };
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Edit distance counting an adjacent transposition as one edit (optimal string alignment).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_have_no_duplicates() {
        for d in KNOWN_DOMAINS {
            let ops = ops_in(d);
            let mut sorted = ops.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), ops.len(), "duplicate op in domain {d:?}");
        }
    }

    #[test]
    fn suggestions() {
        assert_eq!(suggest("Cnv", ops_in("")), Some("Conv"));
        assert_eq!(suggest("conv", ops_in("")), Some("Conv"));
        assert_eq!(
            suggest("FusedConvv", ops_in("com.microsoft")),
            Some("FusedConv")
        );
        assert_eq!(suggest("Zzzzzz", ops_in("")), None);
        assert_eq!(suggest("Rleu", ops_in("")), Some("Relu"));
        assert_eq!(canonical_domain("ai.onnx"), Some(""));
        assert_eq!(canonical_domain("com.microsoft"), Some("com.microsoft"));
        assert_eq!(canonical_domain("com.example"), None);
    }
}
