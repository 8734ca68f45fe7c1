//! IR -> protobuf. Deterministic: the same IR always gives the same message, and a graph that
//! was not changed gives back exactly the message it was imported from. Value names are labels
//! written where the value is used; payloads are shared (`Bytes`), never copied.

use crate::ir::{Attribute, Graph, Model, ValueId};
use crate::proto::{AttributeProto, GraphProto, ModelProto, NodeProto, ValueInfoProto};

/// Build the protobuf message of a model.
pub fn export_model(m: &Model) -> ModelProto {
    ModelProto {
        ir_version: m.ir_version,
        producer_name: m.producer_name.clone(),
        producer_version: m.producer_version.clone(),
        domain: m.domain.clone(),
        model_version: m.model_version,
        doc_string: m.doc_string.clone(),
        graph: Some(export_graph(&m.graph)),
        opset_import: m.opset_import.clone(),
        metadata_props: m.metadata_props.clone(),
        training_info: m.training_info.clone(),
        functions: m.functions.clone(),
        configuration: m.configuration.clone(),
    }
}

fn names(g: &Graph, vs: &[Option<ValueId>]) -> Vec<String> {
    vs.iter()
        .map(|v| match v {
            Some(v) => g.value_name(*v).to_string(),
            None => String::new(),
        })
        .collect()
}

fn value_info(g: &Graph, v: ValueId, proto: &ValueInfoProto) -> ValueInfoProto {
    let mut p = proto.clone();
    p.name = Some(g.value_name(v).to_string());
    p
}

fn export_attribute(a: &Attribute) -> AttributeProto {
    let mut p = a.proto.clone();
    p.g = a.g.as_ref().map(|g| Box::new(export_graph(g)));
    p.graphs = a.graphs.iter().map(export_graph).collect();
    p
}

/// The protobuf message of one node.
pub fn export_node(g: &Graph, id: crate::ir::NodeId) -> NodeProto {
    let n = &g.nodes[id];
    NodeProto {
        input: names(g, &n.inputs),
        output: names(g, &n.outputs),
        name: n.name.clone(),
        op_type: Some(n.op_type.clone()),
        attribute: n.attributes.iter().map(export_attribute).collect(),
        doc_string: n.doc_string.clone(),
        domain: n.domain.clone(),
        overload: n.overload.clone(),
        metadata_props: n.metadata_props.clone(),
        device_configurations: n.device_configurations.clone(),
    }
}

/// Build the protobuf message of one graph (recursively for subgraphs).
pub fn export_graph(g: &Graph) -> GraphProto {
    let node = g.order.iter().map(|&id| export_node(g, id)).collect();
    let initializer = g
        .initializers
        .iter()
        .map(|i| {
            let mut t = i.tensor.clone();
            t.name = Some(g.value_name(i.value).to_string());
            t
        })
        .collect();
    let sparse_initializer = g
        .sparse_initializers
        .iter()
        .map(|s| {
            let mut t = s.tensor.clone();
            if let Some(v) = t.values.as_mut() {
                v.name = Some(g.value_name(s.value).to_string());
            }
            t
        })
        .collect();
    GraphProto {
        node,
        name: g.name.clone(),
        initializer,
        doc_string: g.doc_string.clone(),
        input: g
            .inputs
            .iter()
            .map(|i| value_info(g, i.value, &i.proto))
            .collect(),
        output: g
            .outputs
            .iter()
            .map(|i| value_info(g, i.value, &i.proto))
            .collect(),
        value_info: g
            .value_info
            .iter()
            .map(|i| value_info(g, i.value, &i.proto))
            .collect(),
        quantization_annotation: g.quantization_annotation.clone(),
        sparse_initializer,
        metadata_props: g.metadata_props.clone(),
    }
}
