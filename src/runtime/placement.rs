//! Where ONNX Runtime will run each node of a graph under a target's execution provider,
//! predicted the way its partitioner decides (`graph_partitioner.cc` and the provider's
//! `GetCapability`):
//!
//! 1. a `Constant` node is an initializer to the runtime, on neither side;
//! 2. a node pinned with the compile's `layer_ann` annotation goes to the CPU (ONNX Runtime
//!    1.32 assigns it before partitioning, when the session sets
//!    `session.layer_assignment_settings`);
//! 3. the provider claims a node when it registers a kernel for the node's domain, op, schema
//!    since-version and element types ([`super::capability`]), its `GetCapability` does not
//!    pass over the node by a per-node check of its own ([`Profile::declines`]: WebGPU's
//!    Attention with past or present), and the kernel is not on the known-deficient list;
//! 4. of the claimed nodes, those ONNX Runtime prefers on the CPU move there
//!    (`GetCpuPreferredNodes`, `fallback_cpu_capability.cc`, which the DirectML, CUDA, JSEP and
//!    WebGPU providers all call): starting from the consumers of values a provider kernel
//!    leaves in CPU memory (`Shape`, `Size`...), a node moves when each of its inputs is a
//!    small initializer (at most 100 elements), a graph input, or a CPU value the kernel does
//!    not itself declare as a CPU input, and none is float16/bfloat16/float8; its outputs then
//!    become CPU values in turn. Nodes already on the CPU pass their outputs on the same way;
//!    For a provider that prefers the NHWC layout (WebGPU) the partitioner assigns the nodes
//!    the first `GetCapability` returned, runs the layout transformation and calls
//!    `GetCapability` again whenever the first call returned any node (`GetCapabilityForEP`,
//!    graph_partitioner.cc). In that second call the assigned nodes are neither tentative nor
//!    CPU nodes (`GetCpuPreferredNodes` follows only unassigned or CPU-assigned nodes), so the
//!    only tentative nodes are those the first call preferred on the CPU, and the only seeds
//!    are their own CPU-memory outputs: a node the first call moved because of a `Shape` the
//!    provider kept goes back to the provider (onnxruntime-web 1.30 logs the first call's
//!    "Force fallback" lines and then places those nodes on WebGPU);
//! 5. every other node goes to the CPU provider, which must register a kernel for it:
//!    otherwise the session cannot be created (the model does not load).
//!
//! Before all this, the graph transformations ONNX Runtime applies ahead of placement at the
//! session's optimisation level ([`super::transforms`]: constant folding, ReshapeFusion): a
//! node they remove runs nowhere ("folded", "removed"), and a value they make an initializer
//! counts as one for the CPU preference.
//!
//! What this does not model, and says so: ONNX Runtime's fusions that rename and merge nodes
//! without moving them between providers, the other providers' per-node support checks
//! beyond kernel registration (DirectML's `supportQuery`, the device's data types), and
//! bodies of control-flow nodes on the provider's side (a body is predicted as a graph of its
//! own).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use super::capability::{range_text, Capability, Function, Kernel, Lookup, Schemas};
use super::transforms::{self, Fate, Level, Session, Transformed};
use super::Profile;
use crate::infer::Facts;
use crate::ir::{Graph, Model, NodeId, Origin, ValueId};
use crate::rewrite::cpu::LAYER_ANN_KEY;
use crate::tensor::dtype_name;

/// Where a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Cpu,
    Gpu,
    /// A `Constant`: an initializer to the runtime.
    None,
}

/// Why a node runs where it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    Constant,
    /// The provider registers a kernel for it.
    Kernel,
    /// Pinned to the CPU with the compile's annotation.
    Pinned,
    /// The provider has no kernel for it (what it lacks).
    NoKernel(String),
    /// The provider has a kernel, but its `GetCapability` passes over the node by a check of
    /// its own (which one).
    Declined(String),
    /// The provider's kernel is known to compute it wrongly (so it is not emitted; an input
    /// that has one is reported).
    Deficient(String),
    /// ONNX Runtime prefers the CPU for it (a shape computation fed by CPU values).
    CpuPreferred,
    /// Neither the provider nor the CPU provider has a kernel: the session cannot be created.
    NoProvider(String),
    /// No provider registers the op, but its schema has a function body: ONNX Runtime inlines
    /// it and places the body's nodes (the side is where they go).
    Inlined(String),
    /// ONNX Runtime computes it at load and replaces it by initializers (ConstantFolding): it
    /// runs nowhere.
    Folded,
    /// A graph transformation of ONNX Runtime (named) removes it before placement.
    Removed(&'static str),
}

impl Why {
    /// A short label for reports (`pinned`, `no kernel`, `cpu preferred`...).
    pub fn label(&self) -> &'static str {
        match self {
            Why::Constant => "constant",
            Why::Kernel => "kernel",
            Why::Pinned => "pinned",
            Why::NoKernel(_) => "no kernel",
            Why::Declined(_) => "declined",
            Why::Deficient(_) => "deficient kernel",
            Why::CpuPreferred => "cpu preferred",
            Why::NoProvider(_) => "no provider",
            Why::Inlined(_) => "inlined",
            Why::Folded => "folded",
            Why::Removed(_) => "removed",
        }
    }

    /// The sentence for a person.
    pub fn text(&self, provider: &str) -> String {
        match self {
            Why::Constant => "a Constant (an initializer to the runtime)".into(),
            Why::Kernel => format!("{provider} registers a kernel for it"),
            Why::Pinned => "pinned to the CPU (layer_ann)".into(),
            Why::NoKernel(d) => format!("{provider} has no kernel for it: {d}"),
            Why::Declined(d) => format!("{provider} has a kernel but does not take it: {d}"),
            Why::Deficient(d) => format!("{provider}'s kernel is known to compute it wrongly: {d}"),
            Why::CpuPreferred => "ONNX Runtime prefers the CPU for it (a small computation fed by CPU values, GetCpuPreferredNodes)".into(),
            Why::NoProvider(d) => format!("no provider of the runtime has a kernel for it ({d}): the model will not load"),
            Why::Inlined(d) => format!("no provider registers it; ONNX Runtime inlines its function body ({d})"),
            Why::Folded => "folded into a constant by ONNX Runtime at load (ConstantFolding): runs nowhere".into(),
            Why::Removed(by) => format!("removed by ONNX Runtime's {by} before placement: runs nowhere"),
        }
    }
}

/// The placement of one graph.
#[derive(Debug, Clone, Default)]
pub struct GraphPlacement {
    /// Per node index (`NodeId::index`): side and reason; nodes not in the graph are `None`.
    places: Vec<Option<(Side, Why)>>,
}

impl GraphPlacement {
    pub fn side(&self, n: NodeId) -> Side {
        self.places
            .get(n.index())
            .and_then(|p| p.as_ref())
            .map_or(Side::None, |p| p.0)
    }
    pub fn why(&self, n: NodeId) -> Option<&Why> {
        self.places
            .get(n.index())
            .and_then(|p| p.as_ref())
            .map(|p| &p.1)
    }
    pub(super) fn set(&mut self, n: NodeId, s: Side, w: Why) {
        if self.places.len() <= n.index() {
            self.places.resize(n.index() + 1, None);
        }
        self.places[n.index()] = Some((s, w));
    }
}

fn input_dtypes(g: &Graph, facts: &Facts, n: NodeId) -> (Vec<Option<i32>>, Vec<Option<i32>>) {
    let node = g.node(n);
    let ty = |v: &Option<ValueId>| v.and_then(|v| facts.dtype(v));
    (
        node.inputs.iter().map(ty).collect(),
        node.outputs.iter().map(ty).collect(),
    )
}

fn lookup_text(op: &str, since: i64, l: &Lookup<'_>) -> String {
    match l {
        Lookup::Kernel(_) => String::new(),
        Lookup::NoOp => format!("no {op} kernel at all"),
        Lookup::NoVersion(r) => {
            let mut rs: Vec<String> = r.iter().map(|(a, b)| range_text(*a, *b)).collect();
            rs.dedup();
            format!(
                "{op}-{since} is not registered (it registers {})",
                rs.join(", ")
            )
        }
        Lookup::NoType {
            output,
            index,
            dtype,
        } => format!(
            "{op}-{since} with {} {index} of type {}",
            if *output { "output" } else { "input" },
            dtype_name(*dtype)
        ),
    }
}

/// Predicts the placement of `g` (a graph of `model`) under `profile` in a session at ONNX
/// Runtime's default optimisation level ("all", what onnxruntime-web and desktop ONNX Runtime
/// run). `facts` gives element types (unknown types are accepted by every kernel).
pub fn predict_graph(
    model: &Model,
    g: &Graph,
    facts: &Facts,
    profile: &Profile,
    annotation: &str,
) -> GraphPlacement {
    predict_graph_in(model, g, facts, profile, annotation, &Session::default())
}

/// [`predict_graph`] in a session at `session`'s level, without the transformers it disables:
/// first the graph transformations ONNX Runtime applies before placement
/// ([`super::transforms`]; shapes as the file alone gives them), then the placement.
pub fn predict_graph_in(
    model: &Model,
    g: &Graph,
    facts: &Facts,
    profile: &Profile,
    annotation: &str,
    session: &Session,
) -> GraphPlacement {
    if let Some((table, device)) = profile.openvino() {
        // The OpenVINO provider claims clusters by its own lists (super::openvino).
        return super::openvino::predict_graph(
            model,
            g,
            facts,
            table,
            device,
            profile.cpu_capability(),
        );
    }
    let cpu: &Capability = profile.cpu_capability();
    let transformed = if session.level > Level::Disabled {
        let declared = crate::infer::infer_graph(model, g, &crate::infer::InferOptions::default());
        transforms::apply(model, g, &declared, cpu, session)
    } else {
        Transformed::default()
    };
    let mut out = GraphPlacement::default();
    let order: Vec<NodeId> = g.order.clone();
    let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
    let mut pos = vec![usize::MAX; bound];
    for (i, &n) in order.iter().enumerate() {
        pos[n.index()] = i;
    }
    // Tentative provider nodes, with the kernel's CPU inputs.
    let mut tentative: Vec<Option<(Vec<usize>, Vec<usize>)>> = vec![None; bound];
    let local_functions: HashSet<(String, String)> = model
        .functions
        .iter()
        .map(|f| {
            (
                f.domain.clone().unwrap_or_default(),
                f.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    for &n in &order {
        let node = g.node(n);
        let domain = node.domain();
        if node.op_type == "Constant" && domain.is_empty() {
            out.set(n, Side::None, Why::Constant);
            continue;
        }
        match transformed.fate(n) {
            Some(Fate::Folded) => {
                out.set(n, Side::None, Why::Folded);
                continue;
            }
            Some(Fate::Removed(by)) => {
                out.set(n, Side::None, Why::Removed(by));
                continue;
            }
            None => {}
        }
        if node.metadata(LAYER_ANN_KEY) == Some(annotation) && profile.honours_layer_ann {
            out.set(n, Side::Cpu, Why::Pinned);
            continue;
        }
        if local_functions.contains(&(domain.to_string(), node.op_type.clone())) {
            // ONNX Runtime inlines a model-local function before it partitions; its body's
            // nodes are placed, not the call. Counted on the GPU as the body usually is.
            out.set(n, Side::Gpu, Why::Kernel);
            continue;
        }
        let opset = model
            .opset(domain)
            .or_else(|| {
                if domain == "ai.onnx" {
                    model.opset("")
                } else {
                    None
                }
            })
            .unwrap_or(1);
        match kernel_verdict(profile, g, facts, n, opset) {
            Verdict::Kernel(k) => {
                tentative[n.index()] = Some((k.cpu_inputs.clone(), k.cpu_outputs.clone()));
                out.set(n, Side::Gpu, Why::Kernel);
            }
            Verdict::Deficient(d) => out.set(n, Side::Cpu, Why::Deficient(d)),
            Verdict::NoKernel(d) => out.set(n, Side::Cpu, Why::NoKernel(d)),
            Verdict::Declined(d) => out.set(n, Side::Cpu, Why::Declined(d)),
            Verdict::NoProvider(d) => out.set(n, Side::Cpu, Why::NoProvider(d)),
            Verdict::Inlined(side, d) => out.set(n, side, Why::Inlined(d)),
        }
    }
    if profile.cpu_preferred {
        let moved = cpu_preferred(g, facts, &transformed, &order, &pos, &tentative, &mut out);
        let claimed = order
            .iter()
            .any(|&n| tentative[n.index()].is_some() && out.side(n) == Side::Gpu);
        if profile.prefers_nhwc && claimed && !moved.is_empty() {
            // The second GetCapability after the layout transformation: the nodes the first
            // call claimed are assigned; only the ones it preferred on the CPU are tentative.
            let mut again: Vec<Option<(Vec<usize>, Vec<usize>)>> = vec![None; bound];
            for &n in &moved {
                again[n.index()] = tentative[n.index()].clone();
                out.set(n, Side::Gpu, Why::Kernel);
            }
            cpu_preferred(g, facts, &transformed, &order, &pos, &again, &mut out);
        }
    }
    out
}

/// What a provider's kernel registry says of one node, on its own: the step of the placement
/// that looks at the node alone (no pin, no graph transformation, no CPU preference), shared by
/// [`predict_graph_in`] and the rules' `provider_kernel` match key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// The provider registers a kernel for the node's domain, op, since-version and types.
    Kernel(&'a Kernel),
    /// It registers one, but the kernel is on the known-deficient list (why).
    Deficient(String),
    /// It has none (what it lacks); the CPU provider has one: ONNX Runtime moves the node to
    /// the CPU by itself.
    NoKernel(String),
    /// It has one, but its `GetCapability` passes over the node by its own per-node checks
    /// ([`Profile::declines`]; why); the CPU provider has one: the node goes to the CPU.
    Declined(String),
    /// Neither it nor the CPU provider has one: the session cannot be created.
    NoProvider(String),
    /// No provider registers the op, but its schema has a function body: ONNX Runtime inlines
    /// it (the side the body's nodes go to; the body).
    Inlined(Side, String),
}

/// The [`Verdict`] of `profile`'s kernel registry on node `n` of `g`, where the model imports
/// `opset` for the node's domain; element types from `facts` (an unknown type is accepted by
/// every kernel). A kernel table only: for the OpenVINO provider (which claims clusters, not
/// kernels) the answer is its empty kernel table's.
pub fn kernel_verdict<'p>(
    profile: &'p Profile,
    g: &Graph,
    facts: &Facts,
    n: NodeId,
    opset: i64,
) -> Verdict<'p> {
    let schemas = Schemas::builtin();
    let cap: &Capability = profile.capability();
    let cpu: &Capability = profile.cpu_capability();
    let node = g.node(n);
    let domain = node.domain();
    let Some(since) = schemas.since(domain, &node.op_type, opset) else {
        return Verdict::NoProvider(format!(
            "{} has no schema {}at opset {opset}",
            node.op_type,
            if domain.is_empty() {
                String::new()
            } else {
                format!("in {domain} ")
            }
        ));
    };
    let (ins, outs) = input_dtypes(g, facts, n);
    let on_provider = cap.lookup(domain, &node.op_type, since, &ins, &outs);
    let declined = profile.declines(g, n);
    if let (Lookup::Kernel(k), None) = (&on_provider, &declined) {
        return match profile.deficient(g, facts, n) {
            Some(d) => Verdict::Deficient(d),
            None => Verdict::Kernel(k),
        };
    }
    let why = declined
        .clone()
        .unwrap_or_else(|| lookup_text(&node.op_type, since, &on_provider));
    let on_cpu = cpu.lookup(domain, &node.op_type, since, &ins, &outs);
    if !matches!(on_cpu, Lookup::Kernel(_)) {
        match schemas
            .at(domain, &node.op_type, opset)
            .map(|s| &s.function)
        {
            Some(Function::Ops(ops)) => {
                let on_gpu = ops.iter().all(|op| {
                    schemas
                        .since("", op, opset)
                        .is_some_and(|v| cap.kernels("", op).iter().any(|k| k.serves(v)))
                });
                let side = if on_gpu { Side::Gpu } else { Side::Cpu };
                return Verdict::Inlined(side, ops.join(", "));
            }
            Some(Function::Dynamic) => {
                return Verdict::Inlined(
                    Side::Gpu,
                    "a body built for the node; assumed on the provider".into(),
                );
            }
            _ => {}
        }
    }
    match on_cpu {
        Lookup::Kernel(_) if declined.is_some() => Verdict::Declined(why),
        Lookup::Kernel(_) => Verdict::NoKernel(why),
        l => Verdict::NoProvider(format!(
            "{}; on the CPU side: {}",
            why,
            lookup_text(&node.op_type, since, &l)
        )),
    }
}

/// ONNX Runtime's `GetCpuPreferredNodes` over the tentative provider nodes; returns the nodes it
/// moved to the CPU, in the order it moved them.
fn cpu_preferred(
    g: &Graph,
    facts: &Facts,
    transformed: &Transformed,
    order: &[NodeId],
    pos: &[usize],
    tentative: &[Option<(Vec<usize>, Vec<usize>)>],
    out: &mut GraphPlacement,
) -> Vec<NodeId> {
    let mut moved = Vec::new();
    let consumers = g.consumers();
    let mut heap: BinaryHeap<Reverse<(usize, u32)>> = BinaryHeap::new();
    let mut cpu_values: HashSet<ValueId> = HashSet::new();
    let push_consumers = |v: ValueId, heap: &mut BinaryHeap<Reverse<(usize, u32)>>| {
        for &(c, slot) in consumers.of(v) {
            if slot == crate::ir::IMPLICIT_SLOT {
                continue;
            }
            if let Some(&p) = pos.get(c.index()) {
                if p != usize::MAX {
                    heap.push(Reverse((p, c.index() as u32)));
                }
            }
        }
    };
    for &n in order {
        let Some((_, cpu_outs)) = &tentative[n.index()] else {
            continue;
        };
        for &i in cpu_outs {
            if let Some(Some(v)) = g.node(n).outputs.get(i) {
                cpu_values.insert(*v);
                push_consumers(*v, &mut heap);
            }
        }
    }
    let graph_inputs: HashSet<ValueId> = g
        .values
        .iter()
        .enumerate()
        .filter(|(_, v)| v.origin == Origin::Input)
        .map(|(i, _)| ValueId(i as u32))
        .collect();
    // An initializer of at most 100 elements, one a transformation made included (its count
    // unknown: not small).
    let small_initializer = |v: ValueId| -> bool {
        if let Some(count) = transformed.new_initializer(v) {
            return count.is_some_and(|c| c <= 100);
        }
        g.initializer(v)
            .map(|t| t.dims.iter().product::<i64>() <= 100)
            .unwrap_or(false)
    };
    let low_float = |v: ValueId| matches!(facts.dtype(v), Some(10 | 16 | 17 | 18 | 19 | 20));
    let mut visited: HashSet<u32> = HashSet::new();
    while let Some(Reverse((_, idx))) = heap.pop() {
        if !visited.insert(idx) {
            continue;
        }
        let n = order[pos[idx as usize]];
        let node = g.node(n);
        let Some((cpu_ins, _)) = &tentative[n.index()] else {
            // Not a provider node: on the CPU already (or a Constant); its outputs are CPU
            // values for its consumers.
            if out.side(n) == Side::Cpu {
                for v in node.outputs.iter().flatten() {
                    cpu_values.insert(*v);
                    push_consumers(*v, &mut heap);
                }
            }
            continue;
        };
        let mut place = true;
        for (i, input) in node.inputs.iter().enumerate() {
            let Some(v) = *input else {
                // An omitted input is a NodeArg that is neither an initializer, a graph
                // input nor a CPU value: the node stays.
                place = false;
                break;
            };
            if low_float(v) {
                place = false;
                break;
            }
            if small_initializer(v) || graph_inputs.contains(&v) {
                continue;
            }
            if !cpu_values.contains(&v) || cpu_ins.contains(&i) {
                place = false;
                break;
            }
        }
        if place {
            out.set(n, Side::Cpu, Why::CpuPreferred);
            moved.push(n);
            for v in node.outputs.iter().flatten() {
                cpu_values.insert(*v);
                push_consumers(*v, &mut heap);
            }
        }
    }
    moved
}
