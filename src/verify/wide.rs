//! A float64 evaluation of a float32 model, to tell an ill-conditioned original from an
//! unfaithful rewrite.
//!
//! Where an output's row is nearly a cancellation (a layer norm whose mean is ~1000 times its
//! deviation: a Whisper encoder's residual stream near 4e3), every float32 evaluation rounds it by
//! `|mean| / std` ulps, ONNX Runtime's own kernel included (SkipLayerNormalization's sequential
//! Welford update), and two faithful evaluations part by more than the rounding class allows.
//! `verify` then runs the original once more with its float32 arithmetic in float64 and asks
//! whether the rewrite is about as close to that as the original is.
//!
//! [`widen`] rewrites the model proto: float32 initializers, constants and casts become float64;
//! float32 graph inputs are cast to float64 where they enter and float32 outputs cast back where
//! they leave (the interface is unchanged). An op ONNX Runtime has no float64 kernel for is run
//! in float32 between casts ([`Wide::keep_float`]; found by loading the model and reading the
//! node ONNX Runtime names). Models this cannot carry (float16, quantized, subgraphs, external
//! data) are refused with a reason: verify then keeps its plain verdict.

use std::collections::HashSet;

use crate::proto::{
    attribute_proto::AttributeType, tensor_proto::DataType, AttributeProto, ModelProto, NodeProto,
    TensorProto,
};

const FLOAT: i32 = DataType::Float as i32;
const DOUBLE: i32 = DataType::Double as i32;

/// The float64 form of a model and what it knows of its values.
pub struct Wide {
    pub model: ModelProto,
    /// Values that hold float64 in the wide model (float32 in the original).
    floats: HashSet<String>,
    /// The ops run in float32 between casts (no float64 kernel), in the order found.
    pub in_float: Vec<String>,
}

/// Ops whose outputs are never float (indices, shapes, booleans), whatever their inputs.
const NON_FLOAT_OUT: &[&str] = &[
    "Shape",
    "Size",
    "NonZero",
    "ArgMax",
    "ArgMin",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "Not",
    "And",
    "Or",
    "Xor",
    "IsNaN",
    "IsInf",
];

/// Ops whose float outputs are only some of them: (op, output slots that are float).
fn float_slots(op: &str, n: usize) -> Vec<usize> {
    match op {
        "TopK" | "MaxPool" | "Unique" => vec![0],
        // mask_index is int32.
        "EmbedLayerNormalization" => vec![0, 2],
        _ => (0..n).collect(),
    }
}

/// Elements of a float32 initializer or constant, as float64 bytes.
fn tensor_to_double(t: &mut TensorProto) -> Result<(), String> {
    if t.data_type != Some(FLOAT) {
        return Ok(());
    }
    if !t.external_data.is_empty() || t.data_location == Some(1) {
        return Err(format!(
            "initializer '{}' has external data",
            t.name.as_deref().unwrap_or("")
        ));
    }
    let vals: Vec<f32> = match &t.raw_data {
        Some(raw) => raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        None => t.float_data.clone(),
    };
    let mut raw = Vec::with_capacity(vals.len() * 8);
    for v in vals {
        raw.extend_from_slice(&f64::from(v).to_le_bytes());
    }
    t.float_data.clear();
    t.raw_data = Some(bytes::Bytes::from(raw));
    t.data_type = Some(DOUBLE);
    Ok(())
}

fn attr_tensor_double(a: &mut AttributeProto) -> Result<(), String> {
    if let Some(t) = a.t.as_mut() {
        tensor_to_double(t)?;
    }
    Ok(())
}

fn cast(input: &str, output: &str, to: i32, name: String) -> NodeProto {
    NodeProto {
        input: vec![input.to_string()],
        output: vec![output.to_string()],
        name: Some(name),
        op_type: Some("Cast".into()),
        attribute: vec![AttributeProto {
            name: Some("to".into()),
            i: Some(i64::from(to)),
            r#type: Some(AttributeType::Int as i32),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn is_narrow(dt: Option<i32>) -> bool {
    matches!(
        dt,
        Some(x) if x == DataType::Float16 as i32 || x == DataType::Bfloat16 as i32
    )
}

/// The model with its float32 arithmetic in float64 (see the module docs); `Err` says why it
/// cannot be made.
pub fn widen(original: &ModelProto) -> Result<Wide, String> {
    let mut model = original.clone();
    let Some(g) = model.graph.as_mut() else {
        return Err("no graph".into());
    };
    let mut floats: HashSet<String> = HashSet::new();
    for t in g.initializer.iter_mut() {
        if is_narrow(t.data_type) {
            return Err("the model holds float16 or bfloat16 tensors".into());
        }
        if t.data_type == Some(FLOAT) {
            tensor_to_double(t)?;
            let _ = floats.insert(t.name.clone().unwrap_or_default());
        }
    }
    let elem = |v: &crate::proto::ValueInfoProto| -> Option<i32> {
        match v.r#type.as_ref()?.value.as_ref()? {
            crate::proto::type_proto::Value::TensorType(t) => t.elem_type,
            _ => None,
        }
    };
    let init_names: HashSet<String> = g
        .initializer
        .iter()
        .filter_map(|t| t.name.clone())
        .collect();
    let mut head = Vec::new();
    let mut renames: Vec<(String, String)> = Vec::new();
    for (i, v) in g.input.iter().enumerate() {
        let name = v.name.clone().unwrap_or_default();
        if init_names.contains(&name) {
            continue;
        }
        if is_narrow(elem(v)) {
            return Err("the model has a float16 or bfloat16 input".into());
        }
        if elem(v) == Some(FLOAT) {
            let wide = format!("{name}::f64");
            head.push(cast(&name, &wide, DOUBLE, format!("wide_in_{i}")));
            let _ = floats.insert(wide.clone());
            renames.push((name, wide));
        }
    }
    let rename = |s: &mut String, renames: &[(String, String)]| {
        if let Some((_, to)) = renames.iter().find(|(from, _)| from == s) {
            *s = to.clone();
        }
    };
    // Outputs: the producing node writes NAME::f64, a cast at the end gives NAME.
    let mut tail = Vec::new();
    let mut out_renames: Vec<(String, String)> = Vec::new();
    for (i, v) in g.output.iter().enumerate() {
        let name = v.name.clone().unwrap_or_default();
        if is_narrow(elem(v)) {
            return Err("the model has a float16 or bfloat16 output".into());
        }
        if elem(v) == Some(FLOAT)
            && !renames.iter().any(|(f, _)| *f == name)
            && !init_names.contains(&name)
        {
            let wide = format!("{name}::f64");
            tail.push(cast(&wide, &name, FLOAT, format!("wide_out_{i}")));
            out_renames.push((name, wide));
        }
    }
    let mut body = Vec::with_capacity(g.node.len());
    for (i, mut node) in std::mem::take(&mut g.node).into_iter().enumerate() {
        let n = &mut node;
        let op = n.op_type.clone().unwrap_or_default();
        if n.attribute
            .iter()
            .any(|a| a.g.is_some() || !a.graphs.is_empty())
        {
            return Err(format!("node {op} has a subgraph"));
        }
        if op.contains("Quantize") || op.starts_with("QLinear") || op.contains("Integer") {
            return Err(format!("the model is quantized ({op})"));
        }
        if n.name.as_deref().unwrap_or("").is_empty() {
            n.name = Some(format!("wide_node_{i}"));
        }
        for s in n.input.iter_mut() {
            rename(s, &renames);
            rename(s, &out_renames);
        }
        for s in n.output.iter_mut() {
            rename(s, &out_renames);
        }
        let mut float_out = n.input.iter().any(|s| floats.contains(s));
        for a in n.attribute.iter_mut() {
            let name = a.name.clone().unwrap_or_default();
            match (op.as_str(), name.as_str()) {
                ("Cast", "to") | (_, "dtype") => {
                    if a.i == Some(i64::from(FLOAT)) {
                        a.i = Some(i64::from(DOUBLE));
                        float_out = true;
                    } else if op == "Cast" {
                        float_out = false;
                    }
                }
                ("Constant", "value") | ("ConstantOfShape", "value") => {
                    if a.t.as_ref().and_then(|t| t.data_type) == Some(FLOAT) {
                        float_out = true;
                    }
                    attr_tensor_double(a)?;
                }
                ("Constant", "value_float") | ("Constant", "value_floats") => {
                    let vals: Vec<f32> = match a.f {
                        Some(f) if name == "value_float" => vec![f],
                        _ => a.floats.clone(),
                    };
                    let mut raw = Vec::with_capacity(vals.len() * 8);
                    for v in &vals {
                        raw.extend_from_slice(&f64::from(*v).to_le_bytes());
                    }
                    *a = AttributeProto {
                        name: Some("value".into()),
                        r#type: Some(AttributeType::Tensor as i32),
                        t: Some(Box::new(TensorProto {
                            dims: if name == "value_float" {
                                vec![]
                            } else {
                                vec![vals.len() as i64]
                            },
                            data_type: Some(DOUBLE),
                            raw_data: Some(bytes::Bytes::from(raw)),
                            ..Default::default()
                        })),
                        ..Default::default()
                    };
                    float_out = true;
                }
                _ => {}
            }
        }
        if float_out && !NON_FLOAT_OUT.contains(&op.as_str()) {
            for k in float_slots(&op, n.output.len()) {
                if let Some(o) = n.output.get(k).filter(|o| !o.is_empty()) {
                    let _ = floats.insert(o.clone());
                }
            }
        }
        match skip_norm_in_double(&node) {
            Some(nodes) => body.extend(nodes),
            None => body.push(node),
        }
    }
    g.value_info.clear();
    g.node = head.into_iter().chain(body).chain(tail).collect();
    Ok(Wide {
        model,
        floats,
        in_float: Vec::new(),
    })
}

/// ONNX Runtime's SkipLayerNormalization and SkipSimplifiedLayerNormalization (com.microsoft)
/// have no float64 kernel: in the float64 evaluation they are `Add` (input, skip, bias) and the
/// default-domain `LayerNormalization` / `SimplifiedLayerNormalization` over the last axis, which
/// ONNX Runtime runs in float64, with the sum as output 3 (ContribOperators.md). Not this
/// compiler's decomposition: the reference stays independent of the rewrite it judges. The
/// statistics (outputs 1 and 2: mean and inverse deviation) are the layer norm's own, which it
/// gives in float32 for a float64 input, cast up for the float64 graph. `None` for other nodes
/// (and for a mean read from SkipSimplifiedLayerNormalization, which has none).
fn skip_norm_in_double(n: &NodeProto) -> Option<Vec<NodeProto>> {
    let op = n.op_type.as_deref()?;
    let simplified = match (op, n.domain.as_deref()) {
        ("SkipLayerNormalization", Some("com.microsoft")) => false,
        ("SkipSimplifiedLayerNormalization", Some("com.microsoft")) => true,
        _ => return None,
    };
    let out = |k: usize| n.output.get(k).filter(|o| !o.is_empty());
    if simplified && out(1).is_some() {
        return None;
    }
    let inp = |k: usize| n.input.get(k).filter(|o| !o.is_empty()).cloned();
    let (x, skip, gamma) = (inp(0)?, inp(1)?, inp(2)?);
    let (beta, bias) = if simplified {
        (None, inp(3))
    } else {
        (inp(3), inp(4))
    };
    let eps = n
        .attribute
        .iter()
        .find(|a| a.name.as_deref() == Some("epsilon"))
        .and_then(|a| a.f)
        .unwrap_or(1e-12);
    let name = n.name.clone().unwrap_or_default();
    let tmp = |s: &str| format!("{name}::{s}");
    let sum_name = out(3).cloned().unwrap_or_else(|| tmp("sum"));
    let node = |op: &str, ins: Vec<String>, outs: Vec<String>, suffix: &str| NodeProto {
        input: ins,
        output: outs,
        name: Some(format!("{name}::{suffix}")),
        op_type: Some(op.into()),
        ..Default::default()
    };
    let mut v = Vec::new();
    match bias {
        Some(b) => {
            v.push(node("Add", vec![x, skip], vec![tmp("xs")], "add"));
            v.push(node(
                "Add",
                vec![tmp("xs"), b],
                vec![sum_name.clone()],
                "add_bias",
            ));
        }
        None => v.push(node("Add", vec![x, skip], vec![sum_name.clone()], "add")),
    }
    let mut ins = vec![sum_name, gamma];
    if let Some(b) = beta {
        ins.push(b);
    }
    let ln_op = if simplified {
        "SimplifiedLayerNormalization"
    } else {
        "LayerNormalization"
    };
    // (Simplified)LayerNormalization's outputs: Y, (Mean,) InvStdDev, in float32 here.
    let mut outs = vec![n.output.first()?.clone()];
    let mut ups = Vec::new();
    let stats: &[usize] = if simplified { &[2] } else { &[1, 2] };
    for &k in stats {
        match out(k) {
            Some(o) => {
                let narrow = format!("{o}::f32");
                ups.push(cast(&narrow, o, DOUBLE, format!("{name}::stat_{k}")));
                outs.push(narrow);
            }
            None => outs.push(String::new()),
        }
    }
    while outs.last().is_some_and(|o| o.is_empty()) {
        let _ = outs.pop();
    }
    let mut ln = node(ln_op, ins, outs, "norm");
    ln.attribute = vec![
        AttributeProto {
            name: Some("axis".into()),
            i: Some(-1),
            r#type: Some(AttributeType::Int as i32),
            ..Default::default()
        },
        AttributeProto {
            name: Some("epsilon".into()),
            f: Some(eps),
            r#type: Some(AttributeType::Float as i32),
            ..Default::default()
        },
    ];
    v.push(ln);
    v.extend(ups);
    Some(v)
}

impl Wide {
    /// The node ONNX Runtime's load `error` names (in quotes or parentheses), if any.
    pub fn node_named_in(&self, error: &str) -> Option<usize> {
        let g = self.model.graph.as_ref()?;
        g.node.iter().position(|n| {
            let name = n.name.as_deref().unwrap_or("");
            !name.is_empty()
                && !name.starts_with("wide_keep_")
                && (error.contains(&format!("'{name}'")) || error.contains(&format!("({name})")))
        })
    }

    /// Runs node `idx` in float32: its float64 inputs cast down before it, its float outputs
    /// cast up after it. `false` when the node is already a cast of this module or has no float
    /// value to cast.
    pub fn keep_float(&mut self, idx: usize) -> bool {
        let floats = &self.floats;
        let Some(g) = self.model.graph.as_mut() else {
            return false;
        };
        let Some(node) = g.node.get(idx) else {
            return false;
        };
        let op = node.op_type.clone().unwrap_or_default();
        let name = node.name.clone().unwrap_or_default();
        if name.starts_with("wide_") && op == "Cast" {
            return false;
        }
        let mut before = Vec::new();
        let mut after = Vec::new();
        let mut node = node.clone();
        for (k, s) in node.input.iter_mut().enumerate() {
            if floats.contains(s) {
                let narrow = format!("{s}::f32:{idx}:{k}");
                before.push(cast(s, &narrow, FLOAT, format!("wide_keep_in_{idx}_{k}")));
                *s = narrow;
            }
        }
        for k in float_slots(&op, node.output.len()) {
            if let Some(o) = node
                .output
                .get_mut(k)
                .filter(|o| floats.contains(o.as_str()))
            {
                let narrow = format!("{o}::f32");
                after.push(cast(&narrow, o, DOUBLE, format!("wide_keep_out_{idx}_{k}")));
                *o = narrow;
            }
        }
        if before.is_empty() && after.is_empty() {
            return false;
        }
        node.name = Some(format!("wide_keep_{name}"));
        let _ = g
            .node
            .splice(idx..=idx, before.into_iter().chain([node]).chain(after));
        self.in_float.push(op);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{GraphProto, ValueInfoProto};

    fn vi(name: &str, elem: i32) -> ValueInfoProto {
        ValueInfoProto {
            name: Some(name.into()),
            r#type: Some(crate::proto::TypeProto {
                value: Some(crate::proto::type_proto::Value::TensorType(
                    crate::proto::type_proto::Tensor {
                        elem_type: Some(elem),
                        shape: None,
                    },
                )),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn widen_casts_at_the_interface_and_keeps_a_node_in_float() {
        let node = NodeProto {
            input: vec!["x".into(), "w".into()],
            output: vec!["y".into()],
            name: Some("attn".into()),
            op_type: Some("Attention".into()),
            ..Default::default()
        };
        let w = TensorProto {
            name: Some("w".into()),
            dims: vec![2],
            data_type: Some(FLOAT),
            float_data: vec![1.5, -2.0],
            ..Default::default()
        };
        let m = ModelProto {
            graph: Some(GraphProto {
                node: vec![node],
                input: vec![vi("x", FLOAT)],
                output: vec![vi("y", FLOAT)],
                initializer: vec![w],
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut wide = widen(&m).unwrap();
        let g = wide.model.graph.as_ref().unwrap();
        let ops: Vec<&str> = g
            .node
            .iter()
            .map(|n| n.op_type.as_deref().unwrap())
            .collect();
        assert_eq!(ops, ["Cast", "Attention", "Cast"]);
        assert_eq!(g.node[1].input, ["x::f64", "w"]);
        assert_eq!(g.node[1].output, ["y::f64"]);
        assert_eq!(g.initializer[0].data_type, Some(DOUBLE));
        assert_eq!(g.initializer[0].raw_data.as_ref().unwrap().len(), 16);
        let idx = wide
            .node_named_in(
                "Could not find an implementation for Attention(1) node with name 'attn'",
            )
            .unwrap();
        assert!(wide.keep_float(idx));
        let g = wide.model.graph.as_ref().unwrap();
        let ops: Vec<&str> = g
            .node
            .iter()
            .map(|n| n.op_type.as_deref().unwrap())
            .collect();
        assert_eq!(ops, ["Cast", "Cast", "Cast", "Attention", "Cast", "Cast"]);
        assert_eq!(wide.in_float, ["Attention"]);
        // A SkipLayerNormalization becomes Add and LayerNormalization (float64 kernels).
        let sln = NodeProto {
            input: vec!["x".into(), "x".into(), "w".into(), "".into(), "w".into()],
            output: vec!["y".into(), "".into(), "".into(), "s".into()],
            name: Some("sln".into()),
            op_type: Some("SkipLayerNormalization".into()),
            domain: Some("com.microsoft".into()),
            ..Default::default()
        };
        let mut m2 = m.clone();
        m2.graph.as_mut().unwrap().node = vec![sln];
        let wide = widen(&m2).unwrap();
        let g = wide.model.graph.as_ref().unwrap();
        let ops: Vec<&str> = g
            .node
            .iter()
            .map(|n| n.op_type.as_deref().unwrap())
            .collect();
        assert_eq!(ops, ["Cast", "Add", "Add", "LayerNormalization", "Cast"]);
        assert_eq!(g.node[2].output, ["s"]);
        assert_eq!(g.node[3].input, ["s", "w"]);
        // float16 models are not widened.
        let mut half = m.clone();
        half.graph.as_mut().unwrap().initializer[0].data_type = Some(DataType::Float16 as i32);
        assert!(widen(&half).is_err());
    }
}
