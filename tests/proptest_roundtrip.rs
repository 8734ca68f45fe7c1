//! Property: a valid model round-trips proto-equal. Random DAGs of elementwise and unary ops,
//! Convs with random shapes and groups, Concat, Split and Reshape; random value and node names
//! (empty node names included) and a random node order. Each model is written with prost,
//! loaded, saved with `onnx_safeify::save`, and decoded again with prost: the result must equal
//! the original `ModelProto` (and its bytes prost's). The in-memory path (import → export)
//! must give the same message, and shape inference must agree with every declared shape.
//!
//! Deterministic: a fixed seed (override with PROPTEST_RNG_SEED), 64 cases (PROPTEST_CASES).

use std::collections::HashMap;

use bytes::Bytes;
use onnx_safeify::proto::{
    attribute_proto::AttributeType, tensor_shape_proto, type_proto, AttributeProto, GraphProto,
    ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use prost::Message;

fn config(default_cases: u32) -> Config {
    let mut c = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = default_cases;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = RngSeed::Fixed(0x05af_e1f7);
    }
    c
}

/// Names that exporters write, and some they should not: empty, spaces, slashes, non-ASCII.
const NAME_STYLES: [&str; 8] = [
    "",
    "x",
    "/model/conv.0/",
    "a b",
    "日本語",
    "onnx::Add_",
    "_",
    "0",
];

/// A model under construction, with the shape of every value (all float, rank 4).
struct Builder {
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    values: Vec<(String, [i64; 4])>,
    shapes: HashMap<String, [i64; 4]>,
    style: usize,
    node_names: Vec<u8>,
    count: usize,
    /// Values already read by some node (graph outputs are chosen among the others too).
    read: Vec<bool>,
}

fn dims_type(d: &[i64]) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(1),
            shape: Some(TensorShapeProto {
                dim: d
                    .iter()
                    .map(|&x| tensor_shape_proto::Dimension {
                        value: Some(tensor_shape_proto::dimension::Value::DimValue(x)),
                        denotation: None,
                    })
                    .collect(),
            }),
        })),
        denotation: None,
    }
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

impl Builder {
    fn fresh(&mut self) -> String {
        self.count += 1;
        format!(
            "{}{}",
            NAME_STYLES[self.style % NAME_STYLES.len()],
            self.count
        )
    }

    /// A node name: none, empty, or a unique one, as the name bytes say.
    fn node_name(&mut self) -> Option<String> {
        let b = self.node_names.get(self.nodes.len()).copied().unwrap_or(0);
        match b % 4 {
            0 => None,
            1 => Some(String::new()),
            _ => Some(format!(
                "{}n{}",
                NAME_STYLES[b as usize % NAME_STYLES.len()],
                self.nodes.len()
            )),
        }
    }

    fn value(&mut self, name: String, shape: [i64; 4]) {
        self.shapes.insert(name.clone(), shape);
        self.values.push((name, shape));
        self.read.push(false);
    }

    fn pick(&mut self, r: u8) -> (String, [i64; 4]) {
        let i = r as usize % self.values.len();
        self.read[i] = true;
        self.values[i].clone()
    }

    fn init(&mut self, dims: &[i64], seed: u8) -> String {
        let name = self.fresh();
        let n: i64 = dims.iter().product();
        let data: Vec<u8> = (0..n)
            .flat_map(|i| (((i * 7 + seed as i64) % 13) as f32 / 13.0 - 0.5).to_le_bytes())
            .collect();
        self.inits.push(TensorProto {
            dims: dims.to_vec(),
            data_type: Some(1),
            name: Some(name.clone()),
            raw_data: Some(data.into()),
            ..Default::default()
        });
        name
    }

    fn int64_init(&mut self, v: &[i64]) -> String {
        let name = self.fresh();
        self.inits.push(TensorProto {
            dims: vec![v.len() as i64],
            data_type: Some(7),
            name: Some(name.clone()),
            int64_data: v.to_vec(),
            ..Default::default()
        });
        name
    }

    fn node(
        &mut self,
        op: &str,
        inputs: Vec<String>,
        outputs: Vec<String>,
        attrs: Vec<AttributeProto>,
    ) {
        let name = self.node_name();
        self.nodes.push(NodeProto {
            input: inputs,
            output: outputs,
            name,
            op_type: Some(op.into()),
            attribute: attrs,
            ..Default::default()
        });
    }

    /// One step of the recipe: add a node reading existing values.
    fn step(&mut self, r: [u8; 8]) {
        match r[0] % 7 {
            0 => {
                let (x, s) = self.pick(r[1]);
                let op = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Identity"][r[2] as usize % 6];
                let y = self.fresh();
                self.node(op, vec![x], vec![y.clone()], vec![]);
                self.value(y, s);
            }
            1 => {
                let (a, s) = self.pick(r[1]);
                let same: Vec<usize> = (0..self.values.len())
                    .filter(|&i| self.values[i].1 == s)
                    .collect();
                let j = same[r[2] as usize % same.len()];
                self.read[j] = true;
                let b = self.values[j].0.clone();
                let op = ["Add", "Mul", "Sub", "Max", "Min"][r[3] as usize % 5];
                let y = self.fresh();
                self.node(op, vec![a, b], vec![y.clone()], vec![]);
                self.value(y, s);
            }
            2 => {
                let (x, [n, c, h, w]) = self.pick(r[1]);
                let divisors: Vec<i64> = (1..=c).filter(|g| c % g == 0).collect();
                let g = divisors[r[2] as usize % divisors.len()];
                let m = g * (1 + r[3] as i64 % 3);
                let (kh, kw) = (1 + r[4] as i64 % 3, 1 + (r[4] / 3) as i64 % 3);
                let s = 1 + r[5] as i64 % 2;
                let p = [
                    r[6] as i64 % 2,
                    (r[6] / 2) as i64 % 2,
                    (r[6] / 4) as i64 % 2,
                    (r[6] / 8) as i64 % 2,
                ];
                let oh = (h + p[0] + p[2] - kh) / s + 1;
                let ow = (w + p[1] + p[3] - kw) / s + 1;
                if h + p[0] + p[2] < kh || w + p[1] + p[3] < kw {
                    return;
                }
                let wname = self.init(&[m, c / g, kh, kw], r[7]);
                let mut inputs = vec![x, wname];
                if r[7].is_multiple_of(2) {
                    inputs.push(self.init(&[m], r[7] / 2));
                }
                let y = self.fresh();
                let attrs = vec![
                    int("group", g),
                    ints("kernel_shape", &[kh, kw]),
                    ints("pads", &p),
                    ints("strides", &[s, s]),
                ];
                self.node("Conv", inputs, vec![y.clone()], attrs);
                self.value(y, [n, m, oh, ow]);
            }
            3 => {
                let (a, [n, c, h, w]) = self.pick(r[1]);
                let same: Vec<usize> = (0..self.values.len())
                    .filter(|&i| {
                        let t = self.values[i].1;
                        t[0] == n && t[2] == h && t[3] == w
                    })
                    .collect();
                let k = 1 + r[2] as usize % 3;
                let mut inputs = vec![a];
                let mut total = c;
                for i in 0..k {
                    let j = same[(r[3] as usize + i * r[4] as usize) % same.len()];
                    self.read[j] = true;
                    inputs.push(self.values[j].0.clone());
                    total += self.values[j].1[1];
                }
                let y = self.fresh();
                self.node("Concat", inputs, vec![y.clone()], vec![int("axis", 1)]);
                self.value(y, [n, total, h, w]);
            }
            4 => {
                let (x, [n, c, h, w]) = self.pick(r[1]);
                if c < 2 {
                    return;
                }
                let a = 1 + r[2] as i64 % (c - 1);
                let split = self.int64_init(&[a, c - a]);
                let (y0, y1) = (self.fresh(), self.fresh());
                self.node(
                    "Split",
                    vec![x, split],
                    vec![y0.clone(), y1.clone()],
                    vec![int("axis", 1)],
                );
                self.value(y0, [n, a, h, w]);
                self.value(y1, [n, c - a, h, w]);
            }
            5 => {
                let (x, [n, c, h, w]) = self.pick(r[1]);
                let to = match r[2] % 3 {
                    0 => [n, c * h, w, 1],
                    1 => [n, c, h * w, 1],
                    _ => [n, 1, c * h * w, 1],
                };
                let shape = self.int64_init(&to);
                let y = self.fresh();
                self.node("Reshape", vec![x, shape], vec![y.clone()], vec![]);
                self.value(y, to);
            }
            _ => {
                // A node whose name is shared with a value name (allowed: separate namespaces).
                let (x, s) = self.pick(r[1]);
                let y = self.fresh();
                self.node("Relu", vec![x], vec![y.clone()], vec![]);
                if let Some(n) = self.nodes.last_mut() {
                    n.name = Some(y.clone());
                }
                self.value(y, s);
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Recipe {
    inputs: Vec<[i64; 3]>,
    steps: Vec<[u8; 8]>,
    style: usize,
    node_names: Vec<u8>,
    outputs: Vec<u8>,
    value_info: u8,
    order: Vec<usize>,
}

fn recipe() -> impl Strategy<Value = Recipe> {
    (
        prop::collection::vec([1i64..6, 1i64..7, 1i64..7], 1..4),
        prop::collection::vec(any::<[u8; 8]>(), 1..24),
        0usize..NAME_STYLES.len(),
        prop::collection::vec(any::<u8>(), 48),
        prop::collection::vec(any::<u8>(), 1..4),
        any::<u8>(),
    )
        .prop_flat_map(|(inputs, steps, style, node_names, outputs, value_info)| {
            let n = steps.len() * 2 + 4;
            (
                Just((inputs, steps, style, node_names, outputs, value_info)),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
            )
        })
        .prop_map(
            |((inputs, steps, style, node_names, outputs, value_info), order)| Recipe {
                inputs,
                steps,
                style,
                node_names,
                outputs,
                value_info,
                order,
            },
        )
}

/// Build the model a recipe describes, with its values' shapes.
fn build(r: &Recipe) -> (ModelProto, HashMap<String, [i64; 4]>) {
    let mut b = Builder {
        nodes: Vec::new(),
        inits: Vec::new(),
        values: Vec::new(),
        shapes: HashMap::new(),
        style: r.style,
        node_names: r.node_names.clone(),
        count: 0,
        read: Vec::new(),
    };
    let mut inputs = Vec::new();
    for &[c, h, w] in &r.inputs {
        let name = b.fresh();
        inputs.push(ValueInfoProto {
            name: Some(name.clone()),
            r#type: Some(dims_type(&[1, c, h, w])),
            ..Default::default()
        });
        b.value(name, [1, c, h, w]);
    }
    for &s in &r.steps {
        b.step(s);
    }
    // Outputs: the last value, some others, and every value nothing reads (no dead ends).
    let mut outs: Vec<usize> = vec![b.values.len() - 1];
    for &o in &r.outputs {
        outs.push(o as usize % b.values.len());
    }
    outs.extend((r.inputs.len()..b.values.len()).filter(|&i| !b.read[i]));
    outs.sort();
    outs.dedup();
    let output: Vec<ValueInfoProto> = outs
        .iter()
        .map(|&i| ValueInfoProto {
            name: Some(b.values[i].0.clone()),
            r#type: Some(dims_type(&b.values[i].1)),
            ..Default::default()
        })
        .collect();
    let value_info: Vec<ValueInfoProto> = (r.inputs.len()..b.values.len())
        .filter(|i| (i + r.value_info as usize).is_multiple_of(3) && !outs.contains(i))
        .map(|i| ValueInfoProto {
            name: Some(b.values[i].0.clone()),
            r#type: Some(dims_type(&b.values[i].1)),
            ..Default::default()
        })
        .collect();
    // A random node order (import accepts any order; the file keeps it).
    let mut nodes: Vec<Option<NodeProto>> = b.nodes.into_iter().map(Some).collect();
    let mut ordered = Vec::new();
    for &i in &r.order {
        if let Some(n) = nodes.get_mut(i).and_then(Option::take) {
            ordered.push(n);
        }
    }
    ordered.extend(nodes.into_iter().flatten());
    let graph = GraphProto {
        node: ordered,
        name: Some(format!("{}g", NAME_STYLES[r.style])),
        initializer: b.inits,
        input: inputs,
        output,
        value_info,
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: Some(8),
        producer_name: Some("proptest".into()),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(graph),
        ..Default::default()
    };
    (model, b.shapes)
}

fn check_round_trip(r: &Recipe) -> Result<(), TestCaseError> {
    let (model, shapes) = build(r);
    let bytes = model.encode_to_vec();

    // In memory: import, infer, export.
    let decoded = onnx_safeify::io::load::decode_model(Bytes::from(bytes.clone()))
        .map_err(|e| TestCaseError::fail(format!("decode: {e}")))?;
    let imported = onnx_safeify::import::import_model(decoded, None)
        .map_err(|e| TestCaseError::fail(format!("import: {e}")))?;
    prop_assert_eq!(
        onnx_safeify::engine::check_invariants(&imported.graph),
        Ok(())
    );
    let facts = onnx_safeify::infer::infer_model(&imported, &Default::default());
    prop_assert!(
        facts.conflicts().is_empty(),
        "conflicts: {:?}",
        facts.conflicts()
    );
    let g = &imported.graph;
    for (i, v) in g.values.iter().enumerate() {
        if let Some(s) = shapes.get(&*v.name) {
            let id = onnx_safeify::ir::ValueId(i as u32);
            prop_assert_eq!(
                facts.info(id).dims_known(),
                Some(s.to_vec()),
                "inferred shape of '{}'",
                &v.name
            );
        }
    }
    let exported = onnx_safeify::export::export_model(&imported);
    prop_assert!(exported == model, "import → export changed the model");

    // Through files: load, save, decode with prost.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.onnx");
    let out = dir.path().join("out.onnx");
    std::fs::write(&src, &bytes).unwrap();
    let doc = onnx_safeify::load(&src).map_err(|e| TestCaseError::fail(format!("load: {e}")))?;
    onnx_safeify::save(&doc, &out).map_err(|e| TestCaseError::fail(format!("save: {e}")))?;
    let saved = std::fs::read(&out).unwrap();
    let back = ModelProto::decode(saved.as_slice()).unwrap();
    prop_assert!(back == model, "save → decode differs from the original");
    prop_assert!(
        saved == bytes,
        "the saved bytes differ from prost's encoding"
    );
    Ok(())
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn random_graphs_round_trip_proto_equal(r in recipe()) {
        check_round_trip(&r)?;
    }
}
