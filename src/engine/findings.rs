//! What a compile reports: findings (rules that still fire, refusals, denials) and rewrites.

/// Why a finding is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// The rule would rewrite this node.
    Fires,
    /// The rule says no safe rewrite exists (`deny`).
    Denied,
    /// The rule's action cannot be applied to this node (the reason says why).
    Unsupported,
    /// A GPU piece's estimated work is over the barrier budget.
    OverBudget,
    /// The rule's action cannot be applied to this node; it falls back to the CPU.
    FallsBack,
    /// No provider of the target's runtime registers a kernel for this node: the session
    /// cannot be created (the model does not load).
    WillNotLoad,
}

impl FindingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::Fires => "fires",
            FindingKind::Denied => "denied",
            FindingKind::Unsupported => "unsupported",
            FindingKind::OverBudget => "over-budget",
            FindingKind::FallsBack => "fallback",
            FindingKind::WillNotLoad => "will-not-load",
        }
    }
}

/// One rule firing on one node.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub node: String,
    pub op: String,
    pub rule: String,
    pub action: String,
    pub why: String,
    pub evidence: Vec<String>,
    pub kind: FindingKind,
    pub reason: Option<String>,
}

/// One rewrite that was applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub rule: String,
    pub action: String,
    pub node: String,
    pub op: String,
    /// Nodes created (for `cpu`: nodes annotated).
    pub nodes: usize,
    /// How closely the rewrite reproduces the original on ONNX Runtime.
    pub exactness: crate::rewrite::Exactness,
}

/// What a compile did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub target: String,
    pub applied: Vec<Applied>,
    /// Findings left after the last round (denied, unsupported, or not converged).
    pub remaining: Vec<Finding>,
    pub iterations: usize,
    /// GPU pieces between clean cuts, with their estimated work, when a barrier rule is active.
    pub pieces: Vec<crate::rewrite::barrier::Piece>,
    /// Nodes carrying the CPU annotation in the output.
    pub pinned: Vec<String>,
    pub annotation: String,
    /// Nodes whose rule could not be applied and that fell back (to the CPU), with why.
    pub fallbacks: Vec<FellBack>,
    /// Warnings that do not block the output (e.g. work estimates missing for some nodes).
    pub notes: Vec<String>,
    /// The cost of safety: heavy ops on the GPU, GPU pieces and CPU<->GPU crossings, of the
    /// input model and of the output (set by a whole compile, `None` in a body's report).
    pub cost: Option<crate::cost::CostOfSafety>,
    /// The cost of safety in time on the target's device (`crate::timing`), of the input and
    /// the output; `None` without a device model, or in a body's report.
    pub timing: Option<crate::timing::TimingOfSafety>,
}

impl Report {
    /// The loosest exactness class of the rewrites applied (exact when none was).
    pub fn exactness(&self) -> crate::rewrite::Exactness {
        self.applied.iter().map(|a| a.exactness).fold(
            crate::rewrite::Exactness::Exact,
            crate::rewrite::Exactness::max,
        )
    }
}

/// A node whose rule could not be applied, and what happened instead.
#[derive(Debug, Clone, PartialEq)]
pub struct FellBack {
    pub node: String,
    pub op: String,
    pub rule: String,
    /// The action that could not be applied.
    pub action: String,
    /// Why, as a kind (`no-rewrite`, `unknown-fact`, `outer-scope-read`, ...) and in words.
    pub cause: String,
    pub reason: String,
    /// Where the node went: `cpu`.
    pub to: String,
}
