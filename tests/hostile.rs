//! Bad input is refused cleanly: exit code 2, one line naming the file (and node), no output or
//! temporary file left behind, and the input untouched.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use onnx_safeify::proto::{
    attribute_proto::AttributeType, tensor_proto::DataLocation, AttributeProto, GraphProto,
    ModelProto, StringStringEntryProto, TensorProto,
};

struct Case {
    dir: tempfile::TempDir,
    model: PathBuf,
}

impl Case {
    fn new(bytes: &[u8]) -> Case {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model.onnx");
        std::fs::write(&model, bytes).unwrap();
        Case { dir, model }
    }
    fn from_model(m: &ModelProto) -> Case {
        Case::new(&encode(m))
    }
    fn listing(&self) -> Vec<String> {
        let mut v: Vec<String> = walk(self.dir.path());
        v.sort();
        v
    }
    /// Run the main job and `inspect`; both must fail with exit 2 and a message containing
    /// every fragment; nothing may be written or changed.
    fn refuses(&self, fragments: &[&str]) {
        let before = self.listing();
        let input = std::fs::read(&self.model).unwrap();
        for args in [
            vec![self.model.to_str().unwrap(), "--target", "none"],
            vec!["inspect", self.model.to_str().unwrap()],
        ] {
            let out = Command::new(bin()).args(&args).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
            assert!(
                stderr.contains("model.onnx"),
                "error does not name the file: {stderr}"
            );
            for f in fragments {
                assert!(stderr.contains(f), "expected {f:?} in: {stderr}");
            }
            assert_eq!(stderr.trim().lines().count(), 1, "not one line: {stderr}");
            assert_eq!(self.listing(), before, "files were added or removed");
            assert_eq!(
                std::fs::read(&self.model).unwrap(),
                input,
                "the input changed"
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        v.push(p.display().to_string());
        if p.is_dir() && !p.is_symlink() {
            v.extend(walk(&p));
        }
    }
    v
}

#[test]
fn empty_file() {
    Case::new(b"").refuses(&["empty"]);
}

#[test]
fn random_bytes() {
    let mut x: u64 = 0x9E3779B97F4A7C15;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    Case::new(&bytes).refuses(&["not a valid ONNX model"]);
}

#[test]
fn truncated_file() {
    let bytes = std::fs::read(sample()).unwrap();
    Case::new(&bytes[..bytes.len() / 2]).refuses(&["not a valid ONNX model"]);
}

#[test]
fn a_folder_is_not_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args([dir.path().to_str().unwrap(), "--target", "none"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("folder"));
}

#[test]
fn missing_file() {
    let out = Command::new(bin())
        .args(["/nonexistent/model.onnx", "--target", "none"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/model.onnx"));
}

#[test]
fn undefined_input() {
    let mut g = tiny_graph();
    g.node[0].input[0] = "nowhere".into();
    Case::from_model(&model(g)).refuses(&["node 'relu' (Relu)", "input 'nowhere' is not defined"]);
}

#[test]
fn cycle() {
    let mut g = tiny_graph();
    g.node = vec![
        node("Add", "a", &["x", "b_out"], &["a_out"]),
        node("Relu", "b", &["a_out"], &["b_out"]),
        node("Identity", "c", &["a_out"], &["y"]),
    ];
    Case::from_model(&model(g)).refuses(&["cycle", "'a' (Add)"]);
}

#[test]
fn two_producers_of_one_name() {
    let mut g = tiny_graph();
    g.node.push(node("Sigmoid", "second", &["x"], &["y"]));
    Case::from_model(&model(g))
        .refuses(&["node 'second' (Sigmoid) produces 'y'", "node 'relu' (Relu)"]);
}

#[test]
fn node_output_shadows_graph_input() {
    let mut g = tiny_graph();
    g.node.push(node("Sigmoid", "clobber", &["y"], &["x"]));
    Case::from_model(&model(g)).refuses(&["produces 'x'", "graph input"]);
}

fn with_init(t: TensorProto) -> ModelProto {
    let mut g = tiny_graph();
    g.node[0] = node("Add", "add", &["x", "w"], &["y"]);
    g.initializer.push(t);
    model(g)
}

#[test]
fn tensor_size_disagrees_with_data() {
    let mut t = float_init("w", &[1, 4], &[1.0, 2.0, 3.0, 4.0]);
    t.dims = vec![2, 4];
    Case::from_model(&with_init(t)).refuses(&["initializer 'w'", "32 bytes", "holds 16 bytes"]);
}

#[test]
fn tensor_size_overflows() {
    let mut t = float_init("w", &[1, 4], &[1.0; 4]);
    t.dims = vec![i64::MAX, 4];
    Case::from_model(&with_init(t)).refuses(&["initializer 'w'", "overflows"]);
}

#[test]
fn negative_initializer_dim() {
    let mut t = float_init("w", &[1, 4], &[1.0; 4]);
    t.dims = vec![-1, 4];
    Case::from_model(&with_init(t)).refuses(&["initializer 'w'", "negative dimension -1"]);
}

#[test]
fn typed_data_count_disagrees() {
    let t = TensorProto {
        dims: vec![3],
        data_type: Some(1),
        name: Some("w".into()),
        float_data: vec![1.0, 2.0],
        ..Default::default()
    };
    Case::from_model(&with_init(t)).refuses(&["initializer 'w'", "float_data holds 2 values"]);
}

fn attr_model(a: AttributeProto) -> ModelProto {
    let mut g = tiny_graph();
    g.node[0] = node("LeakyRelu", "leaky", &["x"], &["y"]);
    g.node[0].attribute.push(a);
    model(g)
}

#[test]
fn attribute_type_disagrees_with_payload() {
    let a = AttributeProto {
        name: Some("alpha".into()),
        r#type: Some(AttributeType::Int as i32),
        f: Some(0.1),
        ..Default::default()
    };
    Case::from_model(&attr_model(a)).refuses(&[
        "node 'leaky' (LeakyRelu)",
        "attribute 'alpha'",
        "type INT but carries 'f'",
    ]);
}

#[test]
fn attribute_without_payload() {
    let a = AttributeProto {
        name: Some("alpha".into()),
        r#type: Some(AttributeType::Float as i32),
        ..Default::default()
    };
    Case::from_model(&attr_model(a)).refuses(&["attribute 'alpha'", "type FLOAT but no value"]);
}

fn external_model(location: &str) -> ModelProto {
    let t = TensorProto {
        dims: vec![1, 4],
        data_type: Some(1),
        name: Some("w".into()),
        data_location: Some(DataLocation::External as i32),
        external_data: vec![
            StringStringEntryProto {
                key: Some("location".into()),
                value: Some(location.into()),
            },
            StringStringEntryProto {
                key: Some("length".into()),
                value: Some("16".into()),
            },
        ],
        ..Default::default()
    };
    with_init(t)
}

#[test]
fn external_data_absolute_path() {
    Case::from_model(&external_model("/etc/passwd")).refuses(&["'/etc/passwd' is absolute"]);
}

#[test]
fn external_data_parent_escape() {
    Case::from_model(&external_model("sub/../../secret.bin"))
        .refuses(&["leaves the model's folder"]);
}

#[test]
fn external_data_symlink_escape() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.bin");
    std::fs::write(&secret, [0u8; 64]).unwrap();
    let case = Case::from_model(&external_model("weights.bin"));
    std::os::unix::fs::symlink(&secret, case.dir.path().join("weights.bin")).unwrap();
    case.refuses(&["outside the model's folder", "symlink"]);
}

#[test]
fn external_data_missing() {
    Case::from_model(&external_model("weights.bin")).refuses(&["'weights.bin' cannot be opened"]);
}

#[test]
fn external_data_too_short() {
    let case = Case::from_model(&external_model("weights.bin"));
    std::fs::write(case.dir.path().join("weights.bin"), [0u8; 8]).unwrap();
    case.refuses(&["needs bytes 0..16", "file has 8 bytes"]);
}

/// Thousands of nested If levels, built as raw protobuf bytes (the encoder would recurse).
#[test]
fn absurd_nesting() {
    use prost::encoding::{encode_key, encode_varint, WireType};
    fn field(tag: u32, payload: &[u8], out: &mut Vec<u8>) {
        encode_key(tag, WireType::LengthDelimited, out);
        encode_varint(payload.len() as u64, out);
        out.extend_from_slice(payload);
    }
    let mut graph: Vec<u8> = Vec::new(); // innermost: an empty graph
    for _ in 0..3000 {
        let mut attr = Vec::new();
        field(1, b"then_branch", &mut attr);
        encode_key(20, WireType::Varint, &mut attr);
        encode_varint(AttributeType::Graph as u64, &mut attr);
        field(6, &graph, &mut attr);
        let mut node = Vec::new();
        field(4, b"If", &mut node);
        field(5, &attr, &mut node);
        let mut g = Vec::new();
        field(1, &node, &mut g);
        graph = g;
    }
    let mut m = Vec::new();
    encode_key(1, WireType::Varint, &mut m);
    encode_varint(8, &mut m);
    field(7, &graph, &mut m);
    Case::new(&m).refuses(&["not a valid ONNX model", "recursion limit"]);
}

#[test]
fn model_without_graph() {
    let mut m = model(tiny_graph());
    m.graph = None;
    Case::from_model(&m).refuses(&["has no graph"]);
}

#[test]
fn subgraph_reads_undefined_outer_value() {
    let mut g = tiny_graph();
    let then_branch = GraphProto {
        node: vec![node("Identity", "inner", &["ghost"], &["t"])],
        name: Some("then".into()),
        output: vec![vi("t", &[1, 4])],
        ..Default::default()
    };
    let mut ifn = node("If", "branch", &["cond"], &["y"]);
    ifn.attribute.push(AttributeProto {
        name: Some("then_branch".into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(Box::new(then_branch.clone())),
        ..Default::default()
    });
    ifn.attribute.push(AttributeProto {
        name: Some("else_branch".into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(Box::new(then_branch)),
        ..Default::default()
    });
    g.node = vec![
        node("ReduceMax", "r", &["x"], &["m"]),
        node("Cast", "c", &["m"], &["cond"]),
        ifn,
    ];
    Case::from_model(&model(g)).refuses(&[
        "node 'branch' (If)",
        "attribute 'then_branch'",
        "node 'inner' (Identity): input 'ghost' is not defined",
    ]);
}

#[test]
fn never_overwrites_the_input() {
    let case = Case::from_model(&model(tiny_graph()));
    let input = std::fs::read(&case.model).unwrap();
    let out = Command::new(bin())
        .args([
            case.model.to_str().unwrap(),
            "--target",
            "none",
            "-o",
            case.model.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to overwrite the input"));
    assert_eq!(std::fs::read(&case.model).unwrap(), input);
    assert_eq!(case.listing().len(), 1);
}

#[test]
fn output_folder_missing_leaves_nothing() {
    let case = Case::from_model(&model(tiny_graph()));
    let target = case.dir.path().join("no/such/dir/out.onnx");
    let out = Command::new(bin())
        .args([
            case.model.to_str().unwrap(),
            "--target",
            "none",
            "-o",
            target.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("out.onnx"));
    assert_eq!(case.listing().len(), 1);
}

#[test]
fn unknown_target_is_an_error() {
    let case = Case::from_model(&model(tiny_graph()));
    let out = Command::new(bin())
        .args([case.model.to_str().unwrap(), "--target", "no-such-gpu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown target `no-such-gpu`"));
    assert_eq!(case.listing().len(), 1);
}

#[test]
fn accepts_what_exporters_write() {
    // Nodes out of topological order, dim_value -1, an unused opset import, empty node names,
    // an initializer that is also a graph input (IR < 4 style).
    let mut g = tiny_graph();
    g.node = vec![
        node("Relu", "", &["h"], &["y"]),
        node("Add", "", &["x", "w"], &["h"]),
    ];
    g.input.push(vi("w", &[-1, 4]));
    g.initializer.push(float_init("w", &[1, 4], &[1.0; 4]));
    let mut m = model(g);
    m.opset_import
        .push(onnx_safeify::proto::OperatorSetIdProto {
            domain: Some("ai.onnx.ml".into()),
            version: Some(3),
        });
    let case = Case::from_model(&m);
    let out = case.dir.path().join("out.onnx");
    let st = Command::new(bin())
        .args([
            case.model.to_str().unwrap(),
            "-t",
            "none",
            "-o",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert_eq!(std::fs::read(&out).unwrap(), encode(&m));
}
