//! The compiled form of a rule's `match:`: a tree of predicates, each remembering where it was
//! written so that `explain` can point at it. See the module docs of [`super`] for the language.

use std::cmp::Ordering;
use std::fmt;

/// A place in a rule file, for messages (`file:line:col`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceLoc {
    pub file: String,
    pub line: u32,
    pub col: u32,
}

impl fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// A number from a rule file or a fact: integers stay exact.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }
    /// Total order for comparisons; integers compare exactly, NaN compares as unordered.
    pub fn cmp_num(self, other: Num) -> Option<Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (a, b) => a.as_f64().partial_cmp(&b.as_f64()),
        }
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Num::Int(i) => write!(f, "{i}"),
            Num::Float(x) if x.fract() == 0.0 && x.abs() >= 1e6 && x.is_finite() => {
                write!(f, "{x:e}")
            }
            Num::Float(x) => write!(f, "{x}"),
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn holds(self, o: Ordering) -> bool {
        match self {
            CmpOp::Eq => o == Ordering::Equal,
            CmpOp::Ne => o != Ordering::Equal,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Le => o != Ordering::Greater,
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Ge => o != Ordering::Less,
        }
    }
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
    pub fn key(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

/// A test on a number: every comparison must hold, and the number must be one of `one_of`
/// when that is given. `{gt: 1, le: 64}` is a range.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NumTest {
    pub cmps: Vec<(CmpOp, Num)>,
    pub one_of: Option<Vec<Num>>,
}

impl NumTest {
    pub fn holds(&self, x: Num) -> bool {
        self.cmps
            .iter()
            .all(|&(op, v)| x.cmp_num(v).is_some_and(|o| op.holds(o)))
            && self
                .one_of
                .as_ref()
                .is_none_or(|set| set.iter().any(|&v| x.cmp_num(v) == Some(Ordering::Equal)))
    }
}

impl fmt::Display for NumTest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self
            .cmps
            .iter()
            .map(|(op, v)| match op {
                CmpOp::Eq => v.to_string(),
                _ => format!("{} {v}", op.symbol()),
            })
            .collect();
        if let Some(set) = &self.one_of {
            let items: Vec<String> = set.iter().map(|v| v.to_string()).collect();
            parts.push(format!("one of [{}]", items.join(", ")));
        }
        f.write_str(&parts.join(" and "))
    }
}

/// A literal an attribute is compared with.
#[derive(Debug, Clone, PartialEq)]
pub enum Lit {
    Num(Num),
    Str(String),
    Nums(Vec<Num>),
    Strs(Vec<String>),
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lit::Num(n) => write!(f, "{n}"),
            Lit::Str(s) => write!(f, "{s}"),
            Lit::Nums(v) => {
                let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
                write!(f, "[{}]", items.join(", "))
            }
            Lit::Strs(v) => write!(f, "[{}]", v.join(", ")),
        }
    }
}

/// One check on an attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrCheck {
    Eq(Lit),
    Ne(Lit),
    In(Vec<Lit>),
    /// `lt/le/gt/ge` on a number; on a list, every element must satisfy it.
    Cmp(CmpOp, Num),
}

/// A test on one attribute. Absent attributes take their ONNX default where this build knows
/// it (`group` of Conv is 1, ...), except for `exists`, which looks at the node as written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AttrTest {
    pub exists: Option<bool>,
    pub checks: Vec<AttrCheck>,
}

/// A test on a string (node name, metadata value).
#[derive(Debug, Clone, PartialEq)]
pub enum StrTest {
    Exists(bool),
    OneOf(Vec<String>),
    Prefix(String),
    Suffix(String),
    Contains(String),
}

/// One item of a `dims:` pattern.
#[derive(Debug, Clone, PartialEq)]
pub enum DimPat {
    /// `_`: anything, known or not.
    Any,
    /// `...`: any number of dimensions (at most one per pattern).
    Rest,
    /// A number or comparison: the dimension is known and satisfies it.
    Num(NumTest),
    /// `{sym: true}` (any name) or `{sym: NAME}`: a symbolic dimension.
    Sym(Option<String>),
    /// `dynamic`: not known as a number (symbolic or unknown).
    Dynamic,
    /// Any other name: binds to the dimension; the same name twice in one `dims` list must
    /// be the same size.
    Var(String),
}

/// One check on an input or output tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorCheck {
    Present(bool),
    Dtype(Vec<i32>),
    Rank(NumTest),
    Dims(Vec<DimPat>),
    Static(bool),
    /// Whether the analysis knows the value's rank (`rank_known`).
    RankKnown(bool),
    Const(bool),
    Initializer(bool),
}

/// The checks on one tensor, each with its place.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TensorTest {
    pub checks: Vec<(TensorCheck, SourceLoc)>,
}

/// A boolean fact derived from the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// A convolution with `group > 1` and one input channel per group.
    Depthwise,
    /// A convolution with `group > 1` (depthwise included).
    Grouped,
}

/// A numeric fact derived from the node and the shapes around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fact {
    Kernel,
    Channels,
    OutChannels,
    Batch,
    Spatial,
    Work,
    Bytes,
}

impl Fact {
    pub fn key(self) -> &'static str {
        match self {
            Fact::Kernel => "kernel",
            Fact::Channels => "channels",
            Fact::OutChannels => "out_channels",
            Fact::Batch => "batch",
            Fact::Spatial => "spatial",
            Fact::Work => "work",
            Fact::Bytes => "bytes",
        }
    }
}

/// What the target's execution provider registers for a node (`provider_kernel`), as the
/// placement prediction sees the node on its own ([`crate::runtime::placement::kernel_verdict`]:
/// domain, op, schema since-version at the model's opset, element types, the deficient list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelState {
    /// A kernel the node can use.
    Registered,
    /// No kernel, but the CPU provider has one: ONNX Runtime moves the node to the CPU itself.
    Missing,
    /// A kernel on the known-deficient list (`runtimes/deficient.tsv`).
    Deficient,
    /// No provider registers the op; ONNX Runtime inlines its function body.
    Inlined,
    /// Neither the provider nor the CPU provider has a kernel: the model will not load.
    Unloadable,
}

impl KernelState {
    /// Every state, in the order the documentation lists them.
    pub const ALL: [KernelState; 5] = [
        KernelState::Registered,
        KernelState::Missing,
        KernelState::Deficient,
        KernelState::Inlined,
        KernelState::Unloadable,
    ];
    /// The word a rule file writes.
    pub fn key(self) -> &'static str {
        match self {
            KernelState::Registered => "registered",
            KernelState::Missing => "missing",
            KernelState::Deficient => "deficient",
            KernelState::Inlined => "inlined",
            KernelState::Unloadable => "unloadable",
        }
    }
    pub fn from_key(s: &str) -> Option<KernelState> {
        KernelState::ALL.into_iter().find(|k| k.key() == s)
    }
}

/// A link to a neighbouring node (`followed_by`, `preceded_by`).
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    /// The output slot (followed_by) or input slot (preceded_by) to follow; any if `None`.
    pub via: Option<usize>,
    /// The linking value must have exactly one consumer.
    pub sole: bool,
    pub pattern: Pattern,
}

/// One predicate.
#[derive(Debug, Clone, PartialEq)]
pub enum PredKind {
    Op(Vec<String>),
    /// Canonical domains (`""` for the default domain).
    Domain(Vec<String>),
    Name(StrTest),
    Opset(NumTest),
    Attr(String, AttrTest),
    Input(usize, TensorTest),
    Output(usize, TensorTest),
    AnyInput(TensorTest),
    AnyOutput(TensorTest),
    Flag(Flag, bool),
    Fact(Fact, NumTest),
    Metadata(String, StrTest),
    /// The target's provider's kernel for the node is in one of these states.
    ProviderKernel(Vec<KernelState>),
    FollowedBy(Box<Link>),
    PrecededBy(Box<Link>),
    Not(Box<Pattern>),
    Any(Vec<Pattern>),
    All(Vec<Pattern>),
}

/// A predicate and the place of its key in the rule file.
#[derive(Debug, Clone, PartialEq)]
pub struct Pred {
    pub kind: PredKind,
    pub at: SourceLoc,
}

/// A conjunction of predicates on one node, optionally captured under a name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pattern {
    pub preds: Vec<Pred>,
    pub capture: Option<String>,
}
