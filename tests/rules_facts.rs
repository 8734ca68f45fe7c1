//! Derived facts (depthwise, kernel, channels, work, bytes...), tensor tests and links on a
//! small hand-built graph whose shapes are given by a test implementation of `ValueFacts`,
//! and `DeclaredFacts` on declared inputs, initializers and `Constant` nodes.

use std::collections::{BTreeSet, HashSet};

use onnx_safeify::infer::{declared, Facts, TensorInfo};
use onnx_safeify::ir::{Attribute, Graph, Initializer, Node, NodeId, Origin, ValueId, ValueInfo};
use onnx_safeify::proto::{
    tensor_shape_proto::{dimension, Dimension},
    type_proto, AttributeProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use onnx_safeify::rules::{
    explain, find_matches, parse_target_str, FactDim, Opsets, Outcome, Target,
};
use onnx_safeify::tensor::dtype;

#[derive(Default)]
struct Builder {
    g: Graph,
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_string()),
        r#type: Some(7),
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.to_string()),
        r#type: Some(2),
        i: Some(v),
        ..Default::default()
    }
}

impl Builder {
    fn value(&mut self, name: &str, origin: Origin) -> ValueId {
        self.g.add_value(name.to_string(), origin)
    }
    fn init(&mut self, name: &str, dims: &[i64], t: i32, raw: Vec<u8>) -> ValueId {
        let v = self.value(name, Origin::Initializer);
        self.g.initializers.push(Initializer {
            value: v,
            tensor: onnx_safeify::ir::Tensor::from_proto(TensorProto {
                name: Some(name.to_string()),
                dims: dims.to_vec(),
                data_type: Some(t),
                raw_data: Some(raw.into()),
                ..Default::default()
            }),
        });
        v
    }
    fn node(
        &mut self,
        name: &str,
        op: &str,
        inputs: &[Option<ValueId>],
        outputs: &[&str],
        attrs: Vec<AttributeProto>,
    ) -> (NodeId, Vec<ValueId>) {
        let outs: Vec<ValueId> = outputs
            .iter()
            .map(|o| self.value(o, Origin::Unbound))
            .collect();
        let n = self.g.insert_node(
            Node {
                name: Some(name.to_string()),
                inputs: inputs.to_vec(),
                outputs: outs.iter().map(|&v| Some(v)).collect(),
                attributes: attrs.into_iter().map(Attribute::new).collect(),
                ..Node::new(op)
            },
            None,
        );
        (n, outs)
    }
}

/// Shapes and types handed out by the test, stated into `infer`'s own fact table.
struct Given {
    facts: Facts,
    constant: HashSet<ValueId>,
}

impl Default for Given {
    fn default() -> Self {
        Given {
            facts: Facts::unknown(0),
            constant: HashSet::new(),
        }
    }
}

impl Given {
    fn set(&mut self, v: ValueId, t: i32, dims: &[FactDim]) {
        let c = self.constant.contains(&v);
        self.facts
            .state(v, TensorInfo::new(Some(t), Some(dims.to_vec())), c);
    }
    fn finish(mut self) -> Facts {
        for v in self.constant.clone() {
            let info = self.facts.info(v).clone();
            self.facts.state(v, info, true);
        }
        self.facts
    }
}

fn k(d: i64) -> FactDim {
    FactDim::Known(d)
}

fn sym(s: &str) -> FactDim {
    FactDim::Sym(s.into())
}

struct Net {
    g: Graph,
    facts: Facts,
}

/// x[1,128,56,56] -> depthwise 3x3 Conv (output shape NOT given) -> Relu [given] ->
/// pointwise Conv 128->256 -> MaxPool 3x3/2 (output not given); plus a MatMul, a Gather with
/// computed int64 indices, and an Add on symbolic shapes.
fn net() -> Net {
    let mut b = Builder::default();
    let mut f = Given::default();
    let x = b.value("x", Origin::Input);
    let w_dw = b.init("w_dw", &[128, 1, 3, 3], dtype::FLOAT, vec![0; 128 * 9 * 4]);
    let w_pw = b.init(
        "w_pw",
        &[256, 128, 1, 1],
        dtype::FLOAT,
        vec![0; 256 * 128 * 4],
    );
    let (_, y1) = b.node(
        "dw",
        "Conv",
        &[Some(x), Some(w_dw)],
        &["y1"],
        vec![int("group", 128), ints("pads", &[1, 1, 1, 1])],
    );
    let (_, y2) = b.node("relu", "Relu", &[Some(y1[0])], &["y2"], vec![]);
    let (_, y3) = b.node("pw", "Conv", &[Some(y2[0]), Some(w_pw)], &["y3"], vec![]);
    let (_, _y4) = b.node(
        "pool",
        "MaxPool",
        &[Some(y3[0])],
        &["y4"],
        vec![ints("kernel_shape", &[3, 3]), ints("strides", &[2, 2])],
    );
    let a = b.value("a", Origin::Input);
    let bm = b.value("b", Origin::Input);
    let (_, mm) = b.node("mm", "MatMul", &[Some(a), Some(bm)], &["mm_out"], vec![]);
    let data = b.value("data", Origin::Input);
    let (_, idx) = b.node("argmax", "ArgMax", &[Some(mm[0])], &["idx"], vec![]);
    let (_, gathered) = b.node(
        "gather",
        "Gather",
        &[Some(data), Some(idx[0])],
        &["gathered"],
        vec![],
    );
    let p = b.value("p", Origin::Input);
    let q = b.value("q", Origin::Input);
    let (_, added) = b.node("add", "Add", &[Some(p), Some(q)], &["sum"], vec![]);

    let f32 = dtype::FLOAT;
    f.set(x, f32, &[k(1), k(128), k(56), k(56)]);
    f.set(w_dw, f32, &[k(128), k(1), k(3), k(3)]);
    f.set(w_pw, f32, &[k(256), k(128), k(1), k(1)]);
    f.facts
        .state(y1[0], TensorInfo::new(Some(f32), None), false);
    f.set(y2[0], f32, &[k(1), k(128), k(56), k(56)]);
    f.set(y3[0], f32, &[k(1), k(256), k(56), k(56)]);
    f.constant.extend([w_dw, w_pw]);
    f.set(a, f32, &[k(2), k(8), k(64), k(32)]);
    f.set(bm, f32, &[k(32), k(16)]);
    f.set(mm[0], f32, &[k(2), k(8), k(64), k(16)]);
    f.set(data, f32, &[k(100), k(64)]);
    f.set(idx[0], dtype::INT64, &[sym("n")]);
    f.set(gathered[0], f32, &[sym("n"), k(64)]);
    f.set(p, f32, &[sym("N"), k(256)]);
    f.set(q, f32, &[sym("N"), k(256)]);
    f.set(added[0], f32, &[sym("N"), FactDim::Unknown]);
    Net {
        g: b.g,
        facts: f.finish(),
    }
}

const PROBES: &str = "\
target: probes
rules:
  - {id: dw, why: w, evidence: [], action: cpu, match: {depthwise: true, grouped: true, channels: 128, out_channels: 128, kernel: 3, batch: 1, spatial: 3136}}
  - {id: dw-work, why: w, evidence: [], action: cpu, match: {op: Conv, work: {gt: 7.2e6, lt: 7.3e6}}}
  - {id: pw, why: w, evidence: [], action: cpu, match: {op: Conv, depthwise: false, grouped: false, channels: 128, out_channels: 256, kernel: 1}}
  - {id: pw-work, why: w, evidence: [], action: cpu, match: {op: Conv, work: 205520896}}
  - {id: pw-bytes, why: w, evidence: [], action: cpu, match: {op: Conv, bytes: 4947968}}
  - {id: any-bytes, why: w, evidence: [], action: cpu, match: {op: Conv, bytes: {gt: 0}}}
  - {id: mm-work, why: w, evidence: [], action: cpu, match: {op: MatMul, work: 1048576}}
  - {id: pool-work, why: w, evidence: [], action: cpu, match: {op: MaxPool, work: 1679616, kernel: 3}}
  - {id: no-kernel, why: w, evidence: [], action: cpu, match: {not: {kernel: {ge: 1}}}}
  - {id: dyn-idx, why: w, evidence: [], action: cpu, match: {op: Gather, input: {1: {dtype: int64, const: false, dims: [dynamic], static: false}}}}
  - {id: const-w, why: w, evidence: [], action: cpu, match: {op: Conv, input: {1: {const: true, initializer: true, static: true}}}}
  - {id: sym-add, why: w, evidence: [], action: cpu, match: {op: Add, input: {0: {dims: [{sym: N}, C]}, 1: {dims: [{sym: true}, 256]}}, output: {0: {dims: [N, ...]}}}}
  - {id: add-unknown-dim, why: w, evidence: [], action: cpu, match: {op: Add, output: {0: {dims: [_, {gt: 1}]}}}}
  - {id: relu-after-conv, why: w, evidence: [], action: cpu, match: {op: Conv, capture: c, followed_by: {op: Relu, via: 0, sole: true, capture: r}}}
  - {id: conv-before-pool, why: w, evidence: [], action: cpu, match: {op: MaxPool, preceded_by: {op: Conv, preceded_by: {op: Relu}}}}
  - {id: attr-default, why: w, evidence: [], action: cpu, match: {op: Conv, attr: {group: 1, auto_pad: NOTSET, pads: {exists: false}}}}
  - {id: attr-list, why: w, evidence: [], action: cpu, match: {op: MaxPool, attr: {kernel_shape: [3, 3], strides: {ge: 2}}}}
  - {id: any-all, why: w, evidence: [], action: cpu, match: {any: [{op: Relu}, {all: [{op: Add}, {batch: {gt: 0}}]}]}}
";

fn run(net: &Net, t: &Target) -> BTreeSet<(String, String)> {
    find_matches(t, &net.g, &net.facts, &Opsets::default())
        .into_iter()
        .map(|m| (m.rule_id, net.g.node(m.node).name().to_string()))
        .collect()
}

fn hits(all: &BTreeSet<(String, String)>, rule: &str) -> Vec<String> {
    all.iter()
        .filter(|(r, _)| r == rule)
        .map(|(_, n)| n.clone())
        .collect()
}

#[test]
fn derived_facts() {
    let net = net();
    let t = parse_target_str("probes.yaml", PROBES).unwrap_or_else(|e| panic!("{e}"));
    let all = run(&net, &t);
    assert_eq!(hits(&all, "dw"), ["dw"]);
    // The depthwise output shape is not given: the work uses the computed output size.
    assert_eq!(hits(&all, "dw-work"), ["dw"]);
    assert_eq!(hits(&all, "pw"), ["pw"]);
    assert_eq!(hits(&all, "pw-work"), ["pw"]);
    assert_eq!(hits(&all, "pw-bytes"), ["pw"]);
    // dw's output shape is unknown: its bytes are unknown, so only pw.
    assert_eq!(hits(&all, "any-bytes"), ["pw"]);
    assert_eq!(hits(&all, "mm-work"), ["mm"]);
    assert_eq!(hits(&all, "pool-work"), ["pool"]);
    assert_eq!(
        hits(&all, "no-kernel"),
        ["add", "argmax", "gather", "mm", "relu"]
    );
}

#[test]
fn tensor_tests_and_links() {
    let net = net();
    let t = parse_target_str("probes.yaml", PROBES).unwrap();
    let all = run(&net, &t);
    assert_eq!(hits(&all, "dyn-idx"), ["gather"]);
    assert_eq!(hits(&all, "const-w"), ["dw", "pw"]);
    assert_eq!(hits(&all, "sym-add"), ["add"]);
    assert!(hits(&all, "add-unknown-dim").is_empty());
    assert_eq!(hits(&all, "relu-after-conv"), ["dw"]);
    assert_eq!(hits(&all, "conv-before-pool"), ["pool"]);
    // `pads` is written on dw: only pw has no pads (group and auto_pad take defaults).
    assert_eq!(hits(&all, "attr-default"), ["pw"]);
    assert_eq!(hits(&all, "attr-list"), ["pool"]);
    assert!(hits(&all, "any-all").contains(&"relu".to_string()));
    // Add's batch is symbolic: unknown, so the `all` branch does not fire for it.
    assert!(!hits(&all, "any-all").contains(&"add".to_string()));

    let ms = find_matches(&t, &net.g, &net.facts, &Opsets::default());
    let m = ms.iter().find(|m| m.rule_id == "relu-after-conv").unwrap();
    assert_eq!(m.captures.len(), 2);
    assert_eq!(net.g.node(m.capture("r").unwrap()).op_type, "Relu");
}

#[test]
fn explain_says_what_is_missing() {
    let net = net();
    let t = parse_target_str("probes.yaml", PROBES).unwrap();
    let node = |name: &str| {
        *net.g
            .order
            .iter()
            .find(|&&n| net.g.node(n).name() == name)
            .unwrap()
    };
    let ex = |name: &str, rule: &str| {
        explain(&t, &net.g, &net.facts, &Opsets::default(), node(name))
            .into_iter()
            .find(|e| e.rule_id == rule)
            .unwrap()
    };
    let e = ex("dw", "any-bytes");
    assert_eq!(e.outcome, Outcome::Unknown);
    assert_eq!(
        e.reason.as_deref(),
        Some("bytes is unknown: output 0 shape is unknown")
    );
    assert_eq!(e.at.as_ref().unwrap().to_string(), "probes.yaml:8:74");
    let e = ex("pw", "dw");
    assert_eq!(e.outcome, Outcome::NoMatch);
    assert_eq!(
        e.reason.as_deref(),
        Some("depthwise is false (group is 1), needs true")
    );
    let e = ex("add", "add-unknown-dim");
    assert_eq!(e.outcome, Outcome::Unknown);
    assert_eq!(
        e.reason.as_deref(),
        Some("output 0 shape [N, ?]: dimension 1 is unknown")
    );
    let e = ex("add", "any-all");
    assert_eq!(e.outcome, Outcome::Unknown);
    assert!(
        e.reason
            .as_deref()
            .unwrap()
            .contains("batch is unknown: input 0 dimension 0 is symbolic (N)"),
        "{e}"
    );
    let e = ex("mm", "dw");
    assert_eq!(
        e.reason.as_deref(),
        Some("depthwise is false (MatMul is not a convolution), needs true")
    );
    let e = ex("gather", "pool-work");
    assert_eq!(e.reason.as_deref(), Some("op is Gather, needs MaxPool"));
    let e = ex("dw", "attr-default");
    assert_eq!(e.reason.as_deref(), Some("attribute group is 128, needs 1"));
    let e = ex("pool", "attr-default");
    assert_eq!(e.reason.as_deref(), Some("op is MaxPool, needs Conv"));
    let e = ex("relu", "relu-after-conv");
    assert_eq!(e.reason.as_deref(), Some("op is Relu, needs Conv"));
    let e = ex("pw", "relu-after-conv");
    assert_eq!(
        e.reason.as_deref(),
        Some("no consumer matches `followed_by` (consumer 'pool' (MaxPool): op is MaxPool, needs Relu)")
    );
}

fn tensor_type(t: i32, dims: &[Option<&str>]) -> TypeProto {
    TypeProto {
        denotation: None,
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(t),
            shape: Some(TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|d| Dimension {
                        denotation: None,
                        value: d.map(|s| match s.parse::<i64>() {
                            Ok(n) => dimension::Value::DimValue(n),
                            Err(_) => dimension::Value::DimParam(s.to_string()),
                        }),
                    })
                    .collect(),
            }),
        })),
    }
}

#[test]
fn declared_facts() {
    let mut b = Builder::default();
    let x = b.value("x", Origin::Input);
    let shape = b.init(
        "shape",
        &[2],
        dtype::INT64,
        [7i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
    let small = b.init("small", &[3], dtype::INT8, vec![1, 0xff, 3]);
    // An input with a default value (IR < 4 style): not a constant.
    let dflt = b.value("dflt", Origin::Input);
    b.g.initializers.push(Initializer {
        value: dflt,
        tensor: TensorProto {
            dims: vec![1],
            data_type: Some(dtype::INT64),
            int64_data: vec![5],
            ..Default::default()
        }
        .into(),
    });
    let (_, c) = b.node(
        "c",
        "Constant",
        &[],
        &["c_out"],
        vec![ints("value_ints", &[4, 5, 6])],
    );
    let (_, r) = b.node("r", "Reshape", &[Some(x), Some(shape)], &["r_out"], vec![]);
    for (v, ty) in [
        (x, tensor_type(dtype::FLOAT, &[Some("N"), Some("14"), None])),
        (dflt, tensor_type(dtype::INT64, &[Some("1")])),
    ] {
        b.g.inputs.push(ValueInfo {
            value: v,
            proto: ValueInfoProto {
                name: None,
                r#type: Some(ty),
                ..Default::default()
            },
        });
    }
    b.g.outputs.push(ValueInfo {
        value: r[0],
        proto: ValueInfoProto {
            r#type: Some(tensor_type(dtype::FLOAT, &[Some("N"), Some("")])),
            ..Default::default()
        },
    });
    let f = declared(&b.g);
    assert_eq!(f.dtype(x), Some(dtype::FLOAT));
    assert_eq!(
        f.shape(x).map(<[_]>::to_vec),
        Some(vec![sym("N"), k(14), FactDim::Unknown])
    );
    assert!(!f.is_constant(x));
    assert_eq!(f.const_ints(shape).map(<[_]>::to_vec), Some(vec![7, -1]));
    assert!(f.is_constant(shape));
    assert_eq!(f.shape(shape).map(<[_]>::to_vec), Some(vec![k(2)]));
    assert_eq!(f.const_ints(small).map(<[_]>::to_vec), Some(vec![1, -1, 3]));
    assert!(!f.is_constant(dflt));
    assert_eq!(f.const_ints(dflt).map(<[_]>::to_vec), None);
    assert!(f.is_constant(c[0]));
    assert_eq!(f.const_ints(c[0]).map(<[_]>::to_vec), Some(vec![4, 5, 6]));
    assert_eq!(f.shape(c[0]).map(<[_]>::to_vec), Some(vec![k(3)]));
    assert_eq!(f.dtype(c[0]), Some(dtype::INT64));
    assert_eq!(
        f.shape(r[0]).map(<[_]>::to_vec),
        Some(vec![sym("N"), FactDim::Unknown])
    );
    assert!(!f.is_constant(r[0]));
}
