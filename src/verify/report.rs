//! The result of a verification, serialisable to JSON and printable as text.

use std::fmt::Write as _;

use serde::Serialize;

use super::compare::{OutputComparison, Status, Tolerance};
use super::inputs::{InputPlan, ValueRange};
use crate::runtime::run::external::{ExternalInfo, RuntimeKind};
use crate::runtime::run::tensor::fmt_shape;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuntimeInfo {
    pub library: String,
    pub version: String,
    pub build_info: String,
}

/// One ORT session opened for the verification.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionInfo {
    /// `original` or `rewritten`.
    pub role: String,
    pub model: String,
    /// Segment index within a partition manifest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<usize>,
    /// Device the manifest assigns (verification itself runs on the CPU provider).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// `session.layer_assignment_settings` used for `layer_ann` annotations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer_assignment: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum InputSource {
    Random {
        seed: u64,
        plan: Vec<InputPlan>,
    },
    File {
        path: String,
    },
    /// Tensors made by the caller (a genai folder's prefill and decode steps).
    Given {
        description: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// 1-based run number.
    pub run: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The rewritten model's outputs against the original's.
    pub outputs: Vec<OutputComparison>,
    /// The rewritten model's outputs against `--expected`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub expected: Vec<OutputComparison>,
    /// When the original also ran on the rewritten model's runtime (`outputs` then compares
    /// the two there): the rewritten model on that runtime against the original on ONNX
    /// Runtime CPU. Shown, not judged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub against_cpu: Vec<OutputComparison>,
    /// When the original also ran on the rewritten model's runtime: the original there against
    /// the original on ONNX Runtime CPU, the runtime's own difference. When it did not: the
    /// rewritten model there against the rewritten model on ONNX Runtime CPU. Shown, not judged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runtime_vs_cpu: Vec<OutputComparison>,
}

/// How the outputs were judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExactnessInfo {
    /// The class the rewritten model records under `onnx_safeify.exactness` (`exact`,
    /// `rounding`, `approximate:B`); null when it records none.
    pub class: Option<String>,
    /// What judged the outputs: `class` (the recorded class), `given` (`--atol`/`--rtol`),
    /// `default` (no class recorded, or one this version cannot read: the default tolerance).
    pub criterion: String,
    /// The rule in words.
    pub note: String,
    /// The graph optimisation level of the ONNX Runtime CPU sessions.
    pub ort_opt_level: crate::runtime::run::ort::OptLevel,
}

/// The original model on the rewritten model's runtime (`--runtime` other than cpu).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OriginalOnRuntime {
    pub runtime: RuntimeKind,
    /// Whether the original ran there; if so, the rewrite is judged against it, within the
    /// larger of its criterion and the runtime's own difference from ONNX Runtime CPU.
    pub ran: bool,
    /// Why it did not run (the runtime's error, or why it was not tried).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// True when the runtime's outputs for the original differ from ONNX Runtime CPU's beyond
    /// the criterion (on some output of some run).
    pub differs: bool,
    /// Per output, over all runs: the runtime's own difference from ONNX Runtime CPU.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<RuntimeDifference>,
    /// Which model `differences` were measured on: `original` (it ran on the runtime), or
    /// `rewritten` (it did not: the rewritten model on the runtime against the rewritten model
    /// on ONNX Runtime CPU, while the rewrite is judged on ONNX Runtime CPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_on: Option<&'static str>,
    /// Set when ONNX Runtime CPU cannot run the original (why): the original's run on this
    /// runtime is then the reference the rewrite is judged against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// A runtime's own difference from ONNX Runtime CPU on one output of the original.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuntimeDifference {
    pub output: String,
    /// The worst status over the runs (`ok`: within the criterion).
    pub status: Status,
    /// Largest |runtime - cpu| over the runs (null when infinite: NaN or infinity mismatch).
    pub max_abs_err: Option<f64>,
    /// The same as a fraction of the output's scale (largest over the runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub err_of_scale: Option<f64>,
    /// Elements beyond the criterion, all runs together.
    pub mismatched: usize,
    pub elements: usize,
}

impl OriginalOnRuntime {
    /// Folds the per-run `runtime_vs_cpu` comparisons into per-output differences.
    pub fn summarise(&mut self, runs: &[RunReport]) {
        let mut out: Vec<RuntimeDifference> = Vec::new();
        for r in runs {
            for c in &r.runtime_vs_cpu {
                let i = match out.iter().position(|d| d.output == c.name) {
                    Some(i) => i,
                    None => {
                        out.push(RuntimeDifference {
                            output: c.name.clone(),
                            status: Status::Ok,
                            max_abs_err: Some(0.0),
                            err_of_scale: Some(0.0),
                            mismatched: 0,
                            elements: 0,
                        });
                        out.len() - 1
                    }
                };
                let d = &mut out[i];
                if d.status == Status::Ok {
                    d.status = c.status;
                }
                let infinite = c.max_abs_err.is_none() && c.status == Status::Mismatch;
                d.max_abs_err = match (d.max_abs_err, c.max_abs_err) {
                    _ if infinite => None,
                    (None, _) => None,
                    (Some(x), Some(y)) => Some(x.max(y)),
                    (Some(x), None) => Some(x),
                };
                d.err_of_scale = match (d.err_of_scale, c.err_of_scale) {
                    (Some(x), Some(y)) => Some(x.max(y)),
                    _ => None,
                };
                d.mismatched += c.mismatched;
                d.elements += c.elements;
            }
        }
        self.differs = out.iter().any(|d| d.status != Status::Ok);
        self.differences = out;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyReport {
    pub original: String,
    pub rewritten: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    pub onnxruntime: RuntimeInfo,
    /// The tolerance: used when given or when no exactness class is recorded (see
    /// `exactness.criterion`).
    pub tolerance: Tolerance,
    /// How the outputs were judged: the rewritten model's exactness class, or the tolerance.
    pub exactness: ExactnessInfo,
    /// Where the rewritten model ran when not on ONNX Runtime's CPU provider in process
    /// (`--runtime webgpu|openvino`); `onnxruntime` is then the reference's runtime only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewritten_runtime: Option<ExternalInfo>,
    /// With `--runtime` other than cpu: the original on that runtime too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_on_runtime: Option<OriginalOnRuntime>,
    pub sessions: Vec<SessionInfo>,
    pub inputs: InputSource,
    pub runs: Vec<RunReport>,
    pub warnings: Vec<String>,
    pub passed: bool,
}

impl VerifyReport {
    /// True when every comparison of every run is within tolerance.
    pub fn passed(&self) -> bool {
        !self.runs.is_empty()
            && self.runs.iter().all(|r| {
                r.outputs
                    .iter()
                    .chain(&r.expected)
                    .all(OutputComparison::passed)
            })
    }

    /// Comparisons that failed, with their run number.
    pub fn failures(&self) -> Vec<(usize, &OutputComparison)> {
        self.runs
            .iter()
            .flat_map(|r| r.outputs.iter().chain(&r.expected).map(move |c| (r.run, c)))
            .filter(|(_, c)| !c.passed())
            .collect()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The human-readable report.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "original:  {}", self.original);
        let _ = writeln!(s, "rewritten: {}", self.rewritten);
        if let Some(e) = &self.expected {
            let _ = writeln!(s, "expected:  {e}");
        }
        match &self.rewritten_runtime {
            None => {
                let _ = writeln!(
                    s,
                    "runtime:   onnxruntime {} ({}), CPU provider",
                    self.onnxruntime.version, self.onnxruntime.library
                );
            }
            Some(ext) => {
                match self
                    .original_on_runtime
                    .as_ref()
                    .filter(|o| o.reference.is_some())
                {
                    Some(o) => {
                        let _ = writeln!(
                            s,
                            "reference: original on {} (ONNX Runtime CPU cannot run it)",
                            o.runtime.name()
                        );
                    }
                    None => {
                        let _ = writeln!(
                            s,
                            "reference: original on onnxruntime {} ({}), CPU provider",
                            self.onnxruntime.version, self.onnxruntime.library
                        );
                    }
                }
                let _ = writeln!(s, "runtime:   rewritten on {}", ext.description);
                if let Some(p) = &ext.placement {
                    let _ = writeln!(s, "placement: {} (logged by the runtime)", p.summary());
                    const SHOWN: usize = 40;
                    for n in p.cpu_nodes.iter().take(SHOWN) {
                        let why = match (n.pinned, &n.reason) {
                            (true, _) => "pinned by layer_ann".to_string(),
                            (false, Some(r)) => format!("the runtime's choice: {r}"),
                            (false, None) => "the runtime's choice".to_string(),
                        };
                        let _ = writeln!(s, "  on CPU:  {} ({}): {why}", n.name, n.op);
                    }
                    if p.cpu_nodes.len() > SHOWN {
                        let _ = writeln!(
                            s,
                            "  on CPU:  ... and {} more (--format json lists all)",
                            p.cpu_nodes.len() - SHOWN
                        );
                    }
                }
            }
        }
        for si in &self.sessions {
            let mut extra = Vec::new();
            if let Some(i) = si.segment {
                extra.push(format!("segment {i}"));
            }
            if let Some(d) = &si.device {
                extra.push(format!("device {d}"));
            }
            if let Some(l) = &si.layer_assignment {
                extra.push(format!("session.layer_assignment_settings={l}"));
            }
            if !extra.is_empty() {
                let _ = writeln!(
                    s,
                    "session:   {} {} [{}]",
                    si.role,
                    si.model,
                    extra.join(", ")
                );
            }
        }
        match &self.inputs {
            InputSource::File { path } => {
                let _ = writeln!(s, "inputs:    {path}");
            }
            InputSource::Given { description } => {
                let _ = writeln!(s, "inputs:    {description}");
            }
            InputSource::Random { seed, plan } => {
                let parts: Vec<String> = plan
                    .iter()
                    .map(|p| {
                        let range = match p.range {
                            ValueRange::Float { lo, hi } => format!(" in [{lo}, {hi})"),
                            ValueRange::Int { lo, hi } => format!(" in [{lo}, {hi})"),
                            ValueRange::Mask => " mask (0/1)".to_string(),
                            ValueRange::Positions { .. } => " positions (0, 1, ...)".to_string(),
                            ValueRange::Bool | ValueRange::Text => String::new(),
                        };
                        format!(
                            "{} {}{}{range}",
                            p.name,
                            p.dtype.name(),
                            fmt_shape(&p.shape)
                        )
                    })
                    .collect();
                let _ = writeln!(s, "inputs:    random (seed {seed}): {}", parts.join("; "));
            }
        }
        let _ = writeln!(s, "tolerance: {}", self.exactness.note);
        if let Some(o) = &self.original_on_runtime {
            original_on_runtime_text(&mut s, o);
        }
        let (judged, against, own) = match &self.original_on_runtime {
            Some(o) if !o.ran && o.measured_on == Some("rewritten") => (
                format!(
                    "rewritten vs original, both on ONNX Runtime CPU (judged: the original does not run on {})",
                    o.runtime.name()
                ),
                format!(
                    "rewritten on {} vs original on ONNX Runtime CPU (shown, not judged)",
                    o.runtime.name()
                ),
                format!(
                    "rewritten on {} vs rewritten on ONNX Runtime CPU (the runtime's own difference)",
                    o.runtime.name()
                ),
            ),
            Some(o) if o.ran => (
                format!(
                    "rewritten on {0} vs original on {0} (judged)",
                    o.runtime.name()
                ),
                format!(
                    "rewritten on {} vs original on ONNX Runtime CPU (shown, not judged)",
                    o.runtime.name()
                ),
                format!(
                    "original on {} vs original on ONNX Runtime CPU (the runtime's own difference)",
                    o.runtime.name()
                ),
            ),
            _ => (
                "rewritten vs original".to_string(),
                String::new(),
                String::new(),
            ),
        };
        for run in &self.runs {
            match run.seed {
                Some(seed) => {
                    let _ = writeln!(s, "run {} (seed {seed:#x}):", run.run);
                }
                None => {
                    let _ = writeln!(s, "run {}:", run.run);
                }
            }
            table(&mut s, &judged, &run.outputs, true);
            if !run.against_cpu.is_empty() {
                table(&mut s, &against, &run.against_cpu, false);
            }
            if !run.runtime_vs_cpu.is_empty() {
                table(&mut s, &own, &run.runtime_vs_cpu, false);
            }
            if !run.expected.is_empty() {
                table(&mut s, "rewritten vs expected", &run.expected, true);
            }
        }
        for w in &self.warnings {
            let _ = writeln!(s, "warning: {w}");
        }
        let total: usize = self
            .runs
            .iter()
            .map(|r| r.outputs.len() + r.expected.len())
            .sum();
        let failures = self.failures();
        if failures.is_empty() && self.passed() {
            let _ = writeln!(
                s,
                "PASS: {total} comparison(s) within tolerance over {} run(s)",
                self.runs.len()
            );
        } else {
            let first = failures
                .first()
                .map(|(run, c)| format!("; first: '{}' in run {run}: {}", c.name, summary(c)))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "FAIL: {} of {total} comparison(s) out of tolerance{first}",
                failures.len()
            );
        }
        s
    }
}

fn fmt_err(v: Option<f64>, status: Status) -> String {
    match v {
        Some(0.0) => "0".into(),
        Some(v) => format!("{v:.3e}"),
        // Only a value mismatch leaves the errors unset because they are infinite.
        None if status == Status::Mismatch => "inf".into(),
        None => "-".into(),
    }
}

fn summary(c: &OutputComparison) -> String {
    let mut s = c.status.label().to_string();
    if let Some(d) = &c.detail {
        let _ = write!(s, " ({d})");
    }
    if c.max_abs_err.is_some() || c.mismatched > 0 {
        let _ = write!(s, ", {} of {} elements", c.mismatched, c.elements);
    }
    if let Some(w) = &c.worst {
        let _ = write!(
            s,
            ", worst at {}: expected {}, got {}",
            fmt_shape(&w.index),
            w.expected,
            w.actual
        );
    }
    s
}

/// What set an output's bound, for the table's `by` column.
fn judged_by(r: &OutputComparison) -> String {
    let label = if r.judged_by.is_empty() {
        "-".to_string()
    } else {
        r.judged_by.clone()
    };
    let label = match r.tolerance_floor {
        Some(_) => format!("{label}|tolerance"),
        None => label,
    };
    match (r.runtime_allowance, r.bound) {
        (Some(a), Some(b)) if a >= b && r.tolerance_floor.is_none() => "runtime".into(),
        (Some(_), _) => format!("{label}|runtime"),
        _ => label,
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    match v {
        Some(0.0) => "0".into(),
        Some(v) => format!("{v:.3e}"),
        None => "-".into(),
    }
}

/// One comparison table. In a table that is shown, not judged (`judged` false), values beyond
/// the bound read `differs`, not `MISMATCH`: they decide nothing, and a passing run should not
/// look like a failing one.
fn table(s: &mut String, title: &str, rows: &[OutputComparison], judged: bool) {
    let _ = writeln!(s, "  {title}:");
    let name_w = rows.iter().map(|r| r.name.len()).max().unwrap_or(6).max(6);
    let by_w = rows
        .iter()
        .map(|r| judged_by(r).len())
        .max()
        .unwrap_or(2)
        .max(2);
    let _ = writeln!(
        s,
        "    {:<name_w$}  {:<9}  {:<16}  {:>10}  {:>10}  {:>10}  {:>10}  {:>12}  {:<by_w$}  {:>14}  status",
        "output", "dtype", "shape", "max_abs", "max_rel", "scale", "err/scale", "bound", "by", "mismatched"
    );
    for r in rows {
        let mut status = match r.status {
            Status::Mismatch if !judged => "differs".to_string(),
            _ => r.status.label().to_string(),
        };
        if let Some(d) = &r.detail {
            let _ = write!(status, " ({d})");
        }
        if let Some(w) = &r.worst {
            let _ = write!(
                status,
                " worst at {}: expected {}, got {}",
                fmt_shape(&w.index),
                w.expected,
                w.actual
            );
        }
        let bound = match (r.bound, r.judged_by.as_str()) {
            (Some(b), _) => fmt_opt(Some(b)),
            (None, "tolerance") => "atol+rtol|b|".into(),
            (None, _) => "-".into(),
        };
        let _ = writeln!(
            s,
            "    {:<name_w$}  {:<9}  {:<16}  {:>10}  {:>10}  {:>10}  {:>10}  {:>12}  {:<by_w$}  {:>14}  {status}",
            r.name,
            r.dtype,
            fmt_shape(&r.shape),
            fmt_err(r.max_abs_err, r.status),
            fmt_err(r.max_rel_err, r.status),
            fmt_opt(r.scale),
            fmt_opt(r.err_of_scale),
            bound,
            judged_by(r),
            format!("{}/{}", r.mismatched, r.elements),
        );
    }
}

/// The lines that say whether the original ran on the runtime, and how far the runtime
/// itself is from ONNX Runtime CPU.
fn original_on_runtime_text(s: &mut String, o: &OriginalOnRuntime) {
    let rt = o.runtime.name();
    let model = if o.ran { "original" } else { "rewritten model" };
    if let Some(why) = &o.reference {
        let _ = writeln!(
            s,
            "original:  ONNX Runtime CPU cannot run it ({why}); it ran on {rt}, and the rewrite is judged against it there, within the larger of the bound and the tolerance ({rt}'s own difference from ONNX Runtime CPU cannot be measured)"
        );
        return;
    }
    if !o.ran && o.measured_on == Some("rewritten") {
        let why = o.error.as_deref().unwrap_or("no reason given");
        let _ = writeln!(
            s,
            "original:  could not run on {rt}: {why}; the rewrite is judged on ONNX Runtime CPU (rewritten against original, at its bound), and {rt}'s own difference is measured on the rewritten model (on {rt} against ONNX Runtime CPU)"
        );
    } else if !o.ran {
        let why = o.error.as_deref().unwrap_or("no reason given");
        let _ = writeln!(
            s,
            "original:  could not run on {rt}: {why}; the rewrite is judged against the original on ONNX Runtime CPU, {rt}'s own difference unknown: within the larger of the bound and the tolerance"
        );
        return;
    } else {
        let _ = writeln!(
            s,
            "original:  ran on {rt} too; the rewrite is judged against it there, within the larger of the bound and twice {rt}'s own difference from ONNX Runtime CPU (it rounds both models)"
        );
    }
    let beyond = o
        .differences
        .iter()
        .filter(|d| d.status != Status::Ok)
        .count();
    let nonzero = o
        .differences
        .iter()
        .filter(|d| d.max_abs_err != Some(0.0))
        .count();
    if nonzero == 0 {
        let _ = writeln!(
            s,
            "runtime:   {rt} gives the {model}'s outputs exactly as ONNX Runtime CPU does"
        );
        return;
    }
    if beyond > 0 {
        let _ = writeln!(
            s,
            "runtime:   {rt} itself differs from ONNX Runtime CPU on {beyond} of {} output(s) of the {model}, beyond the bound (its own arithmetic; the verdict below says whether the rewrite is faithful):",
            o.differences.len()
        );
    } else {
        let _ = writeln!(
            s,
            "runtime:   {rt} differs from ONNX Runtime CPU on the {model}, within the bound:"
        );
    }
    for d in o.differences.iter().filter(|d| d.max_abs_err != Some(0.0)) {
        let by = match d.max_abs_err {
            Some(e) => format!("{e:.3e}"),
            None if d.status == Status::Mismatch => "inf (NaN or infinity)".into(),
            None => "-".into(),
        };
        let frac = d
            .err_of_scale
            .map(|f| format!(" ({f:.3e} of scale)"))
            .unwrap_or_default();
        // (Values beyond the bound are this line's subject, not a verdict: only a shape or
        // type that differs is named.)
        let status = match d.status {
            Status::Ok | Status::Mismatch => String::new(),
            other => format!(" ({})", other.label()),
        };
        let _ = writeln!(
            s,
            "  '{}': up to {by}{frac}; {} of {} element(s) beyond the bound{status}",
            d.output, d.mismatched, d.elements,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table shown, not judged (another runtime against ONNX Runtime CPU), says `differs`
    /// where a judged one says `MISMATCH`: a passing run shows no failure word.
    #[test]
    fn only_a_judged_table_says_mismatch() {
        let row = OutputComparison {
            name: "y".into(),
            status: Status::Mismatch,
            dtype: "float32".into(),
            shape: vec![2],
            actual_dtype: None,
            actual_shape: None,
            elements: 2,
            mismatched: 2,
            max_abs_err: Some(1e-6),
            max_rel_err: Some(1e-6),
            worst: None,
            detail: None,
            scale: Some(1.0),
            err_of_scale: Some(1e-6),
            bound: Some(0.0),
            bound_of_scale: Some(0.0),
            judged_by: "exact".into(),
            runtime_allowance: None,
            tolerance_floor: None,
            float64: None,
        };
        let mut shown = String::new();
        table(&mut shown, "shown", std::slice::from_ref(&row), false);
        assert!(shown.contains("2/2  differs"), "{shown}");
        assert!(!shown.contains("MISMATCH"), "{shown}");
        let mut judged = String::new();
        table(&mut judged, "judged", &[row], true);
        assert!(judged.contains("2/2  MISMATCH"), "{judged}");
    }
}
