//! `inspect`: what a model contains, at a glance.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::ir::dump::{tensor_bytes, type_string};
use crate::ir::{Graph, Model};

/// The facts `inspect` reports.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub ir_version: i64,
    pub producer: String,
    pub opsets: Vec<(String, i64)>,
    pub inputs: Vec<(String, String)>,
    pub outputs: Vec<(String, String)>,
    /// `domain::op` (or `op` for the default domain) -> count, subgraphs included.
    pub ops: BTreeMap<String, usize>,
    pub nodes: usize,
    pub subgraphs: usize,
    pub max_depth: usize,
    pub initializers: usize,
    pub initializer_bytes: u64,
    pub external_tensors: usize,
    pub external_bytes: u64,
    pub functions: Vec<String>,
    /// Element type and shape of each entry of `inputs`, in the same order.
    pub input_types: Vec<PortType>,
    /// Element type and shape of each entry of `outputs`, in the same order.
    pub output_types: Vec<PortType>,
    /// What shape and type inference establishes for the main graph's node outputs.
    pub coverage: Coverage,
}

/// How much of a graph inference sees: of the values its nodes compute (main graph), how many
/// have a known element type, a known rank, and a full shape (every dim a number or a name
/// that takes its size from an input, so known once the inputs' sizes are: the sizes used).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Node outputs of the main graph.
    pub values: usize,
    pub dtype: usize,
    pub rank: usize,
    /// Every dim known or symbolic.
    pub shape: usize,
    /// Every dim a number.
    pub static_shape: usize,
    /// Operators (`domain::op`) whose outputs miss a type, rank or full shape, with how many
    /// such outputs, most first.
    pub gaps: Vec<(String, usize)>,
}

impl Coverage {
    /// Measure what inference finds on `m`'s main graph. A dimension of an input that the
    /// file leaves open without a name is named for this (`x.0`): a size derived from the
    /// inputs' sizes is then an expression, fixed by the sizes used.
    pub fn measure(m: &Model) -> Coverage {
        let opts = crate::infer::InferOptions {
            name_open_input_dims: true,
            ..Default::default()
        };
        let facts = crate::infer::infer_model(m, &opts);
        let g = &m.graph;
        let mut c = Coverage::default();
        let mut gaps: BTreeMap<String, usize> = BTreeMap::new();
        for &id in &g.order {
            let Some(n) = g.nodes.node_weight(id) else {
                continue;
            };
            for v in n.outputs.iter().flatten() {
                c.values += 1;
                let info = facts.info(*v);
                let dt = info.dtype.is_some();
                let full = info
                    .shape
                    .as_ref()
                    .is_some_and(|s| s.iter().all(|d| !matches!(d, crate::infer::Dim::Unknown)));
                c.dtype += usize::from(dt);
                c.rank += usize::from(info.shape.is_some());
                c.shape += usize::from(full);
                c.static_shape += usize::from(info.dims_known().is_some());
                if !(dt && full) {
                    let key = if n.domain().is_empty() {
                        n.op_type.clone()
                    } else {
                        format!("{}::{}", n.domain(), n.op_type)
                    };
                    *gaps.entry(key).or_default() += 1;
                }
            }
        }
        let mut gaps: Vec<(String, usize)> = gaps.into_iter().collect();
        gaps.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        c.gaps = gaps;
        c
    }

    /// `part` of the values as a percentage (100 for a graph without values).
    pub fn percent(&self, part: usize) -> f64 {
        if self.values == 0 {
            100.0
        } else {
            (part as f64) * 100.0 / (self.values as f64)
        }
    }
}

/// One dimension of a declared shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeDim {
    /// A number (`dim_value`).
    Known(i64),
    /// A symbolic name (`dim_param`).
    Sym(String),
    /// Neither is set.
    Unknown,
}

/// The declared type of a graph input or output, as far as it is a tensor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortType {
    /// Element type name (`float`, `int64`...); `None` when the value is not a tensor.
    pub dtype: Option<String>,
    /// Declared dims; `None` when the rank is unknown or the value is not a tensor.
    pub shape: Option<Vec<ShapeDim>>,
}

fn port_type(t: Option<&crate::proto::TypeProto>) -> PortType {
    use crate::proto::tensor_shape_proto::dimension::Value as DV;
    use crate::proto::type_proto::Value as TV;
    let Some(TV::TensorType(tt)) = t.and_then(|t| t.value.as_ref()) else {
        return PortType::default();
    };
    PortType {
        dtype: Some(crate::tensor::dtype_name(tt.elem_type.unwrap_or(0))),
        shape: tt.shape.as_ref().map(|s| {
            s.dim
                .iter()
                .map(|d| match &d.value {
                    Some(DV::DimValue(v)) => ShapeDim::Known(*v),
                    Some(DV::DimParam(p)) if !p.is_empty() => ShapeDim::Sym(p.clone()),
                    _ => ShapeDim::Unknown,
                })
                .collect()
        }),
    }
}

/// Summarise a model.
pub fn summarize(m: &Model) -> Summary {
    let mut s = Summary {
        ir_version: m.ir_version.unwrap_or(0),
        producer: format!(
            "{} {}",
            m.producer_name.as_deref().unwrap_or(""),
            m.producer_version.as_deref().unwrap_or("")
        )
        .trim()
        .to_string(),
        ..Summary::default()
    };
    for o in &m.opset_import {
        let d = o.domain.as_deref().unwrap_or("");
        s.opsets.push((
            if d.is_empty() {
                "ai.onnx".into()
            } else {
                d.into()
            },
            o.version.unwrap_or(0),
        ));
    }
    let g = &m.graph;
    s.inputs = g
        .inputs
        .iter()
        .filter(|i| g.initializer(i.value).is_none())
        .map(|i| {
            (
                g.value_name(i.value).to_string(),
                type_string(i.proto.r#type.as_ref()),
            )
        })
        .collect();
    s.outputs = g
        .outputs
        .iter()
        .map(|i| {
            (
                g.value_name(i.value).to_string(),
                type_string(i.proto.r#type.as_ref()),
            )
        })
        .collect();
    s.input_types = g
        .inputs
        .iter()
        .filter(|i| g.initializer(i.value).is_none())
        .map(|i| port_type(i.proto.r#type.as_ref()))
        .collect();
    s.output_types = g
        .outputs
        .iter()
        .map(|i| port_type(i.proto.r#type.as_ref()))
        .collect();
    m.graph.walk(0, &mut |g: &Graph, depth| {
        if depth > 0 {
            s.subgraphs += 1;
        }
        s.max_depth = s.max_depth.max(depth);
        for &id in &g.order {
            let n = &g.nodes[id];
            let key = if n.domain().is_empty() {
                n.op_type.clone()
            } else {
                format!("{}::{}", n.domain(), n.op_type)
            };
            *s.ops.entry(key).or_default() += 1;
            s.nodes += 1;
        }
        for i in &g.initializers {
            s.initializers += 1;
            let b = tensor_bytes(i.tensor.view());
            s.initializer_bytes += b;
            let r = i.tensor.rest();
            if crate::io::external::is_external(r) && !crate::io::computed::is_computed(r) {
                s.external_tensors += 1;
                s.external_bytes += b;
            }
        }
        s.initializers += g.sparse_initializers.len();
    });
    s.functions = m
        .functions
        .iter()
        .map(|f| {
            format!(
                "{}::{}",
                f.domain.as_deref().unwrap_or(""),
                f.name.as_deref().unwrap_or("")
            )
        })
        .collect();
    s.coverage = Coverage::measure(m);
    s
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Render a summary as text.
pub fn render_text(s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "ir_version   {}", s.ir_version);
    if !s.producer.is_empty() {
        let _ = writeln!(out, "producer     {}", s.producer);
    }
    let opsets: Vec<String> = s.opsets.iter().map(|(d, v)| format!("{d} {v}")).collect();
    let _ = writeln!(out, "opsets       {}", opsets.join(", "));
    for (n, t) in &s.inputs {
        let _ = writeln!(out, "input        {n}: {t}");
    }
    for (n, t) in &s.outputs {
        let _ = writeln!(out, "output       {n}: {t}");
    }
    let _ = writeln!(
        out,
        "nodes        {} ({} subgraphs, nesting depth {})",
        s.nodes, s.subgraphs, s.max_depth
    );
    let _ = writeln!(
        out,
        "initializers {} ({})",
        s.initializers,
        human(s.initializer_bytes)
    );
    if s.external_tensors > 0 {
        let _ = writeln!(
            out,
            "external     {} tensors ({})",
            s.external_tensors,
            human(s.external_bytes)
        );
    }
    if !s.functions.is_empty() {
        let _ = writeln!(out, "functions    {}", s.functions.join(", "));
    }
    let c = &s.coverage;
    let _ = writeln!(
        out,
        "inferred     {} values: type {:.1}%, rank {:.1}%, full shape {:.1}% ({:.1}% static)",
        c.values,
        c.percent(c.dtype),
        c.percent(c.rank),
        c.percent(c.shape),
        c.percent(c.static_shape)
    );
    if !c.gaps.is_empty() {
        let gaps: Vec<String> = c
            .gaps
            .iter()
            .take(6)
            .map(|(op, n)| format!("{op} {n}"))
            .collect();
        let more = if c.gaps.len() > 6 { ", ..." } else { "" };
        let _ = writeln!(out, "not inferred {}{more}", gaps.join(", "));
    }
    let _ = writeln!(out, "ops:");
    let mut ops: Vec<(&String, &usize)> = s.ops.iter().collect();
    ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (op, n) in ops {
        let _ = writeln!(out, "  {n:>6}  {op}");
    }
    out
}

/// Render a summary as JSON (`inspect --format json`):
///
/// ```json
/// {"ir_version": 8, "producer": "...", "opsets": [{"domain": "ai.onnx", "version": 17}],
///  "inputs": [{"name": "x", "type": "float[N,3,64,64]", "dtype": "float",
///              "shape": ["N", 3, 64, 64]}],
///  "outputs": [...], "nodes": 76, "subgraphs": 0, "max_depth": 0,
///  "ops": {"Conv": 27, ...},
///  "initializers": {"count": 106, "bytes": 235724},
///  "external_data": {"tensors": 0, "bytes": 0}, "functions": [],
///  "inference": {"values": 76, "dtype": {"count": 76, "percent": 100.0},
///                "rank": {...}, "shape": {...}, "static_shape": {...},
///                "gaps": {"com.microsoft::Foo": 2}}}
/// ```
///
/// A shape is `null` when the rank is not declared; a dim is a number, a symbolic name, or
/// `null` when neither is set. `ops` counts subgraph nodes too; `dtype` and `shape` are `null`
/// for non-tensor values. `inference` counts the main graph's node outputs whose element type,
/// rank, full shape (every dim a number or a name) and static shape inference knows; `gaps`
/// counts, per operator, the outputs that miss a type or a full shape.
pub fn to_json(s: &Summary) -> String {
    use serde_json::{json, Value};
    let ports = |names: &[(String, String)], types: &[PortType]| -> Value {
        names
            .iter()
            .enumerate()
            .map(|(i, (name, ty))| {
                let t = types.get(i).cloned().unwrap_or_default();
                let shape = t.shape.map(|dims| {
                    dims.into_iter()
                        .map(|d| match d {
                            ShapeDim::Known(v) => json!(v),
                            ShapeDim::Sym(n) => json!(n),
                            ShapeDim::Unknown => Value::Null,
                        })
                        .collect::<Vec<_>>()
                });
                json!({"name": name, "type": ty, "dtype": t.dtype, "shape": shape})
            })
            .collect()
    };
    let part = |n: usize| {
        let pct = (s.coverage.percent(n) * 10.0).round() / 10.0;
        json!({"count": n, "percent": pct})
    };
    let v = json!({
        "ir_version": s.ir_version,
        "producer": s.producer,
        "opsets": s.opsets.iter().map(|(d, v)| json!({"domain": d, "version": v})).collect::<Vec<_>>(),
        "inputs": ports(&s.inputs, &s.input_types),
        "outputs": ports(&s.outputs, &s.output_types),
        "nodes": s.nodes,
        "subgraphs": s.subgraphs,
        "max_depth": s.max_depth,
        "ops": s.ops,
        "initializers": {"count": s.initializers, "bytes": s.initializer_bytes},
        "external_data": {"tensors": s.external_tensors, "bytes": s.external_bytes},
        "functions": s.functions,
        "inference": {
            "values": s.coverage.values,
            "dtype": part(s.coverage.dtype),
            "rank": part(s.coverage.rank),
            "shape": part(s.coverage.shape),
            "static_shape": part(s.coverage.static_shape),
            "gaps": s.coverage.gaps.iter().map(|(k, n)| (k.clone(), json!(n))).collect::<serde_json::Map<String, Value>>(),
        },
    });
    serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
}
