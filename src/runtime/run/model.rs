//! What running a model needs to know about it, read straight from the ModelProto:
//! graph inputs and outputs with their types and shapes, the `layer_ann` annotations,
//! and which integer inputs end up as indices (so random values stay in bounds).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};

use prost::Message;

use super::dtype::DType;
use super::error::VerifyError;
use crate::proto::{
    tensor_shape_proto::dimension::Value as DimValue, type_proto::Value as TypeValue, GraphProto,
    ModelProto, NodeProto, ValueInfoProto,
};
use crate::rewrite::exactness::EXACTNESS_KEY;

/// The node metadata key that pins a node to a device in ONNX Runtime.
pub const LAYER_ANN_KEY: &str = "layer_ann";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    Fixed(usize),
    /// A named symbolic dimension (`dim_param`).
    Param(String),
    /// Neither a value nor a name (or a negative value).
    Unknown,
}

/// The declared type of a graph input or output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueKind {
    /// A tensor; `dims` is `None` when the rank is not declared.
    Tensor {
        dtype: Option<DType>,
        elem_code: i32,
        dims: Option<Vec<Dim>>,
    },
    /// A sequence, map, optional or sparse tensor, or no type at all.
    Other(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueSpec {
    pub name: String,
    pub kind: ValueKind,
}

impl ValueSpec {
    pub fn dtype(&self) -> Option<DType> {
        match &self.kind {
            ValueKind::Tensor { dtype, .. } => *dtype,
            ValueKind::Other(_) => None,
        }
    }

    pub fn dims(&self) -> Option<&[Dim]> {
        match &self.kind {
            ValueKind::Tensor { dims, .. } => dims.as_deref(),
            ValueKind::Other(_) => None,
        }
    }

    /// `float32[p2o.DynamicDimension.0,3,?,?]`
    pub fn describe(&self) -> String {
        match &self.kind {
            ValueKind::Tensor {
                dtype,
                elem_code,
                dims,
            } => {
                let t = dtype.map_or_else(|| DType::describe_code(*elem_code), |d| d.name().into());
                match dims {
                    None => format!("{t}[rank unknown]"),
                    Some(dims) => {
                        let parts: Vec<String> = dims
                            .iter()
                            .map(|d| match d {
                                Dim::Fixed(v) => v.to_string(),
                                Dim::Param(p) => p.clone(),
                                Dim::Unknown => "?".into(),
                            })
                            .collect();
                        format!("{t}[{}]", parts.join(","))
                    }
                }
            }
            ValueKind::Other(s) => s.clone(),
        }
    }
}

/// What an integer or boolean input holds, where the graph or its name shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRole {
    /// An attention mask: 1 for a token, 0 for padding (named `*mask*`, or read where a
    /// com.microsoft attention or embedding operator takes its `[batch, sequence]` mask).
    Mask,
    /// Position ids (named `position_ids`, `positions`, `pos_ids`): the token's index in its
    /// sequence.
    Positions,
}

/// Where the size bounding an index comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexBound {
    /// A size known from the graph (initializer, constant or declared shape).
    Known(usize),
    /// The size of axis `axis` of graph input `input` (known once its dims are resolved).
    InputAxis { input: String, axis: usize },
    /// An index position whose range the graph does not show.
    Unknown,
}

#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub path: PathBuf,
    /// Graph inputs that are not initializers, in declaration order.
    pub inputs: Vec<ValueSpec>,
    pub outputs: Vec<ValueSpec>,
    /// Distinct `layer_ann` values on nodes (main graph and subgraphs), sorted.
    pub layer_annotations: Vec<String>,
    /// For integer inputs that reach an index position: the bounds found.
    pub index_bounds: HashMap<String, Vec<IndexBound>>,
    /// Float inputs used as Resize/Upsample scales.
    pub scale_inputs: Vec<String>,
    /// Integer and boolean inputs that hold what a caller gives rather than arbitrary values:
    /// attention masks (0/1) and position ids (0, 1, 2, ... along the sequence).
    pub roles: HashMap<String, InputRole>,
    /// The value of the model's `onnx_safeify.exactness` metadata entry, as written (the
    /// loosest exactness class of the rewrites that made it), when it has one.
    pub exactness: Option<String>,
}

impl ModelInfo {
    pub fn input(&self, name: &str) -> Option<&ValueSpec> {
        self.inputs.iter().find(|v| v.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&ValueSpec> {
        self.outputs.iter().find(|v| v.name == name)
    }
}

/// Reads and decodes `path` (memory-mapped, tensor payloads not copied).
pub fn read_model_proto(path: &Path) -> Result<ModelProto, VerifyError> {
    let file =
        File::open(path).map_err(|e| VerifyError::model(path, format!("cannot open: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| VerifyError::model(path, format!("cannot stat: {e}")))?;
    if meta.is_dir() {
        return Err(VerifyError::model(path, "is a folder, not an .onnx file"));
    }
    if meta.len() == 0 {
        return Err(VerifyError::model(path, "is empty, not an ONNX model"));
    }
    // SAFETY: the map is read-only; a file truncated by another process while we read it
    // is the usual caveat of memory maps and is accepted for a verification tool.
    let map = unsafe { memmap2::Mmap::map(&file) }
        .map_err(|e| VerifyError::model(path, format!("cannot map: {e}")))?;
    let bytes = bytes::Bytes::from_owner(map);
    ModelProto::decode(bytes.clone()).map_err(|e| {
        if crate::io::load::ends_early(&bytes) {
            return VerifyError::model(
                path,
                crate::io::load::truncated_message(bytes.len() as u64),
            );
        }
        VerifyError::model(
            path,
            format!("not a valid ONNX model (protobuf decode failed: {e})"),
        )
    })
}

/// Reads a model and extracts what the verifier needs.
pub fn load_model_info(path: &Path) -> Result<ModelInfo, VerifyError> {
    let model = read_model_proto(path)?;
    model_info_from_proto(path, &model)
}

pub fn model_info_from_proto(path: &Path, model: &ModelProto) -> Result<ModelInfo, VerifyError> {
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| VerifyError::model(path, "not an ONNX model: it has no graph"))?;
    let initializers: HashSet<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .chain(
            graph
                .sparse_initializer
                .iter()
                .filter_map(|s| s.values.as_ref().and_then(|v| v.name.as_deref())),
        )
        .collect();
    let inputs: Vec<ValueSpec> = graph
        .input
        .iter()
        .filter(|v| !initializers.contains(v.name.as_deref().unwrap_or("")))
        .map(value_spec)
        .collect();
    let outputs: Vec<ValueSpec> = graph.output.iter().map(value_spec).collect();
    if outputs.is_empty() {
        return Err(VerifyError::model(path, "the graph declares no outputs"));
    }
    if inputs
        .iter()
        .chain(outputs.iter())
        .any(|v| v.name.is_empty())
    {
        return Err(VerifyError::model(
            path,
            "a graph input or output has no name",
        ));
    }
    let mut annotations = BTreeSet::new();
    collect_annotations(graph, &mut annotations);
    let index_bounds = analyse_indices(graph, &inputs);
    let scale_inputs = analyse_scales(graph, &inputs);
    let roles = analyse_roles(graph, &inputs);
    Ok(ModelInfo {
        path: path.to_path_buf(),
        inputs,
        outputs,
        layer_annotations: annotations.into_iter().collect(),
        index_bounds,
        scale_inputs,
        roles,
        exactness: exactness_entry(model),
    })
}

/// The value of `model`'s [`EXACTNESS_KEY`] metadata entry (the last one, if repeated).
pub fn exactness_entry(model: &ModelProto) -> Option<String> {
    model
        .metadata_props
        .iter()
        .rev()
        .find(|p| p.key.as_deref() == Some(EXACTNESS_KEY))
        .map(|p| p.value.clone().unwrap_or_default())
}

fn value_spec(v: &ValueInfoProto) -> ValueSpec {
    let name = v.name.clone().unwrap_or_default();
    let kind = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(TypeValue::TensorType(t)) => {
            let code = t.elem_type.unwrap_or(0);
            ValueKind::Tensor {
                dtype: DType::from_code(code),
                elem_code: code,
                dims: t.shape.as_ref().map(|s| {
                    s.dim
                        .iter()
                        .map(|d| match &d.value {
                            Some(DimValue::DimValue(v)) if *v >= 0 => Dim::Fixed(*v as usize),
                            Some(DimValue::DimParam(p)) if !p.is_empty() => Dim::Param(p.clone()),
                            _ => Dim::Unknown,
                        })
                        .collect()
                }),
            }
        }
        Some(TypeValue::SequenceType(_)) => ValueKind::Other("a sequence".into()),
        Some(TypeValue::MapType(_)) => ValueKind::Other("a map".into()),
        Some(TypeValue::OptionalType(_)) => ValueKind::Other("an optional".into()),
        Some(TypeValue::SparseTensorType(_)) => ValueKind::Other("a sparse tensor".into()),
        Some(TypeValue::OpaqueType(_)) => ValueKind::Other("an opaque value".into()),
        None => ValueKind::Other("a value without a declared type".into()),
    };
    ValueSpec { name, kind }
}

fn collect_annotations(graph: &GraphProto, out: &mut BTreeSet<String>) {
    for node in &graph.node {
        for p in &node.metadata_props {
            if p.key.as_deref() == Some(LAYER_ANN_KEY) {
                if let Some(v) = p.value.as_deref() {
                    if !v.trim().is_empty() {
                        let _ = out.insert(v.trim().to_string());
                    }
                }
            }
        }
        for a in &node.attribute {
            if let Some(g) = &a.g {
                collect_annotations(g, out);
            }
            for g in &a.graphs {
                collect_annotations(g, out);
            }
        }
    }
}

fn attr_int(node: &NodeProto, name: &str) -> Option<i64> {
    node.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
        .and_then(|a| a.i)
}

/// Ops that carry an integer tensor's values through unchanged (slot 0 only where noted).
fn passes_values(op: &str, slot: usize) -> bool {
    match op {
        "Cast" | "Identity" | "Flatten" | "Transpose" | "CastLike" => slot == 0,
        "Reshape" | "Squeeze" | "Unsqueeze" | "Expand" | "Tile" | "Slice" => slot == 0,
        "Concat" => true,
        _ => false,
    }
}

/// The uses of a graph input's values: every (node, input slot) it reaches, following
/// value-preserving ops (Cast, Reshape, Unsqueeze, ...) in the main graph.
fn value_uses<'g>(
    graph: &'g GraphProto,
    consumers: &HashMap<&'g str, Vec<(usize, usize)>>,
    start: &'g str,
) -> Vec<(&'g NodeProto, usize)> {
    let mut uses = Vec::new();
    let mut visited: HashSet<&str> = HashSet::new();
    let mut work: Vec<&str> = vec![start];
    while let Some(t) = work.pop() {
        if !visited.insert(t) {
            continue;
        }
        for &(ni, slot) in consumers.get(t).map(Vec::as_slice).unwrap_or(&[]) {
            let node = &graph.node[ni];
            let op = node.op_type.as_deref().unwrap_or("");
            let domain = node.domain.as_deref().unwrap_or("");
            if matches!(domain, "" | "ai.onnx") && passes_values(op, slot) {
                if let Some(o) = node.output.first().filter(|o| !o.is_empty()) {
                    work.push(o.as_str());
                }
            } else {
                uses.push((node, slot));
            }
        }
    }
    uses
}

fn consumer_map(graph: &GraphProto) -> HashMap<&str, Vec<(usize, usize)>> {
    let mut consumers: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    for (ni, node) in graph.node.iter().enumerate() {
        for (slot, name) in node.input.iter().enumerate() {
            if !name.is_empty() {
                consumers.entry(name.as_str()).or_default().push((ni, slot));
            }
        }
    }
    consumers
}

/// An integer element type (of any width and sign).
fn is_integer(t: Option<DType>) -> bool {
    matches!(
        t,
        Some(
            DType::I8
                | DType::U8
                | DType::I16
                | DType::U16
                | DType::I32
                | DType::U32
                | DType::I64
                | DType::U64
        )
    )
}

/// Finds, for each integer graph input, the index positions it reaches and how they are
/// bounded.
fn analyse_indices(graph: &GraphProto, inputs: &[ValueSpec]) -> HashMap<String, Vec<IndexBound>> {
    let consumers = consumer_map(graph);
    let shapes = ShapeLookup::new(graph, inputs);
    let mut result = HashMap::new();
    for input in inputs {
        let is_int = is_integer(input.dtype());
        if !is_int {
            continue;
        }
        let mut bounds = Vec::new();
        for (node, slot) in value_uses(graph, &consumers, &input.name) {
            let op = node.op_type.as_deref().unwrap_or("");
            let domain = node.domain.as_deref().unwrap_or("");
            let data = node.input.first().map(String::as_str).unwrap_or("");
            match (domain, op, slot) {
                (
                    "" | "ai.onnx",
                    "Gather" | "GatherElements" | "Scatter" | "ScatterElements",
                    1,
                ) => {
                    let axis = attr_int(node, "axis").unwrap_or(0);
                    bounds.push(shapes.axis_bound(data, axis));
                }
                ("" | "ai.onnx", "GatherND" | "ScatterND", 1) => {
                    let batch = attr_int(node, "batch_dims").unwrap_or(0).max(0) as usize;
                    bounds.push(shapes.min_bound(data, batch));
                }
                ("" | "ai.onnx", "OneHot", 0) => bounds.push(IndexBound::Unknown),
                // input_ids (0), segment_ids (1) and position_ids (8) index the word (2),
                // segment (4) and position (3) tables.
                ("com.microsoft", "EmbedLayerNormalization", 0 | 1 | 8) => {
                    let table = match slot {
                        0 => 2,
                        1 => 4,
                        _ => 3,
                    };
                    let table = node.input.get(table).map(String::as_str).unwrap_or("");
                    bounds.push(shapes.axis_bound(table, 0));
                }
                ("com.microsoft", "GatherBlockQuantized", 1) => {
                    let axis = attr_int(node, "gather_axis").unwrap_or(0);
                    bounds.push(shapes.axis_bound(data, axis));
                }
                _ => {}
            }
        }
        if !bounds.is_empty() {
            let _ = result.insert(input.name.clone(), bounds);
        }
    }
    result
}

/// Masks and position ids among the integer and boolean graph inputs of rank 1 or more (a
/// rank-1 mask input of a com.microsoft operator is a length per batch entry, not a mask).
fn analyse_roles(graph: &GraphProto, inputs: &[ValueSpec]) -> HashMap<String, InputRole> {
    let consumers = consumer_map(graph);
    let mut roles = HashMap::new();
    for input in inputs {
        let int_or_bool = is_integer(input.dtype()) || input.dtype() == Some(DType::Bool);
        let rank = input.dims().map_or(0, <[Dim]>::len);
        if !int_or_bool || rank == 0 {
            continue;
        }
        let name = input.name.to_ascii_lowercase();
        let positions = matches!(name.as_str(), "position_ids" | "positions" | "pos_ids")
            || name.ends_with("position_ids");
        let mask_slot = rank >= 2
            && value_uses(graph, &consumers, &input.name)
                .iter()
                .any(|(n, slot)| {
                    matches!(
                        (
                            n.domain.as_deref().unwrap_or(""),
                            n.op_type.as_deref().unwrap_or(""),
                            *slot
                        ),
                        ("com.microsoft", "EmbedLayerNormalization", 7)
                            | ("com.microsoft", "Attention", 3)
                            | ("com.microsoft", "QAttention", 5)
                            | ("com.microsoft", "MultiHeadAttention", 4)
                            | ("com.microsoft", "DecoderMaskedMultiHeadAttention", 3)
                    )
                });
        let named_mask = name.contains("mask") && !name.contains("index") && rank >= 2;
        if positions {
            let _ = roles.insert(input.name.clone(), InputRole::Positions);
        } else if mask_slot || named_mask {
            let _ = roles.insert(input.name.clone(), InputRole::Mask);
        }
    }
    roles
}

/// Float graph inputs used as Resize/Upsample scales: random values must be positive.
fn analyse_scales(graph: &GraphProto, inputs: &[ValueSpec]) -> Vec<String> {
    let consumers = consumer_map(graph);
    inputs
        .iter()
        .filter(|i| {
            matches!(
                i.dtype(),
                Some(DType::F32 | DType::F16 | DType::F64 | DType::BF16)
            )
        })
        .filter(|i| {
            value_uses(graph, &consumers, &i.name)
                .iter()
                .any(|(n, slot)| {
                    matches!(
                        (n.op_type.as_deref().unwrap_or(""), *slot),
                        ("Resize", 2) | ("Upsample", 1)
                    )
                })
        })
        .map(|i| i.name.clone())
        .collect()
}

/// Declared shapes of tensors in a graph, as far as the file shows them.
struct ShapeLookup<'g> {
    fixed: HashMap<&'g str, Vec<Option<usize>>>,
    /// Graph inputs and their declared rank.
    inputs: HashMap<&'g str, Option<usize>>,
}

impl<'g> ShapeLookup<'g> {
    fn new(graph: &'g GraphProto, inputs: &'g [ValueSpec]) -> ShapeLookup<'g> {
        let mut fixed: HashMap<&str, Vec<Option<usize>>> = HashMap::new();
        for v in graph.value_info.iter().chain(graph.output.iter()) {
            if let (Some(name), Some(dims)) = (v.name.as_deref(), value_spec(v).dims()) {
                let dims = dims
                    .iter()
                    .map(|d| match d {
                        Dim::Fixed(v) => Some(*v),
                        _ => None,
                    })
                    .collect();
                let _ = fixed.insert(name, dims);
            }
        }
        for node in &graph.node {
            if node.op_type.as_deref() == Some("Constant") {
                let value = node
                    .attribute
                    .iter()
                    .find(|a| a.name.as_deref() == Some("value"))
                    .and_then(|a| a.t.as_ref());
                if let (Some(t), Some(out)) = (value, node.output.first()) {
                    let dims = t.dims.iter().map(|d| usize::try_from(*d).ok()).collect();
                    let _ = fixed.insert(out.as_str(), dims);
                }
            }
        }
        for t in &graph.initializer {
            if let Some(name) = t.name.as_deref() {
                let dims = t.dims.iter().map(|d| usize::try_from(*d).ok()).collect();
                let _ = fixed.insert(name, dims);
            }
        }
        ShapeLookup {
            fixed,
            inputs: inputs
                .iter()
                .map(|v| (v.name.as_str(), v.dims().map(<[Dim]>::len)))
                .collect(),
        }
    }

    fn axis_bound(&self, tensor: &str, axis: i64) -> IndexBound {
        if let Some(rank) = self.inputs.get(tensor) {
            let a = match (axis < 0, rank) {
                (false, _) => Some(axis),
                (true, Some(r)) => Some(axis + *r as i64),
                (true, None) => None,
            };
            return match a.and_then(|a| usize::try_from(a).ok()) {
                Some(axis) => IndexBound::InputAxis {
                    input: tensor.to_string(),
                    axis,
                },
                None => IndexBound::Unknown,
            };
        }
        match self.fixed.get(tensor) {
            Some(dims) => {
                let rank = dims.len() as i64;
                let a = if axis < 0 { axis + rank } else { axis };
                match usize::try_from(a).ok().and_then(|a| dims.get(a)) {
                    Some(Some(n)) => IndexBound::Known(*n),
                    _ => IndexBound::Unknown,
                }
            }
            None => IndexBound::Unknown,
        }
    }

    fn min_bound(&self, tensor: &str, from_axis: usize) -> IndexBound {
        match self.fixed.get(tensor) {
            Some(dims) if dims.len() > from_axis => {
                let known: Option<Vec<usize>> = dims[from_axis..].iter().copied().collect();
                match known.and_then(|k| k.into_iter().min()) {
                    Some(n) => IndexBound::Known(n),
                    None => IndexBound::Unknown,
                }
            }
            _ => IndexBound::Unknown,
        }
    }
}
