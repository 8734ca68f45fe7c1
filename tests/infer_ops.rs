//! Shape inference on small hand-built graphs: symbolic dimensions, the shape-computation
//! chains exporters write, opset differences, declarations, and malformed models (which
//! must give unknowns, never a panic).

use onnx_safeify::infer::{infer_model, Dim, InferOptions, TensorInfo};
use onnx_safeify::ir::{Model, ValueId};
use onnx_safeify::proto::{
    attribute_proto::AttributeType, tensor_shape_proto::dimension, tensor_shape_proto::Dimension,
    type_proto, AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};

const F: i32 = 1;
const I64: i32 = 7;

/// A declared dimension.
#[derive(Clone, Copy)]
enum D {
    K(i64),
    S(&'static str),
    U,
}
use D::*;

fn vi(name: &str, elem: i32, dims: Option<&[D]>) -> ValueInfoProto {
    let shape = dims.map(|d| TensorShapeProto {
        dim: d
            .iter()
            .map(|x| Dimension {
                value: match x {
                    K(v) => Some(dimension::Value::DimValue(*v)),
                    S(s) => Some(dimension::Value::DimParam(s.to_string())),
                    U => None,
                },
                denotation: None,
            })
            .collect(),
    });
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            denotation: None,
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape,
            })),
        }),
        ..Default::default()
    }
}

fn out(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        ..Default::default()
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
fn aints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(AttributeType::Ints as i32),
        ..Default::default()
    }
}
fn afloats(name: &str, v: &[f32]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        floats: v.to_vec(),
        r#type: Some(AttributeType::Floats as i32),
        ..Default::default()
    }
}
fn astr(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(bytes::Bytes::from(v.to_string())),
        r#type: Some(AttributeType::String as i32),
        ..Default::default()
    }
}
fn at(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        t: Some(Box::new(t)),
        r#type: Some(AttributeType::Tensor as i32),
        ..Default::default()
    }
}

fn t_i64(name: &str, dims: &[i64], v: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(I64),
        int64_data: v.to_vec(),
        ..Default::default()
    }
}
fn t_f32(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(F),
        float_data: v.to_vec(),
        ..Default::default()
    }
}

fn node(op: &str, ins: &[&str], outs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: outs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

struct G {
    opset: i64,
    inputs: Vec<ValueInfoProto>,
    inits: Vec<TensorProto>,
    nodes: Vec<NodeProto>,
    outputs: Vec<ValueInfoProto>,
    value_info: Vec<ValueInfoProto>,
    domains: Vec<(&'static str, i64)>,
}

impl G {
    fn new(opset: i64) -> G {
        G {
            opset,
            inputs: vec![],
            inits: vec![],
            nodes: vec![],
            outputs: vec![],
            value_info: vec![],
            domains: vec![],
        }
    }
    fn input(mut self, name: &str, elem: i32, dims: &[D]) -> G {
        self.inputs.push(vi(name, elem, Some(dims)));
        self
    }
    fn init(mut self, t: TensorProto) -> G {
        self.inits.push(t);
        self
    }
    fn node(mut self, n: NodeProto) -> G {
        self.nodes.push(n);
        self
    }
    fn output(mut self, name: &str) -> G {
        self.outputs.push(out(name));
        self
    }
    fn build(self) -> Model {
        let mut opsets = vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(self.opset),
        }];
        for (d, v) in &self.domains {
            opsets.push(OperatorSetIdProto {
                domain: Some(d.to_string()),
                version: Some(*v),
            });
        }
        let p = ModelProto {
            ir_version: Some(8),
            opset_import: opsets,
            graph: Some(GraphProto {
                name: Some("g".into()),
                node: self.nodes,
                initializer: self.inits,
                input: self.inputs,
                output: self.outputs,
                value_info: self.value_info,
                ..Default::default()
            }),
            ..Default::default()
        };
        onnx_safeify::import::import_model(p, None).expect("import")
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

fn info(m: &Model, name: &str) -> TensorInfo {
    infer_model(m, &InferOptions::default())
        .info(id(m, name))
        .clone()
}

fn sym(s: &str) -> Dim {
    Dim::Sym(s.into())
}
fn k(v: i64) -> Dim {
    Dim::Known(v)
}

#[test]
fn exporter_shape_chain_keeps_the_batch_symbolic() {
    // Shape -> Gather(0) -> Unsqueeze -> Concat([N], [64], [-1]) -> Reshape
    let m = G::new(13)
        .input("x", F, &[S("N"), K(16), K(8), K(8)])
        .init(t_i64("zero", &[], &[0]))
        .init(t_i64("ax0", &[1], &[0]))
        .init(t_i64("c64", &[1], &[64]))
        .init(t_i64("m1", &[1], &[-1]))
        .node(node("Shape", &["x"], &["s"], vec![]))
        .node(node("Gather", &["s", "zero"], &["n"], vec![ai("axis", 0)]))
        .node(node("Unsqueeze", &["n", "ax0"], &["n1"], vec![]))
        .node(node(
            "Concat",
            &["n1", "c64", "m1"],
            &["target"],
            vec![ai("axis", 0)],
        ))
        .node(node("Reshape", &["x", "target"], &["y"], vec![]))
        .output("y")
        .build();
    let facts = infer_model(&m, &InferOptions::default());
    assert_eq!(
        facts.shape_data(id(&m, "target")),
        Some(&[sym("N"), k(64), k(-1)][..])
    );
    assert_eq!(
        facts.const_value(id(&m, "target")),
        None,
        "symbolic, not constant"
    );
    assert_eq!(
        facts.info(id(&m, "y")).shape,
        Some(vec![sym("N"), k(64), k(16)].into())
    );
    assert_eq!(facts.info(id(&m, "y")).dtype, Some(F));
    assert!(facts.is_constant(id(&m, "c64")));
    assert!(!facts.is_constant(id(&m, "target")));
    // With N fixed, the whole chain folds to a constant.
    let facts = infer_model(
        &m,
        &InferOptions {
            dims: [("N".to_string(), 3)].into_iter().collect(),
            ..Default::default()
        },
    );
    let c = facts.const_value(id(&m, "target")).expect("folded");
    assert_eq!(c.ints.as_deref(), Some(&[3, 64, -1][..]));
    assert_eq!(c.dims, vec![3]);
    assert_eq!(facts.info(id(&m, "y")).dims_known(), Some(vec![3, 64, 16]));
}

#[test]
fn paddle_style_cast_slice_concat_chain() {
    // Shape -> Cast(int32) -> Slice[0:1] -> Cast(int64) -> Concat(.., [200]) -> Reshape
    let m = G::new(11)
        .input("x", F, &[U, K(200), K(1), K(1)])
        .init(t_i64("s0", &[1], &[0]))
        .init(t_i64("s1", &[1], &[1]))
        .init(t_i64("c200", &[1], &[200]))
        .node(node("Shape", &["x"], &["s"], vec![]))
        .node(node("Cast", &["s"], &["s32"], vec![ai("to", 6)]))
        .node(node("Slice", &["s32", "s0", "s1", "s0"], &["b"], vec![]))
        .node(node("Cast", &["b"], &["b64"], vec![ai("to", 7)]))
        .node(node(
            "Concat",
            &["b64", "c200"],
            &["t"],
            vec![ai("axis", -1)],
        ))
        .node(node("Reshape", &["x", "t"], &["y"], vec![]))
        .output("y")
        .build();
    let y = info(&m, "y");
    // The batch is unknown (declared -1 / no name), 200 is solved anyway.
    assert_eq!(y.shape, Some(vec![Dim::Unknown, k(200)].into()));
}

#[test]
fn reshape_cancels_symbols_and_handles_zero() {
    let m = G::new(14)
        .input("x", F, &[S("B"), S("T"), K(12)])
        .init(t_i64("t1", &[4], &[0, 0, 3, -1]))
        .init(t_i64("t2", &[2], &[-1, 12]))
        .node(node("Reshape", &["x", "t1"], &["y1"], vec![]))
        .node(node("Reshape", &["x", "t2"], &["y2"], vec![]))
        .output("y1")
        .output("y2")
        .build();
    assert_eq!(
        info(&m, "y1").shape,
        Some(vec![sym("B"), sym("T"), k(3), k(4)].into())
    );
    // -1 = B*T: kept as the product of the names.
    assert_eq!(info(&m, "y2").shape, Some(vec![sym("B*T"), k(12)].into()));
}

#[test]
fn broadcast_and_conv_keep_symbols() {
    let m = G::new(17)
        .input("x", F, &[S("N"), K(3), S("H"), S("W")])
        .init(t_f32("w", &[8, 3, 3, 3], &[0.0; 216]))
        .init(t_f32("w2", &[8, 8, 3, 3], &[0.0; 576]))
        .init(t_f32("bias", &[8, 1, 1], &[0.0; 8]))
        .node(node(
            "Conv",
            &["x", "w"],
            &["c"],
            vec![aints("pads", &[1, 1, 1, 1])],
        ))
        .node(node("Add", &["c", "bias"], &["a"], vec![]))
        .node(node(
            "Conv",
            &["a", "w2"],
            &["s2"],
            vec![aints("strides", &[2, 2]), aints("pads", &[1, 1, 1, 1])],
        ))
        .node(node(
            "Conv",
            &["a", "w2"],
            &["same"],
            vec![astr("auto_pad", "SAME_UPPER")],
        ))
        .output("s2")
        .output("same")
        .build();
    assert_eq!(
        info(&m, "a").shape,
        Some(vec![sym("N"), k(8), sym("H"), sym("W")].into())
    );
    // Stride 2 on a symbolic size: floor((H + 2 - 3) / 2) + 1, kept as an expression.
    assert_eq!(
        info(&m, "s2").shape,
        Some(
            vec![
                sym("N"),
                k(8),
                sym("floordiv(H + 1, 2)"),
                sym("floordiv(W + 1, 2)")
            ]
            .into()
        )
    );
    assert_eq!(
        info(&m, "same").shape,
        Some(vec![sym("N"), k(8), sym("H"), sym("W")].into())
    );
}

#[test]
fn opset_differences() {
    // Squeeze / Unsqueeze: attribute before 13, input after.
    let m11 = G::new(11)
        .input("x", F, &[K(1), K(3), K(1)])
        .node(node("Squeeze", &["x"], &["y"], vec![aints("axes", &[0])]))
        .node(node(
            "Unsqueeze",
            &["y"],
            &["z"],
            vec![aints("axes", &[-1])],
        ))
        .output("z")
        .build();
    assert_eq!(info(&m11, "y").dims_known(), Some(vec![3, 1]));
    assert_eq!(info(&m11, "z").dims_known(), Some(vec![3, 1, 1]));
    let m13 = G::new(13)
        .input("x", F, &[K(1), K(3), K(1)])
        .init(t_i64("ax", &[1], &[2]))
        .node(node("Squeeze", &["x", "ax"], &["y"], vec![]))
        .node(node("Unsqueeze", &["y", "ax"], &["z"], vec![]))
        .output("z")
        .build();
    assert_eq!(info(&m13, "y").dims_known(), Some(vec![1, 3]));
    assert_eq!(info(&m13, "z").dims_known(), Some(vec![1, 3, 1]));
    // Split: attribute (11) vs input (13), num_outputs (18).
    let s11 = G::new(11)
        .input("x", F, &[K(10), K(2)])
        .node(node(
            "Split",
            &["x"],
            &["a", "b"],
            vec![aints("split", &[3, 7])],
        ))
        .output("a")
        .build();
    assert_eq!(info(&s11, "b").dims_known(), Some(vec![7, 2]));
    let s13 = G::new(13)
        .input("x", F, &[K(10), K(2)])
        .init(t_i64("sp", &[2], &[4, 6]))
        .node(node("Split", &["x", "sp"], &["a", "b"], vec![]))
        .output("a")
        .build();
    assert_eq!(info(&s13, "a").dims_known(), Some(vec![4, 2]));
    let s18 = G::new(18)
        .input("x", F, &[K(10), K(2)])
        .node(node(
            "Split",
            &["x"],
            &["a", "b", "c"],
            vec![ai("num_outputs", 3)],
        ))
        .output("a")
        .build();
    assert_eq!(info(&s18, "a").dims_known(), Some(vec![4, 2]));
    assert_eq!(info(&s18, "c").dims_known(), Some(vec![2, 2]));
    // Resize: scales at input 1 in opset 10, input 2 after.
    let r10 = G::new(10)
        .input("x", F, &[S("N"), K(3), K(5), K(5)])
        .init(t_f32("sc", &[4], &[1.0, 1.0, 2.0, 0.5]))
        .node(node("Resize", &["x", "sc"], &["y"], vec![]))
        .output("y")
        .build();
    assert_eq!(
        info(&r10, "y").shape,
        Some(vec![sym("N"), k(3), k(10), k(2)].into())
    );
    let r13 = G::new(13)
        .input("x", F, &[S("N"), K(3), K(5), K(5)])
        .init(t_f32("sc", &[4], &[1.0, 1.0, 2.0, 0.5]))
        .node(node("Resize", &["x", "", "sc"], &["y"], vec![]))
        .output("y")
        .build();
    assert_eq!(
        info(&r13, "y").shape,
        Some(vec![sym("N"), k(3), k(10), k(2)].into())
    );
    let sizes = G::new(13)
        .input("x", F, &[S("N"), K(3), K(5), K(5)])
        .init(t_i64("sz", &[4], &[2, 3, 7, 9]))
        .node(node("Resize", &["x", "", "", "sz"], &["y"], vec![]))
        .output("y")
        .build();
    assert_eq!(info(&sizes, "y").dims_known(), Some(vec![2, 3, 7, 9]));
    // Upsample: attribute (7) vs input (9).
    let u7 = G::new(7)
        .input("x", F, &[K(1), K(1), K(2), K(3)])
        .node(node(
            "Upsample",
            &["x"],
            &["y"],
            vec![afloats("scales", &[1.0, 1.0, 2.0, 3.0])],
        ))
        .output("y")
        .build();
    assert_eq!(info(&u7, "y").dims_known(), Some(vec![1, 1, 4, 9]));
    let u9 = G::new(9)
        .input("x", F, &[K(1), K(1), K(2), K(3)])
        .init(t_f32("sc", &[4], &[1.0, 1.0, 2.0, 3.0]))
        .node(node("Upsample", &["x", "sc"], &["y"], vec![]))
        .output("y")
        .build();
    assert_eq!(info(&u9, "y").dims_known(), Some(vec![1, 1, 4, 9]));
}

#[test]
fn declarations_win_and_conflicts_are_reported() {
    let mut g = G::new(13)
        .input("x", F, &[K(2), K(3)])
        .node(node("Relu", &["x"], &["y"], vec![]))
        .node(node("Relu", &["y"], &["z"], vec![]));
    g.value_info.push(vi("y", F, Some(&[K(2), K(4)])));
    g.outputs.push(vi("z", F, Some(&[S("A"), U])));
    let m = g.build();
    let facts = infer_model(&m, &InferOptions::default());
    // The declared 4 is kept, and the disagreement recorded.
    assert_eq!(facts.info(id(&m, "y")).dims_known(), Some(vec![2, 4]));
    assert_eq!(facts.conflicts().len(), 1);
    assert_eq!(facts.conflicts()[0].value, id(&m, "y"));
    // Inference refines a declared name / unknown.
    assert_eq!(facts.info(id(&m, "z")).dims_known(), Some(vec![2, 4]));
    // Outputs' declarations can be ignored.
    let facts = infer_model(
        &m,
        &InferOptions {
            ignore_output_decls: true,
            ..Default::default()
        },
    );
    assert_eq!(facts.info(id(&m, "z")).dims_known(), Some(vec![2, 4]));
}

#[test]
fn constants_and_folding() {
    let m = G::new(13)
        .input("x", F, &[K(4), K(6)])
        .node(node(
            "Constant",
            &[],
            &["c"],
            vec![at("value", t_i64("", &[2], &[3, 8]))],
        ))
        .node(node(
            "Constant",
            &[],
            &["big"],
            vec![at("value", t_f32("", &[5000], &vec![0.5; 5000]))],
        ))
        .node(node(
            "ConstantOfShape",
            &["c"],
            &["z"],
            vec![at("value", t_i64("", &[1], &[7]))],
        ))
        .node(node("Reshape", &["x", "c"], &["y"], vec![]))
        .node(node("Size", &["x"], &["n"], vec![]))
        .node(node("Range", &["c0", "n", "c1"], &["r"], vec![]))
        .init(t_i64("c0", &[], &[0]))
        .init(t_i64("c1", &[], &[5]))
        .output("y")
        .output("r")
        .build();
    let facts = infer_model(&m, &InferOptions::default());
    assert!(facts.is_constant(id(&m, "c")));
    assert!(
        facts.is_constant(id(&m, "big")),
        "a large Constant is constant"
    );
    assert!(
        facts.const_value(id(&m, "big")).is_none(),
        "but not decoded"
    );
    assert_eq!(facts.info(id(&m, "big")).dims_known(), Some(vec![5000]));
    let z = facts
        .const_value(id(&m, "z"))
        .expect("ConstantOfShape folds");
    assert_eq!((z.dtype, z.dims.clone()), (I64, vec![3, 8]));
    assert!(z.ints.as_ref().unwrap().iter().all(|&v| v == 7));
    assert_eq!(facts.info(id(&m, "y")).dims_known(), Some(vec![3, 8]));
    let n = facts.const_value(id(&m, "n")).expect("Size folds");
    assert_eq!(n.ints.as_deref(), Some(&[24][..]));
    let r = facts.const_value(id(&m, "r")).expect("Range folds");
    assert_eq!(r.ints.as_deref(), Some(&[0, 5, 10, 15, 20][..]));
}

/// A float tensor of more than four elements in `raw_data`: contents decoded on first use.
fn t_f32_raw(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(F),
        raw_data: Some(
            v.iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        ),
        ..Default::default()
    }
}

#[test]
fn deferred_float_contents_keep_the_tensors_dims() {
    let w: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
    let mut g = G::new(13)
        .input("x", F, &[K(2), K(3)])
        .init(t_f32_raw("w", &[2, 3], &w))
        .init(t_f32_raw("v", &[2, 3], &w))
        .node(node(
            "Constant",
            &[],
            &["c"],
            vec![at("value", t_f32_raw("", &[3, 2], &w))],
        ))
        .node(node("Add", &["x", "w"], &["y"], vec![]))
        .node(node("Add", &["y", "v"], &["z"], vec![]))
        .node(node("Reshape", &["c", "s"], &["r"], vec![]))
        .init(t_i64("s", &[2], &[2, 3]))
        .output("z")
        .output("r");
    // A declaration of `v` that its tensor contradicts (the declaration is kept).
    g.value_info.push(vi("v", F, Some(&[K(3), K(2)])));
    let m = g.build();
    let facts = infer_model(&m, &InferOptions::default());
    let w_ = facts.const_value(id(&m, "w")).expect("w decodes");
    assert_eq!(
        (w_.dims.clone(), w_.floats.clone()),
        (vec![2, 3], Some(w.iter().map(|&x| f64::from(x)).collect()))
    );
    // The declared dims are the value's; its contents keep the tensor's.
    assert_eq!(facts.info(id(&m, "v")).dims_known(), Some(vec![3, 2]));
    let v_ = facts.const_value(id(&m, "v")).expect("v decodes");
    assert_eq!(v_.dims, vec![2, 3]);
    assert_eq!(v_.floats.as_ref().map(Vec::len), Some(6));
    let c = facts
        .const_value(id(&m, "c"))
        .expect("a Constant's value decodes");
    assert_eq!(c.dims, vec![3, 2]);
    assert_eq!(c.floats.as_ref().map(|f| f[5]), Some(2.5));
    // Asked twice, the same contents.
    assert_eq!(facts.const_value(id(&m, "c")), Some(c));
}

#[test]
fn contrib_and_nchwc() {
    let mut g = G::new(12)
        .input("x", F, &[S("N"), K(8), K(10), K(10)])
        .init(t_f32("w", &[16, 8, 3, 3], &vec![0.0; 1152]))
        .node(NodeProto {
            domain: Some("com.microsoft".into()),
            ..node(
                "FusedConv",
                &["x", "w"],
                &["y"],
                vec![aints("pads", &[1, 1, 1, 1]), astr("activation", "Relu")],
            )
        })
        .node(NodeProto {
            domain: Some("com.microsoft.nchwc".into()),
            ..node(
                "Conv",
                &["x", "w"],
                &["b"],
                vec![aints("strides", &[2, 2]), aints("pads", &[1, 1, 1, 1])],
            )
        })
        .node(NodeProto {
            domain: Some("com.microsoft.nchwc".into()),
            ..node("ReorderOutput", &["b"], &["o"], vec![ai("channels", 12)])
        })
        .node(NodeProto {
            domain: Some("com.microsoft.nchwc".into()),
            ..node("ReorderInput", &["o"], &["ri"], vec![])
        })
        .output("y")
        .output("ri");
    g.domains = vec![("com.microsoft", 1), ("com.microsoft.nchwc", 1)];
    let m = g.build();
    assert_eq!(
        info(&m, "y").shape,
        Some(vec![sym("N"), k(16), k(10), k(10)].into())
    );
    assert_eq!(
        info(&m, "b").shape,
        Some(vec![sym("N"), k(16), k(5), k(5)].into())
    );
    assert_eq!(
        info(&m, "o").shape,
        Some(vec![sym("N"), k(12), k(5), k(5)].into())
    );
    // 16 written for 12 logical channels: blocks of 8 and of 16 both explain it, so the
    // block size is not pinned down and the padded count of the reorder stays unknown.
    assert_eq!(
        info(&m, "ri").shape,
        Some(vec![sym("N"), Dim::Unknown, k(5), k(5)].into())
    );
}

/// Facts extended to nodes a change added (the identities of a barrier cut) agree with a whole
/// inference of the changed graph, the NCHWc layout and the marks of use included: a cut of a
/// blocked tensor holds a blocked tensor too, and it is read.
#[test]
fn facts_extended_to_new_nodes_agree_with_a_whole_inference() {
    use onnx_safeify::rewrite::{PValue, Patch};
    let nchwc = || Some("com.microsoft.nchwc".to_string());
    let mut g = G::new(12)
        .input("x", F, &[K(1), K(8), K(10), K(10)])
        .init(t_f32("w", &[16, 8, 3, 3], &vec![0.0; 1152]))
        .node(NodeProto {
            domain: nchwc(),
            ..node(
                "Conv",
                &["x", "w"],
                &["b"],
                vec![aints("pads", &[1, 1, 1, 1])],
            )
        })
        .node(node("Relu", &["b"], &["r"], vec![]))
        .node(NodeProto {
            domain: nchwc(),
            ..node("ReorderOutput", &["r"], &["o"], vec![ai("channels", 16)])
        })
        .output("o");
    g.domains = vec![("com.microsoft.nchwc", 1)];
    let mut m = g.build();
    let opts = InferOptions::default();
    let mut facts = infer_model(&m, &opts);
    let r = id(&m, "r");
    assert!(facts.is_blocked(r));
    // The cut: Max(r, r), placed before the reorder, which is re-pointed to it.
    let reorder = *m
        .graph
        .order
        .iter()
        .find(|&&n| m.graph.node(n).op_type == "ReorderOutput")
        .unwrap();
    let first_new = m.graph.values.len();
    let mut p = Patch::new("cut", "test", Some(reorder));
    let cut = p.op("Max", &[PValue::Existing(r), PValue::Existing(r)], &[]);
    p.repoint.push((reorder, 0, cut));
    p.apply(&mut m.graph).expect("apply");
    assert!(facts.extend_with_new_nodes(&m, &m.graph, &opts, first_new));
    let whole = infer_model(&m, &opts);
    let cut = ValueId(first_new as u32);
    assert!(
        whole.is_blocked(cut),
        "the cut of a blocked tensor is blocked"
    );
    for (i, v) in m.graph.values.iter().enumerate() {
        let id = ValueId(i as u32);
        assert_eq!(facts.info(id), whole.info(id), "{}", v.name);
        assert_eq!(facts.is_blocked(id), whole.is_blocked(id), "{}", v.name);
        assert_eq!(facts.is_used(id), whole.is_used(id), "{}", v.name);
    }
}

/// Facts extended past patches that add nodes and initializers and replace a value (an op
/// unfused, as a split or an unfusing rule patches) agree with a whole inference of the
/// patched graph, but for the replaced value, which no node produces or reads any more (its
/// facts, and its mark of use, are kept as they were: an over-approximation of use). A
/// replacement whose facts differ from the value it replaces is refused (`false`: the caller
/// infers the whole graph).
#[test]
fn facts_extended_past_a_replacement_agree_with_a_whole_inference() {
    use onnx_safeify::rewrite::{AttrValue, PValue, Patch};
    use onnx_safeify::tensor::dtype::FLOAT;
    let build = || {
        G::new(13)
            .input("x", F, &[K(1), K(8), K(10), K(10)])
            .node(node("Relu", &["x"], &["r"], vec![]))
            .node(node("HardSwish", &["r"], &["h"], vec![]))
            .node(node("Relu", &["h"], &["o"], vec![]))
            .output("o")
            .build()
    };
    let scalar = |dims: &[i64], n: usize| onnx_safeify::proto::TensorProto {
        data_type: Some(FLOAT),
        dims: dims.to_vec(),
        raw_data: Some(bytes::Bytes::from(1.0f32.to_le_bytes().repeat(n))),
        ..Default::default()
    };
    // HardSwish(r) = r * HardSigmoid(r) (alpha 1/6, beta 0.5), times a new constant of `dims`.
    let patch = |m: &mut Model, dims: &[i64], n: usize| {
        let hs = *m
            .graph
            .order
            .iter()
            .find(|&&n| m.graph.node(n).op_type == "HardSwish")
            .unwrap();
        let (r, h) = (id(m, "r"), id(m, "h"));
        let mut p = Patch::new("unfuse", "test", Some(hs));
        let s = p.op(
            "HardSigmoid",
            &[PValue::Existing(r)],
            &[
                ("alpha", AttrValue::Float(1.0 / 6.0)),
                ("beta", AttrValue::Float(0.5)),
            ],
        );
        let y = p.op("Mul", &[PValue::Existing(r), s], &[]);
        let c = p.initializer("one", scalar(dims, n));
        let out = p.op("Mul", &[y, c], &[]);
        p.replace(h, out);
        p.remove(hs);
        let (_, replaced) = p.apply_with_map(&mut m.graph).expect("apply");
        replaced
    };
    let opts = InferOptions::default();

    let mut m = build();
    let mut facts = infer_model(&m, &opts);
    let first_new = m.graph.values.len();
    let h = id(&m, "h");
    let replaced = patch(&mut m, &[1], 1);
    assert!(facts.extend_after_patches(&m, &m.graph, &opts, first_new, &replaced));
    let whole = infer_model(&m, &opts);
    assert!(
        m.graph.values.len() > first_new + 3,
        "new values to compare"
    );
    for (i, v) in m.graph.values.iter().enumerate() {
        let id = ValueId(i as u32);
        if id == h {
            continue;
        }
        assert_eq!(facts.info(id), whole.info(id), "{}", v.name);
        assert_eq!(facts.is_constant(id), whole.is_constant(id), "{}", v.name);
        assert_eq!(facts.const_value(id), whole.const_value(id), "{}", v.name);
        assert_eq!(facts.is_used(id), whole.is_used(id), "{}", v.name);
    }
    assert!(facts.is_used(h) && !whole.is_used(h));

    // A constant of [2, 8, 1, 1] broadcasts the replacement to [2, 8, 10, 10]: refused.
    let mut m = build();
    let mut facts = infer_model(&m, &opts);
    let first_new = m.graph.values.len();
    let replaced = patch(&mut m, &[2, 8, 1, 1], 16);
    assert!(!facts.extend_after_patches(&m, &m.graph, &opts, first_new, &replaced));
}

#[test]
fn malformed_models_give_unknowns_not_panics() {
    let big = i64::MAX;
    let m = G::new(13)
        .input("x", F, &[K(1), K(3), K(2), K(2)])
        .input("h", F, &[K(big), K(big), K(big)])
        .init(t_f32("w", &[4, 3, 5, 5], &vec![0.0; 300]))
        .init(t_i64("huge", &[3], &[big, big, -1]))
        .init(t_i64("neg", &[2], &[-7, -9]))
        .init(t_i64("sl", &[1], &[i64::MIN]))
        .init(t_i64("el", &[1], &[i64::MAX]))
        .init(t_i64("st0", &[1], &[0]))
        .init(t_i64("gidx", &[1], &[99]))
        .init(t_f32("nan", &[4], &[f32::NAN, f32::INFINITY, -1.0, 1e30]))
        // Kernel bigger than the input.
        .node(node("Conv", &["x", "w"], &["c1"], vec![]))
        // Negative pads.
        .node(node(
            "Conv",
            &["x", "w"],
            &["c2"],
            vec![aints("pads", &[-9, -9, -9, -9])],
        ))
        // Zero / negative strides and dilations.
        .node(node(
            "Conv",
            &["x", "w"],
            &["c3"],
            vec![aints("strides", &[0, -1]), aints("dilations", &[big, big])],
        ))
        .node(node(
            "MaxPool",
            &["x"],
            &["p1"],
            vec![
                aints("kernel_shape", &[big, big]),
                ai("ceil_mode", 1),
                aints("strides", &[big, 1]),
            ],
        ))
        .node(node(
            "ConvTranspose",
            &["x", "w"],
            &["ct"],
            vec![
                aints("strides", &[big, big]),
                aints("output_padding", &[big, big]),
            ],
        ))
        // Absurd reshape targets and overflowing products.
        .node(node("Reshape", &["h", "huge"], &["r1"], vec![]))
        .node(node("Reshape", &["x", "neg"], &["r2"], vec![]))
        .node(node("Flatten", &["h"], &["f1"], vec![ai("axis", big)]))
        .node(node(
            "Slice",
            &["h", "sl", "el", "st0", "sl"],
            &["s1"],
            vec![],
        ))
        .node(node(
            "Slice",
            &["x", "el", "sl", "st0", "sl"],
            &["s2"],
            vec![],
        ))
        .node(node(
            "Gather",
            &["x", "gidx"],
            &["g1"],
            vec![ai("axis", big)],
        ))
        .node(node(
            "Transpose",
            &["x"],
            &["t1"],
            vec![aints("perm", &[0, 0, 5, big])],
        ))
        .node(node(
            "Concat",
            &["x", "h"],
            &["cc"],
            vec![ai("axis", i64::MIN)],
        ))
        .node(node("Resize", &["x", "", "nan"], &["rz"], vec![]))
        .node(node("Range", &["sl", "el", "st0"], &["rg"], vec![]))
        .node(node("Tile", &["h", "huge"], &["tl"], vec![]))
        .node(node("Expand", &["x", "huge"], &["ex"], vec![]))
        .node(node("ConstantOfShape", &["huge"], &["cos"], vec![]))
        .node(node("Mul", &["h", "h"], &["mh"], vec![]))
        .node(node("Split", &["x"], &[], vec![]))
        .node(node("Unsqueeze", &["x", "huge"], &["u1"], vec![]))
        .node(node("Pad", &["h", "huge"], &["pd"], vec![]))
        .node(node(
            "Einsum",
            &["x", "h"],
            &["es"],
            vec![astr("equation", "ab...,->z...q,,")],
        ))
        .output("c1")
        .build();
    let facts = infer_model(&m, &InferOptions::default());
    for name in ["c1", "c2", "c3", "p1", "ct"] {
        let s = facts.info(id(&m, name)).shape.clone().expect(name);
        assert!(s[2..].iter().all(|d| *d == Dim::Unknown), "{name}: {s:?}");
    }
    assert_eq!(facts.info(id(&m, "c1")).shape.as_ref().unwrap()[1], k(4));
    let rz = facts.info(id(&m, "rz"));
    assert!(rz.dims_known().is_none(), "NaN/inf scales: {rz}");
    assert_eq!(facts.info(id(&m, "rg")).dims_known(), None);
    let cos = facts.info(id(&m, "cos"));
    assert!(cos.numel().is_none(), "{cos}");
    assert!(facts.const_value(id(&m, "cos")).is_none());
}

#[test]
fn torch_expand_pattern_where_equal_minus_one() {
    // Where(Equal(target, -1), 1, target) before Expand, with a symbolic batch in target.
    let m = G::new(13)
        .input("x", F, &[S("N"), K(7)])
        .input("y", F, &[K(1), K(5)])
        .init(t_i64("zero", &[1], &[0]))
        .init(t_i64("m1", &[1], &[-1]))
        .init(t_i64("mm", &[2], &[-1, -1]))
        .init(t_i64("ones", &[2], &[1, 1]))
        .node(node("Shape", &["x"], &["s"], vec![]))
        .node(node("Gather", &["s", "zero"], &["n"], vec![]))
        .node(node("Concat", &["n", "m1"], &["t"], vec![ai("axis", 0)]))
        .node(node("Equal", &["t", "mm"], &["eq"], vec![]))
        .node(node("Where", &["eq", "ones", "t"], &["w"], vec![]))
        .node(node("Expand", &["y", "w"], &["e"], vec![]))
        .output("e")
        .build();
    let facts = infer_model(&m, &InferOptions::default());
    let eq = facts.const_value(id(&m, "eq")).expect("a size is never -1");
    assert_eq!(eq.ints.as_deref(), Some(&[0, 1][..]));
    assert_eq!(facts.shape_data(id(&m, "w")), Some(&[sym("N"), k(1)][..]));
    assert_eq!(
        facts.info(id(&m, "e")).shape,
        Some(vec![sym("N"), k(5)].into())
    );
}

/// An `If` whose branches are both `depth - 1` levels of the same, on a runtime condition.
fn nested_if(depth: usize) -> GraphProto {
    let mut g = GraphProto {
        name: Some(format!("b{depth}")),
        node: vec![node("Identity", &["x"], &["y"], vec![])],
        output: vec![vi("y", F, Some(&[K(2)]))],
        ..Default::default()
    };
    if depth > 0 {
        let sub = nested_if(depth - 1);
        let attr = |name: &str| AttributeProto {
            name: Some(name.into()),
            g: Some(Box::new(sub.clone())),
            r#type: Some(AttributeType::Graph as i32),
            ..Default::default()
        };
        g.node = vec![node(
            "If",
            &["cond"],
            &["y"],
            vec![attr("then_branch"), attr("else_branch")],
        )];
    }
    g
}

#[test]
fn nested_branches_are_bounded() {
    let top = nested_if(16);
    let p = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(13),
        }],
        graph: Some(GraphProto {
            input: vec![vi("x", F, Some(&[K(2)])), vi("cond", 9, Some(&[]))],
            ..top
        }),
        ..Default::default()
    };
    let m = onnx_safeify::import::import_model(p, None).expect("import");
    let t = std::time::Instant::now();
    let facts = infer_model(&m, &InferOptions::default());
    eprintln!("nested If inference took {:?}", t.elapsed());
    assert!(t.elapsed().as_secs() < 20, "took {:?}", t.elapsed());
    // The declared output still speaks.
    assert_eq!(facts.info(id(&m, "y")).dims_known(), Some(vec![2]));
}

/// The facts keep one copy of each distinct shape: values of equal shapes share it, whether
/// the shape was declared, read from an initializer or inferred.
#[test]
fn values_of_one_shape_share_one_copy() {
    let m = G::new(13)
        .input("x", F, &[S("N"), K(3)])
        .input("a", F, &[K(2), K(3)])
        .init(t_f32_raw("w", &[2, 3], &[0.5; 6]))
        .init(t_f32_raw("v", &[2, 3], &[1.5; 6]))
        .node(node("Add", &["a", "w"], &["y"], vec![]))
        .node(node("Mul", &["v", "y"], &["z"], vec![]))
        .node(node("Relu", &["z"], &["r"], vec![]))
        .node(node("Add", &["x", "x"], &["q"], vec![]))
        .node(node("Concat", &["r", "r"], &["c"], vec![ai("axis", 0)]))
        .node(node("Concat", &["y", "z"], &["d"], vec![ai("axis", 0)]))
        .output("r")
        .output("q")
        .output("c")
        .output("d")
        .build();
    let facts = infer_model(&m, &InferOptions::default());
    let shape = |n: &str| facts.info(id(&m, n)).shape.clone().expect(n);
    let a = shape("a");
    assert_eq!(a, vec![k(2), k(3)]);
    for n in ["w", "v", "y", "z", "r"] {
        assert!(shape(n).same_copy(&a), "{n}");
    }
    // Inferred anew (Concat builds its shape): still the one copy of [4, 3].
    assert_eq!(shape("c"), vec![k(4), k(3)]);
    assert!(shape("c").same_copy(&shape("d")));
    assert!(shape("q").same_copy(&shape("x")));
    assert!(!shape("q").same_copy(&a));
}

/// Small constants of equal contents share one copy in the facts (the bounds of every split's
/// slices are a few distinct tensors): initializers and folded results alike. Contents that
/// differ only in a float's sign or a NaN's bits are kept apart, each as it is.
#[test]
fn small_constants_of_equal_contents_share_one_copy() {
    let m = G::new(13)
        .input("x", F, &[K(2), K(8)])
        .init(t_i64("s1", &[1], &[2]))
        .init(t_i64("s2", &[1], &[2]))
        .init(t_i64("e", &[1], &[5]))
        .init(t_i64("ax", &[1], &[1]))
        .init(t_f32("pz", &[2], &[0.0, 1.0]))
        .init(t_f32("nz", &[2], &[-0.0, 1.0]))
        .init(t_f32("pz2", &[2], &[0.0, 1.0]))
        .node(node("Slice", &["x", "s1", "e", "ax"], &["y1"], vec![]))
        .node(node("Slice", &["x", "s2", "e", "ax"], &["y2"], vec![]))
        .node(node("Shape", &["y1"], &["sh1"], vec![]))
        .node(node("Shape", &["y2"], &["sh2"], vec![]))
        .output("sh1")
        .output("sh2")
        .output("pz")
        .output("nz")
        .output("pz2")
        .build();
    let facts = infer_model(&m, &InferOptions::default());
    let c = |n: &str| facts.const_value(id(&m, n)).expect(n);
    assert_eq!(c("s1").ints, Some(vec![2]));
    assert!(std::ptr::eq(c("s1"), c("s2")));
    assert!(!std::ptr::eq(c("s1"), c("e")));
    // Folded: Shape of [2, 3] twice.
    assert_eq!(c("sh1").ints, Some(vec![2, 3]));
    assert!(std::ptr::eq(c("sh1"), c("sh2")));
    assert!(std::ptr::eq(c("pz"), c("pz2")));
    assert!(!std::ptr::eq(c("pz"), c("nz")));
    let bits = |n: &str| -> Vec<u64> {
        c(n).floats
            .as_ref()
            .expect(n)
            .iter()
            .map(|f| f.to_bits())
            .collect()
    };
    assert_eq!(bits("nz")[0], (-0.0f64).to_bits());
    assert_eq!(bits("pz")[0], 0.0f64.to_bits());
}
