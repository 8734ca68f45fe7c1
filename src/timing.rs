//! The cost of safety in time: estimated milliseconds per node, per GPU submission and per
//! crossing, on the device a target's `device:` section describes ([`DeviceModel`]).
//!
//! **Per node: a roofline.** A node's time is the larger of its arithmetic over the device's
//! peak for its element type and its bytes over the device's memory bandwidth, each scaled by
//! the efficiency assumed for its kind of op ([`OpKind`], [`GPU_EFFICIENCY`],
//! [`CPU_EFFICIENCY`]), and never less than the device's per-node floor (a dispatch, a kernel
//! call):
//!
//! ```text
//! t(node) = max( flops / (peak[type] · eff_compute[kind]),
//!                bytes / (bandwidth · eff_memory[kind]),
//!                floor )
//! ```
//!
//! On a CPU the terms add instead (one core runs MLAS's phases in turn, and the kernel call
//! has a fixed cost of its own), and convolutions pay for what ONNX Runtime's CPU kernels do
//! around their GEMM: MLAS's im2col column buffer, QLinearConv's NCHW/NHWC transposes and
//! requantization (see [`roofline`] and the constants `CPU_*`, `IM2COL_*`, `QLINEAR_*`):
//!
//! ```text
//! t_cpu(node) = call + flops / (peak[type] · eff_compute[kind])
//!                    + bytes / (bandwidth · eff_memory[kind]) + conv_terms(node)
//! ```
//!
//! `tools/time_model_check.py` holds the CPU form against ONNX Runtime's own profile, on models
//! the terms were chosen on and on held-out ones.
//!
//! `flops` and `bytes` are the per-node work estimates of [`crate::rewrite::work`] (operations
//! of the heavy ops, multiply-add = 2; every input and output's bytes, weights included),
//! exact where inference knows the shapes at the assumed sizes, otherwise bounded from the
//! neighbours. View ops (Reshape, Squeeze, Identity, Shape...) cost nothing.
//!
//! **Per submission.** Where a node runs is a parameter (`on_gpu`), so that a prediction of
//! the runtime's predicted placement where the target names its provider, else the pin test
//! ([`on_gpu_by_pins`]). GPU nodes form
//! *pieces* (connected regions, as [`crate::cost`] counts them); each piece is one submission:
//! the sum of its nodes' times plus the device's launch overhead. The longest submission is
//! what the device's timeout (Windows' TDR, 2 s) must hold.
//!
//! **Per crossing.** A value computed on one side and read on the other costs its bytes over
//! the CPU-GPU link plus the link's latency, once per direction.
//!
//! **CPU nodes** run on the host, a stated CPU model ([`DeviceModel::host`]).
//!
//! Only the main graph is timed: bodies (If/Loop/Scan) run a number of times nobody knows
//! before the run, and their nodes are counted as nothing. The estimate of a whole model is
//! the serial sum (ONNX Runtime runs nodes one at a time by default): GPU submissions, CPU
//! nodes and crossings.

use crate::analysis::Sizes;
use crate::infer::Facts;
use crate::ir::{Graph, Model, NodeId, Origin, ValueId};
use crate::rewrite::work::{self, Estimates};
use crate::rules::schema::DeviceSpec;
use crate::tensor::dtype;

/// A device: peak rates, bandwidths, the link to the host, fixed costs and the timeout.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceModel {
    /// What the figures describe.
    pub name: String,
    /// GPU or CPU: which efficiency table applies.
    pub class: DeviceClass,
    /// Peak operations per second for float32, float16 and 8-bit integer arithmetic.
    pub peak_f32: f64,
    pub peak_f16: f64,
    pub peak_int8: f64,
    /// Memory bandwidth, bytes per second.
    pub memory_bps: f64,
    /// The CPU-GPU link, bytes per second per direction, and one copy's latency (seconds).
    pub link_bps: f64,
    pub link_latency_s: f64,
    /// Fixed cost of one submission (seconds).
    pub launch_s: f64,
    /// The least time one node takes (a dispatch or a kernel call), seconds.
    pub node_floor_s: f64,
    /// The limit one submission must stay under (seconds), where the runtime has one.
    pub timeout_s: Option<f64>,
}

/// Which efficiency table a device uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceClass {
    Gpu,
    Cpu,
}

/// The least time of one GPU dispatch (a shader launch and the barrier after it): a stated
/// assumption, of the order DirectML and WebGPU traces show for small dispatches.
pub const GPU_NODE_FLOOR_S: f64 = 5e-6;
/// The fixed cost of one CPU kernel call in ONNX Runtime, as its profile reports it: a
/// one-element Relu, MatMul or Gemm takes 4 µs on the check's machine (the fastest of 200 runs,
/// one thread, `tools/time_model_check.py --calibrate`): the kernel's shape checks, the output's
/// allocation and the profiler's own timestamps. On a CPU it adds to the node's work (one
/// thread does both, one after the other); see [`roofline`].
pub const CPU_NODE_FLOOR_S: f64 = 4e-6;
/// What a float convolution's call costs more than [`CPU_NODE_FLOOR_S`]: `MlasConvPrepare`
/// (the algorithm choice) and the working buffer's allocation. A one-element Conv: 5 µs, same
/// measurement.
pub const CPU_CONV_SETUP_S: f64 = 1e-6;
/// The same for the 8-bit convolutions: the requantization scales and the NHWC reorders are
/// set up per call. A one-element QLinearConv: 7 µs; ConvInteger is assumed to cost the same
/// (not measured on its own).
pub const CPU_QCONV_SETUP_S: f64 = 3e-6;
/// Clocks per element of the column buffer that MLAS's `MlasConvIm2Col` builds before its
/// SGEMM (onnxruntime/core/mlas/lib/convolve.cpp at 00b8ce2): along a row with stride 1 it
/// copies four floats per load/store pair; the buffer of a large map leaves the L2 cache (512
/// KB per Zen 3 core), so its writes and the GEMM's reads of it go to L3: about half a clock
/// per element.
pub const IM2COL_CLOCKS_UNIT_STRIDE: f64 = 0.5;
/// With a stride above one along the row the same routine copies one element per iteration
/// (a scalar load, a store, the index update): about two clocks per element.
pub const IM2COL_CLOCKS_STRIDED: f64 = 2.0;
/// Clocks per element that ONNX Runtime's QLinearConv spends around its GEMM on
/// channels-first tensors (qlinearconv.cc: `MlasTranspose` of the input from NCHW to NHWC;
/// the int32 accumulators written, requantized to 8 bits, and the output transposed back to
/// NCHW). The input's transpose is a vectorised byte shuffle, about half a clock per element;
/// the output's side touches 4 bytes of accumulator per element before the requantization
/// and the transpose, about two clocks. These are what make PP-OCRv4 det's QOperator 1x1
/// convolutions slower than the float ones on its large maps (2.37 ms against 1.01 for 12 to
/// 96 channels at 160x160).
pub const QLINEAR_INPUT_CLOCKS: f64 = 0.5;
/// See [`QLINEAR_INPUT_CLOCKS`].
pub const QLINEAR_OUTPUT_CLOCKS: f64 = 2.0;
/// Clocks per group of a grouped float convolution (and ConvInteger) on a CPU: ONNX Runtime
/// runs one im2col and one GEMM call per group (`MlasConv`'s loop over `GroupCount`,
/// convolve.cpp at 00b8ce2), each with its own setup (the GEMM's parameters and thread
/// count, B's packing for a one-row product). On a depthwise convolution over a small map that
/// is most of the time: the synthetic MobileNet's 320-channel 3x3 depthwise convolutions at
/// 7x7 take 136 µs, about 1,000 clocks per channel (`tools/time_model_check.py --table`;
/// that model was held out until this term was added, and is a tuning model since).
pub const CPU_GROUP_CLOCKS: f64 = 1000.0;
/// The share of the float32 peak MLAS's 8-bit depthwise kernel reaches on AVX2
/// (`MlasConvDepthwiseKernelAvx2`, qdwconv_avx2.cpp: per 16 channels and tap, two widening
/// loads, two subtractions, `vpmullw` + `vpmulhw`, two unpacks and two adds: about 10 vector
/// µops for 16 multiply-adds, on Zen 3's 4 vector pipes about 6.4 multiply-adds per clock,
/// 12.8 of the 32 float32 operations per clock: 0.4). ORT runs it channels-last on an
/// indirection buffer, not through an im2col copy and a one-row GEMM as the float kernel.
pub const CPU_DEPTHWISE_INT8_EFFICIENCY: f64 = 0.4;

impl DeviceModel {
    /// The model of a target's `device:` section; `Err` names the figures it lacks.
    pub fn from_spec(spec: &DeviceSpec) -> Result<DeviceModel, String> {
        let mut missing = Vec::new();
        let mut need = |v: Option<f64>, key: &'static str| {
            if v.is_none() {
                missing.push(key);
            }
            v.unwrap_or(0.0)
        };
        let f32_ = need(spec.tflops_f32, "tflops_f32");
        let mem = need(spec.memory_gbs, "memory_gbs");
        let link = need(spec.link_gbs, "link_gbs");
        let latency = need(spec.link_latency_us, "link_latency_us");
        let launch = need(spec.launch_us, "launch_us");
        if !missing.is_empty() {
            return Err(format!(
                "the device model lacks {}",
                missing
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(DeviceModel {
            name: spec.name.clone().unwrap_or_else(|| "unnamed device".into()),
            class: DeviceClass::Gpu,
            peak_f32: f32_ * 1e12,
            peak_f16: spec.tflops_f16.unwrap_or(f32_) * 1e12,
            peak_int8: spec.tops_int8.unwrap_or(f32_) * 1e12,
            memory_bps: mem * 1e9,
            link_bps: link * 1e9,
            link_latency_s: latency * 1e-6,
            launch_s: launch * 1e-6,
            node_floor_s: GPU_NODE_FLOOR_S,
            timeout_s: spec.timeout_ms.map(|t| t / 1e3),
        })
    }

    /// The host the CPU-pinned nodes of a compile's output run on: a stated mainstream desktop
    /// CPU, AMD Ryzen 5 3600 (6 Zen 2 cores at 3.6 GHz base, two 256-bit FMA pipes per core:
    /// 6 x 32 x 3.6 = 691 GFLOPS float32; dual-channel DDR4-3200, 51.2 GB/s; AMD's
    /// specifications). ONNX Runtime's CPU provider uses every core by default.
    pub fn host() -> DeviceModel {
        Self::cpu(
            "AMD Ryzen 5 3600 (6 cores, 3.6 GHz, AVX2 FMA)",
            6.0,
            3.6,
            51.2e9,
        )
    }

    /// The CPU of the machine the time model was checked on (`tools/time_model_check.py`):
    /// an AMD EPYC of family 25 model 1 (Zen 3, "Milan"), 2 vCPUs, AVX2 with two 256-bit FMA
    /// pipes per core (32 float32 operations per clock; no AVX-512). Its TSC runs at 2.445
    /// GHz, the base clock of the Milan parts with a 2.45 GHz base (EPYC 7763, 7B13), whose
    /// published maximum boost is 3.5 GHz: one thread, 112 GFLOPS. Memory: a single Zen 3
    /// core reaches about 25 GB/s of the socket's 204.8 (8 channels of DDR4-3200).
    pub fn this_cpu_one_thread() -> DeviceModel {
        Self::cpu(
            "AMD EPYC Zen 3 (family 25 model 1), one thread, 3.5 GHz boost, AVX2 FMA",
            1.0,
            3.5,
            25e9,
        )
    }

    /// A CPU: `cores` x 32 float32 operations per clock (two 256-bit FMA pipes) at `ghz`.
    /// float16 runs as float32 in ONNX Runtime's CPU kernels. 8-bit products at twice the
    /// float32 rate: MLAS's AVX2 U8S8 GEMM kernel (no VNNI) takes 32 multiply-adds with one
    /// `vpmaddubsw` and one `vpmaddwd` on the two multiply pipes (plus a `vpaddd` on any
    /// pipe), where float32 needs four FMAs on the same two pipes. (Measured: PP-OCRv4 det's
    /// QOperator 1x1 convolutions on its 20x20 maps run in about two thirds of the float
    /// ones' time, requantization and transposes included, `tools/time_model_check.py
    /// --table`.)
    pub fn cpu(name: &str, cores: f64, ghz: f64, memory_bps: f64) -> DeviceModel {
        let peak = cores * 32.0 * ghz * 1e9;
        DeviceModel {
            name: name.into(),
            class: DeviceClass::Cpu,
            peak_f32: peak,
            peak_f16: peak,
            peak_int8: 2.0 * peak,
            memory_bps,
            link_bps: f64::INFINITY,
            link_latency_s: 0.0,
            launch_s: 0.0,
            node_floor_s: CPU_NODE_FLOOR_S,
            timeout_s: None,
        }
    }

    fn peak(&self, elem: Option<i32>) -> f64 {
        match elem {
            Some(dtype::FLOAT16) | Some(dtype::BFLOAT16) => self.peak_f16,
            Some(dtype::INT8) | Some(dtype::UINT8) => self.peak_int8,
            _ => self.peak_f32,
        }
    }

    /// The seconds a crossing of `bytes` takes.
    pub fn crossing_s(&self, bytes: u64) -> f64 {
        self.link_latency_s + bytes as f64 / self.link_bps
    }
}

/// What kind of kernel a node runs: the efficiencies assumed depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    /// Matrix products (MatMul, Gemm, attention, recurrent ops) and 1x1 convolutions.
    Gemm,
    /// Convolutions with a kernel larger than 1x1 and channels that mix.
    Conv,
    /// Depthwise convolutions (one input channel per group).
    Depthwise,
    /// Transposed convolutions.
    ConvTranspose,
    /// One output element per input element (activations, arithmetic, casts, quantization,
    /// inference-mode normalisation with fixed statistics).
    Elementwise,
    /// Reductions and normalisations that compute statistics, softmax, pooling.
    Reduction,
    /// Copies that move elements (Transpose, Concat, Slice, Gather, Resize, Pad...).
    Movement,
    /// No kernel: views and shape ops (Reshape, Squeeze, Identity, Shape, Constant...).
    Free,
    /// Anything else.
    Other,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Gemm => "gemm",
            OpKind::Conv => "conv",
            OpKind::Depthwise => "depthwise",
            OpKind::ConvTranspose => "conv-transpose",
            OpKind::Elementwise => "elementwise",
            OpKind::Reduction => "reduction",
            OpKind::Movement => "movement",
            OpKind::Free => "free",
            OpKind::Other => "other",
        }
    }
}

/// The share of a device's peak a kind of kernel is assumed to reach: (kind, arithmetic,
/// memory bandwidth, why). Stated assumptions, written where users read them (docs/targets.md
/// prints this table).
pub type Efficiency = (OpKind, f64, f64, &'static str);

/// GPUs under DirectML-class runtimes.
pub const GPU_EFFICIENCY: &[Efficiency] = &[
    (
        OpKind::Gemm,
        0.50,
        0.70,
        "vendor GEMM metacommands; half of peak on mid-size matrices",
    ),
    (
        OpKind::Conv,
        0.35,
        0.60,
        "convolution metacommands or implicit GEMM, lower on small channel counts",
    ),
    (
        OpKind::Depthwise,
        0.05,
        0.30,
        "no metacommand: one generic shader (microsoft/DirectML#243), little data reuse",
    ),
    (
        OpKind::ConvTranspose,
        0.20,
        0.50,
        "generic shaders on most drivers",
    ),
    (
        OpKind::Elementwise,
        1.00,
        0.70,
        "bandwidth-bound: streaming reads and writes",
    ),
    (
        OpKind::Reduction,
        1.00,
        0.40,
        "bandwidth-bound, with passes over the data and partial parallelism",
    ),
    (
        OpKind::Movement,
        1.00,
        0.50,
        "bandwidth-bound, strided access",
    ),
    (OpKind::Free, 1.00, 1.00, "no kernel"),
    (OpKind::Other, 1.00, 0.30, "generic shaders"),
];

/// ONNX Runtime's CPU provider (MLAS kernels).
pub const CPU_EFFICIENCY: &[Efficiency] = &[
    (
        OpKind::Gemm,
        0.75,
        0.80,
        "MLAS SGEMM kernels run near the FMA peak on large products",
    ),
    (
        OpKind::Conv,
        0.75,
        0.80,
        "the SGEMM after MLAS's im2col, whose copy is counted apart (cpu_conv_extra)",
    ),
    (
        OpKind::Depthwise,
        0.50,
        0.80,
        "float: im2col (counted apart) and a one-row GEMM per channel, one 256-bit store of the output row per 8 multiply-adds; 8-bit: MLAS's own kernel (CPU_DEPTHWISE_INT8_EFFICIENCY)",
    ),
    (OpKind::ConvTranspose, 0.40, 0.50, "SGEMM + col2im"),
    (
        OpKind::Elementwise,
        1.00,
        0.60,
        "bandwidth-bound, vectorised",
    ),
    (
        OpKind::Reduction,
        1.00,
        0.40,
        "bandwidth-bound, several passes",
    ),
    (
        OpKind::Movement,
        1.00,
        0.40,
        "bandwidth-bound, strided access",
    ),
    (OpKind::Free, 1.00, 1.00, "no kernel"),
    (OpKind::Other, 1.00, 0.30, "generic kernels"),
];

fn efficiency(class: DeviceClass, kind: OpKind) -> (f64, f64) {
    let table = match class {
        DeviceClass::Gpu => GPU_EFFICIENCY,
        DeviceClass::Cpu => CPU_EFFICIENCY,
    };
    table
        .iter()
        .find(|e| e.0 == kind)
        .map_or((1.0, 0.3), |e| (e.1, e.2))
}

const ELEMENTWISE: &[&str] = &[
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "BatchNormalization",
    "BitShift",
    "Cast",
    "CastLike",
    "Ceil",
    "Celu",
    "Clip",
    "Cos",
    "Cosh",
    "DequantizeLinear",
    "Div",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "FastGelu",
    "Floor",
    "Gelu",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "IsInf",
    "IsNaN",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "Max",
    "Mean",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "PRelu",
    "Pow",
    "QuantizeLinear",
    "QLinearAdd",
    "QLinearMul",
    "QLinearSigmoid",
    "QLinearLeakyRelu",
    "Reciprocal",
    "Relu",
    "Round",
    "Selu",
    "Shrink",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Sum",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Where",
    "Xor",
    "BiasGelu",
    "QuickGelu",
    "Affine",
    "ScaledTanh",
    "BiasAdd",
];
const REDUCTION: &[&str] = &[
    "ArgMax",
    "ArgMin",
    "AveragePool",
    "CumSum",
    "GlobalAveragePool",
    "GlobalLpPool",
    "GlobalMaxPool",
    "GroupNormalization",
    "InstanceNormalization",
    "LayerNormalization",
    "LogSoftmax",
    "LpNormalization",
    "LpPool",
    "LRN",
    "MaxPool",
    "MaxRoiPool",
    "MeanVarianceNormalization",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSum",
    "ReduceSumSquare",
    "RMSNormalization",
    "SimplifiedLayerNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "Softmax",
    "TopK",
    "QLinearAveragePool",
    "QLinearGlobalAveragePool",
    "QLinearSoftmax",
    "EmbedLayerNormalization",
];
const MOVEMENT: &[&str] = &[
    "Compress",
    "Concat",
    "DepthToSpace",
    "Expand",
    "Gather",
    "GatherElements",
    "GatherND",
    "OneHot",
    "Pad",
    "Resize",
    "ReverseSequence",
    "ScatterElements",
    "ScatterND",
    "Slice",
    "SpaceToDepth",
    "Split",
    "Tile",
    "Transpose",
    "Trilu",
    "Upsample",
    "QLinearConcat",
    "ReorderInput",
    "ReorderOutput",
    "GridSample",
    "RoiAlign",
];
const FREE: &[&str] = &[
    "Constant",
    "Flatten",
    "Identity",
    "Reshape",
    "Shape",
    "Size",
    "Squeeze",
    "Unsqueeze",
    "Dropout",
];

/// The kind of kernel node `n` runs (Conv's kind from its weights' shape and `group`).
pub fn op_kind(g: &Graph, n: NodeId, facts: &Facts) -> OpKind {
    let node = g.node(n);
    let op = node.op_type.as_str();
    match op {
        "Conv" | "FusedConv" | "ConvInteger" | "QLinearConv" | "NhwcConv" => {
            let w_slot = if op == "QLinearConv" { 3 } else { 1 };
            let group = node.attr("group").and_then(|a| a.i()).unwrap_or(1);
            let w = node
                .inputs
                .get(w_slot)
                .copied()
                .flatten()
                .and_then(|w| facts.dims(w));
            match w {
                Some(w) if w.len() >= 3 => {
                    if group > 1 && w[1] == 1 {
                        OpKind::Depthwise
                    } else if w[2..].iter().all(|&k| k == 1) {
                        OpKind::Gemm
                    } else {
                        OpKind::Conv
                    }
                }
                _ if group > 1 => OpKind::Depthwise,
                _ => OpKind::Conv,
            }
        }
        "ConvTranspose" => OpKind::ConvTranspose,
        _ if crate::cost::is_heavy(op) => OpKind::Gemm,
        _ if ELEMENTWISE.contains(&op) => OpKind::Elementwise,
        _ if REDUCTION.contains(&op) => OpKind::Reduction,
        _ if MOVEMENT.contains(&op) => OpKind::Movement,
        _ if FREE.contains(&op) => OpKind::Free,
        _ => OpKind::Other,
    }
}

/// One node's estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeTime {
    pub kind: OpKind,
    /// Operations (multiply-add = 2), 0 for ops that are not heavy.
    pub flops: u64,
    /// Bytes read and written.
    pub bytes: u64,
    /// Estimated seconds.
    pub seconds: f64,
    /// Some size it rests on was bounded from the neighbours, not inferred.
    pub bounded: bool,
}

/// The roofline of `flops` and `bytes` on `dev` for a kernel of `kind` on element type `elem`.
///
/// On a GPU the larger of the two terms, never under the device's floor: thousands of threads
/// in flight hide memory behind arithmetic, and a dispatch's fixed cost overlaps the previous
/// one's work in the queue. On a CPU their **sum**, plus the kernel call's fixed cost
/// ([`CPU_NODE_FLOOR_S`]): one core runs MLAS's phases one after the other (B packed, then
/// the FMA loops over the panel; the output's activation pass), with little memory-level
/// parallelism to hide DRAM behind the FMAs, and the call's own work (shape checks, the
/// output's allocation) comes before them. (PP-OCRv4 det's 1x1 convolution of 16 to 32
/// channels at 320x320: 1.25 ms of arithmetic, 0.98 ms of bytes, 2.24 ms measured.)
pub fn roofline(dev: &DeviceModel, kind: OpKind, elem: Option<i32>, flops: u64, bytes: u64) -> f64 {
    if kind == OpKind::Free {
        return 0.0;
    }
    let (ec, em) = efficiency(dev.class, kind);
    let int8 = matches!(elem, Some(dtype::INT8) | Some(dtype::UINT8));
    if dev.class == DeviceClass::Cpu && kind == OpKind::Depthwise && int8 {
        // 8-bit depthwise runs its own kernel, against the float32 peak (see the constant).
        return dev.node_floor_s
            + flops as f64 / (dev.peak_f32 * CPU_DEPTHWISE_INT8_EFFICIENCY)
            + bytes as f64 / (dev.memory_bps * em);
    }
    let compute = flops as f64 / (dev.peak(elem) * ec);
    let memory = bytes as f64 / (dev.memory_bps * em);
    match dev.class {
        DeviceClass::Gpu => compute.max(memory).max(dev.node_floor_s),
        DeviceClass::Cpu => dev.node_floor_s + compute + memory,
    }
}

/// On a CPU, what a convolution costs beyond [`roofline`]: the call's setup
/// ([`CPU_CONV_SETUP_S`], [`CPU_QCONV_SETUP_S`]), a grouped convolution's calls per group
/// ([`CPU_GROUP_CLOCKS`]), QLinearConv's transposes, requantization and indirection buffer
/// ([`QLINEAR_INPUT_CLOCKS`], [`QLINEAR_OUTPUT_CLOCKS`]) and, for a float convolution (or
/// ConvInteger) that is not a pointwise one (kernel 1, stride 1, no padding: MLAS's
/// `GemmDirect`), the column buffer
/// `MlasConvIm2Col` writes before the SGEMM reads it: batch x input channels x kernel size x
/// output size elements ([`IM2COL_CLOCKS_UNIT_STRIDE`], [`IM2COL_CLOCKS_STRIDED`]). A
/// clock of one core is 32 float32 operations at the peak, so the seconds are
/// `elements x clocks x 32 / peak_f32` (MLAS slices the buffer over the threads as it does
/// the GEMM). The first convolution of an image model (3 input channels) is where this
/// dominates: its GEMM has K = 27 and few rows, while its buffer is as large as K x the map.
fn cpu_conv_extra(g: &Graph, n: NodeId, facts: &Facts, dev: &DeviceModel) -> f64 {
    if dev.class != DeviceClass::Cpu {
        return 0.0;
    }
    let node = g.node(n);
    let op = node.op_type.as_str();
    let float = match op {
        "Conv" | "FusedConv" => true,
        "QLinearConv" | "ConvInteger" => false,
        _ => return 0.0,
    };
    let setup = if float {
        CPU_CONV_SETUP_S
    } else {
        CPU_QCONV_SETUP_S
    };
    let dims = |v: Option<Option<ValueId>>| v.flatten().and_then(|v| facts.dims(v));
    let (Some(x), Some(w), Some(y)) = (
        dims(node.inputs.first().copied()),
        dims(
            node.inputs
                .get(if op == "QLinearConv" { 3 } else { 1 })
                .copied(),
        ),
        dims(node.outputs.first().copied()),
    ) else {
        return setup;
    };
    if x.len() < 3 || w.len() != x.len() || y.len() != x.len() {
        return setup;
    }
    let count = |d: &[i64]| d.iter().map(|&v| v.max(0) as f64).product::<f64>();
    let clock_s = 32.0 / dev.peak_f32;
    let ints = |name: &str| {
        node.attr(name)
            .map(|a| a.ints().to_vec())
            .unwrap_or_default()
    };
    let strides = ints("strides");
    let pads = ints("pads");
    let auto_pad = node
        .attr("auto_pad")
        .and_then(|a| a.s())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .unwrap_or_default();
    let kernel = &w[2..];
    let unit_stride = strides.iter().all(|&s| s == 1);
    let padded = pads.iter().any(|&p| p != 0)
        || (auto_pad.starts_with("SAME") && kernel.iter().any(|&k| k != 1));
    let pointwise = kernel.iter().all(|&k| k == 1) && unit_stride && !padded;
    let depthwise = op_kind(g, n, facts) == OpKind::Depthwise;
    // Column-buffer elements: batch x input channels x kernel size x output size.
    let elements = count(&x[..2]) * count(kernel) * count(&y[2..]);
    let mut extra = setup;
    if op == "QLinearConv" {
        // Channels-first: the input transposed to NHWC, the output requantized and back.
        extra += (count(&x) * QLINEAR_INPUT_CLOCKS + count(&y) * QLINEAR_OUTPUT_CLOCKS) * clock_s;
        if depthwise {
            // The indirection buffer: one pointer stored per tap and output pixel.
            return extra + count(&y[..1]) * count(kernel) * count(&y[2..]) * clock_s;
        }
        if !pointwise {
            // math::Im2col over NHWC copies each tap's channels as one run.
            extra += elements * IM2COL_CLOCKS_UNIT_STRIDE * clock_s;
        }
        return extra;
    }
    let group = node.attr("group").and_then(|a| a.i()).unwrap_or(1);
    if group > 1 {
        extra += (x[0].max(0) * group) as f64 * CPU_GROUP_CLOCKS * clock_s;
    }
    if pointwise {
        return extra;
    }
    let row_stride = strides.last().copied().unwrap_or(1);
    let clocks = if row_stride == 1 {
        IM2COL_CLOCKS_UNIT_STRIDE
    } else {
        IM2COL_CLOCKS_STRIDED
    };
    extra + elements * clocks * clock_s
}

/// The estimate of node `n` on `dev`.
pub fn node_time(
    g: &Graph,
    n: NodeId,
    facts: &Facts,
    est: &Estimates,
    dev: &DeviceModel,
) -> NodeTime {
    let node = g.node(n);
    let kind = op_kind(g, n, facts);
    let mut bytes = 0u64;
    let mut bounded = false;
    for v in node.inputs.iter().chain(node.outputs.iter()).flatten() {
        let (b, exact) = est.bytes(facts, *v);
        bounded |= !exact;
        bytes = bytes.saturating_add(b);
    }
    let flops = match work::flops(g, n, facts) {
        Some(f) => f,
        None => {
            bounded = true;
            est.work(g, n, facts).work.saturating_sub(bytes)
        }
    };
    // The element type of the arithmetic: the first input's (8-bit for the quantized ops).
    let elem = node
        .inputs
        .first()
        .copied()
        .flatten()
        .and_then(|v| facts.dtype(v));
    NodeTime {
        kind,
        flops,
        bytes,
        seconds: roofline(dev, kind, elem, flops, bytes) + cpu_conv_extra(g, n, facts, dev),
        bounded,
    }
}

/// One GPU submission (a piece).
#[derive(Debug, Clone, PartialEq)]
pub struct Submission {
    /// Its first node (in the graph's order).
    pub first: String,
    pub nodes: usize,
    /// Estimated seconds, launch overhead included.
    pub seconds: f64,
}

/// A model's estimated time on a target's device.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// The device the GPU figures assume.
    pub device: String,
    /// GPU time: every submission, launch overheads included.
    pub gpu_s: f64,
    /// CPU time of the nodes that run on the host.
    pub cpu_s: f64,
    /// Time of the crossings (bytes over the link plus its latency, per value and direction).
    pub crossing_s: f64,
    pub submissions: usize,
    /// The longest submission.
    pub longest: Option<Submission>,
    /// The limit a submission must stay under, where the runtime has one.
    pub limit_s: Option<f64>,
    /// Nodes whose estimate rests on a size bounded from the neighbours.
    pub bounded_nodes: usize,
    /// The share of the limit a submission may take "with margin": [`MARGIN`], or one over the
    /// margin of the target's barrier by time ([`share_of`]).
    pub share: f64,
}

/// The share of the limit a submission may take and still be said to hold it "with margin":
/// a quarter. The time model is checked to within 2x on ONNX Runtime CPU
/// (`tools/time_model_check.py`); on GPUs its efficiencies are stated assumptions, and a
/// driver under load, a slower clock or a weaker device than the one assumed takes its share.
pub const MARGIN: f64 = 0.25;

impl Timing {
    /// The whole inference, serially: GPU + CPU + crossings.
    pub fn total_s(&self) -> f64 {
        self.gpu_s + self.cpu_s + self.crossing_s
    }
    pub fn longest_s(&self) -> f64 {
        self.longest.as_ref().map_or(0.0, |s| s.seconds)
    }
    /// The longest submission as a share of the limit.
    pub fn longest_share(&self) -> Option<f64> {
        self.limit_s.map(|l| self.longest_s() / l)
    }
    /// Every submission within [`MARGIN`] of the limit (`None` without a limit, or when some
    /// node's sizes are not known: bounded from the neighbours, which is no upper bound).
    pub fn meets_limit_with_margin(&self) -> Option<bool> {
        if self.bounded_nodes > 0 {
            return None;
        }
        self.longest_share().map(|s| s <= self.share)
    }
    /// The figures as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "device": self.device,
            "total_ms": ms(self.total_s()),
            "gpu_ms": ms(self.gpu_s),
            "cpu_ms": ms(self.cpu_s),
            "crossing_ms": ms(self.crossing_s),
            "submissions": self.submissions,
            "longest_submission_ms": ms(self.longest_s()),
            "longest_submission_first": self.longest.as_ref().map(|s| s.first.clone()),
            "limit_ms": self.limit_s.map(ms),
            "longest_share_of_limit": self.longest_share().map(round4),
            "meets_limit_with_margin": self.meets_limit_with_margin(),
            "margin": round4(self.share),
            "bounded_nodes": self.bounded_nodes,
        })
    }
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}
fn ms(s: f64) -> f64 {
    // Three significant decimals of a millisecond: stable text in reports and snapshots.
    (s * 1e6).round() / 1e3
}

/// A compile's times: the input's and the output's.
#[derive(Debug, Clone, PartialEq)]
pub struct TimingOfSafety {
    pub before: Timing,
    pub after: Timing,
}

impl TimingOfSafety {
    /// How many times slower the output is estimated to run than the input (1.0: as fast).
    pub fn slowdown(&self) -> Option<f64> {
        let b = self.before.total_s();
        (b > 0.0).then(|| self.after.total_s() / b)
    }
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "input": self.before.to_json(),
            "output": self.after.to_json(),
            "slowdown": self.slowdown().map(round4),
        })
    }
}

/// Today's placement: a node runs on the CPU when it carries `layer_ann` equal to
/// `annotation` (as [`crate::cost`] counts); every other node on the GPU.
pub fn on_gpu_by_pins<'g>(g: &'g Graph, annotation: &'g str) -> impl Fn(NodeId) -> bool + 'g {
    move |n| g.node(n).metadata(crate::rewrite::cpu::LAYER_ANN_KEY) != Some(annotation)
}

fn is_constant_node(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    node.op_type == "Constant" && node.domain().is_empty()
}

/// Per node of `g`'s order: its estimate on the device it runs on (`on_gpu`: `gpu`, else
/// `host`), `None` for `Constant` nodes (initializers to the runtime).
pub fn node_times(
    g: &Graph,
    facts: &Facts,
    gpu: &DeviceModel,
    host: &DeviceModel,
    on_gpu: &dyn Fn(NodeId) -> bool,
) -> Vec<(NodeId, bool, NodeTime)> {
    let est = Estimates::new(g, facts, &g.order);
    times_with(g, facts, &est, gpu, host, on_gpu)
}

fn times_with(
    g: &Graph,
    facts: &Facts,
    est: &Estimates,
    gpu: &DeviceModel,
    host: &DeviceModel,
    on_gpu: &dyn Fn(NodeId) -> bool,
) -> Vec<(NodeId, bool, NodeTime)> {
    g.order
        .iter()
        .filter(|&&n| !is_constant_node(g, n))
        .map(|&n| {
            let gpu_side = on_gpu(n);
            let dev = if gpu_side { gpu } else { host };
            (n, gpu_side, node_time(g, n, facts, est, dev))
        })
        .collect()
}

/// The estimated time of graph `g` (its facts at the assumed sizes), GPU nodes on `gpu`, the
/// others on `host`; where each node runs is `on_gpu`'s answer. A submission is a connected
/// region of GPU nodes.
pub fn of_graph(
    g: &Graph,
    facts: &Facts,
    gpu: &DeviceModel,
    host: &DeviceModel,
    on_gpu: &dyn Fn(NodeId) -> bool,
) -> Timing {
    of_graph_grouped(g, facts, gpu, host, on_gpu, false)
}

/// [`of_graph`] with DirectML's submissions ([`crate::runtime::submission`]): a CPU node that
/// reads a GPU value ends the command list recorded so far, whatever else stays on the GPU
/// (falls back to connected regions where the graph has a cycle).
pub fn of_graph_fused(
    g: &Graph,
    facts: &Facts,
    gpu: &DeviceModel,
    host: &DeviceModel,
    on_gpu: &dyn Fn(NodeId) -> bool,
) -> Timing {
    of_graph_grouped(g, facts, gpu, host, on_gpu, true)
}

fn of_graph_grouped(
    g: &Graph,
    facts: &Facts,
    gpu: &DeviceModel,
    host: &DeviceModel,
    on_gpu: &dyn Fn(NodeId) -> bool,
    fused: bool,
) -> Timing {
    let submissions = if fused {
        crate::rewrite::barrier::submissions_of(g, facts, on_gpu).ok()
    } else {
        None
    };
    let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
    // Per node index: 0 none (Constant), 1 CPU, 2 GPU.
    let mut side = vec![0u8; bound];
    let mut time = vec![0f64; bound];
    let mut t = Timing {
        device: gpu.name.clone(),
        gpu_s: 0.0,
        cpu_s: 0.0,
        crossing_s: 0.0,
        submissions: 0,
        longest: None,
        limit_s: gpu.timeout_s,
        bounded_nodes: 0,
        share: MARGIN,
    };
    let consumers = g.consumers();
    let est = Estimates::with_consumers(g, facts, &g.order, &consumers);
    for (n, on, nt) in times_with(g, facts, &est, gpu, host, on_gpu) {
        side[n.index()] = if on { 2 } else { 1 };
        time[n.index()] = nt.seconds;
        t.bounded_nodes += usize::from(nt.bounded);
        if !on {
            t.cpu_s += nt.seconds;
        }
    }
    let side_of = |n: NodeId| side.get(n.index()).copied().unwrap_or(0);
    let mut parent: Vec<usize> = (0..bound).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for (vi, value) in g.values.iter().enumerate() {
        let Origin::Node { node: p, .. } = value.origin else {
            continue;
        };
        if !g.nodes.contains_node(p) || side_of(p) == 0 {
            continue;
        }
        let v = ValueId(vi as u32);
        let (mut to_cpu, mut to_gpu) = (false, false);
        for &(c, _) in consumers.of(v) {
            match (side_of(p), side_of(c)) {
                (2, 2) => {
                    let (a, b) = (root(&mut parent, p.index()), root(&mut parent, c.index()));
                    if a != b {
                        parent[a] = b;
                    }
                }
                (2, 1) => to_cpu = true,
                (1, 2) => to_gpu = true,
                _ => {}
            }
        }
        if to_cpu || to_gpu {
            let (bytes, _) = est.bytes(facts, v);
            t.crossing_s += gpu.crossing_s(bytes);
        }
    }
    // Each piece: the sum of its nodes, plus one launch.
    let mut piece: std::collections::HashMap<usize, Submission> = Default::default();
    for &n in &g.order {
        if side_of(n) != 2 {
            continue;
        }
        let r = match &submissions {
            Some(p) => p.get(n.index()).copied().flatten().unwrap_or(n.index()),
            None => root(&mut parent, n.index()),
        };
        let s = piece.entry(r).or_insert_with(|| Submission {
            first: g.node(n).name().to_string(),
            nodes: 0,
            seconds: gpu.launch_s,
        });
        s.nodes += 1;
        s.seconds += time[n.index()];
    }
    t.submissions = piece.len();
    t.gpu_s = piece.values().map(|s| s.seconds).sum();
    // The longest; ties go to the piece that starts first in the graph's order.
    let first_pos: std::collections::HashMap<&str, usize> = g
        .order
        .iter()
        .enumerate()
        .map(|(i, &n)| (g.node(n).name(), i))
        .collect();
    t.longest = piece.into_values().max_by(|a, b| {
        a.seconds.total_cmp(&b.seconds).then_with(|| {
            let pa = first_pos.get(a.first.as_str()).copied().unwrap_or(0);
            let pb = first_pos.get(b.first.as_str()).copied().unwrap_or(0);
            pb.cmp(&pa)
        })
    });
    t
}

/// The device model of `target`, when it has a complete one (`None` for targets without a
/// `device:` section, such as `none`).
pub fn device_of(target: &crate::rules::schema::Target) -> Option<DeviceModel> {
    if target.device.is_empty() {
        return None;
    }
    DeviceModel::from_spec(&target.device).ok()
}

/// The estimated time of `model`'s main graph on `target`'s device at `sizes`, nodes annotated
/// `annotation` on the host (`None` without a device model).
pub fn of_model(
    model: &Model,
    target: &crate::rules::schema::Target,
    annotation: &str,
    sizes: &Sizes,
) -> Option<Timing> {
    let gpu = device_of(target)?;
    let facts = sizes.infer(model);
    // Where each node runs: the runtime's predicted placement when the target names its
    // provider ([`crate::runtime::placement`]), else the pins.
    let timing = match crate::cost::profile_of(target) {
        Some(p) => {
            let placed = crate::runtime::placement::predict_graph(
                model,
                &model.graph,
                &facts,
                p,
                annotation,
            );
            let on_gpu = |n: NodeId| placed.side(n) != crate::runtime::placement::Side::Cpu;
            if p.name == "directml" {
                of_graph_fused(&model.graph, &facts, &gpu, &DeviceModel::host(), &on_gpu)
            } else {
                of_graph(&model.graph, &facts, &gpu, &DeviceModel::host(), &on_gpu)
            }
        }
        None => {
            let on_gpu = on_gpu_by_pins(&model.graph, annotation);
            of_graph(&model.graph, &facts, &gpu, &DeviceModel::host(), &on_gpu)
        }
    };
    Some(Timing {
        share: share_of(target),
        ..timing
    })
}

/// The share of the limit a submission may take with margin on `target`: one over the margin
/// of its barrier by time (the smallest share, where there are several; a rule's own
/// `limit_ms` is not the device's limit and leaves it), else [`MARGIN`].
pub fn share_of(target: &crate::rules::schema::Target) -> f64 {
    target
        .rules
        .iter()
        .filter_map(|r| match &r.action {
            crate::rules::schema::Action::Barrier {
                limit:
                    crate::rules::schema::BarrierLimit::Time {
                        margin,
                        limit_ms: None,
                    },
                ..
            } => Some(1.0 / margin),
            _ => None,
        })
        .min_by(|a, b| a.total_cmp(b))
        .unwrap_or(MARGIN)
}

/// [`of_model`] at the sizes `check` assumes for `target` (`--dim`, then the target's
/// defaults).
pub fn for_target(
    model: &Model,
    target: &crate::rules::schema::Target,
    opts: &crate::engine::Options,
) -> Option<Timing> {
    device_of(target)?;
    let sizes = Sizes::for_model(
        model,
        &opts.dims,
        &crate::rewrite::pass::assumed_sizes(target),
    );
    of_model(model, target, &opts.annotation, &sizes)
}

/// Milliseconds for people: `0.012 ms`, `3.40 ms`, `1234 ms`.
pub fn ms_text(s: f64) -> String {
    let m = s * 1e3;
    if m >= 100.0 {
        format!("{m:.0} ms")
    } else if m >= 1.0 {
        format!("{m:.2} ms")
    } else {
        format!("{m:.3} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> DeviceModel {
        DeviceModel {
            name: "test".into(),
            class: DeviceClass::Gpu,
            peak_f32: 1e12,
            peak_f16: 2e12,
            peak_int8: 4e12,
            memory_bps: 100e9,
            link_bps: 10e9,
            link_latency_s: 10e-6,
            launch_s: 50e-6,
            node_floor_s: GPU_NODE_FLOOR_S,
            timeout_s: Some(2.0),
        }
    }

    #[test]
    fn a_large_gemm_is_bound_by_arithmetic() {
        // 1024^3 multiply-adds: 2.147e9 operations at 1e12 x 0.5 = 4.295 ms; 12.6 MB at
        // 100 GB/s x 0.7 = 0.18 ms.
        let f = 2 * 1024u64.pow(3);
        let b = 3 * 1024 * 1024 * 4;
        let t = roofline(&gpu(), OpKind::Gemm, Some(dtype::FLOAT), f, b);
        assert!((t - f as f64 / 0.5e12).abs() < 1e-12, "{t}");
        // float16 at twice the rate, 8-bit at four times.
        let h = roofline(&gpu(), OpKind::Gemm, Some(dtype::FLOAT16), f, b);
        assert!((h - t / 2.0).abs() < 1e-12);
        let q = roofline(&gpu(), OpKind::Gemm, Some(dtype::UINT8), f, b);
        assert!((q - t / 4.0).abs() < 1e-12);
    }

    #[test]
    fn an_elementwise_op_is_bound_by_bandwidth() {
        // Add of two 4 MB tensors into a third: 12 MB at 100 GB/s x 0.7 = 171.4 us.
        let b = 12_000_000u64;
        let t = roofline(&gpu(), OpKind::Elementwise, Some(dtype::FLOAT), 0, b);
        assert!((t - 12e6 / 70e9).abs() < 1e-12, "{t}");
    }

    #[test]
    fn a_depthwise_conv_is_slow_on_the_gpu_and_tiny_nodes_take_the_floor() {
        // 3x3 depthwise, 256 channels, 240x240: 2 x 256 x 57600 x 9 = 265 MFLOP at 5% of 1e12.
        let f = 2 * 256 * 240 * 240 * 9u64;
        let t = roofline(&gpu(), OpKind::Depthwise, Some(dtype::FLOAT), f, 0);
        assert!((t - f as f64 / 0.05e12).abs() < 1e-12);
        assert_eq!(
            roofline(&gpu(), OpKind::Elementwise, None, 0, 16),
            GPU_NODE_FLOOR_S
        );
        assert_eq!(roofline(&gpu(), OpKind::Free, None, 0, 1 << 30), 0.0);
    }

    #[test]
    fn a_crossing_is_latency_plus_bytes_over_the_link() {
        // 10 MB over 10 GB/s: 1 ms, plus 10 us.
        assert!((gpu().crossing_s(10_000_000) - 1.010e-3).abs() < 1e-12);
    }

    #[test]
    fn the_cpu_model_of_this_machine() {
        let c = DeviceModel::this_cpu_one_thread();
        assert!((c.peak_f32 - 112e9).abs() < 1e6);
        // 8-bit at twice the float32 rate (half the multiply-pipe µops per product on AVX2).
        assert!((c.peak_int8 - 2.0 * c.peak_f32).abs() < 1.0);
        assert_eq!(c.timeout_s, None);
        // On a CPU the roofline is a sum, plus the call: 1 ms of arithmetic at 75% of the peak
        // and 1 ms of bytes at 80% of the bandwidth take 2 ms and 4 µs.
        let f = (0.75 * c.peak_f32 * 1e-3) as u64;
        let b = (0.80 * c.memory_bps * 1e-3) as u64;
        let t = roofline(&c, OpKind::Gemm, Some(dtype::FLOAT), f, b);
        assert!((t - (2e-3 + CPU_NODE_FLOOR_S)).abs() < 1e-9, "{t}");
        // 8-bit depthwise: its own kernel, at 0.4 of the float32 peak.
        let q = roofline(&c, OpKind::Depthwise, Some(dtype::UINT8), f, 0);
        let want = CPU_NODE_FLOOR_S + f as f64 / (c.peak_f32 * CPU_DEPTHWISE_INT8_EFFICIENCY);
        assert!((q - want).abs() < 1e-12, "{q}");
    }

    #[test]
    fn every_kind_has_a_row_in_both_tables() {
        for k in [
            OpKind::Gemm,
            OpKind::Conv,
            OpKind::Depthwise,
            OpKind::ConvTranspose,
            OpKind::Elementwise,
            OpKind::Reduction,
            OpKind::Movement,
            OpKind::Free,
            OpKind::Other,
        ] {
            assert!(GPU_EFFICIENCY.iter().any(|e| e.0 == k), "{k:?}");
            assert!(CPU_EFFICIENCY.iter().any(|e| e.0 == k), "{k:?}");
        }
        for e in GPU_EFFICIENCY.iter().chain(CPU_EFFICIENCY) {
            assert!(e.1 > 0.0 && e.1 <= 1.0 && e.2 > 0.0 && e.2 <= 1.0);
        }
    }

    #[test]
    fn a_device_spec_without_its_figures_is_refused() {
        let spec = DeviceSpec {
            tflops_f32: Some(1.0),
            ..Default::default()
        };
        let e = DeviceModel::from_spec(&spec).unwrap_err();
        assert!(e.contains("memory_gbs") && e.contains("launch_us"), "{e}");
    }
}
