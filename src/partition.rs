//! `--cpu-subgraphs partition`: for runtimes without per-node placement, write the model as
//! segment models plus a manifest (YAML) giving their order, device, and the tensors each takes
//! and gives. Segments are maximal runs of one device in a topological order that keeps going
//! on the current device as long as it can (fewer device switches).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::ir::{Graph, Model, NodeId, Origin, ValueId};
use crate::proto::{GraphProto, ModelProto, TypeProto, ValueInfoProto};

/// Where a segment runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Gpu,
}

impl Device {
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }
}

/// One segment: nodes of one device, the values it takes and gives.
#[derive(Debug, Clone)]
pub struct Segment {
    pub device: Device,
    pub nodes: Vec<NodeId>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

/// Order the nodes (device-aware topological order) and cut them into segments.
pub fn plan(g: &Graph, is_cpu: &dyn Fn(NodeId) -> bool) -> Result<Vec<Segment>> {
    let pos: HashMap<NodeId, usize> = g.order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let consumers = g.consumers();
    let mut indeg: HashMap<NodeId, usize> = g.order.iter().map(|&n| (n, 0)).collect();
    for &n in &g.order {
        let node = g.node(n);
        let mut preds = BTreeSet::new();
        for v in node
            .inputs
            .iter()
            .flatten()
            .chain(node.implicit_inputs().iter())
        {
            if let Origin::Node { node: p, .. } = g.value(*v).origin {
                preds.insert(p);
            }
        }
        *indeg.entry(n).or_default() = preds.len();
    }
    let device = |n: NodeId| if is_cpu(n) { Device::Cpu } else { Device::Gpu };
    let mut ready: [BTreeSet<(usize, NodeId)>; 2] = [BTreeSet::new(), BTreeSet::new()];
    let slot = |d: Device| usize::from(d == Device::Gpu);
    for &n in &g.order {
        if indeg[&n] == 0 {
            ready[slot(device(n))].insert((pos[&n], n));
        }
    }
    let mut order = Vec::with_capacity(g.order.len());
    let mut cur = Device::Gpu;
    while order.len() < g.order.len() {
        if ready[slot(cur)].is_empty() {
            cur = if cur == Device::Gpu {
                Device::Cpu
            } else {
                Device::Gpu
            };
            if ready[slot(cur)].is_empty() {
                return Err(Error::invalid("the graph has a cycle"));
            }
        }
        let Some(first) = ready[slot(cur)].iter().next().copied() else {
            continue;
        };
        ready[slot(cur)].remove(&first);
        let n = first.1;
        order.push(n);
        let mut succ = BTreeSet::new();
        for v in g.node(n).outputs.iter().flatten() {
            for (c, _) in consumers.of(*v) {
                succ.insert(*c);
            }
        }
        for c in succ {
            if let Some(d) = indeg.get_mut(&c) {
                *d -= 1;
                if *d == 0 {
                    ready[slot(device(c))].insert((pos[&c], c));
                }
            }
        }
    }
    // Cut into runs.
    let mut segs: Vec<Segment> = Vec::new();
    for n in order {
        let d = device(n);
        match segs.last_mut() {
            Some(s) if s.device == d => s.nodes.push(n),
            _ => segs.push(Segment {
                device: d,
                nodes: vec![n],
                inputs: Vec::new(),
                outputs: Vec::new(),
            }),
        }
    }
    // A `Constant` node is copied into each segment that reads it rather than crossing as a
    // value: it costs nothing to run twice, and OpenVINO's ONNX front end cannot give a
    // Constant's output as a graph output ("node not found in graph cache", measured with
    // silero-vad under onnxruntime-openvino 1.24.1).
    let is_const = |n: NodeId| {
        let node = g.node(n);
        node.op_type == "Constant"
            && node.domain().is_empty()
            && node.inputs.iter().flatten().next().is_none()
            && node.implicit_inputs().is_empty()
    };
    let graph_outputs: HashSet<ValueId> = g.outputs.iter().map(|o| o.value).collect();
    let seg_of: HashMap<NodeId, usize> = segs
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.nodes.iter().map(move |&n| (n, i)))
        .collect();
    let reads = |n: NodeId| -> Vec<ValueId> {
        let node = g.node(n);
        node.inputs
            .iter()
            .flatten()
            .chain(node.implicit_inputs().iter())
            .copied()
            .collect()
    };
    for (i, seg) in segs.iter_mut().enumerate() {
        let mut copies: Vec<NodeId> = Vec::new();
        for &n in &seg.nodes {
            for v in reads(n) {
                if let Origin::Node { node: p, .. } = g.value(v).origin {
                    if is_const(p) && seg_of.get(&p) != Some(&i) && !copies.contains(&p) {
                        copies.push(p);
                    }
                }
            }
        }
        copies.sort_by_key(|n| pos[n]);
        for c in copies.into_iter().rev() {
            seg.nodes.insert(0, c);
        }
    }
    // Where a Constant is now copied into every segment that reads it, its original place keeps
    // it only when a node there or the graph's outputs read it.
    for (i, s) in segs.iter_mut().enumerate() {
        let here: HashSet<NodeId> = s.nodes.iter().copied().collect();
        s.nodes.retain(|&n| {
            if !is_const(n) || seg_of.get(&n) != Some(&i) {
                return true;
            }
            g.node(n).outputs.iter().flatten().any(|v| {
                graph_outputs.contains(v) || consumers.of(*v).iter().any(|(c, _)| here.contains(c))
            })
        });
    }
    // A segment left empty goes; its neighbours, if of one device, become one.
    let mut merged: Vec<Segment> = Vec::with_capacity(segs.len());
    for s in segs.into_iter().filter(|s| !s.nodes.is_empty()) {
        match merged.last_mut() {
            Some(last) if last.device == s.device => {
                for n in s.nodes {
                    if !last.nodes.contains(&n) {
                        last.nodes.push(n);
                    }
                }
            }
            _ => merged.push(s),
        }
    }
    let mut segs = merged;
    let homes: Vec<HashSet<NodeId>> = segs
        .iter()
        .map(|s| s.nodes.iter().copied().collect())
        .collect();
    // Interfaces.
    for (i, s) in segs.iter_mut().enumerate() {
        let mut ins: Vec<ValueId> = Vec::new();
        let mut outs: Vec<ValueId> = Vec::new();
        for &n in &s.nodes {
            let node = g.node(n);
            for v in node
                .inputs
                .iter()
                .flatten()
                .chain(node.implicit_inputs().iter())
            {
                let from_elsewhere = match g.value(*v).origin {
                    Origin::Node { node: p, .. } => !homes[i].contains(&p),
                    Origin::Input => g.initializer(*v).is_none(),
                    _ => false,
                };
                if from_elsewhere && !ins.contains(v) {
                    ins.push(*v);
                }
            }
            for v in node.outputs.iter().flatten() {
                let used_later =
                    !is_const(n) && consumers.of(*v).iter().any(|(c, _)| !homes[i].contains(c));
                if (used_later || graph_outputs.contains(v)) && !outs.contains(v) {
                    outs.push(*v);
                }
            }
        }
        s.inputs = ins;
        s.outputs = outs;
    }
    Ok(segs)
}

/// Build the segment models. `type_of` gives the declared or inferred type of a boundary value.
pub fn segment_models(
    model: &Model,
    segs: &[Segment],
    type_of: &dyn Fn(ValueId) -> Option<TypeProto>,
) -> Result<Vec<ModelProto>> {
    let g = &model.graph;
    let full = crate::export::export_model(model);
    let mut out = Vec::with_capacity(segs.len());
    for (i, s) in segs.iter().enumerate() {
        let vi = |v: ValueId| -> Result<ValueInfoProto> {
            let declared = g
                .inputs
                .iter()
                .chain(g.outputs.iter())
                .chain(g.value_info.iter())
                .find(|x| x.value == v)
                .and_then(|x| x.proto.r#type.clone());
            let ty = declared.or_else(|| type_of(v)).ok_or_else(|| {
                Error::new(
                    ErrorKind::Invalid,
                    format!(
                        "segment {i}: the type of '{}' is unknown, so it cannot cross a segment boundary",
                        g.value_name(v)
                    ),
                )
            })?;
            Ok(ValueInfoProto {
                name: Some(g.value_name(v).to_string()),
                r#type: Some(ty),
                ..Default::default()
            })
        };
        let used: HashSet<ValueId> = s
            .nodes
            .iter()
            .flat_map(|&n| {
                let node = g.node(n);
                node.inputs
                    .iter()
                    .flatten()
                    .chain(node.implicit_inputs().iter())
                    .copied()
                    .collect::<Vec<_>>()
            })
            .collect();
        let graph = GraphProto {
            node: s
                .nodes
                .iter()
                .map(|&n| crate::export::export_node(g, n))
                .collect(),
            name: Some(format!("{}_seg{i}", g.name.as_deref().unwrap_or("graph"))),
            initializer: g
                .initializers
                .iter()
                .filter(|t| used.contains(&t.value) && !s.inputs.contains(&t.value))
                .map(|t| t.tensor.to_proto(g.value_name(t.value)))
                .collect(),
            input: s.inputs.iter().map(|&v| vi(v)).collect::<Result<_>>()?,
            output: s.outputs.iter().map(|&v| vi(v)).collect::<Result<_>>()?,
            ..Default::default()
        };
        out.push(ModelProto {
            graph: Some(graph),
            ..full.clone_without_graph()
        });
    }
    Ok(out)
}

trait CloneWithoutGraph {
    fn clone_without_graph(&self) -> ModelProto;
}

impl CloneWithoutGraph for ModelProto {
    fn clone_without_graph(&self) -> ModelProto {
        ModelProto {
            ir_version: self.ir_version,
            producer_name: self.producer_name.clone(),
            producer_version: self.producer_version.clone(),
            domain: self.domain.clone(),
            model_version: self.model_version,
            doc_string: self.doc_string.clone(),
            graph: None,
            opset_import: self.opset_import.clone(),
            metadata_props: self.metadata_props.clone(),
            training_info: Vec::new(),
            functions: self.functions.clone(),
            configuration: self.configuration.clone(),
        }
    }
}

fn yaml_str(s: &str) -> String {
    // A JSON string is a valid YAML flow scalar.
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Write the segments beside `out` (`<stem>.segN.<device>.onnx`) and the manifest at `out`
/// (a `.yaml` path). Returns the files written.
pub fn save_partitioned(
    doc: &crate::Document,
    segs: &[Segment],
    models: Vec<ModelProto>,
    manifest: &Path,
) -> Result<Vec<PathBuf>> {
    let unknown = doc.source.unknown()?;
    if !unknown.is_empty() {
        // The segments are new models: there is no message of the input to carry them into.
        let found = unknown.list();
        return Err(crate::io::unknown::dropped_error(
            &found,
            "--cpu-subgraphs partition writes new segment models, which have no place for them",
        )
        .in_file(manifest));
    }
    let g = &doc.model.graph;
    let stem = manifest
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into());
    let mut written = Vec::new();
    let mut text = String::from(
        "# Written by onnx-safeify: run the segments in order; each takes its inputs from the\n\
         # model's inputs and earlier segments' outputs, by name.\nsegments:\n",
    );
    for (i, (s, m)) in segs.iter().zip(models).enumerate() {
        let file = format!("{stem}.seg{i}.{}.onnx", s.device.as_str());
        let path = manifest.with_file_name(&file);
        let sources = vec![crate::io::save::Source::new(
            doc.source.bytes.clone(),
            doc.source.path.clone(),
        )];
        let opts = crate::io::SaveOptions {
            protect: vec![doc.source.path.clone()],
            carry: None,
            weights: doc.weights,
        };
        if let Err(e) = crate::io::save_model(m, &path, Some(&doc.source.external), sources, &opts)
        {
            for p in &written {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
        written.push(path);
        let names = |vs: &[ValueId]| {
            vs.iter()
                .map(|&v| yaml_str(g.value_name(v)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        text.push_str(&format!(
            "  - file: {}\n    device: {}\n    inputs: [{}]\n    outputs: [{}]\n",
            yaml_str(&file),
            s.device.as_str(),
            names(&s.inputs),
            names(&s.outputs)
        ));
    }
    let outs: Vec<ValueId> = g.outputs.iter().map(|o| o.value).collect();
    text.push_str(&format!(
        "outputs: [{}]\n",
        outs.iter()
            .map(|&v| yaml_str(g.value_name(v)))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let tmp = manifest.with_file_name(format!(".{stem}.manifest.tmp-{}", std::process::id()));
    let res = std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, manifest))
        .map_err(|e| Error::io(manifest, "cannot write the manifest", e));
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        for p in &written {
            let _ = std::fs::remove_file(p);
        }
        return Err(e);
    }
    written.push(manifest.to_path_buf());
    Ok(written)
}

/// Does `node`, or any node of its bodies (at any depth), satisfy `pinned`?
pub fn holds_pin(node: &crate::ir::Node, pinned: &dyn Fn(&crate::ir::Node) -> bool) -> bool {
    pinned(node)
        || crate::ir::scope::bodies(node)
            .any(|(_, _, body)| body.order.iter().any(|&n| holds_pin(body.node(n), pinned)))
}

/// The CPU side of a partition for a runtime that compiles each segment from its declared
/// inputs and ignores pins (a target with `cpu_subgraphs: partition`, OpenVINO):
/// - a node whose bodies hold a pinned node is CPU work as a whole (a segment holds whole nodes
///   of the main graph);
/// - a node that reads a value of unknown rank made by CPU work is CPU work too, transitively
///   (a GPU segment would take that value as an input of unknown rank, which OpenVINO cannot
///   compile; measured with silero-vad's decoder).
///
/// Returns the CPU nodes and, of them, those added by the second step (graph order).
pub fn cpu_side(
    g: &Graph,
    pinned: &dyn Fn(&crate::ir::Node) -> bool,
    rank_known: &dyn Fn(ValueId) -> bool,
) -> (HashSet<NodeId>, Vec<NodeId>) {
    let mut cpu: HashSet<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|&n| holds_pin(g.node(n), pinned))
        .collect();
    let consumers = g.consumers();
    let mut added = HashSet::new();
    let mut work: Vec<NodeId> = g
        .order
        .iter()
        .copied()
        .filter(|n| cpu.contains(n))
        .collect();
    while let Some(n) = work.pop() {
        for v in g.node(n).outputs.iter().flatten() {
            if rank_known(*v) {
                continue;
            }
            for (c, _) in consumers.of(*v) {
                if cpu.insert(*c) {
                    added.insert(*c);
                    work.push(*c);
                }
            }
        }
    }
    let added = g
        .order
        .iter()
        .copied()
        .filter(|n| added.contains(n))
        .collect();
    (cpu, added)
}
