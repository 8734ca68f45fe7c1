//! A deterministic, human-readable text dump of the IR (used for snapshots and `inspect`).

use std::fmt::Write;

use crate::ir::{Attribute, Graph, Model, TensorView};
use crate::proto::{tensor_shape_proto, type_proto, TensorProto, TypeProto};
use crate::tensor::{dtype_name, raw_size};

/// `float[N,3,640,640]`, `seq(float[?])`, ...; `?` for an unknown dimension.
pub fn type_string(t: Option<&TypeProto>) -> String {
    let Some(t) = t else { return "?".to_string() };
    match &t.value {
        Some(type_proto::Value::TensorType(tt)) => {
            let elem = dtype_name(tt.elem_type.unwrap_or(0));
            match &tt.shape {
                None => format!("{elem}[*]"),
                Some(s) => {
                    let dims: Vec<String> = s
                        .dim
                        .iter()
                        .map(|d| match &d.value {
                            Some(tensor_shape_proto::dimension::Value::DimValue(v)) => {
                                v.to_string()
                            }
                            Some(tensor_shape_proto::dimension::Value::DimParam(p)) => p.clone(),
                            None => "?".to_string(),
                        })
                        .collect();
                    format!("{elem}[{}]", dims.join(","))
                }
            }
        }
        Some(type_proto::Value::SequenceType(s)) => {
            format!("seq({})", type_string(s.elem_type.as_deref()))
        }
        Some(type_proto::Value::OptionalType(s)) => {
            format!("optional({})", type_string(s.elem_type.as_deref()))
        }
        Some(type_proto::Value::MapType(m)) => format!(
            "map({}, {})",
            dtype_name(m.key_type.unwrap_or(0)),
            type_string(m.value_type.as_deref())
        ),
        Some(type_proto::Value::SparseTensorType(st)) => {
            format!("sparse({})", dtype_name(st.elem_type.unwrap_or(0)))
        }
        Some(type_proto::Value::OpaqueType(o)) => format!(
            "opaque({}.{})",
            o.domain.as_deref().unwrap_or(""),
            o.name.as_deref().unwrap_or("")
        ),
        None => "?".to_string(),
    }
}

/// Payload size in bytes of a tensor as stored (raw, typed or external).
pub fn tensor_bytes(t: TensorView<'_>) -> u64 {
    if let Some(r) = t.raw_data {
        return r.len() as u64;
    }
    let r = t.rest;
    if crate::io::external::is_external(r) {
        return crate::io::external::external_ref(r)
            .ok()
            .and_then(|r| r.length)
            .or_else(|| {
                crate::tensor::element_count(t.dims)
                    .ok()
                    .and_then(|n| raw_size(t.data_type.unwrap_or(0), n))
            })
            .unwrap_or(0);
    }
    (r.float_data.len() * 4
        + r.int32_data.len() * 4
        + r.int64_data.len() * 8
        + r.double_data.len() * 8
        + r.uint64_data.len() * 8
        + r.string_data.iter().map(|s| s.len()).sum::<usize>()) as u64
}

/// FNV-1a (64-bit) of a tensor's payload fields, so dumps change when weights change.
/// Constants from the FNV specification: offset basis 0xcbf29ce484222325, prime 0x100000001b3.
pub fn payload_hash(t: TensorView<'_>) -> u64 {
    use prost::Message;
    let r = t.rest;
    let fnv = |h: u64, bytes: &[u8]| {
        bytes.iter().fold(h, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    if let Some(p) = crate::io::computed::get(r) {
        // A computed payload hashes as the tensor with its bytes in raw_data (field 9), read a
        // chunk at a time.
        let mut head = vec![0x4a];
        prost::encoding::encode_varint(p.len(), &mut head);
        let mut h = fnv(0xcbf2_9ce4_8422_2325, &head);
        let _ = p.write(&mut |c| {
            h = fnv(h, c);
            Ok(())
        });
        return h;
    }
    let payload = TensorProto {
        float_data: r.float_data.clone(),
        int32_data: r.int32_data.clone(),
        string_data: r.string_data.clone(),
        int64_data: r.int64_data.clone(),
        raw_data: t.raw_data.cloned(),
        double_data: r.double_data.clone(),
        uint64_data: r.uint64_data.clone(),
        external_data: r.external_data.clone(),
        ..Default::default()
    };
    fnv(0xcbf2_9ce4_8422_2325, &payload.encode_to_vec())
}

fn tensor_summary(t: TensorView<'_>) -> String {
    let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
    let ext = if crate::io::computed::is_computed(t.rest) {
        ", computed when written"
    } else if crate::io::external::is_external(t.rest) {
        ", external"
    } else {
        ""
    };
    format!(
        "{}[{}] ({} bytes{ext}, #{:016x})",
        dtype_name(t.data_type.unwrap_or(0)),
        dims.join(","),
        tensor_bytes(t),
        payload_hash(t)
    )
}

fn attr_value(a: &Attribute) -> String {
    let p = &a.to_proto();
    if let Some(r) = p.ref_attr_name.as_deref().filter(|r| !r.is_empty()) {
        return format!("@{r}");
    }
    match p.r#type.unwrap_or(0) {
        1 => format!("{:?}", p.f.unwrap_or(0.0)),
        2 => p.i.unwrap_or(0).to_string(),
        3 => format!(
            "{:?}",
            String::from_utf8_lossy(p.s.as_deref().unwrap_or(&[]))
        ),
        4 => {
            p.t.as_deref()
                .map(|t| tensor_summary(t.into()))
                .unwrap_or_default()
        }
        5 => "<graph>".to_string(),
        6 => format!("{:?}", p.floats),
        7 => format!("{:?}", p.ints),
        8 => format!(
            "{:?}",
            p.strings
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
        ),
        9 => format!(
            "[{}]",
            p.tensors
                .iter()
                .map(|t| tensor_summary(t.into()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        10 => format!("<{} graphs>", a.graphs().len()),
        11 => "<sparse tensor>".to_string(),
        12 => format!("<{} sparse tensors>", p.sparse_tensors.len()),
        13 => format!("type {}", type_string(p.tp.as_deref())),
        14 => format!("<{} types>", p.type_protos.len()),
        _ => "<untyped>".to_string(),
    }
}

/// Dump a whole model.
pub fn dump_model(m: &Model) -> String {
    let mut s = String::new();
    let opsets: Vec<String> = m
        .opset_import
        .iter()
        .map(|o| {
            let d = o.domain.as_deref().unwrap_or("");
            format!(
                "{}:{}",
                if d.is_empty() { "ai.onnx" } else { d },
                o.version.unwrap_or(0)
            )
        })
        .collect();
    let _ = writeln!(
        s,
        "model ir_version={} producer={:?} opsets=[{}]",
        m.ir_version.unwrap_or(0),
        format!(
            "{} {}",
            m.producer_name.as_deref().unwrap_or(""),
            m.producer_version.as_deref().unwrap_or("")
        )
        .trim(),
        opsets.join(", ")
    );
    for e in &m.metadata_props {
        let _ = writeln!(
            s,
            "meta {:?} = {:?}",
            e.key.as_deref().unwrap_or(""),
            e.value.as_deref().unwrap_or("")
        );
    }
    if !m.functions.is_empty() {
        let _ = writeln!(s, "functions {}", m.functions.len());
    }
    dump_graph(&m.graph, 0, &mut s);
    s
}

/// Dump one graph at an indentation level.
pub fn dump_graph(g: &Graph, indent: usize, s: &mut String) {
    let pad = "  ".repeat(indent);
    let _ = writeln!(s, "{pad}graph {:?}", g.name.as_deref().unwrap_or(""));
    for i in &g.inputs {
        let _ = writeln!(
            s,
            "{pad}  input  {}: {}",
            g.value_name(i.value),
            type_string(i.proto.r#type.as_ref())
        );
    }
    for o in &g.outputs {
        let _ = writeln!(
            s,
            "{pad}  output {}: {}",
            g.value_name(o.value),
            type_string(o.proto.r#type.as_ref())
        );
    }
    for i in &g.initializers {
        let _ = writeln!(
            s,
            "{pad}  init   {}: {}",
            g.value_name(i.value),
            tensor_summary(i.tensor.view())
        );
    }
    for i in &g.sparse_initializers {
        let _ = writeln!(s, "{pad}  sparse {}", g.value_name(i.value));
    }
    for &id in &g.order {
        let n = &g.nodes[id];
        let outs: Vec<String> = n
            .outputs
            .iter()
            .map(|o| {
                o.map(|v| format!("%{}", g.value_name(v)))
                    .unwrap_or_else(|| "_".into())
            })
            .collect();
        let ins: Vec<String> = n
            .inputs
            .iter()
            .map(|o| {
                o.map(|v| format!("%{}", g.value_name(v)))
                    .unwrap_or_else(|| "_".into())
            })
            .collect();
        let op = if n.domain().is_empty() {
            n.op_type.clone()
        } else {
            format!("{}::{}", n.domain(), n.op_type)
        };
        let attrs: Vec<String> = n
            .attributes
            .iter()
            .map(|a| format!("{}={}", a.name(), attr_value(a)))
            .collect();
        let attrs = if attrs.is_empty() {
            String::new()
        } else {
            format!(" {{{}}}", attrs.join(", "))
        };
        let meta: Vec<String> = n
            .metadata_props
            .iter()
            .map(|e| {
                format!(
                    "{}={}",
                    e.key.as_deref().unwrap_or(""),
                    e.value.as_deref().unwrap_or("")
                )
            })
            .collect();
        let meta = if meta.is_empty() {
            String::new()
        } else {
            format!("  # {}", meta.join(" "))
        };
        let _ = writeln!(
            s,
            "{pad}  {} = {op} {:?}({}){attrs}{meta}",
            outs.join(", "),
            n.name(),
            ins.join(", ")
        );
        for a in &n.attributes {
            if let Some(sg) = a.g() {
                let _ = writeln!(s, "{pad}    .{}:", a.name());
                dump_graph(sg, indent + 3, s);
            }
            for (k, sg) in a.graphs().iter().enumerate() {
                let _ = writeln!(s, "{pad}    .{}[{k}]:", a.name());
                dump_graph(sg, indent + 3, s);
            }
        }
    }
}
