//! The result of a verification, serialisable to JSON and printable as text.

use std::fmt::Write as _;

use serde::Serialize;

use super::compare::{OutputComparison, Status, Tolerance};
use super::external::ExternalInfo;
use super::inputs::{InputPlan, ValueRange};
use super::tensor::fmt_shape;

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
    Random { seed: u64, plan: Vec<InputPlan> },
    File { path: String },
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
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyReport {
    pub original: String,
    pub rewritten: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    pub onnxruntime: RuntimeInfo,
    pub tolerance: Tolerance,
    /// Where the rewritten model ran when not on ONNX Runtime's CPU provider in process
    /// (`--runtime webgpu|openvino`); `onnxruntime` is then the reference's runtime only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rewritten_runtime: Option<ExternalInfo>,
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
                let _ = writeln!(
                    s,
                    "reference: original on onnxruntime {} ({}), CPU provider",
                    self.onnxruntime.version, self.onnxruntime.library
                );
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
            InputSource::Random { seed, plan } => {
                let parts: Vec<String> = plan
                    .iter()
                    .map(|p| {
                        let range = match p.range {
                            ValueRange::Float { lo, hi } => format!(" in [{lo}, {hi})"),
                            ValueRange::Int { lo, hi } => format!(" in [{lo}, {hi})"),
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
        let _ = writeln!(
            s,
            "tolerance: |a-b| <= {:e} + {:e}*|b| (b: reference)",
            self.tolerance.atol, self.tolerance.rtol
        );
        for run in &self.runs {
            match run.seed {
                Some(seed) => {
                    let _ = writeln!(s, "run {} (seed {seed:#x}):", run.run);
                }
                None => {
                    let _ = writeln!(s, "run {}:", run.run);
                }
            }
            table(&mut s, "rewritten vs original", &run.outputs);
            if !run.expected.is_empty() {
                table(&mut s, "rewritten vs expected", &run.expected);
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

fn table(s: &mut String, title: &str, rows: &[OutputComparison]) {
    let _ = writeln!(s, "  {title}:");
    let name_w = rows.iter().map(|r| r.name.len()).max().unwrap_or(6).max(6);
    let _ = writeln!(
        s,
        "    {:<name_w$}  {:<9}  {:<16}  {:>10}  {:>10}  {:>14}  status",
        "output", "dtype", "shape", "max_abs", "max_rel", "mismatched"
    );
    for r in rows {
        let mut status = r.status.label().to_string();
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
        let _ = writeln!(
            s,
            "    {:<name_w$}  {:<9}  {:<16}  {:>10}  {:>10}  {:>14}  {status}",
            r.name,
            r.dtype,
            fmt_shape(&r.shape),
            fmt_err(r.max_abs_err, r.status),
            fmt_err(r.max_rel_err, r.status),
            format!("{}/{}", r.mismatched, r.elements),
        );
    }
}
