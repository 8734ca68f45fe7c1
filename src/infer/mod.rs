//! Shape and element-type inference, good enough for rule predicates.
//!
//! Facts are computed for the values of one graph, in topological order: declarations
//! (graph inputs, `value_info`, graph outputs) are read first, initializers and `Constant`
//! nodes give exact shapes and (when small) their contents, and one function per operator
//! (one module per op family, registered in `table`) derives each node's outputs from its
//! inputs. Small integer tensors that hold shapes (`Shape -> Gather -> Concat -> Reshape`
//! chains) are tracked element by element, symbolically ([`Facts::shape_data`]), so that a
//! `Reshape` whose target is computed from a dynamic batch size still gets a static shape.
//!
//! Rules: unknown stays unknown (a dimension is never guessed); symbolic dimensions keep
//! their names where the operator provably preserves them; every number read from the file
//! is checked (no overflow, no division by zero, no allocation sized by the file's claims);
//! nothing here panics, however malformed the model. Where a declaration and inference
//! disagree on a known dimension or element type, the declaration wins and the disagreement
//! is recorded in [`Facts::conflicts`].

mod consts;
mod contrib;
mod conv;
mod ctx;
mod dims;
mod elementwise;
mod expr;
mod legacy;
mod matmul;
mod norm;
mod resize;
mod rnn;
mod table;
mod tensor_ops;
mod transformer;

use std::collections::HashMap;
use std::sync::Arc;

use crate::ir::{Graph, Model, Origin, ValueId};
use crate::proto::{tensor_shape_proto::dimension, type_proto, ValueInfoProto};

pub use consts::MAX_CONST_ELEMENTS;
pub use table::known_ops;

/// One dimension of a tensor shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A fixed size (never negative).
    Known(i64),
    /// A named size that is only known at run time (`dim_param`), shared by the shapes that
    /// copy it (a clone is a count, not a copy of the name).
    Sym(Sym),
    /// Nothing is known.
    Unknown,
}

/// The name of a symbolic dimension: one pointer to a shared name, so that a [`Dim`] is 16
/// bytes, not the 24 a pointer and a length (`Arc<str>`) would make it. Every value's shape is
/// a vector of dims (the deep rx580 output of the bench has 51,196 nodes and 105,002
/// initializers).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sym(std::sync::Arc<String>);

impl std::ops::Deref for Sym {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.as_str()
    }
}

impl From<&str> for Sym {
    fn from(s: &str) -> Sym {
        Sym(std::sync::Arc::new(s.to_owned()))
    }
}

impl From<String> for Sym {
    fn from(s: String) -> Sym {
        Sym(std::sync::Arc::new(s))
    }
}

impl std::fmt::Display for Sym {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl Dim {
    /// The size, when known.
    pub fn known(&self) -> Option<i64> {
        match self {
            Dim::Known(k) => Some(*k),
            _ => None,
        }
    }
    pub fn is_known(&self) -> bool {
        matches!(self, Dim::Known(_))
    }
    /// The size at the given sizes of the names: a number is itself, a name is looked up,
    /// an expression that inference derived (`past_sequence_length + sequence_length`,
    /// `2*batch`, `max(past, total)`) is computed. `None` when a name has no size, or the
    /// result is negative, or the dim is unknown.
    pub fn eval(&self, size: &dyn Fn(&str) -> Option<i64>) -> Option<i64> {
        expr::eval(self, size)
    }
    /// The names a symbolic size depends on (a plain name is itself; empty for a number or
    /// an unknown dim).
    pub fn names(&self) -> Vec<String> {
        expr::names(self)
    }
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Known(k) => write!(f, "{k}"),
            Dim::Sym(s) => write!(f, "{s}"),
            Dim::Unknown => write!(f, "?"),
        }
    }
}

/// The dimensions of a tensor, shared: a clone is a count, not a copy, and the facts of a
/// graph keep one copy of each distinct shape (see [`Facts`]). Read it as a slice of [`Dim`];
/// make one from a `Vec<Dim>` or by collecting dims.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Shape(std::sync::Arc<[Dim]>);

impl std::ops::Deref for Shape {
    type Target = [Dim];
    fn deref(&self) -> &[Dim] {
        &self.0
    }
}

impl std::borrow::Borrow<[Dim]> for Shape {
    fn borrow(&self) -> &[Dim] {
        &self.0
    }
}

impl From<Vec<Dim>> for Shape {
    fn from(dims: Vec<Dim>) -> Shape {
        Shape(dims.into())
    }
}

impl FromIterator<Dim> for Shape {
    fn from_iter<I: IntoIterator<Item = Dim>>(dims: I) -> Shape {
        Shape(dims.into_iter().collect())
    }
}

impl std::fmt::Debug for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Shape {
    type Item = &'a Dim;
    type IntoIter = std::slice::Iter<'a, Dim>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Shape {
    /// Whether another handle holds these dims too.
    fn is_shared(&self) -> bool {
        std::sync::Arc::strong_count(&self.0) > 1
    }
    /// Whether `other` is this very copy (not only equal dims).
    pub fn same_copy(&self, other: &Shape) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
    /// The dims to change in place (copied first when another value shares them).
    pub fn make_mut(&mut self) -> &mut [Dim] {
        std::sync::Arc::make_mut(&mut self.0)
    }
}

impl PartialEq<Vec<Dim>> for Shape {
    fn eq(&self, other: &Vec<Dim>) -> bool {
        **self == **other
    }
}

/// What is known of a tensor: its element type and its shape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TensorInfo {
    /// `TensorProto.DataType` number, when known.
    pub dtype: Option<i32>,
    /// The dimensions; `None` when even the rank is unknown.
    pub shape: Option<Shape>,
}

impl TensorInfo {
    pub fn new(dtype: Option<i32>, shape: Option<Vec<Dim>>) -> Self {
        TensorInfo {
            dtype,
            shape: shape.map(Shape::from),
        }
    }
    /// A tensor of fully known dimensions.
    pub fn known(dtype: Option<i32>, dims: &[i64]) -> Self {
        TensorInfo {
            dtype,
            shape: Some(dims.iter().map(|&d| dims::known_dim(d)).collect()),
        }
    }
    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(|s| s.len())
    }
    /// Dimension `i`, when known.
    pub fn dim(&self, i: usize) -> Option<i64> {
        self.shape.as_ref()?.get(i)?.known()
    }
    /// The shape with each dimension as a number when known (`None` for symbolic or unknown).
    pub fn static_dims(&self) -> Option<Vec<Option<i64>>> {
        Some(self.shape.as_ref()?.iter().map(Dim::known).collect())
    }
    /// All dimensions, when every one is known.
    pub fn dims_known(&self) -> Option<Vec<i64>> {
        self.shape.as_ref()?.iter().map(Dim::known).collect()
    }
    /// Whether every dimension is known and they are `dims`.
    pub fn has_dims(&self, dims: &[i64]) -> bool {
        self.shape.as_ref().is_some_and(|s| {
            s.len() == dims.len() && s.iter().zip(dims).all(|(d, &k)| d.known() == Some(k))
        })
    }
    /// The element count, when every dimension is known (and the product fits).
    pub fn numel(&self) -> Option<u64> {
        let mut n: u64 = 1;
        for d in self.shape.as_ref()? {
            n = n.checked_mul(u64::try_from(d.known()?).ok()?)?;
        }
        Some(n)
    }
}

impl std::fmt::Display for TensorInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.dtype {
            Some(t) => write!(f, "{}", crate::tensor::dtype_name(t))?,
            None => write!(f, "?")?,
        }
        match &self.shape {
            None => write!(f, "[*]"),
            Some(s) => {
                write!(f, "[")?;
                for (i, d) in s.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{d}")?;
                }
                write!(f, "]")
            }
        }
    }
}

/// The contents of a small constant tensor (at most [`MAX_CONST_ELEMENTS`] elements).
/// `ints` is set for integer and bool element types, `floats` for floating-point ones.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstTensor {
    pub dtype: i32,
    pub dims: Vec<i64>,
    pub ints: Option<Vec<i64>>,
    pub floats: Option<Vec<f64>>,
}

/// Options of inference.
#[derive(Debug, Clone, Default)]
pub struct InferOptions {
    /// Values for symbolic dimensions (`--dim NAME=VALUE`): a declared `dim_param` of this
    /// name is taken as that fixed size.
    pub dims: HashMap<String, i64>,
    /// Do not read the declared types of the graph outputs (tests use this to compare what
    /// inference derives with what the file claims).
    pub ignore_output_decls: bool,
    /// Read the declarations only (graph inputs, outputs, `value_info`, initializers and
    /// `Constant` nodes): no operator is inferred.
    pub declarations_only: bool,
    /// The NCHWc block size of the CPU that saved the model, when the caller knows it (the
    /// `unfuse` action resolves it); otherwise inferred from the model's own evidence.
    pub nchwc_block: Option<i64>,
    /// Sizes for dimensions of the main graph's inputs that the file leaves open without a
    /// name: (input index, axis, size). Bodies are not affected.
    pub input_dims: Vec<(usize, usize, i64)>,
    /// Give each dimension of a main-graph input that the file leaves open without a name
    /// (and `input_dims` does not size) a name of its own, `INPUT.AXIS` (`x.0`), so that
    /// every size derived from it stays an expression that the sizes used will fix
    /// (`inspect` measures coverage so). Bodies are not affected.
    pub name_open_input_dims: bool,
}

/// A disagreement between a declaration and inference (the declaration was kept).
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    pub value: ValueId,
    pub declared: TensorInfo,
    pub inferred: TensorInfo,
}

/// What inference established about the values of one graph, indexed by [`ValueId`].
#[derive(Debug, Clone, Default)]
pub struct Facts {
    infos: Vec<TensorInfo>,
    /// Counted: most values have no known contents, and a slot is 8 bytes instead of 80.
    /// Small contents are kept once ([`Facts::kept_const`]): the bounds of a split's slices
    /// repeat in every split, and their values share a copy.
    consts: Vec<Option<Arc<ConstTensor>>>,
    /// Constants whose contents are decoded on first use (see `consts::Lazy`), by value index;
    /// shorter than the other tables when the last values have none. A slot per value, not a
    /// hash map: a rewritten model can hold one per initializer (105,000 after the rx580 splits
    /// of a 21,000-node model), and the map's table (72-byte entries, doubled as it grew) was the
    /// largest allocation of the compile.
    lazy: Vec<Option<Box<consts::Deferred>>>,
    constant: Vec<bool>,
    /// [`Facts::shape_data`], for the few values that hold shape computations (by index).
    data: crate::ir::hash::FastMap<usize, Vec<Dim>>,
    conflicts: Vec<Conflict>,
    /// Read by a node, a body (by name) or as a graph output.
    used: Vec<bool>,
    /// Read by name from inside a body (`If`/`Loop`/`Scan`) of this graph.
    read_by_body: Vec<bool>,
    /// Holds an NCHWc-blocked tensor (ONNX Runtime's CPU layout; see `nchwc_blocked`).
    blocked: Vec<bool>,
    /// The NCHWc block size the inference used (given, or proved by the model).
    nchwc_block: Option<i64>,
    /// One copy of each distinct shape in `infos`: the values of a graph have few distinct
    /// shapes (a stack of identical blocks repeats them), and a shape is then a pointer, not
    /// a vector of its own (the deep rx580 output of the bench has 156,000 values).
    shapes: crate::ir::hash::FastSet<Shape>,
    /// One copy of each distinct small constant in `consts`, by [`const_key`] (a second
    /// constant of the same key and other contents, never seen, gets a copy of its own).
    kept_consts: crate::ir::hash::HashKeyMap<Arc<ConstTensor>>,
}

/// Constants of at most this many elements are kept once (see [`Facts::kept_const`]).
const KEEP_CONST_ELEMENTS: usize = 16;

/// A hash of a constant's type, dims and elements (floats by their bits).
fn const_key(k: &ConstTensor) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = crate::ir::hash::FastHasher::default();
    k.dtype.hash(&mut h);
    k.dims.hash(&mut h);
    k.ints.hash(&mut h);
    if let Some(f) = &k.floats {
        f.len().hash(&mut h);
        for x in f {
            x.to_bits().hash(&mut h);
        }
    }
    h.finish()
}

/// The same type, dims and elements, floats bit for bit (so `-0.0` and each NaN stay what
/// they are).
fn same_const(a: &ConstTensor, b: &ConstTensor) -> bool {
    a.dtype == b.dtype
        && a.dims == b.dims
        && a.ints == b.ints
        && match (&a.floats, &b.floats) {
            (None, None) => true,
            (Some(x), Some(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
            }
            _ => false,
        }
}

static UNKNOWN: TensorInfo = TensorInfo {
    dtype: None,
    shape: None,
};

impl Facts {
    /// The element type and shape of a value (all unknown for a value this graph lacks).
    pub fn info(&self, v: ValueId) -> &TensorInfo {
        self.infos.get(v.index()).unwrap_or(&UNKNOWN)
    }
    /// The contents of a small constant value: an initializer, a `Constant` output, or a
    /// folded computation on them (`Shape` of a static tensor, `Gather`, `Concat`...).
    pub fn const_value(&self, v: ValueId) -> Option<&ConstTensor> {
        match self.consts.get(v.index()) {
            Some(Some(k)) => Some(&**k),
            _ => self
                .lazy
                .get(v.index())?
                .as_deref()?
                .get(|| self.info(v).dims_known()),
        }
    }
    /// Whether a value is an initializer (that a caller cannot override) or the output of a
    /// `Constant` node, whatever its size.
    pub fn is_constant(&self, v: ValueId) -> bool {
        self.constant.get(v.index()).copied().unwrap_or(false)
    }
    /// The elements of a small integer tensor (rank 0 or 1) as dimensions: what a shape
    /// computation holds, e.g. `[N, 64, -1]` for `Concat(Gather(Shape(x), 0), [64], [-1])`.
    /// A `Known` element is a plain integer value (which may be negative).
    pub fn shape_data(&self, v: ValueId) -> Option<&[Dim]> {
        self.data.get(&v.index()).map(Vec::as_slice)
    }
    /// Declarations that inference contradicted (the declarations were kept).
    pub fn conflicts(&self) -> &[Conflict] {
        &self.conflicts
    }
    /// The element type of a value, when known.
    pub fn dtype(&self, v: ValueId) -> Option<i32> {
        self.info(v).dtype
    }
    /// The shape of a value, when at least its rank is known.
    pub fn shape(&self, v: ValueId) -> Option<&[Dim]> {
        self.info(v).shape.as_deref()
    }
    /// Every dimension of a value, when all are known.
    pub fn dims(&self, v: ValueId) -> Option<Vec<i64>> {
        self.info(v).dims_known()
    }
    /// The integers of a small constant (integer or bool element type).
    pub fn const_ints(&self, v: ValueId) -> Option<&[i64]> {
        self.const_value(v).and_then(|c| c.ints.as_deref())
    }
    /// Is the value read by a node, a body or as a graph output? After facts were extended to
    /// new nodes ([`Facts::extend_with_new_nodes`]) an earlier value that lost its readers may
    /// still read as used: an over-approximation, never an under-one.
    pub fn is_used(&self, v: ValueId) -> bool {
        self.used.get(v.index()).copied().unwrap_or(false)
    }
    /// Is the value read by name from inside a body of this graph?
    pub fn read_by_body(&self, v: ValueId) -> bool {
        self.read_by_body.get(v.index()).copied().unwrap_or(false)
    }
    /// Does the value hold an NCHWc-blocked tensor?
    pub fn is_blocked(&self, v: ValueId) -> bool {
        self.blocked.get(v.index()).copied().unwrap_or(false)
    }
    /// The NCHWc block size the inference used, if any.
    pub fn nchwc_block(&self) -> Option<i64> {
        self.nchwc_block
    }
    /// What a body of this graph knows of one of its values (outer-scope reads).
    pub(crate) fn seed(&self, v: ValueId) -> Seed {
        Seed {
            info: self.info(v).clone(),
            konst: self.const_value(v).cloned(),
            data: self.shape_data(v).map(<[Dim]>::to_vec),
            constant: self.is_constant(v),
        }
    }
    /// Facts for `n` values, all unknown: for a caller that states facts itself.
    pub fn unknown(n: usize) -> Facts {
        Facts {
            infos: vec![TensorInfo::default(); n],
            consts: vec![None; n],
            constant: vec![false; n],
            used: vec![false; n],
            read_by_body: vec![false; n],
            blocked: vec![false; n],
            ..Default::default()
        }
    }
    /// State what is known of a value (a value added after inference has no facts until a
    /// caller states them). Grows the table as needed.
    pub fn state(&mut self, v: ValueId, info: TensorInfo, constant: bool) {
        let i = v.index();
        if i >= self.infos.len() {
            let n = i + 1;
            self.infos.resize(n, TensorInfo::default());
            self.consts.resize(n, None);
            self.constant.resize(n, false);
            self.used.resize(n, false);
            self.read_by_body.resize(n, false);
            self.blocked.resize(n, false);
        }
        self.put(i, info);
        self.constant[i] = constant;
    }
    /// Room for `n` values in every table, grown as the graph's tables are (not doubled: see
    /// [`crate::ir::Graph::reserve`]).
    fn reserve_for(&mut self, n: usize) {
        use crate::ir::grow_for;
        let more = n.saturating_sub(self.infos.len());
        grow_for(&mut self.infos, more);
        grow_for(&mut self.consts, more);
        grow_for(&mut self.constant, more);
        grow_for(&mut self.used, more);
        grow_for(&mut self.read_by_body, more);
        grow_for(&mut self.blocked, more);
    }
    /// Set (or clear) the deferred contents of `v` (whose known dims are the contents' dims).
    fn set_lazy(&mut self, v: ValueId, lazy: Option<consts::Deferred>) {
        let i = v.index();
        if i >= self.lazy.len() {
            if lazy.is_none() {
                return;
            }
            // As long as the other tables (they are sized for every value already).
            let n = self.infos.len().max(i + 1);
            let more = n - self.lazy.len();
            crate::ir::grow_for(&mut self.lazy, more);
            self.lazy.resize_with(n, || None);
        }
        self.lazy[i] = lazy.map(Box::new);
    }
    fn has_lazy(&self, v: ValueId) -> bool {
        matches!(self.lazy.get(v.index()), Some(Some(_)))
    }
    /// The facts of an initializer no caller can override: its type and dims, a constant,
    /// and its contents (decoded now when small, else on first use).
    fn read_initializer(
        &mut self,
        v: ValueId,
        t: crate::ir::tensor::TensorView<'_>,
        declared: Option<&TensorInfo>,
    ) {
        self.constant[v.index()] = true;
        let (konst, lazy) = consts::read_tensor(t);
        // initializer_info, its shape the kept copy (no new one when there is).
        let info = TensorInfo {
            dtype: initializer_dtype(t),
            shape: Some(self.kept_shape(initializer_shape(t.dims))),
        };
        self.set(v, info, declared);
        // Deferred contents are decoded with the value's dims: when a declaration made those
        // differ from the tensor's, they are decoded now, with the tensor's (the contents the
        // deferred decoding would give).
        let (konst, lazy) = match lazy {
            Some(l) if self.infos[v.index()].has_dims(l.dims()) => (konst, Some(l.into_deferred())),
            Some(l) => (l.decode(), None),
            None => (konst, None),
        };
        self.consts[v.index()] = konst.map(|k| self.kept_const(k));
        if lazy.is_some() {
            self.set_lazy(v, lazy);
        }
    }
    /// Mark what `node` reads as used (and what its bodies read by name as read by a body).
    fn mark_reads(&mut self, node: &crate::ir::Node) {
        for v in node.inputs.iter().flatten() {
            if let Some(u) = self.used.get_mut(v.index()) {
                *u = true;
            }
        }
        for v in node.implicit_inputs() {
            if let (Some(u), Some(r)) = (
                self.used.get_mut(v.index()),
                self.read_by_body.get_mut(v.index()),
            ) {
                (*u, *r) = (true, true);
            }
        }
    }
    /// The number of values covered.
    pub fn len(&self) -> usize {
        self.infos.len()
    }
    pub fn is_empty(&self) -> bool {
        self.infos.is_empty()
    }
}

impl Facts {
    /// Extend facts inferred on `graph` before a change that only added nodes (and re-pointed
    /// readers to them) to the values those nodes produce: every node that produces a value
    /// numbered `first_new` or later is inferred from its inputs' facts, in topological order.
    /// The caller vouches that the change left the facts of every earlier value as they were
    /// (e.g. a cut made of identities such as `Max(x, x)`); anything else needs a full
    /// inference. Returns `false`, leaving a partial table, when a new value has no producer
    /// among the graph's nodes.
    pub fn extend_with_new_nodes(
        &mut self,
        model: &Model,
        graph: &Graph,
        opts: &InferOptions,
        first_new: usize,
    ) -> bool {
        let n = graph.values.len();
        if first_new >= n {
            return true;
        }
        let mut producers: Vec<crate::ir::NodeId> = Vec::new();
        let mut initializers: Vec<ValueId> = Vec::new();
        for (i, v) in graph.values.iter().enumerate().skip(first_new) {
            match v.origin {
                Origin::Node { node, .. } if graph.nodes.contains_node(node) => {
                    producers.push(node)
                }
                Origin::Initializer => initializers.push(ValueId(i as u32)),
                // A removed value no node reads is no fact anyone needs.
                Origin::Unbound => {}
                _ => return false,
            }
        }
        // Grow the table; the new values start unknown.
        let last = ValueId((n - 1) as u32);
        if self.infos.len() < n {
            self.reserve_for(n);
            self.state(last, TensorInfo::default(), false);
        }
        // New initializers, as a whole inference reads them (a new value is no graph input,
        // and the caller vouches that none is declared).
        for v in initializers {
            let Some(t) = graph.initializer(v) else {
                return false;
            };
            self.read_initializer(v, t, None);
        }
        let order = new_nodes_order(graph, producers);
        let ops = table::table();
        let budget = std::cell::Cell::new(SUBGRAPH_BUDGET);
        let env = ctx::Env {
            nchwc_block: self.nchwc_block,
            model,
            graph,
            opts,
            names: Default::default(),
            budget: &budget,
        };
        for id in order {
            let node = graph.node(id);
            let opset = model.opset(node.domain());
            let outs = match ops.get(&(node.domain(), node.op_type.as_str())) {
                Some(f) => f(&ctx::Ctx::new(node, opset, self, &env)),
                None => Vec::new(),
            };
            let mut outs = outs.into_iter();
            for v in node.outputs.iter() {
                let out = outs.next().unwrap_or_default();
                if let Some(v) = *v {
                    self.store(v, out, None);
                }
            }
            // The layout, as a whole inference marks it (from the inputs' marks).
            contrib::mark_outputs_blocked(node, &mut self.blocked);
        }
        // What the new nodes read, and the new values earlier nodes were re-pointed to, are
        // used (one pass over the reads; an earlier value may only lose readers, which leaves
        // its mark an over-approximation: see `Facts::is_used`).
        for &id in &graph.order {
            let Some(node) = graph.nodes.node_weight(id) else {
                continue;
            };
            let new = |v: &ValueId| v.index() >= first_new;
            if node.outputs.iter().flatten().any(new)
                || node.inputs.iter().flatten().any(new)
                || node.implicit_inputs().iter().any(new)
            {
                self.mark_reads(node);
            }
        }
        for o in &graph.outputs {
            if o.value.index() >= first_new {
                if let Some(u) = self.used.get_mut(o.value.index()) {
                    *u = true;
                }
            }
        }
        true
    }

    /// Extend facts inferred on `graph` before patches that added nodes and initializers and
    /// re-pointed every reader of some values (`replaced`: old value, new value) to new ones,
    /// as [`Facts::extend_with_new_nodes`] does. No node but the new ones reads anything other
    /// than it read before, so every other value keeps its facts exactly when each replacement
    /// has the facts of the value it replaces: this is checked, and `false` (with a partial
    /// table) is returned when one differs, when a new value is declared (`value_info`, a
    /// graph output: a whole inference would merge the declaration), or when a replaced value
    /// held contents or a shape computation. The caller then infers the whole graph.
    pub fn extend_after_patches(
        &mut self,
        model: &Model,
        graph: &Graph,
        opts: &InferOptions,
        first_new: usize,
        replaced: &[(ValueId, ValueId)],
    ) -> bool {
        let declared_new = graph
            .value_info
            .iter()
            .chain(graph.outputs.iter())
            .any(|vi| vi.value.index() >= first_new);
        if declared_new || !self.extend_with_new_nodes(model, graph, opts, first_new) {
            return false;
        }
        // No contents or shape computation (looked up, not decoded).
        let plain = |v: ValueId| {
            matches!(self.consts.get(v.index()), Some(None))
                && !self.has_lazy(v)
                && self.shape_data(v).is_none()
                && !self.is_constant(v)
        };
        replaced.iter().all(|&(old, new)| {
            self.info(old) == self.info(new)
                && plain(old)
                && plain(new)
                && self.blocked.get(old.index()) == self.blocked.get(new.index())
        })
    }
}

/// The order in which [`Facts::extend_with_new_nodes`] infers the new nodes `producers` (one
/// entry per new value, in value order): a topological order of the graph restricted to them.
/// Without subgraphs, a node's facts depend only on its own inputs' facts (those of the other
/// nodes are not recomputed), so any order that puts a new node after the new nodes it reads
/// gives the same facts: the nodes in value order, each after its new producers (depth first),
/// without sorting the whole graph once per cut. A node with a subgraph draws on the shared
/// subgraph budget, so the order matters there: the whole graph's topological order is kept.
fn new_nodes_order(graph: &Graph, producers: Vec<crate::ir::NodeId>) -> Vec<crate::ir::NodeId> {
    use crate::ir::NodeId;
    let has_body = |n: NodeId| {
        graph
            .node(n)
            .attributes
            .iter()
            .any(|a| a.g().is_some() || !a.graphs().is_empty())
    };
    if producers.iter().any(|&n| has_body(n)) {
        let wanted: std::collections::HashSet<NodeId> = producers.into_iter().collect();
        let order = graph.topo_order().unwrap_or_else(|_| graph.order.clone());
        return order.into_iter().filter(|id| wanted.contains(id)).collect();
    }
    // 0: not new, 1: new and not placed yet, 2: being placed (on the stack), 3: placed.
    let mut state: crate::ir::hash::FastMap<NodeId, u8> =
        producers.iter().map(|&n| (n, 1)).collect();
    let mut out = Vec::with_capacity(state.len());
    let producer_of = |v: ValueId| match graph.value(v).origin {
        Origin::Node { node, .. } => Some(node),
        _ => None,
    };
    for start in producers {
        if state.get(&start) != Some(&1) {
            continue;
        }
        state.insert(start, 2);
        // (node, next input to look at)
        let mut stack: Vec<(NodeId, usize)> = vec![(start, 0)];
        while let Some(top) = stack.last_mut() {
            let (n, i) = *top;
            let inputs = &graph.node(n).inputs;
            if i < inputs.len() {
                top.1 += 1;
                let Some(p) = inputs[i].and_then(producer_of) else {
                    continue;
                };
                if state.get(&p) == Some(&1) {
                    state.insert(p, 2);
                    stack.push((p, 0));
                }
            } else {
                state.insert(n, 3);
                out.push(n);
                stack.pop();
            }
        }
    }
    out
}

/// What a graph's own declarations say of its values (graph inputs, outputs, `value_info`,
/// initializers, `Constant` nodes), with no operator inferred.
pub fn declared(graph: &Graph) -> Facts {
    let header = Model {
        opset_import: vec![crate::proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(crate::import::NEWEST_OPSET),
        }],
        ..Default::default()
    };
    let opts = InferOptions {
        declarations_only: true,
        ..Default::default()
    };
    infer_graph(&header, graph, &opts)
}

/// What an initializer's own fields say of it: its element type and dims.
fn initializer_info(t: crate::ir::tensor::TensorView<'_>) -> TensorInfo {
    TensorInfo {
        dtype: initializer_dtype(t),
        shape: Some(initializer_shape(t.dims).into()),
    }
}

/// An initializer's element type (none for an unset or invalid one).
fn initializer_dtype(t: crate::ir::tensor::TensorView<'_>) -> Option<i32> {
    t.data_type.filter(|&d| d > 0)
}

/// The shape inference gives an initializer of these dims (before any declaration is merged).
fn initializer_shape(d: &[i64]) -> Vec<Dim> {
    d.iter().map(|&d| dims::known_dim(d)).collect()
}

/// The known dims inference gives an initializer that nothing declares (what
/// [`Facts::dims`] would say of it), without inferring: see `Cx::exact_dims`.
pub(crate) fn initializer_dims(d: &[i64]) -> Option<Vec<i64>> {
    d.iter().map(|&d| dims::known_dim(d).known()).collect()
}

/// Infer the main graph of a model.
pub fn infer_model(model: &Model, opts: &InferOptions) -> Facts {
    infer_graph(model, &model.graph, opts)
}

/// Infer the values of `graph` (the model's main graph; the model gives the opsets).
pub fn infer_graph(model: &Model, graph: &Graph, opts: &InferOptions) -> Facts {
    let budget = std::cell::Cell::new(SUBGRAPH_BUDGET);
    infer_scoped(model, graph, opts, None, &budget)
}

/// Infer a body (or any graph) whose outer-scope reads are resolved by name through `outer`.
pub(crate) fn infer_body(
    model: &Model,
    graph: &Graph,
    opts: &InferOptions,
    outer: OuterScope,
) -> Facts {
    let budget = std::cell::Cell::new(SUBGRAPH_BUDGET);
    infer_scoped(model, graph, opts, Some(outer), &budget)
}

/// Subgraph inference (the branches of `If`) is bounded: at most this much work in all
/// (nodes, plus a fixed cost per subgraph), so nested branches cannot make it explode.
const SUBGRAPH_BUDGET: usize = 200_000;

/// What a subgraph knows of a value of an enclosing graph.
#[derive(Debug, Clone)]
pub(crate) struct Seed {
    pub info: TensorInfo,
    pub konst: Option<ConstTensor>,
    pub data: Option<Vec<Dim>>,
    pub constant: bool,
}

/// Resolves a name of an enclosing scope.
pub(crate) type OuterScope<'a> = &'a dyn Fn(&str) -> Option<Seed>;

/// Infer a graph whose outer-scope values are resolved by `outer` (subgraphs).
pub(crate) fn infer_scoped(
    model: &Model,
    graph: &Graph,
    opts: &InferOptions,
    outer: Option<OuterScope>,
    budget: &std::cell::Cell<usize>,
) -> Facts {
    let n = graph.values.len();
    let mut facts = Facts::unknown(n);
    // Uses: what rewrites must keep (a value read by a body is read by name).
    for &id in &graph.order {
        if let Some(node) = graph.nodes.node_weight(id) {
            facts.mark_reads(node);
        }
    }
    for o in &graph.outputs {
        if let Some(u) = facts.used.get_mut(o.value.index()) {
            *u = true;
        }
    }

    // Declarations: inputs, value_info, then outputs (the first declaration of a value wins).
    let mut declared: Vec<Option<TensorInfo>> = vec![None; n];
    let decls = graph
        .inputs
        .iter()
        .chain(graph.value_info.iter())
        .chain(graph.outputs.iter().filter(|_| !opts.ignore_output_decls));
    for vi in decls {
        if let Some(slot) = declared.get_mut(vi.value.index()) {
            if slot.is_none() {
                *slot = declared_info(&vi.proto, &opts.dims);
            }
        }
    }
    if outer.is_none() {
        for &(ii, axis, size) in &opts.input_dims {
            let Some(vi) = graph.inputs.get(ii) else {
                continue;
            };
            if let Some(Some(d)) = declared
                .get_mut(vi.value.index())
                .map(|s| s.as_mut().and_then(|t| t.shape.as_mut()))
            {
                if let Some(slot) = d.make_mut().get_mut(axis) {
                    *slot = dims::known_dim(size);
                }
            }
        }
    }
    if outer.is_none() && opts.name_open_input_dims {
        for vi in &graph.inputs {
            if graph.initializer(vi.value).is_some() {
                continue;
            }
            let name = graph.value_name(vi.value);
            if let Some(Some(d)) = declared
                .get_mut(vi.value.index())
                .map(|s| s.as_mut().and_then(|t| t.shape.as_mut()))
            {
                if d.contains(&Dim::Unknown) {
                    for (axis, slot) in d.make_mut().iter_mut().enumerate() {
                        if *slot == Dim::Unknown {
                            *slot = Dim::Sym(format!("{name}.{axis}").into());
                        }
                    }
                }
            }
        }
    }
    // Their shapes are the kept copies (facts merged with a declaration may share its shape).
    for d in declared.iter_mut().flatten() {
        facts.intern(&mut d.shape);
    }

    // Before IR version 4 every initializer is also a graph input: a default value a caller
    // could override in principle, but in practice the only way such files stored weights.
    let old_ir = model.ir_version.is_some_and(|v| v < 4);
    for init in &graph.initializers {
        let v = init.value;
        if v.index() >= n {
            continue;
        }
        let t = init.tensor.view();
        let overridable = graph.value(v).origin == Origin::Input && !old_ir;
        if overridable {
            // The caller may feed another tensor: only the declaration speaks for it.
            let info = declared[v.index()]
                .clone()
                .unwrap_or_else(|| initializer_info(t));
            facts.set(v, info, declared[v.index()].as_ref());
        } else {
            facts.read_initializer(v, t, declared[v.index()].as_ref());
        }
    }
    for sp in &graph.sparse_initializers {
        let v = sp.value;
        if v.index() >= n {
            continue;
        }
        let dtype = sp
            .tensor
            .values
            .as_ref()
            .and_then(|t| t.data_type)
            .filter(|&d| d > 0);
        let info = TensorInfo {
            dtype,
            shape: Some(sp.tensor.dims.iter().map(|&d| dims::known_dim(d)).collect()),
        };
        facts.constant[v.index()] = graph.value(v).origin != Origin::Input || old_ir;
        facts.set(v, info, declared[v.index()].as_ref());
    }
    // Values of an enclosing graph: what it knows.
    if let Some(outer) = outer {
        for (i, v) in graph.values.iter().enumerate() {
            if v.origin != Origin::OuterScope {
                continue;
            }
            if let Some(seed) = outer(&v.name) {
                let id = ValueId(i as u32);
                facts.set(id, seed.info, declared[i].as_ref());
                facts.constant[i] = seed.constant;
                facts.consts[i] = seed.konst.map(|k| facts.kept_const(k));
                if let Some(d) = seed.data {
                    facts.data.insert(i, d);
                }
            }
        }
    }
    // Everything else declared (graph inputs, values of outer scope...) starts from its
    // declaration; node outputs are refined below.
    for (i, d) in declared.iter().enumerate() {
        if let Some(d) = d {
            if facts.infos[i] == TensorInfo::default() {
                facts.put(i, d.clone());
            }
        }
    }

    let order = graph.topo_order().unwrap_or_else(|_| graph.order.clone());
    let nchwc_block = opts.nchwc_block.or_else(|| contrib::nchwc_block(graph));
    facts.nchwc_block = nchwc_block;
    contrib::mark_blocked(graph, &order, &mut facts.blocked);
    let ops = table::table();
    let env = ctx::Env {
        nchwc_block,
        model,
        graph,
        opts,
        names: Default::default(),
        budget,
    };
    // The opset of the last node's domain (nodes of one domain follow each other).
    let mut opset_of: Option<(&str, Option<i64>)> = None;
    for id in order {
        let Some(node) = graph.nodes.node_weight(id) else {
            continue;
        };
        let is_constant_node = node.domain() == "" && node.op_type == "Constant";
        if opts.declarations_only && !is_constant_node {
            continue;
        }
        let domain = node.domain();
        let opset = match opset_of {
            Some((d, v)) if d == domain => v,
            _ => opset_of.insert((domain, model.opset(domain))).1,
        };
        let outs = match ops.get(&(domain, node.op_type.as_str())) {
            Some(f) => {
                let c = ctx::Ctx::new(node, opset, &facts, &env);
                f(&c)
            }
            None => Vec::new(),
        };
        let mut outs = outs.into_iter();
        for v in node.outputs.iter() {
            let out = outs.next().unwrap_or_default();
            let Some(v) = *v else { continue };
            if v.index() >= n {
                continue;
            }
            facts.store(v, out, declared[v.index()].as_ref());
            if is_constant_node {
                facts.constant[v.index()] = true;
            }
        }
    }
    facts
}

impl Facts {
    /// Record an inferred info, merged with the declaration.
    fn set(&mut self, v: ValueId, inferred: TensorInfo, declared: Option<&TensorInfo>) {
        let merged = match declared {
            Some(d) => {
                let (m, conflict) = dims::merge_declared(d, &inferred);
                if conflict {
                    self.conflicts.push(Conflict {
                        value: v,
                        declared: d.clone(),
                        inferred: inferred.clone(),
                    });
                }
                m
            }
            None => inferred,
        };
        self.put(v.index(), merged);
    }

    /// Keep `info` as value `i`'s, its shape shared with an equal one already kept.
    fn put(&mut self, i: usize, mut info: TensorInfo) {
        // A shape held elsewhere too is a kept copy already (a value's, a declaration's, or
        // one an operator took from its input): only a new one is looked up.
        if info.shape.as_ref().is_some_and(|s| !s.is_shared()) {
            self.intern(&mut info.shape);
        }
        self.infos[i] = info;
    }

    /// The kept copy of these dims (kept now if there is none): dims given as a vector are
    /// made a shape only when none is kept.
    fn kept_shape<S: std::borrow::Borrow<[Dim]> + Into<Shape>>(&mut self, dims: S) -> Shape {
        match self.shapes.get(dims.borrow()) {
            Some(kept) => kept.clone(),
            None => {
                let shape = dims.into();
                self.shapes.insert(shape.clone());
                shape
            }
        }
    }

    /// The kept copy of a small constant's contents (kept now when there is none); a larger
    /// one gets a copy of its own.
    fn kept_const(&mut self, k: ConstTensor) -> Arc<ConstTensor> {
        use std::collections::hash_map::Entry;
        let n = k.ints.as_ref().map_or(0, Vec::len) + k.floats.as_ref().map_or(0, Vec::len);
        if n > KEEP_CONST_ELEMENTS {
            return Arc::new(k);
        }
        match self.kept_consts.entry(const_key(&k)) {
            Entry::Occupied(e) if same_const(e.get(), &k) => e.get().clone(),
            Entry::Occupied(_) => Arc::new(k),
            Entry::Vacant(e) => e.insert(Arc::new(k)).clone(),
        }
    }

    /// Make `shape` the kept copy of its dims (kept now if there is none).
    fn intern(&mut self, shape: &mut Option<Shape>) {
        if let Some(s) = shape.take() {
            *shape = Some(self.kept_shape(s));
        }
    }

    /// Record a node output: its info, and its contents when they were folded.
    fn store(&mut self, v: ValueId, out: ctx::Out, declared: Option<&TensorInfo>) {
        let ctx::Out {
            info,
            konst,
            data,
            lazy,
        } = out;
        self.set(v, info, declared);
        let info = &self.infos[v.index()];
        // Deferred contents: kept under the same condition as decoded ones (the element count
        // always matches: `from_tensor` decodes exactly the dims' count or nothing).
        let lazy = lazy.filter(|l| info.has_dims(l.dims()) && info.dtype == Some(l.dtype()));
        self.set_lazy(v, lazy.map(consts::Lazy::into_deferred));
        let info = &self.infos[v.index()];
        // Keep folded contents only when they agree with the final info.
        let konst = konst.filter(|k| {
            info.dims_known().as_deref() == Some(k.dims.as_slice())
                && info.dtype == Some(k.dtype)
                && k.ints.as_ref().map_or(0, |x| x.len()) + k.floats.as_ref().map_or(0, |x| x.len())
                    == consts::count(&k.dims).unwrap_or(usize::MAX)
        });
        let data = data
            .filter(|d| {
                d.len() <= consts::MAX_CONST_ELEMENTS
                    && info.dtype.is_some_and(consts::is_int_type)
                    && match info.shape.as_deref() {
                        Some([]) => d.len() == 1,
                        Some([n]) => {
                            n.known().and_then(|n| usize::try_from(n).ok()) == Some(d.len())
                        }
                        _ => false,
                    }
            })
            .or_else(|| {
                let k = konst.as_ref()?;
                (k.dims.len() <= 1)
                    .then(|| {
                        k.ints
                            .as_ref()
                            .map(|x| x.iter().map(|&i| Dim::Known(i)).collect())
                    })
                    .flatten()
            });
        let konst = konst.or_else(|| {
            let d = data.as_ref()?;
            let ints: Option<Vec<i64>> = d.iter().map(Dim::known).collect();
            Some(ConstTensor {
                dtype: info.dtype?,
                dims: info.dims_known()?,
                ints: Some(ints?),
                floats: None,
            })
        });
        self.consts[v.index()] = konst.map(|k| self.kept_const(k));
        match data {
            Some(d) => self.data.insert(v.index(), d),
            None => self.data.remove(&v.index()),
        };
    }
}

/// The info a declaration gives (tensor and sparse tensor types only).
fn declared_info(p: &ValueInfoProto, overrides: &HashMap<String, i64>) -> Option<TensorInfo> {
    let (elem, shape) = match p.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => (t.elem_type, t.shape.as_ref()),
        type_proto::Value::SparseTensorType(t) => (t.elem_type, t.shape.as_ref()),
        _ => return None,
    };
    let dtype = elem.filter(|&e| e > 0);
    let shape = shape.map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(dimension::Value::DimValue(v)) => dims::known_dim(*v),
                Some(dimension::Value::DimParam(name)) => match overrides.get(name) {
                    Some(&v) => dims::known_dim(v),
                    // "?" is what several exporters write for "no name": no symbol at all.
                    None if name.is_empty() || name == "?" => Dim::Unknown,
                    None => Dim::Sym(name.as_str().into()),
                },
                None => Dim::Unknown,
            })
            .collect()
    });
    Some(TensorInfo { dtype, shape })
}
