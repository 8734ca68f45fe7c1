//! Shared helpers of the `verify_*` integration tests: where the corpus and ONNX Runtime
//! are, and small ModelProto builders.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use onnx_safeify::proto::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use onnx_safeify::runtime::run::discover::{find_onnxruntime, Discovery};
use prost::Message;

pub const FLOAT: i32 = 1;
pub const INT64: i32 = 7;
pub const DOUBLE: i32 = 11;

fn allow_missing() -> bool {
    matches!(
        std::env::var("ONNX_SAFEIFY_ALLOW_MISSING_CORPUS").as_deref(),
        Ok("1")
    )
}

/// The test corpus; panics when it is missing unless ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1,
/// in which case the caller skips (returns `None`).
pub fn corpus() -> Option<PathBuf> {
    let p = std::env::var_os("ONNX_SAFEIFY_CORPUS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root/.cache/onnx-safeify/corpus"));
    if p.is_dir() {
        return Some(p);
    }
    if allow_missing() {
        eprintln!(
            "SKIPPED: corpus not found at {} (ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1)",
            p.display()
        );
        return None;
    }
    panic!(
        "test corpus not found at {}; set ONNX_SAFEIFY_CORPUS, or ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1 to skip",
        p.display()
    );
}

/// A corpus file that must exist when the corpus does.
pub fn corpus_file(rel: &str) -> Option<PathBuf> {
    let p = corpus()?.join(rel);
    assert!(p.exists(), "corpus file missing: {}", p.display());
    Some(p)
}

/// True when ONNX Runtime can be found (the default venv or ORT_DYLIB_PATH); panics
/// otherwise unless ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1.
pub fn runtime_available() -> bool {
    match find_onnxruntime(&Discovery::from_env()) {
        Ok(_) => true,
        Err(e) if allow_missing() => {
            eprintln!("SKIPPED: {e}");
            false
        }
        Err(e) => panic!("{e} (set ONNX_SAFEIFY_ALLOW_MISSING_CORPUS=1 to skip)"),
    }
}

pub fn read_model(path: &Path) -> ModelProto {
    let bytes = std::fs::read(path).unwrap();
    ModelProto::decode(bytes.as_slice()).unwrap()
}

pub fn write_model(dir: &Path, name: &str, m: &ModelProto) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

pub fn tensor_type(elem: i32, dims: Option<&[i64]>) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem),
            shape: dims.map(|d| TensorShapeProto {
                dim: d
                    .iter()
                    .map(|&v| tensor_shape_proto::Dimension {
                        value: Some(tensor_shape_proto::dimension::Value::DimValue(v)),
                        denotation: None,
                    })
                    .collect(),
            }),
        })),
        denotation: None,
    }
}

pub fn value_info(name: &str, elem: i32, dims: Option<&[i64]>) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(tensor_type(elem, dims)),
        ..Default::default()
    }
}

pub fn attr_f(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(AttributeType::Float as i32),
        ..Default::default()
    }
}

pub fn attr_i(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    }
}

pub fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: Some(format!("{op}_{}", outputs.first().copied().unwrap_or(""))),
        attribute: attrs,
        ..Default::default()
    }
}

pub fn f32_initializer(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(FLOAT),
        raw_data: Some(
            values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        ),
        ..Default::default()
    }
}

pub fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    initializers: Vec<TensorProto>,
) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        producer_name: Some("onnx-safeify-tests".into()),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: nodes,
            input: inputs,
            output: outputs,
            initializer: initializers,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// y = relu(x * w), z = sigmoid(x): two float outputs of shape [2, 3].
pub fn two_output_model() -> ModelProto {
    model(
        vec![
            node("Mul", &["x", "w"], &["xw"], vec![]),
            node("Relu", &["xw"], &["y"], vec![]),
            node("Sigmoid", &["x"], &["z"], vec![]),
        ],
        vec![value_info("x", FLOAT, Some(&[2, 3]))],
        vec![
            value_info("y", FLOAT, Some(&[2, 3])),
            value_info("z", FLOAT, Some(&[2, 3])),
        ],
        vec![f32_initializer("w", &[3], &[1.0, 2.0, 3.0])],
    )
}

/// Tags nodes with `layer_ann`.
pub fn annotate(node: &mut NodeProto, value: &str) {
    node.metadata_props.push(StringStringEntryProto {
        key: Some("layer_ann".into()),
        value: Some(value.into()),
    });
}

/// Splits a topologically ordered single-graph model before node `k` into two segment
/// models; returns them and the tensors that cross the cut (all assumed float).
pub fn split_model(m: &ModelProto, k: usize) -> (ModelProto, ModelProto, Vec<String>) {
    let g = m.graph.as_ref().unwrap();
    let (first, second) = g.node.split_at(k);
    let produced_first: std::collections::HashSet<&str> = first
        .iter()
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    let graph_outputs: Vec<&str> = g
        .output
        .iter()
        .map(|v| v.name.as_deref().unwrap())
        .collect();
    let mut crossing: Vec<String> = Vec::new();
    for n in second {
        for i in &n.input {
            if produced_first.contains(i.as_str()) && !crossing.contains(i) {
                crossing.push(i.clone());
            }
        }
    }
    for o in &graph_outputs {
        if produced_first.contains(o) && !crossing.iter().any(|c| c == o) {
            crossing.push(o.to_string());
        }
    }
    let uses =
        |nodes: &[NodeProto], name: &str| nodes.iter().any(|n| n.input.iter().any(|i| i == name));
    let inits = |nodes: &[NodeProto]| -> Vec<TensorProto> {
        g.initializer
            .iter()
            .filter(|t| uses(nodes, t.name.as_deref().unwrap_or("")))
            .cloned()
            .collect()
    };
    let ext_inputs = |nodes: &[NodeProto]| -> Vec<ValueInfoProto> {
        g.input
            .iter()
            .filter(|v| uses(nodes, v.name.as_deref().unwrap_or("")))
            .cloned()
            .collect()
    };
    let mut seg0 = m.clone();
    {
        let sg = seg0.graph.as_mut().unwrap();
        sg.node = first.to_vec();
        sg.initializer = inits(first);
        sg.input = ext_inputs(first);
        sg.output = crossing
            .iter()
            .map(|c| value_info(c, FLOAT, None))
            .collect();
        sg.value_info.clear();
    }
    let mut seg1 = m.clone();
    {
        let sg = seg1.graph.as_mut().unwrap();
        sg.node = second.to_vec();
        sg.initializer = inits(second);
        let mut ins: Vec<ValueInfoProto> = crossing
            .iter()
            .filter(|c| uses(second, c))
            .map(|c| value_info(c, FLOAT, None))
            .collect();
        ins.extend(ext_inputs(second));
        sg.input = ins;
        sg.output = g
            .output
            .iter()
            .filter(|o| !produced_first.contains(o.name.as_deref().unwrap_or("")))
            .cloned()
            .collect();
        sg.value_info.clear();
    }
    (seg0, seg1, crossing)
}

/// A synthetic "page of text" (dark glyph-like blocks in lines on white), normalised as
/// PaddleOCR does, as `x` of shape [1,3,h,w] in an .npz: unlike noise, it makes the
/// PP-OCR detector produce a non-trivial probability map.
pub fn text_page_npz(dir: &Path, h: usize, w: usize, seed: u64) -> PathBuf {
    use onnx_safeify::runtime::run::dtype::DType;
    use onnx_safeify::runtime::run::npz::write_npz;
    use onnx_safeify::runtime::run::tensor::{HostTensor, TensorData};
    use onnx_safeify::verify::inputs::Prng;
    let mut rng = Prng::new(seed);
    let mut img = vec![1.0f32; h * w];
    let mut y0 = 10;
    while y0 + 12 < h {
        let mut x = 8;
        while x + 12 < w {
            let gw = rng.range_i64(5, 9) as usize;
            for y in y0..y0 + 12 {
                for xx in x..x + gw {
                    if rng.next_f64() < 0.45 {
                        img[y * w + xx] = 0.0;
                    }
                }
            }
            x += gw + 3;
        }
        y0 += 24;
    }
    let mean = [0.485f32, 0.456, 0.406];
    let std = [0.229f32, 0.224, 0.225];
    let mut bytes = Vec::with_capacity(3 * h * w * 4);
    for c in 0..3 {
        for v in &img {
            bytes.extend_from_slice(&((v - mean[c]) / std[c]).to_le_bytes());
        }
    }
    let t = HostTensor::new(DType::F32, vec![1, 3, h, w], TensorData::Bytes(bytes)).unwrap();
    let p = dir.join("page.npz");
    write_npz(&p, &[("x", &t)]).unwrap();
    p
}
