//! Inference of ONNX Runtime's transformer contrib operators (`com.microsoft`): each op on a
//! tiny model of known sizes gets the element type and shape written here, and, where the
//! venv has ONNX Runtime and its CPU kernel exists, the very shapes ONNX Runtime returns for
//! the same model (so a wrong rule fails even where the expectation below shares its error).
//! Symbolic models check that sizes stay expressions over the inputs' names.

mod common;

use onnx_safeify::infer::{infer_model, Dim, InferOptions, TensorInfo};
use onnx_safeify::ir::{Model, ValueId};
use onnx_safeify::proto::{
    attribute_proto::AttributeType, tensor_shape_proto::dimension, tensor_shape_proto::Dimension,
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};

const F: i32 = 1;
const U8: i32 = 2;
const I8: i32 = 3;
const I32: i32 = 6;
const I64: i32 = 7;
const F16: i32 = 10;

/// A declared dimension.
#[derive(Clone, Copy, Debug)]
enum D {
    K(i64),
    S(&'static str),
}

/// One input of a case: a graph input of these dims, or (with `ints`) an integer initializer.
#[derive(Clone, Debug)]
struct In {
    name: &'static str,
    dtype: i32,
    dims: Vec<D>,
    ints: Option<Vec<i64>>,
}

fn x(name: &'static str, dtype: i32, dims: &[i64]) -> In {
    In {
        name,
        dtype,
        dims: dims.iter().map(|&d| D::K(d)).collect(),
        ints: None,
    }
}
fn xs(name: &'static str, dtype: i32, dims: &[D]) -> In {
    In {
        name,
        dtype,
        dims: dims.to_vec(),
        ints: None,
    }
}
fn konst(name: &'static str, dtype: i32, dims: &[i64], v: &[i64]) -> In {
    In {
        name,
        dtype,
        dims: dims.iter().map(|&d| D::K(d)).collect(),
        ints: Some(v.to_vec()),
    }
}
/// An optional input left out.
fn none() -> In {
    In {
        name: "",
        dtype: 0,
        dims: vec![],
        ints: None,
    }
}

fn ai(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    }
}
fn af(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(AttributeType::Float as i32),
        ..Default::default()
    }
}

/// One operator on a tiny model.
struct Case {
    label: &'static str,
    domain: &'static str,
    op: &'static str,
    inputs: Vec<In>,
    attrs: Vec<AttributeProto>,
    outputs: Vec<&'static str>,
    /// What each output must be (element type, dims).
    expect: Vec<(i32, Vec<i64>)>,
    /// ONNX Runtime's CPU provider implements it (then its shapes are compared too).
    ort: bool,
}

fn vi(name: &str, elem: i32, dims: &[D]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            denotation: None,
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            value: Some(match d {
                                D::K(v) => dimension::Value::DimValue(*v),
                                D::S(s) => dimension::Value::DimParam(s.to_string()),
                            }),
                            denotation: None,
                        })
                        .collect(),
                }),
            })),
        }),
        ..Default::default()
    }
}

fn proto(case: &Case) -> ModelProto {
    let mut inputs = Vec::new();
    let mut inits = Vec::new();
    for i in &case.inputs {
        if i.name.is_empty() {
            continue;
        }
        match &i.ints {
            Some(v) => {
                let mut t = TensorProto {
                    name: Some(i.name.into()),
                    dims: i
                        .dims
                        .iter()
                        .map(|d| match d {
                            D::K(k) => *k,
                            D::S(_) => unreachable!("constants have known dims"),
                        })
                        .collect(),
                    data_type: Some(i.dtype),
                    ..Default::default()
                };
                if i.dtype == I64 {
                    t.int64_data = v.clone();
                } else {
                    t.int32_data = v.iter().map(|&k| k as i32).collect();
                }
                inits.push(t);
            }
            None => inputs.push(vi(i.name, i.dtype, &i.dims)),
        }
    }
    let node = NodeProto {
        op_type: Some(case.op.into()),
        domain: Some(case.domain.into()),
        name: Some("n".into()),
        input: case.inputs.iter().map(|i| i.name.to_string()).collect(),
        output: case.outputs.iter().map(|s| s.to_string()).collect(),
        attribute: case.attrs.clone(),
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![
            OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            },
            OperatorSetIdProto {
                domain: Some("com.microsoft".into()),
                version: Some(1),
            },
        ],
        graph: Some(GraphProto {
            name: Some(case.label.into()),
            node: vec![node],
            initializer: inits,
            input: inputs,
            output: case
                .outputs
                .iter()
                .filter(|o| !o.is_empty())
                .map(|o| ValueInfoProto {
                    name: Some(o.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn id(m: &Model, name: &str) -> ValueId {
    let i = m
        .graph
        .values
        .iter()
        .position(|v| *v.name == *name)
        .unwrap_or_else(|| panic!("no value {name}"));
    ValueId(i as u32)
}

/// The inferred facts of each output of a case's model.
fn infer(case: &Case) -> Vec<TensorInfo> {
    let m = onnx_safeify::import::import_model(proto(case), None).expect("import");
    let f = infer_model(&m, &InferOptions::default());
    case.outputs
        .iter()
        .map(|o| f.info(id(&m, o)).clone())
        .collect()
}

fn sym(s: &str) -> Dim {
    Dim::Sym(s.into())
}
fn k(v: i64) -> Dim {
    Dim::Known(v)
}

fn cases() -> Vec<Case> {
    let ms = "com.microsoft";
    let c = |label, op, inputs, attrs, outputs: &[&'static str], expect, ort| Case {
        label,
        domain: ms,
        op,
        inputs,
        attrs,
        outputs: outputs.to_vec(),
        expect,
        ort,
    };
    vec![
        c(
            "skip_layer_norm",
            "SkipLayerNormalization",
            vec![
                x("x", F, &[2, 3, 8]),
                x("s", F, &[2, 3, 8]),
                x("g", F, &[8]),
                x("b", F, &[8]),
            ],
            vec![],
            &["y", "mean", "inv", "sum"],
            vec![
                (F, vec![2, 3, 8]),
                (F, vec![2, 3, 1]),
                (F, vec![2, 3, 1]),
                (F, vec![2, 3, 8]),
            ],
            true,
        ),
        c(
            "skip_layer_norm_fp16_2d_skip",
            "SkipLayerNormalization",
            vec![
                x("x", F16, &[2, 3, 8]),
                x("s", F16, &[3, 8]),
                x("g", F16, &[8]),
            ],
            vec![],
            &["y", "mean", "inv", "sum"],
            vec![
                (F16, vec![2, 3, 8]),
                (F, vec![2, 3, 1]),
                (F, vec![2, 3, 1]),
                (F16, vec![2, 3, 8]),
            ],
            true,
        ),
        c(
            "skip_simplified_layer_norm_fp16",
            "SkipSimplifiedLayerNormalization",
            vec![
                x("x", F16, &[1, 4, 16]),
                x("s", F16, &[1, 4, 16]),
                x("g", F16, &[16]),
            ],
            vec![af("epsilon", 1e-6)],
            &["y", "mean", "inv", "sum"],
            vec![
                (F16, vec![1, 4, 16]),
                (F, vec![1, 4, 1]),
                (F, vec![1, 4, 1]),
                (F16, vec![1, 4, 16]),
            ],
            true,
        ),
        c(
            "embed_layer_norm",
            "EmbedLayerNormalization",
            vec![
                x("ids", I32, &[2, 3]),
                x("seg", I32, &[2, 3]),
                x("we", F, &[10, 8]),
                x("pe", F, &[16, 8]),
                x("se", F, &[2, 8]),
                x("g", F, &[8]),
                x("b", F, &[8]),
                x("m", I32, &[2, 3]),
            ],
            vec![],
            &["y", "mask_index", "sum"],
            vec![(F, vec![2, 3, 8]), (I32, vec![2]), (F, vec![2, 3, 8])],
            true,
        ),
        c(
            "attention_past",
            "Attention",
            vec![
                x("x", F, &[2, 3, 8]),
                x("w", F, &[8, 24]),
                x("b", F, &[24]),
                x("m", I32, &[2, 5]),
                x("past", F, &[2, 2, 2, 2, 4]),
            ],
            vec![ai("num_heads", 2)],
            &["y", "present"],
            vec![(F, vec![2, 3, 8]), (F, vec![2, 2, 2, 5, 4])],
            true,
        ),
        c(
            "attention_fp16_present_without_past",
            "Attention",
            vec![
                x("x", F16, &[1, 3, 8]),
                x("w", F16, &[8, 24]),
                x("b", F16, &[24]),
            ],
            vec![ai("num_heads", 2)],
            &["y", "present"],
            vec![(F16, vec![1, 3, 8]), (F16, vec![2, 1, 2, 3, 4])],
            false,
        ),
        c(
            "attention_qkv_hidden_sizes",
            "Attention",
            vec![x("x", F, &[2, 3, 8]), x("w", F, &[8, 20]), x("b", F, &[20])],
            vec![
                ai("num_heads", 2),
                AttributeProto {
                    name: Some("qkv_hidden_sizes".into()),
                    ints: vec![8, 8, 4],
                    r#type: Some(AttributeType::Ints as i32),
                    ..Default::default()
                },
            ],
            &["y"],
            vec![(F, vec![2, 3, 4])],
            true,
        ),
        c(
            "mha_past",
            "MultiHeadAttention",
            vec![
                x("q", F, &[2, 3, 8]),
                x("k", F, &[2, 3, 8]),
                x("v", F, &[2, 3, 8]),
                none(),
                none(),
                none(),
                x("pk", F, &[2, 2, 4, 4]),
                x("pv", F, &[2, 2, 4, 4]),
            ],
            vec![ai("num_heads", 2)],
            &["y", "present_key", "present_value"],
            vec![
                (F, vec![2, 3, 8]),
                (F, vec![2, 2, 7, 4]),
                (F, vec![2, 2, 7, 4]),
            ],
            true,
        ),
        c(
            "mha_no_past",
            "MultiHeadAttention",
            vec![
                x("q", F, &[2, 3, 8]),
                x("k", F, &[2, 5, 8]),
                x("v", F, &[2, 5, 8]),
            ],
            vec![ai("num_heads", 2)],
            &["y", "present_key", "present_value"],
            vec![
                (F, vec![2, 3, 8]),
                (F, vec![2, 2, 5, 4]),
                (F, vec![2, 2, 5, 4]),
            ],
            true,
        ),
        c(
            "mha_cross_bnsh",
            "MultiHeadAttention",
            vec![
                x("q", F, &[2, 3, 8]),
                x("k", F, &[2, 2, 5, 4]),
                x("v", F, &[2, 2, 5, 4]),
            ],
            vec![ai("num_heads", 2)],
            &["y", "present_key", "present_value"],
            vec![
                (F, vec![2, 3, 8]),
                (F, vec![2, 2, 5, 4]),
                (F, vec![2, 2, 5, 4]),
            ],
            true,
        ),
        c(
            "gqa_decode_past",
            "GroupQueryAttention",
            vec![
                x("q", F, &[2, 1, 32]),
                x("k", F, &[2, 1, 16]),
                x("v", F, &[2, 1, 16]),
                x("pk", F, &[2, 2, 4, 8]),
                x("pv", F, &[2, 2, 4, 8]),
                konst("seqlens", I32, &[2], &[4, 4]),
                konst("total", I32, &[], &[5]),
            ],
            vec![ai("num_heads", 4), ai("kv_num_heads", 2)],
            &["y", "present_key", "present_value"],
            vec![
                (F, vec![2, 1, 32]),
                (F, vec![2, 2, 5, 8]),
                (F, vec![2, 2, 5, 8]),
            ],
            true,
        ),
        c(
            "gqa_prefill_past_buffer_larger",
            "GroupQueryAttention",
            vec![
                x("q", F, &[1, 3, 32]),
                x("k", F, &[1, 3, 16]),
                x("v", F, &[1, 3, 16]),
                x("pk", F, &[1, 2, 10, 8]),
                x("pv", F, &[1, 2, 10, 8]),
                konst("seqlens", I32, &[1], &[6]),
                konst("total", I32, &[], &[7]),
            ],
            vec![ai("num_heads", 4), ai("kv_num_heads", 2)],
            &["y", "present_key", "present_value"],
            vec![
                (F, vec![1, 3, 32]),
                (F, vec![1, 2, 10, 8]),
                (F, vec![1, 2, 10, 8]),
            ],
            true,
        ),
        c(
            "gqa_packed_fp16",
            "GroupQueryAttention",
            vec![
                x("q", F16, &[1, 3, 64]),
                none(),
                none(),
                x("pk", F16, &[1, 2, 4, 8]),
                x("pv", F16, &[1, 2, 4, 8]),
                konst("seqlens", I32, &[1], &[6]),
                konst("total", I32, &[], &[7]),
            ],
            vec![ai("num_heads", 4), ai("kv_num_heads", 2)],
            &["y", "present_key", "present_value"],
            vec![
                (F16, vec![1, 3, 32]),
                (F16, vec![1, 2, 7, 8]),
                (F16, vec![1, 2, 7, 8]),
            ],
            true,
        ),
        c(
            "gqa_no_past",
            "GroupQueryAttention",
            vec![
                x("q", F, &[2, 3, 32]),
                x("k", F, &[2, 3, 16]),
                x("v", F, &[2, 3, 16]),
                none(),
                none(),
                konst("seqlens", I32, &[2], &[2, 2]),
                konst("total", I32, &[], &[3]),
            ],
            vec![ai("num_heads", 4), ai("kv_num_heads", 2)],
            &["y", "present_key", "present_value"],
            vec![
                (F, vec![2, 3, 32]),
                (F, vec![2, 2, 3, 8]),
                (F, vec![2, 2, 3, 8]),
            ],
            true,
        ),
        c(
            "rotary_embedding",
            "RotaryEmbedding",
            vec![
                x("x", F, &[2, 3, 8]),
                x("pos", I64, &[2, 3]),
                x("cos", F, &[8, 2]),
                x("sin", F, &[8, 2]),
            ],
            vec![ai("num_heads", 2)],
            &["y"],
            vec![(F, vec![2, 3, 8])],
            true,
        ),
        c(
            "matmul_nbits",
            "MatMulNBits",
            vec![
                x("a", F, &[2, 3, 32]),
                x("b", U8, &[6, 1, 16]),
                x("s", F, &[6]),
            ],
            vec![ai("K", 32), ai("N", 6), ai("bits", 4), ai("block_size", 32)],
            &["y"],
            vec![(F, vec![2, 3, 6])],
            true,
        ),
        c(
            "matmul_nbits_fp16",
            "MatMulNBits",
            vec![
                x("a", F16, &[3, 32]),
                x("b", U8, &[6, 1, 16]),
                x("s", F16, &[6]),
            ],
            vec![ai("K", 32), ai("N", 6), ai("bits", 4), ai("block_size", 32)],
            &["y"],
            vec![(F16, vec![3, 6])],
            true,
        ),
        c(
            "gather_block_quantized",
            "GatherBlockQuantized",
            vec![
                x("d", U8, &[10, 16]),
                x("i", I64, &[1, 3]),
                x("s", F, &[10, 1]),
            ],
            vec![
                ai("bits", 4),
                ai("block_size", 32),
                ai("gather_axis", 0),
                ai("quantize_axis", 1),
            ],
            &["y"],
            vec![(F, vec![1, 3, 32])],
            true,
        ),
        c(
            "fast_gelu",
            "FastGelu",
            vec![x("x", F, &[2, 3, 8]), x("b", F, &[8])],
            vec![],
            &["y"],
            vec![(F, vec![2, 3, 8])],
            true,
        ),
        c(
            "bias_gelu_fp16",
            "BiasGelu",
            vec![x("x", F16, &[2, 3, 8]), x("b", F16, &[8])],
            vec![],
            &["y"],
            vec![(F16, vec![2, 3, 8])],
            true,
        ),
        c(
            "quick_gelu",
            "QuickGelu",
            vec![x("x", F, &[2, 3, 8])],
            vec![],
            &["y"],
            vec![(F, vec![2, 3, 8])],
            true,
        ),
        c(
            "gelu",
            "Gelu",
            vec![x("x", F, &[2, 3, 8])],
            vec![],
            &["y"],
            vec![(F, vec![2, 3, 8])],
            true,
        ),
        c(
            "bias_add",
            "BiasAdd",
            vec![
                x("x", F16, &[2, 4, 8]),
                x("b", F16, &[8]),
                x("s", F16, &[2, 4, 8]),
            ],
            vec![],
            &["y"],
            vec![(F16, vec![2, 4, 8])],
            false,
        ),
        c(
            "bias_split_gelu",
            "BiasSplitGelu",
            vec![x("x", F16, &[2, 4, 16]), x("b", F16, &[16])],
            vec![],
            &["y"],
            vec![(F16, vec![2, 4, 8])],
            false,
        ),
        c(
            "gemm_fast_gelu",
            "GemmFastGelu",
            vec![x("x", F, &[2, 3, 8]), x("w", F, &[8, 6]), x("b", F, &[6])],
            vec![],
            &["y"],
            vec![(F, vec![2, 3, 6])],
            false,
        ),
        c(
            "group_norm",
            "GroupNorm",
            vec![x("x", F16, &[2, 4, 4, 8]), x("g", F, &[8]), x("b", F, &[8])],
            vec![ai("activation", 0), ai("groups", 2), af("epsilon", 1e-5)],
            &["y"],
            vec![(F16, vec![2, 4, 4, 8])],
            false,
        ),
        c(
            "skip_group_norm",
            "SkipGroupNorm",
            vec![
                x("x", F16, &[2, 4, 4, 8]),
                x("g", F, &[8]),
                x("b", F, &[8]),
                x("s", F16, &[2, 4, 4, 8]),
            ],
            vec![ai("activation", 0), ai("groups", 2), af("epsilon", 1e-5)],
            &["y", "sum"],
            vec![(F16, vec![2, 4, 4, 8]), (F16, vec![2, 4, 4, 8])],
            false,
        ),
        c(
            "dmmha_shared_buffer",
            "DecoderMaskedMultiHeadAttention",
            vec![
                x("q", F, &[2, 1, 8]),
                x("k", F, &[2, 1, 8]),
                x("v", F, &[2, 1, 8]),
                none(),
                none(),
                x("pk", F, &[2, 2, 6, 4]),
                x("pv", F, &[2, 2, 6, 4]),
                konst("psl", I32, &[1], &[3]),
            ],
            vec![ai("num_heads", 2), ai("past_present_share_buffer", 1)],
            &["y", "present_key", "present_value"],
            vec![
                (F, vec![2, 1, 8]),
                (F, vec![2, 2, 6, 4]),
                (F, vec![2, 2, 6, 4]),
            ],
            true,
        ),
        c(
            "qattention_past",
            "QAttention",
            vec![
                x("x", U8, &[2, 3, 8]),
                x("w", U8, &[8, 24]),
                x("b", F, &[24]),
                x("xs", F, &[]),
                x("ws", F, &[]),
                none(),
                x("xz", U8, &[]),
                x("wz", U8, &[]),
                x("past", F, &[2, 2, 2, 5, 4]),
            ],
            vec![ai("num_heads", 2)],
            &["y", "present"],
            vec![(F, vec![2, 3, 8]), (F, vec![2, 2, 2, 8, 4])],
            true,
        ),
        c(
            "packed_attention",
            "PackedAttention",
            vec![
                x("x", F16, &[5, 8]),
                x("w", F16, &[8, 24]),
                x("b", F16, &[24]),
                x("off", I32, &[2, 3]),
                x("cum", I32, &[3]),
            ],
            vec![ai("num_heads", 2)],
            &["y"],
            vec![(F16, vec![5, 8])],
            false,
        ),
        c(
            "packed_mha_packed_qkv",
            "PackedMultiHeadAttention",
            vec![
                x("q", F16, &[5, 2, 3, 4]),
                none(),
                none(),
                none(),
                x("off", I32, &[2, 3]),
                x("cum", I32, &[3]),
            ],
            vec![ai("num_heads", 2)],
            &["y"],
            vec![(F16, vec![5, 8])],
            false,
        ),
        c(
            "restore_padding",
            "RestorePadding",
            vec![x("x", F, &[5, 8]), x("off", I32, &[2, 3])],
            vec![],
            &["y"],
            vec![(F, vec![2, 3, 8])],
            false,
        ),
        c(
            "dynamic_quantize_matmul",
            "DynamicQuantizeMatMul",
            vec![x("a", F, &[2, 3, 8]), x("b", I8, &[8, 5]), x("s", F, &[1])],
            vec![],
            &["y"],
            vec![(F, vec![2, 3, 5])],
            true,
        ),
        c(
            "matmul_integer_to_float",
            "MatMulIntegerToFloat",
            vec![
                x("a", U8, &[2, 3, 8]),
                x("b", I8, &[8, 5]),
                x("as", F, &[]),
                x("bs", F, &[]),
            ],
            vec![],
            &["y"],
            vec![(F, vec![2, 3, 5])],
            true,
        ),
        Case {
            label: "simplified_layer_norm_fp16_onnx_domain",
            domain: "",
            op: "SimplifiedLayerNormalization",
            inputs: vec![x("x", F16, &[2, 3, 8]), x("g", F16, &[8])],
            attrs: vec![ai("axis", -1)],
            outputs: vec!["y", "inv"],
            expect: vec![(F16, vec![2, 3, 8]), (F, vec![2, 3, 1])],
            ort: true,
        },
    ]
}

/// The dims of an inferred output, when every one is a number.
fn static_dims(i: &TensorInfo) -> Option<Vec<i64>> {
    i.dims_known()
}

#[test]
fn each_op_gets_the_type_and_shape_written_here() {
    let mut bad = Vec::new();
    for case in cases() {
        let got = infer(&case);
        for ((o, want), info) in case.outputs.iter().zip(&case.expect).zip(&got) {
            let ok = info.dtype == Some(want.0) && static_dims(info).as_deref() == Some(&want.1);
            if !ok {
                bad.push(format!(
                    "{} ({}) output {o}: inferred {info}, want {} {:?}",
                    case.label,
                    case.op,
                    onnx_safeify::tensor::dtype_name(want.0),
                    want.1
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// ONNX Runtime's own answer: run each case the CPU provider implements on random inputs
/// of the declared sizes (integer inputs zero, constants as given) and compare every
/// output's element type and shape with inference.
#[test]
fn shapes_match_onnx_runtime() {
    let Some(py) = common::venv_python() else {
        eprintln!("SKIPPED shapes_match_onnx_runtime: no venv python with onnxruntime");
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: Vec<Case> = cases().into_iter().filter(|c| c.ort).collect();
    let mut list = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let path = dir.path().join(format!("{i}_{}.onnx", case.label));
        std::fs::write(&path, common::encode(&proto(case))).expect("write model");
        list.push(path.to_string_lossy().into_owned());
    }
    let script = r#"
import json, sys
import numpy as np
import onnx, onnxruntime as ort
NP = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 10: np.float16}
OUT = {np.dtype(v): k for k, v in NP.items()}
rng = np.random.default_rng(0)
res = []
for path in json.loads(sys.argv[1]):
    m = onnx.load(path)
    inits = {t.name for t in m.graph.initializer}
    feeds = {}
    for i in m.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        dims = [d.dim_value for d in t.shape.dim]
        dt = NP[t.elem_type]
        if np.issubdtype(dt, np.floating):
            feeds[i.name] = rng.random(dims).astype(dt)
        else:
            feeds[i.name] = np.zeros(dims, dt)
    try:
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        outs = s.run(None, feeds)
        res.append([[OUT[o.dtype], list(o.shape)] for o in outs])
    except Exception as e:
        res.append(str(e)[:300])
print(json.dumps(res))
"#;
    let out = std::process::Command::new(&py)
        .arg("-c")
        .arg(script)
        .arg(serde_json::to_string(&list).unwrap())
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let res: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("JSON from the python side");
    let mut bad = Vec::new();
    for (case, r) in cases.iter().zip(res.as_array().expect("a list")) {
        let Some(outs) = r.as_array() else {
            bad.push(format!("{}: ONNX Runtime failed: {r}", case.label));
            continue;
        };
        if outs.len() != case.outputs.len() {
            bad.push(format!(
                "{}: ONNX Runtime gave {} outputs",
                case.label,
                outs.len()
            ));
            continue;
        }
        let got = infer(case);
        for ((o, ort_out), info) in case.outputs.iter().zip(outs).zip(&got) {
            let dt = ort_out[0].as_i64().map(|t| t as i32);
            let dims: Vec<i64> = ort_out[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_i64().unwrap())
                .collect();
            if info.dtype != dt || static_dims(info).as_deref() != Some(&dims) {
                bad.push(format!(
                    "{} ({}) output {o}: inferred {info}, ONNX Runtime gives type {dt:?} {dims:?}",
                    case.label, case.op
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

fn sym_case(
    op: &'static str,
    inputs: Vec<In>,
    attrs: Vec<AttributeProto>,
    outputs: &[&'static str],
) -> Vec<TensorInfo> {
    infer(&Case {
        label: op,
        domain: "com.microsoft",
        op,
        inputs,
        attrs,
        outputs: outputs.to_vec(),
        expect: vec![],
        ort: false,
    })
}

/// Sizes stay expressions over the inputs' names: `past + seq` for a present state, the
/// batch and sequence through MatMulNBits and the layer norms.
#[test]
fn symbolic_sizes_become_expressions() {
    use D::*;
    let (b, s, p) = (S("batch"), S("seq"), S("past"));
    let att = sym_case(
        "Attention",
        vec![
            xs("x", F16, &[b, s, K(8)]),
            x("w", F16, &[8, 24]),
            x("bias", F16, &[24]),
            xs("m", I32, &[b, S("total")]),
            xs("past", F16, &[K(2), b, K(2), p, K(4)]),
        ],
        vec![ai("num_heads", 2)],
        &["y", "present"],
    );
    assert_eq!(att[0].dtype, Some(F16));
    assert_eq!(
        att[0].shape.as_deref(),
        Some(&[sym("batch"), sym("seq"), k(8)][..])
    );
    assert_eq!(
        att[1].shape.as_deref(),
        Some(&[k(2), sym("batch"), k(2), sym("past + seq"), k(4)][..])
    );
    let mha = sym_case(
        "MultiHeadAttention",
        vec![
            xs("q", F, &[b, s, K(8)]),
            xs("k", F, &[b, s, K(8)]),
            xs("v", F, &[b, s, K(8)]),
            none(),
            none(),
            none(),
            xs("pk", F, &[b, K(2), p, K(4)]),
            xs("pv", F, &[b, K(2), p, K(4)]),
        ],
        vec![ai("num_heads", 2)],
        &["y", "present_key", "present_value"],
    );
    assert_eq!(
        mha[1].shape.as_deref(),
        Some(&[sym("batch"), k(2), sym("past + seq"), k(4)][..])
    );
    let total = sym("past + seq");
    assert_eq!(
        total.eval(&|n| match n {
            "past" => Some(7),
            "seq" => Some(1),
            _ => None,
        }),
        Some(8)
    );
    let nb = sym_case(
        "MatMulNBits",
        vec![
            xs("a", F16, &[b, s, K(32)]),
            x("w", U8, &[6, 1, 16]),
            x("sc", F16, &[6]),
        ],
        vec![ai("K", 32), ai("N", 6), ai("bits", 4), ai("block_size", 32)],
        &["y"],
    );
    assert_eq!(nb[0].dtype, Some(F16));
    assert_eq!(
        nb[0].shape.as_deref(),
        Some(&[sym("batch"), sym("seq"), k(6)][..])
    );
    // GQA: the present length is the larger of the past buffer and the total length.
    let gqa = sym_case(
        "GroupQueryAttention",
        vec![
            xs("q", F16, &[b, s, K(64)]),
            xs("k", F16, &[b, s, K(32)]),
            xs("v", F16, &[b, s, K(32)]),
            xs("pk", F16, &[b, K(2), p, K(16)]),
            xs("pv", F16, &[b, K(2), p, K(16)]),
            xs("seqlens", I32, &[b]),
            x("total", I32, &[]),
        ],
        vec![ai("num_heads", 4), ai("kv_num_heads", 2)],
        &["y", "present_key", "present_value"],
    );
    assert_eq!(
        gqa[0].shape.as_deref(),
        Some(&[sym("batch"), sym("seq"), k(64)][..])
    );
    // The total length is a run-time input here: its rank and the other dims are known.
    assert_eq!(
        gqa[1].shape.as_deref(),
        Some(&[sym("batch"), k(2), Dim::Unknown, k(16)][..])
    );
    let eln = sym_case(
        "EmbedLayerNormalization",
        vec![
            xs("ids", I32, &[b, s]),
            xs("seg", I32, &[b, s]),
            x("we", F16, &[10, 8]),
            x("pe", F16, &[16, 8]),
            x("se", F16, &[2, 8]),
            x("g", F16, &[8]),
            x("be", F16, &[8]),
        ],
        vec![],
        &["y", "mask_index"],
    );
    assert_eq!(eln[0].dtype, Some(F16));
    assert_eq!(
        eln[0].shape.as_deref(),
        Some(&[sym("batch"), sym("seq"), k(8)][..])
    );
    assert_eq!(eln[1].shape.as_deref(), Some(&[sym("batch")][..]));
    assert_eq!(eln[1].dtype, Some(I32));
}

/// GQA as onnxruntime-genai writes it: the total length comes from the attention mask's
/// shape (`Shape -> Gather -> Cast`), and the present state is `max(past, total)` of the
/// inputs' names, fixed by the sizes used.
#[test]
fn gqa_total_length_from_the_mask_shape() {
    use D::*;
    let (b, s, p, t) = (S("batch"), S("seq"), S("past"), S("total"));
    let mut m = proto(&Case {
        label: "gqa_genai",
        domain: "com.microsoft",
        op: "GroupQueryAttention",
        inputs: vec![
            xs("q", F, &[b, s, K(32)]),
            xs("k", F, &[b, s, K(16)]),
            xs("v", F, &[b, s, K(16)]),
            xs("pk", F, &[b, K(2), p, K(8)]),
            xs("pv", F, &[b, K(2), p, K(8)]),
            xs("seqlens", I32, &[b]),
            // "total" is computed below.
            none(),
        ],
        attrs: vec![ai("num_heads", 4), ai("kv_num_heads", 2)],
        outputs: vec!["y", "present_key", "present_value"],
        expect: vec![],
        ort: false,
    });
    let g = m.graph.as_mut().unwrap();
    g.input.push(vi("mask", I64, &[b, t]));
    g.initializer.push(TensorProto {
        name: Some("one".into()),
        dims: vec![],
        data_type: Some(I64),
        int64_data: vec![1],
        ..Default::default()
    });
    let mk = |op: &str, ins: &[&str], outs: &[&str], attrs: Vec<AttributeProto>| NodeProto {
        op_type: Some(op.into()),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    };
    let gqa = g.node.pop().unwrap();
    g.node.push(mk("Shape", &["mask"], &["ms"], vec![]));
    g.node
        .push(mk("Gather", &["ms", "one"], &["t64"], vec![ai("axis", 0)]));
    g.node
        .push(mk("Cast", &["t64"], &["total"], vec![ai("to", I32 as i64)]));
    let mut gqa = gqa;
    gqa.input[6] = "total".into();
    g.node.push(gqa);
    let model = onnx_safeify::import::import_model(m, None).expect("import");
    let f = infer_model(&model, &InferOptions::default());
    let pk = f.info(id(&model, "present_key"));
    assert_eq!(
        pk.shape.as_deref(),
        Some(&[sym("batch"), k(2), sym("max(past, total)"), k(8)][..])
    );
    let size = |n: &str| match n {
        "past" => Some(4),
        "total" => Some(5),
        _ => None,
    };
    assert_eq!(pk.shape.as_ref().unwrap()[2].eval(&size), Some(5));
}

/// Real models against ONNX Runtime, value by value: every node output of the main graph is
/// made a graph output, the model runs (optimizations off, so the nodes are the file's) on
/// the corpus' valid inputs (the transformer models' `.inputs.npz`) or on random inputs
/// (batch 1, other open sizes 64), and each inferred dim, computed at the sizes the inputs
/// had (`Dim::eval`: names and expressions such as `past + seq` or `floordiv(H + 1, 2)`),
/// must be what ONNX Runtime returned. Unknown dims are counted, not failed.
#[test]
fn corpus_shapes_match_onnx_runtime() {
    let Some(corpus) = common::corpus() else {
        eprintln!("SKIPPED corpus_shapes_match_onnx_runtime: no corpus");
        return;
    };
    let Some(py) = common::venv_python() else {
        eprintln!("SKIPPED corpus_shapes_match_onnx_runtime: no venv python with onnxruntime");
        return;
    };
    let mut models: Vec<std::path::PathBuf> = Vec::new();
    for sub in ["transformers", "real", "ort_optimized", "quantized"] {
        for p in common::onnx_files(&corpus.join(sub)) {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            // The beam search runs a generation loop (its own test); the LSTM ones are small.
            if name.contains("beam_search") || name.starts_with("quant_lstm") {
                continue;
            }
            if sub == "quantized" && !name.contains("ort_all") && !name.contains("qop.onnx") {
                continue;
            }
            models.push(p);
        }
    }
    assert!(!models.is_empty(), "no corpus models found");
    let list: Vec<String> = models
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let script = r#"
import json, os, sys
import numpy as np
import onnx, onnxruntime as ort
NP = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16}
OUT = {np.dtype(v): k for k, v in NP.items()}
rng = np.random.default_rng(0)
res = {}
for path in json.loads(sys.argv[1]):
    m = onnx.load(path)
    g = m.graph
    have = {o.name for o in g.output}
    for n in g.node:
        for o in n.output:
            if o and o not in have:
                g.output.append(onnx.ValueInfoProto(name=o))
                have.add(o)
    inits = {t.name for t in g.initializer}
    npz = path[:-len(".onnx")] + ".inputs.npz"
    given = dict(np.load(npz)) if os.path.exists(npz) else {}
    feeds, sizes = {}, {}
    for i in g.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        if i.name in given:
            a = given[i.name]
        else:
            dims = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0
                    else (1 if ax == 0 else 64)
                    for ax, d in enumerate(t.shape.dim)]
            dt = NP[t.elem_type]
            a = rng.random(dims).astype(dt) if np.issubdtype(dt, np.floating) else np.zeros(dims, dt)
        feeds[i.name] = a
        for ax, d in enumerate(t.shape.dim):
            if d.HasField("dim_param") and d.dim_param not in ("", "?"):
                sizes[d.dim_param] = int(a.shape[ax])
            elif not d.HasField("dim_value") or d.dim_value < 0:
                sizes[f"{i.name}.{ax}"] = int(a.shape[ax])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    try:
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in s.get_outputs()]
        outs = s.run(None, feeds)
        shapes = {n: [OUT.get(o.dtype), list(o.shape)] for n, o in zip(names, outs)
                  if isinstance(o, np.ndarray)}
        res[path] = {"sizes": sizes, "shapes": shapes}
    except Exception as e:
        res[path] = {"error": str(e)[:300]}
print(json.dumps(res))
"#;
    let out = std::process::Command::new(&py)
        .arg("-c")
        .arg(script)
        .arg(serde_json::to_string(&list).unwrap())
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let res: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("JSON from the python side");
    let opts = InferOptions {
        name_open_input_dims: true,
        ..Default::default()
    };
    let (mut compared, mut dims_total, mut dims_known, mut ran) = (0usize, 0usize, 0usize, 0);
    let mut bad = Vec::new();
    for path in &list {
        let r = &res[path.as_str()];
        if let Some(e) = r.get("error") {
            eprintln!("not compared (ONNX Runtime cannot run it here): {path}: {e}");
            continue;
        }
        ran += 1;
        let sizes: std::collections::HashMap<String, i64> = r["sizes"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
            .collect();
        let doc = onnx_safeify::load(std::path::Path::new(path)).expect("load");
        let m = &doc.model;
        let f = infer_model(m, &opts);
        let by_name: std::collections::HashMap<&str, ValueId> = m
            .graph
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| (&*v.name, ValueId(i as u32)))
            .collect();
        let size = |n: &str| sizes.get(n).copied();
        for (name, got) in r["shapes"].as_object().unwrap() {
            let Some(&v) = by_name.get(name.as_str()) else {
                continue;
            };
            let info = f.info(v);
            let want: Vec<i64> = got[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_i64().unwrap())
                .collect();
            compared += 1;
            if let (Some(t), Some(w)) = (info.dtype, got[0].as_i64()) {
                if i64::from(t) != w {
                    bad.push(format!("{path}: {name}: type {t}, ONNX Runtime {w}"));
                }
            }
            let Some(shape) = &info.shape else {
                dims_total += want.len();
                continue;
            };
            if shape.len() != want.len() {
                bad.push(format!(
                    "{path}: {name}: inferred {info}, ONNX Runtime {want:?}"
                ));
                continue;
            }
            for (d, &w) in shape.iter().zip(&want) {
                dims_total += 1;
                if let Some(x) = d.eval(&size) {
                    dims_known += 1;
                    if x != w {
                        bad.push(format!(
                            "{path}: {name}: inferred {info} (= {x} at the sizes used), ONNX Runtime {want:?}"
                        ));
                        break;
                    }
                }
            }
        }
    }
    eprintln!(
        "compared {compared} values of {ran} models: {dims_known} of {dims_total} dims known at the sizes used"
    );
    assert!(ran >= 5, "too few corpus models ran on ONNX Runtime");
    assert!(
        bad.is_empty(),
        "{} disagreements:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
