//! How ONNX Runtime's OpenVINO execution provider claims nodes, read in its source
//! (intel/onnxruntime, branch rel-1.24.1, b5963e82c80ee66f88fa52e32d2bc08223fd96ce, the source of
//! the `onnxruntime-openvino` 1.24.1 wheel, which bundles OpenVINO 2025.4.1):
//!
//! 1. **Per node** (`ov_versions/data_ops.cc`, `DataOps::node_is_supported`): the op type is in
//!    `supported_op_mode` for the device at the build's OpenVINO version (the domain is not
//!    checked); every input and output element type is on the device's list (a constant
//!    initializer input: the initializer list; int16/uint16 always pass); no input or output
//!    (constant initializers aside) has rank 0 unless the op is in `no_dimension_supported_`
//!    (a `Pad` fed by a `DequantizeLinear` passes too), and none has a 0-sized dimension except
//!    for Expand, Equal, Slice, Concat, Shape, Cast and Resize; then the coded conditions of
//!    `op_list_` for ONNX-domain nodes (ReduceMax on int8/uint8, Reshape with an empty shape
//!    tensor, Unsqueeze reading a value named `axes`, Upsample's scales and types, Resize's
//!    modes). The lists are `runtimes/capability/openvino.tsv` (`tools/capability/openvino_ep.py`);
//!    the conditions are code, here.
//! 2. **Whole graph** (`ov_versions/capability.cc`, `GetCapability::Execute`): when every node is
//!    supported the graph is one subgraph, unless it has no graph inputs, or at most three nodes
//!    the first of which is in `ops_supported_only_in_model`, or is one Reshape/Expand/RoiAlign
//!    node of the kinds `SpecialConditionForClusterSizeOne` names.
//! 3. **Otherwise, clusters**: the unsupported nodes and TopK/NonZero (`DataOps::InsertNode`)
//!    split ONNX Runtime's topological order into runs (`GetPartitionedClusters`, utils.cc); each
//!    run splits into connected parts (`GetConnectedClusters`). A part of one node is dropped,
//!    and joins the first later part it is connected to, if any, unless it is the last part. A
//!    part is dropped when a Conv or Identity in it has its first output leaving the part (read
//!    outside it, or a graph output) while something reads it ("Omitting zero dim subgraphs").
//!    The `Slice` check beside it never fires: its map is made anew for each node.
//! 4. Every node not claimed goes to the CPU provider, which needs a kernel for it (no CPU
//!    preference pass: the OpenVINO provider does not call `GetCpuPreferredNodes`).
//!
//! The topological order is ONNX Runtime's own (`GraphViewer`: a depth-first walk back from the
//! nodes nobody reads, inputs in node-index order, `Graph::ReverseDFSFrom`), since runs are cut
//! along it.

use std::collections::HashSet;

use super::placement::{GraphPlacement, Side, Why};
use crate::infer::Facts;
use crate::ir::{Graph, Model, NodeId, Origin, ValueId};
use crate::tensor::dtype_from_name;

/// The OpenVINO version the tables are read at (`V_2025_4`, what `capability.cc` uses for
/// OpenVINO 2025.4 and anything newer).
pub const OV_VERSION: (u32, u32) = (2025, 4);

/// The ops whose `op_list_` conditions this module codes (pinned against the table).
pub const CODED_CONDITIONS: [&str; 5] = ["ReduceMax", "Reshape", "Unsqueeze", "Upsample", "Resize"];

/// The OpenVINO provider's lists (`runtimes/capability/openvino.tsv`).
#[derive(Debug, Default)]
pub struct OvTable {
    /// `(kind, name, since, devices)`.
    rows: Vec<(String, String, String, Vec<String>)>,
}

fn version(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

impl OvTable {
    pub fn parse(text: &str) -> Result<OvTable, String> {
        let mut rows = Vec::new();
        for (ln, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() || line.starts_with("kind\t") {
                continue;
            }
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() != 4 {
                return Err(format!("line {}: {} fields, expected 4", ln + 1, f.len()));
            }
            let devices = f[3].split(',').map(str::to_string).collect();
            rows.push((f[0].into(), f[1].into(), f[2].into(), devices));
        }
        Ok(OvTable { rows })
    }

    /// Rows of `kind` naming `name` for `device` at [`OV_VERSION`] (`All` counts for every device).
    fn listed(&self, kind: &str, name: &str, device: &str) -> bool {
        self.rows.iter().any(|(k, n, since, devs)| {
            k == kind
                && n == name
                && version(since).is_some_and(|v| v <= OV_VERSION)
                && devs.iter().any(|d| d == device || d == "All")
        })
    }

    /// Whether `supported_op_mode` lists `op` for `device`.
    pub fn op_supported(&self, op: &str, device: &str) -> bool {
        self.listed("op", op, device)
    }

    /// Whether an element type passes `type_is_supported` (`initializer`: a constant input).
    pub fn type_supported(&self, dtype: i32, initializer: bool, device: &str) -> bool {
        let name = crate::tensor::dtype_name(dtype);
        if name == "int16" || name == "uint16" {
            return true;
        }
        let dev = if initializer { "initializer" } else { device };
        self.rows.iter().any(|(k, n, since, devs)| {
            k == "type"
                && dtype_from_name(n) == Some(dtype)
                && version(since).is_some_and(|v| v <= OV_VERSION)
                && devs.iter().any(|d| d == dev)
        })
    }

    /// The names of the rows of one kind (`condition`, `only_in_model`, `split`).
    pub fn names(&self, kind: &str) -> Vec<&str> {
        self.rows
            .iter()
            .filter(|r| r.0 == kind)
            .map(|r| r.1.as_str())
            .collect()
    }
}

/// ONNX Runtime's default topological order of `g` (`GraphViewer`'s constructor:
/// `ReverseDFSFrom` the nodes without output edges, post-order, inputs sorted by node index and
/// pushed on a stack). Node indices follow the file order (`g.order`); Constants are
/// initializers to ONNX Runtime and are left out.
fn ort_topological(g: &Graph, nodes: &[NodeId], producers: &[Vec<NodeId>]) -> Vec<NodeId> {
    let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
    let mut rank = vec![usize::MAX; bound];
    for (i, &n) in nodes.iter().enumerate() {
        rank[n.index()] = i;
    }
    let mut has_out = vec![false; bound];
    for &n in nodes {
        for &p in &producers[n.index()] {
            has_out[p.index()] = true;
        }
    }
    let mut stack: Vec<(NodeId, bool)> = nodes
        .iter()
        .filter(|n| !has_out[n.index()])
        .map(|&n| (n, false))
        .collect();
    let mut visited = vec![false; bound];
    let mut order = Vec::with_capacity(nodes.len());
    while let Some((n, leave)) = stack.pop() {
        if leave {
            order.push(n);
            continue;
        }
        if visited[n.index()] {
            continue;
        }
        visited[n.index()] = true;
        stack.push((n, true));
        let mut ins = producers[n.index()].clone();
        ins.sort_by_key(|p| rank[p.index()]);
        for p in ins {
            stack.push((p, false));
        }
    }
    order
}

struct Ctx<'a> {
    g: &'a Graph,
    facts: &'a Facts,
    table: &'a OvTable,
    device: &'a str,
}

impl Ctx<'_> {
    fn is_initializer(&self, v: ValueId) -> bool {
        matches!(self.g.value(v).origin, Origin::Initializer)
    }

    fn dtype_is(&self, v: Option<ValueId>, names: &[&str]) -> bool {
        v.and_then(|v| self.facts.dtype(v))
            .is_some_and(|t| names.iter().any(|n| dtype_from_name(n) == Some(t)))
    }

    /// `DataOps::node_is_supported`: `None` when supported, else why not.
    fn unsupported(&self, n: NodeId, producers: &[Vec<NodeId>]) -> Option<String> {
        let g = self.g;
        let node = g.node(n);
        let op = node.op_type.as_str();
        let t = self.table;
        if !t.op_supported(op, self.device) {
            return Some(format!(
                "OpenVINO's provider does not list {op} for its {} device (data_ops.cc supported_op_mode)",
                self.device
            ));
        }
        let defs = node
            .inputs
            .iter()
            .flatten()
            .map(|&v| (v, true))
            .chain(node.outputs.iter().flatten().map(|&v| (v, false)));
        for (v, is_input) in defs.clone() {
            let init = is_input && self.is_initializer(v);
            if let Some(dt) = self.facts.dtype(v) {
                if !t.type_supported(dt, init, self.device) {
                    return Some(format!(
                        "{} {} is {}, not on the {} device's type list (data_ops.cc populate_types_supported)",
                        if is_input { "input" } else { "output" },
                        g.value_name(v),
                        crate::tensor::dtype_name(dt),
                        if init { "initializer" } else { self.device }
                    ));
                }
            }
        }
        for (v, is_input) in defs {
            if is_input && self.is_initializer(v) {
                continue;
            }
            let Some(shape) = self.facts.shape(v) else {
                continue;
            };
            if shape.is_empty() {
                if t.listed("scalar_ok", op, self.device) {
                    continue;
                }
                if op == "Pad"
                    && producers[n.index()]
                        .iter()
                        .any(|&p| g.node(p).op_type == "DequantizeLinear")
                {
                    continue;
                }
                return Some(format!(
                    "{} is a rank-0 tensor and {op} is not in no_dimension_supported_",
                    g.value_name(v)
                ));
            }
            if shape.iter().any(|d| d.known() == Some(0))
                && !matches!(
                    op,
                    "Expand" | "Equal" | "Slice" | "Concat" | "Shape" | "Cast" | "Resize"
                )
            {
                return Some(format!("{} has a 0-sized dimension", g.value_name(v)));
            }
        }
        if node.domain().is_empty() || node.domain() == "ai.onnx" {
            if let Some(why) = self.condition(n) {
                return Some(format!("{why} (data_ops.cc op_list_)"));
            }
        }
        None
    }

    /// The `op_list_` conditions at OpenVINO 2025.4.
    fn condition(&self, n: NodeId) -> Option<String> {
        let g = self.g;
        let node = g.node(n);
        let input = |i: usize| node.inputs.get(i).copied().flatten();
        match node.op_type.as_str() {
            "ReduceMax" => node
                .inputs
                .iter()
                .any(|&v| self.dtype_is(v, &["int8", "uint8"]))
                .then(|| "ReduceMax with an int8/uint8 input".into()),
            "Reshape" => {
                let shape_in = if node.inputs.len() > 1 {
                    input(1)
                } else {
                    input(0)
                };
                shape_in
                    .and_then(|v| self.facts.shape(v))
                    .is_some_and(|s| s.iter().any(|d| d.known() == Some(0)))
                    .then(|| "Reshape whose shape input has a 0-sized dimension".into())
            }
            "Unsqueeze" => node
                .inputs
                .iter()
                .flatten()
                .any(|&v| g.value_name(v) == "axes")
                .then(|| "Unsqueeze reading a value named `axes`".into()),
            "Upsample" => {
                if let Some(a) = node.attr("scales") {
                    let s = a.floats();
                    if s.len() > 2 && (s[0] != 1.0 || s[1] != 1.0) {
                        return Some("Upsample scaling the batch or channel axis".into());
                    }
                }
                let x = input(0);
                (x.and_then(|v| self.facts.dtype(v)).is_some()
                    && !self.dtype_is(x, &["float", "int8", "float16"]))
                .then(|| "Upsample of a type other than float, int8, float16".into())
            }
            "Resize" => {
                let s = |k: &str| {
                    node.attr(k)
                        .and_then(|a| a.s())
                        .map(|b| String::from_utf8_lossy(b).into_owned())
                };
                let i = |k: &str| node.attr(k).and_then(|a| a.i());
                let ctm = s("coordinate_transformation_mode").unwrap_or_default();
                let mode = s("mode").unwrap_or_default();
                if ctm == "tf_crop_and_resize" || ctm == "half_pixel_symmetric" {
                    Some(format!("Resize with coordinate_transformation_mode {ctm}"))
                } else if i("antialias") == Some(1) && (mode == "linear" || mode == "cubic") {
                    Some("Resize with antialias".into())
                } else if i("exclude_outside") == Some(1) {
                    Some("Resize with exclude_outside".into())
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

/// The claimed nodes, why each other node is not claimed, and the claimed nodes whose cluster
/// cannot be fused (the model will not load).
pub type Claims = (
    HashSet<NodeId>,
    Vec<(NodeId, String)>,
    Vec<(NodeId, String)>,
);

/// Which nodes of `g` the OpenVINO provider claims (`device`: `CPU` or `GPU`), with the reason
/// for each node it does not claim. `nodes` excludes Constants.
pub fn claims(g: &Graph, facts: &Facts, table: &OvTable, device: &str, nodes: &[NodeId]) -> Claims {
    let bound = petgraph::visit::NodeIndexable::node_bound(&g.nodes);
    let member: HashSet<NodeId> = nodes.iter().copied().collect();
    // Producer and consumer nodes within `nodes` (ONNX Runtime's node edges, implicit inputs
    // of subgraphs included).
    let mut producers: Vec<Vec<NodeId>> = vec![Vec::new(); bound];
    let mut consumers: Vec<Vec<NodeId>> = vec![Vec::new(); bound];
    for &n in nodes {
        let node = g.node(n);
        for &v in node.inputs.iter().flatten().chain(node.implicit_inputs()) {
            if let Origin::Node { node: p, .. } = g.value(v).origin {
                if member.contains(&p) {
                    producers[n.index()].push(p);
                    consumers[p.index()].push(n);
                }
            }
        }
    }
    let cx = Ctx {
        g,
        facts,
        table,
        device,
    };
    let topo = ort_topological(g, nodes, &producers);
    let mut why_not: Vec<(NodeId, String)> = Vec::new();
    let mut unsupported: HashSet<NodeId> = HashSet::new();
    for &n in &topo {
        if let Some(w) = cx.unsupported(n, &producers) {
            unsupported.insert(n);
            why_not.push((n, w));
        }
    }
    let graph_outputs: HashSet<ValueId> = g.outputs.iter().map(|o| o.value).collect();
    let mut claimed = HashSet::new();
    let drop_all = |why: &str, why_not: &mut Vec<(NodeId, String)>| {
        for &n in &topo {
            why_not.push((n, why.to_string()));
        }
    };
    if unsupported.is_empty() {
        let has_inputs = g.values.iter().any(|v| matches!(v.origin, Origin::Input));
        if !has_inputs {
            drop_all(
                "the graph has no inputs (capability.cc leaves it to constant folding)",
                &mut why_not,
            );
            return (claimed, why_not, Vec::new());
        }
        if let Some(&first) = topo.first() {
            let only = table.names("only_in_model");
            if topo.len() <= 3 && only.contains(&g.node(first).op_type.as_str()) {
                drop_all(
                    "a graph of at most 3 nodes starting with an op of ops_supported_only_in_model (capability.cc)",
                    &mut why_not,
                );
                return (claimed, why_not, Vec::new());
            }
            if topo.len() == 1 && size_one_special(&cx, first) {
                drop_all(
                    "a lone node of SpecialConditionForClusterSizeOne (capability.cc)",
                    &mut why_not,
                );
                return (claimed, why_not, Vec::new());
            }
        }
        claimed.extend(topo.iter().copied());
        return (claimed, why_not, Vec::new());
    }
    let split = table.names("split");
    let cut: HashSet<NodeId> = topo
        .iter()
        .copied()
        .filter(|n| unsupported.contains(n) || split.contains(&g.node(*n).op_type.as_str()))
        .collect();
    for &n in &topo {
        if cut.contains(&n) && !unsupported.contains(&n) {
            why_not.push((
                n,
                format!(
                    "OpenVINO's partitioner treats {} as unsupported (DataOps::InsertNode)",
                    g.node(n).op_type
                ),
            ));
        }
    }
    // Runs of the topological order between cut nodes, then connected parts of each run.
    let mut clusters: Vec<Vec<NodeId>> = Vec::new();
    let mut run: Vec<NodeId> = Vec::new();
    let mut in_run = vec![false; bound];
    let flush = |run: &mut Vec<NodeId>, in_run: &mut [bool], clusters: &mut Vec<Vec<NodeId>>| {
        // IdentifyConnectedNodes: from the run's first remaining node, over inputs and
        // outputs within the run; the order inside a part does not matter below.
        for &start in run.iter() {
            if !in_run[start.index()] {
                continue;
            }
            let mut part = Vec::new();
            let mut stack = vec![start];
            in_run[start.index()] = false;
            while let Some(x) = stack.pop() {
                part.push(x);
                for &p in producers[x.index()].iter().chain(&consumers[x.index()]) {
                    if in_run[p.index()] {
                        in_run[p.index()] = false;
                        stack.push(p);
                    }
                }
            }
            clusters.push(part);
        }
        run.clear();
    };
    for &n in &topo {
        if cut.contains(&n) {
            flush(&mut run, &mut in_run, &mut clusters);
        } else {
            in_run[n.index()] = true;
            run.push(n);
        }
    }
    flush(&mut run, &mut in_run, &mut clusters);
    let total = clusters.len();
    let mut kept: Vec<Vec<NodeId>> = Vec::new();
    let connected = |a: NodeId, part: &[NodeId]| {
        part.iter()
            .any(|&x| producers[x.index()].contains(&a) || consumers[x.index()].contains(&a))
    };
    for i in 0..total {
        let this = clusters[i].clone();
        let mut omit: Option<String> = None;
        if this.len() == 1 && g.node(this[0]).op_type != "EPContext" && i + 1 < total {
            let a = this[0];
            if let Some(j) = (i + 1..total).find(|&j| connected(a, &clusters[j])) {
                clusters[j].push(a);
                continue;
            }
            omit = Some("a lone supported node between unsupported ones (capability.cc drops a one-node cluster)".into());
        }
        if omit.is_none() {
            let inside: HashSet<NodeId> = this.iter().copied().collect();
            for &x in &this {
                let node = g.node(x);
                if node.op_type != "Conv" && node.op_type != "Identity" {
                    continue;
                }
                let Some(out) = node.outputs.first().copied().flatten() else {
                    continue;
                };
                let readers: Vec<NodeId> = consumers[x.index()]
                    .iter()
                    .copied()
                    .filter(|&c| {
                        let cn = g.node(c);
                        cn.inputs.contains(&Some(out)) || cn.implicit_inputs().contains(&out)
                    })
                    .collect();
                let leaves =
                    readers.iter().any(|c| !inside.contains(c)) || graph_outputs.contains(&out);
                if leaves && !consumers[x.index()].is_empty() {
                    omit = Some(format!(
                        "its cluster is dropped: {} {}'s output leaves the cluster while nodes read it (capability.cc \"Omitting zero dim subgraphs\")",
                        node.op_type,
                        node.name()
                    ));
                    break;
                }
            }
        }
        if omit.is_none() {
            let has_input = this
                .iter()
                .any(|&x| g.node(x).inputs.iter().any(Option::is_some));
            if !has_input {
                omit = Some("its cluster has no inputs (capability.cc)".into());
            }
        }
        match omit {
            Some(w) => why_not.extend(this.iter().map(|&x| (x, w.clone()))),
            None => {
                claimed.extend(this.iter().copied());
                kept.push(this);
            }
        }
    }
    // A kept cluster that a path leaves and re-enters cannot be fused: ONNX Runtime's graph
    // then has a cycle and session creation fails ("the graph is not acyclic"). A one-node
    // cluster joined to a later cluster it feeds makes one when it also feeds that cluster
    // through an unsupported node.
    let mut cyclic = Vec::new();
    for part in &kept {
        let inside: HashSet<NodeId> = part.iter().copied().collect();
        let mut seen: HashSet<NodeId> = HashSet::new();
        let mut stack: Vec<NodeId> = part
            .iter()
            .flat_map(|x| consumers[x.index()].iter().copied())
            .filter(|c| !inside.contains(c))
            .collect();
        let mut cycle = false;
        while let Some(x) = stack.pop() {
            if inside.contains(&x) {
                cycle = true;
                break;
            }
            if seen.insert(x) {
                stack.extend(consumers[x.index()].iter().copied());
            }
        }
        if cycle {
            let w = "OpenVINO's cluster of this node is left and re-entered by a path through other nodes: fusing it makes a cycle and session creation fails (\"the graph is not acyclic\")";
            cyclic.extend(part.iter().map(|&x| (x, w.to_string())));
        }
    }
    (claimed, why_not, cyclic)
}

fn size_one_special(cx: &Ctx<'_>, n: NodeId) -> bool {
    let node = cx.g.node(n);
    let input = |i: usize| node.inputs.get(i).copied().flatten();
    match node.op_type.as_str() {
        "Reshape" => !input(1).is_some_and(|v| cx.is_initializer(v)),
        "Expand" => !cx.dtype_is(node.outputs.first().copied().flatten(), &["float16"]),
        "RoiAlign" => {
            !(cx.dtype_is(input(0), &["float16"])
                && cx.dtype_is(input(1), &["float16"])
                && cx.dtype_is(input(2), &["float"])
                && cx.dtype_is(node.outputs.first().copied().flatten(), &["float16"]))
        }
        _ => false,
    }
}

/// Marks the nodes of `g` the OpenVINO provider claims as on the device; the others as
/// unclaimed (`Why::NoKernel`) for the CPU side to take. Constants are left to the caller.
pub fn predict(
    _model: &Model,
    g: &Graph,
    facts: &Facts,
    table: &OvTable,
    device: &str,
    nodes: &[NodeId],
    out: &mut GraphPlacement,
) -> HashSet<NodeId> {
    let (claimed, why_not, cyclic) = claims(g, facts, table, device, nodes);
    for &n in &claimed {
        out.set(n, Side::Gpu, Why::Kernel);
    }
    for (n, w) in cyclic {
        out.set(n, Side::Gpu, Why::NoProvider(w));
    }
    let mut seen = HashSet::new();
    for (n, w) in why_not {
        if !claimed.contains(&n) && seen.insert(n) {
            out.set(n, Side::Cpu, Why::NoKernel(w));
        }
    }
    claimed
}

/// The placement of `g` under the OpenVINO provider on `device`, with ONNX Runtime's CPU
/// provider taking what it leaves (a node neither takes: the model will not load).
pub fn predict_graph(
    model: &Model,
    g: &Graph,
    facts: &Facts,
    table: &OvTable,
    device: &str,
    cpu: &super::capability::Capability,
) -> GraphPlacement {
    use super::capability::{Lookup, Schemas};
    let mut out = GraphPlacement::default();
    let mut nodes = Vec::new();
    for &n in &g.order {
        let node = g.node(n);
        if node.op_type == "Constant" && node.domain().is_empty() {
            out.set(n, Side::None, Why::Constant);
        } else {
            nodes.push(n);
        }
    }
    let claimed = predict(model, g, facts, table, device, &nodes, &mut out);
    let schemas = Schemas::builtin();
    for &n in &nodes {
        if claimed.contains(&n) {
            continue;
        }
        let node = g.node(n);
        let domain = node.domain();
        let opset = model
            .opset(domain)
            .or_else(|| (domain == "ai.onnx").then(|| model.opset("")).flatten())
            .unwrap_or(1);
        let ty = |v: &Option<ValueId>| v.and_then(|v| facts.dtype(v));
        let ins: Vec<Option<i32>> = node.inputs.iter().map(ty).collect();
        let outs: Vec<Option<i32>> = node.outputs.iter().map(ty).collect();
        let on_cpu = schemas
            .since(domain, &node.op_type, opset)
            .map(|s| cpu.lookup(domain, &node.op_type, s, &ins, &outs));
        if !matches!(on_cpu, Some(Lookup::Kernel(_))) {
            // ONNX Runtime inlines a function op that no provider takes (as in
            // `placement::predict_graph_in`); its body is placed again, taken here to run on
            // the CPU side, which has the body's kernels.
            let body = schemas
                .at(domain, &node.op_type, opset)
                .map(|s| &s.function);
            match body {
                Some(crate::runtime::capability::Function::Ops(ops)) => {
                    out.set(n, Side::Cpu, Why::Inlined(ops.join(", ")));
                    continue;
                }
                Some(crate::runtime::capability::Function::Dynamic) => {
                    out.set(
                        n,
                        Side::Cpu,
                        Why::Inlined("a body built for the node".into()),
                    );
                    continue;
                }
                _ => {}
            }
            let why = match out.why(n) {
                Some(Why::NoKernel(w)) => w.clone(),
                _ => String::new(),
            };
            out.set(
                n,
                Side::Cpu,
                Why::NoProvider(format!(
                    "{why}; and the CPU provider has no {} kernel for it",
                    node.op_type
                )),
            );
        }
    }
    out
}
