//! Fields the schema does not define (a newer ONNX's data): found at every level, kept byte for
//! byte through a round trip, kept on the messages a rewrite leaves in place, and a refusal
//! (exit 2, nothing written) naming them where a rewrite would drop them.
//!
//! The models are encoded by hand here, field by field in field-number order with the unknown
//! fields at the end of their messages, as protobuf runtimes write them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;

use onnx_safeify::io::unknown::{scan, Found};
use onnx_safeify::proto::{
    attribute_proto::AttributeType, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TypeProto,
};

/// A message written by hand.
#[derive(Default, Clone)]
struct W(Vec<u8>);

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl W {
    fn key(mut self, n: u32, wire: u8) -> Self {
        varint(&mut self.0, (u64::from(n) << 3) | u64::from(wire));
        self
    }
    fn int(self, n: u32, v: u64) -> Self {
        let mut s = self.key(n, 0);
        varint(&mut s.0, v);
        s
    }
    fn bytes(self, n: u32, b: &[u8]) -> Self {
        let mut s = self.key(n, 2);
        varint(&mut s.0, b.len() as u64);
        s.0.extend_from_slice(b);
        s
    }
    fn str(self, n: u32, v: &str) -> Self {
        self.bytes(n, v.as_bytes())
    }
    fn msg(self, n: u32, m: W) -> Self {
        self.bytes(n, &m.0)
    }
    fn prost(mut self, m: &impl Message) -> Self {
        self.0.extend(m.encode_to_vec());
        self
    }
    /// Fields the schema does not define, one of each wire type; `tag` makes them unique.
    fn unknown(self, tag: u32) -> Self {
        let n = 1000 + 10 * tag;
        let mut s = self
            .int(n, u64::from(tag) + 5)
            .bytes(n + 1, format!("future {tag}").as_bytes());
        s = s.key(n + 2, 5);
        s.0.extend_from_slice(&tag.to_le_bytes());
        s = s.key(n + 3, 1);
        s.0.extend_from_slice(&u64::from(tag).to_le_bytes());
        // A group holding one varint.
        s.key(n + 4, 3).int(1, 1).key(n + 4, 4)
    }
}

/// The five unknown fields `W::unknown(tag)` writes.
fn numbers(tag: u32) -> Vec<u32> {
    (0..5).map(|i| 1000 + 10 * tag + i).collect()
}

fn tensor_type(elem: i32, dims: &[i64], unknown_in_dim: Option<u32>) -> W {
    let mut shape = W::default();
    for (i, &d) in dims.iter().enumerate() {
        let mut dim = W::default().int(1, d as u64);
        if i == 0 {
            if let Some(t) = unknown_in_dim {
                dim = dim.unknown(t);
            }
        }
        shape = shape.msg(1, dim);
    }
    let tensor = W::default().int(1, elem as u64).msg(2, shape);
    W::default().msg(1, tensor)
}

fn value_info(name: &str, elem: i32, dims: &[i64]) -> W {
    W::default()
        .str(1, name)
        .msg(2, tensor_type(elem, dims, None))
}

fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str], attrs: &[W]) -> W {
    let mut n = W::default();
    for i in inputs {
        n = n.str(1, i);
    }
    for o in outputs {
        n = n.str(2, o);
    }
    n = n.str(3, name).str(4, op);
    for a in attrs {
        n = n.msg(5, a.clone());
    }
    n
}

fn float_attr(name: &str, v: f32) -> W {
    let a = onnx_safeify::proto::AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(AttributeType::Float as i32),
        ..Default::default()
    };
    W::default().prost(&a)
}

fn ints_attr(name: &str, v: &[i64]) -> W {
    let a = onnx_safeify::proto::AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(AttributeType::Ints as i32),
        ..Default::default()
    };
    W::default().prost(&a)
}

fn int_attr(name: &str, v: i64) -> W {
    W::default().prost(&common::int_attr(name, v))
}

fn graph_attr(name: &str, g: W) -> W {
    W::default()
        .str(1, name)
        .msg(6, g)
        .int(20, AttributeType::Graph as u64)
}

fn init(name: &str, dims: &[i64], values: &[f32]) -> W {
    W::default().prost(&common::float_init(name, dims, values))
}

fn opset(domain: &str, version: i64) -> W {
    W::default().prost(&OperatorSetIdProto {
        domain: Some(domain.into()),
        version: Some(version),
    })
}

fn entry(k: &str, v: &str) -> W {
    W::default().prost(&StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    })
}

fn model(graph: W, opset_unknown: Option<u32>, model_unknown: Option<u32>) -> Vec<u8> {
    let mut o = opset("", 17);
    if let Some(t) = opset_unknown {
        o = o.unknown(t);
    }
    let mut e = entry("author", "tests");
    if let Some(t) = opset_unknown {
        e = e.unknown(t + 1);
    }
    let mut m = W::default()
        .int(1, 8)
        .str(2, "onnx-safeify tests")
        .msg(7, graph)
        .msg(8, o)
        .msg(14, e);
    if let Some(t) = model_unknown {
        m = m.unknown(t);
    }
    m.0
}

/// x[1,4], c (bool) -> Relu -> LeakyRelu -> Add b -> If(c: Identity | Neg) -> y, with unknown
/// fields on the model, graph (a reserved number too), nodes, an attribute, an initializer, a
/// value info, a dimension inside a type, an opset import, a metadata entry, and inside both
/// branches of the If.
fn every_level() -> Vec<u8> {
    let then_g = W::default()
        .msg(
            1,
            node("Identity", "then_id", &["s"], &["t_out"], &[]).unknown(20),
        )
        .str(2, "then")
        .msg(12, value_info("t_out", 1, &[1, 4]));
    let else_g = W::default()
        .msg(1, node("Neg", "else_neg", &["s"], &["e_out"], &[]))
        .str(2, "else")
        .msg(12, value_info("e_out", 1, &[1, 4]).unknown(21))
        .unknown(22);
    let g = W::default()
        .msg(1, node("Relu", "relu", &["x"], &["r"], &[]).unknown(1))
        .msg(
            1,
            node(
                "LeakyRelu",
                "leaky",
                &["r"],
                &["l"],
                &[float_attr("alpha", 0.2).unknown(2)],
            ),
        )
        .msg(1, node("Add", "add", &["l", "b"], &["s"], &[]))
        .msg(
            1,
            node(
                "If",
                "if",
                &["c"],
                &["y"],
                &[
                    graph_attr("else_branch", else_g),
                    graph_attr("then_branch", then_g),
                ],
            )
            .unknown(3),
        )
        .str(2, "g")
        .msg(5, init("b", &[1, 4], &[1.0, 2.0, 3.0, 4.0]).unknown(4))
        .msg(
            11,
            W::default()
                .str(1, "x")
                .msg(2, tensor_type(1, &[1, 4], Some(5))),
        )
        .msg(11, value_info("c", 9, &[]))
        .msg(12, value_info("y", 1, &[1, 4]))
        .msg(13, value_info("l", 1, &[1, 4]).unknown(6))
        .unknown(7)
        // GraphProto's reserved number 3 (a field of old ONNX) is not defined either.
        .bytes(3, b"old producer version");
    model(g, Some(8), Some(10))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "onnx-safeify-unknown-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(common::bin()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn found(bytes: &[u8]) -> Vec<Found> {
    scan(&bytes::Bytes::copy_from_slice(bytes)).unwrap().list()
}

/// (path, field number, the field's bytes) of every unknown field.
fn fields(bytes: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
    let mut v: Vec<_> = found(bytes)
        .into_iter()
        .map(|f| (f.path, f.number, bytes[f.offset..f.offset + f.len].to_vec()))
        .collect();
    v.sort();
    v
}

/// What protobuf's Python runtime sees as unknown fields, per model (see the script).
fn python_unknown(models: &[&Path]) -> Option<Vec<serde_json::Value>> {
    let py = common::venv_python()?;
    let script = common::repo().join("tests/data/unknown_fields.py");
    let out = Command::new(py).arg(script).args(models).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Some(v.as_array().unwrap().clone())
}

#[test]
fn the_scan_finds_every_unknown_field_and_where_it_lies() {
    let bytes = every_level();
    let f = found(&bytes);
    let at = |path: &str| -> Vec<u32> {
        f.iter()
            .filter(|x| x.path == path)
            .map(|x| x.number)
            .collect()
    };
    assert_eq!(at("model"), numbers(10));
    assert_eq!(at("graph 'g'"), [numbers(7), vec![3]].concat());
    assert_eq!(at("graph 'g' > node 'relu' (Relu)"), numbers(1));
    assert_eq!(
        at("graph 'g' > node 'leaky' (LeakyRelu) > attribute 'alpha'"),
        numbers(2)
    );
    assert_eq!(at("graph 'g' > node 'if' (If)"), numbers(3));
    assert_eq!(at("graph 'g' > initializer 'b'"), numbers(4));
    assert_eq!(
        at("graph 'g' > input 'x' > Type (field 2 #0) > TypeTensor (field 1 #0) > Shape (field 2 #0) > Dim (field 1 #0)"),
        numbers(5)
    );
    assert_eq!(at("graph 'g' > value_info 'l'"), numbers(6));
    assert_eq!(at("opset_import #0"), numbers(8));
    assert_eq!(at("entry 'author'"), numbers(9));
    assert_eq!(
        at("graph 'g' > node 'if' (If) > attribute 'then_branch' > attribute graph 'then' > node 'then_id' (Identity)"),
        numbers(20)
    );
    assert_eq!(
        at("graph 'g' > node 'if' (If) > attribute 'else_branch' > attribute graph 'else' > output 'e_out'"),
        numbers(21)
    );
    assert_eq!(
        at("graph 'g' > node 'if' (If) > attribute 'else_branch' > attribute graph 'else'"),
        numbers(22)
    );
    assert_eq!(f.len(), 13 * 5 + 1);
    // Offsets point at the fields' keys: each begins with its own field number.
    for x in &f {
        let mut key = Vec::new();
        varint(
            &mut key,
            (u64::from(x.number) << 3) | u64::from(x.wire_type),
        );
        assert_eq!(&bytes[x.offset..x.offset + key.len()], &key[..], "{x}");
    }
    // A model without any has none.
    let plain = common::encode(&common::model(common::tiny_graph()));
    assert!(found(&plain).is_empty());
}

#[test]
fn a_round_trip_keeps_them_byte_for_byte() {
    let dir = tmp("none");
    let input = dir.join("every_level.onnx");
    let bytes = every_level();
    std::fs::write(&input, &bytes).unwrap();
    let out = dir.join("out.onnx");
    let (code, err) = run(&[
        input.to_str().unwrap(),
        "--target",
        "none",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        std::fs::read(&out).unwrap() == bytes,
        "output differs from input"
    );

    // From memory, as the Python module gives models: the same bytes.
    let doc = onnx_safeify::load_bytes(bytes.clone(), Path::new("every_level.onnx")).unwrap();
    assert!(onnx_safeify::compile::model_bytes(&doc).unwrap() == bytes);
}

#[test]
fn the_writer_puts_them_back_at_the_end_of_their_messages() {
    // Not the whole-file copy: the writer's own placement, on the exported model. With every
    // unknown field at the end of its message, as here, it gives back the input exactly.
    let dir = tmp("writer");
    let input = dir.join("every_level.onnx");
    let bytes = every_level();
    std::fs::write(&input, &bytes).unwrap();
    let doc = onnx_safeify::load(&input).unwrap();
    let proto = onnx_safeify::export::export_model(&doc.model);
    let plan = onnx_safeify::io::save::Plan::new(&proto, &doc.source.unknown().unwrap()).unwrap();
    let mut out = Vec::new();
    onnx_safeify::io::save::write_model_planned(&mut out, &proto, &plan).unwrap();
    assert!(out == bytes, "re-encoded model differs from the input");
    // Without them it is prost's encoding.
    let mut plain = Vec::new();
    onnx_safeify::io::save::write_model(&mut plain, &proto).unwrap();
    assert_eq!(plain, proto.encode_to_vec());
    assert!(plain.len() < bytes.len());
}

/// x[1,128,8,8] -> depthwise Conv 'dw' (128 channels: rx580 splits it) -> LeakyRelu 'leaky'
/// -> Add 'add' (+ b) -> If(c) with Identity | Neg branches -> y. `dw_unknown`: unknown fields
/// on the Conv node itself.
fn rewrite_model(dw_unknown: bool) -> Vec<u8> {
    let c = 128usize;
    let w: Vec<f32> = (0..c * 9).map(|i| ((i % 7) as f32 - 3.0) * 0.1).collect();
    let b: Vec<f32> = (0..c).map(|i| i as f32 * 0.01).collect();
    let mut dw = node(
        "Conv",
        "dw",
        &["x", "w"],
        &["r"],
        &[
            int_attr("group", c as i64),
            ints_attr("kernel_shape", &[3, 3]),
            ints_attr("pads", &[1, 1, 1, 1]),
        ],
    );
    if dw_unknown {
        dw = dw.unknown(30);
    }
    let shape = [1, c as i64, 8, 8];
    let then_g = W::default()
        .msg(
            1,
            node("Identity", "then_id", &["s"], &["t_out"], &[]).unknown(20),
        )
        .str(2, "then")
        .msg(12, value_info("t_out", 1, &shape));
    let else_g = W::default()
        .msg(1, node("Neg", "else_neg", &["s"], &["e_out"], &[]))
        .str(2, "else")
        .msg(12, value_info("e_out", 1, &shape))
        .unknown(22);
    let g = W::default()
        .msg(1, dw)
        .msg(
            1,
            node(
                "LeakyRelu",
                "leaky",
                &["r"],
                &["l"],
                &[float_attr("alpha", 0.2).unknown(2)],
            )
            .unknown(1),
        )
        .msg(1, node("Add", "add", &["l", "b"], &["s"], &[]))
        .msg(
            1,
            node(
                "If",
                "if",
                &["c"],
                &["y"],
                &[
                    graph_attr("else_branch", else_g),
                    graph_attr("then_branch", then_g),
                ],
            ),
        )
        .str(2, "g")
        .msg(5, init("w", &[c as i64, 1, 3, 3], &w))
        .msg(5, init("b", &[1, c as i64, 1, 1], &b).unknown(4))
        .msg(11, value_info("x", 1, &shape))
        .msg(11, value_info("c", 9, &[]))
        .msg(12, value_info("y", 1, &shape))
        .msg(13, value_info("l", 1, &shape).unknown(6))
        .unknown(7);
    model(g, Some(8), Some(10))
}

#[test]
fn a_rewrite_keeps_them_on_every_message_it_leaves_in_place() {
    let dir = tmp("rx580");
    let input = dir.join("dw.onnx");
    let bytes = rewrite_model(false);
    std::fs::write(&input, &bytes).unwrap();
    let out = dir.join("dw.rx580.onnx");
    let (code, err) = run(&[
        input.to_str().unwrap(),
        "--target",
        "rx580",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let written = std::fs::read(&out).unwrap();
    // The Conv was split: the graph changed...
    let proto = onnx_safeify::proto::ModelProto::decode(&written[..]).unwrap();
    let g = proto.graph.as_ref().unwrap();
    assert!(
        g.node.iter().filter(|n| n.op_type() == "Conv").count() >= 2,
        "the depthwise Conv was not split"
    );
    // ...and every unknown field is still where it was, byte for byte.
    let before = fields(&bytes);
    assert_eq!(before.len(), 10 * 5);
    assert_eq!(fields(&written), before);
    // protobuf's own runtime agrees.
    if let Some(v) = python_unknown(&[&input, &out]) {
        assert_eq!(v[0].as_array().unwrap().len(), 10 * 5, "{}", v[0]);
        assert_eq!(v[0], v[1]);
    }
    // And the rewrite still computes the same function (both If branches run the same rest).
    if let Some(py) = common::venv_python() {
        let check = Command::new(py)
            .args([
                "-c",
                "import onnx,sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)",
            ])
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
}

#[test]
fn a_rewrite_that_would_drop_them_refuses_and_writes_nothing() {
    let dir = tmp("refuse");
    let input = dir.join("dw.onnx");
    let bytes = rewrite_model(true);
    std::fs::write(&input, &bytes).unwrap();
    let out = dir.join("dw.rx580.onnx");
    let (code, err) = run(&[
        input.to_str().unwrap(),
        "--target",
        "rx580",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    let line = err.lines().find(|l| l.starts_with("error: ")).unwrap();
    assert!(line.contains("dw.onnx"), "{line}");
    assert!(line.contains("would be dropped"), "{line}");
    for n in numbers(30) {
        assert!(
            line.contains(&format!("node 'dw' (Conv) field {n} (")),
            "{n}: {line}"
        );
    }
    assert!(
        line.contains("(group)") && line.contains("(varint)"),
        "{line}"
    );
    // The other unknown fields are not named: they would be kept.
    assert!(!line.contains("field 1010 "), "{line}");
    assert!(!out.exists(), "something was written");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1, "temporary files left: {left:?}");
    assert_eq!(std::fs::read(&input).unwrap(), bytes, "the input changed");

    // The library refuses at compile time, before anything could be written.
    let mut doc = onnx_safeify::load(&input).unwrap();
    let target = onnx_safeify::rules::load_target("rx580").unwrap();
    let e = onnx_safeify::compile::compile_document(
        &mut doc,
        &target,
        &Default::default(),
        false,
        &input,
    )
    .unwrap_err();
    assert!(e.to_string().contains("node 'dw' (Conv) field 1300"), "{e}");

    // With --target none the same model goes through untouched.
    let (code, err) = run(&[
        input.to_str().unwrap(),
        "--target",
        "none",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read(&out).unwrap() == bytes);
}

#[test]
fn partitioned_output_refuses_to_drop_them() {
    let dir = tmp("partition");
    let input = dir.join("dw.onnx");
    std::fs::write(&input, rewrite_model(false)).unwrap();
    let manifest = dir.join("m.yaml");
    let (code, err) = run(&[
        input.to_str().unwrap(),
        "--target",
        "rx580",
        "--cpu-subgraphs",
        "partition",
        "-o",
        manifest.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("would be dropped"), "{err}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
}

#[test]
fn malformed_unknown_fields_are_a_clear_error() {
    // A group that never ends, in the graph: prost rejects it too, the scan must not panic.
    let g = W::default()
        .msg(1, node("Relu", "relu", &["x"], &["y"], &[]))
        .key(1234, 3)
        .int(1, 1);
    let dir = tmp("malformed");
    let input = dir.join("bad.onnx");
    std::fs::write(&input, model(g, None, None)).unwrap();
    let (code, err) = run(&[
        input.to_str().unwrap(),
        "--target",
        "none",
        "-o",
        dir.join("o.onnx").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad.onnx"), "{err}");
    assert!(!dir.join("o.onnx").exists());
}

#[test]
fn types_and_tensors_of_the_schema_are_not_reported() {
    // Every known field of the messages used above, with values: nothing is unknown.
    let t = TensorProto {
        dims: vec![2],
        data_type: Some(7),
        int64_data: vec![1, 2],
        doc_string: Some("d".into()),
        ..Default::default()
    };
    let ty: TypeProto = common::float_tensor_type(&[1, 2]);
    let g = W::default()
        .msg(1, node("Shape", "s", &["x"], &["y"], &[]))
        .str(2, "g")
        .msg(5, W::default().prost(&t))
        .msg(11, W::default().str(1, "x").msg(2, W::default().prost(&ty)))
        .str(10, "doc");
    assert!(found(&model(g, None, None)).is_empty());
}
