//! What an operator's inference function sees (its node, its inputs' facts, its attributes)
//! and what it returns.

use std::collections::HashMap;

use crate::ir::{Graph, Model, Node, ValueId};
use crate::proto::TensorProto;

use super::consts::{self, Elems, ValueData};
use super::{ConstTensor, Dim, Facts, InferOptions, Seed, Shape, TensorInfo};

/// An inference function: the facts of a node's outputs, in output order (missing entries
/// are unknown).
pub(crate) type InferFn = fn(&Ctx) -> Vec<Out>;

/// The facts of one output.
#[derive(Debug, Clone, Default)]
pub(crate) struct Out {
    pub info: TensorInfo,
    /// Folded contents (checked against `info` before they are kept).
    pub konst: Option<ConstTensor>,
    /// Symbolic contents of a small integer tensor (rank 0 or 1).
    pub data: Option<Vec<Dim>>,
    /// Contents not decoded yet (a large floating-point constant; see `consts::Lazy`).
    pub lazy: Option<consts::Lazy>,
}

impl Out {
    pub fn new(dtype: Option<i32>, shape: Option<Vec<Dim>>) -> Out {
        Out::with_shape(dtype, shape.map(Shape::from))
    }
    /// An output of this element type and shape (a shape another value has, shared).
    pub fn with_shape(dtype: Option<i32>, shape: Option<Shape>) -> Out {
        Out {
            info: TensorInfo { dtype, shape },
            ..Out::default()
        }
    }
    pub fn info(info: TensorInfo) -> Out {
        Out {
            info,
            ..Out::default()
        }
    }
    pub fn dtype(dtype: Option<i32>) -> Out {
        Out::new(dtype, None)
    }
    /// An output whose contents are known (fully or symbolically).
    pub fn from_data(v: ValueData) -> Out {
        let ValueData { dtype, dims, elems } = v;
        let shape = Some(dims.iter().map(|&d| super::dims::known_dim(d)).collect());
        let mut out = Out::new(Some(dtype), shape);
        if consts::count(&dims).is_none_or(|n| n > consts::MAX_CONST_ELEMENTS) {
            return out;
        }
        match elems {
            Elems::Ints(d) => {
                let ints: Option<Vec<i64>> = d.iter().map(Dim::known).collect();
                if let Some(ints) = ints {
                    out.konst = Some(ConstTensor {
                        dtype,
                        dims: dims.clone(),
                        ints: Some(ints),
                        floats: None,
                    });
                }
                if dims.len() <= 1 {
                    out.data = Some(d);
                }
            }
            Elems::Floats(f) => {
                out.konst = Some(ConstTensor {
                    dtype,
                    dims,
                    ints: None,
                    floats: Some(f),
                });
            }
        }
        out
    }
}

/// The view an inference function has of its node.
pub(crate) struct Ctx<'a, 'e> {
    pub node: &'a Node,
    /// The imported version of the node's operator set (`None`: not imported).
    pub opset: Option<i64>,
    facts: &'a Facts,
    /// Facts about the whole graph that single nodes cannot see.
    pub env: &'a Env<'e>,
}

/// The graph being inferred, and graph-wide facts computed before the node walk.
pub(crate) struct Env<'a> {
    /// The NCHWc block size the model was optimized for, when the model proves it.
    pub nchwc_block: Option<i64>,
    pub model: &'a Model,
    pub graph: &'a Graph,
    pub opts: &'a InferOptions,
    /// Value ids by name (built when a subgraph first needs them).
    pub names: std::cell::OnceCell<HashMap<&'a str, ValueId>>,
    /// Subgraph nodes that may still be inferred (shared by every nesting level).
    pub budget: &'a std::cell::Cell<usize>,
}

static UNKNOWN: TensorInfo = TensorInfo {
    dtype: None,
    shape: None,
};

impl<'a, 'e> Ctx<'a, 'e> {
    pub fn new(node: &'a Node, opset: Option<i64>, facts: &'a Facts, env: &'a Env<'e>) -> Self {
        Ctx {
            node,
            opset,
            facts,
            env,
        }
    }

    /// The operator set version, 1 when the model does not import the domain.
    pub fn version(&self) -> i64 {
        self.opset.unwrap_or(1)
    }
    pub fn n_inputs(&self) -> usize {
        self.node.inputs.len()
    }
    pub fn n_outputs(&self) -> usize {
        self.node.outputs.len()
    }
    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.node.inputs.get(i).copied().flatten()
    }
    /// Whether optional input `i` is given.
    pub fn has(&self, i: usize) -> bool {
        self.input(i).is_some()
    }
    pub fn info(&self, i: usize) -> &TensorInfo {
        match self.input(i) {
            Some(v) => self.facts.info(v),
            None => &UNKNOWN,
        }
    }
    pub fn dtype(&self, i: usize) -> Option<i32> {
        self.info(i).dtype
    }
    pub fn shape(&self, i: usize) -> Option<&[Dim]> {
        self.info(i).shape.as_deref()
    }
    pub fn rank(&self, i: usize) -> Option<usize> {
        self.info(i).rank()
    }
    pub fn konst(&self, i: usize) -> Option<&ConstTensor> {
        self.facts.const_value(self.input(i)?)
    }
    /// The integer contents of input `i`, when fully known.
    pub fn ints(&self, i: usize) -> Option<Vec<i64>> {
        if let Some(k) = self.konst(i) {
            return k.ints.clone();
        }
        self.data(i)?.iter().map(Dim::known).collect()
    }
    /// The floating-point contents of input `i` (integers converted), when fully known.
    pub fn floats(&self, i: usize) -> Option<Vec<f64>> {
        let k = self.konst(i)?;
        match (&k.floats, &k.ints) {
            (Some(f), _) => Some(f.clone()),
            (None, Some(i)) => Some(i.iter().map(|&x| x as f64).collect()),
            _ => None,
        }
    }
    /// The elements of a small integer input as dimensions (symbolic where they come from a
    /// shape), e.g. the target of a `Reshape`.
    pub fn data(&self, i: usize) -> Option<Vec<Dim>> {
        let v = self.input(i)?;
        if let Some(d) = self.facts.shape_data(v) {
            return Some(d.to_vec());
        }
        let k = self.facts.const_value(v)?;
        if k.dims.len() > 1 {
            return None;
        }
        Some(k.ints.as_ref()?.iter().map(|&x| Dim::Known(x)).collect())
    }
    /// Input `i` with its contents (constant or symbolic), for folding.
    pub fn value_data(&self, i: usize) -> Option<ValueData> {
        let v = self.input(i)?;
        if let Some(k) = self.facts.const_value(v) {
            let elems = match (&k.ints, &k.floats) {
                (Some(x), _) => Elems::Ints(x.iter().map(|&i| Dim::Known(i)).collect()),
                (None, Some(f)) => Elems::Floats(f.clone()),
                _ => return None,
            };
            return Some(ValueData {
                dtype: k.dtype,
                dims: k.dims.clone(),
                elems,
            });
        }
        let d = self.facts.shape_data(v)?;
        let info = self.facts.info(v);
        let dims = match info.shape.as_deref()? {
            [] => vec![],
            [_] => vec![i64::try_from(d.len()).ok()?],
            _ => return None,
        };
        Some(ValueData {
            dtype: info.dtype?,
            dims,
            elems: Elems::Ints(d.to_vec()),
        })
    }

    fn attr(&self, name: &str) -> Option<&'a crate::ir::Attribute> {
        self.node.attr(name)
    }
    pub fn has_attr(&self, name: &str) -> bool {
        self.node.attr(name).is_some()
    }
    pub fn attr_i(&self, name: &str) -> Option<i64> {
        self.attr(name)?.i()
    }
    pub fn attr_f(&self, name: &str) -> Option<f32> {
        self.attr(name)?.f()
    }
    pub fn attr_s(&self, name: &str) -> Option<&'a str> {
        std::str::from_utf8(self.attr(name)?.s()?).ok()
    }
    pub fn attr_ints(&self, name: &str) -> Option<&'a [i64]> {
        Some(self.attr(name)?.ints())
    }
    pub fn attr_floats(&self, name: &str) -> Option<&'a [f32]> {
        Some(self.attr(name)?.floats())
    }
    pub fn attr_t(&self, name: &str) -> Option<&'a TensorProto> {
        self.attr(name)?.t()
    }
    /// A subgraph attribute (the branches of `If`, the body of `Loop`/`Scan`).
    pub fn attr_g(&self, name: &str) -> Option<&'a Graph> {
        self.node.attr(name)?.g()
    }
    /// One `Out` per node output, all unknown but for the element type.
    pub fn all_dtype(&self, dtype: Option<i32>) -> Vec<Out> {
        (0..self.n_outputs()).map(|_| Out::dtype(dtype)).collect()
    }
}

impl Ctx<'_, '_> {
    /// What this graph knows of a value, by name (for its subgraphs).
    pub fn seed(&self, name: &str) -> Option<Seed> {
        let names = self.env.names.get_or_init(|| {
            self.env
                .graph
                .values
                .iter()
                .enumerate()
                .map(|(i, v)| (&*v.name, ValueId(i as u32)))
                .collect()
        });
        let v = *names.get(name)?;
        Some(self.facts.seed(v))
    }

    /// Infer a subgraph of this node, its outer-scope values resolved here (`None` when
    /// the subgraph budget is spent).
    pub fn infer_subgraph(&self, g: &Graph) -> Option<Facts> {
        let left = self
            .env
            .budget
            .get()
            .checked_sub(g.node_count().saturating_add(16))?;
        self.env.budget.set(left);
        let outer = |name: &str| self.seed(name);
        Some(super::infer_scoped(
            self.env.model,
            g,
            self.env.opts,
            Some(&outer),
            self.env.budget,
        ))
    }

    /// The facts of a subgraph's outputs, as node outputs (unknown past the budget).
    pub fn subgraph_outputs(&self, g: &Graph) -> Vec<Out> {
        let Some(f) = self.infer_subgraph(g) else {
            return Vec::new();
        };
        g.outputs
            .iter()
            .map(|o| Out {
                info: f.info(o.value).clone(),
                konst: f.const_value(o.value).cloned(),
                data: f.shape_data(o.value).map(<[Dim]>::to_vec),
                lazy: None,
            })
            .collect()
    }
}
