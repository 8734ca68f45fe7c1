//! Estimated work of a node, from inferred shapes: floating-point (or integer) operations for
//! the heavy ops (Conv, ConvTranspose, MatMul, Gemm, their fused forms and their integer forms
//! ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul) plus the bytes it reads and writes.
//! Used by `barrier` budgets.
//!
//! [`work`] is exact: it needs every shape. [`Estimates`] never gives up: a value whose size
//! inference could not find (a data-dependent shape, an op without an inference rule) is
//! bounded from its neighbours (see [`Estimates::new`]), and the node's work is then an
//! estimate, flagged as *bounded*.
//!
//! Formulas (multiply-add counted as 2 operations):
//! - Conv: 2 · N · M · ∏(output spatial) · (C / group) · ∏(kernel)   (output-stationary count)
//! - ConvTranspose: 2 · N · C · ∏(input spatial) · (M / group) · ∏(kernel)
//! - MatMul [.., m, k] x [.., k, n]: 2 · batch · m · k · n; Gemm likewise on its 2-D operands.
//!
//! With sizes bounded from neighbours (element counts |·|):
//! - Conv: 2 · |Y| · |W| / M (|W| / M is (C / group) · ∏kernel, exact when W's dims are known)
//! - ConvTranspose: 2 · |X| · |W| / C
//! - MatMul, Gemm: 2 · √(|A| · |B| · |Y|) (exact for matrices and for a batch against a matrix;
//!   over by √batch when both operands are batched)

use crate::infer::Facts;
use crate::ir::{Graph, NodeId, ValueId};
use crate::tensor::elem_size;

fn numel(d: &[i64]) -> Option<u64> {
    d.iter().try_fold(1u64, |acc, &x| {
        u64::try_from(x).ok().and_then(|x| acc.checked_mul(x))
    })
}

/// Where a heavy op's operands are: (kind, data input, weight input).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Heavy {
    /// Conv-like, NCHW output (Conv, FusedConv, ConvInteger, QLinearConv).
    Conv {
        w: usize,
    },
    /// Conv with an NHWC output (NhwcConv).
    NhwcConv,
    ConvTranspose,
    /// MatMul-like: A and B slots.
    MatMul {
        b: usize,
    },
}

fn heavy(g: &Graph, n: NodeId) -> Option<Heavy> {
    let node = g.node(n);
    let d = node.domain();
    let std = d.is_empty() || d == "ai.onnx";
    let ms = d == "com.microsoft";
    Some(match node.op_type.as_str() {
        "Conv" | "ConvInteger" if std => Heavy::Conv { w: 1 },
        "QLinearConv" if std => Heavy::Conv { w: 3 },
        "FusedConv" if ms => Heavy::Conv { w: 1 },
        "NhwcConv" if ms => Heavy::NhwcConv,
        "ConvTranspose" if std => Heavy::ConvTranspose,
        "MatMul" | "Gemm" | "MatMulInteger" if std => Heavy::MatMul { b: 1 },
        "QLinearMatMul" if std => Heavy::MatMul { b: 3 },
        "FusedMatMul" | "FusedGemm" | "TransposeMatMul" if ms => Heavy::MatMul { b: 1 },
        _ => return None,
    })
}

/// Floating-point operations of a node, when it is one of the heavy ops and shapes are known;
/// `Some(0)` for other ops.
pub fn flops(g: &Graph, n: NodeId, s: &Facts) -> Option<u64> {
    let node = g.node(n);
    let input = |i: usize| node.inputs.get(i).copied().flatten();
    let output = |i: usize| node.outputs.get(i).copied().flatten();
    let Some(kind) = heavy(g, n) else {
        return Some(0);
    };
    match kind {
        Heavy::Conv { .. } | Heavy::NhwcConv => {
            let slot = match kind {
                Heavy::Conv { w } => w,
                _ => 1,
            };
            let w = s.dims(input(slot)?)?;
            let y = s.dims(output(0)?)?;
            if w.len() < 3 || y.len() != w.len() {
                return None;
            }
            let kernel = numel(&w[2..])?;
            let spatial = if kind == Heavy::NhwcConv {
                numel(&y[1..y.len() - 1])?
            } else {
                numel(&y[2..])?
            };
            let (batch, m) = (u64::try_from(y[0]).ok()?, u64::try_from(w[0]).ok()?);
            let cg = u64::try_from(w[1]).ok()?;
            2u64.checked_mul(batch)?
                .checked_mul(m)?
                .checked_mul(spatial)?
                .checked_mul(cg)?
                .checked_mul(kernel)
        }
        Heavy::ConvTranspose => {
            let w = s.dims(input(1)?)?;
            let x = s.dims(input(0)?)?;
            if w.len() < 3 || x.len() != w.len() {
                return None;
            }
            let per = numel(&w[1..])?; // (M / group) · ∏kernel
            2u64.checked_mul(numel(&x)?)?.checked_mul(per)
        }
        Heavy::MatMul { .. } => {
            let a = s.dims(input(0)?)?;
            let y = s.dims(output(0)?)?;
            if a.len() < 2 || y.is_empty() {
                return None;
            }
            let trans_a = node.attr("transA").and_then(|a| a.i()).unwrap_or(0) != 0;
            let k = if trans_a {
                a[a.len() - 2]
            } else {
                a[a.len() - 1]
            };
            2u64.checked_mul(numel(&y)?)?
                .checked_mul(u64::try_from(k).ok()?)
        }
    }
}

/// Bytes a node reads and writes (all inputs and outputs with known shape and type).
pub fn bytes(g: &Graph, n: NodeId, s: &Facts) -> Option<u64> {
    let node = g.node(n);
    let mut total = 0u64;
    for v in node.inputs.iter().chain(node.outputs.iter()).flatten() {
        // The element count without collecting the dims (this runs per node per cut).
        let info = s.info(*v);
        let n = info.numel()?;
        let t = info.dtype?;
        total = total.checked_add(n.checked_mul(elem_size(t))?)?;
    }
    Some(total)
}

/// The work estimate when every shape is known: operations plus bytes moved (one unit each).
pub fn work(g: &Graph, n: NodeId, s: &Facts) -> Option<u64> {
    flops(g, n, s)?.checked_add(bytes(g, n, s)?)
}

/// The size of every value of a graph at the assumed sizes: exact where inference knows the
/// shape, otherwise bounded from the values around it.
pub struct Estimates {
    /// Per value: the element count (exact or bounded), `None` when nothing around it is
    /// known either.
    numel: Vec<Option<u64>>,
    /// Per value: is `numel` exact?
    exact: Vec<bool>,
}

/// Element size assumed for a value of unknown type: a 32-bit float.
const UNKNOWN_ELEM: u64 = 4;

impl Estimates {
    /// The sizes of `g`'s values, `topo` being its nodes in a topological order.
    ///
    /// A value inference left without a full shape is bounded, in this order, by:
    /// 1. its producer: the largest of the producer's inputs and other outputs (most ops keep
    ///    or shrink their largest operand; the bound is never under what the known dims of its
    ///    own shape multiply to);
    /// 2. its readers (for a value without a producer that sizes it, e.g. a graph input of
    ///    unknown shape): the largest of the readers' other operands;
    /// 3. its producer again, for values downstream of those found by 2.
    ///
    /// What none of these reach is the product of the dims of its shape that are known, or,
    /// without a shape, has no estimate (counted as 0 bytes).
    pub fn new(g: &Graph, s: &Facts, topo: &[NodeId]) -> Self {
        Self::with_consumers(g, s, topo, &g.consumers())
    }

    /// [`Estimates::new`] with the graph's readers already at hand.
    pub fn with_consumers(
        g: &Graph,
        s: &Facts,
        topo: &[NodeId],
        consumers: &crate::ir::Consumers,
    ) -> Self {
        let nv = g.values.len();
        let mut numel: Vec<Option<u64>> = Vec::with_capacity(nv);
        let mut exact = Vec::with_capacity(nv);
        for i in 0..nv {
            let n = s.info(ValueId(i as u32)).numel();
            exact.push(n.is_some());
            numel.push(n);
        }
        // The product of a value's known dims (a lower bound when some are not known).
        let partial = |v: ValueId| -> Option<u64> {
            let shape = s.shape(v)?;
            shape
                .iter()
                .filter_map(|d| d.known())
                .try_fold(1u64, |acc, d| acc.checked_mul(u64::try_from(d).ok()?))
        };
        let max_of = |est: &[Option<u64>], it: &mut dyn Iterator<Item = ValueId>| -> Option<u64> {
            it.filter_map(|v| est.get(v.index()).copied().flatten())
                .max()
        };
        let forward = |numel: &mut Vec<Option<u64>>, exact: &[bool]| {
            for &n in topo {
                let node = g.node(n);
                for o in node.outputs.iter().flatten() {
                    if exact.get(o.index()).copied().unwrap_or(true) || numel[o.index()].is_some() {
                        continue;
                    }
                    let from_inputs = max_of(
                        numel,
                        &mut node
                            .inputs
                            .iter()
                            .flatten()
                            .copied()
                            .chain(node.implicit_inputs().iter().copied()),
                    );
                    let from_siblings = max_of(
                        numel,
                        &mut node.outputs.iter().flatten().copied().filter(|x| x != o),
                    );
                    let bound = from_inputs.max(from_siblings);
                    numel[o.index()] = bound.map(|b| b.max(partial(*o).unwrap_or(0)));
                }
            }
        };
        forward(&mut numel, &exact);
        // Backward: values still without an estimate, from their readers.
        for &n in topo.iter().rev() {
            let node = g.node(n);
            for v in node
                .inputs
                .iter()
                .flatten()
                .chain(node.implicit_inputs().iter())
            {
                if numel.get(v.index()).copied().flatten().is_some() {
                    continue;
                }
                let mut best: Option<u64> = None;
                for (c, _) in consumers.of(*v) {
                    let cn = g.node(*c);
                    let around = cn
                        .inputs
                        .iter()
                        .flatten()
                        .chain(cn.outputs.iter().flatten())
                        .filter(|x| *x != v)
                        .copied();
                    best = best.max(max_of(&numel, &mut { around }));
                }
                if let (Some(b), Some(slot)) = (best, numel.get_mut(v.index())) {
                    *slot = Some(b.max(partial(*v).unwrap_or(0)));
                }
            }
        }
        forward(&mut numel, &exact);
        // What nothing around bounds: the product of its own known dims, if any.
        for (i, n) in numel.iter_mut().enumerate() {
            if n.is_none() {
                *n = partial(ValueId(i as u32));
            }
        }
        Estimates { numel, exact }
    }

    /// The element count of `v` and whether it is exact (`0`, not exact, when unknown).
    pub fn numel(&self, v: ValueId) -> (u64, bool) {
        let i = v.index();
        (
            self.numel.get(i).copied().flatten().unwrap_or(0),
            self.exact.get(i).copied().unwrap_or(false),
        )
    }

    /// The bytes of `v` and whether the figure is exact (a value of unknown element type is
    /// taken as 4 bytes an element).
    pub fn bytes(&self, s: &Facts, v: ValueId) -> (u64, bool) {
        let (n, exact) = self.numel(v);
        let (size, typed) = match s.dtype(v) {
            Some(t) => (elem_size(t), true),
            None => (UNKNOWN_ELEM, false),
        };
        (n.saturating_mul(size), exact && typed)
    }

    /// The work of node `n`: exact ([`work`]) when every shape is known, otherwise from the
    /// bounded sizes (see the module's formulas).
    pub fn work(&self, g: &Graph, n: NodeId, s: &Facts) -> NodeWork {
        if let Some(w) = work(g, n, s) {
            return NodeWork {
                work: w,
                bounded: false,
            };
        }
        let node = g.node(n);
        let mut bounded = false;
        let mut total = 0u64;
        for v in node.inputs.iter().chain(node.outputs.iter()).flatten() {
            let (b, exact) = self.bytes(s, *v);
            bounded |= !exact;
            total = total.saturating_add(b);
        }
        let ops = match flops(g, n, s) {
            Some(f) => f,
            None => {
                bounded = true;
                self.bounded_flops(g, n, s)
            }
        };
        NodeWork {
            work: total.saturating_add(ops),
            bounded,
        }
    }

    /// The operations of a heavy op whose shapes are not all known, from the bounded sizes.
    fn bounded_flops(&self, g: &Graph, n: NodeId, s: &Facts) -> u64 {
        let node = g.node(n);
        let size = |i: Option<ValueId>| i.map_or(0, |v| self.numel(v).0) as f64;
        let input = |i: usize| node.inputs.get(i).copied().flatten();
        let output = |i: usize| node.outputs.get(i).copied().flatten();
        // The first dim of the weights, when known (M for a Conv, C for a ConvTranspose).
        let lead = |w: Option<ValueId>| {
            w.and_then(|w| s.info(w).dim(0))
                .filter(|&d| d > 0)
                .map_or(1.0, |d| d as f64)
        };
        let ops = match heavy(g, n) {
            None => 0.0,
            Some(Heavy::Conv { w }) => 2.0 * size(output(0)) * size(input(w)) / lead(input(w)),
            Some(Heavy::NhwcConv) => 2.0 * size(output(0)) * size(input(1)) / lead(input(1)),
            Some(Heavy::ConvTranspose) => 2.0 * size(input(0)) * size(input(1)) / lead(input(1)),
            Some(Heavy::MatMul { b }) => {
                2.0 * (size(input(0)) * size(input(b)) * size(output(0))).sqrt()
            }
        };
        if ops.is_finite() && ops < u64::MAX as f64 {
            ops.ceil() as u64
        } else {
            u64::MAX
        }
    }
}

/// A node's estimated work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeWork {
    /// Operations plus bytes moved.
    pub work: u64,
    /// Some size it rests on was bounded from neighbours, not inferred.
    pub bounded: bool,
}
