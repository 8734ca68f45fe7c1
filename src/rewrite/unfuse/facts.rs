//! What the decompositions need to know about values before they rewrite a node: element
//! type, rank and the dimensions that are static. A small forward propagation over the graph,
//! seeded from graph inputs, `value_info`, initializers and `Constant` nodes; it answers
//! "unknown" rather than guess, and the decompositions refuse (Unsupported) when a fact they
//! need is unknown.
//!
//! It also reads small constant tensors (axes, shapes, weights) from initializers or `Constant`
//! nodes, including external data when the caller gives the resolver.

use std::collections::{HashMap, HashSet};

use crate::io::external::{external_ref, is_external};
use crate::io::ExternalData;
use crate::ir::{Graph, NodeId, Origin, ValueId};
use crate::proto::{type_proto, AttributeProto, TensorProto, ValueInfoProto};
use crate::tensor::dtype;

/// Facts about one value. `shape: None` is an unknown rank; a `None` dimension is unknown.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValueFacts {
    pub dtype: Option<i32>,
    pub shape: Option<Vec<Option<i64>>>,
}

impl ValueFacts {
    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(|s| s.len())
    }
    pub fn dim(&self, i: usize) -> Option<i64> {
        self.shape
            .as_ref()
            .and_then(|s| s.get(i).copied().flatten())
    }
}

/// Facts for every value of one graph, indexed by value id (values added after the
/// computation have none), plus which values are read (by a node, a subgraph or as a graph
/// output) and which hold NCHWc-blocked tensors, as of the computation.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    values: Vec<ValueFacts>,
    used: HashSet<ValueId>,
    read_by_subgraph: HashSet<ValueId>,
    blocked: HashSet<ValueId>,
}

impl Facts {
    /// Facts of a value (default: nothing known).
    pub fn get(&self, v: ValueId) -> ValueFacts {
        self.values.get(v.index()).cloned().unwrap_or_default()
    }

    /// Was `v` read (by a node, a subgraph, or as a graph output) when the facts were computed?
    pub fn is_used(&self, v: ValueId) -> bool {
        self.used.contains(&v)
    }

    /// Was `v` read by name from inside a subgraph?
    pub fn read_by_subgraph(&self, v: ValueId) -> bool {
        self.read_by_subgraph.contains(&v)
    }

    /// Does `v` hold an NCHWc-blocked tensor (see [`super::nchwc::blocked_values`])?
    pub fn is_blocked(&self, v: ValueId) -> bool {
        self.blocked.contains(&v)
    }

    /// Facts of every value by name (for the subgraphs that read them from the outer scope).
    pub fn by_name(&self, g: &Graph) -> HashMap<String, ValueFacts> {
        self.values
            .iter()
            .enumerate()
            .filter(|(_, f)| f.dtype.is_some() || f.shape.is_some())
            .map(|(i, f)| (g.values[i].name.clone(), f.clone()))
            .collect()
    }

    /// Propagate facts through `g` in topological order. `nchwc_block`, when known, gives the
    /// channel count of `ReorderInput` outputs.
    pub fn compute(g: &Graph, opset: i64, nchwc_block: Option<i64>) -> Facts {
        Facts::compute_in(g, opset, nchwc_block, None)
    }

    /// As [`Facts::compute`], for a subgraph: `outer` gives the facts of outer-scope values.
    pub fn compute_in(
        g: &Graph,
        opset: i64,
        nchwc_block: Option<i64>,
        outer: Option<&HashMap<String, ValueFacts>>,
    ) -> Facts {
        let mut f = Facts {
            values: vec![ValueFacts::default(); g.values.len()],
            ..Default::default()
        };
        if let Some(outer) = outer {
            for (i, v) in g.values.iter().enumerate() {
                if v.origin == Origin::OuterScope {
                    if let Some(of) = outer.get(&v.name) {
                        f.values[i] = of.clone();
                    }
                }
            }
        }
        for &n in &g.order {
            let node = g.node(n);
            f.used.extend(node.inputs.iter().flatten());
            f.used.extend(node.implicit_inputs.iter());
            f.read_by_subgraph.extend(node.implicit_inputs.iter());
        }
        f.used.extend(g.outputs.iter().map(|o| o.value));
        if g.order
            .iter()
            .any(|&n| g.node(n).domain() == super::NCHWC_DOMAIN)
        {
            f.blocked = super::nchwc::blocked_values(g);
        }
        for vi in g.inputs.iter().chain(g.value_info.iter()) {
            if let Some(v) = value_info_facts(&vi.proto) {
                f.values[vi.value.index()] = v;
            }
        }
        for i in &g.initializers {
            f.values[i.value.index()] = ValueFacts {
                dtype: i.tensor.data_type,
                shape: Some(i.tensor.dims.iter().map(|&d| Some(d)).collect()),
            };
        }
        let order = g.topo_order().unwrap_or_else(|_| g.order.clone());
        for n in order {
            let outs = infer_node(g, &f, n, opset, nchwc_block);
            let node = g.node(n);
            for (slot, o) in node.outputs.iter().enumerate() {
                let (Some(o), Some(new)) = (o, outs.get(slot)) else {
                    continue;
                };
                let cur = &mut f.values[o.index()];
                // A declaration (value_info) wins over inference where it says more.
                if cur.dtype.is_none() {
                    cur.dtype = new.dtype;
                }
                match (&mut cur.shape, &new.shape) {
                    (None, s) => cur.shape = s.clone(),
                    (Some(c), Some(s)) if c.len() == s.len() => {
                        for (a, b) in c.iter_mut().zip(s) {
                            if a.is_none() {
                                *a = *b;
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        f
    }
}

fn value_info_facts(vi: &ValueInfoProto) -> Option<ValueFacts> {
    let t = vi.r#type.as_ref()?;
    let Some(type_proto::Value::TensorType(tt)) = &t.value else {
        return None;
    };
    let shape = tt.shape.as_ref().map(|s| {
        s.dim
            .iter()
            .map(|d| match d.value {
                Some(crate::proto::tensor_shape_proto::dimension::Value::DimValue(v)) if v >= 0 => {
                    Some(v)
                }
                _ => None,
            })
            .collect()
    });
    Some(ValueFacts {
        dtype: tt.elem_type.filter(|&t| t != 0),
        shape,
    })
}

/// An attribute of a node by name.
pub fn attr<'a>(g: &'a Graph, n: NodeId, name: &str) -> Option<&'a AttributeProto> {
    g.node(n).attr(name).map(|a| &a.proto)
}

pub fn attr_i(g: &Graph, n: NodeId, name: &str) -> Option<i64> {
    attr(g, n, name).and_then(|a| a.i)
}

pub fn attr_ints(g: &Graph, n: NodeId, name: &str) -> Option<Vec<i64>> {
    attr(g, n, name).map(|a| a.ints.clone())
}

/// The constant tensor behind a value: an initializer, or the `value` of a `Constant` node.
pub fn const_tensor(g: &Graph, v: ValueId) -> Option<TensorProto> {
    match g.value(v).origin {
        Origin::Initializer | Origin::Input => g.initializer(v).cloned(),
        Origin::Node { node, .. } => {
            let nd = g.node(node);
            if nd.op_type != "Constant" || !nd.domain().is_empty() {
                return None;
            }
            let a = nd.attributes.first()?;
            match a.name() {
                "value" => a.proto.t.clone(),
                "value_ints" => Some(TensorProto {
                    dims: vec![a.proto.ints.len() as i64],
                    data_type: Some(dtype::INT64),
                    int64_data: a.proto.ints.clone(),
                    ..Default::default()
                }),
                "value_int" => Some(TensorProto {
                    data_type: Some(dtype::INT64),
                    int64_data: vec![a.proto.i?],
                    ..Default::default()
                }),
                "value_float" => Some(TensorProto {
                    data_type: Some(dtype::FLOAT),
                    float_data: vec![a.proto.f?],
                    ..Default::default()
                }),
                "value_floats" => Some(TensorProto {
                    dims: vec![a.proto.floats.len() as i64],
                    data_type: Some(dtype::FLOAT),
                    float_data: a.proto.floats.clone(),
                    ..Default::default()
                }),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The payload bytes of a tensor stored as `raw_data` (or externally, with a resolver).
fn raw_bytes(t: &TensorProto, ext: Option<&ExternalData>) -> Option<bytes::Bytes> {
    if is_external(t) {
        let ext = ext?;
        let r = external_ref(t).ok()?;
        return ext.read(&r).ok();
    }
    t.raw_data.clone()
}

fn element_count(t: &TensorProto) -> Option<usize> {
    let n = crate::tensor::element_count(&t.dims).ok()?;
    usize::try_from(n).ok()
}

/// The values of an integer tensor (int64 or int32), or `None`.
pub fn tensor_i64(t: &TensorProto, ext: Option<&ExternalData>) -> Option<Vec<i64>> {
    let n = element_count(t)?;
    let v: Vec<i64> = match t.data_type? {
        dtype::INT64 => match raw_bytes(t, ext) {
            Some(b) => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
            None => t.int64_data.clone(),
        },
        dtype::INT32 => match raw_bytes(t, ext) {
            Some(b) => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap_or([0; 4])) as i64)
                .collect(),
            None => t.int32_data.iter().map(|&x| x as i64).collect(),
        },
        _ => return None,
    };
    (v.len() == n).then_some(v)
}

/// The values of a float32 tensor, or `None`.
pub fn tensor_f32(t: &TensorProto, ext: Option<&ExternalData>) -> Option<Vec<f32>> {
    if t.data_type? != dtype::FLOAT {
        return None;
    }
    let n = element_count(t)?;
    let v: Vec<f32> = match raw_bytes(t, ext) {
        Some(b) => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
            .collect(),
        None => t.float_data.clone(),
    };
    (v.len() == n).then_some(v)
}

/// The integer values of a constant value (initializer or `Constant`).
pub fn const_i64(g: &Graph, v: ValueId, ext: Option<&ExternalData>) -> Option<Vec<i64>> {
    tensor_i64(&const_tensor(g, v)?, ext)
}

fn same(f: &Facts, v: Option<ValueId>) -> ValueFacts {
    v.map(|v| f.get(v)).unwrap_or_default()
}

/// Numpy broadcasting of known shapes (unknown dims stay unknown unless the other side fixes
/// them to something other than 1).
fn broadcast(shapes: &[Option<Vec<Option<i64>>>]) -> Option<Vec<Option<i64>>> {
    let mut rank = 0;
    for s in shapes {
        rank = rank.max(s.as_ref()?.len());
    }
    let mut out = vec![Some(1i64); rank];
    for s in shapes.iter().flatten() {
        let off = rank - s.len();
        for (i, d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            *o = match (*o, *d) {
                (Some(1), x) => x,
                (x, Some(1)) => x,
                (Some(a), Some(b)) if a == b => Some(a),
                (Some(a), None) if a != 1 => Some(a),
                (None, Some(b)) => Some(b),
                _ => None,
            };
        }
    }
    Some(out)
}

fn norm_axis(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let a = if a < 0 { a + r } else { a };
    (0..r).contains(&a).then_some(a as usize)
}

/// Output spatial size of a convolution or pooling window along one axis (explicit pads).
fn window_out(
    input: Option<i64>,
    k: i64,
    stride: i64,
    dil: i64,
    pad: i64,
    ceil: bool,
) -> Option<i64> {
    let i = input?;
    let span = dil * (k - 1) + 1;
    let num = i + pad - span;
    if num < 0 || stride <= 0 {
        return None;
    }
    Some(if ceil {
        (num + stride - 1) / stride + 1
    } else {
        num / stride + 1
    })
}

fn conv_pool_spatial(
    g: &Graph,
    n: NodeId,
    x: &[Option<i64>],
    kernel: &[i64],
    ceil: bool,
) -> Vec<Option<i64>> {
    let sp = x.len().saturating_sub(2);
    let auto_pad = attr(g, n, "auto_pad")
        .and_then(|a| a.s.as_ref())
        .map(|s| String::from_utf8_lossy(s).to_string())
        .unwrap_or_else(|| "NOTSET".into());
    let strides = attr_ints(g, n, "strides").unwrap_or_else(|| vec![1; sp]);
    let dil = attr_ints(g, n, "dilations").unwrap_or_else(|| vec![1; sp]);
    let pads = attr_ints(g, n, "pads").unwrap_or_else(|| vec![0; 2 * sp]);
    (0..sp)
        .map(|i| {
            let input = x.get(2 + i).copied().flatten();
            let s = *strides.get(i)?;
            match auto_pad.as_str() {
                "SAME_UPPER" | "SAME_LOWER" => input.map(|v| (v + s - 1) / s),
                "VALID" => window_out(input, *kernel.get(i)?, s, *dil.get(i)?, 0, ceil),
                _ => {
                    let p = pads.get(i)? + pads.get(i + sp)?;
                    window_out(input, *kernel.get(i)?, s, *dil.get(i)?, p, ceil)
                }
            }
        })
        .collect()
}

fn infer_node(
    g: &Graph,
    f: &Facts,
    n: NodeId,
    opset: i64,
    nchwc_block: Option<i64>,
) -> Vec<ValueFacts> {
    let node = g.node(n);
    let inp = |i: usize| node.inputs.get(i).copied().flatten();
    let x = same(f, inp(0));
    let dt0 = x.dtype;
    let op = node.op_type.as_str();
    let dom = node.domain();
    let one = |v: ValueFacts| vec![v];
    let with = |dtype: Option<i32>, shape: Option<Vec<Option<i64>>>| ValueFacts { dtype, shape };
    match (dom, op) {
        (
            "",
            "Relu"
            | "Sigmoid"
            | "Tanh"
            | "Clip"
            | "HardSigmoid"
            | "HardSwish"
            | "LeakyRelu"
            | "Elu"
            | "Selu"
            | "Celu"
            | "Neg"
            | "Abs"
            | "Exp"
            | "Log"
            | "Sqrt"
            | "Reciprocal"
            | "Erf"
            | "Softmax"
            | "LogSoftmax"
            | "Hardmax"
            | "Identity"
            | "Softplus"
            | "Softsign"
            | "Floor"
            | "Ceil"
            | "Round"
            | "Sin"
            | "Cos"
            | "Mish"
            | "Gelu"
            | "ThresholdedRelu"
            | "Sign"
            | "Not"
            | "BatchNormalization"
            | "InstanceNormalization"
            | "LpNormalization"
            | "GroupNormalization"
            | "LayerNormalization"
            | "SimplifiedLayerNormalization"
            | "RMSNormalization"
            | "Dropout"
            | "Shrink"
            | "Swish"
            | "Pad"
            | "Trilu"
            | "CumSum"
            | "ReverseSequence",
        )
        | (
            "com.microsoft",
            "QuickGelu"
            | "Gelu"
            | "FastGelu"
            | "BiasGelu"
            | "SkipLayerNormalization"
            | "SkipSimplifiedLayerNormalization"
            | "BiasSoftmax"
            | "BiasAdd",
        ) => {
            let mut outs = vec![x.clone()];
            if matches!(
                op,
                "SkipLayerNormalization" | "SkipSimplifiedLayerNormalization"
            ) {
                // mean, inv_std_var: float, last dim 1; input_skip_bias_sum like the input.
                let reduced = x.shape.clone().map(|mut s| {
                    if let Some(l) = s.last_mut() {
                        *l = Some(1);
                    }
                    s
                });
                outs.push(with(Some(dtype::FLOAT), reduced.clone()));
                outs.push(with(Some(dtype::FLOAT), reduced));
                outs.push(x);
            }
            outs
        }
        ("", "PRelu" | "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Max" | "Min" | "Sum" | "Mean")
        | ("", "Mod" | "BitShift") => {
            let shapes: Vec<_> = node.inputs.iter().map(|v| same(f, *v).shape).collect();
            one(with(dt0, broadcast(&shapes)))
        }
        ("", "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "And" | "Or")
        | ("", "Xor" | "IsNaN" | "IsInf") => {
            let shapes: Vec<_> = node.inputs.iter().map(|v| same(f, *v).shape).collect();
            one(with(Some(dtype::BOOL), broadcast(&shapes)))
        }
        ("", "Where") => {
            let shapes: Vec<_> = node.inputs.iter().map(|v| same(f, *v).shape).collect();
            one(with(same(f, inp(1)).dtype, broadcast(&shapes)))
        }
        ("", "Cast") => one(with(attr_i(g, n, "to").map(|t| t as i32), x.shape.clone())),
        ("", "CastLike") => one(with(same(f, inp(1)).dtype, x.shape.clone())),
        ("", "Shape") => one(with(
            Some(dtype::INT64),
            x.rank().map(|r| vec![Some(r as i64)]),
        )),
        ("", "Size") => one(with(Some(dtype::INT64), Some(vec![]))),
        ("", "Constant") => {
            let t = node.outputs.first().copied().flatten().and_then(|_| {
                let a = node.attributes.first()?;
                match a.name() {
                    "value" => a.proto.t.clone(),
                    _ => None,
                }
            });
            match t {
                Some(t) => one(with(
                    t.data_type,
                    Some(t.dims.iter().map(|&d| Some(d)).collect()),
                )),
                None => {
                    let a = node.attributes.first();
                    match a.map(|a| a.name()) {
                        Some("value_ints") => one(with(
                            Some(dtype::INT64),
                            a.map(|a| vec![Some(a.proto.ints.len() as i64)]),
                        )),
                        Some("value_int") => one(with(Some(dtype::INT64), Some(vec![]))),
                        Some("value_float") => one(with(Some(dtype::FLOAT), Some(vec![]))),
                        Some("value_floats") => one(with(
                            Some(dtype::FLOAT),
                            a.map(|a| vec![Some(a.proto.floats.len() as i64)]),
                        )),
                        _ => vec![],
                    }
                }
            }
        }
        ("", "Conv" | "ConvTranspose")
        | ("com.microsoft", "FusedConv")
        | ("com.microsoft.nchwc", "Conv") => {
            let w = same(f, inp(1));
            let shape = x.shape.as_ref().map(|xs| {
                let mut s = vec![None; xs.len()];
                if let Some(s0) = s.first_mut() {
                    *s0 = xs[0];
                }
                if s.len() > 1 {
                    s[1] = if op == "ConvTranspose" {
                        w.dim(1).map(|c| c * attr_i(g, n, "group").unwrap_or(1))
                    } else {
                        w.dim(0)
                    };
                }
                if op != "ConvTranspose" {
                    let kernel: Vec<i64> = attr_ints(g, n, "kernel_shape").unwrap_or_else(|| {
                        w.shape
                            .as_ref()
                            .map(|ws| ws.iter().skip(2).map(|d| d.unwrap_or(-1)).collect())
                            .unwrap_or_default()
                    });
                    if kernel.len() + 2 == xs.len() && kernel.iter().all(|&k| k > 0) {
                        let sp = conv_pool_spatial(g, n, xs, &kernel, false);
                        s[2..].copy_from_slice(&sp);
                    }
                }
                s
            });
            one(with(dt0, shape))
        }
        ("", "MaxPool" | "AveragePool" | "LpPool")
        | ("com.microsoft.nchwc", "MaxPool" | "AveragePool") => {
            let shape = x.shape.as_ref().map(|xs| {
                let mut s = xs.clone();
                let kernel = attr_ints(g, n, "kernel_shape").unwrap_or_default();
                let ceil = attr_i(g, n, "ceil_mode").unwrap_or(0) != 0;
                if kernel.len() + 2 == xs.len() {
                    let sp = conv_pool_spatial(g, n, xs, &kernel, ceil);
                    s[2..].copy_from_slice(&sp);
                } else {
                    for d in s.iter_mut().skip(2) {
                        *d = None;
                    }
                }
                s
            });
            let mut outs = vec![with(dt0, shape.clone())];
            if op == "MaxPool" {
                outs.push(with(Some(dtype::INT64), shape));
            }
            outs
        }
        ("", "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool")
        | ("com.microsoft.nchwc", "GlobalAveragePool" | "GlobalMaxPool") => {
            let shape = x.shape.as_ref().map(|xs| {
                xs.iter()
                    .enumerate()
                    .map(|(i, d)| if i < 2 { *d } else { Some(1) })
                    .collect()
            });
            one(with(dt0, shape))
        }
        ("", "Resize" | "Upsample") | ("com.microsoft.nchwc", "Upsample") => {
            let shape = x.shape.as_ref().map(|xs| {
                xs.iter()
                    .enumerate()
                    .map(|(i, d)| if i < 2 { *d } else { None })
                    .collect()
            });
            one(with(dt0, shape))
        }
        ("com.microsoft.nchwc", "ReorderInput") => {
            let last = attr_i(g, n, "channels_last").unwrap_or(0) != 0;
            let shape = x.shape.as_ref().map(|xs| {
                let r = xs.len();
                let c = if last {
                    xs[r - 1]
                } else {
                    xs.get(1).copied().flatten()
                };
                let cp = match (c, nchwc_block) {
                    (Some(c), Some(b)) if b > 0 => Some((c + b - 1) / b * b),
                    _ => None,
                };
                let mut s = vec![xs[0], cp];
                if last {
                    s.extend_from_slice(&xs[1..r - 1]);
                } else {
                    s.extend_from_slice(&xs[2..]);
                }
                s
            });
            one(with(dt0, shape))
        }
        ("com.microsoft.nchwc", "ReorderOutput") => {
            let last = attr_i(g, n, "channels_last").unwrap_or(0) != 0;
            let c = attr_i(g, n, "channels");
            let shape = x.shape.as_ref().map(|xs| {
                let mut s = vec![xs[0]];
                if last {
                    s.extend_from_slice(&xs[2..]);
                    s.push(c);
                } else {
                    s.push(c);
                    s.extend_from_slice(&xs[2..]);
                }
                s
            });
            one(with(dt0, shape))
        }
        ("", "MatMul") | ("com.microsoft", "FusedMatMul" | "TransposeMatMul") => {
            let a = x.shape.clone();
            let b = same(f, inp(1)).shape;
            one(with(dt0, matmul_shape(g, n, a, b)))
        }
        ("", "Gemm") | ("com.microsoft", "FusedGemm") => {
            let ta = attr_i(g, n, "transA").unwrap_or(0) != 0;
            let tb = attr_i(g, n, "transB").unwrap_or(0) != 0;
            let b = same(f, inp(1));
            let m = if ta { x.dim(1) } else { x.dim(0) };
            let nn = if tb { b.dim(0) } else { b.dim(1) };
            one(with(dt0, Some(vec![m, nn])))
        }
        ("", "Transpose") => {
            let shape = x.shape.as_ref().map(|xs| {
                let perm =
                    attr_ints(g, n, "perm").unwrap_or_else(|| (0..xs.len() as i64).rev().collect());
                perm.iter()
                    .map(|&p| xs.get(p as usize).copied().flatten())
                    .collect()
            });
            one(with(dt0, shape))
        }
        ("", "Reshape") => {
            let allowzero = attr_i(g, n, "allowzero").unwrap_or(0) != 0;
            let target = if opset >= 5 {
                inp(1).and_then(|v| const_i64(g, v, None))
            } else {
                attr_ints(g, n, "shape")
            };
            let shape = target.map(|t| {
                let mut s: Vec<Option<i64>> = t
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| match d {
                        0 if !allowzero => x.dim(i),
                        -1 => None,
                        d => Some(d),
                    })
                    .collect();
                // Resolve one -1 from a fully known input.
                if let (Some(pos), Some(xs)) = (t.iter().position(|&d| d == -1), &x.shape) {
                    let total: Option<i64> = xs.iter().try_fold(1i64, |a, d| d.map(|d| a * d));
                    let rest: Option<i64> = s
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != pos)
                        .try_fold(1i64, |a, (_, d)| d.map(|d| a * d));
                    if let (Some(t), Some(r)) = (total, rest) {
                        if r > 0 && t % r == 0 {
                            s[pos] = Some(t / r);
                        }
                    }
                }
                s
            });
            one(with(dt0, shape))
        }
        ("", "Flatten") => {
            let axis = attr_i(g, n, "axis").unwrap_or(1);
            let shape = x.shape.as_ref().map(|xs| {
                let r = xs.len() as i64;
                let a = if axis < 0 { axis + r } else { axis }.clamp(0, r) as usize;
                let p = |s: &[Option<i64>]| s.iter().try_fold(1i64, |acc, d| d.map(|d| acc * d));
                vec![p(&xs[..a]), p(&xs[a..])]
            });
            one(with(dt0, shape))
        }
        ("", "Squeeze" | "Unsqueeze") => {
            let axes = if opset >= 13 {
                inp(1).and_then(|v| const_i64(g, v, None))
            } else {
                attr_ints(g, n, "axes")
            };
            let shape = match (x.shape.as_ref(), axes) {
                (Some(xs), Some(axes)) if op == "Squeeze" => {
                    let r = xs.len();
                    let ax: Vec<usize> = axes.iter().filter_map(|&a| norm_axis(a, r)).collect();
                    Some(
                        xs.iter()
                            .enumerate()
                            .filter(|(i, _)| !ax.contains(i))
                            .map(|(_, d)| *d)
                            .collect(),
                    )
                }
                (Some(xs), Some(axes)) => {
                    let r = xs.len() + axes.len();
                    let ax: Vec<usize> = axes.iter().filter_map(|&a| norm_axis(a, r)).collect();
                    let mut it = xs.iter();
                    Some(
                        (0..r)
                            .map(|i| {
                                if ax.contains(&i) {
                                    Some(1)
                                } else {
                                    it.next().copied().flatten()
                                }
                            })
                            .collect(),
                    )
                }
                (Some(xs), None) if op == "Squeeze" && xs.iter().all(|d| d.is_some()) => {
                    Some(xs.iter().filter(|d| **d != Some(1)).copied().collect())
                }
                _ => None,
            };
            one(with(dt0, shape))
        }
        ("", "Concat") => {
            let axis = attr_i(g, n, "axis").unwrap_or(0);
            let shapes: Vec<_> = node.inputs.iter().map(|v| same(f, *v).shape).collect();
            let shape = shapes.first().cloned().flatten().and_then(|s0| {
                let r = s0.len();
                let a = norm_axis(axis, r)?;
                let mut out = s0.clone();
                let mut total = Some(0i64);
                for s in &shapes {
                    match s {
                        Some(s) if s.len() == r => {
                            total = match (total, s[a]) {
                                (Some(t), Some(d)) => Some(t + d),
                                _ => None,
                            };
                            for (i, d) in s.iter().enumerate() {
                                if i != a && out[i].is_none() {
                                    out[i] = *d;
                                }
                            }
                        }
                        _ => total = None,
                    }
                }
                out[a] = total;
                Some(out)
            });
            one(with(dt0, shape))
        }
        ("", "Split") => {
            let k = node.outputs.len();
            let shape = x.shape.as_ref().map(|xs| {
                let axis = attr_i(g, n, "axis").unwrap_or(0);
                let mut s = xs.clone();
                if let Some(a) = norm_axis(axis, xs.len()) {
                    s[a] = None;
                }
                s
            });
            vec![with(dt0, shape); k]
        }
        ("", "Slice" | "Expand" | "Tile") => {
            // Rank is kept (Expand: at least the input's); extents are not tracked.
            let shape = if op == "Expand" {
                let t = inp(1).and_then(|v| const_i64(g, v, None));
                match (x.shape.as_ref(), t) {
                    (Some(xs), Some(t)) => {
                        broadcast(&[Some(xs.clone()), Some(t.iter().map(|&d| Some(d)).collect())])
                    }
                    _ => None,
                }
            } else {
                x.shape.as_ref().map(|xs| vec![None; xs.len()])
            };
            one(with(dt0, shape))
        }
        ("", "Gather") => {
            let idx = same(f, inp(1));
            let shape = match (x.shape.as_ref(), idx.shape.as_ref()) {
                (Some(xs), Some(is)) => {
                    let a = norm_axis(attr_i(g, n, "axis").unwrap_or(0), xs.len());
                    a.map(|a| {
                        let mut s = xs[..a].to_vec();
                        s.extend_from_slice(is);
                        s.extend_from_slice(&xs[a + 1..]);
                        s
                    })
                }
                _ => None,
            };
            one(with(dt0, shape))
        }
        (
            "",
            "ReduceMean" | "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL2"
            | "ReduceL1" | "ReduceSumSquare" | "ReduceLogSumExp" | "ReduceLogSum" | "ArgMax"
            | "ArgMin",
        ) => {
            let keep = attr_i(g, n, "keepdims").unwrap_or(1) != 0;
            let axes_as_input =
                (op == "ReduceSum" && opset >= 13) || (!op.starts_with("Arg") && opset >= 18);
            let axes = if op.starts_with("Arg") {
                Some(vec![attr_i(g, n, "axis").unwrap_or(0)])
            } else if axes_as_input {
                match inp(1) {
                    Some(v) => const_i64(g, v, None),
                    None => Some(vec![]),
                }
            } else {
                Some(attr_ints(g, n, "axes").unwrap_or_default())
            };
            let shape = match (x.shape.as_ref(), axes) {
                (Some(xs), Some(axes)) => {
                    let r = xs.len();
                    let all = axes.is_empty();
                    let ax: Vec<usize> = axes.iter().filter_map(|&a| norm_axis(a, r)).collect();
                    Some(
                        xs.iter()
                            .enumerate()
                            .filter_map(|(i, d)| {
                                if all || ax.contains(&i) {
                                    keep.then_some(Some(1))
                                } else {
                                    Some(*d)
                                }
                            })
                            .collect(),
                    )
                }
                _ => None,
            };
            let dt = if op.starts_with("Arg") {
                Some(dtype::INT64)
            } else {
                dt0
            };
            one(with(dt, shape))
        }
        ("com.microsoft", "Attention") => {
            let w = same(f, inp(1));
            let vh = attr_ints(g, n, "qkv_hidden_sizes")
                .and_then(|s| s.get(2).copied())
                .or_else(|| w.dim(1).map(|d| d / 3));
            let shape = x
                .shape
                .as_ref()
                .filter(|s| s.len() == 3)
                .map(|xs| vec![xs[0], xs[1], vh]);
            one(with(dt0, shape))
        }
        ("com.microsoft", "MultiHeadAttention") => {
            let v = same(f, inp(2));
            let shape = match (x.shape.as_ref(), v.shape.as_ref()) {
                (Some(q), Some(vs)) if q.len() == 3 && vs.len() == 3 => {
                    Some(vec![q[0], q[1], vs[2]])
                }
                _ => None,
            };
            one(with(dt0, shape))
        }
        ("com.microsoft", "NhwcConv") => {
            let w = same(f, inp(1));
            let shape = x.shape.as_ref().map(|xs| {
                let mut s = vec![None; xs.len()];
                s[0] = xs[0];
                if let Some(l) = s.last_mut() {
                    *l = w.dim(0);
                }
                s
            });
            one(with(dt0, shape))
        }
        ("com.microsoft", "NhwcMaxPool") => {
            let shape = x.shape.as_ref().map(|xs| {
                let mut s = vec![None; xs.len()];
                s[0] = xs[0];
                if let Some(l) = s.last_mut() {
                    *l = xs.last().copied().flatten();
                }
                s
            });
            one(with(dt0, shape))
        }
        _ => vec![],
    }
}

fn matmul_shape(
    g: &Graph,
    n: NodeId,
    a: Option<Vec<Option<i64>>>,
    b: Option<Vec<Option<i64>>>,
) -> Option<Vec<Option<i64>>> {
    let mut a = a?;
    let mut b = b?;
    let flag = |name: &str| attr_i(g, n, name).unwrap_or(0) != 0;
    let batch_t = |s: &mut Vec<Option<i64>>| {
        if s.len() >= 3 {
            let first = s.remove(0);
            let l = s.len();
            s.insert(l - 1, first);
        }
    };
    let swap = |s: &mut Vec<Option<i64>>| {
        let l = s.len();
        if l >= 2 {
            s.swap(l - 1, l - 2);
        }
    };
    if flag("transBatchA") {
        batch_t(&mut a);
    }
    if flag("transBatchB") {
        batch_t(&mut b);
    }
    if flag("transA") {
        swap(&mut a);
    }
    if flag("transB") {
        swap(&mut b);
    }
    let (ra, rb) = (a.len(), b.len());
    if ra == 0 || rb == 0 {
        return None;
    }
    let m = if ra >= 2 { Some(a[ra - 2]) } else { None };
    let nn = if rb >= 2 { Some(b[rb - 1]) } else { None };
    let ba = if ra > 2 { a[..ra - 2].to_vec() } else { vec![] };
    let bb = if rb > 2 { b[..rb - 2].to_vec() } else { vec![] };
    let mut out = broadcast(&[Some(ba), Some(bb)])?;
    if let Some(m) = m {
        out.push(m);
    }
    if let Some(nn) = nn {
        out.push(nn);
    }
    Some(out)
}
