//! Lossless round trip: every corpus model goes through load -> import -> export -> save and
//! comes out byte-identical; payloads stay in the memory map; a metadata-only change differs in
//! nothing else; external data stays external.

mod common;

use std::path::Path;

use onnx_safeify::proto::{ModelProto, TensorProto};
use prost::Message;

fn round_trip(src: &Path, out: &Path) {
    let doc = onnx_safeify::load(src).unwrap_or_else(|e| panic!("{e}"));
    onnx_safeify::save(&doc, out).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn every_corpus_model_round_trips_byte_identical() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let files = common::onnx_files(&corpus);
    assert!(
        files.len() >= 1600,
        "only {} models in the corpus",
        files.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.onnx");
    let mut failures = Vec::new();
    for f in &files {
        let doc = match onnx_safeify::load(f) {
            Ok(d) => d,
            Err(e) => {
                failures.push(format!("{}: load failed: {e}", f.display()));
                continue;
            }
        };
        if let Err(e) = onnx_safeify::save(&doc, &out) {
            failures.push(format!("{}: save failed: {e}", f.display()));
            continue;
        }
        // Independent of the code under test: compare the files' bytes.
        if std::fs::read(f).unwrap() != std::fs::read(&out).unwrap() {
            failures.push(format!("{}: output differs from input", f.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
    eprintln!("{} corpus models round-tripped byte-identical", files.len());
}

fn all_tensors(m: &ModelProto) -> Vec<&TensorProto> {
    let mut v = Vec::new();
    let g = m.graph.as_ref().unwrap();
    v.extend(g.initializer.iter());
    for n in &g.node {
        for a in &n.attribute {
            v.extend(a.t.as_deref());
            v.extend(a.tensors.iter());
        }
    }
    v
}

#[test]
fn payloads_stay_in_the_memory_map() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    for f in [
        corpus.join("real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx"),
        corpus.join("synthetic/syn_mobilenet_dw_300mb.onnx"),
    ] {
        let loaded = onnx_safeify::io::load_model(&f).unwrap();
        let tensors = all_tensors(&loaded.proto);
        let raw: Vec<_> = tensors.iter().filter_map(|t| t.raw_data.as_ref()).collect();
        assert!(!raw.is_empty());
        let total: usize = raw.iter().map(|r| r.len()).sum();
        for r in &raw {
            assert!(loaded.is_in_map(r), "{}: a payload was copied", f.display());
        }
        eprintln!(
            "{}: {} payloads, {} bytes, all in the map",
            f.display(),
            raw.len(),
            total
        );
        // And still after import: the IR holds the same slices.
        let doc = onnx_safeify::load(&f).unwrap();
        let g = &doc.model.graph;
        for i in &g.initializers {
            if let Some(r) = &i.tensor.raw_data {
                assert!(doc.source.is_in_map(r));
            }
        }
        for &n in &g.order {
            for a in &g.node(n).attributes {
                if let Some(r) = a.t().and_then(|t| t.raw_data.as_ref()) {
                    assert!(doc.source.is_in_map(r));
                }
            }
        }
    }
}

#[test]
fn metadata_only_change_differs_in_nothing_else() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let src = corpus.join("real/rapidocr_onnxruntime__ch_PP-OCRv4_det_infer.onnx");
    let mut doc = onnx_safeify::load(&src).unwrap();
    let g = &mut doc.model.graph;
    let index = g.order.len() / 2;
    let target = g.order[index];
    g.node_mut(target)
        .set_metadata("onnx_safeify.test", "touched");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("meta.onnx");
    onnx_safeify::save(&doc, &out).unwrap();

    // Compare decoded protos (prost, independent of the IR): equal once the one change is
    // applied to the original by hand.
    let mut before = ModelProto::decode(std::fs::read(&src).unwrap().as_slice()).unwrap();
    let after = ModelProto::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
    assert_ne!(before, after);
    let bg = before.graph.as_mut().unwrap();
    let n = &mut bg.node[index];
    n.metadata_props
        .push(onnx_safeify::proto::StringStringEntryProto {
            key: Some("onnx_safeify.test".into()),
            value: Some("touched".into()),
        });
    assert_eq!(before, after);
}

#[test]
fn sample_round_trips_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("ocr_tiny.onnx");
    std::fs::copy(common::sample(), &src).unwrap();
    let st = std::process::Command::new(common::bin())
        .args([src.to_str().unwrap(), "--target", "none"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let out = dir.path().join("ocr_tiny.none.onnx");
    assert_eq!(std::fs::read(&src).unwrap(), std::fs::read(&out).unwrap());
    // Deterministic: a second run gives the same bytes.
    let out2 = dir.path().join("again.onnx");
    let st = std::process::Command::new(common::bin())
        .args([
            src.to_str().unwrap(),
            "-t",
            "none",
            "-o",
            out2.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(st.status.success());
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&out2).unwrap());
}

/// Python's onnx writes a model with external data; we round-trip it and Python reads back the
/// same tensors (an independent check of the external-data path).
#[test]
fn external_data_stays_external_and_equal() {
    let Some(corpus) = common::corpus() else {
        return;
    };
    let Some(py) = common::venv_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src_dir = dir.path().join("src");
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&src_dir).unwrap();
    std::fs::create_dir_all(&out_dir).unwrap();
    let real = corpus.join("real/rapidocr_onnxruntime__ch_ppocr_mobile_v2.0_cls_infer.onnx");
    let script = r#"
import sys, onnx
from onnx import numpy_helper
src, ext = sys.argv[1], sys.argv[2]
m = onnx.load(src)
# Constant nodes -> initializers so that there is something to externalise.
g = m.graph
keep = []
for n in g.node:
    if n.op_type == "Constant" and n.attribute[0].name == "value":
        t = numpy_helper.from_array(numpy_helper.to_array(n.attribute[0].t), n.output[0])
        g.initializer.append(t)
    else:
        keep.append(n)
del g.node[:]; g.node.extend(keep)
onnx.save(m, ext, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin", size_threshold=256)
"#;
    let ext_model = src_dir.join("cls.onnx");
    let st = std::process::Command::new(&py)
        .args([
            "-c",
            script,
            real.to_str().unwrap(),
            ext_model.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(st.success());
    assert!(src_dir.join("weights.bin").exists());
    let out = out_dir.join("cls.none.onnx");
    round_trip(&ext_model, &out);
    // The output keeps the input's references; its data file is placed beside it under the
    // same name (a clone or a copy: another folder), never the input's own file.
    assert!(
        out_dir.join("weights.bin").exists(),
        "external data was not placed beside the output"
    );
    assert_eq!(
        std::fs::read(out_dir.join("weights.bin")).unwrap(),
        std::fs::read(src_dir.join("weights.bin")).unwrap()
    );
    let cmp = r#"
import sys, onnx
from onnx import numpy_helper
a = onnx.load(sys.argv[1]); b = onnx.load(sys.argv[2])
ta = {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
tb = {t.name: numpy_helper.to_array(t) for t in b.graph.initializer}
assert ta.keys() == tb.keys(), "initializer names differ"
assert all((ta[k] == tb[k]).all() and ta[k].shape == tb[k].shape for k in ta), "tensor data differs"
b_raw = onnx.load(sys.argv[2], load_external_data=False)
ext = sum(1 for t in b_raw.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
assert ext > 0, "no tensor is external in the output"
# Apart from the external data locations, the models are equal.
for m in (a, b):
    for t in m.graph.initializer:
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
        t.ClearField("raw_data")
assert a == b, "models differ beyond external data"
print("ok", len(ta), ext)
"#;
    let o = std::process::Command::new(&py)
        .args([
            "-c",
            cmp,
            ext_model.to_str().unwrap(),
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The source is untouched and we never wrote into the source folder.
    let names: Vec<_> = std::fs::read_dir(&src_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// The streamed writer names each initializer after its value: when a value was renamed (as
/// rewrites do for names that bodies read), the bytes are those of the whole exported message.
#[test]
fn renamed_initializers_stream_as_the_whole_message_encodes() {
    let dir = tempfile::tempdir().unwrap();
    // A large initializer (its payload is streamed from the file) and two small ones.
    let n = 20_000;
    let big: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let graph = onnx_safeify::proto::GraphProto {
        node: vec![
            common::node("Add", "a", &["x", "big"], &["y"]),
            common::node("Add", "b", &["y", "s1"], &["z"]),
            common::node("Add", "c", &["z", "s2"], &["out"]),
        ],
        name: Some("g".into()),
        initializer: vec![
            common::float_init("big", &[n], &big),
            common::float_init("s1", &[1], &[1.0]),
            common::float_init("s2", &[1], &[2.0]),
        ],
        input: vec![common::vi("x", &[n])],
        output: vec![common::vi("out", &[n])],
        ..Default::default()
    };
    let src = dir.path().join("in.onnx");
    std::fs::write(&src, common::encode(&common::model(graph))).unwrap();
    let mut doc = onnx_safeify::load(&src).unwrap();
    let g = &mut doc.model.graph;
    let inits: Vec<_> = g.initializers.iter().map(|i| i.value).collect();
    // Every other initializer renamed (big and s2): both the copied and the unchanged paths
    // are written, for a streamed payload and for a small tensor.
    for v in inits.iter().step_by(2) {
        let name = format!("{}_renamed", g.value_name(*v));
        g.values[v.index()].name = name.into();
    }
    let out = dir.path().join("out.onnx");
    onnx_safeify::save(&doc, &out).unwrap();
    let whole = onnx_safeify::export::export_model(&doc.model).encode_to_vec();
    let written = std::fs::read(&out).unwrap();
    assert_eq!(written, whole);
    let m = ModelProto::decode(written.as_slice()).unwrap();
    let renamed = m
        .graph
        .unwrap()
        .initializer
        .iter()
        .filter(|t| t.name.as_deref().unwrap_or("").ends_with("_renamed"))
        .count();
    assert_eq!(renamed, inits.len().div_ceil(2));
}

/// The importer decodes the main graph's nodes and initializers one at a time
/// (`decode_model_split`); the model it builds is the one built from the whole decoded
/// message, for the sample, every corpus model, and a file whose graph comes in two pieces
/// with nodes after initializers.
#[test]
fn nodes_decoded_one_at_a_time_import_as_the_whole_message() {
    use onnx_safeify::{export, import, io};
    let same = |label: &str, bytes: Vec<u8>| {
        let bytes = bytes::Bytes::from(bytes);
        let whole = io::load::decode_model(bytes.clone()).unwrap();
        // Compared as encodings: a NaN in a tensor never equals itself.
        let whole = export::export_model(&import::import_model(whole, None).unwrap());
        let whole = whole.encode_to_vec();
        let (proto, encoded) = io::load::decode_model_split(bytes).unwrap();
        assert!(
            (proto.graph.as_ref()).is_none_or(|g| g.node.is_empty() && g.initializer.is_empty())
        );
        let split = import::import_model_split(proto, &encoded, None).unwrap();
        assert!(
            export::export_model(&split).encode_to_vec() == whole,
            "{label}"
        );
    };
    same("sample", std::fs::read(common::sample()).unwrap());
    // Graph field 7 twice: the second brings a node, an initializer and another node.
    let mut a = common::tiny_graph();
    let first = common::encode(&common::model(a.clone()));
    a.node.clear();
    let out = a.output[0].name.clone().unwrap();
    let second = onnx_safeify::proto::GraphProto {
        node: vec![common::node("Add", "more", &[&out, "k"], &["out2"])],
        initializer: vec![common::float_init("k", &[1], &[3.0])],
        ..Default::default()
    };
    let mut g2 = second.encode_to_vec();
    g2.extend(
        onnx_safeify::proto::GraphProto {
            node: vec![common::node("Relu", "last", &["out2"], &["out3"])],
            ..Default::default()
        }
        .encode_to_vec(),
    );
    let mut two = first.clone();
    prost::encoding::encode_key(7, prost::encoding::WireType::LengthDelimited, &mut two);
    prost::encoding::encode_varint(g2.len() as u64, &mut two);
    two.extend(&g2);
    same("graph in two pieces", two);
    if let Some(corpus) = common::corpus() {
        let files = common::onnx_files(&corpus);
        for f in &files {
            same(&f.display().to_string(), std::fs::read(f).unwrap());
        }
        eprintln!("{} corpus models compared", files.len());
    }
}

/// A node or an initializer that does not decode is the error, as with the whole message
/// decoded first, even when an earlier node is invalid too (it produces a value twice).
#[test]
fn a_node_that_does_not_decode_is_the_error_reported() {
    let mut g = common::tiny_graph();
    let dup = g.node[0].output[0].clone();
    g.node.push(common::node("Relu", "again", &[&dup], &[&dup]));
    let mut bytes = common::encode(&common::model(g));
    // A second graph field holding a node whose first key has wire type 7 (there is none).
    let bad_graph = [0x0a, 0x01, 0x0f];
    prost::encoding::encode_key(7, prost::encoding::WireType::LengthDelimited, &mut bytes);
    prost::encoding::encode_varint(bad_graph.len() as u64, &mut bytes);
    bytes.extend(bad_graph);
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.onnx");
    std::fs::write(&f, &bytes).unwrap();
    let e = onnx_safeify::load(&f).unwrap_err();
    assert_eq!(e.kind, onnx_safeify::ErrorKind::Decode, "{e}");
    let whole = onnx_safeify::load_bytes(bytes, &f).unwrap_err();
    assert_eq!(whole.kind, onnx_safeify::ErrorKind::Decode, "{whole}");
    // The same with an initializer (graph field 5) whose `dims` (1, packed) runs past its end.
    let mut g = common::tiny_graph();
    g.node.push(common::node("Relu", "again", &[&dup], &[&dup]));
    let mut bytes = common::encode(&common::model(g));
    let bad_graph = [0x2a, 0x02, 0x0a, 0x05];
    prost::encoding::encode_key(7, prost::encoding::WireType::LengthDelimited, &mut bytes);
    prost::encoding::encode_varint(bad_graph.len() as u64, &mut bytes);
    bytes.extend(bad_graph);
    std::fs::write(&f, &bytes).unwrap();
    let e = onnx_safeify::load(&f).unwrap_err();
    assert_eq!(e.kind, onnx_safeify::ErrorKind::Decode, "{e}");
    assert!(e.to_string().contains("TensorProto"), "{e}");
    let whole = onnx_safeify::load_bytes(bytes, &f).unwrap_err();
    assert_eq!(whole.kind, onnx_safeify::ErrorKind::Decode, "{whole}");
    // Without the broken node, the duplicate is what is reported.
    let mut g = common::tiny_graph();
    g.node.push(common::node("Relu", "again", &[&dup], &[&dup]));
    std::fs::write(&f, common::encode(&common::model(g))).unwrap();
    let e = onnx_safeify::load(&f).unwrap_err();
    assert!(e.to_string().contains("already produced"), "{e}");
}

/// A `Constant` node's tensor with its data in an external file: the model counts as using
/// external data although its nodes were decoded after the rest, and the output keeps it.
#[test]
fn a_constant_with_external_data_is_seen_and_kept() {
    use onnx_safeify::proto::{AttributeProto, StringStringEntryProto, TensorProto};
    let dir = tempfile::tempdir().unwrap();
    let (src, out) = (dir.path().join("src"), dir.path().join("out"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let values: Vec<u8> = (0..64u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(src.join("w.bin"), &values).unwrap();
    let entry = |k: &str, v: &str| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    let t = TensorProto {
        dims: vec![64],
        data_type: Some(1),
        data_location: Some(1),
        external_data: vec![
            entry("location", "w.bin"),
            entry("offset", "0"),
            entry("length", "256"),
        ],
        ..Default::default()
    };
    let mut c = common::node("Constant", "c", &[], &["w"]);
    c.attribute.push(AttributeProto {
        name: Some("value".into()),
        r#type: Some(4),
        t: Some(Box::new(t)),
        ..Default::default()
    });
    let graph = onnx_safeify::proto::GraphProto {
        node: vec![c, common::node("Add", "a", &["x", "w"], &["y"])],
        name: Some("g".into()),
        input: vec![common::vi("x", &[64])],
        output: vec![common::vi("y", &[64])],
        ..Default::default()
    };
    std::fs::write(src.join("m.onnx"), common::encode(&common::model(graph))).unwrap();
    let doc = onnx_safeify::load(&src.join("m.onnx")).unwrap();
    assert!(doc.source.external_used);
    let written = out.join("m.onnx");
    onnx_safeify::save(&doc, &written).unwrap();
    let back = onnx_safeify::io::load_model(&written).unwrap();
    let node = &back.proto.graph.as_ref().unwrap().node[0];
    let t = node.attribute[0].t.as_deref().unwrap();
    assert_eq!(
        t.data_location,
        Some(1),
        "the Constant's data is no longer external"
    );
    let loc = t
        .external_data
        .iter()
        .find(|e| e.key.as_deref() == Some("location"))
        .and_then(|e| e.value.clone())
        .unwrap();
    let data = std::fs::read(out.join(loc)).unwrap();
    assert!(data.windows(values.len()).any(|w| w == values.as_slice()));
}
